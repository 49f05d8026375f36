//! The one read path of a partition directory: a reader that holds a [`LogView`] starts at an
//! offset ([`read_batches`], the byte ranges of whole batches) or a record timestamp
//! ([`find_by_timestamp`], [`find_max_timestamp`]), and gets the aborted transactions of a
//! range ([`aborted_transactions`]); `verify` reads a segment's indexes whole to check them
//! ([`read_offset_index`], [`read_time_index`]). Serving, `offsets` and `verify` read through
//! here; none of them opens an index file itself.
//!
//! Indexes carry no checksum, so they are checked as they are used: an index position that
//! is not the start of the batch it names is ignored and the segment read from its start.
//!
//! ## By timestamp
//! As Kafka's `UnifiedLog.fetchOffsetByTimestamp` and `LogSegment.findOffsetByTimestamp`:
//! the first offset at or after the log start whose record timestamp is ≥ T. Segments whose
//! largest timestamp in range is below T are passed over on their summary
//! ([`super::max_timestamp`]); in the first that reaches T, the time index gives the
//! last entry with a timestamp ≤ T, the offset index the
//! position of a batch at or before that entry's offset; batches are scanned from there, and
//! in the first batch whose max timestamp is ≥ T (decompressed if need be) the first record
//! with a timestamp ≥ T is the answer. Every batch scanned has its CRC checked: an answer
//! never rests on a damaged batch (that is an error naming the segment and byte).

use super::format::segment;
use super::format::segment_reader::SegmentReader;
use super::format::{offset_index, time_index, txn_index};
use super::max_timestamp::MaxTimestamps;
use super::read_view::{LogView, SegmentSpan};
use crate::protocol::fetch::AbortedTransaction;
use crate::record::batch::{LOG_OVERHEAD, V2_HEADER_SIZE};
use crate::record::compression::MAX_DECOMPRESSED;
use crate::record::records::{RecordIter, base_timestamp, records_block};
use crate::record::{BatchHeader, SetEnd};
use anyhow::{Context, Result, anyhow, bail};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Whole batches of one segment file, to be sent from the file as they are; `permit` is what
/// the caller holds for the open file until it is sent.
#[derive(Debug)]
pub struct FileRange<P> {
    pub file: File,
    pub path: PathBuf,
    pub pos: u64,
    pub len: u64,
    pub permit: P,
}

/// Whole batches read from a snapshot.
#[derive(Debug)]
pub struct Read<P> {
    pub ranges: Vec<FileRange<P>>,
    pub bytes: u64,
    /// The offset after the last batch read.
    pub end_offset: Option<i64>,
}

