//! Checks the in-process test leader (`tests/support/test_leader.rs`) with the crate's own
//! client: negotiation, metadata, list offsets, epochs, fetches at every version, and every
//! injected fault; and the batch builders of `tests/support/batches.rs`.

use crate::support::{batches, test_leader};

use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::BrokerConnection;
use replica_follower::client::cluster::{self, epoch_end_offset, fetch_metadata, list_offset};
use replica_follower::protocol::codec::Writer;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{
    self, AbortedTransaction, DivergingEpoch, FetchPartition, FetchRequest,
};
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
    last_stable_offset: i64,
    log_start: i64,
    aborted: Option<Vec<AbortedTransaction>>,
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

/// A raw read_uncommitted Fetch of `asks` at `version`, decoded with the crate's decoder.
fn fetch_with(
    conn: &mut BrokerConnection,
    version: i16,
    max_wait_ms: i32,
    asks: &[Ask],
) -> anyhow::Result<Vec<Part>> {
    fetch_isolated(conn, version, 0, max_wait_ms, asks)
}

/// A raw Fetch at `isolation_level` (0 read_uncommitted, 1 read_committed).
fn fetch_isolated(
    conn: &mut BrokerConnection,
    version: i16,
    isolation_level: i8,
    max_wait_ms: i32,
    asks: &[Ask],
) -> anyhow::Result<Vec<Part>> {
    let req = FetchRequest {
        replica_id: -1,
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 64 << 20,
        isolation_level,
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
        topic_ids: Default::default(),
        session_id: 0,
        session_epoch: -1,
        forgotten: Vec::new(),
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
            last_stable_offset: p.last_stable_offset,
            log_start: p.log_start_offset,
            aborted: p.aborted_transactions.clone(),
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
    leader.set_fetch_versions(14, 17);
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

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().unwrap())
}

/// Parses a built batch, checks its CRC and that it is exactly one batch.
fn parsed(b: &[u8]) -> BatchHeader {
    let h = BatchHeader::parse(b, usize::MAX).expect("built batch parses");
    h.verify_crc(b).expect("built batch's CRC verifies");
    assert_eq!(h.size_in_bytes, b.len());
    assert_eq!(h.magic, 2);
    h
}

fn offsets_of(h: &BatchHeader, b: &[u8]) -> Vec<i64> {
    decode_records(h, b)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect()
}

#[test]
fn batch_spec_writes_every_field() {
    use batches::{BATCH_TIMESTAMP, BatchSpec, SpecRecord};
    // One plain record is reference batch C.
    let c = BatchSpec::new(0, 0)
        .record(0, BATCH_TIMESTAMP, Some(b"key"), Some(b"value"))
        .build();
    assert_eq!(
        c,
        unhex(
            "0000000000000000000000400000000002db5e9cdd0000000000000000018bcfe568000000018bcfe56800ffffffffffffffffffffffffffff000000011c000000066b65790a76616c756500"
        )
    );

    let mut spec = BatchSpec::new(500, 7)
        .record(1, 2_000, Some(b"a"), None)
        .record(4, 1_990, None, Some(b"v"));
    spec.records[1]
        .headers
        .push(("h".to_string(), Some(b"x".to_vec())));
    spec.records
        .push(SpecRecord::new(6, -3, Some(b"z"), Some(b"")));
    spec.last_offset_delta = 9;
    spec.producer_id = 42;
    spec.producer_epoch = 3;
    spec.base_sequence = 17;
    spec.transactional = true;
    let b = spec.build();
    let h = parsed(&b);
    assert_eq!((h.base_offset, h.last_offset), (500, 509));
    assert_eq!(h.partition_leader_epoch, 7);
    assert_eq!(h.records_count, 3);
    assert_eq!(h.max_timestamp, 2_000);
    assert!(h.is_transactional() && !h.is_control());
    assert_eq!(h.attributes, 0x10);
    assert_eq!(be_i64(&b, 27), 2_000, "base timestamp");
    assert_eq!(be_i64(&b, 43), 42);
    assert_eq!(be_i16(&b, 51), 3);
    assert_eq!(be_i32(&b, 53), 17);
    assert_eq!(batches::producer_id(&b), 42);
    let rs = decode_records(&h, &b).unwrap();
    assert_eq!(
        rs.iter()
            .map(|r| (r.offset, r.timestamp))
            .collect::<Vec<_>>(),
        vec![(501, 2_000), (504, 1_990), (506, 1_997)]
    );
    assert_eq!(rs[0].value, None);
    assert_eq!(rs[1].key, None);
    assert_eq!(rs[1].headers, vec![("h".to_string(), Some(b"x".to_vec()))]);
    assert_eq!(rs[2].value, Some(Vec::new()));
}

