//! Benchmark of the read-only broker (`replica-follower serve`) against Tansu, the leader it
//! replicates, side by side in one run (issue 9). Run it with `bash benches/serve.sh`.
//!
//! Set-up, untimed: one partition of about `--mb` MB (600), values of `--value-bytes` bytes
//! (100, as `kafka-producer-perf-test` writes by default), is produced to Tansu in ~1 MB
//! batches; a replica-follower follows it into data dir A until caught up and is stopped;
//! `replica-follower serve --data-dir A` listens on loopback. Everything stays in the page
//! cache (Tansu keeps its log in memory).
//!
//! Then `--reps` times (5), interleaved:
//! - `raw tansu`, `raw ours`: the raw fetch loop (this binary's `raw` mode: 8 MB fetches one
//!   at a time, bytes discarded) against Tansu and against our listener — the serving limits;
//! - `kcat`: `kcat -C -e -c N -o beginning -q` (its default output, to /dev/null) against our listener, on the
//!   confluent-kafka wheel's librdkafka;
//! - `follower`: a chained replica-follower from an empty data dir B until its log holds every
//!   byte of A.
//!
//! Wall time, CPU (user + system) and peak RSS of each client, and the CPU the listener spent
//! on it (from `/proc`). This VM charges ~2.5 ms of kernel time per MB the first time a page
//! of memory is touched, so each timed run is preceded by `sync` and by writing and deleting a
//! 1 GiB file: whoever allocates next gets pages already touched.
//!
//! Targets (ratios of medians from this one run): our listener's rate ≥ 2 × Tansu's; the
//! chained follower's time ≤ 1.1 × the raw loop's against our listener, ≤ 0.5 × kcat's, and
//! its CPU ≤ 0.25 × kcat's. Last, one more raw loop against our listener under `strace -f` of
//! the listener: sendfile calls and bytes against the writes and reads around them.
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
    Sample, clk_tck, fetch_8mb, follow_until_caught_up, median, opt, proc_figures, raw_args,
    raw_summary, terminate, timed, write_follower_config,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOPIC: &str = "serve";
/// What a record adds to its value in a batch (key, varints, attributes), about.
const RECORD_OVERHEAD: usize = 30;

/// Writes and deletes a 1 GiB file (after a `sync`), so that the next tool finds memory the
/// VM has already handed out and nothing left to write back.
fn first_touch(dir: &Path) {
    let _ = Command::new("sync").status();
    let path = dir.join("first-touch");
    let chunk = vec![0x5au8; 8 << 20];
    let mut f = std::fs::File::create(&path).expect("first-touch file");
    for _ in 0..128 {
        f.write_all(&chunk).expect("write first-touch file");
    }
    drop(f);
    std::fs::remove_file(&path).expect("remove first-touch file");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `replica-follower serve` on the stopped replica `data`, once it accepts connections.
fn start_listener(data: &Path) -> (Child, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(support::bin())
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--listen", &addr])
        .env("RF_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start serve");
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(child.try_wait().ok().flatten().is_none(), "serve exited");
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, addr)
}

/// A timed client run with the CPU the listener spent meanwhile.
struct Run {
    client: Sample,
    listener_cpu: f64,
}

/// Syscalls of the listener during one raw loop: calls and the bytes their results add up to.
fn strace_raw_loop(listener: u32, raw: &[String], work: &Path) -> BTreeMap<String, (u64, u64)> {
    let out = work.join("strace.txt");
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&out)
        .args([
            "-e",
            "trace=sendfile,write,writev,sendto,sendmsg,read,recvfrom,pread64,openat",
            "-p",
            &listener.to_string(),
        ])
        .stderr(Stdio::inherit())
        .spawn()
        .expect("strace (apt-get install strace)");
    // strace attaches to every thread before it returns to waiting; give it that moment.
    std::thread::sleep(Duration::from_millis(500));
    let _ = raw_summary(raw);
    std::thread::sleep(Duration::from_millis(200));
    let _ = Command::new("kill")
        .args(["-INT", &strace.id().to_string()])
        .status();
    let _ = strace.wait();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let mut calls: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in text.lines() {
        // "PID name(args) = N" or, across threads, "PID <... name resumed>...) = N".
        let Some((_, call)) = line.split_once(' ') else {
            continue;
        };
        if call.contains("<unfinished ...>") {
            continue;
        }
        let name = match call.strip_prefix("<... ") {
            Some(r) => r.split_whitespace().next().unwrap_or(""),
            None => call.split('(').next().unwrap_or(""),
        };
        let result: u64 = call
            .rsplit_once(") = ")
            .and_then(|(_, r)| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let e = calls.entry(name.to_string()).or_default();
        e.0 += 1;
        e.1 += result;
    }
    calls
}

