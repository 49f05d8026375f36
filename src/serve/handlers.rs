//! One answer per API, as Kafka's broker gives it to a client of a partition it leads —
//! with nothing to write: this broker leads every local partition, alone (replicas = ISR =
//! itself), at the latest epoch of the partition's leader-epoch checkpoint.

use super::response::Piece;
use super::sessions::{CachedPartition, FetchSessionCache, Plan, dedup};
use super::source::{Source, aborted_transactions, epoch_at, leader_epoch, read_batches};
use crate::checkpoint::TopicPartition;
use crate::log::read_view::LogView;
use crate::protocol::api_versions::{self, ApiVersionRange};
use crate::protocol::codec::{DecodeResult, Writer};
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{self, DivergingEpoch, FetchPartition, FetchPartitionResponse};
use crate::protocol::list_offsets::{self, ListOffsetsPartitionResponse};
use crate::protocol::metadata::{self, Broker, MetadataResponse, PartitionMetadata, TopicMetadata};
use crate::protocol::offset_for_leader_epoch::{self, EpochEndOffset};
use crate::protocol::uuid::Uuid;
use crate::protocol::{ApiKey, map_partitions};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The versions this broker serves from its log; ApiVersions advertises these and the
/// refused APIs ([`super::refusals::advertised`]).
pub const SERVED: [(ApiKey, i16, i16); 5] = [
    (ApiKey::Fetch, 4, 13),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
];

/// The most segment files one Fetch response holds open (one per partition and segment it
/// sends from), beside the listener's share of descriptors that all responses and
/// connections draw on ([`super::limits::Descriptors`]): one response does not take the
/// share. Partitions past it get no data in this response and are fetched again. An eighth
/// of the open-file limit read at start, 16 to 256.
fn max_files_per_response() -> usize {
    crate::log::resources::descriptors::limit_at_start()
        .map_or(256, |l| usize::try_from(l / 8).unwrap_or(256))
        .clamp(16, 256)
}

/// What a Fetch response may still take.
struct Budget {
    bytes: u64,
    /// No batch taken yet: the first is taken whole even past the limits (KIP-74).
    first: bool,
    files: usize,
    /// A read failure was said once for this response.
    warned: bool,
}

/// A Fetch waits for data at most this long, whatever its max_wait_ms says, so that a
/// client cannot park a thread for days (clients' own request timeouts are 30 s).
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

/// How often a Fetch waiting for data looks at whether its client left.
const GONE_LOOK_INTERVAL: Duration = Duration::from_millis(500);

pub struct Context {
    pub source: Source,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub stopping: AtomicBool,
    /// Incremental fetch sessions, shared by every connection.
    pub sessions: FetchSessionCache,
    /// The descriptors the listener may hold ([`super::limits`]).
    pub fds: std::sync::Arc<super::limits::Descriptors>,
    /// The most record bytes one Fetch response carries (`serve.fetch_max_bytes`, Kafka's
    /// `fetch.max.bytes`), whatever the request's max_bytes.
    pub fetch_max_bytes: i32,
}

/// Who asks: what a request's answer depends on beside the request.
pub struct Client<'a> {
    /// Whether the client left (or the listener stops): its answer is then not finished.
    pub gone: &'a dyn Fn() -> bool,
    /// Whether its replica id ≥ 0 is a follower's (`serve.follower_addresses`,
    /// `serve.follower_principals`): only then does a session it opens have priority.
    pub trusted_follower: bool,
    /// The longest a Fetch of this client waits for data: shorter when its request holds
    /// memory of the shared pool ([`POOLED_FETCH_WAIT`]).
    pub max_wait: Duration,
}

/// The longest a Fetch whose request holds memory of the listener's shared pool waits for
/// data: a large request does not keep the pool from others for a long poll (clients wait
/// 500 ms by default, and fetch again).
pub const POOLED_FETCH_WAIT: Duration = Duration::from_secs(1);

/// How many items of a request are answered between two looks at whether its client left.
const ITEMS_BETWEEN_LOOKS: usize = 256;

/// Said when a client left before its answer was finished: the connection closes.
#[derive(Debug)]
pub struct ClientGone;

impl std::fmt::Display for ClientGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client left before its answer was finished")
    }
}

impl std::error::Error for ClientGone {}

