//! A store that cannot take the offsite copy never stops following, and says why once.
//!
//! The daemon follows the in-process test leader with `[offsite]` pointing at s3s-fs
//! (`tests/support/s3.rs`), which checks SigV4 signatures and the time they were made at:
//!
//! - a bucket that does not exist, a wrong secret key, a clock two hours ahead (the daemon
//!   under libfaketime): exactly one ERROR about offsite, naming the cause (the bucket, the
//!   credentials, the clock), and `status --json`'s `offsite.failing` says the same;
//! - an endpoint where nothing listens: one WARN, no ERROR, over more than one retry; and a
//!   store unreachable at first (a WARN) that then refuses the bucket: its one ERROR too;
//! - `offsite restore` and `offsite verify` with another key than the objects were sealed
//!   with: exit 2 naming `offsite.encryption_key_file`, nothing restored.
//!
//! In each case the replica keeps up with the leader while the uploads fail.

use crate::support::s3::{S3Server, write_key_file};
use crate::support::test_leader::TestLeader;
use crate::support::{self, Daemon};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const TOPIC: &str = "copied";
const BUCKET: &str = "rf-offsite";

/// libfaketime, where Debian's `faketime` package puts it (`/usr/lib/<triplet>/faketime/`;
/// tests/setup-env.sh installs it).
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists());
    found.unwrap_or_else(|| {
        panic!(
            "no /usr/lib/*/faketime/libfaketime.so.1: install Debian's faketime \
             (tests/setup-env.sh does, as root)"
        )
    })
}

/// A daemon following a fresh test leader (40 records), and what it was started with.
struct Setup {
    leader: TestLeader,
    data: PathBuf,
    config: PathBuf,
    daemon: Daemon,
    /// Holds the data dir and the config.
    _dir: tempfile::TempDir,
}

/// Starts a daemon with `offsite` (an `[offsite]` section) and `env`.
fn start(offsite: &str, env: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let leader = TestLeader::start(TOPIC, 1);
    leader.append(0, 40, 5);
    let config = support::Config::new(&data, &leader.addr())
        .follow(TOPIC)
        .set("fetch.max_wait_ms", 50)
        .write(dir.path());
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}\n{offsite}")).unwrap();
    let daemon = Daemon::start_with_env(&config, env);
    Setup {
        _dir: dir,
        leader,
        data,
        config,
        daemon,
    }
}

impl Setup {
    /// The replica holds what the leader holds, now and after 40 more records.
    fn keeps_up(&self) {
        for _ in 0..2 {
            let end = self.leader.log_end(0);
            self.wait(&format!("the replica to reach offset {end}"), || {
                support::log_end(&self.data, TOPIC, 0) == end
            });
            self.leader.append(0, 40, 5);
        }
    }

    /// `status --json`'s `offsite` (null before the data dir exists).
    fn offsite(&self) -> Value {
        if !self.data.is_dir() {
            return Value::Null;
        }
        support::status(&self.data)["offsite"].clone()
    }

