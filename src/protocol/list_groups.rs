//! ListGroups (key 16), v0–5, flexible from v3: the groups one broker coordinates
//! (`ListGroups{Request,Response}.json`).
//!
//! Request: StatesFilter ARRAY STRING (v4+) · TypesFilter ARRAY STRING (v5+); empty filters
//! ask for every group.
//! Response: ThrottleTimeMs INT32 (v1+) · ErrorCode INT16 · Groups ARRAY{GroupId STRING,
//! ProtocolType STRING, GroupState STRING (v4+), GroupType STRING (v5+)}.

use super::codec::{DecodeResult, Reader, Writer};
use super::error::ErrorCode;

/// A group a broker coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    /// "consumer" for consumer groups; "" for a group that only committed offsets.
    pub protocol_type: String,
    /// Its state (v4+): Empty, Stable, Dead, …
    pub state: Option<String>,
}

/// Asks for every group, whatever its state or type.
pub fn encode_request(w: &mut Writer, version: i16) {
    let flexible = version >= 3;
    if version >= 4 {
        w.array_len(0, true);
    }
    if version >= 5 {
        w.array_len(0, true);
    }
    w.empty_tags(flexible);
}

/// The broker's error and its groups.
pub fn decode_response(body: &[u8], version: i16) -> DecodeResult<(ErrorCode, Vec<ListedGroup>)> {
    let flexible = version >= 3;
    let mut r = Reader::new(body);
    if version >= 1 {
        r.i32("ListGroups throttle_time_ms")?;
    }
    let error = ErrorCode(r.i16("ListGroups error_code")?);
    // The smallest group: its id and protocol type (and tags).
    let n = r.array_count(flexible, if flexible { 3 } else { 4 }, "ListGroups groups")?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        let group_id = r.string(flexible, "ListGroups group_id")?;
        let protocol_type = r.string(flexible, "ListGroups protocol_type")?;
        let state = if version >= 4 {
            Some(r.string(flexible, "ListGroups group_state")?)
        } else {
            None
        };
        if version >= 5 {
            r.string(flexible, "ListGroups group_type")?;
        }
        if flexible {
            r.skip_tagged_fields("ListGroups group tags")?;
        }
        groups.push(ListedGroup {
            group_id,
            protocol_type,
            state,
        });
    }
    if flexible {
        r.skip_tagged_fields("ListGroups tags")?;
    }
    Ok((error, groups))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::codec::{encoded, every_cut_fails};
    use crate::protocol::group::encode_list_groups_error;
    use crate::record::batch::tests::unhex;

    /// A v5 response: throttle, error, [compact "g", "consumer", state "Empty", type
    /// "classic", tags].
    pub(crate) const RESPONSE_V5: &str =
        "00000000 0000 02 0267 09 636f6e73756d6572 06 456d707479 08 636c6173736963 00 00";

    #[test]
    fn request_golden_bytes() {
        assert!(encoded(|w| encode_request(w, 0)).is_empty());
        assert_eq!(encoded(|w| encode_request(w, 3)), unhex("00"));
        // v4: an empty states filter; v5: and an empty types filter.
        assert_eq!(encoded(|w| encode_request(w, 4)), unhex("01 00"));
        assert_eq!(encoded(|w| encode_request(w, 5)), unhex("01 01 00"));
    }

    #[test]
    fn response_golden_bytes_decode_and_every_cut_fails() {
        let group = |state: Option<&str>| ListedGroup {
            group_id: "g".into(),
            protocol_type: "consumer".into(),
            state: state.map(String::from),
        };
        // v0: error 0, ["g", "consumer"].
        let v0 = unhex("0000 00000001 0001 67 0008 636f6e73756d6572");
        assert_eq!(
            decode_response(&v0, 0).unwrap(),
            (ErrorCode::NONE, vec![group(None)])
        );
        every_cut_fails(&v0, |b| decode_response(b, 0));
        let v5 = unhex(RESPONSE_V5);
        let want = (ErrorCode::NONE, vec![group(Some("Empty"))]);
        assert_eq!(decode_response(&v5, 5).unwrap(), want);
        every_cut_fails(&v5, |b| decode_response(b, 5));
    }

    #[test]
    fn the_listeners_refusal_decodes_as_the_brokers_error() {
        let e = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        for v in 0..=5 {
            let bytes = encoded(|w| encode_list_groups_error(w, v, e));
            assert_eq!(decode_response(&bytes, v).unwrap(), (e, Vec::new()), "v{v}");
        }
    }
}
