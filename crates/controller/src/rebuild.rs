//! The rebuild loop: any change enqueues one key; the worker compiles the stores into a new
//! routing table and swaps it in. Changes that arrive while a rebuild runs coalesce into one
//! more rebuild (the work queue holds a key at most once), so a burst of events costs two
//! compiles, not one per event. The compiler is an [`IncrementalCompiler`]: when only
//! Ingresses, only HTTPRoutes and GRPCRoutes, or only endpoints changed, it compiles just
//! the hosts or backends they touch. Status-only updates compile nothing; a second of quiet
//! after them brings one rebuild that takes them in ([`crate::catch_up`]).

use crate::catch_up::{self, CatchUp};
use crate::cpu_wait::waited_for_cpu;
use crate::sources::IngressInformers;
use crate::status_only::StatusChanges;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use sluice_informer::workqueue::WorkQueue;
use sluice_persistent::SortedChunks;
use sluice_proxy::TableHandle;
use sluice_routing::{
    CompileKind as IncrementalKind, CompileOptions, Compiled, DEFAULT_CLASS_ANNOTATION, Diagnostic,
    IncrementalCompiler, Inputs, LEGACY_CLASS_ANNOTATION, ObjectRef,
};
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
    /// Ingresses of our class (the compiler's list, shared).
    pub ours: SortedChunks<ObjectRef>,
    /// Ingresses in the stores that are not of our class (not served), each with why and
    /// what would make it ours (see [`unserved_warning`]; empty unless
    /// [`Rebuilder::explain_unserved`] asked for them).
    pub unserved: Vec<(ObjectRef, String)>,
    /// Problems with the objects the flags name (`--default-backend-service`,
    /// `--default-ssl-certificate`); logged when they appear and when they are gone.
    pub flag_diagnostics: Vec<Diagnostic>,
    /// Conditions for the Gateway API objects of ours, for the status writer.
    pub gateway: sluice_routing::gateway::GatewayStatuses,
}

/// Drives rebuilds from informer changes.
pub struct Rebuilder {
    informers: IngressInformers,
    options: CompileOptions,
    table: TableHandle,
    queue: WorkQueue<&'static str>,
    report: watch::Sender<Arc<RebuildReport>>,
    /// Status-only updates of the objects whose status we write (see
    /// [`Rebuilder::status_changes`]).
    status_changes: Arc<StatusChanges>,
    explain_unserved: bool,
    /// The inputs of the last rebuild, for `sluice explain` through the admin port.
    last_inputs: Arc<Mutex<Arc<Inputs>>>,
    /// What ingress-nginx's ConfigMap came to last time.
    nginx_config: Mutex<Option<Arc<sluice_routing::config_map::NginxConfig>>>,
    /// Compiles only the hosts (or backends) a change touches.
    compiler: Mutex<IncrementalCompiler>,
    /// A rebuild after status-only updates, once they stop.
    catch_up: Arc<CatchUp>,
}

const KEY: &str = "rebuild";
/// The rebuild [`CatchUp`] asks for: it swaps a table only if one differs.
const CATCH_UP_KEY: &str = "catch-up";

impl Rebuilder {
    /// Registers change handlers on `informers`; call [`Rebuilder::run`] to start working.
    pub fn new(informers: IngressInformers, options: CompileOptions, table: TableHandle) -> Self {
        let queue = WorkQueue::new();
        let q = queue.clone();
        let status_changes = Arc::new(StatusChanges::default());
        let status = Arc::clone(&status_changes);
        let catch_up = Arc::new(CatchUp::default());
        let touched = Arc::clone(&catch_up);
        informers.on_change(
            move || q.add(KEY),
            move |object| {
                status.record(object);
                touched.touched();
            },
        );
        let (report, _) = watch::channel(Arc::new(RebuildReport::default()));
        let last_inputs = Arc::new(Mutex::new(Arc::new(Inputs::default())));
        let explained = Arc::clone(&last_inputs);
        let explain_options = options.clone();
        table.set_explainer(move |request| {
            let inputs = Arc::clone(&explained.lock().unwrap_or_else(|e| e.into_inner()));
            sluice_routing::explain_request(&inputs, &explain_options, request).to_string()
        });
        Rebuilder {
            informers,
            options,
            table,
            queue,
            report,
            status_changes,
            explain_unserved: false,
            last_inputs,
            nginx_config: Mutex::new(None),
            compiler: Mutex::new(IncrementalCompiler::new()),
            catch_up,
        }
    }

    /// Reports the Ingresses no class of ours selects, with why and what to add
    /// ([`RebuildReport::unserved`]): for standalone mode, where there is no other controller
    /// to serve them. (In a cluster they are another controller's business.)
    pub fn explain_unserved(mut self) -> Self {
        self.explain_unserved = true;
        self
    }

