//! The replica side of the fetch loop: verify what the leader sent, append it verbatim.
//!
//! [`validate_fetched`] walks a partition's records and decides which bytes may be appended:
//! - batches that end before the fetch offset are skipped (a leader may start a response at
//!   the batch holding the offset, or before it for legacy compressed sets);
//! - the first kept batch must hold the fetch offset, and every later one must start right
//!   after the one before (no gap, no overlap);
//! - every kept batch's CRC must verify;
//! - a partial batch at the end is dropped (it is fetched again whole next time); a corrupt
//!   tail (bad size or magic) is an error.
//!
//! Any failure rejects the whole response for that partition: nothing is written, the
//! partition backs off and fetches again.

use super::abstract_fetcher::ReplicaOps;
use crate::checkpoint::TopicPartition;
use crate::log::manager::{LogManager, lock_log};
use crate::log::segment::MAX_BATCH_SIZE;
use crate::protocol::fetch::FetchPartitionResponse;
use crate::record::{BatchHeader, BatchIter, SetEnd};
use anyhow::{Context, Result, bail};
use std::ops::Range;
use std::sync::Arc;

/// The bytes of a fetch response that may be appended, and their batch headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedRecords {
    pub range: Range<usize>,
    pub headers: Vec<BatchHeader>,
    /// Bytes of a partial batch dropped at the end.
    pub partial_bytes: usize,
}

pub fn validate_fetched(
    tp: &TopicPartition,
    fetch_offset: i64,
    records: &[u8],
) -> Result<ValidatedRecords> {
    let mut it = BatchIter::new(records, MAX_BATCH_SIZE);
    let mut headers = Vec::new();
    let mut start = None;
    let mut end = 0;
    let mut expected = fetch_offset;
    for (h, pos, bytes) in it.by_ref() {
        if headers.is_empty() && h.last_offset < fetch_offset {
            continue; // before our position
        }
        let continues = if headers.is_empty() {
            h.contains(expected) || (h.is_legacy_wrapper() && h.last_offset >= expected)
        } else {
            h.base_offset == expected || (h.is_legacy_wrapper() && h.last_offset >= expected)
        };
        if !continues {
            bail!(
                "{tp}: leader sent a batch with offsets {}..{} where offset {expected} was expected",
                h.base_offset,
                h.last_offset
            );
        }
        h.verify_crc(bytes)
            .map_err(|e| anyhow::anyhow!("{tp}: {e}; nothing written"))?;
        start.get_or_insert(pos);
        end = pos + h.size_in_bytes;
        expected = h.last_offset + 1;
        headers.push(h);
    }
    let partial_bytes = match it.end() {
        Some(SetEnd::Corrupt { position, reason }) => {
            bail!(
                "{tp}: corrupt record set from the leader at byte {position}: {reason}; nothing written"
            )
        }
        Some(SetEnd::Partial { bytes }) => *bytes,
        _ => 0,
    };
    let start = start.unwrap_or(end);
    Ok(ValidatedRecords {
        range: start..end,
        headers,
        partial_bytes,
    })
}

/// [`ReplicaOps`] over the local logs.
pub struct ReplicaLogOps {
    logs: Arc<LogManager>,
    /// A truncation happened since the checkpoint files were last rewritten.
    checkpoint_due: bool,
}

impl ReplicaLogOps {
    pub fn new(logs: Arc<LogManager>) -> Self {
        ReplicaLogOps {
            logs,
            checkpoint_due: false,
        }
    }

    fn log(&self, tp: &TopicPartition) -> Result<crate::log::manager::SharedLog> {
        self.logs
            .get(tp)
            .with_context(|| format!("{tp}: no local log"))
    }
}

impl ReplicaOps for ReplicaLogOps {
    fn process_partition_data(
        &mut self,
        tp: &TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'_>,
    ) -> Result<i64> {
        let v = validate_fetched(tp, fetch_offset, data.records)?;
        let shared = self.log(tp)?;
        let mut log = lock_log(&shared);
        if log.log_end_offset() != fetch_offset {
            bail!(
                "{tp}: fetched at {fetch_offset} but the local log ends at {}",
                log.log_end_offset()
            );
        }
        if v.headers.is_empty() && v.partial_bytes > 0 && v.partial_bytes == data.records.len() {
            crate::log_debug!(
                "{tp}: only a partial batch of {} bytes at {fetch_offset}; partition_max_bytes may be below the batch size",
                v.partial_bytes
            );
        }
        if !v.headers.is_empty() {
            let bytes = data.records.get(v.range.clone()).unwrap_or_default();
            log.append(bytes, &v.headers)?;
        }
        log.update_high_watermark(data.high_watermark);
        // The leader's log start moving up (its retention, DeleteRecords) does not delete local
        // data: local deletion is this replica's own retention's job, and `-1` keeps
        // everything, which is what a backup or archive is for. A log whose end falls below
        // the leader's start is reset by the OffsetOutOfRange rule instead.
        Ok(log.log_end_offset())
    }

