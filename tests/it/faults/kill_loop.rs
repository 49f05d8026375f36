//! A kill -9 loop: the real daemon is killed with SIGKILL again and again at moments chosen by
//! a seeded generator, while its leader takes writes the whole time and segments roll every
//! few batches. Between kills the active segment is sometimes left as it was, sometimes given
//! a tail of garbage bytes, sometimes torn (a few bytes cut off its end), sometimes given a
//! torn or a whole second copy of its last batch. Some kills are
//! placed exactly with the `RF_TEST_PAUSE_AT` hook: inside a segment roll (`rolling`: the new
//! segment file exists, the map does not know it yet) and inside a truncation
//! (`diverged-copied`: the removed batches are copied to `diverged/`, the log is not cut yet).
//!
//! At the end the replica is byte-identical to the leader, `verify` passes, and every
//! checkpoint lies within [log start, log end].
//!
//! - Against Tansu (a real leader, written to by a producer thread): random kills and kills
//!   mid-roll.
//! - Against the in-process test leader, whose log can diverge (an unclean election: it
//!   loses a tail the replica holds and writes other batches there): random kills around
//!   divergences and kills mid-truncation.
//!
//! The seed is printed; `KILL_LOOP_SEED=<seed>` repeats a run's choices (delays, damage,
//! configurations), though not the daemon's own timing.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::checkpoint::TopicPartition;
use replica_follower::log::partition::list_segment_bases;
use replica_follower::record::BatchIter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// splitmix64: small, seedable, good enough to pick delays and damage.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// The run's seed: `KILL_LOOP_SEED`, else the clock; printed so a failure can be replayed.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("KILL_LOOP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("{test}: seed {seed} (repeat with KILL_LOOP_SEED={seed})");
    seed
}

/// A config with small segments, short fetch waits and, per incarnation, a flush and
/// checkpoint cadence drawn from `rng` (from "every few ms" to "never before the kill").
fn write_config(rng: &mut Rng, dir: &Path, data: &Path, bootstrap: &str, topic: &str) -> PathBuf {
    let flush = [10, 100, 1000, 600_000][rng.range(0, 4) as usize];
    let checkpoint = [20, 100, 500][rng.range(0, 3) as usize];
    support::Config::new(data, bootstrap)
        .follow(topic)
        .set(
            "log.segment_bytes",
            if topic == TANSU_TOPIC { 16384 } else { 4096 },
        )
        .set("log.flush_interval_ms", flush)
        .set("checkpoint.interval_ms", checkpoint)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 50)
        .set("fetch.max_bytes", 65536)
        .set("fetch.partition_max_bytes", 65536)
        .write(dir)
}

/// One daemon incarnation, and where its lines begin in the shared log file.
struct Incarnation {
    daemon: support::Daemon,
    log_from: usize,
}

impl Incarnation {
    fn start(config: &Path, env: &[(&str, &str)]) -> Incarnation {
        // Every daemon started with `config` appends to one file; this one's lines begin
        // where the file ends now.
        let path = config.with_extension(format!("log.{}", std::process::id()));
        let log_from = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
        let daemon = support::Daemon::start_with_env(config, env);
        assert_eq!(daemon.log_path, path, "the daemon's log file moved");
        Incarnation { daemon, log_from }
    }

    /// What this incarnation logged.
    fn log(&self) -> String {
        let text = self.daemon.log_text();
        text.get(self.log_from..).unwrap_or_default().to_string()
    }

