//! A compacted log, the way Kafka's cleaner leaves it: it starts at offset 1000, batches have
//! records missing inside (offset deltas not dense), there are gaps between batches, and an
//! emptied batch (record count 0) still holds its offset range. The replica follows it byte
//! for byte across segment rolls, a SIGTERM restart and three kill -9 restarts, with new
//! batches after new gaps arriving in between; every gap is kept, nothing is filled in.

use crate::support;
use crate::support::batches::{compacted_batch, empty_batch};
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::BatchIter;
use std::path::Path;
use std::time::Duration;

const TOPIC: &str = "compacted";

/// One round of compacted history after a gap: a batch with holes inside, a gap, an emptied
/// batch keeping 5 offsets, normal batches, another gap, a batch whose only records are its
/// first and last offsets.
fn append_round(leader: &TestLeader, round: i64) {
    let epoch = leader.leader_epoch(0);
    let base = leader.log_end(0) + 3 + round; // a gap before each round
    leader.append_batch(0, compacted_batch(base, 9, &[0, 3, 7], epoch));
    let base = base + 10 + 5; // 5 offsets compacted away entirely
    leader.append_batch(0, compacted_batch(base, 19, &[2, 5, 11, 19], epoch));
    let base = base + 20 + 2;
    leader.append_batch(0, empty_batch(base, 4, epoch));
    leader.append(0, 30, 10); // dense batches right after the empty one
    let base = leader.log_end(0) + 25;
    leader.append_batch(0, compacted_batch(base, 49, &[0, 49], epoch));
    leader.append(0, 12, 4);
}

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("log.segment_bytes", 2048)
        .set("log.index_interval_bytes", 256)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .write(dir)
}

/// (base offset, last offset, record count) of every batch in `bytes`.
fn batch_ranges(bytes: &[u8]) -> Vec<(i64, i64, i32)> {
    BatchIter::new(bytes, usize::MAX)
        .map(|(h, _, _)| (h.base_offset, h.last_offset, h.records_count))
        .collect()
}

fn wait_caught_up(leader: &TestLeader, data: &Path, what: &str) {
    let want = leader.log_end(0);
    support::wait_until(
        Duration::from_secs(20),
        &format!("{TOPIC}-0 to reach {want} ({what})"),
        || support::log_end(data, TOPIC, 0) == want,
    );
}

fn assert_identical(leader: &TestLeader, data: &Path, what: &str) {
    let tp = TopicPartition::new(TOPIC, 0);
    let local = support::local_log_bytes(data, &tp);
    let remote = leader.log_bytes(0);
    assert_eq!(
        batch_ranges(&local),
        batch_ranges(&remote),
        "{what}: the local batches (base, last, count) differ from the leader's"
    );
    assert_eq!(local.len(), remote.len(), "{what}: byte count");
    assert!(
        local == remote,
        "{what}: local bytes differ from the leader's"
    );
    let st = support::partition_status(data, TOPIC, 0).expect("status of the partition");
    assert_eq!(st["log_start_offset"], 1000, "{what}: {st}");
    assert_eq!(st["log_end_offset"], leader.log_end(0), "{what}: {st}");
    let (ok, out) = support::verify(data);
    assert!(ok, "{what}: verify failed:\n{out}");
}

/// The leader's log has gaps between batches, holes inside batches and an empty batch.
fn assert_has_every_shape(bytes: &[u8]) {
    let ranges = batch_ranges(bytes);
    let gaps = ranges.windows(2).filter(|w| w[1].0 > w[0].1 + 1).count();
    let holey = ranges
        .iter()
        .filter(|(b, l, n)| *n > 0 && i64::from(*n) < l - b + 1)
        .count();
    let empty = ranges
        .iter()
        .filter(|(b, l, n)| *n == 0 && l - b + 1 == 5)
        .count();
    assert!(
        gaps >= 3 && holey >= 2 && empty >= 1,
        "{ranges:?}: gaps {gaps}, holey {holey}, empty {empty}"
    );
}

