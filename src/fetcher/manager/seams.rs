//! The manager's network seams: where it learns leaders and first offsets, and how it makes
//! each fetcher's leader side.

use super::stop::{StopHandle, TrackedConn};
use crate::checkpoint::TopicPartition;
use crate::client::cluster::{self, ClusterMetadata, MetadataError, OffsetAnswer};
use crate::config::Config;
use crate::fetcher::broker_endpoint::BrokerEndPoint;
use crate::fetcher::leader_endpoint::LeaderEndPoint;
use crate::fetcher::shared::FetcherShared;
use crate::protocol::error::ErrorCode;
use crate::security::ClientSecurity;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// ListOffsets answers per partition: the offset, or the broker's error for it.
pub type OffsetAnswers = BTreeMap<TopicPartition, std::result::Result<OffsetAnswer, ErrorCode>>;

/// Where the manager learns about the cluster: leaders and their epochs (Metadata), and the
/// first offsets of partitions with no local log (ListOffsets). The daemon's is
/// [`BrokerMetadata`]; tests put a scripted cluster here.
pub trait MetadataSource: Send {
    /// The metadata of `topics`, from any broker that answers.
    fn metadata(&mut self, topics: &[String]) -> Result<ClusterMetadata, MetadataError>;
    /// ListOffsets on broker `broker` at `addr`: (partition, current leader epoch,
    /// timestamp -2 earliest / -1 latest / ms) each.
    fn list_offsets(
        &mut self,
        broker: i32,
        addr: &str,
        isolation_level: i8,
        asks: &[(TopicPartition, i32, i64)],
    ) -> Result<OffsetAnswers>;
}

/// Makes the leader side of a new fetcher thread (Kafka's replica fetcher thread factory).
/// The daemon's is [`BrokerEndpoints`]; tests put scripted leaders here.
pub trait EndpointFactory: Send {
    type EndPoint: LeaderEndPoint + 'static;
    /// The endpoint of the fetcher for `broker` at `addr`; `shared` is that fetcher's map,
    /// where a real endpoint registers its socket so a shutdown can interrupt it.
    fn endpoint(&mut self, broker: i32, addr: &str, shared: &Arc<FetcherShared>) -> Self::EndPoint;
}

/// The real [`MetadataSource`]: asks the bootstrap brokers and every broker metadata named,
/// in turn, until one answers, and keeps that connection for the next refresh. Every
/// connection is registered with the [`StopHandle`], so a shutdown interrupts it.
pub struct BrokerMetadata {
    bootstrap: Vec<String>,
    /// Brokers the last metadata named.
    known: Vec<String>,
    client_id: String,
    security: Arc<ClientSecurity>,
    request_timeout: Duration,
    stop: Arc<StopHandle>,
    conn: Option<TrackedConn>,
    /// The connection of the last ListOffsets and its address: the second request of a
    /// round (the `latest` fallback) goes on the same one.
    offsets_conn: Option<(String, TrackedConn)>,
}

impl BrokerMetadata {
    pub fn new(cfg: &Config, security: Arc<ClientSecurity>, stop: Arc<StopHandle>) -> Self {
        BrokerMetadata {
            bootstrap: cfg.bootstrap_servers.clone(),
            known: Vec::new(),
            client_id: cfg.client_id.clone(),
            security,
            request_timeout: Duration::from_millis(cfg.fetch.request_timeout_ms as u64),
            stop,
            conn: None,
            offsets_conn: None,
        }
    }

    fn remember(&mut self, md: &ClusterMetadata) {
        self.known = md.brokers.values().cloned().collect();
        self.known.sort();
    }
}

impl MetadataSource for BrokerMetadata {
    fn metadata(&mut self, topics: &[String]) -> Result<ClusterMetadata, MetadataError> {
        if let Some(conn) = self.conn.as_mut() {
            match conn.get().and_then(|c| cluster::fetch_metadata(c, topics)) {
                Ok(md) => {
                    self.remember(&md);
                    return Ok(md);
                }
                Err(e) => {
                    crate::log_debug!("metadata refresh failed: {e:#}; reconnecting");
                    self.conn = None;
                }
            }
        }
        let mut addrs = self.bootstrap.clone();
        for a in &self.known {
            if !addrs.contains(a) {
                addrs.push(a.clone());
            }
        }
        let mut errors = Vec::new();
        for a in &addrs {
            if self.stop.is_stopping() {
                return Err(anyhow::anyhow!("shutting down").into());
            }
            let got = StopHandle::connect(
                &self.stop,
                a,
                &self.security,
                &self.client_id,
                self.request_timeout,
            )
            .and_then(|mut c| {
                let md = cluster::fetch_metadata(c.get()?, topics)?;
                Ok((c, md))
            });
            match got {
                Ok((c, md)) => {
                    self.remember(&md);
                    self.conn = Some(c);
                    return Ok(md);
                }
                Err(e) => errors.push(e),
            }
        }
        Err(MetadataError::NoBrokerAnswered(cluster::NoBrokerAnswered {
            errors,
        }))
    }

    fn list_offsets(
        &mut self,
        _broker: i32,
        addr: &str,
        isolation_level: i8,
        asks: &[(TopicPartition, i32, i64)],
    ) -> Result<OffsetAnswers> {
        // A kept connection the broker may have closed meanwhile gets one fresh retry.
        if let Some((a, mut c)) = self.offsets_conn.take()
            && a == addr
        {
            match c
                .get()
                .and_then(|c| cluster::list_offsets(c, isolation_level, asks))
            {
                Ok(answers) => {
                    self.offsets_conn = Some((a, c));
                    return Ok(answers);
                }
                Err(e) => crate::log_debug!("ListOffsets on {addr} failed: {e:#}; reconnecting"),
            }
        }
        let mut c = StopHandle::connect(
            &self.stop,
            addr,
            &self.security,
            &self.client_id,
            self.request_timeout,
        )?;
        let answers = cluster::list_offsets(c.get()?, isolation_level, asks)?;
        self.offsets_conn = Some((addr.to_string(), c));
        Ok(answers)
    }
}

/// The real [`EndpointFactory`]: a [`BrokerEndPoint`] per fetcher, with the fetch settings.
pub struct BrokerEndpoints {
    client_id: String,
    security: Arc<ClientSecurity>,
    max_response: usize,
    isolation_level: i8,
    data_dir: std::path::PathBuf,
    request_timeout: Duration,
}

impl BrokerEndpoints {
    pub fn new(cfg: &Config, security: Arc<ClientSecurity>, data_dir: &Path) -> Self {
        let fc = &cfg.fetch;
        BrokerEndpoints {
            client_id: cfg.client_id.clone(),
            security,
            // A response holds at most max_bytes, plus one oversized first batch (KIP-74) and
            // framing; bound it well above that but finitely.
            max_response: (fc.max_bytes as usize)
                .saturating_mul(2)
                .saturating_add(64 << 20),
            isolation_level: fc.isolation.level(),
            data_dir: data_dir.to_path_buf(),
            request_timeout: Duration::from_millis(fc.request_timeout_ms as u64),
        }
    }
}

impl EndpointFactory for BrokerEndpoints {
    type EndPoint = BrokerEndPoint;
    fn endpoint(&mut self, broker: i32, addr: &str, shared: &Arc<FetcherShared>) -> BrokerEndPoint {
        BrokerEndPoint::new(
            broker,
            addr,
            self.security.clone(),
            &self.client_id,
            self.max_response,
            self.isolation_level,
            Some(shared.clone()),
            Some(self.data_dir.clone()),
            self.request_timeout,
        )
    }
}
