//! KIP-227 fetch sessions between the daemon and the in-process test leader with sessions on:
//! the first fetch is full (id 0, epoch 0), later ones are incremental with epochs 1, 2, 3, …
//! naming only partitions that changed; a partition removed by a reload is forgotten; a
//! forgotten session and a rejected epoch each recover with a full fetch; a reconnect starts a
//! new session; the replica stays byte-identical throughout. With sessions off (the default,
//! as Tansu and the mock cluster) the daemon fetches sessionless, as before.

use crate::support;
use crate::support::test_leader::{SeenFetch, TestLeader};
use replica_follower::checkpoint::TopicPartition;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOPIC: &str = "sess";
const WAIT: Duration = Duration::from_secs(20);

fn config(dir: &Path, data: &Path, leader: &TestLeader, partitions: &[i32]) -> PathBuf {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .with("partitions", partitions.to_vec())
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("log.min_free_bytes", 0)
        .write(dir)
}

fn caught_up(data: &Path, leader: &TestLeader, partitions: &[i32]) -> bool {
    partitions.iter().all(|&p| {
        support::local_log_bytes(data, &TopicPartition::new(TOPIC, p)) == leader.log_bytes(p)
    })
}

fn wait_caught_up(data: &Path, leader: &TestLeader, partitions: &[i32], what: &str) {
    support::wait_until(WAIT, what, || caught_up(data, leader, partitions));
}

/// Within each connection, every session request follows the one before: a full fetch at
/// epoch 0 answered with a session id, then that id with epochs 1, 2, 3, … until the next
/// full fetch.
fn assert_epochs_follow(seen: &[SeenFetch]) {
    let mut conns: Vec<u64> = seen.iter().map(|s| s.connection).collect();
    conns.dedup();
    for c in conns {
        let mut expect: Option<(i32, i32)> = None;
        for s in seen.iter().filter(|s| s.connection == c) {
            if s.is_full() {
                assert_eq!(s.session_epoch, 0, "a full fetch asks for a session: {s:?}");
            } else {
                assert_eq!(
                    Some((s.session_id, s.session_epoch)),
                    expect,
                    "incremental fetches follow the session's epochs: {s:?}"
                );
            }
            expect = (s.error == 0 && s.response_session_id != 0)
                .then(|| (s.response_session_id, s.session_epoch + 1));
        }
    }
}

/// A leader with `n` partitions of `records` records each (sessions on or off) and a daemon
/// following all of them, caught up.
struct Setup {
    dir: tempfile::TempDir,
    data: PathBuf,
    leader: TestLeader,
    all: Vec<i32>,
    daemon: support::Daemon,
}

fn setup(n: i32, records: usize, sessions: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, n);
    leader.enable_fetch_sessions(sessions);
    let all: Vec<i32> = (0..n).collect();
    for &p in &all {
        leader.append(p, records, 3);
    }
    let cfg = config(dir.path(), &data, &leader, &all);
    let daemon = support::Daemon::start(&cfg);
    wait_caught_up(&data, &leader, &all, &format!("{n} partitions"));
    Setup {
        dir,
        data,
        leader,
        all,
        daemon,
    }
}

#[test]
fn incremental_fetches_name_only_changed_partitions_and_forget_removed_ones() {
    let Setup {
        dir,
        data,
        leader,
        all,
        daemon: mut d,
    } = setup(50, 5, true);
    support::wait_until(WAIT, "a few fetches", || leader.seen_fetches().len() >= 4);

    let seen = leader.seen_fetches();
    let first = &seen[0];
    assert_eq!((first.session_id, first.session_epoch), (0, 0));
    assert_eq!(first.partitions.len(), 50, "the first fetch is full");
    assert_ne!(first.response_session_id, 0, "the leader opened a session");
    assert!(
        seen.iter().skip(1).take(3).all(|s| !s.is_full()),
        "then incremental: {seen:?}"
    );
    assert_eq!(seen[1].session_epoch, 1);

    // Idle: requests name nothing.
    std::thread::sleep(Duration::from_millis(500));
    let mark = leader.seen_fetches().len();
    std::thread::sleep(Duration::from_millis(500));
    let idle = leader.seen_fetches_since(mark);
    assert!(idle.len() >= 2, "the fetcher keeps polling: {idle:?}");
    assert!(
        idle.iter().all(|s| !s.is_full() && s.partitions.is_empty()),
        "an idle session names no partition: {idle:?}"
    );

    // Data for two partitions: only they are named (at their new offsets) from then on.
    let mark = leader.seen_fetches().len();
    leader.append(7, 3, 1);
    leader.append(31, 4, 2);
    wait_caught_up(&data, &leader, &all, "partitions 7 and 31");
    support::wait_until(WAIT, "the new offsets named", || {
        let since = leader.seen_fetches_since(mark);
        [(7, 8), (31, 9)]
            .iter()
            .all(|n| since.iter().any(|s| s.partitions.contains(n)))
    });
    let since = leader.seen_fetches_since(mark);
    for s in &since {
        assert!(!s.is_full(), "no full fetch while the session holds: {s:?}");
        assert!(
            s.named().iter().all(|p| *p == 7 || *p == 31),
            "only the partitions that changed are named: {s:?}"
        );
        assert!(s.answered.iter().all(|p| *p == 7 || *p == 31), "{s:?}");
    }

    // Partition 49 leaves the configuration: the session forgets it.
    let mark = leader.seen_fetches().len();
    let kept: Vec<i32> = (0..49).collect();
    config(dir.path(), &data, &leader, &kept);
    d.reload();
    support::wait_until(WAIT, "partition 49 forgotten", || {
        leader
            .seen_fetches_since(mark)
            .iter()
            .any(|s| s.forgotten == vec![49])
    });
    let forgot_at = mark
        + leader
            .seen_fetches_since(mark)
            .iter()
            .position(|s| s.forgotten == vec![49])
            .unwrap();
    leader.append(49, 2, 1);
    leader.append(3, 2, 1);
    wait_caught_up(&data, &leader, &kept, "partition 3 after the reload");
    std::thread::sleep(Duration::from_millis(300));
    let after = leader.seen_fetches_since(forgot_at + 1);
    assert!(
        after.iter().all(|s| !s.named().contains(&49)),
        "a forgotten partition is not fetched: {after:?}"
    );
    assert!(after.iter().all(|s| !s.answered.contains(&49)));
    assert_epochs_follow(&leader.seen_fetches());
    d.stop();
    let (ok, problems) = support::verify(&data);
    assert!(ok, "{problems}");
}

