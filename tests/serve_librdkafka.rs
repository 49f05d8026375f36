//! librdkafka reads the replica through the listener: a confluent-kafka consumer (the test
//! venv's librdkafka 2.16) assigned partition 0 from the beginning receives every record of a
//! stopped replica of Tansu served by `serve --data-dir`, in order, with the leader's keys and
//! values. librdkafka sends no Fetch at all to a broker whose ApiVersions lacks Produce v3
//! (its message-format-v2 feature needs both), so this is what shows a stock consumer works.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

/// Reads `count` records of `topic`-0 from `bootstrap` with confluent-kafka; prints one line
/// "offset key value" each, bytes in hex ("-" for null), as leaders.py's `consume` gives them.
const CONSUMER: &str = r#"
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "serve-librdkafka",
              "enable.auto.commit": False, "broker.address.family": "v4"})
c.assign([TopicPartition(topic, 0, 0)])
got = 0
while got < count:
    m = c.poll(20.0)
    if m is None:
        sys.exit(f"no record after {got} of {count}")
    if m.error():
        sys.exit(f"consumer error: {m.error()}")
    hexed = lambda b: "-" if b is None else b.hex()
    print(m.offset(), hexed(m.key()), hexed(m.value()))
    got += 1
c.close()
"#;

#[test]
fn a_librdkafka_consumer_reads_every_record_of_a_served_replica() {
    let mut leader = support::Leader::start("tansu", 1);
    let (_dir, data, _cfg, end) = support::stopped_replica_of(&mut leader, "rdk", 2);
    let want = leader.ok(
        serde_json::json!({"cmd": "consume", "topic": "rdk", "partition": 0,
        "from": 0, "to": end - 1}),
    );
    let listen = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    );
    let mut serve = Command::new(support::bin())
        .args([
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            &listen,
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    support::wait_until(Duration::from_secs(10), "the listener", || {
        std::net::TcpStream::connect(&listen).is_ok()
    });
    let out = Command::new(support::python())
        .args(["-c", CONSUMER, &listen, "rdk", &end.to_string()])
        .output()
        .unwrap();
    Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(serve.wait().unwrap().code(), Some(0));
    assert!(
        out.status.success(),
        "consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    let expected: Vec<String> = want["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r["offset"],
                r["key"].as_str().unwrap_or("-"),
                r["value"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(lines.len() as i64, end);
    assert_eq!(lines, expected);
}
