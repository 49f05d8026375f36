//! The acceptance of the offsite copy against Apache Kafka and real S3 servers.
//!
//! A 1-node Kafka cluster leads a 2-partition topic; the daemon follows it with small
//! segments and local retention on, and copies the replica, encrypted, to moto's S3 server
//! behind a proxy. Records keep coming while the store is unreachable for 15 s, while an
//! upload hangs and the daemon is killed -9, and while the daemon is killed -9 between a
//! piece's upload and the manifest naming it. Throughout, a sampler checks that every batch
//! the leader has is local or offsite (retention never deleted what the bucket lacked).
//! Then the local data dir is deleted, a restore without the key is refused naming it, and
//! `offsite restore` rebuilds the data dir byte for byte equal to Kafka's own partition
//! directories from offset 0; `verify` passes, the daemon resumes on it, and `offsite
//! verify` finds no difference. No record byte is in the bucket in plaintext, no object is
//! torn and no byte range was uploaded twice. A second S3 implementation, s3s-fs (which
//! checks signatures), runs the basic round trip.
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
use replica_follower::offsite::manifest::{Manifest, PartitionKey};
use replica_follower::offsite::settings::Offsite;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::kafka::{self, KAFKA_4};
use support::s3::{S3Server, first_local_base, offsite_status, write_config, write_key_file};
use support::{Config, Daemon, Leader, wait_until};

const KEY: [u8; 32] = [
    0x5a, 0x11, 0x93, 0x0c, 0x7e, 0x2d, 0x44, 0xb8, 0x01, 0xfe, 0x39, 0x6a, 0xc2, 0x8d, 0x57, 0x10,
    0x9b, 0x3e, 0xa4, 0x62, 0x0f, 0xd1, 0x78, 0x25, 0xe6, 0x4b, 0x83, 0x1c, 0xbd, 0x70, 0x2a, 0x95,
];
/// A text every record value carries (tests/support/leaders.py's pattern).
const VALUE_TEXT: &[u8] = b"replica-follower-test-data|";

fn node_log_dir(k: &Leader) -> PathBuf {
    let nodes = k.info["kafka"]["nodes"].as_object().unwrap();
    assert_eq!(nodes.len(), 1);
    PathBuf::from(nodes.values().next().unwrap()["log_dir"].as_str().unwrap())
}

fn high_watermarks(k: &mut Leader, topic: &str) -> Vec<i64> {
    let r = k.ok(
        json!({"cmd": "high_watermarks", "topic": topic, "partitions": [0, 1],
        "isolation": "read_uncommitted"}),
    );
    r["watermarks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w[1].as_i64().unwrap())
        .collect()
}

/// The `[offsite]` settings of `config`, as the daemon reads them.
fn offsite_of(config: &Path) -> Arc<Offsite> {
    let cfg = replica_follower::config::Config::load(config).unwrap();
    replica_follower::resolve::resolve(&cfg)
        .unwrap()
        .offsite
        .unwrap()
}

fn offsite_cli(args: &[&str]) -> (Option<i32>, String) {
    let args: Vec<&str> = ["offsite"].iter().chain(args).copied().collect();
    let (code, out, err) = support::run_cli(&args);
    (code, format!("{out}{err}"))
}

/// The newest manifest of each partition of `topic` the data dir's cluster has offsite.
fn manifests(o: &Offsite, data: &Path, topic: &str) -> BTreeMap<i32, Manifest> {
    let Ok(Some(cluster)) = replica_follower::log::identity::read_cluster_id(data) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for p in 0..2 {
        let dir = data.join(format!("{topic}-{p}"));
        let Ok(Some(id)) = replica_follower::log::identity::read_topic_id(&dir) else {
            continue;
        };
        let key = PartitionKey {
            cluster_id: cluster.clone(),
            topic: topic.to_string(),
            topic_id: Some(id),
            partition: p,
        };
        if let Some(m) = replica_follower::offsite::bucket::latest_manifest(o, &key).unwrap() {
            out.insert(p, m);
        }
    }
    out
}

/// The offset up to which the manifest holds closed segments without a gap from offset 0.
fn closed_from_zero(m: &Manifest) -> i64 {
    let mut covered = 0;
    for (base, s) in &m.segments {
        if *base > covered || !s.is_closed() {
            break;
        }
        covered = covered.max(s.next_offset);
    }
    covered
}

/// The end offset of what the manifest holds (closed or not), without a gap from 0.
fn held_from_zero(m: &Manifest) -> i64 {
    let mut covered = 0;
    for (base, s) in &m.segments {
        if *base > covered {
            break;
        }
        covered = covered.max(s.next_offset);
    }
    covered
}

/// What the sampler found: the violations, and the deepest first local segment per partition.
type Sampled = (Vec<String>, BTreeMap<i32, i64>);

/// Checks, every 100 ms, that each batch below the local log's first segment is offsite:
/// local retention deleted only what the bucket held whole.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Sampled>>,
}

