//! Leader-epoch cache: (epoch, start offset) pairs, persisted as `leader-epoch-checkpoint`.
//!
//! For each appended batch whose partitionLeaderEpoch is ≥ 0 and above the latest cached
//! epoch, (epoch, base offset) is added. Truncating the log to X drops entries starting at or
//! after X; raising the log start to S moves the first kept entry's start up to S.
//! Invariant: epochs strictly increase and start offsets never decrease.
//! Who touches it: its partition log, under the partition's lock.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<(i32, i64)>,
    /// Changed since the last checkpoint.
    pub dirty: bool,
}

impl EpochCache {
    pub fn from_entries(entries: Vec<(i32, i64)>) -> Self {
        EpochCache {
            entries,
            dirty: false,
        }
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|&(e, _)| e)
    }

    pub fn assign(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 || self.latest_epoch().is_some_and(|l| epoch <= l) {
            return;
        }
        self.entries.push((epoch, start_offset));
        self.dirty = true;
    }

    pub fn truncate_from_end(&mut self, end_offset: i64) {
        let before = self.entries.len();
        self.entries.retain(|&(_, s)| s < end_offset);
        self.dirty |= self.entries.len() != before;
    }

    pub fn truncate_from_start(&mut self, start_offset: i64) {
        let keep_from = self.entries.iter().rposition(|&(_, s)| s <= start_offset);
        if let Some(i) = keep_from {
            self.entries.drain(..i);
            if let Some(first) = self.entries.first_mut()
                && first.1 < start_offset
            {
                first.1 = start_offset;
                self.dirty = true;
            }
            self.dirty |= i > 0;
        }
    }

    pub fn clear(&mut self) {
        self.dirty |= !self.entries.is_empty();
        self.entries.clear();
    }

    /// The largest epoch ≤ `epoch` and its end offset (start of the next epoch, or `log_end`
    /// for the latest one), as OffsetForLeaderEpoch answers; `None` if no such epoch.
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> Option<(i32, i64)> {
        let i = self.entries.iter().rposition(|&(e, _)| e <= epoch)?;
        let (e, _) = self.entries.get(i).copied()?;
        let end = self.entries.get(i + 1).map_or(log_end, |&(_, s)| s);
        Some((e, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_truncate_and_lookup() {
        let mut c = EpochCache::default();
        c.assign(0, 0);
        c.assign(0, 5);
        c.assign(2, 10);
        c.assign(1, 12);
        c.assign(4, 20);
        assert_eq!(c.entries(), &[(0, 0), (2, 10), (4, 20)]);
        assert_eq!(c.end_offset_for(3, 30), Some((2, 20)));
        assert_eq!(c.end_offset_for(4, 30), Some((4, 30)));
        c.truncate_from_end(20);
        assert_eq!(c.entries(), &[(0, 0), (2, 10)]);
        c.truncate_from_start(12);
        assert_eq!(c.entries(), &[(2, 12)]);
        assert_eq!(c.end_offset_for(1, 30), None);
    }
}
