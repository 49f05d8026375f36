//! The offsite copy of the history a replica keeps beyond the leader's log, against moto's S3
//! server (encrypted): the daemon follows the in-process test leader with `[offsite]`, and
//! `offsite restore` into a fresh directory must rebuild, byte for byte, what the local data
//! dir holds, and `verify` must pass on it. Each test makes one kind of history:
//! - a truncation below the high watermark (an unclean election): the `diverged/` copy is in
//!   the bucket and restored, and the manifest follows the truncated log (no stale bytes);
//! - a re-created topic: the old history comes back as `<topic>-<p>.<old id>.archived/`;
//! - a range lost upstream: `lost-upstream-checkpoint` comes back;
//! - a segment larger than a piece, with batches that do not align to pieces and one batch
//!   larger than a piece: uploaded in several pieces, restored identical;
//! - local retention with the store cut: retention waits, then deletes once the store is back.
//!
//! The restored active segment's indexes are rebuilt, not uploaded: its `.log` is compared,
//! its indexes are not; `.snapshot` files are not uploaded at all.

use crate::support;
use crate::support::batches::BatchSpec;
use crate::support::s3::{
    S3Server, first_local_base, offsite_status, write_config, write_key_file,
};
use crate::support::test_leader::{CLUSTER_ID, TestLeader};
use crate::support::{Config, Daemon};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::offsite::manifest::{Manifest, PartitionKey};
use replica_follower::offsite::settings::Offsite;
use replica_follower::protocol::uuid::Uuid;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [
    0x21, 0x9c, 0x4e, 0x07, 0xd3, 0x58, 0xaa, 0x12, 0x6b, 0xf0, 0x3d, 0x81, 0x45, 0xc7, 0x2e, 0x99,
    0x0a, 0xb4, 0x63, 0x1f, 0xe8, 0x76, 0x5c, 0x2b, 0x90, 0x0d, 0xa1, 0x37, 0xfe, 0x48, 0x6c, 0x15,
];

/// A daemon's configuration with an `[offsite]` section for moto (encrypted), and the same
/// pointing past the proxy, for the test's own reads and restores.
struct Setup {
    s3: S3Server,
    dir: tempfile::TempDir,
    data: PathBuf,
    /// What the daemon runs with (through the proxy the tests cut).
    config: PathBuf,
    /// The same with the store's own address: restores and manifest reads.
    direct: PathBuf,
    offsite: Arc<Offsite>,
    restores: std::cell::Cell<u32>,
}

impl Setup {
    fn new(leader: &TestLeader, topic: &str, tune: impl FnOnce(Config) -> Config) -> Setup {
        let s3 = S3Server::moto("rf-history");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let key_file = dir.path().join("offsite.key");
        write_key_file(&key_file, &KEY);
        let base = Config::new(&data, &leader.addr())
            .follow(topic)
            .set("fetch.max_wait_ms", 100)
            .set("fetch.backoff_ms", 100)
            .set("checkpoint.interval_ms", 100)
            .set("log.flush_interval_ms", 100)
            .apply(tune);
        let offsite = s3.config_toml(Some(&key_file), &dir.path().join("creds"));
        let config = write_config(&base, &offsite, &dir.path().join("main"));
        let direct_text = offsite.replace(&s3.endpoint, &s3.direct);
        let direct = write_config(&base, &direct_text, &dir.path().join("direct"));
        let cfg = replica_follower::config::Config::load(&direct).unwrap();
        let offsite = replica_follower::resolve::resolve(&cfg)
            .unwrap()
            .offsite
            .unwrap();
        Setup {
            s3,
            dir,
            data,
            config,
            direct,
            offsite,
            restores: std::cell::Cell::new(0),
        }
    }

