//! Calm logs at scale: a daemon following 1,000 partitions says what it loaded, recovered
//! and checkpointed in a few lines with totals, not one line per partition, at every start,
//! clean stop and recovery after kill -9. A partition that something is wrong with is still
//! named: a torn tail in a few partitions names each, in many names the first few and counts
//! the rest, and RF_LOG=debug names every one.

use crate::support;
use crate::support::test_leader::TestLeader;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

const TOPIC: &str = "calm";
const PARTITIONS: i32 = 1000;
/// What "calm" means here: a start, a stop or a recovery of 1,000 partitions.
const MOST_LINES: usize = 30;

fn segment(data: &Path, p: i32) -> std::path::PathBuf {
    data.join(format!("{TOPIC}-{p}/00000000000000000000.log"))
}

/// Every partition's log holds exactly the leader's bytes (one segment each).
fn caught_up(data: &Path, leader: &TestLeader) -> bool {
    (0..PARTITIONS).all(|p| {
        segment(data, p)
            .metadata()
            .is_ok_and(|m| m.len() == leader.log_bytes(p).len() as u64)
    })
}

/// The lines the daemon logged since `from` (a byte position in its log file).
fn lines_since(d: &support::Daemon, from: usize) -> Vec<String> {
    d.log_text()[from..].lines().map(str::to_string).collect()
}

fn assert_calm(lines: &[String], phase: &str) {
    eprintln!("{phase}: {} lines", lines.len());
    assert!(
        lines.len() < MOST_LINES,
        "{phase}: {} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    // No line for one healthy partition: none names `calm-N:` at INFO.
    let per_partition: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(" INFO ") && l.contains(&format!("] {TOPIC}-")))
        .collect();
    assert!(
        per_partition.is_empty(),
        "{phase}: per-partition INFO lines:\n{per_partition:#?}"
    );
}

/// Tears the tail of each of `parts`: the first 20 bytes of a batch appended after its
/// last whole one, as a crash in the middle of a write leaves them.
fn tear(data: &Path, leader: &TestLeader, parts: &[i32]) {
    for &p in parts {
        let half = leader.log_bytes(p)[..20].to_vec();
        std::fs::OpenOptions::new()
            .append(true)
            .open(segment(data, p))
            .unwrap()
            .write_all(&half)
            .unwrap();
    }
}

#[test]
fn a_thousand_partitions_start_stop_and_recover_in_a_few_lines() {
    let _heavy = support::heavy();
    // On tmpfs where there is one: the lines are the point here, and the fsyncs of 1,000
    // recoveries on a shared disk would take most of a minute.
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, PARTITIONS);
    for p in 0..PARTITIONS {
        leader.append(p, 3, 3);
    }
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .set("log.min_free_bytes", 0)
        .set("checkpoint.interval_ms", 200)
        .write(dir.path());
    // Fetching (connected since `from`), and every log holds the leader's bytes.
    let wait_caught_up = |d: &support::Daemon, from: usize, what: &str| {
        support::wait_until(Duration::from_secs(60), what, || {
            d.log_text()[from..].contains("connected to broker") && caught_up(&data, &leader)
        });
    };

    // A first start, caught up, then SIGTERM.
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&d, 0, "the first catch-up");
    assert!(d.stop().success(), "{}", d.log_text());
    let first = lines_since(&d, 0);
    assert_calm(&first, "first start and stop");
    let stopped = first.last().unwrap();
    assert!(
        stopped
            .contains("clean shutdown complete: 1000 partition logs checkpointed (1000 segments"),
        "{stopped}"
    );

    // Started again: one line for the logs it loaded; then kill -9.
    let from = support::Daemon::logged_so_far(&cfg);
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&d, from, "the second start");
    d.kill9();
    let second = lines_since(&d, from);
    assert_calm(&second, "a clean start, then kill -9");
    let loaded: Vec<&String> = second.iter().filter(|l| l.contains("loaded ")).collect();
    assert_eq!(loaded.len(), 1, "{second:#?}");
    assert!(
        loaded[0].contains("loaded 1000 partition logs (1000 segments")
            && !loaded[0].contains("unclean"),
        "{}",
        loaded[0]
    );

    // Recovery after kill -9, nothing wrong: one line with the totals, no WARN.
    let from = support::Daemon::logged_so_far(&cfg);
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&d, from, "the recovery");
    assert!(d.stop().success(), "{}", d.log_text());
    let third = lines_since(&d, from);
    assert_calm(&third, "recovery after kill -9, then stop");
    let recovered: Vec<&String> = third
        .iter()
        .filter(|l| l.contains("after an unclean shutdown"))
        .collect();
    assert_eq!(recovered.len(), 1, "{third:#?}");
    assert!(
        recovered[0].contains("loaded 1000 partition logs")
            && recovered[0].contains("recovery scanned")
            && !recovered[0].contains(" cut "),
        "{}",
        recovered[0]
    );
    assert!(
        !third
            .iter()
            .any(|l| l.contains(" WARN ") || l.contains(" ERROR ")),
        "{third:#?}"
    );

    // A crash that tore the tails of 3 partitions: each is named with what was cut.
    let from = support::Daemon::logged_so_far(&cfg);
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&d, from, "the start before the second kill");
    d.kill9();
    let torn = [7, 400, 999];
    tear(&data, &leader, &torn);
    let from = support::Daemon::logged_so_far(&cfg);
    let mut d = support::Daemon::start(&cfg);
    wait_caught_up(&d, from, "the recovery of 3 torn tails");
    let fourth = lines_since(&d, from);
    assert_calm(&fourth, "recovery of 3 torn tails");
    for p in torn {
        let named: Vec<&String> = fourth
            .iter()
            .filter(|l| l.contains(&format!("{TOPIC}-{p}: recovery cut 20 bytes from `")))
            .collect();
        assert!(
            named.len() == 1 && named[0].contains(" WARN "),
            "{TOPIC}-{p} named once in a WARN:\n{fourth:#?}"
        );
    }
    assert!(
        fourth
            .iter()
            .any(|l| l.contains("after an unclean shutdown")
                && l.contains("cut 60 bytes from 3 partitions")),
        "{fourth:#?}"
    );

    // Torn in 8: one WARN details the first five, counts the rest and lists every partition
    // cut; debug names each with its file.
    d.kill9();
    let torn = [1, 2, 3, 500, 501, 502, 997, 998];
    tear(&data, &leader, &torn);
    let from = support::Daemon::logged_so_far(&cfg);
    let mut d = support::Daemon::start_with_env(&cfg, &[("RF_LOG", "debug")]);
    wait_caught_up(&d, from, "the recovery of 8 torn tails");
    assert!(d.stop().success(), "{}", d.log_text());
    let fifth = lines_since(&d, from);
    let warns: Vec<&String> = fifth
        .iter()
        .filter(|l| l.contains(" WARN ") && l.contains("recovery cut"))
        .collect();
    assert_eq!(warns.len(), 1, "one grouped WARN:\n{warns:#?}");
    assert!(
        warns[0].contains("recovery cut 160 bytes from the ends of 8 segments: calm-1 (20 bytes: ")
            && warns[0].contains("calm-500 (20 bytes")
            && warns[0].contains("and 3 more")
            && warns[0].contains("every partition cut: calm[1-3,500-502,997-998]"),
        "{}",
        warns[0]
    );
    for p in torn {
        assert!(
            fifth.iter().any(|l| l.contains(" DEBUG ")
                && l.contains(&format!("{TOPIC}-{p}: recovery cut 20 bytes from `"))),
            "{TOPIC}-{p} at debug level"
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}
