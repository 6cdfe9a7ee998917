//! Gateway API HTTPRoute behaviour through the real proxy: weighted `backendRefs`,
//! `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`, `URLRewrite.path`,
//! `timeouts.request` / `timeouts.backendRequest` and `RequestMirror`.
//!
//! Tables are compiled from Ingresses (as the other tests do) and their entries then given
//! the Gateway API slots of the route IR with `RouteTable::map_entries`, since the Gateway
//! compiler is not part of this crate. Every case runs as a bodiless GET (sluice's own
//! HTTP/1.1 loop) and as a POST with a body (hyper's path) where both apply: both front
//! ends must behave alike.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluice_proxy::ProxyArgs;
use sluice_routing::{
    Backend, Mirror, PathRewrite, Policy, RequestRedirect, RouteEntry, WeightedBackend,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// A request of each front end's kind: (label, method, body).
const SHAPES: [(&str, &str, &str); 2] =
    [("own loop GET", "GET", ""), ("hyper POST", "POST", "x=1")];

/// Sends `method path` with `Host: host`, extra `headers` and `body` on `sender`.
async fn request_on(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    (method, body): (&str, &str),
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
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
    send(sender, request).await
}

/// The same on a fresh connection to the proxy.
async fn request(
    proxy: &TestProxy,
    shape: (&str, &str),
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut sender = http1_connect(proxy.http).await;
    request_on(&mut sender, shape, host, path, headers).await
}

/// The table's backends by Service name.
type Backends = BTreeMap<String, Arc<Backend>>;

/// Installs the table compiled from `routes`, each entry passed through `change` (with the
/// table's backends by Service name).
fn install(
    proxy: &TestProxy,
    routes: &[Route],
    mut change: impl FnMut(&Backends, &mut RouteEntry),
) {
    let table = table(routes);
    let backends: Backends = table
        .backends()
        .iter()
        .map(|b| (b.service.name.clone(), Arc::clone(b)))
        .collect();
    let table = table.map_entries(|entry| change(&backends, entry));
    proxy.table.update(table, Duration::from_millis(1));
}

/// The entry's policy with `edit` applied (policies are shared: a new one is built).
fn edit_policy(entry: &mut RouteEntry, edit: impl FnOnce(&mut Policy)) {
    let mut policy = (*entry.policy).clone();
    edit(&mut policy);
    entry.policy = Arc::new(policy);
}

fn name(text: &str) -> HeaderName {
    HeaderName::from_bytes(text.as_bytes()).unwrap()
}

fn field(n: &str, v: &str) -> (HeaderName, HeaderValue) {
    (name(n), HeaderValue::from_str(v).unwrap())
}

fn weighted(backend: &Arc<Backend>, weight: u32, usable: bool) -> WeightedBackend {
    WeightedBackend {
        backend: Arc::clone(backend),
        weight,
        usable,
        entry: None,
    }
}

fn pod(answer: &Answer) -> String {
    answer
        .headers
        .get("x-echo-pod")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Gateway API HTTPRoute `backendRefs[].weight`: "the proportion of requests forwarded
/// to the referenced backend is weight divided by the sum of all weights"; weight 0 is
/// never chosen.
#[tokio::test]
async fn gateway_backend_refs_weights_split_requests_and_weight_zero_is_never_chosen() {
    init_tracing();
    bounded(async {
        let a = echo("a", "a-0").await;
        let b = echo("b", "b-0").await;
        let c = echo("c", "c-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("split.example", "a", vec![a.addr()]),
            Route::new("b.example", "b", vec![b.addr()]),
            Route::new("c.example", "c", vec![c.addr()]),
        ];
        install(&proxy, &routes, |backends, entry| {
            if entry.backend.service.name == "a" {
                entry.split = vec![
                    weighted(&backends["a"], 3, true),
                    weighted(&backends["b"], 1, true),
                    weighted(&backends["c"], 0, true),
                ];
            }
        });
        let mut counts: BTreeMap<(String, &str), u32> = BTreeMap::new();
        for (label, method, body) in SHAPES {
            let mut sender = http1_connect(proxy.http).await;
            for _ in 0..200 {
                let answer =
                    request_on(&mut sender, (method, body), "split.example", "/", &[]).await;
                assert_eq!(answer.status, 200, "{label}: {}", answer.text());
                *counts.entry((pod(&answer), label)).or_default() += 1;
            }
        }
        for (label, _, _) in SHAPES {
            let of = |pod: &str| counts.get(&(pod.to_owned(), label)).copied().unwrap_or(0);
            assert_eq!(of("c-0"), 0, "{label}: weight 0 was chosen: {counts:?}");
            assert_eq!(of("a-0") + of("b-0"), 200, "{label}: {counts:?}");
            // 150 / 50 expected of 200; standard deviation ~6.1: 5 sigma either way.
            assert!((119..=181).contains(&of("a-0")), "{label}: {counts:?}");
            assert!((19..=81).contains(&of("b-0")), "{label}: {counts:?}");
        }
        // Each backendRef's requests are counted under its own Service, not the first's.
        let (_, text) = admin_get(proxy.admin, "/metrics").await;
        let counted = |service: &str| -> u64 {
            text.lines()
                .filter(|line| {
                    line.starts_with("sluice_requests_total{")
                        && line.contains(&format!("service=\"default/{service}:80\""))
                        && line.contains("host=\"split.example\"")
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        let of = |pod: &str| -> u64 {
            SHAPES
                .iter()
                .map(|(label, _, _)| {
                    u64::from(counts.get(&(pod.to_owned(), *label)).copied().unwrap_or(0))
                })
                .sum()
        };
        assert_eq!(counted("a"), of("a-0"), "{text}");
        assert_eq!(counted("b"), of("b-0"), "{text}");
    })
    .await;
}

/// Gateway API HTTPRoute `backendRefs`: "requests that would have been sent to an invalid
/// backend must receive a 500"; a rule whose backends are all unusable answers 500
/// itself (`fixed_status`), after a `RequestRedirect`; a usable backend without ready
/// endpoints answers 503 as any route does.
#[tokio::test]
async fn gateway_invalid_backend_ref_answers_500_fixed_status_after_redirects() {
    init_tracing();
    bounded(async {
        let a = echo("a", "a-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("invalid.example", "invalid", vec![a.addr()]),
            Route::new("half.example", "half", vec![a.addr()]),
            Route::new("fixed.example", "fixed", vec![a.addr()]),
            Route::new("fixed-redirect.example", "fixed-redirect", vec![a.addr()]),
            Route::new("empty.example", "empty", vec![]),
            Route::new("a.example", "a", vec![a.addr()]),
        ];
        install(&proxy, &routes, |backends, entry| {
            match entry.backend.service.name.as_str() {
                "invalid" => entry.split = vec![weighted(&backends["invalid"], 1, false)],
                "half" => {
                    entry.split = vec![
                        weighted(&backends["invalid"], 1, false),
                        weighted(&backends["a"], 1, true),
                    ]
                }
                "fixed" => entry.fixed_status = Some(500),
                "fixed-redirect" => {
                    entry.fixed_status = Some(500);
                    edit_policy(entry, |p| {
                        p.request_redirect = Some(RequestRedirect {
                            scheme: Some("https".into()),
                            hostname: None,
                            port: None,
                            path: None,
                            status: 302,
                            listener_port: 80,
                        })
                    });
                }
                "empty" => entry.split = vec![weighted(&backends["empty"], 1, true)],
                _ => {}
            }
        });
        for (label, method, body) in SHAPES {
            let shape = (method, body);
            let invalid = request(&proxy, shape, "invalid.example", "/", &[]).await;
            assert_eq!(invalid.status, 500, "{label}: unusable backendRef");
            let fixed = request(&proxy, shape, "fixed.example", "/", &[]).await;
            assert_eq!(fixed.status, 500, "{label}: fixed_status");
            let redirected = request(&proxy, shape, "fixed-redirect.example", "/p", &[]).await;
            assert_eq!(
                redirected.status, 302,
                "{label}: redirect before fixed_status"
            );
            assert_eq!(
                redirected.headers["location"], "https://fixed-redirect.example/p",
                "{label}"
            );
            let empty = request(&proxy, shape, "empty.example", "/", &[]).await;
            assert_eq!(empty.status, 503, "{label}: no ready endpoints");
            // Half the requests drawn for the invalid reference: both answers seen.
            let mut statuses = BTreeMap::new();
            let mut sender = http1_connect(proxy.http).await;
            for _ in 0..60 {
                let answer = request_on(&mut sender, shape, "half.example", "/", &[]).await;
                *statuses.entry(answer.status.as_u16()).or_insert(0u32) += 1;
            }
            assert_eq!(
                statuses.keys().copied().collect::<Vec<_>>(),
                [200, 500],
                "{label}"
            );
        }
    })
    .await;
}

/// Gateway API `RequestHeaderModifier`: `set` replaces, `add` appends to the client's
/// value, `remove` drops the field; names are case-insensitive and the order is set, add,
/// remove (a field both set and removed is not sent).
#[tokio::test]
async fn gateway_request_header_modifier_set_add_remove_reach_the_backend() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [Route::new("headers.example", "web", vec![web.addr()])];
        install(&proxy, &routes, |_, entry| {
            edit_policy(entry, |p| {
                p.request_headers = vec![field("x-set", "new"), field("x-both", "set")];
                p.request_headers_add = vec![field("x-add", "two"), field("x-fresh", "added")];
                p.request_headers_remove = vec![name("x-remove"), name("X-Both")];
            })
        });
        let sent = [
            ("x-set", "old"),
            ("X-Add", "one"),
            ("X-REMOVE", "gone"),
            ("x-keep", "kept"),
        ];
        for (label, method, body) in SHAPES {
            let answer = request(&proxy, (method, body), "headers.example", "/h", &sent).await;
            assert_eq!(answer.status, 200, "{label}");
            let seen = answer.report().headers;
            assert_eq!(
                seen.get("x-set").map(String::as_str),
                Some("new"),
                "{label}"
            );
            assert_eq!(
                seen.get("x-add").map(String::as_str),
                Some("one, two"),
                "{label}"
            );
            assert_eq!(
                seen.get("x-fresh").map(String::as_str),
                Some("added"),
                "{label}"
            );
            assert_eq!(
                seen.get("x-keep").map(String::as_str),
                Some("kept"),
                "{label}"
            );
            assert!(!seen.contains_key("x-remove"), "{label}: {seen:?}");
            assert!(!seen.contains_key("x-both"), "{label}: {seen:?}");
        }
    })
    .await;
}

/// Gateway API `ResponseHeaderModifier`: the client sees the upstream's response with
/// fields set (replaced), added (appended) and removed.
#[tokio::test]
async fn gateway_response_header_modifier_set_add_remove_reach_the_client() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [Route::new("resp.example", "web", vec![web.addr()])];
        install(&proxy, &routes, |_, entry| {
            edit_policy(entry, |p| {
                p.response_headers = vec![field("x-set", "s"), field("x-set-removed", "s")];
                p.response_headers_add = vec![field("x-echo-pod", "extra"), field("x-new", "n")];
                p.response_headers_remove = vec![name("Content-Type"), name("x-set-removed")];
            })
        });
        for (label, method, body) in SHAPES {
            let answer = request(&proxy, (method, body), "resp.example", "/r", &[]).await;
            assert_eq!(answer.status, 200, "{label}");
            let h = &answer.headers;
            assert_eq!(h.get("x-set").unwrap(), "s", "{label}");
            let pods: Vec<_> = h.get_all("x-echo-pod").iter().collect();
            assert_eq!(pods, ["web-0", "extra"], "{label}: add appends");
            assert_eq!(h.get("x-new").unwrap(), "n", "{label}");
            assert!(h.get("content-type").is_none(), "{label}: {h:?}");
            assert!(h.get("x-set-removed").is_none(), "{label}: {h:?}");
            // The body is the upstream's, untouched.
            assert_eq!(answer.report().path, "/r", "{label}");
        }
    })
    .await;
}

