//! Request signing shared by the kernel and agents, and constant-time comparisons for
//! signatures and bearer tokens.
//!
//! Two schemes carry an HMAC-SHA256 under the agent's secret in `Rebuno-Signature`:
//!
//! * **v1** (`v1=<hex>`, SDK 0.17 and later, and this crate's agents): the MAC covers
//!   `rebuno-request-v1`, the method, the raw request target, the `Rebuno-Timestamp`, the two
//!   lease headers (each followed by LF) and then the raw body ([`V1Request`]). The kernel
//!   accepts it within [`V1_WINDOW_SECS`] of its clock, so a captured request is only good for
//!   the same method, target, lease and body, and only for a few minutes.
//! * **body-only** (`sha256=<hex>`, [`sign`]): the MAC covers the body alone. Webhooks to agents
//!   use it (every SDK expects it), and SDKs 0.14 to 0.16 sign their requests with it, which the
//!   kernel accepts only while legacy signing is on: such a signature has no timestamp and no
//!   target, so a captured one can be replayed at any time to any route taking that body.
//!
//! Both are written as lowercase hex and compared over the whole header string in constant time.

use crate::protocol::{SIGNATURE_PREFIX, SIGNATURE_V1_PREFIX};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far (in seconds, either way, inclusive) a v1 request's timestamp may be from the
/// kernel's clock.
pub const V1_WINDOW_SECS: i64 = 300;

/// The first line of every v1 signed message.
const V1_CONTEXT: &str = "rebuno-request-v1";

/// `prefix` followed by the lowercase hex HMAC-SHA256 under `secret` of `parts`, concatenated.
fn hmac_hex(secret: &str, prefix: &str, parts: &[&[u8]]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(prefix.len() + 2 * digest.len());
    out.push_str(prefix);
    for b in digest {
        out.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
        out.push(char::from(b"0123456789abcdef"[(b & 0xf) as usize]));
    }
    out
}

/// The body-only `Rebuno-Signature` value (`sha256=<hex>`) for `body` under `secret`: what
/// webhooks carry, and what SDKs 0.14 to 0.16 sign their requests with.
pub fn sign(secret: &str, body: &[u8]) -> String {
    hmac_hex(secret, SIGNATURE_PREFIX, &[body])
}

/// Whether `header` is exactly the body-only signature of `body` under `secret` (compared in
/// constant time over the whole header string, so prefix and lowercase hex must match).
pub fn verify(secret: &str, body: &[u8], header: &str) -> bool {
    constant_time_eq(sign(secret, body).as_bytes(), header.as_bytes())
}

/// What a v1 signature covers. The strings are the exact header values and request-line text,
/// never re-encoded: the target keeps its percent-escapes, and an absent lease header is the
/// empty string.
#[derive(Debug, Clone, Copy)]
pub struct V1Request<'a> {
    /// The method, e.g. `POST`.
    pub method: &'a str,
    /// The request target as sent: the escaped path and `?query` if any, including any
    /// base-URL path prefix (`/p/v0/executions/…` for a kernel at `http://host/p`).
    pub target: &'a str,
    /// The `Rebuno-Timestamp` value (Unix seconds).
    pub timestamp: &'a str,
    /// The `Rebuno-Dispatch-Id` value, or empty.
    pub dispatch_id: &'a str,
    /// The `Rebuno-Dispatch-Attempt` value, or empty.
    pub dispatch_attempt: &'a str,
    /// The raw body bytes (empty for a GET or an empty POST).
    pub body: &'a [u8],
}

impl V1Request<'_> {
    /// The `Rebuno-Signature` value (`v1=<hex>`) of this request under `secret`. The kernel's
    /// verifier and the agent's signer both come here, so they cannot disagree on the message.
    pub fn sign(&self, secret: &str) -> String {
        let lf: &[u8] = b"\n";
        hmac_hex(
            secret,
            SIGNATURE_V1_PREFIX,
            &[
                V1_CONTEXT.as_bytes(),
                lf,
                self.method.as_bytes(),
                lf,
                self.target.as_bytes(),
                lf,
                self.timestamp.as_bytes(),
                lf,
                self.dispatch_id.as_bytes(),
                lf,
                self.dispatch_attempt.as_bytes(),
                lf,
                self.body,
            ],
        )
    }

    /// Whether `header` is exactly this request's v1 signature under `secret` (constant time
    /// over the whole header string). The timestamp's freshness is checked separately
    /// ([`timestamp_is_fresh`]).
    pub fn verify(&self, secret: &str, header: &str) -> bool {
        constant_time_eq(self.sign(secret).as_bytes(), header.as_bytes())
    }
}

/// The Unix time of a `Rebuno-Timestamp` value: a base-10 64-bit integer (an optional sign,
/// then digits, nothing else). `None` otherwise.
pub fn parse_timestamp(value: &str) -> Option<i64> {
    // Rust's integer parser takes exactly that (ASCII digits only), as Go's `ParseInt` does.
    value.parse().ok()
}

