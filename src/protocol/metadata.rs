//! Metadata (key 3), v1–12; flexible from v9.
//!
//! Request: Topics ARRAY{TopicId UUID (v10+), Name STRING}, AllowAutoTopicCreation BOOL (v4+),
//! IncludeClusterAuthorizedOperations BOOL (v8–10), IncludeTopicAuthorizedOperations BOOL (v8+).
//! Response: ThrottleTimeMs (v3+), Brokers ARRAY{NodeId, Host, Port, Rack (v1+)}, ClusterId
//! (v2+), ControllerId (v1+), Topics ARRAY{ErrorCode, Name, TopicId (v10+), IsInternal (v1+),
//! Partitions ARRAY{ErrorCode, PartitionIndex, LeaderId, LeaderEpoch (v7+), ReplicaNodes,
//! IsrNodes, OfflineReplicas (v5+)}, TopicAuthorizedOperations (v8+)},
//! ClusterAuthorizedOperations (v8–10), ErrorCode (v13+, not spoken here).

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

pub fn encode_request(w: &mut Writer, version: i16, topics: &[String]) {
    let flexible = version >= 9;
    w.array_len(topics.len(), flexible);
    for t in topics {
        if version >= 10 {
            w.uuid(&[0; 16]);
        }
        w.string(Some(t), flexible);
        w.empty_tags(flexible);
    }
    if version >= 4 {
        w.bool(false); // never create topics: a follower only reads
    }
    if (8..=10).contains(&version) {
        w.bool(false);
    }
    if version >= 8 {
        w.bool(false);
    }
    w.empty_tags(flexible);
}

/// One topic a Metadata request names: by name, or (v10+) by id with a null name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestedTopic {
    pub topic_id: [u8; 16],
    pub name: Option<String>,
}

/// Decodes a request's topic list: `None` is a null list (v1+: every topic), an empty list
/// asks for none. The flags that follow (auto-creation, authorized operations) are not
/// needed by a read-only broker, which never creates topics and reports no operations.
pub fn decode_request(body: &[u8], version: i16) -> DecodeResult<Option<Vec<RequestedTopic>>> {
    let flexible = version >= 9;
    let mut r = Reader::new(body);
    let Some(n) = r.array_len(flexible, 1, "Metadata topics")? else {
        return Ok(None);
    };
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let topic_id = if version >= 10 {
            r.uuid("Metadata topic_id")?
        } else {
            [0; 16]
        };
        let name = r.nullable_string(flexible, "Metadata topic name")?;
        if flexible {
            r.skip_tagged_fields("Metadata topic tags")?;
        }
        topics.push(RequestedTopic { topic_id, name });
    }
    Ok(Some(topics))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub error: ErrorCode,
    pub partition: i32,
    pub leader_id: i32,
    /// -1 below v7.
    pub leader_epoch: i32,
    /// The brokers holding a replica, the leader among them.
    pub replicas: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub error: ErrorCode,
    pub name: String,
    /// All zero below v10, or when the broker does not know topic ids.
    pub topic_id: [u8; 16],
    pub partitions: Vec<PartitionMetadata>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataResponse {
    pub brokers: Vec<Broker>,
    /// `None` below v2, or when the broker reports none.
    pub cluster_id: Option<String>,
    pub topics: Vec<TopicMetadata>,
}

