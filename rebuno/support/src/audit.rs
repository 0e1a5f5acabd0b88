//! Checking a hash-linked stream against its signed checkpoints and an outside witness, for
//! both models (a receipt stream, a kernel execution's event log). The caller has already
//! checked that the entries link (each `prev` is its predecessor's hash, each hash matches its
//! entry); this module checks what an attacker who can write to the database could still fake
//! without the signing key:
//!
//! - a rewritten entry with every later hash recomputed: some checkpoint's signed head no
//!   longer matches the entry at its length;
//! - a cut tail with the head fixed up: a checkpoint names a length the stream no longer
//!   reaches, or the witness does;
//! - deleted checkpoints: the part after the last checkpoint is longer than the bound;
//! - a whole database rolled back to an older copy: the stream no longer extends the witness;
//! - a checkpoint signed by another key, or forged: its signature does not verify.
//!
//! A stream with no checkpoint at all verifies as unsigned (it was written before a key was
//! configured); a witness given with it still has to be extended, so deleting every checkpoint
//! is caught by the witness.

use crate::keys::{HeadError, PublicKey, SignedHead};
use std::fmt;

/// What to check a stream against.
#[derive(Debug, Clone, Copy)]
pub struct AuditInput<'a> {
    /// The stream's name (each checkpoint and the witness must name it).
    pub stream: &'a str,
    /// The hash of each entry, in order (already checked to link).
    pub hashes: &'a [&'a str],
    /// The stream's recorded checkpoints, in any order.
    pub checkpoints: &'a [SignedHead],
    /// The keys they may be signed with (one per writer that signs: each checkpoint names its
    /// key's id).
    pub keys: &'a [PublicKey],
    /// A signed head kept outside the database, if the auditor has one.
    pub witness: Option<&'a SignedHead>,
    /// How many entries may follow the last checkpoint before that is reported as deleted
    /// checkpoints.
    pub max_unsigned_tail: u64,
}

/// How much of an intact stream the signatures cover.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Coverage {
    /// Entries in the stream.
    pub length: u64,
    /// Entries covered by a valid checkpoint (the longest checkpoint's length; each covers
    /// every entry before it through the hash links).
    pub signed_length: u64,
    /// Checkpoints checked.
    pub checkpoints: usize,
    /// The witnessed length the stream extends, when a witness was given.
    pub witness_length: Option<u64>,
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.signed_length, self.length) {
            (_, 0) => write!(f, "empty stream")?,
            (0, n) => write!(
                f,
                "unsigned up to index {} (no checkpoint: written before a key was configured)",
                n - 1
            )?,
            (s, n) if s == n => write!(f, "signed up to index {} (all {n} entries)", n - 1)?,
            (s, n) => write!(
                f,
                "signed up to index {} ({s} of {n} entries; the last {} unsigned)",
                s - 1,
                n - s
            )?,
        }
        write!(f, "; {} checkpoint(s)", self.checkpoints)?;
        if let Some(w) = self.witness_length {
            write!(f, "; extends the witnessed length {w}")?;
        }
        Ok(())
    }
}

/// The first thing found wrong. `Display` names the length or index it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditFailure {
    /// A checkpoint's signature does not verify with the given key.
    #[error("checkpoint at length {length}: {error}")]
    Checkpoint {
        /// The length the checkpoint names.
        length: u64,
        /// Why its signature fails.
        error: HeadError,
    },
    /// A checkpoint of another stream was recorded with this one.
    #[error("checkpoint at length {length} names stream {named:?}")]
    OtherStream {
        /// The length the checkpoint names.
        length: u64,
        /// The stream it names.
        named: String,
    },
    /// A checkpoint's head is not the entry at its length: an entry before it was rewritten.
    #[error(
        "entry at index {index} does not match the checkpoint signed at length {length}: an entry at index {from} to {index} was rewritten"
    )]
    Rewritten {
        /// The checkpoint's length.
        length: u64,
        /// The entry it names (`length - 1`).
        index: u64,
        /// The first index not covered by an agreeing checkpoint.
        from: u64,
    },
    /// A checkpoint names a length the stream no longer reaches: its tail was cut.
    #[error(
        "checkpoint signed at length {length}, but the stream has {have} entries: its tail was cut"
    )]
    Cut {
        /// The checkpoint's length.
        length: u64,
        /// Entries in the stream.
        have: u64,
    },
    /// The part after the last checkpoint is longer than the bound.
    #[error(
        "{count} entries after the last checkpoint (length {after}) are unsigned, more than the bound of {bound}: checkpoints were deleted, or a writer had no signing key"
    )]
    UnsignedTail {
        /// The last checkpoint's length.
        after: u64,
        /// Entries after it.
        count: u64,
        /// The bound.
        bound: u64,
    },
    /// The witness does not verify with the given key (or names another stream).
    #[error("the witness: {0}")]
    Witness(String),
    /// The stream does not extend the witnessed head: cut, or rolled back to an older copy.
    #[error(
        "the stream has {have} entries but the witness saw {length}: the stream was cut or rolled back"
    )]
    BehindWitness {
        /// The witnessed length.
        length: u64,
        /// Entries in the stream.
        have: u64,
    },
    /// The entry at the witnessed length is not the witnessed head.
    #[error(
        "entry at index {index} is not the witnessed head (length {length}): the stream was rewritten or replaced"
    )]
    DivergesFromWitness {
        /// The witnessed length.
        length: u64,
        /// The entry it names.
        index: u64,
    },
}

