//! Disaster recovery: the leader (Tansu) is gone and the replica still serves every record
//! it holds, first from the running daemon (which keeps retrying the leader), then, with
//! the daemon stopped too, from `replica-follower serve --data-dir`. A confluent-kafka
//! consumer reads from each exactly what it read from the leader.

use crate::support;
use std::process::Command;
use std::time::Duration;

const TOPIC: &str = "survivor";

#[test]
fn the_replica_serves_everything_it_holds_after_the_leader_and_the_daemon_stop() {
    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic(TOPIC, 2);
    let mut ends = [0i64; 2];
    for (p, codec) in ["zstd", "gzip"].iter().enumerate() {
        ends[p] = leader.produce(TOPIC, p as i32, 400, codec, p as u64).1 + 1;
    }
    let (_dir, data, addr, mut d) = support::serving_follower(&leader.bootstrap, TOPIC);
    let from_leader = support::caught_up_records(&leader.bootstrap, &data, TOPIC, &ends);
    // The replica's high watermark comes with the next fetch round.
    support::wait_until(Duration::from_secs(10), "the served high watermark", || {
        support::consume_all(&addr, TOPIC, 1, "read_uncommitted").len() == from_leader[1].len()
    });

    drop(leader);
    std::thread::sleep(Duration::from_millis(500));
    assert!(d.is_running(), "the daemon must outlive its leader");
    for (p, want) in from_leader.iter().enumerate() {
        let got = support::consume_all(&addr, TOPIC, p as i32, "read_uncommitted");
        assert_eq!(&got, want, "p{p} from the daemon, leader gone");
    }
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());

    let listen = format!("127.0.0.1:{}", support::free_port());
    let mut serve = support::spawn_serve(&data, &listen);
    for (p, want) in from_leader.iter().enumerate() {
        let got = support::consume_all(&listen, TOPIC, p as i32, "read_uncommitted");
        assert_eq!(&got, want, "p{p} from serve --data-dir");
    }
    let md = support::clients_py(&["metadata", "--bootstrap", &listen]);
    assert_eq!(md["topics"][TOPIC], serde_json::json!([0, 1]), "{md}");
    Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(serve.wait().unwrap().code(), Some(0));
}
