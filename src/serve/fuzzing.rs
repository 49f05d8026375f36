//! The listener's request path without a socket, for the coverage-guided fuzzer in
//! `tests/fuzz/` (README, "Tests"). Not part of the product; hidden from the docs.
//!
//! A [`Listener`] serves a stopped replica that [`build_data_dir`] writes with the crate's own
//! log code: topic [`TOPIC`] (id [`TOPIC_ID`]) with two partitions holding batches in leader
//! epochs 0, 1 and 3, several segments, an aborted, a committed and an open transaction, and a
//! high watermark below the log end. A [`Connection`] answers request frames exactly as a
//! socket's frames are answered — through the listener's own `answer` — then writes each
//! response as the socket would get it (file ranges read in). Only the socket is missing:
//! framing, deadlines and the per-response memory check stay in `serve_connection`.
//!
//! A fuzz input is the byte stream one client sends ([`frames`]). Two things are made
//! deterministic so that an input means the same every time: each connection starts with an
//! empty session cache, and a Fetch naming session id 1 to [`SESSION_ALIASES`] names the
//! sessions this connection opened (their real ids are random), in order.

use super::auth::Authenticator;
use super::handlers::Context;
use super::response::{Piece, write_frame};
use super::sessions::FetchSessionCache;
use super::source::Source;
use super::{ConnState, answer};
use crate::checkpoint::TopicPartition;
use crate::config::ServeSection;
use crate::log::LogConfig;
use crate::log::manager::{LogManager, lock_log};
use crate::protocol::codec::{Reader, Writer};
use crate::protocol::fetch::{self, FetchPartition, FetchRequest};
use crate::protocol::list_offsets::{self, ListOffsetsPartition};
use crate::protocol::offset_for_leader_epoch::{self, EpochRequest};
use crate::protocol::uuid::Uuid;
use crate::protocol::{ApiKey, RefusedApi, api_versions, metadata, sasl};
use crate::record::records::{NewRecord, build_v2_batch};
use crate::record::verified::follow;
use crate::security::users::Users;
use crate::security::{SaslMechanism, SaslServerConfig};
use anyhow::{Context as _, Result};
use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

pub const TOPIC: &str = "orders";
pub const TOPIC_ID: Uuid = Uuid([
    0x5e, 0x1f, 0x3a, 0x77, 0x10, 0x42, 0x4c, 0x9d, 0x8b, 0x01, 0x6f, 0x2e, 0x93, 0xa4, 0x0c, 0xd5,
]);
pub const CLUSTER_ID: &str = "fuzz-cluster";
/// The SASL user [`sasl_config`] knows, with every mechanism.
pub const USER: &str = "alice";
pub const PASSWORD: &str = "wonderland";
/// Session ids a Fetch request may use to name the sessions its connection opened.
pub const SESSION_ALIASES: i32 = 4;
/// Sessions a connection's cache holds: few, so that eviction is reached.
const MAX_SESSIONS: usize = 2;
/// Timestamp of offset 0; offset `o` is stamped `BASE_TIMESTAMP + 10·o` unless said.
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;
/// Partition 1's log starts here (a fetch below it is out of range).
const PARTITION_1_START: i64 = 40;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, partition)
}

/// `n` records from `base` in leader epoch `epoch`, stamped from `ts`.
fn plain(base: i64, n: i64, epoch: i32, ts: i64) -> Vec<u8> {
    let value = [b'v'; 40];
    let records: Vec<NewRecord<'_>> = (0..n)
        .map(|i| NewRecord {
            key: Some(b"key"),
            value: Some(&value),
            timestamp: ts + 10 * i,
        })
        .collect();
    build_v2_batch(base, epoch, &records)
}

/// `batch` made a batch of producer `producer_id`'s transaction; a control batch (a marker:
/// one record, key version 0 + type, 0 ABORT or 1 COMMIT) when `marker` is given.
fn transactional(base: i64, producer_id: i64, marker: Option<i16>, epoch: i32) -> Vec<u8> {
    let mut b = match marker {
        None => plain(base, 3, epoch, BASE_TIMESTAMP + 10 * base),
        Some(kind) => {
            let key = [0i16.to_be_bytes(), kind.to_be_bytes()].concat();
            let value = [&0i16.to_be_bytes()[..], &5i32.to_be_bytes()].concat();
            build_v2_batch(
                base,
                epoch,
                &[NewRecord {
                    key: Some(&key),
                    value: Some(&value),
                    timestamp: BASE_TIMESTAMP + 10 * base,
                }],
            )
        }
    };
    // Attributes (bits 4 transactional, 5 control), producer id, epoch, base sequence.
    let attributes: i16 = if marker.is_some() { 0x30 } else { 0x10 };
    let sequence: i32 = if marker.is_some() { -1 } else { 0 };
    for (at, bytes) in [
        (21, &attributes.to_be_bytes()[..]),
        (43, &producer_id.to_be_bytes()[..]),
        (51, &0i16.to_be_bytes()[..]),
        (53, &sequence.to_be_bytes()[..]),
    ] {
        if let Some(field) = b.get_mut(at..at + bytes.len()) {
            field.copy_from_slice(bytes);
        }
    }
    let crc = crc32c::crc32c(b.get(21..).unwrap_or_default());
    if let Some(field) = b.get_mut(17..21) {
        field.copy_from_slice(&crc.to_be_bytes());
    }
    b
}