/// The byte ranges of the whole batches from the one holding `from`, each ending below
/// `below` (the high watermark, or the last stable offset), within `max_bytes` — except that
/// with `min_one` the first batch is taken whatever its size (KIP-74). Only headers are read
/// (one positioned read a batch); a header that does not parse ends the read there.
/// `permit` is asked once for each file before it is opened: `None` ends the read there.
pub fn read_batches<P>(
    view: &LogView,
    from: i64,
    below: i64,
    max_bytes: u64,
    min_one: bool,
    mut permit: impl FnMut() -> Option<P>,
) -> Result<Read<P>> {
    let mut out = Read {
        ranges: Vec::new(),
        bytes: 0,
        end_offset: None,
    };
    for seg in view.segments_from(from) {
        if seg.base_offset >= below {
            break;
        }
        if seg.next_offset <= from || seg.size == 0 {
            continue;
        }
        // Each file sent from holds a permit until it is sent: none free, and what was read
        // so far is served.
        let Some(permit) = permit() else {
            break;
        };
        let file = match File::open(&seg.log_path) {
            Ok(f) => f,
            // Deleted by retention or truncation since the snapshot: what is left is served.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("failed to open `{}`", seg.log_path.display()));
            }
        };
        let mut pos = start_position(seg, &file, from);
        let mut range: Option<(u64, u64)> = None;
        let mut full = false;
        while pos + LOG_OVERHEAD as u64 <= seg.size {
            let mut prefix = [0u8; V2_HEADER_SIZE];
            let want = V2_HEADER_SIZE.min(usize::try_from(seg.size - pos).unwrap_or(usize::MAX));
            let got = read_fully_at(&file, prefix.get_mut(..want).unwrap_or_default(), pos)?;
            let Ok(h) = BatchHeader::parse_header_of(
                prefix.get(..got).unwrap_or_default(),
                seg.size - pos,
                usize::MAX,
            ) else {
                // A damaged header ends the read here: going on in the next segment would
                // hand the reader a gap it cannot see. (`verify` names the damage.)
                crate::log_debug!(
                    "`{}`: no batch header at byte {pos}; serving what comes before it",
                    seg.log_path.display()
                );
                full = true;
                break;
            };
            let size = h.size_in_bytes as u64;
            if h.last_offset < from {
                pos += size;
                continue;
            }
            if h.last_offset >= below {
                full = true;
                break;
            }
            let first = out.bytes == 0;
            if out.bytes + size > max_bytes && !(first && min_one) {
                full = true;
                break;
            }
            out.bytes += size;
            out.end_offset = Some(h.last_offset + 1);
            range = Some(range.map_or((pos, size), |(p, l)| (p, l + size)));
            pos += size;
        }
        if let Some((pos, len)) = range {
            out.ranges.push(FileRange {
                file,
                path: seg.log_path.clone(),
                pos,
                len,
                permit,
            });
        }
        if full {
            break;
        }
    }
    Ok(out)
}

/// A positioned read that fills `buf` unless the file ends first; the bytes read.
fn read_fully_at(file: &File, buf: &mut [u8], pos: u64) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(buf.get_mut(n..).unwrap_or_default(), pos + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("failed to read a batch header"),
        }
    }
    Ok(n)
}

/// Where to start walking `seg` for `from`: the in-memory index entry taken with the
/// snapshot, else the index file's entry when the batch header there agrees with it (index
/// files carry no checksum), else the segment's start.
fn start_position(seg: &SegmentSpan, file: &File, from: i64) -> u64 {
    if let Some((_, pos)) = seg.index_hint {
        return u64::from(pos).min(seg.size);
    }
    let Ok((entry, pos)) =
        offset_index::lookup_file(&seg.offset_index_path(), seg.base_offset, from)
    else {
        return 0;
    };
    let pos = u64::from(pos);
    if pos == 0 || pos >= seg.size {
        return 0;
    }
    let mut prefix = [0u8; V2_HEADER_SIZE];
    let Ok(got) = read_fully_at(file, &mut prefix, pos) else {
        return 0;
    };
    match BatchHeader::parse_header_of(
        prefix.get(..got).unwrap_or_default(),
        seg.size - pos,
        usize::MAX,
    ) {
        Ok(h) if h.base_offset >= seg.base_offset && h.last_offset <= entry => pos,
        _ => 0,
    }
}

/// The aborted transactions a read_committed reader of `[from, upper)` needs: those in the
/// `.txnindex` of the segments from the one holding `from` whose data overlaps the range
/// (Kafka's `collectAbortedTransactions`).
pub fn aborted_transactions(view: &LogView, from: i64, upper: i64) -> Vec<AbortedTransaction> {
    let mut out = Vec::new();
    for seg in view.segments_from(from) {
        let Ok(entries) = txn_index::read(&seg.txn_index_path()) else {
            continue;
        };
        out.extend(
            entries
                .into_iter()
                .filter(|t| t.last_offset >= from && t.first_offset < upper)
                .map(|t| AbortedTransaction {
                    producer_id: t.producer_id,
                    first_offset: t.first_offset,
                }),
        );
    }
    out
}

/// The answer of a search by timestamp (`offsets --timestamp`, ListOffsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimestampAnswer {
    /// The first record at or after the log start with a timestamp ≥ T.
    Found { offset: i64, timestamp: i64 },
    /// No record qualifies (Kafka answers offset -1); the log end offset, for the message.
    None { log_end: i64 },
}