impl Context {
    pub(super) fn cluster_id(&self) -> Option<String> {
        crate::log::identity::read_cluster_id(self.source.data_dir()).unwrap_or(None)
    }

    /// The local topics and their partitions, with the topic id of each topic.
    fn topics(&self) -> BTreeMap<String, Vec<i32>> {
        let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for tp in self.source.partitions() {
            out.entry(tp.topic).or_default().push(tp.partition);
        }
        out
    }

    fn topic_id(&self, topic: &str, partitions: &[i32]) -> Option<Uuid> {
        partitions.iter().find_map(|&p| {
            self.source
                .view(&TopicPartition::new(topic, p), i64::MAX)
                .and_then(|v| v.topic_id)
        })
    }
}

/// Every API this listener answers, as (key, min, max): those served from the log, then the
/// refused ones.
pub fn advertised() -> impl Iterator<Item = (i16, i16, i16)> {
    let served = SERVED.into_iter().map(|(a, min, max)| (a.key(), min, max));
    let refused = super::refusals::advertised().map(|(a, min, max)| (a.key(), min, max));
    served.chain(refused)
}

/// The SASL APIs. SaslHandshake is listed from v0, as Kafka lists it
/// (librdkafka before 2.2 takes a range without v0 for no SaslHandshake at all), but a v0
/// handshake — after which Kafka expects bare SASL tokens, not SaslAuthenticate — is
/// answered with UNSUPPORTED_SASL_MECHANISM and closed: only v1 is spoken.
pub const SASL_SERVED: [(ApiKey, i16, i16); 2] = [
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// Every listener lists the SASL APIs, as Kafka's does: one without SASL answers them with
/// ILLEGAL_SASL_STATE.
pub fn api_versions(version: i16) -> Vec<u8> {
    let sasl_apis = SASL_SERVED
        .iter()
        .map(|&(api, min, max)| (api.key(), min, max));
    let ranges: Vec<ApiVersionRange> = advertised()
        .chain(sasl_apis)
        .map(|(api_key, min, max)| ApiVersionRange { api_key, min, max })
        .collect();
    let mut w = Writer::new();
    api_versions::encode_response(&mut w, version, 3, &ranges);
    w.buf
}

pub fn metadata(ctx: &Context, body: &[u8], version: i16) -> DecodeResult<Vec<u8>> {
    let requested = metadata::decode_request(body, version)?;
    let local = ctx.topics();
    let describe = |name: &str, parts: &[i32]| TopicMetadata {
        error: ErrorCode::NONE,
        name: name.to_string(),
        topic_id: ctx.topic_id(name, parts).unwrap_or_default().0,
        partitions: parts
            .iter()
            .map(|&p| PartitionMetadata {
                error: ErrorCode::NONE,
                partition: p,
                leader_id: ctx.node_id,
                leader_epoch: if version >= 7 {
                    ctx.source
                        .view(&TopicPartition::new(name, p), i64::MAX)
                        .map_or(0, |v| leader_epoch(&v))
                } else {
                    -1
                },
                replicas: vec![ctx.node_id],
            })
            .collect(),
    };
    let topics = match requested {
        None => local.iter().map(|(t, p)| describe(t, p)).collect(),
        Some(asked) => {
            // The local topics by id, looked up once, and only when some topic is asked
            // for by id.
            let ids: HashMap<[u8; 16], &String> = if asked.iter().any(|t| t.topic_id != [0; 16]) {
                local
                    .iter()
                    .filter_map(|(n, p)| ctx.topic_id(n, p).map(|id| (id.0, n)))
                    .collect()
            } else {
                HashMap::new()
            };
            // Kafka reads the topics asked for as a set: each is answered once.
            let mut seen: HashSet<(Option<String>, [u8; 16])> = HashSet::new();
            asked
                .into_iter()
                .filter_map(|t| {
                    let by_name = t.name.clone().filter(|n| local.contains_key(n));
                    let found = by_name.or_else(|| ids.get(&t.topic_id).map(|n| (*n).clone()));
                    let key = match &found {
                        Some(n) => (Some(n.clone()), [0; 16]),
                        None => (t.name.clone(), t.topic_id),
                    };
                    seen.insert(key).then_some((t, found))
                })
                .map(|(t, found)| match found {
                    Some(n) => describe(&n, local.get(&n).map_or(&[][..], Vec::as_slice)),
                    None => TopicMetadata {
                        // Asked for by id alone (v10+): Kafka says UNKNOWN_TOPIC_ID.
                        error: if t.name.is_none() && t.topic_id != [0; 16] {
                            ErrorCode(100)
                        } else {
                            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                        },
                        name: t.name.unwrap_or_default(),
                        topic_id: t.topic_id,
                        partitions: Vec::new(),
                    },
                })
                .collect()
        }
    };
    let resp = MetadataResponse {
        brokers: vec![Broker {
            node_id: ctx.node_id,
            host: ctx.host.clone(),
            port: ctx.port,
        }],
        cluster_id: ctx.cluster_id(),
        topics,
    };
    let mut w = Writer::new();
    metadata::encode_response(&mut w, version, &resp);
    Ok(w.buf)
}

/// Kafka's check of a request's current leader epoch against the leader's (-1: no check).
fn check_epoch(view: &LogView, current_leader_epoch: i32) -> ErrorCode {
    let ours = leader_epoch(view);
    if current_leader_epoch < 0 || current_leader_epoch == ours {
        ErrorCode::NONE
    } else if current_leader_epoch < ours {
        ErrorCode::FENCED_LEADER_EPOCH
    } else {
        ErrorCode::UNKNOWN_LEADER_EPOCH
    }
}

pub fn list_offsets(
    ctx: &Context,
    body: &[u8],
    version: i16,
    client: &Client<'_>,
) -> anyhow::Result<Vec<u8>> {
    let req = list_offsets::decode_request(body, version)?;
    if !valid_isolation(req.isolation_level) {
        // Kafka fails the whole request when it reads the isolation level (it throws, and
        // the error response carries the error in every partition, as asked).
        let topics = map_partitions(req.topics, |_, p| ListOffsetsPartitionResponse {
            partition: p.partition,
            error: ErrorCode::INVALID_REQUEST,
            timestamp: -1,
            offset: -1,
            leader_epoch: -1,
        });
        let mut w = Writer::new();
        list_offsets::encode_response(&mut w, version, &topics);
        return Ok(w.buf);
    }
    // Kafka (ListOffsetsRequest.duplicatePartitions, ReplicaManager.fetchOffset) answers
    // by partition: one named more than once is answered once, with INVALID_REQUEST and
    // nothing looked up; the answers are grouped by topic.
    let mut named: HashMap<(&str, i32), usize> = HashMap::new();
    for (name, parts) in &req.topics {
        for p in parts {
            *named.entry((name.as_str(), p.partition)).or_default() += 1;
        }
    }
    let mut topic_at: HashMap<&str, usize> = HashMap::new();
    let mut topics: Vec<(String, Vec<ListOffsetsPartitionResponse>)> = Vec::new();
    let mut looked_up = 0usize;
    for (name, parts) in &req.topics {
        for p in parts {
            let Some(times) = named.remove(&(name.as_str(), p.partition)) else {
                continue; // a repeat, answered where first named
            };
            // A look-up may read a segment's headers: one for a client that left is not made.
            looked_up += 1;
            if looked_up.is_multiple_of(ITEMS_BETWEEN_LOOKS) && (client.gone)() {
                return Err(ClientGone.into());
            }
            let answer = if times > 1 {
                ListOffsetsPartitionResponse {
                    partition: p.partition,
                    error: ErrorCode::INVALID_REQUEST,
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                }
            } else {
                list_offset(ctx, version, req.isolation_level, name, p)
            };
            let at = *topic_at.entry(name.as_str()).or_insert_with(|| {
                topics.push((name.clone(), Vec::new()));
                topics.len() - 1
            });
            if let Some((_, out)) = topics.get_mut(at) {
                out.push(answer);
            }
        }
    }
    let mut w = Writer::new();
    list_offsets::encode_response(&mut w, version, &topics);
    Ok(w.buf)
}

/// One partition's ListOffsets answer.
fn list_offset(
    ctx: &Context,
    version: i16,
    isolation_level: i8,
    topic: &str,
    p: &list_offsets::ListOffsetsPartition,
) -> ListOffsetsPartitionResponse {
    let answer = |error, timestamp, offset, leader_epoch| ListOffsetsPartitionResponse {
        partition: p.partition,
        error,
        timestamp,
        offset,
        leader_epoch: if version >= 4 { leader_epoch } else { -1 },
    };
    let tp = TopicPartition::new(topic, p.partition);
    let Some(view) = ctx.source.view(&tp, i64::MIN) else {
        return answer(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1);
    };
    let fenced = check_epoch(&view, p.current_leader_epoch);
    if !fenced.is_ok() {
        return answer(fenced, -1, -1, -1);
    }
    let below = if isolation_level == 1 {
        view.last_stable_offset
    } else {
        view.high_watermark
    };
    match p.timestamp {
        list_offsets::EARLIEST => answer(
            ErrorCode::NONE,
            -1,
            view.log_start_offset,
            epoch_at(&view, view.log_start_offset),
        ),
        list_offsets::LATEST => answer(ErrorCode::NONE, -1, below, leader_epoch(&view)),
        // Asked for at v7 and later, as Kafka serves it.
        list_offsets::MAX_TIMESTAMP if version >= 7 => match max_timestamp(ctx, &view, below) {
            Some((offset, timestamp)) => {
                answer(ErrorCode::NONE, timestamp, offset, epoch_at(&view, offset))
            }
            None => answer(ErrorCode::NONE, -1, -1, -1),
        },
        t if t < 0 => answer(ErrorCode::NONE, -1, -1, -1),
        t => match by_timestamp(ctx, &view, below, t) {
            Some((offset, timestamp)) => {
                answer(ErrorCode::NONE, timestamp, offset, epoch_at(&view, offset))
            }
            None => answer(ErrorCode::NONE, -1, -1, -1),
        },
    }
}

/// Kafka's `IsolationLevel.forId`: 0 (read_uncommitted) and 1 (read_committed) only.
fn valid_isolation(level: i8) -> bool {
    matches!(level, 0 | 1)
}

/// The first record at or after the log start, below `below`, with a timestamp ≥ `target`.
fn by_timestamp(ctx: &Context, view: &LogView, below: i64, target: i64) -> Option<(i64, i64)> {
    let dir = view.segments.first()?.log_path.parent()?;
    let spans: Vec<(i64, Option<u64>)> = view
        .segments
        .iter()
        .map(|s| (s.base_offset, Some(s.size)))
        .collect();
    let mut notes = Vec::new();
    let found = crate::log::reader::find_by_timestamp(
        dir,
        &spans,
        view.log_start_offset,
        below,
        target,
        ctx.source.max_timestamps(),
        &mut notes,
    );
    for n in notes {
        crate::log_debug!("ListOffsets: {n}");
    }
    match found {
        Ok(Some(crate::log::reader::TimestampAnswer::Found { offset, timestamp })) => {
            Some((offset, timestamp))
        }
        Ok(_) => None,
        Err(e) => {
            crate::log_warn!("ListOffsets by timestamp {target}: {e:#}");
            None
        }
    }
}

/// The first record below `below` with the largest timestamp (MAX_TIMESTAMP).
fn max_timestamp(ctx: &Context, view: &LogView, below: i64) -> Option<(i64, i64)> {
    let dir = view.segments.first()?.log_path.parent()?;
    let spans: Vec<(i64, Option<u64>)> = view
        .segments
        .iter()
        .map(|s| (s.base_offset, Some(s.size)))
        .collect();
    let maxima = ctx.source.max_timestamps();
    crate::log::reader::find_max_timestamp(dir, &spans, view.log_start_offset, below, maxima)
        .unwrap_or_else(|e| {
            crate::log_warn!("ListOffsets MAX_TIMESTAMP: {e:#}");
            None
        })
}

pub fn offset_for_leader_epoch(ctx: &Context, body: &[u8], version: i16) -> DecodeResult<Vec<u8>> {
    let req = offset_for_leader_epoch::decode_request(body, version)?;
    // Kafka answers every partition as named, repeats included; each partition's log is
    // looked at once.
    let mut views: HashMap<TopicPartition, Option<LogView>> = HashMap::new();
    let topics = map_partitions(req, |name, p| {
        let answer = |error, leader_epoch, end_offset| EpochEndOffset {
            error,
            partition: p.partition,
            leader_epoch,
            end_offset,
        };
        let tp = TopicPartition::new(name, p.partition);
        let view = views
            .entry(tp)
            .or_insert_with_key(|tp| ctx.source.view(tp, i64::MAX));
        let Some(view) = view else {
            return answer(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1, -1);
        };
        let fenced = check_epoch(view, p.current_leader_epoch);
        if !fenced.is_ok() {
            return answer(fenced, -1, -1);
        }
        let (e, o) = end_offset_for(view, p.leader_epoch);
        answer(ErrorCode::NONE, e, o)
    });
    let mut w = Writer::new();
    offset_for_leader_epoch::encode_response(&mut w, version, &topics);
    Ok(w.buf)
}

/// Kafka's `LeaderEpochFileCache.endOffsetFor`: the latest epoch ends at the log end; an
/// older one at the start of the next higher epoch, reported under the largest epoch at or
/// below it (or under itself when it is below every known epoch); an epoch above the
/// latest, or none known, is -1/-1.
pub fn end_offset_for(view: &LogView, epoch: i32) -> (i32, i64) {
    let Some(latest) = view.latest_epoch() else {
        return (-1, -1);
    };
    if epoch < 0 {
        return (-1, -1);
    }
    if epoch == latest {
        return (latest, view.log_end_offset);
    }
    let Some(&(_, higher_start)) = view.epochs.iter().find(|&&(e, _)| e > epoch) else {
        return (-1, -1);
    };
    let floor = view
        .epochs
        .iter()
        .rev()
        .find(|&&(e, _)| e <= epoch)
        .map_or(epoch, |&(e, _)| e);
    (floor, higher_start)
}

/// One partition's part of a Fetch answer.
struct PartAnswer {
    head: FetchPartitionResponse<'static>,
    ranges: Vec<super::response::FileRange>,
    bytes: u64,
}

fn fetch_partition(
    ctx: &Context,
    topic: &str,
    p: &FetchPartition,
    version: i16,
    isolation_level: i8,
    budget: &mut Budget,
) -> PartAnswer {
    let mut head = FetchPartitionResponse {
        partition: p.partition,
        error: ErrorCode::NONE,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        aborted_transactions: None,
        diverging_epoch: None,
        current_leader: None,
        records: &[],
    };
    let none = |head| PartAnswer {
        head,
        ranges: Vec::new(),
        bytes: 0,
    };
    let tp = TopicPartition::new(topic, p.partition);
    let Some(view) = ctx.source.view(&tp, p.fetch_offset) else {
        head.error = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        return none(head);
    };
    head.high_watermark = view.high_watermark;
    head.last_stable_offset = view.last_stable_offset;
    head.log_start_offset = view.log_start_offset;
    let fenced = check_epoch(&view, p.current_leader_epoch);
    if !fenced.is_ok() {
        head.error = fenced;
        return none(head);
    }
    // Kafka's Partition.readRecords: a last fetched epoch whose end here cannot be told is
    // out of range, as is an offset below the log start (checked first, diverging or not);
    // an end below the fetch offset, or an older epoch, means the reader's log diverged.
    if version >= 12 && p.last_fetched_epoch >= 0 {
        let (e, end) = end_offset_for(&view, p.last_fetched_epoch);
        if e < 0 || end < 0 || p.fetch_offset < view.log_start_offset {
            head.error = ErrorCode::OFFSET_OUT_OF_RANGE;
            return none(head);
        }
        if end < p.fetch_offset || e < p.last_fetched_epoch {
            head.diverging_epoch = Some(DivergingEpoch {
                epoch: e,
                end_offset: end,
            });
            return none(head);
        }
    }
    if p.fetch_offset < view.log_start_offset || p.fetch_offset > view.log_end_offset {
        head.error = ErrorCode::OFFSET_OUT_OF_RANGE;
        return none(head);
    }
    let below = if isolation_level == 1 {
        view.last_stable_offset
    } else {
        view.high_watermark
    };
    if budget.files == 0 {
        // This response holds its share of open segment files: the reader fetches the rest
        // next time (as when max_bytes is used up).
        return none(head);
    }
    let limit = budget.bytes.min(p.partition_max_bytes.max(0) as u64);
    let read = match read_batches(
        &view,
        p.fetch_offset,
        below,
        limit,
        budget.first,
        Some(&ctx.fds),
    ) {
        Ok(r) => r,
        Err(e)
            if crate::log::resources::Exhausted::of(&e)
                == Some(crate::log::resources::Exhausted::Descriptors) =>
        {
            // Out of descriptors (other responses, the daemon's own files): no data this time,
            // and none for the rest of this response; the reader fetches again, without an
            // error to back off on.
            budget.files = 0;
            crate::log::resources::descriptors::report(&format!(
                "{tp}: serving a fetch at {} found no free descriptor",
                p.fetch_offset
            ));
            return none(head);
        }
        Err(e) => {
            if !std::mem::replace(&mut budget.warned, true) {
                crate::log_warn!("{tp}: serving a fetch at {} failed: {e:#}", p.fetch_offset);
            }
            head.error = ErrorCode::UNKNOWN_SERVER_ERROR;
            return none(head);
        }
    };
    if isolation_level == 1 {
        // read_committed answers carry a list, empty when no aborted transaction overlaps
        // (Kafka sends null only to read_uncommitted readers).
        head.aborted_transactions = Some(Vec::new());
    }
    if read.bytes > 0 {
        budget.bytes = budget.bytes.saturating_sub(read.bytes);
        budget.first = false;
        budget.files = budget.files.saturating_sub(read.ranges.len());
        if isolation_level == 1 {
            let upper = read.end_offset.unwrap_or(p.fetch_offset);
            head.aborted_transactions = Some(aborted_transactions(&view, p.fetch_offset, upper));
        }
    }
    PartAnswer {
        head,
        bytes: read.bytes,
        ranges: read.ranges,
    }
}

/// Answers a Fetch: whole batches below the high watermark (the last stable offset under
/// read_committed), waiting up to max_wait_ms for min_bytes, woken by the follower's appends.
/// v7+ fetches may open and use incremental sessions ([`super::sessions`]): an incremental
/// answer carries only the partitions with something new, and waits like a full one when
/// none has.
pub fn fetch(
    ctx: &Context,
    body: &[u8],
    version: i16,
    client: &Client<'_>,
) -> anyhow::Result<Vec<Piece>> {
    let req = fetch::decode_request(body, version)?;
    if !valid_isolation(req.isolation_level) {
        return Ok(vec![Piece::Bytes(fetch_error(
            version,
            &req,
            ErrorCode::INVALID_REQUEST,
        ))]);
    }
    // At v13 topics come as ids (their text, from the decoder): back to local names.
    let names: BTreeMap<String, String> = if version >= 13 {
        ctx.topics()
            .iter()
            .filter_map(|(n, p)| ctx.topic_id(n, p).map(|id| (id.to_string(), n.clone())))
            .collect()
    } else {
        BTreeMap::new()
    };
    let plan = ctx.sessions.plan(&req, version, Instant::now());
    let opens = plan == Plan::Open;
    // What to answer, in order, and how it splits into topics of the response.
    let (mut work, runs, session) = match plan {
        Plan::Refused(error) => return Ok(vec![Piece::Bytes(session_error(version, error))]),
        Plan::Incremental {
            id,
            epoch,
            partitions,
        } => {
            let runs = topic_runs(&partitions);
            (partitions, runs, Some((id, epoch)))
        }
        Plan::Sessionless | Plan::Open => {
            // Kafka reads a full fetch's partitions into a map (FetchRequest.fetchData): a
            // partition named more than once is answered once, where first named, with what
            // it was last asked; the answers of one topic that follow each other are one
            // topic of the response (FetchResponse.toMessage).
            let work = dedup(
                req.topics
                    .iter()
                    .flat_map(|(t, ps)| ps.iter().map(|p| CachedPartition::new(t, p.clone()))),
            );
            let runs = topic_runs(&work);
            (work, runs, None)
        }
    };
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64)
        .min(MAX_FETCH_WAIT)
        .min(client.max_wait);
    // Kafka's KafkaApis: the broker's fetch.max.bytes caps the request's, and min_bytes.
    let max_bytes = req.max_bytes.clamp(0, ctx.fetch_max_bytes.max(0));
    let min_bytes = req.min_bytes.clamp(0, max_bytes);
    let deadline = Instant::now() + wait;
    let signal = ctx.source.appended().clone();
    let answers = loop {
        let seen = signal.current();
        let mut budget = Budget {
            bytes: max_bytes as u64,
            first: true,
            files: max_files_per_response(),
            warned: false,
        };
        let answers: Vec<PartAnswer> = work
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i % ITEMS_BETWEEN_LOOKS == ITEMS_BETWEEN_LOOKS - 1 && (client.gone)() {
                    return Err(ClientGone);
                }
                let name = names.get(&c.topic).unwrap_or(&c.topic);
                let mut a = fetch_partition(
                    ctx,
                    name,
                    &c.fetch,
                    version,
                    req.isolation_level,
                    &mut budget,
                );
                if version >= 13 && !names.contains_key(&c.topic) {
                    a.head.error = ErrorCode(100); // UNKNOWN_TOPIC_ID
                }
                Ok(a)
            })
            .collect::<Result<_, ClientGone>>()?;
        let bytes: u64 = answers.iter().map(|a| a.bytes).sum();
        let settled = answers
            .iter()
            .any(|a| !a.head.error.is_ok() || a.head.diverging_epoch.is_some());
        let now = Instant::now();
        if bytes >= min_bytes as u64
            || settled
            || now >= deadline
            || ctx.stopping.load(Ordering::SeqCst)
        {
            break answers;
        }
        drop(answers);
        // A long poll looks at its client between waits: one that left is not waited for.
        signal.wait_past(seen, (deadline - now).min(GONE_LOOK_INTERVAL));
        if (client.gone)() {
            return Err(ClientGone.into());
        }
    };
    let sent: Vec<bool> = work
        .iter_mut()
        .zip(&answers)
        .map(|(c, a)| c.must_respond(&a.head, a.bytes > 0))
        .collect();
    let session_id = match session {
        Some((id, epoch)) => match ctx.sessions.commit(id, epoch, work, &sent, Instant::now()) {
            Ok(()) => id,
            Err(error) => return Ok(vec![Piece::Bytes(session_error(version, error))]),
        },
        None if opens => ctx.sessions.open(
            req.replica_id >= 0 && client.trusted_follower,
            version >= 13,
            work,
            Instant::now(),
        ),
        None => 0,
    };
    // A full answer carries every partition asked for; an incremental one only those with
    // something new, and no topic left without partitions.
    let incremental = session.is_some();
    let mut topics: Vec<(String, Vec<PartAnswer>)> = Vec::with_capacity(runs.len());
    let mut answers = answers.into_iter().zip(sent);
    for (topic, len) in runs {
        let parts: Vec<PartAnswer> = answers
            .by_ref()
            .take(len)
            .filter(|(_, sent)| !incremental || *sent)
            .map(|(a, _)| a)
            .collect();
        if !incremental || !parts.is_empty() {
            topics.push((topic, parts));
        }
    }
    let mut pieces = Vec::new();
    let mut w = Writer::new();
    fetch::encode_response_head(&mut w, version, ErrorCode::NONE, session_id, topics.len());
    for (topic, parts) in topics {
        let id = Uuid::parse(&topic).unwrap_or_default();
        fetch::encode_topic_head(&mut w, version, &topic, &id, parts.len());
        for a in parts {
            fetch::encode_partition_head(
                &mut w,
                version,
                &a.head,
                usize::try_from(a.bytes).unwrap_or(usize::MAX),
            );
            if !a.ranges.is_empty() {
                pieces.push(Piece::Bytes(std::mem::take(&mut w.buf)));
                pieces.extend(a.ranges.into_iter().map(Piece::File));
            }
            fetch::encode_partition_tail(&mut w, version, &a.head);
        }
        fetch::encode_topic_tail(&mut w, version);
    }
    fetch::encode_response_tail(&mut w, version);
    pieces.push(Piece::Bytes(w.buf));
    Ok(pieces)
}

