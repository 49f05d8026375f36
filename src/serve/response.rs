//! A response as the socket sees it: byte chunks and ranges of segment files. The size
//! prefix is computed from the pieces first; the bytes go out gathered (the header and the
//! partition fields between two record sets in one write), and each file range goes from the
//! page cache to the socket with `sendfile(2)` (rustix's safe wrapper), never through a
//! buffer of ours — as Kafka's `FileRecords.writeTo` does with `transferTo`.
//!
//! (std's `io::copy` from a `File` to a `TcpStream` would not do it: with rustc 1.95 it
//! reads and sends through an 8 KiB buffer, as strace shows.)

use crate::security::Stream;
use anyhow::{Result, bail};
use std::fs::File;
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;

#[derive(Debug)]
pub struct FileRange {
    pub file: File,
    pub path: PathBuf,
    pub pos: u64,
    pub len: u64,
    /// The listener's descriptor it holds, if it counts against one.
    pub _permit: Option<super::limits::DescriptorPermit>,
}

#[derive(Debug)]
pub enum Piece {
    Bytes(Vec<u8>),
    File(FileRange),
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::File(f) => f.len,
        }
    }
}

/// Where a frame goes: bytes are written, file ranges sent.
pub trait Sink: Write {
    /// Sends `len` bytes of `file` from byte `pos`; returns how many went out (fewer only
    /// when the file ends first).
    fn send_file(&mut self, file: &File, pos: u64, len: u64) -> std::io::Result<u64>;
}

/// Why a response was not sent whole: its client did not take it by its deadline.
fn too_slow() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the client did not take its response by its deadline",
    )
}

/// How much is written or sent between two looks at the response's deadline.
const STEP: usize = 256 << 10;

impl Sink for TcpStream {
    fn send_file(&mut self, file: &File, pos: u64, len: u64) -> std::io::Result<u64> {
        let end = pos.saturating_add(len);
        let mut at = pos;
        while at < end {
            // The kernel moves `at` on.
            let chunk = usize::try_from((end - at).min(1 << 30)).unwrap_or(1 << 30);
            match rustix::fs::sendfile(&*self, file, Some(&mut at), chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                // A send timeout (SO_SNDTIMEO) comes back as EAGAIN.
                Err(rustix::io::Errno::AGAIN) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client took nothing within the write timeout",
                    ));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(at - pos)
    }
}

/// Over TLS the bytes must pass through rustls to be encrypted: each range is read
/// (`pread`) in chunks of [`TLS_CHUNK`] and written, so a response holds one chunk at a
/// time beside what rustls buffers, however large its record sets.
impl Sink for Stream {
    fn send_file(&mut self, file: &File, pos: u64, len: u64) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        if let Stream::Plain(tcp) = self {
            return tcp.send_file(file, pos, len);
        }
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(TLS_CHUNK).min(TLS_CHUNK)];
        let mut sent = 0u64;
        while sent < len {
            let want = usize::try_from(len - sent)
                .unwrap_or(TLS_CHUNK)
                .min(buf.len());
            let Some(chunk) = buf.get_mut(..want) else {
                break;
            };
            let n = match file.read_at(chunk, pos + sent) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.write_all(buf.get(..n).unwrap_or_default())?;
            sent += n as u64;
        }
        Ok(sent)
    }
}

/// How much of a file range is read at a time to go out over TLS.
pub const TLS_CHUNK: usize = 64 << 10;

