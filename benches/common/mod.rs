//! Helpers shared by the benchmarks that time tools against a broker (`follow.rs`,
//! `serve.rs`): medians, CPU and RSS of a process from `/proc` or `/usr/bin/time`, the raw
//! fetch loop (`raw` mode of a bench binary), the daemon followed until caught up, and the
//! many-partition figures (`follow.rs`'s scale part, `partitions.rs`): open descriptors, a
//! partition's local log end read from its segment, a daemon started under `ulimit -n`.
//! Each bench declares `mod support` (tests/support) before `mod common`.
#![allow(dead_code)]

use crate::support;
use replica_follower::client::BrokerConnection;
use replica_follower::client::cluster;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::TopicPartition;
use replica_follower::protocol::fetch;
use replica_follower::record::BatchIter;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub wall: f64,
    pub cpu: f64,
    pub rss_mb: f64,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `--key N` from the bench's arguments, else `default`.
pub fn opt(args: &[String], key: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn clk_tck() -> f64 {
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
pub fn proc_figures(pid: u32, tck: f64) -> (f64, f64, f64, usize) {
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

/// Runs `cmd` under /usr/bin/time; returns its figures: CPU and peak RSS from it, the wall
/// time measured here (time's own has 10 ms steps, too coarse for a run of tenths).
pub fn timed(cmd: Command, stdout: Option<&Path>) -> Sample {
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
    let t0 = Instant::now();
    let st = t
        .stderr(Stdio::inherit())
        .status()
        .expect("run /usr/bin/time");
    let wall = t0.elapsed().as_secs_f64();
    assert!(st.success(), "{:?} failed", cmd.get_program());
    let text = std::fs::read_to_string(&tf).expect("time output");
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert!(v.len() >= 4, "unexpected /usr/bin/time output {text:?}");
    Sample {
        wall,
        cpu: v[1] + v[2],
        rss_mb: v[3] / 1024.0,
    }
}

/// `raw` mode: fetch the partition from offset 0 to the high watermark with 8 MB fetches,
/// one at a time, keeping nothing; print bytes, batches, the end offset and the fetches.
pub fn raw_mode(args: &[String]) {
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
    let (mut offset, mut bytes, mut batches, mut fetches) = (0i64, 0u64, 0u64, 0u64);
    loop {
        let req = support::one_partition_fetch(&tp, offset, 8 << 20);
        let body = conn
            .send(ApiKey::Fetch, v, Duration::from_millis(100), |w| {
                fetch::encode_request(w, v, &req)
            })
            .expect("fetch");
        fetches += 1;
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
    println!("bytes={bytes} batches={batches} end={offset} fetches={fetches}");
}

/// The bench's arguments (without cargo's `--bench`), or `None` when the run is not the
/// benchmark: `raw` mode (run here and done), or `cargo test --all-targets`, which runs
/// bench targets once without `--bench` — a benchmark takes minutes and needs kcat, so it
/// runs only through its script.
pub fn bench_args(script: &str) -> Option<Vec<String>> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<String> = all.iter().filter(|a| *a != "--bench").cloned().collect();
    if args.first().map(String::as_str) == Some("raw") {
        raw_mode(&args);
        return None;
    }
    if !all.iter().any(|a| a == "--bench") {
        println!("benchmark skipped: run it with `bash {script}`");
        return None;
    }
    Some(args)
}

/// What one raw loop printed.
#[derive(Debug, Clone, Copy)]
pub struct RawSummary {
    pub bytes: u64,
    pub batches: u64,
    pub end: i64,
    pub fetches: u64,
}

/// The arguments that run this bench binary's `raw` mode against one partition.
pub fn raw_args(bootstrap: &str, topic: &str) -> Vec<String> {
    [
        "raw",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partition",
        "0",
    ]
    .map(String::from)
    .to_vec()
}

/// One untimed raw loop through this bench binary, to learn what the partition holds.
pub fn raw_summary(args: &[String]) -> RawSummary {
    let me = std::env::current_exe().expect("current exe");
    let out = Command::new(me).args(args).output().expect("raw loop");
    assert!(out.status.success(), "raw loop failed: {}", out.status);
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k}= in the raw loop's {line:?}"))
    };
    RawSummary {
        bytes: field("bytes"),
        batches: field("batches"),
        end: field("end") as i64,
        fetches: field("fetches"),
    }
}

pub fn log_bytes_on_disk(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// `dir/follower.toml` following `topic` into `dir/data` (emptied first), configured further
/// by `tune`.
pub fn write_follower_config(
    dir: &Path,
    bootstrap: &str,
    topic: &str,
    tune: impl FnOnce(support::Config) -> support::Config,
) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).expect("bench dir");
    let data = dir.join("data");
    let _ = std::fs::remove_dir_all(&data);
    let cfg = support::Config::new(&data, bootstrap)
        .follow(topic)
        .apply(tune)
        .write(dir);
    (cfg, data)
}

