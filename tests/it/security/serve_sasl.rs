//! The serve listener with SASL: `replica-follower serve --config` on a stopped replica of
//! Tansu, users written by `replica-follower add-user`.
//!
//! Over SASL_SSL with SCRAM-SHA-512 a confluent-kafka consumer reads every record exactly as
//! it reads them from Tansu; the same consumer with a wrong password, with TLS and no SASL,
//! or with neither gets nothing; a chained replica-follower over SASL_SSL (SCRAM-SHA-256)
//! ends byte-identical. On a SASL_PLAINTEXT listener our own client sees ApiVersions
//! answered and anything else before authentication close the connection, a wrong PLAIN
//! password refused with SASL_AUTHENTICATION_FAILED and the connection closed, the right
//! one admitted. No password is in any log line.

use crate::support;
use crate::support::sasl::{Logs, password_file};
use crate::support::tls::Pki;
use crate::support::{Daemon, Leader, free_port, local_log_bytes, log_end, run_cli, wait_until};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::BrokerConnection;
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::{ApiKey, metadata, sasl};
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const READER_PW: &str = "pw-Reader-3e81b";
const CHAIN_PW: &str = "pw-Chain-a47f2";
const WRONG: &str = "pw-Wrong-c90d1";

/// `replica-follower serve --config`, its stderr in a file; SIGTERM when dropped.
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    fn start(cfg: &Path, listen: &str) -> Serve {
        let log = cfg.with_extension("serve.log");
        let child = Command::new(support::bin())
            .args(["serve", "--config"])
            .arg(cfg)
            .env("RF_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("serve log"))
            .spawn()
            .expect("start serve");
        let s = Serve { child, log };
        wait_until(Duration::from_secs(10), "serve to listen", || {
            std::net::TcpStream::connect(listen).is_ok()
        });
        s
    }

    /// SIGTERM; everything it logged.
    fn stop(self) -> String {
        let log = self.log.clone();
        drop(self);
        std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// `add-user` for `user` with `mechanisms`, the password from a 0600 file; its output.
fn add_user(users: &Path, user: &str, mechanisms: &[&str], pw_file: &Path) -> String {
    let mut args = vec![
        "add-user".to_string(),
        "--users-file".into(),
        users.display().to_string(),
        "--user".into(),
        user.into(),
        "--password-file".into(),
        pw_file.display().to_string(),
    ];
    for m in mechanisms {
        args.extend(["--mechanism".to_string(), m.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run_cli(&args);
    assert_eq!(code, Some(0), "add-user {user}: {out}{err}");
    out + &err
}

/// `add-user` for `user` (both SCRAM mechanisms) with the password on standard input.
fn add_user_from_stdin(users: &Path, user: &str, password: &str) -> String {
    let mut child = Command::new(support::bin())
        .args(["add-user", "--users-file"])
        .arg(users)
        .args(["--user", user])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start add-user");
    writeln!(child.stdin.take().expect("stdin"), "{password}").expect("write the password");
    let out = child.wait_with_output().expect("add-user");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "add-user {user}: {text}");
    text
}

/// clients.py consume of partition 0 of `topic` at `bootstrap` with librdkafka settings
/// `conf`, for at most `timeout` seconds (spawned, so several can run at once).
fn spawn_consumer(bootstrap: &str, topic: &str, conf: &Value, timeout: u32) -> Child {
    Command::new(support::python())
        .arg(support::manifest_dir().join("tests/support/clients.py"))
        .args(["consume", "--bootstrap", bootstrap, "--topic", topic])
        .args(["--partition", "0", "--timeout", &timeout.to_string()])
        .args(["--conf", &conf.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run clients.py")
}

fn text_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn serve_over_sasl_ssl_admits_scram_clients_and_refuses_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let ca = pki.path("ca.pem");
    let mut leader = Leader::start("tansu", 1);
    let (_a, data, _, end) = support::stopped_replica_of(&mut leader, "served", 2);
    let mut logs = Logs::default();

    // Users: `reader` for SCRAM-SHA-512 from a password file, `chain` for both from stdin.
    let users = tmp.path().join("users");
    let reader_pw = password_file(tmp.path(), "reader.pw", READER_PW);
    logs.add(
        "add-user reader",
        add_user(&users, "reader", &["SCRAM-SHA-512"], &reader_pw),
    );
    logs.add(
        "add-user chain",
        add_user_from_stdin(&users, "chain", CHAIN_PW),
    );
    let mode = std::fs::metadata(&users).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the users file is the owner's only");
    logs.add("users file", std::fs::read_to_string(&users).unwrap());

    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("served")
        .set("serve.listen", listen.as_str())
        .set("serve.protocol", "SASL_SSL")
        .apply(|c| pki.server_files(c))
        .set("serve.sasl_users_file", users.display().to_string())
        .write(tmp.path());
    let serve = Serve::start(&cfg, &listen);

    // confluent-kafka over SASL_SSL with SCRAM-SHA-512: every record, as Tansu serves it.
    let sasl_ssl = |password: &str| {
        json!({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
               "sasl.username": "reader", "sasl.password": password, "ssl.ca.location": ca})
    };
    let ok = spawn_consumer(&listen, "served", &sasl_ssl(READER_PW), 30)
        .wait_with_output()
        .unwrap();
    logs.add("consumer", text_of(&ok));
    assert!(ok.status.success(), "{}", text_of(&ok));
    let v: Value = serde_json::from_slice(&ok.stdout).expect("clients.py prints JSON");
    assert_eq!(v["errors"], json!([]), "{v}");
    let served = v["records"].as_array().expect("records").clone();
    let from_leader = support::consume_all(&leader.bootstrap, "served", 0, "read_uncommitted");
    assert_eq!(served.len() as i64, end, "every record over SASL_SSL");
    assert!(
        served == from_leader,
        "the replica's records differ from Tansu's"
    );

    // Debian's kcat (librdkafka 2.0.2, which takes a SaslHandshake range without v0 for no
    // SASL at all) reads every record with PLAIN over TLS. (Its SCRAM sends the client nonce
    // twice in client-final, which scramp refuses as this listener does.)
    let out = std::process::Command::new(support::kcat())
        .args(["-C", "-b", &listen, "-t", "served", "-p", "0"])
        .args(["-o", "beginning", "-e", "-q", "-m", "20", "-f", "%o\n"])
        .args([
            "-X",
            "security.protocol=SASL_SSL",
            "-X",
            "sasl.mechanisms=PLAIN",
        ])
        .args(["-X", "sasl.username=reader"])
        .arg("-X")
        .arg(format!("sasl.password={READER_PW}"))
        .arg("-X")
        .arg(format!("ssl.ca.location={}", ca.display()))
        .output()
        .unwrap();
    logs.add("kcat", text_of(&out));
    assert!(out.status.success(), "kcat: {}", text_of(&out));
    let offsets: Vec<i64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().expect("an offset a line"))
        .collect();
    assert_eq!(offsets, (0..end).collect::<Vec<_>>(), "kcat over SASL_SSL");

    // Refused, all at once: a wrong password; TLS without SASL; neither.
    let refused = [
        ("wrong password", sasl_ssl(WRONG)),
        (
            "SSL without SASL",
            json!({"security.protocol": "SSL", "ssl.ca.location": ca}),
        ),
        ("PLAINTEXT", json!({"security.protocol": "PLAINTEXT"})),
    ];
    let children: Vec<Child> = refused
        .iter()
        .map(|(_, conf)| spawn_consumer(&listen, "served", conf, 6))
        .collect();
    for ((what, _), child) in refused.iter().zip(children) {
        let out = child.wait_with_output().unwrap();
        let text = text_of(&out);
        logs.add(format!("consumer, {what}"), text.clone());
        assert!(
            !out.status.success(),
            "{what}: the consumer succeeded: {text}"
        );
        assert!(
            out.stdout.is_empty() && text.contains("last offset read None"),
            "{what}: records were read: {text}"
        );
        if *what == "wrong password" {
            assert!(
                text.contains("SASL authentication error"),
                "{what}: librdkafka reports the refusal: {text}"
            );
        }
    }

    // A chained replica over SASL_SSL with SCRAM-SHA-256.
    let b = tmp.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let b_data = b.join("data");
    let chain_pw = password_file(&b, "pw", CHAIN_PW);
    let b_cfg = support::Config::new(&b_data, &listen)
        .follow("served")
        .set("security.protocol", "SASL_SSL")
        .set("security.ssl_ca_file", ca.display().to_string())
        .set("security.sasl_mechanism", "SCRAM-SHA-256")
        .set("security.sasl_username", "chain")
        .set(
            "security.sasl_password_file",
            chain_pw.display().to_string(),
        )
        .set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.segment_bytes", 4096)
        .set("log.flush_interval_ms", 100)
        .write(&b);
    let mut d = Daemon::start_with_env(&b_cfg, &[("RF_LOG", "debug")]);
    wait_until(
        Duration::from_secs(30),
        "the chained replica to catch up",
        || log_end(&b_data, "served", 0) == end,
    );
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let tp = TopicPartition::new("served", 0);
    assert!(
        local_log_bytes(&b_data, &tp) == local_log_bytes(&data, &tp),
        "the chained replica differs from the served one"
    );
    let b_log = d.log_text();
    assert!(!b_log.contains(" ERROR "), "{b_log}");
    logs.add("chained daemon", b_log);
    logs.add("serve", serve.stop());
    assert!(logs.assert_free_of(&[READER_PW, CHAIN_PW, WRONG]) > 0);
}

/// One SaslHandshake v1 + SaslAuthenticate with PLAIN on `conn`; the authenticate response.
fn plain(
    conn: &mut BrokerConnection,
    user: &str,
    password: &str,
) -> anyhow::Result<sasl::AuthenticateResponse> {
    let body = conn.send(ApiKey::SaslHandshake, 1, Duration::ZERO, |w| {
        sasl::encode_handshake_request(w, "PLAIN")
    })?;
    let hs = sasl::decode_handshake_response(body)?;
    assert_eq!(hs.error, ErrorCode::NONE, "{:?}", hs.mechanisms);
    let v = conn.require_version(ApiKey::SaslAuthenticate)?;
    let token = format!("\0{user}\0{password}");
    let body = conn.send(ApiKey::SaslAuthenticate, v, Duration::ZERO, |w| {
        sasl::encode_authenticate_request(w, v, token.as_bytes())
    })?;
    Ok(sasl::decode_authenticate_response(body, v)?)
}

/// Metadata v1 for the topic `raw`.
fn metadata_v1(conn: &mut BrokerConnection) -> anyhow::Result<metadata::MetadataResponse> {
    let body = conn.send(ApiKey::Metadata, 1, Duration::ZERO, |w| {
        metadata::encode_request(w, 1, &["raw".to_string()])
    })?;
    Ok(metadata::decode_response(body, 1)?)
}

#[test]
fn a_sasl_plaintext_listener_answers_only_sasl_before_authentication() {
    let tmp = tempfile::tempdir().unwrap();
    let mut leader = Leader::start("tansu", 1);
    let (_a, data, _, _) = support::stopped_replica_of(&mut leader, "raw", 1);
    let users = tmp.path().join("users");
    let pw = password_file(tmp.path(), "raw.pw", READER_PW);
    let mut logs = Logs::default();
    logs.add("add-user", add_user(&users, "raw", &["SCRAM-SHA-256"], &pw));
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("raw")
        .set("serve.listen", listen.as_str())
        .set("serve.protocol", "SASL_PLAINTEXT")
        .set("serve.sasl_users_file", users.display().to_string())
        .write(tmp.path());
    let serve = Serve::start(&cfg, &listen);
    let connect = || BrokerConnection::connect(&listen, "raw-test", 1 << 20);

    // ApiVersions is answered and lists the SASL APIs; Metadata before authentication
    // gets the connection closed.
    let mut c = connect().expect("ApiVersions answered before authentication");
    assert_eq!(c.version(ApiKey::SaslHandshake), Some(1));
    assert!(c.version(ApiKey::SaslAuthenticate).is_some());
    let e = metadata_v1(&mut c).expect_err("Metadata before authentication");
    logs.add("metadata refused", format!("{e:#}"));

    // A wrong password: SASL_AUTHENTICATION_FAILED, then the connection is closed.
    let mut c = connect().unwrap();
    let r = plain(&mut c, "raw", WRONG).expect("an answer to a wrong password");
    assert_eq!(r.error, ErrorCode::SASL_AUTHENTICATION_FAILED, "{r:?}");
    assert!(
        metadata_v1(&mut c).is_err(),
        "the connection stays open after a refusal"
    );

    // The right one (PLAIN, checked against the SCRAM-SHA-256 entry): Metadata answered.
    let mut c = connect().unwrap();
    let r = plain(&mut c, "raw", READER_PW).unwrap();
    assert_eq!(r.error, ErrorCode::NONE, "{r:?}");
    let md = metadata_v1(&mut c).expect("Metadata after authentication");
    assert!(md.topics.iter().any(|t| t.name == "raw"), "{md:?}");
    drop(c);

    logs.add("serve", serve.stop());
    logs.assert_free_of(&[READER_PW, WRONG]);
}
