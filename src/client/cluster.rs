//! The cluster as a follower sees it: brokers, and for each partition its leader and epoch.
//! Also the request helpers that carry partition lists: ListOffsets and OffsetForLeaderEpoch.

use super::connection::{BrokerConnection, DEFAULT_REQUEST_TIMEOUT};
use super::error::{ConnectionError, FailedContext, fail};
use crate::protocol::TopicPartition;
use crate::protocol::error::ErrorCode;
use crate::protocol::list_offsets::{self, ListOffsetsPartition};
use crate::protocol::offset_for_leader_epoch::{self, EpochEndOffset, EpochRequest};
use crate::protocol::uuid::Uuid;
use crate::protocol::{ApiKey, metadata};
use crate::security::ClientSecurity;
use anyhow::Result;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLeader {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub error: ErrorCode,
}

#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    /// node id → `host:port`
    pub brokers: HashMap<i32, String>,
    /// topic → (error, partition → leader)
    pub topics: BTreeMap<String, (ErrorCode, BTreeMap<i32, PartitionLeader>)>,
    /// The cluster id the broker reported (Metadata v2+); `None` when it reported none.
    pub cluster_id: Option<String>,
    /// topic → topic id (Metadata v10+); topics without one (zero UUID) are absent.
    pub topic_ids: BTreeMap<String, Uuid>,
    /// Each partition's replicas, the leader among them.
    pub replicas: BTreeMap<TopicPartition, Vec<i32>>,
}

impl ClusterMetadata {
    pub fn leader(&self, tp: &TopicPartition) -> Option<PartitionLeader> {
        self.topics.get(&tp.topic)?.1.get(&tp.partition).copied()
    }

    pub fn broker_addr(&self, id: i32) -> Option<&str> {
        self.brokers.get(&id).map(String::as_str)
    }
}

/// Asks `conn` for the metadata of `topics`.
pub fn fetch_metadata(
    conn: &mut BrokerConnection,
    topics: &[String],
) -> Result<ClusterMetadata, ConnectionError> {
    let v = conn.require_version(ApiKey::Metadata)?;
    let name = conn.name().to_string();
    let body = conn.send(ApiKey::Metadata, v, Duration::ZERO, |w| {
        metadata::encode_request(w, v, topics)
    })?;
    let resp = metadata::decode_response(body, v)
        .failed_with(|| format!("{name}: bad Metadata v{v} response"))?;
    let mut out = ClusterMetadata {
        cluster_id: resp.cluster_id.filter(|c| !c.is_empty()),
        ..ClusterMetadata::default()
    };
    for b in resp.brokers {
        out.brokers
            .insert(b.node_id, format!("{}:{}", b.host, b.port));
    }
    for t in resp.topics {
        for p in &t.partitions {
            out.replicas.insert(
                TopicPartition::new(&t.name, p.partition),
                p.replicas.clone(),
            );
        }
        let parts = t
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition,
                    PartitionLeader {
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                        error: p.error,
                    },
                )
            })
            .collect();
        let id = Uuid(t.topic_id);
        if !id.is_zero() {
            out.topic_ids.insert(t.name.clone(), id);
        }
        out.topics.insert(t.name, (t.error, parts));
    }
    Ok(out)
}

/// Tries each address in turn, over plain TCP, until one answers a Metadata request.
pub fn bootstrap_metadata(
    addrs: &[String],
    client_id: &str,
    topics: &[String],
) -> Result<ClusterMetadata> {
    Ok(bootstrap_metadata_within(
        addrs,
        &ClientSecurity::PLAINTEXT,
        client_id,
        topics,
        DEFAULT_REQUEST_TIMEOUT,
    )?)
}

/// Every bootstrap broker failed: each one's error, in the order tried (callers tell
/// security refusals from unreachable brokers by them).
#[derive(Debug)]
pub struct NoBrokerAnswered {
    pub errors: Vec<ConnectionError>,
}

impl std::fmt::Display for NoBrokerAnswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let each: Vec<String> = self.errors.iter().map(|e| format!("{e:#}")).collect();
        write!(
            f,
            "no broker answered a Metadata request: {}",
            each.join("; ")
        )
    }
}

impl std::error::Error for NoBrokerAnswered {}

impl NoBrokerAnswered {
    /// How many refused our security settings (see
    /// [`super::ConnectionErrorKind::is_refusal`]) rather than being unreachable or failing
    /// otherwise.
    pub fn refused(&self) -> usize {
        self.errors.iter().filter(|e| e.kind().is_refusal()).count()
    }
}

/// Why a metadata refresh failed, as its callers branch on it.
#[derive(Debug)]
pub enum MetadataError {
    /// Every broker tried failed; whether some refused our security settings says whether
    /// an operator is needed.
    NoBrokerAnswered(NoBrokerAnswered),
    /// Anything else: shutting down, an answer that could not be used.
    Failed(anyhow::Error),
}

impl MetadataError {
    /// The `error` label a failed refresh is counted under (see
    /// [`crate::live::METADATA_ERROR_KINDS`]): a broker refused our TLS or SASL settings, no
    /// broker answered, or the answer could not be used.
    pub fn kind(&self) -> &'static str {
        match self {
            MetadataError::NoBrokerAnswered(none) if none.refused() > 0 => "refused",
            MetadataError::NoBrokerAnswered(_) => "unreachable",
            MetadataError::Failed(_) => "failed",
        }
    }
}

