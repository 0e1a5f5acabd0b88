//! Resolving a stream argument `<t>`: a value containing `/` is a stream name, otherwise an
//! exact stream name, otherwise the run stream ending in `/runs/<value>` (a run id).

use super::db::Db;
use super::{CliResult, fail};
use crate::{Receipt, ReceiptStore};

/// Every stream that exists: streams with stored receipts and branches (which may have none).
pub(super) async fn known_streams(store: &dyn ReceiptStore) -> CliResult<Vec<String>> {
    let mut names: Vec<String> = store
        .list_streams()
        .await?
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.extend(store.list_branches().await?.into_iter().map(|b| b.name));
    names.sort();
    names.dedup();
    Ok(names)
}

/// Resolves `<t>`: verbatim when it contains `/`, else an exact stream name, else the first
/// stream (by name) ending in `/runs/<value>`.
pub(super) async fn resolve(store: &dyn ReceiptStore, value: &str) -> CliResult<String> {
    if value.contains('/') {
        return Ok(value.to_owned());
    }
    let names = known_streams(store).await?;
    if names.iter().any(|n| n == value) {
        return Ok(value.to_owned());
    }
    if !value.is_empty() {
        let suffix = format!("/runs/{value}");
        if let Some(name) = names.iter().find(|n| n.ends_with(&suffix)) {
            return Ok(name.clone());
        }
    }
    fail(format!("Unable to resolve run/stream '{value}'"))
}

/// [`resolve`], and the stream must exist (have receipts or be a branch).
pub(super) async fn resolve_existing(store: &dyn ReceiptStore, value: &str) -> CliResult<String> {
    let stream = resolve(store, value).await?;
    if store.tail(&stream).await?.is_none() && store.branch(&stream).await?.is_none() {
        return fail(format!("Unknown stream '{stream}'"));
    }
    Ok(stream)
}

/// The `<t>` argument of `command`, which it cannot run without.
pub(super) fn required(command: &str, target: Option<String>) -> CliResult<String> {
    match target {
        Some(target) => Ok(target),
        None => fail(format!(
            "receipt {command} needs a stream name or a run id: `receipt {command} <stream|run-id>` \
             (`receipt streams` lists the streams; an agent run's is \
             agents/<agent-id>/runs/<run-id>, and `receipt run` prints its runId)"
        )),
    }
}

/// Opens the database, resolves `<t>` and reads its materialized chain (with progress on a
/// terminal when it is large).
pub(super) async fn read_target(db: &Db, target: &str) -> CliResult<(String, Vec<Receipt>)> {
    let store = db.open(false).await?;
    let stream = resolve_existing(&*store, target).await?;
    let chain = super::progress::read_chain(&*store, &stream).await?;
    Ok((stream, chain))
}
