//! OpenSSL cipher lists and nginx protocol lists (ingress-nginx's `ssl-ciphers`,
//! `ssl-protocols`, `proxy-ssl-ciphers`, `proxy-ssl-protocols`) mapped to what rustls offers.
//!
//! rustls offers six TLS 1.2 cipher suites (ECDHE key exchange, ECDSA or RSA certificates,
//! AES-GCM or ChaCha20-Poly1305) and three TLS 1.3 suites. As in OpenSSL, a cipher list
//! chooses among the TLS 1.2 suites only; TLS 1.3 suites are never affected by it.
//!
//! A cipher list is OpenSSL's syntax: elements separated by `:` (or `,` or spaces), each an
//! optional operator (`!` removes for good, `-` removes, `+` moves to the end, none adds)
//! and one or more selectors joined by `+` (all must match, `ECDHE+AESGCM`). A selector is a
//! suite's OpenSSL name (`ECDHE-RSA-AES128-GCM-SHA256`) or IANA name
//! (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), or one of these keywords (case-sensitive, as in
//! OpenSSL):
//!
//! - every rustls suite: `ALL`, `DEFAULT`, `HIGH`, `ECDHE`, `EECDH`, `kECDHE`, `kEECDH`,
//!   `AEAD`, `TLSv1.2`;
//! - by certificate: `aRSA`; `aECDSA`, `ECDSA`;
//! - by cipher: `AES`, `AESGCM`; `AES128`; `AES256`; `CHACHA20`;
//! - no rustls suite (known, so never reported as unknown): `COMPLEMENTOFDEFAULT`,
//!   `COMPLEMENTOFALL`, `MEDIUM`, `LOW`, `EXPORT`, `eNULL`, `NULL`, `aNULL`, `RSA`, `kRSA`,
//!   `DH`, `DHE`, `EDH`, `kDHE`, `kEDH`, `ADH`, `AECDH`, `aDSS`, `DSS`, `PSK`, `kPSK`, `aPSK`,
//!   `SRP`, `kSRP`, `aSRP`, `AESCCM`, `AESCCM8`, `CAMELLIA`, `CAMELLIA128`, `CAMELLIA256`,
//!   `ARIA`, `3DES`, `DES`, `RC4`, `RC2`, `IDEA`, `SEED`, `MD5`, `SHA1`, `SHA`, `SHA256`,
//!   `SHA384` (message authentication by a hash: rustls's TLS 1.2 suites are all AEAD),
//!   `SSLv3`, `TLSv1`, `TLSv1.0`.
//!
//! `@STRENGTH` sorts the list by key length (256-bit ciphers first); `@SECLEVEL=n` is
//! accepted and has no effect. Anything else selects nothing and is reported, as OpenSSL
//! skips what it does not know; a list that selects no suite at all is an error, as
//! OpenSSL's `SSL_CTX_set_cipher_list` fails on it.

use std::fmt;

/// A TLS 1.2 cipher suite rustls offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tls12Suite {
    /// `ECDHE-ECDSA-AES256-GCM-SHA384`.
    EcdheEcdsaAes256GcmSha384,
    /// `ECDHE-RSA-AES256-GCM-SHA384`.
    EcdheRsaAes256GcmSha384,
    /// `ECDHE-ECDSA-CHACHA20-POLY1305`.
    EcdheEcdsaChacha20Poly1305,
    /// `ECDHE-RSA-CHACHA20-POLY1305`.
    EcdheRsaChacha20Poly1305,
    /// `ECDHE-ECDSA-AES128-GCM-SHA256`.
    EcdheEcdsaAes128GcmSha256,
    /// `ECDHE-RSA-AES128-GCM-SHA256`.
    EcdheRsaAes128GcmSha256,
}

/// The bulk cipher of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bulk {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20,
}

impl Tls12Suite {
    /// Every suite, in OpenSSL's order for `ALL` (256-bit ciphers first, ECDSA before RSA).
    pub const ALL: [Tls12Suite; 6] = [
        Tls12Suite::EcdheEcdsaAes256GcmSha384,
        Tls12Suite::EcdheRsaAes256GcmSha384,
        Tls12Suite::EcdheEcdsaChacha20Poly1305,
        Tls12Suite::EcdheRsaChacha20Poly1305,
        Tls12Suite::EcdheEcdsaAes128GcmSha256,
        Tls12Suite::EcdheRsaAes128GcmSha256,
    ];

