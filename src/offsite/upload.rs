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
use super::manifest::{FileSum, Indexes, Manifest, PartitionKey, Piece, SegmentEntry};
use super::settings::Offsite;
use crate::checkpoint::TopicPartition;
use crate::live::{Live, OffsiteLive};
use crate::log::data_dir::DataDir;
use crate::log::manager::{LogManager, RetentionHold, lock_log};
use crate::record::BatchHeader;
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of a segment in one object: bounds the memory an upload takes (the piece
/// and its sealed copy).
pub const PIECE_MAX: u64 = 16 << 20;
/// Backoff after a failed round: doubles from the first to the last, with jitter.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// One segment of a local log, as a round found it.
#[derive(Debug, Clone)]
struct LocalSegment {
    base: i64,
    size: u64,
    next_offset: i64,
    /// Rolled (or archived): its bytes and indexes are final.
    closed: bool,
}

/// A local log (or archived history) as one round sees it.
#[derive(Debug, Clone)]
struct LocalView {
    key: PartitionKey,
    tp: Option<TopicPartition>,
    dir: PathBuf,
    archived: bool,
    log_start: i64,
    /// Offsets below this are fsynced: only they go up.
    durable: i64,
    /// Moves on every truncation of the log.
    generation: u64,
    segments: Vec<LocalSegment>,
    epochs: Vec<(i32, i64)>,
    lost: Vec<(i64, i64)>,
}

/// What the uploader knows of one partition history.
#[derive(Debug)]
struct PartState {
    manifest: Manifest,
    /// The log generation the manifest was last checked against.
    checked: Option<u64>,
    /// Orphan pieces (uploaded before a kill, in no manifest) were looked for.
    adopted: bool,
    /// (when first seen, position) of durable ends, oldest first: the first whose position
    /// is past what is offsite tells how long the oldest pending byte has waited.
    marks: VecDeque<(i64, (i64, u64))>,
    /// name → (len, mtime, sum) of the files beside the log, so that unchanged ones are not
    /// read again.
    files_seen: BTreeMap<String, (u64, i64, FileSum)>,
    /// Set when the local log and the bucket disagree: uploads of it stop (ERROR once).
    stopped: Option<String>,
    /// An archived history that is wholly offsite: not looked at again.
    done: bool,
    /// Figures of the last round.
    pending_bytes: u64,
    pending_segments: u64,
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
    figures: OffsiteLive,
    /// What the current failure was said as, while uploads fail.
    failing: Option<String>,
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
            figures,
            failing: None,
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
                    self.figures.failing = None;
                    self.backoff = BACKOFF_FIRST;
                    self.tick()
                }
                Err(e) => {
                    self.figures.errors += 1;
                    let text = describe(&self.o, &e);
                    if self.failing.is_none() {
                        if bucket::is_transient(&e) {
                            crate::log_warn!(
                                "offsite: uploads to {} fail ({text}); following goes on, uploads are retried with backoff",
                                self.o.location
                            );
                        } else {
                            crate::log_error!(
                                "offsite: uploads to {} fail: {text}; following goes on, uploads are retried",
                                self.o.location
                            );
                        }
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
        f.pending_bytes = self.parts.values().map(|p| p.pending_bytes).sum();
        f.pending_segments = self.parts.values().map(|p| p.pending_segments).sum();
        f.oldest_pending_ms = self
            .parts
            .values()
            .filter(|p| p.pending_bytes > 0)
            .filter_map(|p| p.marks.front().map(|m| m.0))
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
        for (tp, log) in self.logs.all() {
            if self.stopping() {
                return Ok(());
            }
            let Some(view) = live_view(&cluster, &tp, &log) else {
                continue;
            };
            self.partition_or_relist(view)?;
        }
        for a in crate::log::identity::list_archived(&self.data_dir).unwrap_or_default() {
            if self.stopping() {
                return Ok(());
            }
            let key = PartitionKey {
                cluster_id: cluster.clone(),
                topic: a.topic.clone(),
                topic_id: a.old_id(),
                partition: a.partition,
            };
            if self.parts.get(&key).is_some_and(|p| p.done) {
                continue;
            }
            match archived_view(key.clone(), &a.path) {
                Ok(view) => self.partition_or_relist(view)?,
                Err(e) => crate::log_warn!(
                    "offsite: archived history `{}` cannot be read: {e:#}",
                    a.path.display()
                ),
            }
        }
        Ok(())
    }

    /// [`Self::partition`]; after a failure, pieces it uploaded may be in no manifest: the
    /// next round lists them again and takes them, so none is uploaded twice.
    fn partition_or_relist(&mut self, view: LocalView) -> Result<()> {
        let key = view.key.clone();
        self.partition(view).inspect_err(|_| {
            if let Some(st) = self.parts.get_mut(&key) {
                st.adopted = false;
            }
        })
    }

    /// One partition's round. Store errors end the round (the caller backs off); a local
    /// problem stops only this partition's uploads.
    fn partition(&mut self, view: LocalView) -> Result<()> {
        if !self.parts.contains_key(&view.key) {
            let manifest = bucket::latest_manifest(&self.o, &view.key)?
                .unwrap_or_else(|| Manifest::empty(view.key.clone(), view.archived));
            self.parts.insert(
                view.key.clone(),
                PartState {
                    manifest,
                    checked: None,
                    adopted: false,
                    marks: VecDeque::new(),
                    files_seen: BTreeMap::new(),
                    stopped: None,
                    done: false,
                    pending_bytes: 0,
                    pending_segments: 0,
                },
            );
        }
        let o = self.o.clone();
        let Some(st) = self.parts.get_mut(&view.key) else {
            return Ok(());
        };
        if st.stopped.is_some() {
            return Ok(());
        }
        let mut next = st.manifest.clone();
        let mut changed = next.archived != view.archived;
        next.archived = view.archived;
        if st.checked != Some(view.generation) {
            match reconcile(&mut next, &view) {
                Ok(c) => changed |= c,
                Err(e) => {
                    crate::log_error!(
                        "offsite: {}: the local log and its copy in {} disagree: {e:#}; uploads of this partition stop (run `replica-follower offsite verify`)",
                        view.key.describe(),
                        o.location
                    );
                    st.stopped = Some(format!("{e:#}"));
                    return Ok(());
                }
            }
            st.checked = Some(view.generation);
        }
        if !st.adopted {
            changed |= adopt_orphans(&o, &mut next, &view)?;
            st.adopted = true;
        }
        // How long the oldest durable byte not offsite has waited.
        let now = now_ms();
        let durable_end = durable_end(&view);
        if st.marks.back().is_none_or(|m| m.1 < durable_end) {
            st.marks.push_back((now, durable_end));
        }
        let offsite_end = offsite_end(&next, &view);
        while st.marks.front().is_some_and(|m| m.1 <= offsite_end) {
            st.marks.pop_front();
        }
        let waited = st.marks.front().map_or(0, |m| now - m.0);
        let tail_due = u128::try_from(waited.max(0)).unwrap_or(0) * 2 >= o.max_delay.as_millis();
        let mut uploaded = (0u64, 0u64);
        for seg in &view.segments {
            changed |= upload_segment(&o, &mut next, &view, seg, tail_due, &mut uploaded)?;
        }
        changed |= upload_files(&o, &mut next, &view, &mut st.files_seen, &mut uploaded)?;
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
        if changed || next.generation == 0 {
            next.generation += 1;
            next.written_ms = now;
            let name = view.key.manifest(next.generation);
            match bucket::put(&o, &name, next.render().as_bytes())? {
                super::store::Put::Created => {}
                super::store::Put::Existed => {
                    // Another writer got there first: start again from what the bucket says.
                    self.parts.remove(&view.key);
                    bail!(
                        "manifest `{}` exists already: another daemon uploads {} to this bucket and prefix",
                        o.object(&name),
                        view.key.describe()
                    );
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
            self.hold.set(tp, floor);
        }
        let (mut bytes, mut segs) = (0, 0);
        for seg in &view.segments {
            let have = m.segments.get(&seg.base);
            let done = have.is_some_and(|e| e.size >= seg.size && (e.is_closed() || !seg.closed));
            if !done {
                bytes += seg.size.saturating_sub(have.map_or(0, |e| e.size));
                segs += 1;
            }
        }
        st.pending_bytes = bytes;
        st.pending_segments = segs;
        if bytes == 0 {
            st.marks.clear();
        }
        if view.archived && segs == 0 {
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

/// One line for a failed round: the store's own words and what to check.
fn describe(o: &Offsite, e: &anyhow::Error) -> String {
    match bucket::store_error(e) {
        Some(se) => se.advice(),
        None => format!("{e:#} ({})", o.location),
    }
}

fn live_view(
    cluster: &str,
    tp: &TopicPartition,
    log: &crate::log::manager::SharedLog,
) -> Option<LocalView> {
    let log = lock_log(log);
    if log.is_retired() || log.failed().is_some() {
        return None;
    }
    let count = log.segments().count();
    let segments = log
        .segments()
        .enumerate()
        .map(|(i, s)| LocalSegment {
            base: s.base_offset,
            size: s.size(),
            next_offset: s.next_offset(),
            closed: i + 1 < count,
        })
        .collect();
    Some(LocalView {
        key: PartitionKey {
            cluster_id: cluster.to_string(),
            topic: tp.topic.clone(),
            topic_id: log.topic_id(),
            partition: tp.partition,
        },
        tp: Some(tp.clone()),
        dir: log.dir.clone(),
        archived: false,
        log_start: log.log_start_offset(),
        durable: log.recovery_point(),
        generation: log.generation(),
        segments,
        epochs: log.epoch_cache().entries().to_vec(),
        lost: log.lost_upstream().to_vec(),
    })
}

/// An archived history, read from its directory: nothing writes to it any more, so every
/// segment is closed and every byte durable.
fn archived_view(key: PartitionKey, dir: &Path) -> Result<LocalView> {
    let bases = crate::log::partition::list_segment_bases(dir)?;
    let mut segments = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        let path = dir.join(crate::log::format::segment::file_name(*base, "log"));
        let size = fs::metadata(&path)
            .with_context(|| format!("cannot read `{}`", path.display()))?
            .len();
        let next_offset = match bases.get(i + 1) {
            Some(n) => *n,
            None => last_offset_in(&path, size)?.map_or(*base, |l| l + 1),
        };
        segments.push(LocalSegment {
            base: *base,
            size,
            next_offset,
            closed: true,
        });
    }
    let epochs = crate::checkpoint::read_epochs(&dir.join(DataDir::LEADER_EPOCH))?;
    let lost = crate::checkpoint::read_ranges(&dir.join(DataDir::LOST_UPSTREAM))?;
    Ok(LocalView {
        key,
        tp: None,
        dir: dir.to_path_buf(),
        archived: true,
        log_start: bases.first().copied().unwrap_or(0),
        durable: i64::MAX,
        generation: 0,
        segments,
        epochs,
        lost,
    })
}

/// The last offset of the last batch in the first `size` bytes of a segment file.
fn last_offset_in(path: &Path, size: u64) -> Result<Option<i64>> {
    let bytes = read_range(path, 0, size)?;
    let mut last = None;
    walk_batches(&bytes, |h, _| {
        last = Some(h.last_offset);
        true
    })
    .with_context(|| format!("`{}`", path.display()))?;
    Ok(last)
}

/// Bytes [from, to) of a file.
pub fn read_range(path: &Path, from: u64, to: u64) -> Result<Vec<u8>> {
    let mut f =
        fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    f.seek(SeekFrom::Start(from))
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    let len = usize::try_from(to.saturating_sub(from)).context("range too large")?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).with_context(|| {
        format!(
            "cannot read bytes {from}..{to} of `{}` (it is shorter)",
            path.display()
        )
    })?;
    Ok(buf)
}

/// Calls `f(header, end position)` for each whole batch in `bytes`, checking its CRC, until
/// `f` says stop; errors on a damaged batch or a partial one at the end. Returns where the
/// walk stopped.
pub fn walk_batches(bytes: &[u8], f: impl FnMut(&BatchHeader, usize) -> bool) -> Result<usize> {
    walk(bytes, false, f)
}

/// [`walk_batches`] over a window of a file that may end inside a batch: the walk stops
/// before that batch.
fn walk_window(bytes: &[u8], f: impl FnMut(&BatchHeader, usize) -> bool) -> Result<usize> {
    walk(bytes, true, f)
}

fn walk(
    bytes: &[u8],
    partial_tail: bool,
    mut f: impl FnMut(&BatchHeader, usize) -> bool,
) -> Result<usize> {
    let mut pos = 0usize;
    while pos < bytes.len() {
        let rest = bytes.get(pos..).unwrap_or_default();
        let h = match BatchHeader::parse(rest, usize::MAX) {
            Ok(h) => h,
            Err(crate::record::BatchError::Truncated { .. }) if partial_tail => break,
            Err(e) => anyhow::bail!("batch at byte {pos}: {e}"),
        };
        let end = pos + h.size_in_bytes;
        let batch = bytes.get(pos..end).unwrap_or_default();
        h.verify_crc(batch)
            .map_err(|e| anyhow::anyhow!("batch at byte {pos} (offset {}): {e}", h.base_offset))?;
        if !f(&h, end) {
            break;
        }
        pos = end;
    }
    Ok(pos)
}

/// Where the durable bytes of the view end: (segment base, byte position) of the last
/// segment with any.
fn durable_end(view: &LocalView) -> (i64, u64) {
    view.segments
        .iter()
        .rev()
        .find(|s| s.size > 0)
        .map_or((i64::MIN, 0), |s| (s.base, s.size))
}

/// Where the bytes offsite stop being contiguous with the local log: the first local
/// segment not wholly offsite, and how much of it is.
fn offsite_end(m: &Manifest, view: &LocalView) -> (i64, u64) {
    for s in &view.segments {
        let have = m.segments.get(&s.base).map_or(0, |e| e.size);
        if have < s.size {
            return (s.base, have);
        }
    }
    (i64::MAX, 0)
}

/// Brings the manifest in line with a log that was truncated (the removed bytes, when
/// committed, are in `diverged/` and go up as files). The truncation cut one local segment
/// and removed those after it, and the log may have gone on past the cut, even rolled,
/// before this round: so, from the first piece offsite that the local file no longer holds
/// as it is (shorter there, or other bytes in its range), everything offsite is stale. That
/// piece and the rest of its segment leave the manifest (the bytes before the cut go up again
/// from the local file), and so does every later segment. Those local bytes must be whole,
/// CRC-valid batches: other bytes are damage, not a truncation, and an error. Segments below
/// the local log start (retention) and missing from the middle (damage) stay.
fn reconcile(m: &mut Manifest, view: &LocalView) -> Result<bool> {
    let mut changed = false;
    let Some(first_local) = view.segments.first().map(|s| s.base) else {
        return Ok(false);
    };
    let last_local = view
        .segments
        .iter()
        .rev()
        .find(|s| s.size > 0)
        .map_or(first_local, |s| s.base);
    // The segment where the copy stops matching the local log.
    let mut diverged = false;
    let bases: Vec<i64> = m.segments.keys().copied().collect();
    for base in bases {
        if base < first_local {
            continue;
        }
        let local = view.segments.iter().find(|s| s.base == base);
        let Some(entry) = m.segments.get_mut(&base) else {
            continue;
        };
        if diverged || (local.is_none() && base > last_local) {
            crate::log_info!(
                "offsite: {}: segment {base} was truncated away locally; the next manifest leaves it out (its committed batches are in diverged/)",
                view.key.describe()
            );
            m.segments.remove(&base);
            changed = true;
            continue;
        }
        let Some(l) = local else {
            continue;
        };
        let path = view
            .dir
            .join(crate::log::format::segment::file_name(base, "log"));
        // A truncation replaces a suffix: the pieces the local file still holds as they are
        // come first, so the first one it does not is found by halving.
        let holds = |p: &Piece| -> Result<bool> {
            Ok(p.to <= l.size && crc32c::crc32c(&read_range(&path, p.from, p.to)?) == p.crc)
        };
        let (mut kept, mut beyond) = (0usize, entry.pieces.len());
        if let Some(last) = entry.pieces.last()
            && !holds(last)?
        {
            beyond -= 1;
            while kept < beyond {
                let mid = kept + (beyond - kept) / 2;
                match entry.pieces.get(mid) {
                    Some(p) if holds(p)? => kept = mid + 1,
                    _ => beyond = mid,
                }
            }
            if let Some(p) = entry.pieces.get(kept) {
                // The piece holding the cut: the local bytes from its start on are the kept
                // batches, then those appended since.
                let upto = p.to.min(l.size);
                walk_window(&read_range(&path, p.from, upto)?, |_, _| true).with_context(|| {
                    format!(
                        "bytes {}..{upto} of segment {base} differ from their copy offsite, and the local ones are damaged",
                        p.from
                    )
                })?;
            }
        } else {
            kept = beyond;
        }
        if kept == entry.pieces.len() {
            continue;
        }
        diverged = true;
        changed = true;
        let Some(last_piece) = kept.checked_sub(1).and_then(|i| entry.pieces.get(i)) else {
            crate::log_info!(
                "offsite: {}: segment {base} was truncated locally; the next manifest leaves out its copy and it goes up again",
                view.key.describe()
            );
            m.segments.remove(&base);
            continue;
        };
        let mut last = None;
        walk_batches(
            &read_range(&path, last_piece.from, last_piece.to)?,
            |h, _| {
                last = Some(h.last_offset);
                true
            },
        )?;
        entry.pieces.truncate(kept);
        entry.size = entry.pieces.last().map_or(0, |p| p.to);
        entry.next_offset = last.map_or(base, |l| l + 1);
        entry.indexes = None;
        crate::log_info!(
            "offsite: {}: segment {base} was truncated locally; the next manifest keeps its first {} bytes offsite, the rest goes up again",
            view.key.describe(),
            entry.size
        );
    }
    Ok(changed)
}

/// Takes into the manifest the pieces a killed run uploaded after its last manifest, when
/// they continue a segment and match the local bytes, so they are not uploaded again.
fn adopt_orphans(o: &Offsite, m: &mut Manifest, view: &LocalView) -> Result<bool> {
    let mut changed = false;
    for seg in &view.segments {
        let have = m.segments.get(&seg.base).map_or(0, |e| e.size);
        if have >= seg.size
            || m.segments
                .get(&seg.base)
                .is_some_and(SegmentEntry::is_closed)
        {
            continue;
        }
        let prefix = view.key.pieces_of(seg.base);
        let listing = o.store.list(&o.object(&prefix), None)?;
        let mut found: BTreeMap<u64, Piece> = BTreeMap::new();
        for (name, _) in &listing.objects {
            if let Some(p) = name
                .strip_prefix(&o.object(&prefix))
                .and_then(super::manifest::parse_piece_name)
            {
                found.insert(p.from, p);
            }
        }
        let path = view
            .dir
            .join(crate::log::format::segment::file_name(seg.base, "log"));
        let mut at = have;
        while let Some(p) = found.get(&at).copied() {
            if p.to > seg.size {
                break;
            }
            let bytes = read_range(&path, p.from, p.to)?;
            if crc32c::crc32c(&bytes) != p.crc {
                break;
            }
            let mut last = None;
            walk_batches(&bytes, |h, _| {
                last = Some(h.last_offset);
                true
            })?;
            let entry = m.segments.entry(seg.base).or_insert(SegmentEntry {
                next_offset: seg.base,
                size: 0,
                pieces: Vec::new(),
                indexes: None,
            });
            entry.pieces.push(p);
            entry.size = p.to;
            if let Some(l) = last {
                entry.next_offset = l + 1;
            }
            at = p.to;
            changed = true;
        }
    }
    Ok(changed)
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
            let bytes = fs::read(entry.path())
                .with_context(|| format!("cannot read `{}`", entry.path().display()))?;
            let sum = FileSum::of(&bytes);
            if m.files.get(&name) != Some(&sum) {
                bucket::put(o, &view.key.file(&name, &sum), &bytes)?;
                uploaded.0 += 1;
                uploaded.1 += sum.size;
                m.files.insert(name.clone(), sum);
                changed = true;
            }
            seen.insert(name, (md.len(), mtime, sum));
        }
    }
    Ok(changed)
}

/// The epochs of the whole history: those the bucket has below the local log's first epoch
/// (retention moved the local file's start up), then the local ones, the first starting
/// where the bucket says it did.
pub fn merge_epochs(offsite: &[(i32, i64)], local: &[(i32, i64)]) -> Vec<(i32, i64)> {
    let Some(&(first_epoch, first_start)) = local.first() else {
        return offsite.to_vec();
    };
    let mut out: Vec<(i32, i64)> = offsite
        .iter()
        .copied()
        .filter(|(e, _)| *e < first_epoch)
        .collect();
    let start = offsite
        .iter()
        .find(|(e, _)| *e == first_epoch)
        .map_or(first_start, |(_, s)| (*s).min(first_start));
    out.push((first_epoch, start));
    out.extend(local.iter().skip(1).copied());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_merge_keeps_the_history_retention_cut_locally() {
        let offsite = [(0, 0), (2, 100), (5, 300)];
        assert_eq!(
            merge_epochs(&offsite, &[(2, 150), (5, 300), (6, 400)]),
            vec![(0, 0), (2, 100), (5, 300), (6, 400)]
        );
        // A truncation dropped the local epoch 5: so does the merge.
        assert_eq!(merge_epochs(&offsite, &[(2, 150)]), vec![(0, 0), (2, 100)]);
        assert_eq!(merge_epochs(&[], &[(1, 5)]), vec![(1, 5)]);
        assert_eq!(merge_epochs(&offsite, &[]), offsite.to_vec());
    }
}
