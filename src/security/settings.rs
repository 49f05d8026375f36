//! The settings of connection security, as the configuration gives them: the protocol,
//! the SASL mechanisms, `[security]` (how every connection to the cluster is made) and the
//! credentials a connection authenticates with. `config` deserializes into these; nothing
//! here reads a file.

use serde::Deserialize;
use std::path::PathBuf;

/// `security.protocol` and `serve.protocol`: Kafka's `security.protocol` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum SecurityProtocol {
    #[default]
    #[serde(rename = "PLAINTEXT")]
    Plaintext,
    #[serde(rename = "SSL")]
    Ssl,
    #[serde(rename = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[serde(rename = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// A SASL mechanism, as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    pub const ALL: [SaslMechanism; 3] = [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(s: &str) -> Option<SaslMechanism> {
        SaslMechanism::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// `[security]`: how every connection to the cluster (bootstrap and leaders) is made, with
/// Kafka's client settings. Secrets are never in this file: the password is read from
/// `sasl_password_file`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecuritySection {
    pub protocol: SecurityProtocol,
    /// PEM file of the CAs that sign the brokers' certificates (default: the platform's
    /// roots).
    pub ssl_ca_file: Option<PathBuf>,
    /// Whether the broker's certificate must name the host connected to (default true;
    /// `false` only by explicit choice, with a warning at start).
    pub ssl_verify_hostname: bool,
    /// A client certificate chain (PEM) for mutual TLS, with `ssl_key_file`.
    pub ssl_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub ssl_key_file: Option<PathBuf>,
    /// Required with `SASL_*`.
    pub sasl_mechanism: Option<SaslMechanism>,
    pub sasl_username: Option<String>,
    /// A file holding the password (one line; a trailing newline is ignored), readable by
    /// its owner only.
    pub sasl_password_file: Option<PathBuf>,
}

impl Default for SecuritySection {
    fn default() -> Self {
        SecuritySection {
            protocol: SecurityProtocol::Plaintext,
            ssl_ca_file: None,
            ssl_verify_hostname: true,
            ssl_cert_file: None,
            ssl_key_file: None,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password_file: None,
        }
    }
}

/// Who a connection authenticates as, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password_file: PathBuf,
}

impl SaslCredentials {
    /// From `[security]`, when its protocol uses SASL (the config has checked that every key
    /// is then set).
    pub fn from_config(sec: &SecuritySection) -> Option<SaslCredentials> {
        if !sec.protocol.uses_sasl() {
            return None;
        }
        Some(SaslCredentials {
            mechanism: sec.sasl_mechanism?,
            username: sec.sasl_username.clone()?,
            password_file: sec.sasl_password_file.clone()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_sasl_protocols_only() {
        let mut sec = SecuritySection {
            sasl_mechanism: Some(SaslMechanism::ScramSha256),
            sasl_username: Some("u".into()),
            sasl_password_file: Some("/pw".into()),
            ..SecuritySection::default()
        };
        assert_eq!(SaslCredentials::from_config(&sec), None);
        sec.protocol = SecurityProtocol::SaslSsl;
        let c = SaslCredentials::from_config(&sec).unwrap();
        assert_eq!(c.mechanism, SaslMechanism::ScramSha256);
        assert_eq!(c.username, "u");
    }
}
