//! The replica as a read-only Kafka broker (`[serve]`, and `replica-follower serve`).
//!
//! # Shape
//! One accept thread (`serve-accept`) and one thread per connection (`serve-conn-N`), std
//! threads all; none is watched by the systemd watchdog, so a slow client can never restart
//! the daemon. Requests on a connection are answered in order, one at a time.
//!
//! # What it speaks
//! ApiVersions v0–3, Metadata v1–12, ListOffsets v1–7, Fetch v4–13 (v7+ with incremental
//! sessions, KIP-227: [`sessions`], one cache shared by every connection), OffsetForLeaderEpoch
//! v2–4 ([`handlers`]); this node (`node_id`) leads every local partition alone. Produce,
//! the group APIs and the admin APIs are answered with the error Kafka gives a client that
//! may not do that, non-retriable ([`refusals`] has the table); they are advertised too, so
//! that clients send them and report that error. A request at a version outside the
//! advertised range, of an API not advertised, or that cannot be decoded closes the
//! connection, as Kafka's broker does for a request it cannot parse (a debug line says why).
//!
//! # Reading while the follower writes
//! A request takes a snapshot of a partition's positions under its lock
//! ([`crate::log::read_view`]) and releases it before touching a file or the socket. Record
//! bytes go from the segment files to the socket with `sendfile(2)`, never through a buffer
//! of ours ([`response`]); over TLS they are read in bounded chunks and written through
//! rustls, which must encrypt them. Long-polling
//! fetches wait on the log manager's [`AppendSignal`](crate::log::manager::AppendSignal),
//! which the follower notifies after every append.
//!
//! # Limits for an exposed port
//! At most `max_connections` connections, `max_connections_per_ip` from one address (more
//! are accepted and closed at once, with one WARN a minute at most per limit); a frame above
//! `max_request_bytes` closes its connection; a connection with no whole request for
//! `idle_timeout_ms` is closed; a client that does not take its response within
//! [`WRITE_TIMEOUT`] plus its size at 64 KiB/s is dropped. Memory, descriptors and work for
//! clients that left are bounded in [`limits`]. With TLS (`serve.protocol` SSL) the handshake runs on
//! the connection's thread and must end within [`FRAME_DEADLINE`] (and the idle timeout):
//! a client that connects and says nothing holds its slot no longer than that; one that does
//! not speak TLS is closed (a debug line says why), the others go on.
//!
//! # Security
//! [`ServeOptions::security`] says what clients must speak. With SASL ([`auth`]), an
//! unauthenticated connection gets only ApiVersions and the SASL APIs, as Kafka's broker
//! does; anything else, or a failed authentication, closes it. Without TLS or SASL, bind to
//! loopback or a trusted network.

pub mod auth;
#[doc(hidden)]
pub mod fuzzing;
pub mod handlers;
pub mod limits;
pub mod refusals;
pub mod response;
pub mod sessions;
pub mod source;

use crate::config::ServeSection;
use crate::protocol::codec::{Reader, Writer};
use crate::protocol::{ApiKey, RefusedApi};
use crate::security::{ListenerSecurity, Stream};
use anyhow::{Context as _, Result};
use handlers::Context;
use response::{Piece, write_frame_by};
use source::Source;
use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A client that does not take its response within this is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// A request frame, once its size arrived, must arrive whole within this.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(30);
/// The most bytes a response may hold in memory beside the record data it sends from the
/// segment files: the answer to a request of many items (partitions, topics, resources) is
/// refused beyond this, and the connection closed.
pub const MAX_HELD_RESPONSE_BYTES: usize = 4 << 20;
/// How long accepting pauses after a failed accept (out of descriptors, mostly).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The settings of a listener (from `[serve]` or the `serve` command line).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: String,
    pub advertised: Option<String>,
    pub node_id: i32,
    pub max_connections: usize,
    /// Connections from one address beyond this are closed at once.
    pub max_connections_per_ip: usize,
    pub max_request_bytes: i32,
    /// The memory shared by every connection beyond their allowances ([`limits`]).
    pub max_memory_bytes: usize,
    pub idle_timeout: Duration,
    /// Whose replica id ≥ 0 is a follower's (session priority): these addresses...
    pub follower_addresses: Vec<limits::Cidr>,
    /// ... and these SASL users.
    pub follower_principals: Vec<String>,
    /// Incremental fetch sessions held at most ([`sessions`]).
    pub max_fetch_sessions: usize,
    /// The most record bytes in one Fetch response (`serve.fetch_max_bytes`).
    pub fetch_max_bytes: i32,
    /// Each connection's `SO_SNDBUF` (`serve.socket_send_buffer_bytes`; `None`: the
    /// system's autotuned buffer).
    pub send_buffer: Option<usize>,
    /// What clients must speak (TLS; loaded once, at start).
    pub security: ListenerSecurity,
}

