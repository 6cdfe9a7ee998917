//! Accept-Encoding (RFC 9110 §12.5.3) and nginx's gzip filter conditions.

use super::*;
use crate::compress::{parse_types, parse_user_agents};
use proptest::prelude::*;

const ALL: [bool; 3] = [true, true, true];

fn accepted(value: &str) -> Accepted {
    Accepted::parse([value.as_bytes()])
}

fn choice(value: &str) -> Option<&'static str> {
    accepted(value).choose(ALL).map(Coding::token)
}

#[test]
fn rfc9110_accept_encoding_q_values_pick_the_highest() {
    assert_eq!(choice("gzip"), Some("gzip"));
    assert_eq!(choice("gzip;q=0.5, br;q=0.8"), Some("br"));
    assert_eq!(choice("br;q=0.1, gzip;q=0.9, zstd;q=0.5"), Some("gzip"));
    assert_eq!(choice("zstd;q=1.0, gzip;q=0.999"), Some("zstd"));
    assert_eq!(choice("GZIP;Q=1"), Some("gzip"), "case-insensitive");
    assert_eq!(
        choice("x-gzip"),
        Some("gzip"),
        "x-gzip is gzip (RFC 9110 §8.4.1.3)"
    );
    assert_eq!(
        choice(" gzip ; q = 0.5 "),
        Some("gzip"),
        "whitespace around"
    );
}

#[test]
fn rfc9110_accept_encoding_ties_go_to_the_server_preference() {
    // Chrome's and Firefox's field: br over zstd over gzip.
    assert_eq!(choice("gzip, deflate, br, zstd"), Some("br"));
    assert_eq!(choice("gzip, zstd"), Some("zstd"));
    assert_eq!(choice("gzip;q=0.5, zstd;q=0.5, br;q=0.4"), Some("zstd"));
}

#[test]
fn rfc9110_accept_encoding_q0_refuses() {
    assert_eq!(choice("gzip;q=0"), None);
    assert_eq!(choice("gzip;q=0.000, br"), Some("br"));
    assert_eq!(choice("br;q=0, gzip;q=0.001"), Some("gzip"));
    assert_eq!(choice("*;q=0"), None);
}

#[test]
fn rfc9110_accept_encoding_star_covers_codings_not_named() {
    assert_eq!(choice("*"), Some("br"));
    assert_eq!(choice("br;q=0, *"), Some("zstd"));
    assert_eq!(choice("br;q=0, zstd;q=0, *;q=0.2"), Some("gzip"));
    assert_eq!(choice("gzip;q=0.5, *;q=0.1"), Some("gzip"));
}

#[test]
fn rfc9110_accept_encoding_identity_and_unknown_codings_choose_nothing() {
    assert_eq!(choice(""), None);
    assert_eq!(choice("identity"), None);
    assert_eq!(choice("deflate, compress"), None);
    // identity;q=0 without an acceptable coding: the body is sent as is anyway (a 406 would
    // break more clients than it helps).
    assert_eq!(choice("identity;q=0"), None);
    assert_eq!(
        Accepted::parse(std::iter::empty::<&[u8]>()).choose(ALL),
        None
    );
}

#[test]
fn rfc9110_accept_encoding_bad_members_are_ignored() {
    assert_eq!(choice("gzip;q=2"), None);
    assert_eq!(choice("gzip;q=1.5, br;q=0.5"), Some("br"));
    assert_eq!(choice("gzip;q=0.1234"), None, "at most three decimals");
    assert_eq!(choice("gzip;q="), None);
    assert_eq!(choice("gzip;q"), None);
    assert_eq!(choice("gzip;q=-1"), None);
    assert_eq!(choice(",,gzip,,"), Some("gzip"));
    assert_eq!(
        choice("gzip;level=1"),
        Some("gzip"),
        "other parameters are ignored"
    );
    // Several fields are one list.
    let two = Accepted::parse([&b"gzip;q=0.2"[..], &b"br;q=0.9"[..]]);
    assert_eq!(two.choose(ALL), Some(Coding::Brotli));
}

#[test]
fn only_allowed_codings_are_chosen() {
    let a = accepted("br, gzip;q=0.5");
    assert_eq!(a.choose([true, false, false]), Some(Coding::Gzip));
    assert_eq!(a.choose([false, false, true]), None);
    assert_eq!(a.choose([false; 3]), None);
}

#[test]
fn q_values_parse_in_thousandths() {
    assert_eq!(parse_q(b"1"), Some(1000));
    assert_eq!(parse_q(b"1."), Some(1000));
    assert_eq!(parse_q(b"1.000"), Some(1000));
    assert_eq!(parse_q(b"0.5"), Some(500));
    assert_eq!(parse_q(b"0.05"), Some(50));
    assert_eq!(parse_q(b"0.123"), Some(123));
    assert_eq!(parse_q(b"1.001"), None);
    assert_eq!(parse_q(b"01"), None);
    assert_eq!(parse_q(b""), None);
}

