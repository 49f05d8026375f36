//! The offsite copies in S3-compatible storage, against real S3 servers: moto's and s3s-fs
//! (`tests/support/s3.rs`), each behind a proxy the tests cut and stall.
//!
//! For now the support itself: both servers start, store and serve objects through the proxy,
//! behave as the daemon's client expects (signatures, `If-None-Match: *`,
//! `x-amz-checksum-sha256`), and the proxy's faults are what they say.
//!
//! A test binary of its own: its servers are Python and Rust processes of their own, and a cut
//! or stall must hit only the test that asked for it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    reason = "a test fails by panicking, and indexes its own fixtures freely"
)]

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};
use support::s3::{Kind, S3Server, write_key_file};

/// Bytes that are not text: every byte value, many times over.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn sha256_base64(bytes: &[u8]) -> String {
    use base64::encode;
    use sha2::{Digest, Sha256};
    encode(&Sha256::digest(bytes))
}

/// Standard base64 with padding, for one header value.
mod base64 {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

/// A raw HTTP/1.1 keep-alive request through `addr`, read up to the end of its header block.
fn raw_request(addr: &str, stream: &mut TcpStream) -> String {
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: keep-alive\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).expect("read an answer");
        assert!(n > 0, "closed before answering: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).to_string()
}

#[test]
fn moto_stores_and_serves_through_the_proxy() {
    let s3 = S3Server::moto("offsite-moto");
    let body = payload(300_000);
    assert_eq!(s3.put("archive/a.seg", &body), Ok(200));
    assert_eq!(s3.put("archive/empty", b""), Ok(200));
    let (status, got) = s3.get("archive/a.seg").unwrap();
    assert_eq!(status, 200);
    assert!(
        got == body,
        "GET returned {} bytes, not the 300000 put",
        got.len()
    );
    assert_eq!(
        s3.objects(),
        vec![
            ("archive/a.seg".to_string(), body.clone()),
            ("archive/empty".to_string(), Vec::new()),
        ]
    );

    // What the daemon's client relies on: a second create of a key is refused.
    let inm = [("If-None-Match", "*")];
    let (status, answer) = s3
        .request(
            &s3.endpoint,
            "PUT",
            "archive/a.seg",
            b"other",
            &inm,
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(status, 412, "{}", String::from_utf8_lossy(&answer));
    assert!(String::from_utf8_lossy(&answer).contains("PreconditionFailed"));
    let (status, _) = s3
        .request(
            &s3.endpoint,
            "PUT",
            "archive/b.seg",
            b"new",
            &inm,
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(status, 200);
    // moto ignores x-amz-checksum-sha256 (a wrong one is stored); s3s-fs checks it.
    let wrong = sha256_base64(b"not the body");
    let (status, _) = s3
        .request(
            &s3.endpoint,
            "PUT",
            "archive/c.seg",
            b"body",
            &[("x-amz-checksum-sha256", &wrong)],
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(status, 200, "moto started checking x-amz-checksum-sha256");

    // The [offsite] section and the files it names.
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("offsite.key");
    write_key_file(&key_file, &[0xab; 32]);
    let creds = dir.path().join("creds");
    let section = s3.config_toml(Some(&key_file), &creds);
    let table: toml::Table = section.parse().unwrap();
    let offsite = table["offsite"].as_table().unwrap();
    assert_eq!(offsite["endpoint"].as_str(), Some(s3.endpoint.as_str()));
    assert_eq!(offsite["bucket"].as_str(), Some("offsite-moto"));
    assert_eq!(offsite["region"].as_str(), Some("us-east-1"));
    assert_eq!(offsite["max_delay_ms"].as_integer(), Some(2000));
    for (field, want) in [
        ("access_key_file", s3.access_key.clone()),
        ("secret_key_file", s3.secret_key.clone()),
        ("encryption_key_file", "ab".repeat(32) + "\n"),
    ] {
        let path = offsite[field].as_str().unwrap();
        assert_eq!(std::fs::read_to_string(path).unwrap(), want, "{field}");
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{field} {path}");
    }
    let plain: toml::Table = s3.config_toml(None, &creds).parse().unwrap();
    assert!(
        !plain["offsite"]
            .as_table()
            .unwrap()
            .contains_key("encryption_key_file")
    );
}

/// An open connection through the proxy that the server keeps alive after one answer (s3s-fs
/// does; moto's server closes every connection after its answer).
fn kept_alive(s3: &S3Server) -> Option<TcpStream> {
    let addr = s3.proxy.addr.to_string();
    let mut open = TcpStream::connect(&addr).unwrap();
    let head = raw_request(&addr, &mut open);
    assert!(head.starts_with("HTTP/1.1 "), "{head}");
    (s3.kind == Kind::S3sFs).then_some(open)
}

/// A cut closes open connections and refuses new ones within a second; restore forwards again.
fn cut_and_restore(s3: &S3Server) {
    assert_eq!(s3.put("k", b"v"), Ok(200));
    let open = kept_alive(s3);

    s3.proxy.cut();
    let start = Instant::now();
    if let Some(mut open) = open {
        // EOF (or a reset) after whatever was already under way.
        open.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match open.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) => {
                    assert!(
                        !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                        "the open connection still stands after a cut"
                    );
                    break;
                }
            }
        }
    }
    let refused = TcpStream::connect_timeout(&s3.proxy.addr, Duration::from_secs(1));
    assert_eq!(
        refused.map(|_| ()).map_err(|e| e.kind()),
        Err(ErrorKind::ConnectionRefused)
    );
    let err = s3.get("k").unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert!(err.contains("onnect"), "{err}");

    s3.proxy.restore();
    assert_eq!(s3.get("k"), Ok((200, b"v".to_vec())));
    // A second cut and restore work the same.
    s3.proxy.cut();
    assert!(s3.get("k").is_err());
    s3.proxy.restore();
    assert_eq!(s3.get("k"), Ok((200, b"v".to_vec())));
}

/// A stall accepts connections and holds every request, new and on open connections, until
/// restore delivers them.
fn stall_and_restore(s3: &S3Server) {
    assert_eq!(s3.put("k", b"v"), Ok(200));
    let open = kept_alive(s3);
    let accepted = s3.proxy.accepted();

    s3.proxy.stall();
    let start = Instant::now();
    let err = s3
        .request(
            &s3.endpoint,
            "GET",
            "k",
            b"",
            &[],
            Duration::from_millis(1500),
        )
        .unwrap_err();
    assert!(
        start.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        start.elapsed()
    );
    assert!(err.contains("imed out"), "{err}");
    assert!(
        s3.proxy.accepted() > accepted,
        "the stalled proxy still accepts"
    );
    let mut buf = [0u8; 4096];
    let open = open.map(|mut open| {
        open.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        write!(open, "GET / HTTP/1.1\r\nHost: {}\r\n\r\n", s3.proxy.addr).unwrap();
        let held = open.read(&mut buf).unwrap_err();
        assert!(
            matches!(held.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{held}"
        );
        open
    });

    s3.proxy.restore();
    if let Some(mut open) = open {
        open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = open
            .read(&mut buf)
            .expect("the held request answered after restore");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 "),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    assert_eq!(s3.get("k"), Ok((200, b"v".to_vec())));
}

#[test]
fn a_cut_refuses_within_a_second_and_restore_forwards_again_moto() {
    cut_and_restore(&S3Server::moto("offsite-cut"));
}

#[test]
fn a_cut_refuses_within_a_second_and_restore_forwards_again_s3s_fs() {
    cut_and_restore(&S3Server::s3s_fs("offsite-cut"));
}

#[test]
fn a_stall_holds_requests_until_restore_moto() {
    stall_and_restore(&S3Server::moto("offsite-stall"));
}

#[test]
fn a_stall_holds_requests_until_restore_s3s_fs() {
    stall_and_restore(&S3Server::s3s_fs("offsite-stall"));
}

#[test]
fn s3s_fs_stores_and_serves_through_the_proxy() {
    let s3 = S3Server::s3s_fs("offsite-s3s");
    let body = payload(300_000);
    assert_eq!(s3.put("archive/a.seg", &body), Ok(200));
    assert_eq!(s3.put("archive/empty", b""), Ok(200));
    let (status, got) = s3.get("archive/a.seg").unwrap();
    assert_eq!(status, 200);
    assert!(
        got == body,
        "GET returned {} bytes, not the 300000 put",
        got.len()
    );
    assert_eq!(
        s3.objects(),
        vec![
            ("archive/a.seg".to_string(), body.clone()),
            ("archive/empty".to_string(), Vec::new()),
        ]
    );

    let inm = [("If-None-Match", "*")];
    let (status, answer) = s3
        .request(
            &s3.endpoint,
            "PUT",
            "archive/a.seg",
            b"other",
            &inm,
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(status, 412, "{}", String::from_utf8_lossy(&answer));
    assert!(String::from_utf8_lossy(&answer).contains("PreconditionFailed"));

    // A right checksum is taken; a wrong one is refused as BadDigest, yet s3s-fs has already
    // stored the bytes by then.
    let sum = sha256_base64(b"body");
    let (status, _) = s3
        .request(
            &s3.endpoint,
            "PUT",
            "archive/b.seg",
            b"body",
            &[("x-amz-checksum-sha256", &sum)],
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(status, 200);
    let wrong = sha256_base64(b"not the body");
    let (status, answer) = s3
        .request(
            &s3.endpoint,
            "PUT",
            "archive/c.seg",
            b"body",
            &[("x-amz-checksum-sha256", &wrong)],
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    assert!(String::from_utf8_lossy(&answer).contains("BadDigest"));
    assert!(
        s3.objects()
            .iter()
            .any(|(k, v)| k == "archive/c.seg" && v == b"body"),
        "s3s-fs no longer keeps an object it refused as BadDigest"
    );

    // Signatures are checked.
    let out = std::process::Command::new("curl")
        .args(["--silent", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user"])
        .arg(format!("{}:not-the-secret", s3.access_key))
        .args(["--header", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
        .arg(format!("{}/{}/archive/a.seg", s3.endpoint, s3.bucket))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SignatureDoesNotMatch"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
