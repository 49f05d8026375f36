//! TLS against TLS from outside this project: socat's OPENSSL-LISTEN in front of Tansu and of
//! the mock cluster's brokers, certificates from the openssl CLI ([`support::tls`]).
//! Over TLS the replica ends byte-identical; an unknown CA, a hostname mismatch and a
//! missing client certificate each fail clearly, retried calmly, fatal at start-up, with no
//! data written. The serve listener speaks TLS to a chained follower and to confluent-kafka
//! (record ranges larger than its 256 KiB read chunk included),
//! closes a plaintext client, and with `ssl_client_ca_file` refuses a client without a
//! certificate.

use crate::support;
use crate::support::tls::{Pki, Terminator};
use crate::support::{Daemon, Leader, free_port, local_log_bytes, log_end, wait_until};
use replica_follower::checkpoint::TopicPartition;
use replica_follower::client::BrokerConnection;
use replica_follower::security::ClientSecurity;
use replica_follower::security::{SecurityProtocol, SecuritySection};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Short fetch waits and backoffs, frequent checkpoints, small segments.
pub(super) fn quick(c: support::Config) -> support::Config {
    c.set("fetch.max_wait_ms", 100)
        .set("fetch.backoff_ms", 200)
        .set("checkpoint.interval_ms", 200)
        .set("log.segment_bytes", 16384)
        .set("log.flush_interval_ms", 100)
}

fn client_security(pki: &Pki, client_cert: bool) -> Arc<ClientSecurity> {
    let (cert, key) = if client_cert {
        (Some(pki.path("client.pem")), Some(pki.path("client.key")))
    } else {
        (None, None)
    };
    ClientSecurity::from_section(&SecuritySection {
        protocol: SecurityProtocol::Ssl,
        ssl_ca_file: Some(pki.path("ca.pem")),
        ssl_cert_file: cert,
        ssl_key_file: key,
        ..SecuritySection::default()
    })
    .expect("client TLS settings")
}

/// Tansu on a port of its own, advertising the TLS terminator in front of it; the driver's
/// clients come through the terminator too.
/// Returns (terminator, leader, Tansu's own plaintext address).
fn tansu_behind_tls(pki: &Pki) -> (Terminator, Leader, String) {
    let (tansu_port, tls_port) = (free_port(), free_port());
    let term = Terminator::start(
        pki,
        "server",
        tls_port,
        &format!("127.0.0.1:{tansu_port}"),
        false,
    );
    let leader = Leader::start_with(
        "tansu",
        1,
        &[
            "--port",
            &tansu_port.to_string(),
            "--advertised",
            &term.addr,
            "--client-conf",
            &pki.librdkafka_conf(),
        ],
    );
    (term, leader, format!("127.0.0.1:{tansu_port}"))
}

#[test]
fn a_replica_of_tansu_over_tls_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let (term, mut leader, _) = tansu_behind_tls(&pki);
    leader.create_topic("tls", 1);
    let mut end = 0;
    for (i, codec) in ["none", "gzip", "zstd"].iter().enumerate() {
        end = leader.produce("tls", 0, 300, codec, i as u64).1 + 1;
    }
    let data = tmp.path().join("data");
    let cfg = support::Config::new(&data, &term.addr)
        .follow("tls")
        .apply(|c| pki.security(c))
        .apply(quick)
        .write(tmp.path());
    let mut d = Daemon::start(&cfg);
    wait_until(Duration::from_secs(30), "catch-up over TLS", || {
        log_end(&data, "tls", 0) == end
    });
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let tp = TopicPartition::new("tls", 0);
    let remote = support::leader_bytes_secured(&term.addr, &client_security(&pki, false), &tp, 0);
    assert!(!remote.is_empty());
    assert!(
        local_log_bytes(&data, &tp) == remote,
        "the replica differs from Tansu's bytes"
    );
    assert!(!d.log_text().contains("ERROR"), "{}", d.log_text());
}

