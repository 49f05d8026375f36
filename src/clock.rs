//! Wall-clock time as Kafka's records and files carry it: milliseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    ms_since_epoch(SystemTime::now())
}

/// `t` in milliseconds since the Unix epoch (0 before 1970), as a file's mtime is compared
/// with record timestamps.
pub fn ms_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A fraction in [0, 1) from the clock's nanoseconds: a cheap spread, not a random
/// generator, so that many connections retrying or re-authenticating do not act in step.
pub fn spread() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1_000_000) / 1_000_000.0
}
