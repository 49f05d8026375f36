//! An isolation level other than 0 (read_uncommitted) and 1 (read_committed) is
//! INVALID_REQUEST, where Kafka's broker puts its error for a request it cannot read
//! (`IsolationLevel.forId` throws; `getErrorResponse`):
//! - Fetch below v13: at the top level (v7+) and in every partition as named, with no data;
//!   at v13+: at the top level only, no partitions. Nothing is served, no session opened.
//! - ListOffsets (v2+, where the field is): in every partition as named, offset -1.
//!
//! And valid levels are still served on the same connection.

use crate::support::fetch_session;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::list_offsets::{self, ListOffsetsPartition};
use replica_follower::protocol::uuid::Uuid;
use std::time::Duration;

const TOPIC: &str = "isolation";

#[test]
fn an_invalid_isolation_level_is_invalid_request() {
    let leader = fetch_session::leader_of(TOPIC, 2, 50, 5);
    let (_dir, _data, addr, mut d) = fetch_session::serving(&leader, TOPIC, |c| c);
    let mut conn = fetch_session::connect(&addr);
    fetch_session::wait_for_high_watermarks(&mut conn, &leader, TOPIC, &[0, 1]);
    let id = Uuid(leader.topic_id());

    for version in [4, 7, 11, 12, 13] {
        for level in [2, -1, 127] {
            // Opening a session (v7+), partition 1 named twice.
            let epoch = if version >= 7 { 0 } else { -1 };
            let mut req =
                fetch_session::request(TOPIC, id, &[(0, 0), (1, 0), (1, 5)], &[], 0, epoch, -1, 0);
            req.isolation_level = level;
            let r = fetch_session::send(&mut conn, version, &req);
            let what = format!("Fetch v{version} isolation {level}");
            assert_eq!(r.session_id, 0, "{what}");
            if version >= 7 {
                assert_eq!(r.error, ErrorCode::INVALID_REQUEST, "{what}");
            }
            if version >= 13 {
                assert!(r.answers.is_empty(), "{what}: {:?}", r.answers);
            } else {
                assert_eq!(r.partitions(), [0, 1, 1], "{what}");
                for (_, a) in &r.answers {
                    assert_eq!(a.error, ErrorCode::INVALID_REQUEST, "{what}");
                    assert!(a.records.is_empty(), "{what}");
                    assert_eq!((a.high_watermark, a.log_start_offset), (-1, -1), "{what}");
                }
            }
        }
        for level in [0, 1] {
            let mut req = fetch_session::request(TOPIC, id, &[(0, 0)], &[], 0, -1, -1, 0);
            req.isolation_level = level;
            let r = fetch_session::send(&mut conn, version, &req);
            assert_eq!(r.error, ErrorCode::NONE);
            assert_eq!(r.answers[0].1.error, ErrorCode::NONE);
            assert!(!r.answers[0].1.records.is_empty());
        }
    }

    let parts = || {
        vec![
            ListOffsetsPartition {
                partition: 0,
                current_leader_epoch: -1,
                timestamp: -1,
            },
            ListOffsetsPartition {
                partition: 1,
                current_leader_epoch: -1,
                timestamp: -3,
            },
        ]
    };
    for version in 2..=7 {
        for level in [2, -1, 0, 1] {
            let topics = [
                (TOPIC.to_string(), parts()),
                ("elsewhere".to_string(), parts()),
            ];
            let body = conn
                .send(ApiKey::ListOffsets, version, Duration::ZERO, |w| {
                    list_offsets::encode_request(w, version, level, &topics)
                })
                .unwrap();
            let resp = list_offsets::decode_response(body, version).unwrap();
            let got: Vec<(&str, i32, ErrorCode)> = resp
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), p.partition, p.error)))
                .collect();
            let (mine, elsewhere) = if level == 0 || level == 1 {
                (ErrorCode::NONE, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
            } else {
                (ErrorCode::INVALID_REQUEST, ErrorCode::INVALID_REQUEST)
            };
            assert_eq!(
                got,
                [
                    (TOPIC, 0, mine),
                    (TOPIC, 1, mine),
                    ("elsewhere", 0, elsewhere),
                    ("elsewhere", 1, elsewhere)
                ],
                "ListOffsets v{version} isolation {level}"
            );
            if mine == ErrorCode::INVALID_REQUEST {
                assert!(resp.iter().all(|(_, ps)| ps.iter().all(|p| p.offset == -1)));
            }
        }
    }
    fetch_session::stop_calmly(&mut d);
}
