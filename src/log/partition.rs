//! The local log of one partition: an ordered set of segments, the last one active, plus the
//! offsets that checkpoints record (log start, recovery point, high watermark) and the
//! leader-epoch cache.
//!
//! Invariants: `segments` is never empty; segment base offsets increase and each segment's
//! batches end before the next segment's base; `log_start_offset <= high_watermark <=
//! log_end_offset`; `recovery_point <= log_end_offset` and every byte below the recovery point
//! has been fsynced (rolled segments are fsynced when they roll, the active one by
//! [`PartitionLog::flush`]).
//! Thread-safety: none inside; the log manager wraps each log in a mutex and every caller
//! (fetcher, checkpoint task, status) goes through it.

use super::AppendError;
use super::data_dir::DataDir;
use super::format::epoch_cache::EpochCache;
use super::format::producer_state::{self, ProducerState};
use super::format::segment::{self, Segment};
use super::identity;
use super::touched::{Marks, Pass, Touched};
use crate::checkpoint::{self, TopicPartition, fsync_dir};
use crate::clock::now_ms;
use crate::protocol::uuid::Uuid;
use crate::record::{BatchHeader, VerifiedBatches};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod truncation;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub index_interval_bytes: u64,
    /// -1: unlimited.
    pub retention_bytes: i64,
    /// -1: unlimited.
    pub retention_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 604_800_000,
            index_interval_bytes: 4096,
            retention_bytes: -1,
            retention_ms: -1,
        }
    }
}

#[derive(Debug)]
pub struct PartitionLog {
    pub tp: TopicPartition,
    pub dir: PathBuf,
    pub config: LogConfig,
    /// Boxed: a map's node holds room for eleven entries, and a segment is some hundred
    /// bytes, so unboxed every log of one segment would cost about 5 KB for its map alone
    /// (50 MB for 10,000 partitions).
    pub(super) segments: BTreeMap<i64, Box<Segment>>,
    pub(super) log_start_offset: i64,
    pub(super) recovery_point: i64,
    pub(super) high_watermark: i64,
    pub(super) epochs: EpochCache,
    /// Bumped by every truncation, so a flush begun before one cannot claim what it did not
    /// fsync.
    pub(super) generation: u64,
    /// Offset ranges (first, last) the leader had deleted before this replica fetched them;
    /// persisted in `lost-upstream-checkpoint`.
    pub(super) lost: Vec<(i64, i64)>,
    /// The topic id recorded in `partition.metadata`, once a leader reported one.
    pub(super) topic_id: Option<Uuid>,
    /// Open transactions, for `.txnindex` entries and the last stable offset.
    pub(super) producers: ProducerState,
    /// Offset of the newest producer snapshot this process wrote or loaded.
    pub(super) last_snapshot: Option<i64>,
    /// Set when the directory was archived: nothing may flush or checkpoint this log again.
    pub(super) retired: bool,
    /// Why the partition failed (a local storage error), while it is failed: nothing
    /// appends to, flushes or cuts it until [`Self::check_storage`] finds its files sound.
    pub(super) failed: Option<String>,
    /// (device, inode) of the directory when the log was opened: a directory removed or
    /// replaced under the daemon no longer holds this log.
    pub(super) dir_id: Option<(u64, u64)>,
    /// Which of the manager's periodic passes are to visit this log: every method that
    /// changes its bytes or figures raises them (see [`super::touched`]).
    pub(super) marks: Marks,
}

/// A flush begun under the partition lock and finished outside it: the fsyncs run on
/// descriptors the ticket holds (the segment's own, kept open meanwhile, and the indexes')
/// while the fetcher goes on appending.
#[derive(Debug)]
pub struct FlushTicket {
    files: Vec<super::format::segment::FileToSync>,
    target: i64,
    generation: u64,
    /// The segment flushed and where its fsync began.
    segment: i64,
    mark: super::resources::open_files::SyncMark,
}

