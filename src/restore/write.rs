//! `restore write`: the planned partitions' segments copied from the replica into a stopped
//! Kafka broker's log dir, so that the broker loads them as its own.
//!
//! Before anything is written: the log dir's `meta.properties` must name the plan's cluster
//! and broker, and its `.lock` must be free; it is then held (an `fcntl` lock, as Kafka's
//! broker takes it), so the broker cannot start on the log dir while files move. Each
//! partition directory must hold the plan's topic id (Kafka made it when `prepare` created
//! the topic) and no data but Kafka's empty segment or segments this step already wrote.
//!
//! Per partition: each batch of the archive's range is read, its CRC verified, its partition
//! leader epoch set to 0 (bytes 12–15 of a v2 batch, not covered by the CRC: the new
//! cluster's epochs start above it, so its epoch cache stays monotonic), and written to
//! `<base>.log.tmp`, fsynced and renamed to `<base>.log`; a segment already in place with the
//! same bytes is kept, one with other bytes refuses the partition. Kafka's indexes and
//! producer snapshots in the directory are removed, so the broker rebuilds the offset and
//! time indexes, the `.txnindex` and the producer state from the segments when it loads
//! them. Then `leader-epoch-checkpoint` (epoch 0 from the log start), and, once for the log
//! dir, the partitions' entries of its `log-start-offset-checkpoint`,
//! `recovery-point-offset-checkpoint` and `replication-offset-checkpoint` (the others'
//! entries are kept). A crash anywhere leaves whole files or `.tmp` files Kafka ignores;
//! running the step again finishes the job.

use super::plan::{Plan, PlannedPartition};
use crate::checkpoint::{self, TopicPartition};
use crate::log::data_dir::DataDir;
use crate::log::format::segment::file_name;
use crate::log::format::segment_reader::SegmentReader;
use crate::record::SetEnd;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What `write` did to one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub tp: TopicPartition,
    pub segments: usize,
    /// Segments found in place already, byte for byte (a re-run).
    pub kept: usize,
    pub batches: u64,
    pub bytes: u64,
}

/// The files Kafka rebuilds from the segments: removed so that it does.
const REBUILT: [&str; 4] = [".index", ".timeindex", ".txnindex", ".snapshot"];

/// Fills `log_dir`'s partition directories from the replica in `data_dir`, as the plan says.
pub fn write(data_dir: &Path, plan: &Plan, log_dir: &Path) -> Result<Vec<Written>> {
    plan.check_source(data_dir)?;
    check_meta_properties(log_dir, plan)?;
    let _lock = lock_log_dir(log_dir, plan.broker)?;
    // Every partition checked before any is written.
    let (held, _) = crate::inspect::status::collect(data_dir)?;
    for p in &plan.partitions {
        check_target(data_dir, log_dir, p)?;
        let range = held
            .iter()
            .find(|s| s.tp == p.tp())
            .map(|s| (s.log_start_offset, s.log_end_offset));
        if !range.is_some_and(|(start, end)| start <= p.log_start_offset && p.log_end_offset <= end)
        {
            bail!(
                "{}: the plan restores {}..{}, the replica holds {}: the plan does not match the replica (run `restore prepare` again)",
                p.tp(),
                p.log_start_offset,
                p.log_end_offset,
                range.map_or("nothing".to_string(), |(a, b)| format!("{a}..{b}"))
            );
        }
    }
    let mut out = Vec::new();
    for p in &plan.partitions {
        out.push(write_partition(data_dir, log_dir, p)?);
    }
    update_log_dir_checkpoints(log_dir, &plan.partitions)?;
    Ok(out)
}

