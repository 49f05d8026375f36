//! Decompressing the records block of a v2 batch, for inspection only (`dump --records`,
//! `offsets --timestamp`): the follower itself stores batches as they came and never looks
//! inside them.
//!
//! ```text
//! attributes bits 0–2   codec         the records block after byte 61 is …
//!   0                   none          the records themselves
//!   1                   gzip          a gzip stream (RFC 1952; members may be concatenated)
//!   2                   snappy        xerial framing, or raw snappy (see below)
//!   3                   lz4           an LZ4 frame (magic 04 22 4d 18)
//!   4                   zstd          a zstd frame
//!
//! xerial framing (snappy-java's SnappyOutputStream, what Kafka's Java producer writes):
//!   0: magic 82 'S' 'N' 'A' 'P' 'P' 'Y' 00 | 8: version INT32 | 12: compatible INT32
//!   16: chunks { length INT32 (big-endian) | length bytes of raw snappy }
//! ```
//!
//! The bytes come from disk and from whoever produced them, so every decoder is bounded:
//! output past [`MAX_DECOMPRESSED`] is refused rather than allocated (a zip bomb costs at most
//! that), snappy's announced lengths are checked against the budget before any allocation,
//! zstd may not ask for a window above [`ZSTD_WINDOW_LOG_MAX`], and malformed input is an
//! error value, never a panic.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;

/// The most bytes one batch's records may decompress to. Producers cap an uncompressed batch
/// near `batch.size` (16 KiB by default) or `message.max.bytes` (1 MiB), so a batch past this
/// is hostile or broken.
pub const MAX_DECOMPRESSED: usize = 64 << 20;

/// zstd frames may need a window of at most 2^26 bytes (the same 64 MiB): producers at every
/// level up to 19 use 8 MiB or less.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 26;

const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_SIZE: usize = 16;

/// Why a records block could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecompressError {
    /// The output would pass the limit.
    TooLarge { codec: &'static str, limit: usize },
    /// The bytes are not valid for the codec.
    Corrupt { codec: &'static str, reason: String },
    /// Codec bits 5–7 name no codec.
    UnknownCodec(i16),
}

impl fmt::Display for DecompressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompressError::TooLarge { codec, limit } => {
                write!(f, "{codec} data decompresses to more than {limit} bytes")
            }
            DecompressError::Corrupt { codec, reason } => write!(f, "{codec} data: {reason}"),
            DecompressError::UnknownCodec(c) => write!(f, "unknown compression codec {c}"),
        }
    }
}

impl std::error::Error for DecompressError {}

/// The name Kafka gives codec `codec` (attributes & 7).
pub fn codec_name(codec: i16) -> &'static str {
    match codec {
        0 => "none",
        1 => "gzip",
        2 => "snappy",
        3 => "lz4",
        4 => "zstd",
        _ => "unknown",
    }
}

/// The records of a block compressed with `codec` (attributes & 7), at most `limit` bytes of
/// them; borrowed as they are when uncompressed.
pub fn decompress(codec: i16, data: &[u8], limit: usize) -> Result<Cow<'_, [u8]>, DecompressError> {
    let name = codec_name(codec);
    let corrupt = |e: &dyn fmt::Display| DecompressError::Corrupt {
        codec: name,
        reason: e.to_string(),
    };
    match codec {
        0 if data.len() > limit => Err(DecompressError::TooLarge { codec: name, limit }),
        0 => Ok(Cow::Borrowed(data)),
        1 => read_bounded(flate2::read::MultiGzDecoder::new(data), name, limit),
        2 => snappy(data, limit).map(Cow::Owned),
        3 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), name, limit),
        4 => {
            let mut d = zstd::stream::read::Decoder::new(data).map_err(|e| corrupt(&e))?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(&e))?;
            read_bounded(d, name, limit)
        }
        other => Err(DecompressError::UnknownCodec(other)),
    }
}

/// Everything `r` yields, refused once it passes `limit`.
fn read_bounded(
    r: impl Read,
    codec: &'static str,
    limit: usize,
) -> Result<Cow<'static, [u8]>, DecompressError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    r.take(cap)
        .read_to_end(&mut out)
        .map_err(|e| DecompressError::Corrupt {
            codec,
            reason: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge { codec, limit });
    }
    Ok(Cow::Owned(out))
}

/// Xerial-framed snappy when the block starts with its magic, raw snappy otherwise.
fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let corrupt = |reason: String| DecompressError::Corrupt {
        codec: "snappy",
        reason,
    };
    let mut out = Vec::new();
    if !data.starts_with(&XERIAL_MAGIC) {
        raw_snappy(data, &mut out, limit)?;
        return Ok(out);
    }
    let mut at = data
        .get(XERIAL_HEADER_SIZE..)
        .ok_or_else(|| corrupt("xerial header cut short".into()))?;
    while !at.is_empty() {
        let (len, after) = at
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt(format!("xerial chunk length cut short: {} bytes", at.len())))?;
        let len = u32::from_be_bytes(*len) as usize;
        let chunk = after.get(..len).ok_or_else(|| {
            corrupt(format!(
                "xerial chunk of {len} bytes, {} present",
                after.len()
            ))
        })?;
        raw_snappy(chunk, &mut out, limit)?;
        at = after.get(len..).unwrap_or_default();
    }
    Ok(out)
}

