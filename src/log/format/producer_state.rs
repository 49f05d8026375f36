//! Open transactions of one partition (the part of Kafka's `ProducerStateManager` a follower
//! needs), and its `<offset>.snapshot` files.
//!
//! For every producer with a transaction in progress the state holds the transaction's first
//! offset. Appending a batch updates it: a transactional data batch opens a transaction (if
//! none is open for its producer); a COMMIT or ABORT marker closes it, and an ABORT yields the
//! `.txnindex` entry (first offset, marker offset, last stable offset after it). The last
//! stable offset of the log is the first offset of the oldest open transaction, else the log
//! end.
//!
//! Snapshot file, Kafka's producer snapshot format, version 1:
//! ```text
//! 0: version INT16 = 1 | 2: crc UINT32 (CRC-32C of every byte after it)
//! 6: entries INT32 count, then per entry (46 bytes): producerId INT64, epoch INT16,
//!    lastSequence INT32, lastOffset INT64, offsetDelta INT32, timestamp INT64,
//!    coordinatorEpoch INT32, currentTxnFirstOffset INT64
//! ```
//! `<offset>.snapshot` (20 digits) holds the state after every batch below `offset`. Only
//! producers with an open transaction are written, so the files stay small. Crash policy:
//! written by rename, not fsynced (a lost or torn one fails its CRC and an older one, or a
//! walk from the log start, is used); a snapshot past the log end (a crash cut the log) is deleted at load,
//! and the state is rebuilt from the newest one below by scanning the batches after it.

use crate::protocol::codec::{DecodeError, Reader};
use crate::record::BatchHeader;
use crate::record::records::{ControlType, control_marker};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::segment_reader::SegmentReader;
use super::txn_index::AbortedTxn;