    /// `offsite restore` into a new directory: (exit code, output, the directory).
    fn restore(&self) -> (Option<i32>, String, PathBuf) {
        let n = self.restores.get() + 1;
        self.restores.set(n);
        let to = self.dir.path().join(format!("restored-{n}"));
        let (code, out, err) = support::run_cli(&[
            "offsite",
            "restore",
            "--config",
            self.direct.to_str().unwrap(),
            "--to",
            to.to_str().unwrap(),
        ]);
        (code, format!("{out}{err}"), to)
    }

    /// Restores until the result equals the local data dir (see [`compare`]), or panics
    /// after `timeout` with the last difference. Returns the restored directory.
    fn wait_restorable(&self, timeout: Duration, from_local_start: bool) -> PathBuf {
        let deadline = Instant::now() + timeout;
        loop {
            let (code, out, to) = self.restore();
            let why = if code == Some(0) {
                match compare(&self.data, &to, from_local_start) {
                    Ok(_) => return to,
                    Err(e) => e,
                }
            } else {
                format!("offsite restore exited {code:?}:\n{out}")
            };
            let _ = std::fs::remove_dir_all(&to);
            assert!(
                Instant::now() < deadline,
                "the restore never equals the local data dir: {why}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The stopped daemon's data dir, restored once more: equal, and `verify` passes on it.
    fn assert_restored_equal(&self, from_local_start: bool) -> PathBuf {
        let (code, out, to) = self.restore();
        assert_eq!(code, Some(0), "offsite restore failed:\n{out}");
        let files = compare(&self.data, &to, from_local_start)
            .unwrap_or_else(|e| panic!("the restore differs from the local data dir: {e}"));
        assert!(files > 3, "only {files} files compared");
        let (ok, out) = support::verify(&to);
        assert!(ok, "verify fails on the restored data dir:\n{out}");
        // A restore never writes into a directory that holds data: not into this one now,
        // nor into the daemon's own data dir; neither changes by a byte.
        for dir in [&to, &self.data] {
            let before = files_under(dir);
            let (code, out, err) = support::run_cli(&[
                "offsite",
                "restore",
                "--config",
                self.direct.to_str().unwrap(),
                "--to",
                dir.to_str().unwrap(),
            ]);
            assert_eq!(
                code,
                Some(1),
                "a restore into `{}` must be refused:\n{out}{err}",
                dir.display()
            );
            assert!(
                err.contains("is not empty"),
                "the refusal does not say why:\n{err}"
            );
            assert!(
                files_under(dir) == before,
                "a refused restore changed `{}`",
                dir.display()
            );
        }
        to
    }

    fn key(&self, topic: &str, topic_id: [u8; 16]) -> PartitionKey {
        PartitionKey {
            cluster_id: CLUSTER_ID.to_string(),
            topic: topic.to_string(),
            topic_id: Some(Uuid(topic_id)),
            partition: 0,
        }
    }

    fn manifest(&self, key: &PartitionKey) -> Manifest {
        replica_follower::offsite::bucket::latest_manifest(&self.offsite, key)
            .unwrap()
            .unwrap_or_else(|| panic!("no manifest of {}", key.describe()))
    }

    /// The names of every object in the bucket (without their bytes).
    fn object_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .offsite
            .store
            .list(&self.offsite.prefix, None)
            .unwrap()
            .objects
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        names.sort();
        names
    }
}

/// The partition directories of a data dir (live and archived), by name.
fn partition_dirs(data: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data)
        .unwrap_or_else(|e| panic!("list {}: {e}", data.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "repair-staging")
        .collect()
}

/// Every file under `dir`, recursively: relative path → bytes.
fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display())) {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The segment base a file in a partition dir belongs to (`00…0123.log` → 123), if any.
fn segment_base(name: &str) -> Option<(i64, &str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 20 || name.contains('/') {
        return None;
    }
    Some((stem.parse().ok()?, ext))
}

/// Compares every partition dir of `local` with `restored`: the same directories, the same
/// files (segments, indexes, leader-epoch-checkpoint, partition.metadata,
/// lost-upstream-checkpoint, diverged/, damaged/) with the same bytes; the active segment of
/// a live partition by its `.log` only (its indexes are rebuilt), `.snapshot` files not at
/// all. With `from_local_start`, restored segments below the local log's first one (local
/// retention deleted them) are allowed, and the leader epochs are not compared. Returns how many files were compared.
fn compare(local: &Path, restored: &Path, from_local_start: bool) -> Result<usize, String> {
    let dirs = partition_dirs(local);
    let got = partition_dirs(restored);
    if dirs != got {
        return Err(format!("partition dirs: local {dirs:?}, restored {got:?}"));
    }
    let mut compared = 0;
    for d in &dirs {
        let archived = d.ends_with(".archived");
        let mut want = files_under(&local.join(d));
        let mut have = files_under(&restored.join(d));
        let bases = |m: &BTreeMap<String, Vec<u8>>| -> Vec<i64> {
            m.keys()
                .filter_map(|n| segment_base(n))
                .filter(|(_, ext)| *ext == "log")
                .map(|(b, _)| b)
                .collect()
        };
        let local_bases = bases(&want);
        let active = if archived {
            None
        } else {
            local_bases.iter().max().copied()
        };
        let first = local_bases.iter().min().copied().unwrap_or(0);
        for m in [&mut want, &mut have] {
            m.retain(|name, _| {
                let Some((base, ext)) = segment_base(name) else {
                    // Retention moved the local epochs' start up; the bucket keeps the
                    // history's (the caller checks it).
                    return !(from_local_start && name == "leader-epoch-checkpoint");
                };
                ext != "snapshot"
                    && (ext == "log" || Some(base) != active)
                    && !(from_local_start && base < first)
            });
        }
        let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
        if names(&want) != names(&have) {
            return Err(format!(
                "{d}: local files {:?}, restored files {:?}",
                names(&want),
                names(&have)
            ));
        }
        for (name, bytes) in &want {
            let other = &have[name];
            if bytes != other {
                let at = bytes.iter().zip(other).position(|(a, b)| a != b);
                return Err(format!(
                    "{d}/{name}: {} bytes locally, {} restored, first difference at {at:?}",
                    bytes.len(),
                    other.len()
                ));
            }
            compared += 1;
        }
    }
    Ok(compared)
}

/// Follows until the replica ends at the leader's log end and its HW checkpoint says so.
fn follow_to_end(leader: &TestLeader, data: &Path, topic: &str) {
    let end = leader.log_end(0);
    support::wait_until(
        Duration::from_secs(60),
        &format!("{topic}-0 to reach {end}"),
        || support::log_end(data, topic, 0) == end,
    );
    support::wait_until(Duration::from_secs(10), "the HW checkpoint", || {
        support::read_checkpoint(&data.join("replication-offset-checkpoint"))
            .get(&(topic.to_string(), 0))
            == Some(&end)
    });
}

#[test]
fn a_truncation_below_the_high_watermark_is_offsite_with_its_diverged_copy() {
    truncation_below_the_high_watermark("oh-trunc", false);
}

/// The uploader sees the cut log before it goes on: the segment it cut is then the active
/// one, and the new epoch's batches are appended to it.
#[test]
fn a_truncated_segment_that_goes_on_is_offsite_without_stale_bytes() {
    truncation_below_the_high_watermark("oh-trunc-on", true);
}

/// 0..299 followed and offsite; an unclean election keeps 0..199, then 150 records at a new
/// epoch (with `settle`, only once the bucket follows the cut log).
fn truncation_below_the_high_watermark(topic: &'static str, settle: bool) {
    let leader = TestLeader::start(topic, 1);
    leader.append(0, 300, 25);
    let s = Setup::new(&leader, topic, |c| c.set("log.segment_bytes", 4096));
    let tp = TopicPartition::new(topic, 0);
    let mut d = Daemon::start(&s.config);
    follow_to_end(&leader, &s.data, topic);
    assert!(support::segment_count(&s.data, &tp) > 2);
    s.wait_restorable(Duration::from_secs(60), false);
    let key = s.key(topic, leader.topic_id());
    let before = s.manifest(&key);
    assert_eq!(
        before.segments.values().map(|e| e.next_offset).max(),
        Some(300),
        "the bucket holds 0..299 before the truncation"
    );

    // The unclean election: 200..299 go (the batch 200..224 holds 210), 150 others come at
    // a new epoch.
    leader.truncate_and_bump_epoch(0, 210);
    if settle {
        support::wait_until(
            Duration::from_secs(30),
            "the replica to cut its log",
            || support::local_log_bytes(&s.data, &tp) == leader.log_bytes(0),
        );
        s.wait_restorable(Duration::from_secs(60), false);
        let cut = s.manifest(&key);
        assert_eq!(
            cut.segments.values().map(|e| e.next_offset).max(),
            Some(200)
        );
    }
    leader.append(0, 150, 30);
    support::wait_until(
        Duration::from_secs(30),
        "the replica to take the new history",
        || support::local_log_bytes(&s.data, &tp) == leader.log_bytes(0),
    );
    let pdir = s.data.join(tp.dir_name());
    assert!(pdir.join("diverged/200-299.log").is_file());
    s.wait_restorable(Duration::from_secs(60), false);

    // The manifest follows the truncated log: each segment as long as the local one, ending
    // where it does; no segment beyond the local log.
    let after = s.manifest(&key);
    let local = support::segment_logs(&pdir);
    assert_eq!(
        after.segments.keys().copied().collect::<Vec<_>>(),
        local.keys().copied().collect::<Vec<_>>(),
        "the manifest's segments are the local ones"
    );
    for (base, e) in &after.segments {
        let len = std::fs::metadata(&local[base]).unwrap().len();
        assert_eq!(e.size, len, "segment {base}: size offsite and locally");
    }
    assert_eq!(
        after.segments.values().map(|e| e.next_offset).max(),
        Some(350)
    );
    assert!(
        after.files.contains_key("diverged/200-299.log"),
        "the manifest names the diverged copy: {:?}",
        after.files
    );
    let names = s.object_names();
    assert!(
        names
            .iter()
            .any(|n| n.contains("/files/diverged/200-299.log.")),
        "the diverged copy is in the bucket: {names:?}"
    );
    assert_eq!(after.epochs.len(), 2, "{:?}", after.epochs);
    assert_eq!(after.epochs[1].1, 200, "{:?}", after.epochs);

    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let restored = s.assert_restored_equal(false);
    assert!(
        support::local_log_bytes(&restored, &tp) == leader.log_bytes(0),
        "the restored log is the new leader's"
    );
    let kept = std::fs::read(restored.join(tp.dir_name()).join("diverged/200-299.log")).unwrap();
    assert!(!kept.is_empty());
}

#[test]
fn a_recreated_topics_archived_history_is_restored_beside_the_new_one() {
    const TOPIC: &str = "oh-recreated";
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 300, 25);
    let s = Setup::new(&leader, TOPIC, |c| c.set("log.segment_bytes", 4096));
    let tp = TopicPartition::new(TOPIC, 0);
    let mut d = Daemon::start(&s.config);
    follow_to_end(&leader, &s.data, TOPIC);
    s.wait_restorable(Duration::from_secs(60), false);
    let old_id = Uuid(leader.topic_id());
    let old_bytes = support::local_log_bytes(&s.data, &tp);

    leader.recreate_topic(1);
    leader.append(0, 120, 20);
    let archived = format!("{}.{old_id}.archived", tp.dir_name());
    support::wait_until(Duration::from_secs(30), "the archived history", || {
        s.data.join(&archived).is_dir()
    });
    follow_to_end(&leader, &s.data, TOPIC);
    let restored = s.wait_restorable(Duration::from_secs(60), false);
    assert_eq!(
        partition_dirs(&restored),
        BTreeSet::from([tp.dir_name(), archived.clone()])
    );
    let old = s.manifest(&s.key(TOPIC, old_id.0));
    assert!(
        old.archived,
        "the old history's manifest says it is archived"
    );
    let new = s.manifest(&s.key(TOPIC, leader.topic_id()));
    assert!(!new.archived);

    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let restored = s.assert_restored_equal(false);
    let old_log: Vec<u8> = support::segment_logs(&restored.join(&archived))
        .values()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(
        old_log == old_bytes,
        "the archived history holds the old log"
    );
    assert!(support::local_log_bytes(&restored, &tp) == leader.log_bytes(0));
}

