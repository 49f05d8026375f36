//! The crate's layering, read from its own sources: every top-level module uses (through
//! `crate::` and `super::` paths, test code left out) only the modules listed before it in
//! lib.rs's layout doc, that list names every module, no files of one module depend on each
//! other in a cycle, and no production file is over 1,000 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_PRODUCTION_LINES: usize = 1000;

/// Every `.rs` file under `dir`, by its path relative to `root`.
fn sources(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(rel, std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The module path of a file: `fetcher/manager/stop.rs` → [fetcher, manager, stop].
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Whether a line opens an item compiled only for tests.
fn is_test_attr(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test")
}

/// The text without its `#[cfg(test)]` items (a `mod x;` line, or an item up to its closing
/// brace), and the files those `mod x;` lines pull in.
fn strip_tests(file: &str, text: &str) -> (String, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut out, mut test_files) = (Vec::new(), Vec::new());
    let dir = Path::new(file).parent().unwrap_or(Path::new(""));
    let stem = Path::new(file).file_stem().unwrap().to_string_lossy();
    let mut i = 0;
    while i < lines.len() {
        if !is_test_attr(lines[i]) {
            out.push(lines[i]);
            i += 1;
            continue;
        }
        let mut j = i + 1;
        let mut path_attr = None;
        while j < lines.len() && lines[j].trim_start().starts_with("#[") {
            if let Some(p) = lines[j].split("path = \"").nth(1) {
                path_attr = p.split('"').next().map(String::from);
            }
            j += 1;
        }
        let Some(item) = lines.get(j) else { break };
        if item.trim_end().ends_with(';') {
            if let Some(name) = item.trim().strip_suffix(';').and_then(|m| {
                m.trim_start_matches("pub ")
                    .strip_prefix("mod ")
                    .map(str::trim)
            }) {
                let here = if matches!(&*stem, "mod" | "lib" | "main") {
                    dir.to_path_buf()
                } else {
                    dir.join(&*stem)
                };
                let f: PathBuf = match &path_attr {
                    Some(p) => dir.join(p),
                    None => here.join(format!("{name}.rs")),
                };
                test_files.push(f.to_string_lossy().into_owned());
            }
            i = j + 1;
            continue;
        }
        let (mut depth, mut opened) = (0i64, false);
        while j < lines.len() {
            let l = lines[j];
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            j += 1;
            if opened && depth <= 0 {
                break;
            }
        }
        i = j;
    }
    (out.join("\n"), test_files)
}

/// Every `crate::…` and `super::…` path in `code` (comments left out), with `use` groups
/// (`crate::a::{b, c::d}`) expanded one level.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or("");
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < line.len() {
            let rest = &line[i..];
            let starts = (rest.starts_with("crate::") || rest.starts_with("super::"))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
            if !starts {
                i += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let base = rest[..end].trim_end_matches(':').to_string();
            if rest[end..].starts_with('{') && rest[..end].ends_with("::") {
                let group = rest[end + 1..].split('}').next().unwrap_or("");
                for member in group.split(',').map(str::trim) {
                    let member = member.split_whitespace().next().unwrap_or("");
                    if !member.is_empty() && member != "self" {
                        out.push(format!("{base}::{member}"));
                    }
                }
            }
            out.push(base);
            i += end.max(1);
        }
    }
    out
}

/// `path` as a module path seen from the file whose module is `from`.
fn resolve(from: &[String], path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split("::").collect();
    if parts[0] == "crate" {
        return parts[1..].iter().map(|s| s.to_string()).collect();
    }
    let mut cur = from.to_vec();
    let mut k = 0;
    while k < parts.len() && (parts[k] == "super" || parts[k] == "self") {
        if parts[k] == "super" {
            cur.pop();
        }
        k += 1;
    }
    cur.extend(parts[k..].iter().map(|s| s.to_string()));
    cur
}

/// Strongly connected components of more than one node.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: order by finish time, then collect on the reversed graph.
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for &n in &nodes {
        let mut stack = vec![(n, false)];
        while let Some((v, done)) = stack.pop() {
            if done {
                order.push(v);
                continue;
            }
            if !seen.insert(v) {
                continue;
            }
            stack.push((v, true));
            for w in edges.get(v).into_iter().flatten() {
                if !seen.contains(w) {
                    stack.push((w, false));
                }
            }
        }
    }
    let mut reversed: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (a, bs) in edges {
        for b in bs {
            reversed.entry(b).or_default().push(a);
        }
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for &n in order.iter().rev() {
        if assigned.contains(n) {
            continue;
        }
        let mut comp = Vec::new();
        let mut stack = vec![n];
        assigned.insert(n);
        while let Some(v) = stack.pop() {
            comp.push(v.clone());
            for &w in reversed.get(v).into_iter().flatten() {
                if assigned.insert(w) {
                    stack.push(w);
                }
            }
        }
        if comp.len() > 1 {
            comp.sort();
            out.push(comp);
        }
    }
    out
}

struct Layers {
    /// Top-level module → the top-level modules its production code uses.
    modules: BTreeMap<String, BTreeSet<String>>,
    /// File module → the sibling files (same parent module) its production code uses.
    files: BTreeMap<String, BTreeSet<String>>,
    /// Production lines of each file.
    lines: BTreeMap<String, usize>,
}

