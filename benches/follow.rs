//! Benchmark: replica-follower against what operators would use instead, side by side in one
//! run, against one Tansu leader. Run it with `bash benches/run.sh` (see the README).
//!
//! 1. One partition of about 200 MB (1 M records of ~200 bytes), produced once before timing.
//!    Each repetition measures, from an empty start:
//!    - `limit`: the raw serving limit, a minimal fetch loop that keeps nothing (Fetch with
//!      8 MB max, offsets advanced by batch) — this binary in `raw` mode;
//!    - `kcat`: `kcat -C -e -o beginning -f '%o %k %s\n'` to a file, on the confluent-kafka
//!      wheel's librdkafka;
//!    - `follower`: replica-follower from an empty data dir until its local log holds every
//!      batch (the `.log` files add up to the leader's bytes, then the end offset is checked).
//!
//!    Wall time, MB/s, CPU seconds (user + system) and peak RSS; medians over the repetitions;
//!    ratios follower/kcat and follower/limit.
//! 2. Scale: 1,000 partitions of one topic (small records) followed by one daemon: time to
//!    catch up, threads, open file descriptors, RSS; then the CPU an idle caught-up daemon
//!    uses over 30 s.
//!
//! `limit` and `kcat` run under `/usr/bin/time`; the follower, which runs until told to stop,
//! is measured from `/proc/<pid>` just before SIGTERM.
//!
//! `--baseline BIN` also measures another build of replica-follower (say, an older commit's
//! `target/release/replica-follower`) in the same run: in part 1 it follows in every
//! repetition right before or after this build (the order alternates), and part 2 runs for
//! both; the tables gain a `baseline` row and the ratio follower/baseline.
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
    Sample, clk_tck, fetch_8mb, follow_until_caught_up, median, open_fds, opt, proc_figures,
    produce_spread, raw_args, raw_summary, spawn_follower, timed, write_follower_config,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let Some(args) = common::bench_args("benches/run.sh") else {
        return;
    };
    let reps = opt(&args, "--reps", 5);
    let records = opt(&args, "--records", 1_000_000);
    let scale_partitions = opt(&args, "--partitions", 1000);
    let idle_secs = opt(&args, "--idle-secs", 30);
    let this = PathBuf::from(support::bin());
    let baseline = args
        .iter()
        .position(|a| a == "--baseline")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    if let Some(b) = &baseline {
        assert!(b.is_file(), "--baseline {}: no such file", b.display());
    }
    let work = support::manifest_dir().join("target/bench");
    std::fs::create_dir_all(&work).expect("target/bench");
    let tck = clk_tck();
    let me = std::env::current_exe().expect("current exe");
    let kcat = std::env::var("KCAT").unwrap_or_else(|_| "kcat".into());
    let lib_dir =
        std::env::var("RDKAFKA_LIB_DIR").expect("RDKAFKA_LIB_DIR (set by benches/run.sh)");

    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic("bench", 1);
    let started = Instant::now();
    let r = leader.ok(json!({"cmd": "produce_spread", "topic": "bench", "partitions": 1, "count": records, "value_size": 200, "batch_records": 1000}));
    let end = r["ends"][0].as_i64().expect("end offset");
    eprintln!(
        "produced {records} records in {:.1} s; log end {end}",
        started.elapsed().as_secs_f64()
    );

    let raw_args = raw_args(&leader.bootstrap, "bench");
    // Untimed warm-up: learn the leader's byte count.
    let raw = raw_summary(&raw_args);
    let (total, batches) = (raw.bytes, raw.batches);
    let mb = total as f64 / 1e6;
    eprintln!("partition bench-0: {total} bytes in {batches} batches");

    let mut limit = Vec::new();
    let mut kc = Vec::new();
    let mut fol = Vec::new();
    let mut base = Vec::new();
    for rep in 1..=reps {
        // Every tool starts with no dirty page cache left by the one before (kcat writes
        // ~220 MB, the follower ~218 MB): write-back would otherwise slow whoever comes next.
        let settle = || {
            let _ = Command::new("sync").status();
        };
        settle();
        let mut c = Command::new(&me);
        c.args(&raw_args);
        limit.push(timed(c, None));

        let mut c = Command::new(&kcat);
        c.args([
            "-C",
            "-b",
            &leader.bootstrap,
            "-t",
            "bench",
            "-p",
            "0",
            "-e",
            "-o",
            "beginning",
            "-q",
            "-f",
            "%o %k %s\\n",
        ]);
        c.env("LD_LIBRARY_PATH", &lib_dir);
        let kout = work.join("kcat.out");
        settle();
        kc.push(timed(c, Some(&kout)));
        let lines = std::fs::read(&kout)
            .map(|b| b.iter().filter(|&&x| x == b'\n').count())
            .unwrap_or(0);
        assert!(
            lines as i64 >= end,
            "kcat printed {lines} lines for {end} records"
        );

        let follow = |bin: &Path| {
            let (cfg, data) = write_follower_config(&work, &leader.bootstrap, "bench", fetch_8mb);
            settle();
            follow_until_caught_up(bin, &cfg, &data, "bench", total, end, tck)
        };
        // The order alternates, so neither build always follows the other's write-back.
        if let Some(b) = baseline.as_deref().filter(|_| rep % 2 == 1) {
            base.push(follow(b));
        }
        fol.push(follow(&this));
        if let Some(b) = baseline.as_deref().filter(|_| rep % 2 == 0) {
            base.push(follow(b));
        }
        eprintln!(
            "rep {rep}: limit {:.2}s kcat {:.2}s follower {:.2}s{}",
            limit[rep - 1].wall,
            kc[rep - 1].wall,
            fol[rep - 1].wall,
            base.last()
                .map(|b| format!(" baseline {:.2}s", b.wall))
                .unwrap_or_default()
        );
    }

    let row = |name: &str, s: &[Sample]| {
        let w = median(s.iter().map(|x| x.wall).collect());
        println!(
            "| {name:<8} | {w:>8.2} | {:>8.1} | {:>8.2} | {:>8.1} | {} |",
            mb / w,
            median(s.iter().map(|x| x.cpu).collect()),
            median(s.iter().map(|x| x.rss_mb).collect()),
            s.iter()
                .map(|x| format!("{:.2}", x.wall))
                .collect::<Vec<_>>()
                .join(" ")
        );
        w
    };
    println!(
        "\nOne partition: {records} records, {:.1} MB in {batches} batches, Tansu on loopback; medians of {reps} runs\n",
        mb
    );
    println!("| tool     | wall s   | MB/s     | CPU s    | RSS MB   | every run (wall s) |");
    println!("|----------|----------|----------|----------|----------|--------------------|");
    let wl = row("limit", &limit);
    let wk = row("kcat", &kc);
    let wf = row("follower", &fol);
    let wb = (!base.is_empty()).then(|| row("baseline", &base));
    println!(
        "\nfollower/kcat = {:.2} (target ≤ 0.5)   follower/limit = {:.2} (target ≤ 1.25){}",
        wf / wk,
        wf / wl,
        wb.map(|wb| format!("   follower/baseline = {:.2}", wf / wb))
            .unwrap_or_default()
    );

    if scale_partitions == 0 {
        return;
    }
    let ends = produce_spread(&mut leader, "scale", scale_partitions);
    let mut rows = vec![(
        "follower",
        scale(&this, &work.join("scale"), &leader, &ends, idle_secs, tck),
    )];
    if let Some(b) = &baseline {
        rows.push((
            "baseline",
            scale(
                b,
                &work.join("scale-baseline"),
                &leader,
                &ends,
                idle_secs,
                tck,
            ),
        ));
    }
    println!("\nScale: {scale_partitions} partitions × 100 records of ~50 bytes, one daemon\n");
    println!(
        "| build | catch-up s | threads | open fds | RSS MB (peak) | CPU s to catch up | idle CPU % over {idle_secs} s | RSS MB after idle (peak) |"
    );
    println!(
        "|-------|-----------|---------|----------|---------------|-------------------|------------------|-------------------------|"
    );
    for (name, row) in rows {
        println!("| {name} | {row} |");
    }
    println!(
        "\ntargets: RSS < 64 MB for one partition, < 256 MB for {scale_partitions}; idle CPU < 1 %"
    );
}

