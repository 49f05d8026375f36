//! The README's install block (section "Install" of the quick start, the fenced block after the
//! `<!-- install-block … -->` line) works on a fresh Debian 12: its lines, read from the README as an operator
//! copies them, are run for real into a temporary root that holds what a fresh Debian 12
//! holds there, and the result is checked: the user and group exist, the binary, man page,
//! documentation, units and configuration are installed with their modes and owners,
//! `check-config` passes as the service user, and the units are enabled.
//!
//! Each line runs as written, with its absolute paths moved under the temporary root. A few
//! commands cannot act on a root that is not `/` as they are; each is translated explicitly,
//! and any other command makes this test fail until it is taught it:
//! - `cargo build --release`: the binary this test run built is copied to
//!   `target/release/replica-follower` instead (same sources; a release build here would take
//!   minutes and test nothing more of the block).
//! - `install -o USER -g GROUP`: the names are looked up in the temporary root's
//!   `/etc/passwd` and `/etc/group` (install itself would ask the host's); a name not there
//!   fails the line, as `install` fails on a real root.
//! - `systemd-sysusers` runs with `--root=`.
//! - `editor FILE`: the test makes the edit the line's comment asks for (the brokers and the
//!   followed topic).
//! - `runuser -u USER -- CMD`: CMD runs with `setpriv` under USER's uid and gid from the
//!   temporary root.
//! - `systemctl daemon-reload` does nothing (`systemctl --root` reads the unit files
//!   directly); `systemctl enable --now UNIT` runs as `systemctl --root= enable UNIT`:
//!   starting a unit needs the running system manager, which a temporary root has not.
//!
//! Runs as root (the block is root's: `install -o root`), as CI does. Needs Debian's
//! `systemd`, `util-linux` (setpriv) and `man-db`.

use crate::support;
use crate::support::docs;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a fresh Debian 12 with systemd holds among the places the block writes to: the
/// directories base-files ships (`/usr/share/doc`, `/var/lib`) or makes in its postinst
/// (`/usr/local/bin`, `/usr/local/share/man`, …), those systemd ships (`/etc/systemd/system`,
/// `/usr/lib/sysusers.d`). No package ships `/etc/sysusers.d` (`dpkg -S` finds none), and
/// nothing makes `/usr/local/share/man/man1` before a page is put there.
const FRESH_DEBIAN_12_DIRS: &[&str] = &[
    "etc",
    "etc/systemd/system",
    "usr/lib/sysusers.d",
    "usr/local/bin",
    "usr/local/sbin",
    "usr/local/share/man",
    "usr/share/doc",
    "var/lib",
];

/// base-passwd installs these as a fresh system's `/etc/passwd` and `/etc/group`.
const BASE_PASSWD: &str = "/usr/share/base-passwd";

/// The line right before the block in the README.
const MARKER: &str = "<!-- install-block: tests/it/cli/install_block.rs runs the lines of this block into a temporary root -->";

/// The brokers and topic the `editor` step writes in.
const BROKERS: &str = "kafka-1.example.net:9092";
const TOPIC: &str = "payments";

struct Install {
    /// The temporary root, `/` of the installed system.
    root: PathBuf,
    /// A copy of the source tree the block runs in (`README.md`, `systemd/`, `target/`).
    tree: PathBuf,
    /// What `check-config` said when the block ran it.
    check_config_said: String,
}

fn fresh_root(root: &Path) {
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in FRESH_DEBIAN_12_DIRS {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for (master, to) in [("passwd.master", "passwd"), ("group.master", "group")] {
        let from = Path::new(BASE_PASSWD).join(master);
        std::fs::copy(&from, root.join("etc").join(to))
            .unwrap_or_else(|e| panic!("{}: {e} (Debian's base-passwd has it)", from.display()));
    }
}

/// The source tree the block runs in: README, systemd/, and the binary at the path
/// `cargo build --release` leaves it.
fn source_tree(tree: &Path) {
    let src = support::manifest_dir();
    std::fs::copy(src.join("README.md"), tree.join("README.md")).unwrap();
    let ok = Command::new("cp")
        .arg("-r")
        .arg(src.join("systemd"))
        .arg(tree)
        .status()
        .unwrap();
    assert!(ok.success(), "copy systemd/");
}

/// `NAME:x:ID:…` lines of the root's `file` (`passwd` or `group`): name → (id, gid).
fn ids(root: &Path, file: &str) -> BTreeMap<String, (u32, u32)> {
    let text = std::fs::read_to_string(root.join("etc").join(file)).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let id = f.get(2)?.parse().ok()?;
            let gid = f.get(3).and_then(|g| g.parse().ok()).unwrap_or(id);
            Some((f.first()?.to_string(), (id, gid)))
        })
        .collect()
}

