//! The replica as a read-only Kafka broker: a daemon follows the in-process test leader with
//! `[serve]` set, and the project's own client reads the replica through the listener —
//! Fetch at every version v4–v13 returns exactly the local segment bytes (and the leader's),
//! ListOffsets, Metadata and OffsetForLeaderEpoch answer from the local log; bad clients are
//! refused without effect on others or on following; `serve --data-dir` serves the stopped
//! replica the same bytes, and is refused while the daemon holds the lock.

use crate::support;
use crate::support::test_leader::{CLUSTER_ID, TestLeader};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::BrokerConnection;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{self, FetchRequest};
use replica_follower::protocol::list_offsets::{self, ListOffsetsPartition};
use replica_follower::protocol::metadata;
use replica_follower::protocol::offset_for_leader_epoch::{self, EpochRequest};
use replica_follower::protocol::uuid::Uuid;
use replica_follower::record::BatchIter;
use std::path::Path;
use std::time::{Duration, Instant};

const TOPIC: &str = "served";

fn connect(addr: &str) -> BrokerConnection {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match BrokerConnection::connect(addr, "serve-test", 64 << 20) {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("connect {addr}: {e:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Every batch from `from` to the served high watermark, fetching at `version`, each
/// response's records as served.
fn fetch_all(conn: &mut BrokerConnection, version: i16, from: i64, id: Uuid) -> (Vec<u8>, i64) {
    let tp = TopicPartition::new(TOPIC, 0);
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let mut req: FetchRequest = support::one_partition_fetch(&tp, offset, 3000);
        req.topic_ids.insert(TOPIC.to_string(), id);
        let names = req.topic_names();
        let body = conn
            .send(ApiKey::Fetch, version, Duration::from_secs(1), |w| {
                fetch::encode_request(w, version, &req)
            })
            .unwrap();
        let resp = fetch::decode_response_named(body, version, &names).unwrap();
        let p = &resp.topics[0].1[0];
        assert_eq!(p.error, ErrorCode::NONE, "v{version} at {offset}");
        assert_eq!(resp.topics[0].0, TOPIC);
        let hw = p.high_watermark;
        let mut n = 0;
        for (h, _, b) in BatchIter::new(p.records, usize::MAX) {
            h.verify_crc(b).unwrap();
            out.extend_from_slice(b);
            offset = h.last_offset + 1;
            n += 1;
        }
        assert_eq!(
            BatchIter::new(p.records, usize::MAX)
                .map(|(_, _, b)| b.len())
                .sum::<usize>(),
            p.records.len(),
            "v{version}: only whole batches are served"
        );
        if offset >= hw {
            return (out, hw);
        }
        assert!(n > 0, "v{version}: no progress at {offset} below {hw}");
    }
}

fn list_offset(conn: &mut BrokerConnection, version: i16, timestamp: i64) -> (i64, i64) {
    let parts = vec![ListOffsetsPartition {
        partition: 0,
        current_leader_epoch: -1,
        timestamp,
    }];
    let body = conn
        .send(ApiKey::ListOffsets, version, Duration::ZERO, |w| {
            list_offsets::encode_request(w, version, 0, &[(TOPIC.to_string(), parts)])
        })
        .unwrap();
    let resp = list_offsets::decode_response(body, version).unwrap();
    let p = &resp[0].1[0];
    assert_eq!(p.error, ErrorCode::NONE);
    (p.offset, p.timestamp)
}

fn serve_config(dir: &Path, data: &Path, leader: &TestLeader, port: u16) -> std::path::PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .set("log.segment_bytes", 4096)
        .set("log.index_interval_bytes", 512)
        .set("log.flush_interval_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("serve.listen", format!("127.0.0.1:{port}"))
        .set("serve.node_id", 7)
        .set("serve.max_connections", 8)
        .set("serve.max_request_bytes", 65536)
        .set("serve.idle_timeout_ms", 3000)
        .write(dir)
}

/// A leader holding `records` in batches of `per_batch`, and a daemon following it with
/// `[serve]` on a free port (its data dir is `data` in the returned temporary directory).
fn start_serving(
    records: usize,
    per_batch: usize,
) -> (TestLeader, tempfile::TempDir, u16, support::Daemon) {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, records, per_batch);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = support::free_port();
    let cfg = serve_config(dir.path(), &data, &leader, port);
    let d = support::Daemon::start(&cfg);
    (leader, dir, port, d)
}

#[test]
fn the_replica_serves_its_bytes_to_kafka_clients() {
    let (leader, dir, port, mut d) = start_serving(300, 7);
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{port}");
    let end = leader.log_end(0);
    support::wait_until(Duration::from_secs(30), "catch-up", || {
        support::log_end(&data, TOPIC, 0) == end
    });
    let tp = TopicPartition::new(TOPIC, 0);
    let mut conn = connect(&addr);

    // (c) Metadata: this node leads the topic, with the source's cluster id and topic id.
    let v = conn.require_version(ApiKey::Metadata).unwrap();
    assert_eq!(v, 12);
    let body = conn
        .send(ApiKey::Metadata, v, Duration::ZERO, |w| {
            metadata::encode_request(w, v, &[TOPIC.to_string(), "elsewhere".to_string()])
        })
        .unwrap();
    let md = metadata::decode_response(body, v).unwrap();
    assert_eq!(md.cluster_id.as_deref(), Some(CLUSTER_ID));
    assert_eq!(md.brokers.len(), 1);
    assert_eq!(
        (md.brokers[0].node_id, md.brokers[0].port),
        (7, i32::from(port))
    );
    assert_eq!(md.topics[0].name, TOPIC);
    assert_eq!(md.topics[0].topic_id, leader.topic_id());
    assert_eq!(md.topics[0].partitions[0].leader_id, 7);
    assert_eq!(
        md.topics[0].partitions[0].leader_epoch,
        leader.leader_epoch(0)
    );
    assert_eq!(md.topics[1].error, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    // read_committed answers carry an (empty) aborted list, read_uncommitted ones null.
    for (isolation, want) in [(1, Some(Vec::new())), (0, None)] {
        let mut req: FetchRequest = support::one_partition_fetch(&tp, 0, 3000);
        req.isolation_level = isolation;
        let body = conn
            .send(ApiKey::Fetch, 11, Duration::from_secs(1), |w| {
                fetch::encode_request(w, 11, &req)
            })
            .unwrap();
        let resp = fetch::decode_response(body, 11).unwrap();
        assert_eq!(
            resp.topics[0].1[0].aborted_transactions, want,
            "{isolation}"
        );
    }
    // By id alone (v12): the topic's own id finds it, an unknown one is UNKNOWN_TOPIC_ID.
    let by_id = |id: [u8; 16]| {
        move |w: &mut replica_follower::protocol::codec::Writer| {
            w.array_len(1, true).uuid(&id);
            w.string(None, true).empty_tags(true);
            w.bool(false).bool(false).empty_tags(true);
        }
    };
    for (id, error, name) in [
        (leader.topic_id(), ErrorCode::NONE, TOPIC),
        ([9; 16], ErrorCode(100), ""),
    ] {
        let body = conn
            .send(ApiKey::Metadata, v, Duration::ZERO, by_id(id))
            .unwrap();
        let md = metadata::decode_response(body, v).unwrap();
        assert_eq!(
            (md.topics[0].error, md.topics[0].name.as_str()),
            (error, name)
        );
    }

    // (a) Fetch at every version: the local segment bytes, which are the leader's.
    support::wait_until(Duration::from_secs(10), "the high watermark", || {
        list_offset(&mut conn, 6, -1).0 == end
    });
    let local = support::local_log_bytes(&data, &tp);
    let from_leader = support::leader_bytes(&leader.addr(), &tp, 0);
    assert_eq!(local, from_leader);
    let id = Uuid(leader.topic_id());
    for version in 4..=13 {
        let (served, hw) = fetch_all(&mut conn, version, 0, id);
        assert_eq!(hw, end, "v{version}");
        assert!(
            served == local,
            "v{version}: served bytes differ from the segments"
        );
    }

    // (b) ListOffsets: earliest, latest, by timestamp (the first record at or after it), and
    // from v7 MAX_TIMESTAMP: the test leader's timestamps grow with the offset, so the last
    // record below the high watermark.
    for version in 1..=7 {
        assert_eq!(list_offset(&mut conn, version, -2).0, 0);
        assert_eq!(list_offset(&mut conn, version, -1).0, end);
        let ts = support::test_leader::FIRST_TIMESTAMP + 123;
        assert_eq!(list_offset(&mut conn, version, ts), (123, ts), "v{version}");
        assert_eq!(list_offset(&mut conn, version, i64::MAX / 2).0, -1);
        let max = if version >= 7 {
            (end - 1, support::test_leader::FIRST_TIMESTAMP + end - 1)
        } else {
            (-1, -1)
        };
        assert_eq!(list_offset(&mut conn, version, -3), max, "v{version}");
    }

    // (d) OffsetForLeaderEpoch: the current epoch ends at the log end.
    for version in 2..=4 {
        let parts = vec![EpochRequest {
            partition: 0,
            current_leader_epoch: -1,
            leader_epoch: leader.leader_epoch(0),
        }];
        let body = conn
            .send(ApiKey::OffsetForLeaderEpoch, version, Duration::ZERO, |w| {
                offset_for_leader_epoch::encode_request(w, version, &[(TOPIC.to_string(), parts)])
            })
            .unwrap();
        let resp = offset_for_leader_epoch::decode_response(body, version).unwrap();
        let p = &resp[0].1[0];
        assert_eq!(
            (p.error, p.leader_epoch, p.end_offset),
            (ErrorCode::NONE, leader.leader_epoch(0), end)
        );
    }

    // A long-polling fetch at the log end is woken by the follower's next append.
    let v = 12;
    let mut req = support::one_partition_fetch(&tp, end, 1 << 20);
    req.max_wait_ms = 10_000;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            leader.append(0, 5, 5);
        });
        let body = conn
            .send(ApiKey::Fetch, v, Duration::from_secs(11), |w| {
                fetch::encode_request(w, v, &req)
            })
            .unwrap();
        let resp = fetch::decode_response(body, v).unwrap();
        let p = &resp.topics[0].1[0];
        assert!(!p.records.is_empty(), "the wait ended without data");
    });
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "woken late: {:?}",
        t0.elapsed()
    );
    drop(conn);
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}

