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

use anyhow::{Context, Result, bail};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const ENTRY_SIZE: usize = 12;

#[derive(Debug)]
pub struct TimeIndex {
    path: PathBuf,
    file: File,
    base_offset: i64,
    /// (timestamp, relative offset). Invariant: timestamps strictly increase, offsets never
    /// decrease.
    entries: Vec<(i64, u32)>,
    /// Invariant: <= entries.len().
    written: usize,
}

impl TimeIndex {
    pub fn create(path: &Path, base_offset: i64) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .with_context(|| format!("failed to create time index `{}`", path.display()))?;
        Ok(TimeIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries: Vec::new(),
            written: 0,
        })
    }

    /// Opens and checks an existing time index; an error means: rebuild it.
    pub fn load(path: &Path, base_offset: i64) -> Result<Self> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("failed to open time index `{}`", path.display()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("failed to read time index `{}`", path.display()))?;
        if bytes.len() % ENTRY_SIZE != 0 {
            bail!(
                "time index `{}`: size {} is not a multiple of {ENTRY_SIZE}",
                path.display(),
                bytes.len()
            );
        }
        let mut entries: Vec<(i64, u32)> = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
        for c in bytes.chunks_exact(ENTRY_SIZE) {
            let ts = i64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            let rel = u32::from_be_bytes([c[8], c[9], c[10], c[11]]);
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
        let written = entries.len();
        Ok(TimeIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            written,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    pub fn last_entry(&self) -> Option<(i64, i64)> {
        self.entries
            .last()
            .map(|&(t, r)| (t, self.base_offset + i64::from(r)))
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
                self.path.display(),
                self.base_offset
            );
        };
        if self.entries.last().is_some_and(|&(_, r)| rel < r) {
            bail!(
                "time index `{}`: offset {offset} goes backwards",
                self.path.display()
            );
        }
        self.entries.push((timestamp, rel));
        Ok(())
    }

    /// Drops entries for offsets ≥ `offset`.
    pub fn truncate(&mut self, offset: i64) -> Result<()> {
        let keep = self
            .entries
            .iter()
            .take_while(|&&(_, r)| self.base_offset + i64::from(r) < offset)
            .count();
        self.entries.truncate(keep);
        if self.written > keep {
            self.written = keep;
            self.file
                .set_len((keep * ENTRY_SIZE) as u64)
                .with_context(|| {
                    format!("failed to truncate time index `{}`", self.path.display())
                })?;
        }
        Ok(())
    }

    pub fn flush(&mut self, sync: bool) -> Result<()> {
        if self.written < self.entries.len() {
            let mut buf = Vec::with_capacity((self.entries.len() - self.written) * ENTRY_SIZE);
            for &(t, r) in self.entries.iter().skip(self.written) {
                buf.extend_from_slice(&t.to_be_bytes());
                buf.extend_from_slice(&r.to_be_bytes());
            }
            self.file
                .seek(SeekFrom::Start((self.written * ENTRY_SIZE) as u64))
                .and_then(|_| self.file.write_all(&buf))
                .with_context(|| format!("failed to write time index `{}`", self.path.display()))?;
            self.written = self.entries.len();
        }
        if sync {
            self.file
                .sync_data()
                .with_context(|| format!("failed to fsync time index `{}`", self.path.display()))?;
        }
        Ok(())
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
