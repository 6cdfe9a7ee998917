//! Which endpoint a request prefers: session affinity cookies (ingress-nginx's
//! `affinity: cookie`) and consistent hashing (`upstream-hash-by`). The balancer's normal
//! choice applies when there is no preference or the preferred endpoint is down.
//!
//! Cookie values are 16 hex digits: in `persistent` mode the endpoint's stable key
//! ([`crate::backend::balancer::endpoint_key`]), in `balanced` mode a random session key
//! mapped to an endpoint by rendezvous hashing, so new endpoints take over a fair share of
//! sessions.
//!
//! On a route with a canary, the cookie also says which backend the session belongs to, as
//! ingress-nginx's cookie carries the backend's key after `|`: a `persistent` key is an
//! endpoint of one of them; a new `balanced` key carries a tag in its top byte
//! ([`MAIN_TAG`] or [`CANARY_TAG`]). [`session_on_canary`] reads it for the routing step.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use http::HeaderValue;
use sluice_routing::{Affinity, AffinityMode, HashBy, Policy, RouteEntry};

use crate::backend::balancer::{self, Balancer};
use crate::pipeline::cookie::cookie;
use crate::pipeline::view::RequestView;

/// What a request brings to the endpoint choice.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Preference {
    /// The endpoint to try first.
    pub(crate) endpoint: Option<usize>,
    /// The session key of a valid affinity cookie, or the new one to set.
    key: Option<u64>,
    /// The client had no usable affinity cookie.
    new: bool,
    /// `session-cookie-conditional-samesite-none` and a client that rejects
    /// `SameSite=None`: the cookie goes without it.
    no_samesite_none: bool,
    /// The tag of new `balanced` keys ([`Side::tag`]).
    tag: Option<u64>,
}

/// Which backend of its route a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The route has no canary.
    Alone,
    /// The route's own backend; it has a canary.
    Main,
    /// The canary's backend; `legacy`: `affinity-canary-behavior: legacy`.
    Canary { legacy: bool },
}

impl Side {
    /// The side backend `backend` (an id) is of `entry`.
    pub(crate) fn of(entry: &RouteEntry, backend: usize) -> Side {
        match &entry.canary {
            None => Side::Alone,
            Some(canary) if canary.backend.id == backend && entry.backend.id != backend => {
                Side::Canary {
                    legacy: canary.rule.legacy_affinity,
                }
            }
            Some(_) => Side::Main,
        }
    }

    /// Whether session affinity applies: not on a `legacy` canary, which ingress-nginx
    /// gives none.
    pub(crate) fn affinity(self) -> bool {
        self != Side::Canary { legacy: true }
    }

    /// The tag new `balanced` keys carry in their top byte (`None`: no canary, no tag).
    fn tag(self) -> Option<u64> {
        match self {
            Side::Alone => None,
            Side::Main => Some(MAIN_TAG),
            Side::Canary { .. } => Some(CANARY_TAG),
        }
    }
}

/// The top byte of a `balanced` session key made on the main backend of a route with a
/// canary.
const MAIN_TAG: u64 = 0x5A;
/// The top byte of a `balanced` session key made on the canary.
const CANARY_TAG: u64 = 0xC3;

/// `key` with its top byte replaced by `tag`, if any.
fn tagged(key: u64, tag: Option<u64>) -> u64 {
    match tag {
        Some(tag) => (key & 0x00FF_FFFF_FFFF_FFFF) | (tag << 56),
        None => key,
    }
}

/// ingress-nginx's `route_to_alternative_balancer` for a route with cookie affinity and a
/// canary: `Some(false)` when the session cookie names the main backend (the client stays
/// there), `Some(true)` when it names the canary and the canary is `sticky`, `None`
/// (the canary's rules decide) otherwise: no cookie, one of neither backend, or one of a
/// `legacy` canary.
pub(crate) fn session_on_canary(
    affinity: &Affinity,
    legacy: bool,
    main: &Balancer,
    canary: &Balancer,
    cookie: Option<&[u8]>,
) -> Option<bool> {
    let key = parse_key(cookie?)?;
    let on_canary = match affinity.mode {
        AffinityMode::Persistent if main.find(key).is_some() => false,
        AffinityMode::Persistent if canary.find(key).is_some() => true,
        AffinityMode::Balanced if key >> 56 == MAIN_TAG => false,
        AffinityMode::Balanced if key >> 56 == CANARY_TAG => true,
        _ => return None,
    };
    (!on_canary || !legacy).then_some(on_canary)
}

