//! Reading a `.log` file (a segment, or a `diverged/` copy) batch by batch in bounded memory.
//!
//! A segment may hold a gigabyte; nothing reads one whole. [`SegmentReader`] holds the file
//! and one buffer of [`BUFFER_SIZE`] bytes. It yields each whole batch's header and byte
//! position; only when the caller asks does it read the batch's bytes (one batch at a time,
//! no larger than [`MAX_BATCH_SIZE`]) or verify its checksum as the bytes stream through the
//! buffer, without holding the batch.
//!
//! It judges a file exactly as [`crate::record::BatchIter`] judges a record set in memory, and
//! stops where that would: at a batch that is not all there ([`SetEnd::Partial`]: a write torn
//! by a crash, or a size field pointing past the end) or whose header is malformed
//! ([`SetEnd::Corrupt`]). So recovery, the loader, `verify`, `dump` and `status` agree on
//! where a log ends.
//!
//! It only reads. It sees the file as long as it was when the reader was made (a batch being
//! appended meanwhile is not part of it); bytes that vanish under it (a concurrent truncation)
//! are a read error naming the file.

pub use crate::record::batch::MAX_BATCH_SIZE;
use crate::record::batch::{CrcCheck, LOG_OVERHEAD, V2_HEADER_SIZE};
use crate::record::{BatchError, BatchHeader, SetEnd};
use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes read from the file at a time. Memory per reader: this, plus the bytes of one batch
/// when a caller asks for a batch longer than it.
pub const BUFFER_SIZE: usize = 256 << 10;

