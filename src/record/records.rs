//! Records inside a v2 batch, and a builder for v2 batches.
//!
//! Record layout: length VARINT · attributes INT8 · timestampDelta VARLONG · offsetDelta
//! VARINT · keyLength VARINT (-1 null) · key · valueLength VARINT · value · headersCount VARINT ·
//! headers {keyLength VARINT, key, valueLength VARINT (-1 null), value}.
//! The inspection commands read records with this ([`records_block`] decompresses, within a
//! bound, then [`RecordIter`] walks the block one record at a time without copying); the
//! follower itself never decodes them. The builder makes batches for tests and for the
//! in-process test leader.

use super::batch::{BatchHeader, V2_HEADER_SIZE};
use super::compression::{self, DecompressError};
use crate::protocol::codec::{DecodeError, DecodeResult, Reader, Writer, len_i32};
use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// One record, borrowing its bytes from the records block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub offset: i64,
    /// The record's own timestamp (CreateTime), or the batch's max timestamp when the batch
    /// is LogAppendTime — as Kafka's `DefaultRecordBatch` reports it to consumers.
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

impl RecordRef<'_> {
    fn to_owned(&self) -> Record {
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        String::from_utf8_lossy(k).into_owned(),
                        v.map(<[u8]>::to_vec),
                    )
                })
                .collect(),
        }
    }
}

fn varbytes<'a>(r: &mut Reader<'a>, what: &str) -> DecodeResult<Option<&'a [u8]>> {
    let len = r.varint(what)?;
    if len < 0 {
        return Ok(None);
    }
    Ok(Some(r.take(len as usize, what)?))
}

/// The records block of the v2 batch `batch` (the bytes after its 61-byte header),
/// decompressed when the batch is compressed, to at most `limit` bytes.
pub fn records_block<'a>(
    h: &BatchHeader,
    batch: &'a [u8],
    limit: usize,
) -> Result<Cow<'a, [u8]>, DecompressError> {
    let body = batch.get(V2_HEADER_SIZE..).unwrap_or_default();
    compression::decompress(h.attributes & 0x07, body, limit)
}

/// The baseTimestamp field of the v2 batch `batch` (bytes 27..35); -1 when too short.
pub fn base_timestamp(batch: &[u8]) -> i64 {
    batch
        .get(27..35)
        .and_then(|b| b.try_into().ok())
        .map_or(-1, i64::from_be_bytes)
}

/// The records of a records block, one at a time; after the first error it yields nothing.
pub struct RecordIter<'a> {
    r: Reader<'a>,
    base_offset: i64,
    base_timestamp: i64,
    /// `Some(max timestamp)` for a LogAppendTime batch: every record has that timestamp.
    log_append_time: Option<i64>,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    /// The records of `block` (from [`records_block`]) of the batch `h` whose baseTimestamp
    /// is `base_timestamp`.
    pub fn new(h: &BatchHeader, base_timestamp: i64, block: &'a [u8]) -> Self {
        RecordIter {
            r: Reader::new(block),
            base_offset: h.base_offset,
            base_timestamp,
            log_append_time: h.is_log_append_time().then_some(h.max_timestamp),
            failed: false,
        }
    }

    fn next_record(&mut self) -> DecodeResult<RecordRef<'a>> {
        let len = self.r.varint("record length")?;
        if len < 0 {
            return Err(DecodeError::new(format!("negative record length {len}")));
        }
        let mut rr = Reader::new(self.r.take(len as usize, "record")?);
        rr.i8("record attributes")?;
        let ts_delta = rr.varlong("record timestampDelta")?;
        let off_delta = rr.varint("record offsetDelta")?;
        let key = varbytes(&mut rr, "record key")?;
        let value = varbytes(&mut rr, "record value")?;
        let nh = rr.varint("record headers count")?;
        // Each header takes at least two bytes: the count is checked before any allocation.
        if nh < 0 || nh as usize > rr.remaining() / 2 {
            return Err(DecodeError::new(format!("record headers count {nh}")));
        }
        let mut headers = Vec::with_capacity(nh as usize);
        for _ in 0..nh {
            let k = varbytes(&mut rr, "header key")?.unwrap_or_default();
            let v = varbytes(&mut rr, "header value")?;
            headers.push((k, v));
        }
        Ok(RecordRef {
            offset: self.base_offset.saturating_add(i64::from(off_delta)),
            timestamp: self
                .log_append_time
                .unwrap_or_else(|| self.base_timestamp.saturating_add(ts_delta)),
            key,
            value,
            headers,
        })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = DecodeResult<RecordRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.r.is_empty() {
            return None;
        }
        let r = self.next_record();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Decodes the records of an uncompressed v2 batch (`batch` is the whole batch).
