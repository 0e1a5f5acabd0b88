//! Tamper evidence of executions' event logs, read back: the latest signed head of a log
//! (`GET /v0/executions/{id}/head`, a witness to keep elsewhere), a log recomputed as a chain
//! and checked against its signed checkpoints and a witness (`rebuno verify`), and a log
//! exported as a receipt stream with its checkpoints (`rebuno export`), which the receipt
//! model's `receipt verify --file` checks. How events are hashed and signed is
//! [`crate::store::chain`]'s.

use super::{Kernel, KernelError, KernelResult};
use crate::protocol::Event;
use crate::store::StoreExt;
use crate::store::chain::{
    self, AuditFailure, AuditInput, ChainCheck, Coverage, GapError, PublicKey, SignedHead,
};
use serde_json::{Value, json};

/// Events read per store round while a log is recomputed or exported.
const CHAIN_PAGE: usize = 500;

/// What to check an execution's log against ([`Kernel::audit_execution`]).
#[derive(Debug, Clone, Copy)]
pub struct AuditOptions<'a> {
    /// The public keys its checkpoints may be signed with (one per replica that signs).
    pub keys: &'a [PublicKey],
    /// A signed head kept outside the database, if the auditor has one.
    pub witness: Option<&'a SignedHead>,
    /// How many events may follow the last checkpoint before that is reported (checkpoints
    /// deleted, or a writer without a key).
    pub max_unsigned_tail: u64,
}

