//! Branching: [`fork`] writes only metadata; [`materialize`] reads a branch as its parent's
//! prefix followed by its own receipts, re-linked and re-hashed.
//!
//! A branch's stored receipts form their own chain (the first has no `prev`), so the store's CAS
//! works on the stored tail; readers only ever see the materialized form. Hashes of branch
//! receipts are therefore stable to quote only as read, never across the fork point.

use crate::error::{Error, Result};
use crate::receipt::{Hints, Receipt, ReceiptContext};
use crate::sim::{Clock, EntropySource};
use crate::store::{BRANCH_META_STREAM, BRANCH_META_TYPE, BranchMeta, ReceiptStore};
use serde_json::json;

/// How many times a fork retries when another writer moved the metadata stream under it.
const META_RETRIES: usize = 16;

/// Reads `name` as its consumers see it: a plain stream as stored, a branch as
/// `materialize(parent)[0..fork_at]` followed by its own receipts re-linked onto that prefix.
/// Parent cycles fail with `Branch cycle detected for stream '<stream>'`.
pub async fn materialize(store: &dyn ReceiptStore, name: &str) -> Result<Vec<Receipt>> {
    // Walk up to the root first (iteratively, so deep branch stacks cannot overflow the stack).
    let mut lineage: Vec<(String, Option<BranchMeta>)> = Vec::new();
    let mut current = name.to_owned();
    loop {
        if lineage.iter().any(|(n, _)| *n == current) {
            return Err(Error::BranchCycle(current));
        }
        let meta = store.branch(&current).await?;
        let parent = meta.as_ref().map(|m| m.parent.clone());
        lineage.push((current, meta));
        match parent {
            Some(p) => current = p,
            None => break,
        }
    }
    let mut out: Vec<Receipt> = Vec::new();
    while let Some((stream, meta)) = lineage.pop() {
        if let Some(meta) = meta {
            out.truncate(usize::try_from(meta.fork_at).unwrap_or(usize::MAX));
            // The branch's stored receipts form their own chain. Check it before re-hashing, or
            // re-linking would launder an edited receipt into a valid-looking one: a damaged
            // receipt keeps a defect that `verify` reports at its materialized index.
            let mut stored_prev: Option<String> = None;
            for r in store.read(&stream).await? {
                let link_ok = r.prev() == stored_prev.as_deref();
                let hash_ok = r.hash_is_valid();
                stored_prev = Some(r.hash().to_owned());
                let prev = out.last().map(|p| p.hash().to_owned());
                let mut linked = r.relinked(prev)?;
                if !link_ok {
                    linked.set_prev(Some(format!("broken:{}", r.prev().unwrap_or("none"))));
                } else if !hash_ok {
                    linked.set_hash(r.hash().to_owned());
                }
                out.push(linked);
            }
        } else {
            out = store.read(&stream).await?;
        }
    }
    Ok(out)
}

/// Forks `stream` at `at` (`0..=len` of its materialized chain) into a new branch `new_name`.
/// Only metadata is written: a `branch.meta.upsert` receipt on `__meta/branches` and the branch
/// row, atomically.
pub async fn fork(
    store: &dyn ReceiptStore,
    clock: &dyn Clock,
    entropy: &dyn EntropySource,
    stream: &str,
    at: u64,
    new_name: &str,
) -> Result<BranchMeta> {
    if new_name.is_empty() {
        return Err(Error::Invalid("a branch needs a non-empty name".into()));
    }
    if new_name.starts_with("__meta/") {
        return Err(Error::ReservedStream(new_name.to_owned()));
    }
    let len = materialize(store, stream).await?.len() as u64;
    if len == 0 && store.branch(stream).await?.is_none() {
        return Err(Error::UnknownStream(stream.to_owned()));
    }
    if at > len {
        return Err(Error::ForkOutOfRange {
            stream: stream.to_owned(),
            at,
            len,
        });
    }
    let meta = BranchMeta {
        name: new_name.to_owned(),
        parent: stream.to_owned(),
        fork_at: at,
        created_at: clock.now_ms(),
    };
    let body = json!({
        "type": BRANCH_META_TYPE,
        "name": meta.name,
        "parent": meta.parent,
        "forkAt": meta.fork_at,
        "createdAt": meta.created_at,
    });
    let context = ReceiptContext {
        branch: Some(meta.name.clone()),
        ..Default::default()
    };
    let mut attempt = 0;
    loop {
        let tail = store.tail(BRANCH_META_STREAM).await?.map(|t| t.hash);
        let receipt = Receipt::build(
            BRANCH_META_STREAM,
            tail.clone(),
            body.clone(),
            Some(context.clone()),
            Hints::new(),
            clock,
            entropy,
        )?;
        match store.create_branch(meta.clone(), receipt, tail).await {
            Err(Error::ExpectedPrev { .. }) if attempt < META_RETRIES => attempt += 1,
            Err(e) => return Err(e),
            Ok(()) => return Ok(meta),
        }
    }
}
