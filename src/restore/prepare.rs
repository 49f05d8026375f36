//! `restore prepare`: the topics made ready on the target cluster, and the plan written.
//!
//! For each topic the replica holds (or those `--topic` names): a topic missing on the
//! target is created with the archived partition count and topic-level configs
//! (`topic-configs-checkpoint`), every partition's one replica on the chosen broker; a topic
//! that exists is accepted only when it has that partition count, every partition led by
//! that broker, and no data (log start and end 0), which is what an earlier run of this step
//! leaves. Then it waits until the broker answers ListOffsets for every partition (its empty
//! partition directories exist) and writes the plan: the target's cluster id, the broker,
//! each partition's topic id there and the archive's range.

use super::plan::{HeldConfig, PLAN_VERSION, Plan, PlannedPartition};
use super::{Target, connect_target};
use crate::checkpoint::TopicPartition;
use crate::checkpoint::upstream;
use crate::client::admin::{self, NewTopic};
use crate::client::cluster::{ClusterMetadata, list_offsets};
use crate::log::data_dir::DataDir;
use crate::protocol::error::ErrorCode;
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the broker may take to create the partitions' logs.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Topic configs not given to the new topic: the throttled-replica lists name the source's
/// brokers, and `message.format.version` is ignored since Kafka 3.0 and refused by 4.x.
const NOT_RESTORED: [&str; 3] = [
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "message.format.version",
];

/// Configs off (-1) while the restore runs: Kafka's retention deletes segments by their
/// newest timestamp, and restored segments may be old; `finish` gives them their archived
/// values back once it has checked the restored ranges.
pub const HELD: [&str; 2] = ["retention.ms", "retention.bytes"];

/// One topic to restore: its partition count, configs, and the archive's ranges.
struct TopicToRestore {
    partitions: i32,
    configs: BTreeMap<String, String>,
    /// (partition, log start, log end) of each partition the replica holds.
    ranges: Vec<(i32, i64, i64)>,
    /// Whether the daemon archived its configs and partition count.
    archived: bool,
}

/// What the replica holds of each topic (limited to `only` when not empty).
fn archived_topics(data_dir: &Path, only: &[String]) -> Result<BTreeMap<String, TopicToRestore>> {
    let (parts, _) = crate::inspect::status::collect(data_dir)?;
    let configs = upstream::read_topics(&data_dir.join(DataDir::TOPIC_CONFIGS))?;
    let mut out: BTreeMap<String, TopicToRestore> = BTreeMap::new();
    for p in parts {
        if !only.is_empty() && !only.contains(&p.tp.topic) {
            continue;
        }
        let t = out.entry(p.tp.topic.clone()).or_insert_with(|| {
            let archived = configs.get(&p.tp.topic);
            TopicToRestore {
                partitions: archived.map_or(0, |a| a.partitions),
                configs: archived.map(|a| a.configs.clone()).unwrap_or_default(),
                ranges: Vec::new(),
                archived: archived.is_some(),
            }
        });
        t.partitions = t.partitions.max(p.tp.partition + 1);
        t.ranges
            .push((p.tp.partition, p.log_start_offset, p.log_end_offset));
    }
    for t in only {
        if !out.contains_key(t) {
            bail!(
                "--topic {t}: the replica in `{}` holds no partition of it",
                data_dir.display()
            );
        }
    }
    if out.is_empty() {
        bail!("the replica in `{}` holds no partition", data_dir.display());
    }
    Ok(out)
}

