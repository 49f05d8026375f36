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

/// A stopped data dir's log-start, replication (high watermark) and recovery-point
/// checkpoints, read once, and whether it was stopped cleanly; a file that cannot be read
/// counts as empty (each partition then falls back to its log).
#[derive(Debug, Default)]
pub struct StoppedCheckpoints {
    log_start: std::collections::BTreeMap<TopicPartition, i64>,
    high_watermark: std::collections::BTreeMap<TopicPartition, i64>,
    recovery_point: std::collections::BTreeMap<TopicPartition, i64>,
    /// The clean-shutdown marker is there: the checkpoints are the exact figures.
    pub clean_shutdown: bool,
}

impl StoppedCheckpoints {
    pub fn read(data_dir: &Path) -> StoppedCheckpoints {
        let read = |name: &str| checkpoint::read_offsets(&data_dir.join(name)).unwrap_or_default();
        StoppedCheckpoints {
            log_start: read(checkpoint::LOG_START_OFFSET),
            high_watermark: read(checkpoint::REPLICATION_OFFSET),
            recovery_point: read(checkpoint::RECOVERY_POINT),
            clean_shutdown: data_dir.join(super::manager::CLEAN_SHUTDOWN_FILE).exists(),
        }
    }

    /// After an unclean stop, what the log of `tp` (segments at `bases` in `dir`) holds past
    /// its recovery point (a partition no checkpoint names yet: all of it); `None` after a
    /// clean one.
    pub fn unflushed(
        &self,
        dir: &Path,
        tp: &TopicPartition,
        bases: &[i64],
    ) -> Result<Option<UnflushedTail>> {
        if self.clean_shutdown {
            return Ok(None);
        }
        let Some(&first) = bases.first() else {
            return Ok(None);
        };
        let rp = self
            .recovery_point
            .get(tp)
            .copied()
            .unwrap_or(first)
            .max(first);
        scan_unflushed(dir, bases, rp).map(Some)
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
    ///
    /// After an unclean stop the checkpoints lag the log: the high watermark is then the end
    /// of the whole, CRC-valid batches (every batch the follower appended was below the
    /// leader's high watermark, as the loader also reasons), and nothing from the first
    /// damage past the recovery point on is in the view. What was found there is returned.
    pub fn open_stopped(
        data_dir: &Path,
        tp: &TopicPartition,
    ) -> Result<Option<(LogView, Option<UnflushedTail>)>> {
        Self::open_stopped_with(data_dir, tp, &StoppedCheckpoints::read(data_dir))
    }

    /// [`Self::open_stopped`] with the data dir's checkpoint files read once for every
    /// partition (a data dir of 10,000 partitions would otherwise parse them 10,000 times).
    pub fn open_stopped_with(
        data_dir: &Path,
        tp: &TopicPartition,
        checkpoints: &StoppedCheckpoints,
    ) -> Result<Option<(LogView, Option<UnflushedTail>)>> {
        let dir = data_dir.join(tp.dir_name());
        let unflushed = checkpoints.unflushed(&dir, tp, &list_segment_bases(&dir)?)?;
        let view = Self::open_stopped_dir(
            &dir,
            checkpoints.log_start.get(tp).copied(),
            checkpoints.high_watermark.get(tp).copied(),
            unflushed.as_ref(),
        )?;
        Ok(view.map(|v| (v, unflushed)))
    }

    /// The view of the stopped log in `dir` with the log start and high watermark its
    /// checkpoints give (`None`: its first segment and its log end). An archived history,
    /// which no checkpoint names, is read whole this way. With `unflushed` (a stop that was
    /// not clean), the log ends at its whole, CRC-valid batches, and so does the high
    /// watermark.
    pub fn open_stopped_dir(
        dir: &Path,
        checkpointed_log_start: Option<i64>,
        checkpointed_high_watermark: Option<i64>,
        unflushed: Option<&UnflushedTail>,
    ) -> Result<Option<LogView>> {
        let mut bases = list_segment_bases(dir)?;
        // Segments past damage in the unflushed tail are not read: a reader would see a gap
        // where the damage is.
        let damage = unflushed.and_then(|t| t.damage.as_ref());
        if let Some(d) = damage {
            bases.retain(|&b| b <= d.base_offset);
        }
        let (Some(&first), Some(&last)) = (bases.first(), bases.last()) else {
            return Ok(None);
        };
        let log_end = match unflushed {
            Some(t) => t.valid_end,
            None => segment_end_offset(dir, last)?.max(last),
        };
        let mut segments = Vec::with_capacity(bases.len());
        for (i, &base) in bases.iter().enumerate() {
            let log_path = dir.join(segment::file_name(base, "log"));
            let mut size = std::fs::metadata(&log_path)
                .with_context(|| format!("failed to stat `{}`", log_path.display()))?
                .len();
            if let Some(d) = damage
                && d.base_offset == base
            {
                size = size.min(d.position);
            }
            segments.push(SegmentSpan {
                base_offset: base,
                log_path,
                size,
                next_offset: bases.get(i + 1).copied().unwrap_or(log_end),
                index_hint: None,
            });
        }
        let log_start_offset = checkpointed_log_start.unwrap_or(first).max(first);
        let high_watermark = match unflushed {
            Some(_) => log_end,
            None => checkpointed_high_watermark.unwrap_or(log_end),
        }
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

/// What a stopped log holds past its recovery point, found without changing anything: the
/// bytes an unclean stop (kill -9, power loss) left unfsynced. The loader recovers the same
/// bytes at the next start (see [`super::loader`]): it keeps every whole, CRC-valid batch
/// and cuts at the first that is not. Readers of a stopped data dir (`serve`, `status`,
/// `verify`) judge the tail the same way, so what they show is what the next start keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnflushedTail {
    pub recovery_point: i64,
    /// The offset after the last whole, CRC-valid batch before the first damage past the
    /// recovery point (the log end when there is none): every batch below it may be served.
    pub valid_end: i64,
    /// Whole, CRC-valid batches past the recovery point, and their bytes.
    pub valid_batches: usize,
    pub valid_bytes: u64,
    /// The first bytes past the recovery point that are not a whole valid batch.
    pub damage: Option<TailDamage>,
}

/// Where the bytes that are not whole valid batches begin, and what they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailDamage {
    pub log_path: PathBuf,
    pub base_offset: i64,
    /// Byte position of the first bad byte in `log_path`.
    pub position: u64,
    /// From `position` to the end of `log_path`.
    pub bytes: u64,
    /// Segments after the damaged one (recovery keeps them; readers of the stopped log stop
    /// at the damage).
    pub later_segments: usize,
    pub reason: String,
    /// A batch cut short by the end of its file: what a crash mid-append leaves.
    pub torn: bool,
}

impl UnflushedTail {
    /// One line for an operator: what lies past the recovery point and what becomes of it.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({} bytes) past the recovery point {} {} whole and CRC-valid, up to offset {}",
            crate::logging::count(self.valid_batches, "batch", "batches"),
            self.valid_bytes,
            self.recovery_point,
            if self.valid_batches == 1 { "is" } else { "are" },
            self.valid_end
        );
        if let Some(d) = &self.damage {
            s.push_str(&format!(
                "; after it, {} bytes from byte {} of `{}` are {} ({}) and are not served: the next start cuts them{}",
                d.bytes,
                d.position,
                d.log_path.display(),
                if d.torn { "a torn write" } else { "not whole batches" },
                d.reason,
                if d.torn { "" } else { ", keeping them in damaged/" }
            ));
            if d.later_segments > 0 {
                s.push_str(&format!(
                    " ({} after it kept, past a hole)",
                    crate::logging::count(d.later_segments, "segment", "segments")
                ));
            }
        }
        s
    }
}

