//! Tests of [`PartitionLog`]'s own behaviour: appends and rolls, the append rule, truncation
//! and the `diverged/` copies it keeps, skipping offsets lost upstream, the log start and
//! retention, flushes outside the lock, and which segments keep their indexes in memory.
//! Loading and recovery are tested in `loader.rs`, with the builders here.

use super::loader::{CheckpointHints, load};
use super::partition::{LogConfig, PartitionLog, list_segment_bases};
use crate::checkpoint::TopicPartition;
use crate::record::records::{NewRecord, build_v2_batch};
use crate::record::verified::follow;
use crate::record::{BatchHeader, VerifiedBatches};
use std::path::Path;

/// A log config rolling at `segment_bytes`, with an offset index entry every 300 bytes.
pub(super) fn cfg(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 300,
        ..LogConfig::default()
    }
}

/// `count` batches of four records from offset `from` in leader epoch `epoch`: their bytes
/// back to back, and their headers.
pub(super) fn batches(from: i64, count: usize, epoch: i32) -> (Vec<u8>, Vec<BatchHeader>) {
    let mut bytes = Vec::new();
    let mut headers = Vec::new();
    let v = [b'v'; 50];
    for i in 0..count as i64 {
        let recs: Vec<NewRecord<'_>> = (0..4)
            .map(|j| NewRecord {
                key: Some(b"k"),
                value: Some(&v),
                timestamp: 1000 + (from + i * 4 + j),
            })
            .collect();
        let b = build_v2_batch(from + i * 4, epoch, &recs);
        headers.push(BatchHeader::parse(&b, usize::MAX).unwrap());
        bytes.extend_from_slice(&b);
    }
    (bytes, headers)
}

pub(super) fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// An empty log of [`tp`] starting at offset 0.
pub(super) fn new_log(dir: &Path, segment_bytes: u64) -> PartitionLog {
    PartitionLog::create(dir, &tp(), cfg(segment_bytes), 0, None).unwrap()
}

/// Checkpoint hints holding only a recovery point.
pub(super) fn hints(rp: Option<i64>) -> CheckpointHints {
    CheckpointHints {
        recovery_point: rp,
        log_start_offset: None,
        high_watermark: None,
    }
}

/// One one-record batch per offset in `from..from + n`, each appended alone.
fn append(log: &mut PartitionLog, from: i64, n: i64) {
    for i in 0..n {
        let b = build_v2_batch(
            from + i,
            0,
            &[NewRecord {
                key: None,
                value: Some(b"v"),
                timestamp: 1,
            }],
        );
        log.append(&VerifiedBatches::of(&b)).unwrap();
    }
}

#[test]
fn a_flush_outside_the_lock_covers_only_what_it_synced() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(
        dir.path(),
        &TopicPartition::new("t", 0),
        LogConfig::default(),
        0,
        None,
    )
    .unwrap();
    append(&mut log, 0, 10);
    let t = log.begin_flush().unwrap().expect("something to flush");
    append(&mut log, 10, 5); // appended while the fsync runs
    t.sync().unwrap();
    log.finish_flush(t);
    assert_eq!(
        log.recovery_point(),
        10,
        "only the offsets before the flush began"
    );
    // A truncation between begin and finish voids the ticket.
    let t = log.begin_flush().unwrap().expect("something to flush");
    log.truncate_to(12, "test").unwrap();
    append(&mut log, 12, 8);
    t.sync().unwrap();
    log.finish_flush(t);
    assert_eq!(log.recovery_point(), 10);
    assert!(log.begin_flush().unwrap().is_some());
    log.flush().unwrap();
    assert!(
        log.begin_flush().unwrap().is_none(),
        "nothing left to flush"
    );
    assert_eq!(log.recovery_point(), 20);
}

