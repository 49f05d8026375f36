//! The real [`LeaderEndPoint`]: a lazily (re)connected broker connection.

use super::leader_endpoint::{FetchFrame, Identity, LeaderEndPoint};
use super::shared::FetcherShared;
use super::shutdownable::ShutdownSignal;
use crate::checkpoint::TopicPartition;
use crate::client::cluster;
use crate::client::error::{FailedContext, fail};
use crate::client::{BrokerConnection, ConnectionError, ConnectionErrorKind};
use crate::log::identity;
use crate::protocol::ApiKey;
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{self, FetchRequest};
use crate::protocol::list_offsets::{EARLIEST, LATEST};
use crate::protocol::uuid::Uuid;
use crate::security::ClientSecurity;
use anyhow::anyhow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

type Result<T> = std::result::Result<T, ConnectionError>;

pub struct BrokerEndPoint {
    addr: String,
    broker_id: i32,
    /// How the connection is made (TLS, and SASL once integrated).
    security: Arc<ClientSecurity>,
    client_id: String,
    max_response_bytes: usize,
    isolation_level: i8,
    conn: Option<BrokerConnection>,
    /// Fetches sent and not yet received: (correlation id, version, max wait, topic names for
    /// a v13+ response).
    pending: std::collections::VecDeque<(i32, i16, Duration, BTreeMap<Uuid, String>)>,
    /// Receive buffers handed back by the fetcher, reused for the next responses.
    spare: Vec<Vec<u8>>,
    /// Where the socket is registered so shutdown can interrupt a fetch in flight.
    shared: Option<Arc<FetcherShared>>,
    /// The data dir whose recorded cluster id every new connection is checked against.
    data_dir: Option<PathBuf>,
    /// The deadline for a whole response (Kafka's `request.timeout.ms`).
    request_timeout: Duration,
    /// Connections made so far: the first is said, reconnects are debug (the fetcher warns
    /// of the failures and says when fetching works again).
    connections: u64,
}

