//! `replica-follower run`: start-up, the periodic flush/checkpoint task, signals, shutdown.
//!
//! Start-up: load the config; take the exclusive lock on `<data_dir>/.lock` (a second daemon
//! on the same directory is refused); load and recover every local log; fill the holes the
//! leader can fill ([`crate::repair::fill_holes_at_start`]); start the checkpoint task and the
//! fetcher manager; tell systemd READY=1.
//! Shutdown (SIGTERM/SIGINT): stop the manager and its fetchers (their sockets are shut down,
//! so a fetch in flight ends at once), stop the checkpoint task, flush every log, write the
//! checkpoints and the clean-shutdown marker, exit 0.

use crate::client::cluster;
use crate::config::Config;
use crate::fetcher::manager::{FetcherManager, ManagerEvent};
use crate::fetcher::shutdownable::{ShutdownSignal, ShutdownableThread};
use crate::live::Live;
use crate::log::data_dir::DataDir;
use crate::log::identity;
use crate::log::manager::LogManager;
use crate::resolve::Resolved;
use crate::security::ClientSecurity;
use crate::security::SecurityProtocol;
use anyhow::{Context, Result, bail};
use fs2::FileExt;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Takes the data-dir lock; held until the returned file is dropped (process exit included).
///
/// The lock is an `flock` on `<data_dir>/.lock`; its holder writes its pid into it (decimal,
/// a newline), rewritten in place — never replaced by a rename, the lock being on the inode —
/// so that a refused process names the holder.
pub fn lock_data_dir(data_dir: &Path) -> Result<File> {
    crate::log::manager::create_data_dir(data_dir)?;
    let path = data_dir.join(DataDir::LOCK_FILE);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| {
            format!(
                "cannot create lock file `{}` in data dir `{}`",
                path.display(),
                data_dir.display()
            )
        })?;
    if f.try_lock_exclusive().is_err() {
        bail!(
            "data dir `{}` is locked by another replica-follower ({}, lock file `{}`)",
            data_dir.display(),
            lock_holder(&mut f),
            path.display()
        );
    }
    // The lock is what keeps a second process out; a pid that cannot be recorded (a full
    // disk) only makes a refusal less helpful.
    if let Err(e) = record_pid(&mut f) {
        crate::log_warn!(
            "cannot write this process's pid into lock file `{}`: {e}",
            path.display()
        );
    }
    Ok(f)
}

/// Replaces the content of the held lock file `f` with this process's pid, durably.
fn record_pid(f: &mut File) -> std::io::Result<()> {
    use std::io::{Seek, Write};
    f.set_len(0)?;
    f.seek(std::io::SeekFrom::Start(0))?;
    f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    f.sync_all()
}

/// Who holds the lock file `f`, as the refusal says it: `pid N`, or why that is unknown.
fn lock_holder(f: &mut File) -> String {
    use std::io::{Read, Seek};
    let mut text = String::new();
    let read = f
        .seek(std::io::SeekFrom::Start(0))
        .and_then(|_| f.take(32).read_to_string(&mut text));
    match (read, text.trim().parse::<u32>()) {
        (Err(e), _) => format!("its pid cannot be read: {e}"),
        (Ok(_), Err(_)) if text.trim().is_empty() => "its pid is not recorded".to_string(),
        (Ok(_), Err(_)) => format!("its pid is not recorded: the file holds {:?}", text.trim()),
        // A holder that records no pid (an older version) leaves its predecessor's.
        (Ok(_), Ok(pid)) if !Path::new(&format!("/proc/{pid}")).exists() => {
            format!("its pid is not recorded: the file names pid {pid}, which is not running")
        }
        (Ok(_), Ok(pid)) => format!("pid {pid}"),
    }
}

/// The flag and wake-up of the checkpoint task.
struct TaskSignal {
    running: AtomicBool,
    lock: Mutex<()>,
    cond: Condvar,
}

impl ShutdownSignal for TaskSignal {
    fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }
    fn initiate_shutdown(&self) {
        self.running.store(false, Ordering::SeqCst);
        let _g = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.cond.notify_all();
    }
}

/// The watchdog systemd asked for (`WATCHDOG_USEC`, for this process when `WATCHDOG_PID`
/// names one): the interval within which it expects a ping.
fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim() != std::process::id().to_string()
    {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

const MONITOR_THREAD: &str = "monitor";

/// The `[metrics]` endpoint's thread and its flag, when `metrics.listen` is set. A listen
/// address that cannot be bound stops the start (exit 1, naming it).
type MetricsThread = (
    Arc<AtomicBool>,
    std::net::SocketAddr,
    std::thread::JoinHandle<()>,
);

fn start_metrics(
    cfg: &Config,
    logs: Arc<LogManager>,
    live: &'static Live,
) -> Result<Option<MetricsThread>> {
    let Some(addr) = cfg.metrics.listen.clone() else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::bind(&addr)
        .with_context(|| format!("cannot listen on metrics.listen = \"{addr}\""))?;
    crate::log_info!("serving Prometheus metrics at http://{addr}/metrics");
    let local = listener
        .local_addr()
        .with_context(|| format!("metrics.listen = \"{addr}\": no local address"))?;
    let running = Arc::new(AtomicBool::new(true));
    let r2 = running.clone();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            crate::metrics::serve(
                listener,
                live,
                || r2.load(Ordering::SeqCst),
                || logs.disk().free_bytes(),
            )
        })
        .context("failed to start the metrics thread")?;
    Ok(Some((running, local, thread)))
}

