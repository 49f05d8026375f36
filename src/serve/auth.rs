//! SASL on the serve listener, as Kafka's `SaslServerAuthenticator` does it: until a client
//! has authenticated it may send only ApiVersions, SaslHandshake (v1) and SaslAuthenticate;
//! anything else closes the connection. PLAIN is checked against the user's SCRAM entry in
//! the users file (`replica-follower add-user` writes it); SCRAM-SHA-256/512 run RFC 5802's
//! exchange against the stored key and server key. A failed authentication is answered
//! with SASL_AUTHENTICATION_FAILED and the connection closed; a client may authenticate
//! again on an authenticated connection (KIP-368) by sending SaslHandshake anew.

use crate::protocol::codec::Writer;
use crate::protocol::error::ErrorCode;
use crate::protocol::{ApiKey, sasl};
use crate::security::scram::{ScramError, ScramHash, ScramServer};
use crate::security::{SaslMechanism, SaslServerConfig};
use anyhow::{Result, bail};
use std::sync::Arc;

enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    /// Handshake done: the first SaslAuthenticate for this mechanism is due.
    Authenticate(SaslMechanism),
    /// SCRAM's server-first was sent: the client-final is due.
    ScramFinal(Box<ScramServer>, SaslMechanism),
}

/// One connection's authentication.
pub struct Authenticator {
    cfg: Arc<SaslServerConfig>,
    state: State,
    /// Who the connection authenticated as.
    principal: Option<String>,
}

/// The answer to a SASL request: its body, and whether the connection closes after it.
pub struct Answer {
    pub body: Vec<u8>,
    pub close: bool,
}

impl Authenticator {
    pub fn new(cfg: Arc<SaslServerConfig>) -> Self {
        Authenticator {
            cfg,
            state: State::Handshake,
            principal: None,
        }
    }

    /// The user this connection authenticated as, once it has.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// Whether a request for `api` may be answered now; an error (the connection closes)
    /// names the API, as Kafka's "Unexpected Kafka request of type X during SASL handshake".
    pub fn admit(&self, api_key: i16, peer: &str) -> Result<()> {
        let sasl_api = api_key == ApiKey::SaslHandshake.key()
            || api_key == ApiKey::SaslAuthenticate.key()
            || api_key == ApiKey::ApiVersions.key();
        let mid_exchange = !matches!(self.state, State::Handshake);
        if sasl_api || (self.principal.is_some() && !mid_exchange) {
            return Ok(());
        }
        let name = ApiKey::ALL
            .iter()
            .find(|a| a.key() == api_key)
            .map_or_else(|| format!("API key {api_key}"), |a| a.name().to_string());
        if failures_to_say().is_some() {
            // Most often a client not set up for SASL (security.protocol SSL or PLAINTEXT).
            crate::log_info!(
                "serve: client {peer} sent {name} before authenticating with SASL; closed (is the client set up for SASL_SSL or SASL_PLAINTEXT?)"
            );
        }
        bail!("{name} before SASL authentication completed; closed, as Kafka does")
    }

    /// SaslHandshake v0 is followed by bare SASL tokens, which this listener does not
    /// speak: the client is told no mechanism is available that way, and closed.
    pub fn refuse_v0_handshake(&self, peer: &str) -> Answer {
        if failures_to_say().is_some() {
            crate::log_info!(
                "serve: client {peer} sent SaslHandshake v0 (bare SASL tokens), which is not spoken here; closed"
            );
        }
        handshake_answer(
            ErrorCode::UNSUPPORTED_SASL_MECHANISM,
            self.cfg
                .mechanisms
                .iter()
                .map(|m| m.name().to_string())
                .collect(),
            true,
        )
    }

