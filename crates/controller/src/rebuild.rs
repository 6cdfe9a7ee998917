//! The rebuild loop: any change enqueues one key; the worker compiles the stores into a new
//! routing table and swaps it in. Changes that arrive while a rebuild runs coalesce into one
//! more rebuild (the work queue holds a key at most once), so a burst of events costs two
//! compiles, not one per event.

use crate::sources::IngressInformers;
use sluice_informer::workqueue::WorkQueue;
use sluice_proxy::TableHandle;
use sluice_routing::{CompileOptions, Compiled, Diagnostic, Inputs, ObjectRef, compile};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// What the last rebuild produced besides the table: for Events and status.
#[derive(Debug, Default)]
pub struct RebuildReport {
    /// Rebuilds so far.
    pub generation: u64,
    /// Rules the compiler could not serve.
    pub diagnostics: Vec<Diagnostic>,
    /// Ingresses of our class.
    pub ours: Vec<ObjectRef>,
    /// Ingresses in the stores that are not of our class (not served).
    pub unserved: Vec<ObjectRef>,
    /// Problems with the objects the flags name (`--default-backend-service`,
    /// `--default-ssl-certificate`); logged when they appear and when they are gone.
    pub flag_diagnostics: Vec<Diagnostic>,
}

/// Drives rebuilds from informer changes.
pub struct Rebuilder {
    informers: IngressInformers,
    options: CompileOptions,
    table: TableHandle,
    queue: WorkQueue<&'static str>,
    report: watch::Sender<Arc<RebuildReport>>,
    /// The inputs of the last rebuild, for `sluice explain` through the admin port.
    last_inputs: Arc<Mutex<Arc<Inputs>>>,
}

const KEY: &str = "rebuild";

impl Rebuilder {
    /// Registers change handlers on `informers`; call [`Rebuilder::run`] to start working.
    pub fn new(informers: IngressInformers, options: CompileOptions, table: TableHandle) -> Self {
        let queue = WorkQueue::new();
        let q = queue.clone();
        informers.on_change(move || q.add(KEY));
        let (report, _) = watch::channel(Arc::new(RebuildReport::default()));
        let last_inputs = Arc::new(Mutex::new(Arc::new(Inputs::default())));
        let explained = Arc::clone(&last_inputs);
        let explain_options = options.clone();
        table.set_explainer(move |host, path| {
            let inputs = Arc::clone(&explained.lock().unwrap_or_else(|e| e.into_inner()));
            sluice_routing::explain(&inputs, &explain_options, host, path).to_string()
        });
        Rebuilder {
            informers,
            options,
            table,
            queue,
            report,
            last_inputs,
        }
    }

    /// Follows every rebuild's diagnostics and Ingresses of our class.
    pub fn reports(&self) -> watch::Receiver<Arc<RebuildReport>> {
        self.report.subscribe()
    }

    /// The queue, to stop the loop with `shut_down`.
    pub fn queue(&self) -> WorkQueue<&'static str> {
        self.queue.clone()
    }

    /// Compiles once now (e.g. right after the caches synced).
    pub fn rebuild_now(&self) {
        let started = Instant::now();
        let inputs = self.informers.inputs();
        let Compiled {
            table,
            diagnostics,
            ours,
            flag_diagnostics,
        } = compile(&inputs, &self.options);
        let unserved = unserved(&inputs, &ours);
        let elapsed = started.elapsed();
        self.table.update(table, elapsed);
        self.table.set_warnings(warnings(
            &inputs,
            &diagnostics,
            &flag_diagnostics,
            &unserved,
            &self.options,
        ));
        *self.last_inputs.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(inputs);
        let previous = self.report.borrow().clone();
        log_flag_changes(&previous.flag_diagnostics, &flag_diagnostics);
        let generation = previous.generation + 1;
        tracing::debug!(
            generation,
            ?elapsed,
            diagnostics = diagnostics.len(),
            "routing table rebuilt"
        );
        self.report.send_replace(Arc::new(RebuildReport {
            generation,
            diagnostics,
            ours,
            unserved,
            flag_diagnostics,
        }));
    }

    /// Rebuilds whenever something changed, until the queue is shut down.
    pub async fn run(&self) {
        while let Some(key) = self.queue.get().await {
            self.rebuild_now();
            self.queue.done(&key);
        }
    }
}

