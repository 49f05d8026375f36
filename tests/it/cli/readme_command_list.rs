//! The README's command list (section "Command line") names exactly the command forms the
//! binary's help gives: every form of every subcommand's own `--help`, with the same options,
//! and no other; and the top-level `--help` (the man page's synopsis) gives the same forms.

use crate::support;
use crate::support::docs;
use std::collections::BTreeSet;
use std::path::Path;

/// A command form: the subcommand and the options it names.
type Form = (String, Vec<String>);

fn forms(lines: &[String]) -> BTreeSet<Form> {
    lines
        .iter()
        .map(|l| (docs::subcommand(l).to_string(), docs::options(l)))
        .collect()
}

fn shown(forms: &BTreeSet<Form>) -> String {
    forms
        .iter()
        .map(|(cmd, opts)| format!("  {cmd} {}\n", opts.join(" ")))
        .collect()
}

#[test]
fn the_readme_command_list_names_every_form_of_every_subcommand() {
    let bin = Path::new(support::bin());
    let top = docs::usage_lines(&docs::help_of(bin, &[]));
    let subcommands: BTreeSet<&str> = top.iter().map(|l| docs::subcommand(l)).collect();
    assert!(
        subcommands.len() >= 9,
        "too few subcommands in --help: {subcommands:?}"
    );

    let mut own = BTreeSet::new();
    for cmd in &subcommands {
        let lines = docs::usage_lines(&docs::help_of(bin, &[cmd]));
        assert!(!lines.is_empty(), "`{cmd} --help` gives no usage line");
        for (c, _) in forms(&lines) {
            assert_eq!(&c, cmd, "`{cmd} --help` shows another command's usage");
        }
        own.extend(forms(&lines));
    }

    let readme = docs::readme();
    let listed: Vec<String> = docs::first_fenced_block(docs::section(&readme, "### Command line"))
        .iter()
        // What follows `#` is a comment for the reader.
        .map(|l| l.split(" #").next().unwrap_or_default().trim().to_string())
        .collect();
    let listed = forms(&listed);

    let missing: BTreeSet<_> = own.difference(&listed).cloned().collect();
    let stale: BTreeSet<_> = listed.difference(&own).cloned().collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "the README's command list differs from the subcommands' --help:\nnot in the README:\n{}\
         in the README but not in any --help:\n{}",
        shown(&missing),
        shown(&stale)
    );
    let top = forms(&top);
    assert_eq!(
        shown(&top),
        shown(&own),
        "the top-level --help (and so the man page's synopsis) and the subcommands' --help \
         differ"
    );
}
