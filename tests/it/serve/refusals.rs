//! The replica refuses writes, groups and admin with the error Kafka gives a client without
//! the right, never a closed connection (issue 9): a daemon follows the in-process test
//! leader with `[serve]` set; raw requests for Produce, FindCoordinator and OffsetCommit get
//! their error codes and leave the connection open (a Metadata request after each is
//! answered), acks=0 produce gets no answer at all; librdkafka (confluent-kafka in the test
//! venv) reports the refusal to a Producer and to a group Consumer within seconds.

use crate::support;
use crate::support::test_leader::TestLeader;
use replica_follower::protocol::codec::{Reader, Writer};
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::{api_versions, metadata};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const TOPIC: &str = "refused";

/// One request at a time on a raw socket; `flexible` picks request header v2 / response
/// header v1.
struct Raw {
    stream: TcpStream,
    next_id: i32,
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let deadline = Instant::now() + Duration::from_secs(20);
        let stream = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("connect {addr}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw { stream, next_id: 1 }
    }

    fn send(&mut self, key: i16, version: i16, flexible: bool, body: &[u8]) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut w = Writer::new();
        w.i16(key)
            .i16(version)
            .i32(id)
            .string(Some("refusals-test"), false);
        w.empty_tags(flexible);
        w.buf.extend_from_slice(body);
        let mut frame = (w.buf.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&w.buf);
        self.stream.write_all(&frame).unwrap();
        id
    }

    /// The next response: its correlation id and body (header tags skipped when `flexible`).
    fn receive(&mut self, flexible: bool) -> (i32, Vec<u8>) {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).expect("a response");
        let mut buf = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut buf).unwrap();
        let mut r = Reader::new(&buf);
        let id = r.i32("correlation id").unwrap();
        if flexible {
            r.skip_tagged_fields("header tags").unwrap();
        }
        (id, buf[r.position()..].to_vec())
    }

    fn call(&mut self, key: i16, version: i16, flexible: bool, body: &[u8]) -> Vec<u8> {
        let id = self.send(key, version, flexible, body);
        // Every ApiVersions response has header v0, even for a flexible request.
        let (got, body) = self.receive(flexible && key != 18);
        assert_eq!(got, id, "key {key} v{version}: answers come in order");
        body
    }

    /// Metadata v12 for the topic: the connection still serves reads.
    fn metadata_works(&mut self) {
        let mut w = Writer::new();
        metadata::encode_request(&mut w, 12, &[TOPIC.to_string()]);
        let body = self.call(3, 12, true, &w.buf);
        let md = metadata::decode_response(&body, 12).unwrap();
        assert_eq!(md.topics[0].name, TOPIC);
        assert_eq!(md.topics[0].error, ErrorCode::NONE);
    }
}

/// A Produce v`version` body: acks, one partition of TOPIC holding a few junk bytes.
fn produce_body(version: i16, acks: i16) -> Vec<u8> {
    let flexible = version >= 9;
    let mut w = Writer::new();
    if version >= 3 {
        w.string(None, flexible);
    }
    w.i16(acks).i32(5000).array_len(1, flexible);
    w.string(Some(TOPIC), flexible)
        .array_len(1, flexible)
        .i32(0);
    w.bytes(Some(&[0; 8]), flexible).empty_tags(flexible);
    w.empty_tags(flexible).empty_tags(flexible);
    w.buf
}

