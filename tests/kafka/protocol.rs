//! Apache Kafka itself as the leader (issue 20), the protocol scenarios: transactions
//! (Kafka's `.txnindex` and read_committed), Kafka's own SASL_SSL (SCRAM-SHA-512) and mutual
//! TLS listeners, fetch sessions Kafka grants to a follower of 2,000 partitions, and the
//! admin, group and transaction calls of `client::admin`. All on the shared 3-node cluster of
//! the pinned 4.x.

use crate::support;

use crate::support::kafka::{self, Shared, fast};
use crate::support::{Config, Daemon, free_port, wait_until};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::admin::{self, AdminError, CommittedOffset, NewTopic, TxnMarker};
use replica_follower::client::{BrokerConnection, cluster};
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::list_offsets;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster;

/// One `.txnindex` entry: producer id, first offset, last offset, last stable offset.
type TxnEntry = (i64, i64, i64, i64);

/// Every `.txnindex` entry of the partition directory `dir`, segment by segment in offset
/// order (so segments split differently still give the same list).
fn txn_entries(dir: &Path) -> Vec<TxnEntry> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txnindex"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert_eq!(
            bytes.len() % 34,
            0,
            "{}: {} bytes",
            f.display(),
            bytes.len()
        );
        for e in bytes.chunks(34) {
            let long = |at: usize| i64::from_be_bytes(e[at..at + 8].try_into().unwrap());
            assert_eq!(&e[..2], &[0, 0], "{}: entry version", f.display());
            out.push((long(2), long(10), long(18), long(26)));
        }
    }
    out
}

