//! Kafka's UUIDs (topic ids): 16 bytes on the wire, written as text the way Kafka's
//! `Uuid.toString` does — URL-safe base64 without padding, 22 characters.
//! The all-zero UUID means "unset" (a broker that does not know topic ids).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl Uuid {
    pub const ZERO: Uuid = Uuid([0; 16]);

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Parses Kafka's text form (22 URL-safe base64 characters, no padding).
    pub fn parse(text: &str) -> Option<Uuid> {
        let text = text.trim();
        if text.len() != 22 {
            return None;
        }
        let mut bits: u32 = 0;
        let mut nbits = 0;
        let mut out = Vec::with_capacity(16);
        for c in text.bytes() {
            let v = u32::try_from(ALPHABET.iter().position(|&a| a == c)?).ok()?;
            bits = (bits << 6) | v;
            nbits += 6;
            if nbits >= 8 {
                nbits -= 8;
                let [.., byte] = (bits >> nbits).to_be_bytes();
                out.push(byte);
                bits &= (1 << nbits) - 1;
            }
        }
        // 22 characters carry 132 bits: the last 4 must be zero in a canonical encoding.
        if bits != 0 {
            return None;
        }
        let bytes: [u8; 16] = out.try_into().ok()?;
        Some(Uuid(bytes))
    }
}

impl fmt::Display for Uuid {
    #[expect(
        clippy::indexing_slicing,
        reason = "indexes are masked to six bits: always within the 64-symbol alphabet"
    )]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::with_capacity(22);
        let mut bits: u32 = 0;
        let mut nbits = 0;
        for &b in &self.0 {
            bits = (bits << 8) | u32::from(b);
            nbits += 8;
            while nbits >= 6 {
                nbits -= 6;
                s.push(ALPHABET[((bits >> nbits) & 0x3f) as usize] as char);
            }
            bits &= (1 << nbits) - 1;
        }
        if nbits > 0 {
            s.push(ALPHABET[((bits << (6 - nbits)) & 0x3f) as usize] as char);
        }
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafka_text_form() {
        // Kafka: new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L).toString()
        let u = Uuid([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
        assert_eq!(u.to_string(), "AQIDBAUGBwgJCgsMDQ4PEA");
        assert_eq!(Uuid::parse("AQIDBAUGBwgJCgsMDQ4PEA"), Some(u));
        assert_eq!(Uuid::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
    }

    #[test]
    fn roundtrip_and_rejects_bad_text() {
        for seed in 0u8..=255 {
            let u = Uuid(std::array::from_fn(|i| {
                seed.wrapping_mul(31).wrapping_add(i as u8 * 17)
            }));
            assert_eq!(Uuid::parse(&u.to_string()), Some(u));
        }
        assert_eq!(Uuid::parse("short"), None);
        assert_eq!(Uuid::parse("AQIDBAUGBwgJCgsMDQ4PE+"), None);
        assert_eq!(
            Uuid::parse("AQIDBAUGBwgJCgsMDQ4PEB"),
            None,
            "non-zero trailing bits"
        );
    }
}
