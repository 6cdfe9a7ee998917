//! One reconcile of one Service key: read the Service and the Ingress of the same name from
//! the informers' listers (never a GET), compute the desired Ingress, and make the cluster
//! agree with the fewest writes: none when it already does.

use crate::MANAGER_NAME;
use crate::desired::{DesiredOptions, desired_ingress, wants_ingress};
use crate::drift::in_sync;
use crate::events::{
    INGRESS_CREATED, INGRESS_DELETED, INGRESS_NOT_OWNED, INGRESS_UPDATED, ServiceEvents,
};
use crate::ownership::is_owned_by;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use sluice_informer::{Lister, split_key};
use std::fmt;

/// A failed write; the controller requeues the key with backoff.
#[derive(Debug, thiserror::Error)]
#[error("{action} Ingress {key}: {source}")]
pub struct ReconcileError {
    /// What was attempted (`create`, `update`, `delete`).
    pub action: &'static str,
    /// `namespace/name`.
    pub key: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// What a reconcile did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The Service is gone or going: its Ingress follows through the garbage collector.
    ServiceGone,
    /// No annotation and no Ingress of ours: nothing to do.
    NotWanted,
    /// The Ingress already is as desired.
    InSync,
    /// The owned Ingress is being deleted; its delete event brings the Service back.
    IngressDeleting,
    /// Created the Ingress.
    Created,
    /// Put the Ingress back to the desired state.
    Updated,
    /// Deleted the owned Ingress (annotation removed).
    Deleted,
    /// Could not act (Ingress not owned, no ports, invalid host): warning Event, no retry.
    Warned,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Reconciles Service keys. Shared by all workers.
#[derive(Clone)]
pub struct Reconciler {
    services: Lister<Service>,
    ingresses: Lister<Ingress>,
    client: kube::Client,
    options: DesiredOptions,
    events: ServiceEvents,
}

impl fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reconciler")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// A reconciler reading from the two listers and writing through `client`.
    pub fn new(
        services: Lister<Service>,
        ingresses: Lister<Ingress>,
        client: kube::Client,
        options: DesiredOptions,
        events: ServiceEvents,
    ) -> Self {
        Reconciler {
            services,
            ingresses,
            client,
            options,
            events,
        }
    }

    /// Makes the Ingress of Service `key` (`namespace/name`) what the Service asks for.
    pub async fn reconcile(&self, key: &str) -> Result<Outcome, ReconcileError> {
        let (ns, name) = split_key(key);
        let ns = ns.unwrap_or_default();
        let Some(svc) = self.services.get(ns, name) else {
            // Deleted: the garbage collector removes the Ingress through its ownerReference.
            return Ok(Outcome::ServiceGone);
        };
        let Some(uid) = svc
            .metadata
            .uid
            .as_deref()
            .filter(|_| svc.metadata.deletion_timestamp.is_none())
        else {
            return Ok(Outcome::ServiceGone);
        };
        let live = self.ingresses.get(ns, name);
        let owned = live.as_deref().is_some_and(|ing| is_owned_by(ing, uid));
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), ns);
        let err = |action| {
            move |source| ReconcileError {
                action,
                key: key.to_string(),
                source,
            }
        };

        if !wants_ingress(&svc) {
            // An Ingress we do not own is someone else's, whatever its name: leave it be.
            let Some(ing) = live.filter(|_| owned) else {
                return Ok(Outcome::NotWanted);
            };
            if ing.metadata.deletion_timestamp.is_some() {
                return Ok(Outcome::IngressDeleting);
            }
            // Preconditions: delete exactly the version we saw to be ours, not one that
            // changed hands since.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: ing.metadata.uid.clone(),
                    resource_version: ing.metadata.resource_version.clone(),
                }),
                ..DeleteParams::background()
            };
            match api.delete(name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(Outcome::Deleted),
                Err(e) => return Err(err("delete")(e)),
            }
            tracing::info!(
                ingress = key,
                "deleted Ingress: annotation ingress/http removed"
            );
            let note = format!("Deleted Ingress {name}: annotation ingress/http removed");
            self.events
                .normal(&svc, INGRESS_DELETED, "DeleteIngress", note)
                .await;
            return Ok(Outcome::Deleted);
        }

        if let Some(ing) = live.as_deref().filter(|_| !owned) {
            let owner = ing
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true))
                .map(|r| format!(" (controlled by {} {})", r.kind, r.name))
                .unwrap_or_default();
            let note = format!(
                "Ingress {name} exists and is not owned by this Service{owner}; leaving it alone. \
                 Delete it, or rename the Service, to get a managed Ingress."
            );
            self.events
                .warning(&svc, INGRESS_NOT_OWNED, "Reconcile", note)
                .await;
            return Ok(Outcome::Warned);
        }

        let mut desired = match desired_ingress(&svc, &self.options) {
            Ok(d) => d,
            Err(e) => {
                // An owned Ingress, if any, keeps its last good state: a broken annotation
                // should not take a working route down.
                tracing::warn!(service = key, error = %e, "cannot build the Ingress");
                self.events
                    .warning(&svc, e.reason(), "Reconcile", e.to_string())
                    .await;
                return Ok(Outcome::Warned);
            }
        };

        match live {
            None => {
                // Without force: should an Ingress of this name appear behind the lister's
                // back, conflicting fields make the apply fail instead of taking it over.
                api.patch(
                    name,
                    &PatchParams::apply(MANAGER_NAME),
                    &Patch::Apply(&desired),
                )
                .await
                .map_err(err("create"))?;
                tracing::info!(ingress = key, "created Ingress");
                let note = format!("Created Ingress {name} for host {}", host_of(&desired));
                self.events
                    .normal(&svc, INGRESS_CREATED, "CreateIngress", note)
                    .await;
                Ok(Outcome::Created)
            }
            Some(ing) if ing.metadata.deletion_timestamp.is_some() => Ok(Outcome::IngressDeleting),
            Some(ing) if in_sync(&ing, &desired) => Ok(Outcome::InSync),
            Some(ing) => {
                // Force: the fields we manage win over whoever edited them. The
                // resourceVersion makes it conditional on the object we compared.
                desired.metadata.resource_version = ing.metadata.resource_version.clone();
                api.patch(
                    name,
                    &PatchParams::apply(MANAGER_NAME).force(),
                    &Patch::Apply(&desired),
                )
                .await
                .map_err(err("update"))?;
                tracing::info!(ingress = key, "put Ingress back to the desired state");
                let note = format!(
                    "Put Ingress {name} back to the desired state (host {})",
                    host_of(&desired)
                );
                self.events
                    .normal(&svc, INGRESS_UPDATED, "UpdateIngress", note)
                    .await;
                Ok(Outcome::Updated)
            }
        }
    }
}

fn host_of(ing: &Ingress) -> &str {
    ing.spec
        .as_ref()
        .and_then(|s| s.rules.as_ref())
        .and_then(|r| r.first())
        .and_then(|r| r.host.as_deref())
        .unwrap_or_default()
}
