//! The Gateway API objects sluice reads (`gateway.networking.k8s.io`, standard channel):
//! GatewayClass, Gateway and HTTPRoute at `v1`, ReferenceGrant at `v1beta1`.
//!
//! Only the fields sluice acts on are typed; everything else in an object is ignored when
//! it is decoded, so newer API versions with more fields still decode. `status` is not
//! read by the compiler (the controller writes it from [`crate::gateway::GatewayStatuses`]),
//! and is kept as JSON, for the routes as compact text ([`crate::gateway::StatusJson`]),
//! so that a cached object round-trips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The API group of every Gateway API kind.
pub const GROUP: &str = "gateway.networking.k8s.io";

macro_rules! resource {
    ($ty:ident, $version:literal, $kind:literal, $plural:literal, $scope:ty) => {
        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = concat!("gateway.networking.k8s.io/", $version);
            const GROUP: &'static str = GROUP;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $scope;
        }

        impl k8s_openapi::Metadata for $ty {
            type Ty = ObjectMeta;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// `Serialize` for a top-level kind: `apiVersion` and `kind` first, as a request body to
/// the API server needs them (a derive leaves them out, they are no fields), then the
/// fields; `status` only when set.
macro_rules! serialize_object {
    ($ty:ident, $($field:ident),+ $(; $optional:ident)?) => {
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let mut s = serializer.serialize_struct(stringify!($ty), 5)?;
                s.serialize_field("apiVersion", <$ty as k8s_openapi::Resource>::API_VERSION)?;
                s.serialize_field("kind", <$ty as k8s_openapi::Resource>::KIND)?;
                $(s.serialize_field(stringify!($field), &self.$field)?;)+
                $(match &self.$optional {
                    Some(value) => s.serialize_field(stringify!($optional), value)?,
                    None => s.skip_field(stringify!($optional))?,
                })?
                s.end()
            }
        }
    };
}

serialize_object!(GatewayClass, metadata, spec; status);
serialize_object!(Gateway, metadata, spec; status);
serialize_object!(HttpRoute, metadata, spec; status);
serialize_object!(GrpcRoute, metadata, spec; status);
serialize_object!(TcpRoute, metadata, spec; status);
serialize_object!(TlsRoute, metadata, spec; status);
serialize_object!(UdpRoute, metadata, spec; status);
serialize_object!(ReferenceGrant, metadata, spec);
serialize_object!(BackendTlsPolicy, metadata, spec; status);
serialize_object!(ListenerSet, metadata, spec; status);

resource!(
    GatewayClass,
    "v1",
    "GatewayClass",
    "gatewayclasses",
    k8s_openapi::ClusterResourceScope
);
resource!(
    Gateway,
    "v1",
    "Gateway",
    "gateways",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    HttpRoute,
    "v1",
    "HTTPRoute",
    "httproutes",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    GrpcRoute,
    "v1",
    "GRPCRoute",
    "grpcroutes",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    TcpRoute,
    "v1",
    "TCPRoute",
    "tcproutes",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    TlsRoute,
    "v1",
    "TLSRoute",
    "tlsroutes",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    UdpRoute,
    "v1",
    "UDPRoute",
    "udproutes",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    ListenerSet,
    "v1",
    "ListenerSet",
    "listenersets",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    BackendTlsPolicy,
    "v1",
    "BackendTLSPolicy",
    "backendtlspolicies",
    k8s_openapi::NamespaceResourceScope
);
resource!(
    ReferenceGrant,
    "v1beta1",
    "ReferenceGrant",
    "referencegrants",
    k8s_openapi::NamespaceResourceScope
);

/// `GatewayClass`: a kind of Gateway, claimed by the controller named in `controllerName`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClass {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: GatewayClassSpec,
    /// `status`, as last written (not read by the compiler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `GatewayClass.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// The controller that manages Gateways of this class (`sluice.dev/gateway-controller`).
    #[serde(default)]
    pub controller_name: String,
    /// `parametersRef`; sluice has no parameters and refuses a class that names some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<serde_json::Value>,
}

