//! The code layout's promise (lib.rs, docs/development.md "Code layout"): no module of the library
//! imports another that imports it back, directly or through others. Checked on the
//! source text: every `crate::<module>` outside test code is an edge between top-level
//! modules (a file or folder under `src/`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module → the top-level modules it names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.path().is_dir() {
                true => Some(name),
                false => name.strip_suffix(".rs").map(str::to_string),
            }
        })
        .filter(|m| !matches!(m.as_str(), "lib" | "main" | "cli"))
        .collect();
    let crate_path = regex::Regex::new(r"crate::([a-z_]+)").unwrap();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        collect(&src.join(module), &mut files);
        collect(&src.join(format!("{module}.rs")), &mut files);
        let edges = graph.entry(module.clone()).or_default();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Test modules may reach anywhere.
            let code = text.split("#[cfg(test)]").next().unwrap();
            for c in crate_path.captures_iter(code) {
                let target = &c[1];
                if target != module && modules.contains(target) {
                    edges.insert(target.to_string());
                }
            }
        }
    }
    graph
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            collect(&e.path(), out);
        }
    } else if path.is_file() && path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// A path from `from` back to itself, if there is one.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(from.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(graph.len() > 10, "found only {graph:?}");
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .map(|c| c.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "import circles:\n{}", cycles.join("\n"));
}

#[test]
fn the_check_sees_a_circle() {
    let mut graph = imports();
    graph.get_mut("source").unwrap().insert("pipeline".into());
    assert!(cycle_through(&graph, "source").is_some());
}
