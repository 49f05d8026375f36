//! The Kafka wire protocol: primitives ([`codec`]), error codes ([`error`]), request and
//! response headers (here), and one module per API the client sends ([`ApiKey`]) — plus, for
//! the serve listener, the error answers to the APIs a read-only broker refuses
//! ([`RefusedApi`]: [`produce`], [`group`], [`admin`]).
//!
//! Framing: every message is an INT32 size, then a header and a body. Request header v1 =
//! api_key INT16, api_version INT16, correlation_id INT32, client_id NULLABLE_STRING; v2 adds a
//! tagged-field section (flexible versions). Response header v0 = correlation_id; v1 adds tags.
//! ApiVersions responses always use header v0.
//!
//! Encoders only write what the version has; decoders take `&[u8]` and return a
//! [`codec::DecodeError`] naming the field on any malformed input, never panic.

pub mod admin;
pub mod api_versions;
pub mod codec;
pub mod create_topics;
pub mod describe_configs;
pub mod describe_producers;
pub mod error;
pub mod fetch;
pub mod find_coordinator;
pub mod group;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl;
pub mod uuid;
pub mod write_txn_markers;

#[cfg(test)]
mod fuzz_tests;

use codec::{DecodeResult, Reader, Writer};

/// A topic-partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
    /// The partition directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
    /// Parses a partition directory name, splitting at the last `-`.
    pub fn parse_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, p) = name.rsplit_once('-')?;
        if topic.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(TopicPartition::new(topic, p.parse().ok()?))
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The APIs this crate sends as a client, with the versions this code can encode and decode,
/// and the first flexible version of each: the follower's (the serve listener answers them
/// too), and the admin, group and transaction APIs an archive and a restore send. Each range
/// is one that Apache Kafka 3.9 and 4.x both serve (4.0 dropped old versions, KIP-896).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApiKey {
    Fetch,
    ListOffsets,
    Metadata,
    OffsetForLeaderEpoch,
    ApiVersions,
    SaslHandshake,
    SaslAuthenticate,
    OffsetCommit,
    OffsetFetch,
    FindCoordinator,
    ListGroups,
    CreateTopics,
    InitProducerId,
    WriteTxnMarkers,
    DescribeConfigs,
    IncrementalAlterConfigs,
    DescribeProducers,
}

impl ApiKey {
    pub const ALL: [ApiKey; 17] = [
        ApiKey::Fetch,
        ApiKey::ListOffsets,
        ApiKey::Metadata,
        ApiKey::OffsetForLeaderEpoch,
        ApiKey::ApiVersions,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
        ApiKey::OffsetCommit,
        ApiKey::OffsetFetch,
        ApiKey::FindCoordinator,
        ApiKey::ListGroups,
        ApiKey::CreateTopics,
        ApiKey::InitProducerId,
        ApiKey::WriteTxnMarkers,
        ApiKey::DescribeConfigs,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::DescribeProducers,
    ];

    /// (key, min version, max version, first flexible version, name).
    fn spec(self) -> (i16, i16, i16, i16, &'static str) {
        match self {
            // v13 identifies topics by id only: a request goes at v13 when every topic's id is
            // known, else at v12, the last version naming them (every broker offering v13
            // still offers v12).
            ApiKey::Fetch => (1, 4, 13, 12, "Fetch"),
            ApiKey::ListOffsets => (2, 1, 7, 6, "ListOffsets"),
            ApiKey::Metadata => (3, 1, 12, 9, "Metadata"),
            ApiKey::ApiVersions => (18, 0, 3, 3, "ApiVersions"),
            ApiKey::OffsetForLeaderEpoch => (23, 2, 4, 4, "OffsetForLeaderEpoch"),
            // v1 wraps each token in SaslAuthenticate; v0's bare tokens are not sent. No
            // version of SaslHandshake is flexible.
            ApiKey::SaslHandshake => (17, 1, 1, i16::MAX, "SaslHandshake"),
            ApiKey::SaslAuthenticate => (36, 0, 2, 2, "SaslAuthenticate"),
            // Kafka 4 serves v2+; v10 names topics by id only.
            ApiKey::OffsetCommit => (8, 2, 9, 8, "OffsetCommit"),
            // v2+ take a null topic list (every partition of the group); v10 names topics by
            // id only.
            ApiKey::OffsetFetch => (9, 2, 9, 6, "OffsetFetch"),
            // v1 adds the key type (a transactional id's coordinator).
            ApiKey::FindCoordinator => (10, 1, 6, 3, "FindCoordinator"),
            ApiKey::ListGroups => (16, 0, 5, 3, "ListGroups"),
            // Kafka 4 serves v2+.
            ApiKey::CreateTopics => (19, 2, 7, 5, "CreateTopics"),
            // v6 (two-phase commit, KIP-939) is not stable in Kafka 4.
            ApiKey::InitProducerId => (22, 0, 5, 2, "InitProducerId"),
            // Kafka 4 serves v1+, Kafka 3.9 up to v1.
            ApiKey::WriteTxnMarkers => (27, 1, 1, 1, "WriteTxnMarkers"),
            // Kafka 4 serves v1+ (v1 adds each config's source).
            ApiKey::DescribeConfigs => (32, 1, 4, 4, "DescribeConfigs"),
            // Kafka 3.9 and 4 serve v0–1.
            ApiKey::IncrementalAlterConfigs => (44, 0, 1, 1, "IncrementalAlterConfigs"),
            ApiKey::DescribeProducers => (61, 0, 0, 0, "DescribeProducers"),
        }
    }

