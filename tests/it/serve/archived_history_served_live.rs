//! The daemon's own listener (`[serve]`) serves an archived history made while it runs: a
//! followed topic re-created on its leader is archived to `<topic>-<p>.<old id>.archived/`,
//! and from then on a real Kafka client reads it, byte for byte, as topic
//! `<topic>.<old id>.archived`, beside the re-created topic the daemon goes on following.

use crate::support;
use crate::support::Leader;
use replica_follower::checkpoint::TopicPartition;
use serde_json::json;

const TOPIC: &str = "orders";

#[test]
fn the_daemons_listener_serves_an_archived_history_made_while_it_runs() {
    let mut leader = Leader::start("tansu", 1);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let listen = format!("127.0.0.1:{}", support::free_port());
    let mut r = support::recreate_followed_topic(&mut leader, dir.path(), &data, TOPIC, 1, |c| {
        c.set("serve.listen", listen.as_str())
    });
    let name = format!("{TOPIC}.{}.archived", r.old_id);

    let md = support::clients_py(&["metadata", "--bootstrap", &listen]);
    assert_eq!(md["topics"], json!({TOPIC: [0], name.clone(): [0]}));
    let served = support::consume_all(&listen, &name, 0, "read_uncommitted");
    assert!(
        served == r.old_records[0],
        "{name}-0: a consumer reads exactly what the old topic held ({} records, was {})",
        served.len(),
        r.old_records[0].len()
    );
    let archive = data.join(format!("{TOPIC}-0.{}.archived", r.old_id));
    let bytes: Vec<u8> = support::segment_logs(&archive)
        .into_values()
        .flat_map(|l| std::fs::read(l).unwrap())
        .collect();
    assert!(
        support::leader_bytes(&listen, &TopicPartition::new(name.clone(), 0), 0) == bytes,
        "served byte for byte"
    );
    let live = support::consume_all(&listen, TOPIC, 0, "read_uncommitted");
    assert_eq!(
        live.len() as i64,
        r.new_end,
        "the re-created topic, followed"
    );

    assert!(r.daemon.is_running(), "{}", r.daemon.log_text());
    assert_eq!(r.daemon.stop().code(), Some(0), "{}", r.daemon.log_text());
    let (ok, out) = support::verify(&data);
    assert!(ok, "{out}");
}