    /// Waits for `line` in this incarnation's log; fails at once if the daemon exits.
    fn wait_for(&mut self, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log().contains(line) {
            assert!(
                self.daemon.is_running(),
                "the daemon exited before logging {line:?}:\n{}",
                self.log()
            );
            assert!(
                Instant::now() < deadline,
                "no {line:?} within 20 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL; the daemon must still have been running (it did not die by itself).
    fn kill9(mut self) -> String {
        assert!(
            self.daemon.is_running(),
            "the daemon exited before the kill:\n{}",
            self.log()
        );
        self.daemon.kill9();
        self.log()
    }
}

/// Raises the flag when dropped: a producer thread stops even when the test panics (a
/// thread scope joins its threads before the panic goes on, so it would wait forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The daemon in a pause (`RF_TEST_PAUSE_AT`) long enough to be killed there.
fn pause_at(point: &str) -> [(&str, &str); 2] {
    [("RF_TEST_PAUSE_AT", point), ("RF_TEST_PAUSE_MS", "60000")]
}

/// The last `.log` file of a partition (the active segment), if any.
fn active_segment(data: &Path, tp: &TopicPartition) -> Option<PathBuf> {
    let dir = data.join(tp.dir_name());
    let base = *list_segment_bases(&dir).ok()?.last()?;
    Some(dir.join(format!("{base:020}.log")))
}

/// The active segment of each partition of the Tansu topic.
fn active_segments(data: &Path) -> Vec<Option<PathBuf>> {
    (0..TANSU_PARTITIONS)
        .map(|p| active_segment(data, &TopicPartition::new(TANSU_TOPIC, p)))
        .collect()
}

/// Between kills, to the active segment of one of `partitions`: nothing; random garbage
/// appended; a few bytes torn off its end; a torn rewrite of its last batch (a valid header,
/// the body cut short: what an interrupted write leaves); or its last batch written twice (a
/// whole batch with a valid CRC whose offsets go backwards). Returns what was done.
fn damage_tail(rng: &mut Rng, data: &Path, topic: &str, partitions: i32) -> String {
    let tp = TopicPartition::new(topic, rng.range(0, partitions as u64) as i32);
    let choice = rng.range(0, 5);
    let Some(seg) = active_segment(data, &tp) else {
        return "nothing (no segment yet)".into();
    };
    let bytes = std::fs::read(&seg).expect("read the active segment");
    let len = bytes.len() as u64;
    let last_batch = BatchIter::new(&bytes, usize::MAX)
        .last()
        .map(|(_, _, b)| b.to_vec());
    let append = |extra: &[u8]| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&seg)
            .expect("open the active segment");
        f.write_all(extra).expect("append to the active segment");
    };
    match (choice, last_batch) {
        (1, _) => {
            let garbage: Vec<u8> = (0..rng.range(1, 65)).map(|_| rng.next() as u8).collect();
            append(&garbage);
            format!("{} garbage bytes after {tp} at {len}", garbage.len())
        }
        (2, Some(_)) => {
            let cut = rng.range(1, 41);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&seg)
                .and_then(|f| f.set_len(len - cut))
                .expect("tear the active segment");
            format!("{cut} bytes torn off {tp} at {len}")
        }
        (3, Some(b)) => {
            let keep = rng.range(12, b.len() as u64) as usize;
            append(&b[..keep]);
            format!(
                "a torn rewrite ({keep} of {} bytes) after {tp} at {len}",
                b.len()
            )
        }
        (4, Some(b)) => {
            append(&b);
            format!(
                "its last batch again ({} bytes) after {tp} at {len}",
                b.len()
            )
        }
        _ => "nothing".into(),
    }
}

/// Every checkpoint entry lies within [log start, log end] of its partition's files on disk
/// (log start: the first segment's base; log end: the last segment's end).
fn assert_checkpoints_within(data: &Path, when: &str) {
    let parts = support::status(data)["partitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for name in [
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
    ] {
        let path = data.join(name);
        if !path.exists() {
            continue;
        }
        for ((topic, partition), offset) in support::read_checkpoint(&path) {
            let tp = TopicPartition::new(&topic, partition as i32);
            let first = list_segment_bases(&data.join(tp.dir_name()))
                .ok()
                .and_then(|b| b.first().copied())
                .unwrap_or_else(|| panic!("{when}: {name} names {tp}, which has no segment"));
            let end = parts
                .iter()
                .find(|p| p["topic"] == topic.as_str() && p["partition"] == partition)
                .and_then(|p| p["log_end_offset"].as_i64())
                .unwrap_or_else(|| panic!("{when}: no status for {tp}"));
            assert!(
                (first..=end).contains(&offset),
                "{when}: {name} has {tp} at {offset}, outside its log {first}..{end}"
            );
        }
    }
}

