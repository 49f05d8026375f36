//! Every decoder, fed valid responses with bytes flipped, cut, stretched or replaced by
//! noise, returns a value or an error — never panics, never allocates past its input.
//! Deterministic (xorshift), so a failure reproduces.

use super::codec::Writer;
use super::error::ErrorCode;
use super::{
    api_versions, create_topics, describe_configs, describe_producers, fetch, find_coordinator,
    init_producer_id, list_groups, list_offsets, metadata, offset_commit, offset_fetch,
    offset_for_leader_epoch, sasl, write_txn_markers,
};
use crate::record::batch::tests::unhex;
use crate::record::records::{NewRecord, build_v2_batch};
use crate::record::{BatchHeader, BatchIter};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn samples() -> Vec<(&'static str, i16, Vec<u8>)> {
    let batch = build_v2_batch(
        7,
        3,
        &[NewRecord {
            key: Some(b"k"),
            value: Some(b"v"),
            timestamp: 5,
        }],
    );
    let mut out = Vec::new();
    for v in [4i16, 11, 12] {
        let resp = fetch::FetchResponse {
            error: ErrorCode::NONE,
            topics: vec![(
                "t".into(),
                vec![fetch::FetchPartitionResponse {
                    partition: 0,
                    error: ErrorCode::NONE,
                    high_watermark: 8,
                    last_stable_offset: 8,
                    log_start_offset: 0,
                    aborted_transactions: None,
                    diverging_epoch: (v >= 12).then_some(fetch::DivergingEpoch {
                        epoch: 1,
                        end_offset: 2,
                    }),
                    current_leader: None,
                    records: &batch,
                }],
            )],
            session_id: 0,
        };
        let mut w = Writer::new();
        fetch::encode_response(&mut w, v, &resp);
        out.push(("fetch", v, w.buf));
    }
    for v in [1i16, 9, 12] {
        let resp = metadata::MetadataResponse {
            brokers: vec![metadata::Broker {
                node_id: 1,
                host: "h".into(),
                port: 9,
            }],
            cluster_id: Some("c".into()),
            topics: vec![metadata::TopicMetadata {
                error: ErrorCode::NONE,
                name: "t".into(),
                topic_id: [3; 16],
                partitions: vec![metadata::PartitionMetadata {
                    error: ErrorCode::NONE,
                    partition: 0,
                    leader_id: 1,
                    leader_epoch: 2,
                    replicas: vec![1],
                }],
            }],
        };
        let mut w = Writer::new();
        metadata::encode_response(&mut w, v, &resp);
        out.push(("metadata", v, w.buf));
    }
    for v in [1i16, 7] {
        let parts = vec![list_offsets::ListOffsetsPartitionResponse {
            partition: 0,
            error: ErrorCode::NONE,
            timestamp: -1,
            offset: 4,
            leader_epoch: 1,
        }];
        let mut w = Writer::new();
        list_offsets::encode_response(&mut w, v, &[("t".into(), parts)]);
        out.push(("list_offsets", v, w.buf));
    }
    for v in [2i16, 4] {
        let parts = vec![offset_for_leader_epoch::EpochEndOffset {
            error: ErrorCode::NONE,
            partition: 0,
            leader_epoch: 1,
            end_offset: 4,
        }];
        let mut w = Writer::new();
        offset_for_leader_epoch::encode_response(&mut w, v, &[("t".into(), parts)]);
        out.push(("offset_for_leader_epoch", v, w.buf));
    }
    let mut w = Writer::new();
    w.i16(0)
        .array_len(1, true)
        .i16(1)
        .i16(4)
        .i16(12)
        .empty_tags(true)
        .i32(0)
        .empty_tags(true);
    out.push(("api_versions", 3, w.buf));
    for v in [0i16, 1, 2] {
        let resp = sasl::AuthenticateResponse {
            error: ErrorCode::SASL_AUTHENTICATION_FAILED,
            error_message: Some("bad".into()),
            auth_bytes: b"r=abc,s=c2FsdA==,i=4096".to_vec(),
            session_lifetime_ms: 60_000,
        };
        let mut w = Writer::new();
        sasl::encode_authenticate_response(&mut w, v, &resp);
        out.push(("sasl_authenticate", v, w.buf));
        let mut w = Writer::new();
        sasl::encode_authenticate_request(&mut w, v, b"n,,n=user,r=abc");
        out.push(("sasl_authenticate_request", v, w.buf));
    }
    let mut w = Writer::new();
    sasl::encode_handshake_response(
        &mut w,
        &sasl::HandshakeResponse {
            error: ErrorCode::NONE,
            mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-512".into()],
        },
    );
    out.push(("sasl_handshake", 1, w.buf));
    out.push(("batch", 2, batch));
    let admin = [
        ("describe_configs", 4, describe_configs::tests::RESPONSE_V4),
        ("create_topics", 7, create_topics::tests::RESPONSE_V7),
        ("find_coordinator", 4, find_coordinator::tests::RESPONSE_V4),
        ("list_groups", 5, list_groups::tests::RESPONSE_V5),
        ("offset_commit", 8, offset_commit::tests::RESPONSE_V8),
        ("offset_fetch", 8, offset_fetch::tests::RESPONSE_V8),
        ("init_producer_id", 5, init_producer_id::tests::RESPONSE_V5),
        ("describe_producers", 0, describe_producers::tests::RESPONSE),
        ("write_txn_markers", 1, write_txn_markers::tests::RESPONSE),
    ];
    out.extend(admin.map(|(kind, v, hex)| (kind, v, unhex(hex))));
    out
}

