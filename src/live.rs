//! What the running daemon knows now, beyond its checkpoint files: per partition the leader,
//! the leader's high watermark and last stable offset from the last fetch, the state of its
//! fetching and the last error; and each thread's last sign of progress, for the watchdog.
//!
//! Fetchers, the replica side and the manager write it as things happen, each change moving
//! a generation counter; the monitor task in the daemon publishes it as
//! `<data_dir>/.live-status` (TOML, replaced atomically, not fsynced: it is not a checkpoint)
//! when the generation moved, and otherwise refreshes the file's mtime every second, which
//! `status` reads while the daemon runs; and it sums the state up in systemd's STATUS= line.

use crate::checkpoint::TopicPartition;
use crate::log::data_dir::DataDir;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How a partition's fetching stands (written as `as_str` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum State {
    /// Assigned to a fetcher, no answer yet.
    #[default]
    #[serde(rename = "starting")]
    Starting,
    /// Fetching, behind the leader's high watermark.
    #[serde(rename = "fetching")]
    Fetching,
    /// At the leader's high watermark.
    #[serde(rename = "caught up")]
    CaughtUp,
    /// Waiting after an error (see `error`).
    #[serde(rename = "backing off")]
    BackingOff,
    /// Finding where the local log and the leader's agree.
    #[serde(rename = "truncating")]
    Truncating,
    /// A local storage error failed it (see `error`).
    #[serde(rename = "failed")]
    Failed,
    /// Not fetched: its partition is not on the leader.
    #[serde(rename = "not found on the leader")]
    NotFound,
    /// Not fetched by choice: not in `follow` (any more), or `on_topic_recreated = "stop"`.
    #[serde(rename = "stopped")]
    Stopped,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Fetching => "fetching",
            State::CaughtUp => "caught up",
            State::BackingOff => "backing off",
            State::Truncating => "truncating",
            State::Failed => "failed",
            State::NotFound => "not found on the leader",
            State::Stopped => "stopped",
        }
    }
}

/// One partition's live figures (`None` where unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionLive {
    pub leader: Option<i32>,
    pub leader_epoch: Option<i32>,
    pub leader_high_watermark: Option<i64>,
    pub last_stable_offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub high_watermark: Option<i64>,
    pub state: State,
    pub error: Option<String>,
    pub last_fetch_ms: Option<i64>,
    pub newest_timestamp_ms: Option<i64>,
    pub log_start_offset: Option<i64>,
    /// Counters since the daemon started.
    #[serde(default)]
    pub bytes_appended: u64,
    #[serde(default)]
    pub batches_appended: u64,
    /// Errors that made it back off, by kind.
    #[serde(default)]
    pub fetch_errors: BTreeMap<String, u64>,
    /// Fetches stopped getting answers (the leader unreachable, or no leader known) since the
    /// leader's high watermark was last reported: the lag measured against it is the last
    /// known one, not the lag now. Cleared by the next answer that reports it.
    #[serde(default)]
    pub lag_stale: bool,
}

impl PartitionLive {
    /// How far the local log end is behind what it can fetch — the leader's high watermark,
    /// or under `read_committed` its last stable offset — while it is fetched and the leader
    /// answers (`None` for a partition failed, stopped or not found: its figures are frozen;
    /// and `None` while the leader does not answer: see [`Self::last_known_lag`]).
    pub fn lag(&self) -> Option<i64> {
        if self.lag_stale {
            return None;
        }
        self.measured_lag()
    }

    /// While the leader does not answer: the lag at its last answer, and when that was
    /// (`last_fetch_ms`, when known). At least the lag now, as long as the leader only grew
    /// meanwhile: this replica appended nothing since.
    pub fn last_known_lag(&self) -> Option<(i64, Option<i64>)> {
        if !self.lag_stale {
            return None;
        }
        self.measured_lag().map(|l| (l, self.last_fetch_ms))
    }

    /// Whether its lag is followed at all: false for a partition failed, stopped or not
    /// found, whose figures are frozen.
    pub fn lag_followed(&self) -> bool {
        !matches!(self.state, State::Failed | State::Stopped | State::NotFound)
    }

    /// The local log end against the leader's figures from its last answer, whenever that was.
    fn measured_lag(&self) -> Option<i64> {
        if !self.lag_followed() {
            return None;
        }
        let target = if READ_COMMITTED.load(std::sync::atomic::Ordering::Relaxed) {
            self.last_stable_offset.or(self.leader_high_watermark)?
        } else {
            self.leader_high_watermark?
        };
        Some((target - self.log_end_offset?).max(0))
    }
}

/// How often a partition's `last_fetch_ms` moves when its answers bring nothing new: a
/// session's leaving it out, or a sessionless leader's answering it with no change.
pub const LAST_FETCH_EVERY: Duration = Duration::from_secs(30);

/// Whether a last fetch time noted at `at` (ms) is due to move at `now` (ms): it is
/// [`LAST_FETCH_EVERY`] old, or from the future (the clock was set back).
fn last_fetch_due(at: i64, now: i64) -> bool {
    let every = i64::try_from(LAST_FETCH_EVERY.as_millis()).unwrap_or(i64::MAX);
    at > now || now.saturating_sub(at) >= every
}

/// Upper bounds (seconds) of the fetch latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Fetch latencies: counts per bucket (not cumulative), their sum and count.
#[derive(Debug, Default, Clone)]
pub struct Histogram {
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    pub sum: f64,
    pub count: u64,
}

