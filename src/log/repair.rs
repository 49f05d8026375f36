//! Re-fetched batches written into a log: a hole filled, a damaged segment rewritten. Used by
//! `replica-follower repair` and by the daemon's start-up hole check; this module never
//! talks to a broker — the batches come from a [`BatchSource`].
//!
//! ```text
//! <partition dir>/repair-staging/<base>.log, .index, .timeindex, .txnindex    built here first
//! <partition dir>/<base>.log, …                                              then renamed here
//! <partition dir>/damaged/<base>.log.0                                       a rewritten segment's old bytes
//! ```
//! - A **hole** is a range of offsets between two segments: the segment before it ends below
//!   it, the next one starts above it. It becomes a segment of its own, named by the base
//!   offset of its first batch (one more each time `segment_bytes` would be passed, as the
//!   follower rolls). Anything else — a range that a segment holds or starts in, one before the
//!   first segment or after the last — is refused before a byte is written.
//! - A **damaged segment** is rewritten from the source's batches for its offset range (from
//!   its base up to the next segment's base, or to the log end for the last one), under the
//!   same name; its old bytes are first kept in `damaged/`.
//!
//! Every batch is checked before any of its bytes is written: its CRC, that it follows the one
//! before, that it starts no lower than the end of the segment before the range and ends below
//! the next segment's base. The indexes (`.index`, `.timeindex`, `.txnindex`) are built by the
//! same append path the follower uses, so they come out as the follower would have written them.
//!
//! Crash policy: a segment is built whole in `repair-staging/` and fsynced there, then renamed
//! into the partition directory. For a new segment the `.log` goes last: its rename is the
//! commit point (index files without a `.log` are left-overs the next load removes; a left-over
//! staging folder is emptied by the next repair). A rewritten segment's `.log` is renamed over
//! the old one first, then its indexes; a crash between leaves the good log with the old
//! indexes, which the loader checks against the log and rebuilds when they do not fit. No other
//! segment is touched: every later segment keeps its files (same inodes).
//! Who may call it: the holder of the data-dir lock, before fetching starts (the daemon's
//! start-up) or while no daemon runs (`repair`).

use super::data_dir::DataDir;
use super::format::producer_state::{self, ProducerState};
use super::format::segment::{self, SEGMENT_FILES, Segment};
use super::format::segment_reader::MAX_BATCH_SIZE;
use super::format::segment_reader::SegmentReader;
use super::format::txn_index::AbortedTxn;
use super::partition::{LogConfig, PartitionLog, list_segment_bases};
use crate::checkpoint::fsync_dir;
use crate::clock::now_ms;
use crate::record::records::{ControlType, control_marker};
use crate::record::{BatchHeader, BatchIter, SetEnd, check_follows};
use anyhow::{Context, Result, bail};
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where re-fetched batches come from (the leader, in production).
pub trait BatchSource {
    /// A record set beginning with the batch that holds `offset`, or the first one after it,
    /// as a Fetch answers; empty when the source holds nothing at or after `offset`. A partial
    /// batch at the end is fine (it is asked for again).
    fn records_from(&mut self, offset: i64) -> Result<Vec<u8>>;
    /// Names the source in messages ("broker 1 (127.0.0.1:9092)").
    fn describe(&self) -> String;
}

/// One batch of a segment, read back from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalBatch {
    pub header: BatchHeader,
    /// Base offset of the segment holding it.
    pub segment: i64,
    /// Byte position in the segment's `.log`.
    pub position: u64,
    /// Why the batch fails its own checksum, when it does.
    pub crc_error: Option<String>,
}

/// One segment read back batch by batch, every checksum verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    pub base: i64,
    pub path: PathBuf,
    pub size: u64,
    pub batches: Vec<LocalBatch>,
    /// Where the walk stopped before the end of the file, and why (a partial or malformed
    /// batch): nothing after that byte can be read as batches.
    pub unreadable_from: Option<(u64, String)>,
}

