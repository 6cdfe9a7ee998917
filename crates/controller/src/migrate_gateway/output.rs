//! How a [`Conversion`] is written: one YAML stream, one file per object, and the report of
//! what each Ingress became.

use super::convert::{Conversion, Emitted, Object};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One object as a YAML document: its comment lines, then the object.
pub fn document(emitted: &Emitted) -> Result<String, String> {
    let yaml = match &emitted.object {
        Object::Gateway(o) => yaml_serde::to_string(o),
        Object::ReferenceGrant(o) => yaml_serde::to_string(o),
        Object::HttpRoute(o) => yaml_serde::to_string(o),
        Object::GrpcRoute(o) => yaml_serde::to_string(o),
        Object::BackendTlsPolicy(o) => yaml_serde::to_string(o),
    }
    .map_err(|e| format!("{}: {e}", emitted.object.display_name()))?;
    let mut doc = String::new();
    for comment in &emitted.comments {
        for line in comment.lines() {
            let _ = writeln!(doc, "# {line}");
        }
    }
    doc.push_str(&yaml);
    if !doc.ends_with('\n') {
        doc.push('\n');
    }
    Ok(doc)
}

/// Every object, in order, as one YAML stream (`---` between documents).
pub fn to_yaml(conversion: &Conversion) -> Result<String, String> {
    let mut out = String::new();
    for (i, emitted) in conversion.objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&document(emitted)?);
    }
    Ok(out)
}

/// The file an object is written to under `--output-dir`: `kind-namespace-name.yaml`.
pub fn file_name(emitted: &Emitted) -> String {
    let m = emitted.object.metadata();
    format!(
        "{}-{}-{}.yaml",
        emitted.object.kind().to_ascii_lowercase(),
        m.namespace.as_deref().unwrap_or(""),
        m.name.as_deref().unwrap_or("")
    )
}

/// Writes one file per object into `dir` (created if missing); the paths written.
pub fn write_dir(conversion: &Conversion, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for emitted in &conversion.objects {
        let doc = document(emitted).map_err(std::io::Error::other)?;
        let path = dir.join(file_name(emitted));
        std::fs::write(&path, doc)?;
        written.push(path);
    }
    Ok(written)
}

/// Per Ingress: the objects it became, what was carried and what not (access restrictions
/// first and loud), and a summary line.
pub fn report(conversion: &Conversion) -> String {
    const W: usize = 12;
    let mut s = String::new();
    for ingress in &conversion.ingresses {
        let _ = writeln!(s, "{}/{}:", ingress.namespace, ingress.name);
        if ingress.restricts_access {
            let how = if ingress.closed {
                "its routes have NO backendRefs (they answer 500, closed); add your \
                 implementation's policy, then the backendRefs, or run with --allow-open"
            } else {
                "--allow-open: its routes ANSWER EVERYONE"
            };
            let _ = writeln!(
                s,
                "  {:W$} access restrictions cannot be carried: {how}",
                "ACCESS"
            );
        }
        for object in &ingress.objects {
            let _ = writeln!(s, "  {:W$} {object}", "emitted");
        }
        for carried in &ingress.carried {
            let _ = writeln!(s, "  {:W$} {carried}", "carried");
        }
        for n in &ingress.not_carried {
            let _ = writeln!(s, "  {:W$} {}: {}", "NOT carried", n.what, n.why);
        }
    }
    let whole = conversion
        .ingresses
        .iter()
        .filter(|i| i.not_carried.is_empty())
        .count();
    let closed = conversion.ingresses.iter().filter(|i| i.closed).count();
    let _ = writeln!(
        s,
        "{} Ingresses, {whole} carried whole, {} with something not carried, {closed} closed; \
         {} objects",
        conversion.ingresses.len(),
        conversion.ingresses.len() - whole,
        conversion.objects.len()
    );
    s
}
