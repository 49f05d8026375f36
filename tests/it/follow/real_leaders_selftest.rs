//! Self-tests of the real-leader operations in `tests/support` (cluster ids, topic ids,
//! topic deletion, transactions, delete_records) and of the data-dir snapshot helpers.

use crate::support;
use crate::support::Leader;
use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::cluster::{self, ClusterMetadata};
use replica_follower::protocol::error::ErrorCode;
use replica_follower::record::records::decode_records;
use replica_follower::record::{BatchHeader, BatchIter};
use serde_json::Value;

fn metadata(leader: &Leader, topics: &[&str]) -> ClusterMetadata {
    let addrs: Vec<String> = leader.bootstrap.split(',').map(str::to_string).collect();
    let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    cluster::bootstrap_metadata(&addrs, "selftest", &topics).expect("metadata")
}

/// Every batch of a raw record set: (header, the control record's type if a control batch:
/// 0 abort, 1 commit).
fn batches(bytes: &[u8]) -> Vec<(BatchHeader, Option<i16>)> {
    let mut it = BatchIter::new(bytes, usize::MAX);
    let out = it
        .by_ref()
        .map(|(h, _, b)| {
            let marker = h.is_control().then(|| {
                let recs = decode_records(&h, b).expect("control batch records");
                assert_eq!(recs.len(), 1, "one record in a control batch");
                let key = recs[0].key.as_deref().expect("control record key");
                assert_eq!(key.len(), 4, "control key: version, type");
                i16::from_be_bytes([key[2], key[3]])
            });
            (h, marker)
        })
        .collect();
    assert!(
        matches!(it.end(), Some(replica_follower::record::SetEnd::Complete)),
        "record set did not end cleanly: {:?}",
        it.end()
    );
    out
}

fn offsets(tx: &Value) -> (i64, i64) {
    (
        tx["first_offset"].as_i64().expect("first_offset"),
        tx["last_offset"].as_i64().expect("last_offset"),
    )
}

#[test]
fn two_tansu_instances_report_their_own_cluster_ids() {
    let mut a = Leader::start_with("tansu", 1, &["--cluster-id", "rf-cluster-a"]);
    let mut b = Leader::start_with("tansu", 1, &["--cluster-id", "rf-cluster-b"]);
    assert_ne!(a.bootstrap, b.bootstrap);
    a.create_topic("ids", 1);
    b.create_topic("ids", 1);
    let ma = metadata(&a, &["ids"]);
    let mb = metadata(&b, &["ids"]);
    assert_eq!(ma.cluster_id.as_deref(), Some("rf-cluster-a"));
    assert_eq!(mb.cluster_id.as_deref(), Some("rf-cluster-b"));
    // The driver's text form is Kafka's, the one the crate's Uuid prints.
    let ida = a.topic_id("ids").expect("tansu reports topic ids");
    let idb = b.topic_id("ids").expect("tansu reports topic ids");
    assert_eq!(ma.topic_ids["ids"].to_string(), ida);
    assert_eq!(mb.topic_ids["ids"].to_string(), idb);
    assert_ne!(ida, idb, "two clusters, two random topic ids");
    // Without --cluster-id, Tansu's default.
    let c = Leader::start("tansu", 1);
    assert_eq!(
        metadata(&c, &[]).cluster_id.as_deref(),
        Some("tansu_cluster")
    );
}

fn delete_and_recreate(kind: &str) {
    let mut leader = Leader::start(kind, 1);
    leader.create_topic("gone", 1);
    leader.produce("gone", 0, 20, "none", 1);
    let first = leader.topic_id("gone").expect("topic id");
    assert_eq!(
        metadata(&leader, &["gone"]).topic_ids["gone"].to_string(),
        first
    );
    leader.delete_topic("gone");
    let md = metadata(&leader, &[]);
    assert!(
        !md.topics.contains_key("gone"),
        "{kind}: deleted topic still listed"
    );
    let r = leader.cmd(serde_json::json!({"cmd": "topic_id", "topic": "gone"}));
    assert_eq!(
        r["ok"],
        Value::Bool(false),
        "topic_id of a deleted topic: {r}"
    );
    leader.create_topic("gone", 1);
    let second = leader.topic_id("gone").expect("topic id");
    assert_ne!(first, second, "{kind}: re-created topic kept its id");
    assert_eq!(
        metadata(&leader, &["gone"]).topic_ids["gone"].to_string(),
        second
    );
    let (start, _) = leader.produce("gone", 0, 5, "none", 2);
    assert_eq!(start, 0, "{kind}: re-created topic starts at offset 0");
    let r = leader.cmd(serde_json::json!({"cmd": "delete_topic", "topic": "never-was"}));
    assert_eq!(
        r["ok"],
        Value::Bool(false),
        "deleting an unknown topic: {r}"
    );
}