/// Reads the segment at `base` of `dir`: every whole batch's header and whether its CRC
/// holds; memory grows with the number of batches, not with their bytes.
pub fn scan_segment(dir: &Path, base: i64) -> Result<SegmentScan> {
    let path = dir.join(segment::file_name(base, "log"));
    let file = File::open(&path).with_context(|| format!("failed to open `{}`", path.display()))?;
    let size = file
        .metadata()
        .with_context(|| format!("failed to stat `{}`", path.display()))?
        .len();
    let mut batches = Vec::new();
    let mut end = 0u64;
    let mut reader = SegmentReader::new(
        file.try_clone()
            .with_context(|| format!("failed to open `{}`", path.display()))?,
        &path,
        0,
        size,
    );
    while let Some((h, pos)) = reader.next_batch()? {
        let crc = reader.check_crc()?;
        batches.push(LocalBatch {
            header: h,
            segment: base,
            position: pos,
            crc_error: crc.err().map(|e| e.to_string()),
        });
        end = pos + h.size_in_bytes as u64;
    }
    let unreadable_from = if end < size {
        Some((end, why_unreadable(&file, &path, end, size)?))
    } else {
        None
    };
    Ok(SegmentScan {
        base,
        path,
        size,
        batches,
        unreadable_from,
    })
}

/// Why the bytes of `file` from `at` to `size` are not a whole batch.
fn why_unreadable(file: &File, path: &Path, at: u64, size: u64) -> Result<String> {
    let mut prefix = vec![
        0u8;
        crate::record::batch::V2_HEADER_SIZE
            .min(usize::try_from(size - at).unwrap_or(usize::MAX))
    ];
    file.read_exact_at(&mut prefix, at)
        .with_context(|| format!("failed to read `{}` at byte {at}", path.display()))?;
    Ok(match BatchHeader::parse_prefix(&prefix, MAX_BATCH_SIZE) {
        Ok(h) => format!(
            "partial batch: {} bytes announced, {} present",
            h.size_in_bytes,
            size - at
        ),
        Err(e) => e.to_string(),
    })
}

/// The offset after the last whole batch of the segment at `base` (headers only); `None` when
/// it holds none.
pub fn segment_data_end(dir: &Path, base: i64) -> Result<Option<i64>> {
    let path = dir.join(segment::file_name(base, "log"));
    let mut reader = SegmentReader::open(&path)?;
    let mut end = None;
    while let Some((h, _)) = reader.next_batch()? {
        end = Some(h.last_offset + 1);
    }
    Ok(end)
}

/// The log end as the loader finds it: the last segment's data end, or its base when empty.
pub fn log_end(dir: &Path, bases: &[i64]) -> Result<Option<i64>> {
    let Some(&last) = bases.last() else {
        return Ok(None);
    };
    Ok(Some(segment_data_end(dir, last)?.unwrap_or(last).max(last)))
}

/// What one write put into the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The segment's `.log` in the partition directory.
    pub path: PathBuf,
    pub base: i64,
    /// First and last offset of the batches written; `None` for a segment left empty.
    pub offsets: Option<(i64, i64)>,
    pub batches: usize,
    pub bytes: u64,
    /// Where the old bytes of a rewritten segment were kept.
    pub kept: Option<PathBuf>,
}

/// The offsets a write covers: the batches from the one holding `from`, none starting below
/// `floor` (the end of the segment before), each ending below `to` (the next segment's base).
#[derive(Debug, Clone, Copy)]
struct Span {
    floor: i64,
    from: i64,
    to: i64,
}

/// A segment being built in the staging folder, with what its `.txnindex` needs.
struct Staged {
    seg: Segment,
    batches: usize,
    offsets: Option<(i64, i64)>,
    /// Transactional and control batches in order (control ones with their bytes).
    txn: Vec<(BatchHeader, Vec<u8>)>,
    has_abort: bool,
}

impl Staged {
    fn new(staging: &Path, base: i64, config: &LogConfig) -> Result<Self> {
        Ok(Staged {
            seg: Segment::create(staging, base, config.index_interval_bytes, now_ms())?,
            batches: 0,
            offsets: None,
            txn: Vec::new(),
            has_abort: false,
        })
    }

    fn append(&mut self, h: &BatchHeader, bytes: &[u8]) -> Result<()> {
        self.seg.append(bytes, std::slice::from_ref(h))?;
        self.batches += 1;
        self.offsets = Some((
            self.offsets.map_or(h.base_offset, |(f, _)| f),
            h.last_offset,
        ));
        if h.magic >= 2 && h.producer_id >= 0 && (h.is_transactional() || h.is_control()) {
            let kept = if h.is_control() {
                self.has_abort |= matches!(control_marker(h, bytes), Some((ControlType::Abort, _)));
                bytes.to_vec()
            } else {
                Vec::new()
            };
            self.txn.push((*h, kept));
        }
        Ok(())
    }
}

/// A fresh, empty staging folder in `dir` (left-overs of an interrupted repair removed).
fn fresh_staging(dir: &Path) -> Result<PathBuf> {
    let staging = dir.join(DataDir::STAGING_DIR);
    remove_staging(dir)?;
    fs::create_dir(&staging)
        .with_context(|| format!("failed to create `{}`", staging.display()))?;
    Ok(staging)
}

