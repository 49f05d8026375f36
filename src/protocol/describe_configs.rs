//! DescribeConfigs (key 32), v1–4, flexible from v4: every config of some topics, with where
//! each value comes from (`DescribeConfigs{Request,Response}.json`).
//!
//! Request: Resources ARRAY{ResourceType INT8, ResourceName STRING, ConfigurationKeys
//! nullable ARRAY STRING (null: every key)} · IncludeSynonyms BOOL · IncludeDocumentation BOOL
//! (v3+).
//! Response: ThrottleTimeMs INT32 · Results ARRAY{ErrorCode INT16, ErrorMessage
//! NULLABLE_STRING, ResourceType INT8, ResourceName STRING, Configs ARRAY{Name STRING, Value
//! NULLABLE_STRING, ReadOnly BOOL, ConfigSource INT8, IsSensitive BOOL, Synonyms ARRAY{Name
//! STRING, Value NULLABLE_STRING, Source INT8}, ConfigType INT8 (v3+), Documentation
//! NULLABLE_STRING (v3+)}}.

use super::admin::RESOURCE_TOPIC;
use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// `ConfigSource` of a value set on the topic itself (`DYNAMIC_TOPIC_CONFIG`).
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;

/// One config of a topic as the broker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// Null for a sensitive value.
    pub value: Option<String>,
    /// Where the value comes from (Kafka's `ConfigSource`): [`SOURCE_DYNAMIC_TOPIC`] when set
    /// on the topic, 2–4 from the broker's configs, 5 Kafka's default.
    pub source: i8,
    pub read_only: bool,
    pub sensitive: bool,
}

/// One topic's configs, or the error that kept the broker from describing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigs {
    pub topic: String,
    pub error: ErrorCode,
    pub message: Option<String>,
    pub entries: Vec<ConfigEntry>,
}

