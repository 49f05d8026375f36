//! The envelope of every object in the bucket: a header naming how the body is sealed, then
//! the body, plain with a checksum or encrypted in authenticated chunks.
//!
//! ```text
//! Common header (6 bytes)
//! 0   magic        4  `RFOB`
//! 4   version      1  1
//! 5   mode         1  0 = plain, 1 = AES-256-GCM in chunks
//!
//! Plain (mode 0)
//! 6   length       8  u64 BE: plaintext length L
//! 14  plaintext    L
//! 14+L crc        4  u32 BE: CRC-32C of bytes 0 .. 14+L (header, length and plaintext)
//!
//! Encrypted (mode 1): the header is bytes 0 .. 65
//! 6   key id       8  first 8 bytes of HMAC-SHA256(master key, "replica-follower offsite key id")
//! 14  chunk size   4  u32 BE: plaintext bytes per chunk (65536 when written here), C > 0
//! 18  salt        32  random, per object
//! 50  nonce prefix 7  random, per object
//! 57  length       8  u64 BE: plaintext length L
//! 65  chunks          N = max(1, ceil(L / C)) chunks, each the ciphertext of C plaintext
//!                     bytes (the last one: the rest, possibly 0) followed by its 16-byte tag
//! ```
//! The object's length is therefore exactly `65 + L + 16 * N` (encrypted) or `18 + L` (plain);
//! any other length is refused before any work.
//!
//! Encryption: each object has its own AES-256 key, `HKDF-SHA256(ikm = master key, salt,
//! info = "replica-follower offsite object v1")` (RFC 5869, 32 bytes). Chunk `i` is sealed
//! with AES-256-GCM under the nonce `prefix (7) || i (u32 BE) || last (u8: 1 on the final
//! chunk, else 0)` — the STREAM construction — and the associated data `header (65 bytes) ||
//! object name` (the key in the bucket, without the configured prefix). So a chunk cannot be
//! altered, reordered, dropped, moved to another object or another name, the stream cannot be
//! cut short after any chunk, and the header (length and key id included) cannot be changed
//! without the final tag check failing. The key id is public: it tells a wrong key apart from
//! damage before any decryption.
//!
//! Plain mode binds nothing: its CRC-32C proves only that the bytes a GET returns are the bytes
//! that were put. With a key configured, a plain object is refused ([`OpenError::Unencrypted`]),
//! since anyone allowed to write the bucket could have put it there; [`describe`] lets a caller
//! that wants to read an older plain object anyway decide so explicitly.
//!
//! Nothing here does I/O but [`Key::from_file`] and [`seal`]'s random salt and nonce prefix;
//! decoding never panics and allocates at most the plaintext length once the object's whole
//! length has been checked against its header.

use crate::security;
use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{AeadInOut, KeyInit, Nonce, Tag};
use anyhow::{Context, Result, bail};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::io::Read;
use std::path::Path;

/// The first bytes of every object.
pub const MAGIC: [u8; 4] = *b"RFOB";
/// The format version written and read here.
pub const VERSION: u8 = 1;
/// Mode byte: plain body with a CRC-32C.
pub const MODE_PLAIN: u8 = 0;
/// Mode byte: AES-256-GCM in chunks.
pub const MODE_AES256_GCM_CHUNKED: u8 = 1;
/// Plaintext bytes per encrypted chunk, as written.
pub const CHUNK_SIZE: u32 = 65536;

const COMMON_LEN: usize = 6;
const PLAIN_LENGTH_AT: usize = COMMON_LEN;
const PLAIN_HEADER_LEN: usize = PLAIN_LENGTH_AT + 8;
const CRC_LEN: usize = 4;
const KEY_ID_AT: usize = COMMON_LEN;
const CHUNK_SIZE_AT: usize = KEY_ID_AT + 8;
const SALT_AT: usize = CHUNK_SIZE_AT + 4;
const SALT_LEN: usize = 32;
const NONCE_PREFIX_AT: usize = SALT_AT + SALT_LEN;
const NONCE_PREFIX_LEN: usize = 7;
const LENGTH_AT: usize = NONCE_PREFIX_AT + NONCE_PREFIX_LEN;
const ENCRYPTED_HEADER_LEN: usize = LENGTH_AT + 8;
const TAG_LEN: usize = 16;

