//! The admin, group and transaction requests an archive of a cluster and a restore into
//! another send: one blocking call each over a [`BrokerConnection`], at the version the
//! connection negotiated. The wire formats are `protocol`'s; here each answer becomes a typed
//! result, and each error names the broker, the API, the topic or group, and Kafka's name for
//! the error ([`AdminError`]).
//!
//! Where each goes: DescribeConfigs, IncrementalAlterConfigs, CreateTopics and InitProducerId
//! without a transactional id to any broker; ListGroups to every broker (each lists the groups it coordinates);
//! OffsetFetch and OffsetCommit to the group's coordinator, and InitProducerId with a
//! transactional id to its coordinator ([`find_coordinator`]); DescribeProducers and
//! WriteTxnMarkers to the partition's leader.

use super::connection::BrokerConnection;
use super::error::{ConnectionError, FailedContext};
use crate::protocol::admin::RESOURCE_TOPIC;
use crate::protocol::codec::{DecodeResult, Writer};
use crate::protocol::error::ErrorCode;
use crate::protocol::find_coordinator::CoordinatorAnswer;
use crate::protocol::incremental_alter_configs::AlteredResource;
use crate::protocol::offset_fetch::GroupOffsets;
use crate::protocol::{
    ApiKey, create_topics, describe_configs, describe_producers, find_coordinator,
    incremental_alter_configs, init_producer_id, list_groups, offset_commit, offset_fetch,
    write_txn_markers,
};
use std::time::Duration;

pub use crate::protocol::create_topics::{CreatedTopic, NewTopic};
pub use crate::protocol::describe_configs::{ConfigEntry, SOURCE_DYNAMIC_TOPIC, TopicConfigs};
pub use crate::protocol::describe_producers::{PartitionProducers, ProducerState};
pub use crate::protocol::find_coordinator::Coordinator;
pub use crate::protocol::group::{KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION};
pub use crate::protocol::list_groups::ListedGroup;
pub use crate::protocol::offset_commit::CommittedOffset;
pub use crate::protocol::write_txn_markers::TxnMarker;

/// Why an admin call failed, as its caller branches on it.
#[derive(Debug)]
pub enum AdminError {
    /// The request did not get a usable answer: the connection failed, the broker shares no
    /// version of the API with us, or its answer could not be decoded.
    Connection(ConnectionError),
    /// The broker answered with an error: its code (COORDINATOR_NOT_AVAILABLE,
    /// COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR mean: find the coordinator again and
    /// retry) and a message naming the broker, the API and what was asked.
    Kafka(ErrorCode, String),
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::Connection(e) if f.alternate() => write!(f, "{e:#}"),
            AdminError::Connection(e) => write!(f, "{e}"),
            AdminError::Kafka(_, message) => f.write_str(message),
        }
    }
}

impl std::error::Error for AdminError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdminError::Connection(e) => Some(e),
            AdminError::Kafka(..) => None,
        }
    }
}

impl From<ConnectionError> for AdminError {
    fn from(e: ConnectionError) -> Self {
        AdminError::Connection(e)
    }
}

pub type Result<T> = std::result::Result<T, AdminError>;

/// The broker's `error` about `what` (``for group `g` ``), with its message when it sent one.
fn kafka(
    broker: &str,
    api: ApiKey,
    what: &str,
    error: ErrorCode,
    message: Option<&str>,
) -> AdminError {
    let detail = message
        .filter(|m| !m.is_empty())
        .map_or_else(String::new, |m| format!(": {m}"));
    AdminError::Kafka(
        error,
        format!("{broker}: {} {what}: {error}{detail}", api.name()),
    )
}

/// Sends one request of `api` at the negotiated version (`encode` gets it), waits `extra_wait`
/// longer than the request timeout for the answer, and decodes it.
fn call<T>(
    conn: &mut BrokerConnection,
    api: ApiKey,
    extra_wait: Duration,
    encode: impl FnOnce(&mut Writer, i16),
    decode: impl FnOnce(&[u8], i16) -> DecodeResult<T>,
) -> std::result::Result<T, ConnectionError> {
    let v = conn.require_version(api)?;
    let name = conn.name().to_string();
    let body = conn.send(api, v, extra_wait, |w| encode(w, v))?;
    decode(body, v).failed_with(|| format!("{name}: bad {} v{v} response", api.name()))
}

/// The configs of each of `topics`; a topic the broker could not describe carries its error.
pub fn describe_topic_configs(
    conn: &mut BrokerConnection,
    topics: &[String],
) -> Result<Vec<TopicConfigs>> {
    let api = ApiKey::DescribeConfigs;
    let encode = |w: &mut Writer, v| describe_configs::encode_request(w, v, topics);
    Ok(call(
        conn,
        api,
        Duration::ZERO,
        encode,
        describe_configs::decode_response,
    )?)
}

