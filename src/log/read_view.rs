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

use super::data_dir::DataDir;
use super::format::offset_index::OffsetIndex;
use super::format::producer_state::{self, ProducerState};
use super::format::segment;
use super::format::segment_reader::SegmentReader;
use super::identity;
use super::partition::{PartitionLog, list_segment_bases};
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
            log_start: read(DataDir::LOG_START_OFFSET),
            high_watermark: read(DataDir::REPLICATION_OFFSET),
            recovery_point: read(DataDir::RECOVERY_POINT),
            clean_shutdown: data_dir.join(DataDir::CLEAN_SHUTDOWN_FILE).exists(),
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
    /// see [`super::format::epoch_cache::EpochCache::end_offset_for`]).
    pub fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)> {
        super::format::epoch_cache::EpochCache::from_entries(self.epochs.clone())
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
        let unflushed = match checkpoints.unflushed(&dir, tp, &list_segment_bases(&dir)?) {
            Ok(u) => u,
            Err(e) => {
                crate::log_warn!(
                    "{tp}: its log past the recovery point cannot be read ({e:#}); read up to its checkpointed high watermark"
                );
                None
            }
        };
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
        let bases = list_segment_bases(dir)?;
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
            // Damage in the unflushed tail ends its segment for readers, as recovery cuts
            // it there; the segments after it are kept.
            if let Some(d) = unflushed
                .iter()
                .flat_map(|t| t.damage.iter())
                .find(|d| d.base_offset == base)
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
            epochs: {
                let checkpointed =
                    checkpoint::read_epochs(&dir.join(DataDir::LEADER_EPOCH)).unwrap_or_default();
                match unflushed {
                    Some(t) => t.epochs_after(checkpointed, log_start_offset),
                    None => checkpointed,
                }
            },
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
/// bytes at the next start (see [`super::loader`] and [`super::format::segment::Segment::recover`]),
/// and this scan judges them as it does: the same segments, from the same batch, with the
/// same checks. So what `serve`, `status` and `verify` show of a stopped data dir is what the
/// next start keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnflushedTail {
    /// Where the scan began: the checkpointed recovery point, or the first segment's base
    /// when that point lies past the log end (then the whole log is judged, as recovery does).
    pub recovery_point: i64,
    /// The log end once recovered: the offset after the last whole, CRC-valid batch of the
    /// last segment (its base when it keeps none).
    pub valid_end: i64,
    /// Whole, CRC-valid batches scanned, and their bytes.
    pub valid_batches: usize,
    pub valid_bytes: u64,
    /// (leader epoch, base offset) of each batch scanned, for the leader-epoch cache.
    pub epochs: Vec<(i32, i64)>,
    /// Each stretch that is not whole valid batches, in offset order. Each ends its segment:
    /// recovery cuts the segment there and keeps the segments after it.
    pub damage: Vec<TailDamage>,
}

/// Where bytes that are not whole valid batches begin in a segment, and what they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailDamage {
    pub log_path: PathBuf,
    pub base_offset: i64,
    /// Byte position of the first bad byte in `log_path`.
    pub position: u64,
    /// From `position` to the end of `log_path`.
    pub bytes: u64,
    pub reason: String,
    /// A write torn by a crash: one partial batch (at most [`TORN_TAIL_MAX`] bytes) at the
    /// end of the segment that was being written. Recovery cuts it; anything else it keeps
    /// in `damaged/` with an ERROR before cutting, since intact data may lie behind it.
    pub torn: bool,
}

impl UnflushedTail {
    /// The leader-epoch history once recovered: the checkpointed entries with the epochs of
    /// the scanned batches assigned, cut at the log end and the log start (as the loader).
    pub fn epochs_after(&self, checkpointed: Vec<(i32, i64)>, log_start: i64) -> Vec<(i32, i64)> {
        let mut cache = super::format::epoch_cache::EpochCache::from_entries(checkpointed);
        for &(e, o) in &self.epochs {
            cache.assign(e, o);
        }
        cache.truncate_from_end(self.valid_end);
        cache.truncate_from_start(log_start);
        cache.entries().to_vec()
    }

