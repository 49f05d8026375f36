//! librdkafka's mock cluster writes transaction markers with CRC 0, which Kafka rejects. The
//! replica never appends such a batch: the partition stops right before the first marker
//! (warning about the CRC at that offset, backing off and retrying), while the other
//! partitions of the same fetcher go on byte for byte and the daemon stays up.

use crate::support;
use crate::support::{Daemon, Leader};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::BatchIter;
use std::time::Duration;

const TOPIC: &str = "mixed";

#[test]
fn a_crc0_marker_stops_its_partition_and_only_it() {
    let mut leader = Leader::start("mock", 3);
    leader.create_topic(TOPIC, 2);
    // Both partitions on one broker, so one fetcher (one Fetch request) serves both.
    for p in 0..2 {
        leader.ok(
            serde_json::json!({"cmd": "set_leader", "topic": TOPIC, "partition": p,
            "broker": 1}),
        );
    }
    let tx = TopicPartition::new(TOPIC, 0);
    let plain = TopicPartition::new(TOPIC, 1);

    let r = leader.produce_transactional(TOPIC, 0, &[(5, true), (3, false), (4, true)]);
    let tx_end = r["end_offset"].as_i64().expect("end_offset");
    let mut plain_end = leader.produce(TOPIC, 1, 300, "none", 1).1 + 1;

    // Where the first marker is, from the leader's own bytes.
    let leader_tx = support::leader_bytes_unverified(&leader.bootstrap, &tx, 0);
    let (marker, marker_pos) = BatchIter::new(&leader_tx, usize::MAX)
        .scan(0usize, |pos, (h, _, b)| {
            let at = *pos;
            *pos += b.len();
            Some((h, at))
        })
        .find(|(h, _)| h.is_control())
        .map(|(h, at)| {
            assert_eq!(h.crc, 0, "the mock's marker at {} has CRC 0", h.base_offset);
            (h.base_offset, at)
        })
        .expect("a marker in the leader's log");
    assert!(
        marker > 0 && marker < tx_end,
        "marker {marker}, end {tx_end}"
    );

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.flush_interval_ms", 100)
        .write(dir.path());
    let mut d = Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(30),
        &format!("{plain} to reach {plain_end}"),
        || support::log_end(&data, TOPIC, 1) == plain_end,
    );
    support::wait_until(
        Duration::from_secs(30),
        &format!("{tx} to reach the marker at {marker}"),
        || support::log_end(&data, TOPIC, 0) == marker,
    );
    support::wait_until(
        Duration::from_secs(20),
        "a warning about the marker's CRC",
        || {
            d.log_text().lines().any(|l| {
                (l.contains(" WARN ") || l.contains(" ERROR "))
                    && l.contains(&tx.to_string())
                    && l.contains(&format!("offset {marker}"))
                    && l.contains("CRC")
            })
        },
    );

    // Several backoff rounds later: the partition still ends at the marker, the other
    // partition still follows.
    plain_end = leader.produce(TOPIC, 1, 200, "snappy", 2).1 + 1;
    support::wait_until(
        Duration::from_secs(30),
        &format!("{plain} to reach {plain_end}"),
        || support::log_end(&data, TOPIC, 1) == plain_end,
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(d.is_running(), "the daemon stays up:\n{}", d.log_text());
    assert_eq!(support::log_end(&data, TOPIC, 0), marker);
    let warnings = d
        .log_text()
        .lines()
        .filter(|l| l.contains(&tx.to_string()) && l.contains("CRC"))
        .count();
    assert!(
        warnings >= 2,
        "{tx} backs off and retries the fetch at {marker}:\n{}",
        d.log_text()
    );

    let local_tx = support::local_log_bytes(&data, &tx);
    assert_eq!(
        local_tx.len(),
        marker_pos,
        "{tx}: the local log holds the bytes before the marker"
    );
    assert!(
        local_tx[..] == leader_tx[..marker_pos],
        "{tx}: byte-identical up to the marker"
    );
    assert!(
        BatchIter::new(&local_tx, usize::MAX)
            .all(|(h, _, b)| !h.is_control() && h.verify_crc(b).is_ok()),
        "{tx}: no marker, every CRC valid"
    );
    support::assert_byte_identical(&leader.bootstrap, &data, &plain, 0);

    let (ok, out) = support::verify(&data);
    assert!(ok, "verify while running:\n{out}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    assert_eq!(support::log_end(&data, TOPIC, 0), marker);
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after stop:\n{out}");
}
