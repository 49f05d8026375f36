//! Tests of [`LogManager`]'s periodic passes: an idle flush, checkpoint or retention pass
//! visits no log, a busy one only the logs that changed, and every change to a log reaches
//! the next checkpoint files. Shutdown still visits every log.

use super::passes::LOG_IO_INLINE_UP_TO;
use super::*;
use crate::clock::now_ms;
use crate::fault::{Step, arm_no_space};
use crate::log::data_dir::DataDir;
use crate::log::format::segment;
use crate::log::partition_tests::{batches, cfg};
use crate::record::VerifiedBatches;
use crate::record::records::{NewRecord, build_v2_batch};

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

/// A manager over `dir` with `n` empty logs `t-0`, `t-1`, … starting at offset 0, once its
/// first checkpoint (which visits every log) is taken.
fn with_logs(dir: &Path, config: LogConfig, n: i32) -> LogManager {
    let logs = LogManager::open(dir, config).unwrap();
    let new: Vec<_> = (0..n).map(|p| (tp(p), 0, None)).collect();
    assert!(logs.create_logs(&new).iter().all(|(_, r)| r.is_ok()));
    assert_eq!(checkpoint(&logs), n as usize);
    assert_eq!(files(dir).len(), n as usize);
    logs
}

fn log(logs: &LogManager, p: i32) -> SharedLog {
    logs.get(&tp(p)).unwrap()
}

/// Appends `count` batches of four records at the end of `t-p` in leader epoch `epoch`;
/// the new log end.
fn append(logs: &LogManager, p: i32, count: usize, epoch: i32) -> i64 {
    let shared = log(logs, p);
    let mut l = lock_log(&shared);
    let (b, _) = batches(l.log_end_offset(), count, epoch);
    l.append(&VerifiedBatches::of(&b)).unwrap();
    l.log_end_offset()
}

/// `count` batches of four records at the end of `t-p`, every record stamped `ts`; the new
/// log end.
fn append_stamped(logs: &LogManager, p: i32, count: usize, ts: i64) -> i64 {
    let shared = log(logs, p);
    let mut l = lock_log(&shared);
    let v = [b'v'; 50];
    for _ in 0..count {
        let from = l.log_end_offset();
        let recs: Vec<NewRecord<'_>> = (0..4)
            .map(|_| NewRecord {
                key: None,
                value: Some(&v),
                timestamp: ts,
            })
            .collect();
        let b = build_v2_batch(from, 0, &recs);
        l.append(&VerifiedBatches::of(&b)).unwrap();
    }
    l.log_end_offset()
}

fn update_hw(logs: &LogManager, p: i32, hw: i64) {
    lock_log(&log(logs, p)).update_high_watermark(hw);
}

/// What the three checkpoint files claim: (high watermark, recovery point, log start) of
/// each partition.
fn files(dir: &Path) -> BTreeMap<TopicPartition, (i64, i64, i64)> {
    let read = |name: &str| checkpoint::read_offsets(&dir.join(name)).unwrap();
    let (hw, rp, ls) = (
        read(DataDir::REPLICATION_OFFSET),
        read(DataDir::RECOVERY_POINT),
        read(DataDir::LOG_START_OFFSET),
    );
    assert!(hw.keys().eq(rp.keys()) && ls.keys().eq(rp.keys()));
    rp.iter()
        .map(|(tp, r)| (tp.clone(), (hw[tp], *r, ls[tp])))
        .collect()
}

fn figures(dir: &Path, p: i32) -> (i64, i64, i64) {
    files(dir)[&tp(p)]
}

/// Checkpoints; how many logs that visited.
fn checkpoint(logs: &LogManager) -> usize {
    logs.checkpoint().unwrap();
    logs.last_visits(Pass::Checkpoint)
}

fn flush(logs: &LogManager) -> usize {
    logs.flush_all().unwrap();
    logs.last_visits(Pass::Flush)
}

fn retention(logs: &LogManager, now: i64) -> usize {
    logs.apply_retention_at(now);
    logs.last_visits(Pass::Retention)
}

