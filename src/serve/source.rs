//! Where the served partitions come from: the running daemon's logs (each snapshot taken
//! under the partition lock, which is then released before any file or socket I/O) or a
//! stopped data dir read once at start; in both, the archived histories of re-created topics
//! under their read names, read-only. And the walk that turns a snapshot into the byte
//! ranges of whole batches a Fetch returns.

use super::limits::Descriptors;
use super::response::FileRange;
use crate::checkpoint::TopicPartition;
use crate::log::data_dir::DataDir;
use crate::log::identity::{self, Archived};
use crate::log::manager::{AppendSignal, LogManager, lock_log};
use crate::log::max_timestamp::MaxTimestamps;
use crate::log::read_view::{LogView, UnflushedTail};
use crate::log::reader;
pub use crate::log::reader::aborted_transactions;
use crate::protocol::uuid::Uuid;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub enum Source {
    /// The running daemon's logs, and the archived histories beside them (looked for again
    /// whenever the set of logs changed, as an archive is made then).
    Live {
        logs: Arc<LogManager>,
        archived: Mutex<(Option<u64>, ArchivedViews)>,
        maxima: MaxTimestamps,
    },
    /// A stopped replica: nothing changes while it is served.
    Stopped {
        data_dir: PathBuf,
        views: BTreeMap<TopicPartition, LogView>,
        archived: ArchivedViews,
        appended: Arc<AppendSignal>,
        maxima: MaxTimestamps,
    },
}

/// The archived histories of a data dir, served read-only under their read names
/// (`<topic>.<old id>.archived`, [`Archived::name`]), each whole: from its first segment to
/// its last batch. They never change once made.
#[derive(Debug, Default)]
pub struct ArchivedViews {
    views: BTreeMap<TopicPartition, (Archived, LogView)>,
}

impl ArchivedViews {
    /// Reads the archived histories of `data_dir`, reusing the views of `known` for the
    /// directories it already read. One that cannot be read is said and left out.
    fn scan(data_dir: &Path, known: &ArchivedViews) -> ArchivedViews {
        let listed = identity::list_archived(data_dir).unwrap_or_else(|e| {
            crate::log_warn!("archived histories are not served: {e:#}");
            Vec::new()
        });
        let mut views = BTreeMap::new();
        for a in listed {
            let tp = a.tp();
            if let Some(v) = known.views.get(&tp).filter(|(k, _)| k.path == a.path) {
                views.insert(tp, v.clone());
                continue;
            }
            match LogView::open_stopped_dir(&a.path, None, None, None) {
                Ok(Some(mut view)) => {
                    // Only the first copy of an old id carries it: a topic id names one topic.
                    if !a.name.ends_with(DataDir::ARCHIVED_SUFFIX) {
                        view.topic_id = None;
                    }
                    views.insert(tp, (a, view));
                }
                Ok(None) => {}
                Err(e) => crate::log_warn!(
                    "archived history `{}` is not served: {e:#}",
                    a.path.display()
                ),
            }
        }
        ArchivedViews { views }
    }

    /// The view of `tp`, without its topic id when the live log of the topic it was the
    /// history of has that id again (a topic id names one topic).
    fn view(
        &self,
        tp: &TopicPartition,
        live_id: impl Fn(&TopicPartition) -> Option<Uuid>,
    ) -> Option<LogView> {
        let (a, view) = self.views.get(tp)?;
        let mut view = view.clone();
        if view.topic_id.is_some()
            && live_id(&TopicPartition::new(a.topic.clone(), a.partition)) == view.topic_id
        {
            view.topic_id = None;
        }
        Some(view)
    }
}

impl Source {
    pub fn live(logs: Arc<LogManager>) -> Source {
        Source::Live {
            logs,
            archived: Mutex::default(),
            maxima: MaxTimestamps::default(),
        }
    }

    /// Reads every partition and archived history of a stopped data dir, changing nothing.
    pub fn stopped(data_dir: &Path) -> Result<Source> {
        let mut views = BTreeMap::new();
        let checkpoints = crate::log::read_view::StoppedCheckpoints::read(data_dir);
        let mut unflushed = Vec::new();
        for tp in DataDir::partitions(data_dir)? {
            // One unreadable partition is not served; the others still are.
            match LogView::open_stopped_with(data_dir, &tp, &checkpoints) {
                Ok(Some((v, tail))) => {
                    if let Some(t) = tail {
                        unflushed.push((tp.clone(), t));
                    }
                    views.insert(tp, v);
                }
                Ok(None) => {}
                Err(e) => crate::log_error!("{tp}: cannot read its log, not served: {e:#}"),
            }
        }
        if !checkpoints.clean_shutdown {
            say_unflushed(data_dir, &unflushed);
        }
        Ok(Source::Stopped {
            data_dir: data_dir.to_path_buf(),
            views,
            archived: ArchivedViews::scan(data_dir, &ArchivedViews::default()),
            appended: Arc::default(),
            maxima: MaxTimestamps::default(),
        })
    }

