//! Kafka-style checkpoint files and the one function that rewrites any file atomically.
//!
//! ```text
//! 0                      version line (always 0)
//! 2                      count line: number of entry lines that follow
//! orders 0 1200          offset checkpoints: `topic partition offset`
//! orders 1 977
//! ```
//! `leader-epoch-checkpoint` has the same frame with `epoch start_offset` lines.
//!
//! Write protocol ([`rewrite_atomic`]): write `<name>.tmp` in the same directory, fsync it,
//! rename it over `<name>`, fsync the directory. A crash at any point leaves either the old or
//! the new file whole; a left-over `.tmp` is ignored and overwritten next time.
//! Readers reject anything malformed with an error naming the file and line; callers then fall
//! back to what the log itself proves (see `checkpoint-format.md`).

use crate::fault::{self, Step};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::path::Path;

pub mod upstream;

pub use crate::protocol::TopicPartition;

const VERSION: u32 = 0;

thread_local! {
    /// Directory fsyncs and file-system syncs made by this thread (for tests).
    static SYNCS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// (directory fsyncs, file-system syncs) this thread made so far: what tests count.
pub fn syncs_on_this_thread() -> (u64, u64) {
    SYNCS.with(std::cell::Cell::get)
}

/// fsyncs a directory so that a rename or a file creation in it is durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    SYNCS.with(|c| c.set((c.get().0 + 1, c.get().1)));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("failed to fsync directory `{}`", dir.display()))
}

/// `syncfs` of the file system holding `dir`: everything written to it so far (files,
/// directory entries, renames) is durable after this returns. One call stands for the
/// fsyncs of many new files and directories (a round of new partitions).
pub fn sync_filesystem(dir: &Path) -> Result<()> {
    SYNCS.with(|c| c.set((c.get().0, c.get().1 + 1)));
    File::open(dir)
        .map_err(anyhow::Error::from)
        .and_then(|d| rustix::fs::syncfs(&d).map_err(anyhow::Error::from))
        .with_context(|| format!("failed to sync the file system of `{}`", dir.display()))
}

/// `syncfs` on a descriptor held open since the daemon started, so that it also reports a
/// writeback error of the file system that happened before the call (counted as
/// [`sync_filesystem`] is).
pub fn syncfs_on(dir: &File) -> std::io::Result<()> {
    SYNCS.with(|c| c.set((c.get().0, c.get().1 + 1)));
    rustix::fs::syncfs(dir).map_err(std::io::Error::from)
}

/// The first half of [`rewrite_atomic`] for a pass that shares one file-system sync among
/// many files: writes `<path>.tmp` without an fsync and returns its path. The caller syncs
/// the file system, then [`commit_staged`] renames it into place.
pub fn stage_unsynced(path: &Path, contents: &[u8]) -> Result<std::path::PathBuf> {
    let mut tmp_name = path
        .file_name()
        .with_context(|| format!("`{}` has no file name", path.display()))?
        .to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .with_context(|| format!("failed to create `{}`", tmp.display()))?;
    if let Err(e) = fault::write_all_at(Step::Checkpoint, &f, contents, 0) {
        drop(f);
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("failed to write `{}`", tmp.display()));
    }
    Ok(tmp)
}

/// Renames a file [`stage_unsynced`] wrote, once the file system was synced, over `path`.
/// The rename is durable at the caller's next file-system sync. On failure the temporary
/// file goes and the old file stays.
pub fn commit_staged(tmp: &Path, path: &Path) -> Result<()> {
    fs::rename(tmp, path).map_err(|e| {
        let _ = fs::remove_file(tmp);
        anyhow::Error::from(e).context(format!(
            "failed to rename `{}` to `{}`",
            tmp.display(),
            path.display()
        ))
    })
}

/// Replaces `path` with `contents` atomically and durably: temp file, fsync, rename, fsync dir.
pub fn rewrite_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic(path, contents, None)
}

/// [`rewrite_atomic`] for a secret: the new file has mode 0600 before a byte is written, so
/// no other user can read it at any point (a left-over `.tmp` of another mode included).
pub fn rewrite_atomic_private(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic(path, contents, Some(0o600))
}

fn write_atomic(path: &Path, contents: &[u8], mode: Option<u32>) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("`{}` has no file name", path.display()))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    if let Some(mode) = mode {
        // A secret's temporary file is its owner's from the first byte, and a symlink planted
        // at its name is not followed.
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&tmp);
        opts.mode(mode)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    let f = opts
        .open(&tmp)
        .with_context(|| format!("failed to create `{}`", tmp.display()))?;
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(mode))
            .with_context(|| format!("failed to chmod `{}`", tmp.display()))?;
    }
    let written = fault::write_all_at(Step::Checkpoint, &f, contents, 0)
        .with_context(|| format!("failed to write `{}`", tmp.display()))
        .and_then(|()| {
            f.sync_all()
                .with_context(|| format!("failed to fsync `{}`", tmp.display()))
        })
        .and_then(|()| {
            drop(f);
            fs::rename(&tmp, path).with_context(|| {
                format!(
                    "failed to rename `{}` to `{}`",
                    tmp.display(),
                    path.display()
                )
            })
        });
    if let Err(e) = written {
        // The old file is untouched; the half-written copy goes.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fsync_dir(dir)
}