/// Checkpoints; the partitions it says are failed, and how many logs it visited.
fn checkpoint_failed(logs: &LogManager) -> (Vec<i32>, usize) {
    let failed = logs.checkpoint_with(false).unwrap();
    (
        failed.iter().map(|tp| tp.partition).collect(),
        logs.last_visits(Pass::Checkpoint),
    )
}

#[test]
fn an_idle_pass_visits_no_log_and_a_busy_one_only_the_logs_that_changed() {
    let d = tempfile::tempdir().unwrap();
    let logs = with_logs(d.path(), cfg(1 << 20), 8);
    let before = files(d.path());
    assert_eq!(flush(&logs), 0);
    assert_eq!(checkpoint(&logs), 0);
    assert_eq!(retention(&logs, now_ms()), 0, "retention is off");
    assert_eq!(files(d.path()), before);
    // Two logs take data: only they are flushed.
    let end1 = append(&logs, 1, 3, 0);
    update_hw(&logs, 1, end1);
    let end6 = append(&logs, 6, 2, 0);
    assert_eq!(flush(&logs), 2);
    assert_eq!(lock_log(&log(&logs, 1)).recovery_point(), end1);
    assert_eq!(lock_log(&log(&logs, 6)).recovery_point(), end6);
    assert_eq!(flush(&logs), 0);
    // The checkpoint visits them alone and keeps every other partition's figures.
    assert_eq!(checkpoint(&logs), 2);
    let mut expected = before.clone();
    expected.insert(tp(1), (end1, end1, 0));
    expected.insert(tp(6), (0, end6, 0));
    assert_eq!(files(d.path()), expected);
    assert_eq!(checkpoint(&logs), 0);
    assert_eq!(flush(&logs), 0);
    // Appended and not flushed yet: the checkpoint flushes it before claiming it.
    let end3 = append(&logs, 3, 1, 0);
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(d.path(), 3), (0, end3, 0));
    assert_eq!(flush(&logs), 0, "nothing left to flush");
    assert_eq!(checkpoint(&logs), 0);
}

#[test]
fn every_change_to_a_log_reaches_the_next_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let logs = with_logs(dir, cfg(1 << 20), 6);
    // An append: flushed and claimed.
    assert_eq!(append(&logs, 0, 4, 0), 16);
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(dir, 0), (0, 16, 0));
    // The high watermark the leader reports; the same report again is no change.
    update_hw(&logs, 0, 12);
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(dir, 0), (12, 16, 0));
    update_hw(&logs, 0, 12);
    assert_eq!(checkpoint(&logs), 0);
    // A truncation.
    lock_log(&log(&logs, 0)).truncate_to(8, "test").unwrap();
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(dir, 0), (8, 8, 0));
    // Offsets lost upstream: an empty log moves its start…
    lock_log(&log(&logs, 1)).skip_lost_upstream(500).unwrap();
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(dir, 1), (500, 500, 500));
    // … and one with data goes on past the gap.
    assert_eq!(append(&logs, 2, 2, 0), 8);
    update_hw(&logs, 2, 8);
    assert_eq!(checkpoint(&logs), 1);
    lock_log(&log(&logs, 2)).skip_lost_upstream(100).unwrap();
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(dir, 2), (8, 100, 0));
    // The log start raised (as retention does), and its leader-epoch checkpoint with it.
    assert_eq!(append(&logs, 3, 4, 2), 16);
    update_hw(&logs, 3, 16);
    assert_eq!(checkpoint(&logs), 1);
    let epochs = dir.join(tp(3).dir_name()).join(DataDir::LEADER_EPOCH);
    assert_eq!(checkpoint::read_epochs(&epochs).unwrap(), [(2, 0)]);
    lock_log(&log(&logs, 3))
        .maybe_increment_log_start_offset(6)
        .unwrap();
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(dir, 3), (16, 16, 6));
    assert_eq!(checkpoint::read_epochs(&epochs).unwrap(), [(2, 6)]);
    // A new leader epoch reaches the partition's leader-epoch checkpoint.
    append(&logs, 3, 1, 5);
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(checkpoint::read_epochs(&epochs).unwrap(), [(2, 6), (5, 16)]);
    // A partition failed, then sound again.
    assert_eq!(append(&logs, 4, 2, 0), 8);
    assert_eq!(checkpoint(&logs), 1);
    logs.mark_failed(&tp(4), "test");
    assert_eq!(checkpoint_failed(&logs), (vec![4], 1));
    assert_eq!(checkpoint_failed(&logs), (vec![4], 0));
    logs.check_storage(&tp(4)).unwrap();
    assert_eq!(checkpoint_failed(&logs), (vec![], 1));
    // Failed with bytes not yet flushed: only what was synced is claimed, the rest once it
    // is sound again.
    assert_eq!(append(&logs, 4, 1, 0), 12);
    logs.mark_failed(&tp(4), "test");
    assert_eq!(checkpoint_failed(&logs), (vec![4], 1));
    assert_eq!(figures(dir, 4), (0, 8, 0));
    logs.check_storage(&tp(4)).unwrap();
    assert_eq!(checkpoint_failed(&logs), (vec![], 1));
    assert_eq!(figures(dir, 4), (0, 12, 0));
    // A log made, then one archived: the set of logs changed, so every log is visited.
    logs.get_or_create(&tp(9), 40, None).unwrap();
    assert_eq!(checkpoint(&logs), 7);
    assert_eq!(figures(dir, 9), (40, 40, 40));
    assert_eq!(checkpoint(&logs), 0);
    logs.archive(&tp(9)).unwrap();
    assert!(!files(dir).contains_key(&tp(9)), "{:?}", files(dir));
    assert_eq!(checkpoint(&logs), 0);
    // The figures kept between checkpoints are those a pass over every log takes.
    let kept = files(dir);
    logs.checkpoint_lock.lock().unwrap().structure = None;
    assert_eq!(checkpoint(&logs), 6);
    assert_eq!(files(dir), kept);
}

