//! The acceptance of `restore` against Apache Kafka itself: archive, destroy, restore into a
//! new cluster, and find every offset, record, group position and topic config as it was.
//!
//! A 1-node source cluster holds a 3-partition topic (idempotent producers, keys, headers,
//! explicit timestamps; one log start moved by delete-records; committed, aborted and one
//! open transaction) and a compacted topic with configs of its own, cleaned by Kafka's log
//! cleaner; three consumer groups commit offsets with metadata. `run` archives both topics
//! and the two groups `[groups]` includes; the source is recorded and destroyed. A new
//! 3-node cluster is restored onto one node with `restore prepare`, `write` (killed -9 once
//! right after a segment is in place, then run again) and `finish`, each refusal seen first.
//! Then the new cluster serves every record at its old offset with the same key, value,
//! headers and timestamp, the same log starts and ends, read_committed skipping exactly the
//! aborted records and not stuck on the open one, the groups' offsets and the topics'
//! configs; Kafka's DumpLogSegments reads every restored file; new idempotent and
//! transactional producers append safely where the restored producer state holds the id a
//! new cluster hands out first; and all of it holds after the node is killed -9, and on the
//! other nodes after a reassignment, byte for byte.
//!
//! A test binary of its own: it runs its own clusters, one after the other, so that no more
//! than three Kafka nodes are alive at once.
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
use replica_follower::record::BatchHeader;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::kafka::{self, KAFKA_4};
use support::{Config, Daemon, Leader, wait_until};

/// The 3-partition topic: idempotent records on each partition (partition 0's producer is
/// the source cluster's first, id 0), transactions on 1, delete-records on 2.
const ORDERS: &str = "restore-orders";
/// The compacted topic, with topic-level configs.
const LEDGER: &str = "restore-ledger";
const PARTITIONS: [(&str, i32); 4] = [(ORDERS, 0), (ORDERS, 1), (ORDERS, 2), (LEDGER, 0)];
/// Where delete-records moves the log start of orders-2: inside a batch (30 records each).
const ORDERS_2_START: i64 = 155;
/// The groups `[groups] include` matches, and one it does not.
const INCLUDED: [&str; 2] = ["orders-audit", "billing"];
const EXCLUDED: &str = "reporting";
/// The target node the restored partitions live on.
const NODE: i64 = 2;
/// The target node that stays up throughout: the commands' bootstrap.
const STEADY: i64 = 1;

/// What a cluster serves of one partition.
#[derive(Debug, Clone, PartialEq)]
struct PartitionView {
    low: i64,
    high: i64,
    /// Every record read_uncommitted: offset, timestamp and its type, key, value, headers.
    uncommitted: Vec<Value>,
    committed: Vec<Value>,
    /// Where read_committed met the end: the last stable offset.
    stable: i64,
}

/// What a cluster serves of the restored topics and groups.
#[derive(Debug, Clone, PartialEq)]
struct ClusterView {
    partitions: BTreeMap<(String, i32), PartitionView>,
    /// Each group's committed offsets: `[{"topic", "partition", "offset", "leader_epoch",
    /// "metadata"}]`.
    groups: BTreeMap<String, Value>,
    /// Each topic's configs set on the topic itself.
    configs: BTreeMap<String, Value>,
}

impl ClusterView {
    fn of(k: &mut Leader) -> ClusterView {
        let mut partitions = BTreeMap::new();
        for (topic, p) in PARTITIONS {
            let w = k.ok(
                json!({"cmd": "high_watermarks", "topic": topic, "partitions": [p],
                "isolation": "read_uncommitted"}),
            );
            let read = |k: &mut Leader, isolation: &str| {
                k.ok(
                    json!({"cmd": "read_partition", "topic": topic, "partition": p,
                    "isolation": isolation}),
                )
            };
            let uncommitted = read(k, "read_uncommitted");
            let committed = read(k, "read_committed");
            let view = PartitionView {
                low: w["watermarks"][0][0].as_i64().unwrap(),
                high: w["watermarks"][0][1].as_i64().unwrap(),
                uncommitted: uncommitted["records"].as_array().unwrap().clone(),
                committed: committed["records"].as_array().unwrap().clone(),
                stable: committed["end"].as_i64().unwrap(),
            };
            assert_eq!(
                uncommitted["end"].as_i64(),
                Some(view.high),
                "{topic}-{p}: read_uncommitted ends at the high watermark"
            );
            partitions.insert((topic.to_string(), p), view);
        }
        let groups = INCLUDED
            .iter()
            .chain([&EXCLUDED])
            .map(|g| {
                let r = k.ok(json!({"cmd": "group_offsets", "group": g}));
                (g.to_string(), r["offsets"].clone())
            })
            .collect();
        let configs = [ORDERS, LEDGER]
            .iter()
            .map(|t| {
                let r = k.ok(json!({"cmd": "describe_configs", "topic": t}));
                (t.to_string(), r["configs"].clone())
            })
            .collect();
        ClusterView {
            partitions,
            groups,
            configs,
        }
    }

