//! Incremental fetch sessions (KIP-227), the listener's side: Kafka's `FetchSessionCache`,
//! `FetchSession` and `CachedPartition`, shared by every connection.
//!
//! # What a request is
//! | session id | epoch | meaning                                                        |
//! |------------|-------|----------------------------------------------------------------|
//! | 0          | -1    | sessionless full fetch (every Fetch below v7 is one)           |
//! | any        | -1    | closes that session, then a sessionless full fetch             |
//! | any        | 0     | closes that session, then a full fetch that opens a new one     |
//! | id         | n ≥ 1 | incremental: `id`'s partitions, updated by the ones named       |
//!
//! An incremental fetch of an unknown id is FETCH_SESSION_ID_NOT_FOUND, of a known id at
//! another epoch INVALID_FETCH_SESSION_EPOCH, of a session opened at v13+ (topics by id)
//! sent below v13 or the other way round FETCH_SESSION_TOPIC_ID_ERROR; the client answers
//! each with a full fetch. An incremental response carries only the partitions with
//! something new since the session last answered them ([`CachedPartition::must_respond`]).
//!
//! # Epochs advance with responses
//! [`FetchSessionCache::plan`] checks a request and hands back the session's partitions as
//! the request leaves them, touching nothing else; the handler reads the log (and may wait
//! for data); [`FetchSessionCache::commit`] then stores those partitions and what was sent,
//! and advances the epoch — only if the epoch is still the one the request carried. Only
//! `commit` changes a session's partitions, so a session whose epoch did not move since
//! `plan` is the one `plan` read; a second request of the same epoch (a client's duplicate
//! on another connection) that answers later gets INVALID_FETCH_SESSION_EPOCH, as in Kafka.
//!
//! # Eviction (Kafka's `tryEvict`)
//! With `max_fetch_sessions` sessions held, a new one may take a slot only by evicting: the
//! least recently used session if it is stale (unused for [`EVICTION`]); otherwise the least
//! valuable evictable one, if the new one is worth more — (privileged, partitions) compared
//! in that order, a session from a follower (replica id ≥ 0) being privileged. A session is
//! evictable by a consumer's once it is older than [`EVICTION`]; by a follower's, at once if
//! it is a consumer's. A full fetch that may not take a slot is answered sessionless.
//! Sessions are scanned, not indexed: at most `max_fetch_sessions` (default 1,000), and only
//! when a full fetch finds the cache full.
//!
//! # Memory
//! A hostile client pays for its sessions with slots (bounded by `max_fetch_sessions`) and
//! with cached partitions: a session holds at most what one request of `max_request_bytes`
//! can name, and all sessions together at most [`MAX_CACHED_BYTES`]. A full fetch past
//! either is answered sessionless; an incremental one that would grow its session past
//! either closes the session (FETCH_SESSION_ID_NOT_FOUND: the client falls back to a full
//! fetch, answered in full).
//!
//! # Locking
//! One mutex over the whole cache, taken by `plan`, `open` and `commit` for a walk of one
//! session's partitions at most, never across a read of the log or a wait.

use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{FetchPartition, FetchPartitionResponse, FetchRequest, SESSIONLESS};
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a session must go unused to be stale, and live before a consumer's session may
/// evict it (Kafka's `min.incremental.fetch.session.eviction.ms`, 120 s by default).
pub const EVICTION: Duration = Duration::from_secs(120);

/// The most bytes of cached partitions all sessions together hold (about 700,000
/// partitions of short topic names).
pub const MAX_CACHED_BYTES: usize = 64 << 20;

/// The fewest bytes a partition takes in a Fetch request (v4: partition, fetch offset,
/// partition max bytes): a request of `max_request_bytes` names at most that over this.
const MIN_PARTITION_REQUEST_BYTES: usize = 16;

/// One partition of a session: what the client last asked (Kafka's cached request
/// parameters) and what the session last sent of its positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPartition {
    /// The topic as the session's requests name it: its name, or at v13+ its id's text.
    pub topic: String,
    pub fetch: FetchPartition,
    /// Last sent; -1 before the first answer and after an error, so that the next answer
    /// is sent whatever it says.
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

