//! The README's Contents list is its outline: one entry per `##`, `###` and `####` heading (the
//! Contents heading aside), in order, nested by level, each linking to the anchor GitHub gives
//! that heading; and every `](#anchor)` link anywhere in the README reaches a heading.

use crate::support::docs;

/// A heading: its level (number of `#`) and its text.
type Heading = (usize, String);

/// The headings of `text`, outside fenced blocks (where `#` starts a comment).
fn headings(text: &str) -> Vec<Heading> {
    let mut fenced = false;
    let mut out = Vec::new();
    for l in text.lines() {
        fenced ^= l.starts_with("```");
        let hashes = l.len() - l.trim_start_matches('#').len();
        if !fenced && hashes > 0 && l[hashes..].starts_with(' ') {
            out.push((hashes, l[hashes + 1..].to_string()));
        }
    }
    out
}

/// GitHub's anchor for a heading text: lower case, every character but letters, digits,
/// spaces, `-` and `_` dropped (backticks, colons, commas, `?`, brackets), spaces made `-`.
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every heading's anchor, as GitHub numbers repeats (`x`, `x-1`, `x-2`).
fn anchors(heads: &[Heading]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for (_, text) in heads {
        let base = slug(text);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.push(anchor);
    }
    seen
}

/// The Contents entries: (level, text, anchor), the level from the indent (two spaces a
/// level, the top entries being `##` headings).
fn contents(readme: &str) -> Vec<(usize, String, String)> {
    docs::section(readme, "## Contents")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let item = l.trim_start();
            let indent = l.len() - item.len();
            let rest = item
                .strip_prefix("- [")
                .unwrap_or_else(|| panic!("a Contents line that is not `- [text](#anchor)`: {l}"));
            let (text, link) = rest
                .rsplit_once("](#")
                .unwrap_or_else(|| panic!("a Contents entry without an anchor link: {l}"));
            let anchor = link
                .strip_suffix(')')
                .unwrap_or_else(|| panic!("a Contents entry with text after its link: {l}"));
            assert!(indent % 2 == 0, "a Contents line indented by {indent}: {l}");
            (indent / 2 + 2, text.to_string(), anchor.to_string())
        })
        .collect()
}

#[test]
fn the_contents_list_every_heading_in_order_with_its_anchor() {
    let readme = docs::readme();
    let heads = headings(&readme);
    let anchors = anchors(&heads);
    let expected: Vec<(usize, String, String)> = heads
        .iter()
        .zip(&anchors)
        .filter(|((level, text), _)| (2..=4).contains(level) && text != "Contents")
        .map(|((level, text), anchor)| (*level, text.clone(), anchor.clone()))
        .collect();
    assert!(
        expected.len() >= 30,
        "too few headings found: {expected:#?}"
    );
    let listed = contents(&readme);
    let show = |v: &[(usize, String, String)]| -> String {
        v.iter()
            .map(|(level, text, anchor)| format!("  {} {text} (#{anchor})\n", "#".repeat(*level)))
            .collect()
    };
    assert!(
        listed == expected,
        "the README's Contents differ from its headings:\nContents:\n{}headings:\n{}",
        show(&listed),
        show(&expected)
    );
}

#[test]
fn every_anchor_link_in_the_readme_reaches_a_heading() {
    let readme = docs::readme();
    let anchors = anchors(&headings(&readme));
    let broken: Vec<&str> = readme
        .split("](#")
        .skip(1)
        .map(|rest| rest.split(')').next().unwrap_or_default())
        .filter(|a| !anchors.iter().any(|h| h == a))
        .collect();
    assert!(
        broken.is_empty(),
        "README links to anchors no heading has: {broken:?}"
    );
}
