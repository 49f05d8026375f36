//! `GET /metrics` in the Prometheus text exposition format (0.0.4), from the live state
//! ([`crate::live`]) and the process's own figures, on a small HTTP/1.1 responder built on
//! std::net. One thread serves it, one connection at a time with short timeouts: a slow or
//! stuck client delays only other scrapes, never a fetcher (they share nothing but the live
//! state's mutex, held only to copy it).

use crate::live::{LATENCY_BUCKETS, Live, METADATA_ERROR_KINDS, PartitionLive, State};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The longest request read (a scrape is one line and a few headers).
const MAX_REQUEST: usize = 8 << 10;
/// How long a client may take to send its request, or to take the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

const STATES: [State; 8] = [
    State::Starting,
    State::Fetching,
    State::CaughtUp,
    State::BackingOff,
    State::Truncating,
    State::Failed,
    State::NotFound,
    State::Stopped,
];

/// How a per-partition figure is read from the live state.
type Figure<'a> = &'a dyn Fn(&PartitionLive) -> Option<f64>;

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text.
pub fn render(live: &Live, free_bytes: Option<u64>) -> String {
    let parts = live.partitions();
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, lines: Vec<String>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    };
    let per = |name: &str, value: Figure<'_>| {
        parts
            .iter()
            .filter_map(|(tp, p)| {
                value(p).map(|v| {
                    format!(
                        "{name}{{topic=\"{}\",partition=\"{}\"}} {v}",
                        label(&tp.topic),
                        tp.partition
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    let gauges: [(&str, &str, Figure<'_>); 6] = [
        (
            "replica_follower_log_start_offset",
            "The local log start offset",
            &|p| p.log_start_offset.map(|v| v as f64),
        ),
        (
            "replica_follower_lag_records",
            "Leader high watermark minus the local log end",
            &|p| p.lag().map(|v| v as f64),
        ),
        (
            "replica_follower_log_end_offset",
            "The local log end offset",
            &|p| p.log_end_offset.map(|v| v as f64),
        ),
        (
            "replica_follower_high_watermark",
            "The replica's high watermark",
            &|p| p.high_watermark.map(|v| v as f64),
        ),
        (
            "replica_follower_leader_high_watermark",
            "The leader's high watermark from the last fetch",
            &|p| p.leader_high_watermark.map(|v| v as f64),
        ),
        (
            "replica_follower_last_fetch_timestamp_seconds",
            "When the last fetch for the partition was answered",
            &|p| p.last_fetch_ms.map(|v| v as f64 / 1000.0),
        ),
    ];
    for (name, help, f) in gauges {
        let lines = per(name, f);
        family(name, "gauge", help, lines);
    }
    for (name, help, f) in [
        (
            "replica_follower_bytes_appended_total",
            "Bytes of record batches appended since start",
            &(|p: &PartitionLive| Some(p.bytes_appended as f64)) as Figure<'_>,
        ),
        (
            "replica_follower_batches_appended_total",
            "Record batches appended since start",
            &|p: &PartitionLive| Some(p.batches_appended as f64),
        ),
    ] {
        let lines = per(name, f);
        family(name, "counter", help, lines);
    }
    let mut errors = Vec::new();
    let mut states = Vec::new();
    for (tp, p) in &parts {
        let (t, n) = (label(&tp.topic), tp.partition);
        for (kind, count) in &p.fetch_errors {
            errors.push(format!(
                "replica_follower_fetch_errors_total{{topic=\"{t}\",partition=\"{n}\",error=\"{}\"}} {count}",
                label(kind)
            ));
        }
        for s in STATES {
            states.push(format!(
                "replica_follower_partition_state{{topic=\"{t}\",partition=\"{n}\",state=\"{}\"}} {}",
                s.as_str(),
                u8::from(p.state == s)
            ));
        }
    }
    family(
        "replica_follower_fetch_errors_total",
        "counter",
        "Errors that made a partition back off, by kind",
        errors,
    );
    family(
        "replica_follower_partition_state",
        "gauge",
        "1 for the state each partition is in",
        states,
    );
    leader_figures(live, &mut family);
    let h = live.latency();
    let mut lines = Vec::new();
    let mut cumulative = 0;
    for (b, n) in LATENCY_BUCKETS.iter().zip(h.buckets) {
        cumulative += n;
        lines.push(format!(
            "replica_follower_fetch_latency_seconds_bucket{{le=\"{b}\"}} {cumulative}"
        ));
    }
    lines.push(format!(
        "replica_follower_fetch_latency_seconds_bucket{{le=\"+Inf\"}} {}",
        h.count
    ));
    lines.push(format!(
        "replica_follower_fetch_latency_seconds_sum {}",
        h.sum
    ));
    lines.push(format!(
        "replica_follower_fetch_latency_seconds_count {}",
        h.count
    ));
    family(
        "replica_follower_fetch_latency_seconds",
        "histogram",
        "Time from sending a fetch to its whole response",
        lines,
    );
    if let Some(o) = live.offsite() {
        let now = crate::clock::now_ms();
        let age = o
            .oldest_pending_ms
            .map_or(0.0, |t| (now - t).max(0) as f64 / 1000.0);
        for (name, kind, help, v) in [
            (
                "replica_follower_offsite_pending_bytes",
                "gauge",
                "Bytes of local segments not offsite yet",
                o.pending_bytes as f64,
            ),
            (
                "replica_follower_offsite_pending_segments",
                "gauge",
                "Local segments with bytes not offsite yet",
                o.pending_segments as f64,
            ),
            (
                "replica_follower_offsite_oldest_pending_age_seconds",
                "gauge",
                "How long the oldest byte not offsite yet has waited (0: none waits)",
                age,
            ),
            (
                "replica_follower_offsite_uploaded_bytes_total",
                "counter",
                "Bytes uploaded to the offsite store (before encryption)",
                o.uploaded_bytes as f64,
            ),
            (
                "replica_follower_offsite_uploaded_objects_total",
                "counter",
                "Objects uploaded to the offsite store",
                o.uploaded_objects as f64,
            ),
            (
                "replica_follower_offsite_errors_total",
                "counter",
                "Failed rounds of uploads to the offsite store",
                o.errors as f64,
            ),
            (
                "replica_follower_offsite_failing",
                "gauge",
                "1 while uploads to the offsite store fail",
                if o.failing.is_some() { 1.0 } else { 0.0 },
            ),
        ] {
            family(name, kind, help, vec![format!("{name} {v}")]);
        }
    }
    if let Some(free) = free_bytes {
        family(
            "replica_follower_data_dir_free_bytes",
            "gauge",
            "Free space on the data dir's filesystem",
            vec![format!("replica_follower_data_dir_free_bytes {free}")],
        );
    }
    process_figures(&mut family);
    out
}

/// Whether the leader answers metadata and what the configuration asks for that it has
/// nothing of: present from the first scrape, before any answer, so that alerts on them fire
/// for a daemon that never reached its leader.
fn leader_figures(live: &Live, family: &mut impl FnMut(&str, &str, &str, Vec<String>)) {
    let leader = live.leader();
    family(
        "replica_follower_leader_reachable",
        "gauge",
        "1 when the last metadata refresh was answered by a broker, else 0 (also before the first answer)",
        vec![format!(
            "replica_follower_leader_reachable {}",
            u8::from(leader.reachable)
        )],
    );
    // Until the first success, the daemon's start: its age then says how long it has tried.
    let last = leader.last_success_ms.unwrap_or(live.created_ms());
    family(
        "replica_follower_last_metadata_success_timestamp_seconds",
        "gauge",
        "When a metadata refresh was last answered (the daemon's start until the first answer)",
        vec![format!(
            "replica_follower_last_metadata_success_timestamp_seconds {}",
            last as f64 / 1000.0
        )],
    );
    let mut errors = leader.errors.clone();
    for kind in METADATA_ERROR_KINDS {
        errors.entry(kind.to_string()).or_insert(0);
    }
    family(
        "replica_follower_metadata_errors_total",
        "counter",
        "Failed metadata refreshes, by kind",
        errors
            .iter()
            .map(|(kind, n)| {
                format!(
                    "replica_follower_metadata_errors_total{{error=\"{}\"}} {n}",
                    label(kind)
                )
            })
            .collect(),
    );
    let missing = live.missing_topics();
    let mut topics: std::collections::BTreeSet<&String> = leader.followed_topics.iter().collect();
    topics.extend(missing.iter());
    family(
        "replica_follower_topic_missing",
        "gauge",
        "1 for a followed topic the leader's metadata does not have, else 0",
        topics
            .into_iter()
            .map(|t| {
                format!(
                    "replica_follower_topic_missing{{topic=\"{}\"}} {}",
                    label(t),
                    u8::from(missing.contains(t))
                )
            })
            .collect(),
    );
    family(
        "replica_follower_partitions_without_log",
        "gauge",
        "Followed partitions with no local log yet (a whole topic whose partitions are unknown counts once)",
        vec![format!(
            "replica_follower_partitions_without_log {}",
            leader.not_yet_logged.len()
        )],
    );
}

/// `process_*` figures from /proc, as Prometheus's client libraries name them.
fn process_figures(family: &mut impl FnMut(&str, &str, &str, Vec<String>)) {
    const PAGE: u64 = 4096;
    const TICKS: f64 = 100.0;
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm")
        && let Some(rss) = statm
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
    {
        family(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes",
            vec![format!("process_resident_memory_bytes {}", rss * PAGE)],
        );
    }
    if let Some(l) = crate::serve::limits::listener_stats().figures() {
        let gauges = [
            (
                "replica_follower_serve_connections",
                "Client connections open on the serve listener",
                l.connections,
            ),
            (
                "replica_follower_serve_memory_bytes",
                "Memory the serve listener's connections hold of serve.max_memory_bytes",
                l.memory_bytes,
            ),
            (
                "replica_follower_serve_memory_limit_bytes",
                "serve.max_memory_bytes",
                l.memory_limit_bytes,
            ),
            (
                "replica_follower_serve_descriptors",
                "Descriptors the serve listener holds (sockets and segment files sent from)",
                l.descriptors,
            ),
            (
                "replica_follower_serve_descriptors_limit",
                "The serve listener's share of the open-file limit",
                l.descriptors_limit,
            ),
        ];
        for (name, help, v) in gauges {
            family(name, "gauge", help, vec![format!("{name} {v}")]);
        }
        family(
            "replica_follower_serve_muted_total",
            "counter",
            "Requests that waited for the serve listener's memory",
            vec![format!("replica_follower_serve_muted_total {}", l.muted)],
        );
        family(
            "replica_follower_serve_refused_connections_total",
            "counter",
            "Connections the serve listener closed at once, by the limit that refused them",
            l.refused
                .iter()
                .map(|(limit, n)| {
                    format!(
                        "replica_follower_serve_refused_connections_total{{limit=\"{limit}\"}} {n}"
                    )
                })
                .collect(),
        );
    }
    if let Some(fds) = crate::log::resources::descriptors::open_count() {
        family(
            "process_open_fds",
            "gauge",
            "Open file descriptors",
            vec![format!("process_open_fds {fds}")],
        );
    }
    if let Some(max) = crate::log::resources::descriptors::soft_limit() {
        family(
            "process_max_fds",
            "gauge",
            "The open-file limit",
            vec![format!("process_max_fds {max}")],
        );
    }
    // utime and stime are fields 14 and 15, after the parenthesised command name.
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        let f: Vec<&str> = rest.split_whitespace().collect();
        if let (Some(u), Some(s)) = (
            f.get(11).and_then(|v| v.parse::<f64>().ok()),
            f.get(12).and_then(|v| v.parse::<f64>().ok()),
        ) {
            family(
                "process_cpu_seconds_total",
                "counter",
                "User and system CPU time spent in seconds",
                vec![format!("process_cpu_seconds_total {}", (u + s) / TICKS)],
            );
        }
    }
}

/// Serves `GET /metrics` on `listener` until `running` says stop; other paths get 404, a
/// request that is not HTTP 400. It blocks in accept(2) (no wake-ups while nobody scrapes):
/// whoever clears `running` connects once to wake it ([`crate::serve::wake_accept`]).
pub fn serve(
    listener: TcpListener,
    live: &Live,
    running: impl Fn() -> bool,
    free: impl Fn() -> Option<u64>,
) {
    while running() {
        match listener.accept() {
            Ok((stream, _)) => {
                if !running() {
                    break;
                }
                if let Err(e) = answer(stream, live, &free) {
                    crate::log_debug!("metrics client: {e}");
                }
            }
            Err(e) => {
                // Out of descriptors, mostly: the connections that end free some.
                crate::log_debug!("metrics accept: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn answer(
    mut stream: TcpStream,
    live: &Live,
    free: &impl Fn() -> Option<u64>,
) -> std::io::Result<()> {
    // One deadline for the whole exchange, not one per read: a client trickling a byte at a
    // time cannot keep the thread.
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    let remaining = || {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client took too long",
            ))
        } else {
            Ok(left)
        }
    };
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // Up to the end of the headers, within the size limit.
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        if buf.len() > MAX_REQUEST {
            return respond(&mut stream, "400 Bad Request", "request too large\n");
        }
        stream.set_read_timeout(Some(remaining()?))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    let text = String::from_utf8_lossy(&buf);
    let mut first = text.lines().next().unwrap_or_default().split_whitespace();
    let (method, path, version) = (first.next(), first.next(), first.next());
    stream.set_write_timeout(Some(remaining()?))?;
    match (method, path, version) {
        (Some("GET"), Some(p), Some(v)) if v.starts_with("HTTP/1.") => {
            if p == "/metrics" || p.starts_with("/metrics?") {
                let body = render(live, free());
                respond(&mut stream, "200 OK", &body)
            } else {
                respond(
                    &mut stream,
                    "404 Not Found",
                    "only /metrics is served here\n",
                )
            }
        }
        (Some(_), Some(_), Some(v)) if v.starts_with("HTTP/1.") => {
            respond(&mut stream, "405 Method Not Allowed", "GET only\n")
        }
        _ => respond(&mut stream, "400 Bad Request", "not an HTTP/1.x request\n"),
    }
}

fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::TopicPartition;

    #[test]
    fn the_endpoint_blocks_until_a_scrape_and_ends_once_woken() {
        // On the wildcard address, as `metrics.listen = "0.0.0.0:9309"` binds.
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_unspecified());
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let r2 = running.clone();
        let t = std::thread::spawn(move || {
            serve(
                listener,
                &Live::default(),
                || r2.load(std::sync::atomic::Ordering::SeqCst),
                || None,
            )
        });
        let mut c = TcpStream::connect(("127.0.0.1", addr.port())).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(crate::serve::wake_accept(addr));
        let started = std::time::Instant::now();
        while !t.is_finished() {
            assert!(started.elapsed() < Duration::from_secs(5), "still serving");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_exposition_names_each_partition_and_counts_errors() {
        let l = Live::default();
        let tp = TopicPartition::new("t\"x", 3);
        l.fetched(&tp, 100, 100, 40, 40, None);
        l.appended(&tp, 1000, 2);
        l.backing_off(&tp, "invalid_data", "CRC");
        l.observe_fetch(Duration::from_millis(30));
        let text = render(&l, Some(5));
        assert!(
            text.contains("replica_follower_lag_records{topic=\"t\\\"x\",partition=\"3\"} 60"),
            "{text}"
        );
        assert!(text.contains(
            "replica_follower_bytes_appended_total{topic=\"t\\\"x\",partition=\"3\"} 1000"
        ));
        assert!(text.contains("error=\"invalid_data\"} 1"));
        assert!(text.contains("state=\"backing off\"} 1"));
        assert!(text.contains("replica_follower_fetch_latency_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("replica_follower_fetch_latency_seconds_bucket{le=\"0.025\"} 0"));
        assert!(text.contains("replica_follower_data_dir_free_bytes 5"));
    }

    #[test]
    fn the_leader_figures_are_there_before_any_answer() {
        let l = Live::default();
        l.set_followed_topics(vec!["a".into(), "b\"".into()]);
        let text = render(&l, None);
        for line in [
            "replica_follower_leader_reachable 0",
            "replica_follower_metadata_errors_total{error=\"unreachable\"} 0",
            "replica_follower_metadata_errors_total{error=\"refused\"} 0",
            "replica_follower_topic_missing{topic=\"a\"} 0",
            "replica_follower_topic_missing{topic=\"b\\\"\"} 0",
            "replica_follower_partitions_without_log 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let start = format!(
            "replica_follower_last_metadata_success_timestamp_seconds {}",
            l.created_ms() as f64 / 1000.0
        );
        assert!(text.lines().any(|l| l == start), "{text}");
        l.metadata_failed("refused", "TLS", 5_000);
        l.set_missing_topics(std::collections::BTreeSet::from(["a".to_string()]));
        let text = render(&l, None);
        assert!(text.contains("replica_follower_metadata_errors_total{error=\"refused\"} 1"));
        assert!(text.contains("replica_follower_topic_missing{topic=\"a\"} 1"));
        l.metadata_answered(7_000);
        let text = render(&l, None);
        assert!(text.contains("replica_follower_leader_reachable 1"));
        assert!(text.contains("replica_follower_last_metadata_success_timestamp_seconds 7\n"));
    }
}
