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
//!   moves them when leadership moves.

pub mod abstract_fetcher;
pub mod leader_endpoint;
pub mod manager;
pub mod replica_fetcher;
pub mod shutdownable;