fn raw_requests_are_refused_and_the_connection_stays_open(addr: &str) {
    let mut c = Raw::connect(addr);
    // ApiVersions v3 lists the refused APIs with the versions they are answered at.
    let mut w = Writer::new();
    api_versions::encode_request(&mut w, 3);
    let body = c.call(18, 3, true, &w.buf);
    let av = api_versions::decode_response(&body, 3).unwrap();
    let range = |key| {
        av.api_keys
            .iter()
            .find(|k| k.api_key == key)
            .map(|k| (k.min, k.max))
    };
    assert_eq!(range(0), Some((0, 11)), "Produce");
    assert_eq!(range(10), Some((0, 6)), "FindCoordinator");
    assert_eq!(range(8), Some((0, 9)), "OffsetCommit");

    // Produce v7 acks=-1: the partition refused with TOPIC_AUTHORIZATION_FAILED.
    let body = c.call(0, 7, false, &produce_body(7, -1));
    let mut r = Reader::new(&body);
    assert_eq!(r.array_count(false, 1, "topics").unwrap(), 1);
    assert_eq!(r.string(false, "topic").unwrap(), TOPIC);
    assert_eq!(r.array_count(false, 1, "partitions").unwrap(), 1);
    assert_eq!(r.i32("partition").unwrap(), 0);
    assert_eq!(ErrorCode(r.i16("error").unwrap()), ErrorCode(29));
    c.metadata_works();

    // Produce v9 (flexible), with the error message field.
    let body = c.call(0, 9, true, &produce_body(9, 1));
    let mut r = Reader::new(&body);
    r.take(1 + 1 + TOPIC.len() + 1 + 4, "to the error").unwrap();
    assert_eq!(r.i16("error").unwrap(), 29);
    r.take(24, "offsets and times").unwrap();
    assert_eq!(r.array_count(true, 1, "record errors").unwrap(), 0);
    let message = r.nullable_string(true, "message").unwrap();
    assert_eq!(
        message.as_deref(),
        Some("this broker is a read-only replica")
    );

    // acks=0 gets no response: the next frame answers the Metadata sent after it.
    c.send(0, 7, false, &produce_body(7, 0));
    c.metadata_works();

    // FindCoordinator v2 (one key) and v4 (batched): this node is the group coordinator —
    // librdkafka asks whenever group.id is set, and a consumer that only assigns must meet
    // no error — and the group requests themselves are refused (JoinGroup below).
    let (host, port) = addr.rsplit_once(':').unwrap();
    let port: i32 = port.parse().unwrap();
    let mut w = Writer::new();
    w.string(Some("a-group"), false).i8(0);
    let body = c.call(10, 2, false, &w.buf);
    let mut r = Reader::new(&body);
    r.i32("throttle").unwrap();
    assert_eq!(r.i16("error").unwrap(), 0);
    assert_eq!(r.nullable_string(false, "message").unwrap(), None);
    assert_eq!(r.i32("node id").unwrap(), 7, "serve.node_id");
    assert_eq!(r.string(false, "host").unwrap(), host);
    assert_eq!(r.i32("port").unwrap(), port);
    c.metadata_works();
    let mut w = Writer::new();
    w.i8(0)
        .array_len(1, true)
        .string(Some("a-group"), true)
        .empty_tags(true);
    let body = c.call(10, 4, true, &w.buf);
    let mut r = Reader::new(&body);
    r.i32("throttle").unwrap();
    assert_eq!(r.array_count(true, 1, "coordinators").unwrap(), 1);
    assert_eq!(r.string(true, "key").unwrap(), "a-group");
    assert_eq!(r.i32("node").unwrap(), 7);
    assert_eq!(r.string(true, "host").unwrap(), host);
    assert_eq!(r.i32("port").unwrap(), port);
    assert_eq!(r.i16("error").unwrap(), 0);
    c.metadata_works();
    // A transactional coordinator is refused.
    let mut w = Writer::new();
    w.string(Some("a-txn"), false).i8(1);
    let body = c.call(10, 2, false, &w.buf);
    let mut r = Reader::new(&body);
    r.i32("throttle").unwrap();
    assert_eq!(r.i16("error").unwrap(), 53);
    c.metadata_works();

    // OffsetCommit v8: each partition GROUP_AUTHORIZATION_FAILED.
    let mut w = Writer::new();
    w.string(Some("a-group"), true)
        .i32(1)
        .string(Some("m"), true);
    w.string(None, true)
        .array_len(1, true)
        .string(Some(TOPIC), true);
    w.array_len(2, true);
    for p in [0, 1] {
        w.i32(p).i64(5).i32(-1).string(None, true).empty_tags(true);
    }
    w.empty_tags(true).empty_tags(true);
    let body = c.call(8, 8, true, &w.buf);
    let mut r = Reader::new(&body);
    r.i32("throttle").unwrap();
    assert_eq!(r.array_count(true, 1, "topics").unwrap(), 1);
    assert_eq!(r.string(true, "topic").unwrap(), TOPIC);
    assert_eq!(r.array_count(true, 1, "partitions").unwrap(), 2);
    for p in [0, 1] {
        assert_eq!(r.i32("partition").unwrap(), p);
        assert_eq!(r.i16("error").unwrap(), 30);
        r.skip_tagged_fields("tags").unwrap();
    }
    c.metadata_works();

    // A version outside the advertised range is not parsed: closed, as Kafka does.
    c.send(0, 12, true, &produce_body(9, 1));
    let mut buf = [0u8; 4];
    assert!(matches!(c.stream.read(&mut buf), Ok(0) | Err(_)));
}

