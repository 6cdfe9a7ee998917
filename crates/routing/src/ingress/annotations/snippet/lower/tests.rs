use super::super::parse::parse;
use super::*;
use crate::snippet_rules::{Facts, SnippetAnswer, SnippetOutcome};

fn lowered(text: &str) -> Lowered {
    lower(&parse(text).expect("parses"), Level::Location)
}

fn server(text: &str) -> Lowered {
    lower(&parse(text).expect("parses"), Level::Server)
}

fn refused(l: &Lowered) -> Vec<(usize, &str)> {
    l.refused
        .iter()
        .map(|r| (r.line, r.name.as_str()))
        .collect()
}

/// Runs the rules for a request.
fn run(l: &Lowered, path: &str, query: &str, fields: &[(&str, &str)]) -> SnippetOutcome {
    let owned: Vec<(String, Vec<u8>)> = fields
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.as_bytes().to_vec()))
        .collect();
    let field = |name: &str| {
        owned
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    };
    let request_uri = if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    };
    let facts = Facts {
        host: "shop.example",
        request_uri: &request_uri,
        path,
        query,
        scheme: "https",
        remote_addr: "192.0.2.7",
        method: "GET",
        field: &field,
    };
    l.rules.run(&facts)
}

fn redirect(status: u16, location: &str) -> Option<SnippetAnswer> {
    Some(SnippetAnswer {
        status,
        location: Some(location.to_owned()),
        body: None,
    })
}

/// headers-more `more_set_headers`: constants become the route's response fields, an
/// empty value clears, variables are expanded per request.
#[test]
fn more_set_headers_constants_clears_and_variables() {
    let l = lowered(
        "more_set_headers 'X-Frame-Options: DENY' \"X-A:  two words\";\n\
         more_set_headers 'Server:';\n\
         more_set_headers \"ExpectedHost: $http_host\";",
    );
    assert!(l.refused.is_empty(), "{:?}", l.refused);
    let set: Vec<(&str, &str)> = l
        .response_set
        .iter()
        .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
        .collect();
    assert_eq!(set, [("x-frame-options", "DENY"), ("x-a", "two words")]);
    assert_eq!(l.response_remove, [HeaderName::from_static("server")]);
    let out = run(&l, "/", "", &[("host", "shop.example:8443")]);
    assert_eq!(
        out.response_set,
        [(
            HeaderName::from_static("expectedhost"),
            HeaderValue::from_static("shop.example:8443")
        )]
    );
    assert_eq!(l.interpreted.len(), 3);
}

#[test]
fn more_set_headers_options_and_bad_fields_are_refused() {
    let l = lowered(
        "more_set_headers -s 404 'X: 1';\nmore_set_headers -t text/html 'X: 1';\n\
         more_set_headers 'NoColon';\nmore_set_headers 'Transfer-Encoding: gzip';\n\
         more_set_headers 'X: $req_id';\nmore_set_headers 'Bad Name: 1';",
    );
    assert_eq!(
        refused(&l),
        [
            (1, "more_set_headers"),
            (2, "more_set_headers"),
            (3, "more_set_headers"),
            (4, "more_set_headers"),
            (5, "more_set_headers"),
            (6, "more_set_headers"),
        ]
    );
    assert!(l.refused[0].why.contains("-s"));
    assert!(l.refused[4].why.contains("$req_id"), "{}", l.refused[4].why);
}

/// headers-more `more_clear_headers`: names, and `X-*` wildcards.
#[test]
fn more_clear_headers_names_and_wildcards() {
    let l = lowered("more_clear_headers Server 'X-Powered-*';");
    assert_eq!(l.response_remove, [HeaderName::from_static("server")]);
    assert_eq!(
        l.rules.response_clear,
        [HeaderPattern::Prefix("x-powered-".into())]
    );
    assert!(HeaderPattern::Prefix("x-powered-".into()).matches(b"X-Powered-By"));
    // A wildcard that would take framing fields away is refused.
    let l = lowered("more_clear_headers 'Transfer-*';");
    assert_eq!(refused(&l), [(1, "more_clear_headers")]);
}

