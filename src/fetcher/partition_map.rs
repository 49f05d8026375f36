//! A fetcher's partition map (Kafka's `PartitionStates`) that knows what changed.
//!
//! Reads go through [`Deref`] to the map itself; every write goes through a method here, which
//! records the partition as changed. The fetcher asks for what changed since it last asked
//! ([`PartitionMap::take_request_changes`]) and for the partitions truncating, so that a round
//! in which nothing changed costs nothing per partition: within a fetch session the next
//! request names only changed partitions, and nothing else walks the whole map.
//!
//! Derived sets (truncating, delayed) are brought up to date lazily from the changed
//! partitions, since a write hands out `&mut` and cannot see what the caller did with it.

use crate::checkpoint::TopicPartition;
use crate::protocol::uuid::Uuid;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchStatus {
    Fetching,
    /// Must find the point where the local log and the leader's agree before fetching.
    Truncating,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFetchState {
    /// Next offset to fetch. Invariant: equals the local log end after every round.
    pub fetch_offset: i64,
    /// The leader epoch from metadata, sent as CurrentLeaderEpoch (-1: unknown).
    pub current_leader_epoch: i32,
    pub status: FetchStatus,
    /// Not fetched before this instant (set after an error).
    pub delayed_until: Option<Instant>,
    /// The round in which the partition last brought data. Requests list partitions that
    /// brought data longest ago first: a leader gives an oversized batch (KIP-74) only to the
    /// first partition with data, so a fixed order could starve the ones at the back.
    pub last_data_round: u64,
    /// The topic id the local log belongs to, sent with Fetch v13+ so that a leader whose
    /// topic was re-created answers UNKNOWN_TOPIC_ID instead of serving the new topic.
    pub topic_id: Option<Uuid>,
}

impl PartitionFetchState {
    pub fn new(fetch_offset: i64, current_leader_epoch: i32, status: FetchStatus) -> Self {
        PartitionFetchState {
            fetch_offset,
            current_leader_epoch,
            status,
            delayed_until: None,
            last_data_round: 0,
            topic_id: None,
        }
    }

    pub fn with_topic_id(mut self, topic_id: Option<Uuid>) -> Self {
        self.topic_id = topic_id;
        self
    }
    pub(super) fn is_ready(&self, now: Instant) -> bool {
        self.status == FetchStatus::Fetching && self.delayed_until.is_none_or(|t| t <= now)
    }
}

#[derive(Debug, Default)]
pub struct PartitionMap {
    states: BTreeMap<TopicPartition, PartitionFetchState>,
    /// Written (added, removed or possibly changed) since the derived sets were last settled.
    unsettled: BTreeSet<TopicPartition>,
    /// Settled, but not yet taken by the request builder.
    for_request: BTreeSet<TopicPartition>,
    /// Invariant once settled: exactly the partitions whose status is `Truncating`.
    truncating: BTreeSet<TopicPartition>,
    /// Invariant once settled: exactly the partitions with a `delayed_until`.
    delayed: BTreeSet<TopicPartition>,
}

impl Deref for PartitionMap {
    type Target = BTreeMap<TopicPartition, PartitionFetchState>;
    fn deref(&self) -> &Self::Target {
        &self.states
    }
}

impl PartitionMap {
    pub fn new() -> Self {
        PartitionMap::default()
    }

    /// The partition's state for writing; it counts as changed.
    pub fn get_mut(&mut self, tp: &TopicPartition) -> Option<&mut PartitionFetchState> {
        let s = self.states.get_mut(tp)?;
        if !self.unsettled.contains(tp) {
            self.unsettled.insert(tp.clone());
        }
        Some(s)
    }

    pub fn insert(
        &mut self,
        tp: TopicPartition,
        state: PartitionFetchState,
    ) -> Option<PartitionFetchState> {
        self.unsettled.insert(tp.clone());
        self.states.insert(tp, state)
    }

    pub fn remove(&mut self, tp: &TopicPartition) -> Option<PartitionFetchState> {
        let old = self.states.remove(tp)?;
        self.unsettled.insert(tp.clone());
        Some(old)
    }

    pub fn extend(
        &mut self,
        parts: impl IntoIterator<Item = (TopicPartition, PartitionFetchState)>,
    ) {
        for (tp, s) in parts {
            self.insert(tp, s);
        }
    }

    /// Brings the derived sets up to date with what was written since the last call.
    fn settle(&mut self) {
        for tp in std::mem::take(&mut self.unsettled) {
            match self.states.get(&tp) {
                Some(s) => {
                    if s.status == FetchStatus::Truncating {
                        self.truncating.insert(tp.clone());
                    } else {
                        self.truncating.remove(&tp);
                    }
                    if s.delayed_until.is_some() {
                        self.delayed.insert(tp.clone());
                    } else {
                        self.delayed.remove(&tp);
                    }
                }
                None => {
                    self.truncating.remove(&tp);
                    self.delayed.remove(&tp);
                }
            }
            self.for_request.insert(tp);
        }
    }

    /// Whether some partition is truncating (delayed or not).
    pub fn any_truncating(&mut self) -> bool {
        self.settle();
        !self.truncating.is_empty()
    }

    /// The truncating partitions that are due now, with their current leader epochs.
    pub fn truncating_due(&mut self, now: Instant) -> Vec<(TopicPartition, i32)> {
        self.settle();
        self.truncating
            .iter()
            .filter_map(|tp| {
                let s = self.states.get(tp)?;
                s.delayed_until
                    .is_none_or(|t| t <= now)
                    .then(|| (tp.clone(), s.current_leader_epoch))
            })
            .collect()
    }

    /// The earliest end of a backoff, if any partition is delayed.
    pub fn next_wake(&mut self) -> Option<Instant> {
        self.settle();
        self.delayed
            .iter()
            .filter_map(|tp| self.states.get(tp).and_then(|s| s.delayed_until))
            .min()
    }

    /// Every partition whose readiness or fetch parameters may differ from when the request
    /// builder last asked: those written since, and the delayed ones whose backoff is over
    /// (their delay is then cleared, so each is returned once).
    pub fn take_request_changes(&mut self, now: Instant) -> BTreeSet<TopicPartition> {
        self.settle();
        let due: Vec<TopicPartition> = self
            .delayed
            .iter()
            .filter(|tp| {
                self.states
                    .get(*tp)
                    .and_then(|s| s.delayed_until)
                    .is_some_and(|t| t <= now)
            })
            .cloned()
            .collect();
        for tp in due {
            if let Some(s) = self.states.get_mut(&tp) {
                s.delayed_until = None;
            }
            self.delayed.remove(&tp);
            self.for_request.insert(tp);
        }
        std::mem::take(&mut self.for_request)
    }

    /// Forgets the pending changes: the caller has just looked at every partition.
    pub fn clear_request_changes(&mut self) {
        self.settle();
        self.for_request.clear();
    }

    /// How many partitions are waiting to be looked at by the request builder (tests).
    #[cfg(test)]
    pub fn pending_changes(&self) -> usize {
        self.unsettled.union(&self.for_request).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    fn map(n: i32) -> PartitionMap {
        let mut m = PartitionMap::new();
        m.extend((0..n).map(|p| (tp(p), PartitionFetchState::new(0, 1, FetchStatus::Fetching))));
        m
    }

    #[test]
    fn reads_change_nothing_and_each_write_is_reported_once() {
        let mut m = map(100);
        let now = Instant::now();
        assert_eq!(m.take_request_changes(now).len(), 100);
        assert!(m.take_request_changes(now).is_empty());
        // Reads only.
        assert_eq!(m.get(&tp(3)).map(|s| s.fetch_offset), Some(0));
        assert_eq!(m.values().count(), 100);
        assert!(m.take_request_changes(now).is_empty());
        m.get_mut(&tp(3)).unwrap().fetch_offset = 9;
        m.get_mut(&tp(3)).unwrap().fetch_offset = 10;
        m.remove(&tp(7));
        assert!(m.get_mut(&tp(1000)).is_none());
        let got: Vec<i32> = m
            .take_request_changes(now)
            .iter()
            .map(|t| t.partition)
            .collect();
        assert_eq!(got, vec![3, 7]);
        assert!(m.take_request_changes(now).is_empty());
    }

    #[test]
    fn truncating_and_delayed_sets_follow_the_writes() {
        let mut m = map(10);
        m.clear_request_changes();
        assert!(!m.any_truncating());
        m.get_mut(&tp(2)).unwrap().status = FetchStatus::Truncating;
        assert!(m.any_truncating());
        let now = Instant::now();
        assert_eq!(m.truncating_due(now), vec![(tp(2), 1)]);
        m.get_mut(&tp(2)).unwrap().delayed_until = Some(now + Duration::from_secs(60));
        assert!(m.truncating_due(now).is_empty());
        assert!(m.any_truncating());
        m.get_mut(&tp(2)).unwrap().status = FetchStatus::Fetching;
        assert!(!m.any_truncating());
        m.remove(&tp(2));
        assert_eq!(m.next_wake(), None);
    }

    #[test]
    fn a_delay_that_ends_makes_the_partition_a_change_once() {
        let mut m = map(10);
        let now = Instant::now();
        m.take_request_changes(now);
        m.get_mut(&tp(4)).unwrap().delayed_until = Some(now + Duration::from_millis(50));
        assert_eq!(m.take_request_changes(now).len(), 1, "the delay itself");
        assert_eq!(m.next_wake(), Some(now + Duration::from_millis(50)));
        assert!(m.take_request_changes(now).is_empty(), "still delayed");
        let later = now + Duration::from_millis(60);
        let got: Vec<i32> = m
            .take_request_changes(later)
            .iter()
            .map(|t| t.partition)
            .collect();
        assert_eq!(got, vec![4]);
        assert_eq!(m[&tp(4)].delayed_until, None);
        assert!(m.take_request_changes(later).is_empty());
        assert_eq!(m.next_wake(), None);
    }
}
