//! A KIP-227 fetch session client of the project's own codec, for tests of the serve
//! listener's session cache: builds session requests, sends them on a [`BrokerConnection`],
//! and copies out what the response says (the records of each partition it carries).

use replica_follower::client::BrokerConnection;
use replica_follower::protocol::ApiKey;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{self, FetchPartition, FetchRequest};
use replica_follower::protocol::uuid::Uuid;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A daemon following `leader`'s `topic` with `[serve]` on a free loopback port, its
/// `serve_extra` lines added to `[serve]`: (temp dir, data dir, listener address, daemon).
pub fn serving(
    leader: &super::test_leader::TestLeader,
    topic: &str,
    serve_extra: &str,
) -> (tempfile::TempDir, PathBuf, String, super::Daemon) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{}", super::free_port());
    let cfg = super::topic_config(
        dir.path(),
        &data,
        &leader.addr(),
        topic,
        &format!(
            "[log]\nsegment_bytes = 4096\nflush_interval_ms = 100\n[checkpoint]\ninterval_ms = 100\n\
             [fetch]\nmax_wait_ms = 100\nbackoff_ms = 100\n[serve]\nlisten = \"{addr}\"\n{serve_extra}"
        ),
    );
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
