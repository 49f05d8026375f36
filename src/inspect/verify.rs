//! `replica-follower verify`: checks a data dir end to end and lists every problem, one line
//! each: batch CRCs and offsets, the ordering rule within and across segments (gaps are fine,
//! as compaction and lost upstream offsets leave them; overlaps and offsets going backwards
//! are not), every offset- and time-index entry, `.txnindex` entries against the ABORT
//! markers, `partition.metadata`, the `diverged/` copies and the archived histories, and the
//! checkpoint files against the logs.

use super::partition_dirs;
use crate::checkpoint::{self, TopicPartition};
use crate::log::partition::list_segment_bases;
use crate::log::producer_state::ProducerState;
use crate::log::segment::{self, MAX_BATCH_SIZE};
use crate::log::txn_index::AbortedTxn;
use crate::log::{diverged, identity, txn_index};
use crate::record::records::{ControlType, control_marker};
use crate::record::{BatchIter, SetEnd, check_follows};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::path::PathBuf;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub partitions: usize,
    pub segments: usize,
    pub batches: usize,
    pub problems: Vec<String>,
    /// Log start (first segment base) and end per partition.
    pub extents: BTreeMap<TopicPartition, (i64, i64)>,
    /// Archived histories checked.
    pub archived: usize,
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b.get(..4).unwrap_or(&[0; 4]));
    u32::from_be_bytes(a)
}

fn be_i64(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b.get(..8).unwrap_or(&[0; 8]));
    i64::from_be_bytes(a)
}

/// Adds a file's problems: the first few in full, then a count, so one damaged index does
/// not bury the rest of the report.
fn report_capped(problems: &mut Vec<String>, file: &Path, bad: Vec<String>) {
    const SHOWN: usize = 3;
    let n = bad.len();
    for b in bad.into_iter().take(SHOWN) {
        problems.push(format!("{}: {b}", file.display()));
    }
    if n > SHOWN {
        problems.push(format!(
            "{}: … and {} more bad entries (rebuilt by recovery)",
            file.display(),
            n - SHOWN
        ));
    }
}

/// Checks a record-set file that is not a segment (a `diverged/` copy): every batch whole,
/// its CRC valid, the ordering rule kept, and the range its name gives.
fn verify_record_file(path: &Path, first: i64, last: i64, r: &mut VerifyReport) {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            r.problems
                .push(format!("{}: unreadable: {e}", path.display()));
            return;
        }
    };
    let mut it = BatchIter::new(&bytes, MAX_BATCH_SIZE);
    let mut prev = None;
    let mut seen = None;
    for (h, pos, b) in it.by_ref() {
        if let Err(e) = h.verify_crc(b) {
            r.problems
                .push(format!("{}: byte {pos}: {e}", path.display()));
        }
        if let Err(e) = check_follows(prev, &h) {
            r.problems
                .push(format!("{}: byte {pos}: {e}", path.display()));
        }
        prev = Some(h.last_offset);
        seen = Some((seen.map_or(h.base_offset, |(f, _)| f), h.last_offset));
    }
    if !matches!(it.end(), Some(SetEnd::Complete)) {
        r.problems.push(format!(
            "{}: does not end with a whole batch",
            path.display()
        ));
    }
    if seen != Some((first, last)) {
        r.problems.push(format!(
            "{}: holds offsets {}, its name says {first}..{last}",
            path.display(),
            seen.map_or_else(|| "none".to_string(), |(a, b)| format!("{a}..{b}"))
        ));
    }
}