/// Part 2 with the daemon binary `bin` in `sdir`: its row of the scale table.
fn scale(
    bin: &Path,
    sdir: &Path,
    leader: &support::Leader,
    ends: &[i64],
    idle_secs: usize,
    tck: f64,
) -> String {
    std::fs::create_dir_all(sdir).expect("scale dir");
    let (cfg, data) = write_follower_config(sdir, &leader.bootstrap, "scale", |c| c);
    let t0 = Instant::now();
    let mut child = spawn_follower(bin, &cfg);
    loop {
        let caught_up =
            replica_follower::inspect::status::collect(&data).is_ok_and(|(parts, _)| {
                parts.len() == ends.len()
                    && parts
                        .iter()
                        .all(|p| ends.get(p.tp.partition as usize) == Some(&p.log_end_offset))
            });
        if caught_up {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "scale follower did not catch up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let catch_up = t0.elapsed().as_secs_f64();
    let pid = child.id();
    let (cpu_caught_up, hwm, rss, threads) = proc_figures(pid, tck);
    let fds = open_fds(pid);
    // Caught up means durable too: let the first checkpoint after catch-up (default every
    // 5 s: 1,000 fsyncs and leader-epoch files) finish before the idle window opens.
    std::thread::sleep(Duration::from_secs(6));
    let (cpu0, _, _, _) = proc_figures(pid, tck);
    std::thread::sleep(Duration::from_secs(idle_secs as u64));
    let (cpu1, hwm_idle, rss_idle, _) = proc_figures(pid, tck);
    let idle_pct = (cpu1 - cpu0) / idle_secs as f64 * 100.0;
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let st = child.wait().expect("wait scale follower");
    assert!(st.success());
    format!(
        "{catch_up:.2} | {threads} | {fds} | {rss:.1} ({hwm:.1}) | {cpu_caught_up:.2} | {idle_pct:.2} | {rss_idle:.1} ({hwm_idle:.1})"
    )
}