#[test]
fn batch_helpers_build_what_they_promise() {
    use batches::*;
    let b = compacted_batch(100, 9, &[0, 3, 9], 2);
    let h = parsed(&b);
    assert_eq!((h.base_offset, h.last_offset), (100, 109));
    assert_eq!((h.partition_leader_epoch, h.records_count), (2, 3));
    assert_eq!(h.attributes, 0);
    assert_eq!(be_i64(&b, 43), -1, "no producer");
    assert_eq!((be_i16(&b, 51), be_i32(&b, 53)), (-1, -1));
    assert_eq!(offsets_of(&h, &b), vec![100, 103, 109]);
    assert_eq!(h.max_timestamp, BATCH_TIMESTAMP + 9);
    let rs = decode_records(&h, &b).unwrap();
    assert_eq!(rs[1].key.as_deref(), Some(&b"key-103"[..]));
    assert_eq!(rs[1].value.as_deref(), Some(&b"compacted-o103-e2"[..]));
    assert_eq!(rs[1].timestamp, BATCH_TIMESTAMP + 3);
    // The cleaner rebuilds the batch from its first kept record.
    let b = compacted_batch(100, 9, &[4, 5], 0);
    assert_eq!(be_i64(&b, 27), BATCH_TIMESTAMP + 4);
    assert_eq!(offsets_of(&parsed(&b), &b), vec![104, 105]);

    for b in [empty_batch(50, 4, 1), compacted_batch(50, 4, &[], 1)] {
        let h = parsed(&b);
        assert_eq!((h.base_offset, h.last_offset), (50, 54));
        assert_eq!((h.records_count, h.partition_leader_epoch), (0, 1));
        assert_eq!(b.len(), 61);
        assert_eq!(be_i64(&b, 27), -1, "base timestamp");
        assert_eq!(h.max_timestamp, BATCH_TIMESTAMP + 4);
    }

    let b = txn_batch(10, 3, 77, 2, 4);
    let h = parsed(&b);
    assert_eq!((h.base_offset, h.last_offset, h.records_count), (10, 12, 3));
    assert!(h.is_transactional() && !h.is_control());
    assert_eq!(h.partition_leader_epoch, 4);
    assert_eq!((be_i64(&b, 43), be_i16(&b, 51), be_i32(&b, 53)), (77, 2, 0));
    let rs = decode_records(&h, &b).unwrap();
    assert_eq!(rs[2].value.as_deref(), Some(&b"txn-p77-o12-e4"[..]));

    for (commit, kind) in [(false, 0u8), (true, 1u8)] {
        let b = control_batch(13, 77, 2, commit, 5, 4);
        let h = parsed(&b);
        assert_eq!((h.base_offset, h.last_offset, h.records_count), (13, 13, 1));
        assert!(h.is_transactional() && h.is_control());
        assert_eq!(h.attributes, 0x30);
        assert_eq!(
            (be_i64(&b, 43), be_i16(&b, 51), be_i32(&b, 53)),
            (77, 2, -1)
        );
        let rs = decode_records(&h, &b).unwrap();
        assert_eq!(rs[0].key, Some(vec![0, 0, 0, kind]));
        assert_eq!(rs[0].value, Some(vec![0, 0, 0, 0, 0, 5]));
    }
}

/// Every batch from `offset` on, fetched in pieces of at most `max_bytes`, concatenated.
fn fetch_all(
    conn: &mut BrokerConnection,
    leader: &TestLeader,
    offset: i64,
    max_bytes: i32,
) -> Vec<u8> {
    let mut got = Vec::new();
    let mut offset = offset;
    while offset < leader.log_end(0) {
        let mut a = ask(0, offset);
        a.max_bytes = max_bytes;
        let p = fetch_one(conn, 12, a);
        assert_eq!(p.error, ErrorCode::NONE);
        let (hs, end) = batches(&p.records);
        assert_eq!(end, SetEnd::Complete);
        offset = hs.last().unwrap().last_offset + 1;
        got.extend_from_slice(&p.records);
    }
    got
}