fn skip_int32_array(r: &mut Reader<'_>, flexible: bool, what: &str) -> DecodeResult<()> {
    let n = r.array_count(flexible, 4, what)?;
    r.take(n * 4, what)?;
    Ok(())
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<MetadataResponse> {
    let flexible = version >= 9;
    let mut r = Reader::new(body);
    if version >= 3 {
        r.i32("Metadata throttle_time_ms")?;
    }
    let nb = r.array_count(flexible, 10, "Metadata brokers")?;
    let mut brokers = Vec::with_capacity(nb);
    for _ in 0..nb {
        let node_id = r.i32("Metadata broker node_id")?;
        let host = r.string(flexible, "Metadata broker host")?;
        let port = r.i32("Metadata broker port")?;
        r.nullable_string(flexible, "Metadata broker rack")?;
        if flexible {
            r.skip_tagged_fields("Metadata broker tags")?;
        }
        brokers.push(Broker {
            node_id,
            host,
            port,
        });
    }
    let cluster_id = if version >= 2 {
        r.nullable_string(flexible, "Metadata cluster_id")?
    } else {
        None
    };
    r.i32("Metadata controller_id")?;
    let nt = r.array_count(flexible, 4, "Metadata topics")?;
    let mut topics = Vec::with_capacity(nt);
    for _ in 0..nt {
        let error = ErrorCode(r.i16("Metadata topic error_code")?);
        let name = r
            .nullable_string(flexible, "Metadata topic name")?
            .unwrap_or_default();
        let topic_id = if version >= 10 {
            r.uuid("Metadata topic_id")?
        } else {
            [0; 16]
        };
        r.bool("Metadata is_internal")?;
        let np = r.array_count(flexible, 14, "Metadata partitions")?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            let error = ErrorCode(r.i16("Metadata partition error_code")?);
            let partition = r.i32("Metadata partition_index")?;
            let leader_id = r.i32("Metadata leader_id")?;
            let leader_epoch = if version >= 7 {
                r.i32("Metadata leader_epoch")?
            } else {
                -1
            };
            let n = r.array_count(flexible, 4, "Metadata replica_nodes")?;
            let mut replicas = Vec::with_capacity(n);
            for _ in 0..n {
                replicas.push(r.i32("Metadata replica_nodes")?);
            }
            skip_int32_array(&mut r, flexible, "Metadata isr_nodes")?;
            if version >= 5 {
                skip_int32_array(&mut r, flexible, "Metadata offline_replicas")?;
            }
            if flexible {
                r.skip_tagged_fields("Metadata partition tags")?;
            }
            partitions.push(PartitionMetadata {
                error,
                partition,
                leader_id,
                leader_epoch,
                replicas,
            });
        }
        if version >= 8 {
            r.i32("Metadata topic_authorized_operations")?;
        }
        if flexible {
            r.skip_tagged_fields("Metadata topic tags")?;
        }
        topics.push(TopicMetadata {
            error,
            name,
            topic_id,
            partitions,
        });
    }
    if (8..=10).contains(&version) {
        r.i32("Metadata cluster_authorized_operations")?;
    }
    if flexible {
        r.skip_tagged_fields("Metadata tags")?;
    }
    Ok(MetadataResponse {
        brokers,
        cluster_id,
        topics,
    })
}

