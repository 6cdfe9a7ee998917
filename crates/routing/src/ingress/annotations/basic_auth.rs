//! Basic and digest authentication from a Secret (ingress-nginx docs, "Authentication";
//! its `internal/ingress/annotations/auth`): `auth-type: basic|digest`,
//! `auth-secret: [namespace/]name`, `auth-secret-type: auth-file|auth-map`, `auth-realm`.
//!
//! The values are read here; the compiler finds the Secret. Anything that keeps the check
//! from being what the Ingress asks (an invalid value, no Secret, a
//! Secret in another namespace, or one without users) closes the routes (503): ingress-nginx
//! denies such a location too, and never serves it open.

use super::*;

/// How the Secret holds its users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretType {
    /// `auth-file` (default): the key `auth` holds an htpasswd file.
    File,
    /// `auth-map`: each key is a user, its value the password hash.
    Map,
}

/// `auth-type`: nginx's `auth_basic` or the digest module's `auth_digest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthType {
    /// `basic`: htpasswd users.
    Basic,
    /// `digest`: htdigest users (`user:realm:HA1`) of `auth-realm`.
    Digest,
}

/// What the annotations ask for; the compiler resolves the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BasicAuthSpec {
    /// Basic or digest.
    pub auth_type: AuthType,
    /// The Secret's namespace when written as `namespace/name`.
    pub namespace: Option<String>,
    /// The Secret's name.
    pub name: String,
    pub secret_type: SecretType,
    /// `auth-realm` (default empty, as nginx's `auth_basic ""`).
    pub realm: String,
    /// The full key of `auth-secret`, for diagnostics about the Secret.
    pub key: String,
}

/// The `WWW-Authenticate` challenge for `realm` (nginx `ngx_http_auth_basic_set_realm`).
pub(crate) fn challenge(realm: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("Basic realm=\"{realm}\"")).ok()
}

/// `auth-realm`: printable text without `"` or `\` (ingress-nginx allows letters, digits,
/// spaces and some punctuation).
fn parse_realm(value: &str) -> Result<String, String> {
    let ok = value
        .chars()
        .all(|c| (c == ' ' || c.is_ascii_graphic()) && c != '"' && c != '\\');
    if ok {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "value {} is not a realm (printable ASCII without '\"' or '\\')",
            shown(value)
        ))
    }
}

/// `auth-secret`: `name` or `namespace/name`, DNS names.
pub(super) fn parse_secret_name(value: &str) -> Result<(Option<String>, String), String> {
    let value = value.trim();
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    match value.split_once('/') {
        None if dns(value) => Ok((None, value.to_owned())),
        Some((ns, name)) if dns(ns) && dns(name) => Ok((Some(ns.to_owned()), name.to_owned())),
        _ => Err(format!(
            "value {} is not a Secret name or namespace/name",
            shown(value)
        )),
    }
}

