//! DescribeProducers (key 61), v0, flexible: the producers a partition leader holds state for,
//! each with its open transaction if any (`DescribeProducers{Request,Response}.json`).
//!
//! Request: Topics ARRAY{Name STRING, PartitionIndexes ARRAY INT32}.
//! Response: ThrottleTimeMs INT32 · Topics ARRAY{Name STRING, Partitions
//! ARRAY{PartitionIndex INT32, ErrorCode INT16, ErrorMessage NULLABLE_STRING, ActiveProducers
//! ARRAY{ProducerId INT64, ProducerEpoch INT32, LastSequence INT32, LastTimestamp INT64,
//! CoordinatorEpoch INT32, CurrentTxnStartOffset INT64}}}.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// One producer's state on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction, -1 when none is open.
    pub current_txn_start_offset: i64,
}

/// One partition's producers, or the error that kept the leader from listing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProducers {
    pub partition: i32,
    pub error: ErrorCode,
    pub producers: Vec<ProducerState>,
}

pub fn encode_request(w: &mut Writer, topics: &[(String, Vec<i32>)]) {
    w.array_len(topics.len(), true);
    for (topic, partitions) in topics {
        w.string(Some(topic), true)
            .array_len(partitions.len(), true);
        for &p in partitions {
            w.i32(p);
        }
        w.empty_tags(true);
    }
    w.empty_tags(true);
}

fn read_producer(r: &mut Reader<'_>) -> DecodeResult<ProducerState> {
    let state = ProducerState {
        producer_id: r.i64("DescribeProducers producer_id")?,
        producer_epoch: r.i32("DescribeProducers producer_epoch")?,
        last_sequence: r.i32("DescribeProducers last_sequence")?,
        last_timestamp: r.i64("DescribeProducers last_timestamp")?,
        coordinator_epoch: r.i32("DescribeProducers coordinator_epoch")?,
        current_txn_start_offset: r.i64("DescribeProducers current_txn_start_offset")?,
    };
    r.skip_tagged_fields("DescribeProducers producer tags")?;
    Ok(state)
}

/// Each topic's partitions (the error message, if any, is dropped: the code says it).
pub fn decode_response(body: &[u8]) -> DecodeResult<Vec<(String, Vec<PartitionProducers>)>> {
    let mut r = Reader::new(body);
    r.i32("DescribeProducers throttle_time_ms")?;
    let nt = r.array_count(true, 3, "DescribeProducers topics")?;
    let mut out = Vec::with_capacity(nt);
    for _ in 0..nt {
        let topic = r.string(true, "DescribeProducers topic")?;
        // The smallest partition: index, error, message, producers and tags.
        let np = r.array_count(true, 9, "DescribeProducers partitions")?;
        let mut partitions = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("DescribeProducers partition_index")?;
            let error = ErrorCode(r.i16("DescribeProducers error_code")?);
            r.nullable_string(true, "DescribeProducers error_message")?;
            let n = r.array_count(true, 37, "DescribeProducers active_producers")?;
            let producers = (0..n)
                .map(|_| read_producer(&mut r))
                .collect::<DecodeResult<_>>()?;
            r.skip_tagged_fields("DescribeProducers partition tags")?;
            partitions.push(PartitionProducers {
                partition,
                error,
                producers,
            });
        }
        r.skip_tagged_fields("DescribeProducers topic tags")?;
        out.push((topic, partitions));
    }
    r.skip_tagged_fields("DescribeProducers tags")?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::record::batch::tests::unhex;

    /// A response: throttle, ["t" [0: error 0, message null, [producer 7 epoch 1 sequence 9
    /// timestamp 1000 coordinator epoch 3 txn start 40, tags], tags; 1: error 6, message "x",
    /// [], tags], tags], tags.
    pub(crate) const RESPONSE: &str = "00000000 02 0274 03
        00000000 0000 00 02 0000000000000007 00000001 00000009 00000000000003e8 00000003
        0000000000000028 00 00
        00000001 0006 0278 01 00
        00 00";

    #[test]
    fn request_golden_bytes() {
        // [topic "t" [0, 2] tags] tags.
        assert_eq!(
            encoded(|w| encode_request(w, &[("t".into(), vec![0, 2])])),
            unhex("02 0274 03 00000000 00000002 00 00")
        );
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let bytes = unhex(RESPONSE);
        let producer = ProducerState {
            producer_id: 7,
            producer_epoch: 1,
            last_sequence: 9,
            last_timestamp: 1000,
            coordinator_epoch: 3,
            current_txn_start_offset: 40,
        };
        let want = vec![(
            "t".to_string(),
            vec![
                PartitionProducers {
                    partition: 0,
                    error: ErrorCode::NONE,
                    producers: vec![producer],
                },
                PartitionProducers {
                    partition: 1,
                    error: ErrorCode::NOT_LEADER_OR_FOLLOWER,
                    producers: Vec::new(),
                },
            ],
        )];
        assert_eq!(decode_response(&bytes).unwrap(), want);
        every_cut_fails(&bytes, decode_response);
    }
}
