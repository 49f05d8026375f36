//! The daemon as a systemd service: the notify protocol over a fake NOTIFY_SOCKET (READY=1,
//! STATUS=, WATCHDOG=1 while every thread makes progress, STOPPING=1, in that order; a
//! stalled fetcher stops the pings), and `status` showing the running daemon's live figures
//! (lag, state, the leader's high watermark), or saying it is not running.

use crate::support;
use crate::support::test_leader::TestLeader;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

const TOPIC: &str = "svc";

/// systemd's end of the notify socket: every message, in order.
struct Notify {
    sock: UnixDatagram,
    got: Vec<String>,
}

impl Notify {
    fn bind(dir: &Path) -> (Notify, String) {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_nonblocking(true).unwrap();
        (
            Notify {
                sock,
                got: Vec::new(),
            },
            path.to_str().unwrap().to_string(),
        )
    }

    /// Every KEY=value line received so far.
    fn read(&mut self) -> &[String] {
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.sock.recv(&mut buf) {
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            self.got.extend(msg.lines().map(str::to_string));
        }
        &self.got
    }

    fn count(&mut self, line: &str) -> usize {
        self.read().iter().filter(|l| *l == line).count()
    }

    fn position(&mut self, prefix: &str) -> Option<usize> {
        self.read().iter().position(|l| l.starts_with(prefix))
    }
}

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .set("checkpoint.interval_ms", 60000)
        .write(dir)
}

/// A daemon following a 20-record partition of the in-process leader, with systemd's
/// notify socket and `env`.
fn start_notified(dir: &Path, env: &[(&str, &str)]) -> (TestLeader, Notify, support::Daemon) {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 20, 5);
    let (notify, path) = Notify::bind(dir);
    let mut env = env.to_vec();
    env.push(("NOTIFY_SOCKET", &path));
    let d = support::Daemon::start_with_env(&config(dir, &dir.join("data"), &leader), &env);
    (leader, notify, d)
}

#[test]
fn notify_sends_ready_status_watchdog_and_stopping_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader, mut notify, mut d) = start_notified(dir.path(), &[("WATCHDOG_USEC", "1000000")]);
    support::wait_until(Duration::from_secs(10), "three watchdog pings", || {
        notify.count("WATCHDOG=1") >= 3
    });
    support::wait_until(
        Duration::from_secs(10),
        "a STATUS= with the partition",
        || {
            notify
                .read()
                .iter()
                .any(|l| l.starts_with("STATUS=1 partition(s): 1 caught up"))
        },
    );
    assert!(d.stop().success(), "{}", d.log_text());
    let ready = notify.position("READY=1").expect("READY=1");
    let status = notify.position("STATUS=1 partition").expect("STATUS=");
    let ping = notify.position("WATCHDOG=1").expect("WATCHDOG=1");
    let stopping = notify.position("STOPPING=1").expect("STOPPING=1");
    assert!(
        ready < status && ready < ping && ping < stopping,
        "{:?}",
        notify.got
    );
}

#[test]
fn a_stalled_fetcher_stops_the_watchdog_pings() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader, mut notify, mut d) = start_notified(
        dir.path(),
        &[
            ("WATCHDOG_USEC", "2000000"),
            ("RF_TEST_STALL_FETCHER_AFTER_MS", "1500"),
        ],
    );
    support::wait_until(Duration::from_secs(10), "the stall", || {
        d.log_text().contains("not pinging the systemd watchdog")
    });
    let pings = notify.count("WATCHDOG=1");
    assert!(pings >= 1, "pinged while healthy: {:?}", notify.got);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(notify.count("WATCHDOG=1"), pings, "no ping after the stall");
    let log = d.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("not pinging the systemd watchdog"))
        .unwrap_or_default();
    assert!(
        line.contains("no progress from fetcher-broker-1-0"),
        "{log}"
    );
    d.kill9();
}

/// The partition in `status --json` (null until its log exists).
fn partition(data: &Path) -> serde_json::Value {
    support::partition_status(data, TOPIC, 0).unwrap_or_default()
}