/// `meta.properties` of a Kafka log dir: its `key=value` lines.
fn meta_properties(log_dir: &Path) -> Result<BTreeMap<String, String>> {
    let path = log_dir.join(DataDir::META_PROPERTIES);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "`{}` not found: `{}` is not a Kafka log dir that a broker has started on",
            path.display(),
            log_dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// The log dir must belong to the plan's cluster and broker.
fn check_meta_properties(log_dir: &Path, plan: &Plan) -> Result<()> {
    let props = meta_properties(log_dir)?;
    let path = log_dir.join(DataDir::META_PROPERTIES);
    let cluster = props.get("cluster.id").map_or("(none)", String::as_str);
    if cluster != plan.cluster_id {
        bail!(
            "`{}` says cluster.id {cluster}, the plan is for cluster {}: refusing to write into another cluster's log dir",
            path.display(),
            plan.cluster_id
        );
    }
    let node = props
        .get("node.id")
        .or_else(|| props.get("broker.id"))
        .map_or("(none)", String::as_str);
    if node != plan.broker.to_string() {
        bail!(
            "`{}` says node.id {node}, the plan restores onto broker {}: refusing",
            path.display(),
            plan.broker
        );
    }
    Ok(())
}

/// Kafka's `.lock` of the log dir, taken as its broker takes it (`fcntl`, exclusive): held
/// until dropped, so the broker cannot start meanwhile. Held already: the broker runs.
fn lock_log_dir(log_dir: &Path, broker: i32) -> Result<File> {
    let path = log_dir.join(".lock");
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("failed to open `{}`", path.display()))?;
    if let Ok(owner) = fs::metadata(log_dir) {
        owned_like(&path, &owner)?;
    }
    match rustix::fs::fcntl_lock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(f),
        Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => bail!(
            "`{}` is locked: a Kafka broker is running on `{}`; stop broker {broker} before `restore write`",
            path.display(),
            log_dir.display()
        ),
        Err(e) => Err(e).with_context(|| format!("failed to lock `{}`", path.display())),
    }
}

fn dir_name(p: &PlannedPartition) -> String {
    format!("{}-{}", p.topic, p.partition)
}

/// The `.log` files of a directory, by base offset.
fn log_files(dir: &Path) -> Result<BTreeMap<i64, PathBuf>> {
    Ok(crate::log::partition::list_segment_bases(dir)?
        .into_iter()
        .map(|b| (b, dir.join(file_name(b, "log"))))
        .collect())
}

fn file_len(p: &Path) -> Result<u64> {
    Ok(fs::metadata(p)
        .with_context(|| format!("failed to stat `{}`", p.display()))?
        .len())
}

/// The partition's source and target directories are there, the target holds the plan's
/// topic id and no data but an empty segment or segments of the archive's.
fn check_target(data_dir: &Path, log_dir: &Path, p: &PlannedPartition) -> Result<()> {
    let name = dir_name(p);
    let src = data_dir.join(&name);
    if !src.is_dir() {
        bail!("the replica has no `{}`", src.display());
    }
    let dst = log_dir.join(&name);
    let want = p.topic_id()?;
    match crate::log::identity::read_topic_id(&dst) {
        Ok(Some(id)) if id == want => {}
        Ok(Some(id)) => bail!(
            "`{}` holds topic id {id}, the plan's is {want}: a topic re-created since `restore prepare`? run it again",
            dst.join(DataDir::PARTITION_METADATA).display()
        ),
        Ok(None) => bail!(
            "`{}` is missing or has no partition.metadata: the broker has not created the partition (run `restore prepare` and let the broker start once)",
            dst.display()
        ),
        Err(e) => return Err(e),
    }
    let ours = log_files(&src)?;
    for (base, path) in log_files(&dst)? {
        if file_len(&path)? > 0 && !ours.contains_key(&base) {
            bail!(
                "`{}` holds data the archive does not have ({} bytes): the partition is not empty; refusing to overwrite it",
                path.display(),
                file_len(&path)?
            );
        }
    }
    Ok(())
}

