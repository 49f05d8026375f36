//! Benchmark (issue 11, item 6; issue 24, item 2): many partitions followed by one daemon,
//! side by side in one run, from Apache Kafka (which grants KIP-227 fetch sessions), from
//! Tansu (sessionless: it answers session id 0) and from our own read-only listener
//! (`replica-follower serve`, which grants fetch sessions). Run it with
//! `bash benches/partitions.sh` (see the README); `--leader kafka|tansu|all` (default all).
//!
//! 1. N partitions (`--partitions`, default 10,000) × 100 records of ~50 bytes produced to
//!    Tansu, as `follow.rs`'s scale part does. A: a daemon following Tansu from an empty data
//!    dir, started under `ulimit -n 1024`.
//! 2. A stopped cleanly (SIGTERM, exit 0); its data dir served with `replica-follower serve`
//!    on a loopback port; B: a daemon following that listener from an empty data dir, also
//!    under `ulimit -n 1024`. Tansu is stopped.
//! 3. K: a one-node Apache Kafka 4.4 KRaft cluster (its request log off: at thousands of
//!    partitions it costs the broker more than the requests), N partitions × 100 records of
//!    ~50 bytes produced partition by partition, one batch each; a daemon following it from
//!    an empty data dir, also under `ulimit -n 1024`. K's partitions must hold Kafka's own
//!    bytes.
//!
//! For each daemon: the catch-up time (from the spawn until every partition's local log end,
//! read from its segment every 200 ms, equals the leader's), the CPU to catch up (utime +
//! stime from `/proc/PID/stat`), when the checkpoint files first name every partition's end
//! (the pass after catch-up, which syncs every partition, is over), the CPU over
//! `--idle-secs` (default 30) from 2 s after that, peak RSS (VmHWM), the most open descriptors seen
//! (`/proc/PID/fd`, sampled on every poll). Every log must be free of EMFILE, K's and B's of
//! WARN and ERROR lines; B's partitions must be byte-for-byte A's sizes and end offsets.
//!
//! A and B fetch with `fetch.max_bytes` = `--max-bytes` (default 1 MiB, the setting the
//! README recommends for Tansu 0.6): Tansu caps a response at 5 MiB and spends more per
//! partition the larger the response, so at the 50 MiB default A catches up in about twice the
//! time (measured 23–24 s against 11–12 s). `--max-bytes 52428800` measures the default;
//! `--fetchers N` sets `fetch.fetchers_per_broker` (default 1, Kafka's). K fetches with
//! `--kafka-max-bytes` (default 8 MiB; the daemon's own default, 52428800, takes its peak
//! RSS to about 165 MB). `--before BIN`
//! also follows Tansu with another build of the daemon, just before A (a before/after in one
//! run).
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
    produce_spread, spawn_limited_bin, terminate, write_follower_config,
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

/// With `RF_BENCH_PROFILE=catch-up` or `=idle`, `perf record -e cpu-clock -g` of the daemon
/// over that phase, into `DIR/perf-PHASE.data` (the figures of a profiled run are not for the
/// README: perf costs CPU too).
struct Profile(Option<Child>);