/// The kinds of failed metadata refresh, the `error` label of
/// `replica_follower_metadata_errors_total`: no broker answered (`unreachable`), one refused
/// our TLS or SASL settings (`refused`), or an answer could not be used (`failed`).
pub const METADATA_ERROR_KINDS: [&str; 3] = ["unreachable", "refused", "failed"];

/// How the leader's cluster answers the manager's metadata refreshes, and what of the
/// configuration has nothing to show for it yet. The manager writes it on its metadata path
/// (never a fetcher); `status` and the metrics read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaderLive {
    /// The last metadata refresh was answered (`false` before the first answer).
    #[serde(default)]
    pub reachable: bool,
    /// When a refresh was last answered (ms since the epoch); `None`: never since the start.
    pub last_success_ms: Option<i64>,
    /// When the refreshes started failing, while they fail.
    pub unreachable_since_ms: Option<i64>,
    /// What the last failed refresh said.
    pub last_error: Option<String>,
    /// The topics the configuration follows.
    #[serde(default)]
    pub followed_topics: Vec<String>,
    /// Failed refreshes since the start, by kind (see [`METADATA_ERROR_KINDS`]).
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
    /// Followed partitions with no local log yet: the configured ones, or for a whole topic
    /// those its metadata lists (the topic alone, `partition` absent, while none is known).
    #[serde(default)]
    pub not_yet_logged: Vec<NotYetLogged>,
}

impl LeaderLive {
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// A followed partition (or whole topic) with no local log yet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct NotYetLogged {
    pub topic: String,
    pub partition: Option<i32>,
}

#[derive(Debug)]
pub struct Live {
    parts: Mutex<BTreeMap<TopicPartition, PartitionLive>>,
    latency: Mutex<Histogram>,
    /// Followed topics the leader does not know.
    missing_topics: Mutex<BTreeSet<String>>,
    /// What the metadata refreshes found; changes move the generation.
    leader: Mutex<LeaderLive>,
    /// When this state was made (ms since the epoch: the daemon's start, near enough). The
    /// last-metadata-success figure says it until the first success, so that an alert on its
    /// age fires for a daemon that never reached its leader.
    created_ms: i64,
    beats: Mutex<BTreeMap<String, Instant>>,
    /// The offsite copy's progress, when one is configured.
    offsite: Mutex<Option<OffsiteLive>>,
    /// Moves on every change of a partition's figures or of the missing topics (after the
    /// change, under its lock): what the monitor compares to do nothing in a quiet second.
    generation: AtomicU64,
    /// Looks at every partition (see [`Live::walk`]), counted for the tests that a quiet
    /// second makes none.
    #[cfg(test)]
    walks: AtomicU64,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            parts: Mutex::default(),
            latency: Mutex::default(),
            missing_topics: Mutex::default(),
            leader: Mutex::default(),
            created_ms: crate::clock::now_ms(),
            beats: Mutex::default(),
            offsite: Mutex::default(),
            generation: AtomicU64::default(),
            #[cfg(test)]
            walks: AtomicU64::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sets `slot` to `value`, saying whether that changed it.
fn set<T: PartialEq>(slot: &mut T, value: T) -> bool {
    let changed = *slot != value;
    if changed {
        *slot = value;
    }
    changed
}

/// Sets `slot` to `value` without allocating when it already holds it, saying whether that
/// changed it.
fn set_text(slot: &mut Option<String>, value: Option<&str>) -> bool {
    let changed = slot.as_deref() != value;
    if changed {
        *slot = value.map(str::to_string);
    }
    changed
}

/// Beats for the calling thread when dropped (see [`Live::beat_current`]).
pub struct BeatOnDrop;

impl Drop for BeatOnDrop {
    fn drop(&mut self) {
        live().beat_current();
    }
}

/// Whether lag is measured against the last stable offset (`read_committed`: the follower
/// only gets that far) instead of the high watermark.
static READ_COMMITTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_read_committed(on: bool) {
    READ_COMMITTED.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The process's live state.
pub fn live() -> &'static Live {
    static LIVE: OnceLock<Live> = OnceLock::new();
    LIVE.get_or_init(Live::default)
}

/// A local log's own figures, for a partition not (yet) fetched.
#[derive(Debug, Clone, Copy)]
pub struct LogFigures {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
}

impl Live {
    /// On the fetch path for every partition of every response: no allocation once the
    /// partition is known. `f` says whether it changed anything; a new partition is a change.
    fn update(&self, tp: &TopicPartition, f: impl FnOnce(&mut PartitionLive) -> bool) {
        let mut parts = lock(&self.parts);
        let changed = match parts.get_mut(tp) {
            Some(p) => f(p),
            None => {
                f(parts.entry(tp.clone()).or_default());
                true
            }
        };
        if changed {
            self.changed();
        }
    }

