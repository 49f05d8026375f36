//! Loading a partition log at start-up, and recovery (Kafka's `LogLoader`).
//!
//! 1. Left-over temporary files (`*.tmp`, `*.deleted`, `*.cleaned`, `*.swap`) and index files
//!    without a `.log` are removed.
//! 2. Without a clean-shutdown marker, every segment that may hold offsets at or above the
//!    recovery point is recovered: each batch's length and CRC-32C is checked, the segment is
//!    cut at the first bad or partial batch, and its indexes are rebuilt. Damage is cut only
//!    inside the damaged segment: the segments after it are kept. Segments wholly below the
//!    recovery point are trusted, so recovery time grows with the unflushed tail, not with the
//!    log size.
//! 3. A gap between segments (compaction, the leader's retention, a lost or short segment) is
//!    not damage: nothing is cut or deleted for it. A segment that starts inside the one
//!    before it overlaps it and is set aside (renamed `<name>.overlapping`), never deleted.
//! 4. Any segment whose indexes fail their sanity check is recovered too.
//! 5. Offsets: log start = max(checkpoint, first segment base); high watermark =
//!    min(checkpoint, log end) after a clean shutdown, else the log end (the append rule only
//!    takes batches below the leader's high watermark, so every local batch was below it);
//!    recovered segments are fsynced and the recovery point is the log end.

use super::data_dir::DataDir;
use super::format::epoch_cache::EpochCache;
use super::format::segment::{self, Segment};
use super::partition::{LogConfig, PartitionLog, list_segment_bases};
use crate::checkpoint::{self, TopicPartition, fsync_dir};
use crate::clock::now_ms;
use crate::logging::{NAMED_IN_A_LINE, count};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// What the checkpoint files said about one partition (each `None` when absent or unusable).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckpointHints {
    pub recovery_point: Option<i64>,
    pub log_start_offset: Option<i64>,
    pub high_watermark: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub recovered_segments: usize,
    pub truncated_bytes: u64,
    /// Segments that overlapped the one before, renamed out of the log (never deleted).
    pub set_aside_segments: usize,
    /// Each segment recovery cut, in offset order: the caller says them (one line for a few
    /// partitions, a grouped one for many), each is also logged at debug level here.
    pub cuts: Vec<Cut>,
    /// Temporary and orphaned files an interrupted write left, removed.
    pub leftovers_removed: usize,
}

/// Bytes recovery cut from the end of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub segment: PathBuf,
    pub bytes: u64,
    /// Why: `partial batch`, a CRC mismatch, ...
    pub reason: String,
}

impl Cut {
    /// `{tp}: recovery cut 139 bytes from `…/00000000000000000000.log`: partial batch`.
    pub fn describe(&self, tp: &TopicPartition) -> String {
        format!(
            "{tp}: recovery cut {} bytes from `{}`: {}",
            self.bytes,
            self.segment.display(),
            self.reason
        )
    }
}

/// What loading every partition of a data dir found, said in one INFO line (and one WARN
/// for the cuts): a thousand partitions loaded cleanly are one line, not a thousand. Each
/// partition's own line is at debug level.
#[derive(Debug, Default)]
pub struct Tally {
    partitions: usize,
    segments: usize,
    bytes: u64,
    /// Partitions recovery scanned, and the segments it scanned in them.
    recovered: usize,
    recovered_segments: usize,
    set_aside_segments: usize,
    cuts: Vec<(TopicPartition, Cut)>,
    leftovers_removed: usize,
}

impl Tally {
    pub fn add(&mut self, tp: &TopicPartition, log: &PartitionLog, report: &LoadReport) {
        let s = log.summary();
        crate::log_debug!(
            "{tp}: loaded log {}..{} ({}, {} bytes)",
            s.log_start_offset,
            s.log_end_offset,
            count(s.segments, "segment", "segments"),
            s.size_bytes
        );
        self.partitions += 1;
        self.segments += s.segments;
        self.bytes += s.size_bytes;
        if report.recovered_segments > 0 {
            self.recovered += 1;
            self.recovered_segments += report.recovered_segments;
        }
        self.set_aside_segments += report.set_aside_segments;
        self.leftovers_removed += report.leftovers_removed;
        self.cuts
            .extend(report.cuts.iter().map(|c| (tp.clone(), c.clone())));
    }