#[test]
fn a_range_lost_upstream_is_restored_with_its_checkpoint() {
    const TOPIC: &str = "oh-lost";
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 300, 25);
    let s = Setup::new(&leader, TOPIC, |c| c.set("log.segment_bytes", 4096));
    let tp = TopicPartition::new(TOPIC, 0);
    let mut d = Daemon::start(&s.config);
    follow_to_end(&leader, &s.data, TOPIC);
    s.wait_restorable(Duration::from_secs(60), false);
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());

    // While the daemon is stopped the leader's log start moves past the replica's end.
    leader.append(0, 300, 25);
    leader.delete_records_before(0, 450);
    assert_eq!(leader.log_start(0), 450);
    let mut d = Daemon::start(&s.config);
    follow_to_end(&leader, &s.data, TOPIC);
    let lost = s.data.join(tp.dir_name()).join("lost-upstream-checkpoint");
    support::wait_until(Duration::from_secs(10), "lost-upstream-checkpoint", || {
        lost.is_file()
    });
    let restored = s.wait_restorable(Duration::from_secs(60), false);
    assert_eq!(
        std::fs::read(
            restored
                .join(tp.dir_name())
                .join("lost-upstream-checkpoint")
        )
        .unwrap(),
        std::fs::read(&lost).unwrap()
    );
    let m = s.manifest(&s.key(TOPIC, leader.topic_id()));
    assert_eq!(m.lost, vec![(300, 449)]);

    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let restored = s.assert_restored_equal(false);
    let st = support::partition_status(&restored, TOPIC, 0).unwrap();
    assert_eq!(
        st["lost_upstream"],
        serde_json::json!([{"first_offset": 300, "last_offset": 449}]),
        "{st}"
    );
    assert_eq!(st["log_start_offset"].as_i64(), Some(0), "{st}");
}

