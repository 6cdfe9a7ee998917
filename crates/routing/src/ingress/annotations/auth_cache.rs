//! `auth-cache-key` and `auth-cache-duration` (ingress-nginx docs, "External
//! Authentication"; its `authreq` parser and the auth location of `nginx.tmpl`): the auth
//! service's answers are kept per key (`proxy_cache auth_cache`) for as long as nginx's
//! `proxy_cache_valid` lines give their status.

use super::*;

use crate::policy::{AuthCache, CacheValid};

/// ingress-nginx's `DefaultCacheDuration`.
pub(crate) const DEFAULT_CACHE_DURATION: &str = "200 202 401 5m";

/// `auth-cache-duration`: comma-separated `proxy_cache_valid` arguments, each
/// `[code ...] time ...` (ingress-nginx's `ParseStringToCacheDurations` and
/// `ValidCacheDuration`): three-digit codes or `any`, then one or more times
/// (`\d+(s|m|h|d|w|M|y)`, added up as nginx does); without a code, 200, 301 and 302.
pub(crate) fn parse_durations(value: &str) -> Result<Vec<CacheValid>, String> {
    let mut out = Vec::new();
    for line in value.split(',').map(str::trim).filter(|l| !l.is_empty()) {
        let mut statuses = Vec::new();
        let mut any = false;
        let mut ttl: Option<Duration> = None;
        for token in line.split(' ').filter(|t| !t.is_empty()) {
            if token.len() == 3 && token.bytes().all(|b| b.is_ascii_digit()) {
                if ttl.is_some() {
                    return Err(format!("{line:?}: status {token} after the time"));
                }
                let code: u16 = token.parse().map_err(|_| format!("{token:?}"))?;
                if !(100..=599).contains(&code) {
                    return Err(format!("{line:?}: {token} is not an HTTP status"));
                }
                statuses.push(code);
            } else if token == "any" && ttl.is_none() {
                any = true;
            } else {
                let time = parse_time(token)
                    .ok_or_else(|| format!("{line:?}: {token:?} is not a status or a time"))?;
                ttl = Some(ttl.unwrap_or_default().saturating_add(time));
            }
        }
        let ttl = ttl.ok_or_else(|| format!("{line:?} has no time (e.g. 200 202 401 5m)"))?;
        let statuses = if any {
            None
        } else if statuses.is_empty() {
            Some(vec![200, 301, 302])
        } else {
            Some(statuses)
        };
        out.push(CacheValid { statuses, ttl });
    }
    if out.is_empty() {
        return parse_durations(DEFAULT_CACHE_DURATION);
    }
    Ok(out)
}

/// One nginx time in seconds' resolution (`ngx_parse_time(.., 1)`): a number and one of
/// `s m h d w M y` (`M` 30 days, `y` 365 days).
fn parse_time(token: &str) -> Option<Duration> {
    let unit = token.chars().last()?;
    let number: u64 = token[..token.len() - unit.len_utf8()].parse().ok()?;
    let seconds = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        'M' => 30 * 86_400,
        'y' => 365 * 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(number.checked_mul(seconds)?))
}

/// Reads `auth-cache-key` and `auth-cache-duration` for a route with `auth-url`. An
/// `auth-cache-duration` that does not parse closes the routes (ingress-nginx denies the
/// location); a key with a variable sluice does not compute is refused and nothing is
/// cached (a key that drops a variable would share one user's answer with others).
pub(super) fn auth_cache(cx: &mut Cx<'_>, has_url: bool) -> Option<AuthCache> {
    let key = cx.take("auth-cache-key");
    let duration = cx.take("auth-cache-duration");
    let valid = match duration {
        None => parse_durations(DEFAULT_CACHE_DURATION).ok(),
        Some(entry) => match parse_durations(entry.value) {
            Ok(valid) => {
                if key.is_some() && has_url {
                    cx.applied(entry);
                } else {
                    cx.invalid(entry, "has no effect without auth-url and auth-cache-key");
                }
                Some(valid)
            }
            // ingress-nginx reads it only with an auth-url: without one, it changes nothing.
            Err(why) if !has_url => {
                cx.invalid(entry, format!("value {}: {why}", shown(entry.value)));
                None
            }
            Err(why) => {
                cx.fail_closed(entry, format!("value {}: {why}", shown(entry.value)));
                None
            }
        },
    };
    let entry = key?;
    if !has_url {
        cx.invalid(entry, "has no effect without a valid auth-url");
        return None;
    }
    let key = match global_rate_limit::parse_key(entry.value.trim()) {
        Ok(key) => key,
        Err(why) => {
            cx.invalid(
                entry,
                format!("{why}; the auth service is asked for every request"),
            );
            return None;
        }
    };
    cx.applied(entry);
    Some(AuthCache {
        key,
        valid: valid?,
        location: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// ingress-nginx's `DefaultCacheDuration` and nginx's `proxy_cache_valid` forms.
    #[test]
    fn durations_as_ingress_nginx_and_nginx_read_them() {
        let default = parse_durations("").unwrap();
        assert_eq!(
            default,
            [CacheValid {
                statuses: Some(vec![200, 202, 401]),
                ttl: secs(300)
            }]
        );
        let many = parse_durations("200 202 10m, 401 30s, any 1h 30m").unwrap();
        let cache = AuthCache {
            key: Vec::new(),
            location: String::new(),
            valid: many,
        };
        assert_eq!(cache.ttl(200), Some(secs(600)));
        assert_eq!(cache.ttl(401), Some(secs(30)));
        assert_eq!(cache.ttl(403), Some(secs(5400)));
        let bare = AuthCache {
            key: Vec::new(),
            location: String::new(),
            valid: parse_durations("5m").unwrap(),
        };
        assert_eq!(bare.ttl(302), Some(secs(300)));
        assert_eq!(bare.ttl(401), None);
        let zero = AuthCache {
            key: Vec::new(),
            location: String::new(),
            valid: parse_durations("200 0s").unwrap(),
        };
        assert_eq!(zero.ttl(200), None);
        assert_eq!(parse_time("2M"), Some(secs(60 * 86_400)));
        assert_eq!(parse_time("1y"), Some(secs(365 * 86_400)));
        for bad in [
            "200", "5m 200", "200 5x", "200 ms", "1h30m", "2000 5m", "200 -1m", "099 5m",
        ] {
            assert!(parse_durations(bad).is_err(), "{bad}");
        }
    }
}
