//! `replica-follower offsets`: Kafka's classic `fetchOffsetsBefore` (ListOffsets v0) answered
//! from the local log.
//!
//! Entries are (base offset, last-modified time) of every segment, plus (log end, now) when
//! the last segment is not empty. T = -1 starts at the last entry, T = -2 at the first, any
//! other T at the last entry whose time is ≤ T (none: empty answer). Walk back from there
//! taking at most N offsets, newest first; then if any is above the high watermark, drop those
//! above it and put the high watermark first.

use crate::checkpoint::{self, TopicPartition};
use crate::log::partition::list_segment_bases;
use crate::log::segment;
use anyhow::{Context, Result, bail};
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

pub fn offsets(data_dir: &Path, tp: &TopicPartition, time: i64, max: usize) -> Result<Vec<i64>> {
    let dir = data_dir.join(tp.dir_name());
    if !dir.is_dir() {
        bail!("{tp}: no partition directory `{}`", dir.display());
    }
    let bases = list_segment_bases(&dir)?;
    let mut entries = Vec::new();
    let mut last_size = 0;
    for b in &bases {
        let p = dir.join(segment::file_name(*b, "log"));
        let meta =
            std::fs::metadata(&p).with_context(|| format!("failed to stat `{}`", p.display()))?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64);
        entries.push((*b, mtime));
        last_size = meta.len();
    }
    let leo = match bases.last() {
        Some(b) => super::status::segment_end_offset(&dir, *b)?,
        None => 0,
    };
    if last_size > 0 {
        entries.push((leo, crate::log::partition::now_ms()));
    }
    let hw = checkpoint::read_offsets(&data_dir.join(checkpoint::REPLICATION_OFFSET))
        .ok()
        .and_then(|m| m.get(tp).copied())
        .unwrap_or(leo)
        .min(leo);
    Ok(offsets_before(&entries, hw, time, max))
}

#[cfg(test)]
mod tests {
    use super::*;

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
