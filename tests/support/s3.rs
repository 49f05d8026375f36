//! Real S3 servers for the offsite tests, each behind a [`Proxy`] the test can cut or stall.
//!
//! Two implementations: moto's server (`moto_server`, from the `moto[server]` wheel in
//! `target/test-venv`; it checks no signature, honours `If-None-Match: *` and ignores
//! `x-amz-checksum-sha256`) and s3s-fs (built from crates.io into `target/s3s-fs` by
//! `tests/setup-env.sh`, or by [`s3s_fs_bin`] on first use; it verifies SigV4 signatures with
//! the one access/secret key pair it is given, honours `If-None-Match: *` and compares
//! `x-amz-checksum-sha256`, though only after it has stored the object: a PUT answered
//! `BadDigest` leaves the bytes it received in place).
//!
//! The daemon talks to [`S3Server::endpoint`] (through the proxy); the tests read what it
//! stored with [`S3Server::objects`] straight from the server.

use super::{free_port, manifest_dir, python};
use fs2::FileExt;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The s3s-fs release built into `target/s3s-fs`; equal to `s3s_fs_version` in
/// `tests/setup-env.sh`. The newest whose rust-version this toolchain meets.
pub const S3S_FS_VERSION: &str = "0.14.1";

/// The credentials every test server is given (moto accepts any; s3s-fs only these).
pub const ACCESS_KEY: &str = "rf-test-access";
pub const SECRET_KEY: &str = "rf-test-secret-0123456789";

/// Which implementation a [`S3Server`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Moto,
    S3sFs,
}

/// An S3 server on a free loopback port, with `bucket` created, behind a [`Proxy`]. Killed
/// (with its proxy) on drop.
pub struct S3Server {
    /// `http://127.0.0.1:PORT` of the proxy: what the daemon is configured with.
    pub endpoint: String,
    /// `http://127.0.0.1:PORT` of the server itself, past the proxy.
    pub direct: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub kind: Kind,
    /// Cut or stall the way to the server with `proxy.cut()`, `proxy.stall()`,
    /// `proxy.restore()`.
    pub proxy: Proxy,
    /// The server's own output (one line per request for moto).
    pub log: PathBuf,
    child: Child,
    /// The server's log and, for s3s-fs, its root (`<dir>/root`, the bucket a folder in it).
    dir: tempfile::TempDir,
}

impl S3Server {
    /// moto's server, with `bucket` created by a PUT.
    pub fn moto(bucket: &str) -> S3Server {
        let bin = python().with_file_name("moto_server");
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir for moto");
        let log = dir.path().join("moto.log");
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let server = S3Server::started(Kind::Moto, bucket, port, child, dir, log);
        let (status, body) = server
            .request(&server.direct, "PUT", "", b"", &[], Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("create bucket {bucket} on moto: {e}"));
        assert_eq!(
            status,
            200,
            "create bucket {bucket} on moto: {}",
            String::from_utf8_lossy(&body)
        );
        server
    }