#[test]
fn a_replica_of_the_mock_cluster_over_tls_is_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let mut leader = Leader::start("mock", 2);
    leader.create_topic("tlsmock", 2);
    let mut ends = [0i64; 2];
    for (p, end) in ends.iter_mut().enumerate() {
        *end = leader.produce("tlsmock", p as i32, 200, "lz4", p as u64).1 + 1;
    }
    // The leader's bytes while its brokers are still named by their own addresses.
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("tlsmock", p)).collect();
    let remote: Vec<Vec<u8>> = tps
        .iter()
        .map(|tp| support::leader_bytes(&leader.bootstrap, tp, 0))
        .collect();
    // A terminator in front of each broker (ids 1.. in bootstrap order), and Metadata
    // naming the brokers by the terminators from now on.
    let brokers: Vec<String> = leader.bootstrap.split(',').map(str::to_string).collect();
    let mut terms = Vec::new();
    for (i, b) in brokers.iter().enumerate() {
        let t = Terminator::start(&pki, "server", free_port(), b, false);
        let port: u16 = t.addr.rsplit_once(':').unwrap().1.parse().unwrap();
        leader.ok(serde_json::json!({"cmd": "advertise", "broker": i + 1,
            "host": "127.0.0.1", "port": port}));
        terms.push(t);
    }
    let bootstrap: Vec<&str> = terms.iter().map(|t| t.addr.as_str()).collect();
    let data = tmp.path().join("data");
    let cfg = support::Config::new(&data, &bootstrap.join(","))
        .follow("tlsmock")
        .apply(|c| pki.security(c))
        .apply(quick)
        .write(tmp.path());
    let mut d = Daemon::start(&cfg);
    wait_until(Duration::from_secs(30), "catch-up over TLS", || {
        (0..2).all(|p| log_end(&data, "tlsmock", p) == ends[p as usize])
    });
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    let log = d.log_text();
    for (tp, remote) in tps.iter().zip(&remote) {
        assert!(
            &local_log_bytes(&data, tp) == remote,
            "{tp}: the replica differs from the mock's bytes"
        );
    }
    // Fetched through the terminators: every connection went to their ports.
    for t in &terms {
        assert!(log.contains(&t.addr), "no connection to {}: {log}", t.addr);
    }
    for b in &brokers {
        assert!(
            !log.contains(&format!("at {b}")),
            "a plaintext connection to {b}: {log}"
        );
    }
}

/// Starts the daemon against `bootstrap` (terminators that refuse it) and asserts it exits 1
/// at start-up with one ERROR per broker containing every one of `says`, and wrote no data.
fn refused_at_start(tmp: &Path, pki: &Pki, bootstrap: &[&str], says: &[&str]) {
    let data = tmp.join("data");
    let cfg = support::Config::new(&data, &bootstrap.join(","))
        .follow("t")
        .apply(|c| pki.security(c))
        .apply(quick)
        .write(tmp);
    support::assert_refused_at_start(&cfg, &data, bootstrap, |b| {
        let mut all = vec![format!("broker {b}: ")];
        all.extend(says.iter().map(|s| s.to_string()));
        all
    });
}

#[test]
fn certificate_refusals_at_start_up_exit_1_naming_broker_subject_and_what_to_check() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    // Nothing behind the terminators: every refusal happens in the TLS handshake.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let ca = pki.path("ca.pem").display().to_string();

    let unknown = [
        Terminator::start(&pki, "unknown", free_port(), &nowhere, false),
        Terminator::start(&pki, "unknown", free_port(), &nowhere, false),
    ];
    let addrs: Vec<&str> = unknown.iter().map(|t| t.addr.as_str()).collect();
    let dir = tmp.path().join("unknown-ca");
    std::fs::create_dir_all(&dir).unwrap();
    refused_at_start(
        &dir,
        &pki,
        &addrs,
        &[
            "TLS handshake failed: its certificate (subject CN=rogue, issued by CN=Other CA)",
            &format!("is not signed by a CA in `ssl_ca_file` `{ca}`"),
        ],
    );

    let wrong = Terminator::start(&pki, "wrong", free_port(), &nowhere, false);
    let dir = tmp.path().join("wrong-host");
    std::fs::create_dir_all(&dir).unwrap();
    refused_at_start(
        &dir,
        &pki,
        &[&wrong.addr],
        &[
            "its certificate (subject CN=wrong.example, issued by CN=Test CA)",
            "is not valid for `127.0.0.1`, the host connected to (it is for wrong.example)",
        ],
    );

    let mtls = Terminator::start(&pki, "server", free_port(), &nowhere, true);
    let dir = tmp.path().join("no-client-cert");
    std::fs::create_dir_all(&dir).unwrap();
    refused_at_start(
        &dir,
        &pki,
        &[&mtls.addr],
        &[
            "the broker requires a client certificate",
            "set `ssl_cert_file` and `ssl_key_file` in [security]",
        ],
    );
}

