//! The local side of an upload round: a partition's log (or archived history) as the round
//! sees it, and reading its segment files a window at a time, every batch's CRC checked.

use super::manifest::{Manifest, PartitionKey};
use crate::checkpoint::TopicPartition;
use crate::log::data_dir::DataDir;
use crate::log::manager::lock_log;
use crate::record::BatchHeader;
use anyhow::{Context, Result};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One segment of a local log, as a round found it.
#[derive(Debug, Clone)]
pub(super) struct LocalSegment {
    pub(super) base: i64,
    pub(super) size: u64,
    pub(super) next_offset: i64,
    /// Rolled (or archived): its bytes and indexes are final.
    pub(super) closed: bool,
}

/// A local log (or archived history) as one round sees it.
#[derive(Debug, Clone)]
pub(super) struct LocalView {
    pub(super) key: PartitionKey,
    pub(super) tp: Option<TopicPartition>,
    pub(super) dir: PathBuf,
    pub(super) archived: bool,
    pub(super) log_start: i64,
    /// Offsets below this are fsynced: only they go up.
    pub(super) durable: i64,
    /// Moves on every truncation of the log.
    pub(super) generation: u64,
    pub(super) segments: Vec<LocalSegment>,
    pub(super) epochs: Vec<(i32, i64)>,
    pub(super) lost: Vec<(i64, i64)>,
}

pub(super) fn live_view(
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
/// `previous`, the view of the same directory a round before, spares reading its last
/// segment again when that is unchanged.
pub(super) fn archived_view(
    key: PartitionKey,
    dir: &Path,
    previous: Option<&LocalView>,
) -> Result<LocalView> {
    let bases = crate::log::partition::list_segment_bases(dir)?;
    let mut segments = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        let path = dir.join(crate::log::format::segment::file_name(*base, "log"));
        let size = fs::metadata(&path)
            .with_context(|| format!("cannot read `{}`", path.display()))?
            .len();
        let next_offset = match bases.get(i + 1) {
            Some(n) => *n,
            None => match previous
                .and_then(|p| p.segments.last())
                .filter(|l| l.base == *base && l.size == size)
            {
                Some(l) => l.next_offset,
                None => last_offset_in(&path, 0, size)?.map_or(*base, |l| l + 1),
            },
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

/// The last offset of the batches in bytes [from, to) of a segment file.
pub(super) fn last_offset_in(path: &Path, from: u64, to: u64) -> Result<Option<i64>> {
    let bytes = read_range(path, from, to)?;
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
pub(super) fn walk_window(
    bytes: &[u8],
    f: impl FnMut(&BatchHeader, usize) -> bool,
) -> Result<usize> {
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

/// The offset below which the view's bytes are durable (fsynced).
pub(super) fn durable_offset(view: &LocalView) -> i64 {
    let end = view
        .segments
        .last()
        .map_or(view.log_start, |s| s.next_offset);
    end.min(view.durable)
}

/// The offset up to which the copy holds the local log without a gap: past the first local
/// segment it does not hold whole, only what it holds of that one.
pub(super) fn offsite_offset(m: &Manifest, view: &LocalView) -> i64 {
    let mut at = view.log_start;
    for s in &view.segments {
        match m.segments.get(&s.base) {
            Some(e) if e.size >= s.size => at = s.next_offset,
            Some(e) => return e.next_offset.max(at),
            None => return at.max(s.base),
        }
    }
    at
}
