//! The admin APIs as a read-only broker answers them: each request decoded as far as its
//! answer echoes it (topic names, partitions, config resources), each answer carrying an
//! error per entity, and DescribeCluster answered for real (Kafka's
//! `<Name>{Request,Response}.json`; flexible versions add a tag section to every struct and
//! use compact strings and arrays).
//!
//! | API (key) | versions | flexible | echoed |
//! |---|---|---|---|
//! | CreateTopics (19) | 0–7 | 5+ | topic names |
//! | DeleteTopics (20) | 0–6 | 4+ | topic names (v6+: names or ids) |
//! | DeleteRecords (21) | 0–2 | 2+ | topics and partitions |
//! | DescribeConfigs (32) | 0–4 | 4+ | resources |
//! | AlterConfigs (33) | 0–2 | 2+ | resources |
//! | CreatePartitions (37) | 0–3 | 2+ | topic names |
//! | IncrementalAlterConfigs (44) | 0–1 | 1+ | resources |
//! | DescribeCluster (60) | 0–1 | 0+ | endpoint type |

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::read_topic_partitions;

fn skip_tags(r: &mut Reader<'_>, flexible: bool, what: &str) -> DecodeResult<()> {
    if flexible {
        r.skip_tagged_fields(what)?;
    }
    Ok(())
}

fn skip_i32_array(r: &mut Reader<'_>, flexible: bool, what: &str) -> DecodeResult<()> {
    let n = r.array_len(flexible, 4, what)?.unwrap_or(0);
    r.take(n * 4, what)?;
    Ok(())
}

/// Topics ARRAY{Name, NumPartitions INT32, ReplicationFactor INT16, Assignments
/// ARRAY{PartitionIndex INT32, BrokerIds ARRAY INT32}, Configs ARRAY{Name, Value
/// NULLABLE_STRING}} · timeoutMs INT32 · validateOnly BOOL (v1+).
pub fn decode_create_topics_request(body: &[u8], version: i16) -> DecodeResult<Vec<String>> {
    let flexible = version >= 5;
    let mut r = Reader::new(body);
    let nt = r.array_count(flexible, 9, "CreateTopics topics")?;
    let mut names = Vec::with_capacity(nt);
    for _ in 0..nt {
        names.push(r.string(flexible, "CreateTopics name")?);
        r.i32("CreateTopics num_partitions")?;
        r.i16("CreateTopics replication_factor")?;
        let na = r.array_count(flexible, 5, "CreateTopics assignments")?;
        for _ in 0..na {
            r.i32("CreateTopics partition_index")?;
            skip_i32_array(&mut r, flexible, "CreateTopics broker_ids")?;
            skip_tags(&mut r, flexible, "CreateTopics assignment tags")?;
        }
        let nc = r.array_count(flexible, 2, "CreateTopics configs")?;
        for _ in 0..nc {
            r.string(flexible, "CreateTopics config name")?;
            r.nullable_string(flexible, "CreateTopics config value")?;
            skip_tags(&mut r, flexible, "CreateTopics config tags")?;
        }
        skip_tags(&mut r, flexible, "CreateTopics topic tags")?;
    }
    r.i32("CreateTopics timeout_ms")?;
    if version >= 1 {
        r.bool("CreateTopics validate_only")?;
    }
    skip_tags(&mut r, flexible, "CreateTopics tags")?;
    Ok(names)
}

