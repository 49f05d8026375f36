//! A local log against its leader's, batch header by batch header, in one pass over both.
//!
//! Both sides come in offset order: the local batches segment by segment (each with whether
//! its CRC holds), the leader's as its Fetch answers serve them (headers only). Over the
//! offsets compared — from the leader's log start (or the local start, if later) to
//! min(leader's high watermark, local log end) — each leader batch is
//! - **matched** by a local batch with the same base and last offset, CRC, leader epoch and
//!   size that passes its own CRC;
//! - part of a **hole** when no local batch overlaps it: consecutive ones make one hole,
//!   named with the segment it begins in and the first one after it;
//! - **compacted** when the local batch over the same offsets is the one the leader's log
//!   cleaner rewrote: same offsets, producer, sequence and leader epoch, and the leader's copy
//!   holds fewer records (or as many, newly stamped with a delete horizon) — the replica keeps
//!   what it fetched before the cleaning, and that is reported, not a problem; or the other
//!   way round, when the replica fetched the batch from an earlier leader that had cleaned it
//!   already (every broker cleans its own log, on its own schedule);
//! - or met by a local batch that overlaps it and is not the same: that local batch
//!   **differs** (or is **corrupt**, when it fails its own CRC).
//!
//! A local batch that overlaps no leader batch is one the leader no longer has (compaction
//! or retention): kept, and only reported. A local batch failing its own CRC is damage
//! wherever it lies. Memory holds the findings, not the batches: a damaged segment's
//! problems are listed a few at a time and counted beyond that.

use crate::log::repair::LocalBatch;
use crate::record::BatchHeader;
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};

/// Problems listed per segment; more are counted in [`Comparison::unlisted`].
pub const LISTED_PER_SEGMENT: usize = 3;
/// Local batches the leader no longer has that are listed; more are counted.
pub const LISTED_LOCAL_ONLY: usize = 3;
/// Local batches the leader's log cleaner rewrote that are listed; more are counted.
pub const LISTED_COMPACTED: usize = 3;

/// One item of the local log, in offset order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalItem {
    Batch(LocalBatch),
    /// The segment based at `segment` cannot be read as batches from byte `position` on.
    Unreadable {
        segment: i64,
        position: u64,
        reason: String,
    },
}

/// The offsets compared, `[from, to)`, and the leader's log start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub leader_start: i64,
    pub from: i64,
    pub to: i64,
}

/// Offsets the leader holds and the replica lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    pub first: i64,
    pub last: i64,
    pub batches: usize,
    pub bytes: u64,
    /// The segment the hole begins in (the last one based at or below its first offset)
    /// and the first one based after it.
    pub before: Option<i64>,
    pub after: Option<i64>,
    /// The segment before holds batches after the hole too: the hole lies inside it.
    pub inside: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Hole(Hole),
    /// The local batch fails its own CRC; `leader` is the leader's batch over its offsets.
    Corrupt {
        local: LocalBatch,
        leader: Option<BatchHeader>,
    },
    /// The local batch is whole and sound but is not the leader's batch over its offsets.
    Differs {
        local: LocalBatch,
        leader: BatchHeader,
    },
    Unreadable {
        segment: i64,
        position: u64,
        reason: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Every hole, and the first [`LISTED_PER_SEGMENT`] problems of each damaged segment.
    pub problems: Vec<Problem>,
    /// Segment base → problems found there beyond the listed ones.
    pub unlisted: BTreeMap<i64, usize>,
    /// Segments with damaged or differing bytes: each is rewritten whole by a repair.
    pub damaged_segments: BTreeSet<i64>,
    /// Leader batches the replica holds byte-identical (by header and CRC).
    pub matched: usize,
    /// Local batches in the compared range that the leader no longer has: the first few,
    /// and how many in all.
    pub local_only: Vec<LocalBatch>,
    pub local_only_count: usize,
    /// Local batches whose offsets the leader holds in a batch its log cleaner rewrote (see
    /// [`compacted_on_leader`]): the first few with the leader's header, and how many in all.
    pub compacted: Vec<(LocalBatch, BatchHeader)>,
    pub compacted_count: usize,
    /// Local batches wholly below the leader's log start: (first offset, last offset, count).
    pub below_leader_start: Option<(i64, i64, usize)>,
}

