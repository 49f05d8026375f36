//! A full disk: the data dir lives on a small tmpfs while the leader holds more than fits.
//! The daemon stays up, says "disk full" once, never leaves a torn batch in a segment (every
//! file read while it is stuck is whole batches), and resumes by itself once the tmpfs is
//! grown, ending byte-identical. Needs root for the mount; says so and skips otherwise.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use replica_follower::record::{BatchIter, SetEnd};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const TOPIC: &str = "full";

fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

/// Every segment of the partition is whole batches, nothing torn.
fn assert_whole(data: &Path) {
    let dir = data.join(TopicPartition::new(TOPIC, 0).dir_name());
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            let bytes = std::fs::read(&p).unwrap();
            let mut it = BatchIter::new(&bytes, usize::MAX);
            it.by_ref().for_each(drop);
            assert_eq!(it.end(), Some(&SetEnd::Complete), "{} is torn", p.display());
        }
    }
}

#[test]
fn a_full_disk_pauses_without_tearing_and_resumes_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    if !mount_tmpfs(&mnt, "128k") {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    let data = mnt.join("data");
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 6000, 100); // about 300 KB: more than twice the tmpfs
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("fetch.partition_max_bytes", 16384)
        .set("log.min_free_bytes", 0)
        .set("log.segment_bytes", 32768)
        .set("checkpoint.interval_ms", 200)
        .write(dir.path());
    // systemd's side of the notify protocol: the daemon's STATUS= lines arrive here.
    let sock_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    notify.set_nonblocking(true).unwrap();
    let mut statuses: Vec<String> = Vec::new();
    let read_statuses = |statuses: &mut Vec<String>| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = notify.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            statuses.extend(
                msg.lines()
                    .filter_map(|l| l.strip_prefix("STATUS="))
                    .map(str::to_string),
            );
        }
    };
    let mut d =
        support::Daemon::start_with_env(&cfg, &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())]);
    let waited = std::time::Instant::now();
    while !d.log_text().contains("disk full") {
        if waited.elapsed() > Duration::from_secs(20) {
            panic!("no disk full: {}", d.log_text());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Stuck: the daemon stays up, fetches nothing it could not write, and what is on disk
    // is whole batches, again and again.
    let fetches = leader.fetch_requests();
    for _ in 0..10 {
        assert!(d.is_running(), "{}", d.log_text());
        assert_whole(&data);
        std::thread::sleep(Duration::from_millis(200));
    }
    let sent = leader.fetch_requests() - fetches;
    assert!(sent <= 2, "{sent} fetches in 2 s while the disk was full");
    let st = support::status(&data);
    assert!(
        st["free_bytes"].as_u64().is_some_and(|f| f < 64 << 10),
        "status shows the free space: {st}"
    );
    read_statuses(&mut statuses);
    assert!(
        statuses.last().is_some_and(|s| s.contains("disk full")),
        "systemd's STATUS= says the disk is full: {statuses:?}"
    );
    let stuck_at = support::log_end(&data, TOPIC, 0);
    assert!(stuck_at > 0 && stuck_at < leader.log_end(0), "{stuck_at}");
    let full_lines = d
        .log_text()
        .lines()
        .filter(|l| l.contains("disk full"))
        .count();
    assert_eq!(
        full_lines, 1,
        "one line for the full disk, not one per retry"
    );

    // Space returns: the daemon resumes by itself and ends byte-identical.
    let grown = Command::new("mount")
        .args(["-o", "remount,size=16m"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    assert!(grown, "remount failed");
    support::wait_until(
        Duration::from_secs(30),
        "catch-up after the remount",
        || support::log_end(&data, TOPIC, 0) == leader.log_end(0),
    );
    assert!(d.log_text().contains("disk space is back"));
    read_statuses(&mut statuses);
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("following"),
        "STATUS= after the remount: {statuses:?}"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    assert_whole(&data);
    assert_eq!(
        support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0)),
        leader.log_bytes(0)
    );
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}