impl CachedPartition {
    pub fn new(topic: &str, fetch: FetchPartition) -> CachedPartition {
        CachedPartition {
            topic: topic.to_string(),
            fetch,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
        }
    }

    /// Kafka's `maybeUpdateResponseData`: whether an incremental response must carry this
    /// answer (records, an error, a diverging epoch, or a position other than the one last
    /// sent), remembering what it sends.
    pub fn must_respond(&mut self, answer: &FetchPartitionResponse<'_>, has_records: bool) -> bool {
        let mut respond = has_records || answer.diverging_epoch.is_some();
        for (sent, now) in [
            (&mut self.high_watermark, answer.high_watermark),
            (&mut self.last_stable_offset, answer.last_stable_offset),
            (&mut self.log_start_offset, answer.log_start_offset),
        ] {
            if *sent != now {
                *sent = now;
                respond = true;
            }
        }
        if !answer.error.is_ok() {
            self.high_watermark = -1;
            respond = true;
        }
        respond
    }

    fn cost(&self) -> usize {
        std::mem::size_of::<CachedPartition>() + self.topic.len()
    }
}

/// What a Fetch request asks of the cache, from [`FetchSessionCache::plan`].
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// A session error: the response carries it at the top level and no partition.
    Refused(ErrorCode),
    /// A full fetch answered with session id 0.
    Sessionless,
    /// A full fetch that opens a session if the cache admits it ([`FetchSessionCache::open`]).
    Open,
    /// An incremental fetch of session `id` at `epoch`: answer these partitions (the
    /// session's, as the request updates them, with what was last sent of each), then
    /// [`FetchSessionCache::commit`].
    Incremental {
        id: i32,
        epoch: i32,
        partitions: Vec<CachedPartition>,
    },
}

struct Session {
    /// Opened by a follower (replica id ≥ 0).
    privileged: bool,
    /// Opened at v13+: its topics are ids.
    uses_topic_ids: bool,
    created: Instant,
    last_used: Instant,
    /// The epoch the next request must carry.
    epoch: i32,
    /// In answer order: those answered last go last, so that a response cut short by its
    /// byte or file budget starts the next one with the partitions it left out.
    partitions: Vec<CachedPartition>,
    /// Bytes of `partitions`, as counted in [`Inner::bytes`].
    bytes: usize,
}

struct Inner {
    sessions: HashMap<i32, Session>,
    /// Invariant: the sum of the sessions' `bytes`, ≤ MAX_CACHED_BYTES.
    bytes: usize,
    /// Keyed by the OS at start: session ids are not guessable from one another.
    ids: RandomState,
    counter: u64,
}

/// The listener's sessions; see the module documentation.
pub struct FetchSessionCache {
    max_sessions: usize,
    max_session_partitions: usize,
    /// [`MAX_CACHED_BYTES`], but for tests.
    max_cached_bytes: usize,
    inner: Mutex<Inner>,
}

/// KIP-227's next epoch: 1, 2, …, i32::MAX, then 1 again.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

fn bytes_of(partitions: &[CachedPartition]) -> usize {
    partitions.iter().map(CachedPartition::cost).sum()
}

impl FetchSessionCache {
    /// At most `max_sessions` sessions, each of at most what a request of
    /// `max_request_bytes` can name.
    pub fn new(max_sessions: usize, max_request_bytes: i32) -> FetchSessionCache {
        Self::bounded(max_sessions, max_request_bytes, MAX_CACHED_BYTES)
    }