#[test]
fn compacted_log_is_served_byte_for_byte_with_its_gaps() {
    use batches::{BATCH_TIMESTAMP, compacted_batch, empty_batch};
    let leader = TestLeader::start(TOPIC, 1);
    let built = [
        compacted_batch(0, 9, &[1, 5, 9], 0),
        empty_batch(10, 4, 0),
        // 15..19 were a batch the cleaner removed entirely.
        compacted_batch(20, 4, &[2], 0),
    ];
    for b in &built {
        leader.append_batch(0, b.clone());
    }
    assert_eq!(leader.log_end(0), 25);
    leader.append(0, 3, 3);
    assert_eq!(leader.log_end(0), 28);
    let log = leader.log_bytes(0);
    assert!(log.starts_with(&built.concat()));
    let mut conn = connect(&leader);
    for max_bytes in [1, 1 << 20] {
        assert_eq!(fetch_all(&mut conn, &leader, 0, max_bytes), log);
    }
    // An offset in a hole gets the batch around it, or the next batch after a gap.
    let (hs, _) = batches(&fetch_one(&mut conn, 12, ask(0, 3)).records);
    assert_eq!(hs[0].base_offset, 0);
    let (hs, _) = batches(&fetch_one(&mut conn, 12, ask(0, 17)).records);
    assert_eq!(hs[0].base_offset, 20);
    let (hs, _) = batches(&fetch_one(&mut conn, 12, ask(0, 25)).records);
    assert_eq!((hs[0].base_offset, hs[0].partition_leader_epoch), (25, 0));
    // Timestamps come from the records, holes skipped; appended records come after them.
    let tp = TopicPartition::new(TOPIC, 0);
    let at = |ts| {
        let a = list_offset(&mut connect(&leader), 0, &tp, -1, ts)
            .unwrap()
            .unwrap();
        (a.offset, a.timestamp)
    };
    assert_eq!(at(BATCH_TIMESTAMP + 2), (5, BATCH_TIMESTAMP + 5));
    assert_eq!(at(BATCH_TIMESTAMP + 6), (9, BATCH_TIMESTAMP + 9));
    // `append` goes on after the largest timestamp appended so far.
    assert_eq!(at(BATCH_TIMESTAMP + 10), (25, BATCH_TIMESTAMP + 10));
}

#[test]
fn raw_bytes_are_served_verbatim_after_the_log() {
    use batches::BatchSpec;
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 5, 5);
    let good = leader.log_bytes(0);
    let below = BatchSpec::new(2, 0).record(0, 1, None, Some(b"x")).build();
    let mut negative = BatchSpec::new(-7, 0).record(0, 1, None, Some(b"y")).build();
    negative[57..61].copy_from_slice(&(-3i32).to_be_bytes());
    let hostile = [below, negative, vec![0xde, 0xad]].concat();
    leader.append_raw(0, hostile.clone());
    assert_eq!(leader.log_end(0), 5, "raw bytes move nothing");
    assert_eq!(leader.log_bytes(0), [&good[..], &hostile].concat());
    let mut conn = connect(&leader);
    assert_eq!(
        fetch_one(&mut conn, 12, ask(0, 0)).records,
        leader.log_bytes(0)
    );
    assert_eq!(fetch_one(&mut conn, 12, ask(0, 5)).records, hostile);
    // A batch appended later is served after them.
    leader.append(0, 2, 2);
    let p = fetch_one(&mut conn, 12, ask(0, 5));
    assert_eq!(p.records[..hostile.len()], hostile[..]);
    let (hs, _) = batches(&p.records[hostile.len()..]);
    assert_eq!((hs[0].base_offset, hs[0].last_offset), (5, 6));
    let (hs, _) = batches(&fetch_one(&mut conn, 12, ask(0, 6)).records);
    assert_eq!(hs[0].base_offset, 5);
}

