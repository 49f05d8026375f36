//! `replica-follower offsite restore`: a data dir rebuilt from the bucket.
//!
//! Each partition history's newest manifest says what to fetch. Every piece is checked (its
//! authentication or CRC, its CRC-32C in the manifest, then each batch's own CRC) before a
//! byte of it is written. A partition directory is made as `.<name>.creating/`, fsynced,
//! and renamed into place whole; the checkpoints are written last. The result is what the
//! daemon had uploaded: segments, indexes, leader epochs, identity, the ranges lost upstream,
//! `diverged/` and `damaged/` copies and archived histories; segments its retention had
//! deleted locally are back too.

use super::bucket;
use super::local::walk_batches;
use super::manifest::{FileSum, Manifest, PartitionKey};
use super::settings::Offsite;
use crate::checkpoint::{TopicPartition, fsync_dir};
use crate::log::data_dir::DataDir;
use crate::log::format::segment::{Segment, file_name};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct RestoreOptions<'a> {
    pub to: &'a Path,
    /// Only these topics (all when empty).
    pub topics: &'a [String],
    /// The cluster whose histories to restore; needed only when the bucket holds several.
    pub cluster: Option<&'a str>,
    pub index_interval_bytes: u64,
}

/// Whether the error is a key problem (missing or wrong), which is a bad configuration.
pub fn is_key_error(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    text.contains("offsite.encryption_key_file")
}

/// A cluster id as Kafka makes them (URL-safe base64), or any id without a path separator.
fn legal_cluster_id(c: &str) -> bool {
    !c.is_empty() && c != "." && c != ".." && !c.contains('/') && !c.contains('\0')
}

/// The directory a history is restored to.
fn dir_name(m: &Manifest) -> String {
    let tp = TopicPartition::new(m.key.topic.clone(), m.key.partition);
    if m.archived {
        format!(
            "{}.{}{}",
            tp.dir_name(),
            m.key
                .topic_id
                .map_or_else(|| "unknown-id".to_string(), |u| u.to_string()),
            DataDir::ARCHIVED_SUFFIX
        )
    } else {
        tp.dir_name()
    }
}

