//! The layout of a data dir: every file and directory name in it, in one place. Formats live
//! with their readers and writers ([`crate::checkpoint`], [`super::identity`],
//! [`super::format::segment`], …); this module says only where each file is.
//!
//! ```text
//! <data_dir>/
//!     .lock                               the daemon's exclusive lock           (daemon)
//!     .kafka_cleanshutdown                written at a clean shutdown            (manager)
//!     .live-status                        the running daemon's figures          (live)
//!     meta.properties                     the source cluster's id                (identity)
//!     replication-offset-checkpoint       high watermarks        ┐
//!     recovery-point-offset-checkpoint    recovery points        ├ (checkpoint)
//!     log-start-offset-checkpoint         log start offsets      ┘
//!     topic-configs-checkpoint            topic configs, partition counts ┐ (checkpoint::
//!     group-offsets-checkpoint            consumer groups' offsets        ┘  upstream)
//!     disk-full                           why appends are paused                (disk)
//!     fetching-stopped                    why fetching is stopped                (fetcher)
//!     fetching-stopped-partitions         partitions stopped, with why          (fetcher)
//!     failed-partitions                   partitions failed, with why           (fetcher)
//!     repair-staging/                     segments built before their rename    (repair)
//!     .<topic>-<partition>.creating/      a partition directory being made      (partition)
//!     <topic>-<partition>.<id>.archived/  a re-created topic's old history      (identity)
//!     <topic>-<partition>/
//!         partition.metadata              the topic id                          (identity)
//!         leader-epoch-checkpoint         epoch → start offset                  (epoch_cache)
//!         lost-upstream-checkpoint        ranges the leader deleted first       (partition)
//!         diverged/                       bytes cut at a truncation             (diverged)
//!         damaged/                        bytes cut at damage by recovery       (diverged)
//!         <base>.log, .index, .timeindex, .txnindex, .snapshot                  (segment)
//! ```

use crate::checkpoint::TopicPartition;
use anyhow::{Context, Result};
use std::path::Path;

/// The names of a data dir's files; see the module doc for the whole layout.
pub struct DataDir;

impl DataDir {
    /// The daemon's lock: held for as long as it runs on the data dir.
    pub const LOCK_FILE: &str = ".lock";
    /// Written at a clean shutdown, removed once the logs are loaded; its absence at start-up
    /// means the logs past the recovery point must be recovered.
    pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
    /// The file `status` reads while the daemon runs.
    pub const LIVE_STATUS_FILE: &str = ".live-status";
    pub const META_PROPERTIES: &str = "meta.properties";

    pub const REPLICATION_OFFSET: &str = "replication-offset-checkpoint";
    pub const RECOVERY_POINT: &str = "recovery-point-offset-checkpoint";
    pub const LOG_START_OFFSET: &str = "log-start-offset-checkpoint";
    /// Each followed topic's partition count and topic-level configs, as the source cluster
    /// last showed them ([`crate::checkpoint::upstream`]).
    pub const TOPIC_CONFIGS: &str = "topic-configs-checkpoint";
    /// The committed offsets of the groups `[groups]` includes (same module).
    pub const GROUP_OFFSETS: &str = "group-offsets-checkpoint";

    /// Written into the data dir while appends are paused for lack of space (the reason);
    /// `status` shows it.
    pub const DISK_FULL_FILE: &str = "disk-full";
    /// Written into the data dir while fetching is stopped for the whole data dir (the leader
    /// reports another cluster); `status` shows it.
    pub const FETCH_STOPPED_FILE: &str = "fetching-stopped";
    /// Written into the data dir while partitions are not followed because their topic was
    /// re-created and `on_topic_recreated = "stop"`: one `topic partition reason` line each.
    pub const STOPPED_PARTITIONS_FILE: &str = "fetching-stopped-partitions";
    /// Written into the data dir while partitions are failed by a local storage error: one
    /// `topic partition reason` line each; `status` shows them.
    pub const FAILED_PARTITIONS_FILE: &str = "failed-partitions";
    /// Where segments are built before they are renamed into the partition directory.
    pub const STAGING_DIR: &str = "repair-staging";

    /// The suffix of a partition directory being made (`.<topic>-<partition>.creating`); one
    /// left by a crash holds nothing fetched and is removed at the next start.
    pub const CREATING_SUFFIX: &str = ".creating";
    pub const ARCHIVED_SUFFIX: &str = ".archived";

    pub const PARTITION_METADATA: &str = "partition.metadata";
    pub const LEADER_EPOCH: &str = "leader-epoch-checkpoint";
    /// Per partition: offset ranges the leader had deleted before this replica could fetch them.
    pub const LOST_UPSTREAM: &str = "lost-upstream-checkpoint";
    pub const DIVERGED_DIR: &str = "diverged";
    /// Where recovery keeps the bytes it cut from a segment at damage (see
    /// [`super::format::segment::Segment::recover`]).
    pub const DAMAGED_DIR: &str = "damaged";

    /// The partitions that have a directory `<topic>-<partition>` in `data_dir`, sorted.
    pub fn partitions(data_dir: &Path) -> Result<Vec<TopicPartition>> {
        let mut out: Vec<TopicPartition> = std::fs::read_dir(data_dir)
            .with_context(|| format!("failed to list data dir `{}`", data_dir.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| TopicPartition::parse_dir_name(&e.file_name().to_string_lossy()))
            .collect();
        out.sort();
        Ok(out)
    }
}
