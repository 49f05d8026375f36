//! What pins a data dir to its source: the cluster id and, per partition, the topic id.
//!
//! ```text
//! <data_dir>/meta.properties            Kafka's key=value file; here `version=0` and
//!                                       `cluster.id=<the source cluster's id>`
//! <partition dir>/partition.metadata    Kafka's: `version: 0` / `topic_id: <base64 UUID>`
//! ```
//! Both are written atomically (`rewrite_atomic`) on first contact with a leader that reports
//! the id, and never rewritten after: a leader that reports another cluster id gets nothing
//! fetched into this data dir, and a topic whose id changed (deleted and re-created under the
//! same name) has its old history moved aside to `<topic>-<partition>.<old id>.archived/`.

use super::data_dir::DataDir;
use crate::checkpoint::rewrite_atomic;
use crate::protocol::uuid::Uuid;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Reads at most this much of either file: anything longer is not one of them.
const MAX_LEN: u64 = 64 << 10;

fn read_small(path: &Path) -> Result<Option<String>> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("failed to open `{}`", path.display())),
    };
    let mut text = String::new();
    f.take(MAX_LEN + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("failed to read `{}` as UTF-8 text", path.display()))?;
    if text.len() as u64 > MAX_LEN {
        bail!("`{}` is larger than {MAX_LEN} bytes", path.display());
    }
    Ok(Some(text))
}

/// The cluster id recorded for the data dir, if any.
pub fn read_cluster_id(data_dir: &Path) -> Result<Option<String>> {
    let path = data_dir.join(DataDir::META_PROPERTIES);
    let Some(text) = read_small(&path)? else {
        return Ok(None);
    };
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            bail!(
                "`{}` line {}: expected key=value, got `{line}`",
                path.display(),
                n + 1
            );
        };
        if k.trim() == "cluster.id" && !v.trim().is_empty() {
            return Ok(Some(v.trim().to_string()));
        }
    }
    Ok(None)
}

pub fn write_cluster_id(data_dir: &Path, cluster_id: &str) -> Result<()> {
    let text = format!(
        "#the Kafka cluster this data dir replicates; another cluster is refused\nversion=0\ncluster.id={cluster_id}\n"
    );
    rewrite_atomic(&data_dir.join(DataDir::META_PROPERTIES), text.as_bytes())
}

/// The topic id recorded in a partition directory, if any.
pub fn read_topic_id(dir: &Path) -> Result<Option<Uuid>> {
    let path = dir.join(DataDir::PARTITION_METADATA);
    let Some(text) = read_small(&path)? else {
        return Ok(None);
    };
    let mut version = None;
    let mut id = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            bail!(
                "`{}` line {}: expected `key: value`, got `{line}`",
                path.display(),
                n + 1
            );
        };
        match k.trim() {
            "version" => version = Some(v.trim().to_string()),
            "topic_id" => {
                id = Some(Uuid::parse(v.trim()).with_context(|| {
                    format!(
                        "`{}` line {}: bad topic id `{}`",
                        path.display(),
                        n + 1,
                        v.trim()
                    )
                })?)
            }
            _ => {}
        }
    }
    if version.as_deref() != Some("0") {
        bail!(
            "`{}`: missing or unsupported version (expected `version: 0`)",
            path.display()
        );
    }
    match id {
        Some(id) => Ok(Some(id)),
        None => bail!("`{}`: no topic_id line", path.display()),
    }
}

/// `partition.metadata` written in place and not fsynced: for a directory made under a
/// private name and made durable as a whole before it is renamed into place.
pub fn write_topic_id_unsynced(dir: &Path, id: Uuid) -> Result<()> {
    let path = dir.join(DataDir::PARTITION_METADATA);
    std::fs::File::create_new(&path)
        .map_err(anyhow::Error::from)
        .and_then(|f| {
            crate::fault::write_all_at(
                crate::fault::Step::Checkpoint,
                &f,
                format!("version: 0\ntopic_id: {id}\n").as_bytes(),
                0,
            )
            .map_err(anyhow::Error::from)
        })
        .with_context(|| format!("failed to write `{}`", path.display()))
}

pub fn write_topic_id(dir: &Path, id: Uuid) -> Result<()> {
    rewrite_atomic(
        &dir.join(DataDir::PARTITION_METADATA),
        format!("version: 0\ntopic_id: {id}\n").as_bytes(),
    )
}

/// Where a partition directory goes when its topic was re-created: the first free name of
/// `<dir name>.<old id>.archived`, then `….archived.2`, ….
pub fn archive_path(data_dir: &Path, dir_name: &str, old_id: Option<Uuid>) -> PathBuf {
    let id = old_id.map_or_else(|| "unknown-id".to_string(), |u| u.to_string());
    let base = format!("{dir_name}.{id}{}", DataDir::ARCHIVED_SUFFIX);
    let mut p = data_dir.join(&base);
    let mut n = 2;
    while p.exists() {
        p = data_dir.join(format!("{base}.{n}"));
        n += 1;
    }
    p
}

/// An archived history: a partition directory moved aside when its topic was re-created.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Archived {
    /// The topic and partition it was the history of.
    pub topic: String,
    pub partition: i32,
    /// The old topic id as written in the directory name (`unknown-id` without one).
    pub topic_id: String,
    /// `<topic>.<old id>.archived` (`….archived.N` for the Nth copy of the same id): the
    /// directory name without its `-<partition>`. The topic name `dump`, `offsets`,
    /// `verify --topic` and `serve` read it under: Kafka's legal characters only, since the
    /// topic and the id (URL-safe base64) are.
    pub name: String,
    pub path: PathBuf,
}

