//! `sluice migrate`: what sluice would make of the Ingresses an ingress-nginx user already
//! has, before anything is deployed.
//!
//! For every Ingress (sorted by namespace/name) the report says whether sluice would serve
//! it at all (its class, and what to change when it says `nginx`), which annotations are
//! honoured, which are not and why (unsupported, invalid value, refused snippet), and notes
//! on defaults worth knowing (the HTTPS redirect of TLS hosts). The annotations are checked
//! by [`sluice_routing::check_annotations`], the very code the compiler runs, and the class
//! verdict comes from [`sluice_routing::compile`] itself, so the report cannot drift from
//! what the controller does.
//!
//! [`build_report`] is the whole logic, a pure function; [`from_manifests`] and
//! [`from_cluster`] read the objects, and [`run`] prints the report and picks the exit
//! status: [`EXIT_CLEAN`] when nothing would change behaviour, [`EXIT_CHANGES`] when some
//! Ingress needs a change (an annotation without effect, or a class sluice does not serve),
//! [`EXIT_ERROR`] when the objects could not all be read.

use crate::client::client_from;
use crate::client::list_all;
use crate::manifest_dir::{Scanner, decode_into};
use crate::serve::ClassArgs;
use crate::sources::manifest_kinds;
use anyhow::Context;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::Api;
use serde::Serialize;
use sluice_routing::{
    CompileOptions, DEFAULT_CLASS_ANNOTATION, Inputs, LEGACY_CLASS_ANNOTATION, NGINX_PREFIX,
    Reason, SLUICE_PREFIX, TrailingSlashRedirect, check_annotations, compile,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::exit_status::{EXIT_CHANGES, EXIT_CLEAN, EXIT_ERROR};

/// Flags of `sluice migrate`.
#[derive(clap::Args, Clone, Debug)]
pub struct MigrateArgs {
    /// Read Ingresses and IngressClasses from this directory of manifests, as `sluice serve`
    /// reads it, instead of from a cluster.
    #[arg(long, value_name = "DIR", conflicts_with = "kubeconfig")]
    pub manifests: Option<PathBuf>,

    /// kubeconfig file; else `KUBECONFIG`, `~/.kube/config`, in-cluster.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Only the Ingresses of this namespace (default: all namespaces).
    // `--namespace`: the spelling of earlier releases, warned about by the binary.
    #[arg(
        long = "watch-namespace",
        short = 'n',
        alias = "namespace",
        value_name = "NAMESPACE",
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
    )]
    pub namespace: Option<String>,

    /// Report format: `text` for people, `json` for scripts.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: OutputFormat,

    /// Which Ingresses are ours (class flags).

    #[command(flatten)]
    pub class: ClassArgs,

    /// `--to gateway-api` and its flags (`migrate_gateway`).
    #[command(flatten)]
    pub gateway: crate::migrate_gateway::GatewayArgs,
}

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One block per Ingress and a summary line.
    Text,
    /// The same report as one JSON object (for scripts).
    Json,
}

/// Everything `sluice migrate` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    /// Where the Ingresses came from, e.g. `manifests in ./deploy` or `cluster, all
    /// namespaces`.
    pub source: String,
    /// `--ingress-class` the verdicts assume.
    pub ingress_class: String,
    /// `--controller-class` the verdicts assume.
    pub controller_name: String,
    /// Assumptions and cluster-wide remarks.
    pub notes: Vec<String>,
    /// One per Ingress, sorted by namespace and name.
    pub ingresses: Vec<IngressReport>,
    /// What could not be read (a file that does not parse, an object that is not valid).
    pub errors: Vec<String>,
    /// The counts.
    pub summary: Summary,
    /// The exit status `sluice migrate` ends with.
    pub exit_code: i32,
    /// ingress-nginx's ConfigMap (`--configmap`), key by key.
    pub config_map: Option<ConfigMapReport>,
}

/// What sluice does with each key of ingress-nginx's ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigMapReport {
    /// `namespace/name`; `found: false` when it does not exist.
    pub name: String,
    /// Whether it was found.
    pub found: bool,
    /// Keys applied as written (annotation defaults, `block-cidrs`).
    pub applied: Vec<String>,
    /// Keys not applied, with why or what to use instead.
    pub problems: Vec<(String, String)>,
}

impl ConfigMapReport {
    /// The report of `map` (named `name`), `None` for one that does not exist.
    pub fn new(name: String, map: Option<&k8s_openapi::api::core::v1::ConfigMap>) -> Self {
        let Some(map) = map else {
            return ConfigMapReport {
                name,
                found: false,
                applied: Vec::new(),
                problems: Vec::new(),
            };
        };
        let (_, diagnostics) = sluice_routing::config_map::read(map, None);
        let problems: Vec<(String, String)> = diagnostics
            .iter()
            .map(|d| {
                let key = d
                    .field
                    .trim_start_matches("data[")
                    .trim_end_matches(']')
                    .to_owned();
                let why = d
                    .message
                    .rsplit_once(&format!("{}: ", d.field))
                    .map_or(d.message.as_str(), |(_, why)| why)
                    .to_owned();
                (key, why)
            })
            .collect();
        let applied = map
            .data
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .filter(|k| !problems.iter().any(|(p, _)| p == k))
            .collect();
        ConfigMapReport {
            name,
            found: true,
            applied,
            problems,
        }
    }
}

/// What sluice makes of one Ingress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IngressReport {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Whether sluice serves it at all.
    pub class: ClassReport,
    /// Annotation keys applied as written.
    pub honoured: Vec<String>,
    /// Annotations without effect.
    pub problems: Vec<AnnotationProblem>,
    /// Things that work as in ingress-nginx but are worth knowing.
    pub notes: Vec<String>,
    /// Served, and no annotation problem.
    pub fully_supported: bool,
}

/// The class of one Ingress and the verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClassReport {
    /// `spec.ingressClassName`, if set.
    pub ingress_class_name: Option<String>,
    /// The legacy annotation `kubernetes.io/ingress.class`, if set.
    pub legacy_annotation: Option<String>,
    /// Whether sluice would serve this Ingress.
    pub served: bool,
    /// Why (not).
    pub detail: String,
    /// What to change so that sluice serves it; `None` when it is served.
    pub fix: Option<String>,
}