pub fn decode_records(h: &BatchHeader, batch: &[u8]) -> DecodeResult<Vec<Record>> {
    if h.magic != 2 {
        return Err(DecodeError::new(format!(
            "batch at offset {} is not magic 2",
            h.base_offset
        )));
    }
    if h.attributes & 0x07 != 0 {
        return Err(DecodeError::new(format!(
            "batch at offset {} is {}-compressed",
            h.base_offset,
            h.compression()
        )));
    }
    let body = batch.get(V2_HEADER_SIZE..).unwrap_or_default();
    RecordIter::new(h, base_timestamp(batch), body)
        .map(|r| r.map(|r| r.to_owned()))
        .collect()
}

/// What a control batch marks (Kafka's `ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    /// LEADER_CHANGE, KRaft snapshot and voter records, and types unknown here.
    Other(i16),
}

/// The marker of a control batch: its type and, for ABORT and COMMIT, the coordinator epoch
/// from the record value. `None` when the batch is not a control batch or its first record
/// cannot be read (control batches are never compressed; a compressed one is not read).
pub fn control_marker(h: &BatchHeader, batch: &[u8]) -> Option<(ControlType, Option<i32>)> {
    if !h.is_control() || h.attributes & 0x07 != 0 {
        return None;
    }
    let body = batch.get(V2_HEADER_SIZE..).unwrap_or_default();
    let record = RecordIter::new(h, base_timestamp(batch), body)
        .next()?
        .ok()?;
    control_record(&record)
}

/// What the control record `record` marks, from its key, and for ABORT and COMMIT the
/// coordinator epoch from its value; `None` when its key is not a control key.
pub fn control_record(record: &RecordRef<'_>) -> Option<(ControlType, Option<i32>)> {
    let mut r = Reader::new(record.key?);
    r.i16("control key version").ok()?;
    let kind = match r.i16("control key type").ok()? {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        other => ControlType::Other(other),
    };
    let coordinator_epoch = match kind {
        ControlType::Abort | ControlType::Commit => record.value.and_then(|v| {
            let mut r = Reader::new(v);
            r.i16("control value version").ok()?;
            r.i32("coordinator epoch").ok()
        }),
        ControlType::Other(_) => None,
    };
    Some((kind, coordinator_epoch))
}

/// One record to put in a built batch.
pub struct NewRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp: i64,
}

