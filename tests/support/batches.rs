//! A general builder for uncompressed v2 record batches (CRC-32C correct), for logs no
//! producer writes on its own: compacted batches with holes, batches the cleaner emptied,
//! transactional data and COMMIT/ABORT markers. Feed them to
//! `TestLeader::append_batch`.
//!
//! Layout: `/work/shared/kafka-reference.md` §4.1 (batch), §4.2 (record), §4.3 (control
//! records). Every field of [`BatchSpec`] is written as given: nothing is checked, so a spec
//! can describe an inconsistent batch on purpose (`last_offset_delta` below a record's delta, a
//! `max_timestamp` that is not the maximum, ...).
//!
//! The helpers give record `base + d` the timestamp [`BATCH_TIMESTAMP`]` + d`, the key
//! `key-<offset>` and a value naming the helper and the offset.

#![allow(dead_code)]

use replica_follower::protocol::codec::Writer;

/// Timestamp of offset delta 0 in the batches the helpers build.
pub const BATCH_TIMESTAMP: i64 = 1_700_000_000_000;
/// Attributes bit 4: the batch belongs to a transaction.
pub const TRANSACTIONAL: i16 = 0x10;
/// Attributes bit 5: the batch holds control records.
pub const CONTROL: i16 = 0x20;
/// Control record type of an ABORT marker.
pub const ABORT: i16 = 0;
/// Control record type of a COMMIT marker.
pub const COMMIT: i16 = 1;

/// One record of a [`BatchSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecRecord {
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl SpecRecord {
    pub fn new(
        offset_delta: i32,
        timestamp_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> SpecRecord {
        SpecRecord {
            offset_delta,
            timestamp_delta,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: Vec::new(),
        }
    }
}

/// Every header field of an uncompressed v2 batch, and its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSpec {
    pub base_offset: i64,
    /// Last offset − base offset; may exceed the records' largest delta (compaction holes).
    pub last_offset_delta: i32,
    pub partition_leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Attributes bit 4.
    pub transactional: bool,
    /// Attributes bit 5.
    pub control: bool,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub records: Vec<SpecRecord>,
}

impl BatchSpec {
    /// An empty batch at `base_offset`: producer id/epoch/sequence -1, no flags, no records,
    /// `last_offset_delta` 0, timestamps -1. Add records with [`BatchSpec::record`].
    pub fn new(base_offset: i64, partition_leader_epoch: i32) -> BatchSpec {
        BatchSpec {
            base_offset,
            last_offset_delta: 0,
            partition_leader_epoch,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            base_timestamp: -1,
            max_timestamp: -1,
            records: Vec::new(),
        }
    }