    /// One line for an operator: what lies past the recovery point and what becomes of it.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({} bytes) past the recovery point {} {} whole and CRC-valid; the log ends at offset {}",
            crate::logging::count(self.valid_batches, "batch", "batches"),
            self.valid_bytes,
            self.recovery_point,
            if self.valid_batches == 1 { "is" } else { "are" },
            self.valid_end
        );
        for d in &self.damage {
            s.push_str(&format!(
                "; {} bytes from byte {} of `{}` are {} ({}): not served, and the next start cuts them{}",
                d.bytes,
                d.position,
                d.log_path.display(),
                if d.torn {
                    "a write torn by the crash"
                } else {
                    "not whole batches"
                },
                d.reason,
                if d.torn {
                    ""
                } else {
                    " after keeping them in damaged/"
                }
            ));
        }
        s
    }
}

/// The largest tail recovery cuts as a torn write (see [`super::format::segment`]).
pub use super::format::segment::TORN_TAIL_MAX;

/// Scans the segments of the stopped log in `dir` (`bases` in order) past `recovery_point`
/// as recovery does after an unclean stop: segments wholly below it were fsynced and are
/// trusted; the segment holding it is checked from the batch its last offset-index entry
/// below the point names, when that batch is there (index files carry no checksum), else
/// whole; every later segment is checked whole. Each batch checked must be whole, CRC-valid
/// and follow the one before; at the first that is not, the rest of that segment is damage
/// and the scan goes on with the next segment. A recovery point past the log end proves
/// nothing, and the whole log is checked. The cost is the unflushed tail, not the log.
pub fn scan_unflushed(dir: &Path, bases: &[i64], recovery_point: i64) -> Result<UnflushedTail> {
    let tail = scan_from_point(dir, bases, recovery_point)?;
    match bases.first() {
        Some(&first) if recovery_point > tail.valid_end && recovery_point > first => {
            scan_from_point(dir, bases, first)
        }
        _ => Ok(tail),
    }
}

fn scan_from_point(dir: &Path, bases: &[i64], recovery_point: i64) -> Result<UnflushedTail> {
    let mut tail = UnflushedTail {
        recovery_point,
        valid_end: bases.first().copied().unwrap_or(recovery_point),
        ..Default::default()
    };
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
        // The batch at a durable start was fsynced: it is trusted and only followed.
        let mut last: Option<i64> = None;
        if start > 0
            && let Some((h, _)) = reader.next_batch()?
        {
            last = Some(h.last_offset);
            tail.valid_end = tail.valid_end.max(h.last_offset + 1);
        }
        let mut bad: Option<(u64, String)> = None;
        while let Some((h, pos)) = reader.next_batch()? {
            if let Err(e) = reader.check_crc()? {
                bad = Some((pos, e.to_string()));
                break;
            }
            if let Err(e) = crate::record::check_follows(last, &h) {
                bad = Some((pos, e));
                break;
            }
            if h.last_offset < base {
                bad = Some((pos, format!("batch ends below the segment base {base}")));
                break;
            }
            if h.partition_leader_epoch >= 0 {
                tail.epochs.push((h.partition_leader_epoch, h.base_offset));
            }
            last = Some(h.last_offset);
            tail.valid_end = tail.valid_end.max(h.last_offset + 1);
            tail.valid_batches += 1;
            tail.valid_bytes += h.size_in_bytes as u64;
        }
        let mut torn = false;
        if bad.is_none() {
            let at = reader.position();
            let present = reader.size() - at;
            bad = match reader.end() {
                Some(_) if present > 0 && present < 17 => {
                    torn = true;
                    Some((at, format!("a batch header cut short at {present} bytes")))
                }
                Some(crate::record::SetEnd::Partial { .. }) => {
                    torn = true;
                    let n = reader.announced_size().unwrap_or(present);
                    Some((at, format!("a batch of {n} bytes with {present} present")))
                }
                Some(crate::record::SetEnd::Corrupt { reason, .. }) => {
                    Some((at, format!("malformed batch header: {reason}")))
                }
                _ => None,
            };
        }
        if let Some((position, reason)) = bad {
            let bytes = reader.size() - position;
            // As recovery: only the segment being written (the last, or the one holding
            // the recovery point) can hold a torn write.
            let may_be_torn = i + 1 == bases.len() || base < recovery_point;
            tail.damage.push(TailDamage {
                log_path,
                base_offset: base,
                position,
                bytes,
                reason,
                torn: torn && may_be_torn && bytes <= TORN_TAIL_MAX,
            });
        }
    }
    Ok(tail)
}