#[cfg(test)]
thread_local! {
    /// Batch headers read by this thread's readers: what a test counts to bound a reader's
    /// work by something other than time.
    pub static HEADERS_READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[derive(Debug)]
pub struct SegmentReader {
    file: File,
    path: PathBuf,
    /// Bytes of the file that are read: its length when the reader was made.
    size: u64,
    /// Position of the batch last yielded, or of the next one to look at.
    pos: u64,
    /// The batch last yielded; the next call steps over it.
    current: Option<BatchHeader>,
    /// Holds `buf_len` bytes of the file from `buf_start`.
    buf: Vec<u8>,
    buf_start: u64,
    buf_len: usize,
    /// The bytes of the current batch when it is longer than the buffer.
    whole: Vec<u8>,
    /// How the file ended, once it did.
    end: Option<SetEnd>,
}

impl SegmentReader {
    /// Opens `path` to read every batch from its start.
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            File::open(path).with_context(|| format!("failed to open `{}`", path.display()))?;
        Self::from_file(file, path)
    }

    /// Reads `file` (opened from `path`) from its start to its current length.
    pub fn from_file(file: File, path: &Path) -> Result<Self> {
        let size = file
            .metadata()
            .with_context(|| format!("failed to stat `{}`", path.display()))?
            .len();
        Ok(Self::new(file, path, 0, size))
    }

    /// Reads the bytes `from..size` of `file`; `from` must be where a batch starts.
    pub fn new(file: File, path: &Path, from: u64, size: u64) -> Self {
        SegmentReader {
            file,
            path: path.to_path_buf(),
            size,
            pos: from.min(size),
            current: None,
            buf: Vec::new(),
            buf_start: 0,
            buf_len: 0,
            whole: Vec::new(),
            end: None,
        }
    }

    /// The same reader, reading from byte `from` (a batch start) instead.
    pub fn starting_at(self, from: u64) -> Self {
        Self::new(self.file, &self.path, from, self.size)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of the file this reader reads.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where the batch last yielded starts; after the end, where the bytes that are not a
    /// whole batch start (the file size when it ended complete).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// How the file ended; `None` until [`Self::next_batch`] has returned `None`. Positions in
    /// it are byte positions in the file.
    pub fn end(&self) -> Option<&SetEnd> {
        self.end.as_ref()
    }

    /// The size its size field gives the partial batch at the end (`size` + 12), when at
    /// least that field is there.
    pub fn announced_size(&self) -> Option<u64> {
        if !matches!(self.end, Some(SetEnd::Partial { .. })) {
            return None;
        }
        let prefix = self.buffered(self.pos, LOG_OVERHEAD)?;
        let size = prefix.get(8..12)?.try_into().ok().map(i32::from_be_bytes)?;
        u64::try_from(i64::from(size) + LOG_OVERHEAD as i64).ok()
    }

    /// The header and byte position of the next whole batch; `None` at the end of the file
    /// or at the first batch that is not whole or not sane (see [`Self::end`]).
    pub fn next_batch(&mut self) -> Result<Option<(BatchHeader, u64)>> {
        if let Some(h) = self.current.take() {
            self.pos += h.size_in_bytes as u64;
        }
        if self.end.is_some() {
            return Ok(None);
        }
        let rest = self.size - self.pos;
        if rest == 0 {
            self.end = Some(SetEnd::Complete);
            return Ok(None);
        }
        let want = V2_HEADER_SIZE.min(usize::try_from(rest).unwrap_or(usize::MAX));
        let prefix = self.fill(self.pos, want)?;
        #[cfg(test)]
        HEADERS_READ.with(|n| n.set(n.get() + 1));
        match BatchHeader::parse_header_of(prefix, rest, MAX_BATCH_SIZE) {
            Ok(h) => {
                self.current = Some(h);
                Ok(Some((h, self.pos)))
            }
            Err(BatchError::Truncated { .. }) => {
                self.end = Some(SetEnd::Partial {
                    bytes: usize::try_from(rest).unwrap_or(usize::MAX),
                });
                Ok(None)
            }
            Err(BatchError::Corrupt(reason)) => {
                self.end = Some(SetEnd::Corrupt {
                    position: usize::try_from(self.pos).unwrap_or(usize::MAX),
                    reason,
                });
                Ok(None)
            }
        }
    }

    /// The bytes of the batch last yielded.
    pub fn batch_bytes(&mut self) -> Result<&[u8]> {
        let Some(h) = self.current else {
            return Ok(&[]);
        };
        let (pos, len) = (self.pos, h.size_in_bytes);
        if len <= BUFFER_SIZE {
            return self.fill(pos, len);
        }
        // The buffer only grows: zero-filling it again for every batch would cost as much as
        // reading it.
        if self.whole.len() < len {
            let more = len - self.whole.len();
            self.whole.try_reserve_exact(more).with_context(|| {
                format!(
                    "no memory for the {len}-byte batch at byte {pos} of `{}`",
                    self.path.display()
                )
            })?;
            self.whole.resize(len, 0);
        }
        let whole = self.whole.get_mut(..len).unwrap_or_default();
        self.file.read_exact_at(whole, pos).with_context(|| {
            format!(
                "failed to read {len} bytes at byte {pos} of `{}`",
                self.path.display()
            )
        })?;
        Ok(whole)
    }

    /// Verifies the checksum of the batch last yielded, streaming its bytes through the
    /// buffer (the batch is never held whole).
    pub fn check_crc(&mut self) -> Result<Result<(), BatchError>> {
        let Some(h) = self.current else {
            return Ok(Ok(()));
        };
        let mut check = CrcCheck::new(&h);
        let end = self.pos + h.size_in_bytes as u64;
        let mut at = self.pos;
        while at < end {
            let piece = BUFFER_SIZE.min(usize::try_from(end - at).unwrap_or(usize::MAX));
            check.update(self.fill(at, piece)?);
            at += piece as u64;
        }
        Ok(check.finish())
    }

    /// The checksum verdict of the batch last yielded, and its bytes when `keep` is set
    /// (empty otherwise: a batch that is not kept is streamed, never held).
    pub fn checked_batch(&mut self, keep: bool) -> Result<(Result<(), BatchError>, &[u8])> {
        let Some(h) = self.current else {
            return Ok((Ok(()), &[]));
        };
        if keep {
            let bytes = self.batch_bytes()?;
            Ok((h.verify_crc(bytes), bytes))
        } else {
            Ok((self.check_crc()?, &[]))
        }
    }

    /// The `len` buffered bytes at `at`, if the buffer holds them.
    fn buffered(&self, at: u64, len: usize) -> Option<&[u8]> {
        let from = usize::try_from(at.checked_sub(self.buf_start)?).ok()?;
        let to = from.checked_add(len)?;
        if to > self.buf_len {
            return None;
        }
        self.buf.get(from..to)
    }

    /// The `len` bytes at `at` (`len` ≤ [`BUFFER_SIZE`], all below `size`), read into the
    /// buffer unless it holds them; a read fills the whole buffer, for the batches after.
    fn fill(&mut self, at: u64, len: usize) -> Result<&[u8]> {
        if self.buffered(at, len).is_none() {
            let n = BUFFER_SIZE
                .min(usize::try_from(self.size.saturating_sub(at)).unwrap_or(usize::MAX));
            if self.buf.len() < n {
                self.buf.resize(n, 0);
            }
            // Nothing buffered until the read succeeds: a failed one leaves no stale bytes.
            self.buf_len = 0;
            let target = self.buf.get_mut(..n).unwrap_or_default();
            self.file.read_exact_at(target, at).with_context(|| {
                format!(
                    "failed to read `{}` at byte {at} (it was {} bytes long)",
                    self.path.display(),
                    self.size
                )
            })?;
            self.buf_start = at;
            self.buf_len = n;
        }
        Ok(self.buffered(at, len).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::BatchIter;
    use crate::record::records::{NewRecord, build_v2_batch};

    fn batch(base: i64, value_len: usize, records: usize) -> Vec<u8> {
        let v = vec![b'v'; value_len];
        let recs: Vec<NewRecord<'_>> = (0..records)
            .map(|i| NewRecord {
                key: None,
                value: Some(&v),
                timestamp: 1000 + i as i64,
            })
            .collect();
        build_v2_batch(base, 3, &recs)
    }

    /// What a reader makes of `bytes`: (header, position, CRC ok) per batch, and the end.
    fn read(bytes: &[u8], keep: bool) -> (Vec<(BatchHeader, u64, bool)>, SetEnd) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, bytes).unwrap();
        let mut r = SegmentReader::open(&p).unwrap();
        let mut out = Vec::new();
        while let Some((h, pos)) = r.next_batch().unwrap() {
            let (crc, b) = r.checked_batch(keep).unwrap();
            if keep {
                assert_eq!(b, &bytes[pos as usize..pos as usize + h.size_in_bytes]);
            }
            out.push((h, pos, crc.is_ok()));
        }
        (out, r.end().unwrap().clone())
    }

    /// What `BatchIter` makes of the same bytes in memory, positions made absolute.
    fn in_memory(bytes: &[u8]) -> (Vec<(BatchHeader, u64, bool)>, SetEnd) {
        let mut it = BatchIter::new(bytes, MAX_BATCH_SIZE);
        let got = it
            .by_ref()
            .map(|(h, pos, b)| (h, pos as u64, h.verify_crc(b).is_ok()))
            .collect();
        (got, it.end().unwrap().clone())
    }

    #[test]
    fn a_file_reads_as_the_same_bytes_in_memory_whatever_its_damage() {
        let mut log = Vec::new();
        for i in 0..4 {
            log.extend_from_slice(&batch(i * 5, 40, 5));
        }
        let mut cases = vec![log.clone()];
        for cut in (0..log.len()).step_by(7) {
            cases.push(log[..cut].to_vec());
        }
        for at in [8, 9, 16, 30, 70, 160, 200] {
            let mut c = log.clone();
            c[at] ^= 0x5a;
            cases.push(c);
        }
        for c in &cases {
            for keep in [false, true] {
                assert_eq!(read(c, keep), in_memory(c), "{} bytes", c.len());
            }
        }
    }

    #[test]
    fn batches_longer_than_the_buffer_stream_their_crc_and_read_whole_on_demand() {
        let mut log = batch(0, 1000, 1);
        let big = batch(1, 100_000, 7); // 700 KB
        assert!(big.len() > 2 * BUFFER_SIZE);
        log.extend_from_slice(&big);
        log.extend_from_slice(&batch(8, 10, 2));
        let mut bad = log.clone();
        let mid = log.len() / 2;
        bad[mid] ^= 1;
        for c in [&log, &bad] {
            for keep in [false, true] {
                let (got, end) = read(c, keep);
                assert_eq!((got.clone(), end.clone()), in_memory(c));
                assert_eq!(got.len(), 3);
                assert_eq!(end, SetEnd::Complete);
            }
        }
        assert!(
            !read(&bad, false).0[1].2,
            "the damage in the middle is found"
        );
    }

    #[test]
    fn a_partial_tail_tells_its_position_and_announced_size() {
        let a = batch(0, 40, 2);
        let b = batch(2, 40, 2);
        let log = [&a[..], &b[..b.len() - 9]].concat();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, &log).unwrap();
        let mut r = SegmentReader::open(&p).unwrap();
        let mut n = 0;
        while r.next_batch().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 1);
        assert_eq!(r.end(), Some(&SetEnd::Partial { bytes: b.len() - 9 }));
        assert_eq!(r.position(), a.len() as u64);
        assert_eq!(r.announced_size(), Some(b.len() as u64));
        // Fewer than 12 bytes: no size field to speak of.
        std::fs::write(&p, &b[..11]).unwrap();
        let mut r = SegmentReader::open(&p).unwrap();
        assert!(r.next_batch().unwrap().is_none());
        assert_eq!(r.announced_size(), None);
    }

    #[test]
    fn a_reader_from_a_position_sees_only_what_follows_up_to_its_size() {
        let a = batch(0, 40, 2);
        let b = batch(2, 40, 2);
        let c = batch(4, 40, 2);
        let log = [&a[..], &b[..], &c[..]].concat();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, &log).unwrap();
        let f = File::open(&p).unwrap();
        let size = (a.len() + b.len()) as u64;
        let mut r = SegmentReader::new(f, &p, a.len() as u64, size);
        let (h, pos) = r.next_batch().unwrap().unwrap();
        assert_eq!((h.base_offset, pos), (2, a.len() as u64));
        assert!(r.next_batch().unwrap().is_none());
        assert_eq!(r.end(), Some(&SetEnd::Complete));
        assert_eq!(r.position(), size);
    }

    #[test]
    fn a_file_that_shrinks_under_the_reader_is_an_error_naming_it() {
        let log = [batch(0, 40, 2), batch(2, 40, 2)].concat();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, &log).unwrap();
        let mut r = SegmentReader::open(&p).unwrap();
        std::fs::write(&p, &log[..10]).unwrap();
        let e = r.next_batch().unwrap_err();
        assert!(format!("{e:#}").contains("x.log"), "{e:#}");
    }
}