const KEY_ID_LABEL: &[u8] = b"replica-follower offsite key id";
const HKDF_INFO: &[u8] = b"replica-follower offsite object v1";
const KEY_ADVICE: &str = "must hold 32 random bytes as 64 hex digits, e.g. `openssl rand -hex 32`";

/// The most bytes an object sealed from `plain_len` bytes of plaintext can take, in either
/// mode (the encrypted one: its header and a tag per chunk).
pub fn sealed_len_at_most(plain_len: u64) -> u64 {
    let chunks = plain_len.div_ceil(u64::from(CHUNK_SIZE)).max(1);
    plain_len
        .saturating_add(ENCRYPTED_HEADER_LEN as u64)
        .saturating_add(chunks.saturating_mul(TAG_LEN as u64))
        .max(plain_len.saturating_add((PLAIN_HEADER_LEN + CRC_LEN) as u64))
}

/// The master key of the offsite copies (32 bytes). Its `Debug` shows only its public id.
#[derive(Clone)]
pub struct Key {
    bytes: [u8; 32],
    id: [u8; 8],
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key {{ id: {} }}", hex(&self.id))
    }
}

impl Key {
    /// The key in `path`: 64 hex digits, surrounding whitespace allowed. The file must be a
    /// secret file ([`security::check_secret_file`]); errors name it and never show its bytes.
    pub fn from_file(path: &Path) -> Result<Key> {
        security::check_secret_file(path)?;
        let mut text = String::new();
        // A key file is 65 bytes; reading a few more tells an over-long file from a key.
        std::fs::File::open(path)
            .and_then(|f| f.take(4096).read_to_string(&mut text))
            .with_context(|| format!("cannot read the offsite key file `{}`", path.display()))?;
        Key::from_hex(&text).with_context(|| format!("offsite key file `{}`", path.display()))
    }

    /// The key written as 64 hex digits (either case), surrounding whitespace allowed.
    pub fn from_hex(text: &str) -> Result<Key> {
        let digits = text.trim();
        if let Some(at) = digits.find(|c: char| !c.is_ascii_hexdigit()) {
            bail!(
                "character {} is not a hex digit: the key {KEY_ADVICE}",
                at + 1
            );
        }
        if digits.len() != 64 {
            bail!("{} hex digits: the key {KEY_ADVICE}", digits.len());
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
            let text = std::str::from_utf8(pair).context("not hex")?;
            *byte = u8::from_str_radix(text, 16).context("not hex")?;
        }
        Ok(Key::from_bytes(bytes))
    }

    /// The key from its raw bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Key {
        let mac = hmac_sha256(&bytes, &[KEY_ID_LABEL]);
        let mut id = [0u8; 8];
        id.iter_mut().zip(mac).for_each(|(d, s)| *d = s);
        Key { bytes, id }
    }

    /// The key's public id: the first 8 bytes of HMAC-SHA256(key, "replica-follower offsite
    /// key id"), stored in each encrypted object's header so that a wrong key is told apart
    /// from damage.
    pub fn id(&self) -> [u8; 8] {
        self.id
    }
}

/// How an object is sealed, read from its header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealing {
    Plain,
    Encrypted { key_id: [u8; 8] },
}

