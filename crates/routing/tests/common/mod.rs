//! Helpers that build Kubernetes objects for the tests (serde_json -> k8s-openapi types).
#![allow(dead_code)]

pub mod compare;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::{Value, json};
use sluice_routing::{CompileOptions, Compiled, Diagnostic, Inputs, Reason, RouteTable, compile};

pub const CONTROLLER: &str = "sluice.dev/ingress-controller";

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("test object deserialises"))
}

/// A timestamp `n` seconds into 2024 (smaller = older).
pub fn ts(n: u32) -> String {
    format!("2024-01-01T00:{:02}:{:02}Z", n / 60, n % 60)
}

/// An Ingress of class "sluice" (our IngressClass from [`our_class`]), created at `ts(age)`.
pub fn ingress(ns: &str, name: &str, age: Option<u32>, mut spec: Value) -> Arc<Ingress> {
    if spec.get("ingressClassName").is_none() {
        spec["ingressClassName"] = json!("sluice");
    }
    raw_ingress(ns, name, age, json!({}), spec)
}

/// An Ingress exactly as given (no class added).
pub fn raw_ingress(
    ns: &str,
    name: &str,
    age: Option<u32>,
    annotations: Value,
    spec: Value,
) -> Arc<Ingress> {
    let mut meta = json!({"namespace": ns, "name": name, "annotations": annotations});
    if let Some(age) = age {
        meta["creationTimestamp"] = json!(ts(age));
    }
    from(json!({"metadata": meta, "spec": spec}))
}

/// A rule: `host` ("" = none) and its paths.
pub fn rule(host: &str, paths: Vec<Value>) -> Value {
    let mut r = json!({"http": {"paths": paths}});
    if !host.is_empty() {
        r["host"] = json!(host);
    }
    r
}

/// A path to service `svc` port number `port`.
pub fn path(p: &str, ty: &str, svc: &str, port: i32) -> Value {
    json!({"path": p, "pathType": ty, "backend": svc_backend(svc, port)})
}

/// A path to service `svc` port named `port`.
pub fn path_named(p: &str, ty: &str, svc: &str, port: &str) -> Value {
    json!({"path": p, "pathType": ty, "backend": {"service": {"name": svc, "port": {"name": port}}}})
}

pub fn svc_backend(svc: &str, port: i32) -> Value {
    json!({"service": {"name": svc, "port": {"number": port}}})
}

/// spec with the given rules.
pub fn rules(rules: Vec<Value>) -> Value {
    json!({ "rules": rules })
}

/// An IngressClass.
pub fn class(name: &str, controller: &str, default: bool) -> Arc<IngressClass> {
    let annotations = if default {
        json!({"ingressclass.kubernetes.io/is-default-class": "true"})
    } else {
        json!({})
    };
    from(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"controller": controller}
    }))
}

/// Our IngressClass "sluice", not default.
pub fn our_class() -> Arc<IngressClass> {
    class("sluice", CONTROLLER, false)
}

/// A ClusterIP Service with ports (name, port).
pub fn service(ns: &str, name: &str, ports: &[(Option<&str>, i32)]) -> Arc<Service> {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| match n {
            Some(n) => json!({"name": n, "port": p}),
            None => json!({"port": p}),
        })
        .collect();
    from(json!({"metadata": {"namespace": ns, "name": name}, "spec": {"ports": ports}}))
}

/// An EndpointSlice of `svc`, ports (name, port), endpoints (addresses, ready).
pub fn slice(
    ns: &str,
    name: &str,
    svc: &str,
    ports: &[(Option<&str>, i32)],
    endpoints: &[(&[&str], Option<bool>)],
) -> Arc<EndpointSlice> {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| match n {
            Some(n) => json!({"name": n, "port": p}),
            None => json!({"port": p}),
        })
        .collect();
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|(addrs, ready)| match ready {
            Some(r) => json!({"addresses": addrs, "conditions": {"ready": r}}),
            None => json!({"addresses": addrs}),
        })
        .collect();
    from(json!({
        "metadata": {"namespace": ns, "name": name, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    }))
}

/// A core/v1 Endpoints object with raw subsets.
pub fn endpoints(ns: &str, name: &str, subsets: Value) -> Arc<Endpoints> {
    from(json!({"metadata": {"namespace": ns, "name": name}, "subsets": subsets}))
}

/// PEM blocks whose bodies are tiny but well-formed DER SEQUENCEs.
pub const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n";
pub const CHAIN_PEM: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nMAMCAQM=\n-----END CERTIFICATE-----\n";
pub const PKCS8_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMAMCAQI=\n-----END PRIVATE KEY-----\n";
pub const PKCS1_PEM: &str =
    "-----BEGIN RSA PRIVATE KEY-----\nMAMCAQI=\n-----END RSA PRIVATE KEY-----\n";
pub const SEC1_PEM: &str =
    "-----BEGIN EC PRIVATE KEY-----\nMAMCAQI=\n-----END EC PRIVATE KEY-----\n";

/// A kubernetes.io/tls Secret with the given (already decoded) data.
pub fn tls_secret(ns: &str, name: &str, crt: &str, key: &str) -> Arc<Secret> {
    let mut data = BTreeMap::new();
    data.insert("tls.crt".to_owned(), ByteString(crt.as_bytes().to_vec()));
    data.insert("tls.key".to_owned(), ByteString(key.as_bytes().to_vec()));
    let mut s = Secret {
        data: Some(data),
        type_: Some("kubernetes.io/tls".to_owned()),
        ..Secret::default()
    };
    s.metadata.namespace = Some(ns.to_owned());
    s.metadata.name = Some(name.to_owned());
    Arc::new(s)
}

/// Inputs holding our IngressClass and the given Ingresses.
pub fn inputs(ingresses: Vec<Arc<Ingress>>) -> Inputs {
    Inputs {
        ingresses: ingresses.into(),
        ingress_classes: vec![our_class()].into(),
        ..Inputs::default()
    }
}

pub fn run(inputs: &Inputs) -> Compiled {
    compile(inputs, &CompileOptions::default())
}

/// "ns/name:port" of the backend a request routes to, or None.
pub fn routed(table: &RouteTable, host: &str, path: &str) -> Option<String> {
    table
        .route_backend(host, path)
        .map(|b| b.service.to_string())
}

/// (object name, field, reason) of every diagnostic, for compact assertions.
pub fn diag_summary(diags: &[Diagnostic]) -> Vec<(String, String, &'static str)> {
    diags
        .iter()
        .map(|d| (d.object.name.clone(), d.field.clone(), d.reason.as_str()))
        .collect()
}

pub fn find<'a>(diags: &'a [Diagnostic], reason: &str) -> Vec<&'a Diagnostic> {
    diags
        .iter()
        .filter(|d| d.reason.as_str() == reason)
        .collect()
}

pub fn conflict_winner(d: &Diagnostic) -> String {
    match &d.reason {
        Reason::ConflictLost { winner } => winner.to_string(),
        other => panic!("not a conflict: {other:?}"),
    }
}
