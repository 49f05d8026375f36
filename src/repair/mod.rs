//! Holes and bit rot, found against the leader and re-fetched into place.
//!
//! Offline, a segment missing from the middle of a log looks like a compaction gap (the
//! loader keeps gaps, by design), and a flipped bit in a segment below the recovery point is
//! never rescanned by the daemon. Only the leader can tell what belongs there:
//! - [`check_all`] compares, for every followed partition with a local log, the local batches
//!   with the leader's over the offsets the leader still holds ([`compare`]): holes, damaged
//!   or differing batches, and local batches the leader no longer has (kept; reported only).
//!   `verify --against-leader` prints it.
//! - [`repair_data_dir`] (`replica-follower repair`, the daemon stopped) re-fetches exactly
//!   the missing and damaged ranges: a hole becomes a segment of its own, a damaged segment
//!   is rewritten whole ([`crate::log::repair`] writes them, through a staging folder and
//!   atomic renames; later segments are never touched).
//! - [`fill_holes_at_start`] (the daemon, after loading its logs and before fetching) asks
//!   the leader about every gap at a segment boundary with one small Fetch and fills those it
//!   holds, with the same code. A leader it cannot reach is said once and the step skipped;
//!   every request ends within `fetch.request_timeout_ms`.
//!
//! The leader is trusted only as far as the follower trusts it: the brokers must report the
//! cluster id the data dir recorded and each topic the id in its `partition.metadata` (a
//! re-created topic is never used to patch an old history), and every batch written is
//! CRC-checked and must fit the range it fills.

pub mod compare;
pub mod leader;

use crate::checkpoint::TopicPartition;
use crate::config::Config;
use crate::log::data_dir::DataDir;
use crate::log::format::segment;
use crate::log::format::segment_reader::MAX_BATCH_SIZE;
use crate::log::identity;
use crate::log::manager::{LogManager, lock_log};
use crate::log::partition::{LogConfig, list_segment_bases};
use crate::log::repair::{self as writer, BatchSource, Written};
use crate::record::{BatchHeader, BatchIter, SetEnd};
use crate::security::ClientSecurity;
use anyhow::{Context, Result, bail};
use compare::{Bounds, Comparison, LocalItem, Problem, compare};
use leader::{LeaderError, Leaders, PartitionLeader};
use std::collections::{BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Whether the configuration follows `tp`.
pub fn followed(cfg: &Config, tp: &TopicPartition) -> bool {
    cfg.follow.iter().any(|f| {
        f.topic == tp.topic
            && f.partitions
                .as_ref()
                .is_none_or(|ps| ps.contains(&tp.partition))
    })
}

/// The partitions of `data_dir` that hold at least one segment, sorted.
fn local_partitions(data_dir: &Path) -> Result<Vec<TopicPartition>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data_dir)
        .with_context(|| format!("failed to list data dir `{}`", data_dir.display()))?
    {
        let entry =
            entry.with_context(|| format!("failed to list data dir `{}`", data_dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(tp) = TopicPartition::parse_dir_name(&name)
            && entry.path().is_dir()
            && !list_segment_bases(&entry.path())?.is_empty()
        {
            out.push(tp);
        }
    }
    out.sort();
    Ok(out)
}

/// The local batches of `dir`, segment by segment (one segment's headers in memory at a
/// time), up to the first segment based at or past `to`.
struct LocalBatches<'a> {
    dir: &'a Path,
    bases: &'a [i64],
    to: i64,
    next: usize,
    queue: VecDeque<LocalItem>,
}

impl Iterator for LocalBatches<'_> {
    type Item = Result<LocalItem>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(Ok(item));
            }
            let base = *self.bases.get(self.next).filter(|b| **b < self.to)?;
            self.next += 1;
            let scan = match writer::scan_segment(self.dir, base) {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            };
            self.queue
                .extend(scan.batches.into_iter().map(LocalItem::Batch));
            if let Some((position, reason)) = scan.unreadable_from {
                self.queue.push_back(LocalItem::Unreadable {
                    segment: base,
                    position,
                    reason,
                });
            }
        }
    }
}

/// The leader's batch headers from `offset` up to `to`, one Fetch at a time.
struct LeaderBatches<'a, 'b> {
    leader: &'a mut PartitionLeader<'b>,
    offset: i64,
    to: i64,
    queue: VecDeque<BatchHeader>,
    done: bool,
}

