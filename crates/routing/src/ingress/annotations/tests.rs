//! The annotation readers against ingress-nginx's documented values.

use super::*;

use proptest::prelude::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn nginx(name: &str) -> String {
    format!("{NGINX_PREFIX}{name}")
}

fn sluice(name: &str) -> String {
    format!("{SLUICE_PREFIX}{name}")
}

/// Parses `name: value` under the nginx prefix.
fn one(name: &str, value: &str) -> Parsed {
    parse(&map(&[(&nginx(name), value)]))
}

/// The only problem, for `name` under the nginx prefix.
fn problem(parsed: &Parsed, name: &str) -> Problem {
    assert_eq!(parsed.problems.len(), 1, "{:?}", parsed.problems);
    let problem = parsed.problems[0].clone();
    assert_eq!(problem.annotation, nginx(name));
    problem
}

fn invalid(name: &str, value: &str) -> (Parsed, String) {
    let parsed = one(name, value);
    let p = problem(&parsed, name);
    assert_eq!(p.reason, Reason::InvalidAnnotation, "{p:?}");
    (parsed, p.detail)
}

fn hv(s: &'static str) -> HeaderValue {
    HeaderValue::from_static(s)
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|c| parse_cidr(c).unwrap()).collect()
}

#[test]
fn no_annotations_changes_nothing() {
    let parsed = parse(&BTreeMap::new());
    assert_eq!(parsed.policy, Policy::default());
    assert!(parsed.ssl_redirect);
    assert!(!parsed.force_ssl_redirect);
    assert!(parsed.problems.is_empty());
}

#[test]
fn keys_outside_both_prefixes_are_ignored() {
    let parsed = parse(&map(&[
        ("kubernetes.io/ingress.class", "nginx"),
        ("nginx.org/proxy-body-size", "1x"),
        ("example.com/sluice.dev/app-root", "/x"),
    ]));
    assert_eq!(parsed.policy, Policy::default());
    assert!(parsed.problems.is_empty());
}

#[test]
fn sluice_prefix_wins_silently_over_nginx() {
    let parsed = parse(&map(&[
        (&nginx("proxy-body-size"), "1m"),
        (&sluice("proxy-body-size"), "2m"),
        // The overridden one is not even validated.
        (&nginx("app-root"), "not a path"),
        (&sluice("app-root"), "/app"),
    ]));
    assert_eq!(parsed.policy.body_limit, Some(2 << 20));
    assert_eq!(parsed.policy.app_root, Some(hv("/app")));
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    // Also for unsupported keys: only the winning key is reported.
    let parsed = parse(&map(&[
        (&nginx("http2-push-preload"), "true"),
        (&sluice("http2-push-preload"), "true"),
    ]));
    assert_eq!(parsed.problems.len(), 1);
    assert_eq!(parsed.problems[0].annotation, sluice("http2-push-preload"));
}

#[test]
fn proxy_next_upstream_takes_nginx_tokens() {
    let parsed = parse(&map(&[
        (
            &nginx("proxy-next-upstream"),
            "error http_502 http_503 non_idempotent",
        ),
        (&nginx("proxy-next-upstream-tries"), "5"),
    ]));
    let next = &parsed.policy.next_upstream;
    assert!(next.error && !next.timeout && next.non_idempotent);
    assert_eq!(next.statuses, vec![502, 503]);
    assert_eq!(next.tries, 5);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    let off = parse(&map(&[(&nginx("proxy-next-upstream"), "off")]));
    assert_eq!(off.policy.next_upstream.tries, 1);
    assert_eq!(Policy::default().next_upstream.tries, 3);
    for bad in ["", "http_418", "error off"] {
        let parsed = parse(&map(&[(&nginx("proxy-next-upstream"), bad)]));
        assert_eq!(
            parsed.problems[0].reason,
            Reason::InvalidAnnotation,
            "{bad:?}"
        );
    }
}

#[test]
fn default_backend_and_custom_http_errors() {
    let parsed = parse(&map(&[
        (&nginx("default-backend"), "errors"),
        (&nginx("custom-http-errors"), "404, 503,404"),
    ]));
    assert_eq!(parsed.default_backend.as_deref(), Some("errors"));
    assert_eq!(parsed.policy.custom_http_errors, vec![404, 503]);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    for (key, bad) in [
        ("default-backend", "Errors"),
        ("default-backend", "ns/errors"),
        ("custom-http-errors", "200"),
        ("custom-http-errors", "abc"),
        ("custom-http-errors", ""),
    ] {
        let parsed = parse(&map(&[(&nginx(key), bad)]));
        assert_eq!(parsed.problems.len(), 1, "{key}={bad}");
        assert_eq!(
            parsed.problems[0].reason,
            Reason::InvalidAnnotation,
            "{key}={bad}"
        );
    }
}

#[test]
fn rewrite_target_allows_captures_only() {
    let parsed = parse(&map(&[
        (&nginx("rewrite-target"), "/$2"),
        (&nginx("use-regex"), "true"),
    ]));
    assert_eq!(parsed.rewrite_target.as_deref(), Some("/$2"));
    assert!(parsed.use_regex);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    for bad in ["$2", "/x$request_uri", "foo"] {
        let parsed = parse(&map(&[(&nginx("rewrite-target"), bad)]));
        assert_eq!(parsed.rewrite_target, None, "{bad}");
        assert_eq!(
            parsed.problems[0].reason,
            Reason::InvalidAnnotation,
            "{bad}"
        );
    }
}

#[test]
fn sluice_prefix_alone_works_like_nginx() {
    let parsed = parse(&map(&[(&sluice("ssl-redirect"), "false")]));
    assert!(!parsed.ssl_redirect);
    assert!(parsed.problems.is_empty());
}

