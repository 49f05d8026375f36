//! The uploader: a thread that copies the local replica to the bucket.
//!
//! Each round looks at every partition (and every archived history): closed segments go up
//! whole, with their indexes; the active segment's durable tail (below the recovery point)
//! goes up once its oldest byte has waited half of `max_delay_ms`; the copies beside the log
//! (`diverged/`, `damaged/`), the leader epochs, the ranges lost upstream and the identity go
//! in the manifest or beside it. A new manifest generation is written after the objects it
//! names, so a manifest never names a missing object. Retention is told, through the
//! [`RetentionHold`], which segments the bucket holds whole.
//!
//! A failing store never stops following: the thread retries with backoff and jitter, says
//! once that uploads fail and once that they work again. A kill at any point leaves either a
//! whole object or none (a PUT is atomic); after a restart, pieces uploaded but not yet in a
//! manifest are found by listing the segment's prefix and taken as they are, so nothing is
//! uploaded twice.

use super::bucket;
use super::local::{
    LocalSegment, LocalView, archived_view, durable_offset, live_view, offsite_offset, read_range,
    walk_batches, walk_window,
};
use super::manifest::{FILE_PART, FileSum, Indexes, Manifest, PartitionKey, Piece, SegmentEntry};
use super::reconcile::{adopt_orphans, merge_epochs, reconcile};
use super::settings::Offsite;
use crate::live::{Live, OffsiteLive};
use crate::log::data_dir::DataDir;
use crate::log::manager::{LogManager, RetentionHold};
use crate::record::BatchHeader;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of a segment in one object: bounds the memory an upload takes (the piece
/// and its sealed copy).
pub const PIECE_MAX: u64 = 16 << 20;
/// Backoff after a failed round: doubles from the first to the last, with jitter.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The most (time, offset) marks kept per partition for the age of the oldest pending byte.
const MAX_MARKS: usize = 256;
/// How long a log without a recorded topic id waits for one before it is copied without.
const NO_TOPIC_ID_WAIT: Duration = Duration::from_secs(60);

/// What the uploader knows of one partition history.
#[derive(Debug)]
struct PartState {
    manifest: Manifest,
    /// The log generation the manifest was last checked against.
    checked: Option<u64>,
    /// Orphan pieces (uploaded before a kill, in no manifest) were looked for.
    adopted: bool,
    /// name → (len, mtime, sum) of the files beside the log, so that unchanged ones are not
    /// read again.
    files_seen: BTreeMap<String, (u64, i64, FileSum)>,
    /// An archived history that is wholly offsite: not looked at again.
    done: bool,
}

/// How far one partition history's copy is behind its local log, found every round from
/// the local files and the last manifest written, whether or not the store answers.
#[derive(Debug, Default)]
struct Lag {
    /// (when first seen, offset) of durable log ends, oldest first: the first past what is
    /// offsite tells how long the oldest byte not offsite has waited.
    marks: VecDeque<(i64, i64)>,
    bytes: u64,
    segments: u64,
}

pub struct UploaderOptions {
    pub offsite: Arc<Offsite>,
    pub data_dir: PathBuf,
    pub logs: Arc<LogManager>,
    pub hold: Arc<RetentionHold>,
    pub live: &'static Live,
}

/// The running uploader.
pub struct Uploader {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Uploader {
    pub fn start(opts: UploaderOptions) -> Result<Uploader> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("offsite".into())
            .spawn(move || Worker::new(opts, s2).run())
            .context("failed to start the offsite uploader")?;
        Ok(Uploader {
            stop,
            thread: Some(thread),
        })
    }

    /// Asks the thread to stop after the request it is in.
    pub fn signal(&self) {
        let (m, c) = &*self.stop;
        *m.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        c.notify_all();
    }

    /// Signals, then waits at most `wait` for the thread: a request to a store that does not
    /// answer must not hold up the shutdown (an object is whole or absent whenever the
    /// process ends).
    pub fn stop(&mut self, wait: Duration) {
        self.signal();
        let deadline = Instant::now() + wait;
        while let Some(t) = &self.thread {
            if t.is_finished() {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                return;
            }
            if Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

struct Worker {
    o: Arc<Offsite>,
    data_dir: PathBuf,
    logs: Arc<LogManager>,
    hold: Arc<RetentionHold>,
    live: &'static Live,
    stop: Arc<(Mutex<bool>, Condvar)>,
    parts: BTreeMap<PartitionKey, PartState>,
    lag: BTreeMap<PartitionKey, Lag>,
    /// The newest generation of the cluster's manifest of data-dir files, and what it lists.
    cluster_files: Option<(u64, bucket::ClusterFiles)>,
    /// Rounds run so far.
    rounds: u64,
    /// When the thread started.
    started: Instant,
    /// Each archived directory's view of the last round.
    archived_seen: BTreeMap<PathBuf, LocalView>,
    /// Partitions whose last round failed on a local problem, with what was said.
    local_errors: BTreeMap<PartitionKey, String>,
    figures: OffsiteLive,
    /// What the current failure was said as, while uploads fail.
    failing: Option<String>,
    /// The cause of the last ERROR said while uploads fail: a store that was unreachable
    /// (a WARN) and then refuses the bucket or the credentials says so too, once.
    said_error: Option<String>,
    backoff: Duration,
    said_no_cluster: bool,
}

fn now_ms() -> i64 {
    crate::clock::now_ms()
}

impl Worker {
    fn new(opts: UploaderOptions, stop: Arc<(Mutex<bool>, Condvar)>) -> Worker {
        let figures = OffsiteLive {
            location: opts.offsite.location.clone(),
            ..OffsiteLive::default()
        };
        Worker {
            o: opts.offsite,
            data_dir: opts.data_dir,
            logs: opts.logs,
            hold: opts.hold,
            live: opts.live,
            stop,
            parts: BTreeMap::new(),
            lag: BTreeMap::new(),
            archived_seen: BTreeMap::new(),
            started: Instant::now(),
            rounds: 0,
            cluster_files: None,
            local_errors: BTreeMap::new(),
            figures,
            failing: None,
            said_error: None,
            backoff: BACKOFF_FIRST,
            said_no_cluster: false,
        }
    }

    fn stopping(&self) -> bool {
        *self
            .stop
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sleeps `d` unless told to stop; false when told.
    fn pause(&self, d: Duration) -> bool {
        let (m, c) = &*self.stop;
        let guard = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (guard, _) = c
            .wait_timeout_while(guard, d, |stop| !*stop)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !*guard
    }

    /// How often a round runs while the store answers.
    fn tick(&self) -> Duration {
        (self.o.max_delay / 10).clamp(Duration::from_millis(200), Duration::from_secs(5))
    }

    fn run(mut self) {
        self.live.set_offsite(self.figures.clone());
        loop {
            if self.stopping() {
                return;
            }
            let wait = match self.round() {
                Ok(()) => {
                    if let Some(was) = self.failing.take() {
                        crate::log_info!(
                            "offsite: uploads to {} work again (they failed: {was})",
                            self.o.location
                        );
                    }
                    self.said_error = None;
                    self.figures.failing = None;
                    self.backoff = BACKOFF_FIRST;
                    self.tick()
                }
                Err(e) => {
                    self.figures.errors += 1;
                    let text = describe(&self.o, &e);
                    if bucket::is_transient(&e) {
                        if self.failing.is_none() {
                            crate::log_warn!(
                                "offsite: uploads to {} fail ({text}); following goes on, uploads are retried with backoff",
                                self.o.location
                            );
                        }
                    } else {
                        // Said once per cause (the advice, not the store's words, which
                        // change from one request to the next).
                        let cause =
                            bucket::store_error(&e).map_or_else(|| text.clone(), |se| se.advice());
                        if self.said_error.as_ref() != Some(&cause) {
                            crate::log_error!(
                                "offsite: uploads to {} fail: {text}; following goes on, uploads are retried",
                                self.o.location
                            );
                            self.said_error = Some(cause);
                        }
                    }
                    if self.failing.is_none() {
                        self.failing = Some(text.clone());
                    }
                    self.figures.failing = Some(text);
                    let d = jitter(self.backoff);
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                    d
                }
            };
            self.publish();
            if !self.pause(wait) {
                return;
            }
        }
    }

    fn publish(&mut self) {
        let mut f = self.figures.clone();
        f.pending_bytes = self.lag.values().map(|l| l.bytes).sum();
        f.pending_segments = self.lag.values().map(|l| l.segments).sum();
        f.stopped = self
            .local_errors
            .iter()
            .map(|(k, why)| format!("{}: {why} (tried again each round)", k.describe()))
            .collect();
        f.oldest_pending_ms = self
            .lag
            .values()
            .filter(|l| l.bytes > 0)
            .filter_map(|l| l.marks.front().map(|m| m.0))
            .min();
        self.figures = f.clone();
        self.live.set_offsite(f);
    }

    fn round(&mut self) -> Result<()> {
        let Some(cluster) = crate::log::identity::read_cluster_id(&self.data_dir)? else {
            if !self.said_no_cluster {
                crate::log_info!(
                    "offsite: waiting for the source cluster's id (meta.properties) before the first upload"
                );
                self.said_no_cluster = true;
            }
            return Ok(());
        };
        // Every view first, and the lag of each from the local files and the last manifest,
        // so status shows how far behind the copy is even while the store fails.
        let mut views = Vec::new();
        for (tp, log) in self.logs.all() {
            if let Some(view) = live_view(&cluster, &tp, &log) {
                // A log whose topic id is not recorded yet (the first fetch records it) would
                // go up under `-` and then again under its id: it waits a minute for one; a
                // leader that reports none is copied under `-`.
                if view.key.topic_id.is_none() && self.started.elapsed() < NO_TOPIC_ID_WAIT {
                    continue;
                }
                views.push(view);
            }
        }
        for a in crate::log::identity::list_archived(&self.data_dir).unwrap_or_default() {
            let key = PartitionKey {
                cluster_id: cluster.clone(),
                topic: a.topic.clone(),
                topic_id: a.old_id(),
                partition: a.partition,
            };
            if self.parts.get(&key).is_some_and(|p| p.done) {
                continue;
            }
            match archived_view(key.clone(), &a.path, self.archived_seen.get(&a.path)) {
                Ok(view) => {
                    self.archived_seen.insert(a.path.clone(), view.clone());
                    views.push(view);
                }
                Err(e) => self.local_error(
                    &key,
                    format!(
                        "archived history `{}` cannot be read: {e:#}",
                        a.path.display()
                    ),
                ),
            }
        }
        let now = now_ms();
        self.lag.retain(|k, _| views.iter().any(|v| v.key == *k));
        for view in &views {
            self.update_lag(view, now);
        }
        // Each round starts one partition further: one that always fails does not keep those
        // after it waiting.
        self.rounds = self.rounds.wrapping_add(1);
        let start = usize::try_from(self.rounds).unwrap_or(0) % views.len().max(1);
        views.rotate_left(start);
        self.local_errors
            .retain(|k, _| views.iter().any(|v| v.key == *k));
        for view in views {
            if self.stopping() {
                return Ok(());
            }
            let key = view.key.clone();
            match self.partition_or_relist(&view) {
                Ok(()) => {
                    if self.local_errors.remove(&key).is_some() {
                        crate::log_info!("offsite: {} uploads again", key.describe());
                    }
                }
                // The store failing, or a key that does not open its objects, fails every
                // partition: the round ends, and backs off.
                Err(e) if bucket::fails_every_object(&e) || super::restore::is_key_error(&e) => {
                    return Err(e);
                }
                // Anything else is this partition's: said once, the others go on.
                Err(e) => self.local_error(&key, format!("{e:#}")),
            }
            self.update_lag(&view, now_ms());
        }
        self.upload_cluster_files(&cluster)
    }

    /// The data dir's archive of topic configs and group offsets, which a restore into Kafka
    /// needs: uploaded when it changed, with a new generation of the cluster's manifest of
    /// files.
    fn upload_cluster_files(&mut self, cluster: &str) -> Result<()> {
        let o = self.o.clone();
        let (generation, listed) = match self.cluster_files.take() {
            Some(c) => c,
            None => bucket::latest_cluster_files(&o, cluster)?,
        };
        let mut files = listed.clone();
        for name in [DataDir::TOPIC_CONFIGS, DataDir::GROUP_OFFSETS] {
            let bytes = match fs::read(self.data_dir.join(name)) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    crate::log_warn!(
                        "offsite: cannot read `{}`: {e}",
                        self.data_dir.join(name).display()
                    );
                    continue;
                }
            };
            let sum = FileSum::of(&bytes);
            if files.get(name) != Some(&sum) {
                if let Err(e) = bucket::put(&o, &bucket::cluster_file(cluster, name, &sum), &bytes)
                {
                    self.cluster_files = Some((generation, listed));
                    return Err(e);
                }
                self.figures.uploaded_objects += 1;
                self.figures.uploaded_bytes += sum.size;
                files.insert(name.to_string(), sum);
            }
        }
        if files == listed {
            self.cluster_files = Some((generation, listed));
            return Ok(());
        }
        // On failure, what the bucket lists is read again next time.
        bucket::put_cluster_files(&o, cluster, generation + 1, &files)?;
        self.figures.uploaded_objects += 1;
        self.cluster_files = Some((generation + 1, files));
        Ok(())
    }

    /// Says once (WARN) that `key`'s uploads fail on a local problem.
    fn local_error(&mut self, key: &PartitionKey, why: String) {
        if self.local_errors.get(key) != Some(&why) {
            crate::log_warn!(
                "offsite: {}: {why}; its uploads are tried again each round, the other partitions go on",
                key.describe()
            );
            self.local_errors.insert(key.clone(), why);
        }
    }

    /// The lag of `view` against the last manifest written of it (none yet: all of it).
    fn update_lag(&mut self, view: &LocalView, now: i64) {
        let empty;
        let m = match self.parts.get(&view.key) {
            Some(st) => &st.manifest,
            None => {
                empty = Manifest::empty(view.key.clone(), view.archived);
                &empty
            }
        };
        let (mut bytes, mut segments) = (0, 0);
        for seg in &view.segments {
            let have = m.segments.get(&seg.base);
            let done = have.is_some_and(|e| e.size >= seg.size && (e.is_closed() || !seg.closed));
            if !done {
                bytes += seg.size.saturating_sub(have.map_or(0, |e| e.size));
                segments += 1;
            }
        }
        let offsite = offsite_offset(m, view);
        let durable = durable_offset(view);
        let lag = self.lag.entry(view.key.clone()).or_default();
        if durable > offsite && lag.marks.back().is_none_or(|m| m.1 < durable) {
            lag.marks.push_back((now, durable));
            // While nothing goes up they pile up: every other one goes, the oldest stays.
            if lag.marks.len() > MAX_MARKS {
                let mut i = 0;
                lag.marks.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
            }
        }
        while lag.marks.front().is_some_and(|m| m.1 <= offsite) {
            lag.marks.pop_front();
        }
        if bytes == 0 {
            lag.marks.clear();
        }
        lag.bytes = bytes;
        lag.segments = segments;
    }

    /// [`Self::partition`]; after a failure, pieces it uploaded may be in no manifest: the
    /// next round lists them again and takes them, so none is uploaded twice.
    fn partition_or_relist(&mut self, view: &LocalView) -> Result<()> {
        let key = view.key.clone();
        self.partition(view).inspect_err(|_| {
            if let Some(st) = self.parts.get_mut(&key) {
                st.adopted = false;
            }
        })
    }

    /// One partition's round. Store errors end the round (the caller backs off); a local
    /// problem stops only this partition's uploads.
    fn partition(&mut self, view: &LocalView) -> Result<()> {
        if !self.parts.contains_key(&view.key) {
            let manifest = bucket::latest_manifest(&self.o, &view.key)?
                .unwrap_or_else(|| Manifest::empty(view.key.clone(), view.archived));
            self.parts.insert(
                view.key.clone(),
                PartState {
                    manifest,
                    checked: None,
                    adopted: false,
                    files_seen: BTreeMap::new(),
                    done: false,
                },
            );
        }
        let o = self.o.clone();
        let Some(st) = self.parts.get_mut(&view.key) else {
            return Ok(());
        };
        let mut next = st.manifest.clone();
        let mut changed = next.archived != view.archived;
        next.archived = view.archived;
        if st.checked != Some(view.generation) {
            // A disagreement may be a view the log has moved past (another truncation since):
            // it is this partition's error, tried again each round from a new view, while
            // retention keeps everything of it (its floor is for another generation).
            changed |= reconcile(&mut next, view).map_err(|e| {
                e.context(format!(
                    "the local log and its copy in {} disagree (`replica-follower offsite verify` tells where)",
                    o.location
                ))
            })?;
            st.checked = Some(view.generation);
        }
        if !st.adopted {
            changed |= adopt_orphans(&o, &mut next, view)?;
            st.adopted = true;
        }
        // How long the oldest durable byte not offsite has waited.
        let now = now_ms();
        let waited = self
            .lag
            .get(&view.key)
            .and_then(|l| l.marks.front())
            .map_or(0, |m| now - m.0);
        let tail_due = u128::try_from(waited.max(0)).unwrap_or(0) * 2 >= o.max_delay.as_millis();
        let mut uploaded = (0u64, 0u64);
        for seg in &view.segments {
            changed |= upload_segment(&o, &mut next, view, seg, tail_due, &mut uploaded)?;
        }
        changed |= upload_files(&o, &mut next, view, &mut st.files_seen, &mut uploaded)?;
        // Identity, epochs, lost ranges, log start.
        let epochs = merge_epochs(&next.epochs, &view.epochs);
        let mut lost = next.lost.clone();
        for r in &view.lost {
            if !lost.contains(r) {
                lost.push(*r);
            }
        }
        lost.sort_unstable();
        // The history's first offset: local retention only raises the local one.
        let log_start = if next.generation == 0 {
            view.log_start
        } else {
            next.log_start_offset.min(view.log_start)
        };
        if epochs != next.epochs || lost != next.lost || log_start != next.log_start_offset {
            next.epochs = epochs;
            next.lost = lost;
            next.log_start_offset = log_start;
            changed = true;
        }
        // A truncation since the view was taken: what this round uploaded may mix the log's
        // two histories; the next round starts again from a new view.
        if let Some(tp) = &view.tp
            && let Some(log) = self.logs.get(tp)
            && crate::log::manager::lock_log(&log).generation() != view.generation
        {
            st.checked = None;
            st.adopted = false;
            return Ok(());
        }
        if changed || next.generation == 0 {
            next.generation += 1;
            next.written_ms = now;
            match bucket::put_manifest(&o, &next) {
                Ok(None) => {}
                Ok(Some(found)) => {
                    // An earlier PUT of this generation whose answer was lost, or another
                    // writer: go on from what the bucket holds, checked against the log.
                    crate::log_info!(
                        "offsite: {}: manifest generation {} is in the bucket already (written at {} ms); going on from it",
                        view.key.describe(),
                        found.generation,
                        found.written_ms
                    );
                    st.manifest = found;
                    st.checked = None;
                    st.adopted = false;
                    return Ok(());
                }
                Err(e) => {
                    if !bucket::is_transient(&e) {
                        self.parts.remove(&view.key);
                    }
                    return Err(e);
                }
            }
            uploaded.0 += 1;
            self.figures.last_manifest_ms = Some(now);
            st.manifest = next;
        }
        self.figures.uploaded_objects += uploaded.0;
        self.figures.uploaded_bytes += uploaded.1;
        // What retention may now delete, and what is still pending.
        let m = &st.manifest;
        if let Some(tp) = &view.tp {
            let mut floor = i64::MIN;
            for seg in view.segments.iter().filter(|s| s.closed) {
                match m.segments.get(&seg.base) {
                    Some(e) if e.is_closed() && e.size == seg.size => floor = seg.next_offset,
                    _ => break,
                }
            }
            self.hold.set(tp, view.key.topic_id, view.generation, floor);
        }
        let whole = view.segments.iter().all(|seg| {
            m.segments
                .get(&seg.base)
                .is_some_and(|e| e.size >= seg.size && e.is_closed())
        });
        if view.archived && whole {
            st.done = true;
        }
        Ok(())
    }
}

/// `d` ± 25 %.
fn jitter(d: Duration) -> Duration {
    let r = crate::security::random_bytes(2)
        .ok()
        .and_then(|b| b.first().copied())
        .unwrap_or(128);
    let factor = 0.75 + f64::from(r) / 510.0;
    d.mul_f64(factor)
}

/// One line for a failed round: what to check, then the store's own words (`S3 GET: HTTP 403
/// RequestTimeTooSkewed: …`), which the advice alone would hide.
fn describe(o: &Offsite, e: &anyhow::Error) -> String {
    match bucket::store_error(e) {
        Some(se) => format!("{} (S3 {}: {})", se.advice(), se.op, se.detail),
        None => format!("{e:#} ({})", o.location),
    }
}

/// Uploads what `seg` has that the manifest lacks: for a closed segment all of it and its
/// indexes, for the active one its durable tail when `tail_due`.
fn upload_segment(
    o: &Offsite,
    m: &mut Manifest,
    view: &LocalView,
    seg: &LocalSegment,
    tail_due: bool,
    uploaded: &mut (u64, u64),
) -> Result<bool> {
    let entry = m.segments.get(&seg.base);
    if entry.is_some_and(|e| e.is_closed() && e.size == seg.size) {
        return Ok(false);
    }
    let have = entry.map_or(0, |e| e.size);
    let closed = seg.closed && seg.next_offset <= view.durable;
    if !closed && !tail_due {
        return Ok(false);
    }
    let path = view
        .dir
        .join(crate::log::format::segment::file_name(seg.base, "log"));
    let mut changed = false;
    let mut at = have;
    while at < seg.size {
        let want_to = seg.size.min(at + PIECE_MAX);
        // Read at least one whole batch even when it is larger than a piece.
        let bytes = read_range(&path, at, seg.size.min(at.max(want_to)))?;
        let mut end = 0usize;
        let mut last = None;
        let walked = walk_window(&bytes, |h, e| {
            if h.last_offset >= view.durable || (last.is_some() && e as u64 > PIECE_MAX) {
                return false;
            }
            end = e;
            last = Some(h.last_offset);
            true
        });
        if let Err(e) = walked {
            // The file changed under the read (a truncation); the next round sees it.
            crate::log_warn!(
                "offsite: {}: segment {} could not be read for upload: {e:#}",
                view.key.describe(),
                seg.base
            );
            return Ok(changed);
        }
        if end == 0 {
            // A batch larger than a piece: one piece of its own.
            if let Ok(h) = BatchHeader::parse_prefix(&bytes, usize::MAX)
                && at + h.size_in_bytes as u64 <= seg.size
                && h.size_in_bytes > bytes.len()
                && h.last_offset < view.durable
            {
                let whole = read_range(&path, at, at + h.size_in_bytes as u64)?;
                walk_batches(&whole, |_, _| true)?;
                changed |= put_piece(o, m, view, seg.base, at, &whole, h.last_offset, uploaded)?;
                at += whole.len() as u64;
                continue;
            }
            break;
        }
        let piece = bytes.get(..end).unwrap_or_default();
        let last = last.unwrap_or(seg.base - 1);
        changed |= put_piece(o, m, view, seg.base, at, piece, last, uploaded)?;
        at += end as u64;
    }
    if closed && at == seg.size {
        let mut sums = Vec::new();
        for kind in ["index", "timeindex", "txnindex"] {
            let p = view
                .dir
                .join(crate::log::format::segment::file_name(seg.base, kind));
            let bytes = match fs::read(&p) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", p.display())),
            };
            let sum = FileSum::of(&bytes);
            bucket::put(o, &view.key.index(seg.base, kind, &sum), &bytes)?;
            uploaded.0 += 1;
            uploaded.1 += sum.size;
            sums.push(sum);
        }
        if let [index, timeindex, txnindex] = sums.as_slice() {
            let entry = m.segments.entry(seg.base).or_insert(SegmentEntry {
                next_offset: seg.next_offset,
                size: 0,
                pieces: Vec::new(),
                indexes: None,
            });
            entry.next_offset = seg.next_offset;
            entry.size = seg.size;
            entry.indexes = Some(Indexes {
                index: *index,
                timeindex: *timeindex,
                txnindex: *txnindex,
            });
            changed = true;
        }
    }
    Ok(changed)
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site, each argument distinct"
)]
fn put_piece(
    o: &Offsite,
    m: &mut Manifest,
    view: &LocalView,
    base: i64,
    from: u64,
    bytes: &[u8],
    last_offset: i64,
    uploaded: &mut (u64, u64),
) -> Result<bool> {
    if bytes.is_empty() {
        return Ok(false);
    }
    let p = Piece {
        from,
        to: from + bytes.len() as u64,
        crc: crc32c::crc32c(bytes),
    };
    bucket::put(o, &view.key.piece(base, &p), bytes)?;
    // A kill here leaves a piece in no manifest: the next start adopts it.
    crate::log::format::diverged::test_pause_point("offsite-piece-uploaded");
    uploaded.0 += 1;
    uploaded.1 += bytes.len() as u64;
    let entry = m.segments.entry(base).or_insert(SegmentEntry {
        next_offset: base,
        size: 0,
        pieces: Vec::new(),
        indexes: None,
    });
    entry.pieces.push(p);
    entry.size = p.to;
    entry.next_offset = last_offset + 1;
    Ok(true)
}

/// Uploads the files of `diverged/` and `damaged/` that are new or changed.
fn upload_files(
    o: &Offsite,
    m: &mut Manifest,
    view: &LocalView,
    seen: &mut BTreeMap<String, (u64, i64, FileSum)>,
    uploaded: &mut (u64, u64),
) -> Result<bool> {
    let mut changed = false;
    for sub in [DataDir::DIVERGED_DIR, DataDir::DAMAGED_DIR] {
        let dir = view.dir.join(sub);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(md) = entry.metadata() else { continue };
            let Some(fname) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !md.is_file() || fname.ends_with(".tmp") || fname.contains(char::is_whitespace) {
                continue;
            }
            let name = format!("{sub}/{fname}");
            let mtime = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            if let Some((len, t, sum)) = seen.get(&name)
                && *len == md.len()
                && *t == mtime
                && m.files.get(&name) == Some(sum)
            {
                continue;
            }
            // Read a part at a time: such a copy may be as large as the segments it came from.
            let path = entry.path();
            let size = md.len();
            let mut crc = 0u32;
            let mut at = 0;
            while at < size {
                let to = size.min(at + FILE_PART);
                crc = crc32c::crc32c_append(crc, &read_range(&path, at, to)?);
                at = to;
            }
            let sum = FileSum { size, crc };
            if m.files.get(&name) != Some(&sum) {
                for part in 0..sum.parts() {
                    let from = part * FILE_PART;
                    let bytes = read_range(&path, from, size.min(from + FILE_PART))?;
                    bucket::put(o, &view.key.file(&name, &sum, part), &bytes)?;
                    uploaded.0 += 1;
                    uploaded.1 += bytes.len() as u64;
                }
                m.files.insert(name.clone(), sum);
                changed = true;
            }
            seen.insert(name, (md.len(), mtime, sum));
        }
    }
    Ok(changed)
}
