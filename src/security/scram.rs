//! SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677, Kafka's SCRAM-SHA-512): the client
//! and server state machines, as Kafka's `ScramSaslClient` and `ScramSaslServer` run them.
//!
//! ```text
//! client-first  n,,n=<saslname>,r=<client nonce>            gs2 header `n,,`: no channel
//!                                                            binding, no authzid
//! server-first  r=<client nonce><server nonce>,s=<b64 salt>,i=<iterations>
//! client-final  c=biws,r=<nonce>,p=<b64 ClientProof>        biws = base64("n,,")
//! server-final  v=<b64 ServerSignature>   or   e=<error>
//!
//! SaltedPassword  = PBKDF2-HMAC-H(password, salt, iterations)
//! ClientKey       = HMAC(SaltedPassword, "Client Key")    StoredKey = H(ClientKey)
//! ServerKey       = HMAC(SaltedPassword, "Server Key")
//! AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
//! ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
//! ServerSignature = HMAC(ServerKey, AuthMessage)
//! ```
//! Passwords are used as their UTF-8 bytes, as Kafka does (no SASLprep). The types here
//! compute messages only; sockets are the caller's. No error message or `Debug` output holds
//! a password, a salted password or a key.

use super::SaslMechanism;
use super::{base64, ct_eq, random_bytes};
use hmac::{EagerHash, KeyInit, Mac};
use std::fmt;

/// Kafka's bounds for SCRAM iterations (`ScramMechanism.minIterations` / `maxIterations`):
/// a server asking fewer is refused by the client (a weak credential), and so is one asking
/// more (a hostile server could make the client burn CPU).
pub const MIN_ITERATIONS: u32 = 4096;
/// What `add-user` uses unless told otherwise; also what an unknown user appears to have,
/// so that neither the work done nor the server-first message tells it from a known one.
pub const DEFAULT_ITERATIONS: u32 = 8192;
pub const MAX_ITERATIONS: u32 = 16384;

/// Random bytes in a nonce (base64: 32 printable characters, none of them `,`).
const NONCE_BYTES: usize = 24;

/// One SCRAM hash: its mechanism name and the three functions SCRAM is built from.
pub struct ScramHash {
    pub mechanism: &'static str,
    h: fn(&[u8]) -> Vec<u8>,
    hmac: fn(&[u8], &[u8]) -> Vec<u8>,
    hi: fn(&[u8], &[u8], u32) -> Vec<u8>,
}

impl fmt::Debug for ScramHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mechanism)
    }
}

fn h_of<D: EagerHash>(data: &[u8]) -> Vec<u8> {
    D::digest(data).to_vec()
}

fn hmac_of<D: EagerHash>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length (a long one is hashed first): this cannot fail.
    match hmac::Hmac::<D>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

fn hi_of<D: EagerHash>(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; <D as hmac::digest::OutputSizeUser>::output_size()];
    pbkdf2::pbkdf2_hmac::<D>(password, salt, iterations, &mut out);
    out
}

impl ScramHash {
    const fn of<D: EagerHash>(mechanism: &'static str) -> ScramHash {
        ScramHash {
            mechanism,
            h: h_of::<D>,
            hmac: hmac_of::<D>,
            hi: hi_of::<D>,
        }
    }

    /// The hash of a SCRAM mechanism; `None` for PLAIN.
    pub fn for_mechanism(m: SaslMechanism) -> Option<&'static ScramHash> {
        match m {
            SaslMechanism::Plain => None,
            SaslMechanism::ScramSha256 => Some(&SCRAM_SHA_256),
            SaslMechanism::ScramSha512 => Some(&SCRAM_SHA_512),
        }
    }

    /// The credential a server stores for `password` (Kafka's `ScramFormatter`).
    pub fn credential(&self, password: &str, salt: &[u8], iterations: u32) -> ScramCredential {
        let salted = (self.hi)(password.as_bytes(), salt, iterations);
        let client_key = (self.hmac)(&salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: (self.h)(&client_key),
            server_key: (self.hmac)(&salted, b"Server Key"),
            iterations,
        }
    }

    /// A credential for `password` with a fresh random salt.
    pub fn new_credential(
        &self,
        password: &str,
        iterations: u32,
    ) -> anyhow::Result<ScramCredential> {
        Ok(self.credential(password, &random_bytes(NONCE_BYTES)?, iterations))
    }
}

