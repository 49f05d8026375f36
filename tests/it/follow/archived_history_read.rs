//! A followed topic deleted and re-created on its leader under the same name: each
//! partition's old history is archived in `<topic>-<p>.<old id>.archived/`, and is read under
//! the topic name `<topic>.<old id>.archived` — the name `status` prints — by `dump`,
//! `offsets`, `verify --topic` and a stopped `serve`, which gives it to a real Kafka client
//! byte for byte, beside the live topic.

use crate::support;
use crate::support::Leader;
use replica_follower::checkpoint::TopicPartition;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 2;

/// The stopped replica every test here reads (none writes to it).
struct Replica {
    data: PathBuf,
    old_id: String,
    old_records: Vec<Vec<Value>>,
    new_end: i64,
}

impl Replica {
    /// The name the archived history is read and served under.
    fn name(&self) -> String {
        format!("{TOPIC}.{}.archived", self.old_id)
    }
    fn archive(&self, p: i32) -> PathBuf {
        self.data
            .join(format!("{TOPIC}-{p}.{}.archived", self.old_id))
    }
    fn data(&self) -> &str {
        self.data.to_str().expect("a UTF-8 path")
    }
}

/// Built once for the tests of this file, under the target's temporary folder (a static is
/// never dropped, so a temp dir would be left behind).
fn replica() -> &'static Replica {
    static REPLICA: OnceLock<Replica> = OnceLock::new();
    REPLICA.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("archived_history_read");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("create the test folder");
        let data = root.join("data");
        let mut leader = Leader::start("tansu", 1);
        let mut r =
            support::recreate_followed_topic(&mut leader, &root, &data, TOPIC, PARTITIONS, |c| c);
        assert_eq!(r.daemon.stop().code(), Some(0), "{}", r.daemon.log_text());
        Replica {
            data,
            old_id: r.old_id,
            old_records: r.old_records,
            new_end: r.new_end,
        }
    })
}

/// The record offsets a `dump` printed, and its segment header lines.
fn dumped(stdout: &str) -> (Vec<i64>, Vec<&str>) {
    let offsets = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  offset="))
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let segments = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("# segment "))
        .collect();
    (offsets, segments)
}

fn offsets_of(records: &[Value]) -> Vec<i64> {
    support::offsets_of(records)
}

#[test]
fn dump_reads_the_archived_history_under_its_name() {
    let r = replica();
    let name = r.name();
    for p in 0..PARTITIONS {
        let part = p.to_string();
        let (code, out, err) = support::run_cli(&[
            "dump",
            "--data-dir",
            r.data(),
            "--topic",
            &name,
            "--partition",
            &part,
            "--records",
        ]);
        assert_eq!(code, Some(0), "dump of {name}-{p}: {err}");
        let (offsets, segments) = dumped(&out);
        assert_eq!(
            offsets,
            offsets_of(&r.old_records[p as usize]),
            "every record of the old history"
        );
        assert!(segments.len() > 1, "{out}");
        let archive = r.archive(p).display().to_string();
        assert!(
            segments.iter().all(|s| s.starts_with(&archive)),
            "read from {archive}: {segments:?}"
        );
    }
    // The topic's own name still reads the live, re-created topic.
    let (code, out, err) = support::run_cli(&[
        "dump",
        "--data-dir",
        r.data(),
        "--topic",
        TOPIC,
        "--partition",
        "0",
        "--records",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(dumped(&out).0, (0..r.new_end).collect::<Vec<_>>());
}

#[test]
fn offsets_answer_from_the_archived_history() {
    let r = replica();
    let name = r.name();
    let offsets = |topic: &str, args: &[&str]| {
        let mut all = vec![
            "offsets",
            "--data-dir",
            r.data(),
            "--topic",
            topic,
            "--partition",
            "1",
        ];
        all.extend_from_slice(args);
        let (code, out, err) = support::run_cli(&all);
        assert_eq!(code, Some(0), "offsets {all:?}: {err}");
        out.trim().to_string()
    };
    let old_end = r.old_records[1].len() as i64;
    assert_eq!(offsets(&name, &["--time", "-1"]), old_end.to_string());
    assert_eq!(offsets(&name, &["--time", "-2"]), "0");
    assert!(
        offsets(&name, &["--timestamp", "0"]).starts_with("offset=0 "),
        "the first record of the old history"
    );
    assert_eq!(offsets(TOPIC, &["--time", "-1"]), r.new_end.to_string());
}

/// The first `.log` segment of a partition dir.
fn first_segment(dir: &Path) -> PathBuf {
    support::segment_logs(dir)
        .into_values()
        .next()
        .expect("a segment")
}

#[test]
fn verify_checks_one_archived_history_and_names_its_damage() {
    let r = replica();
    let name = r.name();
    let verify = |data: &str, topic: &str, partition: Option<&str>| {
        let mut args = vec!["verify", "--data-dir", data, "--topic", topic];
        if let Some(p) = partition {
            args.extend(["--partition", p]);
        }
        let (code, out, err) = support::run_cli(&args);
        (code, out + &err)
    };
    let (code, out) = verify(r.data(), &name, None);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("ok: 2 archived histories, "), "{out}");
    let (code, out) = verify(r.data(), &name, Some("1"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("ok: 1 archived history, "), "{out}");

    // One byte flipped inside a batch of partition 0's archived history, in a copy.
    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&r.data)
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    let data = copy.path().join("data");
    let data_s = data.to_str().unwrap();
    let archive = data.join(r.archive(0).file_name().unwrap());
    let seg = first_segment(&archive);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[200] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();

    let (code, out) = verify(data_s, &name, Some("0"));
    assert_eq!(code, Some(1), "{out}");
    let seg_s = seg.display().to_string();
    assert!(
        out.lines()
            .any(|l| l.starts_with(&seg_s) && l.contains("CRC")),
        "a line naming {seg_s} and its CRC:\n{out}"
    );
    let (code, out) = verify(data_s, &name, None);
    assert_eq!(code, Some(1), "{out}");
    for (topic, p) in [(name.as_str(), "1"), (TOPIC, "0")] {
        let (code, out) = verify(data_s, topic, Some(p));
        assert_eq!(code, Some(0), "{topic}-{p} is not damaged: {out}");
    }
    let (code, out) = verify(data_s, &format!("{TOPIC}.nothing.archived"), None);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("no partition directory and no archived history"),
        "{out}"
    );
}

