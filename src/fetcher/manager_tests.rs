//! The fetcher manager against a scripted cluster (as Kafka's `AbstractFetcherManagerTest`):
//! a [`MetadataSource`] whose metadata the test changes, and leaders that answer every fetch
//! with no data or with the error the test sets, recording what they were asked. The
//! manager, its fetcher threads and the logs (in a temporary data dir) are the real ones.

use super::*;
use crate::client::cluster::{OffsetAnswer, PartitionLeader};
use crate::fetcher::mock_leader::MockLeader;
use crate::protocol::error::ErrorCode;

use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// A fetch as a leader saw it: the broker, and each partition with its current leader epoch.
type SeenFetch = (i32, Vec<(TopicPartition, i32)>);

/// What the test controls and what the manager did to it.
#[derive(Default)]
struct Cluster {
    md: Mutex<ClusterMetadata>,
    /// Metadata requests fail while set.
    down: AtomicBool,
    metadata_calls: AtomicUsize,
    /// The error every fetch from a broker answers for each partition (none: no error).
    refuse: Mutex<BTreeMap<i32, ErrorCode>>,
    /// Every fetch received: (broker, [(partition, current leader epoch)]).
    fetches: Mutex<Vec<SeenFetch>>,
    list_offsets: Mutex<Vec<(i32, Vec<TopicPartition>)>>,
}

impl Cluster {
    fn new() -> Arc<Self> {
        Arc::new(Cluster::default())
    }

    /// Sets the leader (and its epoch) of `tp`; brokers are `b<id>:9092`.
    fn lead(&self, tp: &TopicPartition, broker: i32, epoch: i32) {
        let mut md = self.md.lock().unwrap();
        md.brokers.insert(broker, format!("b{broker}:9092"));
        md.topics
            .entry(tp.topic.clone())
            .or_insert((ErrorCode::NONE, BTreeMap::new()))
            .1
            .insert(
                tp.partition,
                PartitionLeader {
                    leader_id: broker,
                    leader_epoch: epoch,
                    error: ErrorCode::NONE,
                },
            );
    }

    fn refuse(&self, broker: i32, code: ErrorCode) {
        self.refuse.lock().unwrap().insert(broker, code);
    }

    /// How many fetches so far named `tp`, from `broker`.
    fn fetch_count(&self, broker: i32, tp: &TopicPartition) -> usize {
        self.fetches
            .lock()
            .unwrap()
            .iter()
            .filter(|(b, ps)| *b == broker && ps.iter().any(|(t, _)| t == tp))
            .count()
    }

    /// Whether a fetch from `broker` named `tp` under leader epoch `epoch`.
    fn fetched(&self, broker: i32, tp: &TopicPartition, epoch: i32) -> bool {
        self.fetches
            .lock()
            .unwrap()
            .iter()
            .any(|(b, ps)| *b == broker && ps.contains(&(tp.clone(), epoch)))
    }

    fn fetches_from(&self, broker: i32) -> usize {
        let fetches = self.fetches.lock().unwrap();
        fetches.iter().filter(|(b, _)| *b == broker).count()
    }

    fn total_fetches(&self) -> usize {
        self.fetches.lock().unwrap().len()
    }
}

struct Source(Arc<Cluster>);

impl MetadataSource for Source {
    fn metadata(&mut self, _topics: &[String]) -> Result<ClusterMetadata, MetadataError> {
        self.0.metadata_calls.fetch_add(1, Ordering::SeqCst);
        if self.0.down.load(Ordering::SeqCst) {
            let e = anyhow::anyhow!("no broker answered a Metadata request: connection refused");
            return Err(e.into());
        }
        Ok(self.0.md.lock().unwrap().clone())
    }

    fn list_offsets(
        &mut self,
        broker: i32,
        _addr: &str,
        _isolation_level: i8,
        asks: &[(TopicPartition, i32, i64)],
    ) -> Result<OffsetAnswers> {
        self.0
            .list_offsets
            .lock()
            .unwrap()
            .push((broker, asks.iter().map(|(tp, _, _)| tp.clone()).collect()));
        Ok(asks
            .iter()
            .map(|(tp, epoch, _)| {
                let a = OffsetAnswer {
                    offset: 0,
                    timestamp: -1,
                    leader_epoch: *epoch,
                };
                (tp.clone(), Ok(a))
            })
            .collect())
    }
}

