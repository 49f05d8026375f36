//! One file-system sync for a pass over many logs.
//!
//! A checkpoint after a large catch-up flushes every log it wrote and rewrites each one's
//! `leader-epoch-checkpoint`: fsyncs of each log, its indexes, the new file and its directory,
//! four or five per partition. With thousands of partitions that pass costs seconds however
//! little each one received. A pass over [`SYNCFS_FROM`] logs or more instead writes
//! everything unsynced, makes one `syncfs` of the data dir's file system, renames the new
//! checkpoint files into place and makes a second `syncfs` for the renames: two syncs whose
//! cost follows the bytes written.
//!
//! `syncfs` writes back everything dirty on that file system, not only the daemon's own
//! files. Where the data dir is a file system of its own (a mount point) that is all the
//! daemon's. On a shared disk, a pass uses it only while the kernel holds at most
//! [`SHARED_DIRTY_LIMIT`] of unwritten data in all (`Dirty` + `Writeback` in
//! `/proc/meminfo`), so another program's writes can make a pass wait for no more than about
//! that much; above it, each log is fsynced on its own as before.
//!
//! The descriptor used for `syncfs` is opened when the manager is, so the sync also reports
//! a writeback error that happened earlier; a failed sync halts the daemon as a failed fsync
//! does ([`crate::log::halt_on_fsync_error`]). On a shared disk, the error may be another
//! program's file: `syncfs` cannot tell whose, and the daemon errs on the side of its data.

use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Passes over fewer logs fsync each one: a few fsyncs cost less than a file-system sync.
pub(super) const SYNCFS_FROM: usize = 64;

/// On a shared file system, the most unwritten data (of every program) a `syncfs` may have
/// to wait for.
pub(super) const SHARED_DIRTY_LIMIT: u64 = 256 << 20;

#[cfg(test)]
thread_local! {
    /// The way managers opened on this thread take, whatever the disk (tests).
    pub(super) static FORCE_ON_THIS_THREAD: std::cell::Cell<Option<bool>> =
        const { std::cell::Cell::new(None) };
}

#[derive(Debug)]
pub(super) struct FsSync {
    data_dir: PathBuf,
    dir: File,
    /// The data dir is the root of its own file system.
    own: bool,
    /// Tests choose the way instead of the disk.
    #[cfg(test)]
    pub(super) forced: Option<bool>,
}

impl FsSync {
    pub(super) fn open(data_dir: &Path) -> Result<Self> {
        let dir = File::open(data_dir)
            .with_context(|| format!("failed to open data dir `{}`", data_dir.display()))?;
        let own = own_file_system(data_dir);
        Ok(FsSync {
            data_dir: data_dir.to_path_buf(),
            dir,
            own,
            #[cfg(test)]
            forced: FORCE_ON_THIS_THREAD.with(std::cell::Cell::get),
        })
    }

    /// Whether a pass over `logs` logs shares one file-system sync (see the module doc).
    pub(super) fn fits(&self, logs: usize) -> bool {
        #[cfg(test)]
        if let Some(forced) = self.forced {
            return forced && logs >= SYNCFS_FROM;
        }
        logs >= SYNCFS_FROM
            && (self.own || unwritten_bytes().is_some_and(|b| b <= SHARED_DIRTY_LIMIT))
    }

    /// `syncfs` of the data dir's file system; halts the daemon when it fails.
    pub(super) fn sync(&self) {
        if let Err(e) = crate::checkpoint::syncfs_on(&self.dir) {
            crate::log::halt_on_fsync_error(&self.data_dir, &e);
        }
    }
}

/// Whether `dir` is a mount point: its parent lies on another device.
fn own_file_system(dir: &Path) -> bool {
    match (std::fs::metadata(dir), std::fs::metadata(dir.join(".."))) {
        (Ok(d), Ok(p)) => d.dev() != p.dev(),
        _ => false,
    }
}

/// `Dirty` + `Writeback` of `/proc/meminfo`, in bytes; `None` where it cannot be read.
fn unwritten_bytes() -> Option<u64> {
    parse_unwritten(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_unwritten(meminfo: &str) -> Option<u64> {
    let field = |name: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kb = rest.trim().strip_suffix("kB")?.trim();
            kb.parse::<u64>().ok()
        })
    };
    Some((field("Dirty")? + field("Writeback")?) * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_bytes_are_dirty_plus_writeback() {
        let text = "MemTotal:       24576000 kB\nDirty:              1200 kB\nWriteback:            34 kB\nWritebackTmp:          0 kB\n";
        assert_eq!(parse_unwritten(text), Some(1234 * 1024));
        assert_eq!(parse_unwritten("Dirty: 1 kB\n"), None);
        assert_eq!(parse_unwritten("Dirty: x kB\nWriteback: 0 kB\n"), None);
        assert!(
            unwritten_bytes().is_some(),
            "/proc/meminfo is readable here"
        );
    }

    #[test]
    fn a_directory_on_the_same_disk_as_its_parent_is_shared() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("x")).unwrap();
        assert!(!own_file_system(&d.path().join("x")));
        // `/proc` is a file system of its own under `/`.
        assert!(own_file_system(Path::new("/proc")));
    }
}
