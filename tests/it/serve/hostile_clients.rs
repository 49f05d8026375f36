//! Hostile clients of the serve listener cost only their own connections (issue 19).
//!
//! Each attack runs against a live daemon that follows Tansu while a producer writes to the
//! leader steadily and a confluent-kafka consumer tails the listener. The daemon runs under
//! an open-file limit of [`NOFILE`] and an address-space limit (see [`Fixture::start`]) so
//! that a breach of the memory bound kills it. The attacks that cost memory, descriptors or
//! CPU assert, from samples of `/proc/PID` every 200 ms:
//! - the daemon is alive, and its RSS above idle stays under the documented bound
//!   `serve.max_memory_bytes + serve.max_connections × 256 KiB`;
//! - its log (at debug level, so that nothing is hidden) names no EMFILE ("Too many open
//!   files", "open-file limit") and no failed flush or checkpoint;
//! - `recovery-point-offset-checkpoint` keeps advancing during the attack;
//! - descriptors and CPU are back to idle within 5 s of the attackers leaving;
//! - the replica's high watermark reaches the leader's end shortly after;
//! - the consumer reads every write within 5 s of the leader acknowledging it.
//!
//! The smaller attacks assert Kafka's answers: one answer per partition and the broker-side
//! ceiling `serve.fetch_max_bytes`, ILLEGAL_SASL_STATE on a PLAINTEXT listener,
//! INVALID_REQUEST for an invalid isolation level, an idle timeout covering a dripped
//! request, follower priority only for `serve.follower_addresses`, and
//! `serve.max_connections_per_ip`.
//!
//! The attacks run one at a time, and beside no other heavy test ([`support::heavy`]): they
//! measure the machine. Each prints its figures
//! (`cargo test --features test-hooks --test it serve::hostile_clients -- --nocapture`). With
//! `HOSTILE_CLIENTS_OLD_CONFIG=1` the config leaves out the `[serve]` keys issue 19 added,
//! so that a build from before them can be measured with the same attacks; with
//! `HOSTILE_CLIENTS_NO_AS_LIMIT=1` the address space is not limited, to measure how far
//! memory goes (the limit is what the acceptance asks for).

