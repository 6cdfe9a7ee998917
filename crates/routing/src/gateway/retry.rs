//! The `retry` of an HTTPRoute rule, checked, as the [`NextUpstream`] rules the proxy's
//! retry loop follows (the same ones as ingress-nginx's `proxy-next-upstream`).
//!
//! Gateway API v1.6 `HTTPRouteRetry`: `attempts` counts the tries after the first; `codes`
//! are retried statuses (400-599); `backoff` is the wait before each repeated try. A
//! connection error and a `backendRequest` timeout are retried too
//! (`HTTPRouteRetryConnectionError`, `HTTPRouteRetryBackendTimeout`). A request whose
//! body was sent is never sent again.

use super::rule::duration;
use super::types::HttpRouteRetry;
use crate::policy::NextUpstream;

/// Tries after the first when `attempts` is not given (Envoy's default).
const DEFAULT_ATTEMPTS: u8 = 1;

/// The most tries after the first: the proxy tries a request at most 8 times.
pub(crate) const MAX_ATTEMPTS: i32 = 7;

/// The retry rules of `retry` at field `at`. `Err`: a sentence naming the field.
pub(crate) fn retry(at: &str, retry: &HttpRouteRetry) -> Result<NextUpstream, String> {
    let mut statuses = Vec::with_capacity(retry.codes.len());
    for (i, code) in retry.codes.iter().enumerate() {
        let status = u16::try_from(*code)
            .ok()
            .filter(|c| (400..=599).contains(c))
            .ok_or_else(|| format!("{at}.codes[{i}]: {code} is not a status from 400 to 599"))?;
        statuses.push(status);
    }
    statuses.sort_unstable();
    statuses.dedup();
    let attempts = match retry.attempts {
        None => DEFAULT_ATTEMPTS,
        Some(n) if (0..=MAX_ATTEMPTS).contains(&n) => n as u8,
        Some(n) => {
            return Err(format!(
                "{at}.attempts: {n} is more than sluice tries a request ({MAX_ATTEMPTS} tries \
                 after the first at most)"
            ));
        }
    };
    let backoff = match retry.backoff.as_deref() {
        None => None,
        Some(text) => duration(text).ok_or_else(|| {
            format!("{at}.backoff: {text:?} is not a Gateway API duration (e.g. 100ms, 1s)")
        })?,
    };
    Ok(NextUpstream {
        error: true,
        timeout: true,
        invalid_header: false,
        statuses,
        // Gateway API retries by status whatever the method; a body that was sent is
        // still never sent twice.
        non_idempotent: true,
        tries: attempts + 1,
        backoff,
        time_limit: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn of(v: serde_json::Value) -> Result<NextUpstream, String> {
        retry("r", &serde_json::from_value(v).unwrap())
    }

    /// The conformance test HTTPRouteRetry's second rule: `attempts: 2` is three tries.
    #[test]
    fn attempts_count_the_tries_after_the_first() {
        let rules = of(serde_json::json!({"codes": [504, 500, 503, 502], "attempts": 2})).unwrap();
        assert_eq!(rules.tries, 3);
        assert_eq!(rules.statuses, vec![500, 502, 503, 504]);
        assert!(rules.error && rules.timeout && rules.non_idempotent);
        assert_eq!(rules.backoff, None);
        assert_eq!(of(serde_json::json!({})).unwrap().tries, 2);
        assert_eq!(of(serde_json::json!({"attempts": 0})).unwrap().tries, 1);
        assert_eq!(
            of(serde_json::json!({"backoff": "250ms"})).unwrap().backoff,
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        for (v, field) in [
            (serde_json::json!({"codes": [200]}), "r.codes[0]"),
            (serde_json::json!({"attempts": 8}), "r.attempts"),
            (serde_json::json!({"attempts": -1}), "r.attempts"),
            (serde_json::json!({"backoff": "1x"}), "r.backoff"),
        ] {
            let error = of(v).unwrap_err();
            assert!(error.starts_with(field), "{error}");
        }
    }
}