fn write_partition(data_dir: &Path, log_dir: &Path, p: &PlannedPartition) -> Result<Written> {
    let name = dir_name(p);
    let (src, dst) = (data_dir.join(&name), log_dir.join(&name));
    let mut done = Written {
        tp: p.tp(),
        segments: 0,
        kept: 0,
        batches: 0,
        bytes: 0,
    };
    remove_rebuilt_and_tmp(&dst)?;
    let owner =
        fs::metadata(&dst).with_context(|| format!("failed to stat `{}`", dst.display()))?;
    let sources = log_files(&src)?;
    let mut written = Vec::new();
    let mut end = p.log_start_offset;
    for (base, path) in &sources {
        let next = sources.range(base + 1..).next().map(|(b, _)| *b);
        // Segments wholly below the log start or at or past the end are not restored.
        if next.is_some_and(|n| n <= p.log_start_offset) || *base >= p.log_end_offset {
            continue;
        }
        let Some(c) = copy_segment(path, &dst, *base, p, &owner)? else {
            continue;
        };
        written.push(*base);
        end = end.max(c.end);
        done.segments += 1;
        done.kept += usize::from(c.kept);
        done.batches += c.batches;
        done.bytes += c.bytes;
        crate::log::format::diverged::test_pause_point("restore-write-segment");
    }
    // An end past the last batch (no batch at all, or offsets the leader had deleted before
    // the replica got them): an empty segment there, which Kafka takes as its log end, as a
    // new log starts.
    if end < p.log_end_offset || written.is_empty() {
        let base = end.max(p.log_start_offset).max(p.log_end_offset);
        let path = dst.join(file_name(base, "log"));
        if !path.exists() {
            File::create(&path)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("failed to create `{}`", path.display()))?;
        }
        owned_like(&path, &owner)?;
        written.push(base);
    }
    // Kafka's empty segments that the archive's do not replace.
    for (base, path) in log_files(&dst)? {
        if !written.contains(&base) && file_len(&path)? == 0 {
            fs::remove_file(&path)
                .with_context(|| format!("failed to remove `{}`", path.display()))?;
        }
    }
    let epochs = dst.join(DataDir::LEADER_EPOCH);
    checkpoint::write_epochs(&epochs, &[(0, p.log_start_offset)])?;
    owned_like(&epochs, &owner)?;
    checkpoint::fsync_dir(&dst)?;
    Ok(done)
}

/// Removes the indexes and producer snapshots Kafka rebuilds, and `.tmp` files a crash of
/// this step left.
fn remove_rebuilt_and_tmp(dst: &Path) -> Result<()> {
    let entries =
        fs::read_dir(dst).with_context(|| format!("failed to list `{}`", dst.display()))?;
    for e in entries {
        let e = e.with_context(|| format!("failed to list `{}`", dst.display()))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        let stem_is_offset = name
            .split('.')
            .next()
            .is_some_and(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()));
        if stem_is_offset
            && (REBUILT.iter().any(|s| name.ends_with(s)) || name.ends_with(".log.tmp"))
        {
            fs::remove_file(e.path())
                .with_context(|| format!("failed to remove `{}`", e.path().display()))?;
        }
    }
    Ok(())
}

/// What [`copy_segment`] copied.
struct Copied {
    batches: u64,
    bytes: u64,
    /// The offset after its last batch.
    end: i64,
    /// Found in place already, byte for byte.
    kept: bool,
}

