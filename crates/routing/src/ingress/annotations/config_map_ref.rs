//! Annotations whose value names a ConfigMap (`[namespace/]name`): `auth-proxy-set-headers`
//! and `custom-headers`. The value is read here; the compiler finds the ConfigMap.

use super::*;

/// A ConfigMap an annotation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigMapRef {
    /// Its namespace when written as `namespace/name`.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The annotation's full key, for diagnostics about the ConfigMap.
    pub key: String,
}

/// `[namespace/]name` of a ConfigMap (DNS names), as ingress-nginx's
/// `cache.SplitMetaNamespaceKey` reads it.
pub(crate) fn parse_config_map_name(value: &str) -> Result<(Option<String>, String), String> {
    basic_auth::parse_secret_name(value).map_err(|_| {
        format!(
            "value {} is not a ConfigMap name or namespace/name",
            shown(value.trim())
        )
    })
}

/// `auth-proxy-set-headers` (ingress-nginx docs, "External Authentication"): the ConfigMap
/// whose data are headers sent to the `auth-url` service. A value that does not parse
/// closes the routes, as ingress-nginx denies the location.
pub(super) fn auth_proxy_set_headers(cx: &mut Cx<'_>, has_url: bool) -> Option<ConfigMapRef> {
    let entry = cx.take("auth-proxy-set-headers")?;
    if !has_url {
        cx.invalid(entry, "has no effect without a valid auth-url");
        return None;
    }
    match parse_config_map_name(entry.value) {
        Ok((namespace, name)) => {
            cx.applied(entry);
            Some(ConfigMapRef {
                namespace,
                name,
                key: entry.key.to_owned(),
            })
        }
        Err(why) => {
            cx.fail_closed(entry, why);
            None
        }
    }
}

/// `custom-headers` (ingress-nginx docs, "Custom Headers"): the ConfigMap whose data are
/// response headers (`more_set_headers`). A value that is not a ConfigMap name gets an
/// Event and no headers.
pub(super) fn custom_headers(cx: &mut Cx<'_>) -> Option<ConfigMapRef> {
    let entry = cx.take("custom-headers")?;
    match parse_config_map_name(entry.value) {
        Ok((namespace, name)) => {
            cx.applied(entry);
            Some(ConfigMapRef {
                namespace,
                name,
                key: entry.key.to_owned(),
            })
        }
        Err(why) => {
            cx.invalid(entry, why);
            None
        }
    }
}

/// What a `custom-headers` ConfigMap sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CustomHeaders {
    /// The response headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Names whose value holds an nginx variable: not set.
    pub with_variables: Vec<String>,
}

/// The response headers of a `custom-headers` ConfigMap, as ingress-nginx's
/// `customheaders` parser checks them: each name `^[a-zA-Z\d\-_]+$` and listed (exactly)
/// in the ConfigMap key `global-allowed-response-headers`, each value of its allowed
/// characters; the error denies the location. A value with an nginx variable is left
/// out (sluice never expands one), named in the second list.
pub(crate) fn custom_headers_of(
    data: &BTreeMap<String, String>,
    allowed: &[String],
) -> Result<CustomHeaders, String> {
    let mut out = Vec::with_capacity(data.len());
    let mut variables = Vec::new();
    for (name, value) in data {
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid_name {
            return Err(format!("key {name:?} is not a header name"));
        }
        const VALUE_PUNCTUATION: &[u8] = b"_ :;.,\\/\"'?!(){}[]@<>=-+*#$&`|~^%";
        let valid_value = !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || VALUE_PUNCTUATION.contains(&b));
        if !valid_value {
            return Err(format!(
                "header {name}: value {} has characters ingress-nginx refuses",
                shown(value)
            ));
        }
        if !allowed.iter().any(|a| a == name) {
            return Err(format!(
                "header {name} is not allowed: the ingress-nginx ConfigMap's \
                 global-allowed-response-headers lists [{}]",
                allowed.join(", ")
            ));
        }
        if value.contains('$') {
            variables.push(name.clone());
            continue;
        }
        let (Ok(header), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            return Err(format!("header {name} is not a field"));
        };
        out.push((header, value));
    }
    Ok(CustomHeaders {
        headers: out,
        with_variables: variables,
    })
}

