//! Source ranges: `whitelist-source-range` / `allowlist-source-range` and
//! `denylist-source-range`.

use super::*;

/// `allowlist-source-range` (alias `whitelist-source-range`) and `denylist-source-range`.
/// Returns whether every client must be refused: ingress-nginx denies the location when a
/// source range is invalid (`LocationDeniedError`, 503), so an invalid range never opens
/// access here either; it refuses everyone with 403.
pub(super) fn source_ranges(cx: &mut Cx<'_>, policy: &mut Policy) -> bool {
    let mut refuse = false;
    let allowlist = cx.take("allowlist-source-range");
    let whitelist = cx.take("whitelist-source-range");
    // ingress-nginx reads the alias only when allowlist-source-range is empty or absent.
    let (used, unused) = match (allowlist, whitelist) {
        (Some(a), Some(w)) if a.value.trim().is_empty() && !w.value.trim().is_empty() => {
            (Some(w), Some(a))
        }
        (Some(a), w) => (Some(a), w),
        (None, w) => (w, None),
    };
    if let (Some(used), Some(unused)) = (used, unused) {
        let used_name = used.key.rsplit('/').next().unwrap_or(used.key);
        cx.invalid(
            unused,
            format!(
                "has no effect: {used_name} is used (allowlist-source-range takes precedence \
                 over its old name whitelist-source-range unless it is empty, as in \
                 ingress-nginx)"
            ),
        );
    }
    if let Some(entry) = used {
        match parse_cidrs(entry.value) {
            Ok(cidrs) => {
                cx.applied(entry);
                policy.allow = cidrs;
            }
            Err(why) => {
                refuse = true;
                cx.invalid(entry, refused(entry.value, &why));
            }
        }
    }
    if let Some(entry) = cx.take("denylist-source-range") {
        match parse_cidrs(entry.value) {
            Ok(cidrs) => {
                cx.applied(entry);
                policy.deny = cidrs;
            }
            Err(why) => {
                refuse = true;
                cx.invalid(entry, refused(entry.value, &why));
            }
        }
    }
    refuse
}

pub(super) fn refused(value: &str, why: &str) -> String {
    format!(
        "value {} is not a list of IP addresses or CIDRs ({why}); every client is refused \
         (403), as ingress-nginx denies the location",
        shown(value)
    )
}

/// Every address: `0.0.0.0/0` and `::/0`.
pub(super) fn everyone() -> Vec<Cidr> {
    ["0.0.0.0/0", "::/0"]
        .into_iter()
        .filter_map(|c| parse_cidr(c).ok())
        .collect()
}

/// Comma-separated CIDRs or bare addresses, spaces allowed; one bad entry spoils the lot
/// (ingress-nginx's `net.ParseIPNets`).
pub(super) fn parse_cidrs(value: &str) -> Result<Vec<Cidr>, String> {
    if value.trim().is_empty() {
        return Err("it is empty".to_owned());
    }
    value
        .split(',')
        .map(|item| {
            if item.trim().is_empty() {
                Err("it has an empty entry".to_owned())
            } else {
                parse_cidr(item)
            }
        })
        .collect()
}