/// Creates `topic` with `partitions` partitions on `leader` and produces 100 records of ~50
/// bytes to each, one batch each; returns each partition's end offset.
pub fn produce_spread(leader: &mut support::Leader, topic: &str, partitions: usize) -> Vec<i64> {
    leader.create_topic(topic, partitions as i32);
    let r = leader.ok(serde_json::json!({"cmd": "produce_spread", "topic": topic, "partitions": partitions, "count": 100, "value_size": 50, "batch_records": 100, "timeout_s": 1800}));
    let ends: Vec<i64> = r["ends"]
        .as_array()
        .expect("ends")
        .iter()
        .map(|v| v.as_i64().unwrap_or(0))
        .collect();
    assert_eq!(ends.len(), partitions, "ends from produce_spread");
    ends
}

/// The fetch settings every timed follower uses: 8 MB fetches, as the raw loop's.
pub fn fetch_8mb(c: support::Config) -> support::Config {
    c.set("fetch.max_bytes", 8388608)
        .set("fetch.partition_max_bytes", 8388608)
}

/// The daemon binary `bin` (this build's is `support::bin()`; another build's, to compare
/// side by side) on `cfg`, quiet but for warnings.
pub fn spawn_follower(bin: &Path, cfg: &Path) -> Child {
    Command::new(bin)
        .args(["run", "--config"])
        .arg(cfg)
        .env("RF_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start follower")
}

/// Runs the daemon binary `bin` on `cfg` from its start until partition `topic`-0 in `data` holds `total`
/// bytes, then stops it with SIGTERM and checks it ends at offset `end`. Wall time from the
/// spawn, CPU and peak RSS from `/proc` just before the signal.
pub fn follow_until_caught_up(
    bin: &Path,
    cfg: &Path,
    data: &Path,
    topic: &str,
    total: u64,
    end: i64,
    tck: f64,
) -> Sample {
    let t0 = Instant::now();
    let mut child = spawn_follower(bin, cfg);
    let pdir = data.join(format!("{topic}-0"));
    while log_bytes_on_disk(&pdir) < total {
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "follower did not catch up"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall = t0.elapsed().as_secs_f64();
    let (cpu, hwm, _, _) = proc_figures(child.id(), tck);
    terminate(&mut child, "follower");
    assert_eq!(log_bytes_on_disk(&pdir), total, "follower bytes");
    assert_eq!(support::log_end(data, topic, 0), end, "follower log end");
    Sample {
        wall,
        cpu,
        rss_mb: hwm,
    }
}

/// SIGTERM, then the exit, which must be clean.
pub fn terminate(child: &mut Child, what: &str) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let st = child
        .wait()
        .unwrap_or_else(|e| panic!("wait for {what}: {e}"));
    assert!(st.success(), "{what} exit {st}");
}

/// Open file descriptors of a live process (0 once it is gone).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The local log end of one partition directory, read from its newest non-empty segment
/// (the last complete batch's last offset + 1); -1 when it holds no batch yet. Cheap enough
/// to poll thousands of partitions: one small read each.
pub fn local_log_end(pdir: &Path) -> i64 {
    let Ok(rd) = std::fs::read_dir(pdir) else {
        return -1;
    };
    let mut logs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    for seg in logs.iter().rev() {
        let Ok(bytes) = std::fs::read(seg) else {
            continue;
        };
        if let Some(last) = BatchIter::new(&bytes, usize::MAX)
            .map(|(h, _, _)| h.last_offset)
            .last()
        {
            return last + 1;
        }
    }
    -1
}

/// `replica-follower ARGS` under `sh -c 'ulimit -n NOFILE && exec …'` (so the child's pid is
/// the daemon's), `RF_LOG=info`, stdout and stderr appended to `log`.
pub fn spawn_limited(args: &[&str], nofile: u32, log: &Path) -> Child {
    spawn_limited_bin(support::bin(), args, nofile, log)
}

/// [`spawn_limited`] with another build of the daemon, `bin`.
pub fn spawn_limited_bin(bin: &str, args: &[&str], nofile: u32, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("daemon log");
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(bin)
        .args(args)
        .env("RF_LOG", "info")
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("start daemon")
}

/// A daemon log's lines at WARN or ERROR (the level is the second field), and those that
/// name a descriptor shortage (EMFILE, "Too many open files") at any level.
pub fn log_problems(text: &str) -> (Vec<String>, Vec<String>) {
    let warn_err = text
        .lines()
        .filter(|l| matches!(l.split_whitespace().nth(1), Some("WARN" | "ERROR")))
        .map(String::from)
        .collect();
    let emfile = text
        .lines()
        .filter(|l| l.contains("EMFILE") || l.contains("Too many open files"))
        .map(String::from)
        .collect();
    (warn_err, emfile)
}
