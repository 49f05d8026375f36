//! TLS with rustls (ring provider; TLS 1.2 and 1.3): the client configuration every
//! connection to the cluster uses (`[security]`), the listener's (`[serve]`), the loading of
//! their PEM files, and the translation of rustls' errors into messages an operator can act
//! on.
//!
//! # Verification
//! A broker's certificate chain is verified against `ssl_ca_file` or the platform's PEM
//! bundle ([`PLATFORM_BUNDLES`]) by webpki, and its names against the host connected to.
//! `ssl_verify_hostname = false` keeps the chain check and skips only the name check.
//! Refusals go through [`Verifier`], which wraps webpki's answer with the certificate's
//! subject, issuer and names ([`super::cert_info`]), so the message says which certificate
//! and what to check.
//!
//! # Errors
//! A TLS failure reaches callers as an `io::Error` (its kind kept; the stream's `Read` and
//! `Write` can return nothing else) whose inner error is a [`TlsFailure`], which the
//! connection turns into its typed error (`client::ConnectionError`).
//! [`TlsFailure::fatal`] marks what retrying cannot mend without a change of certificate or
//! configuration (unknown CA, wrong name, expired, a client certificate required or
//! refused, a peer that does not speak TLS).

use super::SecuritySection;
use super::cert_info::{self, CertInfo};
use anyhow::{Context, Result, anyhow, bail};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{
    AlertDescription, CertificateError, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the platform's CA bundle is looked for when `ssl_ca_file` is not set (Debian and
/// Ubuntu; Fedora and RHEL; Alpine, macOS and the BSDs).
pub const PLATFORM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The certificates in the PEM file `path` (config key `key`), in order; none is an error.
pub fn load_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("key `{key}`: cannot read `{}`", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("key `{key}`: `{}` is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        let instead = if holds_private_key(&bytes) {
            " (it holds a private key instead: are the certificate and key files swapped?)"
        } else {
            ""
        };
        bail!(
            "key `{key}`: no PEM certificate (-----BEGIN CERTIFICATE-----) found in `{}`{instead}",
            path.display()
        );
    }
    Ok(certs)
}

/// Whether a PEM file holds a private key of any kind (`-----BEGIN … PRIVATE KEY-----`).
fn holds_private_key(pem: &[u8]) -> bool {
    const END_OF_LABEL: &[u8] = b"PRIVATE KEY-----";
    pem.windows(END_OF_LABEL.len()).any(|w| w == END_OF_LABEL)
}

/// How to re-issue a certificate as X.509 version 3: signing its request with any extension
/// makes openssl write version 3.
fn reissue_hint(role: Role) -> String {
    let ext = match role {
        Role::Client => "basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth",
        Role::Listener | Role::Broker => {
            "basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\nsubjectAltName=DNS:HOST"
        }
    };
    format!(
        "re-issue it as version 3 by signing its request with extensions, e.g. `openssl x509 -req -in REQ.csr -CA ca.pem -CAkey ca.key -days 365 -extfile <(printf '{ext}') -out NEW.pem` (openssl writes version 1 when no extension is given)"
    )
}

/// Whose certificate a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Ours, offered to brokers (`security.ssl_cert_file`).
    Client,
    /// Ours, the serve listener's (`serve.ssl_cert_file`).
    Listener,
    /// A broker's, as it presented it.
    Broker,
}

