//! Restart benchmark: how long the daemon takes from `run` to fetching again, after a clean
//! shutdown and after a kill -9, on logs of several sizes and segment sizes; and the peak RSS
//! of `verify`, `dump` and the daemon on the largest log. Run it with `bash benches/restart.sh`.
//!
//! For each log size and `segment_bytes`:
//! 1. An in-process leader (`tests/support/test_leader.rs`) is filled with uncompressed
//!    batches of 256 records (~66 KB each) up to the size, and the daemon follows it once
//!    from an empty data dir (`max_bytes = partition_max_bytes = 8 MiB`), then gets SIGTERM.
//! 2. Clean restart, `--reps` times: from spawning `run` to its line "fetching from broker"
//!    (the fetcher manager logs it once the log is loaded, the leader asked for metadata and
//!    the partition handed to its fetcher); then SIGTERM.
//! 3. Kill -9, `--reps` times: the leader takes steady writes (`--write-mb-s`), the daemon
//!    follows them for `--kill-after-ms` and is killed; the bytes past the recovery point in
//!    `recovery-point-offset-checkpoint` are the unflushed tail that recovery must scan (the
//!    defaults `flush_interval_ms = 1000`, `checkpoint.interval_ms = 5000` are kept). The writes
//!    stop, and the restart is timed the same way, then followed until it holds the leader's end.
//! 4. On the largest log: `verify` and `dump` (to /dev/null) under `/usr/bin/time`, and the
//!    daemon's VmHWM from `/proc/<pid>/status` just before each SIGTERM or kill: after the
//!    first follow of the whole log, after clean restarts, and over the kill -9 runs with
//!    their recoveries.
//!
//! Everything lives in `target/bench/restart`, one log at a time, removed at the end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    reason = "a benchmark fails by panicking, and indexes its own fixtures freely"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use replica_follower::log::partition::list_segment_bases;
use replica_follower::record::records::{NewRecord, build_v2_batch};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::test_leader::TestLeader;

const TOPIC: &str = "restart";
const RECORDS_PER_BATCH: usize = 256;
const VALUE_BYTES: usize = 240;
/// The line that says the daemon is fetching again.
const FETCHING: &str = "fetching from broker";

/// One uncompressed batch of [`RECORDS_PER_BATCH`] records at `base`.
fn batch(base: i64) -> Vec<u8> {
    let value: Vec<u8> = (0..VALUE_BYTES).map(|i| (i * 7 + 13) as u8).collect();
    let keys: Vec<String> = (0..RECORDS_PER_BATCH as i64)
        .map(|i| format!("key-{}", base + i))
        .collect();
    let records: Vec<NewRecord<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| NewRecord {
            key: Some(k.as_bytes()),
            value: Some(&value),
            timestamp: 1_700_000_000_000 + base + i as i64,
        })
        .collect();
    build_v2_batch(base, 0, &records)
}

/// Appends batches to the leader until it holds `bytes` more; returns what it appended.
fn fill(leader: &TestLeader, bytes: u64) -> u64 {
    let mut added = 0;
    while added < bytes {
        let b = batch(leader.log_end(0));
        added += b.len() as u64;
        leader.append_batch(0, b);
    }
    added
}

/// The daemon with its stderr read line by line, each line timestamped as it arrives.
struct Daemon {
    child: Child,
    started: Instant,
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<String>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    fn start(cfg: &Path) -> Daemon {
        let started = Instant::now();
        let mut child = Command::new(support::bin())
            .args(["run", "--config"])
            .arg(cfg)
            .env("RF_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the daemon");
        let stderr = child.stderr.take().expect("daemon stderr");
        let (tx, lines) = mpsc::channel();
        // Drained to the end, so the daemon never blocks on a full pipe.
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send((Instant::now(), line));
            }
        });
        Daemon {
            child,
            started,
            lines,
            seen: Vec::new(),
            reader: Some(reader),
        }
    }

    /// Seconds from the spawn to the first line containing `what`.
    fn wait_for(&mut self, what: &str) -> f64 {
        let deadline = self.started + Duration::from_secs(300);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    let hit = line.contains(what);
                    self.seen.push(line);
                    if hit {
                        return (at - self.started).as_secs_f64();
                    }
                }
                Err(_) => panic!(
                    "no {what:?} from the daemon within 300 s:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Peak RSS so far, MB (VmHWM).
    fn peak_rss_mb(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }

    /// Sends `sig`, waits for the exit, and returns every line the daemon logged.
    fn end(mut self, sig: &str) -> Vec<String> {
        self.signal(sig);
        let st = self.child.wait().expect("wait for the daemon");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.seen.extend(self.lines.try_iter().map(|(_, l)| l));
        if sig == "-TERM" {
            assert!(
                st.success(),
                "SIGTERM: daemon exit {st}:\n{}",
                self.seen.join("\n")
            );
        }
        self.seen
    }
}