/// Writes the replica the fuzzer serves into the empty directory `dir`, stopped cleanly.
pub fn build_data_dir(dir: &Path) -> Result<()> {
    // Small segments: a partition spans several, with their indexes.
    let config = LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    };
    let logs = LogManager::open(dir, config)?;
    crate::log::identity::write_cluster_id(dir, CLUSTER_ID)?;
    let new = [
        (tp(0), 0, Some(TOPIC_ID)),
        (tp(1), PARTITION_1_START, Some(TOPIC_ID)),
    ];
    for (tp, created) in logs.create_logs(&new) {
        created.with_context(|| format!("{tp}: cannot create its log"))?;
    }
    let append = |tp: &TopicPartition, batch: Vec<u8>| -> Result<i64> {
        let shared = logs.get(tp).with_context(|| format!("{tp}: no log"))?;
        let mut log = lock_log(&shared);
        let built = follow(tp, i64::MIN, None, i64::MAX, &batch)
            .map_err(|e| anyhow::anyhow!("{tp}: a built batch does not verify: {e:?}"))?;
        log.append(&built.batches)
            .map_err(|e| anyhow::anyhow!("{tp}: append: {e:?}"))?;
        Ok(log.log_end_offset())
    };
    // Partition 0: epochs 0, 1 and 3 (no 2); one batch stamped earlier than the one before
    // (MAX_TIMESTAMP is not the last batch); then transactions: producer 7 aborted,
    // producer 8 committed, producer 9 left open, so the last stable offset is below the
    // high watermark.
    let p0 = tp(0);
    let mut end = 0;
    for (epoch, ts_shift) in [(0, 0), (0, 0), (1, 0), (1, 5_000), (1, -5_000), (3, 0)] {
        end = append(
            &p0,
            plain(end, 4, epoch, BASE_TIMESTAMP + 10 * end + ts_shift),
        )?;
    }
    for (producer, marker) in [(7, None), (7, Some(0)), (8, None), (8, Some(1)), (9, None)] {
        end = append(&p0, transactional(end, producer, marker, 3))?;
    }
    end = append(&p0, plain(end, 4, 3, BASE_TIMESTAMP + 10 * end))?;
    // Partition 1: from offset 40, epoch 2 only.
    let p1 = tp(1);
    let mut end1 = PARTITION_1_START;
    for _ in 0..3 {
        end1 = append(&p1, plain(end1, 5, 2, BASE_TIMESTAMP + 10 * end1))?;
    }
    for (tp, hw) in [(&p0, end - 2), (&p1, end1)] {
        let shared = logs.get(tp).with_context(|| format!("{tp}: no log"))?;
        let mut log = lock_log(&shared);
        log.update_high_watermark(hw);
        log.flush()?;
    }
    logs.shutdown()?;
    Ok(())
}

/// The users file and mechanisms of a SASL listener, written into `dir`: [`USER`] with
/// [`PASSWORD`] for every mechanism.
pub fn sasl_config(dir: &Path) -> Result<Arc<SaslServerConfig>> {
    let users = dir.join("users");
    let scram = [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512];
    let iterations = crate::security::scram::MIN_ITERATIONS;
    Users::add(&users, USER, &scram, PASSWORD, iterations)?;
    Ok(Arc::new(SaslServerConfig {
        mechanisms: SaslMechanism::ALL.to_vec(),
        users: Users::load(&users)?,
    }))
}

/// The listener of a stopped replica, as `replica-follower serve` runs it with `[serve]`'s
/// defaults (but a small session cache).
pub struct Listener {
    ctx: Context,
    sasl: Option<Arc<SaslServerConfig>>,
    max_request_bytes: i32,
}

impl Listener {
    /// Serves `data_dir`; with `sasl`, clients must authenticate first.
    pub fn open(data_dir: &Path, sasl: Option<Arc<SaslServerConfig>>) -> Result<Listener> {
        let defaults = ServeSection::default();
        Ok(Listener {
            ctx: Context {
                source: Source::stopped(data_dir)?,
                node_id: defaults.node_id,
                host: "127.0.0.1".to_string(),
                port: 9093,
                // A Fetch never waits for data: an input is answered at once.
                stopping: true.into(),
                sessions: FetchSessionCache::new(MAX_SESSIONS, defaults.max_request_bytes),
                fds: super::limits::Descriptors::new(usize::MAX / 2),
                fetch_max_bytes: defaults.fetch_max_bytes,
            },
            sasl,
            max_request_bytes: defaults.max_request_bytes,
        })
    }

