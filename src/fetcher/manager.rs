//! The fetcher manager (Kafka's `AbstractFetcherManager`).
//!
//! It looks up every followed partition's leader, picks the fetcher thread for it — keyed by
//! (leader broker, fetcher id), fetcher id = hash(topic, partition) mod `fetchers_per_broker`
//! as Kafka does — and hands the partition over with its initial fetch state: the local log
//! end when a log exists, else the offset ListOffsets gives for the configured `start`.
//! When a fetcher hands a partition back (stale leader) or metadata shows a new leader or
//! epoch, the partition moves. Fetchers left without partitions are shut down.
//! The manager runs on its own thread and sleeps on its event channel between rounds.

use super::abstract_fetcher::LeaderEndPoint;
use super::abstract_fetcher::{
    AbstractFetcher, FetchParams, FetchStatus, FetcherEvent, FetcherShared, PartitionFetchState,
};
use super::leader_endpoint::BrokerEndPoint;
use super::replica_fetcher::ReplicaLogOps;
use super::shutdownable::ShutdownableThread;
use crate::checkpoint::TopicPartition;
use crate::client::BrokerConnection;
use crate::client::cluster::{self, ClusterMetadata, OffsetAnswer};
use crate::config::{Config, OnTopicRecreated, StartPosition};
use crate::log::data_dir::DataDir;
use crate::log::manager::{FailureListener, LogManager, lock_log};
use crate::log::{descriptors, identity};
use crate::logging::Human;
use crate::protocol::error::ErrorCode;
use crate::security::ClientSecurity;
use anyhow::{Context, Result, anyhow};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The longest a partition handed back again and again waits before it is reassigned to
/// the same leader.
const HAND_BACK_MAX: Duration = Duration::from_secs(30);

/// The longest wait between metadata refreshes while some wanted partition has no fetcher.
const INCOMPLETE_REFRESH_MAX: Duration = Duration::from_secs(5);

/// Hand-backs of one partition in a row (each within a minute of the one before).
#[derive(Debug, Clone, Copy)]
struct HandBacks {
    count: u32,
    last: Instant,
    /// Not reassigned to the leader it was handed back by before this.
    not_before: Instant,
}

/// The longest wait between two checks of a failed partition's storage.
const FAILED_RETRY_MAX: Duration = Duration::from_secs(60);

/// The manager thread's name (the daemon starts it), also its name for the watchdog.
pub const MANAGER_THREAD: &str = "fetcher-manager";

/// How often metadata is refreshed when nothing asks for it (Kafka's metadata.max.age.ms
/// is 5 minutes; a follower wants to notice new partitions and leaders sooner).
pub const METADATA_REFRESH: Duration = Duration::from_secs(30);

/// The one way to stop the fetching side, from any thread, even while the manager and the
/// fetchers wait on brokers: [`StopHandle::stop`] sets the flag every step checks, shuts the
/// socket of every connection the manager has open, interrupts every fetcher (flag, socket,
/// wake-up; it never waits on a fetcher's lock) and wakes the manager, whose `run` then
/// shuts down and joins the fetchers and returns. Nothing else stops them.
#[derive(Debug, Default)]
pub struct StopHandle {
    stopping: AtomicBool,
    /// Sockets of the manager's open connections, keyed by local address; a connection
    /// removes its own when dropped, so none is kept open here.
    sockets: Mutex<Vec<(u64, TcpStream)>>,
    next_id: std::sync::atomic::AtomicU64,
    fetchers: Mutex<Vec<Weak<FetcherShared>>>,
    /// The manager's event channel, to wake it.
    manager: Mutex<Option<Sender<ManagerEvent>>>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for (_, s) in self
            .sockets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for f in self
            .fetchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            if let Some(f) = f.upgrade() {
                f.interrupt();
            }
        }
        if let Some(tx) = self
            .manager
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            let _ = tx.send(ManagerEvent::Wake);
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn add_fetcher(&self, f: &Arc<FetcherShared>) {
        let mut fetchers = self
            .fetchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        fetchers.retain(|w| w.strong_count() > 0);
        fetchers.push(Arc::downgrade(f));
        if self.is_stopping() {
            f.interrupt();
        }
    }

    /// Connects to `addr`, registering the socket for [`Self::stop`] before the handshake.
    /// Refuses once stopping.
    fn connect(
        this: &Arc<Self>,
        addr: &str,
        security: &ClientSecurity,
        client_id: &str,
        request_timeout: Duration,
    ) -> Result<TrackedConn> {
        if this.is_stopping() {
            anyhow::bail!("shutting down");
        }
        let mut key = None;
        let conn = BrokerConnection::connect_secured(
            addr,
            &format!("broker {addr}"),
            security,
            client_id,
            64 << 20,
            request_timeout,
            |stream| {
                if let Ok(clone) = stream.try_clone() {
                    let id = this.next_id.fetch_add(1, Ordering::SeqCst);
                    let mut sockets = this
                        .sockets
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Checked under the lock `stop` takes after setting the flag: either `stop`
                    // sees this socket, or this sees the flag.
                    if this.is_stopping() {
                        let _ = clone.shutdown(std::net::Shutdown::Both);
                    }
                    sockets.push((id, clone));
                    key = Some(id);
                }
            },
        );
        // Built before `?`: a failed handshake still unregisters its socket on drop.
        let mut tracked = TrackedConn {
            conn: None,
            key,
            handle: this.clone(),
        };
        let mut conn = conn?;
        conn.set_request_timeout(request_timeout);
        tracked.conn = Some(conn);
        Ok(tracked)
    }
}

/// A manager connection registered with its [`StopHandle`]; unregistered when dropped.
#[derive(Debug)]
struct TrackedConn {
    conn: Option<BrokerConnection>,
    key: Option<u64>,
    handle: Arc<StopHandle>,
}

impl TrackedConn {
    fn get(&mut self) -> Result<&mut BrokerConnection> {
        self.conn.as_mut().context("connection closed")
    }
}

impl Drop for TrackedConn {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            self.handle
                .sockets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|(id, _)| *id != k);
        }
    }
}

/// ListOffsets answers per partition: the offset, or the broker's error for it.
pub type OffsetAnswers = BTreeMap<TopicPartition, std::result::Result<OffsetAnswer, ErrorCode>>;

/// Where the manager learns about the cluster: leaders and their epochs (Metadata), and the
/// first offsets of partitions with no local log (ListOffsets). The daemon's is
/// [`BrokerMetadata`]; tests put a scripted cluster here.
pub trait MetadataSource: Send {
    /// The metadata of `topics`, from any broker that answers.
    fn metadata(&mut self, topics: &[String]) -> Result<ClusterMetadata>;
    /// ListOffsets on broker `broker` at `addr`: (partition, current leader epoch,
    /// timestamp -2 earliest / -1 latest / ms) each.
    fn list_offsets(
        &mut self,
        broker: i32,
        addr: &str,
        isolation_level: i8,
        asks: &[(TopicPartition, i32, i64)],
    ) -> Result<OffsetAnswers>;
}

/// Makes the leader side of a new fetcher thread (Kafka's replica fetcher thread factory).
/// The daemon's is [`BrokerEndpoints`]; tests put scripted leaders here.
pub trait EndpointFactory: Send {
    type EndPoint: LeaderEndPoint + 'static;
    /// The endpoint of the fetcher for `broker` at `addr`; `shared` is that fetcher's map,
    /// where a real endpoint registers its socket so a shutdown can interrupt it.
    fn endpoint(&mut self, broker: i32, addr: &str, shared: &Arc<FetcherShared>) -> Self::EndPoint;
}