/// Whether a v1 timestamp `ts` is within [`V1_WINDOW_SECS`] of `now` (both Unix seconds; the
/// edges are inside).
pub fn timestamp_is_fresh(ts: i64, now: i64) -> bool {
    ts.abs_diff(now) <= V1_WINDOW_SECS.unsigned_abs()
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_and_verifies() {
        // HMAC-SHA256 test case 2 of RFC 4231 ("Jefe", "what do ya want for nothing?").
        assert_eq!(
            sign("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let sig = sign("s3cret", b"{}");
        assert!(verify("s3cret", b"{}", &sig));
        assert!(!verify("s3cret", b"{ }", &sig));
        assert!(!verify("other", b"{}", &sig));
        assert!(!verify("s3cret", b"{}", &sig.to_uppercase()));
        assert!(!verify("s3cret", b"{}", sig.trim_start_matches("sha256=")));
    }

    const DISPATCH: &str = "01920000-0000-7000-8000-000000000001";

    fn vector<'a>(method: &'a str, target: &'a str, lease: bool, body: &'a [u8]) -> V1Request<'a> {
        V1Request {
            method,
            target,
            timestamp: "1700000000",
            dispatch_id: if lease { DISPATCH } else { "" },
            dispatch_attempt: if lease { "3" } else { "" },
            body,
        }
    }

    /// The three published v1 request-signing vectors (Python SDK 0.17 and later), secret
    /// `test-secret`.
    #[test]
    fn v1_matches_the_spec_vectors() {
        let get = vector("GET", "/v0/executions/alpha", false, b"");
        assert_eq!(
            get.sign("test-secret"),
            "v1=d0f262ef4226bcdf886ec35a7ce4cf77286055b563078faca8b307caa8ca5839"
        );
        let heartbeat = vector("POST", "/v0/executions/alpha/heartbeat", true, b"");
        assert_eq!(
            heartbeat.sign("test-secret"),
            "v1=63a3e161395bd65728afa785799ddb9e52c01f8e0a61d1d6a4089f582d334b0e"
        );
        // A base-URL prefix, percent-escapes left as sent, and a UTF-8 body whose `\n` is a
        // literal backslash and n.
        let body = "{\"text\":\"h\u{e9}llo \u{20ac} \u{1f642}\\n\"}";
        let escaped = vector(
            "POST",
            "/prefix/v0/executions/alpha%2Fbeta/steps?x=a%20b&x=%2F",
            true,
            body.as_bytes(),
        );
        assert_eq!(
            escaped.sign("test-secret"),
            "v1=08e2b66ec89c95a677798a9aa048949c38668f770f28a2beede0591e2860820b"
        );
    }

    #[test]
    fn v1_covers_every_field() {
        let base = vector("POST", "/v0/executions/alpha/heartbeat", true, b"{}");
        let sig = base.sign("test-secret");
        assert!(base.verify("test-secret", &sig));
        assert!(!base.verify("other", &sig));
        assert!(!base.verify("test-secret", &sig.to_uppercase()));
        assert!(!base.verify("test-secret", sig.trim_start_matches("v1=")));
        let changed = [
            V1Request {
                method: "PUT",
                ..base
            },
            V1Request {
                target: "/v0/executions/alpha/complete",
                ..base
            },
            V1Request {
                target: "/v0/executions/alpha/heartbeat?",
                ..base
            },
            V1Request {
                timestamp: "1700000001",
                ..base
            },
            V1Request {
                dispatch_id: "01920000-0000-7000-8000-000000000002",
                ..base
            },
            V1Request {
                dispatch_attempt: "4",
                ..base
            },
            V1Request {
                body: b"{ }",
                ..base
            },
        ];
        for other in changed {
            assert!(!other.verify("test-secret", &sig), "{other:?}");
        }
        // The fields are delimited: moving a byte from one field to the next changes the MAC.
        let shifted = V1Request {
            dispatch_id: "",
            dispatch_attempt: "3",
            ..vector("POST", "/x", false, b"")
        };
        let moved = V1Request {
            dispatch_id: "3",
            dispatch_attempt: "",
            ..shifted
        };
        assert_ne!(shifted.sign("k"), moved.sign("k"));
    }

    #[test]
    fn timestamps_are_base_10_int64_within_the_window() {
        assert_eq!(parse_timestamp("1700000000"), Some(1_700_000_000));
        assert_eq!(parse_timestamp("+5"), Some(5));
        assert_eq!(parse_timestamp("-5"), Some(-5));
        assert_eq!(parse_timestamp("9223372036854775807"), Some(i64::MAX));
        for bad in [
            "",
            "+",
            "-",
            " 1",
            "1 ",
            "1.0",
            "1e3",
            "0x10",
            "9223372036854775808",
            "١٢",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad:?}");
        }
        let now = 1_700_000_000;
        assert!(timestamp_is_fresh(now, now));
        assert!(timestamp_is_fresh(now - 300, now));
        assert!(timestamp_is_fresh(now + 300, now));
        assert!(!timestamp_is_fresh(now - 301, now));
        assert!(!timestamp_is_fresh(now + 301, now));
        assert!(!timestamp_is_fresh(i64::MIN, now));
        assert!(!timestamp_is_fresh(i64::MAX, -now));
    }
}