/// nginx `add_header`: `always` with a constant is an ordinary added field; the rest depend
/// on the status, so they are request-time rules.
#[test]
fn add_header_always_and_conditional() {
    let l = lowered("add_header X-A 1 always;\nadd_header X-B 2;\nadd_header X-C $scheme always;");
    assert_eq!(
        l.response_add,
        [(
            HeaderName::from_static("x-a"),
            HeaderValue::from_static("1")
        )]
    );
    assert_eq!(l.rules.response_add.len(), 2);
    let out = run(&l, "/", "", &[]);
    assert_eq!(
        out.response_add,
        [
            (
                HeaderName::from_static("x-b"),
                HeaderValue::from_static("2"),
                false
            ),
            (
                HeaderName::from_static("x-c"),
                HeaderValue::from_static("https"),
                true
            ),
        ]
    );
    let l = lowered("add_header X-A;\nadd_header X-A 1 sometimes;");
    assert_eq!(refused(&l), [(1, "add_header"), (2, "add_header")]);
}

/// nginx `proxy_set_header`: constants, an empty value removing the field, variables per
/// request, Host as `upstream-vhost`, the upgrade forms sluice already sends.
#[test]
fn proxy_set_header_forms() {
    let l = lowered(
        "proxy_set_header X-Const abc;\nproxy_set_header X-Gone '';\n\
         proxy_set_header X-Real $remote_addr;\nproxy_set_header Host backend.internal;\n\
         proxy_set_header Upgrade $http_upgrade;\nproxy_set_header Connection \"upgrade\";\n\
         proxy_set_header Host $host;\nproxy_set_header Transfer-Encoding x;\n\
         proxy_set_header Host $request_uri;\nproxy_set_header X-Y $ssl_client_s_dn;",
    );
    assert_eq!(
        l.request_set,
        [(
            HeaderName::from_static("x-const"),
            HeaderValue::from_static("abc")
        )]
    );
    assert_eq!(l.request_remove, [HeaderName::from_static("x-gone")]);
    assert_eq!(
        l.upstream_vhost,
        Some(HeaderValue::from_static("backend.internal"))
    );
    assert_eq!(
        refused(&l),
        [
            (8, "proxy_set_header"),
            (9, "proxy_set_header"),
            (10, "proxy_set_header")
        ]
    );
    let out = run(&l, "/", "", &[]);
    assert_eq!(
        out.request_set,
        [(
            HeaderName::from_static("x-real"),
            HeaderValue::from_static("192.0.2.7")
        )]
    );
}

#[test]
fn more_set_input_headers_and_clear_input_headers() {
    let l = lowered(
        "more_set_input_headers 'pathType: prefix' 'X-Uri: $uri';\n\
         more_clear_input_headers X-Drop;\nmore_set_input_headers -r 'X: 1';",
    );
    assert_eq!(l.request_set.len(), 1);
    assert_eq!(l.rules.request_set.len(), 1);
    assert_eq!(l.request_remove, [HeaderName::from_static("x-drop")]);
    assert_eq!(refused(&l), [(3, "more_set_input_headers")]);
}

/// nginx `return`: redirect statuses take a URL (a relative one made absolute), the others
/// a body; `return URL` is a 302.
#[test]
fn return_forms() {
    let l = lowered("return 301 https://new.example$request_uri;");
    assert_eq!(
        run(&l, "/a", "x=1", &[]).answer,
        redirect(301, "https://new.example/a?x=1")
    );
    let l = lowered("return 302 /elsewhere;");
    assert_eq!(
        run(&l, "/a", "", &[]).answer,
        redirect(302, "https://shop.example/elsewhere")
    );
    let l = lowered("return https://x.example/;");
    assert_eq!(
        run(&l, "/", "", &[]).answer,
        redirect(302, "https://x.example/")
    );
    let l = lowered("return 200 'healthy $host';");
    let answer = run(&l, "/", "", &[]).answer.unwrap();
    assert_eq!(
        (answer.status, answer.body.as_deref()),
        (200, Some("healthy shop.example"))
    );
    let l = lowered("return 403;");
    let answer = run(&l, "/", "", &[]).answer.unwrap();
    assert_eq!((answer.status, answer.body), (403, None));
    let l = lowered("return 200;");
    assert_eq!(
        run(&l, "/", "", &[]).answer.unwrap().body.as_deref(),
        Some("")
    );
    let l = lowered("return 444;\nreturn 199;\nreturn /relative;\nreturn 200 a b;");
    assert_eq!(
        refused(&l),
        [(1, "return"), (2, "return"), (3, "return"), (4, "return")]
    );
}

