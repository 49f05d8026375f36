//! One segment: `<base>.log` with its `.index` and `.timeindex`.
//!
//! The `.log` holds record batches exactly as the leader sent them, back to back. The
//! segment is named by its base offset in 20 zero-padded digits; every batch in it ends at or
//! after the base offset (a follower that starts mid-batch keeps that whole batch).
//!
//! Crash policy: bytes past the last fsync may be lost or torn. [`Segment::recover`] walks the
//! log, verifies every batch's length and CRC, truncates at the first bad or partial batch and
//! rebuilds both indexes. Who touches it: only its [`crate::log::partition::PartitionLog`], under the
//! partition's lock.

use super::offset_index::OffsetIndex;
use super::segment_reader::SegmentReader;
use super::time_index::TimeIndex;
use super::txn_index::TxnIndex;
use crate::fault::{self, Step};
use crate::log::resources::open_files::{self, SegmentFile, SyncMark};
use crate::record::{BatchHeader, SetEnd};
use anyhow::{Context, Result, bail};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest tail recovery cuts as a torn write without keeping it aside: a crash tears at
/// most the batch being appended (Kafka's default `max.message.bytes` is 1 MiB).
pub const TORN_TAIL_MAX: u64 = 1 << 20;

pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// The files of one segment, by suffix.
pub const SEGMENT_FILES: [&str; 4] = ["log", "index", "timeindex", "txnindex"];

/// Deletes the `.log`, `.index`, `.timeindex` and `.txnindex` of the segment at `base`
/// (missing ones are fine).
pub fn delete_files(dir: &Path, base: i64) -> Result<()> {
    for suffix in SEGMENT_FILES {
        let p = dir.join(file_name(base, suffix));
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("failed to delete `{}`", p.display())),
        }
    }
    Ok(())
}

/// Renames the files of the segment at `base` to `<name>.<suffix>`, out of the log but kept;
/// returns the new path of its `.log`.
pub fn set_aside(dir: &Path, base: i64, suffix: &str) -> Result<PathBuf> {
    // One suffix for all the segment's files, free for every one of them.
    let mut suffix = suffix.to_string();
    let mut n = 2;
    while SEGMENT_FILES.iter().any(|k| {
        dir.join(format!("{}.{suffix}", file_name(base, k)))
            .exists()
    }) {
        suffix = format!("{}.{n}", suffix.split('.').next().unwrap_or("aside"));
        n += 1;
    }
    let mut log_target = dir.join(format!("{}.{suffix}", file_name(base, "log")));
    for kind in SEGMENT_FILES {
        let from = dir.join(file_name(base, kind));
        let to = dir.join(format!("{}.{suffix}", file_name(base, kind)));
        match fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "failed to rename `{}` to `{}`",
                        from.display(),
                        to.display()
                    )
                });
            }
        }
        if kind == "log" {
            log_target = to;
        }
    }
    crate::checkpoint::fsync_dir(dir)?;
    Ok(log_target)
}

/// A descriptor to fsync outside the partition lock, and the file's path for messages.
pub type FileToSync = (Arc<File>, PathBuf);

