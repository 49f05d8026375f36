//! An in-process Kafka "leader" for integration tests: one broker (node id 1) holding one topic,
//! served over real TCP on 127.0.0.1 with the crate's own codec, so a test can drive the
//! follower against a leader whose log it controls byte for byte and which can misbehave in
//! ways a real broker never does.
//!
//! # What it speaks
//! - **ApiVersions** v0–3 (the top can be lowered with [`TestLeader::set_api_versions_max`]). A
//!   request above the top is answered, like Kafka does, with a v0 body: error 35
//!   (UNSUPPORTED_VERSION) and one entry `(18, 0, top)`.
//! - **Metadata** v1–12: broker 1 at `127.0.0.1:port`; the cluster id (v2+, default
//!   [`CLUSTER_ID`]); the topic with its topic id (v10+, non-zero, see *Identity*) and each
//!   partition led by 1 at its current leader epoch; any other topic gets error 3 and a zero id.
//!   A null topic list means all topics.
//! - **ListOffsets** v1–7: -2 → log start, -1 → the high watermark (read_uncommitted) or the
//!   last stable offset (read_committed, v2+), -3 → the last batch's last offset and max
//!   timestamp, a timestamp → the first record whose timestamp is at or after it (-1 when none).
//! - **Fetch** v4–12 (advertised range set by [`TestLeader::set_fetch_versions`], default 4–12):
//!   whole batches from the one holding the fetch offset, up to the partition's max bytes but at
//!   least one; error 1 outside `[log start, log end]`. Every answer reports the high watermark
//!   and the last stable offset (see *Transactions*). read_uncommitted (isolation 0) serves up
//!   to the log end, whatever high watermark is reported, and `aborted_transactions` is null.
//!   read_committed (isolation 1) serves only batches that end below the last stable offset and
//!   lists, as Kafka does, every aborted transaction whose marker is at or after the fetch offset
//!   and whose first offset is below the end of the data served (an empty list when no batch is
//!   served, null in error and divergence answers). An answer with no data, no error and no divergence waits up to
//!   `min(max_wait_ms, 200)` ms for an append.
//!   At v12, a request with `last_fetched_epoch >= 0` is checked like Kafka does: when the leader's
//!   end offset for that epoch is below the fetch offset (or the epoch is not in its history)
//!   the answer carries `DivergingEpoch` and no records.
//! - **Fetch sessions** (KIP-227, v7+), off unless [`TestLeader::enable_fetch_sessions`]; while
//!   off, every answer is sessionless (session id 0), whatever the request asks, as Tansu's and
//!   the mock cluster's are. While on, each connection holds at most one session, as Kafka's
//!   `FetchSession`: epoch 0 (id 0, or the id of the session it replaces) is a full fetch that
//!   opens a new session (ids 1, 2, … across the leader) and is answered for every partition
//!   named; epoch -1 is sessionless (and closes the session it names); epochs 1, 2, … with
//!   the session's id are incremental: forgotten partitions leave, named ones join or update
//!   their fetch parameters, and the answer lists only the session's partitions that have
//!   records, an error or a divergence, or whose high watermark, last stable offset or log
//!   start changed since last answered (none: it waits for an append like an empty answer).
//!   The session's fetch offsets move only when the client names them, as in Kafka.
//!   An unknown id → top-level FETCH_SESSION_ID_NOT_FOUND (70); an epoch other than the next
//!   → INVALID_FETCH_SESSION_EPOCH (71), the session kept. Both answers carry no partitions
//!   and session id 0. [`forget_fetch_sessions`](TestLeader::forget_fetch_sessions) drops every
//!   session; [`reject_next_session_epochs`](TestLeader::reject_next_session_epochs) answers the
//!   next n incremental requests with 71. A closed connection drops its session.
//!   [`seen_fetches`](TestLeader::seen_fetches) records every Fetch answered (sessions on or
//!   off): partitions named, forgotten, session id and epoch, and what was answered.
//! - **OffsetForLeaderEpoch** v2–4, answered from the leader's epoch history like Kafka's
//!   `LeaderEpochFileCache::endOffsetFor`: the current epoch → log end; an older epoch → the
//!   largest known epoch at or below it, ending where the next one starts; an epoch above the
//!   current one → -1/-1.
//!
//! Any other API key, a version outside the ranges above, or a request that cannot be decoded
//! closes the connection without an answer (as a broker does); nothing a client sends can make
//! the leader panic.
//!
//! # The log
//! Each partition's log is a list of batches, each kept as the bytes fetches serve, and of raw
//! regions. It starts empty at offset 0 ([`set_log_start`](TestLeader::set_log_start) starts it
//! higher).
//! - [`append`](TestLeader::append) builds uncompressed v2 batches with `build_v2_batch`:
//!   epoch = the partition's current leader epoch, key `key-<offset>` (null for every offset
//!   ≡ 3 mod 4), value `value-p<partition>-o<offset>-e<epoch>`, timestamps from
//!   1_700_000_000_000 rising by 1 ms a record and never reused, even after a truncation.
//! - [`append_batch`](TestLeader::append_batch) appends one prebuilt batch as it is (built with
//!   `tests/support/batches.rs`: compacted batches with holes, emptied batches, transactional
//!   batches and markers). Its header must parse and it must start at or above the log end (a
//!   gap is fine); the log end becomes its last offset + 1. An epoch above the leader epoch
//!   becomes the leader epoch, starting at the batch's base offset.
//! - [`append_raw`](TestLeader::append_raw) appends bytes with no check at all (negative
//!   offsets, batches below earlier ones, negative record counts, garbage). They are served
//!   verbatim after the bytes before them, to any fetch from an offset at or below the log end
//!   as it was when they were appended, and move nothing: not the log end, not the
//!   transactions, not ListOffsets. A later batch is served after them.
//!
//! The high watermark is the log end unless
//! [`set_high_watermark`](TestLeader::set_high_watermark) overrides it; the override changes
//! what Fetch and ListOffsets report, never the data served.
//!
//! # Transactions
//! The leader follows the batches appended: a transactional data batch opens its producer id's
//! transaction (at its base offset) unless one is open; a COMMIT marker closes it; an ABORT
//! marker closes it and records the aborted transaction (producer id, first offset, last
//! offset = the marker's). A marker with no open transaction changes nothing. The last stable
//! offset is the first offset of the oldest open transaction, capped at the high watermark; with
//! none open it is the high watermark. A truncation recomputes all of this from the batches
//! left; a deletion forgets aborted transactions that end below the new log start.
//!
//! # Identity
//! The topic has a non-zero topic id mixed from the port and the clock
//! ([`topic_id`](TestLeader::topic_id); [`set_topic_id`](TestLeader::set_topic_id) sets it, all
//! zero making a leader that knows no topic ids).
//! [`recreate_topic`](TestLeader::recreate_topic) deletes the topic and creates it again under
//! the same name: a new non-zero id, every partition empty from offset 0 at epoch 0.
//! [`set_cluster_id`](TestLeader::set_cluster_id) sets or clears the cluster id.
//!
//! # Faults it injects
//! Each armed fault is consumed by the responses it hits; the log itself is never altered.
//! - [`corrupt_next_fetches`](TestLeader::corrupt_next_fetches): the next n fetch answers that
//!   carry data for the partition have one byte inverted in the middle of the *first* batch's
//!   records, so that batch's header still parses but its CRC-32C fails.
//! - [`partial_next_fetches`](TestLeader::partial_next_fetches): the next n data-carrying answers
//!   for the partition are cut halfway through their *last* batch (at least 30 bytes of it stay,
//!   so its header is readable and the batch is "partial", not "corrupt").
//! - [`error_next_fetches`](TestLeader::error_next_fetches): the next n fetch answers for the
//!   partition carry the given partition-level error code and no records (high watermark and
//!   log start are still filled in). Applied before any other check.
//! - [`drip_next_fetches`](TestLeader::drip_next_fetches): the next n Fetch requests naming a
//!   partition get a frame header announcing a large size, then one byte every 100 ms for as
//!   long as the client keeps the connection (a slow or hostile broker).
//! - [`silence_api`](TestLeader::silence_api): requests of one API are never answered, the
//!   connection left open (a hung broker).
//! - [`close_on_api`](TestLeader::close_on_api): requests of one API close their connection.
//! - [`drop_next_requests`](TestLeader::drop_next_requests): the next n requests of any API, on
//!   any connection, are read and then the connection is closed without an answer.
//! - [`garbage_next_fetches`](TestLeader::garbage_next_fetches): the next n Fetch requests get a
//!   correctly framed answer with the right correlation id whose body is malformed; the kinds
//!   alternate, starting with the first: (a) a partitions array count of -5 (at v12, where a
//!   compact count cannot be negative, a count of 268 million), (b) a records length of 1000
//!   with only 3 bytes behind it.
//! - [`truncate_and_bump_epoch`](TestLeader::truncate_and_bump_epoch): an unclean leader
//!   election: the log loses its tail and the leader epoch goes up, so a follower that had the
//!   tail must find its divergence point. Batches appended afterwards carry the new epoch (in
//!   the batch header and, through `append`, in their values), so they differ from the lost ones.
//!
//! Dropping the [`TestLeader`] stops accepting connections and closes the open ones.

