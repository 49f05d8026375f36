//! OffsetOutOfRange, the Kafka follower way, against librdkafka's mock cluster: while the
//! follower is stopped, the leader deletes records past the follower's log end; on restart
//! the fetch at the old end is out of range, so the follower deletes its log and restarts at
//! the leader's new log start, then continues byte-identical from there.

mod support;

use replica_follower::checkpoint::TopicPartition;
use serde_json::json;
use std::time::Duration;

#[test]
fn restarts_at_the_leaders_log_start_when_it_moved_past_our_end() {
    let mut leader = support::Leader::start("mock", 1);
    leader.create_topic("trim", 1);
    let end = leader.produce("trim", 0, 1000, "none", 1).1 + 1;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::write_config(
        dir.path(),
        &data,
        &leader.bootstrap,
        "[[follow]]\ntopic = \"trim\"\n",
        "[fetch]\nbackoff_ms = 100\n",
    );
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(30), "catch-up", || {
        support::log_end(&data, "trim", 0) == end
    });
    assert_eq!(d.stop().code(), Some(0));

    let end = leader.produce("trim", 0, 1000, "snappy", 2).1 + 1;
    leader.ok(json!({"cmd": "delete_records", "topic": "trim", "partition": 0, "offset": 1500}));
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(30),
        "catch-up from the new log start",
        || support::log_end(&data, "trim", 0) == end,
    );
    let st = support::partition_status(&data, "trim", 0).unwrap();
    assert_eq!(st["log_start_offset"].as_i64(), Some(1500), "{st}");
    let log = d.log_text();
    assert!(
        log.contains("OFFSET_OUT_OF_RANGE at 1000")
            && log.contains("restarted at the leader's log start"),
        "{log}"
    );
    assert_eq!(d.stop().code(), Some(0));
    let tp = TopicPartition::new("trim", 0);
    let local_start = support::partition_status(&data, "trim", 0).unwrap()["log_start_offset"]
        .as_i64()
        .unwrap();
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, local_start);
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}

#[test]
fn the_leaders_deleted_records_stay_in_the_local_log() {
    let mut leader = support::Leader::start("mock", 1);
    leader.create_topic("keep", 1);
    let end = leader.produce("keep", 0, 1000, "lz4", 3).1 + 1;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::write_config(
        dir.path(),
        &data,
        &leader.bootstrap,
        "[[follow]]\ntopic = \"keep\"\n",
        "[fetch]\nbackoff_ms = 100\nmax_wait_ms = 100\n[checkpoint]\ninterval_ms = 100\n",
    );
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(30), "catch-up", || {
        support::log_end(&data, "keep", 0) == end
    });
    leader.ok(json!({"cmd": "delete_records", "topic": "keep", "partition": 0, "offset": 500}));
    let end = leader.produce("keep", 0, 1000, "none", 4).1 + 1;
    support::wait_until(
        Duration::from_secs(30),
        "catch-up after delete-records",
        || support::log_end(&data, "keep", 0) == end,
    );
    assert_eq!(d.stop().code(), Some(0));
    let st = support::partition_status(&data, "keep", 0).unwrap();
    assert_eq!(
        st["log_start_offset"], 0,
        "local data below the leader's new start is kept: {st}"
    );
    let local = support::local_log_bytes(&data, &TopicPartition::new("keep", 0));
    let remote = support::leader_bytes(&leader.bootstrap, &TopicPartition::new("keep", 0), 500);
    assert!(local.len() > remote.len());
    assert!(
        local.ends_with(&remote),
        "the local log continues the leader's exactly"
    );
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}
