//! What the controller caches of the kinds a cluster has many of (Services, EndpointSlices,
//! Endpoints, TLS Secrets): the fields that routing, Ingress status and `sluice explain` read,
//! nothing else (issue 17: "the controller's own informers trimmed to what routing reads").
//!
//! Each function is an informer transform (client-go `SetTransform`): it runs on every
//! object as it arrives, before the delta queue, so what it drops is freed at once and never
//! reaches the store. A field added to a reader of these kinds must be added here too; the
//! tests below compile the same objects with and without projection and compare the tables.
//!
//! What is kept, and who reads it:
//! - all four: `metadata.name`, `namespace`, `uid`, `resourceVersion`, `generation` and
//!   `creationTimestamp` (keys, logs, Events);
//! - Service: `spec.type` (ExternalName is refused), `spec.ports[].name`, `.port`,
//!   `.appProtocol` (backend resolution, `default-backend`), and what `--publish-service`
//!   publishes: `status.loadBalancer.ingress[].ip`/`.hostname`, `spec.externalIPs`,
//!   `spec.clusterIP`;
//! - EndpointSlice: the `kubernetes.io/service-name` label, `addressType`, `ports[].name` and
//!   `.port`, `endpoints[].addresses` and `.conditions.ready` (the endpoints merged by
//!   readiness: see [`endpoint_slice`]);
//! - Endpoints: `subsets[].ports[].name`/`.port`, `addresses[].ip`, and
//!   `notReadyAddresses[].ip` (counted);
//! - Secret: `type` and `data` (certificates, keys, CA bundles, basic-auth files).
//!
//! Dropped, for example: labels and annotations (but the one above), owner references,
//! finalizers, an endpoint's `targetRef`, `nodeName`, `zone`, `hints`, `hostname` and
//! `deprecatedTopology`, a Service's selector, IP families, session affinity and node ports.

use k8s_openapi::api::core::v1::{
    ConfigMap, EndpointAddress, EndpointPort, EndpointSubset, Endpoints, LoadBalancerIngress,
    LoadBalancerStatus, Secret, Service, ServicePort, ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use kube::api::ObjectMeta;
use std::collections::BTreeMap;

/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The identity and version fields of `meta`; labels only those `keep_label` accepts.
fn meta(meta: ObjectMeta, keep_label: impl Fn(&str) -> bool) -> ObjectMeta {
    let labels: BTreeMap<String, String> = meta
        .labels
        .into_iter()
        .flatten()
        .filter(|(k, _)| keep_label(k))
        .collect();
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        creation_timestamp: meta.creation_timestamp,
        labels: (!labels.is_empty()).then_some(labels),
        ..ObjectMeta::default()
    }
}

/// A Service as routing and `--publish-service` read it.
pub fn service(svc: Service) -> Service {
    let spec = svc.spec.map(|s| ServiceSpec {
        type_: s.type_,
        ports: s.ports.map(|ports| {
            ports
                .into_iter()
                .map(|p| ServicePort {
                    name: p.name,
                    port: p.port,
                    app_protocol: p.app_protocol,
                    ..ServicePort::default()
                })
                .collect()
        }),
        external_ips: s.external_ips,
        cluster_ip: s.cluster_ip,
        ..ServiceSpec::default()
    });
    let ingress: Option<Vec<LoadBalancerIngress>> = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .map(|all| {
            all.into_iter()
                .map(|i| LoadBalancerIngress {
                    ip: i.ip,
                    hostname: i.hostname,
                    ..LoadBalancerIngress::default()
                })
                .collect()
        });
    Service {
        metadata: meta(svc.metadata, |_| false),
        spec,
        status: ingress.map(|ingress| ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(ingress),
            }),
            ..ServiceStatus::default()
        }),
    }
}

