//! The loop against a scripted leader and an in-memory replica: no sockets.
use super::*;
use crate::fetcher::leader_endpoint::Identity;
use crate::fetcher::mock_leader::MockLeader;
use crate::fetcher::partition_map::FetchStatus;
use crate::log::AppendError;
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::FetchPartitionResponse;
use crate::record::verified::Followed;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A replica that keeps appended bytes in memory and validates like the real one.
#[derive(Default)]
struct MemReplica {
    /// The next append fails after writing its first batch (a roll that failed midway).
    fail_midway: bool,
    bytes: Vec<u8>,
    start: i64,
    end: i64,
    truncations: Vec<(&'static str, i64)>,
    identity: Identity,
    /// Partitions marked failed, and why.
    failed: Vec<(TopicPartition, String)>,
    /// How many times a request looked up a partition's log start.
    looked_up: std::sync::atomic::AtomicUsize,
    /// What `position_moves` answers.
    moves: u64,
}

impl ReplicaOps for MemReplica {
    type Validated<'a> = Followed<'a>;
    fn validate<'a>(
        &self,
        tp: &TopicPartition,
        fetch_offset: i64,
        data: &FetchPartitionResponse<'a>,
    ) -> Result<Followed<'a>, AppendError> {
        let data_end = (!self.bytes.is_empty()).then_some(self.end);
        crate::fetcher::replica_fetcher::validate(tp, fetch_offset, data_end, data)
    }
    fn append<'a>(
        &mut self,
        _: &TopicPartition,
        _: i64,
        v: Followed<'a>,
        _: &FetchPartitionResponse<'a>,
    ) -> Result<i64, AppendError> {
        let (bytes, headers) = (v.batches.bytes(), v.batches.headers());
        if self.fail_midway {
            self.fail_midway = false;
            let first = headers[0];
            self.bytes.extend_from_slice(&bytes[..first.size_in_bytes]);
            self.end = first.last_offset + 1;
            return Err(AppendError::Storage(anyhow::anyhow!(
                "roll failed after the first batch"
            )));
        }
        self.bytes.extend_from_slice(bytes);
        if let Some(h) = headers.last() {
            self.end = h.last_offset + 1;
        }
        Ok(self.end)
    }
    fn log_start_offset(&self, _: &TopicPartition) -> Option<i64> {
        self.looked_up.fetch_add(1, Ordering::Relaxed);
        Some(self.start)
    }
    fn position_moves(&self) -> u64 {
        self.moves
    }
    fn mark_failed(&mut self, tp: &TopicPartition, reason: &str) {
        self.failed.push((tp.clone(), reason.to_string()));
    }
    fn log_end_offset(&self, _: &TopicPartition) -> Option<i64> {
        Some(self.end)
    }
    fn latest_epoch(&self, _: &TopicPartition) -> Option<i32> {
        None
    }
    fn end_offset_for_epoch(&self, _: &TopicPartition, _: i32) -> Option<(i32, i64)> {
        None
    }
    fn truncate(&mut self, _: &TopicPartition, offset: i64, _: &str) -> Result<()> {
        self.truncations.push(("truncate", offset));
        self.end = self.end.min(offset);
        Ok(())
    }
    fn identity(&self, _: &TopicPartition) -> Identity {
        self.identity.clone()
    }
    fn skip_to(&mut self, _: &TopicPartition, offset: i64) -> Result<()> {
        self.truncations.push(("skip", offset));
        self.end = self.end.max(offset);
        Ok(())
    }
}

