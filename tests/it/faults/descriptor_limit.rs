//! Out of file descriptors: 1,000 partitions under an open-file limit of 256, with
//! `log.max_open_files` set far above it (so each log keeps its active segment open, as when
//! the budget is misconfigured; tests/it/faults/open_files_budget.rs covers the default). The
//! daemon creates only the logs the limit allows, leaves no half-made partition directory,
//! says so once with the limit and how to raise it, and once the limit is raised
//! (`prlimit --pid`) creates and follows every partition by itself.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const TOPIC: &str = "many";
const PARTITIONS: i32 = 1000;

/// Partition dirs in the data dir; each must be whole: a segment and both its indexes.
fn whole_partition_dirs(data: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(data).unwrap() {
        let p = e.unwrap().path();
        if !p.is_dir()
            || TopicPartition::parse_dir_name(&p.file_name().unwrap().to_string_lossy()).is_none()
        {
            continue;
        }
        for suffix in ["log", "index", "timeindex"] {
            let f = p.join(format!("{:020}.{suffix}", 0));
            assert!(
                f.exists(),
                "half-made partition dir: {} lacks {}",
                p.display(),
                f.display()
            );
        }
        n += 1;
    }
    n
}

#[test]
fn a_thousand_partitions_under_256_descriptors_wait_calmly_and_follow_once_raised() {
    let _heavy = support::heavy();
    if !Command::new("prlimit")
        .arg("--version")
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, PARTITIONS);
    for p in 0..PARTITIONS {
        leader.append(p, 3, 3);
    }
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("log.max_open_files", 100000)
        .set("checkpoint.interval_ms", 200)
        .write(dir.path());
    let mut d = support::Daemon::start_wrapped(&cfg, &[], &["prlimit", "--nofile=256:4096", "--"]);
    support::wait_until(Duration::from_secs(30), "the limit reported", || {
        d.log_text().contains("open-file limit (256")
    });
    // Stuck below the limit: some logs, every one whole, and a calm log.
    std::thread::sleep(Duration::from_secs(2));
    assert!(d.is_running(), "{}", d.log_text());
    let made = whole_partition_dirs(&data);
    assert!(
        made > 50 && made < 256,
        "{made} partition logs under a limit of 256"
    );
    let log = d.log_text();
    assert_eq!(
        log.matches("open-file limit").count(),
        1,
        "said once:\n{log}"
    );
    assert!(
        log.lines().count() < 60,
        "{} lines:\n{log}",
        log.lines().count()
    );
    assert!(!log.contains("Too many open files"), "{log}");
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");

    let raised = Command::new("prlimit")
        .args(["--pid", &d.pid().to_string(), "--nofile=4096:4096"])
        .status()
        .unwrap();
    assert!(raised.success());
    support::wait_until(Duration::from_secs(60), "every partition followed", || {
        whole_partition_dirs(&data) == PARTITIONS as usize
            && (0..PARTITIONS).all(|p| {
                support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p))
                    == leader.log_bytes(p)
            })
    });
    assert!(
        d.log_text()
            .contains("every waiting partition has its log now")
    );
    assert!(d.stop().success(), "{}", d.log_text());
    let log = d.log_text();
    // The stop checkpoints 1,000 logs in one line, not one a partition.
    assert!(
        log.lines().count() < 100,
        "{} lines:\n{log}",
        log.lines().count()
    );
}
