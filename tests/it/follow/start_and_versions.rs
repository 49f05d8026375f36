//! Where a partition without local state starts (`start` = latest or a timestamp), and a
//! leader that speaks only older versions: ApiVersions ≤ v2 (UNSUPPORTED_VERSION to v3) and
//! Fetch ≤ v11 (no diverging epochs), so a restart after the leader's log diverged goes
//! through OffsetForLeaderEpoch.

use crate::support;
use crate::support::test_leader::{FIRST_TIMESTAMP, TestLeader};
use replica_follower::checkpoint::TopicPartition;
use std::time::Duration;

fn follow(
    dir: &std::path::Path,
    leader: &TestLeader,
    start: &str,
) -> (support::Daemon, std::path::PathBuf) {
    let data = dir.join("data");
    let cfg = support::Config::new(&data, &leader.addr())
        .follow("s")
        .with("start", start)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .write(dir);
    (support::Daemon::start(&cfg), data)
}

#[test]
fn start_latest_begins_at_the_leaders_end() {
    let leader = TestLeader::start("s", 1);
    leader.append(0, 100, 10);
    let dir = tempfile::tempdir().unwrap();
    let (mut d, data) = follow(dir.path(), &leader, "latest");
    support::wait_until(Duration::from_secs(20), "the log to be created", || {
        support::partition_status(&data, "s", 0).is_some()
    });
    leader.append(0, 50, 10);
    support::wait_until(Duration::from_secs(20), "new records", || {
        support::log_end(&data, "s", 0) == 150
    });
    assert_eq!(d.stop().code(), Some(0));
    let st = support::partition_status(&data, "s", 0).unwrap();
    assert_eq!(st["log_start_offset"], 100, "{st}");
    let all = leader.log_bytes(0);
    let local = support::local_log_bytes(&data, &TopicPartition::new("s", 0));
    assert!(!local.is_empty() && all.ends_with(&local) && local.len() < all.len());
}

#[test]
fn start_at_a_timestamp_begins_at_the_first_record_at_or_after_it() {
    let leader = TestLeader::start("s", 1);
    leader.append(0, 100, 10);
    let dir = tempfile::tempdir().unwrap();
    // Record 45 has timestamp FIRST_TIMESTAMP + 45; it sits in the batch 40..49.
    let (mut d, data) = follow(dir.path(), &leader, &(FIRST_TIMESTAMP + 45).to_string());
    support::wait_until(Duration::from_secs(20), "catch-up", || {
        support::log_end(&data, "s", 0) == 100
    });
    assert_eq!(d.stop().code(), Some(0));
    let st = support::partition_status(&data, "s", 0).unwrap();
    assert_eq!(st["log_start_offset"], 45, "{st}");
    // The whole batch holding offset 45 is kept, byte for byte.
    let all = leader.log_bytes(0);
    let local = support::local_log_bytes(&data, &TopicPartition::new("s", 0));
    let from = replica_follower::record::BatchIter::new(&all, usize::MAX)
        .find(|(h, _, _)| h.contains(45))
        .map(|(h, pos, _)| {
            assert_eq!(h.base_offset, 40);
            pos
        })
        .expect("a batch holds offset 45");
    assert!(
        local == all[from..],
        "the local log is the leader's from batch 40..49 on"
    );
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}

#[test]
fn an_old_leader_without_fetch_v12_is_reconciled_with_offset_for_leader_epoch() {
    let leader = TestLeader::start("s", 1);
    leader.set_api_versions_max(2);
    leader.set_fetch_versions(4, 11);
    leader.append(0, 300, 25);
    let dir = tempfile::tempdir().unwrap();
    let (mut d, data) = follow(dir.path(), &leader, "earliest");
    support::wait_until(Duration::from_secs(20), "catch-up", || {
        support::log_end(&data, "s", 0) == 300
    });
    assert_eq!(d.stop().code(), Some(0));

    // While the follower is down, the leader loses offsets 200.. and a new epoch writes others.
    leader.truncate_and_bump_epoch(0, 200);
    leader.append(0, 150, 25);
    let (mut d, data) = follow(dir.path(), &leader, "earliest");
    support::wait_until(Duration::from_secs(20), "the new history", || {
        support::local_log_bytes(&data, &TopicPartition::new("s", 0)) == leader.log_bytes(0)
    });
    let log = d.log_text();
    assert!(
        log.contains("truncating 300 → 200"),
        "OffsetForLeaderEpoch found the common point:\n{log}"
    );
    assert_eq!(d.stop().code(), Some(0));
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}

#[test]
fn sigterm_ends_quickly_while_offset_for_leader_epoch_hangs() {
    let leader = TestLeader::start("s", 3);
    leader.set_fetch_versions(4, 11);
    for p in 0..3 {
        leader.append(p, 100, 20);
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut d, data) = follow(dir.path(), &leader, "earliest");
    for p in 0..3 {
        support::wait_until(Duration::from_secs(20), "catch-up", || {
            support::log_end(&data, "s", p) == 100
        });
    }
    assert_eq!(d.stop().code(), Some(0));
    // On restart every partition asks OffsetForLeaderEpoch (no Fetch v12), and the leader
    // never answers: the fetcher waits under its partition-map lock. Partition 3 does not
    // exist, so the manager keeps refreshing every backoff and soon blocks on that lock too.
    leader.silence_api(Some(23));
    let cfg = support::Config::new(&dir.path().join("data"), &leader.addr())
        .follow("s")
        .with("partitions", vec![0, 1, 2, 3])
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 100)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(20), "the fetcher to connect", || {
        d.log_text().contains("connected to broker")
    });
    std::thread::sleep(Duration::from_millis(1500));
    let stopping = std::time::Instant::now();
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "SIGTERM took {:?}",
        stopping.elapsed()
    );
}

#[test]
fn retrying_a_failing_list_offsets_does_not_leak_connections() {
    let leader = TestLeader::start("s", 1);
    leader.append(0, 10, 5);
    leader.close_on_api(Some(2)); // ListOffsets: the connection is closed, every time
    let dir = tempfile::tempdir().unwrap();
    let (mut d, _) = follow(dir.path(), &leader, "earliest");
    let pid = d.pid();
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |r| r.count());
    support::wait_until(Duration::from_secs(10), "retries to begin", || {
        d.log_text()
            .contains("cannot set the initial fetch position")
    });
    std::thread::sleep(Duration::from_millis(500));
    let before = fds();
    std::thread::sleep(Duration::from_secs(2)); // about 20 retries at backoff_ms = 100
    let after = fds();
    assert!(
        after <= before + 2,
        "descriptors grew from {before} to {after} while retrying"
    );
    // Once ListOffsets answers again, the partition starts.
    leader.close_on_api(None);
    let data = dir.path().join("data");
    support::wait_until(Duration::from_secs(20), "catch-up", || {
        support::log_end(&data, "s", 0) == 10
    });
    assert_eq!(d.stop().code(), Some(0));
}