fn redirect(scheme: Option<&str>, port: Option<u16>, listener_port: u16) -> RequestRedirect {
    RequestRedirect {
        scheme: scheme.map(str::to_owned),
        hostname: None,
        port,
        path: None,
        status: 301,
        listener_port,
    }
}

/// Gateway API `RequestRedirect`: status 301/302, scheme, hostname and path replaced, and
/// the spec's port derivation (the port if set, else the scheme's well-known one when the
/// scheme is set, else the listener's; left out when well-known for the scheme).
#[tokio::test]
async fn gateway_request_redirect_scheme_hostname_path_and_port_derivation() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let hosts = [
            "https.example",
            "port.example",
            "listener.example",
            "host.example",
            "prefix.example",
            "full.example",
        ];
        let routes: Vec<Route> = hosts
            .iter()
            .map(|h| Route::new(h, h.trim_end_matches(".example"), vec![web.addr()]))
            .collect();
        install(&proxy, &routes, |_, entry| {
            let r = match entry.backend.service.name.as_str() {
                "https" => redirect(Some("https"), None, 80),
                "port" => redirect(Some("https"), Some(8443), 80),
                "listener" => redirect(None, None, 8080),
                "host" => RequestRedirect {
                    hostname: Some("elsewhere.example".into()),
                    status: 302,
                    ..redirect(None, None, 80)
                },
                "prefix" => RequestRedirect {
                    path: Some(PathRewrite::Prefix {
                        matched: "/a".into(),
                        replacement: "/x".into(),
                    }),
                    ..redirect(None, None, 80)
                },
                "full" => RequestRedirect {
                    path: Some(PathRewrite::Full("/full".into())),
                    ..redirect(None, None, 80)
                },
                _ => return,
            };
            edit_policy(entry, |p| p.request_redirect = Some(r));
        });
        let cases = [
            ("https.example:8080", 301, "https://https.example/a/b?q=1"),
            ("port.example", 301, "https://port.example:8443/a/b?q=1"),
            (
                "listener.example",
                301,
                "http://listener.example:8080/a/b?q=1",
            ),
            ("host.example:8080", 302, "http://elsewhere.example/a/b?q=1"),
            ("prefix.example", 301, "http://prefix.example/x/b?q=1"),
            ("full.example", 301, "http://full.example/full?q=1"),
        ];
        for (label, method, body) in SHAPES {
            for (host, status, location) in cases {
                let answer = request(&proxy, (method, body), host, "/a/b?q=1", &[]).await;
                assert_eq!(answer.status, status, "{label} {host}");
                assert_eq!(answer.headers["location"], location, "{label} {host}");
            }
        }
    })
    .await;
}

