//! Keeping a partition's manifest in line with its local log: after a truncation, after a
//! kill (pieces uploaded but in no manifest), and across local retention (the leader epochs).

use super::local::{LocalView, read_range, walk_batches};
use super::manifest::{Manifest, Piece, SegmentEntry};
use super::settings::Offsite;
use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// Brings the manifest in line with a log that was truncated (the removed bytes, when
/// committed, are in `diverged/` and go up as files): segments the truncation removed leave
/// it, a segment it cut is cut. Segments below the local log start (retention) and missing
/// from the middle (damage) stay. The kept bytes are checked against the local ones.
pub(super) fn reconcile(m: &mut Manifest, view: &LocalView) -> Result<bool> {
    let mut changed = false;
    let Some(first_local) = view.segments.first().map(|s| s.base) else {
        return Ok(false);
    };
    let last_local = view
        .segments
        .iter()
        .rev()
        .find(|s| s.size > 0)
        .map_or(first_local, |s| s.base);
    let bases: Vec<i64> = m.segments.keys().copied().collect();
    for base in bases {
        if base < first_local {
            continue;
        }
        let local = view.segments.iter().find(|s| s.base == base);
        let Some(entry) = m.segments.get_mut(&base) else {
            continue;
        };
        match local {
            None if base > last_local => {
                crate::log_info!(
                    "offsite: {}: segment {base} was truncated away locally; the next manifest leaves it out (its committed batches are in diverged/)",
                    view.key.describe()
                );
                m.segments.remove(&base);
                changed = true;
            }
            None => {}
            Some(l) => {
                let path = view
                    .dir
                    .join(crate::log::format::segment::file_name(base, "log"));
                if l.size < entry.size {
                    if base != last_local {
                        bail!(
                            "segment {base} holds {} bytes locally and {} offsite, and it is not the last one",
                            l.size,
                            entry.size
                        );
                    }
                    entry.pieces.retain(|p| p.from < l.size);
                    entry.size = l.size;
                    entry.next_offset = l.next_offset;
                    entry.indexes = None;
                    changed = true;
                }
                // The last piece wholly inside the local file must match it, in the last
                // segment: only there can a truncation have cut bytes the copy holds, and
                // checking every segment would read the whole log at each start.
                if base == last_local
                    && let Some(p) = entry.pieces.iter().rev().find(|p| p.to <= l.size)
                {
                    let bytes = read_range(&path, p.from, p.to)?;
                    if crc32c::crc32c(&bytes) != p.crc {
                        bail!(
                            "bytes {}..{} of segment {base} differ from their copy offsite",
                            p.from,
                            p.to
                        );
                    }
                }
            }
        }
    }
    Ok(changed)
}

/// Takes into the manifest the pieces a killed run uploaded after its last manifest, when
/// they continue a segment and match the local bytes, so they are not uploaded again.
pub(super) fn adopt_orphans(o: &Offsite, m: &mut Manifest, view: &LocalView) -> Result<bool> {
    let mut changed = false;
    for seg in &view.segments {
        let have = m.segments.get(&seg.base).map_or(0, |e| e.size);
        if have >= seg.size
            || m.segments
                .get(&seg.base)
                .is_some_and(SegmentEntry::is_closed)
        {
            continue;
        }
        let prefix = view.key.pieces_of(seg.base);
        let listing = o.store.list(&o.object(&prefix), None)?;
        let mut found: BTreeMap<u64, Piece> = BTreeMap::new();
        for (name, _) in &listing.objects {
            if let Some(p) = name
                .strip_prefix(&o.object(&prefix))
                .and_then(super::manifest::parse_piece_name)
            {
                found.insert(p.from, p);
            }
        }
        let path = view
            .dir
            .join(crate::log::format::segment::file_name(seg.base, "log"));
        let mut at = have;
        while let Some(p) = found.get(&at).copied() {
            if p.to > seg.size {
                break;
            }
            let bytes = read_range(&path, p.from, p.to)?;
            if crc32c::crc32c(&bytes) != p.crc {
                break;
            }
            let mut last = None;
            walk_batches(&bytes, |h, _| {
                last = Some(h.last_offset);
                true
            })?;
            let entry = m.segments.entry(seg.base).or_insert(SegmentEntry {
                next_offset: seg.base,
                size: 0,
                pieces: Vec::new(),
                indexes: None,
            });
            entry.pieces.push(p);
            entry.size = p.to;
            if let Some(l) = last {
                entry.next_offset = l + 1;
            }
            at = p.to;
            changed = true;
        }
    }
    Ok(changed)
}

/// The epochs of the whole history: those the bucket has below the local log's first epoch
/// (retention moved the local file's start up), then the local ones, the first starting
/// where the bucket says it did.
pub fn merge_epochs(offsite: &[(i32, i64)], local: &[(i32, i64)]) -> Vec<(i32, i64)> {
    let Some(&(first_epoch, first_start)) = local.first() else {
        return offsite.to_vec();
    };
    let mut out: Vec<(i32, i64)> = offsite
        .iter()
        .copied()
        .filter(|(e, _)| *e < first_epoch)
        .collect();
    let start = offsite
        .iter()
        .find(|(e, _)| *e == first_epoch)
        .map_or(first_start, |(_, s)| (*s).min(first_start));
    out.push((first_epoch, start));
    out.extend(local.iter().skip(1).copied());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_merge_keeps_the_history_retention_cut_locally() {
        let offsite = [(0, 0), (2, 100), (5, 300)];
        assert_eq!(
            merge_epochs(&offsite, &[(2, 150), (5, 300), (6, 400)]),
            vec![(0, 0), (2, 100), (5, 300), (6, 400)]
        );
        // A truncation dropped the local epoch 5: so does the merge.
        assert_eq!(merge_epochs(&offsite, &[(2, 150)]), vec![(0, 0), (2, 100)]);
        assert_eq!(merge_epochs(&[], &[(1, 5)]), vec![(1, 5)]);
        assert_eq!(merge_epochs(&offsite, &[]), offsite.to_vec());
    }
}