    fn partition(&self, topic: &str, p: i32) -> &PartitionView {
        &self.partitions[&(topic.to_string(), p)]
    }
}

/// Asserts two lists of records are equal, naming the first offset where they differ.
fn assert_same_records(what: &str, got: &[Value], want: &[Value]) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: record #{i} differs:\n  got  {}\n  want {}",
            got[i], want[i]
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} records, want {} (last offsets {:?} and {:?})",
        got.len(),
        want.len(),
        got.last().map(|r| &r["offset"]),
        want.last().map(|r| &r["offset"])
    );
}

fn offsets(records: &[Value]) -> Vec<i64> {
    records
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect()
}

fn header(batch: &[u8]) -> BatchHeader {
    BatchHeader::parse(batch, batch.len()).expect("a whole batch")
}

/// The headers of the batches of a partition directory whose base offset is `from` or above.
fn batch_headers(dir: &Path, from: i64) -> Vec<BatchHeader> {
    kafka::dir_batches(dir, i64::MAX)
        .unwrap()
        .iter()
        .filter(|b| b.0 >= from)
        .map(|b| header(&b.2))
        .collect()
}

/// The producer ids of the batches of a partition directory from offset `from` on.
fn producer_ids(dir: &Path, from: i64) -> BTreeSet<i64> {
    batch_headers(dir, from)
        .iter()
        .map(|h| h.producer_id)
        .filter(|&id| id >= 0)
        .collect()
}

/// Records (not offsets: the cleaner leaves gaps) in the data batches of a partition dir.
fn records_in(dir: &Path) -> i64 {
    batch_headers(dir, i64::MIN)
        .iter()
        .filter(|h| !h.is_control())
        .map(|h| i64::from(h.records_count))
        .sum()
}

fn log_dir(k: &Leader, node: i64) -> PathBuf {
    PathBuf::from(
        k.info["kafka"]["nodes"][node.to_string()]["log_dir"]
            .as_str()
            .unwrap(),
    )
}

fn broker(k: &Leader, node: i64) -> String {
    k.info["kafka"]["nodes"][node.to_string()]["broker"]
        .as_str()
        .unwrap()
        .to_string()
}

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

/// The topics a cluster lists and their partition counts (a full Metadata request, which
/// creates nothing).
fn topics(k: &Leader) -> BTreeMap<String, usize> {
    let m = support::clients_py(&["metadata", "--bootstrap", &k.bootstrap]);
    m["topics"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, ps)| (t.clone(), ps.as_array().unwrap().len()))
        .collect()
}

/// Runs `replica-follower restore ARGS`: (exit code, stdout and stderr).
fn restore(args: &[&str]) -> (Option<i32>, String) {
    let args: Vec<&str> = ["restore"].iter().chain(args).copied().collect();
    let (code, out, err) = support::run_cli(&args);
    (code, format!("{out}{err}"))
}

fn restore_ok(args: &[&str]) -> String {
    let (code, out) = restore(args);
    assert_eq!(code, Some(0), "restore {args:?} failed:\n{out}");
    out
}

/// Asserts `restore ARGS` refuses (exit 1) saying `names`.
fn assert_refused(args: &[&str], names: &str) -> String {
    let (code, out) = restore(args);
    assert_eq!(code, Some(1), "restore {args:?} must refuse:\n{out}");
    assert!(
        out.contains(names),
        "restore {args:?} refused without naming {names}:\n{out}"
    );
    out
}

/// A child process killed when dropped: a failing test leaves no `restore write` sleeping at
/// its pause point.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What the test knows of the source beyond what it serves.
struct Source {
    view: ClusterView,
    /// orders-1's aborted transactions' offsets, and its open transaction's.
    aborted: BTreeSet<i64>,
    open: BTreeSet<i64>,
    /// The producer ids in the source's batches, per partition.
    producers: BTreeMap<(String, i32), BTreeSet<i64>>,
    cluster_id: String,
}

