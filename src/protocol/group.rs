//! The group APIs as a broker that coordinates nothing answers them: every request decoded
//! only as far as its answer echoes it, and the answer carrying one error (the schemas are
//! Kafka's `<Name>{Request,Response}.json`; flexible versions add a tag section to every
//! struct and use compact strings, bytes and arrays).
//!
//! | API (key) | versions | flexible | echoed from the request |
//! |---|---|---|---|
//! | OffsetCommit (8) | 0–9 | 8+ | topics and partitions |
//! | OffsetFetch (9) | 0–9 | 6+ | v0–1 partitions; v8+ group ids |
//! | FindCoordinator (10) | 0–6 | 3+ | key type; v4+ the keys |
//! | JoinGroup (11) | 0–9 | 6+ | nothing |
//! | Heartbeat (12) | 0–4 | 4+ | nothing |
//! | LeaveGroup (13) | 0–5 | 4+ | nothing (v3+ members answer empty, as Kafka's error does) |
//! | SyncGroup (14) | 0–5 | 4+ | nothing |
//! | DescribeGroups (15) | 0–5 | 5+ | group ids |
//! | ListGroups (16) | 0–5 | 3+ | nothing |
//!
//! The field order of each response is written above its encoder.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::read_topic_partitions;

/// FindCoordinator key type of a group.
pub const KEY_TYPE_GROUP: i8 = 0;
/// FindCoordinator key type of a transactional id (2 is a share group).
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// What a refusal needs of a FindCoordinator request: the key type and, v4+, the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindCoordinatorRequest {
    pub key_type: i8,
    pub keys: Vec<String>,
}

/// Request: Key STRING (v0–3) · KeyType INT8 (v1+) · CoordinatorKeys ARRAY STRING (v4+).
pub fn decode_find_coordinator_request(
    body: &[u8],
    version: i16,
) -> DecodeResult<FindCoordinatorRequest> {
    let flexible = version >= 3;
    let mut r = Reader::new(body);
    let mut keys = Vec::new();
    if version <= 3 {
        keys.push(r.string(flexible, "FindCoordinator key")?);
    }
    let key_type = if version >= 1 {
        r.i8("FindCoordinator key_type")?
    } else {
        0
    };
    if version >= 4 {
        let n = r.array_count(true, 1, "FindCoordinator coordinator_keys")?;
        for _ in 0..n {
            keys.push(r.string(true, "FindCoordinator coordinator key")?);
        }
    }
    if flexible {
        r.skip_tagged_fields("FindCoordinator tags")?;
    }
    Ok(FindCoordinatorRequest { key_type, keys })
}

/// A coordinator (or none): node id, host and port.
#[derive(Debug, Clone, Copy)]
pub struct Coordinator<'a> {
    pub node_id: i32,
    pub host: &'a str,
    pub port: i32,
}

impl Coordinator<'_> {
    /// Kafka's `Node.noNode()`: node -1, host "", port -1.
    pub const NONE: Coordinator<'static> = Coordinator {
        node_id: -1,
        host: "",
        port: -1,
    };
}

/// No coordinator (node -1, host "", port -1, Kafka's `Node.noNode()`) and `error`.
pub fn encode_find_coordinator_error(
    w: &mut Writer,
    version: i16,
    keys: &[String],
    error: ErrorCode,
    message: &str,
) {
    encode_find_coordinator(w, version, keys, error, Some(message), Coordinator::NONE);
}

