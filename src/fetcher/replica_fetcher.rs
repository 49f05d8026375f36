//! The replica side of the fetch loop: verify what the leader sent
//! ([`crate::record::verified::follow`]), append it verbatim.
//!
//! What validation found (the batches to append, the next fetch offset, the last epoch) goes
//! to the fetch loop as a [`Followed`], which the loop reads only through [`ValidatedFetch`]:
//! it never walks record bytes itself.

use super::leader_endpoint::Identity;
use super::replica_ops::{ReplicaOps, ValidatedFetch};
use crate::checkpoint::TopicPartition;
use crate::live::Live;
use crate::log::AppendError;
use crate::log::manager::{LogManager, lock_log};
use crate::protocol::fetch::FetchPartitionResponse;
use crate::record::verified::{Followed, follow};
use anyhow::{Context, Result};
use std::sync::Arc;

impl ValidatedFetch for Followed<'_> {
    fn next_fetch_offset(&self) -> i64 {
        self.next_offset
    }
    fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }
    fn last_epoch(&self) -> Option<i32> {
        self.batches
            .headers()
            .last()
            .map(|h| h.partition_leader_epoch)
            .filter(|e| *e >= 0)
    }
}

/// Checks the records of `tp` fetched at `fetch_offset` for a log whose batches end at
/// `data_end`.
pub fn validate<'a>(
    tp: &TopicPartition,
    fetch_offset: i64,
    data_end: Option<i64>,
    data: &FetchPartitionResponse<'a>,
) -> Result<Followed<'a>, AppendError> {
    let hw = data.high_watermark;
    Ok(follow(tp, fetch_offset, data_end, hw, data.records)?)
}

/// [`ReplicaOps`] over the local logs.
pub struct ReplicaLogOps {
    logs: Arc<LogManager>,
    /// Where appends are reported (the process's live state, handed over by the manager).
    live: &'static Live,
    /// A truncation happened since the checkpoint files were last rewritten.
    checkpoint_due: bool,
}

impl ReplicaLogOps {
    pub fn new(logs: Arc<LogManager>, live: &'static Live) -> Self {
        ReplicaLogOps {
            logs,
            live,
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
    type Validated<'a> = Followed<'a>;

    fn validate<'a>(
        &self,
        tp: &TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'a>,
    ) -> Result<Followed<'a>, AppendError> {
        let data_end = lock_log(&self.log(tp)?).data_end_offset();
        validate(tp, fetch_offset, data_end, data)
    }

