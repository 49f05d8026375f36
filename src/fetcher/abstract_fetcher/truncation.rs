//! Truncation (Kafka's `truncateToEpochEndOffsets`, `truncateOnFetchResponse` and
//! `handleOutOfRangeError`): finding where the local log and the leader's agree, and cutting
//! the local log back to it, only after the leader proved it still serves the same topic.

use super::AbstractFetcher;
use crate::checkpoint::TopicPartition;
use crate::client::ConnectionError;
use crate::fetcher::backoff::delay;
use crate::fetcher::leader_endpoint::{Identity, LeaderEndPoint};
use crate::fetcher::partition_map::{FetchStatus, PartitionMap};
use crate::fetcher::replica_ops::ReplicaOps;
use crate::fetcher::shutdownable::ShutdownSignal;
use crate::protocol::error::ErrorAction;
use crate::protocol::fetch::DivergingEpoch;
use anyhow::{Result, anyhow};
use std::time::{Duration, Instant};

/// Why the local log could not be fitted to the leader's.
enum FitError {
    /// The leader's answer, or reaching it: retried.
    Leader(anyhow::Error),
    /// The local log's step `what` failed: the partition is failed.
    Local(&'static str, anyhow::Error),
}

impl From<anyhow::Error> for FitError {
    fn from(e: anyhow::Error) -> Self {
        FitError::Leader(e)
    }
}

impl From<ConnectionError> for FitError {
    fn from(e: ConnectionError) -> Self {
        FitError::Leader(e.into())
    }
}

impl<L: LeaderEndPoint, R: ReplicaOps> AbstractFetcher<L, R> {
    /// Before a truncation: whether the leader still serves the topic the local log belongs
    /// to. When it does not (re-created topic, another cluster), the partition goes back to
    /// the manager, which archives or stops; when the leader cannot say, the partition backs
    /// off. Either way nothing is truncated.
    pub(super) fn same_identity(&mut self, map: &mut PartitionMap, tp: &TopicPartition) -> bool {
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
    pub(super) fn truncate_on_divergence(
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
    pub(super) fn handle_offset_out_of_range(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
    ) -> bool {
        let epoch = map.get(tp).map_or(-1, |s| s.current_leader_epoch);
        let Some(local_end) = self.replica.log_end_offset(tp) else {
            return true;
        };
        // Set when a request to the leader itself failed (not an error code, not a local
        // failure): only then are the round's other partitions spared the wait.
        let mut unreachable = false;
        let mut identity_changed = false;
        let result = self.fit_to_leader(
            map,
            tp,
            epoch,
            local_end,
            &mut unreachable,
            &mut identity_changed,
        );
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
            Err(FitError::Local(what, e)) => {
                self.fail(map, tp, &format!("{what} failed: {e:#}"));
                true
            }
            Err(FitError::Leader(e)) => {
                crate::log_warn!("{tp}: OFFSET_OUT_OF_RANGE at {local_end} unresolved: {e:#}");
                self.close_leader();
                self.resume_at_log_end(map, tp, local_end);
                delay(map, tp, self.params.backoff);
                !unreachable
            }
        }
    }

    /// Asks the leader where its log ends (and starts) and fits the local log to it: returns
    /// the offset to fetch from and what was done, or `None` when the partition's leader
    /// moved or its identity changed (`identity_changed` then says which). `unreachable` is
    /// set when the last request to the leader itself failed.
    fn fit_to_leader(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        epoch: i32,
        local_end: i64,
        unreachable: &mut bool,
        identity_changed: &mut bool,
    ) -> Result<Option<(i64, &'static str)>, FitError> {
        let latest = self.leader.fetch_latest_offset(tp, epoch);
        *unreachable = latest.is_err();
        let leader_end = match latest? {
            Ok(o) if o < 0 => Err(anyhow!("ListOffsets latest answered offset {o}"))?,
            Ok(o) => o,
            Err(code) => {
                if code.action() == ErrorAction::RefreshMetadata {
                    return Ok(None);
                }
                Err(anyhow!("ListOffsets latest answered {code}"))?
            }
        };
        if leader_end < local_end {
            if !self.same_identity(map, tp) {
                *identity_changed = true;
                return Ok(None);
            }
            let reason = format!(
                "OffsetOutOfRange: the leader's log ends at {leader_end}, below the local end {local_end}"
            );
            self.replica
                .truncate(tp, leader_end, &reason)
                .map_err(|e| FitError::Local("truncation", e))?;
            return Ok(Some((leader_end, "truncated to the leader's end")));
        }
        let earliest = self.leader.fetch_earliest_offset(tp, epoch);
        *unreachable = earliest.is_err();
        let leader_start = match earliest? {
            Ok(o) if o < 0 => Err(anyhow!("ListOffsets earliest answered offset {o}"))?,
            Ok(o) => o,
            Err(code) => Err(anyhow!("ListOffsets earliest answered {code}"))?,
        };
        if leader_start > local_end {
            if !self.same_identity(map, tp) {
                *identity_changed = true;
                return Ok(None);
            }
            self.replica
                .skip_to(tp, leader_start)
                .map_err(|e| FitError::Local("skipping past offsets lost upstream", e))?;
            return Ok(Some((
                leader_start,
                "the leader's log now starts above the local end; local data kept",
            )));
        }
        Ok(Some((local_end, "offset is in range again")))
    }

    /// Partitions in the `Truncating` state: with Fetch v12+ the leader reports divergence in
    /// fetch responses, so fetching starts at once; otherwise OffsetForLeaderEpoch finds the
    /// common point first (where the leader offers it). Runs under the partition-map lock.
    pub(super) fn maybe_truncate(&mut self) {
        let shared = self.shared.clone();
        let mut map = shared.lock();
        let truncating = map.truncating_due(Instant::now());
        if truncating.is_empty() {
            return;
        }
        for (tp, _) in &truncating {
            self.live
                .set_state(tp, crate::live::State::Truncating, None);
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
            let Some(wait) = self.truncate_to_epoch_end(&mut map, &tp, current_epoch, diverging)
            else {
                continue;
            };
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
        drop(map);
        self.replica.after_truncations();
    }

    /// One truncating partition, where the leader has no Fetch v12 divergence detection:
    /// OffsetForLeaderEpoch finds the common point (where the leader offers it). Returns the
    /// wait when the leader proved unreachable.
    fn truncate_to_epoch_end(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        current_epoch: i32,
        diverging: bool,
    ) -> Option<Duration> {
        let end = self.replica.log_end_offset(tp).unwrap_or(0);
        let latest = self.replica.latest_epoch(tp);
        let (Some(latest), false) = (latest, diverging) else {
            self.resume_at_log_end(map, tp, end);
            return None;
        };
        match self
            .leader
            .fetch_epoch_end_offset(tp, current_epoch, latest)
        {
            Ok(None) => self.resume_at_log_end(map, tp, end),
            Ok(Some((code, _, _))) if !code.is_ok() => {
                if code.action() == ErrorAction::RefreshMetadata {
                    self.hand_back(map, tp, format!("OffsetForLeaderEpoch answered {code}"));
                } else {
                    delay(map, tp, self.params.backoff);
                }
            }
            Ok(Some((_, leader_epoch, leader_end))) => {
                self.truncate_to_leader_end(map, tp, end, leader_epoch, leader_end)
            }
            Err(e) => {
                let transport = e.kind().is_transport();
                let wait = if transport {
                    let what = format!("OffsetForLeaderEpoch to {}", self.leader.describe());
                    self.failures.failed(&what, &e, self.shared.is_running())
                } else {
                    crate::log_warn!("{tp}: OffsetForLeaderEpoch failed: {e:#}");
                    self.params.backoff
                };
                self.close_leader();
                delay(map, tp, wait);
                return transport.then_some(wait);
            }
        }
        None
    }

    /// The leader's `leader_epoch` ends at `leader_end`: truncate the local log (ending at
    /// `end`) to where both agree, once the leader proved it serves the same topic.
    fn truncate_to_leader_end(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        end: i64,
        leader_epoch: i32,
        leader_end: i64,
    ) {
        let target = if leader_epoch < 0 || leader_end < 0 {
            end
        } else {
            match self.replica.end_offset_for_epoch(tp, leader_epoch) {
                Some((e, local_end)) if e == leader_epoch => local_end.min(leader_end),
                Some((_, local_end)) => local_end,
                None => self.replica.log_start_offset(tp).unwrap_or(0),
            }
        };
        if target < end {
            if !self.same_identity(map, tp) {
                return;
            }
            crate::log_warn!(
                "{tp}: leader's epoch {leader_epoch} ends at {leader_end}; truncating {end} → {target}"
            );
        }
        let reason = format!(
            "diverging epoch: the leader's epoch {leader_epoch} ends at offset {leader_end}"
        );
        match self.replica.truncate(tp, target, &reason) {
            Ok(()) => self.resume_at_log_end(map, tp, target),
            Err(e) => self.fail(map, tp, &format!("truncation failed: {e:#}")),
        }
    }
}
