//! `restore finish`: with the restored broker running again, checks the restore and makes
//! the cluster safe to use.
//!
//! 1. Every planned partition's log start and end on the target (ListOffsets at its leader)
//!    must equal the archive's; anything else is reported and nothing is changed.
//! 2. Transactions the archive left open would hold every read_committed consumer at their
//!    first offset forever (their producers are gone): each is aborted with an ABORT marker
//!    (WriteTxnMarkers at the leader, with the producer's epoch and coordinator epoch that
//!    DescribeProducers reports; what Kafka's `Admin.abortTransaction` sends). Each marker
//!    takes one offset past the restored end; how many each partition gets is kept in
//!    `PLAN.finish` before the first is written, so that a run cut short is finished by the
//!    next, which accepts the ends those markers make.
//! 3. A new cluster hands out producer ids from 0, which the restored producer state may
//!    hold: a new idempotent producer with such an id would be fenced, refused, or — when its
//!    first sequence numbers match a restored batch's — answered as a duplicate and its
//!    records dropped. So producer ids are taken (InitProducerId, no transactional id) from
//!    every broker until each hands out one above the largest restored id.
//! 4. Each archived group's offsets of the planned partitions are committed
//!    (OffsetCommit at its coordinator, as an empty group, generation -1) with leader epoch
//!    0, the only epoch the restored logs hold; a group that has other offsets on the target
//!    is left as it is and reported.
//! 5. The retention `prepare` held off is given back: the archived `retention.ms` and
//!    `retention.bytes`, or the target's defaults (the plan's `[[held]]` entries).

use super::plan::Plan;
use super::{Target, connect_addr, connect_target};
use crate::checkpoint::TopicPartition;
use crate::checkpoint::upstream;
use crate::client::admin::{self, CommittedOffset, TxnMarker};
use crate::client::cluster::list_offsets;
use crate::client::connection::BrokerConnection;
use crate::log::data_dir::DataDir;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most producer ids taken from one broker: past it the remedy is not applied, and the
/// report says why (a source cluster that handed out millions of ids).
pub const MAX_IDS_TAKEN: i64 = 200_000;

/// How long a fresh cluster's coordinators may take to answer.
const COORDINATED_WITHIN: Duration = Duration::from_secs(60);

/// The abort markers `finish` writes past the archive's end, per partition: recorded before
/// the first is written, so that a run cut short (a crash, a failed marker) is finished by
/// the next one, which then accepts an end up to that many offsets past the archive's.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Finishing {
    #[serde(default, rename = "aborts")]
    aborts: Vec<Aborts>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Aborts {
    topic: String,
    partition: i32,
    markers: i64,
}

pub(super) fn finishing_path(plan: &Path) -> PathBuf {
    let mut name = plan.file_name().unwrap_or_default().to_os_string();
    name.push(".finish");
    plan.with_file_name(name)
}

fn read_finishing(path: &Path) -> Result<BTreeMap<TopicPartition, i64>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    let f: Finishing =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("`{}`: {e}", path.display()))?;
    Ok(f.aborts
        .into_iter()
        .map(|a| (TopicPartition::new(a.topic, a.partition), a.markers))
        .collect())
}

fn write_finishing(path: &Path, aborts: &BTreeMap<TopicPartition, i64>) -> Result<()> {
    let f = Finishing {
        aborts: aborts
            .iter()
            .map(|(tp, n)| Aborts {
                topic: tp.topic.clone(),
                partition: tp.partition,
                markers: *n,
            })
            .collect(),
    };
    let text = toml::to_string(&f).context("failed to render the finish state")?;
    let text = format!(
        "# The abort markers `restore finish` writes past the archive's end; `restore prepare` removes this file.\n{text}"
    );
    crate::checkpoint::rewrite_atomic(path, text.as_bytes())
}

