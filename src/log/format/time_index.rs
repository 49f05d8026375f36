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

use super::index_file::{Entries, Entry};
use anyhow::{Result, bail};
use std::path::Path;

pub const ENTRY_SIZE: usize = 12;

/// (timestamp, relative offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimeEntry(i64, u32);

impl Entry for TimeEntry {
    const SIZE: usize = ENTRY_SIZE;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn decode(c: &[u8]) -> Self {
        let mut a = [0u8; 12];
        a.copy_from_slice(c.get(..12).unwrap_or(&[0; 12]));
        let [t0, t1, t2, t3, t4, t5, t6, t7, r0, r1, r2, r3] = a;
        TimeEntry(
            i64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            u32::from_be_bytes([r0, r1, r2, r3]),
        )
    }
}

/// The entries in the bytes of a time index file, absolute: (timestamp, offset), in file
/// order; bytes after the last whole entry are left out. For readers of the file that check
/// it rather than trust it (`verify`).
pub fn decode_entries(bytes: &[u8], base_offset: i64) -> impl Iterator<Item = (i64, i64)> + '_ {
    bytes.chunks_exact(ENTRY_SIZE).map(move |b| {
        let TimeEntry(ts, rel) = TimeEntry::decode(b);
        (ts, base_offset + i64::from(rel))
    })
}

/// Kafka's `TimeIndex.lookup` on the file at `path`, read as it streams: the last entry
/// (timestamp, offset) whose timestamp is ≤ `target`; `None` when there is none. Reading stops
/// at an entry that does not follow the one before it (a damaged index): the entries before
/// it still bound where the scan for `target` may start.
pub fn lookup_file(path: &Path, base_offset: i64, target: i64) -> Result<Option<(i64, i64)>> {
    let mut found: Option<TimeEntry> = None;
    super::index_file::scan_file(path, "time index", ENTRY_SIZE, |b| {
        let e = TimeEntry::decode(b);
        if e.0 > target || found.is_some_and(|p| e.0 <= p.0 || e.1 < p.1) {
            return false;
        }
        found = Some(e);
        true
    })?;
    Ok(found.map(|TimeEntry(t, r)| (t, base_offset + i64::from(r))))
}

/// The last (at most) two entries of the time index file at `path`, absolute, oldest first:
/// what a reader needs to know a segment's largest timestamp without reading the index
/// (every entry but a segment's final one marks an offset-index entry; see
/// [`crate::log::max_timestamp`]). Bytes after the last whole entry are left out.
pub fn last_two_file(path: &Path, base_offset: i64) -> Result<Vec<(i64, i64)>> {
    use anyhow::Context;
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)
        .with_context(|| format!("failed to open time index `{}`", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("failed to stat time index `{}`", path.display()))?
        .len();
    let whole = len - len % ENTRY_SIZE as u64;
    let from = whole.saturating_sub(2 * ENTRY_SIZE as u64);
    // At most two entries.
    let mut buf = vec![0u8; usize::try_from(whole - from).unwrap_or_default()];
    file.read_exact_at(&mut buf, from)
        .with_context(|| format!("failed to read time index `{}`", path.display()))?;
    Ok(decode_entries(&buf, base_offset).collect())
}

#[derive(Debug)]
pub struct TimeIndex {
    /// Invariant: timestamps strictly increase, offsets never decrease.
    entries: Entries<TimeEntry>,
    base_offset: i64,
}

impl TimeIndex {
    pub fn create(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(TimeIndex {
            entries: Entries::create(path, "time index")?,
            base_offset,
        })
    }

    /// Opens and checks an existing time index; an error means: rebuild it.
    pub fn load(path: &Path, base_offset: i64) -> Result<Self> {
        let entries = Entries::<TimeEntry>::load(path, "time index")?;
        let mut prev: Option<TimeEntry> = None;
        for &TimeEntry(ts, rel) in entries.list() {
            if let Some(TimeEntry(pt, pr)) = prev
                && (ts <= pt || rel < pr)
            {
                bail!(
                    "time index `{}`: entry ({ts}, {rel}) does not follow ({pt}, {pr})",
                    path.display()
                );
            }
            prev = Some(TimeEntry(ts, rel));
        }
        Ok(TimeIndex {
            entries,
            base_offset,
        })
    }

    /// Opens an existing time index evicted: only its last entry is read.
    pub fn open_evicted(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(TimeIndex {
            entries: Entries::open_evicted(path, "time index")?,
            base_offset,
        })
    }

    /// Reads the whole index back (checking it) if it was evicted.
    pub fn make_resident(&mut self) -> Result<()> {
        if !self.entries.is_resident() {
            *self = Self::load(self.entries.path(), self.base_offset)?;
        }
        Ok(())
    }

    /// Drops the entries from memory; they must all be in the file (flush first).
    pub fn evict(&mut self) {
        self.entries.evict();
    }

    pub fn path(&self) -> &Path {
        self.entries.path()
    }

    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    pub fn last_entry(&self) -> Option<(i64, i64)> {
        self.entries
            .last()
            .map(|TimeEntry(t, r)| (t, self.base_offset + i64::from(r)))
    }

    pub fn all_entries(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.entries
            .list()
            .iter()
            .map(|&TimeEntry(t, r)| (t, self.base_offset + i64::from(r)))
    }

    /// Adds (timestamp, offset) if the timestamp is above the last entry's (resident index).
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> Result<()> {
        let last = self.entries.last();
        if timestamp < 0 || last.is_some_and(|TimeEntry(t, _)| timestamp <= t) {
            return Ok(());
        }
        let Ok(rel) = u32::try_from(offset - self.base_offset) else {
            bail!(
                "time index `{}`: offset {offset} does not fit relative to base {}",
                self.path().display(),
                self.base_offset
            );
        };
        if last.is_some_and(|TimeEntry(_, r)| rel < r) {
            bail!(
                "time index `{}`: offset {offset} goes backwards",
                self.path().display()
            );
        }
        self.entries.push(TimeEntry(timestamp, rel));
        Ok(())
    }

    /// Drops entries for offsets ≥ `offset` (all of them for `i64::MIN`, without reading an
    /// evicted index back).
    pub fn truncate(&mut self, offset: i64) -> Result<()> {
        if offset == i64::MIN {
            return self.entries.clear();
        }
        let keep = self
            .entries
            .list()
            .iter()
            .take_while(|e| self.base_offset + i64::from(e.1) < offset)
            .count();
        self.entries.truncate(keep)
    }

    /// Takes back the entries added since the index held `keep` (not yet written).
    pub fn truncate_entries(&mut self, keep: usize) {
        self.entries.drop_pending(keep)
    }

    /// Writes the entries not yet in the file; `sync` fsyncs it as well.
    pub fn flush(&mut self, sync: bool) -> Result<()> {
        self.entries.flush(sync)
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
    fn decode_entries_reads_the_golden_bytes_and_leaves_a_partial_entry_out() {
        let bytes = [
            0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, 0, 0, 0, 5, 0, 0, 0, 0,
        ];
        assert_eq!(
            decode_entries(&bytes, 100).collect::<Vec<_>>(),
            vec![(1_700_000_000_000, 105)]
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
