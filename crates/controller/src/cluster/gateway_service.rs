//! A Service per Gateway (`--gateway-service-type`, Gateway API
//! `GatewayInfrastructurePropagation`): in the Gateway's namespace, selecting the proxy's
//! pods (`--gateway-service-selector`), with a port per listener port, labelled
//! `gateway.networking.k8s.io/gateway-name` and carrying the Gateway's
//! `spec.infrastructure` labels and annotations. Type `LoadBalancer` gives each Gateway an
//! external address of its own from the cloud; `ClusterIP` a stable in-cluster one.
//!
//! The Service is owned by its Gateway (deleted with it by the garbage collector) and
//! applied with server-side apply as field manager `sluice`, so fields others set (a cloud
//! controller's, an administrator's annotation) are kept. A Gateway served on the proxy's
//! shared listeners gets target ports `http`/`https` of the proxy; one with addresses of its
//! own the listener's port (where the proxy binds it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use sluice_routing::gateway::{Gateway, GatewayStatus};

/// The label naming a Service's Gateway (Gateway API's `GatewayNameLabelKey`).
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// The label marking Services sluice made for Gateways.
pub const MANAGED_LABEL: &str = "sluice.dev/gateway-service";

/// `--gateway-service-type`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GatewayServiceType {
    /// No Service per Gateway.
    #[default]
    #[value(name = "None")]
    None,
    /// An in-cluster address per Gateway.
    #[value(name = "ClusterIP")]
    ClusterIp,
    /// A port on every node per Gateway listener port.
    #[value(name = "NodePort")]
    NodePort,
    /// An external address per Gateway from the cloud's load balancer.
    #[value(name = "LoadBalancer")]
    LoadBalancer,
}

impl GatewayServiceType {
    fn as_str(self) -> Option<&'static str> {
        match self {
            GatewayServiceType::None => None,
            GatewayServiceType::ClusterIp => Some("ClusterIP"),
            GatewayServiceType::NodePort => Some("NodePort"),
            GatewayServiceType::LoadBalancer => Some("LoadBalancer"),
        }
    }
}

/// What the Services look like.
#[derive(Clone, Debug)]
pub struct GatewayServices {
    /// `spec.type`.
    pub type_: GatewayServiceType,
    /// `spec.selector`: the proxy's pods.
    pub selector: BTreeMap<String, String>,
    /// The proxy's shared HTTP and HTTPS ports (the target ports of Gateways served there).
    pub shared_ports: (u16, u16),
}

/// The Service's name: `sluice-gateway-<gateway>`, dots turned into dashes, cut with a hash
/// of the whole name when longer than a Service name may be (63).
pub fn service_name(gateway: &str) -> String {
    let name = format!("sluice-gateway-{}", gateway.replace('.', "-"));
    if name.len() <= 63 {
        return name;
    }
    let hash = gateway.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{}-{:08x}", name[..54].trim_end_matches('-'), hash as u32)
}

/// The Service for `gateway` (whose status is `status`). Pure.
pub fn desired(gateway: &Gateway, status: &GatewayStatus, config: &GatewayServices) -> Service {
    let meta = &gateway.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let infrastructure = gateway.spec.infrastructure.as_ref();
    let mut labels = infrastructure.map(|i| i.labels.clone()).unwrap_or_default();
    labels.insert(GATEWAY_NAME_LABEL.to_owned(), name.clone());
    labels.insert(MANAGED_LABEL.to_owned(), "true".to_owned());
    let annotations = infrastructure
        .map(|i| i.annotations.clone())
        .unwrap_or_default();
    let shared = status.addresses.is_none();
    let mut ports: Vec<ServicePort> = Vec::new();
    for listener in &gateway.spec.listeners {
        let protocol = if listener.protocol == "UDP" {
            "UDP"
        } else {
            "TCP"
        };
        if ports
            .iter()
            .any(|p| p.port == listener.port && p.protocol.as_deref() == Some(protocol))
        {
            continue;
        }
        let target = match (shared, listener.protocol.as_str()) {
            (true, "HTTP") => i32::from(config.shared_ports.0),
            (true, "HTTPS") => i32::from(config.shared_ports.1),
            _ => listener.port,
        };
        ports.push(ServicePort {
            name: Some(format!(
                "{}-{}",
                protocol.to_ascii_lowercase(),
                listener.port
            )),
            port: listener.port,
            protocol: Some(protocol.to_owned()),
            target_port: Some(IntOrString::Int(target)),
            ..ServicePort::default()
        });
    }
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&name)),
            namespace: meta.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "gateway.networking.k8s.io/v1".to_owned(),
                kind: "Gateway".to_owned(),
                name,
                uid: meta.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: config.type_.as_str().map(str::to_owned),
            selector: Some(config.selector.clone()),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Applies the Services of the Gateways that are ours and removes those of Gateways that
/// no longer are, writing only what changed since the last round.
pub struct ServiceSync {
    config: GatewayServices,
    /// What was last applied, by namespace/name of the Gateway.
    applied: Mutex<HashMap<String, Service>>,
}

