//! The command-line contract: `--help` on every subcommand, the data-dir lock against a real
//! second daemon, and `status --json`'s shape. Each bad input's exit code and message, as the
//! README lists them, are in `bad_input.rs`.

use crate::support;
use crate::support::run_cli as run;
use std::time::Duration;

#[test]
fn help_on_every_subcommand() {
    for cmd in [
        "run",
        "status",
        "dump",
        "offsets",
        "verify",
        "repair",
        "check-config",
        "add-user",
        "restore",
        "restore prepare",
        "restore write",
        "restore finish",
    ] {
        let mut args: Vec<&str> = cmd.split(' ').collect();
        args.push("--help");
        let (code, out, _) = run(&args);
        assert_eq!(code, Some(0), "{cmd} --help");
        assert!(
            out.starts_with(&format!("replica-follower {cmd}")),
            "{cmd} --help says: {out}"
        );
    }
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("Exit codes"));
}

#[test]
fn add_user_takes_the_password_from_stdin_and_never_shows_or_stores_it() {
    use replica_follower::security::SaslMechanism;
    use replica_follower::security::users::Users;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users");
    let add = |user: &str, extra: &[&str], password: &str| {
        let mut child = std::process::Command::new(support::bin())
            .args([
                "add-user",
                "--users-file",
                file.to_str().unwrap(),
                "--user",
                user,
            ])
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(!stdout.contains(password) && !stderr.contains(password));
        (out.status.code(), stdout, stderr)
    };
    let (code, out, err) = add("alice", &[], "correct horse");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("SCRAM-SHA-256, SCRAM-SHA-512 (8192 iterations)"),
        "{out}"
    );
    let (code, _, err) = add(
        "bob",
        &["--mechanism=SCRAM-SHA-512", "--iterations", "4096"],
        "pw-b",
    );
    assert_eq!(code, Some(0), "{err}");
    // Again for alice, one mechanism: that entry replaced, the other kept.
    let (code, _, err) = add("alice", &["--mechanism", "SCRAM-SHA-256"], "battery staple");
    assert_eq!(code, Some(0), "{err}");
    let md = std::fs::metadata(&file).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("correct horse") && !text.contains("battery") && !text.contains("pw-b"));
    assert_eq!(text.lines().count(), 3, "{text}");
    let users = Users::load(&file).unwrap();
    assert!(users.verify_plain("alice", "battery staple"));
    assert!(users.verify_plain("bob", "pw-b"));
    assert!(users.lookup("bob", SaslMechanism::ScramSha256).is_none());
    assert_eq!(
        users
            .lookup("bob", SaslMechanism::ScramSha512)
            .unwrap()
            .iterations,
        4096
    );
    // A broken users file is left alone: exit 1 naming it and the line.
    std::fs::write(&file, "not an entry\n").unwrap();
    let (code, _, err) = add("carol", &[], "pw-c");
    assert_eq!(code, Some(1));
    assert!(err.contains("users") && err.contains("line 1"), "{err}");
}

#[test]
fn a_second_daemon_on_the_same_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, cfg, _) = support::daemon_holding_the_lock(dir.path());
    let (code, _, err) = run(&["run", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("locked") && err.contains(".lock"), "{err}");
    assert!(first.is_running());
    assert_eq!(first.stop().code(), Some(0));
    // Once the first is gone, the lock is free again.
    let mut second = support::Daemon::start(&cfg);
    support::wait_until(
        Duration::from_secs(10),
        "the second daemon to start",
        || second.log_text().matches("following").count() >= 2,
    );
    assert_eq!(second.stop().code(), Some(0));
}

#[test]
fn status_into_a_reader_that_went_away_exits_quietly() {
    let (_leader, _dir, data) =
        stopped_replica("piped", 3, |c| c.set("checkpoint.interval_ms", 100));
    for json in [false, true] {
        let mut cmd = std::process::Command::new(support::bin());
        cmd.args(["status", "--data-dir"]).arg(&data);
        if json {
            cmd.arg("--json");
        }
        // The read end is closed before status writes (`status | head` once head is done).
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("status");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("status output");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "json {json}: {:?}: {err}", out.status);
        assert!(!err.contains("panicked"), "json {json}: {err}");
    }
}