    /// The lines that say what was loaded: one INFO with the totals, then what recovery cut
    /// (each cut on a line of its own for up to [`NAMED_IN_A_LINE`] of them, else one WARN
    /// naming the first few and counting the rest). Returns them, INFO first.
    pub fn say(&self, clean: bool, took: std::time::Duration) -> Vec<String> {
        let mut lines = Vec::new();
        if self.partitions == 0 {
            return lines;
        }
        let mut info = format!(
            "loaded {} ({}, {} bytes) in {}",
            count(self.partitions, "partition log", "partition logs"),
            count(self.segments, "segment", "segments"),
            self.bytes,
            crate::logging::Human(took)
        );
        let cut_bytes: u64 = self.cuts.iter().map(|(_, c)| c.bytes).sum();
        let mut cut_from: Vec<&TopicPartition> = self.cuts.iter().map(|(tp, _)| tp).collect();
        cut_from.dedup();
        if !clean {
            info.push_str(&format!(
                " after an unclean shutdown: recovery scanned {} of {}",
                count(self.recovered_segments, "segment", "segments"),
                count(self.recovered, "partition", "partitions"),
            ));
        } else if self.recovered_segments > 0 {
            // A clean shutdown, yet indexes failed their check (each said in a WARN).
            info.push_str(&format!(
                "; {} of {} recovered",
                count(self.recovered_segments, "segment", "segments"),
                count(self.recovered, "partition", "partitions"),
            ));
        }
        if cut_bytes > 0 {
            info.push_str(&format!(
                ", cut {cut_bytes} bytes from {}",
                count(cut_from.len(), "partition", "partitions")
            ));
        }
        if self.leftovers_removed > 0 {
            info.push_str(&format!(
                ", removed {} an interrupted write left",
                count(self.leftovers_removed, "temporary file", "temporary files")
            ));
        }
        if self.set_aside_segments > 0 {
            info.push_str(&format!(
                ", set aside {} that overlapped the one before",
                count(self.set_aside_segments, "segment", "segments")
            ));
        }
        crate::log_info!("{info}");
        lines.push(info);
        if self.cuts.len() <= NAMED_IN_A_LINE {
            for (tp, cut) in &self.cuts {
                let line = cut.describe(tp);
                crate::log_warn!("{line}");
                lines.push(line);
            }
        } else {
            let named: Vec<String> = self
                .cuts
                .iter()
                .map(|(tp, c)| format!("{tp} ({} bytes: {})", c.bytes, c.reason))
                .collect();
            let line = format!(
                "recovery cut {cut_bytes} bytes from the ends of {}: {}; every partition cut: {} (each with its file at debug level)",
                count(self.cuts.len(), "segment", "segments"),
                crate::logging::first_few(&named),
                partition_list(&cut_from, PARTITION_LIST_MAX)
            );
            crate::log_warn!("{line}");
            lines.push(line);
        }
        lines
    }
}

/// The most characters [`partition_list`] writes in a log line before it counts the rest.
const PARTITION_LIST_MAX: usize = 2000;

/// Partitions in a short form, each topic once with its partitions as ranges
/// (`orders[0-3,7] events[12]`), cut after about `max` characters with a count of the
/// partitions left out.
fn partition_list(tps: &[&TopicPartition], max: usize) -> String {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        by_topic
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    let mut out = String::new();
    let mut left = tps.len();
    for (topic, mut parts) in by_topic {
        parts.sort_unstable();
        parts.dedup();
        let mut ranges: Vec<(i32, i32)> = Vec::new();
        for p in &parts {
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == *p => *end = *p,
                _ => ranges.push((*p, *p)),
            }
        }
        let text: Vec<String> = ranges
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        let item = format!("{topic}[{}]", text.join(","));
        if !out.is_empty() && out.len() + item.len() > max {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&item);
        left = left.saturating_sub(parts.len());
    }
    if left > 0 {
        out.push_str(&format!(" and {left} more"));
    }
    out
}

