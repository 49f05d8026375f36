//! `replica-follower verify`: checks a data dir end to end and lists every problem, one line
//! each: batch CRCs and offsets, the ordering rule within and across segments (gaps are fine,
//! as compaction and lost upstream offsets leave them; overlaps and offsets going backwards
//! are not), every offset- and time-index entry, `.txnindex` entries against the ABORT
//! markers, `partition.metadata`, the `diverged/` copies and the archived histories, and the
//! checkpoint files against the logs.

use crate::checkpoint::{self, TopicPartition};
use crate::log::data_dir::DataDir;
use crate::log::format::producer_state::ProducerState;
use crate::log::format::segment;
use crate::log::format::segment_reader::SegmentReader;
use crate::log::format::txn_index::AbortedTxn;
use crate::log::format::{diverged, offset_index, time_index, txn_index};
use crate::log::identity;
use crate::log::partition::list_segment_bases;
use crate::log::read_view::{StoppedCheckpoints, UnflushedTail};
use crate::log::reader::{self, IndexFile};
use crate::record::records::{ControlType, control_marker};
use crate::record::{SetEnd, check_follows};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::Path;
use std::path::PathBuf;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    pub partitions: usize,
    pub segments: usize,
    pub batches: usize,
    pub problems: Vec<String>,
    /// Log start (first segment base) and end per partition.
    pub extents: BTreeMap<TopicPartition, (i64, i64)>,
    /// Archived histories checked.
    pub archived: usize,
    /// Bytes past the checkpointed recovery points, not checked because a daemon is
    /// writing them (see [`verify_with`]).
    pub in_flight_bytes: u64,
    /// Stopped uncleanly: what each log holds past its recovery point. A tail there that is
    /// not whole batches is what a crash leaves unfsynced and the next start cuts: it is
    /// reported, not counted as a problem (`--all` counts it).
    pub unflushed: Vec<(TopicPartition, UnflushedTail)>,
}

/// Adds a file's problems: the first few in full, then a count, so one damaged index does
/// not bury the rest of the report.
fn report_capped(problems: &mut Vec<String>, file: &Path, bad: Vec<String>) {
    const SHOWN: usize = 3;
    let n = bad.len();
    for b in bad.into_iter().take(SHOWN) {
        problems.push(format!("{}: {b}", file.display()));
    }
    if n > SHOWN {
        problems.push(format!(
            "{}: … and {} more bad entries (rebuilt by recovery)",
            file.display(),
            n - SHOWN
        ));
    }
}

/// An offset or time index read whole to be checked (its size is bounded by the segment's
/// index cadence, not by its bytes): its entries, and its length or why it is unreadable.
struct IndexToCheck<E> {
    path: PathBuf,
    entry_size: usize,
    len: std::io::Result<usize>,
    entries: Vec<E>,
}

impl<E> IndexToCheck<E> {
    /// The index `file` as the log's reader read it; its entries are `entry_size` bytes.
    fn new(file: IndexFile<E>, entry_size: usize) -> Self {
        let (len, entries) = match file.read {
            Ok((len, entries)) => (Ok(len), entries),
            Err(e) => (Err(e), Vec::new()),
        };
        IndexToCheck {
            path: file.path,
            entry_size,
            len,
            entries,
        }
    }

    /// Whether the file was not there (deleted meanwhile).
    fn gone(&self) -> bool {
        self.len
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    }

    /// Adds the file's problems: unreadable, or not a whole number of entries, then the
    /// entries found `bad`.
    fn report(&self, bad: Vec<String>, problems: &mut Vec<String>) {
        match &self.len {
            Ok(len) => {
                if len % self.entry_size != 0 {
                    problems.push(format!(
                        "{}: size {len} is not a multiple of {}",
                        self.path.display(),
                        self.entry_size
                    ));
                }
                report_capped(problems, &self.path, bad);
            }
            Err(_) if self.gone() => problems.push(format!("{}: missing", self.path.display())),
            Err(e) => problems.push(format!("{}: unreadable: {e}", self.path.display())),
        }
    }
}