#[test]
fn log_can_start_at_1000() {
    let leader = TestLeader::start(TOPIC, 2);
    leader.set_log_start(0, 1000);
    assert_eq!((leader.log_start(0), leader.log_end(0)), (1000, 1000));
    let tp = TopicPartition::new(TOPIC, 0);
    let mut conn = connect(&leader);
    for ts in [list_offsets::EARLIEST, list_offsets::LATEST] {
        let a = list_offset(&mut conn, 0, &tp, -1, ts).unwrap().unwrap();
        assert_eq!(a.offset, 1000);
    }
    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!(
        (p.error, p.log_start),
        (ErrorCode::OFFSET_OUT_OF_RANGE, 1000)
    );
    let p = fetch_one(&mut conn, 12, ask(0, 1000));
    assert_eq!(p.error, ErrorCode::NONE);
    assert!(p.records.is_empty());
    assert_eq!((p.high_watermark, p.log_start), (1000, 1000));

    leader.append(0, 3, 3);
    let p = fetch_one(&mut conn, 12, ask(0, 1000));
    let (hs, _) = batches(&p.records);
    assert_eq!((hs[0].base_offset, hs[0].last_offset), (1000, 1002));
    let (_, _, bytes) = BatchIter::new(&p.records, usize::MAX).next().unwrap();
    let rs = decode_records(&hs[0], bytes).unwrap();
    assert_eq!(rs[2].value.as_deref(), Some(&b"value-p0-o1002-e0"[..]));
    let e = epoch_end_offset(&mut conn, &tp, 0, 0).unwrap().unwrap();
    assert_eq!((e.leader_epoch, e.end_offset), (0, 1003));
    // The other partition still starts at 0.
    assert_eq!(leader.log_start(1), 0);
}

#[test]
fn high_watermark_override_is_reported_while_data_goes_beyond_it() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 10, 3);
    leader.set_high_watermark(0, Some(4));
    assert_eq!(leader.high_watermark(0), 4);
    let tp = TopicPartition::new(TOPIC, 0);
    let mut conn = connect(&leader);
    for v in [4, 11, 12] {
        let p = fetch_one(&mut conn, v, ask(0, 0));
        assert_eq!((p.high_watermark, p.last_stable_offset), (4, 4), "v{v}");
        assert_eq!(p.records, leader.log_bytes(0), "v{v}");
        let (hs, _) = batches(&p.records);
        assert_eq!(hs.last().unwrap().last_offset, 9);
        // Fetching above the reported high watermark is fine: the log goes to 10.
        let p = fetch_one(&mut conn, v, ask(0, 6));
        assert_eq!((p.error, p.high_watermark), (ErrorCode::NONE, 4));
        assert!(!p.records.is_empty());
    }
    let latest = |conn: &mut BrokerConnection, iso| {
        list_offset(conn, iso, &tp, -1, list_offsets::LATEST)
            .unwrap()
            .unwrap()
            .offset
    };
    assert_eq!((latest(&mut conn, 0), latest(&mut conn, 1)), (4, 4));
    leader.set_high_watermark(0, Some(12));
    assert_eq!(fetch_one(&mut conn, 12, ask(0, 0)).high_watermark, 12);
    leader.set_high_watermark(0, None);
    assert_eq!(fetch_one(&mut conn, 12, ask(0, 0)).high_watermark, 10);
    assert_eq!(latest(&mut conn, 0), 10);
}

/// 0-1 plain · 2-4 producer 7 · 5 ABORT 7 · 6-7 producer 8 (left open) · 8-9 plain.
fn transactional_leader() -> TestLeader {
    use batches::{control_batch, txn_batch};
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 2, 2);
    leader.append_batch(0, txn_batch(2, 3, 7, 0, 0));
    leader.append_batch(0, control_batch(5, 7, 0, false, 3, 0));
    leader.append_batch(0, txn_batch(6, 2, 8, 0, 0));
    leader.append(0, 2, 2);
    leader
}

fn aborted(list: &[(i64, i64)]) -> Option<Vec<AbortedTransaction>> {
    Some(
        list.iter()
            .map(|&(producer_id, first_offset)| AbortedTransaction {
                producer_id,
                first_offset,
            })
            .collect(),
    )
}