#[test]
fn status_shows_live_lag_and_state_while_running_and_says_when_not() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 50, 5);
    let mut d = support::Daemon::start(&config(dir.path(), &data, &leader));
    support::wait_until(Duration::from_secs(10), "caught up in status", || {
        let p = partition(&data);
        p["state"] == "caught up" && p["lag"] == 0
    });
    let st = support::status(&data);
    assert_eq!(st["running"], true);
    let p = partition(&data);
    assert_eq!(p["leader_high_watermark"], 50);
    // The checkpoint interval is a minute: the HW shown is the daemon's, not the 0 of a
    // checkpoint not yet written.
    assert_eq!(p["high_watermark"], 50);
    assert!(p["last_fetch_ms"].as_i64().is_some_and(|t| t > 0), "{p}");
    assert!(p["newest_timestamp_ms"].as_i64().is_some(), "{p}");
    // The leader gets ahead while the partition's fetches fail: a positive lag, the state
    // says why.
    leader.corrupt_next_fetches(0, usize::MAX);
    leader.append(0, 30, 5);
    let waited = Instant::now();
    loop {
        let p = partition(&data);
        if p["state"] == "backing off" && p["lag"] == 30 {
            assert!(
                p["error"].as_str().is_some_and(|e| e.contains("CRC")),
                "{p}"
            );
            assert_eq!(p["leader_high_watermark"], 80);
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(10), "{p}");
        std::thread::sleep(Duration::from_millis(100));
    }
    leader.corrupt_next_fetches(0, 0);
    leader.append(0, 30, 5);
    support::wait_until(Duration::from_secs(10), "caught up again", || {
        let p = partition(&data);
        p["state"] == "caught up" && p["lag"] == 0 && p["leader_high_watermark"] == 110
    });
    let text = std::process::Command::new(support::bin())
        .args(["status", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("running (pid"), "{text}");
    assert!(text.contains("caught up"), "{text}");
    assert!(d.stop().success());
    let st = support::status(&data);
    assert_eq!(st["running"], false, "{st}");
    assert!(partition(&data)["state"].is_null());
}

#[test]
fn status_with_the_config_lists_followed_partitions_without_a_log_and_missing_topics() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 10, 5);
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .with("partitions", vec![0, 1])
        .follow("ghost")
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    let status = || {
        let out = std::process::Command::new(support::bin())
            .args(["status", "--json", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    support::wait_until(
        Duration::from_secs(10),
        "the missing topic in status",
        || status()["missing_topics"] == serde_json::json!(["ghost"]),
    );
    let st = status();
    assert_eq!(
        st["not_yet_logged"],
        serde_json::json!([{"topic": TOPIC, "partition": 1}, {"topic": "ghost", "partition": null}]),
        "{st}"
    );
    let text = std::process::Command::new(support::bin())
        .args(["status", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    // The leader's topic has partition 0 only: partition 1 is said to be missing there.
    assert!(
        text.contains("svc-1: followed, not found on the leader (no local log)"),
        "{text}"
    );
    assert!(
        text.contains("topic ghost: not found on the leader"),
        "{text}"
    );
    assert!(d.stop().success());
}

#[test]
fn brokers_that_never_answer_do_not_stop_the_watchdog_pings() {
    // Three "brokers" that accept connections and say nothing: every request runs to its
    // deadline, one after another — slow, not stuck.
    let mut addrs = Vec::new();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for _ in 0..3 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        addrs.push(l.local_addr().unwrap().to_string());
        let h = held.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                h.lock().unwrap().push(c);
            }
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = support::Config::new(&dir.path().join("data"), &addrs.join(","))
        .follow(TOPIC)
        .set("fetch.request_timeout_ms", 2000)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .write(dir.path());
    let (mut notify, path) = Notify::bind(dir.path());
    let mut d = support::Daemon::start_with_env(
        &cfg,
        &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", "3000000")],
    );
    std::thread::sleep(Duration::from_secs(9));
    assert!(
        !d.log_text().contains("not pinging the systemd watchdog"),
        "{}",
        d.log_text()
    );
    let pings = notify.count("WATCHDOG=1");
    assert!(pings >= 4, "{pings} pings in 9 s: {:?}", notify.got);
    assert!(d.stop().success());
}