impl FlushTicket {
    /// The fsyncs; call without holding the partition lock.
    pub fn sync(&self) -> Result<()> {
        for (f, path) in &self.files {
            if let Err(e) = f.sync_data() {
                super::halt_on_fsync_error(path, &e);
            }
        }
        Ok(())
    }
}

/// A `leader-epoch-checkpoint` written to its temporary file, unsynced, by
/// [`PartitionLog::stage_epochs`].
#[derive(Debug, Clone)]
pub struct StagedEpochs {
    pub tmp: PathBuf,
    generation: u64,
    entries: Vec<(i32, i64)>,
}

/// The figures `status` and checkpoints need, taken under the lock in one go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSummary {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    pub recovery_point: i64,
    pub leader_epoch: Option<i32>,
    pub segments: usize,
    pub size_bytes: u64,
}

impl PartitionLog {
    /// Creates the partition directory and an empty log starting at `start_offset`, with its
    /// `partition.metadata` when the topic id is known.
    pub fn create(
        data_dir: &Path,
        tp: &TopicPartition,
        config: LogConfig,
        start_offset: i64,
        topic_id: Option<Uuid>,
    ) -> Result<Self> {
        let dir = data_dir.join(tp.dir_name());
        let existed = dir.exists();
        // A new directory is made under a name no reader takes for a partition, then renamed
        // into place: the loader, `status` and `verify` see it whole or not at all.
        let build = if existed {
            dir.clone()
        } else {
            Self::creating_path(data_dir, tp)
        };
        let mut renamed = false;
        let made = (|| {
            Self::make_files(&build, !existed, &config, start_offset, topic_id, true)?;
            fsync_dir(&build)?;
            if !existed {
                fs::rename(&build, &dir).with_context(|| {
                    format!(
                        "failed to rename `{}` to `{}`",
                        build.display(),
                        dir.display()
                    )
                })?;
                renamed = true;
            }
            fsync_dir(data_dir)?;
            Self::open_created(data_dir, tp, config, start_offset, topic_id)
        })();
        // Out of descriptors or space, what was made goes again.
        match made {
            Ok(log) => Ok(log),
            Err(e) => {
                if !existed {
                    let made = if renamed { &dir } else { &build };
                    if let Err(re) = fs::remove_dir_all(made) {
                        crate::log_error!(
                            "failed to remove the half-made `{}`: {re}",
                            made.display()
                        );
                    }
                }
                Err(e)
            }
        }
    }

    /// Where a new partition directory is made before it is renamed into place.
    pub fn creating_path(data_dir: &Path, tp: &TopicPartition) -> PathBuf {
        data_dir.join(format!(".{}{}", tp.dir_name(), DataDir::CREATING_SUFFIX))
    }

    /// The first step of creating many logs at once (see `LogManager::create_logs`): the
    /// directory [`Self::creating_path`] with the files of an empty log starting at
    /// `start_offset` (and its `partition.metadata`), none of it fsynced. The caller makes
    /// it durable, renames it into place, fsyncs the data dir and only then calls
    /// [`Self::open_created`]. On error nothing of it is left.
    pub fn build_unsynced(
        data_dir: &Path,
        tp: &TopicPartition,
        config: &LogConfig,
        start_offset: i64,
        topic_id: Option<Uuid>,
    ) -> Result<PathBuf> {
        let build = Self::creating_path(data_dir, tp);
        // No temporary file for partition.metadata: the directory appears whole or not at all.
        if let Err(e) = Self::make_files(&build, true, config, start_offset, topic_id, false) {
            if let Err(re) = fs::remove_dir_all(&build)
                && re.kind() != std::io::ErrorKind::NotFound
            {
                crate::log_error!("failed to remove the half-made `{}`: {re}", build.display());
            }
            return Err(e);
        }
        Ok(build)
    }