    fn bounded(
        max_sessions: usize,
        max_request_bytes: i32,
        max_cached_bytes: usize,
    ) -> FetchSessionCache {
        FetchSessionCache {
            max_sessions,
            max_cached_bytes,
            max_session_partitions: (max_request_bytes.max(0) as usize
                / MIN_PARTITION_REQUEST_BYTES)
                .max(1),
            inner: Mutex::new(Inner {
                sessions: HashMap::new(),
                bytes: 0,
                ids: RandomState::new(),
                counter: 0,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.inner().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What `req` (decoded at `version`) is: closes the session a full fetch names, checks
    /// an incremental one and gives its partitions as the request leaves them.
    pub fn plan(&self, req: &FetchRequest, version: i16, now: Instant) -> Plan {
        let mut inner = self.inner();
        if req.session_epoch == SESSIONLESS || req.session_epoch == 0 {
            if req.session_id != 0 && inner.remove(req.session_id) {
                crate::log_debug!(
                    "serve: fetch session {} closed by its client",
                    req.session_id
                );
            }
            return if req.session_epoch == 0 {
                Plan::Open
            } else {
                Plan::Sessionless
            };
        }
        let max_partitions = self.max_session_partitions;
        let max_bytes = self.max_cached_bytes;
        let Some(session) = inner.sessions.get_mut(&req.session_id) else {
            return Plan::Refused(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.epoch != req.session_epoch {
            return Plan::Refused(ErrorCode::INVALID_FETCH_SESSION_EPOCH);
        }
        if session.uses_topic_ids != (version >= 13) {
            return Plan::Refused(ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR);
        }
        session.last_used = now;
        let partitions = updated(&session.partitions, req);
        let grows_by = bytes_of(&partitions).saturating_sub(session.bytes);
        let id = req.session_id;
        if partitions.is_empty() {
            // Kafka's rule: a session left with no partition is closed, the fetch answered
            // sessionless (with nothing).
            inner.remove(id);
            crate::log_debug!("serve: fetch session {id} closed: it forgot every partition");
            return Plan::Sessionless;
        }
        if partitions.len() > max_partitions || inner.bytes + grows_by > max_bytes {
            inner.remove(id);
            crate::log_debug!(
                "serve: fetch session {id} closed: {} partitions would pass the cache's bounds",
                partitions.len()
            );
            return Plan::Refused(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        }
        Plan::Incremental {
            id,
            epoch: req.session_epoch,
            partitions,
        }
    }

    /// Opens a session of `partitions` (what a full fetch answered, their last-sent
    /// positions set) if the cache admits it; its id, or 0 (answer sessionless). A
    /// partition named twice is kept once, where first named, as last named.
    pub fn open(
        &self,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: Vec<CachedPartition>,
        now: Instant,
    ) -> i32 {
        let partitions = dedup(partitions);
        if partitions.is_empty() || partitions.len() > self.max_session_partitions {
            return 0;
        }
        let bytes = bytes_of(&partitions);
        let mut inner = self.inner();
        if inner.sessions.len() >= self.max_sessions
            && !inner.try_evict(privileged, partitions.len(), now)
        {
            crate::log_debug!(
                "serve: no fetch session for {} partitions (privileged: {privileged}): {} sessions held, none evictable",
                partitions.len(),
                inner.sessions.len()
            );
            return 0;
        }
        if inner.bytes + bytes > self.max_cached_bytes {
            return 0;
        }
        let id = inner.new_id();
        inner.bytes += bytes;
        inner.sessions.insert(
            id,
            Session {
                privileged,
                uses_topic_ids,
                created: now,
                last_used: now,
                epoch: 1,
                partitions,
                bytes,
            },
        );
        id
    }

    /// Stores the partitions an incremental response answered (as [`Plan::Incremental`]
    /// gave them, after [`CachedPartition::must_respond`]; `sent[i]`: whether partition `i`
    /// is in the response) and advances the epoch. The session error the response must
    /// carry instead if the session went away or another response of its epoch came first.
    pub fn commit(
        &self,
        id: i32,
        epoch: i32,
        partitions: Vec<CachedPartition>,
        sent: &[bool],
        now: Instant,
    ) -> Result<(), ErrorCode> {
        let mut inner = self.inner();
        let bytes = bytes_of(&partitions);
        let Some(session) = inner.sessions.get_mut(&id) else {
            return Err(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        };
        if session.epoch != epoch {
            crate::log_debug!(
                "serve: fetch session {id} answered epoch {epoch} twice; the later answer is refused"
            );
            return Err(ErrorCode::INVALID_FETCH_SESSION_EPOCH);
        }
        let (mut quiet, mut answered): (Vec<_>, Vec<_>) = partitions
            .into_iter()
            .zip(sent.iter().copied().chain(std::iter::repeat(false)))
            .partition(|(_, s)| !s);
        quiet.append(&mut answered);
        session.partitions = quiet.into_iter().map(|(p, _)| p).collect();
        let old = std::mem::replace(&mut session.bytes, bytes);
        session.epoch = next_epoch(epoch);
        session.last_used = now;
        inner.bytes = inner.bytes - old + bytes;
        Ok(())
    }
}

impl Inner {
    fn remove(&mut self, id: i32) -> bool {
        match self.sessions.remove(&id) {
            Some(s) => {
                self.bytes -= s.bytes;
                true
            }
            None => false,
        }
    }

    /// A positive id no open session has (Kafka's range, 1..i32::MAX).
    fn new_id(&mut self) -> i32 {
        loop {
            let mut h = self.ids.build_hasher();
            h.write_u64(self.counter);
            self.counter += 1;
            let id = (h.finish() & 0x7fff_ffff) as i32;
            if id != 0 && id != i32::MAX && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    /// Kafka's `tryEvict`, for a new session of `size` partitions: evicts the least
    /// recently used session if stale, else the least valuable evictable one if the new
    /// one is worth more. Whether one was evicted.
    fn try_evict(&mut self, privileged: bool, size: usize, now: Instant) -> bool {
        let stale = |s: &Session| now.saturating_duration_since(s.last_used) > EVICTION;
        let old = |s: &Session| now.saturating_duration_since(s.created) > EVICTION;
        let lru = self
            .sessions
            .iter()
            .min_by_key(|(id, s)| (s.last_used, **id))
            .map(|(id, s)| (*id, stale(s)));
        let victim = match lru {
            None => return false,
            Some((id, true)) => {
                crate::log_debug!("serve: fetch session {id} evicted: unused for {EVICTION:?}");
                id
            }
            Some(_) => {
                let candidate = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| {
                        if privileged {
                            !s.privileged || old(s)
                        } else {
                            old(s)
                        }
                    })
                    .min_by_key(|(id, s)| (s.privileged, s.partitions.len(), **id));
                match candidate {
                    Some((&id, s)) if (privileged, size) > (s.privileged, s.partitions.len()) => {
                        crate::log_debug!(
                            "serve: fetch session {id} ({} partitions, privileged: {}) evicted for one of {size} (privileged: {privileged})",
                            s.partitions.len(),
                            s.privileged
                        );
                        id
                    }
                    _ => return false,
                }
            }
        };
        self.remove(victim)
    }
}

/// The session's partitions as `req` leaves them: those it names take its parameters
/// (new ones go last, in its order), those it forgets leave.
fn updated(cached: &[CachedPartition], req: &FetchRequest) -> Vec<CachedPartition> {
    let mut named: HashMap<(&str, i32), &FetchPartition> = HashMap::new();
    for (topic, parts) in &req.topics {
        for p in parts {
            named.insert((topic.as_str(), p.partition), p);
        }
    }
    let forgotten: HashSet<(&str, i32)> = req
        .forgotten
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |&p| (t.as_str(), p)))
        .collect();
    let mut out = Vec::with_capacity(cached.len() + named.len());
    for c in cached {
        let key = (c.topic.as_str(), c.fetch.partition);
        let fetch = named.remove(&key);
        if forgotten.contains(&key) {
            continue;
        }
        let mut c = c.clone();
        if let Some(f) = fetch {
            c.fetch = f.clone();
        }
        out.push(c);
    }
    for (topic, parts) in &req.topics {
        for p in parts {
            let key = (topic.as_str(), p.partition);
            if forgotten.contains(&key) {
                continue;
            }
            if let Some(f) = named.remove(&key) {
                out.push(CachedPartition::new(topic, f.clone()));
            }
        }
    }
    out
}

/// Each (topic, partition) once: where it was first named, as it was last named (Kafka's
/// `LinkedHashMap` of a request's partitions).
pub fn dedup(partitions: impl IntoIterator<Item = CachedPartition>) -> Vec<CachedPartition> {
    let mut at: HashMap<(String, i32), usize> = HashMap::new();
    let mut out: Vec<CachedPartition> = Vec::new();
    for p in partitions {
        match at.entry((p.topic.clone(), p.fetch.partition)) {
            std::collections::hash_map::Entry::Occupied(e) => {
                if let Some(first) = out.get_mut(*e.get()) {
                    *first = p;
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn part(p: i32, offset: i64) -> FetchPartition {
        FetchPartition {
            partition: p,
            current_leader_epoch: -1,
            fetch_offset: offset,
            last_fetched_epoch: -1,
            log_start_offset: -1,
            partition_max_bytes: 1 << 20,
        }
    }

    fn parts(n: i32) -> Vec<CachedPartition> {
        (0..n)
            .map(|p| CachedPartition::new("t", part(p, 0)))
            .collect()
    }

    fn request(id: i32, epoch: i32, named: &[(i32, i64)], forgotten: &[i32]) -> FetchRequest {
        FetchRequest {
            replica_id: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
            isolation_level: 0,
            topics: vec![(
                "t".to_string(),
                named.iter().map(|&(p, o)| part(p, o)).collect(),
            )],
            topic_ids: BTreeMap::new(),
            session_id: id,
            session_epoch: epoch,
            forgotten: vec![("t".to_string(), forgotten.to_vec())],
        }
    }

    fn incremental(plan: Plan) -> (i32, i32, Vec<CachedPartition>) {
        match plan {
            Plan::Incremental {
                id,
                epoch,
                partitions,
            } => (id, epoch, partitions),
            other => panic!("not incremental: {other:?}"),
        }
    }

    #[test]
    fn a_session_opens_advances_its_epoch_with_each_answer_and_closes() {
        let cache = FetchSessionCache::new(10, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(cache.plan(&request(0, 0, &[], &[]), 12, t0), Plan::Open);
        assert_eq!(
            cache.plan(&request(0, SESSIONLESS, &[], &[]), 12, t0),
            Plan::Sessionless
        );
        let id = cache.open(false, false, parts(3), t0);
        assert!(id > 0);
        // Epoch 1: partition 1 moves on, 2 is forgotten, 5 joins at the end.
        let (_, epoch, ps) =
            incremental(cache.plan(&request(id, 1, &[(1, 7), (5, 0)], &[2]), 12, t0));
        assert_eq!(epoch, 1);
        let got: Vec<_> = ps
            .iter()
            .map(|p| (p.fetch.partition, p.fetch.fetch_offset))
            .collect();
        assert_eq!(got, [(0, 0), (1, 7), (5, 0)]);
        // Not committed yet: the epoch has not moved, a second plan of epoch 1 still passes,
        // and the first commit wins.
        let (_, _, again) = incremental(cache.plan(&request(id, 1, &[], &[]), 12, t0));
        cache.commit(id, 1, ps, &[false, true, false], t0).unwrap();
        assert_eq!(
            cache.commit(id, 1, again, &[], t0),
            Err(ErrorCode::INVALID_FETCH_SESSION_EPOCH)
        );
        // Answered partitions go last.
        let (_, _, ps) = incremental(cache.plan(&request(id, 2, &[], &[]), 12, t0));
        let order: Vec<_> = ps.iter().map(|p| p.fetch.partition).collect();
        assert_eq!(order, [0, 5, 1]);
        assert_eq!(
            cache.plan(&request(id, 1, &[], &[]), 12, t0),
            Plan::Refused(ErrorCode::INVALID_FETCH_SESSION_EPOCH)
        );
        assert_eq!(
            cache.plan(&request(id, 2, &[], &[]), 13, t0),
            Plan::Refused(ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR)
        );
        assert_eq!(
            cache.plan(&request(id + 1, 2, &[], &[]), 12, t0),
            Plan::Refused(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        );
        // Epoch -1 with the id closes it.
        assert_eq!(
            cache.plan(&request(id, SESSIONLESS, &[], &[]), 12, t0),
            Plan::Sessionless
        );
        assert!(cache.is_empty());
        assert_eq!(cache.inner().bytes, 0);
    }

    #[test]
    fn a_session_that_forgets_everything_closes() {
        let cache = FetchSessionCache::new(10, 1 << 20);
        let t0 = Instant::now();
        let id = cache.open(false, false, parts(2), t0);
        assert_eq!(
            cache.plan(&request(id, 1, &[], &[0, 1]), 12, t0),
            Plan::Sessionless
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn only_partitions_with_something_new_are_answered() {
        let mut c = CachedPartition::new("t", part(0, 0));
        let mut answer = FetchPartitionResponse {
            partition: 0,
            error: ErrorCode::NONE,
            high_watermark: 10,
            last_stable_offset: 10,
            log_start_offset: 0,
            aborted_transactions: None,
            diverging_epoch: None,
            current_leader: None,
            records: &[],
        };
        assert!(c.must_respond(&answer, false), "first answer");
        assert!(!c.must_respond(&answer, false), "nothing new");
        assert!(c.must_respond(&answer, true), "records");
        answer.last_stable_offset = 9;
        assert!(c.must_respond(&answer, false), "LSO moved");
        answer.log_start_offset = 3;
        assert!(c.must_respond(&answer, false), "log start moved");
        answer.error = ErrorCode::OFFSET_OUT_OF_RANGE;
        assert!(c.must_respond(&answer, false), "error");
        assert!(c.must_respond(&answer, false), "error again");
        answer.error = ErrorCode::NONE;
        assert!(c.must_respond(&answer, false), "the error went away");
        assert!(!c.must_respond(&answer, false));
    }

    #[test]
    fn eviction_takes_a_stale_session_or_a_less_valuable_one() {
        let cache = FetchSessionCache::new(2, 1 << 20);
        let t0 = Instant::now();
        let big = cache.open(false, false, parts(20), t0);
        let small = cache.open(false, false, parts(5), t0);
        assert!(big > 0 && small > 0 && big != small);
        // Full, nothing stale or old enough: a consumer's session is not admitted.
        assert_eq!(cache.open(false, false, parts(30), t0), 0);
        // A follower's evicts the least valuable consumer session at once.
        let follower = cache.open(true, false, parts(1), t0);
        assert!(follower > 0);
        let ids: HashSet<i32> = cache.inner().sessions.keys().copied().collect();
        assert_eq!(ids, HashSet::from([big, follower]));
        // Past the eviction age, a larger consumer session evicts a smaller old one, never a
        // follower's (both used just now).
        let t1 = t0 + EVICTION + Duration::from_secs(1);
        for id in [big, follower] {
            let (_, e, ps) = incremental(cache.plan(&request(id, 1, &[], &[]), 12, t1));
            cache.commit(id, e, ps, &[], t1).unwrap();
        }
        assert_eq!(cache.open(false, false, parts(10), t1), 0, "smaller");
        let bigger = cache.open(false, false, parts(30), t1);
        assert!(bigger > 0);
        let ids: HashSet<i32> = cache.inner().sessions.keys().copied().collect();
        assert_eq!(ids, HashSet::from([bigger, follower]));
        // Unused for the eviction time, even a follower's session is stale and goes first.
        let (_, e, ps) = incremental(cache.plan(&request(bigger, 1, &[], &[]), 12, t1));
        let t2 = t1 + EVICTION + Duration::from_secs(1);
        cache.commit(bigger, e, ps, &[], t2).unwrap();
        let late = cache.open(false, false, parts(1), t2);
        assert!(late > 0);
        let ids: HashSet<i32> = cache.inner().sessions.keys().copied().collect();
        assert_eq!(ids, HashSet::from([bigger, late]));
    }

    #[test]
    fn all_sessions_together_hold_at_most_their_byte_bound() {
        let one = bytes_of(&parts(1));
        let cache = FetchSessionCache::bounded(10, 1 << 20, 10 * one);
        let t0 = Instant::now();
        let a = cache.open(false, false, parts(6), t0);
        assert!(a > 0);
        assert_eq!(cache.open(false, false, parts(5), t0), 0, "past the bound");
        let b = cache.open(false, false, parts(4), t0);
        assert!(b > 0);
        // Growing past it closes the session that grows.
        assert_eq!(
            cache.plan(&request(b, 1, &[(7, 0)], &[]), 12, t0),
            Plan::Refused(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(cache.inner().bytes, 6 * one);
    }

    /// Random requests, answers and openings from many clients: nothing panics, and the
    /// byte count stays the sum of the sessions' partitions.
    #[test]
    fn random_clients_keep_the_cache_consistent() {
        let cache = FetchSessionCache::bounded(5, 4096, 40 * bytes_of(&parts(1)));
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let t0 = Instant::now();
        let mut ids = vec![0];
        let (mut opened, mut committed) = (0, 0);
        let mut epochs: HashMap<i32, i32> = HashMap::new();
        for step in 0..5000u64 {
            let now = t0 + Duration::from_secs(step / 10);
            let named: Vec<(i32, i64)> = (0..next(8)).map(|_| (next(30) as i32, 0)).collect();
            let forgotten: Vec<i32> = (0..next(3)).map(|_| next(30) as i32).collect();
            let id = ids[next(ids.len() as u64) as usize];
            // Mostly the epoch the session expects, at times any.
            let epoch = match epochs.get(&id) {
                Some(&e) if next(4) != 0 => e,
                _ => next(6) as i32 - 1,
            };
            let req = request(id, epoch, &named, &forgotten);
            match cache.plan(&req, 12, now) {
                Plan::Open => {
                    let ps = named
                        .iter()
                        .map(|&(p, o)| CachedPartition::new("t", part(p, o)))
                        .collect();
                    let new = cache.open(next(2) == 0, false, ps, now);
                    if new > 0 {
                        opened += 1;
                        epochs.insert(new, 1);
                    }
                    ids.push(new);
                }
                Plan::Incremental {
                    id,
                    epoch,
                    partitions,
                } => {
                    let sent: Vec<bool> = partitions.iter().map(|_| next(2) == 0).collect();
                    committed +=
                        usize::from(cache.commit(id, epoch, partitions, &sent, now).is_ok());
                }
                Plan::Sessionless | Plan::Refused(_) => {}
            }
            let inner = cache.inner();
            assert!(inner.sessions.len() <= 5);
            let sum: usize = inner
                .sessions
                .values()
                .map(|s| bytes_of(&s.partitions))
                .sum();
            assert_eq!(inner.bytes, sum, "step {step}");
            assert!(inner.bytes <= 40 * bytes_of(&parts(1)));
            assert!(inner.sessions.values().all(|s| s.epoch >= 1));
        }
        assert!(
            opened > 25 && committed > 25,
            "{opened} opened, {committed} committed"
        );
    }

    #[test]
    fn sessions_are_bounded_by_what_a_request_can_name() {
        // 1 KiB requests name at most 64 partitions.
        let cache = FetchSessionCache::new(10, 1024);
        let t0 = Instant::now();
        assert_eq!(cache.open(false, false, parts(65), t0), 0);
        let id = cache.open(false, false, parts(60), t0);
        assert!(id > 0);
        let more: Vec<(i32, i64)> = (60..70).map(|p| (p, 0)).collect();
        assert_eq!(
            cache.plan(&request(id, 1, &more, &[]), 12, t0),
            Plan::Refused(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        );
        assert!(cache.is_empty());
        assert_eq!(cache.inner().bytes, 0);
        // A partition named twice is kept once.
        let mut twice = parts(2);
        twice.push(CachedPartition::new("t", part(0, 9)));
        let id = cache.open(false, false, twice, t0);
        let (_, _, ps) = incremental(cache.plan(&request(id, 1, &[], &[]), 12, t0));
        let got: Vec<_> = ps
            .iter()
            .map(|p| (p.fetch.partition, p.fetch.fetch_offset))
            .collect();
        assert_eq!(got, [(0, 9), (1, 0)]);
    }
}
