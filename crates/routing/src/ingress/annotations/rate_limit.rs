//! Rate limits: `limit-rps`, `limit-rpm`, `limit-connections`, `limit-burst-multiplier`.

use super::*;

/// `limit-rps`, `limit-rpm`, `limit-connections`, `limit-burst-multiplier` and
/// `limit-allowlist` (alias
/// `limit-whitelist`, read when `limit-allowlist` is absent), with ingress-nginx's default
/// multiplier 5. The zone is set by the compiler, which knows the Ingress.
pub(super) fn rate_limit(cx: &mut Cx<'_>) -> Option<RateLimit> {
    let rps = cx.value("limit-rps", |v| parse_rate(v, "limit-rps"));
    let rpm = cx.value("limit-rpm", |v| parse_rate(v, "limit-rpm"));
    let connections = cx.value("limit-connections", |v| parse_rate(v, "limit-connections"));
    let multiplier = cx.value("limit-burst-multiplier", |v| {
        parse_rate(v, "limit-burst-multiplier").map(|m| m.max(1))
    });
    let allowlist = cx.value("limit-allowlist", parse_cidrs);
    let whitelist = cx.value("limit-whitelist", parse_cidrs);
    let allow = allowlist.or(whitelist).unwrap_or_default();
    (rps.is_some() || rpm.is_some() || connections.is_some()).then(|| RateLimit {
        rps,
        rpm,
        connections,
        burst_multiplier: multiplier.unwrap_or(5),
        allow,
        zone: 0,
    })
}

/// A whole positive number; `0` turns the limit off, as ingress-nginx ignores it.
pub(super) fn parse_rate(value: &str, what: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Err(format!("{what} 0 sets no limit")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "value {} is not a whole positive number",
            shown(value)
        )),
    }
}