/// Why sealed bytes could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// The bytes do not start with `RFOB`.
    NotAnObject,
    /// A format version this build does not read.
    UnsupportedVersion { version: u8 },
    /// A mode byte this build does not know.
    UnknownMode { mode: u8 },
    /// Encrypted, and no key was given.
    NeedsKey { key_id: [u8; 8] },
    /// Encrypted with the key of id `expected` (the object's); the key given has id `found`.
    WrongKey { expected: [u8; 8], found: [u8; 8] },
    /// Plain, and a key was given: refused (anyone allowed to write the bucket could have put it).
    Unencrypted,
    /// A check failed in chunk `chunk` (0 for a plain object).
    Damaged { chunk: u64, why: &'static str },
    /// Shorter than its header says (or than a header).
    Truncated,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NotAnObject => {
                write!(f, "not an offsite object (it does not start with `RFOB`)")
            }
            OpenError::UnsupportedVersion { version } => write!(
                f,
                "offsite object format version {version}; this build reads version {VERSION}"
            ),
            OpenError::UnknownMode { mode } => write!(f, "unknown offsite object mode {mode}"),
            OpenError::NeedsKey { key_id } => write!(
                f,
                "encrypted with the key of id {}, and no offsite key is configured",
                hex(key_id)
            ),
            OpenError::WrongKey { expected, found } => write!(
                f,
                "encrypted with the key of id {}, not with the configured key (id {})",
                hex(expected),
                hex(found)
            ),
            OpenError::Unencrypted => write!(
                f,
                "not encrypted while an offsite key is configured: refused, as anyone allowed to write the bucket could have put it there"
            ),
            OpenError::Damaged { chunk, why } => write!(f, "damaged in chunk {chunk}: {why}"),
            OpenError::Truncated => write!(f, "truncated: shorter than its header says"),
        }
    }
}

impl std::error::Error for OpenError {}

/// The object's bytes for `plaintext`: encrypted under a fresh salt and nonce prefix with
/// `key`, plain with a CRC-32C without. `name` is the object's key in the bucket (without the
/// configured prefix), bound into the authentication.
pub fn seal(key: Option<&Key>, name: &str, plaintext: &[u8]) -> Result<Vec<u8>> {
    let Some(key) = key else {
        return seal_plain(plaintext);
    };
    let random = security::random_bytes(SALT_LEN + NONCE_PREFIX_LEN)?;
    let mut salt = [0u8; SALT_LEN];
    let mut prefix = [0u8; NONCE_PREFIX_LEN];
    let (s, p) = random
        .split_at_checked(SALT_LEN)
        .context("short random read")?;
    salt.iter_mut().zip(s).for_each(|(d, s)| *d = *s);
    prefix.iter_mut().zip(p).for_each(|(d, s)| *d = *s);
    seal_encrypted(key, name, plaintext, &salt, &prefix, CHUNK_SIZE)
}

/// Whether `sealed` is encrypted, and under which key id: for a clear message before any work.
pub fn describe(sealed: &[u8]) -> Result<Sealing, OpenError> {
    match read_mode(sealed)? {
        MODE_PLAIN => Ok(Sealing::Plain),
        _ => Ok(Sealing::Encrypted {
            key_id: field(sealed, KEY_ID_AT)?,
        }),
    }
}

/// The plaintext of `sealed`, the object `name` (without the configured prefix), after every
/// check of the format above.
pub fn open(key: Option<&Key>, name: &str, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
    match read_mode(sealed)? {
        MODE_PLAIN if key.is_some() => Err(OpenError::Unencrypted),
        MODE_PLAIN => open_plain(sealed),
        _ => open_encrypted(key, name, sealed),
    }
}

fn seal_plain(plaintext: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(PLAIN_HEADER_LEN + plaintext.len() + CRC_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, MODE_PLAIN]);
    out.extend_from_slice(&u64::try_from(plaintext.len())?.to_be_bytes());
    out.extend_from_slice(plaintext);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