    fn log_start_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.logs.get(tp).map(|l| lock_log(&l).log_start_offset())
    }

    fn log_end_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.logs.get(tp).map(|l| lock_log(&l).log_end_offset())
    }

    fn latest_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        self.logs.get(tp).and_then(|l| lock_log(&l).latest_epoch())
    }

    fn end_offset_for_epoch(&self, tp: &TopicPartition, epoch: i32) -> Option<(i32, i64)> {
        self.logs
            .get(tp)
            .and_then(|l| lock_log(&l).end_offset_for_epoch(epoch))
    }

    /// The checkpoint files may name offsets the truncations just removed: rewrite them now,
    /// once, rather than at the next interval, so they never pass a log's end.
    fn after_truncations(&mut self) {
        if std::mem::take(&mut self.checkpoint_due)
            && let Err(e) = self.logs.checkpoint()
        {
            crate::log_error!("checkpoint after truncation failed: {e:#}");
        }
    }

    fn truncate(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        let shared = self.log(tp)?;
        let mut log = lock_log(&shared);
        let end = log.log_end_offset();
        log.truncate_to(offset)?;
        // Only a truncation that removed something can leave checkpoints past the log end.
        self.checkpoint_due |= log.log_end_offset() != end;
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.checkpoint_due = true;
        lock_log(&self.log(tp)?).truncate_fully_and_start_at(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::records::{NewRecord, build_v2_batch};

    fn batch(base: i64, n: usize) -> Vec<u8> {
        let recs: Vec<NewRecord<'_>> = (0..n)
            .map(|i| NewRecord {
                key: None,
                value: Some(b"v"),
                timestamp: i as i64,
            })
            .collect();
        build_v2_batch(base, 0, &recs)
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    #[test]
    fn contiguous_batches_validate_and_partial_tail_is_dropped() {
        let mut set = batch(10, 5);
        set.extend(batch(15, 5));
        let whole = set.len();
        let third = batch(20, 5);
        set.extend_from_slice(&third[..third.len() - 3]);
        let v = validate_fetched(&tp(), 10, &set).unwrap();
        assert_eq!(v.range, 0..whole);
        assert_eq!(v.headers.len(), 2);
        assert_eq!(v.partial_bytes, third.len() - 3);
    }

    #[test]
    fn batches_before_the_offset_are_skipped_and_the_first_must_hold_it() {
        let a = batch(0, 5);
        let mut set = a.clone();
        set.extend(batch(5, 5));
        let v = validate_fetched(&tp(), 7, &set).unwrap();
        assert_eq!(v.range, a.len()..set.len());
        assert_eq!(v.headers[0].base_offset, 5);
        // a gap: expected 3, got a batch starting at 5
        let e = validate_fetched(&tp(), 3, &batch(5, 5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected"), "{e}");
    }

    #[test]
    fn a_gap_or_overlap_between_batches_is_refused() {
        let mut set = batch(0, 5);
        set.extend(batch(6, 5));
        assert!(validate_fetched(&tp(), 0, &set).is_err());
        let mut set = batch(0, 5);
        set.extend(batch(4, 5));
        assert!(validate_fetched(&tp(), 0, &set).is_err());
    }

    #[test]
    fn uncompressed_legacy_messages_must_be_contiguous_too() {
        // Reference vector E: magic 1, offset 0, uncompressed; the CRC does not cover the offset.
        let e = crate::record::batch::tests::unhex(
            "0000000000000000 0000001b a584f508 01 00 0000018bcfe56800 ffffffff 00000005 76616c7565",
        );
        let at = |o: i64| {
            let mut m = e.clone();
            m[..8].copy_from_slice(&o.to_be_bytes());
            m
        };
        let ok = [at(0), at(1)].concat();
        assert_eq!(validate_fetched(&tp(), 0, &ok).unwrap().headers.len(), 2);
        let gap = [at(0), at(2)].concat();
        assert!(validate_fetched(&tp(), 0, &gap).is_err());
    }

    #[test]
    fn a_crc_failure_anywhere_writes_nothing() {
        let mut set = batch(0, 5);
        let first = set.len();
        set.extend(batch(5, 5));
        let last = set.len() - 1;
        set[last] ^= 0x40;
        let e = validate_fetched(&tp(), 0, &set).unwrap_err().to_string();
        assert!(e.contains("CRC") && e.contains("t-0"), "{e}");
        assert!(first > 0);
    }

    #[test]
    fn a_corrupt_tail_is_an_error_and_empty_is_fine() {
        let mut set = batch(0, 5);
        set.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 0, 0]);
        assert!(validate_fetched(&tp(), 0, &set).is_err());
        let v = validate_fetched(&tp(), 0, &[]).unwrap();
        assert!(v.headers.is_empty());
    }
}