    /// OpenSSL's name (as nginx's `ssl_ciphers` takes it).
    pub fn openssl_name(self) -> &'static str {
        match self {
            Tls12Suite::EcdheEcdsaAes256GcmSha384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
            Tls12Suite::EcdheRsaAes256GcmSha384 => "ECDHE-RSA-AES256-GCM-SHA384",
            Tls12Suite::EcdheEcdsaChacha20Poly1305 => "ECDHE-ECDSA-CHACHA20-POLY1305",
            Tls12Suite::EcdheRsaChacha20Poly1305 => "ECDHE-RSA-CHACHA20-POLY1305",
            Tls12Suite::EcdheEcdsaAes128GcmSha256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
            Tls12Suite::EcdheRsaAes128GcmSha256 => "ECDHE-RSA-AES128-GCM-SHA256",
        }
    }

    /// The IANA name (the TLS registry's, as rustls names its suites).
    pub fn iana_name(self) -> &'static str {
        match self {
            Tls12Suite::EcdheEcdsaAes256GcmSha384 => "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            Tls12Suite::EcdheRsaAes256GcmSha384 => "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            Tls12Suite::EcdheEcdsaChacha20Poly1305 => {
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
            }
            Tls12Suite::EcdheRsaChacha20Poly1305 => "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            Tls12Suite::EcdheEcdsaAes128GcmSha256 => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            Tls12Suite::EcdheRsaAes128GcmSha256 => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        }
    }

    /// The IANA code point (what the wire and rustls's `CipherSuite` carry).
    pub fn iana_code(self) -> u16 {
        match self {
            Tls12Suite::EcdheEcdsaAes256GcmSha384 => 0xC02C,
            Tls12Suite::EcdheRsaAes256GcmSha384 => 0xC030,
            Tls12Suite::EcdheEcdsaChacha20Poly1305 => 0xCCA9,
            Tls12Suite::EcdheRsaChacha20Poly1305 => 0xCCA8,
            Tls12Suite::EcdheEcdsaAes128GcmSha256 => 0xC02B,
            Tls12Suite::EcdheRsaAes128GcmSha256 => 0xC02F,
        }
    }

    fn ecdsa(self) -> bool {
        matches!(
            self,
            Tls12Suite::EcdheEcdsaAes256GcmSha384
                | Tls12Suite::EcdheEcdsaChacha20Poly1305
                | Tls12Suite::EcdheEcdsaAes128GcmSha256
        )
    }

    fn bulk(self) -> Bulk {
        match self {
            Tls12Suite::EcdheEcdsaAes256GcmSha384 | Tls12Suite::EcdheRsaAes256GcmSha384 => {
                Bulk::Aes256Gcm
            }
            Tls12Suite::EcdheEcdsaChacha20Poly1305 | Tls12Suite::EcdheRsaChacha20Poly1305 => {
                Bulk::Chacha20
            }
            Tls12Suite::EcdheEcdsaAes128GcmSha256 | Tls12Suite::EcdheRsaAes128GcmSha256 => {
                Bulk::Aes128Gcm
            }
        }
    }

    /// Key length in bits, what `@STRENGTH` sorts by.
    fn strength_bits(self) -> u16 {
        match self.bulk() {
            Bulk::Aes128Gcm => 128,
            Bulk::Aes256Gcm | Bulk::Chacha20 => 256,
        }
    }
}

impl fmt::Display for Tls12Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.openssl_name())
    }
}

/// What a cipher list chooses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CipherList {
    /// The TLS 1.2 suites, most preferred first; never empty.
    pub suites: Vec<Tls12Suite>,
    /// Elements that selected nothing rustls offers, and why; the rest applies.
    pub ignored: Vec<IgnoredElement>,
}

/// An element of a cipher list with no effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredElement {
    /// The element as written.
    pub element: String,
    /// Why it has no effect, in a phrase.
    pub why: &'static str,
}

impl fmt::Display for IgnoredElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({})", self.element, self.why)
    }
}

