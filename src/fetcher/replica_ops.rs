//! The local side of the fetch loop: what it asks of the replica's logs. The real one is
//! [`super::replica_fetcher::ReplicaLogOps`].

use super::leader_endpoint::Identity;
use crate::checkpoint::TopicPartition;
use crate::log::AppendError;
use crate::protocol::fetch::FetchPartitionResponse;
use anyhow::Result;

/// What the replica side's validation of one partition's records hands the loop: the loop
/// needs only where the next fetch starts and the epoch of the last batch (for pipelining the
/// next request); the bytes themselves stay the replica's business.
pub trait ValidatedFetch {
    fn next_fetch_offset(&self) -> i64;
    fn last_epoch(&self) -> Option<i32>;
    /// Why the batches after the valid ones were refused, when some were: the valid ones are
    /// appended, then the partition backs off.
    fn refused(&self) -> Option<&str>;
}

/// The local side of the loop: what a replica fetcher does with fetched data.
pub trait ReplicaOps: Send {
    /// What validation kept of a response's records, borrowing them.
    type Validated<'a>: ValidatedFetch;
    /// Checks the records fetched at `fetch_offset` once, writing nothing: checksums, headers,
    /// and that the offsets may follow the local log.
    fn validate<'a>(
        &self,
        tp: &TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'a>,
    ) -> Result<Self::Validated<'a>, AppendError>;
    /// Appends what [`Self::validate`] accepted; returns the new log end offset.
    fn append<'a>(
        &mut self,
        tp: &TopicPartition,
        fetch_offset: i64,
        validated: Self::Validated<'a>,
        data: &FetchPartitionResponse<'a>,
    ) -> Result<i64, AppendError>;
    fn log_start_offset(&self, tp: &TopicPartition) -> Option<i64>;
    fn log_end_offset(&self, tp: &TopicPartition) -> Option<i64>;
    fn latest_epoch(&self, tp: &TopicPartition) -> Option<i32>;
    /// The log start offset and the latest epoch together, which every request asks of every
    /// partition it fetches: one look-up where the log is found through a map.
    fn fetch_position(&self, tp: &TopicPartition) -> (Option<i64>, Option<i32>) {
        (self.log_start_offset(tp), self.latest_epoch(tp))
    }
    /// A count that moves whenever some partition's log start or epochs may have moved other
    /// than through this trait (retention): a request then looks at every partition again.
    fn position_moves(&self) -> u64 {
        0
    }
    /// The largest local epoch ≤ `epoch` and its end offset.
    fn end_offset_for_epoch(&self, tp: &TopicPartition, epoch: i32) -> Option<(i32, i64)>;
    /// Removes every offset ≥ `offset`; `reason` says why, for the record of what was removed.
    fn truncate(&mut self, tp: &TopicPartition, offset: i64, reason: &str) -> Result<()>;
    /// The leader no longer has the offsets from the local log end up to `offset` (its
    /// retention passed a stopped or slow replica): keep every local batch, record the range
    /// as lost upstream, and continue at `offset`.
    fn skip_to(&mut self, tp: &TopicPartition, offset: i64) -> Result<()>;
    /// The cluster id and topic id recorded for the local log (each `None` when unknown).
    fn identity(&self, tp: &TopicPartition) -> Identity;
    /// Whether no fetch should be sent now (the local disk is full): the loop waits a backoff
    /// instead of fetching data it could not append.
    fn paused(&self) -> bool {
        false
    }
    /// A local storage error on `tp` (Kafka's `markPartitionFailed`): it is no longer
    /// fetched until its storage is sound again. Must not block (the caller holds the
    /// partition-map lock).
    fn mark_failed(&mut self, _tp: &TopicPartition, _reason: &str) {}
    /// Called once after a round's truncations, outside the partition-map lock (the real
    /// replica rewrites its checkpoints here, once, rather than per truncated partition).
    fn after_truncations(&mut self) {}
}
