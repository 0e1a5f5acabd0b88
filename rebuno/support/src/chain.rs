//! One entry of a hash-linked stream, in the form both models hash: a receipt of the receipt
//! model, and an event of a kernel execution's log (exported as a receipt, so one audit format
//! serves both). An entry's hash is SHA-256 (lowercase hex) over the RFC 8785 canonical JSON
//! of its envelope `{body, context (only when present), id, prev (null for the first entry),
//! stream, ts}`; `prev` is the hash of the entry before it.

use crate::canonical::{self, CanonError};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical envelope bytes of one entry (the exact input of its hash). `context`, when
/// present, must already be a JSON value.
pub fn envelope_bytes(
    id: &str,
    ts: i64,
    stream: &str,
    prev: Option<&str>,
    body: &Value,
    context: Option<&Value>,
) -> Result<Vec<u8>, CanonError> {
    // Keys in RFC 8785 order: body, context, id, prev, stream, ts.
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"body\":");
    canonical::write_value(&mut out, body)?;
    if let Some(ctx) = context {
        out.extend_from_slice(b",\"context\":");
        canonical::write_value(&mut out, ctx)?;
    }
    out.extend_from_slice(b",\"id\":");
    canonical::write_str(&mut out, id);
    out.extend_from_slice(b",\"prev\":");
    match prev {
        Some(p) => canonical::write_str(&mut out, p),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"stream\":");
    canonical::write_str(&mut out, stream);
    out.extend_from_slice(b",\"ts\":");
    canonical::write_value(&mut out, &Value::from(ts))?;
    out.push(b'}');
    Ok(out)
}

/// An entry id: `<ts in base36>-<16 lowercase hex of suffix>` (a receipt draws the suffix from
/// entropy; a kernel event uses its sequence number).
pub fn entry_id(ts: u64, suffix: [u8; 8]) -> String {
    let mut id = base36(ts);
    id.push('-');
    id.push_str(&hex(&suffix));
    id
}

/// A non-negative integer in lowercase base36 (`Number#toString(36)`).
pub fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 13];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    String::from_utf8_lossy(&buf[i..]).into_owned()
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
    out
}

/// SHA-256 of `bytes` as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_envelope_is_the_canonical_json_of_its_fields() {
        let body = json!({"type": "a", "n": 1.0, "z": [true, null]});
        let ctx = json!({"trace": "t"});
        let bytes = envelope_bytes("k-00", 7, "s", Some("ab"), &body, Some(&ctx)).unwrap();
        let whole = json!({"id": "k-00", "ts": 7, "stream": "s", "prev": "ab", "body": body,
                           "context": ctx});
        assert_eq!(bytes, canonical::canonicalize(&whole).unwrap());
        let first = envelope_bytes("k-00", 7, "s", None, &body, None).unwrap();
        let whole = json!({"id": "k-00", "ts": 7, "stream": "s", "prev": null, "body": body});
        assert_eq!(first, canonical::canonicalize(&whole).unwrap());
    }

    #[test]
    fn ids_are_base36_time_and_hex_suffix() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(entry_id(36, 1u64.to_be_bytes()), "10-0000000000000001");
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
