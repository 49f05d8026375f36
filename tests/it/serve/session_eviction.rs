//! The serve listener's fetch session cache under pressure (`max_fetch_sessions = 2`): with
//! two consumer sessions held (20 and 5 partitions), a third consumer's full fetch is
//! answered in full but sessionless; a follower's (replica id ≥ 0) evicts the smaller
//! consumer session at once; the evicted client's next incremental fetch gets
//! FETCH_SESSION_ID_NOT_FOUND and it recovers with full fetches, reading every record. Two
//! confluent-kafka consumers (librdkafka never opens sessions: it fetches sessionless)
//! read the listener meanwhile and get every record without an error. Everything served is
//! the segments' bytes; the daemon logs no WARN or ERROR.

use crate::support;
use crate::support::fetch_session::{self, Reader};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::uuid::Uuid;
use std::time::{Duration, Instant};

const TOPIC: &str = "crowded";
const PARTITIONS: i32 = 20;

#[test]
fn a_full_cache_evicts_per_kafkas_policy_and_evicted_clients_recover() {
    let t0 = Instant::now();
    let leader = fetch_session::leader_of(TOPIC, PARTITIONS, 30, 3);
    let (_dir, data, addr, mut d) =
        // The client fetching as a follower (replica id 1) is one the config trusts.
        fetch_session::serving(
            &leader,
            TOPIC,
            |c| {
                c.set("serve.max_fetch_sessions", 2)
                    .set("serve.follower_addresses", vec!["127.0.0.1"])
            },
        );
    let id = Uuid(leader.topic_id());
    let v = 12;
    let req = |parts: &[(i32, i64)], session: i32, epoch: i32, replica: i32| {
        fetch_session::request(TOPIC, id, parts, &[], session, epoch, replica, 100)
    };
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let five: Vec<i32> = (0..5).collect();
    let mut a = fetch_session::connect(&addr);
    let mut b = fetch_session::connect(&addr);
    let mut other = fetch_session::connect(&addr);
    fetch_session::wait_for_high_watermarks(&mut a, &leader, TOPIC, &all);

    // Two consumer sessions fill the cache.
    let (mut ra, mut rb) = (Reader::default(), Reader::default());
    let open_a = fetch_session::send(&mut a, v, &req(&ra.at(&all), 0, 0, -1));
    let session_a = open_a.session_id;
    let mut moved_a = ra.take(&open_a);
    let open_b = fetch_session::send(&mut b, v, &req(&rb.at(&five), 0, 0, -1));
    let session_b = open_b.session_id;
    rb.take(&open_b);
    assert!(session_a > 0 && session_b > 0 && session_a != session_b);

    // A third consumer: nothing stale, no session old enough: a full answer, sessionless.
    let mut rd = Reader::default();
    let d_full = fetch_session::send(&mut other, v, &req(&rd.at(&[7, 8, 9]), 0, 0, -1));
    assert_eq!((d_full.error, d_full.session_id), (ErrorCode::NONE, 0));
    assert_eq!(rd.take(&d_full), [7, 8, 9]);

    // A follower's session is worth more than any consumer's: it evicts the smaller (B).
    let c_open = fetch_session::send(&mut other, v, &req(&[(10, 0)], 0, 0, 1));
    let session_c = c_open.session_id;
    assert!(session_c > 0 && session_c != session_a && session_c != session_b);
    let evicted = fetch_session::send(&mut b, v, &req(&[], session_b, 1, -1));
    assert_eq!(
        (evicted.error, evicted.answers.len()),
        (ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0)
    );
    // A's session goes on (nothing new: no partition answered).
    let r = fetch_session::send(&mut a, v, &req(&ra.at(&moved_a), session_a, 1, -1));
    assert_eq!((r.error, r.session_id), (ErrorCode::NONE, session_a));
    assert!(r.answers.is_empty(), "{:?}", r.partitions());
    let mut epoch_a = 2;
    let r = fetch_session::send(&mut other, v, &req(&[], session_c, 1, 1));
    assert_eq!((r.error, r.session_id), (ErrorCode::NONE, session_c));

    // While two confluent-kafka consumers read partitions 1 and 2 from the listener, more
    // is appended; A follows it incrementally and B recovers with full fetches (each one
    // asking for a session again, answered sessionless), reading to the end.
    for p in 0..PARTITIONS {
        leader.append(p, 12, 4);
    }
    std::thread::scope(|s| {
        let readers: Vec<_> = [1, 2]
            .into_iter()
            .map(|p| {
                let addr = addr.clone();
                s.spawn(move || support::consume_all(&addr, TOPIC, p, "read_uncommitted"))
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        moved_a = all.clone();
        while all.iter().any(|p| ra.offsets[p] < leader.log_end(*p))
            || five.iter().any(|p| rb.offsets[p] < leader.log_end(*p))
        {
            assert!(Instant::now() < deadline, "no catch-up");
            let r = fetch_session::send(&mut a, v, &req(&ra.at(&moved_a), session_a, epoch_a, -1));
            assert_eq!((r.error, r.session_id), (ErrorCode::NONE, session_a));
            epoch_a += 1;
            moved_a = ra.take(&r);
            let r = fetch_session::send(&mut b, v, &req(&rb.at(&five), 0, 0, -1));
            assert_eq!((r.error, r.session_id), (ErrorCode::NONE, 0));
            assert_eq!(r.partitions(), five, "a full answer names every partition");
            rb.take(&r);
        }
        for (p, h) in [1, 2].into_iter().zip(readers) {
            let records = h.join().expect("consumer thread");
            assert_eq!(
                support::offsets_of(&records),
                (0..records.len() as i64).collect::<Vec<_>>(),
                "p{p}: confluent-kafka read a gap"
            );
            assert!(records.len() >= 30, "p{p}: {} records", records.len());
            eprintln!("confluent-kafka read {} records of p{p}", records.len());
        }
    });

    for (reader, parts) in [(&ra, &all), (&rb, &five)] {
        for &p in parts {
            let local = support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p));
            assert!(
                reader.bytes[&p] == local,
                "p{p}: served bytes differ from the segments"
            );
        }
    }
    drop((a, b, other));
    fetch_session::stop_calmly(&mut d);
    eprintln!("wall time {:?}", t0.elapsed());
}
