//! `replica-follower status`: one line (or JSON object) per partition, from the checkpoint
//! files and the segment files, without locking or writing anything.

use super::json_string;
use crate::checkpoint::{self, TopicPartition};
use crate::log::data_dir::DataDir;
use crate::log::format::diverged;
use crate::log::format::segment;
use crate::log::identity;
use crate::log::partition::list_segment_bases;
use crate::log::read_view::{
    StoppedCheckpoints, UnflushedTail, last_stable_offset, segment_end_offset,
};
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    pub tp: TopicPartition,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: Option<i64>,
    pub recovery_point: Option<i64>,
    pub leader_epoch: Option<i32>,
    pub segments: usize,
    pub size_bytes: u64,
    /// First offset of the oldest open transaction, else the log end.
    pub last_stable_offset: i64,
    pub topic_id: Option<String>,
    /// Entries in the `.txnindex` files.
    pub aborted_transactions: usize,
    /// (first offset, last offset, path, bytes) of each `diverged/` copy.
    pub diverged: Vec<(i64, i64, String, u64)>,
    /// Ranges the leader had deleted before this replica fetched them.
    pub lost_upstream: Vec<(i64, i64)>,
    /// (path, bytes) of what recovery cut at damage and kept in `damaged/`.
    pub damaged: Vec<(String, u64)>,
    /// Why this partition is not followed (`on_topic_recreated = "stop"`), when it is not.
    pub fetching_stopped: Option<String>,
    /// What the running daemon says of it (`None` when no daemon runs).
    pub live: Option<crate::live::PartitionLive>,
    /// Stopped uncleanly: what the log holds past its recovery point (`None` after a clean
    /// stop, and while a daemon runs).
    pub unflushed: Option<UnflushedTail>,
}

/// What `status` says about the data dir as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataDirStatus {
    pub cluster_id: Option<String>,
    /// Each archived history, with the topic name it is read and served under.
    pub archived: Vec<identity::Archived>,
    /// Why fetching is stopped for the whole data dir, when it is.
    pub fetching_stopped: Option<String>,
    /// Bytes free on the data dir's filesystem (appends pause below `log.min_free_bytes`).
    pub free_bytes: Option<u64>,
    /// Partitions a local storage error failed, and why (their directory may be gone).
    pub failed: Vec<(TopicPartition, String)>,
    /// Why appends are paused for lack of space, while they are.
    pub disk_full: Option<String>,
    /// The running daemon's live state (`None`: not running).
    pub live: Option<crate::live::LiveFile>,
    /// Followed (per `status --config`) but without a local log yet: a partition, or a
    /// whole topic (`None`).
    pub not_yet: Vec<(String, Option<i32>)>,
    /// The data dir, when it does not exist yet: a configuration before its first run
    /// (`status --config`), whose followed partitions are all without a log.
    pub not_created: Option<String>,
    /// The archived topic configs and consumer-group offsets.
    pub upstream: super::upstream::Upstream,
}

/// The entries of `follow` with no local log among `parts`: named partitions without one,
/// and whole topics none of whose partitions has one.
pub fn not_yet_logged(
    follow: &[crate::config::Follow],
    parts: &[PartitionStatus],
) -> Vec<(String, Option<i32>)> {
    let mut out = Vec::new();
    for f in follow {
        let has = |p: i32| {
            parts
                .iter()
                .any(|s| s.tp.topic == f.topic && s.tp.partition == p)
        };
        match &f.partitions {
            Some(ps) => out.extend(
                ps.iter()
                    .filter(|p| !has(**p))
                    .map(|p| (f.topic.clone(), Some(*p))),
            ),
            None if !parts.iter().any(|s| s.tp.topic == f.topic) => {
                out.push((f.topic.clone(), None))
            }
            None => {}
        }
    }
    out
}

/// The data-dir level facts: cluster id, archived histories, a stop.
pub fn collect_data_dir(data_dir: &Path, notes: &mut Vec<String>) -> DataDirStatus {
    let cluster_id = identity::read_cluster_id(data_dir).unwrap_or_else(|e| {
        notes.push(format!("{e:#}"));
        None
    });
    let archived = identity::list_archived(data_dir).unwrap_or_default();
    let fetching_stopped = std::fs::read_to_string(data_dir.join(DataDir::FETCH_STOPPED_FILE))
        .ok()
        .map(|s| s.trim().to_string());
    DataDirStatus {
        cluster_id,
        archived,
        fetching_stopped,
        free_bytes: fs2::available_space(data_dir).ok(),
        failed: read_partition_list(&data_dir.join(DataDir::FAILED_PARTITIONS_FILE))
            .into_iter()
            .collect(),
        disk_full: std::fs::read_to_string(data_dir.join(DataDir::DISK_FULL_FILE))
            .ok()
            .map(|s| s.trim().to_string()),
        live: crate::live::read_running(data_dir),
        not_yet: Vec::new(),
        not_created: (!data_dir.exists()).then(|| data_dir.display().to_string()),
        upstream: super::upstream::collect(data_dir, notes),
    }
}

