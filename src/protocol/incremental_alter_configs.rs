//! IncrementalAlterConfigs (key 44), v0–1, flexible from v1: configs of a topic set or put
//! back to their defaults one by one, the others left as they are
//! (`IncrementalAlterConfigs{Request,Response}.json`).
//!
//! Request: Resources ARRAY{ResourceType INT8, ResourceName STRING, Configs ARRAY{Name STRING,
//! ConfigOperation INT8, Value NULLABLE_STRING}} · ValidateOnly BOOL.
//! Response: ThrottleTimeMs INT32 · Responses ARRAY{ErrorCode INT16, ErrorMessage
//! NULLABLE_STRING, ResourceType INT8, ResourceName STRING}.

use super::admin::RESOURCE_TOPIC;
use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// `ConfigOperation` SET: the value given replaces the config's.
pub const OP_SET: i8 = 0;
/// `ConfigOperation` DELETE: the config is removed from the resource, back to its default.
pub const OP_DELETE: i8 = 1;

/// What became of one resource of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlteredResource {
    pub resource_type: i8,
    pub name: String,
    pub error: ErrorCode,
    pub message: Option<String>,
}

/// Alters `topic`'s configs: `Some(value)` is a SET, `None` a DELETE (its value null).
pub fn encode_request(
    w: &mut Writer,
    version: i16,
    topic: &str,
    changes: &[(String, Option<String>)],
) {
    let flexible = version >= 1;
    w.array_len(1, flexible)
        .i8(RESOURCE_TOPIC)
        .string(Some(topic), flexible);
    w.array_len(changes.len(), flexible);
    for (name, value) in changes {
        let op = if value.is_some() { OP_SET } else { OP_DELETE };
        w.string(Some(name), flexible).i8(op);
        w.string(value.as_deref(), flexible).empty_tags(flexible);
    }
    w.empty_tags(flexible);
    w.bool(false).empty_tags(flexible);
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<Vec<AlteredResource>> {
    let flexible = version >= 1;
    let mut r = Reader::new(body);
    r.i32("IncrementalAlterConfigs throttle_time_ms")?;
    // The smallest response: error, message, type and name (and tags).
    let n = r.array_count(
        flexible,
        if flexible { 6 } else { 7 },
        "IncrementalAlterConfigs responses",
    )?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let error = ErrorCode(r.i16("IncrementalAlterConfigs error_code")?);
        let message = r.nullable_string(flexible, "IncrementalAlterConfigs error_message")?;
        let resource_type = r.i8("IncrementalAlterConfigs resource_type")?;
        let name = r.string(flexible, "IncrementalAlterConfigs resource_name")?;
        if flexible {
            r.skip_tagged_fields("IncrementalAlterConfigs response tags")?;
        }
        out.push(AlteredResource {
            resource_type,
            name,
            error,
            message,
        });
    }
    if flexible {
        r.skip_tagged_fields("IncrementalAlterConfigs tags")?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::admin::{
        ConfigApi, ConfigResource, decode_config_resources, encode_config_errors,
    };
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::record::batch::tests::unhex;

    fn changes() -> Vec<(String, Option<String>)> {
        vec![("a".into(), Some("b".into())), ("c".into(), None)]
    }

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        // v0: [topic "t", [config "a" SET "b", config "c" DELETE null]], validate only false.
        let v0 = encoded(|w| encode_request(w, 0, "t", &changes()));
        assert_eq!(
            v0,
            unhex("00000001 02 0001 74 00000002 0001 61 00 0001 62 0001 63 01 ffff 00")
        );
        // v1: compact, null a length of 0, tags after each config, the resource and the request.
        let v1 = encoded(|w| encode_request(w, 1, "t", &changes()));
        assert_eq!(
            v1,
            unhex("02 02 0274 03 0261 00 0262 00 0263 01 00 00 00 00 00")
        );
        for (v, bytes) in [(0, v0), (1, v1)] {
            let res = decode_config_resources(&bytes, v, ConfigApi::IncrementalAlter).unwrap();
            let want = ConfigResource {
                resource_type: RESOURCE_TOPIC,
                name: "t".to_string(),
            };
            assert_eq!(res, [want], "v{v}");
        }
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let altered = |message: Option<&str>| AlteredResource {
            resource_type: RESOURCE_TOPIC,
            name: "t".into(),
            error: ErrorCode::NONE,
            message: message.map(String::from),
        };
        // v0: throttle, [error 0, message null, type 2, "t"].
        let v0 = unhex("00000000 00000001 0000 ffff 02 0001 74");
        // v1: compact, message "", tags after the response and the whole.
        let v1 = unhex("00000000 02 0000 01 02 0274 00 00");
        for (v, bytes, want) in [(0, v0, altered(None)), (1, v1, altered(Some("")))] {
            assert_eq!(decode_response(&bytes, v).unwrap(), [want], "v{v}");
            every_cut_fails(&bytes, |b| decode_response(b, v));
        }
    }

    #[test]
    fn the_listeners_refusal_decodes_as_a_topic_error() {
        let res = [ConfigResource {
            resource_type: RESOURCE_TOPIC,
            name: "t".into(),
        }];
        let e = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
        for v in 0..=1 {
            let bytes = encoded(|w| {
                encode_config_errors(w, v, ConfigApi::IncrementalAlter, &res, |_| e, "ro")
            });
            let want = AlteredResource {
                resource_type: RESOURCE_TOPIC,
                name: "t".into(),
                error: e,
                message: Some("ro".into()),
            };
            assert_eq!(decode_response(&bytes, v).unwrap(), [want], "v{v}");
        }
    }
}
