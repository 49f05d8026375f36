//! SIGHUP reloads the configuration and never ends the daemon: a partition added to
//! `follow` replicates, a removed one stops (its data stays), a config that no longer parses
//! is refused naming the key and line while the running set goes on, and systemd hears
//! RELOADING=1 then READY=1.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

const TOPIC: &str = "hup";

fn write(dir: &Path, data: &Path, leader: &TestLeader, partitions: &[i32]) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .with("partitions", partitions.to_vec())
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .write(dir)
}

fn caught_up(data: &Path, leader: &TestLeader, p: i32) -> bool {
    support::local_log_bytes(data, &TopicPartition::new(TOPIC, p)) == leader.log_bytes(p)
}

fn hup(d: &support::Daemon) {
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &d.pid().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn sighup_adds_and_removes_partitions_and_refuses_a_broken_config() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 20, 5);
    leader.append(1, 20, 5);
    let sock_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&sock_path).unwrap();
    notify.set_nonblocking(true).unwrap();
    let cfg = write(dir.path(), &data, &leader, &[0]);
    let mut d =
        support::Daemon::start_with_env(&cfg, &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())]);
    support::wait_until(Duration::from_secs(10), "partition 0", || {
        caught_up(&data, &leader, 0)
    });
    assert!(!data.join(format!("{TOPIC}-1")).exists());

    // Follow 1 instead of 0.
    write(dir.path(), &data, &leader, &[1]);
    hup(&d);
    support::wait_until(
        Duration::from_secs(10),
        "partition 1 after the reload",
        || caught_up(&data, &leader, 1),
    );
    support::wait_until(Duration::from_secs(10), "partition 0 stopped", || {
        d.log_text().contains("hup-0: no longer in `follow`")
    });
    let kept = support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0));
    leader.append(0, 20, 5);
    leader.append(1, 20, 5);
    support::wait_until(Duration::from_secs(10), "partition 1 goes on", || {
        caught_up(&data, &leader, 1)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        support::local_log_bytes(&data, &TopicPartition::new(TOPIC, 0)),
        kept,
        "a removed partition is not fetched, and its data stays"
    );
    assert!(
        support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"))
            .contains_key(&(TOPIC.to_string(), 0)),
        "its checkpoint entries stay"
    );
    // `status` shows it stopped, with its log's figures, while the daemon runs.
    support::wait_until(
        Duration::from_secs(5),
        "status of the removed partition",
        || support::partition_status(&data, TOPIC, 0).is_some_and(|p| p["state"] == "stopped"),
    );
    let p0 = support::partition_status(&data, TOPIC, 0).unwrap();
    let end0 = support::log_end(&data, TOPIC, 0);
    assert_eq!(p0["high_watermark"], end0, "{p0}");
    assert!(p0["lag"].is_null(), "a stopped partition has no lag: {p0}");
    assert!(
        p0["error"]
            .as_str()
            .unwrap_or("")
            .contains("not in `follow`"),
        "{p0}"
    );

    // A config that no longer parses: refused, naming the key and line; 1 still follows.
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("backoff_ms = 200", "backoff_ms = \"soon\""),
    )
    .unwrap();
    hup(&d);
    support::wait_until(Duration::from_secs(10), "the refusal", || {
        d.log_text()
            .contains("refused, the running configuration stays")
    });
    let line = d
        .log_text()
        .lines()
        .find(|l| l.contains("refused"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("backoff_ms") && line.contains("line"),
        "{line}"
    );
    leader.append(1, 20, 5);
    support::wait_until(
        Duration::from_secs(10),
        "partition 1 after the refusal",
        || caught_up(&data, &leader, 1),
    );
    assert!(d.is_running(), "SIGHUP never ends the daemon");

    let mut buf = [0u8; 4096];
    let mut lines = Vec::new();
    while let Ok(n) = notify.recv(&mut buf) {
        lines.extend(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .filter(|l| !l.starts_with("STATUS=") && !l.starts_with("WATCHDOG="))
                .map(str::to_string)
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        lines,
        [
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "RELOADING=1",
            "READY=1"
        ],
        "notify messages"
    );
    assert!(d.stop().success(), "{}", d.log_text());
}
