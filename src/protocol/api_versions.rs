//! ApiVersions (key 18), v0–3.
//!
//! Request: v0–2 empty; v3 ClientSoftwareName COMPACT_STRING, ClientSoftwareVersion
//! COMPACT_STRING, tags. Response: ErrorCode INT16, ApiKeys ARRAY{ApiKey INT16, MinVersion
//! INT16, MaxVersion INT16 (+tags v3)}, ThrottleTimeMs INT32 (v1+), tags (v3).
//! A broker that does not know the requested version answers a v0 body with error 35
//! (UNSUPPORTED_VERSION) and, usually, its own range for key 18: decode the error first, and
//! when it is 35 read the rest as v0.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

pub const CLIENT_SOFTWARE_NAME: &str = "replica-follower";

pub fn encode_request(w: &mut Writer, version: i16) {
    if version >= 3 {
        w.string(Some(CLIENT_SOFTWARE_NAME), true);
        w.string(Some(env!("CARGO_PKG_VERSION")), true);
        w.empty_tags(true);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionRange {
    pub api_key: i16,
    pub min: i16,
    pub max: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsResponse {
    pub error: ErrorCode,
    pub api_keys: Vec<ApiVersionRange>,
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<ApiVersionsResponse> {
    let mut r = Reader::new(body);
    let error = ErrorCode(r.i16("ApiVersions error_code")?);
    // An UNSUPPORTED_VERSION answer is a v0 body whatever version was asked.
    let version = if error == ErrorCode::UNSUPPORTED_VERSION {
        0
    } else {
        version
    };
    let flexible = version >= 3;
    let n = r.array_count(flexible, 6, "ApiVersions api_keys")?;
    let mut api_keys = Vec::with_capacity(n);
    for _ in 0..n {
        let api_key = r.i16("ApiVersions api_key")?;
        let min = r.i16("ApiVersions min_version")?;
        let max = r.i16("ApiVersions max_version")?;
        if flexible {
            r.skip_tagged_fields("ApiVersions api_key tags")?;
        }
        api_keys.push(ApiVersionRange { api_key, min, max });
    }
    if version >= 1 && error.is_ok() {
        r.i32("ApiVersions throttle_time_ms")?;
    }
    if flexible && error.is_ok() {
        r.skip_tagged_fields("ApiVersions tags")?;
    }
    Ok(ApiVersionsResponse { error, api_keys })
}

/// Encodes a response listing `api_keys`. A request at a version above `max` (this side's
/// top for ApiVersions) is answered as Kafka answers it: a v0 body with UNSUPPORTED_VERSION
/// and the one range of key 18, so the client can retry at a version both know.
pub fn encode_response(w: &mut Writer, version: i16, max: i16, api_keys: &[ApiVersionRange]) {
    if !(0..=max).contains(&version) {
        w.i16(ErrorCode::UNSUPPORTED_VERSION.0)
            .array_len(1, false)
            .i16(18)
            .i16(0)
            .i16(max);
        return;
    }
    let flexible = version >= 3;
    w.i16(0).array_len(api_keys.len(), flexible);
    for k in api_keys {
        w.i16(k.api_key).i16(k.min).i16(k.max).empty_tags(flexible);
    }
    if version >= 1 {
        w.i32(0);
    }
    w.empty_tags(flexible);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ApiKey, encode_request_header};

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn v0_request_matches_reference_vector_a() {
        let mut w = Writer::new();
        encode_request_header(&mut w, ApiKey::ApiVersions, 0, 1, "test");
        encode_request(&mut w, 0);
        let mut framed = (w.buf.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&w.buf);
        assert_eq!(framed, unhex("0000000e 0012 0000 00000001 0004 74657374"));
    }

    #[test]
    fn v3_request_layout() {
        let mut w = Writer::new();
        encode_request_header(&mut w, ApiKey::ApiVersions, 3, 2, "test");
        encode_request(&mut w, 3);
        // header v2: key, version, correlation id, client id "test", empty tags = 15 bytes
        let mut r = Reader::new(&w.buf);
        r.take(15, "header").unwrap();
        assert_eq!(r.string(true, "name").unwrap(), CLIENT_SOFTWARE_NAME);
        r.string(true, "version").unwrap();
        r.skip_tagged_fields("tags").unwrap();
        assert!(r.is_empty());
    }

    #[test]
    fn unsupported_version_reply_is_read_as_v0_vector_b() {
        // Vector B without the size prefix and header (corr 2): error 35, one entry 18:0..4.
        let bytes = unhex("0023 00000001 0012 0000 0004");
        let resp = decode_response(&bytes, 3).unwrap();
        assert_eq!(resp.error, ErrorCode::UNSUPPORTED_VERSION);
        assert_eq!(
            resp.api_keys,
            vec![ApiVersionRange {
                api_key: 18,
                min: 0,
                max: 4
            }]
        );
    }

    #[test]
    fn too_new_a_request_gets_vector_b_and_known_ones_roundtrip() {
        let mut w = Writer::new();
        encode_response(&mut w, 4, 3, &[]);
        assert_eq!(w.buf, unhex("0023 00000001 0012 0000 0003"));
        let keys = vec![
            ApiVersionRange {
                api_key: 1,
                min: 4,
                max: 13,
            },
            ApiVersionRange {
                api_key: 18,
                min: 0,
                max: 3,
            },
        ];
        for v in 0..=3 {
            let mut w = Writer::new();
            encode_response(&mut w, v, 3, &keys);
            let resp = decode_response(&w.buf, v).unwrap();
            assert_eq!((resp.error, resp.api_keys), (ErrorCode::NONE, keys.clone()));
        }
        // ApiVersionsResponse.json v3: error 0, compact array of 1 {1, 4, 13, tags}, throttle
        // 0, tags.
        let mut w = Writer::new();
        encode_response(&mut w, 3, 3, &keys[..1]);
        assert_eq!(w.buf, unhex("0000 02 0001 0004 000d 00 00000000 00"));
    }

    #[test]
    fn v3_response_roundtrip_and_truncation() {
        let mut w = Writer::new();
        w.i16(0)
            .array_len(1, true)
            .i16(1)
            .i16(4)
            .i16(17)
            .empty_tags(true);
        w.i32(0).empty_tags(true);
        let resp = decode_response(&w.buf, 3).unwrap();
        assert_eq!(
            resp.api_keys[0],
            ApiVersionRange {
                api_key: 1,
                min: 4,
                max: 17
            }
        );
        for cut in 0..w.buf.len() {
            assert!(decode_response(&w.buf[..cut], 3).is_err(), "cut at {cut}");
        }
    }
}
