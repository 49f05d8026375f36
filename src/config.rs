//! The TOML configuration, parsed and validated.
//!
//! Unknown keys, wrong types and bad values are refused while parsing; checks that span
//! several keys run afterwards. Either way the error is one line naming the file, the line
//! and the dotted key (`f.toml: line 7: key `fetch.max_wait_ms`: must be …`), so it reads
//! the same on a terminal and in the journal.
//!
//! Nothing here reads a file or resolves a name: the files the keys name, the addresses to
//! listen on and the limits that depend on the process or the listener are checked by
//! [`crate::resolve`], whose errors read the same ([`Origin`] keeps each key's line).

use crate::security::{SaslMechanism, SecurityProtocol, SecuritySection};
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use serde::de::{self, Deserializer};
use std::path::{Path, PathBuf};

/// Where a partition starts when it has no local state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPosition {
    Earliest,
    Latest,
    /// The first offset whose timestamp is ≥ this (ms since epoch).
    Timestamp(i64),
}

impl StartPosition {
    /// The ListOffsets timestamp for this start.
    pub fn list_offsets_timestamp(self) -> i64 {
        match self {
            StartPosition::Earliest => -2,
            StartPosition::Latest => -1,
            StartPosition::Timestamp(t) => t,
        }
    }
}

impl<'de> Deserialize<'de> for StartPosition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            D(toml::value::Datetime),
            S(String),
            I(i64),
        }
        const EXPECTED: &str = "expected \"earliest\", \"latest\", a timestamp in ms since epoch (≥ 0) or an RFC 3339 date-time with a zone (2026-11-30T07:12:03Z)";
        let raw = Raw::deserialize(d).map_err(|_| de::Error::custom(EXPECTED))?;
        let parsed = match raw {
            Raw::S(s) if s == "earliest" => Some(StartPosition::Earliest),
            Raw::S(s) if s == "latest" => Some(StartPosition::Latest),
            Raw::S(s) => parse_timestamp(&s).map(StartPosition::Timestamp),
            Raw::D(dt) => datetime_ms(&dt).map(StartPosition::Timestamp),
            Raw::I(t) if t >= 0 => Some(StartPosition::Timestamp(t)),
            Raw::I(_) => None,
        };
        parsed.ok_or_else(|| de::Error::custom(EXPECTED))
    }
}

/// A timestamp given as ms since the epoch (≥ 0) or as an RFC 3339 date-time with a zone
/// (`2026-11-30T07:12:03Z`, `…+01:00`); `None` for anything else.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    match s.parse::<i64>() {
        Ok(t) => (t >= 0).then_some(t),
        Err(_) => s
            .parse::<toml::value::Datetime>()
            .ok()
            .and_then(|dt| datetime_ms(&dt)),
    }
}

/// Milliseconds since the epoch of an RFC 3339 date-time with a zone; `None` without a date,
/// a time or a zone (a local time names no instant), or before 1970.
fn datetime_ms(dt: &toml::value::Datetime) -> Option<i64> {
    let (date, time, offset) = (dt.date?, dt.time?, dt.offset?);
    // Days from civil (proleptic Gregorian), as in `logging::format_utc` the other way.
    let (y, m, d) = (
        i64::from(date.year),
        i64::from(date.month),
        i64::from(date.day),
    );
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let offset_min = match offset {
        toml::value::Offset::Z => 0,
        toml::value::Offset::Custom { minutes } => i64::from(minutes),
    };
    let secs = days * 86_400
        + i64::from(time.hour) * 3600
        + i64::from(time.minute) * 60
        + i64::from(time.second.unwrap_or(0))
        - offset_min * 60;
    let ms = secs * 1000 + i64::from(time.nanosecond.unwrap_or(0)) / 1_000_000;
    (ms >= 0).then_some(ms)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

impl Isolation {
    pub fn level(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

mod offsite;
pub use offsite::OffsiteSection;

fn positive_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = i64::deserialize(d)?;
    if v <= 0 {
        return Err(de::Error::custom(format!("must be > 0, got {v}")));
    }
    Ok(v)
}

fn positive_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = i64::deserialize(d)?;
    match i32::try_from(v) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(de::Error::custom(format!(
            "must be between 1 and {}, got {v}",
            i32::MAX
        ))),
    }
}

/// -1 (the system's choice) or a size of 1 to `i32::MAX` bytes.
fn socket_buffer_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = i64::deserialize(d)?;
    match i32::try_from(v) {
        Ok(v) if v > 0 || v == -1 => Ok(v),
        _ => Err(de::Error::custom(format!(
            "must be -1 (the system's default) or between 1 and {}, got {v}",
            i32::MAX
        ))),
    }
}

fn non_negative_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = i64::deserialize(d)?;
    match i32::try_from(v) {
        Ok(v) if v >= 0 => Ok(v),
        _ => Err(de::Error::custom(format!(
            "must be between 0 and {}, got {v}",
            i32::MAX
        ))),
    }
}

fn limit_or_unlimited<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = i64::deserialize(d)?;
    if v < -1 {
        return Err(de::Error::custom(format!(
            "must be -1 (unlimited) or ≥ 0, got {v}"
        )));
    }
    Ok(v)
}

fn segment_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = i64::deserialize(d)?;
    if !(1024..=i64::from(i32::MAX)).contains(&v) {
        return Err(de::Error::custom(format!(
            "must be between 1024 and {}, got {v}",
            i32::MAX
        )));
    }
    Ok(v as u64)
}

fn index_interval<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = i64::deserialize(d)?;
    if v < 0 {
        return Err(de::Error::custom(format!("must be ≥ 0, got {v}")));
    }
    Ok(v as u64)
}