/// Runs the checks and the fixes; `Ok(true)` when everything matched and was done.
pub fn finish(
    data_dir: &Path,
    target: &Target,
    plan_path: &Path,
    out: &mut dyn Write,
) -> Result<bool> {
    let plan = Plan::read(plan_path)?;
    plan.check_source(data_dir)?;
    let topics: Vec<String> = plan
        .partitions
        .iter()
        .map(|p| p.topic.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let (mut conn, md) = connect_target(target, &topics)?;
    if md.cluster_id.as_deref() != Some(plan.cluster_id.as_str()) {
        bail!(
            "the target is cluster {}, the plan `{}` is for cluster {}",
            md.cluster_id.as_deref().unwrap_or("(none)"),
            plan_path.display(),
            plan.cluster_id
        );
    }
    let addr = md
        .broker_addr(plan.broker)
        .with_context(|| {
            format!(
                "broker {} is not in the target's metadata: is it running?",
                plan.broker
            )
        })?
        .to_string();
    let mut leader = connect_addr(target, &addr)?;
    let state_path = finishing_path(plan_path);
    let mut aborts = read_finishing(&state_path)?;
    // 1. The ranges.
    let mismatches = check_ranges(&mut leader, &plan, &aborts, false)?;
    for m in &mismatches {
        writeln!(out, "MISMATCH {m}")?;
    }
    if !mismatches.is_empty() {
        writeln!(
            out,
            "{} partition(s) differ from the plan: nothing else was done (was `restore write` run into this broker's log dir, and did the broker load it? see its log)",
            mismatches.len()
        )?;
        return Ok(false);
    }
    writeln!(
        out,
        "ranges: {} partition(s), log start and end as archived",
        plan.partitions.len()
    )?;
    // 2. Open transactions: every marker to write is recorded before the first is written.
    let (open, max_id) = open_transactions(&mut leader, &plan, &topics)?;
    let mut intended = aborts.clone();
    for (tp, _) in &open {
        if !aborts.contains_key(tp) {
            *intended.entry(tp.clone()).or_insert(0) += 1;
        }
    }
    if intended != aborts {
        write_finishing(&state_path, &intended)?;
        aborts = intended;
    }
    for (tp, s) in &open {
        let marker = TxnMarker {
            producer_id: s.producer_id,
            producer_epoch: i16::try_from(s.producer_epoch).unwrap_or(i16::MAX),
            committed: false,
            topic: tp.topic.clone(),
            partitions: vec![tp.partition],
            coordinator_epoch: s.coordinator_epoch,
        };
        for (_, t, p, e) in admin::write_txn_markers(&mut leader, &[marker])? {
            if !e.is_ok() {
                bail!(
                    "aborting the open transaction of producer {} on {t}-{p}: {} (run `restore finish` again)",
                    s.producer_id,
                    e.name()
                );
            }
        }
        writeln!(
            out,
            "{tp}: aborted the transaction producer {} left open at offset {}",
            s.producer_id, s.current_txn_start_offset
        )?;
    }
    if !aborts.is_empty() {
        wait_stable(&mut leader, &plan, &aborts)?;
        let after = check_ranges(&mut leader, &plan, &aborts, true)?;
        if let Some(m) = after.first() {
            bail!("after the abort markers: {m}");
        }
    }
    // 3. Producer ids.
    let mut all_ok = true;
    match take_producer_ids(target, &md, max_id)? {
        Ok(taken) => writeln!(
            out,
            "producer ids: the restored logs hold ids up to {max_id}; took {taken} id(s) so that every broker hands out higher ones"
        )?,
        Err(why) => {
            all_ok = false;
            writeln!(out, "PRODUCER IDS NOT MOVED: {why}")?;
        }
    }
    // 4. Groups.
    let groups = upstream::read_groups(&data_dir.join(DataDir::GROUP_OFFSETS))?;
    for (group, offsets) in &groups {
        let mut clamped = Vec::new();
        let planned: Vec<CommittedOffset> = offsets
            .iter()
            .filter_map(|(tp, o)| {
                let p = plan.partitions.iter().find(|p| p.tp() == *tp)?;
                // An offset outside what was restored (committed while the replica lagged, or
                // below a log start the replica never had) is moved to the nearest end.
                let offset = o.offset.clamp(p.log_start_offset, p.log_end_offset);
                if offset != o.offset {
                    clamped.push(format!("{tp} {} -> {offset}", o.offset));
                }
                Some(CommittedOffset {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset,
                    leader_epoch: 0,
                    metadata: o.metadata.clone(),
                })
            })
            .collect();
        if planned.is_empty() {
            continue;
        }
        if !clamped.is_empty() {
            writeln!(
                out,
                "group {group}: offsets outside the restored range, committed at its nearest end: {}",
                clamped.join(", ")
            )?;
        }
        match commit_group(target, &mut conn, group, &planned)? {
            Ok(line) => writeln!(out, "group {group}: {line}")?,
            Err(line) => {
                all_ok = false;
                writeln!(out, "GROUP {group}: {line}")?;
            }
        }
    }
    // 5. Retention back, now that the ranges are checked.
    let mut held: BTreeMap<&str, Vec<(String, Option<String>)>> = BTreeMap::new();
    for h in &plan.held {
        held.entry(h.topic.as_str())
            .or_default()
            .push((h.name.clone(), h.value.clone()));
    }
    for (topic, changes) in &held {
        let shown: Vec<String> = changes
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("(default)")))
            .collect();
        match admin::alter_topic_configs(&mut conn, topic, changes) {
            Ok(()) => writeln!(
                out,
                "topic {topic}: retention given back: {}",
                shown.join(" ")
            )?,
            Err(e) => {
                all_ok = false;
                writeln!(
                    out,
                    "TOPIC {topic}: retention not given back ({}): {e:#}",
                    shown.join(" ")
                )?;
            }
        }
    }
    writeln!(
        out,
        "{}",
        if all_ok {
            "restore finished: consumers may resume"
        } else {
            "restore finished with the problems above"
        }
    )?;
    Ok(all_ok)
}

