//! The units' `SystemCallFilter=` lets the daemon and `verify` do their whole job: a filtered
//! call would fail with EPERM under systemd, which no test outside systemd would see. So the
//! daemon runs under `strace -f -c` through everything it does — start-up, fetching two
//! partitions with segment rolls, retention deleting segments, fsyncs, checkpoints, the
//! data-dir lock, sd_notify with watchdog pings, a metrics scrape, a SIGHUP reload that adds a
//! partition, SIGTERM — and so does `verify` (beside the running daemon and after it), and so
//! does `/bin/kill -HUP` (ExecReload=); every system call made must be in the set the units
//! allow, as `systemd-analyze syscall-filter` expands it.
//!
//! Needs `strace` and `systemd-analyze` (tests/setup-env.sh installs both when missing).

use crate::support;
use crate::support::test_leader::TestLeader;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TOPIC: &str = "sys";

/// Runs `tool`, failing the test with a clear message when it is not installed.
fn run(tool: &str, args: &[&str]) -> std::process::Output {
    match Command::new(tool).args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{tool}` is not installed, so the units' system call filter cannot be checked: \
             `apt-get install -y strace systemd` (tests/setup-env.sh does it when run as root)"
        ),
        Err(e) => panic!("failed to run `{tool}`: {e}"),
    }
}

/// The system calls of one `systemd-analyze syscall-filter` group, nested groups expanded.
fn expand(group: &str, into: &mut BTreeSet<String>) {
    let out = run("systemd-analyze", &["syscall-filter", group]);
    assert!(
        out.status.success(),
        "systemd-analyze syscall-filter {group}"
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The first line is the group's own name; the rest are members, `#` lines comments.
    for word in text
        .lines()
        .skip(1)
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
    {
        if word.starts_with('@') {
            expand(word, into);
        } else {
            into.insert(word.to_string());
        }
    }
}

/// What the units allow: `SystemCallFilter=`'s allow-list minus its `~` deny-list, read from
/// the unit itself so that the test follows the unit.
fn allowed_by(unit: &Path) -> BTreeSet<String> {
    let body = std::fs::read_to_string(unit).unwrap();
    let (mut allow, mut deny) = (BTreeSet::new(), BTreeSet::new());
    for value in body
        .lines()
        .filter_map(|l| l.strip_prefix("SystemCallFilter="))
    {
        let (set, list) = match value.strip_prefix('~') {
            Some(rest) => (&mut deny, rest),
            None => (&mut allow, value),
        };
        for item in list.split_whitespace() {
            if item.starts_with('@') {
                expand(item, set);
            } else {
                set.insert(item.to_string());
            }
        }
    }
    assert!(
        !allow.is_empty(),
        "{}: no SystemCallFilter=",
        unit.display()
    );
    allow.difference(&deny).cloned().collect()
}

/// The system calls named in an `strace -c` summary.
fn traced(summary: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(summary)
        .unwrap_or_else(|e| panic!("no strace summary {}: {e}", summary.display()));
    let calls: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('%') && !l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .filter(|name| *name != "total")
        .map(str::to_string)
        .collect();
    assert!(calls.len() > 10, "strace saw too little: {text}");
    calls
}

fn strace_args(summary: &Path) -> Vec<String> {
    ["strace", "-f", "-qq", "-c", "-o"]
        .iter()
        .map(|s| s.to_string())
        .chain([summary.display().to_string(), "--".to_string()])
        .collect()
}

