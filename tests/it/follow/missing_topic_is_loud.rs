//! A followed topic the leader does not have replicates nothing, and says so while the
//! leader answers: `/metrics` has the topic missing (1, beside 0 for a topic that is there)
//! and a partition without a log, the leader reachable with its last success; `status
//! --data-dir` (the daemon's `.live-status`) has the leader line and JSON object, the
//! missing topic and what has no log.

use crate::support;
use crate::support::scrape::scrape;
use crate::support::test_leader::TestLeader;
use std::time::Duration;

#[test]
fn a_topic_missing_on_the_leader_shows_in_metrics_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start("present", 1);
    leader.append(0, 100, 10);
    let addr = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::Config::new(&data, &leader.addr())
        .follow("present")
        .with("partitions", vec![0, 7])
        .follow("ghost")
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("metrics.listen", addr.to_string())
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(10), "the endpoint", || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    let mut s = scrape(&addr);
    support::wait_until(Duration::from_secs(20), "present caught up", || {
        s = scrape(&addr);
        s.value(
            "replica_follower_lag_records",
            &[("topic", "present"), ("partition", "0")],
        ) == Some(0.0)
            && s.value("replica_follower_topic_missing", &[("topic", "ghost")]) == Some(1.0)
    });
    assert_eq!(
        s.value("replica_follower_topic_missing", &[("topic", "present")]),
        Some(0.0)
    );
    assert_eq!(
        s.value("replica_follower_partitions_without_log", &[]),
        Some(2.0),
        "present-7, which the leader does not have, and the topic ghost, whose partitions nobody knows"
    );
    assert_eq!(s.value("replica_follower_leader_reachable", &[]), Some(1.0));
    let last = s
        .value(
            "replica_follower_last_metadata_success_timestamp_seconds",
            &[],
        )
        .expect("the last metadata success");
    assert!(s.at_secs - last < 10.0, "{last} at {}", s.at_secs);
    assert_eq!(
        s.value(
            "replica_follower_metadata_errors_total",
            &[("error", "unreachable")]
        ),
        Some(0.0)
    );

    let mut st = support::status(&data);
    support::wait_until(
        Duration::from_secs(40),
        "the missing topic in status",
        || {
            st = support::status(&data);
            // The list of partitions without a log is taken at each metadata refresh:
            // present-0's log may be created after the first.
            st["missing_topics"] == serde_json::json!(["ghost"])
                && st["not_yet_logged"]
                    .as_array()
                    .is_some_and(|a| a.len() == 2)
        },
    );
    assert_eq!(st["leader"]["reachable"], true, "{st}");
    assert!(
        st["leader"]["last_metadata_success_ms"].as_i64().is_some(),
        "{st}"
    );
    assert_eq!(st["leader"]["metadata_errors"], 0, "{st}");
    let not_yet = st["not_yet_logged"].as_array().unwrap();
    assert_eq!(not_yet.len(), 2, "{st}");
    assert!(
        not_yet.contains(&serde_json::json!({"topic": "ghost", "partition": null})),
        "{st}"
    );
    assert!(
        not_yet.contains(&serde_json::json!({"topic": "present", "partition": 7})),
        "{st}"
    );
    let (code, text, _) = support::run_cli(&["status", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(
        text.lines()
            .any(|l| l.starts_with("leader: reachable, metadata answered ")),
        "{text}"
    );
    assert!(
        text.contains("topic ghost: not found on the leader"),
        "{text}"
    );
    assert!(
        text.contains("topic ghost: followed, no local log yet"),
        "{text}"
    );
    assert!(
        text.contains("present-7: followed, not found on the leader"),
        "a configured partition the leader's topic lacks is said to be missing: {text}"
    );
    assert!(d.stop().success(), "{}", d.log_text());
}
