//! ingress-nginx's redirect annotations: `permanent-redirect`, `temporal-redirect` (with
//! their codes) and `app-root`.

use super::*;

/// `temporal-redirect`/`permanent-redirect` and their codes.
///
/// As ingress-nginx's redirect parser ("the execution order is temporal and then
/// permanent"), a valid `temporal-redirect` wins over `permanent-redirect`, which is then
/// reported. Codes follow ingress-nginx's ranges: 300..=307 for temporal (its upper bound
/// is `StatusTemporaryRedirect`), 300..=308 for permanent; out of range, the default (302,
/// 301) is used and the code is reported.
pub(super) fn redirect(cx: &mut Cx<'_>) -> Option<Redirect> {
    let temporal = cx.take("temporal-redirect");
    let temporal_code = cx.take("temporal-redirect-code");
    let permanent = cx.take("permanent-redirect");
    let permanent_code = cx.take("permanent-redirect-code");

    let temporal_location = temporal.and_then(|e| cx.parse_entry(e, parse_location));
    if let Some(location) = temporal_location {
        let status = redirect_code(cx, temporal_code, 300..=307, 302);
        for entry in [permanent, permanent_code].into_iter().flatten() {
            cx.invalid(
                entry,
                "has no effect: temporal-redirect is also set and takes precedence, as in \
                 ingress-nginx",
            );
        }
        return Some(Redirect { status, location });
    }
    if let Some(entry) = temporal_code {
        cx.invalid(entry, "has no effect without a valid temporal-redirect");
    }

    let permanent_location = permanent.and_then(|e| cx.parse_entry(e, parse_location));
    if let Some(location) = permanent_location {
        let status = redirect_code(cx, permanent_code, 300..=308, 301);
        return Some(Redirect { status, location });
    }
    if let Some(entry) = permanent_code {
        cx.invalid(entry, "has no effect without a valid permanent-redirect");
    }
    None
}

pub(super) fn redirect_code<'a>(
    cx: &mut Cx<'a>,
    entry: Option<Entry<'a>>,
    range: std::ops::RangeInclusive<u16>,
    default: u16,
) -> u16 {
    let Some(entry) = entry else {
        return default;
    };
    let (low, high) = (*range.start(), *range.end());
    let code = entry
        .value
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| range.contains(n));
    match code {
        Some(code) => {
            cx.applied(entry);
            code
        }
        None => {
            cx.invalid(
                entry,
                format!(
                    "value {} is not a redirect status ({low} to {high}); {default} is used",
                    shown(entry.value)
                ),
            );
            default
        }
    }
}

/// A redirect target: an absolute `http(s)://` URL or an absolute path.
pub(super) fn parse_location(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    let bad = |why: &str| format!("value {} {why}", shown(value));
    if v.is_empty() {
        return Err(bad("is empty"));
    }
    no_nginx_variables(value, v)?;
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "is not a URL: spaces, control and non-ASCII characters must be percent-encoded",
        ));
    }
    let lower = v.to_ascii_lowercase();
    let is_url = lower.starts_with("http://") || lower.starts_with("https://");
    let is_path = v.starts_with('/') && !v.starts_with("//");
    if is_url {
        let uri = Uri::try_from(v).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("is not a URL: it has no host"));
        }
    } else if !is_path {
        return Err(bad(
            "is not an absolute http:// or https:// URL nor a path starting with /",
        ));
    }
    HeaderValue::from_str(v).map_err(|_| bad("is not a valid header value"))
}

/// `app-root`: a path starting with `/` (ingress-nginx refuses absolute URLs).
pub(super) fn parse_app_root(value: &str) -> Result<HeaderValue, String> {
    let v = value.trim();
    let bad = |why: &str| format!("value {} {why}", shown(value));
    no_nginx_variables(value, v)?;
    if !v.starts_with('/') || v.starts_with("//") {
        return Err(bad("is not a path starting with / (such as /app)"));
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "is not a path: spaces, control and non-ASCII characters must be percent-encoded",
        ));
    }
    HeaderValue::from_str(v).map_err(|_| bad("is not a valid header value"))
}

/// ingress-nginx writes some values into its configuration, where `$name` is a variable;
/// sluice uses values literally, so a `$` would silently mean something else.
pub(super) fn no_nginx_variables(value: &str, trimmed: &str) -> Result<(), String> {
    if trimmed.contains('$') {
        return Err(format!(
            "value {} contains $: nginx variables and regex captures are not expanded by sluice",
            shown(value)
        ));
    }
    Ok(())
}