impl Comparison {
    /// Whether anything is wrong (holes, damage, differences); what the leader no longer has
    /// is not.
    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty()
    }

    fn segment_problem(&mut self, segment: i64, p: Problem) {
        self.damaged_segments.insert(segment);
        let listed = self
            .problems
            .iter()
            .filter(|q| problem_segment(q) == Some(segment))
            .count();
        if listed < LISTED_PER_SEGMENT {
            self.problems.push(p);
        } else {
            *self.unlisted.entry(segment).or_default() += 1;
        }
    }

    fn local_only(&mut self, b: LocalBatch) {
        if b.crc_error.is_some() {
            let segment = b.segment;
            self.segment_problem(
                segment,
                Problem::Corrupt {
                    local: b,
                    leader: None,
                },
            );
            return;
        }
        self.local_only_count += 1;
        if self.local_only.len() < LISTED_LOCAL_ONLY {
            self.local_only.push(b);
        }
    }
}

/// The segment a problem belongs to; `None` for a hole.
pub fn problem_segment(p: &Problem) -> Option<i64> {
    match p {
        Problem::Hole(_) => None,
        Problem::Corrupt { local, .. } | Problem::Differs { local, .. } => Some(local.segment),
        Problem::Unreadable { segment, .. } => Some(*segment),
    }
}

/// The same batch: offsets, checksum, leader epoch and size.
fn same(a: &BatchHeader, b: &BatchHeader) -> bool {
    (
        a.base_offset,
        a.last_offset,
        a.crc,
        a.partition_leader_epoch,
        a.size_in_bytes,
    ) == (
        b.base_offset,
        b.last_offset,
        b.crc,
        b.partition_leader_epoch,
        b.size_in_bytes,
    )
}

/// Kafka's delete-horizon attribute (bit 6 of a v2 batch's attributes): the log cleaner set
/// it on a batch holding tombstones or transaction markers it keeps until that time.
const DELETE_HORIZON: i16 = 0x40;

/// Whether the leader's batch `leader` is the local batch `local` after Kafka's log cleaner
/// rewrote it (`MemoryRecords.filterTo`): a v2 batch keeps its base and last offset, its
/// producer id, epoch and base sequence, its leader epoch, codec, timestamp type and flags,
/// and loses records (none at all for an emptied batch kept for its producer), or keeps
/// them all and gains a delete horizon. A batch of another writer, epoch or offset range,
/// or one with more records than the local copy, is no compaction of it.
pub fn compacted_on_leader(local: &BatchHeader, leader: &BatchHeader) -> bool {
    let keeps = |h: &BatchHeader| {
        (
            h.magic,
            h.base_offset,
            h.last_offset,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.partition_leader_epoch,
            h.attributes & !DELETE_HORIZON,
        )
    };
    local.magic == 2
        && keeps(local) == keeps(leader)
        && (leader.records_count < local.records_count
            || (leader.records_count == local.records_count
                && leader.attributes & DELETE_HORIZON != 0
                && local.attributes & DELETE_HORIZON == 0))
}

/// The next local item to compare: batches below the range are counted (as ones the leader
/// no longer has) or reported (when damaged); the walk ends at the first batch at or past
/// the range's end.
fn next_local(
    local: &mut dyn Iterator<Item = Result<LocalItem>>,
    bounds: Bounds,
    c: &mut Comparison,
) -> Result<Option<LocalItem>> {
    for item in local {
        match item? {
            LocalItem::Batch(b) if b.header.base_offset >= bounds.to => return Ok(None),
            LocalItem::Batch(b) if b.header.last_offset < bounds.from => {
                if b.crc_error.is_some() {
                    c.local_only(b);
                } else if b.header.last_offset < bounds.leader_start {
                    let (first, last) = (b.header.base_offset, b.header.last_offset);
                    c.below_leader_start = Some(match c.below_leader_start {
                        Some((f, _, n)) => (f, last, n + 1),
                        None => (first, last, 1),
                    });
                }
            }
            other => return Ok(Some(other)),
        }
    }
    Ok(None)
}