impl ServeOptions {
    /// From `[serve]` and the listener's `security` (its files loaded); `None` when `listen`
    /// is not set. A users file without users is warned of: every SASL client is refused.
    pub fn from_section(
        s: &ServeSection,
        security: ListenerSecurity,
    ) -> Result<Option<ServeOptions>> {
        let Some(listen) = s.listen.clone() else {
            return Ok(None);
        };
        if let (Some(sasl), Some(file)) = (&security.sasl, &s.sasl_users_file)
            && sasl.users.names().is_empty()
        {
            crate::log_warn!(
                "serve: the users file `{}` has no users: every SASL client will be refused (add one with `replica-follower add-user`)",
                file.display()
            );
        }
        Ok(Some(ServeOptions {
            listen,
            advertised: s.advertised.clone(),
            node_id: s.node_id,
            max_connections: s.max_connections,
            max_connections_per_ip: s.max_connections_per_ip,
            max_request_bytes: s.max_request_bytes,
            max_memory_bytes: s.max_memory_bytes,
            idle_timeout: Duration::from_millis(s.idle_timeout_ms as u64),
            follower_addresses: s
                .follower_addresses
                .iter()
                .map(|a| {
                    limits::Cidr::parse(a)
                        .with_context(|| format!("serve.follower_addresses: `{a}`"))
                })
                .collect::<Result<_>>()?,
            follower_principals: s.follower_principals.clone(),
            max_fetch_sessions: s.max_fetch_sessions,
            fetch_max_bytes: s.fetch_max_bytes,
            send_buffer: usize::try_from(s.socket_send_buffer_bytes).ok(),
            security,
        }))
    }
}

struct Shared {
    ctx: Context,
    opts: ServeOptions,
    open: AtomicUsize,
    next_id: AtomicU64,
    /// A clone of each open connection, to shut it down on stop.
    conns: Mutex<HashMap<u64, TcpStream>>,
    /// Open connections per client address.
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    /// When the last "too many connections" WARN was said, per reason.
    last_refusal_warn: Mutex<HashMap<&'static str, Instant>>,
    memory: Arc<limits::MemoryPool>,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn per_ip(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.per_ip
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a connection from `ip` may open; counted if so.
    fn admit_ip(&self, ip: IpAddr) -> bool {
        let mut per_ip = self.per_ip();
        let n = per_ip.entry(ip).or_insert(0);
        if *n >= self.opts.max_connections_per_ip {
            return false;
        }
        *n += 1;
        true
    }

    fn release_ip(&self, ip: IpAddr) {
        let mut per_ip = self.per_ip();
        if let Some(n) = per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                per_ip.remove(&ip);
            }
        }
    }

    /// Whether a client at `ip`, authenticated as `principal`, is a follower the config trusts.
    fn trusted_follower(&self, ip: IpAddr, principal: Option<&str>) -> bool {
        self.opts.follower_addresses.iter().any(|c| c.contains(ip))
            || principal.is_some_and(|p| self.opts.follower_principals.iter().any(|f| f == p))
    }
}

