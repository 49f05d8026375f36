//! A KIP-227 fetch session client of the project's own codec, for tests of the serve
//! listener's session cache: builds session requests, sends them on a [`BrokerConnection`],
//! and copies out what the response says (the records of each partition it carries).

use replica_follower::client::BrokerConnection;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{self, FetchPartition, FetchRequest};
use replica_follower::protocol::uuid::Uuid;
use replica_follower::record::BatchIter;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A test leader of `topic` whose `partitions` partitions hold `records` records each, in
/// batches of `per_batch`.
pub fn leader_of(
    topic: &str,
    partitions: i32,
    records: usize,
    per_batch: usize,
) -> super::test_leader::TestLeader {
    let leader = super::test_leader::TestLeader::start(topic, partitions);
    for p in 0..partitions {
        leader.append(p, records, per_batch);
    }
    leader
}

/// Stops `d` (exit 0) and asserts it logged no WARN or ERROR line.
pub fn stop_calmly(d: &mut super::Daemon) {
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let log = d.log_text();
    let loud: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(loud.is_empty(), "{loud:?}");
}

/// A daemon following `leader`'s `topic` with `[serve]` on a free loopback port, configured
/// further by `tune`: (temp dir, data dir, listener address, daemon).
pub fn serving(
    leader: &super::test_leader::TestLeader,
    topic: &str,
    tune: impl FnOnce(super::Config) -> super::Config,
) -> (tempfile::TempDir, PathBuf, String, super::Daemon) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{}", super::free_port());
    let cfg = super::Config::new(&data, &leader.addr())
        .follow(topic)
        .set("log.segment_bytes", 4096)
        .set("log.flush_interval_ms", 100)
        .set("checkpoint.interval_ms", 100)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("serve.listen", addr.as_str())
        .apply(tune)
        .write(dir.path());
    let d = super::Daemon::start(&cfg);
    (dir, data, addr, d)
}

/// A connection to the listener at `addr`, retried while the daemon starts.
pub fn connect(addr: &str) -> BrokerConnection {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match BrokerConnection::connect(addr, "session-test", 64 << 20) {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("connect {addr}: {e:#}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One partition of a response.
#[derive(Debug, Clone)]
pub struct Answer {
    pub partition: i32,
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: Vec<u8>,
}

/// A response, owned.
#[derive(Debug, Clone)]
pub struct Reply {
    pub error: ErrorCode,
    pub session_id: i32,
    /// (topic, partition answer), in response order.
    pub answers: Vec<(String, Answer)>,
}

impl Reply {
    pub fn partitions(&self) -> Vec<i32> {
        self.answers.iter().map(|(_, a)| a.partition).collect()
    }
}

/// A Fetch of `parts` ((partition, fetch offset)) of `topic` in session `id` at `epoch`,
/// forgetting `forgotten`; `replica_id` ≥ 0 fetches as a follower. At v13 the topic goes
/// by `topic_id`.
#[expect(
    clippy::too_many_arguments,
    reason = "a test request spells out every field"
)]
pub fn request(
    topic: &str,
    topic_id: Uuid,
    parts: &[(i32, i64)],
    forgotten: &[i32],
    id: i32,
    epoch: i32,
    replica_id: i32,
    max_wait_ms: i32,
) -> FetchRequest {
    FetchRequest {
        replica_id,
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 16 << 20,
        isolation_level: 0,
        topics: vec![(
            topic.to_string(),
            parts
                .iter()
                .map(|&(partition, fetch_offset)| FetchPartition {
                    partition,
                    current_leader_epoch: -1,
                    fetch_offset,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                })
                .collect(),
        )],
        topic_ids: BTreeMap::from([(topic.to_string(), topic_id)]),
        session_id: id,
        session_epoch: epoch,
        forgotten: if forgotten.is_empty() {
            Vec::new()
        } else {
            vec![(topic.to_string(), forgotten.to_vec())]
        },
    }
}

/// Sends `req` at `version` and reads the response (at v13 topics named back by id).
pub fn send(conn: &mut BrokerConnection, version: i16, req: &FetchRequest) -> Reply {
    let names = req.topic_names();
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let body = conn
        .send(ApiKey::Fetch, version, wait, |w| {
            fetch::encode_request(w, version, req)
        })
        .expect("fetch");
    let resp = fetch::decode_response_named(body, version, &names).expect("decode fetch");
    Reply {
        error: resp.error,
        session_id: resp.session_id,
        answers: resp
            .topics
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter().map(|p| {
                    (
                        t.clone(),
                        Answer {
                            partition: p.partition,
                            error: p.error,
                            high_watermark: p.high_watermark,
                            log_start_offset: p.log_start_offset,
                            records: p.records.to_vec(),
                        },
                    )
                })
            })
            .collect(),
    }
}

/// Waits until sessionless fetches of `partitions` of `topic` see the leader's log end as
/// the listener's high watermark.
pub fn wait_for_high_watermarks(
    conn: &mut BrokerConnection,
    leader: &super::test_leader::TestLeader,
    topic: &str,
    partitions: &[i32],
) {
    let id = Uuid(leader.topic_id());
    let at: Vec<(i32, i64)> = partitions.iter().map(|&p| (p, 0)).collect();
    super::wait_until(
        Duration::from_secs(30),
        "the served high watermarks",
        || {
            let r = send(conn, 12, &request(topic, id, &at, &[], 0, -1, -1, 0));
            r.answers.len() == partitions.len()
                && r.answers
                    .iter()
                    .all(|(_, a)| a.high_watermark == leader.log_end(a.partition))
        },
    );
}

/// What a client read of each partition: its fetch offset and the bytes so far.
#[derive(Default)]
pub struct Reader {
    pub offsets: BTreeMap<i32, i64>,
    pub bytes: BTreeMap<i32, Vec<u8>>,
}

impl Reader {
    /// Takes the records of `reply`, which must carry no error (whole batches, CRCs
    /// checked); the partitions whose fetch offset moved.
    pub fn take(&mut self, reply: &Reply) -> Vec<i32> {
        assert_eq!(reply.error, ErrorCode::NONE);
        let mut moved = Vec::new();
        for (_, a) in &reply.answers {
            assert_eq!(a.error, ErrorCode::NONE, "p{}", a.partition);
            let mut whole = 0;
            for (h, _, b) in BatchIter::new(&a.records, usize::MAX) {
                h.verify_crc(b).unwrap();
                self.bytes
                    .entry(a.partition)
                    .or_default()
                    .extend_from_slice(b);
                self.offsets.insert(a.partition, h.last_offset + 1);
                whole += b.len();
            }
            assert_eq!(whole, a.records.len(), "only whole batches are served");
            if whole > 0 {
                moved.push(a.partition);
            }
        }
        moved
    }

    pub fn at(&self, parts: &[i32]) -> Vec<(i32, i64)> {
        parts
            .iter()
            .map(|p| (*p, self.offsets.get(p).copied().unwrap_or(0)))
            .collect()
    }
}