/// Runs `args` of the built binary under strace and returns its summary's path.
fn traced_command(dir: &Path, label: &str, program: &str, args: &[&str]) -> PathBuf {
    let summary = dir.join(format!("{label}.strace"));
    let mut all = strace_args(&summary);
    all.push(program.to_string());
    all.extend(args.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = all.iter().map(String::as_str).collect();
    let out = run(argv[0], &argv[1..]);
    assert!(
        out.status.success(),
        "{label}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    summary
}

fn assert_allowed(what: &str, calls: &BTreeSet<String>, allowed: &BTreeSet<String>) {
    let refused: Vec<&String> = calls.difference(allowed).collect();
    eprintln!("{what}: {} system calls: {calls:?}", calls.len());
    assert!(
        refused.is_empty(),
        "{what} makes system calls the units' SystemCallFilter= refuses: {refused:?} (all made: {calls:?})"
    );
}

fn config(dir: &Path, data: &Path, leader: &TestLeader, partitions: &[i32], metrics: &str) {
    support::Config::new(data, &leader.addr())
        .follow(TOPIC)
        .with("partitions", partitions.to_vec())
        .set("fetch.max_wait_ms", 50)
        .set("fetch.backoff_ms", 200)
        .set("fetch.partition_max_bytes", 2048)
        .set("log.min_free_bytes", 0)
        .set("log.segment_bytes", 1024)
        .set("log.retention_bytes", 4096)
        .set("log.flush_interval_ms", 50)
        .set("checkpoint.interval_ms", 50)
        .set("metrics.listen", metrics)
        .write(dir);
}

#[test]
fn the_daemon_and_verify_make_only_system_calls_the_units_allow() {
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    let daemon_allowed = allowed_by(&units.join("replica-follower.service"));
    let verify_allowed = allowed_by(&units.join("replica-follower-verify.service"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 2);
    leader.append(0, 400, 5);
    leader.append(1, 400, 5);
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    config(dir.path(), &data, &leader, &[0], &metrics);
    let cfg = dir.path().join("follower.toml");
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_nonblocking(true).unwrap();

    let summary = dir.path().join("run.strace");
    let wrapper = strace_args(&summary);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut d = support::Daemon::start_wrapped(
        &cfg,
        &[
            ("NOTIFY_SOCKET", notify_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
        &wrapper,
    );
    let end = leader.log_end(0);
    support::wait_until(Duration::from_secs(60), "partition 0 caught up", || {
        support::log_end(&data, TOPIC, 0) == end
    });
    // strace blocks fatal signals: the daemon is signalled by its own pid.
    let pid = replica_follower::live::read_running(&data)
        .expect("the daemon's live status")
        .pid
        .to_string();

    let mut scrape = std::net::TcpStream::connect(&metrics).unwrap();
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    scrape.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let verify_live = traced_command(
        dir.path(),
        "verify-live",
        support::bin(),
        &["verify", "--config", cfg.to_str().unwrap()],
    );

    config(dir.path(), &data, &leader, &[0, 1], &metrics);
    let kill = traced_command(dir.path(), "kill", "/bin/kill", &["-HUP", &pid]);
    let end = leader.log_end(1);
    support::wait_until(
        Duration::from_secs(60),
        "partition 1 after the reload",
        || support::log_end(&data, TOPIC, 1) == end,
    );
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = notify.recv(&mut buf) {
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
        got.push('\n');
    }
    assert!(got.contains("READY=1") && got.contains("WATCHDOG=1") && got.contains("RELOADING=1"));
    run("kill", &["-TERM", &pid]);
    assert!(
        d.wait(Duration::from_secs(30)).success(),
        "{}",
        d.log_text()
    );
    assert!(
        d.log_text().contains("retention moves the log start"),
        "retention never deleted a segment: {}",
        d.log_text()
    );

    let verify_stopped = traced_command(
        dir.path(),
        "verify-stopped",
        support::bin(),
        &["verify", "--config", cfg.to_str().unwrap()],
    );
    assert_allowed("run", &traced(&summary), &daemon_allowed);
    assert_allowed("/bin/kill (ExecReload=)", &traced(&kill), &daemon_allowed);
    assert_allowed(
        "verify beside the daemon",
        &traced(&verify_live),
        &verify_allowed,
    );
    assert_allowed("verify", &traced(&verify_stopped), &verify_allowed);
}