/// Removes the staging folder of `dir`, if there is one.
pub fn remove_staging(dir: &Path) -> Result<()> {
    let staging = dir.join(DataDir::STAGING_DIR);
    match fs::remove_dir_all(&staging) {
        Ok(()) => fsync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("failed to remove `{}`", staging.display())),
    }
}

/// Builds segments in `staging` from the source's batches over `span`. `base`: the one
/// segment's name (a rewrite, never split); `None`: named by the first batch, split at
/// `segment_bytes` (a hole).
fn stage(
    staging: &Path,
    span: Span,
    base: Option<i64>,
    config: &LogConfig,
    source: &mut dyn BatchSource,
) -> Result<Vec<Staged>> {
    let limit = config.segment_bytes.min(i32::MAX as u64);
    let mut staged: Vec<Staged> = Vec::new();
    let mut offset = span.from;
    let mut prev_last = None;
    'fetch: while offset < span.to {
        let records = source.records_from(offset)?;
        let mut it = BatchIter::new(&records, MAX_BATCH_SIZE);
        let mut progressed = false;
        for (h, _, bytes) in it.by_ref() {
            if h.last_offset < offset {
                continue;
            }
            if h.base_offset >= span.to {
                break 'fetch;
            }
            let what = || {
                format!(
                    "batch {}..{} from {}",
                    h.base_offset,
                    h.last_offset,
                    source.describe()
                )
            };
            h.verify_crc(bytes)
                .with_context(|| format!("{}: refused, nothing of it written", what()))?;
            check_follows(prev_last, &h).map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
            if h.base_offset < span.floor {
                bail!(
                    "{} starts below offset {}, where the local batches before the range end",
                    what(),
                    span.floor
                );
            }
            if h.last_offset >= span.to {
                bail!(
                    "{} ends at or past offset {}, where the next segment starts",
                    what(),
                    span.to
                );
            }
            let roll = match staged.last() {
                None => true,
                Some(s) => {
                    base.is_none()
                        && !s.seg.is_empty()
                        && (s.seg.size() + h.size_in_bytes as u64 > limit
                            || h.last_offset - s.seg.base_offset > i64::from(i32::MAX))
                }
            };
            if roll {
                staged.push(Staged::new(staging, base.unwrap_or(h.base_offset), config)?);
            }
            if let Some(s) = staged.last_mut() {
                s.append(&h, bytes)?;
            }
            prev_last = Some(h.last_offset);
            offset = h.last_offset + 1;
            progressed = true;
        }
        if let Some(SetEnd::Corrupt { position, reason }) = it.end() {
            bail!(
                "{} sent a malformed batch at byte {position} of its answer for offset {offset}: {reason}",
                source.describe()
            );
        }
        if !progressed {
            if records.is_empty() {
                break; // the source holds nothing more
            }
            bail!(
                "{} answered offset {offset} without a whole batch at or after it",
                source.describe()
            );
        }
    }
    if staged.is_empty()
        && let Some(b) = base
    {
        // Every batch of the range is gone from the source (compaction): an empty segment
        // keeps the name and the place.
        staged.push(Staged::new(staging, b, config)?);
    }
    Ok(staged)
}

/// The open transactions after every local batch below `before`: from the newest producer
/// snapshot at or below it, walking the segments' batches after that.
fn producer_state_before(dir: &Path, bases: &[i64], before: i64) -> Result<ProducerState> {
    let (from, mut state) = producer_state::load_newest(dir, before, i64::MAX)?
        .unwrap_or((i64::MIN, ProducerState::default()));
    for &base in bases.iter().filter(|b| **b < before) {
        let path = dir.join(segment::file_name(base, "log"));
        let mut reader = SegmentReader::open(&path)?;
        while let Some((h, _)) = reader.next_batch()? {
            if h.last_offset >= before {
                break;
            }
            if h.last_offset >= from && h.producer_id >= 0 {
                let bytes: &[u8] = if h.is_control() {
                    reader.batch_bytes()?
                } else {
                    &[]
                };
                state.update(&h, bytes);
            }
        }
    }
    Ok(state)
}

