//! Backends: Service ports resolved to ready endpoint addresses.
//!
//! Resolution happens in two steps. [`backend_key`] checks an Ingress backend on its own
//! (a Service name and exactly one of port number / port name). [`ServiceIndex::resolve`] then
//! looks the Service up: the port is found by `port` (number) or `name`, and the endpoints come
//! from the Service's EndpointSlices, or from its core/v1 Endpoints when it has no slice at all.
//! Either way the endpoint port is the one whose name equals the Service port's name (`""` for
//! an unnamed port), which is how Kubernetes links the two.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressBackend;

use crate::diagnostic::Reason;
use crate::protocol::{UpstreamProtocol, UpstreamTls, app_protocol};
use crate::refs::{PortRef, ServiceRef};

/// One Service port traffic can be sent to, shared by every rule naming the same [`ServiceRef`].
#[derive(Debug)]
pub struct Backend {
    /// Dense index into [`crate::RouteTable::backends`]; lets the proxy keep per-backend state
    /// in a `Vec`. Only meaningful within the table it came from.
    pub id: usize,
    /// The Service port this backend stands for.
    pub service: ServiceRef,
    /// Ready endpoints, sorted and deduplicated; empty means the proxy answers 503.
    pub endpoints: Vec<SocketAddr>,
    /// Endpoints that exist but are not ready (not routed to; shown by `sluice explain` and
    /// the dashboard as ready/total).
    pub not_ready: usize,
    /// The protocol the Service port's `appProtocol` names, if sluice knows it; a route's
    /// `backend-protocol` wins over it.
    pub protocol: Option<UpstreamProtocol>,
    /// TLS towards it from a BackendTLSPolicy that targets the port (a route's
    /// `proxy-ssl-*` annotations win over it).
    pub tls: Option<Arc<UpstreamTls>>,
    /// Where its endpoints come from: what an incremental compile re-reads when only
    /// EndpointSlices changed.
    pub kind: BackendKind,
}

/// Where a [`Backend`]'s endpoints come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The Service port's ready endpoints ([`ServiceIndex::resolve`]).
    Endpoints,
    /// `service-upstream`: the ClusterIP ([`ServiceIndex::resolve_cluster_ip`]).
    ClusterIp,
    /// None: a reference that does not resolve.
    Placeholder,
}

/// A Service port resolved: its ready endpoints and its `appProtocol`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub endpoints: Vec<SocketAddr>,
    pub not_ready: usize,
    pub protocol: Option<UpstreamProtocol>,
    pub tls: Option<Arc<UpstreamTls>>,
    /// `endpoints` is the Service's ClusterIP and port ([`ServiceIndex::resolve_cluster_ip`]).
    pub cluster_ip: bool,
}

/// The label EndpointSlices carry to name their Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A problem with a backend: the field (relative to the backend), the reason and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BackendProblem {
    pub field: &'static str,
    pub reason: Reason,
    pub detail: String,
}

impl BackendProblem {
    fn new(field: &'static str, reason: Reason, detail: impl Into<String>) -> Self {
        BackendProblem {
            field,
            reason,
            detail: detail.into(),
        }
    }
}

/// How an Ingress names a Service port, borrowed from the Ingress: the key under which
/// identical references are merged into one backend, without allocating per reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BackendKey<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub port: PortKey<'a>,
}

/// Borrowed form of [`PortRef`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PortKey<'a> {
    Number(i32),
    Name(&'a str),
}

impl BackendKey<'_> {
    pub(crate) fn to_service_ref(self) -> ServiceRef {
        ServiceRef {
            namespace: self.namespace.to_owned(),
            name: self.name.to_owned(),
            port: match self.port {
                PortKey::Number(n) => PortRef::Number(n),
                PortKey::Name(n) => PortRef::Name(n.to_owned()),
            },
        }
    }
}

