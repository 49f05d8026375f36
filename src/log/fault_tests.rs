//! The log's write steps failed one at a time through [`crate::fault`]: each failure leaves
//! the files as they were before that write.

use crate::checkpoint::TopicPartition;
use crate::fault::{Step, arm};
use crate::log::{AppendError, LogConfig, PartitionLog, loader};
use crate::record::records::{NewRecord, build_v2_batch};
use crate::record::{BatchHeader, VerifiedBatches};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Batches of 4 records each, from offset `from`.
fn batches(from: i64, count: usize) -> (Vec<u8>, Vec<BatchHeader>) {
    let mut bytes = Vec::new();
    let mut headers = Vec::new();
    let v = [b'v'; 100];
    for i in 0..count as i64 {
        let recs: Vec<NewRecord<'_>> = (0..4)
            .map(|j| NewRecord {
                key: Some(b"k"),
                value: Some(&v),
                timestamp: 1000 + from + i * 4 + j,
            })
            .collect();
        let b = build_v2_batch(from + i * 4, 3, &recs);
        headers.push(BatchHeader::parse(&b, usize::MAX).unwrap());
        bytes.extend_from_slice(&b);
    }
    (bytes, headers)
}

fn tp() -> TopicPartition {
    TopicPartition::new("seam", 0)
}

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 200,
        ..LogConfig::default()
    }
}

/// Every file under `dir` and its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap());
        }
    }
    out
}

fn reload(data: &Path, segment_bytes: u64) -> PartitionLog {
    let hints = loader::CheckpointHints {
        recovery_point: Some(0),
        log_start_offset: None,
        high_watermark: None,
    };
    loader::load(data, &tp(), config(segment_bytes), hints, false)
        .unwrap()
        .unwrap()
        .0
}

/// The concatenated `.log` files of the partition.
fn log_bytes(data: &Path) -> Vec<u8> {
    let dir = data.join(tp().dir_name());
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.iter()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect()
}

#[test]
fn a_failed_segment_append_leaves_every_file_as_it_was_and_the_next_append_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(d.path(), &tp(), config(1 << 20), 0, None).unwrap();
    let (b1, _) = batches(0, 5);
    log.append(&VerifiedBatches::of(&b1)).unwrap();
    log.flush().unwrap();
    let before = files(d.path());
    let (b2, _) = batches(20, 5);
    arm(Step::Append, 1);
    let e = log.append(&VerifiedBatches::of(&b2)).unwrap_err();
    assert!(matches!(e, AppendError::Storage(_)), "{e}");
    assert_eq!(log.log_end_offset(), 20, "in memory too");
    log.flush().unwrap();
    assert_eq!(
        files(d.path()),
        before,
        "half a batch was written, then cut back"
    );
    log.append(&VerifiedBatches::of(&b2)).unwrap();
    log.flush().unwrap();
    drop(log);
    let log = reload(d.path(), 1 << 20);
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(log_bytes(d.path()), [b1, b2].concat());
}

#[test]
fn a_failed_roll_leaves_no_half_made_segment_and_the_next_append_rolls() {
    let d = tempfile::tempdir().unwrap();
    let (b1, _) = batches(0, 4);
    // The active segment holds exactly these batches: the next one must roll.
    let mut log = PartitionLog::create(d.path(), &tp(), config(b1.len() as u64), 0, None).unwrap();
    log.append(&VerifiedBatches::of(&b1)).unwrap();
    log.flush().unwrap();
    let before = files(d.path());
    let (b2, _) = batches(16, 2);
    arm(Step::Roll, 1);
    let e = log.append(&VerifiedBatches::of(&b2)).unwrap_err();
    assert!(matches!(e, AppendError::Storage(_)), "{e}");
    assert_eq!(
        files(d.path()),
        before,
        "the new segment's files are gone again"
    );
    assert_eq!(log.segments().count(), 1);
    log.append(&VerifiedBatches::of(&b2)).unwrap();
    assert_eq!(log.segments().count(), 2, "rolled this time");
    log.flush().unwrap();
    drop(log);
    let log = reload(d.path(), b1.len() as u64);
    assert_eq!(log.log_end_offset(), 24);
    assert_eq!(log_bytes(d.path()), [b1, b2].concat());
}