/// v0: ErrorCode · NodeId · Host · Port. v1–3: ThrottleTimeMs · ErrorCode · ErrorMessage
/// NULLABLE_STRING · NodeId · Host · Port. v4+: ThrottleTimeMs · Coordinators ARRAY{Key,
/// NodeId, Host, Port, ErrorCode, ErrorMessage}.
pub fn encode_find_coordinator(
    w: &mut Writer,
    version: i16,
    keys: &[String],
    error: ErrorCode,
    message: Option<&str>,
    node: Coordinator<'_>,
) {
    let flexible = version >= 3;
    if version >= 1 {
        w.i32(0);
    }
    if version <= 3 {
        w.i16(error.0);
        if version >= 1 {
            w.string(message, flexible);
        }
        w.i32(node.node_id)
            .string(Some(node.host), flexible)
            .i32(node.port);
    } else {
        w.array_len(keys.len(), true);
        for k in keys {
            w.string(Some(k), true)
                .i32(node.node_id)
                .string(Some(node.host), true)
                .i32(node.port);
            w.i16(error.0).string(message, true).empty_tags(true);
        }
    }
    w.empty_tags(flexible);
}

/// Kafka's `JoinGroupRequest.getErrorResponse`: generation -1, no protocol (null v7+, ""
/// before), leader and member id "", no members.
/// ThrottleTimeMs (v2+) · ErrorCode · GenerationId · ProtocolType NULLABLE_STRING (v7+) ·
/// ProtocolName STRING (nullable v7+) · Leader · SkipAssignment BOOL (v9+) · MemberId ·
/// Members ARRAY.
pub fn encode_join_group_error(w: &mut Writer, version: i16, error: ErrorCode) {
    let flexible = version >= 6;
    if version >= 2 {
        w.i32(0);
    }
    w.i16(error.0).i32(-1);
    if version >= 7 {
        w.string(None, flexible).string(None, flexible);
    } else {
        w.string(Some(""), flexible);
    }
    w.string(Some(""), flexible);
    if version >= 9 {
        w.bool(false);
    }
    w.string(Some(""), flexible).array_len(0, flexible);
    w.empty_tags(flexible);
}

/// ThrottleTimeMs (v1+) · ErrorCode.
pub fn encode_heartbeat_error(w: &mut Writer, version: i16, error: ErrorCode) {
    if version >= 1 {
        w.i32(0);
    }
    w.i16(error.0).empty_tags(version >= 4);
}

/// ThrottleTimeMs (v1+) · ErrorCode · Members ARRAY (v3+), empty as in Kafka's error answer.
pub fn encode_leave_group_error(w: &mut Writer, version: i16, error: ErrorCode) {
    let flexible = version >= 4;
    if version >= 1 {
        w.i32(0);
    }
    w.i16(error.0);
    if version >= 3 {
        w.array_len(0, flexible);
    }
    w.empty_tags(flexible);
}

/// ThrottleTimeMs (v1+) · ErrorCode · ProtocolType, ProtocolName NULLABLE_STRING (v5+,
/// null) · Assignment BYTES (empty).
pub fn encode_sync_group_error(w: &mut Writer, version: i16, error: ErrorCode) {
    let flexible = version >= 4;
    if version >= 1 {
        w.i32(0);
    }
    w.i16(error.0);
    if version >= 5 {
        w.string(None, flexible).string(None, flexible);
    }
    w.bytes(Some(&[]), flexible).empty_tags(flexible);
}

/// ThrottleTimeMs (v1+) · ErrorCode · Groups ARRAY (empty).
pub fn encode_list_groups_error(w: &mut Writer, version: i16, error: ErrorCode) {
    let flexible = version >= 3;
    if version >= 1 {
        w.i32(0);
    }
    w.i16(error.0).array_len(0, flexible).empty_tags(flexible);
}