/// A running listener; [`Server::stop`] (or dropping it) closes it and every connection.
pub struct Server {
    shared: Arc<Shared>,
    addr: std::net::SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `opts.listen` (an error names it) and starts accepting.
    pub fn start(opts: ServeOptions, source: Source) -> Result<Server> {
        let listener = TcpListener::bind(&opts.listen)
            .with_context(|| format!("cannot listen on serve.listen = \"{}\"", opts.listen))?;
        let addr = listener.local_addr().context("listener address")?;
        let advertised = opts.advertised.clone().unwrap_or_else(|| addr.to_string());
        let (host, port) = advertised
            .rsplit_once(':')
            .map(|(h, p)| (h.to_string(), p.parse::<i32>().unwrap_or(0)))
            .unwrap_or((advertised.clone(), 0));
        let limit = crate::log::resources::descriptors::limit_at_start();
        let log_files = match crate::log::resources::open_files::shared().budget() {
            usize::MAX => 0,
            n => n,
        };
        // The segment files the log holds now are within its budget: counted once.
        let open_outside_log = crate::log::resources::descriptors::open_count()
            .unwrap_or(0)
            .saturating_sub(crate::log::resources::open_files::shared().open_count() as u64);
        let fds = limits::descriptor_share(limit, log_files, open_outside_log);
        if let Some(limit) = limit
            && fds < opts.max_connections * limits::PER_CONNECTION
        {
            // Not a fault: what the limit allows, said once so that refusals are expected.
            crate::log_info!(
                "serve: the listener has {fds} descriptors (open-file limit {limit} less log.max_open_files {log_files} and {} for the daemon's own files): about {} connections at once (serve.max_connections is {}), more are closed at once; raise the limit (LimitNOFILE=) or lower log.max_open_files for more",
                crate::log::resources::descriptors::RESERVE,
                fds / limits::PER_CONNECTION,
                opts.max_connections
            );
        }
        let shared = Arc::new(Shared {
            ctx: Context {
                source,
                node_id: opts.node_id,
                host,
                port,
                stopping: Default::default(),
                sessions: sessions::FetchSessionCache::new(
                    opts.max_fetch_sessions,
                    opts.max_request_bytes,
                ),
                fds: limits::Descriptors::new(fds),
                fetch_max_bytes: opts.fetch_max_bytes,
            },
            memory: limits::MemoryPool::new(opts.max_memory_bytes),
            opts,
            open: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            per_ip: Mutex::new(HashMap::new()),
            last_refusal_warn: Mutex::new(HashMap::new()),
        });
        limits::listener_stats().started(shared.memory.clone(), shared.ctx.fds.clone());
        let s2 = shared.clone();
        let accept = std::thread::Builder::new()
            .name("serve-accept".into())
            .spawn(move || accept_loop(&s2, &listener))
            .context("failed to start the serve accept thread")?;
        crate::log_info!(
            "serving the replica as a read-only Kafka broker on {addr} (node {}, advertised as {advertised}, {})",
            shared.opts.node_id,
            {
                let sec = &shared.opts.security;
                let tls = match &sec.tls {
                    None => "",
                    Some(t) if t.verifies_clients() => "SSL, client certificates required",
                    Some(_) => "SSL",
                };
                match (&sec.sasl, tls) {
                    (None, "") => "PLAINTEXT".to_string(),
                    (None, tls) => tls.to_string(),
                    (Some(s), tls) => format!(
                        "SASL_{}: {}",
                        if tls.is_empty() {
                            "PLAINTEXT".to_string()
                        } else {
                            tls.to_string()
                        },
                        s.mechanisms
                            .iter()
                            .map(|m| m.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            }
        );
        Ok(Server {
            shared,
            addr,
            accept: Some(accept),
        })
    }

    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Closes the listener and shuts every connection down; a fetch waiting for data is
    /// woken. Connection threads are not joined (a client mid-send must not hold up a
    /// shutdown): their sockets are closed, so they end at once.
    pub fn stop(&mut self) {
        self.shared.ctx.stopping.store(true, Ordering::SeqCst);
        self.shared.ctx.source.appended().notify();
        // The accept thread blocks in accept(2) (no polling while idle): a connection of our
        // own wakes it to see the flag.
        let woken = wake_accept(self.addr);
        if let Some(t) = self.accept.take()
            && woken
        {
            let _ = t.join();
        }
        for (_, c) in self.shared.conns().drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// Wakes a thread blocked in accept(2) on `addr` (its stop flag already set) with a
/// connection of its own; false if none could be made within a second.
pub fn wake_accept(mut addr: std::net::SocketAddr) -> bool {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    // A wildcard listener is reached on loopback; one on the IPv4-mapped wildcard only by IPv4.
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => addr.set_ip(Ipv4Addr::LOCALHOST.into()),
        IpAddr::V6(ip) if ip.is_unspecified() => addr.set_ip(Ipv6Addr::LOCALHOST.into()),
        IpAddr::V6(ip) if ip.to_ipv4_mapped().is_some_and(|v4| v4.is_unspecified()) => {
            addr.set_ip(Ipv4Addr::LOCALHOST.into())
        }
        _ => {}
    }
    let woken = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    if let Err(e) = &woken {
        crate::log_debug!("cannot wake the listener at {addr}: {e}");
    }
    woken.is_ok()
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    while !shared.ctx.stopping.load(Ordering::SeqCst) {
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, mostly: wait, the connections that end free some.
                if crate::log::resources::open_files::is_exhausted_io(&e) {
                    crate::log::resources::descriptors::report(&format!(
                        "serve: accepting a connection failed: {e}"
                    ));
                } else {
                    crate::log_debug!("serve: accept failed: {e}");
                }
                std::thread::sleep(ACCEPT_RETRY);
                continue;
            }
        };
        if shared.ctx.stopping.load(Ordering::SeqCst) {
            break;
        }
        let ip = canonical(peer.ip());
        if shared.open.load(Ordering::SeqCst) >= shared.opts.max_connections {
            refuse(
                shared,
                stream,
                "serve.max_connections",
                format!("{} connections open", shared.opts.max_connections),
            );
            continue;
        }
        // The socket, its copy kept to shut it down, and a file opened for a moment.
        let Some(permit) = shared.ctx.fds.take(limits::PER_CONNECTION) else {
            refuse(
                shared,
                stream,
                "descriptors",
                format!(
                    "the listener's {} descriptors are in use",
                    shared.ctx.fds.capacity()
                ),
            );
            continue;
        };
        if !shared.admit_ip(ip) {
            refuse(
                shared,
                stream,
                "serve.max_connections_per_ip",
                format!(
                    "{} connections open from {ip}",
                    shared.opts.max_connections_per_ip
                ),
            );
            continue;
        }
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        let Ok(handle) = stream.try_clone() else {
            shared.release_ip(ip);
            continue;
        };
        shared.open.fetch_add(1, Ordering::SeqCst);
        limits::listener_stats()
            .connections
            .fetch_add(1, Ordering::Relaxed);
        shared.conns().insert(id, handle);
        let s2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("serve-conn-{id}"))
            .stack_size(CONNECTION_STACK)
            .spawn(move || {
                // Released however the thread ends, a panic included.
                let _open = OpenConnection {
                    shared: s2.clone(),
                    id,
                    ip,
                    _permit: permit,
                };
                if let Err(e) = serve_connection(&s2, stream, ip) {
                    crate::log_debug!("serve: connection from {peer} closed: {e:#}");
                }
            });
        if spawned.is_err() {
            shared.conns().remove(&id);
            shared.release_ip(ip);
            shared.open.fetch_sub(1, Ordering::SeqCst);
            limits::listener_stats()
                .connections
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What an open connection holds of the listener, given back when its thread ends.
struct OpenConnection {
    shared: Arc<Shared>,
    id: u64,
    ip: IpAddr,
    _permit: limits::DescriptorPermit,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.shared.conns().remove(&self.id);
        self.shared.release_ip(self.ip);
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
        limits::listener_stats()
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's thread stack: its requests are answered with buffers on the heap, counted
/// in its memory ([`limits`]), so a small stack does; it bounds the address space the
/// listener reserves per connection.
const CONNECTION_STACK: usize = 512 << 10;

/// An IPv4 client reaching an IPv6 wildcard listener is still that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Closes a connection a limit (`key`) does not admit, at once; says so once a minute at
/// most per limit.
fn refuse(shared: &Shared, stream: TcpStream, key: &'static str, why: String) {
    let _ = stream.shutdown(Shutdown::Both);
    drop(stream);
    let stats = limits::listener_stats();
    match key {
        "serve.max_connections" => &stats.refused_max_connections,
        "serve.max_connections_per_ip" => &stats.refused_per_ip,
        _ => &stats.refused_descriptors,
    }
    .fetch_add(1, Ordering::Relaxed);
    let mut last = shared
        .last_refusal_warn
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last
        .get(key)
        .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
    {
        last.insert(key, Instant::now());
        crate::log_warn!("serve: {why} ({key}); refusing more (said once a minute)");
    }
}

/// Why a connection ends.
#[derive(Debug)]
enum Closed {
    /// The client went away or was idle too long.
    Eof,
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client closed it or was idle")
    }
}

impl std::error::Error for Closed {}

/// Fills `buf` from the socket by `deadline` (every socket read, under TLS too, waits no
/// longer); how many bytes came before the client closed (fewer than asked) or the deadline.
fn read_by(stream: &mut Stream, buf: &mut [u8], deadline: Instant) -> Result<usize> {
    let mut got = 0;
    stream.set_deadline(Some(deadline));
    let result = loop {
        if got == buf.len() {
            break Ok(got);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Ok(got);
        }
        if let Err(e) = stream.tcp().set_read_timeout(Some(left)) {
            break Err(e.into());
        }
        match stream.read(buf.get_mut(got..).unwrap_or_default()) {
            Ok(0) => break Ok(got),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => break Err(anyhow::Error::from(e).context("reading a request")),
        }
    };
    stream.set_deadline(None);
    result
}

/// A request frame read whole, and the memory it holds.
struct Request {
    lease: limits::Lease,
}

/// Reads the next request frame into `buf`: `None` when the client closed or stayed idle.
///
/// The whole request, however slowly it comes, must arrive within the idle timeout (and
/// within [`FRAME_DEADLINE`] of its size). Its bytes are read only once the listener's memory
/// holds them ([`limits`]): until then the connection is muted. The lease then grows to what
/// answering it is charged, before a byte of it is decoded.
fn read_request(
    shared: &Shared,
    stream: &mut Stream,
    buf: &mut Vec<u8>,
) -> Result<Option<Request>> {
    let max = shared.opts.max_request_bytes;
    let idle_deadline = Instant::now() + shared.opts.idle_timeout;
    let mut size = [0u8; 4];
    match read_by(stream, &mut size, idle_deadline) {
        Ok(4) => {}
        Ok(0) => return Ok(None),
        Ok(n) => anyhow::bail!(
            "{n} of the 4 bytes of a request's size came within serve.idle_timeout_ms ({} ms)",
            shared.opts.idle_timeout.as_millis()
        ),
        Err(_) => return Err(Closed::Eof.into()),
    }
    let size = i32::from_be_bytes(size);
    if !(0..=max).contains(&size) {
        anyhow::bail!("a request frame of {size} bytes (serve.max_request_bytes is {max})");
    }
    let want = size as usize;
    let sized = Instant::now();
    // The whole charge is held before a byte is read: requests never wait holding part of
    // the pool (a Metadata request adds its answer's share once its key is known).
    let mut lease = {
        let tcp = stream.tcp();
        shared
            .memory
            .lease(
                limits::request_charge(want),
                sized + FRAME_DEADLINE,
                &|| gone(shared, tcp),
            )
            .map_err(|e| muted_too_long(shared, e))?
    };
    // Time spent muted is the listener's, not the client's.
    let muted = sized.elapsed();
    let deadline = idle_deadline.min(sized + FRAME_DEADLINE) + muted;
    buf.clear();
    buf.reserve_exact(want);
    while buf.len() < want {
        let start = buf.len();
        let chunk = (want - start).min(64 << 10);
        buf.resize(start + chunk, 0);
        let got = read_by(stream, buf.get_mut(start..).unwrap_or_default(), deadline)?;
        buf.truncate(start + got);
        if got < chunk {
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "a request did not arrive whole within serve.idle_timeout_ms ({} ms) or {} s of its size ({} of {want} bytes)",
                    shared.opts.idle_timeout.as_millis(),
                    FRAME_DEADLINE.as_secs(),
                    buf.len()
                );
            }
            anyhow::bail!(
                "the request frame ended early ({} of {want} bytes)",
                buf.len()
            );
        }
    }
    // A Metadata answer about more local partitions than the whole pool covers is built
    // holding the whole pool: one at a time, and never refused.
    let charge = (limits::request_charge(want) + metadata_charge(shared, buf))
        .min(limits::largest_charge(shared.memory.capacity()));
    let tcp = stream.tcp();
    lease
        .grow_to(charge, Instant::now() + FRAME_DEADLINE, &|| {
            gone(shared, tcp)
        })
        .map_err(|e| muted_too_long(shared, e))?;
    Ok(Some(Request { lease }))
}

/// Whether work for the client at `tcp` should stop: it left, or the listener stops.
fn gone(shared: &Shared, tcp: &TcpStream) -> bool {
    shared.ctx.stopping.load(Ordering::SeqCst) || limits::peer_gone(tcp)
}

/// What a Metadata answer about the local topics may take beyond what its request names: a
/// request of a few bytes asks about every topic.
fn metadata_charge(shared: &Shared, frame: &[u8]) -> usize {
    if frame.get(..2) != Some(&ApiKey::Metadata.key().to_be_bytes()[..]) {
        return 0;
    }
    shared
        .ctx
        .source
        .partitions()
        .iter()
        .map(|tp| tp.topic.len() + METADATA_BYTES_PER_PARTITION)
        .sum()
}

/// What one partition's Metadata answer takes, decoded and encoded, at most.
const METADATA_BYTES_PER_PARTITION: usize = 192;

fn muted_too_long(shared: &Shared, e: limits::NoMemory) -> anyhow::Error {
    match e {
        limits::NoMemory::GaveUp => anyhow::anyhow!(
            "no memory for its request within {} s (serve.max_memory_bytes {} in use), or the client left",
            FRAME_DEADLINE.as_secs(),
            shared.memory.capacity()
        ),
        limits::NoMemory::TooLarge { wanted, capacity } => anyhow::anyhow!(
            "its request would take {wanted} bytes of the listener's memory, more than serve.max_memory_bytes ({capacity})"
        ),
    }
}

fn serve_connection(shared: &Shared, tcp: TcpStream, ip: IpAddr) -> Result<()> {
    tcp.set_nodelay(true)?;
    if let Some(size) = shared.opts.send_buffer {
        // The kernel holds at most this (doubled, for its bookkeeping) of the responses a
        // client has not read: clients that never read cannot exhaust the socket memory
        // every other connection, the follower's own included, draws on.
        rustix::net::sockopt::set_socket_send_buffer_size(&tcp, size)
            .context("failed to set SO_SNDBUF (serve.socket_send_buffer_bytes)")?;
    }
    tcp.set_read_timeout(Some(shared.opts.idle_timeout))?;
    tcp.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let mut stream = match &shared.opts.security.tls {
        None => Stream::Plain(tcp),
        Some(tls) => Stream::server(tcp, tls, FRAME_DEADLINE.min(shared.opts.idle_timeout))
            .context("TLS handshake failed")?,
    };
    let mut conn = ConnState {
        auth: shared
            .opts
            .security
            .sasl
            .clone()
            .map(auth::Authenticator::new),
        peer: stream
            .tcp()
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string()),
        close: false,
    };
    let mut frame = Vec::new();
    loop {
        if shared.ctx.stopping.load(Ordering::SeqCst) || conn.close {
            return Ok(());
        }
        let mut request = match read_request(shared, &mut stream, &mut frame) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) if e.is::<Closed>() => return Ok(()),
            Err(e) => return Err(e),
        };
        // A request whose client left while it was muted or read is not worked on: its
        // bytes were in the kernel's buffer, but nobody is there to take the answer.
        if gone(shared, stream.tcp()) {
            return Ok(());
        }
        let trusted = shared.trusted_follower(ip, conn.auth.as_ref().and_then(|a| a.principal()));
        let answered = {
            let tcp = stream.tcp();
            let client = handlers::Client {
                gone: &|| gone(shared, tcp),
                trusted_follower: trusted,
                max_wait: if request.lease.pooled() > 0 {
                    handlers::POOLED_FETCH_WAIT
                } else {
                    handlers::MAX_FETCH_WAIT
                },
            };
            answer(&shared.ctx, &frame, &mut conn, &client)?
        };
        // The request's bytes are not needed once answered: a large buffer is let go.
        if frame.capacity() > KEPT_FRAME_CAPACITY {
            frame = Vec::new();
        }
        // A request that wants no response (Produce with acks=0) gets none.
        if let Some(mut pieces) = answered {
            // Refusals and Metadata answer per item of the request: a small request naming
            // many items could ask for a response many times its size, held per connection.
            let held: usize = pieces
                .iter()
                .map(|p| match p {
                    Piece::Bytes(b) => b.capacity(),
                    Piece::File(_) => 0,
                })
                .sum();
            if held > MAX_HELD_RESPONSE_BYTES {
                anyhow::bail!(
                    "a response of {held} bytes beside its record data (more than {MAX_HELD_RESPONSE_BYTES}) to a request of {} bytes",
                    frame.len()
                );
            }
            // Until the client has taken it, the response holds what it takes, no more.
            request.lease.shrink_to(held + frame.capacity());
            let total: u64 = pieces
                .iter()
                .map(|p| match p {
                    Piece::Bytes(b) => b.len() as u64,
                    Piece::File(f) => f.len,
                })
                .sum();
            write_frame_by(&mut stream, &mut pieces, Some(response_deadline(total)))?;
        }
        drop(request);
    }
}