/// One batch of `records` records of `value_len` bytes each at `base`.
fn big_batch(base: i64, records: i32, value_len: usize) -> Vec<u8> {
    let mut spec = BatchSpec::new(base, 0);
    for i in 0..records {
        let offset = base + i64::from(i);
        let value: Vec<u8> = (0..value_len)
            .map(|j| (j as u64 * 31 + offset as u64) as u8)
            .collect();
        spec = spec.record(
            i,
            1_700_000_000_000 + offset,
            Some(format!("key-{offset}").as_bytes()),
            Some(&value),
        );
    }
    spec.build()
}

#[test]
fn segments_larger_than_a_piece_go_up_in_pieces_and_come_back_whole() {
    const TOPIC: &str = "oh-big";
    let _heavy = support::heavy();
    let piece_max = replica_follower::offsite::upload::PIECE_MAX;
    let leader = TestLeader::start(TOPIC, 1);
    // Segment 0: 20 batches of about 1 MB, none a divisor of 16 MiB (a piece ends at the
    // last whole batch below it). Segment 1: one batch of 18 MB, then 5 more of about 1 MB.
    let mut next = 0i64;
    for i in 0..20 {
        let b = big_batch(next, 3, 333_331 + 1_013 * i);
        next += 3;
        leader.append_batch(0, b);
    }
    let huge = big_batch(next, 18, 1_000_003);
    assert!(huge.len() as u64 > piece_max);
    next += 18;
    leader.append_batch(0, huge);
    for i in 0..5 {
        let b = big_batch(next, 2, 517_001 + 7 * i);
        next += 2;
        leader.append_batch(0, b);
    }
    let s = Setup::new(&leader, TOPIC, |c| {
        c.set("log.segment_bytes", 32 << 20)
            .set("fetch.partition_max_bytes", 1 << 20)
    });
    let tp = TopicPartition::new(TOPIC, 0);
    let mut d = Daemon::start(&s.config);
    follow_to_end(&leader, &s.data, TOPIC);
    let pdir = s.data.join(tp.dir_name());
    let local = support::segment_logs(&pdir);
    assert_eq!(local.len(), 2, "two segments: {local:?}");
    for p in local.values() {
        assert!(
            std::fs::metadata(p).unwrap().len() > piece_max,
            "{}",
            p.display()
        );
    }
    s.wait_restorable(Duration::from_secs(120), false);
    let m = s.manifest(&s.key(TOPIC, leader.topic_id()));
    for (base, e) in &m.segments {
        assert!(e.pieces.len() >= 2, "segment {base}: {:?}", e.pieces);
        assert!(
            e.pieces.iter().all(|p| p.to - p.from <= piece_max)
                || e.pieces
                    .iter()
                    .filter(|p| p.to - p.from > piece_max)
                    .count()
                    == 1,
            "segment {base}: {:?}",
            e.pieces
        );
    }
    let huge_piece = m
        .segments
        .values()
        .flat_map(|e| &e.pieces)
        .filter(|p| p.to - p.from > piece_max)
        .count();
    assert_eq!(huge_piece, 1, "the 18 MB batch is one piece of its own");

    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let restored = s.assert_restored_equal(false);
    assert!(support::local_log_bytes(&restored, &tp) == leader.log_bytes(0));
}

