//! Admission review of Ingresses, HTTPRoutes and GRPCRoutes (the validating webhook's
//! decision, no I/O). Routes: compiled the same way, refused when the route is invalid in itself
//! (`Accepted=False`, `UnsupportedValue`), the other False conditions of its status given as
//! warnings. Ingresses: the incoming
//! Ingress is compiled with the routing crate against the current objects, exactly as the
//! controller would serve it, and refused when serving would drop part of it (an invalid
//! path, host, backend or annotation value, a refused snippet, an access restriction that
//! fails closed, a conflict it would lose). The reasons are the diagnostics the controller
//! turns into Events, worded the same. Problems that objects created later can mend (a
//! missing Service, port or TLS Secret, a canary before its main Ingress) and annotations
//! without effect are allowed with warnings (kubectl prints them).
//!
//! Nothing from the object is executed or templated: the review is the compile function.
//! On UPDATE only what the change adds is refused, so an Ingress that already had a problem
//! can still be edited (and its finalizers removed) without mending that first.

use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};
use sluice_routing::gateway::{GrpcRoute, HttpRoute};
use sluice_routing::{CompileOptions, Diagnostic, Inputs, Reason, compile};
use std::sync::Arc;

/// What the review of one object found.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    /// Why the object is refused; empty: allowed.
    pub refused: Vec<Diagnostic>,
    /// Problems that do not refuse it.
    pub warnings: Vec<Diagnostic>,
}

/// Whether a diagnostic of this kind refuses the object: the part it concerns would not be
/// served, and nothing but a change of this object mends it.
pub fn refuses(reason: &Reason) -> bool {
    match reason {
        Reason::InvalidPath
        | Reason::InvalidHost
        | Reason::ConflictLost { .. }
        | Reason::UnsupportedBackend
        | Reason::InvalidBackend
        | Reason::InvalidAnnotation
        | Reason::SnippetRefused
        | Reason::FailedClosed => true,
        Reason::ServiceNotFound
        | Reason::PortNotFound
        | Reason::TlsSecretMissing
        | Reason::TlsSecretInvalid
        | Reason::UnsupportedAnnotation
        | Reason::CanaryWithoutMain => false,
    }
}

/// The diagnostics compiling `inputs` with `ingress` in place of its namesake raises on it.
fn diagnostics_of(inputs: &Inputs, options: &CompileOptions, ingress: &Ingress) -> Vec<Diagnostic> {
    let namespace = ingress.metadata.namespace.clone().unwrap_or_default();
    let name = ingress.metadata.name.clone().unwrap_or_default();
    let mut inputs = inputs.clone();
    inputs.ingresses.retain(|i| {
        i.metadata.namespace.as_deref().unwrap_or("") != namespace
            || i.metadata.name.as_deref().unwrap_or("") != name
    });
    inputs.ingresses.push(Arc::new(ingress.clone()));
    compile(&inputs, options)
        .diagnostics
        .into_iter()
        .filter(|d| {
            d.object.kind == "Ingress" && d.object.namespace == namespace && d.object.name == name
        })
        .collect()
}

/// Reviews `ingress` (with `old`, its stored version, on UPDATE) against `inputs`, the
/// objects of the controller's last rebuild.
pub fn review_ingress(
    inputs: &Inputs,
    options: &CompileOptions,
    ingress: &Ingress,
    old: Option<&Ingress>,
) -> Verdict {
    let found = diagnostics_of(inputs, options, ingress);
    let before = old
        .map(|old| diagnostics_of(inputs, options, old))
        .unwrap_or_default();
    let deleting = ingress.metadata.deletion_timestamp.is_some();
    let mut verdict = Verdict::default();
    for d in found {
        let new = !before
            .iter()
            .any(|b| b.field == d.field && b.reason == d.reason && b.message == d.message);
        if refuses(&d.reason) && new && !deleting {
            verdict.refused.push(d);
        } else {
            verdict.warnings.push(d);
        }
    }
    verdict
}

/// An HTTPRoute's problems, as its `status.parents[].conditions` would say them: a
/// condition that is False for a parent of ours, as `TYPE/REASON: message`.
#[derive(Debug, Default, PartialEq)]
pub struct RouteVerdict {
    /// `Accepted=False` with `UnsupportedValue`: the route is invalid in itself (a rule or
    /// host name the spec refuses) and is served nowhere.
    pub refused: Vec<String>,
    /// Everything else that is False (a Gateway that does not let it attach, a missing
    /// backend or ReferenceGrant): objects created or changed later can mend those.
    pub warnings: Vec<String>,
}

