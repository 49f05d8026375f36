//! Benchmark against Apache Kafka itself (issue 24): Kafka's own replica fetcher, the copy
//! limit, kcat and ConsumerPerformance, and replica-follower, copying the same partition on
//! the same machine, interleaved in one run. Run it with `bash benches/kafka.sh`.
//!
//! Set-up, untimed: Apache Kafka 4.4.0, two KRaft nodes on loopback with Kafka's own JVM
//! settings (benches/kafka/driver.py over tests/support/kafka_cluster.py); one topic with one
//! partition whose only replica is node 1, about `--mb` MB (600) written by Kafka's
//! `ProducerPerformance` (records of `--record-size` bytes (100), acks=1, the producer's
//! default batching).
//!
//! Then `--reps` times (3), interleaved, each run after `sync` and writing and deleting 1 GiB
//! (so that no run pays the VM's first touch of memory):
//! - `kafka follower`: the partition reassigned to [1, 2]; wall time until node 2 is in the
//!   ISR (Admin DescribeTopics every ~10 ms), node 2's CPU (utime + stime) meanwhile; then back
//!   to [1], untimed, until node 2 has deleted its copy. With node 2's default settings and
//!   with tuned fetch sizes and socket buffer (a restart of node 2 between the two, then one
//!   untimed copy to warm the JVM; the order alternates, so one restart a repetition);
//! - `kafka follower, 1 record`: the same for a topic of one record, node 2 as it is: what a
//!   reassignment costs whatever the partition holds (the controller, node 2 creating the
//!   log, the ISR change going through the controller and back to the brokers);
//! - `replica-follower`: from an empty data dir until its log holds every byte of the
//!   partition (then its log end is checked against the high watermark); wall, CPU, peak RSS.
//!   With the default settings and with 8 MB fetches;
//! - `copy limit`: this binary's `copy` mode: Fetch of 8 MB, one in flight, each response's
//!   record bytes appended to a file with `write` (the file in the same filesystem);
//! - `kcat`: `kcat -C -e -o beginning -c N -q` with its default output (each value and a
//!   newline) to a file, on the confluent-kafka wheel's librdkafka;
//! - `ConsumerPerformance`: Kafka's consumer benchmark reading every record (it keeps nothing).
//!
//! Every run also reports the CPU node 1, the leader, spent serving it. Targets (ratios of
//! medians; also each repetition's): replica-follower's time ≤ 0.5 × Kafka's follower's and its
//! CPU ≤ 0.5 × node 2's, both with default and with tuned settings; replica-follower's time
//! ≤ 1.0 × the copy limit's.
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
    raw_summary, timed, write_follower_config,
};
use replica_follower::client::BrokerConnection;
use replica_follower::client::cluster;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::TopicPartition;
use replica_follower::protocol::fetch;
use replica_follower::record::BatchIter;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const TOPIC: &str = "kbench";

/// Node 2's settings for the tuned Kafka follower: 8 MB a partition, as replica-follower's
/// tuned fetches, and room for it in a response.
/// And the socket's receive buffer left to the kernel's autotuning: Kafka's default of 64 KiB
/// makes the follower read 86 KB at a time (strace), and it took a third longer than this.
const KAFKA_TUNED: [(&str, &str); 3] = [
    ("replica.fetch.max.bytes", "8388608"),
    ("replica.fetch.response.max.bytes", "33554432"),
    ("replica.socket.receive.buffer.bytes", "-1"),
];

/// What bin/kafka-run-class.sh gives a Java tool (benches/kafka/driver.py gives brokers the
/// same).
const KAFKA_JVM: [&str; 9] = [
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
];

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

/// benches/kafka/driver.py: the cluster, and the steps timed on it.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    info: Value,
}

