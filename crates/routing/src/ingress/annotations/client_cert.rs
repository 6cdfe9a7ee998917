//! Client certificate authentication (ingress-nginx docs, "Client Certificate
//! Authentication"; its `internal/ingress/annotations/authtls`): `auth-tls-secret`,
//! `auth-tls-verify-client`, `auth-tls-verify-depth`, `auth-tls-error-page`,
//! `auth-tls-pass-certificate-to-upstream`, `auth-tls-match-cn`.
//!
//! The values are read here; the compiler finds the Secret and makes the host's
//! [`crate::ClientCertAuth`]. A value that keeps the check from being what the Ingress asks
//! (a Secret name, depth, error page or CN pattern that does not parse) closes the routes
//! (503): ingress-nginx denies such a location too.

use super::*;
use crate::client_cert::ClientCertMode;

/// What the annotations ask for; the compiler resolves the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCertSpec {
    /// The Secret's namespace when written as `namespace/name`.
    pub namespace: Option<String>,
    /// The Secret's name.
    pub name: String,
    pub mode: ClientCertMode,
    pub depth: u32,
    pub error_page: Option<String>,
    pub pass_certificate: bool,
    pub match_cn: Option<String>,
    /// The full key of `auth-tls-secret`, for diagnostics about the Secret.
    pub key: String,
}

/// `auth-tls-verify-client`: `None` for `off`.
fn parse_mode(value: &str) -> Result<Option<ClientCertMode>, String> {
    match value.trim() {
        "on" => Ok(Some(ClientCertMode::On)),
        "optional" => Ok(Some(ClientCertMode::Optional)),
        "optional_no_ca" => Ok(Some(ClientCertMode::OptionalNoCa)),
        "off" => Ok(None),
        other => Err(format!(
            "value {} is not on, off, optional or optional_no_ca",
            shown(other)
        )),
    }
}

/// `auth-tls-verify-depth`: a positive number (ingress-nginx takes 0 as its default, 1).
fn parse_depth(value: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(0) => Ok(1),
        Ok(depth) if depth <= 100 => Ok(depth),
        _ => Err(format!(
            "value {} is not a depth from 1 to 100",
            shown(value)
        )),
    }
}

/// `auth-tls-error-page`: a URL or path of the shape ingress-nginx accepts
/// (`[[http[s]://]host[:port]][/path...]`); nginx redirects to it.
fn parse_error_page(value: &str) -> Result<String, String> {
    let v = value.trim();
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .unwrap_or(v);
    let ok = !v.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'/'));
    if ok {
        Ok(v.to_owned())
    } else {
        Err(format!("value {} is not a URL or path", shown(value)))
    }
}

/// `auth-tls-match-cn`: `CN=` then a regular expression (ingress-nginx's
/// `CommonNameAnnotationValidator`); the whole value is matched against the subject DN.
fn parse_match_cn(value: &str) -> Result<String, String> {
    let v = value.trim();
    let Some(pattern) = v.strip_prefix("CN=") else {
        return Err(format!("value {} does not start with CN=", shown(value)));
    };
    regex::Regex::new(pattern)
        .map_err(|e| format!("value {} is not a regular expression: {e}", shown(value)))?;
    regex::Regex::new(v).map_err(|e| format!("value {}: {e}", shown(value)))?;
    Ok(v.to_owned())
}

/// Takes and parses `name`; a value that does not parse closes the routes.
fn closing<T>(
    cx: &mut Cx<'_>,
    name: &str,
    closed: &mut bool,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<T> {
    let entry = cx.take(name)?;
    match parse(entry.value) {
        Ok(value) => {
            cx.applied(entry);
            Some(value)
        }
        Err(why) => {
            cx.fail_closed(entry, why);
            *closed = true;
            None
        }
    }
}

/// The client certificate annotations. `None` when `auth-tls-secret` is not set, when
/// `auth-tls-verify-client` is `off`, or after closing the routes.
pub(super) fn client_cert(cx: &mut Cx<'_>) -> Option<ClientCertSpec> {
    let secret = cx.take("auth-tls-secret");
    let others = [
        "auth-tls-verify-client",
        "auth-tls-verify-depth",
        "auth-tls-error-page",
        "auth-tls-pass-certificate-to-upstream",
        "auth-tls-match-cn",
    ];
    let Some(secret) = secret else {
        for name in others {
            if let Some(entry) = cx.take(name) {
                cx.invalid(entry, "has no effect without auth-tls-secret");
            }
        }
        return None;
    };
    let key = secret.key.to_owned();
    let mut closed = false;
    let name = match basic_auth::parse_secret_name(secret.value) {
        Ok(name) => {
            cx.applied(secret);
            Some(name)
        }
        Err(why) => {
            cx.fail_closed(secret, why);
            closed = true;
            None
        }
    };
    // An access restriction: a value that does not parse closes the routes rather than
    // leaving the check weaker than written.
    let mode = closing(cx, "auth-tls-verify-client", &mut closed, parse_mode)
        .unwrap_or(Some(ClientCertMode::On));
    let depth = closing(cx, "auth-tls-verify-depth", &mut closed, parse_depth).unwrap_or(1);
    let error_page = closing(cx, "auth-tls-error-page", &mut closed, parse_error_page);
    let match_cn = closing(cx, "auth-tls-match-cn", &mut closed, parse_match_cn);
    let pass_certificate = cx
        .value("auth-tls-pass-certificate-to-upstream", |v| {
            parse_bool(v).map_err(|e| format!("{e}; no certificate is passed"))
        })
        .unwrap_or(false);
    if closed {
        return None;
    }
    let (namespace, name) = name?;
    Some(ClientCertSpec {
        namespace,
        name,
        mode: mode?,
        depth,
        error_page,
        pass_certificate,
        match_cn,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_ingress_nginx_reads_them() {
        assert_eq!(parse_mode("on"), Ok(Some(ClientCertMode::On)));
        assert_eq!(
            parse_mode(" optional_no_ca "),
            Ok(Some(ClientCertMode::OptionalNoCa))
        );
        assert_eq!(parse_mode("off"), Ok(None));
        assert!(parse_mode("yes").is_err());
        assert_eq!(parse_depth("0"), Ok(1));
        assert_eq!(parse_depth("3"), Ok(3));
        assert!(parse_depth("-1").is_err());
        assert!(parse_depth("x").is_err());
        assert_eq!(
            parse_error_page("https://auth.example.com/cert-error"),
            Ok("https://auth.example.com/cert-error".to_owned())
        );
        assert!(parse_error_page("https://x/$request_uri").is_err());
        assert_eq!(
            parse_match_cn("CN=client-.*"),
            Ok("CN=client-.*".to_owned())
        );
        assert!(parse_match_cn("client").is_err());
        assert!(parse_match_cn("CN=(").is_err());
    }
}
