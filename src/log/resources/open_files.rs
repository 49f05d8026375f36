//! Open segment files, bounded (`log.max_open_files`): a least-recently-used cache of the
//! descriptors that segments keep open between calls, shared by every partition of the
//! process (the open-file limit is the process's).
//!
//! A segment reaches its `.log` only through its [`SegmentFile`]: [`SegmentFile::get`] hands
//! out the cached descriptor as an `Arc<File>`, reopening the file when it was closed. The
//! `Arc` is the pin: while a caller holds it, no one closes that descriptor. When a file
//! must be opened and the cache holds its budget, the least recently used files nobody
//! holds are closed first. Indexes hold no descriptor between calls (see
//! [`crate::log::format::index_file`]), so only `.log` files are cached.
//!
//! Durability: closing a descriptor never loses a claim. A file written since its last
//! fsync is fsynced before its descriptor closes (a failed fsync halts, as every failed
//! fsync does), so no write error can be forgotten with its descriptor; the recovery point
//! still moves only when the partition's own flush has fsynced the file. The segment's
//! in-memory state (its size above all) stays authoritative: a reopened file must be the same
//! inode, as long as the segment says, or the call fails as a storage error.
//!
//! Locking: the cache's mutex is a leaf. It is taken under a partition lock (never the
//! other way round), nothing else is locked while it is held, and no fsync runs under it:
//! evicted files are synced and closed after it is released. The owner of a
//! [`SegmentFile`] (the segment, under its partition's lock) is the only caller of
//! [`SegmentFile::get`] for it, so one file never has two descriptors in the cache.

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The fewest files a bounded cache keeps open, whatever the limit.
pub const MIN_BUDGET: usize = 16;

/// How many of the least recently used files are looked at for one nobody has written
/// since its fsync, before a written one is fsynced to be closed.
const CLEAN_SEARCH: usize = 16;

/// Times an open that meets EMFILE closes one more cached file and tries again.
const EMFILE_RETRIES: usize = 4;

/// The default `log.max_open_files` for a soft `RLIMIT_NOFILE` of `soft`: a quarter of it,
/// at least 128, is left for sockets, the listeners, checkpoint and index files (opened only
/// while written), and the rest may hold segments; never fewer than [`MIN_BUDGET`].
pub fn default_budget(soft: Option<u64>) -> usize {
    match soft {
        Some(soft) => {
            let margin = (soft / 4).max(128);
            usize::try_from(soft.saturating_sub(margin))
                .unwrap_or(usize::MAX)
                .max(MIN_BUDGET)
        }
        None => usize::MAX,
    }
}

/// The process's cache. Unbounded until the daemon sets its budget (the inspection
/// commands and tests keep every file open, as before).
pub fn shared() -> &'static Arc<FileCache> {
    static SHARED: OnceLock<Arc<FileCache>> = OnceLock::new();
    SHARED.get_or_init(|| Arc::new(FileCache::new(usize::MAX)))
}

#[derive(Debug)]
struct Slot {
    file: Arc<File>,
    path: PathBuf,
    /// When it was last handed out (the cache's clock); its key in `Lru::order`.
    used: u64,
    /// The clock at its last write, and the clock at which the last fsync that covered
    /// every write before it began. Written since its fsync: `written > synced`.
    written: u64,
    synced: u64,
}

#[derive(Debug, Default)]
struct Lru {
    slots: HashMap<u64, Slot>,
    /// `used` → slot id, oldest first.
    order: BTreeMap<u64, u64>,
    /// Moves at every hand-out, write and flush; never goes back.
    clock: u64,
    next_id: u64,
    /// Files closed to make room, since the start.
    evictions: u64,
    /// Files fsynced because they were closed with unsynced writes, since the start.
    synced_on_close: u64,
}

impl Lru {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn remove(&mut self, id: u64) -> Option<Slot> {
        let slot = self.slots.remove(&id)?;
        self.order.remove(&slot.used);
        Some(slot)
    }

