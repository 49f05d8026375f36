//! File descriptors: the process's soft limit, how many are open, and whether an error is
//! the limit being reached (EMFILE, or ENFILE for the whole system). Segment files are held
//! open within `log.max_open_files` ([`super::open_files`]); when that budget fits under the
//! limit, a new partition costs no lasting descriptor. When it does not (a budget set above
//! the limit), each partition keeps its active segment open, so the number of partitions a
//! daemon can create is bounded by the limit: new logs are created only while [`RESERVE`]
//! descriptors stay free for checkpoints, flushes and connections.

/// Descriptors kept free for checkpoint files, index flushes and broker connections.
pub const RESERVE: u64 = 64;

/// The soft `RLIMIT_NOFILE`, asked of the kernel (no descriptor needed, so it is known even
/// when none is left); `None` when unlimited.
pub fn soft_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// The soft limit as it was when the process started ([`remember_limit_at_start`]), or now.
pub fn limit_at_start() -> Option<u64> {
    *LIMIT_AT_START.get_or_init(soft_limit)
}

static LIMIT_AT_START: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();

/// Reads the open-file limit once, at start, for the budgets made from it and the messages
/// that name it.
pub fn remember_limit_at_start() -> Option<u64> {
    limit_at_start()
}

/// Descriptors open in this process now.
pub fn open_count() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64)
}

/// How many more partition logs may be created now (`u64::MAX` when nothing is known, or
/// when open segment files are bounded below the limit and descriptors are free now).
pub fn log_budget() -> u64 {
    match (soft_limit(), open_count()) {
        (Some(limit), Some(open)) => {
            let free = limit.saturating_sub(open).saturating_sub(RESERVE);
            let files = super::open_files::shared().budget() as u64;
            if files.saturating_add(RESERVE) <= limit && free > 0 {
                u64::MAX
            } else {
                free
            }
        }
        _ => u64::MAX,
    }
}

/// Says that the limit was reached: with `what` met it and how to raise it at most once a
/// minute (ERROR), and otherwise in a WARN line at most once a second, which counts the
/// failures since the last line: none is quiet, none floods the journal.
pub fn report(what: &str) {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    // (last ERROR, last WARN, failures not said since).
    static LAST: Mutex<(Option<Instant>, Option<Instant>, u64)> = Mutex::new((None, None, 0));
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    if last
        .0
        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
    {
        last.0 = Some(now);
        last.1 = Some(now);
        let unsaid = std::mem::take(&mut last.2);
        crate::log_error!("{what}; {}{}", advice(), unsaid_text(unsaid));
    } else if last
        .1
        .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
    {
        last.1 = Some(now);
        let unsaid = std::mem::take(&mut last.2);
        crate::log_warn!("{what} (out of descriptors){}", unsaid_text(unsaid));
    } else {
        last.2 += 1;
    }
}

fn unsaid_text(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more such failure(s) since the last line)")
    }
}

/// What an operator reads when the limit is reached.
pub fn advice() -> String {
    let limit = soft_limit()
        .or_else(limit_at_start)
        .map_or_else(|| "unlimited".to_string(), |l| l.to_string());
    format!(
        "the open-file limit ({limit}, with {RESERVE} kept free) is reached: segment files are held open up to log.max_open_files ({}); raise the limit (LimitNOFILE= in the systemd unit, `ulimit -n`, or `prlimit --pid`) or lower log.max_open_files; what waited (a partition to create, a fetch to serve) is retried by itself",
        budget_text()
    )
}

/// `log.max_open_files` as in effect, for messages.
fn budget_text() -> String {
    match super::open_files::shared().budget() {
        usize::MAX => "unbounded".to_string(),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_and_the_open_count_are_read() {
        let limit = soft_limit().expect("Linux reports a limit");
        let open = open_count().unwrap();
        assert!(open > 0 && open < limit, "{open} of {limit}");
    }
}
