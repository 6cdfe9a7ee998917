//! How a request goes upstream: TLS to the backend (`proxy-ssl-*`), `upstream-vhost`,
//! `x-forwarded-prefix`, `proxy-next-upstream*`, `default-backend`, `custom-http-errors`,
//! `rewrite-target`, and sluice's own request and response fields.

use super::*;
use crate::openssl_ciphers::{ProtocolList, Tls12Suite, parse_cipher_list, parse_protocol_list};

/// `proxy-ssl-verify`, `proxy-ssl-name`, `proxy-ssl-server-name`, `proxy-ssl-secret`,
/// `proxy-ssl-ciphers`, `proxy-ssl-protocols` and `proxy-ssl-verify-depth` into
/// [`Policy::upstream_tls`]; returns the Secret to resolve.
pub(super) fn upstream_tls(
    cx: &mut Cx<'_>,
    policy: &mut Policy,
) -> Option<(Option<String>, String)> {
    let verify = cx.value("proxy-ssl-verify", protocol::parse_on_off);
    let name = cx.value("proxy-ssl-name", protocol::parse_ssl_name);
    let server_name = cx.value("proxy-ssl-server-name", protocol::parse_on_off);
    let secret = cx.value("proxy-ssl-secret", protocol::parse_secret_ref);
    let ciphers = ssl_ciphers(cx);
    let protocols = ssl_protocols(cx);
    let verify_depth = match cx.take("proxy-ssl-verify-depth") {
        // nginx checks the depth only while verifying (`proxy_ssl_verify on`).
        Some(entry) if verify != Some(true) => {
            cx.invalid(entry, "has no effect without proxy-ssl-verify: \"on\"");
            None
        }
        Some(entry) => cx.parse_entry(entry, protocol::parse_verify_depth),
        None => None,
    };
    if verify.is_none()
        && name.is_none()
        && server_name.is_none()
        && secret.is_none()
        && ciphers.is_none()
        && protocols.is_none()
    {
        return None;
    }
    policy.upstream_tls = Some(Arc::new(UpstreamTls {
        verify: verify.unwrap_or(false),
        name,
        server_name: server_name.unwrap_or(false),
        ciphers,
        protocols,
        // ingress-nginx's default `proxy-ssl-verify-depth`, 1.
        verify_depth: Some(verify_depth.unwrap_or(1)),
        ..UpstreamTls::default()
    }));
    secret
}

/// `proxy-ssl-ciphers`: an OpenSSL cipher list. Elements that select nothing rustls offers
/// are reported (the annotation counts as invalid), the rest applies.
fn ssl_ciphers(cx: &mut Cx<'_>) -> Option<Vec<Tls12Suite>> {
    let entry = cx.take("proxy-ssl-ciphers")?;
    match parse_cipher_list(entry.value) {
        Ok(list) if list.ignored.is_empty() => {
            cx.applied(entry);
            Some(list.suites)
        }
        Ok(list) => {
            let ignored: Vec<String> = list.ignored.iter().map(ToString::to_string).collect();
            let kept: Vec<&str> = list.suites.iter().map(|s| s.openssl_name()).collect();
            cx.invalid(
                entry,
                format!(
                    "{} ignored; the TLS 1.2 suites offered are {}",
                    ignored.join(", "),
                    kept.join(":")
                ),
            );
            Some(list.suites)
        }
        Err(error) => {
            cx.invalid(entry, format!("{error}; rustls's suites are offered"));
            None
        }
    }
}

/// `proxy-ssl-protocols`: nginx's protocol list. Versions rustls lacks (`TLSv1`,
/// `TLSv1.1`, ...) are reported, the rest applies.
fn ssl_protocols(cx: &mut Cx<'_>) -> Option<ProtocolList> {
    let entry = cx.take("proxy-ssl-protocols")?;
    match parse_protocol_list(entry.value) {
        Ok(list) if list.unavailable.is_empty() => {
            cx.applied(entry);
            Some(list)
        }
        Ok(list) => {
            let offered: Vec<&str> = [(list.tls12, "TLSv1.2"), (list.tls13, "TLSv1.3")]
                .into_iter()
                .filter_map(|(on, name)| on.then_some(name))
                .collect();
            cx.invalid(
                entry,
                format!(
                    "{} ignored: rustls does not offer them; {} offered",
                    list.unavailable.join(" "),
                    offered.join(" ")
                ),
            );
            Some(list)
        }
        Err(error) => {
            cx.invalid(entry, format!("{error}; TLSv1.2 and TLSv1.3 are offered"));
            None
        }
    }
}

/// `upstream-vhost`: `host[:port]` sent as `Host`.
pub(super) fn parse_upstream_vhost(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    no_nginx_variables(value, v)?;
    let bad = || format!("value {} is not a host[:port]", shown(value));
    let (host_ok, port) = if let Some(rest) = v.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(bad)?),
        };
        (ip.parse::<Ipv6Addr>().is_ok(), port)
    } else {
        let (host, port) = match v.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (v, None),
        };
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        (ok, port)
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    });
    if !host_ok || !port_ok {
        return Err(bad());
    }
    HeaderValue::from_str(v).map_err(|_| bad())
}

