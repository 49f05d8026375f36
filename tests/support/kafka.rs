//! Apache Kafka itself as the reference leader: KRaft clusters run by
//! `tests/support/kafka_cluster.py` (through `leaders.py --kind kafka`), and the comparison of
//! a replica with a broker's own partition directory, batch by batch, byte for byte.
//!
//! Tests in one binary share one cluster ([`shared`]): a test that only creates its own topics
//! holds [`Shared::sharing`] while it runs; one that stops, kills or re-elects nodes holds
//! [`Shared::alone`], so no other test runs beside it.

use super::{Leader, TopicPartition};
use replica_follower::record::BatchHeader;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// The pinned Apache Kafka 4.x (the newest that resolves on Maven Central) and 3.x lines;
/// equal to `KAFKA_4` / `KAFKA_3` in `kafka_cluster.py`.
pub const KAFKA_4: &str = "4.4.0";
pub const KAFKA_3: &str = "3.9.2";

/// Starts an Apache Kafka KRaft cluster of `nodes` combined nodes of `version`; with
/// `security`, every node also has a SASL_SSL (SCRAM-SHA-512) and an mTLS listener.
pub fn start(version: &str, nodes: usize, security: bool) -> Leader {
    let mut args = vec!["--kafka-version", version];
    if security {
        args.push("--kafka-security");
    }
    Leader::start_with("kafka", nodes, &args)
}

/// A cluster shared by the tests of one binary.
pub struct Shared {
    leader: Mutex<Leader>,
    exclusive: RwLock<()>,
    pub bootstrap: String,
    pub info: Value,
}

impl Shared {
    /// The driver, for one or a few commands (it answers one command at a time).
    pub fn leader(&self) -> MutexGuard<'_, Leader> {
        self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn ok(&self, c: Value) -> Value {
        self.leader().ok(c)
    }
    /// Held by a test that leaves every node alone.
    pub fn sharing(&self) -> RwLockReadGuard<'_, ()> {
        self.exclusive.read().unwrap_or_else(|e| e.into_inner())
    }
    /// Held by a test that stops, kills or re-elects: no other test runs beside it. When the
    /// test fails, the guard restarts the nodes it left down (and waits for a produce it left
    /// running), so the tests after it meet the whole cluster.
    pub fn alone(&self) -> Alone<'_> {
        Alone {
            _guard: self.exclusive.write().unwrap_or_else(|e| e.into_inner()),
            cluster: self,
        }
    }
    /// The log dir of node `id`.
    pub fn log_dir(&self, id: i64) -> PathBuf {
        node_field(&self.info, id, "log_dir")
    }
    pub fn node(&self, id: i64) -> &Value {
        &self.info["nodes"][id.to_string()]
    }
}

/// See [`Shared::alone`].
pub struct Alone<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
    cluster: &'a Shared,
}

impl Drop for Alone<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let r = self.cluster.leader().cmd(json!({"cmd": "restore"}));
            eprintln!("after the failure, the cluster was restored: {r}");
        }
    }
}

fn node_field(info: &Value, id: i64, field: &str) -> PathBuf {
    PathBuf::from(
        info["nodes"][id.to_string()][field]
            .as_str()
            .unwrap_or_else(|| panic!("no {field} for node {id} in {info}")),
    )
}

/// The cluster the tests of this binary share: `version`, 3 nodes, with the secured listeners.
/// Started by the first test that asks; it stops when the test binary exits (the driver sees
/// its stdin close and kills the nodes).
/// A cluster that could not start fails every test of the binary at once, with the reason.
pub fn shared(version: &'static str) -> &'static Shared {
    static CLUSTER: OnceLock<Result<Shared, String>> = OnceLock::new();
    let started = CLUSTER.get_or_init(|| {
        std::panic::catch_unwind(|| {
            let leader = start(version, 3, true);
            let info = leader.info["kafka"].clone();
            Shared {
                bootstrap: leader.bootstrap.clone(),
                leader: Mutex::new(leader),
                exclusive: RwLock::new(()),
                info,
            }
        })
        .map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the cluster did not start".to_string())
        })
    });
    let shared = match started {
        Ok(s) => s,
        Err(e) => panic!("Apache Kafka {version}: {e}"),
    };
    assert_eq!(
        shared.info["version"], version,
        "one binary shares one cluster"
    );
    shared
}

/// DumpLogSegments' words for an index or log that does not match (Kafka 4.4's source:
/// `DumpLogSegments.java`, `TimeIndexDumpErrors`). Its "Non-consecutive offsets" are not
/// among them: a compacted log has gaps, and Kafka 4.4 lists the first record of every
/// segment not based at 0 as following offset -1.
pub const DUMP_MISMATCHES: [&str; 6] = [
    "Mismatches in",
    "Index offset",
    "are not found in",
    "timestamp mismatch",
    "out of order timestamp",
    "invalid bytes",
];

/// One batch of a partition directory: base and last offset, and its bytes.
pub type DirBatch = (i64, i64, Vec<u8>);