#[test]
fn read_committed_stops_at_the_lso_and_lists_aborted_transactions() {
    use batches::control_batch;
    let leader = transactional_leader();
    assert_eq!(
        (leader.last_stable_offset(0), leader.high_watermark(0)),
        (6, 10)
    );
    let mut conn = connect(&leader);
    let committed = |conn: &mut BrokerConnection, v, offset| {
        let mut parts = fetch_isolated(conn, v, 1, 0, &[ask(0, offset)]).unwrap();
        parts.remove(0)
    };
    for v in [4, 11, 12] {
        let p = committed(&mut conn, v, 0);
        assert_eq!((p.high_watermark, p.last_stable_offset), (10, 6), "v{v}");
        let (hs, _) = batches(&p.records);
        let ranges: Vec<_> = hs.iter().map(|h| (h.base_offset, h.last_offset)).collect();
        assert_eq!(ranges, vec![(0, 1), (2, 4), (5, 5)], "v{v}");
        assert!(leader.log_bytes(0).starts_with(&p.records));
        assert_eq!(p.aborted, aborted(&[(7, 2)]), "v{v}");
    }
    // From the marker on the abort still concerns the reader; at the LSO nothing is served.
    assert_eq!(committed(&mut conn, 12, 5).aborted, aborted(&[(7, 2)]));
    let p = committed(&mut conn, 12, 6);
    assert!(p.records.is_empty());
    assert_eq!((p.error, p.aborted), (ErrorCode::NONE, aborted(&[])));
    // A served range that ends before an aborted transaction starts does not list it.
    let mut a = ask(0, 0);
    a.max_bytes = 1;
    let p = fetch_isolated(&mut conn, 12, 1, 0, &[a]).unwrap().remove(0);
    assert_eq!(batches(&p.records).0.len(), 1);
    assert_eq!(p.aborted, aborted(&[]));

    let tp = TopicPartition::new(TOPIC, 0);
    let latest = |conn: &mut BrokerConnection, iso| {
        list_offset(conn, iso, &tp, -1, list_offsets::LATEST)
            .unwrap()
            .unwrap()
            .offset
    };
    assert_eq!((latest(&mut conn, 0), latest(&mut conn, 1)), (10, 6));

    // Producer 8 commits: everything is stable, and the old abort ended before offset 6.
    leader.append_batch(0, control_batch(10, 8, 0, true, 3, 0));
    assert_eq!(leader.last_stable_offset(0), 11);
    let p = committed(&mut conn, 12, 6);
    let (hs, _) = batches(&p.records);
    assert_eq!(hs.last().unwrap().last_offset, 10);
    assert_eq!((p.last_stable_offset, p.aborted), (11, aborted(&[])));
    assert_eq!(latest(&mut conn, 1), 11);
    // A truncation that drops the commit reopens the transaction.
    leader.truncate_and_bump_epoch(0, 10);
    assert_eq!(leader.last_stable_offset(0), 6);
}

#[test]
fn read_uncommitted_reports_an_lso_below_the_hw_while_a_transaction_is_open() {
    let leader = transactional_leader();
    let mut conn = connect(&leader);
    for v in [4, 12] {
        let p = fetch_one(&mut conn, v, ask(0, 0));
        assert_eq!((p.high_watermark, p.last_stable_offset), (10, 6), "v{v}");
        assert_eq!(p.records, leader.log_bytes(0), "v{v}");
        assert_eq!(p.aborted, None, "v{v}");
    }
    // The LSO is capped at an overridden high watermark.
    leader.set_high_watermark(0, Some(3));
    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!((p.high_watermark, p.last_stable_offset), (3, 3));
    assert_eq!(p.records, leader.log_bytes(0));
}

#[test]
fn metadata_reports_cluster_id_and_topic_id_from_their_versions() {
    let leader = TestLeader::start(TOPIC, 1);
    let id = leader.topic_id();
    assert_ne!(id, [0; 16]);
    let mut conn = connect(&leader);
    let mut ask_metadata = |v: i16, topics: &[String]| {
        let body = conn
            .send(ApiKey::Metadata, v, Duration::ZERO, |w| {
                metadata::encode_request(w, v, topics)
            })
            .unwrap();
        metadata::decode_response(body, v).unwrap()
    };
    for v in 1..=12 {
        let resp = ask_metadata(v, &[TOPIC.to_string(), "nope".to_string()]);
        let want_cluster = (v >= 2).then(|| test_leader::CLUSTER_ID.to_string());
        assert_eq!(resp.cluster_id, want_cluster, "v{v}");
        let want_id = if v >= 10 { id } else { [0; 16] };
        assert_eq!(resp.topics[0].topic_id, want_id, "v{v}");
        assert_eq!(resp.topics[1].topic_id, [0; 16], "v{v}");
    }
    leader.set_cluster_id(None);
    let zero_id = [0u8; 16];
    leader.set_topic_id(zero_id);
    let resp = ask_metadata(12, &[TOPIC.to_string()]);
    assert_eq!((resp.cluster_id, resp.topics[0].topic_id), (None, zero_id));
    let other = [9u8; 16];
    leader.set_topic_id(other);
    leader.set_cluster_id(Some("c2"));
    let md = fetch_metadata(&mut connect(&leader), &[TOPIC.to_string()]).unwrap();
    assert_eq!(md.cluster_id.as_deref(), Some("c2"));
    assert_eq!(md.topic_ids[TOPIC].0, other);
}