#[test]
fn booleans_parse_like_go_strconv_parse_bool() {
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(parse_bool(t), Ok(true), "{t}");
    }
    for f in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(parse_bool(f), Ok(false), "{f}");
    }
    for bad in ["yes", "on", "tRuE", "", "2"] {
        assert!(parse_bool(bad).is_err(), "{bad}");
    }
}

#[test]
fn ssl_redirect_defaults_to_true_like_the_ingress_nginx_configmap() {
    assert!(!one("ssl-redirect", "false").ssl_redirect);
    assert!(one("ssl-redirect", "true").ssl_redirect);
    let (parsed, detail) = invalid("ssl-redirect", "yes");
    assert!(parsed.ssl_redirect);
    assert_eq!(
        detail,
        "value \"yes\" is not a boolean (true or false); ssl-redirect stays true"
    );
    // The compiler decides https_redirect per host.
    assert_eq!(one("ssl-redirect", "true").policy.https_redirect, None);
}

#[test]
fn force_ssl_redirect_defaults_to_false() {
    assert!(one("force-ssl-redirect", "true").force_ssl_redirect);
    assert!(!one("force-ssl-redirect", "False").force_ssl_redirect);
    let (parsed, _) = invalid("force-ssl-redirect", "always");
    assert!(!parsed.force_ssl_redirect);
    assert_eq!(parsed.policy.https_redirect, None);
}

#[test]
fn permanent_redirect_is_301_or_permanent_redirect_code_300_to_308() {
    let parsed = one("permanent-redirect", "https://example.com/new?a=b");
    assert_eq!(
        parsed.policy.redirect,
        Some(Redirect {
            status: 301,
            location: hv("https://example.com/new?a=b")
        })
    );
    assert!(parsed.problems.is_empty());
    assert_eq!(
        one("permanent-redirect", "/elsewhere").policy.redirect,
        Some(Redirect {
            status: 301,
            location: hv("/elsewhere")
        })
    );
    let with_code = |code: &str| {
        parse(&map(&[
            (&nginx("permanent-redirect"), "https://example.com"),
            (&nginx("permanent-redirect-code"), code),
        ]))
    };
    let parsed = with_code("308");
    assert_eq!(parsed.policy.redirect.as_ref().unwrap().status, 308);
    assert!(parsed.problems.is_empty());
    for bad in ["309", "200", "abc", "-301"] {
        let parsed = with_code(bad);
        assert_eq!(
            parsed.policy.redirect.as_ref().unwrap().status,
            301,
            "{bad}"
        );
        let p = problem(&parsed, "permanent-redirect-code");
        assert_eq!(p.reason, Reason::InvalidAnnotation);
        assert_eq!(
            p.detail,
            format!("value {bad:?} is not a redirect status (300 to 308); 301 is used")
        );
    }
}

#[test]
fn redirect_locations_must_be_http_urls_or_paths() {
    for bad in [
        "",
        "example.com",
        "ftp://example.com",
        "//evil.example",
        "https://",
        "https://exa mple.com",
        "/a\nb",
        "https://example.com$request_uri",
    ] {
        let (parsed, _) = invalid("permanent-redirect", bad);
        assert_eq!(parsed.policy.redirect, None, "{bad:?}");
    }
    let (_, detail) = invalid("permanent-redirect", "https://new.example$request_uri");
    assert!(detail.contains("nginx variables"), "{detail}");
}

#[test]
fn temporal_redirect_is_302_or_temporal_redirect_code_300_to_307() {
    let parsed = one("temporal-redirect", "http://example.com/tmp");
    assert_eq!(
        parsed.policy.redirect,
        Some(Redirect {
            status: 302,
            location: hv("http://example.com/tmp")
        })
    );
    let with_code = |code: &str| {
        parse(&map(&[
            (&nginx("temporal-redirect"), "http://example.com"),
            (&nginx("temporal-redirect-code"), code),
        ]))
    };
    assert_eq!(with_code("307").policy.redirect.unwrap().status, 307);
    let parsed = with_code("308");
    assert_eq!(parsed.policy.redirect.as_ref().unwrap().status, 302);
    assert_eq!(
        problem(&parsed, "temporal-redirect-code").detail,
        "value \"308\" is not a redirect status (300 to 307); 302 is used"
    );
}

#[test]
fn temporal_redirect_wins_over_permanent_like_ingress_nginx() {
    let parsed = parse(&map(&[
        (&nginx("permanent-redirect"), "https://p.example"),
        (&nginx("permanent-redirect-code"), "308"),
        (&nginx("temporal-redirect"), "https://t.example"),
    ]));
    assert_eq!(
        parsed.policy.redirect,
        Some(Redirect {
            status: 302,
            location: hv("https://t.example")
        })
    );
    let names: Vec<_> = parsed
        .problems
        .iter()
        .map(|p| p.annotation.as_str())
        .collect();
    assert_eq!(
        names,
        [
            nginx("permanent-redirect"),
            nginx("permanent-redirect-code")
        ]
    );
    assert!(
        parsed
            .problems
            .iter()
            .all(|p| p.reason == Reason::InvalidAnnotation
                && p.detail.contains("temporal-redirect is also set"))
    );
    // An invalid temporal redirect counts as absent: the permanent one applies.
    let parsed = parse(&map(&[
        (&nginx("permanent-redirect"), "https://p.example"),
        (&nginx("temporal-redirect"), "nope"),
        (&nginx("temporal-redirect-code"), "307"),
    ]));
    assert_eq!(parsed.policy.redirect.as_ref().unwrap().status, 301);
    assert_eq!(parsed.problems.len(), 2);
}

