//! Gateway API status: what the compiler concluded ([`GatewayStatuses`]) written to
//! GatewayClass, Gateway and HTTPRoute `status`, by the leader only and only when it
//! differs from what the cache holds.
//!
//! Conditions carry `observedGeneration` (the generation compiled) and keep their
//! `lastTransitionTime` while type, status and reason stay the same. An HTTPRoute's
//! `status.parents` is shared with other controllers: only entries whose `controllerName`
//! is ours are replaced, the others are written back as they were. Writes carry the
//! cached `resourceVersion`, so a concurrent change makes the write fail (409) and the next
//! round starts from the newer object.

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use sluice_routing::gateway::{
    Condition, Gateway, GatewayClass, GatewayStatus, GatewayStatuses, HttpRoute, ObjectStatus,
    RouteStatus,
};

use crate::sources::GatewayInformers;

/// Longest condition message written (the API allows 32768; long ones help nobody).
const MAX_MESSAGE: usize = 1024;

/// Conditions as the API writes them, keeping `lastTransitionTime` of an unchanged one
/// from `old` (the object's current `conditions` array). Pure, for testing.
pub fn conditions_json(
    new: &[Condition],
    generation: Option<i64>,
    old: Option<&Value>,
    now: &str,
) -> Value {
    let old = old.and_then(Value::as_array);
    let list: Vec<Value> = new
        .iter()
        .map(|c| {
            let kept = old
                .into_iter()
                .flatten()
                .find(|o| {
                    o["type"] == c.type_ && o["status"] == c.status_str() && o["reason"] == c.reason
                })
                .and_then(|o| o.get("lastTransitionTime").cloned());
            let mut message = c.message.clone();
            if message.len() > MAX_MESSAGE {
                let mut end = MAX_MESSAGE;
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                message.truncate(end);
            }
            json!({
                "type": c.type_,
                "status": c.status_str(),
                "reason": c.reason,
                "message": message,
                "observedGeneration": generation.unwrap_or(0),
                "lastTransitionTime": kept.unwrap_or_else(|| Value::from(now)),
            })
        })
        .collect();
    Value::Array(list)
}

/// GatewayClass or other object with conditions only: the desired `status`.
pub fn class_status(status: &ObjectStatus, old: Option<&Value>, now: &str) -> Value {
    let mut out = old.cloned().unwrap_or_else(|| json!({}));
    out["conditions"] = conditions_json(
        &status.conditions,
        status.generation,
        old.and_then(|o| o.get("conditions")),
        now,
    );
    out
}

/// Gateway `status`: addresses, conditions, listeners.
pub fn gateway_status(
    status: &GatewayStatus,
    old: Option<&Value>,
    addresses: &[String],
    now: &str,
) -> Value {
    let old_listener = |name: &str| {
        old.and_then(|o| o.get("listeners"))
            .and_then(Value::as_array)
            .and_then(|l| l.iter().find(|l| l["name"] == name))
            .and_then(|l| l.get("conditions"))
    };
    let listeners: Vec<Value> = status
        .listeners
        .iter()
        .map(|l| {
            json!({
                "name": l.name,
                "attachedRoutes": l.attached_routes,
                "supportedKinds": l.supported_kinds.iter().map(|k| json!({
                    "group": k.group.as_deref().unwrap_or(sluice_routing::gateway::GROUP),
                    "kind": k.kind,
                })).collect::<Vec<_>>(),
                "conditions": conditions_json(
                    &l.conditions,
                    status.gateway.generation,
                    old_listener(&l.name),
                    now,
                ),
            })
        })
        .collect();
    let addresses: Vec<Value> = addresses
        .iter()
        .map(|a| {
            let kind = if a.parse::<std::net::IpAddr>().is_ok() {
                "IPAddress"
            } else {
                "Hostname"
            };
            json!({"type": kind, "value": a})
        })
        .collect();
    let mut out = json!({
        "conditions": conditions_json(
            &status.gateway.conditions,
            status.gateway.generation,
            old.and_then(|o| o.get("conditions")),
            now,
        ),
        "listeners": listeners,
    });
    if !addresses.is_empty() {
        out["addresses"] = Value::Array(addresses);
    }
    out
}