pub static SCRAM_SHA_256: ScramHash = ScramHash::of::<sha2::Sha256>("SCRAM-SHA-256");
pub static SCRAM_SHA_512: ScramHash = ScramHash::of::<sha2::Sha512>("SCRAM-SHA-512");

/// What a server keeps of a password (RFC 5802 §2.2; Kafka's `ScramCredential`).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The keys stay out of logs: the server key lets its holder pose as the server.
        write!(
            f,
            "ScramCredential {{ iterations: {}, .. }}",
            self.iterations
        )
    }
}

/// Why an exchange failed. Callers branch on it: a malformed message is a protocol error,
/// `AuthenticationFailed` is a wrong password or an unknown user (one variant for both, so a
/// client cannot tell which), the others are what the client refuses of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramError {
    /// A message not in RFC 5802's grammar; names the message and attribute.
    Malformed(String),
    /// Server side: unknown user or wrong proof.
    AuthenticationFailed,
    /// Client side: the server's nonce does not start with ours, or its iteration count is
    /// out of bounds.
    Refused(String),
    /// Client side: the server-final message is `e=<error>`.
    ServerError(String),
    /// Client side: the server-final signature is missing or wrong: the server does not know
    /// the password (it is not the server it claims to be).
    BadServerSignature,
    /// No random bytes for a nonce could be read.
    NoRandomness(String),
}

impl fmt::Display for ScramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScramError::Malformed(m) => write!(f, "malformed SCRAM message: {m}"),
            ScramError::AuthenticationFailed => {
                f.write_str("authentication failed: unknown user or wrong password")
            }
            ScramError::Refused(m) => write!(f, "SCRAM exchange refused: {m}"),
            ScramError::ServerError(e) => write!(f, "the server ended the SCRAM exchange with error `{e}`"),
            ScramError::BadServerSignature => f.write_str(
                "the server's final SCRAM message has a missing or wrong signature (v=): it does not hold this user's credential",
            ),
            ScramError::NoRandomness(e) => write!(f, "cannot make a SCRAM nonce: {e}"),
        }
    }
}

impl std::error::Error for ScramError {}

fn malformed(what: impl Into<String>) -> ScramError {
    ScramError::Malformed(what.into())
}

/// `name` as a SCRAM saslname: `=` as `=3D`, `,` as `=2C`.
pub fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A saslname decoded; any other `=` escape, or a raw `,`, is malformed.
pub fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['=', ',']) {
        out.push_str(rest.get(..i).unwrap_or_default());
        let tail = rest.get(i..).unwrap_or_default();
        if tail.starts_with("=2C") {
            out.push(',');
        } else if tail.starts_with("=3D") {
            out.push('=');
        } else {
            return Err(malformed(
                "username: `=` not followed by 2C or 3D, or a raw `,`",
            ));
        }
        rest = tail.get(3..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of attribute `key` (`k=value`), or malformed naming it and the message.
fn attr<'a>(part: Option<&'a str>, key: char, message: &str) -> Result<&'a str, ScramError> {
    let part = part.ok_or_else(|| malformed(format!("{message}: no `{key}=` attribute")))?;
    let mut chars = part.chars();
    if chars.next() != Some(key) || chars.next() != Some('=') {
        return Err(malformed(format!(
            "{message}: expected `{key}=`, found another attribute"
        )));
    }
    Ok(part.get(2..).unwrap_or_default())
}

/// A nonce is printable ASCII without `,` (RFC 5802 §7).
fn check_nonce(nonce: &str, message: &str) -> Result<(), ScramError> {
    if nonce.is_empty()
        || !nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        return Err(malformed(format!(
            "{message}: the nonce is empty or not printable ASCII"
        )));
    }
    Ok(())
}