#![allow(dead_code)]

use replica_follower::protocol::codec::{DecodeResult, Reader, Writer};
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::fetch::{
    self, AbortedTransaction, DivergingEpoch, FetchPartition, FetchPartitionResponse, FetchRequest,
    FetchResponse,
};
use replica_follower::protocol::list_offsets::{self, ListOffsetsPartitionResponse};
use replica_follower::protocol::metadata::{
    self, Broker, MetadataResponse, PartitionMetadata, TopicMetadata,
};
use replica_follower::protocol::offset_for_leader_epoch::{self, EpochEndOffset};
use replica_follower::protocol::{ApiKey, map_partitions};
use replica_follower::record::BatchHeader;
use replica_follower::record::batch::V2_HEADER_SIZE;
use replica_follower::record::records::{NewRecord, build_v2_batch, decode_records};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The leader's node id.
pub const NODE_ID: i32 = 1;
/// Timestamp of the first record appended to each partition.
pub const FIRST_TIMESTAMP: i64 = 1_700_000_000_000;
/// The cluster id Metadata reports until [`TestLeader::set_cluster_id`] changes it.
pub const CLUSTER_ID: &str = "test-leader-cluster";
/// Longest wait before answering a fetch that has nothing to return.
const MAX_EMPTY_FETCH_WAIT_MS: i32 = 200;
/// Larger request frames close the connection.
const MAX_REQUEST_BYTES: i32 = 64 << 20;

/// An in-process Kafka leader; see the module documentation.
pub struct TestLeader {
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

/// What the accept loop, the connection threads and the test share.
struct Shared {
    port: u16,
    state: Mutex<State>,
    /// Notified on every append (and on shutdown) to wake fetches waiting for data.
    appended: Condvar,
    stopping: AtomicBool,
    next_connection_id: AtomicU64,
    /// A handle on every open connection, so dropping the leader can close them.
    connections: Mutex<HashMap<u64, TcpStream>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

struct State {
    topic: String,
    /// All zero: a leader that knows no topic ids.
    topic_id: [u8; 16],
    cluster_id: Option<String>,
    partitions: Vec<PartitionLog>,
    fetch_versions: (i16, i16),
    api_versions_max: i16,
    drop_requests: usize,
    /// API key whose requests are read and never answered (the connection stays open).
    silent_api: Option<i16>,
    /// API key whose requests close the connection unanswered, every time.
    closing_api: Option<i16>,
    garbage_fetches: usize,
    garbage_served: usize,
    /// (partition, frame size announced, fetches left): Fetch requests naming the partition
    /// are answered with that frame size and then one byte every 100 ms.
    drip: Option<(i32, i32, usize)>,
    fetch_requests: usize,
    /// KIP-227 sessions (see the module documentation); off by default.
    sessions_enabled: bool,
    /// Connection id → its session. Invariant: at most one per connection.
    sessions: HashMap<u64, LeaderSession>,
    next_session_id: i32,
    /// Incremental requests still to answer with INVALID_FETCH_SESSION_EPOCH.
    reject_epochs: usize,
    /// Every Fetch answered, oldest first, up to `MAX_SEEN_FETCHES`.
    seen: Vec<SeenFetch>,
}

/// Fetch requests recorded at most (a test runs for seconds; this bounds a forgotten one).
const MAX_SEEN_FETCHES: usize = 100_000;

/// One connection's fetch session: each partition's fetch parameters as last named, and what
/// it was last answered (what an incremental answer compares with).
struct LeaderSession {
    id: i32,
    next_epoch: i32,
    partitions: BTreeMap<(String, i32), CachedPartition>,
}

struct CachedPartition {
    req: FetchPartition,
    /// (high watermark, last stable offset, log start) last answered; `None` before any.
    answered: Option<(i64, i64, i64)>,
}

/// A Fetch request the leader answered, for assertions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenFetch {
    /// Which connection it came on (ids in order of acceptance).
    pub connection: u64,
    pub version: i16,
    pub session_id: i32,
    pub session_epoch: i32,
    /// (partition, fetch offset) of every partition named, in request order.
    pub partitions: Vec<(i32, i64)>,
    pub forgotten: Vec<i32>,
    /// The answer's top-level error and session id, and the partitions it listed.
    pub error: i16,
    pub response_session_id: i32,
    pub answered: Vec<i32>,
}

impl SeenFetch {
    /// The partitions named, without offsets.
    pub fn named(&self) -> Vec<i32> {
        self.partitions.iter().map(|&(p, _)| p).collect()
    }

    /// Whether it was a full fetch (sessionless or opening a session).
    pub fn is_full(&self) -> bool {
        self.session_epoch <= 0
    }
}

/// One stored batch.
struct Batch {
    header: BatchHeader,
    /// (offset, timestamp) of each record, in batch order (empty when the records do not
    /// decode, e.g. compressed).
    timestamps: Vec<(i64, i64)>,
    bytes: Vec<u8>,
}

impl Batch {
    fn new(header: BatchHeader, bytes: Vec<u8>) -> Batch {
        let timestamps = decode_records(&header, &bytes)
            .map(|rs| rs.iter().map(|r| (r.offset, r.timestamp)).collect())
            .unwrap_or_default();
        Batch {
            header,
            timestamps,
            bytes,
        }
    }
}

/// What a partition's log holds, in order.
enum Entry {
    Batch(Batch),
    /// Bytes appended unchecked by `append_raw`; `at` was the log end then.
    Raw {
        at: i64,
        bytes: Vec<u8>,
    },
}

impl Entry {
    fn bytes(&self) -> &[u8] {
        match self {
            Entry::Batch(b) => &b.bytes,
            Entry::Raw { bytes, .. } => bytes,
        }
    }

    fn batch(&self) -> Option<&Batch> {
        match self {
            Entry::Batch(b) => Some(b),
            Entry::Raw { .. } => None,
        }
    }

    /// Whether a read from `offset` includes this entry (when it gets that far).
    fn reaches(&self, offset: i64) -> bool {
        match self {
            Entry::Batch(b) => b.header.last_offset >= offset,
            Entry::Raw { at, .. } => *at >= offset,
        }
    }