/// The whole batches of the `.log` segments in `dir`, in offset order, that end below `end`.
/// A partial batch at the end of the last segment (an append in progress) ends the walk; one
/// anywhere else is an error.
pub fn dir_batches(dir: &Path, end: i64) -> Result<Vec<DirBatch>, String> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut out = Vec::new();
    for (i, path) in logs.iter().enumerate() {
        let bytes = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let mut pos = 0;
        while pos < bytes.len() {
            let h = match BatchHeader::parse(&bytes[pos..], 64 << 20) {
                Ok(h) => h,
                Err(_) if i + 1 == logs.len() => break,
                Err(e) => return Err(format!("{} at byte {pos}: {e:?}", path.display())),
            };
            if h.last_offset >= end {
                break;
            }
            out.push((
                h.base_offset,
                h.last_offset,
                bytes[pos..pos + h.size_in_bytes].to_vec(),
            ));
            pos += h.size_in_bytes;
        }
    }
    Ok(out)
}

/// Compares the replica of `tp` in `data_dir` with Kafka's own partition directory
/// `kafka_dir` below the high watermark `hw`: where both hold offsets, the same batches, byte
/// for byte, and the replica holds every batch Kafka holds up to `hw`. Returns how many
/// batches were compared.
pub fn compare_with_kafka_dir(
    kafka_dir: &Path,
    data_dir: &Path,
    tp: &TopicPartition,
    hw: i64,
) -> Result<usize, String> {
    compare_with_kafka_dir_from(kafka_dir, data_dir, tp, i64::MIN, hw)
}

/// [`compare_with_kafka_dir`] over the batches that end at or after `from` on both sides
/// (Kafka's log start after delete-records, whose segment still holds the batches below it;
/// or where a replica that keeps its uncleaned history meets Kafka's cleaned log).
pub fn compare_with_kafka_dir_from(
    kafka_dir: &Path,
    data_dir: &Path,
    tp: &TopicPartition,
    from: i64,
    hw: i64,
) -> Result<usize, String> {
    let mut kafka = dir_batches(kafka_dir, hw)?;
    kafka.retain(|b| b.1 >= from);
    let replica = dir_batches(&data_dir.join(tp.dir_name()), hw)?;
    let Some(first) = kafka.first() else {
        return Err(format!(
            "{tp}: Kafka's {} holds no batch{} below {hw}",
            kafka_dir.display(),
            if from == i64::MIN {
                String::new()
            } else {
                format!(" from {from}")
            }
        ));
    };
    // History the replica keeps below Kafka's log start is not Kafka's to judge.
    let replica: Vec<&DirBatch> = replica.iter().filter(|b| b.1 >= first.0).collect();
    if replica.len() != kafka.len() {
        let span = |v: &[&DirBatch]| v.first().map(|b| b.0).zip(v.last().map(|b| b.1));
        return Err(format!(
            "{tp}: Kafka's directory has {} batches below {hw} (offsets {:?}), the replica \
             {} (offsets {:?})",
            kafka.len(),
            span(&kafka.iter().collect::<Vec<_>>()),
            replica.len(),
            span(&replica)
        ));
    }
    for (k, r) in kafka.iter().zip(&replica) {
        if k.2 != r.2 {
            let at = k.2.iter().zip(&r.2).position(|(a, b)| a != b);
            return Err(format!(
                "{tp}: batch {}..={} differs from Kafka's {}..={} ({} and {} bytes, first \
                 difference at byte {at:?})",
                r.0,
                r.1,
                k.0,
                k.1,
                r.2.len(),
                k.2.len()
            ));
        }
    }
    Ok(kafka.len())
}

/// Waits (up to 60 s) until the replica in `data_dir` equals, below Kafka's high watermark,
/// the partition directory of the partition's current leader, byte for byte (see
/// [`compare_with_kafka_dir`]); panics with the last difference. Returns the high watermark and
/// the batches compared.
pub fn assert_same_as_kafka(
    cluster: &Shared,
    data_dir: &Path,
    tp: &TopicPartition,
) -> (i64, usize) {
    assert_same_as_kafka_from(cluster, data_dir, tp, i64::MIN)
}