impl Archived {
    /// The address of this history as a partition: (its read name, its partition).
    pub fn tp(&self) -> crate::protocol::TopicPartition {
        crate::protocol::TopicPartition::new(self.name.clone(), self.partition)
    }

    /// The old topic id, when the directory name holds one (not `unknown-id`).
    pub fn old_id(&self) -> Option<Uuid> {
        Uuid::parse(&self.topic_id)
    }

    /// Parses `<topic>-<partition>.<id>.archived[.N]`; `None` for any other name.
    pub fn parse(data_dir: &Path, dir_name: &str) -> Option<Archived> {
        // The last `.archived`: a topic may hold the word too.
        let at = dir_name.rfind(DataDir::ARCHIVED_SUFFIX)?;
        let (stem, suffix) = dir_name.split_at(at);
        let copy = suffix
            .get(DataDir::ARCHIVED_SUFFIX.len()..)
            .unwrap_or_default();
        if !(copy.is_empty()
            || copy
                .strip_prefix('.')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
        {
            return None;
        }
        // `<topic>-<partition>.<id>`: the id is the 22 characters after the last dot.
        let (tp, id) = stem
            .rsplit_once('.')
            .filter(|(_, id)| id.len() == 22 || *id == "unknown-id")?;
        let tp = crate::protocol::TopicPartition::parse_dir_name(tp)?;
        Some(Archived {
            name: format!("{}.{id}{suffix}", tp.topic),
            topic: tp.topic,
            partition: tp.partition,
            topic_id: id.to_string(),
            path: data_dir.join(dir_name),
        })
    }
}

/// Archived partition directories, sorted by topic, partition, id.
pub fn list_archived(data_dir: &Path) -> Result<Vec<Archived>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data_dir)
        .with_context(|| format!("failed to list `{}`", data_dir.display()))?
    {
        let entry = entry.with_context(|| format!("failed to list `{}`", data_dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(a) = Archived::parse(data_dir, &name)
            && entry.path().is_dir()
        {
            out.push(a);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_roundtrip_and_absent() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_cluster_id(d.path()).unwrap(), None);
        write_cluster_id(d.path(), "abc-123").unwrap();
        assert_eq!(
            read_cluster_id(d.path()).unwrap().as_deref(),
            Some("abc-123")
        );
        std::fs::write(d.path().join(DataDir::META_PROPERTIES), "garbage\n").unwrap();
        assert!(
            read_cluster_id(d.path())
                .unwrap_err()
                .to_string()
                .contains(DataDir::META_PROPERTIES)
        );
    }

    #[test]
    fn partition_metadata_is_kafkas_format() {
        let d = tempfile::tempdir().unwrap();
        let id = Uuid([9; 16]);
        write_topic_id(d.path(), id).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join(DataDir::PARTITION_METADATA)).unwrap(),
            format!("version: 0\ntopic_id: {id}\n")
        );
        assert_eq!(read_topic_id(d.path()).unwrap(), Some(id));
        std::fs::write(
            d.path().join(DataDir::PARTITION_METADATA),
            "version: 1\ntopic_id: x\n",
        )
        .unwrap();
        assert!(read_topic_id(d.path()).is_err());
    }

    #[test]
    fn archive_names_never_collide_and_are_listed() {
        let d = tempfile::tempdir().unwrap();
        let id = Uuid([1; 16]);
        let a = archive_path(d.path(), "t-0", Some(id));
        std::fs::create_dir(&a).unwrap();
        let b = archive_path(d.path(), "t-0", Some(id));
        assert_ne!(a, b);
        std::fs::create_dir(&b).unwrap();
        let listed = list_archived(d.path()).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!((listed[0].topic.as_str(), listed[0].partition), ("t", 0));
        assert_eq!(listed[0].topic_id, id.to_string());
        assert_eq!(listed[0].name, format!("t.{id}.archived"));
        assert_eq!(listed[1].name, format!("t.{id}.archived.2"));
        assert_eq!(listed[1].path, b);
    }

    #[test]
    fn archived_names_drop_the_partition_and_nothing_else_parses() {
        let d = Path::new("/d");
        let id = Uuid([7; 16]).to_string();
        let a = Archived::parse(d, &format!("my-topic.archived-12.{id}.archived")).unwrap();
        assert_eq!(
            (a.topic.as_str(), a.partition, a.name.as_str()),
            (
                "my-topic.archived",
                12,
                format!("my-topic.archived.{id}.archived").as_str()
            )
        );
        assert_eq!(a.old_id(), Some(Uuid([7; 16])));
        let u = Archived::parse(d, "t-0.unknown-id.archived").unwrap();
        assert_eq!(
            (u.name.as_str(), u.old_id()),
            ("t.unknown-id.archived", None)
        );
        for other in [
            "t-0",
            "t.archived-0",
            &format!("t-0.{id}.archived.tmp"),
            &format!("t-0.{id}.archived."),
            &format!("t.{id}.archived"),
            "t-0.short.archived",
        ] {
            assert_eq!(Archived::parse(d, other), None, "{other}");
        }
    }
}
