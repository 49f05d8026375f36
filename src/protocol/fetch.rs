//! Fetch (key 1), v4–13; flexible from v12. v13 names topics by topic id (UUID) instead of
//! name, in the request and the response: a leader whose topic was deleted and re-created
//! answers UNKNOWN_TOPIC_ID instead of serving the new topic's data.
//!
//! Request, wire order: ReplicaId INT32 · MaxWaitMs INT32 · MinBytes INT32 · MaxBytes INT32 ·
//! IsolationLevel INT8 · SessionId INT32 (v7+) · SessionEpoch INT32 (v7+) · Topics ARRAY{Topic,
//! Partitions ARRAY{Partition INT32, CurrentLeaderEpoch INT32 (v9+), FetchOffset INT64,
//! LastFetchedEpoch INT32 (v12+), LogStartOffset INT64 (v5+), PartitionMaxBytes INT32}} ·
//! ForgottenTopicsData ARRAY (v7+) · RackId STRING (v11+) · tags (v12).
//!
//! Response, wire order: ThrottleTimeMs INT32 · ErrorCode INT16 (v7+) · SessionId INT32 (v7+) ·
//! Responses ARRAY{Topic, Partitions ARRAY{PartitionIndex INT32, ErrorCode INT16,
//! HighWatermark INT64, LastStableOffset INT64, LogStartOffset INT64 (v5+),
//! AbortedTransactions nullable ARRAY{ProducerId INT64, FirstOffset INT64},
//! PreferredReadReplica INT32 (v11+), Records, tags (v12: 0 DivergingEpoch{Epoch INT32,
//! EndOffset INT64}, 1 CurrentLeader{LeaderId INT32, LeaderEpoch INT32})}} · tags (v12).
//!
//! The decoded response borrows its records from the receive buffer: they reach the segment
//! file without a copy.

use super::codec::{DecodeResult, Reader, Writer, len_i32, len_u32};
use super::error::ErrorCode;
use super::uuid::Uuid;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    pub partition: i32,
    pub current_leader_epoch: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    pub log_start_offset: i64,
    pub partition_max_bytes: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub replica_id: i32,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub isolation_level: i8,
    pub topics: Vec<(String, Vec<FetchPartition>)>,
    /// The topic id of each topic, for v13+ (which names topics only by id). A request
    /// without an id for every topic is sent at v12 at most.
    pub topic_ids: BTreeMap<String, Uuid>,
    /// KIP-227 (v7+): id 0 with epoch -1 is a sessionless full fetch ([`SESSIONLESS`]); id 0
    /// with epoch 0 asks for a new session (a full fetch); a session's id with epochs 1, 2,
    /// … is an incremental fetch naming only what changed.
    pub session_id: i32,
    pub session_epoch: i32,
    /// Partitions leaving an incremental session (v7+; at v13+ their topics go by id).
    pub forgotten: Vec<(String, Vec<i32>)>,
}

/// The session epoch of a sessionless fetch (KIP-227's FINAL_EPOCH).
pub const SESSIONLESS: i32 = -1;
/// The session epoch of a full fetch that opens a session (KIP-227's INITIAL_EPOCH).
pub const INITIAL_EPOCH: i32 = 0;

impl FetchRequest {
    pub fn partition_count(&self) -> usize {
        self.topics.iter().map(|(_, p)| p.len()).sum()
    }

    /// Whether every topic has an id, so the request can go at v13+: the topics named, those
    /// forgotten, and — for an incremental request, which may name none — the session's,
    /// which the caller puts in `topic_ids` (an empty map means "by name").
    pub fn has_topic_ids(&self) -> bool {
        let id_of = |t: &String| self.topic_ids.get(t).is_some_and(|u| !u.is_zero());
        !self.topic_ids.is_empty()
            && self.topic_ids.values().all(|u| !u.is_zero())
            && self.topics.iter().all(|(t, _)| id_of(t))
            && self.forgotten.iter().all(|(t, _)| id_of(t))
    }