    /// The files of an empty log in `build` (emptied first when `fresh`); `partition.metadata`
    /// written atomically and durably when `synced`, else in place.
    fn make_files(
        build: &Path,
        fresh: bool,
        config: &LogConfig,
        start_offset: i64,
        topic_id: Option<Uuid>,
        synced: bool,
    ) -> Result<()> {
        if fresh && build.exists() {
            fs::remove_dir_all(build)
                .with_context(|| format!("failed to remove `{}`", build.display()))?;
        }
        fs::create_dir_all(build)
            .with_context(|| format!("failed to create `{}`", build.display()))?;
        match topic_id {
            Some(id) if synced => identity::write_topic_id(build, id)?,
            Some(id) => identity::write_topic_id_unsynced(build, id)?,
            None => {}
        }
        drop(Segment::create(
            build,
            start_offset,
            config.index_interval_bytes,
            now_ms(),
        )?);
        Ok(())
    }

    /// The log of a directory [`Self::build_unsynced`] made, now durable and in place.
    pub fn open_created(
        data_dir: &Path,
        tp: &TopicPartition,
        config: LogConfig,
        start_offset: i64,
        topic_id: Option<Uuid>,
    ) -> Result<Self> {
        let dir = data_dir.join(tp.dir_name());
        let (seg, _) = Segment::open(
            &dir,
            start_offset,
            config.index_interval_bytes,
            now_ms(),
            false,
            true,
        )?;
        Ok(Self::with_empty_segment(
            dir,
            tp,
            config,
            start_offset,
            topic_id,
            seg,
        ))
    }

    fn with_empty_segment(
        dir: PathBuf,
        tp: &TopicPartition,
        config: LogConfig,
        start_offset: i64,
        topic_id: Option<Uuid>,
        seg: Segment,
    ) -> Self {
        let mut segments = BTreeMap::new();
        segments.insert(start_offset, Box::new(seg));
        let dir_id = dir_identity(&dir);
        PartitionLog {
            tp: tp.clone(),
            dir,
            config,
            segments,
            log_start_offset: start_offset,
            recovery_point: start_offset,
            high_watermark: start_offset,
            epochs: EpochCache::default(),
            generation: 0,
            lost: Vec::new(),
            topic_id,
            producers: ProducerState::default(),
            last_snapshot: None,
            retired: false,
            failed: None,
            dir_id,
            marks: Marks::default(),
        }
    }

    /// From now on the log's changes are reported to `to` (its manager); until the passes
    /// visit it, it counts as changed.
    pub(super) fn watch(&mut self, to: Arc<Touched>) {
        self.marks.watch(&self.tp, to);
    }

    /// The log's bytes or figures changed in a way that concerns `passes`.
    pub(super) fn touch(&mut self, passes: &[Pass]) {
        self.marks.raise(&self.tp, passes);
    }

    /// `pass` is reading the log now: a change from here on is reported to it again.
    pub(super) fn untouch(&mut self, pass: Pass) {
        self.marks.lower(pass);
    }

    pub(super) fn active(&self) -> &Segment {
        #[expect(clippy::expect_used, reason = "invariant: segments is never empty")]
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        #[expect(clippy::expect_used, reason = "invariant: segments is never empty")]
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }
    /// Whether the log holds no batch at all.
    pub fn is_empty(&self) -> bool {
        self.segments().all(Segment::is_empty)
    }
    /// The offset after the last batch the log holds; `None` when it holds none. Below the log
    /// end when the active segment is an empty one that a skip past lost offsets made.
    pub fn data_end_offset(&self) -> Option<i64> {
        self.segments
            .values()
            .rev()
            .find(|s| !s.is_empty())
            .map(|s| s.next_offset())
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// Moves on every truncation.
    pub fn generation(&self) -> u64 {
        self.generation
    }
    /// Whether the directory was archived (a re-created topic): its files are no longer this
    /// log's.
    pub fn is_retired(&self) -> bool {
        self.retired
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }
    pub fn epoch_cache(&self) -> &EpochCache {
        &self.epochs
    }
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values().map(|s| &**s)
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments().map(Segment::size).sum()
    }

    pub fn summary(&self) -> LogSummary {
        LogSummary {
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset(),
            high_watermark: self.high_watermark,
            recovery_point: self.recovery_point,
            leader_epoch: self.latest_epoch(),
            segments: self.segments.len(),
            size_bytes: self.size_bytes(),
        }
    }

