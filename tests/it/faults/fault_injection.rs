//! Faults real leaders cannot make, from the in-process leader in `tests/support/test_leader.rs`:
//! corrupt batches (CRC-32C fails), partial batches, malformed responses, dropped connections,
//! partition errors, and a leader whose log diverged (truncated, new epoch). The daemon never
//! writes a bad byte, never panics, keeps the other partition going, and ends byte-identical.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::time::Duration;

fn config(
    dir: &std::path::Path,
    data: &std::path::Path,
    leader: &TestLeader,
) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow("faults")
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 300)
        .set("fetch.partition_max_bytes", 4096)
        .set("log.segment_bytes", 20000)
        .set("checkpoint.interval_ms", 100)
        .write(dir)
}

fn assert_same(leader: &TestLeader, data: &std::path::Path, p: i32) {
    let local = support::local_log_bytes(data, &TopicPartition::new("faults", p));
    let remote = leader.log_bytes(p);
    assert_eq!(local.len(), remote.len(), "faults-{p}: byte count");
    assert!(
        local == remote,
        "faults-{p}: bytes differ from the leader's"
    );
}

#[test]
fn corrupt_partial_and_malformed_responses_never_reach_the_log() {
    let leader = TestLeader::start("faults", 2);
    leader.append(0, 200, 20);
    leader.append(1, 200, 20);
    leader.corrupt_next_fetches(0, 3);
    leader.partial_next_fetches(1, 3);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = support::Daemon::start(&config(dir.path(), &data, &leader));

    // Partition 1 goes on while partition 0 backs off from its corrupt batches.
    support::wait_until(Duration::from_secs(20), "faults-1 to catch up", || {
        support::log_end(&data, "faults", 1) == 200
    });
    assert!(
        support::log_end(&data, "faults", 0) < 200,
        "faults-0 should still be backing off"
    );
    support::wait_until(
        Duration::from_secs(20),
        "faults-0 to catch up after the corruption",
        || support::log_end(&data, "faults", 0) == 200,
    );
    let log = d.log_text();
    assert!(
        log.contains("faults-0") && log.contains("CRC mismatch") && log.contains("nothing written"),
        "{log}"
    );
    // Pipelined requests ahead of a corrupt response are answered and ignored; the corrupt
    // offset itself is fetched again until it verifies.
    let served = leader.served_offsets(0);
    let at_zero = served.iter().filter(|&&o| o == 0).count();
    assert!(
        at_zero >= 2,
        "the corrupt fetch is retried at offset 0: {served:?}"
    );

    // Malformed responses, dropped connections and a partition error.
    leader.garbage_next_fetches(2);
    leader.drop_next_requests(2);
    leader.error_next_fetches(0, 2, 2); // CORRUPT_MESSAGE: retriable
    leader.append(0, 300, 30);
    leader.append(1, 300, 30);
    for p in 0..2 {
        support::wait_until(
            Duration::from_secs(30),
            "catch-up after malformed responses",
            || support::log_end(&data, "faults", p) == 500,
        );
    }
    assert!(d.is_running());
    let log = d.log_text();
    assert!(
        log.contains("bad Fetch"),
        "malformed response is reported: {log}"
    );
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(d.stop().code(), Some(0));
    for p in 0..2 {
        assert_same(&leader, &data, p);
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}

#[test]
fn a_diverged_leader_log_is_truncated_to_the_common_point() {
    let leader = TestLeader::start("faults", 1);
    leader.append(0, 300, 25);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = support::Daemon::start(&config(dir.path(), &data, &leader));
    support::wait_until(Duration::from_secs(20), "catch-up", || {
        support::log_end(&data, "faults", 0) == 300
    });

    // The leader loses its tail (an unclean election) and a new epoch writes other records.
    leader.truncate_and_bump_epoch(0, 200);
    assert_eq!(leader.log_end(0), 200);
    leader.append(0, 150, 25);
    support::wait_until(
        Duration::from_secs(20),
        "the follower to take the new history",
        || {
            support::local_log_bytes(&data, &TopicPartition::new("faults", 0))
                == leader.log_bytes(0)
        },
    );
    let log = d.log_text();
    assert!(
        log.contains("divergence") && log.contains("truncating"),
        "{log}"
    );
    assert_eq!(d.stop().code(), Some(0));
    let st = support::partition_status(&data, "faults", 0).unwrap();
    assert_eq!(st["log_end_offset"], 350);
    assert_eq!(st["leader_epoch"], leader.leader_epoch(0));
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}
