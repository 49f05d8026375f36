//! `replica-follower verify --config FILE --against-leader`: every followed partition with a
//! local log compared with its leader over the offsets the leader still holds
//! ([`crate::repair::check_all`]), one line per finding:
//!
//! ```text
//! orders-0: hole: offsets 300..449 (3 batch(es), 18000 bytes) are on the leader but not in the replica, between `…/00000000000000000000.log` and `…/00000000000000000450.log`
//! orders-0: damaged: `…/00000000000000000450.log` byte 4096: batch 470..479 fails its own checksum (…); the leader's copy is intact
//! orders-0: differs: `…` byte 0: batch 450..459 (CRC 1a2b3c4d, epoch 0, 512 bytes) is not the leader's 450..459 (CRC …)
//! orders-0: info: batch 120..129 (`…` byte 2048) is no longer on the leader (compaction); kept
//! orders-0: info: batch 130..139 (`…` byte 2560, 10 records, CRC …) was compacted on the leader (4 records left there, CRC …); kept as fetched
//! orders-0: ok: 41 batch(es) over offsets 0..999 match the leader
//! ```
//! Holes, damaged and differing batches are problems (`replica-follower repair` re-fetches
//! them); `info` lines are not. Read-only: no lock is taken, nothing is written.

use crate::config::Config;
use crate::record::BatchHeader;
use crate::repair::compare::Problem;
use crate::repair::{Checked, PartitionCheck, check_all};
use anyhow::Result;
use std::io::Write;

/// What the comparison found, in figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub partitions: usize,
    /// Problem lines printed (holes, damaged or differing batches, partitions not compared).
    pub problems: usize,
}

fn describe_batch(h: &BatchHeader) -> String {
    format!(
        "{}..{} (CRC {:08x}, epoch {}, {} bytes)",
        h.base_offset, h.last_offset, h.crc, h.partition_leader_epoch, h.size_in_bytes
    )
}

/// Prints the findings of one partition; returns how many problem lines it printed.
pub fn render(check: &PartitionCheck, out: &mut dyn Write) -> Result<usize> {
    let tp = &check.tp;
    let c = &check.comparison;
    let seg = |base: Option<i64>| match base {
        Some(b) => format!("`{}`", check.segment_path(b).display()),
        None => "the log's end".to_string(),
    };
    let mut problems = 0;
    for p in &c.problems {
        problems += 1;
        match p {
            Problem::Hole(h) => {
                let place = if h.inside {
                    format!("inside {}", seg(h.before))
                } else if h.before.is_none() {
                    format!("before the first segment {}", seg(h.after))
                } else {
                    format!("between {} and {}", seg(h.before), seg(h.after))
                };
                writeln!(
                    out,
                    "{tp}: hole: offsets {}..{} ({} batch(es), {} bytes) are on the leader but not in the replica, {place}",
                    h.first, h.last, h.batches, h.bytes
                )?;
            }
            Problem::Corrupt { local, leader } => {
                let l = &local.header;
                let leader_side = match leader {
                    Some(lh) if lh.crc == l.crc && lh.size_in_bytes == l.size_in_bytes => {
                        "the leader's copy is intact".to_string()
                    }
                    Some(lh) => format!("the leader's batch there is {}", describe_batch(lh)),
                    None => "the leader does not have it".to_string(),
                };
                writeln!(
                    out,
                    "{tp}: damaged: {} byte {}: batch {}..{} fails its own checksum ({}); {leader_side}",
                    seg(Some(local.segment)),
                    local.position,
                    l.base_offset,
                    l.last_offset,
                    local.crc_error.as_deref().unwrap_or("CRC mismatch")
                )?;
            }
            Problem::Differs { local, leader } => writeln!(
                out,
                "{tp}: differs: {} byte {}: batch {} is not the leader's {}",
                seg(Some(local.segment)),
                local.position,
                describe_batch(&local.header),
                describe_batch(leader)
            )?,
            Problem::Unreadable {
                segment,
                position,
                reason,
            } => writeln!(
                out,
                "{tp}: damaged: {} cannot be read as batches from byte {position}: {reason}",
                seg(Some(*segment))
            )?,
        }
    }
    for (base, n) in &c.unlisted {
        problems += 1;
        writeln!(
            out,
            "{tp}: damaged: {}: … and {n} more problem(s) in this segment",
            seg(Some(*base))
        )?;
    }
    if let Some((first, last, n)) = c.below_leader_start {
        writeln!(
            out,
            "{tp}: info: offsets {first}..{last} ({n} batch(es)) are below the leader's log start {}: it no longer has them (its retention); kept",
            check.leader_start
        )?;
    }
    for b in &c.local_only {
        writeln!(
            out,
            "{tp}: info: batch {}..{} ({} byte {}) is no longer on the leader (compaction); kept",
            b.header.base_offset,
            b.header.last_offset,
            seg(Some(b.segment)),
            b.position
        )?;
    }
    for (b, leader) in &c.compacted {
        let (how, there) = if crate::repair::compare::compacted_on_leader(&b.header, leader) {
            ("was compacted on the leader", "left there")
        } else {
            (
                "was fetched already compacted (an earlier leader had cleaned it)",
                "on the leader",
            )
        };
        writeln!(
            out,
            "{tp}: info: batch {}..{} ({} byte {}, {} records, CRC {:08x}) {how} ({} records {there}, CRC {:08x}); kept as fetched",
            b.header.base_offset,
            b.header.last_offset,
            seg(Some(b.segment)),
            b.position,
            b.header.records_count,
            b.header.crc,
            leader.records_count,
            leader.crc
        )?;
    }
    if c.compacted_count > c.compacted.len() {
        writeln!(
            out,
            "{tp}: info: … and {} more local batch(es) compacted on the leader or before they were fetched; kept as fetched",
            c.compacted_count - c.compacted.len()
        )?;
    }
    if c.local_only_count > c.local_only.len() {
        writeln!(
            out,
            "{tp}: info: … and {} more local batch(es) the leader no longer has; kept",
            c.local_only_count - c.local_only.len()
        )?;
    }
    if check.leader_high_watermark < check.log_end {
        writeln!(
            out,
            "{tp}: info: the leader's high watermark {} is below the local log end {}; local batches from offset {} on are not compared",
            check.leader_high_watermark,
            check.log_end,
            check.bounds.to.max(check.bounds.from)
        )?;
    }
    if problems == 0 {
        let range = if check.bounds.to > check.bounds.from {
            format!("offsets {}..{}", check.bounds.from, check.bounds.to - 1)
        } else {
            "no offsets both hold".to_string()
        };
        writeln!(
            out,
            "{tp}: ok: {} batch(es) over {range} match the leader",
            c.matched
        )?;
    }
    Ok(problems)
}

/// Compares every followed partition with its leader and prints the findings.
pub fn verify(cfg: &Config, out: &mut dyn Write) -> Result<Report> {
    let mut r = Report::default();
    check_all(cfg, |tp, checked| {
        match checked {
            Checked::Compared(check, _) => {
                r.partitions += 1;
                r.problems += render(&check, out)?;
            }
            Checked::Skipped { why, problem } => {
                r.problems += usize::from(problem);
                writeln!(out, "{tp}: {why}")?;
            }
        }
        Ok(())
    })?;
    Ok(r)
}
