//! A segment (its .log, .index and .timeindex) deleted from the middle of a stopped replica
//! leaves a gap, which the loader keeps. Start-up asks the leader about it before fetching:
//! the leader still holds those offsets, so the daemon re-fetches them into a segment of
//! their own (logged with the partition and range), keeps every later segment file (same
//! inode), deletes nothing, and follows on after the last one: byte-identical to the leader.
//! A leader that does not answer makes the check say so once and be skipped within the
//! request timeout; the daemon starts fetching all the same.

use crate::support;
use crate::support::test_leader::TestLeader;
use crate::support::{Daemon, Leader};
use replica_follower::checkpoint::TopicPartition;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use std::time::Instant;

const TOPIC: &str = "gap";

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
fn a_segment_deleted_from_the_middle_is_refilled_at_start_up_and_every_later_segment_stays() {
    let mut leader = Leader::start("tansu", 1);
    let tp = TopicPartition::new(TOPIC, 0);
    let (_dir, data, cfg, end) = support::stopped_replica_of(&mut leader, TOPIC, 4);
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);

    let pdir = data.join(tp.dir_name());
    let segs = support::segment_logs(&pdir);
    assert!(
        segs.len() >= 5,
        "segment_bytes 4096 should roll many segments: {segs:?}"
    );
    let bases: Vec<i64> = segs.keys().copied().collect();
    let gone = bases[bases.len() / 2];
    let next = bases[bases.len() / 2 + 1];
    let old_bytes = support::local_log_bytes(&data, &tp);
    let gone_bytes = std::fs::read(&segs[&gone]).unwrap();
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
    let from = Daemon::logged_so_far(&cfg);
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
    let segs_now = support::segment_logs(&pdir);
    for base in &bases {
        assert!(
            segs_now.contains_key(base),
            "segment {base} is missing:\n{log}"
        );
    }
    assert_eq!(
        std::fs::read(&segs_now[&gone]).unwrap(),
        gone_bytes,
        "the hole is filled with exactly the deleted segment's batches:\n{log}"
    );
    assert!(
        log.contains(&format!(
            "WARN [main] {TOPIC}-0: offsets {gone}..{} are missing",
            next - 1
        )) && log.contains(&format!("{TOPIC}-0: filled from the leader: new segment")),
        "the refill is logged with partition and range:\n{log}"
    );

    let local = support::local_log_bytes(&data, &tp);
    let fresh = support::leader_bytes(&leader.bootstrap, &tp, end);
    assert!(!fresh.is_empty());
    assert!(local.starts_with(&old_bytes), "the old bytes are kept");
    assert!(
        local[old_bytes.len()..] == fresh[..],
        "then exactly the leader's new batches"
    );
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    let st = support::partition_status(&data, TOPIC, 0).unwrap();
    assert_eq!(st["log_start_offset"].as_i64(), Some(0), "{st}");

    let (ok, out) = support::verify(&data);
    assert!(ok, "verify while running (gaps are allowed):\n{out}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after stop:\n{out}");
}

#[test]
fn a_leader_that_does_not_answer_skips_the_hole_check_once_and_the_daemon_goes_on() {
    const HUNG: &str = "hung";
    let leader = TestLeader::start(HUNG, 1);
    leader.append(0, 300, 10);
    let (_dir, data, cfg) = support::follow_until(
        &leader.addr(),
        HUNG,
        |c| {
            c.set("fetch.max_wait_ms", 100)
                .set("fetch.backoff_ms", 200)
                .set("fetch.request_timeout_ms", 1000)
                .set("log.segment_bytes", 2048)
        },
        300,
    );
    let pdir = data.join(format!("{HUNG}-0"));
    let bases: Vec<i64> = support::segment_logs(&pdir).keys().copied().collect();
    let gone = bases[bases.len() / 2];
    for ext in ["log", "index", "timeindex"] {
        std::fs::remove_file(pdir.join(format!("{gone:020}.{ext}"))).unwrap();
    }

    // Metadata requests are read and never answered: the broker accepts, then hangs.
    leader.silence_api(Some(3));
    let from = Daemon::logged_so_far(&cfg);
    let started = Instant::now();
    let mut d = Daemon::start(&cfg);
    let log = || d_log(&cfg, from);
    support::wait_until(
        Duration::from_secs(15),
        "the daemon to start following",
        || log().contains("following 1 topic(s)"),
    );
    let took = started.elapsed();
    let text = log();
    assert!(
        took < Duration::from_secs(8),
        "start-up took {took:?}; each request is bounded by the 1 s timeout:\n{text}"
    );
    assert_eq!(
        text.matches("start-up hole check skipped").count(),
        1,
        "said once:\n{text}"
    );
    leader.silence_api(None);
    leader.append(0, 50, 10);
    support::wait_until(Duration::from_secs(30), "fetching after the hang", || {
        support::log_end(&data, HUNG, 0) == 350
    });
    assert!(d.is_running());
    assert!(
        !support::segment_logs(&pdir).contains_key(&gone),
        "the hole check runs at start-up only"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", log());
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}

/// What the daemons run with `config` logged from byte `from` on.
fn d_log(config: &Path, from: usize) -> String {
    std::fs::read_to_string(Daemon::log_path_for(config))
        .unwrap_or_default()
        .get(from..)
        .unwrap_or_default()
        .to_string()
}
