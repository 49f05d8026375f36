//! Our SCRAM client against a SCRAM server from outside this project: `scramp` in
//! `tests/support/sasl_proxy.py`, in front of a real Tansu. Raw frames over a TcpStream,
//! encoded and decoded by `protocol::sasl`: ApiVersions lists the SASL APIs, a
//! SCRAM-SHA-256 and SCRAM-SHA-512 exchange (SaslAuthenticate v0–v2) ends with a verified
//! server signature and the configured session lifetime, PLAIN too, a request after it is
//! answered by Tansu, and a wrong password is refused and counted, its password in no log line.

use crate::support;
use crate::support::sasl::SaslProxy;
use replica_follower::protocol::codec::{Reader, Writer};
use replica_follower::protocol::error::ErrorCode;
use replica_follower::protocol::{
    ApiKey, api_versions, decode_response_header, encode_request_header, metadata, sasl,
};
use replica_follower::security::SaslMechanism;
use replica_follower::security::scram::{ScramClient, ScramHash};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

const PASSWORD: &str = "pw-alice-7f3";
const LIFETIME_MS: i64 = 45_000;

struct Conn {
    s: TcpStream,
    corr: i32,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn { s, corr: 0 }
    }

    /// One request; the response body, or `None` when the connection was closed.
    fn call(
        &mut self,
        api: ApiKey,
        version: i16,
        body: impl FnOnce(&mut Writer),
    ) -> Option<Vec<u8>> {
        self.corr += 1;
        let mut w = Writer::new();
        encode_request_header(&mut w, api, version, self.corr, "sasl-test");
        body(&mut w);
        let mut framed = (w.buf.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&w.buf);
        self.s.write_all(&framed).ok()?;
        let mut size = [0u8; 4];
        self.s.read_exact(&mut size).ok()?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.s.read_exact(&mut frame).ok()?;
        let mut r = Reader::new(&frame);
        assert_eq!(
            decode_response_header(&mut r, api, version).unwrap(),
            self.corr
        );
        Some(frame[r.position()..].to_vec())
    }

    fn authenticate(&mut self, version: i16, token: &[u8]) -> sasl::AuthenticateResponse {
        let body = self
            .call(ApiKey::SaslAuthenticate, version, |w| {
                sasl::encode_authenticate_request(w, version, token)
            })
            .expect("SaslAuthenticate answered");
        sasl::decode_authenticate_response(&body, version).unwrap()
    }

    fn handshake(&mut self, mechanism: SaslMechanism) -> sasl::HandshakeResponse {
        let body = self
            .call(ApiKey::SaslHandshake, 1, |w| {
                sasl::encode_handshake_request(w, mechanism.name())
            })
            .expect("SaslHandshake answered");
        sasl::decode_handshake_response(&body).unwrap()
    }

    /// A whole SCRAM exchange with our client; the final response, once the server's
    /// signature is verified (an error otherwise).
    fn scram(
        &mut self,
        mechanism: SaslMechanism,
        version: i16,
        password: &str,
    ) -> Result<sasl::AuthenticateResponse, String> {
        let hs = self.handshake(mechanism);
        assert_eq!(hs.error, ErrorCode::NONE);
        let hash = ScramHash::for_mechanism(mechanism).unwrap();
        let (client, first) = ScramClient::start(hash, "alice", password).unwrap();
        let r1 = self.authenticate(version, first.as_bytes());
        assert_eq!(r1.error, ErrorCode::NONE, "{:?}", r1.error_message);
        let (client, fin) = client
            .server_first(&r1.auth_bytes)
            .map_err(|e| e.to_string())?;
        let r2 = self.authenticate(version, fin.as_bytes());
        if r2.error != ErrorCode::NONE {
            return Err(format!("{} {:?}", r2.error, r2.error_message));
        }
        client
            .server_final(&r2.auth_bytes)
            .map_err(|e| e.to_string())?;
        Ok(r2)
    }

    fn metadata_v1(&mut self) -> Option<metadata::MetadataResponse> {
        let body = self.call(ApiKey::Metadata, 1, |w| metadata::encode_request(w, 1, &[]))?;
        Some(metadata::decode_response(&body, 1).unwrap())
    }
}

