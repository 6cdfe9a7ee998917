//! External authentication (ingress-nginx's `auth-url` family): every request is first
//! asked about at an HTTP service, as nginx's `auth_request` does.

use super::*;

use crate::policy::ExternalAuth;

use http::{HeaderName, Method, Uri};

/// The `auth-*` keys besides `auth-url` (without prefix).
pub(crate) const AUTH_KEYS: &[&str] = &[
    "auth-method",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-response-headers",
    "auth-request-redirect",
    "auth-always-set-cookie",
];

/// Parses `auth-url`.
pub(crate) fn parse_url(value: &str) -> Result<Uri, String> {
    let v = value.trim();
    let uri: Uri = v.parse().map_err(|_| format!("value {v:?} is not a URL"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() && !v.contains('$') => Ok(uri),
        _ => Err(format!(
            "value {v:?} is not an absolute http:// or https:// URL (nginx variables are not expanded)"
        )),
    }
}

/// Checks an `auth-signin` value: an absolute `http://`/`https://` URL or a path once its
/// variables (only [`crate::policy::SIGNIN_VARIABLES`]) are expanded from a request.
fn check_signin(value: &str) -> Result<(), String> {
    let sample = crate::policy::expand_variables(value, |name| {
        crate::policy::SIGNIN_VARIABLES.contains(&name).then(|| {
            match name {
                "scheme" | "pass_access_scheme" => "https",
                "request_uri" | "escaped_request_uri" => "/path",
                _ => "host.example",
            }
            .to_owned()
        })
    })
    .map_err(|variable| {
        format!(
            "{value:?}: nginx variable {variable} is not expanded here; auth-signin may use \
             {}",
            crate::policy::SIGNIN_VARIABLES
                .map(|v| format!("${v}"))
                .join(", ")
        )
    })?;
    let shaped =
        sample.starts_with("http://") || sample.starts_with("https://") || sample.starts_with('/');
    if shaped && sample.parse::<Uri>().is_ok() {
        Ok(())
    } else {
        Err(format!("{value:?} is not a URL or path"))
    }
}

/// Parses the companions of a valid `auth-url`; per key, a problem for values that do not
/// parse (their defaults apply).
pub(crate) fn parse_auth(
    url: Uri,
    values: &std::collections::BTreeMap<&str, &str>,
) -> (ExternalAuth, Vec<(&'static str, String)>) {
    let mut problems = Vec::new();
    let get = |key: &str| values.get(key).map(|v| v.trim());
    let method = match get("auth-method") {
        None => Method::GET,
        Some(m) => match Method::from_bytes(m.to_ascii_uppercase().as_bytes()) {
            Ok(method) => method,
            Err(_) => {
                problems.push(("auth-method", format!("{m:?} is not a method; GET is used")));
                Method::GET
            }
        },
    };
    let signin = match get("auth-signin") {
        None => None,
        Some(s) => match check_signin(s) {
            Ok(()) => Some(s.to_owned()),
            Err(why) => {
                problems.push(("auth-signin", why));
                None
            }
        },
    };
    let signin_redirect_param = match get("auth-signin-redirect-param") {
        None => "rd".to_owned(),
        Some(p)
            if !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
        {
            p.to_owned()
        }
        Some(p) => {
            problems.push((
                "auth-signin-redirect-param",
                format!("{p:?} is not a parameter name"),
            ));
            "rd".to_owned()
        }
    };
    let mut response_headers = Vec::new();
    if let Some(list) = get("auth-response-headers") {
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(name) => response_headers.push(name),
                Err(_) => problems.push((
                    "auth-response-headers",
                    format!("{name:?} is not a header name"),
                )),
            }
        }
    }
    let request_redirect = get("auth-request-redirect")
        .filter(|r| !r.contains('$') && http::HeaderValue::from_str(r).is_ok())
        .map(str::to_owned);
    if get("auth-request-redirect").is_some() && request_redirect.is_none() {
        problems.push(("auth-request-redirect", "not a plain value".to_owned()));
    }
    // ingress-nginx's `GetBoolAnnotation`: a value that is not a boolean counts as false.
    let always_set_cookie = match get("auth-always-set-cookie").map(parse_bool) {
        None => false,
        Some(Ok(always)) => always,
        Some(Err(why)) => {
            problems.push(("auth-always-set-cookie", format!("{why}; false is used")));
            false
        }
    };
    let auth = ExternalAuth {
        url,
        method,
        signin,
        signin_redirect_param,
        response_headers,
        request_redirect,
        cache: None,
        proxy_set_headers: Vec::new(),
        keepalive: None,
        always_set_cookie,
    };
    (auth, problems)
}