fn fetcher(
    leader: MockLeader,
    replica: MemReplica,
    backoff_ms: u64,
) -> (
    AbstractFetcher<MockLeader, MemReplica>,
    Arc<FetcherShared>,
    std::sync::mpsc::Receiver<FetcherEvent>,
) {
    let shared = Arc::new(FetcherShared::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let params = FetchParams {
        max_wait_ms: 10,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partition_max_bytes: 1 << 20,
        isolation_level: 0,
        backoff: Duration::from_millis(backoff_ms),
        backoff_max: Duration::from_millis(backoff_ms * 10),
    };
    (
        AbstractFetcher::new(
            "test-fetcher".into(),
            shared.clone(),
            leader,
            replica,
            params,
            tx,
            crate::live::live(),
        ),
        shared,
        rx,
    )
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn leader_bytes(l: &MockLeader) -> Vec<u8> {
    l.log.iter().flat_map(|(_, _, b)| b.clone()).collect()
}

#[test]
fn rounds_advance_to_the_last_offset_plus_one_and_copy_bytes_verbatim() {
    let leader = MockLeader::new(10);
    let expect = leader_bytes(&leader);
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    for round in 1..=5 {
        f.do_work();
        assert_eq!(
            shared.lock()[&tp()].fetch_offset,
            round * 10,
            "two batches of 5 per round"
        );
    }
    assert_eq!(f.replica().bytes, expect);
}

#[test]
fn a_corrupt_batch_is_not_written_and_the_partition_backs_off() {
    let mut leader = MockLeader::new(4);
    leader.corrupt_next = 1;
    let expect = leader_bytes(&leader);
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 30);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    f.do_work();
    {
        let map = shared.lock();
        assert_eq!(map[&tp()].fetch_offset, 0);
        assert!(
            map[&tp()].delayed_until.is_some(),
            "backoff after a CRC failure"
        );
    }
    assert!(
        f.replica().bytes.is_empty(),
        "nothing written from a corrupt response"
    );
    let requests = f.leader.requests.clone();
    for _ in 0..6 {
        f.do_work();
    }
    assert_eq!(f.replica().bytes, expect);
    // The delayed partition was not fetched again at offset 0 before its backoff ended
    // (a request pipelined before the failure was answered and its data ignored).
    let at_zero: Vec<Instant> = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, r)| r.topics[0].1[0].fetch_offset == 0)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(at_zero.len(), 2, "the first fetch and one retry");
    assert!(
        at_zero[1] - at_zero[0] >= Duration::from_millis(25),
        "retry came before the backoff"
    );
}

#[test]
fn a_healthy_round_pipelines_the_next_request_before_writing() {
    let leader = MockLeader::new(10);
    let requests = leader.requests.clone();
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    f.do_work();
    // The next request (at offset 10, after two batches of 5) left before this round ended.
    let offsets: Vec<i64> = requests
        .lock()
        .unwrap()
        .iter()
        .map(|(_, r)| r.topics[0].1[0].fetch_offset)
        .collect();
    assert_eq!(offsets, vec![0, 10]);
    assert!(f.in_flight.is_some());
    for _ in 0..4 {
        f.do_work();
    }
    assert_eq!(shared.lock()[&tp()].fetch_offset, 50);
    // Caught up: the last round brought nothing, so nothing more was pipelined.
    f.do_work();
    assert!(f.in_flight.is_none());
}

#[test]
fn partitions_a_session_leaves_out_are_noted_as_fetched_without_a_walk_every_round() {
    let mut leader = MockLeader::new(2);
    leader.session_id = 9;
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
    // A topic of its own: the live figures are the process's.
    let tp = TopicPartition::new("noted-in-session", 0);
    crate::live::live().leader_high_watermark(&tp, 0);
    let last_fetch = || {
        crate::live::live()
            .partitions()
            .get(&tp)
            .and_then(|p| p.last_fetch_ms)
    };
    shared.add_partitions([(
        tp.clone(),
        PartitionFetchState::new(0, 0, FetchStatus::Fetching),
    )]);
    for _ in 0..4 {
        f.do_work();
    }
    assert_eq!(shared.lock()[&tp].fetch_offset, 10, "caught up");
    let first = last_fetch().expect("noted at the first incremental response");
    // Within the interval, idle rounds leave it alone; once it is over, the next does.
    std::thread::sleep(Duration::from_millis(5));
    f.do_work();
    assert_eq!(last_fetch(), Some(first));
    f.session_fetched_at = Some(Instant::now() - SESSION_FETCHED_EVERY);
    f.do_work();
    assert!(
        last_fetch().is_some_and(|t| t > first),
        "{:?}",
        last_fetch()
    );
}