fn settings(f: impl FnOnce(&mut Compression)) -> Compression {
    let mut s = Compression {
        use_gzip: true,
        enable_brotli: true,
        enable_zstd: true,
        ..Compression::default()
    };
    f(&mut s);
    s
}

fn request() -> RequestFacts<'static> {
    RequestFacts::default()
}

fn json(length: Option<u64>) -> ResponseFacts<'static> {
    ResponseFacts {
        status: 200,
        content_type: Some(b"application/json; charset=utf-8"),
        length,
        ..ResponseFacts::default()
    }
}

fn decide(s: &Compression, accept: &str, response: ResponseFacts<'_>) -> Outcome {
    let asked = asked(s, None, request(), [accept.as_bytes()]).expect("compression is on");
    outcome(s, &asked, response)
}

#[test]
fn ngx_http_gzip_module_gzip_min_length() {
    let s = settings(|s| {
        s.enable_brotli = false;
        s.enable_zstd = false;
    });
    assert_eq!(decide(&s, "gzip", json(Some(255))), Outcome::default());
    let at = decide(&s, "gzip", json(Some(256)));
    assert_eq!(at.coding, Some(Coding::Gzip));
    assert!(at.vary);
    // Unknown length (chunked): compressed.
    assert_eq!(decide(&s, "gzip", json(None)).coding, Some(Coding::Gzip));
}

#[test]
fn brotli_min_length_is_per_coding() {
    // 100 bytes: over brotli's 20, under gzip's 256; a client that takes both gets br, one
    // that takes only gzip gets nothing (and the response still varies).
    let s = settings(|_| {});
    assert_eq!(
        decide(&s, "gzip, br", json(Some(100))).coding,
        Some(Coding::Brotli)
    );
    let gzip_only = decide(&s, "gzip", json(Some(100)));
    assert_eq!(gzip_only.coding, None);
    assert!(gzip_only.vary);
}

#[test]
fn ngx_http_gzip_module_gzip_types() {
    let s = settings(|_| {});
    let typed = |t: &'static [u8]| ResponseFacts {
        content_type: Some(t),
        ..json(Some(1000))
    };
    assert_eq!(decide(&s, "gzip", typed(b"image/png")), Outcome::default());
    assert_eq!(
        decide(&s, "gzip", typed(b"TEXT/PLAIN")).coding,
        Some(Coding::Gzip)
    );
    assert_eq!(
        decide(&s, "gzip", typed(b"text/css ;charset=x")).coding,
        Some(Coding::Gzip)
    );
    // text/html always is, as in nginx.
    assert_eq!(
        decide(&s, "gzip", typed(b"text/html")).coding,
        Some(Coding::Gzip)
    );
    // No Content-Type: not compressed, even with `*`.
    let any = settings(|s| s.gzip_types = MediaTypes::Any);
    let untyped = ResponseFacts {
        content_type: None,
        ..json(Some(1000))
    };
    assert_eq!(decide(&any, "gzip", untyped), Outcome::default());
    assert_eq!(
        decide(&any, "gzip", typed(b"image/png")).coding,
        Some(Coding::Gzip)
    );
    // gRPC never.
    assert_eq!(
        decide(&any, "gzip", typed(b"application/grpc+proto")),
        Outcome::default()
    );
}

#[test]
fn ngx_http_gzip_module_statuses_and_encoded_responses_are_skipped() {
    let s = settings(|_| {});
    for status in [206, 204, 304, 301, 500, 201] {
        let r = ResponseFacts {
            status,
            ..json(Some(1000))
        };
        assert_eq!(decide(&s, "gzip", r), Outcome::default(), "{status}");
    }
    for status in [200, 403, 404] {
        let r = ResponseFacts {
            status,
            ..json(Some(1000))
        };
        assert_eq!(decide(&s, "gzip", r).coding, Some(Coding::Gzip), "{status}");
    }
    let encoded = ResponseFacts {
        encoded: true,
        ..json(Some(1000))
    };
    assert_eq!(decide(&s, "gzip, br", encoded), Outcome::default());
    let no_transform = ResponseFacts {
        no_transform: true,
        ..json(Some(1000))
    };
    assert_eq!(decide(&s, "gzip, br", no_transform), Outcome::default());
}

#[test]
fn requests_that_rule_compression_out() {
    let s = settings(|_| {});
    let none = |r: RequestFacts<'_>| asked(&s, None, r, [&b"gzip"[..]]).is_none();
    assert!(none(RequestFacts {
        head: true,
        ..request()
    }));
    assert!(none(RequestFacts {
        range: true,
        ..request()
    }));
    assert!(none(RequestFacts {
        http10: true,
        ..request()
    }));
    assert!(!none(request()));
    // Globally off, nothing is parsed.
    let off = Compression::default();
    assert!(asked(&off, None, request(), [&b"gzip"[..]]).is_none());
}