fn next_leader(
    leader: &mut dyn Iterator<Item = Result<BatchHeader>>,
    bounds: Bounds,
) -> Result<Option<BatchHeader>> {
    for h in leader {
        let h = h?;
        if h.base_offset >= bounds.to {
            return Ok(None);
        }
        if h.last_offset >= bounds.from {
            return Ok(Some(h));
        }
    }
    Ok(None)
}

/// The hole being collected, closed when a local batch (in segment `next_segment`) or the
/// end comes.
struct OpenHole<'a> {
    hole: Option<Hole>,
    bases: &'a [i64],
}

impl OpenHole<'_> {
    fn extend(&mut self, h: &BatchHeader) {
        let hole = self.hole.get_or_insert(Hole {
            first: h.base_offset,
            last: h.last_offset,
            batches: 0,
            bytes: 0,
            before: None,
            after: None,
            inside: false,
        });
        hole.last = h.last_offset;
        hole.batches += 1;
        hole.bytes += h.size_in_bytes as u64;
    }

    fn close(&mut self, next_segment: Option<i64>, c: &mut Comparison) {
        if let Some(mut hole) = self.hole.take() {
            hole.before = self.bases.iter().rev().find(|b| **b <= hole.first).copied();
            hole.after = self.bases.iter().find(|b| **b > hole.last).copied();
            hole.inside = hole.before.is_some() && next_segment == hole.before;
            c.problems.push(Problem::Hole(hole));
        }
    }
}