#[test]
fn recreate_topic_changes_the_id_and_empties_the_log() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 6, 3);
    leader.truncate_and_bump_epoch(0, 4);
    leader.append(0, 2, 2);
    let old_log = leader.log_bytes(0);
    let old_id = leader.topic_id();
    let mut conn = connect(&leader);
    assert_eq!(fetch_one(&mut conn, 12, ask(0, 0)).records, old_log);

    leader.recreate_topic(2);
    let new_id = leader.topic_id();
    assert_ne!(new_id, old_id);
    assert_ne!(new_id, [0; 16]);
    for p in 0..2 {
        assert_eq!((leader.log_start(p), leader.log_end(p)), (0, 0));
        assert_eq!(leader.leader_epoch(p), 0);
        assert!(leader.log_bytes(p).is_empty());
    }
    let md = fetch_metadata(&mut conn, &[TOPIC.to_string()]).unwrap();
    assert_eq!(md.topic_ids[TOPIC].0, new_id);
    let parts = &md.topics[TOPIC].1;
    assert_eq!(parts.len(), 2);
    assert!(parts.values().all(|l| l.leader_epoch == 0));
    let p = fetch_one(&mut conn, 12, ask(0, 5));
    assert_eq!(p.error, ErrorCode::OFFSET_OUT_OF_RANGE);
    let p = fetch_one(&mut conn, 12, ask(0, 0));
    assert_eq!((p.error, p.high_watermark), (ErrorCode::NONE, 0));
    assert!(p.records.is_empty());
    // The same offsets and values again, but later timestamps: different bytes.
    leader.append(0, 3, 3);
    let new_log = leader.log_bytes(0);
    assert_ne!(new_log[..], old_log[..new_log.len()]);
    let h = parsed(&new_log);
    assert_eq!((h.base_offset, h.partition_leader_epoch), (0, 0));
    assert_eq!(leader.served_offsets(0), vec![0, 5, 0]);
    leader.recreate_topic(1);
    assert_ne!(leader.topic_id(), new_id);
}

#[test]
fn appends_after_an_unclean_election_carry_the_new_epoch() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 4, 2);
    let old = leader.log_bytes(0);
    leader.truncate_and_bump_epoch(0, 2);
    leader.append(0, 2, 2);
    let new = leader.log_bytes(0);
    assert_eq!(new[..old.len() / 2], old[..old.len() / 2]);
    let (h, _, bytes) = BatchIter::new(&new, usize::MAX).nth(1).unwrap();
    assert_eq!((h.base_offset, h.partition_leader_epoch), (2, 1));
    let values: Vec<_> = decode_records(&h, bytes)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    assert_eq!(values, vec!["value-p0-o2-e1", "value-p0-o3-e1"]);
    // A prebuilt batch at the old epoch is still accepted; one at a higher epoch raises it.
    leader.append_batch(0, batches::compacted_batch(4, 1, &[1], 1));
    leader.append_batch(0, batches::compacted_batch(6, 0, &[0], 3));
    assert_eq!((leader.leader_epoch(0), leader.log_end(0)), (3, 7));
    let tp = TopicPartition::new(TOPIC, 0);
    let e = epoch_end_offset(&mut connect(&leader), &tp, 3, 1)
        .unwrap()
        .unwrap();
    assert_eq!((e.leader_epoch, e.end_offset), (1, 6));
}

