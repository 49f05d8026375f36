//! Assignment: which partitions are wanted, which fetcher fetches each from which leader,
//! and where each starts (Kafka's `addFetcherForPartitions` and `removeFetcherForPartitions`).

use super::seams::{EndpointFactory, MetadataSource};
use super::{
    Assignment, FetcherManager, FetcherThread, NOT_FOLLOWED, NewPartitions, Said, fetcher_id,
    fetcher_name, log_figures, write_partition_list,
};
use crate::checkpoint::TopicPartition;
use crate::client::cluster::MetadataError;
use crate::config::{OnTopicRecreated, StartPosition};
use crate::fetcher::abstract_fetcher::{AbstractFetcher, FetchParams};
use crate::fetcher::partition_map::{FetchStatus, PartitionFetchState};
use crate::fetcher::replica_fetcher::ReplicaLogOps;
use crate::fetcher::shared::FetcherShared;
use crate::fetcher::shutdownable::ShutdownableThread;
use crate::log::data_dir::DataDir;
use crate::log::identity;
use crate::log::manager::lock_log;
use crate::log::resources::{Exhausted, descriptors};
use crate::protocol::error::ErrorCode;
use anyhow::{Context, Result, anyhow};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one round of [`FetcherManager::reconcile`] is to start.
struct Round {
    /// New partitions by fetcher (broker, fetcher id).
    to_add: BTreeMap<(i32, usize), NewPartitions>,
    /// Those going back to the leader that handed them back: not news.
    again: BTreeSet<TopicPartition>,
    /// Whether every wanted partition has a leader to fetch from now.
    complete: bool,
}

/// The round's new logs that were not made: over the descriptor budget, or failed.
#[derive(Default)]
struct NewLogs {
    over_budget: BTreeSet<TopicPartition>,
    failed: HashMap<TopicPartition, anyhow::Error>,
}

