//! `[metrics] listen`: `GET /metrics` in the Prometheus text format, read by a real parser
//! (`prometheus_client.parser` from PyPI): during catch-up the lag is positive and falls to
//! 0; counters only grow; other paths get 404 and garbage 400, and the daemon goes on.

use crate::support;
use crate::support::http;
use crate::support::test_leader::TestLeader;
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Duration;

const TOPIC: &str = "prom";

/// The samples of one scrape: `name{sorted labels}` → value.
fn scrape(addr: &str) -> BTreeMap<String, f64> {
    support::scrape::scrape(addr).keyed()
}

#[test]
fn metrics_parse_show_lag_falling_and_counters_growing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 20_000, 50);
    let addr = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("fetch.partition_max_bytes", 4096)
        .set("log.min_free_bytes", 0)
        .set("metrics.listen", addr.to_string())
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    let lag_key = format!("replica_follower_lag_records{{partition=0,topic={TOPIC}}}");
    let bytes_key = format!("replica_follower_bytes_appended_total{{partition=0,topic={TOPIC}}}");
    support::wait_until(Duration::from_secs(10), "the endpoint", || {
        TcpStream::connect(&addr).is_ok()
    });
    let mut scrapes = Vec::new();
    let mut until = |what: &str, done: &dyn Fn(&BTreeMap<String, f64>) -> bool| {
        support::wait_until(Duration::from_secs(60), what, || {
            let s = scrape(&addr);
            let ok = done(&s);
            scrapes.push(s);
            std::thread::sleep(Duration::from_millis(50));
            ok
        });
    };
    until("caught up", &|s| s.get(&lag_key) == Some(&0.0));
    // The leader gets ahead while the partition's fetches fail their CRC: a lag to see.
    leader.corrupt_next_fetches(0, usize::MAX);
    leader.append(0, 1000, 50);
    until("a positive lag", &|s| {
        s.get(&lag_key).is_some_and(|l| *l > 0.0)
    });
    leader.corrupt_next_fetches(0, 0);
    until("lag 0 again", &|s| s.get(&lag_key) == Some(&0.0));
    assert!(
        scrapes
            .iter()
            .any(|s| s.keys().any(|k| k.contains("error=invalid_data"))),
        "the CRC failures are counted"
    );
    let counters = |s: &BTreeMap<String, f64>| {
        s.iter()
            .filter(|(k, _)| k.contains("_total") || k.contains("_count"))
            .map(|(k, v)| (k.clone(), *v))
            .collect::<Vec<_>>()
    };
    for w in scrapes.windows(2) {
        for (k, v) in counters(&w[0]) {
            assert!(w[1].get(&k).is_none_or(|n| *n >= v), "{k} went down");
        }
    }
    let last = scrapes.last().unwrap();
    assert_eq!(
        last[&bytes_key] as usize,
        leader.log_bytes(0).len(),
        "every byte appended is counted"
    );
    assert_eq!(
        last[&format!(
            "replica_follower_partition_state{{partition=0,state=caught up,topic={TOPIC}}}"
        )],
        1.0
    );
    assert!(last.contains_key("process_resident_memory_bytes{}"));
    assert!(last["replica_follower_fetch_latency_seconds_count{}"] > 0.0);

    // Other paths, other methods and garbage.
    assert!(http(&addr, b"GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(http(&addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    assert!(http(&addr, b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    // A client that connects and says nothing costs only the scrapes behind it.
    let _silent = TcpStream::connect(&addr).unwrap();
    leader.append(0, 100, 50);
    support::wait_until(Duration::from_secs(20), "the replica goes on", || {
        support::log_end(&data, TOPIC, 0) == leader.log_end(0)
    });
    drop(_silent);
    assert!(scrape(&addr).contains_key(&lag_key));
    assert!(d.stop().success(), "{}", d.log_text());
}
