//! Both sides of KIP-227 against each other: a replica-follower chained behind another's
//! serve listener fetches in a session (the listener grants it, the follower then sends
//! incremental fetches); a follower-privileged client (replica id ≥ 0) evicts its session
//! from a full cache (`max_fetch_sessions = 1`); the chained follower gets
//! FETCH_SESSION_ID_NOT_FOUND, says so once at INFO, opens a new session with a full fetch
//! and keeps up — byte-identical, with no WARN or ERROR on either daemon.

use crate::support;
use crate::support::fetch_session;
use crate::support::{Daemon, local_log_bytes, log_end, wait_until};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::uuid::Uuid;
use std::time::Duration;

const TOPIC: &str = "chained";
const PARTITIONS: i32 = 30;

#[test]
fn a_chained_follower_fetches_in_a_session_and_recovers_when_it_is_evicted() {
    let leader = fetch_session::leader_of(TOPIC, PARTITIONS, 40, 4);
    let (_a_dir, a_data, addr, mut a) =
        // Only clients the config trusts get a follower's session priority.
        fetch_session::serving(
            &leader,
            TOPIC,
            |c| {
                c.set("serve.max_fetch_sessions", 1)
                    .set("serve.follower_addresses", vec!["127.0.0.1"])
            },
        );
    let caught_up = |data: &std::path::Path| {
        (0..PARTITIONS).all(|p| log_end(data, TOPIC, i64::from(p)) == leader.log_end(p))
    };
    // B starts once A holds the topic (before, A's listener has nothing to name).
    wait_until(Duration::from_secs(30), "A to catch up", || {
        caught_up(&a_data)
    });
    let tmp = tempfile::tempdir().unwrap();
    let b_data = tmp.path().join("data");
    let b_cfg = support::Config::new(&b_data, &addr)
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .write(tmp.path());
    let mut b = Daemon::start(&b_cfg);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(caught_up(&a_data) && caught_up(&b_data)) {
        if std::time::Instant::now() > deadline {
            let ends = |d: &std::path::Path| {
                (0..PARTITIONS)
                    .map(|p| log_end(d, TOPIC, i64::from(p)))
                    .collect::<Vec<_>>()
            };
            panic!(
                "not caught up: leader {:?}\nA {:?}\nB {:?}\nB log:\n{}\nA log:\n{}",
                (0..PARTITIONS)
                    .map(|p| leader.log_end(p))
                    .collect::<Vec<_>>(),
                ends(&a_data),
                ends(&b_data),
                b.log_text(),
                a.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // A client fetching as a trusted follower takes the only session slot from B's (a
    // consumer's).
    let mut c = fetch_session::connect(&addr);
    let id = Uuid(leader.topic_id());
    let open = fetch_session::send(
        &mut c,
        12,
        &fetch_session::request(TOPIC, id, &[(0, 0)], &[], 0, 0, 1, 100),
    );
    assert_eq!(open.error, ErrorCode::NONE);
    assert!(open.session_id > 0, "the privileged client got no session");

    // More data: B's next incremental fetch finds its session gone, and it starts again.
    for p in 0..PARTITIONS {
        leader.append(p, 8, 4);
    }
    wait_until(
        Duration::from_secs(30),
        "B to catch up after eviction",
        || caught_up(&a_data) && caught_up(&b_data),
    );
    let log = b.log_text();
    assert!(
        log.contains("ended with FETCH_SESSION_ID_NOT_FOUND")
            && log.contains("starting a new one with a full fetch"),
        "B never had its session evicted (was it fetching in one?):\n{log}"
    );
    // And it keeps up in its new session.
    for p in (0..PARTITIONS).step_by(7) {
        leader.append(p, 5, 5);
    }
    wait_until(Duration::from_secs(30), "B to keep up", || {
        caught_up(&a_data) && caught_up(&b_data)
    });
    fetch_session::stop_calmly(&mut b);
    fetch_session::stop_calmly(&mut a);
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(TOPIC, p);
        assert!(
            local_log_bytes(&b_data, &tp) == local_log_bytes(&a_data, &tp),
            "{tp}: the chained replica differs"
        );
    }
}
