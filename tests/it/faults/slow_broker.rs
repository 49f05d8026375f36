//! A broker that announces a large response frame and then sends one byte every 100 ms. One
//! deadline covers the whole response (`fetch.request_timeout_ms`), so the fetch fails within
//! it, logged with the broker and the API; the receive buffer grows only with the bytes that
//! arrive, so the daemon's memory stays small; the partition backs off while the other
//! fetcher's partition goes on; once the broker behaves, the replica ends byte-identical.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::time::{Duration, Instant};

const TOPIC: &str = "slow";

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_dripping_broker_times_out_within_the_request_deadline_with_bounded_memory() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 50, 10);
    leader.append(1, 50, 10);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Two fetchers for the one broker: partitions 0 and 1 land on different ones.
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 300)
        .set("fetch.fetchers_per_broker", 2)
        .set("fetch.request_timeout_ms", 1500)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    for p in 0..2 {
        support::wait_until(Duration::from_secs(20), "catch-up", || {
            support::log_end(&data, TOPIC, p) == 50
        });
    }
    let log_before = d.log_text().len();
    // 150 MB announced: within the response bound, so only the deadline and the buffer's
    // growth protect the daemon.
    leader.drip_next_fetches(0, 150 << 20, 3);
    leader.append(0, 20, 10);
    let started = Instant::now();
    let timed_out = |d: &support::Daemon| {
        d.log_text()[log_before..]
            .lines()
            .any(|l| l.contains("Fetch response not complete within the request deadline"))
    };
    let mut peak = 0;
    while !timed_out(&d) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no timeout logged: {}",
            &d.log_text()[log_before..]
        );
        peak = peak.max(rss_kib(d.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the fetch ended after {took:?}, not within the 1.5 s deadline (+ max wait)"
    );
    let line = d.log_text()[log_before..]
        .lines()
        .find(|l| l.contains("request deadline"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("127.0.0.1") && line.contains("Fetch"),
        "{line}"
    );
    // Meanwhile the other fetcher's partition follows.
    leader.append(1, 30, 10);
    support::wait_until(Duration::from_secs(10), "partition 1 while 0 drips", || {
        peak = peak.max(rss_kib(d.pid()));
        support::log_end(&data, TOPIC, 1) == 80
    });
    assert!(
        peak < 64 * 1024,
        "RSS reached {peak} KiB while a broker announced a 150 MB frame"
    );
    // Every dripped fetch ends at its deadline; then the broker behaves again and partition 0
    // catches up, byte for byte.
    leader.append(0, 10, 10);
    let end0 = leader.log_end(0);
    support::wait_until(
        Duration::from_secs(30),
        "partition 0 after the drips",
        || support::log_end(&data, TOPIC, 0) == end0,
    );
    let timeouts = d.log_text()[log_before..]
        .lines()
        .filter(|l| l.contains("request deadline"))
        .count();
    // Said when the failures start (again after a fetch in between worked), never more than
    // once per dripped fetch; the recovery is said too.
    assert!(
        (1..=3).contains(&timeouts),
        "{timeouts} WARNs for 3 dripped fetches"
    );
    assert!(
        d.log_text()[log_before..].contains("works again (after"),
        "{}",
        &d.log_text()[log_before..]
    );
    assert!(d.is_running());
    assert_eq!(d.stop().code(), Some(0));
    for p in 0..2 {
        assert_eq!(
            support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p)),
            leader.log_bytes(p)
        );
    }
}
