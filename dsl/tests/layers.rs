//! The core crate's layering, checked: every top-level module of `src/`
//! imports (`crate::X` paths outside `#[cfg(test)]` code) only from modules
//! earlier in [`LAYERS`], so data flows one way — trace → lower → compile →
//! execute — and the import graph has no cycle. ARCHITECTURE.md explains
//! each layer.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first. A module may import from any module
/// before it and from none after it.
/// Below them all are the tessel-ir crate (dtypes, shapes, config, errors,
/// host tensors, the graph IR), the tessel-lower crate (the lowering and
/// the interpreter) and the tessel-pjrt crate (the runtime), re-exported at
/// `crate::dtype`, `crate::ir`, `crate::lower`, `crate::runtime` and so on:
/// crate boundaries keep them from importing any of these.
const LAYERS: &[&str] = &[
    "host", "ir", "trace", "report", "ops", "autodiff", "vmap", "lang", "tile", "shard", "kernel",
    "profile", "private",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source of a file without `#[cfg(test)]` code and line comments.
fn production_code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module names a source text reaches through `crate::`, including
/// grouped imports (`use crate::{a, b::c}`).
fn reached(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in src.match_indices("crate::") {
        let rest = &src[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = group.split('}').next().unwrap_or("");
            for part in body.split(',') {
                out.insert(ident(part.trim()));
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// Module → the modules it imports, for every top-level module of `src/`.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
        let edges = graph.entry(name.clone()).or_default();
        for f in files {
            edges.extend(reached(&production_code(&f)));
        }
        edges.remove(&name);
    }
    graph
}

#[test]
fn every_module_is_in_a_layer() {
    let graph = import_graph();
    let unlisted: Vec<_> = graph
        .keys()
        .filter(|m| !LAYERS.contains(&m.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "top-level modules missing from LAYERS (add them where they belong): {unlisted:?}"
    );
}

#[test]
fn modules_import_only_from_lower_layers() {
    let graph = import_graph();
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut wrong = Vec::new();
    for (module, edges) in &graph {
        let Some(own) = rank(module) else { continue };
        for target in edges {
            if let Some(theirs) = rank(target) {
                if theirs > own {
                    wrong.push(format!("{module} -> {target}"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering (a module may use only the ones before it in LAYERS): {wrong:?}"
    );
}

#[test]
fn the_check_sees_imports() {
    // The scanner itself: plain, grouped and inline paths are found.
    let found = reached(
        "use crate::ir::Graph;\nuse crate::{dtype::DType, shape};\nlet x = crate::ops::f();",
    );
    let want: BTreeSet<String> = ["ir", "dtype", "shape", "ops"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
    assert!(import_graph()["kernel"].contains("trace"));
}