    /// Follows every rebuild's diagnostics and Ingresses of our class.
    pub fn reports(&self) -> watch::Receiver<Arc<RebuildReport>> {
        self.report.subscribe()
    }

    /// The objects whose status we write that changed their status only: nothing to
    /// compile, but the status writers check that our entries are still there.
    pub fn status_changes(&self) -> Arc<StatusChanges> {
        Arc::clone(&self.status_changes)
    }

    /// The queue, to stop the loop with `shut_down`.
    pub fn queue(&self) -> WorkQueue<&'static str> {
        self.queue.clone()
    }

    /// The objects of the last rebuild and the options they were compiled with: what the
    /// admission webhook reviews an incoming object against.
    pub fn admission_inputs(&self) -> (Arc<Inputs>, CompileOptions) {
        let inputs = Arc::clone(&self.last_inputs.lock().unwrap_or_else(|e| e.into_inner()));
        (inputs, self.options.clone())
    }

    /// Compiles once now (e.g. right after the caches synced).
    pub fn rebuild_now(&self) {
        self.rebuild(false);
    }

    /// Compiles the stores; with `only_if_changed`, a compile that changed nothing (status
    /// updates taken in) leaves the table and the report as they are.
    fn rebuild(&self, only_if_changed: bool) {
        let started = Instant::now();
        // Read only for the debug line (a file read of some microseconds).
        let waited_before = tracing::enabled!(tracing::Level::DEBUG)
            .then(waited_for_cpu)
            .flatten();
        self.catch_up.rebuilding();
        let mut inputs = self.informers.inputs();
        // A ConfigMap value that stops parsing keeps the one in force.
        inputs.nginx_config_previous = self
            .nginx_config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Shared with the compiler, which keeps them until the next rebuild.
        let inputs = Arc::new(inputs);
        let (compiled, kind) = {
            let mut compiler = match self.compiler.lock() {
                Ok(compiler) => compiler,
                Err(poisoned) => {
                    // A compile that panicked may have left its state half-made: start over.
                    let mut compiler = poisoned.into_inner();
                    *compiler = IncrementalCompiler::new();
                    self.compiler.clear_poison();
                    compiler
                }
            };
            let compiled = compiler.compile_shared(&inputs, &self.options);
            (compiled, compiler.last_kind())
        };
        let Compiled {
            table,
            diagnostics,
            ours,
            flag_diagnostics,
            mut gateway,
            nginx_config,
            ..
        } = compiled;
        if nginx_config.is_some() {
            *self.nginx_config.lock().unwrap_or_else(|e| e.into_inner()) = nginx_config;
        }
        let unserved = if !self.explain_unserved {
            Vec::new()
        } else {
            unserved(&inputs, &ours)
                .into_iter()
                .map(|ingress| {
                    let why = unserved_warning(&ingress, &inputs, &self.options);
                    (ingress.as_ref(), why)
                })
                .collect()
        };
        let elapsed = started.elapsed();
        if only_if_changed
            && kind == (IncrementalKind::Incremental { objects: 0 })
            && !self.explain_unserved
        {
            *self.last_inputs.lock().unwrap_or_else(|e| e.into_inner()) = inputs;
            tracing::debug!(
                ?elapsed,
                "status updates taken in; nothing to serve differently"
            );
            return;
        }
        let unbound = match kind {
            IncrementalKind::Full => self.table.update(table, elapsed),
            IncrementalKind::Incremental { .. } => self.table.update_partial(table, elapsed),
        };
        gateway.mark_unbound(&unbound);
        self.table
            .set_warnings(warnings(&diagnostics, &flag_diagnostics, &unserved));
        *self.last_inputs.lock().unwrap_or_else(|e| e.into_inner()) = inputs;
        let previous = self.report.borrow().clone();
        log_flag_changes(&previous.flag_diagnostics, &flag_diagnostics);
        let generation = previous.generation + 1;
        // Of `served_after`, the time this thread waited for a core.
        let waited = waited_before.and_then(|w| Some(waited_for_cpu()?.saturating_sub(w)));
        tracing::debug!(
            generation,
            ?elapsed,
            // The compile and the proxy's swap (its per-backend state), until traffic sees it.
            served_after = ?started.elapsed(),
            waiting_for_cpu = ?waited,
            ?kind,
            diagnostics = diagnostics.len(),
            "routing table rebuilt"
        );
        self.report.send_replace(Arc::new(RebuildReport {
            generation,
            diagnostics,
            ours,
            unserved,
            flag_diagnostics,
            gateway,
        }));
    }

    /// Rebuilds whenever something changed, and once status-only updates have been quiet
    /// for a second, until the queue is shut down.
    pub async fn run(&self) {
        let rebuilds = async {
            while let Some(key) = self.queue.get().await {
                self.rebuild(key == CATCH_UP_KEY);
                self.queue.done(&key);
            }
        };
        let catch_up = async {
            loop {
                self.catch_up.due(catch_up::QUIET).await;
                self.queue.add(CATCH_UP_KEY);
            }
        };
        tokio::select! {
            () = rebuilds => {}
            () = catch_up => {}
        }
    }
}