/// Checks an Ingress backend in isolation and names the Service port it refers to.
pub(crate) fn backend_key<'a>(
    backend: &'a IngressBackend,
    namespace: &'a str,
) -> Result<BackendKey<'a>, BackendProblem> {
    let service = match (&backend.service, &backend.resource) {
        (Some(_), Some(_)) => {
            return Err(BackendProblem::new(
                "",
                Reason::InvalidBackend,
                "service and resource are mutually exclusive",
            ));
        }
        (None, Some(_)) => {
            return Err(BackendProblem::new(
                ".resource",
                Reason::UnsupportedBackend,
                "resource backends are not supported; use a Service",
            ));
        }
        (None, None) => {
            return Err(BackendProblem::new(
                "",
                Reason::InvalidBackend,
                "backend names no service",
            ));
        }
        (Some(service), None) => service,
    };
    if service.name.is_empty() {
        return Err(BackendProblem::new(
            ".service.name",
            Reason::InvalidBackend,
            "service name is empty",
        ));
    }
    let port = service.port.as_ref();
    let number = port.and_then(|p| p.number);
    let name = port
        .and_then(|p| p.name.as_deref())
        .filter(|n| !n.is_empty());
    let port = match (number, name) {
        (Some(n), None) => PortKey::Number(n),
        (None, Some(n)) => PortKey::Name(n),
        (Some(_), Some(_)) => {
            return Err(BackendProblem::new(
                ".service.port",
                Reason::InvalidBackend,
                "port number and port name are mutually exclusive",
            ));
        }
        (None, None) => {
            return Err(BackendProblem::new(
                ".service.port",
                Reason::InvalidBackend,
                "service port has neither number nor name",
            ));
        }
    };
    Ok(BackendKey {
        namespace,
        name: &service.name,
        port,
    })
}

/// Services and their endpoints, indexed by namespace and name.
#[derive(Debug, Default)]
pub(crate) struct ServiceIndex<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    /// EndpointSlices by (namespace, service name), sorted by slice name.
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    endpoints: HashMap<(&'a str, &'a str), &'a Endpoints>,
    /// BackendTLSPolicies by the Service ports they target.
    backend_tls: crate::protocol::UpstreamTlsByPort,
}

fn key<'a>(namespace: &'a Option<String>, name: &'a Option<String>) -> (&'a str, &'a str) {
    (
        namespace.as_deref().unwrap_or(""),
        name.as_deref().unwrap_or(""),
    )
}