/// The slowest a client may take a response: below this, past [`WRITE_TIMEOUT`], it is
/// dropped (with its memory and files).
const MIN_SEND_RATE: u64 = 64 << 10;

/// When a response of `bytes` must have been taken: [`WRITE_TIMEOUT`], plus its size at
/// [`MIN_SEND_RATE`].
fn response_deadline(bytes: u64) -> Instant {
    Instant::now() + WRITE_TIMEOUT + Duration::from_secs(bytes / MIN_SEND_RATE)
}

/// The request buffer a connection keeps between requests.
const KEPT_FRAME_CAPACITY: usize = 64 << 10;

/// What a connection carries from one request to the next.
struct ConnState {
    /// With SASL: where the client is in authenticating.
    auth: Option<auth::Authenticator>,
    peer: String,
    /// Close once the response in hand is written (a failed authentication).
    close: bool,
}

/// The response frame's pieces for one request frame (`None`: no response is due); an error
/// closes the connection.
fn answer(
    ctx: &Context,
    frame: &[u8],
    conn: &mut ConnState,
    client: &handlers::Client<'_>,
) -> Result<Option<Vec<Piece>>> {
    let mut r = Reader::new(frame);
    let api_key = r.i16("api_key")?;
    let version = r.i16("api_version")?;
    let correlation_id = r.i32("correlation_id")?;
    r.nullable_string(false, "client_id")?;
    if conn.auth.is_none()
        && let Some(&(api, min, max)) = handlers::SASL_SERVED
            .iter()
            .find(|(a, _, _)| a.key() == api_key)
    {
        unsupported_version(api.name(), version, (min, max))?;
        let flexible = api.is_flexible(version);
        // Parsed whole, as Kafka parses it before its APIs answer: one that does not parse
        // closes the connection.
        if flexible {
            r.skip_tagged_fields("request header tags")?;
        }
        let body = r.rest();
        if api == ApiKey::SaslHandshake {
            crate::protocol::sasl::decode_handshake_request(body)?;
        } else {
            crate::protocol::sasl::decode_authenticate_request(body, version)?;
        }
        let mut head = Writer::new();
        head.i32(correlation_id).empty_tags(flexible);
        crate::log_debug!(
            "serve: client {} sent {} to a listener without SASL; answered ILLEGAL_SASL_STATE",
            conn.peer,
            api.name()
        );
        return Ok(Some(vec![
            Piece::Bytes(head.buf),
            Piece::Bytes(auth::not_a_sasl_listener(api, version)),
        ]));
    }
    if let Some(a) = &conn.auth {
        a.admit(api_key, &conn.peer)?;
        if let Some(&(api, min, max)) = handlers::SASL_SERVED
            .iter()
            .find(|(a, _, _)| a.key() == api_key)
        {
            unsupported_version(api.name(), version, (min, max))?;
            let flexible = api.is_flexible(version);
            if flexible {
                r.skip_tagged_fields("request header tags")?;
            }
            let body = r.rest();
            let a = conn.auth.as_mut().context("SASL state")?;
            let answered = if api == ApiKey::SaslHandshake && version == 0 {
                a.refuse_v0_handshake(&conn.peer)
            } else if api == ApiKey::SaslHandshake {
                a.handshake(body, &conn.peer)?
            } else {
                a.authenticate(body, version, &conn.peer)?
            };
            conn.close = answered.close;
            let mut head = Writer::new();
            head.i32(correlation_id).empty_tags(flexible);
            return Ok(Some(vec![
                Piece::Bytes(head.buf),
                Piece::Bytes(answered.body),
            ]));
        }
    }
    if let Some(refused) = RefusedApi::from_key(api_key) {
        return answer_refused(ctx, refused, version, correlation_id, r);
    }
    let Some(&(api, min, max)) = handlers::SERVED.iter().find(|(a, _, _)| a.key() == api_key)
    else {
        // Kafka knows every key a client sends; one unknown to it cannot be parsed either.
        anyhow::bail!("API key {api_key} is neither served nor refused here (not in ApiVersions)");
    };
    let mut head = Writer::new();
    head.i32(correlation_id);
    if api == ApiKey::ApiVersions {
        // Answered even at a version it does not know, so the client can learn ours.
        let mut pieces = vec![Piece::Bytes(head.buf)];
        pieces.push(Piece::Bytes(handlers::api_versions(version)));
        return Ok(Some(pieces));
    }
    unsupported_version(api.name(), version, (min, max))?;
    let flexible = api.is_flexible(version);
    if flexible {
        r.skip_tagged_fields("request header tags")?;
    }
    head.empty_tags(flexible);
    let body = r.rest();
    let mut pieces = vec![Piece::Bytes(head.buf)];
    match api {
        ApiKey::Fetch => pieces.extend(handlers::fetch(ctx, body, version, client)?),
        ApiKey::Metadata => pieces.push(Piece::Bytes(handlers::metadata(ctx, body, version)?)),
        ApiKey::ListOffsets => pieces.push(Piece::Bytes(handlers::list_offsets(
            ctx, body, version, client,
        )?)),
        ApiKey::OffsetForLeaderEpoch => pieces.push(Piece::Bytes(
            handlers::offset_for_leader_epoch(ctx, body, version)?,
        )),
        ApiKey::ApiVersions => {}
        // Answered above on a SASL listener; not in `handlers::SERVED`, so never reached.
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
            anyhow::bail!("{} is not served on a listener without SASL", api.name())
        }
        // What only the client sends: refused above, or unknown here; not in
        // `handlers::SERVED`, so never reached.
        ApiKey::OffsetCommit
        | ApiKey::OffsetFetch
        | ApiKey::FindCoordinator
        | ApiKey::ListGroups
        | ApiKey::CreateTopics
        | ApiKey::InitProducerId
        | ApiKey::WriteTxnMarkers
        | ApiKey::DescribeConfigs
        | ApiKey::IncrementalAlterConfigs
        | ApiKey::DescribeProducers => anyhow::bail!("{} is not served here", api.name()),
    }
    Ok(Some(pieces))
}

