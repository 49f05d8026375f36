//! Every partition's log, and the data-dir checkpoint files.
//!
//! Each log sits behind its own mutex: the fetcher that owns the partition appends under it,
//! the checkpoint task flushes under it, and nothing holds two at once. The map itself is
//! behind an RwLock that is written only when a partition's log is created.
//!
//! Checkpoint order (durability): for each log, fsync the active segment (recovery point :=
//! log end) and write its leader-epoch checkpoint; only then rewrite the three data-dir files,
//! each atomically. So a checkpoint never names an offset whose bytes are not on disk.
//!
//! Idle cost: the periodic flush, checkpoint and retention passes visit only the logs that
//! changed since they last did ([`super::touched`]); a checkpoint keeps every partition's
//! last figures and takes them from every log only at the first checkpoint, after the set of
//! logs changed, and at shutdown.

use super::data_dir::DataDir;
use super::identity;
use super::loader::{self, CheckpointHints};
use super::partition::{LogConfig, LogSummary, PartitionLog};
use super::resources::Exhausted;
use super::resources::disk::DiskSpace;
use super::touched::{Pass, PerPass, Touched};
use crate::checkpoint::{self, TopicPartition, fsync_dir};
use crate::protocol::uuid::Uuid;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

pub type SharedLog = Arc<Mutex<PartitionLog>>;

/// Creates `data_dir` (and its parents) when missing; a path that exists as something else
/// than a directory is refused by name, not as EEXIST.
pub fn create_data_dir(data_dir: &Path) -> Result<()> {
    if data_dir.exists() && !data_dir.is_dir() {
        anyhow::bail!("data dir `{}` is not a directory", data_dir.display());
    }
    fs::create_dir_all(data_dir)
        .with_context(|| format!("failed to create data dir `{}`", data_dir.display()))
}

/// For the commands that read a data dir and never create one: it must exist and be a
/// directory.
pub fn existing_data_dir(data_dir: &Path) -> Result<()> {
    match fs::metadata(data_dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => anyhow::bail!("data dir `{}` is not a directory", data_dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!("data dir `{}` does not exist", data_dir.display())
        }
        Err(e) => Err(e).with_context(|| format!("cannot read data dir `{}`", data_dir.display())),
    }
}

/// Whether this process can create files where `run` would: in `data_dir`, or, when it does
/// not exist yet, in its nearest existing ancestor (where `run` creates it). Tried by creating
/// and removing `.check-config-<pid>.tmp` there, because mode bits say nothing of root, a
/// read-only mount or an immutable directory. Returns that ancestor when the data dir is yet
/// to be created. Checks for the user running it, not the service's user.
pub fn check_writable(data_dir: &Path) -> Result<Option<PathBuf>> {
    let try_file = |dir: &Path| -> std::io::Result<()> {
        let probe = dir.join(format!(".check-config-{}.tmp", std::process::id()));
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)?;
        fs::remove_file(&probe)
    };
    match fs::metadata(data_dir) {
        Ok(m) if m.is_dir() => {
            try_file(data_dir)
                .with_context(|| format!("data dir `{}` is not writable", data_dir.display()))?;
            return Ok(None);
        }
        Ok(_) => anyhow::bail!("data dir `{}` is not a directory", data_dir.display()),
        // Missing, or below a file: the ancestors say which.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) => {}
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot read data dir `{}`", data_dir.display()));
        }
    }
    let cannot = || format!("data dir `{}` cannot be created", data_dir.display());
    // A relative path's last ancestor is empty: the current directory.
    let parent = data_dir
        .ancestors()
        .skip(1)
        .map(|a| {
            if a.as_os_str().is_empty() {
                Path::new(".")
            } else {
                a
            }
        })
        .find(|a| fs::symlink_metadata(a).is_ok())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        anyhow::bail!("{}: `{}` is not a directory", cannot(), parent.display());
    }
    try_file(parent)
        .with_context(|| format!("`{}` is not writable", parent.display()))
        .with_context(cannot)?;
    Ok(Some(parent.to_path_buf()))
}

