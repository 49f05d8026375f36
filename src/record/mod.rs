//! Record batches as they travel on the wire and lie in `.log` files.
//!
//! ```text
//! every format:  0: offset INT64 | 8: size INT32 (bytes after these 12) | … | 16: magic INT8
//! v2 batch:      12: partitionLeaderEpoch INT32 | 16: magic=2 | 17: crc UINT32 (CRC-32C of 21..)
//!                21: attributes INT16 | 23: lastOffsetDelta INT32 | 27: baseTimestamp INT64
//!                35: maxTimestamp INT64 | 43: producerId INT64 | 51: producerEpoch INT16
//!                53: baseSequence INT32 | 57: recordsCount INT32 | 61: records…
//! v0/v1 message: 12: crc UINT32 (CRC-32 IEEE of 16..) | 16: magic | 17: attributes INT8
//!                18: timestamp INT64 (v1 only) | key BYTES | value BYTES
//! ```
//!
//! [`batch`] reads one batch header and verifies its checksum; [`set`] walks a record set
//! (a fetch response's records or a segment file) batch by batch and tells a partial batch at
//! the end (normal in fetch responses: fetch it again) from a corrupt one; [`verified`] judges
//! a fetched set by the follower's rule and is the only maker of the batches a log appends.
//! The follower stores batches exactly as the leader sent them and never decompresses them;
//! [`records`] and [`compression`] read inside a batch for the inspection commands only.

pub mod batch;
pub mod compression;
pub mod records;
pub mod set;
pub mod verified;

pub use batch::{BatchError, BatchHeader};
pub use set::{BatchIter, SetEnd, check_follows};
pub use verified::VerifiedBatches;