/// Runs confluent-kafka against the replica: a Producer, then a group Consumer; prints one
/// JSON line of what each saw and how long it took.
const CLIENTS: &str = r#"
import json, sys, time
from confluent_kafka import Consumer, Producer
addr, topic = sys.argv[1], sys.argv[2]
out = {}
errors = []
p = Producer({"bootstrap.servers": addr, "message.timeout.ms": 20000,
              "error_cb": lambda e: errors.append(e.name())})
seen = []
t0 = time.time()
p.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: seen.append(err))
left = p.flush(25)
out["producer"] = {"left": left, "seconds": time.time() - t0,
                   "errors": [e.name() if e else None for e in seen],
                   "fatal": [e.fatal() for e in seen if e],
                   "messages": [e.str() for e in seen if e]}
cerrors = []
c = Consumer({"bootstrap.servers": addr, "group.id": "g1", "auto.offset.reset": "earliest",
              "error_cb": lambda e: cerrors.append(e.name())})
c.subscribe([topic])
t0 = time.time()
got = None
while time.time() - t0 < 25 and got is None:
    m = c.poll(0.5)
    if m is not None and m.error():
        got = m.error().name()
    elif cerrors:
        got = cerrors[0]
out["consumer"] = {"error": got, "seconds": time.time() - t0, "error_cb": cerrors}
c.close()
print(json.dumps(out))
"#;

/// A request of under 1 MiB asking for a refusal per item (150,000 config resources, some
/// 100 bytes of answer each): the connection is closed instead of building the answer, and
/// the next connection is served.
/// A DescribeConfigs v4 body asking for `n` broker-logger resources named "x", all keys.
fn describe_configs_v4(n: usize) -> Vec<u8> {
    let mut w = Writer::new();
    w.array_len(n, true);
    for _ in 0..n {
        w.i8(2)
            .string(Some("x"), true)
            .unsigned_varint(0)
            .empty_tags(true);
    }
    w.bool(false).bool(false).empty_tags(true);
    w.buf
}

fn an_answer_far_larger_than_its_request_is_not_built(addr: &str) {
    let mut w = Writer::new();
    w.i16(32)
        .i16(4)
        .i32(1)
        .string(Some("t"), false)
        .empty_tags(true);
    let mut request = w.buf;
    request.extend_from_slice(&describe_configs_v4(150_000));
    let mut frame = (request.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&request);
    assert!(frame.len() < 1 << 20, "under serve.max_request_bytes");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&frame).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.is_empty(), "{} bytes came back", got.len());
    // The same request with 10 resources is answered.
    let mut c = Raw::connect(addr);
    let body = c.call(32, 4, true, &describe_configs_v4(10));
    assert!(!body.is_empty());
    c.metadata_works();
}

fn librdkafka_reports_the_refusals(addr: &str) {
    let out = Command::new(support::python())
        .args(["-c", CLIENTS, addr, TOPIC])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let p = &v["producer"];
    assert_eq!(p["left"], 0, "{v}");
    assert_eq!(p["errors"][0], "TOPIC_AUTHORIZATION_FAILED", "{v}");
    assert!(
        p["seconds"].as_f64().unwrap() < 10.0,
        "the producer retried: {v}"
    );
    let c = &v["consumer"];
    assert_eq!(c["error"], "GROUP_AUTHORIZATION_FAILED", "{v}");
    assert!(c["seconds"].as_f64().unwrap() < 10.0, "{v}");
}

#[test]
fn writes_groups_and_admin_are_refused_with_kafka_errors() {
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 50, 5);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = support::free_port();
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("serve.listen", format!("127.0.0.1:{port}"))
        .set("serve.node_id", 7)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    let end = leader.log_end(0);
    support::wait_until(Duration::from_secs(30), "catch-up", || {
        support::log_end(&data, TOPIC, 0) == end
    });
    let addr = format!("127.0.0.1:{port}");
    raw_requests_are_refused_and_the_connection_stays_open(&addr);
    an_answer_far_larger_than_its_request_is_not_built(&addr);
    librdkafka_reports_the_refusals(&addr);
    // Nothing was written: the replica still holds exactly the leader's records.
    assert_eq!(support::log_end(&data, TOPIC, 0), end);
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}
