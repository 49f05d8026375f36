//! The daemon's archive of what a restore needs beside the partitions
//! ([`crate::checkpoint::upstream`]): each followed topic's partition count and topic-level
//! configs (DescribeConfigs, at start and every [`TOPICS_EVERY`]), and the committed offsets
//! of the groups `[groups] include` matches (ListGroups on every broker, OffsetFetch at each
//! group's coordinator, every `groups.refresh_ms`), for the partitions the replica holds.
//!
//! A thread of its own, outside the systemd watchdog's watch (a slow broker delays the
//! archive, never the replication), with short request timeouts; a stop is seen between
//! requests, and the daemon signals it first and waits for it last, a second at most: a
//! thread still in a request then ends with the process (its files are replaced atomically). Nothing is archived from a cluster other than the one the data dir recorded.
//! Failures are said once (WARN) until a round succeeds again (INFO); entries the source no
//! longer shows stay, with the time it last showed them.

use crate::checkpoint::TopicPartition;
use crate::checkpoint::upstream::{self, GroupOffset, TopicArchive};
use crate::client::admin;
use crate::client::cluster::ClusterMetadata;
use crate::client::connection::BrokerConnection;
use crate::log::data_dir::DataDir;
use crate::protocol::ApiKey;
use crate::protocol::error::ErrorCode;
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the topics' configs and partition counts are archived (the fetcher manager's
/// metadata refresh).
pub const TOPICS_EVERY: Duration = crate::fetcher::manager::METADATA_REFRESH;
/// How soon a failed round of topic configs is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// The deadline of every request of a round.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the archiving thread needs.
#[derive(Clone)]
pub struct ArchiveOptions {
    /// The source cluster: bootstrap brokers, security, client id, request deadline.
    pub source: super::Target,
    pub data_dir: PathBuf,
    /// The followed topics, archived from the start, before they have a local log.
    pub follow: Vec<String>,
    /// `[groups] include`, compiled; `None`: no group is archived.
    pub groups: Option<regex::RegexSet>,
    pub groups_every: Duration,
}

/// How long a stop waits for a thread in the middle of a request: longer, and it is left to
/// end with the process (every file it writes is replaced atomically, so nothing is torn).
const STOP_WAIT: Duration = Duration::from_secs(1);

