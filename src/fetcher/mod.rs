//! Fetching, the way Kafka's follower does it.
//!
//! Layers, each using only the ones above it:
//! - [`shutdownable`]: a named thread that runs `do_work()` until shutdown is initiated.
//! - [`leader_endpoint`]: the leader seam (Kafka's `LeaderEndPoint`) and what it answers;
//!   [`replica_ops`]: the local seam, what the loop asks of the replica's logs. The loop
//!   reaches the network and the disk only through these two, so it is tested without sockets.
//! - [`partition_map`]: each partition's fetch state, and the partition map, which records
//!   what changed so that an idle round looks at no partition; [`shared`]: the map under a
//!   mutex with a condition variable, as a fetcher shares it with its manager.
//! - [`fetch_session`]: the client side of KIP-227 fetch sessions (Kafka's
//!   `FetchSessionHandler`): what the leader's session holds, and the next request's contents.
//! - [`backoff`]: how long a fetcher waits after failed fetches in a row, and what it says.
//! - [`abstract_fetcher`]: the generic fetch loop, a `do_work()` round of truncate → build
//!   fetch request → fetch → process the response (validate → pipeline the next request →
//!   append → apply the outcome), with truncation in its own file.
//! - [`broker_endpoint`]: the real `LeaderEndPoint` over a broker connection.
//! - [`replica_fetcher`]: the real `ReplicaOps`: verify batches, append to the local log.
//! - [`manager`]: groups partitions by leader into `fetchers_per_broker` threads per broker and
//!   moves them when leadership moves; it reaches the cluster through a
//!   [`manager::MetadataSource`] and an [`manager::EndpointFactory`]. One
//!   [`manager::StopHandle`] stops it and every fetcher.
//!
//! Lock order (outer first; a thread holding one takes only later ones):
//! 1. a fetcher's partition map ([`shared::FetcherShared::lock`]), held by its thread
//!    across a truncation's requests and while it validates and appends one response (and
//!    the checkpoint a truncation asks for);
//! 2. the log manager's checkpoint lock, across one checkpoint (the checkpoint task, the
//!    manager after creating logs, a fetcher after a truncation);
//! 3. the log manager's failure-listener slot (a failure found by a checkpoint is told with
//!    the checkpoint lock held; setting the listener walks every log);
//! 4. the log manager's map of logs, mostly only to look a log up or add one (archiving holds
//!    its write lock across that partition's flush and rename);
//! 5. one partition's log ([`crate::log::manager::lock_log`]); a storage error found under it
//!    is reported after it is released.
//!
//! Leaves, taking no other lock: the disk state (held across its `statvfs`, its own file and
//! the STATUS= it sends), the live state ([`crate::live`]), the stop handle's socket list, a
//! fetcher's socket slot. The stop handle's fetcher list is held while it interrupts each
//! fetcher, which takes that fetcher's socket slot and only *tries* its partition map: stopping
//! never waits on a fetcher. The shutdown that follows joins each fetcher after the step it is
//! in (a network wait ends at once with its socket shut; a disk write or checkpoint finishes).

pub mod abstract_fetcher;
pub mod backoff;
pub mod broker_endpoint;
pub mod fetch_session;
pub mod leader_endpoint;
pub mod manager;
#[cfg(test)]
mod mock_leader;
pub mod partition_map;
pub mod replica_fetcher;
pub mod replica_ops;
pub mod shared;
pub mod shutdownable;
