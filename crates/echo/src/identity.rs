//! Who this echo instance claims to be: reported in every response so tests
//! can tell which backend (service) and which replica (pod) answered.

/// The service and pod names an echo instance reports in every response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Logical service name (the Kubernetes Service this backend belongs to).
    pub service: String,
    /// Replica name (the Pod); sent as the `x-echo-pod` header too.
    pub pod: String,
}

impl Identity {
    /// Builds an identity from a service and a pod name.
    pub fn new(service: impl Into<String>, pod: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            pod: pod.into(),
        }
    }
}

impl Default for Identity {
    /// Service `"echo"`, pod [`default_pod_name`].
    fn default() -> Self {
        Self::new("echo", default_pod_name())
    }
}

/// The machine's hostname (a Pod's name inside Kubernetes), or `"echo"` when it
/// cannot be read.
pub fn default_pod_name() -> String {
    // /proc is what the kernel says now; /etc/hostname is the fallback for
    // environments without procfs. No libc call needed either way.
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "echo".to_owned())
}
