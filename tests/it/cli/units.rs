//! The shipped systemd units, judged by systemd itself: `systemd-analyze verify` accepts every
//! unit and timer without a warning (a misspelt directive is a warning, and the control test
//! shows this check sees one), `systemd-analyze security --offline=true` scores every service
//! at an exposure of 2.5 or lower, the sysusers.d file creates the user the units run as, and
//! the units keep what the issue asks of them (no ExecStartPre, reload by SIGHUP, UMask=0027,
//! one data dir per template instance, a read-only verify).
//!
//! Needs `systemd-analyze` and `systemd-sysusers` (Debian's `systemd`, which tests/setup-env.sh
//! installs when missing); without them these tests fail, saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where the units say the binary is installed.
const INSTALLED_BIN: &str = "/usr/local/bin/replica-follower";
/// The highest exposure `systemd-analyze security` may give a service unit.
const MAX_EXPOSURE: f64 = 2.5;

fn systemd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd")
}

/// Every unit file shipped in systemd/ (services and timers), sorted.
fn shipped_units() -> Vec<PathBuf> {
    let mut units: Vec<PathBuf> = std::fs::read_dir(systemd_dir())
        .expect("list systemd/")
        .map(|e| e.expect("read systemd/").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "service" || e == "timer")
        })
        .collect();
    units.sort();
    assert!(
        units.len() >= 6,
        "expected the service, template, verify units and timers in systemd/, found {units:?}"
    );
    units
}

fn services() -> Vec<PathBuf> {
    shipped_units()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect()
}

fn name(unit: &Path) -> String {
    unit.file_name().unwrap().to_string_lossy().into_owned()
}