fn b64(value: &str, what: &str) -> Result<Vec<u8>, ScramError> {
    base64::decode(value).map_err(|e| malformed(format!("{what}: {e}")))
}

fn utf8<'a>(msg: &'a [u8], message: &str) -> Result<&'a str, ScramError> {
    std::str::from_utf8(msg).map_err(|_| malformed(format!("{message}: not UTF-8")))
}

fn fresh_nonce() -> Result<String, ScramError> {
    random_bytes(NONCE_BYTES)
        .map(|b| base64::encode(&b))
        .map_err(|e| ScramError::NoRandomness(format!("{e:#}")))
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// The gs2 header this client sends: no channel binding, no authorization identity.
const GS2_HEADER: &str = "n,,";

/// A client that has sent its first message and waits for the server's.
pub struct ScramClient {
    hash: &'static ScramHash,
    password: String,
    client_nonce: String,
    client_first_bare: String,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScramClient {{ {:?}, .. }}", self.hash)
    }
}

impl ScramClient {
    /// Starts an exchange: the client and its client-first message.
    pub fn start(
        hash: &'static ScramHash,
        username: &str,
        password: &str,
    ) -> Result<(ScramClient, String), ScramError> {
        Ok(Self::start_with_nonce(
            hash,
            username,
            password,
            fresh_nonce()?,
        ))
    }

    fn start_with_nonce(
        hash: &'static ScramHash,
        username: &str,
        password: &str,
        client_nonce: String,
    ) -> (ScramClient, String) {
        let client_first_bare = format!("n={},r={client_nonce}", encode_saslname(username));
        let first = format!("{GS2_HEADER}{client_first_bare}");
        let client = ScramClient {
            hash,
            password: password.to_string(),
            client_nonce,
            client_first_bare,
        };
        (client, first)
    }

    /// Takes the server-first message; gives the client-final message and the state that
    /// checks the server's answer to it.
    pub fn server_first(self, msg: &[u8]) -> Result<(ScramClientFinal, String), ScramError> {
        const WHAT: &str = "server-first message";
        let server_first = utf8(msg, WHAT)?;
        if server_first.starts_with("m=") {
            return Err(ScramError::Refused(format!(
                "{WHAT}: a mandatory extension (m=) this client does not know"
            )));
        }
        let mut parts = server_first.split(',');
        let nonce = attr(parts.next(), 'r', WHAT)?;
        let salt = b64(attr(parts.next(), 's', WHAT)?, "server-first message salt")?;
        let iterations = attr(parts.next(), 'i', WHAT)?;
        // Extensions after i= are allowed and ignored.
        check_nonce(nonce, WHAT)?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() <= self.client_nonce.len() {
            return Err(ScramError::Refused(format!(
                "{WHAT}: the server's nonce does not extend the client's"
            )));
        }
        if salt.is_empty() {
            return Err(malformed(format!("{WHAT}: empty salt")));
        }
        let iterations: u32 = iterations.parse().map_err(|_| {
            malformed(format!(
                "{WHAT}: iteration count `{iterations}` is not a number"
            ))
        })?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Refused(format!(
                "{WHAT}: iteration count {iterations} is outside {MIN_ITERATIONS}–{MAX_ITERATIONS}"
            )));
        }
        let h = self.hash;
        let without_proof = format!("c={},r={nonce}", base64::encode(GS2_HEADER.as_bytes()));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let salted = (h.hi)(self.password.as_bytes(), &salt, iterations);
        let client_key = (h.hmac)(&salted, b"Client Key");
        let stored_key = (h.h)(&client_key);
        let signature = (h.hmac)(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &signature);
        let server_key = (h.hmac)(&salted, b"Server Key");
        let expected = (h.hmac)(&server_key, auth_message.as_bytes());
        let final_message = format!("{without_proof},p={}", base64::encode(&proof));
        Ok((
            ScramClientFinal {
                expected_server_signature: expected,
            },
            final_message,
        ))
    }
}

/// A client that has sent its final message and checks the server's signature.
pub struct ScramClientFinal {
    expected_server_signature: Vec<u8>,
}

