//! Problems found while compiling, one per offending field, meant to become Kubernetes Events.

use crate::refs::ObjectRef;

/// One problem with one field of one object. Compilation carries on past it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The object at fault: an Ingress (that is where the Event goes), or, in
    /// [`crate::Compiled::flag_diagnostics`], the Service or Secret a flag names.
    pub object: ObjectRef,
    /// Path of the offending field, e.g. `spec.rules[0].http.paths[1].backend.service.port.name`;
    /// for a flag's object, the flag (`--default-backend-service`).
    pub field: String,
    /// Machine-readable cause.
    pub reason: Reason,
    /// Human sentence naming the object and the field.
    pub message: String,
}

/// Sorts diagnostics as [`crate::Compiled::diagnostics`] lists them: by object, field,
/// reason, message.
pub(crate) fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (&a.object, &a.field, a.reason.as_str(), &a.message).cmp(&(
            &b.object,
            &b.field,
            b.reason.as_str(),
            &b.message,
        ))
    });
}

impl Diagnostic {
    /// Builds a diagnostic; the message is prefixed with the object and the field.
    pub(crate) fn new(
        object: &ObjectRef,
        field: impl Into<String>,
        reason: Reason,
        detail: impl AsRef<str>,
    ) -> Diagnostic {
        let field = field.into();
        let message = format!("{object}: {field}: {}", detail.as_ref());
        Diagnostic {
            object: object.clone(),
            field,
            reason,
            message,
        }
    }
}

/// Why a [`Diagnostic`] was raised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The backend names a Service that does not exist; routed, but answers 503.
    ServiceNotFound,
    /// The Service exists but has no such port; routed, but answers 503.
    PortNotFound,
    /// A rule path or pathType is invalid; that path is skipped.
    InvalidPath,
    /// A rule or TLS host is not a valid DNS name or wildcard; that rule is skipped.
    InvalidHost,
    /// An older Ingress already claimed the same host + path + type (or the default
    /// backend, or the certificate for a host); this definition is ignored.
    ConflictLost {
        /// The Ingress whose definition is used instead.
        winner: ObjectRef,
    },
    /// The TLS Secret does not exist; the hosts are still routed over HTTP.
    TlsSecretMissing,
    /// The TLS Secret lacks `tls.crt`/`tls.key` or they do not parse as PEM.
    TlsSecretInvalid,
    /// A resource backend or an ExternalName Service; that path is skipped.
    UnsupportedBackend,
    /// The backend is malformed (no service name, no port, ...); that path is skipped.
    InvalidBackend,
    /// An annotation sluice does not implement; it has no effect (the message says what to
    /// use instead, where there is something).
    UnsupportedAnnotation,
    /// An annotation whose value is invalid; it has no effect, the rest of the Ingress is
    /// served.
    InvalidAnnotation,
    /// A snippet annotation (nginx configuration text); refused, never applied.
    SnippetRefused,
    /// An annotation that restricts who may reach the routes, which sluice cannot honour
    /// or whose value is invalid: the Ingress's routes answer 503 instead of being served
    /// open.
    FailedClosed,
    /// A canary Ingress's host and path that no main Ingress defines; it gets no traffic.
    CanaryWithoutMain,
}

impl Reason {
    /// CamelCase name, usable as a Kubernetes Event reason.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::ServiceNotFound => "ServiceNotFound",
            Reason::PortNotFound => "PortNotFound",
            Reason::InvalidPath => "InvalidPath",
            Reason::InvalidHost => "InvalidHost",
            Reason::ConflictLost { .. } => "ConflictLost",
            Reason::TlsSecretMissing => "TlsSecretMissing",
            Reason::TlsSecretInvalid => "TlsSecretInvalid",
            Reason::UnsupportedBackend => "UnsupportedBackend",
            Reason::InvalidBackend => "InvalidBackend",
            Reason::UnsupportedAnnotation => "UnsupportedAnnotation",
            Reason::InvalidAnnotation => "InvalidAnnotation",
            Reason::SnippetRefused => "SnippetRefused",
            Reason::FailedClosed => "FailedClosed",
            Reason::CanaryWithoutMain => "CanaryWithoutMain",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