/// Kafka's `FetchRequest.getErrorResponse`: `error` at the top level with the request's
/// session id, and below v13 also in every partition as the request names them (no data,
/// no positions), for clients older than the top-level error code. Nothing is read and no
/// session is touched.
fn fetch_error(version: i16, req: &fetch::FetchRequest, error: ErrorCode) -> Vec<u8> {
    let topics: &[(String, Vec<FetchPartition>)] = if version < 13 { &req.topics } else { &[] };
    let mut w = Writer::new();
    fetch::encode_response_head(&mut w, version, error, req.session_id, topics.len());
    for (topic, parts) in topics {
        fetch::encode_topic_head(&mut w, version, topic, &Uuid::default(), parts.len());
        for p in parts {
            let head = FetchPartitionResponse {
                partition: p.partition,
                error,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                aborted_transactions: None,
                diverging_epoch: None,
                current_leader: None,
                records: &[],
            };
            fetch::encode_partition_head(&mut w, version, &head, 0);
            fetch::encode_partition_tail(&mut w, version, &head);
        }
        fetch::encode_topic_tail(&mut w, version);
    }
    fetch::encode_response_tail(&mut w, version);
    w.buf
}

/// A Fetch answer that is only a session error (KIP-227: no partitions, session id 0).
fn session_error(version: i16, error: ErrorCode) -> Vec<u8> {
    let mut w = Writer::new();
    fetch::encode_response_head(&mut w, version, error, 0, 0);
    fetch::encode_response_tail(&mut w, version);
    w.buf
}