/// The topics and partitions of an OffsetCommit request.
/// GroupId · GenerationIdOrMemberEpoch INT32 (v1+) · MemberId (v1+) · GroupInstanceId
/// NULLABLE_STRING (v7+) · RetentionTimeMs INT64 (v2–4) · Topics ARRAY{Name, Partitions
/// ARRAY{PartitionIndex INT32, CommittedOffset INT64, CommittedLeaderEpoch INT32 (v6+),
/// CommitTimestamp INT64 (v1 only), CommittedMetadata NULLABLE_STRING}}.
pub fn decode_offset_commit_request(
    body: &[u8],
    version: i16,
) -> DecodeResult<Vec<(String, Vec<i32>)>> {
    let flexible = version >= 8;
    let mut r = Reader::new(body);
    r.string(flexible, "OffsetCommit group_id")?;
    if version >= 1 {
        r.i32("OffsetCommit generation_id")?;
        r.string(flexible, "OffsetCommit member_id")?;
    }
    if version >= 7 {
        r.nullable_string(flexible, "OffsetCommit group_instance_id")?;
    }
    if (2..=4).contains(&version) {
        r.i64("OffsetCommit retention_time_ms")?;
    }
    let topics = read_topic_partitions(&mut r, flexible, 13, "OffsetCommit topics", |r| {
        r.i64("OffsetCommit committed_offset")?;
        if version >= 6 {
            r.i32("OffsetCommit committed_leader_epoch")?;
        }
        if version == 1 {
            r.i64("OffsetCommit commit_timestamp")?;
        }
        r.nullable_string(flexible, "OffsetCommit committed_metadata")
            .map(drop)
    })?;
    if flexible {
        r.skip_tagged_fields("OffsetCommit tags")?;
    }
    Ok(topics)
}

/// ThrottleTimeMs (v3+) · Topics ARRAY{Name, Partitions ARRAY{PartitionIndex, ErrorCode}}.
pub fn encode_offset_commit_error(
    w: &mut Writer,
    version: i16,
    topics: &[(String, Vec<i32>)],
    error: ErrorCode,
) {
    let flexible = version >= 8;
    if version >= 3 {
        w.i32(0);
    }
    w.array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible)
            .array_len(parts.len(), flexible);
        for &p in parts {
            w.i32(p).i16(error.0).empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// What a refusal needs of an OffsetFetch request: the partitions asked (v0–7; none when
/// all were asked) and, v8+, the group ids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchRequest {
    pub topics: Vec<(String, Vec<i32>)>,
    pub groups: Vec<String>,
}

fn read_offset_fetch_topics(
    r: &mut Reader<'_>,
    flexible: bool,
) -> DecodeResult<Vec<(String, Vec<i32>)>> {
    let nt = r.array_len(flexible, 2, "OffsetFetch topics")?.unwrap_or(0);
    let mut topics = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, "OffsetFetch topic")?;
        let np = r.array_count(flexible, 4, "OffsetFetch partition_indexes")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            parts.push(r.i32("OffsetFetch partition")?);
        }
        if flexible {
            r.skip_tagged_fields("OffsetFetch topic tags")?;
        }
        topics.push((name, parts));
    }
    Ok(topics)
}

/// v0–7: GroupId · Topics ARRAY{Name, PartitionIndexes ARRAY INT32} (nullable v2+) ·
/// RequireStable BOOL (v7+). v8+: Groups ARRAY{GroupId, MemberId NULLABLE_STRING (v9+),
/// MemberEpoch INT32 (v9+), Topics (nullable)} · RequireStable.
pub fn decode_offset_fetch_request(body: &[u8], version: i16) -> DecodeResult<OffsetFetchRequest> {
    let flexible = version >= 6;
    let mut r = Reader::new(body);
    let mut out = OffsetFetchRequest::default();
    if version <= 7 {
        r.string(flexible, "OffsetFetch group_id")?;
        out.topics = read_offset_fetch_topics(&mut r, flexible)?;
    } else {
        let ng = r.array_count(true, 3, "OffsetFetch groups")?;
        for _ in 0..ng {
            out.groups.push(r.string(true, "OffsetFetch group_id")?);
            if version >= 9 {
                r.nullable_string(true, "OffsetFetch member_id")?;
                r.i32("OffsetFetch member_epoch")?;
            }
            read_offset_fetch_topics(&mut r, true)?;
            r.skip_tagged_fields("OffsetFetch group tags")?;
        }
    }
    if version >= 7 {
        r.bool("OffsetFetch require_stable")?;
    }
    if flexible {
        r.skip_tagged_fields("OffsetFetch tags")?;
    }
    Ok(out)
}