    /// A new connection; the session cache starts empty.
    pub fn connect(&mut self) -> Connection<'_> {
        self.ctx.sessions = FetchSessionCache::new(MAX_SESSIONS, self.max_request_bytes);
        Connection {
            listener: self,
            conn: ConnState {
                auth: self.sasl.clone().map(Authenticator::new),
                peer: "127.0.0.1:1".to_string(),
                close: false,
            },
            sessions: Vec::new(),
        }
    }

    /// The largest frame a client may send (`serve.max_request_bytes`).
    pub fn max_request_bytes(&self) -> i32 {
        self.max_request_bytes
    }
}

/// The request frames (each without its size) of the bytes a client sends, as the listener
/// reads them: a size outside 0..=`max` closes the connection, so the frames end there; a
/// size past the end of the input takes what is left (the input was cut or grown by a
/// mutation: the frame is still worth answering).
pub fn frames(input: &[u8], max: i32) -> impl Iterator<Item = &[u8]> {
    let mut rest = input;
    std::iter::from_fn(move || {
        let (size, after) = rest.split_first_chunk::<4>()?;
        let size = i32::from_be_bytes(*size);
        if !(0..=max).contains(&size) {
            return None;
        }
        let (frame, next) = after.split_at(after.len().min(size as usize));
        rest = next;
        Some(frame)
    })
}

/// A response the listener built, not yet written.
pub struct Response {
    pieces: Vec<Piece>,
    api_key: i16,
    version: i16,
}

impl Response {
    /// Bytes the response holds in memory (file ranges are sent from the files).
    pub fn held_bytes(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len(),
                Piece::File(_) => 0,
            })
            .sum()
    }
}

/// One client connection; see the module documentation.
pub struct Connection<'a> {
    listener: &'a Listener,
    conn: ConnState,
    /// Ids of the sessions this connection's Fetch responses opened, in order.
    sessions: Vec<i32>,
}

impl Connection<'_> {
    /// Answers one request frame (without its size) as the listener does: `Ok(None)` when no
    /// response is due, an error when the listener closes the connection.
    pub fn answer(&mut self, frame: &[u8]) -> Result<Option<Response>> {
        let frame = self.with_session_ids(frame);
        let mut r = Reader::new(&frame);
        let (api_key, version) = (r.i16("api_key")?, r.i16("api_version")?);
        let client = super::handlers::Client {
            gone: &|| false,
            trusted_follower: false,
            max_wait: super::handlers::MAX_FETCH_WAIT,
        };
        let pieces = answer(&self.listener.ctx, &frame, &mut self.conn, &client)?;
        Ok(pieces.map(|pieces| Response {
            pieces,
            api_key,
            version,
        }))
    }

    /// Whether the listener closes the connection after the response in hand (a failed
    /// authentication).
    pub fn closing(&self) -> bool {
        self.conn.close
    }

    /// The response frame as the client receives it (its size first).
    pub fn write(&mut self, mut response: Response) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        write_frame(&mut out, &mut response.pieces)?;
        if response.api_key == ApiKey::Fetch.key() && response.version >= 7 {
            // size, correlation id, header tags (v12+), throttle time, error, session id.
            let at = if response.version >= 12 { 15 } else { 14 };
            if let Some(id) = out.get(at..at + 4).and_then(|b| b.try_into().ok()) {
                let id = i32::from_be_bytes(id);
                if id != 0 && !self.sessions.contains(&id) {
                    self.sessions.push(id);
                }
            }
        }
        Ok(out)
    }

    /// `frame` with a Fetch's session id 1..=SESSION_ALIASES replaced by the id of the
    /// session this connection opened in that place (the last one when fewer were opened).
    fn with_session_ids<'f>(&self, frame: &'f [u8]) -> Cow<'f, [u8]> {
        let Some(last) = self.sessions.len().checked_sub(1) else {
            return Cow::Borrowed(frame);
        };
        let mut r = Reader::new(frame);
        let header = (|| {
            let key = r.i16("api_key")?;
            let version = r.i16("api_version")?;
            r.i32("correlation_id")?;
            r.nullable_string(false, "client_id")?;
            if ApiKey::Fetch.is_flexible(version) {
                r.skip_tagged_fields("request header tags")?;
            }
            Ok::<_, crate::protocol::codec::DecodeError>((key, version))
        })();
        let Ok((key, version)) = header else {
            return Cow::Borrowed(frame);
        };
        // replica id, max wait, min bytes, max bytes, isolation level, then the session id.
        let at = r.position() + 17;
        let alias = frame
            .get(at..at + 4)
            .and_then(|f| <[u8; 4]>::try_from(f).ok())
            .map_or(0, i32::from_be_bytes);
        if key != ApiKey::Fetch.key() || version < 7 || !(1..=SESSION_ALIASES).contains(&alias) {
            return Cow::Borrowed(frame);
        }
        let index = (alias as usize - 1).min(last);
        let mut out = frame.to_vec();
        if let (Some(id), Some(field)) = (self.sessions.get(index), out.get_mut(at..at + 4)) {
            field.copy_from_slice(&id.to_be_bytes());
        }
        Cow::Owned(out)
    }
}