impl Iterator for LeaderBatches<'_, '_> {
    type Item = Result<BatchHeader>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(h) = self.queue.pop_front() {
            return Some(Ok(h));
        }
        if self.done || self.offset >= self.to {
            return None;
        }
        let records = match self.leader.records(self.offset) {
            Ok(r) => r,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let mut it = BatchIter::new(&records, MAX_BATCH_SIZE);
        for (h, _, _) in it.by_ref() {
            if h.last_offset >= self.offset {
                self.offset = h.last_offset + 1;
                self.queue.push_back(h);
            }
        }
        if self.queue.is_empty() {
            self.done = true;
            if let Some(SetEnd::Corrupt { position, reason }) = it.end() {
                return Some(Err(anyhow::anyhow!(
                    "{}: malformed batch at byte {position} of the answer for offset {}: {reason}",
                    self.leader.describe(),
                    self.offset
                )));
            }
            if !records.is_empty() {
                return Some(Err(anyhow::anyhow!(
                    "{}: no whole batch at or after offset {} in its answer",
                    self.leader.describe(),
                    self.offset
                )));
            }
        }
        self.queue.pop_front().map(Ok)
    }
}

/// One partition compared with its leader.
#[derive(Debug, Clone)]
pub struct PartitionCheck {
    pub tp: TopicPartition,
    pub dir: PathBuf,
    pub bases: Vec<i64>,
    pub log_end: i64,
    pub leader_start: i64,
    pub leader_high_watermark: i64,
    pub bounds: Bounds,
    pub comparison: Comparison,
}

impl PartitionCheck {
    pub fn segment_path(&self, base: i64) -> PathBuf {
        self.dir.join(segment::file_name(base, "log"))
    }
}

/// Compares the local log of `tp` with its leader's, from the leader's log start (or the
/// local start) to min(leader's high watermark, local log end).
pub fn check_partition(
    data_dir: &Path,
    tp: &TopicPartition,
    leader: &mut PartitionLeader<'_>,
) -> Result<PartitionCheck> {
    let dir = data_dir.join(tp.dir_name());
    let bases = list_segment_bases(&dir)?;
    let first = bases.first().copied().unwrap_or(0);
    let log_end = writer::log_end(&dir, &bases)?.unwrap_or(first);
    let leader_start = leader.log_start()?;
    let leader_high_watermark = leader.high_watermark(leader_start)?;
    let bounds = Bounds {
        leader_start,
        from: leader_start.max(first),
        to: leader_high_watermark.min(log_end),
    };
    let mut local = LocalBatches {
        dir: &dir,
        bases: &bases,
        to: bounds.to.max(bounds.from),
        next: 0,
        queue: VecDeque::new(),
    };
    let mut remote = LeaderBatches {
        leader,
        offset: bounds.from,
        to: bounds.to,
        queue: VecDeque::new(),
        done: false,
    };
    let comparison = compare(&mut local, &mut remote, &bases, bounds)?;
    Ok(PartitionCheck {
        tp: tp.clone(),
        dir,
        bases,
        log_end,
        leader_start,
        leader_high_watermark,
        bounds,
        comparison,
    })
}

/// What [`check_all`] found for one local partition.
pub enum Checked<'a> {
    /// Compared; the leader stays connected for a repair.
    Compared(Box<PartitionCheck>, PartitionLeader<'a>),
    /// Not compared, and why; `problem` when that counts as a failure (no leader, another
    /// topic id, an error), not when the configuration does not follow the partition.
    Skipped { why: String, problem: bool },
}

/// Why the leader's topic must not be compared with the local history of `tp`, if it must not.
fn topic_mismatch(dir: &Path, tp: &TopicPartition, leaders: &Leaders) -> Result<Option<String>> {
    let local = identity::read_topic_id(dir)?;
    Ok(match (local, leaders.topic_id(&tp.topic)) {
        (Some(ours), Some(theirs)) if ours != theirs => Some(format!(
            "the leader's topic id {theirs} is not the {ours} of `{}` (the topic was re-created): its data is not this history's",
            dir.join(DataDir::PARTITION_METADATA).display()
        )),
        _ => None,
    })
}