impl ServiceSync {
    /// A sync with these settings (type `None`: it does nothing).
    pub fn new(config: GatewayServices) -> Self {
        ServiceSync {
            config,
            applied: Mutex::new(HashMap::new()),
        }
    }

    /// Brings the Services in line with `gateways` (each with its status); the number of
    /// writes.
    pub async fn sync(
        &self,
        client: &kube::Client,
        gateways: &[(std::sync::Arc<Gateway>, &GatewayStatus)],
    ) -> anyhow::Result<usize> {
        if self.config.type_ == GatewayServiceType::None {
            return Ok(0);
        }
        let mut wanted: HashMap<String, Service> = HashMap::new();
        for (gateway, status) in gateways {
            let meta = &gateway.metadata;
            let key = format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or("")
            );
            wanted.insert(key, desired(gateway, status, &self.config));
        }
        let previous = self
            .applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut written = 0;
        for (key, service) in &wanted {
            if previous.get(key) == Some(service) {
                continue;
            }
            let ns = service.metadata.namespace.as_deref().unwrap_or("");
            let name = service.metadata.name.as_deref().unwrap_or("");
            let api: Api<Service> = Api::namespaced(client.clone(), ns);
            let mut body = serde_json::to_value(service)?;
            body["apiVersion"] = "v1".into();
            body["kind"] = "Service".into();
            api.patch(name, &PatchParams::apply("sluice"), &Patch::Apply(&body))
                .await
                .map_err(|e| anyhow::anyhow!("apply Service {ns}/{name} for Gateway {key}: {e}"))?;
            written += 1;
        }
        for (key, service) in &previous {
            if wanted.contains_key(key) {
                continue;
            }
            let ns = service.metadata.namespace.as_deref().unwrap_or("");
            let name = service.metadata.name.as_deref().unwrap_or("");
            let api: Api<Service> = Api::namespaced(client.clone(), ns);
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => written += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => anyhow::bail!("delete Service {ns}/{name} of Gateway {key}: {e}"),
            }
        }
        *self.applied.lock().unwrap_or_else(|e| e.into_inner()) = wanted;
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_routing::gateway::ObjectStatus;

    fn gateway() -> Gateway {
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "web.gw", "uid": "u-1"},
            "spec": {"gatewayClassName": "sluice",
                     "infrastructure": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
                     "listeners": [
                        {"name": "http", "port": 80, "protocol": "HTTP"},
                        {"name": "http-b", "port": 80, "protocol": "HTTP", "hostname": "b.example"},
                        {"name": "https", "port": 443, "protocol": "HTTPS"},
                        {"name": "dns", "port": 53, "protocol": "UDP"}]}}))
        .expect("gateway")
    }

    fn status(addresses: Option<Vec<std::net::IpAddr>>) -> GatewayStatus {
        GatewayStatus {
            gateway: ObjectStatus {
                object: sluice_routing::ObjectRef {
                    kind: "Gateway",
                    namespace: "ns".into(),
                    name: "web.gw".into(),
                },
                generation: None,
                conditions: Vec::new(),
            },
            listeners: Vec::new(),
            addresses,
            attached_listener_sets: None,
        }
    }

    /// Gateway API GatewayInfrastructurePropagation: the infrastructure labels and
    /// annotations, the gateway-name label, owned by the Gateway.
    #[test]
    fn the_service_carries_the_gateways_infrastructure_metadata() {
        let config = GatewayServices {
            type_: GatewayServiceType::LoadBalancer,
            selector: BTreeMap::from([("app.kubernetes.io/name".into(), "sluice".into())]),
            shared_ports: (8080, 8443),
        };
        let service = desired(&gateway(), &status(None), &config);
        let value = serde_json::to_value(&service).expect("json");
        assert_eq!(value["metadata"]["name"], "sluice-gateway-web-gw");
        assert_eq!(value["metadata"]["labels"]["team"], "a");
        assert_eq!(value["metadata"]["labels"][GATEWAY_NAME_LABEL], "web.gw");
        assert_eq!(value["metadata"]["annotations"]["note"], "x");
        assert_eq!(value["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(value["spec"]["type"], "LoadBalancer");
        // One port per listener port and protocol; shared listeners target the proxy's.
        assert_eq!(
            value["spec"]["ports"],
            json!([
                {"name": "tcp-80", "port": 80, "protocol": "TCP", "targetPort": 8080},
                {"name": "tcp-443", "port": 443, "protocol": "TCP", "targetPort": 8443},
                {"name": "udp-53", "port": 53, "protocol": "UDP", "targetPort": 53},
            ])
        );
        let own = desired(&gateway(), &status(Some(vec![])), &config);
        let ports = own.spec.and_then(|s| s.ports).unwrap_or_default();
        assert_eq!(ports[0].target_port, Some(IntOrString::Int(80)));
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long = "g".repeat(70);
        let name = service_name(&long);
        assert!(name.len() <= 63, "{name}");
        assert_ne!(service_name(&long), service_name(&"g".repeat(71)));
        assert_eq!(service_name("a"), "sluice-gateway-a");
    }
}
