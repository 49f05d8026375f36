//! WriteTxnMarkers (key 27), v1, flexible: commit or abort markers written straight to
//! partition leaders, as a transaction coordinator writes them — and as Kafka's
//! `Admin.abortTransaction` does for a transaction its coordinator lost
//! (`WriteTxnMarkers{Request,Response}.json`; Kafka 4 dropped v0, Kafka 3.9 has no v2).
//!
//! Request: Markers ARRAY{ProducerId INT64, ProducerEpoch INT16, TransactionResult BOOL
//! (true commit), Topics ARRAY{Name STRING, PartitionIndexes ARRAY INT32}, CoordinatorEpoch
//! INT32}.
//! Response: Markers ARRAY{ProducerId INT64, Topics ARRAY{Name STRING, Partitions
//! ARRAY{PartitionIndex INT32, ErrorCode INT16}}}.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::read_topic_partitions;

/// A marker to write to some partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: i64,
    /// The epoch of the transaction the marker ends.
    pub producer_epoch: i16,
    /// Commit, or abort.
    pub committed: bool,
    pub topic: String,
    pub partitions: Vec<i32>,
    /// The coordinator epoch the leader last saw for the producer (DescribeProducers).
    pub coordinator_epoch: i32,
}

pub fn encode_request(w: &mut Writer, markers: &[TxnMarker]) {
    w.array_len(markers.len(), true);
    for m in markers {
        w.i64(m.producer_id).i16(m.producer_epoch).bool(m.committed);
        w.array_len(1, true).string(Some(&m.topic), true);
        w.array_len(m.partitions.len(), true);
        for &p in &m.partitions {
            w.i32(p);
        }
        w.empty_tags(true).i32(m.coordinator_epoch).empty_tags(true);
    }
    w.empty_tags(true);
}

/// Each partition's (producer id, topic, partition, error).
pub fn decode_response(body: &[u8]) -> DecodeResult<Vec<(i64, String, i32, ErrorCode)>> {
    let mut r = Reader::new(body);
    let mut out = Vec::new();
    let nm = r.array_count(true, 10, "WriteTxnMarkers markers")?;
    for _ in 0..nm {
        let producer_id = r.i64("WriteTxnMarkers producer_id")?;
        let mut errors = Vec::new();
        let topics = read_topic_partitions(&mut r, true, 7, "WriteTxnMarkers topics", |r| {
            errors.push(ErrorCode(r.i16("WriteTxnMarkers error_code")?));
            Ok(())
        })?;
        r.skip_tagged_fields("WriteTxnMarkers marker tags")?;
        let partitions = topics
            .into_iter()
            .flat_map(|(t, parts)| parts.into_iter().map(move |p| (t.clone(), p)));
        out.extend(
            partitions
                .zip(errors)
                .map(|((t, p), e)| (producer_id, t, p, e)),
        );
    }
    r.skip_tagged_fields("WriteTxnMarkers tags")?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::record::batch::tests::unhex;

    /// A response: [producer 7 [topic "t" [0 error 0, tags; 1 error 48, tags] tags] tags] tags.
    pub(crate) const RESPONSE: &str =
        "02 0000000000000007 02 0274 03 00000000 0000 00 00000001 0030 00 00 00 00";

    #[test]
    fn request_golden_bytes() {
        let abort = TxnMarker {
            producer_id: 7,
            producer_epoch: 2,
            committed: false,
            topic: "t".into(),
            partitions: vec![0, 1],
            coordinator_epoch: 5,
        };
        // [producer 7, epoch 2, abort, [topic "t" [0, 1] tags], coordinator epoch 5, tags],
        // tags.
        assert_eq!(
            encoded(|w| encode_request(w, &[abort])),
            unhex("02 0000000000000007 0002 00 02 0274 03 00000000 00000001 00 00000005 00 00")
        );
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let bytes = unhex(RESPONSE);
        let want = vec![
            (7, "t".to_string(), 0, ErrorCode::NONE),
            (7, "t".to_string(), 1, ErrorCode(48)),
        ];
        assert_eq!(decode_response(&bytes).unwrap(), want);
        every_cut_fails(&bytes, decode_response);
    }
}