/// The preference of a request (from `client`) for a route with `policy` (affinity wins
/// over `upstream-hash-by`), sent to the `side` backend of its route.
pub(crate) fn preference<'a, V: RequestView<'a>>(
    policy: &Policy,
    balancer: &Balancer,
    now_ms: u64,
    request: V,
    client: IpAddr,
    side: Side,
) -> Preference {
    if let Some(affinity) = policy.affinity.as_ref().filter(|_| side.affinity()) {
        let cookie = cookie(request.cookies(), &affinity.cookie).and_then(parse_key);
        let no_samesite_none = affinity.conditional_samesite_none
            && !sluice_routing::same_site_none_compatible(request.field(b"user-agent"));
        let preference = match (affinity.mode, cookie) {
            (AffinityMode::Persistent, Some(key)) => Preference {
                endpoint: balancer.find(key),
                key: Some(key),
                new: false,
                no_samesite_none: false,
                tag: None,
            },
            (AffinityMode::Persistent, None) => Preference {
                new: true,
                ..Preference::default()
            },
            (AffinityMode::Balanced, found) => {
                let key = found.unwrap_or_else(|| tagged(random_key(), side.tag()));
                Preference {
                    endpoint: balancer.rendezvous(key, now_ms),
                    key: Some(key),
                    new: found.is_none(),
                    no_samesite_none: false,
                    tag: side.tag(),
                }
            }
        };
        return Preference {
            no_samesite_none,
            ..preference
        };
    }
    let Some(hash_by) = &policy.hash_by else {
        return Preference::default();
    };
    let key = match hash_by {
        HashBy::ClientAddress => hash(client.to_string().as_bytes()),
        HashBy::Header(name) => hash(request.field(name.as_str().as_bytes()).unwrap_or(b"")),
        HashBy::Cookie(name) => hash(cookie(request.cookies(), name).unwrap_or(b"")),
        HashBy::RequestUri => hash(request.target().as_bytes()),
        HashBy::Path => hash(request.path().as_bytes()),
        HashBy::Host => hash(request.host().as_bytes()),
    };
    Preference {
        endpoint: balancer.rendezvous(key, now_ms),
        key: None,
        new: false,
        no_samesite_none: false,
        tag: None,
    }
}

/// The `Set-Cookie` a response carries after endpoint `chosen` answered, if any: a new
/// session's cookie, or (`persistent`) a cookie pointing at the endpoint that took over
/// from one that left, or failed with `session-cookie-change-on-failure`.
pub(crate) fn set_cookie(
    policy: &Policy,
    balancer: &Balancer,
    preference: &Preference,
    chosen: usize,
) -> Option<HeaderValue> {
    let affinity = policy.affinity.as_ref()?;
    let key = match affinity.mode {
        AffinityMode::Persistent => {
            let moved = preference.endpoint != Some(chosen);
            let left = preference.endpoint.is_none();
            if !(preference.new || left || (moved && affinity.change_on_failure)) {
                return None;
            }
            balancer.key(chosen)
        }
        AffinityMode::Balanced => {
            let moved = preference.endpoint != Some(chosen);
            if moved && affinity.change_on_failure {
                // A key that maps to the endpoint that answered (a few draws suffice:
                // each maps there with probability 1/endpoints).
                let now = balancer::now_millis(std::time::Instant::now());
                (0..256)
                    .map(|_| tagged(random_key(), preference.tag))
                    .find(|&k| balancer.rendezvous(k, now) == Some(chosen))?
            } else if preference.new {
                preference.key?
            } else {
                return None;
            }
        }
    };
    let line = cookie_line(affinity, key, SystemTime::now());
    let line = match preference.no_samesite_none {
        true => line.replacen("; SameSite=None", "", 1),
        false => line,
    };
    HeaderValue::try_from(line).ok()
}

/// `name=<16 hex digits><attributes>[; Expires=<HTTP date>]`.
fn cookie_line(affinity: &Affinity, key: u64, now: SystemTime) -> String {
    let mut line = format!("{}={key:016x}{}", affinity.cookie, affinity.attributes);
    if let Some(seconds) = affinity.expires {
        let at = now + Duration::from_secs(seconds);
        line.push_str("; Expires=");
        line.push_str(&httpdate::fmt_http_date(at));
    }
    line
}

fn parse_key(value: &[u8]) -> Option<u64> {
    if value.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(value).ok()?, 16).ok()
}

