//! `replica-follower offsets`: Kafka's classic `fetchOffsetsBefore` (ListOffsets v0) answered
//! from the local log (`--time`), and the modern ListOffsets question by record timestamp
//! (`--timestamp`, [`offset_for_timestamp`]).
//!
//! ## `--time`
//!
//! Entries are (base offset, last-modified time) of every segment, plus (log end, now) when
//! the last segment is not empty. T = -1 starts at the last entry, T = -2 at the first, any
//! other T at the last entry whose time is ≤ T (none: empty answer). Walk back from there
//! taking at most N offsets, newest first; then if any is above the high watermark, drop those
//! above it and put the high watermark first.

//!
//! ## `--timestamp`
//! The log's search by timestamp, [`crate::log::reader::find_by_timestamp`], over every
//! segment of the partition directory.

use super::PartitionDir;
use crate::checkpoint::{self, TopicPartition};
use crate::log::data_dir::DataDir;
use crate::log::format::segment;
use crate::log::max_timestamp::MaxTimestamps;
use crate::log::partition::list_segment_bases;
pub use crate::log::reader::TimestampAnswer;
use crate::log::reader::find_by_timestamp;
use anyhow::{Context, Result};
use std::path::Path;

/// The pure rule. `entries` are (offset, time) in offset order.
pub fn offsets_before(
    entries: &[(i64, i64)],
    high_watermark: i64,
    time: i64,
    max: usize,
) -> Vec<i64> {
    let start = match time {
        -1 => entries.len().checked_sub(1),
        -2 => (!entries.is_empty()).then_some(0),
        t => entries.iter().rposition(|&(_, m)| m <= t),
    };
    let Some(start) = start else {
        return Vec::new();
    };
    let picked: Vec<i64> = entries
        .iter()
        .take(start + 1)
        .rev()
        .take(max)
        .map(|&(o, _)| o)
        .collect();
    if picked.iter().any(|&o| o > high_watermark) {
        let mut out = vec![high_watermark];
        out.extend(picked.into_iter().filter(|&o| o < high_watermark));
        out.truncate(max.max(1));
        return out;
    }
    picked
}

/// `tp`'s entry in the data dir's checkpoint file `name`; none for an archived history,
/// which the checkpoints do not name.
fn checkpointed(
    data_dir: &Path,
    at: &PartitionDir,
    tp: &TopicPartition,
    name: &str,
) -> Option<i64> {
    if at.archived.is_some() {
        return None;
    }
    checkpoint::read_offsets(&data_dir.join(name))
        .ok()
        .and_then(|m| m.get(tp).copied())
}

pub fn offsets(data_dir: &Path, tp: &TopicPartition, time: i64, max: usize) -> Result<Vec<i64>> {
    let at = super::partition_dir(data_dir, tp)?;
    let dir = &at.path;
    let bases = list_segment_bases(dir)?;
    let mut entries = Vec::new();
    let mut last_size = 0;
    for b in &bases {
        let p = dir.join(segment::file_name(*b, "log"));
        let meta =
            std::fs::metadata(&p).with_context(|| format!("failed to stat `{}`", p.display()))?;
        let mtime = meta.modified().map_or(0, crate::clock::ms_since_epoch);
        entries.push((*b, mtime));
        last_size = meta.len();
    }
    let leo = match bases.last() {
        Some(b) => crate::log::read_view::segment_end_offset(dir, *b)?,
        None => 0,
    };
    if last_size > 0 {
        entries.push((leo, crate::clock::now_ms()));
    }
    let hw = checkpointed(data_dir, &at, tp, DataDir::REPLICATION_OFFSET)
        .unwrap_or(leo)
        .min(leo);
    Ok(offsets_before(&entries, hw, time, max))
}

