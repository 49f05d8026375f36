//! SaslHandshake (key 17), v0–1, and SaslAuthenticate (key 36), v0–2 (v2 flexible).
//!
//! ```text
//! SaslHandshake request      Mechanism STRING
//! SaslHandshake response     ErrorCode INT16, Mechanisms ARRAY{STRING}
//! SaslAuthenticate request   AuthBytes BYTES (COMPACT_BYTES v2), tags (v2)
//! SaslAuthenticate response  ErrorCode INT16, ErrorMessage NULLABLE_STRING, AuthBytes BYTES,
//!                            SessionLifetimeMs INT64 (v1+, KIP-368; 0: no limit), tags (v2)
//! ```
//! SaslHandshake is never flexible. After a v0 handshake the SASL tokens travel as bare
//! size-prefixed frames (Kafka before 1.0); after v1 each token is a SaslAuthenticate
//! request. Both sides encode and decode here: the client connection sends requests and
//! reads responses, the serve listener the other way round.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// SaslAuthenticate's first flexible version.
const AUTHENTICATE_FLEXIBLE: i16 = 2;

pub fn encode_handshake_request(w: &mut Writer, mechanism: &str) {
    w.string(Some(mechanism), false);
}

pub fn decode_handshake_request(body: &[u8]) -> DecodeResult<String> {
    let mut r = Reader::new(body);
    let m = r.string(false, "SaslHandshake mechanism")?;
    r.expect_end("SaslHandshake request")?;
    Ok(m)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeResponse {
    pub error: ErrorCode,
    /// The mechanisms the broker enables (also sent with UNSUPPORTED_SASL_MECHANISM).
    pub mechanisms: Vec<String>,
}

pub fn encode_handshake_response(w: &mut Writer, resp: &HandshakeResponse) {
    w.i16(resp.error.0).array_len(resp.mechanisms.len(), false);
    for m in &resp.mechanisms {
        w.string(Some(m), false);
    }
}

pub fn decode_handshake_response(body: &[u8]) -> DecodeResult<HandshakeResponse> {
    let mut r = Reader::new(body);
    let error = ErrorCode(r.i16("SaslHandshake error_code")?);
    let n = r.array_count(false, 2, "SaslHandshake mechanisms")?;
    let mut mechanisms = Vec::with_capacity(n);
    for _ in 0..n {
        mechanisms.push(r.string(false, "SaslHandshake mechanism")?);
    }
    Ok(HandshakeResponse { error, mechanisms })
}

pub fn encode_authenticate_request(w: &mut Writer, version: i16, auth_bytes: &[u8]) {
    let flexible = version >= AUTHENTICATE_FLEXIBLE;
    w.bytes(Some(auth_bytes), flexible).empty_tags(flexible);
}

pub fn decode_authenticate_request(body: &[u8], version: i16) -> DecodeResult<&[u8]> {
    let flexible = version >= AUTHENTICATE_FLEXIBLE;
    let mut r = Reader::new(body);
    let bytes = r
        .nullable_bytes(flexible, "SaslAuthenticate auth_bytes")?
        .ok_or_else(|| {
            super::codec::DecodeError::new("SaslAuthenticate auth_bytes: unexpected null")
        })?;
    if flexible {
        r.skip_tagged_fields("SaslAuthenticate request tags")?;
    }
    Ok(bytes)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticateResponse {
    pub error: ErrorCode,
    pub error_message: Option<String>,
    pub auth_bytes: Vec<u8>,
    /// v1+: how long the session may last before the client must re-authenticate (0: no
    /// limit, and always 0 in a v0 answer).
    pub session_lifetime_ms: i64,
}

pub fn encode_authenticate_response(w: &mut Writer, version: i16, resp: &AuthenticateResponse) {
    let flexible = version >= AUTHENTICATE_FLEXIBLE;
    w.i16(resp.error.0)
        .string(resp.error_message.as_deref(), flexible)
        .bytes(Some(&resp.auth_bytes), flexible);
    if version >= 1 {
        w.i64(resp.session_lifetime_ms);
    }
    w.empty_tags(flexible);
}

pub fn decode_authenticate_response(
    body: &[u8],
    version: i16,
) -> DecodeResult<AuthenticateResponse> {
    let flexible = version >= AUTHENTICATE_FLEXIBLE;
    let mut r = Reader::new(body);
    let error = ErrorCode(r.i16("SaslAuthenticate error_code")?);
    let error_message = r.nullable_string(flexible, "SaslAuthenticate error_message")?;
    let auth_bytes = r
        .nullable_bytes(flexible, "SaslAuthenticate auth_bytes")?
        .unwrap_or_default()
        .to_vec();
    let session_lifetime_ms = if version >= 1 {
        r.i64("SaslAuthenticate session_lifetime_ms")?
    } else {
        0
    };
    if flexible {
        r.skip_tagged_fields("SaslAuthenticate response tags")?;
    }
    Ok(AuthenticateResponse {
        error,
        error_message,
        auth_bytes,
        session_lifetime_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::encoded;
    use crate::protocol::{ApiKey, encode_request_header};

    #[test]
    fn handshake_golden_bytes_and_roundtrip() {
        let req = encoded(|w| encode_handshake_request(w, "PLAIN"));
        // Mechanism STRING: length 5, "PLAIN".
        assert_eq!(req, b"\x00\x05PLAIN");
        assert_eq!(decode_handshake_request(&req).unwrap(), "PLAIN");
        assert!(decode_handshake_request(b"\x00\x05PLAINx").is_err());
        let resp = HandshakeResponse {
            error: ErrorCode::UNSUPPORTED_SASL_MECHANISM,
            mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-256".into()],
        };
        let bytes = encoded(|w| encode_handshake_response(w, &resp));
        let mut want = vec![0, 33, 0, 0, 0, 2]; // error 33 UNSUPPORTED_SASL_MECHANISM, 2 names
        want.extend_from_slice(b"\x00\x05PLAIN\x00\x0dSCRAM-SHA-256");
        assert_eq!(bytes, want);
        assert_eq!(decode_handshake_response(&bytes).unwrap(), resp);
        // Request header: SaslHandshake is header v1 at every version.
        let head = encoded(|w| encode_request_header(w, ApiKey::SaslHandshake, 1, 7, "c"));
        assert_eq!(head, [0, 17, 0, 1, 0, 0, 0, 7, 0, 1, b'c']);
    }

    #[test]
    fn authenticate_golden_bytes_per_version() {
        assert_eq!(
            encoded(|w| encode_authenticate_request(w, 0, b"ab")),
            [0, 0, 0, 2, b'a', b'b'] // BYTES: INT32 length 2
        );
        assert_eq!(
            encoded(|w| encode_authenticate_request(w, 2, b"ab")),
            [3, b'a', b'b', 0] // COMPACT_BYTES length+1, then empty tags
        );
        let resp = AuthenticateResponse {
            error: ErrorCode::NONE,
            error_message: None,
            auth_bytes: b"v=x".to_vec(),
            session_lifetime_ms: 3_600_000,
        };
        assert_eq!(
            encoded(|w| encode_authenticate_response(w, 0, &resp)),
            // error 0, null STRING, BYTES "v=x"; no lifetime in v0
            [0, 0, 0xff, 0xff, 0, 0, 0, 3, b'v', b'=', b'x']
        );
        assert_eq!(
            encoded(|w| encode_authenticate_response(w, 1, &resp)),
            [
                0, 0, 0xff, 0xff, 0, 0, 0, 3, b'v', b'=', b'x', // as v0
                0, 0, 0, 0, 0, 0x36, 0xee, 0x80, // session_lifetime_ms 3600000
            ]
        );
        assert_eq!(
            encoded(|w| encode_authenticate_response(w, 2, &resp)),
            [
                0, 0, // error
                0, // COMPACT_NULLABLE_STRING null
                4, b'v', b'=', b'x', // COMPACT_BYTES
                0, 0, 0, 0, 0, 0x36, 0xee, 0x80, // session_lifetime_ms
                0,    // tags
            ]
        );
        let failed = AuthenticateResponse {
            error: ErrorCode::SASL_AUTHENTICATION_FAILED,
            error_message: Some("bad".into()),
            auth_bytes: Vec::new(),
            session_lifetime_ms: 0,
        };
        for v in 0..=2 {
            for r in [&resp, &failed] {
                let bytes = encoded(|w| encode_authenticate_response(w, v, r));
                let mut want = r.clone();
                if v == 0 {
                    want.session_lifetime_ms = 0;
                }
                assert_eq!(
                    decode_authenticate_response(&bytes, v).unwrap(),
                    want,
                    "v{v}"
                );
            }
            let req = encoded(|w| encode_authenticate_request(w, v, b"n,,n=u,r=x"));
            assert_eq!(decode_authenticate_request(&req, v).unwrap(), b"n,,n=u,r=x");
        }
    }

    #[test]
    fn truncated_or_null_messages_are_errors_not_panics() {
        let resp = AuthenticateResponse {
            error: ErrorCode::NONE,
            error_message: Some("m".into()),
            auth_bytes: b"abc".to_vec(),
            session_lifetime_ms: 5,
        };
        for v in 0..=2 {
            let bytes = encoded(|w| encode_authenticate_response(w, v, &resp));
            for cut in 0..bytes.len() {
                assert!(
                    decode_authenticate_response(&bytes[..cut], v).is_err(),
                    "v{v} cut {cut}"
                );
            }
            let req = encoded(|w| encode_authenticate_request(w, v, b"abc"));
            for cut in 0..req.len() {
                assert!(
                    decode_authenticate_request(&req[..cut], v).is_err(),
                    "v{v} cut {cut}"
                );
            }
        }
        assert!(decode_authenticate_request(&[0xff, 0xff, 0xff, 0xff], 0).is_err());
        assert!(decode_authenticate_request(&[0, 0], 2).is_err());
        let hs = encoded(|w| {
            encode_handshake_response(
                w,
                &HandshakeResponse {
                    error: ErrorCode::NONE,
                    mechanisms: vec!["PLAIN".into()],
                },
            )
        });
        for cut in 0..hs.len() {
            assert!(decode_handshake_response(&hs[..cut]).is_err(), "cut {cut}");
        }
        // A hostile count cannot allocate.
        assert!(decode_handshake_response(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
    }
}
