//! Kafka's `ShutdownableThread`: `run()` calls `do_work()` while running; `initiate_shutdown()`
//! clears the flag and wakes whatever the work waits on; the owner then joins.
//! `do_work()` never loops by itself: one round per call.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The flag and wake-up of one thread's work.
pub trait ShutdownSignal: Send + Sync {
    fn is_running(&self) -> bool;
    /// Clears the running flag and wakes the thread if it waits.
    fn initiate_shutdown(&self);
}

pub struct ShutdownableThread {
    name: String,
    signal: Arc<dyn ShutdownSignal>,
    handle: Option<JoinHandle<()>>,
}

impl ShutdownableThread {
    /// Starts a thread named `name` that calls `do_work` until `signal` says stop. A panic in
    /// one round is logged and the next round starts after a second, so one bad response
    /// cannot silently stop replication.
    pub fn start(
        name: &str,
        signal: Arc<dyn ShutdownSignal>,
        live: &'static crate::live::Live,
        mut do_work: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Self> {
        let sig = signal.clone();
        let thread_name = name.to_string();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                crate::log_debug!("{thread_name} started");
                live.beat(&thread_name);
                while sig.is_running() {
                    let round =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut do_work));
                    if round.is_err() {
                        crate::log_error!(
                            "{thread_name}: a round of work panicked; continuing after 1 s"
                        );
                        std::thread::sleep(Duration::from_secs(1));
                        // A round that panics again and again is not progress.
                        continue;
                    }
                    // Each round ends within about a second unless the thread is stuck: the
                    // watchdog pings only while every thread beats.
                    live.beat(&thread_name);
                }
                live.forget(&thread_name);
                crate::log_debug!("{thread_name} stopped");
            })?;
        Ok(ShutdownableThread {
            name: name.to_string(),
            signal,
            handle: Some(handle),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn initiate_shutdown(&self) {
        self.signal.initiate_shutdown();
    }

    pub fn await_shutdown(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }

    pub fn shutdown(&mut self) {
        self.initiate_shutdown();
        self.await_shutdown();
    }
}

impl Drop for ShutdownableThread {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};

    struct Sig {
        running: AtomicBool,
        lock: Mutex<()>,
        cond: Condvar,
    }
    impl ShutdownSignal for Sig {
        fn is_running(&self) -> bool {
            self.running.load(Ordering::SeqCst)
        }
        fn initiate_shutdown(&self) {
            self.running.store(false, Ordering::SeqCst);
            let _g = self.lock.lock().unwrap();
            self.cond.notify_all();
        }
    }

    #[test]
    fn runs_rounds_until_shutdown_and_wakes_a_waiting_round() {
        let sig = Arc::new(Sig {
            running: AtomicBool::new(true),
            lock: Mutex::new(()),
            cond: Condvar::new(),
        });
        let rounds = Arc::new(AtomicUsize::new(0));
        let (s2, r2) = (sig.clone(), rounds.clone());
        let live = Box::leak(Box::new(crate::live::Live::default()));
        let mut t = ShutdownableThread::start("test-thread", sig.clone(), live, move || {
            r2.fetch_add(1, Ordering::SeqCst);
            let g = s2.lock.lock().unwrap();
            if s2.is_running() {
                // waits "forever": only initiate_shutdown can end this round
                let _g = s2.cond.wait_timeout(g, Duration::from_secs(60)).unwrap();
            }
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let started = std::time::Instant::now();
        t.shutdown();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(rounds.load(Ordering::SeqCst) >= 1);
    }
}
