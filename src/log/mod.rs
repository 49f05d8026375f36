//! The local log in Kafka's on-disk layout.
//!
//! ```text
//! <data_dir>/<topic>-<partition>/
//!     00000000000000000000.log         batches exactly as the leader sent them   (segment)
//!     00000000000000000000.index       offset → position, 8-byte entries         (offset_index)
//!     00000000000000000000.timeindex   timestamp → offset, 12-byte entries       (time_index)
//!     leader-epoch-checkpoint          epoch → start offset                       (epoch_cache)
//! ```
//! Three layers, each using only those below it:
//! - [`resources`]: what the process has to spend: file descriptors, the cache of open
//!   segment files, free disk space.
//! - [`format`](mod@format): the files of one partition in Kafka's byte formats (segments,
//!   their indexes, the transaction index, producer snapshots, the leader-epoch file,
//!   kept-aside copies).
//! - the partition engine: [`partition::PartitionLog`] ties the segments of one partition
//!   together; [`loader`] opens it at start-up and recovers it after a crash;
//!   [`manager::LogManager`] holds every partition's log behind its own mutex and writes the
//!   data-dir checkpoint files; [`touched`] tells its periodic passes which logs changed;
//!   [`repair`] rebuilds segments in place. Readers outside the lock go through [`read_view`]
//!   and [`reader`]; every file name is in [`data_dir`].

pub mod data_dir;
#[cfg(test)]
mod fault_tests;
pub mod format;
pub mod identity;
pub mod loader;
pub mod manager;
pub mod max_timestamp;
pub mod partition;
#[cfg(test)]
mod partition_tests;
pub mod read_view;
pub mod reader;
pub mod repair;
pub mod resources;
pub mod touched;

use crate::record::verified::Unfollowable;
pub use partition::{LogConfig, PartitionLog};

/// Why an append was refused. Callers branch on the kind: data from the leader that cannot
/// be appended is fetched again after a backoff; a local storage failure is the disk's fault,
/// not the leader's. Nothing is written in the first two cases.
#[derive(Debug)]
pub enum AppendError {
    /// The leader's bytes are unusable: a bad checksum or framing, a header that makes no
    /// sense, a batch that does not end below the high watermark the same response reports.
    InvalidData(String),
    /// The offsets do not follow the local log (overlap, going backwards, or the log moved
    /// since the fetch was sent).
    OffsetMismatch(String),
    /// Writing the local files failed.
    Storage(anyhow::Error),
    /// The data dir's filesystem is full (below `log.min_free_bytes`, or ENOSPC): the write
    /// was cut back to its last whole batch (earlier segments of the same append may be in);
    /// the partition waits, and the data dir's one ERROR says why.
    DiskFull(String),
    /// The process is out of file descriptors (EMFILE, ENFILE): cut back as for a full disk;
    /// the partition backs off, and the limit is said once a minute for all of them.
    Exhausted(String),
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::InvalidData(s) | AppendError::OffsetMismatch(s) => f.write_str(s),
            AppendError::Storage(e) => write!(f, "local storage error: {e:#}"),
            AppendError::DiskFull(s) | AppendError::Exhausted(s) => f.write_str(s),
        }
    }
}

impl AppendError {
    /// A short name of the kind, for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            AppendError::InvalidData(_) => "invalid_data",
            AppendError::OffsetMismatch(_) => "offset_mismatch",
            AppendError::Storage(_) => "storage",
            AppendError::DiskFull(_) => "disk_full",
            AppendError::Exhausted(_) => "out_of_descriptors",
        }
    }
}

impl std::error::Error for AppendError {}

impl From<Unfollowable> for AppendError {
    fn from(e: Unfollowable) -> Self {
        match e {
            Unfollowable::InvalidData(s) => AppendError::InvalidData(s),
            Unfollowable::OffsetMismatch(s) => AppendError::OffsetMismatch(s),
        }
    }
}

/// A failed write: out of disk or descriptors (what the caller handles apart), or a
/// failure of this partition's storage.
impl From<anyhow::Error> for AppendError {
    fn from(e: anyhow::Error) -> Self {
        match resources::Exhausted::of(&e) {
            Some(resources::Exhausted::Disk) => AppendError::DiskFull(format!("{e:#}")),
            Some(resources::Exhausted::Descriptors) => AppendError::Exhausted(format!("{e:#}")),
            None => AppendError::Storage(e),
        }
    }
}

/// A failed fsync of segment or index data is not retried: Linux reports the error once and
/// marks the pages clean, so a later fsync that "succeeds" proves nothing about the lost
/// bytes. Like Kafka, the process halts at once — no further checkpoint, no clean-shutdown
/// marker — and the next start recovers from the last recovery point that was really synced.
pub fn halt_on_fsync_error(path: &std::path::Path, e: &std::io::Error) -> ! {
    crate::log_error!(
        "fsync of `{}` failed: {e}; halting so that the next start recovers from the last durable checkpoint",
        path.display()
    );
    std::process::exit(1)
}