impl Driver {
    fn start(work: &Path) -> Driver {
        let root = support::manifest_dir();
        let mut child = Command::new("python3")
            .arg(root.join("benches/kafka/driver.py"))
            .arg("{}")
            // The cluster's directory (data, logs) under target/bench/kafka.
            .env("TMPDIR", work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start benches/kafka/driver.py");
        let stdin = child.stdin.take().expect("driver stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("driver stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("driver's first line");
        let info: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the Kafka cluster did not start ({e}): {line:?}"));
        Driver {
            child,
            stdin,
            stdout,
            info,
        }
    }

    fn ok(&mut self, cmd: Value) -> Value {
        writeln!(self.stdin, "{cmd}").expect("write to the driver");
        self.stdin.flush().expect("flush the driver's stdin");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("driver answer");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("driver answered {line:?} to {cmd} ({e})"));
        assert_eq!(v["ok"], true, "driver failed {cmd}: {v}");
        v
    }

    fn node(&self, id: u32, field: &str) -> Value {
        self.info["nodes"][id.to_string()][field].clone()
    }
}

/// Node 2 made a replica of `topic`-0: wall time until it is in the ISR, node 2's CPU.
fn kafka_follow(kafka: &mut Driver, topic: &str) -> Sample {
    let v = kafka.ok(json!({"cmd": "follow", "topic": topic, "follower": 2}));
    Sample {
        wall: v["wall"].as_f64().unwrap(),
        cpu: v["cpu"].as_f64().unwrap(),
        rss_mb: f64::NAN,
    }
}

/// `copy` mode: fetch the partition from offset 0 to the high watermark with 8 MB fetches,
/// one at a time, appending each response's whole batches to `--out` with one `write`; print
/// bytes, batches, the end offset and the fetches.
fn copy_mode(args: &[String]) {
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| panic!("copy needs {k}"))
    };
    let tp = TopicPartition::new(get("--topic"), 0);
    let md = cluster::bootstrap_metadata(
        &[get("--bootstrap")],
        "bench-copy",
        std::slice::from_ref(&tp.topic),
    )
    .expect("metadata");
    let leader = md.leader(&tp).expect("leader");
    let addr = md
        .broker_addr(leader.leader_id)
        .expect("leader address")
        .to_string();
    let mut conn = BrokerConnection::connect(&addr, "bench-copy", 64 << 20).expect("connect");
    let v = conn
        .require_version(ApiKey::Fetch)
        .expect("fetch version")
        .min(12); // named topics
    let mut out = std::fs::File::create(get("--out")).expect("copy output file");
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
        let (mut from, mut to) = (None, 0);
        for (h, pos, b) in BatchIter::new(p.records, usize::MAX) {
            if h.last_offset >= offset {
                from.get_or_insert(pos);
                to = pos + b.len();
                offset = h.last_offset + 1;
                batches += 1;
            }
        }
        if let Some(from) = from {
            out.write_all(&p.records[from..to]).expect("write the copy");
            bytes += (to - from) as u64;
        }
        if offset >= p.high_watermark {
            break;
        }
    }
    println!("bytes={bytes} batches={batches} end={offset} fetches={fetches}");
}

/// One timed run, with the CPU node 1 (the leader) spent meanwhile.
#[derive(Clone, Copy, Default)]
struct Run {
    s: Sample,
    leader_cpu: f64,
}

