//! The response path: a received Fetch response is validated, the next request pipelined,
//! the data appended, and each partition's outcome applied.

use super::{AbstractFetcher, is_full, partitions_in};
use crate::checkpoint::TopicPartition;
use crate::fetcher::backoff::delay;
use crate::fetcher::fetch_session::ResponseVerdict;
use crate::fetcher::leader_endpoint::LeaderEndPoint;
use crate::fetcher::partition_map::FetchStatus;
use crate::fetcher::replica_ops::{ReplicaOps, ValidatedFetch};
use crate::fetcher::shutdownable::ShutdownSignal;
use crate::log::AppendError;
use crate::logging::Human;
use crate::protocol::error::ErrorAction;
use crate::protocol::fetch::{DivergingEpoch, FetchRequest};
use std::collections::BTreeMap;
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

impl<L: LeaderEndPoint, R: ReplicaOps> AbstractFetcher<L, R> {
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
}