/// The catch-up progress lines: every 10 s while partitions are catching up — still below
/// where the leader was at the previous report, so a busy topic's passing lag of a few
/// records says nothing — one line each (one in all when more than a few) with offset,
/// leader end, lag, rate and an estimate; and one "caught up" line when such a partition gets
/// there. A round in which the live state did not change since the last look costs nothing
/// per partition, and neither does a report with nothing changed since the previous one,
/// which had nothing lagging; partitions lagging and stuck are still reported every 10 s.
#[derive(Default)]
struct Progress {
    next: Option<Instant>,
    /// The live state's generation at the last look, and at the last report.
    seen: Option<u64>,
    seen_at_report: Option<u64>,
    /// Partitions with a lag at the last report: (appended bytes, log end, leader HW) then.
    lagging: std::collections::BTreeMap<crate::checkpoint::TopicPartition, (u64, i64, i64)>,
    /// Those reported as catching up, until they catch up.
    reported: std::collections::BTreeSet<crate::checkpoint::TopicPartition>,
}

/// A partition being fetched with a lag: its name, lag, log end, leader HW, appended bytes.
type Lagging = (crate::checkpoint::TopicPartition, i64, i64, i64, u64);

impl Progress {
    const ONE_BY_ONE: usize = 5;

    /// How often progress is said.
    fn every() -> Duration {
        Duration::from_secs(10)
    }

    /// Logs the lines due at `now`, and returns them.
    fn tick(&mut self, live: &crate::live::Live, now: Instant) -> Vec<String> {
        let generation = live.generation();
        let due = self.next.is_none_or(|t| now >= t);
        // Unchanged since a report that found nothing lagging, nothing lags now.
        let report = due && !(self.seen_at_report == Some(generation) && self.lagging.is_empty());
        if due {
            self.next = Some(now + Self::every());
        }
        // Unchanged since the last look, nothing caught up meanwhile.
        if !report && self.seen == Some(generation) {
            return Vec::new();
        }
        self.seen = Some(generation);
        let reported = &mut self.reported;
        let (caught_up, lagging) = live.with_partitions(|parts| {
            let mut caught_up = Vec::new();
            reported.retain(|tp| match parts.get(tp) {
                Some(p) if p.lag() == Some(0) => {
                    caught_up.push((tp.clone(), p.log_end_offset.unwrap_or(0)));
                    false
                }
                _ => true,
            });
            // Only partitions being fetched: one backing off (a leader down) is said by the
            // fetcher's own calm warnings, not every 10 s here.
            let lagging: Vec<Lagging> = if report {
                parts
                    .iter()
                    .filter(|(_, p)| {
                        p.state == crate::live::State::Fetching && p.lag().is_some_and(|l| l > 0)
                    })
                    .map(|(tp, p)| {
                        (
                            tp.clone(),
                            p.lag().unwrap_or(0),
                            p.log_end_offset.unwrap_or(0),
                            p.leader_high_watermark.unwrap_or(0),
                            p.bytes_appended,
                        )
                    })
                    .collect()
            } else {
                Vec::new()
            };
            (caught_up, lagging)
        });
        let mut said = Vec::new();
        if caught_up.len() > Self::ONE_BY_ONE {
            said.push(format!("{} partitions caught up", caught_up.len()));
        } else {
            for (tp, at) in &caught_up {
                said.push(format!("{tp}: caught up at offset {at}"));
            }
        }
        if report {
            self.seen_at_report = Some(generation);
            said.extend(self.report(lagging));
        }
        for l in &said {
            crate::log_info!("{l}");
        }
        said
    }

    /// The catching-up lines of a report, from the partitions lagging now.
    fn report(&mut self, lagging: Vec<Lagging>) -> Vec<String> {
        let secs = Self::every().as_secs_f64();
        let mut total_lag = 0;
        let mut total_rate = 0.0;
        let mut lines = Vec::new();
        let mut next = std::collections::BTreeMap::new();
        for (tp, lag, end, hw, appended) in lagging {
            let before = self.lagging.get(&tp).copied();
            next.insert(tp.clone(), (appended, end, hw));
            let Some((bytes, at, _)) = before.filter(|b| end < b.2) else {
                continue;
            };
            let (rate_mb, records_per_s) = (
                appended.saturating_sub(bytes) as f64 / secs / 1e6,
                (end - at).max(0) as f64 / secs,
            );
            total_lag += lag;
            total_rate += rate_mb;
            let eta = if records_per_s > 0.0 {
                format!(
                    ", about {} to go",
                    crate::logging::Human(Duration::from_secs_f64(lag as f64 / records_per_s))
                )
            } else {
                String::new()
            };
            lines.push(format!(
                "{tp}: at offset {end}, leader at {hw}, {lag} behind, {rate_mb:.1} MB/s{eta}"
            ));
            self.reported.insert(tp);
        }
        self.lagging = next;
        if lines.len() > Self::ONE_BY_ONE {
            vec![format!(
                "{} partitions catching up: {total_lag} records behind in all, {total_rate:.1} MB/s",
                lines.len()
            )]
        } else {
            lines
        }
    }
}

