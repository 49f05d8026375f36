//! Where each object lies in the bucket, and the per-partition manifest that says what the
//! bucket holds of one partition.
//!
//! Every name is relative to the configured prefix and starts with the partition's root,
//! `<cluster id>/<topic>/<topic id>/<partition>/`:
//!
//! ```text
//! manifest/<generation, 20 digits>                                  the manifest, one object per generation
//! segments/<base, 20 digits>/<from>-<to>-<crc32c>.log               bytes [from, to) of a segment file
//! segments/<base, 20 digits>/index-<size>-<crc32c>                  a closed segment's offset index
//! segments/<base, 20 digits>/timeindex-<size>-<crc32c>              … its time index
//! segments/<base, 20 digits>/txnindex-<size>-<crc32c>               … its aborted-transaction index
//! files/<diverged|damaged>/<file name>.<size>-<crc32c>.<part>       a copy kept beside the log, in parts of 16 MiB
//! ```
//!
//! Objects are never overwritten: a name says what it holds (range, size and CRC-32C of the
//! plaintext), and each manifest is a new generation. Generations are written one after the
//! other from 1, so the newest is found by probing names, not by listing.
//!
//! The manifest is text, one item a line:
//!
//! ```text
//! replica-follower offsite manifest 1
//! generation 7
//! written_ms 1764547200000
//! cluster_id <id>
//! topic <topic>
//! topic_id <base64 uuid | ->
//! partition <n>
//! archived <true|false>
//! log_start_offset <offset>
//! epoch <epoch> <start offset>                    one per leader-epoch entry
//! lost <first> <last>                             one per range lost upstream
//! segment <base> <next offset> <size> <open|closed>
//! piece <from> <to> <crc32c>                      the segment's pieces, in order (each starts
//!                                                 inside or at the end of the one before)
//! index <size> <crc32c>                           a closed segment's three indexes
//! timeindex <size> <crc32c>
//! txnindex <size> <crc32c>
//! file <diverged|damaged>/<name> <size> <crc32c>
//! end <crc32c of every byte before this line>
//! ```

use crate::protocol::uuid::Uuid;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::fmt::Write as _;

const MAGIC: &str = "replica-follower offsite manifest 1";

/// Size and CRC-32C of a whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSum {
    pub size: u64,
    pub crc: u32,
}

/// The most bytes in one part of a file kept beside the log (`diverged/`, `damaged/`).
pub const FILE_PART: u64 = 16 << 20;

impl FileSum {
    /// How many parts of at most [`FILE_PART`] bytes the file goes up in (an empty file: one).
    pub fn parts(&self) -> u64 {
        self.size.div_ceil(FILE_PART).max(1)
    }

    pub fn of(bytes: &[u8]) -> FileSum {
        FileSum {
            size: bytes.len() as u64,
            crc: crc32c::crc32c(bytes),
        }
    }
}

/// Bytes [from, to) of a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub from: u64,
    pub to: u64,
    pub crc: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Indexes {
    pub index: FileSum,
    pub timeindex: FileSum,
    pub txnindex: FileSum,
}

/// One segment: its first `size` bytes are its pieces, each from its `from` up to where the
/// next one starts (a truncation can cut a segment inside a piece, and the bytes appended
/// after it start a new piece there), the last one cut to `size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    pub next_offset: i64,
    pub size: u64,
    pub pieces: Vec<Piece>,
    /// Set once the segment is closed (rolled): it is then whole, with its indexes.
    pub indexes: Option<Indexes>,
}

impl SegmentEntry {
    /// Each piece with the end of the bytes it gives the segment: up to where the next piece
    /// starts (a piece a truncation cut is followed by one starting inside it), or to `size`.
    pub fn used(&self) -> Vec<(Piece, u64)> {
        let mut out = Vec::with_capacity(self.pieces.len());
        for (i, p) in self.pieces.iter().enumerate() {
            let end = self
                .pieces
                .get(i + 1)
                .map_or(self.size, |n| n.from)
                .min(p.to)
                .min(self.size);
            if end > p.from {
                out.push((*p, end));
            }
        }
        out
    }

    /// Whether every byte of a closed segment of `size` bytes is in.
    pub fn is_closed(&self) -> bool {
        self.indexes.is_some()
    }
}

/// Identity of a partition's history in the bucket.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub cluster_id: String,
    pub topic: String,
    pub topic_id: Option<Uuid>,
    pub partition: i32,
}