/// `Gateway`: listeners (ports, protocols, host names, certificates) of one class.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gateway {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: GatewaySpec,
    /// `status`, as last written (not read by the compiler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `Gateway.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The GatewayClass.
    #[serde(default)]
    pub gateway_class_name: String,
    /// `infrastructure`: `parametersRef` (sluice has no parameters and refuses a Gateway
    /// that names some), and the labels and annotations of the Gateway's Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure: Option<GatewayInfrastructure>,
    /// The listeners.
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Requested addresses (`{type, value}`): IP addresses are bound (see `addresses.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<serde_json::Value>,
    /// `tls`: client certificate validation on the Gateway's TLS ports (`frontend`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<GatewayTls>,
    /// `allowedListeners`: which ListenerSets may add listeners (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_listeners: Option<AllowedListeners>,
}

/// `Gateway.spec.allowedListeners`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedListeners {
    /// From which namespaces; `None` (the default): from none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
}

/// `Gateway.spec.tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTls {
    /// `frontend`: how clients connecting to the Gateway are validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<FrontendTls>,
    /// `backend`: what the Gateway shows backends that ask for a client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<GatewayBackendTls>,
}

/// `Gateway.spec.tls.backend`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayBackendTls {
    /// A `kubernetes.io/tls` Secret: the client certificate shown to backends connected to
    /// over TLS that ask for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_ref: Option<SecretObjectReference>,
}

/// `Gateway.spec.tls.frontend`: a default for every TLS port, and per-port settings that
/// replace it on their port.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTls {
    /// `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<FrontendTlsConfig>,
    /// `perPort[]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_port: Vec<FrontendTlsPort>,
}

/// `frontend.perPort[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTlsPort {
    /// The listener port it applies to.
    #[serde(default)]
    pub port: i32,
    /// Its settings.
    #[serde(default)]
    pub tls: FrontendTlsConfig,
}

/// `frontend.default` / `perPort[].tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendTlsConfig {
    /// `validation`: client certificates are asked for and checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<FrontendValidation>,
}

/// `FrontendTLSValidation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendValidation {
    /// ConfigMaps whose `ca.crt` holds the CA certificates (PEM) a client certificate must
    /// chain to.
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectReference>,
    /// `AllowValidOnly` (the default) or `AllowInsecureFallback`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// A reference to an object of any kind, possibly in another namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// `""` for core.
    #[serde(default)]
    pub group: String,
    /// The kind (`ConfigMap`).
    #[serde(default)]
    pub kind: String,
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The referrer's namespace by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `Gateway.spec.infrastructure`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayInfrastructure {
    /// `parametersRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<serde_json::Value>,
    /// Labels for what sluice creates for the Gateway (its Service, with
    /// `--gateway-service-type`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Annotations for the same.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// `Gateway.spec.listeners[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Unique within the Gateway; what `parentRefs[].sectionName` names.
    #[serde(default)]
    pub name: String,
    /// Requests for other host names are not for this listener; `None`: every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The port (what `parentRefs[].port` names).
    #[serde(default)]
    pub port: i32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP`; sluice serves HTTP and HTTPS.
    #[serde(default)]
    pub protocol: String,
    /// Certificates of an HTTPS listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ListenerTls>,
    /// Which routes may attach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `listeners[].tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    /// `Terminate` (the default) or `Passthrough` (not supported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Secrets (`kubernetes.io/tls`) holding the certificate and key.
    #[serde(default)]
    pub certificate_refs: Vec<SecretObjectReference>,
}

/// A reference to a Secret, possibly in another namespace (then a ReferenceGrant must allow it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretObjectReference {
    /// `""` (core) by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Secret` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The Secret's name.
    #[serde(default)]
    pub name: String,
    /// The Gateway's namespace by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `listeners[].allowedRoutes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// From which namespaces (default: the Gateway's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
    /// Which route kinds (default: those the protocol supports, here HTTPRoute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<RouteGroupKind>,
}

/// `allowedRoutes.namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (default), `All` or `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Namespace labels, for `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A route kind (`allowedRoutes.kinds[]`, `status.listeners[].supportedKinds[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// `gateway.networking.k8s.io` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `HTTPRoute`, ...
    #[serde(default)]
    pub kind: String,
}

/// `HTTPRoute`: HTTP rules attached to Gateway listeners.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: HttpRouteSpec,
    /// `status`, as last written (not read by the compiler; the controller merges its own
    /// `parents[]` entries into it and keeps other controllers').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<super::StatusJson>,
}

