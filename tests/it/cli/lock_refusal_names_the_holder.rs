//! A second process on a data dir a daemon holds is refused naming the holder's pid: `run`,
//! `repair` and `serve` each exit 1 with `locked by another replica-follower (pid N, …)`,
//! N being the running daemon's, and the daemon goes on.

use crate::support;
use crate::support::run_cli as run;

#[test]
fn a_refused_second_process_names_the_pid_holding_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, cfg, data) = support::daemon_holding_the_lock(dir.path());
    let lock = data.join(".lock");
    let want = format!(
        "error: data dir `{}` is locked by another replica-follower (pid {}, lock file `{}`)",
        data.display(),
        first.pid(),
        lock.display()
    );
    let c = cfg.to_str().unwrap();
    let d = data.to_str().unwrap();
    for args in [
        &["run", "--config", c][..],
        &["repair", "--config", c],
        &["serve", "--data-dir", d, "--listen", "127.0.0.1:0"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, Some(1), "{args:?}: {out}{err}");
        assert!(err.contains(&want), "{args:?}: {want:?} missing in:\n{err}");
    }
    assert!(
        first.is_running(),
        "the holder stopped:\n{}",
        first.log_text()
    );
    // The pid is what the lock file holds, and the refusals left it as it was.
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        format!("{}\n", first.pid())
    );
    assert_eq!(first.stop().code(), Some(0));
    // A lock file whose holder recorded nothing (an older version) is said so, not guessed.
    use fs2::FileExt;
    std::fs::write(&lock, "").unwrap();
    let held = std::fs::File::open(&lock).unwrap();
    held.try_lock_exclusive().unwrap();
    let (code, _, err) = run(&["run", "--config", c]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is locked by another replica-follower (its pid is not recorded, lock file"),
        "{err}"
    );
}