/// Our own certificate (the first of the chain in `path`, config key `key`), checked before
/// rustls takes it: rustls refuses any but an X.509 version 3 certificate, with an error
/// that reads as if the key were wrong. A CA certificate (basicConstraints CA:TRUE) is
/// warned of: webpki peers refuse one as a client or server certificate.
fn check_own_certificate(
    chain: &[CertificateDer<'_>],
    path: &Path,
    key: &str,
    role: Role,
) -> Result<()> {
    let Some(info) = chain.first().and_then(|c| cert_info::describe(c)) else {
        return Ok(());
    };
    if info.version != 3 {
        bail!(
            "key `{key}`: the certificate in `{}` (subject {}, issued by {}) is an X.509 version {} certificate; rustls accepts only version 3 certificates: {}",
            path.display(),
            info.subject,
            info.issuer,
            info.version,
            reissue_hint(role)
        );
    }
    if info.is_ca {
        crate::log_warn!(
            "key `{key}`: the certificate in `{}` (subject {}) is a CA certificate (basicConstraints CA:TRUE); a peer that verifies with webpki (rustls) refuses it as a {} certificate: use a certificate issued to this {}, with basicConstraints CA:FALSE",
            path.display(),
            info.subject,
            if role == Role::Client {
                "client"
            } else {
                "server"
            },
            if role == Role::Client {
                "client"
            } else {
                "listener"
            },
        );
    }
    Ok(())
}

/// The key in `key_path` (config key `{section}.ssl_key_file`) as rustls will sign with it:
/// a type or size rustls cannot use is named here rather than as a mismatch with the
/// certificate.
fn check_signing_key(pk: &PrivateKeyDer<'_>, key_path: &Path, section: &str) -> Result<()> {
    provider()
        .key_provider
        .load_private_key(pk.clone_key())
        .map(drop)
        .map_err(|e| {
            anyhow!(
                "key `{section}.ssl_key_file`: rustls cannot sign with the key in `{}` ({e}); usable keys are RSA of 2048 to 4096 bits, ECDSA on P-256 or P-384, and Ed25519",
                key_path.display()
            )
        })
}

/// A private key others may read is warned of, once per file (not refused: Debian's keys
/// are often 0640 with a group of readers, and the group is the operator's choice).
fn warn_if_world_readable(path: &Path, key: &str) {
    use std::os::unix::fs::MetadataExt;
    static WARNED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let Ok(md) = std::fs::metadata(path) else {
        return;
    };
    let mode = md.mode() & 0o777;
    if mode & 0o007 == 0 {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned.iter().any(|p| p == path) {
        warned.push(path.to_path_buf());
        crate::log_warn!(
            "key `{key}`: the private key `{}` has mode {mode:04o}, readable by every user of this machine (chmod 600 it, or 640 with a group only the service is in)",
            path.display()
        );
    }
}

/// The private key in the PEM file `path` (PKCS#8, PKCS#1 or SEC1).
fn load_key(path: &Path, key: &str) -> Result<PrivateKeyDer<'static>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("key `{key}`: cannot read `{}`", path.display()))?;
    warn_if_world_readable(path, key);
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
    {
        bail!(
            "key `{key}`: the private key in `{}` is encrypted with a passphrase, which is not supported: write it unencrypted (`openssl pkey -in {} -out NEW.key`, then chmod 600 NEW.key) and name that file",
            path.display(),
            path.display()
        );
    }
    if !holds_private_key(&bytes) && text.contains("-----BEGIN CERTIFICATE-----") {
        bail!(
            "key `{key}`: `{}` holds a certificate, not a private key: are the certificate and key files swapped?",
            path.display()
        );
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        anyhow!(
            "key `{key}`: no readable private key in `{}` (PEM PKCS#8, PKCS#1 or SEC1 expected, unencrypted): {e}",
            path.display()
        )
    })
}

/// A certificate chain and its key, checked to belong together.
fn key_pair_error(e: rustls::Error, cert: &Path, key: &Path, section: &str) -> anyhow::Error {
    match e {
        rustls::Error::InconsistentKeys(_) => anyhow!(
            "key `{section}.ssl_key_file`: the key in `{}` does not match the certificate in `{}` ({section}.ssl_cert_file)",
            key.display(),
            cert.display()
        ),
        // Reading the certificate failed (the key was checked before): the certificate's file
        // is named, not the key's.
        rustls::Error::InvalidCertificate(c) => anyhow!(
            "key `{section}.ssl_cert_file`: rustls cannot read the certificate in `{}`: {c:?}",
            cert.display()
        ),
        e => anyhow!(
            "key `{section}.ssl_key_file`: the key in `{}` cannot be used with the certificate in `{}`: {e}",
            key.display(),
            cert.display()
        ),
    }
}

