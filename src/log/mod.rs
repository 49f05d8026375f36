//! The local log in Kafka's on-disk layout.
//!
//! ```text
//! <data_dir>/<topic>-<partition>/
//!     00000000000000000000.log         batches exactly as the leader sent them   (segment)
//!     00000000000000000000.index       offset → position, 8-byte entries         (offset_index)
//!     00000000000000000000.timeindex   timestamp → offset, 12-byte entries       (time_index)
//!     leader-epoch-checkpoint          epoch → start offset                       (epoch_cache)
//! ```
//! [`partition::PartitionLog`] ties the segments of one partition together; [`loader`] opens
//! it at start-up and recovers it after a crash; [`manager::LogManager`] holds every partition's
//! log behind its own mutex and writes the data-dir checkpoint files.

pub mod epoch_cache;
pub mod index_file;
pub mod loader;
pub mod manager;
pub mod offset_index;
pub mod partition;
pub mod segment;
pub mod time_index;

pub use partition::{LogConfig, PartitionLog};

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