/// Why an execution's log does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogFailure {
    /// Events are missing from the sequence (deleted from the middle).
    #[error(transparent)]
    Gap(#[from] GapError),
    /// The events link, but disagree with their signatures or the witness.
    #[error(transparent)]
    Audit(#[from] AuditFailure),
}

/// What the console shows of an execution's log ([`Kernel::log_integrity`]).
#[derive(Debug, Clone)]
pub struct LogIntegrity {
    /// The key the log was checked with: this kernel's own (`None`: it signs nothing, so only
    /// the hash chain was recomputed).
    pub key_id: Option<String>,
    /// How much of the log the signatures cover, or what is wrong with it.
    pub outcome: Result<Coverage, LogFailure>,
}

/// An execution's log, recomputed, with its recorded checkpoints (read in one snapshot).
struct Recomputed {
    hashes: Vec<String>,
    checkpoints: Vec<SignedHead>,
}

impl Kernel {
    /// The latest signed head of execution `id`'s log: `None` when it has none (the kernel
    /// signs nothing without a key, and an empty log has no head). Not found: no execution.
    pub async fn execution_head(&self, id: &str) -> KernelResult<Option<SignedHead>> {
        let id = id.to_owned();
        let (exists, head) = self
            .inner
            .store
            .read(move |tx| {
                let exists = tx.executions().get(&id)?.is_some();
                Ok((exists, tx.events().latest_checkpoint(&id)?))
            })
            .await?;
        if !exists {
            return Err(KernelError::not_found());
        }
        Ok(head)
    }

    /// Recomputes execution `id`'s log as a chain and checks it against its signed
    /// checkpoints and `options`' witness; answers how much of it the signatures cover, or
    /// what is wrong (naming the index or the length). The outer error is the store's, or not
    /// found for a missing execution.
    pub async fn audit_execution(
        &self,
        id: &str,
        options: AuditOptions<'_>,
    ) -> KernelResult<Result<Coverage, LogFailure>> {
        let recomputed = match self.recompute(id).await? {
            Ok(r) => r,
            Err(gap) => return Ok(Err(gap.into())),
        };
        let hashes: Vec<&str> = recomputed.hashes.iter().map(String::as_str).collect();
        let stream = chain::stream(id);
        // Without a key only the chain is checked: no checkpoint can be.
        let checkpoints = match options.keys {
            [] => &[][..],
            _ => &recomputed.checkpoints[..],
        };
        Ok(chain::audit(AuditInput {
            stream: &stream,
            hashes: &hashes,
            checkpoints,
            keys: options.keys,
            witness: options.witness,
            max_unsigned_tail: options.max_unsigned_tail,
        })
        .map_err(LogFailure::from))
    }

    /// Execution `id`'s log checked as the console shows it: recomputed as a chain, and its
    /// signed heads checked with this kernel's own key when it signs (any unsigned tail is
    /// reported as coverage, not as a failure: an auditor sets the bound with `rebuno verify`).
    pub async fn log_integrity(&self, id: &str) -> KernelResult<LogIntegrity> {
        let key = self.inner.store.signing_public_key();
        let keys: Vec<PublicKey> = key.iter().cloned().collect();
        let outcome = self
            .audit_execution(
                id,
                AuditOptions {
                    keys: &keys,
                    witness: None,
                    max_unsigned_tail: u64::MAX,
                },
            )
            .await?;
        Ok(LogIntegrity {
            key_id: key.map(|k| k.id().to_owned()),
            outcome,
        })
    }

    /// Reads execution `id`'s events and checkpoints in one snapshot, hashing the events.
    async fn recompute(&self, id: &str) -> KernelResult<Result<Recomputed, GapError>> {
        let id = id.to_owned();
        let out = self
            .inner
            .store
            .read(move |tx| {
                if tx.executions().get(&id)?.is_none() {
                    return Ok(None);
                }
                let mut check = ChainCheck::default();
                let mut after = 0;
                loop {
                    let page = tx.events().page(&id, after, CHAIN_PAGE)?;
                    for event in &page.items {
                        if let Err(gap) = check.push(event) {
                            return Ok(Some(Err(gap)));
                        }
                    }
                    match page.items.last() {
                        Some(last) if page.next.is_some() => after = last.event_seq,
                        _ => break,
                    }
                }
                let checkpoints = tx.events().checkpoints(&id)?;
                Ok(Some(Ok(Recomputed {
                    hashes: check.hashes().to_vec(),
                    checkpoints,
                })))
            })
            .await?;
        out.ok_or_else(KernelError::not_found)
    }

    /// Execution `id`'s log as a receipt stream, one JSON value a line: `{"receipt": …}` for
    /// each event in order (the receipt wire form: id, ts, stream, prev, body, hash), then
    /// `{"checkpoint": …}` for each signed head. `receipt verify --file` checks it with the
    /// public key alone. `write` gets each line (without its newline).
    pub async fn export_execution(
        &self,
        id: &str,
        mut write: impl FnMut(&Value) -> std::io::Result<()>,
    ) -> KernelResult<u64> {
        let io = |e: std::io::Error| KernelError::internal(format!("export: {e}"));
        self.execution(id).await?;
        // Read first: a log only grows, so every checkpoint read now names events read after.
        let owned = id.to_owned();
        let checkpoints = self
            .inner
            .store
            .read(move |tx| tx.events().checkpoints(&owned))
            .await?;
        let mut prev: Option<String> = None;
        let mut after = 0;
        let mut count = 0;
        loop {
            let owned = id.to_owned();
            let page = self
                .inner
                .store
                .read(move |tx| tx.events().page(&owned, after, CHAIN_PAGE))
                .await?;
            for event in &page.items {
                if event.event_seq != count + 1 {
                    return Err(KernelError::internal(format!(
                        "export: {}",
                        GapError {
                            expected: count + 1,
                            found: event.event_seq
                        }
                    )));
                }
                let line = receipt_line(event, prev.as_deref());
                prev = line["receipt"]["hash"].as_str().map(str::to_owned);
                write(&line).map_err(io)?;
                count += 1;
            }
            match page.items.last() {
                Some(last) if page.next.is_some() => after = last.event_seq,
                _ => break,
            }
        }
        for c in &checkpoints {
            write(&json!({ "checkpoint": c })).map_err(io)?;
        }
        Ok(count)
    }
}

/// One event as an export line: the receipt it hashes as.
fn receipt_line(event: &Event, prev: Option<&str>) -> Value {
    let (id, ts, stream, body) = chain::entry(event);
    let hash = chain::EventFrame::of(event).hash(event.event_seq, prev);
    let mut receipt = json!({ "id": id, "ts": ts, "stream": stream, "body": body, "hash": hash });
    if let Some(prev) = prev {
        receipt["prev"] = Value::from(prev);
    }
    json!({ "receipt": receipt })
}