/// Kafka's `OffsetFetchRequest.getErrorResponse`: v0–1 have no top-level error, so each
/// partition asked carries it (offset -1, metadata ""); v2–7 a top-level ErrorCode and no
/// topics; v8+ each group its ErrorCode and no topics.
/// v0–7: ThrottleTimeMs (v3+) · Topics ARRAY{Name, Partitions ARRAY{PartitionIndex,
/// CommittedOffset INT64, CommittedLeaderEpoch INT32 (v5+), Metadata NULLABLE_STRING,
/// ErrorCode}} · ErrorCode (v2+). v8+: ThrottleTimeMs · Groups ARRAY{GroupId, Topics ARRAY,
/// ErrorCode}.
pub fn encode_offset_fetch_error(
    w: &mut Writer,
    version: i16,
    req: &OffsetFetchRequest,
    error: ErrorCode,
) {
    let flexible = version >= 6;
    if version >= 3 {
        w.i32(0);
    }
    if version >= 8 {
        w.array_len(req.groups.len(), true);
        for g in &req.groups {
            w.string(Some(g), true).array_len(0, true).i16(error.0);
            w.empty_tags(true);
        }
    } else if version >= 2 {
        w.array_len(0, flexible).i16(error.0);
    } else {
        w.array_len(req.topics.len(), false);
        for (name, parts) in &req.topics {
            w.string(Some(name), false).array_len(parts.len(), false);
            for &p in parts {
                w.i32(p).i64(-1).string(Some(""), false).i16(error.0);
            }
        }
    }
    w.empty_tags(flexible);
}

/// Groups ARRAY STRING · IncludeAuthorizedOperations BOOL (v3+).
pub fn decode_describe_groups_request(body: &[u8], version: i16) -> DecodeResult<Vec<String>> {
    let flexible = version >= 5;
    let mut r = Reader::new(body);
    let n = r.array_count(flexible, 1, "DescribeGroups groups")?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        groups.push(r.string(flexible, "DescribeGroups group")?);
    }
    if version >= 3 {
        r.bool("DescribeGroups include_authorized_operations")?;
    }
    if flexible {
        r.skip_tagged_fields("DescribeGroups tags")?;
    }
    Ok(groups)
}