    pub fn key(self) -> i16 {
        self.spec().0
    }

    /// Versions this implementation supports, inclusive.
    pub fn supported(self) -> (i16, i16) {
        let (_, min, max, _, _) = self.spec();
        (min, max)
    }

    pub fn first_flexible(self) -> i16 {
        self.spec().3
    }

    pub fn is_flexible(self, version: i16) -> bool {
        version >= self.first_flexible()
    }

    pub fn name(self) -> &'static str {
        self.spec().4
    }
}

/// The APIs the serve listener answers although a read-only replica cannot do what they
/// ask (`serve::refusals` says with what), with the versions whose answers this code
/// encodes — every version of Kafka's schema as of Kafka 4.0's development tree — and the
/// first flexible version of each. They are kept apart from [`ApiKey`]: the client sends some
/// of them too, but at the versions it speaks, and the listener must go on answering every
/// version of each. DescribeCluster is here too: it is answered, but only the listener needs
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusedApi {
    Produce,
    OffsetCommit,
    OffsetFetch,
    FindCoordinator,
    JoinGroup,
    Heartbeat,
    LeaveGroup,
    SyncGroup,
    DescribeGroups,
    ListGroups,
    CreateTopics,
    DeleteTopics,
    DeleteRecords,
    InitProducerId,
    DescribeConfigs,
    AlterConfigs,
    CreatePartitions,
    IncrementalAlterConfigs,
    DescribeCluster,
}

impl RefusedApi {
    pub const ALL: [RefusedApi; 19] = [
        RefusedApi::Produce,
        RefusedApi::OffsetCommit,
        RefusedApi::OffsetFetch,
        RefusedApi::FindCoordinator,
        RefusedApi::JoinGroup,
        RefusedApi::Heartbeat,
        RefusedApi::LeaveGroup,
        RefusedApi::SyncGroup,
        RefusedApi::DescribeGroups,
        RefusedApi::ListGroups,
        RefusedApi::CreateTopics,
        RefusedApi::DeleteTopics,
        RefusedApi::DeleteRecords,
        RefusedApi::InitProducerId,
        RefusedApi::DescribeConfigs,
        RefusedApi::AlterConfigs,
        RefusedApi::CreatePartitions,
        RefusedApi::IncrementalAlterConfigs,
        RefusedApi::DescribeCluster,
    ];

    /// The API with this key, if it is one of these.
    pub fn from_key(key: i16) -> Option<RefusedApi> {
        Self::ALL.into_iter().find(|a| a.key() == key)
    }

    /// (key, min version, max version, first flexible version, name).
    fn spec(self) -> (i16, i16, i16, i16, &'static str) {
        match self {
            RefusedApi::Produce => (0, 0, 11, 9, "Produce"),
            RefusedApi::OffsetCommit => (8, 0, 9, 8, "OffsetCommit"),
            RefusedApi::OffsetFetch => (9, 0, 9, 6, "OffsetFetch"),
            RefusedApi::FindCoordinator => (10, 0, 6, 3, "FindCoordinator"),
            RefusedApi::JoinGroup => (11, 0, 9, 6, "JoinGroup"),
            RefusedApi::Heartbeat => (12, 0, 4, 4, "Heartbeat"),
            RefusedApi::LeaveGroup => (13, 0, 5, 4, "LeaveGroup"),
            RefusedApi::SyncGroup => (14, 0, 5, 4, "SyncGroup"),
            RefusedApi::DescribeGroups => (15, 0, 5, 5, "DescribeGroups"),
            RefusedApi::ListGroups => (16, 0, 5, 3, "ListGroups"),
            RefusedApi::CreateTopics => (19, 0, 7, 5, "CreateTopics"),
            RefusedApi::DeleteTopics => (20, 0, 6, 4, "DeleteTopics"),
            RefusedApi::DeleteRecords => (21, 0, 2, 2, "DeleteRecords"),
            RefusedApi::InitProducerId => (22, 0, 5, 2, "InitProducerId"),
            RefusedApi::DescribeConfigs => (32, 0, 4, 4, "DescribeConfigs"),
            RefusedApi::AlterConfigs => (33, 0, 2, 2, "AlterConfigs"),
            RefusedApi::CreatePartitions => (37, 0, 3, 2, "CreatePartitions"),
            RefusedApi::IncrementalAlterConfigs => (44, 0, 1, 1, "IncrementalAlterConfigs"),
            RefusedApi::DescribeCluster => (60, 0, 1, 0, "DescribeCluster"),
        }
    }

