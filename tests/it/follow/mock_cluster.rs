//! Acceptance against librdkafka's mock cluster: 3 brokers, partitions led by different
//! brokers, every codec; the same byte-for-byte and restart checks as for Tansu.

use crate::support;
use serde_json::json;

#[test]
fn follows_a_three_broker_mock_cluster_byte_for_byte_across_a_restart() {
    let mut leader = support::Leader::start("mock", 3);
    leader.create_topic("events", 4);
    for (p, broker) in [(0, 1), (1, 2), (2, 3), (3, 1)] {
        leader
            .ok(json!({"cmd": "set_leader", "topic": "events", "partition": p, "broker": broker}));
    }
    support::follow_and_restart(&mut leader, "events", 4, 600);
}