    pub fn data_dir(&self) -> &Path {
        match self {
            Source::Live { logs, .. } => logs.data_dir(),
            Source::Stopped { data_dir, .. } => data_dir,
        }
    }

    pub fn appended(&self) -> &Arc<AppendSignal> {
        match self {
            Source::Live { logs, .. } => logs.appended(),
            Source::Stopped { appended, .. } => appended,
        }
    }

    /// The largest timestamp of each segment served, as far as readers have summarized it
    /// (timestamp look-ups go through it).
    pub fn max_timestamps(&self) -> &MaxTimestamps {
        match self {
            Source::Live { maxima, .. } | Source::Stopped { maxima, .. } => maxima,
        }
    }

    /// Calls `f` with the archived histories, looked for again when the daemon's set of
    /// logs changed since the last look.
    fn with_archived<T>(&self, f: impl FnOnce(&ArchivedViews) -> T) -> T {
        match self {
            Source::Stopped { archived, .. } => f(archived),
            Source::Live { logs, archived, .. } => {
                let mut cached = archived
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let now = logs.structure();
                if cached.0 != Some(now) {
                    let fresh = ArchivedViews::scan(logs.data_dir(), &cached.1);
                    *cached = (Some(now), fresh);
                }
                f(&cached.1)
            }
        }
    }

    /// Whether a live partition of `topic` is served: it hides an archived history read
    /// under the same name.
    fn holds_live_topic(&self, topic: &str) -> bool {
        match self {
            Source::Live { logs, .. } => logs.holds_topic(topic),
            Source::Stopped { views, .. } => views
                .range(TopicPartition::new(topic, i32::MIN)..)
                .next()
                .is_some_and(|(tp, _)| tp.topic == topic),
        }
    }

    /// The served partitions: the logs, then the archived histories under their read names.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        let mut out: Vec<TopicPartition> = match self {
            Source::Live { logs, .. } => logs.all().into_iter().map(|(tp, _)| tp).collect(),
            Source::Stopped { views, .. } => views.keys().cloned().collect(),
        };
        let archived: Vec<TopicPartition> =
            self.with_archived(|a| a.views.keys().cloned().collect());
        out.extend(
            archived
                .into_iter()
                .filter(|tp| !self.holds_live_topic(&tp.topic)),
        );
        out
    }

    /// The log view of `tp` when it is a log (not an archived history).
    fn log_view(&self, tp: &TopicPartition, from: i64) -> Option<LogView> {
        match self {
            Source::Live { logs, .. } => {
                let log = logs.get(tp)?;
                let log = lock_log(&log);
                Some(log.read_view(from))
            }
            Source::Stopped { views, .. } => views.get(tp).cloned(),
        }
    }

    /// A snapshot for reading from `from` (`i64::MIN`: every segment).
    pub fn view(&self, tp: &TopicPartition, from: i64) -> Option<LogView> {
        if let Some(v) = self.log_view(tp, from) {
            return Some(v);
        }
        if self.holds_live_topic(&tp.topic) {
            return None;
        }
        self.with_archived(|a| a.view(tp, |live| self.log_view(live, i64::MAX)?.topic_id))
    }
}

/// Says once what a data dir that was not stopped cleanly holds past its recovery points:
/// every whole, CRC-valid batch there is served (the next start keeps them too); a tail that
/// is not whole is named, a few partitions at most, and never served.
fn say_unflushed(data_dir: &Path, tails: &[(TopicPartition, UnflushedTail)]) {
    use crate::logging::count;
    const NAMED: usize = 5;
    let batches: usize = tails.iter().map(|(_, t)| t.valid_batches).sum();
    let bytes: u64 = tails.iter().map(|(_, t)| t.valid_bytes).sum();
    let holding = tails.iter().filter(|(_, t)| t.valid_batches > 0).count();
    if batches > 0 {
        crate::log_info!(
            "`{}` was not stopped cleanly: {} past the recovery points of {} ({bytes} bytes) are whole and CRC-valid and are served",
            data_dir.display(),
            count(batches, "batch", "batches"),
            count(holding, "partition", "partitions"),
        );
    }
    let damaged: Vec<_> = tails.iter().filter(|(_, t)| !t.damage.is_empty()).collect();
    for (tp, t) in damaged.iter().take(NAMED) {
        crate::log_warn!("{tp}: {}", t.describe());
    }
    if damaged.len() > NAMED {
        crate::log_warn!(
            "… and {} more with a tail that is not served (`status` names each)",
            count(damaged.len() - NAMED, "partition", "partitions")
        );
    }
}

/// The leader epoch this broker leads a partition at: the latest in its history (0 without).
pub fn leader_epoch(view: &LogView) -> i32 {
    view.latest_epoch().unwrap_or(0)
}