/// A route of the kinds the webhook reviews.
#[derive(Clone, Debug)]
pub enum Route {
    /// `gateway.networking.k8s.io` HTTPRoute.
    Http(HttpRoute),
    /// `gateway.networking.k8s.io` GRPCRoute.
    Grpc(GrpcRoute),
}

impl Route {
    fn meta(&self) -> &ObjectMeta {
        match self {
            Route::Http(r) => &r.metadata,
            Route::Grpc(r) => &r.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Route::Http(r) => &mut r.metadata,
            Route::Grpc(r) => &mut r.metadata,
        }
    }

    /// The kind, as the compiler names it in statuses.
    fn kind(&self) -> &'static str {
        match self {
            Route::Http(_) => "HTTPRoute",
            Route::Grpc(_) => "GRPCRoute",
        }
    }

    /// `inputs` with this route in place of its namesake.
    fn put_into(&self, inputs: &mut Inputs) {
        let (namespace, name) = (
            self.meta().namespace.as_deref().unwrap_or(""),
            self.meta().name.as_deref().unwrap_or(""),
        );
        let other = |m: &ObjectMeta| {
            m.namespace.as_deref().unwrap_or("") != namespace
                || m.name.as_deref().unwrap_or("") != name
        };
        match self {
            Route::Http(r) => {
                inputs.http_routes.retain(|x| other(&x.metadata));
                inputs.http_routes.push(Arc::new(r.clone()));
            }
            Route::Grpc(r) => {
                inputs.grpc_routes.retain(|x| other(&x.metadata));
                inputs.grpc_routes.push(Arc::new(r.clone()));
            }
        }
    }

    /// Parses `request.object` (or `oldObject`) of the kind `kind` names.
    fn parse(kind: &str, v: &Value) -> Result<Route, String> {
        match kind {
            "HTTPRoute" => serde_json::from_value(v.clone())
                .map(Route::Http)
                .map_err(|e| format!("not an HTTPRoute: {e}")),
            "GRPCRoute" => serde_json::from_value(v.clone())
                .map(Route::Grpc)
                .map_err(|e| format!("not a GRPCRoute: {e}")),
            other => Err(format!("{other} is not a route kind reviewed here")),
        }
    }
}

fn route_problems(inputs: &Inputs, options: &CompileOptions, route: &Route) -> Vec<(bool, String)> {
    let namespace = route.meta().namespace.clone().unwrap_or_default();
    let name = route.meta().name.clone().unwrap_or_default();
    let kind = route.kind();
    let mut inputs = inputs.clone();
    route.put_into(&mut inputs);
    let mut found = Vec::new();
    let compiled = compile(&inputs, options);
    for status in &compiled.gateway.routes {
        if status.object.kind != kind
            || status.object.namespace != namespace
            || status.object.name != name
        {
            continue;
        }
        for parent in &status.parents {
            for c in parent.conditions.iter().filter(|c| !c.status) {
                let refuses = c.type_ == "Accepted" && c.reason == "UnsupportedValue";
                let line = format!(
                    "{}/{}: {kind} {namespace}/{name}, parent {}: {}",
                    c.type_, c.reason, parent.parent_ref.name, c.message
                );
                if !found.iter().any(|(_, l)| *l == line) {
                    found.push((refuses, line));
                }
            }
        }
    }
    found
}

/// Reviews an HTTPRoute or GRPCRoute (with its stored version on UPDATE) against `inputs`.
/// Routes that name no Gateway of ours are not judged.
pub fn review_route(
    inputs: &Inputs,
    options: &CompileOptions,
    route: &Route,
    old: Option<&Route>,
) -> RouteVerdict {
    let before: Vec<String> = old
        .map(|old| route_problems(inputs, options, old))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    let deleting = route.meta().deletion_timestamp.is_some();
    let mut verdict = RouteVerdict::default();
    for (refuses, line) in route_problems(inputs, options, route) {
        if refuses && !deleting && !before.contains(&line) {
            verdict.refused.push(line);
        } else {
            verdict.warnings.push(line);
        }
    }
    verdict
}