const VERSION: i16 = 1;
const ENTRY_SIZE: usize = 46;
/// Far more open transactions than any partition has; a larger file is not a snapshot.
const MAX_ENTRIES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTxn {
    pub first_offset: i64,
    pub producer_epoch: i16,
    /// Last offset, sequence and timestamp of the producer's latest batch (for the snapshot).
    pub last_offset: i64,
    pub last_sequence: i32,
    pub offset_delta: i32,
    pub timestamp: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerState {
    open: BTreeMap<i64, OpenTxn>,
    /// Changed since the last snapshot.
    pub dirty: bool,
}

impl ProducerState {
    /// Applies one appended batch; returns the `.txnindex` entry when it is an ABORT marker.
    /// `batch` is the whole batch (read only for control batches).
    pub fn update(&mut self, h: &BatchHeader, batch: &[u8]) -> Option<AbortedTxn> {
        if h.magic < 2 || h.producer_id < 0 {
            return None;
        }
        if h.is_control() {
            let kind = control_marker(h, batch).map(|(k, _)| k)?;
            if !matches!(kind, ControlType::Abort | ControlType::Commit) {
                return None;
            }
            // Kafka's rule for a marker without a known transaction: it starts at the marker.
            let first = self
                .open
                .remove(&h.producer_id)
                .map_or(h.base_offset, |t| t.first_offset);
            self.dirty = true;
            if kind != ControlType::Abort {
                return None;
            }
            let lso = self
                .open
                .values()
                .map(|t| t.first_offset)
                .min()
                .unwrap_or(h.last_offset + 1);
            return Some(AbortedTxn {
                producer_id: h.producer_id,
                first_offset: first,
                last_offset: h.base_offset,
                last_stable_offset: lso,
            });
        }
        if h.is_transactional() {
            let delta = i32::try_from(h.last_offset - h.base_offset).unwrap_or(i32::MAX);
            let t = self.open.entry(h.producer_id).or_insert(OpenTxn {
                first_offset: h.base_offset,
                producer_epoch: h.producer_epoch,
                last_offset: h.last_offset,
                last_sequence: -1,
                offset_delta: delta,
                timestamp: h.max_timestamp,
            });
            t.producer_epoch = h.producer_epoch;
            t.last_offset = h.last_offset;
            t.offset_delta = delta;
            t.timestamp = h.max_timestamp;
            t.last_sequence = if h.base_sequence >= 0 {
                h.base_sequence.wrapping_add(delta)
            } else {
                -1
            };
            self.dirty = true;
        }
        None
    }

    /// Applies the batches `reader` yields from the first whose last offset is at or above
    /// `from`, reading the bytes of control batches only; returns the `.txnindex` entries of
    /// the ABORT markers met.
    pub fn replay(&mut self, reader: &mut SegmentReader, from: i64) -> Result<Vec<AbortedTxn>> {
        self.replay_below(reader, from, i64::MAX)
    }

    /// [`Self::replay`], stopping at the first batch that starts at or above `below`.
    pub fn replay_below(
        &mut self,
        reader: &mut SegmentReader,
        from: i64,
        below: i64,
    ) -> Result<Vec<AbortedTxn>> {
        let mut aborted = Vec::new();
        while let Some((h, _)) = reader.next_batch()? {
            if h.base_offset >= below {
                break;
            }
            if h.last_offset < from || h.producer_id < 0 {
                continue;
            }
            let bytes: &[u8] = if h.is_control() {
                reader.batch_bytes()?
            } else {
                &[]
            };
            if let Some(a) = self.update(&h, bytes) {
                aborted.push(a);
            }
        }
        Ok(aborted)
    }

    /// The first offset of the oldest open transaction, else `log_end`.
    pub fn last_stable_offset(&self, log_end: i64) -> i64 {
        self.open
            .values()
            .map(|t| t.first_offset)
            .min()
            .map_or(log_end, |f| f.min(log_end))
    }

    pub fn open_transactions(&self) -> &BTreeMap<i64, OpenTxn> {
        &self.open
    }

    /// Forgets transactions whose outcome this log can no longer learn (their markers were
    /// lost upstream).
    pub fn clear(&mut self) {
        self.dirty |= !self.open.is_empty();
        self.open.clear();
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4 + self.open.len() * ENTRY_SIZE);
        body.extend_from_slice(&crate::protocol::codec::len_i32(self.open.len()).to_be_bytes());
        for (pid, t) in &self.open {
            body.extend_from_slice(&pid.to_be_bytes());
            body.extend_from_slice(&t.producer_epoch.to_be_bytes());
            body.extend_from_slice(&t.last_sequence.to_be_bytes());
            body.extend_from_slice(&t.last_offset.to_be_bytes());
            body.extend_from_slice(&t.offset_delta.to_be_bytes());
            body.extend_from_slice(&t.timestamp.to_be_bytes());
            body.extend_from_slice(&(-1i32).to_be_bytes());
            body.extend_from_slice(&t.first_offset.to_be_bytes());
        }
        let mut out = Vec::with_capacity(6 + body.len());
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    pub fn decode(path: &Path, bytes: &[u8]) -> Result<ProducerState> {
        let bad = |what: &str| anyhow::anyhow!("`{}`: {what}", path.display());
        let short = |_| bad("shorter than its header");
        let mut head = Reader::new(bytes);
        let version = head.i16("version").map_err(short)?;
        let crc = head.u32("crc").map_err(short)?;
        let body = head.rest();
        let count = head.i32("count").map_err(short)?;
        if version != VERSION {
            bail!(
                "`{}`: unsupported snapshot version {version}",
                path.display()
            );
        }
        if crc32c::crc32c(body) != crc {
            bail!("`{}`: CRC mismatch", path.display());
        }
        let count = usize::try_from(count).map_err(|_| bad("negative entry count"))?;
        if count > MAX_ENTRIES || head.remaining() != count * ENTRY_SIZE {
            return Err(bad("entry count does not match the file length"));
        }
        let mut open = BTreeMap::new();
        for _ in 0..count {
            let entry = |e: DecodeError| bad(&e.to_string());
            let producer_id = head.i64("producer id").map_err(entry)?;
            let t = OpenTxn {
                producer_epoch: head.i16("producer epoch").map_err(entry)?,
                last_sequence: head.i32("last sequence").map_err(entry)?,
                last_offset: head.i64("last offset").map_err(entry)?,
                offset_delta: head.i32("offset delta").map_err(entry)?,
                timestamp: head.i64("timestamp").map_err(entry)?,
                first_offset: {
                    head.i32("coordinator epoch").map_err(entry)?;
                    head.i64("first offset").map_err(entry)?
                },
            };
            // A producer without an open transaction has no first offset.
            if t.first_offset >= 0 {
                open.insert(producer_id, t);
            }
        }
        Ok(ProducerState { open, dirty: false })
    }
}

pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(super::segment::file_name(offset, "snapshot"))
}