/// Removes what an interrupted write left behind; how many files that was (each named at
/// debug level: after a crash during a checkpoint of many logs, there may be one a log).
fn remove_leftovers(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    // A copy into diverged/ or damaged/ that a crash interrupted is made again from the log.
    for sub in [DataDir::DIVERGED_DIR, DataDir::DAMAGED_DIR] {
        let Ok(entries) = fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                crate::log_debug!("removing left-over file `{}`", entry.path().display());
                fs::remove_file(entry.path())
                    .with_context(|| format!("failed to remove `{}`", entry.path().display()))?;
                removed += 1;
            }
        }
    }
    let bases: Vec<i64> = list_segment_bases(dir)?;
    for entry in fs::read_dir(dir).with_context(|| format!("failed to list `{}`", dir.display()))? {
        let entry = entry.with_context(|| format!("failed to list `{}`", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let temp = [".tmp", ".deleted", ".cleaned", ".swap"]
            .iter()
            .any(|s| name.ends_with(s));
        let orphan = ["index", "timeindex", "txnindex"].iter().any(|suffix| {
            segment::parse_base_offset(&name, suffix).is_some_and(|b| !bases.contains(&b))
        });
        if temp || orphan {
            crate::log_debug!("removing left-over file `{}`", entry.path().display());
            fs::remove_file(entry.path())
                .with_context(|| format!("failed to remove `{}`", entry.path().display()))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Loads the log in `data_dir/<topic>-<partition>`. Returns `None` when the directory holds no
/// segment (no local state).
pub fn load(
    data_dir: &Path,
    tp: &TopicPartition,
    config: LogConfig,
    hints: CheckpointHints,
    clean_shutdown: bool,
) -> Result<Option<(PartitionLog, LoadReport)>> {
    load_with(data_dir, tp, config, hints, clean_shutdown, true)
}

/// [`load`]; without `fsync`, for a start that loads many logs, what recovery rewrote
/// (segments cut, indexes rebuilt) is written but not fsynced, and a changed epoch cache is
/// left dirty: the caller makes one file-system sync for them all, and its first checkpoint
/// writes the caches, before anything claims the recovery points.
pub fn load_with(
    data_dir: &Path,
    tp: &TopicPartition,
    config: LogConfig,
    hints: CheckpointHints,
    clean_shutdown: bool,
    fsync: bool,
) -> Result<Option<(PartitionLog, LoadReport)>> {
    let dir = data_dir.join(tp.dir_name());
    if !dir.is_dir() {
        return Ok(None);
    }
    let leftovers = remove_leftovers(&dir)?;
    let bases = list_segment_bases(&dir)?;
    let Some(&first_base) = bases.first() else {
        return Ok(None);
    };
    let now = now_ms();
    let recovery_point = hints.recovery_point.unwrap_or(first_base);
    let mut report = LoadReport {
        leftovers_removed: leftovers,
        ..LoadReport::default()
    };
    let mut segments: BTreeMap<i64, Box<Segment>> = BTreeMap::new();
    let mut recovered_epochs: Vec<(i32, i64)> = Vec::new();
    let mut first_recovered: Option<i64> = None;
    // The first offset recovery scanned (inside `first_recovered` when it resumed there).
    let mut first_scanned: Option<i64> = None;
    for (i, &base) in bases.iter().enumerate() {
        // A segment may start after the previous one ends: a gap, as compaction, a leader's
        // retention or a lost file leave them. Nothing is cut or deleted for a gap. A segment
        // that starts *inside* the previous one overlaps it: that is damage, and the later
        // file is set aside (renamed, not deleted) so the log stays in order.
        if let Some(prev_end) = segments.values().next_back().map(|s| s.next_offset())
            && base < prev_end
        {
            let aside = segment::set_aside(&dir, base, "overlapping")?;
            crate::log_error!(
                "{tp}: segment {base} starts inside the previous segment, which ends at {prev_end}; set aside as `{}`",
                aside.display()
            );
            report.set_aside_segments += 1;
            continue;
        }
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let needs_recovery = !clean_shutdown && next_base > recovery_point;
        let last = i + 1 == bases.len();
        // The segment holding the recovery point is fsynced up to it: only its tail is
        // scanned. Segments after it are scanned whole.
        let (seg, rec) = if needs_recovery && base < recovery_point {
            Segment::open_recovering_from(
                &dir,
                base,
                config.index_interval_bytes,
                now,
                recovery_point,
                last,
            )?
        } else {
            Segment::open(
                &dir,
                base,
                config.index_interval_bytes,
                now,
                needs_recovery,
                last,
            )?
        };
        if let Some(r) = rec {
            first_recovered.get_or_insert(base);
            if first_scanned.is_none() {
                first_scanned = Some(r.resumed_at.unwrap_or(base));
            }
            report.recovered_segments += 1;
            report.truncated_bytes += r.truncated_bytes;
            recovered_epochs.extend(r.epochs.iter().copied());
            if r.truncated_bytes > 0 {
                // Only this segment is cut; the segments after it are kept (the offsets
                // between are a hole the leader can fill).
                let cut = Cut {
                    segment: seg.log_path().to_path_buf(),
                    bytes: r.truncated_bytes,
                    reason: r.reason.clone().unwrap_or_else(|| "partial batch".into()),
                };
                crate::log_debug!("{}", cut.describe(tp));
                report.cuts.push(cut);
            }
        }
        segments.insert(base, Box::new(seg));
    }
    if segments.is_empty() {
        return Ok(None);
    }
    // The active segment is the last one kept, which may have been opened as an inactive one
    // (the file after it was set aside): load its indexes now, before the log end is taken (a
    // failed index check rebuilds them and may cut the segment).
    if let Some(active) = segments.values_mut().next_back()
        && active.make_indexes_resident()?
    {
        first_recovered =
            Some(first_recovered.map_or(active.base_offset, |f| f.min(active.base_offset)));
        first_scanned =
            Some(first_scanned.map_or(active.base_offset, |f| f.min(active.base_offset)));
        report.recovered_segments += 1;
    }
    let leo = segments
        .values()
        .next_back()
        .map_or(first_base, |s| s.next_offset());
    // A recovery point past the log end after an unclean shutdown describes a longer log
    // than this one: it proves nothing about these bytes, so every segment is recovered.
    if !clean_shutdown
        && let Some(rp) = hints.recovery_point
        && rp > leo
    {
        crate::log_warn!(
            "{tp}: the recovery point {rp} is past the log end {leo}; recovering every segment"
        );
        drop(segments);
        let hints = CheckpointHints {
            recovery_point: None,
            ..hints
        };
        return load(data_dir, tp, config, hints, clean_shutdown);
    }
    let log_start = hints
        .log_start_offset
        .unwrap_or(first_base)
        .max(first_base)
        .min(leo);
    // After an unclean shutdown the checkpointed HW lags what was appended. Every local batch
    // was below the leader's HW when it was appended (the append rule refuses any other), so
    // then the log end is the HW; a clean shutdown wrote the exact figure.
    let high_watermark = hints
        .high_watermark
        .filter(|_| clean_shutdown)
        .map_or(leo, |h| h.min(leo))
        .max(log_start);
    let topic_id = match super::identity::read_topic_id(&dir) {
        Ok(id) => id,
        Err(e) => {
            crate::log_warn!(
                "{e:#}; the topic identity of {tp} cannot be checked until it is fixed"
            );
            None
        }
    };
    let lost = match checkpoint::read_ranges(&dir.join(DataDir::LOST_UPSTREAM)) {
        Ok(l) => l,
        Err(e) => {
            crate::log_warn!("{e:#}; the ranges lost upstream of {tp} are no longer known");
            Vec::new()
        }
    };

    let epoch_path = dir.join(DataDir::LEADER_EPOCH);
    let mut epochs = match checkpoint::read_epochs(&epoch_path) {
        Ok(e) => EpochCache::from_entries(e),
        Err(e) => {
            crate::log_warn!("{e:#}; rebuilding the leader-epoch cache of {tp} from its log");
            let mut cache = EpochCache::default();
            for seg in segments.values() {
                seg.for_each_batch(0, |h, _| {
                    cache.assign(h.partition_leader_epoch, h.base_offset);
                    Ok(true)
                })?;
            }
            cache.dirty = true;
            cache
        }
    };
    for (e, o) in recovered_epochs {
        epochs.assign(e, o);
    }
    epochs.truncate_from_end(leo);
    epochs.truncate_from_start(log_start);

    let mut log = PartitionLog {
        tp: tp.clone(),
        dir: dir.clone(),
        config,
        segments,
        log_start_offset: log_start,
        recovery_point: leo,
        high_watermark,
        epochs,
        generation: 0,
        lost,
        topic_id,
        producers: Default::default(),
        last_snapshot: None,
        retired: false,
        failed: None,
        dir_id: super::partition::dir_identity(&dir),
        marks: Default::default(),
    };
    // Open transactions: from the newest producer snapshot below the first segment recovery
    // scanned, walking the batches after it; the `.txnindex` of every scanned segment is
    // rebuilt on the way.
    log.rebuild_producer_state(
        first_scanned.or(first_recovered).unwrap_or(leo),
        first_recovered.unwrap_or(i64::MAX),
    )?;
    log.last_snapshot = producer_snapshot_at(&dir, leo);
    if report.recovered_segments > 0 || report.set_aside_segments > 0 {
        for seg in log.segments.values_mut() {
            if fsync {
                seg.flush()?;
            } else {
                // The caller's file-system sync covers them; a later close fsyncs again.
                seg.prepare_flush_by_syncfs()?;
            }
        }
        if fsync {
            fsync_dir(&dir)?;
        }
        crate::log_debug!(
            "{tp}: recovered {}, cut {} bytes, set aside {}; log end {leo}",
            count(report.recovered_segments, "segment", "segments"),
            report.truncated_bytes,
            count(report.set_aside_segments, "segment", "segments")
        );
    }
    let inactive = log.segments.len().saturating_sub(1);
    for seg in log.segments.values_mut().take(inactive) {
        seg.close_file();
    }
    if fsync {
        log.checkpoint_epochs()?;
    }
    // Else the cache stays dirty: the manager's first checkpoint, which visits every log,
    // writes it.
    Ok(Some((log, report)))
}

/// `Some(leo)` when a producer snapshot exists exactly at the log end.
fn producer_snapshot_at(dir: &Path, leo: i64) -> Option<i64> {
    super::format::producer_state::list_snapshots(dir)
        .ok()?
        .contains(&leo)
        .then_some(leo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::partition_tests::{batches, cfg, hints, new_log, tp};
    use crate::record::VerifiedBatches;

    #[test]
    fn a_load_says_its_totals_in_one_line_and_names_what_recovery_cut() {
        let cut = |p: i32| {
            (
                TopicPartition::new("t", p),
                Cut {
                    segment: PathBuf::from(format!("d/t-{p}/0.log")),
                    bytes: 20,
                    reason: "partial batch".into(),
                },
            )
        };
        let mut tally = Tally {
            partitions: 1000,
            segments: 1000,
            bytes: 139_000,
            ..Tally::default()
        };
        let took = std::time::Duration::from_millis(400);
        assert_eq!(
            tally.say(true, took),
            ["loaded 1000 partition logs (1000 segments, 139000 bytes) in 400ms"]
        );
        tally.recovered = 1000;
        tally.recovered_segments = 1000;
        tally.cuts = vec![cut(3), cut(9)];
        assert_eq!(
            tally.say(false, took),
            [
                "loaded 1000 partition logs (1000 segments, 139000 bytes) in 400ms after an unclean shutdown: recovery scanned 1000 segments of 1000 partitions, cut 40 bytes from 2 partitions",
                "t-3: recovery cut 20 bytes from `d/t-3/0.log`: partial batch",
                "t-9: recovery cut 20 bytes from `d/t-9/0.log`: partial batch",
            ]
        );
        tally.cuts = (0..7).map(cut).collect();
        let said = tally.say(false, took);
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(
            said[1],
            "recovery cut 140 bytes from the ends of 7 segments: t-0 (20 bytes: partial batch), t-1 (20 bytes: partial batch), t-2 (20 bytes: partial batch), t-3 (20 bytes: partial batch), t-4 (20 bytes: partial batch) and 2 more; every partition cut: t[0-6] (each with its file at debug level)"
        );
        let tps: Vec<TopicPartition> = [("b", 3), ("a", 1), ("a", 2), ("a", 3), ("a", 7), ("b", 4)]
            .iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect();
        let refs: Vec<&TopicPartition> = tps.iter().collect();
        assert_eq!(partition_list(&refs, 100), "a[1-3,7] b[3-4]");
        assert_eq!(partition_list(&refs, 5), "a[1-3,7] and 2 more");
        assert_eq!(Tally::default().say(false, took), Vec::<String>::new());
    }

    #[test]
    fn clean_reload_restores_every_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 2048);
        let (bytes, _) = batches(0, 30, 3);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        log.update_high_watermark(100);
        log.flush().unwrap();
        log.checkpoint_epochs().unwrap();
        let before = log.summary();
        drop(log);
        let h = CheckpointHints {
            recovery_point: Some(120),
            log_start_offset: Some(0),
            high_watermark: Some(100),
        };
        let (log, report) = load(dir.path(), &tp(), cfg(2048), h, true)
            .unwrap()
            .unwrap();
        assert_eq!(report, LoadReport::default());
        assert_eq!(log.summary(), before);
        assert_eq!(log.read_all().unwrap(), bytes);
        assert_eq!(log.latest_epoch(), Some(3));
    }

    #[test]
    fn recovery_cuts_a_torn_tail_and_rebuilds_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 2048);
        let (bytes, _) = batches(0, 30, 0);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        log.flush().unwrap();
        let active = log.segments().last().unwrap().log_path().to_path_buf();
        let active_base = log.segments().last().unwrap().base_offset;
        drop(log);
        let (extra, _) = batches(120, 1, 0);
        crate::log::format::segment::append_raw(&active, &extra[..extra.len() - 7]).unwrap();
        std::fs::write(active.with_extension("index"), [7u8; 13]).unwrap();
        std::fs::write(
            dir.path()
                .join("t-0")
                .join("recovery-point-offset-checkpoint.tmp"),
            b"junk",
        )
        .unwrap();
        let (log, report) = load(
            dir.path(),
            &tp(),
            cfg(2048),
            hints(Some(active_base)),
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            report.recovered_segments, 1,
            "only the segment past the recovery point is scanned"
        );
        assert_eq!(report.truncated_bytes, (extra.len() - 7) as u64);
        assert_eq!(log.log_end_offset(), 120);
        assert_eq!(log.recovery_point(), 120);
        assert_eq!(log.high_watermark(), 120, "no checkpointed HW: the log end");
        assert_eq!(log.read_all().unwrap(), bytes);
        assert!(
            !dir.path()
                .join("t-0")
                .join("recovery-point-offset-checkpoint.tmp")
                .exists()
        );
        let idx_len = std::fs::metadata(active.with_extension("index"))
            .unwrap()
            .len();
        assert_eq!(idx_len % 8, 0, "index rebuilt");
    }

    #[test]
    fn segments_below_the_recovery_point_are_not_scanned_but_the_tail_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 2048);
        let (bytes, _) = batches(0, 30, 0);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        log.flush().unwrap();
        let paths: Vec<_> = log
            .segments()
            .map(|s| (s.base_offset, s.log_path().to_path_buf()))
            .collect();
        drop(log);
        // Flip a record byte in the first segment (below the recovery point) and in the last.
        for (_, p) in [&paths[0], paths.last().unwrap()] {
            let mut b = std::fs::read(p).unwrap();
            let n = b.len();
            b[n - 3] ^= 0xff;
            std::fs::write(p, b).unwrap();
        }
        let last_base = paths.last().unwrap().0;
        let (log, report) = load(dir.path(), &tp(), cfg(2048), hints(Some(last_base)), false)
            .unwrap()
            .unwrap();
        assert_eq!(report.recovered_segments, 1);
        assert!(report.truncated_bytes > 0, "the corrupt tail batch is cut");
        assert!(log.log_end_offset() < 120);
        assert_eq!(log.summary().segments, paths.len());
    }

    #[test]
    fn inside_the_segment_holding_the_recovery_point_only_the_tail_past_it_is_scanned() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 1 << 20);
        let (bytes, _) = batches(0, 40, 0);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        log.flush().unwrap();
        let rp = log.recovery_point();
        assert_eq!(rp, 160);
        let (more, _) = batches(160, 10, 0);
        log.append(&VerifiedBatches::of(&more)).unwrap();
        let seg = log.segments().next().unwrap().log_path().to_path_buf();
        drop(log);
        // A byte flipped well below the recovery point is not looked at (it was fsynced);
        // a torn tail past it is cut.
        let mut b = std::fs::read(&seg).unwrap();
        b[100] ^= 0xff;
        b.truncate(b.len() - 7);
        std::fs::write(&seg, &b).unwrap();
        let index = seg.with_extension("index");
        let (log, report) = load(dir.path(), &tp(), cfg(1 << 20), hints(Some(rp)), false)
            .unwrap()
            .unwrap();
        assert_eq!(report.recovered_segments, 1);
        assert!(report.truncated_bytes > 0, "the torn batch is cut");
        assert_eq!(
            log.log_end_offset(),
            196,
            "every whole batch past the recovery point kept"
        );
        assert_eq!(
            std::fs::read(&seg).unwrap()[100],
            b[100],
            "the part below the recovery point is left as it is"
        );
        // The indexes equal what a full recovery of the same bytes would build.
        let resumed = std::fs::read(&index).unwrap();
        drop(log);
        let mut fixed = std::fs::read(&seg).unwrap();
        fixed[100] ^= 0xff;
        std::fs::write(&seg, &fixed).unwrap();
        let (full, _) = load(dir.path(), &tp(), cfg(1 << 20), hints(None), false)
            .unwrap()
            .unwrap();
        assert_eq!(full.log_end_offset(), 196);
        assert_eq!(std::fs::read(&index).unwrap(), resumed);
    }

    #[test]
    fn a_recovery_point_past_the_log_end_recovers_every_segment() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 2048);
        let (bytes, _) = batches(0, 30, 0);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        log.flush().unwrap();
        let first = log.segments().next().unwrap().log_path().to_path_buf();
        let n = log.summary().segments;
        drop(log);
        // Damage below a (bogus) recovery point far past the end: it must still be found.
        let mut b = std::fs::read(&first).unwrap();
        b[70] ^= 0xff;
        std::fs::write(&first, b).unwrap();
        let (log, report) = load(dir.path(), &tp(), cfg(2048), hints(Some(10_000)), false)
            .unwrap()
            .unwrap();
        assert_eq!(report.recovered_segments, n, "every segment scanned");
        assert!(report.truncated_bytes > 0, "the damage below it was found");
        assert_eq!(log.log_end_offset(), 120);
    }

    #[test]
    fn a_cut_segment_keeps_the_segments_after_it() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 2048);
        let (bytes, _) = batches(0, 30, 0);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        log.flush().unwrap();
        let paths: Vec<_> = log.segments().map(|s| s.log_path().to_path_buf()).collect();
        let n_segments = paths.len();
        let inodes: Vec<u64> = paths[2..]
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().ino())
            .collect();
        drop(log);
        let mut b = std::fs::read(&paths[1]).unwrap();
        b[70] ^= 0xff;
        std::fs::write(&paths[1], b).unwrap();
        let (log, report) = load(dir.path(), &tp(), cfg(2048), hints(None), false)
            .unwrap()
            .unwrap();
        assert_eq!(report.recovered_segments, n_segments);
        assert_eq!(report.set_aside_segments, 0);
        assert_eq!(log.summary().segments, n_segments, "nothing deleted");
        assert_eq!(log.log_end_offset(), 120);
        let after: Vec<u64> = paths[2..]
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().ino())
            .collect();
        assert_eq!(after, inodes, "later segments are the same files");
        // Only the damaged segment lost its tail: the hole lies inside segment 1.
        assert!(
            log.segments().nth(1).unwrap().next_offset()
                < log.segments().nth(2).unwrap().base_offset
        );
    }

    #[test]
    fn malformed_epoch_checkpoint_is_rebuilt_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 1 << 20);
        let (b1, _) = batches(0, 2, 2);
        let (b2, _) = batches(8, 2, 5);
        log.append(&VerifiedBatches::of(&b1)).unwrap();
        log.append(&VerifiedBatches::of(&b2)).unwrap();
        log.flush().unwrap();
        drop(log);
        std::fs::write(
            dir.path().join("t-0").join(DataDir::LEADER_EPOCH),
            "0\n5\n1 1\n",
        )
        .unwrap();
        let (log, _) = load(dir.path(), &tp(), cfg(1 << 20), hints(Some(16)), true)
            .unwrap()
            .unwrap();
        assert_eq!(log.epoch_cache().entries(), &[(2, 0), (5, 8)]);
        let text =
            std::fs::read_to_string(dir.path().join("t-0").join(DataDir::LEADER_EPOCH)).unwrap();
        assert_eq!(text, "0\n2\n2 0\n5 8\n");
    }

    #[test]
    fn no_segments_means_no_local_state() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            load(dir.path(), &tp(), cfg(1024), hints(None), false)
                .unwrap()
                .is_none()
        );
        fs::create_dir(dir.path().join("t-0")).unwrap();
        assert!(
            load(dir.path(), &tp(), cfg(1024), hints(None), false)
                .unwrap()
                .is_none()
        );
    }
}