/// The followed partitions without a local log: the running daemon's list (it knows what
/// the leader's metadata lists for a whole topic), else what `follow` and the logs say.
pub fn not_yet(
    dd: &DataDirStatus,
    follow: &[crate::config::Follow],
    parts: &[PartitionStatus],
) -> Vec<(String, Option<i32>)> {
    match dd.live.as_ref().and_then(|l| l.leader.as_ref()) {
        Some(leader) => leader
            .not_yet_logged
            .iter()
            .map(|n| (n.topic.clone(), n.partition))
            .collect(),
        None => not_yet_logged(follow, parts),
    }
}

/// The top-level line on the leader: whether it answers metadata, since when it does not,
/// how many refreshes failed and the last failure (`None` when no daemon runs).
pub fn leader_line(dd: &DataDirStatus, now_ms: i64) -> Option<String> {
    let leader = dd.live.as_ref()?.leader.as_ref()?;
    let errors = leader.error_count();
    let ago = |ms: i64| {
        crate::logging::Human(std::time::Duration::from_millis(
            now_ms.saturating_sub(ms).max(0) as u64,
        ))
    };
    Some(match (leader.reachable, leader.unreachable_since_ms) {
        (true, _) => format!(
            "leader: reachable, metadata answered {} ago ({errors} metadata errors since start)",
            leader
                .last_success_ms
                .map_or_else(|| "-".to_string(), |t| ago(t).to_string())
        ),
        (false, Some(since)) => format!(
            "leader: UNREACHABLE since {} (for {}; {errors} metadata errors{}; last: {})",
            crate::logging::format_utc(since),
            ago(since),
            match leader.last_success_ms {
                Some(t) => format!(", last answer {} ago", ago(t)),
                None => ", never answered since start".to_string(),
            },
            leader.last_error.as_deref().unwrap_or("-")
        ),
        (false, None) => "leader: not asked yet".to_string(),
    })
}

/// The line on the offsite copy (`None` when no daemon runs or it has no `[offsite]`).
pub fn offsite_line(dd: &DataDirStatus, now_ms: i64) -> Option<String> {
    let o = dd.live.as_ref()?.offsite.as_ref()?;
    let age = o.oldest_pending_ms.map_or_else(
        || "nothing durable waits".to_string(),
        |t| {
            format!(
                "the oldest waits for {}",
                crate::logging::Human(std::time::Duration::from_millis(
                    now_ms.saturating_sub(t).max(0) as u64
                ))
            )
        },
    );
    let state = match &o.failing {
        Some(why) => format!("FAILING ({why})"),
        None if o.pending_bytes == 0 => "up to date".to_string(),
        None => "uploading".to_string(),
    };
    Some(
        format!(
            "offsite: {} {state}; {} bytes in {} not offsite yet, {age}; {} bytes in {} objects uploaded since start, {} failed rounds",
            o.location,
            o.pending_bytes,
            crate::logging::count(o.pending_segments, "segment", "segments"),
            o.uploaded_bytes,
            o.uploaded_objects,
            o.errors
        ) + &o
            .stopped
            .iter()
            .map(|s| format!("\noffsite: uploads FAIL for {s}"))
            .collect::<String>(),
    )
}