/// Makes the leader refuse the session with `code` (through `fault`) while partition `p` gets
/// data; returns the fetches seen since and the full fetch that followed the refusal, after
/// checking that it names every partition, that the replica caught up and that the new
/// session goes on incrementally.
fn recovery(
    leader: &TestLeader,
    data: &Path,
    all: &[i32],
    p: i32,
    code: i16,
    fault: impl FnOnce(),
) -> (Vec<SeenFetch>, SeenFetch) {
    let mark = leader.seen_fetches().len();
    fault();
    leader.append(p, 5, 2);
    wait_caught_up(
        data,
        leader,
        all,
        &format!("partition {p} after error {code}"),
    );
    std::thread::sleep(Duration::from_millis(400));
    let since = leader.seen_fetches_since(mark);
    let refused = since
        .iter()
        .position(|s| s.error == code)
        .unwrap_or_else(|| panic!("no incremental fetch met error {code}: {since:?}"));
    let retry = since
        .get(refused + 1)
        .expect("a fetch after the refusal")
        .clone();
    assert_eq!(
        retry.partitions.len(),
        all.len(),
        "a full fetch names every partition"
    );
    let session = retry.response_session_id;
    assert!(
        since[refused + 2..]
            .iter()
            .all(|s| s.session_id == session && !s.is_full()),
        "the new session goes on incrementally: {since:?}"
    );
    (since, retry)
}

#[test]
fn a_forgotten_session_and_a_rejected_epoch_each_recover_with_a_full_fetch() {
    let Setup {
        dir: _dir,
        data,
        leader,
        all,
        daemon: mut d,
    } = setup(20, 10, true);
    let first_session = leader.seen_fetches()[0].response_session_id;

    // The leader forgets the session: FETCH_SESSION_ID_NOT_FOUND, then a full fetch (id 0).
    let (since, retry) = recovery(&leader, &data, &all, 4, 70, || {
        leader.forget_fetch_sessions()
    });
    assert_eq!((retry.session_id, retry.session_epoch), (0, 0), "{since:?}");
    let second_session = retry.response_session_id;
    assert!(second_session != 0 && second_session != first_session);

    // The leader rejects an epoch: INVALID_FETCH_SESSION_EPOCH, then a full fetch that asks
    // it to replace the session (its id, epoch 0).
    let (since, retry) = recovery(&leader, &data, &all, 11, 71, || {
        leader.reject_next_session_epochs(1)
    });
    assert_eq!(
        (retry.session_id, retry.session_epoch),
        (second_session, 0),
        "{since:?}"
    );
    assert_epochs_follow(&leader.seen_fetches());

    // Calm: one INFO line (the second reset, within a minute of the first, is debug), no
    // warning.
    let log = d.log_text();
    let resets: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("starting a new one with a full fetch"))
        .collect();
    assert_eq!(resets.len(), 1, "{log}");
    assert!(resets[0].contains(" INFO "), "{log}");
    assert!(resets[0].contains("FETCH_SESSION_ID_NOT_FOUND"), "{log}");
    assert!(!log.lines().any(|l| l.contains(" WARN ")), "{log}");
    d.stop();
    assert!(caught_up(&data, &leader, &all));
    let (ok, problems) = support::verify(&data);
    assert!(ok, "{problems}");
}