    pub fn key(self) -> i16 {
        self.spec().0
    }

    /// Versions whose answer is encoded, inclusive.
    pub fn supported(self) -> (i16, i16) {
        let (_, min, max, _, _) = self.spec();
        (min, max)
    }

    pub fn is_flexible(self, version: i16) -> bool {
        version >= self.spec().3
    }

    pub fn name(self) -> &'static str {
        self.spec().4
    }
}

/// Answers each partition of a per-topic request (`f` gets the topic name and the
/// partition's request), keeping the request's topics and order.
pub fn map_partitions<P, R>(
    topics: Vec<(String, Vec<P>)>,
    mut f: impl FnMut(&str, P) -> R,
) -> Vec<(String, Vec<R>)> {
    topics
        .into_iter()
        .map(|(name, parts)| {
            let answers = parts.into_iter().map(|p| f(&name, p)).collect();
            (name, answers)
        })
        .collect()
}

/// Reads ARRAY{Name STRING, Partitions ARRAY{PartitionIndex INT32, …}} (the shape of the
/// write requests a refusal echoes, and of their answers), with a tag section after each
/// partition and topic when `flexible`; `rest` reads what follows each partition's index.
/// `min_partition` is the smallest encoded partition, to bound the count before anything is
/// allocated.
pub fn read_topic_partitions(
    r: &mut Reader<'_>,
    flexible: bool,
    min_partition: usize,
    what: &str,
    mut rest: impl FnMut(&mut Reader<'_>) -> DecodeResult<()>,
) -> DecodeResult<Vec<(String, Vec<i32>)>> {
    // Smallest topic: a name length and a partition count.
    let min_topic = if flexible { 2 } else { 6 };
    let nt = r.array_count(flexible, min_topic, what)?;
    let mut topics = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, what)?;
        let np = r.array_count(flexible, min_partition, what)?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            parts.push(r.i32(what)?);
            rest(r)?;
            if flexible {
                r.skip_tagged_fields(what)?;
            }
        }
        if flexible {
            r.skip_tagged_fields(what)?;
        }
        topics.push((name, parts));
    }
    Ok(topics)
}

/// Writes a request header (v1, or v2 for flexible versions) into `w`.
pub fn encode_request_header(
    w: &mut Writer,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) {
    w.i16(api.key()).i16(version).i32(correlation_id);
    // client_id stays an INT16-length string even in header v2.
    w.string(Some(client_id), false);
    w.empty_tags(api.is_flexible(version));
}

/// Reads the response header and returns its correlation id; `r` is left at the body.
pub fn decode_response_header(r: &mut Reader<'_>, api: ApiKey, version: i16) -> DecodeResult<i32> {
    let correlation_id = r.i32("response header correlation_id")?;
    if api != ApiKey::ApiVersions && api.is_flexible(version) {
        r.skip_tagged_fields("response header tags")?;
    }
    Ok(correlation_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_v1_and_v2_golden_bytes() {
        let mut w = Writer::new();
        encode_request_header(&mut w, ApiKey::ApiVersions, 0, 1, "test");
        assert_eq!(
            w.buf,
            [0, 0x12, 0, 0, 0, 0, 0, 1, 0, 4, b't', b'e', b's', b't']
        );
        let mut w = Writer::new();
        encode_request_header(&mut w, ApiKey::Fetch, 12, 3, "x");
        assert_eq!(w.buf, [0, 1, 0, 12, 0, 0, 0, 3, 0, 1, b'x', 0]);
    }

    #[test]
    fn api_versions_response_header_has_no_tags_even_when_flexible() {
        let bytes = [0, 0, 0, 9, 0xaa];
        let mut r = Reader::new(&bytes);
        assert_eq!(
            decode_response_header(&mut r, ApiKey::ApiVersions, 3).unwrap(),
            9
        );
        assert_eq!(r.remaining(), 1);
        let bytes = [0, 0, 0, 9, 0, 0xaa];
        let mut r = Reader::new(&bytes);
        assert_eq!(
            decode_response_header(&mut r, ApiKey::Fetch, 12).unwrap(),
            9
        );
        assert_eq!(r.remaining(), 1);
    }
}