#[test]
fn redirect_codes_without_their_redirect_have_no_effect() {
    let (parsed, detail) = invalid("permanent-redirect-code", "308");
    assert_eq!(parsed.policy.redirect, None);
    assert_eq!(detail, "has no effect without a valid permanent-redirect");
    let (_, detail) = invalid("temporal-redirect-code", "307");
    assert_eq!(detail, "has no effect without a valid temporal-redirect");
}

#[test]
fn app_root_must_be_a_path_like_ingress_nginx() {
    let parsed = one("app-root", "/app1");
    assert_eq!(parsed.policy.app_root, Some(hv("/app1")));
    assert!(parsed.problems.is_empty());
    for bad in [
        "app1",
        "https://example.com/app",
        "//evil.example",
        "/a b",
        "",
        "/$1",
    ] {
        let (parsed, _) = invalid("app-root", bad);
        assert_eq!(parsed.policy.app_root, None, "{bad:?}");
    }
}

#[test]
fn allowlist_source_range_takes_cidrs_and_bare_addresses() {
    let parsed = one(
        "allowlist-source-range",
        "10.0.0.0/8, 192.168.1.7 ,2001:db8::/32",
    );
    assert_eq!(
        parsed.policy.allow,
        cidrs(&["10.0.0.0/8", "192.168.1.7", "2001:db8::/32"])
    );
    assert!(parsed.policy.deny.is_empty());
    assert!(parsed.problems.is_empty());
    let parsed = one("whitelist-source-range", "10.0.0.0/8");
    assert_eq!(parsed.policy.allow, cidrs(&["10.0.0.0/8"]));
    assert!(parsed.problems.is_empty());
}

#[test]
fn an_invalid_source_range_refuses_everyone_as_ingress_nginx_denies_the_location() {
    for name in [
        "allowlist-source-range",
        "whitelist-source-range",
        "denylist-source-range",
    ] {
        for bad in [
            "10.0.0.0/8,nope",
            "10.0.0.0/33",
            "",
            "10.0.0.1,",
            "10.0.0.0/8;",
        ] {
            let (parsed, detail) = invalid(name, bad);
            assert!(parsed.policy.allow.is_empty(), "{name} {bad:?}");
            assert_eq!(parsed.policy.deny, cidrs(&["0.0.0.0/0", "::/0"]));
            assert!(detail.contains("every client is refused"), "{detail}");
        }
    }
    let (_, detail) = invalid("allowlist-source-range", "10.0.0.0/8,nope");
    assert_eq!(
        detail,
        "value \"10.0.0.0/8,nope\" is not a list of IP addresses or CIDRs (\"nope\" is not \
         an IP address or CIDR); every client is refused (403), as ingress-nginx denies the \
         location"
    );
}

#[test]
fn allowlist_wins_over_whitelist_unless_empty() {
    let parsed = parse(&map(&[
        (&nginx("allowlist-source-range"), "10.0.0.0/8"),
        (&nginx("whitelist-source-range"), "192.168.0.0/16"),
    ]));
    assert_eq!(parsed.policy.allow, cidrs(&["10.0.0.0/8"]));
    let p = problem(&parsed, "whitelist-source-range");
    assert_eq!(p.reason, Reason::InvalidAnnotation);
    assert!(
        p.detail
            .starts_with("has no effect: allowlist-source-range is used")
    );
    // ingress-nginx reads the alias when the annotation itself is empty.
    let parsed = parse(&map(&[
        (&nginx("allowlist-source-range"), ""),
        (&nginx("whitelist-source-range"), "192.168.0.0/16"),
    ]));
    assert_eq!(parsed.policy.allow, cidrs(&["192.168.0.0/16"]));
    assert!(parsed.policy.deny.is_empty());
    let p = problem(&parsed, "allowlist-source-range");
    assert!(
        p.detail
            .starts_with("has no effect: whitelist-source-range is used")
    );
}

#[test]
fn denylist_source_range_fills_deny() {
    let parsed = parse(&map(&[
        (&nginx("denylist-source-range"), "10.0.0.7"),
        (&nginx("allowlist-source-range"), "10.0.0.0/8"),
    ]));
    assert_eq!(parsed.policy.deny, cidrs(&["10.0.0.7"]));
    assert_eq!(parsed.policy.allow, cidrs(&["10.0.0.0/8"]));
    assert!(parsed.problems.is_empty());
}

#[test]
fn proxy_body_size_uses_nginx_size_syntax() {
    for (value, bytes) in [
        ("0", 0),
        ("1000", 1000),
        ("8k", 8 << 10),
        ("8K", 8 << 10),
        ("10m", 10 << 20),
        ("10M", 10 << 20),
        ("2g", 2 << 30),
        (" 1G ", 1 << 30),
    ] {
        let parsed = one("proxy-body-size", value);
        assert_eq!(parsed.policy.body_limit, Some(bytes), "{value}");
        assert!(parsed.problems.is_empty());
    }
    for bad in ["12x", "", "m", "1.5m", "-1", "1kk", "99999999999999999999"] {
        let (parsed, _) = invalid("proxy-body-size", bad);
        assert_eq!(parsed.policy.body_limit, None, "{bad:?}");
    }
    assert_eq!(
        invalid("proxy-body-size", "12x").1,
        "value \"12x\" is not a size; expected bytes with an optional unit: k, m, g (nginx), \
         KiB, MiB, GiB, KB, MB, GB"
    );
    assert_eq!(
        invalid("proxy-body-size", "99999999999g").1,
        "value \"99999999999g\" is too large"
    );
}