#[cfg(test)]
mod interrupted_truncation_tests {
    use super::*;
    use crate::record::VerifiedBatches;
    use crate::record::records::{NewRecord, build_v2_batch};

    fn log_with_segments(dir: &Path) -> (Vec<i64>, i64) {
        let cfg = LogConfig {
            segment_bytes: 1024,
            ..LogConfig::default()
        };
        let mut log =
            PartitionLog::create(dir, &TopicPartition::new("t", 0), cfg, 0, None).unwrap();
        let v = [b'x'; 100];
        for i in 0..40 {
            let b = build_v2_batch(
                i * 2,
                0,
                &[
                    NewRecord {
                        key: None,
                        value: Some(&v),
                        timestamp: i,
                    },
                    NewRecord {
                        key: None,
                        value: Some(&v),
                        timestamp: i,
                    },
                ],
            );
            log.append(&VerifiedBatches::of(&b)).unwrap();
        }
        log.flush().unwrap();
        (
            log.segments().map(|s| s.base_offset).collect(),
            log.log_end_offset(),
        )
    }

    fn load_it(dir: &Path) -> PartitionLog {
        let cfg = LogConfig {
            segment_bytes: 1024,
            ..LogConfig::default()
        };
        load(
            dir,
            &TopicPartition::new("t", 0),
            cfg,
            CheckpointHints::default(),
            false,
        )
        .unwrap()
        .unwrap()
        .0
    }