/// nginx `rewrite`: the regex on the path, `$1`.., the flags, arguments kept or replaced.
#[test]
fn rewrite_forms() {
    let l = lowered("rewrite ^/old/(.*)$ /new/$1 break;");
    let out = run(&l, "/old/a/b", "q=1", &[]);
    assert_eq!(out.target.as_deref(), Some("/new/a/b?q=1"));
    assert!(out.stopped);
    assert_eq!(run(&l, "/other", "", &[]).target, None);

    let l = lowered("rewrite ^/a$ /b permanent;");
    assert_eq!(
        run(&l, "/a", "x=1", &[]).answer,
        redirect(301, "https://shop.example/b?x=1")
    );
    let l = lowered("rewrite ^/a$ /b redirect;");
    assert_eq!(run(&l, "/a", "", &[]).answer.unwrap().status, 302);
    let l = lowered("rewrite ^/(.*)$ https://other.example/$1;");
    assert_eq!(
        run(&l, "/p", "", &[]).answer,
        redirect(302, "https://other.example/p")
    );
    // A `?` in the replacement: new arguments, the request's appended; a final `?` drops them.
    let l = lowered("rewrite ^/s$ /search?q=1 break;");
    assert_eq!(
        run(&l, "/s", "page=2", &[]).target.as_deref(),
        Some("/search?q=1&page=2")
    );
    let l = lowered("rewrite ^/s$ /search? break;");
    assert_eq!(
        run(&l, "/s", "page=2", &[]).target.as_deref(),
        Some("/search")
    );
    // Without a flag the next rewrite sees the new path; `break` stops.
    let l = lowered("rewrite ^/a$ /b;\nrewrite ^/b$ /c break;\nrewrite ^/c$ /d;");
    assert_eq!(run(&l, "/a", "", &[]).target.as_deref(), Some("/c"));
    let l = lowered("rewrite (?<=a)b /x;\nrewrite ^/a$ /b sideways;\nrewrite ^/a$;");
    assert_eq!(
        refused(&l),
        [(1, "rewrite"), (2, "rewrite"), (3, "rewrite")]
    );
}

/// The `if` forms people write: `$host =`, `$request_uri ~`, `$http_<name> ~*`,
/// `$request_method =`, `$scheme =`, around `return`, `rewrite` and `more_set_headers`.
#[test]
fn if_conditions_and_bodies() {
    let l = lowered(
        "if ($host = 'shop.example') { more_set_headers 'X-Shop: 1'; }\n\
         if ($http_user_agent ~* \"(mobile)\") { return 301 https://m.example$request_uri; }\n\
         if ($request_method = POST) { return 405; }\n\
         if ($scheme != https) { return 308 https://$host$request_uri; }\n\
         if ($request_uri ~ ^/legacy/(.*)) { rewrite ^ /modern/$1 break; }",
    );
    assert!(l.refused.is_empty(), "{:?}", l.refused);
    let out = run(&l, "/", "", &[]);
    assert_eq!(out.answer, None);
    assert_eq!(
        out.response_set,
        [(
            HeaderName::from_static("x-shop"),
            HeaderValue::from_static("1")
        )]
    );
    let out = run(&l, "/p", "", &[("user-agent", "Foo MOBILE bar")]);
    assert_eq!(out.answer, redirect(301, "https://m.example/p"));
    let out = run(&l, "/legacy/x", "", &[]);
    assert_eq!(out.target.as_deref(), Some("/modern/x"));
    // `if ($var)`: set and not "0".
    let l = lowered("if ($http_x_debug) { add_header X-Debug on always; }");
    assert!(run(&l, "/", "", &[]).response_add.is_empty());
    assert_eq!(run(&l, "/", "", &[("x-debug", "1")]).response_add.len(), 1);
    assert!(
        run(&l, "/", "", &[("x-debug", "0")])
            .response_add
            .is_empty()
    );
}

