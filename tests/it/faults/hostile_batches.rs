//! Batches a follower must never append, served by the in-process leader on partition 0 of a
//! two-partition topic: a negative base offset, a batch starting below the local log end, a
//! v2 batch with a negative record count or more records than offsets, and batches at or
//! beyond the high watermark the same response reports. Each is a partition error (a WARN, or an
//! ERROR for bytes that cannot be valid) naming the offset for
//! that partition; nothing of it reaches the log; the daemon stays up and partition 1 goes on.
//!
//! Raw bytes appended to the test leader are served forever to fetches from the offset where
//! they were appended, so after each case the leader drops them again with
//! `truncate_and_bump_epoch` at its own log end (which removes nothing else), and partition 0
//! must then follow normally before the next case.

use crate::support;
use crate::support::Daemon;
use crate::support::batches::BatchSpec;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOPIC: &str = "hostile";

fn config(dir: &Path, data: &Path, leader: &TestLeader) -> PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("log.flush_interval_ms", 200)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .write(dir)
}

/// An uncompressed v2 batch at `base` with records at offset deltas `0..n`, CRC correct.
fn spec(base: i64, n: i32, epoch: i32) -> BatchSpec {
    let mut s = BatchSpec::new(base, epoch);
    for d in 0..n {
        let v = format!("hostile-{d}");
        s = s.record(
            d,
            1_700_000_000_000 + i64::from(d),
            None,
            Some(v.as_bytes()),
        );
    }
    s
}

fn local(data: &Path, p: i32) -> Vec<u8> {
    support::local_log_bytes(data, &TopicPartition::new(TOPIC, p))
}

fn wait_identical(leader: &TestLeader, data: &Path, p: i32, what: &str) {
    support::wait_until(
        Duration::from_secs(20),
        &format!("{TOPIC}-{p} to equal the leader ({what})"),
        || local(data, p) == leader.log_bytes(p),
    );
}

/// WARN lines for partition 0 logged after byte `from` of the daemon log that contain every
/// one of `needles`.
fn warnings(d: &Daemon, from: usize, needles: &[&str]) -> Vec<String> {
    let log = d.log_text();
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(&format!("{TOPIC}-0"))
        })
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}

