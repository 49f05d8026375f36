//! A followed topic deleted and re-created under the same name (Tansu gives it a new topic
//! id) while the daemon runs. By default each partition's whole directory is moved intact to
//! `<topic>-<partition>.<old topic id>.archived/` and the new topic is followed from its
//! start; with `on_topic_recreated = "stop"` the old data stays in place and the topic is not
//! followed.

use crate::support;
use crate::support::{Daemon, Leader};
use replica_follower::checkpoint::TopicPartition;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOPIC: &str = "t";
const PARTITIONS: i32 = 2;

/// Every regular file of a partition dir: name → bytes.
fn dir_bytes(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    support::hash_tree(dir)
        .into_keys()
        .map(|rel| {
            let bytes = std::fs::read(dir.join(&rel)).unwrap();
            (rel, bytes)
        })
        .collect()
}

/// The first `.log` segment file of a partition dir.
fn first_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.into_iter().next().expect("a segment file")
}

fn archived_dirs(data: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".archived"))
        })
        .collect();
    out.sort();
    out
}

/// Produces to every partition of a fresh topic and starts the daemon on it; returns when
/// the replica has caught up and its checkpoints settled.
fn follow_fresh_topic(
    leader: &mut Leader,
    dir: &Path,
    data: &Path,
    per_partition: usize,
    tune: impl FnOnce(support::Config) -> support::Config,
) -> Daemon {
    leader.create_topic(TOPIC, PARTITIONS);
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        ends.push(
            leader
                .produce(TOPIC, p, per_partition, "none", 10 + p as u64)
                .1
                + 1,
        );
    }
    let cfg = support::Config::new(data, &leader.bootstrap)
        .follow(TOPIC)
        .apply(tune)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.segment_bytes", 16384)
        .set("log.flush_interval_ms", 100)
        .write(dir);
    let d = Daemon::start(&cfg);
    for p in 0..PARTITIONS {
        let want = ends[p as usize];
        support::wait_until(
            Duration::from_secs(30),
            &format!("{TOPIC}-{p} to reach {want}"),
            || support::log_end(data, TOPIC, i64::from(p)) == want,
        );
    }
    let old_id = leader.topic_id(TOPIC).expect("tansu reports topic ids");
    for p in 0..PARTITIONS {
        let md = data.join(format!("{TOPIC}-{p}/partition.metadata"));
        support::wait_until(Duration::from_secs(10), "partition.metadata", || {
            std::fs::read_to_string(&md).ok() == Some(format!("version: 0\ntopic_id: {old_id}\n"))
        });
        support::assert_byte_identical(&leader.bootstrap, data, &TopicPartition::new(TOPIC, p), 0);
    }
    // Let the high watermark reach the log end and the files settle.
    support::wait_until(Duration::from_secs(10), "HW checkpoint", || {
        let hw = support::read_checkpoint(&data.join("replication-offset-checkpoint"));
        (0..PARTITIONS)
            .all(|p| hw.get(&(TOPIC.to_string(), i64::from(p))) == Some(&ends[p as usize]))
    });
    std::thread::sleep(Duration::from_millis(500));
    d
}