fn decode(kind: &str, v: i16, b: &[u8]) {
    match kind {
        "fetch" => {
            if let Ok(r) = fetch::decode_response(b, v) {
                for (_, parts) in &r.topics {
                    for p in parts {
                        let mut it = BatchIter::new(p.records, usize::MAX);
                        for (h, _, bytes) in it.by_ref() {
                            let _ = h.verify_crc(bytes);
                        }
                    }
                }
            }
        }
        "metadata" => drop(metadata::decode_response(b, v)),
        "list_offsets" => drop(list_offsets::decode_response(b, v)),
        "offset_for_leader_epoch" => drop(offset_for_leader_epoch::decode_response(b, v)),
        "api_versions" => drop(api_versions::decode_response(b, v)),
        "sasl_authenticate" => drop(sasl::decode_authenticate_response(b, v)),
        "sasl_authenticate_request" => drop(sasl::decode_authenticate_request(b, v)),
        "describe_configs" => drop(describe_configs::decode_response(b, v)),
        "create_topics" => drop(create_topics::decode_response(b, v)),
        "find_coordinator" => drop(find_coordinator::decode_response(b, v)),
        "list_groups" => drop(list_groups::decode_response(b, v)),
        "offset_commit" => drop(offset_commit::decode_response(b, v)),
        "offset_fetch" => drop(offset_fetch::decode_response(b, v)),
        "init_producer_id" => drop(init_producer_id::decode_response(b, v)),
        "describe_producers" => drop(describe_producers::decode_response(b)),
        "write_txn_markers" => drop(write_txn_markers::decode_response(b)),
        "sasl_handshake" => {
            drop(sasl::decode_handshake_response(b));
            drop(sasl::decode_handshake_request(b));
        }
        _ => {
            if let Ok(h) = BatchHeader::parse(b, usize::MAX) {
                let _ = h.verify_crc(b);
                let _ = crate::record::records::decode_records(&h, b);
            }
        }
    }
}

#[test]
fn mutated_inputs_never_panic_any_decoder() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for (kind, v, good) in samples() {
        decode(kind, v, &good);
        for _ in 0..3000 {
            let mut b = good.clone();
            match rng.below(4) {
                0 => {
                    for _ in 0..=rng.below(4) {
                        let i = rng.below(b.len());
                        b[i] ^= 1 << rng.below(8);
                    }
                }
                1 => b.truncate(rng.below(b.len())),
                2 => {
                    let i = rng.below(b.len());
                    b[i] = [0x00, 0x7f, 0x80, 0xff][rng.below(4)];
                    if i + 1 < b.len() {
                        b[i + 1] = 0xff;
                    }
                }
                _ => {
                    let n = rng.below(64);
                    b.extend((0..n).map(|_| rng.next() as u8));
                }
            }
            decode(kind, v, &b);
        }
        let noise: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
        decode(kind, v, &noise);
    }
}

#[test]
fn offset_for_leader_epoch_request_golden_bytes() {
    let mut w = Writer::new();
    let parts = vec![offset_for_leader_epoch::EpochRequest {
        partition: 1,
        current_leader_epoch: 5,
        leader_epoch: 4,
    }];
    offset_for_leader_epoch::encode_request(&mut w, 3, &[("t".into(), parts)]);
    let expect: Vec<u8> = [
        &(-1i32).to_be_bytes()[..], // replica id (v3+): consumer
        &1i32.to_be_bytes(),        // one topic
        &[0, 1, b't'],              // topic name
        &1i32.to_be_bytes(),        // one partition
        &1i32.to_be_bytes(),        // partition 1
        &5i32.to_be_bytes(),        // current leader epoch
        &4i32.to_be_bytes(),        // leader epoch asked
    ]
    .concat();
    assert_eq!(w.buf, expect);
}