#[test]
fn a_log_a_full_disk_kept_from_its_flush_or_checkpoint_is_visited_again() {
    let d = tempfile::tempdir().unwrap();
    let logs = with_logs(d.path(), cfg(1 << 20), 3);
    append(&logs, 1, 6, 0);
    assert_eq!(flush(&logs), 1);
    assert_eq!(checkpoint(&logs), 1);
    // Writing the pending index entries finds the disk full: no partition is failed for it,
    // and the log is flushed at the next pass.
    let end = append(&logs, 1, 6, 0);
    arm_no_space(Step::Index, 1);
    assert!(logs.flush_all().is_err());
    assert_eq!(logs.last_visits(Pass::Flush), 1);
    assert!(lock_log(&log(&logs, 1)).failed().is_none());
    assert!(lock_log(&log(&logs, 1)).recovery_point() < end);
    assert_eq!(flush(&logs), 1);
    assert_eq!(lock_log(&log(&logs, 1)).recovery_point(), end);
    assert_eq!(flush(&logs), 0);
    assert_eq!(checkpoint(&logs), 1);
    // A new epoch's leader-epoch checkpoint, kept back by a full disk, is written at the next
    // checkpoint.
    append(&logs, 2, 1, 7);
    arm_no_space(Step::Checkpoint, 1);
    assert_eq!(checkpoint(&logs), 1);
    assert!(lock_log(&log(&logs, 2)).failed().is_none());
    let epochs = d.path().join(tp(2).dir_name()).join(DataDir::LEADER_EPOCH);
    assert!(checkpoint::read_epochs(&epochs).unwrap().is_empty());
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(checkpoint::read_epochs(&epochs).unwrap(), [(7, 0)]);
    assert_eq!(checkpoint(&logs), 0);
}

#[test]
fn retention_visits_no_log_while_it_is_off() {
    let d = tempfile::tempdir().unwrap();
    let logs = with_logs(d.path(), cfg(2048), 3);
    let end = append_stamped(&logs, 0, 30, 1000);
    update_hw(&logs, 0, end);
    let segments = lock_log(&log(&logs, 0)).segments().count();
    assert!(segments > 2, "{segments}");
    assert_eq!(retention(&logs, now_ms()), 0);
    assert_eq!(lock_log(&log(&logs, 0)).segments().count(), segments);
}