/// The outcome for `topic` among an IncrementalAlterConfigs response's answers.
fn altered_topic(broker: &str, topic: &str, answers: Vec<AlteredResource>) -> Result<()> {
    let api = ApiKey::IncrementalAlterConfigs;
    let what = format!("for topic `{topic}`");
    let answer = answers
        .into_iter()
        .find(|a| a.resource_type == RESOURCE_TOPIC && a.name == topic)
        .failed_with(|| format!("{broker}: {} response lacks an answer {what}", api.name()))?;
    if !answer.error.is_ok() {
        return Err(kafka(
            broker,
            api,
            &what,
            answer.error,
            answer.message.as_deref(),
        ));
    }
    Ok(())
}

/// Changes `topic`'s configs one by one and leaves the others as they are: `Some(value)` sets
/// a config on the topic, `None` deletes it from the topic (back to the broker's or Kafka's
/// default).
pub fn alter_topic_configs(
    conn: &mut BrokerConnection,
    topic: &str,
    changes: &[(String, Option<String>)],
) -> Result<()> {
    let api = ApiKey::IncrementalAlterConfigs;
    let encode =
        |w: &mut Writer, v| incremental_alter_configs::encode_request(w, v, topic, changes);
    let answers = call(
        conn,
        api,
        Duration::ZERO,
        encode,
        incremental_alter_configs::decode_response,
    )?;
    altered_topic(conn.name(), topic, answers)
}

/// How messages name a FindCoordinator key.
fn key_name(key_type: i8, key: &str) -> String {
    match key_type {
        KEY_TYPE_GROUP => format!("for group `{key}`"),
        KEY_TYPE_TRANSACTION => format!("for transactional id `{key}`"),
        _ => format!("for key `{key}` of type {key_type}"),
    }
}

/// The coordinator of `key` among a FindCoordinator response's answers.
fn coordinator_of(
    broker: &str,
    key_type: i8,
    key: &str,
    answers: Vec<CoordinatorAnswer>,
) -> Result<Coordinator> {
    let api = ApiKey::FindCoordinator;
    let what = key_name(key_type, key);
    let answer = answers
        .into_iter()
        .find(|a| a.key.as_deref().is_none_or(|k| k == key))
        .failed_with(|| format!("{broker}: FindCoordinator response lacks an answer {what}"))?;
    if !answer.error.is_ok() {
        return Err(kafka(
            broker,
            api,
            &what,
            answer.error,
            answer.message.as_deref(),
        ));
    }
    Ok(answer.coordinator)
}

/// The broker coordinating `key`: a group ([`KEY_TYPE_GROUP`]) or a transactional id
/// ([`KEY_TYPE_TRANSACTION`]). COORDINATOR_NOT_AVAILABLE (a new group's coordinator is still
/// loading, or a broker is down) comes back as [`AdminError::Kafka`], to retry.
pub fn find_coordinator(
    conn: &mut BrokerConnection,
    key_type: i8,
    key: &str,
) -> Result<Coordinator> {
    let api = ApiKey::FindCoordinator;
    let encode = |w: &mut Writer, v| find_coordinator::encode_request(w, v, key_type, key);
    let answers = call(
        conn,
        api,
        Duration::ZERO,
        encode,
        find_coordinator::decode_response,
    )?;
    coordinator_of(conn.name(), key_type, key, answers)
}

/// The groups this broker coordinates (ask every broker for all of a cluster's).
pub fn list_groups(conn: &mut BrokerConnection) -> Result<Vec<ListedGroup>> {
    let api = ApiKey::ListGroups;
    let (error, groups) = call(
        conn,
        api,
        Duration::ZERO,
        list_groups::encode_request,
        list_groups::decode_response,
    )?;
    if !error.is_ok() {
        return Err(kafka(conn.name(), api, "of this broker", error, None));
    }
    Ok(groups)
}

/// The committed offsets of `group` in an OffsetFetch response's answers, partitions with
/// none left out.
fn committed_offsets(
    broker: &str,
    group: &str,
    answers: Vec<GroupOffsets>,
) -> Result<Vec<CommittedOffset>> {
    let api = ApiKey::OffsetFetch;
    let what = format!("for group `{group}`");
    let answer = answers
        .into_iter()
        .find(|a| a.group.as_deref().is_none_or(|g| g == group))
        .failed_with(|| format!("{broker}: OffsetFetch response lacks an answer {what}"))?;
    if !answer.error.is_ok() {
        return Err(kafka(broker, api, &what, answer.error, None));
    }
    let mut out = Vec::with_capacity(answer.partitions.len());
    for (offset, error) in answer.partitions {
        if !error.is_ok() {
            let at = format!("{what}, partition {}-{}", offset.topic, offset.partition);
            return Err(kafka(broker, api, &at, error, None));
        }
        if offset.offset != -1 {
            out.push(offset);
        }
    }
    Ok(out)
}

