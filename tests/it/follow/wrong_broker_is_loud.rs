//! A wrong broker address replicates nothing, and says so: `/metrics` has the leader
//! unreachable, the failed metadata refreshes counted, the last success at the daemon's
//! start and the configured partitions without a log, from the first scrape; `status
//! --data-dir` (the daemon's `.live-status`) has the leader line and JSON object and lists
//! the partitions without a log.

use crate::support;
use crate::support::scrape::scrape;
use std::time::Duration;

#[test]
fn a_wrong_broker_address_shows_in_metrics_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let addr = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::Config::new(&data, &nowhere)
        .follow("orders")
        .with("partitions", vec![0, 1])
        .follow("events")
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("metrics.listen", addr.to_string())
        .write(dir.path());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(10), "the endpoint", || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    let errors = |s: &support::scrape::Scrape| {
        s.value(
            "replica_follower_metadata_errors_total",
            &[("error", "unreachable")],
        )
    };
    let mut s = scrape(&addr);
    support::wait_until(Duration::from_secs(20), "two failed refreshes", || {
        s = scrape(&addr);
        errors(&s).is_some_and(|n| n >= 2.0)
    });
    assert_eq!(s.value("replica_follower_leader_reachable", &[]), Some(0.0));
    let last = s
        .value(
            "replica_follower_last_metadata_success_timestamp_seconds",
            &[],
        )
        .expect("the last metadata success, before any");
    assert!(
        (started - 5.0..=s.at_secs).contains(&last),
        "before any success it says the daemon's start: {last} (started {started})"
    );
    assert_eq!(
        s.value("replica_follower_partitions_without_log", &[]),
        Some(3.0),
        "orders-0, orders-1 and the whole topic events"
    );
    for t in ["orders", "events"] {
        assert_eq!(
            s.value("replica_follower_topic_missing", &[("topic", t)]),
            Some(0.0),
            "not known to be missing: the leader never answered"
        );
    }
    assert_eq!(
        s.value(
            "replica_follower_metadata_errors_total",
            &[("error", "refused")]
        ),
        Some(0.0)
    );

    // `.live-status` is published every second.
    let mut st = support::status(&data);
    support::wait_until(Duration::from_secs(10), "the errors in status", || {
        st = support::status(&data);
        st["leader"]["metadata_errors"]
            .as_u64()
            .is_some_and(|n| n >= 2)
    });
    assert_eq!(st["running"], true, "{st}");
    let leader = &st["leader"];
    assert_eq!(leader["reachable"], false, "{st}");
    assert!(leader["last_metadata_success_ms"].is_null(), "{st}");
    assert!(leader["unreachable_since_ms"].as_i64().is_some(), "{st}");
    assert!(
        leader["metadata_errors"].as_u64().is_some_and(|n| n >= 2),
        "{st}"
    );
    let last_error = leader["last_metadata_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains(&nowhere) && last_error.contains("refused"),
        "the error names the broker and what happened: {st}"
    );
    assert_eq!(
        st["not_yet_logged"],
        serde_json::json!([
            {"topic": "orders", "partition": 0},
            {"topic": "orders", "partition": 1},
            {"topic": "events", "partition": null}
        ]),
        "{st}"
    );
    let (code, text, _) = support::run_cli(&["status", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let line = text
        .lines()
        .find(|l| l.starts_with("leader: "))
        .unwrap_or_else(|| panic!("no leader line:\n{text}"));
    assert!(
        line.starts_with("leader: UNREACHABLE since ") && line.contains(&nowhere),
        "{line}"
    );
    assert!(line.contains("never answered since start"), "{line}");
    assert!(
        text.contains("orders-1: followed, no local log yet"),
        "{text}"
    );
    assert!(
        text.contains("topic events: followed, no local log yet"),
        "{text}"
    );
    assert!(d.stop().success(), "{}", d.log_text());
}