// ---------------------------------------------------------------------------------------
// Seeds: real requests, encoded by the crate's own encoders where it has them.

/// A request frame with its size: header (v2 for a flexible version) and `body`.
fn request(key: i16, version: i16, flexible: bool, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.i16(key).i16(version).i32(version.into());
    w.string(Some("fuzz-seed"), false).empty_tags(flexible);
    w.buf.extend_from_slice(body);
    let mut framed = crate::protocol::codec::len_i32(w.buf.len())
        .to_be_bytes()
        .to_vec();
    framed.extend_from_slice(&w.buf);
    framed
}

fn served(api: ApiKey, version: i16, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    body(&mut w);
    // ApiVersions requests keep header v1 below v3 and have a flexible body from v3.
    request(api.key(), version, api.is_flexible(version), &w.buf)
}

fn fetch_request(
    version: i16,
    session: (i32, i32),
    isolation: i8,
    parts: &[(i32, i64)],
) -> Vec<u8> {
    let partitions = parts
        .iter()
        .map(|&(partition, fetch_offset)| FetchPartition {
            partition,
            current_leader_epoch: if partition == 0 { 3 } else { -1 },
            fetch_offset,
            last_fetched_epoch: if fetch_offset > 0 { 1 } else { -1 },
            log_start_offset: -1,
            partition_max_bytes: 1 << 20,
        })
        .collect();
    let req = FetchRequest {
        replica_id: -1,
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 50 << 20,
        isolation_level: isolation,
        topics: if parts.is_empty() {
            Vec::new()
        } else {
            vec![(TOPIC.to_string(), partitions)]
        },
        topic_ids: [(TOPIC.to_string(), TOPIC_ID)].into(),
        session_id: session.0,
        session_epoch: session.1,
        forgotten: Vec::new(),
    };
    served(ApiKey::Fetch, version, |w| {
        fetch::encode_request(w, version, &req)
    })
}

/// Inputs of a PLAINTEXT connection: every served API at several versions, a session's life,
/// and every refused API at its first and last version.
pub fn plaintext_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    for v in 0..=3 {
        let frame = served(ApiKey::ApiVersions, v, |w| {
            api_versions::encode_request(w, v)
        });
        out.push((format!("api-versions-v{v}"), frame));
    }
    for v in [1, 4, 8, 9, 10, 12] {
        let topics = [TOPIC.to_string(), "missing".to_string()];
        let frame = served(ApiKey::Metadata, v, |w| {
            metadata::encode_request(w, v, &topics)
        });
        out.push((format!("metadata-v{v}"), frame));
    }
    // Every topic (a null list), and by topic id alone (v10+).
    out.push((
        "metadata-v1-all".to_string(),
        served(ApiKey::Metadata, 1, |w| {
            w.i32(-1);
        }),
    ));
    for id in [TOPIC_ID, Uuid([7; 16])] {
        let frame = served(ApiKey::Metadata, 12, |w| {
            w.unsigned_varint(2)
                .uuid(&id.0)
                .string(None, true)
                .empty_tags(true);
            w.bool(false).bool(false).empty_tags(true);
        });
        out.push((format!("metadata-v12-by-id-{id}"), frame));
    }
    let times = [
        list_offsets::EARLIEST,
        list_offsets::LATEST,
        list_offsets::MAX_TIMESTAMP,
        BASE_TIMESTAMP + 95,
    ];
    for v in [1, 2, 4, 6, 7] {
        for isolation in [0, 1] {
            let parts = |epoch| {
                times
                    .iter()
                    .map(|&timestamp| ListOffsetsPartition {
                        partition: 0,
                        current_leader_epoch: epoch,
                        timestamp,
                    })
                    .chain([ListOffsetsPartition {
                        partition: 1,
                        current_leader_epoch: 1,
                        timestamp: list_offsets::LATEST,
                    }])
                    .collect::<Vec<_>>()
            };
            let topics = [
                (TOPIC.to_string(), parts(-1)),
                ("missing".to_string(), parts(3)),
            ];
            let frame = served(ApiKey::ListOffsets, v, |w| {
                list_offsets::encode_request(w, v, isolation, &topics)
            });
            out.push((format!("list-offsets-v{v}-isolation-{isolation}"), frame));
        }
    }
    for v in [2, 3, 4] {
        let parts = [
            (0, -1, 0),
            (0, 3, 1),
            (0, 3, 2),
            (0, 2, 3),
            (0, 4, 5),
            (1, 2, 2),
        ]
        .map(
            |(partition, current_leader_epoch, leader_epoch)| EpochRequest {
                partition,
                current_leader_epoch,
                leader_epoch,
            },
        );
        let topics = [(TOPIC.to_string(), parts.to_vec())];
        let frame = served(ApiKey::OffsetForLeaderEpoch, v, |w| {
            offset_for_leader_epoch::encode_request(w, v, &topics)
        });
        out.push((format!("offset-for-leader-epoch-v{v}"), frame));
    }
    let sessionless = (0, fetch::SESSIONLESS);
    for v in [4, 5, 7, 9, 11, 12, 13] {
        for isolation in [0, 1] {
            let frame = fetch_request(v, sessionless, isolation, &[(0, 0), (0, 10), (1, 40)]);
            out.push((format!("fetch-v{v}-isolation-{isolation}"), frame));
        }
    }
    // Out of range, diverging (v12: last fetched epoch 1 at an offset past its end).
    let frame = fetch_request(12, sessionless, 0, &[(0, 30), (0, 999), (1, 0), (5, 0)]);
    out.push(("fetch-v12-diverging-and-out-of-range".to_string(), frame));
    // A session's life: opened, two incremental fetches (one forgetting a partition), a
    // second session, closed.
    for v in [7, 12, 13] {
        let mut stream = fetch_request(v, (0, fetch::INITIAL_EPOCH), 0, &[(0, 0), (1, 40)]);
        stream.extend(fetch_request(v, (1, 1), 0, &[(0, 8)]));
        stream.extend(fetch_request(v, (1, 2), 1, &[]));
        stream.extend(fetch_request(v, (0, fetch::INITIAL_EPOCH), 0, &[(1, 45)]));
        stream.extend(fetch_request(v, (2, 1), 0, &[]));
        stream.extend(fetch_request(v, (1, fetch::SESSIONLESS), 0, &[(0, 4)]));
        out.push((format!("fetch-v{v}-sessions"), stream));
    }
    out.extend(wide_seeds());
    for api in RefusedApi::ALL {
        let (min, max) = api.supported();
        for v in [min, max] {
            let flexible = api.is_flexible(v);
            let body = refused_body(api, v, flexible);
            out.push((
                format!("{}-v{v}", api.name().to_lowercase()),
                request(api.key(), v, flexible, &body),
            ));
        }
    }
    out
}