/// Gateway API `URLRewrite.path`: `ReplacePrefixMatch` replaces the matched prefix (whole
/// path elements), `ReplaceFullPath` the whole path; the query is kept.
#[tokio::test]
async fn gateway_url_rewrite_path_prefix_and_full_keep_the_query() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("rw.example", "prefix", vec![web.addr()]).with_path("/api"),
            Route::new("root.example", "root", vec![web.addr()]).with_path("/api"),
            Route::new("full.example", "full", vec![web.addr()]),
        ];
        install(&proxy, &routes, |_, entry| {
            let rewrite = match entry.backend.service.name.as_str() {
                "prefix" => PathRewrite::Prefix {
                    matched: "/api".into(),
                    replacement: "/v2".into(),
                },
                "root" => PathRewrite::Prefix {
                    matched: "/api".into(),
                    replacement: "/".into(),
                },
                "full" => PathRewrite::Full("/fixed".into()),
                _ => return,
            };
            edit_policy(entry, |p| p.path_rewrite = Some(rewrite));
        });
        let cases = [
            ("rw.example", "/api/items?x=1", "/v2/items", Some("x=1")),
            ("rw.example", "/api", "/v2", None),
            ("root.example", "/api/items?y=2", "/items", Some("y=2")),
            ("root.example", "/api", "/", None),
            ("full.example", "/any/thing?z=3", "/fixed", Some("z=3")),
        ];
        for (label, method, body) in SHAPES {
            for (host, target, path, query) in cases {
                let answer = request(&proxy, (method, body), host, target, &[]).await;
                assert_eq!(answer.status, 200, "{label} {host}{target}");
                let report = answer.report();
                assert_eq!(report.path, path, "{label} {host}{target}");
                assert_eq!(report.query.as_deref(), query, "{label} {host}{target}");
                assert_eq!(report.host.as_deref(), Some(host), "{label}");
            }
        }
    })
    .await;
}

