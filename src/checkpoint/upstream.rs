//! What the replica archives of its source cluster beside the partitions, so that a restore
//! can give it back: each followed topic's partition count and topic-level configs, and the
//! committed offsets of the consumer groups `[groups]` includes. Both use the checkpoint frame
//! (version line, count line) and are rewritten with [`super::rewrite_atomic`].
//!
//! ```text
//! topic-configs-checkpoint:   topic partitions seen_ms n key=value ...
//! 0
//! 1
//! orders 3 1764590400000 2 cleanup.policy=compact retention.ms=86400000
//!
//! group-offsets-checkpoint:   group topic partition offset leader_epoch seen_ms metadata
//! 0
//! 2
//! billing orders 0 1200 4 1764590400000 =
//! billing orders 1 977 -1 1764590400000 -
//! ```
//! Group ids, config keys and values, and metadata are written with [`escape`]: `%`, `=`,
//! and whitespace become `%XX`, so every field is one word. A metadata field is `-` when
//! the group committed none (null) and `=` followed by the escaped string otherwise (`=`
//! alone: the empty string). `seen_ms` is when the source cluster last showed the entry:
//! entries stay when the topic or group disappears upstream (the archive keeps what a cluster
//! lost), and a newer answer replaces them.

use super::{TopicPartition, entry_lines, read_text, render, rewrite_atomic};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// One archived topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicArchive {
    pub partitions: i32,
    /// Its topic-level configs (set on the topic, not inherited defaults).
    pub configs: BTreeMap<String, String>,
    pub seen_ms: i64,
}

/// One group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub offset: i64,
    /// -1 when the commit carried none.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub seen_ms: i64,
}

/// Archived groups: group id → partition → offset.
pub type GroupOffsets = BTreeMap<String, BTreeMap<TopicPartition, GroupOffset>>;