    /// Something `render` or `status_line` shows changed (called after the change, with its
    /// lock held, so that a reader that saw the new generation sees the change).
    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The change counter: equal at two reads, nothing that `partitions`, `render` or
    /// `status_line` shows changed in between (the missing topics included). Read it before
    /// what it guards.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The partitions' figures locked, to look at every one of them.
    fn walk(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, PartitionLive>> {
        #[cfg(test)]
        self.walks.fetch_add(1, Ordering::Relaxed);
        lock(&self.parts)
    }

    /// How many times every partition was looked at.
    #[cfg(test)]
    pub fn walks(&self) -> u64 {
        self.walks.load(Ordering::Relaxed)
    }

    /// A fetch answered for `tp` and its records (if any) were appended.
    pub fn fetched(
        &self,
        tp: &TopicPartition,
        leader_hw: i64,
        lso: i64,
        log_end: i64,
        high_watermark: i64,
        newest_timestamp: Option<i64>,
    ) {
        let now = crate::clock::now_ms();
        self.update(tp, |p| {
            let mut changed = set(&mut p.leader_high_watermark, Some(leader_hw));
            changed |= set(&mut p.lag_stale, false);
            changed |= set(&mut p.last_stable_offset, (lso >= 0).then_some(lso));
            changed |= set(&mut p.log_end_offset, Some(log_end));
            changed |= set(&mut p.high_watermark, Some(high_watermark));
            if let Some(t) = newest_timestamp.filter(|t| *t >= 0) {
                let newest = p.newest_timestamp_ms.map_or(t, |o| o.max(t));
                changed |= set(&mut p.newest_timestamp_ms, Some(newest));
            }
            let state = if log_end >= leader_hw {
                State::CaughtUp
            } else {
                State::Fetching
            };
            changed |= set(&mut p.state, state);
            changed |= p.error.take().is_some();
            // An answer that changed nothing else moves the last fetch time only every
            // LAST_FETCH_EVERY: a sessionless leader answers for every partition every
            // round, which would otherwise rewrite `.live-status` every second.
            if changed || p.last_fetch_ms.is_none_or(|t| last_fetch_due(t, now)) {
                changed |= set(&mut p.last_fetch_ms, Some(now));
            }
            changed
        });
    }

    /// A fetch session's response came for `tps`, which it left out as having nothing new:
    /// they were fetched at `now_ms` all the same (known partitions only; one change in all).
    pub fn fetched_in_session<'a>(
        &self,
        tps: impl Iterator<Item = &'a TopicPartition>,
        now_ms: i64,
    ) {
        let mut parts = lock(&self.parts);
        let mut changed = false;
        for tp in tps {
            if let Some(p) = parts.get_mut(tp)
                && p.last_fetch_ms.is_none_or(|t| t < now_ms)
            {
                p.last_fetch_ms = Some(now_ms);
                changed = true;
            }
        }
        if changed {
            self.changed();
        }
    }

    /// The leader reported `hw` for `tp` (whatever became of the records it sent).
    pub fn leader_high_watermark(&self, tp: &TopicPartition, hw: i64) {
        self.update(tp, |p| {
            set(&mut p.leader_high_watermark, Some(hw)) | set(&mut p.lag_stale, false)
        });
    }

    /// No answer came for `tp`: its fetch failed (`error`; the leader unreachable, the
    /// connection lost), and it backs off. The lag it had is now only the last known one.
    pub fn unanswered(&self, tp: &TopicPartition, error: &str) {
        self.backing_off(tp, "fetch_failed", error);
        self.update(tp, |p| set(&mut p.lag_stale, true));
    }

    /// `tp` has no leader to fetch from while its leader is looked up (`why`): it backs off,
    /// its lag only the last known one.
    pub fn leader_lost(&self, tp: &TopicPartition, why: &str) {
        self.update(tp, |p| {
            let mut changed = set(&mut p.state, State::BackingOff);
            changed |= set_text(&mut p.error, Some(why));
            changed |= set(&mut p.lag_stale, true);
            changed
        });
    }

    /// `tp` waits after an error of `kind` (a metrics label: `invalid_data`,
    /// `fetch_failed`, a Kafka error name, …) saying `error`.
    pub fn backing_off(&self, tp: &TopicPartition, kind: &str, error: &str) {
        self.update(tp, |p| {
            p.state = State::BackingOff;
            set_text(&mut p.error, Some(error));
            match p.fetch_errors.get_mut(kind) {
                Some(n) => *n += 1,
                None => {
                    p.fetch_errors.insert(kind.to_string(), 1);
                }
            }
            true
        });
    }

    /// The local log of `tp` starts at `offset`.
    pub fn log_start(&self, tp: &TopicPartition, offset: i64) {
        self.update(tp, |p| set(&mut p.log_start_offset, Some(offset)));
    }

    /// `batches` batches of `bytes` bytes were appended to `tp`.
    pub fn appended(&self, tp: &TopicPartition, bytes: u64, batches: u64) {
        self.update(tp, |p| {
            p.bytes_appended += bytes;
            p.batches_appended += batches;
            bytes > 0 || batches > 0
        });
    }

    /// A fetch took `d` from its send to its whole response.
    pub fn observe_fetch(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let mut h = lock(&self.latency);
        if let Some((n, _)) = h
            .buckets
            .iter_mut()
            .zip(LATENCY_BUCKETS)
            .find(|(_, bound)| secs <= *bound)
        {
            *n += 1;
        }
        h.sum += secs;
        h.count += 1;
    }

    pub fn latency(&self) -> Histogram {
        lock(&self.latency).clone()
    }

    pub fn set_state(&self, tp: &TopicPartition, state: State, error: Option<&str>) {
        self.update(tp, |p| {
            set(&mut p.state, state) | set_text(&mut p.error, error)
        });
    }

