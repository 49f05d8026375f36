//! Apache Kafka itself as the leader (issue 20), where the replica is an archive: Kafka's log
//! cleaner compacting a followed topic, Kafka's log start moving past the replica (retention,
//! delete-records), a topic deleted and re-created, and Kafka's own tools — DumpLogSegments
//! and the Java console consumer — reading the replica. One 3-node KRaft cluster of the pinned
//! 4.x, shared by the scenarios of this binary.

use crate::support;

use crate::support::kafka::{self, DirBatch, Shared};
use crate::support::{Config, Daemon, log_end, partition_status, wait_until};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::{BatchHeader, records::decode_records};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster;

fn tp(topic: &str) -> TopicPartition {
    TopicPartition {
        topic: topic.to_string(),
        partition: 0,
    }
}

/// `count` records to partition 0 of `topic`, `batch_records` a batch, uncompressed, every
/// record keyed: with `key_space` N > 0 the keys repeat (`key-<seed>-<i % N>`) and the
/// records i % 50 == 49 are tombstones. Returns the offset after the last one.
fn produce(c: &Shared, topic: &str, count: usize, key_space: usize, seed: u64) -> i64 {
    let r = c.ok(
        json!({"cmd": "produce", "topic": topic, "partition": 0, "count": count,
        "codec": "none", "value_size": 80, "keys": "all", "key_space": key_space,
        "headers": true, "seed": seed, "batch_records": 20}),
    );
    r["last_offset"].as_i64().expect("last_offset") + 1
}

fn replica_batches(data: &Path, tp: &TopicPartition, end: i64) -> Vec<DirBatch> {
    kafka::dir_batches(&data.join(tp.dir_name()), end).expect("the replica's batches")
}

/// Tombstones (keyed records with a null value) in uncompressed batches.
fn tombstones(batches: &[DirBatch]) -> usize {
    batches
        .iter()
        .map(|(_, _, b)| {
            let h = BatchHeader::parse(b, b.len()).expect("batch header");
            decode_records(&h, b)
                .expect("uncompressed records")
                .iter()
                .filter(|r| r.key.is_some() && r.value.is_none())
                .count()
        })
        .sum()
}

fn new_replica(c: &Shared, topic: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Fast follower settings with small segments (several per partition).
    let cfg = Config::new(&data, &c.bootstrap)
        .follow(topic)
        .apply(kafka::fast)
        .set("log.segment_bytes", 16384)
        .write(dir.path());
    (dir, data, cfg)
}

/// Runs one of Kafka's main classes; its output (stdout and stderr).
fn kafka_tool(c: &Shared, main: &str, args: &[String]) -> String {
    c.ok(json!({"cmd": "tool", "main": main, "args": args, "timeout_s": 120}))["output"]
        .as_str()
        .expect("tool output")
        .to_string()
}

/// Kafka's (low, high) watermarks of partition 0 of `topic`.
fn watermarks(c: &Shared, topic: &str) -> (i64, i64) {
    let w = c.ok(json!({"cmd": "high_watermarks", "topic": topic, "partitions": [0]}));
    let w = &w["watermarks"][0];
    (w[0].as_i64().unwrap(), w[1].as_i64().unwrap())
}

