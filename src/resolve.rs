//! From a validated [`Config`] to what a command runs with: the security material (the TLS
//! configurations, the SASL users, the password file checked), the log settings and the
//! descriptor budget.
//!
//! [`crate::config`] only parses and validates values. What reads a file the configuration
//! names, resolves an address, asks the process (its open-file limit) or needs the
//! listener's memory model is
//! done here, once, with errors that name the file, line and key as a parse error does
//! (`f.toml: line 9: key `security.sasl_password_file`: …`). `run`, `serve`, `check-config`
//! and every other command given `--config` resolve before they act (an error exits 2), and
//! a reload resolves the new file before it is taken.

use crate::config::{Config, ServeSection};
use crate::log::LogConfig;
use crate::security::tls::ServerTls;
use crate::security::users::Users;
use crate::security::{ClientSecurity, ListenerSecurity, SaslServerConfig};
use anyhow::{Context, Result, bail};
use std::sync::Arc;

/// A configuration's runtime parts.
#[derive(Debug)]
pub struct Resolved {
    /// How every connection to the cluster is made (`[security]`), shared by all of them.
    pub client: Arc<ClientSecurity>,
    /// What the serve listener requires of its clients (the security keys of `[serve]`).
    pub listener: ListenerSecurity,
    pub log: LogConfig,
    /// Most segment files held open at once: `log.max_open_files`, or its default for the
    /// open-file limit this process has ([`crate::log::resources::open_files::default_budget`]).
    pub max_open_files: usize,
    /// `[offsite]`, its credentials and key read.
    pub offsite: Option<Arc<crate::offsite::settings::Offsite>>,
}

/// Resolves `cfg`; an error names the configuration file, and the line and key where they
/// are known.
pub fn resolve(cfg: &Config) -> Result<Resolved> {
    resolve_parts(cfg).with_context(|| format!("{}", cfg.origin.path.display()))
}

fn resolve_parts(cfg: &Config) -> Result<Resolved> {
    let at = |names: &[&str]| cfg.origin.line_of_first(names);
    // Resolving a host name may read /etc/hosts or ask DNS.
    for (key, listen) in [
        ("metrics.listen", &cfg.metrics.listen),
        ("serve.listen", &cfg.serve.listen),
    ] {
        if let Some(l) = listen
            && std::net::ToSocketAddrs::to_socket_addrs(l.as_str()).is_err()
        {
            bail!(
                "{}key `{key}`: `{l}` is not a host:port to listen on",
                at(&[key])
            );
        }
    }
    check_serve_limits(&cfg.serve, &at)?;
    if let Some(f) = &cfg.security.sasl_password_file {
        // Readable now, so that a missing or open password file stops the start (exit 2)
        // instead of failing every connection; read again at each authentication.
        crate::security::read_secret(f).map(drop).with_context(|| {
            format!(
                "{}key `security.sasl_password_file`",
                at(&["security.sasl_password_file"])
            )
        })?;
    }
    // The PEM files are read now, so a check of the configuration finds a missing or
    // unreadable certificate, a key that does not match it, or no CA bundle; the errors
    // name the key and the file.
    let client = ClientSecurity::from_section(&cfg.security)?;
    let listener = listener_security(&cfg.serve, &at)?;
    let offsite = cfg
        .offsite
        .as_ref()
        .map(|o| crate::offsite::settings::resolve(o, &at).map(Arc::new))
        .transpose()?;
    Ok(Resolved {
        offsite,
        client,
        listener,
        log: cfg.log_config(),
        max_open_files: cfg.log.max_open_files.unwrap_or_else(|| {
            crate::log::resources::open_files::default_budget(
                crate::log::resources::descriptors::soft_limit(),
            )
        }),
    })
}

/// The follower addresses, and a shared memory pool that holds the largest request.
fn check_serve_limits(sv: &ServeSection, at: &dyn Fn(&[&str]) -> String) -> Result<()> {
    for (i, a) in sv.follower_addresses.iter().enumerate() {
        if let Err(e) = crate::serve::limits::Cidr::parse(a) {
            bail!(
                "{}key `serve.follower_addresses`: entry {i} `{a}`: {e}",
                at(&["serve.follower_addresses"])
            );
        }
    }
    let charge = crate::serve::limits::request_charge(sv.max_request_bytes.max(0) as usize);
    let pool_share = charge.saturating_sub(
        crate::serve::limits::CONNECTION_ALLOWANCE - crate::serve::limits::CONNECTION_BASE,
    );
    if pool_share > sv.max_memory_bytes {
        bail!(
            "{}key `serve.max_memory_bytes`: {} is too little for a request of serve.max_request_bytes ({}): answering one takes up to {} bytes of it; raise serve.max_memory_bytes to at least {pool_share} or lower serve.max_request_bytes",
            at(&["serve.max_memory_bytes", "serve.max_request_bytes"]),
            sv.max_memory_bytes,
            sv.max_request_bytes,
            pool_share
        );
    }
    Ok(())
}