    /// Why the partition is failed, while it is.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Marks the partition failed; false when it already was.
    pub fn mark_failed(&mut self, reason: &str) -> bool {
        if self.failed.is_some() {
            return false;
        }
        self.failed = Some(reason.to_string());
        self.touch(&Pass::ALL);
        true
    }

    /// Whether the log's files are still sound after a storage error: its directory is the
    /// one it was loaded from, and the active segment is there, writable, and as long as
    /// its batches (the bytes of a write that failed part-way are cut off). Clears the
    /// failure when they are.
    pub fn check_storage(&mut self) -> Result<()> {
        // It may cut bytes, and a log sound again is flushed and checkpointed again.
        self.touch(&Pass::ALL);
        if dir_identity(&self.dir) != self.dir_id {
            bail!(
                "the partition directory `{}` is gone or was replaced",
                self.dir.display()
            );
        }
        self.active_mut().check_file()?;
        self.failed = None;
        Ok(())
    }

    /// Whether `h` must go to a new segment, given `pending` bytes about to be written to the
    /// active one. Positions in the offset index are u32, so a segment never passes 2 GiB.
    fn should_roll(&self, h: &BatchHeader, pending: u64, now: i64) -> bool {
        let a = self.active();
        if a.is_empty() && pending == 0 {
            return false;
        }
        let limit = self.config.segment_bytes.min(i32::MAX as u64);
        a.size() + pending + h.size_in_bytes as u64 > limit
            || now - a.created_ms > self.config.segment_ms
            || h.last_offset - a.base_offset > i64::from(i32::MAX)
    }

    /// Makes a new active segment at `base`; the old one is fsynced first, so everything below
    /// the new segment is durable.
    fn roll(&mut self, base: i64, now: i64) -> Result<()> {
        let old = self.active_mut();
        old.on_become_inactive()?;
        old.flush()?;
        old.close_file();
        let seg = Segment::create(&self.dir, base, self.config.index_interval_bytes, now)?;
        super::format::diverged::test_pause_point("rolling");
        if let Err(e) = fsync_dir(&self.dir) {
            // Not named by the directory for sure: made again by the next roll.
            drop(seg);
            if let Err(de) = super::format::segment::delete_files(&self.dir, base) {
                crate::log_error!("{de:#}");
            }
            return Err(e);
        }
        self.segments.insert(base, Box::new(seg));
        crate::log_info!("{}: rolled new segment at offset {base}", self.tp);
        Ok(())
    }

    /// Appends batches [`crate::record::verified::follow`] verified, as a follower does
    /// (Kafka's `appendAsFollower`): the first batch ends at or after the log end and starts
    /// after the last batch the log holds (so an empty log, or the empty segment a skip past
    /// lost offsets made, may take a batch that begins before its start), and each is written
    /// verbatim. Batches that fit in the active segment are written with one write; a new
    /// segment is named by the base offset of its first batch.
    pub fn append(&mut self, batches: &VerifiedBatches<'_>) -> Result<(), AppendError> {
        let (bytes, headers) = (batches.bytes(), batches.headers());
        let Some(first) = headers.first() else {
            return Ok(());
        };
        if let Some(why) = &self.failed {
            return Err(AppendError::Storage(anyhow::anyhow!(
                "{} is failed: {why}",
                self.tp
            )));
        }
        // Bytes written to the open files of a directory someone removed would be lost
        // without an error: one stat per append makes that a storage error at once.
        if dir_identity(&self.dir) != self.dir_id {
            return Err(AppendError::Storage(anyhow::anyhow!(
                "the partition directory `{}` is gone or was replaced",
                self.dir.display()
            )));
        }
        if !self.active().file_is_current() {
            return Err(AppendError::Storage(anyhow::anyhow!(
                "the active segment `{}` was removed or replaced",
                self.active().log_path().display()
            )));
        }
        let leo = self.log_end_offset();
        let data_end = self.data_end_offset();
        if first.last_offset < leo || data_end.is_some_and(|e| first.base_offset < e) {
            return Err(AppendError::OffsetMismatch(format!(
                "{}: append of offsets {}..{} is below the log end {leo}",
                self.tp, first.base_offset, first.last_offset
            )));
        }
        // From here on bytes may be written (even when a later write fails).
        self.touch(&Pass::ALL);
        let now = now_ms();
        let (mut chunk_start, mut chunk_byte_start, mut pos) = (0usize, 0usize, 0usize);
        for (i, h) in headers.iter().enumerate() {
            if self.should_roll(h, (pos - chunk_byte_start) as u64, now) {
                self.write_chunk(
                    bytes.get(chunk_byte_start..pos).unwrap_or_default(),
                    headers.get(chunk_start..i).unwrap_or_default(),
                )?;
                // The new segment starts at this batch: every batch of a segment ends at or
                // after its base, and the base is above everything before it.
                let base = h.base_offset.max(self.log_end_offset());
                self.roll(base, now)?;
                chunk_start = i;
                chunk_byte_start = pos;
            }
            pos += h.size_in_bytes;
        }
        self.write_chunk(
            bytes.get(chunk_byte_start..pos).unwrap_or_default(),
            headers.get(chunk_start..).unwrap_or_default(),
        )?;
        Ok(())
    }

