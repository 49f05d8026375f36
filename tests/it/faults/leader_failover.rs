//! Leadership and connection faults on librdkafka's mock cluster: the leader of a partition
//! moves to another broker mid-stream; fetches meet injected NOT_LEADER, timeouts and dropped
//! connections. The follower keeps going and stays byte-identical to the leader.
// Partitions are numbers on the leader and in the replica alike: index by them.
#![allow(clippy::needless_range_loop)]

use crate::support;
use replica_follower::checkpoint::TopicPartition;
use serde_json::json;
use std::time::Duration;

#[test]
fn follows_a_partition_whose_leader_moves_and_whose_fetches_fail() {
    let mut leader = support::Leader::start("mock", 3);
    leader.create_topic("moves", 2);
    leader.ok(json!({"cmd": "set_leader", "topic": "moves", "partition": 0, "broker": 1}));
    leader.ok(json!({"cmd": "set_leader", "topic": "moves", "partition": 1, "broker": 2}));
    let mut ends = [0i64; 2];
    for p in 0..2 {
        ends[p] = leader.produce("moves", p as i32, 1500, "lz4", p as u64).1 + 1;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("moves")
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("fetch.fetchers_per_broker", 2)
        .set("checkpoint.interval_ms", 200)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    for p in 0..2 {
        support::wait_until(Duration::from_secs(60), "first catch-up", || {
            support::log_end(&data, "moves", p) == ends[p as usize]
        });
    }

    // Move partition 0 to broker 3 and keep producing.
    leader.ok(json!({"cmd": "set_leader", "topic": "moves", "partition": 0, "broker": 3}));
    ends[0] = leader.produce("moves", 0, 1500, "zstd", 10).1 + 1;
    support::wait_until(
        Duration::from_secs(60),
        "catch-up after the leader moved",
        || support::log_end(&data, "moves", 0) == ends[0],
    );
    let log = d.log_text();
    assert!(log.contains("moves-0: leader is now broker 3"), "{log}");

    // Fetch errors: NOT_LEADER_OR_FOLLOWER (6), REQUEST_TIMED_OUT (7), dropped connection (-195).
    leader.ok(json!({"cmd": "push_errors", "api_key": 1, "errors": [6, 7, -195, 7, -195]}));
    std::thread::sleep(Duration::from_millis(1500)); // let the daemon meet them first
    for p in 0..2 {
        ends[p] = leader
            .produce("moves", p as i32, 1000, "gzip", 20 + p as u64)
            .1
            + 1;
    }
    for p in 0..2 {
        support::wait_until(
            Duration::from_secs(60),
            "catch-up after injected errors",
            || support::log_end(&data, "moves", p) == ends[p as usize],
        );
    }
    assert!(d.is_running(), "the daemon survives fetch errors");
    // A broker that stops answering: its fetches hang until their timeout, but SIGTERM shuts
    // the fetcher's socket and the daemon exits at once.
    leader.ok(json!({"cmd": "broker_down", "broker": 3}));
    std::thread::sleep(Duration::from_millis(1500));
    let stopping = std::time::Instant::now();
    assert_eq!(d.stop().code(), Some(0));
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "SIGTERM took {:?}",
        stopping.elapsed()
    );
    leader.ok(json!({"cmd": "broker_up", "broker": 3}));
    for p in 0..2 {
        support::assert_byte_identical(
            &leader.bootstrap,
            &data,
            &TopicPartition::new("moves", p),
            0,
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}

/// A broker down for 30 s, as systemd's journal sees it: a handful of lines (when it starts
/// and when it ends), not one per retry; every line carries its priority prefix.
#[test]
fn a_broker_down_for_30s_logs_a_handful_of_journal_lines() {
    use std::os::unix::fs::MetadataExt;
    let mut leader = support::Leader::start("mock", 1);
    leader.create_topic("outage", 2);
    let mut ends = [0i64; 2];
    for p in 0..2 {
        ends[p] = leader.produce("outage", p as i32, 200, "none", p as u64).1 + 1;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Short timeouts and backoffs: many retries fit in the outage.
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("outage")
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("fetch.backoff_max_ms", 2000)
        .set("fetch.request_timeout_ms", 1000)
        .set("checkpoint.interval_ms", 200)
        .write(dir.path());
    // The file the daemon's stderr goes to stands for the journal stream.
    let log = support::Daemon::log_path_for(&cfg);
    std::fs::write(&log, "").unwrap();
    let m = std::fs::metadata(&log).unwrap();
    let stream = format!("{}:{}", m.dev(), m.ino());
    let mut d = support::Daemon::start_with_env(&cfg, &[("JOURNAL_STREAM", stream.as_str())]);
    for p in 0..2 {
        support::wait_until(Duration::from_secs(60), "first catch-up", || {
            support::log_end(&data, "outage", p) == ends[p as usize]
        });
    }
    std::thread::sleep(Duration::from_secs(1));
    let before = d.log_text().len();
    leader.ok(json!({"cmd": "broker_down", "broker": 1}));
    std::thread::sleep(Duration::from_secs(30));
    let during = d.log_text()[before..].to_string();
    leader.ok(json!({"cmd": "broker_up", "broker": 1}));
    for p in 0..2 {
        ends[p] = leader
            .produce("outage", p as i32, 100, "zstd", 10 + p as u64)
            .1
            + 1;
    }
    for p in 0..2 {
        support::wait_until(Duration::from_secs(60), "catch-up after the outage", || {
            support::log_end(&data, "outage", p) == ends[p as usize]
        });
    }
    std::thread::sleep(Duration::from_secs(1));
    let after = d.log_text()[before..].to_string();
    assert_eq!(d.stop().code(), Some(0));
    let n = during.lines().count();
    assert!(
        (1..=6).contains(&n),
        "{n} lines while the broker was down for 30 s:\n{during}"
    );
    assert!(
        during.lines().any(|l| l.starts_with("<4>WARN ")),
        "the outage is said when it starts:\n{during}"
    );
    assert!(
        after.contains("works again"),
        "the end of the outage is said:\n{after}"
    );
    assert!(
        after.lines().count() <= n + 6,
        "a few lines more when it ends:\n{after}"
    );
    for line in d.log_text().lines() {
        assert!(
            ["<3>", "<4>", "<6>"].iter().any(|p| line.starts_with(p)),
            "no priority prefix: {line}"
        );
    }
    for p in 0..2 {
        support::assert_byte_identical(
            &leader.bootstrap,
            &data,
            &TopicPartition::new("outage", p),
            0,
        );
    }
}
