//! The shipped man page, `systemd/replica-follower.1`, is what `help2man` makes of this
//! binary's `--help` and `--version` (so it cannot drift from them), and `man` renders it with
//! every subcommand in its synopsis and in its list of commands.
//!
//! Needs `help2man` and `man` (Debian's `help2man` and `man-db`, which tests/setup-env.sh
//! installs when missing); without them these tests fail, saying so.

use crate::support;
use crate::support::docs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The NAME line of the page; help2man takes the rest from `--help` and `--version`.
const NAME: &str = "keeps an exact, crash-safe local replica of Kafka topic-partitions";

fn shipped_page() -> PathBuf {
    support::manifest_dir().join("systemd/replica-follower.1")
}

fn tool(cmd: &mut Command, package: &str) -> Output {
    match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`{cmd:?}` cannot run: install Debian's {package} (tests/setup-env.sh does it as root)"
        ),
        Err(e) => panic!("failed to run `{cmd:?}`: {e}"),
    }
}

/// The page help2man makes of `bin` now.
fn help2man(bin: &Path) -> String {
    let out = tool(
        Command::new("help2man")
            .args(["--no-info", "--name", NAME])
            .arg(bin),
        "help2man",
    );
    assert!(
        out.status.success(),
        "help2man {}: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The page without what changes with the day it is made and the help2man release: the
/// month in `.TH` and the generator comment.
fn without_date(page: &str) -> String {
    page.lines()
        .filter(|l| !l.starts_with(".\\\""))
        .map(|l| match l.strip_prefix(".TH ") {
            Some(th) => {
                let fields: Vec<&str> = th.split('"').collect();
                // .TH NAME "1" "Month Year" "source" "manual": drop the date field.
                fields
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != 3)
                    .map(|(_, f)| *f)
                    .collect::<Vec<_>>()
                    .join("\"")
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_shipped_man_page_is_help2man_of_the_current_help() {
    let fresh = help2man(Path::new(support::bin()));
    let fresh_copy = support::manifest_dir().join("target/replica-follower.1");
    std::fs::write(&fresh_copy, &fresh).unwrap();
    let shipped = std::fs::read_to_string(shipped_page()).unwrap_or_else(|e| {
        panic!(
            "{} cannot be read ({e}); the page of this build is in {}",
            shipped_page().display(),
            fresh_copy.display()
        )
    });
    assert!(
        without_date(&shipped) == without_date(&fresh),
        "{} is not what help2man makes of this build's --help: `cp {} {}` after checking the \
         difference",
        shipped_page().display(),
        fresh_copy.display(),
        shipped_page().display()
    );
}

#[test]
fn man_shows_every_subcommand_of_the_help() {
    let shown = docs::man(&["-l".as_ref(), shipped_page().as_os_str()], None);
    let synopsis = between(&shown, "SYNOPSIS", "DESCRIPTION");
    let commands = between(&shown, "Commands:", "Exit codes:");

    let help = docs::help_of(Path::new(support::bin()), &[]);
    let usages = docs::usage_lines(&help);
    assert!(usages.len() >= 9, "too few usage lines in --help:\n{help}");
    for usage in &usages {
        let cmd = docs::subcommand(usage);
        let first_words = usage
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            synopsis.contains(&first_words),
            "the page's SYNOPSIS lacks `{first_words}`:\n{synopsis}"
        );
        assert!(
            commands
                .lines()
                .any(|l| l.split_whitespace().next() == Some(cmd)),
            "the page's list of commands lacks `{cmd}`:\n{commands}"
        );
        // Each listed command has help of its own, not the top-level text.
        let own = docs::help_of(Path::new(support::bin()), &[cmd]);
        assert_ne!(own, help, "`{cmd} --help` shows the top-level help");
    }
    assert!(
        usages.iter().any(|u| docs::subcommand(u) == "serve")
            && usages.iter().any(|u| u.contains("serve --config FILE")),
        "--help does not name `serve --config FILE`:\n{help}"
    );
    let version = format!("replica-follower {}", env!("CARGO_PKG_VERSION"));
    assert!(
        shown.contains(&version),
        "the page does not show `{version}`"
    );
}

/// The text of `shown` from `from` to `to`.
fn between<'a>(shown: &'a str, from: &str, to: &str) -> &'a str {
    let start = shown
        .find(from)
        .unwrap_or_else(|| panic!("the page shows no `{from}`:\n{shown}"));
    let rest = &shown[start..];
    let end = rest
        .find(to)
        .unwrap_or_else(|| panic!("the page shows no `{to}` after `{from}`:\n{shown}"));
    &rest[..end]
}