    /// Polls `f` every 50 ms for up to 15 s; fails showing the daemon's log.
    fn wait(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !f() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the daemon's log:\n{}",
                self.daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Lines of the daemon's log at `level` (` ERROR `, ` WARN `) that are about offsite.
    fn offsite_lines(&self, level: &str) -> Vec<String> {
        self.daemon
            .log_text()
            .lines()
            .filter(|l| l.contains(level) && l.contains("offsite"))
            .map(str::to_string)
            .collect()
    }

    /// Waits for `status --json` to say the uploads fail, keeps up with the leader meanwhile,
    /// and returns (the one ERROR line, `offsite.failing`).
    fn one_error(&self) -> (String, String) {
        self.wait("offsite.failing", || self.offsite()["failing"].is_string());
        self.keeps_up();
        let failing = self.offsite()["failing"].as_str().unwrap().to_string();
        let errors = self.offsite_lines(" ERROR ");
        assert_eq!(
            errors.len(),
            1,
            "not one ERROR about offsite:\n{}",
            self.daemon.log_text()
        );
        assert!(
            self.offsite_lines(" WARN ").is_empty(),
            "a WARN besides the ERROR:\n{}",
            self.daemon.log_text()
        );
        (errors[0].clone(), failing)
    }
}

#[test]
fn a_bucket_that_does_not_exist_is_one_error_naming_it() {
    let server = S3Server::s3s_fs(BUCKET);
    let creds = tempfile::tempdir().unwrap();
    let offsite = server
        .config_toml(None, creds.path())
        .replace(&format!("\"{BUCKET}\""), "\"rf-no-such-bucket\"");
    let s = start(&offsite, &[]);
    let (error, failing) = s.one_error();
    for said in [&error, &failing] {
        assert!(
            said.contains("bucket `rf-no-such-bucket` does not exist"),
            "{said}"
        );
    }
}

#[test]
fn a_wrong_secret_key_is_one_error_naming_the_credentials() {
    let server = S3Server::s3s_fs(BUCKET);
    let creds = tempfile::tempdir().unwrap();
    let offsite = server.config_toml(None, creds.path());
    std::fs::write(creds.path().join("secret"), "not-the-secret").unwrap();
    let s = start(&offsite, &[]);
    let (error, failing) = s.one_error();
    for said in [&error, &failing] {
        assert!(said.contains("credentials"), "{said}");
    }
}

#[test]
fn a_clock_two_hours_ahead_is_one_error_naming_the_clock() {
    let libfaketime = libfaketime();
    let server = S3Server::s3s_fs(BUCKET);
    let creds = tempfile::tempdir().unwrap();
    let offsite = server.config_toml(None, creds.path());
    let s = start(
        &offsite,
        &[
            ("LD_PRELOAD", libfaketime.to_str().unwrap()),
            ("FAKETIME", "+2h"),
            // The wall clock only, as a host whose clock is off has it: a monotonic clock
            // two hours ahead makes every timed wait (a futex's absolute deadline) last
            // two hours.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    let (error, failing) = s.one_error();
    for said in [&error, &failing] {
        assert!(said.contains("clock"), "{said}");
    }
}

#[test]
fn an_endpoint_where_nothing_listens_is_one_warning_and_no_error() {
    let port = support::free_port();
    let creds = tempfile::tempdir().unwrap();
    let server_less = format!(
        "[offsite]\nendpoint = \"http://127.0.0.1:{port}\"\nbucket = \"{BUCKET}\"\n\
         access_key_file = \"{0}/access\"\nsecret_key_file = \"{0}/secret\"\nmax_delay_ms = 2000\n",
        creds.path().display()
    );
    for f in ["access", "secret"] {
        let p = creds.path().join(f);
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let s = start(&server_less, &[]);
    s.wait("offsite.failing", || s.offsite()["failing"].is_string());
    s.keeps_up();
    // Retries at about 1, 2, 4 and 8 s: several failed requests, said once.
    std::thread::sleep(Duration::from_secs(8));
    let o = s.offsite();
    assert!(o["errors"].as_u64().unwrap() >= 3, "{o}");
    let warnings = s.offsite_lines(" WARN ");
    assert_eq!(warnings.len(), 1, "{}", s.daemon.log_text());
    assert!(
        s.offsite_lines(" ERROR ").is_empty(),
        "{}",
        s.daemon.log_text()
    );
}

#[test]
fn a_wrong_bucket_found_once_the_store_answers_is_an_error_after_the_warning() {
    let server = S3Server::s3s_fs(BUCKET);
    let creds = tempfile::tempdir().unwrap();
    let offsite = server
        .config_toml(None, creds.path())
        .replace(&format!("\"{BUCKET}\""), "\"rf-no-such-bucket\"");
    server.proxy.cut();
    let s = start(&offsite, &[]);
    s.wait("the WARN of an unreachable store", || {
        s.offsite_lines(" WARN ").len() == 1
    });
    assert!(
        s.offsite_lines(" ERROR ").is_empty(),
        "{}",
        s.daemon.log_text()
    );
    server.proxy.restore();
    s.wait("the ERROR naming the bucket", || {
        !s.offsite_lines(" ERROR ").is_empty()
    });
    s.keeps_up();
    let errors = s.offsite_lines(" ERROR ");
    assert_eq!(errors.len(), 1, "{}", s.daemon.log_text());
    assert!(
        errors[0].contains("bucket `rf-no-such-bucket` does not exist"),
        "{}",
        errors[0]
    );
    assert_eq!(
        s.offsite_lines(" WARN ").len(),
        1,
        "{}",
        s.daemon.log_text()
    );
    // `.live-status` is written every second.
    s.wait("offsite.failing to name the bucket", || {
        s.offsite()["failing"]
            .as_str()
            .is_some_and(|f| f.contains("rf-no-such-bucket"))
    });
}

#[test]
fn restore_and_verify_with_another_key_exit_2_naming_the_key_file() {
    let server = S3Server::s3s_fs(BUCKET);
    let creds = tempfile::tempdir().unwrap();
    let (key, other) = (creds.path().join("key"), creds.path().join("other-key"));
    write_key_file(&key, &[7; 32]);
    write_key_file(&other, &[8; 32]);
    let offsite = server.config_toml(Some(&key), creds.path());
    let mut s = start(&offsite, &[]);
    s.wait("the replica uploaded whole", || {
        let o = s.offsite();
        o["last_manifest_ms"].is_i64()
            && o["pending_bytes"] == 0
            && o["uploaded_objects"].as_u64() > Some(1)
    });
    s.daemon.stop();
    let config = s.config.to_str().unwrap();
    let restored = s.data.with_file_name("restored");
    let restore = [
        "offsite",
        "restore",
        "--config",
        config,
        "--to",
        restored.to_str().unwrap(),
    ];
    let verify = ["offsite", "verify", "--config", config];
    let (code, out, err) = support::run_cli(&verify);
    assert_eq!(
        code,
        Some(0),
        "verify with the key the objects were sealed with: {out}{err}"
    );

    let text = std::fs::read_to_string(&s.config).unwrap();
    let key_path = key.to_str().unwrap();
    assert!(text.contains(key_path), "{text}");
    std::fs::write(&s.config, text.replace(key_path, other.to_str().unwrap())).unwrap();
    for args in [&restore[..], &verify[..]] {
        let (code, out, err) = support::run_cli(args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(
            err.starts_with("error: ") && err.contains("offsite.encryption_key_file"),
            "{args:?}: {err}"
        );
    }
    assert!(
        std::fs::read_dir(&restored).map_or(true, |mut d| d.next().is_none()),
        "a restore with another key wrote to {}",
        restored.display()
    );
}
