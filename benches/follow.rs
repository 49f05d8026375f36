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

#[path = "../tests/support/mod.rs"]
mod support;

use replica_follower::client::BrokerConnection;
use replica_follower::client::cluster;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::TopicPartition;
use replica_follower::protocol::fetch;
use replica_follower::record::BatchIter;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    wall: f64,
    cpu: f64,
    rss_mb: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn clk_tck() -> f64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(100.0)
}

/// (user + system CPU seconds, peak RSS MB, current RSS MB, threads) of a live process.
fn proc_figures(pid: u32, tck: f64) -> (f64, f64, f64, usize) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|x| x.parse().ok())
            .unwrap_or(0.0)
    };
    let threads = kb("Threads:") as usize;
    (
        ticks / tck,
        kb("VmHWM:") / 1024.0,
        kb("VmRSS:") / 1024.0,
        threads,
    )
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Runs `cmd` under /usr/bin/time; returns its figures.
fn timed(mut cmd: Command, stdout: Option<&Path>) -> Sample {
    let tf = std::env::temp_dir().join(format!("rf-bench-time-{}", std::process::id()));
    let mut t = Command::new("/usr/bin/time");
    t.args(["-f", "%e %U %S %M", "-o"])
        .arg(&tf)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            t.env(k, v);
        }
    }
    match stdout {
        Some(p) => t.stdout(std::fs::File::create(p).expect("output file")),
        None => t.stdout(Stdio::null()),
    };
    let st = t
        .stderr(Stdio::inherit())
        .status()
        .expect("run /usr/bin/time");
    assert!(st.success(), "{:?} failed", cmd.get_program());
    let text = std::fs::read_to_string(&tf).expect("time output");
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert!(v.len() >= 4, "unexpected /usr/bin/time output {text:?}");
    let _ = &mut cmd;
    Sample {
        wall: v[0],
        cpu: v[1] + v[2],
        rss_mb: v[3] / 1024.0,
    }
}

/// `raw` mode: fetch the partition from `from` to the high watermark, keep nothing; print
/// bytes and batches.
fn raw_mode(args: &[String]) {
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| panic!("raw needs {k}"))
    };
    let bootstrap = get("--bootstrap");
    let tp = TopicPartition::new(
        get("--topic"),
        get("--partition").parse().expect("partition"),
    );
    let md =
        cluster::bootstrap_metadata(&[bootstrap], "bench-raw", std::slice::from_ref(&tp.topic))
            .expect("metadata");
    let leader = md.leader(&tp).expect("leader");
    let addr = md
        .broker_addr(leader.leader_id)
        .expect("leader address")
        .to_string();
    let mut conn = BrokerConnection::connect(&addr, "bench-raw", 64 << 20).expect("connect");
    let v = conn
        .require_version(ApiKey::Fetch)
        .expect("fetch version")
        .min(12); // named topics
    let (mut offset, mut bytes, mut batches) = (0i64, 0u64, 0u64);
    loop {
        let req = support::one_partition_fetch(&tp, offset, 8 << 20);
        let body = conn
            .send(ApiKey::Fetch, v, Duration::from_millis(100), |w| {
                fetch::encode_request(w, v, &req)
            })
            .expect("fetch");
        let resp = fetch::decode_response(body, v).expect("decode");
        let p = &resp.topics[0].1[0];
        assert!(p.error.is_ok(), "fetch error {}", p.error);
        for (h, _, b) in BatchIter::new(p.records, usize::MAX) {
            if h.last_offset >= offset {
                offset = h.last_offset + 1;
                bytes += b.len() as u64;
                batches += 1;
            }
        }
        if offset >= p.high_watermark {
            break;
        }
    }
    println!("bytes={bytes} batches={batches} end={offset}");
}

fn log_bytes_on_disk(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn write_follower_config(
    dir: &Path,
    bootstrap: &str,
    topic: &str,
    fetch: &str,
) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    let _ = std::fs::remove_dir_all(&data);
    let cfg = dir.join("follower.toml");
    std::fs::write(&cfg, format!("data_dir = \"{}\"\nbootstrap_servers = [\"{bootstrap}\"]\n[[follow]]\ntopic = \"{topic}\"\n{fetch}\n", data.display())).expect("config");
    (cfg, data)
}

