//! Keeping a partition's manifest in line with its local log: after a truncation, after a
//! kill (pieces uploaded but in no manifest), and across local retention (the leader epochs).

use super::local::{LocalView, last_offset_in, read_range, walk_batches, walk_window};
use super::manifest::{Manifest, Piece, SegmentEntry};
use super::settings::Offsite;
use crate::log::format::segment::file_name;
use anyhow::{Context, Result};
use std::collections::BTreeMap;

/// Brings the manifest in line with a log that was truncated (the removed bytes, when
/// committed, are in `diverged/` and go up as files). A truncation replaces a suffix of the
/// log, and the log may have gone on past the cut, even rolled, before this round: so the
/// pieces offsite the local files still hold as they are come first, and from the first one
/// they do not (shorter there, or other bytes in its range) everything offsite is stale. That
/// piece, the rest of its segment and every later segment leave the manifest, and the local
/// bytes from its start go up again. The last piece is checked first: when the local file
/// holds it, nothing was cut, at the cost of one read. Otherwise the first stale piece is
/// found by halving over the pieces of the segments the local log has. The local bytes from
/// there must be whole, CRC-valid batches: other bytes are damage, not a truncation, and an
/// error. Segments below the local log start (retention) and missing from the middle
/// (damage) stay.
pub(super) fn reconcile(m: &mut Manifest, view: &LocalView) -> Result<bool> {
    let Some(first_local) = view.segments.first().map(|s| s.base) else {
        return Ok(false);
    };
    let last_local = view
        .segments
        .iter()
        .rev()
        .find(|s| s.size > 0)
        .map_or(first_local, |s| s.base);
    // Every piece of the segments both sides have, in log order, with the local size.
    let mut pieces: Vec<(i64, usize, Piece, u64)> = Vec::new();
    for (base, entry) in m.segments.range(first_local..) {
        if let Some(l) = view.segments.iter().find(|s| s.base == *base) {
            for (i, p) in entry.pieces.iter().enumerate() {
                pieces.push((*base, i, *p, l.size));
            }
        }
    }
    let holds = |(base, _, p, size): &(i64, usize, Piece, u64)| -> Result<bool> {
        let path = view.dir.join(file_name(*base, "log"));
        Ok(p.to <= *size && crc32c::crc32c(&read_range(&path, p.from, p.to)?) == p.crc)
    };
    let mut first_stale = pieces.len();
    if let Some(last) = pieces.last()
        && !holds(last)?
    {
        let (mut kept, mut stale) = (0usize, pieces.len() - 1);
        while kept < stale {
            let mid = kept + (stale - kept) / 2;
            match pieces.get(mid) {
                Some(p) if holds(p)? => kept = mid + 1,
                _ => stale = mid,
            }
        }
        first_stale = stale;
    }
    let mut changed = false;
    let cut = pieces.get(first_stale).copied();
    if let Some((base, index, p, size)) = cut {
        // The local bytes from the stale piece's start: the kept batches, then those
        // appended since.
        let path = view.dir.join(file_name(base, "log"));
        let upto = p.to.min(size);
        walk_window(&read_range(&path, p.from, upto)?, |_, _| true).with_context(|| {
            format!(
                "bytes {}..{upto} of segment {base} differ from their copy offsite, and the local ones are not whole batches",
                p.from
            )
        })?;
        if let Some(entry) = m.segments.get_mut(&base) {
            entry.pieces.truncate(index);
            entry.size = entry.pieces.last().map_or(0, |q| q.to);
            entry.next_offset = match entry.pieces.last() {
                Some(q) => last_offset_in(&path, q.from, q.to)?.map_or(base, |o| o + 1),
                None => base,
            };
            entry.indexes = None;
            crate::log_info!(
                "offsite: {}: segment {base} was truncated locally; the next manifest keeps its first {} bytes offsite, the rest goes up again",
                view.key.describe(),
                entry.size
            );
            if entry.pieces.is_empty() {
                m.segments.remove(&base);
            }
            changed = true;
        }
    }
    // Segments after the cut, or past the local log's last one, were truncated away.
    let stale_from = cut.map_or(i64::MAX, |c| c.0);
    let gone: Vec<i64> = m
        .segments
        .range(first_local..)
        .map(|(b, _)| *b)
        .filter(|b| {
            *b > stale_from || (*b > last_local && !view.segments.iter().any(|s| s.base == *b))
        })
        .collect();
    for base in gone {
        crate::log_info!(
            "offsite: {}: segment {base} was truncated away locally; the next manifest leaves it out (its committed batches are in diverged/)",
            view.key.describe()
        );
        m.segments.remove(&base);
        changed = true;
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
