//! `restore prepare | write | finish`: the replica given back to an Apache Kafka cluster with
//! the same offsets, so that consumers resume where they were; and the daemon's archive of
//! what that needs beside the partitions ([`archive`]).
//!
//! 1. `prepare` ([`prepare`]), with the target cluster up: creates the missing topics with
//!    the archived partition counts and configs, every replica on one broker, and writes the
//!    plan ([`plan`]).
//! 2. `write` ([`write`]), with that broker stopped: fills its partition directories from the
//!    replica, in Kafka's own format, so that the broker loads them as its own.
//! 3. `finish` ([`finish`]), with the broker started again: checks every partition's range,
//!    closes the transactions the archive left open, moves the cluster's producer ids past
//!    the restored ones, and commits the archived consumer-group offsets.
//!
//! Each step checks before it writes, names what is wrong, and may be run again.

pub mod archive;
pub mod finish;
pub mod plan;
pub mod prepare;
pub mod write;

use crate::client::cluster::{ClusterMetadata, fetch_metadata};
use crate::client::connection::BrokerConnection;
use crate::security::{ClientSecurity, SecuritySection};
use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The deadline of each request to the target cluster.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A cluster restored into (or archived from), and how to reach it.
#[derive(Clone)]
pub struct Target {
    pub bootstrap: Vec<String>,
    pub security: Arc<ClientSecurity>,
    pub client_id: String,
    /// The deadline of each request.
    pub request_timeout: Duration,
}

/// `--client-config FILE`: a `[security]` table with the keys of the daemon's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientConfig {
    #[serde(default)]
    security: SecuritySection,
}

impl Target {
    /// `bootstrap` (comma-separated `host:port`s), over the security `client_config` names.
    pub fn new(bootstrap: &str, client_config: Option<&Path>) -> Result<Target> {
        let section = match client_config {
            None => SecuritySection::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("failed to read `{}`", p.display()))?;
                toml::from_str::<ClientConfig>(&text)
                    .map_err(|e| anyhow::anyhow!("`{}`: {e}", p.display()))?
                    .security
            }
        };
        let security = crate::config::validate_client_security(&section, &|_| String::new())
            .and_then(|()| ClientSecurity::from_section(&section))
            .with_context(|| {
                client_config.map_or_else(String::new, |p| format!("`{}`", p.display()))
            })?;
        Ok(Target {
            bootstrap: bootstrap
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            security,
            client_id: "replica-follower-restore".into(),
            request_timeout: REQUEST_TIMEOUT,
        })
    }
}

fn connect_addr(target: &Target, addr: &str) -> Result<BrokerConnection> {
    Ok(BrokerConnection::connect_secured(
        addr,
        &format!("broker {addr}"),
        &target.security,
        &target.client_id,
        64 << 20,
        target.request_timeout,
        |_| {},
    )?)
}

/// `call` again while the broker answers that the coordinator is not ready or elsewhere
/// (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a fresh
/// cluster's first answers), for up to `within`.
pub fn coordinated<T>(
    within: Duration,
    mut call: impl FnMut() -> crate::client::admin::Result<T>,
) -> crate::client::admin::Result<T> {
    use crate::client::admin::AdminError;
    use crate::protocol::error::ErrorCode;
    let deadline = std::time::Instant::now() + within;
    loop {
        match call() {
            Err(AdminError::Kafka(code, _))
                if matches!(
                    code,
                    ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                        | ErrorCode::COORDINATOR_NOT_AVAILABLE
                        | ErrorCode::NOT_COORDINATOR
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// A connection to the first bootstrap broker that answers, and its metadata of `topics`.
fn connect_target(
    target: &Target,
    topics: &[String],
) -> Result<(BrokerConnection, ClusterMetadata)> {
    let mut errors = Vec::new();
    for addr in &target.bootstrap {
        match connect_addr(target, addr).and_then(|mut c| {
            let md = fetch_metadata(&mut c, topics)?;
            Ok((c, md))
        }) {
            Ok(found) => return Ok(found),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    anyhow::bail!(
        "no bootstrap broker answered ({}): {}",
        target.bootstrap.join(","),
        errors.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_config_is_a_security_table_and_its_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("target.toml");
        std::fs::write(&p, "[security]\nprotocol = \"PLAINTEXT\"\n").unwrap();
        let t = Target::new("a:1, b:2,", Some(&p)).unwrap();
        assert_eq!(t.bootstrap, ["a:1", "b:2"]);
        for (text, says) in [
            ("[security]\nprotocol = \"SMOKE\"\n", "unknown variant"),
            ("[securty]\n", "unknown field"),
            (
                "[security]\nprotocol = \"SASL_PLAINTEXT\"\n",
                "sasl_mechanism",
            ),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = format!("{:#}", Target::new("a:1", Some(&p)).err().unwrap());
            assert!(e.contains(says) && e.contains("target.toml"), "{text}: {e}");
        }
        let e = format!(
            "{:#}",
            Target::new("a:1", Some(&dir.path().join("none")))
                .err()
                .unwrap()
        );
        assert!(e.contains("failed to read"), "{e}");
    }
}