    /// `tp` was given to the fetcher for `leader` at `epoch`, its log ending at `log_end`.
    pub fn assigned(&self, tp: &TopicPartition, leader: i32, epoch: i32, log_end: i64) {
        self.update(tp, |p| {
            let mut changed = set(&mut p.leader, Some(leader));
            changed |= set(&mut p.leader_epoch, Some(epoch));
            changed |= set(&mut p.log_end_offset, Some(log_end));
            if !matches!(p.state, State::Fetching | State::CaughtUp) {
                changed |= set(&mut p.state, State::Starting);
                changed |= p.error.take().is_some();
            }
            changed
        });
    }

    pub fn set_missing_topics(&self, topics: BTreeSet<String>) {
        let mut missing = lock(&self.missing_topics);
        if set(&mut *missing, topics) {
            self.changed();
        }
    }

    /// Changes what the metadata refreshes found with `f`, which says whether it changed it.
    fn update_leader(&self, f: impl FnOnce(&mut LeaderLive) -> bool) {
        let mut leader = lock(&self.leader);
        if f(&mut leader) {
            self.changed();
        }
    }

    /// A metadata refresh was answered at `now_ms`.
    pub fn metadata_answered(&self, now_ms: i64) {
        self.update_leader(|l| {
            l.reachable = true;
            l.last_success_ms = Some(now_ms);
            l.unreachable_since_ms = None;
            true
        });
    }

    /// A metadata refresh failed at `now_ms`, of `kind` (see [`METADATA_ERROR_KINDS`]),
    /// saying `error`.
    pub fn metadata_failed(&self, kind: &str, error: &str, now_ms: i64) {
        self.update_leader(|l| {
            l.reachable = false;
            l.unreachable_since_ms.get_or_insert(now_ms);
            set_text(&mut l.last_error, Some(error));
            *l.errors.entry(kind.to_string()).or_default() += 1;
            true
        });
    }

    /// The configuration follows `topics`.
    pub fn set_followed_topics(&self, topics: Vec<String>) {
        self.update_leader(|l| set(&mut l.followed_topics, topics));
    }

    /// The followed partitions with no local log now.
    pub fn set_not_yet_logged(&self, not_yet: Vec<NotYetLogged>) {
        self.update_leader(|l| set(&mut l.not_yet_logged, not_yet));
    }

    /// What the metadata refreshes found.
    /// Publishes the offsite copy's figures.
    pub fn set_offsite(&self, o: OffsiteLive) {
        let mut slot = lock(&self.offsite);
        if slot.as_ref() != Some(&o) {
            *slot = Some(o);
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }

    pub fn offsite(&self) -> Option<OffsiteLive> {
        lock(&self.offsite).clone()
    }

    pub fn leader(&self) -> LeaderLive {
        lock(&self.leader).clone()
    }

    /// The followed topics the leader does not know.
    pub fn missing_topics(&self) -> BTreeSet<String> {
        lock(&self.missing_topics).clone()
    }

    /// When this state was made (ms since the epoch).
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }

    pub fn partitions(&self) -> BTreeMap<TopicPartition, PartitionLive> {
        self.walk().clone()
    }

    /// `f` on the partitions' figures, held locked (no copy: keep `f` short, fetchers wait).
    pub fn with_partitions<R>(
        &self,
        f: impl FnOnce(&BTreeMap<TopicPartition, PartitionLive>) -> R,
    ) -> R {
        f(&self.walk())
    }

    /// A thread made progress.
    pub fn beat(&self, thread: &str) {
        let now = Instant::now();
        let mut beats = lock(&self.beats);
        match beats.get_mut(thread) {
            Some(t) => *t = now,
            None => {
                beats.insert(thread.to_string(), now);
            }
        }
    }

    /// The calling thread made progress (threads without a name are not watched).
    pub fn beat_current(&self) {
        if let Some(name) = std::thread::current().name() {
            let known = lock(&self.beats).contains_key(name);
            if known {
                self.beat(name);
            }
        }
    }

    /// A partition no longer followed that has no local log: it leaves the live figures.
    pub fn remove(&self, tp: &TopicPartition) {
        let mut parts = lock(&self.parts);
        if parts.remove(tp).is_some() {
            self.changed();
        }
    }

    /// A partition with a local log that is not fetched (see [`State::Stopped`]): its
    /// figures are the log's, frozen.
    pub fn stopped(&self, tp: &TopicPartition, why: &str, log: &LogFigures) {
        self.update(tp, |p| {
            let mut changed = set(&mut p.state, State::Stopped);
            changed |= set_text(&mut p.error, Some(why));
            changed |= set(&mut p.log_start_offset, Some(log.log_start_offset));
            changed |= set(&mut p.log_end_offset, Some(log.log_end_offset));
            changed |= set(&mut p.high_watermark, Some(log.high_watermark));
            changed
        });
    }

    /// A loaded log that is about to be followed: `starting`, with the log's figures, so
    /// that the first STATUS= line and `status` count it before its first fetch.
    pub fn loaded(&self, tp: &TopicPartition, log: &LogFigures) {
        self.update(tp, |p| {
            let mut changed = set(&mut p.log_start_offset, Some(log.log_start_offset));
            changed |= set(&mut p.log_end_offset, Some(log.log_end_offset));
            changed |= set(&mut p.high_watermark, Some(log.high_watermark));
            changed
        });
    }

    /// A thread ended: it is no longer waited for.
    pub fn forget(&self, thread: &str) {
        lock(&self.beats).remove(thread);
    }