/// Appends the raw snappy block `block` to `out`, keeping `out` within `limit`.
fn raw_snappy(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), DecompressError> {
    let corrupt = |e: snap::Error| DecompressError::Corrupt {
        codec: "snappy",
        reason: e.to_string(),
    };
    // The block announces its length first: checked before anything is allocated for it.
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    if len > limit.saturating_sub(out.len()) {
        return Err(DecompressError::TooLarge {
            codec: "snappy",
            limit,
        });
    }
    let start = out.len();
    out.resize(start + len, 0);
    let target = out.get_mut(start..).unwrap_or_default();
    let n = snap::raw::Decoder::new()
        .decompress(block, target)
        .map_err(corrupt)?;
    out.truncate(start + n);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    const TEXT: &[u8] = b"replica-follower keeps Kafka partitions byte for byte; \
        replica-follower keeps Kafka partitions byte for byte; 0123456789";

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zstd(data: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(data, 3).unwrap()
    }

    /// snappy-java's framing of `chunks`, each compressed on its own.
    fn xerial(chunks: &[&[u8]]) -> Vec<u8> {
        let mut out = XERIAL_MAGIC.to_vec();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for c in chunks {
            let z = snap::raw::Encoder::new().compress_vec(c).unwrap();
            out.extend_from_slice(&(z.len() as u32).to_be_bytes());
            out.extend_from_slice(&z);
        }
        out
    }

    /// `data` compressed with `codec` (snappy: raw), as a producer would.
    pub(crate) fn compressed(codec: i16, data: &[u8]) -> Vec<u8> {
        match codec {
            0 => data.to_vec(),
            1 => gzip(data),
            2 => snap::raw::Encoder::new().compress_vec(data).unwrap(),
            3 => lz4(data),
            4 => zstd(data),
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_codec_roundtrips() {
        for codec in 0..=4 {
            let z = compressed(codec, TEXT);
            let got = decompress(codec, &z, MAX_DECOMPRESSED).unwrap();
            assert_eq!(&*got, TEXT, "{}", codec_name(codec));
        }
    }

    #[test]
    fn xerial_snappy_chunks_are_joined() {
        let framed = xerial(&[&TEXT[..40], &TEXT[40..], b""]);
        assert_eq!(&*decompress(2, &framed, MAX_DECOMPRESSED).unwrap(), TEXT);
        // The header alone: no chunks, no records.
        assert!(
            decompress(2, &framed[..XERIAL_HEADER_SIZE], 100)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn concatenated_gzip_members_are_read_whole() {
        let two = [gzip(&TEXT[..10]), gzip(&TEXT[10..])].concat();
        assert_eq!(&*decompress(1, &two, MAX_DECOMPRESSED).unwrap(), TEXT);
    }

    #[test]
    fn output_past_the_limit_is_refused_for_every_codec() {
        // 1 MiB of zeros compresses to almost nothing: a small bomb.
        let zeros = vec![0u8; 1 << 20];
        for codec in 0..=4 {
            let z = compressed(codec, &zeros);
            assert_eq!(
                decompress(codec, &z, 1000).unwrap_err(),
                DecompressError::TooLarge {
                    codec: codec_name(codec),
                    limit: 1000
                },
                "{}",
                codec_name(codec)
            );
            // Exactly at the limit is fine.
            assert_eq!(decompress(codec, &z, 1 << 20).unwrap().len(), 1 << 20);
        }
        let framed = xerial(&[&zeros[..600], &zeros[600..1200]]);
        assert!(matches!(
            decompress(2, &framed, 1000),
            Err(DecompressError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_snappy_length_header_announcing_gigabytes_allocates_nothing() {
        // Raw snappy starts with the uncompressed length as a varint: 4 GiB - 1 here.
        let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(matches!(
            decompress(2, &bomb, MAX_DECOMPRESSED),
            Err(DecompressError::TooLarge { .. }) | Err(DecompressError::Corrupt { .. })
        ));
    }

    #[test]
    fn corrupt_input_is_an_error_for_every_codec_never_a_panic() {
        for codec in 1..=4 {
            let good = compressed(codec, TEXT);
            // Every truncation and a flipped byte at every position.
            for cut in 0..good.len() {
                let _ = decompress(codec, &good[..cut], MAX_DECOMPRESSED);
            }
            for at in 0..good.len() {
                let mut bad = good.clone();
                bad[at] ^= 0x55;
                let _ = decompress(codec, &bad, MAX_DECOMPRESSED);
            }
            let err = decompress(codec, b"not compressed at all", MAX_DECOMPRESSED).unwrap_err();
            assert!(
                matches!(err, DecompressError::Corrupt { codec: c, .. } if c == codec_name(codec)),
                "{}: {err}",
                codec_name(codec)
            );
        }
        // Xerial framing cut inside its header, inside a length, inside a chunk.
        let framed = xerial(&[TEXT]);
        for cut in [10, XERIAL_HEADER_SIZE + 2, framed.len() - 1] {
            let err = decompress(2, &framed[..cut], MAX_DECOMPRESSED).unwrap_err();
            assert!(err.to_string().contains("snappy"), "{err}");
        }
        assert_eq!(
            decompress(6, TEXT, MAX_DECOMPRESSED).unwrap_err(),
            DecompressError::UnknownCodec(6)
        );
    }
}
