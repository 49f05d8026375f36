//! `replica-follower offsite verify`: the local replica against the bucket, every
//! difference named.
//!
//! For each local partition (and archived history) the newest manifest is read and every
//! object it names is fetched and checked (authentication, CRC-32C, batch CRCs), then
//! compared with the local bytes. A difference is a line starting with the partition; bytes
//! the daemon has not uploaded yet are `pending` lines, which are not differences.
//! Segments the bucket holds below the local log start (local retention deleted them) are
//! expected, and counted.

use super::bucket;
use super::local::{read_range, walk_batches};
use super::manifest::{FILE_PART, FileSum, PartitionKey};
use super::settings::Offsite;
use crate::log::data_dir::DataDir;
use crate::log::format::segment::file_name;
use anyhow::{Context, Result};
use std::fs;
use std::io::Write;
use std::path::Path;

/// What verify found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub differences: usize,
    pub pending_bytes: u64,
    pub partitions: usize,
}

/// Compares `data_dir` with the bucket; prints differences and pending lines to `out`.
pub fn verify(o: &Offsite, data_dir: &Path, out: &mut dyn Write) -> Result<Outcome> {
    let cluster = crate::log::identity::read_cluster_id(data_dir)?.with_context(|| {
        format!(
            "`{}` holds no meta.properties: no replica to compare",
            data_dir.display()
        )
    })?;
    bucket::check(o)?;
    let mut outcome = Outcome::default();
    let mut dirs: Vec<(PartitionKey, std::path::PathBuf, String)> = Vec::new();
    for tp in DataDir::partitions(data_dir)? {
        let dir = data_dir.join(tp.dir_name());
        let id = crate::log::identity::read_topic_id(&dir).ok().flatten();
        dirs.push((
            PartitionKey {
                cluster_id: cluster.clone(),
                topic: tp.topic.clone(),
                topic_id: id,
                partition: tp.partition,
            },
            dir,
            tp.to_string(),
        ));
    }
    for a in crate::log::identity::list_archived(data_dir)? {
        dirs.push((
            PartitionKey {
                cluster_id: cluster.clone(),
                topic: a.topic.clone(),
                topic_id: a.old_id(),
                partition: a.partition,
            },
            a.path.clone(),
            a.name.clone(),
        ));
    }
    let said = |out: &mut dyn Write, line: String| -> Result<()> {
        writeln!(out, "{line}")?;
        Ok(())
    };
    let local_keys: Vec<PartitionKey> = dirs.iter().map(|d| d.0.clone()).collect();
    for (key, dir, label) in dirs {
        outcome.partitions += 1;
        let m = match bucket::latest_manifest(o, &key) {
            Ok(m) => m,
            Err(e) if super::restore::is_key_error(&e) || bucket::store_error(&e).is_some() => {
                return Err(e);
            }
            Err(e) => {
                outcome.differences += 1;
                said(out, format!("{label}: {e:#}"))?;
                continue;
            }
        };
        let Some(m) = m else {
            outcome.differences += 1;
            said(
                out,
                format!(
                    "{label}: not offsite at all (no manifest under `{}`)",
                    o.object(&key.root())
                ),
            )?;
            continue;
        };
        let bases = crate::log::partition::list_segment_bases(&dir)?;
        // A running daemon's retention may delete a segment while it is compared: one gone
        // below the local log's first segment, as listed now, went that way.
        let retained_away = |base: i64| {
            crate::log::partition::list_segment_bases(&dir)
                .ok()
                .and_then(|b| b.first().copied())
                .is_none_or(|first| base < first)
        };
        let mut below = 0usize;
        'segments: for (base, seg) in &m.segments {
            let path = dir.join(file_name(*base, "log"));
            let local_size = fs::metadata(&path).map(|md| md.len()).ok();
            let Some(local_size) = local_size else {
                if retained_away(*base) {
                    below += 1;
                } else {
                    outcome.differences += 1;
                    said(
                        out,
                        format!(
                            "{label}: segment {base} is offsite ({} bytes) but missing locally",
                            seg.size
                        ),
                    )?;
                }
                continue;
            };
            if local_size < seg.size {
                outcome.differences += 1;
                said(
                    out,
                    format!(
                        "{label}: segment {base} holds {local_size} bytes locally, {} offsite",
                        seg.size
                    ),
                )?;
            }
            for (p, upto) in seg.used() {
                let name = key.piece(*base, &p);
                let remote = match bucket::get_sized(o, &name, p.to - p.from) {
                    Ok(Some(b)) => b,
                    Ok(None) => {
                        outcome.differences += 1;
                        said(
                            out,
                            format!(
                                "{label}: segment {base}: object `{}` (bytes {}..{}) is missing",
                                o.object(&name),
                                p.from,
                                p.to
                            ),
                        )?;
                        continue;
                    }
                    Err(e) if super::restore::is_key_error(&e) => return Err(e),
                    Err(e) => {
                        outcome.differences += 1;
                        said(out, format!("{label}: segment {base}: {e:#}"))?;
                        continue;
                    }
                };
                if crc32c::crc32c(&remote) != p.crc || remote.len() as u64 != p.to - p.from {
                    outcome.differences += 1;
                    said(
                        out,
                        format!(
                            "{label}: segment {base}: object `{}` does not hold what the manifest says",
                            o.object(&name)
                        ),
                    )?;
                    continue;
                }
                if let Err(e) = walk_batches(
                    remote
                        .get(..usize::try_from(upto - p.from).unwrap_or(0))
                        .unwrap_or_default(),
                    |_, _| true,
                ) {
                    outcome.differences += 1;
                    said(
                        out,
                        format!(
                            "{label}: segment {base}: bytes {}..{upto} offsite hold a bad batch: {e:#}",
                            p.from
                        ),
                    )?;
                }
                if local_size >= upto {
                    let local = match read_range(&path, p.from, upto) {
                        Ok(l) => l,
                        Err(_) if retained_away(*base) => {
                            below += 1;
                            continue 'segments;
                        }
                        Err(e) => {
                            outcome.differences += 1;
                            said(out, format!("{label}: segment {base}: {e:#}"))?;
                            continue;
                        }
                    };
                    let remote = remote.get(..local.len()).unwrap_or_default();
                    if local != remote {
                        let at = local
                            .iter()
                            .zip(remote)
                            .position(|(a, b)| a != b)
                            .unwrap_or(0) as u64
                            + p.from;
                        outcome.differences += 1;
                        said(
                            out,
                            format!(
                                "{label}: segment {base}: bytes {}..{upto} differ from the local ones (first at byte {at})",
                                p.from
                            ),
                        )?;
                    }
                }
            }
            if let Some(ix) = &seg.indexes {
                for (kind, sum) in [
                    ("index", ix.index),
                    ("timeindex", ix.timeindex),
                    ("txnindex", ix.txnindex),
                ] {
                    let name = key.index(*base, kind, &sum);
                    match bucket::get_sized(o, &name, sum.size) {
                        Ok(Some(b)) if FileSum::of(&b) == sum => {}
                        Ok(_) => {
                            outcome.differences += 1;
                            said(
                                out,
                                format!(
                                    "{label}: segment {base}: its {kind} object `{}` is missing or differs from the manifest",
                                    o.object(&name)
                                ),
                            )?;
                        }
                        Err(e) => {
                            outcome.differences += 1;
                            said(out, format!("{label}: segment {base}: {kind}: {e:#}"))?;
                        }
                    }
                    if let Ok(local) = fs::read(dir.join(file_name(*base, kind)))
                        && FileSum::of(&local) != sum
                    {
                        outcome.differences += 1;
                        said(
                            out,
                            format!(
                                "{label}: segment {base}: the local {kind} differs from the one offsite"
                            ),
                        )?;
                    }
                }
            }
        }
        // Local bytes not offsite yet.
        for base in &bases {
            let path = dir.join(file_name(*base, "log"));
            let size = fs::metadata(&path).map(|md| md.len()).unwrap_or(0);
            let have = m.segments.get(base).map_or(0, |s| s.size);
            if size > have {
                outcome.pending_bytes += size - have;
                said(
                    out,
                    format!(
                        "{label}: pending: segment {base} bytes {have}..{size} are not offsite yet"
                    ),
                )?;
            }
        }
        for (fname, sum) in &m.files {
            let mut got = FileSum { size: 0, crc: 0 };
            let mut failed = None;
            for part in 0..sum.parts() {
                match bucket::get_sized(o, &key.file(fname, sum, part), FILE_PART) {
                    Ok(Some(b)) => {
                        got.size += b.len() as u64;
                        got.crc = crc32c::crc32c_append(got.crc, &b);
                    }
                    Ok(None) => {
                        failed = Some(format!("its part {part} is missing"));
                        break;
                    }
                    Err(e) => {
                        failed = Some(format!("{e:#}"));
                        break;
                    }
                }
            }
            if failed.is_none() && got != *sum {
                failed = Some("its parts do not add up to what the manifest says".into());
            }
            if let Some(why) = failed {
                outcome.differences += 1;
                said(
                    out,
                    format!("{label}: the copy of `{fname}` offsite: {why}"),
                )?;
            }
            match fs::read(dir.join(fname)) {
                Ok(b) if FileSum::of(&b) == *sum => {}
                Ok(_) => {
                    outcome.differences += 1;
                    said(
                        out,
                        format!("{label}: `{fname}` differs from its copy offsite"),
                    )?;
                }
                Err(_) => {
                    outcome.differences += 1;
                    said(
                        out,
                        format!("{label}: `{fname}` is offsite but missing locally"),
                    )?;
                }
            }
        }
        let local_epochs =
            crate::checkpoint::read_epochs(&dir.join(DataDir::LEADER_EPOCH)).unwrap_or_default();
        if let Some(first) = local_epochs.first()
            && !m.epochs.iter().any(|e| e.0 == first.0)
        {
            outcome.differences += 1;
            said(
                out,
                format!(
                    "{label}: leader epoch {} is local but not in the manifest",
                    first.0
                ),
            )?;
        }
        if below > 0 {
            said(
                out,
                format!(
                    "{label}: {below} segments below the local log start are offsite only (local retention)"
                ),
            )?;
        }
    }
    // Histories the bucket holds that this data dir does not (a topic no longer followed,
    // deleted here): not differences, but said.
    for key in bucket::partitions(o, Some(&cluster))? {
        if !local_keys.contains(&key) {
            said(
                out,
                format!(
                    "{}: offsite only, no local copy (under `{}`)",
                    key.describe(),
                    o.object(&key.root())
                ),
            )?;
        }
    }
    writeln!(
        out,
        "{} partition histories compared with {}: {} differences, {} bytes pending",
        outcome.partitions, o.location, outcome.differences, outcome.pending_bytes
    )?;
    Ok(outcome)
}
