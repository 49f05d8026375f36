//! One batch: header fields and checksum verification, for magic 2 (CRC-32C) and the legacy
//! magic 0/1 messages (CRC-32 IEEE). See the byte map in [`super`].

use std::fmt;

/// Bytes before the `size` field ends: offset INT64 + size INT32.
pub const LOG_OVERHEAD: usize = 12;
/// Largest batch accepted from disk or network (Kafka's int32 size field).
pub const MAX_BATCH_SIZE: usize = i32::MAX as usize;
pub const MAGIC_OFFSET: usize = 16;
/// A v2 batch header is 61 bytes; records follow.
pub const V2_HEADER_SIZE: usize = 61;
const V2_CRC_OFFSET: usize = 17;
const V2_ATTRIBUTES_OFFSET: usize = 21;
/// Smallest `size` of any entry: a v0 message is 14 bytes after the first 12.
pub const MIN_ENTRY_SIZE: i32 = 14;
const V0_MIN_SIZE: usize = 14;
const V1_MIN_SIZE: usize = 22;

/// Why a batch was refused. The caller adds the partition and file position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than the header announces: a partial batch.
    Truncated {
        needed: usize,
        available: usize,
    },
    Corrupt(String),
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Truncated { needed, available } => {
                write!(
                    f,
                    "partial batch: {needed} bytes announced, {available} present"
                )
            }
            BatchError::Corrupt(s) => write!(f, "corrupt batch: {s}"),
        }
    }
}

impl std::error::Error for BatchError {}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    i32::from_be_bytes(a)
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    be_i32(b, at) as u32
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    i16::from_be_bytes(a)
}