/// A root store from the PEM file `path`: every certificate in it must be a usable CA.
fn load_roots(path: &Path, key: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for (i, c) in load_certs(path, key)?.into_iter().enumerate() {
        roots.add(c).map_err(|e| {
            anyhow!(
                "key `{key}`: certificate {} in `{}` is not usable as a CA: {e}",
                i + 1,
                path.display()
            )
        })?;
    }
    Ok(roots)
}

/// The platform's roots: the first bundle of [`PLATFORM_BUNDLES`] that exists. Unparsable
/// entries in a system bundle are skipped (they are someone else's), none usable is an error.
fn platform_roots() -> Result<(RootCertStore, &'static str)> {
    for path in PLATFORM_BUNDLES {
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        let mut roots = RootCertStore::empty();
        let certs = CertificateDer::pem_slice_iter(&bytes).filter_map(|c| c.ok());
        let (added, _) = roots.add_parsable_certificates(certs);
        if added > 0 {
            return Ok((roots, path));
        }
    }
    bail!(
        "key `security.ssl_ca_file` is not set and no platform CA bundle was found (tried {}); set `ssl_ca_file` to the PEM file of the CAs that sign the brokers' certificates",
        PLATFORM_BUNDLES.join(", ")
    )
}

/// The client side of TLS: built once from `[security]` and shared by every connection.
#[derive(Debug)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    /// The client certificate offered (mutual TLS), to name it when the broker refuses it.
    client_cert: Option<PathBuf>,
    /// `ssl_verify_hostname`: false skips the name check (see
    /// [`ClientTls::warn_if_names_unchecked`]).
    verify_hostname: bool,
}

