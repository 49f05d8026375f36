//! Benchmark (issue 11, item 6): many partitions followed by one daemon, side by side in one
//! run, from Tansu (sessionless: it answers session id 0) and from our own read-only
//! listener (`replica-follower serve`, which grants KIP-227 fetch sessions). Run it with
//! `bash benches/partitions.sh` (see the README).
//!
//! 1. N partitions (`--partitions`, default 10,000) × 100 records of ~50 bytes produced to
//!    Tansu, one batch each, as `follow.rs`'s scale part does.
//! 2. A: a daemon following Tansu from an empty data dir, started under `ulimit -n 1024`.
//! 3. A stopped cleanly (SIGTERM, exit 0); its data dir served with `replica-follower serve`
//!    on a loopback port; B: a daemon following that listener from an empty data dir, also
//!    under `ulimit -n 1024`.
//!
//! For A and B: the catch-up time (from the spawn until every partition's local log end,
//! read from its segment every 200 ms, equals the leader's), the CPU to catch up (utime +
//! stime from `/proc/PID/stat`), when the checkpoint files first name every partition's end
//! (the pass after catch-up, which syncs every partition, is over), the CPU over
//! `--idle-secs` (default 30) from 2 s after that, peak RSS (VmHWM), the most open descriptors seen
//! (`/proc/PID/fd`, sampled on every poll). Both logs must be free of EMFILE, B's of WARN and
//! ERROR lines; B's partitions must be byte-for-byte A's sizes and end offsets.
//!
//! Both daemons fetch with `fetch.max_bytes` = `--max-bytes` (default 1 MiB, the setting the
//! README recommends for Tansu 0.6): Tansu caps a response at 5 MiB and spends more per
//! partition the larger the response, so at the 50 MiB default A catches up in about twice the
//! time (measured 23–24 s against 11–12 s). `--max-bytes 52428800` measures the default;
//! `--fetchers N` sets `fetch.fetchers_per_broker` (default 1, Kafka's).
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

mod common;

use common::{
    clk_tck, local_log_end, log_bytes_on_disk, log_problems, open_fds, opt, proc_figures,
    produce_spread, spawn_limited, terminate, write_follower_config,
};
use replica_follower::log::data_dir::DataDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOPIC: &str = "parts";
const NOFILE: u32 = 1024;

/// A child killed (SIGKILL) if still running when dropped: a panic leaves nothing behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

struct Run {
    catch_up: f64,
    cpu_catch_up: f64,
    durable_at: f64,
    cpu_durable: f64,
    idle_pct: f64,
    hwm_mb: f64,
    rss_mb: f64,
    peak_fds: usize,
    threads: usize,
    warn_err: Vec<String>,
    emfile: Vec<String>,
    data: PathBuf,
}

