//! The leaders of the followed partitions, as `repair`, `verify --against-leader` and the
//! daemon's start-up hole check reach them: one Metadata request to the bootstrap brokers,
//! one connection per leader broker, and consumer Fetches (read_uncommitted, topics named)
//! at chosen offsets. Every request, the connection handshake included, ends within
//! `fetch.request_timeout_ms`.

use crate::checkpoint::TopicPartition;
use crate::client::BrokerConnection;
use crate::client::cluster::{self, ClusterMetadata};
use crate::config::Config;
use crate::log::repair::BatchSource;
use crate::protocol::ApiKey;
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{self, FetchPartition, FetchRequest};
use crate::protocol::list_offsets::{EARLIEST, LATEST};
use crate::protocol::uuid::Uuid;
use crate::security::ClientSecurity;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Why a partition's leader cannot be asked. Callers branch: an unreachable broker is said
/// once and its partitions skipped; a partition without a leader is said per partition.
#[derive(Debug)]
pub enum LeaderError {
    /// `message` names the broker and why (`broker 2 (10.0.0.5:9092): connect failed: …`).
    Unreachable { broker: i32, message: String },
    /// Why the partition has no leader to ask; the caller names the partition.
    NoLeader(String),
}

impl std::fmt::Display for LeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaderError::Unreachable { message, .. } | LeaderError::NoLeader(message) => {
                f.write_str(message)
            }
        }
    }
}

impl std::error::Error for LeaderError {}

pub struct Leaders {
    metadata: ClusterMetadata,
    client_id: String,
    security: Arc<ClientSecurity>,
    request_timeout: Duration,
    max_bytes: i32,
    conns: BTreeMap<i32, BrokerConnection>,
    /// Brokers that could not be reached, with why; not tried again.
    unreachable: BTreeMap<i32, String>,
}

impl Leaders {
    /// Reads the metadata of the followed topics from the first bootstrap broker that answers.
    /// Every connection is made with `security`.
    pub fn connect(cfg: &Config, security: Arc<ClientSecurity>) -> Result<Leaders> {
        let request_timeout = Duration::from_millis(cfg.fetch.request_timeout_ms as u64);
        let topics: Vec<String> = cfg.follow.iter().map(|f| f.topic.clone()).collect();
        let metadata = cluster::bootstrap_metadata_within(
            &cfg.bootstrap_servers,
            &security,
            &cfg.client_id,
            &topics,
            request_timeout,
        )?;
        Ok(Leaders {
            metadata,
            client_id: cfg.client_id.clone(),
            security,
            request_timeout,
            max_bytes: cfg.fetch.partition_max_bytes,
            conns: BTreeMap::new(),
            unreachable: BTreeMap::new(),
        })
    }

    pub fn cluster_id(&self) -> Option<&str> {
        self.metadata.cluster_id.as_deref()
    }

    pub fn topic_id(&self, topic: &str) -> Option<Uuid> {
        self.metadata.topic_ids.get(topic).copied()
    }

    /// The leader of `tp`, connected.
    pub fn partition(&mut self, tp: &TopicPartition) -> Result<PartitionLeader<'_>, LeaderError> {
        let leader = match self.metadata.leader(tp) {
            None => {
                return Err(LeaderError::NoLeader(
                    "the brokers' metadata does not list this partition".to_string(),
                ));
            }
            Some(l) if !l.error.is_ok() => {
                return Err(LeaderError::NoLeader(format!("metadata error {}", l.error)));
            }
            Some(l) if l.leader_id < 0 => {
                return Err(LeaderError::NoLeader("no leader at the moment".to_string()));
            }
            Some(l) => l.leader_id,
        };
        let Some(addr) = self.metadata.broker_addr(leader).map(str::to_string) else {
            return Err(LeaderError::NoLeader(format!(
                "its leader, broker {leader}, has no address in the metadata"
            )));
        };
        if let Some(message) = self.unreachable.get(&leader) {
            return Err(LeaderError::Unreachable {
                broker: leader,
                message: message.clone(),
            });
        }
        if !self.conns.contains_key(&leader) {
            let max_response = (self.max_bytes as usize)
                .saturating_add(1 << 20)
                .max(64 << 20);
            // Named with its id, so its errors say the broker once.
            match BrokerConnection::connect_secured(
                &addr,
                &format!("broker {leader} ({addr})"),
                &self.security,
                &self.client_id,
                max_response,
                self.request_timeout,
                |_| {},
            ) {
                Ok(c) => {
                    self.conns.insert(leader, c);
                }
                Err(e) => {
                    let message = format!("{e:#}");
                    self.unreachable.insert(leader, message.clone());
                    return Err(LeaderError::Unreachable {
                        broker: leader,
                        message,
                    });
                }
            }
        }
        let conn = self
            .conns
            .get_mut(&leader)
            .ok_or_else(|| LeaderError::NoLeader("connection vanished".to_string()))?;
        Ok(PartitionLeader {
            conn,
            tp: tp.clone(),
            broker: leader,
            max_bytes: self.max_bytes,
        })
    }

    /// Drops the connection to `broker` after a failed request (the next request connects
    /// again): its state after an error is unknown.
    pub fn forget(&mut self, broker: i32) {
        self.conns.remove(&broker);
    }
}

/// The longest a leader may hold these Fetches. Not 0: Tansu answers a Fetch with
/// `max_wait_ms` 0 without the partition at all. A leader holding the offsets answers at once.
const FETCH_WAIT_MS: i32 = 10;

/// The waits of the Fetches that ask again after an empty answer below the high watermark
/// (see [`PartitionLeader::fetch`]).
const EMPTY_RETRY_WAITS_MS: [i32; 3] = [100, 500, 1000];

