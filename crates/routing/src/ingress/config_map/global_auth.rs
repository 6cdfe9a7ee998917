//! The ingress-nginx ConfigMap keys of the authentication family that sluice applies:
//! `global-allowed-response-headers` (which names `custom-headers` may set), the global
//! external auth (`global-auth-url` and its companions, ingress-nginx docs "ConfigMaps",
//! `global-auth-*`) and `no-auth-locations`. Kept apart from `keys.rs` and `mod.rs`, which
//! only hook them in.
//!
//! Each companion is checked alone, by the parser of the `auth-*` annotation it stands for,
//! and kept under that annotation's name; [`GlobalAuthKeys::effective`] puts them together
//! once every key is read (the ConfigMap's keys come in any order).

use std::collections::BTreeMap;

use crate::ingress::annotations::{auth, auth_cache, global_rate_limit, parse_bool};
use crate::nginx_config::{GlobalAuth, GlobalAuthKeys, NginxConfig};

/// The ConfigMap's `global-auth-*` companions and the `auth-*` annotation each stands for.
const COMPANIONS: &[(&str, &str)] = &[
    ("global-auth-method", "auth-method"),
    ("global-auth-signin", "auth-signin"),
    (
        "global-auth-signin-redirect-param",
        "auth-signin-redirect-param",
    ),
    ("global-auth-response-headers", "auth-response-headers"),
    ("global-auth-request-redirect", "auth-request-redirect"),
    ("global-auth-always-set-cookie", "auth-always-set-cookie"),
    ("global-auth-cache-key", "auth-cache-key"),
    ("global-auth-cache-duration", "auth-cache-duration"),
];

/// The keys read here.
pub(super) const KEYS: &[&str] = &[
    "global-allowed-response-headers",
    "global-auth-url",
    "global-auth-method",
    "global-auth-signin",
    "global-auth-signin-redirect-param",
    "global-auth-response-headers",
    "global-auth-request-redirect",
    "global-auth-always-set-cookie",
    "global-auth-cache-key",
    "global-auth-cache-duration",
    "no-auth-locations",
];

/// Applies `key` when it is one of [`KEYS`]; `None` otherwise.
pub(super) fn apply(out: &mut NginxConfig, key: &str, value: &str) -> Option<Result<(), String>> {
    let applied = match key {
        "global-allowed-response-headers" => allowed_response_headers(value).map(|names| {
            out.allowed_response_headers = names;
        }),
        "global-auth-url" => match auth::parse_url(value) {
            Ok(url) => {
                out.global_auth.url = Some(url);
                out.global_auth.refused = None;
                Ok(())
            }
            Err(why) => {
                // Kept until an earlier value that parsed is applied again (`mod.rs`):
                // without one the routes it would guard close.
                out.global_auth.refused = Some(why.clone());
                Err(why)
            }
        },
        "no-auth-locations" => no_auth_locations(value).map(|list| {
            out.no_auth_locations = Some(list);
        }),
        _ => {
            let (_, name) = COMPANIONS.iter().find(|(k, _)| *k == key)?;
            companion(name, value).map(|()| {
                out.global_auth
                    .companions
                    .insert(name, value.trim().to_owned());
            })
        }
    };
    Some(applied)
}

/// Checks one companion's value with the parser of annotation `name`.
fn companion(name: &str, value: &str) -> Result<(), String> {
    match name {
        "auth-cache-duration" => auth_cache::parse_durations(value).map(|_| ()),
        "auth-cache-key" => global_rate_limit::parse_key(value.trim()).map(|_| ()),
        // ingress-nginx's `strconv.ParseBool`; it falls back to false, sluice keeps the
        // value in force and says so.
        "auth-always-set-cookie" => parse_bool(value).map(|_| ()),
        _ => {
            let any_url = auth::parse_url("http://auth.invalid/")?;
            let values = BTreeMap::from([(name, value)]);
            let (_, problems) = auth::parse_auth(any_url, &values);
            match problems.into_iter().next() {
                Some((_, why)) => Err(why),
                None => Ok(()),
            }
        }
    }
}

/// `no-auth-locations`: comma-separated path prefixes (ingress-nginx's
/// `isLocationInLocationList` compares each with the start of the rule's path). One that
/// does not start with `/` can never match a path and is refused as a mistake.
fn no_auth_locations(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            if l.starts_with('/') {
                Ok(l.to_owned())
            } else {
                Err(format!("{l:?} is not a path (it must start with /)"))
            }
        })
        .collect()
}

impl GlobalAuthKeys {
    /// The global auth the keys come to, once all of them are read.
    pub(crate) fn effective(&self) -> GlobalAuth {
        let Some(url) = &self.url else {
            return match &self.refused {
                Some(why) => GlobalAuth::Refused(format!("global-auth-url: {why}")),
                None => GlobalAuth::Off,
            };
        };
        let values: BTreeMap<&str, &str> = self
            .companions
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        // Each value parsed alone when it was applied, so no problem comes back here.
        let (mut external, _) = auth::parse_auth(url.clone(), &values);
        if let Some(key) = values.get("auth-cache-key") {
            let duration = values.get("auth-cache-duration").copied().unwrap_or("");
            if let (Ok(key), Ok(valid)) = (
                global_rate_limit::parse_key(key),
                auth_cache::parse_durations(duration),
            ) {
                external.cache = Some(crate::policy::AuthCache {
                    key,
                    valid,
                    location: String::new(),
                });
            }
        }
        GlobalAuth::On(Box::new(external))
    }
}