/// Writes each staged segment's `.txnindex` (aborted transactions whose ABORT marker it
/// holds), replaying the open transactions from before the first one. Nothing is replayed
/// when no staged segment holds an ABORT marker.
fn index_transactions(dir: &Path, bases: &[i64], staged: &mut [Staged]) -> Result<()> {
    let Some(first) = staged.first().map(|s| s.seg.base_offset) else {
        return Ok(());
    };
    if !staged.iter().any(|s| s.has_abort) {
        return Ok(());
    }
    let mut state = producer_state_before(dir, bases, first)?;
    for s in staged.iter_mut() {
        let entries: Vec<AbortedTxn> = s
            .txn
            .iter()
            .filter_map(|(h, bytes)| state.update(h, bytes))
            .collect();
        s.seg.txn_index.rewrite(&entries)?;
    }
    Ok(())
}

/// A staged segment, complete and fsynced, ready to be renamed into place.
#[derive(Debug, Clone, Copy)]
struct Sealed {
    base: i64,
    offsets: Option<(i64, i64)>,
    batches: usize,
    bytes: u64,
}

/// Builds the segments for `span` in a fresh staging folder of `dir`, indexes included, and
/// fsyncs them; on any error the staging folder is removed and `dir` is as it was.
fn build(
    dir: &Path,
    bases: &[i64],
    span: Span,
    base: Option<i64>,
    config: &LogConfig,
    source: &mut dyn BatchSource,
) -> Result<(PathBuf, Vec<Sealed>)> {
    let staging = fresh_staging(dir)?;
    let built = (|| {
        let mut staged = stage(&staging, span, base, config, source)?;
        index_transactions(dir, bases, &mut staged)?;
        let mut sealed = Vec::new();
        for mut s in staged {
            s.seg.on_become_inactive()?;
            s.seg.flush()?;
            sealed.push(Sealed {
                base: s.seg.base_offset,
                offsets: s.offsets,
                batches: s.batches,
                bytes: s.seg.size(),
            });
        }
        Ok(sealed)
    })();
    match built {
        Ok(sealed) => Ok((staging, sealed)),
        Err(e) => {
            let _ = remove_staging(dir);
            Err(e)
        }
    }
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).with_context(|| {
        format!(
            "failed to rename `{}` to `{}`",
            from.display(),
            to.display()
        )
    })
}

/// Moves the staged files of the segment at `base` into `dir`: the indexes first, the `.log`
/// last (for a new segment, its rename is the commit point) — or, with `log_first`, the
/// `.log` first (a rewrite: the good bytes are in place as soon as possible). An index the
/// staged segment lacks (no `.txnindex`) is removed from `dir`.
fn publish(staging: &Path, dir: &Path, base: i64, log_first: bool) -> Result<()> {
    let mut order: Vec<&str> = SEGMENT_FILES
        .iter()
        .copied()
        .filter(|k| *k != "log")
        .collect();
    if log_first {
        order.insert(0, "log");
    } else {
        order.push("log");
    }
    for kind in order {
        let name = segment::file_name(base, kind);
        let (from, to) = (staging.join(&name), dir.join(&name));
        if from.exists() {
            rename(&from, &to)?;
        } else {
            match fs::remove_file(&to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("failed to remove `{}`", to.display()));
                }
            }
        }
    }
    fsync_dir(dir)
}

/// The largest base below `offset` and the smallest above it, among `bases`.
fn neighbours(bases: &[i64], offset: i64) -> (Option<i64>, Option<i64>) {
    (
        bases.iter().rev().find(|b| **b < offset).copied(),
        bases.iter().find(|b| **b > offset).copied(),
    )
}

/// Fills the hole that begins at `from` in the partition directory `dir`: the source's
/// batches from `from` up to the next segment's base become new segments. Refused, with
/// nothing written, unless `from` lies in a hole: after the end of the segment before it and
/// below the base of a segment after it, no segment starting in between.
pub fn fill_hole(
    dir: &Path,
    from: i64,
    config: &LogConfig,
    source: &mut dyn BatchSource,
) -> Result<Vec<Written>> {
    let bases = list_segment_bases(dir)?;
    let (prev, next) = neighbours(&bases, from);
    let not_a_hole = |why: String| {
        anyhow::anyhow!(
            "`{}`: offset {from} is not in a hole: {why}; nothing written",
            dir.display()
        )
    };
    if bases.contains(&from) {
        return Err(not_a_hole(format!("segment {from} starts there")));
    }
    let Some(prev) = prev else {
        return Err(not_a_hole("it lies before the first segment".into()));
    };
    let Some(next) = next else {
        return Err(not_a_hole(
            "it lies after the last segment (fetching continues there)".into(),
        ));
    };
    let floor = segment_data_end(dir, prev)?.unwrap_or(prev).max(prev);
    if floor > from {
        return Err(not_a_hole(format!(
            "segment {prev} holds offsets up to {}",
            floor - 1
        )));
    }
    let span = Span {
        floor,
        from,
        to: next,
    };
    let (staging, sealed) = build(dir, &bases, span, None, config, source)?;
    let mut out = Vec::new();
    for s in sealed {
        let path = dir.join(segment::file_name(s.base, "log"));
        if path.exists() {
            let _ = remove_staging(dir);
            bail!(
                "`{}` appeared while the hole was being filled; left as it is",
                path.display()
            );
        }
        publish(&staging, dir, s.base, false)?;
        out.push(Written {
            path,
            base: s.base,
            offsets: s.offsets,
            batches: s.batches,
            bytes: s.bytes,
            kept: None,
        });
    }
    remove_staging(dir)?;
    Ok(out)
}