pub(crate) fn render(lines: &[String]) -> Vec<u8> {
    let mut s = format!("{VERSION}\n{}\n", lines.len());
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.into_bytes()
}

/// Splits a checkpoint file into its entry lines after checking version and count.
pub(crate) fn entry_lines<'a>(path: &Path, text: &'a str) -> Result<Vec<(usize, &'a str)>> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (_, version) = lines
        .next()
        .with_context(|| format!("`{}` is empty", path.display()))?;
    if version.trim() != VERSION.to_string() {
        bail!(
            "`{}` line 1: unsupported version `{version}` (expected {VERSION})",
            path.display()
        );
    }
    let (_, count) = lines
        .next()
        .with_context(|| format!("`{}` has no count line", path.display()))?;
    let count: usize = count
        .trim()
        .parse()
        .with_context(|| format!("`{}` line 2: bad count `{count}`", path.display()))?;
    let entries: Vec<(usize, &str)> = lines.filter(|(_, l)| !l.trim().is_empty()).collect();
    if entries.len() != count {
        bail!(
            "`{}`: count line says {count} entries, file has {}",
            path.display(),
            entries.len()
        );
    }
    Ok(entries)
}

/// The bytes of an offset checkpoint (`topic partition offset` lines).
pub fn render_offsets(offsets: &BTreeMap<TopicPartition, i64>) -> Vec<u8> {
    let lines: Vec<String> = offsets
        .iter()
        .map(|(tp, o)| format!("{} {} {o}", tp.topic, tp.partition))
        .collect();
    render(&lines)
}

/// Writes an offset checkpoint atomically.
pub fn write_offsets(path: &Path, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
    rewrite_atomic(path, &render_offsets(offsets))
}

/// Reads an offset checkpoint. A missing file is an empty map; a malformed one is an error
/// naming the file and line.
pub fn read_offsets(path: &Path) -> Result<BTreeMap<TopicPartition, i64>> {
    let Some(text) = read_text(path)? else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for (n, line) in entry_lines(path, &text)? {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [topic, partition, offset] = fields[..] else {
            bail!(
                "`{}` line {n}: expected `topic partition offset`, got `{line}`",
                path.display()
            );
        };
        let partition: i32 = partition
            .parse()
            .ok()
            .filter(|p| *p >= 0)
            .with_context(|| {
                format!("`{}` line {n}: bad partition `{partition}`", path.display())
            })?;
        let offset: i64 = offset
            .parse()
            .ok()
            .filter(|o| *o >= 0)
            .with_context(|| format!("`{}` line {n}: bad offset `{offset}`", path.display()))?;
        if out
            .insert(TopicPartition::new(topic, partition), offset)
            .is_some()
        {
            bail!(
                "`{}` line {n}: {topic}-{partition} appears twice",
                path.display()
            );
        }
    }
    Ok(out)
}

/// Writes a leader-epoch checkpoint (`epoch start_offset` lines) atomically.
pub fn write_epochs(path: &Path, epochs: &[(i32, i64)]) -> Result<()> {
    rewrite_atomic(path, &render_epochs(epochs))
}

/// A leader-epoch checkpoint's bytes.
pub fn render_epochs(epochs: &[(i32, i64)]) -> Vec<u8> {
    let lines: Vec<String> = epochs.iter().map(|(e, o)| format!("{e} {o}")).collect();
    render(&lines)
}

/// Reads a leader-epoch checkpoint; entries must grow in both epoch and start offset.
pub fn read_epochs(path: &Path) -> Result<Vec<(i32, i64)>> {
    let Some(text) = read_text(path)? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(i32, i64)> = Vec::new();
    for (n, line) in entry_lines(path, &text)? {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = match fields[..] {
            [e, o] => e.parse::<i32>().ok().zip(o.parse::<i64>().ok()),
            _ => None,
        };
        let Some((epoch, start)) = parsed.filter(|(e, o)| *e >= 0 && *o >= 0) else {
            bail!(
                "`{}` line {n}: expected `epoch start_offset`, got `{line}`",
                path.display()
            );
        };
        if let Some(&(pe, po)) = out.last()
            && (epoch <= pe || start < po)
        {
            bail!(
                "`{}` line {n}: entry `{line}` does not follow `{pe} {po}`",
                path.display()
            );
        }
        out.push((epoch, start));
    }
    Ok(out)
}

/// Writes a range checkpoint (`first_offset last_offset` lines, inclusive) atomically.
pub fn write_ranges(path: &Path, ranges: &[(i64, i64)]) -> Result<()> {
    let lines: Vec<String> = ranges.iter().map(|(a, b)| format!("{a} {b}")).collect();
    rewrite_atomic(path, &render(&lines))
}