/// Gateway API HTTPRoute `timeouts.request` (the whole request, retries included, until
/// the response head) and `timeouts.backendRequest` (each try): a backend that stalls its
/// response head past them gets the client a 504 in bounded time; a quick one is answered.
#[tokio::test]
async fn gateway_timeouts_request_and_backend_request_answer_504_in_time() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("request.example", "request", vec![web.addr()]),
            Route::new("try.example", "try", vec![web.addr()]),
            Route::new("tries.example", "tries", vec![web.addr()]),
        ];
        install(&proxy, &routes, |_, entry| {
            let name = entry.backend.service.name.clone();
            edit_policy(entry, |p| match name.as_str() {
                "request" => p.request_timeout = Some(Duration::from_millis(300)),
                "try" => {
                    p.backend_request_timeout = Some(Duration::from_millis(300));
                    p.next_upstream.tries = 1;
                }
                "tries" => {
                    // Three tries of 400 ms would take 1.2 s: the request timeout ends it.
                    p.backend_request_timeout = Some(Duration::from_millis(400));
                    p.request_timeout = Some(Duration::from_millis(600));
                    p.next_upstream.tries = 3;
                }
                _ => {}
            });
        });
        for (label, method, body) in SHAPES {
            for host in ["request.example", "try.example", "tries.example"] {
                let started = Instant::now();
                let answer = request(&proxy, (method, body), host, "/delay/5000", &[]).await;
                let took = started.elapsed();
                assert_eq!(answer.status, 504, "{label} {host}: {}", answer.text());
                assert!(
                    took >= Duration::from_millis(250),
                    "{label} {host}: {took:?}"
                );
                let bound = Duration::from_millis(1_100);
                assert!(took < bound, "{label} {host}: took {took:?}");
                let quick = request(&proxy, (method, body), host, "/delay/10", &[]).await;
                assert_eq!(quick.status, 200, "{label} {host}");
            }
        }
    })
    .await;
}

