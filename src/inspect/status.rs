//! `replica-follower status`: one line (or JSON object) per partition, from the checkpoint
//! files and the segment files, without locking or writing anything.

use super::{json_string, partition_dirs};
use crate::checkpoint::{self, TopicPartition};
use crate::log::partition::list_segment_bases;
use crate::log::segment::{self, MAX_BATCH_SIZE};
use crate::record::BatchIter;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    pub tp: TopicPartition,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: Option<i64>,
    pub recovery_point: Option<i64>,
    pub leader_epoch: Option<i32>,
    pub segments: usize,
    pub size_bytes: u64,
}

/// The offset after the last whole batch of a segment: scans from the last sane entry of its
/// offset index (or from the start) to the end of the file.
pub fn segment_end_offset(dir: &Path, base: i64) -> Result<i64> {
    let log_path = dir.join(segment::file_name(base, "log"));
    let mut f = File::open(&log_path)
        .with_context(|| format!("failed to open `{}`", log_path.display()))?;
    let size = f
        .metadata()
        .with_context(|| format!("failed to stat `{}`", log_path.display()))?
        .len();
    let mut from = 0u64;
    if let Ok(idx) = std::fs::read(dir.join(segment::file_name(base, "index"))) {
        let n = idx.len() / 8;
        if n > 0
            && let Some(e) = idx.get((n - 1) * 8..n * 8)
        {
            let pos = u64::from(u32::from_be_bytes([e[4], e[5], e[6], e[7]]));
            if pos < size {
                from = pos;
            }
        }
    }
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(from))
        .and_then(|_| f.read_to_end(&mut tail))
        .with_context(|| format!("failed to read `{}`", log_path.display()))?;
    let mut end = base;
    let mut it = BatchIter::new(&tail, MAX_BATCH_SIZE);
    for (h, _, _) in it.by_ref() {
        end = h.last_offset + 1;
    }
    if from > 0 && end == base {
        // The index pointed somewhere odd: scan the whole segment.
        return segment_end_from_start(&log_path, base);
    }
    Ok(end)
}

fn segment_end_from_start(log_path: &Path, base: i64) -> Result<i64> {
    let bytes = std::fs::read(log_path)
        .with_context(|| format!("failed to read `{}`", log_path.display()))?;
    Ok(BatchIter::new(&bytes, MAX_BATCH_SIZE)
        .last()
        .map_or(base, |(h, _, _)| h.last_offset + 1))
}

fn read_checkpoint(path: &Path, notes: &mut Vec<String>) -> BTreeMap<TopicPartition, i64> {
    checkpoint::read_offsets(path).unwrap_or_else(|e| {
        notes.push(format!("{e:#}"));
        BTreeMap::new()
    })
}

/// Status of every partition in `data_dir`, plus notes about unreadable checkpoint files.
pub fn collect(data_dir: &Path) -> Result<(Vec<PartitionStatus>, Vec<String>)> {
    if !data_dir.is_dir() {
        anyhow::bail!("data dir `{}` does not exist", data_dir.display());
    }
    let mut notes = Vec::new();
    let hw = read_checkpoint(&data_dir.join(checkpoint::REPLICATION_OFFSET), &mut notes);
    let rp = read_checkpoint(&data_dir.join(checkpoint::RECOVERY_POINT), &mut notes);
    let ls = read_checkpoint(&data_dir.join(checkpoint::LOG_START_OFFSET), &mut notes);
    let mut out = Vec::new();
    for tp in partition_dirs(data_dir)? {
        let dir = data_dir.join(tp.dir_name());
        let bases = list_segment_bases(&dir)?;
        let Some(&first) = bases.first() else {
            continue;
        };
        let mut size = 0;
        for b in &bases {
            size +=
                std::fs::metadata(dir.join(segment::file_name(*b, "log"))).map_or(0, |m| m.len());
        }
        // The log end is in the last segment that holds a batch.
        let mut leo = first;
        for b in bases.iter().rev() {
            let end = segment_end_offset(&dir, *b)?;
            if end > *b || *b == first {
                leo = end.max(*b);
                break;
            }
        }
        let epochs =
            checkpoint::read_epochs(&dir.join(checkpoint::LEADER_EPOCH)).unwrap_or_else(|e| {
                notes.push(format!("{e:#}"));
                Vec::new()
            });
        out.push(PartitionStatus {
            log_start_offset: ls.get(&tp).copied().unwrap_or(first).max(first),
            log_end_offset: leo,
            high_watermark: hw.get(&tp).copied(),
            recovery_point: rp.get(&tp).copied(),
            leader_epoch: epochs.last().map(|&(e, _)| e),
            segments: bases.len(),
            size_bytes: size,
            tp,
        });
    }
    Ok((out, notes))
}

fn opt<T: std::fmt::Display>(v: Option<T>, null: &str) -> String {
    v.map_or_else(|| null.to_string(), |x| x.to_string())
}

pub fn render_json(parts: &[PartitionStatus]) -> String {
    let items: Vec<String> = parts
        .iter()
        .map(|p| {
            format!(
                "{{\"topic\": {}, \"partition\": {}, \"log_start_offset\": {}, \"log_end_offset\": {}, \"high_watermark\": {}, \"recovery_point\": {}, \"leader_epoch\": {}, \"segments\": {}, \"size_bytes\": {}}}",
                json_string(&p.tp.topic),
                p.tp.partition,
                p.log_start_offset,
                p.log_end_offset,
                opt(p.high_watermark, "null"),
                opt(p.recovery_point, "null"),
                opt(p.leader_epoch, "null"),
                p.segments,
                p.size_bytes
            )
        })
        .collect();
    format!("{{\"partitions\": [{}]}}", items.join(", "))
}

pub fn render_text(parts: &[PartitionStatus]) -> String {
    let mut s = format!(
        "{:<30} {:>12} {:>12} {:>12} {:>12} {:>6} {:>8} {:>14}\n",
        "PARTITION", "LOG_START", "LOG_END", "HW", "RECOVERY", "EPOCH", "SEGMENTS", "BYTES"
    );
    for p in parts {
        s.push_str(&format!(
            "{:<30} {:>12} {:>12} {:>12} {:>12} {:>6} {:>8} {:>14}\n",
            p.tp.to_string(),
            p.log_start_offset,
            p.log_end_offset,
            opt(p.high_watermark, "-"),
            opt(p.recovery_point, "-"),
            opt(p.leader_epoch, "-"),
            p.segments,
            p.size_bytes
        ));
    }
    s
}
