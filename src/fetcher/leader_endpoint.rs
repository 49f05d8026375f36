//! The real [`LeaderEndPoint`]: a lazily (re)connected broker connection.

use super::abstract_fetcher::{FetcherShared, LeaderEndPoint};
use crate::checkpoint::TopicPartition;
use crate::client::BrokerConnection;
use crate::client::cluster;
use crate::protocol::ApiKey;
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{self, FetchRequest, FetchResponse};
use crate::protocol::list_offsets::{EARLIEST, LATEST};
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Duration;

pub struct BrokerEndPoint {
    addr: String,
    broker_id: i32,
    client_id: String,
    max_response_bytes: usize,
    isolation_level: i8,
    conn: Option<BrokerConnection>,
    /// Where the socket is registered so shutdown can interrupt a fetch in flight.
    shared: Option<Arc<FetcherShared>>,
}

impl BrokerEndPoint {
    pub fn new(
        broker_id: i32,
        addr: &str,
        client_id: &str,
        max_response_bytes: usize,
        isolation_level: i8,
        shared: Option<Arc<FetcherShared>>,
    ) -> Self {
        BrokerEndPoint {
            addr: addr.to_string(),
            broker_id,
            client_id: client_id.to_string(),
            max_response_bytes,
            isolation_level,
            conn: None,
            shared,
        }
    }

    fn conn(&mut self) -> Result<&mut BrokerConnection> {
        if self.conn.is_none() {
            let c = BrokerConnection::connect(&self.addr, &self.client_id, self.max_response_bytes)
                .with_context(|| format!("broker {} ({})", self.broker_id, self.addr))?;
            if let Some(s) = &self.shared {
                s.set_socket(c.try_clone_socket().ok());
            }
            crate::log_info!("connected to broker {} at {}", self.broker_id, self.addr);
            self.conn = Some(c);
        }
        self.conn.as_mut().context("connection vanished")
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

    fn fetch(&mut self, req: &FetchRequest) -> Result<FetchResponse<'_>> {
        let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
        let addr = self.addr.clone();
        let conn = self.conn()?;
        let v = conn.require_version(ApiKey::Fetch)?;
        let body = conn.send(ApiKey::Fetch, v, wait, |w| fetch::encode_request(w, v, req))?;
        fetch::decode_response(body, v)
            .with_context(|| format!("broker {addr}: bad Fetch v{v} response"))
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

    fn close(&mut self) {
        self.conn = None;
        if let Some(s) = &self.shared {
            s.set_socket(None);
        }
    }
}