    /// The inode of each `.log` of the segments at `bases`.
    fn segment_inodes(pdir: &Path, bases: &[i64]) -> Vec<u64> {
        use std::os::unix::fs::MetadataExt;
        bases
            .iter()
            .map(|b| {
                std::fs::metadata(pdir.join(segment::file_name(*b, "log")))
                    .unwrap()
                    .ino()
            })
            .collect()
    }

    #[test]
    fn a_missing_middle_segment_is_a_gap_and_every_later_segment_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (bases, end) = log_with_segments(dir.path());
        assert!(bases.len() >= 4, "{bases:?}");
        let pdir = dir.path().join("t-0");
        let inodes = segment_inodes(&pdir, &bases[3..]);
        segment::delete_files(&pdir, bases[2]).unwrap();
        let log = load_it(dir.path());
        assert_eq!(log.log_end_offset(), end, "the log still ends where it did");
        assert_eq!(log.segments().count(), bases.len() - 1);
        let after = segment_inodes(&pdir, &bases[3..]);
        assert_eq!(after, inodes, "same files");
    }

    #[test]
    fn a_segment_overlapping_the_one_before_is_set_aside_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (bases, end) = log_with_segments(dir.path());
        let pdir = dir.path().join("t-0");
        // A stray segment starting inside segment 0.
        let stray = build_v2_batch(
            3,
            0,
            &[NewRecord {
                key: None,
                value: Some(b"v"),
                timestamp: 1,
            }],
        );
        std::fs::write(pdir.join(segment::file_name(3, "log")), &stray).unwrap();
        let log = load_it(dir.path());
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(log.segments().count(), bases.len());
        assert_eq!(
            std::fs::read(pdir.join(format!("{}.overlapping", segment::file_name(3, "log"))))
                .unwrap(),
            stray
        );
    }
}