impl Sampler {
    fn start(o: Arc<Offsite>, data: PathBuf, topic: &'static str) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut violations = Vec::new();
            let mut deepest: BTreeMap<i32, i64> = BTreeMap::new();
            while !s2.load(Ordering::SeqCst) {
                // The directory first: retention only raises its first base, the bucket only
                // grows, so reading them in this order never misses a held segment.
                let firsts: Vec<(i32, Option<i64>)> = (0..2)
                    .map(|p| (p, first_local_base(&data.join(format!("{topic}-{p}")))))
                    .collect();
                let ms = manifests(&o, &data, topic);
                for (p, first) in firsts {
                    let Some(first) = first.filter(|f| *f > 0) else {
                        continue;
                    };
                    let e = deepest.entry(p).or_default();
                    *e = (*e).max(first);
                    let covered = ms.get(&p).map_or(0, closed_from_zero);
                    if covered < first {
                        violations.push(format!(
                            "{topic}-{p}: the local log starts at segment {first}, the bucket holds closed segments only up to {covered}"
                        ));
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (violations, deepest)
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Sampled {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

fn produce_round(k: &mut Leader, topic: &str, seed: &mut u64) {
    for p in 0..2 {
        *seed += 1;
        k.produce(topic, p, 60, "none", *seed);
    }
}

/// Produces for `d`, a round at a time.
fn produce_for(k: &mut Leader, topic: &str, seed: &mut u64, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        produce_round(k, topic, seed);
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Every object decrypts, no record text is in plaintext, and no byte range of a segment
/// is in two objects.
fn assert_bucket_sound(s3: &S3Server, o: &Offsite) -> usize {
    let objects = s3.objects();
    assert!(!objects.is_empty(), "the bucket is empty");
    let mut ranges: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (name, bytes) in &objects {
        assert!(
            !bytes.windows(VALUE_TEXT.len()).any(|w| w == VALUE_TEXT),
            "object {name} holds record text in plaintext"
        );
        assert!(
            !bytes.windows(6).any(|w| w == b"key-1-" || w == b"key-2-"),
            "object {name} holds a record key in plaintext"
        );
        replica_follower::offsite::envelope::open(o.key.as_ref(), name, bytes)
            .unwrap_or_else(|e| panic!("object {name} does not open: {e}"));
        if let Some((dir, file)) = name.rsplit_once('/')
            && let Some(p) = replica_follower::offsite::manifest::parse_piece_name(file)
        {
            ranges
                .entry(dir.to_string())
                .or_default()
                .push((p.from, p.to));
        }
    }
    for (dir, mut rs) in ranges {
        rs.sort_unstable();
        for w in rs.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{dir}: bytes {:?} and {:?} were uploaded twice",
                w[0],
                w[1]
            );
        }
    }
    objects.len()
}

#[test]
fn offsite_copy_survives_faults_and_rebuilds_the_replica_byte_for_byte() {
    support::require_test_hooks();
    const TOPIC: &str = "offsite-orders";
    let mut k = kafka::start(KAFKA_4, 1, false);
    k.create_topic(TOPIC, 2);
    let kafka_dir = node_log_dir(&k);
    let s3 = S3Server::moto("rf-offsite");
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let key_file = work.path().join("offsite.key");
    write_key_file(&key_file, &KEY);
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let base = Config::new(&data, &k.bootstrap)
        .follow(TOPIC)
        .set("log.segment_bytes", 24_000)
        .set("log.retention_bytes", 60_000)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("fetch.max_wait_ms", 100)
        .set("metrics.listen", metrics.clone());
    let offsite = s3.config_toml(Some(&key_file), &work.path().join("creds"));
    let config = write_config(&base, &offsite, &work.path().join("main"));
    // The checks read the store past the proxy, which the test cuts.
    let direct = offsite.replace(&s3.endpoint, &s3.direct);
    let direct_config = write_config(&base, &direct, &work.path().join("direct"));
    let o = offsite_of(&direct_config);
    let mut seed = 0u64;

    let mut d = Daemon::start(&config);
    let sampler = Sampler::start(o.clone(), data.clone(), TOPIC);
    produce_for(&mut k, TOPIC, &mut seed, Duration::from_secs(6));
    wait_until(Duration::from_secs(30), "uploads begin", || {
        offsite_status(&data)["uploaded_objects"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });

    // 1. The store unreachable for 15 s while records keep coming: following goes on, the
    // lag shows, and uploads resume after.
    let end_before = support::log_end(&data, TOPIC, 0);
    s3.proxy.cut();
    let cut_at = Instant::now();
    produce_for(&mut k, TOPIC, &mut seed, Duration::from_secs(10));
    let during = offsite_status(&data);
    assert!(
        during["failing"].is_string(),
        "status does not say uploads fail: {during}"
    );
    assert!(
        during["pending_bytes"].as_u64().unwrap() > 0
            && during["oldest_pending_age_ms"].as_i64().unwrap() > 2_000,
        "status shows no offsite lag while the store is cut: {during}"
    );
    let scrape = support::http(&metrics, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert!(
        scrape.contains("replica_follower_offsite_failing 1"),
        "metrics do not say uploads fail:\n{scrape}"
    );
    assert!(
        scrape
            .lines()
            .any(|l| l.starts_with("replica_follower_offsite_pending_bytes ") && !l.ends_with(" 0")),
        "metrics show no pending bytes:\n{scrape}"
    );
    while cut_at.elapsed() < Duration::from_secs(15) {
        produce_round(&mut k, TOPIC, &mut seed);
    }
    assert!(
        support::log_end(&data, TOPIC, 0) > end_before + 500,
        "following stopped while the store was unreachable"
    );
    s3.proxy.restore();
    wait_until(Duration::from_secs(60), "uploads work again", || {
        let s = offsite_status(&data);
        s["failing"].is_null() && s["pending_segments"].as_u64().unwrap_or(9) <= 2
    });
    let log = d.log_text();
    let fail_lines = log.matches("offsite: uploads to").count();
    assert_eq!(
        fail_lines, 2,
        "one line when uploads start failing and one when they work again:\n{log}"
    );

    // 2. Killed -9 while an upload hangs in the store.
    s3.proxy.stall();
    let accepted = s3.proxy.accepted();
    produce_for(&mut k, TOPIC, &mut seed, Duration::from_secs(2));
    wait_until(Duration::from_secs(20), "an upload is under way", || {
        s3.proxy.accepted() > accepted
    });
    d.kill9();
    s3.proxy.restore();

    // 3. Killed -9 after a piece is uploaded and before a manifest names it.
    let mut d = Daemon::start_with_env(
        &config,
        &[
            ("RF_TEST_PAUSE_AT", "offsite-piece-uploaded"),
            ("RF_TEST_PAUSE_MS", "60000"),
        ],
    );
    produce_round(&mut k, TOPIC, &mut seed);
    wait_until(Duration::from_secs(30), "a piece is uploaded", || {
        d.log_text()
            .contains("test pause at offsite-piece-uploaded")
    });
    d.kill9();
    let mut d = Daemon::start(&config);
    produce_for(&mut k, TOPIC, &mut seed, Duration::from_secs(4));

    // Everything the leader has is offsite within max_delay_ms.
    let hws = high_watermarks(&mut k, TOPIC);
    wait_until(
        Duration::from_secs(60),
        "the bucket holds every record",
        || {
            let ms = manifests(&o, &data, TOPIC);
            (0..2).all(|p| {
                ms.get(&p)
                    .is_some_and(|m| held_from_zero(m) >= hws[p as usize])
            })
        },
    );
    let (violations, deepest) = sampler.finish();
    assert!(
        violations.is_empty(),
        "retention deleted segments the bucket did not hold: {violations:?}"
    );
    assert!(
        (0..2).all(|p| deepest.get(&p).is_some_and(|f| *f > 0)),
        "local retention never deleted a segment, so it was not tested: {deepest:?}"
    );
    assert!(d.stop().success());
    let objects = assert_bucket_sound(&s3, &o);

    // 4. The local disk is lost.
    std::fs::remove_dir_all(&data).unwrap();
    let without_key = offsite.replace(
        &format!("encryption_key_file = {:?}\n", key_file.to_str().unwrap()),
        "",
    );
    assert_ne!(without_key, offsite, "the key line was not found");
    let nokey_config = write_config(&base, &without_key, &work.path().join("nokey"));
    let (code, out) = offsite_cli(&[
        "restore",
        "--config",
        nokey_config.to_str().unwrap(),
        "--to",
        data.to_str().unwrap(),
    ]);
    assert_eq!(
        code,
        Some(2),
        "a restore without the key must be refused:\n{out}"
    );
    assert!(
        out.contains("offsite.encryption_key_file"),
        "the refusal does not name the key:\n{out}"
    );
    assert!(
        std::fs::read_dir(&data).map_or(true, |mut e| e
            .all(|e| { e.unwrap().file_name() == "meta.properties" })),
        "a refused restore wrote partitions"
    );
    let _ = std::fs::remove_dir_all(&data);
    let (code, out) = offsite_cli(&[
        "restore",
        "--config",
        config.to_str().unwrap(),
        "--to",
        data.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "offsite restore failed:\n{out}");
    for p in 0..2 {
        let tp = TopicPartition::new(TOPIC, p);
        assert_eq!(
            first_local_base(&data.join(tp.dir_name())),
            Some(0),
            "{tp}: the restore does not start at offset 0"
        );
        let compared = kafka::compare_with_kafka_dir(
            &kafka_dir.join(tp.dir_name()),
            &data,
            &tp,
            hws[p as usize],
        )
        .unwrap_or_else(|e| panic!("restored {tp} differs from Kafka's: {e}"));
        assert!(compared > 20, "{tp}: only {compared} batches compared");
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify fails on the restored data dir:\n{out}");
    // The archive of topic configs a restore into Kafka needs is back too.
    let configs = std::fs::read_to_string(data.join("topic-configs-checkpoint"))
        .unwrap_or_else(|e| panic!("no topic-configs-checkpoint after the restore ({e}):\n{out}"));
    assert!(
        configs.contains(TOPIC),
        "the restored topic configs lack {TOPIC}:\n{configs}"
    );

    // 5. The daemon resumes on it, and the copy matches the replica.
    let mut d = Daemon::start(&config);
    produce_round(&mut k, TOPIC, &mut seed);
    let hws = high_watermarks(&mut k, TOPIC);
    for p in 0..2 {
        let tp = TopicPartition::new(TOPIC, p);
        // Retention deletes the restored old segments again once the bucket is seen to hold
        // them: the comparison starts where the local log does.
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(e) = kafka::compare_with_kafka_dir_from(
            &kafka_dir.join(tp.dir_name()),
            &data,
            &tp,
            first_local_base(&data.join(tp.dir_name())).unwrap_or(0),
            hws[p as usize],
        ) {
            assert!(
                Instant::now() < deadline,
                "the daemon resumed on the restored data dir does not catch up: {e}\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    wait_until(Duration::from_secs(60), "the copy catches up again", || {
        let ms = manifests(&o, &data, TOPIC);
        (0..2).all(|p| {
            ms.get(&p)
                .is_some_and(|m| held_from_zero(m) >= hws[p as usize])
        })
    });
    let (code, out) = offsite_cli(&["verify", "--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(0), "offsite verify finds differences:\n{out}");
    assert!(d.stop().success());
    assert!(assert_bucket_sound(&s3, &o) > objects);

    // 6. s3s-fs, which checks signatures: the basic round trip.
    let s3s = S3Server::s3s_fs("rf-offsite-s3s");
    let topic2 = "offsite-s3s";
    k.create_topic(topic2, 2);
    let data2 = work.path().join("data2");
    let base2 = Config::new(&data2, &k.bootstrap)
        .follow(topic2)
        .set("log.segment_bytes", 24_000)
        .set("log.flush_interval_ms", 200)
        .set("fetch.max_wait_ms", 100);
    let offsite2 = s3s.config_toml(Some(&key_file), &work.path().join("creds2"));
    let config2 = write_config(&base2, &offsite2, &work.path().join("s3s"));
    let mut d2 = Daemon::start(&config2);
    for _ in 0..4 {
        produce_round(&mut k, topic2, &mut seed);
    }
    let hws2 = high_watermarks(&mut k, topic2);
    let o2 = offsite_of(&config2);
    wait_until(Duration::from_secs(60), "s3s-fs holds every record", || {
        let ms = manifests(&o2, &data2, topic2);
        (0..2).all(|p| {
            ms.get(&p)
                .is_some_and(|m| held_from_zero(m) >= hws2[p as usize])
        })
    });
    assert!(d2.stop().success());
    assert_bucket_sound(&s3s, &o2);
    std::fs::remove_dir_all(&data2).unwrap();
    let (code, out) = offsite_cli(&[
        "restore",
        "--config",
        config2.to_str().unwrap(),
        "--to",
        data2.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "offsite restore from s3s-fs failed:\n{out}");
    for p in 0..2 {
        let tp = TopicPartition::new(topic2, p);
        kafka::compare_with_kafka_dir(
            &kafka_dir.join(tp.dir_name()),
            &data2,
            &tp,
            hws2[p as usize],
        )
        .unwrap_or_else(|e| panic!("{tp} restored from s3s-fs differs from Kafka's: {e}"));
    }
    let (ok, out) = support::verify(&data2);
    assert!(
        ok,
        "verify fails on the data dir restored from s3s-fs:\n{out}"
    );
}
