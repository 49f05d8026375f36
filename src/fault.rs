//! The storage seam: every write step of the log (a segment append, a roll, an index write, a
//! checkpoint write) asks here whether it is to fail, so tests can fail each one once and
//! check that the files are left as they were before that write.
//!
//! Production never arms it. Tests arm it in-process ([`arm`], per thread) or, in a daemon
//! built with the `test-hooks` feature (as tests/run.sh builds it), with `RF_TEST_FAIL_WRITE=<step>:<n>[,<step>:<n>…]` (steps `append`, `roll`, `index`,
//! `checkpoint`, `txnindex`): the n-th write of that step in the process fails once, part-way
//! where the step writes bytes, as a full or failing disk would make it. With
//! `RF_TEST_FAIL_AFTER_MS=<ms>` only writes from that long after start-up count (so the
//! faults land while following, not while the logs are created). Checking costs one relaxed
//! atomic load while nothing is armed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Writing batches to a segment's `.log`.
    Append,
    /// Creating the files of a new segment.
    Roll,
    /// Writing pending entries to an `.index` or `.timeindex`.
    Index,
    /// Writing a checkpoint file (data-dir checkpoints, leader-epoch checkpoint, snapshots).
    Checkpoint,
    /// Appending an aborted transaction to a segment's `.txnindex`.
    TxnIndex,
}

impl Step {
    fn parse(s: &str) -> Option<Step> {
        Some(match s {
            "append" => Step::Append,
            "roll" => Step::Roll,
            "index" => Step::Index,
            "checkpoint" => Step::Checkpoint,
            "txnindex" => Step::TxnIndex,
            _ => return None,
        })
    }
}

/// (step, writes of that step still to let through before failing one, whether it fails as
/// on a full disk).
type Armed = Vec<(Step, u32, bool)>;

static ANY_ARMED: AtomicBool = AtomicBool::new(false);

/// The environment that arms process-wide faults, read only by builds with the `test-hooks`
/// feature (tests/run.sh's): a release build has no way to arm them.
#[cfg(feature = "test-hooks")]
mod environment {
    /// `RF_TEST_FAIL_WRITE`, or empty.
    pub fn fail_write() -> String {
        std::env::var("RF_TEST_FAIL_WRITE").unwrap_or_default()
    }

    /// `RF_TEST_FAIL_AFTER_MS`, or 0.
    pub fn fail_after_ms() -> u64 {
        std::env::var("RF_TEST_FAIL_AFTER_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    }
}

#[cfg(not(feature = "test-hooks"))]
mod environment {
    pub fn fail_write() -> String {
        String::new()
    }

    pub fn fail_after_ms() -> u64 {
        0
    }
}

/// Writes before this instant do not count for the process-wide faults.
fn counting_from() -> std::time::Instant {
    static FROM: OnceLock<std::time::Instant> = OnceLock::new();
    *FROM.get_or_init(|| {
        std::time::Instant::now() + std::time::Duration::from_millis(environment::fail_after_ms())
    })
}

fn process_armed() -> &'static Mutex<Armed> {
    static ARMED: OnceLock<Mutex<Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let armed: Armed = environment::fail_write()
            .split(',')
            .filter_map(|item| {
                let (step, n) = item.split_once(':').unwrap_or((item, "1"));
                Some((
                    Step::parse(step.trim())?,
                    n.trim().parse::<u32>().ok()?.max(1) - 1,
                    false,
                ))
            })
            .collect();
        if !armed.is_empty() {
            ANY_ARMED.store(true, Ordering::Relaxed);
        }
        Mutex::new(armed)
    })
}

thread_local! {
    static THREAD_ARMED: std::cell::RefCell<Armed> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads `RF_TEST_FAIL_WRITE`; called once at start-up so the first write pays nothing.
pub fn init() {
    let _ = counting_from();
    let _ = process_armed();
}

/// Fails the `n`-th (from 1) next write of `step` on this thread, once.
pub fn arm(step: Step, n: u32) {
    arm_as(step, n, false);
}

/// [`arm`], the write failing as on a full disk (ENOSPC), which fails no partition.
#[cfg(test)]
pub fn arm_no_space(step: Step, n: u32) {
    arm_as(step, n, true);
}

fn arm_as(step: Step, n: u32, no_space: bool) {
    ANY_ARMED.store(true, Ordering::Relaxed);
    THREAD_ARMED.with(|a| a.borrow_mut().push((step, n.max(1) - 1, no_space)));
}

/// Counts down the first entry for `step`; when it reaches 0 the entry is spent and whether
/// it fails as on a full disk returned.
fn take(armed: &mut Armed, step: Step) -> Option<bool> {
    let i = armed.iter().position(|(s, _, _)| *s == step)?;
    let (_, left, _) = armed.get_mut(i)?;
    if *left == 0 {
        Some(armed.remove(i).2)
    } else {
        *left -= 1;
        None
    }
}

/// Whether this write of `step` is to fail: `Some(error)` to report after writing at most
/// part of the bytes.
pub fn hit(step: Step) -> Option<std::io::Error> {
    if !ANY_ARMED.load(Ordering::Relaxed) {
        return None;
    }
    let fail = THREAD_ARMED
        .with(|a| take(&mut a.borrow_mut(), step))
        .or_else(|| {
            (std::time::Instant::now() >= counting_from())
                .then(|| {
                    take(
                        &mut process_armed()
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner),
                        step,
                    )
                })
                .flatten()
        });
    fail.map(|no_space| {
        let what = format!("injected {step:?} failure (a test hook)");
        if no_space {
            std::io::Error::new(std::io::ErrorKind::StorageFull, what)
        } else {
            std::io::Error::other(what)
        }
    })
}

/// `file.write_all_at(bytes, at)`, unless this write of `step` is to fail: then only the first
/// half of `bytes` is written and the injected error returned.
pub fn write_all_at(
    step: Step,
    file: &std::fs::File,
    bytes: &[u8],
    at: u64,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    match hit(step) {
        None => file.write_all_at(bytes, at),
        Some(e) => {
            file.write_all_at(bytes.split_at(bytes.len() / 2).0, at)?;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_step_fails_its_nth_write_once_and_only_on_this_thread() {
        arm(Step::Roll, 2);
        assert!(hit(Step::Append).is_none());
        assert!(hit(Step::Roll).is_none(), "the first roll passes");
        std::thread::spawn(|| assert!(hit(Step::Roll).is_none(), "another thread"))
            .join()
            .unwrap();
        assert!(hit(Step::Roll).is_some(), "the second fails");
        assert!(hit(Step::Roll).is_none(), "once");
    }
}