/// Scans the segments of the stopped log in `dir` (`bases` in order) past `recovery_point`:
/// every batch there is checked whole (length, CRC-32C, offsets following each other) up to
/// the first that is not. Segments wholly below the recovery point were fsynced and are
/// trusted, as recovery trusts them; the segment holding it is scanned from its last
/// offset-index entry below it when that entry checks out, else from its start. The cost is
/// the unflushed tail, not the log.
pub fn scan_unflushed(dir: &Path, bases: &[i64], recovery_point: i64) -> Result<UnflushedTail> {
    let mut tail = UnflushedTail {
        recovery_point,
        valid_end: bases.first().copied().unwrap_or(recovery_point),
        ..Default::default()
    };
    let mut last: Option<i64> = None;
    for (i, &base) in bases.iter().enumerate() {
        tail.valid_end = tail.valid_end.max(base);
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        if next_base <= recovery_point {
            continue;
        }
        let log_path = dir.join(segment::file_name(base, "log"));
        let reader = SegmentReader::open(&log_path)?;
        let start = durable_start(dir, base, recovery_point, &log_path, reader.size());
        let mut reader = reader.starting_at(start);
        let mut damage: Option<(u64, String, bool)> = None;
        while let Some((h, pos)) = reader.next_batch()? {
            if h.last_offset < recovery_point {
                last = Some(h.last_offset);
                tail.valid_end = tail.valid_end.max(h.last_offset + 1);
                continue;
            }
            if let Err(e) = reader.check_crc()? {
                damage = Some((pos, e.to_string(), false));
                break;
            }
            if let Err(e) = crate::record::check_follows(last, &h) {
                damage = Some((pos, e, false));
                break;
            }
            if h.last_offset < base {
                damage = Some((
                    pos,
                    format!("batch ends below the segment base {base}"),
                    false,
                ));
                break;
            }
            last = Some(h.last_offset);
            tail.valid_end = tail.valid_end.max(h.last_offset + 1);
            tail.valid_batches += 1;
            tail.valid_bytes += h.size_in_bytes as u64;
        }
        if damage.is_none() {
            let at = reader.position();
            damage = match reader.end() {
                Some(crate::record::SetEnd::Partial { .. }) => {
                    let present = reader.size() - at;
                    let why = match reader.announced_size() {
                        Some(n) => format!("a batch of {n} bytes with {present} present"),
                        None => format!("a batch header cut short at {present} bytes"),
                    };
                    Some((at, why, true))
                }
                Some(crate::record::SetEnd::Corrupt { reason, .. }) => {
                    Some((at, format!("malformed batch header: {reason}"), false))
                }
                _ => None,
            };
        }
        if let Some((position, reason, torn)) = damage {
            tail.damage = Some(TailDamage {
                bytes: reader.size() - position,
                log_path,
                base_offset: base,
                position,
                later_segments: bases.len() - i - 1,
                reason,
                torn,
            });
            break;
        }
    }
    Ok(tail)
}

/// Where a scan past `recovery_point` may begin in the segment at `base`: after the batch
/// its last offset-index entry below the recovery point names, when that batch is there and
/// ends at the entry's offset (index files carry no checksum); else the segment's start.
fn durable_start(dir: &Path, base: i64, recovery_point: i64, log_path: &Path, size: u64) -> u64 {
    if base >= recovery_point {
        return 0;
    }
    let index = dir.join(segment::file_name(base, "index"));
    let Ok((entry, pos)) =
        super::offset_index::lookup_file(&index, base, recovery_point.saturating_sub(1))
    else {
        return 0;
    };
    let pos = u64::from(pos);
    if pos == 0 || pos >= size || entry >= recovery_point {
        return 0;
    }
    let Ok(reader) = SegmentReader::open(log_path) else {
        return 0;
    };
    match reader.starting_at(pos).next_batch() {
        Ok(Some((h, _))) if h.last_offset == entry => pos,
        _ => 0,
    }
}