#[test]
fn verify_against_a_leader_that_answers_nothing_below_its_high_watermark_does_not_pass() {
    let (leader, dir, _data) = stopped_replica("quiet", 30, |c| c);
    let cfg = dir.path().join("follower.toml");
    let c = cfg.to_str().unwrap();
    // A busy leader: two empty answers, then the batches. Asked again, it is compared.
    leader.error_next_fetches(0, 0, 2);
    let (code, out, err) = support::run_cli(&["verify", "--config", c, "--against-leader"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("quiet-0: ok: 10 batch(es)"), "{out}");
    assert!(!out.contains("no longer on the leader"), "{out}");
    // A leader that never answers below its high watermark: not a pass, and not compaction.
    leader.error_next_fetches(0, 0, 1000);
    let (code, out, err) = support::run_cli(&["verify", "--config", c, "--against-leader"]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(!out.contains("no longer on the leader"), "{out}");
    assert!(
        format!("{out}{err}").contains("could not be compared"),
        "{out}{err}"
    );
}

#[test]
fn status_json_has_the_contract_fields() {
    let (leader, _dir, data) =
        stopped_replica("audit", 30, |c| c.set("checkpoint.interval_ms", 100));
    let st = support::status(&data);
    let parts = st["partitions"].as_array().expect("partitions array");
    assert_eq!(parts.len(), 1);
    let p = &parts[0];
    for key in [
        "topic",
        "partition",
        "log_start_offset",
        "log_end_offset",
        "high_watermark",
        "recovery_point",
        "leader_epoch",
        "segments",
        "size_bytes",
    ] {
        assert!(p.get(key).is_some(), "status --json lacks {key}: {p}");
    }
    assert_eq!(p["topic"], "audit");
    assert_eq!(p["log_end_offset"], 300);
    assert_eq!(p["high_watermark"], 300);
    assert_eq!(p["recovery_point"], 300);
    assert_eq!(p["log_start_offset"], 0);
    assert_eq!(
        p["size_bytes"].as_u64(),
        Some(leader.log_bytes(0).len() as u64)
    );
    let (code, text, _) = run(&["status", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert!(text.contains("audit-0"), "{text}");
}

#[test]
fn the_shipped_example_config_is_valid() {
    let p = support::manifest_dir().join("systemd/follower.toml.example");
    let (code, out, err) = run(&["check-config", "--config", p.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("2 topics"), "{out}");
}

#[test]
fn sigterm_ends_quickly_while_a_broker_accepts_but_never_answers() {
    // A "broker" that accepts connections and then says nothing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h2 = held.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            h2.lock().unwrap().push(c);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &addr)
        .follow("t")
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(10), "the daemon to start", || {
        d.log_text().contains("following")
    });
    support::wait_until(Duration::from_secs(10), "the daemon to connect", || {
        !held.lock().unwrap().is_empty()
    });
    std::thread::sleep(Duration::from_millis(500));
    let stopping = std::time::Instant::now();
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "SIGTERM took {:?}",
        stopping.elapsed()
    );
    assert!(data.join(".kafka_cleanshutdown").exists());
}

/// A stopped replica of partition 0 of `topic`: 300 records in batches of `per_batch`,
/// followed from the in-process leader, configured further by `tune`, until caught up.
fn stopped_replica(
    topic: &str,
    per_batch: usize,
    tune: impl FnOnce(support::Config) -> support::Config,
) -> (
    support::test_leader::TestLeader,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    let leader = support::test_leader::TestLeader::start(topic, 1);
    leader.append(0, 300, per_batch);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.addr())
        .follow(topic)
        .apply(tune)
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(20), "catch-up", || {
        support::log_end(&data, topic, 0) == 300
    });
    assert_eq!(d.stop().code(), Some(0));
    (leader, dir, data)
}

/// `dump` of partition 0 of the `inspect` replica, from `from` if given.
fn dump_inspect(data: &str, from: Option<&str>) -> (Option<i32>, String, String) {
    let mut args = vec![
        "dump",
        "--data-dir",
        data,
        "--topic",
        "inspect",
        "--partition",
        "0",
    ];
    if let Some(f) = from {
        args.extend(["--from", f]);
    }
    run(&args)
}

#[test]
fn version_and_inspection_edge_cases() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("replica-follower "), "{out}");

    let (_leader, _keep, data) =
        stopped_replica("inspect", 10, |c| c.set("log.index_interval_bytes", 100));
    let d = data.to_str().unwrap();
    let (code, out, _) = dump_inspect(d, Some("295"));
    assert_eq!(code, Some(0));
    assert!(
        out.contains("offset=299") && !out.contains("offset=289"),
        "{out}"
    );
    assert_eq!(dump_inspect(d, Some("-5")).0, Some(2));
    let (code, out, err) = dump_inspect(d, Some("5000"));
    assert_eq!(code, Some(0));
    assert!(err.contains("past the log end 300"), "{err}");
    assert_eq!(out, "", "only the note, no bare segment header");

    // Damage: the log torn mid-batch and the index full of garbage entries.
    let pdir = data.join("inspect-0");
    let log = pdir.join("00000000000000000000.log");
    let len = std::fs::metadata(&log).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - 20)
        .unwrap();
    std::fs::write(pdir.join("00000000000000000000.index"), [0x5au8; 8 * 40]).unwrap();
    let (code, out, _) = run(&["verify", "--data-dir", d]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("partial batch at byte") && out.contains("after offset 289"),
        "{out}"
    );
    let index_lines = out.lines().filter(|l| l.contains(".index")).count();
    assert_eq!(
        index_lines, 4,
        "three entries and a count, not forty lines:\n{out}"
    );
    assert!(out.contains("and 37 more bad entries"), "{out}");
    let (code, _, err) = dump_inspect(d, None);
    assert_eq!(code, Some(1), "a damaged log makes dump fail");
    assert!(err.contains("damaged"), "{err}");

    // The archived group offsets, malformed: verify names the file and line.
    std::fs::write(
        data.join("group-offsets-checkpoint"),
        "0\n1\nbilling inspect 0\n",
    )
    .unwrap();
    let (code, out, _) = run(&["verify", "--data-dir", d]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("group-offsets-checkpoint` line 3: expected `group topic partition"),
        "{out}"
    );
}

