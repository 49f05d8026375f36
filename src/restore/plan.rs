//! The restore plan: what `restore prepare` found and created on the target cluster, read by
//! `restore write` and `restore finish`. TOML, written atomically; every step checks it
//! against what it sees (the target's cluster id, the broker, each topic id) before writing.
//!
//! ```toml
//! version = 1
//! cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"   # the target cluster
//! broker = 1                              # the broker that receives every partition
//! source_cluster_id = "4L6g3nShT-eMCtK--X86sw"
//!
//! [[partition]]
//! topic = "orders"
//! partition = 0
//! topic_id = "bK0QdJ7eQkSmUCh6vYz2fA"     # the target's id of the topic
//! log_start_offset = 0                    # the archive's range to restore
//! log_end_offset = 1200
//!
//! [[held]]                                # retention, off until `restore finish`
//! topic = "orders"
//! name = "retention.ms"
//! value = "604800000"                     # what finish sets; absent: the default
//! ```

use crate::checkpoint::TopicPartition;
use crate::protocol::uuid::Uuid;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const PLAN_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub version: u32,
    pub cluster_id: String,
    pub broker: i32,
    /// The cluster the replica followed (its `meta.properties`), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_id: Option<String>,
    #[serde(default, rename = "partition")]
    pub partitions: Vec<PlannedPartition>,
    /// Configs `prepare` held off while the restore runs (retention, which would delete
    /// restored segments by their old timestamps before `finish` checks them), and what
    /// `finish` gives them back: the archived value, or none (the target's default).
    #[serde(default, rename = "held")]
    pub held: Vec<HeldConfig>,
}

/// A topic config held off by `prepare` and given back by `finish`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldConfig {
    pub topic: String,
    pub name: String,
    /// The value `finish` sets; absent: the override is removed (the target's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedPartition {
    pub topic: String,
    pub partition: i32,
    /// The target cluster's topic id, base64 as Kafka prints it.
    pub topic_id: String,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

impl PlannedPartition {
    pub fn tp(&self) -> TopicPartition {
        TopicPartition::new(&self.topic, self.partition)
    }

    pub fn topic_id(&self) -> Result<Uuid> {
        Uuid::parse(&self.topic_id).with_context(|| {
            format!(
                "{}-{}: topic_id `{}` is not a topic id",
                self.topic, self.partition, self.topic_id
            )
        })
    }
}

impl Plan {
    /// Reads and checks a plan file: its version, and each partition's range and topic id.
    pub fn read(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read the plan `{}`", path.display()))?;
        let plan: Plan = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("`{}`: not a restore plan: {e}", path.display()))?;
        if plan.version != PLAN_VERSION {
            bail!(
                "`{}`: plan version {} (this replica-follower reads version {PLAN_VERSION})",
                path.display(),
                plan.version
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in &plan.partitions {
            if !crate::checkpoint::upstream::valid_topic(&p.topic) {
                bail!("`{}`: `{}` is not a topic name", path.display(), p.topic);
            }
            p.topic_id()
                .with_context(|| format!("`{}`", path.display()))?;
            if p.partition < 0 || p.log_start_offset < 0 || p.log_end_offset < p.log_start_offset {
                bail!(
                    "`{}`: {}-{}: bad partition or range {}..{}",
                    path.display(),
                    p.topic,
                    p.partition,
                    p.log_start_offset,
                    p.log_end_offset
                );
            }
            if !seen.insert(p.tp()) {
                bail!(
                    "`{}`: {}-{} appears twice",
                    path.display(),
                    p.topic,
                    p.partition
                );
            }
        }
        Ok(plan)
    }

    /// The replica in `data_dir` must be the one the plan was made from: the cluster it
    /// replicates is the plan's source cluster.
    pub fn check_source(&self, data_dir: &Path) -> Result<()> {
        let recorded = crate::log::identity::read_cluster_id(data_dir)?;
        if let (Some(plan), Some(here)) = (&self.source_cluster_id, &recorded)
            && plan != here
        {
            bail!(
                "the replica in `{}` replicates cluster {here}, the plan was made from a replica of cluster {plan}: wrong --data-dir?",
                data_dir.display()
            );
        }
        Ok(())
    }

    /// Writes the plan atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = toml::to_string(self).context("failed to render the plan")?;
        let text = format!(
            "# A restore plan of replica-follower: `restore write` and `restore finish` read it.\n{text}"
        );
        crate::checkpoint::rewrite_atomic(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            version: PLAN_VERSION,
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".into(),
            broker: 1,
            source_cluster_id: Some("src".into()),
            partitions: vec![PlannedPartition {
                topic: "orders".into(),
                partition: 2,
                topic_id: Uuid([7; 16]).to_string(),
                log_start_offset: 10,
                log_end_offset: 1200,
            }],
            held: vec![
                HeldConfig {
                    topic: "orders".into(),
                    name: "retention.ms".into(),
                    value: Some("86400000".into()),
                },
                HeldConfig {
                    topic: "orders".into(),
                    name: "retention.bytes".into(),
                    value: None,
                },
            ],
        }
    }

    #[test]
    fn a_plan_round_trips_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plan.toml");
        plan().write(&p).unwrap();
        assert_eq!(Plan::read(&p).unwrap(), plan());
        let text = std::fs::read_to_string(&p).unwrap();
        for (from, to, says) in [
            ("version = 1", "version = 9", "plan version 9"),
            ("partition = 2", "partition = -2", "bad partition or range"),
            (
                "log_end_offset = 1200",
                "log_end_offset = 5",
                "bad partition or range",
            ),
            ("topic_id = \"", "topic_id = \"x", "is not a topic id"),
            ("broker = 1", "broker = 1\nextra = 2", "not a restore plan"),
            (
                "topic = \"orders\"",
                "topic = \"../x\"",
                "is not a topic name",
            ),
        ] {
            std::fs::write(&p, text.replace(from, to)).unwrap();
            let e = format!("{:#}", Plan::read(&p).unwrap_err());
            assert!(e.contains(says), "{to}: {e}");
            assert!(e.contains("plan.toml"), "{e}");
        }
    }
}