fn main() {
    let Some(args) = common::bench_args("benches/serve.sh") else {
        return;
    };
    let reps = opt(&args, "--reps", 5);
    let want_mb = opt(&args, "--mb", 600);
    // Kafka's own producer benchmark (`kafka-producer-perf-test`) writes 100-byte records by
    // default; `--value-bytes 1000` gives the fewer, larger records of the earlier figures.
    let value_bytes = opt(&args, "--value-bytes", 100);
    let record_bytes = value_bytes + RECORD_OVERHEAD;
    let work = support::manifest_dir().join("target/bench/serve");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("target/bench/serve");
    let tck = clk_tck();
    let me = std::env::current_exe().expect("current exe");
    let kcat = std::env::var("KCAT").unwrap_or_else(|_| "kcat".into());
    let lib_dir =
        std::env::var("RDKAFKA_LIB_DIR").expect("RDKAFKA_LIB_DIR (set by benches/serve.sh)");

    let mut tansu = support::Leader::start("tansu", 1);
    tansu.create_topic(TOPIC, 1);
    let started = Instant::now();
    let count = want_mb * 1_000_000 / record_bytes;
    // Batches of about 1 MB: librdkafka's `batch.size` closes each one.
    tansu.ok(
        json!({"cmd": "produce_spread", "topic": TOPIC, "partitions": 1, "count": count,
        "value_size": value_bytes, "batch_records": 1_000_000 / record_bytes}),
    );
    let tansu_raw = raw_args(&tansu.bootstrap, TOPIC);
    let leader = raw_summary(&tansu_raw);
    let (total, end) = (leader.bytes, leader.end);
    let mb = total as f64 / 1e6;
    eprintln!(
        "produced {count} records in {:.1} s: {mb:.1} MB in {} batches, log end {end}",
        started.elapsed().as_secs_f64(),
        leader.batches
    );

    let (cfg_a, data_a) =
        write_follower_config(&work.join("a"), &tansu.bootstrap, TOPIC, fetch_8mb);
    let a = follow_until_caught_up(
        Path::new(support::bin()),
        &cfg_a,
        &data_a,
        TOPIC,
        total,
        end,
        tck,
    );
    eprintln!("replica A caught up in {:.2} s", a.wall);
    let (mut listener, addr) = start_listener(&data_a);
    let lpid = listener.id();
    let ours_raw = raw_args(&addr, TOPIC);
    let served = raw_summary(&ours_raw);
    assert_eq!(
        (served.bytes, served.end),
        (total, end),
        "our listener serves what Tansu holds"
    );

    let listener_cpu = || proc_figures(lpid, tck).0;
    let measure = |f: &mut dyn FnMut() -> Sample| {
        first_touch(&work);
        let before = listener_cpu();
        let client = f();
        Run {
            client,
            listener_cpu: listener_cpu() - before,
        }
    };
    let raw_cmd = |args: &[String]| {
        let mut c = Command::new(&me);
        c.args(args);
        c
    };
    let records = end.to_string();
    let mut runs: [Vec<Run>; 4] = Default::default();
    for rep in 1..=reps {
        runs[0].push(measure(&mut || timed(raw_cmd(&tansu_raw), None)));
        runs[1].push(measure(&mut || timed(raw_cmd(&ours_raw), None)));
        runs[2].push(measure(&mut || {
            let mut c = Command::new(&kcat);
            c.args(["-C", "-b", &addr, "-t", TOPIC, "-p", "0"])
                // As the target names it: `-C -e -c N`, kcat's own output format (each value
                // and a newline, to /dev/null here), informational messages off.
                .args(["-o", "beginning", "-e", "-c", &records, "-q"])
                .env("LD_LIBRARY_PATH", &lib_dir);
            timed(c, None)
        }));
        let (cfg_b, data_b) = write_follower_config(&work.join("b"), &addr, TOPIC, fetch_8mb);
        runs[3].push(measure(&mut || {
            follow_until_caught_up(
                Path::new(support::bin()),
                &cfg_b,
                &data_b,
                TOPIC,
                total,
                end,
                tck,
            )
        }));
        let _ = std::fs::remove_dir_all(&data_b);
        eprintln!(
            "rep {rep}: {}",
            runs.iter()
                .map(|r| r
                    .last()
                    .map_or(String::new(), |r| format!("{:.2}s", r.client.wall)))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }

    let names = ["raw tansu", "raw ours", "kcat", "follower"];
    let med = |i: usize, f: fn(&Run) -> f64| median(runs[i].iter().map(f).collect());
    let wall = |i: usize| med(i, |r| r.client.wall);
    let cpu = |i: usize| med(i, |r| r.client.cpu);
    println!(
        "\nOne partition: {mb:.1} MB in {} batches (~{:.2} MB each), {end} records of {value_bytes}-byte values; loopback; medians of {reps} interleaved runs\n",
        leader.batches,
        mb / leader.batches as f64
    );
    println!(
        "| run       | wall s | MB/s   | CPU s | peak RSS MB | listener CPU s | every run (wall s) |"
    );
    println!(
        "|-----------|--------|--------|-------|-------------|----------------|--------------------|"
    );
    for (i, name) in names.iter().enumerate() {
        let lcpu = if i == 0 {
            "—".to_string()
        } else {
            format!("{:.2}", med(i, |r| r.listener_cpu))
        };
        println!(
            "| {name:<9} | {:>6.2} | {:>6.0} | {:>5.2} | {:>11.1} | {lcpu:>14} | {} |",
            wall(i),
            mb / wall(i),
            cpu(i),
            med(i, |r| r.client.rss_mb),
            runs[i]
                .iter()
                .map(|r| format!("{:.2}", r.client.wall))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    // Each ratio also per repetition: the tools of one repetition ran back to back.
    let per_rep = |f: &dyn Fn(usize) -> f64| {
        (0..reps)
            .map(|k| format!("{:.2}", f(k)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let w = |i: usize, k: usize| runs[i][k].client.wall;
    let c = |i: usize, k: usize| runs[i][k].client.cpu;
    let targets: [(&str, f64, bool, f64, String); 4] = [
        (
            "ours/tansu rate",
            wall(0) / wall(1),
            true,
            2.0,
            per_rep(&|k| w(0, k) / w(1, k)),
        ),
        (
            "follower/raw ours time",
            wall(3) / wall(1),
            false,
            1.1,
            per_rep(&|k| w(3, k) / w(1, k)),
        ),
        (
            "follower/kcat time",
            wall(3) / wall(2),
            false,
            0.5,
            per_rep(&|k| w(3, k) / w(2, k)),
        ),
        (
            "follower/kcat CPU",
            cpu(3) / cpu(2),
            false,
            0.25,
            per_rep(&|k| c(3, k) / c(2, k)),
        ),
    ];
    println!("\n| ratio                  | value | target  | result | every run |");
    println!("|------------------------|-------|---------|--------|-----------|");
    for (name, v, at_least, t, each) in targets {
        let (rel, ok) = if at_least {
            ("≥", v >= t)
        } else {
            ("≤", v <= t)
        };
        println!(
            "| {name:<22} | {v:>5.2} | {rel} {t:<5} | {:<6} | {each} |",
            if ok { "PASS" } else { "MISS" }
        );
    }

    let calls = strace_raw_loop(lpid, &ours_raw, &work);
    println!(
        "\nThe listener under strace -f during one raw loop ({} fetches of 8 MB, {mb:.1} MB):",
        served.fetches
    );
    for (name, (n, bytes)) in &calls {
        println!(
            "  {name:<10} {n:>7} calls  {:>10.1} MB",
            *bytes as f64 / 1e6
        );
    }
    terminate(&mut listener, "serve");
}
