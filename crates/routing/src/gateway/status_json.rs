//! A cached route's `status` as compact JSON text.
//!
//! The compiler reads no status; the controller reads a route's only when it writes that
//! route's. Held as a `serde_json::Value`, one status (a parent with two conditions: five
//! JSON objects, a B-tree node of some 600 bytes each, and thirty strings) took about 4 KB,
//! 40 MB at 10,000 routes; as text it is some 500 bytes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A `status` as the API server sent it, kept as compact JSON text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusJson(Box<str>);

impl StatusJson {
    /// The status as a JSON value (parsed on each call).
    pub fn value(&self) -> Value {
        // Only ever made from a `Value` (below), so it parses.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Value> for StatusJson {
    fn from(value: Value) -> Self {
        StatusJson(value.to_string().into_boxed_str())
    }
}

impl<'de> Deserialize<'de> for StatusJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(StatusJson::from)
    }
}

impl Serialize for StatusJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_round_trips_through_its_text() {
        let status = json!({"parents": [{
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge"},
            "controllerName": "sluice.dev/gateway-controller",
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                            "message": "accepted by sluice", "observedGeneration": 3,
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }]});
        let kept: StatusJson = serde_json::from_value(status.clone()).expect("decodes");
        assert_eq!(kept.value(), status);
        assert_eq!(serde_json::to_value(&kept).expect("encodes"), status);
        let compact = serde_json::to_string(&status).expect("encodes");
        assert_eq!(kept.as_str(), compact, "compact text");
        assert_eq!(StatusJson::from(status.clone()), kept);
    }
}