/// What the dashboard lists as warnings: the compiler's diagnostics, the flags' problems,
/// and the Ingresses no class selects at all (no class, or a class that does not exist).
/// Ingresses of another controller's existing class are normal in a shared cluster.
fn warnings(
    inputs: &Inputs,
    diagnostics: &[Diagnostic],
    flags: &[Diagnostic],
    unserved: &[ObjectRef],
    options: &CompileOptions,
) -> Vec<sluice_proxy::Warning> {
    let mut out: Vec<sluice_proxy::Warning> = diagnostics
        .iter()
        .chain(flags)
        .map(|d| sluice_proxy::Warning {
            object: d.object.to_string(),
            field: d.field.clone(),
            reason: d.reason.as_str().to_owned(),
            message: d.message.clone(),
        })
        .collect();
    let orphaned = |ingress: &&ObjectRef| {
        inputs.ingresses.iter().any(|i| {
            let meta = &i.metadata;
            if meta.namespace.as_deref().unwrap_or("") != ingress.namespace
                || meta.name.as_deref().unwrap_or("") != ingress.name
            {
                return false;
            }
            let legacy = meta
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(sluice_routing::LEGACY_CLASS_ANNOTATION));
            match i
                .spec
                .as_ref()
                .and_then(|s| s.ingress_class_name.as_deref())
            {
                Some(name) if !name.is_empty() => !inputs
                    .ingress_classes
                    .iter()
                    .any(|c| c.metadata.name.as_deref() == Some(name)),
                _ => !legacy,
            }
        })
    };
    out.extend(
        unserved
            .iter()
            .filter(orphaned)
            .map(|ingress| sluice_proxy::Warning {
                object: ingress.to_string(),
                field: "spec.ingressClassName".to_owned(),
                reason: "NotOurClass".to_owned(),
                message: unserved_warning(ingress, options),
            }),
    );
    out
}

/// The Ingresses of `inputs` that are not in `ours` (sorted).
fn unserved(inputs: &Inputs, ours: &[ObjectRef]) -> Vec<ObjectRef> {
    let mut out: Vec<ObjectRef> = inputs
        .ingresses
        .iter()
        .map(|i| {
            let meta = &i.metadata;
            ObjectRef::ingress(
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or(""),
            )
        })
        .filter(|i| ours.binary_search(i).is_err())
        .collect();
    out.sort();
    out
}

/// Why an Ingress of a manifest directory is not served, and what to add: standalone mode
/// has no other controller, so an Ingress no class selects is almost always a mistake.
pub fn unserved_warning(ingress: &ObjectRef, options: &CompileOptions) -> String {
    format!(
        "{ingress} is not served: no IngressClass of ours selects it. Set \
         spec.ingressClassName: {class} and add an IngressClass {class} with spec.controller: \
         {controller} (annotated ingressclass.kubernetes.io/is-default-class: \"true\" to take \
         Ingresses without a class), or run with --watch-ingress-without-class",
        class = options.ingress_class,
        controller = options.controller_name,
    )
}

/// Logs the flag problems of `now` that were not in `before` (an error: the flag's object
/// is not used as asked), and that a flag's problems of `before` are gone.
fn log_flag_changes(before: &[Diagnostic], now: &[Diagnostic]) {
    for d in now.iter().filter(|d| !before.contains(d)) {
        tracing::error!(flag = %d.field, object = %d.object, reason = d.reason.as_str(), "{}", d.message);
    }
    for d in before
        .iter()
        .filter(|d| !now.iter().any(|n| n.field == d.field))
    {
        tracing::info!(flag = %d.field, object = %d.object, "{}: {}: resolved", d.object, d.field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::Ingress;

    fn ingress(ns: &str, name: &str) -> Arc<Ingress> {
        let mut i = Ingress::default();
        i.metadata.namespace = Some(ns.into());
        i.metadata.name = Some(name.into());
        Arc::new(i)
    }

    #[test]
    fn unserved_ingresses_are_named_with_what_to_add() {
        let inputs = Inputs {
            ingresses: vec![
                ingress("a", "served"),
                ingress("b", "lost"),
                ingress("a", "lost"),
            ],
            ..Inputs::default()
        };
        let ours = vec![ObjectRef::ingress("a", "served")];
        let got = unserved(&inputs, &ours);
        assert_eq!(
            got,
            vec![
                ObjectRef::ingress("a", "lost"),
                ObjectRef::ingress("b", "lost")
            ]
        );
        let text = unserved_warning(&got[0], &CompileOptions::default());
        assert!(text.contains("a/lost"), "{text}");
        assert!(text.contains("spec.ingressClassName: sluice"), "{text}");
        assert!(
            text.contains("spec.controller: sluice.dev/ingress-controller"),
            "{text}"
        );
    }
}