    /// topic id → topic name, to read a v13+ response.
    pub fn topic_names(&self) -> BTreeMap<Uuid, String> {
        self.topic_ids
            .iter()
            .map(|(name, id)| (*id, name.clone()))
            .collect()
    }
}

/// A request's topic: its name (≤ v12) or its id (v13+).
fn write_topic(w: &mut Writer, version: i16, req: &FetchRequest, topic: &str) {
    if version >= 13 {
        w.uuid(&req.topic_ids.get(topic).copied().unwrap_or_default().0);
    } else {
        w.string(Some(topic), version >= 12);
    }
}

/// A request's topic as [`write_topic`] writes it; at v13+ it is named by its id's text,
/// recorded in `topic_ids`.
fn read_topic(
    r: &mut Reader<'_>,
    version: i16,
    topic_ids: &mut BTreeMap<String, Uuid>,
    what: &'static str,
) -> DecodeResult<String> {
    if version >= 13 {
        let id = Uuid(r.uuid(what)?);
        topic_ids.entry(id.to_string()).or_insert(id);
        Ok(id.to_string())
    } else {
        r.string(version >= 12, what)
    }
}

pub fn encode_request(w: &mut Writer, version: i16, req: &FetchRequest) {
    let flexible = version >= 12;
    w.i32(req.replica_id)
        .i32(req.max_wait_ms)
        .i32(req.min_bytes)
        .i32(req.max_bytes);
    w.i8(req.isolation_level);
    if version >= 7 {
        w.i32(req.session_id).i32(req.session_epoch);
    }
    w.array_len(req.topics.len(), flexible);
    for (topic, parts) in &req.topics {
        write_topic(w, version, req, topic);
        w.array_len(parts.len(), flexible);
        for p in parts {
            w.i32(p.partition);
            if version >= 9 {
                w.i32(p.current_leader_epoch);
            }
            w.i64(p.fetch_offset);
            if version >= 12 {
                w.i32(p.last_fetched_epoch);
            }
            if version >= 5 {
                w.i64(p.log_start_offset);
            }
            w.i32(p.partition_max_bytes);
            w.empty_tags(flexible);
        }
        w.empty_tags(flexible);
    }
    if version >= 7 {
        w.array_len(req.forgotten.len(), flexible);
        for (topic, parts) in &req.forgotten {
            write_topic(w, version, req, topic);
            w.array_len(parts.len(), flexible);
            for p in parts {
                w.i32(*p);
            }
            w.empty_tags(flexible);
        }
    }
    if version >= 11 {
        w.string(Some(""), flexible);
    }
    w.empty_tags(flexible);
}

