//! The pipeline's modules must not import each other in a circle: each stage has one job
//! and depends only on the stages and shared pieces below it. This reads the crate's own
//! sources (the non-test part of each file) and fails on any cycle, naming it.

use std::collections::{BTreeMap, BTreeSet};

/// Module name -> the crate modules its non-test code names as `crate::<module>`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            // Tests may reach anywhere; only the code itself counts.
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            sources.insert(name.to_owned(), code);
        }
    }
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(name, code)| {
            let deps = code
                .match_indices("crate::")
                .flat_map(|(at, _)| first_segments(&code[at + "crate::".len()..]))
                .filter(|dep| dep != name && names.contains(dep))
                .collect();
            (name.clone(), deps)
        })
        .collect()
}

/// The modules a path after `crate::` names: `a::b` names `a`; a group `{a::b, c}` (as
/// in `use crate::{a::b, c};`) names `a` and `c`.
fn first_segments(rest: &str) -> Vec<String> {
    let ident = |s: &str| {
        let s = s.trim_start();
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        s[..end].to_owned()
    };
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)];
    };
    // Split the group at its top-level commas, up to its closing brace.
    let (mut depth, mut start, mut out) = (0usize, 0usize, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(ident(&group[start..i]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(ident(&group[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    out
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
    assert!(graph.contains_key("handler") && graph.contains_key("http1"));
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
    for front in ["handler", "http1"] {
        for stage in ["admit", "route", "upstream", "upstream_body"] {
            assert!(graph[front].contains(stage), "{front} does not use {stage}");
        }
    }
}
