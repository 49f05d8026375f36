//! CreateTopics (key 19), v2–7, flexible from v5: topics created with their partitions
//! placed by hand and their configs (`CreateTopics{Request,Response}.json`).
//!
//! Request: Topics ARRAY{Name STRING, NumPartitions INT32, ReplicationFactor INT16,
//! Assignments ARRAY{PartitionIndex INT32, BrokerIds ARRAY INT32}, Configs ARRAY{Name STRING,
//! Value NULLABLE_STRING}} · TimeoutMs INT32 · ValidateOnly BOOL.
//! Response: ThrottleTimeMs INT32 · Topics ARRAY{Name STRING, TopicId UUID (v7+), ErrorCode
//! INT16, ErrorMessage NULLABLE_STRING, NumPartitions INT32 (v5+), ReplicationFactor INT16
//! (v5+), Configs nullable ARRAY{Name STRING, Value NULLABLE_STRING, ReadOnly BOOL,
//! ConfigSource INT8, IsSensitive BOOL} (v5+)}; v5+ may tag a TopicConfigErrorCode (tag 0)
//! onto a topic, which is skipped.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::uuid::Uuid;

/// A topic to create: each partition's replicas (the first the preferred leader) and the
/// configs set on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    /// (partition, broker ids); empty leaves the partition count and replication factor to
    /// the broker's defaults (brokers of Kafka 2.4 and later, v4+).
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, String)>,
}

/// What became of one topic of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    pub name: String,
    pub error: ErrorCode,
    pub message: Option<String>,
    /// The new topic's id (v7+, when created).
    pub topic_id: Option<Uuid>,
}

/// The partition count and replication factor go as -1: the assignments say both.
pub fn encode_request(
    w: &mut Writer,
    version: i16,
    topics: &[NewTopic],
    timeout_ms: i32,
    validate_only: bool,
) {
    let flexible = version >= 5;
    w.array_len(topics.len(), flexible);
    for t in topics {
        w.string(Some(&t.name), flexible).i32(-1).i16(-1);
        w.array_len(t.assignments.len(), flexible);
        for (partition, brokers) in &t.assignments {
            w.i32(*partition).array_len(brokers.len(), flexible);
            for &b in brokers {
                w.i32(b);
            }
            w.empty_tags(flexible);
        }
        w.array_len(t.configs.len(), flexible);
        for (name, value) in &t.configs {
            w.string(Some(name), flexible).string(Some(value), flexible);
            w.empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.i32(timeout_ms).bool(validate_only).empty_tags(flexible);
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<Vec<CreatedTopic>> {
    let flexible = version >= 5;
    let mut r = Reader::new(body);
    r.i32("CreateTopics throttle_time_ms")?;
    // The smallest topic: name, error, message (and, v5+, the rest and tags).
    let nt = r.array_count(
        flexible,
        if flexible { 11 } else { 6 },
        "CreateTopics topics",
    )?;
    let mut out = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, "CreateTopics name")?;
        let topic_id = if version >= 7 {
            Some(Uuid(r.uuid("CreateTopics topic_id")?)).filter(|id| !id.is_zero())
        } else {
            None
        };
        let error = ErrorCode(r.i16("CreateTopics error_code")?);
        let message = r.nullable_string(flexible, "CreateTopics error_message")?;
        if flexible {
            r.i32("CreateTopics num_partitions")?;
            r.i16("CreateTopics replication_factor")?;
            let nc = r.array_len(true, 5, "CreateTopics configs")?.unwrap_or(0);
            for _ in 0..nc {
                r.string(true, "CreateTopics config name")?;
                r.nullable_string(true, "CreateTopics config value")?;
                r.bool("CreateTopics config read_only")?;
                r.i8("CreateTopics config_source")?;
                r.bool("CreateTopics config is_sensitive")?;
                r.skip_tagged_fields("CreateTopics config tags")?;
            }
            r.skip_tagged_fields("CreateTopics topic tags")?;
        }
        out.push(CreatedTopic {
            name,
            error,
            message,
            topic_id,
        });
    }
    if flexible {
        r.skip_tagged_fields("CreateTopics tags")?;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::admin::{decode_create_topics_request, encode_create_topics_error};
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::record::batch::tests::unhex;

    /// A v7 response: compact; id; error; message ""; partitions 1, rf 3; [config "a"="b",
    /// read only false, source 1, sensitive false]; the config error tagged (tag 0, 2 bytes).
    pub(crate) const RESPONSE_V7: &str = "00000000 02 0274 0102030405060708090a0b0c0d0e0f10
        0000 01 00000001 0003 02 0261 0262 00 01 00 00 01 00 02 0000 00";

    fn topic() -> NewTopic {
        NewTopic {
            name: "t".into(),
            assignments: vec![(0, vec![1, 2])],
            configs: vec![("a".into(), "b".into())],
        }
    }

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        // v2: ["t", partitions -1, rf -1, [0 → [1, 2]], ["a"="b"]], timeout 30000, validate.
        let v2 = encoded(|w| encode_request(w, 2, &[topic()], 30_000, true));
        assert_eq!(
            v2,
            unhex(
                "00000001 0001 74 ffffffff ffff 00000001 00000000 00000002 00000001 00000002
                 00000001 0001 61 0001 62 00007530 01"
            )
        );
        // v5: compact, a tag section after each assignment, config, topic and the request.
        let v5 = encoded(|w| encode_request(w, 5, &[topic()], 30_000, false));
        assert_eq!(
            v5,
            unhex(
                "02 0274 ffffffff ffff 02 00000000 03 00000001 00000002 00
                 02 0261 0262 00 00 00007530 00 00"
            )
        );
        for v in 2..=7 {
            let bytes = encoded(|w| encode_request(w, v, &[topic()], 1, false));
            assert_eq!(
                decode_create_topics_request(&bytes, v).unwrap(),
                ["t"],
                "v{v}"
            );
        }
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let created = |message: Option<&str>, topic_id| CreatedTopic {
            name: "t".into(),
            error: ErrorCode::NONE,
            message: message.map(String::from),
            topic_id,
        };
        // v2: throttle, ["t", error 0, message null].
        let v2 = unhex("00000000 00000001 0001 74 0000 ffff");
        assert_eq!(decode_response(&v2, 2).unwrap(), [created(None, None)]);
        every_cut_fails(&v2, |b| decode_response(b, 2));
        let v7 = unhex(RESPONSE_V7);
        let id = Uuid(std::array::from_fn(|i| i as u8 + 1));
        let want = created(Some(""), Some(id));
        assert_eq!(decode_response(&v7, 7).unwrap(), [want]);
        every_cut_fails(&v7, |b| decode_response(b, 7));
    }

    #[test]
    fn the_listeners_refusal_decodes_as_a_topic_error() {
        let names = ["t".to_string()];
        let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
        for v in 2..=7 {
            let bytes = encoded(|w| encode_create_topics_error(w, v, &names, e, "ro"));
            let want = CreatedTopic {
                name: "t".into(),
                error: e,
                message: Some("ro".into()),
                topic_id: None,
            };
            assert_eq!(decode_response(&bytes, v).unwrap(), [want], "v{v}");
        }
    }
}