    /// Where the log ends if this entry and everything after it are dropped.
    fn start(&self) -> i64 {
        match self {
            Entry::Batch(b) => b.header.base_offset,
            Entry::Raw { at, .. } => *at,
        }
    }
}

/// A transaction the producer aborted: its data from `first_offset`, its marker at
/// `last_offset`.
#[derive(Clone, Copy)]
struct AbortedTxn {
    producer_id: i64,
    first_offset: i64,
    last_offset: i64,
}

/// Records read for one fetch.
struct ReadData {
    bytes: Vec<u8>,
    /// One past the last offset of the last batch served; `None` when no batch was.
    end: Option<i64>,
}

struct PartitionLog {
    entries: Vec<Entry>,
    log_start: i64,
    log_end: i64,
    /// Overrides the high watermark reported (and used by ListOffsets); `None` = log end.
    high_watermark: Option<i64>,
    leader_epoch: i32,
    /// (epoch, start offset), ascending, like Kafka's leader-epoch cache.
    epochs: Vec<(i32, i64)>,
    /// Producer id → first offset of its open transaction.
    open_txns: BTreeMap<i64, i64>,
    aborted_txns: Vec<AbortedTxn>,
    next_timestamp: i64,
    corrupt_fetches: usize,
    partial_fetches: usize,
    error_fetches: Option<(i16, usize)>,
    served_offsets: Vec<i64>,
}

impl PartitionLog {
    fn new() -> Self {
        PartitionLog {
            entries: Vec::new(),
            log_start: 0,
            log_end: 0,
            high_watermark: None,
            leader_epoch: 0,
            epochs: vec![(0, 0)],
            open_txns: BTreeMap::new(),
            aborted_txns: Vec::new(),
            next_timestamp: FIRST_TIMESTAMP,
            corrupt_fetches: 0,
            partial_fetches: 0,
            error_fetches: None,
            served_offsets: Vec::new(),
        }
    }

    fn batches(&self) -> impl DoubleEndedIterator<Item = &Batch> {
        self.entries.iter().filter_map(Entry::batch)
    }

    fn high_watermark(&self) -> i64 {
        self.high_watermark.unwrap_or(self.log_end)
    }

    /// Kafka's last stable offset: the first offset of the oldest open transaction, capped at
    /// the high watermark.
    fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        self.open_txns
            .values()
            .copied()
            .min()
            .map_or(hw, |f| f.min(hw))
    }

    fn append(&mut self, partition: i32, records: usize, records_per_batch: usize) {
        let mut left = records;
        while left > 0 {
            let n = left.min(records_per_batch.max(1));
            let base = self.log_end;
            let epoch = self.leader_epoch;
            let first_timestamp = self.next_timestamp;
            let owned: Vec<(Option<Vec<u8>>, Vec<u8>)> = (0..n as i64)
                .map(|i| {
                    let offset = base + i;
                    let key = (offset % 4 != 3).then(|| format!("key-{offset}").into_bytes());
                    let value = format!("value-p{partition}-o{offset}-e{epoch}").into_bytes();
                    (key, value)
                })
                .collect();
            let records: Vec<NewRecord<'_>> = owned
                .iter()
                .enumerate()
                .map(|(i, (key, value))| NewRecord {
                    key: key.as_deref(),
                    value: Some(value),
                    timestamp: first_timestamp + i as i64,
                })
                .collect();
            let bytes = build_v2_batch(base, epoch, &records);
            let header = BatchHeader::parse(&bytes, usize::MAX)
                .expect("build_v2_batch made a batch that does not parse");
            self.entries.push(Entry::Batch(Batch::new(header, bytes)));
            self.log_end = header.last_offset + 1;
            self.next_timestamp += n as i64;
            left -= n;
        }
    }

    fn append_batch(&mut self, bytes: Vec<u8>) {
        let header = BatchHeader::parse(&bytes, usize::MAX)
            .unwrap_or_else(|e| panic!("append_batch: {e}; use append_raw for such bytes"));
        assert!(
            header.base_offset >= self.log_end,
            "append_batch: the batch starts at {} below the log end {}; use append_raw",
            header.base_offset,
            self.log_end
        );
        let epoch = header.partition_leader_epoch;
        if epoch > self.leader_epoch {
            self.leader_epoch = epoch;
            self.epochs.push((epoch, header.base_offset));
        }
        let batch = Batch::new(header, bytes);
        self.track_txn(&batch);
        self.next_timestamp = self.next_timestamp.max(header.max_timestamp + 1);
        self.entries.push(Entry::Batch(batch));
        self.log_end = header.last_offset + 1;
    }

    fn append_raw(&mut self, bytes: Vec<u8>) {
        let at = self.log_end;
        self.entries.push(Entry::Raw { at, bytes });
    }

    /// Follows a batch's effect on the producers' transactions.
    fn track_txn(&mut self, b: &Batch) {
        if !b.header.is_transactional() {
            return;
        }
        let producer_id = be_i64_at(&b.bytes, 43);
        if !b.header.is_control() {
            self.open_txns
                .entry(producer_id)
                .or_insert(b.header.base_offset);
            return;
        }
        // The marker's type is the INT16 after the key's version.
        let kind = decode_records(&b.header, &b.bytes)
            .ok()
            .and_then(|rs| rs.into_iter().next())
            .and_then(|r| r.key)
            .and_then(|k| k.get(2..4).map(|t| i16::from_be_bytes([t[0], t[1]])));
        if !matches!(kind, Some(0 | 1)) {
            return;
        }
        if let Some(first_offset) = self.open_txns.remove(&producer_id)
            && kind == Some(0)
        {
            self.aborted_txns.push(AbortedTxn {
                producer_id,
                first_offset,
                last_offset: b.header.last_offset,
            });
        }
    }

    /// Recomputes the transactions from the batches the log still holds.
    fn rebuild_txns(&mut self) {
        self.open_txns.clear();
        self.aborted_txns.clear();
        let entries = std::mem::take(&mut self.entries);
        for b in entries.iter().filter_map(Entry::batch) {
            self.track_txn(b);
        }
        self.entries = entries;
    }

    fn set_log_start(&mut self, offset: i64) {
        assert!(
            self.entries.is_empty() && self.log_start == self.log_end,
            "set_log_start: the partition already holds offsets {}..{}",
            self.log_start,
            self.log_end
        );
        self.log_start = offset;
        self.log_end = offset;
        self.epochs = vec![(self.leader_epoch, offset)];
    }

    fn log_bytes(&self) -> Vec<u8> {
        self.entries
            .iter()
            .flat_map(|e| e.bytes().to_vec())
            .collect()
    }

    fn delete_records_before(&mut self, offset: i64) {
        let new_start = offset.min(self.log_end);
        if new_start <= self.log_start {
            return;
        }
        self.entries.retain(|e| e.reaches(new_start));
        self.aborted_txns.retain(|t| t.last_offset >= new_start);
        self.log_start = new_start;
        // Like Kafka's truncateFromStart: epochs that ended before the new start go; the one
        // holding it now starts there.
        while self.epochs.len() > 1 && self.epochs.get(1).is_some_and(|&(_, s)| s <= new_start) {
            self.epochs.remove(0);
        }
        if let Some(first) = self.epochs.first_mut() {
            first.1 = first.1.max(new_start);
        }
    }

    fn truncate_and_bump_epoch(&mut self, offset: i64) {
        if let Some(i) = self.entries.iter().position(|e| e.reaches(offset)) {
            let cut_at = self.entries.get(i).map_or(offset, Entry::start);
            self.entries.truncate(i);
            self.log_end = cut_at.clamp(self.log_start, self.log_end);
            self.rebuild_txns();
        }
        let end = self.log_end;
        self.epochs.retain(|&(_, start)| start < end);
        self.leader_epoch += 1;
        self.epochs.push((self.leader_epoch, end));
    }