/// Builds an uncompressed v2 batch with a correct CRC-32C.
pub fn build_v2_batch(base_offset: i64, leader_epoch: i32, records: &[NewRecord<'_>]) -> Vec<u8> {
    let base_ts = records.first().map_or(-1, |r| r.timestamp);
    let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
    let mut body = Writer::new();
    for (i, rec) in records.iter().enumerate() {
        let mut r = Writer::new();
        r.i8(0).varlong(rec.timestamp - base_ts).varint(len_i32(i));
        for field in [rec.key, rec.value] {
            match field {
                None => {
                    r.varint(-1);
                }
                Some(b) => {
                    r.varint(len_i32(b.len()));
                    r.buf.extend_from_slice(b);
                }
            }
        }
        r.varint(0);
        body.varint(len_i32(r.buf.len()));
        body.buf.extend_from_slice(&r.buf);
    }
    let mut w = Writer::new();
    let size = len_i32(V2_HEADER_SIZE - 12 + body.buf.len());
    w.i64(base_offset).i32(size).i32(leader_epoch).i8(2).i32(0);
    w.i16(0)
        .i32(len_i32(records.len().saturating_sub(1)))
        .i64(base_ts)
        .i64(max_ts);
    w.i64(-1).i16(-1).i32(-1).i32(len_i32(records.len()));
    w.buf.extend_from_slice(&body.buf);
    let crc = crc32c::crc32c(w.buf.get(21..).unwrap_or_default());
    if let Some(s) = w.buf.get_mut(17..21) {
        s.copy_from_slice(&crc.to_be_bytes());
    }
    w.buf
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::batch::tests::{BATCH_C, unhex};

    #[test]
    fn builder_reproduces_reference_batch_c() {
        let rec = NewRecord {
            key: Some(b"key"),
            value: Some(b"value"),
            timestamp: 1_700_000_000_000,
        };
        assert_eq!(build_v2_batch(0, 0, &[rec]), unhex(BATCH_C));
    }

    #[test]
    fn control_markers_are_read_from_the_first_record() {
        // An ABORT marker: key {0, 0}, value {0, coordinator epoch 7}; attributes
        // transactional | control.
        let key = [0u8, 0, 0, 0];
        let value = [0u8, 0, 0, 0, 0, 7];
        let mut b = build_v2_batch(
            9,
            0,
            &[NewRecord {
                key: Some(&key),
                value: Some(&value),
                timestamp: 5,
            }],
        );
        b[21..23].copy_from_slice(&0x30i16.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let h = BatchHeader::parse(&b, usize::MAX).unwrap();
        assert_eq!(control_marker(&h, &b), Some((ControlType::Abort, Some(7))));
        let plain = build_v2_batch(0, 0, &[]);
        let hp = BatchHeader::parse(&plain, usize::MAX).unwrap();
        assert_eq!(control_marker(&hp, &plain), None);
    }

    /// `b` with its records block compressed by `codec` and `extra` attribute bits set, CRC
    /// recomputed.
    pub(crate) fn recompressed(b: &[u8], codec: i16, extra: i16) -> Vec<u8> {
        let block = crate::record::compression::tests::compressed(codec, &b[V2_HEADER_SIZE..]);
        let mut out = [&b[..V2_HEADER_SIZE], &block].concat();
        let size = (out.len() - 12) as i32;
        out[8..12].copy_from_slice(&size.to_be_bytes());
        out[21..23].copy_from_slice(&(codec | extra).to_be_bytes());
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out
    }

    #[test]
    fn compressed_batches_yield_the_records_of_the_uncompressed_one() {
        let recs: Vec<NewRecord<'_>> = (0..20)
            .map(|i| NewRecord {
                key: (i % 3 != 0).then_some(&b"some key"[..]),
                value: Some(&b"a value that repeats, a value that repeats"[..]),
                timestamp: 1_000 + i,
            })
            .collect();
        let plain = build_v2_batch(100, 0, &recs);
        let hp = BatchHeader::parse(&plain, usize::MAX).unwrap();
        let want = decode_records(&hp, &plain).unwrap();
        for codec in 1..=4 {
            let b = recompressed(&plain, codec, 0);
            let h = BatchHeader::parse(&b, usize::MAX).unwrap();
            h.verify_crc(&b).unwrap();
            assert!(b.len() < plain.len(), "{} compresses", h.compression());
            let block = records_block(&h, &b, 1 << 20).unwrap();
            let got: Vec<Record> = RecordIter::new(&h, base_timestamp(&b), &block)
                .map(|r| r.unwrap().to_owned())
                .collect();
            assert_eq!(got, want, "{}", h.compression());
            assert!(records_block(&h, &b, 100).is_err(), "bounded");
        }
    }

    #[test]
    fn log_append_time_batches_give_every_record_the_max_timestamp() {
        let recs = [5, 9].map(|t| NewRecord {
            key: None,
            value: None,
            timestamp: t,
        });
        let b = recompressed(&build_v2_batch(0, 0, &recs), 0, 0x08);
        let h = BatchHeader::parse(&b, usize::MAX).unwrap();
        assert_eq!(h.timestamp_type(), "LogAppendTime");
        let ts: Vec<i64> = decode_records(&h, &b)
            .unwrap()
            .iter()
            .map(|r| r.timestamp)
            .collect();
        assert_eq!(ts, [9, 9]);
    }

    #[test]
    fn records_roundtrip() {
        let recs = [
            NewRecord {
                key: Some(b"a"),
                value: Some(b"1"),
                timestamp: 10,
            },
            NewRecord {
                key: None,
                value: None,
                timestamp: 12,
            },
        ];
        let b = build_v2_batch(40, 3, &recs);
        let h = BatchHeader::parse(&b, usize::MAX).unwrap();
        h.verify_crc(&b).unwrap();
        assert_eq!(
            (h.base_offset, h.last_offset, h.partition_leader_epoch),
            (40, 41, 3)
        );
        let got = decode_records(&h, &b).unwrap();
        assert_eq!(got[0].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(got[1].offset, 41);
        assert_eq!(got[1].timestamp, 12);
        assert_eq!(got[1].value, None);
        // truncated record bodies are errors
        let mut short = b.clone();
        short.truncate(b.len() - 2);
        assert!(decode_records(&h, &short).is_err());
    }
}