impl BrokerEndPoint {
    #[expect(
        clippy::too_many_arguments,
        reason = "each is one of the fetcher's settings; a struct would only rename them"
    )]
    pub fn new(
        broker_id: i32,
        addr: &str,
        security: Arc<ClientSecurity>,
        client_id: &str,
        max_response_bytes: usize,
        isolation_level: i8,
        shared: Option<Arc<FetcherShared>>,
        data_dir: Option<PathBuf>,
        request_timeout: Duration,
    ) -> Self {
        BrokerEndPoint {
            addr: addr.to_string(),
            broker_id,
            security,
            client_id: client_id.to_string(),
            max_response_bytes,
            isolation_level,
            conn: None,
            pending: std::collections::VecDeque::new(),
            spare: Vec::new(),
            shared,
            data_dir,
            request_timeout,
            connections: 0,
        }
    }

    fn conn(&mut self) -> Result<&mut BrokerConnection> {
        if self.conn.is_none() {
            // No new connection once shutdown has begun: its socket could not be interrupted.
            if self.shared.as_ref().is_some_and(|s| !s.is_running()) {
                fail!("shutting down");
            }
            // The socket is registered before the handshake, so shutdown can interrupt it.
            let shared = self.shared.clone();
            // Named as `describe` names it, so its errors say the broker once.
            let c = BrokerConnection::connect_secured(
                &self.addr,
                &self.describe(),
                &self.security,
                &self.client_id,
                self.max_response_bytes,
                self.request_timeout,
                |stream| {
                    if let Some(s) = &shared {
                        s.set_socket(stream.try_clone().ok());
                        if !s.is_running() {
                            let _ = stream.shutdown(std::net::Shutdown::Both);
                        }
                    }
                },
            )?;
            let mut c = c;
            c.set_request_timeout(self.request_timeout);
            self.check_cluster(&mut c)?;
            self.connections += 1;
            if self.connections == 1 {
                crate::log_info!("connected to broker {} at {}", self.broker_id, self.addr);
            } else {
                crate::log_debug!("reconnected to broker {} at {}", self.broker_id, self.addr);
            }
            self.conn = Some(c);
        }
        self.conn.as_mut().failed_with(|| "connection vanished")
    }

    /// A new connection must lead to the cluster this data dir replicates: another cluster
    /// behind the same address gets nothing fetched from it. One Metadata request (no topics)
    /// per connection; skipped before the first contact recorded an id, and for brokers that
    /// report none.
    fn check_cluster(&self, c: &mut BrokerConnection) -> Result<()> {
        let Some(dir) = &self.data_dir else {
            return Ok(());
        };
        let Some(expected) = identity::read_cluster_id(dir).map_err(ConnectionError::failed)?
        else {
            return Ok(());
        };
        let md = cluster::fetch_metadata(c, &[])?;
        match md.cluster_id {
            Some(seen) if seen != expected => Err(ConnectionError::new(
                ConnectionErrorKind::IdentityMismatch,
                anyhow!(
                    "broker {} ({}) reports cluster id {seen}, but data dir `{}` replicates cluster {expected}; not fetching from it",
                    self.broker_id,
                    self.addr,
                    dir.display()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn list(
        &mut self,
        tp: &TopicPartition,
        epoch: i32,
        ts: i64,
    ) -> Result<std::result::Result<i64, ErrorCode>> {
        let iso = self.isolation_level;
        let c = self.conn()?;
        Ok(cluster::list_offset(c, iso, tp, epoch, ts)?.map(|a| a.offset))
    }
}

impl LeaderEndPoint for BrokerEndPoint {
    fn describe(&self) -> String {
        format!("broker {} ({})", self.broker_id, self.addr)
    }

    fn send_fetch(&mut self, req: &FetchRequest) -> Result<()> {
        let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
        let conn = self.conn()?;
        let mut v = conn.require_version(ApiKey::Fetch)?;
        let names = if v >= 13 && req.has_topic_ids() {
            req.topic_names()
        } else {
            // Without every topic's id, topics are named: v12 at most.
            v = v.min(12);
            BTreeMap::new()
        };
        let corr = conn.send_request(ApiKey::Fetch, v, |w| fetch::encode_request(w, v, req))?;
        self.pending.push_back((corr, v, wait, names));
        Ok(())
    }

    fn receive_fetch(&mut self) -> Result<FetchFrame> {
        let (corr, v, wait, topic_names) = self
            .pending
            .pop_front()
            .failed_with(|| "no fetch in flight")?;
        let spare = self.spare.pop().unwrap_or_default();
        let conn = self
            .conn
            .as_mut()
            .failed_with(|| "connection closed with a fetch in flight")?;
        let body = conn.receive_response(ApiKey::Fetch, v, corr, wait)?;
        let buf = conn.swap_recv_buffer(spare);
        Ok(FetchFrame {
            buf,
            body,
            version: v,
            topic_names,
        })
    }

    fn recycle(&mut self, frame: FetchFrame) {
        if self.spare.len() < 2 {
            self.spare.push(frame.buf);
        }
    }

    fn fetch_earliest_offset(
        &mut self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> Result<std::result::Result<i64, ErrorCode>> {
        self.list(tp, epoch, EARLIEST)
    }

    fn fetch_latest_offset(
        &mut self,
        tp: &TopicPartition,
        epoch: i32,
    ) -> Result<std::result::Result<i64, ErrorCode>> {
        self.list(tp, epoch, LATEST)
    }

    fn fetch_epoch_end_offset(
        &mut self,
        tp: &TopicPartition,
        current: i32,
        epoch: i32,
    ) -> Result<Option<(ErrorCode, i32, i64)>> {
        let c = self.conn()?;
        Ok(cluster::epoch_end_offset(c, tp, current, epoch)?
            .map(|p| (p.error, p.leader_epoch, p.end_offset)))
    }

    fn supports_diverging_epoch(&mut self) -> Result<bool> {
        Ok(self.conn()?.version(ApiKey::Fetch).is_some_and(|v| v >= 12))
    }

    fn identity(&mut self, topic: &str) -> Result<Identity> {
        let md = cluster::fetch_metadata(self.conn()?, &[topic.to_string()])?;
        Ok(Identity {
            cluster_id: md.cluster_id,
            topic_id: md.topic_ids.get(topic).copied(),
        })
    }

    fn close(&mut self) {
        self.conn = None;
        self.pending.clear();
        if let Some(s) = &self.shared {
            s.set_socket(None);
        }
    }
}