impl<'a> ServiceIndex<'a> {
    pub(crate) fn new(
        services: impl IntoIterator<Item = &'a Service>,
        endpoint_slices: impl IntoIterator<Item = &'a EndpointSlice>,
        endpoints: impl IntoIterator<Item = &'a Endpoints>,
    ) -> Self {
        let services = services.into_iter();
        let endpoint_slices = endpoint_slices.into_iter();
        let endpoints = endpoints.into_iter();
        let mut index = ServiceIndex {
            services: HashMap::with_capacity(services.size_hint().1.unwrap_or(0)),
            slices: HashMap::with_capacity(endpoint_slices.size_hint().1.unwrap_or(0)),
            endpoints: HashMap::with_capacity(endpoints.size_hint().1.unwrap_or(0)),
            backend_tls: Default::default(),
        };
        for s in services {
            index
                .services
                .insert(key(&s.metadata.namespace, &s.metadata.name), s);
        }
        for slice in endpoint_slices {
            let service = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL));
            if let Some(service) = service {
                let ns = slice.metadata.namespace.as_deref().unwrap_or("");
                index
                    .slices
                    .entry((ns, service.as_str()))
                    .or_default()
                    .push(slice);
            }
        }
        for list in index.slices.values_mut() {
            list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        }
        for e in endpoints {
            index
                .endpoints
                .insert(key(&e.metadata.namespace, &e.metadata.name), e);
        }
        index
    }

    /// The first port of Service `namespace/name` (what ingress-nginx's `default-backend`
    /// annotation uses), if the Service exists and has one.
    /// `namespace/name` of an existing Service, borrowed as long as the inputs.
    pub(crate) fn service_key(&self, namespace: &str, name: &str) -> Option<(&'a str, &'a str)> {
        let service: &'a Service = self.services.get(&(namespace, name))?;
        Some(key(&service.metadata.namespace, &service.metadata.name))
    }

    pub(crate) fn first_port(&self, namespace: &str, name: &str) -> Option<i32> {
        let service = self.services.get(&(namespace, name))?;
        let ports = service.spec.as_ref()?.ports.as_ref()?;
        ports.first().map(|p| p.port)
    }

    /// Whether `sref` resolves, without reading its endpoints: the same problem
    /// [`ServiceIndex::resolve`] would give (endpoints never make one).
    pub(crate) fn check(&self, sref: &ServiceRef) -> Result<(), BackendProblem> {
        self.port(sref).map(|_| ())
    }

    /// The Service port `sref` names, or why there is none.
    fn port(
        &self,
        sref: &ServiceRef,
    ) -> Result<&k8s_openapi::api::core::v1::ServicePort, BackendProblem> {
        let Some(service) = self
            .services
            .get(&(sref.namespace.as_str(), sref.name.as_str()))
        else {
            return Err(BackendProblem::new(
                ".service.name",
                Reason::ServiceNotFound,
                format!("Service {}/{} not found", sref.namespace, sref.name),
            ));
        };
        let spec = service.spec.as_ref();
        if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            return Err(BackendProblem::new(
                ".service.name",
                Reason::UnsupportedBackend,
                format!(
                    "Service {}/{} is of type ExternalName, which is not supported",
                    sref.namespace, sref.name
                ),
            ));
        }
        let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
        let port = match &sref.port {
            PortRef::Number(n) => ports.iter().find(|p| p.port == *n),
            PortRef::Name(n) => ports.iter().find(|p| p.name.as_deref() == Some(n.as_str())),
        };
        let Some(port) = port else {
            let (field, what) = match &sref.port {
                PortRef::Number(n) => (".service.port.number", format!("port {n}")),
                PortRef::Name(n) => (".service.port.name", format!("port named {n:?}")),
            };
            return Err(BackendProblem::new(
                field,
                Reason::PortNotFound,
                format!("Service {}/{} has no {what}", sref.namespace, sref.name),
            ));
        };
        Ok(port)
    }

    /// Resolves a Service port to its ready endpoints.
    ///
    /// `Err` with [`Reason::UnsupportedBackend`] means the rule must be skipped (ExternalName);
    /// [`Reason::ServiceNotFound`] and [`Reason::PortNotFound`] mean it is routed to a backend
    /// without endpoints (503).
    pub(crate) fn resolve(&self, sref: &ServiceRef) -> Result<Resolved, BackendProblem> {
        let port = self.port(sref)?;
        let port_name = port.name.as_deref().unwrap_or("");
        let (endpoints, not_ready) = self.endpoints(&sref.namespace, &sref.name, port_name);
        let protocol = port.app_protocol.as_deref().and_then(app_protocol);
        let tls = (self.backend_tls)
            .for_port(&sref.namespace, &sref.name, port_name)
            .cloned();
        // A BackendTLSPolicy makes the connection TLS, whatever appProtocol says.
        let protocol = match (&tls, protocol) {
            (None, protocol) => protocol,
            (Some(_), Some(UpstreamProtocol::H2c | UpstreamProtocol::Grpc)) => {
                Some(UpstreamProtocol::Grpcs)
            }
            (Some(_), Some(UpstreamProtocol::Grpcs)) => Some(UpstreamProtocol::Grpcs),
            (Some(_), _) => Some(UpstreamProtocol::Https),
        };
        Ok(Resolved {
            endpoints,
            not_ready,
            protocol,
            tls,
            cluster_ip: false,
        })
    }

    /// ingress-nginx's `service-upstream`: the Service's ClusterIP and the Service port (not
    /// the target port) as the only endpoint, so kube-proxy balances. A Service without a
    /// ClusterIP (headless, `None`) keeps its endpoints, as ingress-nginx does
    /// (`getServiceClusterEndpoint` fails and it falls back); ExternalName Services stay
    /// unsupported, as by [`Self::resolve`].
    pub(crate) fn resolve_cluster_ip(&self, sref: &ServiceRef) -> Result<Resolved, BackendProblem> {
        let mut resolved = self.resolve(sref)?;
        let service = self
            .services
            .get(&(sref.namespace.as_str(), sref.name.as_str()));
        let spec = service.and_then(|s| s.spec.as_ref());
        let cluster_ip = spec
            .and_then(|s| s.cluster_ip.as_deref())
            .and_then(|ip| ip.parse::<IpAddr>().ok());
        let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
        let port = match &sref.port {
            PortRef::Number(n) => ports.iter().find(|p| p.port == *n),
            PortRef::Name(n) => ports.iter().find(|p| p.name.as_deref() == Some(n.as_str())),
        };
        if let (Some(ip), Some(port)) = (cluster_ip, port.and_then(|p| valid_port(p.port))) {
            resolved.endpoints = vec![SocketAddr::new(ip, port)];
            resolved.not_ready = 0;
            resolved.cluster_ip = true;
        }
        Ok(resolved)
    }

    /// Sets the BackendTLSPolicy settings that [`Self::resolve`] applies.
    pub(crate) fn set_backend_tls(&mut self, settings: crate::protocol::UpstreamTlsByPort) {
        self.backend_tls = settings;
    }

    /// Ready endpoints of the Service port named `port_name`, sorted and deduplicated, and
    /// how many addresses are listed as not ready.
    fn endpoints(
        &self,
        namespace: &str,
        service: &str,
        port_name: &str,
    ) -> (Vec<SocketAddr>, usize) {
        let mut out = Vec::new();
        let mut not_ready = 0;
        if let Some(slices) = self.slices.get(&(namespace, service)) {
            for slice in slices {
                let port = slice
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                    .and_then(|p| p.port);
                let Some(port) = port.and_then(valid_port) else {
                    continue;
                };
                for endpoint in &slice.endpoints {
                    // Absent `ready` means ready (the API says consumers should assume so).
                    let ready = endpoint.conditions.as_ref().and_then(|c| c.ready);
                    if ready == Some(false) {
                        not_ready += endpoint.addresses.len();
                        continue;
                    }
                    out.extend(socket_addrs(endpoint.addresses.iter(), port));
                }
            }
        } else if let Some(endpoints) = self.endpoints.get(&(namespace, service)) {
            for subset in endpoints.subsets.iter().flatten() {
                let port = subset
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                    .and_then(|p| valid_port(p.port));
                let Some(port) = port else { continue };
                // notReadyAddresses are not routed to, only counted.
                not_ready += subset.not_ready_addresses.as_ref().map_or(0, Vec::len);
                let addresses = subset.addresses.iter().flatten().map(|a| &a.ip);
                out.extend(socket_addrs(addresses, port));
            }
        }
        out.sort_unstable();
        out.dedup();
        (out, not_ready)
    }
}