#[test]
fn a_certificate_refused_while_running_is_an_error_retried_with_backoff() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let (term, mut leader, upstream) = tansu_behind_tls(&pki);
    leader.create_topic("swap", 1);
    let end = leader.produce("swap", 0, 100, "none", 1).1 + 1;
    let data = tmp.path().join("data");
    let cfg = support::Config::new(&data, &term.addr)
        .follow("swap")
        .apply(|c| pki.security(c))
        .apply(quick)
        .write(tmp.path());
    let mut d = Daemon::start_with_env(&cfg, &[("RF_LOG", "debug")]);
    wait_until(Duration::from_secs(30), "catch-up over TLS", || {
        log_end(&data, "swap", 0) == end
    });
    let before = local_log_bytes(&data, &TopicPartition::new("swap", 0));
    // The same address now presents a certificate of an unknown CA.
    let port: u16 = term.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    drop(term);
    let start = Instant::now();
    let _bad = Terminator::start(&pki, "unknown", port, &upstream, false);
    std::thread::sleep(Duration::from_secs(6));
    let secs = start.elapsed().as_secs_f64();
    let log = d.log_text();
    let refusals = log
        .lines()
        .filter(|l| l.contains("is not signed by a CA in `ssl_ca_file`"))
        .count();
    assert!(
        log.lines()
            .any(|l| l.contains(" ERROR ") && l.contains("CN=rogue")),
        "an ERROR names the certificate: {log}"
    );
    // Retried (backoff 200 ms, doubling), not in a loop.
    assert!(
        (2..=20).contains(&refusals),
        "{refusals} refusals logged in {secs:.1} s: {log}"
    );
    assert!(d.is_running(), "the daemon keeps running: {log}");
    assert_eq!(d.stop().code(), Some(0), "{}", d.log_text());
    assert!(
        local_log_bytes(&data, &TopicPartition::new("swap", 0)) == before,
        "nothing written through the refused connection"
    );
}

/// A daemon following `topic` from `bootstrap` into `dir/data`, configured further by
/// `tune`: its data dir and the daemon.
fn follower(
    dir: &Path,
    bootstrap: &str,
    topic: &str,
    tune: impl FnOnce(support::Config) -> support::Config,
) -> (PathBuf, Daemon) {
    std::fs::create_dir_all(dir).unwrap();
    let data = dir.join("data");
    let cfg = support::Config::new(&data, bootstrap)
        .follow(topic)
        .apply(tune)
        .write(dir);
    (data, Daemon::start(&cfg))
}

/// `[serve]` over TLS on `listen` with the test PKI's server certificate.
fn tls_serve(c: support::Config, pki: &Pki, listen: &str) -> support::Config {
    pki.server_files(c)
        .set("serve.listen", listen)
        .set("serve.protocol", "SSL")
}

