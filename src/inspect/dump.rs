//! `replica-follower dump`: prints the batches of a partition over an offset range, and
//! their records: always those of uncompressed v2 batches, and with `--records` those of
//! compressed batches too, decompressed within [`MAX_DECOMPRESSED`].
//!
//! A batch is shown when it holds an offset of `from..=to`; a record when its offset is in
//! that range. `count` bounds what is shown: records with `--records`, batches without.

use crate::checkpoint::TopicPartition;
use crate::log::format::segment;
use crate::log::format::segment_reader::SegmentReader;
use crate::log::partition::list_segment_bases;
use crate::record::SetEnd;
use crate::record::batch::BatchHeader;
use crate::record::compression::MAX_DECOMPRESSED;
use crate::record::records::{
    ControlType, RecordIter, RecordRef, base_timestamp, control_marker, control_record,
    records_block,
};
use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::path::Path;

fn show(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "null".to_string(),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => {
                let mut out: String = s.chars().take(120).flat_map(char::escape_default).collect();
                if s.chars().count() > 120 {
                    out.push('…');
                }
                format!("\"{out}\"")
            }
            Err(_) => {
                let mut out: String = b.iter().take(60).map(|x| format!("{x:02x}")).collect();
                if b.len() > 60 {
                    out.push('…');
                }
                format!("0x{out} ({} bytes)", b.len())
            }
        },
    }
}

/// What to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpRange {
    /// First offset shown.
    pub from: i64,
    /// Last offset shown (inclusive).
    pub to: i64,
    /// At most this many records (`records`) or batches (otherwise).
    pub count: u64,
    /// Decompress compressed batches to show their records.
    pub records: bool,
}

impl Default for DumpRange {
    fn default() -> Self {
        DumpRange {
            from: 0,
            to: i64::MAX,
            count: u64::MAX,
            records: false,
        }
    }
}

/// What a dump saw: batches shown, and how many of them (or tails) were damaged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DumpSummary {
    pub batches: usize,
    pub records: u64,
    pub damaged: usize,
    /// Batches whose CRC is good but whose records cannot be decompressed or decoded.
    pub unreadable: usize,
    /// Offset after the last whole batch seen (the log end when the dump read to the end).
    pub log_end: Option<i64>,
}

/// `ABORT (coordinator epoch N)`, `COMMIT (…)` or `type-N`, `word` after the type.
fn marker_text((kind, epoch): (ControlType, Option<i32>), word: &str) -> String {
    let epoch = epoch.map_or_else(|| "?".into(), |e| e.to_string());
    match kind {
        ControlType::Abort => format!("ABORT{word} (coordinator epoch {epoch})"),
        ControlType::Commit => format!("COMMIT{word} (coordinator epoch {epoch})"),
        ControlType::Other(t) => format!("type-{t}{word}"),
    }
}

fn batch_line(h: &BatchHeader, pos: u64, marker: &str, crc_ok: bool) -> String {
    format!(
        "batch offsets={}..{} position={pos} size={} magic={} epoch={} codec={} records={} max_timestamp={} timestamp_type={} transactional={} control={} producer_id={} producer_epoch={} base_sequence={}{marker} crc={}",
        h.base_offset,
        h.last_offset,
        h.size_in_bytes,
        h.magic,
        h.partition_leader_epoch,
        h.compression(),
        h.records_count,
        h.max_timestamp,
        h.timestamp_type(),
        h.is_transactional(),
        h.is_control(),
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        if crc_ok { "ok" } else { "BAD" }
    )
}

/// A record's line; a control batch's records are shown as the markers they are.
fn record_line(r: &RecordRef<'_>, control: bool) -> String {
    if let Some(m) = control.then(|| control_record(r)).flatten() {
        return format!(
            "  offset={} timestamp={} {}",
            r.offset,
            r.timestamp,
            marker_text(m, " marker")
        );
    }
    let headers: Vec<String> = r
        .headers
        .iter()
        .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), show(*v)))
        .collect();
    format!(
        "  offset={} timestamp={} key={} value={} headers=[{}]",
        r.offset,
        r.timestamp,
        show(r.key),
        show(r.value),
        headers.join(", ")
    )
}

