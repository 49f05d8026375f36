//! A transactional log from the in-process leader: a committed transaction, aborted ones
//! (one aborted while another was still open), non-transactional batches interleaved, and a
//! transaction still open at the end. The replica holds the leader's bytes exactly, its
//! `.txnindex` files hold exactly the aborted transactions (Kafka's 34-byte entries, each in
//! the segment holding its ABORT marker), and `status` reports the last stable offset; all of
//! it stays right across kill -9 restarts and when the open transaction completes.

use crate::support;
use crate::support::batches::{control_batch, txn_batch};
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOPIC: &str = "txn";

/// One `.txnindex` entry: (producer id, first offset, last offset, last stable offset).
type Entry = (i64, i64, i64, i64);

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("log.segment_bytes", 1024)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .write(dir)
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// Every `.txnindex` entry of the partition, in segment order. Checks the version field,
/// that the files hold whole entries, and that each entry sits in the segment holding its
/// marker (base ≤ marker offset < next segment's base).
fn txnindex_entries(data: &Path) -> Vec<Entry> {
    let dir = data.join(TopicPartition::new(TOPIC, 0).dir_name());
    let mut bases: Vec<i64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "log").then_some(())?;
            p.file_stem()?.to_str()?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    let mut out = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        let path = dir.join(format!("{base:020}.txnindex"));
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        assert_eq!(bytes.len() % 34, 0, "{}: partial entry", path.display());
        let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        for e in bytes.chunks_exact(34) {
            let version = i16::from_be_bytes([e[0], e[1]]);
            assert_eq!(version, 0, "{}: entry version", path.display());
            let entry = (be_i64(e, 2), be_i64(e, 10), be_i64(e, 18), be_i64(e, 26));
            assert!(
                *base <= entry.2 && entry.2 < next_base,
                "{}: entry {entry:?} is not in the segment holding its marker",
                path.display()
            );
            out.push(entry);
        }
    }
    out
}

fn wait_caught_up(leader: &TestLeader, data: &Path, what: &str) {
    let want = leader.log_end(0);
    support::wait_until(
        Duration::from_secs(20),
        &format!("{TOPIC}-0 to reach {want} ({what})"),
        || support::log_end(data, TOPIC, 0) == want,
    );
}

/// Bytes, `.txnindex`, status and verify all as they must be.
fn assert_state(leader: &TestLeader, data: &Path, aborted: &[Entry], lso: i64, what: &str) {
    let tp = TopicPartition::new(TOPIC, 0);
    let local = support::local_log_bytes(data, &tp);
    let remote = leader.log_bytes(0);
    assert_eq!(local.len(), remote.len(), "{what}: byte count");
    assert!(local == remote, "{what}: bytes differ from the leader's");
    assert_eq!(
        txnindex_entries(data),
        aborted,
        "{what}: .txnindex entries (producer id, first, marker, LSO)"
    );
    let st = support::partition_status(data, TOPIC, 0).expect("status");
    assert_eq!(st["log_end_offset"], leader.log_end(0), "{what}: {st}");
    assert_eq!(st["last_stable_offset"], lso, "{what}: {st}");
    assert_eq!(
        st["aborted_transactions"],
        aborted.len(),
        "{what}: aborted_transactions: {st}"
    );
    let (ok, out) = support::verify(data);
    assert!(ok, "{what}: verify failed:\n{out}");
}