/// [`assert_same_as_kafka`] from offset `from` on (see [`compare_with_kafka_dir_from`]).
pub fn assert_same_as_kafka_from(
    cluster: &Shared,
    data_dir: &Path,
    tp: &TopicPartition,
    from: i64,
) -> (i64, usize) {
    let hw = high_watermark(cluster, tp);
    let dir = leader_dir(cluster, tp);
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        // Until the replica has reached the high watermark it may still hold a tail the
        // leader no longer has (before a truncation).
        let end = super::log_end(data_dir, &tp.topic, tp.partition.into());
        if end >= hw {
            match compare_with_kafka_dir_from(&dir, data_dir, tp, from, hw) {
                Ok(batches) => return (hw, batches),
                Err(e) => last = e,
            }
        } else {
            last = format!("the replica's log ends at {end}, Kafka's high watermark is {hw}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "after 60 s the replica still differs from {}: {last}",
        dir.display()
    );
}

/// Kafka's high watermark of `tp` (ListOffsets latest).
pub fn high_watermark(cluster: &Shared, tp: &TopicPartition) -> i64 {
    cluster.ok(json!({"cmd": "high_watermarks", "topic": tp.topic,
        "partitions": [tp.partition]}))["watermarks"][0][1]
        .as_i64()
        .expect("high watermark")
}

/// Follower settings for the Kafka scenarios: short fetch waits, frequent checkpoints, small
/// segments (so the replica's segments split where Kafka's do not: the comparison is by batch).
pub fn fast(c: super::Config) -> super::Config {
    c.set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.segment_bytes", 65536)
        .set("log.flush_interval_ms", 100)
}

/// A daemon following every partition of `topic` from `cluster` with [`fast`] settings, in a new
/// temporary directory: (temporary directory, data dir, daemon).
pub fn follow(cluster: &Shared, topic: &str) -> (tempfile::TempDir, PathBuf, super::Daemon) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let cfg = super::Config::new(&data, &cluster.bootstrap)
        .follow(topic)
        .apply(fast)
        .write(dir.path());
    let daemon = super::Daemon::start(&cfg);
    (dir, data, daemon)
}

/// The current leader of `topic`-`partition` (-1 when it has none), from Metadata.
pub fn leader_of(cluster: &Shared, topic: &str, partition: i32) -> i64 {
    cluster.ok(json!({"cmd": "describe_partition", "topic": topic, "partition": partition}))
        ["leader"]
        .as_i64()
        .expect("leader")
}

/// Every `.txnindex` of a partition directory, concatenated in offset order (each is whole
/// 34-byte entries, so the concatenation does not depend on where segments split).
pub fn txnindex_entries(dir: &Path) -> Vec<u8> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txnindex"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display())))
        .collect()
}

/// Kills node 1, the leader of `topic`-0, with SIGKILL in the middle of `count` records an
/// idempotent acks=all producer sends, paced at 1,000 a second; waits for another leader and
/// for every record to be acknowledged. Returns the new leader and the offsets the records
/// took (first, last).
pub fn kill_leader_under_load(cluster: &Shared, topic: &str, count: usize) -> (i64, i64, i64) {
    assert_eq!(leader_of(cluster, topic, 0), 1, "node 1 leads {topic}-0");
    cluster.ok(
        json!({"cmd": "produce", "topic": topic, "partition": 0, "count": count,
        "codec": "lz4", "idempotent": true, "batch_records": 20, "seed": 2,
        "records_per_second": 1000, "background": true}),
    );
    // Killed once a third of the records are acknowledged, however long the producer took to
    // start: a fixed sleep let a slow start put the whole load after the kill.
    super::wait_until(
        Duration::from_secs(60),
        "a third of the records acknowledged",
        || {
            cluster.ok(json!({"cmd": "produce_progress"}))["delivered"]
                .as_u64()
                .is_some_and(|n| n >= count as u64 / 3)
        },
    );
    cluster.ok(json!({"cmd": "kafka_node", "node": 1, "action": "kill9"}));
    let mut leader = -1;
    super::wait_until(Duration::from_secs(60), "a new leader", || {
        leader = leader_of(cluster, topic, 0);
        leader > 1
    });
    let joined = cluster.ok(json!({"cmd": "join_produce"}));
    assert_eq!(
        joined["count"], count,
        "every record acknowledged: {joined}"
    );
    let offset = |k: &str| joined[k].as_i64().expect("offsets of the records");
    (leader, offset("first_offset"), offset("last_offset"))
}

/// Asserts the leader changed while offsets `first..=last` were written: the batches there
/// carry more than one leader epoch (the kill fell inside the load, not before or after it).
pub fn assert_epoch_changed_within(batches: &[DirBatch], first: i64, last: i64) {
    let epochs: std::collections::BTreeSet<i32> = batches
        .iter()
        .filter(|b| b.1 >= first && b.0 <= last)
        .map(|b| {
            BatchHeader::parse(&b.2, b.2.len())
                .expect("a whole batch")
                .partition_leader_epoch
        })
        .collect();
    assert!(
        epochs.len() > 1,
        "offsets {first}..={last} were all written in epoch(s) {epochs:?}: the leader was not \
         killed under load"
    );
}

/// Asserts the batches follow each other: no gap, no overlap.
pub fn assert_contiguous(batches: &[DirBatch]) {
    for pair in batches.windows(2) {
        assert_eq!(
            pair[1].0,
            pair[0].1 + 1,
            "a gap or an overlap between {}..={} and {}..={}",
            pair[0].0,
            pair[0].1,
            pair[1].0,
            pair[1].1
        );
    }
}

/// The partition directory of `tp` on its current leader.
pub fn leader_dir(cluster: &Shared, tp: &TopicPartition) -> PathBuf {
    let leader = cluster.ok(json!({"cmd": "describe_partition", "topic": tp.topic,
        "partition": tp.partition}))["leader"]
        .as_i64()
        .expect("leader");
    assert!(leader > 0, "{tp} has no leader");
    cluster.log_dir(leader).join(tp.dir_name())
}
