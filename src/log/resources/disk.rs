//! Free space of the data dir's filesystem, checked before appending.
//!
//! Below `log.min_free_bytes`, or after a write failed with ENOSPC, the data dir is full:
//! appends are refused (every partition of the data dir backs off; nothing is written, so
//! nothing is torn), one ERROR says so with the free bytes and the threshold, and the check
//! repeats every few seconds until space returns, which is logged once too. The figure is
//! cached: one `statvfs` a second at most while appending.

use crate::log::data_dir::DataDir;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often free space is looked up while appending, and while the disk is full.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const RECHECK_WHEN_FULL: Duration = Duration::from_secs(2);
/// With the threshold off, a disk that filled up counts as usable again from this much.
const RESUME_MARGIN: u64 = 8 << 20;

#[derive(Debug)]
pub struct DiskSpace {
    dir: PathBuf,
    min_free: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    checked: Option<Instant>,
    free: Option<u64>,
    /// Why appends are refused, while they are.
    full: Option<String>,
    /// Free bytes when a write failed with ENOSPC: space must grow past it to resume.
    free_at_failure: Option<u64>,
}

impl DiskSpace {
    pub fn new(dir: &Path, min_free: u64) -> Self {
        // Left by a daemon that stopped while the disk was full: the state is found anew.
        let _ = std::fs::remove_file(dir.join(DataDir::DISK_FULL_FILE));
        DiskSpace {
            dir: dir.to_path_buf(),
            min_free,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Err(reason)` while the data dir is full; `Ok` when `len` more bytes may be appended.
    pub fn admit(&self, len: u64) -> Result<(), String> {
        let mut st = self.state();
        let every = if st.full.is_some() {
            RECHECK_WHEN_FULL
        } else {
            CHECK_EVERY
        };
        if st.checked.is_none_or(|t| t.elapsed() >= every) {
            st.checked = Some(Instant::now());
            st.free = fs2::available_space(&self.dir).ok();
            // Some room above the threshold (and above what was free when a write failed) before
            // resuming, so free space hovering around it does not flap.
            let usable_from = self.min_free.saturating_add(RESUME_MARGIN).max(
                st.free_at_failure
                    .map_or(0, |f| f.saturating_add(RESUME_MARGIN)),
            );
            match (st.free, st.full.is_some()) {
                (Some(free), false) if self.min_free > 0 && free < self.min_free => {
                    let why = format!(
                        "disk full: {free} bytes free in `{}`, below log.min_free_bytes = {}",
                        self.dir.display(),
                        self.min_free
                    );
                    crate::log_error!(
                        "{why}; fetching is paused for every partition of this data dir until space returns"
                    );
                    self.published(Some(&why));
                    st.full = Some(why);
                }
                (Some(free), true) if free >= usable_from => {
                    crate::log_info!(
                        "disk space is back: {free} bytes free in `{}`; fetching resumes",
                        self.dir.display()
                    );
                    st.full = None;
                    st.free_at_failure = None;
                    self.published(None);
                }
                _ => {}
            }
        }
        let _ = len;
        match &st.full {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// A write failed with ENOSPC: the data dir is full from now until space returns.
    pub fn on_no_space(&self) {
        let mut st = self.state();
        if st.full.is_none() {
            let free = fs2::available_space(&self.dir).ok();
            let why = format!(
                "disk full: no space left on device in `{}` ({} bytes free, log.min_free_bytes = {})",
                self.dir.display(),
                free.map_or_else(|| "?".to_string(), |f| f.to_string()),
                self.min_free
            );
            crate::log_error!(
                "{why}; fetching is paused for every partition of this data dir until space returns"
            );
            self.published(Some(&why));
            st.full = Some(why);
            st.checked = Some(Instant::now());
            st.free_at_failure = free;
        }
    }

    /// Tells systemd (STATUS=) and `status` (the `disk-full` file, best effort: a disk
    /// with no byte left may refuse even that) that the data dir is full, or no longer.
    fn published(&self, full: Option<&str>) {
        crate::notify::disk_status(full);
        let path = self.dir.join(DataDir::DISK_FULL_FILE);
        let written = match full {
            Some(why) => crate::checkpoint::rewrite_atomic(&path, why.as_bytes()),
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            },
        };
        if let Err(e) = written {
            crate::log_debug!(
                "cannot record the disk state in `{}`: {e:#}",
                path.display()
            );
        }
    }

    /// Free bytes on the data dir's filesystem now.
    pub fn free_bytes(&self) -> Option<u64> {
        fs2::available_space(&self.dir).ok()
    }

    /// Why the data dir is full, when it is.
    pub fn full(&self) -> Option<String> {
        self.state().full.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_threshold_appends_are_refused_and_the_data_dir_says_why() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(DataDir::DISK_FULL_FILE), "stale").unwrap();
        let space = DiskSpace::new(d.path(), u64::MAX / 2);
        assert!(
            !d.path().join(DataDir::DISK_FULL_FILE).exists(),
            "a stale mark from an earlier run goes"
        );
        let why = space.admit(100).unwrap_err();
        assert!(
            why.contains("disk full") && why.contains("log.min_free_bytes"),
            "{why}"
        );
        assert_eq!(space.full().as_deref(), Some(why.as_str()));
        let recorded = std::fs::read_to_string(d.path().join(DataDir::DISK_FULL_FILE)).unwrap();
        assert_eq!(recorded, why, "what `status` shows");
        let mut notes = Vec::new();
        let st = crate::inspect::status::collect_data_dir(d.path(), &mut notes);
        assert_eq!(st.disk_full.as_deref(), Some(why.as_str()));
        let text = crate::inspect::status::render_text(&st, &[]);
        let shown = format!("DISK FULL: {}", why.trim_start_matches("disk full: "));
        assert!(text.contains(&shown), "{text} {notes:?}");
    }

    #[test]
    fn with_space_above_the_threshold_appends_go_on() {
        let d = tempfile::tempdir().unwrap();
        let space = DiskSpace::new(d.path(), 1);
        assert!(space.admit(100).is_ok());
        assert!(space.full().is_none());
        assert!(!d.path().join(DataDir::DISK_FULL_FILE).exists());
    }
}
