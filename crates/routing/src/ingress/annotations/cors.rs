//! CORS: `enable-cors` and the `cors-*` keys.

use super::*;

/// `enable-cors` and the `cors-*` keys, with ingress-nginx's defaults (`cors/main.go`).
pub(super) fn cors(cx: &mut Cx<'_>) -> Option<Cors> {
    let enabled = cx
        .value("enable-cors", |v| {
            parse_bool(v).map_err(|e| format!("{e}; CORS stays off"))
        })
        .unwrap_or(false);
    if !enabled {
        for name in CORS_KEYS {
            if let Some(entry) = cx.take(name) {
                cx.invalid(entry, "has no effect without enable-cors: \"true\"");
            }
        }
        return None;
    }

    let origins = match cx.take("cors-allow-origin") {
        None => vec![OriginPattern::Any],
        Some(entry) => {
            let (origins, rejected) = parse_origins(entry.value);
            if rejected.is_empty() {
                cx.applied(entry);
            } else {
                let list = rejected
                    .iter()
                    .map(|r| shown(r))
                    .collect::<Vec<_>>()
                    .join(", ");
                let tail = if origins.is_empty() {
                    "; no origin is allowed"
                } else {
                    ""
                };
                cx.invalid(
                    entry,
                    format!(
                        "{list} ignored: not an origin (scheme://host[:port], \
                         scheme://*.domain[:port], null or *){tail}"
                    ),
                );
            }
            origins
        }
    };
    let allow_methods: Option<HeaderValue> = cx
        .value("cors-allow-methods", |v| {
            parse_tokens(v, "method").map_err(|e| format!("{e}; the default is used"))
        })
        .unwrap_or(HeaderValue::from_static(DEFAULT_CORS_METHODS))
        .into();
    let allow_headers: Option<HeaderValue> = cx
        .value("cors-allow-headers", |v| {
            parse_tokens(v, "field name").map_err(|e| format!("{e}; the default is used"))
        })
        .unwrap_or(HeaderValue::from_static(DEFAULT_CORS_HEADERS))
        .into();
    let expose_headers = cx.value("cors-expose-headers", |v| parse_tokens(v, "field name"));
    let allow_credentials = cx
        .value("cors-allow-credentials", |v| {
            parse_bool(v).map_err(|e| format!("{e}; the default true is used"))
        })
        .unwrap_or(true);
    let max_age = cx
        .value("cors-max-age", |v| {
            v.trim().parse::<u64>().map_err(|_| {
                format!(
                    "value {} is not a number of seconds; the default {DEFAULT_CORS_MAX_AGE} \
                     is used",
                    shown(v)
                )
            })
        })
        .unwrap_or(DEFAULT_CORS_MAX_AGE);
    Some(Cors {
        origins,
        allow_methods,
        allow_headers,
        expose_headers,
        allow_credentials,
        max_age,
    })
}

/// `cors-allow-origin`: the patterns, and the entries that are not origins. A `*` anywhere
/// allows every origin (ingress-nginx keeps only `*` then). Unlike ingress-nginx, which
/// falls back to `*` when the whole value fails its check, bad entries are only dropped.
pub(super) fn parse_origins(value: &str) -> (Vec<OriginPattern>, Vec<&str>) {
    let mut origins = Vec::new();
    let mut rejected = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match OriginPattern::parse(item) {
            Some(pattern) => origins.push(pattern),
            None => rejected.push(item),
        }
    }
    if value.trim().is_empty() {
        rejected.push(value);
    }
    if origins.contains(&OriginPattern::Any) {
        origins = vec![OriginPattern::Any];
    }
    (origins, rejected)
}

/// A comma-separated list of HTTP tokens (methods, field names), normalised to `a, b`.
pub(super) fn parse_tokens(value: &str, what: &str) -> Result<HeaderValue, String> {
    let items: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err(format!("value {} is empty", shown(value)));
    }
    if let Some(bad) = items.iter().find(|item| !item.bytes().all(is_tchar)) {
        return Err(format!(
            "value {}: {} is not a {what}",
            shown(value),
            shown(bad)
        ));
    }
    HeaderValue::from_str(&items.join(", "))
        .map_err(|_| format!("value {} is not a valid header value", shown(value)))
}

/// RFC 9110 `tchar`.
pub(super) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