/// A set of suites as bits over [`Tls12Suite::ALL`].
type Mask = u8;

const EVERY: Mask = 0b11_1111;
const NOTHING: Mask = 0;

fn mask_of(keep: impl Fn(Tls12Suite) -> bool) -> Mask {
    Tls12Suite::ALL
        .iter()
        .enumerate()
        .filter(|(_, s)| keep(**s))
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

fn bit(suite: Tls12Suite) -> Mask {
    mask_of(|s| s == suite)
}

/// The suites one selector names: `None` when it is no keyword or suite sluice knows.
fn selector(word: &str) -> Option<Mask> {
    if let Some(suite) = Tls12Suite::ALL
        .into_iter()
        .find(|s| s.openssl_name() == word || s.iana_name() == word)
    {
        return Some(bit(suite));
    }
    Some(match word {
        "ALL" | "DEFAULT" | "HIGH" | "ECDHE" | "EECDH" | "kECDHE" | "kEECDH" | "AEAD"
        | "TLSv1.2" => EVERY,
        "aRSA" => mask_of(|s| !s.ecdsa()),
        "aECDSA" | "ECDSA" => mask_of(Tls12Suite::ecdsa),
        "AES" | "AESGCM" => mask_of(|s| s.bulk() != Bulk::Chacha20),
        "AES128" => mask_of(|s| s.bulk() == Bulk::Aes128Gcm),
        "AES256" => mask_of(|s| s.bulk() == Bulk::Aes256Gcm),
        "CHACHA20" => mask_of(|s| s.bulk() == Bulk::Chacha20),
        "COMPLEMENTOFDEFAULT"
        | "COMPLEMENTOFALL"
        | "MEDIUM"
        | "LOW"
        | "EXPORT"
        | "eNULL"
        | "NULL"
        | "aNULL"
        | "RSA"
        | "kRSA"
        | "DH"
        | "DHE"
        | "EDH"
        | "kDHE"
        | "kEDH"
        | "ADH"
        | "AECDH"
        | "aDSS"
        | "DSS"
        | "PSK"
        | "kPSK"
        | "aPSK"
        | "SRP"
        | "kSRP"
        | "aSRP"
        | "AESCCM"
        | "AESCCM8"
        | "CAMELLIA"
        | "CAMELLIA128"
        | "CAMELLIA256"
        | "ARIA"
        | "3DES"
        | "DES"
        | "RC4"
        | "RC2"
        | "IDEA"
        | "SEED"
        | "MD5"
        | "SHA1"
        | "SHA"
        | "SHA256"
        | "SHA384"
        | "SSLv3"
        | "TLSv1"
        | "TLSv1.0" => NOTHING,
        _ => return None,
    })
}

/// What an element does with the suites it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// No operator: appended, unless present or removed for good.
    Add,
    /// `+`: present ones move to the end.
    MoveToEnd,
    /// `-`: removed; a later element may add them again.
    Remove,
    /// `!`: removed, and no later element adds them again.
    Kill,
}

