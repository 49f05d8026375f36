//! Produce (key 0) v0–11, flexible from v9, and InitProducerId (key 22) v0–5, flexible from
//! v2: what a refusal needs — the request decoded as far as its answer echoes it, and an
//! answer that carries one error everywhere (`ProduceRequest.json`, `ProduceResponse.json`,
//! `InitProducerId{Request,Response}.json`).
//!
//! Produce request: TransactionalId NULLABLE_STRING (v3+) · Acks INT16 · TimeoutMs INT32 ·
//! TopicData ARRAY{Name STRING, PartitionData ARRAY{Index INT32, Records RECORDS}}.
//! Produce response: Responses ARRAY{Name STRING, PartitionResponses ARRAY{Index INT32,
//! ErrorCode INT16, BaseOffset INT64, LogAppendTimeMs INT64 (v2+), LogStartOffset INT64
//! (v5+), RecordErrors ARRAY{BatchIndex INT32, BatchIndexErrorMessage NULLABLE_STRING}
//! (v8+), ErrorMessage NULLABLE_STRING (v8+)}} · ThrottleTimeMs INT32 (v1+) — the throttle
//! time comes *after* the responses. Tagged fields (CurrentLeader, NodeEndpoints, v10+) are
//! left out: they only help a client find a new leader.
//! A request with Acks 0 gets no response at all: the producer does not read one.
//!
//! InitProducerId request: TransactionalId NULLABLE_STRING · TransactionTimeoutMs INT32 ·
//! ProducerId INT64 (v3+) · ProducerEpoch INT16 (v3+). Response: ThrottleTimeMs INT32 ·
//! ErrorCode INT16 · ProducerId INT64 · ProducerEpoch INT16.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::read_topic_partitions;

const PRODUCE_FLEXIBLE: i16 = 9;
const INIT_PRODUCER_ID_FLEXIBLE: i16 = 2;

/// What a refusal needs of a Produce request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    pub acks: i16,
    /// Each topic's partitions, in request order.
    pub topics: Vec<(String, Vec<i32>)>,
}

pub fn decode_produce_request(body: &[u8], version: i16) -> DecodeResult<ProduceRequest> {
    let flexible = version >= PRODUCE_FLEXIBLE;
    let mut r = Reader::new(body);
    let transactional_id = if version >= 3 {
        r.nullable_string(flexible, "Produce transactional_id")?
    } else {
        None
    };
    let acks = r.i16("Produce acks")?;
    r.i32("Produce timeout_ms")?;
    // Smallest partition: its index and a records length.
    let min_part = if flexible { 6 } else { 8 };
    let topics = read_topic_partitions(&mut r, flexible, min_part, "Produce topics", |r| {
        r.nullable_bytes(flexible, "Produce records").map(drop)
    })?;
    if flexible {
        r.skip_tagged_fields("Produce tags")?;
    }
    Ok(ProduceRequest {
        transactional_id,
        acks,
        topics,
    })
}

