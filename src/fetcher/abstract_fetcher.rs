//! The abstract fetch loop (Kafka's `AbstractFetcherThread`).
//!
//! A fetcher owns a partition map (partition → [`PartitionFetchState`]) shared with the
//! manager through [`FetcherShared`]. Each [`AbstractFetcher::do_work`] round:
//! 1. resolves partitions in the `Truncating` state (leaders without Fetch v12 divergence
//!    detection are asked OffsetForLeaderEpoch; see `truncation`);
//! 2. `build_fetch_request` — one Fetch for every partition that is ready, or waits on the
//!    condition variable until one is (added by the manager, or its backoff ends). Within a
//!    KIP-227 fetch session ([`super::fetch_session`]) it names only the partitions whose
//!    fetch parameters changed, and its response lists only partitions with news;
//! 3. `fetch` — through the [`LeaderEndPoint`];
//! 4. `process_fetch_request` (see `response`) — validate each partition's records through
//!    the [`ReplicaOps`], pipeline the next request, append, and apply each partition's
//!    outcome: its state advances to the offset after the last appended batch. Errors are per
//!    partition: that partition backs off (delayed until T), the others go on.
//!
//! OffsetOutOfRange follows Kafka's follower rule; partitions whose leader is stale go back to
//! the manager, which looks the leader up again.

use super::backoff::{FailureBackoff, delay};
use super::fetch_session::{FetchSessionHandler, WantedPartition};
use super::leader_endpoint::{FetchFrame, LeaderEndPoint};
use super::partition_map::{PartitionFetchState, PartitionMap};
use super::replica_ops::ReplicaOps;
use super::shared::{FetcherEvent, FetcherShared};
use super::shutdownable::ShutdownSignal;
use crate::checkpoint::TopicPartition;
use crate::client::{ConnectionError, ConnectionErrorKind};
use crate::live::Live;
use crate::protocol::fetch::{FetchPartition, FetchRequest};
use anyhow::Result;
use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

mod response;
mod truncation;

#[derive(Debug, Clone)]
pub struct FetchParams {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub isolation_level: i8,
    pub backoff: Duration,
    /// The longest wait after failed fetches in a row.
    pub backoff_max: Duration,
}

pub struct AbstractFetcher<L: LeaderEndPoint, R: ReplicaOps> {
    pub name: String,
    shared: std::sync::Arc<FetcherShared>,
    leader: L,
    replica: R,
    params: FetchParams,
    events: Sender<FetcherEvent>,
    /// Where the loop reports what it sees (fetch latency, lag, back-offs): the process's
    /// live state, handed over by the manager, so the loop reads no global.
    live: &'static Live,
    /// A request sent ahead (pipelined) whose response the next round receives.
    in_flight: Option<FetchRequest>,
    /// The response to `in_flight`, already received (while the last response was being
    /// appended), and when it arrived.
    prefetched: Option<(Result<FetchFrame, ConnectionError>, Instant)>,
    /// When the request in flight was sent (for the fetch latency histogram).
    sent_at: Option<Instant>,
    /// Counts partitions that brought data, to order requests (see `last_data_round`).
    round: u64,
    /// Fetches in a row that got no usable response, and the wait before the next.
    failures: FailureBackoff,
    /// Partitions handed back since hand-backs were last said, and why: said in one line per
    /// reason, not one each.
    handed_back: Vec<(TopicPartition, String)>,
    /// The KIP-227 session with this leader: what it holds and the next epoch.
    session: FetchSessionHandler,
    /// [`crate::log::partition::position_moves`] when the last request was built.
    position_moves: u64,
    /// When the session's partitions were last noted as fetched (see `note_session_fetched`).
    session_fetched_at: Option<Instant>,
    /// When a session reset was last said at INFO.
    session_reset_said: Option<Instant>,
    /// When hand-backs were last said: within [`HAND_BACKS_EVERY`] of it they gather.
    hand_backs_said: Option<Instant>,
}

/// Hand-backs are said at most this often: a leader refusing many partitions hands them
/// back in several responses a round, round after round.
const HAND_BACKS_EVERY: Duration = Duration::from_secs(2);