/// Parses an OpenSSL cipher list (see the module's doc for the syntax and keywords).
/// The error, a sentence, when it selects no TLS 1.2 suite rustls offers.
pub fn parse_cipher_list(value: &str) -> Result<CipherList, String> {
    let mut active: Vec<Tls12Suite> = Vec::new();
    let mut killed: Mask = NOTHING;
    let mut ignored = Vec::new();
    let mut ignore = |element: &str, why: &'static str| {
        ignored.push(IgnoredElement {
            element: element.to_owned(),
            why,
        });
    };
    for element in value
        .split([':', ',', ' ', '\t', '\n', ';'])
        .filter(|e| !e.is_empty())
    {
        if element == "@STRENGTH" {
            // Stable: equal strengths keep their order.
            active.sort_by_key(|s| std::cmp::Reverse(s.strength_bits()));
            continue;
        }
        if let Some(level) = element.strip_prefix("@SECLEVEL=") {
            if !matches!(level, "0" | "1" | "2" | "3" | "4" | "5") {
                ignore(element, "not a security level from 0 to 5");
            }
            // Every rustls suite has forward secrecy and an AEAD cipher: nothing to drop.
            continue;
        }
        if element.starts_with('@') {
            ignore(element, "not @STRENGTH or @SECLEVEL=n");
            continue;
        }
        let (op, body) = match element.as_bytes()[0] {
            b'!' => (Op::Kill, &element[1..]),
            b'-' => (Op::Remove, &element[1..]),
            b'+' => (Op::MoveToEnd, &element[1..]),
            _ => (Op::Add, element),
        };
        if body.is_empty() {
            ignore(element, "an operator without a cipher or keyword");
            continue;
        }
        let mut selected = EVERY;
        let mut unknown = false;
        for word in body.split('+') {
            match selector(word) {
                Some(mask) => selected &= mask,
                None => unknown = true,
            }
        }
        if unknown {
            ignore(element, "no cipher suite or keyword sluice knows");
            continue;
        }
        if selected == NOTHING && op == Op::Add {
            ignore(element, "selects no cipher suite rustls offers");
            continue;
        }
        let chosen = |s: &Tls12Suite| selected & bit(*s) != 0;
        match op {
            Op::Add => {
                for suite in Tls12Suite::ALL {
                    if chosen(&suite) && killed & bit(suite) == 0 && !active.contains(&suite) {
                        active.push(suite);
                    }
                }
            }
            Op::MoveToEnd => {
                let (moved, stay): (Vec<_>, Vec<_>) = active.iter().partition(|s| chosen(s));
                active = stay.into_iter().chain(moved).collect();
            }
            Op::Remove => active.retain(|s| !chosen(s)),
            Op::Kill => {
                active.retain(|s| !chosen(s));
                killed |= selected;
            }
        }
    }
    if active.is_empty() {
        let offered: Vec<&str> = Tls12Suite::ALL.iter().map(|s| s.openssl_name()).collect();
        return Err(format!(
            "{:?} selects no TLS 1.2 cipher suite rustls offers ({})",
            value.trim(),
            offered.join(", ")
        ));
    }
    Ok(CipherList {
        suites: active,
        ignored,
    })
}

/// What a protocol list enables.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProtocolList {
    /// `TLSv1.2`.
    pub tls12: bool,
    /// `TLSv1.3`.
    pub tls13: bool,
    /// Protocols listed that rustls does not offer (`SSLv2`, `SSLv3`, `TLSv1`, `TLSv1.1`),
    /// as written; they have no effect.
    pub unavailable: Vec<String>,
}

