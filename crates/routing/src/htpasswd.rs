//! htpasswd files as nginx's `auth_basic_user_file` reads them, and the password hashes
//! nginx's `ngx_crypt` accepts: `$apr1$` (Apache's MD5), `{SHA}`, `{SSHA}`, `{PLAIN}`, and
//! the system `crypt(3)` schemes: bcrypt (`$2a$`, `$2b$`, `$2y$`), MD5-crypt (`$1$`),
//! SHA-256-crypt (`$5$`), SHA-512-crypt (`$6$`) and traditional DES.
//!
//! Parsed once when the Ingress is compiled; the proxy only calls [`Htpasswd::check`].

use std::collections::HashMap;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha1::Sha1;
use subtle::ConstantTimeEq as _;

/// The users of an htpasswd file (or of an `auth-map` Secret).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Htpasswd {
    /// User name to its password hash; the first line of a user wins, as in nginx.
    users: HashMap<String, PasswordHash>,
}

/// A password hash of one of the schemes nginx accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$apr1$salt$hash`: Apache's MD5 (`htpasswd -m`, its default).
    Apr1 {
        /// Up to 8 characters.
        salt: String,
        /// The whole hash as written.
        hash: String,
    },
    /// `{SHA}base64`: SHA-1 of the password (`htpasswd -s`).
    Sha(Vec<u8>),
    /// `{SSHA}base64`: SHA-1 of the password and a salt, followed by the salt.
    Ssha {
        /// The 20-byte digest.
        digest: Vec<u8>,
        /// The salt.
        salt: Vec<u8>,
    },
    /// `{PLAIN}password`.
    Plain(String),
    /// A `crypt(3)` hash (bcrypt `$2y$` of `htpasswd -B`, `$1$`, `$5$`, `$6$`, DES of
    /// `htpasswd -d`): checked by what it starts with.
    Crypt(String),
}

/// What checking a user's password found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The user exists and the password matches.
    Valid,
    /// No such user, or the password does not match: 401.
    Invalid,
    /// The user's hash is of no scheme nginx knows: nginx answers 500.
    BadHash,
}

impl Htpasswd {
    /// Reads htpasswd text as nginx does: one `user:hash` per line, the hash ending at the
    /// next `:` or the end of the line; empty lines, lines starting with `#` and lines
    /// without `:` are skipped; the first line of a user wins.
    pub fn parse(text: &str) -> Htpasswd {
        let mut users = HashMap::new();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, rest)) = line.split_once(':') else {
                continue;
            };
            let hash = rest.split(':').next().unwrap_or("");
            users
                .entry(user.to_owned())
                .or_insert_with(|| PasswordHash::parse(hash));
        }
        Htpasswd { users }
    }

    /// An `auth-map` Secret's users: each key a user, each value its hash.
    pub fn from_map<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Htpasswd {
        let users = entries
            .into_iter()
            .map(|(user, hash)| (user.to_owned(), PasswordHash::parse(hash.trim_end())))
            .collect();
        Htpasswd { users }
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are none (then every request gets 401).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The users whose hash is of no known scheme, sorted (for a diagnostic).
    pub fn unknown_schemes(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .users
            .iter()
            .filter(|(_, hash)| !hash.is_known())
            .map(|(user, _)| user.as_str())
            .collect();
        out.sort_unstable();
        out
    }

    /// Whether `user` may in with `password`. Costly for bcrypt (by design): call it off
    /// the event loop for those ([`Htpasswd::is_slow`]).
    pub fn check(&self, user: &str, password: &[u8]) -> Check {
        match self.users.get(user) {
            None => Check::Invalid,
            Some(hash) => hash.verify(password),
        }
    }

    /// Whether checking `user`'s password takes long (bcrypt: milliseconds or more).
    pub fn is_slow(&self, user: &str) -> bool {
        matches!(self.users.get(user), Some(PasswordHash::Crypt(h)) if h.starts_with("$2"))
    }
}

/// The user and password of an `Authorization: Basic <base64>` value (the scheme's name
/// in any case, as nginx's `ngx_http_auth_basic_user`); `None` for anything else, which
/// gets the 401 challenge.
pub fn basic_credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