/// `offsets --timestamp T`; `notes` gets a line per index that was not trusted.
pub fn offset_for_timestamp(
    data_dir: &Path,
    tp: &TopicPartition,
    target: i64,
    notes: &mut Vec<String>,
) -> Result<TimestampAnswer> {
    let at = super::partition_dir(data_dir, tp)?;
    let dir = &at.path;
    let bases = list_segment_bases(dir)?;
    let log_start = checkpointed(data_dir, &at, tp, DataDir::LOG_START_OFFSET)
        .or_else(|| bases.first().copied())
        .unwrap_or(0);
    let spans: Vec<(i64, Option<u64>)> = bases.iter().map(|&b| (b, None)).collect();
    let maxima = MaxTimestamps::default();
    if let Some(found) =
        find_by_timestamp(dir, &spans, log_start, i64::MAX, target, &maxima, notes)?
    {
        return Ok(found);
    }
    let log_end = match bases.last() {
        Some(b) => crate::log::read_view::segment_end_offset(dir, *b)?,
        None => 0,
    };
    Ok(TimestampAnswer::None { log_end })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::segment::Segment;
    use crate::log::reader::find_max_timestamp;
    use crate::record::BatchHeader;
    use crate::record::records::tests::recompressed;
    use crate::record::records::{NewRecord, build_v2_batch};

    /// Batches of 4 records at base, base + 1, …; record timestamps from `ts`, each batch's
    /// codec cycling through all five.
    fn write_segments(data: &Path, segments: &[(i64, &[&[i64]])]) {
        // An index entry after every batch.
        write_segments_every(data, segments, 1, false);
    }

    /// As [`write_segments`], an index entry every `interval` bytes; every segment but the
    /// last rolled (its final time-index entry written) when `rolled`.
    fn write_segments_every(
        data: &Path,
        segments: &[(i64, &[&[i64]])],
        interval: u64,
        rolled: bool,
    ) {
        let dir = data.join("t-0");
        std::fs::create_dir_all(&dir).unwrap();
        let mut codec = 0;
        for (i, &(base, batches)) in segments.iter().enumerate() {
            let mut seg = Segment::create(&dir, base, interval, 0).unwrap();
            for ts in batches {
                let recs: Vec<NewRecord<'_>> = ts
                    .iter()
                    .map(|&t| NewRecord {
                        key: None,
                        value: Some(b"some value, some value"),
                        timestamp: t,
                    })
                    .collect();
                let b = recompressed(&build_v2_batch(seg.next_offset(), 0, &recs), codec, 0);
                codec = (codec + 1) % 5;
                let h = BatchHeader::parse(&b, usize::MAX).unwrap();
                seg.append(&b, &[h]).unwrap();
            }
            if rolled && i + 1 < segments.len() {
                seg.on_become_inactive().unwrap();
            }
            seg.flush().unwrap();
        }
    }

    #[test]
    fn timestamp_look_ups_read_per_segment_not_per_batch() {
        use crate::log::format::segment_reader::HEADERS_READ;
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        // 4 segments of 150 batches of 3 records (600 batches, 1,800 records); timestamps
        // wander inside a batch and grow from segment to segment; an index entry every
        // 1 KiB (some 8 batches), as a log written with a small `index_interval_bytes`.
        const SEGMENTS: i64 = 4;
        const BATCHES: i64 = 150;
        let ts: Vec<Vec<Vec<i64>>> = (0..SEGMENTS)
            .map(|s| {
                (0..BATCHES)
                    .map(|b| {
                        let t = 1_000_000 * s + 100 * b;
                        vec![t + 7, t, t + (b * 37) % 50]
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<Vec<&[i64]>> = ts
            .iter()
            .map(|s| s.iter().map(Vec::as_slice).collect())
            .collect();
        let segments: Vec<(i64, &[&[i64]])> = refs
            .iter()
            .enumerate()
            .map(|(s, b)| (s as i64 * BATCHES * 3, b.as_slice()))
            .collect();
        write_segments_every(data, &segments, 1024, true);
        let dir = data.join("t-0");
        let spans: Vec<(i64, Option<u64>)> = segments.iter().map(|s| (s.0, None)).collect();
        let end = SEGMENTS * BATCHES * 3;
        let headers = |f: &mut dyn FnMut()| {
            let n0 = HEADERS_READ.with(|n| n.get());
            f();
            HEADERS_READ.with(|n| n.get()) - n0
        };
        // A few headers per segment, and at most one segment's batches more (the segment
        // holding a high watermark or log start that cuts it): not the 600 batches.
        let bound = (10 * SEGMENTS + BATCHES) as u64;
        let last_batch = &ts[ts.len() - 1][ts[0].len() - 1];
        let last = *last_batch.iter().max().unwrap();
        let last_at = end - 3 + last_batch.iter().position(|&t| t == last).unwrap() as i64;
        let maxima = MaxTimestamps::default();
        // MAX_TIMESTAMP over the whole log, and below a high watermark inside the last
        // segment, each from fresh summaries (a listener's first look-up) and again.
        for below in [end, end - 40 * 3 - 1] {
            for maxima in [&MaxTimestamps::default(), &maxima] {
                let mut got = None;
                let n = headers(&mut || {
                    got = find_max_timestamp(&dir, &spans, 0, below, maxima).unwrap();
                });
                let (offset, t) = got.unwrap();
                assert!(offset < below && t <= last, "{got:?}");
                assert!(n <= bound, "MAX_TIMESTAMP below {below}: {n} headers read");
            }
        }
        let mut got = None;
        let n = headers(&mut || {
            got = find_max_timestamp(&dir, &spans, 0, end, &maxima).unwrap();
        });
        // The largest timestamp is in the last batch.
        assert_eq!(got, Some((last_at, last)));
        assert!(n <= 2 * SEGMENTS as u64 + 2, "summarized: {n} headers read");
        // By timestamp: a record of the last segment.
        let target = 1_000_000 * (SEGMENTS - 1) + 100 * 75 + 1;
        let mut notes = Vec::new();
        let mut found = None;
        let n = headers(&mut || {
            found = find_by_timestamp(&dir, &spans, 0, end, target, &maxima, &mut notes).unwrap();
        });
        assert_eq!(
            found,
            Some(TimestampAnswer::Found {
                offset: (SEGMENTS - 1) * BATCHES * 3 + 75 * 3,
                timestamp: target + 6
            })
        );
        assert!(n <= bound, "by timestamp: {n} headers read");
    }

    fn answer(data: &Path, t: i64) -> (TimestampAnswer, Vec<String>) {
        let mut notes = Vec::new();
        let a = offset_for_timestamp(data, &TopicPartition::new("t", 0), t, &mut notes).unwrap();
        (a, notes)
    }

    fn found(offset: i64, timestamp: i64) -> TimestampAnswer {
        TimestampAnswer::Found { offset, timestamp }
    }

    #[test]
    fn max_timestamp_is_the_first_record_with_the_largest_timestamp_in_range() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        // Offsets 0..3 | 3..5 | 5..8 in segment 0; 8..10 | 10..13 in segment 8. The largest,
        // 310, is inside a batch (offset 11) and again later (offset 12, not the answer).
        write_segments(
            data,
            &[
                (0, &[&[100, 90, 110], &[120, 130], &[125, 140, 135]]),
                (8, &[&[200, 150], &[300, 310, 310]]),
            ],
        );
        let dir = data.join("t-0");
        let spans = [(0, None), (8, None)];
        // Each answer from a fresh summary and from one shared by every look-up.
        let shared = MaxTimestamps::default();
        let max = |start, below| {
            let fresh = MaxTimestamps::default();
            let got = find_max_timestamp(&dir, &spans, start, below, &fresh).unwrap();
            let again = find_max_timestamp(&dir, &spans, start, below, &shared).unwrap();
            assert_eq!(got, again, "[{start}, {below})");
            got
        };
        assert_eq!(max(0, i64::MAX), Some((11, 310)));
        assert_eq!(max(0, 13), Some((11, 310)));
        // Below a high watermark of 10 (segment 8's second batch not visible): 200 at 8.
        assert_eq!(max(0, 10), Some((8, 200)));
        // Within the first segment only; a tie keeps the first batch that reached it.
        assert_eq!(max(0, 8), Some((6, 140)));
        assert_eq!(max(0, 3), Some((2, 110)));
        // Past a log start of 12, only offset 12 is left.
        assert_eq!(max(12, i64::MAX), Some((12, 310)));
        assert_eq!(max(0, 0), None);
        assert_eq!(
            find_max_timestamp(&dir, &[], 0, i64::MAX, &shared).unwrap(),
            None
        );
    }

    #[test]
    fn by_timestamp_the_first_record_at_or_after_it_through_the_indexes() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        // Timestamps go back and forth inside batches, as producers' clocks allow.
        write_segments(
            data,
            &[
                (0, &[&[100, 90, 110], &[120, 130], &[125, 140, 135]]),
                (8, &[&[200, 150], &[300, 310, 305]]),
            ],
        );
        let cases = [
            (0, found(0, 100)),
            (100, found(0, 100)),
            (101, found(2, 110)),
            (121, found(4, 130)),
            (136, found(6, 140)),
            (141, found(8, 200)),
            (160, found(8, 200)),
            (201, found(10, 300)),
            (306, found(11, 310)),
            (310, found(11, 310)),
        ];
        for (t, want) in cases {
            let (got, notes) = answer(data, t);
            assert_eq!(got, want, "T={t}");
            assert!(notes.is_empty(), "{notes:?}");
        }
        assert_eq!(answer(data, 311).0, TimestampAnswer::None { log_end: 13 });

        // The log start hides what is below it.
        std::fs::write(data.join(DataDir::LOG_START_OFFSET), "0\n1\nt 0 9\n").unwrap();
        assert_eq!(answer(data, 0).0, found(9, 150));
        assert_eq!(answer(data, 160).0, found(10, 300));
    }

    #[test]
    fn by_timestamp_an_index_that_lies_is_not_trusted() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        write_segments(data, &[(0, &[&[10, 11], &[20, 21], &[30, 31]])]);
        let index = data.join("t-0").join(segment::file_name(0, "index"));
        let mut bytes = std::fs::read(&index).unwrap();
        // Every entry now points 3 bytes into its batch.
        for e in bytes.chunks_exact_mut(8) {
            let p = u32::from_be_bytes(e[4..8].try_into().unwrap()) + 3;
            e[4..8].copy_from_slice(&p.to_be_bytes());
        }
        std::fs::write(&index, &bytes).unwrap();
        let (got, notes) = answer(data, 21);
        assert_eq!(got, found(3, 21));
        assert!(
            notes.len() == 1 && notes[0].contains("scanned the segment from its start"),
            "{notes:?}"
        );
        // Without indexes at all, the same answer.
        std::fs::remove_file(&index).unwrap();
        assert_eq!(answer(data, 21), (found(3, 21), Vec::new()));
    }

    #[test]
    fn by_timestamp_a_damaged_batch_on_the_way_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path();
        write_segments(data, &[(0, &[&[10, 11], &[20, 21]])]);
        let log = data.join("t-0").join(segment::file_name(0, "log"));
        let mut bytes = std::fs::read(&log).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&log, &bytes).unwrap();
        assert_eq!(
            answer(data, 5).0,
            found(0, 10),
            "the answer lies before the damage"
        );
        let mut notes = Vec::new();
        let e = offset_for_timestamp(data, &TopicPartition::new("t", 0), 15, &mut notes)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("00000000000000000000.log") && e.contains("batch 2..3 fails its checksum"),
            "{e}"
        );
    }

    #[test]
    fn design_example() {
        let e = [(5, 5), (8, 8), (11, 11), (14, 1_000_000)];
        assert_eq!(offsets_before(&e, 10, 12, 3), vec![10, 8, 5]);
        assert_eq!(offsets_before(&e, 10, -1, 3), vec![10, 8]);
        assert_eq!(offsets_before(&e, 10, -2, 3), vec![5]);
        assert_eq!(offsets_before(&e, 10, 4, 3), Vec::<i64>::new());
    }

    #[test]
    fn below_the_high_watermark_nothing_changes() {
        let e = [(0, 1), (100, 2), (200, 3)];
        assert_eq!(offsets_before(&e, 500, -1, 10), vec![200, 100, 0]);
        assert_eq!(offsets_before(&e, 500, 2, 1), vec![100]);
    }
}