    /// The threads that made no progress within `window`, and for how long.
    pub fn stalled(&self, window: Duration) -> Vec<(String, Duration)> {
        lock(&self.beats)
            .iter()
            .filter(|(_, t)| t.elapsed() > window)
            .map(|(n, t)| (n.clone(), t.elapsed()))
            .collect()
    }

    /// The one-line summary for systemd's STATUS=.
    pub fn status_line(&self, disk_full: Option<&str>) -> String {
        let missing = lock(&self.missing_topics).len();
        let unreachable = {
            let leader = lock(&self.leader);
            (!leader.reachable && leader.error_count() > 0).then(|| leader.error_count())
        };
        let parts = self.walk();
        let count = |s: State| parts.values().filter(|p| p.state == s).count();
        let lag: i64 = parts.values().filter_map(PartitionLive::lag).sum();
        let lagging = parts
            .values()
            .filter(|p| p.lag().is_some_and(|l| l > 0))
            .count();
        let stopped = count(State::Stopped);
        let mut line = format!(
            "{} partition(s): {} caught up, {lagging} lagging ({lag} records behind)",
            parts.len() - stopped,
            count(State::CaughtUp)
        );
        for (s, what) in [
            (State::Failed, "failed"),
            (State::BackingOff, "backing off"),
            (State::Truncating, "truncating"),
            (State::NotFound, "not found on the leader"),
            (State::Stopped, "more stopped (not followed)"),
        ] {
            let n = count(s);
            if n > 0 {
                line.push_str(&format!(", {n} {what}"));
            }
        }
        if missing > 0 {
            line.push_str(&format!(", {missing} topic(s) not found on the leader"));
        }
        if let Some(errors) = unreachable {
            line.push_str(&format!("; leader unreachable ({errors} metadata errors)"));
        }
        if let Some(why) = disk_full {
            line.push_str(&format!("; fetching paused: {why}"));
        }
        line
    }

    /// What `status` reads (TOML; unknown values are left out): a [`LiveFile`].
    pub fn render(&self) -> String {
        let missing_topics = lock(&self.missing_topics).iter().cloned().collect();
        let head = LiveFile {
            pid: std::process::id(),
            written_ms: crate::clock::now_ms(),
            missing_topics,
            leader: Some(self.leader()),
            offsite: self.offsite(),
            partitions: Vec::new(),
        };
        let mut out = toml::to_string(&head).unwrap_or_default();
        // Each partition's `[[partitions]]` table on its own: serialized as one document, ten
        // thousand of them cost the serializer about a second of copying, which grows with
        // the square of their number.
        #[derive(serde::Serialize)]
        struct RecordRef<'a> {
            topic: &'a str,
            partition: i32,
            #[serde(flatten)]
            live: &'a PartitionLive,
        }
        #[derive(serde::Serialize)]
        struct One<'a> {
            partitions: [RecordRef<'a>; 1],
        }
        for (tp, p) in self.walk().iter() {
            let one = One {
                partitions: [RecordRef {
                    topic: &tp.topic,
                    partition: tp.partition,
                    live: p,
                }],
            };
            if let Ok(text) = toml::to_string(&one) {
                out.push('\n');
                out.push_str(&text);
            }
        }
        out
    }
}

/// How far the offsite copy is behind the local replica.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OffsiteLive {
    /// `endpoint/bucket`.
    pub location: String,
    /// Bytes of segments on the local disk that are not offsite yet.
    pub pending_bytes: u64,
    /// Segments with bytes not offsite yet.
    pub pending_segments: u64,
    /// When (ms since the epoch) the oldest byte not offsite yet was first seen; absent
    /// when nothing is pending.
    pub oldest_pending_ms: Option<i64>,
    pub uploaded_bytes: u64,
    pub uploaded_objects: u64,
    /// Failed requests to the store.
    pub errors: u64,
    /// Why uploads fail, while they do.
    pub failing: Option<String>,
    /// When (ms since the epoch) a manifest was last written.
    pub last_manifest_ms: Option<i64>,
    /// Partitions whose uploads fail on a local problem (tried again each round), each
    /// `name: why`.
    #[serde(default)]
    pub stopped: Vec<String>,
}

/// `.live-status` as written by the daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LiveFile {
    pub pid: u32,
    pub written_ms: i64,
    #[serde(default)]
    pub missing_topics: Vec<String>,
    /// What the metadata refreshes found (absent from a daemon older than it).
    #[serde(default)]
    pub leader: Option<LeaderLive>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<LiveRecord>,
    /// The offsite copy (absent without `[offsite]`).
    #[serde(default)]
    pub offsite: Option<OffsiteLive>,
}

/// One partition in `.live-status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LiveRecord {
    pub topic: String,
    pub partition: i32,
    #[serde(flatten)]
    pub live: PartitionLive,
}

/// How recently the monitor must have refreshed `.live-status` for its daemon to count as
/// running.
const FRESH: Duration = Duration::from_secs(10);