#[test]
fn proxy_timeouts_take_ingress_nginx_seconds_or_nginx_time_units() {
    for (value, duration) in [
        ("60", Duration::from_secs(60)),
        ("30s", Duration::from_secs(30)),
        ("2m", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3600)),
        ("500ms", Duration::from_millis(500)),
        ("1m30s", Duration::from_secs(90)),
        ("1m 30s", Duration::from_secs(90)),
        ("1d", Duration::from_secs(86_400)),
        // The project's one syntax also takes Go's fractions, as every flag does.
        ("1.5s", Duration::from_millis(1500)),
    ] {
        for (name, get) in [
            (
                "proxy-connect-timeout",
                (|p: &Policy| p.connect_timeout) as fn(&Policy) -> Option<Duration>,
            ),
            ("proxy-read-timeout", |p: &Policy| p.read_timeout),
            ("proxy-send-timeout", |p: &Policy| p.send_timeout),
        ] {
            let parsed = one(name, value);
            assert_eq!(get(&parsed.policy), Some(duration), "{name} {value}");
            assert!(parsed.problems.is_empty());
        }
    }
    for bad in [
        "",
        "abc",
        "30x",
        "s",
        "-1",
        "30s1m",
        "1s1s",
        "5 s",
        "99999999999999999999y",
    ] {
        let (parsed, _) = invalid("proxy-read-timeout", bad);
        assert_eq!(parsed.policy.read_timeout, None, "{bad:?}");
    }
    assert_eq!(
        invalid("proxy-connect-timeout", "0").1,
        "value \"0\" must be greater than zero"
    );
    assert_eq!(
        invalid("proxy-send-timeout", "0s").1,
        "value \"0s\" must be greater than zero"
    );
}

fn cors_of(pairs: &[(&str, &str)]) -> (Option<Cors>, Vec<Problem>) {
    let mut all = vec![(nginx("enable-cors"), "true".to_owned())];
    all.extend(pairs.iter().map(|(k, v)| (nginx(k), (*v).to_owned())));
    let parsed = parse(&all.into_iter().collect());
    (parsed.policy.cors, parsed.problems)
}

#[test]
fn enable_cors_uses_ingress_nginx_defaults() {
    let (cors, problems) = cors_of(&[]);
    assert!(problems.is_empty());
    assert_eq!(
        cors,
        Some(Cors {
            origins: vec![OriginPattern::Any],
            allow_methods: Some(hv("GET, PUT, POST, DELETE, PATCH, OPTIONS")),
            allow_headers: Some(hv(
                "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,\
                 Content-Type,Range,Authorization"
            )),
            expose_headers: None,
            allow_credentials: true,
            max_age: 1_728_000,
        })
    );
    assert_eq!(one("enable-cors", "false").policy.cors, None);
    let (parsed, detail) = invalid("enable-cors", "yes");
    assert_eq!(parsed.policy.cors, None);
    assert!(detail.ends_with("CORS stays off"));
}

#[test]
fn cors_keys_without_enable_cors_have_no_effect() {
    for enable in [None, Some("false"), Some("bogus")] {
        let mut pairs = vec![
            (nginx("cors-allow-origin"), "https://a.example".to_owned()),
            (nginx("cors-max-age"), "10".to_owned()),
        ];
        if let Some(v) = enable {
            pairs.push((nginx("enable-cors"), v.to_owned()));
        }
        let parsed = parse(&pairs.into_iter().collect());
        assert_eq!(parsed.policy.cors, None);
        let no_effect: Vec<_> = parsed
            .problems
            .iter()
            .filter(|p| p.detail == "has no effect without enable-cors: \"true\"")
            .map(|p| p.annotation.clone())
            .collect();
        assert_eq!(
            no_effect,
            [nginx("cors-allow-origin"), nginx("cors-max-age")]
        );
        assert!(
            parsed
                .problems
                .iter()
                .all(|p| p.reason == Reason::InvalidAnnotation)
        );
    }
}

#[test]
fn cors_allow_origin_is_a_list_of_origins_and_wildcards() {
    let (cors, problems) = cors_of(&[(
        "cors-allow-origin",
        "https://A.example.com, http://b.example:8080,https://*.Example.org, myapp://x, null",
    )]);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        cors.unwrap().origins,
        [
            OriginPattern::Exact("https://a.example.com".into()),
            OriginPattern::Exact("http://b.example:8080".into()),
            OriginPattern::Wildcard {
                scheme: "https://".into(),
                suffix: ".example.org".into()
            },
            OriginPattern::Exact("myapp://x".into()),
            OriginPattern::Exact("null".into()),
        ]
    );
    // A "*" anywhere allows everyone (ingress-nginx keeps only "*").
    let (cors, _) = cors_of(&[("cors-allow-origin", "https://a.example, *")]);
    assert_eq!(cors.unwrap().origins, [OriginPattern::Any]);
}

#[test]
fn invalid_cors_origins_are_dropped_never_widened_to_any() {
    let (cors, problems) = cors_of(&[(
        "cors-allow-origin",
        "https://a.example/, https://ok.example, a.example, https://*.x.example:99999",
    )]);
    assert_eq!(
        cors.unwrap().origins,
        [OriginPattern::Exact("https://ok.example".into())]
    );
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].reason, Reason::InvalidAnnotation);
    assert_eq!(
        problems[0].detail,
        "\"https://a.example/\", \"a.example\", \"https://*.x.example:99999\" ignored: not \
         an origin (scheme://host[:port], scheme://*.domain[:port], null or *)"
    );
    let (cors, problems) = cors_of(&[("cors-allow-origin", "")]);
    assert!(cors.unwrap().origins.is_empty());
    assert!(problems[0].detail.ends_with("no origin is allowed"));
}