#[test]
fn kafkas_log_cleaner_compacts_what_a_replica_already_holds_and_it_keeps_its_history() {
    let t0 = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "compacted";
    let tp = tp(topic);
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3, "config": {"cleanup.policy": "compact",
        "segment.ms": "1500", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "1000"}}),
    );
    // Replica B follows before any cleaning.
    let (_dir_b, data_b, cfg_b) = new_replica(c, topic);
    let mut b = Daemon::start(&cfg_b);
    // 600 records over 20 keys, 20 a batch: every key overwritten 30 times, and 12
    // tombstones; the last record of key 19 is a tombstone (offset 599).
    let hw1 = produce(c, topic, 600, 20, 1);
    assert_eq!(hw1, 600);
    wait_until(Duration::from_secs(60), "replica B at 600", || {
        log_end(&data_b, topic, 0) == hw1
    });
    let history = replica_batches(&data_b, &tp, hw1);
    assert_eq!(tombstones(&history), 12, "the tombstones B fetched");
    let leader_dir = kafka::leader_dir(c, &tp);

    // Kafka never cleans the active segment, and rolls it (segment.ms) only on an append: a
    // few records now and then, with keys of their own, until the leader's directory shows
    // the first 600 offsets cleaned, the tombstones included (a tombstone that is the last
    // of its key goes once delete.retention.ms has passed since a cleaning stamped it).
    let mut seed = 100;
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(700));
        produce(c, topic, 5, 0, seed);
        seed += 1;
        if let Ok(k) = kafka::dir_batches(&leader_dir, hw1)
            && k.len() < history.len()
            && tombstones(&k) == 0
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "Kafka's log cleaner did not clean {tp} within 90 s"
        );
    }
    let cleaning_s = started.elapsed().as_secs_f64();
    // The cleaner goes on with the segments of the rolling appends, which hold nothing to
    // remove; wait until the leader's directory stays the same for two seconds.
    let mut last = kafka::dir_batches(&leader_dir, i64::MAX).ok();
    wait_until(Duration::from_secs(30), "the cleaner to settle", || {
        std::thread::sleep(Duration::from_secs(2));
        let now = kafka::dir_batches(&leader_dir, i64::MAX).ok();
        let same = now.is_some() && now == last;
        last = now;
        same
    });
    // What the settled cleaner left below 600 (a later pass may have rewritten more).
    let cleaned: Vec<DirBatch> = last
        .unwrap_or_default()
        .into_iter()
        .filter(|b| b.1 < hw1)
        .collect();
    assert!(
        cleaned.len() < history.len() && tombstones(&cleaned) == 0,
        "the settled log below 600 is cleaned"
    );
    let removed = history
        .iter()
        .filter(|h| !cleaned.iter().any(|k| k.0 <= h.1 && h.0 <= k.1))
        .count();
    let rewritten = history
        .iter()
        .filter(|h| {
            cleaned
                .iter()
                .any(|k| (k.0, k.1) == (h.0, h.1) && k.2 != h.2)
        })
        .count();
    assert!(
        removed > 0 && rewritten > 0,
        "the cleaner removed {removed} and rewrote {rewritten} batches"
    );

    // a) A replica started after the cleaning equals the cleaned log.
    let (_dir_a, data_a, cfg_a) = new_replica(c, topic);
    let mut a = Daemon::start(&cfg_a);
    let (hw_a, compared_a) = kafka::assert_same_as_kafka(c, &data_a, &tp);
    let a_below = replica_batches(&data_a, &tp, hw1);
    assert_eq!(
        a_below, cleaned,
        "replica A holds Kafka's cleaned log below 600"
    );
    assert_eq!(tombstones(&a_below), 0);
    assert_eq!(a.stop().code(), Some(0), "{}", a.log_text());

    // b) Replica B keeps what it fetched before the cleaning, byte for byte, and follows on.
    let end = produce(c, topic, 50, 0, 7);
    let (hw_b, compared_b) = kafka::assert_same_as_kafka_from(c, &data_b, &tp, hw1);
    assert_eq!(hw_b, end);
    assert_eq!(
        replica_batches(&data_b, &tp, hw1),
        history,
        "B's batches below 600 are what it fetched before the cleaning"
    );
    assert_eq!(b.stop().code(), Some(0), "{}", b.log_text());

    // c) verify --against-leader: what the cleaner removed or rewrote is info, not a failure.
    let (code, out, err) = support::run_cli(&[
        "verify",
        "--config",
        cfg_b.to_str().unwrap(),
        "--against-leader",
    ]);
    assert_eq!(code, Some(0), "verify --against-leader failed:\n{out}{err}");
    let more = |what: &str| -> usize {
        out.lines()
            .find(|l| l.contains("more local batch(es)") && l.contains(what))
            .and_then(|l| l.split("and ").nth(1)?.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let gone = out
        .lines()
        .filter(|l| l.contains("info: batch") && l.contains("no longer on the leader"))
        .count()
        + more("no longer has");
    let compacted = out
        .lines()
        .filter(|l| l.contains("info: batch") && l.contains("was compacted on the leader"))
        .count()
        + more("compacted on the leader");
    assert_eq!(
        (gone, compacted),
        (removed, rewritten),
        "batches removed and rewritten by the cleaner, as verify names them:\n{out}"
    );
    assert!(
        !out.contains("differs:") && !out.contains("hole:") && !out.contains("damaged:"),
        "{out}"
    );
    assert!(out.contains(&format!("{tp}: ok: ")), "{out}");
    eprintln!(
        "compaction: {} batches fetched below 600, {} after cleaning ({removed} removed, \
         {rewritten} rewritten; cleaned within {cleaning_s:.1} s); A: {compared_a} batches \
         equal to Kafka's up to {hw_a}; B: {compared_b} batches equal from 600 up to {hw_b}; \
         {:.1} s",
        history.len(),
        cleaned.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// A replica of `topic` (created with `config`) that followed 300 records and was stopped:
/// (temp dir, data dir, config, its batches).
fn stopped_replica(
    c: &Shared,
    topic: &str,
    config: Value,
) -> (tempfile::TempDir, PathBuf, PathBuf, Vec<DirBatch>) {
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3, "config": config}),
    );
    let end = produce(c, topic, 300, 0, 1);
    let (dir, data, cfg) = new_replica(c, topic);
    let mut d = Daemon::start(&cfg);
    wait_until(Duration::from_secs(60), "the replica at 300", || {
        log_end(&data, topic, 0) == end
    });
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let held = replica_batches(&data, &tp(topic), end);
    (dir, data, cfg, held)
}