/// The transactions the archive left open on the planned partitions, and the largest
/// producer id the restored state holds (-1: none).
fn open_transactions(
    leader: &mut BrokerConnection,
    plan: &Plan,
    topics: &[String],
) -> Result<(Vec<(TopicPartition, admin::ProducerState)>, i64)> {
    let mut open = Vec::new();
    let mut max_id = -1i64;
    for topic in topics {
        let parts: Vec<i32> = plan
            .partitions
            .iter()
            .filter(|p| &p.topic == topic)
            .map(|p| p.partition)
            .collect();
        for pp in admin::describe_producers(leader, topic, &parts)? {
            if !pp.error.is_ok() {
                bail!(
                    "DescribeProducers of {topic}-{}: {}",
                    pp.partition,
                    pp.error.name()
                );
            }
            for s in pp.producers {
                max_id = max_id.max(s.producer_id);
                if s.current_txn_start_offset >= 0 {
                    open.push((TopicPartition::new(topic, pp.partition), s));
                }
            }
        }
    }
    Ok((open, max_id))
}

/// Each planned partition's log start and end at the leader against the archive's. A
/// partition with abort markers to write may end up to that many offsets past the archive's
/// end, or, with `markers_written`, exactly that many.
fn check_ranges(
    leader: &mut BrokerConnection,
    plan: &Plan,
    aborts: &BTreeMap<TopicPartition, i64>,
    markers_written: bool,
) -> Result<Vec<String>> {
    let mut asked = |ts: i64| -> Result<BTreeMap<TopicPartition, i64>> {
        let asks: Vec<(TopicPartition, i32, i64)> =
            plan.partitions.iter().map(|p| (p.tp(), -1, ts)).collect();
        list_offsets(leader, 0, &asks)?
            .into_iter()
            .map(|(tp, a)| {
                a.map(|a| (tp.clone(), a.offset))
                    .map_err(|e| anyhow::anyhow!("ListOffsets of {tp}: {}", e.name()))
            })
            .collect()
    };
    let (starts, lasts) = (asked(-2)?, asked(-1)?);
    let mut out = Vec::new();
    for p in &plan.partitions {
        let tp = p.tp();
        let markers = aborts.get(&tp).copied().unwrap_or(0);
        let lowest = if markers_written {
            p.log_end_offset + markers
        } else {
            p.log_end_offset
        };
        let highest = p.log_end_offset + markers;
        let (start, end) = (starts.get(&tp).copied(), lasts.get(&tp).copied());
        if start != Some(p.log_start_offset)
            || !end.is_some_and(|e| (lowest..=highest).contains(&e))
        {
            out.push(format!(
                "{tp}: log start {} and end {} on the target, {} and {} in the plan{}",
                start.map_or("?".into(), |o| o.to_string()),
                end.map_or("?".into(), |o| o.to_string()),
                p.log_start_offset,
                p.log_end_offset,
                if markers > 0 {
                    format!(" (+{markers} abort marker(s))")
                } else {
                    String::new()
                }
            ));
        }
    }
    Ok(out)
}

