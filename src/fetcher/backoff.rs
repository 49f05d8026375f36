//! Backing off: how long a fetcher waits after failed fetches in a row, and what it says
//! about them, and marking one partition not ready for a while.

use super::partition_map::PartitionMap;
use crate::checkpoint::TopicPartition;
use crate::client::ConnectionError;
use crate::logging::Human;
use std::time::{Duration, Instant};

/// Requests to the leader in a row that got no usable answer (the leader down or
/// unreachable): each doubles the wait before the next, and only the first, one of another
/// kind and one a minute are warned of.
#[derive(Debug)]
pub struct FailureBackoff {
    backoff: Duration,
    /// The longest wait (Kafka's `reconnect.backoff.max.ms`).
    backoff_max: Duration,
    failures: u32,
    failing_since: Option<Instant>,
    /// When the last failure was warned of, and its outermost message: another kind of
    /// failure is warned of at once.
    last_warned: Option<(Instant, String)>,
}

impl FailureBackoff {
    pub fn new(backoff: Duration, backoff_max: Duration) -> Self {
        FailureBackoff {
            backoff,
            backoff_max,
            failures: 0,
            failing_since: None,
            last_warned: None,
        }
    }

    /// The wait after the `failures`-th failed fetch in a row: the backoff, doubling, at
    /// most `backoff_max` (Kafka's `reconnect.backoff.max.ms`), with ±20 % jitter so that
    /// many fetchers do not retry in step.
    fn wait(&self) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(1 << self.failures.saturating_sub(1).min(16));
        let factor = 0.8 + crate::clock::spread() * 0.4;
        doubled
            .mul_f64(factor)
            .min(self.backoff_max.max(self.backoff))
    }

    /// Counts a request to the leader that got no usable answer and says so calmly: warned
    /// (an ERROR for a TLS refusal) when failures start, when their kind changes and once a
    /// minute; debug in between; nothing once the fetcher is no longer `running`.
    /// Returns how long to wait before the next try (doubling, see [`Self::wait`]).
    pub fn failed(&mut self, what: &str, e: &ConnectionError, running: bool) -> Duration {
        self.failures += 1;
        let wait = self.wait();
        if !running {
            return wait;
        }
        let now = Instant::now();
        let since = *self.failing_since.get_or_insert(now);
        let kind = e.to_string();
        let loud = self
            .last_warned
            .as_ref()
            .is_none_or(|(t, k)| now - *t >= Duration::from_secs(60) || *k != kind);
        if self.failures == 1 || loud {
            let line = format!(
                "{what} failed{}: {e:#}; retrying in {}, then less often",
                if self.failures > 1 {
                    format!(" ({} times in {})", self.failures, Human(now - since))
                } else {
                    String::new()
                },
                Human(wait)
            );
            // A refused certificate needs an operator; an unreachable broker may come back.
            if e.kind().is_refusal() {
                crate::log_error!("{line}");
            } else {
                crate::log_warn!("{line}");
            }
            self.last_warned = Some((now, kind));
        } else {
            crate::log_debug!("{what} failed again: {e:#}; retrying in {}", Human(wait));
        }
        wait
    }

    /// A usable response arrived from `leader` (described only if there were failures): the
    /// leader is reachable again.
    pub fn succeeded(&mut self, leader: impl FnOnce() -> String) {
        if self.failures > 0 {
            let since = self.failing_since.map_or(0, |t| t.elapsed().as_secs());
            crate::log_info!(
                "fetching from {} works again (after {} failed attempt(s) over {since}s)",
                leader(),
                self.failures
            );
        }
        self.failures = 0;
        self.failing_since = None;
        self.last_warned = None;
    }
}

/// Marks a partition not ready before now + `backoff`.
pub fn delay(map: &mut PartitionMap, tp: &TopicPartition, backoff: Duration) {
    if let Some(s) = map.get_mut(tp) {
        s.delayed_until = Some(Instant::now() + backoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_in_a_row_doubles_the_wait_up_to_the_maximum_and_success_starts_over() {
        let ms = Duration::from_millis;
        let mut b = FailureBackoff::new(ms(100), ms(1000));
        let e = ConnectionError::failed(anyhow::anyhow!("connection refused"));
        let first = b.failed("fetch", &e, false);
        assert!(first >= ms(80) && first <= ms(120), "{first:?}");
        let second = b.failed("fetch", &e, false);
        assert!(second >= ms(160) && second <= ms(240), "{second:?}");
        let last = (0..20).map(|_| b.failed("fetch", &e, false)).last();
        assert!(last.is_some_and(|w| w <= ms(1000)), "{last:?}");
        b.succeeded(|| "leader".into());
        let again = b.failed("fetch", &e, false);
        assert!(again >= ms(80) && again <= ms(120), "{again:?}");
    }
}