/// The live state of the daemon running on `data_dir`, if one runs: its `.live-status` is
/// fresh (its mtime, which the monitor refreshes every second, within 10 s; `written_ms`
/// when the mtime cannot be read) and its process is alive.
pub fn read_running(data_dir: &std::path::Path) -> Option<LiveFile> {
    use std::io::Read;
    let f = std::fs::File::open(data_dir.join(DataDir::LIVE_STATUS_FILE)).ok()?;
    // The mtime of the file read, not of one renamed over it meanwhile.
    let modified = f.metadata().and_then(|m| m.modified()).ok();
    let mut text = String::new();
    f.take((64 << 20) + 1).read_to_string(&mut text).ok()?;
    if text.len() > 64 << 20 {
        return None;
    }
    let file: LiveFile = toml::from_str(&text).ok()?;
    let fresh = match modified {
        // One from the future (a clock set back) is fresh, as a `written_ms` ahead is.
        Some(t) => t.elapsed().map_or(true, |age| age < FRESH),
        None => {
            crate::clock::now_ms().saturating_sub(file.written_ms)
                < i64::try_from(FRESH.as_millis()).unwrap_or(i64::MAX)
        }
    };
    let alive = std::path::Path::new(&format!("/proc/{}", file.pid)).exists();
    (fresh && alive).then_some(file)
}

/// Publishes the live state as `.live-status`: rewritten when it changed since the last
/// write (its `written_ms` says when), otherwise only its mtime refreshed, which is what
/// [`read_running`] takes for a sign of life. A quiet second costs nothing per partition.
#[derive(Debug)]
pub struct Publisher {
    path: std::path::PathBuf,
    /// The generation last written, while the file holds it.
    written: Option<u64>,
}

/// What [`Publisher::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The file was rewritten with the current state.
    Written,
    /// Nothing changed: only its mtime was refreshed.
    Touched,
}

