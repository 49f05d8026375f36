//! Checks the in-process test leader (`tests/support/test_leader.rs`) with the crate's own
//! client: negotiation, metadata, list offsets, epochs, fetches at every version, and every
//! injected fault.

#[path = "support/test_leader.rs"]
mod test_leader;

use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::BrokerConnection;
use replica_follower::client::cluster::{self, epoch_end_offset, fetch_metadata, list_offset};
use replica_follower::protocol::codec::Writer;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{self, DivergingEpoch, FetchPartition, FetchRequest};
use replica_follower::protocol::list_offsets::{self, ListOffsetsPartition};
use replica_follower::protocol::{ApiKey, encode_request_header, metadata};
use replica_follower::record::records::decode_records;
use replica_follower::record::{BatchHeader, BatchIter, SetEnd};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use test_leader::TestLeader;

const TOPIC: &str = "t";

fn connect(leader: &TestLeader) -> BrokerConnection {
    BrokerConnection::connect(&leader.addr(), "t", 64 << 20).expect("connect to the test leader")
}

/// One partition of a fetch answer, copied out of the connection's buffer.
#[derive(Debug)]
struct Part {
    partition: i32,
    error: ErrorCode,
    high_watermark: i64,
    log_start: i64,
    diverging: Option<DivergingEpoch>,
    records: Vec<u8>,
}

struct Ask {
    partition: i32,
    offset: i64,
    last_fetched_epoch: i32,
    max_bytes: i32,
}

fn ask(partition: i32, offset: i64) -> Ask {
    Ask {
        partition,
        offset,
        last_fetched_epoch: -1,
        max_bytes: 1 << 20,
    }
}

/// A raw Fetch of `asks` at `version`, decoded with the crate's decoder.
fn fetch_with(
    conn: &mut BrokerConnection,
    version: i16,
    max_wait_ms: i32,
    asks: &[Ask],
) -> anyhow::Result<Vec<Part>> {
    let req = FetchRequest {
        replica_id: -1,
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 64 << 20,
        isolation_level: 0,
        topics: vec![(
            TOPIC.to_string(),
            asks.iter()
                .map(|a| FetchPartition {
                    partition: a.partition,
                    current_leader_epoch: -1,
                    fetch_offset: a.offset,
                    last_fetched_epoch: a.last_fetched_epoch,
                    log_start_offset: -1,
                    partition_max_bytes: a.max_bytes,
                })
                .collect(),
        )],
    };
    let wait = Duration::from_millis(max_wait_ms.max(0) as u64);
    let body = conn.send(ApiKey::Fetch, version, wait, |w| {
        fetch::encode_request(w, version, &req)
    })?;
    let resp = fetch::decode_response(body, version)?;
    assert_eq!(resp.error, ErrorCode::NONE);
    assert_eq!(resp.topics.len(), 1);
    let (topic, parts) = &resp.topics[0];
    assert_eq!(topic, TOPIC);
    Ok(parts
        .iter()
        .map(|p| Part {
            partition: p.partition,
            error: p.error,
            high_watermark: p.high_watermark,
            log_start: p.log_start_offset,
            diverging: p.diverging_epoch,
            records: p.records.to_vec(),
        })
        .collect())
}

fn fetch_one(conn: &mut BrokerConnection, version: i16, a: Ask) -> Part {
    let mut parts = fetch_with(conn, version, 0, &[a]).expect("fetch");
    assert_eq!(parts.len(), 1);
    parts.remove(0)
}

/// Whole batches of a record set, checked; and how the set ended.
fn batches(records: &[u8]) -> (Vec<BatchHeader>, SetEnd) {
    let mut it = BatchIter::new(records, usize::MAX);
    let headers = it.by_ref().map(|(h, _, _)| h).collect();
    (headers, it.end().cloned().expect("walk finished"))
}

/// Sends raw bytes on a fresh connection and reads one answer frame (size prefix included);
/// the error kind tells how the read failed (end of stream when the leader closed the connection).
fn raw_exchange(addr: &str, request: &[u8]) -> Result<Vec<u8>, ErrorKind> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request);
    let mut size = [0u8; 4];
    s.read_exact(&mut size).map_err(|e| e.kind())?;
    let mut body = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
    s.read_exact(&mut body).map_err(|e| e.kind())?;
    Ok([&size[..], &body].concat())
}