/// Compares every partition of the data dir with a local log against its leader, calling
/// `each` for it in order. Fails before comparing anything when the brokers cannot be
/// reached or report another cluster than the data dir recorded.
pub fn check_all(
    cfg: &Config,
    mut each: impl FnMut(&TopicPartition, Checked<'_>) -> Result<()>,
) -> Result<()> {
    let data_dir = &cfg.data_dir;
    crate::log::manager::existing_data_dir(data_dir)?;
    let security = ClientSecurity::from_section(&cfg.security)?;
    security.warn_if_names_unchecked();
    let mut leaders = Leaders::connect(cfg, security)?;
    if let (Some(expected), Some(seen)) =
        (identity::read_cluster_id(data_dir)?, leaders.cluster_id())
        && expected != seen
    {
        bail!(
            "data dir `{}` replicates cluster {expected}, but the brokers at {} report cluster id {seen}; nothing compared",
            data_dir.display(),
            cfg.bootstrap_servers.join(",")
        );
    }
    for tp in local_partitions(data_dir)? {
        let skipped = |why: String, problem| Checked::Skipped { why, problem };
        if !followed(cfg, &tp) {
            each(
                &tp,
                skipped(
                    "not followed by this configuration; not compared".into(),
                    false,
                ),
            )?;
            continue;
        }
        let dir = data_dir.join(tp.dir_name());
        match topic_mismatch(&dir, &tp, &leaders) {
            Ok(None) => {}
            Ok(Some(why)) => {
                each(&tp, skipped(format!("not compared: {why}"), true))?;
                continue;
            }
            Err(e) => {
                each(&tp, skipped(format!("not compared: {e:#}"), true))?;
                continue;
            }
        }
        let mut broken = None;
        match leaders.partition(&tp) {
            Err(e) => each(&tp, skipped(format!("not compared: {e}"), true))?,
            Ok(mut leader) => match check_partition(data_dir, &tp, &mut leader) {
                Ok(c) => each(&tp, Checked::Compared(Box::new(c), leader))?,
                Err(e) => {
                    broken = Some(leader.broker());
                    each(
                        &tp,
                        skipped(format!("not compared with the leader: {e:#}"), true),
                    )?;
                }
            },
        }
        if let Some(b) = broken {
            leaders.forget(b);
        }
    }
    Ok(())
}

/// One repair step's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A hole became this new segment.
    Filled(Written),
    /// A damaged segment was rewritten.
    Rewrote(Written),
    /// Could not be repaired, and why.
    Unrepaired(String),
}

/// Re-fetches what `check` found missing or damaged: every damaged segment (and one holding
/// a hole inside it) is rewritten whole; every other hole is filled with new segments.
pub fn repair_partition(
    check: &PartitionCheck,
    config: &LogConfig,
    source: &mut dyn BatchSource,
) -> Vec<Outcome> {
    let tp = &check.tp;
    let c = &check.comparison;
    let mut rewrite: BTreeSet<i64> = c.damaged_segments.clone();
    for p in &c.problems {
        if let Problem::Hole(h) = p
            && h.inside
            && let Some(b) = h.before
        {
            rewrite.insert(b);
        }
    }
    let mut out = Vec::new();
    for &base in &rewrite {
        let path = check.segment_path(base);
        let end = check
            .bases
            .iter()
            .find(|b| **b > base)
            .copied()
            .unwrap_or(check.log_end);
        let outcome = if base < check.leader_start {
            Outcome::Unrepaired(format!(
                "{tp}: `{}` is damaged, but the leader no longer has offsets {base}..{} (its log starts at {}); left as it is",
                path.display(),
                check.leader_start - 1,
                check.leader_start
            ))
        } else if end > check.leader_high_watermark {
            Outcome::Unrepaired(format!(
                "{tp}: `{}` is damaged, but the leader's high watermark {} is below the segment's end {end}; left as it is",
                path.display(),
                check.leader_high_watermark
            ))
        } else {
            match writer::rewrite_segment(&check.dir, base, check.log_end, config, source) {
                Ok(w) => Outcome::Rewrote(w),
                Err(e) => Outcome::Unrepaired(format!(
                    "{tp}: `{}` could not be rewritten from {}: {e:#}",
                    path.display(),
                    source.describe()
                )),
            }
        };
        out.push(outcome);
    }
    for p in &c.problems {
        let Problem::Hole(h) = p else {
            continue;
        };
        if h.before.is_some_and(|b| rewrite.contains(&b)) {
            continue; // the rewrite of the segment before covers it
        }
        match writer::fill_hole(&check.dir, h.first, config, source) {
            Ok(ws) => out.extend(ws.into_iter().map(Outcome::Filled)),
            Err(e) => out.push(Outcome::Unrepaired(format!(
                "{tp}: offsets {}..{} could not be filled from {}: {e:#}",
                h.first,
                h.last,
                source.describe()
            ))),
        }
    }
    out
}