/// The headers of an `auth-proxy-set-headers` ConfigMap: each key a header name
/// (ingress-nginx's `ValidHeader`, `^[a-zA-Z\d\-_]+$`), each value nginx text whose
/// variables sluice expands per request if it knows them (those of
/// `global-rate-limit-key`). Any other variable, or a name or value that cannot be a
/// field, is the error: ingress-nginx denies the location for a bad name, and a value
/// sluice cannot compute would change what the auth service is asked.
pub(crate) fn proxy_set_headers(
    data: &BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, Vec<crate::policy::KeyPart>)>, String> {
    let mut out = Vec::with_capacity(data.len());
    for (name, value) in data {
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let header = HeaderName::from_bytes(name.as_bytes())
            .ok()
            .filter(|_| valid)
            .ok_or_else(|| format!("key {name:?} is not a header name"))?;
        let parts = if value.is_empty() {
            Vec::new()
        } else {
            global_rate_limit::parse_key(value).map_err(|why| format!("header {name}: {why}"))?
        };
        for part in &parts {
            if let crate::policy::KeyPart::Text(text) = part
                && HeaderValue::from_str(text).is_err()
            {
                return Err(format!(
                    "header {name}: value {} is not a field value",
                    shown(value)
                ));
            }
            if matches!(part, crate::policy::KeyPart::BinaryClientAddress) {
                return Err(format!(
                    "header {name}: $binary_remote_addr is not text a field can carry"
                ));
            }
        }
        out.push((header, parts));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_names_as_ingress_nginx_splits_them() {
        assert_eq!(
            parse_config_map_name(" default/auth-headers "),
            Ok((Some("default".into()), "auth-headers".into()))
        );
        assert_eq!(parse_config_map_name("h"), Ok((None, "h".into())));
        for bad in ["", "a/b/c", "Upper", "a/"] {
            let why = parse_config_map_name(bad).unwrap_err();
            assert!(why.contains("ConfigMap"), "{why}");
        }
    }

    /// ingress-nginx's `customheaders` parser: names and values of its patterns, each name
    /// in `global-allowed-response-headers` (exactly), else the location is denied.
    #[test]
    fn custom_headers_only_as_global_allowed_response_headers_allow() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let allowed = vec!["X-Frame-Options".to_owned(), "X-Served-For".to_owned()];
        let CustomHeaders {
            headers,
            with_variables: variables,
        } = custom_headers_of(
            &data(&[("X-Frame-Options", "DENY"), ("X-Served-For", "$host")]),
            &allowed,
        )
        .unwrap();
        assert_eq!(headers.len(), 1);
        assert_eq!(headers[0].0.as_str(), "x-frame-options");
        assert_eq!(headers[0].1, "DENY");
        assert_eq!(variables, ["X-Served-For"]);
        for (pairs, why) in [
            (&[("X-Other", "1")][..], "not allowed"),
            (&[("x-frame-options", "DENY")][..], "not allowed"),
            (&[("X-Frame-Options", "a\u{7f}")][..], "characters"),
            (&[("X-Frame-Options", "")][..], "characters"),
            (&[("X Frame", "1")][..], "header name"),
        ] {
            let got = custom_headers_of(&data(pairs), &allowed).unwrap_err();
            assert!(got.contains(why), "{pairs:?}: {got}");
        }
        assert!(custom_headers_of(&data(&[("X-Frame-Options", "DENY")]), &[]).is_err());
    }

    /// ingress-nginx's `ValidHeader` for the keys; values are nginx text, whose variables
    /// sluice expands only when it computes them.
    #[test]
    fn proxy_set_headers_from_config_map_data() {
        use crate::policy::KeyPart;
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let got = proxy_set_headers(&data(&[
            ("X-Tenant", "acme"),
            ("X_Client", "$remote_addr"),
            ("X-Drop", ""),
        ]))
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0.as_str(), "x-drop");
        assert!(got[0].1.is_empty());
        assert_eq!(got[1].1, [KeyPart::Text("acme".into())]);
        assert_eq!(got[2].1, [KeyPart::ClientAddress]);
        for bad in [
            ("X Bad", "v"),
            ("X.Dot", "v"),
            ("X-Var", "$request_id"),
            ("X-Bin", "$binary_remote_addr"),
            ("X-Nl", "a\nb"),
        ] {
            assert!(proxy_set_headers(&data(&[bad])).is_err(), "{bad:?}");
        }
    }
}
