//! What a reader outside the partition lock needs to serve a log: [`LogView`], a snapshot of
//! positions (segment paths and the byte length of their whole batches, log start, high
//! watermark, last stable offset, leader epochs, topic id), taken in one go under the lock
//! from a running log ([`PartitionLog::read_view`]) or read from the files of a stopped one
//! ([`LogView::open_stopped`], which changes nothing on disk).
//!
//! The snapshot names bytes, it does not hold them: the reader opens the files itself. Below
//! the high watermark every byte is a whole batch (the follower appends whole batches and
//! moves the high watermark after), so a reader that stays below it never sees a batch being
//! written. A truncation or retention delete after the snapshot shortens or unlinks a file;
//! the reader then finds fewer bytes than promised, or none, and must say so, not serve them.

use super::partition::{PartitionLog, list_segment_bases};
use super::producer_state::{self, ProducerState};
use super::segment;
use super::segment_reader::SegmentReader;
use super::{identity, offset_index::OffsetIndex};
use crate::checkpoint::{self, TopicPartition};
use crate::protocol::uuid::Uuid;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// One segment as a reader may use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSpan {
    pub base_offset: i64,
    pub log_path: PathBuf,
    /// Bytes of whole batches when the snapshot was taken.
    pub size: u64,
    /// The offset after the segment's last batch (for a stopped log's inner segments: the
    /// next segment's base, which is at or above it).
    pub next_offset: i64,
    /// An offset index entry (last offset of the batch at the position, position) at or
    /// before the offset the view was taken for, when the index was in memory; else the
    /// reader may look in the index file (and check what it finds).
    pub index_hint: Option<(i64, u32)>,
}

impl SegmentSpan {
    pub fn offset_index_path(&self) -> PathBuf {
        self.log_path.with_extension("index")
    }
    pub fn txn_index_path(&self) -> PathBuf {
        self.log_path.with_extension("txnindex")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogView {
    pub topic_id: Option<Uuid>,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// At or below the high watermark.
    pub last_stable_offset: i64,
    pub log_end_offset: i64,
    /// (epoch, start offset), oldest first.
    pub epochs: Vec<(i32, i64)>,
    /// In offset order: for a running log, the segment holding `from` and every later one;
    /// for a stopped log, all of them.
    pub segments: Vec<SegmentSpan>,
}

/// A stopped data dir's log-start and replication (high watermark) checkpoints, read once;
/// a file that cannot be read counts as empty (each partition then falls back to its log).
#[derive(Debug, Default)]
pub struct StoppedCheckpoints {
    log_start: std::collections::BTreeMap<TopicPartition, i64>,
    high_watermark: std::collections::BTreeMap<TopicPartition, i64>,
}

impl StoppedCheckpoints {
    pub fn read(data_dir: &Path) -> StoppedCheckpoints {
        let read = |name: &str| checkpoint::read_offsets(&data_dir.join(name)).unwrap_or_default();
        StoppedCheckpoints {
            log_start: read(checkpoint::LOG_START_OFFSET),
            high_watermark: read(checkpoint::REPLICATION_OFFSET),
        }
    }
}

impl LogView {
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.last().map(|&(e, _)| e)
    }

    /// The largest epoch ≤ `epoch` and where it ends (Kafka's `LeaderEpochFileCache.endOffsetFor`;
    /// see [`super::epoch_cache::EpochCache::end_offset_for`]).
    pub fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)> {
        super::epoch_cache::EpochCache::from_entries(self.epochs.clone())
            .end_offset_for(epoch, self.log_end_offset)
    }

    /// The segments from the one that may hold `offset` on (a stopped view holds them all).
    pub fn segments_from(&self, offset: i64) -> &[SegmentSpan] {
        let floor = self
            .segments
            .iter()
            .rposition(|s| s.base_offset <= offset)
            .unwrap_or(0);
        self.segments.get(floor..).unwrap_or_default()
    }

    /// Reads a stopped log's view from its files without changing any: segment lengths, the
    /// data-dir checkpoints (high watermark capped at the log end), the leader-epoch
    /// checkpoint, `partition.metadata`, and the last stable offset from the newest producer
    /// snapshot replayed up to the high watermark.
    pub fn open_stopped(data_dir: &Path, tp: &TopicPartition) -> Result<Option<LogView>> {
        Self::open_stopped_with(data_dir, tp, &StoppedCheckpoints::read(data_dir))
    }

    /// [`Self::open_stopped`] with the data dir's checkpoint files read once for every
    /// partition (a data dir of 10,000 partitions would otherwise parse them 10,000 times).
    pub fn open_stopped_with(
        data_dir: &Path,
        tp: &TopicPartition,
        checkpoints: &StoppedCheckpoints,
    ) -> Result<Option<LogView>> {
        Self::open_stopped_dir(
            &data_dir.join(tp.dir_name()),
            checkpoints.log_start.get(tp).copied(),
            checkpoints.high_watermark.get(tp).copied(),
        )
    }

