//! `[offsite]` made ready to use: the store's address and credentials read, the encryption
//! key loaded. Errors name the key (and the file), so `check-config` and `run` exit 2 on them.

use super::envelope::Key;
use super::store::{Store, StoreSettings};
use crate::config::OffsiteSection;
use anyhow::{Context, Result, bail};
use std::time::Duration;

/// What the uploader and the `offsite` commands need.
pub struct Offsite {
    pub store: Store,
    pub key: Option<Key>,
    /// Prepended to every object name (empty, or ending in `/`).
    pub prefix: String,
    pub max_delay: Duration,
    /// `endpoint`/`bucket`, for messages.
    pub location: String,
}

impl std::fmt::Debug for Offsite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offsite")
            .field("location", &self.location)
            .field("prefix", &self.prefix)
            .field("encrypted", &self.key.is_some())
            .finish_non_exhaustive()
    }
}

impl Offsite {
    /// The object's full name in the bucket.
    pub fn object(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// One credential: the file's first line, else the environment variable.
fn credential(
    file: Option<&std::path::Path>,
    key: &str,
    env: &str,
    at: &dyn Fn(&[&str]) -> String,
) -> Result<String> {
    if let Some(f) = file {
        return crate::security::read_secret(f)
            .with_context(|| format!("{}key `{key}`", at(&[key])));
    }
    match std::env::var(env) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => bail!(
            "{}key `{key}`: not set, and neither is the environment variable {env}: the store needs credentials",
            at(&["offsite"])
        ),
    }
}

/// Reads the credentials and the key; `at` names a key's line.
pub fn resolve(section: &OffsiteSection, at: &dyn Fn(&[&str]) -> String) -> Result<Offsite> {
    let access_key = credential(
        section.access_key_file.as_deref(),
        "offsite.access_key_file",
        "AWS_ACCESS_KEY_ID",
        at,
    )?;
    let secret_key = credential(
        section.secret_key_file.as_deref(),
        "offsite.secret_key_file",
        "AWS_SECRET_ACCESS_KEY",
        at,
    )?;
    // A token only goes with credentials from the environment.
    let session_token = if section.access_key_file.is_none() {
        std::env::var("AWS_SESSION_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    } else {
        None
    };
    let key = section
        .encryption_key_file
        .as_deref()
        .map(Key::from_file)
        .transpose()
        .with_context(|| {
            format!(
                "{}key `offsite.encryption_key_file`",
                at(&["offsite.encryption_key_file"])
            )
        })?;
    let store = Store::new(StoreSettings {
        endpoint: section.endpoint.clone(),
        bucket: section.bucket.clone(),
        region: section.region.clone(),
        access_key,
        secret_key,
        session_token,
        timeout: Duration::from_millis(section.request_timeout_ms.unsigned_abs()),
    })
    .with_context(|| format!("{}key `offsite.endpoint`", at(&["offsite.endpoint"])))?;
    Ok(Offsite {
        store,
        key,
        prefix: section.prefix.clone(),
        max_delay: Duration::from_millis(section.max_delay_ms.unsigned_abs()),
        location: format!("{}/{}", section.endpoint, section.bucket),
    })
}