pub fn lock_log(log: &SharedLog) -> MutexGuard<'_, PartitionLog> {
    // A poisoned lock means a thread panicked mid-append; the log's on-disk state is still
    // what recovery would see, so go on with it.
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Wakes readers waiting for data (a long-polling Fetch) when a log may have grown.
///
/// The append path pays an atomic increment, and takes the mutex (held by a waiter only
/// between checking the sequence and sleeping) only when someone waits. Invariant: a waiter
/// that saw sequence `s` and sleeps is woken by any later [`Self::notify`].
#[derive(Debug, Default)]
pub struct AppendSignal {
    /// Bumped by every notify; written by appenders, read by waiters.
    seq: AtomicU64,
    /// How many threads are in [`Self::wait_past`].
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cond: Condvar,
}

impl AppendSignal {
    pub fn current(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    pub fn notify(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self
                .lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.cond.notify_all();
        }
    }

    /// Sleeps until the sequence moves past `seen` or `timeout` passes; whether it moved.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while self.current() == seen {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            g = self
                .cond
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        self.current() != seen
    }
}

#[derive(Debug)]
pub struct LogManager {
    data_dir: PathBuf,
    config: LogConfig,
    logs: RwLock<BTreeMap<TopicPartition, SharedLog>>,
    /// Bumped, under the write lock of `logs`, whenever it gains or loses an entry: the next
    /// checkpoint takes every log's figures anew.
    structure: AtomicU64,
    /// Which logs changed since each periodic pass last visited them.
    touched: Arc<Touched>,
    /// Serialises checkpoint writers (periodic task and shutdown) and holds what the files
    /// claim.
    checkpoint_lock: Mutex<CheckpointState>,
    /// The logs that had two segments or more at the last retention pass, while retention is
    /// by time: the only unchanged ones retention may cut.
    retention_candidates: Mutex<BTreeSet<TopicPartition>>,
    /// How many logs the last flush, checkpoint and retention pass visited.
    visits: PerPass<AtomicUsize>,
    /// Free space of the data dir's filesystem; appends pause while it is full.
    disk: DiskSpace,
    /// The file-system sync a pass over many logs shares ([`fs_sync`]).
    fs_sync: fs_sync::FsSync,
    /// Told of each partition marked failed (the fetcher manager, which stops fetching it).
    on_failed: Mutex<Option<FailureListener>>,
    /// Notified by the fetchers after each append; waited on by the serving side.
    appended: Arc<AppendSignal>,
    /// Set once it was said that segment files are opened on demand.
    said_on_demand: AtomicBool,
    /// Beaten as a checkpoint pass gets through its logs (the daemon's watchdog).
    heartbeat: Heartbeat,
    /// Set when another copy must hold a segment before retention may delete it.
    hold: Option<Arc<RetentionHold>>,
}

/// How far retention may go in each log while another copy (the offsite one) must hold a
/// segment before it is deleted here: each log's floor is the offset below which every
/// segment is held there, as found for one history (its topic id) and one state of its
/// bytes (its generation, which every truncation moves). A log without a floor, or whose
/// topic id or generation is not the floor's (a re-created topic, a truncation since),
/// loses nothing to retention.
#[derive(Debug, Default)]
pub struct RetentionHold {
    floors: Mutex<BTreeMap<TopicPartition, HeldFloor>>,
}

#[derive(Debug, Clone, Copy)]
struct HeldFloor {
    topic_id: Option<crate::protocol::uuid::Uuid>,
    generation: u64,
    floor: i64,
}

impl RetentionHold {
    /// Every segment of `tp` that ends at or below `floor` is held elsewhere, for the log of
    /// `topic_id` at `generation`.
    pub fn set(
        &self,
        tp: &TopicPartition,
        topic_id: Option<crate::protocol::uuid::Uuid>,
        generation: u64,
        floor: i64,
    ) {
        self.floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                tp.clone(),
                HeldFloor {
                    topic_id,
                    generation,
                    floor,
                },
            );
    }
    /// The floor of `log`, if one was found for its history and bytes as they are.
    pub fn floor(&self, log: &PartitionLog) -> i64 {
        self.floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&log.tp)
            .filter(|h| h.topic_id == log.topic_id() && h.generation == log.generation())
            .map_or(i64::MIN, |h| h.floor)
    }
    /// Forgets `tp`'s floor (its directory was archived).
    pub fn forget(&self, tp: &TopicPartition) {
        self.floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(tp);
    }
}

