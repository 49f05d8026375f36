//! `check-config` tries writing where `run` will write: a data dir on a read-only file system
//! (and one still to be created in a read-only directory) exits 1 naming the key, the
//! directory and `Read-only file system`, as `run` itself does; a writable one says so.
//!
//! The read-only file system is a tmpfs mounted read-only in a private mount namespace
//! (`unshare -m`), which needs root, as CI has.

use crate::support;
use std::path::Path;
use std::process::Command;

/// Runs the binary with `args` in a private mount namespace where `ro` is a read-only tmpfs:
/// (exit code, stdout, stderr). Panics, saying what is missing, when that cannot be made.
fn run_on_read_only(ro: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c"])
        .arg(
            "mount -t tmpfs -o ro tmpfs \"$0\" || { echo 'NO-RO-MOUNT' >&2; exit 99; }; \
             touch \"$0/probe\" 2>/dev/null && { echo 'NOT-READ-ONLY' >&2; exit 99; }; \
             exec \"$@\"",
        )
        .arg(ro)
        .arg(support::bin())
        .args(args)
        .output()
        .expect("this test needs `unshare` (util-linux) to mount a read-only tmpfs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains("NO-RO-MOUNT") && !err.contains("NOT-READ-ONLY"),
        "this test needs root and `unshare -m` + `mount -t tmpfs -o ro` to make a read-only file system: {err}"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

#[test]
fn a_data_dir_on_a_read_only_file_system_fails_check_config() {
    let tmp = tempfile::tempdir().unwrap();
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let config = |name: &str, data_dir: &Path| {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        support::Config::new(data_dir, "127.0.0.1:1")
            .follow("t")
            .write(&dir)
    };
    // The data dir is the read-only mount itself.
    let cfg = config("existing", &ro);
    let c = cfg.to_str().unwrap();
    let (code, out, err) = run_on_read_only(&ro, &["check-config", "--config", c]);
    assert_eq!(code, Some(1), "{out}{err}");
    let want = format!(
        "error: {c}: key `data_dir`: data dir `{}` is not writable: Read-only file system",
        ro.display()
    );
    assert!(err.contains(&want), "{want:?} missing in:\n{err}");
    assert!(out.is_empty(), "{out}");
    // `run` fails there the same way (exit 1), which is what the check foretells.
    let (code, _, err) = run_on_read_only(&ro, &["run", "--config", c]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("Read-only file system"), "{err}");

    // The data dir does not exist yet and would be created in the read-only directory.
    let below = ro.join("replica");
    let cfg = config("to-create", &below);
    let c = cfg.to_str().unwrap();
    let (code, out, err) = run_on_read_only(&ro, &["check-config", "--config", c]);
    assert_eq!(code, Some(1), "{out}{err}");
    let want = format!(
        "error: {c}: key `data_dir`: data dir `{}` cannot be created: `{}` is not writable: Read-only file system",
        below.display(),
        ro.display()
    );
    assert!(err.contains(&want), "{want:?} missing in:\n{err}");

    // Outside the namespace the same directory is writable: ok, and nothing is left behind.
    let (code, out, err) = support::run_cli(&["check-config", "--config", c]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!(
            "data dir `{}` (to be created in `{}`) writable by this user",
            below.display(),
            ro.display()
        )),
        "{out}"
    );
    assert!(!below.exists(), "check-config created the data dir");
    assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 0, "left a file");
}