fn fetchers<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = i64::deserialize(d)?;
    match usize::try_from(v) {
        Ok(v) if (1..=64).contains(&v) => Ok(v),
        _ => Err(de::Error::custom(format!(
            "must be between 1 and 64, got {v}"
        ))),
    }
}

fn servers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    if v.is_empty() {
        return Err(de::Error::custom("needs at least one host:port"));
    }
    for s in &v {
        let ok = s
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(de::Error::custom(format!("`{s}` is not host:port")));
        }
    }
    Ok(v)
}

/// Kafka's rule for topic names: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn is_legal_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

fn topic_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let t = String::deserialize(d)?;
    if !is_legal_topic(&t) {
        return Err(de::Error::custom(format!(
            "`{t}` is not a legal topic name (1–249 of [a-zA-Z0-9._-], not . or ..)"
        )));
    }
    Ok(t)
}

fn partitions<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<i32>>, D::Error> {
    let v = Vec::<i64>::deserialize(d)?;
    if v.is_empty() {
        return Err(de::Error::custom(
            "must list at least one partition (omit the key for all)",
        ));
    }
    let mut out = Vec::with_capacity(v.len());
    for p in v {
        let Some(p) = i32::try_from(p).ok().filter(|p| *p >= 0) else {
            return Err(de::Error::custom(format!("partition {p} is out of range")));
        };
        if out.contains(&p) {
            return Err(de::Error::custom(format!("partition {p} is listed twice")));
        }
        out.push(p);
    }
    Ok(Some(out))
}

fn default_client_id() -> String {
    "replica-follower".to_string()
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Follow {
    #[serde(deserialize_with = "topic_name")]
    pub topic: String,
    /// `None`: every partition of the topic.
    #[serde(default, deserialize_with = "partitions")]
    pub partitions: Option<Vec<i32>>,
    #[serde(default = "default_start")]
    pub start: StartPosition,
    /// What to do when the leader's topic id for this topic differs from the one recorded in
    /// a local partition's `partition.metadata` (the topic was deleted and re-created).
    #[serde(default)]
    pub on_topic_recreated: OnTopicRecreated,
}

/// `on_topic_recreated` in `[[follow]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnTopicRecreated {
    /// Move the old history aside to `<topic>-<partition>.<old id>.archived/` and follow the
    /// new topic from its start.
    #[default]
    Archive,
    /// Stop following the topic; the local data stays as it is.
    Stop,
}

fn default_start() -> StartPosition {
    StartPosition::Earliest
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchConfig {
    #[serde(deserialize_with = "non_negative_i32")]
    pub max_wait_ms: i32,
    #[serde(deserialize_with = "non_negative_i32")]
    pub min_bytes: i32,
    #[serde(deserialize_with = "positive_i32")]
    pub max_bytes: i32,
    #[serde(deserialize_with = "positive_i32")]
    pub partition_max_bytes: i32,
    #[serde(deserialize_with = "fetchers")]
    pub fetchers_per_broker: usize,
    #[serde(deserialize_with = "positive_i64")]
    pub backoff_ms: i64,
    /// Kafka's `reconnect.backoff.max.ms`: failed fetches in a row wait twice as long each
    /// time (with jitter), up to this.
    #[serde(deserialize_with = "positive_i64")]
    pub backoff_max_ms: i64,
    pub isolation: Isolation,
    /// Kafka's `request.timeout.ms`: the deadline for a whole response (plus a fetch's
    /// `max_wait_ms`).
    #[serde(deserialize_with = "positive_i64")]
    pub request_timeout_ms: i64,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 52_428_800,
            partition_max_bytes: 1_048_576,
            fetchers_per_broker: 1,
            backoff_ms: 1000,
            backoff_max_ms: 10_000,
            isolation: Isolation::ReadUncommitted,
            request_timeout_ms: 30_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    #[serde(deserialize_with = "segment_bytes")]
    pub segment_bytes: u64,
    #[serde(deserialize_with = "positive_i64")]
    pub segment_ms: i64,
    #[serde(deserialize_with = "index_interval")]
    pub index_interval_bytes: u64,
    #[serde(deserialize_with = "limit_or_unlimited")]
    pub retention_bytes: i64,
    #[serde(deserialize_with = "limit_or_unlimited")]
    pub retention_ms: i64,
    #[serde(deserialize_with = "positive_i64")]
    pub flush_interval_ms: i64,
    /// Appends pause below this much free space on the data dir's filesystem; 0: off.
    pub min_free_bytes: u64,
    /// Most segment files held open at once across every partition; `None`: from the soft
    /// open-file limit at start ([`crate::log::resources::open_files::default_budget`]).
    #[serde(deserialize_with = "some_positive_usize")]
    pub max_open_files: Option<usize>,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            index_interval_bytes: 4096,
            retention_bytes: -1,
            retention_ms: -1,
            flush_interval_ms: 1000,
            min_free_bytes: 256 << 20,
            max_open_files: None,
        }
    }
}

/// `[metrics]`: a Prometheus endpoint, off unless `listen` is set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `host:port` to serve `GET /metrics` on.
    pub listen: Option<String>,
}