/// One line per diagnostic, as the Event says it: reason, field, message.
fn line(d: &Diagnostic) -> String {
    format!("{}: {}", d.reason, d.message)
}

/// The webhook's answer to an `admission.k8s.io/v1` AdmissionReview (the request's JSON):
/// the AdmissionReview to send back, or why the request is not one (answered 400). Kinds
/// other than networking.k8s.io/v1 Ingress are allowed untouched.
pub fn answer(review: &Value, inputs: &Inputs, options: &CompileOptions) -> Result<Value, String> {
    let request = review
        .get("request")
        .filter(|r| r.is_object())
        .ok_or("not an AdmissionReview: no request")?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .ok_or("AdmissionReview request without uid")?;
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("admission.k8s.io/v1");
    let respond = |allowed: bool, message: Option<String>, warnings: Vec<String>| {
        let mut response = json!({"uid": uid, "allowed": allowed});
        if let Some(message) = message {
            response["status"] = json!({"code": 422, "reason": "Invalid", "message": message});
        }
        if !warnings.is_empty() {
            response["warnings"] = json!(warnings);
        }
        json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response})
    };
    let kind = &request["kind"];
    let is_ingress = kind["group"] == "networking.k8s.io"
        && kind["version"] == "v1"
        && kind["kind"] == "Ingress";
    let route_kind = kind["kind"].as_str().unwrap_or("");
    let is_route = kind["group"] == "gateway.networking.k8s.io"
        && matches!(route_kind, "HTTPRoute" | "GRPCRoute");
    let operation = request["operation"].as_str().unwrap_or("");
    if !(is_ingress || is_route) || !matches!(operation, "CREATE" | "UPDATE") {
        return Ok(respond(true, None, Vec::new()));
    }
    if is_route {
        let mut route = Route::parse(route_kind, &request["object"])
            .map_err(|e| format!("request.object: {e}"))?;
        let meta = route.meta_mut();
        if meta.namespace.as_deref().unwrap_or("").is_empty() {
            meta.namespace = request["namespace"].as_str().map(String::from);
        }
        if meta.name.as_deref().unwrap_or("").is_empty() {
            meta.name = request["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(String::from)
                .or_else(|| meta.generate_name.clone());
        }
        let old = match operation {
            "UPDATE" => Some(
                Route::parse(route_kind, &request["oldObject"])
                    .map_err(|e| format!("request.oldObject: {e}"))?,
            ),
            _ => None,
        };
        let verdict = review_route(inputs, options, &route, old.as_ref());
        if verdict.refused.is_empty() {
            return Ok(respond(true, None, verdict.warnings));
        }
        return Ok(respond(
            false,
            Some(format!(
                "sluice would not serve this {route_kind}: {}",
                verdict.refused.join("; ")
            )),
            verdict.warnings,
        ));
    }
    let mut ingress: Ingress = serde_json::from_value(request["object"].clone())
        .map_err(|e| format!("request.object is not an Ingress: {e}"))?;
    // The object of a CREATE may leave its namespace (and, with generateName, its name) to
    // the request.
    if ingress
        .metadata
        .namespace
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        ingress.metadata.namespace = request["namespace"].as_str().map(String::from);
    }
    if ingress.metadata.name.as_deref().unwrap_or("").is_empty() {
        ingress.metadata.name = request["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(String::from)
            .or_else(|| ingress.metadata.generate_name.clone());
    }
    let old: Option<Ingress> = match operation {
        "UPDATE" => Some(
            serde_json::from_value(request["oldObject"].clone())
                .map_err(|e| format!("request.oldObject is not an Ingress: {e}"))?,
        ),
        _ => None,
    };
    let verdict = review_ingress(inputs, options, &ingress, old.as_ref());
    let warnings = verdict.warnings.iter().map(line).collect();
    if verdict.refused.is_empty() {
        return Ok(respond(true, None, warnings));
    }
    let reasons: Vec<String> = verdict.refused.iter().map(line).collect();
    Ok(respond(
        false,
        Some(format!(
            "sluice would not serve all of this Ingress: {}",
            reasons.join("; ")
        )),
        warnings,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::IngressClass;

    fn options() -> CompileOptions {
        CompileOptions::default()
    }

    fn class() -> Arc<IngressClass> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "sluice"},
                "spec": {"controller": "sluice.dev/ingress-controller"}}))
            .expect("class"),
        )
    }

    fn ingress(name: &str, created: Option<&str>, annotations: Value, path: &str) -> Ingress {
        let mut meta = json!({"name": name, "namespace": "ns", "annotations": annotations});
        if let Some(t) = created {
            meta["creationTimestamp"] = json!(t);
        }
        serde_json::from_value(
            json!({"metadata": meta, "spec": {"ingressClassName": "sluice",
            "rules": [{"host": "a.test", "http": {"paths": [{"path": path, "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
        )
        .expect("ingress")
    }

    fn review(object: &Ingress, old: Option<&Ingress>) -> Value {
        let mut request = json!({"uid": "u-1",
            "kind": {"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"},
            "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "namespace": "ns", "name": object.metadata.name,
            "object": object});
        if let Some(old) = old {
            request["oldObject"] = json!(old);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }

    fn inputs(existing: Vec<Ingress>) -> Inputs {
        Inputs {
            ingresses: existing.into_iter().map(Arc::new).collect(),
            ingress_classes: vec![class()].into(),
            ..Inputs::default()
        }
    }

    /// ingress-nginx's admission webhook refuses an Ingress whose annotation value it cannot
    /// use; so does this one, with the Event's words, naming the annotation.
    #[test]
    fn an_invalid_annotation_value_is_refused_naming_the_field() {
        let bad = ingress(
            "bad",
            None,
            json!({"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"}),
            "/",
        );
        let out = answer(&review(&bad, None), &inputs(vec![]), &options()).expect("answer");
        let response = &out["response"];
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["allowed"], false, "{out}");
        let message = response["status"]["message"].as_str().expect("message");
        assert!(message.contains("InvalidAnnotation"), "{message}");
        assert!(
            message.contains("nginx.ingress.kubernetes.io/proxy-next-upstream"),
            "{message}"
        );
        // A missing Service is only a warning: it may be created next.
        let warnings = response["warnings"].as_array().expect("warnings");
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().is_some_and(|w| w.starts_with("ServiceNotFound"))),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_conflict_it_would_lose_is_refused_naming_the_winner() {
        let old = ingress("first", Some("2026-01-01T00:00:00Z"), json!({}), "/");
        let new = ingress("second", None, json!({}), "/");
        let out = answer(&review(&new, None), &inputs(vec![old]), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], false, "{out}");
        let message = out["response"]["status"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("ConflictLost") && message.contains("ns/first"),
            "{message}"
        );
        // Another path: no conflict, allowed.
        let other = ingress("second", None, json!({}), "/other");
        let existing = ingress("first", Some("2026-01-01T00:00:00Z"), json!({}), "/");
        let out =
            answer(&review(&other, None), &inputs(vec![existing]), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], true, "{out}");
    }

    #[test]
    fn other_classes_and_kinds_pass_untouched() {
        let mut bad = ingress(
            "bad",
            None,
            json!({"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"}),
            "/",
        );
        if let Some(spec) = bad.spec.as_mut() {
            spec.ingress_class_name = Some("nginx".into());
        }
        let out = answer(&review(&bad, None), &inputs(vec![]), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], true, "{out}");
        assert!(out["response"]["warnings"].is_null());
        let mut r = review(&bad, None);
        r["request"]["kind"]["kind"] = json!("Service");
        let out = answer(&r, &inputs(vec![]), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], true);
        assert!(
            answer(
                &json!({"kind": "AdmissionReview"}),
                &inputs(vec![]),
                &options()
            )
            .is_err()
        );
        let mut r = review(&bad, None);
        r["request"]["object"] = json!({"spec": "not a spec"});
        assert!(answer(&r, &inputs(vec![]), &options()).is_err());
    }

    /// An Ingress that already had the problem can still be updated (e.g. its finalizers
    /// removed): only what the change adds is refused.
    #[test]
    fn an_update_is_refused_only_for_what_it_adds() {
        let annotated = json!({"nginx.ingress.kubernetes.io/proxy-next-upstream": "http_418"});
        let old = ingress("bad", Some("2026-01-01T00:00:00Z"), annotated.clone(), "/");
        let mut new = old.clone();
        new.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        let out = answer(
            &review(&new, Some(&old)),
            &inputs(vec![old.clone()]),
            &options(),
        )
        .expect("answer");
        assert_eq!(out["response"]["allowed"], true, "{out}");
        assert_eq!(
            out["response"]["warnings"].as_array().map(Vec::len),
            Some(2)
        );
        let good = ingress("good", Some("2026-01-01T00:00:00Z"), json!({}), "/");
        let worse = ingress("good", Some("2026-01-01T00:00:00Z"), annotated, "/");
        let out = answer(
            &review(&worse, Some(&good)),
            &inputs(vec![good.clone()]),
            &options(),
        )
        .expect("answer");
        assert_eq!(out["response"]["allowed"], false, "{out}");
    }

    fn gateway_inputs() -> Inputs {
        let class: sluice_routing::gateway::GatewayClass = serde_json::from_value(json!({
            "metadata": {"name": "sluice"},
            "spec": {"controllerName": "sluice.dev/gateway-controller"}}))
        .expect("class");
        let gateway: sluice_routing::gateway::Gateway = serde_json::from_value(json!({
            "metadata": {"name": "edge", "namespace": "ns"},
            "spec": {"gatewayClassName": "sluice",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}))
        .expect("gateway");
        Inputs {
            gateway_classes: vec![Arc::new(class)].into(),
            gateways: vec![Arc::new(gateway)].into(),
            ..Inputs::default()
        }
    }

    fn route_review(hostnames: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-2",
            "kind": {"group": "gateway.networking.k8s.io", "version": "v1", "kind": "HTTPRoute"},
            "operation": "CREATE", "namespace": "ns", "name": "r",
            "object": {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "r", "namespace": "ns"},
                "spec": {"parentRefs": [{"name": "edge"}], "hostnames": hostnames,
                         "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}}})
    }

    /// An HTTPRoute invalid in itself (a host name the spec refuses) is refused with what
    /// its Accepted condition would say; a missing backend is a warning (ResolvedRefs).
    #[test]
    fn an_invalid_http_route_is_refused_and_a_missing_backend_warned() {
        let out = answer(
            &route_review(json!(["bad_host!"])),
            &gateway_inputs(),
            &options(),
        )
        .expect("answer");
        assert_eq!(out["response"]["allowed"], false, "{out}");
        let message = out["response"]["status"]["message"].as_str().unwrap_or("");
        assert!(message.contains("Accepted/UnsupportedValue"), "{message}");
        assert!(message.contains("spec.hostnames[0]"), "{message}");

        let out = answer(
            &route_review(json!(["web.test"])),
            &gateway_inputs(),
            &options(),
        )
        .expect("answer");
        assert_eq!(out["response"]["allowed"], true, "{out}");
        let warnings = out["response"]["warnings"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            warnings
                .iter()
                .any(|w| w.as_str().is_some_and(|w| w.starts_with("ResolvedRefs/"))),
            "{warnings:?}"
        );
        // A route of no Gateway of ours: not judged.
        let mut r = route_review(json!(["bad_host!"]));
        r["request"]["object"]["spec"]["parentRefs"][0]["name"] = json!("elsewhere");
        let out = answer(&r, &gateway_inputs(), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], true, "{out}");
    }

    /// GRPCRoutes of sluice's Gateways are judged the same way (and apart from an HTTPRoute
    /// of the same name).
    #[test]
    fn an_invalid_grpc_route_is_refused() {
        let grpc = |hostnames: Value| {
            let mut r = route_review(hostnames);
            r["request"]["kind"]["kind"] = json!("GRPCRoute");
            r["request"]["object"]["kind"] = json!("GRPCRoute");
            r
        };
        let out =
            answer(&grpc(json!(["bad_host!"])), &gateway_inputs(), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], false, "{out}");
        let message = out["response"]["status"]["message"].as_str().unwrap_or("");
        assert!(message.contains("this GRPCRoute"), "{message}");
        assert!(message.contains("GRPCRoute ns/r"), "{message}");
        assert!(message.contains("spec.hostnames[0]"), "{message}");
        let out =
            answer(&grpc(json!(["web.test"])), &gateway_inputs(), &options()).expect("answer");
        assert_eq!(out["response"]["allowed"], true, "{out}");
    }
}