/// `status --json`'s `offsite` object (`null` when no daemon runs or without `[offsite]`).
fn offsite_json(dd: &DataDirStatus, now_ms: i64) -> String {
    let Some(o) = dd.live.as_ref().and_then(|l| l.offsite.as_ref()) else {
        return "null".to_string();
    };
    format!(
        "{{\"location\": {}, \"pending_bytes\": {}, \"pending_segments\": {}, \"oldest_pending_age_ms\": {}, \"uploaded_bytes\": {}, \"uploaded_objects\": {}, \"errors\": {}, \"failing\": {}, \"last_manifest_ms\": {}, \"stopped\": [{}]}}",
        json_string(&o.location),
        o.pending_bytes,
        o.pending_segments,
        o.oldest_pending_ms.map_or_else(
            || "null".to_string(),
            |t| now_ms.saturating_sub(t).max(0).to_string()
        ),
        o.uploaded_bytes,
        o.uploaded_objects,
        o.errors,
        o.failing
            .as_deref()
            .map_or_else(|| "null".to_string(), json_string),
        opt(o.last_manifest_ms, "null"),
        o.stopped
            .iter()
            .map(|s| json_string(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `status --json`'s `leader` object (`null` when no daemon runs).
fn leader_json(dd: &DataDirStatus) -> String {
    let Some(leader) = dd.live.as_ref().and_then(|l| l.leader.as_ref()) else {
        return "null".to_string();
    };
    let errors: Vec<String> = leader
        .errors
        .iter()
        .map(|(k, n)| format!("{}: {n}", json_string(k)))
        .collect();
    format!(
        "{{\"reachable\": {}, \"last_metadata_success_ms\": {}, \"unreachable_since_ms\": {}, \"metadata_errors\": {}, \"metadata_errors_by_kind\": {{{}}}, \"last_metadata_error\": {}}}",
        leader.reachable,
        opt(leader.last_success_ms, "null"),
        opt(leader.unreachable_since_ms, "null"),
        leader.error_count(),
        errors.join(", "),
        leader
            .last_error
            .as_deref()
            .map_or_else(|| "null".to_string(), json_string)
    )
}

/// While the daemon runs, each partition gets its live figures, and its high watermark is
/// the daemon's, not a checkpoint's that may not be written yet.
pub fn apply_live(dd: &DataDirStatus, parts: &mut [PartitionStatus]) {
    let Some(live) = &dd.live else { return };
    for p in parts {
        p.live = live
            .partitions
            .iter()
            .find(|r| r.topic == p.tp.topic && r.partition == p.tp.partition)
            .map(|r| r.live.clone());
        match p.live.as_ref() {
            Some(r) => {
                if let Some(hw) = r.high_watermark {
                    p.high_watermark = Some(hw.min(p.log_end_offset));
                }
            }
            // Running, but not yet in the live figures (published every second): the
            // checkpoint's HW may be a stale 0, so none is shown.
            None => p.high_watermark = None,
        }
    }
}

/// A data-dir file of `topic partition reason` lines (none when it does not exist).
fn read_partition_list(path: &Path) -> BTreeMap<TopicPartition, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let topic = it.next()?;
            let partition = it.next()?.parse().ok()?;
            Some((
                TopicPartition::new(topic, partition),
                it.next()?.to_string(),
            ))
        })
        .collect()
}

/// (path, bytes) of the regular files in `dir` (none when it does not exist), by name.
fn list_files(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_file())
                .map(|e| {
                    let size = e.metadata().map_or(0, |m| m.len());
                    (e.path().display().to_string(), size)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn read_checkpoint(path: &Path, notes: &mut Vec<String>) -> BTreeMap<TopicPartition, i64> {
    checkpoint::read_offsets(path).unwrap_or_else(|e| {
        notes.push(format!("{e:#}"));
        BTreeMap::new()
    })
}

/// Status of every partition in `data_dir`, plus notes about unreadable checkpoint files.
pub fn collect(data_dir: &Path) -> Result<(Vec<PartitionStatus>, Vec<String>)> {
    crate::log::manager::existing_data_dir(data_dir)?;
    let mut notes = Vec::new();
    let hw = read_checkpoint(&data_dir.join(DataDir::REPLICATION_OFFSET), &mut notes);
    let rp = read_checkpoint(&data_dir.join(DataDir::RECOVERY_POINT), &mut notes);
    let ls = read_checkpoint(&data_dir.join(DataDir::LOG_START_OFFSET), &mut notes);
    let stopped = read_partition_list(&data_dir.join(DataDir::STOPPED_PARTITIONS_FILE));
    // Stopped uncleanly, the checkpoints lag the logs: the whole, CRC-valid batches past the
    // recovery points are what `serve` serves and the next start keeps, so the high
    // watermark shown is their end, as it will be.
    let checkpoints = StoppedCheckpoints::read(data_dir);
    let running = crate::live::read_running(data_dir).is_some();
    let mut out = Vec::new();
    let dirs = DataDir::partitions(data_dir)?;
    notes.extend(super::not_a_data_dir(data_dir, dirs.len()));
    for tp in dirs {
        let dir = data_dir.join(tp.dir_name());
        let bases = list_segment_bases(&dir)?;
        let Some(&first) = bases.first() else {
            continue;
        };
        let mut size = 0;
        for b in &bases {
            size +=
                std::fs::metadata(dir.join(segment::file_name(*b, "log"))).map_or(0, |m| m.len());
        }
        // The log end is the last segment's: its base when it is empty (a skip past offsets
        // lost upstream leaves an empty segment).
        let last = bases.last().copied().unwrap_or(first);
        let leo = segment_end_offset(&dir, last)?.max(last);
        let lso = last_stable_offset(&dir, &bases, leo).unwrap_or_else(|e| {
            notes.push(format!("{tp}: last stable offset unknown: {e:#}"));
            leo
        });
        let mut aborted = 0;
        for b in &bases {
            aborted +=
                std::fs::metadata(dir.join(segment::file_name(*b, "txnindex"))).map_or(0, |m| {
                    usize::try_from(m.len()).unwrap_or(usize::MAX)
                        / crate::log::format::txn_index::ENTRY_SIZE
                });
        }
        let diverged = diverged::list(&dir)
            .unwrap_or_default()
            .into_iter()
            .map(|(p, a, b)| {
                let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                (a, b, p.display().to_string(), size)
            })
            .collect();
        let lost_upstream = checkpoint::read_ranges(&dir.join(DataDir::LOST_UPSTREAM))
            .unwrap_or_else(|e| {
                notes.push(format!("{e:#}"));
                Vec::new()
            });
        let damaged = list_files(&dir.join(DataDir::DAMAGED_DIR));
        let fetching_stopped = stopped.get(&tp).cloned();
        let topic_id = identity::read_topic_id(&dir)
            .unwrap_or_else(|e| {
                notes.push(format!("{e:#}"));
                None
            })
            .map(|u| u.to_string());
        let epochs =
            checkpoint::read_epochs(&dir.join(DataDir::LEADER_EPOCH)).unwrap_or_else(|e| {
                notes.push(format!("{e:#}"));
                Vec::new()
            });
        let unflushed = if running {
            None
        } else {
            checkpoints
                .unflushed(&dir, &tp, &bases)
                .unwrap_or_else(|e| {
                    notes.push(format!(
                        "{tp}: its log past the recovery point cannot be read: {e:#}"
                    ));
                    None
                })
        };
        out.push(PartitionStatus {
            log_start_offset: ls.get(&tp).copied().unwrap_or(first).max(first),
            log_end_offset: leo,
            high_watermark: match &unflushed {
                Some(t) => Some(t.valid_end),
                None => hw.get(&tp).copied(),
            },
            recovery_point: rp.get(&tp).copied(),
            leader_epoch: match &unflushed {
                Some(t) => t.epochs_after(epochs, first).last().map(|&(e, _)| e),
                None => epochs.last().map(|&(e, _)| e),
            },
            segments: bases.len(),
            size_bytes: size,
            // Stopped uncleanly, the end of the whole batches bounds it, as the high
            // watermark shown.
            last_stable_offset: unflushed.as_ref().map_or(lso, |t| lso.min(t.valid_end)),
            topic_id,
            aborted_transactions: aborted,
            diverged,
            lost_upstream,
            damaged,
            fetching_stopped,
            tp,
            live: None,
            unflushed,
        });
    }
    Ok((out, notes))
}

/// A partition's LAG cell, and the figure it adds to the total: the lag now; while the
/// leader does not answer, the last known one and its age (`120 (5m ago)`: this replica
/// is at least that far behind); `?` when none is known yet; `-` when the partition is not
/// followed (failed, stopped, not found).
fn lag_cell(r: &crate::live::PartitionLive, now_ms: i64) -> (Option<i64>, String) {
    if let Some(l) = r.lag() {
        return (Some(l), l.to_string());
    }
    match r.last_known_lag() {
        Some((l, Some(at))) => {
            let age = std::time::Duration::from_millis(now_ms.saturating_sub(at).max(0) as u64);
            (Some(l), format!("{l} ({} ago)", crate::logging::Human(age)))
        }
        Some((l, None)) => (Some(l), format!("{l} (last known)")),
        None if r.lag_followed() => (None, "?".to_string()),
        None => (None, "-".to_string()),
    }
}

/// Bytes as people read them: `980 B`, `975.3 KiB`, `1.2 GiB`.
pub fn human_bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = "KiB";
    for larger in ["MiB", "GiB", "TiB", "PiB"] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = larger;
    }
    format!("{v:.1} {unit}")
}

fn opt<T: std::fmt::Display>(v: Option<T>, null: &str) -> String {
    v.map_or_else(|| null.to_string(), |x| x.to_string())
}

/// `status --json`'s `unflushed` object of a partition stopped uncleanly.
fn unflushed_json(t: &UnflushedTail) -> String {
    let damage: Vec<String> = t
        .damage
        .iter()
        .map(|d| {
            format!(
                "{{\"path\": {}, \"position\": {}, \"size_bytes\": {}, \"torn\": {}, \"reason\": {}}}",
                json_string(&d.log_path.display().to_string()),
                d.position,
                d.bytes,
                d.torn,
                json_string(&d.reason)
            )
        })
        .collect();
    format!(
        "{{\"recovery_point\": {}, \"valid_end\": {}, \"valid_batches\": {}, \"valid_bytes\": {}, \"not_served\": [{}]}}",
        t.recovery_point,
        t.valid_end,
        t.valid_batches,
        t.valid_bytes,
        damage.join(", ")
    )
}

pub fn render_json(dd: &DataDirStatus, parts: &[PartitionStatus]) -> String {
    let items: Vec<String> = parts
        .iter()
        .map(|p| {
            let live = p.live.as_ref();
            let diverged: Vec<String> = p
                .diverged
                .iter()
                .map(|(a, b, path, size)| {
                    format!(
                        "{{\"first_offset\": {a}, \"last_offset\": {b}, \"path\": {}, \"size_bytes\": {size}}}",
                        json_string(path)
                    )
                })
                .collect();
            let damaged: Vec<String> = p
                .damaged
                .iter()
                .map(|(path, size)| {
                    format!("{{\"path\": {}, \"size_bytes\": {size}}}", json_string(path))
                })
                .collect();
            let lost: Vec<String> = p
                .lost_upstream
                .iter()
                .map(|(a, b)| format!("{{\"first_offset\": {a}, \"last_offset\": {b}}}"))
                .collect();
            format!(
                "{{\"topic\": {}, \"partition\": {}, \"log_start_offset\": {}, \"log_end_offset\": {}, \"high_watermark\": {}, \"recovery_point\": {}, \"leader_epoch\": {}, \"segments\": {}, \"size_bytes\": {}, \"last_stable_offset\": {}, \"topic_id\": {}, \"aborted_transactions\": {}, \"diverged_ranges\": {}, \"diverged\": [{}], \"lost_upstream\": [{}], \"damaged\": [{}], \"fetching_stopped\": {}, \"leader_high_watermark\": {}, \"lag\": {}, \"state\": {}, \"error\": {}, \"last_fetch_ms\": {}, \"newest_timestamp_ms\": {}, \"last_known_lag\": {}, \"lag_stale\": {}, \"unflushed\": {}}}",
                json_string(&p.tp.topic),
                p.tp.partition,
                p.log_start_offset,
                p.log_end_offset,
                opt(p.high_watermark, "null"),
                opt(p.recovery_point, "null"),
                opt(p.leader_epoch, "null"),
                p.segments,
                p.size_bytes,
                p.last_stable_offset,
                p.topic_id.as_deref().map_or_else(|| "null".to_string(), json_string),
                p.aborted_transactions,
                p.diverged.len(),
                diverged.join(", "),
                lost.join(", "),
                damaged.join(", "),
                p.fetching_stopped
                    .as_deref()
                    .map_or_else(|| "null".to_string(), json_string),
                opt(live.and_then(|r| r.leader_high_watermark), "null"),
                opt(live.and_then(crate::live::PartitionLive::lag), "null"),
                live.map_or_else(|| "null".to_string(), |r| json_string(r.state.as_str())),
                live.and_then(|r| r.error.as_deref())
                    .map_or_else(|| "null".to_string(), json_string),
                opt(live.and_then(|r| r.last_fetch_ms), "null"),
                opt(live.and_then(|r| r.newest_timestamp_ms), "null"),
                opt(
                    live.and_then(|r| r.lag().or(r.last_known_lag().map(|(l, _)| l))),
                    "null"
                ),
                opt(live.map(|r| r.lag_stale && r.lag_followed()), "null"),
                p.unflushed
                    .as_ref()
                    .map_or_else(|| "null".to_string(), unflushed_json),
            )
        })
        .collect();
    let archived: Vec<String> = dd
        .archived
        .iter()
        .map(|a| {
            format!(
                "{{\"topic\": {}, \"partition\": {}, \"topic_id\": {}, \"path\": {}, \"read_as_topic\": {}}}",
                json_string(&a.topic),
                a.partition,
                json_string(&a.topic_id),
                json_string(&a.path.display().to_string()),
                json_string(&a.name)
            )
        })
        .collect();
    let failed: Vec<String> = dd
        .failed
        .iter()
        .map(|(tp, why)| {
            format!(
                "{{\"topic\": {}, \"partition\": {}, \"reason\": {}}}",
                json_string(&tp.topic),
                tp.partition,
                json_string(why)
            )
        })
        .collect();
    let str_or_null =
        |s: &Option<String>| s.as_deref().map_or_else(|| "null".to_string(), json_string);
    format!(
        "{{\"cluster_id\": {}, \"fetching_stopped\": {}, \"free_bytes\": {}, \"partitions\": [{}], \"archived\": [{}], \"failed\": [{}], \"disk_full\": {}, \"running\": {}, \"leader\": {}, \"offsite\": {}, \"missing_topics\": [{}], \"not_yet_logged\": [{}], {}}}",
        str_or_null(&dd.cluster_id),
        str_or_null(&dd.fetching_stopped),
        opt(dd.free_bytes, "null"),
        items.join(", "),
        archived.join(", "),
        failed.join(", "),
        str_or_null(&dd.disk_full),
        dd.live.is_some(),
        leader_json(dd),
        offsite_json(dd, crate::clock::now_ms()),
        dd.live
            .as_ref()
            .map(|l| l
                .missing_topics
                .iter()
                .map(|t| json_string(t))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default(),
        dd.not_yet
            .iter()
            .map(|(t, p)| format!(
                "{{\"topic\": {}, \"partition\": {}}}",
                json_string(t),
                opt(*p, "null")
            ))
            .collect::<Vec<_>>()
            .join(", "),
        super::upstream::render_json(&dd.upstream)
    )
}

/// The top-level lines of a data dir stopped uncleanly: the batches past the recovery points
/// that are kept and served, and each tail that is not (a few named, then a count).
fn render_unflushed(s: &mut String, parts: &[PartitionStatus]) {
    use crate::logging::count;
    const NAMED: usize = 5;
    let tails: Vec<(&TopicPartition, &UnflushedTail)> = parts
        .iter()
        .filter_map(|p| p.unflushed.as_ref().map(|t| (&p.tp, t)))
        .collect();
    let batches: usize = tails.iter().map(|(_, t)| t.valid_batches).sum();
    if batches > 0 {
        s.push_str(&format!(
            "past the recovery points: {} in {}, whole and CRC-valid: `serve` serves them and the next start keeps them\n",
            count(batches, "batch", "batches"),
            count(
                tails.iter().filter(|(_, t)| t.valid_batches > 0).count(),
                "partition",
                "partitions"
            )
        ));
    }
    let damaged: Vec<_> = tails
        .iter()
        .flat_map(|(tp, t)| t.damage.iter().map(move |d| (tp, d)))
        .collect();
    for (tp, d) in damaged.iter().take(NAMED) {
        s.push_str(&format!(
            "{tp}: {}: {} bytes from byte {} of `{}` ({}): not served; the next start cuts them{}\n",
            if d.torn { "TORN TAIL" } else { "DAMAGE PAST THE RECOVERY POINT" },
            d.bytes,
            d.position,
            d.log_path.display(),
            d.reason,
            if d.torn { "" } else { " after keeping them in damaged/" }
        ));
    }
    if damaged.len() > NAMED {
        s.push_str(&format!(
            "… and {} more past the recovery points (`status --json` names each, under `unflushed`)\n",
            count(damaged.len() - NAMED, "stretch", "stretches")
        ));
    }
}

pub fn render_text(dd: &DataDirStatus, parts: &[PartitionStatus]) -> String {
    let mut s = String::new();
    match (&dd.live, &dd.not_created) {
        (Some(l), _) => s.push_str(&format!("running (pid {}): live figures\n", l.pid)),
        (None, Some(dir)) => s.push_str(&format!(
            "data dir `{dir}` does not exist yet: nothing replicated so far\n"
        )),
        (None, None) if parts.iter().any(|p| p.unflushed.is_some()) => s.push_str(
            "not running, not stopped cleanly: figures from the checkpoint files and the logs past them\n",
        ),
        (None, None) => s.push_str("not running: figures from the checkpoint files\n"),
    }
    if let Some(line) = leader_line(dd, crate::clock::now_ms()) {
        s.push_str(&line);
        s.push('\n');
    }
    if let Some(line) = offsite_line(dd, crate::clock::now_ms()) {
        s.push_str(&line);
        s.push('\n');
    }
    render_unflushed(&mut s, parts);
    if let Some(c) = &dd.cluster_id {
        s.push_str(&format!("cluster {c}\n"));
    }
    if let Some(l) = &dd.live {
        for t in &l.missing_topics {
            s.push_str(&format!("topic {t}: not found on the leader\n"));
        }
    }
    for (t, p) in &dd.not_yet {
        // A partition the daemon looked for and the leader's topic does not have.
        let not_found = |p: i32| {
            dd.live.as_ref().is_some_and(|l| {
                l.partitions.iter().any(|r| {
                    &r.topic == t
                        && r.partition == p
                        && r.live.state == crate::live::State::NotFound
                })
            })
        };
        match p {
            Some(p) if not_found(*p) => s.push_str(&format!(
                "{t}-{p}: followed, not found on the leader (no local log)\n"
            )),
            Some(p) => s.push_str(&format!("{t}-{p}: followed, no local log yet\n")),
            None => s.push_str(&format!("topic {t}: followed, no local log yet\n")),
        }
    }
    if let Some(why) = &dd.fetching_stopped {
        s.push_str(&format!("FETCHING STOPPED: {why}\n"));
    }
    if let Some(free) = dd.free_bytes {
        s.push_str(&format!(
            "free space: {} ({free} bytes)\n",
            human_bytes(free)
        ));
    }
    if let Some(why) = &dd.disk_full {
        let why = why.strip_prefix("disk full: ").unwrap_or(why);
        s.push_str(&format!("DISK FULL: {why}\n"));
    }
    for (tp, why) in &dd.failed {
        s.push_str(&format!("{tp}: FAILED: {why}\n"));
    }
    let mut rows: Vec<[String; 11]> = vec![
        [
            "PARTITION",
            "LOG_START",
            "LOG_END",
            "HW",
            "LSO",
            "RECOVERY",
            "EPOCH",
            "SEGMENTS",
            "SIZE",
            "LAG",
            "STATE",
        ]
        .map(str::to_string),
    ];
    let (mut segments, mut bytes, mut lag) = (0usize, 0u64, None::<i64>);
    // Whether some partition's lag is only the last known one, or unknown: the total is then
    // a lower bound.
    let mut lag_partial = false;
    let now = crate::clock::now_ms();
    for p in parts {
        let live = p.live.as_ref();
        let state = match live {
            Some(r) => match &r.error {
                Some(e) => format!("{}: {e}", r.state.as_str()),
                None => r.state.as_str().to_string(),
            },
            None if dd.live.is_some() => "not yet fetched".to_string(),
            None => "-".to_string(),
        };
        let (l, lag_cell) = match live {
            Some(r) => lag_cell(r, now),
            None => (None, "-".to_string()),
        };
        segments += p.segments;
        bytes += p.size_bytes;
        if let Some(l) = l {
            lag = Some(lag.unwrap_or(0) + l);
        }
        lag_partial |= live.is_some_and(|r| r.lag_followed() && r.lag().is_none());
        rows.push([
            p.tp.to_string(),
            p.log_start_offset.to_string(),
            p.log_end_offset.to_string(),
            opt(p.high_watermark, "-"),
            p.last_stable_offset.to_string(),
            opt(p.recovery_point, "-"),
            opt(p.leader_epoch, "-"),
            p.segments.to_string(),
            human_bytes(p.size_bytes),
            lag_cell,
            state,
        ]);
    }
    if parts.len() > 1 {
        let mut total: [String; 11] = Default::default();
        total[0] = format!("TOTAL ({} partitions)", parts.len());
        total[7] = segments.to_string();
        total[8] = human_bytes(bytes);
        total[9] = match (lag, lag_partial) {
            (Some(l), true) => format!(">={l}"),
            (None, true) => "?".to_string(),
            (l, false) => opt(l, ""),
        };
        rows.push(total);
    }
    // Columns as wide as their content: names and states left, figures right.
    let mut widths = [0usize; 11];
    for r in &rows {
        for (width, cell) in widths.iter_mut().zip(r) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (c, (cell, width)) in r.iter().zip(widths).enumerate() {
            let pad = width.saturating_sub(cell.chars().count());
            match c {
                0 => line.push_str(&format!("{cell}{}", " ".repeat(pad))),
                10 => line.push_str(cell),
                _ => line.push_str(&format!("{}{cell}", " ".repeat(pad))),
            }
            if c < 10 {
                line.push_str("  ");
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    for p in parts {
        for (a, b) in &p.lost_upstream {
            s.push_str(&format!(
                "{}: offsets {a}..{b} lost upstream (the leader deleted them before they were fetched)\n",
                p.tp
            ));
        }
        if let Some(why) = &p.fetching_stopped {
            s.push_str(&format!("{}: NOT FOLLOWED: {why}\n", p.tp));
        }
        for (path, size) in &p.damaged {
            // Both keep `<segment file>.<byte position>`: `repair` a rewritten segment's whole
            // old file (position 0), recovery what it cut from a position inside one (or a
            // whole segment that was damaged from its first byte).
            let from = path
                .rsplit_once(".log.")
                .and_then(|(_, n)| n.split('.').next()?.parse::<u64>().ok());
            let what = match from {
                Some(0) => "the old bytes of a damaged segment, whole (a `repair` rewrite or a recovery cut from its first byte)".to_string(),
                Some(at) => format!("cut by recovery from byte {at} of a damaged segment"),
                None => "of a damaged segment".to_string(),
            };
            s.push_str(&format!("{}: {size} bytes {what}, kept in {path}\n", p.tp));
        }
        for (a, b, path, size) in &p.diverged {
            s.push_str(&format!(
                "{}: offsets {a}..{b} removed by a truncation, kept in {path} ({size} bytes)\n",
                p.tp
            ));
        }
    }
    for a in &dd.archived {
        let (name, p) = (&a.name, a.partition);
        s.push_str(&format!(
            "{}-{p}: history of topic id {} archived in {}\n  read it as topic {name} partition {p}: dump|offsets|verify --topic {name} --partition {p}; `serve` serves it as topic {name}, read-only\n",
            a.topic,
            a.topic_id,
            a.path.display()
        ));
    }
    s.push_str(&super::upstream::render_text(&dd.upstream));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(name: &str, end: i64, bytes: u64) -> PartitionStatus {
        PartitionStatus {
            tp: TopicPartition::new(name, 0),
            log_start_offset: 0,
            log_end_offset: end,
            high_watermark: Some(end),
            recovery_point: Some(end),
            leader_epoch: Some(1),
            segments: 2,
            size_bytes: bytes,
            last_stable_offset: end,
            topic_id: None,
            aborted_transactions: 0,
            diverged: Vec::new(),
            lost_upstream: Vec::new(),
            damaged: Vec::new(),
            fetching_stopped: None,
            live: None,
            unflushed: None,
        }
    }

    #[test]
    fn the_table_is_as_wide_as_its_content_with_totals() {
        let parts = [
            partition("a", 5, 2048),
            partition("a-rather-long-topic-name", 123_456_789, 3 << 30),
        ];
        let text = render_text(&DataDirStatus::default(), &parts);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("not running"))
            .collect();
        assert!(
            lines[0].starts_with("PARTITION                  "),
            "{text}"
        );
        assert!(lines[1].starts_with("a-0   "), "{text}");
        assert!(
            lines[2].starts_with("a-rather-long-topic-name-0  "),
            "{text}"
        );
        assert!(
            lines[1].contains("2.0 KiB") && lines[2].contains("3.0 GiB"),
            "{text}"
        );
        assert!(lines[3].starts_with("TOTAL (2 partitions)"), "{text}");
        assert!(
            lines[3].contains("3.0 GiB") && lines[3].contains(" 4 "),
            "{text}"
        );
        // Right-aligned figures end in the same column.
        let end = |l: &str, what: &str| l.find(what).map(|i| i + what.len());
        assert_eq!(
            end(lines[0], "LOG_END"),
            end(lines[2], "123456789"),
            "{text}"
        );
    }

    #[test]
    fn a_lag_without_an_answer_shows_its_age_and_the_total_is_a_lower_bound() {
        let live = |lag_stale, hw: Option<i64>, ago_ms| crate::live::PartitionLive {
            leader_high_watermark: hw,
            log_end_offset: Some(100),
            state: crate::live::State::BackingOff,
            lag_stale,
            last_fetch_ms: Some(crate::clock::now_ms() - ago_ms),
            ..Default::default()
        };
        let mut parts = [
            partition("a", 100, 2048),
            partition("b", 100, 2048),
            partition("c", 100, 2048),
        ];
        parts[0].live = Some(live(false, Some(110), 0));
        parts[1].live = Some(live(true, Some(105), 125_000));
        parts[2].live = Some(live(false, None, 0));
        let dd = DataDirStatus {
            live: Some(crate::live::LiveFile::default()),
            ..DataDirStatus::default()
        };
        let text = render_text(&dd, &parts);
        let cell = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .map(|l| l.split("KiB").nth(1).unwrap_or("").trim().to_string())
        };
        assert!(cell("a-0").unwrap().starts_with("10  "), "{text}");
        assert!(cell("b-0").unwrap().starts_with("5 (2m5s ago)"), "{text}");
        assert!(cell("c-0").unwrap().starts_with("?  "), "{text}");
        assert!(cell("TOTAL").unwrap().starts_with(">=15"), "{text}");
        let json = render_json(&dd, &parts);
        assert!(
            json.contains("\"lag\": null, \"state\": \"backing off\"")
                && json.contains("\"last_known_lag\": 5, \"lag_stale\": true"),
            "{json}"
        );
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_bytes(980), "980 B");
        assert_eq!(human_bytes(998_671), "975.3 KiB");
        assert_eq!(human_bytes(1_288_490_189), "1.2 GiB");
    }
}