/// Keeps the highest descriptor count seen; panics with the log's tail if the daemon died.
fn sample(child: &mut Child, log: &Path, peak: &mut usize) {
    if let Ok(Some(st)) = child.try_wait() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        panic!(
            "daemon exited early ({st}); its log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    *peak = (*peak).max(open_fds(child.id()));
}

fn follow(
    name: &str,
    dir: &Path,
    bootstrap: &str,
    fetch: impl FnOnce(support::Config) -> support::Config,
    ends: &[i64],
    idle_secs: u64,
    tck: f64,
) -> Run {
    let (cfg, data) = write_follower_config(dir, bootstrap, TOPIC, fetch);
    let log = dir.join("daemon.log");
    let _ = std::fs::remove_file(&log);
    let t0 = Instant::now();
    let cfg_s = cfg.to_str().expect("utf-8 path");
    let mut guard = Reaped(spawn_limited(&["run", "--config", cfg_s], NOFILE, &log));
    let child = &mut guard.0;
    let pid = child.id();
    let mut peak_fds = 0;
    let mut pending: Vec<usize> = (0..ends.len()).collect();
    let mut next_report = Duration::from_secs(10);
    while !pending.is_empty() {
        std::thread::sleep(Duration::from_millis(200));
        sample(child, &log, &mut peak_fds);
        pending.retain(|&p| local_log_end(&data.join(format!("{TOPIC}-{p}"))) != ends[p]);
        let el = t0.elapsed();
        if el >= next_report {
            eprintln!(
                "{name}: {} of {} partitions caught up after {:.0} s",
                ends.len() - pending.len(),
                ends.len(),
                el.as_secs_f64()
            );
            next_report += Duration::from_secs(10);
        }
        assert!(
            el < Duration::from_secs(900),
            "{name} did not catch up in 900 s: {} partitions behind",
            pending.len()
        );
    }
    let catch_up = t0.elapsed().as_secs_f64();
    let (cpu_catch_up, _, _, threads) = proc_figures(pid, tck);
    eprintln!("{name}: caught up in {catch_up:.2} s, {cpu_catch_up:.2} CPU s");
    // Caught up means durable too: the idle window opens once the checkpoint pass after
    // catch-up has finished (its recovery points name every partition's end), which on a
    // disk fsyncs each partition's files and writes its epoch and producer-state files.
    let rp_path = data.join(DataDir::RECOVERY_POINT);
    let durable_at = loop {
        std::thread::sleep(Duration::from_millis(200));
        sample(child, &log, &mut peak_fds);
        let rp = replica_follower::checkpoint::read_offsets(&rp_path).unwrap_or_default();
        let all = (0..ends.len()).all(|p| {
            rp.get(&replica_follower::checkpoint::TopicPartition::new(
                TOPIC, p as i32,
            )) == Some(&ends[p])
        });
        if all {
            break t0.elapsed().as_secs_f64();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "{name}: the checkpoint files did not reach every end in 900 s"
        );
    };
    let (cpu_durable, _, _, _) = proc_figures(pid, tck);
    eprintln!("{name}: checkpointed at every end after {durable_at:.2} s, {cpu_durable:.2} CPU s");
    // The pass may still be syncing its last files when the checkpoint file appears.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(1));
        sample(child, &log, &mut peak_fds);
    }
    let (cpu0, _, _, _) = proc_figures(pid, tck);
    for _ in 0..idle_secs {
        std::thread::sleep(Duration::from_secs(1));
        sample(child, &log, &mut peak_fds);
    }
    let (cpu1, hwm_mb, rss_mb, _) = proc_figures(pid, tck);
    let idle_pct = (cpu1 - cpu0) / idle_secs.max(1) as f64 * 100.0;
    // The daemon's own view agrees with the segments read above.
    let (parts, _) = replica_follower::inspect::status::collect(&data).expect("status");
    assert_eq!(
        parts.len(),
        ends.len(),
        "{name}: partitions in the data dir"
    );
    for p in &parts {
        assert_eq!(
            Some(&p.log_end_offset),
            ends.get(p.tp.partition as usize),
            "{name}: log end of {}",
            p.tp
        );
    }
    terminate(child, name);
    let (warn_err, emfile) = log_problems(&std::fs::read_to_string(&log).unwrap_or_default());
    Run {
        catch_up,
        cpu_catch_up,
        durable_at,
        cpu_durable,
        idle_pct,
        hwm_mb,
        rss_mb,
        peak_fds,
        threads,
        warn_err,
        emfile,
        data,
    }
}