/// `word`, moved under `root` when it is an absolute path.
fn rooted(root: &Path, word: &str) -> String {
    match word.strip_prefix('/') {
        Some(rest) => root.join(rest).to_string_lossy().into_owned(),
        None => word.to_string(),
    }
}

/// The shell command that does `words` (a README line without its comment) in `root`, or
/// `None` for a line with nothing to do there. Panics on a command it does not know.
fn translate(words: &[&str], root: &Path, tree: &Path) -> Result<Option<String>, String> {
    let all_rooted = |ws: &[&str]| ws.iter().map(|w| rooted(root, w)).collect::<Vec<_>>();
    let join = |ws: Vec<String>| Some(ws.join(" "));
    match words {
        ["cargo", "build", "--release"] => {
            let release = tree.join("target/release");
            std::fs::create_dir_all(&release).unwrap();
            std::fs::copy(support::bin(), release.join("replica-follower")).unwrap();
            Ok(None)
        }
        ["install", rest @ ..] => {
            let mut out = vec!["install".to_string()];
            let mut it = rest.iter();
            while let Some(w) = it.next() {
                match *w {
                    "-o" | "-g" => {
                        let (file, what) = if *w == "-o" {
                            ("passwd", "user")
                        } else {
                            ("group", "group")
                        };
                        let name = it.next().ok_or(format!("{w} without a name"))?;
                        let (id, _) = ids(root, file).get(*name).copied().ok_or(format!(
                            "install: invalid {what} '{name}' (not in the root's /etc/{file})"
                        ))?;
                        out.extend([w.to_string(), id.to_string()]);
                    }
                    _ => out.push(rooted(root, w)),
                }
            }
            Ok(join(out))
        }
        ["systemd-sysusers", rest @ ..] => {
            let mut out = vec![
                "systemd-sysusers".to_string(),
                format!("--root={}", root.display()),
            ];
            out.extend(all_rooted(rest));
            Ok(join(out))
        }
        ["editor", file] => {
            let path = PathBuf::from(rooted(root, file));
            let text = std::fs::read_to_string(&path).map_err(|e| format!("editor: {e}"))?;
            let mut topic_done = false;
            let edited: Vec<String> = text
                .lines()
                .map(|l| {
                    if let Some((dir, rest)) = l
                        .strip_prefix("data_dir = \"")
                        .and_then(|v| v.split_once('"'))
                    {
                        // The configuration names a path of the machine: in the temporary
                        // root it lies under the root, as every path of the block does.
                        format!("data_dir = \"{}\"{rest}", rooted(root, dir))
                    } else if l.starts_with("bootstrap_servers = ") {
                        format!("bootstrap_servers = [\"{BROKERS}\"]")
                    } else if l.starts_with("topic = ") && !topic_done {
                        topic_done = true;
                        format!("topic = \"{TOPIC}\"")
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            assert!(
                topic_done && edited.iter().any(|l| l.contains(BROKERS)),
                "{file} has no bootstrap_servers or [[follow]] topic line to edit"
            );
            std::fs::write(&path, edited.join("\n") + "\n").map_err(|e| e.to_string())?;
            Ok(None)
        }
        ["runuser", "-u", user, "--", cmd @ ..] => {
            let (uid, gid) = ids(root, "passwd").get(*user).copied().ok_or(format!(
                "runuser: user {user} does not exist (not in the root's /etc/passwd)"
            ))?;
            let mut out = vec![
                "setpriv".to_string(),
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_string(),
                "--".to_string(),
            ];
            out.extend(all_rooted(cmd));
            Ok(join(out))
        }
        ["systemctl", "daemon-reload"] => Ok(None),
        ["systemctl", "enable", units @ ..] => {
            let mut out = vec![
                "systemctl".to_string(),
                format!("--root={}", root.display()),
                "enable".to_string(),
            ];
            out.extend(
                units
                    .iter()
                    .filter(|u| **u != "--now")
                    .map(|u| u.to_string()),
            );
            Ok(join(out))
        }
        _ => panic!(
            "the install block has a command this test does not know how to run in a \
             temporary root: `{}`; teach tests/it/cli/install_block.rs what it does",
            words.join(" ")
        ),
    }
}

/// Runs the README's install block into `root`; the first line that fails fails the test.
fn run_block(root: &Path, tree: &Path) -> String {
    let readme = docs::readme();
    let section = docs::section(&readme, "### Install");
    let block = docs::first_fenced_block(docs::after_line(section, MARKER));
    assert!(
        block.len() >= 10,
        "the install block is too short: {block:#?}"
    );
    // The installed binary, not one of the host's, answers `replica-follower`.
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        root.join("usr/local/bin").display()
    );
    let mut said = String::new();
    for (n, line) in block.iter().enumerate() {
        // What follows ` #` is a comment for the reader.
        let command = line.split(" #").next().unwrap_or_default();
        assert!(
            !command.contains(['"', '\'', '\\', '$', '`']),
            "line {}: `{line}`: quoting cannot be moved under a root word by word",
            n + 1
        );
        let words: Vec<&str> = command.split_whitespace().collect();
        let fail = |why: &str| -> ! {
            panic!(
                "line {} of the README's install block fails on a fresh Debian 12:\n  {line}\n{why}",
                n + 1
            )
        };
        let run = match translate(&words, root, tree) {
            Ok(Some(run)) => run,
            Ok(None) => continue,
            Err(why) => fail(&why),
        };
        let out = Command::new("bash")
            .args(["-c", &run])
            .current_dir(tree)
            .env("PATH", &path)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            fail(&format!("ran as `{run}`: {}\n{text}", out.status));
        }
        said.push_str(&text);
    }
    said
}

fn install() -> (tempfile::TempDir, Install) {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        std::fs::metadata(tmp.path()).unwrap().uid(),
        0,
        "the install block is root's (install -o root): run this test as root, as CI does"
    );
    let root = tmp.path().join("root");
    let tree = tmp.path().join("src");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    fresh_root(&root);
    source_tree(&tree);
    let check_config_said = run_block(&root, &tree);
    (
        tmp,
        Install {
            root,
            tree,
            check_config_said,
        },
    )
}

