//! SASL authentication of a connection to a broker (Kafka's `SaslClientAuthenticator`):
//! SaslHandshake v1 naming the mechanism, then SaslAuthenticate rounds carrying PLAIN's one
//! message or SCRAM's two (RFC 5802 / 7677, the server's final signature verified). The
//! broker's `session_lifetime_ms` (KIP-368) says when the connection must authenticate
//! again; [`super::connection::BrokerConnection`] does so before its next request once 85–95 %
//! of it has passed. The exchange reaches the broker only through [`Transport`], which the
//! connection implements.
//!
//! The password is read from its file at each authentication (so a rotated password is
//! picked up by the next connection) and appears in no message.

use super::error::{ConnectionError, ConnectionErrorKind, FailedContext};
use crate::protocol::codec::Writer;
use crate::protocol::error::ErrorCode;
use crate::protocol::{ApiKey, sasl};
use crate::security::SaslCredentials;
use crate::security::scram::{ScramClient, ScramError, ScramHash};
use anyhow::anyhow;
use std::time::Duration;

type Result<T> = std::result::Result<T, ConnectionError>;

/// What the exchange needs of a connection: how it names the broker, the versions
/// negotiated with it, and one request answered.
pub trait Transport {
    /// How errors name the broker (`broker 2 (10.0.0.5:9092)`).
    fn name(&self) -> &str;
    /// The negotiated version of `api`, or `None` when the broker and we share none.
    fn version(&self, api: ApiKey) -> Option<i16>;
    /// The negotiated version, or an error naming the broker and API.
    fn require_version(&self, api: ApiKey) -> Result<i16>;
    /// Sends one request and returns the response body.
    fn send(
        &mut self,
        api: ApiKey,
        version: i16,
        encode: impl FnOnce(&mut Writer),
    ) -> Result<&[u8]>;
}

/// Authenticates `conn` (versions already negotiated) as `creds`; returns the session
/// lifetime the broker gave, if any.
pub fn authenticate(
    conn: &mut impl Transport,
    creds: &SaslCredentials,
) -> Result<Option<Duration>> {
    let name = conn.name().to_string();
    let mech = creds.mechanism.name();
    let refused = |what: String| {
        ConnectionError::new(ConnectionErrorKind::AuthenticationRefused, anyhow!(what))
    };
    if conn.version(ApiKey::SaslHandshake).is_none() {
        return Err(refused(format!(
            "{name} offers no SaslHandshake v1: it is not a SASL listener (check security.protocol, and the port)"
        )));
    }
    let hs = conn
        .send(ApiKey::SaslHandshake, 1, |w| {
            sasl::encode_handshake_request(w, mech)
        })
        .and_then(|body| {
            sasl::decode_handshake_response(body)
                .failed_with(|| format!("{name}: bad SaslHandshake response"))
        })?;
    if hs.error == ErrorCode::UNSUPPORTED_SASL_MECHANISM && hs.mechanisms.iter().any(|m| m == mech)
    {
        // Tansu without SASL configured does this: it lists SaslHandshake and PLAIN, and
        // refuses PLAIN. "Does not offer PLAIN (it offers PLAIN)" would send the reader to
        // the wrong key.
        return Err(refused(format!(
            "{name} lists SASL mechanism {mech} yet refused it (UNSUPPORTED_SASL_MECHANISM): SASL is probably not enabled on that listener; check security.protocol and the port"
        )));
    }
    if hs.error == ErrorCode::UNSUPPORTED_SASL_MECHANISM {
        return Err(refused(format!(
            "{name} does not offer SASL mechanism {mech} (it offers {}); check security.sasl_mechanism",
            if hs.mechanisms.is_empty() {
                "none".to_string()
            } else {
                hs.mechanisms.join(", ")
            }
        )));
    }
    if !hs.error.is_ok() {
        return Err(refused(format!(
            "{name} refused SaslHandshake for {mech} with {}",
            hs.error
        )));
    }
    let version = conn.require_version(ApiKey::SaslAuthenticate)?;
    let password = crate::security::read_secret(&creds.password_file).failed_with(|| {
        format!(
            "the SASL password for {mech} as `{}` (security.sasl_password_file)",
            creds.username
        )
    })?;
    let check = || {
        format!(
            "check security.sasl_username (`{}`) and the password in `{}`",
            creds.username,
            creds.password_file.display()
        )
    };
    // One SaslAuthenticate round: the broker's bytes, or its refusal.
    let mut round = |bytes: &[u8]| -> Result<sasl::AuthenticateResponse> {
        let body = conn.send(ApiKey::SaslAuthenticate, version, |w| {
            sasl::encode_authenticate_request(w, version, bytes)
        })?;
        let resp = sasl::decode_authenticate_response(body, version)
            .failed_with(|| format!("{name}: bad SaslAuthenticate v{version} response"))?;
        if !resp.error.is_ok() {
            return Err(refused(format!(
                "{name} refused {mech} authentication as `{}`: {}{}; {}",
                creds.username,
                resp.error,
                resp.error_message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default(),
                check()
            )));
        }
        Ok(resp)
    };
    let last = match ScramHash::for_mechanism(creds.mechanism) {
        None => {
            // RFC 4616: authzid NUL authcid NUL password, with no authorization identity.
            let mut msg = Vec::with_capacity(creds.username.len() + password.len() + 2);
            msg.push(0);
            msg.extend_from_slice(creds.username.as_bytes());
            msg.push(0);
            msg.extend_from_slice(password.as_bytes());
            round(&msg)?
        }
        Some(hash) => {
            let scram = |e: ScramError| match e {
                ScramError::ServerError(_) | ScramError::BadServerSignature => {
                    refused(format!("{name}: {mech} as `{}`: {e}", creds.username))
                }
                other => ConnectionError::failed(anyhow!(
                    "{name}: {mech} as `{}`: {other}",
                    creds.username
                )),
            };
            let (client, first) =
                ScramClient::start(hash, &creds.username, &password).map_err(scram)?;
            let server_first = round(first.as_bytes())?;
            let (fin, client_final) = client
                .server_first(&server_first.auth_bytes)
                .map_err(scram)?;
            let server_final = round(client_final.as_bytes())?;
            fin.server_final(&server_final.auth_bytes).map_err(scram)?;
            server_final
        }
    };
    Ok((last.session_lifetime_ms > 0)
        .then(|| Duration::from_millis(last.session_lifetime_ms as u64)))
}