/// Creates what is missing, checks what exists, waits for the logs, writes the plan.
pub fn prepare(
    data_dir: &Path,
    target: &Target,
    broker: i32,
    plan_path: &Path,
    only: &[String],
    out: &mut dyn std::io::Write,
) -> Result<Plan> {
    // Where the plan goes, before anything is created on the target.
    let plan_dir = plan_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !plan_dir.is_dir() {
        bail!(
            "--plan `{}`: the directory `{}` does not exist",
            plan_path.display(),
            plan_dir.display()
        );
    }
    let topics = archived_topics(data_dir, only)?;
    let names: Vec<String> = topics.keys().cloned().collect();
    let (mut conn, md) = connect_target(target, &names)?;
    let cluster_id = md
        .cluster_id
        .clone()
        .context("the target cluster reports no cluster id (Metadata v2+ is needed)")?;
    if !md.brokers.contains_key(&broker) {
        bail!(
            "--broker {broker}: the target cluster {cluster_id} has no such broker (it has {:?})",
            md.brokers.keys().collect::<Vec<_>>()
        );
    }
    let addr = md
        .broker_addr(broker)
        .with_context(|| format!("broker {broker} has no address in the metadata"))?
        .to_string();
    let mut leader = super::connect_addr(target, &addr)?;
    let mut create = Vec::new();
    let held_off: Vec<(String, Option<String>)> = HELD
        .iter()
        .map(|k| (k.to_string(), Some("-1".to_string())))
        .collect();
    for (name, t) in &topics {
        match md.topics.get(name) {
            Some((e, parts)) if e.is_ok() && !parts.is_empty() => {
                check_existing(&mut leader, name, t, parts.len(), &md, broker)?;
                admin::alter_topic_configs(&mut conn, name, &held_off)
                    .with_context(|| format!("holding off the retention of topic {name}"))?;
                writeln!(
                    out,
                    "topic {name}: exists, empty, on broker {broker}; retention off until `restore finish`"
                )?;
            }
            _ => create.push(NewTopic {
                name: name.clone(),
                assignments: (0..t.partitions).map(|p| (p, vec![broker])).collect(),
                configs: t
                    .configs
                    .iter()
                    .filter(|(k, _)| {
                        !NOT_RESTORED.contains(&k.as_str()) && !HELD.contains(&k.as_str())
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .chain(
                        held_off
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default())),
                    )
                    .collect(),
            }),
        }
    }
    if !create.is_empty() {
        for c in admin::create_topics(&mut conn, &create, 30_000, false)? {
            if !c.error.is_ok() && c.error != ErrorCode::TOPIC_ALREADY_EXISTS {
                bail!(
                    "creating topic {} on the target failed: {} {}",
                    c.name,
                    c.error.name(),
                    c.message.unwrap_or_default()
                );
            }
            let t = topics.get(&c.name);
            if t.is_some_and(|t| !t.archived) {
                writeln!(
                    out,
                    "topic {}: the replica has no archived configs of it (the daemon never archived them): created with the target's defaults",
                    c.name
                )?;
            }
            writeln!(
                out,
                "topic {}: created with {} partition(s) on broker {broker}, {} archived config(s); retention off until `restore finish`",
                c.name,
                t.map_or(0, |t| t.partitions),
                t.map_or(0, |t| t.configs.len())
            )?;
        }
    }
    let md = wait_ready(target, &topics, broker)?;
    let mut plan = Plan {
        version: PLAN_VERSION,
        cluster_id,
        broker,
        source_cluster_id: crate::log::identity::read_cluster_id(data_dir)?,
        partitions: Vec::new(),
        held: topics
            .iter()
            .flat_map(|(name, t)| {
                HELD.iter().map(move |k| HeldConfig {
                    topic: name.clone(),
                    name: k.to_string(),
                    value: t.configs.get(*k).cloned(),
                })
            })
            .collect(),
    };
    for (name, t) in &topics {
        let id = md.topic_ids.get(name).with_context(|| {
            format!("the target reports no topic id for {name} (Metadata v10+ is needed)")
        })?;
        for &(partition, start, end) in &t.ranges {
            plan.partitions.push(PlannedPartition {
                topic: name.clone(),
                partition,
                topic_id: id.to_string(),
                log_start_offset: start,
                log_end_offset: end,
            });
        }
    }
    plan.write(plan_path)?;
    // A new plan starts a new restore: what a `finish` of an earlier one recorded is void.
    let stale = super::finish::finishing_path(plan_path);
    if stale.exists() {
        std::fs::remove_file(&stale)
            .with_context(|| format!("failed to remove `{}`", stale.display()))?;
    }
    writeln!(
        out,
        "plan written to `{}`: {} partition(s) for broker {broker} of cluster {}; stop that broker and run `restore write`",
        plan_path.display(),
        plan.partitions.len(),
        plan.cluster_id
    )?;
    Ok(plan)
}