/// An annotation that has no effect under sluice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnnotationProblem {
    /// The full key; for a rule serving drops, the field (`spec.rules[0].http.paths[1]`).
    pub annotation: String,
    /// `UnsupportedAnnotation`, `InvalidAnnotation`, `SnippetRefused` or `FailedClosed`: the Event reason
    /// the controller emits on the Ingress.
    pub reason: String,
    /// Why, and what to use instead where there is something.
    pub detail: String,
}

/// The counts of a [`MigrationReport`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Ingresses examined.
    pub ingresses: usize,
    /// Served, with every annotation honoured.
    pub fully_supported: usize,
    /// Not served, or with an annotation without effect.
    pub with_problems: usize,
    /// Things that could not be read.
    pub errors: usize,
}

impl MigrationReport {
    /// Records something that could not be read; the exit status becomes [`EXIT_ERROR`].
    pub fn add_error(&mut self, error: impl Into<String>) {
        self.errors.push(error.into());
        self.update();
    }

    fn update(&mut self) {
        let fully_supported = self.ingresses.iter().filter(|i| i.fully_supported).count();
        self.summary = Summary {
            ingresses: self.ingresses.len(),
            fully_supported,
            with_problems: self.ingresses.len() - fully_supported,
            errors: self.errors.len(),
        };
        self.exit_code = if !self.errors.is_empty() {
            EXIT_ERROR
        } else if self.summary.with_problems > 0 {
            EXIT_CHANGES
        } else {
            EXIT_CLEAN
        };
    }

    /// The report as `sluice migrate -o json` prints it.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            // Plain strings, numbers and booleans only: cannot fail.
            format!("{{\"errors\": [{:?}]}}", e.to_string())
        });
        json.push('\n');
        json
    }

    /// The report as `sluice migrate` prints it.
    pub fn to_text(&self) -> String {
        const W: usize = 12;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "sluice migrate: {} from {} (--ingress-class {}, --controller-class {})",
            plural(self.ingresses.len(), "Ingress", "Ingresses"),
            self.source,
            self.ingress_class,
            self.controller_name
        );
        for note in &self.notes {
            let _ = writeln!(s, "note: {note}");
        }
        for error in &self.errors {
            let _ = writeln!(s, "error: {error}");
        }
        // A class fix shared by several Ingresses (the usual case: all of them name the
        // old controller's class) is said once, not once per Ingress.
        let mut shared_fixes: Vec<(&str, Vec<String>)> = Vec::new();
        for ingress in &self.ingresses {
            if let Some(fix) = &ingress.class.fix {
                let name = format!("{}/{}", ingress.namespace, ingress.name);
                match shared_fixes.iter_mut().find(|(f, _)| *f == fix.as_str()) {
                    Some((_, names)) => names.push(name),
                    None => shared_fixes.push((fix, vec![name])),
                }
            }
        }
        shared_fixes.retain(|(_, names)| names.len() > 1);
        for (fix, names) in &shared_fixes {
            let _ = writeln!(
                s,
                "class fix for {}: {fix}",
                plural(names.len(), "Ingress", "Ingresses")
            );
        }
        for ingress in &self.ingresses {
            let problems = ingress.problems.len() + usize::from(!ingress.class.served);
            let verdict = if ingress.fully_supported {
                "fully supported".to_owned()
            } else {
                plural(problems, "problem", "problems")
            };
            let _ = writeln!(s, "\n{}/{}: {verdict}", ingress.namespace, ingress.name);
            let class = &ingress.class;
            let named = match (&class.ingress_class_name, &class.legacy_annotation) {
                (Some(name), _) => format!("{name} (spec.ingressClassName)"),
                (None, Some(value)) => format!("{value} ({LEGACY_CLASS_ANNOTATION})"),
                (None, None) => "none".to_owned(),
            };
            let served = if class.served { "served" } else { "NOT served" };
            let _ = writeln!(s, "  {:W$} {named}: {served}: {}", "class", class.detail);
            if let Some(fix) = &class.fix {
                if shared_fixes.iter().any(|(f, _)| *f == fix.as_str()) {
                    let _ = writeln!(s, "  {:W$} the class fix above", "fix");
                } else {
                    let _ = writeln!(s, "  {:W$} {fix}", "fix");
                }
            }
            for key in &ingress.honoured {
                let _ = writeln!(s, "  {:W$} {key}", "honoured");
            }
            for p in &ingress.problems {
                let label = match p.reason.as_str() {
                    "UnsupportedAnnotation" => "unsupported",
                    "InvalidAnnotation" => "invalid",
                    "SnippetRefused" => "refused",
                    "FailedClosed" => "CLOSED",
                    "ConflictLost" => "not served",
                    "CanaryWithoutMain" => "no traffic",
                    "InvalidPath" | "InvalidHost" | "InvalidBackend" | "UnsupportedBackend" => {
                        "skipped"
                    }
                    other => other,
                };
                let _ = writeln!(s, "  {label:W$} {}: {}", p.annotation, p.detail);
            }
            for note in &ingress.notes {
                let _ = writeln!(s, "  {:W$} {note}", "note");
            }
        }
        if let Some(config) = &self.config_map {
            if config.found {
                let _ = writeln!(s, "ConfigMap {} (--configmap):", config.name);
            } else {
                let _ = writeln!(s, "ConfigMap {} (--configmap): not found", config.name);
            }
            for key in &config.applied {
                let _ = writeln!(s, "  {:W$} {key}", "applied");
            }
            for (key, why) in &config.problems {
                let _ = writeln!(s, "  {:W$} {key}: {why}", "not applied");
            }
        }
        let sum = &self.summary;
        let _ = write!(
            s,
            "\n{}, {} fully supported, {} with problems",
            plural(sum.ingresses, "Ingress", "Ingresses"),
            sum.fully_supported,
            sum.with_problems
        );
        if sum.errors > 0 {
            let _ = write!(s, ", {}", plural(sum.errors, "error", "errors"));
        }
        s.push('\n');
        s
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn controller_of(class: &IngressClass) -> Option<&str> {
    class.spec.as_ref().and_then(|s| s.controller.as_deref())
}

