//! Chained followers: a second replica-follower whose only bootstrap server is the first
//! one's `[serve]` listener. It ends byte-identical to the first and to the leader, keeps up
//! as more is produced, follows through a leader move upstream (librdkafka's mock cluster,
//! `set_leader`), and truncates through the served OffsetForLeaderEpoch / diverging epoch
//! when the leader upstream truncates and bumps its epoch (the in-process test leader).

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// Waits until both replicas' logs of `tp` end at `end`, then asserts they hold the same
/// bytes, and that these are `leader`'s.
fn assert_chain_identical(
    first: &Path,
    second: &Path,
    tp: &TopicPartition,
    end: i64,
    leader: &[u8],
) {
    for (name, data) in [("first", first), ("second", second)] {
        support::wait_until(
            Duration::from_secs(30),
            &format!("the {name} replica of {tp} to reach {end}"),
            || support::log_end(data, &tp.topic, i64::from(tp.partition)) == end,
        );
    }
    let a = support::local_log_bytes(first, tp);
    let b = support::local_log_bytes(second, tp);
    assert_eq!(
        (a.len(), b.len()),
        (leader.len(), leader.len()),
        "{tp}: byte counts"
    );
    assert!(
        a == leader,
        "{tp}: the first replica differs from the leader"
    );
    assert!(b == a, "{tp}: the second replica differs from the first");
}

#[test]
fn a_follower_of_the_replica_follows_a_leader_move_upstream() {
    const TOPIC: &str = "chain";
    let mut leader = support::Leader::start("mock", 3);
    leader.create_topic(TOPIC, 2);
    leader.ok(json!({"cmd": "set_leader", "topic": TOPIC, "partition": 0, "broker": 1}));
    let mut ends = [0i64; 2];
    for (p, end) in ends.iter_mut().enumerate() {
        *end = leader.produce(TOPIC, p as i32, 600, "lz4", p as u64).1 + 1;
    }
    let (_d1, first, addr, mut one) = support::serving_follower(&leader.bootstrap, TOPIC);
    let (_d2, second, _, mut two) = support::serving_follower(&addr, TOPIC);
    let check = |leader: &mut support::Leader, ends: &[i64; 2]| {
        for p in 0..2 {
            let tp = TopicPartition::new(TOPIC, p);
            let bytes = support::leader_bytes(&leader.bootstrap, &tp, 0);
            assert_chain_identical(&first, &second, &tp, ends[p as usize], &bytes);
        }
    };
    check(&mut leader, &ends);

    // More records: the chain keeps up.
    for (p, end) in ends.iter_mut().enumerate() {
        *end = leader
            .produce(TOPIC, p as i32, 300, "zstd", 10 + p as u64)
            .1
            + 1;
    }
    check(&mut leader, &ends);

    // The leader moves upstream; the first follower moves with it, the second never knows.
    leader.ok(json!({"cmd": "set_leader", "topic": TOPIC, "partition": 0, "broker": 3}));
    ends[0] = leader.produce(TOPIC, 0, 300, "gzip", 20).1 + 1;
    check(&mut leader, &ends);
    assert!(
        one.log_text()
            .contains(&format!("{TOPIC}-0: leader is now broker 3")),
        "{}",
        one.log_text()
    );
    assert_eq!(two.stop().code(), Some(0), "{}", two.log_text());
    assert_eq!(one.stop().code(), Some(0), "{}", one.log_text());
}

#[test]
fn a_truncation_upstream_propagates_down_the_chain() {
    const TOPIC: &str = "chain-trunc";
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 200, 10);
    let (_d1, first, addr, mut one) = support::serving_follower(&leader.addr(), TOPIC);
    let (_d2, second, _, mut two) = support::serving_follower(&addr, TOPIC);
    let tp = TopicPartition::new(TOPIC, 0);
    assert_chain_identical(&first, &second, &tp, 200, &leader.log_bytes(0));
    // Let the second replica's high watermark reach the end too, so that the truncation
    // below removes batches it holds as committed.
    support::wait_until(Duration::from_secs(10), "the second replica's HW", || {
        support::partition_status(&second, TOPIC, 0).is_some_and(|s| s["high_watermark"] == 200)
    });

    // The leader loses 150..200 and goes on at a new epoch with other records.
    leader.truncate_and_bump_epoch(0, 150);
    leader.append(0, 80, 10);
    let end = leader.log_end(0);
    assert_eq!(end, 230);
    assert_chain_identical(&first, &second, &tp, end, &leader.log_bytes(0));
    for (name, data) in [("first", &first), ("second", &second)] {
        let path = data.join(tp.dir_name()).join("leader-epoch-checkpoint");
        let line = format!("{} 150", leader.leader_epoch(0));
        // Written with the next checkpoint round after the truncation.
        support::wait_until(
            Duration::from_secs(10),
            &format!("the {name} replica's leader-epoch-checkpoint to hold {line:?}"),
            || std::fs::read_to_string(&path).is_ok_and(|t| t.lines().any(|l| l == line)),
        );
        let (ok, out) = support::verify(data);
        assert!(ok, "verify the {name} replica:\n{out}");
    }
    assert!(
        two.log_text().contains("truncat"),
        "the second replica should say it truncated:\n{}",
        two.log_text()
    );
    assert_eq!(two.stop().code(), Some(0), "{}", two.log_text());
    assert_eq!(one.stop().code(), Some(0), "{}", one.log_text());
}