fn layers(src: &Path) -> Layers {
    let mut all = BTreeMap::new();
    sources(src, src, &mut all);
    let known: BTreeSet<Vec<String>> = all.keys().map(|f| module_of(f)).collect();
    let mut stripped = BTreeMap::new();
    let mut test_only = BTreeSet::new();
    for (f, text) in &all {
        let (code, tests) = strip_tests(f, text);
        test_only.extend(tests);
        stripped.insert(f.clone(), code);
    }
    let mut l = Layers {
        modules: BTreeMap::new(),
        files: BTreeMap::new(),
        lines: BTreeMap::new(),
    };
    for (f, code) in &stripped {
        if test_only.contains(f) || f == "main.rs" {
            continue;
        }
        l.lines.insert(f.clone(), code.lines().count());
        let from = module_of(f);
        for p in paths(code) {
            let to = resolve(&from, &p);
            // The longest prefix that is a file of the crate (`crate::log_info!` is none).
            let Some(target) = (1..=to.len())
                .rev()
                .map(|k| to[..k].to_vec())
                .find(|m| known.contains(m))
            else {
                continue;
            };
            if let (Some(a), Some(b)) = (from.first(), target.first())
                && a != b
            {
                l.modules.entry(a.clone()).or_default().insert(b.clone());
            }
            if from.len() >= 2
                && target.len() == from.len()
                && target != from
                && target[..target.len() - 1] == from[..from.len() - 1]
            {
                l.files
                    .entry(from.join("/"))
                    .or_default()
                    .insert(target.join("/"));
            }
        }
    }
    l
}

/// The modules lib.rs's layout doc lists (`//! N. [`name`] — …`), in order.
fn listed_order(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let item = l.strip_prefix("//! ")?;
            let (num, rest) = item.split_once(". [`")?;
            num.parse::<u32>().ok()?;
            rest.split('`').next().map(String::from)
        })
        .collect()
}

fn declared(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_uses_only_those_the_layout_doc_lists_before_it() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let order = listed_order(&lib);
    let listed: BTreeSet<String> = order.iter().cloned().collect();
    assert_eq!(
        order.len(),
        listed.len(),
        "a module listed twice: {order:?}"
    );
    assert_eq!(
        listed,
        declared(&lib),
        "lib.rs's layout doc must name every module it declares"
    );
    let l = layers(&src());
    // The graph is not empty: a parser that found nothing would pass everything.
    assert!(l.modules.get("daemon").is_some_and(|m| m.len() > 5));
    let rank: BTreeMap<&String, usize> = order.iter().enumerate().map(|(i, m)| (m, i)).collect();
    let mut wrong = Vec::new();
    for (a, uses) in &l.modules {
        for b in uses {
            if rank.get(a) <= rank.get(b) {
                wrong.push(format!("{a} uses {b}, listed after it"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(cycles(&l.modules).is_empty());
}

#[test]
fn no_files_of_one_module_depend_on_each_other_in_a_cycle() {
    let l = layers(&src());
    assert!(!l.files.is_empty());
    let found = cycles(&l.files);
    assert!(found.is_empty(), "file cycles: {found:?}");
}

#[test]
fn no_production_file_is_over_a_thousand_lines() {
    let l = layers(&src());
    assert!(l.lines.len() > 50, "{} files", l.lines.len());
    let over: Vec<String> = l
        .lines
        .iter()
        .filter(|(_, n)| **n > MAX_PRODUCTION_LINES)
        .map(|(f, n)| format!("src/{f}: {n} lines"))
        .collect();
    assert!(over.is_empty(), "{}", over.join("\n"));
}

/// The checks themselves, on a crate made up here: an edge against the listed order, a
/// cycle between files and test code that must not count.
#[test]
fn the_checks_see_a_layering_error_a_file_cycle_and_skip_test_code() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path();
    std::fs::create_dir_all(s.join("b")).unwrap();
    std::fs::write(s.join("a.rs"), "use crate::b::x;\n").unwrap();
    std::fs::write(s.join("b/mod.rs"), "mod x;\nmod y;\n").unwrap();
    std::fs::write(s.join("b/x.rs"), "use super::y::Y;\n").unwrap();
    std::fs::write(
        s.join("b/y.rs"),
        "use super::x::X;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n#[cfg(test)]\n#[path = \"y_tests.rs\"]\nmod more;\n",
    )
    .unwrap();
    std::fs::write(s.join("b/y_tests.rs"), "use crate::a::Z;\n").unwrap();
    let l = layers(s);
    assert_eq!(l.modules["a"], BTreeSet::from(["b".to_string()]));
    assert!(
        !l.modules.contains_key("b"),
        "test code counted: {:?}",
        l.modules
    );
    assert_eq!(
        cycles(&l.files),
        vec![vec!["b/x".to_string(), "b/y".to_string()]]
    );
    assert_eq!(
        listed_order("//! 1. [`b`] — x\n//! 2. [`a`] — y\n//!    3. not one\n"),
        vec!["b", "a"]
    );
}