/// Decodes a request; the in-process test leader uses it.
pub fn decode_request(body: &[u8], version: i16) -> DecodeResult<FetchRequest> {
    let flexible = version >= 12;
    let mut r = Reader::new(body);
    let replica_id = r.i32("Fetch replica_id")?;
    let max_wait_ms = r.i32("Fetch max_wait_ms")?;
    let min_bytes = r.i32("Fetch min_bytes")?;
    let max_bytes = r.i32("Fetch max_bytes")?;
    let isolation_level = r.i8("Fetch isolation_level")?;
    let (session_id, session_epoch) = if version >= 7 {
        (r.i32("Fetch session_id")?, r.i32("Fetch session_epoch")?)
    } else {
        (0, SESSIONLESS)
    };
    let nt = r.array_count(flexible, 3, "Fetch topics")?;
    let mut topics = Vec::with_capacity(nt);
    let mut topic_ids = BTreeMap::new();
    for _ in 0..nt {
        let topic = read_topic(&mut r, version, &mut topic_ids, "Fetch topic")?;
        let np = r.array_count(flexible, 16, "Fetch partitions")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("Fetch partition")?;
            let current_leader_epoch = if version >= 9 {
                r.i32("Fetch current_leader_epoch")?
            } else {
                -1
            };
            let fetch_offset = r.i64("Fetch fetch_offset")?;
            let last_fetched_epoch = if version >= 12 {
                r.i32("Fetch last_fetched_epoch")?
            } else {
                -1
            };
            let log_start_offset = if version >= 5 {
                r.i64("Fetch log_start_offset")?
            } else {
                -1
            };
            let partition_max_bytes = r.i32("Fetch partition_max_bytes")?;
            if flexible {
                r.skip_tagged_fields("Fetch partition tags")?;
            }
            parts.push(FetchPartition {
                partition,
                current_leader_epoch,
                fetch_offset,
                last_fetched_epoch,
                log_start_offset,
                partition_max_bytes,
            });
        }
        if flexible {
            r.skip_tagged_fields("Fetch topic tags")?;
        }
        topics.push((topic, parts));
    }
    let mut forgotten = Vec::new();
    if version >= 7 {
        let nf = r.array_count(flexible, 3, "Fetch forgotten_topics_data")?;
        for _ in 0..nf {
            let topic = read_topic(&mut r, version, &mut topic_ids, "Fetch forgotten topic")?;
            let np = r.array_count(flexible, 4, "Fetch forgotten partitions")?;
            let mut parts = Vec::with_capacity(np);
            for _ in 0..np {
                parts.push(r.i32("Fetch forgotten partition")?);
            }
            if flexible {
                r.skip_tagged_fields("Fetch forgotten topic tags")?;
            }
            forgotten.push((topic, parts));
        }
    }
    Ok(FetchRequest {
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        topics,
        topic_ids,
        session_id,
        session_epoch,
        forgotten,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DivergingEpoch {
    pub epoch: i32,
    pub end_offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurrentLeader {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

/// One entry of a partition's AbortedTransactions: a transaction the producer aborted, whose
/// data starts at `first_offset` (a read_committed reader drops that producer's data from there
/// up to its ABORT marker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionResponse<'a> {
    pub partition: i32,
    pub error: ErrorCode,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// `None` (null on the wire) unless the fetch was read_committed.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    pub diverging_epoch: Option<DivergingEpoch>,
    pub current_leader: Option<CurrentLeader>,
    /// The raw record set: whole batches, possibly ending in a partial one.
    pub records: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse<'a> {
    pub error: ErrorCode,
    /// v7+: the session the leader keeps for this fetcher (0: none, sessionless).
    pub session_id: i32,
    pub topics: Vec<(String, Vec<FetchPartitionResponse<'a>>)>,
}

fn decode_tagged_partition_fields(
    tag: u32,
    value: &[u8],
    diverging: &mut Option<DivergingEpoch>,
    leader: &mut Option<CurrentLeader>,
) -> DecodeResult<()> {
    let mut v = Reader::new(value);
    match tag {
        0 => {
            let epoch = v.i32("Fetch diverging_epoch epoch")?;
            let end_offset = v.i64("Fetch diverging_epoch end_offset")?;
            v.skip_tagged_fields("Fetch diverging_epoch tags")?;
            *diverging = Some(DivergingEpoch { epoch, end_offset });
        }
        1 => {
            let leader_id = v.i32("Fetch current_leader leader_id")?;
            let leader_epoch = v.i32("Fetch current_leader leader_epoch")?;
            v.skip_tagged_fields("Fetch current_leader tags")?;
            *leader = Some(CurrentLeader {
                leader_id,
                leader_epoch,
            });
        }
        _ => {}
    }
    Ok(())
}

/// Decodes a response; at v13+ each topic is named by its id's text (see
/// [`decode_response_named`]).
pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<FetchResponse<'_>> {
    decode_response_named(body, version, &BTreeMap::new())
}

/// Decodes a response. At v13+ topics come as ids: each is named through `names` (from the
/// request's [`FetchRequest::topic_names`]); an id the request did not name is named by its
/// text, so it matches no followed topic.
pub fn decode_response_named<'a>(
    body: &'a [u8],
    version: i16,
    names: &BTreeMap<Uuid, String>,
) -> DecodeResult<FetchResponse<'a>> {
    let flexible = version >= 12;
    let mut r = Reader::new(body);
    r.i32("Fetch throttle_time_ms")?;
    let mut error = ErrorCode::NONE;
    let mut session_id = 0;
    if version >= 7 {
        error = ErrorCode(r.i16("Fetch error_code")?);
        session_id = r.i32("Fetch session_id")?;
    }
    let nt = r.array_count(flexible, 3, "Fetch responses")?;
    let mut topics = Vec::with_capacity(nt);
    for _ in 0..nt {
        let topic = if version >= 13 {
            let id = Uuid(r.uuid("Fetch response topic_id")?);
            names.get(&id).cloned().unwrap_or_else(|| id.to_string())
        } else {
            r.string(flexible, "Fetch response topic")?
        };
        let np = r.array_count(flexible, 30, "Fetch response partitions")?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            let partition = r.i32("Fetch partition_index")?;
            let error = ErrorCode(r.i16("Fetch partition error_code")?);
            let high_watermark = r.i64("Fetch high_watermark")?;
            let last_stable_offset = r.i64("Fetch last_stable_offset")?;
            let log_start_offset = if version >= 5 {
                r.i64("Fetch log_start_offset")?
            } else {
                -1
            };
            let aborted_transactions =
                match r.array_len(flexible, 16, "Fetch aborted_transactions")? {
                    None => None,
                    Some(n) => {
                        let mut aborted = Vec::with_capacity(n);
                        for _ in 0..n {
                            let producer_id = r.i64("Fetch aborted producer_id")?;
                            let first_offset = r.i64("Fetch aborted first_offset")?;
                            if flexible {
                                r.skip_tagged_fields("Fetch aborted transaction tags")?;
                            }
                            aborted.push(AbortedTransaction {
                                producer_id,
                                first_offset,
                            });
                        }
                        Some(aborted)
                    }
                };
            if version >= 11 {
                r.i32("Fetch preferred_read_replica")?;
            }
            let records = r
                .nullable_bytes(flexible, "Fetch records")?
                .unwrap_or_default();
            let mut diverging_epoch = None;
            let mut current_leader = None;
            if flexible {
                r.tagged_fields("Fetch partition tags", |tag, value| {
                    decode_tagged_partition_fields(
                        tag,
                        value,
                        &mut diverging_epoch,
                        &mut current_leader,
                    )
                })?;
            }
            parts.push(FetchPartitionResponse {
                partition,
                error,
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted_transactions,
                diverging_epoch,
                current_leader,
                records,
            });
        }
        if flexible {
            r.skip_tagged_fields("Fetch response topic tags")?;
        }
        topics.push((topic, parts));
    }
    if flexible {
        r.skip_tagged_fields("Fetch response tags")?;
    }
    r.expect_end("Fetch response")?;
    Ok(FetchResponse {
        error,
        session_id,
        topics,
    })
}

