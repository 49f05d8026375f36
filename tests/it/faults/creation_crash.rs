//! Crash safety of creating many logs in one round: a daemon following 2,000 new partitions
//! is killed with SIGKILL while it makes their directories, twice. After each kill the data
//! dir holds only whole partition directories or `.creating` leftovers, and no checkpoint
//! file names a partition whose directory is not there whole. The next start removes the
//! leftovers, and in the end every partition follows to the leader's end byte for byte.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::Path;
use std::time::{Duration, Instant};

const TOPIC: &str = "many";
const PARTITIONS: i32 = 2000;

/// (whole partition directories, `.creating` leftovers) in `data`; panics on anything else
/// that looks like a partition directory.
fn census(data: &Path) -> (Vec<String>, Vec<String>) {
    let (mut whole, mut creating) = (Vec::new(), Vec::new());
    let Ok(rd) = std::fs::read_dir(data) else {
        return (whole, creating);
    };
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.path().is_dir() {
            continue;
        }
        if name.starts_with('.') && name.ends_with(".creating") {
            creating.push(name);
        } else if TopicPartition::parse_dir_name(&name).is_some() {
            let files: Vec<String> = std::fs::read_dir(e.path())
                .unwrap()
                .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            for ext in [".log", ".index", ".timeindex"] {
                assert!(
                    files.iter().any(|f| f.ends_with(ext)),
                    "{name} is not whole: {files:?}"
                );
            }
            whole.push(name);
        }
    }
    (whole, creating)
}

/// What the daemons run with `cfg` logged from byte `from` on.
fn logged_from(cfg: &Path, from: usize) -> String {
    let text = std::fs::read_to_string(support::Daemon::log_path_for(cfg)).unwrap_or_default();
    text.get(from..).unwrap_or_default().to_string()
}

/// Every partition a checkpoint file names has its directory, whole.
fn assert_checkpoints_name_only_whole_dirs(data: &Path, whole: &[String]) {
    for name in [
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
    ] {
        if !data.join(name).exists() {
            continue;
        }
        for (topic, partition) in support::read_checkpoint(&data.join(name)).keys() {
            let dir = TopicPartition::new(topic, *partition as i32).dir_name();
            assert!(
                whole.contains(&dir),
                "{name} names {dir}, which is not a whole directory"
            );
        }
    }
}

/// Starts the daemon and kills it with SIGKILL as soon as `now(data)` passes `seen`.
/// Returns (whole, leftovers) after it.
fn kill_when(
    cfg: &Path,
    data: &Path,
    seen: usize,
    now: impl Fn(&Path) -> usize,
) -> (Vec<String>, Vec<String>) {
    let mut d = support::Daemon::start(cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    while now(data) <= seen {
        assert!(Instant::now() < deadline, "no new log: {}", d.log_text());
        std::thread::yield_now();
    }
    d.kill9();
    let (whole, creating) = census(data);
    assert_checkpoints_name_only_whole_dirs(data, &whole);
    (whole, creating)
}

/// Directories of partitions, whole or being made.
fn any_dirs(data: &Path) -> usize {
    std::fs::read_dir(data).map_or(0, |rd| {
        rd.filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with(TOPIC) || n.ends_with(".creating")
            })
            .count()
    })
}

/// Partition directories in place.
fn placed_dirs(data: &Path) -> usize {
    std::fs::read_dir(data).map_or(0, |rd| {
        rd.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(TOPIC))
            .count()
    })
}

#[test]
fn sigkill_while_two_thousand_logs_are_made_leaves_whole_dirs_or_leftovers_and_all_follow() {
    let _heavy = support::heavy();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, PARTITIONS);
    for p in 0..PARTITIONS {
        leader.append(p, 3, 2);
    }
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 100)
        .write(dir.path());
    // Killed while the directories are made, then while they are renamed into place.
    let (whole1, creating1) = kill_when(&cfg, &data, 0, any_dirs);
    let before = support::Daemon::logged_so_far(&cfg);
    let (whole2, creating2) = kill_when(&cfg, &data, whole1.len(), placed_dirs);
    let second = logged_from(&cfg, before);
    if !creating1.is_empty() {
        assert!(
            second.contains("left half-made by a crash")
                && second.matches("left half-made").count() == 1,
            "the first kill's leftovers are removed, said in one line:\n{second}"
        );
    }

    let before = support::Daemon::logged_so_far(&cfg);
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(90), "every partition followed", || {
        (0..PARTITIONS).all(|p| {
            support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p)) == leader.log_bytes(p)
        })
    });
    // The final checkpoint fsyncs all 2,000 logs: allowed what the systemd units allow
    // (TimeoutStopSec=60) before they kill the daemon.
    let stopping = Instant::now();
    assert!(
        d.stop_within(Duration::from_secs(60)).success(),
        "{}",
        d.log_text()
    );
    let stopped_in = stopping.elapsed();
    let (whole, creating) = census(&data);
    assert_eq!(whole.len(), PARTITIONS as usize);
    assert!(creating.is_empty(), "{creating:?}");
    let last = logged_from(&cfg, before);
    for bad in ["ERROR", "panicked"] {
        assert!(!last.contains(bad), "`{bad}` after the restart:\n{last}");
    }
    // After the clean stop every figure is the leader's end (no status call per partition:
    // 2,000 of them are slow).
    for name in [
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
    ] {
        let named = support::read_checkpoint(&data.join(name));
        assert_eq!(named.len(), PARTITIONS as usize, "{name}");
        for ((_, p), offset) in named {
            assert_eq!(offset, leader.log_end(p as i32), "{name}: {TOPIC}-{p}");
        }
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    eprintln!(
        "killed with {} whole dirs and {} leftovers, then {} and {}; all {PARTITIONS} followed in {:?}, stopped in {stopped_in:?}",
        whole1.len(),
        creating1.len(),
        whole2.len(),
        creating2.len(),
        started.elapsed()
    );
}
