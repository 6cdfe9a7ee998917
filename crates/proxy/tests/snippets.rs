//! ingress-nginx's `configuration-snippet` and `server-snippet` (annotations doc, sections
//! "Configuration snippet" and "Server snippet"), interpreted, through the real proxy and
//! real echo backends: each directive's effect on requests, the refused directive's Event,
//! the fail-closed 503, and the ConfigMap switch (`allow-snippet-annotations` with
//! `annotations-risk-level: Critical`, as ingress-nginx >= 1.12 requires) off.
//! Every case runs as a bodiless GET (sluice's own HTTP/1.1 loop) and as a POST with a body
//! (hyper's path).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::Full;
use k8s_openapi::api::core::v1::ConfigMap;
use sluice_echo::{EchoServer, POD_HEADER};
use sluice_proxy::ProxyArgs;
use sluice_routing::{CompileOptions, Compiled, Diagnostic, Reason, compile};

const NGINX: &str = "nginx.ingress.kubernetes.io/";

/// A request of each front end's kind: (label, method, body).
const SHAPES: [(&str, &str, &str); 2] =
    [("own loop GET", "GET", ""), ("hyper POST", "POST", "x=1")];

/// The ingress-nginx ConfigMap with the two keys that allow snippets.
fn allowing() -> ConfigMap {
    config_map(&[
        ("allow-snippet-annotations", "true"),
        ("annotations-risk-level", "Critical"),
    ])
}

fn config_map(data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": "ingress-nginx", "name": "ingress-nginx-controller"},
        "data": data.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<std::collections::BTreeMap<_, _>>(),
    }))
    .expect("a ConfigMap")
}

fn annotated(mut route: Route, annotations: &[(&str, &str)]) -> Route {
    for (key, value) in annotations {
        route = route.with_annotation(&format!("{NGINX}{key}"), value);
    }
    route
}

/// Compiles `routes` with `config` as ingress-nginx's ConfigMap and installs the table.
fn install(proxy: &TestProxy, routes: &[Route], config: Option<ConfigMap>) -> Compiled {
    let mut inputs = inputs(routes);
    inputs.nginx_config_map = config.map(Arc::new);
    let mut compiled = compile(&inputs, &CompileOptions::default());
    let table = std::mem::take(&mut compiled.table);
    proxy.table.update(table, Duration::from_millis(1));
    compiled
}

/// A proxy with one echo backend for `host`, the annotations on its Ingress, snippets
/// allowed.
async fn proxy_with(host: &str, annotations: &[(&str, &str)]) -> (TestProxy, EchoServer, Compiled) {
    let backend = echo("web", "web-0").await;
    let proxy = TestProxy::start(ProxyArgs::loopback()).await;
    let route = annotated(Route::new(host, "web", vec![backend.addr()]), annotations);
    let compiled = install(&proxy, &[route], Some(allowing()));
    (proxy, backend, compiled)
}

async fn request(
    proxy: &TestProxy,
    (method, body): (&str, &str),
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut sender = http1_connect(proxy.http).await;
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    send(&mut sender, request).await
}

fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
    answer.headers.get(name).map(|v| v.to_str().unwrap())
}

fn snippet_events(compiled: &Compiled) -> Vec<&Diagnostic> {
    compiled
        .diagnostics
        .iter()
        .filter(|d| d.field.contains("-snippet"))
        .collect()
}

