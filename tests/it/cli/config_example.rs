//! `systemd/follower.toml.example` claims every configuration key: it names each key of the
//! README's configuration reference, in its section, and no other; as shipped it passes
//! `check-config`; and each key it leaves commented out is one the configuration accepts
//! there (uncommented, it is never refused as unknown). The README's quick-start
//! configuration passes `check-config` as written.

use crate::support;
use crate::support::docs;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn example_path() -> PathBuf {
    support::manifest_dir().join("systemd/follower.toml.example")
}

/// A key line of the example: its section (`""` at the top, `follow` for `[[follow]]`), key,
/// line index, and whether it is commented out.
struct KeyLine {
    section: String,
    key: String,
    line: usize,
    commented: bool,
}

/// `[name]`, `[[name]]`, `# [name]` → `name`.
fn header(line: &str) -> Option<String> {
    let l = line.trim_start_matches('#').trim();
    let name = l.strip_prefix("[[").and_then(|r| r.strip_suffix("]]"));
    let name = name.or_else(|| l.strip_prefix('[').and_then(|r| r.strip_suffix(']')))?;
    name.chars()
        .all(|c| c.is_ascii_lowercase() || c == '_')
        .then(|| name.to_string())
}

/// `key = value` or `# key = value` → (`key`, commented).
fn key_of(line: &str) -> Option<(String, bool)> {
    let (bare, commented) = match line.strip_prefix("# ") {
        Some(rest) => (rest, true),
        None => (line, false),
    };
    let (key, _) = bare.split_once(" = ")?;
    (!key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .then(|| (key.to_string(), commented))
}

fn key_lines(text: &str) -> Vec<KeyLine> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (line, l) in text.lines().enumerate() {
        if let Some(h) = header(l) {
            section = h;
        } else if let Some((key, commented)) = key_of(l) {
            out.push(KeyLine {
                section: section.clone(),
                key,
                line,
                commented,
            });
        }
    }
    out
}

fn dotted(section: &str, key: &str) -> String {
    if section.is_empty() {
        key.to_string()
    } else {
        format!("{section}.{key}")
    }
}

/// Every key the README's configuration reference table names (`fetch.max_bytes`, …).
fn reference_keys() -> BTreeSet<String> {
    let readme = docs::readme();
    let section = docs::section(&readme, "### Configuration");
    let keys: BTreeSet<String> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let first_cell = l.split('|').nth(1).unwrap_or_default();
            first_cell
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        keys.contains("data_dir") && keys.contains("serve.listen") && keys.len() >= 40,
        "the README's configuration reference table was not found: {keys:?}"
    );
    keys
}

fn check_config(path: &Path) -> (Option<i32>, String) {
    let (code, out, err) = support::run_cli(&["check-config", "--config", path.to_str().unwrap()]);
    (code, format!("{out}{err}"))
}

#[test]
fn the_example_names_every_key_of_the_reference_and_no_other() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let in_example: BTreeSet<String> = key_lines(&text)
        .iter()
        .map(|k| dotted(&k.section, &k.key))
        .collect();
    let reference = reference_keys();
    let missing: Vec<_> = reference.difference(&in_example).collect();
    let unknown: Vec<_> = in_example.difference(&reference).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{}: keys of the README's reference it lacks: {missing:?}; keys it has that the \
         reference does not name: {unknown:?}",
        example_path().display()
    );
}

#[test]
fn the_example_as_shipped_passes_check_config() {
    let (code, said) = check_config(&example_path());
    assert_eq!(code, Some(0), "check-config on the example: {said}");
}

#[test]
fn the_quick_start_configuration_passes_check_config() {
    let readme = docs::readme();
    let block = docs::first_fenced_block(docs::section(&readme, "### A minimal configuration"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("follower.toml");
    std::fs::write(&path, block.join("\n")).unwrap();
    let (code, said) = check_config(&path);
    assert_eq!(
        code,
        Some(0),
        "check-config on the README's minimal configuration:\n{}\n{said}",
        block.join("\n")
    );
}

#[test]
fn every_commented_key_of_the_example_is_accepted_where_it_stands() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let dir = tempfile::tempdir().unwrap();
    let commented: Vec<KeyLine> = key_lines(&text)
        .into_iter()
        .filter(|k| k.commented)
        .collect();
    assert!(
        commented.len() >= 20,
        "expected the optional sections commented out"
    );
    for k in &commented {
        // Uncomment the key and, when its section header is commented too, the header.
        let mut edited: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        edited[k.line] = lines[k.line].trim_start_matches("# ").to_string();
        if let Some(h) = (0..k.line)
            .rev()
            .find(|&i| header(lines[i]).is_some())
            .filter(|&i| lines[i].starts_with('#'))
        {
            edited[h] = lines[h].trim_start_matches("# ").to_string();
        }
        let path = dir
            .path()
            .join(format!("{}.toml", dotted(&k.section, &k.key)));
        std::fs::write(&path, edited.join("\n")).unwrap();
        let (_, said) = check_config(&path);
        // Other refusals are fine here: a TLS file under /etc that does not exist, a key for a
        // protocol not in use. Only an unknown or misplaced key is the example's fault.
        assert!(
            !said.contains("unknown field") && !said.contains("invalid type"),
            "{} line {}: `{}` uncommented is refused: {said}",
            example_path().display(),
            k.line + 1,
            lines[k.line]
        );
    }
}