/// One round of the monitor, the watchdog aside: `.live-status`, the progress lines, and
/// systemd's STATUS= line every 5 s — each doing per-partition work only when the live state
/// (or, for STATUS=, the disk) changed.
struct Monitor {
    publisher: crate::live::Publisher,
    progress: Progress,
    next_status: Instant,
    /// The last STATUS= line, and the generation and the disk state it was made from.
    status: Option<(u64, Option<String>, String)>,
    /// When a failed write of `.live-status` was last said.
    publish_warned: Option<Instant>,
}

impl Monitor {
    fn new(live_path: PathBuf, now: Instant) -> Monitor {
        Monitor {
            publisher: crate::live::Publisher::new(live_path),
            progress: Progress::default(),
            next_status: now,
            status: None,
            publish_warned: None,
        }
    }

    /// The round at `now`, `disk_full` saying why appends are paused, if they are: the
    /// STATUS= line to send, when it changed.
    fn round(
        &mut self,
        live: &crate::live::Live,
        disk_full: impl FnOnce() -> Option<String>,
        now: Instant,
    ) -> Option<String> {
        if let Err(e) = self.publisher.publish(live) {
            // Each second would be too many lines: once a minute, with what `status` misses.
            if self
                .publish_warned
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(60))
            {
                self.publish_warned = Some(now);
                crate::log_warn!(
                    "cannot write `{}` (`status` shows the last one written): {e}",
                    self.publisher.path().display()
                );
            }
        }
        let _ = self.progress.tick(live, now);
        let mut status = None;
        if now >= self.next_status {
            self.next_status = now + Duration::from_secs(5);
            let generation = live.generation();
            let full = disk_full();
            let same = self
                .status
                .as_ref()
                .is_some_and(|(g, f, _)| *g == generation && *f == full);
            if !same {
                let line = live.status_line(full.as_deref());
                if self.status.as_ref().is_none_or(|(_, _, l)| *l != line) {
                    status = Some(line.clone());
                }
                self.status = Some((generation, full, line));
            }
        }
        status
    }
}

/// Starts the task that publishes the live state every second (`.live-status` for
/// `status`: rewritten when it changed, its mtime refreshed otherwise), systemd's STATUS=
/// line every few seconds, and — when systemd keeps a watchdog — WATCHDOG=1 every half
/// interval, only while every fetcher, the manager and the checkpoint task made progress
/// within the interval: a wedged thread stops the pings, and systemd restarts the service.
fn start_monitor_task(logs: Arc<LogManager>, live: &'static Live) -> Result<ShutdownableThread> {
    let sig = Arc::new(TaskSignal {
        running: AtomicBool::new(true),
        lock: Mutex::new(()),
        cond: Condvar::new(),
    });
    let live_path = logs.data_dir().join(DataDir::LIVE_STATUS_FILE);
    let watchdog = watchdog_interval();
    if let Some(w) = watchdog {
        crate::log_info!(
            "systemd watchdog: pinging every {} while every thread makes progress",
            crate::logging::Human(w / 2)
        );
    }
    let mut next_ping = Instant::now();
    let mut monitor = Monitor::new(live_path, Instant::now());
    let mut stall_said = false;
    let s2 = sig.clone();
    let work = move || {
        let now = Instant::now();
        if let Some(line) = monitor.round(live, || logs.disk().full(), now) {
            crate::notify::notify(&format!("STATUS={line}"));
        }
        if let Some(w) = watchdog
            && now >= next_ping
        {
            // A round may take a second of waiting plus its work: a shorter window would see
            // healthy threads as stuck.
            let stalled: Vec<_> = live
                .stalled(w.max(Duration::from_secs(3)))
                .into_iter()
                .filter(|(n, _)| n != MONITOR_THREAD)
                .collect();
            if stalled.is_empty() {
                crate::notify::notify("WATCHDOG=1");
                stall_said = false;
            } else if !stall_said {
                let names: Vec<String> = stalled
                    .iter()
                    .map(|(n, d)| format!("{n} (for {})", crate::logging::Human(*d)))
                    .collect();
                crate::log_error!(
                    "no progress from {}: not pinging the systemd watchdog, so the service is restarted",
                    names.join(", ")
                );
                stall_said = true;
            }
            next_ping = now + w / 2;
        }
        let g = s2
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s2.is_running() {
            let _r = s2.cond.wait_timeout(g, Duration::from_secs(1));
        }
    };
    ShutdownableThread::start(MONITOR_THREAD, sig, live, work)
        .context("failed to start the monitor")
}