impl PartitionKey {
    /// `<cluster>/<topic>/<topic id or ->/<partition>/`.
    pub fn root(&self) -> String {
        format!(
            "{}/{}/{}/{}/",
            self.cluster_id,
            self.topic,
            topic_id_text(self.topic_id),
            self.partition
        )
    }
    pub fn manifest(&self, generation: u64) -> String {
        format!("{}manifest/{generation:020}", self.root())
    }
    pub fn piece(&self, base: i64, p: &Piece) -> String {
        format!(
            "{}segments/{base:020}/{:020}-{:020}-{:08x}.log",
            self.root(),
            p.from,
            p.to,
            p.crc
        )
    }
    pub fn pieces_of(&self, base: i64) -> String {
        format!("{}segments/{base:020}/", self.root())
    }
    pub fn index(&self, base: i64, kind: &str, sum: &FileSum) -> String {
        format!(
            "{}segments/{base:020}/{kind}-{}-{:08x}",
            self.root(),
            sum.size,
            sum.crc
        )
    }
    /// Part `part` of a file kept beside the log: files go up in parts of at most
    /// [`FILE_PART`] bytes, [`FileSum::parts`] of them.
    pub fn file(&self, name: &str, sum: &FileSum, part: u64) -> String {
        format!(
            "{}files/{name}.{}-{:08x}.{part}",
            self.root(),
            sum.size,
            sum.crc
        )
    }
    /// `topic-partition`, or the archived directory's name for an archived history.
    pub fn describe(&self) -> String {
        format!(
            "{}-{} (topic id {})",
            self.topic,
            self.partition,
            topic_id_text(self.topic_id)
        )
    }
}

fn topic_id_text(id: Option<Uuid>) -> String {
    id.map_or_else(|| "-".to_string(), |u| u.to_string())
}

/// Parses a piece's object name (the part after `segments/<base>/`).
pub fn parse_piece_name(name: &str) -> Option<Piece> {
    let stem = name.strip_suffix(".log")?;
    let mut it = stem.split('-');
    let from = it.next()?.parse().ok()?;
    let to = it.next()?.parse().ok()?;
    let crc = u32::from_str_radix(it.next()?, 16).ok()?;
    if it.next().is_some() || to <= from {
        return None;
    }
    Some(Piece { from, to, crc })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub generation: u64,
    pub written_ms: i64,
    pub key: PartitionKey,
    pub archived: bool,
    pub log_start_offset: i64,
    pub epochs: Vec<(i32, i64)>,
    pub lost: Vec<(i64, i64)>,
    pub segments: BTreeMap<i64, SegmentEntry>,
    /// `diverged/<name>` or `damaged/<name>` → its sum.
    pub files: BTreeMap<String, FileSum>,
}

impl Manifest {
    pub fn empty(key: PartitionKey, archived: bool) -> Manifest {
        Manifest {
            generation: 0,
            written_ms: 0,
            key,
            archived,
            log_start_offset: 0,
            epochs: Vec::new(),
            lost: Vec::new(),
            segments: BTreeMap::new(),
            files: BTreeMap::new(),
        }
    }

    /// Bytes of segment data the manifest holds.
    pub fn bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC}");
        let _ = writeln!(s, "generation {}", self.generation);
        let _ = writeln!(s, "written_ms {}", self.written_ms);
        let _ = writeln!(s, "cluster_id {}", self.key.cluster_id);
        let _ = writeln!(s, "topic {}", self.key.topic);
        let _ = writeln!(s, "topic_id {}", topic_id_text(self.key.topic_id));
        let _ = writeln!(s, "partition {}", self.key.partition);
        let _ = writeln!(s, "archived {}", self.archived);
        let _ = writeln!(s, "log_start_offset {}", self.log_start_offset);
        for (e, o) in &self.epochs {
            let _ = writeln!(s, "epoch {e} {o}");
        }
        for (a, b) in &self.lost {
            let _ = writeln!(s, "lost {a} {b}");
        }
        for (base, seg) in &self.segments {
            let state = if seg.is_closed() { "closed" } else { "open" };
            let _ = writeln!(s, "segment {base} {} {} {state}", seg.next_offset, seg.size);
            for p in &seg.pieces {
                let _ = writeln!(s, "piece {} {} {:08x}", p.from, p.to, p.crc);
            }
            if let Some(ix) = &seg.indexes {
                for (k, f) in [
                    ("index", ix.index),
                    ("timeindex", ix.timeindex),
                    ("txnindex", ix.txnindex),
                ] {
                    let _ = writeln!(s, "{k} {} {:08x}", f.size, f.crc);
                }
            }
        }
        for (name, f) in &self.files {
            let _ = writeln!(s, "file {name} {} {:08x}", f.size, f.crc);
        }
        with_end_line(s)
    }

    /// Parses a manifest; `what` names it in errors.
    pub fn parse(text: &str, what: &str) -> Result<Manifest> {
        parse(text).with_context(|| format!("manifest `{what}` is malformed"))
    }
}