/// Fills the source cluster; returns orders-1's aborted offsets.
fn fill_source(k: &mut Leader) -> BTreeSet<i64> {
    k.ok(json!({"cmd": "create_topic", "topic": ORDERS, "partitions": 3}));
    k.ok(
        json!({"cmd": "create_topic", "topic": LEDGER, "partitions": 1, "config": {
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
        "segment.ms": "1500", "min.compaction.lag.ms": "0", "max.message.bytes": "2000000"}}),
    );
    // Explicit CreateTimes an hour back, 7 ms apart: old enough to be told from the clock,
    // young enough for retention.
    let t0 = now_ms() - 3_600_000;
    for (p, codec) in ["lz4", "zstd", "gzip"].iter().enumerate() {
        k.ok(
            json!({"cmd": "produce", "topic": ORDERS, "partition": p, "count": 300,
            "codec": codec, "value_size": 120, "keys": "mixed", "headers": true, "seed": p,
            "batch_records": 30, "idempotent": true, "timestamp_ms": t0 + p as i64 * 100_000,
            "timestamp_step_ms": 7}),
        );
    }
    let tx = k.ok(
        json!({"cmd": "produce_transactional", "topic": ORDERS, "partition": 1,
        "transactional_id": "restore-tx", "codec": "snappy", "seed": 11,
        "transactions": [{"count": 40, "commit": true}, {"count": 25, "commit": false},
                         {"count": 30, "commit": true}, {"count": 20, "commit": false}]}),
    );
    let aborted: BTreeSet<i64> = tx["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["commit"] == json!(false))
        .flat_map(|t| t["first_offset"].as_i64().unwrap()..=t["last_offset"].as_i64().unwrap())
        .collect();
    assert_eq!(aborted.len(), 45, "both aborted transactions: {tx}");
    let low = k.ok(
        json!({"cmd": "delete_records", "topic": ORDERS, "partition": 2,
        "offset": ORDERS_2_START}),
    );
    assert_eq!(low["low_watermark"], json!(ORDERS_2_START));
    aborted
}

/// Produces to the compacted topic until Kafka's cleaner has removed records, then waits
/// until it has nothing more to do.
fn clean_ledger(k: &mut Leader, dir: &Path) {
    // 600 records over 20 keys, tombstones among them.
    k.ok(
        json!({"cmd": "produce", "topic": LEDGER, "partition": 0, "count": 600,
        "codec": "none", "value_size": 80, "keys": "all", "key_space": 20, "headers": true,
        "seed": 3, "batch_records": 20}),
    );
    let mut produced = 600;
    // The active segment is never cleaned and rolls (segment.ms) only on an append: a few
    // records now and then, with keys of their own.
    let started = Instant::now();
    let mut seed = 100;
    while records_in(dir) >= produced {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "Kafka's log cleaner removed nothing from {LEDGER} within 90 s"
        );
        std::thread::sleep(Duration::from_millis(700));
        k.ok(
            json!({"cmd": "produce", "topic": LEDGER, "partition": 0, "count": 5,
            "codec": "none", "value_size": 80, "keys": "all", "seed": seed,
            "batch_records": 5}),
        );
        produced += 5;
        seed += 1;
    }
    let mut last = kafka::dir_batches(dir, i64::MAX).ok();
    wait_until(Duration::from_secs(30), "the cleaner to settle", || {
        std::thread::sleep(Duration::from_secs(2));
        let now = kafka::dir_batches(dir, i64::MAX).ok();
        let same = now.is_some() && now == last;
        last = now;
        same
    });
    eprintln!(
        "{LEDGER}: {} of {produced} records left by the cleaner after {:.1} s",
        records_in(dir),
        started.elapsed().as_secs_f64()
    );
}

/// The groups' commits: partitions of both topics, metadata strings, the leader epoch.
fn commit_groups(k: &mut Leader) {
    let commit = |k: &mut Leader, group: &str, offsets: Value| {
        k.ok(json!({"cmd": "commit_group_offsets", "group": group, "offsets": offsets}));
    };
    commit(
        k,
        "orders-audit",
        json!([
            {"topic": ORDERS, "partition": 0, "offset": 120, "metadata": "audit: batch 4",
             "leader_epoch": 0},
            {"topic": ORDERS, "partition": 1, "offset": 50, "metadata": "audit: {\"n\": 1}",
             "leader_epoch": 0},
            {"topic": LEDGER, "partition": 0, "offset": 100, "metadata": "ledger pass 1",
             "leader_epoch": 0}]),
    );
    commit(
        k,
        "billing",
        json!([
            {"topic": ORDERS, "partition": 1, "offset": 310, "metadata": "billing run 7",
             "leader_epoch": 0},
            {"topic": ORDERS, "partition": 2, "offset": 200, "metadata": "billing run 7",
             "leader_epoch": 0}]),
    );
    commit(
        k,
        EXCLUDED,
        json!([{"topic": ORDERS, "partition": 0, "offset": 7, "metadata": "not archived",
                "leader_epoch": 0}]),
    );
}

