//! The file behind an offset or time index.
//!
//! An index keeps its entries in memory; its file is opened only to read it at load, to
//! append the pending entries at a flush (and fsync them), and to cut it at a truncation.
//! So a partition holds no index file descriptor between flushes, and a daemon following
//! thousands of partitions stays far below the usual descriptor limits.
//! Invariant: the file holds exactly `written` whole entries.

use crate::fault::{self, Step};
use anyhow::{Context, Result, bail};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// Entries read at a time by [`scan_file`].
const SCAN_ENTRIES: usize = 4096;

/// Calls `f` with each whole entry of the index file at `path`, in order, until it returns
/// false; a bounded chunk is read at a time, so a large index is never held whole. Bytes after
/// the last whole entry are left out. For readers that look an entry up without loading the
/// index (the inspection commands).
pub fn scan_file(
    path: &Path,
    what: &'static str,
    entry_size: usize,
    mut f: impl FnMut(&[u8]) -> bool,
) -> Result<()> {
    use std::io::Read;
    let file = std::fs::File::open(path)
        .with_context(|| format!("failed to open {what} `{}`", path.display()))?;
    let mut r = std::io::BufReader::with_capacity(entry_size * SCAN_ENTRIES, file);
    let mut entry = vec![0u8; entry_size];
    loop {
        match r.read_exact(&mut entry) {
            Ok(()) => {
                if !f(&entry) {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("failed to read {what} `{}`", path.display()));
            }
        }
    }
}

#[derive(Debug)]
pub struct IndexFile {
    path: PathBuf,
    /// "index" or "time index", for messages.
    what: &'static str,
    entry_size: usize,
    written: usize,
    /// Entries written or a truncation done since the last fsync.
    unsynced: bool,
}

impl IndexFile {
    /// Creates the file empty (truncating an existing one).
    pub fn create(path: &Path, what: &'static str, entry_size: usize) -> Result<Self> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .with_context(|| format!("failed to create {what} `{}`", path.display()))?;
        Ok(IndexFile {
            path: path.to_path_buf(),
            what,
            entry_size,
            written: 0,
            unsynced: true,
        })
    }

    /// Reads an existing file; its size must be a whole number of entries.
    pub fn load(path: &Path, what: &'static str, entry_size: usize) -> Result<(Self, Vec<u8>)> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("failed to read {what} `{}`", path.display()))?;
        if bytes.len() % entry_size != 0 {
            bail!(
                "{what} `{}`: size {} is not a multiple of {entry_size}",
                path.display(),
                bytes.len()
            );
        }
        let written = bytes.len() / entry_size;
        Ok((
            IndexFile {
                path: path.to_path_buf(),
                what,
                entry_size,
                written,
                unsynced: false,
            },
            bytes,
        ))
    }

    /// Opens an existing file reading only its last entry (for a segment that is not
    /// active: its entries stay on disk until needed).
    pub fn load_last(
        path: &Path,
        what: &'static str,
        entry_size: usize,
    ) -> Result<(Self, Option<Vec<u8>>)> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(path)
            .with_context(|| format!("failed to open {what} `{}`", path.display()))?;
        let len = f
            .metadata()
            .with_context(|| format!("failed to stat {what} `{}`", path.display()))?
            .len();
        let len = usize::try_from(len)
            .with_context(|| format!("{what} `{}` is too large to map", path.display()))?;
        if !len.is_multiple_of(entry_size) {
            bail!(
                "{what} `{}`: size {len} is not a multiple of {entry_size}",
                path.display()
            );
        }
        let last = if len == 0 {
            None
        } else {
            let mut buf = vec![0u8; entry_size];
            f.read_exact_at(&mut buf, (len - entry_size) as u64)
                .with_context(|| format!("failed to read {what} `{}`", path.display()))?;
            Some(buf)
        };
        let file = IndexFile {
            path: path.to_path_buf(),
            what,
            entry_size,
            written: len / entry_size,
            unsynced: false,
        };
        Ok((file, last))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries in the file.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Appends `pending` (whole entries) after the written ones; `sync` fsyncs the file.
    pub fn flush(&mut self, pending: &[u8], sync: bool) -> Result<()> {
        if pending.is_empty() && !(sync && self.unsynced) {
            return Ok(());
        }
        let f = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .with_context(|| format!("failed to open {} `{}`", self.what, self.path.display()))?;
        if !pending.is_empty() {
            let at = (self.written * self.entry_size) as u64;
            if let Err(e) = fault::write_all_at(Step::Index, &f, pending, at) {
                // Part of an entry may be on disk: the file goes back to its whole entries
                // (the invariant above), and the entries stay pending for the next flush.
                if let Err(ce) = f.set_len(at) {
                    crate::log_error!(
                        "failed to cut {} `{}` back to {at} bytes: {ce}; it is rebuilt at the next start",
                        self.what,
                        self.path.display()
                    );
                }
                return Err(e).with_context(|| {
                    format!("failed to write {} `{}`", self.what, self.path.display())
                });
            }
            self.written += pending.len() / self.entry_size;
            self.unsynced = true;
        }
        if sync {
            if let Err(e) = f.sync_data() {
                crate::log::halt_on_fsync_error(&self.path, &e);
            }
            self.unsynced = false;
        }
        Ok(())
    }

