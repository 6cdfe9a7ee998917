//! Request mirroring (ingress-nginx docs "Mirror"; nginx's `ngx_http_mirror_module`):
//! `mirror-target` names where copies go, `mirror-host` their Host, `mirror-request-body`
//! whether bodies are copied. Lowered into the route IR's mirror (the one Gateway API's
//! `RequestMirror` uses), so the target must be a Service of the cluster.

use super::*;

/// Where `mirror-target` sends copies: a Service port, and the Host of the copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MirrorSpec {
    /// The Service's namespace when the URL names one (`svc.ns...`).
    pub namespace: Option<String>,
    /// The Service.
    pub name: String,
    /// Its port (the URL's, else 80).
    pub port: i32,
    /// The copies' Host: `mirror-host`, else the URL's host (as ingress-nginx sets it).
    pub host: HeaderValue,
    /// `mirror-request-body` (default on): the copies carry the request's body.
    pub request_body: bool,
}

/// `mirror-target`: `http://<service>[.<namespace>[.svc[.cluster.local]]][:port]$request_uri`
/// (a leading `/` before `$request_uri` is allowed).
pub(crate) fn parse_target(value: &str) -> Result<MirrorSpec, String> {
    let value = value.trim();
    let refuse = |why: &str| Err(format!("value {} {why}", shown(value)));
    let Some(rest) = value.strip_prefix("http://") else {
        return refuse(
            "is not an http:// URL of a Service of the cluster (sluice mirrors to Services \
             in plain HTTP: http://<service>.<namespace>[:port]$request_uri)",
        );
    };
    let Some((authority, path)) = rest.split_once(['/', '$']).map(|(a, _)| {
        let at = a.len();
        (a, &rest[at..])
    }) else {
        return refuse("has no $request_uri (sluice sends each copy with the request's URI)");
    };
    if !matches!(path, "$request_uri" | "/$request_uri") {
        return refuse(
            "has a path other than $request_uri (sluice sends each copy with the request's URI)",
        );
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u16>() {
            Ok(port) if port > 0 => (host, i32::from(port)),
            _ => return refuse("has an invalid port"),
        },
        None => (authority, 80),
    };
    let lower = host.to_ascii_lowercase();
    let labels: Vec<&str> = lower
        .trim_end_matches(".cluster.local")
        .trim_end_matches(".svc")
        .split('.')
        .collect();
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let (name, namespace) = match labels[..] {
        [name] if dns(name) => (name, None),
        [name, namespace] if dns(name) && dns(namespace) => (name, Some(namespace.to_owned())),
        _ => {
            return refuse(
                "does not name a Service of the cluster (<service>, <service>.<namespace>, \
                 or <service>.<namespace>.svc[.cluster.local])",
            );
        }
    };
    let Ok(host) = HeaderValue::from_str(authority) else {
        return refuse("has an invalid host");
    };
    Ok(MirrorSpec {
        namespace,
        name: name.to_owned(),
        port,
        host,
        request_body: true,
    })
}

/// The mirror annotations; `None` without a valid `mirror-target`.
pub(super) fn mirror(cx: &mut Cx<'_>) -> Option<MirrorSpec> {
    let target = cx.value("mirror-target", parse_target);
    let host = cx.take("mirror-host");
    let body = cx.take("mirror-request-body");
    let Some(mut target) = target else {
        for entry in [host, body].into_iter().flatten() {
            cx.invalid(entry, "has no effect without a valid mirror-target");
        }
        return None;
    };
    if let Some(entry) = host {
        match HeaderValue::from_str(entry.value.trim()) {
            Ok(value) if !entry.value.trim().is_empty() => {
                target.host = value;
                cx.applied(entry);
            }
            _ => cx.invalid(entry, format!("value {} is not a host", shown(entry.value))),
        }
    }
    target.request_body = true;
    if let Some(entry) = body {
        // ingress-nginx: anything but `off` is `on` (with a warning when it is not `on`).
        match entry.value.trim() {
            "off" => {
                target.request_body = false;
                cx.applied(entry);
            }
            "on" => cx.applied(entry),
            other => cx.invalid(
                entry,
                format!("value {} is not on or off; on is used", shown(other)),
            ),
        }
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ingress-nginx docs, "Mirror": targets that name a Service of the cluster.
    #[test]
    fn mirror_targets_name_services() {
        let ok = [
            ("http://shadow$request_uri", None, "shadow", 80, "shadow"),
            (
                "http://shadow.test:8080/$request_uri",
                Some("test"),
                "shadow",
                8080,
                "shadow.test:8080",
            ),
            (
                "http://Shadow.test.svc.cluster.local$request_uri",
                Some("test"),
                "shadow",
                80,
                "Shadow.test.svc.cluster.local",
            ),
            (
                "http://shadow.test.svc:81$request_uri",
                Some("test"),
                "shadow",
                81,
                "shadow.test.svc:81",
            ),
        ];
        for (value, namespace, name, port, host) in ok {
            let spec = parse_target(value).unwrap();
            assert_eq!(spec.namespace.as_deref(), namespace, "{value}");
            assert_eq!((spec.name.as_str(), spec.port), (name, port), "{value}");
            assert_eq!(spec.host, host, "{value}");
        }
        for bad in [
            "https://test.env.com$request_uri",
            "http://test.env.com$request_uri",
            "http://shadow/fixed/path",
            "http://shadow",
            "http://shadow:0$request_uri",
            "http://sh_adow$request_uri",
            "ftp://shadow$request_uri",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
