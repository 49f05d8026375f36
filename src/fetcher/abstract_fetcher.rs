//! The abstract fetch loop (Kafka's `AbstractFetcherThread`).
//!
//! A fetcher owns a partition map (partition → [`PartitionFetchState`]) shared with the
//! manager through [`FetcherShared`]. Each [`AbstractFetcher::do_work`] round:
//! 1. resolves partitions in the `Truncating` state (leaders without Fetch v12 divergence
//!    detection are asked OffsetForLeaderEpoch);
//! 2. `build_fetch_request` — one Fetch for every partition that is ready, or waits on the
//!    condition variable until one is (added by the manager, or its backoff ends). Within a
//!    KIP-227 fetch session ([`super::fetch_session`]) it names only the partitions whose
//!    fetch parameters changed, and its response lists only partitions with news;
//! 3. `fetch` — through the [`LeaderEndPoint`];
//! 4. `process_partition_data` — through the [`ReplicaOps`], per partition, then the
//!    partition's state advances to the offset after the last appended batch. Errors are per
//!    partition: that partition backs off (delayed until T), the others go on.
//!
//! OffsetOutOfRange follows Kafka's follower rule; partitions whose leader is stale go back to
//! the manager, which looks the leader up again.

use super::backoff::{FailureBackoff, delay};
use super::fetch_session::{FetchSessionHandler, ResponseVerdict, WantedPartition};
use super::leader_endpoint::{FetchFrame, Identity, IdentityMismatch, LeaderEndPoint};
use super::partition_map::{FetchStatus, PartitionFetchState, PartitionMap};
use super::replica_ops::{ReplicaOps, ValidatedFetch};
use super::shared::{FetcherEvent, FetcherShared};
use super::shutdownable::ShutdownSignal;
use crate::checkpoint::TopicPartition;
use crate::log::AppendError;
use crate::logging::Human;
use crate::protocol::error::ErrorAction;
use crate::protocol::fetch::{DivergingEpoch, FetchPartition, FetchRequest};
use anyhow::Result;
use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

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
    /// A request sent ahead (pipelined) whose response the next round receives.
    in_flight: Option<FetchRequest>,
    /// The response to `in_flight`, already received (while the last response was being
    /// appended), and when it arrived.
    prefetched: Option<(Result<FetchFrame>, Instant)>,
    /// When the request in flight was sent (for the fetch latency histogram).
    sent_at: Option<Instant>,
    /// Counts partitions that brought data, to order requests (see `last_data_round`).
    round: u64,
    /// Fetches in a row that got no usable response, and the wait before the next.
    failures: FailureBackoff,
    /// Partitions handed back in this round, and why: said in one line, not one each.
    handed_back: Vec<(TopicPartition, String)>,
    /// The KIP-227 session with this leader: what it holds and the next epoch.
    session: FetchSessionHandler,
    /// [`crate::log::partition::position_moves`] when the last request was built.
    position_moves: u64,
    /// When the session's partitions were last noted as fetched (see `note_session_fetched`).
    session_fetched_at: Option<Instant>,
    /// When a session reset was last said at INFO.
    session_reset_said: Option<Instant>,
}

/// A test hook for the watchdog: with `RF_TEST_STALL_FETCHER_AFTER_MS=<ms>`, every fetcher
/// stops making progress that long after its first round (it waits, ending only at
/// shutdown), as a wedged fetcher would. Unset, it costs one comparison.
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

/// The longest a fetcher waits for a partition to become ready before its round ends.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// How often partitions a fetch session leaves out of its responses are noted as fetched.
const SESSION_FETCHED_EVERY: Duration = Duration::from_secs(30);

/// Whether an error came from the connection (an I/O error in its chain) rather than from
/// what the leader said.
fn is_transport(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some())
}

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

/// Marks an error as the local log's (not the leader's): the partition is failed.
/// How many record bytes a response must bring before its successor is received on a second
/// thread while it is appended: below this, a thread costs more than the overlap saves.
const OVERLAP_MIN_BYTES: usize = 1 << 20;

#[derive(Debug)]
struct LocalFailure(&'static str);

impl std::fmt::Display for LocalFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed", self.0)
    }
}

/// What to do with a partition after its part of a response was looked at.
enum Outcome {
    Advanced(i64),
    Delay,
    Diverged(DivergingEpoch),
    OutOfRange,
    NeedsLeader(String),
    /// The leader reports a high watermark below the local log end: its log went backwards
    /// (an election with a lagging HW, or a topic re-created under the same name) — ask it
    /// who it is before anything else happens.
    CheckIdentity,
    /// A local storage error: the partition is failed.
    Failed(String),
    Unchanged,
}

impl<L: LeaderEndPoint, R: ReplicaOps> AbstractFetcher<L, R> {
    pub fn new(
        name: String,
        shared: std::sync::Arc<FetcherShared>,
        leader: L,
        replica: R,
        params: FetchParams,
        events: Sender<FetcherEvent>,
    ) -> Self {
        let failures = FailureBackoff::new(params.backoff, params.backoff_max);
        AbstractFetcher {
            name,
            shared,
            leader,
            replica,
            params,
            events,
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
        }
    }

