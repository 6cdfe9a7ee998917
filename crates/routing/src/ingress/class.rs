//! IngressClass selection: which Ingresses this controller serves.
//!
//! An Ingress is ours if
//! 1. `spec.ingressClassName` names an IngressClass whose `spec.controller` is ours; else
//! 2. its legacy annotation `kubernetes.io/ingress.class` equals our class name; else
//! 3. it has neither, and one of our IngressClasses is annotated
//!    `ingressclass.kubernetes.io/is-default-class: "true"`, or
//!    [`CompileOptions::watch_ingress_without_class`] is set (ingress-nginx's
//!    `--watch-ingress-without-class`: such Ingresses are also ours when some other
//!    controller's class is the default, or when no IngressClass of ours exists at all).
//!
//! The steps are tried in that order, as specified: a class name that is not ours does not stop
//! a matching legacy annotation from making the Ingress ours (the API server refuses to create
//! an Ingress carrying both, so this only matters for old objects).
//!
//! A class name that names no known IngressClass (not created yet, or deleted) does not make
//! the Ingress ours: we cannot tell which controller it is meant for.

use std::collections::HashSet;

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

use crate::CompileOptions;

/// The legacy class annotation on Ingresses.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// The annotation that makes an IngressClass the cluster default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// Decides, for each Ingress, whether it is ours. Built once per compilation.
#[derive(Debug)]
pub(crate) struct ClassSelector<'a> {
    /// Names of the IngressClasses whose controller is ours.
    our_classes: HashSet<&'a str>,
    /// Whether one of them is the default class.
    default_is_ours: bool,
    /// `--watch-ingress-without-class`.
    without_class: bool,
    legacy_class: &'a str,
}

impl<'a> ClassSelector<'a> {
    pub(crate) fn new(
        classes: impl IntoIterator<Item = &'a IngressClass>,
        options: &'a CompileOptions,
    ) -> Self {
        let mut our_classes = HashSet::new();
        let mut default_is_ours = false;
        for class in classes {
            let controller = class.spec.as_ref().and_then(|s| s.controller.as_deref());
            if controller != Some(options.controller_name.as_str()) {
                continue;
            }
            if let Some(name) = class.metadata.name.as_deref() {
                our_classes.insert(name);
            }
            let is_default = class
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true");
            default_is_ours |= is_default;
        }
        ClassSelector {
            our_classes,
            default_is_ours,
            without_class: options.watch_ingress_without_class,
            legacy_class: &options.ingress_class,
        }
    }

    /// Whether `ingress` belongs to this controller.
    pub(crate) fn is_ours(&self, ingress: &Ingress) -> bool {
        let class_name = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref())
            .filter(|n| !n.is_empty());
        if let Some(name) = class_name
            && self.our_classes.contains(name)
        {
            return true;
        }
        let annotation = ingress
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION));
        if let Some(value) = annotation {
            return value == self.legacy_class;
        }
        class_name.is_none() && (self.default_is_ours || self.without_class)
    }

    /// Why `ingress` is not ours, as a sentence; `None` when it is (for `sluice explain`).
    pub(crate) fn why_not(&self, ingress: &Ingress) -> Option<String> {
        if self.is_ours(ingress) {
            return None;
        }
        let class_name = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref())
            .filter(|n| !n.is_empty());
        let annotation = ingress
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION));
        Some(match (class_name, annotation) {
            (_, Some(value)) => format!(
                "class: annotation {LEGACY_CLASS_ANNOTATION}={value:?} is not ours ({:?})",
                self.legacy_class
            ),
            (Some(name), None) => format!(
                "class: spec.ingressClassName {name:?} is not an IngressClass of this controller"
            ),
            (None, None) => "class: no spec.ingressClassName, and no IngressClass of ours is the \
                 default (ingressclass.kubernetes.io/is-default-class) nor \
                 --watch-ingress-without-class set"
                .to_owned(),
        })
    }
}
