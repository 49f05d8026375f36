//! The client side of KIP-227 incremental fetch sessions (Kafka's `FetchSessionHandler`).
//!
//! One handler per fetcher, that is per leader connection. It remembers what the leader's
//! session holds — every partition with the fetch parameters last sent for it — and turns the
//! partitions a round wants fetched into the next request:
//! - **full** (session id 0 or the old id, epoch 0 = [`INITIAL_EPOCH`]): names every partition
//!   and asks for a new session; the response's session id (non-zero) opens it;
//! - **incremental** (the session's id, epochs 1, 2, …, wrapping to 1 after `i32::MAX`):
//!   names only partitions that are new to the session or whose parameters (fetch offset,
//!   log start, max bytes, last fetched epoch, current leader epoch, topic id) changed since
//!   the session last saw them, and lists as `forgotten` those that left. The response lists
//!   only partitions with something to say; an absent one had nothing new.
//! - **sessionless** (id 0, epoch -1 = [`SESSIONLESS`]): a leader that answers a full fetch
//!   with session id 0 (Tansu, librdkafka's mock cluster, a Kafka broker with no free slot)
//!   gets full fetches as before sessions existed; once every [`SESSIONLESS_RETRY`] a full
//!   fetch at epoch 0 asks again (a broker whose session cache was full may have room now).
//!
//! Which partitions are in the session: exactly those the fetcher would fetch, as in Kafka's
//! `ReplicaFetcherThread.buildFetch`, which adds only partitions that are ready. A partition
//! delayed by a backoff or truncating is therefore *forgotten* and added again (named, with its
//! parameters) once it is ready; a partition removed from the fetcher is forgotten likewise.
//!
//! Pipelining: the fetcher may send the next request before the previous response is
//! appended, built from the offsets that response will leave (its `ahead` offsets). The epoch
//! advances per request *built*, and the session's view is updated to what each request
//! assumes, so the diff of the request after it is against what the leader really holds. A
//! response always answers the last request built (there is at most one in flight, and the
//! next is built only after its predecessor's response was read), so [`FetchSessionHandler::
//! fetch_offset`] gives the offset a response partition was served from.
//!
//! Resets: FETCH_SESSION_ID_NOT_FOUND forgets the session (next: id 0, epoch 0); any other
//! top-level error, including INVALID_FETCH_SESSION_EPOCH and FETCH_SESSION_TOPIC_ID_ERROR,
//! asks the leader to close the old session and open a new one (next: the old id, epoch 0),
//! as Kafka's `nextCloseExisting`. A closed or new connection starts with a full fetch
//! ([`FetchSessionHandler::reset`]); the leader drops the old connection's session itself.
//!
//! Who touches it: only the fetcher thread that owns it; no lock.

use crate::checkpoint::TopicPartition;
use crate::protocol::error::ErrorCode;
pub use crate::protocol::fetch::INITIAL_EPOCH;
use crate::protocol::fetch::{FetchPartition, SESSIONLESS};
use crate::protocol::uuid::Uuid;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a leader that declined a session is fetched from sessionless before a new
/// connection asks again.
pub const SESSIONLESS_RETRY: Duration = Duration::from_secs(300);

/// A partition the fetcher wants in the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedPartition {
    pub topic_id: Option<Uuid>,
    pub data: FetchPartition,
    /// Named partitions are sent in ascending order of this key (the fetcher's "longest
    /// without data first"); a stable sort keeps the map's order among equals.
    pub order: u64,
}

/// What the handler puts in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// Whether the request names every partition fetched (full or sessionless).
    pub full: bool,
    pub session_id: i32,
    pub session_epoch: i32,
    pub topics: Vec<(String, Vec<FetchPartition>)>,
    /// Topic ids for a v13+ request: every topic of the session (the response names topics
    /// by id only) and of the forgotten partitions; empty when some partition has none, so
    /// the request goes at v12 and topics by name.
    pub topic_ids: BTreeMap<String, Uuid>,
    pub forgotten: Vec<(String, Vec<i32>)>,
}

