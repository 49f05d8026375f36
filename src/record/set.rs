//! Walking a record set batch by batch.
//!
//! A fetch response's records are a raw slice of the leader's log and may end in a partial
//! batch (the leader cuts at the size limit); a segment file after a crash may end in a torn
//! one. [`BatchIter`] yields whole batches and reports how the set ended, following Kafka's
//! rules: fewer than 12 bytes left → partial; size < 14 or above the limit → corrupt; fewer than
//! 17 bytes → partial; magic outside 0–2 → corrupt; fewer than size + 12 → partial.

use super::batch::{BatchError, BatchHeader};

/// The ordering rule of every log (Kafka's `appendAsFollower`), applied by fetch validation,
/// recovery, the loader and `verify` alike: each batch starts after the last offset of the one
/// before it. Gaps are legitimate (compaction leaves them, and batches whose records are
/// missing inside, or empty batches that keep their offset range); overlaps and offsets going
/// backwards are not. A compressed magic 0/1 wrapper carries only its last offset, which is
/// its `base_offset` here, so the same comparison holds for it.
pub fn check_follows(prev_last: Option<i64>, h: &BatchHeader) -> Result<(), String> {
    match prev_last {
        Some(p) if h.base_offset <= p => Err(format!(
            "batch with offsets {}..{} does not follow offset {p}",
            h.base_offset, h.last_offset
        )),
        _ => Ok(()),
    }
}

/// How a walk over a record set ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetEnd {
    /// Every byte belonged to a whole batch.
    Complete,
    /// The last `bytes` bytes are the start of a batch that is not all there.
    Partial { bytes: usize },
    /// The batch at byte `position` is malformed (it and everything after it is unusable).
    Corrupt { position: usize, reason: String },
}

/// Iterates over the whole batches at the front of `bytes`, without checking CRCs (callers
/// verify each batch before using its bytes).
pub struct BatchIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    max_batch_size: usize,
    end: Option<SetEnd>,
}

impl<'a> BatchIter<'a> {
    pub fn new(bytes: &'a [u8], max_batch_size: usize) -> Self {
        BatchIter {
            bytes,
            pos: 0,
            max_batch_size,
            end: None,
        }
    }

    /// Byte position of the next batch.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// How the set ended; `None` until the iterator has returned `None`.
    pub fn end(&self) -> Option<&SetEnd> {
        self.end.as_ref()
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// A batch header, its byte position in the set, and its bytes.
    type Item = (BatchHeader, usize, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.end.is_some() {
            return None;
        }
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        if rest.is_empty() {
            self.end = Some(SetEnd::Complete);
            return None;
        }
        match BatchHeader::parse(rest, self.max_batch_size) {
            Ok(h) => {
                let start = self.pos;
                let batch = rest.get(..h.size_in_bytes).unwrap_or_default();
                self.pos += h.size_in_bytes;
                Some((h, start, batch))
            }
            Err(BatchError::Truncated { .. }) => {
                self.end = Some(SetEnd::Partial { bytes: rest.len() });
                None
            }
            Err(BatchError::Corrupt(reason)) => {
                self.end = Some(SetEnd::Corrupt {
                    position: self.pos,
                    reason,
                });
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::batch::set_v2_base_offset;
    use crate::record::batch::tests::{BATCH_C, unhex};

    fn three_batches() -> Vec<u8> {
        let mut out = Vec::new();
        for base in 0..3 {
            let mut b = unhex(BATCH_C);
            set_v2_base_offset(&mut b, base);
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn whole_set_is_complete() {
        let set = three_batches();
        let mut it = BatchIter::new(&set, usize::MAX);
        let got: Vec<_> = it
            .by_ref()
            .map(|(h, pos, _)| (h.base_offset, pos))
            .collect();
        assert_eq!(got, vec![(0, 0), (1, 76), (2, 152)]);
        assert_eq!(it.end(), Some(&SetEnd::Complete));
    }

    #[test]
    fn every_cut_of_the_last_batch_is_partial() {
        let set = three_batches();
        for cut in 153..set.len() {
            let mut it = BatchIter::new(&set[..cut], usize::MAX);
            assert_eq!(it.by_ref().count(), 2, "cut {cut}");
            assert_eq!(
                it.end(),
                Some(&SetEnd::Partial { bytes: cut - 152 }),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn garbage_after_whole_batches_is_corrupt() {
        let mut set = three_batches();
        set.extend_from_slice(&[0u8; 8]);
        set.extend_from_slice(&1i32.to_be_bytes()); // size 1 < 14
        set.extend_from_slice(&[0u8; 10]);
        let mut it = BatchIter::new(&set, usize::MAX);
        assert_eq!(it.by_ref().count(), 3);
        assert!(matches!(
            it.end(),
            Some(SetEnd::Corrupt { position: 228, .. })
        ));
    }
}