    /// SaslHandshake v1: the mechanism named must be one this listener offers.
    pub fn handshake(&mut self, body: &[u8], peer: &str) -> Result<Answer> {
        let wanted = sasl::decode_handshake_request(body)?;
        let offered: Vec<String> = self
            .cfg
            .mechanisms
            .iter()
            .map(|m| m.name().to_string())
            .collect();
        let chosen = SaslMechanism::from_name(&wanted).filter(|m| self.cfg.mechanisms.contains(m));
        if !matches!(self.state, State::Handshake) {
            // A second handshake in the middle of an exchange.
            return Ok(handshake_answer(
                ErrorCode::ILLEGAL_SASL_STATE,
                offered,
                true,
            ));
        }
        match chosen {
            Some(m) => {
                self.state = State::Authenticate(m);
                Ok(handshake_answer(ErrorCode::NONE, offered, false))
            }
            None => {
                if failures_to_say().is_some() {
                    crate::log_info!(
                        "serve: client {peer} asked for SASL mechanism {}, which is not offered",
                        shown(&wanted)
                    );
                }
                Ok(handshake_answer(
                    ErrorCode::UNSUPPORTED_SASL_MECHANISM,
                    offered,
                    true,
                ))
            }
        }
    }

    /// One SaslAuthenticate round at `version`.
    pub fn authenticate(&mut self, body: &[u8], version: i16, peer: &str) -> Result<Answer> {
        let bytes = sasl::decode_authenticate_request(body, version)?;
        let state = std::mem::replace(&mut self.state, State::Handshake);
        let ok = |auth_bytes: Vec<u8>| Answer {
            body: authenticate_body(version, ErrorCode::NONE, None, auth_bytes),
            close: false,
        };
        let failed = |mech: SaslMechanism, user: &str, why: &str| {
            if let Some(quiet) = failures_to_say() {
                crate::log_warn!(
                    "serve: client {peer} failed {} authentication as {}: {}{}",
                    mech.name(),
                    shown(user),
                    why.escape_debug(),
                    if quiet > 0 {
                        format!(" ({quiet} more failure(s) since the last such line)")
                    } else {
                        String::new()
                    }
                );
            }
            Answer {
                body: authenticate_body(
                    version,
                    ErrorCode::SASL_AUTHENTICATION_FAILED,
                    Some(&format!(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                        mech.name()
                    )),
                    Vec::new(),
                ),
                close: true,
            }
        };
        match state {
            State::Handshake => Ok(Answer {
                body: authenticate_body(
                    version,
                    ErrorCode::ILLEGAL_SASL_STATE,
                    Some("SaslAuthenticate before SaslHandshake"),
                    Vec::new(),
                ),
                close: true,
            }),
            State::Authenticate(SaslMechanism::Plain) => {
                let Some((user, password)) = parse_plain(bytes) else {
                    return Ok(failed(
                        SaslMechanism::Plain,
                        "?",
                        "a malformed PLAIN message",
                    ));
                };
                if self.cfg.users.verify_plain(&user, &password) {
                    if !self.done(&user, SaslMechanism::Plain, peer) {
                        return Ok(failed(
                            SaslMechanism::Plain,
                            &user,
                            "re-authenticated as another user",
                        ));
                    }
                    Ok(ok(Vec::new()))
                } else {
                    Ok(failed(
                        SaslMechanism::Plain,
                        &user,
                        "unknown user or wrong password",
                    ))
                }
            }
            State::Authenticate(mech) => {
                let Some(hash) = ScramHash::for_mechanism(mech) else {
                    bail!("{} is not a SCRAM mechanism", mech.name());
                };
                let users = &self.cfg.users;
                match ScramServer::client_first(hash, bytes, |u| users.lookup(u, mech).cloned()) {
                    Ok((server, first)) => {
                        self.state = State::ScramFinal(Box::new(server), mech);
                        Ok(ok(first.into_bytes()))
                    }
                    Err(e) => Ok(failed(mech, "?", &e.to_string())),
                }
            }
            State::ScramFinal(server, mech) => {
                let user = server.username().to_string();
                match server.client_final(bytes) {
                    Ok(_) if !self.done(&user, mech, peer) => {
                        Ok(failed(mech, &user, "re-authenticated as another user"))
                    }
                    Ok(last) => Ok(ok(last.into_bytes())),
                    Err(ScramError::AuthenticationFailed) => {
                        Ok(failed(mech, &user, "unknown user or wrong password"))
                    }
                    Err(e) => Ok(failed(mech, &user, &e.to_string())),
                }
            }
        }
    }