/// Sends raw bytes on a new connection and returns whether the server closed it (EOF or a
/// reset) within a few seconds without answering.
fn closed_after(addr: &str, bytes: &[u8]) -> bool {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(0) | Err(_)) && s.read(&mut buf).map_or(true, |n| n == 0)
}

#[test]
fn bad_clients_cost_only_their_own_connection_and_a_stopped_replica_is_served() {
    let (leader, dir, port, mut d) = start_serving(200, 5);
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{port}");
    let mut good = connect(&addr);
    let id = Uuid(leader.topic_id());

    // Garbage, a frame length of 2 GiB, an unknown API: closed without an answer.
    assert!(closed_after(&addr, &[0, 0, 0, 6, 0x7f, 0x7f, 1, 2, 3, 4]));
    assert!(closed_after(&addr, &0x7fff_ffffu32.to_be_bytes()));
    assert!(closed_after(
        &addr,
        &[0, 0, 0, 10, 0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff]
    ));
    // A client that sends nothing, and twice max_connections at once: the extra ones are
    // closed at once, the others held until idle; the good connection and following go on.
    let idle: Vec<_> = (0..16)
        .map(|_| std::net::TcpStream::connect(&addr).unwrap())
        .collect();
    leader.append(0, 100, 5);
    let end = leader.log_end(0);
    support::wait_until(Duration::from_secs(30), "following goes on", || {
        support::log_end(&data, TOPIC, 0) == end
    });
    support::wait_until(Duration::from_secs(10), "the high watermark", || {
        list_offset(&mut good, 6, -1).0 == end
    });
    let (served, _) = fetch_all(&mut good, 12, 0, id);
    drop(idle);
    let tp = TopicPartition::new(TOPIC, 0);
    assert!(served == support::local_log_bytes(&data, &tp));

    // One Fetch naming the partition 3,000 times, no byte limits: answered once, as Kafka
    // answers a partition a full fetch names more than once.
    let mut flood: FetchRequest = support::one_partition_fetch(&tp, end - 5, 1 << 20);
    flood.max_bytes = i32::MAX;
    let one = flood.topics[0].1[0].clone();
    flood.topics[0].1 = vec![one; 3000];
    let body = good
        .send(ApiKey::Fetch, 4, Duration::from_secs(1), |w| {
            fetch::encode_request(w, 4, &flood)
        })
        .unwrap();
    let resp = fetch::decode_response(body, 4).unwrap();
    let answered = &resp.topics[0].1;
    assert_eq!(answered.len(), 1);
    assert!(!answered[0].records.is_empty());

    // While the daemon holds the lock, `serve --data-dir` is refused.
    let other = support::free_port().to_string();
    let listen = format!("127.0.0.1:{other}");
    let (code, _, err) = support::run_cli(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        &listen,
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("locked"), "{err}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());

    // The stopped replica, served with no leader anywhere: the same bytes, nothing changed.
    drop(leader);
    let before = support::hash_tree(&data);
    let mut child = support::spawn_serve(&data, &listen);
    let mut conn = connect(&listen);
    let (stopped, hw) = fetch_all(&mut conn, 12, 0, id);
    assert_eq!(hw, end);
    assert!(stopped == served, "the stopped replica serves other bytes");
    for version in [4, 13] {
        assert!(
            fetch_all(&mut conn, version, 0, id).0 == served,
            "v{version}"
        );
    }
    drop(conn);
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let after = support::hash_tree(&data);
    let changed: Vec<_> = before
        .keys()
        .filter(|k| before.get(*k) != after.get(*k) && !k.ends_with(".lock"))
        .collect();
    assert!(changed.is_empty(), "serve changed {changed:?}");

    // A listen address that cannot be bound: exit 1 naming it.
    let (code, _, err) = support::run_cli(&[
        "serve",
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        "192.0.2.1:1",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("192.0.2.1:1"), "{err}");
}