/// Waits until read_committed readers may read to the end of every partition with abort
/// markers.
fn wait_stable(
    leader: &mut BrokerConnection,
    plan: &Plan,
    aborts: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let ends: BTreeMap<TopicPartition, i64> = plan
        .partitions
        .iter()
        .filter_map(|p| aborts.get(&p.tp()).map(|n| (p.tp(), p.log_end_offset + n)))
        .collect();
    let asks: Vec<(TopicPartition, i32, i64)> =
        ends.keys().map(|tp| (tp.clone(), -1, -1)).collect();
    loop {
        let stable = list_offsets(leader, 1, &asks)?;
        let behind: Vec<&TopicPartition> = ends
            .iter()
            .filter(|(tp, end)| !matches!(stable.get(*tp), Some(Ok(a)) if a.offset >= **end))
            .map(|(tp, _)| tp)
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the last stable offset of {} did not reach its end 30 s after the abort markers",
                behind.first().map(ToString::to_string).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Takes producer ids from every broker until each hands out one above `max_id`; the count
/// taken, or why not.
fn take_producer_ids(
    target: &Target,
    md: &crate::client::cluster::ClusterMetadata,
    max_id: i64,
) -> Result<Result<i64, String>> {
    if max_id < 0 {
        return Ok(Ok(0));
    }
    if max_id >= MAX_IDS_TAKEN {
        return Ok(Err(format!(
            "the restored logs hold producer id {max_id}; taking that many ids from each broker is not done (limit {MAX_IDS_TAKEN}). New producers may collide with restored ones until their state expires (producer.id.expiration.ms); see the README"
        )));
    }
    let mut taken = 0;
    for (id, addr) in &md.brokers {
        let mut c = connect_addr(target, addr)?;
        loop {
            let (pid, _) = super::coordinated(COORDINATED_WITHIN, || {
                admin::init_producer_id(&mut c, None, 30_000)
            })
            .with_context(|| format!("InitProducerId at broker {id}"))?;
            taken += 1;
            if pid > max_id {
                break;
            }
        }
    }
    Ok(Ok(taken))
}

/// Commits `offsets` for `group` unless the target holds other offsets for it; a line for
/// the report, `Err` when the group's offsets are not the archive's after it.
fn commit_group(
    target: &Target,
    conn: &mut BrokerConnection,
    group: &str,
    offsets: &[CommittedOffset],
) -> Result<std::result::Result<String, String>> {
    let coord = super::coordinated(COORDINATED_WITHIN, || {
        admin::find_coordinator(conn, admin::KEY_TYPE_GROUP, group)
    })
    .with_context(|| format!("FindCoordinator of group `{group}`"))?;
    let mut c = connect_addr(target, &format!("{}:{}", coord.host, coord.port))?;
    let key = |o: &CommittedOffset| (o.topic.clone(), o.partition);
    let now: HashMap<(String, i32), i64> =
        super::coordinated(COORDINATED_WITHIN, || admin::offset_fetch(&mut c, group))?
            .iter()
            .map(|o| (key(o), o.offset))
            .collect();
    let same = |now: &HashMap<(String, i32), i64>| {
        offsets.iter().all(|o| now.get(&key(o)) == Some(&o.offset))
    };
    if same(&now) {
        return Ok(Ok(format!("{} offset(s), as archived", offsets.len())));
    }
    if !now.is_empty() {
        // Its consumers resumed (or it was there before): theirs are the offsets now.
        let differ = offsets
            .iter()
            .filter(|o| now.get(&key(o)) != Some(&o.offset))
            .count();
        return Ok(Ok(format!(
            "has its own committed offsets on the target ({differ} of {} partition(s) differ from the archive): left as they are",
            offsets.len()
        )));
    }
    let answers = match super::coordinated(COORDINATED_WITHIN, || {
        admin::offset_commit(&mut c, group, offsets)
    }) {
        Ok(a) => a,
        Err(e) => return Ok(Err(format!("OffsetCommit failed: {e:#}"))),
    };
    if let Some((t, p, e)) = answers.iter().find(|(_, _, e)| !e.is_ok()) {
        return Ok(Err(format!("OffsetCommit of {t}-{p}: {}", e.name())));
    }
    let after: HashMap<(String, i32), i64> =
        super::coordinated(COORDINATED_WITHIN, || admin::offset_fetch(&mut c, group))?
            .iter()
            .map(|o| (key(o), o.offset))
            .collect();
    if same(&after) {
        Ok(Ok(format!("committed {} offset(s)", offsets.len())))
    } else {
        Ok(Err(
            "the committed offsets read back differ from the archive's".into(),
        ))
    }
}