#[test]
fn a_reconnect_starts_a_new_session_with_a_full_fetch() {
    let Setup {
        dir: _dir,
        data,
        leader,
        all,
        daemon: mut d,
    } = setup(10, 6, true);
    let before = leader.seen_fetches();
    let old_conn = before.last().unwrap().connection;

    // The leader drops the connection: the daemon reconnects and opens a new session.
    let mark = before.len();
    leader.drop_next_requests(1);
    support::wait_until(WAIT, "a fetch on a new connection", || {
        leader
            .seen_fetches_since(mark)
            .iter()
            .any(|s| s.connection != old_conn)
    });
    leader.append(2, 5, 1);
    wait_caught_up(&data, &leader, &all, "partition 2 after the reconnect");
    let since = leader.seen_fetches_since(mark);
    let first_new = since.iter().find(|s| s.connection != old_conn).unwrap();
    assert_eq!(
        (first_new.session_id, first_new.session_epoch),
        (0, 0),
        "{since:?}"
    );
    assert_eq!(first_new.partitions.len(), 10);
    assert!(
        leader.fetch_sessions_open() <= 1,
        "the old connection's session is gone"
    );
    assert_epochs_follow(&leader.seen_fetches());
    d.stop();
    assert!(caught_up(&data, &leader, &all));
}

#[test]
fn a_leader_without_sessions_gets_sessionless_full_fetches_as_before() {
    let Setup {
        dir: _dir,
        data,
        leader,
        all,
        daemon: mut d,
    } = setup(5, 6, false);
    leader.append(1, 3, 1);
    wait_caught_up(&data, &leader, &all, "partition 1");
    std::thread::sleep(Duration::from_millis(300));
    let seen = leader.seen_fetches();
    assert_eq!((seen[0].session_id, seen[0].session_epoch), (0, 0));
    assert!(
        seen[1..]
            .iter()
            .all(|s| (s.session_id, s.session_epoch) == (0, -1) && s.partitions.len() == 5),
        "after the leader declined a session, every fetch is full and sessionless: {seen:?}"
    );
    d.stop();
}

/// CPU ticks (user + system) a process used so far, from /proc.
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

/// CPU ticks per thread of a process, by thread name (threads of one name summed).
fn thread_ticks(pid: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let tid = t.file_name().to_string_lossy().to_string();
        let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let ticks = cpu_ticks(&format!("{pid}/task/{tid}"));
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, sum)) => *sum += ticks,
            None => out.push((name, ticks)),
        }
    }
    out
}

/// The idle cost with and without sessions: 2,000 partitions caught up, then 20 s with no new
/// data; prints the daemon's CPU (and the leader's, in this process) per second. A
/// measurement, not a check:
/// `cargo test --test it follow::fetch_sessions -- --ignored --nocapture`.
#[test]
#[ignore]
fn idle_cpu_with_and_without_sessions() {
    let secs: u64 = std::env::var("RF_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let ticks_per_sec = 100.0; // USER_HZ on Linux
    // RF_IDLE_ONLY=on|off measures one mode only (to profile it).
    let only = std::env::var("RF_IDLE_ONLY").ok();
    for sessions in [false, true] {
        if only.as_deref().is_some_and(|o| (o == "on") != sessions) {
            continue;
        }
        let s = setup(2000, 3, sessions);
        // Past the first flush and checkpoint of what the catch-up wrote.
        std::thread::sleep(Duration::from_secs(8));
        let pid = s.daemon.pid().to_string();
        println!("daemon pid {pid}");
        let (d0, l0) = (cpu_ticks(&pid), cpu_ticks("self"));
        let t0 = thread_ticks(&pid);
        let f0 = s.leader.seen_fetches().len();
        std::thread::sleep(Duration::from_secs(secs));
        let (d1, l1) = (cpu_ticks(&pid), cpu_ticks("self"));
        let mut by_thread: Vec<(String, u64)> = thread_ticks(&pid)
            .into_iter()
            .map(|(name, t)| {
                let before = t0.iter().find(|(n, _)| *n == name).map_or(0, |(_, b)| *b);
                (name, t.saturating_sub(before))
            })
            .filter(|(_, t)| *t > 0)
            .collect();
        by_thread.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
        let fetches = s.leader.seen_fetches_since(f0);
        let named: usize = fetches.iter().map(|f| f.partitions.len()).sum();
        println!(
            "sessions {}: daemon {:.2} % of a core, leader {:.2} %, {} fetches in {secs} s naming {} partitions",
            if sessions { "on " } else { "off" },
            (d1 - d0) as f64 / ticks_per_sec / secs as f64 * 100.0,
            (l1 - l0) as f64 / ticks_per_sec / secs as f64 * 100.0,
            fetches.len(),
            named
        );
        println!("  busiest daemon threads (ticks of 10 ms): {by_thread:?}");
        assert!(caught_up(&s.data, &s.leader, &s.all));
    }
}
