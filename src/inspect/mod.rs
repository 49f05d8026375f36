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

/// The directory of `tp` in `data_dir`, for `dump` and `offsets`: a data dir that is not
/// there is said as such, then a partition it does not hold.
pub fn partition_dir(data_dir: &Path, tp: &TopicPartition) -> Result<std::path::PathBuf> {
    crate::log::manager::existing_data_dir(data_dir)?;
    let dir = data_dir.join(tp.dir_name());
    if !dir.is_dir() {
        anyhow::bail!("{tp}: no partition directory `{}`", dir.display());
    }
    Ok(dir)
}

/// What `status` warns of and `verify` fails on: `data_dir` holds no partition and no
/// checkpoint file, so it is most likely a mistyped path rather than a data dir.
pub fn not_a_data_dir(data_dir: &Path, partitions: usize) -> Option<String> {
    let has_checkpoints = [
        crate::checkpoint::REPLICATION_OFFSET,
        crate::checkpoint::RECOVERY_POINT,
        crate::checkpoint::LOG_START_OFFSET,
    ]
    .iter()
    .any(|n| data_dir.join(n).exists());
    (partitions == 0 && !has_checkpoints).then(|| {
        format!(
            "`{}` holds no partition and no checkpoint file: is it a replica-follower data dir?",
            data_dir.display()
        )
    })
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
