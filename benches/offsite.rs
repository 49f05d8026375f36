//! Offsite benchmark: upload throughput against the local disk write rate, and the
//! CPU per GB of sealing and uploading with and without encryption, side by side in one run.
//! Run it with `bash benches/offsite.sh` (see the README).
//!
//! Each repetition measures, on `--mib N` MiB (256) cut into pieces of `upload::PIECE_MAX`
//! (16 MiB, the largest piece the uploader puts), from four distinct pseudo-random buffers:
//! 1. `disk`: the pieces written to one file in `target/bench/offsite` (the filesystem of the
//!    replica's data dirs here), then `fsync`: the rate the replica itself writes at best.
//! 2. What the uploader spends before any byte leaves: `copy`, each piece copied into a new
//!    buffer (what sealing costs before its own work); `sha256`, the SHA-256 every PUT sends
//!    as its checksum; `seal`, `envelope::seal` of every piece, plain (CRC-32C) and encrypted
//!    (AES-256-GCM in 64 KiB chunks).
//! 3. `put`: `bucket::put` of every piece (seal, SHA-256 of the body, the existence check,
//!    the conditional PUT), plain and encrypted, to each S3 server on loopback, straight to
//!    the server (not through the test proxy): s3s-fs (Rust, stores files, checks the SigV4
//!    signature and the SHA-256) and moto (Python).
//!
//! The client's CPU is that of the bench's one working thread (`CLOCK_THREAD_CPUTIME_ID`; the
//! daemon's uploader is one thread too, and the bench's other threads are the idle test
//! proxies, whose CPU is reported apart), the server's is utime + stime from
//! `/proc/<pid>/stat`, over the same window; the seconds each waited for a CPU while
//! runnable come from `schedstat`, so the other load of a shared machine shows. A `sync`
//! (untimed) before each timed part keeps one part's write-back out of the next. The figures
//! are medians over `--reps N` (3); plain and encrypted alternate which goes first. The
//! ratios are taken per repetition, from parts measured a minute apart at most, then their
//! median is shown: the machine is shared and noisy.
//!
//! MB is 10^6 bytes, GB 10^9.
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

use common::{clk_tck, median, opt, proc_figures};
use replica_follower::offsite::envelope::{self, Key};
use replica_follower::offsite::settings::Offsite;
use replica_follower::offsite::store::{Put, Store, StoreSettings};
use replica_follower::offsite::{bucket, upload};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::s3::{Kind, S3Server};

const PIECE: usize = upload::PIECE_MAX as usize;
const BUCKET: &str = "bench";

/// One timed part: bytes handled, wall seconds, the CPU seconds of the thread that did the
/// work and the seconds it waited for a CPU while runnable, the CPU of the rest of this
/// process, and the server's CPU and wait.
#[derive(Debug, Clone, Copy)]
struct Run {
    bytes: u64,
    wall: f64,
    cpu: f64,
    wait: f64,
    other_threads_cpu: f64,
    server_cpu: Option<f64>,
    server_wait: Option<f64>,
}

impl Run {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall
    }
    fn cpu_per_gb(&self) -> f64 {
        self.cpu / (self.bytes as f64 / 1e9)
    }
    fn server_per_gb(&self) -> Option<f64> {
        self.server_cpu.map(|s| s / (self.bytes as f64 / 1e9))
    }
    /// The share of the wall time the working thread ran or waited to run.
    fn client_share(&self) -> f64 {
        (self.cpu + self.wait) / self.wall
    }
    /// The same for the server.
    fn server_share(&self) -> f64 {
        (self.server_cpu.unwrap_or(0.0) + self.server_wait.unwrap_or(0.0)) / self.wall
    }
}

/// Seconds the threads of `pid` have waited on a run queue (the second field of each
/// thread's `/proc/<pid>/task/<tid>/schedstat`): how much the machine's other load delayed
/// it. Threads that ended are not counted.
fn runqueue_wait(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    ns as f64 * 1e-9
}

/// CPU seconds the calling thread has used.
fn thread_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// CPU seconds this process has used, all threads.
fn process_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Seconds the calling thread has waited on a run queue.
fn thread_wait() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 * 1e-9)
}