/// Compares the local items with the leader's batches over `bounds`; `bases` are the local
/// segments' base offsets.
pub fn compare(
    local: &mut dyn Iterator<Item = Result<LocalItem>>,
    leader: &mut dyn Iterator<Item = Result<BatchHeader>>,
    bases: &[i64],
    bounds: Bounds,
) -> Result<Comparison> {
    let mut c = Comparison::default();
    let mut hole = OpenHole { hole: None, bases };
    let (mut q, mut l): (Option<LocalItem>, Option<BatchHeader>) = (None, None);
    // The local batch last reported as corrupt or differing: one line per local batch, even
    // when it overlaps several leader batches.
    let mut reported: Option<(i64, u64)> = None;
    // The base of the leader batch last met by an overlapping local batch: what is left of
    // it after that local batch is not a hole.
    let mut met: Option<i64> = None;
    let (mut local_done, mut leader_done) = (false, false);
    loop {
        if q.is_none() && !local_done {
            q = next_local(local, bounds, &mut c)?;
            local_done = q.is_none();
        }
        if l.is_none() && !leader_done {
            l = next_leader(leader, bounds)?;
            leader_done = l.is_none();
        }
        match (q.take(), l.take()) {
            (None, None) => break,
            (
                Some(LocalItem::Unreadable {
                    segment,
                    position,
                    reason,
                }),
                lb,
            ) => {
                c.segment_problem(
                    segment,
                    Problem::Unreadable {
                        segment,
                        position,
                        reason,
                    },
                );
                l = lb;
            }
            (None, Some(lb)) => {
                if met != Some(lb.base_offset) {
                    hole.extend(&lb);
                }
            }
            (Some(LocalItem::Batch(qb)), Some(lb)) if lb.last_offset < qb.header.base_offset => {
                if met != Some(lb.base_offset) {
                    hole.extend(&lb);
                }
                q = Some(LocalItem::Batch(qb));
            }
            (Some(LocalItem::Batch(qb)), Some(lb)) if qb.header.last_offset >= lb.base_offset => {
                hole.close(Some(qb.segment), &mut c);
                met = Some(lb.base_offset);
                let key = (qb.segment, qb.position);
                let order = qb.header.last_offset.cmp(&lb.last_offset);
                if reported != Some(key) {
                    let problem = if qb.crc_error.is_some() {
                        Some(Problem::Corrupt {
                            local: qb.clone(),
                            leader: Some(lb),
                        })
                    } else if compacted_on_leader(&qb.header, &lb)
                        || compacted_on_leader(&lb, &qb.header)
                    {
                        c.compacted_count += 1;
                        if c.compacted.len() < LISTED_COMPACTED {
                            c.compacted.push((qb.clone(), lb));
                        }
                        None
                    } else if !same(&qb.header, &lb) {
                        Some(Problem::Differs {
                            local: qb.clone(),
                            leader: lb,
                        })
                    } else {
                        None
                    };
                    match problem {
                        Some(p) => {
                            reported = Some(key);
                            c.segment_problem(qb.segment, p);
                        }
                        None if same(&qb.header, &lb) => c.matched += 1,
                        None => reported = Some(key),
                    }
                }
                match order {
                    std::cmp::Ordering::Less => l = Some(lb),
                    std::cmp::Ordering::Greater => q = Some(LocalItem::Batch(qb)),
                    std::cmp::Ordering::Equal => {}
                }
            }
            (Some(LocalItem::Batch(qb)), lb) => {
                // No leader batch at this local batch's offsets.
                hole.close(Some(qb.segment), &mut c);
                if reported != Some((qb.segment, qb.position)) {
                    c.local_only(qb);
                }
                l = lb;
            }
        }
    }
    hole.close(None, &mut c);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(base: i64, last: i64, crc: u32) -> BatchHeader {
        BatchHeader {
            magic: 2,
            base_offset: base,
            last_offset: last,
            size_in_bytes: 100,
            partition_leader_epoch: 0,
            max_timestamp: 1,
            attributes: 0,
            records_count: (last - base + 1) as i32,
            crc,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }

    /// Local batches as (segment, base, last, crc, CRC holds).
    fn local(batches: &[(i64, i64, i64, u32, bool)]) -> Vec<Result<LocalItem>> {
        batches
            .iter()
            .enumerate()
            .map(|(i, &(segment, base, last, crc, ok))| {
                Ok(LocalItem::Batch(LocalBatch {
                    header: header(base, last, crc),
                    segment,
                    position: i as u64 * 100,
                    crc_error: (!ok).then(|| "CRC mismatch".to_string()),
                }))
            })
            .collect()
    }

    fn leader(batches: &[(i64, i64, u32)]) -> Vec<Result<BatchHeader>> {
        batches
            .iter()
            .map(|&(b, l, crc)| Ok(header(b, l, crc)))
            .collect()
    }

    fn run(
        local: Vec<Result<LocalItem>>,
        leader: Vec<Result<BatchHeader>>,
        bases: &[i64],
        bounds: Bounds,
    ) -> Comparison {
        compare(
            &mut local.into_iter(),
            &mut leader.into_iter(),
            bases,
            bounds,
        )
        .unwrap()
    }

    const ALL: Bounds = Bounds {
        leader_start: 0,
        from: 0,
        to: 100,
    };

    #[test]
    fn identical_logs_match_batch_for_batch() {
        let c = run(
            local(&[
                (0, 0, 9, 1, true),
                (0, 10, 19, 2, true),
                (20, 20, 29, 3, true),
            ]),
            leader(&[(0, 9, 1), (10, 19, 2), (20, 29, 3)]),
            &[0, 20],
            ALL,
        );
        assert_eq!(c.matched, 3);
        assert!(!c.has_problems(), "{c:?}");
        assert_eq!(c.local_only_count, 0);
    }

    #[test]
    fn a_missing_segment_is_one_hole_between_its_neighbours() {
        // Segments 0, 20 (lost) and 40; the leader holds all three.
        let c = run(
            local(&[
                (0, 0, 9, 1, true),
                (0, 10, 19, 2, true),
                (40, 40, 49, 5, true),
            ]),
            leader(&[
                (0, 9, 1),
                (10, 19, 2),
                (20, 29, 3),
                (30, 39, 4),
                (40, 49, 5),
            ]),
            &[0, 40],
            ALL,
        );
        assert_eq!(c.matched, 3);
        assert_eq!(
            c.problems,
            vec![Problem::Hole(Hole {
                first: 20,
                last: 39,
                batches: 2,
                bytes: 200,
                before: Some(0),
                after: Some(40),
                inside: false,
            })]
        );
        assert!(c.damaged_segments.is_empty());
    }

    #[test]
    fn a_hole_between_batches_of_one_segment_lies_inside_it() {
        let c = run(
            local(&[(0, 0, 9, 1, true), (0, 20, 29, 3, true)]),
            leader(&[(0, 9, 1), (10, 19, 2), (20, 29, 3)]),
            &[0],
            ALL,
        );
        let [Problem::Hole(h)] = &c.problems[..] else {
            panic!("{c:?}");
        };
        assert_eq!(
            (h.first, h.last, h.before, h.inside),
            (10, 19, Some(0), true)
        );
    }

    #[test]
    fn a_batch_with_another_crc_or_other_offsets_differs() {
        let c = run(
            local(&[
                (0, 0, 9, 1, true),
                (0, 10, 19, 99, true),
                (0, 20, 24, 3, true),
            ]),
            leader(&[(0, 9, 1), (10, 19, 2), (20, 29, 3)]),
            &[0],
            ALL,
        );
        assert_eq!(c.matched, 1);
        let differing: Vec<(i64, i64)> = c
            .problems
            .iter()
            .map(|p| match p {
                Problem::Differs { local, leader } => {
                    (local.header.base_offset, leader.last_offset)
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(differing, vec![(10, 19), (20, 29)]);
        assert_eq!(c.damaged_segments, BTreeSet::from([0]));
    }

    #[test]
    fn a_local_batch_overlapping_several_leader_batches_is_reported_once() {
        let c = run(
            local(&[(0, 0, 19, 7, true), (0, 20, 29, 3, true)]),
            leader(&[(0, 9, 1), (10, 19, 2), (20, 29, 3)]),
            &[0],
            ALL,
        );
        assert_eq!(c.problems.len(), 1, "{c:?}");
        assert_eq!(c.matched, 1);
    }

    #[test]
    fn a_local_batch_failing_its_own_crc_is_corrupt_even_when_the_header_matches() {
        let c = run(
            local(&[(0, 0, 9, 1, true), (0, 10, 19, 2, false)]),
            leader(&[(0, 9, 1), (10, 19, 2)]),
            &[0],
            ALL,
        );
        assert!(
            matches!(&c.problems[..], [Problem::Corrupt { local, leader: Some(l) }]
                if local.header.base_offset == 10 && l.base_offset == 10),
            "{c:?}"
        );
        assert_eq!(c.matched, 1);
    }

    #[test]
    fn local_batches_the_leader_no_longer_has_are_kept_and_only_reported() {
        // The leader's log starts at 20 (retention) and compaction removed 30..39.
        let bounds = Bounds {
            leader_start: 20,
            from: 20,
            to: 100,
        };
        let c = run(
            local(&[
                (0, 0, 9, 1, true),
                (0, 10, 19, 2, true),
                (20, 20, 29, 3, true),
                (20, 30, 39, 4, true),
                (20, 40, 49, 5, true),
            ]),
            leader(&[(20, 29, 3), (40, 49, 5)]),
            &[0, 20],
            bounds,
        );
        assert!(!c.has_problems(), "{c:?}");
        assert_eq!(c.matched, 2);
        assert_eq!(c.below_leader_start, Some((0, 19, 2)));
        assert_eq!(c.local_only_count, 1);
        assert_eq!(c.local_only[0].header.base_offset, 30);
    }

    #[test]
    fn a_batch_the_leaders_cleaner_rewrote_is_compacted_not_differing() {
        // 10..19 lost records on the leader, 20..29 kept them all and got a delete
        // horizon; 30..39 has as many records and no horizon (another CRC: a difference),
        // 40..49 more records on the leader (the local copy is the cleaned one), 50..59
        // another producer.
        let mut items = local(&[
            (0, 0, 9, 1, true),
            (0, 10, 19, 2, true),
            (0, 20, 29, 3, true),
            (0, 30, 39, 4, true),
            (0, 40, 49, 5, true),
            (0, 50, 59, 6, true),
        ]);
        for item in &mut items {
            if let Ok(LocalItem::Batch(b)) = item {
                b.header.records_count = 5;
            }
        }
        let mut leaders = leader(&[
            (0, 9, 1),
            (10, 19, 12),
            (20, 29, 13),
            (30, 39, 14),
            (40, 49, 15),
            (50, 59, 16),
        ]);
        let counts = [5, 2, 5, 5, 6, 2];
        for (h, n) in leaders.iter_mut().zip(counts) {
            let h = h.as_mut().unwrap();
            h.records_count = n;
            match h.base_offset {
                20 => h.attributes |= DELETE_HORIZON,
                50 => h.producer_id = 7,
                _ => {}
            }
        }
        let c = run(items, leaders, &[0], ALL);
        assert_eq!(c.matched, 1);
        // 40..49: the local copy is the cleaned one (an earlier leader had cleaned it).
        assert_eq!(c.compacted_count, 3);
        let compacted: Vec<i64> = c
            .compacted
            .iter()
            .map(|(l, _)| l.header.base_offset)
            .collect();
        assert_eq!(compacted, vec![10, 20, 40]);
        let differing: Vec<i64> = c
            .problems
            .iter()
            .map(|p| match p {
                Problem::Differs { local, .. } => local.header.base_offset,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(differing, vec![30, 50]);
    }

    #[test]
    fn nothing_past_the_range_is_compared() {
        let bounds = Bounds {
            leader_start: 0,
            from: 0,
            to: 20,
        };
        let c = run(
            local(&[
                (0, 0, 9, 1, true),
                (0, 10, 19, 2, true),
                (20, 20, 29, 9, true),
            ]),
            leader(&[(0, 9, 1), (10, 19, 2), (20, 29, 3)]),
            &[0, 20],
            bounds,
        );
        assert!(!c.has_problems(), "{c:?}");
        assert_eq!((c.matched, c.local_only_count), (2, 0));
    }

    #[test]
    fn an_unreadable_tail_marks_its_segment_and_the_leader_batches_behind_it_are_a_hole() {
        let mut items = local(&[(0, 0, 9, 1, true)]);
        items.push(Ok(LocalItem::Unreadable {
            segment: 0,
            position: 100,
            reason: "partial batch".into(),
        }));
        items.extend(local(&[(30, 30, 39, 4, true)]));
        let c = run(
            items,
            leader(&[(0, 9, 1), (10, 19, 2), (20, 29, 3), (30, 39, 4)]),
            &[0, 30],
            ALL,
        );
        assert_eq!(c.damaged_segments, BTreeSet::from([0]));
        assert!(matches!(
            c.problems[0],
            Problem::Unreadable { segment: 0, .. }
        ));
        assert!(
            matches!(&c.problems[1], Problem::Hole(h) if (h.first, h.last, h.before) == (10, 29, Some(0))),
            "{c:?}"
        );
    }

    #[test]
    fn a_damaged_segment_lists_a_few_problems_and_counts_the_rest() {
        let locals: Vec<(i64, i64, i64, u32, bool)> =
            (0..10).map(|i| (0, i * 10, i * 10 + 9, 0, true)).collect();
        let leaders: Vec<(i64, i64, u32)> = (0..10).map(|i| (i * 10, i * 10 + 9, 1)).collect();
        let c = run(local(&locals), leader(&leaders), &[0], ALL);
        assert_eq!(c.problems.len(), LISTED_PER_SEGMENT);
        assert_eq!(c.unlisted.get(&0), Some(&(10 - LISTED_PER_SEGMENT)));
    }
}
