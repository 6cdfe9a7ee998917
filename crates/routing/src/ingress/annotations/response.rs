//! What the proxy does to the upstream's response head and the access log for a route
//! (ingress-nginx docs "Proxy redirect", "Proxy cookie domain", "Proxy cookie path",
//! "Enable Access Log"): nginx's `proxy_redirect`, `proxy_cookie_domain`,
//! `proxy_cookie_path` and `access_log off`.

use super::*;

use crate::policy::ResponseRewrites;

/// ingress-nginx's `cookieDomainRegex` characters.
fn cookie_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/:".contains(&b))
}

/// `proxy-cookie-domain` / `proxy-cookie-path`: `off` or two tokens (from, to).
fn parse_pair(value: &str) -> Result<Option<(String, String)>, String> {
    let value = value.trim();
    if value == "off" {
        return Ok(None);
    }
    let tokens: Vec<&str> = value.split_whitespace().collect();
    match tokens[..] {
        [from, _] if from.starts_with('~') => Err(format!(
            "{}: nginx regular expressions (~) are not supported; give the text to replace",
            shown(value)
        )),
        [from, to] if cookie_token(from) && cookie_token(to) => {
            Ok(Some((from.to_owned(), to.to_owned())))
        }
        _ => Err(format!(
            "value {} is not off or two tokens (what to replace, and with what) of letters, \
             digits and -._~/:",
            shown(value)
        )),
    }
}

/// A `proxy-redirect-*` value: one token without spaces.
fn parse_redirect_token(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty() || value.contains(char::is_whitespace) || value.contains('$') {
        return Err(format!(
            "value {} is not one string without spaces (nginx variables are not expanded)",
            shown(value)
        ));
    }
    Ok(value.to_owned())
}

/// nginx's `on` / `off`.
fn parse_on_off(value: &str) -> Result<bool, String> {
    match value.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("value {} is not on or off", shown(other))),
    }
}