/// The header fields of one batch (for legacy messages: of one wrapper message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub magic: i8,
    /// First offset of the batch. For a compressed magic 0/1 wrapper the inner offsets are
    /// unknown without decompressing, so this is the wrapper offset, like `last_offset`.
    pub base_offset: i64,
    pub last_offset: i64,
    /// Total bytes of the batch, `size` field + 12.
    pub size_in_bytes: usize,
    /// -1 for legacy messages.
    pub partition_leader_epoch: i32,
    /// Largest timestamp in the batch; -1 when none (magic 0, or an emptied batch).
    pub max_timestamp: i64,
    pub attributes: i16,
    pub records_count: i32,
    pub crc: u32,
    /// -1 for legacy messages and for batches without a producer id.
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl BatchHeader {
    pub fn compression(&self) -> &'static str {
        super::compression::codec_name(self.attributes & 0x07)
    }
    /// Kafka's name of the timestamp type.
    pub fn timestamp_type(&self) -> &'static str {
        match (self.magic, self.is_log_append_time()) {
            (0, _) => "NoTimestampType",
            (_, true) => "LogAppendTime",
            (_, false) => "CreateTime",
        }
    }
    pub fn is_control(&self) -> bool {
        self.magic >= 2 && self.attributes & 0x20 != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.magic >= 2 && self.attributes & 0x10 != 0
    }
    /// Timestamp type bit: LogAppendTime (set by the broker) rather than CreateTime.
    pub fn is_log_append_time(&self) -> bool {
        self.magic >= 1 && self.attributes & 0x08 != 0
    }
    /// A compressed magic 0/1 wrapper carries only its last inner offset: where it starts is
    /// unknown without decompressing it, so only its end can be checked.
    pub fn is_legacy_wrapper(&self) -> bool {
        self.magic < 2 && self.attributes & 0x07 != 0
    }

    /// Whether this batch holds `offset`.
    pub fn contains(&self, offset: i64) -> bool {
        self.base_offset <= offset && offset <= self.last_offset
    }

    /// Parses the header at the start of `bytes` and checks that the whole batch is present,
    /// without verifying its checksum. `max_size` bounds the announced size.
    pub fn parse(bytes: &[u8], max_size: usize) -> Result<BatchHeader, BatchError> {
        Self::parse_inner(bytes, max_size, true, None)
    }

    /// Parses a header from the first bytes of a batch (at least [`V2_HEADER_SIZE`] of them,
    /// or the whole batch when it is shorter), for walking a file without reading whole
    /// batches. The checksum cannot be verified from this.
    pub fn parse_prefix(prefix: &[u8], max_size: usize) -> Result<BatchHeader, BatchError> {
        Self::parse_inner(prefix, max_size, false, None)
    }

    /// Parses the header of a batch of which `available` bytes exist (in a file, from the
    /// batch's start) and `prefix` holds the first `min(available, V2_HEADER_SIZE)` or more:
    /// decides exactly as [`Self::parse`] would on all `available` bytes — a batch that is not
    /// all there is `Truncated`, whatever its header says — without reading them.
    pub fn parse_header_of(
        prefix: &[u8],
        available: u64,
        max_size: usize,
    ) -> Result<BatchHeader, BatchError> {
        let available = usize::try_from(available).unwrap_or(usize::MAX);
        Self::parse_inner(prefix, max_size, false, Some(available))
    }

    fn parse_inner(
        bytes: &[u8],
        max_size: usize,
        whole: bool,
        available: Option<usize>,
    ) -> Result<BatchHeader, BatchError> {
        if bytes.len() < LOG_OVERHEAD {
            return Err(BatchError::Truncated {
                needed: LOG_OVERHEAD,
                available: bytes.len(),
            });
        }
        let offset = be_i64(bytes, 0);
        let size = be_i32(bytes, 8);
        if size < MIN_ENTRY_SIZE {
            return Err(BatchError::Corrupt(format!(
                "size {size} at offset {offset} is below the minimum {MIN_ENTRY_SIZE}"
            )));
        }
        if offset < 0 {
            return Err(BatchError::Corrupt(format!(
                "negative base offset {offset}"
            )));
        }
        let total = size as usize + LOG_OVERHEAD;
        if total > max_size {
            return Err(BatchError::Corrupt(format!(
                "size {size} at offset {offset} exceeds the limit {max_size}"
            )));
        }
        if bytes.len() <= MAGIC_OFFSET {
            return Err(BatchError::Truncated {
                needed: total,
                available: bytes.len(),
            });
        }
        let magic = bytes.get(MAGIC_OFFSET).copied().unwrap_or(0) as i8;
        if !(0..=2).contains(&magic) {
            return Err(BatchError::Corrupt(format!(
                "magic {magic} at offset {offset}"
            )));
        }
        // `parse` finds a batch that is not all there before it looks inside its header.
        if let Some(available) = available
            && available < total
        {
            return Err(BatchError::Truncated {
                needed: total,
                available,
            });
        }
        let needed = if whole {
            total
        } else {
            total.min(V2_HEADER_SIZE.max(V1_MIN_SIZE + LOG_OVERHEAD))
        };
        if bytes.len() < needed {
            return Err(BatchError::Truncated {
                needed,
                available: bytes.len(),
            });
        }
        if magic == 2 {
            if total < V2_HEADER_SIZE {
                return Err(BatchError::Corrupt(format!(
                    "v2 batch at offset {offset} is {total} bytes, shorter than its header"
                )));
            }
            let last_offset_delta = be_i32(bytes, 23);
            if last_offset_delta < 0 {
                return Err(BatchError::Corrupt(format!(
                    "negative lastOffsetDelta {last_offset_delta} at offset {offset}"
                )));
            }
            // The offset after the batch must exist: a log end past i64::MAX is no offset.
            let Some(last_offset) = offset
                .checked_add(i64::from(last_offset_delta))
                .filter(|l| *l < i64::MAX)
            else {
                return Err(BatchError::Corrupt(format!(
                    "batch at offset {offset} with lastOffsetDelta {last_offset_delta} ends past the largest offset"
                )));
            };
            // Compaction may leave fewer records than offsets, or none, never more.
            let records_count = be_i32(bytes, 57);
            if records_count < 0 || i64::from(records_count) > i64::from(last_offset_delta) + 1 {
                return Err(BatchError::Corrupt(format!(
                    "batch at offset {offset} claims {records_count} records for {} offsets",
                    i64::from(last_offset_delta) + 1
                )));
            }
            Ok(BatchHeader {
                magic,
                base_offset: offset,
                last_offset,
                size_in_bytes: total,
                partition_leader_epoch: be_i32(bytes, 12),
                max_timestamp: be_i64(bytes, 35),
                attributes: be_i16(bytes, V2_ATTRIBUTES_OFFSET),
                records_count,
                crc: be_u32(bytes, V2_CRC_OFFSET),
                producer_id: be_i64(bytes, 43),
                producer_epoch: be_i16(bytes, 51),
                base_sequence: be_i32(bytes, 53),
            })
        } else {
            if offset == i64::MAX {
                return Err(BatchError::Corrupt(format!(
                    "message at offset {offset} leaves no offset after it"
                )));
            }
            let min = if magic == 0 { V0_MIN_SIZE } else { V1_MIN_SIZE };
            if (size as usize) < min {
                return Err(BatchError::Corrupt(format!(
                    "magic {magic} message at offset {offset} is {size} bytes, below {min}"
                )));
            }
            let attributes = i16::from(bytes.get(17).copied().unwrap_or(0));
            let max_timestamp = if magic == 1 { be_i64(bytes, 18) } else { -1 };
            Ok(BatchHeader {
                magic,
                base_offset: offset,
                last_offset: offset,
                size_in_bytes: total,
                partition_leader_epoch: -1,
                max_timestamp,
                attributes,
                records_count: 1,
                crc: be_u32(bytes, 12),
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            })
        }
    }

    /// Verifies the checksum of the batch whose bytes are `batch` (exactly `size_in_bytes`).
    pub fn verify_crc(&self, batch: &[u8]) -> Result<(), BatchError> {
        let mut check = CrcCheck::new(self);
        check.update(batch);
        check.finish()
    }
}

