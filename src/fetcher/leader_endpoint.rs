//! The leader seam (Kafka's `LeaderEndPoint`): everything the fetch loop asks of the leader,
//! and what it answers. The real one is [`super::broker_endpoint::BrokerEndPoint`]; tests
//! put a scripted leader here.

use crate::checkpoint::TopicPartition;
use crate::client::ConnectionError;
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{FetchRequest, FetchResponse};
use crate::protocol::uuid::Uuid;
use std::collections::BTreeMap;

/// can send (and later receive) the next request meanwhile; then it goes back with
/// [`LeaderEndPoint::recycle`] and its buffer is reused.
#[derive(Debug)]
pub struct FetchFrame {
    pub buf: Vec<u8>,
    /// Where the response body lies in `buf`.
    pub body: std::ops::Range<usize>,
    pub version: i16,
    /// topic id → name, for a v13+ response (which names topics only by id).
    pub topic_names: BTreeMap<Uuid, String>,
}

impl FetchFrame {
    pub fn decode(&self) -> anyhow::Result<FetchResponse<'_>> {
        Ok(crate::protocol::fetch::decode_response_named(
            self.buf.get(self.body.clone()).unwrap_or_default(),
            self.version,
            &self.topic_names,
        )?)
    }
}

/// The leader side of the loop (Kafka's `LeaderEndPoint`). Its failures say what failed
/// ([`crate::client::ConnectionErrorKind`]); one of kind `IdentityMismatch` refuses a broker
/// that is not the source of the local logs (another cluster id): the loop hands every
/// partition back instead of retrying.
pub trait LeaderEndPoint: Send {
    fn describe(&self) -> String;
    /// Sends a Fetch request without waiting for its response; responses come back in the
    /// order requests were sent.
    fn send_fetch(&mut self, req: &FetchRequest) -> Result<(), ConnectionError>;
    /// Receives the response to the oldest Fetch sent.
    fn receive_fetch(&mut self) -> Result<FetchFrame, ConnectionError>;
    /// Hands a processed frame's buffer back for reuse.
    fn recycle(&mut self, frame: FetchFrame);
    fn fetch_earliest_offset(
        &mut self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
    ) -> Result<Result<i64, ErrorCode>, ConnectionError>;
    fn fetch_latest_offset(
        &mut self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
    ) -> Result<Result<i64, ErrorCode>, ConnectionError>;
    /// OffsetForLeaderEpoch: the leader's (epoch, end offset) for `epoch`; `Ok(None)` when the
    /// leader does not offer the API.
    fn fetch_epoch_end_offset(
        &mut self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
        epoch: i32,
    ) -> Result<Option<(ErrorCode, i32, i64)>, ConnectionError>;
    /// Whether Fetch responses report diverging epochs (Fetch v12+).
    fn supports_diverging_epoch(&mut self) -> Result<bool, ConnectionError>;
    /// The cluster id and the topic's id as this leader reports them (each `None` when it
    /// reports none), asked before a truncation: a re-created topic or another cluster behind
    /// the same address must never truncate the history of the old one.
    fn identity(&mut self, topic: &str) -> Result<Identity, ConnectionError>;
    /// Drops the connection; the next call reconnects.
    fn close(&mut self);
}

/// Which cluster and topic a log belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: Option<String>,
    pub topic_id: Option<crate::protocol::uuid::Uuid>,
}

impl Identity {
    /// Why `leader` cannot be the source of `local`, if it cannot (only ids both sides know
    /// are compared).
    pub fn mismatch(local: &Identity, leader: &Identity) -> Option<String> {
        if let (Some(a), Some(b)) = (&local.cluster_id, &leader.cluster_id)
            && a != b
        {
            return Some(format!(
                "the leader reports cluster id {b}, the local log belongs to cluster {a}"
            ));
        }
        if let (Some(a), Some(b)) = (local.topic_id, leader.topic_id)
            && a != b
        {
            return Some(format!(
                "the leader reports topic id {b}, the local log has topic id {a}"
            ));
        }
        None
    }
}
