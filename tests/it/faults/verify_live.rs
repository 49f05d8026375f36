//! `verify` on a running replica never raises a false alarm: run in a loop while a leader
//! takes writes and the daemon follows them (segments rolling, retention deleting old ones,
//! indexes and checkpoints being written), every run exits 0, checking up to the recovery points and reporting the rest as
//! in flight; once stopped, the whole replica verifies.

use crate::support;
use crate::support::test_leader::TestLeader;
use std::time::{Duration, Instant};

const TOPIC: &str = "live";

#[test]
fn verify_in_a_loop_on_a_replica_being_written_raises_no_false_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = std::sync::Arc::new(TestLeader::start(TOPIC, 2));
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 20)
        .set("fetch.backoff_ms", 100)
        .set("log.min_free_bytes", 0)
        .set("log.segment_bytes", 65536)
        .set("log.retention_bytes", 262144)
        .set("log.index_interval_bytes", 4096)
        .set("log.flush_interval_ms", 20)
        .set("checkpoint.interval_ms", 20)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (leader, stop) = (leader.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut bytes = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for p in 0..2 {
                    leader.append(p, 2000, 500);
                }
                bytes += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            bytes
        })
    };
    support::wait_until(Duration::from_secs(10), "the logs", || {
        support::log_end(&data, TOPIC, 0) > 0 && support::log_end(&data, TOPIC, 1) > 0
    });
    let started = Instant::now();
    let mut in_flight_seen = 0;
    for run in 0..20 {
        let out = std::process::Command::new(support::bin())
            .args(["verify", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "run {run}: a false alarm:\n{text}");
        if text.contains("being written") {
            in_flight_seen += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.join().unwrap();
    assert!(in_flight_seen > 0, "the runs saw bytes in flight");
    let grew = support::log_end(&data, TOPIC, 0);
    assert!(
        grew > 20_000,
        "the replica was being written: {grew} offsets"
    );
    eprintln!(
        "20 verify runs in {:?}, {in_flight_seen} with bytes in flight",
        started.elapsed()
    );
    for p in 0..2 {
        support::wait_until(Duration::from_secs(30), "catch-up", || {
            support::log_end(&data, TOPIC, p) == leader.log_end(p as i32)
        });
    }
    assert!(d.stop().success());
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    assert!(
        !out.contains("being written"),
        "a stopped replica is checked whole: {out}"
    );
}