    /// s3s-fs on a temporary root, checking signatures with [`ACCESS_KEY`] and
    /// [`SECRET_KEY`]; `bucket` is a folder made in the root before it starts.
    pub fn s3s_fs(bucket: &str) -> S3Server {
        let bin = s3s_fs_bin();
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir for s3s-fs");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join(bucket)).expect("create the s3s-fs bucket folder");
        let log = dir.path().join("s3s-fs.log");
        let child = Command::new(&bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        S3Server::started(Kind::S3sFs, bucket, port, child, dir, log)
    }

    /// Waits until the child accepts connections on `port`, then puts the proxy before it.
    fn started(
        kind: Kind,
        bucket: &str,
        port: u16,
        mut child: Child,
        dir: tempfile::TempDir,
        log: PathBuf,
    ) -> S3Server {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().expect("poll the S3 server") {
                panic!(
                    "the {kind:?} server exited ({status}) before answering on {addr}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the {kind:?} server does not answer on {addr} after 60 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let proxy = Proxy::start(addr);
        S3Server {
            endpoint: format!("http://{}", proxy.addr),
            direct: format!("http://{addr}"),
            bucket: bucket.to_string(),
            access_key: ACCESS_KEY.to_string(),
            secret_key: SECRET_KEY.to_string(),
            kind,
            proxy,
            log,
            child,
            dir,
        }
    }

    /// The server's process id (for its CPU time in `/proc/<pid>/stat`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// s3s-fs's root folder (the bucket is `root/<bucket>`); None for moto.
    pub fn root(&self) -> Option<PathBuf> {
        (self.kind == Kind::S3sFs).then(|| self.dir.path().join("root"))
    }

    /// Every object in the bucket with its bytes, sorted by key, read from the server itself
    /// (not through the proxy): moto's through boto3, s3s-fs's from its files.
    pub fn objects(&self) -> Vec<(String, Vec<u8>)> {
        match self.kind {
            Kind::Moto => self.objects_by_boto3(),
            Kind::S3sFs => {
                let bucket_dir = self.root().expect("s3s-fs has a root").join(&self.bucket);
                let mut out = Vec::new();
                collect_files(&bucket_dir, &bucket_dir, &mut out);
                out.sort();
                out
            }
        }
    }

    fn objects_by_boto3(&self) -> Vec<(String, Vec<u8>)> {
        const SCRIPT: &str = r#"
import json, sys, boto3
endpoint, bucket, access, secret = sys.argv[1:5]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=access, aws_secret_access_key=secret)
out = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
    for o in page.get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        out.append([o["Key"], body.hex()])
print(json.dumps(out))
"#;
        let out = Command::new(python())
            .args(["-c", SCRIPT, &self.direct, &self.bucket])
            .args([&self.access_key, &self.secret_key])
            .stderr(Stdio::inherit())
            .output()
            .expect("run python with boto3");
        assert!(
            out.status.success(),
            "listing bucket {} at {} with boto3 failed ({})",
            self.bucket,
            self.direct,
            out.status
        );
        let listed: Vec<(String, String)> =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "boto3 listing {:?}: {e}",
                    String::from_utf8_lossy(&out.stdout)
                )
            });
        let mut objects: Vec<(String, Vec<u8>)> = listed
            .into_iter()
            .map(|(key, hex)| {
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex from boto3"))
                    .collect();
                (key, bytes)
            })
            .collect();
        objects.sort();
        objects
    }

    /// The `[offsite]` section for this server. Writes the access and secret keys to
    /// `<creds_dir>/access` and `<creds_dir>/secret` (mode 0600); names `key_file` (see
    /// [`write_key_file`]) as the encryption key when given.
    pub fn config_toml(&self, key_file: Option<&Path>, creds_dir: &Path) -> String {
        std::fs::create_dir_all(creds_dir).expect("create the credentials folder");
        let access = creds_dir.join("access");
        let secret = creds_dir.join("secret");
        write_private(&access, self.access_key.as_bytes());
        write_private(&secret, self.secret_key.as_bytes());
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        let path = |p: &Path| quote(p.to_str().expect("a UTF-8 path"));
        let mut out = format!(
            "[offsite]\nendpoint = {}\nbucket = {}\nregion = \"us-east-1\"\n\
             access_key_file = {}\nsecret_key_file = {}\n",
            quote(&self.endpoint),
            quote(&self.bucket),
            path(&access),
            path(&secret),
        );
        if let Some(key_file) = key_file {
            out.push_str(&format!("encryption_key_file = {}\n", path(key_file)));
        }
        out.push_str("max_delay_ms = 2000\n");
        out
    }

    /// One request to `base` (`self.endpoint` or `self.direct`) for `key` in the bucket
    /// (`""`: the bucket itself; `key` may carry a `?query`), signed with SigV4 by curl with
    /// this server's keys (payload unsigned), `body` sent as is, within `max_time`:
    /// `(status, body)`, or curl's error (connection refused, reset, timed out).
    pub fn request(
        &self,
        base: &str,
        method: &str,
        key: &str,
        body: &[u8],
        headers: &[(&str, &str)],
        max_time: Duration,
    ) -> Result<(u16, Vec<u8>), String> {
        let url = if key.is_empty() {
            format!("{base}/{}", self.bucket)
        } else {
            format!("{base}/{}/{key}", self.bucket)
        };
        let mut cmd = Command::new("curl");
        cmd.args([
            "--silent",
            "--show-error",
            "--dump-header",
            "-",
            "--request",
            method,
        ])
        .args(["--max-time", &format!("{:.3}", max_time.as_secs_f64())])
        .args(["--aws-sigv4", "aws:amz:us-east-1:s3", "--user"])
        .arg(format!("{}:{}", self.access_key, self.secret_key))
        .args(["--header", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
        .args(["--header", "Content-Type: application/octet-stream"])
        // The body at once, without waiting for a `100 Continue` (removing the `Expect`
        // header instead breaks curl's signature).
        .args(["--expect100-timeout", "0"]);
        for (name, value) in headers {
            cmd.args(["--header", &format!("{name}: {value}")]);
        }
        if method == "PUT" || method == "POST" {
            cmd.args(["--data-binary", "@-"]);
        }
        let mut child = cmd
            .arg(&url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run curl (Debian's curl)");
        let mut stdin = child.stdin.take().expect("curl stdin");
        let body = body.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
        let out = child.wait_with_output().expect("wait for curl");
        let _ = writer.join();
        if !out.status.success() {
            return Err(format!(
                "curl {method} {url}: {} ({})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ));
        }
        parse_response(&out.stdout).ok_or_else(|| {
            format!(
                "curl {method} {url}: no HTTP answer in {:?}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// PUT `key` through the proxy: the status.
    pub fn put(&self, key: &str, body: &[u8]) -> Result<u16, String> {
        self.request(
            &self.endpoint,
            "PUT",
            key,
            body,
            &[],
            Duration::from_secs(10),
        )
        .map(|(status, _)| status)
    }

    /// GET `key` through the proxy: status and body.
    pub fn get(&self, key: &str) -> Result<(u16, Vec<u8>), String> {
        self.request(
            &self.endpoint,
            "GET",
            key,
            b"",
            &[],
            Duration::from_secs(10),
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(status, body)` of curl's `--dump-header -` output: the last header block (after any
/// interim answer) and what follows it.
fn parse_response(out: &[u8]) -> Option<(u16, Vec<u8>)> {
    let mut rest = out;
    loop {
        let end = rest.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&rest[..end]).to_string();
        let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
        rest = &rest[end + 4..];
        if !(100..200).contains(&status) {
            return Some((status, rest.to_vec()));
        }
    }
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

fn write_private(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(bytes)
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Writes `key` as the 64 hex digits of an `encryption_key_file` (mode 0600).
pub fn write_key_file(path: &Path, key: &[u8; 32]) {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    write_private(path, format!("{hex}\n").as_bytes());
}

/// Every file under `dir`, keyed by its path from `base` with `/` between folders.
fn collect_files(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("read a folder entry").path();
        if path.is_dir() {
            collect_files(base, &path, out);
        } else {
            let key = path
                .strip_prefix(base)
                .expect("under the bucket folder")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let bytes =
                std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            out.push((key, bytes));
        }
    }
}

/// `target/s3s-fs/bin/s3s-fs` at [`S3S_FS_VERSION`], built with `cargo install` first when it
/// is missing or another version (under a file lock, so parallel test binaries build once;
/// one attempt per test binary). tests/setup-env.sh builds it before the tests; this covers a
/// test run without it.
pub fn s3s_fs_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(build_s3s_fs)
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn build_s3s_fs() -> Result<PathBuf, String> {
    let target = manifest_dir().join("target");
    std::fs::create_dir_all(&target).expect("create target/");
    let root = target.join("s3s-fs");
    let bin = root.join("bin").join("s3s-fs");
    let wanted = format!("s3s-fs {S3S_FS_VERSION}");
    let version = |bin: &Path| {
        Command::new(bin)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if version(&bin).as_deref() == Some(wanted.as_str()) {
        return Ok(bin);
    }
    let lock = std::fs::File::create(target.join("s3s-fs.lock")).expect("create s3s-fs lock");
    lock.lock_exclusive().expect("lock s3s-fs");
    if version(&bin).as_deref() == Some(wanted.as_str()) {
        return Ok(bin);
    }
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()))
        .args(["install", "s3s-fs", "--version", S3S_FS_VERSION])
        .args(["--features", "binary", "--locked", "--root"])
        .arg(&root)
        .output()
        .expect("run cargo install s3s-fs");
    if !out.status.success() {
        return Err(format!(
            "s3s-fs {S3S_FS_VERSION} is missing and could not be built \
             (cargo install s3s-fs --version {S3S_FS_VERSION} --features binary --locked \
             --root target/s3s-fs, as tests/setup-env.sh does): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(bin)
}

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    Cut,
    Stall,
    Closed,
}

struct ProxyState {
    mode: Mode,
    listener: Option<TcpListener>,
    /// Every open connection's sockets (the client's and, once made, the server's), to shut
    /// down on a cut.
    conns: HashMap<u64, Vec<TcpStream>>,
    next_id: u64,
    accepted: u64,
}

struct Shared {
    state: Mutex<ProxyState>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ProxyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits while the proxy stalls; the mode it ends in.
    fn wait_unstalled(&self) -> Mode {
        let mut state = self.lock();
        while state.mode == Mode::Stall {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.mode
    }
}

/// A TCP proxy on 127.0.0.1 (std threads) in front of one server, with two faults:
///
/// - [`Proxy::cut`]: the server becomes unreachable the way a stopped server or a firewall's
///   REJECT makes it: the proxy stops listening, so new connections are refused at once
///   (ECONNREFUSED), and every open connection is shut down (the client reads EOF or gets a
///   reset mid-request).
/// - [`Proxy::stall`]: the way a partition or a firewall's DROP does: connections are still
///   accepted but nothing passes either way, on new and on open connections, so the client's
///   own timeout is what ends its request.
///
/// [`Proxy::restore`] forwards again on the same port (what a stall held back is then
/// delivered, as TCP would after a partition heals). Closed on drop.
pub struct Proxy {
    /// Where the proxy listens.
    pub addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("nonblocking proxy listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            state: Mutex::new(ProxyState {
                mode: Mode::Forward,
                listener: Some(listener),
                conns: HashMap::new(),
                next_id: 0,
                accepted: 0,
            }),
            changed: Condvar::new(),
        });
        let for_acceptor = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || accept_loop(&for_acceptor, upstream))
            .expect("spawn the proxy");
        Proxy {
            addr,
            upstream,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Refuses new connections and closes every open one (see [`Proxy`]).
    pub fn cut(&self) {
        let mut state = self.shared.lock();
        state.mode = Mode::Cut;
        state.listener = None;
        close_all(&mut state);
        self.shared.changed.notify_all();
    }

    /// Accepts connections and holds them, and holds open ones, passing nothing (see
    /// [`Proxy`]).
    pub fn stall(&self) {
        let mut state = self.shared.lock();
        self.listen(&mut state);
        state.mode = Mode::Stall;
        self.shared.changed.notify_all();
    }

    /// Forwards again after a cut or a stall.
    pub fn restore(&self) {
        let mut state = self.shared.lock();
        self.listen(&mut state);
        state.mode = Mode::Forward;
        self.shared.changed.notify_all();
    }

    /// How many connections the proxy accepted so far (held and refused ones too).
    pub fn accepted(&self) -> u64 {
        self.shared.lock().accepted
    }

    /// Listens on the proxy's port again after a cut.
    fn listen(&self, state: &mut ProxyState) {
        if state.listener.is_some() {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => {
                    panic!("the proxy cannot listen on {} again: {e}", self.addr)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        listener
            .set_nonblocking(true)
            .expect("nonblocking proxy listener");
        state.listener = Some(listener);
    }

    /// The server behind the proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.mode = Mode::Closed;
            state.listener = None;
            close_all(&mut state);
            self.shared.changed.notify_all();
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn close_all(state: &mut ProxyState) {
    for (_, sockets) in state.conns.drain() {
        for s in sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, upstream: SocketAddr) {
    loop {
        let accepted = {
            let mut state = shared.lock();
            if state.mode == Mode::Closed {
                return;
            }
            match state.listener.as_ref().map(TcpListener::accept) {
                Some(Ok((client, _))) => {
                    state.accepted += 1;
                    let id = state.next_id;
                    state.next_id += 1;
                    match client.try_clone() {
                        Ok(clone) => {
                            state.conns.insert(id, vec![clone]);
                            Some((id, client))
                        }
                        Err(_) => None,
                    }
                }
                _ => None,
            }
        };
        match accepted {
            Some((id, client)) => {
                let shared = Arc::clone(shared);
                let _ = std::thread::Builder::new()
                    .name(format!("proxy-conn-{id}"))
                    .spawn(move || {
                        serve(&shared, id, client, upstream);
                        shared.lock().conns.remove(&id);
                    });
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// One connection: held while the proxy stalls, then joined to a new connection to the
/// server, bytes pumped both ways until either side closes or a cut shuts both down.
fn serve(shared: &Arc<Shared>, id: u64, client: TcpStream, upstream: SocketAddr) {
    let _ = client.set_nonblocking(false);
    if shared.wait_unstalled() != Mode::Forward {
        let _ = client.shutdown(Shutdown::Both);
        return;
    }
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    {
        let mut state = shared.lock();
        let Some(sockets) = state.conns.get_mut(&id) else {
            // Cut while connecting.
            let _ = server.shutdown(Shutdown::Both);
            return;
        };
        match server.try_clone() {
            Ok(clone) => sockets.push(clone),
            Err(_) => return,
        }
    }
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
        return;
    };
    let up_shared = Arc::clone(shared);
    let up = std::thread::Builder::new()
        .name(format!("proxy-up-{id}"))
        .spawn(move || pump(&up_shared, client_in, server));
    pump(shared, server_in, client);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

/// Copies `from` to `to` until EOF (then half-closes `to`), an error, or a cut; each chunk
/// waits while the proxy stalls.
fn pump(shared: &Shared, mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        };
        if shared.wait_unstalled() != Mode::Forward || to.write_all(&buf[..n]).is_err() {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// A daemon configuration: `base` written into `dir`, with `offsite` (an `[offsite]` section,
/// see [`S3Server::config_toml`]) appended.
pub fn write_config(base: &super::Config, offsite: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create the config folder");
    let path = base.write(dir);
    let mut text = std::fs::read_to_string(&path).expect("read the config back");
    text.push('\n');
    text.push_str(offsite);
    std::fs::write(&path, text).expect("write the config");
    path
}

/// The `offsite` object of `status --json`.
pub fn offsite_status(data: &Path) -> serde_json::Value {
    super::status(data)["offsite"].clone()
}

/// The base offset of the first segment in a partition directory (none while it does not
/// exist yet).
pub fn first_local_base(dir: &Path) -> Option<i64> {
    if !dir.is_dir() {
        return None;
    }
    super::segment_logs(dir).keys().next().copied()
}