fn is_default(class: &IngressClass) -> bool {
    class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// The IngressClass of `deploy/base/ingressclass.yaml`, for these options, made the default
/// class as `deploy/overlays/default-class` makes it (a migration from ingress-nginx, the
/// usual default class, typically wants that).
fn shipped_class(options: &CompileOptions) -> IngressClass {
    let mut class = IngressClass::default();
    class.metadata.name = Some(options.ingress_class.clone());
    class.metadata.annotations = Some(BTreeMap::from([(
        DEFAULT_CLASS_ANNOTATION.to_owned(),
        "true".to_owned(),
    )]));
    class.spec = Some(k8s_openapi::api::networking::v1::IngressClassSpec {
        controller: Some(options.controller_name.clone()),
        parameters: None,
    });
    class
}

/// What sluice would make of `ingresses`, given the IngressClasses that exist (or will).
///
/// When no IngressClass in `classes` has `spec.controller` equal to
/// [`CompileOptions::controller_name`], the verdicts assume the one `deploy/` creates,
/// with `deploy/overlays/default-class`: named [`CompileOptions::ingress_class`], the default class (and the report says
/// so). Pure: no I/O.
pub fn build_report(
    ingresses: &[Ingress],
    classes: &[IngressClass],
    options: &CompileOptions,
) -> MigrationReport {
    let options = CompileOptions {
        watch_namespace: None,
        ..options.clone()
    };
    let ctrl = options.controller_name.as_str();
    let mut notes = Vec::new();
    let mut all_classes: Vec<Arc<IngressClass>> = classes.iter().cloned().map(Arc::new).collect();
    let mut our_names: Vec<String> = classes
        .iter()
        .filter(|c| controller_of(c) == Some(ctrl))
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    our_names.sort();
    let assumed = our_names.is_empty();
    if assumed {
        let shipped = shipped_class(&options);
        notes.push(format!(
            "no IngressClass with spec.controller {ctrl} found: assuming the one \
             deploy/ creates (IngressClass {}), made the default class by \
             deploy/overlays/default-class",
            options.ingress_class
        ));
        our_names.push(options.ingress_class.clone());
        all_classes.push(Arc::new(shipped));
    }
    let our_default = all_classes
        .iter()
        .any(|c| controller_of(c) == Some(ctrl) && is_default(c));
    if our_default {
        for other in classes
            .iter()
            .filter(|c| controller_of(c) != Some(ctrl) && is_default(c))
        {
            notes.push(format!(
                "IngressClass {} (spec.controller {}) is also marked as the default class: \
                 while two classes are, the API server refuses new Ingresses without \
                 spec.ingressClassName; remove {DEFAULT_CLASS_ANNOTATION} from one of them",
                other.metadata.name.as_deref().unwrap_or(""),
                controller_of(other).unwrap_or("")
            ));
        }
    }

    let inputs = Inputs {
        ingresses: ingresses.iter().cloned().map(Arc::new).collect(),
        ingress_classes: all_classes.clone().into(),
        ..Inputs::default()
    };
    let compiled = compile(&inputs, &options);
    let ours: BTreeSet<(&str, &str)> = compiled
        .ours
        .iter()
        .map(|o| (o.namespace.as_str(), o.name.as_str()))
        .collect();
    let cx = ClassContext {
        options: &options,
        classes: &all_classes,
        our_name: &our_names[0],
        assumed,
        our_default,
    };

    let mut reports: Vec<IngressReport> = ingresses
        .iter()
        .map(|ingress| {
            let namespace = ingress.metadata.namespace.clone().unwrap_or_default();
            let name = ingress.metadata.name.clone().unwrap_or_default();
            let served = ours.contains(&(namespace.as_str(), name.as_str()));
            let annotations = ingress.metadata.annotations.clone().unwrap_or_default();
            let checked = check_annotations(&annotations);
            let class = cx.report(ingress, &annotations, served);
            let mut problems: Vec<AnnotationProblem> = checked
                .problems
                .into_iter()
                .map(|(annotation, reason, detail)| AnnotationProblem {
                    annotation,
                    reason: reason_name(&reason),
                    detail,
                })
                .collect();
            // What serving drops from this Ingress's rules (a second canary for a path,
            // an older Ingress's claim, an invalid path or host): its Events in a cluster.
            // Backend and Secret problems are left out: the report has no Services or
            // Secrets to check against.
            for d in compiled.diagnostics.iter().filter(|d| {
                d.object.namespace == namespace
                    && d.object.name == name
                    && matches!(
                        d.reason,
                        Reason::ConflictLost { .. }
                            | Reason::CanaryWithoutMain
                            | Reason::InvalidPath
                            | Reason::InvalidHost
                            | Reason::InvalidBackend
                            | Reason::UnsupportedBackend
                    )
            }) {
                problems.push(AnnotationProblem {
                    annotation: d.field.clone(),
                    reason: reason_name(&d.reason),
                    detail: d.message.clone(),
                });
            }
            let mut honoured = checked.honoured;
            honoured.sort();
            let mut notes = ingress_notes(ingress, &annotations);
            notes.extend(
                checked
                    .snippets
                    .iter()
                    .map(|(key, snippet)| snippet_note(key, snippet)),
            );
            notes.extend(
                compiled
                    .trailing_slash_redirects
                    .iter()
                    .filter(|r| r.ingress.namespace == namespace && r.ingress.name == name)
                    .map(|r| trailing_slash_note(r, options.ingress_nginx_compat)),
            );
            IngressReport {
                notes,
                fully_supported: class.served && problems.is_empty(),
                namespace,
                name,
                class,
                honoured,
                problems,
            }
        })
        .collect();
    reports.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut report = MigrationReport {
        source: String::new(),
        ingress_class: options.ingress_class.clone(),
        controller_name: options.controller_name.clone(),
        notes,
        ingresses: reports,
        errors: Vec::new(),
        summary: Summary::default(),
        exit_code: EXIT_CLEAN,
        config_map: None,
    };
    report.update();
    report
}

/// Which directives of a snippet annotation sluice interprets once the ConfigMap allows
/// snippets, and which it refuses.
fn snippet_note(key: &str, snippet: &sluice_routing::SnippetReport) -> String {
    let list = |items: &[String]| {
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join("; ")
        }
    };
    format!(
        "{key}: with allow-snippet-annotations: \"true\" and annotations-risk-level: Critical \
         in the ConfigMap, sluice interprets {}; refuses {}",
        list(&snippet.interpreted),
        list(&snippet.refused)
    )
}