/// How often the daemons of a run logged each recovery event (all incarnations share a log).
fn recovery_summary(log: &str) -> String {
    [
        "after an unclean shutdown",
        "recovery cut",
        "damaged",
        "removed batches are kept in",
        "test pause at",
    ]
    .iter()
    .map(|what| format!("{:?} ×{}", what, log.matches(what).count()))
    .collect::<Vec<_>>()
    .join(", ")
}

const TANSU_TOPIC: &str = "churn";
const TANSU_PARTITIONS: i32 = 2;
const TANSU_KILLS: usize = 12;

#[test]
fn kill9_at_random_moments_and_mid_roll_against_tansu_under_writes() {
    let started = Instant::now();
    let seed = seed("tansu");
    let mut rng = Rng(seed);
    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic(TANSU_TOPIC, TANSU_PARTITIONS);
    let bootstrap = leader.bootstrap.clone();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    // The producer: batches of 20..120 records, every codec, to both partitions in turn,
    // until the loop is over. Returns each partition's end offset.
    let stop = AtomicBool::new(false);
    let mut producer_rng = Rng(seed ^ 0x5eed);
    let (ends, kills, damage) = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let mut ends = [0i64; TANSU_PARTITIONS as usize];
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let p = (i % TANSU_PARTITIONS as u64) as i32;
                let count = producer_rng.range(20, 120) as usize;
                let codec = support::CODECS[producer_rng.range(0, 5) as usize];
                let (_, last) = leader.produce(TANSU_TOPIC, p, count, codec, seed ^ i);
                ends[p as usize] = last + 1;
                i += 1;
            }
            ends
        });
        let stop_producer = StopOnDrop(&stop);
        let mut kills = Vec::new();
        let mut damage = Vec::new();
        for i in 0..TANSU_KILLS {
            let cfg = write_config(&mut rng, dir.path(), &data, &bootstrap, TANSU_TOPIC);
            // Every fourth kill lands inside a segment roll; the others at a random moment,
            // from start-up and recovery to steady following.
            let mid_roll = i % 4 == 1;
            let how = if mid_roll {
                let before = active_segments(&data);
                let mut inc = Incarnation::start(&cfg, &pause_at("rolling"));
                inc.wait_for("test pause at rolling");
                let log = inc.kill9();
                // The roll stopped after creating the new segment: one partition ends in a
                // new, empty file.
                let rolled = active_segments(&data)
                    .iter()
                    .zip(&before)
                    .any(|(now, was)| {
                        now != was
                            && now
                                .as_ref()
                                .is_some_and(|s| std::fs::metadata(s).is_ok_and(|m| m.len() == 0))
                    });
                assert!(rolled, "killed mid-roll, no new empty segment:\n{log}");
                (log, "mid-roll".to_string())
            } else {
                let inc = Incarnation::start(&cfg, &[]);
                let ms = rng.range(30, 1500);
                std::thread::sleep(Duration::from_millis(ms));
                (inc.kill9(), format!("after {ms} ms"))
            };
            let (log, when) = how;
            assert!(
                !data.join(".kafka_cleanshutdown").exists(),
                "a kill -9 leaves no clean-shutdown marker"
            );
            // Once past its start-up checkpoint, a killed daemon leaves checkpoints that the
            // bytes on disk cover (kill -9 loses nothing the kernel has).
            if log.contains("following ") {
                assert_checkpoints_within(&data, &format!("after kill {i} ({when})"));
            }
            let ends_now: Vec<i64> = (0..TANSU_PARTITIONS)
                .map(|p| support::log_end(&data, TANSU_TOPIC, i64::from(p)))
                .collect();
            let held: i64 = ends_now.iter().sum();
            let d = damage_tail(&mut rng, &data, TANSU_TOPIC, TANSU_PARTITIONS);
            eprintln!("kill {i}: {when}, log ends {ends_now:?}; then {d}");
            kills.push((when, held));
            damage.push(d);
        }
        drop(stop_producer);
        (producer.join().expect("producer"), kills, damage)
    });
    assert!(kills.len() >= 10);
    assert!(kills.iter().filter(|(w, _)| w == "mid-roll").count() >= 3);
    // The loop was not killing daemons that never got anywhere.
    let progressed = kills.windows(2).filter(|w| w[1].1 > w[0].1).count();
    assert!(
        progressed >= 3,
        "the replica hardly grew between kills: {kills:?}"
    );

    let cfg = write_config(&mut rng, dir.path(), &data, &bootstrap, TANSU_TOPIC);
    let mut last = Incarnation::start(&cfg, &[]);
    for p in 0..TANSU_PARTITIONS {
        let want = ends[p as usize];
        support::wait_until(
            Duration::from_secs(30),
            &format!("{TANSU_TOPIC}-{p} to reach {want} after the kills"),
            || support::log_end(&data, TANSU_TOPIC, i64::from(p)) == want,
        );
    }
    let damaged_tails = damage.iter().filter(|d| !d.starts_with("nothing")).count();
    let whole_log = last.daemon.log_text();
    assert!(
        damaged_tails == 0 || whole_log.contains("recovery cut"),
        "{damaged_tails} damaged tails, and recovery never cut one:\n{whole_log}"
    );
    assert_eq!(last.daemon.stop().code(), Some(0), "{}", last.log());
    for p in 0..TANSU_PARTITIONS {
        let tp = TopicPartition::new(TANSU_TOPIC, p);
        support::assert_byte_identical(&bootstrap, &data, &tp, 0);
        assert!(
            support::segment_count(&data, &tp) > 10,
            "{tp}: segments should have rolled often"
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after the kill loop (seed {seed}):\n{out}");
    support::assert_checkpoints_within_logs(&data); // all three files are there
    assert_checkpoints_within(&data, "after the final clean shutdown");
    for name in [
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
    ] {
        let ck = support::read_checkpoint(&data.join(name));
        for p in 0..TANSU_PARTITIONS {
            assert_eq!(
                ck.get(&(TANSU_TOPIC.to_string(), i64::from(p))),
                Some(&ends[p as usize]),
                "{name} after the clean shutdown"
            );
        }
    }
    eprintln!(
        "tansu kill loop: {:?}; {}",
        started.elapsed(),
        recovery_summary(&last.daemon.log_text())
    );
}

const DIVERGE_TOPIC: &str = "diverging";
const DIVERGE_KILLS: usize = 10;

/// The path the ERROR line of a truncation names as the copy of what it removed.
fn kept_copy(log: &str) -> Option<PathBuf> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("the removed batches are kept in `"))?;
    let from = line.find("kept in `")? + "kept in `".len();
    let to = from + line.get(from..)?.find('`')?;
    Some(PathBuf::from(line.get(from..to)?))
}

