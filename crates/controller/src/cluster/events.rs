//! The compiler's diagnostics as Kubernetes Events on the object they concern, emitted when
//! a condition appears (not on every rebuild) and by the leader only.

use crate::diagnostics::Seen;
use crate::rebuild::RebuildReport;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::networking::v1::Ingress;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use sluice_informer::Store;
use sluice_routing::Diagnostic;
use std::sync::Arc;
use tokio::sync::watch;

/// Publishes diagnostics as Warning Events.
pub struct EventPublisher {
    recorder: Recorder,
    ingresses: Store<Ingress>,
    seen: Seen,
}

impl EventPublisher {
    /// A publisher reporting as `controller` (the `reportingController` of its Events).
    pub fn new(
        client: kube::Client,
        controller: &str,
        instance: &str,
        ingresses: Store<Ingress>,
    ) -> Self {
        let reporter = Reporter {
            controller: controller.into(),
            instance: Some(instance.into()),
        };
        EventPublisher {
            recorder: Recorder::new(client, reporter),
            ingresses,
            seen: Seen::default(),
        }
    }

    fn reference(&self, d: &Diagnostic) -> ObjectReference {
        let key = format!("{}/{}", d.object.namespace, d.object.name);
        let (api_version, uid) = match d.object.kind {
            "Ingress" => (
                "networking.k8s.io/v1",
                self.ingresses
                    .get_by_key(&key)
                    .and_then(|i| i.metadata.uid.clone()),
            ),
            "HTTPRoute" | "GRPCRoute" => ("gateway.networking.k8s.io/v1", None),
            _ => ("v1", None),
        };
        ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(d.object.kind.into()),
            namespace: Some(d.object.namespace.clone()),
            name: Some(d.object.name.clone()),
            uid,
            ..Default::default()
        }
    }

    /// Emits Events for the diagnostics of `report` that were not there last time. Only the
    /// leader publishes; a replica that becomes leader announces what is current once.
    pub async fn publish(&mut self, report: &RebuildReport, leading: bool) {
        if !leading {
            self.seen = Seen::default();
            return;
        }
        let fresh: Vec<Diagnostic> = self
            .seen
            .appeared(&report.diagnostics)
            .into_iter()
            .cloned()
            .collect();
        for d in fresh {
            let ev = Event {
                type_: EventType::Warning,
                reason: d.reason.as_str().to_string(),
                note: Some(truncate(&format!("{}: {}", d.field, d.message), 1000)),
                action: "Route".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&ev, &self.reference(&d)).await {
                tracing::warn!(object = %d.object, error = %e, "could not publish Event");
            }
        }
    }

    /// Runs until `reports` closes: one pass per rebuild.
    pub async fn run(
        mut self,
        mut reports: watch::Receiver<Arc<RebuildReport>>,
        mut leading: watch::Receiver<bool>,
    ) {
        loop {
            let report = reports.borrow_and_update().clone();
            let lead = *leading.borrow_and_update();
            self.publish(&report, lead).await;
            tokio::select! {
                r = reports.changed() => if r.is_err() { break },
                l = leading.changed() => if l.is_err() { break },
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