/// For tests: file ranges are read into the buffer.
impl Sink for Vec<u8> {
    fn send_file(&mut self, file: &File, pos: u64, len: u64) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let start = self.len();
        let want = usize::try_from(len).map_err(std::io::Error::other)?;
        self.resize(start + want, 0);
        let mut got = 0;
        while let Some(rest) = self.get_mut(start + got..).filter(|rest| !rest.is_empty()) {
            match file.read_at(rest, pos + got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        self.truncate(start + got);
        Ok(got as u64)
    }
}

/// Writes `pieces` as one frame: the INT32 size, then each piece. A file that holds fewer
/// bytes than its range promised (truncated or cut since the range was taken) is an error:
/// the frame is then torn and the caller must close the connection.
pub fn write_frame(out: &mut impl Sink, pieces: &mut [Piece]) -> Result<()> {
    write_frame_by(out, pieces, None)
}

/// [`write_frame`], given up (an error: the connection closes) once `deadline` passed: a
/// client that takes a byte now and then does not hold its response, its memory and its
/// files for ever. Each write waits at most the socket's send timeout beyond it.
pub fn write_frame_by(
    out: &mut impl Sink,
    pieces: &mut [Piece],
    deadline: Option<std::time::Instant>,
) -> Result<()> {
    let total: u64 = pieces.iter().map(Piece::len).sum();
    let Ok(size) = i32::try_from(total) else {
        bail!("a response of {total} bytes does not fit a frame");
    };
    let late = || deadline.is_some_and(|d| std::time::Instant::now() >= d);
    let write = |out: &mut dyn Write, bytes: &[u8]| -> std::io::Result<()> {
        for step in bytes.chunks(STEP) {
            if late() {
                return Err(too_slow());
            }
            out.write_all(step)?;
        }
        Ok(())
    };
    // Bytes between two file ranges are gathered, so a response costs one write per record
    // set, not one per field.
    let mut gathered = size.to_be_bytes().to_vec();
    for p in pieces.iter() {
        match p {
            Piece::Bytes(b) => gathered.extend_from_slice(b),
            Piece::File(r) => {
                write(out, &gathered)?;
                gathered.clear();
                let mut sent = 0;
                while sent < r.len {
                    if late() {
                        return Err(too_slow().into());
                    }
                    let step = (r.len - sent).min(STEP as u64);
                    let n = out.send_file(&r.file, r.pos + sent, step)?;
                    sent += n;
                    if n < step {
                        break;
                    }
                }
                if sent < r.len {
                    bail!(
                        "`{}` shrank while it was sent ({sent} of {} bytes from byte {})",
                        r.path.display(),
                        r.len,
                        r.pos
                    );
                }
            }
        }
    }
    write(out, &gathered)?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_piece(path: &std::path::Path, pos: u64, len: u64) -> Piece {
        Piece::File(FileRange {
            file: File::open(path).unwrap(),
            path: path.to_path_buf(),
            pos,
            len,
            _permit: None,
        })
    }

    #[test]
    fn frame_is_sized_from_its_pieces_and_a_short_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg.log");
        std::fs::write(&path, b"0123456789").unwrap();
        let range = |pos, len| file_piece(&path, pos, len);
        let mut out = Vec::new();
        let mut pieces = vec![Piece::Bytes(vec![7, 7]), range(3, 4), Piece::Bytes(vec![9])];
        write_frame(&mut out, &mut pieces).unwrap();
        assert_eq!(out, [0, 0, 0, 7, 7, 7, b'3', b'4', b'5', b'6', 9]);
        let mut out = Vec::new();
        let e = write_frame(&mut out, &mut [range(8, 5)]).unwrap_err();
        assert!(e.to_string().contains("shrank"), "{e}");
    }

    #[test]
    fn file_ranges_go_to_a_socket_whole_and_a_short_file_is_an_error() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg.log");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let mut sock = TcpStream::connect(addr).unwrap();
        let range = |pos, len| file_piece(&path, pos, len);
        let mut pieces = vec![
            Piece::Bytes(vec![1, 2]),
            range(10, 2_500_000),
            Piece::Bytes(vec![3]),
            range(0, 5),
        ];
        write_frame(&mut sock, &mut pieces).unwrap();
        let e = write_frame(&mut sock, &mut [range(2_999_990, 20)]).unwrap_err();
        assert!(e.to_string().contains("shrank"), "{e}");
        drop(sock);
        let got = reader.join().unwrap();
        let mut want = (2 + 2_500_000 + 1 + 5u32).to_be_bytes().to_vec();
        want.extend_from_slice(&[1, 2]);
        want.extend_from_slice(&data[10..2_500_010]);
        want.push(3);
        want.extend_from_slice(&data[..5]);
        assert_eq!(got[..want.len()].len(), want.len());
        assert!(
            got[..want.len()] == want[..],
            "the frame arrives as written"
        );
        // The torn second frame: its size and the bytes the file still had, nothing more.
        assert_eq!(got.len(), want.len() + 4 + 10);
    }
}
