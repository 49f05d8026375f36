//! OffsetOutOfRange against librdkafka's mock cluster, as an archive handles it: while the
//! follower is stopped, the leader deletes records past the follower's log end; on restart
//! the fetch at the old end is out of range, and the follower keeps every batch it held,
//! records the offsets it never got as lost upstream, and continues at the leader's new log
//! start, byte-identical from there. (Kafka's follower would delete its log here.)

use crate::support;
use replica_follower::checkpoint::TopicPartition;
use serde_json::json;
use std::time::Duration;

#[test]
fn keeps_every_batch_when_the_leaders_log_start_moved_past_its_end() {
    let mut leader = support::Leader::start("mock", 1);
    leader.create_topic("trim", 1);
    let end = leader.produce("trim", 0, 1000, "none", 1).1 + 1;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("trim")
        .set("fetch.backoff_ms", 100)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(30), "catch-up", || {
        support::log_end(&data, "trim", 0) == end
    });
    assert_eq!(d.stop().code(), Some(0));
    let tp = TopicPartition::new("trim", 0);
    let held = support::local_log_bytes(&data, &tp);
    assert!(!held.is_empty());

    let end = leader.produce("trim", 0, 1000, "snappy", 2).1 + 1;
    leader.ok(json!({"cmd": "delete_records", "topic": "trim", "partition": 0, "offset": 1500}));
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(30),
        "catch-up from the new log start",
        || support::log_end(&data, "trim", 0) == end,
    );
    let log = d.log_text();
    assert!(
        log.contains("OFFSET_OUT_OF_RANGE at 1000")
            && log.contains("ERROR")
            && log.contains("offsets 1000..1499 are lost upstream"),
        "{log}"
    );
    assert_eq!(d.stop().code(), Some(0));
    let st = support::partition_status(&data, "trim", 0).unwrap();
    assert_eq!(st["log_start_offset"].as_i64(), Some(0), "{st}");
    assert_eq!(
        st["lost_upstream"],
        json!([{"first_offset": 1000, "last_offset": 1499}]),
        "{st}"
    );
    let ls = support::read_checkpoint(&data.join("log-start-offset-checkpoint"));
    assert_eq!(
        ls.get(&("trim".to_string(), 0)),
        Some(&0),
        "its own first offset"
    );
    let local = support::local_log_bytes(&data, &tp);
    let remote = support::leader_bytes(&leader.bootstrap, &tp, 1500);
    assert!(
        local.starts_with(&held),
        "every batch it held is still there"
    );
    assert_eq!(
        local[held.len()..],
        remote[..],
        "then exactly the leader's batches from its new start"
    );
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
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("keep")
        .set("fetch.backoff_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .write(dir.path());
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
