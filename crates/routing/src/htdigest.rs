//! HTTP Digest authentication as nginx's `nginx-http-auth-digest` module (which
//! ingress-nginx builds in for `auth-type: digest`) does it: users from an htdigest file
//! (`user:realm:HA1`, HA1 = MD5 of `user:realm:password`, as Apache's `htdigest` writes
//! it), `algorithm=MD5` with `qop="auth"` (RFC 7616 section 3.4.1, RFC 2617 section
//! 3.2.2.1).
//!
//! The pure parts live here: the user file, the `Authorization: Digest` parameters and
//! the expected response. Nonces (their key and clock) belong to the proxy.

use std::collections::HashMap;

use md5::{Digest as _, Md5};
use subtle::ConstantTimeEq as _;

/// The users of one realm, from an htdigest file or an `auth-map` Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Htdigest {
    /// User name to HA1, 32 lowercase hex digits. Only the realm's users: the module
    /// matches a line by user and realm both.
    users: HashMap<String, String>,
    /// Lines of the realm whose HA1 is not 32 hex digits (for a diagnostic).
    malformed: Vec<String>,
}

impl Htdigest {
    /// Reads htdigest text (`user:realm:HA1` per line) for `realm`: lines of other realms,
    /// empty lines, `#` comments and lines without two `:` are skipped; the first line of
    /// a user wins.
    pub fn parse(text: &str, realm: &str) -> Htdigest {
        let entries = text.lines().filter_map(|line| {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let (user, rest) = line.split_once(':')?;
            Some((user, rest))
        });
        Htdigest::from_entries(entries, realm)
    }

    /// An `auth-map` Secret's users: each key a user, each value `realm:HA1` (ingress-nginx
    /// writes `key:value` lines into the module's user file).
    pub fn from_map<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
        realm: &str,
    ) -> Htdigest {
        Htdigest::from_entries(
            entries
                .into_iter()
                .map(|(user, value)| (user, value.trim_end())),
            realm,
        )
    }

    fn from_entries<'a>(
        entries: impl Iterator<Item = (&'a str, &'a str)>,
        realm: &str,
    ) -> Htdigest {
        let mut out = Htdigest::default();
        for (user, rest) in entries {
            let Some((line_realm, ha1)) = rest.split_once(':') else {
                continue;
            };
            if line_realm != realm || out.users.contains_key(user) {
                continue;
            }
            let ha1 = ha1.split(':').next().unwrap_or("");
            if ha1.len() == 32 && ha1.bytes().all(|b| b.is_ascii_hexdigit()) {
                out.users.insert(user.to_owned(), ha1.to_ascii_lowercase());
            } else if !out.malformed.iter().any(|u| u == user) {
                out.malformed.push(user.to_owned());
            }
        }
        out.malformed.sort_unstable();
        out
    }

    /// How many users of the realm there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the realm has no user (then every request gets 401).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The realm's users whose HA1 is not 32 hex digits, sorted: they never match.
    pub fn malformed(&self) -> &[String] {
        &self.malformed
    }

    /// Whether `credentials` answer the challenge for a request with `method`: the user
    /// exists and the response is the one RFC 7616 section 3.4.1 computes from its HA1
    /// (compared in constant time). The nonce, realm and URI are the caller's to check.
    pub fn verify(&self, method: &str, credentials: &DigestCredentials) -> bool {
        let Some(ha1) = self.users.get(&credentials.username) else {
            return false;
        };
        let expected = response(
            ha1,
            method,
            &credentials.uri,
            &credentials.nonce,
            &credentials.nc,
            &credentials.cnonce,
        );
        bool::from(
            expected
                .as_bytes()
                .ct_eq(credentials.response.to_ascii_lowercase().as_bytes()),
        )
    }
}

/// The parameters of an `Authorization: Digest ...` value that `qop="auth"` with MD5
/// needs (RFC 7616 section 3.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestCredentials {
    /// `username`.
    pub username: String,
    /// `realm`.
    pub realm: String,
    /// `nonce`, as the server made it.
    pub nonce: String,
    /// `uri`: the request target the client signed.
    pub uri: String,
    /// `response`: 32 hex digits.
    pub response: String,
    /// `nc`: the nonce count, 8 hex digits.
    pub nc: String,
    /// The nonce count's value.
    pub nonce_count: u32,
    /// `cnonce`.
    pub cnonce: String,
}