/// Parses `00000000000000000123.log` into 123.
pub fn parse_base_offset(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[derive(Debug)]
pub struct Segment {
    pub base_offset: i64,
    log_path: PathBuf,
    /// Kept open while the segment is active (or being recovered), within the process's
    /// budget of open segment files ([`open_files`]); an inactive segment's file is closed.
    /// Either is reopened on demand, so descriptors grow with neither partitions nor segments.
    log: SegmentFile,
    /// Bytes of whole batches in the log. Invariant: equals the file length after every call.
    size: u64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    pub txn_index: TxnIndex,
    bytes_since_last_index_entry: u64,
    /// Largest batch max-timestamp in the segment and the last offset of that batch.
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// Last offset + 1 of the last batch; the base offset when empty.
    next_offset: i64,
    /// When this process created or opened the segment (ms since epoch), for `segment_ms`.
    pub created_ms: i64,
    index_interval_bytes: u64,
    /// Whether a crash can have torn this segment's tail: only the segment that was active
    /// (rolled segments were fsynced whole before the next one began).
    may_be_torn: bool,
}

/// What recovery found in one segment.
/// Where a segment ended at one moment, to put it back there after a failed write.
#[derive(Debug, Clone, Copy)]
pub struct SegmentMark {
    size: u64,
    next_offset: i64,
    index_entries: usize,
    time_entries: usize,
    bytes_since_last_index_entry: u64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryResult {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
    pub batches: usize,
    /// Why the tail was cut, if it was.
    pub reason: Option<String>,
    /// (epoch, base offset) of each batch, for rebuilding the leader-epoch cache.
    pub epochs: Vec<(i32, i64)>,
    /// The first offset scanned, when the scan began after the segment's durable part
    /// rather than at its start (see [`Segment::open_recovering_from`]).
    pub resumed_at: Option<i64>,
}

impl Segment {
    fn paths(dir: &Path, base: i64) -> (PathBuf, PathBuf, PathBuf) {
        (
            dir.join(file_name(base, "log")),
            dir.join(file_name(base, "index")),
            dir.join(file_name(base, "timeindex")),
        )
    }

    /// Creates a new empty segment (files truncated if they exist). When any of its files
    /// cannot be made, those already made are removed again before the error is reported: a
    /// segment exists whole or not at all.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<Self> {
        Self::create_files(dir, base_offset, index_interval_bytes, now_ms).inspect_err(|_| {
            if let Err(e) = delete_files(dir, base_offset) {
                crate::log_error!(
                    "{e:#}; the half-made segment at {base_offset} is removed at the next start"
                );
            }
        })
    }

    fn create_files(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<Self> {
        let (lp, ip, tp) = Self::paths(dir, base_offset);
        let log = SegmentFile::create(open_files::shared(), &lp)?;
        let offset_index = OffsetIndex::create(&ip, base_offset)?;
        if let Some(e) = fault::hit(Step::Roll) {
            return Err(e).with_context(|| format!("failed to create `{}`", tp.display()));
        }
        let time_index = TimeIndex::create(&tp, base_offset)?;
        Ok(Segment {
            base_offset,
            log_path: lp,
            log,
            size: 0,
            offset_index,
            time_index,
            txn_index: {
                // A new segment has no aborted transactions, whatever a stale file says.
                let mut t = TxnIndex::new(dir.join(file_name(base_offset, "txnindex")));
                t.rewrite(&[])?;
                t
            },
            bytes_since_last_index_entry: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            next_offset: base_offset,
            created_ms: now_ms,
            index_interval_bytes,
            may_be_torn: true,
        })
    }

    /// Opens an existing segment. Its indexes are loaded and sanity-checked (`resident`: in
    /// full, for the active segment; otherwise only their last entries, the rest staying on
    /// disk); if that fails, or `recover` is set, the segment is recovered (scanned,
    /// truncated, indexes rebuilt) and the result returned.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        now_ms: i64,
        recover: bool,
        resident: bool,
    ) -> Result<(Self, Option<RecoveryResult>)> {
        Self::open_inner(
            dir,
            base_offset,
            index_interval_bytes,
            now_ms,
            recover,
            resident,
            true,
        )
    }

    /// [`Self::open`]; `rescan` checks the tail past the last index entry (a trusted open).
    fn open_inner(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        now_ms: i64,
        recover: bool,
        resident: bool,
        rescan: bool,
    ) -> Result<(Self, Option<RecoveryResult>)> {
        let (lp, ip, tp) = Self::paths(dir, base_offset);
        let (log, size) = SegmentFile::open(open_files::shared(), &lp)?;
        let indexes = if recover {
            None
        } else {
            let loaded = if resident {
                (
                    OffsetIndex::load(&ip, base_offset, size),
                    TimeIndex::load(&tp, base_offset),
                )
            } else {
                (
                    OffsetIndex::open_evicted(&ip, base_offset, size),
                    TimeIndex::open_evicted(&tp, base_offset),
                )
            };
            match loaded {
                (Ok(o), Ok(t)) => Some((o, t)),
                (o, t) => {
                    if let Err(e) = o.and(t.map(|_| ())) {
                        crate::log_warn!("{e:#}; rebuilding the indexes of `{}`", lp.display());
                    }
                    None
                }
            }
        };
        let recover = indexes.is_none();
        let (offset_index, time_index) = match indexes {
            Some(pair) => pair,
            None => (
                OffsetIndex::create(&ip, base_offset)?,
                TimeIndex::create(&tp, base_offset)?,
            ),
        };
        let mut seg = Segment {
            base_offset,
            log_path: lp,
            log,
            size,
            offset_index,
            time_index,
            txn_index: TxnIndex::new(dir.join(file_name(base_offset, "txnindex"))),
            bytes_since_last_index_entry: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            next_offset: base_offset,
            created_ms: now_ms,
            index_interval_bytes,
            may_be_torn: resident,
        };
        if recover {
            let r = seg.recover()?;
            return Ok((seg, Some(r)));
        }
        if !rescan {
            return Ok((seg, None));
        }
        if let Some(bad_at) = seg.rescan_tail()? {
            crate::log_warn!(
                "segment `{}` has a bad batch at byte {bad_at} below the recovery point; recovering it",
                seg.log_path.display()
            );
            let r = seg.recover()?;
            return Ok((seg, Some(r)));
        }
        Ok((seg, None))
    }

    /// Rebuilds the in-memory tail state (next offset, bytes since the last index entry,
    /// largest timestamp) by scanning from the last index entry to the end of the log.
    /// Returns the byte position of a bad or partial batch if the scan met one.
    fn rescan_tail(&mut self) -> Result<Option<u64>> {
        let (_, from) = self
            .offset_index
            .last_entry()
            .unwrap_or((self.base_offset, 0));
        let from = u64::from(from);
        let mut reader = self.reader(from)?;
        self.next_offset = self.base_offset;
        // Every batch from the last entry's position on counts, that batch included.
        self.bytes_since_last_index_entry = 0;
        match self.time_index.last_entry() {
            Some((t, o)) => {
                self.max_timestamp = t;
                self.offset_of_max_timestamp = o;
            }
            None => {
                self.max_timestamp = -1;
                self.offset_of_max_timestamp = self.base_offset;
            }
        }
        while let Some((h, _)) = reader.next_batch()? {
            self.bytes_since_last_index_entry += h.size_in_bytes as u64;
            self.next_offset = h.last_offset + 1;
            if h.max_timestamp > self.max_timestamp {
                self.max_timestamp = h.max_timestamp;
                self.offset_of_max_timestamp = h.last_offset;
            }
        }
        match reader.end() {
            Some(SetEnd::Partial { .. } | SetEnd::Corrupt { .. }) => Ok(Some(reader.position())),
            _ => Ok(None),
        }
    }

    /// Opens the segment that holds the recovery point `durable_below` after an unclean
    /// shutdown, and recovers only what lies past it: everything below the recovery point was
    /// fsynced (batches and index entries), so the scan resumes at the last offset-index
    /// entry below it — checked against the batch it names — instead of at byte 0. Recovery
    /// after a crash then costs the unflushed tail, not the segment. Without such an entry
    /// (or when the indexes do not load), the whole segment is recovered.
    pub fn open_recovering_from(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u64,
        now_ms: i64,
        durable_below: i64,
        resident: bool,
    ) -> Result<(Self, Option<RecoveryResult>)> {
        let (mut seg, r) = Self::open_inner(
            dir,
            base_offset,
            index_interval_bytes,
            now_ms,
            false,
            resident,
            false,
        )?;
        if r.is_some() {
            return Ok((seg, r));
        }
        seg.may_be_torn = true;
        let r = seg.recover_tail(durable_below)?;
        Ok((seg, Some(r)))
    }

    /// See [`Self::open_recovering_from`].
    fn recover_tail(&mut self, durable_below: i64) -> Result<RecoveryResult> {
        self.make_indexes_resident()?;
        let (entry_offset, pos) = self.offset_index.lookup(durable_below.saturating_sub(1));
        let pos = u64::from(pos);
        let mut first = None;
        if pos > 0 && entry_offset < durable_below && pos < self.size {
            self.for_each_batch(pos, |h, _| {
                first = Some(*h);
                Ok(false)
            })?;
        }
        let Some(first) = first.filter(|h| h.last_offset == entry_offset) else {
            return self.recover();
        };
        // The indexes as they were once the batch at `pos` was indexed: its entries, none
        // after; the tail state follows from them.
        self.offset_index.truncate(entry_offset + 1, u64::MAX)?;
        self.time_index.truncate(entry_offset + 1)?;
        (self.max_timestamp, self.offset_of_max_timestamp) = self
            .time_index
            .last_entry()
            .unwrap_or((-1, self.base_offset));
        self.bytes_since_last_index_entry = first.size_in_bytes as u64;
        self.next_offset = entry_offset + 1;
        let mut r = self.scan_from(pos + first.size_in_bytes as u64, Some(entry_offset))?;
        r.resumed_at = Some(entry_offset + 1);
        Ok(r)
    }

    /// Scans the whole log: verifies every batch (length, magic, CRC, offsets increasing),
    /// truncates at the first bad or partial batch, and rebuilds both indexes.
    pub fn recover(&mut self) -> Result<RecoveryResult> {
        self.offset_index.clear()?;
        self.time_index.truncate(i64::MIN)?;
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = self.base_offset;
        self.next_offset = self.base_offset;
        self.scan_from(0, None)
    }

    /// The scan of [`Self::recover`] from byte `from` (a batch boundary), after a batch
    /// ending at `last_offset`.
    fn scan_from(&mut self, from: u64, mut last_offset: Option<i64>) -> Result<RecoveryResult> {
        let mut reader = self.reader(from)?;
        let mut batches = 0;
        let mut reason = None;
        let mut epochs = Vec::new();
        // A read that fails is the disk's fault, not a torn write: the error is returned and
        // nothing is cut.
        while let Some((h, valid)) = reader.next_batch()? {
            if let Err(e) = reader.check_crc()? {
                reason = Some(format!("{e} at byte {valid}"));
                break;
            }
            if let Err(e) = crate::record::check_follows(last_offset, &h) {
                reason = Some(format!("batch at byte {valid}: {e}"));
                break;
            }
            if h.last_offset < self.base_offset {
                reason = Some(format!(
                    "batch at byte {valid} ends at offset {}, below the segment base {}",
                    h.last_offset, self.base_offset
                ));
                break;
            }
            self.index_batch(&h, valid)?;
            if h.partition_leader_epoch >= 0 {
                epochs.push((h.partition_leader_epoch, h.base_offset));
            }
            last_offset = Some(h.last_offset);
            self.next_offset = h.last_offset + 1;
            batches += 1;
        }
        let valid = reader.position();
        // A partial batch at the end, as a crash mid-append leaves one: fewer bytes than a
        // header's first 17, or fewer than the size field announces.
        let mut torn = false;
        if reason.is_none() {
            let present = self.size - valid;
            match reader.end() {
                Some(_) if present > 0 && present < 17 => {
                    reason = Some(format!("partial batch header at byte {valid}"));
                    torn = true;
                }
                Some(SetEnd::Partial { .. }) => {
                    let needed = reader.announced_size().unwrap_or(present);
                    reason = Some(format!(
                        "partial batch at byte {valid}: {needed} bytes announced, {present} present"
                    ));
                    torn = true;
                }
                Some(SetEnd::Corrupt { reason: why, .. }) => {
                    let e = crate::record::BatchError::Corrupt(why.clone());
                    reason = Some(format!("{e} at byte {valid}"));
                }
                _ => {}
            }
        }
        let truncated = self.size - valid;
        // A crash tears at most the batch being written, and only in the segment that was
        // active. Anything else cut here — a bad CRC or header, offsets out of order, more than
        // one batch's worth after a "partial" one (a damaged size field), a short rolled
        // segment — may be intact data behind the damage: its bytes are kept aside in
        // `damaged/` before the segment is cut, never just dropped.
        if truncated > 0 && !(torn && self.may_be_torn && truncated <= TORN_TAIL_MAX) {
            let dir = self.log_path.parent().unwrap_or(Path::new("."));
            let kept = super::diverged::keep_damaged_tail(dir, &self.log_path, valid, truncated)?;
            crate::log_error!(
                "`{}`: {} bytes after byte {valid} cannot be read as batches ({}); kept in `{}` before the segment is cut there",
                self.log_path.display(),
                truncated,
                reason.as_deref().unwrap_or("damage"),
                kept.display()
            );
        }
        if truncated > 0 {
            self.file_for_write()?
                .set_len(valid)
                .with_context(|| format!("failed to truncate `{}`", self.log_path.display()))?;
            self.size = valid;
        }
        Ok(RecoveryResult {
            valid_bytes: valid,
            truncated_bytes: truncated,
            batches,
            reason,
            epochs,
            resumed_at: None,
        })
    }

    fn index_batch(&mut self, h: &BatchHeader, position: u64) -> Result<()> {
        let Ok(position) = u32::try_from(position) else {
            bail!(
                "segment `{}`: a batch at byte {position} is past 4 GiB, beyond what its index can point at",
                self.log_path.display()
            );
        };
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.last_offset;
        }
        if self.bytes_since_last_index_entry > self.index_interval_bytes {
            self.offset_index.append(h.last_offset, position)?;
            self.time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += h.size_in_bytes as u64;
        Ok(())
    }

    /// Appends whole, verified batches (`bytes` is exactly the concatenation of `headers`) in
    /// one write, and indexes them.
    pub fn append(&mut self, bytes: &[u8], headers: &[BatchHeader]) -> Result<()> {
        let Some(last) = headers.last() else {
            return Ok(());
        };
        self.make_indexes_resident()?;
        if self.size + bytes.len() as u64 > u64::from(u32::MAX) {
            bail!("segment `{}` would pass 4 GiB", self.log_path.display());
        }
        let mark = self.mark();
        // Held to the end of the append, the rollback included: the descriptor stays open.
        let file = self.file_for_write()?;
        let written =
            fault::write_all_at(Step::Append, &file, bytes, mark.size).with_context(|| {
                format!(
                    "failed to append {} bytes to `{}`",
                    bytes.len(),
                    self.log_path.display()
                )
            });
        let indexed = written.and_then(|()| {
            let mut pos = mark.size;
            for h in headers {
                self.index_batch(h, pos)?;
                pos += h.size_in_bytes as u64;
            }
            Ok(())
        });
        if let Err(e) = indexed {
            // A write that failed part-way (ENOSPC, EIO) may have left part of a batch: the
            // file is cut back to its last whole batch before the error is reported, so no
            // reader ever sees torn bytes.
            self.rollback(mark);
            return Err(e);
        }
        self.size += bytes.len() as u64;
        self.next_offset = last.last_offset + 1;
        Ok(())
    }

    /// Where the segment ends now, for [`Self::rollback`].
    pub fn mark(&self) -> SegmentMark {
        SegmentMark {
            size: self.size,
            next_offset: self.next_offset,
            index_entries: self.offset_index.entries(),
            time_entries: self.time_index.entries(),
            bytes_since_last_index_entry: self.bytes_since_last_index_entry,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: self.offset_of_max_timestamp,
        }
    }

    /// Puts the segment back where `mark` was taken, in memory and on disk: the file is cut
    /// to the end of its last whole batch then, the indexes to their entries then. A cut that
    /// fails is logged (recovery cuts the bytes at the next start) and the segment's size
    /// stays the mark's, so nothing past it is ever read.
    pub fn rollback(&mut self, mark: SegmentMark) {
        let path = self.log_path.clone();
        let cut = self.file_for_write().and_then(|f| {
            f.set_len(mark.size)
                .with_context(|| format!("failed to cut `{}` back", path.display()))
        });
        if let Err(ce) = cut {
            crate::log_error!(
                "{ce:#}: bytes past {} are not whole batches; recovery cuts them at the next start",
                mark.size
            );
        }
        self.offset_index.truncate_entries(mark.index_entries);
        self.time_index.truncate_entries(mark.time_entries);
        self.size = mark.size;
        self.next_offset = mark.next_offset;
        self.bytes_since_last_index_entry = mark.bytes_since_last_index_entry;
        self.max_timestamp = mark.max_timestamp;
        self.offset_of_max_timestamp = mark.offset_of_max_timestamp;
    }

    /// Writes pending index entries and fsyncs the log and both indexes.
    pub fn flush(&mut self) -> Result<()> {
        // Reopened if it was closed: a file closed to make room was fsynced then, but that
        // fsync may still be running in the thread that closed it, and only a finished fsync
        // may move the recovery point.
        let f = self.file()?;
        let mark = self.log.begin_sync();
        if let Err(e) = f.sync_data() {
            crate::log::halt_on_fsync_error(&self.log_path, &e);
        }
        self.log.synced(mark);
        self.txn_index.flush()?;
        self.offset_index.flush(true)?;
        self.time_index.flush(true)
    }

    /// Writes pending index entries (without fsync) and returns descriptors of the log and
    /// both indexes, to be fsynced by the caller outside the partition lock, and the mark to
    /// give [`Self::synced`] once they are. The log's descriptor is the cached one, held (so
    /// not closed) until the caller drops it.
    pub fn prepare_flush(&mut self) -> Result<(Vec<FileToSync>, SyncMark)> {
        self.offset_index.flush(false)?;
        self.time_index.flush(false)?;
        let log = self.file()?;
        let mut files = vec![(log, self.log_path.clone())];
        if let Some(t) = self.txn_index.take_dirty()? {
            files.push((Arc::new(t), self.txn_index.path().to_path_buf()));
        }
        for p in [self.offset_index.path(), self.time_index.path()] {
            let f = File::open(p).with_context(|| format!("failed to open `{}`", p.display()))?;
            files.push((Arc::new(f), p.to_path_buf()));
        }
        Ok((files, self.log.begin_sync()))
    }

    /// [`Self::prepare_flush`] for a flush that one file-system sync covers: pending index
    /// entries are written, no descriptor is taken (a pass over thousands of logs holds none).
    /// The transaction index stays marked for an fsync: another flush running before the
    /// sync ends must not take it for durable.
    pub fn prepare_flush_by_syncfs(&mut self) -> Result<SyncMark> {
        self.offset_index.flush(false)?;
        self.time_index.flush(false)?;
        Ok(self.log.begin_sync())
    }

    /// The fsync of a [`Self::prepare_flush`] that returned `mark` has succeeded.
    pub fn synced(&self, mark: SyncMark) {
        self.log.synced(mark);
    }

    /// Where a cut at `offset` falls: the byte position and header of the first batch whose
    /// last offset is ≥ `offset` (`None` when every batch ends before it). Walks headers from
    /// the offset index's entry below it, so memory stays flat.
    pub fn cut_point(&mut self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        self.make_indexes_resident()?;
        let (entry_offset, start) = self.offset_index.lookup(offset.saturating_sub(1));
        let mut start = u64::from(start).min(self.size);
        // Indexes carry no checksum: an entry is trusted only when the batch at its position
        // ends at its offset; otherwise the segment's indexes are rebuilt from its batches.
        if start > 0 && !self.batch_at_ends_at(start, entry_offset)? {
            crate::log_warn!(
                "`{}`: offset index entry for offset {entry_offset} points at byte {start}, where no batch ending at that offset starts; rebuilding the indexes",
                self.log_path.display()
            );
            self.recover()?;
            let (_, rebuilt) = self.offset_index.lookup(offset.saturating_sub(1));
            start = u64::from(rebuilt).min(self.size);
        }
        let mut found = None;
        self.for_each_batch(start, |h, pos| {
            if h.last_offset >= offset {
                found = Some((pos, *h));
                return Ok(false);
            }
            Ok(true)
        })?;
        Ok(found)
    }

    /// Whether a batch whose last offset is `last` starts at byte `pos`.
    fn batch_at_ends_at(&self, pos: u64, last: i64) -> Result<bool> {
        let mut ok = false;
        self.for_each_batch(pos, |h, _| {
            ok = h.last_offset == last;
            Ok(false)
        })?;
        Ok(ok)
    }

    /// The byte position of a batch that ends before `offset`, at or after every other such
    /// batch the offset index knows of: where a reader looking for `offset` may start (0 when
    /// no checked entry helps).
    pub fn position_before(&mut self, offset: i64) -> Result<u64> {
        self.make_indexes_resident()?;
        let (entry_offset, pos) = self.offset_index.lookup(offset.saturating_sub(1));
        let pos = u64::from(pos);
        if pos == 0 || entry_offset >= offset || !self.batch_at_ends_at(pos, entry_offset)? {
            return Ok(0);
        }
        Ok(pos)
    }

    /// The header of the first batch, if the segment holds one.
    pub fn first_batch(&self) -> Result<Option<BatchHeader>> {
        let mut first = None;
        self.for_each_batch(0, |h, _| {
            first = Some(*h);
            Ok(false)
        })?;
        Ok(first)
    }

    /// Removes every batch whose last offset is ≥ `offset`: cuts at the first such batch.
    /// Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        let Some((cut, _)) = self.cut_point(offset)? else {
            return Ok(0);
        };
        let removed = self.size - cut;
        self.file_for_write()?
            .set_len(cut)
            .with_context(|| format!("failed to truncate `{}`", self.log_path.display()))?;
        self.size = cut;
        self.offset_index.truncate(offset, cut)?;
        self.txn_index.truncate_to(offset)?;
        self.time_index.truncate(offset)?;
        self.rescan_tail()?;
        Ok(removed)
    }

    /// Calls `f` with the header and byte position of every whole batch from byte `from` on,
    /// until it returns `false`, reading only headers (memory does not grow with the segment).
    /// Stops at the first batch that is not whole or whose header does not parse.
    pub fn for_each_batch(
        &self,
        from: u64,
        mut f: impl FnMut(&BatchHeader, u64) -> Result<bool>,
    ) -> Result<()> {
        let mut reader = self.reader(from)?;
        while let Some((h, pos)) = reader.next_batch()? {
            if !f(&h, pos)? {
                break;
            }
        }
        Ok(())
    }

    /// A streaming reader of the segment's batches from byte `from` (a batch start) to its end.
    pub fn reader(&self, from: u64) -> Result<SegmentReader> {
        let file = match self.log.peek() {
            Some(f) => f.try_clone(),
            None => File::open(&self.log_path),
        }
        .with_context(|| format!("failed to open `{}`", self.log_path.display()))?;
        Ok(SegmentReader::new(file, &self.log_path, from, self.size))
    }

    /// Reads `len` bytes at `pos` (tests; everything else streams through [`Self::reader`]).
    #[cfg(test)]
    pub(crate) fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        let read = match self.log.peek() {
            Some(f) => f.read_exact_at(&mut buf, pos),
            None => File::open(&self.log_path).and_then(|f| f.read_exact_at(&mut buf, pos)),
        };
        read.with_context(|| {
            format!(
                "failed to read {len} bytes at {pos} of `{}`",
                self.log_path.display()
            )
        })?;
        Ok(buf)
    }

    /// Deletes the segment's three files.
    pub fn delete(self) -> Result<()> {
        let (dir, base) = (
            self.log_path.parent().map(Path::to_path_buf),
            self.base_offset,
        );
        drop(self);
        match dir {
            Some(d) => delete_files(&d, base),
            None => Ok(()),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    /// The log file, reopened if it was closed (and then checked: the same inode, exactly
    /// [`Self::size`] bytes long). Hold it only for the call at hand.
    fn file(&mut self) -> Result<Arc<File>> {
        self.log.get(self.size)
    }

    /// [`Self::file`] for a write (or a cut): the file counts as unsynced until a flush.
    fn file_for_write(&mut self) -> Result<Arc<File>> {
        self.log.get_for_write(self.size)
    }

    /// Whether the file at the segment's path is still the one this segment writes (open or
    /// not): bytes written to a file someone unlinked would be lost without an error.
    pub fn file_is_current(&self) -> bool {
        self.log.is_current()
    }

    /// Whether the segment's file is still the one this segment writes: there, the same
    /// inode as the open descriptor, writable, and exactly as long as its whole batches. Bytes
    /// past them (a write that failed part-way and could not be cut back then) are cut off.
    pub fn check_file(&mut self) -> Result<()> {
        let path = self.log_path.clone();
        let on_disk =
            fs::metadata(&path).with_context(|| format!("segment `{}` is gone", path.display()))?;
        if open_files::FileId::of(&on_disk) != self.log.identity() {
            bail!(
                "segment `{}` was removed or replaced under the daemon",
                path.display()
            );
        }
        let f = OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("segment `{}` cannot be written", path.display()))?;
        match on_disk.len().cmp(&self.size) {
            std::cmp::Ordering::Greater => f.set_len(self.size).with_context(|| {
                format!(
                    "failed to cut `{}` back to {} bytes",
                    path.display(),
                    self.size
                )
            }),
            std::cmp::Ordering::Less => bail!(
                "segment `{}` holds {} bytes, fewer than the {} of its batches",
                path.display(),
                on_disk.len(),
                self.size
            ),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }

    /// For a segment that is no longer active, after [`Self::flush`]: closes its log file and
    /// evicts its indexes from memory (their entries are all on disk).
    pub fn close_file(&mut self) {
        self.may_be_torn = false;
        self.log.close();
        self.offset_index.evict();
        self.time_index.evict();
    }

    /// Reads evicted indexes back before they are looked up or changed; an index that fails
    /// its check then is rebuilt from the log.
    /// Returns whether the segment had to be recovered to get there.
    pub fn make_indexes_resident(&mut self) -> Result<bool> {
        let loaded = self
            .offset_index
            .make_resident(self.size)
            .and_then(|_| self.time_index.make_resident());
        if let Err(e) = loaded {
            crate::log_warn!(
                "{e:#}; rebuilding the indexes of `{}`",
                self.log_path.display()
            );
            self.recover()?;
            return Ok(true);
        }
        Ok(false)
    }
    /// Appends a final time-index entry for the segment's largest timestamp when it becomes
    /// inactive (Kafka does the same on roll), so time lookups see the whole segment.
    pub fn on_become_inactive(&mut self) -> Result<()> {
        self.make_indexes_resident()?;
        self.time_index
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
    }
}

/// Writes `bytes` to a file at the end; used only by tests that tear segment files.
#[cfg(test)]
pub(crate) fn append_raw(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = OpenOptions::new().append(true).open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::segment_reader::MAX_BATCH_SIZE;
    use crate::record::BatchIter;
    use crate::record::records::{NewRecord, build_v2_batch};

    fn batch(base: i64, n: usize, ts: i64) -> (Vec<u8>, BatchHeader) {
        let v = vec![b'x'; 100];
        let recs: Vec<NewRecord<'_>> = (0..n)
            .map(|i| NewRecord {
                key: None,
                value: Some(&v),
                timestamp: ts + i as i64,
            })
            .collect();
        let b = build_v2_batch(base, 1, &recs);
        let h = BatchHeader::parse(&b, MAX_BATCH_SIZE).unwrap();
        (b, h)
    }

    fn fill(seg: &mut Segment, batches: usize) -> Vec<u8> {
        let mut all = Vec::new();
        for i in 0..batches {
            let (b, h) = batch(seg.next_offset(), 10, 1000 + i as i64);
            seg.append(&b, &[h]).unwrap();
            all.extend_from_slice(&b);
        }
        all
    }

    /// Runs `f` in a directory on a tmpfs of `size` bytes, or says why it cannot (the mount
    /// needs root).
    fn on_small_tmpfs(size: usize, f: impl FnOnce(&Path)) {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
            return;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(dir.path())));
        let _ = std::process::Command::new("umount")
            .arg(dir.path())
            .status();
        if let Err(p) = r {
            std::panic::resume_unwind(p);
        }
    }

    #[test]
    fn a_full_disk_never_leaves_a_torn_batch_in_the_segment() {
        on_small_tmpfs(256 << 10, |dir| {
            let mut seg = Segment::create(dir, 0, 4096, 0).unwrap();
            let mut failures = 0;
            let mut whole = Vec::new();
            for i in 0..400 {
                let (b, h) = batch(seg.next_offset(), 10, 1000 + i);
                match seg.append(&b, &[h]) {
                    Ok(()) => whole.extend_from_slice(&b),
                    Err(e) => {
                        failures += 1;
                        assert!(format!("{e:#}").contains("failed to append"), "{e:#}");
                        // Nothing torn: the file is exactly the whole batches written so far.
                        let on_disk = fs::read(seg.log_path()).unwrap();
                        assert_eq!(on_disk.len() as u64, seg.size());
                        assert_eq!(on_disk, whole, "after failure {failures}");
                    }
                }
            }
            assert!(failures > 0, "the tmpfs never filled up");
            let mut it = BatchIter::new(&whole, MAX_BATCH_SIZE);
            assert_eq!(it.by_ref().count() as u64 * 10, seg.next_offset() as u64);
            assert_eq!(it.end(), Some(&SetEnd::Complete));
        });
    }

    #[test]
    fn an_evicted_segment_reopens_and_appends_where_it_ended() {
        let dir = tempfile::tempdir().unwrap();
        let (da, db) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir(&da).unwrap();
        fs::create_dir(&db).unwrap();
        // One descriptor for two active segments: each append closes the other's file.
        let cache = Arc::new(open_files::FileCache::new(1));
        let mut a = Segment::create(&da, 0, 1000, 0).unwrap();
        a.log = SegmentFile::create(&cache, a.log_path()).unwrap();
        let mut b = Segment::create(&db, 0, 1000, 0).unwrap();
        b.log = SegmentFile::create(&cache, b.log_path()).unwrap();
        let dr = dir.path().join("ref");
        fs::create_dir(&dr).unwrap();
        let mut ref_seg = Segment::create(&dr, 0, 1000, 0).unwrap();
        let mut all = Vec::new();
        for round in 0..4 {
            all.extend(fill(&mut a, 5));
            assert!(a.log.is_open() && !b.log.is_open(), "round {round}");
            fill(&mut b, 3);
            assert!(!a.log.is_open(), "round {round}");
            fill(&mut ref_seg, 5);
        }
        // Closed with writes not yet fsynced: each close fsynced first.
        assert!(cache.synced_on_close() >= 7, "{}", cache.synced_on_close());
        a.flush().unwrap();
        assert_eq!(fs::read(a.log_path()).unwrap(), all);
        assert_eq!((a.next_offset(), a.size()), (200, all.len() as u64));
        assert_eq!(
            a.offset_index.all_entries().collect::<Vec<_>>(),
            ref_seg.offset_index.all_entries().collect::<Vec<_>>(),
            "indexed as one uninterrupted run"
        );
        // A reader of a closed file opens it itself, and a truncation reopens it.
        b.flush().unwrap();
        assert!(!a.log.is_open());
        assert_eq!(a.read_at(0, all.len()).unwrap(), all);
        a.truncate_to(100).unwrap();
        a.flush().unwrap();
        assert_eq!(fs::read(a.log_path()).unwrap(), all[..all.len() / 2]);
        // A file grown behind the segment's back is refused on reopening, not appended to.
        b.log.close();
        append_raw(a.log_path(), b"junk").unwrap();
        fill(&mut b, 1);
        let (bytes, h) = batch(a.next_offset(), 10, 9000);
        let e = a.append(&bytes, &[h]).unwrap_err();
        assert!(format!("{e:#}").contains("on reopening"), "{e:#}");
    }

    #[test]
    fn names_are_twenty_digits() {
        assert_eq!(file_name(123, "log"), "00000000000000000123.log");
        assert_eq!(
            parse_base_offset("00000000000000000123.log", "log"),
            Some(123)
        );
        assert_eq!(parse_base_offset("123.log", "log"), None);
        assert_eq!(parse_base_offset("00000000000000000123.index", "log"), None);
    }

    #[test]
    fn append_writes_bytes_verbatim_and_indexes_batch_starts() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = Segment::create(dir.path(), 0, 4096, 0).unwrap();
        let all = fill(&mut seg, 50);
        seg.flush().unwrap();
        assert_eq!(fs::read(seg.log_path()).unwrap(), all);
        assert_eq!(seg.next_offset(), 500);
        assert!(seg.offset_index.entries() > 3);
        for (off, pos) in seg.offset_index.all_entries() {
            let h = BatchHeader::parse(&all[pos as usize..], MAX_BATCH_SIZE).unwrap();
            assert_eq!(
                h.last_offset, off,
                "entry points at the batch whose last offset it holds"
            );
        }
    }

    #[test]
    fn recovery_fixes_torn_tail_and_rebuilds_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = Segment::create(dir.path(), 0, 4096, 0).unwrap();
        let all = fill(&mut seg, 20);
        seg.flush().unwrap();
        let entries: Vec<_> = seg.offset_index.all_entries().collect();
        drop(seg);
        // tear: half of a batch appended, and the index file garbage
        let (b, _) = batch(200, 10, 5000);
        append_raw(&dir.path().join(file_name(0, "log")), &b[..b.len() / 2]).unwrap();
        fs::write(dir.path().join(file_name(0, "index")), [1u8; 5]).unwrap();
        let (seg, r) = Segment::open(dir.path(), 0, 4096, 0, true, true).unwrap();
        let r = r.unwrap();
        assert_eq!(r.valid_bytes, all.len() as u64);
        assert_eq!(r.truncated_bytes, (b.len() / 2) as u64);
        assert!(
            !dir.path().join("damaged").exists(),
            "a torn tail is only cut"
        );
        assert_eq!(r.batches, 20);
        assert_eq!(seg.next_offset(), 200);
        assert_eq!(seg.offset_index.all_entries().collect::<Vec<_>>(), entries);
    }

    #[test]
    fn recovery_detects_corruption_in_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = Segment::create(dir.path(), 0, 4096, 0).unwrap();
        let all = fill(&mut seg, 10);
        seg.flush().unwrap();
        drop(seg);
        let batch_len = all.len() / 10;
        let mut bytes = all.clone();
        bytes[batch_len * 4 + 70] ^= 0xff; // inside the 5th batch's records
        fs::write(dir.path().join(file_name(0, "log")), &bytes).unwrap();
        let (seg, r) = Segment::open(dir.path(), 0, 4096, 0, true, true).unwrap();
        let r = r.unwrap();
        assert_eq!(r.batches, 4);
        assert!(r.reason.unwrap().contains("CRC"));
        assert_eq!(seg.size(), (batch_len * 4) as u64);
        assert_eq!(seg.next_offset(), 40);
        // The cut bytes — the damaged batch and the intact ones after it — are kept aside.
        let kept =
            dir.path()
                .join("damaged")
                .join(format!("{}.{}", file_name(0, "log"), batch_len * 4));
        assert_eq!(fs::read(kept).unwrap(), bytes[batch_len * 4..]);
    }

    #[test]
    fn recovery_tells_a_torn_tail_from_a_damaged_size_field() {
        let dir = tempfile::tempdir().unwrap();
        let all = {
            let mut seg = Segment::create(dir.path(), 0, 4096, 0).unwrap();
            fill(&mut seg, 3)
        };
        let (next, _) = batch(30, 10, 5000);
        let at = all.len();
        let mut bad_size = next.clone();
        bad_size[8..12].copy_from_slice(&5i32.to_be_bytes());
        let cases = [
            (
                next[..16].to_vec(),
                format!("partial batch header at byte {at}"),
            ),
            (
                next[..100].to_vec(),
                format!(
                    "partial batch at byte {at}: {} bytes announced, 100 present",
                    next.len()
                ),
            ),
            (
                bad_size,
                format!("corrupt batch: size 5 at offset 30 is below the minimum 14 at byte {at}"),
            ),
        ];
        for (tail, reason) in cases {
            fs::write(
                dir.path().join(file_name(0, "log")),
                [&all[..], &tail].concat(),
            )
            .unwrap();
            let (seg, r) = Segment::open(dir.path(), 0, 4096, 0, true, true).unwrap();
            let r = r.unwrap();
            assert_eq!(r.reason.as_deref(), Some(reason.as_str()));
            assert_eq!((r.batches, seg.size()), (3, at as u64));
        }
    }

    #[test]
    fn clean_open_trusts_indexes_and_finds_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = Segment::create(dir.path(), 0, 1000, 0).unwrap();
        fill(&mut seg, 30);
        seg.flush().unwrap();
        let (n, e, t) = (
            seg.next_offset(),
            seg.offset_index.entries(),
            seg.max_timestamp(),
        );
        drop(seg);
        let (mut seg, r) = Segment::open(dir.path(), 0, 1000, 0, false, true).unwrap();
        assert!(r.is_none());
        assert_eq!(
            (
                seg.next_offset(),
                seg.offset_index.entries(),
                seg.max_timestamp()
            ),
            (n, e, t)
        );
        // appending more keeps the same index cadence as one uninterrupted run
        fill(&mut seg, 10);
        let dir2 = tempfile::tempdir().unwrap();
        let mut ref_seg = Segment::create(dir2.path(), 0, 1000, 0).unwrap();
        fill(&mut ref_seg, 30);
        fill(&mut ref_seg, 10);
        assert_eq!(
            seg.offset_index.all_entries().collect::<Vec<_>>(),
            ref_seg.offset_index.all_entries().collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_index_entry_pointing_inside_a_batch_is_not_trusted_by_a_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = Segment::create(dir.path(), 0, 1000, 0).unwrap();
        let all = fill(&mut seg, 30);
        let batch_len = all.len() / 30;
        seg.flush().unwrap();
        let entries: Vec<(i64, u32)> = seg.offset_index.all_entries().collect();
        drop(seg);
        // The entry a cut at 155 looks up (the largest at or below 154) now points 7 bytes
        // into its batch; the last entry stays right, so opening the segment trusts the file.
        let k = entries.iter().rposition(|(o, _)| *o <= 154).unwrap();
        assert!(k + 1 < entries.len(), "{entries:?}");
        let bad: Vec<u8> = entries
            .iter()
            .enumerate()
            .flat_map(|(i, &(o, p))| {
                let p = if i == k { p + 7 } else { p };
                [(o as u32).to_be_bytes(), p.to_be_bytes()].concat()
            })
            .collect();
        std::fs::write(dir.path().join(file_name(0, "index")), &bad).unwrap();
        let (mut seg, _) = Segment::open(dir.path(), 0, 1000, 0, false, true).unwrap();
        seg.truncate_to(155).unwrap();
        assert_eq!(
            seg.size(),
            (batch_len * 15) as u64,
            "cut on a batch boundary"
        );
        assert_eq!(seg.next_offset(), 150);
        assert_eq!(fs::read(seg.log_path()).unwrap(), all[..batch_len * 15]);
    }

    #[test]
    fn truncate_cuts_at_the_batch_holding_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut seg = Segment::create(dir.path(), 0, 1000, 0).unwrap();
        let all = fill(&mut seg, 30);
        let removed = seg.truncate_to(155).unwrap();
        let batch_len = all.len() / 30;
        assert_eq!(seg.size(), (batch_len * 15) as u64);
        assert_eq!(removed, (batch_len * 15) as u64);
        assert_eq!(seg.next_offset(), 150);
        assert!(
            seg.offset_index
                .all_entries()
                .all(|(o, p)| o < 150 && (p as usize) < batch_len * 15)
        );
        seg.flush().unwrap();
        assert_eq!(fs::read(seg.log_path()).unwrap(), all[..batch_len * 15]);
        assert_eq!(seg.truncate_to(1000).unwrap(), 0);
    }
}
