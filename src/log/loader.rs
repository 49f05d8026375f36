//! Loading a partition log at start-up, and recovery (Kafka's `LogLoader`).
//!
//! 1. Left-over temporary files (`*.tmp`, `*.deleted`, `*.cleaned`, `*.swap`) and index files
//!    without a `.log` are removed.
//! 2. Without a clean-shutdown marker, every segment that may hold offsets at or above the
//!    recovery point is recovered: each batch's length and CRC-32C is checked, the segment is
//!    cut at the first bad or partial batch, and its indexes are rebuilt; the segments after a
//!    cut one are deleted (they follow a hole). Segments wholly below the recovery point are
//!    trusted, so recovery time grows with the unflushed tail, not with the log size.
//! 3. Any segment whose indexes fail their sanity check is recovered too.
//! 4. Offsets: log start = max(checkpoint, first segment base); high watermark =
//!    min(checkpoint, log end), or the log end when there is no usable checkpoint (a consumer
//!    fetch only ever returns offsets below the leader's high watermark, so every local batch
//!    was below it); recovered segments are fsynced and the recovery point is the log end.

use super::epoch_cache::EpochCache;
use super::partition::{LogConfig, PartitionLog, list_segment_bases, now_ms};
use super::segment::{self, Segment};
use crate::checkpoint::{self, TopicPartition, fsync_dir};
use crate::record::BatchIter;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

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
    pub deleted_segments: usize,
}

fn remove_leftovers(dir: &Path) -> Result<()> {
    let bases: Vec<i64> = list_segment_bases(dir)?;
    for entry in fs::read_dir(dir).with_context(|| format!("failed to list `{}`", dir.display()))? {
        let entry = entry.with_context(|| format!("failed to list `{}`", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let temp = [".tmp", ".deleted", ".cleaned", ".swap"]
            .iter()
            .any(|s| name.ends_with(s));
        let orphan = ["index", "timeindex"].iter().any(|suffix| {
            segment::parse_base_offset(&name, suffix).is_some_and(|b| !bases.contains(&b))
        });
        if temp || orphan {
            crate::log_info!("removing left-over file `{}`", entry.path().display());
            fs::remove_file(entry.path())
                .with_context(|| format!("failed to remove `{}`", entry.path().display()))?;
        }
    }
    Ok(())
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
    let dir = data_dir.join(tp.dir_name());
    if !dir.is_dir() {
        return Ok(None);
    }
    remove_leftovers(&dir)?;
    let bases = list_segment_bases(&dir)?;
    let Some(&first_base) = bases.first() else {
        return Ok(None);
    };
    let now = now_ms();
    let recovery_point = hints.recovery_point.unwrap_or(first_base);
    let mut report = LoadReport::default();
    let mut segments = BTreeMap::new();
    let mut recovered_epochs: Vec<(i32, i64)> = Vec::new();
    let mut cut = false;
    for (i, &base) in bases.iter().enumerate() {
        if cut {
            let (seg, _) = Segment::open(&dir, base, config.index_interval_bytes, now, false)
                .or_else(|_| Segment::open(&dir, base, config.index_interval_bytes, now, true))?;
            crate::log_warn!(
                "{tp}: deleting segment `{}`: it follows a truncated one",
                seg.log_path().display()
            );
            seg.delete()?;
            report.deleted_segments += 1;
            continue;
        }
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let needs_recovery = !clean_shutdown && next_base > recovery_point;
        let (seg, rec) =
            Segment::open(&dir, base, config.index_interval_bytes, now, needs_recovery)?;
        if let Some(r) = rec {
            report.recovered_segments += 1;
            report.truncated_bytes += r.truncated_bytes;
            recovered_epochs.extend(r.epochs.iter().copied());
            if r.truncated_bytes > 0 {
                crate::log_warn!(
                    "{tp}: recovery cut {} bytes from `{}`: {}",
                    r.truncated_bytes,
                    seg.log_path().display(),
                    r.reason.as_deref().unwrap_or("partial batch")
                );
                cut = true;
            }
        }
        segments.insert(base, seg);
    }
    // A segment emptied by recovery in front of others cannot be; keep at least one segment.
    let leo = segments
        .values()
        .next_back()
        .map_or(first_base, Segment::next_offset);
    let log_start = hints
        .log_start_offset
        .unwrap_or(first_base)
        .max(first_base)
        .min(leo);
    let high_watermark = hints
        .high_watermark
        .map_or(leo, |h| h.min(leo))
        .max(log_start);

    let epoch_path = dir.join(checkpoint::LEADER_EPOCH);
    let mut epochs = match checkpoint::read_epochs(&epoch_path) {
        Ok(e) => EpochCache::from_entries(e),
        Err(e) => {
            crate::log_warn!("{e:#}; rebuilding the leader-epoch cache of {tp} from its log");
            let mut cache = EpochCache::default();
            for seg in segments.values() {
                let bytes = seg.read_at(0, seg.size() as usize)?;
                for (h, _, _) in BatchIter::new(&bytes, segment::MAX_BATCH_SIZE) {
                    cache.assign(h.partition_leader_epoch, h.base_offset);
                }
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
    };
    if report.recovered_segments > 0 {
        for seg in log.segments.values_mut() {
            seg.flush()?;
        }
        fsync_dir(&dir)?;
        crate::log_info!(
            "{tp}: recovered {} segment(s), cut {} bytes, deleted {} segment(s); log end {leo}",
            report.recovered_segments,
            report.truncated_bytes,
            report.deleted_segments
        );
    }
    log.checkpoint_epochs()?;
    Ok(Some((log, report)))
}
