//! What a fetcher thread shares with its manager: the partition map under a mutex with its
//! condition variable, the running flag, the socket of a fetch in flight, and the events the
//! fetcher sends back.

use super::partition_map::{PartitionFetchState, PartitionMap};
use super::shutdownable::ShutdownSignal;
use crate::checkpoint::TopicPartition;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// What a fetcher shares with its manager.
pub struct FetcherShared {
    /// Written by the manager (add/remove) and the fetcher thread (state after each round);
    /// the fetcher waits on `cond` while no partition is ready; `cond` is signalled when
    /// partitions are added and at shutdown.
    map: Mutex<PartitionMap>,
    cond: Condvar,
    running: AtomicBool,
    /// A clone of the fetcher's socket, shut down by `initiate_shutdown` so that a fetch in
    /// flight ends at once instead of at its timeout.
    socket: Mutex<Option<TcpStream>>,
}

impl Default for FetcherShared {
    fn default() -> Self {
        FetcherShared {
            map: Mutex::new(PartitionMap::new()),
            cond: Condvar::new(),
            running: AtomicBool::new(true),
            socket: Mutex::new(None),
        }
    }
}

impl FetcherShared {
    pub fn lock(&self) -> MutexGuard<'_, PartitionMap> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds (or replaces) partitions and wakes the fetcher.
    pub fn add_partitions(
        &self,
        parts: impl IntoIterator<Item = (TopicPartition, PartitionFetchState)>,
    ) {
        let mut map = self.lock();
        map.extend(parts);
        self.cond.notify_all();
    }

    /// Removes a partition; returns its last state.
    pub fn remove_partition(&self, tp: &TopicPartition) -> Option<PartitionFetchState> {
        self.lock().remove(tp)
    }

    pub fn partition_count(&self) -> usize {
        self.lock().len()
    }

    pub fn partitions(&self) -> Vec<(TopicPartition, PartitionFetchState)> {
        self.lock()
            .iter()
            .map(|(t, s)| (t.clone(), s.clone()))
            .collect()
    }

    /// Waits until woken (partitions added, shutdown) or `timeout`, releasing the map meanwhile.
    pub fn wait(&self, map: MutexGuard<'_, PartitionMap>, timeout: Duration) {
        let _r = self.cond.wait_timeout(map, timeout);
    }

    /// Registers the socket a fetch in flight uses (see `socket`).
    pub fn set_socket(&self, s: Option<TcpStream>) {
        *self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = s;
    }
}

impl FetcherShared {
    /// Clears the running flag and shuts the socket of a fetch in flight (it fails at once,
    /// and no new connection is made).
    fn stop_fetching(&self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(s) = self
            .socket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// [`ShutdownSignal::initiate_shutdown`] for [`super::manager::StopHandle`], which must
    /// never wait: it only *tries* the partition-map lock (the fetcher holds it across a
    /// truncation's requests) to wake a waiting fetcher. Should the lock be taken, the
    /// wake-up goes out without it, and a wait that begins just after ends within
    /// `IDLE_WAIT`; the owner's own `initiate_shutdown` before it joins wakes it for sure.
    pub(crate) fn interrupt(&self) {
        self.stop_fetching();
        let _map = match self.map.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        self.cond.notify_all();
    }
}

impl ShutdownSignal for FetcherShared {
    fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }
    fn initiate_shutdown(&self) {
        self.stop_fetching();
        // Taking the map lock before notifying closes the window between a waiter's running
        // check and its wait.
        let _map = self.lock();
        self.cond.notify_all();
    }
}

/// Events a fetcher sends its manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetcherEvent {
    /// The partition was removed from the fetcher: its leader must be looked up again.
    NeedsLeader {
        tp: TopicPartition,
        reason: String,
        /// The fetcher that gave it up and the leader epoch it fetched under: a stale event
        /// from an earlier assignment must not undo the current one.
        fetcher: String,
        leader_epoch: i32,
    },
}