/// "Configuration snippet": headers-more's `more_set_headers` (constants and variables),
/// `more_clear_headers` with a wildcard, and nginx's `add_header` only on its statuses
/// unless `always`.
#[tokio::test]
async fn configuration_snippet_sets_clears_and_adds_response_fields() {
    init_tracing();
    bounded(async {
        let snippet = "more_set_headers 'X-Frame-Options: DENY';\n\
                       more_set_headers \"ExpectedHost: $http_host\";\n\
                       more_clear_headers 'X-Echo-*';\n\
                       add_header X-On-Success yes;\n\
                       add_header X-Always yes always;";
        let (proxy, _backend, compiled) =
            proxy_with("snip.example", &[("configuration-snippet", snippet)]).await;
        assert!(
            snippet_events(&compiled).is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        for (label, method, body) in SHAPES {
            let ok = request(&proxy, (method, body), "snip.example", "/", &[]).await;
            assert_eq!(ok.status, 200, "{label}");
            assert_eq!(header(&ok, "x-frame-options"), Some("DENY"), "{label}");
            assert_eq!(header(&ok, "expectedhost"), Some("snip.example"), "{label}");
            assert_eq!(
                header(&ok, POD_HEADER),
                None,
                "{label}: cleared by X-Echo-*"
            );
            assert_eq!(header(&ok, "x-on-success"), Some("yes"), "{label}");
            assert_eq!(header(&ok, "x-always"), Some("yes"), "{label}");
            // nginx `add_header` skips a 404 unless `always`.
            let missing = request(&proxy, (method, body), "snip.example", "/status/404", &[]).await;
            assert_eq!(missing.status, 404, "{label}");
            assert_eq!(header(&missing, "x-on-success"), None, "{label}");
            assert_eq!(header(&missing, "x-always"), Some("yes"), "{label}");
        }
        proxy.shutdown().await;
    })
    .await;
}

/// "Configuration snippet": `proxy_set_header` (a constant, a variable, an empty value
/// removing the field) and `more_set_input_headers` reach the backend.
#[tokio::test]
async fn configuration_snippet_sets_request_fields_for_the_backend() {
    init_tracing();
    bounded(async {
        let snippet = "proxy_set_header X-Team blue;\n\
                       proxy_set_header X-Original-Uri $request_uri;\n\
                       proxy_set_header X-Drop '';\n\
                       more_set_input_headers 'pathType: prefix';";
        let (proxy, _backend, compiled) =
            proxy_with("req.example", &[("configuration-snippet", snippet)]).await;
        assert!(
            snippet_events(&compiled).is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        for (label, method, body) in SHAPES {
            let answer = request(
                &proxy,
                (method, body),
                "req.example",
                "/a?b=1",
                &[("x-drop", "secret")],
            )
            .await;
            let report = answer.report();
            assert_eq!(
                report.headers.get("x-team").map(String::as_str),
                Some("blue"),
                "{label}"
            );
            assert_eq!(
                report.headers.get("x-original-uri").map(String::as_str),
                Some("/a?b=1"),
                "{label}"
            );
            assert_eq!(report.headers.get("x-drop"), None, "{label}");
            assert_eq!(
                report.headers.get("pathtype").map(String::as_str),
                Some("prefix"),
                "{label}"
            );
        }
        proxy.shutdown().await;
    })
    .await;
}

/// "Configuration snippet": nginx `return` (a redirect with a URL, a text body) and
/// `rewrite` (the path sent upstream with `break`, redirects with `permanent` and an
/// absolute replacement).
#[tokio::test]
async fn configuration_snippet_return_and_rewrite() {
    init_tracing();
    bounded(async {
        let snippet = "rewrite ^/old/(.*)$ /new/$1 break;\n\
                       rewrite ^/moved$ /here permanent;\n\
                       rewrite ^/away/(.*)$ https://other.example/$1;\n\
                       if ($request_uri ~ ^/health) { return 200 'ok $host'; }\n\
                       if ($http_x_mobile ~* ^yes$) { return 301 https://m.example$request_uri; }";
        let (proxy, _backend, compiled) =
            proxy_with("rw.example", &[("configuration-snippet", snippet)]).await;
        assert!(
            snippet_events(&compiled).is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        for (label, method, body) in SHAPES {
            let go = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
                request(&proxy, (method, body), "rw.example", path, headers)
            };
            let rewritten = go("/old/x/y?q=1", &[]).await;
            assert_eq!(rewritten.status, 200, "{label}");
            let report = rewritten.report();
            assert_eq!(report.path, "/new/x/y", "{label}");
            assert_eq!(report.query.as_deref(), Some("q=1"), "{label}");

            let moved = go("/moved?k=v", &[]).await;
            assert_eq!(moved.status, 301, "{label}");
            assert_eq!(
                header(&moved, "location"),
                Some("http://rw.example/here?k=v"),
                "{label}"
            );

            let away = go("/away/p", &[]).await;
            assert_eq!(away.status, 302, "{label}");
            assert_eq!(
                header(&away, "location"),
                Some("https://other.example/p"),
                "{label}"
            );

            let health = go("/health", &[]).await;
            assert_eq!(health.status, 200, "{label}");
            assert_eq!(health.text(), "ok rw.example", "{label}");

            let mobile = go("/shop?x=1", &[("x-mobile", "YES")]).await;
            assert_eq!(mobile.status, 301, "{label}");
            assert_eq!(
                header(&mobile, "location"),
                Some("https://m.example/shop?x=1"),
                "{label}"
            );

            // Nothing matched: the backend answers with the path as sent.
            let plain = go("/plain", &[]).await;
            assert_eq!(plain.report().path, "/plain", "{label}");
        }
        proxy.shutdown().await;
    })
    .await;
}

/// "Configuration snippet": a directive sluice does not interpret gets a `SnippetRefused`
/// Event naming it and its line, and the rest of the snippet still applies.
#[tokio::test]
async fn configuration_snippet_refused_directive_is_named_and_the_rest_applies() {
    init_tracing();
    bounded(async {
        let snippet = "more_set_headers 'X-Kept: 1';\nproxy_cache_valid 200 10m;";
        let (proxy, _backend, compiled) =
            proxy_with("part.example", &[("configuration-snippet", snippet)]).await;
        let events = snippet_events(&compiled);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].reason, Reason::SnippetRefused);
        assert!(
            events[0].message.contains("line 2") && events[0].message.contains("proxy_cache_valid"),
            "{}",
            events[0].message
        );
        for (label, method, body) in SHAPES {
            let answer = request(&proxy, (method, body), "part.example", "/", &[]).await;
            assert_eq!(answer.status, 200, "{label}");
            assert_eq!(header(&answer, "x-kept"), Some("1"), "{label}");
        }
        proxy.shutdown().await;
    })
    .await;
}