#[test]
fn a_failed_index_write_cuts_the_index_back_and_the_next_flush_writes_every_entry() {
    let d = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(d.path(), &tp(), config(1 << 20), 0, None).unwrap();
    let (b1, _) = batches(0, 6);
    log.append(&VerifiedBatches::of(&b1)).unwrap();
    log.flush().unwrap();
    let before = files(d.path());
    let (b2, _) = batches(24, 6);
    log.append(&VerifiedBatches::of(&b2)).unwrap();
    let index = d
        .path()
        .join(tp().dir_name())
        .join(super::format::segment::file_name(0, "index"));
    let entries_before = before[&index].len();
    arm(Step::Index, 1);
    assert!(log.flush().is_err());
    assert_eq!(
        std::fs::read(&index).unwrap().len(),
        entries_before,
        "half an entry was written, then cut back to the whole ones"
    );
    log.flush().unwrap();
    let after = std::fs::read(&index).unwrap();
    assert!(
        after.len() > entries_before && after.len().is_multiple_of(8),
        "{}",
        after.len()
    );
    assert!(after.starts_with(&before[&index]));
    drop(log);
    // A clean load trusts the index: it must match the batches.
    let hints = loader::CheckpointHints {
        recovery_point: Some(48),
        log_start_offset: None,
        high_watermark: None,
    };
    let (log, _) = loader::load(d.path(), &tp(), config(1 << 20), hints, true)
        .unwrap()
        .unwrap();
    assert_eq!(log.log_end_offset(), 48);
    assert_eq!(
        std::fs::read(&index).unwrap(),
        after,
        "not rebuilt: it was whole"
    );
}

/// A v2 batch of producer `pid` with `attributes` (0x10 transactional, 0x30 an ABORT
/// marker when its record is the marker's).
fn txn_batch(base: i64, pid: i64, attributes: i16, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut b = build_v2_batch(
        base,
        3,
        &[NewRecord {
            key: Some(key),
            value: Some(value),
            timestamp: 1000 + base,
        }],
    );
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

#[test]
fn a_failed_txnindex_write_takes_the_whole_append_back() {
    let d = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(d.path(), &tp(), config(1 << 20), 0, None).unwrap();
    let data = txn_batch(0, 7, 0x10, b"k", b"v");
    log.append(&VerifiedBatches::of(&data)).unwrap();
    log.flush().unwrap();
    assert_eq!(log.last_stable_offset(), 0, "a transaction is open");
    let before = files(d.path());
    // ABORT marker: key {version 0, type 0}, value {version 0, coordinator epoch 1}.
    let abort = txn_batch(1, 7, 0x30, &[0, 0, 0, 0], &[0, 0, 0, 0, 0, 1]);
    arm(Step::TxnIndex, 1);
    let e = log.append(&VerifiedBatches::of(&abort)).unwrap_err();
    assert!(matches!(e, AppendError::Storage(_)), "{e}");
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.last_stable_offset(), 0, "the transaction is still open");
    log.flush().unwrap();
    assert_eq!(files(d.path()), before, "segment and .txnindex as before");
    log.append(&VerifiedBatches::of(&abort)).unwrap();
    assert_eq!(log.last_stable_offset(), 2, "aborted this time");
    log.flush().unwrap();
    let txn = d
        .path()
        .join(tp().dir_name())
        .join(super::format::segment::file_name(0, "txnindex"));
    assert_eq!(
        std::fs::read(&txn).unwrap().len(),
        crate::log::format::txn_index::ENTRY_SIZE,
        "one whole entry"
    );
}