#[test]
fn status_says_how_to_read_and_serve_each_archived_history() {
    let r = replica();
    let name = r.name();
    let st = support::status(&r.data);
    let archived = st["archived"].as_array().expect("archived");
    let want: Vec<Value> = (0..PARTITIONS)
        .map(|p| {
            json!({"topic": TOPIC, "partition": p, "topic_id": r.old_id,
                "path": r.archive(p).display().to_string(), "read_as_topic": name})
        })
        .collect();
    assert_eq!(archived, &want, "{st}");

    let (code, out, err) = support::run_cli(&["status", "--data-dir", r.data()]);
    assert_eq!(code, Some(0), "{err}");
    for p in 0..PARTITIONS {
        let line = format!(
            "{TOPIC}-{p}: history of topic id {} archived in {}",
            r.old_id,
            r.archive(p).display()
        );
        let how = format!(
            "  read it as topic {name} partition {p}: dump|offsets|verify --topic {name} --partition {p}; `serve` serves it as topic {name}, read-only"
        );
        assert!(
            out.lines()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| w[0] == line && w[1] == how),
            "status shows\n{line}\n{how}\nin:\n{out}"
        );
    }
}

#[test]
fn a_stopped_serve_gives_the_archived_history_to_a_kafka_client() {
    let r = replica();
    let name = r.name();
    let listen = format!("127.0.0.1:{}", support::free_port());
    let mut serving = Serving(support::spawn_serve(&r.data, &listen));

    let md = support::clients_py(&["metadata", "--bootstrap", &listen]);
    assert_eq!(
        md["topics"],
        json!({TOPIC: [0, 1], name.clone(): [0, 1]}),
        "the live topic and the archived one, side by side"
    );
    for p in 0..PARTITIONS {
        let served = support::consume_all(&listen, &name, p, "read_uncommitted");
        assert!(
            served == r.old_records[p as usize],
            "{name}-{p}: a consumer reads exactly what the old topic held ({} records, was {})",
            served.len(),
            r.old_records[p as usize].len()
        );
        let tp = TopicPartition::new(name.clone(), p);
        let bytes: Vec<u8> = support::segment_logs(&r.archive(p))
            .into_values()
            .flat_map(|l| std::fs::read(l).unwrap())
            .collect();
        assert!(
            support::leader_bytes(&listen, &tp, 0) == bytes,
            "{tp}: served byte for byte"
        );
    }
    let live = support::consume_all(&listen, TOPIC, 0, "read_uncommitted");
    assert_eq!(live.len() as i64, r.new_end, "the re-created topic");
    assert!(live != r.old_records[0][..live.len()]);

    let pid = serving.0.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert_eq!(serving.0.wait().unwrap().code(), Some(0));
}

/// The `serve` process, killed if the test fails before stopping it.
struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