#[test]
fn tansu_delete_and_recreate_gives_a_new_topic_id() {
    delete_and_recreate("tansu");
}

#[test]
fn mock_delete_and_recreate_gives_a_new_topic_id() {
    delete_and_recreate("mock");
}

#[test]
fn tansu_transactions_leave_valid_markers_and_the_aborted_batch() {
    let mut leader = Leader::start("tansu", 1);
    leader.create_topic("tx", 1);
    let r = leader.produce_transactional("tx", 0, &[(5, true), (3, false), (4, true)]);
    let txs = r["transactions"].as_array().expect("transactions");
    assert_eq!(offsets(&txs[0]), (0, 4));
    // Aborted records still get offsets in their delivery reports; each transaction's
    // marker takes one offset after it.
    assert_eq!(offsets(&txs[1]), (6, 8));
    assert_eq!(offsets(&txs[2]), (10, 13));
    assert_eq!(r["end_offset"].as_i64(), Some(15));

    let tp = TopicPartition::new("tx", 0);
    // leader_bytes checks every batch's CRC: Tansu's markers are valid batches.
    let bytes = support::leader_bytes(&leader.bootstrap, &tp, 0);
    let got: Vec<(i64, i64, bool, Option<i16>)> = batches(&bytes)
        .iter()
        .map(|(h, m)| (h.base_offset, h.last_offset, h.is_transactional(), *m))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 4, true, None),
            (5, 5, true, Some(1)),
            (6, 8, true, None),
            (9, 9, true, Some(0)),
            (10, 13, true, None),
            (14, 14, true, Some(1)),
        ],
        "Tansu stores data, the aborted batch 6..8 and every marker"
    );
    let f = support::fetch_once(&leader.bootstrap, &tp, 0).expect("fetch");
    assert_eq!(f.error, ErrorCode::NONE);
    assert_eq!(f.records, bytes, "one Fetch serves the whole log");
    // Tansu's last stable offset is its high watermark, and read_committed serves the
    // aborted batch just the same.
    assert_eq!(f.last_stable_offset, 15);
    let c = support::fetch_once_isolated(&leader.bootstrap, &tp, 0, 1).expect("fetch");
    assert_eq!((c.error, c.last_stable_offset), (ErrorCode::NONE, 15));
    assert_eq!(c.records, bytes, "read_committed filters nothing");
    assert_eq!(
        f.high_watermark, 15,
        "the high watermark counts the last marker"
    );
}

#[test]
fn mock_transactions_write_markers_with_crc_zero() {
    let mut leader = Leader::start("mock", 3);
    leader.create_topic("tx", 1);
    let r = leader.produce_transactional("tx", 0, &[(5, true), (3, false), (4, true)]);
    let txs = r["transactions"].as_array().expect("transactions");
    assert_eq!(offsets(&txs[0]), (0, 4));
    assert_eq!(offsets(&txs[1]), (6, 8));
    assert_eq!(offsets(&txs[2]), (10, 13));
    assert_eq!(r["end_offset"].as_i64(), Some(15));

    let tp = TopicPartition::new("tx", 0);
    let bytes = support::leader_bytes_unverified(&leader.bootstrap, &tp, 0);
    let mut markers = Vec::new();
    let mut data = Vec::new();
    for (h, _, b) in BatchIter::new(&bytes, usize::MAX) {
        if h.is_control() {
            assert_eq!(
                h.crc, 0,
                "mock marker at {} has crc {:#x}",
                h.base_offset, h.crc
            );
            assert!(h.verify_crc(b).is_err(), "crc 0 cannot verify");
            markers.push(h.base_offset);
        } else {
            h.verify_crc(b).expect("mock data batches carry valid CRCs");
            data.push((h.base_offset, h.last_offset));
        }
    }
    assert_eq!(markers, vec![5, 9, 14]);
    assert_eq!(
        data,
        vec![(0, 4), (6, 8), (10, 13)],
        "the mock keeps aborted data"
    );
    // The mock's Fetch serves one stored batch per response; it reports no open
    // transaction once all are ended.
    let f = support::fetch_once(&leader.bootstrap, &tp, 0).expect("fetch");
    assert_eq!((f.high_watermark, f.last_stable_offset), (15, 15));
    let kinds: Vec<Option<i16>> = batches(&bytes).into_iter().map(|(_, m)| m).collect();
    assert_eq!(
        kinds,
        vec![None, Some(1), None, Some(0), None, Some(1)],
        "commit, abort, commit"
    );
}