#[test]
fn the_serve_listener_speaks_tls_to_a_chained_follower_and_confluent_kafka() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let mut leader = Leader::start("tansu", 1);
    leader.create_topic("chain", 1);
    let end = leader.produce("chain", 0, 400, "snappy", 3).1 + 1;
    // Follower A: plaintext from Tansu, serving over TLS.
    let listen = format!("127.0.0.1:{}", free_port());
    let (a_data, mut a) = follower(&tmp.path().join("a"), &leader.bootstrap, "chain", |c| {
        tls_serve(quick(c), &pki, &listen)
    });
    wait_until(Duration::from_secs(30), "A to catch up", || {
        log_end(&a_data, "chain", 0) == end
    });
    // A plaintext client is closed; the listener goes on.
    let plain =
        BrokerConnection::connect_with_timeout(&listen, "plain", 1 << 20, Duration::from_secs(5));
    let e = format!(
        "{:#}",
        plain.expect_err("a plaintext client must not be answered")
    );
    assert!(e.contains("it is a TLS listener"), "{e}");
    // Follower B: over TLS from A's listener.
    let (b_data, mut b) = follower(&tmp.path().join("b"), &listen, "chain", |c| {
        quick(pki.security(c))
    });
    wait_until(Duration::from_secs(30), "B to catch up over TLS", || {
        log_end(&b_data, "chain", 0) == end
    });
    assert_eq!(b.stop().code(), Some(0), "{}", b.log_text());
    let tp = TopicPartition::new("chain", 0);
    assert!(
        local_log_bytes(&b_data, &tp) == local_log_bytes(&a_data, &tp),
        "the chained replica differs from A's"
    );
    // confluent-kafka with security.protocol=SSL and ssl.ca.location reads it all.
    let v = support::clients_py(&[
        "consume",
        "--bootstrap",
        &listen,
        "--topic",
        "chain",
        "--partition",
        "0",
        "--conf",
        &pki.librdkafka_conf(),
    ]);
    assert_eq!(v["errors"], serde_json::json!([]), "{v}");
    let offsets = support::offsets_of(v["records"].as_array().expect("records"));
    assert_eq!(offsets.len() as i64, end, "every record read over TLS");
    assert_eq!(a.stop().code(), Some(0), "{}", a.log_text());
}

#[test]
fn serve_with_client_certificates_required_refuses_a_client_without_one() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let mut leader = Leader::start("tansu", 1);
    let (_dir, data, _cfg, end) = support::stopped_replica_of(&mut leader, "mtls", 2);
    // `serve --config`: the data dir and [serve] from a daemon configuration.
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("mtls")
        .apply(|c| tls_serve(c, &pki, &listen))
        .set(
            "serve.ssl_client_ca_file",
            pki.path("ca.pem").display().to_string(),
        )
        .write(tmp.path());
    let mut serve = ServeGuard::start(&cfg, &listen);
    let connect = |with_cert: bool| {
        BrokerConnection::connect_secured(
            &listen,
            &format!("broker {listen}"),
            &client_security(&pki, with_cert),
            "t",
            64 << 20,
            Duration::from_secs(5),
            |_| {},
        )
    };
    let e = connect(false).expect_err("no client certificate");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("the broker requires a client certificate"),
        "{msg}"
    );
    // With the client certificate the replica is served.
    let tp = TopicPartition::new("mtls", 0);
    drop(connect(true).expect("with a client certificate"));
    let remote = support::leader_bytes_secured(&listen, &client_security(&pki, true), &tp, 0);
    assert_eq!(local_log_bytes(&data, &tp), remote);
    assert!(end > 0);
    serve.stop();
}

/// `replica-follower serve`, ended by SIGTERM when dropped.
struct ServeGuard(std::process::Child);

impl ServeGuard {
    /// `serve --config cfg`, once it accepts connections on `listen`.
    fn start(cfg: &Path, listen: &str) -> ServeGuard {
        let serve = ServeGuard(
            std::process::Command::new(support::bin())
                .args(["serve", "--config"])
                .arg(cfg)
                .env("RF_LOG", "info")
                .spawn()
                .expect("start serve"),
        );
        wait_until(Duration::from_secs(10), "serve to listen", || {
            std::net::TcpStream::connect(listen).is_ok()
        });
        serve
    }

    fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for ServeGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}