/// Checks a linked stream against its checkpoints and witness (see the module docs).
pub fn audit(input: AuditInput<'_>) -> Result<Coverage, AuditFailure> {
    let have = input.hashes.len() as u64;
    let mut checkpoints: Vec<&SignedHead> = input.checkpoints.iter().collect();
    checkpoints.sort_by_key(|c| c.length);
    let mut covered = 0u64;
    for c in &checkpoints {
        c.verify_any(input.keys)
            .map_err(|error| AuditFailure::Checkpoint {
                length: c.length,
                error,
            })?;
        if c.stream != input.stream {
            return Err(AuditFailure::OtherStream {
                length: c.length,
                named: c.stream.clone(),
            });
        }
        check_head(input.hashes, c, covered)?;
        covered = c.length;
    }
    if let Some(last) = checkpoints.last() {
        let count = have - last.length;
        if count > input.max_unsigned_tail {
            return Err(AuditFailure::UnsignedTail {
                after: last.length,
                count,
                bound: input.max_unsigned_tail,
            });
        }
    }
    let witness_length = match input.witness {
        None => None,
        Some(w) => {
            w.verify_any(input.keys)
                .map_err(|e| AuditFailure::Witness(e.to_string()))?;
            if w.stream != input.stream {
                return Err(AuditFailure::Witness(format!(
                    "it is of stream {:?}",
                    w.stream
                )));
            }
            if w.length > have {
                return Err(AuditFailure::BehindWitness {
                    length: w.length,
                    have,
                });
            }
            if w.length > 0 && input.hashes[(w.length - 1) as usize] != w.head {
                return Err(AuditFailure::DivergesFromWitness {
                    length: w.length,
                    index: w.length - 1,
                });
            }
            Some(w.length)
        }
    };
    Ok(Coverage {
        length: have,
        signed_length: covered,
        checkpoints: checkpoints.len(),
        witness_length,
    })
}

/// Checks that checkpoint `c` names the entry at its length; `covered` is the longest length
/// an earlier checkpoint vouched for.
fn check_head(hashes: &[&str], c: &SignedHead, covered: u64) -> Result<(), AuditFailure> {
    let have = hashes.len() as u64;
    if c.length > have {
        return Err(AuditFailure::Cut {
            length: c.length,
            have,
        });
    }
    let matches = match c.length {
        0 => c.head.is_empty(),
        n => hashes[(n - 1) as usize] == c.head,
    };
    if !matches {
        return Err(AuditFailure::Rewritten {
            length: c.length,
            index: c.length.saturating_sub(1),
            from: covered,
        });
    }
    Ok(())
}

/// The largest witness file read as one JSON object (`receipt head --signed` output); larger
/// files are read as JSON lines.
const WITNESS_OBJECT_MAX: u64 = 64 * 1024;
/// The longest line of a witness file of JSON lines.
const WITNESS_LINE_MAX: u64 = 64 * 1024;

