//! ListOffsets (key 2), v1–7; flexible from v6.
//!
//! Request: ReplicaId INT32, IsolationLevel INT8 (v2+), Topics ARRAY{Name, Partitions
//! ARRAY{PartitionIndex INT32, CurrentLeaderEpoch INT32 (v4+), Timestamp INT64}}.
//! Response: ThrottleTimeMs (v2+), Topics ARRAY{Name, Partitions ARRAY{PartitionIndex,
//! ErrorCode, Timestamp INT64, Offset INT64, LeaderEpoch INT32 (v4+)}}.
//! Timestamps: -1 latest (the high watermark for a consumer), -2 earliest.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;
/// The record with the largest timestamp (v7+, KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsPartition {
    pub partition: i32,
    pub current_leader_epoch: i32,
    pub timestamp: i64,
}

pub fn encode_request(
    w: &mut Writer,
    version: i16,
    isolation_level: i8,
    topics: &[(String, Vec<ListOffsetsPartition>)],
) {
    let flexible = version >= 6;
    w.i32(-1);
    if version >= 2 {
        w.i8(isolation_level);
    }
    w.array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible);
        w.array_len(parts.len(), flexible);
        for p in parts {
            w.i32(p.partition);
            if version >= 4 {
                w.i32(p.current_leader_epoch);
            }
            w.i64(p.timestamp);
            w.empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// A decoded request: replica id, isolation level (0 below v2), and per topic the
/// partitions asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    pub replica_id: i32,
    pub isolation_level: i8,
    pub topics: Vec<(String, Vec<ListOffsetsPartition>)>,
}

pub fn decode_request(body: &[u8], version: i16) -> DecodeResult<ListOffsetsRequest> {
    let flexible = version >= 6;
    let mut r = Reader::new(body);
    let replica_id = r.i32("ListOffsets replica_id")?;
    let isolation_level = if version >= 2 {
        r.i8("ListOffsets isolation_level")?
    } else {
        0
    };
    let nt = r.array_count(flexible, 3, "ListOffsets topics")?;
    let mut topics = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, "ListOffsets topic")?;
        let np = r.array_count(flexible, 12, "ListOffsets partitions")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("ListOffsets partition")?;
            let current_leader_epoch = if version >= 4 {
                r.i32("ListOffsets current_leader_epoch")?
            } else {
                -1
            };
            let timestamp = r.i64("ListOffsets timestamp")?;
            if flexible {
                r.skip_tagged_fields("ListOffsets partition tags")?;
            }
            parts.push(ListOffsetsPartition {
                partition,
                current_leader_epoch,
                timestamp,
            });
        }
        if flexible {
            r.skip_tagged_fields("ListOffsets topic tags")?;
        }
        topics.push((name, parts));
    }
    Ok(ListOffsetsRequest {
        replica_id,
        isolation_level,
        topics,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsPartitionResponse {
    pub partition: i32,
    pub error: ErrorCode,
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

pub fn decode_response(
    body: &[u8],
    version: i16,
) -> DecodeResult<Vec<(String, Vec<ListOffsetsPartitionResponse>)>> {
    let flexible = version >= 6;
    let mut r = Reader::new(body);
    if version >= 2 {
        r.i32("ListOffsets throttle_time_ms")?;
    }
    let nt = r.array_count(flexible, 3, "ListOffsets topics")?;
    let mut out = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, "ListOffsets topic name")?;
        let np = r.array_count(flexible, 22, "ListOffsets partitions")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("ListOffsets partition_index")?;
            let error = ErrorCode(r.i16("ListOffsets error_code")?);
            let timestamp = r.i64("ListOffsets timestamp")?;
            let offset = r.i64("ListOffsets offset")?;
            let leader_epoch = if version >= 4 {
                r.i32("ListOffsets leader_epoch")?
            } else {
                -1
            };
            if flexible {
                r.skip_tagged_fields("ListOffsets partition tags")?;
            }
            parts.push(ListOffsetsPartitionResponse {
                partition,
                error,
                timestamp,
                offset,
                leader_epoch,
            });
        }
        if flexible {
            r.skip_tagged_fields("ListOffsets topic tags")?;
        }
        out.push((name, parts));
    }
    if flexible {
        r.skip_tagged_fields("ListOffsets tags")?;
    }
    Ok(out)
}

pub fn encode_response(
    w: &mut Writer,
    version: i16,
    topics: &[(String, Vec<ListOffsetsPartitionResponse>)],
) {
    let flexible = version >= 6;
    if version >= 2 {
        w.i32(0);
    }
    w.array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible);
        w.array_len(parts.len(), flexible);
        for p in parts {
            w.i32(p.partition)
                .i16(p.error.0)
                .i64(p.timestamp)
                .i64(p.offset);
            if version >= 4 {
                w.i32(p.leader_epoch);
            }
            w.empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_roundtrip_and_truncation() {
        for v in 1..=7 {
            let topics = vec![(
                "t".to_string(),
                vec![ListOffsetsPartitionResponse {
                    partition: 3,
                    error: ErrorCode::NONE,
                    timestamp: -1,
                    offset: 42,
                    leader_epoch: if v >= 4 { 7 } else { -1 },
                }],
            )];
            let mut w = Writer::new();
            encode_response(&mut w, v, &topics);
            assert_eq!(decode_response(&w.buf, v).unwrap(), topics);
            for cut in 0..w.buf.len() {
                assert!(decode_response(&w.buf[..cut], v).is_err());
            }
        }
    }

    #[test]
    fn request_decodes_what_encode_request_writes_at_every_version() {
        let p = ListOffsetsPartition {
            partition: 2,
            current_leader_epoch: 5,
            timestamp: 1_700_000_000_000,
        };
        for v in 1..=7 {
            let mut w = Writer::new();
            encode_request(&mut w, v, 1, &[("t".to_string(), vec![p.clone()])]);
            let req = decode_request(&w.buf, v).unwrap();
            let mut want = p.clone();
            if v < 4 {
                want.current_leader_epoch = -1;
            }
            assert_eq!(req.replica_id, -1);
            assert_eq!(req.isolation_level, if v >= 2 { 1 } else { 0 });
            assert_eq!(req.topics, vec![("t".to_string(), vec![want])], "v{v}");
            for cut in 0..w.buf.len().saturating_sub(1) {
                assert!(decode_request(&w.buf[..cut], v).is_err(), "v{v} cut {cut}");
            }
        }
    }

    #[test]
    fn request_v1_golden_bytes() {
        let mut w = Writer::new();
        let p = ListOffsetsPartition {
            partition: 0,
            current_leader_epoch: -1,
            timestamp: EARLIEST,
        };
        encode_request(&mut w, 1, 0, &[("t".to_string(), vec![p])]);
        let expect: Vec<u8> = [
            &(-1i32).to_be_bytes()[..], // replica id
            &1i32.to_be_bytes(),        // one topic
            &[0, 1, b't'],              // name
            &1i32.to_be_bytes(),        // one partition
            &0i32.to_be_bytes(),        // partition 0
            &(-2i64).to_be_bytes(),     // earliest
        ]
        .concat();
        assert_eq!(w.buf, expect);
    }
}