/// Kafka's broker cannot parse a request at a version it does not know: its RequestContext
/// raises InvalidRequestException and the processor closes the connection, unanswered.
fn unsupported_version(name: &str, version: i16, (min, max): (i16, i16)) -> Result<()> {
    if !(min..=max).contains(&version) {
        anyhow::bail!("{name} v{version} is not served (v{min}–v{max}); closed, as Kafka does");
    }
    Ok(())
}

/// The answer to an API a read-only broker refuses ([`refusals`]); `r` is past the header's
/// client id.
fn answer_refused(
    ctx: &Context,
    api: RefusedApi,
    version: i16,
    correlation_id: i32,
    mut r: Reader<'_>,
) -> Result<Option<Vec<Piece>>> {
    unsupported_version(api.name(), version, api.supported())?;
    let flexible = api.is_flexible(version);
    if flexible {
        r.skip_tagged_fields("request header tags")?;
    }
    let body = r.take(r.remaining(), "request body")?;
    let this = crate::protocol::group::Coordinator {
        node_id: ctx.node_id,
        host: &ctx.host,
        port: ctx.port,
    };
    let answered = refusals::answer(this, || ctx.cluster_id(), api, version, body)
        .with_context(|| format!("{} v{version}", api.name()))?;
    let Some(body) = answered else {
        return Ok(None);
    };
    crate::log_debug!("serve: {} v{version} refused (read-only)", api.name());
    let mut head = Writer::new();
    head.i32(correlation_id).empty_tags(flexible);
    Ok(Some(vec![Piece::Bytes(head.buf), Piece::Bytes(body)]))
}