/// Reads a range checkpoint; a missing file is no ranges.
pub fn read_ranges(path: &Path) -> Result<Vec<(i64, i64)>> {
    let Some(text) = read_text(path)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (n, line) in entry_lines(path, &text)? {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = match fields[..] {
            [a, b] => a.parse::<i64>().ok().zip(b.parse::<i64>().ok()),
            _ => None,
        };
        let Some(range) = parsed.filter(|(a, b)| *a >= 0 && a <= b) else {
            bail!(
                "`{}` line {n}: expected `first_offset last_offset`, got `{line}`",
                path.display()
            );
        };
        out.push(range);
    }
    Ok(out)
}

/// The largest checkpoint file read: one line a partition stays far below this for any
/// number of partitions a daemon follows; a larger file is malformed, not memory to fill.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;

/// A checkpoint-sized text file, or `None` when it does not exist.
pub(crate) fn read_text(path: &Path) -> Result<Option<String>> {
    use std::io::Read;
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("failed to read `{}`", path.display())),
    };
    let too_big = || {
        anyhow::anyhow!(
            "`{}` is larger than {MAX_CHECKPOINT_BYTES} bytes: not a checkpoint file",
            path.display()
        )
    };
    if f.metadata().is_ok_and(|m| m.len() > MAX_CHECKPOINT_BYTES) {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    f.take(MAX_CHECKPOINT_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| anyhow::anyhow!("`{}` is not UTF-8 text", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::data_dir::DataDir;

    #[test]
    fn offsets_roundtrip_in_kafka_text_format() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(DataDir::RECOVERY_POINT);
        let mut m = BTreeMap::new();
        m.insert(TopicPartition::new("orders", 1), 977);
        m.insert(TopicPartition::new("my-topic", 0), 1200);
        write_offsets(&p, &m).unwrap();
        assert_eq!(
            fs::read_to_string(&p).unwrap(),
            "0\n2\nmy-topic 0 1200\norders 1 977\n"
        );
        assert_eq!(read_offsets(&p).unwrap(), m);
        assert!(
            !dir.path()
                .join(format!("{}.tmp", DataDir::RECOVERY_POINT))
                .exists()
        );
    }

    #[test]
    fn an_oversized_checkpoint_is_malformed_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(DataDir::RECOVERY_POINT);
        let f = File::create(&p).unwrap();
        f.set_len(MAX_CHECKPOINT_BYTES + 10).unwrap(); // sparse: no disk, no RAM
        let e = read_offsets(&p).unwrap_err().to_string();
        assert!(
            e.contains("larger than") && e.contains(DataDir::RECOVERY_POINT),
            "{e}"
        );
    }

    #[test]
    fn missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_offsets(&dir.path().join("nope")).unwrap().is_empty());
        assert!(read_epochs(&dir.path().join("nope")).unwrap().is_empty());
    }

    #[test]
    fn malformed_files_are_rejected_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(DataDir::REPLICATION_OFFSET);
        for bad in [
            "",
            "1\n0\n",
            "0\n2\nt 0 5\n",
            "0\n1\nt 0\n",
            "0\n1\nt x 5\n",
            "0\n1\nt 0 -5\n",
            "0\nabc\n",
            "0\n2\nt 0 5\nt 0 6\n",
            "0\n1\nt 0 5 9\n",
        ] {
            fs::write(&p, bad).unwrap();
            let e = read_offsets(&p).unwrap_err().to_string();
            assert!(e.contains(DataDir::REPLICATION_OFFSET), "{bad:?}: {e}");
        }
        fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_offsets(&p).is_err());
    }

    #[test]
    fn epochs_roundtrip_and_must_increase() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(DataDir::LEADER_EPOCH);
        write_epochs(&p, &[(0, 0), (3, 120)]).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "0\n2\n0 0\n3 120\n");
        assert_eq!(read_epochs(&p).unwrap(), vec![(0, 0), (3, 120)]);
        fs::write(&p, "0\n2\n3 120\n2 130\n").unwrap();
        assert!(read_epochs(&p).is_err());
    }

    #[test]
    fn ranges_roundtrip_and_reject_reversed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(DataDir::LOST_UPSTREAM);
        assert!(read_ranges(&p).unwrap().is_empty());
        write_ranges(&p, &[(10, 19), (40, 40)]).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "0\n2\n10 19\n40 40\n");
        assert_eq!(read_ranges(&p).unwrap(), vec![(10, 19), (40, 40)]);
        fs::write(&p, "0\n1\n20 10\n").unwrap();
        assert!(
            read_ranges(&p)
                .unwrap_err()
                .to_string()
                .contains(DataDir::LOST_UPSTREAM)
        );
    }

    #[test]
    fn rewrite_atomic_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(dir.path().join("f.tmp"), b"stale half-written").unwrap();
        rewrite_atomic(&p, b"one").unwrap();
        rewrite_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert!(!dir.path().join("f.tmp").exists());
    }

    #[test]
    fn dir_names_split_at_the_last_dash() {
        assert_eq!(
            TopicPartition::parse_dir_name("my-topic-12"),
            Some(TopicPartition::new("my-topic", 12))
        );
        assert_eq!(TopicPartition::parse_dir_name("topic"), None);
        assert_eq!(TopicPartition::parse_dir_name("topic-x"), None);
        assert_eq!(TopicPartition::parse_dir_name("-3"), None);
    }
}