/// A refused directive that restricts access (`deny`, or `return 403` in an `if` sluice
/// cannot read) closes the route: 503 and a `FailedClosed` Event, as `fail_closed.rs`.
#[tokio::test]
async fn configuration_snippet_refused_access_rule_fails_closed() {
    init_tracing();
    bounded(async {
        for snippet in [
            "more_set_headers 'X-A: 1';\ndeny 192.0.2.0/24;",
            "if ($cookie_token != \"s3cret\") { return 403; }",
        ] {
            let (proxy, _backend, compiled) =
                proxy_with("closed.example", &[("configuration-snippet", snippet)]).await;
            let events = snippet_events(&compiled);
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].reason, Reason::FailedClosed, "{snippet}");
            for (label, method, body) in SHAPES {
                let answer = request(&proxy, (method, body), "closed.example", "/", &[]).await;
                assert_eq!(answer.status, 503, "{label}: {snippet}");
            }
            proxy.shutdown().await;
        }
    })
    .await;
}

/// ingress-nginx: snippets need `allow-snippet-annotations: "true"` and (>= 1.12)
/// `annotations-risk-level: Critical`; without either, the snippet is refused and the
/// Event says how to allow it.
#[tokio::test]
async fn snippets_are_refused_unless_the_configmap_allows_them() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let route = annotated(
            Route::new("off.example", "web", vec![backend.addr()]),
            &[("configuration-snippet", "more_set_headers 'X-Snippet: on';")],
        );
        let only_allow = config_map(&[("allow-snippet-annotations", "true")]);
        let only_risk = config_map(&[("annotations-risk-level", "Critical")]);
        for config in [None, Some(only_allow), Some(only_risk)] {
            let compiled = install(&proxy, std::slice::from_ref(&route), config);
            let events = snippet_events(&compiled);
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].reason, Reason::SnippetRefused);
            assert!(
                events[0].message.contains("allow-snippet-annotations"),
                "{}",
                events[0].message
            );
            for (label, method, body) in SHAPES {
                let answer = request(&proxy, (method, body), "off.example", "/", &[]).await;
                assert_eq!(answer.status, 200, "{label}");
                assert_eq!(header(&answer, "x-snippet"), None, "{label}");
            }
        }
        // Both on: applied.
        install(&proxy, std::slice::from_ref(&route), Some(allowing()));
        let answer = request(&proxy, ("GET", ""), "off.example", "/", &[]).await;
        assert_eq!(header(&answer, "x-snippet"), Some("on"));
        proxy.shutdown().await;
    })
    .await;
}