#[test]
fn a_new_partition_shows_in_the_checkpoints_without_waiting_for_the_interval() {
    let leader = support::test_leader::TestLeader::start("fresh", 1);
    leader.append(0, 50, 10);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Default checkpoint interval: 5 s.
    let cfg = support::Config::new(&data, &leader.addr())
        .follow("fresh")
        .write(dir.path());
    let mut d = support::Daemon::start(&cfg);
    support::wait_until(Duration::from_secs(10), "the log to be created", || {
        support::partition_status(&data, "fresh", 0).is_some()
    });
    support::wait_until(
        Duration::from_secs(2),
        "the new partition in the checkpoint files",
        || {
            support::partition_status(&data, "fresh", 0)
                .is_some_and(|p| !p["recovery_point"].is_null())
        },
    );
    assert_eq!(d.stop().code(), Some(0));
}

#[test]
fn verify_against_the_leader_and_repair_check_their_usage_and_name_an_unreachable_broker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // Nothing listens on port 1.
    let cfg = support::Config::new(&data, "127.0.0.1:1")
        .follow("t")
        .set("fetch.request_timeout_ms", 2000)
        .write(dir.path());
    let (d, c) = (data.to_str().unwrap(), cfg.to_str().unwrap());
    for args in [
        &["verify", "--against-leader"][..],
        &["repair"],
        &["repair", "--data-dir", d],
        &["repair", "--config", c, "--against-leader"],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
    }
    for args in [
        &["verify", "--config", c, "--against-leader"][..],
        &["repair", "--config", c],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, Some(1), "{args:?}: {out}{err}");
        // Once, with the reason as people write it.
        assert!(
            err.contains("broker 127.0.0.1:1: connect failed: Connection refused")
                && err.matches("127.0.0.1:1").count() == 1
                && !err.contains("os error"),
            "{args:?} names the broker once: {err}"
        );
    }
    // Without --against-leader, --config only names the data dir to verify locally.
    let (code, out, _) = run(&["verify", "--config", c]);
    assert_eq!(code, Some(1), "an empty data dir fails: {out}");
    assert!(out.contains("holds no partition"), "{out}");
}

#[test]
fn verify_against_the_leader_names_a_partition_it_cannot_compare_once() {
    let (_leader, _dir, data) = stopped_replica("audit", 10, |c| c);
    // The leader has only partition 0: the local audit-1 has nothing to be compared with.
    std::fs::rename(data.join("audit-0"), data.join("audit-1")).unwrap();
    let cfg = data.parent().unwrap().join("follower.toml");
    let (code, out, err) = run(&[
        "verify",
        "--config",
        cfg.to_str().unwrap(),
        "--against-leader",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("audit-1: not compared: the brokers' metadata does not list this partition"),
        "{out}"
    );
    assert_eq!(out.matches("audit-1").count(), 1, "{out}");
}

#[test]
fn under_journald_lines_carry_the_priority_instead_of_a_timestamp() {
    use std::os::unix::fs::MetadataExt;
    let leader = support::test_leader::TestLeader::start("j", 1);
    leader.append(0, 10, 5);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let cfg = support::Config::new(&data, &leader.addr())
        .follow("j")
        .write(dir.path());
    // The file the daemon's stderr goes to stands for the journal stream.
    let log = cfg.with_extension(format!("log.{}", std::process::id()));
    std::fs::write(&log, "").unwrap();
    let m = std::fs::metadata(&log).unwrap();
    let stream = format!("{}:{}", m.dev(), m.ino());
    let mut d = support::Daemon::start_with_env(
        &cfg,
        &[("JOURNAL_STREAM", stream.as_str()), ("RF_LOG", "INFO")],
    );
    support::wait_until(Duration::from_secs(10), "caught up", || {
        support::log_end(&data, "j", 0) == 10
    });
    assert_eq!(d.stop().code(), Some(0));
    let text = d.log_text();
    assert!(text.lines().count() > 3, "{text}");
    for line in text.lines() {
        assert!(
            ["<3>ERROR ", "<4>WARN ", "<6>INFO "]
                .iter()
                .any(|p| line.starts_with(p)),
            "no priority prefix, or a timestamp: {line}"
        );
    }
    // Another stream than the journal's: timestamps as usual.
    let dir2 = tempfile::tempdir().unwrap();
    let cfg2 = support::Config::new(&dir2.path().join("data"), &leader.addr())
        .follow("j")
        .write(dir2.path());
    let mut d2 = support::Daemon::start_with_env(&cfg2, &[("JOURNAL_STREAM", "1:2")]);
    support::wait_until(Duration::from_secs(10), "started", || {
        d2.log_text().contains("following")
    });
    assert_eq!(d2.stop().code(), Some(0));
    assert!(d2.log_text().starts_with("20"), "{}", d2.log_text());
}
