//! Bounded descriptors: 2,000 partitions followed by a daemon started under `ulimit -n 256`
//! with the default `log.max_open_files` (256 − 128 = 128 segment files). Every partition
//! follows to the leader's end byte for byte, the start says once that files are opened on
//! demand, and nothing anywhere meets EMFILE. Records then appended to a scattered subset
//! still arrive (their files reopened), the serve listener reads a partition whose file is
//! closed, and a restart under the same limit resumes exactly where the first run stopped.
//! Then `serve` alone, under the same limit, feeds a chained follower under it too: no
//! EMFILE, no warning, no error to back off on, and every partition arrives byte for byte.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const TOPIC: &str = "wide";
const PARTITIONS: i32 = 2000;
const LIMIT: &str = "256";

fn start_limited(cfg: &Path) -> support::Daemon {
    support::Daemon::start_wrapped(
        cfg,
        &[],
        &[
            "sh",
            "-c",
            &format!("ulimit -n {LIMIT} && exec \"$@\""),
            "sh",
        ],
    )
}

/// Samples the daemon's open descriptors until stopped; returns (stop flag, peak).
fn watch_fds(pid: u32) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let (s, p) = (stop.clone(), peak.clone());
    std::thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                p.fetch_max(rd.count(), Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    (stop, peak)
}

/// Whether the daemon holds a descriptor on `tp`'s segment files now.
fn holds_files_of(pid: u32, tp: &TopicPartition) -> bool {
    let dir = tp.dir_name();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .any(|l| l.to_string_lossy().contains(&format!("/{dir}/")))
        })
        .unwrap_or(false)
}

fn all_identical(data: &Path, leader: &TestLeader, parts: impl IntoIterator<Item = i32>) -> bool {
    parts.into_iter().all(|p| {
        support::local_log_bytes(data, &TopicPartition::new(TOPIC, p)) == leader.log_bytes(p)
    })
}

fn assert_no_emfile(log: &str) {
    for bad in [
        "Too many open files",
        // How a reached limit is said ("the open-file limit (256, with 64 kept free) is
        // reached"); the start-up line on the listener's share names the limit too.
        "open-file limit (",
        "os error 24",
        "EMFILE",
    ] {
        assert!(!log.contains(bad), "`{bad}` in the log:\n{log}");
    }
}

#[test]
fn two_thousand_partitions_follow_under_256_descriptors_and_resume_after_a_restart() {
    let _heavy = support::heavy();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, PARTITIONS);
    for p in 0..PARTITIONS {
        leader.append(p, 4, 2);
    }
    let port = support::free_port();
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 300)
        .set("serve.listen", format!("127.0.0.1:{port}"))
        .write(dir.path());
    let mut d = start_limited(&cfg);
    let pid = d.pid();
    let (stop, peak) = watch_fds(pid);
    support::wait_until(Duration::from_secs(60), "every partition followed", || {
        all_identical(&data, &leader, 0..PARTITIONS)
    });
    let followed_at = started.elapsed();
    let log = d.log_text();
    assert!(
        log.contains(&format!(
            "{PARTITIONS} partitions, 128 descriptors allowed: segment files are opened on demand (log.max_open_files)"
        )),
        "{log}"
    );
    assert_eq!(log.matches("opened on demand").count(), 1, "said once");
    assert_no_emfile(&log);

    // More records for a scattered subset: their files were closed long ago.
    let subset: Vec<i32> = (0..PARTITIONS).filter(|p| p % 97 == 13).collect();
    assert!(
        subset
            .iter()
            .filter(|p| !holds_files_of(pid, &TopicPartition::new(TOPIC, **p)))
            .count()
            > subset.len() / 2,
        "most of the subset's files are closed before it appends again"
    );
    for &p in &subset {
        leader.append(p, 6, 3);
    }
    support::wait_until(Duration::from_secs(20), "the subset's new records", || {
        all_identical(&data, &leader, subset.iter().copied())
    });

    // A partition whose file is closed is served by the listener all the same.
    let idle = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .find(|tp| !holds_files_of(pid, tp))
        .expect("an idle partition's file is closed");
    let served = support::fetch_once(&format!("127.0.0.1:{port}"), &idle, 0).unwrap();
    assert_eq!(
        served.records,
        leader.log_bytes(idle.partition),
        "{idle} served"
    );

    assert!(d.stop().success(), "{}", d.log_text());
    stop.store(true, Ordering::SeqCst);
    let first_peak = peak.load(Ordering::SeqCst);
    assert_no_emfile(&d.log_text());
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");

    // A restart under the same limit loads every log and resumes exactly.
    let before = support::Daemon::logged_so_far(&cfg);
    let later: Vec<i32> = (0..PARTITIONS).filter(|p| p % 89 == 5).collect();
    for &p in &later {
        leader.append(p, 5, 1);
    }
    let mut d = start_limited(&cfg);
    let (stop, peak) = watch_fds(d.pid());
    support::wait_until(Duration::from_secs(30), "resumed after the restart", || {
        all_identical(&data, &leader, 0..PARTITIONS)
    });
    assert!(d.stop().success(), "{}", d.log_text());
    stop.store(true, Ordering::SeqCst);
    let second = d.log_text().get(before..).unwrap_or_default().to_string();
    assert_no_emfile(&second);
    assert!(
        second.contains("opened on demand"),
        "the loaded logs outnumber the budget too:\n{second}"
    );
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    let restart_peak = peak.load(Ordering::SeqCst);

    // The same data dir served by `serve` alone under the same limit, to a chained follower
    // under it too: a Fetch response reads at most its share of segment files, so neither
    // side meets the limit and every partition arrives without an error to back off on.
    let serve_port = support::free_port();
    let serve_log = dir.path().join("serve.log");
    let mut serve = std::process::Command::new("sh")
        .args(["-c", &format!("ulimit -n {LIMIT} && exec \"$@\""), "sh"])
        .arg(support::bin())
        .args(["serve", "--data-dir"])
        .arg(&data)
        .args(["--listen", &format!("127.0.0.1:{serve_port}")])
        .stderr(std::fs::File::create(&serve_log).unwrap())
        .spawn()
        .expect("start serve");
    support::wait_until(Duration::from_secs(20), "serve to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", serve_port)).is_ok()
    });
    let chain_dir = dir.path().join("chain");
    std::fs::create_dir_all(&chain_dir).unwrap();
    let chained = chain_dir.join("data");
    let cfg2 = support::Config::new(&chained, &format!("127.0.0.1:{serve_port}"))
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .write(&chain_dir);
    let mut c = start_limited(&cfg2);
    support::wait_until(Duration::from_secs(60), "every partition chained", || {
        all_identical(&chained, &leader, 0..PARTITIONS)
    });
    assert!(c.stop().success(), "{}", c.log_text());
    let _ = serve.kill();
    let _ = serve.wait();
    let served = std::fs::read_to_string(&serve_log).unwrap_or_default();
    assert_no_emfile(&served);
    assert!(!served.contains("WARN"), "serve warned:\n{served}");
    let chain_log = c.log_text();
    assert_no_emfile(&chain_log);
    assert!(
        !chain_log.contains("UNKNOWN_SERVER_ERROR"),
        "the chained follower was refused:\n{chain_log}"
    );
    eprintln!(
        "{PARTITIONS} partitions under ulimit -n {LIMIT}: followed in {followed_at:?}, peak descriptors {first_peak} (first run), {restart_peak} (after the restart), chained through serve, {:?} in all",
        started.elapsed()
    );
}
