//! Bounds-checked reader and growable writer for the Kafka wire primitives.
//!
//! Every byte that arrives from a broker passes through [`Reader`]: each read checks what is
//! left and returns [`DecodeError`] instead of panicking; every length or count read from the
//! wire is checked against the bytes that remain before anything is allocated for it.
//!
//! Encodings (all big-endian): fixed-width integers; UNSIGNED_VARINT (7 bits a byte, low group
//! first); VARINT/VARLONG (zig-zag, then unsigned varint); STRING (INT16 length, -1 null);
//! COMPACT_STRING (UNSIGNED_VARINT length+1, 0 null); BYTES (INT32 length); ARRAY (INT32
//! count, -1 null); COMPACT_ARRAY (UNSIGNED_VARINT count+1); tagged-field sections
//! (UNSIGNED_VARINT count, then tag, size, value for each field).

use std::fmt;

/// Why a wire or disk structure could not be decoded. Always names the field concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub what: String,
}

impl DecodeError {
    pub fn new(what: impl Into<String>) -> Self {
        DecodeError { what: what.into() }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed data: {}", self.what)
    }
}

impl std::error::Error for DecodeError {}

pub type DecodeResult<T> = Result<T, DecodeError>;

/// A cursor over a byte slice; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    /// What is still to be read.
    rest: &'a [u8],
    /// How long the whole slice was.
    len: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            rest: buf,
            len: buf.len(),
        }
    }

    pub fn position(&self) -> usize {
        self.len - self.rest.len()
    }

    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Takes the next `n` bytes; `what` names the field for the error.
    pub fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        let Some((out, rest)) = self.rest.split_at_checked(n) else {
            return Err(DecodeError::new(format!(
                "{what}: needs {n} bytes at position {}, only {} left",
                self.position(),
                self.remaining()
            )));
        };
        self.rest = rest;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> DecodeResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn i8(&mut self, what: &str) -> DecodeResult<i8> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }
    pub fn bool(&mut self, what: &str) -> DecodeResult<bool> {
        Ok(self.i8(what)? != 0)
    }
    pub fn i16(&mut self, what: &str) -> DecodeResult<i16> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &str) -> DecodeResult<i32> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> DecodeResult<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &str) -> DecodeResult<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }
    pub fn uuid(&mut self, what: &str) -> DecodeResult<[u8; 16]> {
        self.array(what)
    }

    pub fn unsigned_varint(&mut self, what: &str) -> DecodeResult<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.array::<1>(what)?[0];
            if i == 4 && b > 0x0f {
                return Err(DecodeError::new(format!(
                    "{what}: unsigned varint overflows 32 bits"
                )));
            }
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::new(format!(
            "{what}: unsigned varint longer than 5 bytes"
        )))
    }

    pub fn unsigned_varlong(&mut self, what: &str) -> DecodeResult<u64> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let b = self.array::<1>(what)?[0];
            if i == 9 && b > 0x01 {
                return Err(DecodeError::new(format!(
                    "{what}: varlong overflows 64 bits"
                )));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::new(format!(
            "{what}: varlong longer than 10 bytes"
        )))
    }

    pub fn varint(&mut self, what: &str) -> DecodeResult<i32> {
        let v = self.unsigned_varint(what)?;
        Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    pub fn varlong(&mut self, what: &str) -> DecodeResult<i64> {
        let v = self.unsigned_varlong(what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn checked_len(&self, len: i64, what: &str) -> DecodeResult<usize> {
        let Ok(len) = usize::try_from(len) else {
            return Err(DecodeError::new(format!("{what}: negative length {len}")));
        };
        if len > self.remaining() {
            return Err(DecodeError::new(format!(
                "{what}: length {len} runs past the end ({} bytes left)",
                self.remaining()
            )));
        }
        Ok(len)
    }

    fn utf8(bytes: &[u8], what: &str) -> DecodeResult<String> {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| DecodeError::new(format!("{what}: string is not UTF-8")))
    }

    /// STRING or COMPACT_STRING, nullable.
    pub fn nullable_string(&mut self, compact: bool, what: &str) -> DecodeResult<Option<String>> {
        match self.nullable_bytes_of(compact, false, what)? {
            None => Ok(None),
            Some(b) => Ok(Some(Self::utf8(b, what)?)),
        }
    }

    /// STRING or COMPACT_STRING; null is an error.
    pub fn string(&mut self, compact: bool, what: &str) -> DecodeResult<String> {
        self.nullable_string(compact, what)?
            .ok_or_else(|| DecodeError::new(format!("{what}: unexpected null string")))
    }

    /// Length-prefixed bytes: INT16 (`wide` false) or INT32 (`wide` true) lengths when not
    /// compact; UNSIGNED_VARINT length+1 when compact.
    fn nullable_bytes_of(
        &mut self,
        compact: bool,
        wide: bool,
        what: &str,
    ) -> DecodeResult<Option<&'a [u8]>> {
        let len: i64 = if compact {
            i64::from(self.unsigned_varint(what)?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        if len == -1 {
            return Ok(None);
        }
        let len = self.checked_len(len, what)?;
        Ok(Some(self.take(len, what)?))
    }

    /// BYTES / RECORDS (INT32 length) or their COMPACT forms, nullable.
    pub fn nullable_bytes(&mut self, compact: bool, what: &str) -> DecodeResult<Option<&'a [u8]>> {
        self.nullable_bytes_of(compact, true, what)
    }

    /// ARRAY / COMPACT_ARRAY count; `None` for a null array. The count is checked against the
    /// bytes left (each element takes at least `min_element_size` bytes), so a hostile count
    /// cannot make the caller allocate.
    pub fn array_len(
        &mut self,
        compact: bool,
        min_element_size: usize,
        what: &str,
    ) -> DecodeResult<Option<usize>> {
        let n: i64 = if compact {
            i64::from(self.unsigned_varint(what)?) - 1
        } else {
            i64::from(self.i32(what)?)
        };
        if n == -1 {
            return Ok(None);
        }
        let Ok(n) = usize::try_from(n) else {
            return Err(DecodeError::new(format!(
                "{what}: negative array count {n}"
            )));
        };
        if n.saturating_mul(min_element_size.max(1)) > self.remaining() {
            return Err(DecodeError::new(format!(
                "{what}: array count {n} cannot fit in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(Some(n))
    }

    /// Non-null array count.
    pub fn array_count(
        &mut self,
        compact: bool,
        min_element_size: usize,
        what: &str,
    ) -> DecodeResult<usize> {
        Ok(self
            .array_len(compact, min_element_size, what)?
            .unwrap_or(0))
    }

    /// Reads a tagged-field section, handing each (tag, value) to `on_field`; unknown tags are
    /// for the callback to ignore.
    pub fn tagged_fields(
        &mut self,
        what: &str,
        mut on_field: impl FnMut(u32, &'a [u8]) -> DecodeResult<()>,
    ) -> DecodeResult<()> {
        let count = self.unsigned_varint(what)?;
        if count as usize > self.remaining() {
            return Err(DecodeError::new(format!(
                "{what}: {count} tagged fields cannot fit"
            )));
        }
        let mut last: Option<u32> = None;
        for _ in 0..count {
            let tag = self.unsigned_varint(what)?;
            if last.is_some_and(|l| tag <= l) {
                return Err(DecodeError::new(format!("{what}: tag {tag} out of order")));
            }
            last = Some(tag);
            let size = self.unsigned_varint(what)?;
            let size = self.checked_len(i64::from(size), what)?;
            let value = self.take(size, what)?;
            on_field(tag, value)?;
        }
        Ok(())
    }

    /// Reads and ignores a tagged-field section.
    pub fn skip_tagged_fields(&mut self, what: &str) -> DecodeResult<()> {
        self.tagged_fields(what, |_, _| Ok(()))
    }

    /// Errors when bytes are left over.
    pub fn expect_end(&self, what: &str) -> DecodeResult<()> {
        if self.remaining() != 0 {
            return Err(DecodeError::new(format!(
                "{what}: {} unexpected trailing bytes",
                self.remaining()
            )));
        }
        Ok(())
    }
}

/// The bytes `f` writes into a new writer (for tests of encoders).
#[cfg(test)]
pub fn encoded(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    f(&mut w);
    w.buf
}

/// Checks that `decode` fails on every strict prefix of `bytes` (for tests of decoders: a
/// response cut short is an error, never a panic or a value).
#[cfg(test)]
pub fn every_cut_fails<T: fmt::Debug>(bytes: &[u8], decode: impl Fn(&[u8]) -> DecodeResult<T>) {
    for cut in 0..bytes.len() {
        let got = decode(bytes.get(..cut).unwrap_or_default());
        assert!(got.is_err(), "cut at {cut} of {}: {got:?}", bytes.len());
    }
}

/// A length as Kafka's INT32, saturating instead of wrapping to a small or negative one. No
/// field the daemon writes comes near it (a Kafka frame holds at most `i32::MAX` bytes, and
/// a fetch response's records are bounded by the request's `max_bytes`).
pub fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A length as an unsigned varint, saturating as [`len_i32`] does.
pub fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Appends Kafka primitives to a byte vector.
#[derive(Debug, Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }
    pub fn i8(&mut self, v: i8) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.i8(i8::from(v))
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn uuid(&mut self, v: &[u8; 16]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    pub fn unsigned_varint(&mut self, v: u32) -> &mut Self {
        self.unsigned_varlong(u64::from(v))
    }
    pub fn unsigned_varlong(&mut self, mut v: u64) -> &mut Self {
        loop {
            let [low, ..] = v.to_le_bytes();
            v >>= 7;
            if v == 0 {
                self.buf.push(low);
                return self;
            }
            self.buf.push(low | 0x80);
        }
    }
    pub fn varint(&mut self, v: i32) -> &mut Self {
        self.unsigned_varint(((v << 1) ^ (v >> 31)) as u32)
    }
    pub fn varlong(&mut self, v: i64) -> &mut Self {
        self.unsigned_varlong(((v << 1) ^ (v >> 63)) as u64)
    }
    /// STRING or COMPACT_STRING; `None` encodes null.
    pub fn string(&mut self, v: Option<&str>, compact: bool) -> &mut Self {
        match (v, compact) {
            (None, true) => self.unsigned_varint(0),
            (None, false) => self.i16(-1),
            (Some(s), true) => {
                self.unsigned_varint(len_u32(s.len()).saturating_add(1));
                self.buf.extend_from_slice(s.as_bytes());
                self
            }
            (Some(s), false) => {
                self.i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
                self.buf.extend_from_slice(s.as_bytes());
                self
            }
        }
    }
    /// BYTES or COMPACT_BYTES; `None` encodes null.
    pub fn bytes(&mut self, v: Option<&[u8]>, compact: bool) -> &mut Self {
        match (v, compact) {
            (None, true) => self.unsigned_varint(0),
            (None, false) => self.i32(-1),
            (Some(b), true) => {
                self.unsigned_varint(len_u32(b.len()).saturating_add(1));
                self.buf.extend_from_slice(b);
                self
            }
            (Some(b), false) => {
                self.i32(len_i32(b.len()));
                self.buf.extend_from_slice(b);
                self
            }
        }
    }
    /// ARRAY or COMPACT_ARRAY count.
    pub fn array_len(&mut self, n: usize, compact: bool) -> &mut Self {
        if compact {
            self.unsigned_varint(len_u32(n).saturating_add(1))
        } else {
            self.i32(len_i32(n))
        }
    }
    /// A null ARRAY or COMPACT_ARRAY.
    pub fn null_array(&mut self, compact: bool) -> &mut Self {
        if compact {
            self.unsigned_varint(0)
        } else {
            self.i32(-1)
        }
    }
    /// An empty tagged-field section (only in flexible versions).
    pub fn empty_tags(&mut self, flexible: bool) -> &mut Self {
        if flexible {
            self.unsigned_varint(0);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn varint_golden_vectors() {
        let cases: &[(i32, &str)] = &[
            (0, "00"),
            (-1, "01"),
            (1, "02"),
            (-2, "03"),
            (63, "7e"),
            (-64, "7f"),
            (64, "8001"),
            (300, "d804"),
            (i32::MAX, "feffffff0f"),
            (i32::MIN, "ffffffff0f"),
        ];
        for &(v, h) in cases {
            let mut w = Writer::new();
            w.varint(v);
            assert_eq!(hex(&w.buf), h, "encode {v}");
            assert_eq!(Reader::new(&w.buf).varint("v").unwrap(), v, "decode {h}");
        }
    }

    #[test]
    fn unsigned_varint_and_varlong_golden_vectors() {
        for &(v, h) in &[
            (127u32, "7f"),
            (128, "8001"),
            (300, "ac02"),
            (16384, "808001"),
        ] {
            let mut w = Writer::new();
            w.unsigned_varint(v);
            assert_eq!(hex(&w.buf), h);
            assert_eq!(Reader::new(&w.buf).unsigned_varint("v").unwrap(), v);
        }
        let mut w = Writer::new();
        w.varlong(1_700_000_000_000);
        assert_eq!(hex(&w.buf), "80a0abfef962");
        assert_eq!(Reader::new(&w.buf).varlong("v").unwrap(), 1_700_000_000_000);
        for v in [i64::MIN, i64::MAX, -1, 0] {
            let mut w = Writer::new();
            w.varlong(v);
            assert_eq!(Reader::new(&w.buf).varlong("v").unwrap(), v);
        }
    }

    #[test]
    fn overlong_varint_is_rejected() {
        assert!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
                .unsigned_varint("x")
                .is_err()
        );
        assert!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x1f])
                .unsigned_varint("x")
                .is_err()
        );
        assert!(Reader::new(&[0x80]).unsigned_varint("x").is_err());
    }

    #[test]
    fn strings_roundtrip_in_both_forms() {
        for compact in [false, true] {
            let mut w = Writer::new();
            w.string(Some("abc"), compact).string(None, compact);
            let mut r = Reader::new(&w.buf);
            assert_eq!(
                r.nullable_string(compact, "s").unwrap().as_deref(),
                Some("abc")
            );
            assert_eq!(r.nullable_string(compact, "s").unwrap(), None);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn length_past_end_is_an_error_not_a_panic() {
        // INT16 length 10 with 2 bytes left.
        let mut r = Reader::new(&[0x00, 0x0a, b'a', b'b']);
        let e = r.string(false, "topic name").unwrap_err();
        assert!(e.what.contains("topic name"), "{e}");
        // INT32 bytes length larger than the buffer.
        assert!(
            Reader::new(&[0x7f, 0xff, 0xff, 0xff])
                .nullable_bytes(false, "records")
                .is_err()
        );
        // Negative length other than -1.
        assert!(Reader::new(&[0xff, 0xfe]).string(false, "s").is_err());
    }

    #[test]
    fn negative_or_huge_array_counts_are_errors() {
        assert!(
            Reader::new(&[0xff, 0xff, 0xff, 0xfe])
                .array_len(false, 1, "a")
                .is_err()
        );
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff])
                .array_len(false, 1, "a")
                .unwrap(),
            None
        );
        assert!(
            Reader::new(&[0x7f, 0xff, 0xff, 0xff, 0, 0])
                .array_len(false, 4, "a")
                .is_err()
        );
        assert!(
            Reader::new(&[0xff, 0xff, 0x0f])
                .array_len(true, 1, "a")
                .is_err()
        );
    }

    #[test]
    fn tagged_fields_are_read_and_unknown_ones_skipped() {
        // two fields: tag 0 size 1 [7], tag 5 size 2 [1,2]
        let bytes = [2u8, 0, 1, 7, 5, 2, 1, 2];
        let mut seen = Vec::new();
        Reader::new(&bytes)
            .tagged_fields("t", |tag, v| {
                seen.push((tag, v.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, vec![(0, vec![7]), (5, vec![1, 2])]);
        // out-of-order tags are rejected
        assert!(
            Reader::new(&[2u8, 5, 0, 0, 0])
                .skip_tagged_fields("t")
                .is_err()
        );
        // a size past the end is rejected
        assert!(
            Reader::new(&[1u8, 0, 9, 1])
                .skip_tagged_fields("t")
                .is_err()
        );
    }
}
