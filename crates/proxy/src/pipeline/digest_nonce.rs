//! Nonces of digest authentication, made and checked without state: a nonce is the time
//! it was made (seconds since the epoch, 16 hex digits) and 8 random bytes (16 hex digits),
//! followed by an HMAC-SHA256 of both and the realm under a key this process drew when it
//! first needed one. Only this
//! process can make one; its age tells stale from fresh (nginx-http-auth-digest's
//! `auth_digest_timeout`, 60 s by default).
//!
//! What the module counts in shared memory (each `nc` once, `auth_digest_expires` after
//! the first use) needs state sluice keeps nowhere: a nonce is taken for its whole
//! lifetime, with a nonce count of at most `auth_digest_replays` (20).

use std::sync::LazyLock;

use ring::hmac;
use ring::rand::{SecureRandom as _, SystemRandom};

/// `auth_digest_timeout`'s default: how long a challenge's nonce is good for.
pub(crate) const TIMEOUT_SECS: u64 = 60;

/// `auth_digest_replays`' default: the highest nonce count taken for one nonce.
pub(crate) const REPLAYS: u32 = 20;

/// The process's key; `None` when the system has no randomness to give (then digest
/// routes answer 500 rather than take guessable nonces).
static KEY: LazyLock<Option<hmac::Key>> =
    LazyLock::new(|| hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new()).ok());

/// The process's nonce key.
pub(crate) fn process_key() -> Option<&'static hmac::Key> {
    KEY.as_ref()
}

/// Eight fresh random bytes, so that no two challenges share a nonce (zeros when the
/// system has none to give: the nonce is then still unforgeable, only not unique).
pub(crate) fn salt() -> [u8; 8] {
    let mut salt = [0u8; 8];
    let _ = SystemRandom::new().fill(&mut salt);
    salt
}

/// Hex digits of the time, of the salt, and of the MAC.
const LEN: usize = 16 + 16 + 64;

/// What a nonce the client sent back is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NonceAge {
    /// Made by this process for this realm, within the timeout.
    Fresh,
    /// Made by this process for this realm, but older than the timeout: the client may
    /// answer a new challenge without asking its user again (`stale=true`).
    Stale,
    /// Not one of ours (another key, another realm, altered, or from the future).
    Forged,
}

/// What the MAC covers: the time, the salt, the realm.
fn message(made: u64, salt: &[u8], realm: &str) -> Vec<u8> {
    let mut message = made.to_be_bytes().to_vec();
    message.extend_from_slice(salt);
    message.extend_from_slice(realm.as_bytes());
    message
}

/// A new nonce for `realm`, made at `now` (seconds since the epoch) with `salt`.
pub(crate) fn issue(key: &hmac::Key, realm: &str, now: u64, salt: [u8; 8]) -> String {
    let mut out = format!("{now:016x}");
    let tag = hmac::sign(key, &message(now, &salt, realm));
    for byte in salt.iter().chain(tag.as_ref()) {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// How old `nonce` is at `now`, if this process made it for `realm`. The MAC is compared
/// in constant time.
pub(crate) fn judge(key: &hmac::Key, realm: &str, nonce: &str, now: u64) -> NonceAge {
    if nonce.len() != LEN || !nonce.is_ascii() {
        return NonceAge::Forged;
    }
    let (made, rest) = nonce.split_at(16);
    let Ok(made) = u64::from_str_radix(made, 16) else {
        return NonceAge::Forged;
    };
    let Some(rest) = decode_hex(rest) else {
        return NonceAge::Forged;
    };
    let (salt, mac) = rest.split_at(8);
    if hmac::verify(key, &message(made, salt, realm), mac).is_err() || made > now.saturating_add(1)
    {
        return NonceAge::Forged;
    }
    if now.saturating_sub(made) > TIMEOUT_SECS {
        NonceAge::Stale
    } else {
        NonceAge::Fresh
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    bytes
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(pair, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, b"test key")
    }

    /// nginx-http-auth-digest's `auth_digest_timeout` (60 s): fresh until then, stale after.
    #[test]
    fn nonces_are_fresh_for_the_timeout_then_stale() {
        let key = key();
        let nonce = issue(&key, "area", 1_000, [7; 8]);
        assert_eq!(nonce.len(), LEN);
        assert_ne!(issue(&key, "area", 1_000, [8; 8]), nonce);
        assert_eq!(judge(&key, "area", &nonce, 1_000), NonceAge::Fresh);
        assert_eq!(judge(&key, "area", &nonce, 1_060), NonceAge::Fresh);
        assert_eq!(judge(&key, "area", &nonce, 1_061), NonceAge::Stale);
        // Made "in the future": not ours (a clock step back of more than a second too).
        assert_eq!(judge(&key, "area", &nonce, 998), NonceAge::Forged);
    }

    #[test]
    fn nonces_of_another_key_realm_or_altered_are_forged() {
        let key = key();
        let nonce = issue(&key, "area", 1_000, [7; 8]);
        let other = hmac::Key::new(hmac::HMAC_SHA256, b"other key");
        assert_eq!(judge(&other, "area", &nonce, 1_000), NonceAge::Forged);
        assert_eq!(judge(&key, "other", &nonce, 1_000), NonceAge::Forged);
        // A later time with the old MAC.
        let moved = format!("{:016x}{}", 1_050u64, &nonce[16..]);
        assert_eq!(judge(&key, "area", &moved, 1_060), NonceAge::Forged);
        let not_hex = format!("{}g", &nonce[..LEN - 1]);
        for bad in ["", "xyz", &nonce[..LEN - 1], &format!("{nonce}0"), &not_hex] {
            assert_eq!(judge(&key, "area", bad, 1_000), NonceAge::Forged, "{bad}");
        }
        assert!(process_key().is_some());
        assert_ne!(salt(), salt());
    }

    proptest::proptest! {
        /// Any realm and time: what `issue` makes, `judge` takes as fresh; one changed
        /// character makes it forged.
        #[test]
        fn issued_nonces_round_trip(realm in "[ -~]{0,20}", now in 0u64..u64::MAX / 2, at in 0usize..LEN, salt: [u8; 8]) {
            let key = key();
            let nonce = issue(&key, &realm, now, salt);
            proptest::prop_assert_eq!(judge(&key, &realm, &nonce, now), NonceAge::Fresh);
            let mut changed = nonce.clone().into_bytes();
            changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
            let changed = String::from_utf8(changed).unwrap();
            proptest::prop_assert_eq!(judge(&key, &realm, &changed, now), NonceAge::Forged);
        }
    }
}