/// Times `f` over `bytes`, with the CPU of this process and of `server` (a pid).
fn measure(bytes: u64, server: Option<u32>, tck: f64, f: impl FnOnce()) -> Run {
    let _ = Command::new("sync").status();
    let s0 = server.map(|pid| (proc_figures(pid, tck).0, runqueue_wait(pid)));
    let w0 = thread_wait();
    let p0 = process_cpu();
    let c0 = thread_cpu();
    let t0 = Instant::now();
    f();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = thread_cpu() - c0;
    let other_threads_cpu = process_cpu() - p0 - cpu;
    let wait = thread_wait() - w0;
    let s1 = server.map(|pid| (proc_figures(pid, tck).0, runqueue_wait(pid)));
    let (server_cpu, server_wait) = match s0.zip(s1) {
        Some(((c0, w0), (c1, w1))) => (Some(c1 - c0), Some((w1 - w0).max(0.0))),
        None => (None, None),
    };
    Run {
        bytes,
        wall,
        cpu,
        wait,
        other_threads_cpu,
        server_cpu,
        server_wait,
    }
}

/// Four distinct buffers of one piece each (xorshift bytes: nothing compresses or repeats
/// within a piece), so consecutive pieces do not come from the CPU cache.
fn buffers() -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..4)
        .map(|_| {
            let mut b = Vec::with_capacity(PIECE);
            while b.len() < PIECE {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.extend_from_slice(&x.to_le_bytes());
            }
            b
        })
        .collect()
}

/// The pieces of `total` bytes: `(index, bytes)`, each at most [`PIECE`].
fn pieces(bufs: &[Vec<u8>], total: u64) -> impl Iterator<Item = (usize, &[u8])> {
    let count = (total as usize).div_ceil(PIECE);
    (0..count).map(move |i| {
        let len = (total as usize - i * PIECE).min(PIECE);
        (i, &bufs[i % bufs.len()][..len])
    })
}

fn disk_write(dir: &Path, bufs: &[Vec<u8>], total: u64, tck: f64) -> Run {
    let path = dir.join("disk.bin");
    let run = measure(total, None, tck, || {
        let mut f = std::fs::File::create(&path).expect("create disk.bin");
        for (_, p) in pieces(bufs, total) {
            f.write_all(p).expect("write disk.bin");
        }
        f.sync_all().expect("fsync disk.bin");
    });
    std::fs::remove_file(&path).expect("remove disk.bin");
    run
}

/// The part of sealing that is not the seal's own work: a fresh buffer per piece (zeroed
/// pages from the kernel) and one copy into it.
fn copy(bufs: &[Vec<u8>], total: u64, tck: f64) -> Run {
    measure(total, None, tck, || {
        for (_, p) in pieces(bufs, total) {
            std::hint::black_box(p.to_vec());
        }
    })
}

/// The SHA-256 `Store::put_new` sends as `x-amz-checksum-sha256`, alone.
fn sha256(bufs: &[Vec<u8>], total: u64, tck: f64) -> Run {
    measure(total, None, tck, || {
        for (_, p) in pieces(bufs, total) {
            std::hint::black_box(Sha256::digest(p));
        }
    })
}

fn seal(key: Option<&Key>, bufs: &[Vec<u8>], total: u64, tck: f64) -> Run {
    measure(total, None, tck, || {
        for (i, p) in pieces(bufs, total) {
            let sealed = envelope::seal(key, &format!("seal/{i:05}"), p).expect("seal");
            std::hint::black_box(&sealed);
        }
    })
}

fn put(o: &Offsite, pid: u32, tag: &str, bufs: &[Vec<u8>], total: u64, tck: f64) -> Run {
    measure(total, Some(pid), tck, || {
        for (i, p) in pieces(bufs, total) {
            let name = format!("{tag}/{i:05}");
            match bucket::put(o, &name, p) {
                Ok(Put::Created) => {}
                other => panic!("put {name} to {}: {other:?}", o.location),
            }
        }
    })
}

/// A client for `server`'s bucket, straight to the server, encrypting with `key` if given.
fn offsite(server: &S3Server, key: Option<Key>) -> Offsite {
    let store = Store::new(StoreSettings {
        endpoint: server.direct.clone(),
        bucket: server.bucket.clone(),
        region: "us-east-1".into(),
        access_key: server.access_key.clone(),
        secret_key: server.secret_key.clone(),
        session_token: None,
        timeout: Duration::from_secs(600),
    })
    .expect("store");
    Offsite {
        store,
        key,
        prefix: String::new(),
        max_delay: Duration::from_secs(1),
        location: format!("{}/{}", server.direct, server.bucket),
    }
}

