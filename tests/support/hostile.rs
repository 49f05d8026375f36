//! Hostile clients of the serve listener (issue 19) and the gauges that watch the daemon
//! while they attack.
//!
//! - The requests an attacker sends, built once as whole frames ([`metadata_flood`],
//!   [`fetch_repeating`], [`list_offsets_repeating`], [`sasl_handshake`]).
//! - [`connect_from`]: a TCP connection from a chosen loopback source address (127.0.0.x),
//!   so that many attackers are not one address, or are one on purpose.
//! - [`Monitor`]: samples the daemon's `/proc` figures (VmRSS, VmSize, open descriptors,
//!   CPU ticks) and its checkpoint files every [`SAMPLE_EVERY`].
//! - [`Producer`]: writes records to the leader steadily and notes when each write was
//!   acknowledged; [`Tail`]: a confluent-kafka consumer of the listener that notes when each
//!   record arrived. Together they give the well-behaved consumer's latency.

use replica_follower::protocol::ApiKey;
use replica_follower::protocol::codec::Writer;
use replica_follower::protocol::fetch::{self, FetchPartition, FetchRequest};
use replica_follower::protocol::list_offsets::{self, ListOffsetsPartition};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often [`Monitor`] samples.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// A whole request frame (size, header v1 or v2, `body`).
pub fn frame(api: ApiKey, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    replica_follower::protocol::encode_request_header(
        &mut w,
        api,
        version,
        correlation_id,
        "hostile",
    );
    w.buf.extend_from_slice(body);
    let mut out = (w.buf.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&w.buf);
    out
}

/// Metadata v1 naming `topics` one-character topics (repeated names): 3 bytes a topic, so
/// 340,000 of them make a request just under 1 MiB whose answer holds 10 bytes a topic.
pub fn metadata_flood(topics: usize) -> Vec<u8> {
    let mut w = Writer::new();
    w.array_len(topics, false);
    for i in 0..topics {
        let name = [b'a' + (i % 26) as u8];
        w.string(Some(std::str::from_utf8(&name).expect("ASCII")), false);
    }
    frame(ApiKey::Metadata, 1, 1, &w.buf)
}

/// A Fetch at `version` naming `partition` of `topic` `times` times from offset 0, each up
/// to `partition_max_bytes`, the whole response up to `i32::MAX`.
pub fn fetch_repeating(
    version: i16,
    topic: &str,
    partition: i32,
    times: usize,
    partition_max_bytes: i32,
    isolation_level: i8,
) -> Vec<u8> {
    let req = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes: i32::MAX,
        isolation_level,
        topics: vec![(
            topic.to_string(),
            vec![
                FetchPartition {
                    partition,
                    current_leader_epoch: -1,
                    fetch_offset: 0,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes,
                };
                times
            ],
        )],
        topic_ids: Default::default(),
        session_id: 0,
        session_epoch: -1,
        forgotten: Vec::new(),
    };
    let mut w = Writer::new();
    fetch::encode_request(&mut w, version, &req);
    frame(ApiKey::Fetch, version, 1, &w.buf)
}

/// ListOffsets v7 naming `partition` of `topic` `times` times at `timestamp`.
pub fn list_offsets_repeating(
    topic: &str,
    partition: i32,
    times: usize,
    timestamp: i64,
    isolation_level: i8,
) -> Vec<u8> {
    let parts = vec![
        ListOffsetsPartition {
            partition,
            current_leader_epoch: -1,
            timestamp,
        };
        times
    ];
    let mut w = Writer::new();
    list_offsets::encode_request(&mut w, 7, isolation_level, &[(topic.to_string(), parts)]);
    frame(ApiKey::ListOffsets, 7, 1, &w.buf)
}

/// SaslHandshake v1 asking for PLAIN.
pub fn sasl_handshake() -> Vec<u8> {
    let mut w = Writer::new();
    w.string(Some("PLAIN"), false);
    frame(ApiKey::SaslHandshake, 1, 1, &w.buf)
}

/// ApiVersions v0 (answered at every version).
pub fn api_versions() -> Vec<u8> {
    frame(ApiKey::ApiVersions, 0, 1, &[])
}

/// A TCP connection to `to` from `from` (any port).
pub fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None)?;
    rustix::net::bind(&fd, &SocketAddrV4::new(from, 0))?;
    rustix::net::connect(&fd, &to)?;
    Ok(TcpStream::from(fd))
}