    /// Writes batches to the active segment, then applies them to the epoch cache, the
    /// producer state and the `.txnindex`. Any error puts all of it back as it was before:
    /// the segment is cut to its last whole batch and its indexes to their entries then.
    fn write_chunk(&mut self, bytes: &[u8], headers: &[BatchHeader]) -> Result<()> {
        if headers.is_empty() {
            return Ok(());
        }
        let mark = self.active().mark();
        self.active_mut().append(bytes, headers)?;
        // Only a control batch can write a `.txnindex` entry, the one step that can fail
        // after the bytes are in: the state to restore is copied only then.
        let before = headers.iter().any(BatchHeader::is_control).then(|| {
            let txn_len = self.active().txn_index.len_bytes();
            (self.epochs.clone(), self.producers.clone(), txn_len)
        });
        let applied = self.apply_appended(bytes, headers);
        if let Err(e) = applied {
            self.active_mut().rollback(mark);
            if let Some((epochs, producers, txn_len)) = before {
                self.epochs = epochs;
                self.producers = producers;
                if let Err(ce) = txn_len.and_then(|len| self.active_mut().txn_index.cut_back(len)) {
                    crate::log_error!("{ce:#}; it is rebuilt at the next start");
                }
            }
            return Err(e);
        }
        Ok(())
    }

    fn apply_appended(&mut self, bytes: &[u8], headers: &[BatchHeader]) -> Result<()> {
        let mut pos = 0;
        for h in headers {
            if h.partition_leader_epoch >= 0 {
                self.epochs.assign(h.partition_leader_epoch, h.base_offset);
            }
            let batch = bytes.get(pos..pos + h.size_in_bytes).unwrap_or_default();
            pos += h.size_in_bytes;
            if let Some(aborted) = self.producers.update(h, batch) {
                self.active_mut().txn_index.append(&aborted)?;
            }
        }
        Ok(())
    }

    /// The first offset of the oldest open transaction, else the log end.
    pub fn last_stable_offset(&self) -> i64 {
        self.producers.last_stable_offset(self.log_end_offset())
    }

    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// Rebuilds the open transactions from the newest snapshot at or below `limit` by walking
    /// the batches after it; rewrites the `.txnindex` of every segment whose base is at or
    /// above `rebuild_from` (those recovery scanned). Snapshots past the log end are deleted.
    pub(super) fn rebuild_producer_state(&mut self, limit: i64, rebuild_from: i64) -> Result<()> {
        let leo = self.log_end_offset();
        let (from, mut state) = match producer_state::load_newest(&self.dir, limit.min(leo), leo)? {
            Some((o, st)) => (o, st),
            None => (i64::MIN, ProducerState::default()),
        };
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for (i, base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            let rebuild = *base >= rebuild_from;
            let Some(seg) = self.segments.get_mut(base) else {
                continue;
            };
            if (next <= from || seg.next_offset() <= from) && !rebuild {
                continue; // wholly before the snapshot, and its index is trusted
            }
            // From the snapshot on: a segment it falls inside is read from the index entry
            // below it, and keeps the `.txnindex` entries of the markers before it.
            let start = if from > *base {
                seg.position_before(from)?
            } else {
                0
            };
            let mut entries = if rebuild && start > 0 {
                let mut kept = seg.txn_index.read().unwrap_or_default();
                kept.retain(|e| e.last_offset < from);
                kept
            } else {
                Vec::new()
            };
            entries.extend(state.replay(&mut seg.reader(start)?, from)?);
            if rebuild {
                seg.txn_index.rewrite(&entries)?;
            }
        }
        state.dirty = true;
        self.producers = state;
        self.last_snapshot = None;
        Ok(())
    }