/// Where the scan of the segment at `base` begins: at the batch its last offset-index entry
/// below `recovery_point` names, when that batch is there and ends at the entry's offset
/// (as [`super::format::segment::Segment::open_recovering_from`] resumes); else at its start.
fn durable_start(dir: &Path, base: i64, recovery_point: i64, log_path: &Path, size: u64) -> u64 {
    if base >= recovery_point {
        return 0;
    }
    let index = dir.join(segment::file_name(base, "index"));
    let Ok((entry, pos)) =
        super::format::offset_index::lookup_file(&index, base, recovery_point.saturating_sub(1))
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

#[cfg(test)]
mod tests {
    //! The scan of a stopped log's unflushed tail against the loader's recovery of the same
    //! files: what `serve` and `status` show of a log stopped uncleanly must be what the next
    //! start keeps, byte for byte, with the same log end and leader epochs.
    use super::*;
    use crate::log::loader::load;
    use crate::log::partition_tests::{batches, cfg, hints, new_log, tp};
    use crate::record::VerifiedBatches;

    /// A log of several 2 KiB segments: 30 batches of epoch 3 fsynced and their epochs
    /// checkpointed (the recovery point is then 120), then 20 batches of epoch 5 written
    /// after it. Returns the data dir and the recovery point.
    fn crashed_log() -> (tempfile::TempDir, i64) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(dir.path(), 2048);
        let (bytes, _) = batches(0, 30, 3);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        let rp = log.flush().unwrap();
        log.checkpoint_epochs().unwrap();
        let (bytes, _) = batches(120, 20, 5);
        log.append(&VerifiedBatches::of(&bytes)).unwrap();
        drop(log);
        (dir, rp)
    }

    fn segment_paths(dir: &Path) -> Vec<PathBuf> {
        list_segment_bases(dir)
            .unwrap()
            .into_iter()
            .map(|b| dir.join(segment::file_name(b, "log")))
            .collect()
    }

    /// Every byte a reader of the stopped view may serve, in offset order.
    fn served_bytes(view: &LogView) -> Vec<u8> {
        let mut out = Vec::new();
        for s in &view.segments {
            let all = std::fs::read(&s.log_path).unwrap();
            out.extend_from_slice(&all[..s.size as usize]);
        }
        out
    }

    /// Scans a copy of `data` past `rp`, loads another copy as an unclean start does, and
    /// asserts both agree: log end, high watermark, leader epochs and the bytes served.
    fn assert_scan_matches_recovery(data: &Path, rp: i64) -> UnflushedTail {
        let scanned = tempfile::tempdir().unwrap();
        let loaded = tempfile::tempdir().unwrap();
        for to in [scanned.path(), loaded.path()] {
            let part = to.join(tp().dir_name());
            std::fs::create_dir_all(&part).unwrap();
            for e in std::fs::read_dir(data.join(tp().dir_name())).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_file() {
                    std::fs::copy(e.path(), part.join(e.file_name())).unwrap();
                }
            }
        }
        let part = scanned.path().join(tp().dir_name());
        let tail = scan_unflushed(&part, &list_segment_bases(&part).unwrap(), rp).unwrap();
        let view = LogView::open_stopped_dir(&part, None, None, Some(&tail))
            .unwrap()
            .unwrap();
        let (log, _) = load(loaded.path(), &tp(), cfg(2048), hints(Some(rp)), false)
            .unwrap()
            .unwrap();
        assert_eq!(tail.valid_end, log.log_end_offset(), "log end: {tail:?}");
        assert_eq!(view.log_end_offset, log.log_end_offset());
        assert_eq!(view.high_watermark, log.high_watermark(), "high watermark");
        assert_eq!(view.epochs, log.epochs.entries().to_vec(), "leader epochs");
        assert_eq!(
            served_bytes(&view),
            log.read_all().unwrap(),
            "the bytes served are the bytes recovery keeps"
        );
        tail
    }

    #[test]
    fn a_clean_tail_past_the_recovery_point_is_served_whole_with_its_epochs() {
        let (dir, rp) = crashed_log();
        let tail = assert_scan_matches_recovery(dir.path(), rp);
        assert_eq!(tail.valid_end, 200);
        assert_eq!(
            tail.valid_batches, 20,
            "only the batches past the recovery point"
        );
        assert!(tail.damage.is_empty());
        assert_eq!(tail.epochs.first(), Some(&(5, 120)));
    }

    #[test]
    fn a_torn_write_at_the_end_is_not_served_and_is_called_torn() {
        let (dir, rp) = crashed_log();
        let part = dir.path().join(tp().dir_name());
        let last = segment_paths(&part).pop().unwrap();
        let (extra, _) = batches(200, 1, 5);
        crate::log::format::segment::append_raw(&last, &extra[..extra.len() - 9]).unwrap();
        let tail = assert_scan_matches_recovery(dir.path(), rp);
        assert_eq!(tail.valid_end, 200);
        let [d] = &tail.damage[..] else {
            panic!("one damage: {tail:?}")
        };
        assert!(d.torn, "{d:?}");
        assert_eq!(d.bytes, (extra.len() - 9) as u64);
    }

    #[test]
    fn damage_in_an_earlier_segment_ends_that_segment_only_and_is_not_torn() {
        let (dir, rp) = crashed_log();
        let part = dir.path().join(tp().dir_name());
        let segs = segment_paths(&part);
        // A segment past the recovery point that is not the last: its second batch's
        // records damaged (the CRC fails).
        let bases = list_segment_bases(&part).unwrap();
        let i = bases.iter().position(|&b| b >= rp).unwrap();
        assert!(i + 1 < segs.len(), "the test needs a later segment");
        let mut bytes = std::fs::read(&segs[i]).unwrap();
        let first = BatchHeaderSize::of(&bytes);
        bytes[first + 80] ^= 0x55;
        std::fs::write(&segs[i], &bytes).unwrap();
        let tail = assert_scan_matches_recovery(dir.path(), rp);
        let [d] = &tail.damage[..] else {
            panic!("one damage: {tail:?}")
        };
        assert!(!d.torn, "a CRC failure is not a torn write: {d:?}");
        assert_eq!(d.position, first as u64);
        assert_eq!(
            tail.valid_end, 200,
            "the segments after the damage are kept"
        );
    }

    #[test]
    fn the_scan_resumes_inside_the_segment_holding_the_recovery_point() {
        // A recovery point inside a segment: the batches below it are trusted (a damaged
        // one there is not looked at, as recovery does not), those after it checked.
        let (dir, _) = crashed_log();
        let part = dir.path().join(tp().dir_name());
        let bases = list_segment_bases(&part).unwrap();
        let holding = bases[bases.len() - 2];
        let rp = holding + 8;
        let tail = assert_scan_matches_recovery(dir.path(), rp);
        assert!(tail.damage.is_empty());
        assert_eq!(tail.valid_end, 200);
    }

    #[test]
    fn a_recovery_point_past_the_log_end_judges_the_whole_log() {
        let (dir, _) = crashed_log();
        let part = dir.path().join(tp().dir_name());
        let segs = segment_paths(&part);
        let mut bytes = std::fs::read(&segs[0]).unwrap();
        bytes[100] ^= 0x55;
        std::fs::write(&segs[0], &bytes).unwrap();
        let tail = assert_scan_matches_recovery(dir.path(), 10_000);
        assert_eq!(tail.recovery_point, 0, "judged from the first segment");
        assert_eq!(tail.damage.len(), 1, "{tail:?}");
        assert_eq!(tail.damage[0].position, 0);
    }

    /// The byte length of the first batch in `bytes`.
    struct BatchHeaderSize;
    impl BatchHeaderSize {
        fn of(bytes: &[u8]) -> usize {
            crate::record::BatchHeader::parse_header_of(bytes, bytes.len() as u64, usize::MAX)
                .unwrap()
                .size_in_bytes
        }
    }
}
