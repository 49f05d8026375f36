//! Cluster identity against two Tansu instances with their own cluster ids: a data dir
//! filled from cluster-a records `cluster.id=cluster-a` in `meta.properties`; pointed at
//! cluster-b (same topic name, fewer records) the daemon exits 1 within seconds without
//! touching a file, naming both ids and the data dir; pointed back at cluster-a it follows on.

use crate::support;
use crate::support::{Daemon, Leader};
use replica_follower::checkpoint::TopicPartition;
use std::time::{Duration, Instant};

const TOPIC: &str = "shared-name";

fn config(dir: &std::path::Path, data: &std::path::Path, bootstrap: &str) -> std::path::PathBuf {
    support::Config::new(data, bootstrap)
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.flush_interval_ms", 100)
        .write(dir)
}

/// The daemon log written since `from` bytes.
fn log_since(d: &Daemon, from: usize) -> String {
    d.log_text().get(from..).unwrap_or_default().to_string()
}

#[test]
fn a_data_dir_of_one_cluster_is_refused_for_another_and_left_untouched() {
    let mut a = Leader::start_with("tansu", 1, &["--cluster-id", "cluster-a"]);
    let mut b = Leader::start_with("tansu", 1, &["--cluster-id", "cluster-b"]);
    a.create_topic(TOPIC, 1);
    b.create_topic(TOPIC, 1);
    let end_a = a.produce(TOPIC, 0, 600, "none", 1).1 + 1;
    b.produce(TOPIC, 0, 100, "none", 2);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tp = TopicPartition::new(TOPIC, 0);

    // Fill the data dir from cluster-a.
    let cfg = config(dir.path(), &data, &a.bootstrap);
    let mut d = Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(30), "catch-up from cluster-a", || {
        support::log_end(&data, TOPIC, 0) == end_a
    });
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    support::assert_byte_identical(&a.bootstrap, &data, &tp, 0);
    let meta = std::fs::read_to_string(data.join("meta.properties")).expect("meta.properties");
    assert!(
        meta.lines().any(|l| l.trim() == "cluster.id=cluster-a"),
        "meta.properties:\n{meta}"
    );
    assert_eq!(
        support::status(&data)["cluster_id"],
        serde_json::json!("cluster-a")
    );

    // Pointed at cluster-b: refused, nothing changed.
    let before = support::hash_tree(&data);
    let from = d.log_text().len();
    let cfg = config(dir.path(), &data, &b.bootstrap);
    let mut d = Daemon::start(&cfg);
    let started = Instant::now();
    let st = d.wait(Duration::from_secs(10));
    let took = started.elapsed();
    let log = log_since(&d, from);
    assert_eq!(st.code(), Some(1), "exit status {st:?}; log:\n{log}");
    assert!(took < Duration::from_secs(8), "took {took:?} to refuse");
    let after = support::hash_tree(&data);
    assert_eq!(after, before, "the refused start changed the data dir");
    let data_text = data.display().to_string();
    let line = log
        .lines()
        .find(|l| l.contains("cluster-b"))
        .unwrap_or_else(|| panic!("no log line names cluster-b:\n{log}"));
    assert!(
        line.contains("cluster-a") && line.contains(&data_text),
        "the refusal should name both cluster ids and `{data_text}`: {line}"
    );
    let meta_after = std::fs::read_to_string(data.join("meta.properties")).unwrap();
    assert_eq!(meta_after, meta);

    // Pointed back at cluster-a: it starts and follows new records.
    let end_a = a.produce(TOPIC, 0, 200, "lz4", 3).1 + 1;
    let cfg = config(dir.path(), &data, &a.bootstrap);
    let mut d = Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(30),
        "catch-up from cluster-a again",
        || support::log_end(&data, TOPIC, 0) == end_a,
    );
    assert!(d.is_running(), "the daemon should keep running");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    support::assert_byte_identical(&a.bootstrap, &data, &tp, 0);
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}