/// The `[security]` keys that belong together: TLS keys only with TLS, a certificate with
/// its key, every SASL key with SASL and none without, a username without NUL. `at` names
/// where a key is (`line N: `), or nothing.
pub fn validate_client_security(
    sec: &SecuritySection,
    at: &dyn Fn(&[&str]) -> String,
) -> Result<()> {
    let proto = sec.protocol;
    let tls_keys = [
        ("security.ssl_ca_file", sec.ssl_ca_file.is_some()),
        ("security.ssl_cert_file", sec.ssl_cert_file.is_some()),
        ("security.ssl_key_file", sec.ssl_key_file.is_some()),
        ("security.ssl_verify_hostname", !sec.ssl_verify_hostname),
    ];
    if !proto.uses_tls()
        && let Some((k, _)) = tls_keys.iter().find(|(_, set)| *set)
    {
        bail!(
            "{}key `{k}`: only used with `security.protocol` SSL or SASL_SSL (it is {})",
            at(&[k]),
            proto.name()
        );
    }
    if sec.ssl_cert_file.is_some() != sec.ssl_key_file.is_some() {
        let (k, other) = if sec.ssl_cert_file.is_some() {
            ("security.ssl_cert_file", "security.ssl_key_file")
        } else {
            ("security.ssl_key_file", "security.ssl_cert_file")
        };
        bail!("{}key `{k}`: needs `{other}` too", at(&[k]));
    }
    let sasl_keys = [
        ("security.sasl_mechanism", sec.sasl_mechanism.is_some()),
        ("security.sasl_username", sec.sasl_username.is_some()),
        (
            "security.sasl_password_file",
            sec.sasl_password_file.is_some(),
        ),
    ];
    if proto.uses_sasl() {
        if let Some((k, _)) = sasl_keys.iter().find(|(_, set)| !*set) {
            bail!(
                "{}key `{k}`: required with `security.protocol` {}",
                at(&["security.protocol"]),
                proto.name()
            );
        }
    } else if let Some((k, _)) = sasl_keys.iter().find(|(_, set)| *set) {
        bail!(
            "{}key `{k}`: only used with `security.protocol` SASL_PLAINTEXT or SASL_SSL (it is {})",
            at(&[k]),
            proto.name()
        );
    }
    if let Some(u) = &sec.sasl_username
        && (u.is_empty() || u.contains('\0'))
    {
        bail!(
            "{}key `security.sasl_username`: must be non-empty, without NUL",
            at(&["security.sasl_username"])
        );
    }
    Ok(())
}

/// `[groups]`: the consumer groups whose committed offsets are archived (none by default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupsSection {
    /// Regular expressions over group ids; a group is archived when one matches its whole
    /// id (as MirrorMaker's `groups` list does).
    #[serde(deserialize_with = "regexes")]
    pub include: Vec<String>,
    /// How often the groups are listed and their offsets fetched.
    #[serde(deserialize_with = "positive_i64")]
    pub refresh_ms: i64,
}

impl Default for GroupsSection {
    fn default() -> Self {
        GroupsSection {
            include: Vec::new(),
            refresh_ms: 60_000,
        }
    }
}

impl GroupsSection {
    /// `include` compiled once: a group is archived when [`regex::RegexSet::is_match`] says so;
    /// `None` when nothing is included.
    pub fn matcher(&self) -> Option<regex::RegexSet> {
        if self.include.is_empty() {
            return None;
        }
        regex::RegexSet::new(self.include.iter().map(|p| format!("^(?:{p})$"))).ok()
    }
}

/// `pattern` compiled to match a whole string.
fn whole_match(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

/// A list of regular expressions, each checked to compile.
fn regexes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    for p in &v {
        if let Err(e) = whole_match(p) {
            let e = e.to_string();
            let last = e.lines().last().unwrap_or_default().trim();
            let last = last.strip_prefix("error: ").unwrap_or(last);
            return Err(de::Error::custom(format!(
                "`{p}` is not a regular expression: {last}"
            )));
        }
    }
    Ok(v)
}

/// `[serve]`: the replica as a read-only Kafka broker, off unless `listen` is set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeSection {
    /// `host:port` to accept Kafka clients on.
    pub listen: Option<String>,
    /// `host:port` Metadata names this broker by (default: `listen`).
    pub advertised: Option<String>,
    /// The broker id Metadata reports as every local partition's leader.
    #[serde(deserialize_with = "non_negative_i32")]
    pub node_id: i32,
    /// Connections beyond this are accepted and closed at once.
    #[serde(deserialize_with = "positive_usize")]
    pub max_connections: usize,
    /// Connections from one client address beyond this are accepted and closed at once
    /// (Kafka's `max.connections.per.ip`).
    #[serde(deserialize_with = "positive_usize")]
    pub max_connections_per_ip: usize,
    /// The memory every connection shares for requests being read and responses being
    /// built or sent, beyond each one's own allowance (Kafka's `queued.max.request.bytes`).
    #[serde(deserialize_with = "positive_usize")]
    pub max_memory_bytes: usize,
    /// Addresses and networks whose Fetch requests with a replica id ≥ 0 are a follower's
    /// (their sessions have priority); anyone else's is a consumer's.
    pub follower_addresses: Vec<String>,
    /// SASL users whose Fetch requests with a replica id ≥ 0 are a follower's.
    pub follower_principals: Vec<String>,
    /// A request frame larger than this closes its connection (Kafka's
    /// `socket.request.max.bytes`, 100 MiB there; a read-only broker's requests are small).
    #[serde(deserialize_with = "positive_i32")]
    pub max_request_bytes: i32,
    /// A connection with no request for this long is closed (Kafka's
    /// `connections.max.idle.ms`).
    #[serde(deserialize_with = "positive_i64")]
    pub idle_timeout_ms: i64,
    /// Incremental fetch sessions (KIP-227) kept for all clients together (Kafka's
    /// `max.incremental.fetch.session.cache.slots`); a full fetch beyond them is answered
    /// sessionless unless it may evict one ([`crate::serve::sessions`]).
    #[serde(deserialize_with = "positive_usize")]
    pub max_fetch_sessions: usize,
    /// The most record bytes one Fetch response carries, whatever the request asks (Kafka's
    /// `fetch.max.bytes`); the first batch is still sent whole (KIP-74).
    #[serde(deserialize_with = "positive_i32")]
    pub fetch_max_bytes: i32,
    /// The kernel send buffer (`SO_SNDBUF`) of each client connection, -1 for the
    /// system's autotuned one (Kafka's `socket.send.buffer.bytes`): with it, what clients
    /// that do not read hold of the kernel's socket memory is bounded.
    #[serde(deserialize_with = "socket_buffer_bytes")]
    pub socket_send_buffer_bytes: i32,
    /// What clients must speak: TLS (`SSL`, `SASL_SSL`) and/or SASL (`SASL_*`).
    pub protocol: SecurityProtocol,
    /// The listener's certificate chain (PEM), required with TLS.
    pub ssl_cert_file: Option<PathBuf>,
    /// The listener's private key (PEM), required with TLS.
    pub ssl_key_file: Option<PathBuf>,
    /// When set, TLS clients must present a certificate signed by one of these CAs (PEM).
    pub ssl_client_ca_file: Option<PathBuf>,
    /// The mechanisms offered in SaslHandshake (default: all three).
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// The credentials file `replica-follower add-user` writes; required with `SASL_*`.
    pub sasl_users_file: Option<PathBuf>,
}