#[test]
fn retention_visits_the_logs_that_changed_and_those_with_a_segment_to_lose() {
    let d = tempfile::tempdir().unwrap();
    let day = 86_400_000;
    let config = LogConfig {
        retention_ms: day,
        ..cfg(2048)
    };
    let logs = with_logs(d.path(), config, 4);
    let now = now_ms();
    // A new log counts as changed once; with one segment it has nothing to lose.
    assert_eq!(retention(&logs, now), 4);
    assert_eq!(retention(&logs, now), 0);
    // One log rolls segments: it is visited while it has more than one, changed or not.
    let end = append_stamped(&logs, 2, 30, now);
    update_hw(&logs, 2, end);
    assert!(lock_log(&log(&logs, 2)).segments().count() > 2);
    assert_eq!(retention(&logs, now), 1);
    assert_eq!(retention(&logs, now), 1);
    assert_eq!(
        lock_log(&log(&logs, 2)).log_start_offset(),
        0,
        "nothing old yet"
    );
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(d.path(), 2), (end, end, 0));
    // Two days on, unchanged, it loses every segment but the active one.
    assert_eq!(retention(&logs, now + 2 * day), 1);
    assert_eq!(lock_log(&log(&logs, 2)).segments().count(), 1);
    let start = lock_log(&log(&logs, 2)).log_start_offset();
    assert!(start > 0);
    assert_eq!(retention(&logs, now + 2 * day), 0);
    // The new log start reaches the checkpoint.
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(d.path(), 2), (end, end, start));
}

#[test]
fn shutdown_visits_every_log_and_a_restart_checkpoints_the_same_figures() {
    let d = tempfile::tempdir().unwrap();
    let config = cfg(1 << 20);
    let logs = with_logs(d.path(), config.clone(), 5);
    for p in 0..5 {
        let end = append(&logs, p, p as usize + 1, 0);
        update_hw(&logs, p, end);
    }
    assert_eq!(checkpoint(&logs), 5);
    let end = append(&logs, 2, 1, 0);
    update_hw(&logs, 2, end);
    assert!(logs.shutdown().unwrap());
    assert_eq!(logs.last_visits(Pass::Checkpoint), 5);
    let written = files(d.path());
    for p in 0..5 {
        let end = lock_log(&log(&logs, p)).log_end_offset();
        assert_eq!(written[&tp(p)], (end, end, 0));
        let snapshot = d
            .path()
            .join(tp(p).dir_name())
            .join(segment::file_name(end, "snapshot"));
        assert!(snapshot.exists(), "{}", snapshot.display());
    }
    drop(logs);
    // Loaded again: the first checkpoint visits every log, and a loaded log reports its
    // changes.
    let logs = LogManager::open(d.path(), config).unwrap();
    assert_eq!(checkpoint(&logs), 5);
    assert_eq!(files(d.path()), written);
    assert_eq!(checkpoint(&logs), 0);
    let end = append(&logs, 4, 1, 0);
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(d.path(), 4).1, end);
}

/// More logs than one thread visits: the passes share them among threads, and every log's
/// figures, flush, epochs and snapshot still land, a failed one's as failed; with an fsync
/// of each log's files, and with one file-system sync for them all.
#[test]
fn passes_over_many_logs_cover_each_once_on_several_threads() {
    passes_over_many_logs(false);
}

#[test]
fn passes_over_many_logs_share_two_file_system_syncs() {
    passes_over_many_logs(true);
}