/// `HTTPRoute.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    /// The Gateways (or their listeners) this route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Host names, intersected with each listener's; empty: the listeners'.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// The rules; empty means one rule matching `/` with no backend.
    #[serde(default)]
    pub rules: Vec<HttpRouteRule>,
}

/// `GRPCRoute`: gRPC rules (service and method, headers) attached to Gateway listeners;
/// compiled as the equivalent HTTPRoute (see `grpc.rs`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRoute {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: GrpcRouteSpec,
    /// `status`, as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<super::StatusJson>,
}

/// `GRPCRoute.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteSpec {
    /// The Gateways (or their listeners) this route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Host names, intersected with each listener's; empty: the listeners'.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// The rules; empty means one rule matching every call with no backend.
    #[serde(default)]
    pub rules: Vec<GrpcRouteRule>,
}

/// `GRPCRoute` `rules[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteRule {
    /// Any of these matches selects the rule; empty: every call.
    #[serde(default)]
    pub matches: Vec<GrpcRouteMatch>,
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestMirror` (the HTTPRoute
    /// filters of the same names and shapes).
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    /// Where matching calls go, by weight.
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
}

/// `GRPCRoute` `rules[].matches[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteMatch {
    /// The service and method called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<GrpcMethodMatch>,
    /// Request header (metadata) conditions.
    #[serde(default)]
    pub headers: Vec<HttpHeaderMatch>,
}

/// `GRPCRoute` `matches[].method`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcMethodMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The fully qualified service (`package.Service`); any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The method; any when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// `TCPRoute`: every connection to a TCP listener goes to its backends, by weight.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: StreamRouteSpec,
    /// `status`, as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<super::StatusJson>,
}

/// `TLSRoute`: connections to a TLS `Passthrough` listener go, by the SNI of their
/// ClientHello, to its backends, the TLS bytes untouched.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRoute {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: StreamRouteSpec,
    /// `status`, as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<super::StatusJson>,
}

/// `UDPRoute`: the datagrams of each client of a UDP listener go to one endpoint of its
/// backends, drawn by weight.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UdpRoute {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: StreamRouteSpec,
    /// `status`, as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<super::StatusJson>,
}

/// The `spec` of `TCPRoute`, `TLSRoute` and `UDPRoute` (TLSRoute alone has `hostnames`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRouteSpec {
    /// The Gateways (or their listeners) this route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// `TLSRoute`: SNI host names, intersected with each listener's.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// One rule (the CRD allows no more).
    #[serde(default)]
    pub rules: Vec<StreamRouteRule>,
}

/// A `TCPRoute` / `TLSRoute` rule: where connections go.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamRouteRule {
    /// Backends, by weight.
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
}

/// `parentRefs[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// `gateway.networking.k8s.io` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Gateway` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The route's namespace by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The Gateway's name.
    #[serde(default)]
    pub name: String,
    /// A listener name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// A listener port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// `rules[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    /// Any of these matches selects the rule; empty: one match of `PathPrefix /`.
    #[serde(default)]
    pub matches: Vec<HttpRouteMatch>,
    /// Applied in order to requests that match.
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    /// Where matching requests go, by weight.
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    /// `timeouts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<HttpRouteTimeouts>,
    /// `retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<HttpRouteRetry>,
}

/// `rules[].retry`: when a failed try is repeated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRetry {
    /// Response statuses (500-599) that are tried again.
    #[serde(default)]
    pub codes: Vec<i32>,
    /// How many times a request is tried again (not counting the first try).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
    /// The wait before each repeated try (a Gateway API duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
}

/// `rules[].matches[]`: every condition given must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    /// Default `PathPrefix /`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathMatch>,
    /// Request header conditions.
    #[serde(default)]
    pub headers: Vec<HttpHeaderMatch>,
    /// Query parameter conditions.
    #[serde(default)]
    pub query_params: Vec<HttpHeaderMatch>,
    /// `GET`, `POST`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// `matches[].path`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathMatch {
    /// `Exact`, `PathPrefix` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Default `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `matches[].headers[]` and `matches[].queryParams[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeaderMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Header names compare case-insensitively, query parameter names exactly.
    #[serde(default)]
    pub name: String,
    /// The value (or pattern).
    #[serde(default)]
    pub value: String,
}