/// Reads an `Authorization` value with the `Digest` scheme (any case). `None` when it is
/// another scheme, does not parse, misses a parameter `qop=auth` needs, or asks for a
/// `qop` other than `auth` or an `algorithm` other than `MD5`: such a request gets the
/// challenge, as the module answers it.
pub fn digest_credentials(value: &[u8]) -> Option<DigestCredentials> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case("digest") || !rest.starts_with([' ', '\t']) {
        return None;
    }
    let params = parse_params(rest)?;
    let get = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
    };
    if let Some(algorithm) = get("algorithm")
        && !algorithm.eq_ignore_ascii_case("md5")
    {
        return None;
    }
    if !get("qop")?.eq_ignore_ascii_case("auth") {
        return None;
    }
    let nc = get("nc")?;
    if nc.len() != 8 {
        return None;
    }
    let nonce_count = u32::from_str_radix(&nc, 16).ok()?;
    Some(DigestCredentials {
        username: get("username")?,
        realm: get("realm")?,
        nonce: get("nonce")?,
        uri: get("uri")?,
        response: get("response")?,
        nc,
        nonce_count,
        cnonce: get("cnonce")?,
    })
}

/// `name=token` or `name="quoted string"` pairs separated by commas (RFC 7235's
/// auth-param, RFC 9110's quoted-string with `\` escapes).
fn parse_params(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        rest = rest[eq + 1..].trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((at, c)) = chars.next() {
                match c {
                    '"' => {
                        end = Some(at);
                        break;
                    }
                    '\\' => text.push(chars.next()?.1),
                    c => text.push(c),
                }
            }
            value = text;
            rest = &quoted[end? + 1..];
        } else {
            let end = rest.find([',', ' ', '\t']).unwrap_or(rest.len());
            value = rest[..end].to_owned();
            rest = &rest[end..];
        }
        out.push((name.to_owned(), value));
        rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after.trim_start(),
            None if rest.is_empty() => {}
            None => return None,
        }
    }
    Some(out)
}

