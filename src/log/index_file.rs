//! The file behind an offset or time index.
//!
//! An index keeps its entries in memory; its file is opened only to read it at load, to
//! append the pending entries at a flush (and fsync them), and to cut it at a truncation.
//! So a partition holds no index file descriptor between flushes, and a daemon following
//! thousands of partitions stays far below the usual descriptor limits.
//! Invariant: the file holds exactly `written` whole entries.

use anyhow::{Context, Result, bail};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

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
            .len() as usize;
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
            f.write_all_at(pending, (self.written * self.entry_size) as u64)
                .with_context(|| {
                    format!("failed to write {} `{}`", self.what, self.path.display())
                })?;
            self.written += pending.len() / self.entry_size;
            self.unsynced = true;
        }
        if sync {
            if let Err(e) = f.sync_data() {
                super::halt_on_fsync_error(&self.path, &e);
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