#[test]
fn cors_allow_methods_and_headers_are_token_lists_else_the_default() {
    let (cors, problems) = cors_of(&[
        ("cors-allow-methods", "GET,POST , PUT"),
        ("cors-allow-headers", "X-Custom,Content-Type"),
        ("cors-expose-headers", "*, X-Total"),
    ]);
    assert!(problems.is_empty());
    let cors = cors.unwrap();
    assert_eq!(cors.allow_methods, Some(hv("GET, POST, PUT")));
    assert_eq!(cors.allow_headers, Some(hv("X-Custom, Content-Type")));
    assert_eq!(cors.expose_headers, Some(hv("*, X-Total")));
    let (cors, problems) = cors_of(&[
        ("cors-allow-methods", "GET; rm"),
        ("cors-allow-headers", "X(1)"),
        ("cors-expose-headers", ""),
    ]);
    let cors = cors.unwrap();
    assert_eq!(cors.allow_methods, Some(hv(DEFAULT_CORS_METHODS)));
    assert_eq!(cors.allow_headers, Some(hv(DEFAULT_CORS_HEADERS)));
    assert_eq!(cors.expose_headers, None);
    assert_eq!(problems.len(), 3);
    assert_eq!(
        problems[1].detail,
        "value \"GET; rm\": \"GET; rm\" is not a method; the default is used"
    );
}

#[test]
fn cors_allow_credentials_and_max_age() {
    let (cors, problems) = cors_of(&[("cors-allow-credentials", "false"), ("cors-max-age", "600")]);
    assert!(problems.is_empty());
    let cors = cors.unwrap();
    assert!(!cors.allow_credentials);
    assert_eq!(cors.max_age, 600);
    let (cors, problems) = cors_of(&[("cors-allow-credentials", "nope"), ("cors-max-age", "-1")]);
    let cors = cors.unwrap();
    assert!(cors.allow_credentials);
    assert_eq!(cors.max_age, DEFAULT_CORS_MAX_AGE);
    assert_eq!(problems.len(), 2);
}

#[test]
fn upstream_vhost_is_host_and_optional_port() {
    for ok in [
        "internal.example",
        "internal.example:8080",
        "10.0.0.1:80",
        "[::1]:8443",
        "a_b",
    ] {
        let parsed = one("upstream-vhost", ok);
        assert_eq!(
            parsed.policy.upstream_vhost,
            Some(HeaderValue::from_str(ok).unwrap())
        );
        assert!(parsed.problems.is_empty(), "{ok}");
    }
    for bad in [
        "",
        "a b",
        "host:",
        "host:99999",
        "http://x",
        "$host",
        "[::1",
        "a/b",
    ] {
        let (parsed, _) = invalid("upstream-vhost", bad);
        assert_eq!(parsed.policy.upstream_vhost, None, "{bad:?}");
    }
}

#[test]
fn x_forwarded_prefix_is_a_literal_header_value() {
    let parsed = one("x-forwarded-prefix", "/api");
    assert_eq!(parsed.policy.forwarded_prefix, Some(hv("/api")));
    for bad in ["", "  ", "/$1", "/a\u{7}"] {
        let (parsed, _) = invalid("x-forwarded-prefix", bad);
        assert_eq!(parsed.policy.forwarded_prefix, None, "{bad:?}");
    }
}

#[test]
fn request_and_response_headers_are_name_value_lines() {
    let parsed = parse(&map(&[
        (&sluice("request-headers"), "X-Env: prod\n\nX-Team:  web \n"),
        (
            &sluice("response-headers"),
            "Strict-Transport-Security: max-age=31536000\r\nX-Empty:",
        ),
    ]));
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    assert_eq!(
        parsed.policy.request_headers,
        [
            (HeaderName::from_static("x-env"), hv("prod")),
            (HeaderName::from_static("x-team"), hv("web")),
        ]
    );
    assert_eq!(
        parsed.policy.response_headers,
        [
            (
                HeaderName::from_static("strict-transport-security"),
                hv("max-age=31536000")
            ),
            (HeaderName::from_static("x-empty"), hv("")),
        ]
    );
}

#[test]
fn header_annotations_refuse_bad_lines_and_hop_by_hop_fields() {
    for (bad, why) in [
        (
            "X-Ok: 1\nno colon",
            "line 2 (\"no colon\") is not \"Name: value\"",
        ),
        ("Bad Name: 1", "line 1: \"Bad Name\" is not a field name"),
        (
            "Connection: close",
            "line 1: connection is a hop-by-hop or framing field and cannot be set",
        ),
        (
            "Host: x",
            "line 1: host is a hop-by-hop or framing field and cannot be set",
        ),
        (
            "Transfer-Encoding: chunked",
            "line 1: transfer-encoding is a hop-by-hop or framing field and cannot be set",
        ),
        (
            "X-A: \u{1}",
            "line 1: \"\\u{1}\" is not a valid field value",
        ),
        ("", "value \"\" has no \"Name: value\" line"),
    ] {
        for name in ["request-headers", "response-headers"] {
            let parsed = parse(&map(&[(&sluice(name), bad)]));
            assert!(parsed.policy.request_headers.is_empty());
            assert!(parsed.policy.response_headers.is_empty());
            assert_eq!(parsed.problems.len(), 1);
            assert_eq!(parsed.problems[0].reason, Reason::InvalidAnnotation);
            assert_eq!(parsed.problems[0].detail, why);
        }
    }
}

#[test]
fn header_annotations_are_sluice_only() {
    let parsed = one("request-headers", "X-A: 1");
    assert!(parsed.policy.request_headers.is_empty());
    let p = problem(&parsed, "request-headers");
    assert_eq!(p.reason, Reason::UnsupportedAnnotation);
    assert_eq!(
        p.detail,
        "not an ingress-nginx annotation; use sluice.dev/request-headers"
    );
}

