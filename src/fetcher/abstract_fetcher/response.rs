//! The response path: a received Fetch response is validated, the next request pipelined,
//! the data appended, and each partition's outcome applied.

use super::{AbstractFetcher, is_full, partitions_in};
use crate::checkpoint::TopicPartition;
use crate::client::ConnectionError;
use crate::fetcher::backoff::delay;
use crate::fetcher::fetch_session::ResponseVerdict;
use crate::fetcher::leader_endpoint::FetchFrame;
use crate::fetcher::leader_endpoint::LeaderEndPoint;
use crate::fetcher::partition_map::FetchStatus;
use crate::fetcher::partition_map::PartitionMap;
use crate::fetcher::replica_ops::{ReplicaOps, ValidatedFetch};
use crate::fetcher::shutdownable::ShutdownSignal;
use crate::live::Live;
use crate::log::AppendError;
use crate::logging::Human;
use crate::protocol::error::{ErrorAction, ErrorCode};
use crate::protocol::fetch::{DivergingEpoch, FetchPartitionResponse, FetchRequest, FetchResponse};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How many record bytes a response must bring before its successor is received on a second
/// thread while it is appended: below this, a thread costs more than the overlap saves.
const OVERLAP_MIN_BYTES: usize = 1 << 20;

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

/// An outcome that needs requests to the leader, kept for after the response: the
/// partition, the fetch offset and leader epoch it was fetched under, and the outcome.
type FollowUp = (TopicPartition, i64, i32, Outcome);

/// The offset each answered partition was fetched from.
type Requested = BTreeMap<TopicPartition, i64>;

/// What validating a response found.
struct Validation<V> {
    /// Each current partition's records, validated once.
    validated: BTreeMap<TopicPartition, Result<V, AppendError>>,
    /// Where each partition that brought data will be once it is appended, if all goes
    /// well: the offsets (and last epochs) a pipelined request starts at.
    ahead: BTreeMap<TopicPartition, (i64, Option<i32>)>,
    /// No partition truncating, erring, diverging, behind the high watermark or refused:
    /// the next request may go out before this response is written.
    healthy: bool,
}

/// Every partition's part of a response.
fn partition_data<'r, 'b>(
    resp: &'r FetchResponse<'b>,
) -> impl Iterator<Item = (TopicPartition, &'r FetchPartitionResponse<'b>)> {
    resp.topics.iter().flat_map(|(topic, parts)| {
        parts
            .iter()
            .map(move |data| (TopicPartition::new(topic.clone(), data.partition), data))
    })
}

/// Whether the partition is still where it was fetched from: the manager may have removed
/// or reset it while the fetch was out.
fn still_at(map: &PartitionMap, tp: &TopicPartition, fetch_offset: i64) -> bool {
    map.get(tp)
        .is_some_and(|s| s.fetch_offset == fetch_offset && s.status == FetchStatus::Fetching)
}