fn seal_encrypted(
    key: &Key,
    name: &str,
    plaintext: &[u8],
    salt: &[u8; SALT_LEN],
    prefix: &[u8; NONCE_PREFIX_LEN],
    chunk_size: u32,
) -> Result<Vec<u8>> {
    let chunk = usize::try_from(chunk_size)?;
    if chunk == 0 {
        bail!("chunk size 0");
    }
    let chunks = plaintext.len().div_ceil(chunk).max(1);
    let mut out = Vec::with_capacity(ENCRYPTED_HEADER_LEN + plaintext.len() + chunks * TAG_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, MODE_AES256_GCM_CHUNKED]);
    out.extend_from_slice(&key.id);
    out.extend_from_slice(&chunk_size.to_be_bytes());
    out.extend_from_slice(salt);
    out.extend_from_slice(prefix);
    out.extend_from_slice(&u64::try_from(plaintext.len())?.to_be_bytes());
    let mut aad = out.clone();
    aad.extend_from_slice(name.as_bytes());
    let cipher = object_cipher(key, salt);
    // `chunks(0-length slice)` yields nothing: an empty plaintext is one empty final chunk.
    let pieces: Vec<&[u8]> = if plaintext.is_empty() {
        vec![&[]]
    } else {
        plaintext.chunks(chunk).collect()
    };
    for (index, piece) in pieces.iter().enumerate() {
        let index_u32 = u32::try_from(index).context("object too large for 2^32 chunks")?;
        let nonce = chunk_nonce(prefix, index_u32, index + 1 == chunks);
        let start = out.len();
        out.extend_from_slice(piece);
        let body = out.get_mut(start..).context("chunk out of range")?;
        let tag = cipher
            .encrypt_inout_detached(&nonce, &aad, body.into())
            .map_err(|_| anyhow::anyhow!("AES-256-GCM refused chunk {index}"))?;
        out.extend_from_slice(tag.as_slice());
    }
    Ok(out)
}

fn open_plain(sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
    let length = u64::from_be_bytes(field(sealed, PLAIN_LENGTH_AT)?);
    let expected = length
        .checked_add((PLAIN_HEADER_LEN + CRC_LEN) as u64)
        .ok_or(OpenError::Truncated)?;
    check_length(sealed, expected, 0)?;
    let (covered, crc) = sealed
        .split_last_chunk::<CRC_LEN>()
        .ok_or(OpenError::Truncated)?;
    if crc32c::crc32c(covered) != u32::from_be_bytes(*crc) {
        return Err(OpenError::Damaged {
            chunk: 0,
            why: "CRC-32C mismatch",
        });
    }
    let plaintext = covered
        .get(PLAIN_HEADER_LEN..)
        .ok_or(OpenError::Truncated)?;
    Ok(plaintext.to_vec())
}