/// Requests naming many items, a few KB each: where the answer costs most per request byte
/// (the amplification the fuzzer measures starts from these).
fn wide_seeds() -> Vec<(String, Vec<u8>)> {
    const N: usize = 300;
    let mut out = Vec::new();
    let names: Vec<String> = (0..N).map(|i| format!("{}", i % 10)).collect();
    let frame = served(ApiKey::Metadata, 1, |w| {
        metadata::encode_request(w, 1, &names)
    });
    out.push((format!("wide-metadata-v1-{N}-one-char-topics"), frame));
    let repeated: Vec<(i32, i64)> = vec![(0, 0); N];
    let frame = fetch_request(12, (0, fetch::SESSIONLESS), 0, &repeated);
    out.push((format!("wide-fetch-v12-partition-0-{N}-times"), frame));
    let frame = fetch_request(7, (0, fetch::INITIAL_EPOCH), 0, &repeated);
    out.push((
        format!("wide-fetch-v7-session-of-partition-0-{N}-times"),
        frame,
    ));
    let parts = vec![
        ListOffsetsPartition {
            partition: 0,
            current_leader_epoch: -1,
            timestamp: list_offsets::MAX_TIMESTAMP,
        };
        N
    ];
    let topics = [(TOPIC.to_string(), parts)];
    let frame = served(ApiKey::ListOffsets, 7, |w| {
        list_offsets::encode_request(w, 7, 0, &topics)
    });
    out.push((
        format!("wide-list-offsets-v7-max-timestamp-{N}-times"),
        frame,
    ));
    let parts = vec![
        EpochRequest {
            partition: 0,
            current_leader_epoch: -1,
            leader_epoch: 1,
        };
        N
    ];
    let topics = [(TOPIC.to_string(), parts)];
    let frame = served(ApiKey::OffsetForLeaderEpoch, 4, |w| {
        offset_for_leader_epoch::encode_request(w, 4, &topics)
    });
    out.push((format!("wide-offset-for-leader-epoch-v4-{N}-times"), frame));
    // Produce v8 (error messages per partition) and DeleteRecords: many partitions.
    let mut w = Writer::new();
    w.string(None, false).i16(1).i32(1000).array_len(1, false);
    w.string(Some(TOPIC), false).array_len(N, false);
    for p in (0i32..).take(N) {
        w.i32(p).bytes(None, false);
    }
    out.push((
        format!("wide-produce-v8-{N}-partitions"),
        request(RefusedApi::Produce.key(), 8, false, &w.buf),
    ));
    let mut w = Writer::new();
    w.array_len(1, false)
        .string(Some(TOPIC), false)
        .array_len(N, false);
    for p in (0i32..).take(N) {
        w.i32(p).i64(0);
    }
    w.i32(1000);
    out.push((
        format!("wide-delete-records-v1-{N}-partitions"),
        request(RefusedApi::DeleteRecords.key(), 1, false, &w.buf),
    ));
    out
}