/// The running archive thread; stopped when dropped.
pub struct Archiver {
    /// (stop asked, thread ended), and their wake-up.
    state: Arc<(Mutex<(bool, bool)>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Archiver {
    pub fn start(opts: ArchiveOptions) -> std::io::Result<Archiver> {
        let state = Arc::new((Mutex::new((false, false)), Condvar::new()));
        let s2 = state.clone();
        let handle = std::thread::Builder::new()
            .name("upstream-archive".into())
            .spawn(move || {
                run(&opts, &s2);
                let (m, cond) = &*s2;
                m.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .1 = true;
                cond.notify_all();
            })?;
        Ok(Archiver {
            state,
            handle: Some(handle),
        })
    }

    /// Asks the thread to stop after the request it is in, without waiting for it.
    pub fn signal(&self) {
        let (m, cond) = &*self.state;
        m.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0 = true;
        cond.notify_all();
    }

    /// [`Self::signal`], and waits up to [`STOP_WAIT`] for the thread to end.
    pub fn stop(&mut self) {
        self.signal();
        let (m, cond) = &*self.state;
        let g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (g, _) = cond
            .wait_timeout_while(g, STOP_WAIT, |s| !s.1)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ended = g.1;
        drop(g);
        match self.handle.take() {
            Some(h) if ended => {
                let _ = h.join();
            }
            Some(_) => crate::log_debug!(
                "the archive of topic configs and group offsets is in a request: not waited for"
            ),
            None => {}
        }
    }
}

impl Drop for Archiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a round of one kind failed last time, to say a failure once and the recovery.
#[derive(Default)]
struct Said {
    failing: bool,
}

impl Said {
    fn outcome(&mut self, what: &str, r: Result<String>) {
        match r {
            Ok(done) => {
                if std::mem::replace(&mut self.failing, false) {
                    crate::log_info!("archiving {what} works again: {done}");
                } else {
                    crate::log_debug!("archived {what}: {done}");
                }
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    crate::log_warn!(
                        "archiving {what} failed: {e:#}; retrying quietly until it works"
                    );
                } else {
                    crate::log_debug!("archiving {what} failed again: {e:#}");
                }
            }
        }
    }
}

fn run(opts: &ArchiveOptions, stop: &(Mutex<(bool, bool)>, Condvar)) {
    let (mut next_topics, mut next_groups) = (Instant::now(), Instant::now());
    let (mut topics_said, mut groups_said) = (Said::default(), Said::default());
    let mut unsupported_said = false;
    let mut retry_topics = None;
    loop {
        let now = Instant::now();
        if now >= next_topics {
            match archive_topics(opts) {
                Ok(Err(why)) => {
                    if !std::mem::replace(&mut unsupported_said, true) {
                        crate::log_info!(
                            "{why}: topic configs are not archived (a restore creates those topics with the target's defaults)"
                        );
                    }
                }
                r => {
                    let r = r.map(|done| done.unwrap_or_else(|why| why));
                    // A round that failed is tried again soon: a restore needs the configs.
                    if r.is_err() {
                        retry_topics = Some(Instant::now() + RETRY);
                    }
                    topics_said.outcome("topic configs", r);
                }
            }
            next_topics = retry_topics
                .take()
                .unwrap_or_else(|| Instant::now() + TOPICS_EVERY);
        }
        if opts.groups.is_some() && now >= next_groups {
            let stopping = || {
                stop.0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            };
            groups_said.outcome("consumer group offsets", archive_groups(opts, &stopping));
            next_groups = Instant::now() + opts.groups_every;
        }
        let wake = if opts.groups.is_some() {
            next_topics.min(next_groups)
        } else {
            next_topics
        };
        let (flag, cond) = stop;
        let g = flag
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.0 {
            return;
        }
        let (g, _) = cond
            .wait_timeout(g, wake.saturating_duration_since(Instant::now()))
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.0 {
            return;
        }
    }
}

/// A connection to the first bootstrap broker that answers, and its metadata of `topics`,
/// from the cluster the data dir records (refused otherwise).
fn cluster(
    opts: &ArchiveOptions,
    topics: &[String],
) -> Result<(BrokerConnection, ClusterMetadata)> {
    let (c, md) = super::connect_target(&opts.source, topics)?;
    let recorded = crate::log::identity::read_cluster_id(&opts.data_dir)?;
    if let (Some(r), Some(got)) = (&recorded, &md.cluster_id)
        && r != got
    {
        bail!(
            "broker {} is in cluster {got}, the data dir replicates cluster {r}: nothing archived from it",
            c.addr()
        );
    }
    Ok((c, md))
}

/// The topics and partitions the replica holds (archived histories aside).
fn local_partitions(data_dir: &Path) -> Result<BTreeSet<TopicPartition>> {
    Ok(DataDir::partitions(data_dir)?.into_iter().collect())
}

/// One round of topic configs: what was archived, or (`Err` inside) why the cluster gives
/// none: it does not offer DescribeConfigs, or refuses it for every topic by authorization
/// (a source's choice, said once at INFO, not a fault to warn of again and again).
fn archive_topics(opts: &ArchiveOptions) -> Result<std::result::Result<String, String>> {
    let local = local_partitions(&opts.data_dir)?;
    let topics: Vec<String> = local
        .iter()
        .map(|tp| tp.topic.clone())
        .chain(opts.follow.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if topics.is_empty() {
        return Ok(Ok("no topic yet".into()));
    }
    let (mut conn, md) = cluster(opts, &topics)?;
    let present: Vec<String> = topics
        .iter()
        .filter(|t| {
            md.topics
                .get(*t)
                .is_some_and(|(e, p)| e.is_ok() && !p.is_empty())
        })
        .cloned()
        .collect();
    if present.is_empty() {
        return Ok(Ok(
            "none of the followed topics is on the cluster now".into()
        ));
    }
    if conn.version(ApiKey::DescribeConfigs).is_none() {
        return Ok(Err("the cluster does not offer DescribeConfigs".into()));
    }
    let described = admin::describe_topic_configs(&mut conn, &present)?;
    let path = opts.data_dir.join(DataDir::TOPIC_CONFIGS);
    let mut archive = upstream::read_topics(&path)?;
    let now = crate::clock::now_ms();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let mut refused = Vec::new();
    for d in described {
        if d.error == ErrorCode::TOPIC_AUTHORIZATION_FAILED {
            refused.push(format!(
                "{} ({})",
                d.topic,
                d.message.as_deref().unwrap_or_default()
            ));
            continue;
        }
        if !d.error.is_ok() {
            failed.push(format!(
                "DescribeConfigs of topic {}: {} {}",
                d.topic,
                d.error.name(),
                d.message.as_deref().unwrap_or_default()
            ));
            continue;
        }
        let Some((_, parts)) = md.topics.get(&d.topic) else {
            continue;
        };
        let configs: BTreeMap<String, String> = d
            .entries
            .into_iter()
            .filter(|e| e.source == admin::SOURCE_DYNAMIC_TOPIC && !e.sensitive)
            .filter_map(|e| Some((e.name, e.value?)))
            .collect();
        done.push(format!("{} ({} set)", d.topic, configs.len()));
        archive.insert(
            d.topic,
            TopicArchive {
                partitions: i32::try_from(parts.len()).unwrap_or(i32::MAX),
                configs,
                seen_ms: now,
            },
        );
    }
    upstream::write_topics(&path, &archive)?;
    if done.is_empty() && failed.is_empty() && !refused.is_empty() {
        return Ok(Err(format!(
            "the cluster refuses to describe the configs of {} (TOPIC_AUTHORIZATION_FAILED)",
            refused.join(", ")
        )));
    }
    failed.extend(
        refused
            .iter()
            .map(|t| format!("DescribeConfigs of topic {t}: TOPIC_AUTHORIZATION_FAILED")),
    );
    if !failed.is_empty() {
        bail!(
            "{} archived; {}",
            if done.is_empty() {
                "nothing".to_string()
            } else {
                done.join(", ")
            },
            failed.join("; ")
        );
    }
    Ok(Ok(done.join(", ")))
}

/// `group`'s offsets just fetched, of the partitions the replica holds (`local`), into the
/// archive: each replaces the one archived for its partition; partitions and groups the
/// answer leaves out keep what was archived. The offsets merged.
fn merge_group(
    archive: &mut upstream::GroupOffsets,
    group: &str,
    offsets: Vec<admin::CommittedOffset>,
    local: &BTreeSet<TopicPartition>,
    now: i64,
) -> usize {
    let entry = archive.entry(group.to_string()).or_default();
    let mut merged = 0;
    for o in offsets {
        let tp = TopicPartition::new(&o.topic, o.partition);
        if !local.contains(&tp) {
            continue;
        }
        entry.insert(
            tp,
            GroupOffset {
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata: o.metadata,
                seen_ms: now,
            },
        );
        merged += 1;
    }
    if entry.is_empty() {
        archive.remove(group);
    }
    merged
}

/// One round of group offsets; what was archived.
fn archive_groups(opts: &ArchiveOptions, stopping: &dyn Fn() -> bool) -> Result<String> {
    let Some(matcher) = &opts.groups else {
        return Ok(String::new());
    };
    let local = local_partitions(&opts.data_dir)?;
    let (mut bootstrap, md) = cluster(opts, &[])?;
    // What failed, said together once the rest is archived: one broker or group that does not
    // answer does not keep the others from the archive.
    let mut failed = Vec::new();
    // ListGroups answers with the groups each broker coordinates: ask every one.
    let mut groups = BTreeSet::new();
    let mut conns: HashMap<i32, BrokerConnection> = HashMap::new();
    for (id, addr) in &md.brokers {
        let listed = super::connect_addr(&opts.source, addr).and_then(|mut c| {
            let l = admin::list_groups(&mut c)?;
            conns.insert(*id, c);
            Ok(l)
        });
        match listed {
            Ok(l) => groups.extend(
                l.into_iter()
                    .map(|g| g.group_id)
                    .filter(|g| !g.is_empty() && matcher.is_match(g)),
            ),
            Err(e) => failed.push(format!("ListGroups at broker {id} ({addr}): {e:#}")),
        }
    }
    let path = opts.data_dir.join(DataDir::GROUP_OFFSETS);
    let mut archive = upstream::read_groups(&path)?;
    let now = crate::clock::now_ms();
    let mut archived = 0;
    for group in &groups {
        if stopping() {
            break;
        }
        let offsets = (|| {
            let coord = super::coordinated(opts.source.request_timeout, || {
                admin::find_coordinator(&mut bootstrap, admin::KEY_TYPE_GROUP, group)
            })
            .context("FindCoordinator")?;
            let conn = match conns.entry(coord.node_id) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(super::connect_addr(
                    &opts.source,
                    &format!("{}:{}", coord.host, coord.port),
                )?),
            };
            super::coordinated(opts.source.request_timeout, || {
                admin::offset_fetch(conn, group)
            })
            .context("OffsetFetch")
        })();
        match offsets {
            Ok(offsets) => archived += merge_group(&mut archive, group, offsets, &local, now),
            Err(e) => failed.push(format!("group `{group}`: {e:#}")),
        }
    }
    upstream::write_groups(&path, &archive)?;
    let done = format!("{} group(s), {archived} partition offset(s)", groups.len());
    match failed.len() {
        0 => Ok(done),
        n => bail!("{done} archived; {n} failed: {}", failed.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(topic: &str, partition: i32, offset: i64) -> admin::CommittedOffset {
        admin::CommittedOffset {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 3,
            metadata: Some(format!("m{offset}")),
        }
    }

    #[test]
    fn merged_offsets_replace_and_what_the_source_no_longer_shows_stays() {
        let local: BTreeSet<TopicPartition> = (0..3).map(|p| TopicPartition::new("t", p)).collect();
        let mut archive = upstream::GroupOffsets::new();
        let n = merge_group(
            &mut archive,
            "g",
            vec![
                committed("t", 0, 10),
                committed("t", 1, 20),
                committed("other", 0, 5),
            ],
            &local,
            100,
        );
        assert_eq!(
            n, 2,
            "partitions the replica does not hold are not archived"
        );
        merge_group(
            &mut archive,
            "gone",
            vec![committed("t", 2, 7)],
            &local,
            100,
        );
        // Later: g moved on partition 0 and shows nothing of partition 1; "gone" is not listed.
        merge_group(&mut archive, "g", vec![committed("t", 0, 15)], &local, 200);
        let g = &archive["g"];
        assert_eq!(
            (
                g[&TopicPartition::new("t", 0)].offset,
                g[&TopicPartition::new("t", 0)].seen_ms
            ),
            (15, 200)
        );
        assert_eq!(
            (
                g[&TopicPartition::new("t", 1)].offset,
                g[&TopicPartition::new("t", 1)].seen_ms
            ),
            (20, 100),
            "kept, with when it was last seen"
        );
        assert_eq!(archive["gone"][&TopicPartition::new("t", 2)].offset, 7);
        assert_eq!(
            g[&TopicPartition::new("t", 0)].metadata.as_deref(),
            Some("m15")
        );
        // A group with nothing of the replica's partitions is not archived at all.
        merge_group(
            &mut archive,
            "elsewhere",
            vec![committed("other", 0, 1)],
            &local,
            300,
        );
        assert!(!archive.contains_key("elsewhere"));
    }
}