    /// Kafka's `LeaderEpochFileCache::endOffsetFor`: (epoch, end offset), or (-1, -1).
    fn end_offset_for(&self, requested: i32) -> (i32, i64) {
        if requested < 0 {
            return (-1, -1);
        }
        if self.epochs.last().map(|&(e, _)| e) == Some(requested) {
            return (requested, self.log_end);
        }
        let higher = self.epochs.iter().find(|&&(e, _)| e > requested);
        let floor = self.epochs.iter().rev().find(|&&(e, _)| e <= requested);
        match (floor, higher) {
            (_, None) => (-1, -1),
            (None, Some(&(_, next_start))) => (requested, next_start),
            (Some(&(epoch, _)), Some(&(_, next_start))) => (epoch, next_start),
        }
    }

    /// Whole entries from the batch holding `offset`, up to `max_bytes` but at least one,
    /// stopping at the first batch that reaches `below` (and at raw bytes appended there).
    fn read(&self, offset: i64, max_bytes: i32, below: i64) -> ReadData {
        let limit = usize::try_from(max_bytes).unwrap_or(0);
        let mut out = ReadData {
            bytes: Vec::new(),
            end: None,
        };
        for e in self.entries.iter().skip_while(|e| !e.reaches(offset)) {
            if e.reaches(below) {
                break;
            }
            let bytes = e.bytes();
            if !out.bytes.is_empty() && out.bytes.len() + bytes.len() > limit {
                break;
            }
            out.bytes.extend_from_slice(bytes);
            if let Some(b) = e.batch() {
                out.end = Some(b.header.last_offset + 1);
            }
        }
        out
    }

    /// Aborted transactions a read_committed fetch from `offset` ending at `end` must list.
    fn aborted_in(&self, offset: i64, end: Option<i64>) -> Vec<AbortedTransaction> {
        let Some(end) = end else {
            return Vec::new();
        };
        self.aborted_txns
            .iter()
            .filter(|t| t.last_offset >= offset && t.first_offset < end)
            .map(|t| AbortedTransaction {
                producer_id: t.producer_id,
                first_offset: t.first_offset,
            })
            .collect()
    }

    /// ListOffsets for one timestamp: (timestamp, offset, leader epoch).
    fn offset_for_timestamp(&self, timestamp: i64, isolation_level: i8) -> (i64, i64, i32) {
        match timestamp {
            list_offsets::EARLIEST => (-1, self.log_start, self.epoch_of(self.log_start)),
            list_offsets::LATEST => {
                let offset = if isolation_level == 1 {
                    self.last_stable_offset()
                } else {
                    self.high_watermark()
                };
                (-1, offset, self.leader_epoch)
            }
            -3 => match self.batches().next_back() {
                Some(b) => (
                    b.header.max_timestamp,
                    b.header.last_offset,
                    b.header.partition_leader_epoch,
                ),
                None => (-1, -1, -1),
            },
            ts => {
                let found = self.batches().find_map(|b| {
                    b.timestamps
                        .iter()
                        .find(|&&(o, t)| t >= ts && o >= self.log_start)
                        .map(|&(o, t)| (t, o, b.header.partition_leader_epoch))
                });
                found.unwrap_or((-1, -1, -1))
            }
        }
    }

    fn epoch_of(&self, offset: i64) -> i32 {
        self.batches()
            .find(|b| b.header.contains(offset))
            .map_or(self.leader_epoch, |b| b.header.partition_leader_epoch)
    }

    fn take_injected_error(&mut self) -> Option<i16> {
        let (code, left) = self.error_fetches.as_mut()?;
        let code = *code;
        *left -= 1;
        if *left == 0 {
            self.error_fetches = None;
        }
        Some(code)
    }

    /// Applies the armed corrupt / partial faults to a data-carrying answer.
    fn apply_data_faults(&mut self, records: &mut Vec<u8>) {
        if self.corrupt_fetches > 0 {
            self.corrupt_fetches -= 1;
            corrupt_first_batch(records);
        }
        if self.partial_fetches > 0 {
            self.partial_fetches -= 1;
            cut_last_batch(records);
        }
    }
}

fn be_i64_at(b: &[u8], at: usize) -> i64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(-1, i64::from_be_bytes)
}

/// A fresh topic id: non-zero, different from `previous`, mixed from `seed` and the clock.
/// Like Kafka's `Uuid.randomUuid`, its text form never starts with '-'.
fn new_topic_id(seed: u64, previous: [u8; 16]) -> [u8; 16] {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = seed
        ^ nanos.rotate_left(17)
        ^ u64::from_be_bytes(previous[..8].try_into().unwrap_or_default());
    let mut next = || {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    loop {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&next().to_be_bytes());
        id[8..].copy_from_slice(&next().to_be_bytes());
        id[0] &= 0x7f;
        if id != [0; 16] && id != previous {
            return id;
        }
    }
}

/// Inverts one byte in the middle of the first batch's records (covered by the CRC-32C).
fn corrupt_first_batch(records: &mut [u8]) {
    let Ok(h) = BatchHeader::parse(records, usize::MAX) else {
        return;
    };
    let at = V2_HEADER_SIZE + h.size_in_bytes.saturating_sub(V2_HEADER_SIZE) / 2;
    if at < h.size_in_bytes
        && let Some(b) = records.get_mut(at)
    {
        *b ^= 0xff;
    }
}

/// Cuts the record set halfway through its last batch.
fn cut_last_batch(records: &mut Vec<u8>) {
    let mut pos = 0;
    let mut last = None;
    while let Some(Ok(h)) = records
        .get(pos..)
        .map(|r| BatchHeader::parse(r, usize::MAX))
    {
        last = Some((pos, h.size_in_bytes));
        pos += h.size_in_bytes;
    }
    if let Some((start, size)) = last {
        records.truncate(start + size / 2);
    }
}

/// One partition's fetch answer, owning its records until the response is encoded.
struct FetchAnswer {
    partition: i32,
    error: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start: i64,
    aborted: Option<Vec<AbortedTransaction>>,
    diverging: Option<DivergingEpoch>,
    records: Vec<u8>,
}

impl FetchAnswer {
    /// Whether the answer is worth sending without waiting for more data.
    fn is_complete(&self) -> bool {
        !self.records.is_empty() || self.error != 0 || self.diverging.is_some()
    }
}

impl State {
    fn log(&self, partition: i32) -> Option<&PartitionLog> {
        usize::try_from(partition)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }

    fn log_mut(&mut self, partition: i32) -> Option<&mut PartitionLog> {
        usize::try_from(partition)
            .ok()
            .and_then(|i| self.partitions.get_mut(i))
    }

    /// The versions this leader serves for `api` (the intersection of what it advertises and
    /// what the codec speaks).
    fn served_versions(&self, api: ApiKey) -> (i16, i16) {
        match api {
            ApiKey::Fetch => (self.fetch_versions.0.max(4), self.fetch_versions.1.min(12)),
            ApiKey::ApiVersions => (0, self.api_versions_max),
            other => other.supported(),
        }
    }

    fn answer_fetch_partition(
        &mut self,
        topic: &str,
        p: &FetchPartition,
        version: i16,
        isolation_level: i8,
    ) -> FetchAnswer {
        let mut answer = FetchAnswer {
            partition: p.partition,
            error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start: -1,
            aborted: None,
            diverging: None,
            records: Vec::new(),
        };
        if topic != self.topic {
            return answer;
        }
        let Some(log) = self.log_mut(p.partition) else {
            return answer;
        };
        answer.error = ErrorCode::NONE.0;
        answer.high_watermark = log.high_watermark();
        answer.last_stable_offset = log.last_stable_offset();
        answer.log_start = log.log_start;
        if let Some(code) = log.take_injected_error() {
            answer.error = code;
            return answer;
        }
        if version >= 12 && p.last_fetched_epoch >= 0 {
            let (epoch, end_offset) = log.end_offset_for(p.last_fetched_epoch);
            if epoch < 0 || end_offset < 0 || p.fetch_offset < log.log_start {
                answer.error = ErrorCode::OFFSET_OUT_OF_RANGE.0;
                return answer;
            }
            if epoch < p.last_fetched_epoch || end_offset < p.fetch_offset {
                answer.diverging = Some(DivergingEpoch { epoch, end_offset });
                return answer;
            }
        }
        if p.fetch_offset < log.log_start || p.fetch_offset > log.log_end {
            answer.error = ErrorCode::OFFSET_OUT_OF_RANGE.0;
            return answer;
        }
        let committed = isolation_level == 1;
        let below = if committed {
            answer.last_stable_offset
        } else {
            i64::MAX
        };
        let data = log.read(p.fetch_offset, p.partition_max_bytes, below);
        if committed {
            answer.aborted = Some(log.aborted_in(p.fetch_offset, data.end));
        }
        answer.records = data.bytes;
        if !answer.records.is_empty() {
            log.apply_data_faults(&mut answer.records);
        }
        answer
    }