#[test]
fn one_append_rolls_segments_at_segment_bytes_and_keeps_bytes_verbatim() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), 2048);
    let (bytes, _) = batches(0, 40, 1);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    assert_eq!(log.log_end_offset(), 160);
    assert!(log.summary().segments > 3, "{:?}", log.summary());
    for s in log.segments() {
        assert!(s.size() <= 2048, "segment over segment_bytes");
    }
    assert_eq!(log.read_all().unwrap(), bytes);
    // segment files are named by the base offset of their first batch
    let bases: Vec<i64> = log.segments().map(|s| s.base_offset).collect();
    assert_eq!(bases[0], 0);
    assert!(bases.iter().all(|b| b % 4 == 0));
}

#[test]
fn appends_that_do_not_continue_the_log_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), 1 << 20);
    let (bytes, _) = batches(0, 2, 0);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    assert!(
        log.append(&VerifiedBatches::of(&bytes)).is_err(),
        "same offsets again"
    );
    // Batches out of order never become verified batches the log could take.
    let (b2, h2) = batches(8, 2, 0);
    let (first, second) = b2.split_at(h2[0].size_in_bytes);
    let swapped = [second, first].concat();
    assert!(
        follow(&tp(), 8, Some(8), i64::MAX, &swapped).is_err(),
        "out of order"
    );
    assert_eq!(log.log_end_offset(), 8);
}

#[test]
fn truncation_below_the_high_watermark_keeps_the_removed_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), 2048);
    let (bytes, headers) = batches(0, 30, 0);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    log.update_high_watermark(120);
    log.truncate_to(50, "test").unwrap();
    assert_eq!(
        log.log_end_offset(),
        48,
        "cut at the batch holding offset 50"
    );
    assert_eq!(log.high_watermark(), 48);
    let kept: usize = headers.iter().take(12).map(|h| h.size_in_bytes).sum();
    assert_eq!(log.read_all().unwrap(), bytes[..kept]);
    let diverged = dir.path().join("t-0/diverged/48-119.log");
    assert_eq!(
        std::fs::read(&diverged).unwrap(),
        bytes[kept..],
        "byte for byte"
    );
    let (more, _) = batches(48, 3, 1);
    log.append(&VerifiedBatches::of(&more)).unwrap();
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(log.latest_epoch(), Some(1));
    // Truncating again the same range with other bytes keeps both copies.
    log.update_high_watermark(60);
    log.truncate_to(48, "test").unwrap();
    let files = crate::log::format::diverged::list(&dir.path().join("t-0")).unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(std::fs::read(&files[1].0).unwrap(), more);
    assert_eq!((files[1].1, files[1].2), (48, 59));
}

#[test]
fn truncation_refuses_negative_offsets_and_below_the_first_segment_empties_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(dir.path(), &tp(), cfg(2048), 100, None).unwrap();
    let (bytes, _) = batches(100, 10, 0);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    log.update_high_watermark(140);
    assert!(log.truncate_to(-1, "test").is_err());
    assert!(log.truncate_to(i64::MIN, "test").is_err());
    assert_eq!(log.read_all().unwrap(), bytes, "nothing touched");
    // Below the first segment: the log restarts empty there, everything kept aside.
    log.truncate_to(90, "test").unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (90, 90));
    assert!(log.is_empty());
    let kept = std::fs::read(dir.path().join("t-0/diverged/100-139.log")).unwrap();
    assert_eq!(kept, bytes);
    // An empty log above the leader's end moves down to it.
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(dir.path(), &tp(), cfg(2048), 1000, None).unwrap();
    log.truncate_to(900, "test").unwrap();
    assert_eq!(log.log_end_offset(), 900);
    assert_eq!(
        list_segment_bases(&dir.path().join("t-0")).unwrap(),
        vec![900]
    );
}

#[test]
fn truncation_above_the_high_watermark_keeps_nothing_aside() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), 2048);
    let (bytes, _) = batches(0, 10, 0);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    log.update_high_watermark(20);
    log.truncate_to(24, "test").unwrap();
    assert_eq!(log.log_end_offset(), 24);
    assert!(!dir.path().join("t-0/diverged").exists());
}