#[test]
fn pipelined_session_requests_advance_the_epoch_and_name_the_ahead_offsets() {
    let mut leader = MockLeader::new(10);
    leader.session_id = 9;
    let expected = leader_bytes(&leader);
    let requests = leader.requests.clone();
    let (mut f, shared, rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    for _ in 0..8 {
        f.do_work();
    }
    assert_eq!(shared.lock()[&tp()].fetch_offset, 50);
    assert_eq!(f.replica().bytes, expected, "every batch, once, in order");
    let sent: Vec<(i32, i32, Option<i64>)> = requests
        .lock()
        .unwrap()
        .iter()
        .map(|(_, r)| {
            let named = r.topics.first().map(|(_, ps)| ps[0].fetch_offset);
            (r.session_id, r.session_epoch, named)
        })
        .collect();
    // Full at epoch 0; then each request, pipelined before the previous response was
    // written, names the offset that response leads to; caught up, the requests name
    // nothing and the absent partition is not handed back.
    assert_eq!(
        &sent[..6],
        &[
            (0, 0, Some(0)),
            (9, 1, Some(10)),
            (9, 2, Some(20)),
            (9, 3, Some(30)),
            (9, 4, Some(40)),
            (9, 5, Some(50)),
        ]
    );
    // The pipelined request took the last batch's epoch (0); this mock replica reports
    // no epoch, so the next request names the partition once more, with -1.
    assert_eq!(sent[6], (9, 6, Some(50)));
    assert!(sent.len() > 7);
    assert!(
        sent[7..]
            .iter()
            .enumerate()
            .all(|(i, s)| *s == (9, 7 + i as i32, None)),
        "{sent:?}"
    );
    assert!(rx.try_recv().is_err(), "nothing handed back");
    assert!(shared.lock().contains_key(&tp()));
}

#[test]
fn a_large_response_is_appended_while_the_next_one_is_received_on_another_thread() {
    // Batches of 5 × 120 KB: two a response, 1.2 MB, past the overlap threshold.
    let leader = MockLeader::with_values(8, 120_000);
    let expect = leader_bytes(&leader);
    let receivers = leader.receivers.clone();
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    for round in 1..=4 {
        f.do_work();
        assert_eq!(shared.lock()[&tp()].fetch_offset, round * 10);
    }
    assert_eq!(f.replica().bytes, expect, "byte for byte, in order");
    let me = std::thread::current().id();
    let on = receivers.lock().unwrap().clone();
    // The first response is received by the loop itself; each one pipelined behind a
    // large response (the fifth, at offset 40, behind the last), on a second thread
    // while that one was appended.
    assert_eq!(on.len(), 5, "{on:?}");
    assert_eq!(on[0], me);
    assert!(on[1..].iter().all(|t| *t != me), "{on:?}");
}

#[test]
fn a_failed_receive_behind_an_append_backs_off_and_resumes_where_the_log_ends() {
    let mut leader = MockLeader::with_values(8, 120_000);
    let expect = leader_bytes(&leader);
    // The first response arrives; the one received behind its append fails.
    leader.fail_next = 0;
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    f.do_work();
    assert_eq!(shared.lock()[&tp()].fetch_offset, 10);
    assert!(f.prefetched.is_some(), "received behind the append");
    f.leader.fail_next = 1;
    // The prefetched response was already received: the failure lands on the next one.
    f.do_work();
    f.do_work();
    {
        let map = shared.lock();
        assert!(map[&tp()].delayed_until.is_some(), "backing off");
    }
    assert!(f.in_flight.is_none() && f.prefetched.is_none());
    for _ in 0..20 {
        f.do_work();
        if shared.lock()[&tp()].fetch_offset == 40 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(f.replica().bytes, expect);
}

#[test]
fn a_storage_error_midway_fails_the_partition_which_resumes_at_the_local_log_end() {
    let leader = MockLeader::new(6);
    let expect = leader_bytes(&leader);
    let replica = MemReplica {
        fail_midway: true,
        ..Default::default()
    };
    let (mut f, shared, _rx) = fetcher(leader, replica, 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    f.do_work();
    let failed = &f.replica().failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, tp());
    assert!(failed[0].1.contains("roll failed"), "{}", failed[0].1);
    assert!(
        !shared.lock().contains_key(&tp()),
        "a failed partition leaves the fetcher"
    );
    // Once its storage is sound the manager adds it back at the local log end (what was
    // written before the failure stays).
    let end = f.replica().log_end_offset(&tp()).unwrap();
    assert_eq!(end, 5, "the first batch was written before the roll failed");
    shared.add_partitions([(
        tp(),
        PartitionFetchState::new(end, 0, FetchStatus::Fetching),
    )]);
    for _ in 0..6 {
        f.do_work();
    }
    assert_eq!(f.replica().bytes, expect, "no gap, no duplicate");
}

/// Named partitions and forgotten ones of a request, as "topic-partition" strings.
fn named_and_forgotten(req: &FetchRequest) -> (Vec<i32>, Vec<i32>) {
    let named = partitions_in(&req.topics, |p| p.partition)
        .map(|tp| tp.partition)
        .collect();
    let forgotten = req
        .forgotten
        .iter()
        .flat_map(|(_, ps)| ps.clone())
        .collect();
    (named, forgotten)
}

#[test]
fn within_a_session_a_request_looks_only_at_partitions_that_changed() {
    let (mut f, shared, _rx) = fetcher(MockLeader::new(1), MemReplica::default(), 10);
    let n = 500;
    shared.add_partitions((0..n).map(|p| {
        (
            TopicPartition::new("t", p),
            PartitionFetchState::new(0, 0, FetchStatus::Fetching),
        )
    }));
    let looked = |f: &AbstractFetcher<MockLeader, MemReplica>| {
        f.replica().looked_up.swap(0, Ordering::Relaxed)
    };
    let none = BTreeMap::new();
    let full = f.request_for(&mut shared.lock(), &none).unwrap();
    assert!(is_full(&full));
    assert_eq!(named_and_forgotten(&full).0.len(), n as usize);
    assert_eq!(looked(&f), n as usize);
    f.session
        .handle_response(ErrorCode::NONE, 77, Instant::now());

    // Nothing changed: an incremental request naming nothing, and no partition looked at.
    for _ in 0..3 {
        let idle = f.request_for(&mut shared.lock(), &none).unwrap();
        assert!(!is_full(&idle));
        assert_eq!(named_and_forgotten(&idle), (vec![], vec![]));
        assert_eq!(looked(&f), 0, "an idle round looks at no partition");
    }

    // One offset moves, one partition leaves: only those two are looked at or sent.
    shared
        .lock()
        .get_mut(&TopicPartition::new("t", 5))
        .unwrap()
        .fetch_offset = 3;
    shared.remove_partition(&TopicPartition::new("t", 9));
    let req = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![5], vec![9]));
    assert_eq!(looked(&f), 1, "the removed one needs no look-up");

    // A pipelined request names the offsets the response ahead of it will leave.
    let ahead = BTreeMap::from([(TopicPartition::new("t", 6), (40, None))]);
    let req = f.request_for(&mut shared.lock(), &ahead).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![6], vec![]));
    assert_eq!(req.topics[0].1[0].fetch_offset, 40);
    // Once appended the map agrees with the session: nothing to name.
    shared
        .lock()
        .get_mut(&TopicPartition::new("t", 6))
        .unwrap()
        .fetch_offset = 40;
    let req = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![], vec![]));

    // A backoff forgets the partition; once it ends, the partition is named again.
    delay(
        &mut shared.lock(),
        &TopicPartition::new("t", 7),
        Duration::from_millis(30),
    );
    let req = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![], vec![7]));
    let req = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![], vec![]));
    std::thread::sleep(Duration::from_millis(40));
    let req = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![7], vec![]));
    looked(&f);

    // A log start moved behind the fetcher's back (retention): every partition is
    // looked at once, and those whose parameters did not change are still not sent.
    f.replica.moves += 1;
    let req = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(named_and_forgotten(&req), (vec![], vec![]));
    assert_eq!(looked(&f), n as usize - 1);
    let _ = f.request_for(&mut shared.lock(), &none).unwrap();
    assert_eq!(looked(&f), 0);
}

