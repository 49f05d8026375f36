//! `diverged/` and `damaged/`: what a truncation or recovery removed from a log, kept.
//!
//! ```text
//! <partition dir>/diverged/<first offset>-<last offset>.log     the removed batches, byte for byte
//! ```
//! Kafka truncates a follower to its new leader and forgets what it cut. Batches below the
//! replica's high watermark were committed once and may be the last copy anywhere after an
//! unclean election, so before the log is cut they are copied here: written to a `.tmp` file,
//! fsynced, renamed, the folder fsynced. Crash order: the copy is durable before the cut
//! begins, so after a crash in between the batches are in both places (the truncation runs
//! again at the next start and finds its copy already made), never in neither.
//! The bytes are copied raw, from the cut to the end of each file: normally a valid record
//! set (batches back to back, every CRC intact), which `verify` checks; damage inside the
//! removed range is kept as it was.
//!
//! `damaged/<segment file>.<byte position>`: the bytes recovery cut from a segment at damage
//! (a bad CRC or header, offsets out of order) — intact batches may lie behind the damage, so
//! they are kept, not dropped. A torn tail (the one batch a crash interrupted) is only cut.

use crate::checkpoint::fsync_dir;
use crate::log::data_dir::DataDir;
use anyhow::{Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Copies the `runs` (segment file, byte position, length; oldest first) into
/// `dir/diverged/<first>-<last>.log` durably and returns its path. A file of that name with
/// the same bytes (a crash came between an earlier copy and its cut) is reused.
pub fn keep(dir: &Path, runs: &[(PathBuf, u64, u64)], first: i64, last: i64) -> Result<PathBuf> {
    let ddir = subdir(dir, DataDir::DIVERGED_DIR)?;
    let tmp = ddir.join(format!("{first}-{last}.log.tmp"));
    write_runs(&tmp, runs)?;
    let mut target = ddir.join(format!("{first}-{last}.log"));
    let mut n = 1;
    while target.exists() {
        if same_bytes(&target, &tmp)? {
            fs::remove_file(&tmp)
                .with_context(|| format!("failed to remove `{}`", tmp.display()))?;
            return Ok(target);
        }
        target = ddir.join(format!("{first}-{last}.{n}.log"));
        n += 1;
    }
    publish(&tmp, &target, &ddir)?;
    Ok(target)
}

/// Copies `len` bytes at `start` of the segment file `log` durably to
/// `dir/damaged/<segment file name>.<start>` and returns that path.
pub fn keep_damaged_tail(dir: &Path, log: &Path, start: u64, len: u64) -> Result<PathBuf> {
    let ddir = subdir(dir, DataDir::DAMAGED_DIR)?;
    let name = log
        .file_name()
        .map_or_else(|| "segment".into(), |n| n.to_string_lossy().into_owned());
    let target = free_name(&ddir.join(format!("{name}.{start}")));
    let tmp = ddir.join(format!("{name}.{start}.tmp"));
    write_runs(&tmp, &[(log.to_path_buf(), start, len)])?;
    publish(&tmp, &target, &ddir)?;
    Ok(target)
}

/// `dir/name`, created (and `dir` fsynced) if missing.
fn subdir(dir: &Path, name: &str) -> Result<PathBuf> {
    let sub = dir.join(name);
    if !sub.is_dir() {
        fs::create_dir_all(&sub)
            .with_context(|| format!("failed to create `{}`", sub.display()))?;
        fsync_dir(dir)?;
    }
    Ok(sub)
}

/// Writes the byte `runs` (file, position, length) into `tmp`, whole or not at all, and
/// fsyncs it.
fn write_runs(tmp: &Path, runs: &[(PathBuf, u64, u64)]) -> Result<()> {
    let mut out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .with_context(|| format!("failed to create `{}`", tmp.display()))?;
    for (path, start, len) in runs {
        let mut f =
            File::open(path).with_context(|| format!("failed to open `{}`", path.display()))?;
        f.seek(SeekFrom::Start(*start))
            .with_context(|| format!("failed to seek `{}`", path.display()))?;
        let copied = std::io::copy(&mut f.take(*len), &mut out).with_context(|| {
            format!(
                "failed to copy `{}` into `{}`",
                path.display(),
                tmp.display()
            )
        })?;
        if copied != *len {
            anyhow::bail!(
                "`{}` ended after {copied} of {len} bytes at position {start}",
                path.display()
            );
        }
    }
    out.flush()
        .and_then(|_| out.sync_all())
        .with_context(|| format!("failed to fsync `{}`", tmp.display()))
}

/// Renames the synced `tmp` to `target` and fsyncs the folder.
fn publish(tmp: &Path, target: &Path, ddir: &Path) -> Result<()> {
    fs::rename(tmp, target).with_context(|| {
        format!(
            "failed to rename `{}` to `{}`",
            tmp.display(),
            target.display()
        )
    })?;
    fsync_dir(ddir)
}

/// `path`, or `path.2`, `path.3`, … — the first that does not exist, so nothing kept aside is
/// ever replaced.
pub fn free_name(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    let mut n = 2;
    while p.exists() {
        let mut name = path.as_os_str().to_os_string();
        name.push(format!(".{n}"));
        p = PathBuf::from(name);
        n += 1;
    }
    p
}

fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let len = |p: &Path| {
        fs::metadata(p)
            .map(|m| m.len())
            .with_context(|| format!("failed to stat `{}`", p.display()))
    };
    if len(a)? != len(b)? {
        return Ok(false);
    }
    let (mut fa, mut fb) = (
        File::open(a).with_context(|| format!("failed to open `{}`", a.display()))?,
        File::open(b).with_context(|| format!("failed to open `{}`", b.display()))?,
    );
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = fa
            .read(&mut ba)
            .with_context(|| format!("failed to read `{}`", a.display()))?;
        if n == 0 {
            return Ok(true);
        }
        let (Some(read_a), Some(read_b)) = (ba.get(..n), bb.get_mut(..n)) else {
            return Ok(false);
        };
        fb.read_exact(read_b)
            .with_context(|| format!("failed to read `{}`", b.display()))?;
        if read_a != read_b {
            return Ok(false);
        }
    }
}