/// Lowercase hex MD5 of `text`.
fn md5_hex(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// HA1 of RFC 7616 section 3.4.2 for MD5: what `htdigest` stores.
#[cfg(test)]
fn ha1(user: &str, realm: &str, password: &str) -> String {
    md5_hex(&format!("{user}:{realm}:{password}"))
}

/// The response of RFC 7616 section 3.4.1 for `qop=auth`:
/// `MD5(HA1:nonce:nc:cnonce:auth:MD5(method:uri))`.
pub fn response(ha1: &str, method: &str, uri: &str, nonce: &str, nc: &str, cnonce: &str) -> String {
    let ha2 = md5_hex(&format!("{method}:{uri}"));
    md5_hex(&format!("{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 2617 section 3.5's example ("Mufasa", "Circle Of Life"), and RFC 7616 section
    /// 3.9.1's MD5 one (the same user with `http-auth@example.org`).
    #[test]
    fn responses_match_the_rfc_examples() {
        let ha1_2617 = ha1("Mufasa", "testrealm@host.com", "Circle Of Life");
        assert_eq!(ha1_2617, "939e7578ed9e3c518a452acee763bce9");
        assert_eq!(
            response(
                &ha1_2617,
                "GET",
                "/dir/index.html",
                "dcd98b7102dd2f0e8b11d0f600bfb0c093",
                "00000001",
                "0a4f113b",
            ),
            "6629fae49393a05397450978507c4ef1"
        );
        let ha1_7616 = ha1("Mufasa", "http-auth@example.org", "Circle of Life");
        assert_eq!(
            response(
                &ha1_7616,
                "GET",
                "/dir/index.html",
                "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v",
                "00000001",
                "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ",
            ),
            "8ca523f5e9506fed4657c9700eebdbec"
        );
    }

    /// RFC 7616 section 3.9.1's Authorization value parses, and a client's is checked
    /// against an htdigest file of the realm only.
    #[test]
    fn credentials_parse_and_verify_against_the_realm_users() {
        let value = "Digest username=\"Mufasa\", realm=\"http-auth@example.org\", \
                     uri=\"/dir/index.html\", algorithm=MD5, \
                     nonce=\"7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v\", nc=00000001, \
                     cnonce=\"f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ\", qop=auth, \
                     response=\"8ca523f5e9506fed4657c9700eebdbec\", \
                     opaque=\"FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS\"";
        let credentials = digest_credentials(value.as_bytes()).unwrap();
        assert_eq!(credentials.username, "Mufasa");
        assert_eq!(credentials.nonce_count, 1);
        assert_eq!(credentials.uri, "/dir/index.html");
        let realm = "http-auth@example.org";
        let file = format!(
            "# htdigest\nMufasa:other-realm:{}\nMufasa:{realm}:{}\nMufasa:{realm}:{}\n",
            ha1("Mufasa", "other-realm", "Circle of Life"),
            ha1("Mufasa", realm, "Circle of Life"),
            ha1("Mufasa", realm, "second line loses"),
        );
        let users = Htdigest::parse(&file, realm);
        assert_eq!(users.len(), 1);
        assert!(users.verify("GET", &credentials));
        assert!(!users.verify("POST", &credentials));
        // A user of another realm only does not match.
        let other = Htdigest::parse(&file, "other");
        assert!(other.is_empty());
        let map = Htdigest::from_map(
            [(
                "Mufasa",
                format!("{realm}:{}\n", ha1("Mufasa", realm, "Circle of Life")).as_str(),
            )],
            realm,
        );
        assert!(map.verify("GET", &credentials));
        let bad = Htdigest::parse(
            &format!("eve:{realm}:not-hex\nbob:{realm}:{}\n", "0".repeat(32)),
            realm,
        );
        assert_eq!(bad.malformed(), ["eve"]);
        assert_eq!(bad.len(), 1);
    }

    #[test]
    fn what_is_not_digest_with_qop_auth_and_md5_is_refused() {
        let good = "Digest username=\"u\", realm=\"r\", nonce=\"n\", uri=\"/\", qop=auth, \
                    nc=00000001, cnonce=\"c\", response=\"x\"";
        assert!(digest_credentials(good.as_bytes()).is_some());
        assert!(digest_credentials(good.replacen("Digest", "dIgEsT", 1).as_bytes()).is_some());
        for bad in [
            good.replacen("Digest", "Basic", 1),
            good.replace("qop=auth", "qop=auth-int"),
            good.replace(", qop=auth", ""),
            good.replace("nc=00000001", "nc=1"),
            good.replace("nc=00000001", "nc=0000000g"),
            good.replace(", cnonce=\"c\"", ""),
            good.replace("uri=\"/\"", "uri=\"/"),
            format!("{good}, algorithm=MD5-sess"),
            format!("{good}, algorithm=SHA-256"),
            format!("{good} junk"),
            "Digest".to_owned(),
            String::new(),
        ] {
            assert_eq!(digest_credentials(bad.as_bytes()), None, "{bad}");
        }
        // Quoted strings keep commas and escapes.
        let quoted = good.replace("username=\"u\"", "username=\"a\\\"b, c\"");
        assert_eq!(
            digest_credentials(quoted.as_bytes()).unwrap().username,
            "a\"b, c"
        );
    }

    proptest::proptest! {
        /// Any user, password and request: the response a client computes verifies, and
        /// a wrong password or another URI does not.
        #[test]
        fn a_client_response_verifies_exactly(
            user in "[a-zA-Z0-9_.-]{1,12}",
            password in "[ -~]{0,20}",
            other in "[ -~]{0,20}",
            uri in "/[a-z0-9/?=&]{0,20}",
            cnonce in "[a-zA-Z0-9]{1,16}",
            nc in 1u32..1000,
        ) {
            let realm = "realm";
            let nonce = "abc123";
            let nc_text = format!("{nc:08x}");
            let header = format!(
                "Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", \
                 qop=auth, nc={nc_text}, cnonce=\"{cnonce}\", response=\"{}\"",
                response(&ha1(&user, realm, &password), "GET", &uri, nonce, &nc_text, &cnonce)
            );
            let credentials = digest_credentials(header.as_bytes()).unwrap();
            proptest::prop_assert_eq!(credentials.nonce_count, nc);
            let users = Htdigest::parse(&format!("{user}:{realm}:{}", ha1(&user, realm, &password)), realm);
            proptest::prop_assert!(users.verify("GET", &credentials));
            if other != password {
                let users = Htdigest::parse(&format!("{user}:{realm}:{}", ha1(&user, realm, &other)), realm);
                proptest::prop_assert!(!users.verify("GET", &credentials));
            }
        }
    }
}