/// Every partition of `topics` refused with `error` (and `message` where the version has an
/// error message, v8+), nothing appended: offsets and times are -1.
pub fn encode_produce_error(
    w: &mut Writer,
    version: i16,
    topics: &[(String, Vec<i32>)],
    error: ErrorCode,
    message: &str,
) {
    let flexible = version >= PRODUCE_FLEXIBLE;
    w.array_len(topics.len(), flexible);
    for (name, parts) in topics {
        w.string(Some(name), flexible);
        w.array_len(parts.len(), flexible);
        for &p in parts {
            w.i32(p).i16(error.0).i64(-1);
            if version >= 2 {
                w.i64(-1);
            }
            if version >= 5 {
                w.i64(-1);
            }
            if version >= 8 {
                w.array_len(0, flexible).string(Some(message), flexible);
            }
            w.empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    if version >= 1 {
        w.i32(0);
    }
    w.empty_tags(flexible);
}

/// The transactional id of an InitProducerId request (`None` for an idempotent producer).
pub fn decode_init_producer_id_request(body: &[u8], version: i16) -> DecodeResult<Option<String>> {
    let flexible = version >= INIT_PRODUCER_ID_FLEXIBLE;
    let mut r = Reader::new(body);
    let id = r.nullable_string(flexible, "InitProducerId transactional_id")?;
    r.i32("InitProducerId transaction_timeout_ms")?;
    if version >= 3 {
        r.i64("InitProducerId producer_id")?;
        r.i16("InitProducerId producer_epoch")?;
    }
    if flexible {
        r.skip_tagged_fields("InitProducerId tags")?;
    }
    Ok(id)
}

/// No producer id: -1 and epoch -1, as Kafka's error answer has them.
pub fn encode_init_producer_id_error(w: &mut Writer, version: i16, error: ErrorCode) {
    w.i32(0).i16(error.0).i64(-1).i16(-1);
    w.empty_tags(version >= INIT_PRODUCER_ID_FLEXIBLE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::batch::tests::unhex;

    fn request(version: i16, transactional_id: Option<&str>, acks: i16) -> Vec<u8> {
        let flexible = version >= PRODUCE_FLEXIBLE;
        let mut w = Writer::new();
        if version >= 3 {
            w.string(transactional_id, flexible);
        }
        w.i16(acks).i32(30_000).array_len(1, flexible);
        w.string(Some("t"), flexible).array_len(2, flexible);
        for p in [0, 3] {
            w.i32(p)
                .bytes(Some(&[1, 2, 3]), flexible)
                .empty_tags(flexible);
        }
        w.empty_tags(flexible).empty_tags(flexible);
        w.buf
    }

    #[test]
    fn produce_request_is_decoded_at_every_version() {
        for version in 0..=11 {
            let txn = if version >= 3 { Some("tx") } else { None };
            let req = decode_produce_request(&request(version, txn, -1), version).unwrap();
            assert_eq!(req.transactional_id.as_deref(), txn, "v{version}");
            assert_eq!(req.acks, -1);
            assert_eq!(req.topics, vec![("t".to_string(), vec![0, 3])]);
        }
        let bytes = request(9, None, 0);
        assert!(decode_produce_request(&bytes[..bytes.len() - 2], 9).is_err());
    }

    #[test]
    fn produce_error_golden_bytes() {
        let topics = vec![("t".to_string(), vec![0])];
        let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
        let hex = |version| {
            let mut w = Writer::new();
            encode_produce_error(&mut w, version, &topics, e, "ro");
            w.buf
        };
        // v0: [1 topic] "t" [1 partition] index 0, error 29, base offset -1.
        assert_eq!(
            hex(0),
            unhex("00000001 0001 74 00000001 00000000 001d ffffffffffffffff")
        );
        // v7: + log append time, log start offset; throttle time after the responses.
        assert_eq!(
            hex(7),
            unhex(
                "00000001 0001 74 00000001 00000000 001d ffffffffffffffff
                 ffffffffffffffff ffffffffffffffff 00000000"
            )
        );
        // v8: + RecordErrors [] and ErrorMessage "ro".
        assert_eq!(
            hex(8),
            unhex(
                "00000001 0001 74 00000001 00000000 001d ffffffffffffffff
                 ffffffffffffffff ffffffffffffffff 00000000 0002 726f 00000000"
            )
        );
        // v11: compact forms, a tag section per partition, topic and body.
        assert_eq!(
            hex(11),
            unhex(
                "02 02 74 02 00000000 001d ffffffffffffffff ffffffffffffffff
                 ffffffffffffffff 01 03 726f 00 00 00000000 00"
            )
        );
    }

    #[test]
    fn init_producer_id_roundtrip_and_golden_bytes() {
        for version in 0..=5 {
            let flexible = version >= INIT_PRODUCER_ID_FLEXIBLE;
            let mut w = Writer::new();
            w.string(Some("tx"), flexible).i32(60_000);
            if version >= 3 {
                w.i64(-1).i16(-1);
            }
            w.empty_tags(flexible);
            let id = decode_init_producer_id_request(&w.buf, version).unwrap();
            assert_eq!(id.as_deref(), Some("tx"), "v{version}");
        }
        let mut w = Writer::new();
        encode_init_producer_id_error(&mut w, 0, ErrorCode::CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(w.buf, unhex("00000000 001f ffffffffffffffff ffff"));
        let mut w = Writer::new();
        encode_init_producer_id_error(&mut w, 4, ErrorCode(53));
        assert_eq!(w.buf, unhex("00000000 0035 ffffffffffffffff ffff 00"));
    }
}