/// Parses nginx's `ssl_protocols` list: names separated by spaces, case-insensitive as nginx
/// reads them. The error, a sentence, for an unknown name or a list with neither TLSv1.2
/// nor TLSv1.3.
pub fn parse_protocol_list(value: &str) -> Result<ProtocolList, String> {
    let mut list = ProtocolList {
        tls12: false,
        tls13: false,
        unavailable: Vec::new(),
    };
    for name in value.split_whitespace() {
        match name.to_ascii_lowercase().as_str() {
            "tlsv1.2" => list.tls12 = true,
            "tlsv1.3" => list.tls13 = true,
            "sslv2" | "sslv3" | "tlsv1" | "tlsv1.1" => {
                if !list
                    .unavailable
                    .iter()
                    .any(|u| u.eq_ignore_ascii_case(name))
                {
                    list.unavailable.push(name.to_owned());
                }
            }
            _ => {
                return Err(format!(
                    "{name:?} is not a protocol (SSLv2, SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)"
                ));
            }
        }
    }
    if !list.tls12 && !list.tls13 {
        let listed = if list.unavailable.is_empty() {
            "lists no protocol".to_owned()
        } else {
            format!(
                "lists only {}, which rustls does not offer",
                list.unavailable.join(" ")
            )
        };
        return Err(format!(
            "{:?} {listed}; TLSv1.2 or TLSv1.3 is needed",
            value.trim()
        ));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Tls12Suite::*;
    use proptest::prelude::*;

    fn suites(value: &str) -> Vec<Tls12Suite> {
        parse_cipher_list(value)
            .unwrap_or_else(|e| panic!("{value}: {e}"))
            .suites
    }

    #[test]
    fn ingress_nginx_default_ssl_ciphers_keep_their_order_and_drop_dhe() {
        // ingress-nginx's default `ssl-ciphers` (config.go): the two DHE suites are not in
        // rustls and are reported; the six ECDHE ones keep the list's order.
        let list = parse_cipher_list(
            "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
             ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:\
             ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:\
             DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384",
        )
        .unwrap();
        assert_eq!(
            list.suites,
            vec![
                EcdheEcdsaAes128GcmSha256,
                EcdheRsaAes128GcmSha256,
                EcdheEcdsaAes256GcmSha384,
                EcdheRsaAes256GcmSha384,
                EcdheEcdsaChacha20Poly1305,
                EcdheRsaChacha20Poly1305,
            ]
        );
        let ignored: Vec<&str> = list.ignored.iter().map(|i| i.element.as_str()).collect();
        assert_eq!(
            ignored,
            ["DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384"]
        );
    }

    #[test]
    fn keywords_select_like_openssl() {
        assert_eq!(suites("HIGH:!aNULL:!MD5"), Tls12Suite::ALL.to_vec());
        assert_eq!(suites("DEFAULT"), Tls12Suite::ALL.to_vec());
        assert_eq!(suites("ALL:!RSA"), Tls12Suite::ALL.to_vec(), "RSA is kRSA");
        assert_eq!(
            suites("aRSA"),
            vec![
                EcdheRsaAes256GcmSha384,
                EcdheRsaChacha20Poly1305,
                EcdheRsaAes128GcmSha256
            ]
        );
        assert_eq!(
            suites("ECDSA"),
            vec![
                EcdheEcdsaAes256GcmSha384,
                EcdheEcdsaChacha20Poly1305,
                EcdheEcdsaAes128GcmSha256
            ]
        );
        assert_eq!(suites("aECDSA"), suites("ECDSA"));
        assert_eq!(
            suites("AES128"),
            vec![EcdheEcdsaAes128GcmSha256, EcdheRsaAes128GcmSha256]
        );
        assert_eq!(
            suites("AES256"),
            vec![EcdheEcdsaAes256GcmSha384, EcdheRsaAes256GcmSha384]
        );
        assert_eq!(
            suites("CHACHA20"),
            vec![EcdheEcdsaChacha20Poly1305, EcdheRsaChacha20Poly1305]
        );
        assert_eq!(suites("AESGCM").len(), 4);
        assert_eq!(suites("AES"), suites("AESGCM"));
        for every in [
            "ECDHE", "EECDH", "kECDHE", "kEECDH", "AEAD", "TLSv1.2", "ALL",
        ] {
            assert_eq!(suites(every), Tls12Suite::ALL.to_vec(), "{every}");
        }
    }

    #[test]
    fn and_selectors_intersect() {
        assert_eq!(suites("ECDHE+AESGCM+aRSA").len(), 2);
        assert_eq!(
            suites("EECDH+CHACHA20:EECDH+AES128"),
            vec![
                EcdheEcdsaChacha20Poly1305,
                EcdheRsaChacha20Poly1305,
                EcdheEcdsaAes128GcmSha256,
                EcdheRsaAes128GcmSha256,
            ]
        );
        // A known keyword with nothing in rustls makes the intersection empty.
        assert!(parse_cipher_list("ECDHE+SHA256").is_err());
    }

    #[test]
    fn iana_names_are_accepted() {
        assert_eq!(
            suites("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            vec![EcdheRsaAes128GcmSha256]
        );
        for suite in Tls12Suite::ALL {
            assert_eq!(suites(suite.iana_name()), vec![suite]);
            assert_eq!(suites(suite.openssl_name()), vec![suite]);
            assert_eq!(suite.to_string(), suite.openssl_name());
        }
    }

    #[test]
    fn operators_remove_kill_and_move() {
        // `-` removes, a later element adds again; `!` removes for good.
        assert_eq!(
            suites("ALL:-AES256:AES256").last(),
            Some(&EcdheRsaAes256GcmSha384)
        );
        assert_eq!(suites("ALL:!AES256:AES256").len(), 4);
        assert!(!suites("ALL:!AES256:AES256").contains(&EcdheEcdsaAes256GcmSha384));
        // `+` moves present ones to the end, keeping their order.
        assert_eq!(
            suites("ALL:+aRSA"),
            vec![
                EcdheEcdsaAes256GcmSha384,
                EcdheEcdsaChacha20Poly1305,
                EcdheEcdsaAes128GcmSha256,
                EcdheRsaAes256GcmSha384,
                EcdheRsaChacha20Poly1305,
                EcdheRsaAes128GcmSha256,
            ]
        );
        // `+` never adds.
        assert_eq!(suites("AES128:+CHACHA20").len(), 2);
        // Adding what is present leaves its place.
        assert_eq!(
            suites("ECDHE-RSA-AES128-GCM-SHA256:ALL")[0],
            EcdheRsaAes128GcmSha256
        );
    }

    #[test]
    fn strength_sorts_stably_and_seclevel_is_accepted() {
        assert_eq!(
            suites("AES128:CHACHA20:@STRENGTH"),
            vec![
                EcdheEcdsaChacha20Poly1305,
                EcdheRsaChacha20Poly1305,
                EcdheEcdsaAes128GcmSha256,
                EcdheRsaAes128GcmSha256,
            ]
        );
        let list = parse_cipher_list("HIGH:@SECLEVEL=2").unwrap();
        assert!(list.ignored.is_empty());
        let list = parse_cipher_list("HIGH:@SECLEVEL=9:@FOO").unwrap();
        assert_eq!(list.ignored.len(), 2);
    }

    #[test]
    fn separators_and_empty_elements() {
        assert_eq!(suites("AES128, CHACHA20"), suites("AES128:CHACHA20"));
        assert_eq!(suites("::AES128::"), suites("AES128"));
        assert_eq!(suites("AES128 CHACHA20"), suites("AES128:CHACHA20"));
    }

    #[test]
    fn unknown_and_unavailable_elements_are_reported_and_skipped() {
        let list = parse_cipher_list("AES128-SHA:RC4:BOGUS:!:ECDHE-RSA-AES128-GCM-SHA256").unwrap();
        assert_eq!(list.suites, vec![EcdheRsaAes128GcmSha256]);
        let whys: Vec<(&str, &str)> = list
            .ignored
            .iter()
            .map(|i| (i.element.as_str(), i.why))
            .collect();
        assert_eq!(
            whys,
            [
                ("AES128-SHA", "no cipher suite or keyword sluice knows"),
                ("RC4", "selects no cipher suite rustls offers"),
                ("BOGUS", "no cipher suite or keyword sluice knows"),
                ("!", "an operator without a cipher or keyword"),
            ]
        );
        assert_eq!(
            list.ignored[1].to_string(),
            "\"RC4\" (selects no cipher suite rustls offers)"
        );
        // Names are case-sensitive, as in OpenSSL.
        assert!(parse_cipher_list("high").is_err());
    }

    #[test]
    fn a_list_selecting_nothing_is_an_error() {
        for value in [
            "",
            "   ",
            "RC4:3DES",
            "DHE-RSA-AES128-GCM-SHA256",
            "!ALL:HIGH",
            "ALL:-ALL",
            "TLS_AES_128_GCM_SHA256",
        ] {
            let error = parse_cipher_list(value).unwrap_err();
            assert!(error.contains("selects no TLS 1.2 cipher suite"), "{error}");
            assert!(error.contains("ECDHE-RSA-AES128-GCM-SHA256"), "{error}");
        }
    }

    #[test]
    fn iana_codes_are_the_registry_values() {
        let codes: Vec<u16> = Tls12Suite::ALL.iter().map(|s| s.iana_code()).collect();
        assert_eq!(codes, [0xC02C, 0xC030, 0xCCA9, 0xCCA8, 0xC02B, 0xC02F]);
    }

    #[test]
    fn protocols_like_nginx_ssl_protocols() {
        let both = parse_protocol_list("TLSv1.2 TLSv1.3").unwrap();
        assert!(both.tls12 && both.tls13 && both.unavailable.is_empty());
        let old = parse_protocol_list("TLSv1 TLSv1.1 TLSv1.2 tlsv1").unwrap();
        assert!(old.tls12 && !old.tls13);
        assert_eq!(old.unavailable, ["TLSv1", "TLSv1.1"]);
        assert!(parse_protocol_list(" tlsv1.3 ").unwrap().tls13);
        let error = parse_protocol_list("SSLv2 SSLv3 TLSv1").unwrap_err();
        assert!(error.contains("lists only SSLv2 SSLv3 TLSv1"), "{error}");
        assert!(
            parse_protocol_list("")
                .unwrap_err()
                .contains("lists no protocol")
        );
        assert!(
            parse_protocol_list("TLSv1.2 TLSv2")
                .unwrap_err()
                .contains("\"TLSv2\" is not a protocol")
        );
        assert!(parse_protocol_list("TLSv1.2,TLSv1.3").is_err());
    }

    const WORDS: &[&str] = &[
        "ALL",
        "HIGH",
        "aRSA",
        "ECDSA",
        "AES128",
        "AES256",
        "CHACHA20",
        "AESGCM",
        "RC4",
        "aNULL",
        "BOGUS",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ];

    fn element() -> impl Strategy<Value = (usize, Vec<usize>)> {
        (0..4usize, prop::collection::vec(0..WORDS.len(), 1..3))
    }

    proptest! {
        /// Any list: no suite twice, nothing removed for good comes back, every suite is
        /// selected by some adding element, and Ok exactly when something is selected.
        #[test]
        fn cipher_lists_are_sound(elements in prop::collection::vec(element(), 0..8),
                                  strength in any::<bool>()) {
            let mut parts: Vec<String> = elements
                .iter()
                .map(|(op, words)| {
                    let op = ["", "!", "-", "+"][*op];
                    let body: Vec<&str> = words.iter().map(|w| WORDS[*w]).collect();
                    format!("{op}{}", body.join("+"))
                })
                .collect();
            if strength {
                parts.push("@STRENGTH".to_owned());
            }
            let value = parts.join(":");
            let mask = |body: &str| {
                body.split('+').try_fold(EVERY, |m, w| selector(w).map(|s| m & s))
            };
            let mut killed = NOTHING;
            let mut added = NOTHING;
            for part in &parts {
                if let Some(body) = part.strip_prefix('!') {
                    killed |= mask(body).unwrap_or(NOTHING);
                } else if !part.starts_with(['-', '+', '@']) {
                    added |= mask(part).unwrap_or(NOTHING);
                }
            }
            match parse_cipher_list(&value) {
                Ok(list) => {
                    prop_assert!(!list.suites.is_empty());
                    for (i, suite) in list.suites.iter().enumerate() {
                        prop_assert!(!list.suites[i + 1..].contains(suite), "{value}");
                        prop_assert!(killed & bit(*suite) == 0, "{value}");
                        prop_assert!(added & bit(*suite) != 0, "{value}");
                    }
                    if strength {
                        let bits: Vec<u16> =
                            list.suites.iter().map(|s| s.strength_bits()).collect();
                        prop_assert!(bits.windows(2).all(|w| w[0] >= w[1]), "{value}");
                    }
                }
                Err(error) => {
                    prop_assert!(error.contains("selects no TLS 1.2 cipher suite"));
                    prop_assert!(added & !killed == NOTHING || parts.iter().any(|p| p.starts_with('-')),
                                 "{value}");
                }
            }
        }

        /// Any set of protocol names: Ok exactly when TLSv1.2 or TLSv1.3 is among them, and
        /// the flags say which.
        #[test]
        fn protocol_lists_are_sound(names in prop::collection::vec(
            prop::sample::select(vec!["SSLv2", "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"]),
            0..6)) {
            let value = names.join(" ");
            let has = |n: &str| names.contains(&n);
            match parse_protocol_list(&value) {
                Ok(list) => {
                    prop_assert_eq!(list.tls12, has("TLSv1.2"));
                    prop_assert_eq!(list.tls13, has("TLSv1.3"));
                    for old in ["SSLv2", "SSLv3", "TLSv1", "TLSv1.1"] {
                        prop_assert_eq!(list.unavailable.iter().any(|u| u == old), has(old));
                    }
                }
                Err(_) => prop_assert!(!has("TLSv1.2") && !has("TLSv1.3")),
            }
        }
    }
}