/// What a trailing-slash redirect of ingress-nginx's becomes in sluice, with the
/// `--ingress-nginx-compat` setting the report assumes.
fn trailing_slash_note(redirect: &TrailingSlashRedirect, compat: bool) -> String {
    let host = if redirect.host.is_empty() {
        "any host".to_owned()
    } else {
        format!("host {}", redirect.host)
    };
    let path = &redirect.path;
    let (now, other) = if compat {
        (
            "with --ingress-nginx-compat, as in ingress-nginx",
            "without it the request is matched as the Ingress spec says (no redirect)",
        )
    } else {
        (
            "only with --ingress-nginx-compat",
            "without it (the default) the request is matched as the Ingress spec says",
        )
    };
    format!(
        "{host} {path}: ingress-nginx answers 301 to {path}/ (its path {path}/ ends in a \
         slash); sluice does so {now}; {other}"
    )
}

fn reason_name(reason: &Reason) -> String {
    reason.as_str().to_owned()
}

/// What the class verdicts are judged against.
struct ClassContext<'a> {
    options: &'a CompileOptions,
    classes: &'a [Arc<IngressClass>],
    /// The name of sluice's IngressClass to suggest.
    our_name: &'a str,
    /// Whether sluice's IngressClass is the assumed one of `deploy/`.
    assumed: bool,
    /// Whether one of sluice's IngressClasses is the default class.
    our_default: bool,
}

impl ClassContext<'_> {
    fn find(&self, name: &str) -> Option<&IngressClass> {
        self.classes
            .iter()
            .map(|c| &**c)
            .find(|c| c.metadata.name.as_deref() == Some(name))
    }

    fn is_ours(&self, name: &str) -> bool {
        self.find(name)
            .is_some_and(|c| controller_of(c) == Some(self.options.controller_name.as_str()))
    }

    fn assumed_suffix(&self) -> &'static str {
        if self.assumed {
            " (as deploy/ creates it)"
        } else {
            ""
        }
    }

    /// The verdict for one Ingress; `served` is the compiler's.
    fn report(
        &self,
        ingress: &Ingress,
        annotations: &BTreeMap<String, String>,
        served: bool,
    ) -> ClassReport {
        let ctrl = self.options.controller_name.as_str();
        let legacy_class = self.options.ingress_class.as_str();
        let our_name = self.our_name;
        let class_name = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.clone())
            .filter(|n| !n.is_empty());
        let legacy = annotations.get(LEGACY_CLASS_ANNOTATION).cloned();
        let (detail, fix) = if served {
            let detail = match (&class_name, &legacy) {
                (Some(name), _) if self.is_ours(name) => format!(
                    "IngressClass {name} has spec.controller {ctrl}{}",
                    self.assumed_suffix()
                ),
                (_, Some(value)) => format!(
                    "the legacy annotation {LEGACY_CLASS_ANNOTATION}: {value} is sluice's \
                     class (--ingress-class {legacy_class})"
                ),
                _ if self.our_default => format!(
                    "no class; sluice's IngressClass is the default class{}",
                    self.assumed_suffix()
                ),
                _ => "no class, and sluice runs with --watch-ingress-without-class".to_owned(),
            };
            (detail, None)
        } else {
            let mut why = Vec::new();
            if let Some(name) = &class_name {
                why.push(match self.find(name).and_then(controller_of) {
                    Some(other) => {
                        format!("IngressClass {name} belongs to spec.controller {other}")
                    }
                    None => format!("no IngressClass {name} with spec.controller {ctrl} is known"),
                });
            }
            if let Some(value) = &legacy {
                why.push(format!(
                    "the legacy annotation {LEGACY_CLASS_ANNOTATION}: {value} is not sluice's \
                     class (--ingress-class {legacy_class})"
                ));
            }
            let fix = match (&class_name, &legacy) {
                (Some(name), None) => format!(
                    "set spec.ingressClassName: {our_name}; or, once its controller is gone, \
                     recreate IngressClass {name} with spec.controller: {ctrl}"
                ),
                (Some(_), Some(value)) => format!(
                    "set spec.ingressClassName: {our_name} and remove the annotation \
                     {LEGACY_CLASS_ANNOTATION} (or set it to {legacy_class}, or run sluice \
                     with --ingress-class {value})"
                ),
                (None, Some(value)) => format!(
                    "replace the annotation {LEGACY_CLASS_ANNOTATION}: {value} with \
                     spec.ingressClassName: {our_name} (or set it to {legacy_class}, or run \
                     sluice with --ingress-class {value})"
                ),
                (None, None) => {
                    why.push("no class, and no IngressClass of sluice is the default".to_owned());
                    format!(
                        "set spec.ingressClassName: {our_name}, or annotate IngressClass \
                         {our_name} with {DEFAULT_CLASS_ANNOTATION}: \"true\", or run sluice \
                         with --watch-ingress-without-class"
                    )
                }
            };
            (why.join("; "), Some(fix))
        };
        ClassReport {
            ingress_class_name: class_name,
            legacy_annotation: legacy,
            served,
            detail,
            fix,
        }
    }
}

