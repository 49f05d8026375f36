//! The follower as a SASL client against a SASL server from outside this project:
//! `tests/support/sasl_proxy.py` (scramp's SCRAM-SHA-256/512 server, a PLAIN check) in front
//! of a real Tansu, with `security.protocol = "SASL_PLAINTEXT"`.
//!
//! With each mechanism the replica ends byte-identical with Tansu and keeps up; with a
//! 3 s session lifetime it re-authenticates on its open connections (KIP-368) instead of
//! being closed; a wrong password at start-up exits 1 with one ERROR per bootstrap broker
//! naming the broker, mechanism and user and writes nothing, and so does a mechanism the
//! broker does not offer or a broker without SASL; a password gone wrong while
//! running is refused once per backoff, never in a loop, and the daemon catches up once
//! the password file is right again; a password file readable by others is a bad
//! configuration (exit 2). No password is in any log line, `check-config` or `status`.

use crate::support;
use crate::support::sasl::{Logs, SaslProxy, password_file, sasl_plaintext, set_password};
use crate::support::test_leader::TestLeader;
use crate::support::{Daemon, Leader, local_log_bytes, log_end, run_cli, wait_until};
use replica_follower::checkpoint::TopicPartition;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const USER: &str = "replica";
const PASSWORD: &str = "pw-Replica-91c4e";
const WRONG: &str = "pw-Wrong-5d0a7";
const MECHANISMS: [&str; 3] = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"];

/// The TLS tests' quick settings, with backoffs capped at 1 s.
fn quick(c: support::Config) -> support::Config {
    super::tls::quick(c).set("fetch.backoff_max_ms", 1000)
}

/// `check-config`, `status --config` and `status --config --json` on `cfg`: each must
/// succeed; their output goes into `logs`.
fn inspect_outputs(cfg: &Path, logs: &mut Logs) {
    let c = cfg.to_str().expect("utf-8 path");
    for args in [
        &["check-config", "--config", c][..],
        &["status", "--config", c],
        &["status", "--config", c, "--json"],
    ] {
        let (code, out, err) = run_cli(args);
        assert_eq!(code, Some(0), "{args:?}: {out}{err}");
        logs.add(format!("{args:?}"), out + &err);
    }
}

#[test]
fn a_replica_over_sasl_plaintext_is_byte_identical_with_each_mechanism() {
    let tmp = tempfile::tempdir().unwrap();
    let mut leader = Leader::start("tansu", 1);
    let proxy = SaslProxy::start(&leader.bootstrap, &[(USER, PASSWORD)], &[]);
    let pw = password_file(tmp.path(), "pw", PASSWORD);
    let mut logs = Logs::default();

    struct Follower {
        topic: String,
        data: PathBuf,
        cfg: PathBuf,
        daemon: Daemon,
        end: i64,
    }
    // One follower per mechanism, all at once, each with a topic of its own.
    let mut followers = Vec::new();
    for (i, mech) in MECHANISMS.iter().enumerate() {
        let topic = format!("sasl-{}", mech.to_lowercase());
        leader.create_topic(&topic, 1);
        let codec = ["none", "gzip", "zstd"][i];
        let end = leader.produce(&topic, 0, 300, codec, i as u64).1 + 1;
        let dir = tmp.path().join(mech);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        let cfg = support::Config::new(&data, &proxy.addr)
            .follow(&topic)
            .apply(|c| sasl_plaintext(c, mech, USER, &pw))
            .apply(quick)
            .write(&dir);
        let daemon = Daemon::start_with_env(&cfg, &[("RF_LOG", "debug")]);
        followers.push(Follower {
            topic,
            data,
            cfg,
            daemon,
            end,
        });
    }
    for f in &followers {
        wait_until(
            Duration::from_secs(30),
            &format!("{} to catch up over SASL", f.topic),
            || log_end(&f.data, &f.topic, 0) == f.end,
        );
    }
    // More records: each keeps up.
    for (i, f) in followers.iter_mut().enumerate() {
        f.end = leader.produce(&f.topic, 0, 200, "lz4", 10 + i as u64).1 + 1;
    }
    for f in &followers {
        wait_until(
            Duration::from_secs(30),
            &format!("{} to keep up over SASL", f.topic),
            || log_end(&f.data, &f.topic, 0) == f.end,
        );
        support::assert_byte_identical(
            &leader.bootstrap,
            &f.data,
            &TopicPartition::new(&f.topic, 0),
            0,
        );
        inspect_outputs(&f.cfg, &mut logs);
    }
    let log = proxy.log();
    for mech in MECHANISMS {
        assert!(
            log.contains(&format!("auth ok user={USER} mechanism={mech} ")),
            "no {mech} authentication at the proxy: {log}"
        );
    }
    assert_eq!(proxy.failures(), 0, "{log}");
    for mut f in followers {
        assert_eq!(f.daemon.stop().code(), Some(0), "{}", f.daemon.log_text());
        let text = f.daemon.log_text();
        assert!(!text.contains(" ERROR "), "{}: {text}", f.topic);
        logs.add(format!("daemon {}", f.topic), text);
    }
    logs.add("proxy", proxy.log());
    assert!(logs.assert_free_of(&[PASSWORD]) > 0);
}

