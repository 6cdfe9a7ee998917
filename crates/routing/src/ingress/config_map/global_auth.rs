//! The ingress-nginx ConfigMap keys of the authentication family that sluice applies:
//! `global-allowed-response-headers` (which names `custom-headers` may set). Kept apart
//! from `keys.rs` and `mod.rs`, which only hook them in.

use crate::nginx_config::NginxConfig;

/// The keys read here.
pub(super) const KEYS: &[&str] = &["global-allowed-response-headers"];

/// Applies `key` when it is one of [`KEYS`]; `None` otherwise.
pub(super) fn apply(out: &mut NginxConfig, key: &str, value: &str) -> Option<Result<(), String>> {
    match key {
        "global-allowed-response-headers" => Some(allowed_response_headers(value).map(|names| {
            out.allowed_response_headers = names;
        })),
        _ => None,
    }
}

/// `global-allowed-response-headers`: comma-separated header names (ingress-nginx's
/// `splitAndTrimSpace`; a name outside `^[a-zA-Z\d\-_]+$` is refused, where ingress-nginx
/// drops it with a log line).
fn allowed_response_headers(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let valid = name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if valid {
                Ok(name.to_owned())
            } else {
                Err(format!("{name:?} is not a header name"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ingress-nginx's `ReadConfig` for `global-allowed-response-headers`.
    #[test]
    fn allowed_response_headers_are_split_and_trimmed() {
        let mut out = NginxConfig::default();
        let applied = apply(&mut out, "global-allowed-response-headers", " X-A ,X_B,, ");
        assert_eq!(applied, Some(Ok(())));
        assert_eq!(out.allowed_response_headers, ["X-A", "X_B"]);
        assert!(allowed_response_headers("X-A, X B").is_err());
        assert_eq!(apply(&mut out, "block-cidrs", "1.2.3.4"), None);
    }
}