/// The head of `stream` a witness file holds: the file is one signed head as `receipt head
/// --signed` prints it, or JSON lines of heads as a witness writer appends them
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SigningKey;

    const AT: &str = "2026-01-01T00:00:00.000000Z";

    struct Fixture {
        key: SigningKey,
        hashes: Vec<String>,
        checkpoints: Vec<SignedHead>,
    }

    /// A stream of `n` entries checkpointed after every `every` entries (and at the end).
    fn stream(n: usize, every: usize) -> Fixture {
        let key = SigningKey::generate().unwrap();
        let hashes: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
        let mut checkpoints = Vec::new();
        for len in (every..=n).step_by(every).chain([n]) {
            if checkpoints
                .iter()
                .any(|c: &SignedHead| c.length == len as u64)
            {
                continue;
            }
            checkpoints.push(key.sign_head("s", len as u64, &hashes[len - 1], AT));
        }
        Fixture {
            key,
            hashes,
            checkpoints,
        }
    }

    fn run(
        f: &Fixture,
        hashes: &[String],
        witness: Option<&SignedHead>,
    ) -> Result<Coverage, AuditFailure> {
        let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
        audit(AuditInput {
            stream: "s",
            hashes: &refs,
            checkpoints: &f.checkpoints,
            keys: &[f.key.public()],
            witness,
            max_unsigned_tail: 2,
        })
    }

    #[test]
    fn an_intact_stream_says_how_much_is_signed() {
        let f = stream(10, 4);
        let c = run(&f, &f.hashes, None).unwrap();
        assert_eq!((c.length, c.signed_length, c.checkpoints), (10, 10, 3));
        assert!(c.to_string().contains("signed up to index 9"), "{c}");
        let unsigned = Fixture {
            checkpoints: vec![],
            ..stream(5, 5)
        };
        let c = run(&unsigned, &unsigned.hashes, None).unwrap();
        assert!(c.to_string().starts_with("unsigned up to index 4"), "{c}");
    }

    #[test]
    fn a_rewritten_entry_is_caught_by_the_next_checkpoint() {
        let f = stream(10, 4);
        let mut hashes = f.hashes.clone();
        // Entry 5 rewritten and every later hash recomputed: the links hold, the heads not.
        for h in &mut hashes[5..] {
            h.push('\'');
        }
        let err = run(&f, &hashes, None).unwrap_err();
        assert_eq!(
            err,
            AuditFailure::Rewritten {
                length: 8,
                index: 7,
                from: 4
            }
        );
        assert!(err.to_string().contains("index 4 to 7"), "{err}");
    }

    #[test]
    fn a_cut_tail_is_caught_by_a_checkpoint_or_the_witness() {
        let f = stream(10, 4);
        let err = run(&f, &f.hashes[..9], None).unwrap_err();
        assert_eq!(
            err,
            AuditFailure::Cut {
                length: 10,
                have: 9
            }
        );
        // The attacker also deletes the checkpoints past the cut: the witness still knows.
        let witness = f.key.sign_head("s", 10, &f.hashes[9], AT);
        let cut = Fixture {
            checkpoints: f.checkpoints[..2].to_vec(),
            hashes: f.hashes[..8].to_vec(),
            key: f.key,
        };
        let err = run(&cut, &cut.hashes, Some(&witness)).unwrap_err();
        assert_eq!(
            err,
            AuditFailure::BehindWitness {
                length: 10,
                have: 8
            }
        );
    }

    #[test]
    fn deleted_checkpoints_leave_an_unsigned_tail() {
        let mut f = stream(10, 2);
        f.checkpoints.retain(|c| c.length <= 6);
        let err = run(&f, &f.hashes, None).unwrap_err();
        assert_eq!(
            err,
            AuditFailure::UnsignedTail {
                after: 6,
                count: 4,
                bound: 2
            }
        );
        // Every checkpoint deleted looks unsigned, but not to a witness.
        let witness = f.key.sign_head("s", 8, &f.hashes[7], AT);
        f.checkpoints.clear();
        assert!(run(&f, &f.hashes, None).is_ok());
        assert!(run(&f, &f.hashes, Some(&witness)).is_ok());
        let mut replaced = f.hashes.clone();
        replaced[7].push('x');
        let err = run(&f, &replaced, Some(&witness)).unwrap_err();
        assert_eq!(
            err,
            AuditFailure::DivergesFromWitness {
                length: 8,
                index: 7
            }
        );
    }

    #[test]
    fn another_key_or_stream_is_refused() {
        let mut f = stream(4, 2);
        let other = SigningKey::generate().unwrap();
        f.checkpoints
            .push(other.sign_head("s", 3, &f.hashes[2], AT));
        let err = run(&f, &f.hashes, None).unwrap_err();
        assert!(
            matches!(
                err,
                AuditFailure::Checkpoint {
                    length: 3,
                    error: HeadError::OtherKey { .. }
                }
            ),
            "{err}"
        );
        let mut f = stream(4, 2);
        f.checkpoints
            .push(f.key.sign_head("t", 3, &f.hashes[2], AT));
        assert!(matches!(
            run(&f, &f.hashes, None).unwrap_err(),
            AuditFailure::OtherStream { length: 3, .. }
        ));
        let f = stream(4, 2);
        let witness = other.sign_head("s", 4, &f.hashes[3], AT);
        assert!(matches!(
            run(&f, &f.hashes, Some(&witness)).unwrap_err(),
            AuditFailure::Witness(_)
        ));
    }
}