#[test]
fn transactions_are_replicated_with_an_exact_txnindex_and_last_stable_offset() {
    let leader = TestLeader::start(TOPIC, 1);
    let commit = |offset: i64, pid: i64| control_batch(offset, pid, 0, true, 3, 0);
    let abort = |offset: i64, pid: i64| control_batch(offset, pid, 0, false, 3, 0);

    leader.append(0, 20, 5); // 0..19
    // T1 (1001), committed, with plain batches inside it.
    leader.append_batch(0, txn_batch(20, 5, 1001, 0, 0)); // 20..24
    leader.append(0, 5, 5); // 25..29
    leader.append_batch(0, txn_batch(30, 5, 1001, 0, 0)); // 30..34
    leader.append_batch(0, commit(35, 1001));
    // T2 (1002) aborted while T3 (1003) is open: its entry's LSO is T3's first offset.
    leader.append_batch(0, txn_batch(36, 4, 1002, 0, 0)); // 36..39
    leader.append_batch(0, txn_batch(40, 3, 1003, 0, 0)); // 40..42
    leader.append(0, 4, 4); // 43..46
    leader.append_batch(0, txn_batch(47, 2, 1002, 0, 0)); // 47..48
    leader.append_batch(0, abort(49, 1002));
    leader.append_batch(0, txn_batch(50, 2, 1003, 0, 0)); // 50..51
    leader.append_batch(0, commit(52, 1003));
    // T4 (1004) aborted with nothing else open: LSO = marker + 1.
    leader.append_batch(0, txn_batch(53, 6, 1004, 0, 0)); // 53..58
    leader.append_batch(0, abort(59, 1004));
    leader.append(0, 30, 10); // 60..89
    // T5 (1005) aborted after more segments rolled.
    leader.append_batch(0, txn_batch(90, 3, 1005, 0, 0)); // 90..92
    leader.append_batch(0, abort(93, 1005));
    // T6 (1006) still open at the end, plain batches after it.
    leader.append_batch(0, txn_batch(94, 5, 1006, 0, 0)); // 94..98
    leader.append(0, 10, 5); // 99..108
    assert_eq!(leader.log_end(0), 109);
    assert_eq!(
        leader.last_stable_offset(0),
        94,
        "the test leader's own LSO"
    );

    let mut aborted: Vec<Entry> = vec![(1002, 36, 49, 40), (1004, 53, 59, 60), (1005, 90, 93, 94)];

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = config(dir.path(), &data, &leader);
    let tp = TopicPartition::new(TOPIC, 0);
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&leader, &data, "first catch-up");
    assert!(
        support::segment_count(&data, &tp) > 2,
        "segment_bytes 1024 should roll several segments"
    );
    assert_state(&leader, &data, &aborted, 94, "first catch-up");
    let st = support::partition_status(&data, TOPIC, 0).unwrap();
    assert!(
        st["last_stable_offset"].as_i64().unwrap() < st["log_end_offset"].as_i64().unwrap(),
        "an open transaction keeps the LSO below the log end: {st}"
    );

    // A crash with the transaction still open: the LSO comes back from the log.
    d.kill9();
    let mut d = support::Daemon::start(&cfg);
    leader.append(0, 6, 3); // 109..114, so the restarted daemon has fetched something
    wait_caught_up(&leader, &data, "after the first crash");
    assert_state(&leader, &data, &aborted, 94, "after the first crash");

    // T6 commits: nothing is open any more, the LSO is the log end.
    leader.append_batch(0, commit(115, 1006));
    wait_caught_up(&leader, &data, "T6 committed");
    assert_state(&leader, &data, &aborted, 116, "T6 committed");

    // T7 (1007) opens, the daemon crashes, T7 aborts after the restart: its first offset
    // must have survived the restart.
    leader.append_batch(0, txn_batch(116, 4, 1007, 0, 0)); // 116..119
    leader.append(0, 5, 5); // 120..124
    wait_caught_up(&leader, &data, "T7 open");
    assert_state(&leader, &data, &aborted, 116, "T7 open");
    d.kill9();
    let mut d = support::Daemon::start(&cfg);
    leader.append_batch(0, txn_batch(125, 2, 1007, 0, 0)); // 125..126
    leader.append_batch(0, abort(127, 1007));
    aborted.push((1007, 116, 127, 128));
    wait_caught_up(&leader, &data, "T7 aborted after a crash");
    assert_state(&leader, &data, &aborted, 128, "T7 aborted after a crash");

    // And once more: a crash right after the abort, nothing new from the leader.
    d.kill9();
    // At debug level, which names each partition's loaded log.
    let mut d = support::Daemon::start_with_env(&cfg, &[("RF_LOG", "debug")]);
    support::wait_until(
        Duration::from_secs(20),
        "the restarted daemon to load its log",
        || d.log_text().contains("txn-0: loaded log 0..128"),
    );
    assert_state(&leader, &data, &aborted, 128, "after the last crash");
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    assert_state(&leader, &data, &aborted, 128, "after SIGTERM");
    support::assert_checkpoints_within_logs(&data);
}