/// A session's partitions as runs of one topic, in order: (topic, how many).
fn topic_runs(partitions: &[CachedPartition]) -> Vec<(String, usize)> {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for p in partitions {
        match runs.last_mut() {
            Some((t, n)) if *t == p.topic => *n += 1,
            _ => runs.push((p.topic.clone(), 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::fetch::FetchRequest;
    use crate::serve::fuzzing;
    use std::sync::atomic::AtomicUsize;

    fn context(dir: &std::path::Path) -> Context {
        Context {
            source: Source::stopped(dir).unwrap(),
            node_id: 0,
            host: "127.0.0.1".into(),
            port: 9093,
            stopping: AtomicBool::new(false),
            sessions: FetchSessionCache::new(10, 1 << 20),
            fds: super::super::limits::Descriptors::new(1000),
            fetch_max_bytes: 1 << 20,
        }
    }

    /// A Fetch at the log end, waiting up to `max_wait_ms` for data that never comes.
    fn long_poll(ctx: &Context, max_wait_ms: i32) -> Vec<u8> {
        let tp = TopicPartition::new(fuzzing::TOPIC, 0);
        let end = ctx.source.view(&tp, i64::MAX).unwrap().high_watermark;
        let req = FetchRequest {
            replica_id: -1,
            max_wait_ms,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 0,
            topics: vec![(
                tp.topic.clone(),
                vec![FetchPartition {
                    partition: 0,
                    current_leader_epoch: -1,
                    fetch_offset: end,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                }],
            )],
            topic_ids: Default::default(),
            session_id: 0,
            session_epoch: -1,
            forgotten: Vec::new(),
        };
        let mut w = Writer::new();
        fetch::encode_request(&mut w, 4, &req);
        w.buf
    }

    #[test]
    fn a_long_poll_ends_soon_after_its_client_left() {
        let dir = tempfile::tempdir().unwrap();
        fuzzing::build_data_dir(dir.path()).unwrap();
        let ctx = context(dir.path());
        let body = long_poll(&ctx, 20_000);
        // The client is there for the first looks, then gone.
        let looks = AtomicUsize::new(0);
        let gone = || looks.fetch_add(1, Ordering::SeqCst) >= 2;
        let client = Client {
            gone: &gone,
            trusted_follower: false,
            max_wait: MAX_FETCH_WAIT,
        };
        let t = Instant::now();
        let e = fetch(&ctx, &body, 4, &client).unwrap_err();
        assert!(e.is::<ClientGone>(), "{e:#}");
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "waited {:?} for a client that left",
            t.elapsed()
        );
        // A client that stays waits its max_wait_ms, and gets its answer.
        let body = long_poll(&ctx, 700);
        let stays = Client {
            gone: &|| false,
            trusted_follower: false,
            max_wait: MAX_FETCH_WAIT,
        };
        let t = Instant::now();
        assert!(fetch(&ctx, &body, 4, &stays).is_ok());
        assert!(
            t.elapsed() >= Duration::from_millis(650),
            "{:?}",
            t.elapsed()
        );
    }
}