impl Default for ServeSection {
    fn default() -> Self {
        ServeSection {
            listen: None,
            advertised: None,
            node_id: 0,
            max_connections: 256,
            max_connections_per_ip: 64,
            max_memory_bytes: 128 << 20,
            follower_addresses: Vec::new(),
            follower_principals: Vec::new(),
            max_request_bytes: 1 << 20,
            idle_timeout_ms: 600_000,
            max_fetch_sessions: 1000,
            fetch_max_bytes: 57_671_680,
            socket_send_buffer_bytes: 102_400,
            protocol: SecurityProtocol::Plaintext,
            ssl_cert_file: None,
            ssl_key_file: None,
            ssl_client_ca_file: None,
            sasl_mechanisms: SaslMechanism::ALL.to_vec(),
            sasl_users_file: None,
        }
    }
}

fn positive_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let v = i64::deserialize(d)?;
    if v < 1 {
        return Err(de::Error::custom(format!("must be ≥ 1, got {v}")));
    }
    usize::try_from(v).map_err(|_| de::Error::custom(format!("{v} is too large")))
}

fn some_positive_usize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    positive_usize(d).map(Some)
}

/// Whether `s` is `host:port` with a port number (the host is not resolved).
fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointSection {
    #[serde(deserialize_with = "positive_i64")]
    pub interval_ms: i64,
}

impl Default for CheckpointSection {
    fn default() -> Self {
        CheckpointSection { interval_ms: 5000 }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub data_dir: PathBuf,
    #[serde(deserialize_with = "servers")]
    pub bootstrap_servers: Vec<String>,
    #[serde(default = "default_client_id")]
    pub client_id: String,
    pub follow: Vec<Follow>,
    #[serde(default)]
    pub fetch: FetchConfig,
    #[serde(default)]
    pub log: LogSection,
    #[serde(default)]
    pub checkpoint: CheckpointSection,
    #[serde(default)]
    pub metrics: MetricsSection,
    #[serde(default)]
    pub serve: ServeSection,
    #[serde(default)]
    pub groups: GroupsSection,
    #[serde(default)]
    pub security: SecuritySection,
    /// The offsite copy in S3-compatible storage; none without the section.
    pub offsite: Option<OffsiteSection>,
    /// Where this configuration was read from, to name the file, line and key in the errors
    /// of checks made after parsing ([`crate::resolve`]).
    #[serde(skip)]
    pub origin: Origin,
}

impl Config {
    pub fn log_config(&self) -> crate::log::LogConfig {
        crate::log::LogConfig {
            segment_bytes: self.log.segment_bytes,
            segment_ms: self.log.segment_ms,
            index_interval_bytes: self.log.index_interval_bytes,
            retention_bytes: self.log.retention_bytes,
            retention_ms: self.log.retention_ms,
        }
    }

    /// Parses and validates `text`; `origin` names the file in errors, which are one line:
    /// `FILE: line N: key `fetch.max_bytes`: <what is wrong>`.
    pub fn parse(text: &str, origin: &Path) -> Result<Config> {
        let keys = match toml::de::DeTable::parse(text) {
            Ok(doc) => KeySpans::of(text, doc.get_ref()),
            Err(e) => bail!(
                "{}: {}",
                origin.display(),
                KeySpans::lines(text).describe(&e)
            ),
        };
        let mut cfg: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}: {}", origin.display(), keys.describe(&e)))?;
        cfg.origin = keys.origin(origin);
        cfg.validate(&cfg.origin)
            .with_context(|| format!("{}", origin.display()))?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read config `{}`", path.display()))?;
        Config::parse(&text, path)
    }

