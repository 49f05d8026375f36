//! Fetched record sets judged as a follower takes them: [`follow`] is the one place a fetch
//! response's records are checked, and the only maker of the [`VerifiedBatches`] a log
//! appends. The rule is Kafka's `UnifiedLog.appendAsFollower`:
//! - batches that end before the fetch offset are skipped (a leader may start a response at
//!   the batch holding the offset, or before it for legacy compressed sets);
//! - the first kept batch ends at or after the fetch offset and starts at or after the local
//!   log end — only an empty log may take a first batch that begins before its start (a start
//!   by timestamp or `latest` can land inside a batch); a negative base offset never passes;
//! - each later batch starts after the last offset of the one before ([`check_follows`]):
//!   gaps are legitimate (compaction), overlaps are not;
//! - a batch that does not end below the high watermark the same response reports is
//!   refused: a consumer fetch never sees one from a sane leader, so every batch the replica
//!   holds was committed when it was fetched;
//! - every kept batch's CRC verifies, and its header is sane (record count ≥ 0 and at most
//!   lastOffsetDelta + 1; see [`BatchHeader::parse`]);
//! - a partial batch at the end is dropped (it is fetched again whole next time); a corrupt
//!   tail (bad size or magic) is an error.
//!
//! Any failure rejects the whole record set: nothing is written.

use super::batch::MAX_BATCH_SIZE;
use super::{BatchHeader, BatchIter, SetEnd, check_follows};
use std::fmt::Display;

/// Whole batches back to back, each checked by [`follow`]: checksums verified, each batch
/// after the one before. A log appends nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedBatches<'a> {
    bytes: &'a [u8],
    headers: Vec<BatchHeader>,
}

impl<'a> VerifiedBatches<'a> {
    /// The batches' bytes, exactly the concatenation of [`Self::headers`]' batches.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn headers(&self) -> &[BatchHeader] {
        &self.headers
    }

    /// Every batch of `bytes`, which must all be whole and pass [`follow`] from any offset.
    #[cfg(test)]
    pub fn of(bytes: &'a [u8]) -> Self {
        let f = follow(&"test", i64::MIN, None, i64::MAX, bytes).unwrap();
        assert_eq!(f.batches.bytes.len(), bytes.len(), "a partial batch");
        f.batches
    }
}

/// What [`follow`] kept of a record set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed<'a> {
    pub batches: VerifiedBatches<'a>,
    /// Bytes of a partial batch dropped at the end.
    pub partial_bytes: usize,
    /// Where the next fetch starts: after the last kept batch, or the fetch offset.
    pub next_offset: i64,
    /// Why the batches after the kept ones were refused (a batch reaching the high watermark).
    pub refused: Option<String>,
}

/// Why nothing of a record set may be appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfollowable {
    /// A bad checksum or framing, a header that makes no sense, a batch that does not end
    /// below the high watermark.
    InvalidData(String),
    /// The offsets do not follow the local log or each other.
    OffsetMismatch(String),
}

/// Checks the `records` of `name` fetched at `fetch_offset` for a log whose batches end at
/// `data_end` (`None` when it holds none: then the first batch may begin before the fetch
/// offset, as a start inside a batch does), against the `high_watermark` the same response
/// reports.
pub fn follow<'a>(
    name: &dyn Display,
    fetch_offset: i64,
    data_end: Option<i64>,
    high_watermark: i64,
    records: &'a [u8],
) -> Result<Followed<'a>, Unfollowable> {
    let mut it = BatchIter::new(records, MAX_BATCH_SIZE);
    let mut headers: Vec<BatchHeader> = Vec::new();
    let mut start = None;
    let mut end = 0;
    let mut refused = None;
    for (h, pos, bytes) in it.by_ref() {
        let prev = headers.last().map(|p| p.last_offset);
        if prev.is_none() && h.last_offset < fetch_offset {
            continue; // before our position
        }
        if prev.is_none()
            && let Some(end) = data_end
            && h.base_offset < end
        {
            return Err(Unfollowable::OffsetMismatch(format!(
                "{name}: leader sent a batch with offsets {}..{} that starts below the local log end {end}; nothing written",
                h.base_offset, h.last_offset
            )));
        }
        check_follows(prev, &h)
            .map_err(|e| Unfollowable::OffsetMismatch(format!("{name}: {e}; nothing written")))?;
        if h.last_offset >= high_watermark {
            let what = format!(
                "{name}: leader sent a batch at offset {} (offsets {}..{}) reaching the high watermark {high_watermark} it reported",
                h.base_offset, h.base_offset, h.last_offset
            );
            if headers.is_empty() {
                return Err(Unfollowable::InvalidData(format!(
                    "{what}; nothing written"
                )));
            }
            // The batches before it are committed and valid: they are appended, the rest not.
            refused = Some(format!("{what}; not appended"));
            break;
        }
        h.verify_crc(bytes)
            .map_err(|e| Unfollowable::InvalidData(format!("{name}: {e}; nothing written")))?;
        start.get_or_insert(pos);
        end = pos + h.size_in_bytes;
        headers.push(h);
    }
    let partial_bytes = match it.end() {
        Some(SetEnd::Corrupt { position, reason }) => {
            return Err(Unfollowable::InvalidData(format!(
                "{name}: corrupt record set from the leader at byte {position}: {reason}; nothing written"
            )));
        }
        Some(SetEnd::Partial { bytes }) => *bytes,
        _ => 0,
    };
    let next_offset = headers
        .last()
        .map_or(fetch_offset, |h| h.last_offset + 1)
        .max(fetch_offset);
    let bytes = records.get(start.unwrap_or(end)..end).unwrap_or_default();
    Ok(Followed {
        batches: VerifiedBatches { bytes, headers },
        partial_bytes,
        next_offset,
        refused,
    })
}
