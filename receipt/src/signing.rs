//! Tamper evidence for receipt streams: a store opened with a [`SigningKey`] records a signed
//! checkpoint of a stream's head ([`SignedHead`]: stream, length, head hash, time, key id) in
//! the same transaction as every append, and [`verify_signed`] checks a stream with nothing but
//! the public key: the hash chain, every checkpoint, the unsigned tail after the last one, and
//! (given one kept outside the database) a witness the stream must still extend. See
//! `durable_support::audit` for what each check catches.

use crate::receipt::{Receipt, VerifyFailure, verify};
pub use durable_support::audit::{AuditFailure, Coverage};
pub use durable_support::keys::{HeadError, KeyError, PublicKey, SignedHead, SigningKey};

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
            key,
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

/// The largest witness file read as one JSON object (`receipt head --signed` output); larger
/// files are read as JSON lines.
const WITNESS_OBJECT_MAX: u64 = 64 * 1024;
/// The longest line of a witness file of JSON lines.
const WITNESS_LINE_MAX: u64 = 64 * 1024;

/// The head of `stream` a witness file holds: the file is one signed head as `receipt head
/// --signed` prints it, or JSON lines of heads as a [`crate::store::FileWitness`] appends them
/// (the longest head of `stream` among them; lines of other streams are skipped). Read line by
/// line, so a long witness file costs no more memory than one line.
pub fn read_witness(path: &std::path::Path, stream: &str) -> Result<SignedHead, String> {
    use std::io::{BufRead, Read};
    let open = || std::fs::File::open(path).map_err(|e| e.to_string());
    let size = open()?.metadata().map_err(|e| e.to_string())?.len();
    if size <= WITNESS_OBJECT_MAX {
        let mut text = String::new();
        open()?
            .read_to_string(&mut text)
            .map_err(|e| e.to_string())?;
        if let Ok(head) = serde_json::from_str::<SignedHead>(&text) {
            return if head.stream == stream {
                Ok(head)
            } else {
                Err(format!("it is a head of stream {:?}", head.stream))
            };
        }
    }
    let mut reader = std::io::BufReader::new(open()?);
    let mut best: Option<SignedHead> = None;
    let mut line = String::new();
    for number in 1.. {
        line.clear();
        let n = (&mut reader)
            .take(WITNESS_LINE_MAX + 1)
            .read_line(&mut line)
            .map_err(|e| format!("line {number}: {e}"))?;
        if n == 0 {
            break;
        }
        if n as u64 > WITNESS_LINE_MAX {
            return Err(format!(
                "line {number} is longer than {WITNESS_LINE_MAX} bytes"
            ));
        }
        if line.trim().is_empty() {
            continue;
        }
        let head: SignedHead = serde_json::from_str(&line)
            .map_err(|e| format!("line {number} is not a signed head: {e}"))?;
        if head.stream == stream && best.as_ref().is_none_or(|b| head.length >= b.length) {
            best = Some(head);
        }
    }
    best.ok_or_else(|| format!("it holds no signed head of stream {stream:?}"))
}