/// A reader of the `.log`-format file `path`; `None`, with the problem noted, when it cannot
/// be opened. With `gone_is_fine` (a running daemon's retention or truncation may delete a
/// segment at any moment) a file no longer there is skipped, not a problem.
fn open_log(path: &Path, r: &mut VerifyReport, gone_is_fine: bool) -> Option<SegmentReader> {
    let opened = match File::open(path) {
        Err(e) if gone_is_fine && e.kind() == std::io::ErrorKind::NotFound => return None,
        opened => opened,
    };
    let opened = opened
        .map_err(|e| format!("{}: unreadable: {e}", path.display()))
        .and_then(|f| SegmentReader::from_file(f, path).map_err(|e| format!("{e:#}")));
    opened.map_err(|problem| r.problems.push(problem)).ok()
}

/// Checks a record-set file that is not a segment (a `diverged/` copy): every batch whole,
/// its CRC valid, the ordering rule kept, and the range its name gives.
fn verify_record_file(path: &Path, first: i64, last: i64, r: &mut VerifyReport) {
    let Some(mut reader) = open_log(path, r, false) else {
        return;
    };
    let mut prev = None;
    let mut seen = None;
    loop {
        let (h, pos) = match reader.next_batch() {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => return r.problems.push(format!("{e:#}")),
        };
        match reader.check_crc() {
            Ok(Err(e)) => r
                .problems
                .push(format!("{}: byte {pos}: {e}", path.display())),
            Ok(Ok(())) => {}
            Err(e) => return r.problems.push(format!("{e:#}")),
        }
        if let Err(e) = check_follows(prev, &h) {
            r.problems
                .push(format!("{}: byte {pos}: {e}", path.display()));
        }
        prev = Some(h.last_offset);
        seen = Some((seen.map_or(h.base_offset, |(f, _)| f), h.last_offset));
    }
    if !matches!(reader.end(), Some(SetEnd::Complete)) {
        r.problems.push(format!(
            "{}: does not end with a whole batch",
            path.display()
        ));
    }
    if seen != Some((first, last)) {
        r.problems.push(format!(
            "{}: holds offsets {}, its name says {first}..{last}",
            path.display(),
            seen.map_or_else(|| "none".to_string(), |(a, b)| format!("{a}..{b}"))
        ));
    }
}

/// How much of a log `verify` judges itself.
#[derive(Debug, Clone, Copy)]
enum Limit {
    /// A daemon writes past this offset: what lies there is in flight, not judged, and
    /// files may come and go meanwhile.
    Running(i64),
    /// Stopped uncleanly: checked in full below the recovery point. The tail past it, which
    /// ends at `log_end` once recovered, is judged by [`crate::log::read_view::scan_unflushed`]
    /// as recovery will judge it.
    Unflushed { recovery_point: i64, log_end: i64 },
}

impl Limit {
    fn below(self) -> i64 {
        match self {
            Limit::Running(o) => o,
            Limit::Unflushed { recovery_point, .. } => recovery_point,
        }
    }

    fn running(self) -> bool {
        matches!(self, Limit::Running(_))
    }
}

fn verify_partition(
    data_dir: &Path,
    tp: &TopicPartition,
    limit: Option<Limit>,
    r: &mut VerifyReport,
) -> Result<()> {
    let dir = data_dir.join(tp.dir_name());
    let end = verify_log_dir(&dir, limit, r)?;
    r.extents.insert(tp.clone(), end);
    let end = end.1;
    if let Err(e) = identity::read_topic_id(&dir) {
        r.problems.push(format!("{e:#}"));
    }
    if let Err(e) = checkpoint::read_ranges(&dir.join(DataDir::LOST_UPSTREAM)) {
        r.problems.push(format!("{e:#}"));
    }
    for (path, first, last) in diverged::list(&dir)? {
        verify_record_file(&path, first, last, r);
    }
    match checkpoint::read_epochs(&dir.join(DataDir::LEADER_EPOCH)) {
        Ok(epochs) => {
            for (e, o) in epochs {
                if o > end {
                    r.problems.push(format!("{tp}: leader-epoch-checkpoint: epoch {e} starts at {o}, past the log end {end}"));
                }
            }
        }
        Err(e) => r.problems.push(format!("{e:#}")),
    }
    Ok(())
}