/// Restarts the replica whose log ends at 300 after Kafka's log start moved to `start` (>
/// 300): it keeps every batch it held, names 300..start-1 lost upstream, and from `start` on
/// equals Kafka's directory. Returns (high watermark, batches compared).
fn assert_keeps_history_below(
    c: &Shared,
    topic: &str,
    data: &Path,
    cfg: &Path,
    held: &[DirBatch],
    start: i64,
) -> (i64, usize) {
    let tp = tp(topic);
    let mut d = Daemon::start(cfg);
    let (hw, compared) = kafka::assert_same_as_kafka_from(c, data, &tp, start);
    let log = d.log_text();
    assert!(
        log.contains("OFFSET_OUT_OF_RANGE at 300")
            && log.contains(&format!("offsets 300..{} are lost upstream", start - 1)),
        "{log}"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let all = replica_batches(data, &tp, hw);
    assert_eq!(
        &all[..held.len()],
        held,
        "every batch it held, byte for byte"
    );
    assert_eq!(
        all[held.len()].0,
        start,
        "then Kafka's batches from its log start"
    );
    let st = partition_status(data, topic, 0).unwrap();
    assert_eq!(st["log_start_offset"], json!(0), "{st}");
    assert_eq!(
        st["lost_upstream"],
        json!([{"first_offset": 300, "last_offset": start - 1}]),
        "{st}"
    );
    let ls = support::read_checkpoint(&data.join("log-start-offset-checkpoint"));
    assert_eq!(
        ls.get(&(topic.to_string(), 0)),
        Some(&0),
        "its own first offset"
    );
    let (ok, out) = support::verify(data);
    assert!(ok, "{out}");
    (hw, compared)
}

#[test]
fn history_below_kafkas_log_start_is_kept_after_retention_and_delete_records() {
    let t0 = Instant::now();
    let c = cluster();
    let _shared = c.sharing();

    // a) Retention: while the replica is stopped, 300 more records, then retention.ms=1000
    // deletes every segment (the active one too: Kafka rolls a new one) and the log start
    // becomes 600.
    let topic = "retained";
    let (_dir, data, cfg, held) = stopped_replica(c, topic, json!({}));
    assert_eq!(produce(c, topic, 300, 0, 2), 600);
    c.ok(json!({"cmd": "alter_topic_config", "topic": topic,
        "config": {"retention.ms": "1000"}}));
    wait_until(Duration::from_secs(60), "Kafka's retention", || {
        watermarks(c, topic) == (600, 600)
    });
    c.ok(json!({"cmd": "alter_topic_config", "topic": topic,
        "config": {"retention.ms": "-1"}}));
    assert_eq!(produce(c, topic, 100, 0, 3), 700);
    let (hw_r, compared_r) = assert_keeps_history_below(c, topic, &data, &cfg, &held, 600);
    assert_eq!(hw_r, 700);

    // b) Delete-records: while the replica is stopped, 300 more records, then Kafka's log
    // start moves to the first batch at or after 450 (its segment stays on disk).
    let topic = "trimmed";
    let (_dir, data, cfg, held) = stopped_replica(c, topic, json!({}));
    assert_eq!(produce(c, topic, 300, 0, 2), 600);
    let kafka_dir = kafka::leader_dir(c, &tp(topic));
    let start = kafka::dir_batches(&kafka_dir, 600)
        .unwrap()
        .iter()
        .map(|b| b.0)
        .find(|b| *b >= 450)
        .expect("a batch from 450");
    let r = c.ok(
        json!({"cmd": "delete_records", "topic": topic, "partition": 0,
        "offset": start}),
    );
    assert_eq!(r["low_watermark"], json!(start));
    assert_eq!(produce(c, topic, 100, 0, 3), 700);
    let (hw_d, compared_d) = assert_keeps_history_below(c, topic, &data, &cfg, &held, start);
    assert_eq!(hw_d, 700);
    eprintln!(
        "history below the log start: retention kept {} batches (0..299), lost 300..599, \
         {compared_r} batches equal to Kafka's 600..{hw_r}; delete-records kept {} batches, \
         lost 300..{}, {compared_d} batches equal to Kafka's {start}..{hw_d}; {:.1} s",
        held.len(),
        held.len(),
        start - 1,
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn a_topic_deleted_and_recreated_keeps_the_old_incarnation_archived() {
    let t0 = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "recreated";
    let tp = tp(topic);
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3}),
    );
    let old_end = produce(c, topic, 300, 0, 1);
    let old_id = c.ok(json!({"cmd": "topic_id", "topic": topic}))["topic_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_dir, data, cfg) = new_replica(c, topic);
    let mut d = Daemon::start(&cfg);
    wait_until(Duration::from_secs(60), "the replica at 300", || {
        log_end(&data, topic, 0) == old_end
    });
    let md = data.join(tp.dir_name()).join("partition.metadata");
    let metadata = |id: &str| format!("version: 0\ntopic_id: {id}\n");
    wait_until(Duration::from_secs(10), "partition.metadata", || {
        std::fs::read_to_string(&md).ok() == Some(metadata(&old_id))
    });
    let old = replica_batches(&data, &tp, old_end);

    // Deleted and re-created while the replica follows.
    c.ok(json!({"cmd": "delete_topic", "topic": topic}));
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3}),
    );
    let new_id = c.ok(json!({"cmd": "topic_id", "topic": topic}))["topic_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_id, old_id);
    let new_end = produce(c, topic, 120, 0, 2);
    assert_eq!(new_end, 120);
    let archived = data.join(format!("{}.{old_id}.archived", tp.dir_name()));
    wait_until(Duration::from_secs(60), "the archived history", || {
        archived.is_dir()
    });
    let (hw, compared) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(hw, new_end);
    assert_eq!(
        std::fs::read_to_string(&md).unwrap(),
        metadata(&new_id),
        "the new incarnation's id"
    );
    assert_eq!(
        kafka::dir_batches(&archived, old_end).unwrap(),
        old,
        "the old incarnation, byte for byte"
    );
    assert_eq!(
        std::fs::read_to_string(archived.join("partition.metadata")).unwrap(),
        metadata(&old_id)
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let st = support::status(&data);
    assert_eq!(
        st["archived"],
        json!([{"topic": topic, "partition": 0, "topic_id": old_id,
            "path": archived.to_str().unwrap(),
            "read_as_topic": format!("{topic}.{old_id}.archived")}]),
        "{st}"
    );
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    eprintln!(
        "re-created topic: {} old batches (0..{}) archived byte for byte, {compared} new \
         batches equal to Kafka's up to {hw}; {:.1} s",
        old.len(),
        old_end - 1,
        t0.elapsed().as_secs_f64()
    );
}

/// DumpLogSegments' "Non-consecutive offsets in <file>" sections: (file, offset, next offset)
/// per pair it lists.
fn non_consecutive(out: &str) -> Vec<(String, i64, i64)> {
    let mut pairs = Vec::new();
    let mut file = None;
    for line in out.lines() {
        if let Some(f) = line.strip_prefix("Non-consecutive offsets in ") {
            file = Some(f.to_string());
        } else if let (Some(f), Some((a, b))) = (&file, line.trim().split_once(" is followed by "))
        {
            pairs.push((f.clone(), a.parse().unwrap(), b.parse().unwrap()));
        } else {
            file = None;
        }
    }
    pairs
}

fn dump_log_segments(c: &Shared, files: &[PathBuf]) -> String {
    let list: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    kafka_tool(
        c,
        "org.apache.kafka.tools.DumpLogSegments",
        &[
            "--deep-iteration".to_string(),
            "--verify-index-only".to_string(),
            "--files".to_string(),
            list.join(","),
        ],
    )
}

#[test]
fn kafkas_dump_log_segments_finds_every_segment_and_index_of_the_replica_sound() {
    let t0 = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "dumped";
    let tp = tp(topic);
    // Kafka rolls its own segments too (segment.ms), for DumpLogSegments to read beside the
    // replica's.
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3, "config": {"segment.ms": "1000"}}),
    );
    for (i, codec) in ["none", "gzip", "zstd"].iter().enumerate() {
        std::thread::sleep(Duration::from_millis(1100));
        c.ok(
            json!({"cmd": "produce", "topic": topic, "partition": 0, "count": 300,
            "codec": codec, "value_size": 120, "keys": "mixed", "headers": true,
            "seed": i, "batch_records": 30, "idempotent": true}),
        );
    }
    // An aborted transaction: the replica's segments get a .txnindex.
    c.ok(
        json!({"cmd": "produce_transactional", "topic": topic, "partition": 0,
        "transactions": [{"count": 20, "commit": true}, {"count": 15, "commit": false},
        {"count": 10, "commit": true}], "transactional_id": "archive-dump"}),
    );
    let (_dir, data, cfg) = new_replica(c, topic);
    let mut d = Daemon::start(&cfg);
    let (hw, compared) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());

    let pdir = data.join(tp.dir_name());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| {
                ["log", "index", "timeindex", "txnindex", "snapshot"].contains(&x.to_str().unwrap())
            })
        })
        .collect();
    files.sort();
    let count = |ext: &str| {
        files
            .iter()
            .filter(|f| f.extension().is_some_and(|x| x == ext))
            .count()
    };
    let segments = count("log");
    assert!(segments >= 4, "a multi-segment replica: {files:?}");
    assert_eq!(count("index"), segments, "{files:?}");
    assert_eq!(count("timeindex"), segments, "{files:?}");
    assert!(
        count("txnindex") >= 1,
        "the aborted transaction's index: {files:?}"
    );
    let out = dump_log_segments(c, &files);
    for f in &files {
        assert!(
            out.contains(&format!("Dumping {}", f.display())),
            "DumpLogSegments did not dump {}:\n{out}",
            f.display()
        );
    }
    assert!(!out.contains("Ignoring unknown file"), "{out}");
    // "Non-consecutive offsets" is judged by `non_consecutive` below.
    for word in kafka::DUMP_MISMATCHES {
        assert!(!out.contains(word), "DumpLogSegments says {word:?}:\n{out}");
    }
    assert!(!out.to_lowercase().contains("isvalid: false"), "{out}");
    // Kafka 4.4's deep iteration starts each .log with "last offset -1" (its Java port lost
    // the Scala original's `if (lastOffset == -1)` branch), so the first record of every
    // segment not based at 0 is listed as following -1, Kafka's own segments' too. Any
    // other pair, or a first record that is not at its segment's base offset, is a defect.
    let pairs = non_consecutive(&out);
    let want: Vec<(String, i64, i64)> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "log"))
        .filter_map(|f| {
            let base: i64 = f.file_stem()?.to_str()?.parse().ok()?;
            (base != 0).then(|| (f.display().to_string(), -1, base))
        })
        .collect();
    let mut got = pairs.clone();
    got.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(got, want_sorted, "non-consecutive offsets:\n{out}");
    // The same tool over Kafka's own segments says the same of each.
    let kafka_logs: Vec<(i64, PathBuf)> = support::segment_logs(&kafka::leader_dir(c, &tp))
        .into_iter()
        .filter(|(base, _)| *base != 0)
        .collect();
    assert!(!kafka_logs.is_empty(), "Kafka rolled no segment");
    let paths: Vec<PathBuf> = kafka_logs.iter().map(|(_, p)| p.clone()).collect();
    let mut kafka_got = non_consecutive(&dump_log_segments(c, &paths));
    kafka_got.sort();
    let kafka_want: Vec<(String, i64, i64)> = kafka_logs
        .iter()
        .map(|(base, p)| (p.display().to_string(), -1, *base))
        .collect();
    assert_eq!(kafka_got, kafka_want, "Kafka's own segments");
    let batches = replica_batches(&data, &tp, hw).len();
    let dumped = out.lines().filter(|l| l.starts_with("baseOffset:")).count();
    assert_eq!(dumped, batches, "every batch of every segment was read");
    assert!(
        out.lines().any(|l| l.contains("endTxnMarker: ABORT")),
        "the abort marker, read by Kafka's own code"
    );

    // The check can fail: one offset-index entry off by one, in a copy.
    let copy = tempfile::tempdir().unwrap();
    let index = files
        .iter()
        .find(|f| {
            f.extension().is_some_and(|x| x == "index") && std::fs::metadata(f).unwrap().len() >= 16
        })
        .expect("an index with two entries");
    let log = index.with_extension("log");
    for f in [index, &log] {
        std::fs::copy(f, copy.path().join(f.file_name().unwrap())).unwrap();
    }
    let bad = copy.path().join(index.file_name().unwrap());
    let mut bytes = std::fs::read(&bad).unwrap();
    let rel = u32::from_be_bytes(bytes[8..12].try_into().unwrap());
    bytes[8..12].copy_from_slice(&(rel + 1).to_be_bytes());
    std::fs::write(&bad, bytes).unwrap();
    let out_bad = dump_log_segments(c, std::slice::from_ref(&bad));
    assert!(
        out_bad.contains(&format!("Mismatches in :{}", bad.display()))
            && out_bad.contains("Index offset"),
        "DumpLogSegments must see the changed entry:\n{out_bad}"
    );
    eprintln!(
        "DumpLogSegments: {} files ({segments} segments, {} txnindex) of {batches} batches \
         ({compared} equal to Kafka's up to {hw}), no mismatch; the altered entry reported; \
         {:.1} s",
        files.len(),
        count("txnindex"),
        t0.elapsed().as_secs_f64()
    );
}

