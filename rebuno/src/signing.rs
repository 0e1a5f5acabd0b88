//! Request signing shared by the kernel and agents: `Rebuno-Signature: sha256=<hex>` where
//! `hex = HMAC-SHA256(secret, raw body)`, and constant-time comparisons for signatures and
//! bearer tokens.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `Rebuno-Signature` value for `body` under `secret`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str(crate::protocol::SIGNATURE_PREFIX);
    for b in digest {
        out.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
        out.push(char::from(b"0123456789abcdef"[(b & 0xf) as usize]));
    }
    out
}

/// Whether `header` is exactly the signature of `body` under `secret` (compared in constant
/// time over the whole header string, so prefix and lowercase hex must match).
pub fn verify(secret: &str, body: &[u8], header: &str) -> bool {
    constant_time_eq(sign(secret, body).as_bytes(), header.as_bytes())
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
}
