//! Property-based fuzz target for the manifest document parser
//! ([`crate::manifest_dir::parse_manifests`]), which reads whatever lands in
//! `sluice serve --manifests DIR`. Every test is named `fuzz_manifest_documents_...`, so
//! `cargo test -p sluice-controller --lib fuzz_manifest` runs them all; raise
//! `PROPTEST_CASES` for a longer run.
//!
//! Properties: no input panics the parser; every error names the document it is about
//! (`document N`, the first bad one when the others are good); every object returned has a
//! supported kind, a name and a namespace that is also written into its metadata.
//! Inputs: arbitrary strings, YAML-ish text assembled from manifest fragments and YAML's
//! sharp edges (anchors, aliases, tags, flow collections, block scalars, deep nesting,
//! document markers, tabs), mutations of a valid file, and streams of good and bad documents.

use crate::manifest_dir::{Kinds, parse_manifests};
use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use proptest::prelude::*;
use proptest::sample::Index;

fn kinds() -> Kinds {
    Kinds::default()
        .with::<Ingress>()
        .with::<IngressClass>()
        .with::<Service>()
        .with::<Endpoints>()
        .with::<Secret>()
}

const SUPPORTED: [&str; 5] = ["Ingress", "IngressClass", "Service", "Endpoints", "Secret"];

/// Parses `text` and checks the properties every input must have.
fn check(text: &str) -> Result<(), TestCaseError> {
    match parse_manifests(text, &kinds()) {
        Ok(parsed) => {
            for document in &parsed.skipped {
                prop_assert!(document.starts_with("document "), "{document}");
            }
            for (key, value) in &parsed.objects {
                prop_assert!(SUPPORTED.contains(&key.kind.as_str()), "{key}");
                prop_assert!(!key.name.is_empty() && !key.namespace.is_empty(), "{key}");
                prop_assert_eq!(
                    value["metadata"]["namespace"].as_str(),
                    Some(key.namespace.as_str())
                );
            }
        }
        Err(e) => {
            let n = document_number(&e);
            prop_assert!(n.is_some(), "error does not name a document: {e:?}");
            // A document starts on its own line, so there are never more than lines + 1.
            let lines = text.lines().count() + 1;
            prop_assert!(
                n.unwrap_or(0) <= lines,
                "document number past the end: {e:?}"
            );
        }
    }
    Ok(())
}

/// `N` of an error starting `document N`; `None` when it does not.
fn document_number(error: &str) -> Option<usize> {
    let rest = error.strip_prefix("document ")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok().filter(|&n| n >= 1)
}

/// Pieces of manifests and of YAML syntax that parsers trip over.
const FRAGMENTS: &[&str] = &[
    "apiVersion: v1\n",
    "apiVersion: networking.k8s.io/v1\n",
    "apiVersion: [v1]\n",
    "kind: Service\n",
    "kind: Ingress\n",
    "kind: List\n",
    "kind: ~\n",
    "metadata:\n",
    "metadata: {name: a}\n",
    "metadata: {name: a, namespace: b}\n",
    "metadata: {name: \"\"}\n",
    "metadata: [1, 2]\n",
    "  name: web\n",
    "  namespace: shop\n",
    "  labels: {a: b}\n",
    "spec:\n",
    "spec: {ports: [{port: 80}]}\n",
    "spec: {ports: 3}\n",
    "spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}\n",
    "  ports:\n",
    "  - port: 80\n",
    "  - {port: 99999999999999999999}\n",
    "  rules: [{host: '*.x', http: {paths: [{path: /, pathType: Prefix}]}}]\n",
    "subsets: [{addresses: [{ip: 127.0.0.1}], ports: [{port: 1}]}]\n",
    "data: {tls.crt: !!binary aGVsbG8=}\n",
    "type: kubernetes.io/tls\n",
    "---\n",
    "--- \n",
    "...\n",
    "%YAML 1.2\n",
    "%TAG ! tag:x,2000:\n",
    "a: &x {b: *x}\n",
    "a: &x [1, 2]\n",
    "b: *x\n",
    "c: *undefined\n",
    "<<: *x\n",
    "? complex key\n",
    ": value\n",
    "? [a, b]\n",
    "k: !custom 1\n",
    "k: !!str 1\n",
    "k: !!int x\n",
    "k: !!float .nan\n",
    "k: |\n  block\n   scalar\n",
    "k: >-\n  folded\n",
    "k: 'single ''quoted'''\n",
    "k: \"esc \\u00e9 \\x41 \\q\"\n",
    "k: [\n",
    "k: {\n",
    "k: ]\n",
    "k: }\n",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
    "{a: {a: {a: {a: {a: {a: {a: {a: 1}}}}}}}}\n",
    "\tk: tab\n",
    "  indented: deeper\n",
    "- item\n",
    "# comment\n",
    "k: v # comment\n",
    "k: 1e400\n",
    "k: -0x1F\n",
    "k: 2001-12-14t21:59:43.10-05:00\n",
    "k: é ☃ \u{202e}\n",
    "\u{feff}",
    "\0",
    "\r\n",
    "\n",
    ":",
    "- ",
    "\"",
    "'",
];