fn server_name(kind: Kind) -> &'static str {
    match kind {
        Kind::S3sFs => "s3s-fs",
        Kind::Moto => "moto",
    }
}

/// A row of the table: a name and its runs, one per repetition.
struct Row {
    name: String,
    runs: Vec<Run>,
    /// The server's name for `put` rows.
    server: Option<&'static str>,
}

impl Row {
    fn new(name: impl Into<String>, server: Option<&'static str>) -> Row {
        Row {
            name: name.into(),
            runs: Vec::new(),
            server,
        }
    }
    fn med(&self, f: impl Fn(&Run) -> f64) -> f64 {
        median(self.runs.iter().map(f).collect())
    }
}

/// Which side bounded a `put` row. A put is a request and its answer, so client and server
/// mostly take turns: the side that ran (or waited to run) for more of the wall time bounds
/// it.
fn bound(row: &Row) -> &'static str {
    let Some(server) = row.server else {
        return "";
    };
    if row.med(Run::server_share) >= row.med(Run::client_share) {
        server
    } else {
        "client"
    }
}

/// The 1-minute load average.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

/// `--key VALUE` from the arguments, else `default`.
fn opt_str(args: &[String], key: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn main() {
    let Some(args) = common::bench_args("benches/offsite.sh") else {
        return;
    };
    let reps = opt(&args, "--reps", 3).max(1);
    let mib = opt(&args, "--mib", 256).max(1);
    let servers = opt_str(&args, "--servers", "s3s-fs,moto");
    let total = (mib as u64) << 20;
    let tck = clk_tck();
    let work = support::manifest_dir().join("target/bench/offsite");
    std::fs::create_dir_all(&work).expect("target/bench/offsite");
    let dir = tempfile::tempdir_in(&work).expect("tempdir in target/bench/offsite");
    let key = Key::from_bytes([0x5a; 32]);
    let bufs = buffers();
    let load_start = loadavg();

    let mut started = Vec::new();
    for s in servers.split(',').filter(|s| !s.is_empty()) {
        let server = match s {
            "s3s-fs" => S3Server::s3s_fs(BUCKET),
            "moto" => S3Server::moto(BUCKET),
            other => panic!("--servers: unknown server {other:?} (s3s-fs, moto)"),
        };
        let plain = offsite(&server, None);
        let encrypted = offsite(&server, Some(key.clone()));
        // Untimed warm-up: the first connection and whatever the server sets up on first use.
        for (o, tag) in [(&plain, "warm/plain"), (&encrypted, "warm/encrypted")] {
            bucket::put(o, tag, &bufs[0][..1 << 20]).expect("warm-up put");
        }
        started.push((server, plain, encrypted));
    }

    let mut disk = Row::new("disk write + fsync", None);
    let mut copied = Row::new("copy to a new buffer", None);
    let mut hashed = Row::new("SHA-256 (the PUT's)", None);
    let mut seal_plain = Row::new("seal, plain", None);
    let mut seal_enc = Row::new("seal, encrypted", None);
    let mut puts: Vec<(Row, Row)> = started
        .iter()
        .map(|(s, _, _)| {
            let n = server_name(s.kind);
            (
                Row::new(format!("put to {n}, plain"), Some(n)),
                Row::new(format!("put to {n}, encrypted"), Some(n)),
            )
        })
        .collect();
    eprintln!(
        "{mib} MiB in {} pieces of {} MiB, {reps} repetitions",
        total.div_ceil(PIECE as u64),
        PIECE >> 20
    );
    for rep in 1..=reps {
        let plain_first = rep % 2 == 1;
        disk.runs.push(disk_write(dir.path(), &bufs, total, tck));
        copied.runs.push(copy(&bufs, total, tck));
        hashed.runs.push(sha256(&bufs, total, tck));
        let order = if plain_first {
            [None, Some(&key)]
        } else {
            [Some(&key), None]
        };
        for k in order {
            let run = seal(k, &bufs, total, tck);
            match k {
                None => seal_plain.runs.push(run),
                Some(_) => seal_enc.runs.push(run),
            }
        }
        for ((server, plain, encrypted), (row_plain, row_enc)) in started.iter().zip(&mut puts) {
            let pid = server.pid();
            for encrypt in [!plain_first, plain_first] {
                if encrypt {
                    let tag = format!("rep{rep}/encrypted");
                    row_enc
                        .runs
                        .push(put(encrypted, pid, &tag, &bufs, total, tck));
                } else {
                    let tag = format!("rep{rep}/plain");
                    row_plain
                        .runs
                        .push(put(plain, pid, &tag, &bufs, total, tck));
                }
            }
        }
        let line: Vec<String> = [&disk, &copied, &hashed, &seal_plain, &seal_enc]
            .into_iter()
            .chain(puts.iter().flat_map(|(a, b)| [a, b]))
            .map(|r| {
                format!(
                    "{} {:.0} MB/s",
                    r.name,
                    r.runs.last().map_or(f64::NAN, Run::mb_s)
                )
            })
            .collect();
        eprintln!("rep {rep}: {}", line.join(", "));
    }
    drop(started);

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "\nOffsite: {mib} MiB in pieces of {} MiB, on {cores} cores; medians of {reps} runs \
         (MB = 10^6 bytes, CPU s per GB = per 10^9 bytes)\n",
        PIECE >> 20
    );
    println!(
        "| part                      | MB/s    | client CPU s/GB | server CPU s/GB | client run+wait % | server run+wait % | bound by | every run (MB/s) |"
    );
    println!(
        "|---------------------------|---------|-----------------|-----------------|-------------------|-------------------|----------|------------------|"
    );
    let all: Vec<&Row> = [&disk, &copied, &hashed, &seal_plain, &seal_enc]
        .into_iter()
        .chain(puts.iter().flat_map(|(a, b)| [a, b]))
        .collect();
    for r in &all {
        let (server, server_share) = if r.server.is_some() {
            (
                format!("{:.2}", r.med(|x| x.server_per_gb().unwrap_or(f64::NAN))),
                format!("{:.0}", 100.0 * r.med(Run::server_share)),
            )
        } else {
            ("-".to_string(), "-".to_string())
        };
        println!(
            "| {:<25} | {:>7.1} | {:>15.2} | {:>15} | {:>17} | {:>17} | {:<8} | {} |",
            r.name,
            r.med(Run::mb_s),
            r.med(Run::cpu_per_gb),
            server,
            format!("{:.0}", 100.0 * r.med(Run::client_share)),
            server_share,
            bound(r),
            r.runs
                .iter()
                .map(|x| format!("{:.0}", x.mb_s()))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }

    println!(
        "\nrun+wait %: the share of the wall time the side's threads ran or waited for a CPU \
         (client: the bench's one working thread, as the daemon's uploader is one thread; \
         server: the server's process); bound by: the larger share. The working thread waited for a CPU {:.0} % of the timed wall time \
         (other load on the machine); the bench's other threads (the test proxies, idle) used \
         {:.2} s of CPU in all; load average {} at the start, {} at the end.",
        100.0
            * all
                .iter()
                .flat_map(|r| &r.runs)
                .map(|x| x.wait)
                .sum::<f64>()
            / all
                .iter()
                .flat_map(|r| &r.runs)
                .map(|x| x.wall)
                .sum::<f64>(),
        all.iter()
            .flat_map(|r| &r.runs)
            .map(|x| x.other_threads_cpu)
            .sum::<f64>(),
        load_start,
        loadavg(),
    );

    // Ratios per repetition (parts of one repetition ran minutes apart at most), then medians.
    let per_rep = |a: &Row, b: &Row, f: &dyn Fn(&Run) -> f64| -> (f64, String) {
        let v: Vec<f64> = a
            .runs
            .iter()
            .zip(&b.runs)
            .map(|(x, y)| f(x) / f(y))
            .collect();
        let each = v
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ");
        (median(v), each)
    };
    println!("\nRatios (median of the per-run ratios; every run in brackets):");
    for (p, e) in &puts {
        for r in [p, e] {
            let (m, each) = per_rep(r, &disk, &Run::mb_s);
            println!("  {} MB/s / disk MB/s = {m:.3} [{each}]", r.name);
        }
    }
    let (m, each) = per_rep(&seal_enc, &seal_plain, &Run::cpu_per_gb);
    println!("  seal CPU/GB, encrypted / plain = {m:.2} [{each}]");
    for (p, e) in &puts {
        let (m, each) = per_rep(e, p, &Run::cpu_per_gb);
        println!(
            "  put to {} client CPU/GB, encrypted / plain = {m:.2} [{each}]",
            p.server.unwrap_or("?")
        );
    }
}