/// What the dashboard lists as warnings: the compiler's diagnostics, the flags' problems,
/// and (standalone mode) the Ingresses no class selects.
fn warnings(
    diagnostics: &[Diagnostic],
    flags: &[Diagnostic],
    unserved: &[(ObjectRef, String)],
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
    out.extend(unserved.iter().map(|(ingress, why)| sluice_proxy::Warning {
        object: ingress.to_string(),
        field: "spec.ingressClassName".to_owned(),
        reason: "NotOurClass".to_owned(),
        message: why.clone(),
    }));
    out
}

/// The Ingresses of `inputs` that are not in `ours`, sorted by namespace/name.
fn unserved(inputs: &Inputs, ours: &SortedChunks<ObjectRef>) -> Vec<Unserved> {
    let mut out: Vec<Unserved> = inputs
        .ingresses
        .iter()
        .map(|i| Unserved(i.clone()))
        .filter(|i| ours.get(&i.as_ref(), |o| o).is_none())
        .collect();
    out.sort_by_key(Unserved::as_ref);
    out
}

/// An Ingress that no IngressClass of ours selects.
struct Unserved(Arc<Ingress>);

impl Unserved {
    fn as_ref(&self) -> ObjectRef {
        let meta = &self.0.metadata;
        ObjectRef::ingress(
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or(""),
        )
    }
}

