//! What the README and `--help` say, read as the tests that hold the two together need it:
//! a README section, the fenced block in it, and the usage lines of a help text.

use std::path::Path;

pub fn readme() -> String {
    let path = super::manifest_dir().join("README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The text of the README section under the heading line `heading` (`## Name`), up to the
/// next heading of the same or a higher level.
pub fn section<'a>(readme: &'a str, heading: &str) -> &'a str {
    let level = heading.split(' ').next().unwrap_or_default();
    let start = readme
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("README has no heading `{heading}`"));
    let mut lines = readme.lines();
    let offset: usize = lines.by_ref().take(start + 1).map(|l| l.len() + 1).sum();
    let rest = &readme[offset..];
    let mut end = 0;
    // A `#` line inside a fenced block is a comment, not a heading.
    let mut fenced = false;
    for l in rest.lines() {
        fenced ^= l.starts_with("```");
        let hashes = l.len() - l.trim_start_matches('#').len();
        if !fenced && hashes > 0 && hashes <= level.len() && l[hashes..].starts_with(' ') {
            break;
        }
        end += l.len() + 1;
    }
    &rest[..end.min(rest.len())]
}

/// The text of `text` after its line `line`.
pub fn after_line<'a>(text: &'a str, line: &str) -> &'a str {
    let at = text
        .match_indices(line)
        .map(|(i, _)| i)
        .find(|&i| {
            (i == 0 || text[..i].ends_with('\n')) && text[i + line.len()..].starts_with('\n')
        })
        .unwrap_or_else(|| panic!("no line `{line}` in:\n{text}"));
    &text[at + line.len()..]
}

/// The lines of the first ``` fenced block in `text`, as written (an operator copies them
/// as they are).
pub fn first_fenced_block(text: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("```"));
    assert!(lines.next().is_some(), "no fenced block in:\n{text}");
    let block: Vec<String> = lines
        .take_while(|l| !l.starts_with("```"))
        .map(str::to_string)
        .collect();
    assert!(!block.is_empty(), "an empty fenced block in:\n{text}");
    block
}

/// The command lines of a help text: the top-level help's `Usage:` and `or:` lines, or a
/// subcommand's opening lines, each starting `replica-follower `; an indented line right
/// after one is its wrapped rest. The first other line ends them.
pub fn usage_lines(help: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in help.lines() {
        let bare = l
            .trim_start()
            .trim_start_matches("Usage:")
            .trim_start_matches("or:")
            .trim_start();
        if bare.starts_with("replica-follower ") {
            out.push(bare.to_string());
        } else if let (true, Some(last)) = (l.starts_with(' ') && !bare.is_empty(), out.last_mut())
        {
            last.push(' ');
            last.push_str(bare);
        } else if !out.is_empty() {
            break;
        }
    }
    out
}

/// The subcommand of a usage line (`replica-follower serve --config FILE` → `serve`).
pub fn subcommand(usage: &str) -> &str {
    usage.split_whitespace().nth(1).unwrap_or_default()
}

/// The options a usage line names (`--config`, `--json`, …), sorted, each once.
pub fn options(usage: &str) -> Vec<String> {
    let mut opts: Vec<String> = usage
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_string)
        .collect();
    opts.sort();
    opts.dedup();
    opts
}

/// `--help` of the binary at `bin` (with `args` before it): its standard output.
pub fn help_of(bin: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("run {} {args:?} --help: {e}", bin.display()));
    assert!(out.status.success(), "{args:?} --help: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `man ARGS` shows, wide and unpaged; `manpath` replaces the places man-db looks in.
/// Fails naming man-db when `man` is missing, or with man's own words when it fails.
pub fn man(args: &[&std::ffi::OsStr], manpath: Option<&Path>) -> String {
    let mut cmd = std::process::Command::new("man");
    cmd.args(args)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "250")
        .env("LC_ALL", "C.UTF-8");
    if let Some(p) = manpath {
        cmd.env("MANPATH", p);
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`man` is not installed: install Debian's man-db (tests/setup-env.sh does it as root)"
        ),
        Err(e) => panic!("failed to run man {args:?}: {e}"),
    };
    assert!(
        out.status.success(),
        "man {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
