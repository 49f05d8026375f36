//! Stopping the fetching side from any thread.

use super::ManagerEvent;
use crate::client::error::{FailedContext, fail};
use crate::client::{BrokerConnection, ConnectionError};
use crate::fetcher::shared::FetcherShared;
use crate::security::ClientSecurity;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The one way to stop the fetching side, from any thread, even while the manager and the
/// fetchers wait on brokers: [`StopHandle::stop`] sets the flag every step checks, shuts the
/// socket of every connection the manager has open, interrupts every fetcher (flag, socket,
/// wake-up; it never waits on a fetcher's lock) and wakes the manager, whose `run` then
/// shuts down and joins the fetchers and returns. Nothing else stops them.
#[derive(Debug, Default)]
pub struct StopHandle {
    stopping: AtomicBool,
    /// Sockets of the manager's open connections, keyed by local address; a connection
    /// removes its own when dropped, so none is kept open here.
    sockets: Mutex<Vec<(u64, TcpStream)>>,
    next_id: std::sync::atomic::AtomicU64,
    fetchers: Mutex<Vec<Weak<FetcherShared>>>,
    /// The manager's event channel, to wake it.
    manager: Mutex<Option<Sender<ManagerEvent>>>,
}

impl StopHandle {
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for (_, s) in self
            .sockets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for f in self
            .fetchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            if let Some(f) = f.upgrade() {
                f.interrupt();
            }
        }
        if let Some(tx) = self
            .manager
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            let _ = tx.send(ManagerEvent::Wake);
        }
    }

    /// Where [`Self::stop`] sends its wake-up.
    pub(super) fn set_manager(&self, events: Sender<ManagerEvent>) {
        *self
            .manager
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(events);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub(super) fn add_fetcher(&self, f: &Arc<FetcherShared>) {
        let mut fetchers = self
            .fetchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        fetchers.retain(|w| w.strong_count() > 0);
        fetchers.push(Arc::downgrade(f));
        if self.is_stopping() {
            f.interrupt();
        }
    }

    /// Connects to `addr`, registering the socket for [`Self::stop`] before the handshake.
    /// Refuses once stopping.
    pub(super) fn connect(
        this: &Arc<Self>,
        addr: &str,
        security: &ClientSecurity,
        client_id: &str,
        request_timeout: Duration,
    ) -> Result<TrackedConn, ConnectionError> {
        if this.is_stopping() {
            fail!("shutting down");
        }
        let mut key = None;
        let conn = BrokerConnection::connect_secured(
            addr,
            &format!("broker {addr}"),
            security,
            client_id,
            64 << 20,
            request_timeout,
            |stream| {
                if let Ok(clone) = stream.try_clone() {
                    let id = this.next_id.fetch_add(1, Ordering::SeqCst);
                    let mut sockets = this
                        .sockets
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Checked under the lock `stop` takes after setting the flag: either `stop`
                    // sees this socket, or this sees the flag.
                    if this.is_stopping() {
                        let _ = clone.shutdown(std::net::Shutdown::Both);
                    }
                    sockets.push((id, clone));
                    key = Some(id);
                }
            },
        );
        // Built before `?`: a failed handshake still unregisters its socket on drop.
        let mut tracked = TrackedConn {
            conn: None,
            key,
            handle: this.clone(),
        };
        let mut conn = conn?;
        conn.set_request_timeout(request_timeout);
        tracked.conn = Some(conn);
        Ok(tracked)
    }
}

/// A manager connection registered with its [`StopHandle`]; unregistered when dropped.
#[derive(Debug)]
pub(super) struct TrackedConn {
    conn: Option<BrokerConnection>,
    key: Option<u64>,
    handle: Arc<StopHandle>,
}

impl TrackedConn {
    pub(super) fn get(&mut self) -> Result<&mut BrokerConnection, ConnectionError> {
        self.conn.as_mut().failed_with(|| "connection closed")
    }
}

impl Drop for TrackedConn {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            self.handle
                .sockets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain(|(id, _)| *id != k);
        }
    }
}
