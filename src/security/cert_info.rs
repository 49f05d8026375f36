//! What a refusal message says about a certificate: its subject, its issuer and the names
//! it carries (subjectAltName DNS names and IP addresses), read from the DER bytes.
//!
//! # What is read
//! ```text
//! Certificate    ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature }
//! tbsCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber INTEGER,
//!                               signature SEQUENCE, issuer Name, validity SEQUENCE,
//!                               subject Name, subjectPublicKeyInfo SEQUENCE,
//!                               ... [3] extensions OPTIONAL }
//! Name           ::= SEQUENCE OF SET OF SEQUENCE { type OID, value string }
//! Extension      ::= SEQUENCE { extnID OID, critical BOOLEAN OPTIONAL, extnValue OCTET STRING }
//! subjectAltName ::= SEQUENCE OF GeneralName   -- [2] dNSName, [7] iPAddress
//! ```
//! Only for messages: the certificate was (or was not) verified by rustls/webpki. The bytes
//! come from the peer, so every length is checked against what remains; anything not
//! understood gives `None` (the message then goes without the subject), never a panic.

use std::fmt::Write as _;

/// A certificate as a message names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// `CN=broker-1, O=Example` (the attributes named below, in the certificate's order).
    pub subject: String,
    pub issuer: String,
    /// subjectAltName: DNS names and IP addresses.
    pub names: Vec<String>,
    /// The X.509 version: 1, 2 or 3 (rustls and webpki accept only 3 for a certificate that
    /// is not a trust anchor).
    pub version: u8,
    /// basicConstraints says `CA:TRUE`.
    pub is_ca: bool,
}

/// One DER element: its tag byte and contents.
struct Tlv<'a> {
    tag: u8,
    body: &'a [u8],
}

/// Splits the first element off `buf`: (element, the rest).
fn tlv(buf: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes.iter().fold(0usize, |a, &b| (a << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (body, rest) = rest.split_at(len);
    Some((Tlv { tag, body }, rest))
}

/// The elements of a constructed element's contents, in order.
fn children(mut buf: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let (t, rest) = tlv(buf)?;
        out.push(t);
        buf = rest;
    }
    Some(out)
}

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
// OIDs, DER-encoded.
const CN: &[u8] = &[0x55, 0x04, 0x03];
const O: &[u8] = &[0x55, 0x04, 0x0a];
const OU: &[u8] = &[0x55, 0x04, 0x0b];
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;

/// A Name as `CN=…, O=…` (CN, O and OU only); `?` for a value that is not text.
fn name(body: &[u8]) -> Option<String> {
    let mut out = String::new();
    for set in children(body)? {
        for atv in children(set.body)? {
            let parts = children(atv.body)?;
            let (Some(ty), Some(val)) = (parts.first(), parts.get(1)) else {
                return None;
            };
            let label = match ty.body {
                CN => "CN",
                O => "O",
                OU => "OU",
                _ => continue,
            };
            if !out.is_empty() {
                out.push_str(", ");
            }
            let text = std::str::from_utf8(val.body).unwrap_or("?");
            let _ = write!(out, "{label}={}", text.escape_debug());
        }
    }
    Some(if out.is_empty() {
        "(empty)".to_string()
    } else {
        out
    })
}

/// The value (the contents of the OCTET STRING) of extension `oid`, if present.
fn extension<'a>(extensions: &'a [u8], oid: &[u8]) -> Option<&'a [u8]> {
    // [3] EXPLICIT wraps the SEQUENCE OF Extension.
    let (seq, _) = tlv(extensions)?;
    for ext in children(seq.body)? {
        let parts = children(ext.body)?;
        if parts.first().is_some_and(|p| p.tag == OID && p.body == oid) {
            return parts
                .iter()
                .skip(1)
                .find(|p| p.tag == OCTET_STRING)
                .map(|p| p.body);
        }
    }
    None
}

