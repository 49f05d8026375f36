//! Acceptance against Tansu: every codec, byte-identical segments, indexes at batch starts,
//! checkpoints within the logs, several segments; SIGTERM, produce more, restart, continue.

use crate::support;

#[test]
fn follows_tansu_byte_for_byte_across_a_restart() {
    let mut leader = support::Leader::start("tansu", 1);
    leader.create_topic("orders", 2);
    support::follow_and_restart(&mut leader, "orders", 2, 1000);
}