/// The `i`-th of many attackers' source address: spread over 127.0.0.10–127.0.0.17, so
/// that a per-address connection limit does not hide what the other limits do.
pub fn spread(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + (i % 8) as u8)
}

/// Reads one response frame: its size, then its body when it is at most `keep` bytes
/// (`None` for the body when larger: the size is what the caller wanted).
pub fn read_response(s: &mut TcpStream, keep: usize) -> std::io::Result<(usize, Option<Vec<u8>>)> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size).max(0) as usize;
    if size > keep {
        return Ok((size, None));
    }
    let mut body = vec![0u8; size];
    s.read_exact(&mut body)?;
    Ok((size, Some(body)))
}

/// Whether the peer closed `s` within `within`: a read returns end of stream or an error
/// other than a timeout. Bytes the server sends meanwhile are read and dropped.
pub fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).expect("set a read timeout");
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// `count` attackers, each from [`spread`]`(i)`, each sending `request` once and then
/// holding its socket without reading until [`Attackers::leave`].
pub struct Attackers {
    release: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// How many got connected and wrote their whole request.
    pub sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl Attackers {
    pub fn start(addr: SocketAddr, count: usize, request: Arc<Vec<u8>>) -> Attackers {
        let release = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads = (0..count)
            .map(|i| {
                let (release, sent, request) = (release.clone(), sent.clone(), request.clone());
                std::thread::Builder::new()
                    .name(format!("attacker-{i}"))
                    .stack_size(64 << 10)
                    .spawn(move || {
                        let Ok(mut s) = connect_from(spread(i), addr) else {
                            return;
                        };
                        // A daemon that stops reading (a muted connection) must not hold the
                        // attacker past its release.
                        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
                        let mut at = 0;
                        while !release.load(Ordering::SeqCst) && at < request.len() {
                            match s.write(&request[at..]) {
                                Ok(0) => return,
                                Ok(n) => at += n,
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock
                                            | std::io::ErrorKind::TimedOut
                                            | std::io::ErrorKind::Interrupted
                                    ) => {}
                                Err(_) => return,
                            }
                        }
                        if at == request.len() {
                            sent.fetch_add(1, Ordering::SeqCst);
                        }
                        while !release.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        drop(s);
                    })
                    .expect("start an attacker thread")
            })
            .collect();
        Attackers {
            release,
            threads,
            sent,
        }
    }

    /// Every attacker closes its socket at once; returns when all have.
    pub fn leave(self) -> Instant {
        self.release.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        Instant::now()
    }
}

/// One sample of the daemon.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Instant,
    pub alive: bool,
    pub rss_kib: u64,
    pub vm_kib: u64,
    pub fds: u64,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// The partition's offset in `recovery-point-offset-checkpoint` (-1: unreadable).
    pub recovery_point: i64,
    /// The partition's offset in `replication-offset-checkpoint` (-1: unreadable).
    pub high_watermark: i64,
}

/// A `/proc/PID/status` field in KiB.
fn status_kib(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The offset of the first entry of a checkpoint file, -1 when it cannot be read (being
/// replaced, not written yet).
pub fn checkpoint_offset(path: &Path) -> i64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().nth(2).map(str::to_string))
        .and_then(|l| l.rsplit(' ').next().and_then(|o| o.parse().ok()))
        .unwrap_or(-1)
}

/// One sample of `pid` and the checkpoints in `data`.
pub fn sample(pid: u32, data: &Path) -> Sample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let alive = !status.is_empty() && !status.contains("State:\tZ");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Sample {
        at: Instant::now(),
        alive,
        rss_kib: status_kib(&status, "VmRSS:"),
        vm_kib: status_kib(&status, "VmSize:"),
        fds,
        ticks,
        recovery_point: checkpoint_offset(&data.join("recovery-point-offset-checkpoint")),
        high_watermark: checkpoint_offset(&data.join("replication-offset-checkpoint")),
    }
}

