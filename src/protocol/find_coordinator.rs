//! FindCoordinator (key 10), v1–6, flexible from v3: which broker coordinates a group or a
//! transactional id (`FindCoordinator{Request,Response}.json`).
//!
//! Request: Key STRING (v1–3) · KeyType INT8 · CoordinatorKeys ARRAY STRING (v4+).
//! Response v1–3: ThrottleTimeMs INT32 · ErrorCode INT16 · ErrorMessage NULLABLE_STRING ·
//! NodeId INT32 · Host STRING · Port INT32. v4+: ThrottleTimeMs · Coordinators ARRAY{Key
//! STRING, NodeId, Host, Port, ErrorCode, ErrorMessage}.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// A coordinator: the broker's node id and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// One key's answer: its coordinator, or the error that kept the broker from naming one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorAnswer {
    /// The key answered (v4+; before, the one key asked).
    pub key: Option<String>,
    pub error: ErrorCode,
    pub message: Option<String>,
    pub coordinator: Coordinator,
}

/// Asks for the coordinator of one key of `key_type` (0 a group, 1 a transactional id).
pub fn encode_request(w: &mut Writer, version: i16, key_type: i8, key: &str) {
    let flexible = version >= 3;
    if version <= 3 {
        w.string(Some(key), flexible).i8(key_type);
    } else {
        w.i8(key_type).array_len(1, true).string(Some(key), true);
    }
    w.empty_tags(flexible);
}

fn read_coordinator(r: &mut Reader<'_>, flexible: bool) -> DecodeResult<Coordinator> {
    Ok(Coordinator {
        node_id: r.i32("FindCoordinator node_id")?,
        host: r.string(flexible, "FindCoordinator host")?,
        port: r.i32("FindCoordinator port")?,
    })
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<Vec<CoordinatorAnswer>> {
    let flexible = version >= 3;
    let mut r = Reader::new(body);
    r.i32("FindCoordinator throttle_time_ms")?;
    let mut out = Vec::new();
    if version <= 3 {
        let error = ErrorCode(r.i16("FindCoordinator error_code")?);
        let message = r.nullable_string(flexible, "FindCoordinator error_message")?;
        let coordinator = read_coordinator(&mut r, flexible)?;
        out.push(CoordinatorAnswer {
            key: None,
            error,
            message,
            coordinator,
        });
    } else {
        // The smallest coordinator: key, node, host, port, error, message and tags.
        let n = r.array_count(true, 14, "FindCoordinator coordinators")?;
        for _ in 0..n {
            let key = r.string(true, "FindCoordinator key")?;
            let coordinator = read_coordinator(&mut r, true)?;
            let error = ErrorCode(r.i16("FindCoordinator error_code")?);
            let message = r.nullable_string(true, "FindCoordinator error_message")?;
            r.skip_tagged_fields("FindCoordinator coordinator tags")?;
            out.push(CoordinatorAnswer {
                key: Some(key),
                error,
                message,
                coordinator,
            });
        }
    }
    if flexible {
        r.skip_tagged_fields("FindCoordinator tags")?;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::protocol::group::{
        self, KEY_TYPE_TRANSACTION, decode_find_coordinator_request, encode_find_coordinator,
    };
    use crate::record::batch::tests::unhex;

    /// A v4 response: throttle, [key "g", node, host, port, error, message null, tags], tags.
    pub(crate) const RESPONSE_V4: &str = "00000000 02 0267 00000002 0268 00002384 0000 00 00 00";

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        // v1: key "g", key type 0.
        let v1 = encoded(|w| encode_request(w, 1, 0, "g"));
        assert_eq!(v1, unhex("0001 67 00"));
        // v3: compact key, tags.
        let v3 = encoded(|w| encode_request(w, 3, 1, "tx"));
        assert_eq!(v3, unhex("03 7478 01 00"));
        // v4: key type, then the keys.
        let v4 = encoded(|w| encode_request(w, 4, 1, "tx"));
        assert_eq!(v4, unhex("01 02 037478 00"));
        for v in 1..=6 {
            let bytes = encoded(|w| encode_request(w, v, KEY_TYPE_TRANSACTION, "tx"));
            let req = decode_find_coordinator_request(&bytes, v).unwrap();
            assert_eq!((req.key_type, req.keys), (1, vec!["tx".to_string()]));
        }
    }

    #[test]
    fn responses_decode_from_golden_bytes_and_from_the_listeners_encoder() {
        let coordinator = Coordinator {
            node_id: 2,
            host: "h".into(),
            port: 9092,
        };
        let answer = |key: Option<&str>| CoordinatorAnswer {
            key: key.map(String::from),
            error: ErrorCode::NONE,
            message: None,
            coordinator: coordinator.clone(),
        };
        // v1: throttle, error 0, message null, node 2, host "h", port 9092.
        let v1 = unhex("00000000 0000 ffff 00000002 0001 68 00002384");
        assert_eq!(decode_response(&v1, 1).unwrap(), [answer(None)]);
        every_cut_fails(&v1, |b| decode_response(b, 1));
        let v4 = unhex(RESPONSE_V4);
        assert_eq!(decode_response(&v4, 4).unwrap(), [answer(Some("g"))]);
        every_cut_fails(&v4, |b| decode_response(b, 4));
        let node = group::Coordinator {
            node_id: 2,
            host: "h",
            port: 9092,
        };
        let keys = ["g".to_string()];
        for v in 1..=6 {
            let bytes =
                encoded(|w| encode_find_coordinator(w, v, &keys, ErrorCode::NONE, None, node));
            let key = (v >= 4).then_some("g");
            assert_eq!(decode_response(&bytes, v).unwrap(), [answer(key)], "v{v}");
        }
    }
}