#[test]
fn recovery_resumed_past_the_recovery_point_keeps_the_aborted_transactions_below_it() {
    let d = tempfile::tempdir().unwrap();
    let mut cfg = config(1 << 20);
    cfg.index_interval_bytes = 1;
    let mut log = PartitionLog::create(d.path(), &tp(), cfg.clone(), 0, None).unwrap();
    let abort = |base: i64| txn_batch(base, 7, 0x30, &[0, 0, 0, 0], &[0, 0, 0, 0, 0, 1]);
    let append = |log: &mut PartitionLog, b: Vec<u8>| {
        log.append(&VerifiedBatches::of(&b)).unwrap();
    };
    // Offsets 0..5: a transaction aborted at 1, data, then (unflushed) another at 5..6.
    append(&mut log, txn_batch(0, 7, 0x10, b"k", b"v"));
    append(&mut log, abort(1));
    append(&mut log, txn_batch(2, 8, 0, b"k", b"v"));
    append(&mut log, txn_batch(3, 8, 0, b"k", b"v"));
    log.flush().unwrap();
    log.snapshot_producer_state(true).unwrap();
    let rp = log.recovery_point();
    append(&mut log, txn_batch(4, 7, 0x10, b"k", b"v"));
    append(&mut log, abort(5));
    drop(log);
    let hints = loader::CheckpointHints {
        recovery_point: Some(rp),
        log_start_offset: None,
        high_watermark: None,
    };
    let (log, _) = loader::load(d.path(), &tp(), cfg, hints, false)
        .unwrap()
        .unwrap();
    assert_eq!(log.log_end_offset(), 6);
    let txn = crate::log::format::txn_index::TxnIndex::new(
        d.path()
            .join(tp().dir_name())
            .join(super::format::segment::file_name(0, "txnindex")),
    )
    .read()
    .unwrap();
    let markers: Vec<i64> = txn.iter().map(|e| e.last_offset).collect();
    assert_eq!(markers, [1, 5], "{txn:?}");
    assert_eq!(log.last_stable_offset(), 6);
}

#[test]
fn a_truncation_failing_after_its_cut_leaves_no_figure_past_the_log_end() {
    let d = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::create(d.path(), &tp(), config(1 << 20), 0, None).unwrap();
    let (b, _) = batches(0, 2);
    log.append(&VerifiedBatches::of(&b)).unwrap();
    // Offsets 8.. in epoch 4, so that the cut changes the leader-epoch checkpoint.
    let v = [b'v'; 10];
    let recs: Vec<NewRecord<'_>> = (0..8)
        .map(|j| NewRecord {
            key: None,
            value: Some(&v),
            timestamp: 2000 + j,
        })
        .collect();
    let later = build_v2_batch(8, 4, &recs);
    log.append(&VerifiedBatches::of(&later)).unwrap();
    log.update_high_watermark(16);
    log.flush().unwrap();
    log.checkpoint_epochs().unwrap();
    assert_eq!((log.recovery_point(), log.high_watermark()), (16, 16));
    // The leader-epoch checkpoint after the cut fails.
    arm(Step::Checkpoint, 1);
    assert!(log.truncate_to(8, "test").is_err());
    let leo = log.log_end_offset();
    assert_eq!(leo, 8, "the cut happened");
    assert!(
        log.recovery_point() <= leo,
        "recovery point {}",
        log.recovery_point()
    );
    assert!(
        log.high_watermark() <= leo,
        "high watermark {}",
        log.high_watermark()
    );
    // Appending on from the cut, then flushing, syncs (and claims) the new bytes.
    let (b2, _) = batches(8, 2);
    log.append(&VerifiedBatches::of(&b2)).unwrap();
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), 16);
}

#[test]
fn a_partition_directory_made_whole_or_not_at_all_and_leftovers_of_a_crash_go() {
    let d = tempfile::tempdir().unwrap();
    // A roll failure while the directory is made: nothing of it stays.
    arm(Step::Roll, 1);
    assert!(PartitionLog::create(d.path(), &tp(), config(1 << 20), 0, None).is_err());
    assert!(files(d.path()).is_empty(), "{:?}", files(d.path()));
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    // A real log, and what a crash left while making another.
    let mut log = PartitionLog::create(d.path(), &tp(), config(1 << 20), 0, None).unwrap();
    let (b, _) = batches(0, 3);
    log.append(&VerifiedBatches::of(&b)).unwrap();
    log.flush().unwrap();
    drop(log);
    let leftover = d.path().join(".other-0.creating");
    std::fs::create_dir(&leftover).unwrap();
    std::fs::write(leftover.join("00000000000000000000.log"), b"").unwrap();
    let logs = crate::log::manager::LogManager::open(d.path(), config(1 << 20)).unwrap();
    assert!(!leftover.exists(), "the half-made directory goes");
    assert_eq!(logs.all().len(), 1, "and is no partition");
    assert_eq!(log_bytes(d.path()), b, "the real log is untouched");
}