/// `filters[]`: one of the typed fields, as `type` says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteFilter {
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestRedirect`, `URLRewrite`,
    /// `RequestMirror`, `CORS`, `ExtensionRef`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// For `RequestHeaderModifier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<HttpHeaderFilter>,
    /// For `ResponseHeaderModifier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_header_modifier: Option<HttpHeaderFilter>,
    /// For `RequestRedirect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<HttpRequestRedirectFilter>,
    /// For `URLRewrite`.
    #[serde(
        default,
        rename = "urlRewrite",
        skip_serializing_if = "Option::is_none"
    )]
    pub url_rewrite: Option<HttpUrlRewriteFilter>,
    /// For `RequestMirror`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_mirror: Option<HttpRequestMirrorFilter>,
    /// For `CORS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<HttpCorsFilter>,
}

/// `CORS`: the cross-origin answers of the route.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpCorsFilter {
    /// `https://a.example`, `https://*.example`, or `*`.
    #[serde(default)]
    pub allow_origins: Vec<String>,
    /// Methods, or `*`.
    #[serde(default)]
    pub allow_methods: Vec<String>,
    /// Request header names, or `*`.
    #[serde(default)]
    pub allow_headers: Vec<String>,
    /// Response header names the browser may show to the page.
    #[serde(default)]
    pub expose_headers: Vec<String>,
    /// `Access-Control-Allow-Credentials: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
    /// `Access-Control-Max-Age` (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i32>,
}

/// `RequestHeaderModifier` / `ResponseHeaderModifier`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeaderFilter {
    /// Replace (or add) these.
    #[serde(default)]
    pub set: Vec<HttpHeader>,
    /// Append these.
    #[serde(default)]
    pub add: Vec<HttpHeader>,
    /// Remove these names.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// A header name and value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpHeader {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The value.
    #[serde(default)]
    pub value: String,
}

/// `RequestRedirect`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestRedirectFilter {
    /// `http` or `https`; default: the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Default: the request's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Default: the request's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathModifier>,
    /// Default: see the spec (the scheme's well-known port is left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// 301 or 302 (default 302).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i32>,
}

/// `URLRewrite`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpUrlRewriteFilter {
    /// The Host sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The path sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpPathModifier>,
}

/// `path` of `RequestRedirect` and `URLRewrite`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// For `ReplaceFullPath`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    /// For `ReplacePrefixMatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

/// `RequestMirror`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestMirrorFilter {
    /// Where copies go.
    #[serde(default)]
    pub backend_ref: BackendObjectReference,
    /// Share of requests mirrored, 0..=100 (default all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i32>,
    /// Share of requests mirrored as a fraction (default all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<Fraction>,
}

/// `fraction` of `RequestMirror`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fraction {
    /// Numerator.
    #[serde(default)]
    pub numerator: i32,
    /// Denominator, default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denominator: Option<i32>,
}

/// A reference to a backend (a Service port by default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendObjectReference {
    /// `""` (core) by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Service` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The route's namespace by default (another needs a ReferenceGrant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The Service port (required for Services).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// `rules[].backendRefs[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpBackendRef {
    /// The backend.
    #[serde(flatten)]
    pub backend: BackendObjectReference,
    /// Share of the rule's requests, relative to the other refs' (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Filters for requests sent to this backend only (not supported: reported).
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
}

/// `rules[].timeouts`: Gateway API durations (`1h2m3s4ms`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteTimeouts {
    /// The whole request, from the client's request to the last response byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// One try towards the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_request: Option<String>,
}

/// `ReferenceGrant` (`v1beta1`): lets objects of other namespaces refer to objects here.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrant {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: ReferenceGrantSpec,
}

/// `ReferenceGrant.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    /// Who may refer.
    #[serde(default)]
    pub from: Vec<ReferenceGrantFrom>,
    /// To what, in the grant's namespace.
    #[serde(default)]
    pub to: Vec<ReferenceGrantTo>,
}

/// `ReferenceGrant.spec.from[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantFrom {
    /// The referring kind's group.
    #[serde(default)]
    pub group: String,
    /// The referring kind.
    #[serde(default)]
    pub kind: String,
    /// The referring objects' namespace.
    #[serde(default)]
    pub namespace: String,
}