/// What ConsoleConsumer prints of the first `n` records of partition 0 of `topic` from
/// `bootstrap`: timestamp, partition, offset, headers, key and value a record; Kafka's log
/// lines (none are expected: they go to the tools' log file) left out.
fn console_consumer(c: &Shared, bootstrap: &str, topic: &str, n: usize) -> String {
    let mut args: Vec<String> = [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--max-messages",
        &n.to_string(),
        "--timeout-ms",
        "30000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for p in [
        "print.timestamp",
        "print.partition",
        "print.offset",
        "print.headers",
        "print.key",
        "print.value",
    ] {
        args.push("--formatter-property".into());
        args.push(format!("{p}=true"));
    }
    kafka_tool(c, "org.apache.kafka.tools.consumer.ConsoleConsumer", &args)
}

#[test]
fn kafkas_java_console_consumer_reads_the_same_records_from_the_serve_listener() {
    let t0 = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "consoled";
    let tp = tp(topic);
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3}),
    );
    for (i, codec) in ["lz4", "none", "snappy"].iter().enumerate() {
        c.ok(
            json!({"cmd": "produce", "topic": topic, "partition": 0, "count": 100,
            "codec": codec, "value_size": 60, "keys": "mixed", "headers": true,
            "seed": i, "batch_records": 25}),
        );
    }
    let (_dir, data, addr, mut d) = support::serving_follower(&c.bootstrap, topic);
    let (hw, compared) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(hw, 300);
    let from_kafka = console_consumer(c, &c.bootstrap, topic, 300);
    let from_replica = console_consumer(c, &addr, topic, 300);
    let records = from_kafka.matches("Offset:").count();
    assert_eq!(records, 300, "Kafka's records:\n{from_kafka}");
    assert!(
        from_kafka.contains("Processed a total of 300 messages"),
        "{from_kafka}"
    );
    assert_eq!(
        from_replica, from_kafka,
        "the Java consumer reads the serve listener as it reads Kafka"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    eprintln!(
        "ConsoleConsumer: {records} records, {} bytes of output, identical from Kafka and \
         from the serve listener ({compared} batches equal to Kafka's); {:.1} s",
        from_kafka.len(),
        t0.elapsed().as_secs_f64()
    );
}