    /// Records a successful authentication; `false` (the connection is to fail and close)
    /// when it re-authenticated as another user, which Kafka refuses too.
    fn done(&mut self, user: &str, mech: SaslMechanism, peer: &str) -> bool {
        let again = self.principal.is_some();
        if let Some(before) = &self.principal
            && before != user
        {
            crate::log_warn!(
                "serve: client {peer} re-authenticated as {}, not as {}; closing it",
                shown(user),
                shown(before)
            );
            self.principal = None;
            return false;
        }
        crate::log_debug!(
            "serve: client {peer} {} as {} with {}",
            if again {
                "re-authenticated"
            } else {
                "authenticated"
            },
            shown(user),
            mech.name()
        );
        self.principal = Some(user.to_string());
        self.state = State::Handshake;
        true
    }
}

/// Failed authentications are said at most once every 10 s (a client guessing passwords
/// must not flood the journal): `Some(n)` when this one is to be said, `n` the ones kept
/// quiet since the last.
fn failures_to_say() -> Option<u64> {
    static LAST: std::sync::Mutex<(Option<std::time::Instant>, u64)> =
        std::sync::Mutex::new((None, 0));
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let now = std::time::Instant::now();
    if last
        .0
        .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(10))
    {
        last.1 += 1;
        return None;
    }
    let quiet = std::mem::take(&mut last.1);
    last.0 = Some(now);
    Some(quiet)
}

/// A name a client sent, as a log line may show it: quoted, control characters escaped (no
/// forged line can follow), at most 64 characters.
fn shown(name: &str) -> String {
    let mut s: String = name.chars().take(64).collect();
    if name.chars().count() > 64 {
        s.push('…');
    }
    format!("{s:?}")
}

/// The answer Kafka's broker gives a SASL request on a listener without SASL
/// (`KafkaApis.handleSaslHandshakeRequest` / `handleSaslAuthenticateRequest`): the request
/// reaches the APIs, which answer ILLEGAL_SASL_STATE (no mechanism offered), and the
/// connection stays open.
pub fn not_a_sasl_listener(api: ApiKey, version: i16) -> Vec<u8> {
    if api == ApiKey::SaslHandshake {
        handshake_answer(ErrorCode::ILLEGAL_SASL_STATE, Vec::new(), false).body
    } else {
        authenticate_body(
            version,
            ErrorCode::ILLEGAL_SASL_STATE,
            Some("SaslAuthenticate request received on a listener without SASL"),
            Vec::new(),
        )
    }
}

fn handshake_answer(error: ErrorCode, mechanisms: Vec<String>, close: bool) -> Answer {
    let mut w = Writer::new();
    sasl::encode_handshake_response(&mut w, &sasl::HandshakeResponse { error, mechanisms });
    Answer { body: w.buf, close }
}

fn authenticate_body(
    version: i16,
    error: ErrorCode,
    message: Option<&str>,
    auth_bytes: Vec<u8>,
) -> Vec<u8> {
    let mut w = Writer::new();
    sasl::encode_authenticate_response(
        &mut w,
        version,
        &sasl::AuthenticateResponse {
            error,
            error_message: message.map(str::to_string),
            auth_bytes,
            session_lifetime_ms: 0,
        },
    );
    w.buf
}