fn main() {
    let Some(args) = common::bench_args("benches/partitions.sh") else {
        return;
    };
    let n = opt(&args, "--partitions", 10_000);
    let idle_secs = opt(&args, "--idle-secs", 30) as u64;
    let max_bytes = opt(&args, "--max-bytes", 1 << 20);
    let fetchers = opt(&args, "--fetchers", 1);
    let fetch = |c: support::Config| {
        c.set("fetch.max_bytes", max_bytes as i64)
            .set("fetch.fetchers_per_broker", fetchers as i64)
    };
    let work = support::manifest_dir().join("target/bench/partitions");
    // The last run's data dirs are removed only once this run is measured: on ext4 without
    // a journal, creating files while tens of thousands were deleted in the last minutes
    // walks past each recently deleted inode, which would count against A's catch-up.
    let old = work.with_extension(format!("old-{}", std::process::id()));
    if work.exists() {
        std::fs::rename(&work, &old).expect("move the last run aside");
    }
    std::fs::create_dir_all(&work).expect("target/bench/partitions");
    let tck = clk_tck();

    let mut leader = support::Leader::start("tansu", 1);
    let started = Instant::now();
    let ends = produce_spread(&mut leader, TOPIC, n);
    let produce_s = started.elapsed().as_secs_f64();
    eprintln!("produced {n} partitions × 100 records in {produce_s:.1} s");

    let a = follow(
        "A (Tansu)",
        &work.join("a"),
        &leader.bootstrap,
        fetch,
        &ends,
        idle_secs,
        tck,
    );

    let addr = format!("127.0.0.1:{}", support::free_port());
    let serve_log = work.join("serve.log");
    let mut serve_guard = Reaped(
        Command::new(support::bin())
            .args(["serve", "--data-dir"])
            .arg(&a.data)
            .args(["--listen", &addr])
            .env("RF_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&serve_log).expect("serve log"))
            .spawn()
            .expect("start serve"),
    );
    let serve = &mut serve_guard.0;
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "serve did not listen on {addr} in 900 s"
        );
        assert!(serve.try_wait().ok().flatten().is_none(), "serve exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    // `serve` opens every partition's view before it binds: how long that takes is a figure.
    let serve_start = t0.elapsed().as_secs_f64();
    eprintln!("serve: listening after {serve_start:.1} s");
    let b = follow(
        "B (serve)",
        &work.join("b"),
        &addr,
        fetch,
        &ends,
        idle_secs,
        tck,
    );
    let (_, serve_hwm, _, _) = proc_figures(serve.id(), tck);
    let serve_fds = open_fds(serve.id());
    terminate(serve, "serve");
    let (serve_warn, serve_emfile) =
        log_problems(&std::fs::read_to_string(&serve_log).unwrap_or_default());
    drop(leader);

    // B holds what A holds: the same bytes in every partition (end offsets checked above).
    let differ: Vec<usize> = (0..n)
        .filter(|p| {
            let d = format!("{TOPIC}-{p}");
            log_bytes_on_disk(&a.data.join(&d)) != log_bytes_on_disk(&b.data.join(&d))
        })
        .collect();

    let ok = |met: bool| if met { "met" } else { "**missed**" };
    println!(
        "\n{n} partitions × 100 records of ~50 bytes (one batch each), produced to Tansu in {produce_s:.0} s; each daemon from an empty data dir under `ulimit -n {NOFILE}`, `fetch.max_bytes = {max_bytes}`, `fetch.fetchers_per_broker = {fetchers}`\n"
    );
    println!("| figure | A: from Tansu (sessionless) | B: from `serve` (sessions) | target |");
    println!("|--------|-----------------------------|----------------------------|--------|");
    println!(
        "| catch-up s | {:.2} | {:.2} | ≤ 10: A {}, B {} |",
        a.catch_up,
        b.catch_up,
        ok(a.catch_up <= 10.0),
        ok(b.catch_up <= 10.0)
    );
    println!(
        "| CPU s to catch up | {:.2} | {:.2} | |",
        a.cpu_catch_up, b.cpu_catch_up
    );
    println!(
        "| checkpointed at every end, s (CPU s) | {:.2} ({:.2}) | {:.2} ({:.2}) | |",
        a.durable_at, a.cpu_durable, b.durable_at, b.cpu_durable
    );
    println!(
        "| idle CPU over {idle_secs} s | {:.2} % | {:.2} % | < 1 % with sessions (B): {} |",
        a.idle_pct,
        b.idle_pct,
        ok(b.idle_pct < 1.0)
    );
    println!(
        "| RSS MB, peak (after idle) | {:.1} ({:.1}) | {:.1} ({:.1}) | < 256: A {}, B {} |",
        a.hwm_mb,
        a.rss_mb,
        b.hwm_mb,
        b.rss_mb,
        ok(a.hwm_mb < 256.0),
        ok(b.hwm_mb < 256.0)
    );
    println!(
        "| open descriptors, most seen | {} | {} | < {NOFILE} |",
        a.peak_fds, b.peak_fds
    );
    println!("| threads | {} | {} | |", a.threads, b.threads);
    println!(
        "| EMFILE lines in the log | {} | {} | 0: {} |",
        a.emfile.len(),
        b.emfile.len(),
        ok(a.emfile.is_empty() && b.emfile.is_empty())
    );
    println!(
        "| WARN/ERROR lines in the log | {} | {} | 0 for B: {} |",
        a.warn_err.len(),
        b.warn_err.len(),
        ok(b.warn_err.is_empty())
    );
    println!(
        "\nserve (A's data dir, for B): listening {serve_start:.1} s after its start, peak RSS {serve_hwm:.1} MB, {serve_fds} open descriptors at the end, {} WARN/ERROR lines; B's partitions differing in bytes from A's: {}",
        serve_warn.len(),
        differ.len()
    );
    for (what, lines) in [
        ("A WARN/ERROR", &a.warn_err),
        ("B WARN/ERROR", &b.warn_err),
        ("serve WARN/ERROR", &serve_warn),
        ("A EMFILE", &a.emfile),
        ("B EMFILE", &b.emfile),
        ("serve EMFILE", &serve_emfile),
    ] {
        for l in lines.iter().take(10) {
            eprintln!("{what}: {l}");
        }
    }
    assert!(
        a.emfile.is_empty() && b.emfile.is_empty() && serve_emfile.is_empty(),
        "descriptor shortage in a log (see above)"
    );
    assert!(b.warn_err.is_empty(), "B logged WARN/ERROR (see above)");
    assert!(differ.is_empty(), "B differs from A in {differ:?}");
    let _ = std::fs::remove_dir_all(&old);
}