#[test]
fn a_compacted_log_is_followed_byte_for_byte_across_restarts_and_crashes() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.set_log_start(0, 1000);
    // The first batch starts exactly at the log start, holes inside.
    leader.append_batch(0, compacted_batch(1000, 9, &[0, 3, 7], 0));
    leader.append_batch(0, compacted_batch(1013, 19, &[1, 4, 18], 0));
    leader.append_batch(0, empty_batch(1040, 4, 0));
    leader.append(0, 20, 5);
    for round in 0..4 {
        append_round(&leader, round);
    }
    assert_has_every_shape(&leader.log_bytes(0));
    assert_eq!(leader.log_start(0), 1000);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = config(dir.path(), &data, &leader);
    let tp = TopicPartition::new(TOPIC, 0);

    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&leader, &data, "first catch-up");
    assert_identical(&leader, &data, "first catch-up");
    // The log end is the last batch's last offset + 1, not a count of records.
    let remote = leader.log_bytes(0);
    let last = batch_ranges(&remote).last().copied().unwrap();
    assert_eq!(support::log_end(&data, TOPIC, 0), last.1 + 1);
    assert!(
        support::segment_count(&data, &tp) > 1,
        "segment_bytes 2048 should roll several segments"
    );
    assert!(
        support::assert_indexes_point_at_batch_starts(&data, &tp) > 0,
        "index_interval_bytes 256 should give index entries"
    );
    support::wait_until(
        Duration::from_secs(10),
        "the HW checkpoint to reach the log end",
        || {
            support::read_checkpoint(&data.join("replication-offset-checkpoint"))
                .get(&(TOPIC.to_string(), 0))
                == Some(&leader.log_end(0))
        },
    );
    support::assert_checkpoints_within_logs(&data);

    // SIGTERM, new batches after a new gap while it is down, restart.
    let before = support::local_log_bytes(&data, &tp);
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    append_round(&leader, 10);
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&leader, &data, "after the SIGTERM restart");
    assert!(
        support::local_log_bytes(&data, &tp).starts_with(&before),
        "the restart rewrote old bytes"
    );
    assert_identical(&leader, &data, "after the SIGTERM restart");
    support::assert_indexes_point_at_batch_starts(&data, &tp);

    // Three crashes: new batches arrive just before the kill (the daemon may be mid-append,
    // its tail unflushed) and while it is down.
    for crash in 0..3 {
        append_round(&leader, 20 + crash);
        wait_caught_up(&leader, &data, &format!("before crash {crash}"));
        append_round(&leader, 30 + crash);
        d.kill9();
        assert!(!data.join(".kafka_cleanshutdown").exists());
        append_round(&leader, 40 + crash);
        d = support::Daemon::start(&cfg);
        wait_caught_up(&leader, &data, &format!("after crash {crash}"));
        assert_identical(&leader, &data, &format!("after crash {crash}"));
        support::assert_indexes_point_at_batch_starts(&data, &tp);
        support::assert_checkpoints_within_logs(&data);
    }

    assert_has_every_shape(&support::local_log_bytes(&data, &tp));
    assert!(d.is_running());
    assert!(!d.log_text().contains("panicked"), "{}", d.log_text());
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    assert_identical(&leader, &data, "after the final stop");
    support::assert_checkpoints_within_logs(&data);
    let hw = support::read_checkpoint(&data.join("replication-offset-checkpoint"));
    assert_eq!(hw[&(TOPIC.to_string(), 0)], leader.log_end(0));
    let rp = support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"));
    assert_eq!(rp[&(TOPIC.to_string(), 0)], leader.log_end(0));
    let ls = support::read_checkpoint(&data.join("log-start-offset-checkpoint"));
    assert_eq!(ls[&(TOPIC.to_string(), 0)], 1000);
}