#[test]
fn partitions_that_brought_data_most_recently_are_asked_last() {
    let (mut f, shared, _rx) = fetcher(MockLeader::new(1), MemReplica::default(), 10);
    let mut a = PartitionFetchState::new(0, 0, FetchStatus::Fetching);
    a.last_data_round = 7;
    let b = PartitionFetchState::new(0, 0, FetchStatus::Fetching);
    let mut c = PartitionFetchState::new(0, 0, FetchStatus::Fetching);
    c.last_data_round = 3;
    shared.add_partitions([
        (TopicPartition::new("t", 0), a),
        (TopicPartition::new("t", 1), b),
        (TopicPartition::new("u", 0), c),
    ]);
    let req = f.request_for(&mut shared.lock(), &BTreeMap::new()).unwrap();
    let order: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .map(|(t, ps)| (t.clone(), ps.iter().map(|p| p.partition).collect()))
        .collect();
    assert_eq!(
        order,
        vec![("t".to_string(), vec![1, 0]), ("u".to_string(), vec![0])]
    );
}

#[test]
fn a_failed_fetch_delays_every_partition_in_it() {
    let mut leader = MockLeader::new(2);
    leader.fail_next = 1;
    let (mut f, shared, _rx) = fetcher(leader, MemReplica::default(), 50);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    f.do_work();
    assert!(shared.lock()[&tp()].delayed_until.is_some());
    assert!(
        f.build_fetch_request().is_none(),
        "nothing ready during backoff"
    );
    std::thread::sleep(Duration::from_millis(60));
    f.do_work();
    assert_eq!(shared.lock()[&tp()].fetch_offset, 10);
}