/// The checksum of one batch computed from its bytes handed over piece by piece, in order
/// from the batch's first byte, so that a batch need not be held whole to be verified.
pub struct CrcCheck {
    header: BatchHeader,
    /// Bytes of the batch seen so far.
    seen: usize,
    state: CrcState,
}

enum CrcState {
    /// CRC-32C of bytes 21.. (magic 2).
    Castagnoli(u32),
    /// CRC-32 IEEE of bytes 16.. (magic 0 and 1).
    Ieee(crc32fast::Hasher),
}

impl CrcCheck {
    pub fn new(header: &BatchHeader) -> Self {
        let state = if header.magic == 2 {
            CrcState::Castagnoli(0)
        } else {
            CrcState::Ieee(crc32fast::Hasher::new())
        };
        CrcCheck {
            header: *header,
            seen: 0,
            state,
        }
    }

    /// Adds the next bytes of the batch.
    pub fn update(&mut self, piece: &[u8]) {
        let covered_from = match self.state {
            CrcState::Castagnoli(_) => V2_ATTRIBUTES_OFFSET,
            CrcState::Ieee(_) => MAGIC_OFFSET,
        };
        let skip = covered_from.saturating_sub(self.seen).min(piece.len());
        self.seen += piece.len();
        let covered = piece.get(skip..).unwrap_or_default();
        match &mut self.state {
            CrcState::Castagnoli(crc) => *crc = crc32c::crc32c_append(*crc, covered),
            CrcState::Ieee(h) => h.update(covered),
        }
    }

    /// Compares the checksum of the bytes added with the one the header stores.
    pub fn finish(self) -> Result<(), BatchError> {
        let computed = match self.state {
            CrcState::Castagnoli(crc) => crc,
            CrcState::Ieee(h) => h.finalize(),
        };
        if computed != self.header.crc {
            return Err(BatchError::Corrupt(format!(
                "CRC mismatch in batch at offset {}: stored {:08x}, computed {:08x}",
                self.header.base_offset, self.header.crc, computed
            )));
        }
        Ok(())
    }
}