#[test]
fn snippets_are_refused() {
    for name in [
        "configuration-snippet",
        "server-snippet",
        "auth-snippet",
        "stream-snippet",
        "modsecurity-snippet",
        "anything-snippet",
    ] {
        let parsed = one(name, "more_set_headers \"X: 1\";");
        let p = problem(&parsed, name);
        assert_eq!(p.reason, Reason::SnippetRefused);
        assert!(p.detail.starts_with(
            "snippets are nginx configuration text; sluice never applies annotation values \
             as configuration"
        ));
        assert_eq!(parsed.policy, Policy::default());
    }
    let parsed = parse(&map(&[(&sluice("server-snippet"), "x")]));
    assert_eq!(parsed.problems[0].reason, Reason::SnippetRefused);
}

#[test]
fn unknown_keys_are_reported_as_unsupported() {
    for (name, detail) in [
        (
            "auth-nonsense-key",
            "not supported by sluice: not supported yet",
        ),
        (
            "proxy-body-sise",
            "not supported by sluice (did you mean proxy-body-size?)",
        ),
        ("something-else-entirely", "not supported by sluice"),
    ] {
        let parsed = one(name, "x");
        let p = problem(&parsed, name);
        assert_eq!(p.reason, Reason::UnsupportedAnnotation);
        assert!(p.detail.starts_with(detail), "{name}: {}", p.detail);
    }
    let parsed = parse(&map(&[(&sluice("typo"), "x")]));
    assert_eq!(parsed.problems[0].annotation, "sluice.dev/typo");
    assert_eq!(parsed.problems[0].detail, "not supported by sluice");
}

/// ingress-nginx never serves a location open when its authentication annotations
/// cannot be applied (it marks the location denied: 503); sluice closes the routes.
#[test]
fn access_annotations_sluice_cannot_honour_fail_closed() {
    let closed: &[&[(&str, &str)]] = &[
        &[("auth-type", "basic")],
        &[("auth-type", "digest")],
        &[("auth-secret", "htpasswd"), ("auth-realm", "Staff only")],
        &[("auth-type", "nonsense")],
        // ingress-nginx "Client Certificate Authentication": values that do not parse.
        &[
            ("auth-tls-secret", "default/ca"),
            ("auth-tls-verify-client", "sometimes"),
        ],
        &[("auth-tls-secret", "not/a/secret")],
        &[
            ("auth-tls-secret", "default/ca"),
            ("auth-tls-match-cn", "client"),
        ],
        &[
            ("auth-tls-secret", "default/ca"),
            ("auth-tls-verify-depth", "deep"),
        ],
        &[("auth-url", "not a url")],
        &[("auth-url", "ftp://auth.example/check")],
        &[("configuration-snippet", "allow 10.0.0.0/8;\ndeny all;")],
        &[(
            "server-snippet",
            "if ($http_x_key != \"k\") { return 403; }",
        )],
        &[("auth-snippet", "auth_request /x;")],
    ];
    for pairs in closed {
        let keys: Vec<(String, &str)> = pairs.iter().map(|(k, v)| (nginx(k), *v)).collect();
        let refs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let parsed = parse(&map(&refs));
        assert!(parsed.policy.fail_closed, "{pairs:?}");
        let closing: Vec<&Problem> = parsed
            .problems
            .iter()
            .filter(|p| p.reason == Reason::FailedClosed)
            .collect();
        assert!(!closing.is_empty(), "{pairs:?}");
        for p in closing {
            assert!(p.detail.ends_with(CLOSED), "{}", p.detail);
        }
    }
    let open: &[&[(&str, &str)]] = &[
        &[("auth-realm", "Staff only")],
        &[("auth-tls-verify-depth", "2")],
        &[
            ("auth-tls-secret", "default/ca"),
            ("auth-tls-verify-client", "off"),
        ],
        // Honoured; the compiler closes the routes if the Secret cannot be read.
        &[
            ("auth-tls-secret", "default/ca"),
            ("auth-tls-verify-client", "optional"),
            ("auth-tls-match-cn", "CN=client-.*"),
        ],
        &[
            ("auth-url", "http://auth.example/check"),
            ("satisfy", "any"),
        ],
        &[("allowlist-source-range", "10.0.0.0/8"), ("satisfy", "any")],
        // Honoured (nginx `satisfy any`), and basic auth with its Secret named: the
        // compiler closes the routes if the Secret cannot be read.
        &[
            ("allowlist-source-range", "10.0.0.0/8"),
            ("auth-url", "http://auth.example/check"),
            ("satisfy", "any"),
        ],
        &[("auth-type", "basic"), ("auth-secret", "htpasswd")],
        &[("satisfy", "all")],
        &[("satisfy", "maybe")],
        &[("configuration-snippet", "more_set_headers \"X: 1\";")],
    ];
    for pairs in open {
        let keys: Vec<(String, &str)> = pairs.iter().map(|(k, v)| (nginx(k), *v)).collect();
        let refs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let parsed = parse(&map(&refs));
        assert!(
            !parsed.policy.fail_closed,
            "{pairs:?}: {:?}",
            parsed.problems
        );
    }
    // An invalid source range already refuses everyone (403), as ingress-nginx does.
    let parsed = one("allowlist-source-range", "10.0.0.0/40");
    assert!(!parsed.policy.allow.is_empty() || !parsed.policy.deny.is_empty());
}

#[test]
fn problems_are_sorted_by_annotation() {
    let parsed = parse(&map(&[
        (&nginx("z-unknown"), "1"),
        (&nginx("a-unknown"), "1"),
        (&nginx("proxy-body-size"), "x"),
        (&sluice("m-unknown"), "1"),
    ]));
    let names: Vec<_> = parsed
        .problems
        .iter()
        .map(|p| p.annotation.clone())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(names.len(), 4);
}

#[test]
fn long_values_are_cut_in_messages() {
    let long = "x".repeat(500);
    let (_, detail) = invalid("proxy-body-size", &long);
    assert!(detail.len() < 200, "{detail}");
    assert!(detail.contains('…'));
}

