//! Apache Kafka itself as the leader (issue 20): one 3-node KRaft cluster of the pinned 4.x,
//! installed from Maven Central, shared by the scenarios of this binary. Each scenario compares
//! the replica with Kafka's own partition directories, batch by batch, byte for byte.

mod support;

use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::BatchHeader;
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use support::kafka::{self, KAFKA_4, Shared};
use support::{CODECS, Daemon, topic_config};

fn cluster() -> &'static Shared {
    kafka::shared(KAFKA_4)
}

/// Fast follower settings: short fetch waits, frequent checkpoints, small segments (so the
/// replica's segments split where Kafka's do not: the comparison is by batch).
const FAST: &str = "[fetch]\nmax_wait_ms = 100\nbackoff_ms = 200\n[checkpoint]\ninterval_ms = \
                    200\n[log]\nsegment_bytes = 65536\nflush_interval_ms = 100\n";

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
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = topic_config(dir.path(), &data, &c.bootstrap, topic, FAST);
    let mut d = Daemon::start(&cfg);
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
    let mut d = Daemon::start(&cfg);
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
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = topic_config(dir.path(), &data, &c.bootstrap, topic, FAST);
    let mut d = Daemon::start(&cfg);
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