    /// Cuts the file to its first `keep` entries (no-op when it holds no more).
    pub fn truncate(&mut self, keep: usize) -> Result<()> {
        if self.written <= keep {
            return Ok(());
        }
        OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|f| f.set_len((keep * self.entry_size) as u64))
            .with_context(|| {
                format!("failed to truncate {} `{}`", self.what, self.path.display())
            })?;
        self.written = keep;
        self.unsynced = true;
        Ok(())
    }
}

/// One fixed-size index entry, as stored big-endian in its file.
pub trait Entry: Copy + std::fmt::Debug {
    const SIZE: usize;
    fn encode(&self, out: &mut Vec<u8>);
    /// Decodes `SIZE` bytes (a shorter slice decodes as zeros; callers pass whole entries).
    fn decode(bytes: &[u8]) -> Self;
}

/// The entries of an index and its file, resident in memory or evicted.
///
/// An inactive segment's index is evicted — its entries are all on disk — so memory does not
/// grow with the log; only its last entry stays in memory.
/// Invariants: while resident, the file holds a prefix of `list`; while evicted, `list` is
/// empty and the file holds every entry.
#[derive(Debug)]
pub struct Entries<E: Entry> {
    file: IndexFile,
    list: Vec<E>,
    resident: bool,
    last: Option<E>,
}

impl<E: Entry> Entries<E> {
    pub fn create(path: &Path, what: &'static str) -> Result<Self> {
        Ok(Entries {
            file: IndexFile::create(path, what, E::SIZE)?,
            list: Vec::new(),
            resident: true,
            last: None,
        })
    }

    /// Reads every entry (the caller checks them).
    pub fn load(path: &Path, what: &'static str) -> Result<Self> {
        let (file, bytes) = IndexFile::load(path, what, E::SIZE)?;
        let list = bytes.chunks_exact(E::SIZE).map(E::decode).collect();
        Ok(Entries {
            file,
            list,
            resident: true,
            last: None,
        })
    }

    /// Reads only the last entry.
    pub fn open_evicted(path: &Path, what: &'static str) -> Result<Self> {
        let (file, last) = IndexFile::load_last(path, what, E::SIZE)?;
        Ok(Entries {
            file,
            list: Vec::new(),
            resident: false,
            last: last.map(|b| E::decode(&b)),
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn is_resident(&self) -> bool {
        self.resident
    }

    /// Drops the entries from memory if they are all in the file (flush first).
    pub fn evict(&mut self) {
        if self.resident && self.file.written() == self.list.len() {
            self.last = self.list.last().copied();
            self.list = Vec::new();
            self.resident = false;
        }
    }

    /// Entries in the index, resident or not.
    pub fn len(&self) -> usize {
        if self.resident {
            self.list.len()
        } else {
            self.file.written()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn last(&self) -> Option<E> {
        if self.resident {
            self.list.last().copied()
        } else {
            self.last
        }
    }

    /// The entries in memory (empty while evicted).
    pub fn list(&self) -> &[E] {
        &self.list
    }

    /// Adds an entry to a resident index.
    pub fn push(&mut self, e: E) {
        self.list.push(e);
    }

    /// Keeps the first `keep` entries, in memory and in the file.
    pub fn truncate(&mut self, keep: usize) -> Result<()> {
        self.list.truncate(keep);
        self.file.truncate(keep)
    }

    /// Drops the entries added after the first `keep` that are not yet in the file (an
    /// append that failed takes its entries back; the file is not touched).
    pub fn drop_pending(&mut self, keep: usize) {
        if self.resident {
            self.list.truncate(keep.max(self.file.written()));
        }
    }

    /// Empties the index, without reading an evicted one back first.
    pub fn clear(&mut self) -> Result<()> {
        self.resident = true;
        self.last = None;
        self.truncate(0)
    }

    /// Writes the entries not yet in the file; `sync` fsyncs it as well.
    pub fn flush(&mut self, sync: bool) -> Result<()> {
        let pending = self.list.get(self.file.written()..).unwrap_or_default();
        let mut buf = Vec::with_capacity(pending.len() * E::SIZE);
        for e in pending {
            e.encode(&mut buf);
        }
        self.file.flush(&buf, sync)
    }
}
