//! Incremental fetch sessions (KIP-227) on the serve listener, at the protocol level: a
//! daemon follows the in-process test leader (20 partitions) with `[serve]` set, and the
//! project's own client opens a session on all 20. Incremental fetches answer only the
//! partitions with new data (appended to the leader while the session is served: the
//! long-poll is woken by the follower's append), a forgotten partition is never answered
//! again, a wrong epoch is INVALID_FETCH_SESSION_EPOCH without harm to the session, an
//! unknown id FETCH_SESSION_ID_NOT_FOUND, epoch -1 closes the session with a sessionless full
//! answer, and a v13 session fetched at v12 is FETCH_SESSION_TOPIC_ID_ERROR. Every record
//! the responses carry, put end to end, is the local segment bytes.

use crate::support;
use crate::support::fetch_session::{self, Reader};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::uuid::Uuid;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const TOPIC: &str = "sessions";
const PARTITIONS: i32 = 20;

#[test]
fn incremental_fetches_answer_only_what_changed_and_session_errors_are_kafkas() {
    let t0 = Instant::now();
    let leader = fetch_session::leader_of(TOPIC, PARTITIONS, 20, 4);
    let (_dir, data, addr, mut d) =
        fetch_session::serving(&leader, TOPIC, |c| c.set("serve.max_fetch_sessions", 4));
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let id = Uuid(leader.topic_id());
    let req = |parts: &[(i32, i64)], forgotten: &[i32], session: i32, epoch: i32, wait: i32| {
        fetch_session::request(TOPIC, id, parts, forgotten, session, epoch, -1, wait)
    };
    let mut conn = fetch_session::connect(&addr);
    let v = 12;
    fetch_session::wait_for_high_watermarks(&mut conn, &leader, TOPIC, &all);

    // A full fetch at epoch 0 opens a session and answers all 20.
    let mut reader = Reader::default();
    let open = fetch_session::send(&mut conn, v, &req(&reader.at(&all), &[], 0, 0, 100));
    let session = open.session_id;
    assert!(session > 0, "no session opened");
    assert_eq!(open.partitions(), all);
    let mut moved = reader.take(&open);
    assert_eq!(moved, all, "every partition had records");

    // Epoch 1 names the 20 new fetch offsets; nothing is new, so it waits out max_wait and
    // answers no partition.
    let mut epoch = 1;
    let started = Instant::now();
    let quiet = fetch_session::send(
        &mut conn,
        v,
        &req(&reader.at(&moved), &[], session, epoch, 300),
    );
    assert_eq!((quiet.error, quiet.session_id), (ErrorCode::NONE, session));
    assert!(quiet.answers.is_empty(), "{:?}", quiet.partitions());
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "it did not wait"
    );
    epoch += 1;

    // Appends to partitions 3 and 7 while a session fetch waits: it is woken, and the
    // answers carry those two only, until both are read to the leader's end.
    let appended = [3, 7];
    let want: BTreeMap<i32, i64> = appended
        .iter()
        .map(|&p| (p, leader.log_end(p) + 9))
        .collect();
    let started = Instant::now();
    let mut first = None;
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            for p in appended {
                leader.append(p, 9, 3);
            }
        });
        moved = Vec::new();
        while want.iter().any(|(p, end)| reader.offsets[p] < *end) {
            let r = fetch_session::send(
                &mut conn,
                v,
                &req(&reader.at(&moved), &[], session, epoch, 5000),
            );
            epoch += 1;
            first.get_or_insert(started.elapsed());
            for p in r.partitions() {
                assert!(appended.contains(&p), "p{p} answered with nothing new");
            }
            moved = reader.take(&r);
            assert!(started.elapsed() < Duration::from_secs(30), "no progress");
        }
    });
    assert!(
        first.unwrap() < Duration::from_secs(4),
        "woken late: {first:?}"
    );

    // Partition 5 is forgotten: data appended to it is never answered; 9's is.
    let r = fetch_session::send(
        &mut conn,
        v,
        &req(&reader.at(&moved), &[5], session, epoch, 0),
    );
    epoch += 1;
    assert!(r.answers.is_empty(), "{:?}", r.partitions());
    leader.append(5, 8, 4);
    leader.append(9, 8, 4);
    moved = Vec::new();
    while reader.offsets[&9] < leader.log_end(9) {
        let r = fetch_session::send(
            &mut conn,
            v,
            &req(&reader.at(&moved), &[], session, epoch, 3000),
        );
        epoch += 1;
        for p in r.partitions() {
            assert_eq!(p, 9, "only p9 has new data in the session");
        }
        moved = reader.take(&r);
    }
    support::wait_until(Duration::from_secs(10), "p5 replicated", || {
        support::log_end(&data, TOPIC, 5) == leader.log_end(5)
    });
    let r = fetch_session::send(
        &mut conn,
        v,
        &req(&reader.at(&moved), &[], session, epoch, 300),
    );
    epoch += 1;
    assert!(r.answers.is_empty(), "{:?}", r.partitions());

    // A wrong epoch: 71, and the session goes on at its own.
    for wrong in [epoch + 5, epoch - 1] {
        let r = fetch_session::send(&mut conn, v, &req(&[], &[], session, wrong, 0));
        assert_eq!(
            (r.error, r.session_id, r.answers.len()),
            (ErrorCode::INVALID_FETCH_SESSION_EPOCH, 0, 0)
        );
    }
    let r = fetch_session::send(&mut conn, v, &req(&[], &[], session, epoch, 0));
    assert_eq!((r.error, r.session_id), (ErrorCode::NONE, session));
    epoch += 1;
    // An unknown id: 70.
    let other = if session == i32::MAX - 1 {
        1
    } else {
        session + 1
    };
    let r = fetch_session::send(&mut conn, v, &req(&[], &[], other, 1, 0));
    assert_eq!(
        (r.error, r.answers.len()),
        (ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0)
    );

    // Epoch -1 with the id closes the session: a sessionless full answer, all 20 (5 too,
    // from where the session left it), and the id is gone.
    let closing = fetch_session::send(&mut conn, v, &req(&reader.at(&all), &[], session, -1, 0));
    assert_eq!((closing.error, closing.session_id), (ErrorCode::NONE, 0));
    assert_eq!(closing.partitions(), all);
    reader.take(&closing);
    loop {
        let behind: Vec<i32> = all
            .iter()
            .copied()
            .filter(|p| reader.offsets[p] < leader.log_end(*p))
            .collect();
        if behind.is_empty() {
            break;
        }
        reader.take(&fetch_session::send(
            &mut conn,
            v,
            &req(&reader.at(&behind), &[], 0, -1, 500),
        ));
    }
    let r = fetch_session::send(&mut conn, v, &req(&[], &[], session, epoch, 0));
    assert_eq!(r.error, ErrorCode::FETCH_SESSION_ID_NOT_FOUND);

    // Every record served, end to end, is the segments' bytes.
    for p in all.iter().copied() {
        assert_eq!(reader.offsets[&p], leader.log_end(p), "p{p}");
        let local = support::local_log_bytes(&data, &TopicPartition::new(TOPIC, p));
        assert!(
            reader.bytes[&p] == local,
            "p{p}: served bytes differ from the segments"
        );
    }

    // A session opened at v13 (topics by id) and fetched at v12: 106; at v13 it goes on.
    let parts = reader.at(&[0, 1]);
    let open = fetch_session::send(&mut conn, 13, &req(&parts, &[], 0, 0, 0));
    assert!(open.session_id > 0);
    assert_eq!(open.partitions(), [0, 1]);
    let r = fetch_session::send(&mut conn, 12, &req(&[], &[], open.session_id, 1, 0));
    assert_eq!(r.error, ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR);
    let r = fetch_session::send(&mut conn, 13, &req(&[], &[], open.session_id, 1, 0));
    assert_eq!((r.error, r.answers.len()), (ErrorCode::NONE, 0));

    drop(conn);
    fetch_session::stop_calmly(&mut d);
    eprintln!("wall time {:?}", t0.elapsed());
}