fn num<T: std::str::FromStr>(v: Option<&str>, what: &str) -> Result<T> {
    v.and_then(|t| t.parse().ok())
        .with_context(|| format!("`{what}` needs a number"))
}

fn hex(v: Option<&str>) -> Result<u32> {
    v.and_then(|t| u32::from_str_radix(t, 16).ok())
        .context("a CRC-32C must be 8 hex digits")
}

fn sum(parts: &mut std::str::SplitWhitespace<'_>) -> Result<FileSum> {
    Ok(FileSum {
        size: num(parts.next(), "size")?,
        crc: hex(parts.next())?,
    })
}

/// `text` with its `end <CRC-32C of text>` line, as every manifest ends.
pub fn with_end_line(mut text: String) -> String {
    let crc = crc32c::crc32c(text.as_bytes());
    let _ = writeln!(text, "end {crc:08x}");
    text
}

/// The text before the `end` line, once that line is found and its CRC-32C matches.
pub fn without_end_line(text: &str) -> Result<&str> {
    let Some(body_end) = text.rfind("end ") else {
        bail!("no `end` line: the object is cut short");
    };
    let (body, end) = text.split_at(body_end);
    let want = hex(end.trim_end().strip_prefix("end ").map(str::trim))?;
    if crc32c::crc32c(body.as_bytes()) != want || !end.ends_with('\n') {
        bail!("its CRC-32C does not match its `end` line");
    }
    Ok(body)
}