/// The real [`MetadataSource`]: asks the bootstrap brokers and every broker metadata named,
/// in turn, until one answers, and keeps that connection for the next refresh. Every
/// connection is registered with the [`StopHandle`], so a shutdown interrupts it.
pub struct BrokerMetadata {
    bootstrap: Vec<String>,
    /// Brokers the last metadata named.
    known: Vec<String>,
    client_id: String,
    security: Arc<ClientSecurity>,
    request_timeout: Duration,
    stop: Arc<StopHandle>,
    conn: Option<TrackedConn>,
    /// The connection of the last ListOffsets and its address: the second request of a
    /// round (the `latest` fallback) goes on the same one.
    offsets_conn: Option<(String, TrackedConn)>,
}

impl BrokerMetadata {
    pub fn new(cfg: &Config, security: Arc<ClientSecurity>, stop: Arc<StopHandle>) -> Self {
        BrokerMetadata {
            bootstrap: cfg.bootstrap_servers.clone(),
            known: Vec::new(),
            client_id: cfg.client_id.clone(),
            security,
            request_timeout: Duration::from_millis(cfg.fetch.request_timeout_ms as u64),
            stop,
            conn: None,
            offsets_conn: None,
        }
    }

    fn remember(&mut self, md: &ClusterMetadata) {
        self.known = md.brokers.values().cloned().collect();
        self.known.sort();
    }
}

impl MetadataSource for BrokerMetadata {
    fn metadata(&mut self, topics: &[String]) -> Result<ClusterMetadata> {
        if let Some(conn) = self.conn.as_mut() {
            match conn.get().and_then(|c| cluster::fetch_metadata(c, topics)) {
                Ok(md) => {
                    self.remember(&md);
                    return Ok(md);
                }
                Err(e) => {
                    crate::log_debug!("metadata refresh failed: {e:#}; reconnecting");
                    self.conn = None;
                }
            }
        }
        let mut addrs = self.bootstrap.clone();
        for a in &self.known {
            if !addrs.contains(a) {
                addrs.push(a.clone());
            }
        }
        let mut errors = Vec::new();
        for a in &addrs {
            if self.stop.is_stopping() {
                anyhow::bail!("shutting down");
            }
            let got = StopHandle::connect(
                &self.stop,
                a,
                &self.security,
                &self.client_id,
                self.request_timeout,
            )
            .and_then(|mut c| {
                let md = cluster::fetch_metadata(c.get()?, topics)?;
                Ok((c, md))
            });
            match got {
                Ok((c, md)) => {
                    self.remember(&md);
                    self.conn = Some(c);
                    return Ok(md);
                }
                Err(e) => errors.push(e),
            }
        }
        Err(cluster::NoBrokerAnswered { errors }.into())
    }

    fn list_offsets(
        &mut self,
        _broker: i32,
        addr: &str,
        isolation_level: i8,
        asks: &[(TopicPartition, i32, i64)],
    ) -> Result<OffsetAnswers> {
        // A kept connection the broker may have closed meanwhile gets one fresh retry.
        if let Some((a, mut c)) = self.offsets_conn.take()
            && a == addr
        {
            match c
                .get()
                .and_then(|c| cluster::list_offsets(c, isolation_level, asks))
            {
                Ok(answers) => {
                    self.offsets_conn = Some((a, c));
                    return Ok(answers);
                }
                Err(e) => crate::log_debug!("ListOffsets on {addr} failed: {e:#}; reconnecting"),
            }
        }
        let mut c = StopHandle::connect(
            &self.stop,
            addr,
            &self.security,
            &self.client_id,
            self.request_timeout,
        )?;
        let answers = cluster::list_offsets(c.get()?, isolation_level, asks)?;
        self.offsets_conn = Some((addr.to_string(), c));
        Ok(answers)
    }
}

/// The real [`EndpointFactory`]: a [`BrokerEndPoint`] per fetcher, with the fetch settings.
pub struct BrokerEndpoints {
    client_id: String,
    security: Arc<ClientSecurity>,
    max_response: usize,
    isolation_level: i8,
    data_dir: std::path::PathBuf,
    request_timeout: Duration,
}

impl BrokerEndpoints {
    pub fn new(cfg: &Config, security: Arc<ClientSecurity>, data_dir: &Path) -> Self {
        let fc = &cfg.fetch;
        BrokerEndpoints {
            client_id: cfg.client_id.clone(),
            security,
            // A response holds at most max_bytes, plus one oversized first batch (KIP-74) and
            // framing; bound it well above that but finitely.
            max_response: (fc.max_bytes as usize)
                .saturating_mul(2)
                .saturating_add(64 << 20),
            isolation_level: fc.isolation.level(),
            data_dir: data_dir.to_path_buf(),
            request_timeout: Duration::from_millis(fc.request_timeout_ms as u64),
        }
    }
}

impl EndpointFactory for BrokerEndpoints {
    type EndPoint = BrokerEndPoint;
    fn endpoint(&mut self, broker: i32, addr: &str, shared: &Arc<FetcherShared>) -> BrokerEndPoint {
        BrokerEndPoint::new(
            broker,
            addr,
            self.security.clone(),
            &self.client_id,
            self.max_response,
            self.isolation_level,
            Some(shared.clone()),
            Some(self.data_dir.clone()),
            self.request_timeout,
        )
    }
}

/// What the manager has said once, to say again only after it is cleared (typed, so that
/// clearing one partition's entries cannot clear another's whose name it prefixes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Said {
    TopicMissing(String),
    TopicError(String, i16),
    PartitionMissing(TopicPartition),
    /// A partition cannot start fetching, and why.
    CannotStart(TopicPartition, String),
    Descriptors,
    NoClusterId,
    /// The recorded cluster id cannot be read.
    Unreadable(String),
    NoTopicId(String),
    TopicIdNotRecorded(TopicPartition),
    /// Re-created: the partition and the leader's new topic id.
    Recreated(TopicPartition, String),
    NotArchived(TopicPartition),
}

impl Said {
    /// `tp` started: why it could not before may be said again should it recur.
    fn forget_cannot_start(said: &mut BTreeSet<Said>, tp: &TopicPartition) {
        said.retain(|k| !matches!(k, Said::CannotStart(t, _) if t == tp));
    }
}

/// Messages to the manager thread.
#[derive(Debug)]
pub enum ManagerEvent {
    Fetcher(FetcherEvent),
    /// SIGHUP brought a new `follow` list: partitions added start, removed ones stop (their
    /// data and checkpoint entries stay).
    Reload(Vec<crate::config::Follow>),
    /// A local storage error failed the partition (from the log manager).
    PartitionFailed {
        tp: TopicPartition,
        reason: String,
    },
    /// Sent by [`StopHandle::stop`] so the manager sees the flag at once; it carries nothing
    /// else (stopping is the flag, not this event).
    Wake,
}

/// Failures of one partition, each within [`FAILURE_MEMORY`] of the one before.
#[derive(Debug)]
struct FailureHistory {
    count: u32,
    first: Instant,
    last: Instant,
    /// When its failure was last logged above debug, and that failure's kind (the reason
    /// without its figures): another kind is said at once.
    said: Option<Instant>,
    kind: String,
}

/// How long a partition's failures are remembered after its last one.
const FAILURE_MEMORY: Duration = Duration::from_secs(600);

/// A partition failed by a local storage error, until its storage is sound again.
#[derive(Debug)]
struct FailedPartition {
    reason: String,
    /// Checks of its storage that found it still unsound.
    attempts: u32,
    retry_at: Instant,
    /// Its failure was logged above debug, so its resumption is too.
    said: bool,
}

struct FetcherThread {
    shared: Arc<FetcherShared>,
    thread: ShutdownableThread,
}

/// Partitions to hand to one fetcher: (partition, start position, leader epoch).
type NewPartitions = Vec<(TopicPartition, StartPosition, i32)>;

/// Where a partition is being fetched from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Assignment {
    broker: i32,
    fetcher_id: usize,
    leader_epoch: i32,
}