struct Leaders(Arc<Cluster>);

impl EndpointFactory for Leaders {
    type EndPoint = MockLeader;
    /// A leader with an empty log that answers each partition with the error the test set
    /// for its broker, after a short wait (its max wait), recording what it was asked.
    fn endpoint(&mut self, broker: i32, _addr: &str, _: &Arc<FetcherShared>) -> MockLeader {
        let refusing = self.0.clone();
        let seeing = self.0.clone();
        let mut leader = MockLeader::new(0);
        leader.name = format!("broker {broker} (scripted)");
        leader.reported_hw = Some(0);
        leader.every_partition = true;
        leader.latency = Duration::from_millis(10);
        leader.standing_error = Some(Box::new(move || {
            refusing.refuse.lock().unwrap().get(&broker).copied()
        }));
        leader.on_send = Some(Box::new(move |req| {
            let named = req
                .topics
                .iter()
                .flat_map(|(t, ps)| {
                    ps.iter().map(move |p| {
                        (
                            TopicPartition::new(t.clone(), p.partition),
                            p.current_leader_epoch,
                        )
                    })
                })
                .collect();
            seeing.fetches.lock().unwrap().push((broker, named));
        }));
        leader
    }
}

/// A running manager over a scripted cluster.
struct Running {
    stop: Arc<StopHandle>,
    events: std::sync::mpsc::Sender<ManagerEvent>,
    thread: Option<JoinHandle<()>>,
    logs: Arc<LogManager>,
    dir: tempfile::TempDir,
}

impl Running {
    /// Starts a manager following `follow` (TOML `[[follow]]` tables) with a 50 ms backoff.
    fn start(cluster: Arc<Cluster>, follow: &str) -> Running {
        Running::start_with_backoff(cluster, follow, 50)
    }

    fn start_with_backoff(cluster: Arc<Cluster>, follow: &str, backoff_ms: u64) -> Running {
        let (manager, dir) = manager_with_backoff(&cluster, follow, backoff_ms);
        let logs = manager.logs.clone();
        let stop = manager.stop_handle();
        let events = manager.sender();
        let thread = std::thread::spawn(move || manager.run());
        Running {
            stop,
            events,
            thread: Some(thread),
            logs,
            dir,
        }
    }