use crate::support;
use crate::support::hostile::{self, Attackers, Monitor, Producer, Sample, Tail};
use crate::support::{Config, Daemon, Leader};
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::codec::Reader;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{self, FetchPartition, FetchRequest};
use replica_follower::protocol::list_offsets;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOPIC: &str = "hostile";
/// `serve.max_memory_bytes` of every daemon here.
const MAX_MEMORY: u64 = 128 << 20;
/// `serve.max_connections` of the attacks that open many connections.
const MAX_CONNECTIONS: u64 = 300;
/// The fixed allowance per connection in the documented bound.
const PER_CONNECTION: u64 = 256 << 10;
/// The documented bound on RSS above idle.
const RSS_BOUND: u64 = MAX_MEMORY + MAX_CONNECTIONS * PER_CONNECTION;
/// The daemon's open-file limit: low, so that descriptor exhaustion is reached quickly.
const NOFILE: u64 = 4096;
/// Descriptors above the idle count still counted as idle: the consumer's reconnections and
/// segment files the log holds open within its budget come and go.
const FD_SLACK: u64 = 16;
/// CPU ticks a second above the busiest idle second still counted as idle.
const CPU_SLACK: u64 = 20;
/// Bounds of the acceptance: back to idle, the consumer's latency, recovery point stalls.
const BACK_WITHIN: f64 = 5.0;
const LATENCY_BOUND: f64 = 5.0;
/// How long after the attackers leave the figures are watched (longer with
/// `HOSTILE_CLIENTS_OBSERVE_SECS`, to measure how long an older build takes).
fn observe() -> Duration {
    let secs = std::env::var("HOSTILE_CLIENTS_OBSERVE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    Duration::from_secs(secs)
}

/// Whether to leave out the `[serve]` keys issue 19 added (to measure an older build).
fn old_config() -> bool {
    std::env::var_os("HOSTILE_CLIENTS_OLD_CONFIG").is_some()
}

/// What an attack's daemon looked like before it: maxima over 3 s.
#[derive(Debug, Clone, Copy, Default)]
struct Idle {
    rss_kib: u64,
    fds: u64,
    cpu_ticks: u64,
}

/// A daemon following Tansu's `hostile-0`, a producer writing to the leader, a consumer of
/// the listener, and the daemon's samples.
struct Fixture {
    // Dropped in this order: the consumer and producer first, the daemon, the leader last.
    tail: Tail,
    producer: Option<Producer>,
    monitor: Monitor,
    daemon: Daemon,
    data: PathBuf,
    addr: SocketAddr,
    address_space_kib: u64,
    idle: Idle,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// Tansu with `preload` records in `hostile-0` (about 200 bytes each), a daemon with
    /// `serve` settings (and `issue19` ones unless [`old_config`]) caught up with it, the
    /// producer and the consumer running; the daemon's address space limited.
    fn start(
        serve: impl FnOnce(Config) -> Config,
        issue19: impl FnOnce(Config) -> Config,
        preload: usize,
    ) -> Fixture {
        Fixture::start_with_segments(serve, issue19, preload, 1 << 20)
    }

    /// [`Fixture::start`] with segments of `segment_bytes`.
    fn start_with_segments(
        serve: impl FnOnce(Config) -> Config,
        issue19: impl FnOnce(Config) -> Config,
        preload: usize,
        segment_bytes: i64,
    ) -> Fixture {
        let mut leader = Leader::start("tansu", 1);
        leader.create_topic(TOPIC, 1);
        let mut end = 0;
        let mut left = preload;
        while left > 0 {
            let n = left.min(10_000);
            end = leader.produce(TOPIC, 0, n, "none", left as u64).1 + 1;
            left -= n;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let addr: SocketAddr = format!("127.0.0.1:{}", support::free_port())
            .parse()
            .expect("address");
        let cfg = Config::new(&data, &leader.bootstrap)
            .follow(TOPIC)
            .set("log.segment_bytes", segment_bytes)
            .set("log.flush_interval_ms", 100)
            .set("checkpoint.interval_ms", 200)
            .set("fetch.max_wait_ms", 100)
            .set("fetch.backoff_ms", 100)
            .set("serve.listen", addr.to_string())
            .apply(serve);
        let cfg = if old_config() {
            cfg
        } else {
            cfg.apply(issue19)
        }
        .write(dir.path());
        // MALLOC_ARENA_MAX: glibc reserves 64 MiB of address space per malloc arena, up to 8
        // per core, as threads first allocate; two arenas keep that reservation small and
        // fixed, so that the address-space limit measures memory used, not arenas reserved.
        let nofile = format!("--nofile={NOFILE}");
        let mut daemon = Daemon::start_wrapped(
            &cfg,
            &[("RF_LOG", "debug"), ("MALLOC_ARENA_MAX", "2")],
            &["prlimit", &nofile, "--"],
        );
        let monitor = Monitor::start(daemon.pid(), data.clone());
        let hw = data.join("replication-offset-checkpoint");
        let deadline = Instant::now() + Duration::from_secs(90);
        while hostile::checkpoint_offset(&hw) < end {
            assert!(
                daemon.is_running(),
                "the daemon exited at start; its log ends:\n{}",
                tail_of(&daemon.log_text(), 5)
            );
            assert!(
                Instant::now() < deadline,
                "the replica did not reach the preloaded end {end} within 90 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let producer = Producer::start(leader, TOPIC, 20);
        let tail = Tail::start(&addr.to_string(), TOPIC, end);
        support::wait_until(
            Duration::from_secs(30),
            "the consumer to read a produced record from the listener",
            || tail.highest() >= end,
        );
        let mut f = Fixture {
            tail,
            producer: Some(producer),
            monitor,
            daemon,
            data,
            addr,
            address_space_kib: 0,
            idle: Idle::default(),
            _dir: dir,
        };
        f.limit_address_space();
        f
    }

    fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// Sets the daemon's RLIMIT_AS from the documented bound plus what it reserves without
    /// using: its address space at idle (binary, libraries, the log's mappings, thread
    /// stacks of its own threads), plus [`MAX_CONNECTIONS`] times what one idle connection
    /// adds (measured: 40 connections, each answered once; mostly the thread's stack
    /// reservation), plus the bound, plus 64 MiB for the heap's fragmentation and the
    /// mappings that come and go (index files of new segments, a second malloc heap).
    fn limit_address_space(&mut self) {
        let before = hostile::sample(self.pid(), &self.data);
        let conns: Vec<TcpStream> = (0..40)
            .map(|i| {
                let mut s = hostile::connect_from(hostile::spread(i), self.addr)
                    .expect("an idle connection");
                hostile::round_trip(&mut s, &hostile::api_versions()).expect("ApiVersions");
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let with = hostile::sample(self.pid(), &self.data);
        drop(conns);
        let per_connection = with.vm_kib.saturating_sub(before.vm_kib) / 40;
        let limit = before.vm_kib + MAX_CONNECTIONS * per_connection + (RSS_BOUND >> 10) + 65536;
        if std::env::var_os("HOSTILE_CLIENTS_NO_AS_LIMIT").is_some() {
            eprintln!("address space: not limited (HOSTILE_CLIENTS_NO_AS_LIMIT)");
            return;
        }
        let ok = std::process::Command::new("prlimit")
            .args(["--pid", &self.pid().to_string()])
            .arg(format!("--as={}", limit << 10))
            .status()
            .expect("run prlimit");
        assert!(ok.success(), "prlimit --as on the daemon failed");
        eprintln!(
            "address space: {} MiB at idle, {} KiB per idle connection, limit {} MiB",
            before.vm_kib >> 10,
            per_connection,
            limit >> 10
        );
        self.address_space_kib = limit;
    }

    /// Watches the idle daemon for 3 s.
    fn measure_idle(&mut self) {
        let from = Instant::now();
        std::thread::sleep(Duration::from_secs(3));
        let s = self.monitor.between(from, Instant::now());
        self.idle = Idle {
            rss_kib: s.iter().map(|s| s.rss_kib).max().unwrap_or(0),
            fds: s.iter().map(|s| s.fds).max().unwrap_or(0),
            cpu_ticks: hostile::cpu_windows(&s)
                .iter()
                .map(|w| w.1)
                .max()
                .unwrap_or(0),
        };
    }

    fn producer(&self) -> &Producer {
        self.producer.as_ref().expect("producing")
    }

    /// The daemon's log lines holding any of `needles`.
    fn log_lines(&self, needles: &[&str]) -> Vec<String> {
        self.daemon
            .log_text()
            .lines()
            .filter(|l| needles.iter().any(|n| l.contains(n)))
            .map(str::to_string)
            .collect()
    }

    /// Asserts the daemon lives and the replica reaches what the leader acknowledged
    /// until now within 10 s; the failures are added to `failures`.
    fn still_following(&mut self, failures: &mut Vec<String>) {
        let target = self.producer().end();
        let hw = self.data.join("replication-offset-checkpoint");
        let deadline = Instant::now() + Duration::from_secs(10);
        while hostile::checkpoint_offset(&hw) < target && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if !self.daemon.is_running() {
            failures.push(format!(
                "the daemon died; its log ends:\n{}",
                tail_of(&self.daemon.log_text(), 5)
            ));
        }
        let at = hostile::checkpoint_offset(&hw);
        if at < target {
            failures.push(format!(
                "the replica's high watermark is {at} 10 s after the leader acknowledged up to {target}"
            ));
        }
    }

    /// Runs `count` attackers sending `request` once, holding their sockets unread for
    /// `hold`, then leaving at once; returns the figures and every broken bound.
    fn attack(
        &mut self,
        name: &str,
        count: usize,
        request: Vec<u8>,
        hold: Duration,
    ) -> (Figures, Vec<String>) {
        self.measure_idle();
        let idle = self.idle;
        let start = Instant::now();
        let attackers = Attackers::start(self.addr, count, Arc::new(request));
        let sent = attackers.sent.clone();
        std::thread::sleep(hold);
        let sent = sent.load(std::sync::atomic::Ordering::SeqCst);
        let left = attackers.leave();
        let target = self.producer().end();
        // Watch until both are back and the replica caught up, or for observe().
        let mut back = (None, None, None);
        while Instant::now() < left + observe() {
            std::thread::sleep(Duration::from_millis(200));
            let after = self.monitor.between(left, Instant::now());
            back = back_to_idle(&after, left, idle, target);
            if back.0.is_some() && back.1.is_some() && back.2.is_some() {
                break;
            }
        }
        let end = Instant::now();
        let during = self.monitor.between(start, left);
        let all = self.monitor.between(start, end);
        let peak_rss = all.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let (latency, late_offset) = hostile::worst_latency(
            &self.producer().acked(),
            &self.tail.seen(),
            start,
            left,
            end,
        );
        let figures = Figures {
            name: name.to_string(),
            clients: count,
            sent,
            idle,
            peak_rss_kib: peak_rss,
            peak_fds: all.iter().map(|s| s.fds).max().unwrap_or(0),
            peak_vm_kib: all.iter().map(|s| s.vm_kib).max().unwrap_or(0),
            cpu_seconds: all
                .last()
                .zip(all.first())
                .map_or(0.0, |(l, f)| l.ticks.saturating_sub(f.ticks) as f64 / 100.0),
            peak_cpu_ticks: hostile::cpu_windows(&all)
                .iter()
                .map(|w| w.1)
                .max()
                .unwrap_or(0),
            died: !self.daemon.is_running() || all.iter().any(|s| !s.alive),
            emfile: self.log_lines(&["Too many open files", "os error 24", "open-file limit ("]),
            failed_durability: self.log_lines(&["flush failed", "checkpoint failed", "fsync"]),
            recovery_stall: recovery_stall(&during, start, left),
            fds_back: back.0,
            cpu_back: back.1,
            caught_up: back.2,
            latency,
            late_offset,
            address_space_mib: self.address_space_kib >> 10,
        };
        eprintln!("{figures}");
        let failures = figures.broken_bounds();
        (figures, failures)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(p) = self.producer.take() {
            drop(p.stop());
        }
    }
}

/// The last `n` lines of `text`.
fn tail_of(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Seconds after `left` until descriptors, CPU and the replica's high watermark (≥
/// `target`) were back, from the samples taken since.
fn back_to_idle(
    after: &[Sample],
    left: Instant,
    idle: Idle,
    target: i64,
) -> (Option<f64>, Option<f64>, Option<f64>) {
    let secs = |at: Instant| at.saturating_duration_since(left).as_secs_f64();
    let fds = after
        .iter()
        .find(|s| s.alive && s.fds <= idle.fds + FD_SLACK)
        .map(|s| secs(s.at));
    // Windows wholly after the attackers left, of a live daemon (a dead one burns nothing).
    let alive: Vec<Sample> = after.iter().filter(|s| s.alive).copied().collect();
    let cpu = hostile::cpu_windows(&alive)
        .iter()
        .find(|(at, ticks)| {
            at.saturating_duration_since(left) >= Duration::from_secs(1)
                && *ticks <= idle.cpu_ticks + CPU_SLACK
        })
        .map(|w| secs(w.0));
    let caught_up = after
        .iter()
        .find(|s| s.high_watermark >= target)
        .map(|s| secs(s.at));
    (fds, cpu, caught_up)
}

/// The longest time in `from..to` the recovery point did not move (seconds).
fn recovery_stall(samples: &[Sample], from: Instant, to: Instant) -> f64 {
    let mut last_move = from;
    let mut last = samples.first().map_or(-1, |s| s.recovery_point);
    let mut worst = 0.0f64;
    for s in samples {
        if s.recovery_point > last {
            worst = worst.max(s.at.duration_since(last_move).as_secs_f64());
            last_move = s.at;
            last = s.recovery_point;
        }
    }
    worst.max(to.saturating_duration_since(last_move).as_secs_f64())
}

/// What one attack did to the daemon.
struct Figures {
    name: String,
    clients: usize,
    sent: usize,
    idle: Idle,
    peak_rss_kib: u64,
    peak_fds: u64,
    peak_vm_kib: u64,
    cpu_seconds: f64,
    peak_cpu_ticks: u64,
    died: bool,
    emfile: Vec<String>,
    failed_durability: Vec<String>,
    recovery_stall: f64,
    fds_back: Option<f64>,
    cpu_back: Option<f64>,
    caught_up: Option<f64>,
    latency: f64,
    late_offset: i64,
    address_space_mib: u64,
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(
        || format!("not within {} s", observe().as_secs()),
        |s| format!("{s:.1} s"),
    )
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "== {}: {} clients ({} sent their request whole)\n\
             idle: RSS {} MiB, {} descriptors, {} CPU ticks/s; address-space limit {} MiB\n\
             peak RSS {} MiB ({} MiB above idle; bound {} MiB), peak VmSize {} MiB, peak descriptors {} (limit {NOFILE}), \
             CPU {:.1} s (peak {} ticks/s), died: {}\n\
             EMFILE lines: {}, failed flush/checkpoint lines: {}\n\
             after the clients left: descriptors back in {}, CPU back in {}, caught up in {}\n\
             recovery point stalled at most {:.1} s; consumer's worst latency {:.1} s (offset {})",
            self.name,
            self.clients,
            self.sent,
            self.idle.rss_kib >> 10,
            self.idle.fds,
            self.idle.cpu_ticks,
            self.address_space_mib,
            self.peak_rss_kib >> 10,
            self.peak_rss_kib.saturating_sub(self.idle.rss_kib) >> 10,
            RSS_BOUND >> 20,
            self.peak_vm_kib >> 10,
            self.peak_fds,
            self.cpu_seconds,
            self.peak_cpu_ticks,
            self.died,
            self.emfile.len(),
            self.failed_durability.len(),
            secs(self.fds_back),
            secs(self.cpu_back),
            secs(self.caught_up),
            self.recovery_stall,
            self.latency,
            self.late_offset,
        )?;
        for l in self.emfile.iter().chain(&self.failed_durability).take(4) {
            write!(f, "\n  log: {l}")?;
        }
        Ok(())
    }
}

impl Figures {
    /// Every bound of the acceptance this attack broke, with its figures.
    fn broken_bounds(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.died {
            out.push(format!(
                "the daemon died (address-space limit {} MiB)",
                self.address_space_mib
            ));
        }
        let above = self.peak_rss_kib.saturating_sub(self.idle.rss_kib) << 10;
        if above > RSS_BOUND {
            out.push(format!(
                "RSS rose {} MiB above idle ({} MiB), over the bound of {} MiB",
                above >> 20,
                self.idle.rss_kib >> 10,
                RSS_BOUND >> 20
            ));
        }
        if !self.emfile.is_empty() {
            out.push(format!(
                "{} log lines name EMFILE (peak {} descriptors of {NOFILE}), first: {}",
                self.emfile.len(),
                self.peak_fds,
                self.emfile[0]
            ));
        }
        if !self.failed_durability.is_empty() {
            out.push(format!(
                "{} log lines name a failed flush or checkpoint, first: {}",
                self.failed_durability.len(),
                self.failed_durability[0]
            ));
        }
        if self.recovery_stall > BACK_WITHIN {
            out.push(format!(
                "the recovery point did not move for {:.1} s during the attack",
                self.recovery_stall
            ));
        }
        if self.fds_back.is_none_or(|s| s > BACK_WITHIN) {
            out.push(format!(
                "descriptors were not back to idle ({} + {FD_SLACK}) within {BACK_WITHIN} s of the clients leaving: {} (peak {})",
                self.idle.fds,
                secs(self.fds_back),
                self.peak_fds
            ));
        }
        if self.cpu_back.is_none_or(|s| s > BACK_WITHIN) {
            out.push(format!(
                "CPU was not back to idle ({} + {CPU_SLACK} ticks/s) within {BACK_WITHIN} s of the clients leaving: {} ({:.1} CPU s in all)",
                self.idle.cpu_ticks,
                secs(self.cpu_back),
                self.cpu_seconds
            ));
        }
        if self.caught_up.is_none_or(|s| s > 10.0) {
            out.push(format!(
                "the replica had not caught up with the leader 10 s after the clients left: {}",
                secs(self.caught_up)
            ));
        }
        if self.latency > LATENCY_BOUND {
            out.push(format!(
                "the consumer read offset {} {:.1} s after the leader acknowledged it (bound {LATENCY_BOUND} s)",
                self.late_offset, self.latency
            ));
        }
        out
    }
}

fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} bound(s) broken:\n- {}",
        failures.len(),
        failures.join("\n- ")
    );
}

/// The `[serve]` keys of the attacks on memory, descriptors and CPU.
fn budget_keys(c: Config) -> Config {
    c.set("serve.max_memory_bytes", MAX_MEMORY as i64)
}

fn resource_attack(name: &str, preload: usize, count: usize, request: Vec<u8>, hold: Duration) {
    resource_attack_on(name, preload, 1 << 20, count, request, hold)
}

/// [`resource_attack`] on a log of segments of `segment_bytes`.
fn resource_attack_on(
    name: &str,
    preload: usize,
    segment_bytes: i64,
    count: usize,
    request: Vec<u8>,
    hold: Duration,
) {
    let mut f = Fixture::start_with_segments(
        |c| c.set("serve.max_connections", MAX_CONNECTIONS as i64),
        budget_keys,
        preload,
        segment_bytes,
    );
    let (_figures, mut failures) = f.attack(name, count, request, hold);
    f.still_following(&mut failures);
    assert_none(name, &failures);
}

#[test]
fn metadata_flood_of_clients_that_never_read() {
    let _heavy = support::heavy();
    let request = hostile::metadata_flood(340_000);
    assert!(request.len() <= 1 << 20, "{} bytes", request.len());
    resource_attack(
        "Metadata v1 naming 340,000 topics",
        0,
        100,
        request,
        Duration::from_secs(8),
    );
}

#[test]
fn fetch_naming_one_partition_65532_times_never_read() {
    let _heavy = support::heavy();
    let request = hostile::fetch_repeating(4, TOPIC, 0, 65_532, 1 << 20, 0);
    assert!(request.len() <= 1 << 20, "{} bytes", request.len());
    resource_attack(
        "Fetch naming one partition 65,532 times",
        0,
        100,
        request,
        Duration::from_secs(8),
    );
}

/// Each response sends from every segment of a partition of about 500 (8 MB in segments of
/// 16 KiB): 40 clients that never read would hold 20,000 segment files open.
#[test]
fn fetches_from_500_segments_never_read() {
    let _heavy = support::heavy();
    resource_attack_on(
        "Fetch of a partition of 500 segments (descriptors)",
        40_000,
        16 << 10,
        40,
        hostile::fetch_repeating(4, TOPIC, 0, 1, 64 << 20, 0),
        Duration::from_secs(8),
    );
}

#[test]
fn list_offsets_max_timestamp_60000_times_then_gone() {
    let _heavy = support::heavy();
    resource_attack(
        "ListOffsets MAX_TIMESTAMP naming one partition 60,000 times",
        40_000,
        4,
        hostile::list_offsets_repeating(TOPIC, 0, 60_000, list_offsets::MAX_TIMESTAMP, 0),
        Duration::from_secs(3),
    );
}

/// `serve.fetch_max_bytes` of [`a_fetch_repeating_one_partition_gets_one_answer_within_the_ceiling`].
const FETCH_MAX_BYTES: usize = 1 << 20;

#[test]
fn a_fetch_repeating_one_partition_gets_one_answer_within_the_ceiling() {
    let _heavy = support::heavy();
    // About 4 MB in the partition, each item asking for up to 8 MiB.
    let mut f = Fixture::start(
        |c| c,
        |c| c.set("serve.fetch_max_bytes", FETCH_MAX_BYTES as i64),
        20_000,
    );
    let mut failures = Vec::new();
    let mut s = TcpStream::connect(f.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    s.write_all(&hostile::fetch_repeating(4, TOPIC, 0, 65_532, 8 << 20, 0))
        .expect("send the fetch");
    match hostile::read_response(&mut s, 64 << 20) {
        Err(e) => failures.push(format!("no answer: {e}")),
        Ok((size, body)) => {
            eprintln!("the answer to a fetch naming one partition 65,532 times: {size} bytes");
            // The frame holds the records, at most one partition's header and the topic's.
            if size > FETCH_MAX_BYTES + 1024 {
                failures.push(format!(
                    "the answer is {size} bytes, above serve.fetch_max_bytes = {FETCH_MAX_BYTES}"
                ));
            }
            if let Some(body) = body {
                match fetch::decode_response(&body[4..], 4) {
                    Err(e) => failures.push(format!("the answer does not decode: {e}")),
                    Ok(r) => {
                        let answers: usize = r.topics.iter().map(|t| t.1.len()).sum();
                        let records: usize = r
                            .topics
                            .iter()
                            .flat_map(|t| &t.1)
                            .map(|p| p.records.len())
                            .sum();
                        if answers != 1 {
                            failures.push(format!(
                                "{answers} partition answers ({records} record bytes in all), not one"
                            ));
                        }
                        if records == 0 {
                            failures.push("the one answer carries no records".into());
                        }
                    }
                }
            }
        }
    }
    f.still_following(&mut failures);
    assert_none("Fetch naming one partition 65,532 times, read", &failures);
}

#[test]
fn sasl_on_a_plaintext_listener_is_answered_illegal_sasl_state() {
    let _heavy = support::heavy();
    let mut f = Fixture::start(|c| c, |c| c, 0);
    let mut failures = Vec::new();
    let mut s = TcpStream::connect(f.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    match hostile::round_trip(&mut s, &hostile::sasl_handshake()) {
        Err(e) => failures.push(format!(
            "SaslHandshake v1 on the PLAINTEXT listener got no answer ({e}): the connection was closed"
        )),
        Ok(body) => {
            let mut r = Reader::new(&body);
            let _correlation = r.i32("correlation id");
            let error = r.i16("error_code").map(ErrorCode);
            if error != Ok(ErrorCode::ILLEGAL_SASL_STATE) {
                failures.push(format!(
                    "SaslHandshake v1 answered {error:?}, not ILLEGAL_SASL_STATE (34)"
                ));
            }
        }
    }
    f.still_following(&mut failures);
    assert_none("SASL on a PLAINTEXT listener", &failures);
}

/// Fetch v12 of partition 0 at `isolation_level`.
fn fetch_v12(isolation_level: i8) -> Vec<u8> {
    let mut req = support::one_partition_fetch(
        &replica_follower::checkpoint::TopicPartition::new(TOPIC, 0),
        0,
        1 << 20,
    );
    req.isolation_level = isolation_level;
    let mut w = replica_follower::protocol::codec::Writer::new();
    fetch::encode_request(&mut w, 12, &req);
    hostile::frame(ApiKey::Fetch, 12, 1, &w.buf)
}

#[test]
fn an_invalid_isolation_level_is_answered_invalid_request() {
    let _heavy = support::heavy();
    let mut f = Fixture::start(|c| c, |c| c, 0);
    let mut failures = Vec::new();
    let mut s = TcpStream::connect(f.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    // Fetch v12: the top-level error, or the partition's.
    match hostile::round_trip(&mut s, &fetch_v12(7)) {
        Err(e) => failures.push(format!("Fetch with isolation_level 7 got no answer: {e}")),
        Ok(body) => {
            let mut r = Reader::new(&body);
            let _ = replica_follower::protocol::decode_response_header(&mut r, ApiKey::Fetch, 12);
            match fetch::decode_response(&body[r.position()..], 12) {
                Err(e) => failures.push(format!("the Fetch answer does not decode: {e}")),
                Ok(resp) => {
                    let errors: Vec<ErrorCode> = std::iter::once(resp.error)
                        .chain(resp.topics.iter().flat_map(|t| t.1.iter().map(|p| p.error)))
                        .collect();
                    if !errors.contains(&ErrorCode::INVALID_REQUEST) {
                        failures.push(format!(
                            "Fetch with isolation_level 7 answered {errors:?}, no INVALID_REQUEST (42)"
                        ));
                    }
                }
            }
        }
    }
    let mut s = TcpStream::connect(f.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let request = hostile::list_offsets_repeating(
        TOPIC,
        0,
        1,
        replica_follower::protocol::list_offsets::LATEST,
        7,
    );
    match hostile::round_trip(&mut s, &request) {
        Err(e) => failures.push(format!(
            "ListOffsets with isolation_level 7 got no answer: {e}"
        )),
        Ok(body) => {
            let mut r = Reader::new(&body);
            let _ =
                replica_follower::protocol::decode_response_header(&mut r, ApiKey::ListOffsets, 7);
            match list_offsets::decode_response(&body[r.position()..], 7) {
                Err(e) => failures.push(format!("the ListOffsets answer does not decode: {e}")),
                Ok(topics) => {
                    let errors: Vec<ErrorCode> = topics
                        .iter()
                        .flat_map(|t| t.1.iter().map(|p| p.error))
                        .collect();
                    if !errors.contains(&ErrorCode::INVALID_REQUEST) {
                        failures.push(format!(
                            "ListOffsets with isolation_level 7 answered {errors:?}, no INVALID_REQUEST (42)"
                        ));
                    }
                }
            }
        }
    }
    f.still_following(&mut failures);
    assert_none("an invalid isolation level", &failures);
}

#[test]
fn a_client_dripping_a_request_is_closed_by_the_idle_timeout() {
    let _heavy = support::heavy();
    let mut f = Fixture::start(|c| c.set("serve.idle_timeout_ms", 2000), |c| c, 0);
    let mut failures = Vec::new();
    let request = hostile::api_versions();
    let mut s = TcpStream::connect(f.addr).expect("connect");
    let first = Instant::now();
    let mut closed_after = None;
    // One byte every 1.5 s, for at most 15 s.
    for b in &request {
        if s.write_all(std::slice::from_ref(b)).is_err()
            || hostile::closed_within(&mut s, Duration::from_millis(1500))
        {
            closed_after = Some(first.elapsed().as_secs_f64());
            break;
        }
        if first.elapsed() > Duration::from_secs(15) {
            break;
        }
    }
    eprintln!(
        "a client dripping a byte every 1.5 s (idle_timeout_ms = 2000) was closed after {}",
        secs(closed_after)
    );
    if closed_after.is_none_or(|s| s > 4.0) {
        failures.push(format!(
            "a client dripping one byte every 1.5 s was not closed within 4 s of its first byte (idle_timeout_ms = 2000): {}",
            closed_after.map_or_else(
                || format!("still open after {:.1} s", first.elapsed().as_secs_f64()),
                |s| format!("closed after {s:.1} s")
            )
        ));
    }
    f.still_following(&mut failures);
    assert_none("a dripping client", &failures);
}

/// A Fetch v12 of partition 0 from `offset` in session `id` at `epoch`, as `replica_id`.
fn session_fetch(id: i32, epoch: i32, replica_id: i32, offset: Option<i64>) -> Vec<u8> {
    let req = FetchRequest {
        replica_id,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: 1 << 20,
        isolation_level: 0,
        topics: offset
            .map(|o| {
                vec![(
                    TOPIC.to_string(),
                    vec![FetchPartition {
                        partition: 0,
                        current_leader_epoch: -1,
                        fetch_offset: o,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: 1 << 20,
                    }],
                )]
            })
            .unwrap_or_default(),
        topic_ids: Default::default(),
        session_id: id,
        session_epoch: epoch,
        forgotten: Vec::new(),
    };
    let mut w = replica_follower::protocol::codec::Writer::new();
    fetch::encode_request(&mut w, 12, &req);
    hostile::frame(ApiKey::Fetch, 12, 1, &w.buf)
}

/// (top-level error, session id) of a Fetch v12 round trip on `s`.
fn session_round_trip(s: &mut TcpStream, request: &[u8]) -> (ErrorCode, i32) {
    let body = hostile::round_trip(s, request).expect("a Fetch answer");
    let mut r = Reader::new(&body);
    replica_follower::protocol::decode_response_header(&mut r, ApiKey::Fetch, 12)
        .expect("the header");
    let resp = fetch::decode_response(&body[r.position()..], 12).expect("a Fetch v12 answer");
    (resp.error, resp.session_id)
}

#[test]
fn only_configured_followers_evict_consumer_sessions() {
    let _heavy = support::heavy();
    let trusted = Ipv4Addr::new(127, 0, 0, 3);
    let mut f = Fixture::start(
        |c| c.set("serve.max_fetch_sessions", 1),
        |c| c.set("serve.follower_addresses", vec![trusted.to_string()]),
        0,
    );
    let mut failures = Vec::new();
    let connect = |from: Ipv4Addr| {
        let s = hostile::connect_from(from, f.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        s
    };
    // A consumer's session fills the cache.
    let mut consumer = connect(Ipv4Addr::new(127, 0, 0, 1));
    let (error, session) = session_round_trip(&mut consumer, &session_fetch(0, 0, -1, Some(0)));
    assert_eq!(error, ErrorCode::NONE);
    assert!(session > 0, "the consumer got no session");
    let mut epoch = 1;
    // A client claiming to be replica 1 from an address not in serve.follower_addresses.
    let mut claimer = connect(Ipv4Addr::new(127, 0, 0, 2));
    let (error, claimed) = session_round_trip(&mut claimer, &session_fetch(0, 0, 1, Some(0)));
    let (after, _) = session_round_trip(&mut consumer, &session_fetch(session, epoch, -1, None));
    epoch += 1;
    if after != ErrorCode::NONE {
        failures.push(format!(
            "a replica_id 1 from 127.0.0.2 (not in serve.follower_addresses) evicted the consumer's session: \
             its next incremental fetch got {after} (the claimer got {error}, session {claimed})"
        ));
    }
    // A configured follower still evicts it.
    let mut follower = connect(trusted);
    let (error, followed) = session_round_trip(&mut follower, &session_fetch(0, 0, 1, Some(0)));
    let (after, _) = session_round_trip(&mut consumer, &session_fetch(session, epoch, -1, None));
    if followed <= 0 || after != ErrorCode::FETCH_SESSION_ID_NOT_FOUND {
        failures.push(format!(
            "a follower from {trusted} (in serve.follower_addresses) did not take the consumer's slot: \
             it got {error} and session {followed}; the consumer's next fetch got {after}"
        ));
    }
    f.still_following(&mut failures);
    assert_none("session eviction by replica_id", &failures);
}

/// `serve.max_connections_per_ip` of the per-address test.
const PER_IP: usize = 64;

#[test]
fn idle_sockets_from_one_address_do_not_lock_out_another() {
    let _heavy = support::heavy();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let mut f = Fixture::start(
        |c| c.set("serve.max_connections", 256),
        |c| {
            c.set("serve.max_connections_per_ip", PER_IP as i64)
                .set("metrics.listen", metrics.as_str())
        },
        0,
    );
    let mut failures = Vec::new();
    let one = Ipv4Addr::new(127, 0, 0, 2);
    let mut idle: Vec<TcpStream> = (0..256)
        .filter_map(|_| hostile::connect_from(one, f.addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // The connections beyond the limit were closed at once; those within it are open.
    let closed: Vec<usize> = idle
        .iter_mut()
        .enumerate()
        .filter_map(|(i, s)| hostile::closed_within(s, Duration::from_millis(20)).then_some(i))
        .collect();
    eprintln!(
        "256 idle sockets from {one}: {} closed at once (first {:?})",
        closed.len(),
        closed.first()
    );
    let want: Vec<usize> = (PER_IP..256).collect();
    if closed != want {
        failures.push(format!(
            "of 256 idle sockets from {one}, {} were closed at once (first: {:?}), not the {} beyond serve.max_connections_per_ip = {PER_IP}",
            closed.len(),
            closed.first(),
            256 - PER_IP
        ));
    }
    let mut other = TcpStream::connect(f.addr).expect("connect from 127.0.0.1");
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    if let Err(e) = hostile::round_trip(&mut other, &hostile::api_versions()) {
        failures.push(format!(
            "with 256 idle sockets from {one}, a client from 127.0.0.1 got no ApiVersions answer: {e}"
        ));
    }
    // The refusals are visible where an operator looks: /metrics.
    let scraped = support::scrape::scrape(&metrics);
    let refused = scraped.value(
        "replica_follower_serve_refused_connections_total",
        &[("limit", "max_connections_per_ip")],
    );
    let open = scraped.value("replica_follower_serve_connections", &[]);
    if refused != Some((256 - PER_IP) as f64) || open.is_none_or(|n| n < PER_IP as f64) {
        failures.push(format!(
            "/metrics says {refused:?} connections refused by serve.max_connections_per_ip (want {}) and {open:?} open (want ≥ {PER_IP})",
            256 - PER_IP
        ));
    }
    drop(idle);
    f.still_following(&mut failures);
    assert_none("many idle sockets from one address", &failures);
}
