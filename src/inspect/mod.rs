//! Read-only views of a data directory: `status`, `dump`, `offsets`, `verify` (and
//! `verify --against-leader`, which also asks the leaders).
//! They never take the data-dir lock and never write, so they work while the daemon runs
//! (a batch being appended at that moment shows up as a partial tail and is left out).

pub mod against_leader;
pub mod dump;
pub mod offsets;
pub mod status;
pub mod upstream;
pub mod verify;

use crate::checkpoint::TopicPartition;
use crate::log::data_dir::DataDir;
use crate::log::identity::{self, Archived};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The directory `dump`, `offsets` and `verify --topic` read for `tp`: the partition
/// directory `<topic>-<partition>`, or else the archived history whose read name
/// (`<topic>.<old id>.archived`, see [`Archived::name`]) is `tp`'s topic. A data dir that is
/// not there is said as such, then a partition it does not hold, naming the archived
/// histories of that topic-partition when there are some.
pub fn partition_dir(data_dir: &Path, tp: &TopicPartition) -> Result<PartitionDir> {
    crate::log::manager::existing_data_dir(data_dir)?;
    let dir = data_dir.join(tp.dir_name());
    if dir.is_dir() {
        return Ok(PartitionDir {
            path: dir,
            archived: None,
        });
    }
    let archived = identity::list_archived(data_dir)?;
    if let Some(a) = archived
        .iter()
        .find(|a| a.name == tp.topic && a.partition == tp.partition)
    {
        return Ok(PartitionDir {
            path: a.path.clone(),
            archived: Some(a.clone()),
        });
    }
    let names: Vec<String> = archived
        .iter()
        .filter(|a| a.topic == tp.topic && a.partition == tp.partition)
        .map(|a| format!("`--topic {}`", a.name))
        .collect();
    if names.is_empty() {
        anyhow::bail!("{tp}: no partition directory `{}`", dir.display());
    }
    anyhow::bail!(
        "{tp}: no partition directory `{}`; its archived histories are read with {}",
        dir.display(),
        names.join(" or ")
    )
}

/// Where a partition's files are, and whether that is an archived history (which no
/// checkpoint file names: its log start is its first segment, its end its last batch).
#[derive(Debug, Clone)]
pub struct PartitionDir {
    pub path: PathBuf,
    pub archived: Option<Archived>,
}

/// What `status` warns of and `verify` fails on: `data_dir` holds no partition and no
/// checkpoint file, so it is most likely a mistyped path rather than a data dir.
pub fn not_a_data_dir(data_dir: &Path, partitions: usize) -> Option<String> {
    let has_checkpoints = [
        DataDir::REPLICATION_OFFSET,
        DataDir::RECOVERY_POINT,
        DataDir::LOG_START_OFFSET,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archived_history_is_found_by_its_read_name_and_named_when_missed() {
        let d = tempfile::tempdir().unwrap();
        let id = crate::protocol::uuid::Uuid([3; 16]);
        let archived = d.path().join(format!("t-0.{id}.archived"));
        std::fs::create_dir(&archived).unwrap();
        let name = format!("t.{id}.archived");

        let found = partition_dir(d.path(), &TopicPartition::new(name.clone(), 0)).unwrap();
        assert_eq!(found.path, archived);
        assert!(found.archived.is_some());
        let e = partition_dir(d.path(), &TopicPartition::new("t", 0)).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("read with `--topic {name}`")),
            "{e}"
        );
        let e = partition_dir(d.path(), &TopicPartition::new("t", 1)).unwrap_err();
        assert!(!e.to_string().contains("archived"), "{e}");

        std::fs::create_dir(d.path().join("t-0")).unwrap();
        let live = partition_dir(d.path(), &TopicPartition::new("t", 0)).unwrap();
        assert!(live.archived.is_none());
    }
}