fn random_key() -> u64 {
    let high = balancer::random_below(u32::MAX as usize) as u64;
    let low = balancer::random_below(u32::MAX as usize) as u64;
    (high << 32) | low
}

/// FNV-1a, for `upstream-hash-by` keys.
fn hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::endpoint_index::EndpointIndex;
    use std::net::SocketAddr;

    fn balancer(n: u16) -> Balancer {
        let addrs: Vec<SocketAddr> = (0..n)
            .map(|i| SocketAddr::from(([10, 0, 0, 1], 8000 + i)))
            .collect();
        Balancer::new(&addrs, &mut EndpointIndex::default())
    }

    #[test]
    fn rendezvous_moves_few_keys_when_an_endpoint_is_added() {
        let (four, five) = (balancer(4), balancer(5));
        let keys: Vec<u64> = (0..10_000u64).map(|i| hash(&i.to_le_bytes())).collect();
        let moved = keys
            .iter()
            .filter(|&&k| four.rendezvous(k, 0) != five.rendezvous(k, 0))
            .count();
        // Ideally 1/5 of the keys move (to the new endpoint), and no others.
        assert!((1_700..=2_300).contains(&moved), "{moved}");
        for &k in &keys {
            let after = five.rendezvous(k, 0).unwrap();
            if four.rendezvous(k, 0) != Some(after) {
                assert_eq!(after, 4, "a key moved between old endpoints");
            }
        }
    }

    #[test]
    fn cookie_lines_like_ingress_nginx_sticky_cookies() {
        let affinity = Affinity {
            cookie: "route".into(),
            attributes: "; Path=/; HttpOnly".into(),
            expires: Some(60),
            mode: AffinityMode::Persistent,
            change_on_failure: false,
            conditional_samesite_none: false,
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            cookie_line(&affinity, 0xab, at),
            "route=00000000000000ab; Path=/; HttpOnly; Expires=Tue, 14 Nov 2023 22:14:20 GMT"
        );
        assert_eq!(parse_key(b"00000000000000ab"), Some(0xab));
        assert_eq!(parse_key(b"zz"), None);
    }

    fn affinity(mode: AffinityMode) -> Affinity {
        Affinity {
            cookie: "route".to_owned(),
            attributes: String::new(),
            expires: None,
            mode,
            change_on_failure: false,
            conditional_samesite_none: false,
        }
    }

    /// ingress-nginx "Session Affinity" with a canary (`affinity-canary-behavior`): the
    /// cookie of the main backend keeps the client there; one of the canary keeps it on a
    /// `sticky` canary and counts for nothing with a `legacy` one.
    #[test]
    fn sessions_stay_on_the_backend_their_cookie_names() {
        let main = balancer(2);
        let addrs = [SocketAddr::from(([10, 0, 0, 9], 9000))];
        let canary = Balancer::new(&addrs, &mut EndpointIndex::default());
        let persistent = affinity(AffinityMode::Persistent);
        let hex = |key: u64| format!("{key:016x}");
        let on = |a: &Affinity, legacy, cookie: &str| {
            session_on_canary(a, legacy, &main, &canary, Some(cookie.as_bytes()))
        };
        assert_eq!(on(&persistent, false, &hex(main.key(1))), Some(false));
        assert_eq!(on(&persistent, true, &hex(main.key(1))), Some(false));
        assert_eq!(on(&persistent, false, &hex(canary.key(0))), Some(true));
        assert_eq!(on(&persistent, true, &hex(canary.key(0))), None);
        assert_eq!(on(&persistent, false, &hex(12345)), None);
        assert_eq!(on(&persistent, false, "not-a-key"), None);
        assert_eq!(
            session_on_canary(&persistent, false, &main, &canary, None),
            None
        );

        let balanced = affinity(AffinityMode::Balanced);
        let random = random_key();
        let main_key = tagged(random, Side::Main.tag());
        let canary_key = tagged(random, Side::Canary { legacy: false }.tag());
        assert_eq!(on(&balanced, false, &hex(main_key)), Some(false));
        assert_eq!(on(&balanced, false, &hex(canary_key)), Some(true));
        assert_eq!(on(&balanced, true, &hex(canary_key)), None);
        // Untagged keys (made on a route without a canary) name neither.
        assert_eq!(on(&balanced, false, &hex(tagged(random, Some(0x01)))), None);
        assert_eq!(tagged(random, None), random);
    }
}
