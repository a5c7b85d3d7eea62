//! The engine's layers (DESIGN.md §2) as a test: a module may name only the layers below
//! it and the foundations. A `crate::` path that reaches up fails here, with the file, the
//! line and the rule it breaks.

use std::fs;
use std::path::{Path, PathBuf};

/// Usable from every layer: errors, the clock, the sync shim and failpoints.
const FOUNDATIONS: &[&str] = &["error", "clock", "sync", "failpoint"];

/// Bottom up. A module of layer i may name layers 0..=i.
const LAYERS: &[&str] = &["format", "device", "alloc", "pipeline", "tree", "txg", "catalog", "pool", "check", "repl"];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == module)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/pool/txn.rs` → `pool`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("non-empty").as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::NAME` a line of code names (comments removed).
fn crate_paths(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            out.push(name);
        }
        rest = after;
    }
    out
}

fn upward_imports(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut broken = Vec::new();
    for file in files {
        let module = module_of(src, &file);
        if module == "lib" {
            continue; // the crate root declares the layers and re-exports the public face
        }
        let text = fs::read_to_string(&file).expect("read source");
        let Some(own) = rank(&module) else {
            if !FOUNDATIONS.contains(&module.as_str()) {
                broken.push(format!(
                    "{}: module `{module}` is in no layer; add it to LAYERS or FOUNDATIONS",
                    file.display()
                ));
            }
            // A foundation names no layer at all.
            for (n, line) in text.lines().enumerate() {
                for name in crate_paths(line) {
                    if rank(&name).is_some() {
                        broken.push(format!(
                            "{}:{}: foundation `{module}` names layer `{name}`",
                            file.display(),
                            n + 1
                        ));
                    }
                }
            }
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for name in crate_paths(line) {
                match rank(&name) {
                    Some(r) if r > own => broken.push(format!(
                        "{}:{}: layer `{module}` names `crate::{name}`, a layer above it",
                        file.display(),
                        n + 1
                    )),
                    Some(_) => {}
                    None if FOUNDATIONS.contains(&name.as_str()) => {}
                    None => broken.push(format!(
                        "{}:{}: `crate::{name}` is in no layer (a re-export at the crate root? name the layer's module)",
                        file.display(),
                        n + 1
                    )),
                }
            }
        }
    }
    broken
}

#[test]
fn no_layer_imports_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let broken = upward_imports(&src);
    assert!(broken.is_empty(), "{} upward or unplaced imports:\n{}", broken.len(), broken.join("\n"));
}

/// The check itself can fail: a file that reaches up is reported.
#[test]
fn an_upward_import_is_reported() {
    let dir = std::env::temp_dir().join(format!("strata-layers-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("tree")).unwrap();
    fs::write(dir.join("tree/mod.rs"), "use crate::pool::Pool;\nuse crate::format::BlockPtr; // crate::check\n")
        .unwrap();
    fs::write(dir.join("error.rs"), "use crate::txg::write_root;\n").unwrap();
    let broken = upward_imports(&dir);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("foundation `error` names layer `txg`"), "{broken:?}");
    assert!(broken[1].contains("tree/mod.rs:1: layer `tree` names `crate::pool`"), "{broken:?}");
}