    /// Adds a record at `base_offset + offset_delta` with timestamp `timestamp`, and widens the
    /// batch to it: `last_offset_delta` and `max_timestamp` grow to cover it, and the first
    /// record sets `base_timestamp` (the record's delta is taken from it).
    pub fn record(
        mut self,
        offset_delta: i32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> BatchSpec {
        if self.records.is_empty() {
            self.base_timestamp = timestamp;
        }
        self.last_offset_delta = self.last_offset_delta.max(offset_delta);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let delta = timestamp - self.base_timestamp;
        self.records
            .push(SpecRecord::new(offset_delta, delta, key, value));
        self
    }

    /// Attributes as written: codec none, CreateTime, bits 4 and 5 from the flags.
    pub fn attributes(&self) -> i16 {
        let mut a = 0;
        if self.transactional {
            a |= TRANSACTIONAL;
        }
        if self.control {
            a |= CONTROL;
        }
        a
    }

    /// The batch's bytes, CRC-32C over bytes 21.. filled in.
    pub fn build(&self) -> Vec<u8> {
        let mut body = Writer::new();
        for rec in &self.records {
            let mut r = Writer::new();
            r.i8(0)
                .varlong(rec.timestamp_delta)
                .varint(rec.offset_delta);
            varbytes(&mut r, rec.key.as_deref());
            varbytes(&mut r, rec.value.as_deref());
            r.varint(rec.headers.len() as i32);
            for (k, v) in &rec.headers {
                varbytes(&mut r, Some(k.as_bytes()));
                varbytes(&mut r, v.as_deref());
            }
            body.varint(r.buf.len() as i32);
            body.buf.extend_from_slice(&r.buf);
        }
        let mut w = Writer::new();
        let size = (61 - 12 + body.buf.len()) as i32;
        w.i64(self.base_offset)
            .i32(size)
            .i32(self.partition_leader_epoch)
            .i8(2)
            .i32(0);
        w.i16(self.attributes())
            .i32(self.last_offset_delta)
            .i64(self.base_timestamp)
            .i64(self.max_timestamp);
        w.i64(self.producer_id)
            .i16(self.producer_epoch)
            .i32(self.base_sequence)
            .i32(self.records.len() as i32);
        w.buf.extend_from_slice(&body.buf);
        let crc = crc32c::crc32c(w.buf.get(21..).unwrap_or_default());
        if let Some(s) = w.buf.get_mut(17..21) {
            s.copy_from_slice(&crc.to_be_bytes());
        }
        w.buf
    }
}

fn varbytes(w: &mut Writer, b: Option<&[u8]>) {
    match b {
        None => {
            w.varint(-1);
        }
        Some(b) => {
            w.varint(b.len() as i32);
            w.buf.extend_from_slice(b);
        }
    }
}

/// A batch the log cleaner compacted: it still spans `base..=base + last_offset_delta`, but
/// holds only the records at `kept_offset_deltas` (key `key-<offset>`, value
/// `compacted-o<offset>-e<epoch>`). As Kafka's cleaner rebuilds it, the base timestamp is the
/// first kept record's. No kept record gives [`empty_batch`].
pub fn compacted_batch(
    base: i64,
    last_offset_delta: i32,
    kept_offset_deltas: &[i32],
    epoch: i32,
) -> Vec<u8> {
    if kept_offset_deltas.is_empty() {
        return empty_batch(base, last_offset_delta, epoch);
    }
    let mut spec = BatchSpec::new(base, epoch);
    for &d in kept_offset_deltas {
        let offset = base + i64::from(d);
        let key = format!("key-{offset}");
        let value = format!("compacted-o{offset}-e{epoch}");
        spec = spec.record(
            d,
            BATCH_TIMESTAMP + i64::from(d),
            Some(key.as_bytes()),
            Some(value.as_bytes()),
        );
    }
    spec.last_offset_delta = last_offset_delta;
    spec.build()
}

/// A batch the cleaner emptied but kept (Kafka keeps a producer's last batch): no records,
/// base timestamp -1, the offset range `base..=base + last_offset_delta` and the max timestamp
/// (`BATCH_TIMESTAMP + last_offset_delta`) of the batch it was.
pub fn empty_batch(base: i64, last_offset_delta: i32, epoch: i32) -> Vec<u8> {
    let mut spec = BatchSpec::new(base, epoch);
    spec.last_offset_delta = last_offset_delta;
    spec.max_timestamp = BATCH_TIMESTAMP + i64::from(last_offset_delta);
    spec.build()
}

/// `n_records` records of a transaction (attributes bit 4) at `base..base + n_records`: key
/// `key-<offset>`, value `txn-p<producer_id>-o<offset>-e<epoch>`, base sequence 0.
pub fn txn_batch(
    base: i64,
    n_records: i32,
    producer_id: i64,
    producer_epoch: i16,
    epoch: i32,
) -> Vec<u8> {
    let mut spec = BatchSpec::new(base, epoch);
    spec.producer_id = producer_id;
    spec.producer_epoch = producer_epoch;
    spec.base_sequence = 0;
    spec.transactional = true;
    for d in 0..n_records {
        let offset = base + i64::from(d);
        let key = format!("key-{offset}");
        let value = format!("txn-p{producer_id}-o{offset}-e{epoch}");
        spec = spec.record(
            d,
            BATCH_TIMESTAMP + i64::from(d),
            Some(key.as_bytes()),
            Some(value.as_bytes()),
        );
    }
    spec.build()
}

/// A transaction marker at `offset`: one control record (attributes transactional | control),
/// key = version 0 INT16 + type INT16 ([`COMMIT`] or [`ABORT`]), value = version 0 INT16 +
/// `coordinator_epoch` INT32; base sequence -1, timestamp [`BATCH_TIMESTAMP`].
pub fn control_batch(
    offset: i64,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    epoch: i32,
) -> Vec<u8> {
    let kind = if commit { COMMIT } else { ABORT };
    let key = [0i16.to_be_bytes(), kind.to_be_bytes()].concat();
    let value = [&0i16.to_be_bytes()[..], &coordinator_epoch.to_be_bytes()].concat();
    let mut spec =
        BatchSpec::new(offset, epoch).record(0, BATCH_TIMESTAMP, Some(&key), Some(&value));
    spec.producer_id = producer_id;
    spec.producer_epoch = producer_epoch;
    spec.transactional = true;
    spec.control = true;
    spec.build()
}

/// The producer id of a v2 batch (bytes 43..51); -1 when too short.
pub fn producer_id(batch: &[u8]) -> i64 {
    batch
        .get(43..51)
        .and_then(|b| b.try_into().ok())
        .map_or(-1, i64::from_be_bytes)
}