/// Rewrites the base offset of a v2 batch. The CRC does not cover it, so the batch stays valid.
/// Test fixtures use it; the follower never rewrites a batch.
#[cfg(test)]
pub(crate) fn set_v2_base_offset(batch: &mut [u8], base_offset: i64) {
    if let Some(s) = batch.get_mut(0..8) {
        s.copy_from_slice(&base_offset.to_be_bytes());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    pub(crate) const BATCH_C: &str = "0000000000000000000000400000000002db5e9cdd0000000000000000018bcfe568000000018bcfe56800ffffffffffffffffffffffffffff000000011c000000066b65790a76616c756500";
    const LEGACY_E: &str =
        "0000000000000000 0000001b a584f508 01 00 0000018bcfe56800 ffffffff 00000005 76616c7565";
    const LEGACY_E0: &str = "0000000000000000 00000013 acc08400 00 00 ffffffff 00000005 76616c7565";

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn v2_golden_batch_parses_and_verifies() {
        let b = unhex(BATCH_C);
        let h = BatchHeader::parse(&b, usize::MAX).unwrap();
        assert_eq!(h.magic, 2);
        assert_eq!(h.base_offset, 0);
        assert_eq!(h.last_offset, 0);
        assert_eq!(h.size_in_bytes, 76);
        assert_eq!(h.max_timestamp, 1_700_000_000_000);
        assert_eq!(h.crc, 0xdb5e_9cdd);
        assert_eq!(h.compression(), "none");
        h.verify_crc(&b).unwrap();
    }

    #[test]
    fn v2_crc_detects_every_flipped_covered_byte() {
        let b = unhex(BATCH_C);
        for i in 21..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x01;
            // A flip that makes the header insane is caught by the parse itself.
            let detected = BatchHeader::parse(&c, usize::MAX)
                .is_err_and(|e| matches!(e, BatchError::Corrupt(_)))
                || BatchHeader::parse(&c, usize::MAX).is_ok_and(|h| h.verify_crc(&c).is_err());
            assert!(detected, "flip at {i} undetected");
        }
        // The base offset is not covered: rewriting it keeps the CRC valid.
        let mut c = b.clone();
        set_v2_base_offset(&mut c, 77);
        let h = BatchHeader::parse(&c, usize::MAX).unwrap();
        assert_eq!(h.base_offset, 77);
        h.verify_crc(&c).unwrap();
    }

    #[test]
    fn legacy_messages_verify_with_crc32() {
        for hexs in [LEGACY_E, LEGACY_E0] {
            let b = unhex(hexs);
            let h = BatchHeader::parse(&b, usize::MAX).unwrap();
            assert!(h.magic <= 1);
            assert_eq!(h.size_in_bytes, b.len());
            h.verify_crc(&b).unwrap();
            let mut c = b.clone();
            let last = c.len() - 1;
            c[last] ^= 0xff;
            assert!(h.verify_crc(&c).is_err());
        }
        let h = BatchHeader::parse(&unhex(LEGACY_E), usize::MAX).unwrap();
        assert_eq!(h.max_timestamp, 1_700_000_000_000);
    }

    #[test]
    fn a_crc_checked_piece_by_piece_is_the_whole_batch_crc() {
        for hexs in [BATCH_C, LEGACY_E, LEGACY_E0] {
            let b = unhex(hexs);
            let h = BatchHeader::parse(&b, usize::MAX).unwrap();
            for piece in 1..=b.len() {
                let mut check = CrcCheck::new(&h);
                b.chunks(piece).for_each(|c| check.update(c));
                assert_eq!(check.finish(), Ok(()), "{hexs} in pieces of {piece}");
            }
            let mut c = b.clone();
            let last = c.len() - 1;
            c[last] ^= 0x01;
            let mut check = CrcCheck::new(&h);
            c.chunks(7).for_each(|p| check.update(p));
            assert_eq!(check.finish(), h.verify_crc(&c));
            assert!(h.verify_crc(&c).is_err());
        }
    }

    /// `parse_header_of` on a prefix decides as `parse` does on all the bytes there are.
    #[test]
    fn a_header_read_from_a_prefix_is_judged_as_the_whole_batch() {
        let mut bad_delta = unhex(BATCH_C);
        bad_delta[23..27].copy_from_slice(&(-3i32).to_be_bytes());
        let mut bad_magic = unhex(BATCH_C);
        bad_magic[16] = 9;
        let mut tiny = unhex(BATCH_C);
        tiny[8..12].copy_from_slice(&3i32.to_be_bytes());
        let mut legacy = unhex(LEGACY_E);
        legacy.extend_from_slice(&unhex(BATCH_C));
        let cases = [unhex(BATCH_C), bad_delta, bad_magic, tiny, legacy];
        for (b, max) in cases.iter().flat_map(|b| [(b, 70), (b, 1 << 20)]) {
            for available in 0..=b.len() {
                let whole = BatchHeader::parse(&b[..available], max);
                let prefix = &b[..available.min(V2_HEADER_SIZE)];
                let got = BatchHeader::parse_header_of(prefix, available as u64, max);
                match (&whole, &got) {
                    (Ok(w), Ok(g)) => assert_eq!(w, g),
                    (Err(BatchError::Truncated { .. }), Err(BatchError::Truncated { .. })) => {}
                    (Err(BatchError::Corrupt(w)), Err(BatchError::Corrupt(g))) => assert_eq!(w, g),
                    _ => panic!("{available} bytes: parse says {whole:?}, prefix {got:?}"),
                }
            }
        }
    }

    #[test]
    fn a_prefix_is_enough_for_the_header() {
        let b = unhex(BATCH_C);
        let whole = BatchHeader::parse(&b, usize::MAX).unwrap();
        assert_eq!(BatchHeader::parse_prefix(&b[..61], usize::MAX), Ok(whole));
        assert!(matches!(
            BatchHeader::parse_prefix(&b[..60], usize::MAX),
            Err(BatchError::Truncated { .. })
        ));
    }

    #[test]
    fn partial_and_corrupt_headers_are_told_apart() {
        let b = unhex(BATCH_C);
        for cut in 0..b.len() {
            match BatchHeader::parse(&b[..cut], usize::MAX) {
                Err(BatchError::Truncated { .. }) => {}
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        let mut bad_magic = b.clone();
        bad_magic[16] = 7;
        assert!(matches!(
            BatchHeader::parse(&bad_magic, usize::MAX),
            Err(BatchError::Corrupt(_))
        ));
        let mut tiny = b.clone();
        tiny[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert!(matches!(
            BatchHeader::parse(&tiny, usize::MAX),
            Err(BatchError::Corrupt(_))
        ));
        assert!(matches!(
            BatchHeader::parse(&b, 50),
            Err(BatchError::Corrupt(_))
        ));
        let mut neg_base = b.clone();
        neg_base[..8].copy_from_slice(&(-5i64).to_be_bytes());
        assert!(matches!(
            BatchHeader::parse(&neg_base, usize::MAX),
            Err(BatchError::Corrupt(e)) if e.contains("-5")
        ));
        let mut huge = b.clone();
        huge[..8].copy_from_slice(&(i64::MAX - 1).to_be_bytes());
        huge[23..27].copy_from_slice(&5i32.to_be_bytes());
        assert!(matches!(
            BatchHeader::parse(&huge, usize::MAX),
            Err(BatchError::Corrupt(e)) if e.contains("largest offset")
        ));
        for count in [-1i32, 2] {
            // Batch C has one offset: a negative count, or more records than offsets, is corrupt.
            let mut c = b.clone();
            c[57..61].copy_from_slice(&count.to_be_bytes());
            assert!(matches!(
                BatchHeader::parse(&c, usize::MAX),
                Err(BatchError::Corrupt(e)) if e.contains("records")
            ));
        }
        let mut neg = b.clone();
        neg[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            BatchHeader::parse(&neg, usize::MAX),
            Err(BatchError::Corrupt(_))
        ));
    }
}