/// A small valid body of a refused API, naming [`TOPIC`] partition 0 where it names any.
fn refused_body(api: RefusedApi, v: i16, flexible: bool) -> Vec<u8> {
    let mut w = Writer::new();
    let f = flexible;
    // ARRAY{Name, ARRAY{Index INT32, `rest`}} with tags after each partition and topic.
    let topic_partitions = |w: &mut Writer, rest: &dyn Fn(&mut Writer)| {
        w.array_len(1, f)
            .string(Some(TOPIC), f)
            .array_len(1, f)
            .i32(0);
        rest(w);
        w.empty_tags(f).empty_tags(f);
    };
    match api {
        RefusedApi::Produce => {
            if v >= 3 {
                w.string(None, f);
            }
            w.i16(-1).i32(1000);
            topic_partitions(&mut w, &|w| {
                w.bytes(Some(&plain(0, 1, 0, BASE_TIMESTAMP)), f);
            });
        }
        RefusedApi::InitProducerId => {
            w.string(Some("txn"), f).i32(60_000);
            if v >= 3 {
                w.i64(-1).i16(-1);
            }
        }
        RefusedApi::FindCoordinator => {
            if v <= 3 {
                w.string(Some("group"), f);
            }
            if v >= 1 {
                w.i8(0);
            }
            if v >= 4 {
                w.array_len(2, true)
                    .string(Some("group"), true)
                    .string(Some("other"), true);
            }
        }
        RefusedApi::OffsetCommit => {
            w.string(Some("group"), f);
            if v >= 1 {
                w.i32(1).string(Some("member"), f);
            }
            if v >= 7 {
                w.string(None, f);
            }
            if (2..=4).contains(&v) {
                w.i64(-1);
            }
            topic_partitions(&mut w, &|w| {
                w.i64(5);
                if v >= 6 {
                    w.i32(3);
                }
                if v == 1 {
                    w.i64(BASE_TIMESTAMP);
                }
                w.string(Some(""), f);
            });
        }
        RefusedApi::OffsetFetch => {
            let topics = |w: &mut Writer| {
                w.array_len(1, f).string(Some(TOPIC), f);
                w.array_len(1, f).i32(0).empty_tags(f);
            };
            if v <= 7 {
                w.string(Some("group"), f);
                topics(&mut w);
            } else {
                w.array_len(1, true).string(Some("group"), true);
                if v >= 9 {
                    w.string(None, true).i32(-1);
                }
                topics(&mut w);
                w.empty_tags(true);
            }
            if v >= 7 {
                w.bool(false);
            }
        }
        RefusedApi::DescribeGroups => {
            w.array_len(1, f).string(Some("group"), f);
            if v >= 3 {
                w.bool(true);
            }
        }
        RefusedApi::CreateTopics => {
            w.array_len(1, f).string(Some("new"), f).i32(3).i16(1);
            w.array_len(0, f);
            w.array_len(1, f).string(Some("cleanup.policy"), f);
            w.string(Some("compact"), f).empty_tags(f).empty_tags(f);
            w.i32(1000);
            if v >= 1 {
                w.bool(false);
            }
        }
        RefusedApi::DeleteTopics => {
            if v >= 6 {
                w.array_len(1, true)
                    .string(Some(TOPIC), true)
                    .uuid(&TOPIC_ID.0);
                w.empty_tags(true);
            } else {
                w.array_len(1, f).string(Some(TOPIC), f);
            }
            w.i32(1000);
        }
        RefusedApi::DeleteRecords => {
            topic_partitions(&mut w, &|w| {
                w.i64(10);
            });
            w.i32(1000);
        }
        RefusedApi::CreatePartitions => {
            w.array_len(1, f).string(Some(TOPIC), f).i32(4);
            w.array_len(1, f)
                .array_len(1, f)
                .i32(1)
                .empty_tags(f)
                .empty_tags(f);
            w.i32(1000).bool(false);
        }
        RefusedApi::DescribeConfigs => {
            // A topic, a group and a broker.
            w.array_len(3, f);
            for (kind, name) in [(2i8, TOPIC), (32, "group"), (4, "1")] {
                w.i8(kind).string(Some(name), f).array_len(1, f);
                w.string(Some("retention.ms"), f).empty_tags(f);
            }
            if v >= 1 {
                w.bool(false);
            }
            if v >= 3 {
                w.bool(false);
            }
        }
        RefusedApi::AlterConfigs | RefusedApi::IncrementalAlterConfigs => {
            w.array_len(1, f)
                .i8(2)
                .string(Some(TOPIC), f)
                .array_len(1, f);
            w.string(Some("retention.ms"), f);
            if api == RefusedApi::IncrementalAlterConfigs {
                w.i8(0);
            }
            w.string(Some("1000"), f).empty_tags(f).empty_tags(f);
            w.bool(false);
        }
        RefusedApi::DescribeCluster => {
            w.bool(false);
            if v >= 1 {
                w.i8(1);
            }
        }
        // Their bodies are not read: a refusal needs nothing of them.
        RefusedApi::JoinGroup
        | RefusedApi::Heartbeat
        | RefusedApi::LeaveGroup
        | RefusedApi::SyncGroup
        | RefusedApi::ListGroups => {
            w.string(Some("group"), f);
        }
    }
    w.empty_tags(f);
    w.buf
}