#[test]
fn re_authentication_before_the_session_lifetime_keeps_the_connections_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut leader = Leader::start("tansu", 1);
    let proxy = SaslProxy::start(
        &leader.bootstrap,
        &[(USER, PASSWORD)],
        &["--session-lifetime-ms", "3000"],
    );
    let pw = password_file(tmp.path(), "pw", PASSWORD);
    leader.create_topic("reauth", 1);
    let mut end = leader.produce("reauth", 0, 100, "none", 1).1 + 1;
    let data = tmp.path().join("data");
    let cfg = support::Config::new(&data, &proxy.addr)
        .follow("reauth")
        .apply(|c| sasl_plaintext(c, "SCRAM-SHA-512", USER, &pw))
        .apply(quick)
        .write(tmp.path());
    let mut d = Daemon::start_with_env(&cfg, &[("RF_LOG", "debug")]);
    wait_until(Duration::from_secs(30), "catch-up over SASL", || {
        log_end(&data, "reauth", 0) == end
    });
    // About 8 s of records in small rounds, each fetched before the next: sessions of 3 s
    // run out two or three times on every connection that stays open.
    let following = Instant::now();
    let mut round = 0;
    while following.elapsed() < Duration::from_secs(8) {
        round += 1;
        end = leader.produce("reauth", 0, 20, "snappy", 100 + round).1 + 1;
        wait_until(
            Duration::from_secs(10),
            &format!("round {round} fetched"),
            || log_end(&data, "reauth", 0) == end,
        );
        std::thread::sleep(Duration::from_millis(300)); // pacing the producer, not waiting
    }
    let log = proxy.log();
    assert!(
        !log.contains("expired"),
        "a connection was closed for an expired session: {log}"
    );
    let per_peer = proxy.successes_by_peer();
    let most = per_peer.values().copied().max().unwrap_or(0);
    // The fetcher's connection lived ≥ 8 s: authenticated, then again at 85–95 % of 3 s
    // at least twice.
    assert!(
        most >= 3,
        "no connection re-authenticated twice in 8 s ({per_peer:?}): {log}"
    );
    assert_eq!(proxy.failures(), 0, "{log}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    support::assert_byte_identical(
        &leader.bootstrap,
        &data,
        &TopicPartition::new("reauth", 0),
        0,
    );
    let text = d.log_text();
    assert!(!text.contains(" ERROR "), "{text}");
    let mut logs = Logs::default();
    logs.add("daemon", text);
    logs.add("proxy", proxy.log());
    logs.assert_free_of(&[PASSWORD]);
}

