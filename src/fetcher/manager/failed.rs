//! Partitions failed by a local storage error: recorded in the data dir, checked again
//! later with a growing wait, and resumed once their storage is sound.

use super::seams::{EndpointFactory, MetadataSource};
use super::{FetcherManager, write_partition_list};
use crate::checkpoint::TopicPartition;
use crate::log::data_dir::DataDir;
use crate::logging::Human;
use std::time::{Duration, Instant};

/// Failures of one partition, each within [`FAILURE_MEMORY`] of the one before.
#[derive(Debug)]
pub(super) struct FailureHistory {
    count: u32,
    first: Instant,
    last: Instant,
    /// When its failure was last logged above debug, and that failure's kind (the reason
    /// without its figures): another kind is said at once.
    said: Option<Instant>,
    kind: String,
}

/// How long a partition's failures are remembered after its last one.
pub(super) const FAILURE_MEMORY: Duration = Duration::from_secs(600);

/// A partition failed by a local storage error, until its storage is sound again.
#[derive(Debug)]
pub(super) struct FailedPartition {
    pub(super) reason: String,
    /// Checks of its storage that found it still unsound.
    pub(super) attempts: u32,
    pub(super) retry_at: Instant,
    /// Its failure was logged above debug, so its resumption is too.
    pub(super) said: bool,
}

/// The longest wait between two checks of a failed partition's storage.
pub(super) const FAILED_RETRY_MAX: Duration = Duration::from_secs(60);

/// How long after its `attempts`-th unsuccessful check a failed partition is checked again:
/// the fetch backoff (at least a second), doubling, at most a minute.
pub(super) fn failed_retry_delay(backoff_ms: i64, attempts: u32) -> Duration {
    let base = Duration::from_millis(backoff_ms.max(0) as u64).max(Duration::from_secs(1));
    base.saturating_mul(1 << attempts.min(16))
        .min(FAILED_RETRY_MAX)
}

impl<S: MetadataSource, E: EndpointFactory> FetcherManager<S, E> {
    /// Keeps `failed-partitions` equal to the failed partitions, for `status`.
    pub(super) fn record_failed(&mut self) {
        let path = self.logs.data_dir().join(DataDir::FAILED_PARTITIONS_FILE);
        let reasons = self.failed.iter().map(|(tp, f)| (tp, f.reason.as_str()));
        write_partition_list(&path, reasons, &mut self.failed_written);
    }

    /// A partition newly failed: said once (an ERROR the first time, then a WARN at most once
    /// a minute while it keeps failing soon after each resume — a cause the storage check
    /// cannot see), and checked again later the more often it failed lately. Returns when.
    pub(super) fn on_failure(&mut self, tp: &TopicPartition, reason: &str) -> Instant {
        let now = Instant::now();
        let backoff_ms = self.cfg.fetch.backoff_ms;
        let h = self
            .failure_history
            .entry(tp.clone())
            .or_insert(FailureHistory {
                count: 0,
                first: now,
                last: now,
                said: None,
                kind: String::new(),
            });
        if now - h.last > FAILURE_MEMORY {
            *h = FailureHistory {
                count: 0,
                first: now,
                last: now,
                said: None,
                kind: String::new(),
            };
        }
        h.count += 1;
        h.last = now;
        let (count, first) = (h.count, h.first);
        let delay = failed_retry_delay(backoff_ms, count - 1);
        let kind: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
        let new_kind = h.kind != kind;
        h.kind = kind;
        let mut said = true;
        if count == 1 || new_kind {
            crate::log_error!("{}", crate::log::manager::failed_message(tp, reason));
            h.said = Some(now);
        } else if h.said.is_none_or(|t| now - t >= Duration::from_secs(60)) {
            crate::log_warn!(
                "{tp}: failed again ({count} times in {}): {reason}; checked again in {}",
                Human(now - first),
                Human(delay)
            );
            h.said = Some(now);
        } else {
            crate::log_debug!("{tp}: failed again: {reason}");
            said = false;
        }
        self.live
            .set_state(tp, crate::live::State::Failed, Some(reason));
        let retry_at = now + delay;
        self.failed.insert(
            tp.clone(),
            FailedPartition {
                reason: reason.to_string(),
                attempts: count - 1,
                retry_at,
                said,
            },
        );
        self.record_failed();
        retry_at
    }

    /// How long after its `attempts`-th unsuccessful check a failed partition is checked
    /// again: the fetch backoff (at least a second), doubling, at most a minute.
    pub(super) fn failed_retry_delay(&self, attempts: u32) -> Duration {
        failed_retry_delay(self.cfg.fetch.backoff_ms, attempts)
    }

    /// Checks the storage of each failed partition that is due: sound again, it is followed
    /// again (from its local log end); otherwise it is checked again later, less often.
    pub(super) fn retry_failed(&mut self) {
        let now = Instant::now();
        let due: Vec<TopicPartition> = self
            .failed
            .iter()
            .filter(|(_, f)| f.retry_at <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        for tp in due {
            // No log at all (it was archived meanwhile): followed anew like any partition.
            let checked = match self.logs.get(&tp) {
                None => Ok(()),
                Some(_) => self.logs.check_storage(&tp),
            };
            match checked {
                Ok(()) => {
                    self.live.set_state(&tp, crate::live::State::Starting, None);
                    if self.failed.remove(&tp).is_some_and(|f| f.said) {
                        crate::log_info!(
                            "{tp}: its local storage is sound again; fetching it again"
                        );
                    } else {
                        crate::log_debug!("{tp}: its local storage is sound again");
                    }
                }
                Err(e) => {
                    let Some(attempts) = self.failed.get(&tp).map(|f| f.attempts) else {
                        continue;
                    };
                    let delay = self.failed_retry_delay(attempts + 1);
                    let reason = format!("{e:#}");
                    if let Some(f) = self.failed.get_mut(&tp) {
                        if f.reason != reason {
                            crate::log_warn!(
                                "{tp}: still failed: {reason}; checked again in {}s",
                                delay.as_secs()
                            );
                            f.reason = reason;
                        } else {
                            crate::log_debug!("{tp}: still failed: {reason}");
                        }
                        f.attempts += 1;
                        f.retry_at = now + delay;
                    }
                }
            }
        }
        self.record_failed();
    }
}