    /// The least recently used slot no caller holds, preferring one with nothing unsynced
    /// among the oldest few.
    fn victim(&self) -> Option<u64> {
        let idle = || {
            self.order.values().filter(|id| {
                self.slots
                    .get(id)
                    .is_some_and(|s| Arc::strong_count(&s.file) == 1)
            })
        };
        idle()
            .take(CLEAN_SEARCH)
            .find(|id| self.slots.get(id).is_some_and(|s| s.written <= s.synced))
            .or_else(|| idle().next())
            .copied()
    }
}

/// The cache; see the module doc.
pub struct FileCache {
    /// Most files held open at once (callers that pin more than this go over it for as long
    /// as they hold them). Written by the daemon at start, read at every open.
    budget: AtomicUsize,
    lru: Mutex<Lru>,
}

impl std::fmt::Debug for FileCache {
    /// The budget only: every segment's `Debug` shows its file's cache.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileCache {{ budget: {} }}", self.budget())
    }
}

impl FileCache {
    pub fn new(budget: usize) -> Self {
        FileCache {
            budget: AtomicUsize::new(budget.max(1)),
            lru: Mutex::default(),
        }
    }

    pub fn set_budget(&self, budget: usize) {
        self.budget.store(budget.max(1), Ordering::SeqCst);
    }

    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::SeqCst)
    }

    /// Files open in the cache now.
    pub fn open_count(&self) -> usize {
        self.lock().slots.len()
    }

    /// Files closed to make room since the start.
    pub fn evictions(&self) -> u64 {
        self.lock().evictions
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        self.lru
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes idle files out until fewer than the budget remain open (`extra`: that many
    /// more), to be closed by the caller after the lock is gone.
    fn make_room(&self, lru: &mut Lru, extra: usize) -> Vec<(u64, Slot)> {
        let mut out = Vec::new();
        let target = self.budget().saturating_sub(1);
        let mut extra = extra;
        while lru.slots.len() > target || extra > 0 {
            let Some(id) = lru.victim() else { break };
            let Some(slot) = lru.remove(id) else { break };
            lru.evictions += 1;
            extra = extra.saturating_sub(1);
            out.push((id, slot));
        }
        out
    }

    fn close_all(&self, taken: Vec<(u64, Slot)>) {
        taken
            .into_iter()
            .for_each(|(_, slot)| self.close_slot(slot));
    }

    /// Closes a file taken out of the cache (call without its lock): fsynced first when it
    /// was written since its last fsync. Another holder of the `Arc` (a flush in progress)
    /// keeps the descriptor open until it is done.
    fn close_slot(&self, slot: Slot) {
        if slot.written > slot.synced {
            if let Err(e) = slot.file.sync_data() {
                crate::log::halt_on_fsync_error(&slot.path, &e);
            }
            self.lock().synced_on_close += 1;
        }
    }

    /// Files fsynced because they were closed with unsynced writes, since the start.
    pub fn synced_on_close(&self) -> u64 {
        self.lock().synced_on_close
    }

    /// Opens `path` (read and write; `create` truncates it) after making room, retrying
    /// with one more file closed when the process limit is met anyway.
    fn open(&self, path: &Path, create: bool) -> std::io::Result<File> {
        let taken = self.make_room(&mut self.lock(), 0);
        self.close_all(taken);
        let mut tries = 0;
        loop {
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(create)
                .open(path);
            match opened {
                Err(e) if is_exhausted_io(&e) && tries < EMFILE_RETRIES => {
                    tries += 1;
                    let taken = self.make_room(&mut self.lock(), 1);
                    if taken.is_empty() {
                        return Err(e);
                    }
                    self.close_all(taken);
                }
                other => return other,
            }
        }
    }

    fn insert(&self, file: File, path: &Path) -> (u64, Arc<File>) {
        let file = Arc::new(file);
        let mut lru = self.lock();
        let id = lru.next_id;
        lru.next_id += 1;
        let used = lru.tick();
        lru.slots.insert(
            id,
            Slot {
                file: file.clone(),
                path: path.to_path_buf(),
                used,
                written: 0,
                synced: 0,
            },
        );
        lru.order.insert(used, id);
        (id, file)
    }

    /// The cached descriptor of `id`, marked used (and written, with `write`).
    fn hand_out(&self, id: u64, write: bool) -> Option<Arc<File>> {
        let mut lru = self.lock();
        let now = lru.tick();
        let slot = lru.slots.get_mut(&id)?;
        let old = std::mem::replace(&mut slot.used, now);
        if write {
            slot.written = now;
        }
        let file = slot.file.clone();
        lru.order.remove(&old);
        lru.order.insert(now, id);
        Some(file)
    }

    fn forget(&self, id: u64) -> Option<Slot> {
        self.lock().remove(id)
    }
}

/// One segment's `.log` as the cache keeps it: open, or closed and reopened on demand.
#[derive(Debug)]
pub struct SegmentFile {
    cache: Arc<FileCache>,
    path: PathBuf,
    /// The slot while the cache holds a descriptor (it may have closed it since).
    id: Option<u64>,
    /// The file first opened: a reopen must find the same one.
    identity: FileId,
}

/// (device, inode, birth time): the birth time tells a file from a new one that reuses the
/// inode number of a deleted one (where the filesystem reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId(u64, u64, Option<std::time::SystemTime>);

impl FileId {
    pub fn of(m: &std::fs::Metadata) -> Self {
        FileId(m.dev(), m.ino(), m.created().ok())
    }
}

/// Where a flush began, for [`SegmentFile::synced`].
#[derive(Debug, Clone, Copy)]
pub struct SyncMark(u64);

impl SegmentFile {
    /// Creates the file at `path` (truncating one that exists) and keeps it open.
    pub fn create(cache: &Arc<FileCache>, path: &Path) -> Result<Self> {
        let f = cache
            .open(path, true)
            .with_context(|| format!("failed to create segment `{}`", path.display()))?;
        Self::adopt(cache, path, f)
    }

    /// Opens the existing file at `path` and keeps it open; with its length.
    pub fn open(cache: &Arc<FileCache>, path: &Path) -> Result<(Self, u64)> {
        let f = cache
            .open(path, false)
            .with_context(|| format!("failed to open segment `{}`", path.display()))?;
        let len = f
            .metadata()
            .with_context(|| format!("failed to stat `{}`", path.display()))?
            .len();
        Ok((Self::adopt(cache, path, f)?, len))
    }

    fn adopt(cache: &Arc<FileCache>, path: &Path, f: File) -> Result<Self> {
        let m = f
            .metadata()
            .with_context(|| format!("failed to stat `{}`", path.display()))?;
        let (id, _) = cache.insert(f, path);
        Ok(SegmentFile {
            cache: cache.clone(),
            path: path.to_path_buf(),
            id: Some(id),
            identity: FileId::of(&m),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor, reopened if the cache closed it (or [`Self::close`] did); `len` is
    /// what the segment says the file holds, and a reopened file must hold exactly that.
    /// Hold the returned `Arc` only for the call at hand: while it is held, the descriptor
    /// stays open.
    pub fn get(&mut self, len: u64) -> Result<Arc<File>> {
        self.get_inner(len, false)
    }

    /// [`Self::get`] for a write: the file counts as written until a flush that began after
    /// this call reports [`Self::synced`].
    pub fn get_for_write(&mut self, len: u64) -> Result<Arc<File>> {
        self.get_inner(len, true)
    }

    fn get_inner(&mut self, len: u64, write: bool) -> Result<Arc<File>> {
        if let Some(id) = self.id
            && let Some(f) = self.cache.hand_out(id, write)
        {
            return Ok(f);
        }
        self.id = None;
        let f = self
            .cache
            .open(&self.path, false)
            .with_context(|| format!("failed to reopen segment `{}`", self.path.display()))?;
        let m = f
            .metadata()
            .with_context(|| format!("failed to stat `{}`", self.path.display()))?;
        if FileId::of(&m) != self.identity {
            bail!(
                "segment `{}` was removed or replaced under the daemon",
                self.path.display()
            );
        }
        if m.len() != len {
            bail!(
                "segment `{}` holds {} bytes on reopening, not the {len} it was left with",
                self.path.display(),
                m.len()
            );
        }
        let (id, f) = self.cache.insert(f, &self.path);
        self.id = Some(id);
        if write {
            self.cache.hand_out(id, true);
        }
        Ok(f)
    }

    /// The descriptor if the cache holds it now (not reopened, not marked used): for
    /// readers, which may as well open the path themselves.
    pub fn peek(&self) -> Option<Arc<File>> {
        let id = self.id?;
        let lru = self.cache.lock();
        lru.slots.get(&id).map(|s| s.file.clone())
    }

    /// Whether the file at the path is still the one this segment writes.
    pub fn is_current(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|m| FileId::of(&m) == self.identity)
    }

    /// Which file this is.
    pub fn identity(&self) -> FileId {
        self.identity
    }

    /// Call just before an fsync of this file begins (on any descriptor of it).
    pub fn begin_sync(&self) -> SyncMark {
        SyncMark(self.cache.lock().tick())
    }

    /// An fsync that began at `mark` has succeeded: writes before it are durable.
    pub fn synced(&self, mark: SyncMark) {
        if let Some(id) = self.id {
            let mut lru = self.cache.lock();
            if let Some(slot) = lru.slots.get_mut(&id) {
                slot.synced = slot.synced.max(mark.0);
            }
        }
    }

    /// Closes the descriptor now (a segment that stops being active), fsyncing it first if
    /// it was written since its last fsync. The next [`Self::get`] reopens it.
    pub fn close(&mut self) {
        if let Some(id) = self.id.take()
            && let Some(slot) = self.cache.forget(id)
        {
            self.cache.close_slot(slot);
        }
    }

    /// Whether the cache holds this file's descriptor now.
    pub fn is_open(&self) -> bool {
        self.peek().is_some()
    }
}

impl Drop for SegmentFile {
    /// The descriptor leaves the cache unsynced, as any dropped `File` does: a segment is
    /// dropped when it is deleted, or with its log once the log was flushed (or by an error
    /// path whose recovery point never covered the bytes).
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.cache.forget(id);
        }
    }
}

/// Whether `e` is EMFILE or ENFILE: the descriptor limit ([`super::descriptors`]).
pub fn is_exhausted_io(e: &std::io::Error) -> bool {
    e.raw_os_error()
        .is_some_and(|code| code == 24 || code == 23)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn files(cache: &Arc<FileCache>, dir: &Path, n: usize) -> Vec<SegmentFile> {
        (0..n)
            .map(|i| SegmentFile::create(cache, &dir.join(format!("{i}.log"))).unwrap())
            .collect()
    }

    #[test]
    fn the_least_recently_used_file_is_closed_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(FileCache::new(3));
        let mut f = files(&cache, dir.path(), 3);
        assert_eq!(cache.open_count(), 3);
        // 0 is used again, so 1 is now the least recent.
        f[0].get(0).unwrap();
        let _four = SegmentFile::create(&cache, &dir.path().join("3.log")).unwrap();
        assert_eq!(cache.open_count(), 3);
        assert!(f[0].is_open() && !f[1].is_open() && f[2].is_open());
        assert_eq!(cache.evictions(), 1);
        // Reopened on demand, closing the next least recent (2).
        f[1].get(0).unwrap();
        assert!(f[1].is_open() && !f[2].is_open());
    }

    #[test]
    fn a_file_in_use_is_never_closed_under_its_user() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(FileCache::new(2));
        let mut f = files(&cache, dir.path(), 2);
        let held0 = f[0].get(0).unwrap();
        let held1 = f[1].get(0).unwrap();
        // Both pinned: a third file goes over the budget rather than close either.
        let mut third = SegmentFile::create(&cache, &dir.path().join("x.log")).unwrap();
        assert_eq!(cache.open_count(), 3);
        assert!(f[0].is_open() && f[1].is_open());
        held0.write_all_at(b"still mine", 0).unwrap();
        drop((held0, held1));
        // Unpinned, the oldest goes at the next open.
        third.get(0).unwrap();
        let _fourth = SegmentFile::create(&cache, &dir.path().join("y.log")).unwrap();
        assert!(cache.open_count() <= 2, "{}", cache.open_count());
        assert!(!f[0].is_open());
    }

    #[test]
    fn a_reopened_file_must_be_the_same_inode_and_length() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(FileCache::new(1));
        let p = dir.path().join("a.log");
        let mut a = SegmentFile::create(&cache, &p).unwrap();
        a.get_for_write(0)
            .unwrap()
            .write_all_at(b"0123456789", 0)
            .unwrap();
        a.close();
        assert!(a.get(10).is_ok(), "same file, same length");
        a.close();
        let e = a.get(7).unwrap_err();
        assert!(
            format!("{e:#}").contains("holds 10 bytes on reopening"),
            "{e:#}"
        );
        // Replaced by a file of the same length (made before the old one goes, so not
        // sharing its inode number).
        let tmp = dir.path().join("a.tmp");
        std::fs::write(&tmp, b"0123456789").unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        let e = a.get(10).unwrap_err();
        assert!(format!("{e:#}").contains("removed or replaced"), "{e:#}");
        assert!(!a.is_current());
    }

    #[test]
    fn a_written_file_is_fsynced_before_it_is_closed_and_a_synced_one_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(FileCache::new(2));
        let mut f = files(&cache, dir.path(), 2);
        // 0 is older but written since its fsync; 1 was synced after its write.
        f[0].get_for_write(0).unwrap();
        f[1].get_for_write(0).unwrap();
        let mark = f[1].begin_sync();
        f[1].get(0).unwrap().sync_data().unwrap();
        f[1].synced(mark);
        {
            let lru = cache.lock();
            let s0 = &lru.slots[&f[0].id.unwrap()];
            let s1 = &lru.slots[&f[1].id.unwrap()];
            assert!(s0.written > s0.synced && s1.written <= s1.synced);
        }
        let mut x = SegmentFile::create(&cache, &dir.path().join("x.log")).unwrap();
        assert!(f[0].is_open() && !f[1].is_open(), "the clean one went");
        assert_eq!(cache.synced_on_close(), 0, "no fsync for a synced file");
        // With no clean one left to close, the oldest written one is fsynced, then closed.
        x.get_for_write(0).unwrap();
        let _y = SegmentFile::create(&cache, &dir.path().join("y.log")).unwrap();
        assert!(!f[0].is_open());
        assert_eq!(cache.synced_on_close(), 1);
        f[0].get(0).unwrap();
        // A write after a sync began is not covered by it.
        let mark = f[0].begin_sync();
        f[0].get_for_write(0).unwrap();
        f[0].synced(mark);
        let lru = cache.lock();
        let s0 = &lru.slots[&f[0].id.unwrap()];
        assert!(s0.written > s0.synced);
    }

    #[test]
    fn the_default_budget_leaves_a_margin_and_has_a_floor() {
        assert_eq!(default_budget(Some(256)), 128);
        assert_eq!(default_budget(Some(1024)), 768);
        assert_eq!(default_budget(Some(65536)), 49152);
        assert_eq!(default_budget(Some(100)), MIN_BUDGET);
        assert_eq!(default_budget(None), usize::MAX);
    }
}
