//! Apache Kafka itself as the leader: one 3-node KRaft cluster of the pinned 4.x, installed
//! from Maven Central, shared by every scenario of this binary (here, and in `kafka/archive.rs`
//! and `kafka/protocol.rs`). Each scenario compares the replica with Kafka's own partition
//! directories, batch by batch, byte for byte.
//!
//! A test binary of its own, not a module of `tests/it`: the cluster lives as long as the
//! process (a static), and in `tests/it` its three JVMs would stay up through every other test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    reason = "a test fails by panicking, and indexes its own fixtures freely"
)]

mod support;

/// Compaction, history below Kafka's log start, Kafka's own tools over the replica.
#[path = "kafka/archive.rs"]
mod archive;
/// Transactions, Kafka's secured listeners, fetch sessions over 2,000 partitions, the admin
/// calls.
#[path = "kafka/protocol.rs"]
mod protocol;

use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::BatchHeader;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use support::kafka::{self, KAFKA_4, Shared, leader_of};
use support::{CODECS, Daemon};

fn cluster() -> &'static Shared {
    kafka::shared(KAFKA_4)
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.to_string(),
        partition,
    }
}

fn produce(c: &Shared, topic: &str, partition: i32, count: usize, codec: &str, seed: u64) {
    c.ok(
        json!({"cmd": "produce", "topic": topic, "partition": partition, "count": count,
        "codec": codec, "value_size": 120, "keys": "mixed", "headers": true, "seed": seed,
        "batch_records": 40, "idempotent": true}),
    );
}

#[test]
fn every_codec_with_headers_from_idempotent_producers_is_byte_identical_to_kafkas_segments() {
    let c = cluster();
    let _shared = c.sharing();
    let topic = "codecs";
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 3,
        "replication_factor": 3}),
    );
    // Half before the replica starts, half while it follows.
    for (i, codec) in CODECS.iter().enumerate() {
        for p in 0..3 {
            produce(c, topic, p, 300, codec, i as u64);
        }
    }
    let (dir, data, mut d) = kafka::follow(c, topic);
    for (i, codec) in CODECS.iter().enumerate() {
        for p in 0..3 {
            produce(c, topic, p, 300, codec, 10 + i as u64);
        }
    }
    let mut codecs_seen = BTreeSet::new();
    let mut producers = BTreeSet::new();
    for p in 0..3 {
        let tp = tp(topic, p);
        let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
        assert_eq!(hw, 3000, "{tp}: 10 rounds of 300 records");
        assert!(batches >= 75, "{tp}: only {batches} batches compared");
        for (_, _, b) in kafka::dir_batches(&data.join(tp.dir_name()), hw).unwrap() {
            let h = BatchHeader::parse(&b, b.len()).unwrap();
            codecs_seen.insert(h.compression());
            producers.insert(h.producer_id);
        }
    }
    assert_eq!(
        codecs_seen.len(),
        CODECS.len(),
        "every codec is in the replica: {codecs_seen:?}"
    );
    assert!(
        !producers.contains(&-1),
        "idempotent producers give every batch a producer id: {producers:?}"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    // After a restart the replica is still Kafka's, and keeps following.
    let mut d = Daemon::start(&dir.path().join("follower.toml"));
    produce(c, topic, 1, 500, "zstd", 99);
    kafka::assert_same_as_kafka(c, &data, &tp(topic, 1));
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}

/// The byte comparison itself: one byte changed in one batch, or one batch missing, fails it.
#[test]
fn the_comparison_with_kafkas_directory_fails_when_one_byte_of_one_batch_differs() {
    let c = cluster();
    let _shared = c.sharing();
    let topic = "comparison";
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3}),
    );
    produce(c, topic, 0, 400, "lz4", 5);
    let (_dir, data, mut d) = kafka::follow(c, topic);
    let tp = tp(topic, 0);
    let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let leader =
        c.ok(json!({"cmd": "describe_partition", "topic": topic, "partition": 0}))["leader"]
            .as_i64()
            .unwrap();
    let kafka_dir = c.log_dir(leader).join(tp.dir_name());
    assert_eq!(
        kafka::compare_with_kafka_dir(&kafka_dir, &data, &tp, hw),
        Ok(batches)
    );

    let tampered = |edit: &dyn Fn(&Path)| {
        let copy = tempfile::tempdir().unwrap();
        let to = copy.path().join(tp.dir_name());
        std::fs::create_dir(&to).unwrap();
        for e in std::fs::read_dir(data.join(tp.dir_name())).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
        edit(&to);
        kafka::compare_with_kafka_dir(&kafka_dir, copy.path(), &tp, hw)
    };
    let first_log = |d: &Path| d.join("00000000000000000000.log");
    // One byte in the middle of the records of the third batch (covered by its CRC, which is
    // not checked by the comparison: it compares bytes).
    let changed = tampered(&|d| {
        let mut bytes = std::fs::read(first_log(d)).unwrap();
        let mut pos = 0;
        for _ in 0..2 {
            pos += BatchHeader::parse(&bytes[pos..], bytes.len())
                .unwrap()
                .size_in_bytes;
        }
        let size = BatchHeader::parse(&bytes[pos..], bytes.len())
            .unwrap()
            .size_in_bytes;
        bytes[pos + size / 2] ^= 0x01;
        std::fs::write(first_log(d), bytes).unwrap();
    });
    let err = changed.expect_err("a changed byte must fail the comparison");
    assert!(err.contains("differs"), "{err}");
    // The leader epoch field, outside the CRC, counts as well.
    let epoch = tampered(&|d| {
        let mut bytes = std::fs::read(first_log(d)).unwrap();
        bytes[15] ^= 0x01;
        std::fs::write(first_log(d), bytes).unwrap();
    });
    assert!(
        epoch.is_err(),
        "a changed leader epoch must fail the comparison"
    );
    // The last batch below the high watermark missing.
    let short = tampered(&|d| {
        let mut logs: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        let last = logs.last().unwrap();
        let bytes = std::fs::read(last).unwrap();
        let mut pos = 0;
        let mut starts = Vec::new();
        while pos < bytes.len() {
            starts.push(pos);
            pos += BatchHeader::parse(&bytes[pos..], bytes.len())
                .unwrap()
                .size_in_bytes;
        }
        std::fs::write(last, &bytes[..*starts.last().unwrap()]).unwrap();
    });
    let err = short.expect_err("a missing batch must fail the comparison");
    assert!(err.contains("batches below"), "{err}");
}

