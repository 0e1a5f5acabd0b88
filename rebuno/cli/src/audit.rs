//! `rebuno verify` and `rebuno export`: executions' event logs checked offline against the
//! public key(s) their heads were signed with and an optional witness, and a log written out as
//! a receipt stream (see `rebuno::store::chain`).

use crate::args::{ExportArgs, VerifyArgs};
use rebuno::Kernel;
use rebuno::kernel::AuditOptions;
use rebuno::store::chain::{self, PublicKey};
use rebuno::telemetry::redact_url;
use std::io::Write;

/// Executions listed per page when every execution is verified.
const LIST_PAGE: usize = 200;

/// Opens the kernel database `url` for reading; a SQLite file must exist (verifying a typo
/// must not create an empty database that verifies).
async fn open(url: &str) -> Result<Kernel, String> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"));
    if let Some(path) = path
        && path != ":memory:"
        && !std::path::Path::new(path).exists()
    {
        return Err(format!("no database at {path}"));
    }
    Kernel::open(url)
        .await
        .map_err(|e| format!("cannot open {}: {e}", redact_url(url)))
}

/// `rebuno verify`: every execution (or the one named), each line `ok <id>: <coverage>` or
/// `FAILED <id>: <what>`; fails if any does not verify.
pub(crate) async fn verify(a: VerifyArgs) -> Result<(), String> {
    // The files are read before the database, so a wrong path is named first.
    let keys = a
        .public_key
        .iter()
        .map(|p| PublicKey::read(p).map_err(|e| format!("public key {}: {e}", p.display())))
        .collect::<Result<Vec<_>, _>>()?;
    if a.witness.is_some() && a.execution_id.is_none() {
        return Err("--witness needs an EXECUTION_ID (a witness is of one execution)".into());
    }
    let witness = match (&a.witness, &a.execution_id) {
        (Some(path), Some(id)) => Some(
            chain::read_witness(path, &chain::stream(id))
                .map_err(|e| format!("witness {}: {e}", path.display()))?,
        ),
        _ => None,
    };
    let kernel = open(&a.db).await?;
    let options = AuditOptions {
        keys: &keys,
        witness: witness.as_ref(),
        max_unsigned_tail: a.max_unsigned,
    };
    let ids = match &a.execution_id {
        Some(id) => vec![id.clone()],
        None => all_executions(&kernel).await?,
    };
    let mut failed = 0usize;
    for id in &ids {
        match kernel.audit_execution(id, options).await {
            Ok(Ok(coverage)) if keys.is_empty() => println!(
                "ok {id}: {} event(s), hash chain recomputed; signatures not checked (no --public-key)",
                coverage.length
            ),
            Ok(Ok(coverage)) => println!("ok {id}: {coverage}"),
            Ok(Err(failure)) => {
                failed += 1;
                println!("FAILED {id}: {failure}");
            }
            Err(e) => return Err(format!("execution {id}: {e}")),
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(format!(
            "{n} of {} execution(s) failed verification",
            ids.len()
        )),
    }
}

/// Every execution id, newest first.
async fn all_executions(kernel: &Kernel) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let page = kernel
            .list_executions(None, None, cursor, LIST_PAGE)
            .await
            .map_err(|e| e.to_string())?;
        ids.extend(page.executions.into_iter().map(|e| e.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(ids),
        }
    }
}

/// `rebuno export`: one execution's log as receipt lines, to a file or stdout.
pub(crate) async fn export(a: ExportArgs) -> Result<(), String> {
    let kernel = open(&a.db).await?;
    let mut out: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let count = kernel
        .export_execution(&a.execution_id, |line| {
            serde_json::to_writer(&mut out, line)?;
            out.write_all(b"\n")
        })
        .await
        .map_err(|e| format!("execution {}: {e}", a.execution_id))?;
    out.flush().map_err(|e| e.to_string())?;
    if let Some(path) = &a.output {
        eprintln!(
            "exported {count} event(s) of {} to {} as stream {}",
            a.execution_id,
            path.display(),
            chain::stream(&a.execution_id)
        );
    }
    Ok(())
}