#[test]
fn a_leader_start_past_the_log_end_keeps_every_batch_and_records_the_loss() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), 2048);
    let (bytes, _) = batches(0, 10, 0);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    log.update_high_watermark(40);
    log.skip_lost_upstream(100).unwrap();
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(log.lost_upstream(), &[(40, 99)]);
    let (more, _) = batches(100, 2, 0);
    log.append(&VerifiedBatches::of(&more)).unwrap();
    log.flush().unwrap();
    drop(log);
    let (log, _) = load(dir.path(), &tp(), cfg(2048), hints(Some(108)), true)
        .unwrap()
        .unwrap();
    assert_eq!(log.read_all().unwrap(), [bytes, more].concat());
    assert_eq!(log.lost_upstream(), &[(40, 99)]);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 108));
    // An empty log just moves.
    let dir = tempfile::tempdir().unwrap();
    let mut log = new_log(dir.path(), 2048);
    log.skip_lost_upstream(500).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
    assert!(log.lost_upstream().is_empty());
    assert_eq!(
        list_segment_bases(&dir.path().join("t-0")).unwrap(),
        vec![500]
    );
}

#[test]
fn log_start_and_retention_delete_whole_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(2048);
    c.retention_bytes = 4096;
    let mut log = PartitionLog::create(dir.path(), &tp(), c, 0, None).unwrap();
    let (bytes, _) = batches(0, 30, 0);
    log.append(&VerifiedBatches::of(&bytes)).unwrap();
    log.update_high_watermark(120);
    let second_base = log.segments().nth(1).unwrap().base_offset;
    log.maybe_increment_log_start_offset(second_base + 1)
        .unwrap();
    assert_eq!(log.log_start_offset(), second_base + 1);
    assert_eq!(
        log.segments().next().unwrap().base_offset,
        second_base,
        "the segment holding the new start stays"
    );
    log.apply_retention(crate::clock::now_ms()).unwrap();
    assert!(log.size_bytes() <= 4096 + 2048, "{}", log.size_bytes());
    assert!(log.log_start_offset() > second_base);
    assert_eq!(log.log_end_offset(), 120);
}

#[test]
fn inactive_segments_keep_their_index_on_disk_only_and_truncation_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let tp = TopicPartition::new("t", 0);
    let mut log = PartitionLog::create(dir.path(), &tp, cfg.clone(), 0, None).unwrap();
    let mut all = Vec::new();
    let mut headers = Vec::new();
    for i in 0..60 {
        let b = build_v2_batch(
            i,
            0,
            &[NewRecord {
                key: None,
                value: Some(&[b'x'; 80]),
                timestamp: i,
            }],
        );
        headers.push(BatchHeader::parse(&b, usize::MAX).unwrap());
        all.extend_from_slice(&b);
        log.append(&VerifiedBatches::of(&b)).unwrap();
    }
    let n = log.segments().count();
    assert!(n > 3);
    for (i, s) in log.segments().enumerate() {
        assert_eq!(
            s.offset_index.is_resident(),
            i + 1 == n,
            "only the active segment's index is in memory"
        );
        assert!(s.offset_index.entries() > 0);
    }
    log.flush().unwrap();
    drop(log);
    let (mut log, _) = load(dir.path(), &tp, cfg, CheckpointHints::default(), true)
        .unwrap()
        .unwrap();
    for (i, s) in log.segments().enumerate() {
        assert_eq!(
            s.offset_index.is_resident(),
            i + 1 == n,
            "after a clean load too"
        );
    }
    // Truncating into the second segment reads its index back and cuts exactly.
    let second = log.segments().nth(1).unwrap().base_offset;
    log.truncate_to(second + 2, "test").unwrap();
    assert_eq!(log.log_end_offset(), second + 2);
    let kept: usize = headers
        .iter()
        .take((second + 2) as usize)
        .map(|h| h.size_in_bytes)
        .sum();
    assert_eq!(log.read_all().unwrap(), all[..kept]);
    assert!(log.segments().last().unwrap().offset_index.is_resident());
}