/// Rebuilds a data dir in `opts.to` (which must be missing or empty); prints one line per
/// partition to `out`.
pub fn restore(o: &Offsite, opts: &RestoreOptions<'_>, out: &mut dyn Write) -> Result<()> {
    let to = opts.to;
    if to.exists() {
        let mut entries = fs::read_dir(to)
            .with_context(|| format!("cannot read `{}`", to.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // What an interrupted restore leaves: partition directories being made (each
            // replaced when reached again).
            .filter(|n| {
                n != "lost+found" && !(n.starts_with('.') && n.ends_with(DataDir::CREATING_SUFFIX))
            });
        if let Some(first) = entries.next() {
            bail!(
                "`{}` is not empty (it holds `{first}`): restore into a new or empty directory",
                to.display()
            );
        }
    }
    bucket::check(o)?;
    let cluster = match opts.cluster {
        Some(c) => c.to_string(),
        None => {
            let all = bucket::partitions(o, None)?;
            let mut clusters: Vec<String> = all.iter().map(|k| k.cluster_id.clone()).collect();
            clusters.dedup();
            match clusters.as_slice() {
                [] => bail!(
                    "{} holds no replica under prefix `{}`",
                    o.location,
                    o.prefix
                ),
                [one] => one.clone(),
                many => bail!(
                    "{} holds the replicas of {} clusters ({}): say which with --cluster",
                    o.location,
                    many.len(),
                    many.join(", ")
                ),
            }
        }
    };
    let mut keys = bucket::partitions(o, Some(&cluster))?;
    for t in opts.topics {
        if !keys.iter().any(|k| &k.topic == t) {
            bail!(
                "topic `{t}` is not in {} (cluster {cluster}, prefix `{}`)",
                o.location,
                o.prefix
            );
        }
    }
    if !opts.topics.is_empty() {
        keys.retain(|k| opts.topics.contains(&k.topic));
    }
    for k in &keys {
        if !crate::config::is_legal_topic(&k.topic) || !legal_cluster_id(&k.cluster_id) {
            bail!(
                "{} holds a history under `{}`, whose cluster id or topic is not one Kafka allows: refusing to make a directory of it",
                o.location,
                o.object(&k.root())
            );
        }
    }
    let mut manifests = Vec::new();
    for k in &keys {
        if let Some(m) = bucket::latest_manifest(o, k)? {
            manifests.push(m);
        }
    }
    if manifests.is_empty() {
        let mut clusters: Vec<String> = bucket::partitions(o, None)?
            .into_iter()
            .map(|k| k.cluster_id)
            .collect();
        clusters.dedup();
        bail!(
            "{} holds no replica of cluster {cluster} under prefix `{}` (it holds {})",
            o.location,
            o.prefix,
            if clusters.is_empty() {
                "none".to_string()
            } else {
                format!("those of {}", clusters.join(", "))
            }
        );
    }
    // Two live histories of one partition (a re-creation whose old history was not yet
    // marked archived): the newest is the live one.
    let mut newest: BTreeMap<(String, i32), (i64, PartitionKey)> = BTreeMap::new();
    for m in manifests.iter().filter(|m| !m.archived) {
        let slot = (m.key.topic.clone(), m.key.partition);
        if newest.get(&slot).is_none_or(|(t, _)| *t < m.written_ms) {
            newest.insert(slot, (m.written_ms, m.key.clone()));
        }
    }
    for m in &mut manifests {
        if !m.archived
            && newest
                .get(&(m.key.topic.clone(), m.key.partition))
                .is_some_and(|(_, k)| *k != m.key)
        {
            m.archived = true;
        }
    }
    fs::create_dir_all(to).with_context(|| format!("cannot create `{}`", to.display()))?;
    let mut hw = BTreeMap::new();
    let mut starts = BTreeMap::new();
    let mut total = 0u64;
    for m in &manifests {
        let name = dir_name(m);
        let (end, bytes) = restore_partition(o, m, to, &name, opts.index_interval_bytes)
            .with_context(|| format!("cannot restore {}", m.key.describe()))?;
        total += bytes;
        writeln!(
            out,
            "{name}: offsets {}..{end}, {} segments, {bytes} bytes (manifest generation {})",
            m.log_start_offset,
            m.segments.len(),
            m.generation
        )?;
        if !m.archived {
            let tp = TopicPartition::new(m.key.topic.clone(), m.key.partition);
            hw.insert(tp.clone(), end);
            starts.insert(tp, m.log_start_offset);
        }
    }
    // The archive of topic configs and group offsets, which a restore into Kafka needs.
    let (_, files) = bucket::latest_cluster_files(o, &cluster)?;
    for (name, sum) in &files {
        let bytes = fetch(o, &bucket::cluster_file(&cluster, name, sum), Some(sum))?;
        crate::checkpoint::rewrite_atomic(&to.join(name), &bytes)?;
        writeln!(out, "{name}: {} bytes", sum.size)?;
    }
    crate::checkpoint::write_offsets(&to.join(DataDir::REPLICATION_OFFSET), &hw)?;
    crate::checkpoint::write_offsets(&to.join(DataDir::RECOVERY_POINT), &hw)?;
    crate::checkpoint::write_offsets(&to.join(DataDir::LOG_START_OFFSET), &starts)?;
    // Last: until it is there, a run that stopped part-way may simply be run again.
    crate::log::identity::write_cluster_id(to, &cluster)?;
    // Every file is in place and fsynced, and what the loader recovered is flushed: the data
    // dir is as a clean stop leaves one.
    write_synced(&to.join(DataDir::CLEAN_SHUTDOWN_FILE), &[])?;
    fsync_dir(to)?;
    writeln!(
        out,
        "restored {} partition histories of cluster {cluster} ({total} bytes) into `{}`",
        manifests.len(),
        to.display()
    )?;
    Ok(())
}

/// Fetches object `name` and checks it against `sum`.
fn fetch(o: &Offsite, name: &str, sum: Option<&FileSum>) -> Result<Vec<u8>> {
    // Its plaintext is as large as the manifest says (a part of a file: at most a part).
    let size = sum.map_or(super::manifest::FILE_PART, |s| s.size);
    let bytes = bucket::get_sized(o, name, size)?
        .with_context(|| format!("object `{}` is missing from {}", o.object(name), o.location))?;
    if let Some(s) = sum
        && FileSum::of(&bytes) != *s
    {
        bail!(
            "object `{}` does not hold what its manifest says ({} bytes, CRC-32C {:08x})",
            o.object(name),
            s.size,
            s.crc
        );
    }
    Ok(bytes)
}

/// One partition directory; returns its log end offset and the bytes of its segments.
fn restore_partition(
    o: &Offsite,
    m: &Manifest,
    to: &Path,
    name: &str,
    index_interval_bytes: u64,
) -> Result<(i64, u64)> {
    let work = to.join(format!(".{name}{}", DataDir::CREATING_SUFFIX));
    if work.exists() {
        fs::remove_dir_all(&work).with_context(|| format!("cannot remove `{}`", work.display()))?;
    }
    fs::create_dir_all(&work).with_context(|| format!("cannot create `{}`", work.display()))?;
    let mut bytes_total = 0;
    let mut end = m.log_start_offset;
    let now = crate::clock::now_ms();
    let mut rebuild = Vec::new();
    for (base, seg) in &m.segments {
        let path = work.join(file_name(*base, "log"));
        let mut f = fs::File::create(&path)
            .with_context(|| format!("cannot create `{}`", path.display()))?;
        let mut written = 0u64;
        for (p, used_to) in seg.used() {
            if p.from != written {
                bail!(
                    "segment {base}: a piece starts at byte {} where {written} bytes are written",
                    p.from
                );
            }
            let bytes = fetch(
                o,
                &m.key.piece(*base, &p),
                Some(&FileSum {
                    size: p.to - p.from,
                    crc: p.crc,
                }),
            )?;
            let keep = usize::try_from(used_to - p.from).context("piece too large")?;
            let kept = bytes.get(..keep).unwrap_or_default();
            let walked = walk_batches(kept, |_, _| true)
                .with_context(|| format!("segment {base}, bytes from {}", p.from))?;
            if walked != kept.len() {
                bail!("segment {base}: a piece ends inside a batch");
            }
            f.write_all(kept)
                .with_context(|| format!("cannot write `{}`", path.display()))?;
            written += kept.len() as u64;
        }
        if written != seg.size {
            bail!(
                "segment {base}: its pieces hold {written} of its {} bytes",
                seg.size
            );
        }
        f.sync_all()
            .with_context(|| format!("cannot fsync `{}`", path.display()))?;
        bytes_total += written;
        end = end.max(seg.next_offset);
        match &seg.indexes {
            Some(ix) => {
                for (kind, sum) in [
                    ("index", ix.index),
                    ("timeindex", ix.timeindex),
                    ("txnindex", ix.txnindex),
                ] {
                    // A segment without aborted transactions has no `.txnindex` (the log
                    // creates one with its first entry): an empty one is not written.
                    if kind == "txnindex" && sum.size == 0 {
                        continue;
                    }
                    let bytes = fetch(o, &m.key.index(*base, kind, &sum), Some(&sum))?;
                    write_synced(&work.join(file_name(*base, kind)), &bytes)?;
                }
            }
            None => rebuild.push(*base),
        }
    }
    // Segments uploaded without indexes (the active one) of a live history are recovered by
    // the log's own loader once in place (indexes, aborted transactions, producer state);
    // an archived history's are rebuilt from their batches here (an aborted-transaction
    // index only where the archive has one).
    let open_base = rebuild.first().copied();
    for base in rebuild.into_iter().filter(|_| m.archived) {
        let (seg, _) = Segment::open(&work, base, index_interval_bytes, now, true, false)
            .with_context(|| format!("cannot rebuild the indexes of segment {base}"))?;
        drop(seg);
    }
    if m.segments.is_empty() {
        // A log always has a segment: an empty one at its start.
        drop(Segment::create(
            &work,
            m.log_start_offset,
            index_interval_bytes,
            now,
        )?);
    }
    crate::checkpoint::write_epochs(&work.join(DataDir::LEADER_EPOCH), &m.epochs)?;
    if !m.lost.is_empty() {
        crate::checkpoint::write_ranges(&work.join(DataDir::LOST_UPSTREAM), &m.lost)?;
    }
    if let Some(id) = m.key.topic_id {
        crate::log::identity::write_topic_id(&work, id)?;
    }
    for (fname, sum) in &m.files {
        let path = work.join(fname);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create `{}`", parent.display()))?;
        }
        let mut f = fs::File::create(&path)
            .with_context(|| format!("cannot create `{}`", path.display()))?;
        let mut got = FileSum { size: 0, crc: 0 };
        for part in 0..sum.parts() {
            let bytes = fetch(o, &m.key.file(fname, sum, part), None)?;
            got.size += bytes.len() as u64;
            got.crc = crc32c::crc32c_append(got.crc, &bytes);
            f.write_all(&bytes)
                .with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        if got != *sum {
            bail!(
                "the parts of `{fname}` offsite do not add up to what the manifest says ({} bytes, CRC-32C {:08x})",
                sum.size,
                sum.crc
            );
        }
        f.sync_all()
            .with_context(|| format!("cannot fsync `{}`", path.display()))?;
        if let Some(parent) = path.parent() {
            fsync_dir(parent)?;
        }
    }
    fsync_dir(&work)?;
    let dest: PathBuf = to.join(name);
    fs::rename(&work, &dest)
        .with_context(|| format!("cannot rename `{}` to `{}`", work.display(), dest.display()))?;
    fsync_dir(to)?;
    // Every live history goes through the loader (the segment without indexes recovered
    // from its start, else nothing), which leaves a producer snapshot at the end: the
    // daemon's first start then replays nothing.
    if !m.archived && !m.segments.is_empty() {
        let base = open_base.unwrap_or(end);
        let tp = TopicPartition::new(m.key.topic.clone(), m.key.partition);
        let config = crate::log::LogConfig {
            index_interval_bytes,
            ..crate::log::LogConfig::default()
        };
        let hints = crate::log::loader::CheckpointHints {
            recovery_point: Some(base),
            log_start_offset: Some(m.log_start_offset),
            high_watermark: Some(end),
        };
        let loaded = crate::log::loader::load(to, &tp, config, hints, false)
            .with_context(|| format!("cannot load the restored log of {tp}"))?;
        if let Some((mut log, report)) = loaded {
            for cut in &report.cuts {
                crate::log_warn!("{}", cut.describe(&tp));
            }
            log.flush()?;
            log.snapshot_producer_state(true)?;
            let loaded_end = log.log_end_offset();
            if loaded_end != end {
                bail!("the restored log of {tp} ends at {loaded_end}, its manifest at {end}");
            }
        }
    }
    Ok((end, bytes_total))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f =
        fs::File::create(path).with_context(|| format!("cannot create `{}`", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write `{}`", path.display()))
}
