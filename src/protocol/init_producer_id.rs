//! InitProducerId (key 22), v0–5, flexible from v2: a producer id and epoch, for an
//! idempotent producer or a transactional id (`InitProducerId{Request,Response}.json`).
//!
//! Request: TransactionalId NULLABLE_STRING · TransactionTimeoutMs INT32 · ProducerId INT64
//! (v3+) · ProducerEpoch INT16 (v3+).
//! Response: ThrottleTimeMs INT32 · ErrorCode INT16 · ProducerId INT64 · ProducerEpoch INT16.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// The broker's answer: an error, or the producer id and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAnswer {
    pub error: ErrorCode,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// Asks for a new producer id (v3+: producer id and epoch -1, none held before).
pub fn encode_request(
    w: &mut Writer,
    version: i16,
    transactional_id: Option<&str>,
    timeout_ms: i32,
) {
    let flexible = version >= 2;
    w.string(transactional_id, flexible).i32(timeout_ms);
    if version >= 3 {
        w.i64(-1).i16(-1);
    }
    w.empty_tags(flexible);
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<ProducerIdAnswer> {
    let mut r = Reader::new(body);
    r.i32("InitProducerId throttle_time_ms")?;
    let answer = ProducerIdAnswer {
        error: ErrorCode(r.i16("InitProducerId error_code")?),
        producer_id: r.i64("InitProducerId producer_id")?,
        producer_epoch: r.i16("InitProducerId producer_epoch")?,
    };
    if version >= 2 {
        r.skip_tagged_fields("InitProducerId tags")?;
    }
    Ok(answer)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::protocol::produce::{
        decode_init_producer_id_request, encode_init_producer_id_error,
    };
    use crate::record::batch::tests::unhex;

    /// A v5 response: throttle, error 0, producer 7, epoch 2, tags.
    pub(crate) const RESPONSE_V5: &str = "00000000 0000 0000000000000007 0002 00";

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        // v0: transactional id null, timeout 60000.
        let v0 = encoded(|w| encode_request(w, 0, None, 60_000));
        assert_eq!(v0, unhex("ffff 0000ea60"));
        // v2: compact "tx", timeout, tags.
        let v2 = encoded(|w| encode_request(w, 2, Some("tx"), 60_000));
        assert_eq!(v2, unhex("03 7478 0000ea60 00"));
        // v3: + producer id -1, epoch -1 before the tags.
        let v3 = encoded(|w| encode_request(w, 3, Some("tx"), 60_000));
        assert_eq!(v3, unhex("03 7478 0000ea60 ffffffffffffffff ffff 00"));
        for v in 0..=5 {
            let bytes = encoded(|w| encode_request(w, v, Some("tx"), 1));
            let id = decode_init_producer_id_request(&bytes, v).unwrap();
            assert_eq!(id.as_deref(), Some("tx"), "v{v}");
        }
    }

    #[test]
    fn responses_decode_from_golden_bytes_and_from_the_listeners_refusal() {
        let ok = ProducerIdAnswer {
            error: ErrorCode::NONE,
            producer_id: 7,
            producer_epoch: 2,
        };
        let v1 = unhex("00000000 0000 0000000000000007 0002");
        assert_eq!(decode_response(&v1, 1).unwrap(), ok);
        every_cut_fails(&v1, |b| decode_response(b, 1));
        let v5 = unhex(RESPONSE_V5);
        assert_eq!(decode_response(&v5, 5).unwrap(), ok);
        every_cut_fails(&v5, |b| decode_response(b, 5));
        let e = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
        for v in 0..=5 {
            let bytes = encoded(|w| encode_init_producer_id_error(w, v, e));
            let want = ProducerIdAnswer {
                error: e,
                producer_id: -1,
                producer_epoch: -1,
            };
            assert_eq!(decode_response(&bytes, v).unwrap(), want, "v{v}");
        }
    }
}