/// Called by the thread doing a checkpoint pass each time one more log is flushed and synced:
/// a pass over many logs is progress the watchdog must see. Must be cheap and not block.
pub struct Heartbeat(Box<dyn Fn() + Send + Sync>);

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat(Box::new(|| {}))
    }
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Heartbeat")
    }
}

/// The figures the checkpoint files claim, kept between checkpoints so that one visits only
/// the logs that changed.
#[derive(Debug, Default)]
struct CheckpointState {
    /// The content last written to each file, so an unchanged file is not rewritten (and
    /// fsynced).
    written: BTreeMap<&'static str, Vec<u8>>,
    high_watermarks: BTreeMap<TopicPartition, i64>,
    recovery_points: BTreeMap<TopicPartition, i64>,
    log_starts: BTreeMap<TopicPartition, i64>,
    failed: BTreeSet<TopicPartition>,
    /// A figure changed since the three files were last written.
    changed: bool,
    /// [`LogManager::structure`] when every log's figures were last taken; `None` before.
    structure: Option<u64>,
}

impl CheckpointState {
    /// Every figure, before a pass takes them from every log.
    fn clear(&mut self) {
        self.high_watermarks.clear();
        self.recovery_points.clear();
        self.log_starts.clear();
        self.failed.clear();
        self.changed = true;
    }

    /// `tp` has no log (any more).
    fn forget(&mut self, tp: &TopicPartition) {
        let had = self.recovery_points.remove(tp).is_some();
        self.high_watermarks.remove(tp);
        self.log_starts.remove(tp);
        self.failed.remove(tp);
        self.changed |= had;
    }

    /// The figures of `tp`'s log. Only what is fsynced is claimed: every one is capped by the
    /// recovery point.
    fn set(&mut self, tp: &TopicPartition, s: &LogSummary, failed: bool) {
        for (figures, value) in [
            (&mut self.recovery_points, s.recovery_point),
            (
                &mut self.high_watermarks,
                s.high_watermark.min(s.recovery_point),
            ),
            (
                &mut self.log_starts,
                s.log_start_offset.min(s.recovery_point),
            ),
        ] {
            if figures.get(tp) != Some(&value) {
                figures.insert(tp.clone(), value);
                self.changed = true;
            }
        }
        if failed {
            self.failed.insert(tp.clone());
        } else {
            self.failed.remove(tp);
        }
    }
}

/// Called with a partition, why, and whether it was not failed before, each time a storage
/// error fails it. Must not block (callers may hold a fetcher's partition-map lock).
pub struct FailureListener(pub Box<FailureFn>);

pub type FailureFn = dyn Fn(&TopicPartition, &str, bool) + Send;

/// The ERROR for a partition a storage error failed.
pub fn failed_message(tp: &TopicPartition, reason: &str) -> String {
    format!(
        "{tp}: local storage error: {reason}; the partition is marked failed and not fetched until a check finds its files sound (after 1s, then less often; a directory that is gone stays failed until a restart); the other partitions go on"
    )
}

impl std::fmt::Debug for FailureListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FailureListener")
    }
}

fn read_hints(path: &Path) -> BTreeMap<TopicPartition, i64> {
    checkpoint::read_offsets(path).unwrap_or_else(|e| {
        crate::log_warn!("{e:#}; falling back to what the logs themselves show");
        BTreeMap::new()
    })
}