fn frame(mut w: Writer) -> Vec<u8> {
    let mut framed = (w.buf.len() as i32).to_be_bytes().to_vec();
    framed.append(&mut w.buf);
    framed
}

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn negotiation_at_v3_advertises_every_api() {
    let leader = TestLeader::start(TOPIC, 1);
    let conn = connect(&leader);
    assert_eq!(conn.version(ApiKey::ApiVersions), Some(3));
    assert_eq!(conn.version(ApiKey::Fetch), Some(12));
    assert_eq!(conn.version(ApiKey::ListOffsets), Some(7));
    assert_eq!(conn.version(ApiKey::Metadata), Some(12));
    assert_eq!(conn.version(ApiKey::OffsetForLeaderEpoch), Some(4));
}

#[test]
fn negotiation_falls_back_after_unsupported_version() {
    let leader = TestLeader::start(TOPIC, 1);
    // The raw error-35 answer to ApiVersions v4 (reference vector B, with our range 0..3).
    let mut w = Writer::new();
    encode_request_header(&mut w, ApiKey::ApiVersions, 4, 2, "test");
    w.buf
        .extend_from_slice(&unhex("0e 727573742d666f6c6c6f776572 06 302e312e30 00"));
    let answer = raw_exchange(&leader.addr(), &frame(w)).expect("ApiVersions v4 is answered");
    assert_eq!(
        answer,
        unhex("00000010 00000002 0023 00000001 0012 0000 0003")
    );

    // The client asks at v3, gets error 35 with range 0..2, and retries at v2.
    leader.set_api_versions_max(2);
    let conn = connect(&leader);
    assert_eq!(conn.version(ApiKey::ApiVersions), Some(2));
    assert_eq!(conn.version(ApiKey::Fetch), Some(12));

    // The advertised Fetch range drives the negotiated version.
    leader.set_fetch_versions(4, 9);
    assert_eq!(connect(&leader).version(ApiKey::Fetch), Some(9));
    leader.set_fetch_versions(13, 17);
    let conn = connect(&leader);
    assert_eq!(conn.version(ApiKey::Fetch), None);
    assert!(conn.require_version(ApiKey::Fetch).is_err());
}

#[test]
fn metadata_names_the_leader_and_its_epochs() {
    let leader = TestLeader::start(TOPIC, 3);
    leader.append(1, 5, 5);
    leader.truncate_and_bump_epoch(1, 2);
    let mut conn = connect(&leader);
    let md = fetch_metadata(&mut conn, &[TOPIC.to_string(), "nope".to_string()]).unwrap();
    assert_eq!(md.broker_addr(1), Some(leader.addr().as_str()));
    assert_eq!(md.brokers.len(), 1);
    let (err, parts) = &md.topics[TOPIC];
    assert_eq!(*err, ErrorCode::NONE);
    assert_eq!(parts.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
    for (p, l) in parts {
        assert_eq!(l.leader_id, 1);
        assert_eq!(l.leader_epoch, if *p == 1 { 1 } else { 0 });
        assert_eq!(l.error, ErrorCode::NONE);
    }
    let (err, parts) = &md.topics["nope"];
    assert_eq!(*err, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert!(parts.is_empty());

    // Every version decodes; a null topic list means all topics.
    for v in 1..=12 {
        let body = conn
            .send(ApiKey::Metadata, v, Duration::ZERO, |w| {
                metadata::encode_request(w, v, &[TOPIC.to_string()])
            })
            .unwrap();
        let resp = metadata::decode_response(body, v).unwrap();
        assert_eq!(resp.topics.len(), 1, "v{v}");
        assert_eq!(resp.topics[0].partitions.len(), 3, "v{v}");
        let want_epoch = if v >= 7 { 1 } else { -1 };
        assert_eq!(
            resp.topics[0].partitions[1].leader_epoch, want_epoch,
            "v{v}"
        );
        assert_eq!(
            resp.brokers[0].port.to_string(),
            leader.addr()[10..],
            "v{v}"
        );
    }
    let body = conn
        .send(ApiKey::Metadata, 1, Duration::ZERO, |w| {
            w.i32(-1);
        })
        .unwrap();
    let resp = metadata::decode_response(body, 1).unwrap();
    assert_eq!(resp.topics[0].name, TOPIC);
}

#[test]
fn list_offsets_earliest_latest_and_timestamps() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 20, 5);
    let mut conn = connect(&leader);
    let tp = TopicPartition::new(TOPIC, 0);
    let earliest = list_offset(&mut conn, 0, &tp, -1, list_offsets::EARLIEST)
        .unwrap()
        .unwrap();
    let latest = list_offset(&mut conn, 0, &tp, -1, list_offsets::LATEST)
        .unwrap()
        .unwrap();
    assert_eq!((earliest.offset, latest.offset), (0, 20));
    assert_eq!(latest.leader_epoch, 0);
    // Record i has timestamp FIRST_TIMESTAMP + i.
    let at = |ts| {
        list_offset(&mut connect(&leader), 0, &tp, -1, ts)
            .unwrap()
            .unwrap()
    };
    let hit = at(test_leader::FIRST_TIMESTAMP + 7);
    assert_eq!(
        (hit.offset, hit.timestamp),
        (7, test_leader::FIRST_TIMESTAMP + 7)
    );
    assert_eq!(at(0).offset, 0);
    assert_eq!(at(test_leader::FIRST_TIMESTAMP + 20).offset, -1);

    leader.delete_records_before(0, 10);
    let earliest = list_offset(&mut conn, 0, &tp, -1, list_offsets::EARLIEST)
        .unwrap()
        .unwrap();
    assert_eq!(earliest.offset, 10);
    assert_eq!(leader.log_start(0), 10);

    // Every version; an unknown partition is error 3.
    for v in 1..=7 {
        let req = vec![(
            TOPIC.to_string(),
            [list_offsets::LATEST, list_offsets::EARLIEST]
                .into_iter()
                .map(|timestamp| ListOffsetsPartition {
                    partition: 0,
                    current_leader_epoch: -1,
                    timestamp,
                })
                .chain([ListOffsetsPartition {
                    partition: 9,
                    current_leader_epoch: -1,
                    timestamp: -1,
                }])
                .collect(),
        )];
        let body = conn
            .send(ApiKey::ListOffsets, v, Duration::ZERO, |w| {
                list_offsets::encode_request(w, v, 0, &req)
            })
            .unwrap();
        let resp = list_offsets::decode_response(body, v).unwrap();
        let offsets: Vec<_> = resp[0].1.iter().map(|p| (p.error.0, p.offset)).collect();
        assert_eq!(offsets, vec![(0, 20), (0, 10), (3, -1)], "v{v}");
    }
}