    /// Checks that span keys or need the whole file; `keys` gives each error its line (that
    /// of the first named key the file sets).
    fn validate(&self, keys: &Origin) -> Result<()> {
        let at = |names: &[&str]| keys.line_of_first(names);
        if self.data_dir.as_os_str().is_empty() {
            bail!("{}key `data_dir`: must not be empty", at(&["data_dir"]));
        }
        if self.client_id.is_empty() || self.client_id.len() > 255 {
            bail!(
                "{}key `client_id`: must be 1–255 characters",
                at(&["client_id"])
            );
        }
        if self.follow.is_empty() {
            bail!(
                "{}key `follow`: at least one [[follow]] table is required",
                at(&["follow"])
            );
        }
        for (i, f) in self.follow.iter().enumerate() {
            if let Some(j) = self.follow.iter().take(i).position(|g| g.topic == f.topic) {
                let key = format!("follow[{i}].topic");
                bail!(
                    "{}key `{key}`: topic `{}` is followed twice (also `follow[{j}].topic`)",
                    at(&[&key]),
                    f.topic
                );
            }
        }
        if let Some(a) = &self.serve.advertised {
            if !is_host_port(a) {
                bail!(
                    "{}key `serve.advertised`: `{a}` is not a host:port",
                    at(&["serve.advertised"])
                );
            }
            if self.serve.listen.is_none() {
                bail!(
                    "{}key `serve.advertised`: needs `serve.listen`",
                    at(&["serve.advertised"])
                );
            }
        }
        self.validate_security(keys)?;
        keys.at_most(
            ("fetch.backoff_ms", self.fetch.backoff_ms),
            ("fetch.backoff_max_ms", self.fetch.backoff_max_ms),
            Said::ByHigh,
        )?;
        keys.at_most(
            (
                "fetch.partition_max_bytes",
                i64::from(self.fetch.partition_max_bytes),
            ),
            ("fetch.max_bytes", i64::from(self.fetch.max_bytes)),
            Said::ByLow,
        )
    }
    /// `[security]` and the security keys of `[serve]`: keys that belong together are set
    /// together, and keys for a protocol not in use are refused (a typo'd protocol would
    /// otherwise silently ignore them).
    fn validate_security(&self, keys: &Origin) -> Result<()> {
        let at = |names: &[&str]| keys.line_of_first(names);
        validate_client_security(&self.security, &at)?;
        let sv = &self.serve;
        let sproto = sv.protocol;
        if sproto != SecurityProtocol::Plaintext && sv.listen.is_none() {
            bail!(
                "{}key `serve.protocol`: needs `serve.listen`",
                at(&["serve.protocol"])
            );
        }
        if sproto.uses_tls() {
            for (k, set) in [
                ("serve.ssl_cert_file", sv.ssl_cert_file.is_some()),
                ("serve.ssl_key_file", sv.ssl_key_file.is_some()),
            ] {
                if !set {
                    bail!(
                        "{}key `{k}`: required with `serve.protocol` {}",
                        at(&["serve.protocol"]),
                        sproto.name()
                    );
                }
            }
        } else if let Some(k) = [
            ("serve.ssl_cert_file", sv.ssl_cert_file.is_some()),
            ("serve.ssl_key_file", sv.ssl_key_file.is_some()),
            ("serve.ssl_client_ca_file", sv.ssl_client_ca_file.is_some()),
        ]
        .iter()
        .find_map(|(k, set)| set.then_some(*k))
        {
            bail!(
                "{}key `{k}`: only used with `serve.protocol` SSL or SASL_SSL (it is {})",
                at(&[k]),
                sproto.name()
            );
        }
        if sproto.uses_sasl() {
            if sv.sasl_users_file.is_none() {
                bail!(
                    "{}key `serve.sasl_users_file`: required with `serve.protocol` {}",
                    at(&["serve.protocol"]),
                    sproto.name()
                );
            }
            if sv.sasl_mechanisms.is_empty() {
                bail!(
                    "{}key `serve.sasl_mechanisms`: must name at least one mechanism",
                    at(&["serve.sasl_mechanisms"])
                );
            }
        } else if sv.sasl_users_file.is_some() {
            bail!(
                "{}key `serve.sasl_users_file`: only used with `serve.protocol` SASL_PLAINTEXT or SASL_SSL (it is {})",
                at(&["serve.sasl_users_file"]),
                sproto.name()
            );
        }
        Ok(())
    }
}

/// Which key a cross-key error is about when the file sets both (or neither).
enum Said {
    ByLow,
    ByHigh,
}

/// Where a configuration was read from: the file, and the line of each key it sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub path: PathBuf,
    /// Each key the file sets, dotted (`fetch.max_bytes`, `follow[1].topic`), and its line.
    keys: Vec<(String, usize)>,
}

impl Origin {
    /// Checks `low.1 <= high.1`. The error is about a key the file sets, at its line, and a
    /// value the file leaves at its default says so: `key `fetch.backoff_ms` (20000) must
    /// not exceed `fetch.backoff_max_ms` (10000, its default)`.
    fn at_most(&self, low: (&str, i64), high: (&str, i64), said: Said) -> Result<()> {
        if low.1 <= high.1 {
            return Ok(());
        }
        let sets = |name: &str| self.keys.iter().any(|(k, _)| k == name);
        let by_low = match said {
            Said::ByLow => sets(low.0) || !sets(high.0),
            Said::ByHigh => sets(low.0) && !sets(high.0),
        };
        let (subject, verb, other) = if by_low {
            (low, "must not exceed", high)
        } else {
            (high, "must not be below", low)
        };
        let default = if sets(other.0) { "" } else { ", its default" };
        bail!(
            "{}key `{}` ({}) {verb} `{}` ({}{default})",
            self.line_of_first(&[subject.0]),
            subject.0,
            subject.1,
            other.0,
            other.1
        )
    }

    /// `line N: ` for the first of `names` the file sets; empty when it sets none.
    pub fn line_of_first(&self, names: &[&str]) -> String {
        names
            .iter()
            .find_map(|n| self.keys.iter().find(|(k, _)| k == n))
            .map(|(_, line)| format!("line {line}: "))
            .unwrap_or_default()
    }
}

/// Every key the file sets, dotted as an operator writes it (`fetch.max_bytes`,
/// `follow[1].topic`), with the byte ranges of the key and of its value: what turns the
/// byte span of a TOML error into the key it is about, and a key into its line.
struct KeySpans<'t> {
    text: &'t str,
    /// Byte offset at which each line starts.
    line_starts: Vec<usize>,
    keys: Vec<KeySpan>,
}