/// A raw Fetch with session fields; returns (top-level error, session id, partitions
/// answered with their high watermark and record bytes).
fn session_fetch(
    conn: &mut BrokerConnection,
    session: (i32, i32),
    asks: &[(i32, i64)],
    forgotten: &[i32],
) -> (ErrorCode, i32, Vec<(i32, i64, usize)>) {
    let req = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 64 << 20,
        isolation_level: 0,
        topics: if asks.is_empty() {
            Vec::new()
        } else {
            vec![(
                TOPIC.to_string(),
                asks.iter()
                    .map(|&(partition, fetch_offset)| FetchPartition {
                        partition,
                        current_leader_epoch: -1,
                        fetch_offset,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: 1 << 20,
                    })
                    .collect(),
            )]
        },
        topic_ids: Default::default(),
        session_id: session.0,
        session_epoch: session.1,
        forgotten: if forgotten.is_empty() {
            Vec::new()
        } else {
            vec![(TOPIC.to_string(), forgotten.to_vec())]
        },
    };
    let body = conn
        .send(ApiKey::Fetch, 12, Duration::from_secs(5), |w| {
            fetch::encode_request(w, 12, &req)
        })
        .expect("fetch");
    let resp = fetch::decode_response(body, 12).expect("decode");
    let parts = resp
        .topics
        .iter()
        .flat_map(|(_, ps)| {
            ps.iter()
                .map(|p| (p.partition, p.high_watermark, p.records.len()))
        })
        .collect();
    (resp.error, resp.session_id, parts)
}

#[test]
fn fetch_sessions_answer_incrementally_and_refuse_unknown_ids_and_wrong_epochs() {
    let leader = TestLeader::start(TOPIC, 3);
    for p in 0..3 {
        leader.append(p, 4, 2);
    }
    let mut conn = connect(&leader);
    // Off by default: sessionless answers whatever is asked.
    let (e, id, parts) = session_fetch(&mut conn, (0, 0), &[(0, 0), (1, 0), (2, 0)], &[]);
    assert_eq!((e, id, parts.len()), (ErrorCode::NONE, 0, 3));

    leader.enable_fetch_sessions(true);
    let (e, id, parts) = session_fetch(&mut conn, (0, 0), &[(0, 4), (1, 4), (2, 0)], &[]);
    assert_eq!(e, ErrorCode::NONE);
    assert_ne!(id, 0, "a full fetch at epoch 0 opens a session");
    assert_eq!(parts.len(), 3, "a full answer lists every partition");
    // Nothing new except partition 2's records (its cached offset is 0).
    let (_, _, parts) = session_fetch(&mut conn, (id, 1), &[], &[]);
    assert_eq!(parts, vec![(2, 4, leader.log_bytes(2).len())]);
    // Still nothing new for 0 and 1; 2 moves on by being named.
    let (_, _, parts) = session_fetch(&mut conn, (id, 2), &[(2, 4)], &[]);
    assert!(parts.is_empty(), "{parts:?}");
    // A changed high watermark is news, even without records.
    leader.set_high_watermark(1, Some(2));
    let (_, _, parts) = session_fetch(&mut conn, (id, 3), &[], &[]);
    assert_eq!(
        parts.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
        vec![(1, 2)]
    );
    // An append to a forgotten partition is not answered.
    let (_, _, _) = session_fetch(&mut conn, (id, 4), &[], &[0]);
    leader.append(0, 2, 1);
    let (_, _, parts) = session_fetch(&mut conn, (id, 5), &[], &[]);
    assert!(parts.is_empty(), "{parts:?}");
    let seen = leader.seen_fetches();
    assert_eq!(seen.last().unwrap().session_epoch, 5);
    assert_eq!(seen[seen.len() - 2].forgotten, vec![0]);

    // A wrong epoch: 71, the session kept; a rejected one likewise.
    let (e, id71, parts) = session_fetch(&mut conn, (id, 9), &[], &[]);
    assert_eq!(
        (e, id71, parts.len()),
        (ErrorCode::INVALID_FETCH_SESSION_EPOCH, 0, 0)
    );
    leader.reject_next_session_epochs(1);
    let (e, _, _) = session_fetch(&mut conn, (id, 6), &[], &[]);
    assert_eq!(e, ErrorCode::INVALID_FETCH_SESSION_EPOCH);
    let (e, _, _) = session_fetch(&mut conn, (id, 6), &[], &[]);
    assert_eq!(e, ErrorCode::NONE);
    // Forgotten by the leader: 70.
    leader.forget_fetch_sessions();
    let (e, _, _) = session_fetch(&mut conn, (id, 7), &[], &[]);
    assert_eq!(e, ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
    // Another connection does not share this one's session.
    let (_, id2, _) = session_fetch(&mut conn, (0, 0), &[(0, 0)], &[]);
    let mut other = connect(&leader);
    let (e, _, _) = session_fetch(&mut other, (id2, 1), &[], &[]);
    assert_eq!(e, ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
    assert_eq!(leader.fetch_sessions_open(), 1);
}
