//! `.txnindex`: the aborted transactions of one segment (Kafka's `TransactionIndex`).
//!
//! ```text
//! entry (34 bytes):  0: version INT16 = 0 | 2: producerId INT64 | 10: firstOffset INT64
//!                   18: lastOffset INT64 (the ABORT marker's offset) | 26: lastStableOffset INT64
//! ```
//! One entry per ABORT marker, in the segment that holds the marker, in append order (so by
//! last offset). A read_committed reader uses it to skip the aborted records.
//! Crash policy: not checksummed; entries are written when the marker is appended and
//! fsynced with the segment. Recovery rebuilds the index of every segment it scans, so a
//! torn or missing entry past the recovery point is made again. Who touches it: its segment's
//! partition log, under the partition lock; inspection reads it.

use anyhow::{Context, Result, bail};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const ENTRY_SIZE: usize = 34;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    fn decode(b: &[u8; ENTRY_SIZE]) -> Option<AbortedTxn> {
        let mut r = crate::protocol::codec::Reader::new(b);
        if r.i16("version").ok()? != 0 {
            return None;
        }
        Some(AbortedTxn {
            producer_id: r.i64("producer id").ok()?,
            first_offset: r.i64("first offset").ok()?,
            last_offset: r.i64("last offset").ok()?,
            last_stable_offset: r.i64("last stable offset").ok()?,
        })
    }
}

/// A segment's `.txnindex`. The file exists only once the segment holds an ABORT marker.
#[derive(Debug)]
pub struct TxnIndex {
    path: PathBuf,
    /// Entries written since the last fsync.
    dirty: bool,
}

impl TxnIndex {
    pub fn new(path: PathBuf) -> Self {
        TxnIndex { path, dirty: false }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, e: &AbortedTxn) -> Result<()> {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("failed to open `{}`", self.path.display()))?;
        let bytes = e.encode();
        let written = match crate::fault::hit(crate::fault::Step::TxnIndex) {
            None => f.write_all(&bytes),
            Some(injected) => f
                .write_all(bytes.split_at(ENTRY_SIZE / 2).0)
                .and(Err(injected)),
        };
        written.with_context(|| format!("failed to append to `{}`", self.path.display()))?;
        self.dirty = true;
        Ok(())
    }

    /// The file's length now (0 when there is none), for [`Self::cut_back`].
    pub fn len_bytes(&self) -> Result<u64> {
        match fs::metadata(&self.path) {
            Ok(m) => Ok(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e).with_context(|| format!("failed to stat `{}`", self.path.display())),
        }
    }

    /// Cuts the file back to `len` bytes (what [`Self::len_bytes`] said before an append);
    /// to no file at all for 0, as a segment without aborted transactions has none.
    pub fn cut_back(&mut self, len: u64) -> Result<()> {
        if len == 0 {
            return self.rewrite(&[]);
        }
        match OpenOptions::new().write(true).open(&self.path) {
            Ok(f) => f
                .set_len(len)
                .with_context(|| format!("failed to cut `{}` back", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && len == 0 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("failed to open `{}`", self.path.display())),
        }
    }

    /// The file to fsync when entries were written since the last flush.
    pub fn take_dirty(&mut self) -> Result<Option<File>> {
        if !std::mem::take(&mut self.dirty) {
            return Ok(None);
        }
        File::open(&self.path)
            .map(Some)
            .with_context(|| format!("failed to open `{}`", self.path.display()))
    }

    pub fn flush(&mut self) -> Result<()> {
        if let Some(f) = self.take_dirty()?
            && let Err(e) = f.sync_data()
        {
            crate::log::halt_on_fsync_error(&self.path, &e);
        }
        Ok(())
    }

    /// Every entry; a file whose length is not a whole number of entries, or with an entry
    /// of another version, is an error naming it.
    pub fn read(&self) -> Result<Vec<AbortedTxn>> {
        read(&self.path)
    }

    /// Removes the entries whose marker is at or after `offset` (Kafka's `truncateTo`).
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        // A torn index keeps its whole leading entries.
        let mut entries = read_prefix(&self.path)?;
        let keep = entries
            .iter()
            .take_while(|e| e.last_offset < offset)
            .count();
        entries.truncate(keep);
        self.rewrite(&entries)
    }

    /// Replaces every entry (recovery rebuilds the index this way).
    pub fn rewrite(&mut self, entries: &[AbortedTxn]) -> Result<()> {
        if entries.is_empty() {
            match fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("failed to remove `{}`", self.path.display()));
                }
            }
            return Ok(());
        }
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        fs::write(&self.path, bytes)
            .with_context(|| format!("failed to write `{}`", self.path.display()))?;
        self.dirty = true;
        Ok(())
    }
}

/// The whole, well-formed entries at the start of a `.txnindex` file.
fn read_prefix(path: &Path) -> Result<Vec<AbortedTxn>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    Ok(bytes
        .chunks_exact(ENTRY_SIZE)
        .map_while(|c| {
            let mut a = [0u8; ENTRY_SIZE];
            a.copy_from_slice(c);
            AbortedTxn::decode(&a)
        })
        .collect())
}

/// Reads a `.txnindex` file; a missing file has no entries.
pub fn read(path: &Path) -> Result<Vec<AbortedTxn>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    if bytes.len() % ENTRY_SIZE != 0 {
        bail!(
            "`{}` is {} bytes, not a whole number of {ENTRY_SIZE}-byte entries",
            path.display(),
            bytes.len()
        );
    }
    let mut out = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
    for (i, chunk) in bytes.chunks_exact(ENTRY_SIZE).enumerate() {
        let mut a = [0u8; ENTRY_SIZE];
        a.copy_from_slice(chunk);
        let e = AbortedTxn::decode(&a)
            .with_context(|| format!("`{}` entry {i}: unknown version", path.display()))?;
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let b = e(0x0102, 5, 9).encode();
        assert_eq!(b.len(), 34);
        assert_eq!(&b[0..2], &[0, 0]);
        assert_eq!(&b[2..10], &0x0102i64.to_be_bytes());
        assert_eq!(&b[18..26], &9i64.to_be_bytes());
    }

    #[test]
    fn append_read_truncate_roundtrip() {
        let d = tempfile::tempdir().unwrap();
        let mut idx = TxnIndex::new(d.path().join("0.txnindex"));
        assert!(idx.read().unwrap().is_empty());
        idx.append(&e(1, 0, 4)).unwrap();
        idx.append(&e(2, 3, 10)).unwrap();
        idx.flush().unwrap();
        assert_eq!(idx.read().unwrap(), vec![e(1, 0, 4), e(2, 3, 10)]);
        idx.truncate_to(10).unwrap();
        assert_eq!(idx.read().unwrap(), vec![e(1, 0, 4)]);
        idx.truncate_to(0).unwrap();
        assert!(!idx.path().exists());
        std::fs::write(idx.path(), [0u8; 35]).unwrap();
        assert!(idx.read().unwrap_err().to_string().contains("0.txnindex"));
    }
}
