//! Read-only views of a data directory: `status`, `dump`, `offsets`, `verify` (and
//! `verify --against-leader`, which also asks the leaders).
//! They never take the data-dir lock and never write, so they work while the daemon runs
//! (a batch being appended at that moment shows up as a partial tail and is left out).

pub mod against_leader;
pub mod dump;
pub mod offsets;
pub mod status;
pub mod verify;

use crate::checkpoint::TopicPartition;
use anyhow::{Context, Result};
use std::path::Path;

/// Partition directories under `data_dir`, sorted.
pub fn partition_dirs(data_dir: &Path) -> Result<Vec<TopicPartition>> {
    let mut out: Vec<TopicPartition> = std::fs::read_dir(data_dir)
        .with_context(|| format!("failed to list data dir `{}`", data_dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| TopicPartition::parse_dir_name(&e.file_name().to_string_lossy()))
        .collect();
    out.sort();
    Ok(out)
}

/// Escapes a string for JSON output.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
