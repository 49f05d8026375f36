//! An unclean leader election: the leader loses a tail the replica already holds below its
//! high watermark, and a new epoch writes other batches there. The replica truncates to the
//! new leader (byte-identical afterwards) but first keeps the removed batches, byte for byte,
//! in `diverged/<first>-<last>.log`, reports them in `status`, and logs an ERROR naming the
//! range. A crash right after the copy (before the cut) ends in the same state, with the copy
//! made once.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOPIC: &str = "ue";

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("log.segment_bytes", 4096)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .write(dir)
}

/// 300 records in batches of 25 (0..299), followed until the replica's HW checkpoint says 300.
fn follow_to_300(leader: &TestLeader, data: &Path) {
    support::wait_until(Duration::from_secs(20), "catch-up to 300", || {
        support::log_end(data, TOPIC, 0) == 300
    });
    support::wait_until(
        Duration::from_secs(10),
        "the replica's high watermark to reach 300",
        || {
            support::read_checkpoint(&data.join("replication-offset-checkpoint"))
                .get(&(TOPIC.to_string(), 0))
                == Some(&300)
        },
    );
    assert_eq!(
        support::local_log_bytes(data, &TopicPartition::new(TOPIC, 0)),
        leader.log_bytes(0)
    );
}

/// The unclean election: the leader keeps 0..199 (the batch 200..224 holds 210, so it goes
/// too) and writes 150 other records at a new epoch. Returns the bytes it lost.
fn elect_uncleanly(leader: &TestLeader) -> Vec<u8> {
    let before = leader.log_bytes(0);
    let epoch = leader.leader_epoch(0);
    leader.truncate_and_bump_epoch(0, 210);
    assert_eq!(leader.log_end(0), 200);
    assert_eq!(leader.leader_epoch(0), epoch + 1);
    let kept = leader.log_bytes(0);
    assert!(before.starts_with(&kept));
    let lost = before[kept.len()..].to_vec();
    leader.append(0, 150, 30); // 200..349 at the new epoch
    let after = leader.log_bytes(0);
    assert!(
        after[kept.len()..] != lost[..],
        "the new epoch's batches differ"
    );
    lost
}

/// Every file under `diverged/` (any name).
fn diverged_files(data: &Path) -> Vec<PathBuf> {
    let ddir = data
        .join(TopicPartition::new(TOPIC, 0).dir_name())
        .join("diverged");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&ddir)
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// The replica equals the new leader, and `diverged/` holds exactly one copy: `200-299.log`
/// with the lost bytes; `status` and `verify` agree.
fn assert_end_state(leader: &TestLeader, data: &Path, lost: &[u8]) {
    let tp = TopicPartition::new(TOPIC, 0);
    let local = support::local_log_bytes(data, &tp);
    let remote = leader.log_bytes(0);
    assert_eq!(
        local.len(),
        remote.len(),
        "byte count against the new leader"
    );
    assert!(local == remote, "the replica differs from the new leader");

    let files = diverged_files(data);
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["200-299.log"], "diverged/ holds exactly one copy");
    let kept = std::fs::read(&files[0]).unwrap();
    assert_eq!(kept.len(), lost.len(), "diverged copy: byte count");
    assert!(kept == lost, "the diverged copy is not the removed batches");

    // The checkpoints (HW, leader epochs) follow at the checkpoint interval.
    let epoch = leader.leader_epoch(0);
    let mut st = serde_json::Value::Null;
    support::wait_until(
        Duration::from_secs(10),
        "the checkpoints to catch up with the new history",
        || {
            st = support::partition_status(data, TOPIC, 0).expect("status");
            st["high_watermark"] == 350 && st["leader_epoch"] == epoch
        },
    );
    assert_eq!(st["log_end_offset"], 350, "{st}");
    let div = st["diverged"].as_array().expect("diverged is a list");
    assert_eq!(
        st["diverged_ranges"].as_u64(),
        Some(div.len() as u64),
        "{st}"
    );
    assert_eq!(div.len(), 1, "{st}");
    assert_eq!(div[0]["first_offset"], 200, "{st}");
    assert_eq!(div[0]["last_offset"], 299, "{st}");
    assert_eq!(div[0]["size_bytes"], lost.len(), "{st}");
    let path = PathBuf::from(div[0]["path"].as_str().expect("path"));
    assert_eq!(
        std::fs::canonicalize(&path).unwrap(),
        std::fs::canonicalize(&files[0]).unwrap(),
        "{st}"
    );
    let (ok, out) = support::verify(data);
    assert!(ok, "verify failed:\n{out}");
    support::assert_checkpoints_within_logs(data);
}

fn error_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" ERROR ") && l.contains("ue-0") && l.contains("200..299"))
        .collect()
}

#[test]
fn truncation_after_an_unclean_election_keeps_the_removed_batches() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 300, 25);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = support::Daemon::start(&config(dir.path(), &data, &leader));
    follow_to_300(&leader, &data);
    assert!(
        support::segment_count(&data, &TopicPartition::new(TOPIC, 0)) > 2,
        "the removed range should span segments"
    );

    let lost = elect_uncleanly(&leader);
    support::wait_until(
        Duration::from_secs(20),
        "the replica to take the new history",
        || support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0)) == leader.log_bytes(0),
    );
    assert_end_state(&leader, &data, &lost);
    let log = d.log_text();
    assert!(
        !error_lines(&log).is_empty(),
        "an ERROR naming the removed range:\n{log}"
    );
    assert!(d.is_running());
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    assert_end_state(&leader, &data, &lost);
}

#[test]
fn a_crash_between_the_diverged_copy_and_the_cut_ends_the_same_way() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 300, 25);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = config(dir.path(), &data, &leader);
    let mut d = support::Daemon::start_with_env(
        &cfg,
        &[
            ("RF_TEST_PAUSE_AT", "diverged-copied"),
            ("RF_TEST_PAUSE_MS", "60000"),
        ],
    );
    follow_to_300(&leader, &data);
    let held = support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0));

    let lost = elect_uncleanly(&leader);
    support::wait_until(
        Duration::from_secs(20),
        "the daemon to pause after the diverged copy",
        || d.log_text().contains("test pause at diverged-copied"),
    );
    d.kill9();
    // At the kill the copy is durable and the log is not cut yet: the batches are in both
    // places, never in neither.
    assert_eq!(
        support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0)),
        held,
        "the log was cut before the pause"
    );
    let files = diverged_files(&data);
    assert_eq!(files.len(), 1, "one diverged copy at the pause: {files:?}");
    assert_eq!(
        files[0].file_name().unwrap().to_string_lossy(),
        "200-299.log"
    );
    assert!(
        std::fs::read(&files[0]).unwrap() == lost,
        "copy at the pause"
    );

    let log_before = d.log_text().len();
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(20),
        "the restarted replica to take the new history",
        || support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0)) == leader.log_bytes(0),
    );
    assert_end_state(&leader, &data, &lost);
    let log = d.log_text();
    assert!(
        !log[log_before..].contains("test pause at"),
        "the restart runs without the hook:\n{log}"
    );
    assert!(d.is_running());
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    assert_end_state(&leader, &data, &lost);
}