fn passes_over_many_logs(by_syncfs: bool) {
    let n = (LOG_IO_INLINE_UP_TO * 3) as i32;
    assert!(n as usize >= super::fs_sync::SYNCFS_FROM);
    let d = tempfile::tempdir().unwrap();
    let mut logs = with_logs(d.path(), cfg(1 << 20), n);
    logs.fs_sync.forced = Some(by_syncfs);
    let mut ends = Vec::new();
    for p in 0..n {
        let end = append(&logs, p, p as usize % 3 + 1, p % 2);
        update_hw(&logs, p, end - 1);
        ends.push(end);
    }
    // The flush pass moves every recovery point.
    let syncs = crate::checkpoint::syncs_on_this_thread().1;
    assert_eq!(flush(&logs), n as usize);
    assert_eq!(
        crate::checkpoint::syncs_on_this_thread().1 - syncs,
        u64::from(by_syncfs)
    );
    for p in 0..n {
        assert_eq!(lock_log(&log(&logs, p)).recovery_point(), ends[p as usize]);
    }
    // Epoch 2 starts at each old end.
    let epoch_starts = ends.clone();
    for p in 0..n {
        let end = append(&logs, p, 1, 2);
        update_hw(&logs, p, end);
        ends[p as usize] = end;
    }
    logs.mark_failed(&tp(7), "a test");
    let failed_figures = lock_log(&log(&logs, 7)).summary();
    let syncs = crate::checkpoint::syncs_on_this_thread().1;
    assert!(!logs.shutdown().unwrap(), "a failed partition: not clean");
    // One sync for the data and new files, one for their renames.
    assert_eq!(
        crate::checkpoint::syncs_on_this_thread().1 - syncs,
        if by_syncfs { 2 } else { 0 }
    );
    assert_eq!(logs.last_visits(Pass::Checkpoint), n as usize);
    let written = files(d.path());
    assert_eq!(written.len(), n as usize);
    for p in 0..n {
        let end = ends[p as usize];
        let dir = d.path().join(tp(p).dir_name());
        if p == 7 {
            // Unflushed since it failed: its figures stop at what was synced.
            let rp = failed_figures.recovery_point;
            assert!(rp < end);
            assert_eq!(written[&tp(p)], (rp, rp, 0));
            assert!(logs.checkpoint_with(false).unwrap() == vec![tp(7)]);
            continue;
        }
        assert_eq!(written[&tp(p)], (end, end, 0), "{}", tp(p));
        assert!(dir.join(segment::file_name(end, "snapshot")).exists());
        let epochs = std::fs::read_to_string(dir.join(DataDir::LEADER_EPOCH)).unwrap();
        let last = format!("2 {}", epoch_starts[p as usize]);
        assert!(epochs.trim_end().ends_with(&last), "{epochs}");
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    }
    // A restart reads back what the pass wrote.
    drop(logs);
    let again = LogManager::open(d.path(), cfg(1 << 20)).unwrap();
    for p in (0..n).filter(|p| *p != 7) {
        let shared = log(&again, p);
        let l = lock_log(&shared);
        assert_eq!(l.log_end_offset(), ends[p as usize]);
        assert_eq!(
            l.end_offset_for_epoch(1).map(|(e, _)| e),
            Some(if p % 2 == 1 { 1 } else { 0 })
        );
    }
}

/// What happens to a log between the two halves of a pass that shares a file-system sync
/// reaches its `leader-epoch-checkpoint`: a truncation below the staged epochs drops the
/// stale staged file; one that leaves the epochs as they were still gets them written; a
/// new epoch appended meanwhile is written at the next checkpoint. No `.tmp` is left.
#[test]
fn what_happens_between_stage_and_commit_reaches_the_epoch_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let logs = with_logs(d.path(), cfg(1 << 20), 1);
    append(&logs, 0, 2, 0);
    logs.checkpoint().unwrap();
    let shared = log(&logs, 0);
    let dir = d.path().join(tp(0).dir_name());
    let epoch_file = dir.join(DataDir::LEADER_EPOCH);
    let on_disk = || checkpoint::read_epochs(&epoch_file).unwrap();
    let no_tmp = || {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    };
    // A truncation below the staged epoch: the staged file is stale and goes.
    let start = append(&logs, 0, 2, 3) - 8;
    let staged = lock_log(&shared).stage_epochs().unwrap().unwrap();
    assert!(staged.tmp.exists());
    lock_log(&shared).truncate_to(start, "a test").unwrap();
    assert!(!lock_log(&shared).commit_epochs(staged).unwrap());
    no_tmp();
    assert_eq!(on_disk(), vec![(0, 0)]);
    // A truncation that leaves the epochs as they are (at the log end): the new epoch
    // still reaches the file.
    let end = append(&logs, 0, 2, 5);
    let staged = lock_log(&shared).stage_epochs().unwrap().unwrap();
    lock_log(&shared).truncate_to(end, "a test").unwrap();
    lock_log(&shared).commit_epochs(staged).unwrap();
    no_tmp();
    assert_eq!(on_disk(), vec![(0, 0), (5, start)]);
    logs.checkpoint().unwrap();
    assert_eq!(on_disk(), vec![(0, 0), (5, start)]);
    // A new epoch appended between the halves: the staged file goes in, and the next
    // checkpoint writes the newer cache.
    append(&logs, 0, 1, 6);
    let staged = lock_log(&shared).stage_epochs().unwrap().unwrap();
    append(&logs, 0, 1, 7);
    assert!(lock_log(&shared).commit_epochs(staged).unwrap());
    assert_eq!(on_disk(), vec![(0, 0), (5, start), (6, end)]);
    logs.checkpoint().unwrap();
    assert_eq!(on_disk(), vec![(0, 0), (5, start), (6, end), (7, end + 4)]);
    no_tmp();
}