pub struct FetcherManager<S: MetadataSource = BrokerMetadata, E: EndpointFactory = BrokerEndpoints>
{
    cfg: Arc<Config>,
    source: S,
    endpoints: E,
    logs: Arc<LogManager>,
    fetchers: BTreeMap<(i32, usize), FetcherThread>,
    assigned: BTreeMap<TopicPartition, Assignment>,
    /// Where partitions handed back by their fetcher were fetched from, until reassigned.
    handed_back: BTreeMap<TopicPartition, Assignment>,
    metadata: ClusterMetadata,
    events_tx: Sender<ManagerEvent>,
    events_rx: Receiver<ManagerEvent>,
    fetcher_events: Sender<FetcherEvent>,
    stop: Arc<StopHandle>,
    /// Problems already reported, so a persistent one is logged once, not every round.
    reported: BTreeSet<Said>,
    /// Set while the leader reports another cluster than the one this data dir replicates:
    /// nothing is fetched.
    wrong_cluster: Option<String>,
    /// What `fetching-stopped-partitions` last got written with.
    stopped_written: Option<String>,
    failed: BTreeMap<TopicPartition, FailedPartition>,
    /// Recent failures of each partition, so one that fails again soon after resuming is
    /// checked less often and said less often.
    failure_history: BTreeMap<TopicPartition, FailureHistory>,
    /// What `failed-partitions` last got written with.
    failed_written: Option<String>,
    /// Partitions recently handed back: reassigning one to the same leader waits longer
    /// each time, so a leader that answers NOT_LEADER_OR_FOLLOWER for everything (or a stale
    /// metadata view) costs a few requests and lines a minute, not a storm.
    hand_backs: BTreeMap<TopicPartition, HandBacks>,
}

/// The thread name of a fetcher, which is also how its events name it.
pub fn fetcher_name(broker: i32, fetcher_id: usize) -> String {
    format!("fetcher-broker-{broker}-{fetcher_id}")
}

/// Kafka's `getFetcherId`: abs(31 * topic.hashCode + partition) mod n, with Java's String
/// hash over UTF-16 units.
pub fn fetcher_id(tp: &TopicPartition, n: usize) -> usize {
    let mut h: i32 = 0;
    for unit in tp.topic.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let v = h.wrapping_mul(31).wrapping_add(tp.partition);
    // Kafka's Utils.abs maps MIN_VALUE to 0 (it masks the sign bit).
    ((v & 0x7fff_ffff) as usize) % n.max(1)
}

impl FetcherManager {
    /// The daemon's manager: metadata from the configured brokers, fetchers over broker
    /// connections,
    /// every connection made with `security`.
    pub fn new(cfg: Arc<Config>, logs: Arc<LogManager>, security: Arc<ClientSecurity>) -> Self {
        let stop = Arc::new(StopHandle::default());
        let source = BrokerMetadata::new(&cfg, security.clone(), stop.clone());
        let endpoints = BrokerEndpoints::new(&cfg, security, logs.data_dir());
        FetcherManager::with_seams(cfg, logs, stop, source, endpoints)
    }
}

impl<S: MetadataSource, E: EndpointFactory> FetcherManager<S, E> {
    /// A manager over any cluster: `source` answers Metadata and ListOffsets, `endpoints`
    /// makes each fetcher's leader side; `stop` is how it is stopped.
    pub fn with_seams(
        cfg: Arc<Config>,
        logs: Arc<LogManager>,
        stop: Arc<StopHandle>,
        source: S,
        endpoints: E,
    ) -> Self {
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        *stop
            .manager
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(events_tx.clone());
        let (fetcher_events, fetcher_rx) = std::sync::mpsc::channel::<FetcherEvent>();
        // Forward fetcher events into the manager's own channel.
        let failures = events_tx.clone();
        logs.set_failure_listener(FailureListener(Box::new(move |tp, reason, _| {
            let _ = failures.send(ManagerEvent::PartitionFailed {
                tp: tp.clone(),
                reason: reason.to_string(),
            });
        })));
        let fwd = events_tx.clone();
        let _ = std::thread::Builder::new()
            .name("fetcher-events".into())
            .spawn(move || {
                while let Ok(e) = fetcher_rx.recv() {
                    if fwd.send(ManagerEvent::Fetcher(e)).is_err() {
                        break;
                    }
                }
            });
        let m = FetcherManager {
            cfg,
            source,
            endpoints,
            logs,
            fetchers: BTreeMap::new(),
            assigned: BTreeMap::new(),
            handed_back: BTreeMap::new(),
            metadata: ClusterMetadata::default(),
            events_tx,
            events_rx,
            fetcher_events,
            reported: BTreeSet::new(),
            stop,
            wrong_cluster: None,
            stopped_written: None,
            failed: BTreeMap::new(),
            failure_history: BTreeMap::new(),
            failed_written: None,
            hand_backs: BTreeMap::new(),
        };
        crate::live::live().set_followed_topics(followed_topics(&m.cfg));
        m.record_not_yet_logged();
        // Every loaded log is in the live figures from the start (the first STATUS= line and
        // `status` count it): followed ones as starting, the others as stopped.
        for (tp, log) in m.logs.all() {
            let figures = log_figures(&lock_log(&log));
            if m.follows(&tp) {
                crate::live::live().loaded(&tp, &figures);
            } else {
                crate::live::live().stopped(&tp, NOT_FOLLOWED, &figures);
            }
        }
        m
    }

    /// How the daemon stops the manager and its fetchers (on SIGTERM).
    pub fn stop_handle(&self) -> Arc<StopHandle> {
        self.stop.clone()
    }

    /// A sender for reloads.
    pub fn sender(&self) -> Sender<ManagerEvent> {
        self.events_tx.clone()
    }

    fn report_once(&mut self, key: Said, msg: impl FnOnce() -> String) {
        if self.reported.insert(key) {
            crate::log_warn!("{}", msg());
        }
    }

    /// [`Self::report_once`] for what needs an operator: logged as an ERROR.
    fn report_error_once(&mut self, key: Said, msg: impl FnOnce() -> String) {
        if self.reported.insert(key) {
            crate::log_error!("{}", msg());
        }
    }

