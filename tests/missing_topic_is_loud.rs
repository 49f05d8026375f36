//! A followed topic the leader does not have replicates nothing, and says so while the
//! leader answers: `/metrics` has the topic missing (1, beside 0 for a topic that is there)
//! and a partition without a log, the leader reachable with its last success; `status
//! --data-dir` (the daemon's `.live-status`) has the leader line and JSON object, the
//! missing topic and what has no log.

mod support;

use std::time::Duration;
use support::scrape::scrape;
use support::test_leader::TestLeader;

#[test]
fn a_topic_missing_on_the_leader_shows_in_metrics_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start("present", 1);
    leader.append(0, 100, 10);
    let addr = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::write_config(
        dir.path(),
        &data,
        &leader.addr(),
        "[[follow]]\ntopic = \"present\"\n[[follow]]\ntopic = \"ghost\"\n",
        &format!(
            "[fetch]\nmax_wait_ms = 50\nbackoff_ms = 200\n[log]\nmin_free_bytes = 0\n\
             [metrics]\nlisten = \"{addr}\"\n"
        ),
    );
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
        Some(1.0),
        "the topic ghost, whose partitions nobody knows"
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
        Duration::from_secs(10),
        "the missing topic in status",
        || {
            st = support::status(&data);
            st["missing_topics"] == serde_json::json!(["ghost"])
        },
    );
    assert_eq!(st["leader"]["reachable"], true, "{st}");
    assert!(
        st["leader"]["last_metadata_success_ms"].as_i64().is_some(),
        "{st}"
    );
    assert_eq!(st["leader"]["metadata_errors"], 0, "{st}");
    assert_eq!(
        st["not_yet_logged"],
        serde_json::json!([{"topic": "ghost", "partition": null}]),
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
    assert!(d.stop().success(), "{}", d.log_text());
}