/// The basic-auth annotations. `None` when none is set, or after closing the routes.
pub(super) fn basic_auth(cx: &mut Cx<'_>) -> Option<BasicAuthSpec> {
    let auth_type = cx.take("auth-type");
    let mut secret = cx.take("auth-secret");
    let secret_type = cx.take("auth-secret-type");
    let realm = cx.take("auth-realm");
    if auth_type.is_none() && secret.is_none() {
        for entry in [secret_type, realm].into_iter().flatten() {
            cx.invalid(
                entry,
                "has no effect without auth-type and auth-secret (basic authentication)",
            );
        }
        return None;
    }
    let mut problems: Vec<(Entry<'_>, String)> = Vec::new();
    let mut kind = match auth_type {
        None => {
            // ingress-nginx ignores auth-secret without auth-type and serves the route
            // open; an Ingress that names a password Secret means to restrict it.
            if let Some(entry) = secret.take() {
                problems.push((
                    entry,
                    "auth-secret without auth-type: basic (ingress-nginx would serve the \
                     routes without authentication)"
                        .to_owned(),
                ));
            }
            None
        }
        Some(entry) => match entry.value.trim() {
            "basic" => Some((entry, AuthType::Basic)),
            "digest" => Some((entry, AuthType::Digest)),
            other => {
                problems.push((
                    entry,
                    format!("value {} is not basic or digest", shown(other)),
                ));
                None
            }
        },
    };
    let name = match secret {
        None if auth_type.is_none() => None,
        None => {
            if let Some((entry, _)) = kind.take() {
                let why = format!("auth-type: {} without auth-secret", entry.value.trim());
                problems.push((entry, why));
            }
            None
        }
        Some(entry) => match parse_secret_name(entry.value) {
            Ok(name) => Some((entry, name)),
            Err(why) => {
                problems.push((entry, why));
                None
            }
        },
    };
    let secret_type = match secret_type {
        None => Some(SecretType::File),
        Some(entry) => match entry.value.trim() {
            "auth-file" => {
                cx.applied(entry);
                Some(SecretType::File)
            }
            "auth-map" => {
                cx.applied(entry);
                Some(SecretType::Map)
            }
            other => {
                let why = format!("value {} is not auth-file or auth-map", shown(other));
                problems.push((entry, why));
                None
            }
        },
    };
    let realm = match realm {
        None => Some(String::new()),
        Some(entry) => match parse_realm(entry.value) {
            Ok(realm) => {
                cx.applied(entry);
                Some(realm)
            }
            Err(why) => {
                problems.push((entry, why));
                None
            }
        },
    };
    if !problems.is_empty() {
        for (entry, why) in problems {
            cx.fail_closed(entry, why);
        }
        // The others of the family are applied as far as they go; the routes are closed.
        if let Some((entry, _)) = kind {
            cx.applied(entry);
        }
        if let Some((entry, _)) = name {
            cx.applied(entry);
        }
        return None;
    }
    let ((kind, auth_type), (secret_entry, (namespace, name)), secret_type, realm) =
        (kind?, name?, secret_type?, realm?);
    cx.applied(kind);
    cx.applied(secret_entry);
    Some(BasicAuthSpec {
        auth_type,
        namespace,
        name,
        secret_type,
        realm,
        key: secret_entry.key.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(annotations: &[(&str, &str)]) -> (Parsed, Vec<String>) {
        let map: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (format!("{NGINX_PREFIX}{k}"), (*v).to_owned()))
            .collect();
        let parsed = parse(&map);
        let closed = parsed
            .problems
            .iter()
            .filter(|p| p.reason == Reason::FailedClosed)
            .map(|p| p.annotation.trim_start_matches(NGINX_PREFIX).to_owned())
            .collect();
        (parsed, closed)
    }

    /// ingress-nginx docs, "Authentication": the four keys and their defaults.
    #[test]
    fn basic_auth_annotations_with_ingress_nginx_defaults() {
        let (parsed, closed) = spec(&[("auth-type", "basic"), ("auth-secret", "basic-auth")]);
        assert!(closed.is_empty(), "{closed:?}");
        assert!(!parsed.policy.fail_closed);
        let want = BasicAuthSpec {
            auth_type: AuthType::Basic,
            namespace: None,
            name: "basic-auth".into(),
            secret_type: SecretType::File,
            realm: String::new(),
            key: format!("{NGINX_PREFIX}auth-secret"),
        };
        assert_eq!(parsed.basic_auth, Some(want));
        let (parsed, closed) = spec(&[
            ("auth-type", "basic"),
            ("auth-secret", "other/users"),
            ("auth-secret-type", "auth-map"),
            ("auth-realm", "Authentication Required - foo"),
        ]);
        assert!(closed.is_empty(), "{closed:?}");
        let got = parsed.basic_auth.unwrap();
        assert_eq!(got.namespace.as_deref(), Some("other"));
        assert_eq!(got.secret_type, SecretType::Map);
        assert_eq!(got.realm, "Authentication Required - foo");
        assert_eq!(got.auth_type, AuthType::Basic);
        assert_eq!(
            challenge(&got.realm).unwrap(),
            "Basic realm=\"Authentication Required - foo\""
        );
        // `auth-type: digest` (the nginx-http-auth-digest module): the same keys.
        let (parsed, closed) = spec(&[
            ("auth-type", "digest"),
            ("auth-secret", "digest-users"),
            ("auth-realm", "Digest Area"),
        ]);
        assert!(closed.is_empty(), "{closed:?}");
        let got = parsed.basic_auth.unwrap();
        assert_eq!(got.auth_type, AuthType::Digest);
        assert_eq!(
            (got.name.as_str(), got.realm.as_str()),
            ("digest-users", "Digest Area")
        );
    }

    /// Every value that keeps the check from being what was asked closes the routes.
    #[test]
    fn what_cannot_be_honoured_fails_closed() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
        let cases: &[Case] = &[
            (&[("auth-type", "digest")], &["auth-type"]),
            (
                &[("auth-type", "basics"), ("auth-secret", "s")],
                &["auth-type"],
            ),
            (&[("auth-secret", "s")], &["auth-secret"]),
            (&[("auth-type", "basic")], &["auth-type"]),
            (
                &[("auth-type", "basic"), ("auth-secret", "a/b/c")],
                &["auth-secret"],
            ),
            (
                &[("auth-type", "basic"), ("auth-secret", "S")],
                &["auth-secret"],
            ),
            (
                &[
                    ("auth-type", "basic"),
                    ("auth-secret", "s"),
                    ("auth-secret-type", "file"),
                ],
                &["auth-secret-type"],
            ),
            (
                &[
                    ("auth-type", "basic"),
                    ("auth-secret", "s"),
                    ("auth-realm", "a\"b"),
                ],
                &["auth-realm"],
            ),
        ];
        for (annotations, want) in cases {
            let (parsed, closed) = spec(annotations);
            assert_eq!(&closed, want, "{annotations:?}");
            assert!(parsed.policy.fail_closed, "{annotations:?}");
            assert_eq!(parsed.basic_auth, None, "{annotations:?}");
        }
        // The companions alone restrict nothing: an Event, not closed.
        let (parsed, closed) = spec(&[("auth-realm", "x")]);
        assert!(closed.is_empty() && !parsed.policy.fail_closed);
        assert_eq!(parsed.problems[0].reason, Reason::InvalidAnnotation);
    }
}
