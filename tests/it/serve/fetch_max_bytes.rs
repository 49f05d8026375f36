//! `serve.fetch_max_bytes` caps a Fetch response as Kafka's broker-side `fetch.max.bytes`
//! does: a client asking for 2^31-1 bytes of a partition holding more than the ceiling gets
//! the whole batches that fit in it, at every version, and reads on from there.

use crate::support::fetch_session;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::uuid::Uuid;
use replica_follower::record::BatchIter;

const TOPIC: &str = "ceiling";
const CEILING: usize = 3000;

/// The byte length of the longest run of whole batches of `log` from byte `from` that
/// fits in `limit` (at least the first batch, KIP-74).
fn fitting(log: &[u8], from: usize, limit: usize) -> usize {
    let mut len = 0;
    for (_, _, b) in BatchIter::new(&log[from..], usize::MAX) {
        if len > 0 && len + b.len() > limit {
            break;
        }
        len += b.len();
    }
    len
}

#[test]
fn a_fetch_asking_for_everything_gets_at_most_serve_fetch_max_bytes() {
    let leader = fetch_session::leader_of(TOPIC, 1, 600, 5);
    let log = leader.log_bytes(0);
    assert!(
        log.len() > 4 * CEILING,
        "the partition holds {} bytes",
        log.len()
    );
    let (_dir, _data, addr, mut d) = fetch_session::serving(&leader, TOPIC, |c| {
        c.set("serve.fetch_max_bytes", CEILING as i64)
    });
    let mut conn = fetch_session::connect(&addr);
    fetch_session::wait_for_high_watermarks(&mut conn, &leader, TOPIC, &[0]);
    let id = Uuid(leader.topic_id());
    for version in [4, 7, 12, 13] {
        let mut read = 0;
        let mut offset = 0;
        while read < log.len() {
            let mut req = fetch_session::request(TOPIC, id, &[(0, offset)], &[], 0, -1, -1, 0);
            req.max_bytes = i32::MAX;
            req.topics[0].1[0].partition_max_bytes = i32::MAX;
            let reply = fetch_session::send(&mut conn, version, &req);
            let a = &reply.answers[0].1;
            assert_eq!(a.error, ErrorCode::NONE, "v{version} at {offset}");
            assert!(
                a.records.len() <= CEILING,
                "v{version} at {offset}: {} record bytes past the ceiling of {CEILING}",
                a.records.len()
            );
            assert_eq!(
                a.records.len(),
                fitting(&log, read, CEILING),
                "v{version} at {offset}: the whole batches that fit"
            );
            assert_eq!(a.records[..], log[read..read + a.records.len()]);
            let (last, _, _) = BatchIter::new(&a.records, usize::MAX).last().unwrap();
            offset = last.last_offset + 1;
            read += a.records.len();
        }
    }
    fetch_session::stop_calmly(&mut d);
}