/// `x-forwarded-prefix`: a non-empty value sent as `X-Forwarded-Prefix`.
pub(super) fn parse_forwarded_prefix(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(format!("value {} is empty", shown(value)));
    }
    no_nginx_variables(value, v)?;
    HeaderValue::from_str(v)
        .map_err(|_| format!("value {} is not a valid header value", shown(value)))
}

/// `proxy-next-upstream`: nginx's space-separated tokens (`error timeout http_502`, `off`).
pub(super) fn parse_next_upstream(value: &str) -> Result<NextUpstream, String> {
    let mut next = NextUpstream {
        error: false,
        timeout: false,
        ..NextUpstream::default()
    };
    let tokens: Vec<&str> = value.split_whitespace().collect();
    if tokens.is_empty() {
        return Err(format!("value {} lists nothing", shown(value)));
    }
    for token in &tokens {
        match *token {
            "off" if tokens.len() == 1 => next.tries = 1,
            "error" => next.error = true,
            "timeout" => next.timeout = true,
            "invalid_header" => next.invalid_header = true,
            "non_idempotent" => next.non_idempotent = true,
            "http_500" | "http_502" | "http_503" | "http_504" | "http_403" | "http_404"
            | "http_429" => {
                // Checked just above: three digits follow "http_".
                next.statuses.push(token[5..].parse().unwrap_or(502));
            }
            other => {
                return Err(format!(
                    "value {} has {other:?}, not one of error, timeout, invalid_header, \
                     http_500, http_502, http_503, http_504, http_403, http_404, http_429, \
                     non_idempotent, off",
                    shown(value)
                ));
            }
        }
    }
    next.statuses.sort_unstable();
    next.statuses.dedup();
    Ok(next)
}

/// `proxy-next-upstream-tries`: endpoints tried in all; nginx's `0` (no limit) is capped
/// at the proxy's most, 8.
pub(super) fn parse_tries(value: &str) -> Result<u8, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Ok(8),
        Ok(n) => Ok(n.min(8) as u8),
        Err(_) => Err(format!("value {} is not a number of tries", shown(value))),
    }
}

/// `default-backend`: a Service name (an RFC 1035 label, as Kubernetes requires).
pub(super) fn parse_service_name(value: &str) -> Result<String, String> {
    let v = value.trim();
    let label = !v.is_empty()
        && v.len() <= 63
        && v.starts_with(|c: char| c.is_ascii_lowercase())
        && !v.ends_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if label {
        Ok(v.to_owned())
    } else {
        Err(format!("value {} is not a Service name", shown(value)))
    }
}

/// `custom-http-errors`: comma-separated status codes (ingress-nginx takes any integer;
/// only 400-599 can be errors a backend answers with).
pub(super) fn parse_status_list(value: &str) -> Result<Vec<u16>, String> {
    let mut codes = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u16>() {
            Ok(code) if (400..=599).contains(&code) => codes.push(code),
            _ => {
                return Err(format!(
                    "value {} has {part:?}, not a status code from 400 to 599",
                    shown(value)
                ));
            }
        }
    }
    if codes.is_empty() {
        return Err(format!("value {} lists no status code", shown(value)));
    }
    codes.sort_unstable();
    codes.dedup();
    Ok(codes)
}

/// `rewrite-target`: an absolute path (or http(s) URL) where `$1`..`$9` name captures;
/// other nginx variables (`$uri`, `$request_uri`, ...) are not expanded by sluice.
pub(super) fn parse_rewrite_target(value: &str) -> Result<String, String> {
    let v = value.trim();
    if !(v.starts_with('/') || v.starts_with("http://") || v.starts_with("https://")) {
        return Err(format!(
            "value {} is not an absolute path or an http(s) URL",
            shown(value)
        ));
    }
    let bytes = v.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        if b == b'$' && !bytes.get(at + 1).is_some_and(u8::is_ascii_digit) {
            return Err(format!(
                "value {} uses an nginx variable; only capture groups ($1..$9) are expanded",
                shown(value)
            ));
        }
    }
    HeaderValue::from_str(v)
        .map(|_| v.to_owned())
        .map_err(|_| format!("value {} is not a valid path", shown(value)))
}

/// `request-headers`/`response-headers`: one `Name: value` per line; blank lines skipped.
pub(super) fn parse_fields(value: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut fields = Vec::new();
    for (index, line) in value.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, field_value)) = line.split_once(':') else {
            return Err(format!(
                "line {number} ({}) is not \"Name: value\"",
                shown(line)
            ));
        };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("line {number}: {} is not a field name", shown(name.trim())))?;
        if FORBIDDEN_FIELDS.contains(&name.as_str()) {
            return Err(format!(
                "line {number}: {name} is a hop-by-hop or framing field and cannot be set"
            ));
        }
        let field_value = HeaderValue::from_str(field_value.trim()).map_err(|_| {
            format!(
                "line {number}: {} is not a valid field value",
                shown(field_value.trim())
            )
        })?;
        fields.push((name, field_value));
    }
    if fields.is_empty() {
        return Err(format!(
            "value {} has no \"Name: value\" line",
            shown(value)
        ));
    }
    Ok(fields)
}