/// Two transactional ids interleaved on one partition, with plain records between, committed
/// and aborted: the replica's `.txnindex` holds Kafka's entries (same first offsets, markers
/// and last stable offsets), its batches are Kafka's, and read_committed from the serve
/// listener returns exactly what read_committed from Kafka returns.
#[test]
fn interleaved_transactions_give_kafkas_txnindex_and_read_committed() {
    let started = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "kp-txn";
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 1,
        "replication_factor": 3}),
    );
    let steps = |a: &str, b: &str| {
        json!([
            ["plain", 3],
            [a, "begin"],
            [a, "produce", 4],
            [b, "begin"],
            [b, "produce", 3],
            ["plain", 2],
            // a's abort while b is open: its last stable offset is b's first offset.
            [a, "abort"],
            ["plain", 2],
            [b, "commit"],
            [a, "begin"],
            [a, "produce", 2],
            ["plain", 1],
            [b, "begin"],
            [b, "produce", 2],
            // b's abort while a is open (a began first), then a's with nothing open.
            [b, "abort"],
            [a, "abort"],
            [a, "begin"],
            [a, "produce", 3],
            [a, "commit"],
            ["plain", 2],
            [b, "begin"],
            [b, "produce", 2],
            [b, "abort"],
            ["plain", 2],
        ])
    };
    // Half before the replica starts, half while it follows.
    c.ok(
        json!({"cmd": "transaction_steps", "topic": topic, "partition": 0,
        "steps": steps("kp-tx-a", "kp-tx-b"), "seed": 1}),
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = Config::new(&data, &c.bootstrap)
        .follow(topic)
        .apply(fast)
        .set("serve.listen", listen.as_str())
        .write(dir.path());
    let mut d = Daemon::start(&cfg);
    let end = c.ok(
        json!({"cmd": "transaction_steps", "topic": topic, "partition": 0,
        "steps": steps("kp-tx-b", "kp-tx-a"), "seed": 2}),
    )["end_offset"]
        .as_i64()
        .unwrap();
    let tp = TopicPartition::new(topic, 0);
    let (hw, batches) = kafka::assert_same_as_kafka(c, &data, &tp);
    assert_eq!(hw, end, "the high watermark after the last step");
    let leader = c.ok(json!({"cmd": "describe_partition", "topic": topic, "partition": 0}));
    let leader = leader["leader"].as_i64().unwrap();
    let kafka_dir = c.log_dir(leader).join(tp.dir_name());
    let theirs = txn_entries(&kafka_dir);
    let ours = txn_entries(&data.join(tp.dir_name()));
    assert_eq!(
        theirs.len(),
        8,
        "8 aborts, 8 entries in Kafka's .txnindex: {theirs:?}"
    );
    assert_eq!(ours, theirs, "the replica's .txnindex entries are Kafka's");
    // Some aborts ended while the other transaction was open: their last stable offset is not
    // the marker's next offset.
    let bounded = theirs.iter().filter(|e| e.3 != e.2 + 1).count();
    assert!(
        bounded >= 2,
        "aborts bounded by an open transaction: {theirs:?}"
    );

    let theirs_rc = support::consume_all(&c.bootstrap, topic, 0, "read_committed");
    let mut ours_rc = Vec::new();
    wait_until(
        Duration::from_secs(20),
        "the served last stable offset",
        || {
            ours_rc = support::consume_all(&listen, topic, 0, "read_committed");
            ours_rc.len() == theirs_rc.len()
        },
    );
    assert_eq!(
        ours_rc, theirs_rc,
        "read_committed: the replica serves what Kafka serves"
    );
    let all = support::consume_all(&c.bootstrap, topic, 0, "read_uncommitted");
    assert_eq!(
        all.len() - theirs_rc.len(),
        2 * (4 + 2 + 2 + 2),
        "the aborted records are the ones read_committed skips"
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    eprintln!(
        "transactions: end offset {end}, {batches} batches byte-identical, {} .txnindex \
         entries equal ({bounded} bounded by an open transaction), {} read_committed / {} \
         records, {:.1} s",
        theirs.len(),
        theirs_rc.len(),
        all.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The listener addresses `kind` (`sasl_ssl`, `ssl`) of every node, as bootstrap servers.
fn listeners(c: &Shared, kind: &str) -> String {
    let nodes = c.info["nodes"].as_object().expect("nodes");
    let mut out: Vec<&str> = nodes
        .values()
        .map(|n| {
            n[kind]
                .as_str()
                .unwrap_or_else(|| panic!("no {kind} in {n}"))
        })
        .collect();
    out.sort();
    out.join(",")
}

fn tls_file(c: &Shared, name: &str) -> String {
    c.info["tls"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no tls.{name} in {}", c.info))
        .to_string()
}

/// A follower of `topic` through Kafka's SASL_SSL listeners (SCRAM-SHA-512) with `password`.
fn sasl_ssl_follower(c: &Shared, dir: &Path, topic: &str, password: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let pw = support::sasl::password_file(dir, "password", password);
    let data = dir.join("data");
    let cfg = Config::new(&data, &listeners(c, "sasl_ssl"))
        .follow(topic)
        .apply(fast)
        .set("security.protocol", "SASL_SSL")
        .set("security.ssl_ca_file", tls_file(c, "ca"))
        .set("security.sasl_mechanism", "SCRAM-SHA-512")
        .set(
            "security.sasl_username",
            c.info["scram"]["username"].as_str().unwrap(),
        )
        .set("security.sasl_password_file", pw.display().to_string())
        .write(dir);
    (cfg, data)
}

/// The daemon follows through Kafka's own SASL_SSL listener with SCRAM-SHA-512 and, as
/// another daemon, through its mutual-TLS listener with the client certificate: each replica
/// is byte-identical to Kafka's directory. A wrong password is refused at start: exit 1, an
/// ERROR naming each broker and the SASL failure, nothing written.
#[test]
fn the_daemon_follows_through_kafkas_sasl_ssl_scram_and_mutual_tls_listeners() {
    let started = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "kp-secured";
    c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": 2,
        "replication_factor": 3}),
    );
    for p in 0..2 {
        c.ok(
            json!({"cmd": "produce", "topic": topic, "partition": p, "count": 300,
            "codec": "lz4", "batch_records": 50, "idempotent": true, "seed": p}),
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let password = c.info["scram"]["password"].as_str().unwrap();
    let (sasl_cfg, sasl_data) = sasl_ssl_follower(c, &tmp.path().join("sasl"), topic, password);
    let mtls_dir = tmp.path().join("mtls");
    std::fs::create_dir_all(&mtls_dir).unwrap();
    let mtls_data = mtls_dir.join("data");
    let mtls_cfg = Config::new(&mtls_data, &listeners(c, "ssl"))
        .follow(topic)
        .apply(fast)
        .set("security.protocol", "SSL")
        .set("security.ssl_ca_file", tls_file(c, "ca"))
        .set("security.ssl_cert_file", tls_file(c, "client_cert"))
        .set("security.ssl_key_file", tls_file(c, "client_key"))
        .write(&mtls_dir);
    let mut daemons = [
        ("SASL_SSL", Daemon::start(&sasl_cfg), &sasl_data),
        ("mTLS", Daemon::start(&mtls_cfg), &mtls_data),
    ];
    for p in 0..2 {
        c.ok(
            json!({"cmd": "produce", "topic": topic, "partition": p, "count": 200,
            "codec": "zstd", "batch_records": 50, "idempotent": true, "seed": 10 + p}),
        );
    }
    let mut compared = BTreeMap::new();
    for (name, d, data) in &mut daemons {
        for p in 0..2 {
            let tp = TopicPartition::new(topic, p);
            let (hw, batches) = kafka::assert_same_as_kafka(c, data, &tp);
            assert_eq!(hw, 500, "{name} {tp}");
            *compared.entry(*name).or_insert(0) += batches;
        }
        assert_eq!(d.stop().code(), Some(0), "{name}: {}", d.log_text());
    }

    // A wrong password: refused by every broker, loudly, and nothing is written.
    let (bad_cfg, bad_data) =
        sasl_ssl_follower(c, &tmp.path().join("wrong"), topic, "not-the-password");
    let addrs = listeners(c, "sasl_ssl");
    let addrs: Vec<&str> = addrs.split(',').collect();
    let log = support::assert_refused_at_start(&bad_cfg, &bad_data, &addrs, |b| {
        vec![
            format!("broker {b} refused SCRAM-SHA-512 authentication as `replica`"),
            "SASL_AUTHENTICATION_FAILED".to_string(),
        ]
    });
    assert!(
        !log.contains("not-the-password"),
        "the password is in the log: {log}"
    );
    // Nothing but the data dir's lock file.
    let written: Vec<String> = std::fs::read_dir(&bad_data).map_or(Vec::new(), |d| {
        d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".lock")
            .collect()
    });
    assert!(written.is_empty(), "a refused daemon wrote {written:?}");

    // No client certificate on the mutual-TLS listener: every broker refuses the handshake.
    let nocert_dir = tmp.path().join("nocert");
    std::fs::create_dir_all(&nocert_dir).unwrap();
    let nocert_data = nocert_dir.join("data");
    let nocert_cfg = Config::new(&nocert_data, &listeners(c, "ssl"))
        .follow(topic)
        .apply(fast)
        .set("security.protocol", "SSL")
        .set("security.ssl_ca_file", tls_file(c, "ca"))
        .write(&nocert_dir);
    let addrs = listeners(c, "ssl");
    let addrs: Vec<&str> = addrs.split(',').collect();
    support::assert_refused_at_start(&nocert_cfg, &nocert_data, &addrs, |b| {
        vec![
            format!("broker {b}"),
            "requires a client certificate".to_string(),
        ]
    });
    eprintln!(
        "security: batches byte-identical {compared:?} (500 records in each of 2 partitions), \
         wrong password refused by 3 brokers, no client certificate refused by 3, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One Fetch of the daemon as Kafka's request log shows it.
#[derive(Debug)]
struct LoggedFetch {
    connection: String,
    session_id: i64,
    session_epoch: i64,
    partitions: BTreeSet<i64>,
    forgotten: usize,
}

/// The Fetch requests with client id `client_id` in Kafka's request log `path` from byte
/// `from` on (kafka.request.logger at DEBUG: `Completed request:{header and body JSON} from
/// connection …`).
fn logged_fetches(path: &Path, from: usize, client_id: &str) -> Vec<LoggedFetch> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let text = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("Completed request:") else {
            continue;
        };
        let rest = &line[at + "Completed request:".len()..];
        let Some(Ok(v)) = serde_json::Deserializer::from_str(rest)
            .into_iter::<Value>()
            .next()
        else {
            continue;
        };
        let header = &v["requestHeader"];
        if header["requestApiKey"] != 1 || header["clientId"] != client_id {
            continue;
        }
        let named = |key: &str| -> Vec<i64> {
            let topics = v["request"][key].as_array().cloned().unwrap_or_default();
            topics
                .iter()
                .flat_map(|t| t["partitions"].as_array().cloned().unwrap_or_default())
                .map(|p| p["partition"].as_i64().or(p.as_i64()).unwrap_or(-1))
                .collect()
        };
        let connection = v["connection"].as_str().unwrap_or_default().to_string();
        out.push(LoggedFetch {
            connection,
            session_id: v["request"]["sessionId"].as_i64().unwrap_or(-100),
            session_epoch: v["request"]["sessionEpoch"].as_i64().unwrap_or(-100),
            partitions: named("topics").into_iter().collect(),
            forgotten: named("forgottenTopicsData").len(),
        });
    }
    out
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // Fields 14 and 15 of stat(5); after the command name, field 3 is index 0.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// 2,000 partitions (replication factor 1, to keep the shared cluster light) followed by one
/// daemon: Kafka's request log shows the daemon's first Fetch to each broker naming every
/// partition that broker leads (a full fetch asking for a session), and its steady-state
/// Fetches incremental in Kafka's session (session id ≠ 0, epoch > 0) naming few or no
/// partitions. The idle daemon stays below 10 % of a core.
#[test]
fn kafka_grants_fetch_sessions_and_steady_state_fetches_of_2000_partitions_are_incremental() {
    let started = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "kp-sessions";
    let partitions = 2000;
    let t = Instant::now();
    let leaders = c.ok(
        json!({"cmd": "create_topic", "topic": topic, "partitions": partitions,
        "replication_factor": 1}),
    )["leaders"]
        .as_array()
        .expect("leaders")
        .iter()
        .map(|l| l.as_i64().unwrap())
        .collect::<Vec<_>>();
    let created = t.elapsed();
    assert_eq!(leaders.len(), partitions);
    let mut led: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for (p, l) in leaders.iter().enumerate() {
        led.entry(*l).or_default().insert(p as i64);
    }
    assert_eq!(led.len(), 3, "every node leads some: {led:?}");
    // A few records in a few partitions.
    let written: [i32; 5] = [0, 1, 2, 777, 1999];
    for (i, p) in written.iter().enumerate() {
        c.ok(
            json!({"cmd": "produce", "topic": topic, "partition": p, "count": 20,
            "batch_records": 10, "seed": i}),
        );
    }
    let request_logs: BTreeMap<i64, PathBuf> = led
        .keys()
        .map(|id| {
            (
                *id,
                PathBuf::from(c.node(*id)["requests"].as_str().unwrap()),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let client_id = "kp-sessions-follower";
    let cfg = support::Config::new(&data, &c.bootstrap)
        .follow(topic)
        .set("client_id", client_id.to_string())
        .set("fetch.max_wait_ms", 500)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 1000)
        .set("log.flush_interval_ms", 1000)
        .write(dir.path());
    let t = Instant::now();
    let mut d = Daemon::start(&cfg);
    wait_until(
        Duration::from_secs(120),
        "all 2000 partitions in the replica",
        || {
            written
                .iter()
                .all(|p| support::log_end(&data, topic, i64::from(*p)) == 20)
                && std::fs::read_dir(&data).map_or(0, |d| {
                    d.filter(|e| {
                        e.as_ref()
                            .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(topic))
                    })
                    .count()
                }) == partitions
        },
    );
    let caught_up = t.elapsed();
    for p in written {
        kafka::assert_same_as_kafka(c, &data, &TopicPartition::new(topic, p));
    }
    // Steady state: a second for anything in flight, then 10 s measured.
    std::thread::sleep(Duration::from_secs(1));
    let marks: BTreeMap<i64, usize> = request_logs
        .iter()
        .map(|(id, p)| (*id, std::fs::metadata(p).map_or(0, |m| m.len() as usize)))
        .collect();
    let ticks = cpu_ticks(d.pid());
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let used = (cpu_ticks(d.pid()) - ticks) as f64 / 100.0;
    let measured = t.elapsed();
    let cpu = used / measured.as_secs_f64();

    // Partitions whose leader did not answer ListOffsets yet (a broker makes itself leader
    // of a new partition a moment after the metadata names it): the daemon starts them a
    // round later, adding them to the session.
    let log = d.log_text();
    let mut deferred: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for line in log.lines() {
        let Some(rest) = line.split(&format!("{topic}-")).nth(1) else {
            continue;
        };
        if let Some((p, why)) = rest.split_once(": cannot set the initial fetch position: ")
            && let Some(b) = why.split(" on broker ").nth(1)
        {
            let b = b.split(' ').next().unwrap().parse::<i64>().unwrap();
            deferred.entry(b).or_default().insert(p.parse().unwrap());
        }
    }
    let mut summary = Vec::new();
    for (id, path) in &request_logs {
        let all = logged_fetches(path, 0, client_id);
        let first = all
            .first()
            .unwrap_or_else(|| panic!("node {id}: no Fetch of {client_id} in {}", path.display()));
        let ready: BTreeSet<i64> = led[id]
            .difference(deferred.get(id).unwrap_or(&BTreeSet::new()))
            .copied()
            .collect();
        assert_eq!(
            (first.session_id, first.session_epoch),
            (0, 0),
            "node {id}: the first Fetch is a full one asking for a session: {first:?}"
        );
        assert!(
            first.partitions == ready,
            "node {id}: the first Fetch names the {} of the {} partitions the node leads that \
             were ready, it named {}",
            ready.len(),
            led[id].len(),
            first.partitions.len()
        );
        // Every partition the node leads joined the session before the steady state.
        let named: BTreeSet<i64> = all.iter().flat_map(|f| f.partitions.clone()).collect();
        assert_eq!(&named, &led[id], "node {id}: partitions fetched");
        let steady = logged_fetches(path, marks[id], client_id);
        assert!(
            steady.len() >= 5,
            "node {id}: {} Fetches in 10 s of steady state",
            steady.len()
        );
        for f in &steady {
            assert!(
                f.session_id != 0
                    && f.session_epoch > 0
                    && f.partitions.is_empty()
                    && f.forgotten == 0,
                "node {id}: a steady-state Fetch is incremental in Kafka's session: {f:?}"
            );
        }
        let connections: BTreeSet<&str> = steady.iter().map(|f| f.connection.as_str()).collect();
        let sessions: BTreeSet<i64> = all.iter().map(|f| f.session_id).collect();
        summary.push(format!(
            "node {id}: leads {}, first Fetch named {} ({} deferred), {} Fetches in all in \
             {} session(s), {} steady Fetches on {} connection(s) naming at most {} \
             partitions, epochs {}..{}",
            led[id].len(),
            first.partitions.len(),
            led[id].len() - ready.len(),
            all.len(),
            sessions.len() - 1,
            steady.len(),
            connections.len(),
            steady.iter().map(|f| f.partitions.len()).max().unwrap_or(0),
            steady.first().map_or(0, |f| f.session_epoch),
            steady.last().map_or(0, |f| f.session_epoch),
        ));
    }
    assert!(cpu < 0.10, "idle CPU {:.1} % of a core", cpu * 100.0);
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    // Gone before the tests that kill nodes: a node killed with SIGKILL recovers every
    // partition it holds when it starts again.
    c.ok(json!({"cmd": "delete_topic", "topic": topic}));
    eprintln!(
        "fetch sessions: topic of {partitions} partitions created in {:.1} s, caught up in \
         {:.1} s, idle CPU {:.2} % of a core ({used:.2} s CPU in {:.1} s); {}; {:.1} s",
        created.as_secs_f64(),
        caught_up.as_secs_f64(),
        cpu * 100.0,
        measured.as_secs_f64(),
        summary.join("; "),
        started.elapsed().as_secs_f64()
    );
}

/// A connection to the broker at `addr`, as the archive and the restore open theirs.
fn admin_connection(addr: &str) -> BrokerConnection {
    BrokerConnection::connect(addr, "kp-admin", 64 << 20)
        .unwrap_or_else(|e| panic!("connect to {addr}: {e:#}"))
}

/// The configs set on the topic itself (source `DYNAMIC_TOPIC_CONFIG`), by name.
fn set_on_topic(entries: &[admin::ConfigEntry]) -> BTreeMap<String, Option<String>> {
    entries
        .iter()
        .filter(|e| e.source == admin::SOURCE_DYNAMIC_TOPIC)
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

/// `f` retried while the broker answers that the coordinator is not there yet (a new
/// `__consumer_offsets` or `__transaction_state` is created on the first FindCoordinator).
fn until_coordinated<T>(what: &str, mut f: impl FnMut() -> admin::Result<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match f() {
            Ok(v) => return v,
            Err(AdminError::Kafka(code, message))
                if Instant::now() < deadline
                    && [
                        ErrorCode::COORDINATOR_NOT_AVAILABLE,
                        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode::NOT_COORDINATOR,
                    ]
                    .contains(&code) =>
            {
                eprintln!("{what}: {message}; again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{what}: {e:#}"),
        }
    }
}

/// The last stable offset and the high watermark of `tp`, from its leader.
fn stable_and_end(conn: &mut BrokerConnection, tp: &TopicPartition) -> (i64, i64) {
    let at = |conn: &mut BrokerConnection, isolation| {
        cluster::list_offset(conn, isolation, tp, -1, list_offsets::LATEST)
            .unwrap()
            .unwrap_or_else(|e| panic!("ListOffsets {tp}: {e}"))
            .offset
    };
    (at(conn, 1), at(conn, 0))
}

/// Every call of `client::admin` against Kafka: a topic created with its partitions placed and
/// its configs set, the configs read back, one set anew and one deleted (and a value Kafka
/// refuses), an idempotent producer's state, a new group's offsets committed at its
/// coordinator and fetched back, the group listed, producer ids, and an open transaction
/// aborted with a marker written to the partition's leader.
#[test]
fn the_admin_calls_create_describe_commit_fetch_list_and_abort_on_kafka() {
    let started = Instant::now();
    let c = cluster();
    let _shared = c.sharing();
    let topic = "kp-admin";
    let node_addr = |id: i32| {
        c.node(i64::from(id))["broker"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut any = admin_connection(&node_addr(1));

    // CreateTopics: checked first, then created; partition 0 led by node 2, 1 by node 3.
    let new = [NewTopic {
        name: topic.to_string(),
        assignments: vec![(0, vec![2, 3, 1]), (1, vec![3, 1, 2])],
        configs: vec![
            ("retention.ms".to_string(), "86400000".to_string()),
            ("segment.bytes".to_string(), "1048576".to_string()),
        ],
    }];
    let checked = admin::create_topics(&mut any, &new, 30_000, true).unwrap();
    assert_eq!(checked.len(), 1);
    assert_eq!(checked[0].error, ErrorCode::NONE, "{checked:?}");
    let created = admin::create_topics(&mut any, &new, 30_000, false).unwrap();
    assert_eq!(
        (created[0].name.as_str(), created[0].error),
        (topic, ErrorCode::NONE)
    );
    let id = created[0].topic_id.expect("v7 returns the topic id");
    let theirs = c.ok(json!({"cmd": "topic_id", "topic": topic}))["topic_id"].clone();
    assert_eq!(
        theirs,
        json!(id.to_string()),
        "the id Kafka's Admin reports"
    );
    let again = admin::create_topics(&mut any, &new, 30_000, false).unwrap();
    assert_eq!(again[0].error, ErrorCode::TOPIC_ALREADY_EXISTS, "{again:?}");
    assert!(again[0].message.is_some(), "{again:?}");
    for (p, replicas) in [(0, json!([2, 3, 1])), (1, json!([3, 1, 2]))] {
        let d = c.ok(json!({"cmd": "describe_partition", "topic": topic, "partition": p}));
        assert_eq!(d["replicas"], replicas, "partition {p}: {d}");
    }

    // DescribeConfigs: the two set on the topic have source 1, the rest come from elsewhere.
    let mut configs = Vec::new();
    wait_until(Duration::from_secs(20), "the new topic's configs", || {
        configs = admin::describe_topic_configs(&mut any, &[topic.to_string()]).unwrap();
        configs[0].error.is_ok()
    });
    assert_eq!(configs[0].topic, topic);
    let entries = &configs[0].entries;
    let want = BTreeMap::from([
        ("retention.ms".to_string(), Some("86400000".to_string())),
        ("segment.bytes".to_string(), Some("1048576".to_string())),
    ]);
    assert_eq!(set_on_topic(entries), want);
    let cleanup = entries.iter().find(|e| e.name == "cleanup.policy");
    let cleanup = cleanup.expect("every config is described");
    assert_eq!(cleanup.value.as_deref(), Some("delete"));
    assert_ne!(cleanup.source, admin::SOURCE_DYNAMIC_TOPIC);
    assert!(entries.len() > 20, "{} configs", entries.len());

    // IncrementalAlterConfigs: retention.ms set anew and segment.bytes deleted, back to its
    // default; what the change does not name stays as it was.
    let changes = [
        ("retention.ms".to_string(), Some("172800000".to_string())),
        ("segment.bytes".to_string(), None),
    ];
    admin::alter_topic_configs(&mut any, topic, &changes).unwrap();
    let want = BTreeMap::from([("retention.ms".to_string(), Some("172800000".to_string()))]);
    let mut altered = Vec::new();
    wait_until(Duration::from_secs(20), "the altered configs", || {
        altered = admin::describe_topic_configs(&mut any, &[topic.to_string()]).unwrap();
        altered[0].error.is_ok() && set_on_topic(&altered[0].entries) == want
    });
    let segment = altered[0]
        .entries
        .iter()
        .find(|e| e.name == "segment.bytes");
    let segment = segment.expect("a deleted config is still described, from its default");
    assert_ne!(segment.value.as_deref(), Some("1048576"), "{segment:?}");
    let cleanup = altered[0]
        .entries
        .iter()
        .find(|e| e.name == "cleanup.policy");
    assert_eq!(cleanup.and_then(|e| e.value.as_deref()), Some("delete"));
    // A value Kafka refuses: the topic's error, with Kafka's message, and nothing changed.
    let bad = [("retention.ms".to_string(), Some("soon".to_string()))];
    match admin::alter_topic_configs(&mut any, topic, &bad) {
        Err(AdminError::Kafka(ErrorCode(40), message)) => assert!(
            message.contains("IncrementalAlterConfigs for topic `kp-admin`: INVALID_CONFIG (40)")
                && message.contains(&node_addr(1)),
            "{message}"
        ),
        wrong => panic!("INVALID_CONFIG expected: {wrong:?}"),
    }
    let after = admin::describe_topic_configs(&mut any, &[topic.to_string()]).unwrap();
    assert_eq!(set_on_topic(&after[0].entries), want);

    // DescribeProducers at partition 0's leader: the idempotent producer's 50 records.
    c.ok(
        json!({"cmd": "produce", "topic": topic, "partition": 0, "count": 50, "seed": 7,
        "idempotent": true}),
    );
    let leader0 = kafka::leader_of(c, topic, 0) as i32;
    let mut leader = admin_connection(&node_addr(leader0));
    let described = admin::describe_producers(&mut leader, topic, &[0]).unwrap();
    assert_eq!(described.len(), 1, "{described:?}");
    assert_eq!(
        (described[0].partition, described[0].error),
        (0, ErrorCode::NONE)
    );
    let [producer] = described[0].producers[..] else {
        panic!("one producer: {described:?}");
    };
    assert!(producer.producer_id >= 0, "{producer:?}");
    assert_eq!(producer.last_sequence, 49, "{producer:?}");
    assert_eq!(
        producer.current_txn_start_offset, -1,
        "no transaction: {producer:?}"
    );

    // A new group's offsets, committed at its coordinator and fetched back.
    let group = "kp-admin-group";
    let coordinator = until_coordinated("FindCoordinator", || {
        admin::find_coordinator(&mut any, admin::KEY_TYPE_GROUP, group)
    });
    let mut coord = admin_connection(&format!("{}:{}", coordinator.host, coordinator.port));
    assert_eq!(node_addr(coordinator.node_id), coord.addr());
    let offsets = vec![
        CommittedOffset {
            topic: topic.to_string(),
            partition: 0,
            offset: 40,
            leader_epoch: 0,
            metadata: Some("first".to_string()),
        },
        CommittedOffset {
            topic: topic.to_string(),
            partition: 1,
            offset: 0,
            leader_epoch: -1,
            metadata: Some(String::new()),
        },
    ];
    let committed = until_coordinated("OffsetCommit", || {
        admin::offset_commit(&mut coord, group, &offsets)
    });
    let none = ErrorCode::NONE;
    let want = vec![(topic.to_string(), 0, none), (topic.to_string(), 1, none)];
    assert_eq!(committed, want);
    let mut fetched = until_coordinated("OffsetFetch", || admin::offset_fetch(&mut coord, group));
    fetched.sort_by_key(|o| o.partition);
    assert_eq!(fetched, offsets, "leader epochs and metadata kept");
    // Another broker is no coordinator of the group: an error to find it again by.
    let other = (1..=3).find(|&n| n != coordinator.node_id).unwrap();
    let mut not_coordinator = admin_connection(&node_addr(other));
    match admin::offset_fetch(&mut not_coordinator, group) {
        Err(AdminError::Kafka(ErrorCode::NOT_COORDINATOR, message)) => assert!(
            message.contains("OffsetFetch for group `kp-admin-group`: NOT_COORDINATOR (16)")
                && message.contains(&node_addr(other)),
            "{message}"
        ),
        wrong => panic!("NOT_COORDINATOR expected: {wrong:?}"),
    }

    // ListGroups: the group is listed by its coordinator, empty, and by no other broker.
    let mut listed = Vec::new();
    for n in 1..=3 {
        let groups = admin::list_groups(&mut admin_connection(&node_addr(n))).unwrap();
        for g in groups.into_iter().filter(|g| g.group_id == group) {
            listed.push((n, g));
        }
    }
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].0, coordinator.node_id);
    assert_eq!(listed[0].1.state.as_deref(), Some("Empty"), "{listed:?}");

    // InitProducerId: an idempotent producer's id from any broker, a transactional id's from
    // its coordinator.
    let (idempotent, epoch) = until_coordinated("InitProducerId", || {
        admin::init_producer_id(&mut any, None, 60_000)
    });
    assert!(idempotent >= 0 && epoch == 0, "{idempotent} {epoch}");
    let tx = "kp-admin-tx";
    let tx_coordinator = until_coordinated("FindCoordinator", || {
        admin::find_coordinator(&mut any, admin::KEY_TYPE_TRANSACTION, tx)
    });
    let mut tx_coord = admin_connection(&node_addr(tx_coordinator.node_id));
    let (transactional, _) = until_coordinated("InitProducerId", || {
        admin::init_producer_id(&mut tx_coord, Some(tx), 60_000)
    });
    assert!(transactional >= 0 && transactional != idempotent);

    // WriteTxnMarkers: a transaction left open on partition 1 holds its last stable offset
    // back until an abort marker written at the leader ends it.
    let end = c.ok(
        json!({"cmd": "transaction_steps", "topic": topic, "partition": 1,
        "steps": [["kp-admin-open", "begin"], ["kp-admin-open", "produce", 5]]}),
    )["end_offset"]
        .as_i64()
        .unwrap();
    let tp1 = TopicPartition::new(topic, 1);
    let leader1 = kafka::leader_of(c, topic, 1) as i32;
    let mut leader = admin_connection(&node_addr(leader1));
    let (stable, high) = stable_and_end(&mut leader, &tp1);
    assert_eq!(
        (stable, high),
        (0, end),
        "the open transaction holds the stable offset"
    );
    let described = admin::describe_producers(&mut leader, topic, &[1]).unwrap();
    let open = described[0]
        .producers
        .iter()
        .find(|p| p.current_txn_start_offset >= 0)
        .unwrap_or_else(|| panic!("an open transaction: {described:?}"));
    assert_eq!(open.current_txn_start_offset, 0, "{open:?}");
    let marker = TxnMarker {
        producer_id: open.producer_id,
        producer_epoch: i16::try_from(open.producer_epoch).unwrap(),
        committed: false,
        topic: topic.to_string(),
        partitions: vec![1],
        coordinator_epoch: open.coordinator_epoch,
    };
    let written = admin::write_txn_markers(&mut leader, &[marker]).unwrap();
    let want = vec![(open.producer_id, topic.to_string(), 1, ErrorCode::NONE)];
    assert_eq!(written, want);
    let mut after = (0, 0);
    wait_until(
        Duration::from_secs(10),
        "the stable offset at the end",
        || {
            after = stable_and_end(&mut leader, &tp1);
            after.0 == after.1
        },
    );
    assert_eq!(after, (end + 1, end + 1), "the abort marker ends the log");
    let described = admin::describe_producers(&mut leader, topic, &[1]).unwrap();
    assert!(
        described[0]
            .producers
            .iter()
            .all(|p| p.current_txn_start_offset == -1),
        "no transaction left open: {described:?}"
    );
    c.ok(json!({"cmd": "delete_topic", "topic": topic}));
    eprintln!(
        "admin calls against Kafka: {} configs described, coordinator {} of the group, \
         producer ids {idempotent} and {transactional}, {:.1} s",
        entries.len(),
        coordinator.node_id,
        started.elapsed().as_secs_f64()
    );
}