fn sasl_handshake(version: i16, mechanism: &str) -> Vec<u8> {
    let mut w = Writer::new();
    sasl::encode_handshake_request(&mut w, mechanism);
    request(ApiKey::SaslHandshake.key(), version, false, &w.buf)
}

fn sasl_authenticate(version: i16, bytes: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    sasl::encode_authenticate_request(&mut w, version, bytes);
    let flexible = ApiKey::SaslAuthenticate.is_flexible(version);
    request(ApiKey::SaslAuthenticate.key(), version, flexible, &w.buf)
}

/// Inputs of a SASL connection: PLAIN at every SaslAuthenticate version then reads, SCRAM's
/// first messages, a wrong password, a v0 handshake, a read before authenticating.
pub fn sasl_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let plain = format!("\0{USER}\0{PASSWORD}");
    let reads = [
        served(ApiKey::Metadata, 12, |w| {
            metadata::encode_request(w, 12, &[TOPIC.to_string()])
        }),
        fetch_request(12, (0, fetch::INITIAL_EPOCH), 0, &[(0, 0)]),
        fetch_request(12, (1, 1), 0, &[]),
    ]
    .concat();
    for v in 0..=2 {
        let mut stream = served(ApiKey::ApiVersions, 3, |w| {
            api_versions::encode_request(w, 3)
        });
        stream.extend(sasl_handshake(1, "PLAIN"));
        stream.extend(sasl_authenticate(v, plain.as_bytes()));
        stream.extend(reads.iter());
        // Re-authentication (KIP-368).
        stream.extend(sasl_handshake(1, "PLAIN"));
        stream.extend(sasl_authenticate(v, plain.as_bytes()));
        out.push((format!("sasl-plain-authenticate-v{v}"), stream));
    }
    for (mechanism, hash) in [
        ("SCRAM-SHA-256", &crate::security::scram::SCRAM_SHA_256),
        ("SCRAM-SHA-512", &crate::security::scram::SCRAM_SHA_512),
    ] {
        let Ok((_, first)) = crate::security::scram::ScramClient::start(hash, USER, PASSWORD)
        else {
            continue;
        };
        let mut stream = sasl_handshake(1, mechanism);
        stream.extend(sasl_authenticate(2, first.as_bytes()));
        let last = "c=biws,r=fuzz-nonce,p=dGhpcyBpcyBub3QgYSBwcm9vZg==";
        stream.extend(sasl_authenticate(2, last.as_bytes()));
        out.push((format!("sasl-{}", mechanism.to_lowercase()), stream));
    }
    let wrong = format!("\0{USER}\0queen");
    let mut stream = sasl_handshake(1, "PLAIN");
    stream.extend(sasl_authenticate(1, wrong.as_bytes()));
    out.push(("sasl-plain-wrong-password".to_string(), stream));
    out.push(("sasl-handshake-v0".to_string(), sasl_handshake(0, "PLAIN")));
    out.push((
        "sasl-unknown-mechanism".to_string(),
        sasl_handshake(1, "GSSAPI"),
    ));
    out.push((
        "sasl-authenticate-first".to_string(),
        sasl_authenticate(2, b"x"),
    ));
    out.push(("sasl-read-first".to_string(), reads));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Answered {
        responses: usize,
        /// Why the listener closed the connection without an answer.
        closed: Option<String>,
        /// Closed after its last answer (a failed authentication).
        closing: bool,
    }

    fn run(listener: &mut Listener, input: &[u8]) -> Answered {
        let max = listener.max_request_bytes();
        let mut conn = listener.connect();
        let mut responses = 0;
        for frame in frames(input, max) {
            match conn.answer(frame) {
                Ok(Some(r)) => {
                    let out = conn.write(r).unwrap();
                    assert_eq!(out.get(4..8), frame.get(4..8), "the correlation id");
                    responses += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    return Answered {
                        responses,
                        closed: Some(format!("{e:#}")),
                        closing: false,
                    };
                }
            }
            if conn.closing() {
                break;
            }
        }
        Answered {
            responses,
            closed: None,
            closing: conn.closing(),
        }
    }

    /// Found by the fuzzer: SaslAuthenticate v2 on a listener without SASL, its header's
    /// tagged fields not a valid tag section. Kafka cannot parse it and closes the
    /// connection; a whole one is answered ILLEGAL_SASL_STATE and the connection stays.
    #[test]
    fn sasl_on_a_plaintext_listener_is_parsed_whole_before_it_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        build_data_dir(dir.path()).unwrap();
        let mut listener = Listener::open(dir.path(), None).unwrap();
        let mut torn = Writer::new();
        torn.i16(ApiKey::SaslAuthenticate.key())
            .i16(2)
            .i32(2)
            .string(Some("fuzz-seed"), false)
            .i32(-1);
        let mut conn = listener.connect();
        assert!(conn.answer(&torn.buf).is_err(), "a torn header is answered");
        for version in 0..=2i16 {
            let frame = served(ApiKey::SaslAuthenticate, version, |w| {
                sasl::encode_authenticate_request(w, version, b"\0alice\0wonderland")
            });
            let mut conn = listener.connect();
            let response = conn.answer(&frame[4..]).unwrap().unwrap();
            let out = conn.write(response).unwrap();
            let mut r = Reader::new(&out[4..]);
            assert_eq!(r.i32("correlation id").unwrap(), i32::from(version));
            if version >= 2 {
                r.skip_tagged_fields("header tags").unwrap();
            }
            let body = &out[4 + r.position()..];
            let answer = sasl::decode_authenticate_response(body, version).unwrap();
            assert_eq!(
                answer.error,
                crate::protocol::error::ErrorCode::ILLEGAL_SASL_STATE
            );
            assert!(!conn.closing(), "v{version}");
        }
    }

    #[test]
    fn every_seed_is_answered_and_none_closes_a_plaintext_connection() {
        let dir = tempfile::tempdir().unwrap();
        build_data_dir(dir.path()).unwrap();
        let mut listener = Listener::open(dir.path(), None).unwrap();
        for (name, input) in plaintext_seeds() {
            let answered = run(&mut listener, &input);
            assert_eq!(answered.closed, None, "{name}");
            assert!(!answered.closing, "{name}");
            // Produce with acks=0 is the one request without a response; none here.
            let want = frames(&input, i32::MAX).count();
            assert_eq!(answered.responses, want, "{name}");
        }
    }

    #[test]
    fn sasl_seeds_authenticate_and_read_or_are_refused_as_kafka_does() {
        let dir = tempfile::tempdir().unwrap();
        build_data_dir(dir.path()).unwrap();
        let sasl = sasl_config(dir.path()).unwrap();
        let mut listener = Listener::open(dir.path(), Some(sasl)).unwrap();
        for (name, input) in sasl_seeds() {
            let answered = run(&mut listener, &input);
            let frames = frames(&input, i32::MAX).count();
            let got = (
                answered.responses,
                answered.closed.is_some(),
                answered.closing,
            );
            let want = match name.as_str() {
                // Closed unanswered, as Kafka does.
                "sasl-read-first" => (0, true, false),
                n if n.starts_with("sasl-plain-authenticate") => (frames, false, false),
                // The rest fail to authenticate: every frame is answered, the last with the
                // error, then the connection closes.
                _ => (frames, false, true),
            };
            assert_eq!(got, want, "{name}: {:?}", answered.closed);
        }
    }

    #[test]
    fn a_fetch_names_its_own_sessions_by_alias() {
        let dir = tempfile::tempdir().unwrap();
        build_data_dir(dir.path()).unwrap();
        let mut listener = Listener::open(dir.path(), None).unwrap();
        let mut conn = listener.connect();
        let open = fetch_request(12, (0, 0), 0, &[(0, 0)]);
        let incremental = fetch_request(12, (1, 1), 0, &[]);
        let mut error_of = |framed: &[u8]| {
            let frame = frames(framed, i32::MAX).next().unwrap();
            let resp = conn.answer(frame).unwrap().unwrap();
            let out = conn.write(resp).unwrap();
            // size, correlation id, tags, throttle time, then the error code.
            i16::from_be_bytes([out[13], out[14]])
        };
        assert_eq!(error_of(&open), 0);
        assert_eq!(error_of(&incremental), 0, "alias 1 is the session opened");
        let stale = fetch_request(12, (1, 1), 0, &[]);
        assert_eq!(
            error_of(&stale),
            71,
            "INVALID_FETCH_SESSION_EPOCH: epoch 1 was used"
        );
    }

    #[test]
    fn frames_stop_at_a_size_the_listener_refuses_and_a_short_frame_takes_the_rest() {
        let input = [0, 0, 0, 2, 1, 2, 0, 0, 0, 9, 3, 4];
        assert_eq!(
            frames(&input, 100).collect::<Vec<_>>(),
            [&[1, 2][..], &[3, 4]]
        );
        let refused = [0, 0, 0, 2, 1, 2, 0xff, 0xff, 0xff, 0xff, 3];
        assert_eq!(frames(&refused, 100).count(), 1);
        assert_eq!(frames(&[0, 0, 0, 101, 1], 100).count(), 0);
    }
}
