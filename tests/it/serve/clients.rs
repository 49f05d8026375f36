//! Real clients read the replica's listener as they read the leader: a daemon with `[serve]`
//! follows Tansu (3 partitions, every codec, keys and headers); a confluent-kafka consumer
//! (assign(), no group, no commit) gets from the replica exactly the (offset, key, value,
//! headers) of every record it gets from Tansu; AdminClient metadata lists the topic and its
//! partitions; Debian's kcat lists it and reads every record.

use crate::support;
use replica_follower::checkpoint::TopicPartition;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const TOPIC: &str = "read-me";
const PARTITIONS: i32 = 3;

fn unhex(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap_or_default();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// What `kcat -f '%o %k %s\n'` prints for `records` (a null key or value prints nothing).
fn kcat_lines(records: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(format!("{} ", r["offset"]).as_bytes());
        out.extend(unhex(&r["key"]));
        out.push(b' ');
        out.extend(unhex(&r["value"]));
        out.push(b'\n');
    }
    out
}

#[test]
fn confluent_kafka_and_kcat_read_the_replica_as_they_read_the_leader() {
    let t0 = Instant::now();
    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic(TOPIC, PARTITIONS);
    let mut ends = [0i64; PARTITIONS as usize];
    for (i, codec) in support::CODECS.iter().enumerate() {
        for p in 0..PARTITIONS {
            let (_, last) = leader.produce(TOPIC, p, 120, codec, (i as u64) * 10 + p as u64);
            ends[p as usize] = last + 1;
        }
    }
    let (_dir, data, addr, mut d) = support::serving_follower(&leader.bootstrap, TOPIC);
    for p in 0..PARTITIONS {
        let want = ends[p as usize];
        support::wait_until(Duration::from_secs(60), &format!("p{p} at {want}"), || {
            support::log_end(&data, TOPIC, i64::from(p)) == want
        });
        support::assert_byte_identical(&leader.bootstrap, &data, &TopicPartition::new(TOPIC, p), 0);
    }

    // confluent-kafka: the same records, offsets, keys, values and headers from both.
    for p in 0..PARTITIONS {
        let from_leader = support::consume_all(&leader.bootstrap, TOPIC, p, "read_uncommitted");
        assert_eq!(
            support::offsets_of(&from_leader),
            (0..ends[p as usize]).collect::<Vec<_>>(),
            "p{p}: the leader's records"
        );
        assert!(
            from_leader
                .iter()
                .any(|r| !r["headers"].as_array().unwrap().is_empty())
                && from_leader.iter().any(|r| r["key"].is_null())
        );
        // The replica's high watermark follows the leader's within a fetch round.
        let deadline = Instant::now() + Duration::from_secs(10);
        let from_replica = loop {
            let r = support::consume_all(&addr, TOPIC, p, "read_uncommitted");
            if r.len() == from_leader.len() || Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            from_replica, from_leader,
            "p{p}: the replica serves other records"
        );
    }

    // AdminClient metadata: the topic, its partitions, and this listener as the one broker.
    let md = support::clients_py(&["metadata", "--bootstrap", &addr]);
    assert_eq!(md["topics"][TOPIC], serde_json::json!([0, 1, 2]), "{md}");
    assert_eq!(md["brokers"], serde_json::json!([addr]), "{md}");

    // kcat (Debian's, librdkafka 2.0.2): -L lists the topic, -C reads every record.
    let kcat = support::kcat();
    let out = Command::new(kcat)
        .args(["-L", "-b", &addr, "-m", "10"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kcat -L: {listing} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        listing.contains(&format!("topic \"{TOPIC}\" with 3 partitions")),
        "kcat -L:\n{listing}"
    );
    for p in 0..PARTITIONS {
        let want = kcat_lines(&support::consume_all(&addr, TOPIC, p, "read_uncommitted"));
        let out = Command::new(kcat)
            .args(["-C", "-b", &addr, "-t", TOPIC, "-p", &p.to_string()])
            .args([
                "-o",
                "beginning",
                "-e",
                "-q",
                "-m",
                "20",
                "-f",
                "%o %k %s\n",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kcat -C p{p}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout == want,
            "kcat -C p{p}: {} bytes, want {} ({})",
            out.stdout.len(),
            want.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    eprintln!("wall time {:?}", t0.elapsed());
}
