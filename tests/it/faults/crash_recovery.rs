//! Crash safety against Tansu: the daemon is killed with SIGKILL while it has an unflushed
//! tail, its last segment is torn mid-batch, its index and a checkpoint are damaged; the next
//! start recovers (cuts at the first partial batch, rebuilds indexes), refetches, and ends
//! byte-identical to the leader with no gap and no duplicate.
// Partitions are numbers on the leader and in the replica alike: index by them.
#![allow(clippy::needless_range_loop)]

use crate::support;
use replica_follower::checkpoint::TopicPartition;
use std::time::Duration;

#[test]
fn sigkill_and_a_torn_segment_recover_to_an_exact_copy() {
    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic("ledger", 2);
    let mut ends = [0i64; 2];
    for p in 0..2 {
        for (i, codec) in support::CODECS.iter().enumerate() {
            ends[p] = leader
                .produce("ledger", p as i32, 1000, codec, (p * 10 + i) as u64)
                .1
                + 1;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Flush and checkpoint rarely: at the kill, nothing past the start is claimed durable.
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("ledger")
        .set("log.segment_bytes", 100000)
        .set("log.flush_interval_ms", 600000)
        .set("checkpoint.interval_ms", 600000)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    for p in 0..2 {
        support::wait_until(Duration::from_secs(60), "catch-up", || {
            support::log_end(&data, "ledger", p) == ends[p as usize]
        });
    }
    d.kill9();
    assert!(!data.join(".kafka_cleanshutdown").exists());
    let rp = support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"));
    assert!(
        rp.values().all(|&o| o == 0),
        "nothing was checkpointed past 0: {rp:?}"
    );

    // Tear the last segment of partition 0 mid-batch, damage its index, leave a stray .tmp.
    let tp0 = TopicPartition::new("ledger", 0);
    let pdir = data.join(tp0.dir_name());
    let mut logs: Vec<_> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let last = logs.last().unwrap().clone();
    let len = std::fs::metadata(&last).unwrap().len();
    assert!(len > 200);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    std::fs::write(last.with_extension("index"), [0xffu8; 21]).unwrap();
    std::fs::write(
        data.join("replication-offset-checkpoint.tmp"),
        "0\n1\nledger 0 999999\n",
    )
    .unwrap();
    std::fs::write(data.join("log-start-offset-checkpoint"), "0\n7\ngarbage\n").unwrap();
    let torn_end = support::log_end(&data, "ledger", 0);
    assert!(
        torn_end < ends[0],
        "the tear removed the last batch: {torn_end}"
    );

    // More data arrives while the follower is down.
    for p in 0..2 {
        ends[p] = leader
            .produce("ledger", p as i32, 2000, "zstd", 77 + p as u64)
            .1
            + 1;
    }
    let mut d = support::Daemon::start(&cfg);
    for p in 0..2 {
        support::wait_until(Duration::from_secs(60), "catch-up after recovery", || {
            support::log_end(&data, "ledger", p) == ends[p as usize]
        });
    }
    let log = d.log_text();
    assert!(log.contains("after an unclean shutdown"), "{log}");
    assert!(
        log.contains("recovery cut"),
        "the torn batch must be cut:\n{log}"
    );
    assert!(
        log.contains("log-start-offset-checkpoint"),
        "the malformed checkpoint is reported:\n{log}"
    );
    assert_eq!(d.stop().code(), Some(0));
    for p in 0..2 {
        support::assert_byte_identical(
            &leader.bootstrap,
            &data,
            &TopicPartition::new("ledger", p),
            0,
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    support::assert_checkpoints_within_logs(&data);
    // The stray temp file was overwritten and renamed by the next checkpoint.
    assert!(!data.join("replication-offset-checkpoint.tmp").exists());
}