fn parse(text: &str) -> Result<Manifest> {
    let body = without_end_line(text)?;
    let mut lines = body.lines();
    if lines.next() != Some(MAGIC) {
        bail!("the first line is not `{MAGIC}`");
    }
    let mut m = Manifest::empty(
        PartitionKey {
            cluster_id: String::new(),
            topic: String::new(),
            topic_id: None,
            partition: -1,
        },
        false,
    );
    let mut current: Option<i64> = None;
    for (i, line) in lines.enumerate() {
        let mut parts = line.split_whitespace();
        let Some(word) = parts.next() else { continue };
        let r: Result<()> = (|| {
            match word {
                "generation" => m.generation = num(parts.next(), word)?,
                "written_ms" => m.written_ms = num(parts.next(), word)?,
                "cluster_id" => m.key.cluster_id = parts.next().unwrap_or("").to_string(),
                "topic" => m.key.topic = parts.next().unwrap_or("").to_string(),
                "topic_id" => {
                    m.key.topic_id = match parts.next() {
                        Some("-") => None,
                        Some(t) => Some(Uuid::parse(t).context("bad topic id")?),
                        None => bail!("`topic_id` needs a value"),
                    }
                }
                "partition" => m.key.partition = num(parts.next(), word)?,
                "archived" => m.archived = parts.next() == Some("true"),
                "log_start_offset" => m.log_start_offset = num(parts.next(), word)?,
                "epoch" => m
                    .epochs
                    .push((num(parts.next(), word)?, num(parts.next(), word)?)),
                "lost" => m
                    .lost
                    .push((num(parts.next(), word)?, num(parts.next(), word)?)),
                "segment" => {
                    let base: i64 = num(parts.next(), "segment base")?;
                    let next_offset = num(parts.next(), "segment next offset")?;
                    let size = num(parts.next(), "segment size")?;
                    m.segments.insert(
                        base,
                        SegmentEntry {
                            next_offset,
                            size,
                            pieces: Vec::new(),
                            indexes: None,
                        },
                    );
                    current = Some(base);
                }
                "piece" => {
                    let seg = current
                        .and_then(|b| m.segments.get_mut(&b))
                        .context("`piece` before any `segment`")?;
                    let p = Piece {
                        from: num(parts.next(), "piece start")?,
                        to: num(parts.next(), "piece end")?,
                        crc: hex(parts.next())?,
                    };
                    let follows = match seg.pieces.last() {
                        None => p.from == 0,
                        Some(l) => l.from < p.from && p.from <= l.to,
                    };
                    if !follows || p.to <= p.from {
                        bail!(
                            "piece {}..{} does not follow the one before it",
                            p.from,
                            p.to
                        );
                    }
                    seg.pieces.push(p);
                }
                "index" | "timeindex" | "txnindex" => {
                    let seg = current
                        .and_then(|b| m.segments.get_mut(&b))
                        .context("an index before any `segment`")?;
                    let f = sum(&mut parts)?;
                    let zero = FileSum { size: 0, crc: 0 };
                    let ix = seg.indexes.get_or_insert(Indexes {
                        index: zero,
                        timeindex: zero,
                        txnindex: zero,
                    });
                    match word {
                        "index" => ix.index = f,
                        "timeindex" => ix.timeindex = f,
                        _ => ix.txnindex = f,
                    }
                }
                "file" => {
                    let name = parts.next().context("`file` needs a name")?.to_string();
                    if !(name.starts_with("diverged/") || name.starts_with("damaged/"))
                        || name.contains("..")
                        || name.matches('/').count() != 1
                    {
                        bail!("`{name}` is not a diverged/ or damaged/ file name");
                    }
                    let f = sum(&mut parts)?;
                    m.files.insert(name, f);
                }
                other => bail!("unknown item `{other}`"),
            }
            Ok(())
        })();
        r.with_context(|| format!("line {}", i + 2))?;
    }
    for (base, seg) in &m.segments {
        let covered = seg.pieces.last().map_or(0, |p| p.to);
        if covered < seg.size {
            bail!(
                "segment {base}: its pieces cover {covered} of its {} bytes",
                seg.size
            );
        }
    }
    if m.key.cluster_id.is_empty() || m.key.topic.is_empty() || m.key.partition < 0 {
        bail!("the cluster id, topic or partition is missing");
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut m = Manifest::empty(
            PartitionKey {
                cluster_id: "abc".into(),
                topic: "orders".into(),
                topic_id: Some(Uuid([7; 16])),
                partition: 3,
            },
            false,
        );
        m.generation = 4;
        m.written_ms = 99;
        m.log_start_offset = 10;
        m.epochs = vec![(0, 10), (2, 50)];
        m.lost = vec![(60, 69)];
        let ix = FileSum { size: 8, crc: 1 };
        m.segments.insert(
            10,
            SegmentEntry {
                next_offset: 40,
                size: 300,
                pieces: vec![
                    Piece {
                        from: 0,
                        to: 100,
                        crc: 5,
                    },
                    Piece {
                        from: 100,
                        to: 300,
                        crc: 6,
                    },
                ],
                indexes: Some(Indexes {
                    index: ix,
                    timeindex: ix,
                    txnindex: FileSum { size: 0, crc: 0 },
                }),
            },
        );
        m.segments.insert(
            40,
            SegmentEntry {
                next_offset: 45,
                size: 50,
                pieces: vec![Piece {
                    from: 0,
                    to: 60,
                    crc: 9,
                }],
                indexes: None,
            },
        );
        m.files.insert(
            "diverged/00000000000000000070-00000000000000000079.log".into(),
            FileSum { size: 33, crc: 2 },
        );
        m
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let m = sample();
        let text = m.render();
        assert_eq!(Manifest::parse(&text, "t").unwrap(), m);
    }

    #[test]
    fn a_changed_or_cut_manifest_is_refused() {
        let text = sample().render();
        let cut = &text[..text.len() / 2];
        assert!(Manifest::parse(cut, "t").is_err());
        let changed = text.replace("segment 40 45 50", "segment 40 45 51");
        let e = format!("{:#}", Manifest::parse(&changed, "m").unwrap_err());
        assert!(e.contains("manifest `m`") && e.contains("CRC-32C"), "{e}");
    }

    #[test]
    fn a_piece_a_truncation_cut_gives_bytes_up_to_the_next_one() {
        let piece = |from, to| Piece { from, to, crc: 1 };
        let seg = SegmentEntry {
            next_offset: 9,
            size: 250,
            pieces: vec![piece(0, 100), piece(100, 200), piece(150, 260)],
            indexes: None,
        };
        assert_eq!(
            seg.used(),
            vec![
                (piece(0, 100), 100),
                (piece(100, 200), 150),
                (piece(150, 260), 250)
            ]
        );
        let mut m = sample();
        m.segments.insert(40, seg);
        assert_eq!(Manifest::parse(&m.render(), "t").unwrap(), m);
        // A piece that starts past the end of the one before leaves a hole: refused.
        let mut m = sample();
        if let Some(s) = m.segments.get_mut(&40) {
            s.pieces.push(piece(70, 80));
            s.size = 80;
        }
        assert!(Manifest::parse(&m.render(), "t").is_err());
    }

    #[test]
    fn piece_names_read_back() {
        let k = sample().key;
        let p = Piece {
            from: 12,
            to: 99,
            crc: 0xdead_beef,
        };
        let name = k.piece(40, &p);
        let rest = name.strip_prefix(&k.pieces_of(40)).unwrap();
        assert_eq!(parse_piece_name(rest), Some(p));
        assert!(name.starts_with("abc/orders/BwcHBwcHBwcHBwcHBwcHBw/3/segments/"));
        assert_eq!(parse_piece_name("1-2.log"), None);
    }
}