#[test]
fn fetch_serves_exactly_the_log_at_every_version() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 25, 4);
    leader.append(1, 7, 7);
    let log0 = leader.log_bytes(0);
    let mut conn = connect(&leader);
    for v in 4..=12 {
        for (partition, per_fetch) in [(0, 300), (1, 1 << 20)] {
            let mut got = Vec::new();
            let mut offset = 0;
            while offset < leader.log_end(partition) {
                let mut a = ask(partition, offset);
                a.max_bytes = per_fetch;
                let p = fetch_one(&mut conn, v, a);
                assert_eq!(p.error, ErrorCode::NONE, "v{v}");
                assert_eq!(p.high_watermark, leader.log_end(partition));
                assert_eq!(p.log_start, if v >= 5 { 0 } else { -1 });
                let (hs, end) = batches(&p.records);
                assert_eq!(end, SetEnd::Complete);
                assert!(!hs.is_empty());
                offset = hs.last().unwrap().last_offset + 1;
                got.extend_from_slice(&p.records);
            }
            assert_eq!(
                got,
                leader.log_bytes(partition),
                "v{v} partition {partition}"
            );
        }
    }
    assert_eq!(
        leader.fetch_requests(),
        leader.served_offsets(0).len() + leader.served_offsets(1).len()
    );
    assert_eq!(leader.served_offsets(1), vec![0; 9]);

    // The batches are what `append` promises.
    let (hs, _) = batches(&log0);
    assert_eq!(hs.len(), 7);
    let mut next = 0;
    for (h, (_, pos, bytes)) in hs.iter().zip(BatchIter::new(&log0, usize::MAX)) {
        assert_eq!(h.base_offset, next);
        assert_eq!(h.partition_leader_epoch, 0);
        h.verify_crc(bytes).unwrap();
        for r in decode_records(h, bytes).unwrap() {
            let o = r.offset;
            assert_eq!(r.timestamp, test_leader::FIRST_TIMESTAMP + o);
            let key = (o % 4 != 3).then(|| format!("key-{o}").into_bytes());
            assert_eq!(r.key, key, "offset {o} at {pos}");
            assert_eq!(r.value, Some(format!("value-p0-o{o}-e0").into_bytes()));
        }
        next = h.last_offset + 1;
    }
    assert_eq!(next, 25);

    // A mid-batch offset gets the batch holding it; a tiny limit still gets one batch; two
    // partitions in one request are both answered.
    let mut a = ask(0, 6);
    a.max_bytes = 1;
    let p = fetch_one(&mut conn, 12, a);
    let (hs, _) = batches(&p.records);
    assert_eq!(hs.len(), 1);
    assert_eq!((hs[0].base_offset, hs[0].last_offset), (4, 7));
    let asked_before = (
        leader.served_offsets(0).len(),
        leader.served_offsets(1).len(),
    );
    let parts = fetch_with(&mut conn, 12, 0, &[ask(0, 0), ask(1, 0)]).unwrap();
    assert_eq!(parts[0].records, log0);
    assert_eq!(parts[1].records, leader.log_bytes(1));
    assert_eq!(parts[1].partition, 1);
    assert_eq!(
        (
            leader.served_offsets(0).len(),
            leader.served_offsets(1).len()
        ),
        (asked_before.0 + 1, asked_before.1 + 1)
    );
    assert_eq!(leader.served_offsets(0).last(), Some(&0));
}

