//! The `CORS` filter of an HTTPRoute rule, checked, as a [`Cors`] policy (the same one
//! ingress-nginx's `enable-cors` compiles to).
//!
//! Gateway API v1.6 `HTTPCORSFilter`: origins `scheme://host[:port]`, `scheme://*.domain`
//! or `*`; methods and header names, or `*`; `maxAge` defaults to 5 seconds.

use http::HeaderValue;

use super::types::HttpCorsFilter;
use crate::policy::{Cors, OriginPattern};

/// Gateway API's default `maxAge`.
const DEFAULT_MAX_AGE: u64 = 5;

/// The policy of filter `at` (a field path for messages). `Err`: a sentence naming the field.
pub(crate) fn cors(at: &str, filter: &HttpCorsFilter) -> Result<Cors, String> {
    let mut origins = Vec::with_capacity(filter.allow_origins.len());
    for (i, origin) in filter.allow_origins.iter().enumerate() {
        let pattern = OriginPattern::parse(origin).ok_or_else(|| {
            format!(
                "{at}.allowOrigins[{i}]: {origin:?} is not an origin (scheme://host[:port], \
                 scheme://*.domain[:port] or *)"
            )
        })?;
        origins.push(pattern);
    }
    if origins.contains(&OriginPattern::Any) {
        origins = vec![OriginPattern::Any];
    }
    let max_age = match filter.max_age {
        None => DEFAULT_MAX_AGE,
        Some(age) => u64::try_from(age)
            .ok()
            .filter(|age| *age >= 1)
            .ok_or_else(|| format!("{at}.maxAge: {age} is not a number of seconds from 1"))?,
    };
    Ok(Cors {
        origins,
        allow_methods: tokens(at, "allowMethods", &filter.allow_methods)?,
        allow_headers: tokens(at, "allowHeaders", &filter.allow_headers)?,
        expose_headers: tokens(at, "exposeHeaders", &filter.expose_headers)?,
        allow_credentials: filter.allow_credentials.unwrap_or(false),
        max_age,
    })
}

/// A list of methods or field names as one `a, b` value (`*` alone when it is listed);
/// `None` for an empty list.
fn tokens(at: &str, field: &str, list: &[String]) -> Result<Option<HeaderValue>, String> {
    if list.is_empty() {
        return Ok(None);
    }
    if list.iter().any(|t| t == "*") {
        return Ok(Some(HeaderValue::from_static("*")));
    }
    for (i, token) in list.iter().enumerate() {
        if token.is_empty() || !token.bytes().all(is_tchar) {
            return Err(format!("{at}.{field}[{i}]: {token:?} is not a token"));
        }
    }
    HeaderValue::from_str(&list.join(", "))
        .map(Some)
        .map_err(|_| format!("{at}.{field}: not a header value"))
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(v: serde_json::Value) -> HttpCorsFilter {
        serde_json::from_value(v).unwrap()
    }

    /// The conformance test HTTPRouteCORS's first route, compiled.
    #[test]
    fn the_spec_fields_compile_to_the_policy() {
        let cors = cors(
            "f",
            &filter(serde_json::json!({
                "allowOrigins": ["https://www.foo.com", "https://*.bar.com"],
                "allowMethods": ["GET", "OPTIONS"],
                "allowHeaders": ["x-header-1", "x-header-2"],
                "exposeHeaders": ["x-header-3"],
                "allowCredentials": true,
                "maxAge": 3600
            })),
        )
        .unwrap();
        assert_eq!(
            cors.allow_origin("https://www.foo.com"),
            Some("https://www.foo.com")
        );
        assert_eq!(
            cors.allow_origin("https://a.b.bar.com"),
            Some("https://a.b.bar.com")
        );
        assert_eq!(cors.allow_origin("https://bar.com"), None);
        assert_eq!(cors.allow_origin("https://foobar.com"), None);
        assert_eq!(cors.allow_methods_for(None).unwrap(), "GET, OPTIONS");
        assert_eq!(
            cors.allow_headers_for(None).unwrap(),
            "x-header-1, x-header-2"
        );
        assert_eq!(cors.expose_headers.unwrap(), "x-header-3");
        assert!(cors.allow_credentials);
        assert_eq!(cors.max_age, 3600);
    }

    /// Gateway API: `*` with credentials is answered with what the preflight asks for (a
    /// browser reads `*` literally then); without credentials `*` stays.
    #[test]
    fn wildcards_echo_the_preflight_only_with_credentials() {
        let with = cors(
            "f",
            &filter(
                serde_json::json!({"allowOrigins": ["*"], "allowMethods": ["*"],
                "allowHeaders": ["*", "x-a"], "allowCredentials": true}),
            ),
        )
        .unwrap();
        assert_eq!(
            with.allow_origin("https://o.example"),
            Some("https://o.example")
        );
        assert_eq!(with.allow_methods_for(Some(b"PUT")).unwrap(), "PUT");
        assert_eq!(
            with.allow_headers_for(Some(b"x-1, x-2")).unwrap(),
            "x-1, x-2"
        );
        assert_eq!(with.allow_methods_for(None).unwrap(), "*");
        let without = cors(
            "f",
            &filter(serde_json::json!({"allowOrigins": ["*"], "allowMethods": ["*"]})),
        )
        .unwrap();
        assert_eq!(without.allow_origin("https://o.example"), Some("*"));
        assert_eq!(without.allow_methods_for(Some(b"PUT")).unwrap(), "*");
        assert_eq!(without.allow_headers_for(Some(b"x-1")), None);
        assert_eq!(without.max_age, DEFAULT_MAX_AGE);
        assert!(!without.allow_credentials);
    }

    #[test]
    fn bad_values_name_the_field() {
        for (v, field) in [
            (
                serde_json::json!({"allowOrigins": ["foo.com"]}),
                "f.allowOrigins[0]",
            ),
            (
                serde_json::json!({"allowMethods": ["GET", "G T"]}),
                "f.allowMethods[1]",
            ),
            (
                serde_json::json!({"allowHeaders": ["x:y"]}),
                "f.allowHeaders[0]",
            ),
            (serde_json::json!({"maxAge": 0}), "f.maxAge"),
        ] {
            let error = cors("f", &filter(v)).unwrap_err();
            assert!(error.starts_with(field), "{error}");
        }
    }
}