#[test]
fn not_leader_hands_the_partition_back_to_the_manager() {
    let mut leader = MockLeader::new(2);
    leader.errors.push_back(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    let (mut f, shared, rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    f.do_work();
    assert_eq!(shared.partition_count(), 0);
    match rx.try_recv().unwrap() {
        FetcherEvent::NeedsLeader { tp: t, reason, .. } => {
            assert_eq!(t, tp());
            assert!(reason.contains("NOT_LEADER_OR_FOLLOWER"), "{reason}");
        }
    }
}

#[test]
fn offset_out_of_range_below_the_leader_start_keeps_local_data_and_skips_to_it() {
    let mut leader = MockLeader::new(6);
    leader.start = 15;
    leader.log.retain(|(_, last, _)| *last >= 15);
    let (mut f, shared, _rx) = fetcher(
        leader,
        MemReplica {
            start: 0,
            end: 5,
            ..Default::default()
        },
        10,
    );
    shared.add_partitions([(tp(), PartitionFetchState::new(5, 0, FetchStatus::Fetching))]);
    f.replica.bytes = b"held".to_vec();
    f.do_work();
    assert_eq!(f.replica().truncations, vec![("skip", 15)]);
    assert_eq!(f.replica().bytes, b"held", "nothing local is deleted");
    assert_eq!(shared.lock()[&tp()].fetch_offset, 15);
    f.do_work();
    assert_eq!(shared.lock()[&tp()].fetch_offset, 25);
}

#[test]
fn offset_out_of_range_above_the_leader_end_truncates_to_it() {
    let leader = MockLeader::new(2); // hw 10
    let (mut f, shared, _rx) = fetcher(
        leader,
        MemReplica {
            start: 0,
            end: 14,
            ..Default::default()
        },
        10,
    );
    shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
    f.do_work();
    assert_eq!(f.replica().truncations, vec![("truncate", 10)]);
    assert_eq!(shared.lock()[&tp()].fetch_offset, 10);
}

#[test]
fn a_leader_with_another_topic_id_never_truncates_the_log() {
    let mut leader = MockLeader::new(2); // hw 10
    leader.identity.topic_id = Some(crate::protocol::uuid::Uuid([2; 16]));
    let (mut f, shared, rx) = fetcher(
        leader,
        MemReplica {
            start: 0,
            end: 14,
            identity: Identity {
                cluster_id: None,
                topic_id: Some(crate::protocol::uuid::Uuid([1; 16])),
            },
            ..Default::default()
        },
        10,
    );
    shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
    f.do_work();
    assert!(f.replica().truncations.is_empty(), "nothing truncated");
    assert_eq!(f.replica().end, 14);
    assert_eq!(shared.partition_count(), 0, "handed back to the manager");
    match rx.try_recv().unwrap() {
        FetcherEvent::NeedsLeader { reason, .. } => {
            assert!(reason.contains("topic id"), "{reason}")
        }
    }
}

#[test]
fn a_high_watermark_below_the_log_end_makes_the_fetcher_ask_who_the_leader_is() {
    // A re-created topic whose leader answers a fetch past its end with no error.
    let mut leader = MockLeader::new(2);
    leader.log.clear();
    leader.reported_hw = Some(3);
    leader.identity.topic_id = Some(crate::protocol::uuid::Uuid([2; 16]));
    let local = Identity {
        cluster_id: None,
        topic_id: Some(crate::protocol::uuid::Uuid([1; 16])),
    };
    let (mut f, shared, rx) = fetcher(
        leader,
        MemReplica {
            end: 14,
            identity: local.clone(),
            ..Default::default()
        },
        10,
    );
    shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
    f.do_work();
    assert_eq!(shared.partition_count(), 0, "handed back for the archive");
    assert!(matches!(
        rx.try_recv(),
        Ok(FetcherEvent::NeedsLeader { .. })
    ));
    // The same topic with a lagging HW only backs off.
    f.leader.identity.topic_id = local.topic_id;
    shared.add_partitions([(tp(), PartitionFetchState::new(14, 0, FetchStatus::Fetching))]);
    f.do_work();
    let map = shared.lock();
    assert!(map[&tp()].delayed_until.is_some());
    assert_eq!(map[&tp()].fetch_offset, 14);
}

#[test]
fn a_connection_to_another_cluster_hands_every_partition_back_at_once() {
    let mut leader = MockLeader::new(2);
    leader.wrong_cluster = true;
    let (mut f, shared, rx) = fetcher(leader, MemReplica::default(), 10);
    shared.add_partitions([
        (
            TopicPartition::new("t", 0),
            PartitionFetchState::new(0, 0, FetchStatus::Fetching),
        ),
        (
            TopicPartition::new("t", 1),
            PartitionFetchState::new(0, 0, FetchStatus::Fetching),
        ),
    ]);
    f.do_work();
    assert_eq!(shared.partition_count(), 0);
    let reasons: Vec<String> = rx
        .try_iter()
        .map(|FetcherEvent::NeedsLeader { reason, .. }| reason)
        .collect();
    assert_eq!(reasons.len(), 2);
    assert!(
        reasons.iter().all(|r| r.contains("cluster id b")),
        "{reasons:?}"
    );
    assert!(f.replica().bytes.is_empty());
}

#[test]
fn an_idle_fetcher_sleeps_until_a_partition_is_added() {
    let (mut f, shared, _rx) = fetcher(MockLeader::new(2), MemReplica::default(), 10);
    let s2 = shared.clone();
    let adder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        s2.add_partitions([(tp(), PartitionFetchState::new(0, 0, FetchStatus::Fetching))]);
    });
    let started = Instant::now();
    assert!(
        f.build_fetch_request().is_none(),
        "first call waits, then returns"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "it slept until woken"
    );
    adder.join().unwrap();
    assert!(f.build_fetch_request().is_some());
}