#[test]
fn unsupported_if_forms_are_refused_whole() {
    let l = lowered(
        "if (-f $request_filename) { return 200; }\n\
         if ($http_x_token != \"s3cret\") { deny all; }\n\
         if ($slow = 1) { return 200; }\n\
         if ($a = 1) { if ($b = 2) { return 200; } }\n\
         if ($a = 1) { return 200 { } }\n\
         if ($a = 1);",
    );
    assert_eq!(
        refused(&l),
        [
            (1, "if"),
            (2, "if"),
            (3, "if"),
            (4, "if"),
            (5, "if"),
            (6, "if")
        ]
    );
    assert!(l.refused[1].why.contains("deny"), "{}", l.refused[1].why);
}

/// Directives outside the set are refused by name and line; the text is kept for the
/// fail-closed check.
#[test]
fn other_directives_are_refused_with_their_line() {
    let l = lowered("more_set_headers 'A: 1';\n\nset $x 1;\nallow 10.0.0.0/8;\nlocation /x { }");
    assert_eq!(refused(&l), [(3, "set"), (4, "allow"), (5, "location")]);
    assert_eq!(l.refused[1].text, "allow 10.0.0.0/8;");
    assert_eq!(l.interpreted, ["line 1: more_set_headers"]);
}

/// Server level: a rewrite that does not redirect would change which path matches, and
/// ingress-nginx's locations never inherit a server's `proxy_set_header`.
#[test]
fn server_level_limits() {
    let l = server(
        "rewrite ^/a$ /b break;\nrewrite ^/a$ /b permanent;\nproxy_set_header X 1;\n\
         more_set_headers 'Foo: Bar';",
    );
    assert_eq!(refused(&l), [(1, "rewrite"), (3, "proxy_set_header")]);
    assert_eq!(l.response_set.len(), 1);
}

#[test]
fn templates_read_variables_as_nginx() {
    let t = template("a$host${uri}b$1$ c$").unwrap();
    assert_eq!(
        t.0,
        [
            Part::Text("a".into()),
            Part::Var(Var::Host),
            Part::Var(Var::Uri),
            Part::Text("b".into()),
            Part::Var(Var::Capture(1)),
            Part::Text("$ c$".into()),
        ]
    );
    assert_eq!(
        template("$http_x_forwarded_for").unwrap().0,
        [Part::Var(Var::Header(HeaderName::from_static(
            "x-forwarded-for"
        )))]
    );
    assert!(
        template("$cookie_session")
            .unwrap_err()
            .contains("$cookie_session")
    );
    assert!(template("${uri").is_err());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text: parsing and lowering never panic, and every directive is either
        /// interpreted or refused.
        #[test]
        fn any_text_is_read_or_refused(text in "[ -~\\n]{0,120}") {
            if let Ok(directives) = parse(&text) {
                let l = lower(&directives, Level::Location);
                prop_assert_eq!(l.interpreted.len() + l.refused.len(), directives.len());
            }
        }

        /// Constant `more_set_headers` values come out as written (after leading blanks).
        #[test]
        fn header_values_round_trip(value in "[a-zA-Z0-9 ,;=/.-]{1,40}") {
            let value = value.trim().to_owned();
            prop_assume!(!value.is_empty() && !value.contains('$'));
            let l = lowered(&format!("more_set_headers 'X-V: {value}';"));
            prop_assert_eq!(l.response_set[0].1.to_str().unwrap(), value.as_str());
        }
    }
}