/// What the fetcher does with a response after the handler read its session fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseVerdict {
    /// The partitions in the response may be processed.
    Usable,
    /// A top-level error: the session was reset and the next request is full; the response
    /// carries no partition data.
    Reset,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cached {
    topic_id: Option<Uuid>,
    data: FetchPartition,
}

#[derive(Debug, Default, Clone)]
pub struct FetchSessionHandler {
    /// The session's id; 0 before one is opened. Kept through a reset that asks the leader
    /// to close it (epoch 0 with this id).
    session_id: i32,
    /// The epoch of the next request. Invariant: 0 ⇔ the next request is full.
    next_epoch: i32,
    /// Set when the leader answered a full fetch with session id 0: every request is full
    /// and sessionless until then.
    sessionless_until: Option<Instant>,
    /// Invariant: what the leader's session holds as of the last request built — empty while
    /// sessionless or when the next request is full.
    partitions: BTreeMap<TopicPartition, Cached>,
    /// Whether the session was opened with a topic id for every partition (v13+ requests).
    uses_topic_ids: bool,
    /// How many of `partitions` have no topic id.
    without_id: usize,
    /// The topic ids of `partitions`' topics, while they are known to be current.
    topic_ids: Option<BTreeMap<String, Uuid>>,
    /// Whether the last request built was full.
    last_full: bool,
}

impl FetchSessionHandler {
    pub fn new() -> Self {
        FetchSessionHandler::default()
    }

    /// Whether requests go sessionless (the leader declined a session).
    pub fn is_sessionless(&self, now: Instant) -> bool {
        self.sessionless_until.is_some_and(|t| now < t)
    }

    /// The session id, 0 when none is open.
    pub fn session_id(&self) -> i32 {
        self.session_id
    }

    /// Forgets the session: the next request is a full fetch asking for a new one. For a
    /// closed connection, a leader move, shutdown — wherever the leader may no longer hold it.
    pub fn reset(&mut self) {
        self.session_id = 0;
        self.close_existing();
    }

    /// The next request is full and asks the leader to replace the session.
    fn close_existing(&mut self) {
        self.next_epoch = INITIAL_EPOCH;
        self.clear_partitions();
    }

    fn clear_partitions(&mut self) {
        self.partitions.clear();
        self.without_id = 0;
        self.topic_ids = None;
    }

