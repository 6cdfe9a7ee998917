//! The pipeline's modules must not import each other in a circle: each stage has one job
//! and depends only on the stages and shared pieces below it. The same holds for the
//! crate's folders taken whole (`http` below `upstream` below `pipeline` below `front` ...),
//! so each folder can be read with only the ones below it in mind. This reads the crate's
//! own sources (the non-test part of each file) and fails on any cycle, naming it.

use std::collections::{BTreeMap, BTreeSet};

/// Module path (`front::http1`, `upstream` for `upstream/mod.rs`) -> the crate modules its
/// non-test code names as `crate::<path>` (the longest module path a reference starts with).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = BTreeMap::new();
    collect(&dir, "", &mut sources);
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(name, code)| {
            let deps = code
                .match_indices("crate::")
                .flat_map(|(at, _)| paths(&code[at + "crate::".len()..]))
                .filter_map(|path| longest_module(&path, &names))
                .filter(|dep| dep != name)
                .collect();
            (name.clone(), deps)
        })
        .collect()
}

/// Reads every `.rs` file under `dir` (module path `prefix`) into `sources`.
fn collect(dir: &std::path::Path, prefix: &str, sources: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let joined = |name: &str| {
            if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}::{name}")
            }
        };
        if path.is_dir() {
            collect(&path, &joined(stem), sources);
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "lib" {
            let name = if stem == "mod" {
                prefix.to_owned()
            } else {
                joined(stem)
            };
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            // Tests may reach anywhere; only the code itself counts.
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            sources.insert(name, code);
        }
    }
}

/// The longest of `names` that `path` (`a::b::c`) starts with, segment by segment.
fn longest_module(path: &str, names: &BTreeSet<String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|candidate| names.contains(candidate))
}

/// The paths a reference after `crate::` names: `a::b` names `a::b`; a group (as in
/// `use crate::{a::b, c};` or `crate::a::{b, c}`) names each of its members.
fn paths(rest: &str) -> Vec<String> {
    let ident_end = |s: &str| {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    let mut prefix = String::new();
    let mut rest = rest.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            // Split the group at its top-level commas, up to its closing brace.
            let (mut depth, mut start, mut out) = (0usize, 0usize, Vec::new());
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.extend(
                            paths(&group[start..i])
                                .into_iter()
                                .map(|p| prefix.clone() + &p),
                        );
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.extend(
                            paths(&group[start..i])
                                .into_iter()
                                .map(|p| prefix.clone() + &p),
                        );
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return out;
        }
        let end = ident_end(rest);
        prefix.push_str(&rest[..end]);
        match rest[end..].strip_prefix("::") {
            Some(next) => {
                prefix.push_str("::");
                rest = next;
            }
            None => return vec![prefix],
        }
    }
}

/// A cycle through `start`, if any (depth-first search).
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    at: &str,
    path: &mut Vec<String>,
    seen: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    for dep in &graph[at] {
        if dep == start {
            let mut cycle = path.clone();
            cycle.push(start.to_owned());
            return Some(cycle);
        }
        if seen.insert(dep.clone()) {
            path.push(dep.clone());
            if let Some(cycle) = cycle_from(graph, start, dep, path, seen) {
                return Some(cycle);
            }
            path.pop();
        }
    }
    None
}

#[test]
fn pipeline_modules_have_no_import_cycles() {
    let graph = graph();
    assert!(graph.contains_key("front::hyper_service") && graph.contains_key("front::http1"));
    for module in graph.keys() {
        let mut path = vec![module.clone()];
        let cycle = cycle_from(&graph, module, module, &mut path, &mut BTreeSet::new());
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle.unwrap_or_default().join(" -> ")
        );
    }
    // Both front ends run the same stages.
    for front in ["front::hyper_service", "front::http1"] {
        for stage in [
            "pipeline::admit",
            "pipeline::route",
            "upstream",
            "body::upstream",
        ] {
            assert!(graph[front].contains(stage), "{front} does not use {stage}");
        }
    }
}

#[test]
fn folders_have_no_import_cycles() {
    // Each module stands for its top-level folder (or file).
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let top = |name: &str| name.split("::").next().unwrap_or(name).to_owned();
    for (module, deps) in graph() {
        let from = top(&module);
        let entry = folders.entry(from.clone()).or_default();
        entry.extend(deps.iter().map(|d| top(d)).filter(|d| *d != from));
    }
    for folder in [
        "http", "backend", "body", "upstream", "pipeline", "front", "serve",
    ] {
        assert!(folders.contains_key(folder), "no folder {folder}");
    }
    for folder in folders.keys() {
        let mut path = vec![folder.clone()];
        let cycle = cycle_from(&folders, folder, folder, &mut path, &mut BTreeSet::new());
        assert!(
            cycle.is_none(),
            "folder import cycle: {}",
            cycle.unwrap_or_default().join(" -> ")
        );
    }
}