/// The epoch of the batch holding `offset`: the last one starting at or below it.
pub fn epoch_at(view: &LogView, offset: i64) -> i32 {
    view.epochs
        .iter()
        .rev()
        .find(|&&(_, start)| start <= offset)
        .map_or(-1, |&(e, _)| e)
}

/// Whole batches read from a snapshot.
#[derive(Debug, Default)]
pub struct Read {
    pub ranges: Vec<FileRange>,
    pub bytes: u64,
    /// The offset after the last batch read.
    pub end_offset: Option<i64>,
}

/// [`reader::read_batches`], each file sent from holding one of the listener's descriptors
/// (`fds`) until it is sent.
pub fn read_batches(
    view: &LogView,
    from: i64,
    below: i64,
    max_bytes: u64,
    min_one: bool,
    fds: Option<&Arc<Descriptors>>,
) -> Result<Read> {
    // The response's first file (`min_one`: nothing taken yet) may take the last free
    // descriptor; its others leave the reserve free for other responses' first files.
    let mut first = min_one;
    let read = reader::read_batches(view, from, below, max_bytes, min_one, || match fds {
        Some(f) => {
            let keep = if std::mem::replace(&mut first, false) {
                0
            } else {
                f.reserve()
            };
            f.take_leaving(1, keep).map(Some)
        }
        None => Some(None),
    })?;
    Ok(Read {
        ranges: read
            .ranges
            .into_iter()
            .map(|r| FileRange {
                file: r.file,
                path: r.path,
                pos: r.pos,
                len: r.len,
                _permit: r.permit,
            })
            .collect(),
        bytes: read.bytes,
        end_offset: read.end_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::fuzzing;
    use crate::serve::limits::Descriptors;

    /// Partition 0 of the fuzzer's data dir (several segments), stopped.
    fn fuzz_view() -> (tempfile::TempDir, LogView) {
        let dir = tempfile::tempdir().unwrap();
        fuzzing::build_data_dir(dir.path()).unwrap();
        let view = Source::stopped(dir.path())
            .unwrap()
            .view(&TopicPartition::new(fuzzing::TOPIC, 0), 0)
            .unwrap();
        (dir, view)
    }

    #[test]
    fn a_read_with_no_descriptor_left_serves_what_it_has_and_gives_them_back() {
        let (_dir, view) = fuzz_view();
        let hw = view.high_watermark;
        let all = read_batches(&view, 0, hw, u64::MAX, true, None).unwrap();
        assert!(all.ranges.len() > 2, "{} segments read", all.ranges.len());
        // Two descriptors left: the first two segments' batches, nothing past them.
        let fds = Descriptors::new(2);
        let some = read_batches(&view, 0, hw, u64::MAX, true, Some(&fds)).unwrap();
        assert_eq!(some.ranges.len(), 2);
        assert_eq!(fds.used(), 2, "each file sent from holds one");
        let prefix: u64 = all.ranges.iter().take(2).map(|r| r.len).sum();
        assert_eq!(some.bytes, prefix);
        assert!(some.end_offset < all.end_offset);
        drop(some);
        assert_eq!(fds.used(), 0, "given back with the response");
        // None left: nothing read, no error.
        let none = read_batches(&view, 0, hw, u64::MAX, true, Some(&Descriptors::new(0))).unwrap();
        assert_eq!((none.ranges.len(), none.bytes), (0, 0));
    }

    #[test]
    fn files_beyond_a_responses_first_leave_the_reserve_for_other_responses() {
        let (_dir, view) = fuzz_view();
        let hw = view.high_watermark;
        let segments = read_batches(&view, 0, hw, u64::MAX, true, None)
            .unwrap()
            .ranges
            .len();
        assert!(segments >= 3, "{segments} segments");
        // Capacity 8, reserve 2: a greedy response stops with 2 free...
        let fds = Descriptors::new(8);
        assert_eq!(fds.reserve(), 2);
        let mut held = Vec::new();
        while fds.used() + fds.reserve() < fds.capacity() {
            let before = fds.used();
            held.push(read_batches(&view, 0, hw, u64::MAX, true, Some(&fds)).unwrap());
            assert!(fds.used() > before);
        }
        assert_eq!(fds.used(), 6);
        // ... a part of a response past its first batch takes none of them...
        let later = read_batches(&view, 0, hw, u64::MAX, false, Some(&fds)).unwrap();
        assert_eq!((later.ranges.len(), fds.used()), (0, 6));
        // ... and each other response still gets its first file.
        for used in [7, 8] {
            let first = read_batches(&view, 0, hw, u64::MAX, true, Some(&fds)).unwrap();
            assert_eq!((first.ranges.len(), fds.used()), (1, used));
            assert!(first.bytes > 0);
            held.push(first);
        }
        let none = read_batches(&view, 0, hw, u64::MAX, true, Some(&fds)).unwrap();
        assert_eq!(none.ranges.len(), 0);
        drop(held);
        assert_eq!(fds.used(), 0);
    }
}
