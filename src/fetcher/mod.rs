//! Fetching, the way Kafka's follower does it.
//!
//! - [`shutdownable`]: a named thread that runs `do_work()` until shutdown is initiated.
//! - [`abstract_fetcher`]: the generic fetch loop — a partition map under a mutex with a
//!   condition variable, and a `do_work()` round of build fetch request → fetch → process
//!   partition data. The network side is the [`abstract_fetcher::LeaderEndPoint`] trait, the
//!   local side the [`abstract_fetcher::ReplicaOps`] trait, so the loop is tested without sockets.
//! - [`leader_endpoint`]: the real `LeaderEndPoint` over a broker connection.
//! - [`replica_fetcher`]: the real `ReplicaOps`: verify batches, append to the local log.
//! - [`manager`]: groups partitions by leader into `fetchers_per_broker` threads per broker and
//!   moves them when leadership moves; it reaches the cluster through a
//!   [`manager::MetadataSource`] and an [`manager::EndpointFactory`]. One
//!   [`manager::StopHandle`] stops it and every fetcher.
//!
//! Lock order (outer first; never take an outer lock while holding an inner one):
//! 1. a fetcher's partition map ([`abstract_fetcher::FetcherShared::lock`]), held by its thread
//!    across a truncation's requests and while one response is validated and appended;
//! 2. the log manager's checkpoint lock (the checkpoint task, across one checkpoint);
//! 3. the log manager's map of logs (only to look a log up or add one);
//! 4. one partition's log ([`crate::log::manager::lock_log`]).
//!
//! Leaves, held briefly with nothing taken inside: the disk state, the live state
//! ([`crate::live`]), the failure listener slot (it only sends on a channel), the stop handle's
//! lists, and a fetcher's socket slot. [`manager::StopHandle::stop`] only *tries* a partition
//! map's lock, so a fetcher busy under it cannot delay a shutdown.

pub mod abstract_fetcher;
pub mod leader_endpoint;
pub mod manager;
pub mod replica_fetcher;
pub mod shutdownable;
