//! A response as the socket sees it: byte chunks and ranges of segment files. The size
//! prefix is computed from the pieces first; file ranges are then copied to the socket with
//! `std::io::copy` from the file, never gathered into a response buffer.
//!
//! Measured (strace, rustc 1.95, Linux): std's copy from a `File` to a `TcpStream` does
//! `read` + `sendto` through an 8 KiB stack buffer, not `sendfile`; a true zero-copy send
//! needs `sendfile(2)` itself, which `#![forbid(unsafe_code)]` and the crate list rule out
//! for now. Memory stays bounded either way: no response is held whole.

use anyhow::{Result, bail};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

#[derive(Debug)]
pub struct FileRange {
    pub file: File,
    pub path: PathBuf,
    pub pos: u64,
    pub len: u64,
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

/// Writes `pieces` as one frame: the INT32 size, then each piece. A file that holds fewer
/// bytes than its range promised (truncated or cut since the range was taken) is an error:
/// the frame is then torn and the caller must close the connection.
pub fn write_frame(out: &mut impl Write, pieces: &mut [Piece]) -> Result<()> {
    let total: u64 = pieces.iter().map(Piece::len).sum();
    let Ok(size) = i32::try_from(total) else {
        bail!("a response of {total} bytes does not fit a frame");
    };
    out.write_all(&size.to_be_bytes())?;
    for p in pieces {
        match p {
            Piece::Bytes(b) => out.write_all(b)?,
            Piece::File(r) => {
                r.file.seek(SeekFrom::Start(r.pos))?;
                let sent = std::io::copy(&mut (&r.file).take(r.len), out)?;
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
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_is_sized_from_its_pieces_and_a_short_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg.log");
        std::fs::write(&path, b"0123456789").unwrap();
        let range = |pos, len| {
            Piece::File(FileRange {
                file: File::open(&path).unwrap(),
                path: path.clone(),
                pos,
                len,
            })
        };
        let mut out = Vec::new();
        let mut pieces = vec![Piece::Bytes(vec![7, 7]), range(3, 4), Piece::Bytes(vec![9])];
        write_frame(&mut out, &mut pieces).unwrap();
        assert_eq!(out, [0, 0, 0, 7, 7, 7, b'3', b'4', b'5', b'6', 9]);
        let mut out = Vec::new();
        let e = write_frame(&mut out, &mut [range(8, 5)]).unwrap_err();
        assert!(e.to_string().contains("shrank"), "{e}");
    }
}