    /// The fetch offset the leader serves `tp` from under the last request built, when it is
    /// in the session (incremental requests only; a full request names every offset itself).
    pub fn fetch_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).map(|c| c.data.fetch_offset)
    }

    /// The partitions the session holds (what an incremental request fetches).
    pub fn session_partitions(&self) -> impl Iterator<Item = &TopicPartition> {
        self.partitions.keys()
    }

    /// The next request for `wanted` — every partition the fetcher would fetch now, in
    /// ascending partition order — or `None` when there is nothing to fetch and nothing to
    /// forget. Building commits it: the epoch advances and the session's view becomes what the
    /// request assumes, so a request built must be sent (or the handler [`reset`](Self::reset)).
    pub fn build<'a>(
        &mut self,
        wanted: impl Iterator<Item = (&'a TopicPartition, WantedPartition)>,
        now: Instant,
    ) -> Option<SessionRequest> {
        let sessionless = self.is_sessionless(now);
        if !sessionless {
            self.sessionless_until = None;
        }
        if sessionless || self.next_epoch == INITIAL_EPOCH {
            let all: Vec<(TopicPartition, WantedPartition)> =
                wanted.map(|(tp, w)| (tp.clone(), w)).collect();
            return self.build_full(all, sessionless);
        }
        // A merge walk of two sorted sequences: the wanted partitions and the session's.
        let mut named: Vec<(TopicPartition, WantedPartition)> = Vec::new();
        let mut forgotten: Vec<(TopicPartition, Option<Uuid>)> = Vec::new();
        let mut session = self.partitions.iter().peekable();
        let mut wanted_count = 0usize;
        for (tp, w) in wanted {
            wanted_count += 1;
            while let Some((s, c)) = session.next_if(|(s, _)| *s < tp) {
                forgotten.push((s.clone(), c.topic_id));
            }
            let same = session
                .next_if(|(s, _)| *s == tp)
                .is_some_and(|(_, c)| c.topic_id == w.topic_id && c.data == w.data);
            if !same {
                named.push((tp.clone(), w));
            }
        }
        forgotten.extend(session.map(|(s, c)| (s.clone(), c.topic_id)));
        if wanted_count == 0 && forgotten.is_empty() {
            return None;
        }
        self.incremental(named, forgotten)
    }

    /// Whether the next request is incremental: [`Self::build_delta`] may build it.
    pub fn next_is_incremental(&self, now: Instant) -> bool {
        self.next_epoch != INITIAL_EPOCH && !self.is_sessionless(now)
    }

    /// [`Self::build`] from only the partitions whose wish may have changed, when the next
    /// request is incremental ([`Self::next_is_incremental`]): `Some` — wanted with these
    /// parameters, `None` — not wanted now. Every partition of the session not listed is
    /// wanted as the session holds it, so an idle round costs nothing per partition.
    pub fn build_delta(
        &mut self,
        changes: impl Iterator<Item = (TopicPartition, Option<WantedPartition>)>,
    ) -> Option<SessionRequest> {
        debug_assert!(
            self.next_epoch != INITIAL_EPOCH,
            "a delta needs an open session"
        );
        let mut named: Vec<(TopicPartition, WantedPartition)> = Vec::new();
        let mut forgotten: Vec<(TopicPartition, Option<Uuid>)> = Vec::new();
        // Sorted by partition, as a merge walk yields them; a partition listed twice counts
        // once, as it stands last.
        let changes: BTreeMap<TopicPartition, Option<WantedPartition>> = changes.collect();
        for (tp, w) in changes {
            match (w, self.partitions.get(&tp)) {
                (Some(w), Some(c)) if c.topic_id == w.topic_id && c.data == w.data => {}
                (Some(w), _) => named.push((tp, w)),
                (None, Some(c)) => forgotten.push((tp.clone(), c.topic_id)),
                (None, None) => {}
            }
        }
        if self.partitions.is_empty() && named.is_empty() {
            return None;
        }
        self.incremental(named, forgotten)
    }

    /// The incremental request naming `named` and forgetting `forgotten` (both sorted by
    /// partition); the session's view becomes what it assumes.
    fn incremental(
        &mut self,
        named: Vec<(TopicPartition, WantedPartition)>,
        forgotten: Vec<(TopicPartition, Option<Uuid>)>,
    ) -> Option<SessionRequest> {
        for (tp, _) in &forgotten {
            self.uncache(tp);
        }
        for (tp, w) in &named {
            self.cache(
                tp.clone(),
                Cached {
                    topic_id: w.topic_id,
                    data: w.data.clone(),
                },
            );
        }
        let all_ids = self.without_id == 0;
        if !self.partitions.is_empty() && all_ids != self.uses_topic_ids {
            // The request would switch between naming topics by id and by name, which a
            // session cannot do (the leader answers FETCH_SESSION_TOPIC_ID_ERROR): the session
            // is replaced by a full fetch of the same partitions.
            let all: Vec<(TopicPartition, WantedPartition)> = std::mem::take(&mut self.partitions)
                .into_iter()
                .map(|(tp, c)| {
                    let order = named
                        .iter()
                        .find(|(t, _)| *t == tp)
                        .map_or(0, |(_, w)| w.order);
                    let w = WantedPartition {
                        topic_id: c.topic_id,
                        data: c.data,
                        order,
                    };
                    (tp, w)
                })
                .collect();
            self.close_existing();
            return self.build_full(all, false);
        }
        let epoch = self.next_epoch;
        self.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
        self.last_full = false;
        // Every topic of the session (the response may name any of them by id), and those
        // of the forgotten partitions.
        let mut topic_ids = if self.uses_topic_ids {
            self.session_topic_ids().clone()
        } else {
            BTreeMap::new()
        };
        let mut forgotten_topics: Vec<(String, Vec<i32>)> = Vec::new();
        for (tp, id) in forgotten {
            // A topic still in the session is named by the id the session holds it under.
            if let (true, Some(id)) = (self.uses_topic_ids, id) {
                topic_ids.entry(tp.topic.clone()).or_insert(id);
            }
            match forgotten_topics.last_mut() {
                Some((t, ps)) if *t == tp.topic => ps.push(tp.partition),
                _ => forgotten_topics.push((tp.topic, vec![tp.partition])),
            }
        }
        Some(SessionRequest {
            full: false,
            session_id: self.session_id,
            session_epoch: epoch,
            topics: group(named),
            topic_ids,
            forgotten: forgotten_topics,
        })
    }

    /// Adds or replaces a partition of the session.
    fn cache(&mut self, tp: TopicPartition, c: Cached) {
        let id = c.topic_id;
        let has_id = id.is_some();
        match self.partitions.insert(tp, c) {
            Some(old) => {
                // Any other id (a re-created topic names another), not only one gained or
                // lost, makes the cached ids stale.
                if old.topic_id != id {
                    self.topic_ids = None;
                }
                self.without_id =
                    self.without_id + usize::from(!has_id) - usize::from(old.topic_id.is_none());
            }
            None => {
                self.topic_ids = None;
                self.without_id += usize::from(!has_id);
            }
        }
    }

    /// Removes a partition from the session.
    fn uncache(&mut self, tp: &TopicPartition) {
        if let Some(old) = self.partitions.remove(tp) {
            self.topic_ids = None;
            self.without_id -= usize::from(old.topic_id.is_none());
        }
    }

    /// The topic ids of the session's topics, worked out again only after its partitions
    /// changed.
    fn session_topic_ids(&mut self) -> &BTreeMap<String, Uuid> {
        let partitions = &self.partitions;
        self.topic_ids.get_or_insert_with(|| {
            let mut ids = BTreeMap::new();
            // Per topic, not per partition: the session's partitions are sorted by topic.
            let mut last: Option<&str> = None;
            for (tp, c) in partitions {
                if last != Some(tp.topic.as_str()) {
                    last = Some(tp.topic.as_str());
                    if let Some(id) = c.topic_id {
                        ids.insert(tp.topic.clone(), id);
                    }
                }
            }
            ids
        })
    }

    /// A full request naming `all` (sorted by partition): sessionless, or epoch 0 asking for a
    /// session (with the old id, when one is to be replaced).
    fn build_full(
        &mut self,
        all: Vec<(TopicPartition, WantedPartition)>,
        sessionless: bool,
    ) -> Option<SessionRequest> {
        self.clear_partitions();
        if all.is_empty() {
            return None;
        }
        let all_ids = all.iter().all(|(_, w)| w.topic_id.is_some());
        let mut topic_ids = BTreeMap::new();
        for (tp, w) in &all {
            if let Some(id) = w.topic_id {
                topic_ids.insert(tp.topic.clone(), id);
            }
        }
        if !sessionless {
            self.uses_topic_ids = all_ids;
            self.partitions = all
                .iter()
                .map(|(tp, w)| {
                    (
                        tp.clone(),
                        Cached {
                            topic_id: w.topic_id,
                            data: w.data.clone(),
                        },
                    )
                })
                .collect();
            self.without_id = all.iter().filter(|(_, w)| w.topic_id.is_none()).count();
        }
        self.last_full = true;
        let (session_id, session_epoch) = if sessionless {
            (0, SESSIONLESS)
        } else {
            (self.session_id, INITIAL_EPOCH)
        };
        Some(SessionRequest {
            full: true,
            session_id,
            session_epoch,
            topics: group(all),
            topic_ids,
            forgotten: Vec::new(),
        })
    }

    /// Reads a response's top-level error and session id (for the last request built).
    pub fn handle_response(
        &mut self,
        error: ErrorCode,
        session_id: i32,
        now: Instant,
    ) -> ResponseVerdict {
        if !error.is_ok() {
            if error == ErrorCode::FETCH_SESSION_ID_NOT_FOUND {
                self.reset();
            } else {
                self.close_existing();
            }
            return ResponseVerdict::Reset;
        }
        if self.last_full {
            if self.is_sessionless(now) {
                return ResponseVerdict::Usable;
            }
            if session_id == 0 {
                // The leader keeps no session for us: full fetches, as before sessions.
                self.sessionless_until = Some(now + SESSIONLESS_RETRY);
                self.reset();
            } else {
                self.session_id = session_id;
                self.next_epoch = 1;
            }
        } else if session_id != self.session_id {
            // The leader closed the session (id 0) or answers for another: the data is still
            // the leader's answer at the offsets we assumed, but the next request starts over.
            self.reset();
        }
        ResponseVerdict::Usable
    }
}

