//! Local storage faults while following: each write step (segment append, roll, index write,
//! checkpoint write) failing once through the storage seam (`RF_TEST_FAIL_WRITE`), and a
//! partition directory removed under the running daemon. A storage error fails only its
//! partition (said once, shown by `status`), the others go on, and a partition whose files
//! are sound again resumes by itself; the replica ends byte-identical.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::Path;
use std::time::Duration;

const TOPIC: &str = "storage";

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("fetch.partition_max_bytes", 8192)
        .set("log.min_free_bytes", 0)
        .set("log.segment_bytes", 20000)
        .set("log.index_interval_bytes", 512)
        .set("log.flush_interval_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .write(dir)
}

fn caught_up(data: &Path, leader: &TestLeader, p: i32) -> bool {
    support::local_log_bytes(data, &TopicPartition::new(TOPIC, p)) == leader.log_bytes(p)
}

fn failed(data: &Path) -> Vec<serde_json::Value> {
    support::status(data)["failed"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn each_write_step_failing_once_fails_the_partition_which_resumes_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 200, 10);
    leader.append(1, 200, 10);
    let cfg = config(dir.path(), &data, &leader);
    // Counted from a second after start-up: the logs exist by then, so every fault lands
    // while following.
    let mut d = support::Daemon::start_with_env(
        &cfg,
        &[
            ("RF_TEST_FAIL_WRITE", "append:2,roll:1,index:2,checkpoint:2"),
            ("RF_TEST_FAIL_AFTER_MS", "1000"),
        ],
    );
    support::wait_until(Duration::from_secs(10), "the logs created", || {
        caught_up(&data, &leader, 0) && caught_up(&data, &leader, 1)
    });
    std::thread::sleep(Duration::from_millis(1200));
    // More data while it runs, so that appends, rolls and flushes keep happening.
    for _ in 0..10 {
        leader.append(0, 400, 10);
        leader.append(1, 400, 10);
        std::thread::sleep(Duration::from_millis(150));
    }
    support::wait_until(Duration::from_secs(30), "both partitions caught up", || {
        caught_up(&data, &leader, 0) && caught_up(&data, &leader, 1)
    });
    let log = d.log_text();
    for step in ["Append", "Roll", "Index", "Checkpoint"] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("injected {step} failure")))
            .unwrap_or_else(|| panic!("the {step} fault never fired:\n{log}"));
        assert!(
            !line.contains(".creating"),
            "fired while creating a log: {line}"
        );
    }
    let failures = log.matches("is marked failed").count();
    assert!(failures >= 2, "append and roll fail partitions:\n{log}");
    assert!(
        log.matches("sound again").count() >= failures,
        "every failed partition resumed by itself:\n{log}"
    );
    support::wait_until(Duration::from_secs(10), "no partition failed", || {
        failed(&data).is_empty()
    });
    assert!(d.stop().success(), "{}", d.log_text());
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    support::assert_checkpoints_within_logs(&data);
    for p in 0..2 {
        assert!(caught_up(&data, &leader, p), "partition {p}");
        support::assert_indexes_point_at_batch_starts(&data, &TopicPartition::new(TOPIC, p));
    }
}

#[test]
fn a_removed_partition_directory_fails_that_partition_and_the_others_finish() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 100, 10);
    leader.append(1, 100, 10);
    let cfg = config(dir.path(), &data, &leader);
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(20), "first catch-up", || {
        caught_up(&data, &leader, 0) && caught_up(&data, &leader, 1)
    });
    let gone = data.join(TopicPartition::new(TOPIC, 0).dir_name());
    std::fs::remove_dir_all(&gone).unwrap();
    for _ in 0..5 {
        leader.append(0, 100, 10);
        leader.append(1, 100, 10);
        std::thread::sleep(Duration::from_millis(100));
    }
    support::wait_until(Duration::from_secs(20), "partition 1 caught up", || {
        caught_up(&data, &leader, 1)
    });
    support::wait_until(Duration::from_secs(10), "status shows the failure", || {
        !failed(&data).is_empty()
    });
    let f = failed(&data);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["topic"], TOPIC);
    assert_eq!(f[0]["partition"], 0);
    let reason = f[0]["reason"].as_str().unwrap();
    assert!(reason.contains(&gone.display().to_string()), "{reason}");
    // The healthy partition is in status as usual.
    let p1 = support::partition_status(&data, TOPIC, 1).expect("partition 1 in status");
    assert_eq!(p1["log_end_offset"], leader.log_end(1));
    let text = std::process::Command::new(support::bin())
        .args(["status", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("{TOPIC}-0: FAILED")), "{text}");
    // Calm: the failure is said once, and the retries (its directory stays gone) say nothing
    // new.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(d.is_running());
    let log = d.log_text();
    assert_eq!(log.matches("is marked failed").count(), 1, "{log}");
    assert!(
        !gone.exists(),
        "a failed partition's directory is not made again"
    );
    assert!(d.stop().success(), "{}", d.log_text());
    assert!(caught_up(&data, &leader, 1));
}
