//! OffsetCommit (key 8), v2–9, flexible from v8: a group's offsets committed the way an admin
//! client commits them for a group with no members — generation -1, member id "", no
//! instance id (`OffsetCommit{Request,Response}.json`).
//!
//! Request: GroupId STRING · GenerationIdOrMemberEpoch INT32 · MemberId STRING ·
//! GroupInstanceId NULLABLE_STRING (v7+) · RetentionTimeMs INT64 (v2–4; -1, the broker's) ·
//! Topics ARRAY{Name STRING, Partitions ARRAY{PartitionIndex INT32, CommittedOffset INT64,
//! CommittedLeaderEpoch INT32 (v6+), CommittedMetadata NULLABLE_STRING}}.
//! Response: ThrottleTimeMs INT32 (v3+) · Topics ARRAY{Name STRING, Partitions
//! ARRAY{PartitionIndex INT32, ErrorCode INT16}}.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::read_topic_partitions;

/// A group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The leader epoch of the record before the offset, -1 when unknown (kept from v5 of
    /// OffsetFetch and v6 of OffsetCommit).
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// The offsets by topic, each topic once, in the order the topics first appear.
fn by_topic(offsets: &[CommittedOffset]) -> Vec<(&str, Vec<&CommittedOffset>)> {
    let mut topics: Vec<(&str, Vec<&CommittedOffset>)> = Vec::new();
    for o in offsets {
        match topics.iter_mut().find(|(t, _)| *t == o.topic) {
            Some((_, parts)) => parts.push(o),
            None => topics.push((&o.topic, vec![o])),
        }
    }
    topics
}

pub fn encode_request(w: &mut Writer, version: i16, group: &str, offsets: &[CommittedOffset]) {
    let flexible = version >= 8;
    w.string(Some(group), flexible)
        .i32(-1)
        .string(Some(""), flexible);
    if version >= 7 {
        w.string(None, flexible);
    }
    if version <= 4 {
        w.i64(-1);
    }
    let topics = by_topic(offsets);
    w.array_len(topics.len(), flexible);
    for (topic, parts) in topics {
        w.string(Some(topic), flexible)
            .array_len(parts.len(), flexible);
        for p in parts {
            w.i32(p.partition).i64(p.offset);
            if version >= 6 {
                w.i32(p.leader_epoch);
            }
            w.string(p.metadata.as_deref(), flexible)
                .empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    w.empty_tags(flexible);
}

/// Each partition's (topic, partition, error).
pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<Vec<(String, i32, ErrorCode)>> {
    let flexible = version >= 8;
    let mut r = Reader::new(body);
    if version >= 3 {
        r.i32("OffsetCommit throttle_time_ms")?;
    }
    let mut errors = Vec::new();
    let topics = read_topic_partitions(&mut r, flexible, 6, "OffsetCommit topics", |r| {
        errors.push(ErrorCode(r.i16("OffsetCommit error_code")?));
        Ok(())
    })?;
    if flexible {
        r.skip_tagged_fields("OffsetCommit tags")?;
    }
    let partitions = topics
        .into_iter()
        .flat_map(|(t, parts)| parts.into_iter().map(move |p| (t.clone(), p)));
    Ok(partitions
        .zip(errors)
        .map(|((t, p), e)| (t, p, e))
        .collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::protocol::group::{decode_offset_commit_request, encode_offset_commit_error};
    use crate::record::batch::tests::unhex;

    /// A v8 response: throttle, compact, tags.
    pub(crate) const RESPONSE_V8: &str =
        "00000000 02 0274 03 00000000 0000 00 00000001 001b 00 00 00";

    fn offset(topic: &str, partition: i32, metadata: Option<&str>) -> CommittedOffset {
        CommittedOffset {
            topic: topic.into(),
            partition,
            offset: 100,
            leader_epoch: 4,
            metadata: metadata.map(String::from),
        }
    }

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        let one = [offset("t", 2, Some("m"))];
        // v2: "g", generation -1, member "", retention -1, ["t" [2, 100, "m"]].
        assert_eq!(
            encoded(|w| encode_request(w, 2, "g", &one)),
            unhex(
                "0001 67 ffffffff 0000 ffffffffffffffff 00000001 0001 74 00000001
                 00000002 0000000000000064 0001 6d"
            )
        );
        // v6: no retention; the leader epoch after the offset.
        assert_eq!(
            encoded(|w| encode_request(w, 6, "g", &one)),
            unhex(
                "0001 67 ffffffff 0000 00000001 0001 74 00000001
                 00000002 0000000000000064 00000004 0001 6d"
            )
        );
        // v9: compact; instance id null; tags after each partition, topic and the request.
        assert_eq!(
            encoded(|w| encode_request(w, 9, "g", &one)),
            unhex(
                "0267 ffffffff 01 00 02 0274 02 00000002 0000000000000064 00000004 026d 00 00 00"
            )
        );
        // Offsets of one topic are sent together, in the order the topics first appear.
        let mixed = [
            offset("t", 0, None),
            offset("u", 1, None),
            offset("t", 1, None),
        ];
        for v in 2..=9 {
            let bytes = encoded(|w| encode_request(w, v, "g", &mixed));
            let want = vec![("t".to_string(), vec![0, 1]), ("u".to_string(), vec![1])];
            assert_eq!(
                decode_offset_commit_request(&bytes, v).unwrap(),
                want,
                "v{v}"
            );
        }
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let e = ErrorCode::NONE;
        let want = vec![("t".to_string(), 0, e), ("t".to_string(), 1, ErrorCode(27))];
        // v2: ["t" [0 error 0, 1 error 27]].
        let v2 = unhex("00000001 0001 74 00000002 00000000 0000 00000001 001b");
        assert_eq!(decode_response(&v2, 2).unwrap(), want);
        every_cut_fails(&v2, |b| decode_response(b, 2));
        let v8 = unhex(RESPONSE_V8);
        assert_eq!(decode_response(&v8, 8).unwrap(), want);
        every_cut_fails(&v8, |b| decode_response(b, 8));
    }

    #[test]
    fn the_listeners_refusal_decodes_as_partition_errors() {
        let topics = vec![("t".to_string(), vec![0, 1])];
        let e = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        for v in 2..=9 {
            let bytes = encoded(|w| encode_offset_commit_error(w, v, &topics, e));
            let want = vec![("t".to_string(), 0, e), ("t".to_string(), 1, e)];
            assert_eq!(decode_response(&bytes, v).unwrap(), want, "v{v}");
        }
    }
}