pub fn dump(
    data_dir: &Path,
    tp: &TopicPartition,
    range: DumpRange,
    out: &mut impl Write,
) -> Result<DumpSummary> {
    let mut summary = DumpSummary::default();
    let dir = super::partition_dir(data_dir, tp)?.path;
    let DumpRange {
        from,
        to,
        count,
        records,
    } = range;
    let shown_so_far = |s: &DumpSummary| {
        if records { s.records } else { s.batches as u64 }
    };
    let bases = list_segment_bases(&dir)?;
    // Start at the last segment whose base is ≤ from.
    let first = bases.iter().rposition(|b| *b <= from).unwrap_or(0);
    for base in bases.iter().skip(first) {
        if *base > to || shown_so_far(&summary) >= count {
            break;
        }
        let path = dir.join(segment::file_name(*base, "log"));
        let file =
            File::open(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
        let mut reader = SegmentReader::from_file(file, &path)?;
        // Written before the segment's first line: a segment with nothing to show (all
        // below `from`, or `from` past the log end) prints no bare header.
        let header = format!("# segment {}", path.display());
        let mut announced = false;
        let mut announce = |out: &mut dyn Write| -> std::io::Result<()> {
            if !std::mem::replace(&mut announced, true) {
                writeln!(out, "{header}")?;
            }
            Ok(())
        };
        while let Some((h, pos)) = reader.next_batch()? {
            summary.log_end = Some(h.last_offset + 1);
            if h.last_offset < from {
                continue;
            }
            if h.base_offset > to || shown_so_far(&summary) >= count {
                out.flush()?;
                return Ok(summary);
            }
            summary.batches += 1;
            // Only the batches whose records are shown are held whole; the others stream
            // through the CRC check.
            let shown = h.magic == 2 && (records || h.attributes & 0x07 == 0);
            let (crc, b) = reader.checked_batch(shown)?;
            if crc.is_err() {
                summary.damaged += 1;
            }
            let marker = control_marker(&h, b)
                .map_or(String::new(), |m| format!(" marker={}", marker_text(m, "")));
            announce(out)?;
            writeln!(out, "{}", batch_line(&h, pos, &marker, crc.is_ok()))?;
            if !shown || crc.is_err() {
                continue;
            }
            let cannot = |what: &str, e: &dyn std::fmt::Display| {
                format!(
                    "  cannot {what} the records of batch {}..{} at byte {pos} of `{}`: {e}",
                    h.base_offset,
                    h.last_offset,
                    path.display()
                )
            };
            let block = match records_block(&h, b, MAX_DECOMPRESSED) {
                Ok(block) => block,
                Err(e) => {
                    summary.unreadable += 1;
                    writeln!(out, "{}", cannot("decompress", &e))?;
                    continue;
                }
            };
            for r in RecordIter::new(&h, base_timestamp(b), &block) {
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        summary.unreadable += 1;
                        writeln!(out, "{}", cannot("decode", &e))?;
                        break;
                    }
                };
                if r.offset < from || r.offset > to {
                    continue;
                }
                if records && summary.records >= count {
                    break;
                }
                summary.records += 1;
                writeln!(out, "{}", record_line(&r, h.is_control()))?;
            }
        }
        match reader.end() {
            Some(SetEnd::Partial { bytes }) => {
                summary.damaged += 1;
                announce(out)?;
                writeln!(out, "# partial batch of {bytes} bytes at the end")?
            }
            Some(SetEnd::Corrupt { position, reason }) => {
                summary.damaged += 1;
                announce(out)?;
                writeln!(out, "# corrupt at byte {position}: {reason}")?
            }
            _ => {}
        }
    }
    out.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::records::tests::recompressed;
    use crate::record::records::{NewRecord, build_v2_batch};

    fn batch(base: i64, n: i64, codec: i16, extra: i16) -> Vec<u8> {
        let values: Vec<String> = (0..n).map(|i| format!("value-{}", base + i)).collect();
        let recs: Vec<NewRecord<'_>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| NewRecord {
                key: Some(b"k"),
                value: Some(v.as_bytes()),
                timestamp: 1_000 + base + i as i64,
            })
            .collect();
        recompressed(&build_v2_batch(base, 0, &recs), codec, extra)
    }

    /// An ABORT marker at `offset`, coordinator epoch 7.
    fn abort(offset: i64) -> Vec<u8> {
        let key = [0u8, 0, 0, 0];
        let value = [0u8, 0, 0, 0, 0, 7];
        let rec = NewRecord {
            key: Some(&key),
            value: Some(&value),
            timestamp: 5,
        };
        recompressed(&build_v2_batch(offset, 0, &[rec]), 0, 0x30)
    }

    fn run(log: &[u8], range: DumpRange) -> (DumpSummary, String) {
        let dir = tempfile::tempdir().unwrap();
        let pdir = dir.path().join("t-0");
        std::fs::create_dir(&pdir).unwrap();
        std::fs::write(pdir.join(segment::file_name(0, "log")), log).unwrap();
        let mut out = Vec::new();
        let s = dump(dir.path(), &TopicPartition::new("t", 0), range, &mut out).unwrap();
        (s, String::from_utf8(out).unwrap())
    }

    fn offsets_shown(out: &str) -> Vec<i64> {
        out.lines()
            .filter_map(|l| l.strip_prefix("  offset="))
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn records_of_every_codec_are_shown_with_markers_and_ranges() {
        let log = [
            batch(0, 3, 0, 0),
            batch(3, 3, 1, 0),
            batch(6, 3, 2, 0x08),
            batch(9, 3, 3, 0),
            batch(12, 3, 4, 0),
            abort(15),
        ]
        .concat();
        let all = DumpRange {
            records: true,
            ..DumpRange::default()
        };
        let (s, out) = run(&log, all);
        assert_eq!(
            (s.batches, s.records, s.damaged, s.unreadable),
            (6, 16, 0, 0)
        );
        assert_eq!(offsets_shown(&out), (0..16).collect::<Vec<_>>(), "{out}");
        assert!(
            out.contains("  offset=4 timestamp=1004 key=\"k\" value=\"value-4\" headers=[]"),
            "{out}"
        );
        // LogAppendTime: every record shows the batch's max timestamp.
        assert!(out.contains("  offset=6 timestamp=1008 "), "{out}");
        assert!(
            out.contains("codec=snappy records=3 max_timestamp=1008 timestamp_type=LogAppendTime"),
            "{out}"
        );
        assert!(
            out.contains("  offset=15 timestamp=5 ABORT marker (coordinator epoch 7)"),
            "{out}"
        );
        assert!(
            out.contains(" marker=ABORT (coordinator epoch 7) crc=ok"),
            "{out}"
        );

        // Without --records only uncompressed batches show their records.
        let (s, out) = run(&log, DumpRange::default());
        assert_eq!((s.batches, s.records), (6, 4));
        assert_eq!(offsets_shown(&out), [0, 1, 2, 15]);

        // --from/--to cut inside batches; --count counts records with --records …
        let (_, out) = run(
            &log,
            DumpRange {
                from: 4,
                to: 10,
                ..all
            },
        );
        assert_eq!(offsets_shown(&out), (4..=10).collect::<Vec<_>>(), "{out}");
        assert_eq!(out.lines().filter(|l| l.starts_with("batch ")).count(), 3);
        let (s, out) = run(
            &log,
            DumpRange {
                from: 4,
                count: 4,
                ..all
            },
        );
        assert_eq!(offsets_shown(&out), [4, 5, 6, 7], "{out}");
        assert_eq!(s.batches, 2);
        // … and batches without.
        let (s, out) = run(
            &log,
            DumpRange {
                from: 4,
                count: 2,
                ..DumpRange::default()
            },
        );
        assert_eq!(s.batches, 2);
        assert!(out.contains("batch offsets=6..8"), "{out}");
        assert!(!out.contains("batch offsets=9..11"), "{out}");
    }

    #[test]
    fn a_batch_that_cannot_be_decompressed_is_named_and_counted() {
        // A gzip batch whose records block is not gzip, with a valid CRC.
        let mut bad = batch(3, 2, 0, 0);
        bad[21..23].copy_from_slice(&1i16.to_be_bytes());
        let crc = crc32c::crc32c(&bad[21..]);
        bad[17..21].copy_from_slice(&crc.to_be_bytes());
        let log = [batch(0, 3, 0, 0), bad, batch(5, 1, 4, 0)].concat();
        let (s, out) = run(
            &log,
            DumpRange {
                records: true,
                ..DumpRange::default()
            },
        );
        assert_eq!((s.batches, s.unreadable, s.damaged), (3, 1, 0));
        assert!(
            out.contains("  cannot decompress the records of batch 3..4 at byte ")
                && out.contains("00000000000000000000.log`: gzip data: "),
            "{out}"
        );
        assert_eq!(
            offsets_shown(&out),
            [0, 1, 2, 5],
            "the batches after it are shown"
        );
    }
}