/// Every offset `group` has committed (send it to the group's coordinator), with the leader
/// epoch and metadata committed with it.
pub fn offset_fetch(conn: &mut BrokerConnection, group: &str) -> Result<Vec<CommittedOffset>> {
    let api = ApiKey::OffsetFetch;
    let encode = |w: &mut Writer, v| offset_fetch::encode_request(w, v, group);
    let answers = call(
        conn,
        api,
        Duration::ZERO,
        encode,
        offset_fetch::decode_response,
    )?;
    committed_offsets(conn.name(), group, answers)
}

/// Commits `offsets` for `group` (send it to the group's coordinator) as a client outside the
/// group does, which the coordinator accepts only while the group has no members; returns
/// each partition's (topic, partition, error).
pub fn offset_commit(
    conn: &mut BrokerConnection,
    group: &str,
    offsets: &[CommittedOffset],
) -> Result<Vec<(String, i32, ErrorCode)>> {
    let api = ApiKey::OffsetCommit;
    let encode = |w: &mut Writer, v| offset_commit::encode_request(w, v, group, offsets);
    Ok(call(
        conn,
        api,
        Duration::ZERO,
        encode,
        offset_commit::decode_response,
    )?)
}

/// Creates `topics` (or, with `validate_only`, checks that they could be), waiting up to
/// `timeout_ms` for the controller; each topic carries its error, and its id (v7+).
pub fn create_topics(
    conn: &mut BrokerConnection,
    topics: &[NewTopic],
    timeout_ms: i32,
    validate_only: bool,
) -> Result<Vec<CreatedTopic>> {
    let api = ApiKey::CreateTopics;
    let wait = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let encode =
        |w: &mut Writer, v| create_topics::encode_request(w, v, topics, timeout_ms, validate_only);
    Ok(call(
        conn,
        api,
        wait,
        encode,
        create_topics::decode_response,
    )?)
}

/// A producer id and epoch: for an idempotent producer (`None`, any broker), or for a
/// transactional id (send it to the id's coordinator), whose open transaction, if any, the
/// coordinator aborts first.
pub fn init_producer_id(
    conn: &mut BrokerConnection,
    transactional_id: Option<&str>,
    timeout_ms: i32,
) -> Result<(i64, i16)> {
    let api = ApiKey::InitProducerId;
    let encode =
        |w: &mut Writer, v| init_producer_id::encode_request(w, v, transactional_id, timeout_ms);
    let answer = call(
        conn,
        api,
        Duration::ZERO,
        encode,
        init_producer_id::decode_response,
    )?;
    if !answer.error.is_ok() {
        let what = match transactional_id {
            Some(id) => key_name(KEY_TYPE_TRANSACTION, id),
            None => "for an idempotent producer".to_string(),
        };
        return Err(kafka(conn.name(), api, &what, answer.error, None));
    }
    Ok((answer.producer_id, answer.producer_epoch))
}

/// The producers the leader of `topic`'s `partitions` holds state for (send it to the
/// leader); a partition it could not describe carries its error.
pub fn describe_producers(
    conn: &mut BrokerConnection,
    topic: &str,
    partitions: &[i32],
) -> Result<Vec<PartitionProducers>> {
    let api = ApiKey::DescribeProducers;
    let asked = [(topic.to_string(), partitions.to_vec())];
    let encode = |w: &mut Writer, _| describe_producers::encode_request(w, &asked);
    let decode = |body: &[u8], _| describe_producers::decode_response(body);
    let topics = call(conn, api, Duration::ZERO, encode, decode)?;
    Ok(topics
        .into_iter()
        .filter(|(t, _)| t == topic)
        .flat_map(|(_, parts)| parts)
        .collect())
}