/// ThrottleTimeMs (v2+) · Topics ARRAY{Name, TopicId UUID (v7+, zero), ErrorCode,
/// ErrorMessage NULLABLE_STRING (v1+), NumPartitions INT32 (v5+, -1), ReplicationFactor
/// INT16 (v5+, -1), Configs nullable ARRAY (v5+, null)}.
pub fn encode_create_topics_error(
    w: &mut Writer,
    version: i16,
    names: &[String],
    error: ErrorCode,
    message: &str,
) {
    let flexible = version >= 5;
    if version >= 2 {
        w.i32(0);
    }
    w.array_len(names.len(), flexible);
    for n in names {
        w.string(Some(n), flexible);
        if version >= 7 {
            w.uuid(&[0; 16]);
        }
        w.i16(error.0);
        if version >= 1 {
            w.string(Some(message), flexible);
        }
        if version >= 5 {
            w.i32(-1).i16(-1).null_array(true);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// A topic named in a DeleteTopics request: by name (v0–5, and v6+ when the name is set),
/// or by id (v6+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTopic {
    pub name: Option<String>,
    pub topic_id: [u8; 16],
}

/// v0–5: TopicNames ARRAY STRING · TimeoutMs. v6+: Topics ARRAY{Name NULLABLE_STRING,
/// TopicId UUID} · TimeoutMs.
pub fn decode_delete_topics_request(body: &[u8], version: i16) -> DecodeResult<Vec<DeleteTopic>> {
    let flexible = version >= 4;
    let mut r = Reader::new(body);
    let mut topics = Vec::new();
    if version >= 6 {
        let n = r.array_count(true, 18, "DeleteTopics topics")?;
        for _ in 0..n {
            let name = r.nullable_string(true, "DeleteTopics name")?;
            let topic_id = r.uuid("DeleteTopics topic_id")?;
            r.skip_tagged_fields("DeleteTopics topic tags")?;
            topics.push(DeleteTopic { name, topic_id });
        }
    } else {
        let n = r.array_count(flexible, 1, "DeleteTopics topic_names")?;
        for _ in 0..n {
            let name = r.string(flexible, "DeleteTopics topic name")?;
            topics.push(DeleteTopic {
                name: Some(name),
                topic_id: [0; 16],
            });
        }
    }
    r.i32("DeleteTopics timeout_ms")?;
    skip_tags(&mut r, flexible, "DeleteTopics tags")?;
    Ok(topics)
}

/// ThrottleTimeMs (v1+) · Responses ARRAY{Name (nullable v6+), TopicId UUID (v6+),
/// ErrorCode, ErrorMessage NULLABLE_STRING (v5+)}.
pub fn encode_delete_topics_error(
    w: &mut Writer,
    version: i16,
    topics: &[DeleteTopic],
    error: ErrorCode,
    message: &str,
) {
    let flexible = version >= 4;
    if version >= 1 {
        w.i32(0);
    }
    w.array_len(topics.len(), flexible);
    for t in topics {
        let name = t.name.as_deref();
        w.string(
            if version >= 6 {
                name
            } else {
                name.or(Some(""))
            },
            flexible,
        );
        if version >= 6 {
            w.uuid(&t.topic_id);
        }
        w.i16(error.0);
        if version >= 5 {
            w.string(Some(message), flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// Topics ARRAY{Name, Partitions ARRAY{PartitionIndex INT32, Offset INT64}} · TimeoutMs.
pub fn decode_delete_records_request(
    body: &[u8],
    version: i16,
) -> DecodeResult<Vec<(String, Vec<i32>)>> {
    let flexible = version >= 2;
    let mut r = Reader::new(body);
    let topics = read_topic_partitions(&mut r, flexible, 12, "DeleteRecords topics", |r| {
        r.i64("DeleteRecords offset").map(drop)
    })?;
    r.i32("DeleteRecords timeout_ms")?;
    skip_tags(&mut r, flexible, "DeleteRecords tags")?;
    Ok(topics)
}

/// ThrottleTimeMs · Topics ARRAY{Name, Partitions ARRAY{PartitionIndex, LowWatermark INT64
/// (-1), ErrorCode}}.
pub fn encode_delete_records_error(
    w: &mut Writer,
    version: i16,
    topics: &[(String, Vec<i32>)],
    error: ErrorCode,
) {
    let flexible = version >= 2;
    w.i32(0).array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible)
            .array_len(parts.len(), flexible);
        for &p in parts {
            w.i32(p).i64(-1).i16(error.0).empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// Topics ARRAY{Name, Count INT32, Assignments nullable ARRAY{BrokerIds ARRAY INT32}} ·
/// TimeoutMs · ValidateOnly.
pub fn decode_create_partitions_request(body: &[u8], version: i16) -> DecodeResult<Vec<String>> {
    let flexible = version >= 2;
    let mut r = Reader::new(body);
    let nt = r.array_count(flexible, 7, "CreatePartitions topics")?;
    let mut names = Vec::with_capacity(nt);
    for _ in 0..nt {
        names.push(r.string(flexible, "CreatePartitions name")?);
        r.i32("CreatePartitions count")?;
        let na = r
            .array_len(flexible, 1, "CreatePartitions assignments")?
            .unwrap_or(0);
        for _ in 0..na {
            skip_i32_array(&mut r, flexible, "CreatePartitions broker_ids")?;
            skip_tags(&mut r, flexible, "CreatePartitions assignment tags")?;
        }
        skip_tags(&mut r, flexible, "CreatePartitions topic tags")?;
    }
    r.i32("CreatePartitions timeout_ms")?;
    r.bool("CreatePartitions validate_only")?;
    skip_tags(&mut r, flexible, "CreatePartitions tags")?;
    Ok(names)
}

/// ThrottleTimeMs · Results ARRAY{Name, ErrorCode, ErrorMessage NULLABLE_STRING}.
pub fn encode_create_partitions_error(
    w: &mut Writer,
    version: i16,
    names: &[String],
    error: ErrorCode,
    message: &str,
) {
    let flexible = version >= 2;
    w.i32(0).array_len(names.len(), flexible);
    for n in names {
        w.string(Some(n), flexible).i16(error.0);
        w.string(Some(message), flexible).empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// Config resource types (`ConfigResource.Type`).
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_GROUP: i8 = 32;

/// A config resource of AlterConfigs, IncrementalAlterConfigs or DescribeConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigResource {
    pub resource_type: i8,
    pub name: String,
}

/// The three config APIs' requests, which differ only in what follows each resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigApi {
    /// AlterConfigs: Configs ARRAY{Name, Value NULLABLE_STRING} · (end) ValidateOnly.
    Alter,
    /// IncrementalAlterConfigs: Configs ARRAY{Name, ConfigOperation INT8, Value} ·
    /// (end) ValidateOnly.
    IncrementalAlter,
    /// DescribeConfigs: ConfigurationKeys nullable ARRAY STRING · (end) IncludeSynonyms
    /// (v1+), IncludeDocumentation (v3+).
    Describe,
}

impl ConfigApi {
    fn first_flexible(self) -> i16 {
        match self {
            ConfigApi::Alter => 2,
            ConfigApi::IncrementalAlter => 1,
            ConfigApi::Describe => 4,
        }
    }
}

/// Resources ARRAY{ResourceType INT8, ResourceName STRING, (per API)} · (per API).
pub fn decode_config_resources(
    body: &[u8],
    version: i16,
    api: ConfigApi,
) -> DecodeResult<Vec<ConfigResource>> {
    let flexible = version >= api.first_flexible();
    let mut r = Reader::new(body);
    let n = r.array_count(flexible, 4, "config resources")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let resource_type = r.i8("config resource_type")?;
        let name = r.string(flexible, "config resource_name")?;
        if api == ConfigApi::Describe {
            let nk = r
                .array_len(flexible, 1, "config configuration_keys")?
                .unwrap_or(0);
            for _ in 0..nk {
                r.string(flexible, "config configuration key")?;
            }
        } else {
            let nc = r.array_count(flexible, 2, "config configs")?;
            for _ in 0..nc {
                r.string(flexible, "config name")?;
                if api == ConfigApi::IncrementalAlter {
                    r.i8("config operation")?;
                }
                r.nullable_string(flexible, "config value")?;
                skip_tags(&mut r, flexible, "config tags")?;
            }
        }
        skip_tags(&mut r, flexible, "config resource tags")?;
        out.push(ConfigResource {
            resource_type,
            name,
        });
    }
    match api {
        ConfigApi::Describe => {
            if version >= 1 {
                r.bool("DescribeConfigs include_synonyms")?;
            }
            if version >= 3 {
                r.bool("DescribeConfigs include_documentation")?;
            }
        }
        _ => {
            r.bool("config validate_only")?;
        }
    }
    skip_tags(&mut r, flexible, "config request tags")?;
    Ok(out)
}

/// ThrottleTimeMs · Responses/Results ARRAY{ErrorCode, ErrorMessage NULLABLE_STRING,
/// ResourceType, ResourceName, Configs ARRAY (DescribeConfigs only; empty)}; each resource's
/// error from `error_for`.
pub fn encode_config_errors(
    w: &mut Writer,
    version: i16,
    api: ConfigApi,
    resources: &[ConfigResource],
    error_for: impl Fn(&ConfigResource) -> ErrorCode,
    message: &str,
) {
    let flexible = version >= api.first_flexible();
    w.i32(0).array_len(resources.len(), flexible);
    for res in resources {
        w.i16(error_for(res).0).string(Some(message), flexible);
        w.i8(res.resource_type).string(Some(&res.name), flexible);
        if api == ConfigApi::Describe {
            w.array_len(0, flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// The EndpointType a DescribeCluster request asks for (1 brokers, 2 controllers; v1+).
/// IncludeClusterAuthorizedOperations BOOL · EndpointType INT8 (v1+).
pub fn decode_describe_cluster_request(body: &[u8], version: i16) -> DecodeResult<i8> {
    let mut r = Reader::new(body);
    r.bool("DescribeCluster include_cluster_authorized_operations")?;
    let endpoint_type = if version >= 1 {
        r.i8("DescribeCluster endpoint_type")?
    } else {
        1
    };
    r.skip_tagged_fields("DescribeCluster tags")?;
    Ok(endpoint_type)
}

/// One node as the whole cluster.
pub struct ClusterNode<'a> {
    pub node_id: i32,
    pub host: &'a str,
    pub port: i32,
    pub cluster_id: &'a str,
}

/// ThrottleTimeMs · ErrorCode · ErrorMessage NULLABLE_STRING · EndpointType INT8 (v1+) ·
/// ClusterId STRING · ControllerId INT32 · Brokers ARRAY{BrokerId, Host, Port, Rack
/// NULLABLE_STRING} · ClusterAuthorizedOperations INT32 (INT32_MIN = not asked).
pub fn encode_describe_cluster(
    w: &mut Writer,
    version: i16,
    endpoint_type: i8,
    node: &ClusterNode<'_>,
) {
    w.i32(0).i16(0).string(None, true);
    if version >= 1 {
        w.i8(endpoint_type);
    }
    w.string(Some(node.cluster_id), true).i32(node.node_id);
    w.array_len(1, true)
        .i32(node.node_id)
        .string(Some(node.host), true);
    w.i32(node.port).string(None, true).empty_tags(true);
    w.i32(i32::MIN).empty_tags(true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::encoded;
    use crate::record::batch::tests::unhex;

    const T: ErrorCode = ErrorCode::TOPIC_AUTHORIZATION_FAILED;

    #[test]
    fn create_topics_request_and_error_golden_bytes() {
        // v0: [topic "t", 3 partitions, rf 1, [assignment 0 → [1]], [config "a"=null]], timeout.
        let v0 = unhex(
            "00000001 0001 74 00000003 0001 00000001 00000000 00000001 00000001
             00000001 0001 61 ffff 00007530",
        );
        assert_eq!(decode_create_topics_request(&v0, 0).unwrap(), ["t"]);
        // v5: compact, no assignments or configs, validate only, tags.
        let v5 = unhex("02 0274 00000003 0001 01 01 00 00007530 00 00");
        let names = decode_create_topics_request(&v5, 5).unwrap();
        assert_eq!(names, ["t"]);
        assert_eq!(
            encoded(|w| encode_create_topics_error(w, 0, &names, T, "ro")),
            unhex("00000001 0001 74 001d")
        );
        assert_eq!(
            encoded(|w| encode_create_topics_error(w, 2, &names, T, "ro")),
            unhex("00000000 00000001 0001 74 001d 0002 726f")
        );
        // v7: compact; topic id zero; partitions -1, rf -1, configs null; tags.
        assert_eq!(
            encoded(|w| encode_create_topics_error(w, 7, &names, T, "ro")),
            unhex(
                "00000000 02 0274 00000000000000000000000000000000 001d 03726f
                 ffffffff ffff 00 00 00"
            )
        );
    }

    #[test]
    fn delete_topics_request_and_error_golden_bytes() {
        let v1 = unhex("00000001 0001 74 00007530");
        let topics = decode_delete_topics_request(&v1, 1).unwrap();
        assert_eq!(topics[0].name.as_deref(), Some("t"));
        assert_eq!(
            encoded(|w| encode_delete_topics_error(w, 1, &topics, T, "ro")),
            unhex("00000000 00000001 0001 74 001d")
        );
        // v6: [name null, id 01..], timeout, tags.
        let id = "0102030405060708090a0b0c0d0e0f10";
        let v6 = unhex(&format!("02 00 {id} 00 00007530 00"));
        let topics = decode_delete_topics_request(&v6, 6).unwrap();
        assert_eq!(topics[0].name, None);
        assert_eq!(
            encoded(|w| encode_delete_topics_error(w, 6, &topics, T, "ro")),
            unhex(&format!("00000000 02 00 {id} 001d 03726f 00 00"))
        );
    }

    #[test]
    fn delete_records_and_create_partitions_golden_bytes() {
        let v0 = unhex("00000001 0001 74 00000001 00000002 0000000000000064 00007530");
        let topics = decode_delete_records_request(&v0, 0).unwrap();
        assert_eq!(topics, vec![("t".to_string(), vec![2])]);
        assert_eq!(
            encoded(|w| encode_delete_records_error(w, 0, &topics, T)),
            unhex("00000000 00000001 0001 74 00000001 00000002 ffffffffffffffff 001d")
        );
        assert_eq!(
            encoded(|w| encode_delete_records_error(w, 2, &topics, T)),
            unhex("00000000 02 0274 02 00000002 ffffffffffffffff 001d 00 00 00")
        );
        // CreatePartitions v0: [topic "t", count 4, assignments null], timeout, validate.
        let v0 = unhex("00000001 0001 74 00000004 ffffffff 00007530 00");
        let names = decode_create_partitions_request(&v0, 0).unwrap();
        assert_eq!(names, ["t"]);
        assert_eq!(
            encoded(|w| encode_create_partitions_error(w, 0, &names, T, "ro")),
            unhex("00000000 00000001 0001 74 001d 0002 726f")
        );
        assert_eq!(
            encoded(|w| encode_create_partitions_error(w, 2, &names, T, "ro")),
            unhex("00000000 02 0274 001d 03726f 00 00")
        );
    }

    #[test]
    fn config_requests_and_errors_golden_bytes() {
        // AlterConfigs v0: [topic "t" [config "a" = "b"]], validate only.
        let alter = unhex("00000001 02 0001 74 00000001 0001 61 0001 62 00");
        let res = decode_config_resources(&alter, 0, ConfigApi::Alter).unwrap();
        assert_eq!(res[0].resource_type, RESOURCE_TOPIC);
        // IncrementalAlterConfigs v1: [broker "1" [config "a" op 0 value null]], tags.
        let inc = unhex("02 04 0231 02 0261 00 00 00 00 00 00");
        let res2 = decode_config_resources(&inc, 1, ConfigApi::IncrementalAlter).unwrap();
        assert_eq!(res2[0].name, "1");
        // DescribeConfigs v1: [topic "t" keys null], include synonyms.
        let desc = unhex("00000001 02 0001 74 ffffffff 00");
        let res3 = decode_config_resources(&desc, 1, ConfigApi::Describe).unwrap();
        assert_eq!(res3, res);
        assert_eq!(
            encoded(|w| encode_config_errors(w, 0, ConfigApi::Alter, &res, |_| T, "ro")),
            unhex("00000000 00000001 001d 0002 726f 02 0001 74")
        );
        assert_eq!(
            encoded(|w| encode_config_errors(w, 1, ConfigApi::IncrementalAlter, &res, |_| T, "")),
            unhex("00000000 02 001d 01 02 0274 00 00")
        );
        // DescribeConfigs: + an empty Configs array per resource.
        assert_eq!(
            encoded(|w| encode_config_errors(w, 1, ConfigApi::Describe, &res, |_| T, "ro")),
            unhex("00000000 00000001 001d 0002 726f 02 0001 74 00000000")
        );
        assert_eq!(
            encoded(|w| encode_config_errors(w, 4, ConfigApi::Describe, &res, |_| T, "ro")),
            unhex("00000000 02 001d 03726f 02 0274 01 00 00")
        );
    }

    #[test]
    fn describe_cluster_golden_bytes() {
        assert_eq!(decode_describe_cluster_request(&unhex("00 00"), 0), Ok(1));
        assert_eq!(
            decode_describe_cluster_request(&unhex("01 02 00"), 1),
            Ok(2)
        );
        let node = ClusterNode {
            node_id: 7,
            host: "h",
            port: 9092,
            cluster_id: "c",
        };
        // throttle, error 0, message null, [endpoint type,] cluster "c", controller 7,
        // [broker 7 "h" 9092 rack null tags], authorized operations INT32_MIN, tags.
        assert_eq!(
            encoded(|w| encode_describe_cluster(w, 0, 1, &node)),
            unhex("00000000 0000 00 0263 00000007 02 00000007 0268 00002384 00 00 80000000 00")
        );
        assert_eq!(
            encoded(|w| encode_describe_cluster(w, 1, 1, &node)),
            unhex("00000000 0000 00 01 0263 00000007 02 00000007 0268 00002384 00 00 80000000 00")
        );
    }
}