/// Text assembled from [`FRAGMENTS`], sometimes indented.
fn yamlish() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(FRAGMENTS), 0..3usize), 0..24).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(fragment, indent)| format!("{}{fragment}", "  ".repeat(indent % 2)))
            .collect()
    })
}

/// A valid two-kind, three-document manifest file.
const VALID: &str = "apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web}}
spec:
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Endpoints
metadata: {name: web}
subsets: [{addresses: [{ip: 10.0.0.1}], ports: [{name: http, port: 8080}]}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
spec:
  rules:
  - host: shop.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
";

/// [`VALID`] with 1-4 characters replaced, inserted or deleted.
fn mutated_valid() -> impl Strategy<Value = String> {
    let chars = prop_oneof![
        any::<char>(),
        prop::sample::select(
            &[
                ':', '-', ' ', '\n', '\t', '{', '}', '[', ']', '&', '*', '!', '#', '|', '>', '"',
                '\''
            ][..]
        ),
    ];
    prop::collection::vec((any::<Index>(), chars, 0..3u8), 1..5).prop_map(|edits| {
        let mut text: Vec<char> = VALID.chars().collect();
        for (at, c, op) in edits {
            let i = at.index(text.len());
            match op {
                0 => text[i] = c,
                1 => text.insert(i, c),
                _ => {
                    text.remove(i);
                }
            }
        }
        text.into_iter().collect()
    })
}

/// Documents that each fail on their own, for any position in a stream.
const BAD_DOCUMENTS: &[&str] = &[
    "kind: Service\nmetadata: {name: a}\n",
    "apiVersion: v1\nmetadata: {name: a}\n",
    "apiVersion: v1\nkind: Service\nmetadata: {}\n",
    "apiVersion: v1\nkind: Service\nmetadata: {name: ''}\n",
    "apiVersion: extensions/v1beta1\nkind: Ingress\nmetadata: {name: d}\n",
    "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: 3}\n",
    "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: x}]}\n",
    "- just\n- a list\n",
    "plain scalar\n",
    "a: [\n",
    "a: b\n c: d\n",
];

proptest! {
    #[test]
    fn fuzz_manifest_documents_arbitrary_strings(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn fuzz_manifest_documents_printable_strings(text in "[ -~\n\t]{0,200}") {
        check(&text)?;
    }

    #[test]
    fn fuzz_manifest_documents_yamlish(text in yamlish()) {
        check(&text)?;
    }

    #[test]
    fn fuzz_manifest_documents_mutated_valid_file(text in mutated_valid()) {
        check(&text)?;
    }

    /// Good Services and bad documents in any order: all good parse to exactly those
    /// objects, in order; otherwise the error names the first bad document.
    #[test]
    fn fuzz_manifest_documents_error_names_the_first_bad_document(
        docs in prop::collection::vec(
            prop_oneof![
                3 => "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?".prop_map(Ok::<String, &'static str>),
                1 => prop::sample::select(BAD_DOCUMENTS).prop_map(Err::<String, &'static str>),
            ],
            1..8,
        ),
        separator in prop::sample::select(&["---\n", "--- \n", "...\n---\n"][..]),
    ) {
        let text = docs
            .iter()
            .map(|d| match d {
                Ok(name) => format!("apiVersion: v1\nkind: Service\nmetadata: {{name: \"{name}\"}}\n"),
                Err(bad) => (*bad).to_string(),
            })
            .collect::<Vec<_>>()
            .join(separator);
        check(&text)?;
        let first_bad = docs.iter().position(Result::is_err);
        match (parse_manifests(&text, &kinds()), first_bad) {
            (Ok(parsed), None) => {
                let names: Vec<&str> = parsed.objects.iter().map(|(k, _)| k.name.as_str()).collect();
                let want: Vec<&str> = docs.iter().filter_map(|d| d.as_ref().ok().map(String::as_str)).collect();
                prop_assert_eq!(names, want);
            }
            (Err(e), Some(i)) => {
                prop_assert_eq!(document_number(&e), Some(i + 1), "{}", e);
            }
            (got, want) => prop_assert!(false, "first bad document {want:?}, got {got:?}"),
        }
    }
}