/// An unclean election on the leader: it loses its tail from a point below the replica's
/// checkpointed high watermark (so the replica must copy what it removes) and goes on at a
/// new epoch. Returns false when the replica has not checkpointed enough yet.
fn diverge(rng: &mut Rng, leader: &TestLeader, data: &Path) -> bool {
    let hw = support::partition_status(data, DIVERGE_TOPIC, 0)
        .and_then(|s| s["high_watermark"].as_i64())
        .unwrap_or(0);
    if hw < 20 {
        return false;
    }
    let cut = rng.range(hw.saturating_sub(150).max(1) as u64, hw as u64) as i64;
    leader.truncate_and_bump_epoch(0, cut);
    true
}

#[test]
fn kill9_around_and_mid_truncation_against_a_diverging_leader() {
    let started = Instant::now();
    let seed = seed("diverging");
    let mut rng = Rng(seed);
    let leader = TestLeader::start(DIVERGE_TOPIC, 1);
    let addr = leader.addr();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tp = TopicPartition::new(DIVERGE_TOPIC, 0);

    let stop = AtomicBool::new(false);
    let mut producer_rng = Rng(seed ^ 0x5eed);
    // Each copy a truncation made at a kill: (path, bytes). They must survive to the end.
    let copies = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                leader.append(0, producer_rng.range(5, 40) as usize, 10);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let stop_producer = StopOnDrop(&stop);
        let mut copies: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        for i in 0..DIVERGE_KILLS {
            let cfg = write_config(&mut rng, dir.path(), &data, &addr, DIVERGE_TOPIC);
            // Every third kill lands inside a truncation, after the copy and before the cut.
            let when = if i % 3 == 1 {
                let mut inc = Incarnation::start(&cfg, &pause_at("diverged-copied"));
                inc.wait_for("following ");
                support::wait_until(
                    Duration::from_secs(20),
                    "the replica to checkpoint a high watermark to diverge below",
                    || diverge(&mut rng, &leader, &data),
                );
                inc.wait_for("test pause at diverged-copied");
                let log = inc.kill9();
                // The removed batches are in both places: copied whole, not yet cut.
                let copy = kept_copy(&log).unwrap_or_else(|| panic!("no copy named:\n{log}"));
                let bytes = std::fs::read(&copy).expect("read the diverged copy");
                assert!(!bytes.is_empty(), "{}: empty copy", copy.display());
                assert!(
                    support::local_log_bytes(&data, &tp).ends_with(&bytes),
                    "{}: the log was cut before the pause, or the copy differs",
                    copy.display()
                );
                copies.push((copy, bytes));
                "mid-truncation".to_string()
            } else {
                // A random moment, around a divergence half of the time.
                let inc = Incarnation::start(&cfg, &[]);
                let ms = rng.range(30, 1000);
                std::thread::sleep(Duration::from_millis(ms));
                let diverged = rng.range(0, 2) == 1 && diverge(&mut rng, &leader, &data);
                let after = if diverged { rng.range(0, 300) } else { 0 };
                std::thread::sleep(Duration::from_millis(after));
                inc.kill9();
                if diverged {
                    format!("{after} ms after a divergence")
                } else {
                    format!("after {ms} ms")
                }
            };
            let d = damage_tail(&mut rng, &data, DIVERGE_TOPIC, 1);
            eprintln!(
                "kill {i}: {when}, log end {}; then {d}",
                support::log_end(&data, DIVERGE_TOPIC, 0)
            );
        }
        drop(stop_producer);
        copies
    });
    assert!(copies.len() >= 3, "kills mid-truncation: {}", copies.len());

    let cfg = write_config(&mut rng, dir.path(), &data, &addr, DIVERGE_TOPIC);
    let mut last = Incarnation::start(&cfg, &[]);
    support::wait_until(
        Duration::from_secs(30),
        "the replica to equal the leader after the kills",
        || support::local_log_bytes(&data, &tp) == leader.log_bytes(0),
    );
    let end = leader.log_end(0);
    support::wait_until(
        Duration::from_secs(10),
        "the high watermark checkpoint to reach the leader's end",
        || {
            support::partition_status(&data, DIVERGE_TOPIC, 0)
                .is_some_and(|s| s["high_watermark"] == end)
        },
    );
    assert_eq!(last.daemon.stop().code(), Some(0), "{}", last.log());
    let local = support::local_log_bytes(&data, &tp);
    let remote = leader.log_bytes(0);
    assert_eq!(local.len(), remote.len(), "byte count against the leader");
    assert!(local == remote, "the replica differs from the leader");
    // What a truncation removed below the high watermark is never deleted afterwards.
    for (path, bytes) in &copies {
        assert!(
            std::fs::read(path).is_ok_and(|b| b == *bytes),
            "{}: the diverged copy changed or vanished",
            path.display()
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after the kill loop (seed {seed}):\n{out}");
    support::assert_checkpoints_within_logs(&data); // all three files are there
    assert_checkpoints_within(&data, "after the final clean shutdown");
    let rp = support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"));
    assert_eq!(rp.get(&(DIVERGE_TOPIC.to_string(), 0)), Some(&end));
    eprintln!(
        "diverging kill loop: {:?}; {}",
        started.elapsed(),
        recovery_summary(&last.daemon.log_text())
    );
}