    /// Writes a producer snapshot at the log end when the open transactions changed, when
    /// the newest one is older than the active segment (so a restart walks at most about
    /// one segment to rebuild them), or with `force` when there is none at the log end. Only
    /// below the recovery point: a snapshot never describes bytes that are not on disk.
    pub fn snapshot_producer_state(&mut self, force: bool) -> Result<()> {
        let leo = self.log_end_offset();
        if leo > self.recovery_point || self.last_snapshot == Some(leo) {
            return Ok(());
        }
        if leo == self.log_start_offset && !self.producers.dirty {
            // An empty log has no state to rebuild: a snapshot would cost each new partition
            // a file and an fsync for nothing.
            return Ok(());
        }
        let stale = self
            .last_snapshot
            .is_none_or(|o| o < self.active().base_offset);
        if self.producers.dirty || stale || force {
            producer_state::write_snapshot(&self.dir, leo, &self.producers)?;
            self.producers.dirty = false;
            self.last_snapshot = Some(leo);
        }
        Ok(())
    }

    /// The follower's high watermark: min(leader's HW, log end), never below the log start,
    /// and — as Kafka's `maybeUpdateHighWatermark` — never lowered by a leader's report (a new
    /// leader's HW can lag; only a truncation lowers it).
    pub fn update_high_watermark(&mut self, leader_hw: i64) {
        let hw = self
            .high_watermark
            .max(leader_hw.min(self.log_end_offset()))
            .max(self.log_start_offset);
        // Every fetch response reports one: only a move counts as a change.
        if hw != self.high_watermark {
            self.high_watermark = hw;
            self.touch(&Pass::ALL);
        }
    }

    /// fsyncs the active segment and its indexes; the recovery point moves to the log end.
    /// Returns the new recovery point.
    pub fn flush(&mut self) -> Result<i64> {
        let leo = self.log_end_offset();
        if self.recovery_point < leo {
            self.active_mut().flush()?;
        }
        if self.recovery_point != leo {
            self.recovery_point = leo;
            self.touch(&[Pass::Checkpoint]);
        }
        Ok(leo)
    }

    /// Starts a flush of everything up to the log end: pending index entries are written,
    /// the active segment's files duplicated. `None` when the recovery point is the log end.
    pub fn begin_flush(&mut self) -> Result<Option<FlushTicket>> {
        let target = self.log_end_offset();
        if self.recovery_point >= target {
            return Ok(None);
        }
        let segment = self.active().base_offset;
        let (files, mark) = self.active_mut().prepare_flush()?;
        Ok(Some(FlushTicket {
            files,
            target,
            generation: self.generation,
            segment,
            mark,
        }))
    }

    /// [`Self::begin_flush`] for a pass that syncs the whole file system once: the ticket
    /// holds no descriptor, and its [`FlushTicket::sync`] does nothing.
    pub fn begin_flush_by_syncfs(&mut self) -> Result<Option<FlushTicket>> {
        let target = self.log_end_offset();
        if self.recovery_point >= target {
            return Ok(None);
        }
        let segment = self.active().base_offset;
        let mark = self.active_mut().prepare_flush_by_syncfs()?;
        Ok(Some(FlushTicket {
            files: Vec::new(),
            target,
            generation: self.generation,
            segment,
            mark,
        }))
    }