impl<L: LeaderEndPoint, R: ReplicaOps> AbstractFetcher<L, R> {
    /// Receives the response to `req` and handles it in four steps: validate, pipeline the
    /// next request, append, apply each partition's outcome.
    ///
    /// Pipelining: when every partition in the response is healthy and at least one brought
    /// data, the next request — at the offsets after this response's last whole batches — is
    /// sent *before* this response is verified and written, so the leader prepares it while
    /// the disk write runs. If a partition's append then fails, its state does not advance,
    /// and the pipelined response's data for it is ignored (its fetch offset no longer
    /// matches). Rounds that need other requests (OffsetOutOfRange, divergence, leader
    /// lookups) never pipeline.
    pub fn process_fetch_request(&mut self, req: &FetchRequest) {
        let Some(frame) = self.receive(req) else {
            return;
        };
        let resp = match frame.decode() {
            Ok(r) => r,
            Err(e) => {
                let e = e.context(format!(
                    "{}: bad Fetch v{} response",
                    self.leader.describe(),
                    frame.version
                ));
                return self.fetch_failed(req, &ConnectionError::failed(e));
            }
        };
        self.failures.succeeded(|| self.leader.describe());
        let full = is_full(req);
        let requested = self.requested(req, &resp, full);
        if !resp.error.is_ok() {
            self.response_failed(req, resp.error, resp.session_id);
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
        let shared = self.shared.clone();
        let mut map = shared.lock();
        let Validation {
            validated,
            ahead,
            healthy,
        } = self.validate(&mut map, &resp, &requested);
        if healthy {
            self.pipeline(&mut map, &ahead);
        }
        let mut follow_ups = self.append(&mut map, &resp, &requested, validated);
        if full {
            follow_ups.extend(self.left_out(&map, &resp, &requested, frame.version));
        }
        drop(map);
        drop(resp);
        self.leader.recycle(frame);
        // Follow-ups send their own requests: only when nothing is pipelined (an unhealthy
        // response never pipelines, so this holds whenever there are follow-ups).
        if self.in_flight.is_some() && !follow_ups.is_empty() {
            self.close_leader();
            self.in_flight = None;
            if let Some((Ok(f), _)) = self.prefetched.take() {
                self.leader.recycle(f);
            }
        }
        self.follow_up(follow_ups);
    }

    /// The response to `req`, received while the last one was appended or now; `None` when
    /// none came (the fetch failed).
    fn receive(&mut self, req: &FetchRequest) -> Option<FetchFrame> {
        let (frame, arrived) = match self.prefetched.take() {
            Some(got) => got,
            None => (self.leader.receive_fetch(), Instant::now()),
        };
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                self.fetch_failed(req, &e);
                return None;
            }
        };
        if let Some(t) = self.sent_at.take() {
            self.live
                .observe_fetch(arrived.saturating_duration_since(t));
        }
        Some(frame)
    }

    /// The offset each answered partition was fetched from: a full request names them all;
    /// an incremental one only those that changed, the session holds the rest. Only the
    /// partitions answered are looked up, so an idle round costs nothing per partition.
    fn requested(&self, req: &FetchRequest, resp: &FetchResponse<'_>, full: bool) -> Requested {
        if full {
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
        }
    }

    /// A response whose top-level error fails all of it: a lost or refused session starts
    /// over with a full fetch; any other error backs every partition fetched off.
    fn response_failed(&mut self, req: &FetchRequest, error: ErrorCode, session_id: i32) {
        // Taken before the session may go.
        let fetched = self.fetched_by(req);
        self.session
            .handle_response(error, session_id, Instant::now());
        if error.action() == ErrorAction::ResetSession {
            return self.session_ended(req, error);
        }
        crate::log_warn!(
            "fetch from {} failed with {}",
            self.leader.describe(),
            error
        );
        let shared = self.shared.clone();
        let mut map = shared.lock();
        for tp in &fetched {
            delay(&mut map, tp, self.params.backoff);
        }
    }

    /// The leader lost or refused the session: a full fetch opens a new one at once, and
    /// nothing is lost (no offset moved). Said once a minute at most: a leader that keeps
    /// refusing is not a storm.
    fn session_ended(&mut self, req: &FetchRequest, error: ErrorCode) {
        let now = Instant::now();
        let line = format!(
            "fetch session {} (epoch {}) with {} ended with {}; starting a new one with a full fetch",
            req.session_id,
            req.session_epoch,
            self.leader.describe(),
            error
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
    }

    /// Step 1: validates each current partition's records once, writing nothing.
    fn validate<'b>(
        &self,
        map: &mut PartitionMap,
        resp: &FetchResponse<'b>,
        requested: &Requested,
    ) -> Validation<R::Validated<'b>> {
        let mut checked = Validation {
            validated: BTreeMap::new(),
            ahead: BTreeMap::new(),
            healthy: !map.any_truncating(),
        };
        for (tp, data) in partition_data(resp) {
            if !data.error.is_ok() || data.diverging_epoch.is_some() {
                checked.healthy = false;
                continue;
            }
            let Some(&fetch_offset) = requested.get(&tp) else {
                continue;
            };
            if data.high_watermark < fetch_offset {
                checked.healthy = false;
            }
            if !still_at(map, &tp, fetch_offset) {
                continue;
            }
            let v = self.replica.validate(&tp, fetch_offset, data);
            match &v {
                Ok(v) if v.refused().is_some() => checked.healthy = false,
                Ok(v) if v.next_fetch_offset() > fetch_offset => {
                    checked
                        .ahead
                        .insert(tp.clone(), (v.next_fetch_offset(), v.last_epoch()));
                }
                Ok(_) => {}
                Err(_) => checked.healthy = false,
            }
            checked.validated.insert(tp, v);
        }
        checked
    }

    /// Step 2, for a healthy response: sends the request at the offsets in `ahead` before
    /// this response is written.
    fn pipeline(
        &mut self,
        map: &mut PartitionMap,
        ahead: &BTreeMap<TopicPartition, (i64, Option<i32>)>,
    ) {
        if ahead.is_empty() || !self.shared.is_running() || self.replica.paused() {
            return;
        }
        let Some(next_req) = self.request_for(map, ahead) else {
            return;
        };
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

    /// Step 3: appends what was validated and applies the outcomes that need no request;
    /// returns the others. With the next request on its way and much to write, its response
    /// is received on a second thread meanwhile: the socket copy and the page-cache copy of
    /// the same bytes overlap instead of taking turns (the leader keeps sending meanwhile
    /// only as far as the socket buffers reach).
    fn append<'b>(
        &mut self,
        map: &mut PartitionMap,
        resp: &FetchResponse<'b>,
        requested: &Requested,
        mut validated: BTreeMap<TopicPartition, Result<R::Validated<'b>, AppendError>>,
    ) -> Vec<FollowUp> {
        let to_write: usize = resp
            .topics
            .iter()
            .flat_map(|(_, ps)| ps.iter().map(|p| p.records.len()))
            .sum();
        let overlap = self.in_flight.is_some() && to_write >= OVERLAP_MIN_BYTES;
        let mut appender = Appender {
            replica: &mut self.replica,
            live: self.live,
            backoff: self.params.backoff,
            round: &mut self.round,
        };
        let leader = &mut self.leader;
        let (follow_ups, prefetched) = std::thread::scope(|scope| {
            let receiving = overlap.then(|| {
                scope.spawn(move || {
                    let got = leader.receive_fetch();
                    (got, Instant::now())
                })
            });
            let mut follow_ups = Vec::new();
            for (tp, data) in partition_data(resp) {
                let Some(&fetch_offset) = requested.get(&tp) else {
                    continue;
                };
                if !still_at(map, &tp, fetch_offset) {
                    continue;
                }
                let v = validated.remove(&tp);
                follow_ups.extend(appender.partition(map, tp, fetch_offset, data, v));
            }
            let prefetched = receiving.map(|h| {
                h.join().unwrap_or_else(|_| {
                    (
                        Err(ConnectionError::failed(anyhow::anyhow!(
                            "receiving a fetch response failed"
                        ))),
                        Instant::now(),
                    )
                })
            });
            (follow_ups, prefetched)
        });
        self.prefetched = prefetched;
        follow_ups
    }

    /// A full response answers every partition asked for (an incremental one only those
    /// with something new). One left out was answered under another name — at v13 a leader
    /// whose topic was re-created may answer for an id it does not know with a zero id — so
    /// its leader and identity are looked up again.
    fn left_out(
        &self,
        map: &PartitionMap,
        resp: &FetchResponse<'_>,
        requested: &Requested,
        version: i16,
    ) -> Vec<FollowUp> {
        let answered: BTreeSet<TopicPartition> =
            partitions_in(&resp.topics, |p| p.partition).collect();
        let mut follow_ups = Vec::new();
        for (tp, &fetch_offset) in requested {
            if !answered.contains(tp)
                && let Some(state) = map.get(tp)
                && state.fetch_offset == fetch_offset
                && state.status == FetchStatus::Fetching
            {
                let epoch = state.current_leader_epoch;
                follow_ups.push((
                    tp.clone(),
                    fetch_offset,
                    epoch,
                    Outcome::NeedsLeader(format!(
                        "the Fetch v{version} response from {} left it out",
                        self.leader.describe()
                    )),
                ));
            }
        }
        follow_ups
    }

    /// Step 4 for the outcomes that need requests to the leader: runs the follow-ups of a
    /// round (they send their own requests) under the partition-map lock, as Kafka does. A
    /// partition changed meanwhile (moved away, reset) is left alone; once the leader proves
    /// unreachable, the remaining partitions back off instead of each waiting for it.
    fn follow_up(&mut self, items: Vec<FollowUp>) {
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
}

