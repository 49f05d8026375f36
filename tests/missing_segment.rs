//! The loader keeps every segment: a segment (its .log, .index and .timeindex) deleted from
//! the middle of a stopped replica leaves a gap. Start-up keeps every later segment file
//! (same inode), deletes nothing, and the daemon follows on after the last one.

mod support;

use replica_follower::checkpoint::TopicPartition;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{Daemon, Leader};

const TOPIC: &str = "gap";

/// The `.log` files of a partition dir by base offset.
fn segments(dir: &Path) -> BTreeMap<i64, PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let base = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            (base, p)
        })
        .collect()
}

/// Every file of the partition dir whose name starts with a base offset above `base`.
fn files_after(dir: &Path, base: i64) -> BTreeMap<PathBuf, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.split('.').next())
                .filter(|s| s.len() == 20)
                .and_then(|s| s.parse::<i64>().ok())
                .is_some_and(|b| b > base)
        })
        .map(|p| {
            let ino = support::inode(&p);
            (p, ino)
        })
        .collect()
}

#[test]
fn a_segment_deleted_from_the_middle_leaves_a_gap_and_every_later_segment_stays() {
    let mut leader = Leader::start("tansu", 1);
    leader.create_topic(TOPIC, 1);
    let tp = TopicPartition::new(TOPIC, 0);
    let mut end = 0;
    for i in 0..4 {
        end = leader.produce(TOPIC, 0, 150, "none", i).1 + 1;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::write_config(
        dir.path(),
        &data,
        &leader.bootstrap,
        &format!("[[follow]]\ntopic = \"{TOPIC}\"\n"),
        "[fetch]\nmax_wait_ms = 100\nbackoff_ms = 200\n[checkpoint]\ninterval_ms = 200\n[log]\nsegment_bytes = 4096\nflush_interval_ms = 100\n",
    );
    let mut d = Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(30), "catch-up", || {
        support::log_end(&data, TOPIC, 0) == end
    });
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);

    let pdir = data.join(tp.dir_name());
    let segs = segments(&pdir);
    assert!(
        segs.len() >= 5,
        "segment_bytes 4096 should roll many segments: {segs:?}"
    );
    let bases: Vec<i64> = segs.keys().copied().collect();
    let gone = bases[bases.len() / 2];
    let next = bases[bases.len() / 2 + 1];
    let mut old_bytes = Vec::new();
    let mut gone_bytes = Vec::new();
    for (&base, p) in &segs {
        let b = std::fs::read(p).unwrap();
        if base == gone {
            gone_bytes = b;
        } else {
            old_bytes.extend_from_slice(&b);
        }
    }
    assert!(!gone_bytes.is_empty());
    let stem = format!("{gone:020}");
    for ext in ["log", "index", "timeindex", "txnindex"] {
        let p = pdir.join(format!("{stem}.{ext}"));
        if p.exists() || ext != "txnindex" {
            std::fs::remove_file(&p).unwrap_or_else(|e| panic!("remove {}: {e}", p.display()));
        }
    }
    let later = files_after(&pdir, gone);
    assert!(
        later
            .keys()
            .any(|p| p.extension().is_some_and(|x| x == "index")),
        "later index files: {later:?}"
    );
    let later_logs: BTreeMap<PathBuf, Vec<u8>> = later
        .keys()
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();

    // Restart on the replica with a gap, then produce more.
    let from = d.log_text().len();
    let mut d = Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(15),
        "the restarted daemon's status",
        || support::log_end(&data, TOPIC, 0) == end,
    );
    let new_end = leader.produce(TOPIC, 0, 200, "lz4", 9).1 + 1;
    support::wait_until(
        Duration::from_secs(30),
        &format!("catch-up to {new_end} after the restart"),
        || support::log_end(&data, TOPIC, 0) == new_end,
    );
    assert!(
        d.is_running(),
        "the daemon keeps running:\n{}",
        d.log_text()
    );
    let log = d.log_text().get(from..).unwrap_or_default().to_string();

    for (p, ino) in &later {
        assert!(
            p.exists(),
            "{} was deleted at start-up:\n{log}",
            p.display()
        );
        assert_eq!(
            support::inode(p),
            *ino,
            "{} was replaced at start-up:\n{log}",
            p.display()
        );
    }
    for (p, bytes) in &later_logs {
        let now = std::fs::read(p).unwrap();
        assert!(
            now.starts_with(bytes),
            "{}: its batches were rewritten",
            p.display()
        );
    }
    let segs_now = segments(&pdir);
    assert!(
        !segs_now.contains_key(&gone),
        "nothing re-created the deleted segment"
    );
    assert!(segs_now.contains_key(&next));
    for base in bases.iter().filter(|&&b| b != gone) {
        assert!(
            segs_now.contains_key(base),
            "segment {base} is gone:\n{log}"
        );
    }

    let local = support::local_log_bytes(&data, &tp);
    let fresh = support::leader_bytes(&leader.bootstrap, &tp, end);
    assert!(!fresh.is_empty());
    assert_eq!(
        local.len(),
        old_bytes.len() + fresh.len(),
        "old bytes minus the deleted segment, then the new batches"
    );
    assert!(local.starts_with(&old_bytes), "the old bytes are kept");
    assert!(
        local[old_bytes.len()..] == fresh[..],
        "then exactly the leader's new batches"
    );
    let st = support::partition_status(&data, TOPIC, 0).unwrap();
    assert_eq!(st["log_start_offset"].as_i64(), Some(0), "{st}");

    let (ok, out) = support::verify(&data);
    assert!(ok, "verify while running (gaps are allowed):\n{out}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after stop:\n{out}");
}