    /// Runs until [`StopHandle::stop`]; then shuts every fetcher down and returns.
    pub fn run(mut self) {
        // A list left by an earlier run describes partitions this one has not failed.
        self.record_failed();
        let backoff = Duration::from_millis(self.cfg.fetch.backoff_ms as u64);
        let mut next_refresh = Instant::now();
        let mut incomplete_rounds = 0u32;
        let mut failing_since: Option<Instant> = None;
        let mut last_warned: Option<Instant> = None;
        while !self.stop.is_stopping() {
            let now = Instant::now();
            // Events are read even when a refresh is due, so none (shutdown) waits on rounds;
            // and at least once a second, so the watchdog sees the manager alive.
            crate::live::live().beat(MANAGER_THREAD);
            let event = self.events_rx.recv_timeout(
                next_refresh
                    .saturating_duration_since(now)
                    .min(Duration::from_secs(1)),
            );
            if matches!(event, Err(RecvTimeoutError::Timeout)) && Instant::now() < next_refresh {
                continue;
            }
            match event {
                Err(RecvTimeoutError::Disconnected) => break,
                Ok(e) => {
                    self.handle(e, &mut next_refresh);
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            let outcome = self.reconcile();
            self.record_not_yet_logged();
            let complete = match outcome {
                Ok(c) => {
                    if failing_since.take().is_some() {
                        crate::log_info!("metadata refresh works again");
                    }
                    c
                }
                Err(_) if self.stop.is_stopping() => false,
                Err(e) => {
                    // Warn when the failure starts and once a minute while it lasts; the
                    // retries in between (every backoff) go to debug.
                    let now = Instant::now();
                    let loud = failing_since.is_none()
                        || last_warned.is_none_or(|t| now - t >= Duration::from_secs(60));
                    if loud {
                        let since = failing_since.get_or_insert(now);
                        let lasted = now - *since;
                        // The wait before the next try, as computed below for this round.
                        let next_wait = backoff
                            .saturating_mul(1 << incomplete_rounds.min(16))
                            .min(INCOMPLETE_REFRESH_MAX.max(backoff));
                        let line = format!(
                            "metadata refresh failed{}: {e:#}; retrying in {}{}",
                            if lasted.is_zero() {
                                String::new()
                            } else {
                                format!(" (for {} now)", Human(lasted))
                            },
                            Human(next_wait),
                            if next_wait < INCOMPLETE_REFRESH_MAX.max(backoff) {
                                format!(
                                    ", then less often (at least every {})",
                                    Human(INCOMPLETE_REFRESH_MAX.max(backoff))
                                )
                            } else {
                                String::new()
                            }
                        );
                        // A refused certificate needs an operator; an outage may pass.
                        if cluster::NoBrokerAnswered::any_refused(&e) {
                            crate::log_error!("{line}");
                        } else {
                            crate::log_warn!("{line}");
                        }
                        last_warned = Some(now);
                    } else {
                        crate::log_debug!("metadata refresh failed: {e:#}");
                    }
                    false
                }
            };
            // While some partition has no fetcher, look again soon, but less often each time.
            incomplete_rounds = if complete { 0 } else { incomplete_rounds + 1 };
            let retry = backoff
                .saturating_mul(1 << incomplete_rounds.saturating_sub(1).min(16))
                .min(INCOMPLETE_REFRESH_MAX.max(backoff));
            let now = Instant::now();
            next_refresh = now + if complete { METADATA_REFRESH } else { retry };
            // Only waits still to come: one already due is seen to by the next round.
            if let Some(t) = self
                .hand_backs
                .iter()
                .filter(|(tp, _)| !self.assigned.contains_key(*tp))
                .map(|(_, hb)| hb.not_before)
                .filter(|t| *t > now)
                .min()
            {
                next_refresh = next_refresh.min(t);
            }
            if let Some(t) = self
                .failed
                .values()
                .map(|f| f.retry_at)
                .filter(|t| *t > now)
                .min()
            {
                next_refresh = next_refresh.min(t);
            }
        }
        self.shutdown_all();
        crate::live::live().forget(MANAGER_THREAD);
    }

    /// Handles one event; `next_refresh` is when the next round is due, brought forward
    /// when the event calls for one.
    fn handle(&mut self, event: ManagerEvent, next_refresh: &mut Instant) {
        let backoff = Duration::from_millis(self.cfg.fetch.backoff_ms as u64);
        match event {
            // Stopping is the flag, which the loop checks.
            ManagerEvent::Wake => {}
            ManagerEvent::Reload(follow) => {
                let mut cfg = (*self.cfg).clone();
                cfg.follow = follow;
                self.cfg = Arc::new(cfg);
                crate::live::live().set_followed_topics(followed_topics(&self.cfg));
                // Partitions that were waiting to be reported are looked at anew.
                self.reported
                    .retain(|k| !matches!(k, Said::TopicMissing(_) | Said::PartitionMissing(_)));
                *next_refresh = Instant::now();
            }
            ManagerEvent::PartitionFailed { tp, reason } => {
                self.unassign(&tp);
                if let Some(f) = self.failed.get_mut(&tp) {
                    f.reason = reason;
                    self.record_failed();
                    return;
                }
                let retry_at = self.on_failure(&tp, &reason);
                *next_refresh = (*next_refresh).min(retry_at);
            }
            ManagerEvent::Fetcher(FetcherEvent::NeedsLeader {
                tp,
                fetcher,
                leader_epoch,
                reason,
            }) => {
                let current = self
                    .assigned
                    .get(&tp)
                    .map(|a| (fetcher_name(a.broker, a.fetcher_id), a.leader_epoch));
                if current != Some((fetcher.clone(), leader_epoch)) {
                    crate::log_debug!(
                        "{tp}: ignoring a hand-back from {fetcher}, which no longer owns it"
                    );
                    // Metadata may lag a leader change: look again after a backoff.
                    *next_refresh = (*next_refresh).min(Instant::now() + backoff);
                    return;
                }
                if let Some(a) = self.assigned.remove(&tp) {
                    self.handed_back.insert(tp.clone(), a);
                }
                crate::live::live().leader_lost(&tp, &format!("looking up its leader ({reason})"));
                let now = Instant::now();
                let hb = self.hand_backs.entry(tp).or_insert(HandBacks {
                    count: 0,
                    last: now,
                    not_before: now,
                });
                if now - hb.last > Duration::from_secs(60) {
                    hb.count = 0;
                }
                hb.count += 1;
                hb.last = now;
                hb.not_before = now
                    + backoff
                        .saturating_mul(1 << (hb.count - 1).min(16))
                        .min(HAND_BACK_MAX.max(backoff));
                *next_refresh = (*next_refresh).min(hb.not_before);
            }
        }
    }

    fn shutdown_all(&mut self) {
        self.join_fetchers();
        crate::log_info!("all fetchers stopped");
    }

    /// Initiates every fetcher's shutdown, then joins them all.
    fn join_fetchers(&mut self) {
        for f in self.fetchers.values() {
            f.thread.initiate_shutdown();
        }
        for (_, mut f) in std::mem::take(&mut self.fetchers) {
            f.thread.await_shutdown();
        }
    }

    /// Asks for the followed topics' metadata, and notes in the live state whether the
    /// leader answered.
    fn refresh_metadata(&mut self) -> Result<()> {
        let topics: Vec<String> = self.cfg.follow.iter().map(|f| f.topic.clone()).collect();
        let now = crate::clock::now_ms();
        match self.source.metadata(&topics) {
            Ok(md) => {
                self.metadata = md;
                crate::live::live().metadata_answered(now);
                Ok(())
            }
            Err(e) => {
                if !self.stop.is_stopping() {
                    crate::live::live().metadata_failed(
                        metadata_error_kind(&e),
                        &format!("{e:#}"),
                        now,
                    );
                }
                Err(e)
            }
        }
    }

    /// Publishes the followed partitions that have no local log: the configured ones, or for
    /// a whole topic those the last metadata listed (the topic alone while it listed none and
    /// no partition of it has a log).
    fn record_not_yet_logged(&self) {
        let mut out = Vec::new();
        for f in &self.cfg.follow {
            let known = f.partitions.clone().or_else(|| {
                self.metadata
                    .topics
                    .get(&f.topic)
                    .filter(|(err, parts)| err.is_ok() && !parts.is_empty())
                    .map(|(_, parts)| parts.keys().copied().collect())
            });
            match known {
                Some(ps) => out.extend(
                    ps.into_iter()
                        .filter(|p| {
                            self.logs
                                .get(&TopicPartition::new(f.topic.clone(), *p))
                                .is_none()
                        })
                        .map(|p| crate::live::NotYetLogged {
                            topic: f.topic.clone(),
                            partition: Some(p),
                        }),
                ),
                None if !self.logs.all().iter().any(|(tp, _)| tp.topic == f.topic) => {
                    out.push(crate::live::NotYetLogged {
                        topic: f.topic.clone(),
                        partition: None,
                    })
                }
                None => {}
            }
        }
        crate::live::live().set_not_yet_logged(out);
    }

    /// The partitions the configuration asks for, as far as metadata knows them, and whether
    /// metadata knew every one.
    fn wanted(&mut self) -> (Vec<(TopicPartition, StartPosition)>, bool) {
        let mut out = Vec::new();
        let mut all_known = true;
        let mut missing = BTreeSet::new();
        let follows = self.cfg.follow.clone();
        for f in &follows {
            let Some((err, parts)) = self.metadata.topics.get(&f.topic).cloned() else {
                self.not_found(&f.topic);
                missing.insert(f.topic.clone());
                self.report_once(Said::TopicMissing(f.topic.clone()), || {
                    format!("topic `{}` is not in the leader's metadata", f.topic)
                });
                all_known = false;
                continue;
            };
            if !err.is_ok() {
                if err == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION {
                    self.not_found(&f.topic);
                    missing.insert(f.topic.clone());
                }
                self.report_once(Said::TopicError(f.topic.clone(), err.0), || {
                    format!("topic `{}`: metadata error {err}", f.topic)
                });
                all_known = false;
                continue;
            }
            let ids: Vec<i32> = match &f.partitions {
                Some(p) => p.clone(),
                None => parts.keys().copied().collect(),
            };
            for p in ids {
                if !parts.contains_key(&p) {
                    crate::live::live().set_state(
                        &TopicPartition::new(f.topic.clone(), p),
                        crate::live::State::NotFound,
                        None,
                    );
                    self.report_once(
                        Said::PartitionMissing(TopicPartition::new(f.topic.clone(), p)),
                        || format!("partition {}-{p} does not exist on the leader", f.topic),
                    );
                    all_known = false;
                    continue;
                }
                out.push((TopicPartition::new(f.topic.clone(), p), f.start));
            }
        }
        crate::live::live().set_missing_topics(missing);
        (out, all_known)
    }

    /// `topic` is not on the leader: its followed partitions with a local log that no fetcher
    /// has (any more) show as not found, not as whatever they last were.
    fn not_found(&self, topic: &str) {
        for (tp, _) in self.logs.all() {
            if tp.topic == topic && !self.assigned.contains_key(&tp) && self.follows(&tp) {
                crate::live::live().set_state(&tp, crate::live::State::NotFound, None);
            }
        }
    }

    /// One round: refresh metadata, (re)assign partitions, stop idle fetchers. Returns whether
    /// every wanted partition has a fetcher.
    fn reconcile(&mut self) -> Result<bool> {
        self.refresh_metadata()?;
        if !self.check_cluster() {
            return Ok(false);
        }
        self.stop_unfollowed();
        let (wanted, mut complete) = self.wanted();
        let mut wanted = self.check_topic_ids(wanted);
        self.retry_failed();
        wanted.retain(|(tp, _)| !self.failed.contains_key(tp));
        let n = self.cfg.fetch.fetchers_per_broker;
        self.hand_backs
            .retain(|_, hb| hb.last.elapsed() < Duration::from_secs(60));
        let mut again = BTreeSet::new();
        let mut to_add: BTreeMap<(i32, usize), NewPartitions> = BTreeMap::new();
        for (tp, start) in wanted {
            let Some(leader) = self.metadata.leader(&tp) else {
                continue;
            };
            if leader.leader_id < 0
                || !leader.error.is_ok()
                || self.metadata.broker_addr(leader.leader_id).is_none()
            {
                complete = false;
                continue;
            }
            let target = Assignment {
                broker: leader.leader_id,
                fetcher_id: fetcher_id(&tp, n),
                leader_epoch: leader.leader_epoch,
            };
            if self.assigned.get(&tp) == Some(&target) {
                continue;
            }
            // Handed back by this very leader and epoch: wait out its hand-back delay.
            let same_as_before = self.handed_back.get(&tp).is_some_and(|old| {
                (old.broker, old.leader_epoch) == (target.broker, target.leader_epoch)
            });
            if same_as_before
                && self
                    .hand_backs
                    .get(&tp)
                    .is_some_and(|hb| hb.not_before > Instant::now())
            {
                complete = false;
                continue;
            }
            if same_as_before {
                // Its hand-back was said; going back to the same leader is not news.
                again.insert(tp.clone());
            }
            if let Some(old) = self.assigned.remove(&tp) {
                if let Some(f) = self.fetchers.get(&(old.broker, old.fetcher_id)) {
                    f.shared.remove_partition(&tp);
                }
                self.handed_back.insert(tp.clone(), old);
            }
            if let Some(old) = self.handed_back.get(&tp)
                && (old.broker, old.leader_epoch) != (target.broker, target.leader_epoch)
            {
                crate::log_info!(
                    "{tp}: leader is now broker {} (epoch {}), was broker {} (epoch {})",
                    target.broker,
                    target.leader_epoch,
                    old.broker,
                    old.leader_epoch
                );
            }
            to_add
                .entry((target.broker, target.fetcher_id))
                .or_default()
                .push((tp, start, target.leader_epoch));
        }
        if self.stop.is_stopping() {
            return Ok(false);
        }
        let offsets = self.initial_offsets(&to_add);
        // Each new log keeps a descriptor open: create only as many as the limit allows,
        // the rest wait (said once) and are created once descriptors free up.
        let mut budget = descriptors::log_budget();
        let mut waiting = 0usize;
        // The round's new logs are made together (one sync for them all, see
        // `LogManager::create_logs`) before any of them is handed to a fetcher or named by
        // a checkpoint; the fetchers then start them in shared requests.
        let mut over_budget = BTreeSet::new();
        let mut not_created = HashMap::new();
        let mut batch = Vec::new();
        for (tp, _, _) in to_add.values().flatten() {
            if self.logs.get(tp).is_some() {
                continue;
            }
            if let Some(Ok(offset)) = offsets.get(tp) {
                if budget == 0 {
                    over_budget.insert(tp.clone());
                    continue;
                }
                budget -= 1;
                let topic_id = self.metadata.topic_ids.get(&tp.topic).copied();
                batch.push((tp.clone(), *offset, topic_id));
            }
        }
        if !batch.is_empty() && !self.stop.is_stopping() {
            for (tp, made) in self.logs.create_logs(&batch) {
                if let Err(e) = made {
                    not_created.insert(tp, e.context("cannot create its local log"));
                }
            }
        }
        for ((broker, fid), parts) in to_add {
            let mut states = Vec::new();
            for (tp, _, epoch) in parts {
                if self.stop.is_stopping() {
                    break;
                }
                if over_budget.contains(&tp) {
                    waiting += 1;
                    complete = false;
                    continue;
                }
                let state = match not_created.remove(&tp) {
                    Some(e) => Err(e),
                    None => self.initial_state(&offsets, &tp, epoch),
                };
                match state {
                    Ok(st) => {
                        Said::forget_cannot_start(&mut self.reported, &tp);
                        self.handed_back.remove(&tp);
                        self.assigned.insert(
                            tp.clone(),
                            Assignment {
                                broker,
                                fetcher_id: fid,
                                leader_epoch: epoch,
                            },
                        );
                        states.push((tp, st));
                    }
                    Err(e) if descriptors::is_exhausted(&e) => {
                        waiting += 1;
                        complete = false;
                    }
                    Err(e) => {
                        complete = false;
                        self.report_once(Said::CannotStart(tp.clone(), e.to_string()), || {
                            format!("{tp}: cannot set the initial fetch position: {e:#}")
                        });
                    }
                }
            }
            if !states.is_empty() {
                let shared = self.fetcher(broker, fid)?;
                // A few partitions are named one by one; many (a first start) in one line.
                let news = states.iter().filter(|(tp, _)| !again.contains(tp)).count();
                let one_by_one = news <= 10;
                for (tp, st) in &states {
                    crate::live::live().assigned(
                        tp,
                        broker,
                        st.current_leader_epoch,
                        st.fetch_offset,
                    );
                    let line = format!(
                        "{tp}: fetching from broker {broker} at offset {} (leader epoch {})",
                        st.fetch_offset, st.current_leader_epoch
                    );
                    if one_by_one && !again.contains(tp) {
                        crate::log_info!("{line}");
                    } else {
                        crate::log_debug!("{line}");
                    }
                }
                if !one_by_one {
                    crate::log_info!(
                        "fetching {news} partitions from broker {broker} ({})",
                        fetcher_name(broker, fid)
                    );
                }
                shared.add_partitions(states);
            }
        }
        self.logs.note_open_files();
        if waiting > 0 {
            self.report_error_once(Said::Descriptors, || {
                format!(
                    "{waiting} partition(s) wait for a log: {}",
                    descriptors::advice()
                )
            });
        } else if self.reported.remove(&Said::Descriptors) {
            crate::log_info!("every waiting partition has its log now");
        }
        // New logs appear in the checkpoint files (and so in `status`) at once, not at the
        // next interval.
        if !offsets.is_empty()
            && let Err(e) = self.logs.checkpoint()
        {
            crate::log_warn!("checkpoint after creating logs failed: {e:#}");
        }
        // Stop fetchers that have nothing left to do.
        let idle: Vec<(i32, usize)> = self
            .fetchers
            .iter()
            .filter(|(_, f)| f.shared.partition_count() == 0)
            .map(|(k, _)| *k)
            .collect();
        for k in idle {
            if let Some(mut f) = self.fetchers.remove(&k) {
                crate::log_info!("stopping idle {}", f.thread.name());
                f.thread.shutdown();
            }
        }
        Ok(complete)
    }

    /// Pins the data dir to the cluster the leader reports (Metadata v2+): recorded on first
    /// contact; on a different id every fetcher stops until the right cluster answers again.
    /// Returns whether fetching may go on.
    fn check_cluster(&mut self) -> bool {
        let data_dir = self.logs.data_dir().to_path_buf();
        let Some(seen) = self.metadata.cluster_id.clone() else {
            self.report_once(Said::NoClusterId, || {
                "the leader reports no cluster id (Metadata below v2); the cluster identity check is skipped".into()
            });
            return true;
        };
        let recorded = match identity::read_cluster_id(&data_dir) {
            Ok(r) => r,
            Err(e) => {
                self.report_once(Said::Unreadable(e.to_string()), || {
                    format!("{e:#}; nothing is fetched until the file is readable")
                });
                return false;
            }
        };
        match recorded {
            None => {
                if let Err(e) = identity::write_cluster_id(&data_dir, &seen) {
                    crate::log_error!("cannot record the cluster id: {e:#}");
                    return false;
                }
                crate::log_info!(
                    "data dir `{}` now replicates cluster {seen}",
                    data_dir.display()
                );
                true
            }
            Some(expected) if expected == seen => {
                if self.wrong_cluster.take().is_some() {
                    crate::log_info!("the leader reports cluster {seen} again; fetching resumes");
                    let _ = std::fs::remove_file(data_dir.join(DataDir::FETCH_STOPPED_FILE));
                }
                true
            }
            Some(expected) => {
                let msg = format!(
                    "the leader reports cluster id {seen}, but data dir `{}` replicates cluster {expected}; every fetcher is stopped and nothing is fetched into it",
                    data_dir.display()
                );
                if self.wrong_cluster.as_deref() != Some(msg.as_str()) {
                    crate::log_error!("{msg}");
                    if let Err(e) = crate::checkpoint::rewrite_atomic(
                        &data_dir.join(DataDir::FETCH_STOPPED_FILE),
                        format!("{msg}\n").as_bytes(),
                    ) {
                        crate::log_error!("cannot record the stop: {e:#}");
                    }
                }
                self.stop_every_fetcher();
                self.wrong_cluster = Some(msg);
                false
            }
        }
    }

    /// Shuts every fetcher down; their partitions are assigned again once fetching may go on.
    fn stop_every_fetcher(&mut self) {
        self.join_fetchers();
        let assigned = std::mem::take(&mut self.assigned);
        self.handed_back.extend(assigned);
    }

    /// Whether the configuration follows `tp`.
    fn follows(&self, tp: &TopicPartition) -> bool {
        self.cfg.follow.iter().any(|f| {
            f.topic == tp.topic
                && f.partitions
                    .as_ref()
                    .is_none_or(|ps| ps.contains(&tp.partition))
        })
    }

    /// Stops the partitions a reload took out of `follow` (by the configuration, not by
    /// what the leader's metadata says): their logs and checkpoint entries stay.
    fn stop_unfollowed(&mut self) {
        let gone: BTreeSet<TopicPartition> = self
            .assigned
            .keys()
            .chain(self.handed_back.keys())
            .chain(self.failed.keys())
            .filter(|tp| !self.follows(tp))
            .cloned()
            .collect();
        for tp in gone {
            self.unassign(&tp);
            if self.failed.remove(&tp).is_some() {
                self.record_failed();
            }
            match self.logs.get(&tp) {
                Some(log) => {
                    let figures = log_figures(&lock_log(&log));
                    crate::live::live().stopped(&tp, NOT_FOLLOWED, &figures);
                }
                None => crate::live::live().remove(&tp),
            }
            crate::log_info!(
                "{tp}: no longer in `follow`: fetching stopped; its log and checkpoint entries stay"
            );
        }
    }

    /// Stops fetching `tp` wherever it is fetched.
    fn unassign(&mut self, tp: &TopicPartition) {
        if let Some(old) = self.assigned.remove(tp)
            && let Some(f) = self.fetchers.get(&(old.broker, old.fetcher_id))
        {
            f.shared.remove_partition(tp);
        }
        self.handed_back.remove(tp);
    }

    /// Compares each wanted partition's recorded topic id with the leader's (Metadata v10+).
    /// First contact records it; a different id means the topic was deleted and re-created:
    /// the old history is archived (then the partition is followed anew, per `start`) or the
    /// topic stops, per `on_topic_recreated`. Returns the partitions to follow.
    fn check_topic_ids(
        &mut self,
        wanted: Vec<(TopicPartition, StartPosition)>,
    ) -> Vec<(TopicPartition, StartPosition)> {
        let mut out = Vec::with_capacity(wanted.len());
        let mut stopped = BTreeMap::new();
        for (tp, start) in wanted {
            let Some(&leader_id) = self.metadata.topic_ids.get(&tp.topic) else {
                self.report_once(Said::NoTopicId(tp.topic.clone()), || {
                    format!(
                        "the leader reports no topic id for `{}` (Metadata below v10); its topic identity check is skipped",
                        tp.topic
                    )
                });
                out.push((tp, start));
                continue;
            };
            let Some(log) = self.logs.get(&tp) else {
                out.push((tp, start));
                continue;
            };
            let recorded = lock_log(&log).topic_id();
            match recorded {
                Some(id) if id == leader_id => out.push((tp, start)),
                None => {
                    if let Err(e) = lock_log(&log).record_topic_id(leader_id) {
                        self.report_once(Said::TopicIdNotRecorded(tp.clone()), || {
                            format!("{tp}: cannot record topic id {leader_id}: {e:#}")
                        });
                    }
                    out.push((tp, start));
                }
                Some(old) => {
                    drop(log);
                    let policy = self
                        .cfg
                        .follow
                        .iter()
                        .find(|f| f.topic == tp.topic)
                        .map_or(OnTopicRecreated::Archive, |f| f.on_topic_recreated);
                    self.unassign(&tp);
                    if policy == OnTopicRecreated::Stop {
                        crate::live::live().set_state(
                            &tp,
                            crate::live::State::Stopped,
                            Some("the topic was re-created and on_topic_recreated = \"stop\""),
                        );
                        stopped.insert(
                            tp.clone(),
                            format!(
                                "the topic was re-created (topic id {old} locally, {leader_id} on the leader) and on_topic_recreated = \"stop\""
                            ),
                        );
                        self.report_error_once(Said::Recreated(tp.clone(), leader_id.to_string()), || {
                            format!(
                                "{tp}: the topic was re-created (topic id {old} locally, {leader_id} on the leader); on_topic_recreated = \"stop\": not following it, local data kept"
                            )
                        });
                        continue;
                    }
                    match self.logs.archive(&tp) {
                        Ok(to) => {
                            crate::log_error!(
                                "{tp}: the topic was re-created (topic id {old} locally, {leader_id} on the leader); its history is kept intact in `{}` and the new topic is followed from its start",
                                to.display()
                            );
                            out.push((tp, start));
                        }
                        Err(e) => self.report_error_once(Said::NotArchived(tp.clone()), || {
                            format!("{tp}: the topic was re-created but its history could not be archived, so it is not followed: {e:#}")
                        }),
                    }
                }
            }
        }
        self.record_stopped(stopped);
        out
    }

    /// Keeps `fetching-stopped-partitions` (one `topic partition reason` line each) equal to
    /// the partitions not followed by `on_topic_recreated = "stop"`, for `status`.
    fn record_stopped(&mut self, stopped: BTreeMap<TopicPartition, String>) {
        let path = self.logs.data_dir().join(DataDir::STOPPED_PARTITIONS_FILE);
        let reasons = stopped.iter().map(|(tp, why)| (tp, why.as_str()));
        write_partition_list(&path, reasons, &mut self.stopped_written);
    }

    /// Keeps `failed-partitions` equal to the failed partitions, for `status`.
    fn record_failed(&mut self) {
        let path = self.logs.data_dir().join(DataDir::FAILED_PARTITIONS_FILE);
        let reasons = self.failed.iter().map(|(tp, f)| (tp, f.reason.as_str()));
        write_partition_list(&path, reasons, &mut self.failed_written);
    }

    /// A partition newly failed: said once (an ERROR the first time, then a WARN at most once
    /// a minute while it keeps failing soon after each resume — a cause the storage check
    /// cannot see), and checked again later the more often it failed lately. Returns when.
    fn on_failure(&mut self, tp: &TopicPartition, reason: &str) -> Instant {
        let now = Instant::now();
        let backoff_ms = self.cfg.fetch.backoff_ms;
        let h = self
            .failure_history
            .entry(tp.clone())
            .or_insert(FailureHistory {
                count: 0,
                first: now,
                last: now,
                said: None,
                kind: String::new(),
            });
        if now - h.last > FAILURE_MEMORY {
            *h = FailureHistory {
                count: 0,
                first: now,
                last: now,
                said: None,
                kind: String::new(),
            };
        }
        h.count += 1;
        h.last = now;
        let (count, first) = (h.count, h.first);
        let delay = failed_retry_delay(backoff_ms, count - 1);
        let kind: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
        let new_kind = h.kind != kind;
        h.kind = kind;
        let mut said = true;
        if count == 1 || new_kind {
            crate::log_error!("{}", crate::log::manager::failed_message(tp, reason));
            h.said = Some(now);
        } else if h.said.is_none_or(|t| now - t >= Duration::from_secs(60)) {
            crate::log_warn!(
                "{tp}: failed again ({count} times in {}): {reason}; checked again in {}",
                Human(now - first),
                Human(delay)
            );
            h.said = Some(now);
        } else {
            crate::log_debug!("{tp}: failed again: {reason}");
            said = false;
        }
        crate::live::live().set_state(tp, crate::live::State::Failed, Some(reason));
        let retry_at = now + delay;
        self.failed.insert(
            tp.clone(),
            FailedPartition {
                reason: reason.to_string(),
                attempts: count - 1,
                retry_at,
                said,
            },
        );
        self.record_failed();
        retry_at
    }

    /// How long after its `attempts`-th unsuccessful check a failed partition is checked
    /// again: the fetch backoff (at least a second), doubling, at most a minute.
    fn failed_retry_delay(&self, attempts: u32) -> Duration {
        failed_retry_delay(self.cfg.fetch.backoff_ms, attempts)
    }

    /// Checks the storage of each failed partition that is due: sound again, it is followed
    /// again (from its local log end); otherwise it is checked again later, less often.
    fn retry_failed(&mut self) {
        let now = Instant::now();
        let due: Vec<TopicPartition> = self
            .failed
            .iter()
            .filter(|(_, f)| f.retry_at <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        for tp in due {
            // No log at all (it was archived meanwhile): followed anew like any partition.
            let checked = match self.logs.get(&tp) {
                None => Ok(()),
                Some(_) => self.logs.check_storage(&tp),
            };
            match checked {
                Ok(()) => {
                    crate::live::live().set_state(&tp, crate::live::State::Starting, None);
                    if self.failed.remove(&tp).is_some_and(|f| f.said) {
                        crate::log_info!(
                            "{tp}: its local storage is sound again; fetching it again"
                        );
                    } else {
                        crate::log_debug!("{tp}: its local storage is sound again");
                    }
                }
                Err(e) => {
                    let delay = {
                        let f = &self.failed[&tp];
                        self.failed_retry_delay(f.attempts + 1)
                    };
                    let reason = format!("{e:#}");
                    if let Some(f) = self.failed.get_mut(&tp) {
                        if f.reason != reason {
                            crate::log_warn!(
                                "{tp}: still failed: {reason}; checked again in {}s",
                                delay.as_secs()
                            );
                            f.reason = reason;
                        } else {
                            crate::log_debug!("{tp}: still failed: {reason}");
                        }
                        f.attempts += 1;
                        f.retry_at = now + delay;
                    }
                }
            }
        }
        self.record_failed();
    }

    /// The fetcher thread for (broker, fetcher id), started if needed.
    fn fetcher(&mut self, broker: i32, fid: usize) -> Result<Arc<FetcherShared>> {
        if let Some(f) = self.fetchers.get(&(broker, fid)) {
            return Ok(f.shared.clone());
        }
        let addr = self
            .metadata
            .broker_addr(broker)
            .ok_or_else(|| anyhow!("broker {broker} is not in the metadata"))?
            .to_string();
        let shared = Arc::new(FetcherShared::default());
        self.stop.add_fetcher(&shared);
        let fc = &self.cfg.fetch;
        let params = FetchParams {
            max_wait_ms: fc.max_wait_ms,
            min_bytes: fc.min_bytes,
            max_bytes: fc.max_bytes,
            partition_max_bytes: fc.partition_max_bytes,
            isolation_level: fc.isolation.level(),
            backoff: Duration::from_millis(fc.backoff_ms as u64),
            backoff_max: Duration::from_millis(fc.backoff_max_ms as u64),
        };
        let endpoint = self.endpoints.endpoint(broker, &addr, &shared);
        let name = fetcher_name(broker, fid);
        let mut fetcher = AbstractFetcher::new(
            name.clone(),
            shared.clone(),
            endpoint,
            ReplicaLogOps::new(self.logs.clone()),
            params,
            self.fetcher_events.clone(),
        );
        let thread = ShutdownableThread::start(&name, shared.clone(), move || fetcher.do_work())
            .with_context(|| format!("failed to start thread {name}"))?;
        crate::log_info!("started {name} for broker {broker} at {addr}");
        self.fetchers.insert(
            (broker, fid),
            FetcherThread {
                shared: shared.clone(),
                thread,
            },
        );
        Ok(shared)
    }

    /// Initial offsets of the partitions in `to_add` that have no local log: one ListOffsets
    /// request per leader for all of them (and a second, for `latest`, for the timestamps with
    /// no later record), so a thousand new partitions cost two round trips, not a thousand.
    fn initial_offsets(
        &mut self,
        to_add: &BTreeMap<(i32, usize), NewPartitions>,
    ) -> HashMap<TopicPartition, Result<i64, String>> {
        let mut per_broker: BTreeMap<i32, Vec<(TopicPartition, i32, i64)>> = BTreeMap::new();
        for ((broker, _), parts) in to_add {
            for (tp, start, epoch) in parts {
                if self.logs.get(tp).is_none() {
                    per_broker.entry(*broker).or_default().push((
                        tp.clone(),
                        *epoch,
                        start.list_offsets_timestamp(),
                    ));
                }
            }
        }
        let mut out = HashMap::new();
        for (broker, asks) in per_broker {
            if self.stop.is_stopping() {
                break;
            }
            if let Err(e) = self.list_initial_offsets(broker, &asks, &mut out) {
                for (tp, _, _) in &asks {
                    out.entry(tp.clone())
                        .or_insert_with(|| Err(format!("{e:#}")));
                }
            }
        }
        out
    }

    fn list_initial_offsets(
        &mut self,
        broker: i32,
        asks: &[(TopicPartition, i32, i64)],
        out: &mut HashMap<TopicPartition, Result<i64, String>>,
    ) -> Result<()> {
        let addr = self
            .metadata
            .broker_addr(broker)
            .ok_or_else(|| anyhow!("broker {broker} is not in the metadata"))?
            .to_string();
        let iso = self.cfg.fetch.isolation.level();
        let mut latest = Vec::new();
        let first = self.source.list_offsets(broker, &addr, iso, asks)?;
        for (tp, epoch, ts) in asks {
            match first.get(tp) {
                Some(Ok(a)) if a.offset >= 0 => {
                    out.insert(tp.clone(), Ok(a.offset));
                }
                // No record at or after the timestamp: start at the end.
                Some(Ok(_)) => latest.push((tp.clone(), *epoch, -1)),
                Some(Err(code)) => {
                    out.insert(
                        tp.clone(),
                        Err(format!(
                            "ListOffsets({ts}) on broker {broker} answered {code}"
                        )),
                    );
                }
                None => {
                    out.insert(
                        tp.clone(),
                        Err(format!("broker {broker}: ListOffsets response lacks {tp}")),
                    );
                }
            }
        }
        if !latest.is_empty() {
            let second = self.source.list_offsets(broker, &addr, iso, &latest)?;
            for (tp, _, _) in latest {
                let answer = match second.get(&tp) {
                    Some(Ok(a)) if a.offset >= 0 => Ok(a.offset),
                    Some(Ok(_)) => Err(format!(
                        "broker {broker} gave no offset for {tp} ({})",
                        ErrorCode::OFFSET_NOT_AVAILABLE
                    )),
                    Some(Err(code)) => Err(format!(
                        "ListOffsets(latest) on broker {broker} answered {code}"
                    )),
                    None => Err(format!("broker {broker}: ListOffsets response lacks {tp}")),
                };
                out.insert(tp, answer);
            }
        }
        Ok(())
    }

    /// The fetch state a partition starts with: the local log end if there is a log, else
    /// the offset ListOffsets gave for the configured start (see `initial_offsets`).
    fn initial_state(
        &mut self,
        offsets: &HashMap<TopicPartition, Result<i64, String>>,
        tp: &TopicPartition,
        epoch: i32,
    ) -> Result<PartitionFetchState> {
        if let Some(log) = self.logs.get(tp) {
            let log = lock_log(&log);
            let status = if log.latest_epoch().is_some() {
                FetchStatus::Truncating
            } else {
                FetchStatus::Fetching
            };
            // The recorded id: with Fetch v13 a leader whose topic is another one by now says
            // UNKNOWN_TOPIC_ID instead of serving it.
            return Ok(
                PartitionFetchState::new(log.log_end_offset(), epoch, status)
                    .with_topic_id(log.topic_id()),
            );
        }
        let offset = match offsets.get(tp) {
            Some(Ok(o)) => *o,
            Some(Err(e)) => return Err(anyhow!("{e}")),
            None => return Err(anyhow!("no initial offset was asked for")),
        };
        let topic_id = self.metadata.topic_ids.get(&tp.topic).copied();
        self.logs
            .get_or_create(tp, offset, topic_id)
            .context("cannot create its local log")?;
        Ok(PartitionFetchState::new(offset, epoch, FetchStatus::Fetching).with_topic_id(topic_id))
    }
}

/// Why a partition with a local log is not fetched, when the configuration does not follow it.
const NOT_FOLLOWED: &str = "not in `follow`; its log and checkpoint entries stay";

/// The topics `cfg` follows, each once.
fn followed_topics(cfg: &Config) -> Vec<String> {
    let topics: BTreeSet<String> = cfg.follow.iter().map(|f| f.topic.clone()).collect();
    topics.into_iter().collect()
}

/// The `error` label a failed metadata refresh is counted under (see
/// [`crate::live::METADATA_ERROR_KINDS`]): a broker refused our TLS or SASL settings, no
/// broker answered, or the answer could not be used.
fn metadata_error_kind(e: &anyhow::Error) -> &'static str {
    match e.downcast_ref::<cluster::NoBrokerAnswered>() {
        Some(none) if none.refused() > 0 => "refused",
        Some(_) => "unreachable",
        None => "failed",
    }
}

fn log_figures(log: &crate::log::partition::PartitionLog) -> crate::live::LogFigures {
    crate::live::LogFigures {
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        high_watermark: log.high_watermark(),
    }
}

/// How long after its `attempts`-th unsuccessful check a failed partition is checked again:
/// the fetch backoff (at least a second), doubling, at most a minute.
fn failed_retry_delay(backoff_ms: i64, attempts: u32) -> Duration {
    let base = Duration::from_millis(backoff_ms.max(0) as u64).max(Duration::from_secs(1));
    base.saturating_mul(1 << attempts.min(16))
        .min(FAILED_RETRY_MAX)
}

/// Keeps a data-dir file of `topic partition reason` lines equal to `entries` (removed when
/// there are none); `written` caches what the file holds, so an unchanged list costs nothing.
fn write_partition_list<'a>(
    path: &Path,
    entries: impl Iterator<Item = (&'a TopicPartition, &'a str)>,
    written: &mut Option<String>,
) {
    let text: String = entries
        .map(|(tp, why)| format!("{} {} {why}\n", tp.topic, tp.partition))
        .collect();
    let unchanged = written.as_deref() == Some(text.as_str())
        || (text.is_empty() && written.is_none() && !path.exists());
    if unchanged {
        return;
    }
    let result = if text.is_empty() {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    } else {
        crate::checkpoint::rewrite_atomic(path, text.as_bytes())
    };
    match result {
        Ok(()) => *written = Some(text),
        Err(e) => crate::log_error!("cannot record partitions in `{}`: {e:#}", path.display()),
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod seam_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clearing_one_partitions_reports_leaves_the_others_it_prefixes() {
        let mut said: BTreeSet<Said> = [
            Said::CannotStart(TopicPartition::new("orders", 1), "x".into()),
            Said::CannotStart(TopicPartition::new("orders", 10), "x".into()),
            Said::CannotStart(TopicPartition::new("orders", 19), "y".into()),
        ]
        .into();
        Said::forget_cannot_start(&mut said, &TopicPartition::new("orders", 1));
        assert_eq!(said.len(), 2, "orders-10 and orders-19 stay: {said:?}");
        Said::forget_cannot_start(&mut said, &TopicPartition::new("orders", 10));
        assert_eq!(
            said.into_iter().collect::<Vec<_>>(),
            [Said::CannotStart(
                TopicPartition::new("orders", 19),
                "y".into()
            )]
        );
    }

    #[test]
    fn fetcher_id_matches_kafka() {
        // Java: "orders".hashCode() = -1008770331; 31 * h + 0, abs, mod 3
        let h: i32 = -1_008_770_331;
        let expect = ((h.wrapping_mul(31)) & 0x7fff_ffff) as usize % 3;
        assert_eq!(fetcher_id(&TopicPartition::new("orders", 0), 3), expect);
        assert_eq!(fetcher_id(&TopicPartition::new("orders", 5), 1), 0);
    }
}