fn valid_port(port: i32) -> Option<u16> {
    u16::try_from(port).ok().filter(|p| *p != 0)
}

/// Parses IP addresses, skipping anything else (e.g. FQDN-type slice addresses).
fn socket_addrs<'s>(
    addresses: impl Iterator<Item = &'s String> + 's,
    port: u16,
) -> impl Iterator<Item = SocketAddr> + 's {
    addresses.filter_map(move |a| a.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `check` (what Gateway API backend references are vetted with) gives exactly the
    /// problem `resolve` gives, for every reference: endpoints never make one.
    #[test]
    fn check_agrees_with_resolve_on_every_reference() {
        let services: Vec<Service> = vec![
            serde_json::from_value(json!({
                "metadata": {"namespace": "a", "name": "web"},
                "spec": {"ports": [{"name": "http", "port": 80}, {"port": 81}]}
            }))
            .unwrap(),
            serde_json::from_value(json!({
                "metadata": {"namespace": "a", "name": "ext"},
                "spec": {"type": "ExternalName", "externalName": "example.com"}
            }))
            .unwrap(),
            serde_json::from_value(json!({"metadata": {"namespace": "a", "name": "bare"}}))
                .unwrap(),
        ];
        let slices: Vec<EndpointSlice> = vec![
            serde_json::from_value(json!({
                "metadata": {"namespace": "a", "name": "web-1",
                             "labels": {SERVICE_NAME_LABEL: "web"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080}],
                "endpoints": [{"addresses": ["10.0.0.1", "not an address"],
                               "conditions": {"ready": true}}]
            }))
            .unwrap(),
        ];
        let index = ServiceIndex::new(&services, &slices, []);
        for namespace in ["a", "b"] {
            for name in ["web", "ext", "bare", "missing"] {
                let ports = [
                    PortRef::Number(80),
                    PortRef::Number(81),
                    PortRef::Number(82),
                    PortRef::Name("http".into()),
                    PortRef::Name("nope".into()),
                ];
                for port in ports {
                    let sref = ServiceRef {
                        namespace: namespace.into(),
                        name: name.into(),
                        port,
                    };
                    assert_eq!(
                        index.check(&sref),
                        index.resolve(&sref).map(|_| ()),
                        "{sref}"
                    );
                }
            }
        }
        // Not vacuous: one reference resolves, with its endpoint.
        let web = ServiceRef {
            namespace: "a".into(),
            name: "web".into(),
            port: PortRef::Name("http".into()),
        };
        assert_eq!(
            index.resolve(&web).map(|r| r.endpoints),
            Ok(vec!["10.0.0.1:8080".parse().unwrap()])
        );
    }
}