/// What appending needs of the fetcher while its leader receives the next response on
/// another thread.
struct Appender<'a, R: ReplicaOps> {
    replica: &'a mut R,
    live: &'static Live,
    backoff: Duration,
    /// The fetcher's count of partitions that brought data (see `last_data_round`).
    round: &'a mut u64,
}

impl<R: ReplicaOps> Appender<'_, R> {
    /// One current partition's part of the response: its outcome, applied at once unless it
    /// needs requests to the leader (then it is returned).
    fn partition<'b>(
        &mut self,
        map: &mut PartitionMap,
        tp: TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'b>,
        validated: Option<Result<R::Validated<'b>, AppendError>>,
    ) -> Option<FollowUp> {
        let leader_epoch = map.get(&tp).map_or(-1, |s| s.current_leader_epoch);
        if data.error.is_ok() && data.high_watermark >= 0 {
            self.live.leader_high_watermark(&tp, data.high_watermark);
        }
        match self.outcome(map, &tp, fetch_offset, data, validated) {
            Outcome::Advanced(next) => {
                *self.round += 1;
                if let Some(s) = map.get_mut(&tp) {
                    s.fetch_offset = next;
                    s.delayed_until = None;
                    s.last_data_round = *self.round;
                }
            }
            Outcome::Delay => delay(map, &tp, self.backoff),
            Outcome::Failed(reason) => {
                // As `fail`, which would borrow the leader being received on.
                map.remove(&tp);
                self.replica.mark_failed(&tp, &reason);
            }
            Outcome::Unchanged => {}
            other => return Some((tp, fetch_offset, leader_epoch, other)),
        }
        None
    }

    /// What the partition's part of the response means.
    fn outcome<'b>(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'b>,
        validated: Option<Result<R::Validated<'b>, AppendError>>,
    ) -> Outcome {
        if let Some(d) = data.diverging_epoch {
            return Outcome::Diverged(d);
        }
        if data.error.is_ok() && data.high_watermark < fetch_offset {
            match validated {
                Some(Err(e)) => crate::log_error!(
                    "{tp} at offset {fetch_offset}: {e}; backing off {}",
                    Human(self.backoff)
                ),
                _ => crate::log_debug!(
                    "{tp}: the leader's high watermark {} is below the fetch offset {fetch_offset}",
                    data.high_watermark
                ),
            }
            return Outcome::CheckIdentity;
        }
        match data.error.action() {
            ErrorAction::None => self.append(map, tp, fetch_offset, data, validated),
            ErrorAction::OffsetOutOfRange => Outcome::OutOfRange,
            ErrorAction::RefreshMetadata => {
                Outcome::NeedsLeader(format!("leader answered {}", data.error))
            }
            ErrorAction::Retry | ErrorAction::ResetSession => {
                self.live.backing_off(
                    tp,
                    data.error.name(),
                    &format!("leader answered {}", data.error),
                );
                crate::log_warn!(
                    "{tp}: leader answered {}; retrying in {}",
                    data.error,
                    Human(self.backoff)
                );
                Outcome::Delay
            }
            ErrorAction::Fatal => self.fatal(map, tp, data.error),
        }
    }

    /// An error the leader will keep answering: the partition waits 30 backoffs.
    fn fatal(&mut self, map: &mut PartitionMap, tp: &TopicPartition, error: ErrorCode) -> Outcome {
        self.live
            .backing_off(tp, error.name(), &format!("leader answered {error}"));
        crate::log_error!(
            "{tp}: leader answered {error}; retrying in {}",
            Human(self.backoff * 30)
        );
        if let Some(s) = map.get_mut(tp) {
            s.delayed_until = Some(Instant::now() + self.backoff * 30);
        }
        Outcome::Unchanged
    }

    /// Appends what validation accepted: the partition advances, or backs off after the
    /// valid batches when later ones were refused.
    fn append<'b>(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'b>,
        validated: Option<Result<R::Validated<'b>, AppendError>>,
    ) -> Outcome {
        let mut refused = None;
        let appended = match validated {
            Some(Ok(v)) => {
                refused = v.refused().map(str::to_string);
                self.replica.append(tp, fetch_offset, v, data)
            }
            Some(Err(e)) => Err(e),
            None => Ok(fetch_offset),
        };
        if let (Ok(_), Some(why)) = (&appended, &refused) {
            crate::log_error!(
                "{tp} at offset {fetch_offset}: {why}; backing off {}",
                Human(self.backoff)
            );
            self.live.backing_off(tp, "refused", why);
        }
        match appended {
            Ok(next) if refused.is_some() => {
                if let Some(s) = map.get_mut(tp) {
                    s.fetch_offset = next;
                }
                Outcome::Delay
            }
            Ok(next) if next != fetch_offset => Outcome::Advanced(next),
            Ok(_) => Outcome::Unchanged,
            Err(e) => self.append_failed(map, tp, fetch_offset, e),
        }
    }

    /// Records that failed validation or an append that failed: the partition backs off
    /// from wherever the log really ends, is failed, or its leader is asked who it is.
    fn append_failed(
        &mut self,
        map: &mut PartitionMap,
        tp: &TopicPartition,
        fetch_offset: i64,
        e: AppendError,
    ) -> Outcome {
        self.live.backing_off(tp, e.kind(), &e.to_string());
        // Bytes that can never be valid, and the disk failing, are errors; offsets that do
        // not follow are a warning (a leader change or a re-created topic is looked into).
        match &e {
            // Said once by the data dir, or once a minute for the process, not per partition.
            AppendError::DiskFull(_) | AppendError::Exhausted(_) => {}
            // Said once by the log manager, which fails it.
            AppendError::Storage(_) => {}
            AppendError::InvalidData(_) => crate::log_error!(
                "{tp} at offset {fetch_offset}: {e}; backing off {}",
                Human(self.backoff)
            ),
            AppendError::OffsetMismatch(_) => crate::log_warn!(
                "{tp} at offset {fetch_offset}: {e}; backing off {}",
                Human(self.backoff)
            ),
        }
        // A failed append may have written part of the response (a roll failed midway), or
        // the log may have moved under us: fetch on from wherever the log really ends.
        if let (Some(end), Some(s)) = (self.replica.log_end_offset(tp), map.get_mut(tp)) {
            s.fetch_offset = end;
        }
        // Offsets that do not follow the local log are what a re-created topic looks like:
        // ask the leader who it is.
        match e {
            AppendError::OffsetMismatch(_) => Outcome::CheckIdentity,
            AppendError::Storage(e) => Outcome::Failed(format!("{e:#}")),
            _ => Outcome::Delay,
        }
    }
}