impl<S: MetadataSource, E: EndpointFactory> FetcherManager<S, E> {
    /// The partitions the configuration asks for, as far as metadata knows them, and whether
    /// metadata knew every one.
    pub(super) fn wanted(&mut self) -> (Vec<(TopicPartition, StartPosition)>, bool) {
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
                    self.live.set_state(
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
        self.live.set_missing_topics(missing);
        (out, all_known)
    }

    /// `topic` is not on the leader: its followed partitions with a local log that no fetcher
    /// has (any more) show as not found, not as whatever they last were.
    pub(super) fn not_found(&self, topic: &str) {
        for (tp, _) in self.logs.all() {
            if tp.topic == topic && !self.assigned.contains_key(&tp) && self.follows(&tp) {
                self.live.set_state(&tp, crate::live::State::NotFound, None);
            }
        }
    }

    /// One round: refresh metadata, (re)assign partitions, stop idle fetchers. Returns whether
    /// every wanted partition has a fetcher.
    pub(super) fn reconcile(&mut self) -> Result<bool, MetadataError> {
        self.refresh_metadata()?;
        if !self.check_cluster() {
            return Ok(false);
        }
        self.stop_unfollowed();
        let (wanted, all_known) = self.wanted();
        let mut wanted = self.check_topic_ids(wanted);
        self.retry_failed();
        wanted.retain(|(tp, _)| !self.failed.contains_key(tp));
        self.hand_backs
            .retain(|_, hb| hb.last.elapsed() < Duration::from_secs(60));
        let round = self.plan(wanted);
        if self.stop.is_stopping() {
            return Ok(false);
        }
        let offsets = self.initial_offsets(&round.to_add);
        let made = self.create_new_logs(&round.to_add, &offsets);
        let (waiting, all_started) = self.start(round.to_add, &offsets, made, &round.again)?;
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
        self.stop_idle_fetchers();
        Ok(all_known && round.complete && all_started)
    }

    /// Where each wanted partition is to be fetched from: those whose leader or epoch changed
    /// leave their old fetcher and are grouped by their new one.
    fn plan(&mut self, wanted: Vec<(TopicPartition, StartPosition)>) -> Round {
        let n = self.cfg.fetch.fetchers_per_broker;
        let mut round = Round {
            to_add: BTreeMap::new(),
            again: BTreeSet::new(),
            complete: true,
        };
        for (tp, start) in wanted {
            let Some(leader) = self.metadata.leader(&tp) else {
                continue;
            };
            if leader.leader_id < 0
                || !leader.error.is_ok()
                || self.metadata.broker_addr(leader.leader_id).is_none()
            {
                round.complete = false;
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
                round.complete = false;
                continue;
            }
            if same_as_before {
                // Its hand-back was said; going back to the same leader is not news.
                round.again.insert(tp.clone());
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
            round
                .to_add
                .entry((target.broker, target.fetcher_id))
                .or_default()
                .push((tp, start, target.leader_epoch));
        }
        round
    }

    /// Makes the round's new logs together (one sync for them all, see
    /// `LogManager::create_logs`) before any of them is handed to a fetcher or named by a
    /// checkpoint; the fetchers then start them in shared requests. Each new log keeps a
    /// descriptor open: only as many are made as the limit allows, the rest wait (said once)
    /// and are made once descriptors free up.
    fn create_new_logs(
        &mut self,
        to_add: &BTreeMap<(i32, usize), NewPartitions>,
        offsets: &HashMap<TopicPartition, Result<i64, String>>,
    ) -> NewLogs {
        let mut budget = descriptors::log_budget();
        let mut made = NewLogs::default();
        let mut batch = Vec::new();
        for (tp, _, _) in to_add.values().flatten() {
            if self.logs.get(tp).is_some() {
                continue;
            }
            if let Some(Ok(offset)) = offsets.get(tp) {
                if budget == 0 {
                    made.over_budget.insert(tp.clone());
                    continue;
                }
                budget -= 1;
                let topic_id = self.metadata.topic_ids.get(&tp.topic).copied();
                batch.push((tp.clone(), *offset, topic_id));
            }
        }
        if !batch.is_empty() && !self.stop.is_stopping() {
            for (tp, created) in self.logs.create_logs(&batch) {
                if let Err(e) = created {
                    made.failed
                        .insert(tp, e.context("cannot create its local log"));
                }
            }
        }
        made
    }

    /// Hands each fetcher its new partitions with their initial positions. Returns how many
    /// partitions wait for a descriptor, and whether every one started; a partition that
    /// cannot start is said once.
    fn start(
        &mut self,
        to_add: BTreeMap<(i32, usize), NewPartitions>,
        offsets: &HashMap<TopicPartition, Result<i64, String>>,
        mut made: NewLogs,
        again: &BTreeSet<TopicPartition>,
    ) -> Result<(usize, bool)> {
        let mut waiting = 0usize;
        let mut all_started = true;
        for ((broker, fid), parts) in to_add {
            let mut states = Vec::new();
            for (tp, _, epoch) in parts {
                if self.stop.is_stopping() {
                    break;
                }
                if made.over_budget.contains(&tp) {
                    waiting += 1;
                    all_started = false;
                    continue;
                }
                let state = match made.failed.remove(&tp) {
                    Some(e) => Err(e),
                    None => self.initial_state(offsets, &tp, epoch),
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
                    Err(e) if Exhausted::of(&e) == Some(Exhausted::Descriptors) => {
                        waiting += 1;
                        all_started = false;
                    }
                    Err(e) => {
                        all_started = false;
                        self.report_once(Said::CannotStart(tp.clone(), e.to_string()), || {
                            format!("{tp}: cannot set the initial fetch position: {e:#}")
                        });
                    }
                }
            }
            if !states.is_empty() {
                self.hand_to_fetcher(broker, fid, states, again)?;
            }
        }
        Ok((waiting, all_started))
    }

    /// Gives `states` to fetcher `fid` of `broker` (started if need be) and says so: a few
    /// partitions one by one, many (a first start) in one line.
    fn hand_to_fetcher(
        &mut self,
        broker: i32,
        fid: usize,
        states: Vec<(TopicPartition, PartitionFetchState)>,
        again: &BTreeSet<TopicPartition>,
    ) -> Result<()> {
        let shared = self.fetcher(broker, fid)?;
        let news = states.iter().filter(|(tp, _)| !again.contains(tp)).count();
        let one_by_one = news <= 10;
        for (tp, st) in &states {
            self.live
                .assigned(tp, broker, st.current_leader_epoch, st.fetch_offset);
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
        Ok(())
    }

    /// Stops the fetchers that have nothing left to do.
    fn stop_idle_fetchers(&mut self) {
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
    }

    /// Pins the data dir to the cluster the leader reports (Metadata v2+): recorded on first
    /// contact; on a different id every fetcher stops until the right cluster answers again.
    /// Returns whether fetching may go on.
    pub(super) fn check_cluster(&mut self) -> bool {
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
    pub(super) fn stop_every_fetcher(&mut self) {
        self.join_fetchers();
        let assigned = std::mem::take(&mut self.assigned);
        self.handed_back.extend(assigned);
    }

    /// Whether the configuration follows `tp`.
    pub(super) fn follows(&self, tp: &TopicPartition) -> bool {
        self.cfg.follow.iter().any(|f| {
            f.topic == tp.topic
                && f.partitions
                    .as_ref()
                    .is_none_or(|ps| ps.contains(&tp.partition))
        })
    }

    /// Stops the partitions a reload took out of `follow` (by the configuration, not by
    /// what the leader's metadata says): their logs and checkpoint entries stay.
    pub(super) fn stop_unfollowed(&mut self) {
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
                    self.live.stopped(&tp, NOT_FOLLOWED, &figures);
                }
                None => self.live.remove(&tp),
            }
            crate::log_info!(
                "{tp}: no longer in `follow`: fetching stopped; its log and checkpoint entries stay"
            );
        }
    }

    /// Stops fetching `tp` wherever it is fetched.
    pub(super) fn unassign(&mut self, tp: &TopicPartition) {
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
    pub(super) fn check_topic_ids(
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
                        self.live.set_state(
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
    pub(super) fn record_stopped(&mut self, stopped: BTreeMap<TopicPartition, String>) {
        let path = self.logs.data_dir().join(DataDir::STOPPED_PARTITIONS_FILE);
        let reasons = stopped.iter().map(|(tp, why)| (tp, why.as_str()));
        write_partition_list(&path, reasons, &mut self.stopped_written);
    }

    /// The fetcher thread for (broker, fetcher id), started if needed.
    pub(super) fn fetcher(&mut self, broker: i32, fid: usize) -> Result<Arc<FetcherShared>> {
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
            ReplicaLogOps::new(self.logs.clone(), self.live),
            params,
            self.fetcher_events.clone(),
            self.live,
        );
        let thread =
            ShutdownableThread::start(&name, shared.clone(), self.live, move || fetcher.do_work())
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
    pub(super) fn initial_offsets(
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

    pub(super) fn list_initial_offsets(
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
    pub(super) fn initial_state(
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
