//! A request naming a partition more than once is answered as Kafka's broker answers it:
//! - Fetch (sessionless, session-opening, v13 by topic id): once, where first named, as
//!   last asked (Kafka reads them into a `LinkedHashMap`); 65,000 copies cost one
//!   partition's answer;
//! - ListOffsets: once, with INVALID_REQUEST (`ListOffsetsRequest.duplicatePartitions`),
//!   60,000 MAX_TIMESTAMP copies included; the other partitions are answered;
//! - Metadata: each topic once, however it is named (by name, by id, twice);
//! - OffsetForLeaderEpoch: every copy, as Kafka answers them.

use crate::support::fetch_session::{self, Reply};
use replica_follower::client::BrokerConnection;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::list_offsets::{self, ListOffsetsPartition};
use replica_follower::protocol::metadata;
use replica_follower::protocol::offset_for_leader_epoch::{self, EpochRequest};
use replica_follower::protocol::uuid::Uuid;
use replica_follower::record::BatchIter;
use std::time::Duration;

const TOPIC: &str = "repeated";

/// The offset of the first batch in `records`.
fn first_offset(records: &[u8]) -> i64 {
    BatchIter::new(records, usize::MAX)
        .next()
        .map(|(h, _, _)| h.base_offset)
        .expect("records")
}

fn fetch_repeated(conn: &mut BrokerConnection, id: Uuid, version: i16, epoch: i32) -> Reply {
    // Partition 0 three times (at 0, 10, then 20), partition 1, then 0 again in a second
    // entry of the same topic.
    let ask = |parts: &[(i32, i64)]| fetch_session::request(TOPIC, id, parts, &[], 0, epoch, -1, 0);
    let mut req = ask(&[(0, 0), (0, 10), (1, 5), (0, 20)]);
    req.topics.extend(ask(&[(0, 30)]).topics);
    fetch_session::send(conn, version, &req)
}

/// (partition, error, offset) of a ListOffsets answer.
type Answered = (i32, ErrorCode, i64);

fn list_offsets_of(
    conn: &mut BrokerConnection,
    version: i16,
    topics: &[(String, Vec<ListOffsetsPartition>)],
) -> Vec<(String, Vec<Answered>)> {
    let body = conn
        .send(ApiKey::ListOffsets, version, Duration::ZERO, |w| {
            list_offsets::encode_request(w, version, 0, topics)
        })
        .unwrap();
    list_offsets::decode_response(body, version)
        .unwrap()
        .into_iter()
        .map(|(t, ps)| {
            (
                t,
                ps.into_iter()
                    .map(|p| (p.partition, p.error, p.offset))
                    .collect(),
            )
        })
        .collect()
}

fn lo(partition: i32, timestamp: i64) -> ListOffsetsPartition {
    ListOffsetsPartition {
        partition,
        current_leader_epoch: -1,
        timestamp,
    }
}

