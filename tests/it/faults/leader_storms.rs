//! A leader that refuses for a long time costs a few log lines, not a storm: 1,000
//! partitions answered NOT_LEADER_OR_FOLLOWER by the leader the metadata names (hand-backs
//! and reassignments back off exponentially, and are said in one line a round), and a leader
//! whose fetches fail (warned when it starts, retried less and less often). Both end
//! byte-identical once the leader answers again.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::Path;
use std::time::{Duration, Instant};

const TOPIC: &str = "storm";
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("checkpoint.interval_ms", 500)
        .write(dir)
}

fn all_caught_up(data: &Path, leader: &TestLeader, partitions: i32) -> bool {
    (0..partitions).all(|p| {
        support::local_log_bytes(data, &TopicPartition::new(TOPIC, p)) == leader.log_bytes(p)
    })
}

/// The daemon's log lines written while `f` runs, and the time it took.
fn lines_during(d: &support::Daemon, f: impl FnOnce()) -> (Vec<String>, Duration) {
    let before = d.log_text().lines().count();
    let t = Instant::now();
    f();
    let lines = d
        .log_text()
        .lines()
        .skip(before)
        .map(str::to_string)
        .collect();
    (lines, t.elapsed())
}

#[test]
fn a_thousand_partitions_answered_not_leader_cost_a_few_lines() {
    let _heavy = support::heavy();
    const PARTITIONS: i32 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, PARTITIONS);
    for p in 0..PARTITIONS {
        leader.append(p, 2, 2);
    }
    let mut d = support::Daemon::start(&config(dir.path(), &data, &leader));
    support::wait_until(Duration::from_secs(60), "first catch-up", || {
        all_caught_up(&data, &leader, PARTITIONS)
    });
    let (lines, took) = lines_during(&d, || {
        for p in 0..PARTITIONS {
            leader.error_next_fetches(p, NOT_LEADER_OR_FOLLOWER, usize::MAX);
            leader.append(p, 2, 2);
        }
        std::thread::sleep(Duration::from_secs(10));
    });
    assert!(d.is_running());
    assert!(
        lines
            .iter()
            .any(|l| l.contains("handed back for a leader lookup")),
        "the hand-backs are said:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.len() <= 20,
        "{} lines in {took:?} of NOT_LEADER_OR_FOLLOWER for {PARTITIONS} partitions:\n{}",
        lines.len(),
        lines.join("\n")
    );
    let requests = leader.fetch_requests();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        leader.fetch_requests() - requests <= 4,
        "reassignments back off: {} fetches in 2 s",
        leader.fetch_requests() - requests
    );
    for p in 0..PARTITIONS {
        leader.error_next_fetches(p, NOT_LEADER_OR_FOLLOWER, 0);
    }
    support::wait_until(Duration::from_secs(40), "catch-up after the storm", || {
        all_caught_up(&data, &leader, PARTITIONS)
    });
    assert!(d.stop().success(), "{}", d.log_text());
}

#[test]
fn a_leader_whose_fetches_fail_is_warned_of_once_and_retried_less_often() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 3);
    for p in 0..3 {
        leader.append(p, 20, 5);
    }
    let mut d = support::Daemon::start(&config(dir.path(), &data, &leader));
    support::wait_until(Duration::from_secs(20), "first catch-up", || {
        all_caught_up(&data, &leader, 3)
    });
    const FETCH: i16 = 1;
    let (lines, took) = lines_during(&d, || {
        leader.close_on_api(Some(FETCH));
        // Appended only once a fetch failed, so that catching up needs a fetch that works.
        support::wait_until(Duration::from_secs(10), "a failed fetch", || {
            d.log_text().contains("then less often")
        });
        for p in 0..3 {
            leader.append(p, 20, 5);
        }
        std::thread::sleep(Duration::from_secs(8));
    });
    let warned = lines.iter().filter(|l| l.contains("failed")).count();
    assert!(warned >= 1, "the failure is said:\n{}", lines.join("\n"));
    assert!(
        lines.len() <= 4,
        "{} lines in {took:?} of failing fetches:\n{}",
        lines.len(),
        lines.join("\n")
    );
    leader.close_on_api(None);
    support::wait_until(
        Duration::from_secs(30),
        "catch-up once fetches work",
        || all_caught_up(&data, &leader, 3),
    );
    assert!(d.log_text().contains("works again"), "{}", d.log_text());
    assert!(d.stop().success(), "{}", d.log_text());
}