/// Each group with `error`, state, protocol type and protocol "", no members.
/// ThrottleTimeMs (v1+) · Groups ARRAY{ErrorCode, GroupId, GroupState, ProtocolType,
/// ProtocolData, Members ARRAY, AuthorizedOperations INT32 (v3+; INT32_MIN = not asked)}.
pub fn encode_describe_groups_error(
    w: &mut Writer,
    version: i16,
    groups: &[String],
    error: ErrorCode,
) {
    let flexible = version >= 5;
    if version >= 1 {
        w.i32(0);
    }
    w.array_len(groups.len(), flexible);
    for g in groups {
        w.i16(error.0).string(Some(g), flexible);
        for _ in 0..3 {
            w.string(Some(""), flexible);
        }
        w.array_len(0, flexible);
        if version >= 3 {
            w.i32(i32::MIN);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::encoded;
    use crate::record::batch::tests::unhex;

    const E: ErrorCode = ErrorCode::GROUP_AUTHORIZATION_FAILED;

    #[test]
    fn find_coordinator_requests_and_error_golden_bytes() {
        // v0: key "g".
        let req = decode_find_coordinator_request(&unhex("0001 67"), 0).unwrap();
        assert_eq!((req.key_type, req.keys), (0, vec!["g".to_string()]));
        // v3: compact key "tx", key type 1, tags.
        let req = decode_find_coordinator_request(&unhex("03 7478 01 00"), 3).unwrap();
        assert_eq!((req.key_type, req.keys), (1, vec!["tx".to_string()]));
        // v4: key type 0, keys ["a", "b"], tags.
        let req = decode_find_coordinator_request(&unhex("00 03 0261 0262 00"), 4).unwrap();
        assert_eq!(req.keys, ["a", "b"]);
        let keys = vec!["g".to_string()];
        // v0: error 30, node -1, host "", port -1.
        assert_eq!(
            encoded(|w| encode_find_coordinator_error(w, 0, &keys, E, "ro")),
            unhex("001e ffffffff 0000 ffffffff")
        );
        // v1: throttle, error, message "ro", node, host, port.
        assert_eq!(
            encoded(|w| encode_find_coordinator_error(w, 1, &keys, E, "ro")),
            unhex("00000000 001e 0002 726f ffffffff 0000 ffffffff")
        );
        // v3: compact strings and a tag section.
        assert_eq!(
            encoded(|w| encode_find_coordinator_error(w, 3, &keys, E, "ro")),
            unhex("00000000 001e 03 726f ffffffff 01 ffffffff 00")
        );
        // v4: throttle, [1 coordinator: key "g", node, host, port, error, message, tags], tags.
        assert_eq!(
            encoded(|w| encode_find_coordinator_error(w, 4, &keys, E, "ro")),
            unhex("00000000 02 0267 ffffffff 01 ffffffff 001e 03726f 00 00")
        );
    }

    #[test]
    fn join_heartbeat_leave_sync_list_error_golden_bytes() {
        // JoinGroup v0: error, generation -1, protocol "", leader "", member "", members [].
        assert_eq!(
            encoded(|w| encode_join_group_error(w, 0, E)),
            unhex("001e ffffffff 0000 0000 0000 00000000")
        );
        // v5: + throttle first.
        assert_eq!(
            encoded(|w| encode_join_group_error(w, 5, E)),
            unhex("00000000 001e ffffffff 0000 0000 0000 00000000")
        );
        // v9: compact; protocol type and name null; skip assignment false; tags.
        assert_eq!(
            encoded(|w| encode_join_group_error(w, 9, E)),
            unhex("00000000 001e ffffffff 00 00 01 00 01 01 00")
        );
        assert_eq!(encoded(|w| encode_heartbeat_error(w, 0, E)), unhex("001e"));
        assert_eq!(
            encoded(|w| encode_heartbeat_error(w, 4, E)),
            unhex("00000000 001e 00")
        );
        assert_eq!(
            encoded(|w| encode_leave_group_error(w, 1, E)),
            unhex("00000000 001e")
        );
        assert_eq!(
            encoded(|w| encode_leave_group_error(w, 3, E)),
            unhex("00000000 001e 00000000")
        );
        assert_eq!(
            encoded(|w| encode_leave_group_error(w, 5, E)),
            unhex("00000000 001e 01 00")
        );
        // SyncGroup v0: error, assignment (empty BYTES).
        assert_eq!(
            encoded(|w| encode_sync_group_error(w, 0, E)),
            unhex("001e 00000000")
        );
        // v5: throttle, error, type null, name null, compact empty bytes, tags.
        assert_eq!(
            encoded(|w| encode_sync_group_error(w, 5, E)),
            unhex("00000000 001e 00 00 01 00")
        );
        assert_eq!(
            encoded(|w| encode_list_groups_error(w, 0, E)),
            unhex("001e 00000000")
        );
        assert_eq!(
            encoded(|w| encode_list_groups_error(w, 3, E)),
            unhex("00000000 001e 01 00")
        );
    }

    fn offset_commit_request(version: i16) -> Vec<u8> {
        let flexible = version >= 8;
        encoded(|w| {
            w.string(Some("g"), flexible);
            if version >= 1 {
                w.i32(3).string(Some("m"), flexible);
            }
            if version >= 7 {
                w.string(None, flexible);
            }
            if (2..=4).contains(&version) {
                w.i64(-1);
            }
            w.array_len(1, flexible).string(Some("t"), flexible);
            w.array_len(1, flexible).i32(2).i64(100);
            if version >= 6 {
                w.i32(-1);
            }
            if version == 1 {
                w.i64(-1);
            }
            w.string(Some(""), flexible).empty_tags(flexible);
            w.empty_tags(flexible).empty_tags(flexible);
        })
    }

    #[test]
    fn offset_commit_request_and_error_golden_bytes() {
        let topics = vec![("t".to_string(), vec![2])];
        for version in 0..=9 {
            let got = decode_offset_commit_request(&offset_commit_request(version), version);
            assert_eq!(got.unwrap(), topics, "v{version}");
        }
        assert_eq!(
            encoded(|w| encode_offset_commit_error(w, 2, &topics, E)),
            unhex("00000001 0001 74 00000001 00000002 001e")
        );
        assert_eq!(
            encoded(|w| encode_offset_commit_error(w, 3, &topics, E)),
            unhex("00000000 00000001 0001 74 00000001 00000002 001e")
        );
        assert_eq!(
            encoded(|w| encode_offset_commit_error(w, 8, &topics, E)),
            unhex("00000000 02 0274 02 00000002 001e 00 00 00")
        );
    }

    #[test]
    fn offset_fetch_request_and_error_golden_bytes() {
        // v1: group "g", [topic "t" [partitions 0, 1]].
        let v1 = unhex("0001 67 00000001 0001 74 00000002 00000000 00000001");
        let req = decode_offset_fetch_request(&v1, 1).unwrap();
        assert_eq!(req.topics, vec![("t".to_string(), vec![0, 1])]);
        // v1 answer: each partition: index, offset -1, metadata "", error.
        assert_eq!(
            encoded(|w| encode_offset_fetch_error(w, 1, &req, E)),
            unhex(
                "00000001 0001 74 00000002 00000000 ffffffffffffffff 0000 001e
                 00000001 ffffffffffffffff 0000 001e"
            )
        );
        // v7: group "g", topics null, require stable, tags.
        let v7 = unhex("02 67 00 01 00");
        let req = decode_offset_fetch_request(&v7, 7).unwrap();
        assert!(req.topics.is_empty());
        // throttle, topics [], error, tags.
        assert_eq!(
            encoded(|w| encode_offset_fetch_error(w, 7, &req, E)),
            unhex("00000000 01 001e 00")
        );
        // v9: [group "g" member null epoch -1 topics null tags] require stable false, tags.
        let v9 = unhex("02 0267 00 ffffffff 00 00 00 00");
        let req = decode_offset_fetch_request(&v9, 9).unwrap();
        assert_eq!(req.groups, ["g"]);
        assert_eq!(
            encoded(|w| encode_offset_fetch_error(w, 9, &req, E)),
            unhex("00000000 02 0267 01 001e 00 00")
        );
    }

    #[test]
    fn describe_groups_request_and_error_golden_bytes() {
        let groups = decode_describe_groups_request(&unhex("00000001 0001 67"), 0).unwrap();
        assert_eq!(groups, ["g"]);
        let groups = decode_describe_groups_request(&unhex("02 0267 00 00"), 5).unwrap();
        assert_eq!(groups, ["g"]);
        // v0: [error, "g", state "", type "", protocol "", members []].
        assert_eq!(
            encoded(|w| encode_describe_groups_error(w, 0, &groups, E)),
            unhex("00000001 001e 0001 67 0000 0000 0000 00000000")
        );
        // v5: throttle, compact, authorized operations INT32_MIN, tags.
        assert_eq!(
            encoded(|w| encode_describe_groups_error(w, 5, &groups, E)),
            unhex("00000000 02 001e 0267 01 01 01 01 80000000 00 00")
        );
    }
}
