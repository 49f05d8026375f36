//! One file-system sync for a pass over many logs.
//!
//! A checkpoint after a large catch-up flushes every log it wrote and rewrites each one's
//! `leader-epoch-checkpoint`: fsyncs of each log, its indexes, the new file and its directory,
//! four or five per partition. With thousands of partitions that pass costs seconds however
//! little each one received. A pass over [`SYNCFS_FROM`] logs or more instead writes
//! everything unsynced, makes one `syncfs` of the data dir's file system, renames the new
//! checkpoint files into place and makes a second `syncfs` for the renames: two syncs whose
//! cost follows the bytes written (a flush pass, which renames nothing, makes one).
//!
//! `syncfs` writes back everything dirty on that file system, not only the daemon's own
//! files. Where the data dir is a file system of its own (the root of a whole file system,
//! mounted once, not btrfs) that is all the daemon's. On a shared disk (a folder of one, a
//! bind mount, a btrfs subvolume), a pass uses it only while the kernel holds at most
//! [`SHARED_DIRTY_LIMIT`] of unwritten data in all (`Dirty` + `Writeback` in
//! `/proc/meminfo`, read as the pass starts), so another program's writes can make a pass
//! wait for not much more than that; above it, each log is fsynced on its own as before.
//!
//! The descriptor used for `syncfs` is opened when the manager is, so the sync also reports
//! a writeback error that happened earlier; a failed sync halts the daemon as a failed fsync
//! does ([`crate::log::halt_on_fsync_error`]). On a shared disk, the error may be another
//! program's file: `syncfs` cannot tell whose, and the daemon errs on the side of its data.
//! Linux reports writeback errors through `syncfs` only from 5.8 on: on older kernels every
//! log is fsynced on its own.

use anyhow::{Context, Result};
use std::fs::File;
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
    /// The kernel's `syncfs` reports writeback errors (Linux 5.8 and later).
    reports_errors: bool,
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
            reports_errors: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .is_ok_and(|r| release_at_least(&r, (5, 8))),
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
            && self.reports_errors
            && (self.own || unwritten_bytes().is_some_and(|b| b <= SHARED_DIRTY_LIMIT))
    }

    /// `syncfs` of the data dir's file system; halts the daemon when it fails.
    pub(super) fn sync(&self) {
        if let Err(e) = crate::checkpoint::syncfs_on(&self.dir) {
            crate::log::halt_on_fsync_error(&self.data_dir, &e);
        }
    }
}

/// Whether `dir` is a file system of its own: the root of a mount (`/proc/self/mountinfo`)
/// that shows the whole file system (its root is `/`, so not a bind mount of a folder of
/// another disk), mounted nowhere else, and not btrfs (whose subvolumes share one file
/// system). Anything else, or no `/proc`, counts as shared.
fn own_file_system(dir: &Path) -> bool {
    let (Ok(dir), Ok(table)) = (
        std::fs::canonicalize(dir),
        std::fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return false;
    };
    own_in_mountinfo(&table, &dir.to_string_lossy())
}

/// [`own_file_system`] on the text of a mountinfo table.
fn own_in_mountinfo(table: &str, dir: &str) -> bool {
    // id parent major:minor root mount-point options [optional...] - type source super
    let mounts: Vec<(&str, String, String, &str)> = table
        .lines()
        .filter_map(|l| {
            let (head, tail) = l.split_once(" - ")?;
            let f: Vec<&str> = head.split(' ').collect();
            let fs_type = tail.split(' ').next()?;
            Some((
                *f.get(2)?,
                unescape(f.get(3)?),
                unescape(f.get(4)?),
                fs_type,
            ))
        })
        .collect();
    // The last mount at a point is the one in effect.
    let Some((dev, root, _, fs_type)) = mounts.iter().rev().find(|m| m.2 == dir) else {
        return false;
    };
    root == "/" && *fs_type != "btrfs" && mounts.iter().filter(|m| m.0 == *dev).count() == 1
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(rest.get(..i).unwrap_or_default());
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = rest.get(i + 4..).unwrap_or_default();
            }
            None => {
                out.push('\\');
                rest = rest.get(i + 1..).unwrap_or_default();
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether a kernel release such as `6.1.0-18-amd64` is `at_least` (major, minor).
fn release_at_least(release: &str, at_least: (u32, u32)) -> bool {
    let mut parts = release.trim().split(['.', '-']);
    let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (next(), next()) {
        (Some(major), Some(minor)) => (major, minor) >= at_least,
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
    fn syncfs_reports_errors_from_linux_5_8() {
        assert!(release_at_least("6.18.44-fc-v1045\n", (5, 8)));
        assert!(release_at_least("5.8.0", (5, 8)));
        assert!(!release_at_least("5.4.0-150-generic", (5, 8)));
        assert!(!release_at_least("4.19.0", (5, 8)));
        assert!(!release_at_least("weird", (5, 8)));
    }

    #[test]
    fn only_the_whole_of_a_file_system_mounted_once_is_its_own() {
        let table = "\
22 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 252:16 / /var/lib/rf rw,relatime shared:2 - xfs /dev/vdb rw
31 22 252:0 /srv/data /mnt/bound rw,relatime - ext4 /dev/vda rw
32 22 252:32 / /mnt/btr rw - btrfs /dev/vdc rw
33 22 252:48 / /mnt/twice rw - ext4 /dev/vdd rw
34 22 252:48 / /mnt/again rw - ext4 /dev/vdd rw
35 22 252:64 / /mnt/with\\040space rw - ext4 /dev/vde rw
";
        assert!(own_in_mountinfo(table, "/var/lib/rf"));
        assert!(own_in_mountinfo(table, "/mnt/with space"));
        // A folder of the root disk, a bind mount of one, btrfs, a disk mounted twice.
        for shared in ["/var/lib", "/", "/mnt/bound", "/mnt/btr", "/mnt/twice"] {
            assert!(!own_in_mountinfo(table, shared), "{shared}");
        }
        let d = tempfile::tempdir().unwrap();
        assert!(
            !own_file_system(d.path()),
            "a temporary folder is not a mount"
        );
    }
}