impl ClientTls {
    /// Loads the CA roots and the client certificate; errors name the key and the file.
    pub fn from_section(sec: &SecuritySection) -> Result<ClientTls> {
        let (roots, described) = match &sec.ssl_ca_file {
            Some(p) => (
                load_roots(p, "security.ssl_ca_file")?,
                format!("a CA in `ssl_ca_file` `{}`", p.display()),
            ),
            None => {
                let (roots, path) = platform_roots()?;
                (
                    roots,
                    format!("the platform roots (`{path}`; set `ssl_ca_file` for a private CA)"),
                )
            }
        };
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| anyhow!("key `security.ssl_ca_file`: no usable CA: {e}"))?;
        let verifier = Arc::new(Verifier {
            inner,
            verify_hostname: sec.ssl_verify_hostname,
            roots: described,
        });
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .context("TLS 1.2 and 1.3 with the ring provider")?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&sec.ssl_cert_file, &sec.ssl_key_file) {
            (Some(cert), Some(key)) => {
                let chain = load_certs(cert, "security.ssl_cert_file")?;
                check_own_certificate(&chain, cert, "security.ssl_cert_file", Role::Client)?;
                let pk = load_key(key, "security.ssl_key_file")?;
                check_signing_key(&pk, key, "security")?;
                builder
                    .with_client_auth_cert(chain, pk)
                    .map_err(|e| key_pair_error(e, cert, key, "security"))?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(ClientTls {
            config: Arc::new(config),
            client_cert: sec.ssl_cert_file.clone(),
            verify_hostname: sec.ssl_verify_hostname,
        })
    }

    /// With `ssl_verify_hostname = false`, says so: the commands that connect to the cluster
    /// (`run`, `repair`, `verify --against-leader`) call it once at their start; a
    /// configuration only checked says nothing.
    pub fn warn_if_names_unchecked(&self) {
        if !self.verify_hostname {
            crate::log_warn!(
                "security.ssl_verify_hostname = false: brokers' certificates are checked against the CAs but not against the host connected to; any certificate those CAs signed is accepted for every broker"
            );
        }
    }

    /// A client connection to `host` (the broker's host as the address names it: SNI and
    /// the name its certificate must carry; an IP literal is checked as an IP address).
    pub fn connection(&self, host: &str) -> io::Result<rustls::ClientConnection> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{host}` is neither a DNS name nor an IP address usable for TLS"),
            )
        })?;
        rustls::ClientConnection::new(self.config.clone(), name)
            .map_err(|e| io::Error::other(format!("cannot start TLS: {e}")))
    }

    pub fn client_cert(&self) -> Option<&Path> {
        self.client_cert.as_deref()
    }
}

/// The listener side of TLS: built once from `[serve]`.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    verifies_clients: bool,
}

impl ServerTls {
    /// Loads the listener's certificate chain `cert` and its `key` (checked to match) and,
    /// with `client_ca` (`ssl_client_ca_file`), the CAs client certificates must be signed
    /// by (required then). Errors name the `serve.*` key and the file.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<ServerTls> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .context("TLS 1.2 and 1.3 with the ring provider")?;
        let builder = match client_ca {
            Some(ca) => {
                let roots = load_roots(ca, "serve.ssl_client_ca_file")?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| {
                            anyhow!("key `serve.ssl_client_ca_file`: `{}`: {e}", ca.display())
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let chain = load_certs(cert, "serve.ssl_cert_file")?;
        check_own_certificate(&chain, cert, "serve.ssl_cert_file", Role::Listener)?;
        let pk = load_key(key, "serve.ssl_key_file")?;
        check_signing_key(&pk, key, "serve")?;
        let config = builder
            .with_single_cert(chain, pk)
            .map_err(|e| key_pair_error(e, cert, key, "serve"))?;
        Ok(ServerTls {
            config: Arc::new(config),
            verifies_clients: client_ca.is_some(),
        })
    }

    /// Whether clients must present a certificate (`ssl_client_ca_file`).
    pub fn verifies_clients(&self) -> bool {
        self.verifies_clients
    }

    pub fn connection(&self) -> io::Result<rustls::ServerConnection> {
        rustls::ServerConnection::new(self.config.clone())
            .map_err(|e| io::Error::other(format!("cannot start TLS: {e}")))
    }
}

/// webpki's verification, with refusals that carry the certificate's subject and names,
/// and the name check left out when `ssl_verify_hostname = false`.
#[derive(Debug)]
struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    verify_hostname: bool,
    /// Where the roots come from, as a refusal names them.
    roots: String,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // webpki checks the chain before the name: a name error means the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.verify_hostname => Ok(ServerCertVerified::assertion()),
            Err(rustls::Error::InvalidCertificate(cause)) => {
                Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                    OtherError(Arc::new(CertRefused {
                        cause,
                        cert: cert_info::describe(end_entity),
                        host: server_name.to_str().into_owned(),
                        roots: self.roots.clone(),
                    })),
                )))
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A broker certificate webpki refused, with what a message needs to say about it.
#[derive(Debug)]
struct CertRefused {
    cause: CertificateError,
    cert: Option<CertInfo>,
    /// The host connected to.
    host: String,
    roots: String,
}

impl std::fmt::Display for CertRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let which = match &self.cert {
            Some(c) => format!(
                "its certificate (subject {}, issued by {})",
                c.subject, c.issuer
            ),
            None => "its certificate".to_string(),
        };
        let names = || match &self.cert {
            Some(c) if !c.names.is_empty() => format!("it is for {}", c.names.join(", ")),
            _ => "it carries no subjectAltName".to_string(),
        };
        match &self.cause {
            CertificateError::UnknownIssuer => write!(
                f,
                "{which} is not signed by {}; check that the file holds the CA that signs the brokers' certificates",
                self.roots
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                write!(
                    f,
                    "{which} is not valid for `{}`, the host connected to ({}); connect by a name the certificate carries, or have the broker's certificate reissued with this name",
                    self.host,
                    names()
                )
            }
            CertificateError::Expired => write!(
                f,
                "{which} has expired; the broker needs a renewed certificate"
            ),
            CertificateError::ExpiredContext { not_after, .. } => write!(
                f,
                "{which} expired at {}; the broker needs a renewed certificate",
                crate::logging::format_utc(secs_to_ms(not_after.as_secs()))
            ),
            CertificateError::NotValidYet => {
                write!(
                    f,
                    "{which} is not valid yet; check the clocks of both hosts"
                )
            }
            CertificateError::NotValidYetContext { not_before, .. } => write!(
                f,
                "{which} is not valid before {}; check the clocks of both hosts",
                crate::logging::format_utc(secs_to_ms(not_before.as_secs()))
            ),
            _ if self.cert.as_ref().is_some_and(|c| c.version != 3) => write!(
                f,
                "{which} is an X.509 version {} certificate; rustls accepts only version 3 certificates: the broker's certificate must be re-issued as version 3 ({})",
                self.cert.as_ref().map_or(1, |c| c.version),
                reissue_hint(Role::Broker)
            ),
            CertificateError::UnsupportedSignatureAlgorithmContext { .. }
            | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => write!(
                f,
                "{which} (or a CA certificate in its chain) is signed with an algorithm rustls does not accept (SHA-1 and MD5 are refused; ECDSA and RSA with SHA-256 or stronger, and Ed25519, are accepted): the broker needs a certificate signed with one of those"
            ),
            // rustls passes webpki's own error through as `Other`.
            CertificateError::Other(o) if format!("{o} {o:?}").contains("CaUsedAsEndEntity") => {
                write!(
                    f,
                    "{which} is a CA certificate (basicConstraints CA:TRUE), which rustls refuses as a broker's certificate ({}): the broker needs a certificate issued to it, with basicConstraints CA:FALSE",
                    self.cause_text()
                )
            }
            other => write!(f, "{which} was refused: {other}"),
        }
    }
}

impl std::error::Error for CertRefused {}

impl CertRefused {
    /// rustls' own words for the refusal (webpki's, for what rustls does not name itself).
    fn cause_text(&self) -> String {
        match &self.cause {
            CertificateError::Other(o) => o.to_string(),
            c => format!("{c:?}"),
        }
    }
}

fn secs_to_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// A TLS failure as an operator reads it; the inner error of an `io::Error`.
#[derive(Debug)]
pub struct TlsFailure {
    message: String,
    /// Retrying cannot mend it without a change of certificate or configuration.
    pub fatal: bool,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsFailure {}

impl TlsFailure {
    /// The [`TlsFailure`] an I/O error from a TLS stream carries, if any: the stream's
    /// `Read` and `Write` can only return `io::Error`, so this is where it is told apart.
    pub fn of(e: &io::Error) -> Option<&TlsFailure> {
        e.get_ref().and_then(|i| i.downcast_ref::<TlsFailure>())
    }
}

/// `e` (from a client TLS stream) with a message naming what went wrong and what to check;
/// its kind is kept. `handshaking`: the handshake was not complete yet. An error that is not
/// TLS's passes through.
pub fn explain_client(e: io::Error, client_cert: Option<&Path>, handshaking: bool) -> io::Error {
    let kind = e.kind();
    let failure =
        |message: String, fatal: bool| io::Error::new(kind, TlsFailure { message, fatal });
    let Some(err) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        if handshaking && kind == io::ErrorKind::UnexpectedEof {
            return failure(
                "the broker closed the connection during the TLS handshake (is it a PLAINTEXT listener, or does it refuse TLS 1.2 and 1.3?)".to_string(),
                false,
            );
        }
        return e;
    };
    match err {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            match inner.downcast_ref::<CertRefused>() {
                Some(r) => failure(r.to_string(), true),
                None => failure(format!("its certificate was refused: {inner}"), true),
            }
        }
        rustls::Error::InvalidCertificate(c) => {
            failure(format!("its certificate was refused: {c}"), true)
        }
        rustls::Error::AlertReceived(alert) => {
            let requires = matches!(
                alert,
                AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure
            );
            // Without a client certificate the only one the broker can judge bad is the one we
            // did not send: Apache Kafka on Java 17 ends TLS 1.3 with bad_certificate when its
            // listener requires one (`ssl.client.auth=required`).
            let wanted = requires
                || matches!(
                    alert,
                    AlertDescription::BadCertificate | AlertDescription::CertificateUnknown
                );
            match client_cert {
                None if wanted => failure(
                    format!(
                        "the broker requires a client certificate (it ended the TLS handshake with alert {}), and none is configured: set `ssl_cert_file` and `ssl_key_file` in [security]",
                        alert_name(*alert)
                    ),
                    true,
                ),
                Some(cert)
                    if requires
                        || matches!(
                            alert,
                            AlertDescription::BadCertificate
                                | AlertDescription::UnknownCA
                                | AlertDescription::CertificateUnknown
                                | AlertDescription::CertificateExpired
                                | AlertDescription::AccessDenied
                        ) =>
                {
                    failure(
                        format!(
                            "the broker refused our client certificate `{}` (TLS alert {}); check that it is signed by a CA the broker trusts and still valid",
                            cert.display(),
                            alert_name(*alert)
                        ),
                        true,
                    )
                }
                _ => failure(
                    format!(
                        "the broker ended TLS with alert {}",
                        alert_name(*alert)
                    ),
                    matches!(alert, AlertDescription::ProtocolVersion),
                ),
            }
        }
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::PeerSentOversizedRecord => failure(
            "the broker did not answer TLS: is it a PLAINTEXT listener? (set `security.protocol` to what the broker's listener speaks)".to_string(),
            true,
        ),
        rustls::Error::PeerIncompatible(why) => failure(
            format!("the broker and we share no TLS version or cipher suite (we offer TLS 1.2 and 1.3): {why:?}"),
            true,
        ),
        other => failure(format!("TLS failed: {other}"), false),
    }
}

/// An alert as people name it: `certificate_required`, not `CertificateRequired`.
fn alert_name(a: AlertDescription) -> String {
    let debug = format!("{a:?}");
    let mut out = String::new();
    let mut after_lower = false;
    for c in debug.chars() {
        if c.is_ascii_uppercase() && after_lower {
            out.push('_');
        }
        after_lower = c.is_ascii_lowercase();
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_that_wants_a_client_certificate_none_is_configured_for_is_a_refusal() {
        for alert in [
            AlertDescription::CertificateRequired,
            AlertDescription::HandshakeFailure,
            AlertDescription::BadCertificate,
            AlertDescription::CertificateUnknown,
        ] {
            let e = io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::AlertReceived(alert),
            );
            let explained = explain_client(e, None, true);
            let failure = TlsFailure::of(&explained).expect("explained");
            assert!(failure.fatal, "{alert:?}");
            assert!(
                failure.message.contains("requires a client certificate")
                    && failure.message.contains(&alert_name(alert))
                    && failure.message.contains("ssl_cert_file"),
                "{}",
                failure.message
            );
        }
        // Other alerts stay what they are: worth retrying.
        let e = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(AlertDescription::InternalError),
        );
        let explained = explain_client(e, None, true);
        let failure = TlsFailure::of(&explained).expect("explained");
        assert!(!failure.fatal);
    }

    #[test]
    fn alerts_are_named_as_the_rfc_names_them() {
        assert_eq!(
            alert_name(AlertDescription::CertificateRequired),
            "certificate_required"
        );
        assert_eq!(alert_name(AlertDescription::UnknownCA), "unknown_ca");
    }

    #[test]
    fn a_missing_or_empty_pem_file_is_named_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let e = format!(
            "{:#}",
            load_certs(&missing, "security.ssl_ca_file").unwrap_err()
        );
        assert!(
            e.starts_with("key `security.ssl_ca_file`: cannot read `") && e.contains("nope.pem"),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let e = format!(
            "{:#}",
            load_certs(&empty, "serve.ssl_cert_file").unwrap_err()
        );
        assert!(
            e.contains("no PEM certificate") && e.contains("empty.pem"),
            "{e}"
        );
        let e = format!("{:#}", load_key(&empty, "serve.ssl_key_file").unwrap_err());
        assert!(
            e.contains("no readable private key") && e.contains("empty.pem"),
            "{e}"
        );
    }
}
