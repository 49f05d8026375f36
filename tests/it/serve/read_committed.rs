//! A read_committed confluent-kafka consumer of the replica skips exactly the aborted
//! records and stops at the last stable offset; a read_uncommitted one gets every data
//! record. The transactional log comes from the in-process test leader (committed and
//! aborted transactions, two interleaved, one still open at the end), since Tansu stores no
//! aborted batches.

use crate::support;
use crate::support::batches::{control_batch, txn_batch};
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::time::Duration;

const TOPIC: &str = "txn-read";

#[test]
fn read_committed_consumers_of_the_replica_skip_exactly_the_aborted_records() {
    let leader = TestLeader::start(TOPIC, 1);
    let marker = |offset: i64, pid: i64, commit: bool| control_batch(offset, pid, 0, commit, 3, 0);
    leader.append(0, 10, 5); // 0..9
    leader.append_batch(0, txn_batch(10, 5, 1001, 0, 0)); // 10..14, committed
    leader.append_batch(0, marker(15, 1001, true));
    leader.append_batch(0, txn_batch(16, 4, 1002, 0, 0)); // 16..19, aborted
    leader.append_batch(0, marker(20, 1002, false));
    leader.append(0, 5, 5); // 21..25
    leader.append_batch(0, txn_batch(26, 3, 1003, 0, 0)); // 26..28, aborted
    leader.append_batch(0, txn_batch(29, 2, 1004, 0, 0)); // 29..30, committed
    leader.append_batch(0, marker(31, 1003, false));
    leader.append_batch(0, marker(32, 1004, true));
    leader.append(0, 5, 5); // 33..37
    leader.append_batch(0, txn_batch(38, 3, 1005, 0, 0)); // 38..40, still open
    leader.append(0, 3, 3); // 41..43
    assert_eq!((leader.log_end(0), leader.last_stable_offset(0)), (44, 38));

    let (_dir, data, addr, mut d) = support::serving_follower(&leader.addr(), TOPIC);
    support::wait_until(Duration::from_secs(20), "catch-up to 44", || {
        support::log_end(&data, TOPIC, 0) == 44
    });
    let tp = TopicPartition::new(TOPIC, 0);
    assert!(support::local_log_bytes(&data, &tp) == leader.log_bytes(0));

    let markers = [15, 20, 31, 32];
    let aborted: Vec<i64> = (16..=19).chain(26..=28).collect();
    let mut all = Vec::new();
    support::wait_until(Duration::from_secs(10), "the served high watermark", || {
        all = support::consume_all(&addr, TOPIC, 0, "read_uncommitted");
        all.len() == 40
    });
    assert_eq!(
        support::offsets_of(&all),
        (0..44).filter(|o| !markers.contains(o)).collect::<Vec<_>>(),
        "read_uncommitted: every data record, markers never delivered"
    );
    let value_of = |r: &serde_json::Value| {
        let hex = r["value"].as_str().unwrap_or_default();
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        String::from_utf8(bytes).unwrap()
    };
    assert_eq!(value_of(&all[15]), "txn-p1002-o16-e0", "{}", all[15]);

    let committed = support::consume_all(&addr, TOPIC, 0, "read_committed");
    let want: Vec<serde_json::Value> = all
        .iter()
        .filter(|r| {
            let o = r["offset"].as_i64().unwrap();
            o < 38 && !aborted.contains(&o)
        })
        .cloned()
        .collect();
    assert_eq!(
        support::offsets_of(&committed),
        support::offsets_of(&want),
        "read_committed: the aborted records skipped, nothing at or past the LSO (38)"
    );
    assert_eq!(committed, want, "read_committed: the same records");

    // The open transaction commits: read_committed now gets 38..43 as well.
    leader.append_batch(0, marker(44, 1005, true));
    support::wait_until(Duration::from_secs(20), "catch-up to 45", || {
        support::log_end(&data, TOPIC, 0) == 45
    });
    let mut committed = Vec::new();
    support::wait_until(
        Duration::from_secs(10),
        "the served LSO to reach 45",
        || {
            committed = support::consume_all(&addr, TOPIC, 0, "read_committed");
            support::offsets_of(&committed).last() == Some(&43)
        },
    );
    let want: Vec<serde_json::Value> = all
        .iter()
        .filter(|r| !aborted.contains(&r["offset"].as_i64().unwrap()))
        .cloned()
        .collect();
    assert_eq!(committed, want, "read_committed after the last commit");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}