    /// Moves the recovery point to what a synced ticket covered, unless a truncation came
    /// in between (then the next flush covers it).
    pub fn finish_flush(&mut self, ticket: FlushTicket) {
        // Whatever happened meanwhile, the writes before the mark are on disk now.
        if let Some(seg) = self.segments.get(&ticket.segment) {
            seg.synced(ticket.mark);
        }
        if ticket.generation == self.generation {
            let rp = self
                .recovery_point
                .max(ticket.target.min(self.log_end_offset()));
            if rp != self.recovery_point {
                self.recovery_point = rp;
                self.touch(&[Pass::Checkpoint]);
            }
        }
    }

    pub fn topic_id(&self) -> Option<Uuid> {
        self.topic_id
    }

    /// Records the topic id on first contact with a leader that reports one.
    pub fn record_topic_id(&mut self, id: Uuid) -> Result<()> {
        // An unreadable file may hold the id of this history: it is never overwritten (the
        // leader's topic could be a re-created one), and the topic check waits for an operator.
        let path = self.dir.join(DataDir::PARTITION_METADATA);
        if path.exists() {
            anyhow::bail!(
                "`{}` is unreadable, so {} cannot be checked against topic id {id}; fix or remove the file (the topic is followed meanwhile)",
                path.display(),
                self.tp
            );
        }
        identity::write_topic_id(&self.dir, id)?;
        self.topic_id = Some(id);
        Ok(())
    }

    /// Ranges recorded as lost upstream (first, last offset), oldest first.
    pub fn lost_upstream(&self) -> &[(i64, i64)] {
        &self.lost
    }

    /// Raises the log start (retention); deletes the segments that lie wholly below it. Never
    /// goes past the high watermark.
    pub fn maybe_increment_log_start_offset(&mut self, new_start: i64) -> Result<()> {
        self.raise_log_start(new_start, &Pass::ALL)
    }

    /// [`Self::maybe_increment_log_start_offset`], a move reported to `passes`.
    fn raise_log_start(&mut self, new_start: i64, passes: &[Pass]) -> Result<()> {
        let new_start = new_start.min(self.high_watermark);
        if new_start <= self.log_start_offset {
            return Ok(());
        }
        self.log_start_offset = new_start;
        self.touch(passes);
        self.epochs.truncate_from_start(new_start);
        note_position_moved();
        self.delete_segments_below(new_start)
    }