/// Encodes a response; the in-process test leader and the round-trip tests use it.
pub fn encode_response(w: &mut Writer, version: i16, resp: &MetadataResponse) {
    let flexible = version >= 9;
    if version >= 3 {
        w.i32(0);
    }
    w.array_len(resp.brokers.len(), flexible);
    for b in &resp.brokers {
        w.i32(b.node_id)
            .string(Some(&b.host), flexible)
            .i32(b.port)
            .string(None, flexible);
        w.empty_tags(flexible);
    }
    if version >= 2 {
        w.string(resp.cluster_id.as_deref(), flexible);
    }
    w.i32(resp.brokers.first().map_or(-1, |b| b.node_id));
    w.array_len(resp.topics.len(), flexible);
    for t in &resp.topics {
        w.i16(t.error.0).string(Some(&t.name), flexible);
        if version >= 10 {
            w.uuid(&t.topic_id);
        }
        w.bool(false);
        w.array_len(t.partitions.len(), flexible);
        for p in &t.partitions {
            w.i16(p.error.0).i32(p.partition).i32(p.leader_id);
            if version >= 7 {
                w.i32(p.leader_epoch);
            }
            w.array_len(p.replicas.len(), flexible);
            for r in &p.replicas {
                w.i32(*r);
            }
            w.array_len(1, flexible).i32(p.leader_id);
            if version >= 5 {
                w.array_len(0, flexible);
            }
            w.empty_tags(flexible);
        }
        if version >= 8 {
            w.i32(0);
        }
        w.empty_tags(flexible);
    }
    if (8..=10).contains(&version) {
        w.i32(0);
    }
    w.empty_tags(flexible);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MetadataResponse {
        MetadataResponse {
            brokers: vec![
                Broker {
                    node_id: 1,
                    host: "127.0.0.1".into(),
                    port: 9092,
                },
                Broker {
                    node_id: 2,
                    host: "127.0.0.1".into(),
                    port: 9093,
                },
            ],
            cluster_id: Some("cluster-a".into()),
            topics: vec![TopicMetadata {
                error: ErrorCode::NONE,
                name: "orders".into(),
                topic_id: [7; 16],
                partitions: vec![
                    PartitionMetadata {
                        error: ErrorCode::NONE,
                        partition: 0,
                        leader_id: 1,
                        leader_epoch: 3,
                        replicas: vec![1],
                    },
                    PartitionMetadata {
                        error: ErrorCode::NONE,
                        partition: 1,
                        leader_id: 2,
                        leader_epoch: 4,
                        replicas: vec![2, 1],
                    },
                ],
            }],
        }
    }

    #[test]
    fn response_roundtrip_every_version() {
        for v in 1..=12 {
            let mut resp = sample();
            if v < 7 {
                for p in &mut resp.topics[0].partitions {
                    p.leader_epoch = -1;
                }
            }
            if v < 2 {
                resp.cluster_id = None;
            }
            if v < 10 {
                resp.topics[0].topic_id = [0; 16];
            }
            let mut w = Writer::new();
            encode_response(&mut w, v, &resp);
            assert_eq!(decode_response(&w.buf, v).unwrap(), resp, "version {v}");
        }
    }

    #[test]
    fn truncated_response_is_an_error_at_every_cut() {
        let mut w = Writer::new();
        encode_response(&mut w, 12, &sample());
        for cut in 0..w.buf.len() {
            assert!(decode_response(&w.buf[..cut], 12).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn request_decodes_what_encode_request_writes_at_every_version() {
        for v in 1..=12 {
            let mut w = Writer::new();
            encode_request(&mut w, v, &["orders".to_string(), "t".to_string()]);
            let topics = decode_request(&w.buf, v).unwrap().unwrap();
            let names: Vec<_> = topics.iter().map(|t| t.name.as_deref()).collect();
            assert_eq!(names, [Some("orders"), Some("t")], "version {v}");
        }
        // A null list (v1+): every topic; MetadataRequest.json v12, null topics, no
        // auto-creation, no authorized operations: `00 00 00`.
        assert_eq!(decode_request(&[0, 0, 0], 12).unwrap(), None);
        assert_eq!(decode_request(&[0xff, 0xff, 0xff, 0xff], 1).unwrap(), None);
        // An empty list asks for none.
        assert_eq!(decode_request(&[1, 0, 0], 12).unwrap(), Some(Vec::new()));
        // v10+: a topic by id, its name null.
        let mut bytes = vec![2u8];
        bytes.extend_from_slice(&[9; 16]);
        bytes.extend_from_slice(&[0, 0, 0, 0]);
        let t = decode_request(&bytes, 10).unwrap().unwrap();
        assert_eq!(
            t,
            [RequestedTopic {
                topic_id: [9; 16],
                name: None
            }]
        );
        assert!(decode_request(&[0, 0, 0, 5], 1).is_err());
    }

    #[test]
    fn request_v12_golden_bytes() {
        let mut w = Writer::new();
        encode_request(&mut w, 12, &["t".to_string()]);
        let mut expect = vec![2u8];
        expect.extend_from_slice(&[0; 16]);
        expect.extend_from_slice(&[2, b't', 0, 0, 0, 0]);
        assert_eq!(w.buf, expect);
    }
}