/// Checks the segments of one log directory (a partition's, or an archived one); returns its
/// first segment base and log end (with a `limit`: `i64::MAX` while running, else the end
/// the unflushed tail gives).
/// With `limit`, only batches ending below it are checked, and index entries for them: what
/// lies past it is being written and counts as in flight, or is judged apart.
fn verify_log_dir(dir: &Path, limit: Option<Limit>, r: &mut VerifyReport) -> Result<(i64, i64)> {
    let below = |offset: i64| limit.is_none_or(|l| offset < l.below());
    let running = limit.is_some_and(Limit::running);
    let bases = list_segment_bases(dir)?;
    let mut prev_last: Option<i64> = None;
    let mut first_base = None;
    // The open transactions, replayed from the first batch as appending built them, and the
    // `.txnindex` entries each segment should have. The replay is exact only when the log
    // holds every transaction's start: no offsets lost upstream (the skip forgets open
    // transactions) and no marker of a transaction begun before the log's first batch.
    let mut replay = ProducerState::default();
    let mut exact = checkpoint::read_ranges(&dir.join(DataDir::LOST_UPSTREAM))
        .map(|l| l.is_empty())
        .unwrap_or(false);
    let mut expected_txn: Vec<(PathBuf, Vec<AbortedTxn>, Vec<AbortedTxn>)> = Vec::new();
    for &base in &bases {
        r.segments += 1;
        first_base.get_or_insert(base);
        let log_path = dir.join(segment::file_name(base, "log"));
        if !below(base) {
            if running {
                r.in_flight_bytes += std::fs::metadata(&log_path).map_or(0, |m| m.len());
            }
            continue;
        }
        // Running, retention or a truncation may delete a segment between the listing and
        // the open: gone is not damage then.
        let Some(mut reader) = open_log(&log_path, r, running) else {
            continue;
        };
        // The index entries are read first, so that the walk records only what they ask
        // about: memory grows with the indexes, not with the batches of the segment.
        let idx = IndexToCheck::new(
            reader::read_offset_index(dir, base, |&(o, _)| below(o)),
            offset_index::ENTRY_SIZE,
        );
        // batch start position an entry names → the last offset of the batch there
        let mut starts: HashMap<u32, Option<i64>> =
            idx.entries.iter().map(|&(_, p)| (p, None)).collect();
        let tix = IndexToCheck::new(
            reader::read_time_index(dir, base, |&(_, o)| below(o)),
            time_index::ENTRY_SIZE,
        );
        // last offset an entry names → the largest timestamp up to the batch ending there
        let mut by_last: HashMap<i64, Option<i64>> =
            tix.entries.iter().map(|&(_, o)| (o, None)).collect();
        // (producer id, offset) of every ABORT marker in the segment
        let mut aborts: BTreeSet<(i64, i64)> = BTreeSet::new();
        let mut expected = Vec::new();
        let mut max_ts = -1;
        let mut read_failed = false;
        let mut stopped = false;
        loop {
            let (h, pos) = match reader.next_batch() {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    r.problems.push(format!("{e:#}"));
                    read_failed = true;
                    break;
                }
            };
            if !below(h.last_offset) {
                if running {
                    r.in_flight_bytes += reader.size() - pos;
                }
                stopped = true;
                break;
            }
            r.batches += 1;
            // Control batches are read whole (their marker is needed); the others only
            // stream through the CRC check.
            let (crc, b) = match reader.checked_batch(h.is_control()) {
                Ok(checked) => checked,
                Err(e) => {
                    r.problems.push(format!("{e:#}"));
                    read_failed = true;
                    break;
                }
            };
            if let Err(e) = &crc {
                r.problems
                    .push(format!("{}: byte {pos}: {e}", log_path.display()));
            }
            if h.last_offset < base {
                r.problems.push(format!(
                    "{}: byte {pos}: batch {}..{} lies below the segment base {base}",
                    log_path.display(),
                    h.base_offset,
                    h.last_offset
                ));
            }
            if let Err(e) = check_follows(prev_last, &h) {
                r.problems
                    .push(format!("{}: byte {pos}: {e} (overlap)", log_path.display()));
            }
            let marker = control_marker(&h, b);
            if let Some((ControlType::Abort, _)) = marker {
                aborts.insert((h.producer_id, h.base_offset));
            }
            if matches!(marker, Some((ControlType::Abort | ControlType::Commit, _)))
                && !replay.open_transactions().contains_key(&h.producer_id)
            {
                exact = false;
            }
            if crc.is_ok()
                && let Some(a) = replay.update(&h, b)
            {
                expected.push(a);
            }
            prev_last = Some(h.last_offset);
            max_ts = max_ts.max(h.max_timestamp);
            if let Some(last) = u32::try_from(pos).ok().and_then(|pos| starts.get_mut(&pos)) {
                *last = Some(h.last_offset);
            }
            if let Some(t) = by_last.get_mut(&h.last_offset) {
                *t = Some(max_ts);
            }
        }
        if read_failed {
            // The rest of the segment is unknown: its indexes cannot be judged, nor the
            // transactions after it.
            exact = false;
            continue;
        }
        if stopped {
            // Its `.txnindex` may already hold entries for markers past the limit.
            exact = false;
        }
        match reader.end().filter(|_| !stopped) {
            Some(SetEnd::Partial { bytes: n }) => {
                let at = reader.position();
                r.problems.push(format!(
                    "{}: partial batch at byte {at} ({n} bytes, after offset {}{}): a write torn by a crash, a damaged size field, or a file cut short",
                    log_path.display(),
                    prev_last.map_or_else(|| "none".to_string(), |l| l.to_string()),
                    reader.announced_size().map_or_else(String::new, |a| format!(
                        "; its size field announces {a} bytes"
                    ))
                ))
            }
            Some(SetEnd::Corrupt { position, reason }) => r.problems.push(format!(
                "{}: corrupt batch at byte {position}: {reason}",
                log_path.display()
            )),
            _ => {}
        }
        let log_size = reader.size();
        let mut bad = Vec::new();
        for (i, &(off, pos)) in idx.entries.iter().enumerate() {
            match starts.get(&pos).copied().flatten() {
                Some(last) if last == off => {}
                Some(last) => bad.push(format!("entry {i} says offset {off} at byte {pos}, but the batch there ends at {last}")),
                None if u64::from(pos) >= log_size => bad.push(format!("entry {i} (offset {off}) points at byte {pos}, past the end of the log ({log_size} bytes)")),
                None => bad.push(format!("entry {i} (offset {off}) points at byte {pos}, which is not a batch start")),
            }
        }
        if !(running && idx.gone()) {
            idx.report(bad, &mut r.problems);
        }
        let txn_path = dir.join(segment::file_name(base, "txnindex"));
        match txn_index::read(&txn_path) {
            Ok(mut entries) => {
                entries.retain(|e| below(e.last_offset));
                let mut bad = Vec::new();
                let mut listed = BTreeSet::new();
                for (i, e) in entries.iter().enumerate() {
                    listed.insert((e.producer_id, e.last_offset));
                    if !aborts.contains(&(e.producer_id, e.last_offset)) {
                        bad.push(format!(
                            "entry {i}: producer {} aborted at offset {}, but the segment has no ABORT marker of that producer there",
                            e.producer_id, e.last_offset
                        ));
                    } else if e.first_offset > e.last_offset {
                        bad.push(format!(
                            "entry {i}: first offset {} is after the marker at {}",
                            e.first_offset, e.last_offset
                        ));
                    }
                }
                for (pid, off) in aborts.difference(&listed) {
                    bad.push(format!(
                        "no entry for the ABORT marker of producer {pid} at offset {off}"
                    ));
                }
                let consistent = bad.is_empty();
                report_capped(&mut r.problems, &txn_path, bad);
                if consistent {
                    expected_txn.push((txn_path.clone(), entries, std::mem::take(&mut expected)));
                }
            }
            Err(e) => r.problems.push(format!("{e:#}")),
        }
        let mut prev_ts = i64::MIN;
        let mut bad = Vec::new();
        for (i, &(ts, off)) in tix.entries.iter().enumerate() {
            if ts <= prev_ts {
                bad.push(format!("entry {i}: timestamp {ts} does not increase"));
            }
            prev_ts = ts;
            match by_last.get(&off).copied().flatten() {
                Some(t) if t >= ts => {}
                Some(t) => bad.push(format!("entry {i}: timestamp {ts} at offset {off} exceeds the largest timestamp {t} up to that batch")),
                None => bad.push(format!("entry {i}: offset {off} is not the last offset of a whole batch")),
            }
        }
        if !(running && tix.gone()) {
            tix.report(bad, &mut r.problems);
        }
    }
    if exact {
        for (path, got, want) in expected_txn {
            let bad: Vec<String> = got
                .iter()
                .zip(&want)
                .enumerate()
                .filter(|(_, (g, w))| g != w)
                .map(|(i, (g, w))| {
                    format!(
                        "entry {i}: producer {} first offset {} marker {} last stable offset {}; the log says first offset {} and last stable offset {}",
                        g.producer_id,
                        g.first_offset,
                        g.last_offset,
                        g.last_stable_offset,
                        w.first_offset,
                        w.last_stable_offset
                    )
                })
                .collect();
            report_capped(&mut r.problems, &path, bad);
        }
    }
    let start = first_base.unwrap_or(0);
    let end = prev_last
        .map_or(start, |l| l + 1)
        .max(bases.last().copied().unwrap_or(start));
    // Checked against a running daemon's checkpoints, which move on while this runs, a log
    // end proves nothing: the checkpoints are judged only on a stopped replica.
    let end = match limit {
        Some(Limit::Running(_)) => i64::MAX,
        Some(Limit::Unflushed { log_end, .. }) => log_end,
        None => end,
    };
    Ok((start, end))
}

