//! The TOML configuration, parsed and validated.
//!
//! Unknown keys, wrong types and bad values are refused while parsing, so the error carries
//! the TOML line and the key (`TOML parse error at line 7, column 13 … fetch.max_wait_ms …`);
//! checks that span several keys run afterwards and name the keys concerned.

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

fn positive_i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = i64::deserialize(d)?;
    if v <= 0 {
        return Err(de::Error::custom(format!("must be > 0, got {v}")));
    }
    Ok(v)
}

fn positive_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = i64::deserialize(d)?;
    if v <= 0 || v > i64::from(i32::MAX) {
        return Err(de::Error::custom(format!(
            "must be between 1 and {}, got {v}",
            i32::MAX
        )));
    }
    Ok(v as i32)
}

fn non_negative_i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    let v = i64::deserialize(d)?;
    if v < 0 || v > i64::from(i32::MAX) {
        return Err(de::Error::custom(format!(
            "must be between 0 and {}, got {v}",
            i32::MAX
        )));
    }
    Ok(v as i32)
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
    if !(1..=64).contains(&v) {
        return Err(de::Error::custom(format!(
            "must be between 1 and 64, got {v}"
        )));
    }
    Ok(v as usize)
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

fn topic_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let t = String::deserialize(d)?;
    let legal = !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if !legal {
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
        if p < 0 || p > i64::from(i32::MAX) {
            return Err(de::Error::custom(format!("partition {p} is out of range")));
        }
        if out.contains(&(p as i32)) {
            return Err(de::Error::custom(format!("partition {p} is listed twice")));
        }
        out.push(p as i32);
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

    /// Parses and validates `text`; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Config> {
        let cfg: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}: {}", origin.display(), e.to_string().trim_end()))?;
        cfg.validate()
            .with_context(|| format!("{}", origin.display()))?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read config `{}`", path.display()))?;
        Config::parse(&text, path)
    }

    fn validate(&self) -> Result<()> {
        if self.data_dir.as_os_str().is_empty() {
            bail!("key `data_dir`: must not be empty");
        }
        if self.client_id.is_empty() || self.client_id.len() > 255 {
            bail!("key `client_id`: must be 1–255 characters");
        }
        if self.follow.is_empty() {
            bail!("key `follow`: at least one [[follow]] table is required");
        }
        for (i, f) in self.follow.iter().enumerate() {
            if self.follow.iter().take(i).any(|g| g.topic == f.topic) {
                bail!(
                    "key `follow[{i}].topic`: topic `{}` is followed twice",
                    f.topic
                );
            }
        }
        if let Some(l) = &self.metrics.listen
            && std::net::ToSocketAddrs::to_socket_addrs(l.as_str()).is_err()
        {
            bail!("key `metrics.listen`: `{l}` is not a host:port to listen on");
        }
        if self.fetch.backoff_max_ms < self.fetch.backoff_ms {
            bail!(
                "key `fetch.backoff_max_ms` ({}) must not be below `fetch.backoff_ms` ({})",
                self.fetch.backoff_max_ms,
                self.fetch.backoff_ms
            );
        }
        if self.fetch.partition_max_bytes > self.fetch.max_bytes {
            bail!(
                "key `fetch.partition_max_bytes` ({}) must not exceed `fetch.max_bytes` ({})",
                self.fetch.partition_max_bytes,
                self.fetch.max_bytes
            );
        }
        Ok(())
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
"#,
        )
        .unwrap();
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
            ("[fetch]\nmax_wait_msx = 3\n", "max_wait_msx"),
            ("[fetch]\nmax_wait_ms = \"soon\"\n", "max_wait_ms"),
            ("[fetch]\nbackoff_ms = 0\n", "backoff_ms"),
            ("[fetch]\nrequest_timeout_ms = 0\n", "request_timeout_ms"),
            ("[fetch]\nisolation = \"dirty\"\n", "isolation"),
            ("[log]\nsegment_bytes = 10\n", "segment_bytes"),
            ("[log]\nretention_ms = -7\n", "retention_ms"),
            ("[checkpoint]\ninterval_ms = -1\n", "interval_ms"),
            ("[[follow]]\ntopic = \"bad topic\"\n", "topic"),
            (
                "[[follow]]\ntopic = \"t\"\nstart = \"yesterday\"\n",
                "start",
            ),
            (
                "[[follow]]\ntopic = \"t\"\npartitions = [0, 0]\n",
                "partitions",
            ),
            (
                "[[follow]]\ntopic = \"t\"\non_topic_recreated = \"delete\"\n",
                "on_topic_recreated",
            ),
            ("surprise = 1\n", "surprise"),
        ];
        for (extra, key) in cases {
            let text = format!("{MINIMAL}{extra}");
            let e = format!("{:#}", parse(&text).unwrap_err());
            assert!(e.contains(key), "{extra:?}: {e}");
            assert!(e.contains("test.toml"), "{e}");
            assert!(e.contains("line"), "{extra:?} should name a line: {e}");
        }
    }

    #[test]
    fn missing_and_cross_key_errors() {
        let e = format!(
            "{:#}",
            parse("bootstrap_servers = [\"a:1\"]\n[[follow]]\ntopic=\"t\"").unwrap_err()
        );
        assert!(e.contains("data_dir"), "{e}");
        let e = format!(
            "{:#}",
            parse("data_dir=\"/x\"\nbootstrap_servers = []\n[[follow]]\ntopic=\"t\"").unwrap_err()
        );
        assert!(e.contains("bootstrap_servers"), "{e}");
        let e = format!(
            "{:#}",
            parse("data_dir=\"/x\"\nbootstrap_servers = [\"nohost\"]\n[[follow]]\ntopic=\"t\"")
                .unwrap_err()
        );
        assert!(e.contains("host:port"), "{e}");
        let e = format!(
            "{:#}",
            parse(&format!("{MINIMAL}[[follow]]\ntopic = \"orders\"\n")).unwrap_err()
        );
        assert!(e.contains("followed twice"), "{e}");
        let e = format!(
            "{:#}",
            parse(&format!(
                "{MINIMAL}[fetch]\nmax_bytes = 10\npartition_max_bytes = 20\n"
            ))
            .unwrap_err()
        );
        assert!(e.contains("partition_max_bytes"), "{e}");
    }
}