/// What a scan of one segment found.
enum SegmentScan {
    Found {
        offset: i64,
        timestamp: i64,
    },
    NotHere,
    /// A batch at or past the upper bound was reached: no later segment can answer.
    Beyond,
    /// The index pointed at something other than the start of the batch it names.
    BadStart,
}

/// The search behind `offsets --timestamp` and ListOffsets, for any reader of a partition
/// directory:
/// `segments` are (base offset, bytes of whole batches to read, `None`: the whole file);
/// only offsets in `[log_start, below)` are answers. `None` when no record qualifies.
/// A segment whose largest timestamp in range is below `target` is passed over on its
/// summary (`maxima`), as Kafka's `fetchOffsetByTimestamp` passes over segments by their
/// largest timestamp; only the segment that answers is scanned.
pub fn find_by_timestamp(
    dir: &Path,
    segments: &[(i64, Option<u64>)],
    log_start: i64,
    below: i64,
    target: i64,
    maxima: &MaxTimestamps,
    notes: &mut Vec<String>,
) -> Result<Option<TimestampAnswer>> {
    for (base, size) in in_range(dir, segments, log_start, below, maxima) {
        let max = maxima.segment_max(dir, base, size, log_start, below)?;
        // A segment whose batches end early is scanned, to say where.
        if max.complete && max.best.is_none_or(|(t, _)| t < target) {
            continue;
        }
        let log = dir.join(segment::file_name(base, "log"));
        let (expect, pos) = start_in_segment(dir, base, target, notes);
        let range = (log_start, below);
        let mut scan = scan_segment(&log, size, pos, expect, target, range)?;
        if matches!(scan, SegmentScan::BadStart) {
            notes.push(format!(
                "the indexes of `{}` do not point at a batch start for timestamp {target}; scanned the segment from its start (run `verify`)",
                log.display()
            ));
            scan = scan_segment(&log, size, 0, None, target, range)?;
        }
        match scan {
            SegmentScan::Found { offset, timestamp } => {
                return Ok(Some(TimestampAnswer::Found { offset, timestamp }));
            }
            SegmentScan::Beyond => break,
            _ => {}
        }
    }
    Ok(None)
}

/// The segments of `segments` that may hold offsets in `[log_start, below)`, in order;
/// `maxima` forgets the segments of `dir` that are gone.
fn in_range(
    dir: &Path,
    segments: &[(i64, Option<u64>)],
    log_start: i64,
    below: i64,
    maxima: &MaxTimestamps,
) -> Vec<(i64, Option<u64>)> {
    let bases: Vec<i64> = segments.iter().map(|s| s.0).collect();
    maxima.retain(dir, &bases);
    segments
        .iter()
        .enumerate()
        // A segment that ends below the log start holds nothing to answer with.
        .filter(|(i, _)| segments.get(i + 1).is_none_or(|next| next.0 > log_start))
        .map(|(_, s)| *s)
        .take_while(|&(base, _)| base < below)
        .collect()
}

