//! Produce, refused: the listener is read-only, but librdkafka (confluent-kafka, kcat) only
//! fetches with the v2 record format when the broker's ApiVersions lists Produce v3 or
//! higher (its `MsgVer2` feature needs both Produce v3 and Fetch v4); without it, it sends
//! Fetch v0, which no replica of v2 batches can serve. So Produce v3–v7 is advertised, and
//! every partition of a Produce request is answered TOPIC_AUTHORIZATION_FAILED, an error
//! producers do not retry. acks = 0 gets no answer, as from Kafka.
//!
//! Request v3–v7: transactional_id (nullable string), acks (i16), timeout_ms (i32), topics
//! [name (string), partitions [index (i32), records (nullable bytes)]].
//! Response v3–v7: topics [name, partitions [index (i32), error_code (i16), base_offset
//! (i64), log_append_time_ms (i64), log_start_offset (i64, v5+)]], throttle_time_ms (i32).

use crate::protocol::codec::{DecodeResult, Reader, Writer};

/// Produce's API key and the versions advertised (all below v9, the first flexible one).
pub const API_KEY: i16 = 0;
pub const VERSIONS: (i16, i16) = (3, 7);
/// Kafka's TOPIC_AUTHORIZATION_FAILED.
const REFUSED: i16 = 29;

/// The response body refusing every partition of the request; `None` for acks = 0.
pub fn refuse(body: &[u8], version: i16) -> DecodeResult<Option<Vec<u8>>> {
    let mut r = Reader::new(body);
    r.nullable_string(false, "Produce transactional_id")?;
    let acks = r.i16("Produce acks")?;
    r.i32("Produce timeout_ms")?;
    let n = r.array_count(false, 6, "Produce topics")?;
    let mut w = Writer::new();
    w.array_len(n, false);
    for _ in 0..n {
        let name = r.string(false, "Produce topic name")?;
        let parts = r.array_count(false, 8, "Produce partitions")?;
        w.string(Some(&name), false).array_len(parts, false);
        for _ in 0..parts {
            let index = r.i32("Produce partition index")?;
            r.nullable_bytes(false, "Produce records")?;
            w.i32(index).i16(REFUSED).i64(-1).i64(-1);
            if version >= 5 {
                w.i64(-1);
            }
        }
    }
    w.i32(0);
    Ok((acks != 0).then_some(w.buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(acks: i16) -> Vec<u8> {
        let mut w = Writer::new();
        w.string(None, false)
            .i16(acks)
            .i32(1000)
            .array_len(1, false);
        w.string(Some("t"), false).array_len(2, false);
        w.i32(0).i32(3).i8(1).i8(2).i8(3);
        w.i32(4).i32(-1);
        w.buf
    }

    #[test]
    fn produce_is_refused_for_every_partition() {
        let body = refuse(&request(-1), 7).unwrap().unwrap();
        let mut r = Reader::new(&body);
        assert_eq!(r.array_count(false, 1, "topics").unwrap(), 1);
        assert_eq!(r.string(false, "name").unwrap(), "t");
        assert_eq!(r.array_count(false, 1, "partitions").unwrap(), 2);
        for index in [0, 4] {
            assert_eq!(r.i32("index").unwrap(), index);
            assert_eq!(r.i16("error").unwrap(), REFUSED);
            for _ in 0..3 {
                assert_eq!(r.i64("offsets").unwrap(), -1);
            }
        }
        assert_eq!(r.i32("throttle").unwrap(), 0);
        assert!(r.is_empty());
    }

    #[test]
    fn produce_with_acks_0_gets_no_answer_and_garbage_is_an_error() {
        assert_eq!(refuse(&request(0), 3).unwrap(), None);
        assert!(refuse(&[0xff, 0xff, 0, 1, 0x7f, 0xff, 0xff, 0xff], 3).is_err());
    }
}
