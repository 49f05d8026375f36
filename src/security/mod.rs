//! Security of connections: TLS (rustls) and SASL, for the client side (`[security]`, every
//! connection to the cluster) and for the serve listener (`[serve] protocol`).
//!
//! The SASL building blocks: [`scram`] (RFC 5802 / RFC 7677 client and server state
//! machines), [`users`] (the serve listener's credentials file, PLAIN checked against its
//! SCRAM entries) and [`base64`]. They only compute messages; the connection and the
//! listener carry them in SaslHandshake / SaslAuthenticate (`protocol::sasl`).

pub mod base64;
pub mod scram;
pub mod users;

pub mod cert_info;
pub mod settings;
pub mod stream;
pub mod tls;

pub use settings::{SaslCredentials, SaslMechanism, SecurityProtocol, SecuritySection};
pub use stream::Stream;
pub use tls::TlsFailure;

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// How every connection to the cluster is made (`[security]`): built once at start-up from
/// the configuration and shared (`Arc`) by the bootstrap and metadata connections, the
/// fetchers' leader connections, the fetcher manager's and those of `repair` and `verify
/// --against-leader`. A connection takes it in
/// [`BrokerConnection::connect_secured`](crate::client::BrokerConnection::connect_secured):
/// TCP, then TLS when the protocol uses it, then ApiVersions, then SASL when the protocol
/// uses it ([`crate::client::sasl`]).
#[derive(Debug)]
pub struct ClientSecurity {
    protocol: SecurityProtocol,
    tls: Option<tls::ClientTls>,
    sasl: Option<SaslCredentials>,
}

impl ClientSecurity {
    /// Plain TCP, no authentication.
    pub const PLAINTEXT: ClientSecurity = ClientSecurity {
        protocol: SecurityProtocol::Plaintext,
        tls: None,
        sasl: None,
    };

    /// From a validated `[security]`: loads the CA roots and the client certificate (errors
    /// name the key and file). The password file is read at each authentication.
    pub fn from_section(sec: &SecuritySection) -> Result<Arc<ClientSecurity>> {
        let sasl = SaslCredentials::from_config(sec);
        let tls = if sec.protocol.uses_tls() {
            Some(tls::ClientTls::from_section(sec)?)
        } else {
            None
        };
        Ok(Arc::new(ClientSecurity {
            protocol: sec.protocol,
            tls,
            sasl,
        }))
    }

    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// See [`tls::ClientTls::warn_if_names_unchecked`].
    pub fn warn_if_names_unchecked(&self) {
        if let Some(tls) = &self.tls {
            tls.warn_if_names_unchecked();
        }
    }

    pub fn tls(&self) -> Option<&tls::ClientTls> {
        self.tls.as_ref()
    }

    pub fn sasl(&self) -> Option<&SaslCredentials> {
        self.sasl.as_ref()
    }
}

/// What the serve listener requires of its clients (`[serve] protocol`): TLS and SASL. Built
/// once, from the configuration ([`crate::resolve`]) or the `serve` command line.
#[derive(Debug, Clone, Default)]
pub struct ListenerSecurity {
    pub tls: Option<tls::ServerTls>,
    /// The mechanisms offered and the users file, with a SASL protocol.
    pub sasl: Option<Arc<SaslServerConfig>>,
}

/// What the listener authenticates against.
#[derive(Debug)]
pub struct SaslServerConfig {
    /// Offered in SaslHandshake, in this order.
    pub mechanisms: Vec<SaslMechanism>,
    pub users: users::Users,
}

/// Whether `a` and `b` are equal, in a time that depends only on their lengths (keys and
/// signatures are compared with it, so a timing does not tell how many leading bytes match).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// `n` bytes from the kernel's CSPRNG (`/dev/urandom`, which never blocks once the system
/// has booted), for nonces and salts.
pub fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut out))
        .context("cannot read random bytes from `/dev/urandom`")?;
    Ok(out)
}

/// Refuses a secret file that is not a regular file or that others may read or write, or
/// its group write (mode & 0o027), naming it and its mode. Group read (mode & 0o040) is
/// refused too, except for a credential systemd hands the service (`LoadCredential=`, under
/// `$CREDENTIALS_DIRECTORY` or `/run/credentials/`): systemd makes those root's, mode 0440
/// with an ACL for the service's user where the file system has ACLs, in a directory only
/// the service can enter.
pub fn check_secret_file(path: &Path) -> Result<()> {
    let md =
        std::fs::metadata(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    if !md.is_file() {
        bail!("`{}` is not a regular file", path.display());
    }
    let mode = md.mode() & 0o777;
    if mode & refused_bits(path, std::env::var_os("CREDENTIALS_DIRECTORY").as_deref()) != 0 {
        bail!(
            "`{}` has mode {mode:04o}: a secret must not be readable by group or others (chmod 600 it)",
            path.display()
        );
    }
    Ok(())
}

/// The mode bits a secret at `path` must not have (see [`check_secret_file`]).
fn refused_bits(path: &Path, credentials_dir: Option<&std::ffi::OsStr>) -> u32 {
    let credential = credentials_dir.is_some_and(|d| !d.is_empty() && path.starts_with(d))
        || path.starts_with("/run/credentials/");
    if credential { 0o027 } else { 0o077 }
}

/// The secret in `path` (checked as [`check_secret_file`] does): its first line, without the
/// line end. An empty secret is an error.
pub fn read_secret(path: &Path) -> Result<String> {
    check_secret_file(path)?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() {
        bail!("`{}` is empty", path.display());
    }
    Ok(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ct_eq_compares_whole_slices() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }

    #[test]
    fn random_bytes_differ_between_calls() {
        let (a, b) = (random_bytes(32).unwrap(), random_bytes(32).unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn a_systemd_credential_may_be_group_readable_as_systemd_makes_it() {
        let dir = Some(std::ffi::OsStr::new("/run/credentials/rf.service"));
        let cred = Path::new("/run/credentials/rf.service/kafka-password");
        assert_eq!(0o440 & refused_bits(cred, dir), 0);
        assert_ne!(0o444 & refused_bits(cred, dir), 0, "others may not read it");
        assert_ne!(
            0o460 & refused_bits(cred, dir),
            0,
            "the group may not write it"
        );
        let elsewhere = Path::new("/etc/replica-follower/kafka-password");
        assert_ne!(0o440 & refused_bits(elsewhere, dir), 0);
        let custom = Some(std::ffi::OsStr::new("/var/creds"));
        assert_eq!(0o440 & refused_bits(Path::new("/var/creds/pw"), custom), 0);
        assert_ne!(0o440 & refused_bits(Path::new("/var/credsX/pw"), custom), 0);
    }

    #[test]
    fn a_secret_readable_by_others_is_refused_naming_the_file_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!("{:#}", read_secret(&f).unwrap_err());
        assert!(e.contains("pw") && e.contains("0644"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret(&f).unwrap(), "s3cret");
        std::fs::write(&f, "\n").unwrap();
        assert!(read_secret(&f).is_err());
    }
}