/// Archives the source with `run` into `data` until the replica ends where the source does
/// and `status` shows the included groups and the topics' configs; stops it.
fn archive(k: &mut Leader, dir: &Path, data: &Path) -> ClusterView {
    let want = ClusterView::of(k);
    let cfg = Config::new(data, &k.bootstrap)
        .follow(ORDERS)
        .follow(LEDGER)
        .apply(kafka::fast)
        .set("groups.include", vec!["^orders-.*", "billing"])
        .set("groups.refresh_ms", 500)
        .write(dir);
    let mut d = Daemon::start(&cfg);
    for ((topic, p), v) in &want.partitions {
        wait_until(
            Duration::from_secs(60),
            &format!("the replica of {topic}-{p} at {}", v.high),
            || {
                assert!(d.is_running(), "the daemon exited:\n{}", d.log_text());
                support::log_end(data, topic, i64::from(*p)) == v.high
            },
        );
    }
    let groups = normalized(
        INCLUDED
            .iter()
            .map(|g| json!({"group": g, "offsets": want.groups[*g]}))
            .collect(),
    );
    let topics = normalized(
        [(ORDERS, 3), (LEDGER, 1)]
            .iter()
            .map(|(t, n)| json!({"topic": t, "partitions": n, "configs": want.configs[*t]}))
            .collect(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last;
    loop {
        assert!(d.is_running(), "the daemon exited:\n{}", d.log_text());
        last = support::status(data);
        if normalized(last["groups"].clone()) == groups
            && normalized(last["topics"].clone()) == topics
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status does not show the groups and topic configs after 60 s:\nwant groups {groups}\nwant topics {topics}\nstatus: {last}\ndaemon log:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    eprintln!(
        "archived: status shows {} and {}",
        last["groups"], last["topics"]
    );
    want
}

/// `status`'s groups or topics in one order: by group or topic, each group's offsets by
/// topic and partition (the order `status` lists them in is its own).
fn normalized(mut v: Value) -> Value {
    let name = |x: &Value| (x["group"].to_string(), x["topic"].to_string());
    if let Some(a) = v.as_array_mut() {
        a.sort_by_key(name);
        for x in a.iter_mut() {
            // When the source last showed it: not the source's to compare.
            if let Some(o) = x.as_object_mut() {
                o.remove("seen_ms");
            }
            for o in x["offsets"].as_array_mut().into_iter().flatten() {
                if let Some(o) = o.as_object_mut() {
                    o.remove("seen_ms");
                }
                // librdkafka commits metadata with its C string's terminator, and its Admin
                // reads drop it; the archive keeps the bytes as committed.
                if let Some(m) = o["metadata"].as_str().and_then(|m| m.strip_suffix('\0')) {
                    o["metadata"] = Value::from(m);
                }
            }
            if let Some(offsets) = x["offsets"].as_array_mut() {
                offsets.sort_by_key(|o| (o["topic"].to_string(), o["partition"].as_i64()));
            }
        }
    }
    v
}

/// The source: filled, cleaned, its groups committed, one transaction left open, archived
/// into `data`, everything it serves recorded; then destroyed.
fn source(dir: &Path, data: &Path) -> Source {
    let mut k = kafka::start(KAFKA_4, 1, false);
    let node_dir = log_dir(&k, 1);
    let aborted = fill_source(&mut k);
    clean_ledger(&mut k, &node_dir.join(tp(LEDGER, 0).dir_name()));
    commit_groups(&mut k);
    // Left open for the archive: its producer lives 10 minutes (transaction.timeout.ms),
    // far past the archive.
    k.ok(
        json!({"cmd": "transaction_steps", "topic": ORDERS, "partition": 1, "timeout_s": 300,
        "steps": [["restore-open", "begin"], ["restore-open", "produce", 12]]}),
    );
    let view = archive(&mut k, dir, data);
    assert_eq!(
        view,
        ClusterView::of(&mut k),
        "the source changed while archived"
    );
    let o1 = view.partition(ORDERS, 1);
    assert!(
        o1.stable < o1.high,
        "the open transaction holds orders-1's last stable offset back"
    );
    let open: BTreeSet<i64> = (o1.stable..o1.high).collect();
    assert_eq!(
        open.len(),
        12,
        "the open transaction's records end orders-1"
    );
    let state = k.ok(json!({"cmd": "describe_producers", "topic": ORDERS, "partition": 1}));
    assert!(
        state["producers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["current_txn_start_offset"] == json!(o1.stable)),
        "Kafka names the open transaction at {}: {state}",
        o1.stable
    );
    let producers = PARTITIONS
        .iter()
        .map(|&(t, p)| {
            let ids = producer_ids(&node_dir.join(tp(t, p).dir_name()), i64::MIN);
            ((t.to_string(), p), ids)
        })
        .collect::<BTreeMap<_, _>>();
    assert_eq!(
        producers[&(ORDERS.to_string(), 0)],
        BTreeSet::from([0]),
        "orders-0 holds only the source cluster's first producer id"
    );
    let cluster_id = k.info["kafka"]["cluster_id"].as_str().unwrap().to_string();
    drop(k);
    Source {
        view,
        aborted,
        open,
        producers,
        cluster_id,
    }
}

/// A copy of `node_dir`'s meta.properties with another cluster's id, in a log dir of its own.
fn log_dir_of_another_cluster(node_dir: &Path, dir: &Path, cluster_id: &str) -> PathBuf {
    let meta = std::fs::read_to_string(node_dir.join("meta.properties")).unwrap();
    assert!(
        meta.lines().any(|l| l.starts_with("cluster.id=")),
        "meta.properties names a cluster id: {meta}"
    );
    let edited: String = meta
        .lines()
        .map(|l| {
            if l.starts_with("cluster.id=") {
                format!("cluster.id={cluster_id}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let other = dir.join("other-cluster-log-dir");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("meta.properties"), edited).unwrap();
    other
}

/// Every `.log` file of the restored partitions in `node_dir`, and its length.
fn restored_logs(node_dir: &Path) -> Vec<(PathBuf, u64)> {
    PARTITIONS
        .iter()
        .flat_map(|&(t, p)| support::segment_logs(&node_dir.join(tp(t, p).dir_name())))
        .map(|(_, f)| {
            let len = std::fs::metadata(&f).unwrap().len();
            (f, len)
        })
        .collect()
}

/// Kafka's DumpLogSegments, deep iteration, over every restored segment and index file of
/// `node_dir`: each is dumped, without an error line, and every batch is read.
fn dump_restored_segments(k: &mut Leader, node_dir: &Path) {
    let mut files = Vec::new();
    let mut batches = 0;
    for (t, p) in PARTITIONS {
        let pdir = node_dir.join(tp(t, p).dir_name());
        batches += kafka::dir_batches(&pdir, i64::MAX).unwrap().len();
        for e in std::fs::read_dir(&pdir).unwrap() {
            let f = e.unwrap().path();
            if f.extension().is_some_and(|x| {
                ["log", "index", "timeindex", "txnindex"].contains(&x.to_str().unwrap())
            }) {
                files.push(f.display().to_string());
            }
        }
    }
    files.sort();
    let out = k.ok(
        json!({"cmd": "tool", "main": "org.apache.kafka.tools.DumpLogSegments",
        "args": ["--deep-iteration", "--files", files.join(",")], "timeout_s": 120}),
    )["output"]
        .as_str()
        .unwrap()
        .to_string();
    for f in &files {
        assert!(
            out.contains(&format!("Dumping {f}")),
            "DumpLogSegments did not dump {f}:\n{out}"
        );
    }
    for word in kafka::DUMP_MISMATCHES {
        assert!(!out.contains(word), "DumpLogSegments says {word:?}:\n{out}");
    }
    let errors: Vec<&str> = out
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("exception") || l.contains("error") || l.contains("isvalid: false")
        })
        .collect();
    assert!(errors.is_empty(), "DumpLogSegments: {errors:#?}");
    let dumped = out.lines().filter(|l| l.starts_with("baseOffset:")).count();
    assert_eq!(
        dumped, batches,
        "every batch of every restored segment was read"
    );
    eprintln!(
        "DumpLogSegments: {} restored files, {dumped} batches, no error",
        files.len()
    );
}

/// The restored cluster against the source: every record at its offset, log starts and ends
/// (orders-1 one more: `finish` aborted its open transaction with a marker), read_committed
/// skipping exactly the aborted records and reaching the end, the groups, the configs.
fn assert_restored(src: &Source, got: &ClusterView) {
    for ((topic, p), want) in &src.view.partitions {
        let what = format!("{topic}-{p}");
        let v = got.partition(topic, *p);
        assert_same_records(
            &format!("{what} read_uncommitted"),
            &v.uncommitted,
            &want.uncommitted,
        );
        assert_same_records(
            &format!("{what} read_committed"),
            &v.committed,
            &want.committed,
        );
        assert_eq!(v.low, want.low, "{what}: log start");
        let marker = i64::from((topic.as_str(), *p) == (ORDERS, 1));
        assert_eq!(v.high, want.high + marker, "{what}: log end");
        assert_eq!(v.stable, v.high, "{what}: read_committed reaches the end");
    }
    let o1 = src.view.partition(ORDERS, 1);
    let skipped: BTreeSet<i64> = offsets(&o1.uncommitted)
        .into_iter()
        .filter(|o| !offsets(&o1.committed).contains(o))
        .collect();
    let want_skipped: BTreeSet<i64> = src.aborted.union(&src.open).copied().collect();
    assert_eq!(
        skipped, want_skipped,
        "read_committed skips exactly the aborted and the open transaction's records"
    );
    for g in INCLUDED {
        assert_eq!(got.groups[g], src.view.groups[g], "group {g}'s offsets");
    }
    assert_eq!(
        got.groups[EXCLUDED],
        json!([]),
        "the group [groups] leaves out is not restored"
    );
    assert_eq!(got.configs, src.view.configs, "the topics' configs");
}

/// Each group resumes where it committed: its first record is the first the group's
/// position reaches (read_committed).
fn assert_groups_resume(k: &mut Leader, view: &ClusterView) {
    for g in INCLUDED {
        for c in view.groups[g].as_array().unwrap() {
            let (topic, p) = (
                c["topic"].as_str().unwrap(),
                c["partition"].as_i64().unwrap(),
            );
            let committed = c["offset"].as_i64().unwrap();
            let want = offsets(&view.partition(topic, p as i32).committed)
                .into_iter()
                .find(|&o| o >= committed)
                .unwrap();
            let r = k.ok(json!({"cmd": "resume_group", "group": g, "topic": topic,
                "partitions": [p]}));
            assert_eq!(
                r["first"][0].as_i64(),
                Some(want),
                "group {g} resumes {topic}-{p} at {committed}"
            );
        }
    }
}

/// New idempotent and transactional producers on orders-0, whose restored producer state
/// holds id 0, the id a new cluster hands out first: they get ids above every restored one
/// and append after the old end. Returns orders-0's new end.
fn produce_after_restore(k: &mut Leader, src: &Source, node_dir: &Path) -> i64 {
    let state = k.ok(json!({"cmd": "describe_producers", "topic": ORDERS, "partition": 0}));
    assert!(
        state["producers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["producer_id"] == json!(0)),
        "orders-0's restored producer state holds id 0: {state}"
    );
    let old_end = src.view.partition(ORDERS, 0).high;
    // A producer given a restored id meets that id's sequence numbers and fails.
    let mut produce = |what: &str, c: Value| {
        let r = k.cmd(c);
        assert_eq!(
            r["ok"],
            json!(true),
            "a new {what} producer on {ORDERS}-0 failed (an id the restored producer state \
             holds?): {r}"
        );
        r
    };
    let r = produce(
        "idempotent",
        json!({"cmd": "produce", "topic": ORDERS, "partition": 0, "count": 50,
        "codec": "lz4", "idempotent": true, "seed": 50, "batch_records": 10}),
    );
    assert_eq!(r["first_offset"], json!(old_end), "{r}");
    let tx = produce(
        "transactional",
        json!({"cmd": "produce_transactional", "topic": ORDERS, "partition": 0,
        "transactional_id": "after-restore", "seed": 51,
        "transactions": [{"count": 20, "commit": true}]}),
    );
    assert_eq!(tx["transactions"][0]["first_offset"], json!(old_end + 50));
    // The commit marker is written after the commit returns: wait for it.
    let end = old_end + 71;
    wait_until(
        Duration::from_secs(20),
        &format!("{ORDERS}-0 to end at {end}: 50 + 20 records and a commit marker"),
        || {
            let w = k.ok(json!({"cmd": "high_watermarks", "topic": ORDERS,
                "partitions": [0], "isolation": "read_uncommitted"}));
            w["watermarks"][0][1] == json!(end)
        },
    );
    let restored_max = src.producers.values().flatten().max().copied().unwrap();
    let new_ids = producer_ids(&node_dir.join(tp(ORDERS, 0).dir_name()), old_end);
    assert_eq!(new_ids.len(), 2, "two new producers: {new_ids:?}");
    assert!(
        new_ids.iter().all(|&id| id > restored_max),
        "the new producers' ids {new_ids:?} are above the restored ones (up to {restored_max})"
    );
    let read = k.ok(
        json!({"cmd": "read_partition", "topic": ORDERS, "partition": 0,
        "isolation": "read_committed"}),
    );
    let records = read["records"].as_array().unwrap();
    let new: Vec<i64> = offsets(records)
        .into_iter()
        .filter(|&o| o >= old_end)
        .collect();
    assert_eq!(
        new,
        (old_end..old_end + 70).collect::<Vec<_>>(),
        "the new records read back after the old end"
    );
    eprintln!(
        "producers after the restore: ids {new_ids:?} above the restored {:?}; orders-0 \
         {old_end} -> {end}",
        src.producers.values().flatten().collect::<BTreeSet<_>>()
    );
    end
}

/// The new cluster, and where the restore's files are.
struct Target {
    k: Leader,
    /// Node [`NODE`]'s log dir.
    node_dir: PathBuf,
    /// Node [`STEADY`]'s address.
    bootstrap: String,
    dir: PathBuf,
    data: String,
}

impl Target {
    fn start(dir: &Path, data: &Path) -> Target {
        let t0 = Instant::now();
        let k = kafka::start(KAFKA_4, 3, false);
        eprintln!("target: 3 nodes up in {:.1} s", t0.elapsed().as_secs_f64());
        Target {
            node_dir: log_dir(&k, NODE),
            bootstrap: broker(&k, STEADY),
            k,
            dir: dir.to_path_buf(),
            data: data.display().to_string(),
        }
    }

    fn plan_at(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn prepare(&self, plan: &str, only: Option<&str>) -> Vec<String> {
        let node = NODE.to_string();
        let mut a = vec![
            "prepare",
            "--data-dir",
            &self.data,
            "--bootstrap",
            &self.bootstrap,
            "--broker",
            &node,
            "--plan",
            plan,
        ];
        a.extend(only.map(|t| ["--topic", t]).into_iter().flatten());
        a.into_iter().map(String::from).collect()
    }

    fn write(&self, plan: &str, log_dir: &Path) -> Vec<String> {
        let log_dir = log_dir.display().to_string();
        [
            "write",
            "--data-dir",
            &self.data,
            "--plan",
            plan,
            "--log-dir",
            &log_dir,
        ]
        .map(String::from)
        .to_vec()
    }

    /// Refuses a topic that exists with data, restores one topic only (the other stays
    /// absent), then prepares the whole restore; returns its plan.
    fn prepare_all(&mut self, src: &Source) -> String {
        let k = &mut self.k;
        k.ok(json!({"cmd": "create_topic", "topic": LEDGER, "partitions": 1}));
        k.ok(
            json!({"cmd": "produce", "topic": LEDGER, "partition": 0, "count": 3,
            "keys": "all"}),
        );
        let refused_plan = self.plan_at("refused.plan");
        assert_refused(&as_strs(&self.prepare(&refused_plan, Some(LEDGER))), LEDGER);
        assert!(
            !Path::new(&refused_plan).exists(),
            "a refused prepare writes no plan"
        );
        self.k.ok(json!({"cmd": "delete_topic", "topic": LEDGER}));

        restore_ok(&as_strs(
            &self.prepare(&self.plan_at("ledger.plan"), Some(LEDGER)),
        ));
        let listed = topics(&self.k);
        assert_eq!(listed.get(LEDGER), Some(&1), "{listed:?}");
        assert!(
            !listed.contains_key(ORDERS),
            "prepare --topic {LEDGER} made {ORDERS}: {listed:?}"
        );

        let plan = self.plan_at("restore.plan");
        restore_ok(&as_strs(&self.prepare(&plan, None)));
        let listed = topics(&self.k);
        for (t, n) in [(ORDERS, 3), (LEDGER, 1)] {
            assert_eq!(listed.get(t), Some(&n), "{t}'s partitions: {listed:?}");
            for p in 0..n as i32 {
                let d = self
                    .k
                    .ok(json!({"cmd": "describe_partition", "topic": t, "partition": p}));
                assert_eq!(
                    d["replicas"],
                    json!([NODE]),
                    "{t}-{p} lives on node {NODE}: {d}"
                );
            }
            // The archived configs, retention held off until finish gives it back.
            let mut want = src.view.configs[t].clone();
            for k in ["retention.ms", "retention.bytes"] {
                want[k] = json!("-1");
            }
            let c = self.k.ok(json!({"cmd": "describe_configs", "topic": t}));
            assert_eq!(c["configs"], want, "{t}'s configs after prepare");
        }
        let text = std::fs::read_to_string(&plan).unwrap();
        assert_eq!(
            text.matches("[[held]]").count(),
            4,
            "retention.ms and retention.bytes of both topics held: {text}"
        );
        plan
    }

    /// Refuses the log dir of a running broker and one of another cluster, stops the node,
    /// kills -9 a write right after it put a segment in place, and writes again to the end.
    fn write_killed_once(&mut self, src: &Source, plan: &str) {
        let write = self.write(plan, &self.node_dir);
        assert_refused(&as_strs(&write), &self.node_dir.display().to_string());
        assert!(
            restored_logs(&self.node_dir)
                .iter()
                .all(|(_, len)| *len == 0),
            "a refused write wrote nothing: {:?}",
            restored_logs(&self.node_dir)
        );
        self.k
            .ok(json!({"cmd": "kafka_node", "node": NODE, "action": "stop"}));

        let other = log_dir_of_another_cluster(&self.node_dir, &self.dir, &src.cluster_id);
        assert_refused(&as_strs(&self.write(plan, &other)), "meta.properties");
        let left: Vec<_> = std::fs::read_dir(&other)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["meta.properties"], "a refused write wrote nothing");

        let paused_log = self.dir.join("restore-write-paused.log");
        let mut paused = Killed(
            Command::new(support::bin())
                .arg("restore")
                .args(&write)
                .env("RF_TEST_PAUSE_AT", "restore-write-segment")
                .env("RF_TEST_PAUSE_MS", "60000")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&paused_log).unwrap())
                .spawn()
                .unwrap(),
        );
        wait_until(
            Duration::from_secs(60),
            "restore write to pause at a segment",
            || {
                let said = std::fs::read_to_string(&paused_log).unwrap_or_default();
                if let Ok(Some(st)) = paused.0.try_wait() {
                    panic!("restore write ended ({st}) before its pause:\n{said}");
                }
                said.contains("test pause at restore-write-segment")
            },
        );
        drop(paused);
        assert!(
            restored_logs(&self.node_dir)
                .iter()
                .any(|(_, len)| *len > 0),
            "killed after a segment was in place"
        );
        eprintln!("restore write:\n{}", restore_ok(&as_strs(&write)));
    }

    /// Starts the node, sees the restored log starts and ends served (what `finish` checks),
    /// finishes, and compares; returns what the cluster serves then.
    fn finish(&mut self, src: &Source, plan: &str) -> ClusterView {
        self.k
            .ok(json!({"cmd": "kafka_node", "node": NODE, "action": "start"}));
        for ((topic, p), want) in &src.view.partitions {
            wait_until(
                Duration::from_secs(30),
                &format!("{topic}-{p} to serve [{}, {})", want.low, want.high),
                || {
                    let w = self.k.ok(json!({"cmd": "high_watermarks", "topic": topic,
                        "partitions": [p], "isolation": "read_uncommitted"}));
                    w["watermarks"][0] == json!([want.low, want.high])
                },
            );
        }
        let finish = [
            "finish",
            "--data-dir",
            &self.data,
            "--plan",
            plan,
            "--bootstrap",
            &self.bootstrap,
        ];
        let report = restore_ok(&finish);
        eprintln!("restore finish:\n{report}");
        let restored = ClusterView::of(&mut self.k);
        assert_restored(src, &restored);
        // Again, as after a crash or a second look: nothing more is written, all is as archived.
        let again = restore_ok(&finish);
        assert!(
            !again.contains("aborted") && again.contains("as archived"),
            "a second finish: {again}"
        );
        assert_eq!(
            ClusterView::of(&mut self.k),
            restored,
            "a second finish changed nothing"
        );
        let o1 = self.node_dir.join(tp(ORDERS, 1).dir_name());
        let marker = batch_headers(&o1, restored.partition(ORDERS, 1).high - 1);
        let open_producers = producer_ids(&o1, *src.open.first().unwrap());
        assert!(
            marker.len() == 1
                && marker[0].is_control()
                && open_producers.contains(&marker[0].producer_id),
            "orders-1 ends with a control batch of the open transaction's producer: {marker:?}"
        );
        restored
    }

    /// Node [`NODE`] killed -9 and started: the cluster serves `before` again.
    fn crash(&mut self, before: &ClusterView) {
        self.k
            .ok(json!({"cmd": "kafka_node", "node": NODE, "action": "kill9"}));
        self.k
            .ok(json!({"cmd": "kafka_node", "node": NODE, "action": "start"}));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut again = ClusterView::of(&mut self.k);
        while again != *before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(1));
            again = ClusterView::of(&mut self.k);
        }
        assert_eq!(
            again, *before,
            "after node {NODE} was killed -9 and started"
        );
    }

    /// A restored partition reassigned to all three nodes: the others' copies equal node
    /// [`NODE`]'s, batch for batch, byte for byte, from its log start to its end.
    fn replicate(&mut self, view: &ClusterView) {
        let moved = tp(ORDERS, 1);
        self.k
            .ok(json!({"cmd": "reassign", "topic": ORDERS, "partition": 1,
            "replicas": [NODE, 1, 3]}));
        let p = view.partition(ORDERS, 1);
        for other in [1, 3] {
            let mut last = String::new();
            wait_until(
                Duration::from_secs(60),
                &format!("node {other}'s copy of {moved}"),
                || match kafka::compare_with_kafka_dir_from(
                    &self.node_dir.join(moved.dir_name()),
                    &log_dir(&self.k, other),
                    &moved,
                    p.low,
                    p.high,
                ) {
                    Ok(n) => {
                        last = format!("{n} batches");
                        true
                    }
                    Err(e) => {
                        last = e;
                        false
                    }
                },
            );
            eprintln!("{moved} on node {other}: {last} equal to node {NODE}'s");
        }
    }
}

#[test]
fn an_archived_cluster_is_restored_into_a_new_one_with_its_offsets_groups_and_configs() {
    support::require_test_hooks();
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let src = source(dir.path(), &data);
    eprintln!(
        "source filled, archived and destroyed in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let mut target = Target::start(dir.path(), &data);
    let plan = target.prepare_all(&src);
    target.write_killed_once(&src, &plan);
    dump_restored_segments(&mut target.k, &target.node_dir);
    let restored = target.finish(&src, &plan);
    assert_groups_resume(&mut target.k, &restored);
    produce_after_restore(&mut target.k, &src, &target.node_dir);
    let after = ClusterView::of(&mut target.k);
    target.crash(&after);
    target.replicate(&after);
    eprintln!(
        "archive, destroy, restore: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