struct KeySpan {
    name: String,
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    /// The value is a table: `[fetch]`, or one `[[follow]]`.
    table: bool,
    /// One table of an array of tables (`follow[1]`): its "key" is its header.
    element: bool,
}

impl<'t> KeySpans<'t> {
    /// Lines only: for a file that does not parse as TOML.
    fn lines(text: &'t str) -> KeySpans<'t> {
        KeySpans {
            text,
            line_starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
            keys: Vec::new(),
        }
    }

    fn of(text: &'t str, doc: &toml::de::DeTable<'_>) -> KeySpans<'t> {
        let mut spans = KeySpans::lines(text);
        spans.walk_table("", doc);
        spans
    }

    fn walk_table(&mut self, prefix: &str, table: &toml::de::DeTable<'_>) {
        for (k, v) in table.iter() {
            let name = if prefix.is_empty() {
                k.get_ref().to_string()
            } else {
                format!("{prefix}.{}", k.get_ref())
            };
            let table = matches!(v.get_ref(), toml::de::DeValue::Table(_));
            self.keys.push(KeySpan {
                name: name.clone(),
                key: k.span(),
                value: v.span(),
                table,
                element: false,
            });
            match v.get_ref() {
                toml::de::DeValue::Table(t) => self.walk_table(&name, t),
                toml::de::DeValue::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let toml::de::DeValue::Table(t) = item.get_ref() {
                            let name = format!("{name}[{i}]");
                            self.keys.push(KeySpan {
                                name: name.clone(),
                                key: item.span(),
                                value: item.span(),
                                table: true,
                                element: true,
                            });
                            self.walk_table(&name, t);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The file `path` and the line of each key.
    fn origin(&self, path: &Path) -> Origin {
        Origin {
            path: path.to_path_buf(),
            keys: (self.keys.iter())
                .map(|k| (k.name.clone(), self.line_column(k.key.start).0))
                .collect(),
        }
    }

    /// 1-based line and column of byte `pos`.
    fn line_column(&self, pos: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|&s| s <= pos).max(1);
        let start = self.line_starts.get(line - 1).copied().unwrap_or(0);
        (line, pos.saturating_sub(start) + 1)
    }

    /// A TOML error as one line: `line N: key `K`: message`. The key is the innermost one
    /// whose key or value holds the error's position; for a missing key, the table that
    /// lacks it (none at the top level); for a syntax error, the column and the text there.
    fn describe(&self, e: &toml::de::Error) -> String {
        let msg = e.message().trim_end();
        let Some(span) = e.span() else {
            return msg.to_string();
        };
        let holds = |r: &std::ops::Range<usize>| r.start <= span.start && span.start < r.end;
        let missing = msg.starts_with("missing field");
        let key = self
            .keys
            .iter()
            .filter(|k| if missing { k.table } else { !k.element })
            .filter(|k| holds(&k.key) || holds(&k.value))
            .min_by_key(|k| k.value.len());
        match key {
            Some(k) if missing => format!(
                "line {}: table `{}`: {msg}",
                self.line_column(k.key.start).0,
                k.name
            ),
            Some(k) => format!(
                "line {}: key `{}`: {msg}",
                self.line_column(k.key.start).0,
                k.name
            ),
            None if missing => msg.to_string(),
            None => {
                let (line, column) = self.line_column(span.start);
                let there = self
                    .text
                    .get(span.clone())
                    .map(str::trim)
                    .filter(|t| !t.is_empty() && t.len() <= 60 && !t.contains('\n'))
                    .filter(|t| !msg.contains(&format!("`{t}`")))
                    .map(|t| format!(" `{t}`"))
                    .unwrap_or_default();
                format!("line {line}, column {column}: {msg}{there}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
data_dir = "/tmp/x"
bootstrap_servers = ["127.0.0.1:9092"]
[[follow]]
topic = "orders"
"#;

    fn parse(s: &str) -> Result<Config> {
        Config::parse(s, Path::new("test.toml"))
    }

    #[test]
    fn start_takes_rfc_3339_date_times_with_a_zone_quoted_or_not() {
        let start = |v: &str| {
            Config::parse(
                &format!(
                    "data_dir = \"/d\"\nbootstrap_servers = [\"a:1\"]\n[[follow]]\ntopic = \"t\"\nstart = {v}\n"
                ),
                Path::new("t.toml"),
            )
            .map(|c| c.follow[0].start)
        };
        // 2023-11-14T22:13:20.123Z is 1_700_000_000_123 ms (logging::format_utc's test).
        let t = StartPosition::Timestamp(1_700_000_000_123);
        assert_eq!(start("\"2023-11-14T22:13:20.123Z\"").unwrap(), t);
        assert_eq!(start("2023-11-14T22:13:20.123Z").unwrap(), t);
        assert_eq!(start("2023-11-14T23:13:20.123+01:00").unwrap(), t);
        assert_eq!(
            start("\"2000-02-29T00:00:00Z\"").unwrap(),
            StartPosition::Timestamp(951_782_400_000)
        );
        for bad in [
            "2023-11-14T22:13:20",
            "2023-11-14",
            "\"1969-12-31T23:59:59Z\"",
        ] {
            let e = start(bad).unwrap_err().to_string();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
    }

    #[test]
    fn minimal_config_gets_the_documented_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.client_id, "replica-follower");
        assert_eq!(c.fetch, FetchConfig::default());
        assert_eq!(c.fetch.max_wait_ms, 500);
        assert_eq!(c.fetch.max_bytes, 52_428_800);
        assert_eq!(c.log.segment_bytes, 1_073_741_824);
        assert_eq!(c.log.flush_interval_ms, 1000);
        assert_eq!(c.checkpoint.interval_ms, 5000);
        assert_eq!(c.follow[0].partitions, None);
        assert_eq!(c.follow[0].start, StartPosition::Earliest);
    }

    #[test]
    fn full_config_parses() {
        let c = parse(
            r#"
data_dir = "/var/lib/rf"
bootstrap_servers = ["a:1", "b:2"]
client_id = "me"
[[follow]]
topic = "orders"
partitions = [0, 1]
start = "latest"
[[follow]]
topic = "audit"
start = "1700000000000"
[fetch]
max_wait_ms = 100
min_bytes = 1
max_bytes = 1000000
partition_max_bytes = 100000
fetchers_per_broker = 2
backoff_ms = 50
isolation = "read_committed"
[log]
segment_bytes = 4096
segment_ms = 1000
index_interval_bytes = 0
retention_bytes = 100000
retention_ms = -1
flush_interval_ms = 10
[checkpoint]
interval_ms = 20
[groups]
include = ["^orders-.*", "billing"]
refresh_ms = 1000
"#,
        )
        .unwrap();
        assert_eq!(c.groups.refresh_ms, 1000);
        let groups = c.groups.matcher().unwrap();
        assert!(groups.is_match("orders-eu") && groups.is_match("billing"));
        assert!(
            !groups.is_match("billing-v2") && !groups.is_match("my-orders-eu"),
            "the whole id must match"
        );
        assert_eq!(GroupsSection::default().matcher().map(|m| m.len()), None);
        assert_eq!(c.follow[0].partitions, Some(vec![0, 1]));
        assert_eq!(c.follow[0].start, StartPosition::Latest);
        assert_eq!(
            c.follow[1].start,
            StartPosition::Timestamp(1_700_000_000_000)
        );
        assert_eq!(c.fetch.isolation, Isolation::ReadCommitted);
        assert_eq!(c.fetch.fetchers_per_broker, 2);
        assert_eq!(c.log.retention_bytes, 100_000);
        assert_eq!(c.follow[0].on_topic_recreated, OnTopicRecreated::Archive);
        let stop = parse(&format!(
            "{MINIMAL}[[follow]]\ntopic = \"u\"\non_topic_recreated = \"stop\"\n"
        ))
        .unwrap();
        assert_eq!(
            stop.follow.last().map(|f| f.on_topic_recreated),
            Some(OnTopicRecreated::Stop)
        );
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let cases: &[(&str, &str)] = &[
            (
                "[fetch]\nmax_wait_msx = 3\n",
                "line 7: key `fetch.max_wait_msx`",
            ),
            (
                "[fetch]\nmax_wait_ms = \"soon\"\n",
                "line 7: key `fetch.max_wait_ms`",
            ),
            (
                "[fetch]\nbackoff_ms = 0\n",
                "line 7: key `fetch.backoff_ms`",
            ),
            (
                "[fetch]\nrequest_timeout_ms = 0\n",
                "line 7: key `fetch.request_timeout_ms`",
            ),
            (
                "[fetch]\nisolation = \"dirty\"\n",
                "line 7: key `fetch.isolation`",
            ),
            (
                "[log]\nsegment_bytes = 10\n",
                "line 7: key `log.segment_bytes`",
            ),
            (
                "[log]\nretention_ms = -7\n",
                "line 7: key `log.retention_ms`",
            ),
            (
                "[checkpoint]\ninterval_ms = -1\n",
                "line 7: key `checkpoint.interval_ms`",
            ),
            (
                "[[follow]]\ntopic = \"bad topic\"\n",
                "line 7: key `follow[1].topic`",
            ),
            (
                "[[follow]]\ntopic = \"t\"\nstart = \"yesterday\"\n",
                "line 8: key `follow[1].start`",
            ),
            (
                "[[follow]]\ntopic = \"t\"\npartitions = [0, 0]\n",
                "line 8: key `follow[1].partitions`",
            ),
            (
                "[[follow]]\ntopic = \"t\"\non_topic_recreated = \"delete\"\n",
                "line 8: key `follow[1].on_topic_recreated`",
            ),
            ("surprise = 1\n", "line 6: key `follow[0].surprise`"),
            (
                "[serve]\nlisten = \"127.0.0.1:0\"\nadvertised = \"host\"\n",
                "line 8: key `serve.advertised`",
            ),
            (
                "[serve]\nadvertised = \"replica:9093\"\n",
                "line 7: key `serve.advertised`: needs `serve.listen`",
            ),
            (
                "[serve]\nmax_connections = 0\n",
                "line 7: key `serve.max_connections`",
            ),
            (
                "[serve]\nmax_request_bytes = 0\n",
                "line 7: key `serve.max_request_bytes`",
            ),
            (
                "[serve]\nidle_timeout_ms = 0\n",
                "line 7: key `serve.idle_timeout_ms`",
            ),
            (
                "[serve]\nmax_fetch_sessions = 0\n",
                "line 7: key `serve.max_fetch_sessions`",
            ),
            (
                "[serve]\nfetch_max_bytes = 0\n",
                "line 7: key `serve.fetch_max_bytes`",
            ),
            (
                "[serve]\nsocket_send_buffer_bytes = 0\n",
                "line 7: key `serve.socket_send_buffer_bytes`",
            ),
            (
                "[serve]\nsocket_send_buffer_bytes = -2\n",
                "line 7: key `serve.socket_send_buffer_bytes`",
            ),
            (
                "[groups]\ninclude = [\"orders-(\"]\n",
                "line 7: key `groups.include`: `orders-(` is not a regular expression",
            ),
            (
                "[groups]\nrefresh_ms = 0\n",
                "line 7: key `groups.refresh_ms`",
            ),
            ("[groups]\nexclude = []\n", "line 7: key `groups.exclude`"),
            ("[serve]\nnode_id = -1\n", "line 7: key `serve.node_id`"),
            ("[serve]\nport = 9\n", "line 7: key `serve.port`"),
        ];
        for (extra, key) in cases {
            let e = parse_err(&format!("{MINIMAL}{extra}"));
            assert!(e.contains(key), "{extra:?}: {e}");
            assert!(e.contains("test.toml"), "{e}");
        }
    }

    #[test]
    fn security_keys_belong_together_and_to_their_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "secret\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sasl = format!(
            "[security]\nprotocol = \"SASL_SSL\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nsasl_username = \"u\"\nsasl_password_file = \"{}\"\n",
            pw.display()
        );
        let cfg = parse(&format!("{MINIMAL}{sasl}")).unwrap();
        assert_eq!(cfg.security.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            cfg.security.sasl_mechanism,
            Some(SaslMechanism::ScramSha512)
        );
        assert!(cfg.security.ssl_verify_hostname);
        assert_eq!(cfg.serve.sasl_mechanisms, SaslMechanism::ALL.to_vec());

        let cases: &[(&str, &str)] = &[
            (
                "[security]\nprotocol = \"TLS\"\n",
                "line 7: key `security.protocol`",
            ),
            (
                "[security]\nssl_ca_file = \"/ca.pem\"\n",
                "line 7: key `security.ssl_ca_file`: only used with `security.protocol` SSL or SASL_SSL (it is PLAINTEXT)",
            ),
            (
                "[security]\nprotocol = \"SSL\"\nssl_cert_file = \"/c.pem\"\n",
                "line 8: key `security.ssl_cert_file`: needs `security.ssl_key_file` too",
            ),
            (
                "[security]\nprotocol = \"SASL_PLAINTEXT\"\nsasl_username = \"u\"\n",
                "line 7: key `security.sasl_mechanism`: required with `security.protocol` SASL_PLAINTEXT",
            ),
            (
                "[security]\nsasl_username = \"u\"\n",
                "line 7: key `security.sasl_username`: only used with",
            ),
            (
                "[security]\nprotocol = \"SASL_SSL\"\nsasl_mechanism = \"GSSAPI\"\n",
                "line 8: key `security.sasl_mechanism`",
            ),
            (
                "[serve]\nlisten = \"127.0.0.1:0\"\nprotocol = \"SSL\"\n",
                "key `serve.ssl_cert_file`: required with `serve.protocol` SSL",
            ),
            (
                "[serve]\nprotocol = \"SSL\"\n",
                "line 7: key `serve.protocol`: needs `serve.listen`",
            ),
            (
                "[serve]\nlisten = \"127.0.0.1:0\"\nprotocol = \"SASL_PLAINTEXT\"\n",
                "key `serve.sasl_users_file`: required with `serve.protocol` SASL_PLAINTEXT",
            ),
        ];
        for (extra, want) in cases {
            let e = parse_err(&format!("{MINIMAL}{extra}"));
            assert!(e.contains(want), "{extra:?}: {e}");
        }
    }

    /// The whole error `text` is refused with, as printed.
    fn parse_err(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn missing_and_cross_key_errors() {
        let no_data_dir = "bootstrap_servers = [\"a:1\"]\n[[follow]]\ntopic=\"t\"";
        let no_servers = "data_dir=\"/x\"\nbootstrap_servers = []\n[[follow]]\ntopic=\"t\"";
        let no_port = "data_dir=\"/x\"\nbootstrap_servers = [\"nohost\"]\n[[follow]]\ntopic=\"t\"";
        let cases: &[(String, &str)] = &[
            (no_data_dir.into(), "missing field `data_dir`"),
            (no_servers.into(), "line 2: key `bootstrap_servers`"),
            (no_port.into(), "`nohost` is not host:port"),
            (
                format!("{MINIMAL}[[follow]]\ntopic = \"orders\"\n"),
                "line 7: key `follow[1].topic`: topic `orders` is followed twice",
            ),
            (
                format!("{MINIMAL}[fetch]\nmax_bytes = 10\npartition_max_bytes = 20\n"),
                "line 8: key `fetch.partition_max_bytes`",
            ),
            // A key left at its default has no line: the error is about the key the file
            // sets, and says the other value is the default.
            (
                format!("{MINIMAL}[fetch]\nbackoff_ms = 20000\n"),
                "line 7: key `fetch.backoff_ms` (20000) must not exceed `fetch.backoff_max_ms` (10000, its default)",
            ),
            (
                format!("{MINIMAL}[fetch]\nbackoff_max_ms = 500\n"),
                "line 7: key `fetch.backoff_max_ms` (500) must not be below `fetch.backoff_ms` (1000, its default)",
            ),
            (
                format!("{MINIMAL}[fetch]\nbackoff_max_ms = 500\nbackoff_ms = 600\n"),
                "line 7: key `fetch.backoff_max_ms` (500) must not be below `fetch.backoff_ms` (600)",
            ),
            (
                format!("{MINIMAL}[fetch]\nmax_bytes = 1000\n"),
                "line 7: key `fetch.max_bytes` (1000) must not be below `fetch.partition_max_bytes` (1048576, its default)",
            ),
            // A table lacking a required key is named with its header's line.
            (
                format!("{MINIMAL}[[follow]]\npartitions = [1]\n"),
                "line 6: table `follow[1]`: missing field `topic`",
            ),
            // A syntax error: line, column and the text there.
            (
                format!("{MINIMAL}[fetch]\nmax_bytes = 1\nmax_bytes = 2\n"),
                "test.toml: line 8, column 1: duplicate key `max_bytes`",
            ),
        ];
        for (text, expected) in cases {
            let e = parse_err(text);
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }
}