fn round(n: i32, start: i64) -> Vec<(TopicPartition, i64, Option<crate::protocol::uuid::Uuid>)> {
    (0..n)
        .map(|p| {
            let mut id = [7u8; 16];
            id[0] = p as u8;
            (
                TopicPartition::new("round", p),
                start + i64::from(p),
                Some(crate::protocol::uuid::Uuid(id)),
            )
        })
        .collect()
}

#[test]
fn a_round_of_new_logs_costs_one_file_system_sync_and_one_data_dir_fsync() {
    let d = tempfile::tempdir().unwrap();
    let logs = crate::log::manager::LogManager::open(d.path(), config(1 << 20)).unwrap();
    // One log alone, the old way: fsyncs of its own.
    let before = crate::checkpoint::syncs_on_this_thread();
    logs.get_or_create(&tp(), 0, None).unwrap();
    let after = crate::checkpoint::syncs_on_this_thread();
    assert!(after.0 - before.0 >= 2, "{before:?} {after:?}");
    let new = round(300, 1000);
    let before = crate::checkpoint::syncs_on_this_thread();
    let made = logs.create_logs(&new);
    let after = crate::checkpoint::syncs_on_this_thread();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "300 logs: one data-dir fsync, one file-system sync"
    );
    assert!(made.iter().all(|(_, r)| r.is_ok()));
    assert_eq!(logs.all().len(), 301);
    // Asking again gives the same logs, and costs nothing.
    let before = crate::checkpoint::syncs_on_this_thread();
    assert!(logs.create_logs(&new[..3]).iter().all(|(_, r)| r.is_ok()));
    assert_eq!(crate::checkpoint::syncs_on_this_thread(), before);
    logs.checkpoint().unwrap();
    drop(logs);
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".creating")), "{names:?}");
    let logs = crate::log::manager::LogManager::open(d.path(), config(1 << 20)).unwrap();
    assert_eq!(logs.all().len(), 301);
    for (tp, start, id) in &new {
        let log = logs.get(tp).unwrap();
        let log = crate::log::manager::lock_log(&log);
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (*start, *start)
        );
        assert_eq!(log.topic_id(), *id, "{tp}");
    }
}

#[test]
fn a_failed_creation_in_a_round_leaves_nothing_of_it_and_the_others_are_made() {
    let d = tempfile::tempdir().unwrap();
    let logs = crate::log::manager::LogManager::open(d.path(), config(1 << 20)).unwrap();
    let new = round(6, 0);
    // The third log's segment (after its partition.metadata), then the fifth's
    // partition.metadata, fail.
    arm(Step::Roll, 3);
    arm(Step::Checkpoint, 5);
    let made = logs.create_logs(&new);
    let failed: Vec<i32> = made
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(tp, _)| tp.partition)
        .collect();
    assert_eq!(failed, [2, 4]);
    let mut names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("round") || n.starts_with(".round"))
        .collect();
    names.sort();
    assert_eq!(names, ["round-0", "round-1", "round-3", "round-5"]);
    assert_eq!(logs.all().len(), 4);
    // The next round makes them.
    assert!(logs.create_logs(&new).iter().all(|(_, r)| r.is_ok()));
    assert_eq!(logs.all().len(), 6);
}

#[test]
fn a_failed_checkpoint_write_leaves_the_old_file_and_no_temporary() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("recovery-point-offset-checkpoint");
    crate::checkpoint::rewrite_atomic(&p, b"old").unwrap();
    arm(Step::Checkpoint, 1);
    assert!(crate::checkpoint::rewrite_atomic(&p, b"new contents").is_err());
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
    assert_eq!(files(d.path()).len(), 1, "no temporary file left");
    crate::checkpoint::rewrite_atomic(&p, b"new contents").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"new contents");
}