/// The daemon on `cfg`, quiet but for warnings.
fn spawn_follower(cfg: &Path) -> std::process::Child {
    Command::new(support::bin())
        .args(["run", "--config"])
        .arg(cfg)
        .env("RF_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start follower")
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<String> = all.iter().filter(|a| *a != "--bench").cloned().collect();
    if args.first().map(String::as_str) == Some("raw") {
        return raw_mode(&args);
    }
    if !all.iter().any(|a| a == "--bench") {
        // `cargo test --all-targets` runs bench targets once without `--bench`: the
        // benchmark takes minutes and needs kcat, so it runs only through benches/run.sh.
        println!("benchmark skipped: run it with `bash benches/run.sh`");
        return;
    }
    let opt = |k: &str, d: usize| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let reps = opt("--reps", 5);
    let records = opt("--records", 1_000_000);
    let scale_partitions = opt("--partitions", 1000);
    let idle_secs = opt("--idle-secs", 30);
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

    let raw_args = [
        "raw",
        "--bootstrap",
        &leader.bootstrap,
        "--topic",
        "bench",
        "--partition",
        "0",
    ];
    // Untimed warm-up: learn the leader's byte count.
    let out = Command::new(&me)
        .args(raw_args)
        .output()
        .expect("raw warm-up");
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    let total: u64 = line
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("bytes="))
        .and_then(|v| v.parse().ok())
        .expect("raw bytes");
    let batches: u64 = line
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("batches="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mb = total as f64 / 1e6;
    eprintln!("partition bench-0: {total} bytes in {batches} batches");

    let mut limit = Vec::new();
    let mut kc = Vec::new();
    let mut fol = Vec::new();
    for rep in 1..=reps {
        // Every tool starts with no dirty page cache left by the one before (kcat writes
        // ~220 MB, the follower ~218 MB): write-back would otherwise slow whoever comes next.
        let settle = || {
            let _ = Command::new("sync").status();
        };
        settle();
        let mut c = Command::new(&me);
        c.args(raw_args);
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

        let (cfg, data) = write_follower_config(
            &work,
            &leader.bootstrap,
            "bench",
            "[fetch]\nmax_bytes = 8388608\npartition_max_bytes = 8388608\n",
        );
        let t0 = Instant::now();
        let mut child = spawn_follower(&cfg);
        let pdir = data.join("bench-0");
        while log_bytes_on_disk(&pdir) < total {
            assert!(
                t0.elapsed() < Duration::from_secs(600),
                "follower did not catch up"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let wall = t0.elapsed().as_secs_f64();
        let (cpu, hwm, _, _) = proc_figures(child.id(), tck);
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let st = child.wait().expect("wait follower");
        assert!(st.success(), "follower exit {st}");
        assert_eq!(log_bytes_on_disk(&pdir), total, "follower bytes");
        assert_eq!(support::log_end(&data, "bench", 0), end, "follower log end");
        fol.push(Sample {
            wall,
            cpu,
            rss_mb: hwm,
        });
        eprintln!(
            "rep {rep}: limit {:.2}s kcat {:.2}s follower {:.2}s",
            limit[rep - 1].wall,
            kc[rep - 1].wall,
            wall
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
    println!(
        "\nfollower/kcat = {:.2} (target ≤ 0.5)   follower/limit = {:.2} (target ≤ 1.25)",
        wf / wk,
        wf / wl
    );

    if scale_partitions == 0 {
        return;
    }
    leader.create_topic("scale", scale_partitions as i32);
    let r = leader.ok(json!({"cmd": "produce_spread", "topic": "scale", "partitions": scale_partitions, "count": 100, "value_size": 50, "batch_records": 100}));
    let ends: Vec<i64> = r["ends"]
        .as_array()
        .expect("ends")
        .iter()
        .map(|v| v.as_i64().unwrap_or(0))
        .collect();
    let sdir = work.join("scale");
    std::fs::create_dir_all(&sdir).expect("scale dir");
    let (cfg, data) = write_follower_config(&sdir, &leader.bootstrap, "scale", "");
    let t0 = Instant::now();
    let mut child = spawn_follower(&cfg);
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
    println!("\nScale: {scale_partitions} partitions × 100 records of ~50 bytes, one daemon\n");
    println!(
        "| catch-up s | threads | open fds | RSS MB (peak) | CPU s to catch up | idle CPU % over {idle_secs} s | RSS MB after idle (peak) |"
    );
    println!(
        "|-----------|---------|----------|---------------|-------------------|------------------|-------------------------|"
    );
    println!(
        "| {catch_up:.2} | {threads} | {fds} | {rss:.1} ({hwm:.1}) | {cpu_caught_up:.2} | {idle_pct:.2} | {rss_idle:.1} ({hwm_idle:.1}) |"
    );
    println!(
        "\ntargets: RSS < 64 MB for one partition, < 256 MB for {scale_partitions}; idle CPU < 1 %"
    );
}
