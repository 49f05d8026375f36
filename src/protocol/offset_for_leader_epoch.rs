//! OffsetForLeaderEpoch (key 23), v2–4; flexible from v4.
//!
//! Request: ReplicaId INT32 (v3+; -1 for a consumer), Topics ARRAY{Topic, Partitions
//! ARRAY{Partition INT32, CurrentLeaderEpoch INT32, LeaderEpoch INT32}}.
//! Response: ThrottleTimeMs INT32, Topics ARRAY{Topic, Partitions ARRAY{ErrorCode INT16,
//! Partition INT32, LeaderEpoch INT32, EndOffset INT64}}.
//! The leader answers the largest epoch ≤ the one asked and the start offset of the next
//! higher epoch (its log end if it is the latest); -1/-1 when it does not know.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRequest {
    pub partition: i32,
    pub current_leader_epoch: i32,
    pub leader_epoch: i32,
}

pub fn encode_request(w: &mut Writer, version: i16, topics: &[(String, Vec<EpochRequest>)]) {
    let flexible = version >= 4;
    if version >= 3 {
        w.i32(-1);
    }
    w.array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible);
        w.array_len(parts.len(), flexible);
        for p in parts {
            w.i32(p.partition)
                .i32(p.current_leader_epoch)
                .i32(p.leader_epoch);
            w.empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// Decodes a request (the replica id, v3+, is not needed: every asker is answered alike).
pub fn decode_request(body: &[u8], version: i16) -> DecodeResult<Vec<(String, Vec<EpochRequest>)>> {
    let flexible = version >= 4;
    let mut r = Reader::new(body);
    if version >= 3 {
        r.i32("OffsetForLeaderEpoch replica_id")?;
    }
    let nt = r.array_count(flexible, 3, "OffsetForLeaderEpoch topics")?;
    let mut topics = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, "OffsetForLeaderEpoch topic")?;
        let np = r.array_count(flexible, 12, "OffsetForLeaderEpoch partitions")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("OffsetForLeaderEpoch partition")?;
            let current_leader_epoch = r.i32("OffsetForLeaderEpoch current_leader_epoch")?;
            let leader_epoch = r.i32("OffsetForLeaderEpoch leader_epoch")?;
            if flexible {
                r.skip_tagged_fields("OffsetForLeaderEpoch partition tags")?;
            }
            parts.push(EpochRequest {
                partition,
                current_leader_epoch,
                leader_epoch,
            });
        }
        if flexible {
            r.skip_tagged_fields("OffsetForLeaderEpoch topic tags")?;
        }
        topics.push((name, parts));
    }
    Ok(topics)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub error: ErrorCode,
    pub partition: i32,
    pub leader_epoch: i32,
    pub end_offset: i64,
}

pub fn decode_response(
    body: &[u8],
    version: i16,
) -> DecodeResult<Vec<(String, Vec<EpochEndOffset>)>> {
    let flexible = version >= 4;
    let mut r = Reader::new(body);
    r.i32("OffsetForLeaderEpoch throttle_time_ms")?;
    let nt = r.array_count(flexible, 3, "OffsetForLeaderEpoch topics")?;
    let mut out = Vec::with_capacity(nt);
    for _ in 0..nt {
        let name = r.string(flexible, "OffsetForLeaderEpoch topic")?;
        let np = r.array_count(flexible, 18, "OffsetForLeaderEpoch partitions")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let error = ErrorCode(r.i16("OffsetForLeaderEpoch error_code")?);
            let partition = r.i32("OffsetForLeaderEpoch partition")?;
            let leader_epoch = r.i32("OffsetForLeaderEpoch leader_epoch")?;
            let end_offset = r.i64("OffsetForLeaderEpoch end_offset")?;
            if flexible {
                r.skip_tagged_fields("OffsetForLeaderEpoch partition tags")?;
            }
            parts.push(EpochEndOffset {
                error,
                partition,
                leader_epoch,
                end_offset,
            });
        }
        if flexible {
            r.skip_tagged_fields("OffsetForLeaderEpoch topic tags")?;
        }
        out.push((name, parts));
    }
    if flexible {
        r.skip_tagged_fields("OffsetForLeaderEpoch tags")?;
    }
    Ok(out)
}

pub fn encode_response(w: &mut Writer, version: i16, topics: &[(String, Vec<EpochEndOffset>)]) {
    let flexible = version >= 4;
    w.i32(0);
    w.array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible);
        w.array_len(parts.len(), flexible);
        for p in parts {
            w.i16(p.error.0)
                .i32(p.partition)
                .i32(p.leader_epoch)
                .i64(p.end_offset);
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
    fn request_decodes_what_encode_request_writes_at_every_version() {
        let topics = vec![(
            "t".to_string(),
            vec![EpochRequest {
                partition: 0,
                current_leader_epoch: 3,
                leader_epoch: 2,
            }],
        )];
        for v in 2..=4 {
            let mut w = Writer::new();
            encode_request(&mut w, v, &topics);
            assert_eq!(decode_request(&w.buf, v).unwrap(), topics, "v{v}");
            for cut in 0..w.buf.len().saturating_sub(1) {
                assert!(decode_request(&w.buf[..cut], v).is_err(), "v{v} cut {cut}");
            }
        }
        // OffsetForLeaderEpochRequest.json v4: replica_id -1, topics [t: [p0 cur 3 epoch 2]].
        let v4 = [
            0xff, 0xff, 0xff, 0xff, 2, 2, b't', 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0,
        ];
        assert_eq!(decode_request(&v4, 4).unwrap(), topics);
    }

    #[test]
    fn response_roundtrip_and_truncation() {
        for v in 2..=4 {
            let topics = vec![(
                "t".to_string(),
                vec![EpochEndOffset {
                    error: ErrorCode::NONE,
                    partition: 1,
                    leader_epoch: 4,
                    end_offset: 90,
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
}
