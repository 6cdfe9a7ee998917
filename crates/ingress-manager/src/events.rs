//! Kubernetes Events on Services (events.k8s.io/v1, through kube's [`Recorder`]), so that
//! `kubectl describe service` tells why a Service has, or has not, its Ingress.

use crate::MANAGER_NAME;
use k8s_openapi::api::core::v1::Service;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Reason: the Ingress was created.
pub const INGRESS_CREATED: &str = "IngressCreated";
/// Reason: the Ingress was put back to the desired state.
pub const INGRESS_UPDATED: &str = "IngressUpdated";
/// Reason: the annotation went away and the owned Ingress was deleted.
pub const INGRESS_DELETED: &str = "IngressDeleted";
/// Reason (warning): an Ingress of the Service's name exists and the Service does not own it.
pub const INGRESS_NOT_OWNED: &str = "IngressNotOwned";

/// Publishes Events about Services. Cheap to clone.
#[derive(Clone)]
pub struct ServiceEvents {
    recorder: Recorder,
}

impl std::fmt::Debug for ServiceEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceEvents").finish_non_exhaustive()
    }
}

impl ServiceEvents {
    /// Events reported as `sluice-ingress-manager`, instance `$POD_NAME` when set (the
    /// Deployment passes it through the downward API).
    pub fn new(client: kube::Client) -> Self {
        let reporter = Reporter {
            controller: MANAGER_NAME.to_string(),
            instance: std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()),
        };
        ServiceEvents {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A Normal event on `svc`.
    pub async fn normal(&self, svc: &Service, reason: &str, action: &str, note: String) {
        self.publish(svc, EventType::Normal, reason, action, note)
            .await;
    }

    /// A Warning event on `svc`.
    pub async fn warning(&self, svc: &Service, reason: &str, action: &str, note: String) {
        self.publish(svc, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        svc: &Service,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        // Best effort: the work an Event reports is done; failing to tell must not make the
        // reconcile fail and redo it.
        if let Err(err) = self.recorder.publish(&event, &svc.object_ref(&())).await {
            tracing::warn!(
                service = %svc.metadata.name.as_deref().unwrap_or_default(),
                namespace = %svc.metadata.namespace.as_deref().unwrap_or_default(),
                reason,
                error = %err,
                "cannot record an Event"
            );
        }
    }
}
