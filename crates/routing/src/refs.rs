//! Names of Kubernetes objects and Service ports, as used in diagnostics and backends.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The order in which objects of every API claim what is contested (a path, a host, a
/// certificate, a rule's precedence): the oldest first by `creationTimestamp` (a missing one
/// counts as newest), then alphabetically by `{namespace}/{name}`, as the Gateway API spec
/// words it for routes and as ingress-nginx's users expect of Ingresses.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Age {
    missing: bool,
    created: Option<Time>,
    key: String,
}

impl Age {
    /// The age of the object with `meta`.
    pub(crate) fn of(meta: &ObjectMeta) -> Age {
        let namespace = meta.namespace.as_deref().unwrap_or("");
        let name = meta.name.as_deref().unwrap_or("");
        Age {
            missing: meta.creation_timestamp.is_none(),
            created: meta.creation_timestamp.clone(),
            key: format!("{namespace}/{name}"),
        }
    }
}

/// A namespaced Kubernetes object, e.g. `Ingress default/web`.
///
/// Ordered by kind, then namespace, then name, which is the order of [`crate::Compiled::ours`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// Kind, e.g. `"Ingress"` or `"Secret"`.
    pub kind: &'static str,
    /// Namespace (empty if the object carried none).
    pub namespace: String,
    /// Name (empty if the object carried none).
    pub name: String,
}

impl ObjectRef {
    /// An `Ingress` reference.
    pub fn ingress(namespace: impl Into<String>, name: impl Into<String>) -> ObjectRef {
        ObjectRef {
            kind: "Ingress",
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A `Service` reference.
    pub fn service(namespace: impl Into<String>, name: impl Into<String>) -> ObjectRef {
        ObjectRef {
            kind: "Service",
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A `Secret` reference.
    pub fn secret(namespace: impl Into<String>, name: impl Into<String>) -> ObjectRef {
        ObjectRef {
            kind: "Secret",
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    /// `"Ingress ns/name"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A port of a Service, named the way the Ingress named it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortRef {
    /// `service.port.number`: the Service port's `port` field.
    Number(i32),
    /// `service.port.name`: the Service port's `name` field.
    Name(String),
}

impl fmt::Display for PortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRef::Number(n) => write!(f, "{n}"),
            PortRef::Name(n) => f.write_str(n),
        }
    }
}

/// A Service port an Ingress routes to: the identity of a [`crate::Backend`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceRef {
    /// Namespace of the Service (always the Ingress's namespace).
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// Which of its ports.
    pub port: PortRef,
}

impl fmt::Display for ServiceRef {
    /// `"namespace/name:port"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.namespace, self.name, self.port)
    }
}
