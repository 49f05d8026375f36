//! `replica-follower dump`: prints the batches of a partition from an offset, and the records
//! of uncompressed v2 batches (compressed ones are shown as batches: nothing here decompresses).

use crate::checkpoint::TopicPartition;
use crate::log::partition::list_segment_bases;
use crate::log::segment;
use crate::log::segment_reader::SegmentReader;
use crate::record::SetEnd;
use crate::record::records::{ControlType, control_marker, decode_records};
use anyhow::{Context, Result, bail};
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

/// What a dump saw: batches shown, and how many of them (or tails) were damaged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DumpSummary {
    pub batches: usize,
    pub damaged: usize,
    /// Offset after the last whole batch of the partition.
    pub log_end: Option<i64>,
}

pub fn dump(
    data_dir: &Path,
    tp: &TopicPartition,
    from: i64,
    out: &mut impl Write,
) -> Result<DumpSummary> {
    let mut summary = DumpSummary::default();
    let dir = data_dir.join(tp.dir_name());
    if !dir.is_dir() {
        bail!("{tp}: no partition directory `{}`", dir.display());
    }
    let bases = list_segment_bases(&dir)?;
    // Start at the last segment whose base is ≤ from.
    let first = bases.iter().rposition(|b| *b <= from).unwrap_or(0);
    for base in bases.iter().skip(first) {
        let path = dir.join(segment::file_name(*base, "log"));
        let file =
            File::open(&path).with_context(|| format!("failed to read `{}`", path.display()))?;
        let mut reader = SegmentReader::from_file(file, &path)?;
        writeln!(out, "# segment {}", path.display())?;
        while let Some((h, pos)) = reader.next_batch()? {
            summary.log_end = Some(h.last_offset + 1);
            if h.last_offset < from {
                continue;
            }
            summary.batches += 1;
            // Only the batches whose records are shown are held whole; the others stream
            // through the CRC check.
            let shown = h.magic == 2 && h.attributes & 0x07 == 0;
            let (crc, b) = reader.checked_batch(shown)?;
            let crc = if crc.is_ok() { "ok" } else { "BAD" };
            if crc == "BAD" {
                summary.damaged += 1;
            }
            let marker = match control_marker(&h, b) {
                Some((ControlType::Abort, e)) => format!(
                    " marker=ABORT (coordinator epoch {})",
                    e.map_or_else(|| "?".into(), |e| e.to_string())
                ),
                Some((ControlType::Commit, e)) => format!(
                    " marker=COMMIT (coordinator epoch {})",
                    e.map_or_else(|| "?".into(), |e| e.to_string())
                ),
                Some((ControlType::Other(t), _)) => format!(" marker=type-{t}"),
                None => String::new(),
            };
            writeln!(
                out,
                "batch offsets={}..{} position={pos} size={} magic={} epoch={} codec={} records={} max_timestamp={} transactional={} control={} producer_id={} producer_epoch={} base_sequence={}{marker} crc={crc}",
                h.base_offset,
                h.last_offset,
                h.size_in_bytes,
                h.magic,
                h.partition_leader_epoch,
                h.compression(),
                h.records_count,
                h.max_timestamp,
                h.is_transactional(),
                h.is_control(),
                h.producer_id,
                h.producer_epoch,
                h.base_sequence
            )?;
            if shown && crc == "ok" {
                match decode_records(&h, b) {
                    Ok(records) => {
                        for r in records.iter().filter(|r| r.offset >= from) {
                            let headers: Vec<String> = r
                                .headers
                                .iter()
                                .map(|(k, v)| format!("{k}={}", show(v.as_deref())))
                                .collect();
                            writeln!(
                                out,
                                "  offset={} timestamp={} key={} value={} headers=[{}]",
                                r.offset,
                                r.timestamp,
                                show(r.key.as_deref()),
                                show(r.value.as_deref()),
                                headers.join(", ")
                            )?;
                        }
                    }
                    Err(e) => writeln!(out, "  records unreadable: {e}")?,
                }
            }
        }
        match reader.end() {
            Some(SetEnd::Partial { bytes }) => {
                summary.damaged += 1;
                writeln!(out, "# partial batch of {bytes} bytes at the end")?
            }
            Some(SetEnd::Corrupt { position, reason }) => {
                summary.damaged += 1;
                writeln!(out, "# corrupt at byte {position}: {reason}")?
            }
            _ => {}
        }
    }
    out.flush()?;
    Ok(summary)
}
