//! Time index (`.timeindex`): maps timestamps to offsets.
//!
//! ```text
//! entry (12 bytes): 0: timestamp INT64 | 8: relative offset UINT32
//! ```
//! An entry is added only when the timestamp exceeds the last entry's: it records the largest
//! timestamp seen so far in the segment and the last offset of the batch that carried it.
//!
//! Crash policy and ownership: as for the offset index — no checksum, written and fsynced with
//! its segment, rebuilt from the log by recovery or when [`TimeIndex::load`] finds it insane.

use super::index_file::IndexFile;
use anyhow::{Result, bail};
use std::path::Path;

pub const ENTRY_SIZE: usize = 12;

#[derive(Debug)]
pub struct TimeIndex {
    file: IndexFile,
    base_offset: i64,
    /// (timestamp, relative offset). Invariant: timestamps strictly increase, offsets never
    /// decrease. Empty while the index is evicted.
    entries: Vec<(i64, u32)>,
    /// Whether `entries` holds the index (see `OffsetIndex`); when evicted only `last` is kept.
    resident: bool,
    last: Option<(i64, u32)>,
}

fn entry(c: &[u8]) -> (i64, u32) {
    let mut a = [0u8; 12];
    a.copy_from_slice(c.get(..12).unwrap_or(&[0; 12]));
    let [t0, t1, t2, t3, t4, t5, t6, t7, r0, r1, r2, r3] = a;
    (
        i64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
        u32::from_be_bytes([r0, r1, r2, r3]),
    )
}

impl TimeIndex {
    pub fn create(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(TimeIndex {
            file: IndexFile::create(path, "time index", ENTRY_SIZE)?,
            base_offset,
            entries: Vec::new(),
            resident: true,
            last: None,
        })
    }

    /// Opens and checks an existing time index; an error means: rebuild it.
    pub fn load(path: &Path, base_offset: i64) -> Result<Self> {
        let (file, bytes) = IndexFile::load(path, "time index", ENTRY_SIZE)?;
        let mut entries: Vec<(i64, u32)> = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
        for c in bytes.chunks_exact(ENTRY_SIZE) {
            let (ts, rel) = entry(c);
            if let Some(&(pt, pr)) = entries.last()
                && (ts <= pt || rel < pr)
            {
                bail!(
                    "time index `{}`: entry ({ts}, {rel}) does not follow ({pt}, {pr})",
                    path.display()
                );
            }
            entries.push((ts, rel));
        }
        Ok(TimeIndex {
            file,
            base_offset,
            entries,
            resident: true,
            last: None,
        })
    }

    /// Opens an existing time index evicted: only its last entry is read.
    pub fn open_evicted(path: &Path, base_offset: i64) -> Result<Self> {
        let (file, last) = IndexFile::load_last(path, "time index", ENTRY_SIZE)?;
        Ok(TimeIndex {
            file,
            base_offset,
            entries: Vec::new(),
            resident: false,
            last: last.map(|b| entry(&b)),
        })
    }

    /// Reads the whole index back (checking it) if it was evicted.
    pub fn make_resident(&mut self) -> Result<()> {
        if !self.resident {
            *self = Self::load(self.file.path(), self.base_offset)?;
        }
        Ok(())
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

    pub fn last_entry(&self) -> Option<(i64, i64)> {
        let last = if self.resident {
            self.entries.last()
        } else {
            self.last.as_ref()
        };
        last.map(|&(t, r)| (t, self.base_offset + i64::from(r)))
    }

    pub fn all_entries(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.entries
            .iter()
            .map(|&(t, r)| (t, self.base_offset + i64::from(r)))
    }

    /// Adds (timestamp, offset) if the timestamp is above the last entry's.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> Result<()> {
        if timestamp < 0 || self.entries.last().is_some_and(|&(t, _)| timestamp <= t) {
            return Ok(());
        }
        let Ok(rel) = u32::try_from(offset - self.base_offset) else {
            bail!(
                "time index `{}`: offset {offset} does not fit relative to base {}",
                self.file.path().display(),
                self.base_offset
            );
        };
        if self.entries.last().is_some_and(|&(_, r)| rel < r) {
            bail!(
                "time index `{}`: offset {offset} goes backwards",
                self.file.path().display()
            );
        }
        self.entries.push((timestamp, rel));
        Ok(())
    }

    /// Drops entries for offsets ≥ `offset` (all of them for `i64::MIN`, without reading an
    /// evicted index back).
    pub fn truncate(&mut self, offset: i64) -> Result<()> {
        if offset == i64::MIN {
            self.resident = true;
            self.last = None;
            self.entries.clear();
        }
        let keep = self
            .entries
            .iter()
            .take_while(|&&(_, r)| self.base_offset + i64::from(r) < offset)
            .count();
        self.entries.truncate(keep);
        self.file.truncate(keep)?;
        Ok(())
    }

    /// Writes the entries not yet in the file; `sync` fsyncs it as well.
    pub fn flush(&mut self, sync: bool) -> Result<()> {
        let mut buf =
            Vec::with_capacity(self.entries.len().saturating_sub(self.file.written()) * ENTRY_SIZE);
        for &(t, r) in self.entries.iter().skip(self.file.written()) {
            buf.extend_from_slice(&t.to_be_bytes());
            buf.extend_from_slice(&r.to_be_bytes());
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
        let p = dir.path().join("t");
        let mut idx = TimeIndex::create(&p, 100).unwrap();
        idx.maybe_append(1_700_000_000_000, 105).unwrap();
        idx.flush(true).unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            [0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, 0, 0, 0, 5]
        );
    }

    #[test]
    fn only_growing_timestamps_are_kept_and_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        let mut idx = TimeIndex::create(&p, 0).unwrap();
        idx.maybe_append(10, 1).unwrap();
        idx.maybe_append(10, 2).unwrap();
        idx.maybe_append(5, 3).unwrap();
        idx.maybe_append(20, 4).unwrap();
        idx.flush(false).unwrap();
        let idx = TimeIndex::load(&p, 0).unwrap();
        assert_eq!(
            idx.all_entries().collect::<Vec<_>>(),
            vec![(10, 1), (20, 4)]
        );
    }

    #[test]
    fn load_detects_corruption_and_truncate_cuts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, [0u8; 13]).unwrap();
        assert!(TimeIndex::load(&p, 0).is_err());
        let mut idx = TimeIndex::create(&p, 0).unwrap();
        idx.maybe_append(20, 4).unwrap();
        idx.maybe_append(30, 8).unwrap();
        idx.flush(false).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[7] = 40; // first timestamp now 40 > second
        std::fs::write(&p, &bytes).unwrap();
        assert!(TimeIndex::load(&p, 0).is_err());
        idx.truncate(8).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 12);
    }
}