    /// Stops the manager; returns how long `run` took to return.
    fn stop(&mut self) -> Duration {
        let t = Instant::now();
        self.stop.stop();
        if let Some(h) = self.thread.take() {
            h.join().unwrap();
        }
        t.elapsed()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A manager over `cluster` in a new data dir, not running: the test drives its rounds.
type Manager = FetcherManager<Source, Leaders>;

fn manager(cluster: &Arc<Cluster>, follow: &str) -> (Manager, tempfile::TempDir) {
    manager_with_backoff(cluster, follow, 50)
}

fn manager_with_backoff(
    cluster: &Arc<Cluster>,
    follow: &str,
    backoff_ms: u64,
) -> (Manager, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Arc::new(config_with_backoff(dir.path(), follow, backoff_ms));
    let logs = Arc::new(LogManager::open(dir.path(), cfg.log_config()).unwrap());
    let m = FetcherManager::with_seams(
        cfg,
        logs,
        Arc::new(StopHandle::default()),
        Source(cluster.clone()),
        Leaders(cluster.clone()),
        crate::live::live(),
    );
    (m, dir)
}

fn hand_back(fetcher: &str, epoch: i32) -> ManagerEvent {
    ManagerEvent::Fetcher(FetcherEvent::NeedsLeader {
        tp: tp(0),
        reason: "NOT_LEADER_OR_FOLLOWER".into(),
        fetcher: fetcher.into(),
        leader_epoch: epoch,
    })
}

fn config(dir: &std::path::Path, follow: &str) -> Config {
    config_with_backoff(dir, follow, 50)
}

fn config_with_backoff(dir: &std::path::Path, follow: &str, backoff_ms: u64) -> Config {
    let text = format!(
        "data_dir = {:?}\nbootstrap_servers = [\"b1:9092\"]\n{follow}\n[fetch]\nbackoff_ms = {backoff_ms}\nbackoff_max_ms = {}\nmax_wait_ms = 10\n",
        dir.display().to_string(),
        backoff_ms * 8
    );
    Config::parse(&text, std::path::Path::new("test.toml")).unwrap()
}

/// Waits up to `secs` for `cond`.
fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

#[test]
fn partitions_go_to_their_leaders_fetchers_with_one_list_offsets_per_leader() {
    let c = Cluster::new();
    c.lead(&tp(0), 1, 3);
    c.lead(&tp(1), 2, 5);
    c.lead(&tp(2), 1, 3);
    let r = Running::start(c.clone(), "[[follow]]\ntopic = \"t\"\n");
    assert!(
        eventually(5, || c.fetched(1, &tp(0), 3)
            && c.fetched(1, &tp(2), 3)
            && c.fetched(2, &tp(1), 5)),
        "fetches: {:?}",
        c.fetches.lock().unwrap()
    );
    assert_eq!(
        c.fetch_count(2, &tp(0)),
        0,
        "t-0 is fetched only from its leader"
    );
    assert_eq!(c.fetch_count(1, &tp(1)), 0);
    // New partitions cost one ListOffsets per leader, and get a log each.
    let asked = c.list_offsets.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked.contains(&(1, vec![tp(0), tp(2)])), "{asked:?}");
    for p in 0..3 {
        assert!(r.logs.get(&tp(p)).is_some(), "t-{p} has a log");
    }
}

#[test]
fn a_leader_move_moves_the_partition_and_stops_the_idle_fetcher() {
    let c = Cluster::new();
    c.lead(&tp(0), 1, 0);
    let _r = Running::start(c.clone(), "[[follow]]\ntopic = \"t\"\n");
    assert!(eventually(5, || c.fetched(1, &tp(0), 0)));
    // The leader moves: the old one says so, metadata names the new one.
    c.lead(&tp(0), 2, 1);
    c.refuse(1, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    assert!(
        eventually(5, || c.fetched(2, &tp(0), 1)),
        "fetches: {:?}",
        c.fetches.lock().unwrap()
    );
    // Broker 1's fetcher has nothing left: it is stopped, and fetches no more.
    std::thread::sleep(Duration::from_millis(100));
    let from_1 = c.fetches_from(1);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        from_1,
        c.fetches_from(1),
        "no fetch from the old leader after the move"
    );
    assert!(
        c.fetch_count(2, &tp(0)) > 1,
        "the new leader is fetched from repeatedly"
    );
}

#[test]
fn hand_backs_to_the_same_leader_wait_longer_each_time_and_a_move_is_taken_at_once() {
    let c = Cluster::new();
    c.lead(&tp(0), 1, 0);
    c.lead(&tp(1), 1, 0);
    // Broker 1 refuses, and metadata keeps naming it (a stale view).
    c.refuse(1, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    let _r = Running::start(c.clone(), "[[follow]]\ntopic = \"t\"\n");
    std::thread::sleep(Duration::from_millis(1600));
    // Reassigned every 50 ms backoff it would be fetched ~30 times; doubling (50, 100, 200,
    // 400, 800 ms) allows about 5.
    let n = c.fetch_count(1, &tp(0));
    assert!(
        (2..=7).contains(&n),
        "{n} fetches of t-0 from broker 1 in 1.6 s"
    );
    // Both partitions go back together, in the same fetches.
    assert_eq!(c.fetch_count(1, &tp(1)), n);
    // Another leader is no hand-back to wait out.
    c.lead(&tp(0), 2, 1);
    c.lead(&tp(1), 2, 1);
    c.refuse.lock().unwrap().clear();
    assert!(
        eventually(3, || c.fetched(2, &tp(0), 1) && c.fetched(2, &tp(1), 1)),
        "fetches: {:?}",
        c.fetches.lock().unwrap()
    );
}

#[test]
fn a_hand_back_waits_its_backoff_and_a_stale_one_changes_nothing() {
    let c = Cluster::new();
    c.lead(&tp(0), 1, 4);
    let (mut m, _dir) = manager_with_backoff(&c, "[[follow]]\ntopic = \"t\"\n", 1000);
    assert!(m.reconcile().unwrap(), "every partition has a fetcher");
    let at_1 = Assignment {
        broker: 1,
        fetcher_id: 0,
        leader_epoch: 4,
    };
    assert_eq!(m.assigned.get(&tp(0)), Some(&at_1));
    let far = Instant::now() + Duration::from_secs(30);
    // From a fetcher that does not own it, or under an older epoch: ignored.
    for (fetcher, epoch) in [("fetcher-broker-7-0", 4), ("fetcher-broker-1-0", 3)] {
        let mut next = far;
        m.handle(hand_back(fetcher, epoch), &mut next);
        assert_eq!(
            m.assigned.get(&tp(0)),
            Some(&at_1),
            "{fetcher} epoch {epoch}"
        );
        assert!(m.hand_backs.is_empty());
        assert!(next < far, "metadata is looked at again soon");
    }
    // From its fetcher: unassigned, and not given back to the same leader before the backoff
    // (a second here: no margin a loaded machine could eat).
    let mut next = far;
    let t = Instant::now();
    m.handle(hand_back("fetcher-broker-1-0", 4), &mut next);
    assert!(!m.assigned.contains_key(&tp(0)));
    let wait = m.hand_backs[&tp(0)].not_before - t;
    assert!(
        (Duration::from_millis(1000)..Duration::from_millis(1100)).contains(&wait),
        "{wait:?}"
    );
    assert_eq!(
        next,
        m.hand_backs[&tp(0)].not_before,
        "the next round comes then"
    );
    assert!(!m.reconcile().unwrap(), "still waiting");
    assert!(!m.assigned.contains_key(&tp(0)));
    std::thread::sleep(
        m.hand_backs[&tp(0)]
            .not_before
            .saturating_duration_since(Instant::now()),
    );
    assert!(m.reconcile().unwrap());
    assert_eq!(m.assigned.get(&tp(0)), Some(&at_1));
    // A second hand-back soon after waits twice as long.
    let mut next = far;
    let t = Instant::now();
    m.handle(hand_back("fetcher-broker-1-0", 4), &mut next);
    let wait = m.hand_backs[&tp(0)].not_before - t;
    assert!(
        (Duration::from_millis(2000)..Duration::from_millis(2100)).contains(&wait),
        "{wait:?}"
    );
    assert!(!m.reconcile().unwrap(), "the doubled wait is not over");
    // A new leader epoch is no hand-back to wait out.
    c.lead(&tp(0), 1, 5);
    assert!(m.reconcile().unwrap());
    assert_eq!(m.assigned[&tp(0)].leader_epoch, 5);
    m.stop.stop();
    m.shutdown_all();
}

#[test]
fn reload_starts_added_partitions_and_stops_removed_ones_keeping_their_logs() {
    let c = Cluster::new();
    for p in 0..2 {
        c.lead(&tp(p), 1, 0);
    }
    c.lead(&TopicPartition::new("u", 0), 2, 0);
    let r = Running::start(c.clone(), "[[follow]]\ntopic = \"t\"\npartitions = [0]\n");
    assert!(eventually(5, || c.fetched(1, &tp(0), 0)));
    assert_eq!(c.fetch_count(1, &tp(1)), 0, "t-1 is not followed yet");
    let follow = config(
        r.dir.path(),
        "[[follow]]\ntopic = \"t\"\npartitions = [1]\n[[follow]]\ntopic = \"u\"\n",
    )
    .follow;
    r.events.send(ManagerEvent::Reload(follow)).unwrap();
    assert!(eventually(5, || c.fetched(1, &tp(1), 0)
        && c.fetched(2, &TopicPartition::new("u", 0), 0)));
    std::thread::sleep(Duration::from_millis(100));
    let t0 = c.fetch_count(1, &tp(0));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.fetch_count(1, &tp(0)), t0, "t-0 is no longer fetched");
    assert!(c.fetch_count(1, &tp(1)) > 1);
    assert!(r.logs.get(&tp(0)).is_some(), "t-0's log stays");
    assert!(r.dir.path().join("t-0").is_dir());
}

#[test]
fn stop_ends_run_at_once_and_joins_every_fetcher() {
    let c = Cluster::new();
    for p in 0..4 {
        c.lead(&tp(p), p % 2 + 1, 0);
    }
    // Every fetch fails with a retriable error and backs off a second: the fetchers sleep on
    // their condition variables and the manager on its channel, so only a wake-up ends them
    // at once.
    c.refuse(1, ErrorCode::UNKNOWN_SERVER_ERROR);
    c.refuse(2, ErrorCode::UNKNOWN_SERVER_ERROR);
    let mut r = Running::start_with_backoff(c.clone(), "[[follow]]\ntopic = \"t\"\n", 1000);
    assert!(eventually(5, || (0..4).all(|p| c.fetched(
        p % 2 + 1,
        &tp(p),
        0
    ))));
    std::thread::sleep(Duration::from_millis(100));
    let took = r.stop();
    assert!(
        took < Duration::from_millis(300),
        "run returned after {took:?}"
    );
    // Every fetcher thread was joined: nothing fetches any more.
    let n = c.total_fetches();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.total_fetches(), n);
}

