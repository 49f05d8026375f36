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

use super::index_file::{Entries, Entry};
use anyhow::{Context, Result, bail};
use std::path::Path;

pub const ENTRY_SIZE: usize = 8;

/// (relative offset, position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OffsetEntry(u32, u32);

impl Entry for OffsetEntry {
    const SIZE: usize = ENTRY_SIZE;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut a = [0u8; 8];
        a.copy_from_slice(b.get(..8).unwrap_or(&[0; 8]));
        let [r0, r1, r2, r3, p0, p1, p2, p3] = a;
        OffsetEntry(
            u32::from_be_bytes([r0, r1, r2, r3]),
            u32::from_be_bytes([p0, p1, p2, p3]),
        )
    }
}

/// The entries in the bytes of an offset index file, absolute: (offset, position), in file
/// order; bytes after the last whole entry are left out. For readers of the file that check
/// it rather than trust it (`verify`).
pub fn decode_entries(bytes: &[u8], base_offset: i64) -> impl Iterator<Item = (i64, u32)> + '_ {
    bytes.chunks_exact(ENTRY_SIZE).map(move |b| {
        let OffsetEntry(rel, pos) = OffsetEntry::decode(b);
        (base_offset + i64::from(rel), pos)
    })
}

/// [`OffsetIndex::lookup`] on the file at `path`, read as it streams: the last entry
/// (offset, position) whose offset is ≤ `target`, else (base, 0). Reading stops at an entry
/// that does not follow the one before it (a damaged index).
pub fn lookup_file(path: &Path, base_offset: i64, target: i64) -> Result<(i64, u32)> {
    use std::os::unix::fs::FileExt;
    // A binary search with one positioned read per probe (~20 for a 1 GiB segment's index),
    // not a scan: readers of the served replica look an offset up on every fetch, and a
    // scan from the start made reading a segment through quadratic in its index size.
    let file = std::fs::File::open(path)
        .with_context(|| format!("failed to open index `{}`", path.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("failed to stat index `{}`", path.display()))?
        .len();
    let entry_at = |i: u64| -> Result<OffsetEntry> {
        let mut b = [0u8; ENTRY_SIZE];
        file.read_exact_at(&mut b, i * ENTRY_SIZE as u64)
            .with_context(|| format!("failed to read index `{}`", path.display()))?;
        Ok(OffsetEntry::decode(&b))
    };
    // The last entry at or below `target`: entries strictly increase (a damaged index may
    // not; its answer is checked against the batch it points at by the callers).
    let (mut lo, mut hi) = (0u64, len / ENTRY_SIZE as u64);
    let mut found: Option<OffsetEntry> = None;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let e = entry_at(mid)?;
        if base_offset + i64::from(e.0) <= target {
            found = Some(e);
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(found.map_or((base_offset, 0), |OffsetEntry(r, p)| {
        (base_offset + i64::from(r), p)
    }))
}

#[derive(Debug)]
pub struct OffsetIndex {
    /// Invariant: relative offsets and positions strictly increase.
    entries: Entries<OffsetEntry>,
    base_offset: i64,
}

impl OffsetIndex {
    /// Creates an empty index file (truncating any existing one).
    pub fn create(path: &Path, base_offset: i64) -> Result<Self> {
        Ok(OffsetIndex {
            entries: Entries::create(path, "index")?,
            base_offset,
        })
    }

    /// Opens an existing index and checks it: whole entries, strictly increasing offsets and
    /// positions, every position below `log_size`. An error means: rebuild it.
    pub fn load(path: &Path, base_offset: i64, log_size: u64) -> Result<Self> {
        let entries = Entries::<OffsetEntry>::load(path, "index")?;
        let mut prev: Option<OffsetEntry> = None;
        for &OffsetEntry(rel, pos) in entries.list() {
            if let Some(OffsetEntry(pr, pp)) = prev
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
            prev = Some(OffsetEntry(rel, pos));
        }
        Ok(OffsetIndex {
            entries,
            base_offset,
        })
    }

    /// Opens an existing index evicted: only its last entry is read and checked (position
    /// below `log_size`). The rest is read by [`Self::make_resident`] if ever needed.
    pub fn open_evicted(path: &Path, base_offset: i64, log_size: u64) -> Result<Self> {
        let entries = Entries::<OffsetEntry>::open_evicted(path, "index")?;
        if let Some(OffsetEntry(_, pos)) = entries.last()
            && u64::from(pos) >= log_size
        {
            bail!(
                "index `{}`: position {pos} is past the log end {log_size}",
                path.display()
            );
        }
        Ok(OffsetIndex {
            entries,
            base_offset,
        })
    }

    /// Reads the whole index back (checking it) if it was evicted.
    pub fn make_resident(&mut self, log_size: u64) -> Result<()> {
        if !self.entries.is_resident() {
            *self = Self::load(self.entries.path(), self.base_offset, log_size)?;
        }
        Ok(())
    }

    /// Whether the entries are in memory.
    pub fn is_resident(&self) -> bool {
        self.entries.is_resident()
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

    /// The entry for `offset` (absolute) at `position`. Callers add entries in order, to a
    /// resident index.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        let Ok(rel) = u32::try_from(offset - self.base_offset) else {
            bail!(
                "index `{}`: offset {offset} does not fit relative to base {}",
                self.path().display(),
                self.base_offset
            );
        };
        if let Some(OffsetEntry(pr, pp)) = self.entries.last()
            && (rel <= pr || position <= pp)
        {
            bail!(
                "index `{}`: entry for offset {offset} at {position} is out of order",
                self.path().display()
            );
        }
        self.entries.push(OffsetEntry(rel, position));
        Ok(())
    }

    /// The (offset, position) to start scanning from for `target` (resident index).
    pub fn lookup(&self, target: i64) -> (i64, u32) {
        let rel = target - self.base_offset;
        let list = self.entries.list();
        let idx = list.partition_point(|e| i64::from(e.0) <= rel);
        match idx.checked_sub(1).and_then(|i| list.get(i)) {
            Some(&OffsetEntry(r, p)) => (self.base_offset + i64::from(r), p),
            None => (self.base_offset, 0),
        }
    }

    /// The last entry, absolute.
    pub fn last_entry(&self) -> Option<(i64, u32)> {
        self.entries
            .last()
            .map(|OffsetEntry(r, p)| (self.base_offset + i64::from(r), p))
    }

    /// All entries in memory, absolute (tests use them).
    pub fn all_entries(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.entries
            .list()
            .iter()
            .map(|&OffsetEntry(r, p)| (self.base_offset + i64::from(r), p))
    }

    /// Drops entries for offsets ≥ `offset` or positions ≥ `max_position` (resident index).
    pub fn truncate(&mut self, offset: i64, max_position: u64) -> Result<()> {
        let keep = self
            .entries
            .list()
            .iter()
            .take_while(|e| {
                self.base_offset + i64::from(e.0) < offset && u64::from(e.1) < max_position
            })
            .count();
        self.entries.truncate(keep)
    }

    /// Takes back the entries added since the index held `keep` (not yet written).
    pub fn truncate_entries(&mut self, keep: usize) {
        self.entries.drop_pending(keep)
    }

    pub fn clear(&mut self) -> Result<()> {
        self.entries.clear()
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
        let p = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::create(&p, 100).unwrap();
        idx.append(105, 4096).unwrap();
        idx.flush(true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), [0, 0, 0, 5, 0, 0, 0x10, 0]);
    }

    #[test]
    fn decode_entries_reads_the_golden_bytes_and_leaves_a_partial_entry_out() {
        let bytes = [
            0, 0, 0, 5, 0, 0, 0x10, 0, 0, 0, 0, 9, 0, 0, 0x20, 0, 0, 0, 1,
        ];
        assert_eq!(
            decode_entries(&bytes, 100).collect::<Vec<_>>(),
            vec![(105, 4096), (109, 8192)]
        );
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
    fn a_file_lookup_agrees_with_the_loaded_index_for_every_target() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("i.index");
        let mut idx = OffsetIndex::create(&p, 100).unwrap();
        // A partial entry at the end (a torn write) is not an entry.
        assert_eq!(lookup_file(&p, 100, 150).unwrap(), (100, 0), "empty");
        for i in 1..=1000u32 {
            idx.append(100 + i64::from(i) * 3, i * 50).unwrap();
        }
        idx.flush(true).unwrap();
        let loaded = OffsetIndex::load(&p, 100, 1 << 20).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, &[0, 0, 1]).unwrap();
        for target in 90..3200 {
            assert_eq!(
                lookup_file(&p, 100, target).unwrap(),
                loaded.lookup(target),
                "target {target}"
            );
        }
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