/// An EndpointSlice as routing reads it: its endpoints merged into at most two, one listing
/// the addresses of every ready endpoint and one those of the others (`ready: false`).
/// Routing reads an endpoint's addresses and its `ready` condition and nothing else, so
/// the merge changes nothing it serves or counts; what it saves is k8s-openapi's
/// `Endpoint` itself, some 350 bytes before its addresses, per endpoint: 17 MB of the cache
/// at 50,000 endpoints. Lists are cut to their length (a list read from JSON grows by
/// doubling, and the projection would otherwise keep that slack).
pub fn endpoint_slice(slice: EndpointSlice) -> EndpointSlice {
    let (mut ready, mut not_ready) = (Vec::new(), Vec::new());
    for e in slice.endpoints {
        // Absent `ready` means ready (the API says consumers should assume so).
        if e.conditions.and_then(|c| c.ready) == Some(false) {
            not_ready.extend(e.addresses);
        } else {
            ready.extend(e.addresses);
        }
    }
    let mut endpoints: Vec<Endpoint> = [(ready, true), (not_ready, false)]
        .into_iter()
        .filter(|(addresses, _)| !addresses.is_empty())
        .map(|(mut addresses, ready)| {
            addresses.shrink_to_fit();
            Endpoint {
                addresses,
                conditions: Some(EndpointConditions {
                    ready: Some(ready),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            }
        })
        .collect();
    endpoints.shrink_to_fit();
    let ports = slice.ports.map(|mut ports| {
        ports.shrink_to_fit();
        ports
    });
    EndpointSlice {
        metadata: meta(slice.metadata, |k| k == SERVICE_NAME_LABEL),
        address_type: slice.address_type,
        ports,
        endpoints,
    }
}

/// Endpoints (core/v1) as routing reads them.
pub fn endpoints(e: Endpoints) -> Endpoints {
    fn ips(addresses: Option<Vec<EndpointAddress>>) -> Option<Vec<EndpointAddress>> {
        addresses.map(|all| {
            all.into_iter()
                .map(|a| EndpointAddress {
                    ip: a.ip,
                    ..EndpointAddress::default()
                })
                .collect()
        })
    }
    Endpoints {
        metadata: meta(e.metadata, |_| false),
        subsets: e.subsets.map(|subsets| {
            subsets
                .into_iter()
                .map(|s| EndpointSubset {
                    addresses: ips(s.addresses),
                    not_ready_addresses: ips(s.not_ready_addresses),
                    ports: s.ports.map(|ports| {
                        ports
                            .into_iter()
                            .map(|p| EndpointPort {
                                name: p.name,
                                port: p.port,
                                ..EndpointPort::default()
                            })
                            .collect()
                    }),
                })
                .collect()
        }),
    }
}

/// A ConfigMap as routing reads it: its CA certificates (`ca.crt`) only, whatever else it
/// holds (the informer watches every ConfigMap; most are not certificates).
pub fn config_map(config_map: ConfigMap) -> ConfigMap {
    let data = config_map.data.and_then(|mut data| {
        let ca = data.remove(sluice_routing::CA_CERT_KEY)?;
        Some(std::collections::BTreeMap::from([(
            sluice_routing::CA_CERT_KEY.to_owned(),
            ca,
        )]))
    });
    ConfigMap {
        metadata: meta(config_map.metadata, |_| false),
        data,
        ..ConfigMap::default()
    }
}

/// A Secret as routing reads it: its type and data.
pub fn secret(secret: Secret) -> Secret {
    Secret {
        metadata: meta(secret.metadata, |_| false),
        type_: secret.type_,
        data: secret.data,
        // A manifest's `stringData` (the API server folds it into `data`).
        string_data: secret.string_data,
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::status::service_addresses;
    use k8s_openapi::ByteString;
    use serde::de::DeserializeOwned;
    use sluice_routing::{CompileOptions, Inputs, compile, explain};
    use std::sync::Arc;

    fn parse<K: DeserializeOwned>(yaml: &str) -> K {
        yaml_serde::from_str(yaml).expect("fixture parses")
    }

    /// A Service with every field a real cluster fills in.
    const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  uid: 3f1c
  resourceVersion: "77"
  labels: {app: web, team: a}
  annotations: {note: "x", kubectl.kubernetes.io/last-applied-configuration: "{}"}
  ownerReferences: [{apiVersion: v1, kind: Foo, name: f, uid: u}]
spec:
  type: LoadBalancer
  selector: {app: web}
  clusterIP: 10.96.0.5
  clusterIPs: [10.96.0.5]
  ipFamilies: [IPv4]
  externalIPs: [198.51.100.1]
  sessionAffinity: None
  ports:
  - {name: http, port: 80, targetPort: 8080, protocol: TCP, nodePort: 30080}
  - {name: grpc, port: 9000, targetPort: grpc, protocol: TCP, appProtocol: kubernetes.io/h2c}
  - {port: 8443, targetPort: 8443}
status:
  loadBalancer:
    ingress: [{ip: 203.0.113.7, ipMode: VIP, ports: [{port: 80, protocol: TCP}]}, {hostname: lb.example.com}]
"#;

    const EXTERNAL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: shop}
spec: {type: ExternalName, externalName: example.org, ports: [{port: 80}]}
"#;

    const SLICES: [&str; 2] = [
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-a
  namespace: shop
  labels: {kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: x}
  annotations: {endpoints.kubernetes.io/last-change-trigger-time: "2026-11-23T00:00:00Z"}
  ownerReferences: [{apiVersion: v1, kind: Service, name: web, uid: 3f1c}]
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
- {name: grpc, port: 9000, protocol: TCP, appProtocol: kubernetes.io/h2c}
- {name: "", port: 8443}
endpoints:
- addresses: [10.0.0.1]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: n1
  zone: z1
  hints: {forZones: [{name: z1}]}
  targetRef: {kind: Pod, name: web-1, namespace: shop, uid: p1}
- addresses: [10.0.0.2]
  conditions: {ready: false, serving: true, terminating: true}
  targetRef: {kind: Pod, name: web-2, namespace: shop, uid: p2}
- addresses: [10.0.0.3]
  deprecatedTopology: {kubernetes.io/hostname: n3}
"#,
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-b
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8081}]
endpoints: [{addresses: [10.0.1.1], conditions: {}, hostname: h}]
"#,
    ];

    const ENDPOINTS: &str = r#"
apiVersion: v1
kind: Endpoints
metadata: {name: web, namespace: shop, labels: {app: web}}
subsets:
- addresses: [{ip: 10.0.0.1, nodeName: n1, hostname: a, targetRef: {kind: Pod, name: web-1}}]
  notReadyAddresses: [{ip: 10.0.0.2}]
  ports: [{name: http, port: 8080, protocol: TCP}, {name: grpc, port: 9000, appProtocol: h2c}]
- addresses: [{ip: 10.0.1.1}]
  ports: [{name: http, port: 8081}]
"#;

    fn ingress() -> &'static str {
        r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: shop
  annotations: {nginx.ingress.kubernetes.io/default-backend: web}
spec:
  ingressClassName: sluice
  tls: [{hosts: [shop.example.com], secretName: shop-tls}]
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {name: http}}}}
      - {path: /grpc, pathType: Prefix, backend: {service: {name: web, port: {number: 9000}}}}
      - {path: /tls, pathType: Prefix, backend: {service: {name: web, port: {number: 8443}}}}
      - {path: /ext, pathType: Prefix, backend: {service: {name: ext, port: {number: 80}}}}
      - {path: /nope, pathType: Prefix, backend: {service: {name: web, port: {number: 1}}}}