/// Starts the task that flushes every `flush_interval_ms` and checkpoints (plus retention)
/// every `checkpoint.interval_ms`.
fn start_checkpoint_task(
    cfg: &Config,
    logs: Arc<LogManager>,
    live: &'static Live,
) -> Result<ShutdownableThread> {
    let flush_every = Duration::from_millis(cfg.log.flush_interval_ms as u64);
    let checkpoint_every = Duration::from_millis(cfg.checkpoint.interval_ms as u64);
    let sig = Arc::new(TaskSignal {
        running: AtomicBool::new(true),
        lock: Mutex::new(()),
        cond: Condvar::new(),
    });
    let mut next_flush = Instant::now() + flush_every;
    let mut next_checkpoint = Instant::now() + checkpoint_every;
    let s2 = sig.clone();
    let work = move || {
        {
            let g = s2
                .lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let wake = next_flush.min(next_checkpoint);
            if s2.is_running() {
                let _r = s2.cond.wait_timeout(
                    g,
                    wake.saturating_duration_since(Instant::now())
                        .min(Duration::from_secs(1)),
                );
            }
        }
        if !s2.is_running() {
            return;
        }
        let now = Instant::now();
        if now >= next_checkpoint {
            logs.apply_retention();
            if let Err(e) = logs.checkpoint() {
                crate::log_error!("checkpoint failed: {e:#}");
            }
            next_checkpoint = now + checkpoint_every;
            next_flush = now + flush_every;
        } else if now >= next_flush {
            if let Err(e) = logs.flush_all() {
                crate::log_error!("flush failed: {e:#}");
            }
            next_flush = now + flush_every;
        }
    };
    ShutdownableThread::start("checkpoint-task", sig, live, work)
        .context("failed to start the checkpoint task")
}

/// One round over the bootstrap brokers before anything in the data dir is touched, when a
/// cluster id is recorded or the connections are secured.
///
/// A data dir that replicates one cluster is never fed from another: when the bootstrap
/// brokers report a cluster id other than the recorded one, the daemon refuses to start
/// without changing a file. Unreachable brokers leave the check to the first contact.
///
/// A certificate refused either way (unknown CA, wrong name, expired, a client certificate
/// required or refused) is a configuration to fix, not an outage to wait out: when every
/// bootstrap broker failed and at least one of them refused us so, each failure is logged as
/// an ERROR and the start fails (exit 1). Once running, the same failures are ERRORs retried
/// with the normal backoff.
fn check_brokers_at_start(cfg: &Config, security: &ClientSecurity) -> Result<()> {
    let recorded = identity::read_cluster_id(&cfg.data_dir)?;
    if recorded.is_none() && security.protocol() == SecurityProtocol::Plaintext {
        return Ok(());
    }
    let topics: Vec<String> = cfg.follow.iter().map(|f| f.topic.clone()).collect();
    let timeout = Duration::from_millis(cfg.fetch.request_timeout_ms as u64);
    let answer = cluster::bootstrap_metadata_within(
        &cfg.bootstrap_servers,
        security,
        &cfg.client_id,
        &topics,
        timeout,
    );
    let (md, expected) = match (answer, recorded) {
        (Ok(_), None) => return Ok(()),
        (Ok(md), Some(expected)) => (md, expected),
        (Err(e), recorded) => {
            let refused = e.refused();
            if refused > 0 {
                for each in &e.errors {
                    crate::log_error!("{each:#}");
                }
                bail!(
                    "no bootstrap broker could be used and {refused} of {} refused our TLS or SASL settings (see the errors above); nothing was fetched or changed: fix [security], the password file or the brokers' certificates and start again",
                    e.errors.len()
                );
            }
            if recorded.is_some() {
                crate::log_warn!(
                    "cannot check the cluster id at start-up ({e:#}); it is checked at the first contact, before anything is fetched"
                );
            } else {
                crate::log_warn!("no bootstrap broker answered at start-up ({e:#}); retrying");
            }
            return Ok(());
        }
    };
    match md.cluster_id {
        Some(seen) if seen != expected => bail!(
            "data dir `{}` replicates cluster {expected}, but the brokers at {} report cluster id {seen}; refusing to start, nothing was fetched or changed (point bootstrap_servers at cluster {expected}, or use a new data dir for cluster {seen})",
            cfg.data_dir.display(),
            cfg.bootstrap_servers.join(",")
        ),
        _ => {
            let stopped = cfg.data_dir.join(DataDir::FETCH_STOPPED_FILE);
            if stopped.exists() {
                std::fs::remove_file(&stopped)
                    .with_context(|| format!("failed to remove `{}`", stopped.display()))?;
            }
            Ok(())
        }
    }
}

