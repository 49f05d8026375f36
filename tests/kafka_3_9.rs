//! Compatibility with the last Apache Kafka 3.x line (3.9): following, a leader killed with
//! SIGKILL under load, and transactions, each byte-identical to Kafka's own directories.
//!
//! A test binary of its own, as `tests/kafka.rs` is: the 3.9 cluster lives as long as the
//! process (a static), and one process shares one cluster.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    reason = "a test fails by panicking, and indexes its own fixtures freely"
)]

mod support;

use replica_follower::checkpoint::TopicPartition;
use serde_json::json;
use support::kafka::{self, KAFKA_3, Shared};

fn cluster() -> &'static Shared {
    kafka::shared(KAFKA_3)
}

#[test]
fn kafka_3_9_followed_through_a_leader_killed_under_load() {
    let c = cluster();
    let _alone = c.alone();
    let topic = "k39-follow";
    c.ok(json!({"cmd": "create_topic", "topic": topic, "assignment": [[1, 2, 3]]}));
    let (_dir, data, mut d) = kafka::follow(c, topic);
    for (i, codec) in support::CODECS.iter().enumerate() {
        c.ok(
            json!({"cmd": "produce", "topic": topic, "partition": 0, "count": 200,
            "codec": codec, "idempotent": true, "batch_records": 25, "seed": i}),
        );
    }
    let tp = TopicPartition::new(topic, 0);
    assert_eq!(kafka::assert_same_as_kafka(c, &data, &tp).0, 1000);
    let (_, first, last) = kafka::kill_leader_under_load(c, topic, 3000);
    let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(hw, 4000, "every record once: no gap, no duplicate");
    let replica = kafka::dir_batches(&data.join(tp.dir_name()), hw).unwrap();
    kafka::assert_contiguous(&replica);
    kafka::assert_epoch_changed_within(&replica, first, last);
    eprintln!("Kafka 3.9 leader kill: {hw} records in {batches} batches byte-identical");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    c.ok(json!({"cmd": "kafka_node", "node": 1, "action": "start"}));
}

#[test]
fn kafka_3_9_transactions_are_byte_identical_with_the_same_aborted_index() {
    let c = cluster();
    let _shared = c.sharing();
    let topic = "k39-tx";
    c.ok(json!({"cmd": "create_topic", "topic": topic, "partitions": 1}));
    let (_dir, data, mut d) = kafka::follow(c, topic);
    let r = c.ok(
        json!({"cmd": "produce_transactional", "topic": topic, "partition": 0,
        "transactions": [{"count": 50, "commit": true}, {"count": 30, "commit": false},
                         {"count": 40, "commit": true}, {"count": 20, "commit": false}],
        "transactional_id": "k39-tx", "codec": "zstd"}),
    );
    let tp = TopicPartition::new(topic, 0);
    let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(hw, r["end_offset"].as_i64().unwrap());
    let leader = kafka::leader_of(c, topic, 0);
    let theirs = kafka::txnindex_entries(&c.log_dir(leader).join(tp.dir_name()));
    assert_eq!(
        theirs.len(),
        2 * 34,
        "Kafka indexed both aborted transactions"
    );
    let ours = kafka::txnindex_entries(&data.join(tp.dir_name()));
    assert_eq!(
        ours, theirs,
        "the replica's .txnindex entries equal Kafka's"
    );
    eprintln!("Kafka 3.9 transactions: {hw} offsets in {batches} batches; 2 aborted entries equal");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}
