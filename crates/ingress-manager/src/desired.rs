//! The pure part of ingress-manager: which Ingress a Service asks for. No I/O, so every case
//! is unit-tested here and the reconciler only compares and writes.

use crate::ownership::owner_reference;
use crate::{HOST_ANNOTATION, HTTP_ANNOTATION, MANAGED_BY_LABEL, MANAGER_NAME};
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use kube::api::ObjectMeta;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Why a Service annotated `ingress/http` cannot get an Ingress. Each becomes a warning Event
/// on the Service; none is retried, since only a change of the Service can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    /// The Service has no port to route to (e.g. a headless Service without ports).
    #[error("the Service has no ports; an Ingress needs a port to route to")]
    NoPorts,
    /// The host (from `ingress/host` or the host template) is not a valid Ingress host.
    #[error("host {host:?} (from {origin}) is not a valid Ingress host: {reason}")]
    InvalidHost {
        /// The host, after trimming and lower-casing.
        host: String,
        /// `annotation ingress/host` or `--host-template`.
        origin: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The Service lacks metadata every stored object has (name, namespace or uid): it did
    /// not come from the API server.
    #[error("the Service has no metadata.{0}")]
    MissingMetadata(&'static str),
}

impl DesiredError {
    /// The Event reason for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            DesiredError::NoPorts => "NoServicePorts",
            DesiredError::InvalidHost { .. } => "InvalidHost",
            DesiredError::MissingMetadata(_) => "InvalidService",
        }
    }
}

/// A host template such as `{name}.{namespace}.example.com`, checked when parsed: only the
/// `{name}` and `{namespace}` placeholders, and it must render to a valid host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTemplate(String);

impl HostTemplate {
    /// Parses and checks a template (the clap value parser of `--host-template`).
    pub fn parse(template: &str) -> Result<HostTemplate, String> {
        let mut rest = template;
        loop {
            match (rest.find('{'), rest.find('}')) {
                (None, None) => break,
                (Some(open), Some(close)) if open < close => {
                    let placeholder = &rest[open + 1..close];
                    if placeholder != "name" && placeholder != "namespace" {
                        return Err(format!(
                            "unknown placeholder {{{placeholder}}} in host template {template:?} (use {{name}} and {{namespace}})"
                        ));
                    }
                    rest = &rest[close + 1..];
                }
                _ => return Err(format!("unbalanced braces in host template {template:?}")),
            }
        }
        let t = HostTemplate(template.to_string());
        // Service names and namespaces are DNS labels, so a template valid for these sample
        // values is valid for every Service.
        let sample = normalize_host(&t.render("svc", "ns"));
        validate_host(&sample)
            .map_err(|reason| format!("host template {template:?} renders {sample:?}: {reason}"))?;
        Ok(t)
    }

    /// The template text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The host for Service `name` in `namespace`.
    pub fn render(&self, name: &str, namespace: &str) -> String {
        self.0
            .replace("{namespace}", namespace)
            .replace("{name}", name)
    }
}

impl Default for HostTemplate {
    fn default() -> Self {
        HostTemplate("{name}.{namespace}.example.com".to_string())
    }
}

/// What the mapping needs from the command line.
#[derive(Debug, Clone, Default)]
pub struct DesiredOptions {
    /// Host when the Service has no `ingress/host` annotation.
    pub host_template: HostTemplate,
    /// `spec.ingressClassName` of every Ingress.
    pub ingress_class: String,
}

/// Whether the Service asks for an Ingress (annotation `ingress/http`, any value).
pub fn wants_ingress(svc: &Service) -> bool {
    svc.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(HTTP_ANNOTATION))
}

/// Hosts compare case-insensitively; the API server only accepts lower case.
fn normalize_host(host: &str) -> String {
    host.trim().to_ascii_lowercase()
}

/// Checks `host` the way the API server validates `spec.rules[].host`: a DNS-1123 subdomain,
/// optionally with a leading `*.` wildcard label, and not an IP address.
pub fn validate_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("empty".into());
    }
    if host.parse::<IpAddr>().is_ok() {
        return Err("an IP address is not allowed".into());
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    if name.len() > 253 {
        return Err("longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("empty DNS label".into());
        }
        if label.len() > 63 {
            return Err(format!("DNS label {label:?} is longer than 63 characters"));
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(format!(
                "DNS label {label:?} may only hold a-z, 0-9 and '-'"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!(
                "DNS label {label:?} must start and end with a letter or digit"
            ));
        }
    }
    Ok(())
}

/// The host a Service's Ingress gets: annotation `ingress/host` when set and not blank, else
/// the template.
pub fn host_for(
    svc: &Service,
    name: &str,
    namespace: &str,
    template: &HostTemplate,
) -> Result<String, DesiredError> {
    let annotated = svc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOST_ANNOTATION))
        .filter(|h| !h.trim().is_empty());
    let (raw, origin) = match annotated {
        Some(h) => (h.clone(), "annotation ingress/host"),
        None => (template.render(name, namespace), "--host-template"),
    };
    let host = normalize_host(&raw);
    validate_host(&host).map_err(|reason| DesiredError::InvalidHost {
        host: host.clone(),
        origin,
        reason,
    })?;
    Ok(host)
}