impl PasswordHash {
    /// Reads one hash as `ngx_crypt` tells schemes apart.
    pub fn parse(hash: &str) -> PasswordHash {
        if let Some(rest) = hash.strip_prefix("$apr1$") {
            let salt: String = rest
                .split('$')
                .next()
                .unwrap_or("")
                .chars()
                .take(8)
                .collect();
            return PasswordHash::Apr1 {
                salt,
                hash: hash.to_owned(),
            };
        }
        if let Some(plain) = hash.strip_prefix("{PLAIN}") {
            return PasswordHash::Plain(plain.to_owned());
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        if let Some(encoded) = hash.strip_prefix("{SSHA}") {
            return match b64.decode(encoded) {
                Ok(bytes) if bytes.len() > 20 => PasswordHash::Ssha {
                    digest: bytes[..20].to_vec(),
                    salt: bytes[20..].to_vec(),
                },
                _ => PasswordHash::Crypt(hash.to_owned()),
            };
        }
        if let Some(encoded) = hash.strip_prefix("{SHA}") {
            return match b64.decode(encoded) {
                Ok(bytes) if bytes.len() == 20 => PasswordHash::Sha(bytes),
                _ => PasswordHash::Crypt(hash.to_owned()),
            };
        }
        PasswordHash::Crypt(hash.to_owned())
    }

    /// Whether `crypt(3)` (or nginx itself) knows the scheme.
    fn is_known(&self) -> bool {
        match self {
            PasswordHash::Crypt(hash) => pwhash::unix::crypt("", hash).is_ok(),
            _ => true,
        }
    }

    /// Whether `password` matches, compared in constant time.
    pub fn verify(&self, password: &[u8]) -> Check {
        let matches = match self {
            PasswordHash::Apr1 { salt, hash } => {
                let computed = md5_crypt(password, salt.as_bytes(), b"$apr1$");
                bool::from(computed.as_bytes().ct_eq(hash.as_bytes()))
            }
            PasswordHash::Sha(digest) => {
                bool::from(Sha1::digest(password).as_slice().ct_eq(digest.as_slice()))
            }
            PasswordHash::Ssha { digest, salt } => {
                let mut hasher = Sha1::new();
                hasher.update(password);
                hasher.update(salt);
                bool::from(hasher.finalize().as_slice().ct_eq(digest.as_slice()))
            }
            PasswordHash::Plain(plain) => bool::from(password.ct_eq(plain.as_bytes())),
            PasswordHash::Crypt(hash) => match pwhash::unix::crypt(password, hash) {
                Ok(computed) => bool::from(computed.as_bytes().ct_eq(hash.as_bytes())),
                Err(_) => return Check::BadHash,
            },
        };
        if matches {
            Check::Valid
        } else {
            Check::Invalid
        }
    }
}

/// MD5-crypt (Poul-Henning Kamp's, as nginx's `ngx_crypt_apr1` and Apache's `apr_md5`
/// compute it) with `magic` (`$1$` or `$apr1$`): `magic salt $ hash`.
fn md5_crypt(password: &[u8], salt: &[u8], magic: &[u8]) -> String {
    let salt = &salt[..salt.len().min(8)];
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(magic);
    ctx.update(salt);
    let mut alternate = Md5::new();
    alternate.update(password);
    alternate.update(salt);
    alternate.update(password);
    let alternate = alternate.finalize();
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alternate[..n]);
        left -= n;
    }
    let mut bits = password.len();
    while bits != 0 {
        if bits & 1 != 0 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        bits >>= 1;
    }
    let mut digest = ctx.finalize();
    for round in 0..1000 {
        let mut ctx = Md5::new();
        if round & 1 != 0 {
            ctx.update(password);
        } else {
            ctx.update(digest);
        }
        if round % 3 != 0 {
            ctx.update(salt);
        }
        if round % 7 != 0 {
            ctx.update(password);
        }
        if round & 1 != 0 {
            ctx.update(digest);
        } else {
            ctx.update(password);
        }
        digest = ctx.finalize();
    }
    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(magic.len() + salt.len() + 23);
    out.push_str(&String::from_utf8_lossy(magic));
    out.push_str(&String::from_utf8_lossy(salt));
    out.push('$');
    let mut push = |mut value: u32, count: usize| {
        for _ in 0..count {
            out.push(char::from(ITOA64[(value & 0x3f) as usize]));
            value >>= 6;
        }
    };
    let d = |i: usize| u32::from(digest[i]);
    push((d(0) << 16) | (d(6) << 8) | d(12), 4);
    push((d(1) << 16) | (d(7) << 8) | d(13), 4);
    push((d(2) << 16) | (d(8) << 8) | d(14), 4);
    push((d(3) << 16) | (d(9) << 8) | d(15), 4);
    push((d(4) << 16) | (d(10) << 8) | d(5), 4);
    push(d(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes of "password" in every scheme nginx's `auth_basic_user_file` accepts; the
    /// vectors come from `openssl passwd` (-apr1, -1, -5, -6), Python's `crypt` (DES), and
    /// pwhash's bcrypt docs.
    const PASSWORD_HASHES: &[(&str, &str)] = &[
        ("apr1", "$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00"),
        ("md5", "$1$5pZSV9va$azfrPr6af3Fc7dLblQXVa0"),
        (
            "sha256",
            "$5$saltsalt$gOjOtoMpVhru2uyjeJSEc/JaLQWOXMNmlOnj6T4AtC.",
        ),
        (
            "sha512",
            "$6$saltsalt$qFmFH.bQmmtXzyBY0s9v7Oicd2z4XSIecDzlB5KiA2/jctKu9YterLp8wwnSq.qc.eoxqOmSuNp2xS0ktL3nh/",
        ),
        (
            "bcrypt",
            "$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe",
        ),
        ("des", "abJnggxhB/yWI"),
        ("sha", "{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g="),
        ("ssha", "{SSHA}ouUZQtFbhkQrfIJ43qx176Wfj4YBAgME"),
        ("plain", "{PLAIN}password"),
    ];

    #[test]
    fn every_scheme_nginx_accepts_verifies_the_right_password_only() {
        for (scheme, hash) in PASSWORD_HASHES {
            let parsed = PasswordHash::parse(hash);
            assert_eq!(parsed.verify(b"password"), Check::Valid, "{scheme}");
            // (DES reads 8 bytes only, as crypt(3) does: no longer variant here.)
            for wrong in [
                &b"Password"[..],
                b"passworD",
                b"",
                b"passwor",
                b"\xffpassword",
            ] {
                assert_eq!(parsed.verify(wrong), Check::Invalid, "{scheme} {wrong:?}");
            }
            assert!(parsed.is_known(), "{scheme}");
        }
    }

    /// `openssl passwd -apr1` vectors: a short salt, an empty password, a password longer
    /// than one MD5 block of the alternate sum, UTF-8 and `:` in the password.
    #[test]
    fn apr1_matches_openssl() {
        let cases: &[(&[u8], &str)] = &[
            ("pässwörd:x".as_bytes(), "$apr1$abc$ukf6F3yO8EaJ/De95iWXb."),
            (b"", "$apr1$12345678$sHuPAw7VA9xjRbJz7zKV7/"),
            (
                b"a-much-longer-password-than-sixteen-bytes",
                "$apr1$x$8NceVVu1DjFLY3EWJfWpL/",
            ),
            (b"password", "$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00"),
        ];
        for (password, hash) in cases {
            let PasswordHash::Apr1 { salt, .. } = PasswordHash::parse(hash) else {
                panic!("{hash} is apr1");
            };
            assert_eq!(md5_crypt(password, salt.as_bytes(), b"$apr1$"), *hash);
            assert_eq!(PasswordHash::parse(hash).verify(password), Check::Valid);
        }
        // The same algorithm with `$1$` is crypt(3)'s MD5.
        assert_eq!(
            md5_crypt(b"password", b"5pZSV9va", b"$1$"),
            "$1$5pZSV9va$azfrPr6af3Fc7dLblQXVa0"
        );
    }

    #[test]
    fn files_are_read_as_nginx_reads_them() {
        let file = "# a comment\r\n\
                    alice:{PLAIN}one\r\n\
                    \n\
                    no-colon-line\n\
                    bob:{PLAIN}two:trailing comment field\n\
                    alice:{PLAIN}second-alice-line\n\
                    carol:$9$unknown\n\
                    :{PLAIN}empty-user\n\
                    dave:";
        let users = Htpasswd::parse(file);
        assert_eq!(users.check("alice", b"one"), Check::Valid);
        assert_eq!(users.check("alice", b"second-alice-line"), Check::Invalid);
        assert_eq!(users.check("bob", b"two"), Check::Valid);
        assert_eq!(
            users.check("bob", b"two:trailing comment field"),
            Check::Invalid
        );
        assert_eq!(users.check("nobody", b"one"), Check::Invalid);
        assert_eq!(users.check("carol", b"x"), Check::BadHash);
        assert_eq!(users.check("", b"empty-user"), Check::Valid);
        assert_eq!(users.check("# a comment", b""), Check::Invalid);
        assert_eq!(users.unknown_schemes(), ["carol", "dave"]);
        assert_eq!(users.len(), 5);
        assert!(!users.is_slow("alice"));
        let map = Htpasswd::from_map([(
            "erin",
            "$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe\n",
        )]);
        assert_eq!(map.check("erin", b"password"), Check::Valid);
        assert!(map.is_slow("erin"));
        assert!(Htpasswd::parse("").is_empty());
    }

    /// nginx `ngx_http_auth_basic_user`: `Basic` in any case, then base64 of `user:pass`
    /// (the password may hold `:`).
    #[test]
    fn basic_credentials_are_read_as_nginx_reads_them() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let value = |s: &str| format!("Basic {}", b64(s)).into_bytes();
        assert_eq!(
            basic_credentials(&value("alice:secret")),
            Some(("alice".into(), b"secret".to_vec()))
        );
        assert_eq!(
            basic_credentials(&value("bob:a:b")),
            Some(("bob".into(), b"a:b".to_vec()))
        );
        assert_eq!(
            basic_credentials(format!("bAsIc   {} ", b64("u:")).as_bytes()),
            Some(("u".into(), Vec::new()))
        );
        for bad in [
            value("no-colon"),
            format!("Bearer {}", b64("a:b")).into_bytes(),
            b"Basic !!!".to_vec(),
            b"Basic".to_vec(),
            b"".to_vec(),
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(b"\xff:x")
            )
            .into_bytes(),
        ] {
            assert_eq!(basic_credentials(&bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Any password and salt: the apr1 hash sluice computes verifies that password and
        /// no other; `{SHA}` and `{PLAIN}` likewise; credentials survive the Basic encoding.
        #[test]
        fn hashes_verify_exactly_their_password(
            password in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            other in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            salt in "[./0-9A-Za-z]{0,8}",
            user in "[^:\\r\\n#]{1,12}",
        ) {
            let apr1 = md5_crypt(&password, salt.as_bytes(), b"$apr1$");
            let parsed = PasswordHash::parse(&apr1);
            proptest::prop_assert_eq!(parsed.verify(&password), Check::Valid);
            let sha = format!(
                "{{SHA}}{}",
                base64::engine::general_purpose::STANDARD.encode(Sha1::digest(&password))
            );
            let sha = PasswordHash::parse(&sha);
            proptest::prop_assert_eq!(sha.verify(&password), Check::Valid);
            if other != password {
                proptest::prop_assert_eq!(parsed.verify(&other), Check::Invalid);
                proptest::prop_assert_eq!(sha.verify(&other), Check::Invalid);
            }
            if let Ok(text) = std::str::from_utf8(&password)
                && !text.contains(['\r', '\n', ':'])
            {
                let file = Htpasswd::parse(&format!("{user}:{{PLAIN}}{text}\n"));
                proptest::prop_assert_eq!(file.check(&user, &password), Check::Valid);
                proptest::prop_assert_eq!(file.check(&format!("{user}x"), &password), Check::Invalid);
            }
            let mut plain = user.clone().into_bytes();
            plain.push(b':');
            plain.extend_from_slice(&password);
            let header = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(&plain)
            );
            proptest::prop_assert_eq!(
                basic_credentials(header.as_bytes()),
                Some((user.clone(), password.clone()))
            );
        }
    }

    #[test]
    fn malformed_base64_schemes_are_unknown_not_open() {
        for hash in ["{SHA}not base64!", "{SHA}c2hvcnQ=", "{SSHA}AAAA"] {
            let parsed = PasswordHash::parse(hash);
            assert_ne!(parsed.verify(b""), Check::Valid, "{hash}");
            assert_ne!(parsed.verify(b"short"), Check::Valid, "{hash}");
        }
    }
}