fn verify_partition(data_dir: &Path, tp: &TopicPartition, r: &mut VerifyReport) -> Result<()> {
    let dir = data_dir.join(tp.dir_name());
    let end = verify_log_dir(&dir, r)?;
    r.extents.insert(tp.clone(), end);
    let end = end.1;
    if let Err(e) = identity::read_topic_id(&dir) {
        r.problems.push(format!("{e:#}"));
    }
    if let Err(e) = checkpoint::read_ranges(&dir.join(checkpoint::LOST_UPSTREAM)) {
        r.problems.push(format!("{e:#}"));
    }
    for (path, first, last) in diverged::list(&dir)? {
        verify_record_file(&path, first, last, r);
    }
    match checkpoint::read_epochs(&dir.join(checkpoint::LEADER_EPOCH)) {
        Ok(epochs) => {
            for (e, o) in epochs {
                if o > end {
                    r.problems.push(format!("{tp}: leader-epoch-checkpoint: epoch {e} starts at {o}, past the log end {end}"));
                }
            }
        }
        Err(e) => r.problems.push(format!("{e:#}")),
    }
    Ok(())
}

/// Checks the segments of one log directory (a partition's, or an archived one); returns its
/// first segment base and log end.
fn verify_log_dir(dir: &Path, r: &mut VerifyReport) -> Result<(i64, i64)> {
    let bases = list_segment_bases(dir)?;
    let mut prev_last: Option<i64> = None;
    let mut first_base = None;
    // The open transactions, replayed from the first batch as appending built them, and the
    // `.txnindex` entries each segment should have. The replay is exact only when the log
    // holds every transaction's start: no offsets lost upstream (the skip forgets open
    // transactions) and no marker of a transaction begun before the log's first batch.
    let mut replay = ProducerState::default();
    let mut exact = checkpoint::read_ranges(&dir.join(checkpoint::LOST_UPSTREAM))
        .map(|l| l.is_empty())
        .unwrap_or(false);
    let mut expected_txn: Vec<(PathBuf, Vec<AbortedTxn>, Vec<AbortedTxn>)> = Vec::new();
    for &base in &bases {
        r.segments += 1;
        first_base.get_or_insert(base);
        let log_path = dir.join(segment::file_name(base, "log"));
        let bytes = match std::fs::read(&log_path) {
            Ok(b) => b,
            Err(e) => {
                r.problems
                    .push(format!("{}: unreadable: {e}", log_path.display()));
                continue;
            }
        };
        // batch start position → (last offset, max timestamp)
        let mut starts: HashMap<u32, (i64, i64)> = HashMap::new();
        // (producer id, offset) of every ABORT marker in the segment
        let mut aborts: BTreeSet<(i64, i64)> = BTreeSet::new();
        let mut expected = Vec::new();
        let mut by_last: HashMap<i64, i64> = HashMap::new();
        let mut it = BatchIter::new(&bytes, MAX_BATCH_SIZE);
        let mut max_ts = -1;
        for (h, pos, b) in it.by_ref() {
            r.batches += 1;
            if let Err(e) = h.verify_crc(b) {
                r.problems
                    .push(format!("{}: byte {pos}: {e}", log_path.display()));
            }
            if h.last_offset < base {
                r.problems.push(format!(
                    "{}: byte {pos}: batch {}..{} lies below the segment base {base}",
                    log_path.display(),
                    h.base_offset,
                    h.last_offset
                ));
            }
            if let Err(e) = check_follows(prev_last, &h) {
                r.problems
                    .push(format!("{}: byte {pos}: {e} (overlap)", log_path.display()));
            }
            let marker = control_marker(&h, b);
            if let Some((ControlType::Abort, _)) = marker {
                aborts.insert((h.producer_id, h.base_offset));
            }
            if matches!(marker, Some((ControlType::Abort | ControlType::Commit, _)))
                && !replay.open_transactions().contains_key(&h.producer_id)
            {
                exact = false;
            }
            if h.verify_crc(b).is_ok()
                && let Some(a) = replay.update(&h, b)
            {
                expected.push(a);
            }
            prev_last = Some(h.last_offset);
            max_ts = max_ts.max(h.max_timestamp);
            starts.insert(pos as u32, (h.last_offset, h.max_timestamp));
            by_last.insert(h.last_offset, max_ts);
        }
        match it.end() {
            Some(SetEnd::Partial { bytes: n }) => {
                let at = bytes.len() - n;
                let announced = bytes
                    .get(at + 8..at + 12)
                    .map(|b| i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])) + 12);
                r.problems.push(format!(
                    "{}: partial batch at byte {at} ({n} bytes, after offset {}{}): a write torn by a crash, a damaged size field, or a file cut short",
                    log_path.display(),
                    prev_last.map_or_else(|| "none".to_string(), |l| l.to_string()),
                    announced.map_or_else(String::new, |a| format!(
                        "; its size field announces {a} bytes"
                    ))
                ))
            }
            Some(SetEnd::Corrupt { position, reason }) => r.problems.push(format!(
                "{}: corrupt batch at byte {position}: {reason}",
                log_path.display()
            )),
            _ => {}
        }
        let idx_path = dir.join(segment::file_name(base, "index"));
        match std::fs::read(&idx_path) {
            Ok(idx) => {
                if idx.len() % 8 != 0 {
                    r.problems.push(format!(
                        "{}: size {} is not a multiple of 8",
                        idx_path.display(),
                        idx.len()
                    ));
                }
                let mut bad = Vec::new();
                for (i, e) in idx.chunks_exact(8).enumerate() {
                    let off = base + i64::from(be_u32(e));
                    let pos = be_u32(e.get(4..).unwrap_or_default());
                    match starts.get(&pos) {
                        Some(&(last, _)) if last == off => {}
                        Some(&(last, _)) => bad.push(format!("entry {i} says offset {off} at byte {pos}, but the batch there ends at {last}")),
                        None if pos as usize >= bytes.len() => bad.push(format!("entry {i} (offset {off}) points at byte {pos}, past the end of the log ({} bytes)", bytes.len())),
                        None => bad.push(format!("entry {i} (offset {off}) points at byte {pos}, which is not a batch start")),
                    }
                }
                report_capped(&mut r.problems, &idx_path, bad);
            }
            Err(e) => r
                .problems
                .push(format!("{}: unreadable: {e}", idx_path.display())),
        }
        let txn_path = dir.join(segment::file_name(base, "txnindex"));
        match txn_index::read(&txn_path) {
            Ok(entries) => {
                let mut bad = Vec::new();
                let mut listed = BTreeSet::new();
                for (i, e) in entries.iter().enumerate() {
                    listed.insert((e.producer_id, e.last_offset));
                    if !aborts.contains(&(e.producer_id, e.last_offset)) {
                        bad.push(format!(
                            "entry {i}: producer {} aborted at offset {}, but the segment has no ABORT marker of that producer there",
                            e.producer_id, e.last_offset
                        ));
                    } else if e.first_offset > e.last_offset {
                        bad.push(format!(
                            "entry {i}: first offset {} is after the marker at {}",
                            e.first_offset, e.last_offset
                        ));
                    }
                }
                for (pid, off) in aborts.difference(&listed) {
                    bad.push(format!(
                        "no entry for the ABORT marker of producer {pid} at offset {off}"
                    ));
                }
                let consistent = bad.is_empty();
                report_capped(&mut r.problems, &txn_path, bad);
                if consistent {
                    expected_txn.push((txn_path.clone(), entries, std::mem::take(&mut expected)));
                }
            }
            Err(e) => r.problems.push(format!("{e:#}")),
        }
        let tix_path = dir.join(segment::file_name(base, "timeindex"));
        match std::fs::read(&tix_path) {
            Ok(tix) => {
                if tix.len() % 12 != 0 {
                    r.problems.push(format!(
                        "{}: size {} is not a multiple of 12",
                        tix_path.display(),
                        tix.len()
                    ));
                }
                let mut prev_ts = i64::MIN;
                let mut bad = Vec::new();
                for (i, e) in tix.chunks_exact(12).enumerate() {
                    let ts = be_i64(e);
                    let off = base + i64::from(be_u32(e.get(8..).unwrap_or_default()));
                    if ts <= prev_ts {
                        bad.push(format!("entry {i}: timestamp {ts} does not increase"));
                    }
                    prev_ts = ts;
                    match by_last.get(&off) {
                        Some(&t) if t >= ts => {}
                        Some(&t) => bad.push(format!("entry {i}: timestamp {ts} at offset {off} exceeds the largest timestamp {t} up to that batch")),
                        None => bad.push(format!("entry {i}: offset {off} is not the last offset of a whole batch")),
                    }
                }
                report_capped(&mut r.problems, &tix_path, bad);
            }
            Err(e) => r
                .problems
                .push(format!("{}: unreadable: {e}", tix_path.display())),
        }
    }
    if exact {
        for (path, got, want) in expected_txn {
            let bad: Vec<String> = got
                .iter()
                .zip(&want)
                .enumerate()
                .filter(|(_, (g, w))| g != w)
                .map(|(i, (g, w))| {
                    format!(
                        "entry {i}: producer {} first offset {} marker {} last stable offset {}; the log says first offset {} and last stable offset {}",
                        g.producer_id,
                        g.first_offset,
                        g.last_offset,
                        g.last_stable_offset,
                        w.first_offset,
                        w.last_stable_offset
                    )
                })
                .collect();
            report_capped(&mut r.problems, &path, bad);
        }
    }
    let start = first_base.unwrap_or(0);
    let end = prev_last
        .map_or(start, |l| l + 1)
        .max(bases.last().copied().unwrap_or(start));
    Ok((start, end))
}