#[test]
fn sluice_compression_annotation_overrides_the_global_setting() {
    let off = Compression::default();
    let on = asked(&off, Some(true), request(), [&b"gzip, br"[..]]).unwrap();
    assert_eq!(
        on.enabled,
        [true, false, false],
        "on with nothing global: gzip"
    );
    assert_eq!(
        outcome(&off, &on, json(Some(1000))).coding,
        Some(Coding::Gzip)
    );
    let s = settings(|_| {});
    assert!(asked(&s, Some(false), request(), [&b"gzip"[..]]).is_none());
    assert_eq!(
        asked(&s, Some(true), request(), [&b"gzip"[..]])
            .unwrap()
            .enabled,
        ALL
    );
}

#[test]
fn ngx_http_gzip_module_gzip_disable() {
    let s = settings(|s| s.gzip_disable = parse_user_agents("msie6 curl/7\\.").unwrap());
    let agent = |ua: &'static [u8]| RequestFacts {
        user_agent: Some(ua),
        ..request()
    };
    let old_ie = asked(
        &s,
        None,
        agent(b"Mozilla/4.0 (compatible; MSIE 6.0)"),
        [&b"gzip, br"[..]],
    );
    assert_eq!(
        old_ie.unwrap().enabled,
        [false, true, true],
        "gzip only is disabled"
    );
    let curl = asked(&s, None, agent(b"CURL/7.88"), [&b"gzip"[..]]).unwrap();
    assert_eq!(outcome(&s, &curl, json(Some(1000))).coding, None);
    let other = asked(&s, None, agent(b"Mozilla/5.0"), [&b"gzip"[..]]).unwrap();
    assert_eq!(
        outcome(&s, &other, json(Some(1000))).coding,
        Some(Coding::Gzip)
    );
    assert!(parse_user_agents("(").is_err());
}

#[test]
fn ngx_http_gzip_module_gzip_types_values_parse() {
    assert_eq!(parse_types("*").unwrap(), MediaTypes::Any);
    assert_eq!(
        parse_types(" text/plain  Application/JSON,image/svg+xml").unwrap(),
        MediaTypes::List(vec![
            "text/plain".into(),
            "application/json".into(),
            "image/svg+xml".into()
        ])
    );
    assert!(parse_types("text").is_err());
    assert!(parse_types("text/plain; charset=utf-8").is_err());
    assert_eq!(parse_types("").unwrap(), MediaTypes::List(vec![]));
}

#[test]
fn header_helpers() {
    assert!(has_no_transform(b"public, No-Transform"));
    assert!(!has_no_transform(b"no-transformer"));
    assert!(is_encoded(b"gzip"));
    assert!(!is_encoded(b"identity"));
    assert!(!is_encoded(b""));
    assert!(varies_on_encoding(b"Origin, accept-encoding"));
    assert!(varies_on_encoding(b"*"));
    assert!(!varies_on_encoding(b"Origin"));
    assert_eq!(weakened_etag(b"\"abc\"").unwrap(), b"W/\"abc\"");
    assert_eq!(weakened_etag(b"W/\"abc\""), None);
    assert_eq!(media_type(b" text/html ; charset=utf-8"), b"text/html");
}

/// The choice made the slow, obvious way: the highest q-value of each allowed coding
/// (named, else `*`, else 0), ties broken by the preference order.
fn model(members: &[(String, Option<u16>)], allowed: [bool; 3]) -> Option<Coding> {
    let q_of = |name: &str| -> Option<u16> {
        members
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, q)| q.unwrap_or(1000))
            .max()
    };
    let mut best = None;
    for coding in Coding::PREFERENCE {
        if !allowed[coding as usize] {
            continue;
        }
        let named = match coding {
            Coding::Gzip => [q_of("gzip"), q_of("x-gzip")].into_iter().flatten().max(),
            other => q_of(other.token()),
        };
        let q = named.or_else(|| q_of("*")).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((coding, q));
        }
    }
    best.map(|(c, _)| c)
}

fn render_q(q: u16) -> String {
    if q == 1000 {
        "1".to_owned()
    } else {
        format!("0.{q:03}")
    }
}

proptest! {
    #[test]
    fn accept_encoding_choice_matches_the_model(
        members in proptest::collection::vec(
            (prop::sample::select(vec!["gzip", "GZip", "x-gzip", "br", "zstd", "*", "identity", "deflate"]),
             proptest::option::of(0u16..=1000)),
            0..6),
        allowed in proptest::array::uniform3(any::<bool>()),
        spaces in any::<bool>(),
    ) {
        let sep = if spaces { " , " } else { "," };
        let field = members
            .iter()
            .map(|(name, q)| match q {
                Some(q) => format!("{name};q={}", render_q(*q)),
                None => (*name).to_owned(),
            })
            .collect::<Vec<_>>()
            .join(sep);
        let owned: Vec<(String, Option<u16>)> =
            members.iter().map(|(n, q)| ((*n).to_owned(), *q)).collect();
        prop_assert_eq!(accepted(&field).choose(allowed), model(&owned, allowed), "{}", field);
    }

    #[test]
    fn accept_encoding_never_panics_and_never_picks_a_refused_coding(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let a = Accepted::parse([&bytes[..]]);
        if let Some(coding) = a.choose(ALL) {
            prop_assert!(a.quality(coding) > 0);
        }
    }
}