impl fmt::Debug for ScramClientFinal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScramClientFinal { .. }")
    }
}

impl ScramClientFinal {
    /// Checks the server-final message: `Ok` only for `v=` with the right signature.
    pub fn server_final(self, msg: &[u8]) -> Result<(), ScramError> {
        const WHAT: &str = "server-final message";
        let text = utf8(msg, WHAT)?;
        let first = text.split(',').next().unwrap_or_default();
        if let Some(e) = first.strip_prefix("e=") {
            return Err(ScramError::ServerError(e.to_string()));
        }
        let Some(v) = first.strip_prefix("v=") else {
            return Err(ScramError::BadServerSignature);
        };
        let sig = base64::decode(v).map_err(|_| ScramError::BadServerSignature)?;
        if !ct_eq(&sig, &self.expected_server_signature) {
            return Err(ScramError::BadServerSignature);
        }
        Ok(())
    }
}

/// A server that has answered a client-first message and waits for the client-final one.
pub struct ScramServer {
    hash: &'static ScramHash,
    username: String,
    /// `None` for an unknown user: the exchange goes on with a made-up salt and fails at the
    /// proof, so the answer to an unknown user looks like the answer to a known one.
    credential: Option<ScramCredential>,
    gs2_header: String,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ScramServer {{ {:?}, user {:?}, .. }}",
            self.hash, self.username
        )
    }
}

/// A process-wide secret from which an unknown user's salt is made: the same user gets the
/// same salt every time, as a real one would.
fn fake_salt(hash: &ScramHash, username: &str) -> Vec<u8> {
    static KEY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(|| random_bytes(32).unwrap_or_else(|_| vec![0x5a; 32]));
    let mut salt = (hash.hmac)(key, username.as_bytes());
    salt.truncate(NONCE_BYTES);
    salt
}

impl ScramServer {
    /// Takes a client-first message; `lookup` gives the user's credential (or `None`).
    /// Returns the server and its server-first message. Only a malformed message is an error
    /// here: an unknown user fails at [`ScramServerFirst::client_final`].
    pub fn client_first(
        hash: &'static ScramHash,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<(ScramServer, String), ScramError> {
        let nonce = fresh_nonce()?;
        Self::client_first_with_nonce(hash, msg, lookup, &nonce)
    }

    fn client_first_with_nonce(
        hash: &'static ScramHash,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        server_nonce: &str,
    ) -> Result<(ScramServer, String), ScramError> {
        const WHAT: &str = "client-first message";
        let text = utf8(msg, WHAT)?;
        // gs2-header = cbind-flag "," [authzid] ","
        let mut parts = text.splitn(3, ',');
        let cbind = parts.next().unwrap_or_default();
        let authzid = parts
            .next()
            .ok_or_else(|| malformed(format!("{WHAT}: no gs2 header")))?;
        let bare = parts
            .next()
            .ok_or_else(|| malformed(format!("{WHAT}: no gs2 header")))?;
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => {
                return Err(malformed(format!(
                    "{WHAT}: channel binding is not supported"
                )));
            }
            _ => return Err(malformed(format!("{WHAT}: bad gs2 channel-binding flag"))),
        }
        if bare.starts_with("m=") {
            return Err(malformed(format!(
                "{WHAT}: a mandatory extension (m=) this server does not know"
            )));
        }
        let mut attrs = bare.split(',');
        let username = decode_saslname(attr(attrs.next(), 'n', WHAT)?)?;
        let client_nonce = attr(attrs.next(), 'r', WHAT)?;
        // Extensions (Kafka's `tokenauth=true`, ...) follow; unknown ones are ignored.
        check_nonce(client_nonce, WHAT)?;
        if username.is_empty() {
            return Err(malformed(format!("{WHAT}: empty username")));
        }
        if !authzid.is_empty() {
            // As Kafka: an authorization id must name the authenticated user.
            let a = decode_saslname(attr(Some(authzid), 'a', WHAT)?)?;
            if a != username {
                return Err(malformed(format!(
                    "{WHAT}: authorization id differs from the username"
                )));
            }
        }
        let credential = lookup(&username);
        let (salt, iterations) = match &credential {
            Some(c) => (c.salt.clone(), c.iterations),
            None => (fake_salt(hash, &username), DEFAULT_ITERATIONS),
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!("r={nonce},s={},i={iterations}", base64::encode(&salt));
        let server = ScramServer {
            hash,
            username,
            credential,
            gs2_header: text
                .get(..cbind.len() + authzid.len() + 2)
                .unwrap_or_default()
                .to_string(),
            nonce,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
        };
        Ok((server, server_first))
    }