/// Groups partitions by topic, in ascending `order` (stable), topics in order of first
/// appearance.
fn group(mut parts: Vec<(TopicPartition, WantedPartition)>) -> Vec<(String, Vec<FetchPartition>)> {
    parts.sort_by_key(|(_, w)| w.order);
    let mut topics: Vec<(String, Vec<FetchPartition>)> = Vec::new();
    for (tp, w) in parts {
        match topics.iter_mut().find(|(t, _)| *t == tp.topic) {
            Some((_, ps)) => ps.push(w.data),
            None => topics.push((tp.topic, vec![w.data])),
        }
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// Partitions 0..n at `offsets[p]`, with a topic id when `ids`.
    fn wanted(offsets: &[(i32, i64)], ids: bool) -> Vec<(TopicPartition, WantedPartition)> {
        offsets
            .iter()
            .map(|&(p, o)| {
                let w = WantedPartition {
                    topic_id: ids.then_some(Uuid([7; 16])),
                    data: FetchPartition {
                        partition: p,
                        current_leader_epoch: 3,
                        fetch_offset: o,
                        last_fetched_epoch: 2,
                        log_start_offset: 0,
                        partition_max_bytes: 1 << 20,
                    },
                    order: 0,
                };
                (tp(p), w)
            })
            .collect()
    }

    fn build(
        h: &mut FetchSessionHandler,
        w: &[(TopicPartition, WantedPartition)],
    ) -> SessionRequest {
        try_build(h, w).expect("a request")
    }

    fn try_build(
        h: &mut FetchSessionHandler,
        w: &[(TopicPartition, WantedPartition)],
    ) -> Option<SessionRequest> {
        h.build(w.iter().map(|(t, w)| (t, w.clone())), Instant::now())
    }

    fn named(r: &SessionRequest) -> Vec<(i32, i64)> {
        r.topics
            .iter()
            .flat_map(|(_, ps)| ps.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect()
    }

    fn ok(h: &mut FetchSessionHandler, session_id: i32) {
        let v = h.handle_response(ErrorCode::NONE, session_id, Instant::now());
        assert_eq!(v, ResponseVerdict::Usable);
    }

    /// A handler with session 77 open over partitions 0..3 at offset 10.
    fn opened() -> (FetchSessionHandler, Vec<(TopicPartition, WantedPartition)>) {
        let mut h = FetchSessionHandler::new();
        let w = wanted(&[(0, 10), (1, 10), (2, 10)], false);
        build(&mut h, &w);
        ok(&mut h, 77);
        (h, w)
    }

    #[test]
    fn a_session_opens_with_a_full_fetch_then_names_only_what_changed() {
        let mut h = FetchSessionHandler::new();
        let w = wanted(&[(0, 10), (1, 10), (2, 10)], false);
        let first = build(&mut h, &w);
        assert!(first.full);
        assert_eq!((first.session_id, first.session_epoch), (0, INITIAL_EPOCH));
        assert_eq!(named(&first), vec![(0, 10), (1, 10), (2, 10)]);
        ok(&mut h, 77);

        // Nothing changed: an empty incremental request, still sent.
        let idle = build(&mut h, &w);
        assert!(!idle.full);
        assert_eq!((idle.session_id, idle.session_epoch), (77, 1));
        assert!(idle.topics.is_empty() && idle.forgotten.is_empty());
        ok(&mut h, 77);

        // Partition 1 advanced: only it is named.
        let w = wanted(&[(0, 10), (1, 15), (2, 10)], false);
        let r = build(&mut h, &w);
        assert_eq!((r.session_epoch, named(&r)), (2, vec![(1, 15)]));
        assert_eq!(h.fetch_offset(&tp(1)), Some(15));
        assert_eq!(h.fetch_offset(&tp(0)), Some(10));
        ok(&mut h, 77);

        // Partition 0 left the fetcher, 3 joined.
        let w = wanted(&[(1, 15), (2, 10), (3, 0)], false);
        let r = build(&mut h, &w);
        assert_eq!(r.session_epoch, 3);
        assert_eq!(named(&r), vec![(3, 0)]);
        assert_eq!(r.forgotten, vec![("t".to_string(), vec![0])]);
        assert_eq!(h.fetch_offset(&tp(0)), None);
    }

    #[test]
    fn every_fetch_parameter_the_session_remembers_makes_a_partition_named() {
        let (mut h, w) = opened();
        let mut changed = w.clone();
        changed[0].1.data.log_start_offset = 4;
        changed[1].1.data.current_leader_epoch = 4;
        changed[2].1.data.last_fetched_epoch = 3;
        let r = build(&mut h, &changed);
        assert_eq!(named(&r).len(), 3);
        ok(&mut h, 77);
        let mut more = changed.clone();
        more[1].1.data.partition_max_bytes = 5;
        let r = build(&mut h, &more);
        assert_eq!(named(&r), vec![(1, 10)]);
    }

    #[test]
    fn a_pipelined_request_builds_on_what_the_previous_one_assumed() {
        let (mut h, _) = opened();
        // Built while the response that moves 0 to 20 is still being appended.
        let ahead = wanted(&[(0, 20), (1, 10), (2, 10)], false);
        let r = build(&mut h, &ahead);
        assert_eq!((r.session_epoch, named(&r)), (1, vec![(0, 20)]));
        // Its response answers before the map moved: the next request built from the
        // appended state (0 at 20) names nothing, at the next epoch.
        ok(&mut h, 77);
        let r = build(&mut h, &ahead);
        assert_eq!((r.session_epoch, named(&r)), (2, vec![]));
        ok(&mut h, 77);
        // Had the append failed (0 stays at 10), 0 is named again at its real offset.
        let failed = wanted(&[(0, 10), (1, 10), (2, 10)], false);
        let r = build(&mut h, &failed);
        assert_eq!((r.session_epoch, named(&r)), (3, vec![(0, 10)]));
    }

    #[test]
    fn the_epoch_wraps_to_one_after_the_largest() {
        let (mut h, w) = opened();
        h.next_epoch = i32::MAX;
        assert_eq!(build(&mut h, &w).session_epoch, i32::MAX);
        ok(&mut h, 77);
        assert_eq!(build(&mut h, &w).session_epoch, 1);
    }

    #[test]
    fn session_errors_fall_back_to_a_full_fetch() {
        // FETCH_SESSION_ID_NOT_FOUND: the session is gone, a new one is asked for.
        let (mut h, w) = opened();
        build(&mut h, &w);
        let v = h.handle_response(ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0, Instant::now());
        assert_eq!(v, ResponseVerdict::Reset);
        let r = build(&mut h, &w);
        assert!(r.full);
        assert_eq!((r.session_id, r.session_epoch, named(&r).len()), (0, 0, 3));
        ok(&mut h, 78);
        assert_eq!(build(&mut h, &w).session_id, 78);

        // The others ask the leader to replace the session they name.
        for code in [
            ErrorCode::INVALID_FETCH_SESSION_EPOCH,
            ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR,
            ErrorCode::UNKNOWN_SERVER_ERROR,
        ] {
            let (mut h, w) = opened();
            build(&mut h, &w);
            assert_eq!(
                h.handle_response(code, 77, Instant::now()),
                ResponseVerdict::Reset
            );
            let r = build(&mut h, &w);
            assert!(r.full, "{code}");
            assert_eq!((r.session_id, r.session_epoch, named(&r).len()), (77, 0, 3));
        }
    }

    #[test]
    fn a_leader_without_sessions_gets_sessionless_full_fetches() {
        let mut h = FetchSessionHandler::new();
        let w = wanted(&[(0, 10), (1, 10)], true);
        build(&mut h, &w);
        ok(&mut h, 0);
        for _ in 0..3 {
            let r = build(&mut h, &w);
            assert!(r.full);
            assert_eq!((r.session_id, r.session_epoch), (0, SESSIONLESS));
            assert_eq!(named(&r).len(), 2);
            ok(&mut h, 0);
        }
        // A reconnect does not ask again before the retry interval.
        h.reset();
        assert_eq!(build(&mut h, &w).session_epoch, SESSIONLESS);
        // After it, a full fetch asks for a session again.
        h.sessionless_until = Some(Instant::now());
        assert_eq!(build(&mut h, &w).session_epoch, INITIAL_EPOCH);
    }

    #[test]
    fn a_reset_or_a_closed_session_starts_over_with_a_full_fetch() {
        let (mut h, w) = opened();
        h.reset();
        let r = build(&mut h, &w);
        assert_eq!((r.full, r.session_id, r.session_epoch), (true, 0, 0));
        ok(&mut h, 78);
        build(&mut h, &w);
        // The leader answers an incremental request with id 0: it closed the session.
        ok(&mut h, 0);
        let r = build(&mut h, &w);
        assert_eq!((r.full, r.session_id, r.session_epoch), (true, 0, 0));
    }

    #[test]
    fn nothing_to_fetch_and_nothing_to_forget_builds_no_request() {
        let mut h = FetchSessionHandler::new();
        assert!(try_build(&mut h, &[]).is_none());
        let (mut h, _) = opened();
        // Every partition left: one request forgets them, then nothing more is sent.
        let r = build(&mut h, &[]);
        assert_eq!(r.forgotten, vec![("t".to_string(), vec![0, 1, 2])]);
        ok(&mut h, 77);
        assert!(try_build(&mut h, &[]).is_none());
    }

    #[test]
    fn topic_ids_cover_the_whole_session_and_a_switch_replaces_it() {
        let mut h = FetchSessionHandler::new();
        let w = wanted(&[(0, 10), (1, 10)], true);
        build(&mut h, &w);
        ok(&mut h, 77);
        // An incremental request naming nothing still carries the session's topic ids, so
        // the response (by id at v13) can be read.
        let r = build(&mut h, &w);
        assert_eq!(r.topic_ids.get("t"), Some(&Uuid([7; 16])));
        ok(&mut h, 77);
        // A partition without an id joins: the request cannot stay at v13 within the
        // session, so it is replaced by a full fetch at v12 (no ids).
        let mut mixed = w.clone();
        mixed.extend(wanted(&[(2, 0)], false));
        let r = build(&mut h, &mixed);
        assert!(r.full);
        assert_eq!((r.session_id, r.session_epoch, named(&r).len()), (77, 0, 3));
    }

    /// A small deterministic generator (xorshift), so the walk below is reproducible.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn a_delta_of_the_changed_partitions_builds_what_a_walk_of_all_of_them_builds() {
        // Two topics; with ids, a topic is now and then re-created (all its partitions get a
        // new id) or a partition loses its id (the session then switches to names).
        let topics = ["t", "u"];
        for ids in [false, true] {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 + u64::from(ids));
            let mut topic_ids = [Uuid([7; 16]), Uuid([8; 16])];
            let want = |t: usize, p: i32, o: i64, id: Option<Uuid>| {
                let mut w = wanted(&[(p, o)], false)[0].1.clone();
                w.topic_id = id;
                (TopicPartition::new(topics[t], p), w)
            };
            let mut state: BTreeMap<TopicPartition, WantedPartition> = (0..2)
                .flat_map(|t| (0..20).map(move |p| (t, p)))
                .map(|(t, p)| want(t, p, 0, ids.then_some(topic_ids[t])))
                .collect();
            let mut walk = FetchSessionHandler::new();
            build(&mut walk, &state.clone().into_iter().collect::<Vec<_>>());
            ok(&mut walk, 77);
            let mut delta = walk.clone();
            for round in 0..600 {
                let mut changed = Vec::new();
                if ids && rng.below(40) == 0 {
                    // Re-created: every partition of the topic moves to a new id.
                    let t = rng.below(2) as usize;
                    topic_ids[t] = Uuid([round as u8; 16]);
                    for (tp, w) in state.iter_mut().filter(|(tp, _)| tp.topic == topics[t]) {
                        w.topic_id = Some(topic_ids[t]);
                        changed.push(tp.clone());
                    }
                }
                for _ in 0..rng.below(4) {
                    let t = rng.below(2) as usize;
                    let p = rng.below(25) as i32;
                    let key = TopicPartition::new(topics[t], p);
                    match rng.below(4) {
                        0 => {
                            state.remove(&key);
                        }
                        1 if ids && rng.below(10) == 0 => {
                            if let Some(w) = state.get_mut(&key) {
                                w.topic_id = None;
                            }
                        }
                        _ => {
                            let id = ids.then_some(topic_ids[t]);
                            let (k, mut w) = want(t, p, rng.below(1000) as i64, id);
                            w.order = rng.below(5);
                            state.insert(k, w);
                        }
                    }
                    changed.push(key);
                }
                let all: Vec<(TopicPartition, WantedPartition)> =
                    state.clone().into_iter().collect();
                let by_walk = try_build(&mut walk, &all);
                let changes = changed.into_iter().map(|t| {
                    let w = state.get(&t).cloned();
                    (t, w)
                });
                let by_delta = if delta.next_is_incremental(Instant::now()) {
                    delta.build_delta(changes)
                } else {
                    try_build(&mut delta, &all)
                };
                assert_eq!(by_walk, by_delta, "round {round}, topic ids {ids}");
                assert_eq!(walk.partitions, delta.partitions, "round {round}");
                // The kept figures agree with what the session holds, worked out afresh.
                for h in [&walk, &delta] {
                    let without = h.partitions.values().filter(|c| c.topic_id.is_none());
                    assert_eq!(h.without_id, without.count(), "round {round}");
                }
                if let Some(r) = &by_walk
                    && !r.full
                    && delta.uses_topic_ids
                {
                    for (tp, c) in &delta.partitions {
                        let first = delta
                            .partitions
                            .iter()
                            .find(|(t, _)| t.topic == tp.topic)
                            .and_then(|(_, c)| c.topic_id);
                        assert_eq!(r.topic_ids.get(&tp.topic).copied(), first, "round {round}");
                        assert!(c.topic_id.is_some());
                    }
                }
                if by_walk.is_some_and(|r| r.full) {
                    ok(&mut walk, 77);
                    ok(&mut delta, 77);
                }
            }
        }
    }
}