/// When to authenticate again within a session of `lifetime`: at 85–95 % of it, as Kafka's
/// client does, spread so that many connections do not re-authenticate in step.
pub fn reauthenticate_after(lifetime: Duration) -> Duration {
    let share = 0.85 + crate::clock::spread() * 0.10;
    lifetime.mul_f64(share)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::SaslMechanism;

    #[test]
    fn re_authentication_comes_at_85_to_95_percent_of_the_session() {
        for _ in 0..50 {
            let at = reauthenticate_after(Duration::from_secs(100));
            assert!(
                at >= Duration::from_secs(85) && at <= Duration::from_secs(95),
                "{at:?}"
            );
        }
    }

    /// A broker that answers each request with the next scripted body, and records what it
    /// was sent.
    struct Scripted {
        answers: std::collections::VecDeque<Vec<u8>>,
        sent: Vec<(ApiKey, Vec<u8>)>,
        last: Vec<u8>,
    }

    impl Transport for Scripted {
        fn name(&self) -> &str {
            "broker 1 (test:9092)"
        }

        fn version(&self, api: ApiKey) -> Option<i16> {
            match api {
                ApiKey::SaslHandshake => Some(1),
                ApiKey::SaslAuthenticate => Some(2),
                _ => None,
            }
        }

        fn require_version(&self, api: ApiKey) -> Result<i16> {
            self.version(api).failed_with(|| "no version")
        }

        fn send(
            &mut self,
            api: ApiKey,
            _version: i16,
            encode: impl FnOnce(&mut Writer),
        ) -> Result<&[u8]> {
            let mut w = Writer::new();
            encode(&mut w);
            self.sent.push((api, w.buf));
            self.last = self
                .answers
                .pop_front()
                .failed_with(|| "no answer scripted")?;
            Ok(&self.last)
        }
    }

    fn scripted(offered: &[&str], error: ErrorCode, lifetime_ms: i64) -> Scripted {
        let mut hs = Writer::new();
        sasl::encode_handshake_response(
            &mut hs,
            &sasl::HandshakeResponse {
                error,
                mechanisms: offered.iter().map(|m| m.to_string()).collect(),
            },
        );
        let mut auth = Writer::new();
        sasl::encode_authenticate_response(
            &mut auth,
            2,
            &sasl::AuthenticateResponse {
                error: ErrorCode::NONE,
                error_message: None,
                auth_bytes: Vec::new(),
                session_lifetime_ms: lifetime_ms,
            },
        );
        Scripted {
            answers: [hs.buf, auth.buf].into(),
            sent: Vec::new(),
            last: Vec::new(),
        }
    }

    fn plain_credentials(dir: &std::path::Path) -> SaslCredentials {
        use std::os::unix::fs::PermissionsExt;
        let pw = dir.join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        SaslCredentials {
            mechanism: SaslMechanism::Plain,
            username: "alice".into(),
            password_file: pw,
        }
    }

    #[test]
    fn plain_sends_the_user_and_password_and_returns_the_session_lifetime() {
        let dir = tempfile::tempdir().unwrap();
        let creds = plain_credentials(dir.path());
        let mut broker = scripted(&["PLAIN"], ErrorCode::NONE, 60_000);
        let lifetime = authenticate(&mut broker, &creds).unwrap();
        assert_eq!(lifetime, Some(Duration::from_secs(60)));
        let [
            (ApiKey::SaslHandshake, hs),
            (ApiKey::SaslAuthenticate, auth),
        ] = &broker.sent[..]
        else {
            panic!("{:?}", broker.sent);
        };
        assert_eq!(sasl::decode_handshake_request(hs).unwrap(), "PLAIN");
        assert_eq!(
            sasl::decode_authenticate_request(auth, 2).unwrap(),
            b"\0alice\0s3cret"
        );
    }

    #[test]
    fn a_mechanism_the_broker_does_not_offer_is_a_refusal_naming_what_it_offers() {
        let dir = tempfile::tempdir().unwrap();
        let creds = plain_credentials(dir.path());
        let mut broker = scripted(&["SCRAM-SHA-512"], ErrorCode::UNSUPPORTED_SASL_MECHANISM, 0);
        let e = authenticate(&mut broker, &creds).unwrap_err();
        assert_eq!(
            e.kind(),
            ConnectionErrorKind::AuthenticationRefused,
            "{e:#}"
        );
        let e = format!("{e:#}");
        assert!(
            e.contains(
                "broker 1 (test:9092) does not offer SASL mechanism PLAIN (it offers SCRAM-SHA-512)"
            ),
            "{e}"
        );
        assert_eq!(broker.sent.len(), 1, "no password is sent");
    }
}