/// "offsets 10..19, 2 batch(es), 2048 bytes" for what a write put in place.
pub fn describe_written(w: &Written) -> String {
    let offsets = w.offsets.map_or_else(
        || "no offsets".to_string(),
        |(a, b)| format!("offsets {a}..{b}"),
    );
    format!("{offsets}, {} batch(es), {} bytes", w.batches, w.bytes)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairSummary {
    pub partitions: usize,
    pub holes_filled: usize,
    pub segments_rewritten: usize,
    pub unrepaired: usize,
}

/// `replica-follower repair`: compares every followed partition with its leader and
/// re-fetches what is missing or damaged, printing a line per step to `out`. The caller holds
/// the data-dir lock.
pub fn repair_data_dir(cfg: &Config, out: &mut dyn Write) -> Result<RepairSummary> {
    let mut s = RepairSummary::default();
    let config = cfg.log_config();
    check_all(cfg, |tp, checked| {
        let (check, mut leader) = match checked {
            Checked::Skipped { why, problem } => {
                s.unrepaired += usize::from(problem);
                writeln!(out, "{tp}: {why}")?;
                return Ok(());
            }
            Checked::Compared(check, leader) => (check, leader),
        };
        s.partitions += 1;
        writer::remove_staging(&check.dir)?;
        if !check.comparison.has_problems() {
            writeln!(
                out,
                "{tp}: nothing to repair ({} batch(es) match the leader)",
                check.comparison.matched
            )?;
            return Ok(());
        }
        let from = leader.describe();
        for o in repair_partition(&check, &config, &mut leader) {
            match o {
                Outcome::Filled(w) => {
                    s.holes_filled += 1;
                    writeln!(
                        out,
                        "{tp}: filled a hole from {from}: new segment `{}` ({})",
                        w.path.display(),
                        describe_written(&w)
                    )?;
                }
                Outcome::Rewrote(w) => {
                    s.segments_rewritten += 1;
                    writeln!(
                        out,
                        "{tp}: rewrote damaged segment `{}` from {from} ({}); its old bytes are kept in `{}`",
                        w.path.display(),
                        describe_written(&w),
                        w.kept.as_deref().unwrap_or(Path::new("?")).display()
                    )?;
                }
                Outcome::Unrepaired(why) => {
                    s.unrepaired += 1;
                    writeln!(out, "{why}")?;
                }
            }
        }
        Ok(())
    })?;
    Ok(s)
}

/// The smallest Fetch: a leader answers with the first batch at or after the offset, whole
/// however large (KIP-74); its header is all the probe needs.
const PROBE_BYTES: i32 = 1;

/// The header of the first batch ending at or after `offset` in `records`, read from a
/// partial batch at the end too.
fn first_batch_from(records: &[u8], offset: i64) -> Option<BatchHeader> {
    let mut it = BatchIter::new(records, MAX_BATCH_SIZE);
    if let Some((h, _, _)) = it.by_ref().find(|(h, _, _)| h.last_offset >= offset) {
        return Some(h);
    }
    let rest = records.get(it.position()..)?;
    BatchHeader::parse_prefix(rest, MAX_BATCH_SIZE)
        .ok()
        .filter(|h| h.last_offset >= offset)
}

/// The daemon's start-up hole check, after the logs are loaded and before fetching: every
/// gap at a segment boundary of a followed partition (other than ranges recorded as lost
/// upstream) is probed with one Fetch at its first offset; a leader batch that begins there,
/// below the next segment's base, means a hole the leader can fill, and it is filled. Never
/// fails: what cannot be done is logged (an unreachable broker once) and the daemon goes on.
pub fn fill_holes_at_start(cfg: &Config, logs: &LogManager, security: &Arc<ClientSecurity>) {
    let mut gaps = Vec::new();
    for (tp, shared) in logs.all() {
        let log = lock_log(&shared);
        if let Err(e) = writer::remove_staging(&log.dir) {
            crate::log_warn!("{tp}: {e:#}");
        }
        if !followed(cfg, &tp) {
            continue;
        }
        let lost = log.lost_upstream();
        for g in writer::boundary_gaps(&log) {
            if !lost.iter().any(|&(a, b)| a <= g.from && g.next - 1 <= b) {
                gaps.push((tp.clone(), shared.clone(), g));
            }
        }
    }
    if gaps.is_empty() {
        return;
    }
    crate::log_info!(
        "{} gap(s) between segments; asking the leaders whether they hold those offsets",
        gaps.len()
    );
    let mut leaders = match Leaders::connect(cfg, security.clone()) {
        Ok(l) => l,
        Err(e) => {
            crate::log_warn!(
                "start-up hole check skipped: {e:#}; the daemon goes on (`replica-follower repair` fills holes later)"
            );
            return;
        }
    };
    let mut down = BTreeSet::new();
    for (tp, shared, gap) in gaps {
        let (last, prev_path) = (gap.next - 1, segment::file_name(gap.prev, "log"));
        let local_id = lock_log(&shared).topic_id();
        if let (Some(ours), Some(theirs)) = (local_id, leaders.topic_id(&tp.topic))
            && ours != theirs
        {
            crate::log_warn!(
                "{tp}: hole check skipped: the leader's topic id {theirs} is not the recorded {ours}"
            );
            continue;
        }
        let mut leader = match leaders.partition(&tp) {
            Ok(l) => l,
            Err(LeaderError::Unreachable { broker, message }) => {
                if down.insert(broker) {
                    crate::log_warn!(
                        "start-up hole check skipped for the partitions led by {message}; the daemon goes on"
                    );
                }
                continue;
            }
            Err(e @ LeaderError::NoLeader(_)) => {
                crate::log_warn!("{tp}: hole check skipped: {e}");
                continue;
            }
        };
        let broker = leader.broker();
        if down.contains(&broker) {
            continue;
        }
        let probe = match leader.fetch(gap.from, PROBE_BYTES) {
            Ok(p) => p,
            Err(e) => {
                crate::log_warn!(
                    "start-up hole check skipped for the partitions led by broker {broker}: {e:#}; the daemon goes on"
                );
                down.insert(broker);
                drop(leader);
                leaders.forget(broker);
                continue;
            }
        };
        let first = if probe.error.is_ok() {
            first_batch_from(&probe.records, gap.from)
        } else {
            None
        };
        match first {
            Some(h) if h.base_offset >= gap.from && h.base_offset < gap.next => {}
            Some(h) if h.base_offset < gap.from => {
                crate::log_warn!(
                    "{tp}: the leader's batch {}..{} overlaps the local batches before offset {} (`{prev_path}`); the gap {}..{last} is left as it is",
                    h.base_offset,
                    h.last_offset,
                    gap.from,
                    gap.from
                );
                continue;
            }
            _ => {
                crate::log_debug!(
                    "{tp}: the leader holds nothing in {}..{last} either ({}): a gap, not a hole",
                    gap.from,
                    probe.error
                );
                continue;
            }
        }
        crate::log_warn!(
            "{tp}: offsets {}..{last} are missing between `{prev_path}` and segment {} and {} holds them; re-fetching",
            gap.from,
            gap.next,
            leader.describe()
        );
        // Fetching under the partition lock is fine here: no fetcher or checkpoint task runs
        // yet, and every request ends within the request timeout.
        let mut log = lock_log(&shared);
        match writer::fill_hole_in_log(&mut log, gap.from, &mut leader) {
            Ok(written) => {
                for w in written {
                    crate::log_info!(
                        "{tp}: filled from the leader: new segment `{}` ({})",
                        w.path.display(),
                        describe_written(&w)
                    );
                }
            }
            Err(e) => crate::log_error!(
                "{tp}: the hole {}..{last} was not filled: {e:#}; the daemon goes on (`replica-follower repair` can try again)",
                gap.from
            ),
        }
    }
}
