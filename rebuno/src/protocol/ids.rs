//! Id syntax: UUIDs in their canonical form and step ids.

use crate::identity;

/// Parses a UUID in any form Go's `uuid.Parse` reads (hyphenated, either case; `{…}`;
/// `urn:uuid:…`; 32 bare hex digits) and returns the canonical lowercase hyphenated form, or
/// `None` (`400 validation_error`). Version and variant bits are not checked.
pub fn canonical_uuid(s: &str) -> Option<String> {
    let body = match s.len() {
        36 | 32 => s,
        38 => s.strip_prefix('{')?.strip_suffix('}')?,
        45 => {
            let (prefix, rest) = s.split_at_checked(9)?;
            if !prefix.eq_ignore_ascii_case("urn:uuid:") {
                return None;
            }
            rest
        }
        _ => return None,
    };
    let bytes = body.as_bytes();
    let hyphenated = bytes.len() == 36;
    let mut out = String::with_capacity(36);
    let mut digits = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if hyphenated && matches!(i, 8 | 13 | 18 | 23) {
            if b != b'-' {
                return None;
            }
            continue;
        }
        if !b.is_ascii_hexdigit() {
            return None;
        }
        if matches!(digits, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(b.to_ascii_lowercase() as char);
        digits += 1;
    }
    (digits == 32).then_some(out)
}

/// Whether `s` is a step id: 64 lowercase hex digits.
pub fn is_step_id(s: &str) -> bool {
    identity::is_hex64(s)
}