/// The files of a partition's `diverged/` folder: (path, first offset, last offset), by
/// first offset.
pub fn list(dir: &Path) -> Result<Vec<(PathBuf, i64, i64)>> {
    let ddir = dir.join(DataDir::DIVERGED_DIR);
    let mut out = Vec::new();
    let entries = match fs::read_dir(&ddir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("failed to list `{}`", ddir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("failed to list `{}`", ddir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".log") else {
            continue;
        };
        let range = stem.split('.').next().unwrap_or_default();
        if let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>())
        {
            out.push((entry.path(), a, b));
        }
    }
    out.sort_by_key(|(p, a, _)| (*a, p.clone()));
    Ok(out)
}

/// A test hook for crash tests: with `RF_TEST_PAUSE_AT=<point>` in the environment, the
/// process logs that it reached `point` and sleeps there for `RF_TEST_PAUSE_MS` (default
/// 30000) ms, so that a test can kill it -9 at exactly that moment. The points are a
/// truncation that removes committed data (`diverged-copied`) and a segment roll
/// (`rolling`). The environment is read once; unset, a call costs one comparison. Only
/// builds with the `test-hooks` feature (tests/run.sh's) have it; in others it does nothing.
#[cfg(feature = "test-hooks")]
pub fn test_pause_point(point: &str) {
    static PAUSE: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        let at = std::env::var("RF_TEST_PAUSE_AT").ok()?;
        let ms = std::env::var("RF_TEST_PAUSE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30_000);
        Some((at, ms))
    });
    if let Some((at, ms)) = pause
        && at == point
    {
        let ms = *ms;
        crate::log_warn!("test pause at {point} for {ms} ms");
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

#[cfg(not(feature = "test-hooks"))]
pub fn test_pause_point(_point: &str) {}