/// "Server snippet": it applies to every path of the host, those of other Ingresses
/// included, and only the oldest Ingress's counts ("can be used only once per host").
#[tokio::test]
async fn server_snippet_applies_to_every_path_of_the_host_oldest_ingress_wins() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let first = annotated(
            Route::new("srv.example", "web", vec![backend.addr()]).with_path("/a"),
            &[(
                "server-snippet",
                "more_set_headers 'Foo: Bar';\n\
                 if ($http_user_agent ~* \"(Mobile)\") { return 301 https://m.example; }",
            )],
        );
        let second = annotated(
            Route::new("srv.example", "web", vec![backend.addr()]).with_path("/b"),
            &[("server-snippet", "more_set_headers 'Foo: Second';")],
        );
        let compiled = install(&proxy, &[first, second], Some(allowing()));
        let events = snippet_events(&compiled);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].object.name, "ing-1");
        for (label, method, body) in SHAPES {
            for path in ["/a", "/b"] {
                let answer = request(&proxy, (method, body), "srv.example", path, &[]).await;
                assert_eq!(answer.status, 200, "{label} {path}");
                assert_eq!(header(&answer, "foo"), Some("Bar"), "{label} {path}");
                let mobile = request(
                    &proxy,
                    (method, body),
                    "srv.example",
                    path,
                    &[("user-agent", "x Mobile y")],
                )
                .await;
                assert_eq!(mobile.status, 301, "{label} {path}");
                assert_eq!(
                    header(&mobile, "location"),
                    Some("https://m.example"),
                    "{label}"
                );
            }
        }
        proxy.shutdown().await;
    })
    .await;
}

/// "Server snippet": a refused directive that restricts access would restrict the whole
/// nginx server, so every path of the host closes (503), other Ingresses' paths included.
#[tokio::test]
async fn server_snippet_refused_access_rule_closes_every_path_of_the_host() {
    init_tracing();
    bounded(async {
        let backend = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let first = annotated(
            Route::new("guarded.example", "web", vec![backend.addr()]).with_path("/a"),
            &[("server-snippet", "allow 10.0.0.0/8;\ndeny all;")],
        );
        let second = Route::new("guarded.example", "web", vec![backend.addr()]).with_path("/b");
        let other = Route::new("open.example", "web", vec![backend.addr()]);
        let compiled = install(&proxy, &[first, second, other], Some(allowing()));
        let events = snippet_events(&compiled);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].reason, Reason::FailedClosed);
        for (label, method, body) in SHAPES {
            for path in ["/a", "/b"] {
                let answer = request(&proxy, (method, body), "guarded.example", path, &[]).await;
                assert_eq!(answer.status, 503, "{label} {path}");
            }
            let open = request(&proxy, (method, body), "open.example", "/", &[]).await;
            assert_eq!(open.status, 200, "{label}: another host is not affected");
        }
        proxy.shutdown().await;
    })
    .await;
}