/// Why an Ingress of a manifest directory is not served, and what to add: standalone mode
/// has no other controller, so an Ingress no class selects is almost always a mistake. The
/// cases follow the class rules in their order (sluice_routing's class selection):
/// `spec.ingressClassName`, then the legacy annotation, then the default class.
fn unserved_warning(ingress: &Unserved, inputs: &Inputs, options: &CompileOptions) -> String {
    let controller = options.controller_name.as_str();
    let controller_of = |c: &IngressClass| {
        c.spec
            .as_ref()
            .and_then(|s| s.controller.clone())
            .unwrap_or_default()
    };
    let ours: Vec<&str> = inputs
        .ingress_classes
        .iter()
        .filter(|c| controller_of(c) == controller)
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    // The class to suggest: ours if the manifests hold one, else the one --ingress-class names.
    let our_class = ours
        .first()
        .copied()
        .unwrap_or(options.ingress_class.as_str());
    let add_class = if ours.is_empty() {
        format!(
            " and add an IngressClass {our_class} with spec.controller: {controller} (the \
             manifests hold no IngressClass of this controller)"
        )
    } else {
        String::new()
    };
    let object = ingress.as_ref();
    let i = &ingress.0;
    let class_name = i
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        .filter(|n| !n.is_empty());
    let legacy = i
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION));
    if let Some(value) = legacy {
        return format!(
            "{object} is not served: its annotation {LEGACY_CLASS_ANNOTATION}: {value} is not \
             this controller's class (--ingress-class {}). Replace the annotation with \
             spec.ingressClassName: {our_class}{add_class}",
            options.ingress_class
        );
    }
    if let Some(name) = class_name {
        let named = inputs
            .ingress_classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name));
        let what = match named {
            Some(c) => format!(
                "IngressClass {name} belongs to controller {:?}, not {controller}",
                controller_of(c)
            ),
            None => format!("the manifests hold no IngressClass {name}"),
        };
        return format!(
            "{object} is not served: spec.ingressClassName: {name}, and {what}. Set \
             spec.ingressClassName: {our_class}{add_class}"
        );
    }
    let default = inputs
        .ingress_classes
        .iter()
        .find(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true")
        })
        .and_then(|c| c.metadata.name.clone());
    let why = match default {
        Some(other) => format!("the default class is {other}, another controller's"),
        None if ours.is_empty() => "no IngressClass of this controller exists".to_string(),
        None => format!("IngressClass {our_class} is not the default class"),
    };
    if ours.is_empty() {
        format!(
            "{object} is not served: it has no spec.ingressClassName and {why}. Add \
             spec.ingressClassName: {our_class}{add_class}, or run with \
             --watch-ingress-without-class"
        )
    } else {
        format!(
            "{object} is not served: it has no spec.ingressClassName and {why}. Add \
             spec.ingressClassName: {our_class}, or annotate IngressClass {our_class} with \
             {DEFAULT_CLASS_ANNOTATION}: \"true\", or run with --watch-ingress-without-class"
        )
    }
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
    use sluice_routing::compile;

    fn ingress(ns: &str, name: &str, class: Option<&str>, legacy: Option<&str>) -> Arc<Ingress> {
        let mut i = Ingress::default();
        i.metadata.namespace = Some(ns.into());
        i.metadata.name = Some(name.into());
        if let Some(legacy) = legacy {
            i.metadata.annotations = Some(
                [(LEGACY_CLASS_ANNOTATION.to_string(), legacy.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        i.spec = Some(k8s_openapi::api::networking::v1::IngressSpec {
            ingress_class_name: class.map(String::from),
            ..Default::default()
        });
        Arc::new(i)
    }

    fn class(name: &str, controller: &str, default: bool) -> Arc<IngressClass> {
        let mut c = IngressClass::default();
        c.metadata.name = Some(name.into());
        if default {
            c.metadata.annotations = Some(
                [(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        c.spec = Some(k8s_openapi::api::networking::v1::IngressClassSpec {
            controller: Some(controller.into()),
            parameters: None,
        });
        Arc::new(c)
    }

    /// The warnings for the Ingresses of `inputs` that no class of ours selects.
    fn warnings(inputs: &Inputs) -> Vec<(ObjectRef, String)> {
        let options = CompileOptions::default();
        let ours = compile(inputs, &options).ours;
        unserved(inputs, &ours)
            .iter()
            .map(|i| (i.as_ref(), unserved_warning(i, inputs, &options)))
            .collect()
    }

    #[test]
    fn unserved_ingresses_are_named_with_what_to_add() {
        let ctrl = "sluice.dev/ingress-controller";
        let mut inputs = Inputs {
            ingresses: vec![
                ingress("a", "served", Some("mine"), None),
                ingress("b", "none", None, None),
                ingress("a", "unknown", Some("nope"), None),
                ingress("a", "theirs", Some("nginx"), None),
                ingress("a", "legacy", None, Some("nginx")),
            ]
            .into(),
            ingress_classes: vec![
                class("mine", ctrl, false),
                class("nginx", "k8s.io/ingress-nginx", false),
            ]
            .into(),
            ..Inputs::default()
        };
        let got = warnings(&inputs);
        let names: Vec<String> = got.iter().map(|(o, _)| o.to_string()).collect();
        assert_eq!(
            names,
            [
                "Ingress a/legacy",
                "Ingress a/theirs",
                "Ingress a/unknown",
                "Ingress b/none"
            ]
        );
        let text = |name: &str| {
            got.iter()
                .find(|(o, _)| o.name == name)
                .map(|(_, t)| t.clone())
                .unwrap()
        };
        // Our class exists: suggested by its name, not --ingress-class's.
        let legacy = text("legacy");
        assert!(
            legacy.starts_with("Ingress a/legacy is not served"),
            "{legacy}"
        );
        assert!(legacy.contains("kubernetes.io/ingress.class: nginx is not this controller's class (--ingress-class sluice)"), "{legacy}");
        assert!(legacy.contains("spec.ingressClassName: mine"), "{legacy}");
        let theirs = text("theirs");
        assert!(
            theirs.contains("IngressClass nginx belongs to controller \"k8s.io/ingress-nginx\""),
            "{theirs}"
        );
        assert!(
            theirs.ends_with("Set spec.ingressClassName: mine"),
            "{theirs}"
        );
        let unknown = text("unknown");
        assert!(
            unknown.contains("the manifests hold no IngressClass nope"),
            "{unknown}"
        );
        let none = text("none");
        assert!(
            none.contains("no spec.ingressClassName and IngressClass mine is not the default class")
                && none.contains("annotate IngressClass mine with ingressclass.kubernetes.io/is-default-class: \"true\""),
            "{none}"
        );

        // No class of ours at all: say to add one, named after --ingress-class.
        inputs.ingress_classes = vec![class("nginx", "k8s.io/ingress-nginx", true)].into();
        let got = warnings(&inputs);
        assert_eq!(got.len(), 5, "nothing is ours: {got:?}");
        let none = &got.iter().find(|(o, _)| o.name == "none").unwrap().1;
        assert!(
            none.contains("the default class is nginx, another controller's"),
            "{none}"
        );
        assert!(
            none.contains(
                "Add spec.ingressClassName: sluice and add an IngressClass sluice with \
                 spec.controller: sluice.dev/ingress-controller"
            ),
            "{none}"
        );
    }
}