    /// One line for the partitions handed back since the last call.
    fn report_hand_backs(&mut self) {
        let handed = std::mem::take(&mut self.handed_back);
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
        crate::live::live()
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
    fn fetch_failed(&mut self, req: &FetchRequest, e: &anyhow::Error) {
        self.prefetched = None;
        let shared = self.shared.clone();
        // Taken before the session goes with the connection.
        let fetched = self.fetched_by(req);
        if let Some(m) = e.chain().find_map(|c| c.downcast_ref::<IdentityMismatch>()) {
            // Another cluster answers at this address: every partition goes back to the
            // manager at once, which stops fetching for the data dir (one ERROR there).
            self.close_leader();
            self.in_flight = None;
            let mut map = shared.lock();
            for tp in &fetched {
                if map.contains_key(tp) {
                    self.hand_back(&mut map, tp, format!("identity changed: {}", m.0));
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
            crate::live::live().unanswered(tp, &why);
            delay(&mut map, tp, wait);
        }
    }

    /// Receives the response to `req` and handles it partition by partition.
    ///
    /// Pipelining: when every partition in the response is healthy and at least one brought
    /// data, the next request — at the offsets after this response's last whole batches — is
    /// sent *before* this response is verified and written, so the leader prepares it while
    /// the disk write runs. If a partition's append then fails, its state does not advance,
    /// and the pipelined response's data for it is ignored (its fetch offset no longer
    /// matches). Rounds that need other requests (OffsetOutOfRange, divergence, leader
    /// lookups) never pipeline.
    pub fn process_fetch_request(&mut self, req: &FetchRequest) {
        let (frame, arrived) = match self.prefetched.take() {
            Some(got) => got,
            None => (self.leader.receive_fetch(), Instant::now()),
        };
        let frame = match frame {
            Ok(f) => f,
            Err(e) => return self.fetch_failed(req, &e),
        };
        if let Some(t) = self.sent_at.take() {
            crate::live::live().observe_fetch(arrived.saturating_duration_since(t));
        }
        let resp = match frame.decode() {
            Ok(r) => r,
            Err(e) => {
                let e = e.context(format!(
                    "{}: bad Fetch v{} response",
                    self.leader.describe(),
                    frame.version
                ));
                self.fetch_failed(req, &e);
                return;
            }
        };
        self.failures.succeeded(|| self.leader.describe());
        let full = is_full(req);
        // The offset each answered partition was fetched from: a full request names them all;
        // an incremental one only those that changed, the session holds the rest. Only the
        // partitions answered are looked up, so an idle round costs nothing per partition.
        let requested: BTreeMap<TopicPartition, i64> = if full {
            req.topics
                .iter()
                .flat_map(|(t, ps)| {
                    ps.iter()
                        .map(move |p| (TopicPartition::new(t.clone(), p.partition), p.fetch_offset))
                })
                .collect()
        } else {
            partitions_in(&resp.topics, |p| p.partition)
                .filter_map(|tp| self.session.fetch_offset(&tp).map(|o| (tp, o)))
                .collect()
        };
        let shared = self.shared.clone();
        if !resp.error.is_ok() {
            let fetched = self.fetched_by(req);
            let session_id = req.session_id;
            let epoch = req.session_epoch;
            self.session
                .handle_response(resp.error, resp.session_id, Instant::now());
            if resp.error.action() == ErrorAction::ResetSession {
                // The leader lost or refused the session: a full fetch opens a new one at
                // once, and nothing is lost (no offset moved).
                // Said once a minute at most: a leader that keeps refusing is not a storm.
                let now = Instant::now();
                let line = format!(
                    "fetch session {session_id} (epoch {epoch}) with {} ended with {}; starting a new one with a full fetch",
                    self.leader.describe(),
                    resp.error
                );
                if self
                    .session_reset_said
                    .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
                {
                    crate::log_info!("{line}");
                    self.session_reset_said = Some(now);
                } else {
                    crate::log_debug!("{line}");
                }
            } else {
                crate::log_warn!(
                    "fetch from {} failed with {}",
                    self.leader.describe(),
                    resp.error
                );
                let mut map = shared.lock();
                for tp in &fetched {
                    delay(&mut map, tp, self.params.backoff);
                }
            }
            drop(resp);
            self.leader.recycle(frame);
            return;
        }
        let verdict = self
            .session
            .handle_response(resp.error, resp.session_id, Instant::now());
        debug_assert_eq!(verdict, ResponseVerdict::Usable);
        if !full {
            self.note_session_fetched();
        }
        let mut map = shared.lock();

        // Each partition's records are validated once, here; where each partition will be once
        // this response is appended, if all goes well, follows from that.
        let mut validated: BTreeMap<TopicPartition, Result<R::Validated, AppendError>> =
            BTreeMap::new();
        let mut ahead: BTreeMap<TopicPartition, (i64, Option<i32>)> = BTreeMap::new();
        let mut healthy = !map.any_truncating();
        for (topic, parts) in &resp.topics {
            for data in parts {
                if !data.error.is_ok() || data.diverging_epoch.is_some() {
                    healthy = false;
                    continue;
                }
                let tp = TopicPartition::new(topic.clone(), data.partition);
                let Some(&fetch_offset) = requested.get(&tp) else {
                    continue;
                };
                if data.high_watermark < fetch_offset {
                    healthy = false;
                }
                let current = map.get(&tp).is_some_and(|s| {
                    s.fetch_offset == fetch_offset && s.status == FetchStatus::Fetching
                });
                if !current {
                    continue;
                }
                let v = self.replica.validate(&tp, fetch_offset, data);
                match &v {
                    Ok(v) if v.refused().is_some() => healthy = false,
                    Ok(v) if v.next_fetch_offset() > fetch_offset => {
                        ahead.insert(tp.clone(), (v.next_fetch_offset(), v.last_epoch()));
                    }
                    Ok(_) => {}
                    Err(_) => healthy = false,
                }
                validated.insert(tp, v);
            }
        }
        if healthy
            && !ahead.is_empty()
            && shared.is_running()
            && !self.replica.paused()
            && let Some(next_req) = self.request_for(&mut map, &ahead)
        {
            match self.leader.send_fetch(&next_req) {
                Ok(()) => {
                    self.in_flight = Some(next_req);
                    self.sent_at = Some(Instant::now());
                }
                Err(e) => {
                    // The session counted a request the leader never got (and a half-sent
                    // frame would garble the connection): start over on a new one.
                    crate::log_debug!("pipelined fetch not sent: {e:#}");
                    self.close_leader();
                }
            }
        }

        // With the next request on its way and much to write, its response is received on a
        // second thread while this one appends: the socket copy and the page-cache copy of
        // the same bytes overlap instead of taking turns (the leader keeps sending meanwhile
        // only as far as the socket buffers reach).
        let to_write: usize = resp
            .topics
            .iter()
            .flat_map(|(_, ps)| ps.iter().map(|p| p.records.len()))
            .sum();
        let overlap = self.in_flight.is_some() && to_write >= OVERLAP_MIN_BYTES;
        let mut follow_up: Vec<(TopicPartition, i64, i32, Outcome)> = Vec::new();
        let prefetched = std::thread::scope(|scope| {
            let leader = &mut self.leader;
            let receiving = overlap.then(|| {
                scope.spawn(move || {
                    let got = leader.receive_fetch();
                    (got, Instant::now())
                })
            });
            for (topic, parts) in &resp.topics {
                for data in parts {
                    let tp = TopicPartition::new(topic.clone(), data.partition);
                    let Some(&fetch_offset) = requested.get(&tp) else {
                        continue;
                    };
                    // The manager may have removed or reset the partition while we fetched.
                    let Some(state) = map.get(&tp) else { continue };
                    if state.fetch_offset != fetch_offset || state.status != FetchStatus::Fetching {
                        continue;
                    }
                    let leader_epoch = state.current_leader_epoch;
                    if data.error.is_ok() && data.high_watermark >= 0 {
                        crate::live::live().leader_high_watermark(&tp, data.high_watermark);
                    }
                    let outcome = if let Some(d) = data.diverging_epoch {
                        Outcome::Diverged(d)
                    } else if data.error.is_ok() && data.high_watermark < fetch_offset {
                        match validated.remove(&tp) {
                            Some(Err(e)) => crate::log_error!(
                                "{tp} at offset {fetch_offset}: {e}; backing off {}",
                                Human(self.params.backoff)
                            ),
                            _ => crate::log_debug!(
                                "{tp}: the leader's high watermark {} is below the fetch offset {fetch_offset}",
                                data.high_watermark
                            ),
                        }
                        Outcome::CheckIdentity
                    } else {
                        match data.error.action() {
                            ErrorAction::None => {
                                let mut refused = None;
                                let appended = match validated.remove(&tp) {
                                    Some(Ok(v)) => {
                                        refused = v.refused().map(str::to_string);
                                        self.replica.append(&tp, fetch_offset, v, data)
                                    }
                                    Some(Err(e)) => Err(e),
                                    None => Ok(fetch_offset),
                                };
                                if let (Ok(_), Some(why)) = (&appended, &refused) {
                                    crate::log_error!(
                                        "{tp} at offset {fetch_offset}: {why}; backing off {}",
                                        Human(self.params.backoff)
                                    );
                                    crate::live::live().backing_off(&tp, "refused", why);
                                }
                                match appended {
                                    Ok(next) if refused.is_some() => {
                                        if let Some(s) = map.get_mut(&tp) {
                                            s.fetch_offset = next;
                                        }
                                        Outcome::Delay
                                    }
                                    Ok(next) if next != fetch_offset => Outcome::Advanced(next),
                                    Ok(_) => Outcome::Unchanged,
                                    Err(e) => {
                                        crate::live::live().backing_off(
                                            &tp,
                                            e.kind(),
                                            &e.to_string(),
                                        );
                                        // Bytes that can never be valid, and the disk failing,
                                        // are errors; offsets that do not follow are a warning (a
                                        // leader change or a re-created topic is looked into).
                                        match &e {
                                            // Said once by the data dir, or once a minute for
                                            // the process, not per partition.
                                            AppendError::DiskFull(_)
                                            | AppendError::Exhausted(_) => {}
                                            // Said once by the log manager, which fails it.
                                            AppendError::Storage(_) => {}
                                            AppendError::InvalidData(_) => {
                                                crate::log_error!(
                                                    "{tp} at offset {fetch_offset}: {e}; backing off {}",
                                                    Human(self.params.backoff)
                                                )
                                            }
                                            AppendError::OffsetMismatch(_) => crate::log_warn!(
                                                "{tp} at offset {fetch_offset}: {e}; backing off {}",
                                                Human(self.params.backoff)
                                            ),
                                        }
                                        // A failed append may have written part of the response
                                        // (a roll failed midway), or the log may have moved under
                                        // us: fetch on from wherever the log really ends.
                                        if let (Some(end), Some(s)) =
                                            (self.replica.log_end_offset(&tp), map.get_mut(&tp))
                                        {
                                            s.fetch_offset = end;
                                        }
                                        // Offsets that do not follow the local log are what a
                                        // re-created topic looks like: ask the leader who it is.
                                        match e {
                                            AppendError::OffsetMismatch(_) => {
                                                Outcome::CheckIdentity
                                            }
                                            AppendError::Storage(e) => {
                                                Outcome::Failed(format!("{e:#}"))
                                            }
                                            _ => Outcome::Delay,
                                        }
                                    }
                                }
                            }
                            ErrorAction::OffsetOutOfRange => Outcome::OutOfRange,
                            ErrorAction::RefreshMetadata => {
                                Outcome::NeedsLeader(format!("leader answered {}", data.error))
                            }
                            ErrorAction::Retry | ErrorAction::ResetSession => {
                                crate::live::live().backing_off(
                                    &tp,
                                    data.error.name(),
                                    &format!("leader answered {}", data.error),
                                );
                                crate::log_warn!(
                                    "{tp}: leader answered {}; retrying in {}",
                                    data.error,
                                    Human(self.params.backoff)
                                );
                                Outcome::Delay
                            }
                            ErrorAction::Fatal => {
                                crate::live::live().backing_off(
                                    &tp,
                                    data.error.name(),
                                    &format!("leader answered {}", data.error),
                                );
                                crate::log_error!(
                                    "{tp}: leader answered {}; retrying in {}",
                                    data.error,
                                    Human(self.params.backoff * 30)
                                );
                                if let Some(s) = map.get_mut(&tp) {
                                    s.delayed_until =
                                        Some(Instant::now() + self.params.backoff * 30);
                                }
                                Outcome::Unchanged
                            }
                        }
                    };
                    match outcome {
                        Outcome::Advanced(next) => {
                            self.round += 1;
                            if let Some(s) = map.get_mut(&tp) {
                                s.fetch_offset = next;
                                s.delayed_until = None;
                                s.last_data_round = self.round;
                            }
                        }
                        Outcome::Delay => delay(&mut map, &tp, self.params.backoff),
                        Outcome::Failed(reason) => {
                            // As `fail`, which would borrow the leader being received on.
                            map.remove(&tp);
                            self.replica.mark_failed(&tp, &reason);
                        }
                        Outcome::Unchanged => {}
                        other => follow_up.push((tp, fetch_offset, leader_epoch, other)),
                    }
                }
            }
            receiving.map(|h| {
                h.join().unwrap_or_else(|_| {
                    (
                        Err(anyhow::anyhow!("receiving a fetch response failed")),
                        Instant::now(),
                    )
                })
            })
        });
        self.prefetched = prefetched;
        // A full response answers every partition asked for (an incremental one only those
        // with something new). One left out was
        // answered under another name — at v13 a leader whose topic was re-created may answer
        // for an id it does not know with a zero id — so its leader and identity are looked up
        // again.
        let answered: std::collections::BTreeSet<TopicPartition> =
            partitions_in(&resp.topics, |p| p.partition).collect();
        for (tp, &fetch_offset) in requested.iter().filter(|_| full) {
            if !answered.contains(tp)
                && let Some(state) = map.get(tp)
                && state.fetch_offset == fetch_offset
                && state.status == FetchStatus::Fetching
            {
                let epoch = state.current_leader_epoch;
                follow_up.push((
                    tp.clone(),
                    fetch_offset,
                    epoch,
                    Outcome::NeedsLeader(format!(
                        "the Fetch v{} response from {} left it out",
                        frame.version,
                        self.leader.describe()
                    )),
                ));
            }
        }
        drop(map);
        drop(resp);
        self.leader.recycle(frame);
        // Follow-ups send their own requests: only when nothing is pipelined (an unhealthy
        // response never pipelines, so this holds whenever there are follow-ups).
        if self.in_flight.is_some() && !follow_up.is_empty() {
            self.close_leader();
            self.in_flight = None;
            if let Some((Ok(f), _)) = self.prefetched.take() {
                self.leader.recycle(f);
            }
        }
        self.follow_up(follow_up);
    }

    /// Runs the follow-ups of a round (they send their own requests) under the partition-map
    /// lock, as Kafka does: a partition the manager moved away meanwhile is left alone.
    /// A partition changed meanwhile (moved away, reset) is left alone; once the leader
    /// proves unreachable, the remaining partitions back off instead of each waiting for it.
    fn follow_up(&mut self, items: Vec<(TopicPartition, i64, i32, Outcome)>) {
        let shared = self.shared.clone();
        let mut map = shared.lock();
        let mut leader_unreachable = false;
        for (tp, fetch_offset, leader_epoch, outcome) in items {
            let unchanged = map.get(&tp).is_some_and(|s| {
                s.fetch_offset == fetch_offset
                    && s.current_leader_epoch == leader_epoch
                    && s.status == FetchStatus::Fetching
            });
            if !unchanged {
                continue;
            }
            match outcome {
                Outcome::Diverged(d) => self.truncate_on_divergence(&mut map, &tp, d),
                Outcome::OutOfRange if leader_unreachable => {
                    delay(&mut map, &tp, self.params.backoff)
                }
                Outcome::OutOfRange => {
                    leader_unreachable = !self.handle_offset_out_of_range(&mut map, &tp)
                }
                Outcome::NeedsLeader(reason) => self.hand_back(&mut map, &tp, reason),
                Outcome::CheckIdentity if self.same_identity(&mut map, &tp) => {
                    delay(&mut map, &tp, self.params.backoff)
                }
                _ => {}
            }
        }
        drop(map);
        self.replica.after_truncations();
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

    /// Before a truncation: whether the leader still serves the topic the local log belongs
    /// to. When it does not (re-created topic, another cluster), the partition goes back to
    /// the manager, which archives or stops; when the leader cannot say, the partition backs
    /// off. Either way nothing is truncated.
    fn same_identity(&mut self, map: &mut PartitionMap, tp: &TopicPartition) -> bool {
        let local = self.replica.identity(tp);
        if local == Identity::default() {
            return true;
        }
        match self.leader.identity(&tp.topic) {
            Ok(leader) => match Identity::mismatch(&local, &leader) {
                None => true,
                Some(why) => {
                    crate::log_error!(
                        "{tp}: {why}: nothing is truncated or appended; the manager archives or stops it"
                    );
                    self.hand_back(map, tp, format!("identity changed: {why}"));
                    false
                }
            },
            Err(e) => {
                crate::log_warn!(
                    "{tp}: cannot confirm the topic's identity with {} before truncating: {e:#}",
                    self.leader.describe()
                );
                self.close_leader();
                delay(map, tp, self.params.backoff);
                false
            }
        }
    }

    /// After the local log changed under a partition: fetch on from its end.
    fn resume_at_log_end(&self, map: &mut PartitionMap, tp: &TopicPartition, fallback: i64) {
        let end = self.replica.log_end_offset(tp).unwrap_or(fallback);
        if let Some(s) = map.get_mut(tp) {
            s.fetch_offset = end;
            s.status = FetchStatus::Fetching;
            s.delayed_until = None;
        }
    }

    /// The leader said our fetch offset diverges from its log at `d`: truncate to the point
    /// where both logs agree (Kafka's `truncateOnFetchResponse`), then fetch on from there.
    fn truncate_on_divergence(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        d: DivergingEpoch,
    ) {
        if d.epoch < 0 || d.end_offset < 0 {
            // Kafka's UNDEFINED epoch or offset, or a hostile answer: nothing to truncate to.
            crate::log_warn!(
                "{tp}: leader reports divergence at epoch {} offset {}, which names no point in the log; not truncating",
                d.epoch,
                d.end_offset
            );
            delay(map, tp, self.params.backoff);
            return;
        }
        let target = match self.replica.end_offset_for_epoch(tp, d.epoch) {
            Some((e, end)) if e == d.epoch => end.min(d.end_offset),
            Some((_, end)) => end,
            None => self.replica.log_start_offset(tp).unwrap_or(0),
        };
        if self
            .replica
            .log_end_offset(tp)
            .is_some_and(|end| target < end)
            && !self.same_identity(map, tp)
        {
            return;
        }
        crate::log_warn!(
            "{tp}: leader reports divergence at epoch {} offset {}; truncating to {target}",
            d.epoch,
            d.end_offset
        );
        let reason = format!(
            "diverging epoch: the leader's epoch {} ends at offset {}",
            d.epoch, d.end_offset
        );
        if let Err(e) = self.replica.truncate(tp, target, &reason) {
            self.fail(map, tp, &format!("truncation failed: {e:#}"));
            return;
        }
        // On failure too: the log may be partly truncated, and its end is the truth.
        let delayed = map.get(tp).and_then(|s| s.delayed_until);
        self.resume_at_log_end(map, tp, target);
        if let (Some(s), Some(t)) = (map.get_mut(tp), delayed) {
            s.delayed_until = Some(t);
        }
    }

    /// Kafka's follower rule for OffsetOutOfRange, as an archive applies it: if the leader's
    /// end is below our end, truncate to it (what is removed is kept aside by the replica);
    /// if the leader's start is above our end, keep every local batch, record the offsets in
    /// between as lost upstream and continue at the leader's start (Kafka would delete the
    /// local log here); otherwise fetch again from our end.
    /// Returns false when the leader could not be reached (the caller stops asking it this
    /// round).
    fn handle_offset_out_of_range(&mut self, map: &mut PartitionMap, tp: &TopicPartition) -> bool {
        let epoch = map.get(tp).map_or(-1, |s| s.current_leader_epoch);
        let Some(local_end) = self.replica.log_end_offset(tp) else {
            return true;
        };
        // Set when a request to the leader itself failed (not an error code, not a local
        // failure): only then are the round's other partitions spared the wait.
        let mut unreachable = false;
        let mut identity_changed = false;
        let result: Result<Option<(i64, &'static str)>> = (|| {
            let latest = self.leader.fetch_latest_offset(tp, epoch);
            unreachable = latest.is_err();
            let leader_end = match latest? {
                Ok(o) if o < 0 => anyhow::bail!("ListOffsets latest answered offset {o}"),
                Ok(o) => o,
                Err(code) => {
                    if code.action() == ErrorAction::RefreshMetadata {
                        return Ok(None);
                    }
                    anyhow::bail!("ListOffsets latest answered {code}");
                }
            };
            if leader_end < local_end {
                if !self.same_identity(map, tp) {
                    identity_changed = true;
                    return Ok(None);
                }
                let reason = format!(
                    "OffsetOutOfRange: the leader's log ends at {leader_end}, below the local end {local_end}"
                );
                self.replica
                    .truncate(tp, leader_end, &reason)
                    .map_err(|e| e.context(LocalFailure("truncation")))?;
                return Ok(Some((leader_end, "truncated to the leader's end")));
            }
            let earliest = self.leader.fetch_earliest_offset(tp, epoch);
            unreachable = earliest.is_err();
            let leader_start = match earliest? {
                Ok(o) if o < 0 => anyhow::bail!("ListOffsets earliest answered offset {o}"),
                Ok(o) => o,
                Err(code) => anyhow::bail!("ListOffsets earliest answered {code}"),
            };
            if leader_start > local_end {
                if !self.same_identity(map, tp) {
                    identity_changed = true;
                    return Ok(None);
                }
                self.replica
                    .skip_to(tp, leader_start)
                    .map_err(|e| e.context(LocalFailure("skipping past offsets lost upstream")))?;
                return Ok(Some((
                    leader_start,
                    "the leader's log now starts above the local end; local data kept",
                )));
            }
            Ok(Some((local_end, "offset is in range again")))
        })();
        match result {
            Ok(Some((offset, what))) => {
                crate::log_warn!(
                    "{tp}: OFFSET_OUT_OF_RANGE at {local_end}: {what}; fetching from {offset}"
                );
                self.resume_at_log_end(map, tp, offset);
                if map.get(tp).is_some_and(|s| s.fetch_offset == local_end) {
                    // Nothing changed locally: do not hammer the leader.
                    delay(map, tp, self.params.backoff);
                }
                true
            }
            Ok(None) if identity_changed => true,
            Ok(None) => {
                self.hand_back(
                    map,
                    tp,
                    "leader moved while resolving OFFSET_OUT_OF_RANGE".into(),
                );
                true
            }
            Err(e) if e.downcast_ref::<LocalFailure>().is_some() => {
                self.fail(map, tp, &format!("{e:#}"));
                true
            }
            Err(e) => {
                crate::log_warn!("{tp}: OFFSET_OUT_OF_RANGE at {local_end} unresolved: {e:#}");
                self.close_leader();
                self.resume_at_log_end(map, tp, local_end);
                delay(map, tp, self.params.backoff);
                !unreachable
            }
        }
    }

    /// Partitions in the `Truncating` state: with Fetch v12+ the leader reports divergence in
    /// fetch responses, so fetching starts at once; otherwise OffsetForLeaderEpoch finds the
    /// common point first (where the leader offers it). Runs under the partition-map lock.
    fn maybe_truncate(&mut self) {
        let shared = self.shared.clone();
        let mut map = shared.lock();
        let truncating = map.truncating_due(Instant::now());
        if truncating.is_empty() {
            return;
        }
        for (tp, _) in &truncating {
            crate::live::live().set_state(tp, crate::live::State::Truncating, None);
        }
        let diverging = match self.leader.supports_diverging_epoch() {
            Ok(d) => d,
            Err(e) => {
                let what = format!("reaching {}", self.leader.describe());
                let wait = self.failures.failed(&what, &e, self.shared.is_running());
                self.close_leader();
                for (tp, _) in &truncating {
                    delay(&mut map, tp, wait);
                }
                return;
            }
        };
        for (tp, current_epoch) in truncating.clone() {
            let end = self.replica.log_end_offset(&tp).unwrap_or(0);
            let latest = self.replica.latest_epoch(&tp);
            let (Some(latest), false) = (latest, diverging) else {
                self.resume_at_log_end(&mut map, &tp, end);
                continue;
            };
            match self
                .leader
                .fetch_epoch_end_offset(&tp, current_epoch, latest)
            {
                Ok(None) => self.resume_at_log_end(&mut map, &tp, end),
                Ok(Some((code, _, _))) if !code.is_ok() => {
                    if code.action() == ErrorAction::RefreshMetadata {
                        self.hand_back(
                            &mut map,
                            &tp,
                            format!("OffsetForLeaderEpoch answered {code}"),
                        );
                    } else {
                        delay(&mut map, &tp, self.params.backoff);
                    }
                }
                Ok(Some((_, leader_epoch, leader_end))) => {
                    let target = if leader_epoch < 0 || leader_end < 0 {
                        end
                    } else {
                        match self.replica.end_offset_for_epoch(&tp, leader_epoch) {
                            Some((e, local_end)) if e == leader_epoch => local_end.min(leader_end),
                            Some((_, local_end)) => local_end,
                            None => self.replica.log_start_offset(&tp).unwrap_or(0),
                        }
                    };
                    if target < end {
                        if !self.same_identity(&mut map, &tp) {
                            continue;
                        }
                        crate::log_warn!(
                            "{tp}: leader's epoch {leader_epoch} ends at {leader_end}; truncating {end} → {target}"
                        );
                    }
                    let reason = format!(
                        "diverging epoch: the leader's epoch {leader_epoch} ends at offset {leader_end}"
                    );
                    match self.replica.truncate(&tp, target, &reason) {
                        Ok(()) => self.resume_at_log_end(&mut map, &tp, target),
                        Err(e) => self.fail(&mut map, &tp, &format!("truncation failed: {e:#}")),
                    }
                }
                Err(e) => {
                    let wait = if is_transport(&e) {
                        let what = format!("OffsetForLeaderEpoch to {}", self.leader.describe());
                        self.failures.failed(&what, &e, self.shared.is_running())
                    } else {
                        crate::log_warn!("{tp}: OffsetForLeaderEpoch failed: {e:#}");
                        self.params.backoff
                    };
                    self.close_leader();
                    delay(&mut map, &tp, wait);
                    if is_transport(&e) {
                        // The leader is unreachable: the rest back off instead of each waiting.
                        for (rest, _) in &truncating {
                            if map
                                .get(rest)
                                .is_some_and(|s| s.status == FetchStatus::Truncating)
                            {
                                delay(&mut map, rest, wait);
                            }
                        }
                        break;
                    }
                }
            }
        }
        drop(map);
        self.replica.after_truncations();
    }
}

#[cfg(test)]
mod tests {
    //! The loop against a scripted leader and an in-memory replica: no sockets.
    use super::*;
    use crate::protocol::error::ErrorCode;
    use crate::protocol::fetch::{FetchPartitionResponse, FetchResponse};
    use crate::record::records::{NewRecord, build_v2_batch};
    use std::collections::VecDeque;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};

    /// A leader that serves `log` (whole batches) and can be told to fail.
    struct MockLeader {
        log: Vec<(i64, i64, Vec<u8>)>,
        start: i64,
        hw: i64,
        buf: Vec<u8>,
        fail_next: usize,
        errors: VecDeque<ErrorCode>,
        corrupt_next: usize,
        /// Every request sent, with when.
        requests: Arc<Mutex<Vec<(Instant, FetchRequest)>>>,
        sent: VecDeque<FetchRequest>,
        identity: Identity,
        /// Reported instead of `hw`, without OFFSET_OUT_OF_RANGE (as Tansu answers a fetch
        /// past its end).
        reported_hw: Option<i64>,
        /// The next receive fails as a connection to another cluster does.
        wrong_cluster: bool,
        /// The thread each response was received on.
        receivers: Arc<Mutex<Vec<std::thread::ThreadId>>>,
        /// Non-zero: the session id a full fetch opens; the session then remembers the
        /// partition last named, and an answer with nothing new lists no partition.
        session_id: i32,
        session_part: Option<(String, FetchPartition)>,
    }

    impl MockLeader {
        fn new(batches: usize) -> Self {
            Self::with_values(batches, 20)
        }

        /// `batches` batches of 5 records with values of `value_len` bytes.
        fn with_values(batches: usize, value_len: usize) -> Self {
            let mut log = Vec::new();
            for i in 0..batches as i64 {
                let v = vec![b'x'; value_len];
                let recs: Vec<NewRecord<'_>> = (0..5)
                    .map(|j| NewRecord {
                        key: None,
                        value: Some(&v),
                        timestamp: i * 5 + j,
                    })
                    .collect();
                log.push((i * 5, i * 5 + 4, build_v2_batch(i * 5, 0, &recs)));
            }
            let hw = batches as i64 * 5;
            MockLeader {
                log,
                start: 0,
                hw,
                buf: Vec::new(),
                fail_next: 0,
                errors: VecDeque::new(),
                corrupt_next: 0,
                requests: Arc::default(),
                sent: VecDeque::new(),
                identity: Identity::default(),
                reported_hw: None,
                wrong_cluster: false,
                receivers: Arc::default(),
                session_id: 0,
                session_part: None,
            }
        }
    }

    impl LeaderEndPoint for MockLeader {
        fn describe(&self) -> String {
            "mock leader".into()
        }
        fn send_fetch(&mut self, req: &FetchRequest) -> Result<()> {
            self.requests
                .lock()
                .unwrap()
                .push((Instant::now(), req.clone()));
            self.sent.push_back(req.clone());
            Ok(())
        }
        fn recycle(&mut self, _frame: FetchFrame) {}
        fn receive_fetch(&mut self) -> Result<FetchFrame> {
            let req = self.sent.pop_front().expect("a fetch in flight");
            self.receivers
                .lock()
                .unwrap()
                .push(std::thread::current().id());
            if std::mem::take(&mut self.wrong_cluster) {
                return Err(anyhow::Error::new(IdentityMismatch(
                    "broker 1 reports cluster id b".into(),
                ))
                .context("broker 1 (mock)"));
            }
            if self.fail_next > 0 {
                self.fail_next -= 1;
                anyhow::bail!("connection reset");
            }
            let error = self.errors.pop_front().unwrap_or(ErrorCode::NONE);
            self.buf.clear();
            let named = req
                .topics
                .first()
                .and_then(|(t, ps)| Some((t.clone(), ps.first()?.clone())));
            if named.is_some() {
                self.session_part = named.clone();
            }
            let Some((topic, p)) = (if self.session_id != 0 {
                self.session_part.clone()
            } else {
                named
            }) else {
                anyhow::bail!("a fetch of nothing");
            };
            let topic = &topic;
            let p = &p;
            let oor = self.reported_hw.is_none()
                && (p.fetch_offset < self.start || p.fetch_offset > self.hw);
            if error.is_ok() && !oor {
                // two batches at most per response
                for (_, last, b) in self
                    .log
                    .iter()
                    .filter(|(_, l, _)| *l >= p.fetch_offset)
                    .take(2)
                {
                    let _ = last;
                    self.buf.extend_from_slice(b);
                }
                if self.corrupt_next > 0 && !self.buf.is_empty() {
                    self.corrupt_next -= 1;
                    let n = self.buf.len() - 1;
                    self.buf[n] ^= 1;
                }
            }
            let error = if oor {
                ErrorCode::OFFSET_OUT_OF_RANGE
            } else {
                error
            };
            let nothing_new = self.session_id != 0
                && req.session_epoch > 0
                && error.is_ok()
                && self.buf.is_empty();
            let resp = FetchResponse {
                error: ErrorCode::NONE,
                topics: if nothing_new {
                    Vec::new()
                } else {
                    vec![(
                        topic.clone(),
                        vec![FetchPartitionResponse {
                            partition: p.partition,
                            error,
                            high_watermark: self.reported_hw.unwrap_or(self.hw),
                            last_stable_offset: self.reported_hw.unwrap_or(self.hw),
                            log_start_offset: self.start,
                            aborted_transactions: None,
                            diverging_epoch: None,
                            current_leader: None,
                            records: &self.buf,
                        }],
                    )]
                },
                session_id: self.session_id,
            };
            // Through the real codec, as a broker would send it.
            let mut w = crate::protocol::codec::Writer::new();
            crate::protocol::fetch::encode_response(&mut w, 12, &resp);
            let len = w.buf.len();
            Ok(FetchFrame {
                buf: w.buf,
                body: 0..len,
                version: 12,
                topic_names: BTreeMap::new(),
            })
        }
        fn fetch_earliest_offset(
            &mut self,
            _: &TopicPartition,
            _: i32,
        ) -> Result<std::result::Result<i64, ErrorCode>> {
            Ok(Ok(self.start))
        }
        fn fetch_latest_offset(
            &mut self,
            _: &TopicPartition,
            _: i32,
        ) -> Result<std::result::Result<i64, ErrorCode>> {
            Ok(Ok(self.hw))
        }
        fn fetch_epoch_end_offset(
            &mut self,
            _: &TopicPartition,
            _: i32,
            _: i32,
        ) -> Result<Option<(ErrorCode, i32, i64)>> {
            Ok(None)
        }
        fn supports_diverging_epoch(&mut self) -> Result<bool> {
            Ok(true)
        }
        fn identity(&mut self, _: &str) -> Result<Identity> {
            Ok(self.identity.clone())
        }
        fn close(&mut self) {}
    }

    /// A replica that keeps appended bytes in memory and validates like the real one.
    #[derive(Default)]
    struct MemReplica {
        /// The next append fails after writing its first batch (a roll that failed midway).
        fail_midway: bool,
        bytes: Vec<u8>,
        start: i64,
        end: i64,
        truncations: Vec<(&'static str, i64)>,
        identity: Identity,
        /// Partitions marked failed, and why.
        failed: Vec<(TopicPartition, String)>,
        /// How many times a request looked up a partition's log start.
        looked_up: std::sync::atomic::AtomicUsize,
        /// What `position_moves` answers.
        moves: u64,
    }

    impl ReplicaOps for MemReplica {
        type Validated = crate::fetcher::replica_fetcher::ValidatedRecords;
        fn validate(
            &self,
            tp: &TopicPartition,
            fetch_offset: i64,
            data: &FetchPartitionResponse<'_>,
        ) -> Result<Self::Validated, AppendError> {
            let local = crate::fetcher::replica_fetcher::LocalEnd {
                data_end: (!self.bytes.is_empty()).then_some(self.end),
            };
            crate::fetcher::replica_fetcher::validate_fetched(
                tp,
                fetch_offset,
                local,
                data.high_watermark,
                data.records,
            )
        }
        fn append(
            &mut self,
            _: &TopicPartition,
            _: i64,
            v: Self::Validated,
            data: &FetchPartitionResponse<'_>,
        ) -> Result<i64, AppendError> {
            if self.fail_midway {
                self.fail_midway = false;
                let first = v.headers[0];
                let start = v.range.start;
                self.bytes
                    .extend_from_slice(&data.records[start..start + first.size_in_bytes]);
                self.end = first.last_offset + 1;
                return Err(AppendError::Storage(anyhow::anyhow!(
                    "roll failed after the first batch"
                )));
            }
            self.bytes.extend_from_slice(&data.records[v.range.clone()]);
            if let Some(h) = v.headers.last() {
                self.end = h.last_offset + 1;
            }
            Ok(self.end)
        }
        fn log_start_offset(&self, _: &TopicPartition) -> Option<i64> {
            self.looked_up.fetch_add(1, Ordering::Relaxed);
            Some(self.start)
        }
        fn position_moves(&self) -> u64 {
            self.moves
        }
        fn mark_failed(&mut self, tp: &TopicPartition, reason: &str) {
            self.failed.push((tp.clone(), reason.to_string()));
        }
        fn log_end_offset(&self, _: &TopicPartition) -> Option<i64> {
            Some(self.end)
        }
        fn latest_epoch(&self, _: &TopicPartition) -> Option<i32> {
            None
        }
        fn end_offset_for_epoch(&self, _: &TopicPartition, _: i32) -> Option<(i32, i64)> {
            None
        }
        fn truncate(&mut self, _: &TopicPartition, offset: i64, _: &str) -> Result<()> {
            self.truncations.push(("truncate", offset));
            self.end = self.end.min(offset);
            Ok(())
        }
        fn identity(&self, _: &TopicPartition) -> Identity {
            self.identity.clone()
        }
        fn skip_to(&mut self, _: &TopicPartition, offset: i64) -> Result<()> {
            self.truncations.push(("skip", offset));
            self.end = self.end.max(offset);
            Ok(())
        }
    }

    fn fetcher(
        leader: MockLeader,
        replica: MemReplica,
        backoff_ms: u64,
    ) -> (
        AbstractFetcher<MockLeader, MemReplica>,
        Arc<FetcherShared>,
        std::sync::mpsc::Receiver<FetcherEvent>,
    ) {
        let shared = Arc::new(FetcherShared::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let params = FetchParams {
            max_wait_ms: 10,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
            isolation_level: 0,
            backoff: Duration::from_millis(backoff_ms),
            backoff_max: Duration::from_millis(backoff_ms * 10),
        };
        (
            AbstractFetcher::new(
                "test-fetcher".into(),
                shared.clone(),
                leader,
                replica,
                params,
                tx,
            ),
            shared,
            rx,
        )
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn leader_bytes(l: &MockLeader) -> Vec<u8> {
        l.log.iter().flat_map(|(_, _, b)| b.clone()).collect()
    }

    #[test]
    fn rounds_advance_to_the_last_offset_plus_one_and_copy_bytes_verbatim() {
        let leader = MockLeader::new(10);
        let expect = leader_bytes(&leader);
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        for round in 1..=5 {
            f.do_work();
            assert_eq!(
                shared.lock()[&tp()].fetch_offset,
                round * 10,
                "two batches of 5 per round"
            );
        }
        assert_eq!(f.replica().bytes, expect);
    }

    #[test]
    fn a_corrupt_batch_is_not_written_and_the_partition_backs_off() {
        let mut leader = MockLeader::new(4);
        leader.corrupt_next = 1;
        let expect = leader_bytes(&leader);
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 30);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        f.do_work();
        {
            let map = shared.lock();
            assert_eq!(map[&tp()].fetch_offset, 0);
            assert!(
                map[&tp()].delayed_until.is_some(),
                "backoff after a CRC failure"
            );
        }
        assert!(
            f.replica().bytes.is_empty(),
            "nothing written from a corrupt response"
        );
        let requests = f.leader.requests.clone();
        for _ in 0..6 {
            f.do_work();
        }
        assert_eq!(f.replica().bytes, expect);
        // The delayed partition was not fetched again at offset 0 before its backoff ended
        // (a request pipelined before the failure was answered and its data ignored).
        let at_zero: Vec<Instant> = requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| r.topics[0].1[0].fetch_offset == 0)
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(at_zero.len(), 2, "the first fetch and one retry");
        assert!(
            at_zero[1] - at_zero[0] >= Duration::from_millis(25),
            "retry came before the backoff"
        );
    }

    #[test]
    fn a_healthy_round_pipelines_the_next_request_before_writing() {
        let leader = MockLeader::new(10);
        let requests = leader.requests.clone();
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        f.do_work();
        // The next request (at offset 10, after two batches of 5) left before this round ended.
        let offsets: Vec<i64> = requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.topics[0].1[0].fetch_offset)
            .collect();
        assert_eq!(offsets, vec![0, 10]);
        assert!(f.in_flight.is_some());
        for _ in 0..4 {
            f.do_work();
        }
        assert_eq!(shared.lock()[&tp()].fetch_offset, 50);
        // Caught up: the last round brought nothing, so nothing more was pipelined.
        f.do_work();
        assert!(f.in_flight.is_none());
    }

    #[test]
    fn partitions_a_session_leaves_out_are_noted_as_fetched_without_a_walk_every_round() {
        let mut leader = MockLeader::new(2);
        leader.session_id = 9;
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
        // A topic of its own: the live figures are the process's.
        let tp = TopicPartition::new("noted-in-session", 0);
        crate::live::live().leader_high_watermark(&tp, 0);
        let last_fetch = || {
            crate::live::live()
                .partitions()
                .get(&tp)
                .and_then(|p| p.last_fetch_ms)
        };
        shared.add_partitions([(
            tp.clone(),
            PartitionFetchState::new(0, 0, FetchStatus::Fetching),
        )]);
        for _ in 0..4 {
            f.do_work();
        }
        assert_eq!(shared.lock()[&tp].fetch_offset, 10, "caught up");
        let first = last_fetch().expect("noted at the first incremental response");
        // Within the interval, idle rounds leave it alone; once it is over, the next does.
        std::thread::sleep(Duration::from_millis(5));
        f.do_work();
        assert_eq!(last_fetch(), Some(first));
        f.session_fetched_at = Some(Instant::now() - SESSION_FETCHED_EVERY);
        f.do_work();
        assert!(
            last_fetch().is_some_and(|t| t > first),
            "{:?}",
            last_fetch()
        );
    }

    #[test]
    fn pipelined_session_requests_advance_the_epoch_and_name_the_ahead_offsets() {
        let mut leader = MockLeader::new(10);
        leader.session_id = 9;
        let expected = leader_bytes(&leader);
        let requests = leader.requests.clone();
        let (mut f, shared, rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        for _ in 0..8 {
            f.do_work();
        }
        assert_eq!(shared.lock()[&tp()].fetch_offset, 50);
        assert_eq!(f.replica().bytes, expected, "every batch, once, in order");
        let sent: Vec<(i32, i32, Option<i64>)> = requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| {
                let named = r.topics.first().map(|(_, ps)| ps[0].fetch_offset);
                (r.session_id, r.session_epoch, named)
            })
            .collect();
        // Full at epoch 0; then each request, pipelined before the previous response was
        // written, names the offset that response leads to; caught up, the requests name
        // nothing and the absent partition is not handed back.
        assert_eq!(
            &sent[..6],
            &[
                (0, 0, Some(0)),
                (9, 1, Some(10)),
                (9, 2, Some(20)),
                (9, 3, Some(30)),
                (9, 4, Some(40)),
                (9, 5, Some(50)),
            ]
        );
        // The pipelined request took the last batch's epoch (0); this mock replica reports
        // no epoch, so the next request names the partition once more, with -1.
        assert_eq!(sent[6], (9, 6, Some(50)));
        assert!(sent.len() > 7);
        assert!(
            sent[7..]
                .iter()
                .enumerate()
                .all(|(i, s)| *s == (9, 7 + i as i32, None)),
            "{sent:?}"
        );
        assert!(rx.try_recv().is_err(), "nothing handed back");
        assert!(shared.lock().contains_key(&tp()));
    }

    #[test]
    fn a_large_response_is_appended_while_the_next_one_is_received_on_another_thread() {
        // Batches of 5 × 120 KB: two a response, 1.2 MB, past the overlap threshold.
        let leader = MockLeader::with_values(8, 120_000);
        let expect = leader_bytes(&leader);
        let receivers = leader.receivers.clone();
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        for round in 1..=4 {
            f.do_work();
            assert_eq!(shared.lock()[&tp()].fetch_offset, round * 10);
        }
        assert_eq!(f.replica().bytes, expect, "byte for byte, in order");
        let me = std::thread::current().id();
        let on = receivers.lock().unwrap().clone();
        // The first response is received by the loop itself; each one pipelined behind a
        // large response (the fifth, at offset 40, behind the last), on a second thread
        // while that one was appended.
        assert_eq!(on.len(), 5, "{on:?}");
        assert_eq!(on[0], me);
        assert!(on[1..].iter().all(|t| *t != me), "{on:?}");
    }

    #[test]
    fn a_failed_receive_behind_an_append_backs_off_and_resumes_where_the_log_ends() {
        let mut leader = MockLeader::with_values(8, 120_000);
        let expect = leader_bytes(&leader);
        // The first response arrives; the one received behind its append fails.
        leader.fail_next = 0;
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        f.do_work();
        assert_eq!(shared.lock()[&tp()].fetch_offset, 10);
        assert!(f.prefetched.is_some(), "received behind the append");
        f.leader.fail_next = 1;
        // The prefetched response was already received: the failure lands on the next one.
        f.do_work();
        f.do_work();
        {
            let map = shared.lock();
            assert!(map[&tp()].delayed_until.is_some(), "backing off");
        }
        assert!(f.in_flight.is_none() && f.prefetched.is_none());
        for _ in 0..20 {
            f.do_work();
            if shared.lock()[&tp()].fetch_offset == 40 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(f.replica().bytes, expect);
    }

    #[test]
    fn a_storage_error_midway_fails_the_partition_which_resumes_at_the_local_log_end() {
        let leader = MockLeader::new(6);
        let expect = leader_bytes(&leader);
        let replica = MemReplica {
            fail_midway: true,
            ..Default::default()
        };
        let (mut f, shared, _rx) = fetcher(leader, replica, 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        f.do_work();
        let failed = &f.replica().failed;
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].0, tp());
        assert!(failed[0].1.contains("roll failed"), "{}", failed[0].1);
        assert!(
            !shared.lock().contains_key(&tp()),
            "a failed partition leaves the fetcher"
        );
        // Once its storage is sound the manager adds it back at the local log end (what was
        // written before the failure stays).
        let end = f.replica().log_end_offset(&tp()).unwrap();
        assert_eq!(end, 5, "the first batch was written before the roll failed");
        shared.add_partitions([(
            tp(),
            PartitionFetchState::new(end, 0, FetchStatus::Fetching),
        )]);
        for _ in 0..6 {
            f.do_work();
        }
        assert_eq!(f.replica().bytes, expect, "no gap, no duplicate");
    }

    /// Named partitions and forgotten ones of a request, as "topic-partition" strings.
    fn named_and_forgotten(req: &FetchRequest) -> (Vec<i32>, Vec<i32>) {
        let named = partitions_in(&req.topics, |p| p.partition)
            .map(|tp| tp.partition)
            .collect();
        let forgotten = req
            .forgotten
            .iter()
            .flat_map(|(_, ps)| ps.clone())
            .collect();
        (named, forgotten)
    }

    #[test]
    fn within_a_session_a_request_looks_only_at_partitions_that_changed() {
        let (mut f, shared, _rx) = fetcher(MockLeader::new(1), MemReplica::default(), 10);
        let n = 500;
        shared.add_partitions((0..n).map(|p| {
            (
                TopicPartition::new("t", p),
                PartitionFetchState::new(0, 0, FetchStatus::Fetching),
            )
        }));
        let looked = |f: &AbstractFetcher<MockLeader, MemReplica>| {
            f.replica().looked_up.swap(0, Ordering::Relaxed)
        };
        let none = BTreeMap::new();
        let full = f.request_for(&mut shared.lock(), &none).unwrap();
        assert!(is_full(&full));
        assert_eq!(named_and_forgotten(&full).0.len(), n as usize);
        assert_eq!(looked(&f), n as usize);
        f.session
            .handle_response(ErrorCode::NONE, 77, Instant::now());

        // Nothing changed: an incremental request naming nothing, and no partition looked at.
        for _ in 0..3 {
            let idle = f.request_for(&mut shared.lock(), &none).unwrap();
            assert!(!is_full(&idle));
            assert_eq!(named_and_forgotten(&idle), (vec![], vec![]));
            assert_eq!(looked(&f), 0, "an idle round looks at no partition");
        }

        // One offset moves, one partition leaves: only those two are looked at or sent.
        shared
            .lock()
            .get_mut(&TopicPartition::new("t", 5))
            .unwrap()
            .fetch_offset = 3;
        shared.remove_partition(&TopicPartition::new("t", 9));
        let req = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![5], vec![9]));
        assert_eq!(looked(&f), 1, "the removed one needs no look-up");

        // A pipelined request names the offsets the response ahead of it will leave.
        let ahead = BTreeMap::from([(TopicPartition::new("t", 6), (40, None))]);
        let req = f.request_for(&mut shared.lock(), &ahead).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![6], vec![]));
        assert_eq!(req.topics[0].1[0].fetch_offset, 40);
        // Once appended the map agrees with the session: nothing to name.
        shared
            .lock()
            .get_mut(&TopicPartition::new("t", 6))
            .unwrap()
            .fetch_offset = 40;
        let req = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![], vec![]));

        // A backoff forgets the partition; once it ends, the partition is named again.
        delay(
            &mut shared.lock(),
            &TopicPartition::new("t", 7),
            Duration::from_millis(30),
        );
        let req = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![], vec![7]));
        let req = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![], vec![]));
        std::thread::sleep(Duration::from_millis(40));
        let req = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![7], vec![]));
        looked(&f);

        // A log start moved behind the fetcher's back (retention): every partition is
        // looked at once, and those whose parameters did not change are still not sent.
        f.replica.moves += 1;
        let req = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(named_and_forgotten(&req), (vec![], vec![]));
        assert_eq!(looked(&f), n as usize - 1);
        let _ = f.request_for(&mut shared.lock(), &none).unwrap();
        assert_eq!(looked(&f), 0);
    }

    #[test]
    fn partitions_that_brought_data_most_recently_are_asked_last() {
        let (mut f, shared, _rx) = fetcher(MockLeader::new(1), MemReplica::default(), 10);
        let mut a = PartitionFetchState::new(0, 0, FetchStatus::Fetching);
        a.last_data_round = 7;
        let b = PartitionFetchState::new(0, 0, FetchStatus::Fetching);
        let mut c = PartitionFetchState::new(0, 0, FetchStatus::Fetching);
        c.last_data_round = 3;
        shared.add_partitions([
            (TopicPartition::new("t", 0), a),
            (TopicPartition::new("t", 1), b),
            (TopicPartition::new("u", 0), c),
        ]);
        let req = f.request_for(&mut shared.lock(), &BTreeMap::new()).unwrap();
        let order: Vec<(String, Vec<i32>)> = req
            .topics
            .iter()
            .map(|(t, ps)| (t.clone(), ps.iter().map(|p| p.partition).collect()))
            .collect();
        assert_eq!(
            order,
            vec![("t".to_string(), vec![1, 0]), ("u".to_string(), vec![0])]
        );
    }

    #[test]
    fn a_failed_fetch_delays_every_partition_in_it() {
        let mut leader = MockLeader::new(2);
        leader.fail_next = 1;
        let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 50);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        f.do_work();
        assert!(shared.lock()[&tp()].delayed_until.is_some());
        assert!(
            f.build_fetch_request().is_none(),
            "nothing ready during backoff"
        );
        std::thread::sleep(Duration::from_millis(60));
        f.do_work();
        assert_eq!(shared.lock()[&tp()].fetch_offset, 10);
    }

    #[test]
    fn not_leader_hands_the_partition_back_to_the_manager() {
        let mut leader = MockLeader::new(2);
        leader.errors.push_back(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        let (mut f, shared, rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        f.do_work();
        assert_eq!(shared.partition_count(), 0);
        match rx.try_recv().unwrap() {
            FetcherEvent::NeedsLeader { tp: t, reason, .. } => {
                assert_eq!(t, tp());
                assert!(reason.contains("NOT_LEADER_OR_FOLLOWER"), "{reason}");
            }
        }
    }

    #[test]
    fn offset_out_of_range_below_the_leader_start_keeps_local_data_and_skips_to_it() {
        let mut leader = MockLeader::new(6);
        leader.start = 15;
        leader.log.retain(|(_, last, _)| *last >= 15);
        let (mut f, shared, _rx) = fetcher(
            leader,
            MemReplica {
                start: 0,
                end: 5,
                ..Default::default()
            },
            10,
        );
        shared.add_partitions([(tp(), PartitionFetchState::new(5, 0, FetchStatus::Fetching))]);
        f.replica.bytes = b"held".to_vec();
        f.do_work();
        assert_eq!(f.replica().truncations, vec![("skip", 15)]);
        assert_eq!(f.replica().bytes, b"held", "nothing local is deleted");
        assert_eq!(shared.lock()[&tp()].fetch_offset, 15);
        f.do_work();
        assert_eq!(shared.lock()[&tp()].fetch_offset, 25);
    }

    #[test]
    fn offset_out_of_range_above_the_leader_end_truncates_to_it() {
        let leader = MockLeader::new(2); // hw 10
        let (mut f, shared, _rx) = fetcher(
            leader,
            MemReplica {
                start: 0,
                end: 14,
                ..Default::default()
            },
            10,
        );
        shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
        f.do_work();
        assert_eq!(f.replica().truncations, vec![("truncate", 10)]);
        assert_eq!(shared.lock()[&tp()].fetch_offset, 10);
    }

    #[test]
    fn a_leader_with_another_topic_id_never_truncates_the_log() {
        let mut leader = MockLeader::new(2); // hw 10
        leader.identity.topic_id = Some(crate::protocol::uuid::Uuid([2; 16]));
        let (mut f, shared, rx) = fetcher(
            leader,
            MemReplica {
                start: 0,
                end: 14,
                identity: Identity {
                    cluster_id: None,
                    topic_id: Some(crate::protocol::uuid::Uuid([1; 16])),
                },
                ..Default::default()
            },
            10,
        );
        shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
        f.do_work();
        assert!(f.replica().truncations.is_empty(), "nothing truncated");
        assert_eq!(f.replica().end, 14);
        assert_eq!(shared.partition_count(), 0, "handed back to the manager");
        match rx.try_recv().unwrap() {
            FetcherEvent::NeedsLeader { reason, .. } => {
                assert!(reason.contains("topic id"), "{reason}")
            }
        }
    }

    #[test]
    fn a_high_watermark_below_the_log_end_makes_the_fetcher_ask_who_the_leader_is() {
        // A re-created topic whose leader answers a fetch past its end with no error.
        let mut leader = MockLeader::new(2);
        leader.log.clear();
        leader.reported_hw = Some(3);
        leader.identity.topic_id = Some(crate::protocol::uuid::Uuid([2; 16]));
        let local = Identity {
            cluster_id: None,
            topic_id: Some(crate::protocol::uuid::Uuid([1; 16])),
        };
        let (mut f, shared, rx) = fetcher(
            leader,
            MemReplica {
                end: 14,
                identity: local.clone(),
                ..Default::default()
            },
            10,
        );
        shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
        f.do_work();
        assert_eq!(shared.partition_count(), 0, "handed back for the archive");
        assert!(matches!(
            rx.try_recv(),
            Ok(FetcherEvent::NeedsLeader { .. })
        ));
        // The same topic with a lagging HW only backs off.
        f.leader.identity.topic_id = local.topic_id;
        shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
        f.do_work();
        let map = shared.lock();
        assert!(map[&tp()].delayed_until.is_some());
        assert_eq!(map[&tp()].fetch_offset, 14);
    }

    #[test]
    fn a_connection_to_another_cluster_hands_every_partition_back_at_once() {
        let mut leader = MockLeader::new(2);
        leader.wrong_cluster = true;
        let (mut f, shared, rx) = fetcher(leader, MemReplica::default(), 10);
        shared.add_partitions([
            (
                TopicPartition::new("t", 0),
                PartitionFetchState::new(0, 0, FetchStatus::Fetching),
            ),
            (
                TopicPartition::new("t", 1),
                PartitionFetchState::new(0, 0, FetchStatus::Fetching),
            ),
        ]);
        f.do_work();
        assert_eq!(shared.partition_count(), 0);
        let reasons: Vec<String> = rx
            .try_iter()
            .map(|FetcherEvent::NeedsLeader { reason, .. }| reason)
            .collect();
        assert_eq!(reasons.len(), 2);
        assert!(
            reasons.iter().all(|r| r.contains("cluster id b")),
            "{reasons:?}"
        );
        assert!(f.replica().bytes.is_empty());
    }

    #[test]
    fn an_idle_fetcher_sleeps_until_a_partition_is_added() {
        let (mut f, shared, _rx) = fetcher(MockLeader::new(2), MemReplica::default(), 10);
        let s2 = shared.clone();
        let adder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            s2.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
        });
        let started = Instant::now();
        assert!(
            f.build_fetch_request().is_none(),
            "first call waits, then returns"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(90),
            "it slept until woken"
        );
        adder.join().unwrap();
        assert!(f.build_fetch_request().is_some());
    }
}
