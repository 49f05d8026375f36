//! What `status` shows of the archived topic configs and consumer-group offsets
//! ([`crate::checkpoint::upstream`]): a line per topic and per group, or their JSON.

use super::json_string;
use crate::checkpoint::upstream::{self, GroupOffsets, TopicArchive};
use crate::log::data_dir::DataDir;
use std::collections::BTreeMap;
use std::path::Path;

/// The archived topics and groups of a data dir; a file that does not parse is a note and
/// shows nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstream {
    pub topics: BTreeMap<String, TopicArchive>,
    pub groups: GroupOffsets,
}

pub fn collect(data_dir: &Path, notes: &mut Vec<String>) -> Upstream {
    let mut note = |e: anyhow::Error| notes.push(format!("{e:#}"));
    Upstream {
        topics: upstream::read_topics(&data_dir.join(DataDir::TOPIC_CONFIGS)).unwrap_or_else(|e| {
            note(e);
            BTreeMap::new()
        }),
        groups: upstream::read_groups(&data_dir.join(DataDir::GROUP_OFFSETS)).unwrap_or_else(|e| {
            note(e);
            BTreeMap::new()
        }),
    }
}

/// Offsets named per group line; the rest are counted.
const NAMED_OFFSETS: usize = 8;

pub fn render_text(u: &Upstream) -> String {
    let mut s = String::new();
    for (topic, t) in &u.topics {
        let configs: Vec<String> = t.configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!(
            "topic {topic}: {} partition(s), configs: {} (archived, as of {})\n",
            t.partitions,
            if configs.is_empty() {
                "defaults".to_string()
            } else {
                configs.join(" ")
            },
            crate::logging::format_utc(t.seen_ms)
        ));
    }
    for (group, offsets) in &u.groups {
        let named: Vec<String> = offsets
            .iter()
            .take(NAMED_OFFSETS)
            .map(|(tp, o)| format!("{tp}@{}", o.offset))
            .collect();
        let more = offsets.len().saturating_sub(NAMED_OFFSETS);
        let seen = offsets.values().map(|o| o.seen_ms).max().unwrap_or(0);
        s.push_str(&format!(
            "group {group}: {}{} (archived, as of {})\n",
            named.join(" "),
            if more > 0 {
                format!(" … and {more} more")
            } else {
                String::new()
            },
            crate::logging::format_utc(seen)
        ));
    }
    s
}

/// `"topics": [...], "groups": [...]` of `status --json`.
pub fn render_json(u: &Upstream) -> String {
    let topics: Vec<String> = u
        .topics
        .iter()
        .map(|(topic, t)| {
            let configs: Vec<String> = t
                .configs
                .iter()
                .map(|(k, v)| format!("{}: {}", json_string(k), json_string(v)))
                .collect();
            format!(
                "{{\"topic\": {}, \"partitions\": {}, \"configs\": {{{}}}, \"seen_ms\": {}}}",
                json_string(topic),
                t.partitions,
                configs.join(", "),
                t.seen_ms
            )
        })
        .collect();
    let groups: Vec<String> = u
        .groups
        .iter()
        .map(|(group, offsets)| {
            let offsets: Vec<String> = offsets
                .iter()
                .map(|(tp, o)| {
                    format!(
                        "{{\"topic\": {}, \"partition\": {}, \"offset\": {}, \"leader_epoch\": {}, \"metadata\": {}, \"seen_ms\": {}}}",
                        json_string(&tp.topic),
                        tp.partition,
                        o.offset,
                        o.leader_epoch,
                        o.metadata.as_deref().map_or_else(|| "null".to_string(), json_string),
                        o.seen_ms
                    )
                })
                .collect();
            format!(
                "{{\"group\": {}, \"offsets\": [{}]}}",
                json_string(group),
                offsets.join(", ")
            )
        })
        .collect();
    format!(
        "\"topics\": [{}], \"groups\": [{}]",
        topics.join(", "),
        groups.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::TopicPartition;
    use crate::checkpoint::upstream::GroupOffset;

    #[test]
    fn status_shows_the_archived_topics_and_groups_and_notes_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut topics = BTreeMap::new();
        topics.insert(
            "orders".to_string(),
            TopicArchive {
                partitions: 3,
                configs: [("cleanup.policy".to_string(), "compact".to_string())].into(),
                seen_ms: 1_764_590_400_000,
            },
        );
        upstream::write_topics(&dir.path().join(DataDir::TOPIC_CONFIGS), &topics).unwrap();
        let mut groups: GroupOffsets = BTreeMap::new();
        for p in 0..10 {
            groups
                .entry("billing \"eu\"".to_string())
                .or_default()
                .insert(
                    TopicPartition::new("orders", p),
                    GroupOffset {
                        offset: 100 + i64::from(p),
                        leader_epoch: 2,
                        metadata: (p == 0).then(|| "m".to_string()),
                        seen_ms: 1_764_590_400_000,
                    },
                );
        }
        upstream::write_groups(&dir.path().join(DataDir::GROUP_OFFSETS), &groups).unwrap();
        let mut notes = Vec::new();
        let u = collect(dir.path(), &mut notes);
        assert!(notes.is_empty(), "{notes:?}");
        let text = render_text(&u);
        assert!(
            text.contains("topic orders: 3 partition(s), configs: cleanup.policy=compact"),
            "{text}"
        );
        assert!(
            text.contains("group billing \"eu\": orders-0@100 orders-1@101")
                && text.contains("… and 2 more"),
            "{text}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&format!("{{{}}}", render_json(&u))).unwrap();
        assert_eq!(json["topics"][0]["configs"]["cleanup.policy"], "compact");
        assert_eq!(json["topics"][0]["partitions"], 3);
        assert_eq!(json["groups"][0]["group"], "billing \"eu\"");
        assert_eq!(json["groups"][0]["offsets"][0]["metadata"], "m");
        assert_eq!(
            json["groups"][0]["offsets"][1]["metadata"],
            serde_json::Value::Null
        );
        assert_eq!(json["groups"][0]["offsets"][9]["offset"], 109);

        std::fs::write(dir.path().join(DataDir::GROUP_OFFSETS), "0\n1\nbroken\n").unwrap();
        let mut notes = Vec::new();
        let u = collect(dir.path(), &mut notes);
        assert!(u.groups.is_empty() && u.topics.len() == 1);
        assert!(notes[0].contains("group-offsets-checkpoint"), "{notes:?}");
    }
}