fn mode_owner(path: &Path) -> (u32, u32, u32) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.mode() & 0o7777, m.uid(), m.gid())
}

#[test]
fn the_readme_install_block_installs_a_working_service_on_a_fresh_debian_12() {
    let (_tmp, i) = install();
    let root = &i.root;

    // The user and group, from the sysusers.d file.
    let users = ids(root, "passwd");
    let groups = ids(root, "group");
    let (uid, gid) = *users
        .get("replica-follower")
        .expect("no user replica-follower in the root's /etc/passwd");
    assert_eq!(groups.get("replica-follower").map(|g| g.0), Some(gid));
    assert!(uid > 0 && uid < 1000, "a system user, got uid {uid}");

    // Binary, man page, documentation, sysusers file.
    let bin = root.join("usr/local/bin/replica-follower");
    assert_eq!(mode_owner(&bin), (0o755, 0, 0));
    for (file, mode) in [
        ("usr/local/share/man/man1/replica-follower.1", 0o644),
        ("usr/share/doc/replica-follower/README.md", 0o644),
        ("etc/sysusers.d/replica-follower.conf", 0o644),
    ] {
        assert_eq!(mode_owner(&root.join(file)), (mode, 0, 0), "{file}");
    }
    // `man replica-follower` finds the page where man-db looks (/usr/local/share/man).
    let manpath = root.join("usr/local/share/man");
    let page = docs::man(&["replica-follower".as_ref()], Some(&manpath));
    assert!(
        page.contains("replica-follower serve --config FILE"),
        "man replica-follower shows:\n{page}"
    );

    // The units, each with what it names installed.
    let units = root.join("etc/systemd/system");
    let shipped: Vec<PathBuf> = std::fs::read_dir(i.tree.join("systemd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "service" || e == "timer")
        })
        .collect();
    assert!(shipped.len() >= 6);
    for unit in &shipped {
        let name = unit.file_name().unwrap();
        let installed = units.join(name);
        assert_eq!(mode_owner(&installed), (0o644, 0, 0), "{name:?}");
        let body = std::fs::read_to_string(&installed).unwrap();
        for l in body.lines() {
            let named = l
                .strip_prefix("ExecStart=")
                .and_then(|c| c.split_whitespace().next())
                .or_else(|| l.strip_prefix("Documentation=file://"));
            if let Some(path) = named {
                assert!(
                    Path::new(&rooted(root, path)).exists(),
                    "{name:?}: `{l}` names what the block did not install"
                );
            }
        }
    }

    // The configuration: root's, readable by the group only; the edited file passes
    // check-config as the service user.
    let conf_dir = root.join("etc/replica-follower");
    assert_eq!(mode_owner(&conf_dir), (0o750, 0, gid));
    assert_eq!(mode_owner(&conf_dir.join("follower.toml")), (0o640, 0, gid));
    let conf = std::fs::read_to_string(conf_dir.join("follower.toml")).unwrap();
    assert!(conf.contains(BROKERS) && conf.contains(TOPIC));
    assert!(
        i.check_config_said.contains("follower.toml: ok (2 topics"),
        "check-config said: {}",
        i.check_config_said
    );

    // Enabled: the [Install] symlinks systemctl makes.
    for (wants, unit) in [
        ("multi-user.target.wants", "replica-follower.service"),
        ("timers.target.wants", "replica-follower-verify.timer"),
    ] {
        let link = units.join(wants).join(unit);
        let target = std::fs::read_link(&link)
            .unwrap_or_else(|e| panic!("{unit} is not enabled ({}: {e})", link.display()));
        assert_eq!(
            target,
            Path::new("/etc/systemd/system").join(unit),
            "{}",
            link.display()
        );
    }
}
