//! Wall-clock time as Kafka's records and files carry it: milliseconds since the Unix epoch.

/// Now, in milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