impl LogManager {
    /// Loads every partition directory under `data_dir` (recovering where needed) and removes
    /// the clean-shutdown marker. The caller holds the data-dir lock.
    pub fn open(data_dir: &Path, config: LogConfig) -> Result<Self> {
        create_data_dir(data_dir)?;
        let marker = data_dir.join(DataDir::CLEAN_SHUTDOWN_FILE);
        let clean = marker.exists();
        let rp = read_hints(&data_dir.join(DataDir::RECOVERY_POINT));
        let ls = read_hints(&data_dir.join(DataDir::LOG_START_OFFSET));
        let hw = read_hints(&data_dir.join(DataDir::REPLICATION_OFFSET));
        let mut logs = BTreeMap::new();
        let touched = Arc::new(Touched::new(
            config.retention_bytes >= 0 || config.retention_ms >= 0,
        ));
        let mut removed = Vec::new();
        for e in fs::read_dir(data_dir)
            .with_context(|| format!("failed to list data dir `{}`", data_dir.display()))?
            .filter_map(|e| e.ok())
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(DataDir::CREATING_SUFFIX) {
                // A partition directory a crash interrupted before anything was fetched.
                fs::remove_dir_all(e.path())
                    .with_context(|| format!("failed to remove `{}`", e.path().display()))?;
                removed.push(e.path());
            }
        }
        removed.sort();
        match removed.as_slice() {
            [] => {}
            [one] => crate::log_info!("removed `{}`, left half-made by a crash", one.display()),
            // A crash in a round of many new logs: one line for them all.
            [first, ..] => crate::log_info!(
                "removed {} partition directories left half-made by a crash (`{}`, …)",
                removed.len(),
                first.display()
            ),
        }
        let started = Instant::now();
        let mut tally = loader::Tally::default();
        let partitions = DataDir::partitions(data_dir)?;
        let fs_sync = fs_sync::FsSync::open(data_dir)?;
        // After a crash, many logs may each need recovery: one file-system sync for all that
        // recovery rewrote rather than four fsyncs a log.
        let one_sync = !clean && fs_sync.fits(partitions.len());
        let mut rewritten = false;
        for tp in partitions {
            let hints = CheckpointHints {
                recovery_point: rp.get(&tp).copied(),
                log_start_offset: ls.get(&tp).copied(),
                high_watermark: hw.get(&tp).copied(),
            };
            let loaded = loader::load_with(data_dir, &tp, config.clone(), hints, clean, !one_sync)
                .with_context(|| format!("failed to load the log of {tp}"))?;
            if let Some((mut log, report)) = loaded {
                rewritten |= report.recovered_segments > 0 || report.set_aside_segments > 0;
                tally.add(&tp, &log, &report);
                log.watch(touched.clone());
                logs.insert(tp, Arc::new(Mutex::new(log)));
            }
        }
        if rewritten && one_sync {
            fs_sync.sync();
        }
        tally.say(clean, started.elapsed());
        if clean {
            fs::remove_file(&marker)
                .with_context(|| format!("failed to remove `{}`", marker.display()))?;
            fsync_dir(data_dir)?;
        }
        let manager = LogManager {
            data_dir: data_dir.to_path_buf(),
            config,
            logs: RwLock::new(logs),
            structure: AtomicU64::new(0),
            touched,
            checkpoint_lock: Mutex::new(CheckpointState::default()),
            retention_candidates: Mutex::new(BTreeSet::new()),
            visits: Default::default(),
            disk: DiskSpace::new(data_dir, 0),
            fs_sync,
            on_failed: Mutex::new(None),
            appended: Arc::default(),
            said_on_demand: AtomicBool::new(false),
            heartbeat: Heartbeat::default(),
            hold: None,
        };
        manager.note_open_files();
        Ok(manager)
    }

    /// Says once (INFO) when the partitions' active segments outnumber `log.max_open_files`:
    /// from then on idle partitions' files are closed and reopened on demand. Called once the
    /// logs are loaded, and by the fetcher manager after each round that created logs.
    pub fn note_open_files(&self) {
        let partitions = self
            .logs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let budget = super::resources::open_files::shared().budget();
        if partitions > budget && !self.said_on_demand.swap(true, Ordering::SeqCst) {
            crate::log_info!(
                "{partitions} partitions, {budget} descriptors allowed: segment files are opened on demand (log.max_open_files)"
            );
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// What appenders notify and readers of new data wait on.
    pub fn appended(&self) -> &Arc<AppendSignal> {
        &self.appended
    }

    /// Appends pause below `min_free` bytes free on the data dir's filesystem (0: only after
    /// a write failed with ENOSPC).
    pub fn with_min_free_bytes(mut self, min_free: u64) -> Self {
        self.disk = DiskSpace::new(&self.data_dir, min_free);
        self
    }

    /// What a checkpoint pass calls as it gets through its logs (nothing by default).
    /// Retention deletes only what `hold` says is held elsewhere.
    pub fn with_retention_hold(mut self, hold: Arc<RetentionHold>) -> Self {
        self.hold = Some(hold);
        self
    }

    pub fn with_heartbeat(mut self, beat: impl Fn() + Send + Sync + 'static) -> Self {
        self.heartbeat = Heartbeat(Box::new(beat));
        self
    }

    pub fn disk(&self) -> &DiskSpace {
        &self.disk
    }

    /// Who is told when a partition fails (one listener; a later call replaces it).
    pub fn set_failure_listener(&self, f: FailureListener) {
        let mut slot = self
            .on_failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Failures before the listener came (the start-up checkpoint) are told now.
        for tp in self
            .all()
            .into_iter()
            .filter_map(|(tp, l)| lock_log(&l).failed().map(|why| (tp, why.to_string())))
        {
            (f.0)(&tp.0, &tp.1, true);
        }
        *slot = Some(f);
    }

    /// A local error on `tp` while `what`: a full disk pauses every partition (not a
    /// partition's fault), running out of descriptors is said once a minute and retried (the
    /// process's limit, not the partition's storage), anything else fails the partition.
    pub fn storage_error(&self, tp: &TopicPartition, what: &str, e: &anyhow::Error) {
        match Exhausted::of(e) {
            Some(Exhausted::Disk) => self.disk.on_no_space(),
            Some(Exhausted::Descriptors) => {
                super::resources::descriptors::report(&format!("{tp}: {what}: {e:#}"));
            }
            None => self.mark_failed(tp, &format!("{what}: {e:#}")),
        }
    }

    /// Kafka's `markPartitionFailed` for a local storage error: the partition is neither
    /// appended to nor flushed until [`Self::check_storage`] finds it sound again, the
    /// listener stops fetching it, and the other partitions go on. Said once per failure.
    /// The listener is told every time (`newly`: it was not failed before), so a partition
    /// removed from its fetcher is never left unassigned; it says what it learns. Without a
    /// listener, a new failure is logged here.
    pub fn mark_failed(&self, tp: &TopicPartition, reason: &str) {
        let newly = self
            .get(tp)
            .is_none_or(|log| lock_log(&log).mark_failed(reason));
        match self
            .on_failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            Some(f) => (f.0)(tp, reason, newly),
            None if newly => crate::log_error!("{}", failed_message(tp, reason)),
            None => {}
        }
    }

    /// Whether a failed partition's files are sound again (see
    /// [`PartitionLog::check_storage`]); on success it may be fetched again.
    pub fn check_storage(&self, tp: &TopicPartition) -> Result<()> {
        let log = self
            .get(tp)
            .with_context(|| format!("{tp}: no local log"))?;
        lock_log(&log).check_storage()
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<SharedLog> {
        self.logs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(tp)
            .cloned()
    }

    /// Whether any partition of `topic` has a log.
    pub fn holds_topic(&self, topic: &str) -> bool {
        let logs = self
            .logs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.range(TopicPartition::new(topic, i32::MIN)..)
            .next()
            .is_some_and(|(tp, _)| tp.topic == topic)
    }

    /// Changes whenever a log is added or removed (archived, deleted): a reader that caches
    /// what the data dir holds looks again when it moved.
    pub fn structure(&self) -> u64 {
        self.structure.load(Ordering::SeqCst)
    }

    pub fn all(&self) -> Vec<(TopicPartition, SharedLog)> {
        let logs = self
            .logs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.iter().map(|(tp, l)| (tp.clone(), l.clone())).collect()
    }

    /// Puts a new log in the map (whose write lock the caller holds), reporting its changes.
    fn insert(
        &self,
        logs: &mut BTreeMap<TopicPartition, SharedLog>,
        tp: &TopicPartition,
        mut log: PartitionLog,
    ) -> SharedLog {
        log.watch(self.touched.clone());
        let shared = Arc::new(Mutex::new(log));
        logs.insert(tp.clone(), shared.clone());
        self.structure.fetch_add(1, Ordering::SeqCst);
        shared
    }

    /// How many logs the last pass of the kind visited (locked and read).
    pub fn last_visits(&self, pass: Pass) -> usize {
        self.visits.of(pass).load(Ordering::Relaxed)
    }

    fn set_visits(&self, pass: Pass, n: usize) {
        self.visits.of(pass).store(n, Ordering::Relaxed);
    }

    /// Creates an empty log for `tp` starting at `start_offset` (or returns the existing one).
    pub fn get_or_create(
        &self,
        tp: &TopicPartition,
        start_offset: i64,
        topic_id: Option<Uuid>,
    ) -> Result<SharedLog> {
        let mut logs = self
            .logs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(l) = logs.get(tp) {
            return Ok(l.clone());
        }
        let log = PartitionLog::create(
            &self.data_dir,
            tp,
            self.config.clone(),
            start_offset,
            topic_id,
        )?;
        crate::log_debug!("{tp}: created an empty local log starting at offset {start_offset}");
        Ok(self.insert(&mut logs, tp, log))
    }

    /// Creates empty logs for many partitions at once — (partition, start offset, topic id)
    /// each — at the cost of one file-system sync and one data-dir fsync for them all, not
    /// several fsyncs each: every directory is made under its `.creating` name, then the
    /// file system is synced (their files are durable), then each is renamed into place and
    /// the data dir fsynced (the renames are durable), and only then are the logs put in the
    /// map, where the checkpoint task sees them. A crash on the way leaves `.creating`
    /// directories (removed at the next start) or whole ones no checkpoint names yet.
    /// A partition that already has a log gets it back; one whose directory exists without
    /// a log takes [`PartitionLog::create`]'s path. Results in the order asked.
    pub fn create_logs(
        &self,
        new: &[(TopicPartition, i64, Option<Uuid>)],
    ) -> Vec<(TopicPartition, Result<SharedLog>)> {
        let mut out: Vec<Option<Result<SharedLog>>> = Vec::with_capacity(new.len());
        // Built and not yet durable, in the order asked.
        let mut builds: Vec<Option<PathBuf>> = Vec::with_capacity(new.len());
        for (tp, start, topic_id) in new {
            let (result, build) = if let Some(l) = self.get(tp) {
                (Some(Ok(l)), None)
            } else if self.data_dir.join(tp.dir_name()).exists() {
                (Some(self.get_or_create(tp, *start, *topic_id)), None)
            } else {
                match PartitionLog::build_unsynced(
                    &self.data_dir,
                    tp,
                    &self.config,
                    *start,
                    *topic_id,
                ) {
                    Ok(build) => (None, Some(build)),
                    Err(e) => (Some(Err(e)), None),
                }
            };
            out.push(result);
            builds.push(build);
        }
        let remove = |dir: &Path| {
            if let Err(re) = fs::remove_dir_all(dir) {
                crate::log_error!("failed to remove the half-made `{}`: {re}", dir.display());
            }
        };
        // (what was asked, where its result goes, its build dir, its final dir).
        let pending: Vec<_> = new
            .iter()
            .zip(out.iter_mut())
            .zip(builds)
            .filter_map(|((asked, slot), build)| {
                let dir = self.data_dir.join(asked.0.dir_name());
                Some((asked, slot, build?, dir))
            })
            .collect();
        let mut renamed = Vec::with_capacity(pending.len());
        if !pending.is_empty() {
            match checkpoint::sync_filesystem(&self.data_dir) {
                Err(e) => {
                    for (_, slot, build, _) in pending {
                        remove(&build);
                        *slot = Some(Err(anyhow::anyhow!("{e:#}")));
                    }
                }
                Ok(()) => {
                    for (asked, slot, build, dir) in pending {
                        match fs::rename(&build, &dir) {
                            Ok(()) => renamed.push((asked, slot, dir)),
                            Err(e) => {
                                remove(&build);
                                *slot = Some(Err(anyhow::Error::from(e).context(format!(
                                    "failed to rename `{}` to `{}`",
                                    build.display(),
                                    dir.display()
                                ))));
                            }
                        }
                    }
                }
            }
        }
        if !renamed.is_empty() {
            match fsync_dir(&self.data_dir) {
                Err(e) => {
                    // Not known to be durable: none of them is a log.
                    for (_, slot, dir) in renamed {
                        remove(&dir);
                        *slot = Some(Err(anyhow::anyhow!("{e:#}")));
                    }
                }
                Ok(()) => {
                    let mut logs = self
                        .logs
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    for ((tp, start, topic_id), slot, dir) in renamed {
                        let opened = PartitionLog::open_created(
                            &self.data_dir,
                            tp,
                            self.config.clone(),
                            *start,
                            *topic_id,
                        );
                        *slot = Some(match opened {
                            Ok(log) => {
                                crate::log_debug!(
                                    "{tp}: created an empty local log starting at offset {start}"
                                );
                                Ok(self.insert(&mut logs, tp, log))
                            }
                            Err(e) => {
                                remove(&dir);
                                Err(e)
                            }
                        });
                    }
                }
            }
        }
        new.iter()
            .zip(out)
            .map(|((tp, _, _), r)| {
                let r = r.unwrap_or_else(|| Err(anyhow::anyhow!("{tp}: its log was not made")));
                (tp.clone(), r)
            })
            .collect()
    }

    /// Moves the whole partition directory of `tp` aside to
    /// `<topic>-<partition>.<old topic id>.archived/` (files untouched) and forgets the log, so
    /// that the topic can be followed anew. The caller has stopped fetching it. Returns where
    /// the history went.
    pub fn archive(&self, tp: &TopicPartition) -> Result<PathBuf> {
        let mut logs = self
            .logs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let shared = logs
            .remove(tp)
            .with_context(|| format!("{tp}: no local log to archive"))?;
        // Put back if the move fails: either way the next checkpoint visits every log.
        self.structure.fetch_add(1, Ordering::SeqCst);
        let mut log = lock_log(&shared);
        // Whatever was appended is made durable before the directory moves.
        if let Err(e) = log.flush() {
            logs.insert(tp.clone(), shared.clone());
            return Err(e);
        }
        if let Some(h) = &self.hold {
            h.forget(tp);
        }
        let to = identity::archive_path(&self.data_dir, &tp.dir_name(), log.topic_id());
        if let Err(e) = fs::rename(&log.dir, &to) {
            logs.insert(tp.clone(), shared.clone());
            return Err(e).with_context(|| {
                format!(
                    "failed to move `{}` to `{}`",
                    log.dir.display(),
                    to.display()
                )
            });
        }
        // Anyone still holding this log (a checkpoint in progress) leaves it alone from now on.
        log.retired = true;
        // Moved again now that the archive is there: a reader that listed the data dir
        // between the first bump and the rename looks again.
        self.structure.fetch_add(1, Ordering::SeqCst);
        drop(log);
        drop(logs);
        // The move has happened: what follows can only be reported, not undone.
        if let Err(e) = fsync_dir(&self.data_dir) {
            crate::log_error!("{tp}: archived to `{}`, but {e:#}", to.display());
        }
        // The checkpoint files must stop naming the old history at once: a crash before the
        // next interval would otherwise give the new log the old one's figures.
        if let Err(e) = self.checkpoint() {
            crate::log_error!("{tp}: checkpoint after archiving failed: {e:#}");
        }
        Ok(to)
    }

    /// Each log's figures, and why it is failed when it is.
    pub fn summaries(&self) -> Vec<(TopicPartition, LogSummary, Option<String>)> {
        self.all()
            .into_iter()
            .map(|(tp, l)| {
                let log = lock_log(&l);
                (tp, log.summary(), log.failed().map(str::to_string))
            })
            .collect()
    }
}

mod fs_sync;
mod passes;

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