/// Notes on one Ingress: things that behave as in ingress-nginx, or differ in a way no
/// annotation controls.
fn ingress_notes(ingress: &Ingress, annotations: &BTreeMap<String, String>) -> Vec<String> {
    let mut notes = Vec::new();
    let has = |name: &str| {
        annotations.contains_key(&format!("{NGINX_PREFIX}{name}"))
            || annotations.contains_key(&format!("{SLUICE_PREFIX}{name}"))
    };

    // The same key under both prefixes: sluice.dev/ wins, the other is silently ignored.
    for key in annotations.keys() {
        if let Some(name) = key.strip_prefix(NGINX_PREFIX)
            && annotations.contains_key(&format!("{SLUICE_PREFIX}{name}"))
        {
            notes.push(format!(
                "{key} is ignored: {SLUICE_PREFIX}{name} is also set and wins"
            ));
        }
    }

    let spec = ingress.spec.as_ref();
    let mut tls_hosts: Vec<&str> = spec
        .and_then(|s| s.tls.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|t| t.hosts.iter().flatten())
        .map(String::as_str)
        .collect();
    tls_hosts.sort_unstable();
    tls_hosts.dedup();
    if !tls_hosts.is_empty() && !has("ssl-redirect") {
        notes.push(format!(
            "plain HTTP to {} is redirected to HTTPS with 308, as ingress-nginx does by \
             default (ssl-redirect: \"true\"): no change; if your ingress-nginx ConfigMap set \
             ssl-redirect: \"false\", annotate {NGINX_PREFIX}ssl-redirect: \"false\" here",
            tls_hosts.join(", ")
        ));
    }

    notes
}

/// Reads `dir` as `sluice serve --manifests` does ([`Scanner`], the same kinds and limits)
/// and reports on its Ingresses. Files that do not parse are in [`MigrationReport::errors`];
/// a directory that cannot be read is an `Err`.
pub fn from_manifests(
    dir: &Path,
    namespace: Option<&str>,
    options: &CompileOptions,
    config_map: Option<&crate::serve::NamespacedName>,
) -> std::io::Result<MigrationReport> {
    let mut scanner = Scanner::new(dir, manifest_kinds());
    scanner.scan()?;
    let snapshot = scanner.snapshot();
    let mut errors = Vec::new();
    for (path, error) in &snapshot.errors {
        let shown = path.display().to_string();
        if error.starts_with(&shown) {
            errors.push(error.clone());
        } else {
            errors.push(format!("{shown}: {error}"));
        }
    }
    let mut ingresses = Vec::new();
    let mut classes = Vec::new();
    for (key, value) in &snapshot.objects {
        if is_kind::<Ingress>(&key.api_version, &key.kind) {
            if namespace.is_none_or(|ns| ns == key.namespace) {
                decode_into(key, value, &mut ingresses, &mut errors);
            }
        } else if is_kind::<IngressClass>(&key.api_version, &key.kind) {
            decode_into(key, value, &mut classes, &mut errors);
        }
    }
    let mut report = build_report(&ingresses, &classes, options);
    if let Some(name) = config_map {
        let found =
            crate::manifest_dir::config_map_in(&snapshot, &name.namespace, &name.name, &mut errors);
        let shown = format!("{}/{}", name.namespace, name.name);
        report.config_map = Some(ConfigMapReport::new(shown, found.as_ref()));
    }
    report.source = format!("manifests in {}", dir.display());
    if let Some(ns) = namespace {
        report.source.push_str(&format!(", namespace {ns}"));
    }
    for error in errors {
        report.add_error(error);
    }
    // Skipped documents are worth a line each, not an error: they are another tool's.
    for (path, documents) in &snapshot.skipped {
        for document in documents {
            report.notes.push(format!("{}: {document}", path.display()));
        }
    }
    Ok(report)
}

fn is_kind<K: k8s_openapi::Resource>(api_version: &str, kind: &str) -> bool {
    api_version == K::API_VERSION && kind == K::KIND
}

/// Lists the Ingresses of `namespace` (or all) and every IngressClass, and reports on them.
/// An IngressClass list that fails (RBAC) is noted, not fatal; an Ingress list that fails is
/// an `Err`.
pub async fn from_cluster(
    client: &kube::Client,
    namespace: Option<&str>,
    options: &CompileOptions,
    config_map: Option<&crate::serve::NamespacedName>,
) -> anyhow::Result<MigrationReport> {
    let api: Api<Ingress> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ingresses = list_all(&api).await.context("cannot list Ingresses")?;
    let classes_api: Api<IngressClass> = Api::all(client.clone());
    let (classes, class_error) = match list_all(&classes_api).await {
        Ok(classes) => (classes, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let mut report = build_report(&ingresses, &classes, options);
    if let Some(name) = config_map {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), &name.namespace);
        let shown = format!("{}/{}", name.namespace, name.name);
        match api.get_opt(&name.name).await {
            Ok(found) => report.config_map = Some(ConfigMapReport::new(shown, found.as_ref())),
            Err(e) => report
                .notes
                .push(format!("cannot read ConfigMap {shown}: {e}")),
        }
    }
    if let Some(e) = class_error {
        report.notes.insert(
            0,
            format!("cannot list IngressClasses ({e}); the class verdicts assume none exist"),
        );
    }
    report.source = match namespace {
        Some(ns) => format!("the cluster, namespace {ns}"),
        None => "the cluster, all namespaces".to_owned(),
    };
    Ok(report)
}