"#
    }

    fn tls_secret() -> k8s_openapi::api::core::v1::Secret {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["shop.example.com".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        let mut secret: Secret = parse(
            r#"
apiVersion: v1
kind: Secret
metadata: {name: shop-tls, namespace: shop, labels: {a: b}, annotations: {cert-manager.io/issuer: x}}
type: kubernetes.io/tls
"#,
        );
        secret.data = Some(BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(cert.pem().into_bytes())),
            (
                "tls.key".to_owned(),
                ByteString(key.serialize_pem().into_bytes()),
            ),
        ]));
        secret
    }

    fn inputs(slices: bool) -> Inputs {
        Inputs {
            ingresses: vec![Arc::new(parse(ingress()))].into(),
            ingress_classes: vec![Arc::new(parse(
                "{apiVersion: networking.k8s.io/v1, kind: IngressClass, metadata: {name: sluice}, \
                 spec: {controller: sluice.dev/ingress-controller}}",
            ))]
            .into(),
            services: vec![Arc::new(parse(SERVICE)), Arc::new(parse(EXTERNAL))].into(),
            endpoint_slices: if slices {
                SLICES.iter().map(|y| Arc::new(parse(y))).collect()
            } else {
                Default::default()
            },
            endpoints: if slices {
                Default::default()
            } else {
                vec![Arc::new(parse(ENDPOINTS))].into()
            },
            secrets: vec![Arc::new(tls_secret())].into(),
            ..Inputs::default()
        }
    }

    fn projected(inputs: &Inputs) -> Inputs {
        fn each<K: Clone>(all: &sluice_routing::ObjectList<K>, f: fn(K) -> K) -> Vec<Arc<K>> {
            all.iter().map(|o| Arc::new(f((**o).clone()))).collect()
        }
        Inputs {
            services: each(&inputs.services, service).into(),
            endpoint_slices: each(&inputs.endpoint_slices, endpoint_slice).into(),
            endpoints: each(&inputs.endpoints, endpoints).into(),
            secrets: each(&inputs.secrets, secret).into(),
            ..inputs.clone()
        }
    }

    /// Everything a compiled table says about routes, backends, certificates and problems.
    fn summary(inputs: &Inputs) -> String {
        let compiled = compile(inputs, &CompileOptions::default());
        let table = &compiled.table;
        let certificates: Vec<_> = table.certificates().map(|c| format!("{c:?}")).collect();
        let mut out = format!(
            "{:#?}\n{:#?}\n{:#?}\n{certificates:#?}\n{:#?}\n{:#?}",
            table.routes_with_entries(),
            table.backends(),
            table.default_backend(),
            compiled.diagnostics,
            compiled.ours,
        );
        for path in ["/", "/grpc", "/tls", "/ext", "/nope", "/other"] {
            out.push_str(
                &explain(inputs, &CompileOptions::default(), "shop.example.com", path).to_string(),
            );
        }
        out
    }

    #[test]
    fn routing_reads_the_same_from_projected_objects() {
        for slices in [true, false] {
            let full = inputs(slices);
            let before = summary(&full);
            // The fixture exercises what projection must keep: ready and not-ready
            // endpoints, a named and a numbered port, appProtocol, ExternalName, a missing
            // port, a TLS certificate and the default-backend annotation.
            for expected in [
                "10.0.0.1:8080",
                "10.0.1.1:8081",
                "ExternalName",
                "has no port 1",
                "shop.example.com",
            ] {
                assert!(
                    before.contains(expected),
                    "fixture lacks {expected}:\n{before}"
                );
            }
            assert_eq!(summary(&projected(&full)), before, "slices: {slices}");
        }
    }

    /// A slice read from JSON keeps no slack after projection: each list's capacity is its
    /// length (the capacity is what is allocated, and slices are most of the cache), and its
    /// endpoints are merged by readiness, every address kept in order.
    #[test]
    fn a_projected_endpoint_slice_keeps_no_spare_capacity() {
        // Endpoints 3 and 7 are not ready; 5 says nothing (ready, as the API has it).
        let endpoints: Vec<serde_json::Value> = (1..=10)
            .map(|k| match k {
                3 | 7 => serde_json::json!({"addresses": [format!("10.0.0.{k}")],
                                            "conditions": {"ready": false}}),
                5 => serde_json::json!({"addresses": [format!("10.0.0.{k}")]}),
                _ => serde_json::json!({"addresses": [format!("10.0.0.{k}")],
                                        "conditions": {"ready": true}, "nodeName": "n1"}),
            })
            .collect();
        // Read from text, as the API server's answers are (a `Value` knows its lengths).
        let text = serde_json::json!({
            "metadata": {"namespace": "a", "name": "web-1",
                         "labels": {SERVICE_NAME_LABEL: "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": endpoints,
        })
        .to_string();
        let read: EndpointSlice = serde_json::from_str(&text).expect("slice");
        assert!(
            read.endpoints.capacity() > read.endpoints.len(),
            "the fixture must have slack to cut: {} of {}",
            read.endpoints.len(),
            read.endpoints.capacity()
        );
        let projected = endpoint_slice(read);
        assert_eq!(projected.endpoints.capacity(), 2);
        for e in &projected.endpoints {
            assert_eq!(e.addresses.capacity(), e.addresses.len());
            assert_eq!(e.node_name, None);
        }
        let by_readiness: Vec<(Option<bool>, Vec<&str>)> = projected
            .endpoints
            .iter()
            .map(|e| {
                let ready = e.conditions.as_ref().and_then(|c| c.ready);
                (ready, e.addresses.iter().map(String::as_str).collect())
            })
            .collect();
        let ready = ["1", "2", "4", "5", "6", "8", "9", "10"].map(|k| format!("10.0.0.{k}"));
        assert_eq!(
            by_readiness,
            [
                (Some(true), ready.iter().map(String::as_str).collect()),
                (Some(false), vec!["10.0.0.3", "10.0.0.7"]),
            ]
        );
    }

    /// A slice whose endpoints are all ready (or all not) keeps one entry; one without
    /// endpoints keeps none.
    #[test]
    fn a_projected_endpoint_slice_keeps_only_the_readiness_it_has() {
        let slice = |endpoints: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "a", "name": "web-1"},
                "addressType": "IPv4",
                "endpoints": endpoints,
            }))
            .expect("slice")
        };
        let none = endpoint_slice(slice(serde_json::json!([])));
        assert!(none.endpoints.is_empty());
        let down = endpoint_slice(slice(serde_json::json!([
            {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
        ])));
        assert_eq!(down.endpoints.len(), 1);
        assert_eq!(down.endpoints[0].addresses, ["10.0.0.1", "10.0.0.2"]);
        let ready = down.endpoints[0].conditions.as_ref().and_then(|c| c.ready);
        assert_eq!(ready, Some(false));
    }

    #[test]
    fn publish_service_reads_the_same_from_a_projected_service() {
        let full: Service = parse(SERVICE);
        let addresses = service_addresses(&full);
        assert_eq!(addresses, ["203.0.113.7", "lb.example.com"]);
        assert_eq!(service_addresses(&service(full.clone())), addresses);
        let mut no_lb = full.clone();
        no_lb.status = None;
        assert_eq!(service_addresses(&service(no_lb)), ["198.51.100.1"]);
        let mut cluster_ip_only = full;
        cluster_ip_only.status = None;
        cluster_ip_only.spec.as_mut().expect("spec").external_ips = None;
        assert_eq!(service_addresses(&service(cluster_ip_only)), ["10.96.0.5"]);
    }

    #[test]
    fn projection_drops_what_routing_does_not_read() {
        let svc = service(parse(SERVICE));
        assert_eq!(svc.metadata.name.as_deref(), Some("web"));
        assert_eq!(svc.metadata.uid.as_deref(), Some("3f1c"));
        assert_eq!(svc.metadata.resource_version.as_deref(), Some("77"));
        assert!(svc.metadata.labels.is_none());
        assert!(svc.metadata.annotations.is_none());
        assert!(svc.metadata.owner_references.is_none());
        let spec = svc.spec.expect("spec");
        assert!(spec.selector.is_none() && spec.cluster_ips.is_none());
        assert!(spec.ports.iter().flatten().all(|p| p.target_port.is_none()));

        let slice = endpoint_slice(parse(SLICES[0]));
        let labels = slice.metadata.labels.expect("service-name label kept");
        assert_eq!(labels.keys().collect::<Vec<_>>(), [SERVICE_NAME_LABEL]);
        assert!(slice.metadata.annotations.is_none());
        for e in &slice.endpoints {
            assert!(e.target_ref.is_none() && e.node_name.is_none() && e.zone.is_none());
            assert!(e.hints.is_none() && e.deprecated_topology.is_none());
            if let Some(c) = &e.conditions {
                assert!(c.serving.is_none() && c.terminating.is_none());
            }
        }

        let e = endpoints(parse(ENDPOINTS));
        let address = &e.subsets.expect("subsets")[0]
            .addresses
            .clone()
            .expect("addresses")[0];
        assert_eq!(address.ip, "10.0.0.1");
        assert!(address.target_ref.is_none() && address.node_name.is_none());

        let s = secret(tls_secret());
        assert!(s.metadata.labels.is_none() && s.metadata.annotations.is_none());
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(s.data.expect("data").len(), 2);
    }
}
