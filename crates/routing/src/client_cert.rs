//! Client certificate authentication of a host (ingress-nginx `auth-tls-*`, docs section
//! "Client Certificate Authentication"; nginx `ssl_verify_client`, `ssl_verify_depth`).
//!
//! As in ingress-nginx it belongs to the host (nginx's `server`): the oldest Ingress of a
//! host that sets `auth-tls-secret` decides it for every path of that host. The TLS
//! handshake for that name asks for a certificate (with the CA's names as hints) and never
//! fails on it; each request is then checked against the CA and answered as nginx answers:
//! 400 without a required certificate or with one that does not verify (or a redirect to
//! `auth-tls-error-page`), 403 when the subject does not match `auth-tls-match-cn`.

use std::sync::Arc;

use crate::host::{HostPattern, wildcard_suffix};
use crate::key::{FastMap, Key};
use crate::refs::ObjectRef;
use crate::tls::ClientValidation;

/// `auth-tls-verify-client` (`off` asks for nothing and has no [`ClientCertAuth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertMode {
    /// `on` (the default): a certificate that verifies is required.
    On,
    /// `optional`: none is fine; one shown must verify.
    Optional,
    /// `optional_no_ca`: asked for, never required nor checked; the result goes upstream.
    OptionalNoCa,
}

/// A host's client certificate check.
#[derive(Debug)]
pub struct ClientCertAuth {
    /// What the check requires.
    pub mode: ClientCertMode,
    /// `auth-tls-verify-depth` (default 1): how many certificates the client may send
    /// (its own and intermediates).
    pub depth: u32,
    /// `auth-tls-error-page`: where a failed check redirects (302) instead of 400.
    pub error_page: Option<String>,
    /// `auth-tls-pass-certificate-to-upstream`: the PEM goes upstream in `ssl-client-cert`.
    pub pass_certificate: bool,
    /// `auth-tls-match-cn`: a regular expression the subject DN must match (403 otherwise),
    /// as written (`CN=...`).
    pub match_cn: Option<regex::Regex>,
    /// The CA certificates (`ca.crt` of `auth-tls-secret`), as the handshake asks with them:
    /// any certificate is taken there and checked per request.
    pub handshake: Arc<ClientValidation>,
    /// The Ingress that set it.
    pub source: ObjectRef,
}

impl PartialEq for ClientCertAuth {
    fn eq(&self, other: &Self) -> bool {
        self.mode == other.mode
            && self.depth == other.depth
            && self.error_page == other.error_page
            && self.pass_certificate == other.pass_certificate
            && self.match_cn.as_ref().map(regex::Regex::as_str)
                == other.match_cn.as_ref().map(regex::Regex::as_str)
            && self.handshake == other.handshake
            && self.source == other.source
    }
}

impl Eq for ClientCertAuth {}

/// The hosts with a client certificate check, looked up as Ingress hosts are: exact name,
/// then the one-label wildcard, then the rules without a host.
#[derive(Debug, Default, Clone)]
pub(crate) struct ClientCertHosts {
    exact: FastMap<Key, Arc<ClientCertAuth>>,
    /// `*.suffix`, keyed by `suffix`.
    wildcard: FastMap<Key, Arc<ClientCertAuth>>,
    any: Option<Arc<ClientCertAuth>>,
}

impl ClientCertHosts {
    /// Gives `host` the check `auth` unless it has one (the oldest Ingress decides).
    pub(crate) fn insert(&mut self, host: &HostPattern, auth: &Arc<ClientCertAuth>) {
        let new = || Arc::clone(auth);
        match host {
            HostPattern::Exact(h) => {
                self.exact.entry(Key::new(h)).or_insert_with(new);
            }
            HostPattern::Wildcard(s) => {
                self.wildcard.entry(Key::new(s)).or_insert_with(new);
            }
            HostPattern::Any => {
                self.any.get_or_insert_with(new);
            }
        }
    }

    /// The check of canonical `host`.
    pub(crate) fn get(&self, host: &str) -> Option<&Arc<ClientCertAuth>> {
        self.exact
            .get(host)
            .or_else(|| wildcard_suffix(host).and_then(|s| self.wildcard.get(s)))
            .or(self.any.as_ref())
    }

    /// Every check, each once.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<ClientCertAuth>> {
        let mut seen: Vec<*const ClientCertAuth> = Vec::new();
        self.exact
            .values()
            .chain(self.wildcard.values())
            .chain(self.any.iter())
            .filter(move |a| {
                let p = Arc::as_ptr(a);
                let new = !seen.contains(&p);
                if new {
                    seen.push(p);
                }
                new
            })
    }

    /// Gives `host` the check `from` gives that same pattern (none when `from` has none):
    /// an incremental compile takes the hosts it recompiled from its partial table.
    pub(crate) fn replace(&mut self, host: &HostPattern, from: &ClientCertHosts) {
        match host {
            HostPattern::Exact(h) => match from.exact.get(h.as_str()) {
                Some(auth) => {
                    self.exact.insert(Key::new(h), Arc::clone(auth));
                }
                None => {
                    self.exact.remove(h.as_str());
                }
            },
            HostPattern::Wildcard(s) => match from.wildcard.get(s.as_str()) {
                Some(auth) => {
                    self.wildcard.insert(Key::new(s), Arc::clone(auth));
                }
                None => {
                    self.wildcard.remove(s.as_str());
                }
            },
            HostPattern::Any => self.any.clone_from(&from.any),
        }
    }

    /// No host has a check.
    pub(crate) fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any.is_none()
    }
}