/// What every case checks once the leader serves the hostile bytes: a WARN for partition 0
/// naming `needles` (the offset), partition 0's bytes unchanged meanwhile, partition 1
/// following new appends, the daemon up.
fn assert_refused(leader: &TestLeader, d: &mut Daemon, data: &Path, from: usize, needles: &[&str]) {
    let held = local(data, 0);
    let end = support::log_end(data, TOPIC, 0);
    support::wait_until(
        Duration::from_secs(20),
        &format!("a WARN for {TOPIC}-0 naming {needles:?}"),
        || !warnings(d, from, needles).is_empty(),
    );
    leader.append(1, 20, 10);
    wait_identical(leader, data, 1, &format!("while {needles:?} is refused"));
    // The refusal holds over several fetch rounds (fetched again after each backoff).
    support::wait_until(
        Duration::from_secs(20),
        &format!("three WARNs for {TOPIC}-0 naming {needles:?}"),
        || warnings(d, from, needles).len() >= 3,
    );
    assert!(local(data, 0) == held, "{needles:?}: bytes reached the log");
    assert_eq!(support::log_end(data, TOPIC, 0), end, "{needles:?}");
    assert!(d.is_running(), "the daemon died: {}", d.log_text());
    let log = d.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// Drops the raw bytes served at the leader's log end and checks partition 0 follows again.
fn clear_raw_and_follow_on(leader: &TestLeader, data: &Path, what: &str) {
    let end = leader.log_end(0);
    leader.truncate_and_bump_epoch(0, end);
    assert_eq!(leader.log_end(0), end, "only the raw bytes were dropped");
    leader.append(0, 10, 5);
    wait_identical(leader, data, 0, &format!("after {what}"));
}

#[test]
fn hostile_batches_are_never_appended_and_the_other_partition_goes_on() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 50, 10);
    leader.append(1, 50, 10);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = Daemon::start(&config(dir.path(), &data, &leader));
    wait_identical(&leader, &data, 0, "first catch-up");
    wait_identical(&leader, &data, 1, "first catch-up");

    // 1. A negative base offset, the batch otherwise sane (its last offset even passes the
    // fetch offset).
    let end = leader.log_end(0);
    let from = d.log_text().len();
    let mut s = spec(-7, 3, leader.leader_epoch(0));
    s.last_offset_delta = i32::try_from(end + 7 + 2).unwrap();
    leader.append_raw(0, s.build());
    assert_refused(&leader, &mut d, &data, from, &["offset -7"]);
    clear_raw_and_follow_on(&leader, &data, "the negative base offset");

    // 2. A batch starting below the local log end and ending above it.
    let end = leader.log_end(0);
    let from = d.log_text().len();
    leader.append_raw(0, spec(end - 5, 10, leader.leader_epoch(0)).build());
    let base = format!("{}..", end - 5);
    assert_refused(&leader, &mut d, &data, from, &[&base]);
    clear_raw_and_follow_on(&leader, &data, "the batch below the log end");

    // 3. A negative record count (CRC recomputed so only the count is wrong).
    let end = leader.log_end(0);
    let from = d.log_text().len();
    let mut b = spec(end, 3, leader.leader_epoch(0)).build();
    b[57..61].copy_from_slice(&(-1i32).to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    leader.append_raw(0, b);
    let at = format!("offset {end}");
    assert_refused(&leader, &mut d, &data, from, &[&at, "-1 records"]);
    clear_raw_and_follow_on(&leader, &data, "the negative record count");

    // 4. More records than offsets: 3 records in a batch of 2 offsets.
    let end = leader.log_end(0);
    let from = d.log_text().len();
    let mut s = spec(end, 3, leader.leader_epoch(0));
    s.last_offset_delta = 1;
    leader.append_raw(0, s.build());
    let at = format!("offset {end}");
    assert_refused(&leader, &mut d, &data, from, &[&at, "3 records"]);
    clear_raw_and_follow_on(&leader, &data, "too many records");

    // 5. Batches at the high watermark the response reports (HW = the local log end).
    let end = leader.log_end(0);
    let from = d.log_text().len();
    leader.set_high_watermark(0, Some(end));
    leader.append(0, 10, 5);
    let at = format!("offset {end}");
    let hw = format!("high watermark {end}");
    assert_refused(&leader, &mut d, &data, from, &[&at, &hw]);

    // 6. ... and beyond it (HW below the local log end).
    let from = d.log_text().len();
    leader.set_high_watermark(0, Some(end - 3));
    let hw = format!("high watermark {}", end - 3);
    assert_refused(&leader, &mut d, &data, from, &[&at, &hw]);

    // 7. A response whose first batch is below the HW and whose second starts at it: the
    // second is never appended, whatever happens to the first.
    leader.set_high_watermark(0, None);
    wait_identical(&leader, &data, 0, "the HW override lifted");
    let end = leader.log_end(0);
    let from = d.log_text().len();
    leader.set_high_watermark(0, Some(end + 5));
    leader.append(0, 10, 5); // end..end+4 and end+5..end+9
    let at = format!("offset {}", end + 5);
    let hw = format!("high watermark {}", end + 5);
    support::wait_until(
        Duration::from_secs(20),
        &format!("a WARN for {TOPIC}-0 naming {at} and {hw}"),
        || !warnings(&d, from, &[&at, &hw]).is_empty(),
    );
    leader.append(1, 20, 10);
    wait_identical(&leader, &data, 1, "while the batch at the HW is refused");
    let got = local(&data, 0);
    assert!(
        support::log_end(&data, TOPIC, 0) <= end + 5 && leader.log_bytes(0).starts_with(&got),
        "the batch at the high watermark was appended"
    );
    assert!(d.is_running());
    leader.set_high_watermark(0, None);
    wait_identical(&leader, &data, 0, "the HW override lifted again");

    // Partition 1 never saw a problem.
    let log = d.log_text();
    assert!(
        !log.lines()
            .any(|l| (l.contains(" WARN ") || l.contains(" ERROR "))
                && l.contains(&format!("{TOPIC}-1"))),
        "{log}"
    );
    assert_eq!(d.stop().code(), Some(0), "SIGTERM: {}", d.log_text());
    for p in 0..2 {
        assert!(
            local(&data, p) == leader.log_bytes(p),
            "{TOPIC}-{p} at the end"
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify failed:\n{out}");
    support::assert_checkpoints_within_logs(&data);
}
