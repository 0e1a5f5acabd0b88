//! Tamper evidence for receipt streams: a store opened with a [`SigningKey`] records a signed
//! checkpoint of a stream's head ([`SignedHead`]: stream, length, head hash, time, key id) in
//! the same transaction as every append (the SQLite store signs the heads of a group commit
//! together, each with its [`HeadProof`]), and [`verify_signed`] checks a stream with nothing but
//! the public key: the hash chain, every checkpoint, the unsigned tail after the last one, and
//! (given one kept outside the database) a witness the stream must still extend. See
//! `durable_support::audit` for what each check catches.

use crate::receipt::{Receipt, VerifyFailure, verify};
pub use durable_support::audit::{AuditFailure, Coverage, read_witness};
pub use durable_support::keys::{
    HeadError, HeadProof, KeyError, PublicKey, SignedHead, SigningKey,
};

/// The environment variable naming the signing key file of the `receipt` binary.
pub const SIGNING_KEY_ENV: &str = "RECEIPT_SIGNING_KEY";
/// The environment variable naming the `receipt` binary's witness file.
pub const WITNESS_FILE_ENV: &str = "RECEIPT_WITNESS_FILE";

/// Why a stream failed [`verify_signed`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignedVerifyFailure {
    /// The hash chain itself is broken (at an index).
    #[error(transparent)]
    Chain(#[from] VerifyFailure),
    /// The chain links, but does not agree with its signatures or the witness.
    #[error(transparent)]
    Audit(#[from] AuditFailure),
}

/// Verifies `chain` (stream `stream`'s receipts) against its recorded `checkpoints`, signed by
/// `key`, and an optional `witness`; at most `max_unsigned_tail` receipts may follow the last
/// checkpoint. Answers how much of the stream the signatures cover.
pub fn verify_signed(
    stream: &str,
    chain: &[Receipt],
    checkpoints: &[SignedHead],
    key: &PublicKey,
    witness: Option<&SignedHead>,
    max_unsigned_tail: u64,
) -> Result<Coverage, SignedVerifyFailure> {
    verify(chain)?;
    let hashes: Vec<&str> = chain.iter().map(Receipt::hash).collect();
    Ok(durable_support::audit::audit(
        durable_support::audit::AuditInput {
            stream,
            hashes: &hashes,
            checkpoints,
            keys: std::slice::from_ref(key),
            witness,
            max_unsigned_tail,
        },
    )?)
}

/// The checkpoint a store records after an append: `stream` has `length` receipts ending in
/// `head`, signed at `now_ms`.
pub(crate) fn checkpoint(
    key: &SigningKey,
    stream: &str,
    length: u64,
    head: &str,
    now_ms: i64,
) -> SignedHead {
    key.sign_head(
        stream,
        length,
        head,
        &durable_support::civil::iso_ms(now_ms),
    )
}
