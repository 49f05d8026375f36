//! Log lines on stderr: `2026-11-30T07:12:03.123Z INFO [thread] message`. Under systemd,
//! journald stores them; the thread name says which fetcher or task spoke.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

static LEVEL: AtomicU8 = AtomicU8::new(2);

/// 0 error, 1 warn, 2 info, 3 debug. Set from `RF_LOG` (error|warn|info|debug).
pub fn init_from_env() {
    let level = match std::env::var("RF_LOG").as_deref() {
        Ok("error") => 0,
        Ok("warn") => 1,
        Ok("debug") => 3,
        Ok("info") | Err(_) => 2,
        Ok(other) => {
            eprintln!(
                "warning: RF_LOG=`{other}` is not one of error, warn, info, debug; using info"
            );
            2
        }
    };
    LEVEL.store(level, Ordering::Relaxed);
}

pub fn enabled(level: u8) -> bool {
    level <= LEVEL.load(Ordering::Relaxed)
}

/// Formats a UTC timestamp from milliseconds since the epoch (civil-from-days).
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

pub fn write(level: &str, args: std::fmt::Arguments<'_>) {
    let now = crate::log::partition::now_ms();
    let t = std::thread::current();
    let name = t.name().unwrap_or("main");
    // One write per line, so lines from several threads or processes never interleave.
    let line = format!("{} {level} [{name}] {args}\n", format_utc(now));
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[macro_export]
macro_rules! log_error {
    ($($a:tt)*) => { if $crate::logging::enabled(0) { $crate::logging::write("ERROR", format_args!($($a)*)) } };
}
#[macro_export]
macro_rules! log_warn {
    ($($a:tt)*) => { if $crate::logging::enabled(1) { $crate::logging::write("WARN", format_args!($($a)*)) } };
}
#[macro_export]
macro_rules! log_info {
    ($($a:tt)*) => { if $crate::logging::enabled(2) { $crate::logging::write("INFO", format_args!($($a)*)) } };
}
#[macro_export]
macro_rules! log_debug {
    ($($a:tt)*) => { if $crate::logging::enabled(3) { $crate::logging::write("DEBUG", format_args!($($a)*)) } };
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formatting() {
        assert_eq!(super::format_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::format_utc(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            super::format_utc(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