/// One Fetch answer for one partition, its records copied out.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub records: Vec<u8>,
}

/// A partition's leader, connected.
pub struct PartitionLeader<'a> {
    conn: &'a mut BrokerConnection,
    tp: TopicPartition,
    broker: i32,
    max_bytes: i32,
}

impl PartitionLeader<'_> {
    pub fn broker(&self) -> i32 {
        self.broker
    }

    fn list(&mut self, timestamp: i64, what: &str) -> Result<i64> {
        match cluster::list_offset(self.conn, 0, &self.tp, -1, timestamp)? {
            Ok(a) => Ok(a.offset),
            Err(code) => bail!(
                "{}: ListOffsets ({what}) of {} failed with {code}",
                self.describe(),
                self.tp
            ),
        }
    }

    /// The leader's log start offset.
    pub fn log_start(&mut self) -> Result<i64> {
        self.list(EARLIEST, "earliest")
    }

    /// The leader's high watermark as its Fetch answers report it (what the follower goes
    /// by; Tansu's ListOffsets "latest" lags it), from a one-batch Fetch at `offset`; from
    /// ListOffsets when that Fetch answers with an error.
    pub fn high_watermark(&mut self, offset: i64) -> Result<i64> {
        let f = self.fetch(offset, 1)?;
        if f.error.is_ok() {
            return Ok(f.high_watermark);
        }
        self.list(LATEST, "latest")
    }

    /// One Fetch at `offset` of at most `max_bytes` (the first batch comes whole however
    /// large, KIP-74). Partition errors come back in [`Fetched::error`].
    ///
    /// A leader answers a Fetch below its high watermark with a batch: compaction leaves the
    /// next batch to answer with, never nothing. A busy leader (Tansu) may answer with
    /// nothing in its short wait, so an empty answer below the high watermark is asked again,
    /// waiting longer each time, and is an error if it stays empty: taken as it is, it would
    /// read as batches gone from the leader, and a comparison would pass what it never saw.
    pub fn fetch(&mut self, offset: i64, max_bytes: i32) -> Result<Fetched> {
        let mut got = self.fetch_once(offset, max_bytes, FETCH_WAIT_MS)?;
        for wait_ms in EMPTY_RETRY_WAITS_MS {
            if !(got.error.is_ok() && got.records.is_empty() && offset < got.high_watermark) {
                return Ok(got);
            }
            std::thread::sleep(Duration::from_millis(wait_ms as u64));
            got = self.fetch_once(offset, max_bytes, wait_ms)?;
        }
        if got.error.is_ok() && got.records.is_empty() && offset < got.high_watermark {
            bail!(
                "{}: Fetch of {} at offset {offset} answered no batch {} times, below its high watermark {}: it could not be compared (the leader is busy or not answering as Kafka does)",
                self.describe(),
                self.tp,
                EMPTY_RETRY_WAITS_MS.len() + 1,
                got.high_watermark
            );
        }
        Ok(got)
    }

    fn fetch_once(&mut self, offset: i64, max_bytes: i32, max_wait_ms: i32) -> Result<Fetched> {
        let addr = self.describe();
        let v = self.conn.require_version(ApiKey::Fetch)?.min(12); // topics named, not ids
        let req = FetchRequest {
            replica_id: -1,
            max_wait_ms,
            min_bytes: 1,
            max_bytes,
            isolation_level: 0,
            topics: vec![(
                self.tp.topic.clone(),
                vec![FetchPartition {
                    partition: self.tp.partition,
                    current_leader_epoch: -1,
                    fetch_offset: offset,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: max_bytes,
                }],
            )],
            topic_ids: BTreeMap::new(),
            session_id: 0,
            session_epoch: crate::protocol::fetch::SESSIONLESS,
            forgotten: Vec::new(),
        };
        let body = self.conn.send(ApiKey::Fetch, v, Duration::ZERO, |w| {
            fetch::encode_request(w, v, &req)
        })?;
        let resp = fetch::decode_response(body, v)
            .with_context(|| format!("{addr}: bad Fetch v{v} response"))?;
        if !resp.error.is_ok() {
            bail!("{addr}: Fetch of {} failed with {}", self.tp, resp.error);
        }
        let p = resp
            .topics
            .iter()
            .filter(|(t, _)| *t == self.tp.topic)
            .flat_map(|(_, ps)| ps.iter())
            .find(|p| p.partition == self.tp.partition)
            .with_context(|| format!("{addr}: Fetch response lacks {}", self.tp))?;
        Ok(Fetched {
            error: p.error,
            high_watermark: p.high_watermark,
            records: p.records.to_vec(),
        })
    }

    /// A Fetch at `offset` of the configured `partition_max_bytes`; a partition error is an
    /// error naming it.
    pub fn records(&mut self, offset: i64) -> Result<Vec<u8>> {
        let f = self.fetch(offset, self.max_bytes)?;
        if f.error == ErrorCode::OFFSET_OUT_OF_RANGE {
            bail!(
                "{}: offset {offset} of {} is out of range on the leader (it no longer has it, or not yet)",
                self.describe(),
                self.tp
            );
        }
        if !f.error.is_ok() {
            bail!(
                "{}: Fetch of {} at offset {offset} failed with {}",
                self.describe(),
                self.tp,
                f.error
            );
        }
        Ok(f.records)
    }
}

impl BatchSource for PartitionLeader<'_> {
    fn records_from(&mut self, offset: i64) -> Result<Vec<u8>> {
        self.records(offset)
    }

    fn describe(&self) -> String {
        self.conn.name().to_string()
    }
}