/// Encodes a response; the in-process test leader and the round-trip tests use it. At v13+
/// each topic is named by its id's text (as [`decode_request`] names it).
pub fn encode_response(w: &mut Writer, version: i16, resp: &FetchResponse<'_>) {
    encode_response_head(w, version, resp.error, resp.session_id, resp.topics.len());
    for (topic, parts) in &resp.topics {
        let id = Uuid::parse(topic).unwrap_or_default();
        encode_topic_head(w, version, topic, &id, parts.len());
        for p in parts {
            encode_partition_head(w, version, p, p.records.len());
            w.buf.extend_from_slice(p.records);
            encode_partition_tail(w, version, p);
        }
        encode_topic_tail(w, version);
    }
    encode_response_tail(w, version);
}

// A response in pieces, for a server that sends each partition's records from a file
// without copying them: head, then per topic a topic head, per partition a partition head
// (announcing `records_len` bytes), the records, a partition tail; a topic tail; the tail.

/// ThrottleTimeMs, ErrorCode and SessionId (v7+; sessionless: 0), the topic count.
pub fn encode_response_head(
    w: &mut Writer,
    version: i16,
    error: ErrorCode,
    session_id: i32,
    topics: usize,
) {
    w.i32(0);
    if version >= 7 {
        w.i16(error.0).i32(session_id);
    }
    w.array_len(topics, version >= 12);
}