/// A test hook for the watchdog: with `RF_TEST_STALL_FETCHER_AFTER_MS=<ms>`, every fetcher
/// stops making progress that long after its first round (it waits, ending only at
/// shutdown), as a wedged fetcher would. Unset, it costs one comparison. Only builds with the
/// `test-hooks` feature (tests/run.sh's) have it; in others it does nothing.
#[cfg(feature = "test-hooks")]
fn test_stall(shared: &FetcherShared) {
    static AT: std::sync::OnceLock<Option<Instant>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| {
        let ms: u64 = std::env::var("RF_TEST_STALL_FETCHER_AFTER_MS")
            .ok()?
            .parse()
            .ok()?;
        Some(Instant::now() + Duration::from_millis(ms))
    });
    if at.is_some_and(|t| Instant::now() >= t) {
        crate::log_warn!("test stall: this fetcher stops making progress");
        while shared.is_running() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
fn test_stall(_shared: &FetcherShared) {}

/// The longest a fetcher waits for a partition to become ready before its round ends.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// How often partitions a fetch session leaves out of its responses are noted as fetched.
const SESSION_FETCHED_EVERY: Duration = crate::live::LAST_FETCH_EVERY;

/// The partitions of a request's or a response's topics.
fn partitions_in<T>(
    topics: &[(String, Vec<T>)],
    index: fn(&T) -> i32,
) -> impl Iterator<Item = TopicPartition> + '_ {
    topics.iter().flat_map(move |(t, ps)| {
        ps.iter()
            .map(move |p| TopicPartition::new(t.clone(), index(p)))
    })
}

/// Whether a request names every partition it fetches (sessionless, or opening a session).
fn is_full(req: &FetchRequest) -> bool {
    req.session_epoch <= crate::protocol::fetch::INITIAL_EPOCH
}

impl<L: LeaderEndPoint, R: ReplicaOps> AbstractFetcher<L, R> {
    pub fn new(
        name: String,
        shared: std::sync::Arc<FetcherShared>,
        leader: L,
        replica: R,
        params: FetchParams,
        events: Sender<FetcherEvent>,
        live: &'static Live,
    ) -> Self {
        let failures = FailureBackoff::new(params.backoff, params.backoff_max);
        AbstractFetcher {
            name,
            shared,
            leader,
            replica,
            params,
            events,
            live,
            in_flight: None,
            prefetched: None,
            sent_at: None,
            round: 0,
            failures,
            handed_back: Vec::new(),
            session: FetchSessionHandler::new(),
            position_moves: 0,
            session_fetched_at: None,
            session_reset_said: None,
            hand_backs_said: None,
        }
    }

    /// One line per reason for the partitions handed back since hand-backs were last said,
    /// at most every [`HAND_BACKS_EVERY`] (each partition once, with its last reason).
    fn report_hand_backs(&mut self) {
        if self.handed_back.is_empty()
            || self
                .hand_backs_said
                .is_some_and(|t| t.elapsed() < HAND_BACKS_EVERY)
        {
            return;
        }
        self.hand_backs_said = Some(Instant::now());
        let handed: Vec<(TopicPartition, String)> = std::mem::take(&mut self.handed_back)
            .into_iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
        let Some((first, why)) = handed.first() else {
            return;
        };
        if handed.len() == 1 {
            crate::log_info!("{first}: {why}; handing it back for a leader lookup");
            return;
        }
        // One line per reason, naming the first few partitions.
        let mut by_reason: BTreeMap<&str, Vec<&TopicPartition>> = BTreeMap::new();
        for (tp, why) in &handed {
            by_reason.entry(why.as_str()).or_default().push(tp);
        }
        for (why, tps) in by_reason {
            let names: Vec<String> = tps.iter().take(3).map(|tp| tp.to_string()).collect();
            crate::log_info!(
                "{} partition(s) handed back for a leader lookup ({}{}): {why}",
                tps.len(),
                names.join(", "),
                if tps.len() > 3 { ", …" } else { "" }
            );
        }
    }

    pub fn replica(&self) -> &R {
        &self.replica
    }

    /// One round: truncate where needed, build, fetch, process. When the last round already
    /// sent the next request (see [`Self::process_fetch_request`]), this round only receives
    /// and processes its response.
    pub fn do_work(&mut self) {
        test_stall(&self.shared);
        self.do_round();
        self.report_hand_backs();
    }