    /// The view of the stopped log in `dir` with the log start and high watermark its
    /// checkpoints give (`None`: its first segment and its log end). An archived history,
    /// which no checkpoint names, is read whole this way.
    pub fn open_stopped_dir(
        dir: &Path,
        checkpointed_log_start: Option<i64>,
        checkpointed_high_watermark: Option<i64>,
    ) -> Result<Option<LogView>> {
        let bases = list_segment_bases(dir)?;
        let (Some(&first), Some(&last)) = (bases.first(), bases.last()) else {
            return Ok(None);
        };
        let log_end = segment_end_offset(dir, last)?.max(last);
        let mut segments = Vec::with_capacity(bases.len());
        for (i, &base) in bases.iter().enumerate() {
            let log_path = dir.join(segment::file_name(base, "log"));
            let size = std::fs::metadata(&log_path)
                .with_context(|| format!("failed to stat `{}`", log_path.display()))?
                .len();
            segments.push(SegmentSpan {
                base_offset: base,
                log_path,
                size,
                next_offset: bases.get(i + 1).copied().unwrap_or(log_end),
                index_hint: None,
            });
        }
        let log_start_offset = checkpointed_log_start.unwrap_or(first).max(first);
        let high_watermark = checkpointed_high_watermark
            .unwrap_or(log_end)
            .clamp(log_start_offset, log_end.max(log_start_offset));
        let last_stable_offset =
            last_stable_offset(dir, &bases, high_watermark)?.min(high_watermark);
        Ok(Some(LogView {
            topic_id: identity::read_topic_id(dir).unwrap_or(None),
            log_start_offset,
            high_watermark,
            last_stable_offset,
            log_end_offset: log_end,
            epochs: checkpoint::read_epochs(&dir.join(checkpoint::LEADER_EPOCH))
                .unwrap_or_default(),
            segments,
        }))
    }
}

impl PartitionLog {
    /// The view a reader of offsets from `from` needs; cheap (no I/O), for use under the lock.
    pub fn read_view(&self, from: i64) -> LogView {
        let floor = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let high_watermark = self.high_watermark;
        LogView {
            topic_id: self.topic_id,
            log_start_offset: self.log_start_offset,
            high_watermark,
            last_stable_offset: self.last_stable_offset().min(high_watermark),
            log_end_offset: self.log_end_offset(),
            epochs: self.epochs.entries().to_vec(),
            segments: self
                .segments
                .range(floor..)
                .map(|(&base, s)| SegmentSpan {
                    base_offset: base,
                    log_path: s.log_path().to_path_buf(),
                    size: s.size(),
                    next_offset: s.next_offset(),
                    index_hint: (base == floor && s.offset_index.is_resident())
                        .then(|| s.offset_index.lookup(from)),
                })
                .collect(),
        }
    }
}

/// The last stable offset of a stopped log, read-only: the newest producer snapshot at or
/// below `below`, then every batch from it up to `below` (exclusive) replayed.
pub fn last_stable_offset(dir: &Path, bases: &[i64], below: i64) -> Result<i64> {
    let newest = producer_state::list_snapshots(dir)?
        .into_iter()
        .rfind(|o| *o <= below);
    let (from, mut state) = match newest {
        Some(o) => {
            let p = producer_state::snapshot_path(dir, o);
            let bytes =
                std::fs::read(&p).with_context(|| format!("failed to read `{}`", p.display()))?;
            match ProducerState::decode(&p, &bytes) {
                Ok(st) => (o, st),
                Err(_) => (i64::MIN, ProducerState::default()),
            }
        }
        None => (i64::MIN, ProducerState::default()),
    };
    for (i, base) in bases.iter().enumerate() {
        if bases.get(i + 1).is_some_and(|next| *next <= from) {
            continue;
        }
        if *base >= below {
            break;
        }
        let path = dir.join(segment::file_name(*base, "log"));
        state.replay_below(&mut SegmentReader::open(&path)?, from, below)?;
    }
    Ok(state.last_stable_offset(below))
}

/// The offset after the last whole batch of a segment: scans the headers from the last sane
/// entry of its offset index (or from the start) to the end of the file.
pub fn segment_end_offset(dir: &Path, base: i64) -> Result<i64> {
    let log_path = dir.join(segment::file_name(base, "log"));
    let reader = SegmentReader::open(&log_path)?;
    let index = dir.join(segment::file_name(base, "index"));
    let from = OffsetIndex::open_evicted(&index, base, reader.size())
        .ok()
        .and_then(|i| i.last_entry())
        .map_or(0, |(_, pos)| u64::from(pos));
    let end = end_offset(reader.starting_at(from))?.unwrap_or(base);
    if from > 0 && end == base {
        // The index pointed somewhere odd: scan the whole segment.
        return Ok(end_offset(SegmentReader::open(&log_path)?)?.unwrap_or(base));
    }
    Ok(end)
}

/// The offset after the last whole batch `reader` yields.
fn end_offset(mut reader: SegmentReader) -> Result<Option<i64>> {
    let mut end = None;
    while let Some((h, _)) = reader.next_batch()? {
        end = Some(h.last_offset + 1);
    }
    Ok(end)
}
