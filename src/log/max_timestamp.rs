//! The largest timestamp of a segment, for readers outside the partition lock (ListOffsets'
//! MAX_TIMESTAMP and by-timestamp look-ups): Kafka's `LogSegment.maxTimestampSoFar`, which
//! `UnifiedLog.fetchOffsetByTimestamp` compares segment by segment, so that a look-up costs
//! per segment, not per batch.
//!
//! [`MaxTimestamps::segment_max`] answers for one segment and an offset range
//! `[lo, below)`: the first batch, in file order, with the largest max timestamp among the
//! batches holding offsets in the range. It works from a summary of a prefix of the file —
//! (end position, last batch's header, best batch so far) — kept per segment file and
//! extended as the file grows (the active segment) and as `below` (a high watermark, a last
//! stable offset) moves up; only the bytes past the summary are read.
//!
//! A segment not summarized yet starts from its indexes, as Kafka's segment does when it
//! opens (and as [`super::format::segment::Segment`] rebuilds its own maximum): every time-index
//! entry but a segment's final one was written with an offset-index entry and holds the
//! largest timestamp of the batches up to that entry's batch and the last offset of the
//! first batch that reached it. So the summary up to the last offset-index entry is the
//! time index's last entry at or below it; only the batches after it are read. The batch
//! the entry names is found (offset index, then the batches from there) only if it wins, and
//! a batch that is not there or does not carry that timestamp discards the indexes: the
//! segment is then read from its start.
//!
//! A summary holds for the file it was made from: a different file (inode), or a file whose
//! last summarized batch is no longer where it was (truncated, rewritten), starts afresh.
//! Two summaries are kept per segment, for the two bounds readers use (the high watermark
//! and the last stable offset, which may lag it); summaries of segments no longer in the
//! partition are dropped when the partition is next looked at. Memory: a few words per
//! segment.

use super::format::segment_reader::SegmentReader;
use super::format::{offset_index, segment, time_index};
use crate::record::BatchHeader;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where the first batch with the best timestamp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Its byte position.
    Position(u64),
    /// Its last offset (from the time index), not looked up yet.
    LastOffset(i64),
}

/// What the batches of a file's prefix hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    /// The byte position after the last batch summarized.
    end: u64,
    /// The last batch summarized and its position; `None` for an empty prefix.
    last: Option<(BatchHeader, u64)>,
    /// The largest max timestamp of the batches in range, and where its first batch is.
    best: Option<(i64, At)>,
}

impl Prefix {
    const EMPTY: Prefix = Prefix {
        end: 0,
        last: None,
        best: None,
    };

    /// Whether every batch summarized starts below `below` (so the summary holds for it).
    fn holds_below(&self, below: i64) -> bool {
        self.last.is_none_or(|(h, _)| h.base_offset < below)
    }

    fn take(&mut self, h: &BatchHeader, at: u64, lo: i64) {
        if h.last_offset >= lo && self.best.is_none_or(|(t, _)| h.max_timestamp > t) {
            self.best = Some((h.max_timestamp, At::Position(at)));
        }
        self.end = at + h.size_in_bytes as u64;
        self.last = Some((*h, at));
    }
}

/// The summaries of one segment file.
#[derive(Debug)]
struct Summaries {
    /// (device, inode) of the file they were made from.
    file: (u64, u64),
    /// The lower bound of the range they were made for (`i64::MIN`: the whole segment).
    lo: i64,
    /// At most two, newest last.
    prefixes: Vec<Prefix>,
}

/// What [`MaxTimestamps::segment_max`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentMax {
    /// (timestamp, byte position) of the first batch with the largest max timestamp in
    /// range; `None` when the range holds no batch of the segment.
    pub best: Option<(i64, u64)>,
    /// The batches were read to `below` or to the end of the bytes asked for; `false` when
    /// a batch that is not whole or not sane ended them first.
    pub complete: bool,
}