/// A backend that records the head of every request it gets and answers 200.
async fn recorder() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).to_lowercase());
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (addr, heads)
}

/// Waits (bounded) until `heads` holds `n` entries.
async fn wait_for(heads: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = heads.lock().unwrap().clone();
        if now.len() >= n || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of `sluice_mirror_requests_total{result=...}` on the admin listener.
async fn mirror_count(proxy: &TestProxy, result: &str) -> u64 {
    let (_, text) = admin_get(proxy.admin, "/metrics").await;
    let series = format!("sluice_mirror_requests_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in metrics"))
}

/// Gateway API `RequestMirror`: a copy of the request (the client's Host, path and query,
/// the route's header changes) goes to the mirror backend and its answer is discarded; the
/// client gets the primary's answer. Bodiless requests are copied on both front ends;
/// requests with a body are not (counted as `skipped`).
#[tokio::test]
async fn gateway_request_mirror_copies_reach_the_mirror_and_the_client_gets_the_primary() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let (mirror_addr, heads) = recorder().await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("mirrored.example", "web", vec![web.addr()]),
            Route::new("mirror.example", "mirror", vec![mirror_addr]),
        ];
        install(&proxy, &routes, |backends, entry| {
            if entry.backend.service.name == "web" {
                entry.mirrors = vec![Mirror {
                    backend: Arc::clone(&backends["mirror"]),
                    numerator: 1,
                    denominator: 1,
                }];
                edit_policy(entry, |p| {
                    p.request_headers_add = vec![field("x-added", "1")]
                });
            }
        });
        // Own loop: a bodiless GET.
        let answer = request(&proxy, ("GET", ""), "mirrored.example", "/m?x=1", &[]).await;
        assert_eq!(answer.status, 200);
        assert_eq!(
            pod(&answer),
            "web-0",
            "the client gets the primary's answer"
        );
        let seen = wait_for(&heads, 1).await;
        assert_eq!(seen.len(), 1, "the mirror got one copy: {seen:?}");
        assert!(seen[0].starts_with("get /m?x=1 http/1.1\r\n"), "{seen:?}");
        assert!(
            seen[0].contains("\r\nhost: mirrored.example\r\n"),
            "{seen:?}"
        );
        assert!(seen[0].contains("\r\nx-added: 1\r\n"), "{seen:?}");

        // hyper's front end: a GET over HTTP/2 (h2c).
        let stream = TcpStream::connect(proxy.http).await.unwrap();
        let (mut h2, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("h2c handshake");
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        let h2_get = Request::get("http://mirrored.example/h2?y=2")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = collect(h2.send_request(h2_get).await.expect("h2 response")).await;
        connection.abort();
        assert_eq!(answer.status, 200);
        assert_eq!(pod(&answer), "web-0");
        let seen = wait_for(&heads, 2).await;
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[1].starts_with("get /h2?y=2 http/1.1\r\n"), "{seen:?}");
        assert!(
            seen[1].contains("\r\nhost: mirrored.example\r\n"),
            "{seen:?}"
        );

        // A request with a body is not copied (documented limit), and still answered.
        let skipped_before = mirror_count(&proxy, "skipped").await;
        let answer = request(&proxy, ("POST", "x=1"), "mirrored.example", "/p", &[]).await;
        assert_eq!(answer.status, 200);
        assert_eq!(mirror_count(&proxy, "skipped").await, skipped_before + 1);
        assert!(mirror_count(&proxy, "ok").await >= 2);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(heads.lock().unwrap().len(), 2, "no copy of the POST");
    })
    .await;
}