impl Publisher {
    pub fn new(path: std::path::PathBuf) -> Publisher {
        Publisher {
            path,
            written: None,
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Rewrites the file if `live` changed since the last write (or the file cannot be
    /// refreshed: gone, say), else sets its mtime to now. A failed write is tried again at
    /// the next call.
    pub fn publish(&mut self, live: &Live) -> std::io::Result<Published> {
        let generation = live.generation();
        if self.written == Some(generation) && touch(&self.path).is_ok() {
            return Ok(Published::Touched);
        }
        self.written = None;
        write_unsynced(&self.path, live.render().as_bytes())?;
        self.written = Some(generation);
        Ok(Published::Written)
    }
}

/// Sets the mtime of the existing file `path` to now.
fn touch(path: &std::path::Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_modified(std::time::SystemTime::now())
}

/// Replaces `path` with `contents` (no fsync: a crash loses nothing that matters, and the
/// next start rewrites it).
pub fn write_unsynced(path: &std::path::Path, contents: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetches_set_the_state_and_the_summary_counts_it() {
        let l = Live::default();
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        l.assigned(&a, 1, 3, 0);
        l.fetched(&a, 100, 100, 40, 40, Some(7));
        l.fetched(&b, 50, 50, 50, 50, None);
        let parts = l.partitions();
        assert_eq!(parts[&a].state, State::Fetching);
        assert_eq!(parts[&a].lag(), Some(60));
        assert_eq!(parts[&a].newest_timestamp_ms, Some(7));
        assert_eq!(parts[&b].state, State::CaughtUp);
        l.backing_off(&b, "invalid_data", "CRC mismatch");
        let line = l.status_line(Some("disk full: 3 bytes free"));
        assert_eq!(
            line,
            "2 partition(s): 0 caught up, 1 lagging (60 records behind), 1 backing off; fetching paused: disk full: 3 bytes free"
        );
        let file: LiveFile = toml::from_str(&l.render()).unwrap();
        assert_eq!(file.partitions[1].live, l.partitions()[&b]);
        assert_eq!(
            file.partitions[1].live.error.as_deref(),
            Some("CRC mismatch")
        );
        assert_eq!(file.partitions[0].live.leader_epoch, Some(3));
        assert_eq!(file.partitions[0].live.lag(), Some(60));
        assert_eq!(file.pid, std::process::id());
    }

    #[test]
    fn the_live_file_reads_back_as_written_and_ten_thousand_partitions_render_quickly() {
        let l = Live::default();
        for i in 0..10_000 {
            let tp = TopicPartition::new("many", i);
            l.assigned(&tp, 1, 3, 0);
            l.fetched(&tp, 100, 100, 40, 40, Some(7));
        }
        let odd = TopicPartition::new("odd \"name\"", 0);
        l.backing_off(&odd, "invalid_data", "CRC mismatch\nat 5");
        l.backing_off(&odd, "fetch_failed", "refused");
        l.set_missing_topics(["gone".to_string()].into_iter().collect());
        let t0 = Instant::now();
        let text = l.render();
        let took = t0.elapsed();
        let file: LiveFile = toml::from_str(&text).unwrap();
        let parts = l.partitions();
        assert_eq!(file.partitions.len(), parts.len());
        for r in &file.partitions {
            assert_eq!(
                Some(&r.live),
                parts.get(&TopicPartition::new(r.topic.clone(), r.partition))
            );
        }
        assert_eq!(file.missing_topics, ["gone"]);
        assert!(file.leader.is_some());
        // Linear in the partitions (about a second, and quadratic, as one document).
        assert!(took < Duration::from_secs(2), "{took:?}");
        eprintln!("rendered {} partitions in {took:?}", parts.len());
    }

    #[test]
    fn an_answer_that_changes_nothing_moves_the_last_fetch_time_only_every_interval() {
        let l = Live::default();
        let tp = TopicPartition::new("quiet", 0);
        let last_fetch = || l.partitions()[&tp].last_fetch_ms.unwrap();
        l.fetched(&tp, 10, 10, 10, 10, None);
        let first = last_fetch();
        let g = l.generation();
        std::thread::sleep(Duration::from_millis(3));
        l.fetched(&tp, 10, 10, 10, 10, None);
        assert_eq!(
            l.generation(),
            g,
            "nothing changed: no rewrite of .live-status"
        );
        assert_eq!(last_fetch(), first);
        // Any other change sets it to now.
        l.fetched(&tp, 12, 12, 10, 10, None);
        assert!(l.generation() > g);
        assert!(last_fetch() > first);
        // Once it is LAST_FETCH_EVERY old, an answer with nothing new moves it.
        let old = crate::clock::now_ms() - 31_000;
        l.update(&tp, |p| set(&mut p.last_fetch_ms, Some(old)));
        let g = l.generation();
        l.fetched(&tp, 12, 12, 10, 10, None);
        assert!(l.generation() > g);
        assert!(last_fetch() > old + 30_000);
        // One from the future (a clock set back) moves too.
        let ahead = crate::clock::now_ms() + 60_000;
        l.update(&tp, |p| set(&mut p.last_fetch_ms, Some(ahead)));
        l.fetched(&tp, 12, 12, 10, 10, None);
        assert!(last_fetch() < ahead);
    }

    #[test]
    fn without_an_answer_the_lag_is_only_the_last_known_one() {
        let l = Live::default();
        let tp = TopicPartition::new("s", 0);
        l.fetched(&tp, 100, 100, 70, 70, None);
        let p = || l.partitions()[&tp].clone();
        assert_eq!((p().lag(), p().last_known_lag()), (Some(30), None));
        // The leader answers, but the batches are refused: the lag is still current.
        l.backing_off(&tp, "invalid_data", "CRC mismatch");
        assert_eq!((p().lag(), p().last_known_lag()), (Some(30), None));
        let at = p().last_fetch_ms;
        l.unanswered(&tp, "connect failed: Connection refused");
        assert_eq!(p().state, State::BackingOff);
        assert_eq!((p().lag(), p().last_known_lag()), (None, Some((30, at))));
        assert_eq!(p().fetch_errors["fetch_failed"], 1);
        assert!(
            !l.status_line(None).contains("lagging (30"),
            "{}",
            l.status_line(None)
        );
        // The next answer makes it current again.
        l.leader_high_watermark(&tp, 110);
        assert_eq!((p().lag(), p().last_known_lag()), (Some(40), None));
        l.leader_lost(&tp, "looking up its leader (NOT_LEADER_OR_FOLLOWER)");
        assert_eq!((p().lag(), p().last_known_lag()), (None, Some((40, at))));
        l.fetched(&tp, 110, 110, 110, 110, None);
        assert_eq!((p().lag(), p().last_known_lag()), (Some(0), None));
        // A frozen partition has no lag, known or not.
        l.unanswered(&tp, "down");
        l.set_state(&tp, State::Failed, Some("EIO"));
        assert_eq!((p().lag(), p().last_known_lag()), (None, None));
    }

    #[test]
    fn every_change_moves_the_generation_and_a_repeat_or_a_read_does_not() {
        let l = Live::default();
        let tp = TopicPartition::new("g", 0);
        let figures = LogFigures {
            log_start_offset: 0,
            log_end_offset: 5,
            high_watermark: 5,
        };
        let mut seen = l.generation();
        let mut moved = |what: &str, l: &Live| {
            let now = l.generation();
            let did = now != seen;
            seen = now;
            assert!(did || what.starts_with("no-op"), "{what} did not move it");
            assert!(!did || !what.starts_with("no-op"), "{what} moved it");
        };
        l.loaded(&tp, &figures);
        moved("loaded (a new partition)", &l);
        l.loaded(&tp, &figures);
        moved("no-op: loaded again", &l);
        l.assigned(&tp, 1, 2, 5);
        moved("assigned", &l);
        l.assigned(&tp, 1, 2, 5);
        moved("no-op: assigned again", &l);
        l.set_state(&tp, State::Truncating, None);
        moved("set_state", &l);
        l.set_state(&tp, State::Truncating, None);
        moved("no-op: set_state again", &l);
        l.set_state(&tp, State::Truncating, Some("why"));
        moved("set_state (the error alone)", &l);
        l.fetched(&tp, 10, 10, 5, 5, None);
        moved("fetched", &l);
        l.leader_high_watermark(&tp, 12);
        moved("leader_high_watermark", &l);
        l.leader_high_watermark(&tp, 12);
        moved("no-op: leader_high_watermark again", &l);
        l.log_start(&tp, 1);
        moved("log_start", &l);
        l.log_start(&tp, 1);
        moved("no-op: log_start again", &l);
        l.appended(&tp, 100, 1);
        moved("appended", &l);
        l.appended(&tp, 0, 0);
        moved("no-op: nothing appended", &l);
        l.backing_off(&tp, "fetch_failed", "down");
        moved("backing_off", &l);
        l.backing_off(&tp, "fetch_failed", "down");
        moved("backing_off again (its count)", &l);
        l.unanswered(&tp, "down");
        moved("unanswered (its count)", &l);
        l.leader_lost(&tp, "looking up its leader");
        moved("leader_lost", &l);
        l.leader_lost(&tp, "looking up its leader");
        moved("no-op: leader_lost again", &l);
        l.stopped(&tp, "not followed", &figures);
        moved("stopped", &l);
        l.stopped(&tp, "not followed", &figures);
        moved("no-op: stopped again", &l);
        l.set_missing_topics(BTreeSet::from(["ghost".to_string()]));
        moved("set_missing_topics", &l);
        l.set_missing_topics(BTreeSet::from(["ghost".to_string()]));
        moved("no-op: the same missing topics", &l);
        l.remove(&tp);
        moved("remove", &l);
        l.remove(&tp);
        moved("no-op: remove again", &l);
        // Reads, latency and beats are not in the published state.
        let _ = (l.partitions(), l.render(), l.status_line(None), l.latency());
        l.observe_fetch(Duration::from_millis(3));
        l.beat("a");
        l.forget("a");
        moved("no-op: reads, latency, beats", &l);
    }

    /// Sets the mtime of `path` `ago` back.
    fn age(path: &std::path::Path, ago: Duration) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - ago)
            .unwrap();
    }

    fn mtime(path: &std::path::Path) -> std::time::SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn a_quiet_publish_refreshes_the_mtime_and_keeps_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DataDir::LIVE_STATUS_FILE);
        let l = Live::default();
        let tp = TopicPartition::new("q", 0);
        l.fetched(&tp, 10, 10, 10, 10, None);
        let mut p = Publisher::new(path.clone());
        assert_eq!(p.publish(&l).unwrap(), Published::Written);
        let first = std::fs::read_to_string(&path).unwrap();
        let written: LiveFile = toml::from_str(&first).unwrap();
        age(&path, Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(p.publish(&l).unwrap(), Published::Touched);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            first,
            "rewritten though nothing changed"
        );
        let refreshed = mtime(&path).elapsed().unwrap_or_default();
        assert!(
            refreshed < Duration::from_secs(5),
            "mtime {refreshed:?} old"
        );
        // A change is written, with a new written_ms.
        l.fetched(&tp, 20, 20, 15, 15, None);
        assert_eq!(p.publish(&l).unwrap(), Published::Written);
        let now: LiveFile = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(now.partitions[0].live.leader_high_watermark, Some(20));
        assert!(now.written_ms > written.written_ms, "{now:?} {written:?}");
        // A file gone is written again, changed or not.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(p.publish(&l).unwrap(), Published::Written);
        assert!(path.exists());
    }

    #[test]
    fn a_running_daemon_is_one_whose_file_has_a_fresh_mtime_and_a_live_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DataDir::LIVE_STATUS_FILE);
        let file = |pid: u32, written_ms: i64| {
            let f = LiveFile {
                pid,
                written_ms,
                ..LiveFile::default()
            };
            std::fs::write(&path, toml::to_string(&f).unwrap()).unwrap();
        };
        let long_ago = crate::clock::now_ms() - 3_600_000;
        // Content written an hour ago, refreshed now: running.
        file(std::process::id(), long_ago);
        let got = read_running(dir.path()).expect("fresh mtime, live pid");
        assert_eq!(got.written_ms, long_ago);
        // Not refreshed for 11 s: not running, whatever written_ms says.
        age(&path, Duration::from_secs(11));
        assert!(read_running(dir.path()).is_none());
        file(std::process::id(), crate::clock::now_ms());
        age(&path, Duration::from_secs(11));
        assert!(read_running(dir.path()).is_none());
        // Fresh, but its process is gone (pids stop well below u32::MAX).
        file(u32::MAX, long_ago);
        assert!(read_running(dir.path()).is_none());
        std::fs::remove_file(&path).unwrap();
        assert!(read_running(dir.path()).is_none());
    }

    #[test]
    fn the_leader_state_moves_the_generation_and_reaches_the_live_status_file() {
        let l = Live::default();
        let g = l.generation();
        l.metadata_failed("unreachable", "broker 127.0.0.1:1: connect failed", 1_000);
        assert_ne!(l.generation(), g);
        l.metadata_failed("unreachable", "again", 2_000);
        l.set_followed_topics(vec!["orders".into()]);
        l.set_not_yet_logged(vec![NotYetLogged {
            topic: "orders".into(),
            partition: None,
        }]);
        let g = l.generation();
        l.set_followed_topics(vec!["orders".into()]);
        assert_eq!(l.generation(), g, "the same topics again");
        let file: LiveFile = toml::from_str(&l.render()).unwrap();
        let leader = file.leader.unwrap();
        assert_eq!(leader, l.leader());
        assert!(!leader.reachable);
        assert_eq!(
            leader.unreachable_since_ms,
            Some(1_000),
            "the first failure"
        );
        assert_eq!(leader.error_count(), 2);
        assert_eq!(leader.last_error.as_deref(), Some("again"));
        assert!(
            l.status_line(None)
                .ends_with("; leader unreachable (2 metadata errors)")
        );
        l.metadata_answered(3_000);
        let leader = l.leader();
        assert!(leader.reachable && leader.unreachable_since_ms.is_none());
        assert_eq!(leader.last_success_ms, Some(3_000));
        // A file from a daemon older than the leader state still reads.
        let old: LiveFile = toml::from_str("pid = 1\nwritten_ms = 2\n").unwrap();
        assert!(old.leader.is_none());
    }

    #[test]
    fn a_thread_without_progress_is_stalled() {
        let l = Live::default();
        l.beat("a");
        assert!(l.stalled(Duration::from_secs(60)).is_empty());
        std::thread::sleep(Duration::from_millis(20));
        l.beat("b");
        let stalled = l.stalled(Duration::from_millis(10));
        assert_eq!(stalled.len(), 1);
        assert_eq!(stalled[0].0, "a");
        l.forget("a");
        assert!(l.stalled(Duration::from_millis(10)).is_empty());
    }
}