/// `global-allowed-response-headers`: comma-separated header names (ingress-nginx's
/// `splitAndTrimSpace`; a name outside `^[a-zA-Z\d\-_]+$` is refused, where ingress-nginx
/// drops it with a log line).
fn allowed_response_headers(value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let valid = name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if valid {
                Ok(name.to_owned())
            } else {
                Err(format!("{name:?} is not a header name"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ingress-nginx's `ReadConfig` for `global-allowed-response-headers`.
    #[test]
    fn allowed_response_headers_are_split_and_trimmed() {
        let mut out = NginxConfig::default();
        let applied = apply(&mut out, "global-allowed-response-headers", " X-A ,X_B,, ");
        assert_eq!(applied, Some(Ok(())));
        assert_eq!(out.allowed_response_headers, ["X-A", "X_B"]);
        assert!(allowed_response_headers("X-A, X B").is_err());
        assert_eq!(apply(&mut out, "block-cidrs", "1.2.3.4"), None);
    }

    /// ingress-nginx docs, "ConfigMaps", `global-auth-url` and its companions: read by the
    /// parsers of the `auth-*` annotations, in any order, defaults as ingress-nginx's
    /// (`global-auth-signin-redirect-param` `rd`, `global-auth-cache-duration`
    /// `200 202 401 5m`).
    #[test]
    fn global_auth_keys_come_together_in_any_order() {
        let mut out = NginxConfig::default();
        assert_eq!(out.global_auth.effective(), GlobalAuth::Off);
        for (key, value) in [
            ("global-auth-cache-key", "$host$http_authorization"),
            ("global-auth-method", "post"),
            ("global-auth-response-headers", "X-User, X-Email"),
            ("global-auth-always-set-cookie", "true"),
            ("global-auth-signin", "https://login.example.com/start"),
            ("global-auth-url", "http://auth.infra.svc:8080/verify"),
        ] {
            assert_eq!(apply(&mut out, key, value), Some(Ok(())), "{key}");
        }
        let GlobalAuth::On(auth) = out.global_auth.effective() else {
            panic!("global auth is on");
        };
        assert_eq!(auth.url, "http://auth.infra.svc:8080/verify");
        assert_eq!(auth.method, http::Method::POST);
        assert_eq!(auth.signin_redirect_param, "rd");
        assert_eq!(auth.response_headers.len(), 2);
        assert!(auth.always_set_cookie);
        let cache = auth.cache.expect("cached");
        assert_eq!(
            cache.valid,
            auth_cache::parse_durations("200 202 401 5m").unwrap()
        );
    }

    /// A value that does not parse is refused alone (the caller keeps the earlier one);
    /// a `global-auth-url` refused with nothing earlier closes what it would guard.
    #[test]
    fn refused_global_auth_values() {
        let mut out = NginxConfig::default();
        for (key, value) in [
            ("global-auth-method", "GET POST"),
            ("global-auth-signin", "https://$cookie_idp/login"),
            ("global-auth-signin-redirect-param", "r d"),
            ("global-auth-response-headers", "X User"),
            ("global-auth-always-set-cookie", "maybe"),
            ("global-auth-cache-key", "$request_body"),
            ("global-auth-cache-duration", "200 soon"),
            ("no-auth-locations", "/ok, .well-known"),
        ] {
            assert!(
                matches!(apply(&mut out, key, value), Some(Err(_))),
                "{key}: {value}"
            );
        }
        assert!(out.global_auth.companions.is_empty());
        assert_eq!(out.no_auth_locations, None);
        assert!(matches!(
            apply(&mut out, "global-auth-url", "/verify"),
            Some(Err(_))
        ));
        assert!(matches!(
            out.global_auth.effective(),
            GlobalAuth::Refused(why) if why.contains("global-auth-url")
        ));
        // The earlier value applied again (what `read` does) opens nothing and closes
        // nothing: it is in force.
        assert_eq!(
            apply(&mut out, "global-auth-url", "https://auth.example.com/"),
            Some(Ok(()))
        );
        assert!(matches!(out.global_auth.effective(), GlobalAuth::On(_)));
    }

    /// ingress-nginx docs, "ConfigMaps", `no-auth-locations` (default
    /// `/.well-known/acme-challenge`).
    #[test]
    fn no_auth_locations_default_and_list() {
        let mut out = NginxConfig::default();
        assert_eq!(out.no_auth_locations(), ["/.well-known/acme-challenge"]);
        assert_eq!(
            apply(&mut out, "no-auth-locations", " /health , /.well-known,"),
            Some(Ok(()))
        );
        assert_eq!(out.no_auth_locations(), ["/health", "/.well-known"]);
        assert_eq!(apply(&mut out, "no-auth-locations", ""), Some(Ok(())));
        assert!(out.no_auth_locations().is_empty());
    }
}