/// Writes `markers` (send them to the partitions' leader); returns each partition's (producer
/// id, topic, partition, error).
pub fn write_txn_markers(
    conn: &mut BrokerConnection,
    markers: &[TxnMarker],
) -> Result<Vec<(i64, String, i32, ErrorCode)>> {
    let api = ApiKey::WriteTxnMarkers;
    let encode = |w: &mut Writer, _| write_txn_markers::encode_request(w, markers);
    let decode = |body: &[u8], _| write_txn_markers::decode_response(body);
    Ok(call(conn, api, Duration::ZERO, encode, decode)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BROKER: &str = "broker 2 (h:9092)";

    fn answer(key: Option<&str>, error: ErrorCode, message: Option<&str>) -> CoordinatorAnswer {
        CoordinatorAnswer {
            key: key.map(String::from),
            error,
            message: message.map(String::from),
            coordinator: Coordinator {
                node_id: 3,
                host: "c".into(),
                port: 9093,
            },
        }
    }

    #[test]
    fn a_coordinator_is_the_answer_for_the_key_asked_and_its_error_keeps_its_code() {
        let found = |answers| coordinator_of(BROKER, KEY_TYPE_GROUP, "g", answers);
        let c = found(vec![answer(None, ErrorCode::NONE, None)]).unwrap();
        assert_eq!((c.node_id, c.host.as_str(), c.port), (3, "c", 9093));
        let other = answer(Some("h"), ErrorCode::NOT_COORDINATOR, None);
        let c = found(vec![other, answer(Some("g"), ErrorCode::NONE, None)]).unwrap();
        assert_eq!(c.node_id, 3);
        let e = ErrorCode::COORDINATOR_NOT_AVAILABLE;
        let err = found(vec![answer(Some("g"), e, Some("loading"))]).unwrap_err();
        assert!(
            matches!(err, AdminError::Kafka(code, _) if code == e),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "broker 2 (h:9092): FindCoordinator for group `g`: COORDINATOR_NOT_AVAILABLE (15): loading"
        );
        let err = coordinator_of(BROKER, KEY_TYPE_TRANSACTION, "tx", Vec::new()).unwrap_err();
        assert!(matches!(err, AdminError::Connection(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "broker 2 (h:9092): FindCoordinator response lacks an answer for transactional id `tx`"
        );
    }

    fn offset(partition: i32, offset: i64) -> CommittedOffset {
        CommittedOffset {
            topic: "t".into(),
            partition,
            offset,
            leader_epoch: 1,
            metadata: Some("m".into()),
        }
    }

    #[test]
    fn committed_offsets_leave_out_partitions_without_one_and_surface_every_error() {
        let group = |error, partitions| GroupOffsets {
            group: Some("g".into()),
            error,
            partitions,
        };
        let none = ErrorCode::NONE;
        let got = committed_offsets(
            BROKER,
            "g",
            vec![group(
                none,
                vec![(offset(0, 5), none), (offset(1, -1), none)],
            )],
        )
        .unwrap();
        assert_eq!(got, [offset(0, 5)]);
        let e = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        let err = committed_offsets(BROKER, "g", vec![group(e, Vec::new())]).unwrap_err();
        assert!(matches!(err, AdminError::Kafka(code, _) if code == e));
        assert_eq!(
            err.to_string(),
            "broker 2 (h:9092): OffsetFetch for group `g`: GROUP_AUTHORIZATION_FAILED (30)"
        );
        let e = ErrorCode(88);
        let partitions = vec![(offset(0, 5), none), (offset(1, 7), e)];
        let err = committed_offsets(BROKER, "g", vec![group(none, partitions)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "broker 2 (h:9092): OffsetFetch for group `g`, partition t-1: UNSTABLE_OFFSET_COMMIT (88)"
        );
        let err = committed_offsets(BROKER, "other", vec![group(none, Vec::new())]).unwrap_err();
        assert!(matches!(err, AdminError::Connection(_)), "{err:?}");
    }

    #[test]
    fn an_altered_topic_is_the_answer_for_its_name_and_its_error_keeps_its_code() {
        let answer = |resource_type, name: &str, error, message: Option<&str>| AlteredResource {
            resource_type,
            name: name.into(),
            error,
            message: message.map(String::from),
        };
        let none = ErrorCode::NONE;
        let e = ErrorCode(40);
        let answers = vec![
            answer(4, "t", e, None),
            answer(RESOURCE_TOPIC, "u", e, None),
            answer(RESOURCE_TOPIC, "t", none, None),
        ];
        altered_topic(BROKER, "t", answers).unwrap();
        let refused = vec![answer(RESOURCE_TOPIC, "t", e, Some("bad value"))];
        let err = altered_topic(BROKER, "t", refused).unwrap_err();
        assert!(
            matches!(err, AdminError::Kafka(code, _) if code == e),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "broker 2 (h:9092): IncrementalAlterConfigs for topic `t`: INVALID_CONFIG (40): bad value"
        );
        let err = altered_topic(BROKER, "t", vec![answer(4, "t", none, None)]).unwrap_err();
        assert!(matches!(err, AdminError::Connection(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "broker 2 (h:9092): IncrementalAlterConfigs response lacks an answer for topic `t`"
        );
    }
}