/// `auth-url` and its companions ([`crate::ingress::annotations::auth`]). An `auth-url` that does not parse
/// closes the route: serving it without the check would open it to everyone.
pub(super) fn external_auth(cx: &mut Cx<'_>) -> Option<ExternalAuth> {
    let url = match cx.take("auth-url") {
        None => None,
        Some(entry) => match auth::parse_url(entry.value) {
            Ok(url) => {
                cx.applied(entry);
                Some(url)
            }
            Err(why) => {
                cx.fail_closed(entry, why);
                None
            }
        },
    };
    let entries: Vec<_> = AUTH_KEYS
        .iter()
        .filter_map(|name| cx.take(name).map(|entry| (*name, entry)))
        .collect();
    let cache = super::auth_cache::auth_cache(cx, url.is_some());
    let keepalive = super::auth_keepalive::auth_keepalive(cx, url.is_some());
    let Some(url) = url else {
        for (_, entry) in entries {
            cx.invalid(entry, "has no effect without a valid auth-url");
        }
        return None;
    };
    let values = entries
        .iter()
        .map(|(name, entry)| (*name, entry.value))
        .collect();
    let (settings, problems) = auth::parse_auth(url, &values);
    for (name, entry) in entries {
        match problems.iter().find(|(bad, _)| *bad == name) {
            Some((_, why)) => cx.invalid(entry, why.clone()),
            None => cx.applied(entry),
        }
    }
    Some(ExternalAuth {
        cache,
        keepalive,
        ..settings
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn auth_url_must_be_absolute_http() {
        assert!(parse_url("http://auth.ns.svc:8080/verify").is_ok());
        assert!(parse_url("https://auth.example.com/").is_ok());
        assert!(parse_url("/verify").is_err());
        assert!(parse_url("http://$host/auth").is_err());
        assert!(parse_url("ftp://x/").is_err());
    }

    #[test]
    fn companions_with_ingress_nginx_defaults() {
        let url = parse_url("http://auth/").unwrap();
        let values: BTreeMap<&str, &str> = [
            ("auth-method", "post"),
            ("auth-signin", "https://login.example.com/start"),
            ("auth-response-headers", "X-User, X-Email"),
        ]
        .into_iter()
        .collect();
        let (auth, problems) = parse_auth(url, &values);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(auth.method, Method::POST);
        assert_eq!(auth.signin_redirect_param, "rd");
        assert_eq!(auth.response_headers.len(), 2);
        // The oauth2-proxy forms of ingress-nginx's docs are read; other variables are
        // refused, naming them and what may be used.
        for ok in [
            "https://$host/oauth2/start?rd=$escaped_request_uri",
            "https://auth.example.com/oauth2/start?rd=$scheme://$host$request_uri",
        ] {
            let (auth, problems) = parse_auth(
                parse_url("http://auth/").unwrap(),
                &[("auth-signin", ok)].into_iter().collect(),
            );
            assert!(problems.is_empty(), "{ok}: {problems:?}");
            assert_eq!(auth.signin.as_deref(), Some(ok));
        }
        let (_, problems) = parse_auth(
            parse_url("http://auth/").unwrap(),
            &[("auth-signin", "https://$cookie_idp/login")]
                .into_iter()
                .collect(),
        );
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].1.contains("$cookie_idp is not expanded here")
                && problems[0].1.contains("$host"),
            "{problems:?}"
        );
    }
}