#[test]
fn our_scram_client_authenticates_against_scramp_in_front_of_tansu() {
    let leader = support::Leader::start("tansu", 1);
    let proxy = SaslProxy::start(
        &leader.bootstrap,
        &[("alice", PASSWORD)],
        &["--session-lifetime-ms", &LIFETIME_MS.to_string()],
    );
    let (host, port) = proxy.addr.rsplit_once(':').unwrap();

    // ApiVersions: Tansu's list with the SASL APIs added.
    let mut c = Conn::open(&proxy.addr);
    let body = c
        .call(ApiKey::ApiVersions, 3, |w| {
            api_versions::encode_request(w, 3)
        })
        .unwrap();
    let av = api_versions::decode_response(&body, 3).unwrap();
    let range = |k: i16| {
        av.api_keys
            .iter()
            .find(|r| r.api_key == k)
            .map(|r| (r.min, r.max))
    };
    assert_eq!(range(17), Some((0, 1)));
    assert_eq!(range(36), Some((0, 2)));
    assert!(range(ApiKey::Fetch.key()).is_some(), "{av:?}");
    // Anything else before authentication: the connection is closed.
    assert!(c.metadata_v1().is_none());

    for mechanism in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
        for version in 0..=2 {
            let mut c = Conn::open(&proxy.addr);
            let done = c
                .scram(mechanism, version, PASSWORD)
                .unwrap_or_else(|e| panic!("{} v{version}: {e}", mechanism.name()));
            let lifetime = if version >= 1 { LIFETIME_MS } else { 0 };
            assert_eq!(done.session_lifetime_ms, lifetime);
            // Authenticated: Tansu answers, its broker renamed to the proxy.
            let md = c.metadata_v1().expect("Metadata after authentication");
            assert_eq!(md.brokers.len(), 1);
            assert_eq!(md.brokers[0].host, host);
            assert_eq!(md.brokers[0].port.to_string(), port);
            // Re-authentication on the same connection (KIP-368).
            c.scram(mechanism, version, PASSWORD).unwrap();
            assert!(c.metadata_v1().is_some());
        }
    }

    // PLAIN.
    let mut c = Conn::open(&proxy.addr);
    assert_eq!(c.handshake(SaslMechanism::Plain).error, ErrorCode::NONE);
    let r = c.authenticate(2, format!("\0alice\0{PASSWORD}").as_bytes());
    assert_eq!(r.error, ErrorCode::NONE);
    assert!(c.metadata_v1().is_some());

    // A wrong password: SASL_AUTHENTICATION_FAILED, counted once per attempt.
    assert_eq!(proxy.failures(), 0);
    for mechanism in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
        let mut c = Conn::open(&proxy.addr);
        let e = c.scram(mechanism, 2, "wrong-password").unwrap_err();
        assert!(e.contains("SASL_AUTHENTICATION_FAILED"), "{e}");
    }
    let mut c = Conn::open(&proxy.addr);
    c.handshake(SaslMechanism::Plain);
    let r = c.authenticate(1, b"\0alice\0wrong-password");
    assert_eq!(r.error, ErrorCode::SASL_AUTHENTICATION_FAILED);
    support::wait_until(Duration::from_secs(5), "3 failures logged", || {
        proxy.failures() == 3
    });
    let log = proxy.log();
    assert!(
        !log.contains(PASSWORD) && !log.contains("wrong-password"),
        "{log}"
    );
}

#[test]
fn the_proxy_passes_its_own_self_test() {
    let out = Command::new(support::python())
        .arg(support::manifest_dir().join("tests/support/sasl_proxy.py"))
        .arg("--self-test")
        .output()
        .expect("run sasl_proxy.py --self-test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("self-test ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