/// Runs a systemd tool, failing the test with a clear message when it is not installed.
fn systemd_tool(tool: &str, args: &[&std::ffi::OsStr]) -> Output {
    match Command::new(tool).args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{tool}` is not installed, so the systemd units cannot be checked: install systemd \
             (`apt-get install -y systemd`; tests/setup-env.sh does it when run as root)"
        ),
        Err(e) => panic!("failed to run `{tool}`: {e}"),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The units copied into `dir` with ExecStart= pointing at the binary this build made:
/// `systemd-analyze verify` insists that every command exists and is executable.
fn units_with_built_binary(dir: &Path) -> Vec<PathBuf> {
    shipped_units()
        .iter()
        .map(|unit| {
            let body = std::fs::read_to_string(unit).expect("read unit");
            let to = dir.join(unit.file_name().unwrap());
            std::fs::write(
                &to,
                body.replace(INSTALLED_BIN, env!("CARGO_BIN_EXE_replica-follower")),
            )
            .expect("write unit copy");
            to
        })
        .collect()
}

/// `systemd-analyze verify` on `units` together (so that timers find their services):
/// the exit status and every stderr line that speaks of one of them.
fn analyze_verify(units: &[PathBuf]) -> (bool, Vec<String>) {
    let mut args = vec![std::ffi::OsStr::new("verify")];
    args.extend(units.iter().map(|u| u.as_os_str()));
    let out = systemd_tool("systemd-analyze", &args);
    let stderr = text(&out.stderr);
    // Every unit here, its copy's path and the binary are named replica-follower*; lines
    // about other units (the host's own) are not this test's business.
    let ours: Vec<String> = stderr
        .lines()
        .filter(|l| l.contains("replica-follower"))
        .map(str::to_string)
        .collect();
    eprintln!("systemd-analyze verify: {}\n{stderr}", out.status);
    (out.status.success(), ours)
}

#[test]
fn every_shipped_unit_passes_systemd_analyze_verify_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let units = units_with_built_binary(dir.path());
    let (ok, ours) = analyze_verify(&units);
    assert!(ok, "systemd-analyze verify failed: {ours:#?}");
    assert!(ours.is_empty(), "systemd-analyze verify warned: {ours:#?}");
}

#[test]
fn systemd_analyze_verify_catches_a_misspelt_directive() {
    // The control for the test above: the same check on a unit with a typo must complain,
    // or a clean result would prove nothing.
    let dir = tempfile::tempdir().unwrap();
    let units = units_with_built_binary(dir.path());
    let main = dir.path().join("replica-follower.service");
    let body = std::fs::read_to_string(&main).unwrap();
    assert!(body.contains("\nUMask=0027\n"));
    std::fs::write(&main, body.replace("\nUMask=0027\n", "\nUMaks=0027\n")).unwrap();
    let (_, ours) = analyze_verify(&units);
    assert!(
        ours.iter().any(|l| l.contains("UMaks")),
        "a misspelt directive went unnoticed: {ours:#?}"
    );
}

/// The overall exposure `systemd-analyze security --offline=true` gives `unit`.
fn exposure(unit: &Path) -> f64 {
    let out = systemd_tool(
        "systemd-analyze",
        &[
            "security".as_ref(),
            "--offline=true".as_ref(),
            unit.as_os_str(),
        ],
    );
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("Overall exposure level for"))
        .unwrap_or_else(|| {
            panic!(
                "no overall exposure for {} in:\n{stdout}\n{}",
                unit.display(),
                text(&out.stderr)
            )
        });
    let score = line
        .rsplit(':')
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the score in {line:?}"));
    eprintln!("{line}");
    score
}

#[test]
fn every_service_unit_scores_an_exposure_of_at_most_2_5() {
    let scores: Vec<(String, f64)> = services().iter().map(|u| (name(u), exposure(u))).collect();
    let exposed: Vec<_> = scores.iter().filter(|(_, s)| *s > MAX_EXPOSURE).collect();
    assert!(
        exposed.is_empty(),
        "systemd-analyze security scores above {MAX_EXPOSURE}: {exposed:?} (all: {scores:?})"
    );
}

/// The values of `key=` in `unit`, in order.
fn values(unit: &Path, key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    std::fs::read_to_string(unit)
        .expect("read unit")
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

fn value(unit: &Path, key: &str) -> String {
    let v = values(unit, key);
    assert_eq!(
        v.len(),
        1,
        "{}: one {key}= expected, found {v:?}",
        name(unit)
    );
    v[0].clone()
}

#[test]
fn the_daemon_units_reload_by_sighup_and_validate_their_config_themselves() {
    for unit in ["replica-follower.service", "replica-follower@.service"] {
        let unit = systemd_dir().join(unit);
        assert!(values(&unit, "ExecStartPre").is_empty(), "{}", name(&unit));
        assert_eq!(value(&unit, "Type"), "notify");
        assert_eq!(value(&unit, "ExecReload"), "/bin/kill -HUP $MAINPID");
        assert_eq!(value(&unit, "WatchdogSec"), "60");
        assert_eq!(value(&unit, "Restart"), "on-failure");
        assert_eq!(value(&unit, "RestartPreventExitStatus"), "2");
        assert_eq!(value(&unit, "LimitNOFILE"), "65536");
        assert_eq!(value(&unit, "UMask"), "0027");
        assert!(!values(&unit, "TimeoutStopSec").is_empty());
    }
}

#[test]
fn each_template_instance_has_its_own_config_and_data_dir() {
    let plain = systemd_dir().join("replica-follower.service");
    let template = systemd_dir().join("replica-follower@.service");
    assert_eq!(
        value(&plain, "ExecStart"),
        format!("{INSTALLED_BIN} run --config /etc/replica-follower/follower.toml")
    );
    assert_eq!(
        value(&template, "ExecStart"),
        format!("{INSTALLED_BIN} run --config /etc/replica-follower/%i.toml")
    );
    assert_eq!(value(&plain, "StateDirectory"), "replica-follower");
    // Siblings, not nested: an instance dir such as `dc-2` inside another data dir would
    // read as partition 2 of a topic `dc`.
    assert_eq!(value(&template, "StateDirectory"), "replica-follower-%i");

    // The example config writes where the plain unit lets it.
    let example = std::fs::read_to_string(systemd_dir().join("follower.toml.example")).unwrap();
    assert!(
        example
            .lines()
            .any(|l| l.starts_with("data_dir = \"/var/lib/replica-follower\"")),
        "follower.toml.example's data_dir is not the unit's StateDirectory"
    );
}

#[test]
fn the_verify_units_check_the_daemons_data_read_only_and_the_timers_start_them() {
    for (unit, config) in [
        ("replica-follower-verify.service", "follower.toml"),
        ("replica-follower-verify@.service", "%i.toml"),
    ] {
        let unit = systemd_dir().join(unit);
        assert_eq!(value(&unit, "Type"), "oneshot");
        assert_eq!(
            value(&unit, "ExecStart"),
            format!("{INSTALLED_BIN} verify --config /etc/replica-follower/{config}")
        );
        assert_eq!(value(&unit, "ProtectSystem"), "strict");
        for writable in [
            "StateDirectory",
            "ReadWritePaths",
            "LogsDirectory",
            "CacheDirectory",
        ] {
            assert!(
                values(&unit, writable).is_empty(),
                "{}: {writable}=",
                name(&unit)
            );
        }
        // The same user as the daemon: under ProtectProc=invisible only its own UID's
        // processes are visible, and verify looks for the daemon's.
        assert_eq!(value(&unit, "User"), "replica-follower");
    }
    for timer in [
        "replica-follower-verify.timer",
        "replica-follower-verify@.timer",
    ] {
        let timer = systemd_dir().join(timer);
        assert!(!values(&timer, "OnCalendar").is_empty());
        assert_eq!(value(&timer, "Persistent"), "true");
        assert!(
            values(&timer, "Unit").is_empty(),
            "starts the service of its own name"
        );
    }
}

#[test]
fn the_sysusers_file_creates_the_user_every_unit_runs_as() {
    let conf = systemd_dir().join("sysusers.d/replica-follower.conf");
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("etc")).unwrap();
    let mut root_arg = std::ffi::OsString::from("--root=");
    root_arg.push(root.path());
    let out = systemd_tool(
        "systemd-sysusers",
        &[root_arg.as_os_str(), conf.as_os_str()],
    );
    assert!(
        out.status.success(),
        "systemd-sysusers {}: {}",
        conf.display(),
        text(&out.stderr)
    );
    let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).unwrap();
    let group = std::fs::read_to_string(root.path().join("etc/group")).unwrap();
    for unit in services() {
        let user = value(&unit, "User");
        assert!(
            passwd.lines().any(|l| l.starts_with(&format!("{user}:"))),
            "{}: User={user} is not created by {}: {passwd}",
            name(&unit),
            conf.display()
        );
        let group_name = value(&unit, "Group");
        assert!(
            group
                .lines()
                .any(|l| l.starts_with(&format!("{group_name}:")))
        );
        assert!(values(&unit, "DynamicUser").is_empty(), "{}", name(&unit));
    }
}
