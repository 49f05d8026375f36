//! Truncation of a partition's log (Kafka's `UnifiedLog.truncateTo`): cutting it back to an
//! offset, with the committed bytes it removes kept in `diverged/` first, and skipping
//! forward past offsets the leader no longer has.

use super::{PartitionLog, note_position_moved};
use crate::checkpoint::{self, fsync_dir};
use crate::clock::now_ms;
use crate::log::data_dir::DataDir;
use crate::log::format::segment::Segment;
use crate::log::touched::Pass;
use anyhow::Result;
use std::path::PathBuf;

/// What a truncation removes: (segment file, byte position, length) of each run, and the
/// first and last offset in them.
struct Removed {
    runs: Vec<(PathBuf, u64, u64)>,
    first_offset: i64,
    last_offset: i64,
}

impl PartitionLog {
    /// Removes every offset ≥ `offset` (no-op when the log ends at or below it). When the
    /// removed batches begin below the high watermark — committed data, perhaps the last copy
    /// after an unclean election — their bytes are first copied into `diverged/` and fsynced
    /// ([`crate::log::format::diverged`]): every byte from the cut to the end of each file,
    /// whether it parses or not. Only then is the log cut. A cut below the first segment leaves an empty
    /// log starting at `offset` (Kafka's `truncateFullyAndStartAt`). `reason` goes into the
    /// record of it. A negative offset is refused.
    pub fn truncate_to(&mut self, offset: i64, reason: &str) -> Result<()> {
        if offset < 0 {
            anyhow::bail!(
                "{}: refusing to truncate to the negative offset {offset} ({reason})",
                self.tp
            );
        }
        if let Some(why) = &self.failed {
            anyhow::bail!("{} is failed ({why}); not truncating it", self.tp);
        }
        self.generation += 1;
        // Even a truncation that removes nothing voids a flush in flight.
        self.touch(&Pass::ALL);
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        let removed = self.removed_from(offset)?;
        if let Some(r) = &removed {
            let (first, last) = (r.first_offset, r.last_offset);
            if first < self.high_watermark {
                let kept = crate::log::format::diverged::keep(&self.dir, &r.runs, first, last)?;
                crate::log_error!(
                    "{}: truncating offsets {first}..{last}, below the high watermark {} ({reason}); the removed batches are kept in `{}`",
                    self.tp,
                    self.high_watermark,
                    kept.display()
                );
                crate::log::format::diverged::test_pause_point("diverged-copied");
            } else {
                crate::log_warn!(
                    "{}: truncating uncommitted offsets {first}..{last} ({reason})",
                    self.tp
                );
            }
        }
        let cut = self.cut_segments(offset);
        // Whatever part of the cut happened, the figures follow the log as it now is before
        // anything else can fail: a partition failed midway must never resume with a recovery
        // point (or a high watermark) past its end, which would claim unsynced bytes.
        let leo = self.log_end_offset();
        self.log_start_offset = self.log_start_offset.min(leo);
        note_position_moved();
        // By the new log end, not the target: a cut inside a gap ends the log below it.
        self.epochs.truncate_from_end(leo);
        self.recovery_point = self.recovery_point.min(leo);
        self.high_watermark = self.high_watermark.min(leo).max(self.log_start_offset);
        // Offsets the leader lost that lie past the cut may be fetched from it again.
        let lost: Vec<(i64, i64)> = self
            .lost
            .iter()
            .filter(|(a, _)| *a < leo)
            .map(|&(a, b)| (a, b.min(leo - 1)))
            .collect();
        let lost_changed = lost != self.lost;
        self.lost = lost;
        // Transactions opened or closed by the removed batches are undone.
        let rebuilt = self.rebuild_producer_state(leo, i64::MAX);
        cut?;
        rebuilt?;
        if lost_changed {
            checkpoint::write_ranges(&self.dir.join(DataDir::LOST_UPSTREAM), &self.lost)?;
        }
        // The epochs are written now, not at the next checkpoint: after a crash, a stale
        // epoch file would describe offsets this log no longer holds.
        self.checkpoint_epochs()?;
        Ok(())
    }