/// `replica-follower repair`: holding the data-dir lock as `run` does (so never beside a
/// running daemon), re-fetches what the leaders hold and the replica lacks or holds damaged;
/// one line per step goes to `out`.
pub fn repair(cfg: &Config, out: &mut dyn std::io::Write) -> Result<crate::repair::RepairSummary> {
    crate::log::manager::existing_data_dir(&cfg.data_dir)?;
    let _lock = lock_data_dir(&cfg.data_dir)?;
    crate::repair::repair_data_dir(cfg, out)
}

/// `replica-follower serve`: holding the data-dir lock (so never beside a running daemon or
/// a repair), serves the stopped replica in `data_dir` read-only until SIGTERM/SIGINT.
pub fn serve(data_dir: &Path, opts: crate::serve::ServeOptions) -> Result<()> {
    crate::log::manager::existing_data_dir(data_dir)?;
    let _lock = lock_data_dir(data_dir)?;
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("failed to install signal handlers")?;
    let source = crate::serve::source::Source::stopped(data_dir)?;
    let mut server = crate::serve::Server::start(opts, source)?;
    crate::notify::notify("READY=1\nSTATUS=serving");
    let sig = signals.forever().next();
    crate::log_info!("received signal {}; stopping", sig.unwrap_or(0));
    server.stop();
    Ok(())
}

/// Reads `path` again on SIGHUP. What can change while running (`follow`) is handed to
/// the manager; every other section that changed is named as needing a restart. A file that
/// no longer parses or validates is refused, naming the key and line, and the running
/// configuration stays.
fn reload(
    path: &Path,
    running: &Config,
    to_manager: &std::sync::mpsc::Sender<ManagerEvent>,
) -> Config {
    crate::notify::notify("RELOADING=1");
    // Resolved only to be checked: files it names that went missing refuse the reload.
    let new = match Config::load(path).and_then(|c| crate::resolve::resolve(&c).map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            crate::log_error!(
                "reload of `{}` refused, the running configuration stays: {e:#}",
                path.display()
            );
            crate::notify::notify("READY=1");
            return running.clone();
        }
    };
    let mut applied = running.clone();
    applied.follow = new.follow.clone();
    let restart: Vec<&str> = [
        ("data_dir", new.data_dir != running.data_dir),
        (
            "bootstrap_servers",
            new.bootstrap_servers != running.bootstrap_servers,
        ),
        ("client_id", new.client_id != running.client_id),
        ("[fetch]", new.fetch != running.fetch),
        ("[log]", new.log != running.log),
        ("[checkpoint]", new.checkpoint != running.checkpoint),
        ("[metrics]", new.metrics != running.metrics),
        ("[serve]", new.serve != running.serve),
        ("[groups]", new.groups != running.groups),
        ("[offsite]", new.offsite != running.offsite),
        // TLS material is loaded once at start; a new CA or certificate needs a restart.
        ("[security]", new.security != running.security),
    ]
    .into_iter()
    .filter_map(|(k, changed)| changed.then_some(k))
    .collect();
    if !restart.is_empty() {
        crate::log_warn!(
            "reload of `{}`: {} changed and {} effect at the next restart",
            path.display(),
            restart.join(", "),
            if restart.len() == 1 { "takes" } else { "take" }
        );
    }
    if new.follow == running.follow {
        crate::log_info!("reload of `{}`: `follow` is unchanged", path.display());
    } else {
        crate::log_info!(
            "reload of `{}`: following {} now",
            path.display(),
            crate::logging::count(new.follow.len(), "topic entry", "topic entries")
        );
        let _ = to_manager.send(ManagerEvent::Reload(new.follow));
    }
    crate::notify::notify("READY=1");
    applied
}