#[test]
fn a_fetcher_left_without_partitions_is_shut_down() {
    let c = Cluster::new();
    c.lead(&tp(0), 1, 0);
    c.lead(&tp(1), 2, 0);
    let (mut m, _dir) = manager(&c, "[[follow]]\ntopic = \"t\"\n");
    assert!(m.reconcile().unwrap());
    assert_eq!(
        m.fetchers.keys().copied().collect::<Vec<_>>(),
        [(1, 0), (2, 0)]
    );
    // Both partitions now led by broker 2 (a new epoch: no hand-back to wait out).
    c.lead(&tp(0), 2, 1);
    assert!(m.reconcile().unwrap());
    assert_eq!(m.fetchers.keys().copied().collect::<Vec<_>>(), [(2, 0)]);
    assert_eq!(m.fetchers[&(2, 0)].shared.partition_count(), 2);
    m.stop.stop();
    m.shutdown_all();
}

#[test]
fn a_topic_gone_from_the_leader_shows_as_not_found_not_as_its_last_error() {
    // A topic of its own: the live figures are one per process.
    let gone = TopicPartition::new("gone-topic", 0);
    let c = Cluster::new();
    c.lead(&gone, 1, 0);
    let (mut m, _dir) = manager(&c, "[[follow]]\ntopic = \"gone-topic\"\n");
    assert!(m.reconcile().unwrap());
    // The leader hands it back, then metadata no longer has the topic.
    let mut next = Instant::now();
    m.handle(
        ManagerEvent::Fetcher(FetcherEvent::NeedsLeader {
            tp: gone.clone(),
            reason: "UNKNOWN_TOPIC_OR_PARTITION".into(),
            fetcher: "fetcher-broker-1-0".into(),
            leader_epoch: 0,
        }),
        &mut next,
    );
    let state = |tp: &TopicPartition| crate::live::live().partitions()[tp].state;
    assert_eq!(state(&gone), crate::live::State::BackingOff);
    c.md.lock().unwrap().topics.clear();
    assert!(!m.reconcile().unwrap());
    assert_eq!(state(&gone), crate::live::State::NotFound);
    m.stop.stop();
    m.shutdown_all();
}

#[test]
fn stop_ends_run_while_metadata_keeps_failing() {
    let c = Cluster::new();
    c.lead(&tp(0), 1, 0);
    c.down.store(true, Ordering::SeqCst);
    let mut r = Running::start(c.clone(), "[[follow]]\ntopic = \"t\"\n");
    assert!(eventually(5, || c.metadata_calls.load(Ordering::SeqCst) >= 2));
    assert_eq!(c.total_fetches(), 0);
    let took = r.stop();
    assert!(took < Duration::from_secs(2), "run returned after {took:?}");
}
