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