/// `sluice migrate`: reads, reports on `out`, and returns the exit status. Errors that leave
/// nothing to report (no directory, no cluster) go to `err` and give [`EXIT_ERROR`].
pub async fn run(args: &MigrateArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if args.gateway.to.is_some() {
        let source = crate::migrate_gateway::Source {
            manifests: args.manifests.as_deref(),
            kubeconfig: args.kubeconfig.as_deref(),
            namespace: args.namespace.as_deref(),
            default_class: args.class.compile_options(None).ingress_class,
            config_map: args.class.configmap.as_ref(),
        };
        return crate::migrate_gateway::run(&args.gateway, &source, out, err).await;
    }
    let options = args.class.compile_options(None);
    let namespace = args.namespace.as_deref();
    let report = match &args.manifests {
        Some(dir) => from_manifests(dir, namespace, &options, args.class.configmap.as_ref())
            .with_context(|| format!("cannot read manifest directory {}", dir.display())),
        None => match client_from(args.kubeconfig.as_deref()).await {
            Ok(client) => {
                from_cluster(&client, namespace, &options, args.class.configmap.as_ref()).await
            }
            Err(e) => Err(e),
        },
    };
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            let _ = writeln!(err, "sluice migrate: {e:#}");
            return EXIT_ERROR;
        }
    };
    let text = match args.output {
        OutputFormat::Text => report.to_text(),
        OutputFormat::Json => report.to_json(),
    };
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        let _ = writeln!(err, "sluice migrate: cannot write the report: {e}");
        return EXIT_ERROR;
    }
    report.exit_code
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(v: serde_json::Value) -> Ingress {
        serde_json::from_value(v).unwrap()
    }

    /// An Ingress `ns/name` with `annotations`, `spec` merged over one rule.
    fn ing(ns: &str, name: &str, annotations: &[(&str, &str)], spec: serde_json::Value) -> Ingress {
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        // A host of its own: Ingresses of one test do not claim each other's paths.
        let mut base = json!({
            "rules": [{"host": format!("{name}.{ns}.test"), "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 80}}}}
            ]}}]
        });
        if let (Some(b), Some(s)) = (base.as_object_mut(), spec.as_object()) {
            b.extend(s.clone());
        }
        ingress(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"namespace": ns, "name": name, "annotations": annotations},
            "spec": base,
        }))
    }

    fn class(name: &str, controller: &str, default: bool) -> IngressClass {
        let annotations = if default {
            json!({DEFAULT_CLASS_ANNOTATION: "true"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"controller": controller},
        }))
        .unwrap()
    }

    fn nginx(key: &str) -> String {
        format!("{NGINX_PREFIX}{key}")
    }

    fn report(ingresses: &[Ingress], classes: &[IngressClass]) -> MigrationReport {
        build_report(ingresses, classes, &CompileOptions::default())
    }

    /// nginx's trailing-slash 301 (ingress-nginx docs, "Ingress Path Matching"): every
    /// Ingress whose answers differ with `--ingress-nginx-compat` is named, whatever the
    /// setting the report assumes, and no other.
    #[test]
    fn ingresses_answered_with_a_trailing_slash_redirect_are_named() {
        let path = |path: &str, ty: &str| {
            json!({"path": path, "pathType": ty,
                   "backend": {"service": {"name": "web", "port": {"number": 80}}}})
        };
        let spec = |host: &str, paths: Vec<serde_json::Value>| json!({"rules": [{"host": host, "http": {"paths": paths}}]});
        let ingresses = [
            ing(
                "d",
                "slash",
                &[],
                spec("a.test", vec![path("/my-path/", "Prefix")]),
            ),
            // The same host gets /exact/ from another Ingress, and /plain without slash.
            ing(
                "d",
                "exact",
                &[],
                spec(
                    "a.test",
                    vec![path("/exact/", "Exact"), path("/plain", "Prefix")],
                ),
            ),
            // /both/ and /both: the exact location /both exists, no redirect.
            ing(
                "d",
                "covered",
                &[],
                spec(
                    "b.test",
                    vec![path("/both/", "Prefix"), path("/both", "Exact")],
                ),
            ),
            ing(
                "d",
                "regex",
                &[(&nginx("use-regex"), "true")],
                spec("c.test", vec![path("/r/", "Prefix")]),
            ),
        ];
        for compat in [false, true] {
            let options = CompileOptions {
                ingress_nginx_compat: compat,
                ..CompileOptions::default()
            };
            let r = build_report(&ingresses, &[], &options);
            let noted = |name: &str| -> Vec<String> {
                let ingress = r.ingresses.iter().find(|i| i.name == name).unwrap();
                ingress
                    .notes
                    .iter()
                    .filter(|n| n.contains("ingress-nginx answers 301"))
                    .cloned()
                    .collect()
            };
            let slash = noted("slash");
            assert_eq!(slash.len(), 1, "{slash:?}");
            assert!(
                slash[0]
                    .starts_with("host a.test /my-path: ingress-nginx answers 301 to /my-path/"),
                "{}",
                slash[0]
            );
            assert_eq!(
                slash[0].contains("only with --ingress-nginx-compat"),
                !compat,
                "{}",
                slash[0]
            );
            let exact = noted("exact");
            assert_eq!(exact.len(), 1, "{exact:?}");
            assert!(exact[0].starts_with("host a.test /exact:"), "{}", exact[0]);
            assert!(noted("covered").is_empty());
            assert!(noted("regex").is_empty());
        }
    }

    #[test]
    fn supported_annotations_are_honoured_and_the_ingress_is_clean() {
        let r = report(
            &[ing(
                "default",
                "clean",
                &[
                    (&nginx("ssl-redirect"), "true"),
                    (&nginx("proxy-body-size"), "8m"),
                    (&nginx("enable-cors"), "true"),
                ],
                json!({"ingressClassName": "sluice"}),
            )],
            &[],
        );
        let i = &r.ingresses[0];
        assert_eq!(
            i.honoured,
            [
                nginx("enable-cors"),
                nginx("proxy-body-size"),
                nginx("ssl-redirect")
            ]
        );
        assert!(i.problems.is_empty());
        assert!(i.class.served, "{:?}", i.class);
        assert!(i.fully_supported);
        assert_eq!(r.exit_code, EXIT_CLEAN);
        assert_eq!(
            r.summary,
            Summary {
                ingresses: 1,
                fully_supported: 1,
                with_problems: 0,
                errors: 0
            }
        );
        // The assumption is said.
        assert!(
            r.notes[0].contains("deploy/overlays/default-class"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn problems_carry_the_event_reason_and_make_the_exit_status_one() {
        let r = report(
            &[ing(
                "default",
                "mixed",
                &[
                    (&nginx("auth-type"), "basic"),
                    (
                        &nginx("configuration-snippet"),
                        "more_set_headers \"A: b\";",
                    ),
                    (&nginx("proxy-body-size"), "10 XB"),
                    (&nginx("enable-cors"), "true"),
                ],
                json!({}),
            )],
            &[],
        );
        let i = &r.ingresses[0];
        let reasons: Vec<(&str, &str)> = i
            .problems
            .iter()
            .map(|p| (p.annotation.as_str(), p.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (nginx("auth-type").as_str(), "FailedClosed"),
                (nginx("configuration-snippet").as_str(), "SnippetRefused"),
                (nginx("proxy-body-size").as_str(), "InvalidAnnotation"),
            ]
        );
        assert!(
            i.problems[0]
                .detail
                .contains("auth-type: basic without auth-secret"),
            "{}",
            i.problems[0].detail
        );
        assert!(
            i.problems[1].detail.contains("sluice.dev/response-headers"),
            "{}",
            i.problems[1].detail
        );
        assert_eq!(i.honoured, [nginx("enable-cors")]);
        // No class at all: served through the default IngressClass deploy/overlays/default-class makes.
        assert!(i.class.served);
        assert!(!i.fully_supported);
        assert_eq!(r.exit_code, EXIT_CHANGES);
    }

    #[test]
    fn nginx_class_is_not_served_and_says_what_to_change() {
        let classes = [class("nginx", "k8s.io/ingress-nginx", false)];
        let r = report(
            &[ing(
                "shop",
                "web",
                &[],
                json!({"ingressClassName": "nginx"}),
            )],
            &classes,
        );
        let c = &r.ingresses[0].class;
        assert!(!c.served);
        assert_eq!(c.ingress_class_name.as_deref(), Some("nginx"));
        assert!(c.detail.contains("k8s.io/ingress-nginx"), "{}", c.detail);
        let fix = c.fix.as_deref().unwrap();
        assert!(
            fix.starts_with("set spec.ingressClassName: sluice"),
            "{fix}"
        );
        assert!(!r.ingresses[0].fully_supported);
        assert_eq!(r.exit_code, EXIT_CHANGES);

        // Unknown class (a directory without IngressClasses).
        let r = report(
            &[ing(
                "shop",
                "web",
                &[],
                json!({"ingressClassName": "nginx"}),
            )],
            &[],
        );
        let c = &r.ingresses[0].class;
        assert!(!c.served);
        assert!(c.detail.contains("no IngressClass nginx"), "{}", c.detail);
    }

    #[test]
    fn legacy_annotation_is_matched_against_ingress_class() {
        let legacy = |value: &str| {
            ing(
                "default",
                value,
                &[(LEGACY_CLASS_ANNOTATION, value)],
                json!({}),
            )
        };
        let r = report(&[legacy("nginx"), legacy("sluice")], &[]);
        let (nginx_one, sluice_one) = (&r.ingresses[0].class, &r.ingresses[1].class);
        assert!(!nginx_one.served);
        assert_eq!(nginx_one.legacy_annotation.as_deref(), Some("nginx"));
        assert!(
            nginx_one
                .fix
                .as_deref()
                .unwrap()
                .contains("--ingress-class nginx"),
            "{nginx_one:?}"
        );
        assert!(sluice_one.served, "{sluice_one:?}");
        assert!(sluice_one.detail.contains("legacy annotation"));

        // With --ingress-class nginx, the legacy annotation nginx is ours.
        let options = CompileOptions {
            ingress_class: "nginx".into(),
            ..CompileOptions::default()
        };
        let r = build_report(&[legacy("nginx")], &[], &options);
        assert!(r.ingresses[0].class.served);
    }

    #[test]
    fn class_verdicts_use_the_cluster_classes_when_there_are_some() {
        // An IngressClass of ours exists under another name and is not the default.
        let classes = [
            class("edge", "sluice.dev/ingress-controller", false),
            class("nginx", "k8s.io/ingress-nginx", true),
        ];
        let r = report(
            &[
                ing("a", "named", &[], json!({"ingressClassName": "edge"})),
                ing("a", "none", &[], json!({})),
            ],
            &classes,
        );
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let named = &r.ingresses[0];
        assert_eq!(named.name, "named");
        assert!(named.class.served);
        let none = &r.ingresses[1];
        assert!(!none.class.served);
        assert!(
            none.class
                .fix
                .as_deref()
                .unwrap()
                .contains("ingressClassName: edge"),
            "{:?}",
            none.class
        );

        // --watch-ingress-without-class serves it anyway.
        let options = CompileOptions {
            watch_ingress_without_class: true,
            ..CompileOptions::default()
        };
        let r = build_report(&[ing("a", "none", &[], json!({}))], &classes, &options);
        let none = &r.ingresses[0].class;
        assert!(none.served, "{none:?}");
        assert!(
            none.detail.contains("--watch-ingress-without-class"),
            "{none:?}"
        );

        // Two default classes: said.
        let classes = [class("nginx", "k8s.io/ingress-nginx", true)];
        let r = report(&[ing("a", "none", &[], json!({}))], &classes);
        assert!(
            r.notes.iter().any(|n| n.contains("IngressClass nginx")),
            "{:?}",
            r.notes
        );
    }

    /// Snippets: each directive sluice would interpret or refuse, by line.
    #[test]
    fn snippet_directives_are_listed_interpreted_or_refused() {
        let snippet = "more_set_headers 'X-A: 1';\nproxy_cache_valid 200 10m;";
        let r = report(
            &[ing(
                "d",
                "snip",
                &[(&nginx("configuration-snippet"), snippet)],
                json!({"ingressClassName": "sluice"}),
            )],
            &[],
        );
        let notes = &r.ingresses[0].notes;
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("interprets line 1: more_set_headers")
                && notes[0].contains("refuses line 2: proxy_cache_valid"),
            "{}",
            notes[0]
        );
        // Without the ConfigMap's switch the snippet itself is a problem, saying how to allow.
        let problem = &r.ingresses[0].problems[0];
        assert!(
            problem.detail.contains("allow-snippet-annotations"),
            "{problem:?}"
        );
    }

    #[test]
    fn tls_hosts_get_the_ssl_redirect_note_unless_the_annotation_is_set() {
        let tls = json!({"ingressClassName": "sluice",
            "tls": [{"hosts": ["b.test", "a.test"], "secretName": "cert"}]});
        let r = report(&[ing("d", "tls", &[], tls.clone())], &[]);
        let i = &r.ingresses[0];
        assert_eq!(i.notes.len(), 1, "{:?}", i.notes);
        assert!(
            i.notes[0].starts_with("plain HTTP to a.test, b.test is redirected to HTTPS with 308"),
            "{}",
            i.notes[0]
        );
        // Notes are not problems.
        assert!(i.fully_supported);
        let r = report(
            &[ing("d", "tls", &[(&nginx("ssl-redirect"), "false")], tls)],
            &[],
        );
        assert!(r.ingresses[0].notes.is_empty());
        let r = report(&[ing("d", "plain", &[], json!({}))], &[]);
        assert!(r.ingresses[0].notes.is_empty());
    }

    #[test]
    fn shadowed_nginx_keys_are_noted_and_implementation_specific_paths_are_not() {
        let spec = json!({"rules": [{"http": {"paths": [
            {"path": "/api", "pathType": "ImplementationSpecific",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}},
            {"path": "/", "pathType": "ImplementationSpecific",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}},
        ]}}]});
        let r = report(
            &[ing(
                "d",
                "x",
                &[
                    (&nginx("proxy-body-size"), "1m"),
                    ("sluice.dev/proxy-body-size", "2m"),
                ],
                spec,
            )],
            &[],
        );
        // ImplementationSpecific is matched as ingress-nginx matches it (a string prefix):
        // nothing to say about it.
        let notes = &r.ingresses[0].notes;
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("nginx.ingress.kubernetes.io/proxy-body-size is ignored"));
    }

    #[test]
    fn ingresses_are_sorted_and_counted() {
        let r = report(
            &[
                ing("b", "z", &[(&nginx("auth-type"), "basic")], json!({})),
                ing("a", "y", &[], json!({})),
                ing("b", "a", &[], json!({})),
            ],
            &[],
        );
        let names: Vec<String> = r
            .ingresses
            .iter()
            .map(|i| format!("{}/{}", i.namespace, i.name))
            .collect();
        assert_eq!(names, ["a/y", "b/a", "b/z"]);
        assert_eq!(r.summary.fully_supported, 2);
        assert_eq!(r.summary.with_problems, 1);
        assert!(
            r.to_text()
                .ends_with("\n3 Ingresses, 2 fully supported, 1 with problems\n"),
            "{}",
            r.to_text()
        );
    }

    #[test]
    fn errors_win_the_exit_status() {
        let mut r = report(&[ing("a", "y", &[], json!({}))], &[]);
        assert_eq!(r.exit_code, EXIT_CLEAN);
        r.add_error("bad.yaml: document 1: invalid YAML");
        assert_eq!(r.exit_code, EXIT_ERROR);
        assert_eq!(r.summary.errors, 1);
        let text = r.to_text();
        assert!(
            text.contains("error: bad.yaml: document 1: invalid YAML\n"),
            "{text}"
        );
        assert!(text.ends_with(", 1 error\n"), "{text}");
    }

    #[test]
    fn text_report_lists_each_annotation_with_its_verdict() {
        let r = report(
            &[ing(
                "shop",
                "web",
                &[
                    (&nginx("enable-cors"), "true"),
                    (&nginx("server-snippet"), "x"),
                ],
                json!({"ingressClassName": "nginx"}),
            )],
            &[],
        );
        let text = r.to_text();
        for line in [
            "\nshop/web: 2 problems\n",
            "  class        nginx (spec.ingressClassName): NOT served: no IngressClass nginx",
            "  fix          set spec.ingressClassName: sluice;",
            "  honoured     nginx.ingress.kubernetes.io/enable-cors\n",
            "  refused      nginx.ingress.kubernetes.io/server-snippet: snippets are",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
    }

    /// #33: the class fix every Ingress of the old controller's class needs is said once.
    #[test]
    fn a_class_fix_shared_by_ingresses_is_said_once() {
        let class = json!({"ingressClassName": "nginx"});
        let r = report(
            &[
                ing("shop", "a", &[], class.clone()),
                ing("shop", "b", &[], class.clone()),
                ing("blog", "c", &[], json!({"ingressClassName": "other"})),
            ],
            &[],
        );
        let text = r.to_text();
        assert_eq!(
            text.matches(
                "set spec.ingressClassName: sluice; or, once its controller is gone, \
                           recreate IngressClass nginx"
            )
            .count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("class fix for 2 Ingresses: set spec.ingressClassName: sluice;"),
            "{text}"
        );
        assert_eq!(
            text.matches("  fix          the class fix above\n").count(),
            2,
            "{text}"
        );
        // A fix of one Ingress alone stays on its Ingress.
        assert!(
            text.contains(
                "  fix          set spec.ingressClassName: sluice; or, once its \
                           controller is gone, recreate IngressClass other"
            ),
            "{text}"
        );
    }

    #[test]
    fn json_report_has_the_same_content() {
        let r = report(
            &[ing(
                "shop",
                "web",
                &[(&nginx("auth-type"), "basic")],
                json!({}),
            )],
            &[],
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["exit_code"], 1);
        assert_eq!(v["summary"]["with_problems"], 1);
        let i = &v["ingresses"][0];
        assert_eq!(i["namespace"], "shop");
        assert_eq!(i["class"]["served"], true);
        assert_eq!(i["problems"][0]["annotation"], nginx("auth-type"));
        assert_eq!(i["problems"][0]["reason"], "FailedClosed");
    }

    /// #30: `sluice migrate --configmap` says what each key of ingress-nginx's ConfigMap
    /// does in sluice.
    #[test]
    fn the_configmap_is_reported_key_by_key() {
        let map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"namespace": "ingress-nginx", "name": "controller"},
            "data": {
                "proxy-body-size": "8m",
                "use-gzip": "true",
                "proxy-read-timeout": "later",
                "worker-processes": "4"
            }
        }))
        .unwrap();
        let r = ConfigMapReport::new("ingress-nginx/controller".into(), Some(&map));
        assert_eq!(r.applied, ["proxy-body-size", "use-gzip"]);
        let keys: Vec<&str> = r.problems.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["proxy-read-timeout", "worker-processes"]);
        assert!(r.problems[1].1.contains("--workers"), "{:?}", r.problems);
        let mut report = build_report(&[], &[], &CompileOptions::default());
        report.config_map = Some(r);
        let text = report.to_text();
        assert!(text.contains("applied      proxy-body-size"), "{text}");
        assert!(!ConfigMapReport::new("a/b".into(), None).found);
    }
}