/// `s` with `%`, `=`, whitespace and control characters as `%XX` (UTF-8 bytes).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || c == '=' || c.is_whitespace() || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`escape`]; `None` for a malformed escape or bytes that are not UTF-8.
pub fn unescape(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut rest = s.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail.get(..2)?;
            let hex = std::str::from_utf8(hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = tail.get(2..)?;
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// The bytes of a `topic-configs-checkpoint`.
pub fn render_topics(topics: &BTreeMap<String, TopicArchive>) -> Vec<u8> {
    let lines: Vec<String> = topics
        .iter()
        .map(|(topic, t)| {
            let mut line = format!("{topic} {} {} {}", t.partitions, t.seen_ms, t.configs.len());
            for (k, v) in &t.configs {
                line.push_str(&format!(" {}={}", escape(k), escape(v)));
            }
            line
        })
        .collect();
    render(&lines)
}

pub fn write_topics(path: &Path, topics: &BTreeMap<String, TopicArchive>) -> Result<()> {
    rewrite_atomic(path, &render_topics(topics))
}

/// Reads a `topic-configs-checkpoint`; a missing file is empty, a malformed one an error
/// naming the file and line.
pub fn read_topics(path: &Path) -> Result<BTreeMap<String, TopicArchive>> {
    let Some(text) = read_text(path)? else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for (n, line) in entry_lines(path, &text)? {
        let at = || format!("`{}` line {n}", path.display());
        let mut f = line.split(' ');
        let (Some(topic), Some(partitions), Some(seen), Some(count)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            bail!(
                "{}: expected `topic partitions seen_ms n key=value...`, got `{line}`",
                at()
            );
        };
        if !valid_topic(topic) {
            bail!("{}: bad topic name `{topic}`", at());
        }
        let partitions: i32 = number(partitions, 1, &at, "partition count")?;
        let seen_ms: i64 = number(seen, 0, &at, "seen_ms")?;
        let count: usize = number(count, 0, &at, "config count")?;
        let mut configs = BTreeMap::new();
        for kv in f.by_ref() {
            let (k, v) = kv
                .split_once('=')
                .and_then(|(k, v)| Some((unescape(k)?, unescape(v)?)))
                .filter(|(k, _)| !k.is_empty())
                .with_context(|| format!("{}: bad config `{kv}`", at()))?;
            if configs.insert(k, v).is_some() {
                bail!("{}: config `{kv}` appears twice", at());
            }
        }
        if configs.len() != count {
            bail!("{}: says {count} configs, has {}", at(), configs.len());
        }
        let t = TopicArchive {
            partitions,
            configs,
            seen_ms,
        };
        if out.insert(topic.to_string(), t).is_some() {
            bail!("{}: topic `{topic}` appears twice", at());
        }
    }
    Ok(out)
}

/// The bytes of a `group-offsets-checkpoint`.
pub fn render_groups(groups: &GroupOffsets) -> Vec<u8> {
    let lines: Vec<String> = groups
        .iter()
        .flat_map(|(group, offsets)| {
            offsets.iter().map(move |(tp, o)| {
                let metadata = o
                    .metadata
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |m| format!("={}", escape(m)));
                format!(
                    "{} {} {} {} {} {} {metadata}",
                    escape(group),
                    tp.topic,
                    tp.partition,
                    o.offset,
                    o.leader_epoch,
                    o.seen_ms
                )
            })
        })
        .collect();
    render(&lines)
}

pub fn write_groups(path: &Path, groups: &GroupOffsets) -> Result<()> {
    rewrite_atomic(path, &render_groups(groups))
}

/// Reads a `group-offsets-checkpoint`; a missing file is empty, a malformed one an error
/// naming the file and line.
pub fn read_groups(path: &Path) -> Result<GroupOffsets> {
    let Some(text) = read_text(path)? else {
        return Ok(BTreeMap::new());
    };
    let mut out: GroupOffsets = BTreeMap::new();
    for (n, line) in entry_lines(path, &text)? {
        let at = || format!("`{}` line {n}", path.display());
        let fields: Vec<&str> = line.split(' ').collect();
        let [group, topic, partition, offset, epoch, seen, metadata] = fields[..] else {
            bail!(
                "{}: expected `group topic partition offset leader_epoch seen_ms metadata`, got `{line}`",
                at()
            );
        };
        let group = unescape(group)
            .filter(|g| !g.is_empty())
            .with_context(|| format!("{}: bad group id `{group}`", at()))?;
        if !valid_topic(topic) {
            bail!("{}: bad topic name `{topic}`", at());
        }
        let metadata = match metadata {
            "-" => None,
            m => Some(
                m.strip_prefix('=')
                    .and_then(unescape)
                    .with_context(|| format!("{}: bad metadata `{m}`", at()))?,
            ),
        };
        let tp = TopicPartition::new(topic, number(partition, 0, &at, "partition")?);
        let o = GroupOffset {
            offset: number(offset, 0, &at, "offset")?,
            leader_epoch: number(epoch, -1, &at, "leader epoch")?,
            metadata,
            seen_ms: number(seen, 0, &at, "seen_ms")?,
        };
        if out.entry(group).or_default().insert(tp, o).is_some() {
            bail!("{}: the group's partition appears twice", at());
        }
    }
    Ok(out)
}

/// A name Kafka accepts for a topic: 1 to 249 of `[a-zA-Z0-9._-]`.
pub fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `s` as a number of at least `min` that fits `T`, or an error naming `what`.
fn number<T: TryFrom<i64>>(s: &str, min: i64, at: &dyn Fn() -> String, what: &str) -> Result<T> {
    s.parse::<i64>()
        .ok()
        .filter(|v| *v >= min)
        .and_then(|v| T::try_from(v).ok())
        .with_context(|| format!("{}: bad {what} `{s}`", at()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_one_word_and_round_trips() {
        for s in [
            "",
            "plain",
            "a b\tc\nd",
            "100%=x",
            "ümlaut ✓",
            "%41",
            "\u{0}\u{7f}",
        ] {
            let e = escape(s);
            assert!(!e.contains([' ', '\t', '\n', '=']), "{e:?}");
            assert_eq!(unescape(&e).as_deref(), Some(s));
        }
        for bad in ["%", "%4", "%zz", "%FF"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn topics_round_trip_and_malformed_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("topic-configs-checkpoint");
        assert!(read_topics(&p).unwrap().is_empty(), "missing: empty");
        let mut topics = BTreeMap::new();
        topics.insert(
            "orders".to_string(),
            TopicArchive {
                partitions: 3,
                configs: [
                    ("cleanup.policy", "compact,delete"),
                    ("odd key", "a value = with % and spaces"),
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
                seen_ms: 1_764_590_400_000,
            },
        );
        topics.insert(
            "plain".to_string(),
            TopicArchive {
                partitions: 1,
                configs: BTreeMap::new(),
                seen_ms: 5,
            },
        );
        write_topics(&p, &topics).unwrap();
        assert_eq!(read_topics(&p).unwrap(), topics);
        for (text, says) in [
            ("0\n1\norders 3 5\n", "expected `topic partitions"),
            ("0\n1\nor/ders 3 5 0\n", "bad topic name"),
            ("0\n1\norders 0 5 0\n", "bad partition count"),
            ("0\n1\norders 3 5 1\n", "says 1 configs, has 0"),
            ("0\n1\norders 3 5 1 novalue\n", "bad config `novalue`"),
            ("0\n1\norders 3 5 2 a=1 a=2\n", "appears twice"),
            (
                "0\n2\norders 3 5 0\norders 3 5 0\n",
                "topic `orders` appears twice",
            ),
            ("0\n2\norders 3 5 0\n", "count line"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = format!("{:#}", read_topics(&p).unwrap_err());
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(e.contains("topic-configs-checkpoint"), "{e}");
        }
    }

    #[test]
    fn groups_round_trip_null_and_empty_metadata_apart() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("group-offsets-checkpoint");
        let mut groups: GroupOffsets = BTreeMap::new();
        let g = groups.entry("billing team".to_string()).or_default();
        for (partition, metadata) in [(0, None), (1, Some("")), (2, Some("a b=c%"))] {
            g.insert(
                TopicPartition::new("orders", partition),
                GroupOffset {
                    offset: 100 + i64::from(partition),
                    leader_epoch: partition - 1,
                    metadata: metadata.map(str::to_string),
                    seen_ms: 7,
                },
            );
        }
        write_groups(&p, &groups).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("billing%20team orders 0 100 -1 7 -\n"),
            "{text}"
        );
        assert!(
            text.contains("billing%20team orders 1 101 0 7 =\n"),
            "{text}"
        );
        assert_eq!(read_groups(&p).unwrap(), groups);
        for (text, says) in [
            ("0\n1\ng orders 0 1 0 7\n", "expected `group topic"),
            ("0\n1\n%ZZ orders 0 1 0 7 -\n", "bad group id"),
            ("0\n1\ng orders -1 1 0 7 -\n", "bad partition"),
            ("0\n1\ng orders 0 -5 0 7 -\n", "bad offset"),
            ("0\n1\ng orders 0 1 -2 7 -\n", "bad leader epoch"),
            ("0\n1\ng orders 0 1 0 7 x\n", "bad metadata"),
            ("0\n2\ng t 0 1 0 7 -\ng t 0 2 0 7 -\n", "appears twice"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = format!("{:#}", read_groups(&p).unwrap_err());
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