/// `RequestMirror` copies never hold the client's request up: a mirror that accepts but
/// never answers does not delay the primary's answer.
#[tokio::test]
async fn gateway_request_mirror_that_stalls_does_not_delay_the_client() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        // Accepts connections (the kernel's backlog) and never reads or answers.
        let stalled = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stalled_addr = stalled.local_addr().unwrap();
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("mirrored.example", "web", vec![web.addr()]),
            Route::new("stalled.example", "stalled", vec![stalled_addr]),
        ];
        install(&proxy, &routes, |backends, entry| {
            if entry.backend.service.name == "web" {
                entry.mirrors = vec![Mirror {
                    backend: Arc::clone(&backends["stalled"]),
                    numerator: 1,
                    denominator: 1,
                }];
                // Bounds the copies' lifetime (their deadline is the route's head wait).
                edit_policy(entry, |p| p.request_timeout = Some(Duration::from_secs(1)));
            }
        });
        let mut sender = http1_connect(proxy.http).await;
        let started = Instant::now();
        for _ in 0..20 {
            let answer = request_on(&mut sender, ("GET", ""), "mirrored.example", "/", &[]).await;
            assert_eq!(answer.status, 200);
        }
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(900),
            "20 requests took {took:?}"
        );
        drop(stalled);
    })
    .await;
}

/// Gateway API `RequestRedirect` on an HTTPS listener: without `scheme` the request's
/// (`https`) is kept, and without `port` the listener's: omitted when it is 443, kept
/// otherwise. Over HTTP/1.1 (own loop) and HTTP/2 (hyper) on TLS.
#[tokio::test]
async fn gateway_request_redirect_on_https_listener_keeps_scheme_and_listener_port() {
    init_tracing();
    bounded(async {
        let web = echo("web", "web-0").await;
        let (cert, key, ca) = ca_and_leaf("secure.example.com");
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let routes = [
            Route::new("secure.example.com", "secure", vec![web.addr()])
                .with_tls(cert.clone(), key.clone()),
            Route::new("secure.example.com", "alt", vec![web.addr()])
                .with_path("/alt")
                .with_tls(cert, key),
        ];
        install(&proxy, &routes, |_, entry| {
            let listener_port = match entry.backend.service.name.as_str() {
                "secure" => 443,
                "alt" => 8443,
                _ => return,
            };
            edit_policy(entry, |p| {
                p.request_redirect = Some(RequestRedirect {
                    status: 302,
                    ..redirect(None, None, listener_port)
                })
            });
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        for alpn in [&b"http/1.1"[..], b"h2"] {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            config.alpn_protocols = vec![alpn.to_vec()];
            let stream = TcpStream::connect(proxy.https).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("secure.example.com").unwrap();
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, stream)
                .await
                .expect("TLS handshake");
            let cases = [
                ("/a?q=1", "https://secure.example.com/a?q=1"),
                ("/alt/b", "https://secure.example.com:8443/alt/b"),
            ];
            let label = String::from_utf8_lossy(alpn).into_owned();
            let mut answers = Vec::new();
            if alpn == b"h2" {
                let (mut sender, connection) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                        .await
                        .unwrap();
                let connection = tokio::spawn(connection);
                for (target, _) in cases {
                    let get = Request::get(format!("https://secure.example.com{target}"))
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                    answers.push(collect(sender.send_request(get).await.unwrap()).await);
                }
                connection.abort();
            } else {
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(tls))
                        .await
                        .unwrap();
                let connection = tokio::spawn(connection);
                for (target, _) in cases {
                    let shape = ("GET", "");
                    answers.push(
                        request_on(&mut sender, shape, "secure.example.com", target, &[]).await,
                    );
                }
                connection.abort();
            }
            for ((target, location), answer) in cases.iter().zip(answers) {
                assert_eq!(answer.status, 302, "{label} {target}");
                assert_eq!(answer.headers["location"], *location, "{label} {target}");
            }
        }
    })
    .await;
}