/// RFC 4616: `[authzid] NUL authcid NUL passwd`; an authorization identity other than the
/// user itself is refused (as Kafka does).
fn parse_plain(msg: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(msg).ok()?;
    let mut parts = text.split('\0');
    let (authz, user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || user.is_empty() || (!authz.is_empty() && authz != user) {
        return None;
    }
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::{SCRAM_SHA_512, ScramClient};
    use crate::security::users::Users;

    impl Authenticator {
        fn admit_t(&self, api_key: i16) -> Result<()> {
            self.admit(api_key, "127.0.0.1:1")
        }
    }

    fn cfg() -> Arc<SaslServerConfig> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("users");
        Users::add(
            &f,
            "alice",
            &[SaslMechanism::ScramSha256, SaslMechanism::ScramSha512],
            "wonderland",
            4096,
        )
        .unwrap();
        Arc::new(SaslServerConfig {
            mechanisms: SaslMechanism::ALL.to_vec(),
            users: Users::load(&f).unwrap(),
        })
    }

    fn handshake(a: &mut Authenticator, mech: &str) -> sasl::HandshakeResponse {
        let mut w = Writer::new();
        sasl::encode_handshake_request(&mut w, mech);
        sasl::decode_handshake_response(&a.handshake(&w.buf, "127.0.0.1:1").unwrap().body).unwrap()
    }

    fn round(a: &mut Authenticator, bytes: &[u8]) -> (sasl::AuthenticateResponse, bool) {
        let mut w = Writer::new();
        sasl::encode_authenticate_request(&mut w, 2, bytes);
        let ans = a.authenticate(&w.buf, 2, "127.0.0.1:1").unwrap();
        (
            sasl::decode_authenticate_response(&ans.body, 2).unwrap(),
            ans.close,
        )
    }

    #[test]
    fn only_sasl_apis_before_authentication_then_everything() {
        let mut a = Authenticator::new(cfg());
        assert!(a.admit_t(ApiKey::ApiVersions.key()).is_ok());
        let e = a.admit_t(ApiKey::Fetch.key()).unwrap_err().to_string();
        assert!(e.contains("Fetch before SASL authentication"), "{e}");
        assert_eq!(handshake(&mut a, "PLAIN").error, ErrorCode::NONE);
        assert!(a.admit_t(ApiKey::Metadata.key()).is_err());
        let (resp, close) = round(&mut a, b"\0alice\0wonderland");
        assert_eq!((resp.error, close), (ErrorCode::NONE, false));
        assert_eq!(a.principal(), Some("alice"));
        assert!(a.admit_t(ApiKey::Fetch.key()).is_ok());
    }

    #[test]
    fn scram_sha_512_against_our_client_and_a_wrong_password_closes() {
        let mut a = Authenticator::new(cfg());
        assert_eq!(handshake(&mut a, "SCRAM-SHA-512").error, ErrorCode::NONE);
        let (client, first) = ScramClient::start(&SCRAM_SHA_512, "alice", "wonderland").unwrap();
        let (resp, _) = round(&mut a, first.as_bytes());
        assert_eq!(resp.error, ErrorCode::NONE);
        let (fin, last) = client.server_first(&resp.auth_bytes).unwrap();
        let (resp, close) = round(&mut a, last.as_bytes());
        assert_eq!((resp.error, close), (ErrorCode::NONE, false));
        fin.server_final(&resp.auth_bytes).unwrap();
        assert_eq!(a.principal(), Some("alice"));

        // Re-authentication on the same connection (KIP-368), now with a wrong password.
        assert_eq!(handshake(&mut a, "SCRAM-SHA-512").error, ErrorCode::NONE);
        let (client, first) = ScramClient::start(&SCRAM_SHA_512, "alice", "queen").unwrap();
        let (resp, _) = round(&mut a, first.as_bytes());
        let (_, last) = client.server_first(&resp.auth_bytes).unwrap();
        let (resp, close) = round(&mut a, last.as_bytes());
        assert_eq!(resp.error, ErrorCode::SASL_AUTHENTICATION_FAILED);
        assert!(close);
        let msg = resp.error_message.unwrap();
        assert!(!msg.contains("queen"), "{msg}");
    }

    #[test]
    fn unknown_mechanism_unknown_user_and_out_of_order_requests_are_refused() {
        let mut a = Authenticator::new(cfg());
        let (resp, close) = round(&mut a, b"\0alice\0wonderland");
        assert_eq!((resp.error, close), (ErrorCode::ILLEGAL_SASL_STATE, true));
        let hs = handshake(&mut a, "GSSAPI");
        assert_eq!(hs.error, ErrorCode::UNSUPPORTED_SASL_MECHANISM);
        assert_eq!(hs.mechanisms, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
        let mut a = Authenticator::new(cfg());
        handshake(&mut a, "PLAIN");
        let (resp, close) = round(&mut a, b"\0mallory\0wonderland");
        assert_eq!(
            (resp.error, close),
            (ErrorCode::SASL_AUTHENTICATION_FAILED, true)
        );
        assert_eq!(a.principal(), None);
        // An authorization identity other than the user is refused.
        let mut a = Authenticator::new(cfg());
        handshake(&mut a, "PLAIN");
        let (resp, _) = round(&mut a, b"root\0alice\0wonderland");
        assert_eq!(resp.error, ErrorCode::SASL_AUTHENTICATION_FAILED);
    }

    #[test]
    fn re_authenticating_as_another_user_fails_and_closes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("users");
        for (u, p) in [("alice", "wonderland"), ("bob", "builder")] {
            Users::add(&f, u, &[SaslMechanism::ScramSha256], p, 4096).unwrap();
        }
        let cfg = Arc::new(SaslServerConfig {
            mechanisms: SaslMechanism::ALL.to_vec(),
            users: Users::load(&f).unwrap(),
        });
        let mut a = Authenticator::new(cfg);
        handshake(&mut a, "PLAIN");
        assert_eq!(
            round(&mut a, b"\0alice\0wonderland").0.error,
            ErrorCode::NONE
        );
        handshake(&mut a, "PLAIN");
        let (resp, close) = round(&mut a, b"\0bob\0builder");
        assert_eq!(
            (resp.error, close),
            (ErrorCode::SASL_AUTHENTICATION_FAILED, true)
        );
        assert_eq!(a.principal(), None);
        assert!(a.admit_t(ApiKey::Metadata.key()).is_err());
        // Again as the same user is fine.
        let mut a = Authenticator::new(cfg_of(&f));
        handshake(&mut a, "PLAIN");
        round(&mut a, b"\0bob\0builder");
        handshake(&mut a, "PLAIN");
        assert_eq!(round(&mut a, b"\0bob\0builder").0.error, ErrorCode::NONE);
        assert_eq!(a.principal(), Some("bob"));
    }

    fn cfg_of(f: &std::path::Path) -> Arc<SaslServerConfig> {
        Arc::new(SaslServerConfig {
            mechanisms: SaslMechanism::ALL.to_vec(),
            users: Users::load(f).unwrap(),
        })
    }

    #[test]
    fn names_from_clients_are_quoted_escaped_and_cut_in_log_lines() {
        assert_eq!(shown("alice"), "\"alice\"");
        let forged = "X\n<0>2099-01-01 ERROR [main] FORGED";
        let s = shown(forged);
        assert!(!s.contains('\n'), "{s}");
        assert!(s.contains("\\n"), "{s}");
        let long = "a".repeat(1000);
        assert!(shown(&long).chars().count() < 70);
    }

    #[test]
    fn plain_messages_parse_per_rfc_4616() {
        assert_eq!(
            parse_plain(b"\0u\0p"),
            Some(("u".to_string(), "p".to_string()))
        );
        assert_eq!(
            parse_plain(b"u\0u\0p"),
            Some(("u".to_string(), "p".to_string()))
        );
        assert_eq!(parse_plain(b"\0u"), None);
        assert_eq!(parse_plain(b"\0\0p"), None);
        assert_eq!(parse_plain(b"\0u\0p\0x"), None);
        assert_eq!(parse_plain(&[0, 0xff, 0, b'p']), None);
    }
}