/// Runs the daemon with a validated configuration until SIGTERM/SIGINT; SIGHUP reloads
/// `config_path` (when given).
pub fn run(cfg: Config, parts: Resolved, config_path: Option<PathBuf>) -> Result<()> {
    let cfg = Arc::new(cfg);
    // The process's live state: every part of the daemon reports to it, and `status`, the
    // metrics and the watchdog read it. Handed down from here; only a connection waiting on a
    // broker still beats through the global, for whichever thread waits.
    let live = crate::live::live();
    crate::fault::init();
    crate::live::set_read_committed(cfg.fetch.isolation.level() == 1);
    let _lock = lock_data_dir(&cfg.data_dir)?;
    // Register before anything starts, so an early SIGTERM is not lost.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .context("failed to install signal handlers")?;
    crate::log_info!(
        "replica-follower {} starting; data dir `{}`",
        env!("CARGO_PKG_VERSION"),
        cfg.data_dir.display()
    );
    // Built once: every connection to the cluster shares it. A change on SIGHUP is said to
    // need a restart.
    let security = parts.client;
    security.warn_if_names_unchecked();
    // Before anything in the data dir is touched (recovery, markers, checkpoints).
    check_brokers_at_start(&cfg, &security)?;
    // Before any log is loaded: loading opens every active segment.
    crate::log::resources::open_files::shared().set_budget(parts.max_open_files);
    // With an offsite copy, retention deletes only segments the bucket holds whole.
    let hold = parts
        .offsite
        .as_ref()
        .map(|_| Arc::new(crate::log::manager::RetentionHold::default()));
    let mut opened = LogManager::open(&cfg.data_dir, parts.log)?
        .with_min_free_bytes(cfg.log.min_free_bytes)
        .with_heartbeat(|| live.beat_current());
    if let Some(h) = &hold {
        opened = opened.with_retention_hold(h.clone());
    }
    let logs = Arc::new(opened);
    // A segment lost from the middle looks like a gap: the leader says whether it is a hole,
    // and fills it, before anything is fetched (every request within the request timeout).
    crate::repair::fill_holes_at_start(&cfg, &logs, &security);
    // Checkpoint right away so the files describe what was just loaded and recovered.
    logs.checkpoint()?;
    let metrics = start_metrics(&cfg, logs.clone(), live)?;
    // Readers are served what was loaded from here on; the listener's threads are not
    // watched by the watchdog (a slow client must not restart the daemon).
    let mut server = crate::serve::ServeOptions::from_section(&cfg.serve, parts.listener)?
        .map(|o| crate::serve::Server::start(o, crate::serve::source::Source::live(logs.clone())))
        .transpose()?;
    let mut task = start_checkpoint_task(&cfg, logs.clone(), live)?;
    // Topic configs and group offsets for a restore, on a thread the watchdog does not
    // watch: a slow broker delays the archive, never the replication.
    let mut archiver =
        crate::restore::archive::Archiver::start(crate::restore::archive::ArchiveOptions {
            source: crate::restore::Target {
                bootstrap: cfg.bootstrap_servers.clone(),
                security: security.clone(),
                client_id: cfg.client_id.clone(),
                request_timeout: crate::restore::archive::REQUEST_TIMEOUT,
            },
            data_dir: cfg.data_dir.clone(),
            follow: cfg.follow.iter().map(|f| f.topic.clone()).collect(),
            groups: cfg.groups.matcher(),
            groups_every: Duration::from_millis(cfg.groups.refresh_ms.unsigned_abs()),
        })
        .context("failed to start the archive of topic configs and group offsets")?;
    // The offsite copy, on a thread the watchdog does not watch: a failing store delays
    // the copy, never the replication.
    let mut uploader = match (&parts.offsite, &hold) {
        (Some(o), Some(h)) => Some(crate::offsite::upload::Uploader::start(
            crate::offsite::upload::UploaderOptions {
                offsite: o.clone(),
                data_dir: cfg.data_dir.clone(),
                logs: logs.clone(),
                hold: h.clone(),
                live,
            },
        )?),
        _ => None,
    };
    let manager = FetcherManager::new(cfg.clone(), logs.clone(), security, live);
    let to_manager = manager.sender();
    let stop_manager = manager.stop_handle();
    let manager_thread = std::thread::Builder::new()
        .name(crate::fetcher::manager::MANAGER_THREAD.into())
        .spawn(move || manager.run())
        .context("failed to start the fetcher manager")?;
    // A full disk found before this keeps its STATUS= line.
    match logs.disk().full() {
        Some(_) => crate::notify::notify("READY=1"),
        None => crate::notify::notify("READY=1\nSTATUS=following"),
    }
    // After READY=1: its STATUS= lines and watchdog pings follow it.
    let mut monitor = start_monitor_task(logs.clone(), live)?;
    crate::log_info!(
        "following {} topic(s) from {}",
        cfg.follow.len(),
        cfg.bootstrap_servers.join(",")
    );

    let mut running = (*cfg).clone();
    let mut sig = None;
    for s in signals.forever() {
        if s != signal_hook::consts::SIGHUP {
            sig = Some(s);
            break;
        }
        match &config_path {
            Some(p) => running = reload(p, &running, &to_manager),
            None => crate::log_warn!("SIGHUP: no configuration file to reload"),
        }
    }
    crate::log_info!("received signal {}; shutting down", sig.unwrap_or(0));
    crate::notify::notify("STOPPING=1\nSTATUS=stopping");
    if let Some(s) = server.as_mut() {
        s.stop();
    }
    // Interrupts whatever the manager and the fetchers wait on; the manager then joins them.
    stop_manager.stop();
    archiver.signal();
    if let Some(u) = &uploader {
        u.signal();
    }
    if manager_thread.join().is_err() {
        crate::log_error!("the fetcher manager panicked");
    }
    task.shutdown();
    monitor.shutdown();
    // Last: a round in a slow request must not delay the final checkpoint.
    archiver.stop();
    if let Some(u) = uploader.as_mut() {
        u.stop(Duration::from_secs(1));
    }
    if let Some((running, addr, _thread)) = metrics {
        // Not joined: a client in the middle of a scrape must not hold up the shutdown; the
        // thread ends once woken, or with the process.
        running.store(false, Ordering::SeqCst);
        crate::serve::wake_accept(addr);
    }
    let _ = std::fs::remove_file(cfg.data_dir.join(DataDir::LIVE_STATUS_FILE));
    let clean = logs.shutdown()?;
    say_stopped(&logs.summaries(), clean);
    Ok(())
}