    fn do_round(&mut self) {
        if self.in_flight.is_none() {
            self.maybe_truncate();
            let Some(req) = self.build_fetch_request() else {
                return;
            };
            if !self.shared.is_running() {
                // Built, never sent: the session must not count it.
                self.session.reset();
                return;
            }
            if let Err(e) = self.leader.send_fetch(&req) {
                self.fetch_failed(&req, &e);
                return;
            }
            self.in_flight = Some(req);
            self.sent_at = Some(Instant::now());
        }
        if let Some(req) = self.in_flight.take() {
            self.process_fetch_request(&req);
        }
    }

    /// The request for every ready partition, with the fetch offsets (and last fetched
    /// epochs) in `ahead` instead of the map's for the partitions it names. Within a fetch
    /// session it names only the partitions whose parameters changed (see [`fetch_session`]);
    /// building it advances the session, so it must be sent or the session reset.
    ///
    /// [`fetch_session`]: super::fetch_session
    fn request_for(
        &mut self,
        map: &mut PartitionMap,
        ahead: &BTreeMap<TopicPartition, (i64, Option<i32>)>,
    ) -> Option<FetchRequest> {
        let now = Instant::now();
        let moves = self.replica.position_moves();
        let moved = std::mem::replace(&mut self.position_moves, moves) != moves;
        let built = if self.session.next_is_incremental(now) && !moved {
            // Only what changed since the last request: the session holds the rest.
            let mut changed = map.take_request_changes(now);
            changed.extend(ahead.keys().cloned());
            let changes: Vec<(TopicPartition, Option<WantedPartition>)> = changed
                .into_iter()
                .map(|tp| {
                    let w = map
                        .get(&tp)
                        .filter(|s| s.is_ready(now))
                        .map(|st| self.wanted(&tp, st, ahead));
                    (tp, w)
                })
                .collect();
            self.session.build_delta(changes.into_iter())?
        } else {
            // Every partition is looked at: nothing changed is left over for the next round.
            map.clear_request_changes();
            let map: &PartitionMap = map;
            let wanted: Vec<(&TopicPartition, WantedPartition)> = map
                .iter()
                .filter(|(_, s)| s.is_ready(now))
                .map(|(tp, st)| (tp, self.wanted(tp, st, ahead)))
                .collect();
            self.session.build(wanted.into_iter(), now)?
        };
        Some(FetchRequest {
            replica_id: -1,
            max_wait_ms: self.params.max_wait_ms,
            min_bytes: self.params.min_bytes,
            max_bytes: self.params.max_bytes,
            isolation_level: self.params.isolation_level,
            topics: built.topics,
            topic_ids: built.topic_ids,
            session_id: built.session_id,
            session_epoch: built.session_epoch,
            forgotten: built.forgotten,
        })
    }

    /// An incremental response leaves out the partitions with nothing new, which were
    /// fetched all the same: their last fetch time (`status`, the metrics, the README's
    /// no-fetch alert) moves on every [`SESSION_FETCHED_EVERY`], not every round, so an idle
    /// round still costs nothing per partition.
    fn note_session_fetched(&mut self) {
        let now = Instant::now();
        if self
            .session_fetched_at
            .is_some_and(|t| now.duration_since(t) < SESSION_FETCHED_EVERY)
        {
            return;
        }
        self.session_fetched_at = Some(now);
        self.live
            .fetched_in_session(self.session.session_partitions(), crate::clock::now_ms());
    }

    /// What a request asks of `tp`: the map's fetch offset, or the one in `ahead` (a
    /// pipelined request), with the local log's start and last epoch.
    fn wanted(
        &self,
        tp: &TopicPartition,
        st: &PartitionFetchState,
        ahead: &BTreeMap<TopicPartition, (i64, Option<i32>)>,
    ) -> WantedPartition {
        let (log_start, latest_epoch) = self.replica.fetch_position(tp);
        let (fetch_offset, epoch) = match ahead.get(tp) {
            Some(&(o, e)) => (o, e.or(latest_epoch)),
            None => (st.fetch_offset, latest_epoch),
        };
        let data = FetchPartition {
            partition: tp.partition,
            current_leader_epoch: st.current_leader_epoch,
            fetch_offset,
            last_fetched_epoch: epoch.unwrap_or(-1),
            log_start_offset: log_start.unwrap_or(-1),
            partition_max_bytes: self.params.partition_max_bytes,
        };
        WantedPartition {
            topic_id: st.topic_id,
            data,
            // Longest without data first.
            order: st.last_data_round,
        }
    }