fn node(c: &Shared, id: i64, action: &str) {
    c.ok(json!({"cmd": "kafka_node", "node": id, "action": action}));
}

/// Waits until `topic`-0 has a leader other than `not`, and every replica in `isr`; returns
/// the leader.
fn wait_leader(c: &Shared, topic: &str, not: i64, isr: usize) -> i64 {
    let mut leader = -1;
    support::wait_until(
        std::time::Duration::from_secs(60),
        &format!("{topic}-0 to get a leader other than {not} and {isr} in-sync replicas"),
        || {
            let d = c.ok(json!({"cmd": "describe_partition", "topic": topic, "partition": 0}));
            leader = d["leader"].as_i64().unwrap();
            leader > 0 && leader != not && d["isr"].as_array().unwrap().len() == isr
        },
    );
    leader
}

/// The epochs the batches of `batches` carry, with the first offset of each: what a
/// follower's leader-epoch cache holds.
fn epochs_of(batches: &[kafka::DirBatch]) -> Vec<(i32, i64)> {
    let mut out: Vec<(i32, i64)> = Vec::new();
    for (base, _, bytes) in batches {
        let epoch = BatchHeader::parse(bytes, bytes.len())
            .unwrap()
            .partition_leader_epoch;
        if out.last().is_none_or(|l| l.0 != epoch) {
            out.push((epoch, *base));
        }
    }
    out
}

