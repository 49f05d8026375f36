//! The fetcher manager (Kafka's `AbstractFetcherManager`).
//!
//! It looks up every followed partition's leader, picks the fetcher thread for it — keyed by
//! (leader broker, fetcher id), fetcher id = hash(topic, partition) mod `fetchers_per_broker`
//! as Kafka does — and hands the partition over with its initial fetch state: the local log
//! end when a log exists, else the offset ListOffsets gives for the configured `start`.
//! When a fetcher hands a partition back (stale leader) or metadata shows a new leader or
//! epoch, the partition moves. Fetchers left without partitions are shut down.
//! The manager runs on its own thread and sleeps on its event channel between rounds.
//!
//! This file holds the loop (rounds, events, shutdown); `assignment` decides which fetcher
//! fetches each partition from where, `failed` keeps partitions failed by local storage,
//! `seams` is how the manager reaches the cluster ([`MetadataSource`], [`EndpointFactory`])
//! and `stop` is the [`StopHandle`].

use super::shared::{FetcherEvent, FetcherShared};
use super::shutdownable::ShutdownableThread;
use crate::checkpoint::TopicPartition;
use crate::client::cluster::{ClusterMetadata, MetadataError};
use crate::config::{Config, StartPosition};
use crate::live::Live;
use crate::log::manager::{FailureListener, LogManager, lock_log};
use crate::logging::Human;
use crate::security::ClientSecurity;
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

mod assignment;
mod failed;
mod seams;
mod stop;

use failed::{FailedPartition, FailureHistory};
pub use seams::{BrokerEndpoints, BrokerMetadata, EndpointFactory, MetadataSource, OffsetAnswers};
pub use stop::StopHandle;

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

/// The manager thread's name (the daemon starts it), also its name for the watchdog.
pub const MANAGER_THREAD: &str = "fetcher-manager";

/// How often metadata is refreshed when nothing asks for it (Kafka's metadata.max.age.ms
/// is 5 minutes; a follower wants to notice new partitions and leaders sooner).
pub const METADATA_REFRESH: Duration = Duration::from_secs(30);

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
    /// Where the manager and its fetchers report what they see: the process's live state,
    /// handed over by whoever makes the manager, so neither reads a global.
    live: &'static Live,
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
    pub fn new(
        cfg: Arc<Config>,
        logs: Arc<LogManager>,
        security: Arc<ClientSecurity>,
        live: &'static Live,
    ) -> Self {
        let stop = Arc::new(StopHandle::default());
        let source = BrokerMetadata::new(&cfg, security.clone(), stop.clone());
        let endpoints = BrokerEndpoints::new(&cfg, security, logs.data_dir());
        FetcherManager::with_seams(cfg, logs, stop, source, endpoints, live)
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
        live: &'static Live,
    ) -> Self {
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        stop.set_manager(events_tx.clone());
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
            live,
        };
        m.live.set_followed_topics(followed_topics(&m.cfg));
        m.record_not_yet_logged();
        // Every loaded log is in the live figures from the start (the first STATUS= line and
        // `status` count it): followed ones as starting, the others as stopped.
        for (tp, log) in m.logs.all() {
            let figures = log_figures(&lock_log(&log));
            if m.follows(&tp) {
                m.live.loaded(&tp, &figures);
            } else {
                m.live.stopped(&tp, NOT_FOLLOWED, &figures);
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
            self.live.beat(MANAGER_THREAD);
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
                        if matches!(&e, MetadataError::NoBrokerAnswered(n) if n.refused() > 0) {
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
        self.live.forget(MANAGER_THREAD);
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
                self.live.set_followed_topics(followed_topics(&self.cfg));
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
                self.live
                    .leader_lost(&tp, &format!("looking up its leader ({reason})"));
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
    fn refresh_metadata(&mut self) -> Result<(), MetadataError> {
        let topics: Vec<String> = self.cfg.follow.iter().map(|f| f.topic.clone()).collect();
        let now = crate::clock::now_ms();
        match self.source.metadata(&topics) {
            Ok(md) => {
                self.metadata = md;
                self.live.metadata_answered(now);
                Ok(())
            }
            Err(e) => {
                if !self.stop.is_stopping() {
                    self.live.metadata_failed(e.kind(), &format!("{e:#}"), now);
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
        self.live.set_not_yet_logged(out);
    }
}

/// Why a partition with a local log is not fetched, when the configuration does not follow it.
const NOT_FOLLOWED: &str = "not in `follow`; its log and checkpoint entries stay";

/// The topics `cfg` follows, each once.
fn followed_topics(cfg: &Config) -> Vec<String> {
    let topics: BTreeSet<String> = cfg.follow.iter().map(|f| f.topic.clone()).collect();
    topics.into_iter().collect()
}

fn log_figures(log: &crate::log::partition::PartitionLog) -> crate::live::LogFigures {
    crate::live::LogFigures {
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        high_watermark: log.high_watermark(),
    }
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