const NAMES: [&str; 8] = [
    "kafka follower, 1 record",
    "kafka follower, default",
    "kafka follower, tuned",
    "replica-follower, default",
    "replica-follower, tuned",
    "copy limit",
    "kcat → file",
    "ConsumerPerformance",
];
const KAFKA_FIXED: usize = 0;
const KAFKA_DEFAULT: usize = 1;
const KAFKA_TUNED_ROW: usize = 2;
const RF_DEFAULT: usize = 3;
const RF_TUNED: usize = 4;
const COPY: usize = 5;
const KCAT: usize = 6;
const CONSUMER_PERF: usize = 7;
/// A topic of one record: the time a reassignment takes whatever the partition holds.
const TINY: &str = "kbench-one-record";

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    if all.first().map(String::as_str) == Some("copy") {
        copy_mode(&all);
        return;
    }
    let Some(args) = common::bench_args("benches/kafka.sh") else {
        return;
    };
    let reps = opt(&args, "--reps", 3);
    let want_mb = opt(&args, "--mb", 600);
    let record_size = opt(&args, "--record-size", 100);
    let work = support::manifest_dir().join("target/bench/kafka");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("target/bench/kafka");
    let tck = clk_tck();
    let me = std::env::current_exe().expect("current exe");
    let kcat = std::env::var("KCAT").unwrap_or_else(|_| "kcat".into());
    let lib_dir =
        std::env::var("RDKAFKA_LIB_DIR").expect("RDKAFKA_LIB_DIR (set by benches/kafka.sh)");
    let bin = PathBuf::from(support::bin());

    let mut kafka = Driver::start(&work);
    let bootstrap = kafka.info["bootstrap"].as_str().unwrap().to_string();
    let classpath = kafka.info["classpath"].as_str().unwrap().to_string();
    let leader_pid = kafka.node(1, "pid").as_u64().unwrap() as u32;
    let records = want_mb * 1_000_000 / record_size;
    let produced = kafka.ok(json!({"cmd": "produce", "topic": TOPIC, "records": records,
        "record_size": record_size}));
    // The raw loop and the copy take one bootstrap address.
    let node1 = kafka.node(1, "broker").as_str().unwrap().to_string();
    let raw = raw_args(&node1, TOPIC);
    kafka.ok(json!({"cmd": "produce", "topic": TINY, "records": 1, "record_size": record_size}));
    let leader = raw_summary(&raw);
    let (total, end) = (leader.bytes, leader.end);
    let mb = total as f64 / 1e6;
    eprintln!(
        "ProducerPerformance: {records} records of {record_size} bytes in {:.1} s: {mb:.1} MB in {} batches, log end {end}\n  {}",
        produced["seconds"].as_f64().unwrap_or(0.0),
        leader.batches,
        produced["summary"].as_str().unwrap_or("")
    );

    let leader_cpu = || proc_figures(leader_pid, tck).0;
    let measure = |f: &mut dyn FnMut() -> Sample| {
        first_touch(&work);
        let before = leader_cpu();
        let s = f();
        Run {
            s,
            leader_cpu: leader_cpu() - before,
        }
    };
    let kafka_config = |tuned: bool| -> Value {
        if tuned {
            KAFKA_TUNED
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        } else {
            json!({})
        }
    };
    let mut node2_tuned = false;
    // Node 2 as first started is warmed too, as after each restart below.
    kafka.ok(json!({"cmd": "follow", "topic": TOPIC, "follower": 2}));
    kafka.ok(json!({"cmd": "unfollow", "topic": TOPIC, "follower": 2}));
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); NAMES.len()];
    for rep in 1..=reps {
        // Node 2 starts each repetition as the last one left it: one restart a repetition.
        for tuned in [node2_tuned, !node2_tuned] {
            if tuned != node2_tuned {
                kafka.ok(json!({"cmd": "node_config", "node": 2, "config": kafka_config(tuned)}));
                node2_tuned = tuned;
                // A broker runs warm: one untimed copy first, so that no timed one pays the
                // restarted JVM's compiling.
                kafka.ok(json!({"cmd": "follow", "topic": TOPIC, "follower": 2}));
                kafka.ok(json!({"cmd": "unfollow", "topic": TOPIC, "follower": 2}));
            }
            let row = if tuned {
                KAFKA_TUNED_ROW
            } else {
                KAFKA_DEFAULT
            };
            let r = measure(&mut || kafka_follow(&mut kafka, TOPIC));
            runs[row].push(r);
            kafka.ok(json!({"cmd": "unfollow", "topic": TOPIC, "follower": 2}));
        }
        let r = measure(&mut || kafka_follow(&mut kafka, TINY));
        runs[KAFKA_FIXED].push(r);
        kafka.ok(json!({"cmd": "unfollow", "topic": TINY, "follower": 2}));
        for (row, tune) in [
            (
                RF_DEFAULT,
                (|c| c) as fn(support::Config) -> support::Config,
            ),
            (RF_TUNED, fetch_8mb),
        ] {
            let (cfg, data) = write_follower_config(&work.join("rf"), &bootstrap, TOPIC, tune);
            runs[row].push(measure(&mut || {
                follow_until_caught_up(&bin, &cfg, &data, TOPIC, total, end, tck)
            }));
            let _ = std::fs::remove_dir_all(&data);
        }
        let copy_out = work.join("copy.out");
        let mut copy = raw.clone();
        copy[0] = "copy".into();
        copy.extend(["--out".to_string(), copy_out.display().to_string()]);
        runs[COPY].push(measure(&mut || {
            let mut c = Command::new(&me);
            c.args(&copy);
            timed(c, None)
        }));
        assert_eq!(
            std::fs::metadata(&copy_out).map(|m| m.len()).unwrap_or(0),
            total,
            "the copy holds every byte"
        );
        let _ = std::fs::remove_file(&copy_out);
        let kcat_out = work.join("kcat.out");
        runs[KCAT].push(measure(&mut || {
            let mut c = Command::new(&kcat);
            c.args(["-C", "-b", &bootstrap, "-t", TOPIC, "-p", "0"])
                .args(["-o", "beginning", "-e", "-c", &end.to_string(), "-q"])
                .env("LD_LIBRARY_PATH", &lib_dir);
            timed(c, Some(&kcat_out))
        }));
        let _ = std::fs::remove_file(&kcat_out);
        runs[CONSUMER_PERF].push(measure(&mut || {
            let mut c = Command::new("java");
            c.args(KAFKA_JVM)
                .arg(format!(
                    "-Dlog4j2.configurationFile={}",
                    kafka.info["log_config"].as_str().unwrap()
                ))
                .arg(format!(
                    "-Dkafka.node.log={}",
                    work.join("consumer-perf.log").display()
                ))
                .arg(format!(
                    "-Dkafka.requests.log={}",
                    work.join("consumer-perf-requests.log").display()
                ))
                .args([
                    "-cp",
                    &classpath,
                    "org.apache.kafka.tools.ConsumerPerformance",
                ])
                .args(["--bootstrap-server", &bootstrap, "--topic", TOPIC])
                .args(["--messages", &end.to_string(), "--timeout", "60000"]);
            timed(c, None)
        }));
        eprintln!(
            "rep {rep}: {}",
            runs.iter()
                .map(|r| r
                    .last()
                    .map_or(String::new(), |r| format!("{:.2}s", r.s.wall)))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    drop(kafka.stdin);
    let _ = kafka.child.wait();

    let med = |i: usize, f: fn(&Run) -> f64| median(runs[i].iter().map(f).collect());
    let wall = |i: usize| med(i, |r| r.s.wall);
    let cpu = |i: usize| med(i, |r| r.s.cpu);
    println!(
        "\nOne partition on Apache Kafka 4.4.0 (2 KRaft nodes, loopback): {mb:.1} MB in {} batches (~{:.1} KB each), {end} records of {record_size} bytes from ProducerPerformance; medians of {reps} interleaved runs\n",
        leader.batches,
        total as f64 / 1e3 / leader.batches as f64
    );
    println!(
        "| run                       | wall s | MB/s | CPU s | peak RSS MB | leader CPU s | every run (wall s) |"
    );
    println!(
        "|---------------------------|--------|------|-------|-------------|--------------|--------------------|"
    );
    for (i, name) in NAMES.iter().enumerate() {
        let rss = med(i, |r| r.s.rss_mb);
        println!(
            "| {name:<25} | {:>6.2} | {:>4} | {:>5.2} | {:>11} | {:>12.2} | {} |",
            wall(i),
            if i == KAFKA_FIXED {
                "—".to_string()
            } else {
                format!("{:.0}", mb / wall(i))
            },
            cpu(i),
            if rss.is_nan() {
                "—".to_string()
            } else {
                format!("{rss:.1}")
            },
            med(i, |r| r.leader_cpu),
            runs[i]
                .iter()
                .map(|r| format!("{:.2}", r.s.wall))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let per_rep = |f: &dyn Fn(usize) -> f64| {
        (0..reps)
            .map(|k| format!("{:.2}", f(k)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let w = |i: usize, k: usize| runs[i][k].s.wall;
    let c = |i: usize, k: usize| runs[i][k].s.cpu;
    let targets: Vec<(&str, f64, f64, String)> = vec![
        (
            "time / kafka's, default",
            wall(RF_DEFAULT) / wall(KAFKA_DEFAULT),
            0.5,
            per_rep(&|k| w(RF_DEFAULT, k) / w(KAFKA_DEFAULT, k)),
        ),
        (
            "CPU / kafka's, default",
            cpu(RF_DEFAULT) / cpu(KAFKA_DEFAULT),
            0.5,
            per_rep(&|k| c(RF_DEFAULT, k) / c(KAFKA_DEFAULT, k)),
        ),
        (
            "time / kafka's, tuned",
            wall(RF_TUNED) / wall(KAFKA_TUNED_ROW),
            0.5,
            per_rep(&|k| w(RF_TUNED, k) / w(KAFKA_TUNED_ROW, k)),
        ),
        (
            "CPU / kafka's, tuned",
            cpu(RF_TUNED) / cpu(KAFKA_TUNED_ROW),
            0.5,
            per_rep(&|k| c(RF_TUNED, k) / c(KAFKA_TUNED_ROW, k)),
        ),
        (
            "time / copy limit, default",
            wall(RF_DEFAULT) / wall(COPY),
            1.0,
            per_rep(&|k| w(RF_DEFAULT, k) / w(COPY, k)),
        ),
        (
            "time / copy limit, tuned",
            wall(RF_TUNED) / wall(COPY),
            1.0,
            per_rep(&|k| w(RF_TUNED, k) / w(COPY, k)),
        ),
    ];
    println!("\n| replica-follower           | value | target | result | every run |");
    println!("|----------------------------|-------|--------|--------|-----------|");
    for (name, v, t, each) in targets {
        println!(
            "| {name:<26} | {v:>5.2} | ≤ {t:<4} | {:<6} | {each} |",
            if v <= t { "PASS" } else { "MISS" }
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
