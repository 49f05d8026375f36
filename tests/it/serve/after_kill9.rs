//! Disaster recovery after an unclean stop: the daemon is killed with -9 once it has caught
//! up, before any checkpoint covers what it fetched, and then the leader (Tansu) is gone too.
//! The checkpoints on disk still say "nothing", but every whole, CRC-valid batch on disk was
//! below the leader's high watermark when it was fetched:
//!
//! - `status` shows the high watermark the replica really holds, and the torn tail;
//! - `verify` tells the torn tail past the recovery point (a note, exit 0) from damage below
//!   the recovery point (a problem, exit 1);
//! - `serve --data-dir` serves every whole batch, byte for byte what the leader served, says
//!   once what it found past the recovery points, and never serves the torn tail;
//! - the daemon restarted with its leader unreachable serves the same from its own listener.

use crate::support;
use replica_follower::checkpoint::TopicPartition;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOPIC: &str = "orders";

/// `serve --data-dir DATA --listen ADDR` with its stderr in `log`, once it listens.
fn spawn_serve_logged(data: &Path, listen: &str, log: &Path) -> Child {
    let child = Command::new(support::bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", listen])
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .expect("start serve");
    support::wait_until(Duration::from_secs(20), "serve to listen", || {
        std::net::TcpStream::connect(listen).is_ok()
    });
    child
}

fn stop(mut child: Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The active (last) segment of `tp`.
fn active_segment(data: &Path, tp: &TopicPartition) -> std::path::PathBuf {
    support::segment_logs(&data.join(tp.dir_name()))
        .into_values()
        .next_back()
        .expect("a segment")
}

#[test]
fn after_kill9_and_the_leader_gone_every_whole_batch_is_served_and_no_torn_tail() {
    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic(TOPIC, 2);
    let mut ends = [0i64; 2];
    for (p, codec) in ["lz4", "none"].iter().enumerate() {
        for round in 0..4 {
            ends[p] = leader
                .produce(TOPIC, p as i32, 500, codec, (p * 10 + round) as u64)
                .1
                + 1;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", support::free_port());
    // Nothing is fsynced or checkpointed before the kill: the checkpoints keep what the
    // start wrote, and every fetched batch lies past the recovery point.
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow(TOPIC)
        .set("log.segment_bytes", 65536)
        .set("log.flush_interval_ms", 3600000)
        .set("checkpoint.interval_ms", 3600000)
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 100)
        .set("serve.listen", listen.to_string())
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    let from_leader = support::caught_up_records(&leader.bootstrap, &data, TOPIC, &ends);
    d.kill9();
    drop(leader);

    let hw = support::read_checkpoint(&data.join("replication-offset-checkpoint"));
    for p in 0..2 {
        let checkpointed = hw.get(&(TOPIC.to_string(), p)).copied().unwrap_or(0);
        assert!(
            checkpointed < ends[p as usize] / 2,
            "the test needs a stale high-watermark checkpoint, got {checkpointed} for p{p}"
        );
    }
    // A torn write at the end of partition 0: the first 40 bytes of a copy of its first
    // batch (whose size field announces far more).
    let tp0 = TopicPartition::new(TOPIC, 0);
    let seg = active_segment(&data, &tp0);
    let first = std::fs::read(
        support::segment_logs(&data.join(tp0.dir_name()))
            .into_values()
            .next()
            .unwrap(),
    )
    .unwrap();
    let torn_at = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&seg)
        .unwrap()
        .write_all(&first[..40])
        .unwrap();
    let whole: Vec<Vec<u8>> = (0..2)
        .map(|p| {
            let mut b = support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p));
            if p == 0 {
                b.truncate(b.len() - 40);
            }
            b
        })
        .collect();

    // status: the high watermark is the end of the whole batches, and the torn tail is named.
    for p in 0..2 {
        let st = support::partition_status(&data, TOPIC, p).unwrap();
        assert_eq!(st["high_watermark"], ends[p as usize], "p{p}: {st}");
        assert_eq!(st["unflushed"]["valid_end"], ends[p as usize], "p{p}: {st}");
        assert!(
            st["unflushed"]["valid_batches"].as_u64().unwrap() > 10,
            "p{p}: {st}"
        );
    }
    let st0 = support::partition_status(&data, TOPIC, 0).unwrap();
    assert_eq!(
        st0["unflushed"]["not_served"][0]["position"], torn_at,
        "{st0}"
    );
    assert_eq!(st0["unflushed"]["not_served"][0]["torn"], true, "{st0}");
    assert_eq!(
        support::partition_status(&data, TOPIC, 1).unwrap()["unflushed"]["not_served"],
        serde_json::json!([])
    );
    let (code, text, _) = support::run_cli(&["status", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(text.contains("not stopped cleanly"), "{text}");
    assert!(
        text.contains(&format!(
            "{TOPIC}-0: TORN TAIL: 40 bytes from byte {torn_at}"
        )),
        "{text}"
    );

    // verify: the torn tail past the recovery point is a note, not a failure.
    let (ok, out) = support::verify(&data);
    assert!(ok, "verify after kill -9 must pass:\n{out}");
    assert!(
        out.contains(&format!("note: {TOPIC}-0: not stopped cleanly")),
        "{out}"
    );
    assert!(out.contains("not stopped cleanly"), "{out}");
    // --all judges every byte: the torn tail is then a problem.
    let (code, _, _) = support::run_cli(&["verify", "--all", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(1), "verify --all counts the torn tail");

    // Damage past the recovery point that is not a torn write (a batch whose CRC fails,
    // in a copy of the replica) is a problem: recovery keeps it aside with an ERROR.
    let copy = dir.path().join("copy");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&data)
            .arg(&copy)
            .status()
            .unwrap()
            .success()
    );
    let damaged = active_segment(&copy, &TopicPartition::new(TOPIC, 1));
    let mut bytes = std::fs::read(&damaged).unwrap();
    bytes[100] ^= 0x55;
    std::fs::write(&damaged, &bytes).unwrap();
    let (ok, out) = support::verify(&copy);
    assert!(
        !ok,
        "a CRC failure past the recovery point fails verify:\n{out}"
    );
    assert!(out.contains("not a torn write"), "{out}");

    // serve: every whole batch, byte for byte as the leader served it; the torn tail never.
    let serve_listen = format!("127.0.0.1:{}", support::free_port());
    let serve_log = dir.path().join("serve.log");
    let serve = spawn_serve_logged(&data, &serve_listen, &serve_log);
    for (p, want) in from_leader.iter().enumerate() {
        let got = support::consume_all(&serve_listen, TOPIC, p as i32, "read_uncommitted");
        assert_eq!(got.len(), want.len(), "p{p}: records served after kill -9");
        assert_eq!(&got, want, "p{p}: from serve --data-dir after kill -9");
        let tp = TopicPartition::new(TOPIC, p as i32);
        assert_eq!(
            support::leader_bytes(&serve_listen, &tp, 0),
            whole[p],
            "p{p}: the served bytes are the whole batches on disk"
        );
    }
    stop(serve);
    let said = std::fs::read_to_string(&serve_log).unwrap();
    assert_eq!(said.matches("was not stopped cleanly").count(), 1, "{said}");
    assert!(
        said.contains(&format!("{TOPIC}-0: ")) && said.contains("torn by the crash"),
        "{said}"
    );
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        torn_at + 40,
        "serve changes nothing on disk"
    );

    // The daemon restarted with its leader gone: recovery cuts the torn tail and its own
    // listener serves every record.
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(20), "the daemon's listener", || {
        std::net::TcpStream::connect(&listen).is_ok()
    });
    for (p, want) in from_leader.iter().enumerate() {
        let got = support::consume_all(&listen, TOPIC, p as i32, "read_uncommitted");
        assert_eq!(
            &got, want,
            "p{p}: from the restarted daemon, leader unreachable"
        );
    }
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());

    // Stopped cleanly, the recovery points cover every batch: damage below one is a problem.
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
    assert!(!out.contains("not stopped cleanly"), "{out}");
    let seg1 = support::segment_logs(&data.join("orders-1"))
        .into_values()
        .next()
        .unwrap();
    let mut bytes = std::fs::read(&seg1).unwrap();
    bytes[200] ^= 0xff;
    std::fs::write(&seg1, &bytes).unwrap();
    std::fs::remove_file(data.join(".kafka_cleanshutdown")).unwrap();
    let (ok, out) = support::verify(&data);
    assert!(!ok, "damage below the recovery point is a failure:\n{out}");
    assert!(out.contains(&seg1.display().to_string()), "{out}");
}