/// The leader is killed with SIGKILL while an idempotent acks=all producer writes, then
/// leadership moves by reassignment and by preferred election. The replica follows every
/// leader: no gap, no duplicate, the same batches as the last leader's directory, and its
/// leader-epoch checkpoint names every epoch the batches carry.
#[test]
fn leader_killed_under_acks_all_load_then_moved_by_reassignment_and_preferred_election() {
    let c = cluster();
    let _alone = c.alone();
    let topic = "leader-moves";
    c.ok(json!({"cmd": "create_topic", "topic": topic, "assignment": [[1, 2, 3]]}));
    assert_eq!(leader_of(c, topic, 0), 1);
    let (_dir, data, mut d) = kafka::follow(c, topic);
    let send = |count: usize, seed: u64| {
        produce(c, topic, 0, count, "snappy", seed);
        count as i64
    };
    let mut produced = send(500, 1);

    // 1. SIGKILL to the leader in the middle of 4,000 records paced over ~4 s.
    let (after_kill, load_first, load_last) = kafka::kill_leader_under_load(c, topic, 4000);
    produced += 4000;
    wait_leader(c, topic, 1, 2);
    node(c, 1, "start");
    wait_leader(c, topic, -1, 3);
    produced += send(300, 3);

    // 2. Reassignment away from the current leader moves leadership (to the node that is
    // neither it nor node 1, the first of the new replicas).
    let others: Vec<i64> = [3, 2, 1].into_iter().filter(|&n| n != after_kill).collect();
    c.ok(json!({"cmd": "reassign", "topic": topic, "partition": 0, "replicas": others}));
    let after_reassign = wait_leader(c, topic, after_kill, 2);
    assert_ne!(
        after_reassign, 1,
        "the reassignment leaves node 1 for the election"
    );
    produced += send(300, 4);

    // 3. Back to [1, 2, 3] and a preferred election: node 1 leads again.
    c.ok(json!({"cmd": "reassign", "topic": topic, "partition": 0, "replicas": [1, 2, 3]}));
    wait_leader(c, topic, -1, 3);
    c.ok(
        json!({"cmd": "elect_leaders", "topic": topic, "partitions": [0],
        "election": "preferred"}),
    );
    support::wait_until(
        std::time::Duration::from_secs(30),
        "node 1 to lead again",
        || leader_of(c, topic, 0) == 1,
    );
    produced += send(300, 5);

    let tp = tp(topic, 0);
    let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(
        hw, produced,
        "idempotent producers: every record once, no duplicate"
    );
    let replica = kafka::dir_batches(&data.join(tp.dir_name()), hw).unwrap();
    kafka::assert_contiguous(&replica);
    kafka::assert_epoch_changed_within(&replica, load_first, load_last);
    let epochs = epochs_of(&replica);
    assert!(
        epochs.len() >= 4,
        "batches from at least four epochs (kill, reassignment, election): {epochs:?}"
    );
    // The file is rewritten by the periodic checkpoint pass (every 200 ms here), which may
    // not have run since the last batch arrived.
    let read_checkpoint = || -> Vec<(i32, i64)> {
        std::fs::read_to_string(data.join(tp.dir_name()).join("leader-epoch-checkpoint"))
            .unwrap()
            .lines()
            .skip(2)
            .map(|l| {
                let mut f = l.split_whitespace().map(|x| x.parse::<i64>().unwrap());
                (f.next().unwrap() as i32, f.next().unwrap())
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while read_checkpoint() != epochs && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        read_checkpoint(),
        epochs,
        "the replica's leader-epoch-checkpoint"
    );
    eprintln!(
        "leader moves: leaders 1 -> {after_kill} (kill -9) -> {after_reassign} (reassignment) \
         -> 1 (preferred election); {hw} records, {batches} batches byte-identical, epochs \
         {epochs:?}"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}

/// Replication factor 2. The follower stops, the leader takes 200 more records alone, then is
/// killed, and the stale follower is elected uncleanly through Kafka's Admin API (ElectLeaders
/// UNCLEAN) and writes other records at a new epoch. The replica follows the new, shorter log:
/// the batches it must give up are kept byte for byte in `diverged/`, and it ends
/// byte-identical to the new leader's directory.
#[test]
fn unclean_election_of_a_stale_replica_keeps_the_cut_batches_in_diverged() {
    let c = cluster();
    let _alone = c.alone();
    let topic = "unclean";
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "assignment": [[1, 2]],
        "config": {"min.insync.replicas": "1"}}),
    );
    let (_dir, data, mut d) = kafka::follow(c, topic);
    produce(c, topic, 0, 300, "gzip", 1);
    let tp = tp(topic, 0);
    assert_eq!(kafka::assert_same_as_kafka(c, &data, &tp).0, 300);

    node(c, 2, "stop");
    support::wait_until(
        std::time::Duration::from_secs(30),
        "node 2 out of the ISR",
        || {
            let d = c.ok(json!({"cmd": "describe_partition", "topic": topic, "partition": 0}));
            d["isr"] == json!([1])
        },
    );
    produce(c, topic, 0, 200, "gzip", 2);
    assert_eq!(kafka::assert_same_as_kafka(c, &data, &tp).0, 500);
    let cut: Vec<u8> = kafka::dir_batches(&data.join(tp.dir_name()), 500)
        .unwrap()
        .into_iter()
        .filter(|b| b.0 >= 300)
        .flat_map(|b| b.2)
        .collect();

    node(c, 1, "kill9");
    node(c, 2, "start");
    // Once the controller fences node 1 the partition has no leader: no in-sync replica is left.
    support::wait_until(
        std::time::Duration::from_secs(30),
        "unclean-0 to lose its leader",
        || leader_of(c, topic, 0) == -1,
    );
    let out = c.ok(
        json!({"cmd": "elect_leaders", "topic": topic, "partitions": [0],
        "election": "unclean"}),
    );
    support::wait_until(std::time::Duration::from_secs(30), "node 2 to lead", || {
        leader_of(c, topic, 0) == 2
    });
    produce(c, topic, 0, 150, "zstd", 3);
    let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(
        hw, 450,
        "the new leader's log: 300 old records, 150 new ones"
    );

    let ddir = data.join(tp.dir_name()).join("diverged");
    let mut files: Vec<_> = std::fs::read_dir(&ddir)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", ddir.display(), d.log_text()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let kept: Vec<u8> = files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect();
    assert_eq!(
        kept.len(),
        cut.len(),
        "diverged/ holds the cut batches: {files:?}"
    );
    assert!(kept == cut, "diverged/ holds the cut batches byte for byte");
    let log = d.log_text();
    assert!(
        log.contains("ERROR") && log.contains("truncating offsets 300..499"),
        "the daemon's log names the cut: {log}"
    );
    eprintln!(
        "unclean election: {} (LeaderElectionCommand); replica cut 300..=499 ({} bytes in \
         {files:?}) and holds {hw} records in {batches} batches equal to node 2's",
        out["output"].as_str().unwrap_or("").trim(),
        cut.len()
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    // Node 1 comes back, truncates itself to node 2, and rejoins.
    node(c, 1, "start");
    wait_leader(c, topic, -1, 2);
}