fn log_end(data: &Path) -> i64 {
    replica_follower::inspect::status::collect(data)
        .ok()
        .and_then(|(parts, _)| parts.first().map(|p| p.log_end_offset))
        .unwrap_or(-1)
}

fn wait_caught_up(data: &Path, end: i64) {
    let t0 = Instant::now();
    while log_end(data) != end {
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "the daemon did not reach {end}; it holds {}",
            log_end(data)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The tail past the checkpointed recovery point, and the bytes recovery scans after a crash
/// (the loader's rule): the segment holding the recovery point from there on (it resumes at
/// the index entry below it, at most one index interval earlier), and every later segment.
fn unflushed(data: &Path, bytes_per_offset: f64) -> (f64, f64) {
    let dir = data.join(format!("{TOPIC}-0"));
    let rp = support::read_checkpoint(&data.join("recovery-point-offset-checkpoint"))
        .get(&(TOPIC.to_string(), 0))
        .copied()
        .unwrap_or(0);
    let bases = list_segment_bases(&dir).expect("segments");
    let mut scanned = 0u64;
    for (i, b) in bases.iter().enumerate() {
        if bases.get(i + 1).is_none_or(|next| *next > rp) {
            let len = std::fs::metadata(dir.join(format!("{b:020}.log"))).map_or(0, |m| m.len());
            let durable = ((rp - b).max(0) as f64 * bytes_per_offset) as u64;
            scanned += len.saturating_sub(durable);
        }
    }
    let tail = (log_end(data) - rp) as f64 * bytes_per_offset;
    (tail / 1e6, scanned as f64 / 1e6)
}

/// Wall seconds and peak RSS MB of a command run to completion under `/usr/bin/time`.
fn time_command(args: &[&str], data: &Path) -> (f64, f64) {
    let tf = std::env::temp_dir().join(format!("rf-restart-time-{}", std::process::id()));
    let st = Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "-o"])
        .arg(&tf)
        .arg(support::bin())
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .args(if args[0] == "dump" {
            &["--topic", TOPIC, "--partition", "0"][..]
        } else {
            &[]
        })
        .stdout(Stdio::null())
        .status()
        .expect("run /usr/bin/time");
    assert!(st.success(), "{args:?} failed: {st}");
    let text = std::fs::read_to_string(&tf).expect("/usr/bin/time output");
    let _ = std::fs::remove_file(&tf);
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert!(v.len() >= 2, "unexpected /usr/bin/time output {text:?}");
    (v[0], v[1] / 1024.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn list_arg(args: &[String], key: &str, default: &[u64]) -> Vec<u64> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .map_or_else(
            || default.to_vec(),
            |v| v.split(',').filter_map(|x| x.parse().ok()).collect(),
        )
}

struct Row {
    size_mb: u64,
    segment_mib: u64,
    segments: usize,
    clean: Vec<f64>,
    killed: Vec<f64>,
    tails: Vec<(f64, f64)>,
    rss: Option<Rss>,
}

struct Rss {
    verify: (f64, f64),
    dump: (f64, f64),
    daemon_following: f64,
    daemon_clean: f64,
    daemon_killed: f64,
}

fn scenario(work: &Path, size_mb: u64, segment_mib: u64, opts: &Opts, rss: bool) -> Row {
    let leader = TestLeader::start(TOPIC, 1);
    let t0 = Instant::now();
    let filled = fill(&leader, size_mb * 1_000_000);
    let bytes_per_offset = batch(0).len() as f64 / RECORDS_PER_BATCH as f64;
    let dir = work.join(format!("{size_mb}mb-{segment_mib}mib"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scenario dir");
    let data = dir.join("data");
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("log.segment_bytes", (segment_mib << 20) as i64)
        .set("fetch.max_bytes", 8388608)
        .set("fetch.partition_max_bytes", 8388608)
        .write(&dir);
    let d = Daemon::start(&cfg);
    wait_caught_up(&data, leader.log_end(0));
    let daemon_following = d.peak_rss_mb();
    d.end("-TERM");
    eprintln!(
        "{size_mb} MB / {segment_mib} MiB: leader filled ({:.0} MB) and followed in {:.1} s",
        filled as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    let segments = list_segment_bases(&data.join(format!("{TOPIC}-0"))).map_or(0, |b| b.len());

    let mut clean = Vec::new();
    let mut daemon_clean: f64 = 0.0;
    for _ in 0..opts.reps {
        let _ = Command::new("sync").status();
        let mut d = Daemon::start(&cfg);
        clean.push(d.wait_for(FETCHING));
        std::thread::sleep(Duration::from_millis(300));
        daemon_clean = daemon_clean.max(d.peak_rss_mb());
        d.end("-TERM");
    }

    let mut killed = Vec::new();
    let mut tails = Vec::new();
    let mut daemon_killed: f64 = 0.0;
    for _ in 0..opts.reps {
        let _ = Command::new("sync").status();
        let writing = AtomicBool::new(true);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Steady writes at the configured rate.
                let t = Instant::now();
                let mut written = 0.0;
                while writing.load(Ordering::SeqCst) {
                    if written < t.elapsed().as_secs_f64() * opts.write_mb_s * 1e6 {
                        written += fill(&leader, 1) as f64;
                    } else {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
            let mut d = Daemon::start(&cfg);
            d.wait_for(FETCHING);
            std::thread::sleep(Duration::from_millis(opts.kill_after_ms));
            daemon_killed = daemon_killed.max(d.peak_rss_mb());
            d.end("-KILL");
            writing.store(false, Ordering::SeqCst);
        });
        tails.push(unflushed(&data, bytes_per_offset));
        let mut d = Daemon::start(&cfg);
        killed.push(d.wait_for(FETCHING));
        wait_caught_up(&data, leader.log_end(0));
        daemon_killed = daemon_killed.max(d.peak_rss_mb());
        let log = d.end("-TERM");
        assert!(
            log.iter().any(|l| l.contains("after an unclean shutdown")),
            "the restart after kill -9 did not recover:\n{}",
            log.join("\n")
        );
    }

    let rss = rss.then(|| {
        let _ = Command::new("sync").status();
        Rss {
            verify: time_command(&["verify"], &data),
            dump: time_command(&["dump"], &data),
            daemon_following,
            daemon_clean,
            daemon_killed,
        }
    });
    drop(leader);
    std::fs::remove_dir_all(&dir).expect("remove the scenario's data");
    Row {
        size_mb,
        segment_mib,
        segments,
        clean,
        killed,
        tails,
        rss,
    }
}

struct Opts {
    reps: usize,
    write_mb_s: f64,
    kill_after_ms: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        // `cargo test --all-targets` runs bench targets once without `--bench`: this one
        // writes gigabytes, so it runs only through benches/restart.sh.
        println!("benchmark skipped: run it with `bash benches/restart.sh`");
        return;
    }
    let sizes = list_arg(&args, "--sizes-mb", &[100, 2000]);
    let segments = list_arg(&args, "--segments-mib", &[1024, 64]);
    let one = |k: &str, d: u64| list_arg(&args, k, &[d]).first().copied().unwrap_or(d);
    let opts = Opts {
        reps: one("--reps", 3) as usize,
        write_mb_s: one("--write-mb-s", 20) as f64,
        kill_after_ms: one("--kill-after-ms", 2500),
    };
    let work = support::manifest_dir().join("target/bench/restart");
    std::fs::create_dir_all(&work).expect("target/bench/restart");
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut rows = Vec::new();
    for &size in &sizes {
        for &seg in &segments {
            rows.push(scenario(&work, size, seg, &opts, size == largest));
        }
    }
    let _ = std::fs::remove_dir_all(&work);

    let each = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "\nRestart to \"{FETCHING}\": medians of {} runs; kill -9 after {} ms of steady writes at {} MB/s (flush_interval_ms 1000, checkpoint interval 5000)\n",
        opts.reps, opts.kill_after_ms, opts.write_mb_s
    );
    println!(
        "| log MB | segment MiB | segments | clean restart s | after kill -9 s | tail past recovery point MB | recovery scans MB | every clean run s | every kill run s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.0} | {:.0} | {} | {} |",
            r.size_mb,
            r.segment_mib,
            r.segments,
            median(r.clean.clone()),
            median(r.killed.clone()),
            median(r.tails.iter().map(|t| t.0).collect()),
            median(r.tails.iter().map(|t| t.1).collect()),
            each(&r.clean),
            each(&r.killed),
        );
    }
    println!("\nPeak RSS on the {largest} MB log (target: every one under 64 MB)\n");
    println!(
        "| segment MiB | verify s | verify MB | dump >/dev/null s | dump MB | daemon MB, first follow | daemon MB, clean restart | daemon MB, kill -9 and recovery |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        if let Some(x) = &r.rss {
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.segment_mib,
                x.verify.0,
                x.verify.1,
                x.dump.0,
                x.dump.1,
                x.daemon_following,
                x.daemon_clean,
                x.daemon_killed
            );
        }
    }
}