/// Rewrites the segment at `base` of `dir` from the source's batches for its offset range:
/// from `base` up to the next segment's base, or up to `end` when it is the last segment.
/// Its old bytes are kept in `damaged/` first; no other segment is touched.
pub fn rewrite_segment(
    dir: &Path,
    base: i64,
    end: i64,
    config: &LogConfig,
    source: &mut dyn BatchSource,
) -> Result<Written> {
    let bases = list_segment_bases(dir)?;
    let log_path = dir.join(segment::file_name(base, "log"));
    if !bases.contains(&base) {
        bail!("`{}` does not exist; nothing written", log_path.display());
    }
    let (prev, next) = neighbours(&bases, base);
    let floor = match prev {
        Some(p) => segment_data_end(dir, p)?.unwrap_or(p).max(p),
        None => 0,
    };
    let span = Span {
        floor,
        from: base,
        to: next.unwrap_or(end),
    };
    let (staging, sealed) = build(dir, &bases, span, Some(base), config, source)?;
    let [s] = sealed[..] else {
        let _ = remove_staging(dir);
        bail!(
            "`{}`: the rewrite did not make exactly one segment",
            log_path.display()
        );
    };
    let old_size = fs::metadata(&log_path)
        .with_context(|| format!("failed to stat `{}`", log_path.display()))?
        .len();
    let kept = super::format::diverged::keep_damaged_tail(dir, &log_path, 0, old_size)?;
    publish(&staging, dir, base, true)?;
    remove_staging(dir)?;
    Ok(Written {
        path: log_path,
        base,
        offsets: s.offsets,
        batches: s.batches,
        bytes: s.bytes,
        kept: Some(kept),
    })
}

/// Offsets missing between two segments of a loaded log: the segment based at `prev` ends
/// at `from`, below `next`, the base of the one after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub prev: i64,
    pub from: i64,
    pub next: i64,
}

/// The gaps at segment boundaries of a loaded log.
pub fn boundary_gaps(log: &PartitionLog) -> Vec<Gap> {
    let segs: Vec<&Segment> = log.segments().collect();
    segs.windows(2)
        .filter_map(|w| match w {
            [a, b] if a.next_offset() < b.base_offset => Some(Gap {
                prev: a.base_offset,
                from: a.next_offset(),
                next: b.base_offset,
            }),
            _ => None,
        })
        .collect()
}