#[test]
fn repeated_partitions_are_answered_as_kafka_answers_them() {
    let leader = fetch_session::leader_of(TOPIC, 3, 200, 2);
    let (_dir, _data, addr, mut d) = fetch_session::serving(&leader, TOPIC, |c| c);
    let mut conn = fetch_session::connect(&addr);
    fetch_session::wait_for_high_watermarks(&mut conn, &leader, TOPIC, &[0, 1, 2]);
    let id = Uuid(leader.topic_id());

    // Fetch, sessionless and opening a session, by name and by topic id: partition 0 once,
    // first, at the offset it was last asked for; then partition 1.
    for version in [4, 12, 13] {
        for epoch in [-1, 0] {
            let r = fetch_repeated(&mut conn, id, version, epoch);
            assert_eq!(r.error, ErrorCode::NONE);
            assert_eq!(r.partitions(), [0, 1], "v{version} epoch {epoch}");
            assert!(r.answers.iter().all(|(t, _)| t == TOPIC));
            assert_eq!(first_offset(&r.answers[0].1.records), 30);
            assert_eq!(first_offset(&r.answers[1].1.records), 4, "batches of 2");
            if epoch == 0 && version >= 7 {
                // The session holds each partition once: an incremental fetch naming none
                // answers them (their positions are new to it) once each.
                assert_ne!(r.session_id, 0);
                let next = fetch_session::request(TOPIC, id, &[], &[], r.session_id, 1, -1, 0);
                let inc = fetch_session::send(&mut conn, version, &next);
                assert_eq!(inc.error, ErrorCode::NONE);
                let mut parts = inc.partitions();
                parts.sort();
                parts.dedup();
                assert_eq!(
                    parts.len(),
                    inc.partitions().len(),
                    "{:?}",
                    inc.partitions()
                );
            }
        }
    }
    // 65,000 copies of one partition in a v4 request of about 1 MB: one answer.
    let req = fetch_session::request(TOPIC, id, &[(2, 0); 65_000], &[], 0, -1, -1, 0);
    let r = fetch_session::send(&mut conn, 4, &req);
    assert_eq!(r.partitions(), [2]);
    assert_eq!(first_offset(&r.answers[0].1.records), 0);
    // The same request that names nothing twice still gets every partition.
    let r = fetch_session::send(
        &mut conn,
        12,
        &fetch_session::request(TOPIC, id, &[(0, 0), (1, 0), (2, 0)], &[], 0, -1, -1, 0),
    );
    assert_eq!(r.partitions(), [0, 1, 2]);

    // ListOffsets: a repeated partition once, INVALID_REQUEST, -1; the others answered; a
    // topic named in two entries is one topic of the answer.
    for version in [1, 4, 7] {
        let got = list_offsets_of(
            &mut conn,
            version,
            &[
                (TOPIC.to_string(), vec![lo(0, -1), lo(1, -2), lo(0, -2)]),
                ("elsewhere".to_string(), vec![lo(0, -1)]),
                (TOPIC.to_string(), vec![lo(0, -1), lo(2, -1)]),
            ],
        );
        let invalid = ErrorCode::INVALID_REQUEST;
        assert_eq!(
            got,
            [
                (
                    TOPIC.to_string(),
                    vec![
                        (0, invalid, -1),
                        (1, ErrorCode::NONE, 0),
                        (2, ErrorCode::NONE, leader.log_end(2))
                    ]
                ),
                (
                    "elsewhere".to_string(),
                    vec![(0, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1)]
                ),
            ],
            "v{version}"
        );
    }
    let got = list_offsets_of(
        &mut conn,
        7,
        &[(TOPIC.to_string(), vec![lo(1, -3); 60_000])],
    );
    assert_eq!(
        got,
        [(TOPIC.to_string(), vec![(1, ErrorCode::INVALID_REQUEST, -1)])]
    );

    // Metadata: a topic named twice, or by name and by id, is described once; so is an
    // unknown one named twice.
    let v = conn.require_version(ApiKey::Metadata).unwrap();
    let names = [TOPIC, TOPIC, "elsewhere", TOPIC, "elsewhere"].map(String::from);
    let body = conn
        .send(ApiKey::Metadata, v, Duration::ZERO, |w| {
            metadata::encode_request(w, v, &names)
        })
        .unwrap();
    let md = metadata::decode_response(body, v).unwrap();
    let described: Vec<(&str, ErrorCode, usize)> = md
        .topics
        .iter()
        .map(|t| (t.name.as_str(), t.error, t.partitions.len()))
        .collect();
    assert_eq!(
        described,
        [
            (TOPIC, ErrorCode::NONE, 3),
            ("elsewhere", ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, 0)
        ]
    );
    let topic_id = leader.topic_id();
    let body = conn
        .send(ApiKey::Metadata, 12, Duration::ZERO, |w| {
            // [by id, by name, by id again]
            w.array_len(3, true);
            w.uuid(&topic_id).string(None, true).empty_tags(true);
            w.uuid(&[0; 16]).string(Some(TOPIC), true).empty_tags(true);
            w.uuid(&topic_id).string(None, true).empty_tags(true);
            w.bool(false).bool(false).empty_tags(true);
        })
        .unwrap();
    let md = metadata::decode_response(body, 12).unwrap();
    let described: Vec<&str> = md.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(described, [TOPIC]);

    // OffsetForLeaderEpoch: Kafka keeps every copy (its topics are a multi-collection, its
    // partitions a list), and so is every copy answered.
    let epoch = leader.leader_epoch(0);
    let ask = |leader_epoch| EpochRequest {
        partition: 0,
        current_leader_epoch: -1,
        leader_epoch,
    };
    let topics = [
        (
            TOPIC.to_string(),
            vec![ask(epoch), ask(epoch + 1), ask(epoch)],
        ),
        (TOPIC.to_string(), vec![ask(epoch)]),
    ];
    let body = conn
        .send(ApiKey::OffsetForLeaderEpoch, 4, Duration::ZERO, |w| {
            offset_for_leader_epoch::encode_request(w, 4, &topics)
        })
        .unwrap();
    let resp = offset_for_leader_epoch::decode_response(body, 4).unwrap();
    let got: Vec<Vec<(i32, i64)>> = resp
        .iter()
        .map(|(_, ps)| ps.iter().map(|p| (p.leader_epoch, p.end_offset)).collect())
        .collect();
    let end = leader.log_end(0);
    assert_eq!(
        got,
        [
            vec![(epoch, end), (-1, -1), (epoch, end)],
            vec![(epoch, end)]
        ]
    );
    fetch_session::stop_calmly(&mut d);
}