#[test]
fn supported_keys_are_all_handled() {
    // Every supported key, alone with a plausible value, is applied or reported, never
    // left for the "unsupported" sweep.
    for name in SUPPORTED {
        let key = sluice(name);
        let parsed = parse(&map(&[(&key, "1")]));
        assert!(
            parsed
                .problems
                .iter()
                .all(|p| p.reason != Reason::UnsupportedAnnotation),
            "{name}: {:?}",
            parsed.problems
        );
    }
}

fn key_strategy() -> impl Strategy<Value = String> {
    let mut names: Vec<String> = SUPPORTED.iter().map(|s| (*s).to_owned()).collect();
    names.extend(
        [
            "rewrite-target",
            "configuration-snippet",
            "server-snippet",
            "affinity",
            "custom-headers",
            "",
        ]
        .map(str::to_owned),
    );
    let name = prop_oneof![
        4 => proptest::sample::select(names),
        1 => "[a-z-]{0,12}",
    ];
    let prefix = proptest::sample::select(vec![NGINX_PREFIX, SLUICE_PREFIX, "example.com/"]);
    (prefix, name).prop_map(|(p, n)| format!("{p}{n}"))
}

fn value_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::sample::select(vec![
            "true",
            "false",
            "0",
            "1",
            "301",
            "307",
            "308",
            "10m",
            "30s",
            "1m30s",
            "https://example.com",
            "/app",
            "10.0.0.0/8, ::1",
            "*",
            "https://*.a.example",
            "GET, POST",
            "X-A: 1\nX-B: 2",
            "host:80",
            "",
        ])
        .prop_map(str::to_owned),
        "[ -~\n]{0,40}",
    ]
}

proptest! {
    #[test]
    fn every_key_is_applied_or_reported_exactly_once(
        annotations in proptest::collection::btree_map(key_strategy(), value_strategy(), 0..12)
    ) {
        let (parsed, applied) = parse_traced(&annotations);
        let ours: Vec<&str> = annotations
            .keys()
            .filter_map(|k| {
                if let Some(name) = k.strip_prefix(NGINX_PREFIX) {
                    // Shadowed by the same key under sluice.dev/: ignored silently.
                    let shadowed = annotations.contains_key(&format!("{SLUICE_PREFIX}{name}"));
                    (!shadowed).then_some(k.as_str())
                } else {
                    k.starts_with(SLUICE_PREFIX).then_some(k.as_str())
                }
            })
            .collect();
        let mut seen: Vec<&str> = applied.clone();
        seen.extend(parsed.problems.iter().map(|p| p.annotation.as_str()));
        seen.sort_unstable();
        let mut expected = ours.clone();
        expected.sort_unstable();
        prop_assert_eq!(seen, expected);
        for p in &parsed.problems {
            prop_assert!(matches!(
                p.reason,
                Reason::UnsupportedAnnotation
                    | Reason::InvalidAnnotation
                    | Reason::SnippetRefused
                    | Reason::FailedClosed
            ));
            prop_assert!(!p.detail.is_empty());
        }
        // Whatever the values, a policy field holds only validated data.
        if let Some(redirect) = &parsed.policy.redirect {
            prop_assert!((300..=308).contains(&redirect.status));
        }
        prop_assert!(parsed.policy.connect_timeout.is_none_or(|d| !d.is_zero()));
        // Closed exactly when a problem says so.
        prop_assert_eq!(
            parsed.policy.fail_closed,
            parsed.problems.iter().any(|p| p.reason == Reason::FailedClosed)
        );
    }
}

#[test]
fn sluice_compression_annotation_switches_the_route() {
    for (value, expected) in [
        ("on", Some(true)),
        ("off", Some(false)),
        (" on ", Some(true)),
    ] {
        let parsed = parse(&map(&[(&sluice("compression"), value)]));
        assert_eq!(parsed.policy.compression, expected, "{value:?}");
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    }
    assert_eq!(parse(&map(&[])).policy.compression, None);
}

#[test]
fn sluice_compression_annotation_invalid_value_is_reported_and_the_global_setting_stays() {
    for bad in ["true", "gzip", "", "ON"] {
        let parsed = parse(&map(&[(&sluice("compression"), bad)]));
        assert_eq!(parsed.policy.compression, None);
        assert_eq!(parsed.problems.len(), 1, "{bad:?}");
        let p = &parsed.problems[0];
        assert_eq!(p.annotation, "sluice.dev/compression");
        assert_eq!(p.reason, Reason::InvalidAnnotation);
        assert!(p.detail.contains("is not on or off"), "{}", p.detail);
    }
    // Under the nginx prefix it is not an ingress-nginx annotation.
    let parsed = one("compression", "on");
    assert_eq!(parsed.policy.compression, None);
    let p = problem(&parsed, "compression");
    assert_eq!(p.reason, Reason::UnsupportedAnnotation);
    assert_eq!(
        p.detail,
        "not an ingress-nginx annotation; use sluice.dev/compression"
    );
}

#[test]
fn opentelemetry_annotations_switch_tracing_and_trust_per_ingress() {
    let parsed = parse(&map(&[
        (&nginx("enable-opentelemetry"), "true"),
        (&nginx("opentelemetry-trust-incoming-span"), "false"),
    ]));
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    assert_eq!(parsed.policy.opentelemetry, Some(true));
    assert_eq!(parsed.policy.opentelemetry_trust_incoming_span, Some(false));
    let off = one("enable-opentelemetry", "false");
    assert_eq!(off.policy.opentelemetry, Some(false));
    assert_eq!(off.policy.opentelemetry_trust_incoming_span, None);
    // Absent: the proxy's flags decide.
    let none = parse(&map(&[]));
    assert_eq!(none.policy.opentelemetry, None);
    assert_eq!(none.policy.opentelemetry_trust_incoming_span, None);
}