    fn answer_fetch(
        &mut self,
        req: &FetchRequest,
        version: i16,
    ) -> Vec<(String, Vec<FetchAnswer>)> {
        req.topics
            .iter()
            .map(|(topic, parts)| {
                let answers = parts
                    .iter()
                    .map(|p| self.answer_fetch_partition(topic, p, version, req.isolation_level))
                    .collect();
                (topic.clone(), answers)
            })
            .collect()
    }
}

impl TestLeader {
    /// Starts a leader for `topic` with `partitions` empty partitions on 127.0.0.1, any port.
    pub fn start(topic: &str, partitions: i32) -> TestLeader {
        let listener = TcpListener::bind("127.0.0.1:0").expect("test leader: bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("test leader: local address")
            .port();
        let state = State {
            topic: topic.to_string(),
            topic_id: new_topic_id(u64::from(port), [0; 16]),
            cluster_id: Some(CLUSTER_ID.to_string()),
            partitions: (0..partitions.max(0))
                .map(|_| PartitionLog::new())
                .collect(),
            fetch_versions: (4, 12),
            api_versions_max: 3,
            drop_requests: 0,
            silent_api: None,
            closing_api: None,
            garbage_fetches: 0,
            drip: None,
            garbage_served: 0,
            fetch_requests: 0,
            sessions_enabled: false,
            sessions: HashMap::new(),
            next_session_id: 1,
            reject_epochs: 0,
            seen: Vec::new(),
        };
        let shared = Arc::new(Shared {
            port,
            state: Mutex::new(state),
            appended: Condvar::new(),
            stopping: AtomicBool::new(false),
            next_connection_id: AtomicU64::new(0),
            connections: Mutex::new(HashMap::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_thread = thread::Builder::new()
            .name("test-leader-accept".into())
            .spawn(move || accept_loop(accept_shared, listener))
            .expect("test leader: spawn accept thread");
        TestLeader {
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.shared.port)
    }

    fn with_log<R>(&self, partition: i32, f: impl FnOnce(&mut PartitionLog) -> R) -> R {
        let mut state = self.shared.state();
        let n = state.partitions.len();
        let log = state
            .log_mut(partition)
            .unwrap_or_else(|| panic!("test leader has partitions 0..{n}, not {partition}"));
        f(log)
    }

    /// Appends `records` records in batches of `records_per_batch` at the current leader epoch,
    /// and wakes fetches waiting for data.
    pub fn append(&self, partition: i32, records: usize, records_per_batch: usize) {
        self.with_log(partition, |log| {
            log.append(partition, records, records_per_batch)
        });
        self.shared.appended.notify_all();
    }

    /// Appends one prebuilt batch as it is (see `batches.rs`), at any epoch (a higher one
    /// becomes the leader epoch, starting at its base offset), after a gap if its base offset
    /// is above the log end; the log end becomes its last offset + 1. Panics unless its header
    /// parses and it starts at or above the log end.
    pub fn append_batch(&self, partition: i32, bytes: Vec<u8>) {
        self.with_log(partition, |log| log.append_batch(bytes));
        self.shared.appended.notify_all();
    }

    /// Appends `bytes` unchecked: fetches serve them verbatim after the partition's earlier
    /// bytes, to any fetch from an offset at or below the current log end; nothing else moves.
    pub fn append_raw(&self, partition: i32, bytes: Vec<u8>) {
        self.with_log(partition, |log| log.append_raw(bytes));
        self.shared.appended.notify_all();
    }

    /// Starts the (still empty) partition at `offset`: log start = log end = `offset`, the
    /// current epoch beginning there. Panics if anything was appended.
    pub fn set_log_start(&self, partition: i32, offset: i64) {
        self.with_log(partition, |log| log.set_log_start(offset));
    }

    /// Overrides the high watermark that Fetch and ListOffsets report (`None`: the log end).
    /// The data a fetch serves is not capped by it.
    pub fn set_high_watermark(&self, partition: i32, high_watermark: Option<i64>) {
        self.with_log(partition, |log| log.high_watermark = high_watermark);
        self.shared.appended.notify_all();
    }

    /// The high watermark reported: the override, else the log end.
    pub fn high_watermark(&self, partition: i32) -> i64 {
        self.with_log(partition, |log| log.high_watermark())
    }

    /// The first offset of the oldest open transaction, capped at the high watermark.
    pub fn last_stable_offset(&self, partition: i32) -> i64 {
        self.with_log(partition, |log| log.last_stable_offset())
    }

    /// The cluster id Metadata v2+ reports (default [`CLUSTER_ID`]); `None` reports null.
    pub fn set_cluster_id(&self, cluster_id: Option<&str>) {
        self.shared.state().cluster_id = cluster_id.map(str::to_string);
    }

    /// The topic id Metadata v10+ reports.
    pub fn topic_id(&self) -> [u8; 16] {
        self.shared.state().topic_id
    }

    /// Sets the topic id; all zero makes a leader that knows no topic ids.
    pub fn set_topic_id(&self, topic_id: [u8; 16]) {
        self.shared.state().topic_id = topic_id;
    }

    /// Deletes the topic and creates it again under the same name with `partitions` partitions:
    /// a new non-zero topic id, every partition empty from offset 0 at epoch 0 with no armed
    /// fault. Timestamps go on rising and `served_offsets` keeps its history.
    pub fn recreate_topic(&self, partitions: i32) {
        let mut state = self.shared.state();
        let old = std::mem::take(&mut state.partitions);
        let seed = u64::from(self.shared.port) ^ (old.len() as u64).rotate_left(32);
        state.topic_id = new_topic_id(seed, state.topic_id);
        let mut old = old.into_iter();
        state.partitions = (0..partitions.max(0))
            .map(|_| {
                let mut log = PartitionLog::new();
                if let Some(prev) = old.next() {
                    log.next_timestamp = prev.next_timestamp;
                    log.served_offsets = prev.served_offsets;
                }
                log
            })
            .collect();
        drop(state);
        self.shared.appended.notify_all();
    }

    /// Every batch of the partition, concatenated, exactly as fetches serve them.
    pub fn log_bytes(&self, partition: i32) -> Vec<u8> {
        self.with_log(partition, |log| log.log_bytes())
    }

    pub fn log_start(&self, partition: i32) -> i64 {
        self.with_log(partition, |log| log.log_start)
    }

    /// The log end offset: the last offset of the last batch + 1.
    pub fn log_end(&self, partition: i32) -> i64 {
        self.with_log(partition, |log| log.log_end)
    }

    /// Moves the log start up to `offset` (at most the log end; never down) and drops the
    /// batches that end before it. A batch holding `offset` stays, as in Kafka.
    pub fn delete_records_before(&self, partition: i32, offset: i64) {
        self.with_log(partition, |log| log.delete_records_before(offset));
    }

    /// Drops every batch whose last offset is ≥ `offset` (the log end becomes the base of the
    /// first batch dropped) and raises the leader epoch by one, starting at the new log end.
    pub fn truncate_and_bump_epoch(&self, partition: i32, offset: i64) {
        self.with_log(partition, |log| log.truncate_and_bump_epoch(offset));
    }

    pub fn leader_epoch(&self, partition: i32) -> i32 {
        self.with_log(partition, |log| log.leader_epoch)
    }

    /// The next `n` fetch answers carrying data for `partition` get a corrupt first batch.
    pub fn corrupt_next_fetches(&self, partition: i32, n: usize) {
        self.with_log(partition, |log| log.corrupt_fetches = n);
    }

    /// The next `n` fetch answers carrying data for `partition` end inside their last batch.
    pub fn partial_next_fetches(&self, partition: i32, n: usize) {
        self.with_log(partition, |log| log.partial_fetches = n);
    }

    /// The next `n` fetch answers for `partition` carry `error_code` and no records.
    pub fn error_next_fetches(&self, partition: i32, error_code: i16, n: usize) {
        self.with_log(partition, |log| {
            log.error_fetches = (n > 0).then_some((error_code, n));
        });
    }

    /// Every request of API `api_key` is read and never answered, the connection left open
    /// (a broker that hangs); `None` ends that.
    pub fn silence_api(&self, api_key: Option<i16>) {
        self.shared.state().silent_api = api_key;
    }

    /// Every request of API `api_key` closes its connection unanswered; `None` ends that.
    pub fn close_on_api(&self, api_key: Option<i16>) {
        self.shared.state().closing_api = api_key;
    }

    /// The next `n` requests (any API, any connection) close their connection unanswered.
    pub fn drop_next_requests(&self, n: usize) {
        self.shared.state().drop_requests = n;
    }

    /// The next `n` Fetch requests get a well-framed answer with a malformed body.
    /// The next `n` Fetch requests that name `partition` are answered with a frame header
    /// announcing `announced` bytes, then one byte every 100 ms for as long as the client
    /// listens (a slow or hostile broker). `n = 0` ends it.
    pub fn drip_next_fetches(&self, partition: i32, announced: i32, n: usize) {
        self.shared.state().drip = (n > 0).then_some((partition, announced, n));
    }

    pub fn garbage_next_fetches(&self, n: usize) {
        self.shared.state().garbage_fetches = n;
    }

    /// The Fetch range advertised in ApiVersions (default 4..=12). Requests outside it, or
    /// outside 4..=12, close the connection.
    pub fn set_fetch_versions(&self, min: i16, max: i16) {
        self.shared.state().fetch_versions = (min, max);
    }

    /// The highest ApiVersions version answered normally (default and at most 3); a request
    /// above it gets the error-35 v0 answer.
    pub fn set_api_versions_max(&self, max: i16) {
        self.shared.state().api_versions_max = max.clamp(0, 3);
    }

    /// Fetch requests answered so far (dropped ones do not count; garbage answers do).
    pub fn fetch_requests(&self) -> usize {
        self.shared.state().fetch_requests
    }

    /// Turns KIP-227 fetch sessions on or off (off by default; see the module documentation).
    /// Turning them off drops every session.
    pub fn enable_fetch_sessions(&self, on: bool) {
        let mut state = self.shared.state();
        state.sessions_enabled = on;
        if !on {
            state.sessions.clear();
        }
    }

    /// Drops every session: the next incremental fetch on each connection gets
    /// FETCH_SESSION_ID_NOT_FOUND.
    pub fn forget_fetch_sessions(&self) {
        self.shared.state().sessions.clear();
    }

    /// The next `n` incremental fetches (on any connection) get INVALID_FETCH_SESSION_EPOCH.
    pub fn reject_next_session_epochs(&self, n: usize) {
        self.shared.state().reject_epochs = n;
    }

    /// The sessions open now, one per connection at most.
    pub fn fetch_sessions_open(&self) -> usize {
        self.shared.state().sessions.len()
    }

    /// Every Fetch request answered so far, oldest first.
    pub fn seen_fetches(&self) -> Vec<SeenFetch> {
        self.shared.state().seen.clone()
    }

    /// The Fetch requests answered after the first `from` (a count from [`Self::seen_fetches`]).
    pub fn seen_fetches_since(&self, from: usize) -> Vec<SeenFetch> {
        self.shared
            .state()
            .seen
            .get(from..)
            .map(<[SeenFetch]>::to_vec)
            .unwrap_or_default()
    }

    /// The fetch offsets asked for `partition`, in order, one per answered Fetch request.
    pub fn served_offsets(&self, partition: i32) -> Vec<i64> {
        self.with_log(partition, |log| log.served_offsets.clone())
    }
}

impl Drop for TestLeader {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.appended.notify_all();
        // Wake the accept loop so it sees the flag; if even that fails, leave the thread be.
        let woke = TcpStream::connect(("127.0.0.1", self.shared.port)).is_ok();
        if let Some(t) = self.accept_thread.take()
            && woke
        {
            let _ = t.join();
        }
        for (_, conn) in self.shared.connections().drain() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        let id = shared.next_connection_id.fetch_add(1, Ordering::SeqCst);
        if let Ok(handle) = stream.try_clone() {
            shared.connections().insert(id, handle);
        }
        let conn_shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("test-leader-conn-{id}"))
            .spawn(move || serve_connection(conn_shared, stream, id));
        if spawned.is_err() {
            shared.connections().remove(&id);
        }
    }
}

fn serve_connection(shared: Arc<Shared>, mut stream: TcpStream, id: u64) {
    let _ = stream.set_nodelay(true);
    while let Some(request) = read_frame(&mut stream) {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        {
            let mut state = shared.state();
            if state.drop_requests > 0 {
                state.drop_requests -= 1;
                break;
            }
            let key = request.get(..2).map(|k| i16::from_be_bytes([k[0], k[1]]));
            if state.closing_api.is_some() && key == state.closing_api {
                break;
            }
            if state.silent_api.is_some() && key == state.silent_api {
                // Hang: read on (so the client's later requests do not fail), answer nothing.
                drop(state);
                while read_frame(&mut stream).is_some() {}
                break;
            }
            if let Some((partition, announced, left)) = state.drip
                && key == Some(ApiKey::Fetch.key())
                && fetch_names_partition(&request, partition)
            {
                state.drip = (left > 1).then_some((partition, announced, left - 1));
                drop(state);
                let _ = stream.write_all(&announced.to_be_bytes());
                while !shared.stopping.load(Ordering::SeqCst) && stream.write_all(&[0]).is_ok() {
                    thread::sleep(Duration::from_millis(100));
                }
                break;
            }
        }
        let Some(response) = handle_request(&shared, &request, id) else {
            break;
        };
        if stream.write_all(&response).is_err() {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    shared.state().sessions.remove(&id);
    shared.connections().remove(&id);
}

/// Whether a Fetch request frame names `partition` (of any topic).
fn fetch_names_partition(frame: &[u8], partition: i32) -> bool {
    let mut r = Reader::new(frame);
    let (Ok(_), Ok(version), Ok(_)) = (r.i16("key"), r.i16("version"), r.i32("correlation")) else {
        return false;
    };
    if r.nullable_string(false, "client_id").is_err() {
        return false;
    }
    if version >= 12 && r.skip_tagged_fields("header tags").is_err() {
        return false;
    }
    let Some(body) = frame.get(r.position()..) else {
        return false;
    };
    fetch::decode_request(body, version).is_ok_and(|req| {
        req.topics
            .iter()
            .any(|(_, ps)| ps.iter().any(|p| p.partition == partition))
    })
}

/// Reads one size-prefixed request; `None` on EOF, I/O error or an out-of-bounds size.
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let size = i32::from_be_bytes(size);
    if !(0..=MAX_REQUEST_BYTES).contains(&size) {
        return None;
    }
    let mut frame = vec![0u8; usize::try_from(size).ok()?];
    stream.read_exact(&mut frame).ok()?;
    Some(frame)
}

fn api_from_key(key: i16) -> Option<ApiKey> {
    ApiKey::ALL.into_iter().find(|api| api.key() == key)
}

/// Answers one request frame with a whole response frame, or `None` to close the connection.
fn handle_request(shared: &Shared, frame: &[u8], connection: u64) -> Option<Vec<u8>> {
    let mut r = Reader::new(frame);
    let api_key = r.i16("api_key").ok()?;
    let version = r.i16("api_version").ok()?;
    let correlation_id = r.i32("correlation_id").ok()?;
    r.nullable_string(false, "client_id").ok()?;
    let api = api_from_key(api_key)?;
    if api == ApiKey::ApiVersions {
        // The body is not needed, and a version we do not know must still be answered.
        let body = api_versions_body(&shared.state(), version);
        return Some(frame_response(correlation_id, false, &body));
    }
    let (min, max) = shared.state().served_versions(api);
    if !(min..=max).contains(&version) {
        return None;
    }
    let flexible = api.is_flexible(version);
    if flexible {
        r.skip_tagged_fields("request header tags").ok()?;
    }
    let body = frame.get(r.position()..)?;
    let answer = match api {
        ApiKey::Fetch => handle_fetch(shared, body, version, connection),
        ApiKey::Metadata => handle_metadata(shared, body, version),
        ApiKey::ListOffsets => handle_list_offsets(shared, body, version),
        ApiKey::OffsetForLeaderEpoch => handle_offset_for_leader_epoch(shared, body, version),
        // Not advertised: a plaintext leader without SASL, and a leader that is no
        // coordinator or controller, closes the connection.
        _ => return None,
    };
    Some(frame_response(correlation_id, flexible, &answer.ok()?))
}

/// Size, correlation id, header tags when `header_tags`, body.
fn frame_response(correlation_id: i32, header_tags: bool, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::new();
    w.i32(0).i32(correlation_id).empty_tags(header_tags);
    w.buf.extend_from_slice(body);
    let size = (w.buf.len() - 4) as i32;
    if let Some(s) = w.buf.get_mut(..4) {
        s.copy_from_slice(&size.to_be_bytes());
    }
    w.buf
}

fn api_versions_body(state: &State, version: i16) -> Vec<u8> {
    let mut w = Writer::new();
    let top = state.api_versions_max;
    if !(0..=top).contains(&version) {
        // Kafka's answer to an ApiVersions version it does not know: a v0 body.
        w.i16(ErrorCode::UNSUPPORTED_VERSION.0)
            .i32(1)
            .i16(ApiKey::ApiVersions.key())
            .i16(0)
            .i16(top);
        return w.buf;
    }
    let flexible = version >= 3;
    let (fetch_min, fetch_max) = state.fetch_versions;
    let apis = [
        (ApiKey::Fetch.key(), fetch_min, fetch_max),
        (ApiKey::ListOffsets.key(), 1, 7),
        (ApiKey::Metadata.key(), 1, 12),
        (ApiKey::ApiVersions.key(), 0, top),
        (ApiKey::OffsetForLeaderEpoch.key(), 2, 4),
    ];
    w.i16(0).array_len(apis.len(), flexible);
    for (key, min, max) in apis {
        w.i16(key).i16(min).i16(max).empty_tags(flexible);
    }
    if version >= 1 {
        w.i32(0);
    }
    w.empty_tags(flexible);
    w.buf
}

/// How a Fetch request is answered, after its session fields were read.
enum SessionMode {
    /// Every partition named, session id 0.
    Sessionless,
    /// Every partition named; the connection's (new) session gets their answers.
    Full(i32),
    /// The session's partitions that have something to say.
    Incremental(i32),
    /// A top-level error, no partitions.
    Refused(ErrorCode),
}

impl State {
    /// Reads a request's session fields against the connection's session (see the module
    /// documentation) and updates the session.
    fn session_mode(&mut self, connection: u64, req: &FetchRequest, version: i16) -> SessionMode {
        if !self.sessions_enabled || version < 7 {
            return SessionMode::Sessionless;
        }
        match req.session_epoch {
            e if e < 0 => {
                if req.session_id != 0
                    && self
                        .sessions
                        .get(&connection)
                        .is_some_and(|s| s.id == req.session_id)
                {
                    self.sessions.remove(&connection);
                }
                SessionMode::Sessionless
            }
            0 => {
                let id = self.next_session_id;
                self.next_session_id = if id == i32::MAX { 1 } else { id + 1 };
                let partitions = req
                    .topics
                    .iter()
                    .flat_map(|(t, ps)| {
                        ps.iter().map(move |p| {
                            let cached = CachedPartition {
                                req: p.clone(),
                                answered: None,
                            };
                            ((t.clone(), p.partition), cached)
                        })
                    })
                    .collect();
                let session = LeaderSession {
                    id,
                    next_epoch: 1,
                    partitions,
                };
                self.sessions.insert(connection, session);
                SessionMode::Full(id)
            }
            epoch => {
                let Some(session) = self
                    .sessions
                    .get_mut(&connection)
                    .filter(|s| s.id == req.session_id)
                else {
                    return SessionMode::Refused(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
                };
                if self.reject_epochs > 0 || epoch != session.next_epoch {
                    self.reject_epochs = self.reject_epochs.saturating_sub(1);
                    return SessionMode::Refused(ErrorCode::INVALID_FETCH_SESSION_EPOCH);
                }
                session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
                for (t, ps) in &req.forgotten {
                    for p in ps {
                        session.partitions.remove(&(t.clone(), *p));
                    }
                }
                for (t, ps) in &req.topics {
                    for p in ps {
                        let key = (t.clone(), p.partition);
                        match session.partitions.get_mut(&key) {
                            Some(c) => c.req = p.clone(),
                            None => {
                                let cached = CachedPartition {
                                    req: p.clone(),
                                    answered: None,
                                };
                                session.partitions.insert(key, cached);
                            }
                        }
                    }
                }
                SessionMode::Incremental(session.id)
            }
        }
    }

    /// The answer to an incremental fetch: the session's partitions with something to say.
    fn answer_incremental(
        &mut self,
        connection: u64,
        version: i16,
        isolation_level: i8,
    ) -> Vec<(String, Vec<FetchAnswer>)> {
        let Some(session) = self.sessions.remove(&connection) else {
            return Vec::new();
        };
        let mut topics: Vec<(String, Vec<FetchAnswer>)> = Vec::new();
        for ((topic, _), cached) in &session.partitions {
            let a = self.answer_fetch_partition(topic, &cached.req, version, isolation_level);
            let news =
                cached.answered != Some((a.high_watermark, a.last_stable_offset, a.log_start));
            if !(a.is_complete() || news) {
                continue;
            }
            match topics.last_mut() {
                Some((t, answers)) if t == topic => answers.push(a),
                _ => topics.push((topic.clone(), vec![a])),
            }
        }
        self.sessions.insert(connection, session);
        topics
    }

    /// Remembers what the connection's session was answered (what the next incremental
    /// answer compares with).
    fn note_answered(&mut self, connection: u64, answers: &[(String, Vec<FetchAnswer>)]) {
        let Some(session) = self.sessions.get_mut(&connection) else {
            return;
        };
        for (topic, parts) in answers {
            for a in parts {
                if let Some(c) = session.partitions.get_mut(&(topic.clone(), a.partition)) {
                    c.answered = Some((a.high_watermark, a.last_stable_offset, a.log_start));
                }
            }
        }
    }
}

fn handle_fetch(
    shared: &Shared,
    body: &[u8],
    version: i16,
    connection: u64,
) -> DecodeResult<Vec<u8>> {
    let req = fetch::decode_request(body, version)?;
    let mut state = shared.state();
    state.fetch_requests += 1;
    for (topic, parts) in &req.topics {
        if *topic != state.topic {
            continue;
        }
        for p in parts {
            if let Some(log) = state.log_mut(p.partition) {
                log.served_offsets.push(p.fetch_offset);
            }
        }
    }
    let mut seen = SeenFetch {
        connection,
        version,
        session_id: req.session_id,
        session_epoch: req.session_epoch,
        partitions: req
            .topics
            .iter()
            .flat_map(|(_, ps)| ps.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect(),
        forgotten: req
            .forgotten
            .iter()
            .flat_map(|(_, ps)| ps.clone())
            .collect(),
        error: 0,
        response_session_id: 0,
        answered: Vec::new(),
    };
    if state.garbage_fetches > 0 {
        state.garbage_fetches -= 1;
        let kind = state.garbage_served % 2;
        state.garbage_served += 1;
        seen.error = -1;
        record_seen(&mut state, seen);
        return Ok(garbage_fetch_body(version, &state.topic, kind));
    }
    let mode = state.session_mode(connection, &req, version);
    let (error, session_id) = match mode {
        SessionMode::Sessionless => (ErrorCode::NONE, 0),
        SessionMode::Full(id) | SessionMode::Incremental(id) => (ErrorCode::NONE, id),
        SessionMode::Refused(code) => (code, 0),
    };
    let wait = Duration::from_millis(req.max_wait_ms.clamp(0, MAX_EMPTY_FETCH_WAIT_MS) as u64);
    let deadline = Instant::now() + wait;
    let answers = loop {
        let answers = match mode {
            SessionMode::Refused(_) => break Vec::new(),
            SessionMode::Incremental(_) => {
                state.answer_incremental(connection, version, req.isolation_level)
            }
            SessionMode::Sessionless | SessionMode::Full(_) => state.answer_fetch(&req, version),
        };
        // An incremental answer lists only partitions with news: any one makes it complete.
        let complete = match mode {
            SessionMode::Incremental(_) => answers.iter().any(|(_, a)| !a.is_empty()),
            _ => answers
                .iter()
                .flat_map(|(_, a)| a)
                .any(FetchAnswer::is_complete),
        };
        let now = Instant::now();
        if complete || now >= deadline || shared.stopping.load(Ordering::SeqCst) {
            break answers;
        }
        state = shared
            .appended
            .wait_timeout(state, deadline - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    };
    state.note_answered(connection, &answers);
    seen.error = error.0;
    seen.response_session_id = session_id;
    seen.answered = answers
        .iter()
        .flat_map(|(_, ps)| ps.iter().map(|a| a.partition))
        .collect();
    record_seen(&mut state, seen);
    drop(state);
    let resp = FetchResponse {
        error,
        topics: answers
            .iter()
            .map(|(topic, parts)| {
                let parts = parts
                    .iter()
                    .map(|a| FetchPartitionResponse {
                        partition: a.partition,
                        error: ErrorCode(a.error),
                        high_watermark: a.high_watermark,
                        last_stable_offset: a.last_stable_offset,
                        log_start_offset: a.log_start,
                        aborted_transactions: a.aborted.clone(),
                        diverging_epoch: a.diverging,
                        current_leader: None,
                        records: &a.records,
                    })
                    .collect();
                (topic.clone(), parts)
            })
            .collect(),
        session_id,
    };
    let mut w = Writer::new();
    fetch::encode_response(&mut w, version, &resp);
    Ok(w.buf)
}

fn record_seen(state: &mut State, seen: SeenFetch) {
    if state.seen.len() < MAX_SEEN_FETCHES {
        state.seen.push(seen);
    }
}

/// A Fetch body that is malformed in one of two ways (see the module documentation).
fn garbage_fetch_body(version: i16, topic: &str, kind: usize) -> Vec<u8> {
    let flexible = version >= 12;
    let mut w = Writer::new();
    w.i32(0);
    if version >= 7 {
        w.i16(0).i32(0);
    }
    w.array_len(1, flexible).string(Some(topic), flexible);
    if kind == 0 {
        if flexible {
            w.unsigned_varint(0x0fff_ffff);
        } else {
            w.i32(-5);
        }
        return w.buf;
    }
    w.array_len(1, flexible);
    w.i32(0).i16(0).i64(0).i64(0);
    if version >= 5 {
        w.i64(0);
    }
    if flexible {
        w.unsigned_varint(0);
    } else {
        w.i32(-1);
    }
    if version >= 11 {
        w.i32(-1);
    }
    if flexible {
        w.unsigned_varint(1001);
    } else {
        w.i32(1000);
    }
    w.buf.extend_from_slice(&[0, 0, 0]);
    w.buf
}

fn handle_metadata(shared: &Shared, body: &[u8], version: i16) -> DecodeResult<Vec<u8>> {
    let requested: Option<Vec<Option<String>>> = metadata::decode_request(body, version)?
        .map(|topics| topics.into_iter().map(|t| t.name).collect());
    let state = shared.state();
    let ours = || TopicMetadata {
        error: ErrorCode::NONE,
        name: state.topic.clone(),
        topic_id: state.topic_id,
        partitions: (0..)
            .zip(&state.partitions)
            .map(|(partition, log)| PartitionMetadata {
                error: ErrorCode::NONE,
                partition,
                leader_id: NODE_ID,
                leader_epoch: log.leader_epoch,
                replicas: vec![NODE_ID],
            })
            .collect(),
    };
    let topics = match requested {
        None => vec![ours()],
        Some(names) => names
            .into_iter()
            .map(|name| match name {
                Some(name) if name == state.topic => ours(),
                other => TopicMetadata {
                    error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    name: other.unwrap_or_default(),
                    topic_id: [0; 16],
                    partitions: Vec::new(),
                },
            })
            .collect(),
    };
    let resp = MetadataResponse {
        brokers: vec![Broker {
            node_id: NODE_ID,
            host: "127.0.0.1".into(),
            port: i32::from(shared.port),
        }],
        cluster_id: state.cluster_id.clone(),
        topics,
    };
    let mut w = Writer::new();
    metadata::encode_response(&mut w, version, &resp);
    Ok(w.buf)
}

fn handle_list_offsets(shared: &Shared, body: &[u8], version: i16) -> DecodeResult<Vec<u8>> {
    let req = list_offsets::decode_request(body, version)?;
    let state = shared.state();
    let topics = map_partitions(req.topics, |name, p| {
        let partition = p.partition;
        match state.log(partition).filter(|_| name == state.topic) {
            Some(log) => {
                let (timestamp, offset, leader_epoch) =
                    log.offset_for_timestamp(p.timestamp, req.isolation_level);
                ListOffsetsPartitionResponse {
                    partition,
                    error: ErrorCode::NONE,
                    timestamp,
                    offset,
                    leader_epoch: if version >= 4 { leader_epoch } else { -1 },
                }
            }
            None => ListOffsetsPartitionResponse {
                partition,
                error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                timestamp: -1,
                offset: -1,
                leader_epoch: -1,
            },
        }
    });
    let mut w = Writer::new();
    list_offsets::encode_response(&mut w, version, &topics);
    Ok(w.buf)
}

fn handle_offset_for_leader_epoch(
    shared: &Shared,
    body: &[u8],
    version: i16,
) -> DecodeResult<Vec<u8>> {
    let req = offset_for_leader_epoch::decode_request(body, version)?;
    let state = shared.state();
    let topics = map_partitions(req, |name, p| {
        let partition = p.partition;
        match state.log(partition).filter(|_| name == state.topic) {
            Some(log) => {
                let (leader_epoch, end_offset) = log.end_offset_for(p.leader_epoch);
                EpochEndOffset {
                    error: ErrorCode::NONE,
                    partition,
                    leader_epoch,
                    end_offset,
                }
            }
            None => EpochEndOffset {
                error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                partition,
                leader_epoch: -1,
                end_offset: -1,
            },
        }
    });
    let mut w = Writer::new();
    offset_for_leader_epoch::encode_response(&mut w, version, &topics);
    Ok(w.buf)
}