/// An existing topic is accepted only as this step leaves it: the archived partition count,
/// every partition led by `broker`, no data.
fn check_existing(
    conn: &mut crate::client::connection::BrokerConnection,
    name: &str,
    t: &TopicToRestore,
    partitions: usize,
    md: &ClusterMetadata,
    broker: i32,
) -> Result<()> {
    if i32::try_from(partitions).ok() != Some(t.partitions) {
        bail!(
            "topic {name} exists on the target with {partitions} partition(s), the archive has {}: refusing (delete it, or restore the others with --topic)",
            t.partitions
        );
    }
    // Its one replica on `broker`: a follower elsewhere would take over when the broker
    // stops for `write`, and truncate what it restored once it is back.
    for p in 0..t.partitions {
        let replicas = md
            .replicas
            .get(&TopicPartition::new(name, p))
            .cloned()
            .unwrap_or_default();
        if replicas != [broker] {
            bail!(
                "topic {name} exists on the target with partition {p} on brokers {replicas:?}, not on broker {broker} alone: refusing (delete it, or restore the others with --topic)"
            );
        }
    }
    for isolation_ts in [-2i64, -1] {
        let asks: Vec<(TopicPartition, i32, i64)> = (0..t.partitions)
            .map(|p| (TopicPartition::new(name, p), -1, isolation_ts))
            .collect();
        for (tp, a) in list_offsets(conn, 0, &asks)? {
            match a {
                Ok(a) if a.offset == 0 => {}
                Ok(a) => bail!(
                    "topic {name} exists on the target with data ({tp} {} offset {}): refusing to restore over it",
                    if isolation_ts == -2 {
                        "log start"
                    } else {
                        "log end"
                    },
                    a.offset
                ),
                Err(e) => bail!(
                    "topic {name} on the target: ListOffsets of {tp}: {}",
                    e.name()
                ),
            }
        }
    }
    Ok(())
}

/// Waits until `broker` leads and answers ListOffsets for every planned partition.
fn wait_ready(
    target: &Target,
    topics: &BTreeMap<String, TopicToRestore>,
    broker: i32,
) -> Result<ClusterMetadata> {
    let names: Vec<String> = topics.keys().cloned().collect();
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let (_, md) = connect_target(target, &names)?;
        let mut waiting = BTreeSet::new();
        for (name, t) in topics {
            let parts = md
                .topics
                .get(name)
                .map(|(_, p)| p.clone())
                .unwrap_or_default();
            for p in 0..t.partitions {
                if parts.get(&p).is_none_or(|l| l.leader_id != broker) {
                    waiting.insert(TopicPartition::new(name, p));
                }
            }
        }
        if waiting.is_empty() {
            let addr = md
                .broker_addr(broker)
                .context("the broker left the metadata")?
                .to_string();
            let mut leader = super::connect_addr(target, &addr)?;
            let asks: Vec<(TopicPartition, i32, i64)> = topics
                .iter()
                .flat_map(|(n, t)| {
                    (0..t.partitions).map(move |p| (TopicPartition::new(n, p), -1, -1))
                })
                .collect();
            for (tp, a) in list_offsets(&mut leader, 0, &asks)? {
                if a.is_err() {
                    waiting.insert(tp);
                }
            }
            if waiting.is_empty() {
                return Ok(md);
            }
        }
        if Instant::now() > deadline {
            bail!(
                "broker {broker} does not lead or answer for {} partition(s) after {} s (first: {})",
                waiting.len(),
                READY_WITHIN.as_secs(),
                waiting
                    .iter()
                    .next()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