/// The topic's name (≤ v12) or id (v13+), and its partition count.
pub fn encode_topic_head(w: &mut Writer, version: i16, name: &str, id: &Uuid, partitions: usize) {
    let flexible = version >= 12;
    if version >= 13 {
        w.uuid(&id.0);
    } else {
        w.string(Some(name), flexible);
    }
    w.array_len(partitions, flexible);
}

/// A partition's fields up to and including the records' length (`records_len` bytes
/// follow); `p.records` is not written.
pub fn encode_partition_head(
    w: &mut Writer,
    version: i16,
    p: &FetchPartitionResponse<'_>,
    records_len: usize,
) {
    let flexible = version >= 12;
    w.i32(p.partition)
        .i16(p.error.0)
        .i64(p.high_watermark)
        .i64(p.last_stable_offset);
    if version >= 5 {
        w.i64(p.log_start_offset);
    }
    match &p.aborted_transactions {
        None if flexible => {
            w.unsigned_varint(0);
        }
        None => {
            w.i32(-1);
        }
        Some(aborted) => {
            w.array_len(aborted.len(), flexible);
            for a in aborted {
                w.i64(a.producer_id)
                    .i64(a.first_offset)
                    .empty_tags(flexible);
            }
        }
    }
    if version >= 11 {
        w.i32(-1);
    }
    if flexible {
        w.unsigned_varint(len_u32(records_len).saturating_add(1));
    } else {
        w.i32(len_i32(records_len));
    }
}

/// A partition's tagged fields (v12+: DivergingEpoch, CurrentLeader).
pub fn encode_partition_tail(w: &mut Writer, version: i16, p: &FetchPartitionResponse<'_>) {
    if version < 12 {
        return;
    }
    let mut tags = Writer::new();
    let mut count = 0;
    if let Some(d) = p.diverging_epoch {
        tags.unsigned_varint(0)
            .unsigned_varint(13)
            .i32(d.epoch)
            .i64(d.end_offset);
        tags.unsigned_varint(0);
        count += 1;
    }
    if let Some(l) = p.current_leader {
        tags.unsigned_varint(1)
            .unsigned_varint(9)
            .i32(l.leader_id)
            .i32(l.leader_epoch);
        tags.unsigned_varint(0);
        count += 1;
    }
    w.unsigned_varint(count);
    w.buf.extend_from_slice(&tags.buf);
}

pub fn encode_topic_tail(w: &mut Writer, version: i16) {
    w.empty_tags(version >= 12);
}