    /// Drops the connection; the fetch session goes with it (the next request is full).
    fn close_leader(&mut self) {
        self.leader.close();
        self.session.reset();
    }

    /// Every partition a request fetches: those it names, and for an incremental request
    /// also those the session holds.
    fn fetched_by(&self, req: &FetchRequest) -> Vec<TopicPartition> {
        let mut tps: std::collections::BTreeSet<TopicPartition> =
            partitions_in(&req.topics, |p| p.partition).collect();
        if !is_full(req) {
            tps.extend(self.session.session_partitions().cloned());
        }
        tps.into_iter().collect()
    }

    /// Builds one request for every ready partition, or waits until one is ready (or a
    /// partition is added, or shutdown) and returns `None`.
    pub fn build_fetch_request(&mut self) -> Option<FetchRequest> {
        let shared = self.shared.clone();
        let mut map = shared.lock();
        if self.replica.paused() {
            if shared.is_running() {
                shared.wait(map, self.params.backoff.min(IDLE_WAIT));
            }
            return None;
        }
        if let Some(req) = self.request_for(&mut map, &BTreeMap::new()) {
            return Some(req);
        }
        if !shared.is_running() {
            return None;
        }
        // Nothing ready: sleep until the earliest backoff ends, or until woken — a second at
        // most, so that the round ends and the watchdog sees this thread alive.
        let now = Instant::now();
        let wake_at = map.next_wake();
        let wait = match wake_at {
            Some(t) => t.saturating_duration_since(now),
            None if map.any_truncating() => self.params.backoff,
            None => IDLE_WAIT,
        };
        shared.wait(map, wait.min(IDLE_WAIT));
        None
    }

    /// A fetch that got no usable response: every partition in it backs off, and the
    /// connection is dropped (with any request pipelined on it).
    fn fetch_failed(&mut self, req: &FetchRequest, e: &ConnectionError) {
        self.prefetched = None;
        let shared = self.shared.clone();
        // Taken before the session goes with the connection.
        let fetched = self.fetched_by(req);
        if e.kind() == ConnectionErrorKind::IdentityMismatch {
            // Another cluster answers at this address: every partition goes back to the
            // manager at once, which stops fetching for the data dir (one ERROR there).
            self.close_leader();
            self.in_flight = None;
            let mut map = shared.lock();
            for tp in &fetched {
                if map.contains_key(tp) {
                    self.hand_back(&mut map, tp, format!("identity changed: {e}"));
                }
            }
            return;
        }
        let what = format!(
            "fetch of {} partition(s) from {}",
            fetched.len(),
            self.leader.describe()
        );
        let wait = self.failures.failed(&what, e, self.shared.is_running());
        self.close_leader();
        self.in_flight = None;
        let mut map = shared.lock();
        let why = format!("{e:#}");
        for tp in &fetched {
            self.live.unanswered(tp, &why);
            delay(&mut map, tp, wait);
        }
    }

    /// A local storage error: the partition leaves this fetcher and is marked failed (the
    /// manager retries it once its files are sound); the others go on.
    fn fail(&mut self, map: &mut PartitionMap, tp: &TopicPartition, reason: &str) {
        map.remove(tp);
        self.replica.mark_failed(tp, reason);
    }

    /// Removes the partition and asks the manager to look its leader up again.
    fn hand_back(&mut self, map: &mut PartitionMap, tp: &TopicPartition, reason: String) {
        crate::log_debug!("{tp}: {reason}; handing it back for a leader lookup");
        self.handed_back.push((tp.clone(), reason.clone()));
        let leader_epoch = map.get(tp).map_or(-1, |s| s.current_leader_epoch);
        map.remove(tp);
        let _ = self.events.send(FetcherEvent::NeedsLeader {
            tp: tp.clone(),
            reason,
            fetcher: self.name.clone(),
            leader_epoch,
        });
    }
}

#[cfg(test)]
mod tests;