/// Checks everything (exact on a stopped replica).
pub fn verify(data_dir: &Path) -> Result<VerifyReport> {
    verify_with(data_dir, false)
}

/// While a daemon runs on `data_dir` (its live status is fresh) and `all` is not set, each
/// partition is checked up to its checkpointed recovery point, which is fsynced and so
/// stable; the bytes past it are being written and are counted as in flight, not judged,
/// so a check from a timer never raises a false alarm. Stopped without the clean-shutdown
/// marker (a kill -9, a power loss) and without `all`, each partition is checked in full
/// up to its recovery point, and past it as recovery will judge it: whole, CRC-valid
/// batches are kept, and the first bytes that are not end the log there. Such a tail is
/// reported, not a problem: damage below the recovery point still is. Otherwise everything
/// is checked.
pub fn verify_with(data_dir: &Path, all: bool) -> Result<VerifyReport> {
    verify_selected(data_dir, all, None)
}

/// The partitions `verify --topic T [--partition P]` checks: those of topic T, live ones
/// by their name, archived histories by the name they are read under
/// (`<topic>.<old id>.archived`), and of those only partition P when given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub topic: String,
    pub partition: Option<i32>,
}

impl Selection {
    fn holds(&self, tp: &TopicPartition) -> bool {
        tp.topic == self.topic && self.partition.is_none_or(|p| p == tp.partition)
    }
}