#[test]
fn retention_waits_while_the_store_is_cut_and_deletes_once_it_is_back() {
    const TOPIC: &str = "oh-retention";
    let leader = TestLeader::start(TOPIC, 1);
    let s = Setup::new(&leader, TOPIC, |c| {
        c.set("log.segment_bytes", 4096)
            .set("log.retention_bytes", 8192)
    });
    let tp = TopicPartition::new(TOPIC, 0);
    let pdir = s.data.join(tp.dir_name());
    s.s3.proxy.cut();
    let mut d = Daemon::start(&s.config);
    leader.append(0, 600, 25);
    follow_to_end(&leader, &s.data, TOPIC);
    let segments = support::segment_logs(&pdir);
    assert!(segments.len() > 4, "{segments:?}");
    // Several retention passes (one per checkpoint interval) with the store unreachable.
    support::wait_until(Duration::from_secs(20), "uploads to fail", || {
        offsite_status(&s.data)["failing"].is_string()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        support::segment_logs(&pdir),
        segments,
        "retention deleted segments the bucket does not hold"
    );
    assert_eq!(first_local_base(&pdir), Some(0));

    s.s3.proxy.restore();
    support::wait_until(
        Duration::from_secs(60),
        "retention to delete once the bucket holds the segments",
        || {
            let now = support::segment_logs(&pdir);
            let bytes: u64 = now
                .values()
                .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
                .sum();
            now.len() < segments.len() && bytes <= 8192 + 4096
        },
    );
    assert!(first_local_base(&pdir) > Some(0));
    let restored = s.wait_restorable(Duration::from_secs(60), true);
    // The bucket holds what retention deleted: the restore starts at offset 0.
    let tp_dir = restored.join(tp.dir_name());
    assert_eq!(first_local_base(&tp_dir), Some(0));
    assert!(support::local_log_bytes(&restored, &tp) == leader.log_bytes(0));
    assert_eq!(
        std::fs::read_to_string(tp_dir.join("leader-epoch-checkpoint")).unwrap(),
        "0\n1\n0 0\n",
        "the restored epochs start where the history does"
    );

    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let restored = s.assert_restored_equal(true);
    assert!(support::local_log_bytes(&restored, &tp) == leader.log_bytes(0));
}