/// `connection-proxy-header`: `Connection` tokens (`keep-alive`, `close`, `upgrade`, ...).
fn parse_connection(value: &str) -> Result<HeaderValue, String> {
    let value = value.trim();
    let tokens_ok = !value.is_empty()
        && value.split(',').map(str::trim).all(|token| {
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    match HeaderValue::from_str(value) {
        Ok(header) if tokens_ok => Ok(header),
        _ => Err(format!(
            "value {} is not a list of Connection tokens (keep-alive, close, upgrade, ...)",
            shown(value)
        )),
    }
}

/// The response rewrites, `connection-proxy-header` and `enable-access-log`.
pub(super) fn response(cx: &mut Cx<'_>, policy: &mut Policy) {
    let mut rewrites = ResponseRewrites::default();
    // ingress-nginx: `off` and `default` for from leave nginx's default (no rewrite for
    // its `proxy_pass` without URI); otherwise both are needed.
    let from = cx.take("proxy-redirect-from");
    let to = cx.take("proxy-redirect-to");
    match (from, to) {
        (None, None) => {}
        (Some(from), to) if matches!(from.value.trim(), "off" | "default") => {
            cx.applied(from);
            if let Some(to) = to {
                cx.invalid(
                    to,
                    "has no effect while proxy-redirect-from is off or default",
                );
            }
        }
        (Some(from), Some(to)) if to.value.trim() == "off" => {
            cx.applied(to);
            cx.invalid(from, "has no effect while proxy-redirect-to is off");
        }
        (Some(from), Some(to)) => {
            match (
                parse_redirect_token(from.value),
                parse_redirect_token(to.value),
            ) {
                (Ok(f), Ok(t)) => {
                    cx.applied(from);
                    cx.applied(to);
                    rewrites.redirect = Some((f, t));
                }
                (f, t) => {
                    for (entry, result) in [(from, f), (to, t)] {
                        match result {
                            Ok(_) => cx.invalid(entry, "has no effect: its partner is invalid"),
                            Err(why) => cx.invalid(entry, why),
                        }
                    }
                }
            }
        }
        (Some(only), None) => cx.invalid(only, "has no effect without proxy-redirect-to"),
        (None, Some(only)) => cx.invalid(only, "has no effect without proxy-redirect-from"),
    }
    rewrites.cookie_domain = cx.value("proxy-cookie-domain", parse_pair).flatten();
    rewrites.cookie_path = cx.value("proxy-cookie-path", parse_pair).flatten();
    if rewrites != ResponseRewrites::default() {
        policy.response_rewrites = Some(Arc::new(rewrites));
    }
    policy.connection_header = cx.value("connection-proxy-header", parse_connection);
    // `limit-rate` (KB/s, 0: none) and `limit-rate-after` (KB), as ingress-nginx writes
    // `limit_rate <n>k` and `limit_rate_after <n>k`.
    let kilobytes = |v: &str| {
        v.trim()
            .parse::<u64>()
            .map_err(|_| format!("value {} is not a whole number of kilobytes", shown(v)))
    };
    let rate = cx.value("limit-rate", kilobytes);
    let after = cx.take("limit-rate-after");
    match rate.filter(|r| *r > 0) {
        Some(rate) => {
            let after = match after {
                None => 0,
                Some(entry) => match kilobytes(entry.value) {
                    Ok(after) => {
                        cx.applied(entry);
                        after
                    }
                    Err(why) => {
                        cx.invalid(entry, format!("{why}; 0 is used"));
                        0
                    }
                },
            };
            policy.limit_rate = Some(crate::policy::LimitRate {
                bytes_per_second: rate.saturating_mul(1024),
                after: after.saturating_mul(1024),
            });
        }
        None => {
            if let Some(entry) = after {
                cx.invalid(entry, "has no effect without limit-rate");
            }
        }
    }
    policy.upstream_http10 = cx
        .value("proxy-http-version", |v| match v.trim() {
            "1.0" => Ok(true),
            "1.1" => Ok(false),
            other => Err(format!(
                "value {} is not 1.0 or 1.1; 1.1 is used",
                shown(other)
            )),
        })
        .unwrap_or(false);
    policy.request_buffering = cx
        .value("proxy-request-buffering", parse_on_off)
        .unwrap_or(false);
    // `proxy-buffering` (ingress-nginx's default `off`: the response goes at the client's
    // pace); `on`: it is read ahead of the client into memory, bounded by the buffers.
    let mut buffering = false;
    if let Some(entry) = cx.take("proxy-buffering") {
        match entry.value.trim() {
            "off" => cx.applied(entry),
            "on" => {
                buffering = true;
                cx.applied(entry);
            }
            other => cx.invalid(entry, format!("value {} is not on or off", shown(other))),
        }
    }
    policy.response_buffer = buffers(cx, buffering);
    policy.access_log_off = !cx
        .value("enable-access-log", |v| {
            parse_bool(v).map_err(|e| format!("{e}; enable-access-log stays true"))
        })
        .unwrap_or(true);
}

/// ingress-nginx's `proxy-buffers-number` default (nginx `proxy_buffers 4 4k`).
const DEFAULT_BUFFERS_NUMBER: u64 = 4;
/// ingress-nginx's `proxy-buffer-size` default.
const DEFAULT_BUFFER_SIZE: u64 = 4 * 1024;
/// The most one buffered response holds, whatever the annotations ask: an Ingress's author
/// cannot make one response take more of the proxy's memory.
pub(crate) const MAX_RESPONSE_BUFFER: u64 = 64 * 1024 * 1024;

/// nginx's buffer sizes (`proxy-buffers-number`, `proxy-buffer-size`,
/// `proxy-busy-buffers-size`, `proxy-max-temp-file-size`, `client-body-buffer-size`), each
/// checked as a size (or count); returns the bytes a buffered response may hold
/// (`proxy-buffering: on`): nginx's memory buffers, `proxy-buffers-number` times
/// `proxy-buffer-size`, at most [`MAX_RESPONSE_BUFFER`].
/// - With `proxy-buffering: off` (ingress-nginx's default) nginx ignores the first four
///   but `proxy-buffer-size`'s other role (the response head must fit it; sluice takes
///   heads up to 64 KiB), so they are honoured as they are and `proxy-buffer-size` is
///   reported.
/// - With `on`, `proxy-buffers-number` and `proxy-buffer-size` size the memory held.
///   sluice never writes a response to disk: past the memory buffers the response goes at
///   the client's pace, as nginx's does with `proxy_max_temp_file_size 0` (a memory bound
///   instead of nginx's 1024m temporary file), so `proxy-max-temp-file-size` is reported,
///   as is `proxy-busy-buffers-size` (sluice passes on what it holds as soon as the client
///   takes it).
/// - `client-body-buffer-size` is reported with what sluice does instead.
fn buffers(cx: &mut Cx<'_>, buffering: bool) -> Option<u64> {
    let mut number = DEFAULT_BUFFERS_NUMBER;
    for name in [
        "proxy-buffers-number",
        "proxy-busy-buffers-size",
        "proxy-max-temp-file-size",
    ] {
        let Some(entry) = cx.take(name) else { continue };
        let valid = if name == "proxy-buffers-number" {
            entry
                .value
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(u64::from)
                .ok_or_else(|| format!("value {} is not a number of buffers", shown(entry.value)))
        } else {
            parse_size(entry.value)
        };
        match valid {
            Err(detail) => cx.invalid(entry, detail),
            Ok(n) if name == "proxy-buffers-number" => {
                number = n;
                cx.applied(entry);
            }
            Ok(_) if buffering => cx.report(
                entry,
                Reason::UnsupportedAnnotation,
                "not supported by sluice: it never writes a response to disk; a buffered \
                 response is held in memory up to proxy-buffers-number times \
                 proxy-buffer-size and then goes at the client's pace (nginx with \
                 proxy_max_temp_file_size 0), passed on as soon as the client takes it",
            ),
            // nginx ignores it without `proxy_buffering on`, as sluice does.
            Ok(_) => cx.applied(entry),
        }
    }
    let mut size = DEFAULT_BUFFER_SIZE;
    if let Some(entry) = cx.take("proxy-buffer-size") {
        match parse_size(entry.value) {
            Err(detail) => cx.invalid(entry, detail),
            Ok(0) => cx.invalid(entry, "value 0 is not a buffer size"),
            Ok(n) if buffering => {
                size = n;
                cx.applied(entry);
            }
            Ok(_) => cx.report(
                entry,
                Reason::UnsupportedAnnotation,
                "not supported by sluice: nginx answers 502 when a backend's response head \
                 does not fit this buffer; sluice accepts response heads up to its own fixed \
                 limit (64 KiB from HTTP/1.1 backends) and, without proxy-buffering: \"on\", \
                 passes response bodies on as they arrive",
            ),
        }
    }
    if let Some(entry) = cx.take("client-body-buffer-size") {
        match parse_size(entry.value) {
            Err(detail) => cx.invalid(entry, detail),
            Ok(_) => cx.report(
                entry,
                Reason::UnsupportedAnnotation,
                "not supported by sluice: nginx writes request bodies larger than this buffer \
                 to a temporary file; sluice never writes bodies to disk: they stream to the \
                 backend, or with proxy-request-buffering: \"on\" are held in memory up to \
                 proxy-body-size",
            ),
        }
    }
    buffering.then(|| number.saturating_mul(size).min(MAX_RESPONSE_BUFFER))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(annotations: &[(&str, &str)]) -> Parsed {
        let map: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), (*v).to_owned()))
            .collect();
        parse(&map)
    }

    /// ingress-nginx docs, "Proxy redirect", "Proxy cookie domain", "Proxy cookie path",
    /// "Enable Access Log": values and defaults.
    #[test]
    fn response_annotations_with_ingress_nginx_defaults() {
        let parsed = with(&[
            ("proxy-redirect-from", "http://internal/"),
            ("proxy-redirect-to", "https://example.com/"),
            ("proxy-cookie-domain", "localhost example.org"),
            ("proxy-cookie-path", "/two/ /"),
            ("enable-access-log", "false"),
            ("connection-proxy-header", "keep-alive"),
            ("proxy-request-buffering", "on"),
            ("proxy-buffering", "off"),
            ("proxy-http-version", "1.0"),
            ("limit-rate", "100"),
            ("limit-rate-after", "10"),
        ]);
        assert_eq!(
            parsed.policy.limit_rate,
            Some(crate::policy::LimitRate {
                bytes_per_second: 102_400,
                after: 10_240
            })
        );
        assert!(parsed.policy.request_buffering);
        assert!(parsed.policy.upstream_http10);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(
            parsed.policy.connection_header,
            Some(HeaderValue::from_static("keep-alive"))
        );
        let rw = parsed.policy.response_rewrites.as_deref().unwrap();
        assert_eq!(
            rw.redirect,
            Some(("http://internal/".into(), "https://example.com/".into()))
        );
        assert_eq!(
            rw.cookie_domain,
            Some(("localhost".into(), "example.org".into()))
        );
        assert_eq!(rw.cookie_path, Some(("/two/".into(), "/".into())));
        assert!(parsed.policy.access_log_off);

        for off in [
            &[("proxy-redirect-from", "off")][..],
            &[("proxy-redirect-from", "default")],
            &[("proxy-cookie-domain", "off"), ("proxy-cookie-path", "off")],
            &[("enable-access-log", "true")],
            &[("proxy-http-version", "1.1")],
            &[("limit-rate", "0")],
        ] {
            let parsed = with(off);
            assert!(parsed.problems.is_empty(), "{off:?}: {:?}", parsed.problems);
            assert_eq!(parsed.policy, Policy::default(), "{off:?}");
        }
        for bad in [
            &[("proxy-redirect-from", "http://a/")][..],
            &[("proxy-redirect-to", "http://a/")],
            &[("proxy-redirect-from", "a b"), ("proxy-redirect-to", "c")],
            &[("proxy-redirect-from", "a"), ("proxy-redirect-to", "off")],
            &[("proxy-cookie-domain", "localhost")],
            &[("proxy-cookie-domain", "~^(.+)\\.internal$ $1.example")],
            &[("proxy-cookie-path", "/a /b /c")],
            &[("enable-access-log", "no")],
            &[("connection-proxy-header", "keep alive")],
            &[("connection-proxy-header", "")],
            &[("proxy-request-buffering", "yes")],
            &[("proxy-buffering", "yes")],
            &[("proxy-http-version", "2")],
            &[("limit-rate", "fast")],
            &[("limit-rate-after", "10")],
            &[("connection-proxy-header", "close\r\nx: y")],
        ] {
            let parsed = with(bad);
            assert!(!parsed.problems.is_empty(), "{bad:?}");
            assert!(parsed.policy.response_rewrites.is_none(), "{bad:?}");
            assert!(!parsed.policy.access_log_off, "{bad:?}");
        }
    }

    /// ingress-nginx "Proxy buffers number", "Proxy busy buffers size", "Proxy max temp
    /// file size", "Proxy buffer size", "Client Body Buffer Size", "Proxy buffering":
    /// honoured where nginx itself ignores them (`proxy-buffering: off`); with `on` the
    /// memory buffers (nginx `proxy_buffers`, default 4 4k) bound what is held, and what
    /// sluice does not do (a temporary file) is reported.
    #[test]
    fn buffer_sizes_as_far_as_sluice_buffers() {
        let buffering_only = [
            ("proxy-busy-buffers-size", "16k"),
            ("proxy-max-temp-file-size", "0"),
            ("proxy-max-temp-file-size", "1024m"),
        ];
        for pair in buffering_only {
            let parsed = with(&[pair]);
            assert!(
                parsed.problems.is_empty(),
                "{pair:?}: {:?}",
                parsed.problems
            );
            assert_eq!(parsed.policy, Policy::default(), "{pair:?}");
            let parsed = with(&[pair, ("proxy-buffering", "off")]);
            assert!(
                parsed.problems.is_empty(),
                "{pair:?}: {:?}",
                parsed.problems
            );
            // With response buffering on, sluice holds no temporary file.
            let parsed = with(&[pair, ("proxy-buffering", "on")]);
            let problem = parsed
                .problems
                .iter()
                .find(|p| p.annotation == format!("{NGINX_PREFIX}{}", pair.0))
                .expect("reported");
            assert_eq!(problem.reason, Reason::UnsupportedAnnotation);
            assert!(problem.detail.contains("never writes a response to disk"));
            assert_eq!(parsed.policy.response_buffer, Some(4 * 4096));
        }
        // ingress-nginx's defaults: 4 buffers of 4k.
        let parsed = with(&[("proxy-buffering", "on")]);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.policy.response_buffer, Some(16 * 1024));
        let parsed = with(&[
            ("proxy-buffering", "on"),
            ("proxy-buffers-number", "8"),
            ("proxy-buffer-size", "16k"),
        ]);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.policy.response_buffer, Some(8 * 16 * 1024));
        let parsed = with(&[
            ("proxy-buffering", "on"),
            ("proxy-buffers-number", "1000"),
            ("proxy-buffer-size", "1g"),
        ]);
        assert_eq!(parsed.policy.response_buffer, Some(MAX_RESPONSE_BUFFER));
        let parsed = with(&[("proxy-buffers-number", "8")]);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.policy.response_buffer, None);
        for (name, says) in [
            ("proxy-buffer-size", "64 KiB"),
            ("client-body-buffer-size", "never writes bodies to disk"),
        ] {
            let parsed = with(&[(name, "8k")]);
            assert_eq!(parsed.problems.len(), 1, "{name}");
            assert_eq!(parsed.problems[0].reason, Reason::UnsupportedAnnotation);
            assert!(
                parsed.problems[0].detail.contains(says),
                "{}",
                parsed.problems[0].detail
            );
        }
        for (name, bad) in [
            ("proxy-buffers-number", "four"),
            ("proxy-busy-buffers-size", "lots"),
            ("proxy-max-temp-file-size", "-1"),
            ("proxy-buffer-size", "8 kilobytes"),
            ("client-body-buffer-size", "x"),
        ] {
            let parsed = with(&[(name, bad)]);
            assert_eq!(parsed.problems.len(), 1, "{name}");
            assert_eq!(
                parsed.problems[0].reason,
                Reason::InvalidAnnotation,
                "{name}"
            );
        }
    }
}