#[test]
fn recovery_after_a_crash_rebuilds_a_lost_txnindex_exactly() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 10, 5); // 0..9
    leader.append_batch(0, txn_batch(10, 5, 2001, 0, 0)); // 10..14
    leader.append_batch(0, txn_batch(15, 5, 2002, 0, 0)); // 15..19
    leader.append(0, 20, 5); // 20..39
    leader.append_batch(0, control_batch(40, 2001, 0, false, 1, 0)); // abort 2001, 2002 open
    leader.append(0, 20, 5); // 41..60
    leader.append_batch(0, control_batch(61, 2002, 0, false, 1, 0)); // abort 2002
    leader.append_batch(0, txn_batch(62, 5, 2003, 0, 0)); // 62..66, stays open
    leader.append(0, 10, 5); // 67..76
    let aborted: Vec<Entry> = vec![(2001, 10, 40, 15), (2002, 15, 61, 62)];

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Never fsync on its own — neither a flush nor a checkpoint (which flushes first) comes
    // due — so at the kill the recovery point is still 0, and the next start scans every
    // segment, however long the checks before the kill take.
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("log.segment_bytes", 1024)
        .set("log.flush_interval_ms", 600000)
        .set("checkpoint.interval_ms", 600000)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&leader, &data, "catch-up");
    assert_state(&leader, &data, &aborted, 62, "catch-up");
    d.kill9();
    let rp = support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"));
    assert!(
        rp.values().all(|&o| o == 0),
        "nothing was fsynced past 0: {rp:?}"
    );
    let pdir = data.join(TopicPartition::new(TOPIC, 0).dir_name());
    let mut removed = 0;
    for e in std::fs::read_dir(&pdir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "txnindex") {
            std::fs::remove_file(&p).unwrap();
            removed += 1;
        }
    }
    assert!(removed >= 1, "there were .txnindex files to lose");

    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(20), "the log to be loaded", || {
        d.log_text().contains("after an unclean shutdown")
    });
    leader.append_batch(0, control_batch(77, 2003, 0, true, 1, 0)); // 2003 commits
    wait_caught_up(&leader, &data, "after recovery");
    assert_state(&leader, &data, &aborted, 78, "after recovery");
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    assert_state(&leader, &data, &aborted, 78, "after SIGTERM");
}

/// `verify` checks every field of every `.txnindex` entry against the log: a wrong first
/// offset or last stable offset fails it, naming the file and the entry.
#[test]
fn verify_finds_a_txnindex_entry_that_disagrees_with_the_log() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.set_log_start(0, 0);
    leader.append(0, 5, 5);
    leader.append_batch(0, txn_batch(5, 3, 4001, 0, 0));
    leader.append_batch(0, control_batch(8, 4001, 0, false, 2, 0)); // abort: first 5, marker 8
    leader.append(0, 2, 2);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(20), "catch-up", || {
        support::log_end(&data, TOPIC, 0) == leader.log_end(0)
    });
    assert_eq!(d.stop().code(), Some(0));
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    let idx = data
        .join(TopicPartition::new(TOPIC, 0).dir_name())
        .join(format!("{:020}.txnindex", 0));
    let good = std::fs::read(&idx).unwrap();
    assert_eq!(good.len(), 34);
    for (at, what) in [(10..18, "first offset"), (26..34, "last stable offset")] {
        let mut bad = good.clone();
        bad[at.clone()].copy_from_slice(&7i64.to_be_bytes());
        std::fs::write(&idx, &bad).unwrap();
        let (ok, out) = support::verify(&data);
        assert!(!ok, "a wrong {what} passed verify: {out}");
        assert!(out.contains("txnindex") && out.contains("entry 0"), "{out}");
    }
    std::fs::write(&idx, &good).unwrap();
    assert!(support::verify(&data).0);
}