#[test]
fn fetch_at_log_end_waits_and_wakes_on_append() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 3, 3);
    let mut conn = connect(&leader);
    let t = Instant::now();
    let parts = fetch_with(&mut conn, 12, 5_000, &[ask(0, 3)]).unwrap();
    let waited = t.elapsed();
    assert!(parts[0].records.is_empty());
    assert_eq!(parts[0].error, ErrorCode::NONE);
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");

    // An append while the fetch waits answers it at once with the new batch.
    let addr = leader.addr();
    let waiter = std::thread::spawn(move || {
        let mut conn = BrokerConnection::connect(&addr, "t", 64 << 20).unwrap();
        fetch_with(&mut conn, 12, 5_000, &[ask(0, 3)]).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    leader.append(0, 2, 2);
    let parts = waiter.join().unwrap();
    let (hs, _) = batches(&parts[0].records);
    assert_eq!((hs[0].base_offset, hs[0].last_offset), (3, 4));
}

#[test]
fn corrupt_fetch_fails_the_crc_once() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 10, 5);
    leader.append(1, 5, 5);
    let log = leader.log_bytes(0);
    leader.corrupt_next_fetches(0, 1);
    let mut conn = connect(&leader);
    // An answer without data does not use the fault up.
    assert!(fetch_one(&mut conn, 12, ask(0, 10)).records.is_empty());
    // Another partition is not affected.
    let p1 = fetch_one(&mut conn, 12, ask(1, 0));
    assert_eq!(p1.records, leader.log_bytes(1));

    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!(p.records.len(), log.len());
    assert_ne!(p.records, log);
    let diff: Vec<_> = (0..log.len()).filter(|&i| log[i] != p.records[i]).collect();
    assert_eq!(diff.len(), 1);
    let mut it = BatchIter::new(&p.records, usize::MAX);
    let (h, _, bytes) = it.next().unwrap();
    assert!(diff[0] >= 61 && diff[0] < h.size_in_bytes);
    assert!(h.verify_crc(bytes).is_err());
    let (h2, _, bytes2) = it.next().unwrap();
    h2.verify_crc(bytes2).unwrap();
    assert_eq!(leader.log_bytes(0), log, "the log itself is intact");

    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!(p.records, log);
}

#[test]
fn partial_fetch_ends_inside_the_last_batch() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 9, 3);
    let log = leader.log_bytes(0);
    leader.partial_next_fetches(0, 2);
    let mut conn = connect(&leader);
    for v in [11, 12] {
        let p = fetch_one(&mut conn, v, ask(0, 0));
        assert!(p.records.len() < log.len());
        assert_eq!(p.records, log[..p.records.len()]);
        let (hs, end) = batches(&p.records);
        assert_eq!(hs.len(), 2);
        for (h, _, b) in BatchIter::new(&p.records, usize::MAX) {
            h.verify_crc(b).unwrap();
        }
        let SetEnd::Partial { bytes } = end else {
            panic!("expected a partial end, got {end:?}");
        };
        assert!(bytes >= 17);
    }
    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!(p.records, log);
    // A one-batch answer cut in half has no whole batch at all.
    leader.partial_next_fetches(0, 1);
    let p = fetch_one(&mut conn, 12, ask(0, 6));
    let (hs, end) = batches(&p.records);
    assert!(hs.is_empty());
    assert!(matches!(end, SetEnd::Partial { .. }));
}