/// The backend port: the port named `http`, else the first port, by name when it has one
/// (so that a renumbered port keeps working), by number otherwise.
pub fn backend_port(ports: &[ServicePort]) -> Option<ServiceBackendPort> {
    let named = |p: &ServicePort| {
        p.name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    };
    let chosen = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("http"))
        .or_else(|| ports.first())?;
    Some(match named(chosen) {
        Some(name) => ServiceBackendPort {
            name: Some(name),
            number: None,
        },
        None => ServiceBackendPort {
            name: None,
            number: Some(chosen.port),
        },
    })
}

/// Labels every managed Ingress carries.
pub fn desired_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGER_NAME.to_string())])
}

/// The Ingress `svc` asks for: same namespace and name, owned by the Service, one rule for
/// the host, path `/` (Prefix) to the chosen port, our IngressClass. Call it only for a
/// Service that [`wants_ingress`].
pub fn desired_ingress(svc: &Service, options: &DesiredOptions) -> Result<Ingress, DesiredError> {
    let name = svc
        .metadata
        .name
        .as_deref()
        .ok_or(DesiredError::MissingMetadata("name"))?;
    let namespace = svc
        .metadata
        .namespace
        .as_deref()
        .ok_or(DesiredError::MissingMetadata("namespace"))?;
    let owner = owner_reference(svc).ok_or(DesiredError::MissingMetadata("uid"))?;
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let port = backend_port(ports).ok_or(DesiredError::NoPorts)?;
    let host = host_for(svc, name, namespace, &options.host_template)?;
    Ok(Ingress {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(desired_labels()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: Some(options.ingress_class.clone()),
            rules: Some(vec![IngressRule {
                host: Some(host),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".to_string()),
                        path_type: "Prefix".to_string(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: name.to_string(),
                                port: Some(port),
                            }),
                            resource: None,
                        },
                    }],
                }),
            }]),
            ..IngressSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn port(name: Option<&str>, number: i32) -> ServicePort {
        ServicePort {
            name: name.map(str::to_string),
            port: number,
            ..ServicePort::default()
        }
    }

    fn service(annotations: &[(&str, &str)], ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some("uid-1".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                ports: Some(ports),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn options() -> DesiredOptions {
        DesiredOptions {
            host_template: HostTemplate::default(),
            ingress_class: "sluice".into(),
        }
    }

    fn rule(ing: &Ingress) -> &IngressRule {
        let rules = ing
            .spec
            .as_ref()
            .and_then(|s| s.rules.as_ref())
            .expect("rules");
        assert_eq!(rules.len(), 1);
        &rules[0]
    }

    fn only_path(ing: &Ingress) -> &HTTPIngressPath {
        let paths = &rule(ing).http.as_ref().expect("http").paths;
        assert_eq!(paths.len(), 1);
        &paths[0]
    }

    fn backend(ing: &Ingress) -> (&str, ServiceBackendPort) {
        let svc = only_path(ing)
            .backend
            .service
            .as_ref()
            .expect("service backend");
        (svc.name.as_str(), svc.port.clone().expect("port"))
    }

    #[test]
    fn wants_ingress_only_with_the_annotation() {
        assert!(wants_ingress(&service(&[("ingress/http", "")], vec![])));
        assert!(
            wants_ingress(&service(&[("ingress/http", "false")], vec![])),
            "any value counts"
        );
        assert!(!wants_ingress(&service(&[("ingress/host", "a.b")], vec![])));
        assert!(!wants_ingress(&service(&[], vec![])));
        let mut bare = service(&[], vec![]);
        bare.metadata.annotations = None;
        assert!(!wants_ingress(&bare));
    }

    #[test]
    fn full_desired_ingress() {
        let svc = service(
            &[("ingress/http", "true")],
            vec![port(Some("metrics"), 9090), port(Some("http"), 8080)],
        );
        let ing = desired_ingress(&svc, &options()).expect("desired");
        assert_eq!(ing.metadata.name.as_deref(), Some("web"));
        assert_eq!(ing.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(ing.metadata.labels, Some(desired_labels()));
        assert_eq!(
            ing.metadata.owner_references,
            Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: "web".into(),
                uid: "uid-1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }])
        );
        let spec = ing.spec.as_ref().expect("spec");
        assert_eq!(spec.ingress_class_name.as_deref(), Some("sluice"));
        assert_eq!(spec.tls, None);
        assert_eq!(spec.default_backend, None);
        assert_eq!(rule(&ing).host.as_deref(), Some("web.shop.example.com"));
        let path = only_path(&ing);
        assert_eq!(path.path.as_deref(), Some("/"));
        assert_eq!(path.path_type, "Prefix");
        assert_eq!(
            backend(&ing),
            (
                "web",
                ServiceBackendPort {
                    name: Some("http".into()),
                    number: None
                }
            )
        );
        assert_eq!(ing.status, None);
        // What goes on the wire for server-side apply: apiVersion and kind included.
        let json = serde_json::to_value(&ing).expect("serializes");
        assert_eq!(json["apiVersion"], "networking.k8s.io/v1");
        assert_eq!(json["kind"], "Ingress");
    }

    #[test]
    fn ingress_class_comes_from_the_options() {
        let svc = service(&[("ingress/http", "")], vec![port(None, 80)]);
        let o = DesiredOptions {
            ingress_class: "internal".into(),
            ..options()
        };
        let ing = desired_ingress(&svc, &o).expect("desired");
        assert_eq!(
            ing.spec.and_then(|s| s.ingress_class_name).as_deref(),
            Some("internal")
        );
    }

    #[test]
    fn backend_port_choice() {
        let by_name = |n: &str| {
            Some(ServiceBackendPort {
                name: Some(n.into()),
                number: None,
            })
        };
        let by_number = |n: i32| {
            Some(ServiceBackendPort {
                name: None,
                number: Some(n),
            })
        };
        assert_eq!(backend_port(&[]), None);
        assert_eq!(backend_port(&[port(None, 80)]), by_number(80));
        assert_eq!(
            backend_port(&[port(Some(""), 81)]),
            by_number(81),
            "an empty name is no name"
        );
        assert_eq!(
            backend_port(&[port(Some("web"), 80)]),
            by_name("web"),
            "first port, named"
        );
        assert_eq!(
            backend_port(&[port(Some("grpc"), 9000), port(Some("admin"), 9001)]),
            by_name("grpc")
        );
        assert_eq!(
            backend_port(&[port(Some("grpc"), 9000), port(Some("http"), 8080)]),
            by_name("http")
        );
        assert_eq!(
            backend_port(&[port(None, 9000), port(Some("http"), 8080)]),
            by_name("http")
        );
        assert_eq!(
            backend_port(&[port(Some("HTTP"), 9000)]),
            by_name("HTTP"),
            "names are case-sensitive"
        );
        assert_eq!(
            backend_port(&[port(Some("https"), 443), port(None, 80)]),
            by_name("https")
        );
    }

    #[test]
    fn backend_by_number_when_the_first_port_is_unnamed() {
        let svc = service(
            &[("ingress/http", "")],
            vec![port(None, 8443), port(Some("admin"), 9000)],
        );
        let ing = desired_ingress(&svc, &options()).expect("desired");
        assert_eq!(
            backend(&ing),
            (
                "web",
                ServiceBackendPort {
                    name: None,
                    number: Some(8443)
                }
            )
        );
    }

    #[test]
    fn no_ports_is_an_error() {
        assert_eq!(
            desired_ingress(&service(&[("ingress/http", "")], vec![]), &options()),
            Err(DesiredError::NoPorts)
        );
        let mut no_spec = service(&[("ingress/http", "")], vec![]);
        no_spec.spec = None;
        assert_eq!(
            desired_ingress(&no_spec, &options()),
            Err(DesiredError::NoPorts)
        );
        assert_eq!(DesiredError::NoPorts.reason(), "NoServicePorts");
    }

    #[test]
    fn host_from_annotation_wins() {
        let svc = service(
            &[("ingress/http", ""), ("ingress/host", "shop.example.org")],
            vec![port(None, 80)],
        );
        assert_eq!(
            rule(&desired_ingress(&svc, &options()).expect("desired"))
                .host
                .as_deref(),
            Some("shop.example.org")
        );
        let svc = service(
            &[
                ("ingress/http", ""),
                ("ingress/host", "  Shop.Example.ORG "),
            ],
            vec![port(None, 80)],
        );
        assert_eq!(
            rule(&desired_ingress(&svc, &options()).expect("desired"))
                .host
                .as_deref(),
            Some("shop.example.org"),
            "trimmed and lower-cased"
        );
        let svc = service(
            &[("ingress/http", ""), ("ingress/host", "*.apps.example.org")],
            vec![port(None, 80)],
        );
        assert_eq!(
            rule(&desired_ingress(&svc, &options()).expect("desired"))
                .host
                .as_deref(),
            Some("*.apps.example.org")
        );
    }

    #[test]
    fn blank_host_annotation_falls_back_to_the_template() {
        let svc = service(
            &[("ingress/http", ""), ("ingress/host", " ")],
            vec![port(None, 80)],
        );
        assert_eq!(
            rule(&desired_ingress(&svc, &options()).expect("desired"))
                .host
                .as_deref(),
            Some("web.shop.example.com")
        );
    }

    #[test]
    fn host_template_renders_name_and_namespace() {
        let t = HostTemplate::parse("{namespace}--{name}.{name}.apps.test").expect("valid");
        assert_eq!(t.render("web", "shop"), "shop--web.web.apps.test");
        let svc = service(&[("ingress/http", "")], vec![port(None, 80)]);
        let o = DesiredOptions {
            host_template: t,
            ..options()
        };
        assert_eq!(
            rule(&desired_ingress(&svc, &o).expect("desired"))
                .host
                .as_deref(),
            Some("shop--web.web.apps.test")
        );
        assert_eq!(
            HostTemplate::parse("static.example.com")
                .expect("no placeholder is fine")
                .render("a", "b"),
            "static.example.com"
        );
        assert_eq!(
            HostTemplate::default().as_str(),
            "{name}.{namespace}.example.com"
        );
    }

    #[test]
    fn host_template_rejects_unknown_or_broken_placeholders() {
        for bad in [
            "{name}.{cluster}.example.com",
            "{name",
            "name}.example.com",
            "{}.example.com",
            "http://{name}.example.com",
            "{name}..example.com",
            "",
            "{name}_{namespace}.example.com",
        ] {
            assert!(
                HostTemplate::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn invalid_annotated_host_is_an_error() {
        for bad in [
            "foo_bar.example.com",
            "10.0.0.1",
            "-a.example.com",
            "a..b",
            "a.example.com.",
            "ex ample.com",
            "::1",
        ] {
            let svc = service(
                &[("ingress/http", ""), ("ingress/host", bad)],
                vec![port(None, 80)],
            );
            match desired_ingress(&svc, &options()) {
                Err(
                    e @ DesiredError::InvalidHost {
                        origin: "annotation ingress/host",
                        ..
                    },
                ) => {
                    assert_eq!(e.reason(), "InvalidHost");
                }
                other => panic!("{bad:?}: expected InvalidHost, got {other:?}"),
            }
        }
    }

    #[test]
    fn validate_host_cases() {
        assert!(validate_host("a").is_ok());
        assert!(validate_host("a-b.c0.example.com").is_ok());
        assert!(validate_host("*.example.com").is_ok());
        assert!(validate_host(&format!("{}.com", "a".repeat(63))).is_ok());
        assert!(validate_host(&format!("{}.com", "a".repeat(64))).is_err());
        let long = vec!["abcdefghi"; 26].join(".");
        assert!(long.len() > 253 && validate_host(&long).is_err());
        assert!(validate_host("").is_err());
        assert!(validate_host("*").is_err());
        assert!(validate_host("a.*.example.com").is_err());
        assert!(validate_host("UPPER.example.com").is_err());
        assert!(validate_host("a-.example.com").is_err());
        assert!(validate_host("192.168.0.1").is_err());
    }

    #[test]
    fn missing_metadata_is_an_error() {
        let base = service(&[("ingress/http", "")], vec![port(None, 80)]);
        let mut s = base.clone();
        s.metadata.name = None;
        assert_eq!(
            desired_ingress(&s, &options()),
            Err(DesiredError::MissingMetadata("name"))
        );
        let mut s = base.clone();
        s.metadata.namespace = None;
        assert_eq!(
            desired_ingress(&s, &options()),
            Err(DesiredError::MissingMetadata("namespace"))
        );
        let mut s = base;
        s.metadata.uid = None;
        assert_eq!(
            desired_ingress(&s, &options()),
            Err(DesiredError::MissingMetadata("uid"))
        );
    }

    #[test]
    fn desired_does_not_depend_on_unrelated_service_fields() {
        let a = service(&[("ingress/http", "")], vec![port(Some("http"), 80)]);
        let mut b = a.clone();
        b.metadata.resource_version = Some("42".into());
        b.metadata.labels = Some(BTreeMap::from([("x".into(), "y".into())]));
        b.metadata
            .annotations
            .get_or_insert_default()
            .insert("other".into(), "z".into());
        if let Some(spec) = b.spec.as_mut() {
            spec.cluster_ip = Some("10.96.0.10".into());
        }
        assert_eq!(
            desired_ingress(&a, &options()),
            desired_ingress(&b, &options())
        );
    }
}