fn open_encrypted(key: Option<&Key>, name: &str, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
    let key_id: [u8; 8] = field(sealed, KEY_ID_AT)?;
    let chunk_size = u64::from(u32::from_be_bytes(field(sealed, CHUNK_SIZE_AT)?));
    let salt: [u8; SALT_LEN] = field(sealed, SALT_AT)?;
    let prefix: [u8; NONCE_PREFIX_LEN] = field(sealed, NONCE_PREFIX_AT)?;
    let length = u64::from_be_bytes(field(sealed, LENGTH_AT)?);
    let key = key.ok_or(OpenError::NeedsKey { key_id })?;
    if key.id != key_id {
        return Err(OpenError::WrongKey {
            expected: key_id,
            found: key.id,
        });
    }
    if chunk_size == 0 {
        return Err(OpenError::Damaged {
            chunk: 0,
            why: "chunk size 0 in the header",
        });
    }
    let chunks = length.div_ceil(chunk_size).max(1);
    // Chunk indexes are u32 in the nonce: more chunks cannot have been written.
    if chunks > 1 << 32 {
        return Err(OpenError::Damaged {
            chunk: 0,
            why: "more chunks than a nonce can number",
        });
    }
    let expected = chunks
        .checked_mul(TAG_LEN as u64)
        .and_then(|t| t.checked_add(length))
        .and_then(|t| t.checked_add(ENCRYPTED_HEADER_LEN as u64))
        .ok_or(OpenError::Truncated)?;
    check_length(sealed, expected, chunks)?;

    let (header, mut rest) = sealed
        .split_at_checked(ENCRYPTED_HEADER_LEN)
        .ok_or(OpenError::Truncated)?;
    let mut aad = Vec::with_capacity(header.len() + name.len());
    aad.extend_from_slice(header);
    aad.extend_from_slice(name.as_bytes());
    let cipher = object_cipher(key, &salt);
    let mut out = Vec::with_capacity(usize::try_from(length).map_err(|_| OpenError::Truncated)?);
    let mut left = length;
    for index in 0..chunks {
        let plain_len = left.min(chunk_size);
        left -= plain_len;
        let take = usize::try_from(plain_len).map_err(|_| OpenError::Truncated)?;
        let (ciphertext, after) = rest.split_at_checked(take).ok_or(OpenError::Truncated)?;
        let (tag, after) = after
            .split_first_chunk::<TAG_LEN>()
            .ok_or(OpenError::Truncated)?;
        rest = after;
        let index_u32 = u32::try_from(index).map_err(|_| OpenError::Truncated)?;
        let nonce = chunk_nonce(&prefix, index_u32, index + 1 == chunks);
        let start = out.len();
        out.extend_from_slice(ciphertext);
        let body = out.get_mut(start..).ok_or(OpenError::Truncated)?;
        cipher
            .decrypt_inout_detached(&nonce, &aad, body.into(), &Tag::<Aes256Gcm>::from(*tag))
            .map_err(|_| OpenError::Damaged {
                chunk: index,
                why: "authentication failed (altered, reordered or from another object)",
            })?;
    }
    Ok(out)
}

/// Refuses `sealed` unless it is exactly `expected` bytes long (`chunks`: the chunk an
/// over-long object's extra bytes follow).
fn check_length(sealed: &[u8], expected: u64, chunks: u64) -> Result<(), OpenError> {
    let actual = sealed.len() as u64;
    if actual < expected {
        return Err(OpenError::Truncated);
    }
    if actual > expected {
        return Err(OpenError::Damaged {
            chunk: chunks.saturating_sub(1),
            why: "bytes after the end its header gives",
        });
    }
    Ok(())
}

/// The mode byte of `sealed`, after checking the magic, the version and the header's length.
fn read_mode(sealed: &[u8]) -> Result<u8, OpenError> {
    let magic_seen = sealed.len().min(MAGIC.len());
    if sealed.get(..magic_seen) != MAGIC.get(..magic_seen) {
        return Err(OpenError::NotAnObject);
    }
    let [_, _, _, _, version, mode] = field::<COMMON_LEN>(sealed, 0)?;
    if version != VERSION {
        return Err(OpenError::UnsupportedVersion { version });
    }
    let header_len = match mode {
        MODE_PLAIN => PLAIN_HEADER_LEN,
        MODE_AES256_GCM_CHUNKED => ENCRYPTED_HEADER_LEN,
        _ => return Err(OpenError::UnknownMode { mode }),
    };
    if sealed.len() < header_len {
        return Err(OpenError::Truncated);
    }
    Ok(mode)
}

/// The `N` bytes of `sealed` at `at`.
fn field<const N: usize>(sealed: &[u8], at: usize) -> Result<[u8; N], OpenError> {
    at.checked_add(N)
        .and_then(|end| sealed.get(at..end))
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or(OpenError::Truncated)
}

/// The STREAM nonce of chunk `index`: prefix || index (u32 BE) || last flag.
fn chunk_nonce(prefix: &[u8; NONCE_PREFIX_LEN], index: u32, last: bool) -> Nonce<Aes256Gcm> {
    let mut nonce = [0u8; 12];
    let tail = index.to_be_bytes().into_iter().chain([u8::from(last)]);
    nonce
        .iter_mut()
        .zip(prefix.iter().copied().chain(tail))
        .for_each(|(d, s)| *d = s);
    Nonce::<Aes256Gcm>::from(nonce)
}