#[test]
fn a_recreated_topic_archives_the_old_history_intact_and_follows_the_new_one() {
    let mut leader = Leader::start("tansu", 1);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = follow_fresh_topic(&mut leader, dir.path(), &data, 500, |c| c);
    let old_id = leader.topic_id(TOPIC).unwrap();

    let mut old_trees = Vec::new();
    let mut old_bytes = Vec::new();
    let mut old_inode = Vec::new();
    for p in 0..PARTITIONS {
        let pdir = data.join(format!("{TOPIC}-{p}"));
        assert!(support::segment_count(&data, &TopicPartition::new(TOPIC, p)) > 1);
        let seg = first_segment(&pdir);
        old_inode.push((seg.file_name().unwrap().to_owned(), support::inode(&seg)));
        old_trees.push(support::hash_tree(&pdir));
        old_bytes.push(dir_bytes(&pdir));
    }

    leader.delete_topic(TOPIC);
    leader.create_topic(TOPIC, PARTITIONS);
    let new_id = leader.topic_id(TOPIC).unwrap();
    assert_ne!(new_id, old_id);
    let mut new_ends = Vec::new();
    for p in 0..PARTITIONS {
        new_ends.push(leader.produce(TOPIC, p, 120, "zstd", 50 + p as u64).1 + 1);
    }

    let expected: Vec<PathBuf> = (0..PARTITIONS)
        .map(|p| data.join(format!("{TOPIC}-{p}.{old_id}.archived")))
        .collect();
    support::wait_until(Duration::from_secs(60), "the archived folders", || {
        expected.iter().all(|p| p.is_dir())
    });
    for p in 0..PARTITIONS {
        let want = new_ends[p as usize];
        support::wait_until(
            Duration::from_secs(30),
            &format!("the new {TOPIC}-{p} to reach {want}"),
            || support::log_end(&data, TOPIC, i64::from(p)) == want,
        );
    }
    assert!(d.is_running(), "the daemon should keep running");
    assert_eq!(
        archived_dirs(&data),
        expected,
        "exactly one archive per partition"
    );

    for p in 0..PARTITIONS {
        let i = p as usize;
        let arch = &expected[i];
        assert_eq!(
            support::hash_tree(arch),
            old_trees[i],
            "{}: the archive must hold exactly the old files, same inodes",
            arch.display()
        );
        assert_eq!(
            dir_bytes(arch),
            old_bytes[i],
            "{}: same bytes",
            arch.display()
        );
        let (name, ino) = &old_inode[i];
        assert_eq!(
            support::inode(&arch.join(name)),
            *ino,
            "segment moved, not copied"
        );
        assert_eq!(
            std::fs::read_to_string(arch.join("partition.metadata")).unwrap(),
            format!("version: 0\ntopic_id: {old_id}\n")
        );

        let tp = TopicPartition::new(TOPIC, p);
        support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
        let pdir = data.join(tp.dir_name());
        assert_ne!(
            support::inode(&first_segment(&pdir)),
            *ino,
            "the new topic has its own segment files"
        );
        let md = pdir.join("partition.metadata");
        support::wait_until(
            Duration::from_secs(10),
            "the new partition.metadata",
            || {
                std::fs::read_to_string(&md).ok()
                    == Some(format!("version: 0\ntopic_id: {new_id}\n"))
            },
        );
    }
    assert_eq!(leader.topic_id(TOPIC).as_deref(), Some(new_id.as_str()));

    let log = d.log_text();
    for p in 0..PARTITIONS {
        let tp = format!("{TOPIC}-{p}");
        assert!(
            log.lines().any(|l| l.contains(" ERROR ")
                && l.contains(&tp)
                && l.contains(&old_id)
                && l.contains(&new_id)),
            "an ERROR naming {tp}, {old_id} and {new_id}:\n{log}"
        );
    }

    let st = support::status(&data);
    let mut archived = st["archived"].as_array().expect("archived").clone();
    archived.sort_by_key(|a| a["partition"].as_i64());
    let want: Vec<serde_json::Value> = (0..PARTITIONS)
        .map(|p| {
            json!({"topic": TOPIC, "partition": p, "topic_id": old_id,
                "path": expected[p as usize].display().to_string(),
                "read_as_topic": format!("{TOPIC}.{old_id}.archived")})
        })
        .collect();
    assert_eq!(archived, want, "{st}");
    for p in 0..PARTITIONS {
        let ps = support::partition_status(&data, TOPIC, i64::from(p)).unwrap();
        assert_eq!(ps["topic_id"], json!(new_id), "{ps}");
        assert_eq!(ps["log_start_offset"], json!(0), "{ps}");
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify while running:\n{out}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after stop:\n{out}");
}

#[test]
fn on_topic_recreated_stop_keeps_the_old_data_in_place() {
    let mut leader = Leader::start("tansu", 1);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = follow_fresh_topic(&mut leader, dir.path(), &data, 400, |c| {
        c.with("on_topic_recreated", "stop")
    });
    let old_id = leader.topic_id(TOPIC).unwrap();
    let before: Vec<_> = (0..PARTITIONS)
        .map(|p| support::hash_tree(&data.join(format!("{TOPIC}-{p}"))))
        .collect();

    leader.delete_topic(TOPIC);
    leader.create_topic(TOPIC, PARTITIONS);
    let new_id = leader.topic_id(TOPIC).unwrap();
    assert_ne!(new_id, old_id);
    for p in 0..PARTITIONS {
        leader.produce(TOPIC, p, 100, "none", 70 + p as u64);
    }

    support::wait_until(
        Duration::from_secs(60),
        "the daemon to notice the re-created topic",
        || {
            let log = d.log_text();
            (0..PARTITIONS).all(|p| {
                let tp = format!("{TOPIC}-{p}");
                log.lines()
                    .any(|l| l.contains(&tp) && l.contains(&old_id) && l.contains(&new_id))
            })
        },
    );
    // A few more fetch and refresh rounds.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        d.is_running(),
        "the daemon should stay up:\n{}",
        d.log_text()
    );
    assert!(
        archived_dirs(&data).is_empty(),
        "no archive with on_topic_recreated = \"stop\""
    );
    for p in 0..PARTITIONS {
        let pdir = data.join(format!("{TOPIC}-{p}"));
        assert_eq!(
            support::hash_tree(&pdir),
            before[p as usize],
            "{}: the old data must stay as it was",
            pdir.display()
        );
        assert_eq!(
            std::fs::read_to_string(pdir.join("partition.metadata")).unwrap(),
            format!("version: 0\ntopic_id: {old_id}\n")
        );
    }
    assert!(
        support::status(&data)["archived"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "status lists no archive"
    );
    for p in 0..PARTITIONS {
        let st = support::partition_status(&data, TOPIC, i64::from(p)).unwrap();
        let why = st["fetching_stopped"].as_str().unwrap_or_default();
        assert!(
            why.contains("re-created") && why.contains(&new_id),
            "status shows why {TOPIC}-{p} is not followed: {st}"
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let log = d.log_text();
    for p in 0..PARTITIONS {
        let tp = format!("{TOPIC}-{p}");
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&tp) && l.contains(&old_id) && l.contains(&new_id))
            .collect();
        assert!(
            lines.iter().any(|l| l.contains(" ERROR ")),
            "the re-creation of {tp} should be logged as an ERROR: {lines:#?}"
        );
    }
}

/// The race a Tansu leader makes easy: the topic is re-created and grows past the replica's
/// end before any metadata refresh. With Fetch v13 the fetch names the old topic id, so the
/// leader refuses it (UNKNOWN_TOPIC_ID) instead of serving the new topic's batches at the old
/// offsets: the archived history holds exactly the old bytes, never a new-topic batch.
#[test]
fn a_topic_recreated_past_the_replica_end_never_mixes_into_the_old_history() {
    let mut leader = Leader::start("tansu", 1);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut d = follow_fresh_topic(&mut leader, dir.path(), &data, 5, |c| c);
    let before: Vec<Vec<u8>> = (0..PARTITIONS)
        .map(|p| support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p)))
        .collect();
    leader.delete_topic(TOPIC);
    leader.create_topic(TOPIC, PARTITIONS);
    for p in 0..PARTITIONS {
        leader.produce(TOPIC, p, 300, "none", 90 + p as u64);
    }
    support::wait_until(Duration::from_secs(60), "the archived folders", || {
        archived_dirs(&data).len() == PARTITIONS as usize
    });
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new(TOPIC, p);
        support::wait_until(
            Duration::from_secs(30),
            &format!("{tp} to follow the new topic"),
            || support::log_end(&data, TOPIC, i64::from(p)) == 300,
        );
        support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    }
    for (p, archived) in archived_dirs(&data).iter().enumerate() {
        let mut bytes = Vec::new();
        let mut logs: Vec<PathBuf> = std::fs::read_dir(archived)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for l in logs {
            bytes.extend(std::fs::read(l).unwrap());
        }
        assert!(
            bytes == before[p],
            "{}: the archive holds exactly the old history ({} bytes, was {})",
            archived.display(),
            bytes.len(),
            before[p].len()
        );
    }
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
}