/// Summaries per partition directory, then per segment base offset; shared by every reader
/// of a [`crate::serve`] listener (a mutex held only to copy a summary in or out, never
/// across a read).
#[derive(Debug, Default)]
pub struct MaxTimestamps {
    dirs: Mutex<HashMap<PathBuf, HashMap<i64, Summaries>>>,
}

impl MaxTimestamps {
    fn dirs(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, HashMap<i64, Summaries>>> {
        self.dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the summaries of the segments of `dir` that are not among `bases` (deleted by
    /// retention or truncation).
    pub fn retain(&self, dir: &Path, bases: &[i64]) {
        if let Some(segments) = self.dirs().get_mut(dir) {
            segments.retain(|b, _| bases.binary_search(b).is_ok());
        }
    }

    /// The first batch with the largest max timestamp among the batches of the segment at
    /// `base` in `dir` — its first `size` bytes, `None`: the whole file — that hold offsets
    /// in `[lo, below)`.
    pub fn segment_max(
        &self,
        dir: &Path,
        base: i64,
        size: Option<u64>,
        lo: i64,
        below: i64,
    ) -> Result<SegmentMax> {
        let log = dir.join(segment::file_name(base, "log"));
        let file = std::fs::File::open(&log)
            .with_context(|| format!("failed to open `{}`", log.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("failed to stat `{}`", log.display()))?;
        let id = (meta.dev(), meta.ino());
        let size = size.unwrap_or(meta.len());
        // Batches of a segment end at or above its base: a bound at or below it cuts nothing.
        let lo = if lo <= base { i64::MIN } else { lo };
        let seg = Bytes {
            file,
            log: &log,
            size,
        };
        let cached = self.cached(dir, base, id, lo, below, size);
        let mut prefix = match cached.map(|p| still_there(&seg, p)) {
            Some(Ok(true)) => cached.unwrap_or(Prefix::EMPTY),
            Some(Err(e)) => return Err(e),
            _ if lo == i64::MIN => from_indexes(dir, base, &seg, below)?.unwrap_or(Prefix::EMPTY),
            _ => Prefix::EMPTY,
        };
        let complete = extend(&mut prefix, &seg, lo, below)?;
        if let Some((t, At::LastOffset(o))) = prefix.best {
            match find_batch(dir, base, &seg, o, t)? {
                Some(at) => prefix.best = Some((t, At::Position(at))),
                None => {
                    crate::log_debug!(
                        "`{}`: its time index names offset {o} at timestamp {t}, which no batch there has; read from its start",
                        log.display()
                    );
                    prefix = Prefix::EMPTY;
                    extend(&mut prefix, &seg, lo, below)?;
                }
            }
        }
        self.store(dir, base, id, lo, cached, prefix);
        let best = match prefix.best {
            Some((t, At::Position(at))) => Some((t, at)),
            _ => None,
        };
        Ok(SegmentMax { best, complete })
    }

    /// The longest summary of the segment file `id` for `lo` that holds below `below` and
    /// within `size` bytes.
    fn cached(
        &self,
        dir: &Path,
        base: i64,
        id: (u64, u64),
        lo: i64,
        below: i64,
        size: u64,
    ) -> Option<Prefix> {
        let dirs = self.dirs();
        let s = dirs.get(dir)?.get(&base)?;
        if s.file != id || s.lo != lo {
            return None;
        }
        s.prefixes
            .iter()
            .filter(|p| p.end <= size && p.holds_below(below))
            .max_by_key(|p| p.end)
            .copied()
    }

    /// Keeps `prefix` for the file `id` in place of `replaced` (the summary it grew from).
    fn store(
        &self,
        dir: &Path,
        base: i64,
        id: (u64, u64),
        lo: i64,
        replaced: Option<Prefix>,
        prefix: Prefix,
    ) {
        let mut dirs = self.dirs();
        let segments = dirs.entry(dir.to_path_buf()).or_default();
        let s = segments.entry(base).or_insert_with(|| Summaries {
            file: id,
            lo,
            prefixes: Vec::new(),
        });
        if s.file != id || s.lo != lo {
            *s = Summaries {
                file: id,
                lo,
                prefixes: Vec::new(),
            };
        }
        s.prefixes.retain(|p| Some(*p) != replaced && *p != prefix);
        s.prefixes.push(prefix);
        if s.prefixes.len() > 2 {
            s.prefixes.remove(0);
        }
    }
}

/// The bytes of a segment file a look-up reads.
struct Bytes<'a> {
    file: std::fs::File,
    log: &'a Path,
    size: u64,
}

impl Bytes<'_> {
    /// A reader of the bytes from byte `at` (a batch start).
    fn reader(&self, at: u64) -> Result<SegmentReader> {
        let file = self
            .file
            .try_clone()
            .with_context(|| format!("failed to open `{}`", self.log.display()))?;
        Ok(SegmentReader::new(file, self.log, at, self.size))
    }
}

/// Whether the last batch `prefix` summarized is still where it was, as it was.
fn still_there(seg: &Bytes<'_>, prefix: Prefix) -> Result<bool> {
    let Some((h, at)) = prefix.last else {
        return Ok(true);
    };
    Ok(matches!(seg.reader(at)?.next_batch()?, Some((now, _)) if now == h))
}

/// Adds the batches after `prefix` that start below `below`; whether they ended there or at
/// the end of the bytes read (not at a batch that is not whole or not sane).
fn extend(prefix: &mut Prefix, seg: &Bytes<'_>, lo: i64, below: i64) -> Result<bool> {
    let mut r = seg.reader(prefix.end)?;
    while let Some((h, at)) = r.next_batch()? {
        if h.base_offset >= below {
            return Ok(true);
        }
        prefix.take(&h, at, lo);
    }
    Ok(matches!(r.end(), Some(crate::record::SetEnd::Complete)))
}

/// The summary of the segment up to its last offset-index entry's batch, from its indexes
/// (see the module doc); `None` when they give none, or one that does not hold below
/// `below`.
fn from_indexes(dir: &Path, base: i64, seg: &Bytes<'_>, below: i64) -> Result<Option<Prefix>> {
    let index = dir.join(segment::file_name(base, "index"));
    let time = dir.join(segment::file_name(base, "timeindex"));
    let Ok(offsets) = offset_index::OffsetIndex::open_evicted(&index, base, seg.size) else {
        return Ok(None);
    };
    let Some((covered, pos)) = offsets.last_entry() else {
        return Ok(None);
    };
    let Ok(entries) = time_index::last_two_file(&time, base) else {
        return Ok(None);
    };
    // Only a segment's final entry may lie past its last offset-index entry.
    let Some(&(t, o)) = entries.iter().rev().find(|(_, o)| *o <= covered) else {
        return Ok(None);
    };
    let at = u64::from(pos);
    match seg.reader(at)?.next_batch()? {
        Some((h, _))
            if h.last_offset == covered && h.base_offset < below && h.max_timestamp <= t =>
        {
            Ok(Some(Prefix {
                end: at + h.size_in_bytes as u64,
                last: Some((h, at)),
                best: Some((t, At::LastOffset(o))),
            }))
        }
        _ => Ok(None),
    }
}

/// The position of the batch ending at `last_offset` if it carries `timestamp` as its max.
fn find_batch(
    dir: &Path,
    base: i64,
    seg: &Bytes<'_>,
    last_offset: i64,
    timestamp: i64,
) -> Result<Option<u64>> {
    let index = dir.join(segment::file_name(base, "index"));
    let from = match offset_index::lookup_file(&index, base, last_offset) {
        Ok((_, pos)) => u64::from(pos),
        Err(_) => 0,
    };
    for start in [from, 0] {
        let mut r = seg.reader(start)?;
        let mut first = true;
        while let Some((h, at)) = r.next_batch()? {
            // An index position that is not a batch start before the one looked for: ignored.
            if first && start > 0 && h.last_offset > last_offset {
                break;
            }
            first = false;
            if h.last_offset == last_offset {
                return Ok((h.max_timestamp == timestamp).then_some(at));
            }
            if h.last_offset > last_offset {
                return Ok(None);
            }
        }
        if start == 0 {
            break;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::segment::Segment;
    use crate::log::format::segment_reader::HEADERS_READ;
    use crate::record::records::{NewRecord, build_v2_batch};

    /// A segment at `base` in `dir` of `batches` batches of 1 to 3 records with timestamps
    /// that wander up and down (ties too), an index entry every `interval` bytes; rolled
    /// (a final time-index entry) when `rolled`.
    fn write_segment(
        dir: &Path,
        base: i64,
        batches: usize,
        interval: u64,
        rolled: bool,
        seed: u64,
    ) {
        let mut seg = Segment::create(dir, base, interval, 0).unwrap();
        let mut x = seed;
        for _ in 0..batches {
            let n = 1 + (x % 3) as usize;
            let ts: Vec<i64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    1_000 + ((x >> 33) % 400) as i64
                })
                .collect();
            let recs: Vec<NewRecord<'_>> = ts
                .iter()
                .map(|&t| NewRecord {
                    key: None,
                    value: Some(b"value"),
                    timestamp: t,
                })
                .collect();
            let b = build_v2_batch(seg.next_offset(), 0, &recs);
            let h = BatchHeader::parse(&b, usize::MAX).unwrap();
            seg.append(&b, &[h]).unwrap();
        }
        if rolled {
            seg.on_become_inactive().unwrap();
        }
        seg.flush().unwrap();
    }

    /// Every batch header of the segment, in order, with its position.
    fn headers(dir: &Path, base: i64) -> Vec<(BatchHeader, u64)> {
        let mut r = SegmentReader::open(&dir.join(segment::file_name(base, "log"))).unwrap();
        let mut out = Vec::new();
        while let Some(b) = r.next_batch().unwrap() {
            out.push(b);
        }
        out
    }

    /// The answer read from every header.
    fn reference(all: &[(BatchHeader, u64)], lo: i64, below: i64) -> Option<(i64, u64)> {
        let mut best: Option<(i64, u64)> = None;
        for (h, at) in all {
            if h.base_offset >= below {
                break;
            }
            if h.last_offset >= lo && best.is_none_or(|(t, _)| h.max_timestamp > t) {
                best = Some((h.max_timestamp, *at));
            }
        }
        best
    }

    #[test]
    fn the_summary_answers_as_every_header_does_whatever_the_bounds_and_indexes() {
        let tmp = tempfile::tempdir().unwrap();
        for (i, (interval, rolled)) in [(1, true), (300, true), (300, false), (1 << 30, false)]
            .into_iter()
            .enumerate()
        {
            let dir = tmp.path().join(format!("t-{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            write_segment(&dir, 100, 120, interval, rolled, i as u64 + 7);
            let all = headers(&dir, 100);
            let end = all.last().unwrap().0.last_offset + 1;
            let shared = MaxTimestamps::default();
            let bounds = [
                i64::MIN,
                100,
                101,
                150,
                160,
                200,
                230,
                end - 1,
                end,
                i64::MAX,
            ];
            // Bounds rising, then falling, then mixed: summaries are reused, extended and
            // passed over.
            let mut pairs: Vec<(i64, i64)> = Vec::new();
            for &below in &bounds {
                for &lo in &[i64::MIN, 100, 130, 170, 250] {
                    pairs.push((lo, below));
                }
            }
            let reversed: Vec<_> = pairs.iter().rev().copied().collect();
            pairs.extend(reversed);
            for (lo, below) in pairs {
                let want = reference(&all, lo, below);
                let fresh = MaxTimestamps::default()
                    .segment_max(&dir, 100, None, lo, below)
                    .unwrap();
                let reused = shared.segment_max(&dir, 100, None, lo, below).unwrap();
                assert_eq!(fresh.best, want, "interval {interval}: [{lo}, {below})");
                assert_eq!(
                    reused.best, want,
                    "interval {interval}: [{lo}, {below}) reused"
                );
                assert!(fresh.complete && reused.complete);
            }
            // A snapshot of fewer bytes (the active segment before its last appends).
            let (h, at) = all[60];
            let size = at + h.size_in_bytes as u64;
            assert_eq!(
                shared
                    .segment_max(&dir, 100, Some(size), i64::MIN, i64::MAX)
                    .unwrap()
                    .best,
                reference(&all[..61], i64::MIN, i64::MAX)
            );
        }
    }

    #[test]
    fn a_file_cut_and_written_again_is_summarized_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write_segment(dir, 0, 80, 1 << 30, false, 1);
        let maxima = MaxTimestamps::default();
        let before = headers(dir, 0);
        assert_eq!(
            maxima
                .segment_max(dir, 0, None, i64::MIN, i64::MAX)
                .unwrap()
                .best,
            reference(&before, i64::MIN, i64::MAX)
        );
        // Replaced by another history (other timestamps), longer than the first.
        for ext in ["log", "index", "timeindex"] {
            std::fs::remove_file(dir.join(segment::file_name(0, ext))).unwrap();
        }
        write_segment(dir, 0, 90, 1 << 30, false, 99);
        let after = headers(dir, 0);
        assert_ne!(
            reference(&after, i64::MIN, i64::MAX),
            reference(&before, i64::MIN, i64::MAX)
        );
        assert_eq!(
            maxima
                .segment_max(dir, 0, None, i64::MIN, i64::MAX)
                .unwrap()
                .best,
            reference(&after, i64::MIN, i64::MAX)
        );
        // Cut in place (same inode) and written again with other batches.
        let log = dir.join(segment::file_name(0, "log"));
        let (h, at) = after[40];
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_len(at).unwrap();
        drop(f);
        let mut bytes = std::fs::read(&log).unwrap();
        let recs = [NewRecord {
            key: None,
            value: Some(b"x"),
            timestamp: 5_000,
        }];
        bytes.extend(build_v2_batch(h.base_offset, 0, &recs));
        std::fs::write(&log, &bytes).unwrap();
        let cut = headers(dir, 0);
        assert_eq!(
            maxima
                .segment_max(dir, 0, None, i64::MIN, i64::MAX)
                .unwrap()
                .best,
            Some((5_000, at))
        );
        assert_eq!(reference(&cut, i64::MIN, i64::MAX), Some((5_000, at)));
    }

    #[test]
    fn a_summarized_segment_costs_a_header_and_its_new_batches() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // No index entries: the first look-up reads every header.
        write_segment(dir, 0, 200, 1 << 30, false, 3);
        let all = headers(dir, 0);
        let maxima = MaxTimestamps::default();
        let read = |size: u64, below: i64| {
            let n0 = HEADERS_READ.with(|n| n.get());
            let got = maxima
                .segment_max(dir, 0, Some(size), i64::MIN, below)
                .unwrap();
            (got.best, HEADERS_READ.with(|n| n.get()) - n0)
        };
        let size_at = |i: usize| all[i].1 + all[i].0.size_in_bytes as u64;
        let (best, n) = read(size_at(149), i64::MAX);
        assert_eq!(best, reference(&all[..150], i64::MIN, i64::MAX));
        assert_eq!(n, 150, "the first look-up reads the 150 batches");
        let (_, n) = read(size_at(149), i64::MAX);
        assert_eq!(
            n, 1,
            "again: only the last summarized batch, to see it is there"
        );
        let (best, n) = read(size_at(199), i64::MAX);
        assert_eq!(best, reference(&all, i64::MIN, i64::MAX));
        assert_eq!(n, 1 + 50, "grown by 50 batches: those only");
    }
}