#[test]
fn a_recovery_point_a_flush_moves_reaches_the_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let logs = with_logs(d.path(), cfg(1 << 20), 3);
    // As if a checkpoint had read the log just before these bytes were flushed: only the
    // flush pass is still to visit it.
    let end = append(&logs, 1, 2, 0);
    logs.touched.take(Pass::Checkpoint);
    lock_log(&log(&logs, 1)).untouch(Pass::Checkpoint);
    assert_eq!(flush(&logs), 1);
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(d.path(), 1), (0, end, 0));
    // The same for a flush under the lock (as an archive's).
    let end = append(&logs, 2, 2, 0);
    for pass in [Pass::Flush, Pass::Checkpoint] {
        logs.touched.take(pass);
        lock_log(&log(&logs, 2)).untouch(pass);
    }
    lock_log(&log(&logs, 2)).flush().unwrap();
    assert_eq!(checkpoint(&logs), 1);
    assert_eq!(figures(d.path(), 2), (0, end, 0));
}

/// A start after a crash that finds many logs to recover fsyncs none of them: one
/// file-system sync covers what recovery rewrote, and the logs come back cut to their last
/// whole batch; with few logs (or on a busy shared disk) each is fsynced as before.
#[test]
fn a_recovery_of_many_logs_shares_one_file_system_sync() {
    for by_syncfs in [true, false] {
        let n = super::fs_sync::SYNCFS_FROM as i32 + 6;
        let d = tempfile::tempdir().unwrap();
        let logs = with_logs(d.path(), cfg(1 << 20), n);
        let mut ends = Vec::new();
        for p in 0..n {
            ends.push(append(&logs, p, 2, 0));
        }
        drop(logs); // no shutdown: the next start recovers every log past its recovery point
        for p in 0..3 {
            let seg = d
                .path()
                .join(tp(p).dir_name())
                .join(segment::file_name(0, "log"));
            let f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
            std::io::Write::write_all(&mut &f, b"torn").unwrap();
        }
        super::fs_sync::FORCE_ON_THIS_THREAD.with(|c| c.set(Some(by_syncfs)));
        let before = crate::checkpoint::syncs_on_this_thread();
        let again = LogManager::open(d.path(), cfg(1 << 20));
        let after = crate::checkpoint::syncs_on_this_thread();
        super::fs_sync::FORCE_ON_THIS_THREAD.with(|c| c.set(None));
        let again = again.unwrap();
        if by_syncfs {
            assert_eq!((after.0 - before.0, after.1 - before.1), (0, 1));
        } else {
            assert_eq!(after.1 - before.1, 0);
            assert!(after.0 - before.0 >= n as u64, "{before:?} {after:?}");
        }
        for p in 0..n {
            let shared = log(&again, p);
            let l = lock_log(&shared);
            assert_eq!(l.log_end_offset(), ends[p as usize], "{}", tp(p));
            assert_eq!(l.recovery_point(), ends[p as usize]);
        }
        // The first checkpoint claims the recovered ends and writes each epoch cache.
        again.checkpoint().unwrap();
        assert_eq!(figures(d.path(), 1).1, ends[1]);
        let epochs = d.path().join(tp(1).dir_name()).join(DataDir::LEADER_EPOCH);
        assert_eq!(checkpoint::read_epochs(&epochs).unwrap(), vec![(0, 0)]);
    }
}