/// Offsets of the snapshot files in `dir`, ascending.
pub fn list_snapshots(dir: &Path) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("failed to list `{}`", dir.display()))?
    {
        let entry = entry.with_context(|| format!("failed to list `{}`", dir.display()))?;
        if let Some(o) = entry
            .file_name()
            .to_str()
            .and_then(|n| super::segment::parse_base_offset(n, "snapshot"))
        {
            out.push(o);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Writes the state after every batch below `offset` and keeps only the two newest files.
/// Not fsynced: a snapshot only saves walking batches at the next start, and a torn or lost
/// one fails its CRC (or is missing) and an older one is used.
pub fn write_snapshot(dir: &Path, offset: i64, state: &ProducerState) -> Result<()> {
    let path = snapshot_path(dir, offset);
    let tmp = path.with_extension("snapshot.tmp");
    std::fs::write(&tmp, state.encode())
        .with_context(|| format!("failed to write `{}`", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| {
        format!(
            "failed to rename `{}` to `{}`",
            tmp.display(),
            path.display()
        )
    })?;
    let all = list_snapshots(dir)?;
    for old in all.iter().rev().skip(2) {
        delete_snapshot(dir, *old)?;
    }
    Ok(())
}

pub fn delete_snapshot(dir: &Path, offset: i64) -> Result<()> {
    let p = snapshot_path(dir, offset);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("failed to delete `{}`", p.display())),
    }
}

/// The newest readable snapshot at or below `limit`, deleting those above `above` (they
/// describe offsets the log no longer holds). Unreadable ones are skipped with a warning.
pub fn load_newest(dir: &Path, limit: i64, above: i64) -> Result<Option<(i64, ProducerState)>> {
    let all = list_snapshots(dir)?;
    let past_end: Vec<i64> = all.iter().copied().filter(|o| *o > above).collect();
    for o in &past_end {
        delete_snapshot(dir, *o)?;
    }
    if !past_end.is_empty() {
        // Durably gone: after a power loss, a snapshot of a history that was truncated away
        // must not come back and be taken for the current one.
        crate::checkpoint::fsync_dir(dir)?;
    }
    for o in all.iter().rev().filter(|o| **o <= limit && **o <= above) {
        let p = snapshot_path(dir, *o);
        let bytes =
            std::fs::read(&p).with_context(|| format!("failed to read `{}`", p.display()))?;
        match ProducerState::decode(&p, &bytes) {
            Ok(s) => return Ok(Some((*o, s))),
            Err(e) => crate::log_warn!("{e:#}; using an older snapshot"),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn_header(base: i64, last: i64, pid: i64, control: bool) -> BatchHeader {
        BatchHeader {
            magic: 2,
            base_offset: base,
            last_offset: last,
            size_in_bytes: 61,
            partition_leader_epoch: 0,
            max_timestamp: 5,
            attributes: if control { 0x30 } else { 0x10 },
            records_count: 1,
            crc: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
        }
    }

    #[test]
    fn open_transactions_set_the_last_stable_offset_and_snapshots_roundtrip() {
        let mut s = ProducerState::default();
        s.update(&txn_header(10, 14, 7, false), &[]);
        s.update(&txn_header(15, 16, 8, false), &[]);
        s.update(&txn_header(17, 18, 7, false), &[]);
        assert_eq!(s.last_stable_offset(30), 10);
        let d = tempfile::tempdir().unwrap();
        write_snapshot(d.path(), 19, &s).unwrap();
        let (o, back) = load_newest(d.path(), 100, 100).unwrap().unwrap();
        assert_eq!(o, 19);
        assert_eq!(back.open_transactions(), s.open_transactions());
        // A corrupt snapshot is skipped; one above the log end is deleted.
        write_snapshot(d.path(), 50, &s).unwrap();
        assert!(
            load_newest(d.path(), 100, 40)
                .unwrap()
                .is_some_and(|(o, _)| o == 19)
        );
        assert_eq!(list_snapshots(d.path()).unwrap(), vec![19]);
        let mut bytes = std::fs::read(snapshot_path(d.path(), 19)).unwrap();
        let n = bytes.len() - 1;
        bytes[n] ^= 1;
        assert!(ProducerState::decode(Path::new("x"), &bytes).is_err());
    }
}