/// The listener's certificate and key (and client CAs) with a TLS protocol, its users file
/// with a SASL one.
fn listener_security(
    sv: &ServeSection,
    at: &dyn Fn(&[&str]) -> String,
) -> Result<ListenerSecurity> {
    let tls = match (&sv.ssl_cert_file, &sv.ssl_key_file) {
        (Some(cert), Some(key)) if sv.protocol.uses_tls() => Some(ServerTls::load(
            cert,
            key,
            sv.ssl_client_ca_file.as_deref(),
        )?),
        _ => None,
    };
    let sasl = match &sv.sasl_users_file {
        Some(f) if sv.protocol.uses_sasl() => {
            let users = Users::load(f).with_context(|| {
                format!(
                    "{}key `serve.sasl_users_file`",
                    at(&["serve.sasl_users_file"])
                )
            })?;
            Some(Arc::new(SaslServerConfig {
                mechanisms: sv.sasl_mechanisms.clone(),
                users,
            }))
        }
        _ => None,
    };
    Ok(ListenerSecurity { tls, sasl })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::SecurityProtocol;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    const MINIMAL: &str = "data_dir = \"/tmp/x\"\nbootstrap_servers = [\"127.0.0.1:9092\"]\n[[follow]]\ntopic = \"orders\"\n";

    fn parse(extra: &str) -> Config {
        Config::parse(&format!("{MINIMAL}{extra}"), Path::new("test.toml")).unwrap()
    }

    /// The whole error resolving `extra` (after MINIMAL) fails with, as printed.
    fn resolve_err(extra: &str) -> String {
        format!("{:#}", resolve(&parse(extra)).unwrap_err())
    }

    #[test]
    fn a_plaintext_configuration_resolves_to_its_log_settings_and_a_budget() {
        let cfg = parse("[log]\nsegment_bytes = 4096\n");
        let parts = resolve(&cfg).unwrap();
        assert_eq!(parts.client.protocol(), SecurityProtocol::Plaintext);
        assert!(parts.client.tls().is_none() && parts.client.sasl().is_none());
        assert!(parts.listener.tls.is_none() && parts.listener.sasl.is_none());
        assert_eq!(parts.log, cfg.log_config());
        assert!(parts.max_open_files > 0);
        let capped = resolve(&parse("[log]\nmax_open_files = 7\n")).unwrap();
        assert_eq!(capped.max_open_files, 7);
    }

    #[test]
    fn a_password_file_others_may_read_is_refused_naming_the_file_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "secret\n").unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = resolve_err(&format!(
            "[security]\nprotocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"\nsasl_password_file = \"{}\"\n",
            pw.display()
        ));
        assert!(
            e.starts_with("test.toml: line 9: key `security.sasl_password_file`: ")
                && e.contains("0640"),
            "{e}"
        );
        assert!(!e.contains("secret\n") && !e.contains(": secret"), "{e}");
    }

    #[test]
    fn an_address_to_listen_on_that_does_not_resolve_is_refused_naming_the_line_and_key() {
        let e = resolve_err("[serve]\nlisten = \"nowhere\"\n");
        assert!(
            e.starts_with("test.toml: line 6: key `serve.listen`: `nowhere` is not"),
            "{e}"
        );
        let e = resolve_err("[metrics]\nlisten = \"nowhere\"\n");
        assert!(
            e.starts_with("test.toml: line 6: key `metrics.listen`: `nowhere` is not"),
            "{e}"
        );
    }

    #[test]
    fn serve_limits_are_refused_naming_the_file_line_and_key() {
        let e = resolve_err("[serve]\nfollower_addresses = [\"10.0.0.0/8\", \"nowhere\"]\n");
        assert!(
            e.starts_with("test.toml: line 6: key `serve.follower_addresses`: entry 1 `nowhere`"),
            "{e}"
        );
        let e = resolve_err("[serve]\nmax_memory_bytes = 1\n");
        assert!(
            e.starts_with("test.toml: line 6: key `serve.max_memory_bytes`: 1 is too little"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_users_file_is_refused_naming_the_file_line_and_key() {
        let e = resolve_err(
            "[serve]\nlisten = \"127.0.0.1:0\"\nprotocol = \"SASL_PLAINTEXT\"\nsasl_users_file = \"/nonexistent/users\"\n",
        );
        assert!(
            e.starts_with("test.toml: line 8: key `serve.sasl_users_file`: ")
                && e.contains("/nonexistent/users"),
            "{e}"
        );
    }
}