pub fn verify(data_dir: &Path) -> Result<VerifyReport> {
    if !data_dir.is_dir() {
        anyhow::bail!("data dir `{}` does not exist", data_dir.display());
    }
    let mut r = VerifyReport::default();
    for tp in partition_dirs(data_dir)? {
        // A directory without segments holds no local state (status leaves it out too).
        if list_segment_bases(&data_dir.join(tp.dir_name()))?.is_empty() {
            continue;
        }
        r.partitions += 1;
        verify_partition(data_dir, &tp, &mut r)?;
    }
    if let Err(e) = identity::read_cluster_id(data_dir) {
        r.problems.push(format!("{e:#}"));
    }
    // Archived histories are checked like live logs; they are not in the checkpoints.
    for (path, _, _, _) in identity::list_archived(data_dir)? {
        r.archived += 1;
        verify_log_dir(&path, &mut r)?;
        for (file, first, last) in diverged::list(&path)? {
            verify_record_file(&file, first, last, &mut r);
        }
    }
    let has_checkpoints = [
        checkpoint::REPLICATION_OFFSET,
        checkpoint::RECOVERY_POINT,
        checkpoint::LOG_START_OFFSET,
    ]
    .iter()
    .any(|n| data_dir.join(n).exists());
    if r.partitions == 0 && !has_checkpoints {
        r.problems.push(format!(
            "`{}` holds no partition and no checkpoint file: is it a replica-follower data dir?",
            data_dir.display()
        ));
    }
    for (name, what) in [
        (checkpoint::REPLICATION_OFFSET, "high watermark"),
        (checkpoint::RECOVERY_POINT, "recovery point"),
        (checkpoint::LOG_START_OFFSET, "log start offset"),
    ] {
        match checkpoint::read_offsets(&data_dir.join(name)) {
            Ok(m) => {
                for (tp, off) in m {
                    match r.extents.get(&tp) {
                        None => r
                            .problems
                            .push(format!("{name}: {tp} has no partition directory")),
                        Some(&(start, end)) => {
                            if off > end {
                                r.problems.push(format!(
                                    "{name}: {tp} {what} {off} is past the log end {end}"
                                ));
                            }
                            if off < start && name == checkpoint::LOG_START_OFFSET {
                                r.problems.push(format!(
                                    "{name}: {tp} {what} {off} is below the first segment {start}"
                                ));
                            }
                        }
                    }
                }
            }
            Err(e) => r.problems.push(format!("{e:#}")),
        }
    }
    Ok(r)
}