    /// The file side of [`Self::truncate_to`]: deletes the segments past `offset` and cuts
    /// the one holding it, in an order that survives a crash at any point.
    fn cut_segments(&mut self, offset: i64) -> Result<()> {
        // The segment that survives holds the cut: the last one based at or below `offset`.
        // Without one, a new empty segment at `offset` is made first, so that a crash leaves
        // it, the old segments, or both — never no segment. Then newest first: a crash part-way
        // leaves a shorter log, never one with a hole.
        let survivor = self.segments.range(..=offset).next_back().map(|(b, _)| *b);
        if survivor.is_none() {
            let seg = self.new_segment(offset)?;
            let old: Vec<i64> = self.segments.keys().copied().collect();
            // The new segment is in the map before any old one leaves it: the map is never
            // empty, even when a delete fails part-way.
            self.segments.insert(offset, Box::new(seg));
            for b in old.iter().rev() {
                if let Some(s) = self.segments.remove(b) {
                    s.delete()?;
                }
            }
            fsync_dir(&self.dir)?;
        } else {
            let doomed: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
            for b in doomed.iter().rev() {
                if let Some(seg) = self.segments.remove(b) {
                    seg.delete()?;
                }
            }
            // The deletions are durable before the survivor is cut: after a power loss the
            // later segments cannot come back above a cut.
            fsync_dir(&self.dir)?;
            self.active_mut().truncate_to(offset)?;
        }
        self.active_mut().flush()?;
        fsync_dir(&self.dir)
    }

    /// A new empty segment at `base`, its directory entry fsynced (for a truncation or a
    /// skip that replaces the segments; a roll cleans up after itself instead).
    fn new_segment(&self, base: i64) -> Result<Segment> {
        let seg = Segment::create(&self.dir, base, self.config.index_interval_bytes, now_ms())?;
        fsync_dir(&self.dir)?;
        Ok(seg)
    }

    /// What a truncation to `offset` removes: the byte ranges (from the cut to the end of each
    /// affected file) and the offsets they hold. `None` when nothing is removed.
    fn removed_from(&mut self, offset: i64) -> Result<Option<Removed>> {
        let mut runs = Vec::new();
        let mut first = None;
        let mut last = None;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for (i, base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if next <= offset {
                continue; // every batch of this segment ends before the next base
            }
            let Some(seg) = self.segments.get_mut(base) else {
                continue;
            };
            if seg.is_empty() {
                continue;
            }
            let start = if *base > offset {
                if first.is_none() {
                    first = seg.first_batch()?.map(|h| h.base_offset);
                }
                0
            } else {
                match seg.cut_point(offset)? {
                    Some((pos, h)) => {
                        first = Some(h.base_offset);
                        pos
                    }
                    None => continue,
                }
            };
            runs.push((seg.log_path().to_path_buf(), start, seg.size() - start));
            last = Some(seg.next_offset() - 1);
        }
        Ok(last.map(|last| Removed {
            runs,
            first_offset: first.unwrap_or(offset).min(last),
            last_offset: last,
        }))
    }

    /// The leader no longer holds the offsets from the log end up to `offset` (its retention or
    /// DeleteRecords passed this replica): every local batch stays, the range is recorded as
    /// lost upstream, and the log continues at `offset` in a new segment — a gap, as
    /// compaction leaves them. An empty log simply moves its start.
    pub fn skip_lost_upstream(&mut self, offset: i64) -> Result<()> {
        let leo = self.log_end_offset();
        if offset <= leo {
            return Ok(());
        }
        self.generation += 1;
        self.touch(&Pass::ALL);
        let empty = self.is_empty();
        if empty {
            crate::log_warn!(
                "{}: the leader's log starts at {offset}; the empty local log moves its start there from {leo}",
                self.tp
            );
        } else {
            crate::log_error!(
                "{}: offsets {leo}..{} are lost upstream: the leader's log now starts at {offset} (its retention or DeleteRecords passed this replica); every local batch is kept and the log continues at {offset}",
                self.tp,
                offset - 1
            );
            if self.lost.last() != Some(&(leo, offset - 1)) {
                self.lost.push((leo, offset - 1));
                checkpoint::write_ranges(&self.dir.join(DataDir::LOST_UPSTREAM), &self.lost)?;
            }
            let open = self.producers.open_transactions().len();
            if open > 0 {
                crate::log_warn!(
                    "{}: {open} open transaction(s) may have ended in the lost offsets; they no longer hold back the last stable offset",
                    self.tp
                );
                self.producers.clear();
            }
        }
        if self.active().is_empty() {
            // An empty active segment holds nothing: the new one takes its place. Created
            // first, so that a crash leaves one or the other, never no segment.
            let base = self.active().base_offset;
            let seg = self.new_segment(offset)?;
            if let Some(old) = self.segments.remove(&base) {
                old.delete()?;
                fsync_dir(&self.dir)?;
            }
            self.segments.insert(offset, Box::new(seg));
        } else {
            self.roll(offset, now_ms())?;
        }
        if empty {
            self.log_start_offset = offset;
            note_position_moved();
            self.high_watermark = offset;
            self.recovery_point = offset;
            self.epochs.clear();
            self.checkpoint_epochs()?;
        }
        Ok(())
    }
}
