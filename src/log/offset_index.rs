//! Offset index (`.index`): maps offsets to byte positions in the segment's `.log`.
//!
//! ```text
//! entry (8 bytes): 0: relative offset UINT32 (offset − segment base) | 4: position UINT32
//! ```
//! Entries are appended in offset order; the entry for a batch holds the batch's *last* offset
//! and the position where the batch starts (Kafka's follower convention). Lookup: the largest
//! entry ≤ target, else (base, 0); scan the log forward from there.
//!
//! Crash policy: no checksum. Entries are written to the file when the segment is flushed and
//! fsynced with it; after a crash, indexes of segments past the recovery point are rebuilt from
//! the log, and any index that fails [`OffsetIndex::load`]'s sanity check is rebuilt too.
//! Who touches it: only its [`super::segment::Segment`], under the partition log's lock.

use super::index_file::IndexFile;
use anyhow::{Result, bail};
use std::path::Path;

pub const ENTRY_SIZE: usize = 8;

#[derive(Debug)]
pub struct OffsetIndex {
    file: IndexFile,
    base_offset: i64,
    /// (relative offset, position). Invariant: both strictly increasing; the file holds a
    /// prefix of them. Empty while the index is evicted.
    entries: Vec<(u32, u32)>,
    /// Whether `entries` holds the index. An inactive segment's index is evicted (its entries
    /// are all on disk) so memory does not grow with the log; only `last` is kept.
    resident: bool,
    last: Option<(u32, u32)>,
}

fn entry(chunk: &[u8]) -> (u32, u32) {
    let mut a = [0u8; 8];
    a.copy_from_slice(chunk.get(..8).unwrap_or(&[0; 8]));
    let [r0, r1, r2, r3, p0, p1, p2, p3] = a;
    (
        u32::from_be_bytes([r0, r1, r2, r3]),
        u32::from_be_bytes([p0, p1, p2, p3]),
    )
}

impl OffsetIndex {
    /// Creates an empty index file (truncating any existing one).
    pub fn create(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(OffsetIndex {
            file: IndexFile::create(path, "index", ENTRY_SIZE)?,
            base_offset,
            entries: Vec::new(),
            resident: true,
            last: None,
        })
    }

    /// Opens an existing index and checks it: whole entries, strictly increasing offsets and
    /// positions, every position below `log_size`. An error means: rebuild it.
    pub fn load(path: &Path, base_offset: i64, log_size: u64) -> Result<Self> {
        let (file, bytes) = IndexFile::load(path, "index", ENTRY_SIZE)?;
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
        for chunk in bytes.chunks_exact(ENTRY_SIZE) {
            let (rel, pos) = entry(chunk);
            if let Some(&(pr, pp)) = entries.last()
                && (rel <= pr || pos <= pp)
            {
                bail!(
                    "index `{}`: entry ({rel}, {pos}) does not follow ({pr}, {pp})",
                    path.display()
                );
            }
            if u64::from(pos) >= log_size {
                bail!(
                    "index `{}`: position {pos} is past the log end {log_size}",
                    path.display()
                );
            }
            entries.push((rel, pos));
        }
        Ok(OffsetIndex {
            file,
            base_offset,
            entries,
            resident: true,
            last: None,
        })
    }

    /// Opens an existing index evicted: only its last entry is read and checked (position
    /// below `log_size`). The rest is read by [`Self::make_resident`] if ever needed.
    pub fn open_evicted(path: &Path, base_offset: i64, log_size: u64) -> Result<Self> {
        let (file, last) = IndexFile::load_last(path, "index", ENTRY_SIZE)?;
        let last = last.map(|b| entry(&b));
        if let Some((_, pos)) = last
            && u64::from(pos) >= log_size
        {
            bail!(
                "index `{}`: position {pos} is past the log end {log_size}",
                path.display()
            );
        }
        Ok(OffsetIndex {
            file,
            base_offset,
            entries: Vec::new(),
            resident: false,
            last,
        })
    }

    /// Reads the whole index back (checking it) if it was evicted.
    pub fn make_resident(&mut self, log_size: u64) -> Result<()> {
        if !self.resident {
            *self = Self::load(self.file.path(), self.base_offset, log_size)?;
        }
        Ok(())
    }

    /// Whether the entries are in memory (see `resident`).
    pub fn is_resident(&self) -> bool {
        self.resident
    }

    /// Drops the entries from memory; they must all be in the file (flush first).
    pub fn evict(&mut self) {
        if self.resident && self.file.written() == self.entries.len() {
            self.last = self.entries.last().copied();
            self.entries = Vec::new();
            self.resident = false;
        }
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn entries(&self) -> usize {
        if self.resident {
            self.entries.len()
        } else {
            self.file.written()
        }
    }

    /// The entry for `offset` (absolute) at `position`. Callers add entries in order.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        let rel = offset - self.base_offset;
        let Ok(rel) = u32::try_from(rel) else {
            bail!(
                "index `{}`: offset {offset} does not fit relative to base {}",
                self.file.path().display(),
                self.base_offset
            );
        };
        if let Some(&(pr, pp)) = self.entries.last()
            && (rel <= pr || position <= pp)
        {
            bail!(
                "index `{}`: entry for offset {offset} at {position} is out of order",
                self.file.path().display()
            );
        }
        self.entries.push((rel, position));
        Ok(())
    }