/// [`fill_hole`] for a loaded log (the daemon's start-up, before fetching): the new segments
/// are opened and join the log as inactive segments.
pub fn fill_hole_in_log(
    log: &mut PartitionLog,
    from: i64,
    source: &mut dyn BatchSource,
) -> Result<Vec<Written>> {
    let written = fill_hole(&log.dir, from, &log.config, source)?;
    for w in &written {
        let (mut seg, _) = Segment::open(
            &log.dir,
            w.base,
            log.config.index_interval_bytes,
            now_ms(),
            false,
            false,
        )?;
        seg.close_file();
        log.segments.insert(w.base, Box::new(seg));
        log.touch(&super::touched::Pass::ALL);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::TopicPartition;
    use crate::log::loader::{self, CheckpointHints};
    use crate::record::VerifiedBatches;
    use crate::record::records::{NewRecord, build_v2_batch};
    use std::collections::BTreeMap;
    use std::os::unix::fs::MetadataExt;

    fn cfg() -> LogConfig {
        LogConfig {
            segment_bytes: 2048,
            index_interval_bytes: 300,
            ..LogConfig::default()
        }
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    /// A v2 batch of 4 records at `base`; `attributes` and `producer_id` patched in (CRC
    /// recomputed) when given.
    fn batch(base: i64, txn: Option<(i16, i64)>, key: &[u8], value: &[u8]) -> Vec<u8> {
        let n = if txn.is_some_and(|(a, _)| a & 0x20 != 0) {
            1
        } else {
            4
        };
        let recs: Vec<NewRecord<'_>> = (0..n)
            .map(|j| NewRecord {
                key: Some(key),
                value: Some(value),
                timestamp: 1000 + base + j,
            })
            .collect();
        let mut b = build_v2_batch(base, 1, &recs);
        if let Some((attributes, pid)) = txn {
            b[21..23].copy_from_slice(&attributes.to_be_bytes());
            b[43..51].copy_from_slice(&pid.to_be_bytes());
            let crc = crc32c::crc32c(&b[21..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        b
    }

    /// A source serving `log` (whole batches back to back) from the batch holding an offset,
    /// at most `max` bytes but at least one batch, as a Fetch does.
    struct MemorySource {
        log: Vec<u8>,
        max: usize,
        /// Flips a byte in the records of the batch starting at this offset.
        corrupt_at: Option<i64>,
    }

    impl BatchSource for MemorySource {
        fn records_from(&mut self, offset: i64) -> Result<Vec<u8>> {
            let mut out = Vec::new();
            for (h, _, b) in BatchIter::new(&self.log, MAX_BATCH_SIZE) {
                if h.last_offset < offset {
                    continue;
                }
                if !out.is_empty() && out.len() + b.len() > self.max {
                    break;
                }
                let start = out.len();
                out.extend_from_slice(b);
                if self.corrupt_at == Some(h.base_offset) {
                    out[start + 70] ^= 0xff;
                }
            }
            Ok(out)
        }
        fn describe(&self) -> String {
            "the test source".into()
        }
    }

    /// A log of 40 batches (4 offsets each) over several 2 KiB segments, flushed and closed;
    /// returns its directory and bytes.
    fn build_log(data: &Path, batches: &[Vec<u8>]) -> (PathBuf, Vec<u8>) {
        let mut log = PartitionLog::create(data, &tp(), cfg(), 0, None).unwrap();
        let mut all = Vec::new();
        for b in batches {
            log.append(&VerifiedBatches::of(b)).unwrap();
            all.extend_from_slice(b);
        }
        log.flush().unwrap();
        (log.dir.clone(), all)
    }

    /// A temporary data dir holding a log of `batches`: (data dir, partition dir, log bytes,
    /// segment bases).
    fn fixture(batches: &[Vec<u8>]) -> (tempfile::TempDir, PathBuf, Vec<u8>, Vec<i64>) {
        let data = tempfile::tempdir().unwrap();
        let (dir, all) = build_log(data.path(), batches);
        let bases = list_segment_bases(&dir).unwrap();
        (data, dir, all, bases)
    }

    fn plain_batches() -> Vec<Vec<u8>> {
        (0..40)
            .map(|i| batch(i * 4, None, b"k", &[b'v'; 50]))
            .collect()
    }

    /// Every file under `dir`: name → (inode, bytes).
    fn files(dir: &Path) -> BTreeMap<String, (u64, Vec<u8>)> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (
                    name,
                    (fs::metadata(&p).unwrap().ino(), fs::read(&p).unwrap()),
                )
            })
            .collect()
    }

    fn delete_segment(dir: &Path, base: i64) -> BTreeMap<String, Vec<u8>> {
        let mut gone = BTreeMap::new();
        for kind in SEGMENT_FILES {
            let p = dir.join(segment::file_name(base, kind));
            if let Ok(b) = fs::read(&p) {
                fs::remove_file(&p).unwrap();
                gone.insert(kind.to_string(), b);
            }
        }
        gone
    }

    fn source(log: &[u8]) -> MemorySource {
        MemorySource {
            log: log.to_vec(),
            max: 700,
            corrupt_at: None,
        }
    }

    fn reload(data: &Path) -> PartitionLog {
        let hints = CheckpointHints::default();
        loader::load(data, &tp(), cfg(), hints, true)
            .unwrap()
            .unwrap()
            .0
    }

    #[test]
    fn a_hole_becomes_a_segment_of_its_own_with_its_indexes_and_later_files_stay() {
        let (data, dir, all, bases) = fixture(&plain_batches());
        assert!(bases.len() >= 4, "{bases:?}");
        let gone_base = bases[bases.len() / 2];
        let gone = delete_segment(&dir, gone_base);
        let before = files(&dir);
        let prev_end = segment_data_end(&dir, bases[bases.len() / 2 - 1])
            .unwrap()
            .unwrap();
        assert_eq!(prev_end, gone_base, "the hole starts where its segment did");

        let written = fill_hole(&dir, prev_end, &cfg(), &mut source(&all)).unwrap();
        assert_eq!(written.len(), 1, "{written:?}");
        let w = &written[0];
        assert_eq!(w.base, gone_base);
        assert_eq!(w.bytes as usize, gone["log"].len());
        let next = bases[bases.len() / 2 + 1];
        assert_eq!(w.offsets.map(|(_, l)| l + 1), Some(next));
        // The segment and its indexes are what the follower's own appends had written.
        for (kind, bytes) in &gone {
            let now = fs::read(dir.join(segment::file_name(gone_base, kind))).unwrap();
            assert_eq!(&now, bytes, "{kind}");
        }
        // Every other file is the same file, untouched; nothing is left in staging.
        let after = files(&dir);
        for (name, (ino, bytes)) in &before {
            assert_eq!(after.get(name), Some(&(*ino, bytes.clone())), "{name}");
        }
        assert!(!dir.join(DataDir::STAGING_DIR).exists());
        assert_eq!(reload(data.path()).read_all().unwrap(), all);
    }

    #[test]
    fn a_hole_filled_in_a_loaded_log_reaches_the_next_checkpoint() {
        use crate::log::manager::{LogManager, lock_log};
        use crate::log::touched::Pass;
        let (data, dir, all, bases) = fixture(&plain_batches());
        let prev = bases[bases.len() / 2 - 1];
        delete_segment(&dir, bases[bases.len() / 2]);
        let from = segment_data_end(&dir, prev).unwrap().unwrap();
        let logs = LogManager::open(data.path(), cfg()).unwrap();
        logs.checkpoint().unwrap();
        logs.checkpoint().unwrap();
        assert_eq!(logs.last_visits(Pass::Checkpoint), 0);
        let shared = logs.get(&tp()).unwrap();
        let written = fill_hole_in_log(&mut lock_log(&shared), from, &mut source(&all)).unwrap();
        assert_eq!(written.len(), 1);
        logs.checkpoint().unwrap();
        assert_eq!(logs.last_visits(Pass::Checkpoint), 1);
    }

    #[test]
    fn a_hole_larger_than_segment_bytes_becomes_several_segments() {
        let (data, dir, all, bases) = fixture(&plain_batches());
        let (first, last) = (bases[1], bases[3]);
        delete_segment(&dir, bases[1]);
        delete_segment(&dir, bases[2]);
        let written = fill_hole(&dir, first, &cfg(), &mut source(&all)).unwrap();
        assert_eq!(
            written.iter().map(|w| w.base).collect::<Vec<_>>(),
            vec![bases[1], bases[2]]
        );
        assert!(written.iter().all(|w| w.bytes <= 2048));
        assert_eq!(written[1].offsets.map(|(_, l)| l + 1), Some(last));
        assert_eq!(reload(data.path()).read_all().unwrap(), all);
    }

    #[test]
    fn filling_refuses_a_range_that_is_not_a_hole() {
        let (_data, dir, all, bases) = fixture(&plain_batches());
        let before = files(&dir);
        let last_end = log_end(&dir, &bases).unwrap().unwrap();
        for (from, why) in [
            (bases[1], "starts there"),
            (bases[1] + 4, "holds offsets up to"),
            (last_end, "after the last segment"),
        ] {
            let e = fill_hole(&dir, from, &cfg(), &mut source(&all)).unwrap_err();
            let msg = format!("{e:#}");
            assert!(
                msg.contains("not in a hole") && msg.contains(why),
                "{from}: {msg}"
            );
        }
        assert_eq!(files(&dir), before, "nothing was written");
        assert!(!dir.join(DataDir::STAGING_DIR).exists());
    }

    #[test]
    fn a_batch_that_fails_its_crc_or_crosses_the_next_segment_is_never_written() {
        let (_data, dir, all, bases) = fixture(&plain_batches());
        let gone = bases[2];
        delete_segment(&dir, gone);
        let before = files(&dir);
        let mut bad = source(&all);
        bad.corrupt_at = Some(gone + 8);
        let e = fill_hole(&dir, gone, &cfg(), &mut bad).unwrap_err();
        assert!(format!("{e:#}").contains("CRC"), "{e:#}");
        // A source whose batches straddle the next segment's base.
        let straddling: Vec<u8> = (0..40)
            .flat_map(|i| batch(i * 4 + 2, None, b"k", &[b'v'; 50]))
            .collect();
        let e = fill_hole(&dir, gone, &cfg(), &mut source(&straddling)).unwrap_err();
        assert!(format!("{e:#}").contains("starts below offset"), "{e:#}");
        assert_eq!(files(&dir), before, "nothing was written");
        assert!(!dir.join(DataDir::STAGING_DIR).exists());
    }

    #[test]
    fn a_left_over_staging_folder_is_not_a_segment_and_the_next_repair_clears_it() {
        let (data, dir, all, bases) = fixture(&plain_batches());
        let gone = bases[1];
        let saved = delete_segment(&dir, gone);
        // A repair that crashed after staging: the staged files are not in the log.
        let staging = dir.join(DataDir::STAGING_DIR);
        fs::create_dir(&staging).unwrap();
        fs::write(staging.join(segment::file_name(gone, "log")), &saved["log"]).unwrap();
        assert!(!list_segment_bases(&dir).unwrap().contains(&gone));
        let log = reload(data.path());
        assert_eq!(
            boundary_gaps(&log),
            vec![Gap {
                prev: bases[0],
                from: gone,
                next: bases[2]
            }]
        );
        drop(log);
        fill_hole(&dir, gone, &cfg(), &mut source(&all)).unwrap();
        assert!(!staging.exists());
        assert_eq!(reload(data.path()).read_all().unwrap(), all);
    }

    #[test]
    fn a_damaged_segment_is_rewritten_through_a_rename_and_its_old_bytes_are_kept() {
        let (data, dir, all, bases) = fixture(&plain_batches());
        let target = bases[1];
        let log_path = dir.join(segment::file_name(target, "log"));
        let mut rotten = fs::read(&log_path).unwrap();
        rotten[200] ^= 0x01;
        fs::write(&log_path, &rotten).unwrap();
        let scan = scan_segment(&dir, target).unwrap();
        assert_eq!(
            scan.batches
                .iter()
                .filter(|b| b.crc_error.is_some())
                .count(),
            1,
            "{scan:?}"
        );
        let old_ino = fs::metadata(&log_path).unwrap().ino();
        let before = files(&dir);
        let end = log_end(&dir, &bases).unwrap().unwrap();

        let w = rewrite_segment(&dir, target, end, &cfg(), &mut source(&all)).unwrap();
        assert_eq!(w.path, log_path);
        assert_ne!(
            fs::metadata(&log_path).unwrap().ino(),
            old_ino,
            "a new file"
        );
        assert_eq!(fs::read(w.kept.as_ref().unwrap()).unwrap(), rotten);
        let after = files(&dir);
        for (name, v) in &before {
            if !name.starts_with(&format!("{target:020}")) {
                assert_eq!(after.get(name), Some(v), "{name} was touched");
            }
        }
        assert!(
            scan_segment(&dir, target)
                .unwrap()
                .batches
                .iter()
                .all(|b| b.crc_error.is_none())
        );
        assert_eq!(reload(data.path()).read_all().unwrap(), all);
    }

    #[test]
    fn an_aborted_transaction_in_a_hole_gets_its_txnindex_entry_back() {
        const PID: i64 = 77;
        let mut batches = Vec::new();
        let mut offset = 0;
        // Plain data, then a transaction opened early and aborted in a later segment, then
        // more plain data.
        for i in 0..40 {
            let txn = match i {
                5 | 20 => Some((0x10, PID)),
                21 => Some((0x30, PID)),
                _ => None,
            };
            let b = if txn.is_some_and(|(a, _)| a & 0x20 != 0) {
                batch(offset, txn, &[0, 0, 0, 0], &[0, 0, 0, 0, 0, 3])
            } else {
                batch(offset, txn, b"k", &[b'v'; 50])
            };
            offset = BatchHeader::parse(&b, MAX_BATCH_SIZE).unwrap().last_offset + 1;
            batches.push(b);
        }
        let (data, dir, all, bases) = fixture(&batches);
        let holder = bases
            .iter()
            .copied()
            .find(|b| dir.join(segment::file_name(*b, "txnindex")).exists())
            .expect("a segment with the ABORT marker");
        assert_ne!(
            holder, bases[0],
            "the transaction starts in an earlier segment"
        );
        let gone = delete_segment(&dir, holder);
        let written = fill_hole(&dir, holder, &cfg(), &mut source(&all)).unwrap();
        assert_eq!(written[0].base, holder);
        let txn = fs::read(dir.join(segment::file_name(holder, "txnindex"))).unwrap();
        assert_eq!(txn, gone["txnindex"]);
        assert_eq!(reload(data.path()).read_all().unwrap(), all);
    }
}