impl Profile {
    fn start(phase: &str, dir: &Path, pid: u32) -> Profile {
        if std::env::var("RF_BENCH_PROFILE").ok().as_deref() != Some(phase) {
            return Profile(None);
        }
        let out = dir.join(format!("perf-{phase}.data"));
        // The whole system while catching up (the daemon's threads are not all there yet
        // to attach to; `perf report --pid` picks its own), the daemon alone when idle.
        let target = if phase == "idle" {
            vec!["-p".to_string(), pid.to_string()]
        } else {
            vec!["-a".to_string()]
        };
        let child = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-g"])
            .args(&target)
            .arg("-o")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start perf record");
        eprintln!(
            "profiling {phase} (daemon pid {pid}) into {}",
            out.display()
        );
        Profile(Some(child))
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
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

#[allow(clippy::too_many_arguments, reason = "one call per column")]
fn follow(
    bin: &str,
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
    let mut guard = Reaped(spawn_limited_bin(
        bin,
        &["run", "--config", cfg_s],
        NOFILE,
        &log,
    ));
    let child = &mut guard.0;
    let pid = child.id();
    let mut profile = Profile::start("catch-up", dir, pid);
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
    profile.stop();
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
    let mut profile = Profile::start("idle", dir, pid);
    let (cpu0, _, _, _) = proc_figures(pid, tck);
    for _ in 0..idle_secs {
        std::thread::sleep(Duration::from_secs(1));
        sample(child, &log, &mut peak_fds);
    }
    let (cpu1, hwm_mb, rss_mb, _) = proc_figures(pid, tck);
    profile.stop();
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

/// One daemon's column in the table: its letter, its heading, its figures.
struct Col {
    tag: &'static str,
    head: String,
    run: Run,
}

/// "K met, A **missed**" over the columns a target applies to (`check` gives `None` for the
/// others).
fn verdict(cols: &[Col], check: impl Fn(&Col) -> Option<bool>) -> String {
    cols.iter()
        .filter_map(|c| {
            check(c).map(|met| format!("{} {}", c.tag, if met { "met" } else { "**missed**" }))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Batches in a partition directory's segments.
fn batches_in(pdir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(pdir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            replica_follower::record::BatchIter::new(&bytes, usize::MAX).count()
        })
        .sum()
}

/// The Apache Kafka part: a one-node KRaft cluster (no request log), N partitions × 100
/// records produced partition by partition (one batch each), K following it.
fn kafka_part(
    n: usize,
    work: &Path,
    fetch: impl FnOnce(support::Config) -> support::Config,
    idle_secs: u64,
    tck: f64,
    notes: &mut Vec<String>,
) -> Col {
    let version = support::kafka::KAFKA_4;
    let t0 = Instant::now();
    let mut leader = support::Leader::start_with(
        "kafka",
        1,
        &["--kafka-version", version, "--kafka-no-request-log"],
    );
    let started_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    leader.ok(serde_json::json!({"cmd": "create_topic", "topic": TOPIC, "partitions": n, "timeout_s": 600}));
    let create_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let r = leader.ok(serde_json::json!({"cmd": "produce_spread", "topic": TOPIC, "partitions": n, "count": 100, "value_size": 50, "batch_records": 100, "timeout_s": 1800, "partition_major": true}));
    let produce_s = t0.elapsed().as_secs_f64();
    let ends: Vec<i64> = r["ends"]
        .as_array()
        .expect("ends")
        .iter()
        .map(|v| v.as_i64().unwrap_or(0))
        .collect();
    assert_eq!(ends.len(), n, "ends from produce_spread");
    eprintln!(
        "Kafka {version}: started in {started_s:.1} s, {n} partitions created in {create_s:.1} s, produced in {produce_s:.1} s"
    );
    let kafka_dir = PathBuf::from(
        leader.info["kafka"]["nodes"]["1"]["log_dir"]
            .as_str()
            .expect("node 1's log dir"),
    );
    let kafka_pid = kafka_pid(&kafka_dir);
    let run = follow(
        support::bin(),
        "K (Kafka)",
        &work.join("k"),
        &leader.bootstrap,
        fetch,
        &ends,
        idle_secs,
        tck,
    );
    let (kafka_cpu, kafka_hwm, _, _) =
        kafka_pid.map_or((0.0, 0.0, 0.0, 0), |p| proc_figures(p, tck));
    let kafka_fds = kafka_pid.map_or(0, open_fds);
    // K holds what Kafka holds: the same bytes in every partition.
    let differ: Vec<usize> = (0..n)
        .filter(|p| {
            let d = format!("{TOPIC}-{p}");
            log_bytes_on_disk(&kafka_dir.join(&d)) != log_bytes_on_disk(&run.data.join(&d))
        })
        .collect();
    let batches: usize = (0..n)
        .map(|p| batches_in(&run.data.join(format!("{TOPIC}-{p}"))))
        .sum();
    drop(leader);
    notes.push(format!(
        "Apache Kafka {version} (one KRaft node, no request log): {n} partitions created in {create_s:.0} s, produced in {produce_s:.0} s ({batches} batches); its JVM at the end: {kafka_cpu:.1} CPU s since its start, peak RSS {kafka_hwm:.0} MB, {kafka_fds} open descriptors; K's partitions differing in bytes from Kafka's own: {}",
        differ.len()
    ));
    assert!(differ.is_empty(), "K differs from Kafka in {differ:?}");
    Col {
        tag: "K",
        head: format!("K: from Apache Kafka {version} (sessions)"),
        run,
    }
}

/// The Kafka node's pid: the java process whose command line names the node's properties
/// beside `log_dir` (`…/data-1` → `…/node-1.properties`).
fn kafka_pid(log_dir: &Path) -> Option<u32> {
    let props = log_dir.parent()?.join("node-1.properties");
    let want = props.to_str()?.to_string();
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd);
        cmd.split('\0').any(|a| a == want).then_some(pid)
    })
}

/// The Tansu part: A following Tansu, then B following `serve` on A's data dir.
fn tansu_part(
    n: usize,
    before: Option<&str>,
    work: &Path,
    fetch: impl Fn(support::Config) -> support::Config,
    idle_secs: u64,
    tck: f64,
    notes: &mut Vec<String>,
) -> Vec<Col> {
    let mut leader = support::Leader::start("tansu", 1);
    let started = Instant::now();
    let ends = produce_spread(&mut leader, TOPIC, n);
    let produce_s = started.elapsed().as_secs_f64();
    eprintln!("produced {n} partitions × 100 records to Tansu in {produce_s:.1} s");

    let before = before.map(|bin| {
        let run = follow(
            bin,
            "A0 (Tansu, before)",
            &work.join("a0"),
            &leader.bootstrap,
            &fetch,
            &ends,
            idle_secs,
            tck,
        );
        Col {
            tag: "A0",
            head: format!("A0: from Tansu, `{bin}`"),
            run,
        }
    });
    let a = follow(
        support::bin(),
        "A (Tansu)",
        &work.join("a"),
        &leader.bootstrap,
        &fetch,
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
        support::bin(),
        "B (serve)",
        &work.join("b"),
        &addr,
        &fetch,
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
    let batches: usize = (0..n)
        .map(|p| batches_in(&a.data.join(format!("{TOPIC}-{p}"))))
        .sum();
    notes.push(format!(
        "Tansu: {n} partitions produced in {produce_s:.0} s ({batches} batches); serve (A's data dir, for B): listening {serve_start:.1} s after its start, peak RSS {serve_hwm:.1} MB, {serve_fds} open descriptors at the end, {} WARN/ERROR lines; B's partitions differing in bytes from A's: {}",
        serve_warn.len(),
        differ.len()
    ));
    for (what, lines) in [
        ("serve WARN/ERROR", &serve_warn),
        ("serve EMFILE", &serve_emfile),
    ] {
        for l in lines.iter().take(10) {
            eprintln!("{what}: {l}");
        }
    }
    assert!(
        serve_emfile.is_empty(),
        "descriptor shortage in serve's log"
    );
    assert!(differ.is_empty(), "B differs from A in {differ:?}");
    before
        .into_iter()
        .chain([
            Col {
                tag: "A",
                head: "A: from Tansu (sessionless)".to_string(),
                run: a,
            },
            Col {
                tag: "B",
                head: "B: from `serve` (sessions)".to_string(),
                run: b,
            },
        ])
        .collect()
}

fn main() {
    let Some(args) = common::bench_args("benches/partitions.sh") else {
        return;
    };
    let n = opt(&args, "--partitions", 10_000);
    let idle_secs = opt(&args, "--idle-secs", 30) as u64;
    let max_bytes = opt(&args, "--max-bytes", 1 << 20);
    let fetchers = opt(&args, "--fetchers", 1);
    // K fetches 8 MiB at most: at the daemon's 50 MiB default, two responses of 50 MiB (one
    // written while the next arrives) take its peak RSS past the 128 MB target.
    let kafka_max_bytes = opt(&args, "--kafka-max-bytes", 8 << 20);
    let which = args
        .iter()
        .position(|a| a == "--leader")
        .and_then(|i| args.get(i + 1))
        .map_or("all", String::as_str);
    // Another build of the daemon, measured on the same Tansu just before A: a before/after
    // in one run.
    let before = args
        .iter()
        .position(|a| a == "--before")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    assert!(
        matches!(which, "all" | "kafka" | "tansu"),
        "--leader is kafka, tansu or all, not {which:?}"
    );
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

    let mut notes = Vec::new();
    let mut cols = Vec::new();
    let kafka_fetch = |c: support::Config| {
        c.set("fetch.max_bytes", kafka_max_bytes as i64)
            .set("fetch.fetchers_per_broker", fetchers as i64)
    };
    // Tansu first: Kafka's cluster directory (10,000 partition directories) is deleted when
    // it stops, and creating files within a minute of that walks past each recently deleted
    // inode (see above), which would count against the daemon that follows.
    if which != "kafka" {
        cols.extend(tansu_part(
            n, before, &work, fetch, idle_secs, tck, &mut notes,
        ));
    }
    if which != "tansu" {
        cols.push(kafka_part(
            n,
            &work,
            kafka_fetch,
            idle_secs,
            tck,
            &mut notes,
        ));
    }

    let tagged = |tags: &'static str| move |c: &Col| tags.contains(c.tag);
    let row = |label: &str, cell: &dyn Fn(&Run) -> String, target: String| {
        let cells: Vec<String> = cols.iter().map(|c| cell(&c.run)).collect();
        println!("| {label} | {} | {target} |", cells.join(" | "));
    };
    println!(
        "\n{n} partitions × 100 records of ~50 bytes each; each daemon from an empty data dir under `ulimit -n {NOFILE}`, `fetch.fetchers_per_broker = {fetchers}`, `fetch.max_bytes = {kafka_max_bytes}` from Kafka and `{max_bytes}` from Tansu and `serve`\n"
    );
    let heads: Vec<&str> = cols.iter().map(|c| c.head.as_str()).collect();
    println!("| figure | {} | target |", heads.join(" | "));
    println!("|--------|{}--------|", "------|".repeat(cols.len()));
    row(
        "catch-up s",
        &|r| format!("{:.2}", r.catch_up),
        format!("≤ 10: {}", verdict(&cols, |c| Some(c.run.catch_up <= 10.0))),
    );
    row(
        "CPU s to catch up",
        &|r| format!("{:.2}", r.cpu_catch_up),
        String::new(),
    );
    row(
        "checkpointed at every end, s (CPU s)",
        &|r| format!("{:.2} ({:.2})", r.durable_at, r.cpu_durable),
        format!(
            "≤ 15 from Kafka: {}",
            verdict(&cols, |c| tagged("K")(c)
                .then_some(c.run.durable_at <= 15.0))
        ),
    );
    row(
        &format!("idle CPU over {idle_secs} s"),
        &|r| format!("{:.2} %", r.idle_pct),
        format!(
            "< 0.5 % from Kafka, < 1 % from `serve`: {}",
            verdict(&cols, |c| match c.tag {
                "K" => Some(c.run.idle_pct < 0.5),
                "B" => Some(c.run.idle_pct < 1.0),
                _ => None,
            })
        ),
    );
    row(
        "peak RSS MB (after idle)",
        &|r| format!("{:.1} ({:.1})", r.hwm_mb, r.rss_mb),
        format!(
            "< 128 from Kafka, < 256 from Tansu and `serve`: {}",
            verdict(&cols, |c| Some(
                c.run.hwm_mb < if c.tag == "K" { 128.0 } else { 256.0 }
            ))
        ),
    );
    row(
        "open descriptors, most seen",
        &|r| r.peak_fds.to_string(),
        format!(
            "< {NOFILE}: {}",
            verdict(&cols, |c| Some(c.run.peak_fds < NOFILE as usize))
        ),
    );
    row("threads", &|r| r.threads.to_string(), String::new());
    row(
        "EMFILE lines in the log",
        &|r| r.emfile.len().to_string(),
        format!("0: {}", verdict(&cols, |c| Some(c.run.emfile.is_empty()))),
    );
    row(
        "WARN/ERROR lines in the log",
        &|r| r.warn_err.len().to_string(),
        format!(
            "0 from Kafka and `serve`: {}",
            verdict(&cols, |c| tagged("KB")(c)
                .then_some(c.run.warn_err.is_empty()))
        ),
    );
    println!();
    for note in &notes {
        println!("{note}\n");
    }
    for c in &cols {
        for l in c.run.warn_err.iter().take(10) {
            eprintln!("{} WARN/ERROR: {l}", c.tag);
        }
        for l in c.run.emfile.iter().take(10) {
            eprintln!("{} EMFILE: {l}", c.tag);
        }
    }
    for c in &cols {
        assert!(
            c.run.emfile.is_empty(),
            "descriptor shortage in {}'s log (see above)",
            c.tag
        );
        assert!(
            c.tag.starts_with('A') || c.run.warn_err.is_empty(),
            "{} logged WARN/ERROR (see above)",
            c.tag
        );
    }
    let _ = std::fs::remove_dir_all(&old);
}