#[test]
fn injected_errors_then_recovery() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 4, 2);
    leader.append(1, 4, 2);
    leader.error_next_fetches(0, ErrorCode::NOT_LEADER_OR_FOLLOWER.0, 2);
    let mut conn = connect(&leader);
    for v in [4, 12] {
        let parts = fetch_with(&mut conn, v, 0, &[ask(0, 0), ask(1, 0)]).unwrap();
        assert_eq!(parts[0].error, ErrorCode::NOT_LEADER_OR_FOLLOWER);
        assert!(parts[0].records.is_empty());
        assert_eq!(parts[0].high_watermark, 4);
        assert_eq!(parts[1].error, ErrorCode::NONE);
        assert_eq!(parts[1].records, leader.log_bytes(1));
    }
    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!(p.error, ErrorCode::NONE);
    assert_eq!(p.records, leader.log_bytes(0));
    // Unknown partitions are error 3.
    let p = fetch_one(&mut conn, 12, ask(5, 0));
    assert_eq!(p.error, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
}

#[test]
fn deleted_records_are_out_of_range() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 20, 5);
    let log = leader.log_bytes(0);
    leader.delete_records_before(0, 12);
    assert_eq!(leader.log_start(0), 12);
    let mut conn = connect(&leader);
    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!(p.error, ErrorCode::OFFSET_OUT_OF_RANGE);
    assert_eq!(p.log_start, 12);
    assert!(p.records.is_empty());
    // The batch holding the new start (10..14) stays.
    let p = fetch_one(&mut conn, 12, ask(0, 12));
    assert_eq!(p.error, ErrorCode::NONE);
    let (hs, _) = batches(&p.records);
    assert_eq!(hs[0].base_offset, 10);
    assert!(log.ends_with(&p.records));
    assert_eq!(leader.log_bytes(0), p.records);
    // Beyond the end is out of range too.
    let p = fetch_one(&mut conn, 11, ask(0, 21));
    assert_eq!(p.error, ErrorCode::OFFSET_OUT_OF_RANGE);
    assert_eq!(leader.served_offsets(0), vec![0, 12, 21]);
}

#[test]
fn truncation_bumps_the_epoch_and_reports_divergence() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 10, 3); // 0-2, 3-5, 6-8, 9
    leader.truncate_and_bump_epoch(0, 7); // drops 6-8 and 9
    assert_eq!(leader.log_end(0), 6);
    assert_eq!(leader.leader_epoch(0), 1);
    let tp = TopicPartition::new(TOPIC, 0);
    let mut conn = connect(&leader);

    // A follower that had offsets up to 9 at epoch 0.
    let mut a = ask(0, 10);
    a.last_fetched_epoch = 0;
    let p = fetch_one(&mut conn, 12, a);
    assert_eq!(p.error, ErrorCode::NONE);
    assert_eq!(
        p.diverging,
        Some(DivergingEpoch {
            epoch: 0,
            end_offset: 6
        })
    );
    assert!(p.records.is_empty());
    // Below v12 there is no divergence field: out of range.
    let p = fetch_one(&mut conn, 11, ask(0, 10));
    assert_eq!(p.error, ErrorCode::OFFSET_OUT_OF_RANGE);

    let e0 = epoch_end_offset(&mut conn, &tp, 1, 0).unwrap().unwrap();
    assert_eq!((e0.leader_epoch, e0.end_offset), (0, 6));
    let e1 = epoch_end_offset(&mut conn, &tp, 1, 1).unwrap().unwrap();
    assert_eq!((e1.leader_epoch, e1.end_offset), (1, 6));

    // New data at epoch 1 fills the same offsets; the stale follower still diverges at 6.
    leader.append(0, 6, 3);
    assert_eq!(leader.log_end(0), 12);
    let mut a = ask(0, 10);
    a.last_fetched_epoch = 0;
    let p = fetch_one(&mut conn, 12, a);
    assert_eq!(p.diverging.map(|d| (d.epoch, d.end_offset)), Some((0, 6)));
    let e1 = epoch_end_offset(&mut conn, &tp, 1, 1).unwrap().unwrap();
    assert_eq!((e1.leader_epoch, e1.end_offset), (1, 12));
    // A follower whose epoch-0 data ends at 6 reads on.
    let mut a = ask(0, 6);
    a.last_fetched_epoch = 0;
    let p = fetch_one(&mut conn, 12, a);
    assert_eq!(p.diverging, None);
    let (hs, _) = batches(&p.records);
    assert_eq!(hs[0].base_offset, 6);
    assert_eq!(hs[0].partition_leader_epoch, 1);
    let md = cluster::fetch_metadata(&mut conn, &[TOPIC.to_string()]).unwrap();
    assert_eq!(md.leader(&tp).unwrap().leader_epoch, 1);

    // A second election truncates below where epoch 1 began: epoch 1 vanishes from the history.
    leader.truncate_and_bump_epoch(0, 4); // drops 3-5 and everything after
    assert_eq!((leader.log_end(0), leader.leader_epoch(0)), (3, 2));
    let answers: Vec<_> = (0..=3)
        .map(|epoch| {
            let e = epoch_end_offset(&mut conn, &tp, 2, epoch).unwrap().unwrap();
            (e.leader_epoch, e.end_offset)
        })
        .collect();
    assert_eq!(answers, vec![(0, 3), (0, 3), (2, 3), (-1, -1)]);
    let mut a = ask(0, 9);
    a.last_fetched_epoch = 1;
    let p = fetch_one(&mut conn, 12, a);
    assert_eq!(p.diverging.map(|d| (d.epoch, d.end_offset)), Some((0, 3)));
}