/// Gateway API HTTPRoute matches on headers, query parameters and method, compiled from
/// real Gateway objects (not post-processed entries) and looked up by the proxy with the
/// request's fields, in both front ends. The spec's precedence: a method match first, then
/// more header matches, then more query matches.
#[tokio::test]
async fn gateway_http_route_matches_headers_query_and_method_in_both_front_ends() {
    init_tracing();
    bounded(async {
        let a = echo("a", "a-0").await;
        let b = echo("b", "b-0").await;
        let c = echo("c", "c-0").await;
        let d = echo("d", "d-0").await;
        let proxy = TestProxy::start(ProxyArgs::loopback()).await;
        let mut inputs = inputs(&[
            Route::new("unused-a.example", "a", vec![a.addr()]),
            Route::new("unused-b.example", "b", vec![b.addr()]),
            Route::new("unused-c.example", "c", vec![c.addr()]),
            Route::new("unused-d.example", "d", vec![d.addr()]),
        ]);
        fn object<T: k8s_openapi::serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
            Arc::new(serde_json::from_value(v).expect("valid Gateway API object"))
        }
        inputs.gateway_classes = vec![object(serde_json::json!({"metadata": {"name": "sluice"},
            "spec": {"controllerName": "sluice.dev/gateway-controller"}}))].into();
        inputs.gateways = vec![object(serde_json::json!({"metadata": {"namespace": NS, "name": "gw"},
            "spec": {"gatewayClassName": "sluice", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}))].into();
        inputs.http_routes = vec![object(serde_json::json!({
            "metadata": {"namespace": NS, "name": "matches"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["m.example"], "rules": [
                {"backendRefs": [{"name": "a", "port": 80}]},
                {"matches": [{"headers": [{"name": "X-Version", "value": "2"}]}],
                 "backendRefs": [{"name": "b", "port": 80}]},
                {"matches": [{"queryParams": [{"name": "flavour", "value": "c"}]}],
                 "backendRefs": [{"name": "c", "port": 80}]},
                {"matches": [{"method": "PUT"}], "backendRefs": [{"name": "d", "port": 80}]},
            ]}
        }))].into();
        let compiled = sluice_routing::compile(&inputs, &sluice_routing::CompileOptions::default());
        assert_eq!(compiled.gateway.routes.len(), 1);
        proxy.table.update(compiled.table, Duration::from_millis(1));
        for (label, method, body) in SHAPES {
            let shape = (method, body);
            let at = |answer: &Answer| format!("{label}: {} {}", answer.status, pod(answer));
            let plain = request(&proxy, shape, "m.example", "/x", &[]).await;
            assert_eq!(pod(&plain), "a-0", "{}", at(&plain));
            let header = request(&proxy, shape, "m.example", "/x", &[("x-version", "2")]).await;
            assert_eq!(pod(&header), "b-0", "{}", at(&header));
            let query = request(&proxy, shape, "m.example", "/x?flavour=c", &[]).await;
            assert_eq!(pod(&query), "c-0", "{}", at(&query));
            // Both conditions hold: one header match outranks one query match.
            let both =
                request(&proxy, shape, "m.example", "/x?flavour=c", &[("x-version", "2")]).await;
            assert_eq!(pod(&both), "b-0", "{}", at(&both));
            let miss = request(&proxy, shape, "other.example", "/x", &[]).await;
            assert_eq!(miss.status, 404, "{label}");
        }
        // A method match outranks header matches.
        let put = request(&proxy, ("PUT", "x"), "m.example", "/", &[("x-version", "2")]).await;
        assert_eq!(pod(&put), "d-0", "PUT: {}", put.status);
    })
    .await;
}