/// ListOffsets' MAX_TIMESTAMP (KIP-734): the first record in `[log_start, below)` with the
/// largest timestamp, as (offset, timestamp); `None` for an empty range. `segments` as for
/// [`find_by_timestamp`]. The segments are compared by their largest timestamp in range
/// ([`MaxTimestamps`], Kafka's `maxTimestampSoFar`); then only the winning batch's records
/// are read.
pub fn find_max_timestamp(
    dir: &Path,
    segments: &[(i64, Option<u64>)],
    log_start: i64,
    below: i64,
    maxima: &MaxTimestamps,
) -> Result<Option<(i64, i64)>> {
    // The first batch with the largest max timestamp, and where it is.
    let mut best: Option<(i64, std::path::PathBuf, Option<u64>, u64)> = None;
    for (base, size) in in_range(dir, segments, log_start, below, maxima) {
        let found = maxima.segment_max(dir, base, size, log_start, below)?.best;
        if let Some((t, at)) = found
            && best.as_ref().is_none_or(|(ts, ..)| t > *ts)
        {
            best = Some((t, dir.join(segment::file_name(base, "log")), size, at));
        }
    }
    let Some((max, log, size, at)) = best else {
        return Ok(None);
    };
    let mut reader = open_reader(&log, size)?.starting_at(at);
    let Some((h, _)) = reader.next_batch()? else {
        bail!(
            "`{}` byte {at}: the batch read before is gone",
            log.display()
        );
    };
    let (crc, b) = reader.checked_batch(h.magic == 2)?;
    if let Err(e) = crc {
        bail!(
            "`{}` byte {at}: batch {}..{} fails its checksum ({e}) (run `verify`)",
            log.display(),
            h.base_offset,
            h.last_offset
        );
    }
    if h.magic < 2 {
        return Ok(Some((h.base_offset.max(log_start), max)));
    }
    let block = decompressed(&log, at, &h, b)?;
    let mut visible_last = None;
    for r in RecordIter::new(&h, base_timestamp(b), &block) {
        let r = r.with_context(|| undecodable(&h, at, &log))?;
        if r.offset < log_start || r.offset >= below {
            continue;
        }
        if r.timestamp == max {
            return Ok(Some((r.offset, max)));
        }
        visible_last = Some(r.offset);
    }
    // A batch whose header claims a timestamp none of its records has: its last record, as
    // Kafka answered before it looked inside batches.
    Ok(visible_last.map(|o| (o, max)))
}

/// The records block of batch `h` (its bytes `b`, at byte `at` of `log`), decompressed;
/// the error names the batch and where it is.
fn decompressed<'a>(
    log: &Path,
    at: u64,
    h: &crate::record::BatchHeader,
    b: &'a [u8],
) -> Result<std::borrow::Cow<'a, [u8]>> {
    records_block(h, b, MAX_DECOMPRESSED).map_err(|e| {
        anyhow!(
            "cannot decompress the records of batch {}..{} at byte {at} of `{}`: {e}",
            h.base_offset,
            h.last_offset,
            log.display()
        )
    })
}

fn open_reader(log: &Path, size: Option<u64>) -> Result<SegmentReader> {
    Ok(match size {
        None => SegmentReader::open(log)?,
        Some(size) => {
            let file = std::fs::File::open(log)
                .with_context(|| format!("failed to open `{}`", log.display()))?;
            SegmentReader::new(file, log, 0, size)
        }
    })
}

/// Where to start scanning segment `base` for `target`: the last offset of the batch expected
/// there (when an index entry was used) and its byte position.
fn start_in_segment(
    dir: &Path,
    base: i64,
    target: i64,
    notes: &mut Vec<String>,
) -> (Option<i64>, u64) {
    let time_path = dir.join(segment::file_name(base, "timeindex"));
    let index_path = dir.join(segment::file_name(base, "index"));
    if !time_path.exists() || !index_path.exists() {
        return (None, 0);
    }
    let looked_up = time_index::lookup_file(&time_path, base, target).and_then(|entry| {
        entry
            .map(|(_, offset)| offset_index::lookup_file(&index_path, base, offset))
            .transpose()
    });
    match looked_up {
        Ok(Some((offset, pos))) if pos > 0 => (Some(offset), u64::from(pos)),
        Ok(_) => (None, 0),
        Err(e) => {
            notes.push(format!("{e:#}; scanned the segment from its start"));
            (None, 0)
        }
    }
}