/// Starts a daemon on `bootstrap` with `mechanism` and the password `password` and asserts
/// it exits 1 at start-up, in bounded time, with one ERROR per broker naming it and holding
/// every one of `says`, and wrote no data. Returns its log.
fn refused_at_start(
    dir: &Path,
    bootstrap: &[&str],
    mechanism: &str,
    password: &str,
    says: &[String],
) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let pw = password_file(dir, "pw", password);
    let data = dir.join("data");
    let cfg = support::Config::new(&data, &bootstrap.join(","))
        .follow("t")
        .apply(|c| sasl_plaintext(c, mechanism, USER, &pw))
        .apply(quick)
        .write(dir);
    let started = Instant::now();
    let log = support::assert_refused_at_start(&cfg, &data, bootstrap, |b| {
        let mut all = vec![format!("broker {b}")];
        all.extend(says.iter().cloned());
        all
    });
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    log
}

#[test]
fn authentication_refused_at_start_up_exits_1_naming_broker_mechanism_and_user() {
    let tmp = tempfile::tempdir().unwrap();
    let leader = Leader::start("tansu", 1);
    let mut logs = Logs::default();

    // A wrong password, refused by both bootstrap brokers.
    let proxies = [
        SaslProxy::start(&leader.bootstrap, &[(USER, PASSWORD)], &[]),
        SaslProxy::start(&leader.bootstrap, &[(USER, PASSWORD)], &[]),
    ];
    let addrs: Vec<&str> = proxies.iter().map(|p| p.addr.as_str()).collect();
    let dir = tmp.path().join("wrong-password");
    let pw = dir.join("pw");
    let log = refused_at_start(
        &dir,
        &addrs,
        "SCRAM-SHA-256",
        WRONG,
        &[
            format!("refused SCRAM-SHA-256 authentication as `{USER}`: SASL_AUTHENTICATION_FAILED"),
            format!(
                "check security.sasl_username (`{USER}`) and the password in `{}`",
                pw.display()
            ),
        ],
    );
    for (e, addr) in log.lines().filter(|l| l.contains(" ERROR ")).zip(&addrs) {
        assert!(e.contains(&format!("broker {addr} refused")), "{e}");
    }
    // The first full round refused: each broker was tried once.
    for p in &proxies {
        assert_eq!(p.failures(), 1, "{}", p.log());
        logs.add("proxy", p.log());
    }
    logs.add("daemon, wrong password", log);

    // A mechanism the broker does not offer.
    let only_512 = SaslProxy::start(
        &leader.bootstrap,
        &[(USER, PASSWORD)],
        &["--mechanisms", "SCRAM-SHA-512"],
    );
    let log = refused_at_start(
        &tmp.path().join("mechanism"),
        &[&only_512.addr],
        "SCRAM-SHA-256",
        PASSWORD,
        &["does not offer SASL mechanism SCRAM-SHA-256 (it offers SCRAM-SHA-512); check security.sasl_mechanism".to_string()],
    );
    logs.add("daemon, mechanism", log);
    logs.add("proxy", only_512.log());

    // Tansu without SASL: it lists SaslHandshake and PLAIN, and refuses PLAIN with
    // UNSUPPORTED_SASL_MECHANISM.
    let log = refused_at_start(
        &tmp.path().join("tansu-plain"),
        &[&leader.bootstrap],
        "PLAIN",
        PASSWORD,
        &["lists SASL mechanism PLAIN yet refused it (UNSUPPORTED_SASL_MECHANISM): SASL is probably not enabled on that listener; check security.protocol and the port".to_string()],
    );
    logs.add("daemon, Tansu without SASL", log);

    // A broker whose ApiVersions lists no SASL API at all.
    let plain = TestLeader::start("t", 1);
    let log = refused_at_start(
        &tmp.path().join("no-sasl"),
        &[&plain.addr()],
        "SCRAM-SHA-512",
        PASSWORD,
        &["is not a SASL listener (check security.protocol, and the port)".to_string()],
    );
    logs.add("daemon, no SASL", log);
    logs.assert_free_of(&[PASSWORD, WRONG]);
}