/// HTTPRoute `status`: other controllers' `parents` entries as they are, ours replaced.
pub fn route_status(
    status: &RouteStatus,
    old: Option<&Value>,
    controller: &str,
    now: &str,
) -> Value {
    let old_parents: Vec<Value> = old
        .and_then(|o| o.get("parents"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut parents: Vec<Value> = old_parents
        .iter()
        .filter(|p| p["controllerName"] != controller)
        .cloned()
        .collect();
    for parent in &status.parents {
        // Written with the schema's defaults filled in, as the API server stores it, so
        // that an unchanged status compares equal to the stored one.
        let mut parent_ref = serde_json::to_value(&parent.parent_ref).unwrap_or(Value::Null);
        if let Some(m) = parent_ref.as_object_mut() {
            m.entry("group")
                .or_insert_with(|| Value::from(sluice_routing::gateway::GROUP));
            m.entry("kind").or_insert_with(|| Value::from("Gateway"));
        }
        let previous = old_parents
            .iter()
            .find(|p| {
                p["controllerName"] == controller && same_parent(&p["parentRef"], &parent_ref)
            })
            .and_then(|p| p.get("conditions"));
        parents.push(json!({
            "parentRef": parent_ref,
            "controllerName": controller,
            "conditions": conditions_json(&parent.conditions, status.generation, previous, now),
        }));
    }
    json!({"parents": parents})
}

/// Whether two `parentRef`s name the same parent, the API server's defaults (group
/// `gateway.networking.k8s.io`, kind `Gateway`) filled in on either side.
fn same_parent(a: &Value, b: &Value) -> bool {
    let norm = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.entry("group")
                .or_insert_with(|| Value::from(sluice_routing::gateway::GROUP));
            m.entry("kind").or_insert_with(|| Value::from("Gateway"));
        }
        v
    };
    norm(a) == norm(b)
}

/// Writes Gateway API status from the rebuild's [`GatewayStatuses`].
#[derive(Clone)]
pub struct GatewayStatusWriter {
    client: kube::Client,
    controller_name: String,
    informers: GatewayInformers,
}

impl GatewayStatusWriter {
    /// A writer comparing against the objects in `informers`' stores.
    pub fn new(client: kube::Client, controller_name: String, informers: GatewayInformers) -> Self {
        GatewayStatusWriter {
            client,
            controller_name,
            informers,
        }
    }

    /// Brings every status in line; returns how many objects were written. `addresses`:
    /// what Gateways publish in `status.addresses` (the Ingress status addresses).
    pub async fn sync(
        &self,
        statuses: &GatewayStatuses,
        addresses: &[String],
    ) -> anyhow::Result<usize> {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let mut written = 0;
        for class in &statuses.classes {
            let Some(current) = self
                .informers
                .classes
                .store()
                .get_by_key(&class.object.name)
            else {
                continue;
            };
            let desired = class_status(class, current.status.as_ref(), &now);
            let api: Api<GatewayClass> = Api::all(self.client.clone());
            written += self
                .write(
                    &api,
                    &class.object.to_string(),
                    &class.object.name,
                    current.status.as_ref(),
                    desired,
                    current.metadata.resource_version.as_deref(),
                )
                .await?;
        }
        for gateway in &statuses.gateways {
            let object = &gateway.gateway.object;
            let key = format!("{}/{}", object.namespace, object.name);
            let Some(current) = self.informers.gateways.store().get_by_key(&key) else {
                continue;
            };
            let desired = gateway_status(gateway, current.status.as_ref(), addresses, &now);
            let api: Api<Gateway> = Api::namespaced(self.client.clone(), &object.namespace);
            written += self
                .write(
                    &api,
                    &object.to_string(),
                    &object.name,
                    current.status.as_ref(),
                    desired,
                    current.metadata.resource_version.as_deref(),
                )
                .await?;
        }
        for route in &statuses.routes {
            let object = &route.object;
            let key = format!("{}/{}", object.namespace, object.name);
            let Some(current) = self.informers.routes.store().get_by_key(&key) else {
                continue;
            };
            let desired = route_status(route, current.status.as_ref(), &self.controller_name, &now);
            let api: Api<HttpRoute> = Api::namespaced(self.client.clone(), &object.namespace);
            written += self
                .write(
                    &api,
                    &object.to_string(),
                    &object.name,
                    current.status.as_ref(),
                    desired,
                    current.metadata.resource_version.as_deref(),
                )
                .await?;
        }
        Ok(written)
    }