#[test]
fn mock_delete_records_makes_old_offsets_out_of_range() {
    let mut leader = Leader::start("mock", 3);
    leader.create_topic("trim", 1);
    let (_, last) = leader.produce("trim", 0, 200, "none", 1);
    assert_eq!(last, 199);
    let tp = TopicPartition::new("trim", 0);
    let f = support::fetch_once(&leader.bootstrap, &tp, 0).expect("fetch");
    assert_eq!((f.error, f.log_start_offset), (ErrorCode::NONE, 0));

    leader.delete_records("trim", 0, 100);
    let r = leader.ok(
        serde_json::json!({"cmd": "high_watermarks", "topic": "trim",
        "partitions": [0]}),
    );
    assert_eq!(r["watermarks"], serde_json::json!([[100, 200]]));
    let f = support::fetch_once(&leader.bootstrap, &tp, 0).expect("fetch");
    assert_eq!(f.error, ErrorCode::OFFSET_OUT_OF_RANGE, "fetch at 0: {f:?}");
    let f = support::fetch_once(&leader.bootstrap, &tp, 99).expect("fetch");
    assert_eq!(
        f.error,
        ErrorCode::OFFSET_OUT_OF_RANGE,
        "fetch at 99: {f:?}"
    );
    let f = support::fetch_once(&leader.bootstrap, &tp, 100).expect("fetch");
    assert_eq!(f.error, ErrorCode::NONE);
    assert_eq!((f.log_start_offset, f.high_watermark), (100, 200));
    assert!(!f.records.is_empty(), "records from the new log start");
    // Past the high watermark is an error too.
    let r = leader.cmd(serde_json::json!({"cmd": "delete_records", "topic": "trim",
        "partition": 0, "offset": 201}));
    assert_eq!(r["ok"], Value::Bool(false), "{r}");
}

#[test]
fn hash_tree_sees_content_and_inode_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::create_dir_all(root.join("t-0")).unwrap();
    std::fs::write(root.join("t-0/00000000000000000000.log"), b"abc").unwrap();
    std::fs::write(root.join("checkpoint"), b"0\n0\n").unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    let before = support::hash_tree(root);
    let names: Vec<_> = before.keys().map(|p| p.display().to_string()).collect();
    assert_eq!(names, ["checkpoint", "t-0/00000000000000000000.log"]);
    let log = root.join("t-0/00000000000000000000.log");
    assert_eq!(
        before[std::path::Path::new("t-0/00000000000000000000.log")].0,
        support::inode(&log)
    );
    assert_eq!(before[std::path::Path::new("checkpoint")].2, 4);
    assert_eq!(support::hash_tree(root), before, "nothing changed");

    // Same length, other bytes.
    std::fs::write(&log, b"abd").unwrap();
    let after = support::hash_tree(root);
    assert_ne!(after, before);
    std::fs::write(&log, b"abc").unwrap();
    assert_eq!(support::hash_tree(root), before, "same bytes in place");

    // Same bytes, replaced by rename: a new inode.
    let tmp = root.join("t-0/tmp");
    std::fs::write(&tmp, b"abc").unwrap();
    std::fs::rename(&tmp, &log).unwrap();
    let after = support::hash_tree(root);
    let key = std::path::Path::new("t-0/00000000000000000000.log");
    assert_ne!(after[key].0, before[key].0, "rename gives a new inode");
    assert_eq!(
        (after[key].1, after[key].2),
        (before[key].1, before[key].2),
        "same contents"
    );
}