/// Scans the segment `log` (its first `size` bytes when given) from byte `pos` (where the
/// batch ending at `expect` starts, when given) for the first record in `[log_start, below)`
/// with a timestamp ≥ `target`.
fn scan_segment(
    log: &Path,
    size: Option<u64>,
    pos: u64,
    expect: Option<i64>,
    target: i64,
    (log_start, below): (i64, i64),
) -> Result<SegmentScan> {
    let mut reader = open_reader(log, size)?.starting_at(pos);
    let mut first = true;
    while let Some((h, at)) = reader.next_batch()? {
        if first && expect.is_some_and(|last| h.last_offset != last) {
            return Ok(SegmentScan::BadStart);
        }
        first = false;
        if h.base_offset >= below {
            return Ok(SegmentScan::Beyond);
        }
        if h.last_offset < log_start {
            continue;
        }
        let wanted = h.max_timestamp >= target;
        let (crc, b) = reader.checked_batch(wanted && h.magic == 2)?;
        if let Err(e) = crc {
            bail!(
                "`{}` byte {at}: batch {}..{} fails its checksum ({e}); no answer past it (run `verify`)",
                log.display(),
                h.base_offset,
                h.last_offset
            );
        }
        if !wanted {
            continue;
        }
        if h.magic < 2 {
            if h.is_legacy_wrapper() {
                bail!(
                    "`{}` byte {at}: the compressed magic {} message set at offset {} is not read here; no answer past it",
                    log.display(),
                    h.magic,
                    h.last_offset
                );
            }
            if h.base_offset >= log_start && h.base_offset < below {
                return Ok(SegmentScan::Found {
                    offset: h.base_offset,
                    timestamp: h.max_timestamp,
                });
            }
            continue;
        }
        let block = decompressed(log, at, &h, b)?;
        for r in RecordIter::new(&h, base_timestamp(b), &block) {
            let r = r.with_context(|| undecodable(&h, at, log))?;
            if r.offset >= below {
                return Ok(SegmentScan::Beyond);
            }
            if r.timestamp >= target && r.offset >= log_start {
                return Ok(SegmentScan::Found {
                    offset: r.offset,
                    timestamp: r.timestamp,
                });
            }
        }
    }
    if first && expect.is_some() {
        return Ok(SegmentScan::BadStart);
    }
    match reader.end() {
        Some(SetEnd::Partial { bytes }) => bail!(
            "`{}`: a partial batch of {bytes} bytes at byte {}; no answer past it (run `verify`)",
            log.display(),
            reader.position()
        ),
        Some(SetEnd::Corrupt { position, reason }) => bail!(
            "`{}` byte {position}: {reason}; no answer past it (run `verify`)",
            log.display()
        ),
        _ => Ok(SegmentScan::NotHere),
    }
}

/// An offset or time index read whole, to be checked against its segment (its size is
/// bounded by the segment's index cadence, not by its bytes): the file's length and the
/// entries kept, or why it could not be read.
#[derive(Debug)]
pub struct IndexFile<E> {
    pub path: PathBuf,
    pub read: std::io::Result<(usize, Vec<E>)>,
}

/// The `.index` of the segment at `base` in `dir`: (offset, position) entries that `keep`.
pub fn read_offset_index(
    dir: &Path,
    base: i64,
    keep: impl Fn(&(i64, u32)) -> bool,
) -> IndexFile<(i64, u32)> {
    read_index(dir, base, "index", |b| {
        offset_index::decode_entries(b, base)
            .filter(&keep)
            .collect()
    })
}

/// The `.timeindex` of the segment at `base` in `dir`: (timestamp, offset) entries that
/// `keep`.
pub fn read_time_index(
    dir: &Path,
    base: i64,
    keep: impl Fn(&(i64, i64)) -> bool,
) -> IndexFile<(i64, i64)> {
    read_index(dir, base, "timeindex", |b| {
        time_index::decode_entries(b, base).filter(&keep).collect()
    })
}

fn read_index<E>(
    dir: &Path,
    base: i64,
    suffix: &str,
    decode: impl FnOnce(&[u8]) -> Vec<E>,
) -> IndexFile<E> {
    let path = dir.join(segment::file_name(base, suffix));
    let read = std::fs::read(&path).map(|b| (b.len(), decode(&b)));
    IndexFile { path, read }
}

/// The error context of records that do not decode: the batch, where it is and its segment.
fn undecodable(h: &BatchHeader, at: u64, log: &Path) -> String {
    format!(
        "cannot decode the records of batch {}..{} at byte {at} of `{}`",
        h.base_offset,
        h.last_offset,
        log.display()
    )
}
