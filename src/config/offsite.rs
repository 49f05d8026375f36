//! `[offsite]`: where the replica is copied to in S3-compatible storage, checked as it is
//! parsed (the files it names are read by [`crate::resolve`]).

use super::positive_i64;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use std::path::PathBuf;

/// `[offsite]`: the archive copied to S3-compatible object storage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffsiteSection {
    /// `http://` or `https://` URL of the store (path-style requests).
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
    #[serde(deserialize_with = "bucket_name")]
    pub bucket: String,
    /// Prepended to every object name (a `/` is added when it lacks one).
    #[serde(default, deserialize_with = "object_prefix")]
    pub prefix: String,
    #[serde(default = "default_region", deserialize_with = "non_empty")]
    pub region: String,
    /// Owner-only files; `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and
    /// `AWS_SESSION_TOKEN`) when unset.
    pub access_key_file: Option<PathBuf>,
    pub secret_key_file: Option<PathBuf>,
    /// 32 random bytes as 64 hex digits; objects are encrypted when set.
    pub encryption_key_file: Option<PathBuf>,
    /// The active segment's tail is offsite at most this long after it is on the local disk.
    #[serde(default = "default_max_delay_ms", deserialize_with = "positive_i64")]
    pub max_delay_ms: i64,
    /// How long one request to the store may take.
    #[serde(
        default = "default_offsite_timeout_ms",
        deserialize_with = "positive_i64"
    )]
    pub request_timeout_ms: i64,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_max_delay_ms() -> i64 {
    300_000
}
fn default_offsite_timeout_ms() -> i64 {
    30_000
}

fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    if v.trim().is_empty() {
        return Err(de::Error::custom("must not be empty"));
    }
    Ok(v)
}

fn endpoint<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    let rest = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') && !r.contains(char::is_whitespace) => {
            Ok(v.trim_end_matches('/').to_string())
        }
        _ => Err(de::Error::custom(format!(
            "`{v}` is not an http:// or https:// URL of an S3-compatible store"
        ))),
    }
}

/// S3's bucket-name rules: 3–63 characters of lower-case letters, digits, `.` and `-`,
/// starting and ending with a letter or digit.
fn bucket_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    let ok = (3..=63).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && v.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && v.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if !ok {
        return Err(de::Error::custom(format!(
            "`{v}` is not a bucket name: 3–63 lower-case letters, digits, `.` and `-`, starting and ending with a letter or digit"
        )));
    }
    Ok(v)
}

fn object_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    if v.starts_with('/') || v.contains("//") || v.chars().any(char::is_control) {
        return Err(de::Error::custom(format!(
            "`{v}` is not an object-name prefix: no leading `/`, no `//`, no control characters"
        )));
    }
    if v.is_empty() || v.ends_with('/') {
        Ok(v)
    } else {
        Ok(format!("{v}/"))
    }
}