    /// The user the client named (authenticated only once `client_final` succeeds).
    pub fn username(&self) -> &str {
        &self.username
    }

    /// Checks the client-final message; on a valid proof gives the server-final message.
    pub fn client_final(self, msg: &[u8]) -> Result<String, ScramError> {
        const WHAT: &str = "client-final message";
        let text = utf8(msg, WHAT)?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| malformed(format!("{WHAT}: no `p=` attribute")))?;
        let mut parts = without_proof.split(',');
        let cbind = b64(
            attr(parts.next(), 'c', WHAT)?,
            "client-final channel binding",
        )?;
        let nonce = attr(parts.next(), 'r', WHAT)?;
        if cbind != self.gs2_header.as_bytes() {
            return Err(malformed(format!(
                "{WHAT}: channel binding does not repeat the gs2 header"
            )));
        }
        if nonce != self.nonce {
            return Err(malformed(format!(
                "{WHAT}: nonce differs from the server's"
            )));
        }
        let proof = b64(proof, "client-final proof")?;
        let Some(cred) = &self.credential else {
            return Err(ScramError::AuthenticationFailed);
        };
        let h = self.hash;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = (h.hmac)(&cred.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(ScramError::AuthenticationFailed);
        }
        let client_key = xor(&proof, &signature);
        if !ct_eq(&(h.h)(&client_key), &cred.stored_key) {
            return Err(ScramError::AuthenticationFailed);
        }
        let server_signature = (h.hmac)(&cred.server_key, auth_message.as_bytes());
        Ok(format!("v={}", base64::encode(&server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SCRAM_SHA_1: ScramHash = ScramHash::of::<sha1::Sha1>("SCRAM-SHA-1");

    /// Runs a published exchange on both sides and checks every message byte for byte.
    fn published_exchange(
        hash: &'static ScramHash,
        client_nonce: &str,
        server_nonce: &str,
        salt_b64: &str,
        [c1, s1, c2, s2]: [&str; 4],
    ) {
        let (client, first) =
            ScramClient::start_with_nonce(hash, "user", "pencil", client_nonce.into());
        assert_eq!(first, c1);
        let (client, client_final) = client.server_first(s1.as_bytes()).unwrap();
        assert_eq!(client_final, c2);
        client.server_final(s2.as_bytes()).unwrap();

        let salt = base64::decode(salt_b64).unwrap();
        let cred = hash.credential("pencil", &salt, 4096);
        let (server, server_first) = ScramServer::client_first_with_nonce(
            hash,
            c1.as_bytes(),
            |u| (u == "user").then(|| cred.clone()),
            server_nonce,
        )
        .unwrap();
        assert_eq!(server_first, s1);
        assert_eq!(server.username(), "user");
        assert_eq!(server.client_final(c2.as_bytes()).unwrap(), s2);
    }

    #[test]
    fn rfc7677_scram_sha_256_exchange_byte_for_byte() {
        published_exchange(
            &SCRAM_SHA_256,
            "rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            "W22ZaJ0SNY7soEsUEjb6gQ==",
            [
                "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
                "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            ],
        );
    }

    #[test]
    fn rfc5802_scram_sha_1_exchange_byte_for_byte() {
        published_exchange(
            &SCRAM_SHA_1,
            "fyko+d2lbbFgONRv9qkxdawL",
            "3rfcNHYJY1ZVvWVs7j",
            "QSXCR+Q6sek8bf92",
            [
                "n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
                "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
                "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
                "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
            ],
        );
    }

    /// A whole exchange between our client and our server; the server's verdict.
    fn round_trip(
        hash: &'static ScramHash,
        user: &str,
        password: &str,
        stored: Option<ScramCredential>,
    ) -> Result<(), ScramError> {
        let (client, c1) = ScramClient::start(hash, user, password).unwrap();
        let mut seen = None;
        let (server, s1) = ScramServer::client_first(hash, c1.as_bytes(), |u| {
            seen = Some(u.to_string());
            stored
        })
        .unwrap();
        assert_eq!(seen.as_deref(), Some(user));
        let (client, c2) = client.server_first(s1.as_bytes()).unwrap();
        let s2 = server.client_final(c2.as_bytes())?;
        client.server_final(s2.as_bytes())
    }

    #[test]
    fn scram_sha_512_round_trip_and_wrong_password_and_unknown_user() {
        let h = &SCRAM_SHA_512;
        let cred = h.new_credential("s3cret", 8192).unwrap();
        assert_eq!(cred.stored_key.len(), 64);
        round_trip(h, "alice", "s3cret", Some(cred.clone())).unwrap();
        assert_eq!(
            round_trip(h, "alice", "wrong", Some(cred)),
            Err(ScramError::AuthenticationFailed)
        );
        assert_eq!(
            round_trip(h, "nobody", "s3cret", None),
            Err(ScramError::AuthenticationFailed)
        );
        // An unknown user's salt does not change between attempts.
        assert_eq!(fake_salt(h, "nobody"), fake_salt(h, "nobody"));
        assert_ne!(fake_salt(h, "nobody"), fake_salt(h, "other"));
    }

    #[test]
    fn usernames_with_comma_and_equals_are_escaped_both_ways() {
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(decode_saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
        for bad in ["a=", "a=2", "a=41", "a,b"] {
            assert!(decode_saslname(bad).is_err(), "{bad}");
        }
        let cred = SCRAM_SHA_256.credential("pw", b"salty", 4096);
        round_trip(&SCRAM_SHA_256, "a,b=c", "pw", Some(cred)).unwrap();
    }

    fn client_after_first() -> ScramClient {
        ScramClient::start_with_nonce(&SCRAM_SHA_256, "user", "pencil", "abc".into()).0
    }

    #[test]
    fn client_refuses_a_foreign_nonce_low_or_high_iterations_and_bad_messages() {
        let refused = |s1: &str| {
            client_after_first()
                .server_first(s1.as_bytes())
                .unwrap_err()
        };
        assert!(
            matches!(refused("r=xyz123,s=c2FsdA==,i=4096"), ScramError::Refused(m) if m.contains("nonce"))
        );
        assert!(matches!(
            refused("r=abc,s=c2FsdA==,i=4096"),
            ScramError::Refused(_)
        ));
        assert!(
            matches!(refused("r=abcd,s=c2FsdA==,i=4095"), ScramError::Refused(m) if m.contains("4095"))
        );
        assert!(matches!(
            refused("r=abcd,s=c2FsdA==,i=99999999"),
            ScramError::Refused(_)
        ));
        assert!(matches!(
            refused("m=x,r=abcd,s=c2FsdA==,i=4096"),
            ScramError::Refused(_)
        ));
        for bad in [
            "",
            "r=abcd",
            "r=abcd,s=c2FsdA==",
            "r=abcd,s=!!,i=4096",
            "r=abcd,s=,i=4096",
            "s=c2FsdA==,r=abcd,i=4096",
            "r=abcd,s=c2FsdA==,i=lots",
            "r=ab\u{7f}cd,s=c2FsdA==,i=4096",
        ] {
            assert!(
                matches!(refused(bad), ScramError::Malformed(_)),
                "{bad}: {:?}",
                refused(bad)
            );
        }
        assert!(matches!(
            client_after_first().server_first(&[0xff, 0xfe]),
            Err(ScramError::Malformed(_))
        ));
        // Extensions after i= are ignored.
        assert!(
            client_after_first()
                .server_first(b"r=abcd,s=c2FsdA==,i=4096,x=y")
                .is_ok()
        );
    }

    #[test]
    fn client_refuses_a_wrong_or_missing_server_signature_and_reports_e() {
        let fin = || {
            client_after_first()
                .server_first(b"r=abcd,s=c2FsdA==,i=4096")
                .unwrap()
                .0
        };
        assert_eq!(
            fin().server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(ScramError::BadServerSignature)
        );
        assert_eq!(fin().server_final(b""), Err(ScramError::BadServerSignature));
        assert_eq!(
            fin().server_final(b"v=**"),
            Err(ScramError::BadServerSignature)
        );
        let e = fin().server_final(b"e=invalid-proof").unwrap_err();
        assert_eq!(e, ScramError::ServerError("invalid-proof".into()));
        assert!(e.to_string().contains("invalid-proof"));
        assert!(
            ScramError::BadServerSignature
                .to_string()
                .contains("signature")
        );
    }

    #[test]
    fn server_ignores_extensions_and_rejects_bad_client_messages() {
        let cred = SCRAM_SHA_256.credential("pencil", b"salt", 4096);
        let first = |c1: &str| {
            ScramServer::client_first_with_nonce(
                &SCRAM_SHA_256,
                c1.as_bytes(),
                |_| Some(cred.clone()),
                "SRV",
            )
        };
        let (_, s1) = first("n,,n=user,r=abc,tokenauth=true").unwrap();
        assert!(s1.starts_with("r=abcSRV,s="), "{s1}");
        assert!(first("y,,n=user,r=abc").is_ok());
        assert!(first("n,a=user,n=user,r=abc").is_ok());
        for bad in [
            "",
            "n,,",
            "n,n=user,r=abc",
            "p=tls-unique,,n=user,r=abc",
            "x,,n=user,r=abc",
            "n,,m=ext,n=user,r=abc",
            "n,,n=,r=abc",
            "n,,n=us=er,r=abc",
            "n,,r=abc,n=user",
            "n,,n=user",
            "n,,n=user,r=",
            "n,a=other,n=user,r=abc",
        ] {
            assert!(first(bad).is_err(), "{bad}");
        }
        // Client-final: the right proof passes, anything else fails without a panic.
        let (client, c1) =
            ScramClient::start_with_nonce(&SCRAM_SHA_256, "user", "pencil", "abc".into());
        let (server, s1) = first(&c1).unwrap();
        let (_, c2) = client.server_first(s1.as_bytes()).unwrap();
        let fresh = || first(&c1).unwrap().0;
        for bad in [
            "".to_string(),
            "c=biws,r=abcSRV".to_string(),
            "c=eSws,r=abcSRV,p=AAAA".to_string(),
            "c=biws,r=abcXXX,p=AAAA".to_string(),
            "c=biws,r=abcSRV,p=!!".to_string(),
        ] {
            assert!(
                matches!(
                    fresh().client_final(bad.as_bytes()),
                    Err(ScramError::Malformed(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            fresh().client_final(b"c=biws,r=abcSRV,p=AAAA"),
            Err(ScramError::AuthenticationFailed)
        );
        let (head, proof) = c2.rsplit_once(",p=").unwrap();
        let mut proof = base64::decode(proof).unwrap();
        proof[0] ^= 1;
        let tampered = format!("{head},p={}", base64::encode(&proof));
        assert_eq!(
            fresh().client_final(tampered.as_bytes()),
            Err(ScramError::AuthenticationFailed)
        );
        assert!(
            server
                .client_final(c2.as_bytes())
                .unwrap()
                .starts_with("v=")
        );
    }

    #[test]
    fn debug_output_holds_no_secret() {
        let (client, _) = ScramClient::start(&SCRAM_SHA_256, "user", "hunter2").unwrap();
        assert!(!format!("{client:?}").contains("hunter2"));
        let cred = SCRAM_SHA_256.credential("hunter2", b"salt", 4096);
        assert!(!format!("{cred:?}").contains(&format!("{:?}", cred.stored_key)));
    }
}