/// [`verify_with`] of the partitions `only` selects (all of them when `None`). A selection
/// checks their logs and their checkpoint entries, not the data dir's other files; one that
/// selects nothing is an error naming it.
pub fn verify_selected(
    data_dir: &Path,
    all: bool,
    only: Option<&Selection>,
) -> Result<VerifyReport> {
    crate::log::manager::existing_data_dir(data_dir)?;
    let selected = |tp: &TopicPartition| only.is_none_or(|s| s.holds(tp));
    let running = if all {
        None
    } else {
        crate::live::read_running(data_dir)
    };
    let live = running.is_some();
    let mut r = VerifyReport::default();
    let unclean = (!live && !all)
        .then(|| StoppedCheckpoints::read(data_dir))
        .filter(|c| !c.clean_shutdown);
    let recovery_points = if live {
        match checkpoint::read_offsets(&data_dir.join(DataDir::RECOVERY_POINT)) {
            Ok(m) => m,
            Err(e) => {
                r.problems.push(format!("{e:#}"));
                BTreeMap::new()
            }
        }
    } else {
        BTreeMap::new()
    };
    for tp in DataDir::partitions(data_dir)?.into_iter().filter(selected) {
        // A directory without segments holds no local state (status leaves it out too);
        // running, one archived or removed meanwhile is skipped.
        let bases = match list_segment_bases(&data_dir.join(tp.dir_name())) {
            Ok(b) => b,
            Err(_) if live && !data_dir.join(tp.dir_name()).exists() => continue,
            Err(e) => return Err(e),
        };
        if bases.is_empty() {
            continue;
        }
        r.partitions += 1;
        // Running, a partition is checked up to its recovery point (one no checkpoint names
        // yet is all in flight), except one nothing writes: failed or stopped.
        let written = running.as_ref().is_some_and(|l| {
            l.partitions
                .iter()
                .find(|p| p.topic == tp.topic && p.partition == tp.partition)
                .is_none_or(|p| {
                    !matches!(
                        p.live.state,
                        crate::live::State::Failed | crate::live::State::Stopped
                    )
                })
        });
        let limit =
            written.then(|| Limit::Running(recovery_points.get(&tp).copied().unwrap_or(i64::MIN)));
        let tail = match &unclean {
            Some(c) => c.unflushed(&data_dir.join(tp.dir_name()), &tp, &bases)?,
            None => None,
        };
        let Some(tail) = tail else {
            verify_partition(data_dir, &tp, limit, &mut r)?;
            continue;
        };
        // Checked in full below the recovery point; past it, the scan above judged every
        // batch as recovery will (which rebuilds their indexes). A torn write there is what
        // the crash left and is only reported; any other damage is a problem, as it is to
        // recovery, which keeps those bytes in damaged/ with an ERROR.
        let limit = Limit::Unflushed {
            recovery_point: tail.recovery_point,
            log_end: tail.valid_end,
        };
        verify_partition(data_dir, &tp, Some(limit), &mut r)?;
        r.batches += tail.valid_batches;
        for d in tail.damage.iter().filter(|d| !d.torn) {
            r.problems.push(format!(
                "{}: byte {}: {} past the recovery point {}, and not a torn write: the next start keeps these {} bytes in damaged/ and cuts the segment there",
                d.log_path.display(),
                d.position,
                d.reason,
                tail.recovery_point,
                d.bytes
            ));
        }
        r.unflushed.push((tp, tail));
    }
    if only.is_none()
        && let Err(e) = identity::read_cluster_id(data_dir)
    {
        r.problems.push(format!("{e:#}"));
    }
    // Archived histories are checked like live logs; they are not in the checkpoints.
    for a in identity::list_archived(data_dir)? {
        if !selected(&a.tp()) {
            continue;
        }
        r.archived += 1;
        verify_log_dir(&a.path, None, &mut r)?;
        for (file, first, last) in diverged::list(&a.path)? {
            verify_record_file(&file, first, last, &mut r);
        }
    }
    match only {
        None => r
            .problems
            .extend(super::not_a_data_dir(data_dir, r.partitions)),
        Some(s) if r.partitions + r.archived == 0 => {
            let what = s.partition.map_or_else(
                || format!("topic {}", s.topic),
                |p| format!("{}-{p}", s.topic),
            );
            anyhow::bail!(
                "{what}: no partition directory and no archived history read under that name in `{}` (`status` lists them)",
                data_dir.display()
            );
        }
        Some(_) => {}
    }
    // Running, the checkpoints move on while this reads the logs (retention moves the log
    // start, new partitions appear): they are judged on a stopped replica only.
    let checkpoints: &[(&str, &str)] = if live {
        &[]
    } else {
        &[
            (DataDir::REPLICATION_OFFSET, "high watermark"),
            (DataDir::RECOVERY_POINT, "recovery point"),
            (DataDir::LOG_START_OFFSET, "log start offset"),
        ]
    };
    for &(name, what) in checkpoints {
        match checkpoint::read_offsets(&data_dir.join(name)) {
            Ok(m) => {
                for (tp, off) in m.into_iter().filter(|(tp, _)| selected(tp)) {
                    match r.extents.get(&tp) {
                        None => r
                            .problems
                            .push(format!("{name}: {tp} has no partition directory")),
                        Some(&(start, end)) => {
                            if off > end {
                                r.problems.push(format!(
                                    "{name}: {tp} {what} {off} is past the log end {end}"
                                ));
                            }
                            if off < start && name == DataDir::LOG_START_OFFSET {
                                r.problems.push(format!(
                                    "{name}: {tp} {what} {off} is below the first segment {start}"
                                ));
                            }
                        }
                    }
                }
            }
            Err(e) => r.problems.push(format!("{e:#}")),
        }
    }
    // What a restore needs beside the partitions: rewritten whole, so judged running too.
    let topics = crate::checkpoint::upstream::read_topics(&data_dir.join(DataDir::TOPIC_CONFIGS));
    let groups = crate::checkpoint::upstream::read_groups(&data_dir.join(DataDir::GROUP_OFFSETS));
    for e in [topics.err(), groups.err()].into_iter().flatten() {
        r.problems.push(format!("{e:#}"));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_gone_before_its_open_is_damage_only_when_nothing_runs() {
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("00000000000000000000.log");
        let mut r = VerifyReport::default();
        assert!(open_log(&gone, &mut r, true).is_none());
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert!(open_log(&gone, &mut r, false).is_none());
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(r.problems[0].contains("unreadable"), "{:?}", r.problems);
    }
}
