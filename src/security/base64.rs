//! Base64 (RFC 4648 §4: the standard alphabet, `=` padding), as SCRAM messages and Kafka's
//! stored SCRAM credentials write salts, nonces, proofs and keys.
//!
//! Decoding is strict: the length must be a multiple of four, padding only at the end, and
//! the unused bits of the last character zero, so one string has one meaning.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `bytes` in base64 with padding.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        #[expect(
            clippy::indexing_slicing,
            reason = "masked to six bits: always within the 64-symbol alphabet"
        )]
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

fn value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Why a string is not base64; names the position, never echoes the text (it may be a key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base64Error(pub String);

impl std::fmt::Display for Base64Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not base64: {}", self.0)
    }
}

impl std::error::Error for Base64Error {}

/// The bytes `text` encodes.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    let s = text.as_bytes();
    if !s.len().is_multiple_of(4) {
        return Err(Base64Error(format!(
            "length {} is not a multiple of 4",
            s.len()
        )));
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let groups = s.len() / 4;
    for (g, quad) in s.chunks(4).enumerate() {
        let last = g + 1 == groups;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(Base64Error(format!("padding at character {}", g * 4)));
        }
        let mut n: u32 = 0;
        for (i, &c) in quad.iter().enumerate() {
            let v = if i >= 4 - pad {
                0
            } else {
                value(c).ok_or_else(|| {
                    Base64Error(format!("character {} is outside the alphabet", g * 4 + i))
                })?
            };
            n = (n << 6) | v;
        }
        let [_, b0, b1, b2] = n.to_be_bytes();
        let bytes = [b0, b1, b2];
        let keep = 3 - pad;
        // Unused low bits of the last character must be zero (RFC 4648 §3.5, canonical).
        if (pad == 1 && bytes[2] != 0) || (pad == 2 && bytes[1] != 0) {
            return Err(Base64Error(format!(
                "non-zero bits after the data at character {}",
                g * 4
            )));
        }
        out.extend_from_slice(bytes.get(..keep).unwrap_or_default());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_test_vectors_roundtrip() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn every_length_and_byte_roundtrips() {
        let all: Vec<u8> = (0..=255u8).collect();
        for n in 0..all.len() {
            let b = &all[all.len() - n..];
            assert_eq!(decode(&encode(b)).unwrap(), b, "length {n}");
        }
        assert_eq!(encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn bad_input_is_an_error_naming_where() {
        for bad in [
            "Zg=", "Zg", "Z===", "Zg==Zg==", "Zm9v!A==", "Zh==", "Zm9=", "====", "Zm 9",
        ] {
            let e = decode(bad).unwrap_err();
            assert!(!e.0.is_empty(), "{bad}");
        }
        assert!(decode("Zm9v!A==").unwrap_err().0.contains("character 4"));
    }
}