/// Over TLS the listener reads record ranges from the segments in 256 KiB chunks: ranges of
/// up to 1 MiB (batches of ~0.5 MB, in 8 MiB segments) must arrive whole and in order.
#[test]
fn the_tls_listener_sends_ranges_larger_than_its_chunk_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let mut leader = Leader::start("tansu", 1);
    leader.create_topic("big", 1);
    let r = leader.ok(serde_json::json!({"cmd": "produce_spread", "topic": "big",
        "partitions": 1, "count": 600, "value_size": 10_000, "batch_records": 50}));
    let end = r["ends"][0].as_i64().expect("end");
    let listen = format!("127.0.0.1:{}", free_port());
    let (a_data, mut a) = follower(&tmp.path().join("a"), &leader.bootstrap, "big", |c| {
        tls_serve(c.set("log.segment_bytes", 8388608), &pki, &listen)
    });
    wait_until(Duration::from_secs(30), "A to catch up", || {
        log_end(&a_data, "big", 0) == end
    });
    let (b_data, mut b) = follower(&tmp.path().join("b"), &listen, "big", |c| {
        pki.security(c).set("fetch.partition_max_bytes", 1048576)
    });
    wait_until(Duration::from_secs(30), "B to catch up over TLS", || {
        log_end(&b_data, "big", 0) == end
    });
    assert_eq!(b.stop().code(), Some(0), "{}", b.log_text());
    assert_eq!(a.stop().code(), Some(0), "{}", a.log_text());
    let tp = TopicPartition::new("big", 0);
    let (ab, bb) = (local_log_bytes(&a_data, &tp), local_log_bytes(&b_data, &tp));
    assert!(
        ab.len() > 4 << 20,
        "{} bytes: not large enough to test",
        ab.len()
    );
    assert!(ab == bb, "the chained replica differs from A's over TLS");
}

/// rustls reads the socket as often as a record (or a handshake flight) takes within one
/// call: the listener's deadlines must bound those reads too, or a client sending a byte now
/// and then holds its connection (and a `max_connections` slot) for hours.
#[test]
fn a_tls_client_dripping_bytes_is_closed_at_the_listeners_deadlines() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    let mut leader = Leader::start("tansu", 1);
    let (_dir, data, _cfg, _end) = support::stopped_replica_of(&mut leader, "drip", 1);
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = support::Config::new(&data, &leader.bootstrap)
        .follow("drip")
        .apply(|c| tls_serve(c, &pki, &listen))
        .set("serve.idle_timeout_ms", 1500)
        .write(tmp.path());
    let mut serve = ServeGuard::start(&cfg, &listen);
    // Sends `bytes` one every 100 ms until the listener closes; how long that took.
    let drip = |sock: &mut std::net::TcpStream, bytes: &[u8]| -> Duration {
        let t0 = Instant::now();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        for b in bytes {
            if sock.write_all(&[*b]).is_err() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                break;
            }
            // What the listener sends meanwhile (TLS 1.3 session tickets) is dropped; only
            // its close ends the drip.
            let mut some = [0u8; 4096];
            match sock.read(&mut some) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        t0.elapsed()
    };

    // (a) A handshake record of 512 bytes announced, then dripped: the handshake must end
    // within its deadline (the idle timeout here, 1.5 s).
    let mut record = vec![0x16, 0x03, 0x01, 0x02, 0x00, 0x01];
    record.resize(5 + 512, 0);
    let mut sock = std::net::TcpStream::connect(&listen).unwrap();
    let held = drip(&mut sock, &record);
    assert!(
        held < Duration::from_secs(4),
        "a dripping handshake held its connection {held:?}"
    );

    // (b) After a real handshake, a record dripped: the request must come within the idle
    // timeout.
    let roots = {
        let mut r = rustls::RootCertStore::empty();
        let pem = std::fs::read(pki.path("ca.pem")).unwrap();
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
            r.add(c.unwrap()).unwrap();
        }
        r
    };
    use rustls_pki_types::pem::PemObject;
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(
        std::sync::Arc::new(config),
        rustls_pki_types::ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut sock = std::net::TcpStream::connect(&listen).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).expect("handshake");
    }
    // An application-data record of 16 KiB announced, then its bytes dripped: rustls waits
    // for the whole record inside one read.
    let mut record = vec![0x17, 0x03, 0x03, 0x40, 0x00];
    record.resize(5 + 200, 0);
    let held = drip(&mut sock, &record);
    assert!(
        held < Duration::from_secs(4),
        "a dripped request held its connection {held:?}"
    );
    serve.stop();
}