impl std::fmt::Display for MetadataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetadataError::NoBrokerAnswered(none) => none.fmt(f),
            MetadataError::Failed(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for MetadataError {}

impl From<anyhow::Error> for MetadataError {
    fn from(e: anyhow::Error) -> Self {
        MetadataError::Failed(e)
    }
}

/// [`bootstrap_metadata`] over `security`, with `request_timeout` as the deadline of every
/// response (the connection's TLS and version handshakes included).
pub fn bootstrap_metadata_within(
    addrs: &[String],
    security: &ClientSecurity,
    client_id: &str,
    topics: &[String],
    request_timeout: Duration,
) -> Result<ClusterMetadata, NoBrokerAnswered> {
    let mut errors = Vec::new();
    for a in addrs {
        match BrokerConnection::connect_secured(
            a,
            &format!("broker {a}"),
            security,
            client_id,
            64 << 20,
            request_timeout,
            |_| {},
        )
        .and_then(|mut c| fetch_metadata(&mut c, topics))
        {
            Ok(m) => return Ok(m),
            Err(e) => errors.push(e),
        }
    }
    Err(NoBrokerAnswered { errors })
}

/// One partition's ListOffsets answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAnswer {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

/// ListOffsets for one partition: `timestamp` -2 earliest, -1 latest, or ms. A broker error
/// code comes back as `Err(code)` inside `Ok`, so callers can branch on it.
pub fn list_offset(
    conn: &mut BrokerConnection,
    isolation_level: i8,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    timestamp: i64,
) -> Result<Result<OffsetAnswer, ErrorCode>, ConnectionError> {
    let mut answers = list_offsets(
        conn,
        isolation_level,
        &[(tp.clone(), current_leader_epoch, timestamp)],
    )?;
    answers
        .remove(tp)
        .failed_with(|| format!("{}: ListOffsets response lacks {tp}", conn.name()))
}

/// ListOffsets for many partitions in one request: (partition, current leader epoch,
/// timestamp) each. Partitions the response leaves out are absent from the map.
pub fn list_offsets(
    conn: &mut BrokerConnection,
    isolation_level: i8,
    asks: &[(TopicPartition, i32, i64)],
) -> Result<BTreeMap<TopicPartition, Result<OffsetAnswer, ErrorCode>>, ConnectionError> {
    let v = conn.require_version(ApiKey::ListOffsets)?;
    let name = conn.name().to_string();
    let mut req: Vec<(String, Vec<ListOffsetsPartition>)> = Vec::new();
    for (tp, current_leader_epoch, timestamp) in asks {
        let p = ListOffsetsPartition {
            partition: tp.partition,
            current_leader_epoch: *current_leader_epoch,
            timestamp: *timestamp,
        };
        match req.iter_mut().find(|(t, _)| *t == tp.topic) {
            Some((_, ps)) => ps.push(p),
            None => req.push((tp.topic.clone(), vec![p])),
        }
    }
    let body = conn.send(ApiKey::ListOffsets, v, Duration::ZERO, |w| {
        list_offsets::encode_request(w, v, isolation_level, &req)
    })?;
    let resp = list_offsets::decode_response(body, v)
        .failed_with(|| format!("{name}: bad ListOffsets v{v} response"))?;
    let mut out = BTreeMap::new();
    for (topic, parts) in resp {
        for p in parts {
            let answer = if p.error.is_ok() {
                Ok(OffsetAnswer {
                    offset: p.offset,
                    timestamp: p.timestamp,
                    leader_epoch: p.leader_epoch,
                })
            } else {
                Err(p.error)
            };
            out.insert(TopicPartition::new(topic.clone(), p.partition), answer);
        }
    }
    Ok(out)
}

/// OffsetForLeaderEpoch for one partition; `Ok(None)` when the broker does not offer the API.
pub fn epoch_end_offset(
    conn: &mut BrokerConnection,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    epoch: i32,
) -> Result<Option<EpochEndOffset>, ConnectionError> {
    let Some(v) = conn.version(ApiKey::OffsetForLeaderEpoch) else {
        return Ok(None);
    };
    let name = conn.name().to_string();
    let req = vec![(
        tp.topic.clone(),
        vec![EpochRequest {
            partition: tp.partition,
            current_leader_epoch,
            leader_epoch: epoch,
        }],
    )];
    let body = conn.send(ApiKey::OffsetForLeaderEpoch, v, Duration::ZERO, |w| {
        offset_for_leader_epoch::encode_request(w, v, &req)
    })?;
    let resp = offset_for_leader_epoch::decode_response(body, v)
        .failed_with(|| format!("{name}: bad OffsetForLeaderEpoch v{v} response"))?;
    let Some(p) = resp
        .into_iter()
        .filter(|(t, _)| *t == tp.topic)
        .flat_map(|(_, ps)| ps.into_iter())
        .find(|p| p.partition == tp.partition)
    else {
        fail!("{name}: OffsetForLeaderEpoch response lacks {tp}");
    };
    Ok(Some(p))
}