#[test]
fn opentelemetry_annotations_invalid_value_is_reported_and_the_flag_applies() {
    let parsed = one("enable-opentelemetry", "sometimes");
    assert_eq!(parsed.policy.opentelemetry, None);
    let p = problem(&parsed, "enable-opentelemetry");
    assert_eq!(p.reason, Reason::InvalidAnnotation);
    assert!(
        p.detail.contains("--enable-opentelemetry applies"),
        "{}",
        p.detail
    );
    let parsed = one("opentelemetry-operation-name", "HTTP $request_method");
    let p = problem(&parsed, "opentelemetry-operation-name");
    assert_eq!(p.reason, Reason::UnsupportedAnnotation);
}

/// ingress-nginx "Backend Certificate Authentication": `proxy-ssl-ciphers`,
/// `proxy-ssl-protocols` and `proxy-ssl-verify-depth` (proxyssl/main.go).
#[test]
fn backend_certificate_authentication_ciphers_protocols_and_depth() {
    use crate::openssl_ciphers::Tls12Suite;
    let tls = |parsed: &Parsed| parsed.policy.upstream_tls.clone().expect("upstream TLS");

    let parsed = one(
        "proxy-ssl-ciphers",
        "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384",
    );
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    assert_eq!(
        tls(&parsed).ciphers,
        Some(vec![
            Tls12Suite::EcdheRsaAes128GcmSha256,
            Tls12Suite::EcdheRsaAes256GcmSha384
        ])
    );
    // Unverified, no SNI: the ciphers alone change nothing else.
    assert!(!tls(&parsed).verify && !tls(&parsed).server_name);

    // Parts rustls lacks are reported; the rest applies.
    let parsed = one(
        "proxy-ssl-ciphers",
        "DHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
    );
    let p = problem(&parsed, "proxy-ssl-ciphers");
    assert_eq!(p.reason, Reason::InvalidAnnotation);
    assert!(
        p.detail.starts_with(
            "\"DHE-RSA-AES128-GCM-SHA256\" (no cipher suite or keyword sluice knows) ignored"
        ),
        "{}",
        p.detail
    );
    assert_eq!(
        tls(&parsed).ciphers,
        Some(vec![Tls12Suite::EcdheRsaAes128GcmSha256])
    );

    // Nothing usable: reported, the default applies.
    let (parsed, detail) = invalid("proxy-ssl-ciphers", "RC4:3DES");
    assert!(detail.ends_with("rustls's suites are offered"), "{detail}");
    assert_eq!(parsed.policy.upstream_tls, None);

    let parsed = one("proxy-ssl-protocols", "TLSv1.3");
    assert!(parsed.problems.is_empty());
    let protocols = tls(&parsed).protocols.clone().unwrap();
    assert!(protocols.tls13 && !protocols.tls12);
    let parsed = one("proxy-ssl-protocols", "TLSv1.1 TLSv1.2");
    let p = problem(&parsed, "proxy-ssl-protocols");
    assert_eq!(
        p.detail,
        "TLSv1.1 ignored: rustls does not offer them; TLSv1.2 offered"
    );
    assert!(tls(&parsed).protocols.clone().unwrap().tls12);
    let (parsed, detail) = invalid("proxy-ssl-protocols", "TLSv1 TLSv1.1");
    assert!(detail.contains("lists only TLSv1 TLSv1.1"), "{detail}");
    assert_eq!(parsed.policy.upstream_tls, None);

    // Depth: default 1 with verification, the value given otherwise; without
    // verification nginx never checks it.
    let verified = |depth: Option<&str>| {
        let mut pairs = vec![(nginx("proxy-ssl-verify"), "on".to_owned())];
        if let Some(depth) = depth {
            pairs.push((nginx("proxy-ssl-verify-depth"), depth.to_owned()));
        }
        parse(&pairs.into_iter().collect())
    };
    assert_eq!(tls(&verified(None)).verify_depth, Some(1));
    assert_eq!(tls(&verified(Some("3"))).verify_depth, Some(3));
    assert_eq!(tls(&verified(Some("0"))).verify_depth, Some(1));
    let parsed = verified(Some("deep"));
    assert_eq!(parsed.problems[0].reason, Reason::InvalidAnnotation);
    assert_eq!(tls(&parsed).verify_depth, Some(1));
    let (_, detail) = invalid("proxy-ssl-verify-depth", "2");
    assert_eq!(detail, "has no effect without proxy-ssl-verify: \"on\"");
}

/// ingress-nginx "Enable Rewrite Log", "Service Upstream" and "Session Affinity"
/// (`affinity-canary-behavior`): booleans and values as its parsers take them.
#[test]
fn rewrite_log_service_upstream_and_canary_behavior() {
    assert!(one("enable-rewrite-log", "true").policy.rewrite_log);
    assert!(!one("enable-rewrite-log", "false").policy.rewrite_log);
    let (parsed, detail) = invalid("enable-rewrite-log", "yes");
    assert!(!parsed.policy.rewrite_log);
    assert!(detail.ends_with("rewrites are not logged"), "{detail}");

    assert!(one("service-upstream", "true").service_upstream);
    assert!(!one("service-upstream", "false").service_upstream);
    let (parsed, detail) = invalid("service-upstream", "on");
    assert!(!parsed.service_upstream);
    assert!(detail.ends_with("the endpoints are used"), "{detail}");

    // Only on a canary Ingress.
    let (_, detail) = invalid("affinity-canary-behavior", "legacy");
    assert_eq!(detail, "has no effect without canary: \"true\"");
    let parsed = parse(&map(&[
        (&nginx("canary"), "true"),
        (&nginx("affinity-canary-behavior"), "legacy"),
    ]));
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    assert!(parsed.canary.unwrap().legacy_affinity);
}
