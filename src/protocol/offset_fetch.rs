//! OffsetFetch (key 9), v2–9, flexible from v6: every committed offset of a group
//! (`OffsetFetch{Request,Response}.json`).
//!
//! Request v2–7: GroupId STRING · Topics nullable ARRAY{Name, PartitionIndexes ARRAY INT32}
//! (null: every partition) · RequireStable BOOL (v7+). v8+: Groups ARRAY{GroupId, MemberId
//! NULLABLE_STRING (v9+), MemberEpoch INT32 (v9+), Topics nullable ARRAY} · RequireStable.
//! Response v2–7: ThrottleTimeMs INT32 (v3+) · Topics ARRAY{Name STRING, Partitions
//! ARRAY{PartitionIndex INT32, CommittedOffset INT64, CommittedLeaderEpoch INT32 (v5+),
//! Metadata NULLABLE_STRING, ErrorCode INT16}} · ErrorCode INT16. v8+: ThrottleTimeMs ·
//! Groups ARRAY{GroupId, Topics (as above), ErrorCode}.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;
use super::offset_commit::CommittedOffset;

/// One group's answer: its error, and each partition's offset (-1 when none is committed)
/// with the partition's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    /// The group answered (v8+; before, the one group asked).
    pub group: Option<String>,
    pub error: ErrorCode,
    pub partitions: Vec<(CommittedOffset, ErrorCode)>,
}

/// Asks for every partition of `group`, as a client outside the group (no member id, member
/// epoch -1), not waiting for pending transactional commits.
pub fn encode_request(w: &mut Writer, version: i16, group: &str) {
    let flexible = version >= 6;
    if version <= 7 {
        w.string(Some(group), flexible).null_array(flexible);
    } else {
        w.array_len(1, true).string(Some(group), true);
        if version >= 9 {
            w.string(None, true).i32(-1);
        }
        w.null_array(true).empty_tags(true);
    }
    if version >= 7 {
        w.bool(false);
    }
    w.empty_tags(flexible);
}

fn read_topics(
    r: &mut Reader<'_>,
    version: i16,
    flexible: bool,
) -> DecodeResult<Vec<(CommittedOffset, ErrorCode)>> {
    let mut out = Vec::new();
    let nt = r.array_count(flexible, 2, "OffsetFetch topics")?;
    for _ in 0..nt {
        let topic = r.string(flexible, "OffsetFetch topic")?;
        // The smallest partition: index, offset, metadata and error.
        let np = r.array_count(flexible, 15, "OffsetFetch partitions")?;
        for _ in 0..np {
            let partition = r.i32("OffsetFetch partition_index")?;
            let offset = r.i64("OffsetFetch committed_offset")?;
            let leader_epoch = if version >= 5 {
                r.i32("OffsetFetch committed_leader_epoch")?
            } else {
                -1
            };
            let metadata = r.nullable_string(flexible, "OffsetFetch metadata")?;
            let error = ErrorCode(r.i16("OffsetFetch error_code")?);
            if flexible {
                r.skip_tagged_fields("OffsetFetch partition tags")?;
            }
            let committed = CommittedOffset {
                topic: topic.clone(),
                partition,
                offset,
                leader_epoch,
                metadata,
            };
            out.push((committed, error));
        }
        if flexible {
            r.skip_tagged_fields("OffsetFetch topic tags")?;
        }
    }
    Ok(out)
}

pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<Vec<GroupOffsets>> {
    let flexible = version >= 6;
    let mut r = Reader::new(body);
    if version >= 3 {
        r.i32("OffsetFetch throttle_time_ms")?;
    }
    let mut out = Vec::new();
    if version <= 7 {
        let partitions = read_topics(&mut r, version, flexible)?;
        let error = ErrorCode(r.i16("OffsetFetch error_code")?);
        out.push(GroupOffsets {
            group: None,
            error,
            partitions,
        });
    } else {
        let ng = r.array_count(true, 5, "OffsetFetch groups")?;
        for _ in 0..ng {
            let group = r.string(true, "OffsetFetch group_id")?;
            let partitions = read_topics(&mut r, version, true)?;
            let error = ErrorCode(r.i16("OffsetFetch group error_code")?);
            r.skip_tagged_fields("OffsetFetch group tags")?;
            out.push(GroupOffsets {
                group: Some(group),
                error,
                partitions,
            });
        }
    }
    if flexible {
        r.skip_tagged_fields("OffsetFetch tags")?;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::protocol::group::{decode_offset_fetch_request, encode_offset_fetch_error};
    use crate::record::batch::tests::unhex;

    /// A v8 response: throttle, [group "g", ["t" [0: 100, epoch 4, "m", error 0]], error 0],
    /// tags.
    pub(crate) const RESPONSE_V8: &str = "00000000 02 0267 02 0274 02
        00000000 0000000000000064 00000004 026d 0000 00 00 0000 00 00";

    #[test]
    fn request_golden_bytes_and_the_listener_reads_them() {
        let golden = [
            // "g", topics null.
            (2, "0001 67 ffffffff"),
            // Compact, topics null, require stable false, tags.
            (7, "0267 00 00 00"),
            // [group "g", topics null, tags], require stable, tags.
            (8, "02 0267 00 00 00 00"),
            // + member id null and member epoch -1 after the group id.
            (9, "02 0267 00 ffffffff 00 00 00 00"),
        ];
        for (v, hex) in golden {
            assert_eq!(encoded(|w| encode_request(w, v, "g")), unhex(hex), "v{v}");
        }
        for v in 2..=9 {
            let req = decode_offset_fetch_request(&encoded(|w| encode_request(w, v, "g")), v);
            let req = req.unwrap();
            assert!(req.topics.is_empty(), "v{v}");
            let groups: &[&str] = if v >= 8 { &["g"] } else { &[] };
            assert_eq!(req.groups, groups, "v{v}");
        }
    }

    fn committed(partition: i32, leader_epoch: i32, metadata: Option<&str>) -> CommittedOffset {
        CommittedOffset {
            topic: "t".into(),
            partition,
            offset: if partition == 0 { 100 } else { -1 },
            leader_epoch,
            metadata: metadata.map(String::from),
        }
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let none = ErrorCode::NONE;
        // v2: ["t" [0: 100, "m", error 0; 1: -1, "", error 0]], error 0.
        let v2 = unhex(
            "00000001 0001 74 00000002 00000000 0000000000000064 0001 6d 0000
             00000001 ffffffffffffffff 0000 0000 0000",
        );
        let want = GroupOffsets {
            group: None,
            error: none,
            partitions: vec![
                (committed(0, -1, Some("m")), none),
                (committed(1, -1, Some("")), none),
            ],
        };
        assert_eq!(decode_response(&v2, 2).unwrap(), [want]);
        every_cut_fails(&v2, |b| decode_response(b, 2));
        // v5: throttle, the leader epoch after the offset.
        let v5 = unhex(
            "00000000 00000001 0001 74 00000001 00000000 0000000000000064 00000004 ffff 0000 0000",
        );
        let want = GroupOffsets {
            group: None,
            error: none,
            partitions: vec![(committed(0, 4, None), none)],
        };
        assert_eq!(decode_response(&v5, 5).unwrap(), [want]);
        every_cut_fails(&v5, |b| decode_response(b, 5));
        let v8 = unhex(RESPONSE_V8);
        let want = GroupOffsets {
            group: Some("g".into()),
            error: none,
            partitions: vec![(committed(0, 4, Some("m")), none)],
        };
        assert_eq!(decode_response(&v8, 8).unwrap(), [want]);
        every_cut_fails(&v8, |b| decode_response(b, 8));
    }

    #[test]
    fn the_listeners_refusal_decodes_as_a_group_error() {
        let e = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        for v in 2..=9 {
            let bytes = encoded(|w| encode_request(w, v, "g"));
            let req = decode_offset_fetch_request(&bytes, v).unwrap();
            let answer = encoded(|w| encode_offset_fetch_error(w, v, &req, e));
            let want = GroupOffsets {
                group: (v >= 8).then(|| "g".to_string()),
                error: e,
                partitions: Vec::new(),
            };
            assert_eq!(decode_response(&answer, v).unwrap(), [want], "v{v}");
        }
    }
}