/// AES-256-GCM under the object's own key, HKDF-SHA256(master key, salt, info) (RFC 5869;
/// one block of output is the 32 bytes wanted).
fn object_cipher(key: &Key, salt: &[u8; SALT_LEN]) -> Aes256Gcm {
    let prk = hmac_sha256(salt, &[&key.bytes]);
    let okm = hmac_sha256(&prk, &[HKDF_INFO, &[1]]);
    Aes256Gcm::new(&okm.into())
}

/// HMAC-SHA256 of the concatenated `parts` under a 32-byte key. The key is zero-padded to
/// SHA-256's 64-byte block, which is what HMAC does itself with a shorter key (RFC 2104), so
/// the infallible fixed-size constructor serves.
fn hmac_sha256(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block.iter_mut().zip(key).for_each(|(d, s)| *d = *s);
    let mut mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> Key {
        Key::from_bytes([seed; 32])
    }

    /// A deterministic stream of bytes for test inputs (xorshift64).
    fn noise(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn hkdf_and_hmac_match_rfc_5869_and_rfc_4231() {
        // RFC 4231 test case 2 has a short key ("Jefe"): zero-padded it must give the same MAC.
        let mut jefe = [0u8; 32];
        jefe[..4].copy_from_slice(b"Jefe");
        assert_eq!(
            hex(&hmac_sha256(&jefe, &[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // RFC 5869 A.1's PRK (salt 0x00..0x0c, IKM 22 x 0x0b), salt zero-padded to 32 bytes.
        let mut salt = [0u8; 32];
        for (i, b) in salt.iter_mut().take(13).enumerate() {
            *b = i as u8;
        }
        let prk = hmac_sha256(&salt, &[&[0x0b; 22]]);
        assert_eq!(
            hex(&prk),
            "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5"
        );
        // Its OKM's first block: T(1) = HMAC(PRK, info || 0x01), info 0xf0..0xf9.
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        assert_eq!(
            hex(&hmac_sha256(&prk, &[&info, &[1]])),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        );
    }

    #[test]
    fn sealed_objects_round_trip_at_chunk_boundaries() {
        let k = key(7);
        for size in [0usize, 1, 65535, 65536, 65537, 300_000] {
            let plain = noise(size as u64 + 1, size);
            let sealed = seal(Some(&k), "p/00000000000000000000.log", &plain).unwrap();
            let chunks = size.div_ceil(65536).max(1);
            assert_eq!(sealed.len(), 65 + size + 16 * chunks, "size {size}");
            assert_eq!(
                describe(&sealed).unwrap(),
                Sealing::Encrypted { key_id: k.id() }
            );
            let opened = open(Some(&k), "p/00000000000000000000.log", &sealed).unwrap();
            assert!(opened == plain, "size {size}");

            let sealed = seal(None, "any", &plain).unwrap();
            assert_eq!(sealed.len(), 18 + size);
            assert_eq!(describe(&sealed).unwrap(), Sealing::Plain);
            assert!(
                open(None, "other", &sealed).unwrap() == plain,
                "size {size}"
            );
        }
    }

    #[test]
    fn a_byte_map_golden_header() {
        let k = key(1);
        let sealed = seal_encrypted(&k, "n", b"abc", &[0xaa; 32], &[0xbb; 7], CHUNK_SIZE).unwrap();
        assert_eq!(&sealed[0..4], b"RFOB");
        assert_eq!(sealed[4], 1, "version");
        assert_eq!(sealed[5], 1, "mode");
        assert_eq!(&sealed[6..14], &k.id(), "key id");
        assert_eq!(&sealed[14..18], &[0, 1, 0, 0], "chunk size 65536");
        assert_eq!(&sealed[18..50], &[0xaa; 32], "salt");
        assert_eq!(&sealed[50..57], &[0xbb; 7], "nonce prefix");
        assert_eq!(&sealed[57..65], &3u64.to_be_bytes(), "length");
        assert_eq!(sealed.len(), 65 + 3 + 16);
        let plain = seal(None, "n", b"abc").unwrap();
        assert_eq!(&plain[..6], b"RFOB\x01\x00");
        assert_eq!(&plain[6..14], &3u64.to_be_bytes());
        assert_eq!(&plain[14..17], b"abc");
        assert_eq!(&plain[17..], &crc32c::crc32c(&plain[..17]).to_be_bytes());
    }

    #[test]
    fn another_name_fails_authentication() {
        let k = key(2);
        let sealed = seal(Some(&k), "a/1.log", b"records").unwrap();
        assert_eq!(
            open(Some(&k), "a/2.log", &sealed),
            Err(OpenError::Damaged {
                chunk: 0,
                why: "authentication failed (altered, reordered or from another object)"
            })
        );
    }

    #[test]
    fn swapped_chunks_fail() {
        let k = key(3);
        // Small chunks so that the test handles few bytes: 3 chunks of 4 bytes.
        let sealed = seal_encrypted(&k, "n", b"aaaabbbbcccc", &[1; 32], &[2; 7], 4).unwrap();
        assert_eq!(open(Some(&k), "n", &sealed).unwrap(), b"aaaabbbbcccc");
        let chunk = |i: usize| sealed[65 + 20 * i..65 + 20 * (i + 1)].to_vec();
        let mut swapped = sealed[..65].to_vec();
        for i in [1, 0, 2] {
            swapped.extend(chunk(i));
        }
        assert!(matches!(
            open(Some(&k), "n", &swapped),
            Err(OpenError::Damaged { chunk: 0, .. })
        ));
    }

    #[test]
    fn a_dropped_final_chunk_fails_even_with_the_length_rewritten() {
        let k = key(4);
        let sealed = seal_encrypted(&k, "n", b"aaaabbbbcc", &[1; 32], &[2; 7], 4).unwrap();
        let dropped = &sealed[..sealed.len() - (2 + 16)];
        assert_eq!(open(Some(&k), "n", dropped), Err(OpenError::Truncated));
        // Claiming 8 bytes makes chunk 1 the last: its nonce's last flag differs, so it fails.
        let mut relabelled = dropped.to_vec();
        relabelled[57..65].copy_from_slice(&8u64.to_be_bytes());
        assert!(matches!(
            open(Some(&k), "n", &relabelled),
            Err(OpenError::Damaged { .. })
        ));
        let mut extended = sealed.clone();
        extended.push(0);
        assert!(matches!(
            open(Some(&k), "n", &extended),
            Err(OpenError::Damaged { .. })
        ));
    }

    #[test]
    fn the_wrong_key_and_a_missing_key_are_told_apart_from_damage() {
        let (k, other) = (key(5), key(6));
        let sealed = seal(Some(&k), "n", b"x").unwrap();
        assert_eq!(
            open(Some(&other), "n", &sealed),
            Err(OpenError::WrongKey {
                expected: k.id(),
                found: other.id()
            })
        );
        assert_eq!(
            open(None, "n", &sealed),
            Err(OpenError::NeedsKey { key_id: k.id() })
        );
        let e = OpenError::NeedsKey { key_id: k.id() }.to_string();
        assert!(e.contains(&hex(&k.id())), "{e}");
        let plain = seal(None, "n", b"x").unwrap();
        assert_eq!(open(Some(&k), "n", &plain), Err(OpenError::Unencrypted));
    }

    #[test]
    fn plaintext_never_appears_in_the_ciphertext() {
        let pattern = b"0123456789abcdef";
        let plain: Vec<u8> = pattern.iter().copied().cycle().take(200_000).collect();
        let sealed = seal(Some(&key(8)), "n", &plain).unwrap();
        assert!(!sealed.windows(16).any(|w| w == pattern));
        // Two seals of the same bytes differ (fresh salt and nonce prefix).
        assert_ne!(sealed, seal(Some(&key(8)), "n", &plain).unwrap());
    }

    #[test]
    fn plain_mode_crc_catches_a_flipped_byte() {
        let mut sealed = seal(None, "n", b"some records").unwrap();
        sealed[20] ^= 0x10;
        assert_eq!(
            open(None, "n", &sealed),
            Err(OpenError::Damaged {
                chunk: 0,
                why: "CRC-32C mismatch"
            })
        );
    }

    #[test]
    fn every_truncation_and_bit_flip_is_refused_without_panic() {
        let k = key(9);
        let encrypted = seal_encrypted(&k, "n", &noise(1, 40), &[3; 32], &[4; 7], 16).unwrap();
        let plain = seal(None, "n", &noise(2, 40)).unwrap();
        for (sealed, key) in [(&encrypted, Some(&k)), (&plain, None)] {
            for len in 0..sealed.len() {
                assert!(open(key, "n", &sealed[..len]).is_err(), "length {len}");
                let _ = describe(&sealed[..len]);
            }
            for at in 0..sealed.len() {
                for bit in 0..8 {
                    let mut bad = sealed.clone();
                    bad[at] ^= 1 << bit;
                    assert!(open(key, "n", &bad).is_err(), "byte {at} bit {bit}");
                    let _ = describe(&bad);
                }
            }
        }
    }

    #[test]
    fn random_bytes_and_random_headers_never_panic() {
        let k = key(10);
        for seed in 1..2000u64 {
            let mut bytes = noise(seed, (seed % 200) as usize);
            // Half of the inputs get a valid common header, so the decoders past it are reached.
            if seed % 2 == 0 && bytes.len() >= 6 {
                bytes[..4].copy_from_slice(b"RFOB");
                bytes[4] = 1;
                bytes[5] = (seed % 4 == 0) as u8;
                if bytes.len() >= 14 && bytes[5] == 1 {
                    bytes[6..14].copy_from_slice(&k.id());
                }
            }
            let _ = describe(&bytes);
            assert!(open(Some(&k), "n", &bytes).is_err());
            assert!(open(None, "n", &bytes).is_err());
        }
    }

    #[test]
    fn a_huge_length_in_a_header_is_refused_before_allocating() {
        let k = key(11);
        let mut sealed = seal(Some(&k), "n", b"").unwrap();
        sealed[57..65].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(open(Some(&k), "n", &sealed).is_err());
        sealed[14..18].copy_from_slice(&1u32.to_be_bytes());
        assert!(open(Some(&k), "n", &sealed).is_err());
        let mut plain = seal(None, "n", b"").unwrap();
        plain[6..14].copy_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(open(None, "n", &plain), Err(OpenError::Truncated));
    }

    #[test]
    fn key_files_are_64_hex_digits_and_errors_never_show_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("offsite.key");
        let digits = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        std::fs::write(&path, format!("  {digits}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let k = Key::from_file(&path).unwrap();
        assert_eq!(k.id(), Key::from_hex(digits).unwrap().id());
        assert!(!format!("{k:?}").contains("0011"), "{k:?}");

        std::fs::write(&path, &digits[..62]).unwrap();
        let e = format!("{:#}", Key::from_file(&path).unwrap_err());
        assert!(
            e.contains("offsite.key") && e.contains("62 hex digits"),
            "{e}"
        );
        assert!(e.contains("openssl rand -hex 32"), "{e}");
        std::fs::write(&path, format!("{}zz", &digits[..62])).unwrap();
        let e = format!("{:#}", Key::from_file(&path).unwrap_err());
        assert!(
            e.contains("offsite.key") && e.contains("not a hex digit"),
            "{e}"
        );
        assert!(!e.contains("0011"), "{e}");
        std::fs::write(&path, format!("{digits}\n{digits}\n")).unwrap();
        assert!(Key::from_file(&path).is_err());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&path, digits).unwrap();
        let e = format!("{:#}", Key::from_file(&path).unwrap_err());
        assert!(e.contains("0644"), "{e}");
        assert!(Key::from_hex("é").is_err());
    }
}
