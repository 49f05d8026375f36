//! While the leader refuses connections, `status` never shows a lag as if it were current:
//! the text table shows the last known lag with its age (`0 (3.1s ago)`), `status --json`
//! gives `lag: null` with `last_known_lag` and `lag_stale: true`, and `/metrics` leaves the
//! partition's `replica_follower_lag_records` sample out. After a restart with the leader
//! still gone, no lag is known: `?`.

use crate::support;
use crate::support::test_leader::TestLeader;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const TOPIC: &str = "gone";

fn partition(data: &Path) -> Value {
    support::partition_status(data, TOPIC, 0).unwrap_or(Value::Null)
}

/// `status` as text: the LAG and STATE of this topic's partition 0.
fn text_row(data: &Path) -> (String, String, String) {
    let (code, out, err) = support::run_cli(&["status", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    let header = out
        .lines()
        .find(|l| l.starts_with("PARTITION"))
        .unwrap_or("");
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("{TOPIC}-0 ")))
        .unwrap_or("");
    // LAG is right-aligned under its header; STATE starts at its header's column.
    let (lag_end, state_at) = (
        header.find("LAG").map_or(0, |i| i + 3),
        header.find("STATE").unwrap_or(0),
    );
    let lag_start = row[..lag_end.min(row.len())]
        .rfind("  ")
        .map_or(0, |i| i + 2);
    let lag = row.get(lag_start..lag_end).unwrap_or("").trim().to_string();
    let state = row.get(state_at..).unwrap_or("").to_string();
    (lag, state, out)
}

/// The sample lines of `replica_follower_lag_records` for this topic.
fn lag_samples(metrics: &str) -> Vec<String> {
    let resp = support::http(metrics, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    resp.lines()
        .filter(|l| {
            l.starts_with("replica_follower_lag_records{") && l.contains(&format!("\"{TOPIC}\""))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_leader_refusing_connections_shows_the_last_known_lag_never_a_current_zero() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 40, 5);
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("metrics.listen", metrics.to_string())
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(10), "caught up", || {
        let p = partition(&data);
        p["state"] == "caught up" && p["lag"] == 0
    });
    let caught_up = partition(&data);
    assert_eq!(text_row(&data).0, "0");
    assert_eq!(lag_samples(&metrics).len(), 1);
    let fetched_at = caught_up["last_fetch_ms"]
        .as_i64()
        .expect("a fetch answered");

    // The leader goes away: its port refuses connections.
    drop(leader);
    support::wait_until(Duration::from_secs(10), "backing off: refused", || {
        let p = partition(&data);
        p["state"] == "backing off"
            && p["error"]
                .as_str()
                .is_some_and(|e| e.contains("Connection refused"))
    });
    std::thread::sleep(Duration::from_millis(1100));
    let (lag, state, text) = text_row(&data);
    assert!(state.contains("Connection refused"), "{text}");
    assert!(
        lag.starts_with("0 (") && lag.ends_with(" ago)") && lag.len() > "0 ( ago)".len(),
        "LAG {lag:?} is not the last known lag with its age:\n{text}"
    );
    assert!(
        lag_samples(&metrics).is_empty(),
        "a lag sample while the leader is unreachable: {:?}",
        lag_samples(&metrics)
    );
    let p = partition(&data);
    assert_eq!(p["state"], "backing off", "{p}");
    assert_eq!(p["lag"], Value::Null, "{p}");
    assert_eq!(p["last_known_lag"], 0, "{p}");
    assert_eq!(p["lag_stale"], true, "{p}");
    assert_eq!(p["leader_high_watermark"], 40, "{p}");
    // The figures stay those of the last answer.
    assert!(
        p["last_fetch_ms"]
            .as_i64()
            .is_some_and(|t| t <= fetched_at + 1_000),
        "{p}"
    );
    // While the leader answered, the lag was current.
    assert_eq!(
        (&caught_up["lag_stale"], &caught_up["last_known_lag"]),
        (&json!(false), &json!(0)),
        "{caught_up}"
    );

    // Restarted with the leader still gone: no lag is known at all.
    assert_eq!(d.stop().code(), Some(0));
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(10), "running again", || {
        support::status(&data)["running"] == true && partition(&data)["state"] != Value::Null
    });
    let p = partition(&data);
    assert_eq!(
        (&p["lag"], &p["last_known_lag"]),
        (&Value::Null, &Value::Null),
        "{p}"
    );
    assert_eq!(p["log_end_offset"], json!(40), "{p}");
    let (lag, _, text) = text_row(&data);
    assert_eq!(lag, "?", "{text}");
    assert!(lag_samples(&metrics).is_empty());
    assert_eq!(d.stop().code(), Some(0));
}