#[test]
fn garbage_answers_are_decode_errors() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 4, 2);
    let mut conn = connect(&leader);
    for v in [4, 11, 12] {
        leader.garbage_next_fetches(2);
        for kind in 0..2 {
            let e = fetch_with(&mut conn, v, 0, &[ask(0, 0)]).unwrap_err();
            let msg = format!("{e:#}");
            let want = if kind == 0 { "partitions" } else { "records" };
            assert!(msg.contains(want), "v{v} kind {kind}: {msg}");
        }
        // The framing was sound, so the connection still works.
        let p = fetch_one(&mut conn, v, ask(0, 0));
        assert_eq!(p.records, leader.log_bytes(0));
    }
    assert_eq!(leader.fetch_requests(), 9);
}

#[test]
fn dropped_requests_close_the_connection() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 4, 2);
    let mut conn = connect(&leader);
    leader.drop_next_requests(1);
    let e = fetch_with(&mut conn, 12, 0, &[ask(0, 0)]).unwrap_err();
    assert!(format!("{e:#}").contains("no response"), "{e:#}");
    assert_eq!(leader.fetch_requests(), 0);
    // Negotiation is a request too.
    leader.drop_next_requests(1);
    assert!(BrokerConnection::connect(&leader.addr(), "t", 64 << 20).is_err());
    let mut conn = connect(&leader);
    assert_eq!(
        fetch_one(&mut conn, 12, ask(0, 0)).records,
        leader.log_bytes(0)
    );
}

#[test]
fn bad_requests_close_the_connection_and_the_leader_survives() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 4, 2);
    let addr = leader.addr();
    let header = |key: i16, version: i16| {
        let mut w = Writer::new();
        w.i16(key).i16(version).i32(7).string(Some("x"), false);
        if version >= 12 {
            w.empty_tags(true);
        }
        w
    };
    let mut cases: Vec<Vec<u8>> = vec![
        (-1i32).to_be_bytes().to_vec(),
        0x7fff_ffffi32.to_be_bytes().to_vec(),
        frame(Writer { buf: vec![0, 1, 0] }),
        frame(header(99, 0)),
        frame(header(1, 3)),
        frame(header(1, 13)),
        frame(header(1, 12)),
        frame(header(23, 4)),
    ];
    let mut w = header(1, 11);
    w.i32(-1)
        .i32(0)
        .i32(1)
        .i32(1 << 20)
        .i8(0)
        .i32(0)
        .i32(-1)
        .i32(-5);
    cases.push(frame(w));
    let mut w = header(3, 1);
    w.i32(0x0100_0000);
    cases.push(frame(w));
    for (i, case) in cases.iter().enumerate() {
        let got = raw_exchange(&addr, case);
        assert!(
            matches!(
                got,
                Err(ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset)
            ),
            "case {i}: {got:?}"
        );
    }
    let mut conn = connect(&leader);
    assert_eq!(
        fetch_one(&mut conn, 12, ask(0, 0)).records,
        leader.log_bytes(0)
    );
}

#[test]
fn dropping_the_leader_closes_everything() {
    let leader = TestLeader::start(TOPIC, 1);
    let addr = leader.addr();
    let mut conn = connect(&leader);
    drop(leader);
    assert!(fetch_with(&mut conn, 12, 0, &[ask(0, 0)]).is_err());
    assert!(BrokerConnection::connect(&addr, "t", 64 << 20).is_err());
}