/// basicConstraints ::= SEQUENCE { cA BOOLEAN DEFAULT FALSE, pathLenConstraint OPTIONAL }
fn says_ca(extensions: &[u8]) -> Option<bool> {
    let value = extension(extensions, BASIC_CONSTRAINTS)?;
    let (seq, _) = tlv(value)?;
    let first = children(seq.body)?.into_iter().next();
    Some(first.is_some_and(|b| b.tag == BOOLEAN && b.body.iter().any(|&x| x != 0)))
}

/// The subjectAltName extension's DNS names and IP addresses.
fn alt_names(extensions: &[u8], out: &mut Vec<String>) -> Option<()> {
    let Some(value) = extension(extensions, SUBJECT_ALT_NAME) else {
        return Some(());
    };
    let (names, _) = tlv(value)?;
    for gn in children(names.body)? {
        match gn.tag {
            0x82 => out.push(String::from_utf8_lossy(gn.body).into_owned()),
            0x87 => match gn.body.len() {
                4 => {
                    let mut a = [0u8; 4];
                    a.copy_from_slice(gn.body);
                    out.push(std::net::Ipv4Addr::from(a).to_string());
                }
                16 => {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(gn.body);
                    out.push(std::net::Ipv6Addr::from(a).to_string());
                }
                _ => {}
            },
            _ => {}
        }
    }
    Some(())
}

/// Subject, issuer and names of a DER certificate; `None` when it cannot be read.
pub fn describe(der: &[u8]) -> Option<CertInfo> {
    let (cert, _) = tlv(der)?;
    let (tbs, _) = tlv(cert.body)?;
    if cert.tag != SEQUENCE || tbs.tag != SEQUENCE {
        return None;
    }
    let fields = children(tbs.body)?;
    // The version is [0] EXPLICIT and optional (absent in v1 certificates): INTEGER 0 is
    // v1, 1 v2, 2 v3.
    let first = fields.first()?;
    let skip = usize::from(first.tag == 0xa0);
    let version = if skip == 1 {
        let (v, _) = tlv(first.body)?;
        match (v.tag, v.body) {
            (INTEGER, &[n]) if n < 3 => n + 1,
            _ => return None,
        }
    } else {
        1
    };
    let issuer = name(fields.get(skip + 2)?.body)?;
    let subject = name(fields.get(skip + 4)?.body)?;
    let mut names = Vec::new();
    let mut is_ca = false;
    if let Some(ext) = fields.iter().skip(skip + 6).find(|f| f.tag == 0xa3) {
        alt_names(ext.body, &mut names);
        is_ca = says_ca(ext.body).unwrap_or(false);
    }
    Some(CertInfo {
        subject,
        issuer,
        names,
        version,
        is_ca,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made with `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes
    /// -subj "/O=Test/CN=broker-1" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1"`.
    const PEM: &str = include_str!("testdata/broker-1.pem");

    fn der() -> Vec<u8> {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::from_pem_slice(PEM.as_bytes())
            .expect("fixture")
            .to_vec()
    }

    #[test]
    fn subject_issuer_and_alt_names_are_read() {
        let info = describe(&der()).expect("readable");
        assert_eq!(info.subject, "O=Test, CN=broker-1");
        assert_eq!(info.issuer, "O=Test, CN=broker-1");
        assert_eq!(info.names, ["localhost", "127.0.0.1"]);
        assert_eq!(info.version, 3);
        // `req -x509` marks its certificate a CA.
        assert!(info.is_ca);
    }

    #[test]
    fn cut_or_flipped_bytes_give_none_or_an_answer_never_a_panic() {
        let der = der();
        for cut in 0..der.len() {
            let _ = describe(&der[..cut]);
        }
        for i in 0..der.len() {
            let mut d = der.clone();
            d[i] ^= 0xff;
            let _ = describe(&d);
        }
        assert!(describe(&[]).is_none());
        assert!(describe(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
    }
}