/// Samples the daemon every [`SAMPLE_EVERY`] until dropped.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    pub fn start(pid: u32, data: PathBuf) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s2, v2) = (stop.clone(), samples.clone());
        let thread = std::thread::Builder::new()
            .name("monitor".into())
            .spawn(move || {
                while !s2.load(Ordering::SeqCst) {
                    let s = sample(pid, &data);
                    v2.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                    std::thread::sleep(SAMPLE_EVERY);
                }
            })
            .expect("start the monitor");
        Monitor {
            stop,
            samples,
            thread: Some(thread),
        }
    }

    /// The samples taken in `from..to`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<Sample> {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| s.at >= from && s.at < to)
            .copied()
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The CPU ticks of each window of about one second in `samples` (window end, ticks).
pub fn cpu_windows(samples: &[Sample]) -> Vec<(Instant, u64)> {
    let mut out = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        if let Some(first) = samples[..i]
            .iter()
            .rev()
            .find(|p| s.at.duration_since(p.at) >= Duration::from_millis(950))
        {
            let secs = s.at.duration_since(first.at).as_secs_f64();
            let ticks = s.ticks.saturating_sub(first.ticks) as f64 / secs;
            out.push((s.at, ticks.round() as u64));
        }
    }
    out
}

/// Writes records to the leader's partition steadily (`per_write` records, then a pause)
/// until stopped; notes when each write was acknowledged and its last offset.
pub struct Producer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(Instant, i64)>>>,
    thread: Option<JoinHandle<super::Leader>>,
}

impl Producer {
    pub fn start(mut leader: super::Leader, topic: &str, per_write: usize) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s2, a2, topic) = (stop.clone(), acked.clone(), topic.to_string());
        let thread = std::thread::Builder::new()
            .name("producer".into())
            .spawn(move || {
                let mut seed = 1000;
                while !s2.load(Ordering::SeqCst) {
                    seed += 1;
                    let (_, last) = leader.produce(&topic, 0, per_write, "none", seed);
                    a2.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), last));
                    std::thread::sleep(Duration::from_millis(100));
                }
                leader
            })
            .expect("start the producer");
        Producer {
            stop,
            acked,
            thread: Some(thread),
        }
    }

    /// (when acknowledged, last offset) of every write so far.
    pub fn acked(&self) -> Vec<(Instant, i64)> {
        self.acked.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The log end on the leader as of the last acknowledged write.
    pub fn end(&self) -> i64 {
        self.acked().last().map_or(0, |a| a.1 + 1)
    }

    /// Stops producing and hands the leader back.
    pub fn stop(mut self) -> Option<super::Leader> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `clients.py tail`: a confluent-kafka consumer of the listener; notes when each new
/// highest offset arrived.
pub struct Tail {
    child: Child,
    seen: Arc<Mutex<Vec<(Instant, i64)>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Tail {
    pub fn start(bootstrap: &str, topic: &str, from: i64) -> Tail {
        let mut child = Command::new(super::python())
            .arg(super::manifest_dir().join("tests/support/clients.py"))
            .args(["tail", "--bootstrap", bootstrap, "--topic", topic])
            .args(["--partition", "0", "--from", &from.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start clients.py tail");
        let out = BufReader::new(child.stdout.take().expect("tail stdout"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (s2, e2) = (seen.clone(), errors.clone());
        std::thread::Builder::new()
            .name("tail-reader".into())
            .spawn(move || {
                for line in out.lines() {
                    let Ok(line) = line else { break };
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                    if let Some(o) = v["offset"].as_i64() {
                        s2.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((Instant::now(), o));
                    } else {
                        e2.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                    }
                }
            })
            .expect("start the tail reader");
        Tail {
            child,
            seen,
            errors,
        }
    }

    /// The highest offset read so far (-1: none).
    pub fn highest(&self) -> i64 {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .map_or(-1, |s| s.1)
    }

    pub fn seen(&self) -> Vec<(Instant, i64)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The worst time between a write being acknowledged by the leader and the consumer
/// reading its last record, over the writes acknowledged in `from..to`; a write not read
/// by `until` counts as read at `until`. (seconds, the write's last offset)
pub fn worst_latency(
    acked: &[(Instant, i64)],
    seen: &[(Instant, i64)],
    from: Instant,
    to: Instant,
    until: Instant,
) -> (f64, i64) {
    acked
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|&(at, last)| {
            let read = seen.iter().find(|(_, o)| *o >= last).map_or(until, |s| s.0);
            (read.saturating_duration_since(at).as_secs_f64(), last)
        })
        .fold((0.0, -1), |w, l| if l.0 > w.0 { l } else { w })
}

/// Sends `request` on `s` and reads the answer (whole, up to 64 MiB).
pub fn round_trip(s: &mut TcpStream, request: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(request)?;
    read_response(s, 64 << 20)?
        .1
        .ok_or_else(|| std::io::Error::other("an answer above 64 MiB"))
}