    /// Writes `desired` unless it equals `current`; 1 when written.
    async fn write<K>(
        &self,
        api: &Api<K>,
        what: &str,
        name: &str,
        current: Option<&Value>,
        desired: Value,
        resource_version: Option<&str>,
    ) -> anyhow::Result<usize>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        if current == Some(&desired) {
            return Ok(0);
        }
        let patch = json!({
            "metadata": {"resourceVersion": resource_version},
            "status": desired,
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(1),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(0),
            Err(e) => Err(anyhow::anyhow!("update status of {what}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::ObjectRef;
    use sluice_routing::gateway::{ParentReference, RouteParentStatus};

    fn route(conditions: Vec<Condition>) -> RouteStatus {
        RouteStatus {
            object: ObjectRef {
                kind: "HTTPRoute",
                namespace: "default".into(),
                name: "r".into(),
            },
            generation: Some(4),
            parents: vec![RouteParentStatus {
                parent_ref: ParentReference {
                    name: "gw".into(),
                    ..ParentReference::default()
                },
                conditions,
            }],
        }
    }

    #[test]
    fn transition_time_is_kept_while_the_condition_holds() {
        let accepted = vec![Condition::yes("Accepted", "Accepted", "ok")];
        let first = route_status(&route(accepted.clone()), None, "me", "2026-01-01T00:00:00Z");
        let again = route_status(&route(accepted), Some(&first), "me", "2026-01-02T00:00:00Z");
        assert_eq!(first, again, "nothing changed: nothing to write");
        let c = &first["parents"][0]["conditions"][0];
        assert_eq!(c["observedGeneration"], 4);
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        let refused = vec![Condition::no("Accepted", "NotAllowedByListeners", "no")];
        let changed = route_status(&route(refused), Some(&first), "me", "2026-01-03T00:00:00Z");
        let c = &changed["parents"][0]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["lastTransitionTime"].as_str()),
            (Some("False"), Some("2026-01-03T00:00:00Z"))
        );
    }

    #[test]
    fn a_parent_ref_with_the_api_servers_defaults_is_the_same_parent() {
        let accepted = vec![Condition::yes("Accepted", "Accepted", "ok")];
        let first = route_status(&route(accepted.clone()), None, "me", "t1");
        let mut stored = first.clone();
        stored["parents"][0]["parentRef"] =
            json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"});
        let again = route_status(&route(accepted), Some(&stored), "me", "t2");
        assert_eq!(
            again["parents"][0]["conditions"][0]["lastTransitionTime"], "t1",
            "{again}"
        );
    }

    #[test]
    fn other_controllers_parents_are_kept() {
        let theirs = json!({"parentRef": {"name": "other-gw"}, "controllerName": "example.com/x",
            "conditions": [{"type": "Accepted", "status": "True"}]});
        let stale_ours =
            json!({"parentRef": {"name": "gone"}, "controllerName": "me", "conditions": []});
        let old = json!({"parents": [theirs.clone(), stale_ours]});
        let out = route_status(
            &route(vec![Condition::yes("Accepted", "Accepted", "ok")]),
            Some(&old),
            "me",
            "t",
        );
        let parents = out["parents"].as_array().expect("parents");
        assert_eq!(parents.len(), 2, "{out}");
        assert_eq!(parents[0], theirs);
        assert_eq!(
            parents[1]["parentRef"],
            json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"})
        );
        assert_eq!(parents[1]["controllerName"], "me");
    }

    #[test]
    fn gateway_addresses_are_typed() {
        let status = GatewayStatus {
            gateway: ObjectStatus {
                object: ObjectRef {
                    kind: "Gateway",
                    namespace: "d".into(),
                    name: "g".into(),
                },
                generation: Some(1),
                conditions: vec![Condition::yes("Accepted", "Accepted", "ok")],
            },
            listeners: vec![],
        };
        let out = gateway_status(
            &status,
            None,
            &["10.0.0.1".into(), "lb.example".into()],
            "t",
        );
        assert_eq!(
            out["addresses"],
            json!([{"type": "IPAddress", "value": "10.0.0.1"}, {"type": "Hostname", "value": "lb.example"}])
        );
        assert_eq!(out["listeners"], json!([]));
    }
}