    /// The (offset, position) to start scanning from for `target`.
    pub fn lookup(&self, target: i64) -> (i64, u32) {
        let rel = target - self.base_offset;
        let idx = self.entries.partition_point(|&(r, _)| i64::from(r) <= rel);
        match idx.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(&(r, p)) => (self.base_offset + i64::from(r), p),
            None => (self.base_offset, 0),
        }
    }

    /// The last entry, absolute.
    pub fn last_entry(&self) -> Option<(i64, u32)> {
        let last = if self.resident {
            self.entries.last()
        } else {
            self.last.as_ref()
        };
        last.map(|&(r, p)| (self.base_offset + i64::from(r), p))
    }

    /// All entries, absolute (verify and tests use them).
    pub fn all_entries(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.entries
            .iter()
            .map(|&(r, p)| (self.base_offset + i64::from(r), p))
    }

    /// Drops entries for offsets ≥ `offset` or positions ≥ `max_position`.
    pub fn truncate(&mut self, offset: i64, max_position: u64) -> Result<()> {
        let keep = self
            .entries
            .iter()
            .take_while(|&&(r, p)| {
                self.base_offset + i64::from(r) < offset && u64::from(p) < max_position
            })
            .count();
        self.entries.truncate(keep);
        self.file.truncate(keep)?;
        Ok(())
    }

    pub fn clear(&mut self) -> Result<()> {
        // Everything goes: no need to read an evicted index back first.
        self.resident = true;
        self.last = None;
        self.truncate(i64::MIN, 0)
    }

    /// Writes the entries not yet in the file; `sync` fsyncs it as well.
    pub fn flush(&mut self, sync: bool) -> Result<()> {
        let mut buf =
            Vec::with_capacity(self.entries.len().saturating_sub(self.file.written()) * ENTRY_SIZE);
        for &(r, p) in self.entries.iter().skip(self.file.written()) {
            buf.extend_from_slice(&r.to_be_bytes());
            buf.extend_from_slice(&p.to_be_bytes());
        }
        self.file.flush(&buf, sync)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_entry_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::create(&p, 100).unwrap();
        idx.append(105, 4096).unwrap();
        idx.flush(true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), [0, 0, 0, 5, 0, 0, 0x10, 0]);
    }

    #[test]
    fn roundtrip_and_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("i.index");
        let mut idx = OffsetIndex::create(&p, 100).unwrap();
        idx.append(110, 100).unwrap();
        idx.append(120, 200).unwrap();
        idx.flush(true).unwrap();
        let idx = OffsetIndex::load(&p, 100, 1000).unwrap();
        assert_eq!(idx.lookup(99), (100, 0));
        assert_eq!(idx.lookup(109), (100, 0));
        assert_eq!(idx.lookup(110), (110, 100));
        assert_eq!(idx.lookup(500), (120, 200));
    }

    #[test]
    fn out_of_order_append_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::create(&dir.path().join("i"), 0).unwrap();
        idx.append(10, 100).unwrap();
        assert!(idx.append(10, 200).is_err());
        assert!(idx.append(11, 100).is_err());
        assert!(idx.append(-1, 300).is_err());
    }

    #[test]
    fn load_detects_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("i");
        std::fs::write(&p, [0u8; 7]).unwrap();
        assert!(OffsetIndex::load(&p, 0, 100).is_err());
        // decreasing offsets
        std::fs::write(&p, [0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 2]).unwrap();
        assert!(OffsetIndex::load(&p, 0, 100).is_err());
        // position past the log
        std::fs::write(&p, [0, 0, 0, 5, 0, 0, 1, 0]).unwrap();
        assert!(OffsetIndex::load(&p, 0, 100).is_err());
        assert!(OffsetIndex::load(&p, 0, 1000).is_ok());
    }

    #[test]
    fn truncate_cuts_file_and_memory() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("i");
        let mut idx = OffsetIndex::create(&p, 0).unwrap();
        for i in 1..=5 {
            idx.append(i * 10, (i * 100) as u32).unwrap();
        }
        idx.flush(false).unwrap();
        idx.truncate(30, u64::MAX).unwrap();
        assert_eq!(idx.entries(), 2);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 16);
        idx.append(30, 300).unwrap();
        idx.flush(false).unwrap();
        assert_eq!(OffsetIndex::load(&p, 0, 1000).unwrap().entries(), 3);
    }
}