/// The lines of a stop: each partition's figures at debug level; the partitions failed at
/// the end at WARN, each on a line of its own for a few, else named by the first few and
/// counted; and one INFO line with the totals. Returns the WARN and INFO lines.
fn say_stopped(
    summaries: &[(
        crate::checkpoint::TopicPartition,
        crate::log::partition::LogSummary,
        Option<String>,
    )],
    clean: bool,
) -> Vec<String> {
    let (mut segments, mut bytes) = (0, 0);
    let mut failed = Vec::new();
    for (tp, s, why) in summaries {
        segments += s.segments;
        bytes += s.size_bytes;
        match why {
            None => crate::log_debug!(
                "{tp}: log {}..{}, high watermark {}, checkpointed",
                s.log_start_offset,
                s.log_end_offset,
                s.high_watermark
            ),
            Some(why) => {
                crate::log_debug!(
                    "{tp}: failed ({why}); checkpointed up to its recovery point {}",
                    s.recovery_point
                );
                failed.push((tp, why, s.recovery_point));
            }
        }
    }
    let mut lines = Vec::new();
    if failed.len() <= crate::logging::NAMED_IN_A_LINE {
        for (tp, why, rp) in &failed {
            lines.push(format!(
                "{tp}: failed ({why}); checkpointed up to its recovery point {rp}"
            ));
        }
    } else {
        let named: Vec<String> = failed
            .iter()
            .map(|(tp, why, _)| format!("{tp} ({why})"))
            .collect();
        lines.push(format!(
            "{} partitions failed, each checkpointed up to its recovery point: {}; `status` lists every one",
            failed.len(),
            crate::logging::first_few(&named)
        ));
    }
    for l in &lines {
        crate::log_warn!("{l}");
    }
    let healthy = summaries.len().saturating_sub(failed.len());
    let mut info = if clean {
        "clean shutdown complete".to_string()
    } else {
        "shutdown complete; not marked clean, so the next start recovers".to_string()
    };
    if !summaries.is_empty() {
        info.push_str(&format!(
            ": {} checkpointed ({}, {bytes} bytes)",
            crate::logging::count(healthy, "partition log", "partition logs"),
            crate::logging::count(segments, "segment", "segments"),
        ));
        if !failed.is_empty() {
            info.push_str(&format!(", {} failed", failed.len()));
        }
    }
    crate::log_info!("{info}");
    lines.push(info);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_says_its_totals_in_one_line_and_names_the_failed_partitions() {
        let summary = crate::log::partition::LogSummary {
            log_start_offset: 0,
            log_end_offset: 3,
            high_watermark: 3,
            recovery_point: 3,
            leader_epoch: Some(0),
            segments: 1,
            size_bytes: 100,
        };
        let parts = |failed: i32| {
            (0..1000)
                .map(|p| {
                    let why = (p < failed).then(|| format!("EIO {p}"));
                    (
                        crate::checkpoint::TopicPartition::new("t", p),
                        summary.clone(),
                        why,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            say_stopped(&parts(0), true),
            [
                "clean shutdown complete: 1000 partition logs checkpointed (1000 segments, 100000 bytes)"
            ]
        );
        let two = say_stopped(&parts(2), true);
        assert_eq!(
            two,
            [
                "t-0: failed (EIO 0); checkpointed up to its recovery point 3",
                "t-1: failed (EIO 1); checkpointed up to its recovery point 3",
                "clean shutdown complete: 998 partition logs checkpointed (1000 segments, 100000 bytes), 2 failed",
            ]
        );
        let many = say_stopped(&parts(7), false);
        assert_eq!(many.len(), 2, "{many:?}");
        assert_eq!(
            many[0],
            "7 partitions failed, each checkpointed up to its recovery point: t-0 (EIO 0), t-1 (EIO 1), t-2 (EIO 2), t-3 (EIO 3), t-4 (EIO 4) and 2 more; `status` lists every one"
        );
        assert!(
            many[1].starts_with("shutdown complete; not marked clean, so the next start recovers: 993 partition logs"),
            "{}",
            many[1]
        );
    }

    #[test]
    fn catching_up_is_reported_every_interval_and_caught_up_once() {
        let live = crate::live::Live::default();
        let tp = crate::checkpoint::TopicPartition::new("p", 0);
        let mut p = Progress::default();
        let t0 = Instant::now();
        let every = Progress::every();
        live.fetched(&tp, 10_000, 10_000, 1_000, 1_000, None);
        assert!(p.tick(&live, t0).is_empty(), "a first lag says nothing yet");
        live.appended(&tp, 2_000_000, 10);
        live.fetched(&tp, 10_000, 10_000, 4_000, 4_000, None);
        let said = p.tick(&live, t0 + every);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("p-0: at offset 4000, leader at 10000, 6000 behind,")
                && said[0].contains("to go"),
            "{}",
            said[0]
        );
        // Not due yet: nothing; then caught up, said once.
        live.fetched(&tp, 10_000, 10_000, 10_000, 10_000, None);
        assert_eq!(
            p.tick(&live, t0 + every + every / 2),
            ["p-0: caught up at offset 10000"]
        );
        assert!(p.tick(&live, t0 + every * 3).is_empty());
        // A busy topic's passing lag (below where the leader was a report ago) says nothing.
        live.fetched(&tp, 10_050, 10_050, 10_040, 10_040, None);
        assert!(p.tick(&live, t0 + every * 4).is_empty());
        live.fetched(&tp, 10_100, 10_100, 10_090, 10_090, None);
        assert!(p.tick(&live, t0 + every * 5).is_empty());
    }

    #[test]
    fn a_lag_that_starts_between_reports_and_sticks_is_still_reported_every_interval() {
        let live = crate::live::Live::default();
        let tp = crate::checkpoint::TopicPartition::new("p", 0);
        let mut p = Progress::default();
        let t0 = Instant::now();
        let every = Progress::every();
        live.fetched(&tp, 100, 100, 100, 100, None);
        assert!(p.tick(&live, t0).is_empty(), "nothing lags");
        // It starts lagging between reports, then nothing changes at all.
        live.fetched(&tp, 1_000, 1_000, 100, 100, None);
        assert!(p.tick(&live, t0 + every / 2).is_empty(), "not due");
        assert!(
            p.tick(&live, t0 + every).is_empty(),
            "a first lag says nothing yet"
        );
        for n in 2..5 {
            let walks = live.walks();
            assert!(p.tick(&live, t0 + every * n - every / 2).is_empty());
            assert_eq!(live.walks(), walks, "a quiet round between reports");
            assert_eq!(
                p.tick(&live, t0 + every * n),
                ["p-0: at offset 100, leader at 1000, 900 behind, 0.0 MB/s"],
                "report {n}"
            );
        }
        live.fetched(&tp, 1_000, 1_000, 1_000, 1_000, None);
        assert_eq!(
            p.tick(&live, t0 + every * 5 - every / 2),
            ["p-0: caught up at offset 1000"]
        );
        assert!(p.tick(&live, t0 + every * 5).is_empty());
    }

    #[test]
    fn a_quiet_round_keeps_the_live_status_and_only_refreshes_its_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DataDir::LIVE_STATUS_FILE);
        let live = crate::live::Live::default();
        let tp = crate::checkpoint::TopicPartition::new("m", 0);
        live.fetched(&tp, 10, 10, 10, 10, None);
        let t0 = Instant::now();
        let mut m = Monitor::new(path.clone(), t0);
        let line = "1 partition(s): 1 caught up, 0 lagging (0 records behind)";
        assert_eq!(m.round(&live, || None, t0).as_deref(), Some(line));
        let written = std::fs::read_to_string(&path).unwrap();
        let aged = std::time::SystemTime::now() - Duration::from_secs(60);
        let set_mtime = |t| {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(t)
                .unwrap()
        };
        let mtime = || std::fs::metadata(&path).unwrap().modified().unwrap();
        // Nothing changes for a while: the same bytes (written_ms included), a fresh mtime,
        // no STATUS= line to send, and no partition looked at (progress reports included).
        std::thread::sleep(Duration::from_millis(5));
        let walks = live.walks();
        for s in 1..25 {
            set_mtime(aged);
            assert_eq!(m.round(&live, || None, t0 + Duration::from_secs(s)), None);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
            assert!(
                mtime() > aged + Duration::from_secs(50),
                "mtime not refreshed"
            );
        }
        assert_eq!(
            live.walks(),
            walks,
            "a quiet round looked at every partition"
        );
        let running = crate::live::read_running(dir.path()).expect("running");
        assert_eq!(running, toml::from_str(&written).unwrap());
        // The disk filling up changes the STATUS= line, not the file.
        let full = "disk full: 3 bytes free";
        assert_eq!(
            m.round(&live, || Some(full.into()), t0 + Duration::from_secs(25))
                .as_deref(),
            Some(format!("{line}; fetching paused: {full}").as_str())
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), written);
        // A change is written at once, and said in the next STATUS= line.
        live.fetched(&tp, 20, 20, 12, 12, None);
        assert_eq!(m.round(&live, || None, t0 + Duration::from_secs(26)), None);
        let now: crate::live::LiveFile =
            toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(now.partitions[0].live.log_end_offset, Some(12));
        assert_eq!(
            m.round(&live, || None, t0 + Duration::from_secs(30))
                .as_deref(),
            Some("1 partition(s): 0 caught up, 1 lagging (8 records behind)")
        );
    }
}