pub fn encode_response_tail(w: &mut Writer, version: i16) {
    w.empty_tags(version >= 12);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ApiKey, decode_response_header, encode_request_header};

    pub(crate) fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const BATCH_C: &str = "0000000000000000000000400000000002db5e9cdd0000000000000000018bcfe568000000018bcfe56800ffffffffffffffffffffffffffff000000011c000000066b65790a76616c756500";

    #[test]
    fn v12_request_matches_reference_vector_d() {
        let req = FetchRequest {
            replica_id: 1,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 10_485_760,
            isolation_level: 0,
            topics: vec![(
                "t".into(),
                vec![FetchPartition {
                    partition: 0,
                    current_leader_epoch: 5,
                    fetch_offset: 100,
                    last_fetched_epoch: 5,
                    log_start_offset: 0,
                    partition_max_bytes: 1_048_576,
                }],
            )],
            topic_ids: BTreeMap::new(),
            session_id: 0,
            session_epoch: -1,
            forgotten: Vec::new(),
        };
        let mut w = Writer::new();
        encode_request_header(&mut w, ApiKey::Fetch, 12, 3, "follower-1");
        encode_request(&mut w, 12, &req);
        let mut framed = (w.buf.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&w.buf);
        let expect = unhex(
            "00000057 0001000c 00000003 000a 666f6c6c6f7765722d31 00 \
             00000001 000001f4 00000001 00a00000 00 00000000 ffffffff \
             02 0274 02 00000000 00000005 0000000000000064 00000005 0000000000000000 00100000 00 00 \
             01 01 00",
        );
        assert_eq!(framed, expect);
        // and the test leader reads it back
        let body = &w.buf[w.buf.len() - (expect.len() - 4 - 21)..];
        assert_eq!(decode_request(body, 12).unwrap(), req);
    }

    #[test]
    fn v12_response_matches_reference_vector_f() {
        let framed = unhex(&format!(
            "00000086 00000003 00 00000000 0000 00000000 02 0274 02 00000000 0000 \
             0000000000000001 0000000000000001 0000000000000000 00 ffffffff 4d {BATCH_C} 00 00 00"
        ));
        assert_eq!(framed.len(), 4 + 0x86);
        let mut r = Reader::new(&framed[4..]);
        assert_eq!(
            decode_response_header(&mut r, ApiKey::Fetch, 12).unwrap(),
            3
        );
        let body = &framed[4 + r.position()..];
        let resp = decode_response(body, 12).unwrap();
        let p = &resp.topics[0].1[0];
        assert_eq!(resp.topics[0].0, "t");
        assert_eq!(p.high_watermark, 1);
        assert_eq!(p.records, &unhex(BATCH_C)[..]);
        assert_eq!(p.diverging_epoch, None);
        // re-encoding gives the same bytes
        let mut w = Writer::new();
        encode_response(&mut w, 12, &resp);
        assert_eq!(w.buf, body);
    }

    #[test]
    fn session_fields_and_forgotten_partitions_round_trip_at_v7_v12_and_v13() {
        let id = Uuid([7; 16]);
        let name = id.to_string();
        for version in [7, 11, 12, 13] {
            // At v13 the decoder names topics by their id's text.
            let topic = if version >= 13 {
                name.clone()
            } else {
                "orders".to_string()
            };
            let req = FetchRequest {
                replica_id: -1,
                max_wait_ms: 500,
                min_bytes: 1,
                max_bytes: 1 << 20,
                isolation_level: 0,
                topics: vec![(
                    topic.clone(),
                    vec![FetchPartition {
                        partition: 3,
                        current_leader_epoch: 2,
                        fetch_offset: 40,
                        last_fetched_epoch: 1,
                        log_start_offset: 0,
                        partition_max_bytes: 1024,
                    }],
                )],
                topic_ids: [(topic.clone(), id)].into_iter().collect(),
                session_id: 0x1234_5678,
                session_epoch: 9,
                forgotten: vec![(topic.clone(), vec![0, 5])],
            };
            let mut w = Writer::new();
            encode_request(&mut w, version, &req);
            let back = decode_request(&w.buf, version).unwrap();
            assert_eq!((back.session_id, back.session_epoch), (0x1234_5678, 9));
            assert_eq!(back.forgotten, req.forgotten, "v{version}");
            if version >= 12 {
                // (Older versions carry no last fetched epoch, and v7–8 no leader epoch.)
                assert_eq!(back.topics, req.topics, "v{version}");
            }
            assert_eq!(back.topics[0].1[0].fetch_offset, 40);
            for cut in 0..w.buf.len() {
                let _ = decode_request(&w.buf[..cut], version);
            }
        }
        // Before v7 there is no session: sessionless on the way back.
        let mut w = Writer::new();
        let mut req = decode_request(&[0; 21], 4).unwrap();
        req.session_id = 5;
        encode_request(&mut w, 6, &req);
        let back = decode_request(&w.buf, 6).unwrap();
        assert_eq!((back.session_id, back.session_epoch), (0, SESSIONLESS));
        // The response's session id.
        let resp = FetchResponse {
            error: ErrorCode::NONE,
            session_id: 77,
            topics: vec![],
        };
        let mut w = Writer::new();
        encode_response(&mut w, 7, &resp);
        assert_eq!(decode_response(&w.buf, 7).unwrap().session_id, 77);
    }

    #[test]
    fn diverging_epoch_tag_vector_g() {
        let body = unhex(
            "00000000 0000 00000000 02 0274 02 00000000 0000 \
             0000000000000064 0000000000000064 0000000000000000 00 ffffffff 01 \
             01 00 0d 00000004 000000000000005a 00 00 00",
        );
        let resp = decode_response(&body, 12).unwrap();
        let p = &resp.topics[0].1[0];
        assert_eq!(
            p.diverging_epoch,
            Some(DivergingEpoch {
                epoch: 4,
                end_offset: 90
            })
        );
        assert!(p.records.is_empty());
    }

    #[test]
    fn v13_names_topics_by_id_in_request_and_response() {
        let id = Uuid([7; 16]);
        let req = FetchRequest {
            replica_id: -1,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 0,
            topics: vec![(
                "orders".into(),
                vec![FetchPartition {
                    partition: 0,
                    current_leader_epoch: 2,
                    fetch_offset: 10,
                    last_fetched_epoch: 2,
                    log_start_offset: 0,
                    partition_max_bytes: 1 << 20,
                }],
            )],
            topic_ids: [("orders".to_string(), id)].into(),
            session_id: 0,
            session_epoch: -1,
            forgotten: Vec::new(),
        };
        assert!(req.has_topic_ids());
        let mut w = Writer::new();
        encode_request(&mut w, 13, &req);
        // session id, epoch, then topics: count 2 (compact), the 16-byte id, no name.
        assert_eq!(&w.buf[21..23], &[0xff, 0xff]);
        assert_eq!(w.buf[25], 2);
        assert_eq!(&w.buf[26..42], &[7; 16]);
        let back = decode_request(&w.buf, 13).unwrap();
        assert_eq!(back.topics[0].0, id.to_string());
        assert_eq!(back.topics[0].1, req.topics[0].1);
        // The response comes back by id and is named through the request.
        let batch = unhex(BATCH_C);
        let resp = FetchResponse {
            error: ErrorCode::NONE,
            topics: vec![(
                id.to_string(),
                vec![FetchPartitionResponse {
                    partition: 0,
                    error: ErrorCode::NONE,
                    high_watermark: 11,
                    last_stable_offset: 11,
                    log_start_offset: 0,
                    aborted_transactions: None,
                    diverging_epoch: None,
                    current_leader: None,
                    records: &batch,
                }],
            )],
            session_id: 0,
        };
        let mut w = Writer::new();
        encode_response(&mut w, 13, &resp);
        let named = decode_response_named(&w.buf, 13, &req.topic_names()).unwrap();
        assert_eq!(named.topics[0].0, "orders");
        assert_eq!(named.topics[0].1, resp.topics[0].1);
        let unnamed = decode_response(&w.buf, 13).unwrap();
        assert_eq!(unnamed.topics[0].0, id.to_string());
        for cut in 0..w.buf.len() {
            assert!(decode_response(&w.buf[..cut], 13).is_err(), "cut {cut}");
        }
        let without = FetchRequest {
            topic_ids: BTreeMap::new(),
            ..req
        };
        assert!(!without.has_topic_ids());
    }

    #[test]
    fn every_version_roundtrips_and_every_truncation_errors() {
        let batch = unhex(BATCH_C);
        for v in 4..=12 {
            let resp = FetchResponse {
                error: ErrorCode::NONE,
                topics: vec![(
                    "orders".into(),
                    vec![FetchPartitionResponse {
                        partition: 2,
                        error: ErrorCode::NONE,
                        high_watermark: 10,
                        last_stable_offset: 10,
                        log_start_offset: if v >= 5 { 0 } else { -1 },
                        aborted_transactions: None,
                        diverging_epoch: None,
                        current_leader: None,
                        records: &batch,
                    }],
                )],
                session_id: 0,
            };
            let mut w = Writer::new();
            encode_response(&mut w, v, &resp);
            assert_eq!(decode_response(&w.buf, v).unwrap(), resp, "v{v}");
            for cut in 0..w.buf.len() {
                assert!(decode_response(&w.buf[..cut], v).is_err(), "v{v} cut {cut}");
            }
        }
    }

    #[test]
    fn aborted_transactions_roundtrip_at_every_version() {
        let batch = unhex(BATCH_C);
        let lists = [
            None,
            Some(vec![]),
            Some(vec![
                AbortedTransaction {
                    producer_id: 7,
                    first_offset: 3,
                },
                AbortedTransaction {
                    producer_id: -2,
                    first_offset: i64::MAX,
                },
            ]),
        ];
        for v in 4..=12 {
            for aborted in &lists {
                let resp = FetchResponse {
                    error: ErrorCode::NONE,
                    topics: vec![(
                        "t".into(),
                        vec![FetchPartitionResponse {
                            partition: 0,
                            error: ErrorCode::NONE,
                            high_watermark: 10,
                            last_stable_offset: 4,
                            log_start_offset: if v >= 5 { 0 } else { -1 },
                            aborted_transactions: aborted.clone(),
                            diverging_epoch: None,
                            current_leader: None,
                            records: &batch,
                        }],
                    )],
                    session_id: 0,
                };
                let mut w = Writer::new();
                encode_response(&mut w, v, &resp);
                assert_eq!(
                    decode_response(&w.buf, v).unwrap(),
                    resp,
                    "v{v} {aborted:?}"
                );
                for cut in 0..w.buf.len() {
                    assert!(decode_response(&w.buf[..cut], v).is_err(), "v{v} cut {cut}");
                }
            }
        }
        // The wire form: v11 INT32 count + entries; v12 compact count + entries with tags.
        let one = Some(vec![AbortedTransaction {
            producer_id: 1,
            first_offset: 2,
        }]);
        let part = |v: i16| {
            let resp = FetchResponse {
                error: ErrorCode::NONE,
                topics: vec![(
                    "t".into(),
                    vec![FetchPartitionResponse {
                        partition: 0,
                        error: ErrorCode::NONE,
                        high_watermark: 0,
                        last_stable_offset: 0,
                        log_start_offset: 0,
                        aborted_transactions: one.clone(),
                        diverging_epoch: None,
                        current_leader: None,
                        records: &[],
                    }],
                )],
                session_id: 0,
            };
            let mut w = Writer::new();
            encode_response(&mut w, v, &resp);
            w.buf
        };
        let entry = "0000000000000001 0000000000000002";
        assert!(
            part(11)
                .windows(20)
                .any(|s| s == unhex(&format!("00000001 {entry}")))
        );
        assert!(
            part(12)
                .windows(18)
                .any(|s| s == unhex(&format!("02 {entry} 00")))
        );
    }

    #[test]
    fn negative_partition_count_is_an_error() {
        let mut w = Writer::new();
        w.i32(0)
            .i16(0)
            .i32(0)
            .i32(1)
            .string(Some("t"), false)
            .i32(-5);
        let e = decode_response(&w.buf, 11).unwrap_err();
        assert!(e.what.contains("partitions"), "{e}");
    }
}