    fn append<'a>(
        &mut self,
        tp: &TopicPartition,
        fetch_offset: i64,
        v: Followed<'a>,
        data: &FetchPartitionResponse<'a>,
    ) -> Result<i64, AppendError> {
        let shared = self.log(tp)?;
        let mut log = lock_log(&shared);
        if log.log_end_offset() != fetch_offset {
            return Err(AppendError::OffsetMismatch(format!(
                "{tp}: fetched at {fetch_offset} but the local log ends at {}",
                log.log_end_offset()
            )));
        }
        let headers = v.batches.headers();
        if headers.is_empty() && v.partial_bytes > 0 && v.partial_bytes == data.records.len() {
            crate::log_debug!(
                "{tp}: only a partial batch of {} bytes at {fetch_offset}; partition_max_bytes may be below the batch size",
                v.partial_bytes
            );
        }
        let bytes = v.batches.bytes();
        if !headers.is_empty() {
            self.logs
                .disk()
                .admit(bytes.len() as u64)
                .map_err(AppendError::DiskFull)?;
            match log.append(&v.batches) {
                Err(AppendError::DiskFull(why)) => {
                    // The write was cut back to its last whole batch; the disk pauses every
                    // partition of the data dir.
                    self.logs.disk().on_no_space();
                    return Err(AppendError::DiskFull(why));
                }
                Err(AppendError::Exhausted(why)) => {
                    // A roll cut back for want of descriptors: the process's limit, not this
                    // partition's storage.
                    crate::log::resources::descriptors::report(&format!("{tp}: {why}"));
                    return Err(AppendError::Exhausted(why));
                }
                other => other?,
            }
        }
        log.update_high_watermark(data.high_watermark);
        let live = self.live;
        live.log_start(tp, log.log_start_offset());
        if !headers.is_empty() {
            live.appended(tp, bytes.len() as u64, headers.len() as u64);
        }
        live.fetched(
            tp,
            data.high_watermark,
            data.last_stable_offset,
            log.log_end_offset(),
            log.high_watermark(),
            headers.iter().map(|h| h.max_timestamp).max(),
        );
        // The leader's log start moving up (its retention, DeleteRecords) does not delete local
        // data: local deletion is this replica's own retention's job, and `-1` keeps
        // everything, which is what a backup or archive is for.
        let end = log.log_end_offset();
        drop(log);
        // Readers long-polling this replica (`[serve]`) may now have data.
        self.logs.appended().notify();
        Ok(end)
    }

    fn paused(&self) -> bool {
        self.logs.disk().admit(0).is_err()
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

    fn fetch_position(&self, tp: &TopicPartition) -> (Option<i64>, Option<i32>) {
        match self.logs.get(tp) {
            Some(l) => {
                let log = lock_log(&l);
                (Some(log.log_start_offset()), log.latest_epoch())
            }
            None => (None, None),
        }
    }

    fn position_moves(&self) -> u64 {
        crate::log::partition::position_moves()
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

    fn truncate(&mut self, tp: &TopicPartition, offset: i64, reason: &str) -> Result<()> {
        let shared = self.log(tp)?;
        let mut log = lock_log(&shared);
        let end = log.log_end_offset();
        log.truncate_to(offset, reason)?;
        // Only a truncation that removed something can leave checkpoints past the log end.
        self.checkpoint_due |= log.log_end_offset() != end;
        Ok(())
    }

    fn identity(&self, tp: &TopicPartition) -> Identity {
        Identity {
            cluster_id: crate::log::identity::read_cluster_id(self.logs.data_dir())
                .ok()
                .flatten(),
            topic_id: self.logs.get(tp).and_then(|l| lock_log(&l).topic_id()),
        }
    }

    fn mark_failed(&mut self, tp: &TopicPartition, reason: &str) {
        self.logs.mark_failed(tp, reason);
    }

    fn skip_to(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.checkpoint_due = true;
        lock_log(&self.log(tp)?).skip_lost_upstream(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::batch::set_v2_base_offset;
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

    /// A non-empty local log ending at `end`.
    fn at(end: i64) -> Option<i64> {
        Some(end)
    }
    const EMPTY: Option<i64> = None;

    const HW: i64 = i64::MAX;

    fn check(
        fetch: i64,
        data_end: Option<i64>,
        hw: i64,
        set: &[u8],
    ) -> Result<Followed<'_>, AppendError> {
        Ok(follow(&tp(), fetch, data_end, hw, set)?)
    }

    #[test]
    fn contiguous_batches_validate_and_partial_tail_is_dropped() {
        let mut set = batch(10, 5);
        set.extend(batch(15, 5));
        let whole = set.len();
        let third = batch(20, 5);
        set.extend_from_slice(&third[..third.len() - 3]);
        let v = check(10, at(10), HW, &set).unwrap();
        assert_eq!(v.batches.bytes(), &set[..whole]);
        assert_eq!(v.batches.headers().len(), 2);
        assert_eq!(v.partial_bytes, third.len() - 3);
        assert_eq!(v.next_offset, 20);
    }

    #[test]
    fn batches_before_the_offset_are_skipped() {
        let a = batch(0, 5);
        let mut set = a.clone();
        set.extend(batch(5, 5));
        let v = check(7, EMPTY, HW, &set).unwrap();
        assert_eq!(v.batches.bytes(), &set[a.len()..]);
        assert_eq!(
            v.batches.headers()[0].base_offset,
            5,
            "an empty log may start mid-batch"
        );
        // A non-empty log never takes a batch that starts below its end.
        let e = check(7, at(7), HW, &set).unwrap_err();
        assert!(matches!(e, AppendError::OffsetMismatch(_)), "{e}");
        assert!(e.to_string().contains("5..9"), "{e}");
    }

    #[test]
    fn gaps_between_batches_are_legitimate_and_move_the_next_fetch() {
        // Compaction: 0..4, then 8..9 (5..7 removed), then an empty batch keeping 10..14.
        let mut set = batch(0, 5);
        set.extend(batch(8, 2));
        let mut empty = build_v2_batch(10, 0, &[]);
        empty[23..27].copy_from_slice(&4i32.to_be_bytes());
        let crc = crc32c::crc32c(&empty[21..]);
        empty[17..21].copy_from_slice(&crc.to_be_bytes());
        set.extend(&empty);
        // The fetch starts at 3 and the first batch after a gap may start above it too.
        let v = check(0, at(0), HW, &set).unwrap();
        assert_eq!(v.batches.headers().len(), 3);
        assert_eq!(v.next_offset, 15, "the empty batch keeps its offsets");
        let v = check(6, at(6), HW, &set[batch(0, 5).len()..]).unwrap();
        assert_eq!(v.batches.headers()[0].base_offset, 8);
        assert_eq!(v.next_offset, 15);
    }

    #[test]
    fn an_overlap_or_a_step_back_between_batches_is_refused() {
        let mut set = batch(0, 5);
        set.extend(batch(4, 5));
        assert!(matches!(
            check(0, at(0), HW, &set),
            Err(AppendError::OffsetMismatch(_))
        ));
        let mut set = batch(5, 5);
        set.extend(batch(0, 3));
        assert!(check(5, at(5), HW, &set).is_err());
    }

    #[test]
    fn a_batch_at_or_beyond_the_reported_high_watermark_is_refused() {
        let mut set = batch(0, 5);
        set.extend(batch(5, 5));
        // The batch below the HW is kept; the one reaching it is refused, naming it.
        let v = check(0, at(0), 5, &set).unwrap();
        assert_eq!(v.batches.headers().len(), 1);
        assert_eq!(v.next_offset, 5);
        let e = v.refused.unwrap();
        assert!(
            e.contains("offset 5") && e.contains("high watermark 5"),
            "{e}"
        );
        // Alone, it is an error.
        let e = check(5, at(5), 5, &set[batch(0, 5).len()..])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("offset 5") && e.contains("nothing written"),
            "{e}"
        );
        assert_eq!(
            check(0, at(0), 10, &set).unwrap().batches.headers().len(),
            2
        );
        // A batch straddling the HW does not end below it either.
        let e = check(0, at(0), 7, &set).unwrap().refused.unwrap();
        assert!(
            e.contains("offsets 5..9") && e.contains("high watermark 7"),
            "{e}"
        );
    }

    #[test]
    fn negative_base_offsets_and_record_counts_are_corrupt_naming_the_offset() {
        let mut neg = batch(0, 3);
        set_v2_base_offset(&mut neg, -7);
        let e = check(0, EMPTY, HW, &neg).unwrap_err();
        assert!(matches!(e, AppendError::InvalidData(_)));
        assert!(e.to_string().contains("-7"), "{e}");
        let mut count = batch(0, 3);
        count[57..61].copy_from_slice(&(-1i32).to_be_bytes());
        let e = check(0, at(0), HW, &count).unwrap_err().to_string();
        assert!(e.contains("offset 0") && e.contains("records"), "{e}");
    }

    #[test]
    fn uncompressed_legacy_messages_follow_the_same_rule() {
        // Reference vector E: magic 1, offset 0, uncompressed; the CRC does not cover the offset.
        let e = crate::record::batch::tests::unhex(
            "0000000000000000 0000001b a584f508 01 00 0000018bcfe56800 ffffffff 00000005 76616c7565",
        );
        let at_offset = |o: i64| {
            let mut m = e.clone();
            m[..8].copy_from_slice(&o.to_be_bytes());
            m
        };
        let ok = [at_offset(0), at_offset(1), at_offset(3)].concat();
        assert_eq!(check(0, at(0), HW, &ok).unwrap().batches.headers().len(), 3);
        let back = [at_offset(1), at_offset(1)].concat();
        assert!(check(0, at(0), HW, &back).is_err());
    }

    #[test]
    fn a_crc_failure_anywhere_writes_nothing() {
        let mut set = batch(0, 5);
        set.extend(batch(5, 5));
        let last = set.len() - 1;
        set[last] ^= 0x40;
        let e = check(0, at(0), HW, &set).unwrap_err();
        assert!(matches!(e, AppendError::InvalidData(_)));
        let e = e.to_string();
        assert!(e.contains("CRC") && e.contains("t-0"), "{e}");
    }

    #[test]
    fn a_corrupt_tail_is_an_error_and_empty_is_fine() {
        let mut set = batch(0, 5);
        set.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 0, 0]);
        assert!(check(0, at(0), HW, &set).is_err());
        let v = check(0, at(0), HW, &[]).unwrap();
        assert!(v.batches.headers().is_empty());
        assert_eq!(v.next_offset, 0);
    }

    /// What the checkpoint files of `data` claim for [`tp`]: (high watermark, recovery point,
    /// log start).
    fn claimed(data: &std::path::Path) -> (i64, i64, i64) {
        use crate::checkpoint::read_offsets;
        use crate::log::data_dir::DataDir;
        let read = |name: &str| read_offsets(&data.join(name)).unwrap()[&tp()];
        (
            read(DataDir::REPLICATION_OFFSET),
            read(DataDir::RECOVERY_POINT),
            read(DataDir::LOG_START_OFFSET),
        )
    }

    #[test]
    fn every_change_the_fetcher_makes_reaches_the_next_checkpoint() {
        use crate::log::touched::Pass;
        use crate::protocol::error::ErrorCode;
        let d = tempfile::tempdir().unwrap();
        let logs = Arc::new(LogManager::open(d.path(), Default::default()).unwrap());
        assert!(logs.create_logs(&[(tp(), 0, None)])[0].1.is_ok());
        logs.checkpoint().unwrap();
        let mut ops = ReplicaLogOps::new(logs.clone(), crate::live::live());
        // A checkpoint: how many logs it visited, and what it claims.
        let checkpoint = || {
            logs.checkpoint().unwrap();
            (logs.last_visits(Pass::Checkpoint), claimed(d.path()))
        };
        let fetched = |ops: &mut ReplicaLogOps, offset: i64, hw: i64, records: &[u8]| {
            let data = FetchPartitionResponse {
                partition: 0,
                error: ErrorCode::NONE,
                high_watermark: hw,
                last_stable_offset: hw,
                log_start_offset: 0,
                aborted_transactions: None,
                diverging_epoch: None,
                current_leader: None,
                records,
            };
            let v = ops.validate(&tp(), offset, &data).unwrap();
            ops.append(&tp(), offset, v, &data).unwrap()
        };
        assert_eq!(checkpoint(), (0, (0, 0, 0)));
        assert_eq!(
            fetched(&mut ops, 0, 20, &[batch(0, 5), batch(5, 5)].concat()),
            10
        );
        assert_eq!(checkpoint(), (1, (10, 10, 0)));
        // An empty response reporting the same high watermark changes nothing.
        assert_eq!(fetched(&mut ops, 10, 20, &[]), 10);
        assert_eq!(checkpoint(), (0, (10, 10, 0)));
        ops.truncate(&tp(), 5, "test").unwrap();
        assert_eq!(checkpoint(), (1, (5, 5, 0)));
        ops.skip_to(&tp(), 100).unwrap();
        assert_eq!(checkpoint(), (1, (5, 100, 0)));
        // The high watermark alone.
        assert_eq!(fetched(&mut ops, 100, 120, &[]), 100);
        assert_eq!(checkpoint(), (1, (100, 100, 0)));
        ops.mark_failed(&tp(), "test");
        assert_eq!(checkpoint(), (1, (100, 100, 0)));
        assert_eq!(checkpoint(), (0, (100, 100, 0)));
        assert!(!logs.shutdown().unwrap(), "failed: not a clean shutdown");
    }
}