    /// Deletes segments whose successor's base is ≤ `offset` (their every batch is below it).
    fn delete_segments_below(&mut self, offset: i64) -> Result<()> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let mut deleted = 0;
        for pair in bases.windows(2) {
            if let [b, next] = pair
                && *next <= offset
                && let Some(seg) = self.segments.remove(b)
            {
                seg.delete()?;
                deleted += 1;
            }
        }
        if deleted > 0 {
            fsync_dir(&self.dir)?;
            crate::log_info!(
                "{}: deleted {} below offset {offset}",
                self.tp,
                crate::logging::count(deleted, "segment", "segments")
            );
        }
        Ok(())
    }

    /// Applies `retention_bytes` and `retention_ms`: deletes the oldest inactive segments and
    /// moves the log start to the first segment kept.
    pub fn apply_retention(&mut self, now: i64) -> Result<()> {
        self.apply_retention_below(now, i64::MAX)
    }

    /// [`Self::apply_retention`], deleting only segments that end at or below `floor` (those
    /// another copy holds).
    pub fn apply_retention_below(&mut self, now: i64, floor: i64) -> Result<()> {
        let mut size = self.size_bytes() as i64;
        let mut new_start = None;
        let count = self.segments.len();
        for (i, (_, seg)) in self.segments.iter().enumerate() {
            if i + 1 == count {
                break;
            }
            let by_size = self.config.retention_bytes >= 0
                && size - seg.size() as i64 >= self.config.retention_bytes;
            let by_time = self.config.retention_ms >= 0
                && seg.max_timestamp() >= 0
                && now - seg.max_timestamp() > self.config.retention_ms;
            if !(by_size || by_time) || seg.next_offset() > floor {
                break;
            }
            size -= seg.size() as i64;
            new_start = Some(seg.next_offset());
        }
        if let Some(s) = new_start
            && s.min(self.high_watermark) > self.log_start_offset
        {
            crate::log_info!(
                "{}: retention moves the log start to {}",
                self.tp,
                s.min(self.high_watermark)
            );
            // The retention pass applying this has seen what it cut.
            self.raise_log_start(s, &[Pass::Checkpoint])?;
        }
        Ok(())
    }

    /// Writes `leader-epoch-checkpoint` if the cache changed. Call after a flush.
    pub fn checkpoint_epochs(&mut self) -> Result<()> {
        if self.epochs.dirty {
            checkpoint::write_epochs(&self.dir.join(DataDir::LEADER_EPOCH), self.epochs.entries())?;
            self.epochs.dirty = false;
        }
        Ok(())
    }

    /// [`Self::checkpoint_epochs`] in two steps around a file-system sync: writes the new
    /// `leader-epoch-checkpoint` to its temporary file, unsynced, and returns what
    /// [`Self::commit_epochs`] needs (`None` when the cache did not change). The cache stays
    /// dirty until the file is in place, so any other writer of it still writes it.
    pub fn stage_epochs(&mut self) -> Result<Option<StagedEpochs>> {
        if !self.epochs.dirty {
            return Ok(None);
        }
        let path = self.dir.join(DataDir::LEADER_EPOCH);
        let entries = self.epochs.entries().to_vec();
        let tmp = checkpoint::stage_unsynced(&path, &checkpoint::render_epochs(&entries))?;
        Ok(Some(StagedEpochs {
            tmp,
            generation: self.generation,
            entries,
        }))
    }

    /// Renames a staged epoch checkpoint into place after the file system was synced; the
    /// cache is clean when it still holds what was staged. A truncation since (a new
    /// generation) makes the staged file stale: it goes, and the cache as it is now is
    /// written at once, fsynced, as a truncation writes it. Returns whether a file changed
    /// that the caller's next file-system sync is to make durable.
    pub fn commit_epochs(&mut self, staged: StagedEpochs) -> Result<bool> {
        if staged.generation != self.generation {
            let _ = std::fs::remove_file(&staged.tmp);
            self.checkpoint_epochs()?;
            return Ok(false);
        }
        let path = self.dir.join(DataDir::LEADER_EPOCH);
        checkpoint::commit_staged(&staged.tmp, &path)?;
        if self.epochs.entries() == staged.entries.as_slice() {
            self.epochs.dirty = false;
        }
        Ok(true)
    }

    /// The end offset of `epoch` in this log, as OffsetForLeaderEpoch would answer.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Reads the raw bytes of every segment in order (tests and inspection).
    #[cfg(test)]
    pub(crate) fn read_all(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for seg in self.segments.values() {
            out.extend_from_slice(&seg.read_at(0, seg.size() as usize)?);
        }
        Ok(out)
    }
}

/// Counts moves of any log's start, or of its epochs other than by an append: what a
/// fetcher sends for a partition (its log start and last epoch) may have changed without the
/// fetcher changing it (retention runs on the checkpoint task), so a fetcher that sees this
/// move looks at every partition once instead of only those it changed.
static POSITION_MOVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn note_position_moved() {
    POSITION_MOVES.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// See [`POSITION_MOVES`].
pub fn position_moves() -> u64 {
    POSITION_MOVES.load(std::sync::atomic::Ordering::Acquire)
}

/// Base offsets of the `.log` files in a partition directory, sorted.
pub fn list_segment_bases(dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("failed to list `{}`", dir.display()))? {
        let entry = entry.with_context(|| format!("failed to list `{}`", dir.display()))?;
        if let Some(b) = entry
            .file_name()
            .to_str()
            .and_then(|n| segment::parse_base_offset(n, "log"))
        {
            bases.push(b);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// (device, inode) of a directory, when it can be read.
pub(super) fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}