/// Asks for every config of each topic, without synonyms or documentation.
pub fn encode_request(w: &mut Writer, version: i16, topics: &[String]) {
    let flexible = version >= 4;
    w.array_len(topics.len(), flexible);
    for t in topics {
        w.i8(RESOURCE_TOPIC).string(Some(t), flexible);
        w.null_array(flexible).empty_tags(flexible);
    }
    w.bool(false);
    if version >= 3 {
        w.bool(false);
    }
    w.empty_tags(flexible);
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<Vec<TopicConfigs>> {
    let flexible = version >= 4;
    let skip_tags = |r: &mut Reader<'_>, what: &str| {
        if flexible {
            r.skip_tagged_fields(what)?;
        }
        Ok(())
    };
    let mut r = Reader::new(body);
    r.i32("DescribeConfigs throttle_time_ms")?;
    // The smallest result: error, message, type, name and configs count (and tags).
    let nr = r.array_count(
        flexible,
        if flexible { 7 } else { 11 },
        "DescribeConfigs results",
    )?;
    let mut out = Vec::with_capacity(nr);
    for _ in 0..nr {
        let error = ErrorCode(r.i16("DescribeConfigs error_code")?);
        let message = r.nullable_string(flexible, "DescribeConfigs error_message")?;
        r.i8("DescribeConfigs resource_type")?;
        let topic = r.string(flexible, "DescribeConfigs resource_name")?;
        let min_config = if flexible { 7 } else { 11 };
        let nc = r.array_count(flexible, min_config, "DescribeConfigs configs")?;
        let mut entries = Vec::with_capacity(nc);
        for _ in 0..nc {
            let name = r.string(flexible, "DescribeConfigs config name")?;
            let value = r.nullable_string(flexible, "DescribeConfigs config value")?;
            let read_only = r.bool("DescribeConfigs read_only")?;
            let source = r.i8("DescribeConfigs config_source")?;
            let sensitive = r.bool("DescribeConfigs is_sensitive")?;
            let min_synonym = if flexible { 4 } else { 5 };
            let ns = r.array_count(flexible, min_synonym, "DescribeConfigs synonyms")?;
            for _ in 0..ns {
                r.string(flexible, "DescribeConfigs synonym name")?;
                r.nullable_string(flexible, "DescribeConfigs synonym value")?;
                r.i8("DescribeConfigs synonym source")?;
                skip_tags(&mut r, "DescribeConfigs synonym tags")?;
            }
            if version >= 3 {
                r.i8("DescribeConfigs config_type")?;
                r.nullable_string(flexible, "DescribeConfigs documentation")?;
            }
            skip_tags(&mut r, "DescribeConfigs config tags")?;
            entries.push(ConfigEntry {
                name,
                value,
                source,
                read_only,
                sensitive,
            });
        }
        skip_tags(&mut r, "DescribeConfigs result tags")?;
        out.push(TopicConfigs {
            topic,
            error,
            message,
            entries,
        });
    }
    skip_tags(&mut r, "DescribeConfigs tags")?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::admin::{
        ConfigApi, ConfigResource, decode_config_resources, encode_config_errors,
    };
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::record::batch::tests::unhex;

    /// A v4 response: compact, tags after each synonym, config, result and the response.
    pub(crate) const RESPONSE_V4: &str =
        "00000000 02 0000 00 02 0274 02 0261 0262 00 01 01 02 0261 0262 01 00 02 00 00 00 00";

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        let topics = ["t".to_string()];
        // v1: [topic "t", keys null], include synonyms false.
        let v1 = encoded(|w| encode_request(w, 1, &topics));
        assert_eq!(v1, unhex("00000001 02 0001 74 ffffffff 00"));
        // v3: + include documentation false.
        let v3 = encoded(|w| encode_request(w, 3, &topics));
        assert_eq!(v3, unhex("00000001 02 0001 74 ffffffff 00 00"));
        // v4: compact, null keys a count of 0, tags after the resource and the request.
        let v4 = encoded(|w| encode_request(w, 4, &topics));
        assert_eq!(v4, unhex("02 02 0274 00 00 00 00 00"));
        for (v, bytes) in [(1, v1), (3, v3), (4, v4)] {
            let res = decode_config_resources(&bytes, v, ConfigApi::Describe).unwrap();
            let want = ConfigResource {
                resource_type: RESOURCE_TOPIC,
                name: "t".to_string(),
            };
            assert_eq!(res, [want], "v{v}");
        }
    }

    fn entry(source: i8) -> ConfigEntry {
        ConfigEntry {
            name: "a".into(),
            value: Some("b".into()),
            source,
            read_only: false,
            sensitive: true,
        }
    }

    #[test]
    fn response_golden_bytes_decode_at_every_version_and_every_cut_fails() {
        // v1: throttle, [error 0, message null, type 2, "t", [config "a"="b", read only
        // false, source 1, sensitive true, synonyms ["a"="b" source 1]]].
        let v1 = unhex(
            "00000000 00000001 0000 ffff 02 0001 74 00000001
             0001 61 0001 62 00 01 01 00000001 0001 61 0001 62 01",
        );
        // v3: + config type 2 and documentation null after the synonyms.
        let v3 = unhex(
            "00000000 00000001 0000 ffff 02 0001 74 00000001
             0001 61 0001 62 00 01 01 00000001 0001 61 0001 62 01 02 ffff",
        );
        let v4 = unhex(RESPONSE_V4);
        for (v, bytes) in [(1, v1), (3, v3), (4, v4)] {
            let got = decode_response(&bytes, v).unwrap();
            let want = TopicConfigs {
                topic: "t".into(),
                error: ErrorCode::NONE,
                message: None,
                entries: vec![entry(SOURCE_DYNAMIC_TOPIC)],
            };
            assert_eq!(got, [want], "v{v}");
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
        for v in 1..=4 {
            let bytes =
                encoded(|w| encode_config_errors(w, v, ConfigApi::Describe, &res, |_| e, "ro"));
            let want = TopicConfigs {
                topic: "t".into(),
                error: e,
                message: Some("ro".into()),
                entries: Vec::new(),
            };
            assert_eq!(decode_response(&bytes, v).unwrap(), [want], "v{v}");
        }
    }
}