#[test]
fn a_password_refused_while_running_is_retried_with_backoff_never_in_a_loop() {
    let tmp = tempfile::tempdir().unwrap();
    let mut leader = Leader::start("tansu", 1);
    let proxy = SaslProxy::start(&leader.bootstrap, &[(USER, PASSWORD)], &[]);
    let addr = proxy.addr.clone();
    let pw = password_file(tmp.path(), "pw", PASSWORD);
    leader.create_topic("rotate", 1);
    let end = leader.produce("rotate", 0, 100, "none", 1).1 + 1;
    let data = tmp.path().join("data");
    let cfg = support::Config::new(&data, &addr)
        .follow("rotate")
        .apply(|c| sasl_plaintext(c, "SCRAM-SHA-256", USER, &pw))
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 500)
        .set("fetch.backoff_max_ms", 4000)
        .set("checkpoint.interval_ms", 200)
        .set("log.flush_interval_ms", 100)
        .write(tmp.path());
    let mut d = Daemon::start(&cfg);
    wait_until(Duration::from_secs(30), "catch-up over SASL", || {
        log_end(&data, "rotate", 0) == end
    });
    let tp = TopicPartition::new("rotate", 0);
    let before = local_log_bytes(&data, &tp);
    let mut logs = Logs::default();
    logs.add("first proxy", proxy.log());

    // The password in the file goes wrong (it is read at each authentication), and every
    // connection drops: a new proxy on the same address.
    set_password(&pw, WRONG);
    drop(proxy);
    let proxy = SaslProxy::start_on(&addr, &leader.bootstrap, &[(USER, PASSWORD)], &[]);
    let window = Instant::now();
    let more = leader.produce("rotate", 0, 50, "none", 2).1 + 1;
    std::thread::sleep(Duration::from_secs(6)); // the window the refusals are counted in
    let failures = proxy.failures();
    let secs = window.elapsed().as_secs_f64();
    let log = d.log_text();
    // 500 ms doubling up to 4 s: attempts at about 0, 0.5, 1.5 and 3.5 s of the window, for
    // each of the fetcher's and the metadata connections.
    assert!(
        (2..=8).contains(&failures),
        "{failures} refused authentications in {secs:.1} s: {}\ndaemon: {log}",
        proxy.log()
    );
    assert!(
        log.lines().any(|l| l.contains(" ERROR ")
            && l.contains(&format!(
                "refused SCRAM-SHA-256 authentication as `{USER}`: SASL_AUTHENTICATION_FAILED"
            ))),
        "an ERROR names the mechanism and user: {log}"
    );
    assert!(d.is_running(), "the daemon keeps running: {log}");
    assert!(
        local_log_bytes(&data, &tp) == before,
        "nothing fetched while refused"
    );

    // The right password again: the next attempt authenticates and the replica catches up.
    set_password(&pw, PASSWORD);
    wait_until(Duration::from_secs(20), "catch-up after the fix", || {
        log_end(&data, "rotate", 0) == more
    });
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    support::assert_byte_identical(&leader.bootstrap, &data, &tp, 0);
    logs.add("daemon", d.log_text());
    logs.add("second proxy", proxy.log());
    logs.assert_free_of(&[PASSWORD, WRONG]);
}

#[test]
fn a_password_file_readable_by_others_is_a_bad_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let pw = password_file(tmp.path(), "pw", PASSWORD);
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o640)).unwrap();
    let data = tmp.path().join("data");
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let cfg = support::Config::new(&data, &nowhere)
        .follow("t")
        .apply(|c| sasl_plaintext(c, "PLAIN", USER, &pw))
        .apply(quick)
        .write(tmp.path());
    let c = cfg.to_str().unwrap();
    let mut logs = Logs::default();
    for cmd in ["check-config", "run"] {
        let (code, out, err) = run_cli(&[cmd, "--config", c]);
        assert_eq!(code, Some(2), "{cmd}: {out}{err}");
        for want in [
            "security.sasl_password_file".to_string(),
            format!("`{}` has mode 0640", pw.display()),
        ] {
            assert!(err.contains(&want), "{cmd}: {want:?} missing in {err}");
        }
        logs.add(cmd, out + &err);
    }
    assert!(support::segment_files(&data).is_empty());
    logs.assert_free_of(&[PASSWORD]);
}