/// Copies the planned batches of the segment at `src` into `<base>.log` of `dst`, through a
/// `.tmp` file owned as `dst` is; `None` when it holds none of them.
fn copy_segment(
    src: &Path,
    dst: &Path,
    base: i64,
    p: &PlannedPartition,
    owner: &fs::Metadata,
) -> Result<Option<Copied>> {
    let target = dst.join(file_name(base, "log"));
    let tmp = dst.join(format!("{}.tmp", file_name(base, "log")));
    let mut out = std::io::BufWriter::new(
        File::create(&tmp).with_context(|| format!("failed to create `{}`", tmp.display()))?,
    );
    let mut reader = SegmentReader::open(src)?;
    let (mut batches, mut bytes, mut end) = (0u64, 0u64, base);
    while let Some((h, pos)) = reader.next_batch()? {
        if h.base_offset >= p.log_end_offset {
            break;
        }
        if h.last_offset >= p.log_end_offset {
            bail!(
                "`{}`: the batch at byte {pos} holds offsets {}..={}, across the planned end {}: the plan does not match the replica",
                src.display(),
                h.base_offset,
                h.last_offset,
                p.log_end_offset
            );
        }
        let (crc, batch) = reader.checked_batch(true)?;
        if let Err(e) = crc {
            bail!(
                "`{}`: the batch at byte {pos} (offset {}) fails its check: {e}; `replica-follower repair` re-fetches it while the source lives",
                src.display(),
                h.base_offset
            );
        }
        let mut batch = batch.to_vec();
        if h.magic >= 2
            && let Some(epoch) = batch.get_mut(12..16)
        {
            epoch.copy_from_slice(&0i32.to_be_bytes());
        }
        out.write_all(&batch)
            .with_context(|| format!("failed to write `{}`", tmp.display()))?;
        batches += 1;
        bytes += batch.len() as u64;
        end = h.last_offset + 1;
    }
    if let Some(end) = reader.end().filter(|e| !matches!(e, SetEnd::Complete)) {
        bail!(
            "`{}` ends in a damaged or partial batch ({end:?}): run `replica-follower verify` on the replica",
            src.display()
        );
    }
    let file = out
        .into_inner()
        .map_err(|e| anyhow::anyhow!("failed to write `{}`: {}", tmp.display(), e.error()))?;
    if batches == 0 {
        drop(file);
        fs::remove_file(&tmp).with_context(|| format!("failed to remove `{}`", tmp.display()))?;
        return Ok(None);
    }
    file.sync_all()
        .with_context(|| format!("failed to fsync `{}`", tmp.display()))?;
    drop(file);
    if target.exists() && file_len(&target)? > 0 {
        let same = same_bytes(&tmp, &target)?;
        fs::remove_file(&tmp).with_context(|| format!("failed to remove `{}`", tmp.display()))?;
        if !same {
            bail!(
                "`{}` holds other bytes than the archive's segment: refusing to overwrite it",
                target.display()
            );
        }
        owned_like(&target, owner)?;
        return Ok(Some(Copied {
            batches,
            bytes,
            end,
            kept: true,
        }));
    }
    owned_like(&tmp, owner)?;
    fs::rename(&tmp, &target).with_context(|| {
        format!(
            "failed to rename `{}` to `{}`",
            tmp.display(),
            target.display()
        )
    })?;
    checkpoint::fsync_dir(dst)?;
    Ok(Some(Copied {
        batches,
        bytes,
        end,
        kept: false,
    }))
}

/// Gives `path` the owner and group of `like` (what Kafka made): the broker runs as its own
/// user and opens every segment and checkpoint it loads for writing, so a file this step
/// creates as root must become the broker's.
fn owned_like(path: &Path, like: &fs::Metadata) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).with_context(|| format!("failed to stat `{}`", path.display()))?;
    if (m.uid(), m.gid()) == (like.uid(), like.gid()) {
        return Ok(());
    }
    std::os::unix::fs::chown(path, Some(like.uid()), Some(like.gid())).with_context(|| {
        format!(
            "failed to give `{}` the log dir's owner {}:{} (run `restore write` as root or as the broker's user)",
            path.display(),
            like.uid(),
            like.gid()
        )
    })
}

fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    if file_len(a)? != file_len(b)? {
        return Ok(false);
    }
    let open =
        |p: &Path| File::open(p).with_context(|| format!("failed to open `{}`", p.display()));
    let (mut fa, mut fb) = (open(a)?, open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = fa
            .read(&mut ba)
            .with_context(|| format!("failed to read `{}`", a.display()))?;
        if n == 0 {
            return Ok(true);
        }
        let (ra, rb) = (ba.get(..n), bb.get_mut(..n));
        let Some(rb) = rb else { return Ok(false) };
        fb.read_exact(rb)
            .with_context(|| format!("failed to read `{}`", b.display()))?;
        if ra != Some(&*rb) {
            return Ok(false);
        }
    }
}

/// The partitions' entries of the log dir's offset checkpoints: log start and recovery point
/// at the log start (the broker recovers every restored segment), high watermark at the end.
fn update_log_dir_checkpoints(log_dir: &Path, parts: &[PlannedPartition]) -> Result<()> {
    let owner =
        fs::metadata(log_dir).with_context(|| format!("failed to stat `{}`", log_dir.display()))?;
    for (file, value) in [
        (
            DataDir::LOG_START_OFFSET,
            (|p: &PlannedPartition| p.log_start_offset) as fn(&PlannedPartition) -> i64,
        ),
        (DataDir::RECOVERY_POINT, |p| p.log_start_offset),
        (DataDir::REPLICATION_OFFSET, |p| p.log_end_offset),
    ] {
        let path = log_dir.join(file);
        let mut offsets = checkpoint::read_offsets(&path)?;
        for p in parts {
            offsets.insert(p.tp(), value(p));
        }
        checkpoint::write_offsets(&path, &offsets)?;
        owned_like(&path, &owner)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::uuid::Uuid;
    use crate::record::{BatchHeader, BatchIter};
    use crate::restore::plan::PLAN_VERSION;
    use crate::serve::fuzzing;

    const TARGET: &str = "target-cluster";
    const NEW_ID: Uuid = Uuid([9; 16]);

    /// A replica, and a stopped broker 1's log dir where Kafka created `orders-0` empty, with
    /// another partition of its own beside it.
    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf, Plan) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("replica");
        fuzzing::build_data_dir(&data).unwrap();
        let log_dir = dir.path().join("kafka");
        let part = log_dir.join("orders-0");
        fs::create_dir_all(&part).unwrap();
        fs::write(
            log_dir.join("meta.properties"),
            format!("#\ndirectory.id=x\nnode.id=1\nversion=1\ncluster.id={TARGET}\n"),
        )
        .unwrap();
        crate::log::identity::write_topic_id(&part, NEW_ID).unwrap();
        for f in ["log", "index", "timeindex"] {
            fs::write(part.join(file_name(0, f)), b"").unwrap();
        }
        checkpoint::write_epochs(&part.join(DataDir::LEADER_EPOCH), &[(3, 0)]).unwrap();
        let other = log_dir.join("other-0");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join(file_name(0, "log")), b"kafka's own").unwrap();
        let mut offsets = BTreeMap::new();
        offsets.insert(TopicPartition::new("other", 0), 11);
        checkpoint::write_offsets(&log_dir.join(DataDir::LOG_START_OFFSET), &offsets).unwrap();
        let tp = TopicPartition::new(fuzzing::TOPIC, 0);
        let end = batches(&data.join("orders-0"))
            .last()
            .map(|b| BatchHeader::parse(b, usize::MAX).unwrap().last_offset + 1)
            .unwrap();
        let plan = Plan {
            version: PLAN_VERSION,
            cluster_id: TARGET.into(),
            broker: 1,
            source_cluster_id: None,
            partitions: vec![PlannedPartition {
                topic: tp.topic.clone(),
                partition: 0,
                topic_id: NEW_ID.to_string(),
                log_start_offset: 0,
                log_end_offset: end,
            }],
            held: Vec::new(),
        };
        (dir, data, log_dir, plan)
    }

    /// Every batch of the `.log` files of `dir`, in offset order.
    fn batches(dir: &Path) -> Vec<Vec<u8>> {
        log_files(dir)
            .unwrap()
            .values()
            .flat_map(|p| {
                let bytes = fs::read(p).unwrap();
                BatchIter::new(&bytes, usize::MAX)
                    .map(|(_, _, b)| b.to_vec())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_archive_lands_with_epoch_zero_and_kafka_rebuilds_the_rest() {
        let (_d, data, log_dir, plan) = setup();
        let written = write(&data, &plan, &log_dir).unwrap();
        let part = log_dir.join("orders-0");
        let (src, dst) = (batches(&data.join("orders-0")), batches(&part));
        let end = plan.partitions[0].log_end_offset;
        let src: Vec<_> = src
            .into_iter()
            .filter(|b| BatchHeader::parse(b, usize::MAX).unwrap().last_offset < end)
            .collect();
        assert_eq!(src.len(), dst.len());
        assert!(src.len() > 3, "{} batches", src.len());
        assert_eq!(written[0].batches as usize, dst.len());
        let epochs: Vec<i32> = src
            .iter()
            .map(|b| {
                BatchHeader::parse(b, usize::MAX)
                    .unwrap()
                    .partition_leader_epoch
            })
            .collect();
        assert!(
            epochs.iter().any(|e| *e > 0),
            "the source has epochs above 0"
        );
        for (s, d) in src.iter().zip(&dst) {
            let h = BatchHeader::parse(d, usize::MAX).unwrap();
            assert_eq!(h.partition_leader_epoch, 0);
            h.verify_crc(d).unwrap();
            assert_eq!(
                (&s[..12], &s[16..]),
                (&d[..12], &d[16..]),
                "only the epoch differs"
            );
        }
        let names: Vec<String> = fs::read_dir(&part)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.ends_with(".index") || n.ends_with(".timeindex") || n.ends_with(".tmp")),
            "{names:?}"
        );
        assert_eq!(
            checkpoint::read_epochs(&part.join(DataDir::LEADER_EPOCH)).unwrap(),
            vec![(0, 0)]
        );
        let starts = checkpoint::read_offsets(&log_dir.join(DataDir::LOG_START_OFFSET)).unwrap();
        assert_eq!(starts[&TopicPartition::new("other", 0)], 11, "kept");
        assert_eq!(starts[&TopicPartition::new("orders", 0)], 0);
        let hws = checkpoint::read_offsets(&log_dir.join(DataDir::REPLICATION_OFFSET)).unwrap();
        assert_eq!(hws[&TopicPartition::new("orders", 0)], end);
        assert_eq!(
            fs::read(log_dir.join("other-0").join(file_name(0, "log"))).unwrap(),
            b"kafka's own"
        );
        // Again, as after a crash: everything is found in place.
        let again = write(&data, &plan, &log_dir).unwrap();
        assert_eq!(again[0].kept, again[0].segments);
        assert_eq!(batches(&part), dst);
    }

    #[test]
    fn a_log_start_past_the_first_segments_leaves_them_out() {
        let (_d, data, log_dir, mut plan) = setup();
        let sources = log_files(&data.join("orders-0")).unwrap();
        let second = *sources.keys().nth(1).unwrap();
        plan.partitions[0].log_start_offset = second;
        write(&data, &plan, &log_dir).unwrap();
        let dst = log_files(&log_dir.join("orders-0")).unwrap();
        assert_eq!(dst.keys().next(), Some(&second), "{dst:?}");
        assert_eq!(
            checkpoint::read_epochs(&log_dir.join("orders-0").join(DataDir::LEADER_EPOCH)).unwrap(),
            vec![(0, second)]
        );
    }

    #[test]
    fn an_end_past_the_last_batch_is_an_empty_segment_there() {
        let (_d, data, log_dir, mut plan) = setup();
        // Offsets the leader deleted before the replica got them: the replica's log ends at
        // an empty segment past its last batch.
        let last = plan.partitions[0].log_end_offset;
        File::create(data.join("orders-0").join(file_name(last + 5, "log"))).unwrap();
        plan.partitions[0].log_end_offset = last + 5;
        write(&data, &plan, &log_dir).unwrap();
        let dst = log_files(&log_dir.join("orders-0")).unwrap();
        let (base, path) = dst.last_key_value().unwrap();
        assert_eq!((*base, file_len(path).unwrap()), (last + 5, 0), "{dst:?}");
    }

    #[test]
    fn what_write_creates_belongs_to_the_log_dirs_owner() {
        use std::os::unix::fs::MetadataExt;
        let (_d, data, log_dir, plan) = setup();
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("not root: files cannot be given to another user here; checked as root");
            return;
        }
        // Kafka's user: the log dir and what the broker made in it are its.
        let kafka = 65_534;
        for e in walk(&log_dir) {
            std::os::unix::fs::lchown(&e, Some(kafka), Some(kafka)).unwrap();
        }
        write(&data, &plan, &log_dir).unwrap();
        let not_kafkas: Vec<PathBuf> = walk(&log_dir)
            .into_iter()
            .filter(|p| fs::metadata(p).unwrap().uid() != kafka)
            .collect();
        assert!(not_kafkas.is_empty(), "root's files: {not_kafkas:?}");
    }

    /// `dir` and everything under it.
    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = vec![dir.to_path_buf()];
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn a_plan_past_what_the_replica_holds_is_refused() {
        let (_d, data, log_dir, mut plan) = setup();
        plan.partitions[0].log_end_offset += 100;
        let e = format!("{:#}", write(&data, &plan, &log_dir).unwrap_err());
        assert!(e.contains("the plan does not match the replica"), "{e}");
        assert_eq!(
            file_len(&log_dir.join("orders-0").join(file_name(0, "log"))).unwrap(),
            0
        );
    }

    #[test]
    fn refusals_name_what_is_wrong_and_write_nothing() {
        let (_d, data, log_dir, plan) = setup();
        let part = log_dir.join("orders-0");
        let untouched = |why: &str| {
            assert_eq!(
                file_len(&part.join(file_name(0, "log"))).unwrap(),
                0,
                "{why}"
            );
        };
        let refused = |plan: &Plan, says: &str| {
            let e = format!("{:#}", write(&data, plan, &log_dir).unwrap_err());
            assert!(e.contains(says), "{says}: {e}");
            untouched(says);
        };
        let mut other = plan.clone();
        other.cluster_id = "another".into();
        refused(
            &other,
            "says cluster.id target-cluster, the plan is for cluster another",
        );
        let mut other = plan.clone();
        other.broker = 2;
        refused(&other, "says node.id 1, the plan restores onto broker 2");
        let mut other = plan.clone();
        other.partitions[0].topic_id = Uuid([1; 16]).to_string();
        refused(&other, "the plan's is");
        fs::write(part.join(file_name(999_999, "log")), b"data").unwrap();
        refused(&plan, "holds data the archive does not have");
        fs::remove_file(part.join(file_name(999_999, "log"))).unwrap();

        // A broker holding the log dir's lock: another process's fcntl lock.
        let mut holder = std::process::Command::new("python3")
            .arg("-c")
            .arg("import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)")
            .arg(log_dir.join(".lock"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "locked");
        refused(&plan, "a Kafka broker is running on");
        holder.kill().unwrap();
        holder.wait().unwrap();
        write(&data, &plan, &log_dir).unwrap();

        // Other bytes where an archive segment goes.
        let first = *log_files(&part).unwrap().keys().next().unwrap();
        let path = part.join(file_name(first, "log"));
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let e = format!("{:#}", write(&data, &plan, &log_dir).unwrap_err());
        assert!(
            e.contains("holds other bytes than the archive's segment"),
            "{e}"
        );
        assert_eq!(fs::read(&path).unwrap(), bytes, "left as it was");
    }
}