/// `ReferenceGrant.spec.to[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantTo {
    /// The referred kind's group (`""` for core).
    #[serde(default)]
    pub group: String,
    /// The referred kind.
    #[serde(default)]
    pub kind: String,
    /// One object, or every object of the kind when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BackendTLSPolicy CRD (v1.6.1) spells it `wellKnownCACertificates`.
    #[test]
    fn well_known_ca_certificates_is_read_with_the_crd_s_spelling() {
        let validation: BackendTlsValidation = serde_json::from_value(serde_json::json!({
            "hostname": "api.example",
            "wellKnownCACertificates": "System"
        }))
        .expect("reads");
        assert_eq!(
            validation.well_known_ca_certificates.as_deref(),
            Some("System")
        );
    }

    #[test]
    fn objects_serialize_with_api_version_and_kind_and_read_back() {
        let route = HttpRoute {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..ObjectMeta::default()
            },
            ..HttpRoute::default()
        };
        let json = serde_json::to_value(&route).expect("serializes");
        assert_eq!(json["apiVersion"], "gateway.networking.k8s.io/v1");
        assert_eq!(json["kind"], "HTTPRoute");
        assert!(json.get("status").is_none(), "{json}");
        let back: HttpRoute = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, route);
        let grant = serde_json::to_value(ReferenceGrant::default()).expect("serializes");
        assert_eq!(
            (&grant["apiVersion"], &grant["kind"]),
            (
                &serde_json::json!("gateway.networking.k8s.io/v1beta1"),
                &serde_json::json!("ReferenceGrant")
            )
        );
        let class = GatewayClass {
            status: Some(serde_json::json!({"conditions": []})),
            ..GatewayClass::default()
        };
        let json = serde_json::to_value(&class).expect("serializes");
        assert_eq!(json["status"], serde_json::json!({"conditions": []}));
        assert_eq!(json["kind"], "GatewayClass");
    }
}

/// `BackendTLSPolicy`: how the Gateway connects to a Service's port over TLS (Gateway API
/// `BackendTLSPolicy`): the CA certificates its certificate must chain to and the name it
/// is checked against and sent as SNI.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsPolicy {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: BackendTlsPolicySpec,
    /// `status`, as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `BackendTLSPolicy.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsPolicySpec {
    /// The Services (and ports, by `sectionName`) it applies to.
    #[serde(default)]
    pub target_refs: Vec<PolicyTargetReference>,
    /// How the backend's certificate is checked.
    #[serde(default)]
    pub validation: BackendTlsValidation,
}

/// `targetRefs[]` of a policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetReference {
    /// `""` for core.
    #[serde(default)]
    pub group: String,
    /// `Service`.
    #[serde(default)]
    pub kind: String,
    /// The Service's name (in the policy's namespace).
    #[serde(default)]
    pub name: String,
    /// A port name; `None`: every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// `BackendTLSPolicy.spec.validation`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsValidation {
    /// ConfigMaps (in the policy's namespace) whose `ca.crt` holds the CA certificates.
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectReference>,
    /// `System`: the system's trust store instead of `caCertificateRefs`. (The CRD spells
    /// it `wellKnownCACertificates`, which camelCase would not produce.)
    #[serde(
        default,
        rename = "wellKnownCACertificates",
        skip_serializing_if = "Option::is_none"
    )]
    pub well_known_ca_certificates: Option<String>,
    /// The SNI sent, and the name the certificate must carry unless `subjectAltNames` is
    /// given.
    #[serde(default)]
    pub hostname: String,
    /// Names of which the certificate must carry one (instead of `hostname`).
    #[serde(default)]
    pub subject_alt_names: Vec<SubjectAltNameSpec>,
}

/// `subjectAltNames[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubjectAltNameSpec {
    /// `Hostname` or `URI`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// For `Hostname`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// For `URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// `ListenerSet`: listeners added to a Gateway that allows it (`allowedListeners`); routes
/// attach to them by naming the ListenerSet as their parent.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSet {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: ListenerSetSpec,
    /// `status`, as last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `ListenerSet.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSetSpec {
    /// The Gateway the listeners join.
    #[serde(default)]
    pub parent_ref: ParentGatewayReference,
    /// The listeners, as a Gateway's.
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

/// `ListenerSet.spec.parentRef`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentGatewayReference {
    /// `gateway.networking.k8s.io` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `Gateway` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The Gateway's name.
    #[serde(default)]
    pub name: String,
    /// The ListenerSet's namespace by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
