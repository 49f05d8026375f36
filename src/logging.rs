//! Log lines on stderr: `2026-11-30T07:12:03.123Z INFO [thread] message`; the thread name
//! says which fetcher or task spoke. When stderr is the journal (`JOURNAL_STREAM` names it),
//! each line starts with the sd-daemon priority instead of a timestamp (`<4>WARN [thread]
//! message`): journald keeps the time and the priority itself.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

static LEVEL: AtomicU8 = AtomicU8::new(2);
static JOURNAL: AtomicBool = AtomicBool::new(false);

/// 0 error, 1 warn, 2 info, 3 debug. Set from `RF_LOG` (error|warn|info|debug).
pub fn init_from_env() {
    let level = match std::env::var("RF_LOG")
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Ok("error") => 0,
        Ok("warn" | "warning") => 1,
        Ok("debug") => 3,
        Ok("info") | Ok("") | Err(_) => 2,
        Ok(other) => {
            eprintln!(
                "warning: RF_LOG=`{other}` is not one of error, warn, info, debug; using info"
            );
            2
        }
    };
    LEVEL.store(level, Ordering::Relaxed);
    JOURNAL.store(stderr_is_journal(), Ordering::Relaxed);
}

/// For a command whose own output says what it did: without `RF_LOG`, only warnings and
/// errors are logged (not the storage engine's INFO lines as it loads what the command
/// wrote).
pub fn quiet_unless_asked() {
    if std::env::var_os("RF_LOG").is_none() {
        LEVEL.store(1, Ordering::Relaxed);
    }
}

/// Whether stderr is the journal stream systemd connected: `JOURNAL_STREAM` is
/// `<device>:<inode>` of it (checked, so a child that inherited the variable but not the
/// stream keeps timestamps).
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(v) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The sd-daemon priority of a level name (`<3>` error … `<7>` debug).
fn priority(level: &str) -> &'static str {
    match level {
        "ERROR" => "<3>",
        "WARN" => "<4>",
        "INFO" => "<6>",
        _ => "<7>",
    }
}

/// A duration as people write it: `250ms`, `1.2s`, `60s`, `2m30s`, `1h5m`.
pub struct Human(pub std::time::Duration);

impl std::fmt::Display for Human {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        if ms < 1000 {
            return write!(f, "{ms}ms");
        }
        let secs = self.0.as_secs();
        if secs < 10 {
            let tenths = ms / 100;
            return match tenths % 10 {
                0 => write!(f, "{}s", tenths / 10),
                t => write!(f, "{}.{t}s", tenths / 10),
            };
        }
        match (secs / 3600, (secs / 60) % 60, secs % 60) {
            (0, 0, s) => write!(f, "{s}s"),
            (0, m, 0) => write!(f, "{m}m"),
            (0, m, s) => write!(f, "{m}m{s}s"),
            (h, 0, _) => write!(f, "{h}h"),
            (h, m, _) => write!(f, "{h}h{m}m"),
        }
    }
}

/// An I/O error's message without Rust's ` (os error N)` suffix: `Connection refused`.
pub fn plain_io_error(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text,
    }
}

/// An error chain as `{:#}` prints it, each I/O error in it without its ` (os error N)`
/// suffix: "failed to read config `f.toml`: No such file or directory".
pub fn plain_chain(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e
        .chain()
        .map(|c| match c.downcast_ref::<std::io::Error>() {
            Some(io) => plain_io_error(io),
            None => c.to_string(),
        })
        .collect();
    parts.join(": ")
}

/// A count and the noun that fits it, for messages: `1 segment`, `3 segments`.
pub fn count<N>(n: N, one: &str, many: &str) -> String
where
    N: std::fmt::Display + PartialEq + From<u8>,
{
    let noun = if n == N::from(1) { one } else { many };
    format!("{n} {noun}")
}

/// How many partitions a grouped line names before it says how many more there are.
pub const NAMED_IN_A_LINE: usize = 5;

/// The first [`NAMED_IN_A_LINE`] of `items` and a count of the rest, for a line that speaks
/// of many partitions at once: `a, b, c, d, e and 995 more`; `a and b` when there are two.
pub fn first_few<T: std::fmt::Display>(items: &[T]) -> String {
    let shown: Vec<String> = items
        .iter()
        .take(NAMED_IN_A_LINE)
        .map(ToString::to_string)
        .collect();
    let rest = items.len().saturating_sub(shown.len());
    match (shown.split_last(), rest) {
        (None, _) => String::new(),
        (Some((last, [])), 0) => last.clone(),
        (Some((last, before)), 0) => format!("{} and {last}", before.join(", ")),
        (Some(_), rest) => format!("{} and {rest} more", shown.join(", ")),
    }
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
    let now = crate::clock::now_ms();
    let t = std::thread::current();
    let name = t.name().unwrap_or("main");
    // One write per line, so lines from several threads or processes never interleave.
    let line = if JOURNAL.load(Ordering::Relaxed) {
        format!("{}{level} [{name}] {args}\n", priority(level))
    } else {
        format!("{} {level} [{name}] {args}\n", format_utc(now))
    };
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
    use std::time::Duration;

    #[test]
    fn io_errors_read_without_their_os_error_number() {
        let e = std::io::Error::from_raw_os_error(111);
        assert!(e.to_string().ends_with("(os error 111)"), "{e}");
        assert_eq!(super::plain_io_error(&e), "Connection refused");
        let custom = std::io::Error::other("broker went away");
        assert_eq!(super::plain_io_error(&custom), "broker went away");
    }

    #[test]
    fn error_chains_read_without_os_error_numbers() {
        let e = anyhow::Error::new(std::io::Error::from_raw_os_error(2))
            .context("failed to read config `f.toml`");
        assert!(format!("{e:#}").ends_with("(os error 2)"), "{e:#}");
        assert_eq!(
            super::plain_chain(&e),
            "failed to read config `f.toml`: No such file or directory"
        );
    }

    #[test]
    fn grouped_lines_name_a_few_and_count_the_rest() {
        let names = |n: usize| (0..n).map(|i| format!("t-{i}")).collect::<Vec<_>>();
        assert_eq!(super::first_few(&names(0)), "");
        assert_eq!(super::first_few(&names(1)), "t-0");
        assert_eq!(super::first_few(&names(2)), "t-0 and t-1");
        assert_eq!(super::first_few(&names(5)), "t-0, t-1, t-2, t-3 and t-4");
        assert_eq!(
            super::first_few(&names(1000)),
            "t-0, t-1, t-2, t-3, t-4 and 995 more"
        );
    }

    #[test]
    fn counts_take_the_noun_that_fits() {
        assert_eq!(super::count(1usize, "segment", "segments"), "1 segment");
        assert_eq!(super::count(0usize, "segment", "segments"), "0 segments");
        assert_eq!(super::count(3u64, "entry", "entries"), "3 entries");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        let h = |ms: u64| super::Human(Duration::from_millis(ms)).to_string();
        assert_eq!(h(250), "250ms");
        assert_eq!(h(1000), "1s");
        assert_eq!(h(1234), "1.2s");
        assert_eq!(h(60_025), "1m");
        assert_eq!(h(59_999), "59s");
        assert_eq!(h(150_000), "2m30s");
        assert_eq!(h(3_900_000), "1h5m");
    }
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
