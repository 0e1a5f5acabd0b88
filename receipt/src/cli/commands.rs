//! The commands that work on the receipt database: `append`, `trace`, `replay`, `inspect`,
//! `verify`, `head`, `fork` and `streams` (`new` and `run` are in the `agents` module).

use super::args::{AppendArgs, ForkArgs, HeadArgs, ReportArgs, StreamsArgs, TraceArgs, VerifyArgs};
use super::db::Db;
use super::report::{
    DuplicateReport, ForkReport, InspectReport, ReplayReport, StreamEntry, TraceEntry, TraceReport,
    VerifyFailed, VerifyOk, emit_report, print_json, print_text,
};
use super::target::{read_target, required, resolve, resolve_existing};
use super::time::iso_ts;
use super::{CliResult, Failure, fail};
use crate::receipt::base36;
use crate::signing::{PublicKey, read_witness};
use crate::sim::{Clock, SystemClock};
use crate::{BranchMeta, Command, ReceiptStore, Verified, VerifyFailure};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io;

/// The largest event body `append` accepts, in bytes (what the rebuno kernel accepts as a
/// request body).
const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// `append`: one event, from the argument or stdin, as one command.
pub(super) async fn append(db: &Db, a: AppendArgs) -> CliResult {
    if a.stream.is_empty() {
        return fail("stream name must not be empty");
    }
    if a.event_type.is_empty() {
        return fail("event type must not be empty");
    }
    let raw = if a.body == "-" {
        read_body(io::stdin().lock())?
    } else {
        a.body
    };
    if raw.len() > MAX_BODY_BYTES {
        return fail(too_large());
    }
    let mut body: Value = serde_json::from_str(&raw)
        .map_err(|e| Failure::Message(format!("invalid JSON body: {e}")))?;
    let Some(fields) = body.as_object_mut() else {
        return fail(format!(
            "the JSON body must be an object, got {}",
            json_kind(&body)
        ));
    };
    fields.insert("type".to_owned(), Value::String(a.event_type));

    let mut command = Command::new(vec![body]);
    if let Some(id) = a.event_id {
        if id.is_empty() {
            return fail("--event-id must not be empty");
        }
        command = command.event_id(id);
    }
    if let Some(prev) = a.expect_prev {
        let prev = (!prev.is_empty() && prev != "none").then_some(prev);
        command = command.expect_prev(prev);
    }

    let rt = db.runtime(true).await?;
    let done = rt.execute(&a.stream, command).await?;
    if done.duplicate {
        return print_json(&DuplicateReport {
            ok: true,
            duplicate: true,
            stream: &a.stream,
            head: done.head.as_deref(),
        });
    }
    match done.receipts.last() {
        Some(r) => print_json(r),
        None => fail("the append returned no receipt"),
    }
}

/// The refusal of a body over the size limit.
fn too_large() -> String {
    format!("the JSON body is larger than {MAX_BODY_BYTES} bytes")
}

/// Reads a body from `input`, refusing it (without reading on) once it passes the limit.
fn read_body(input: impl io::Read) -> CliResult<String> {
    use io::Read as _;
    let mut raw = Vec::new();
    input
        .take(MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| Failure::Message(format!("cannot read the body from stdin: {e}")))?;
    if raw.len() > MAX_BODY_BYTES {
        return fail(too_large());
    }
    String::from_utf8(raw).map_err(|_| Failure::Message("the JSON body is not UTF-8".into()))
}

/// What kind of JSON value `v` is, for the refusal of a body that is not an object.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `trace`: index, ISO timestamp and event type of each receipt (or JSON).
pub(super) async fn trace(db: &Db, a: TraceArgs) -> CliResult {
    let target = required("trace", a.target)?;
    let (stream, chain) = read_target(db, &target).await?;
    if a.json || a.output_file.is_some() {
        let receipts = chain
            .iter()
            .enumerate()
            .map(|(index, r)| TraceEntry {
                index,
                ts: r.ts(),
                iso_ts: iso_ts(r.ts()),
                event_type: r.event_type(),
            })
            .collect();
        let report = TraceReport {
            stream: &stream,
            receipts,
        };
        return emit_report(&report, a.output_file.as_deref());
    }
    let mut text = String::new();
    for (index, r) in chain.iter().enumerate() {
        text.push_str(&format!(
            "{:>4}  {}  {}\n",
            index,
            iso_ts(r.ts()),
            r.event_type()
        ));
    }
    print_text(&text)
}

/// `replay`: the full receipts as JSON.
pub(super) async fn replay(db: &Db, a: ReportArgs) -> CliResult {
    let target = required("replay", a.target)?;
    let (stream, chain) = read_target(db, &target).await?;
    let report = ReplayReport {
        stream: &stream,
        receipts: &chain,
    };
    emit_report(&report, a.output_file.as_deref())
}

/// `inspect`: the receipt count and the last receipt.
pub(super) async fn inspect(db: &Db, a: ReportArgs) -> CliResult {
    let target = required("inspect", a.target)?;
    let rt = db.runtime(false).await?;
    let store = rt.store();
    let stream = resolve_existing(&**store, &target).await?;
    // A plain stream's count and last receipt come from its tail: reading the whole chain
    // would take memory in proportion to its length. A branch has to be materialized.
    let (count, head) = match store.branch(&stream).await? {
        Some(_) => {
            let mut chain = rt.read(&stream).await?;
            (chain.len() as u64, chain.pop())
        }
        None => match store.tail(&stream).await? {
            Some(t) => (
                t.seq + 1,
                store
                    .read_range(&stream, t.seq, Some(t.seq + 1))
                    .await?
                    .pop(),
            ),
            None => (0, None),
        },
    };
    let report = InspectReport {
        stream: &stream,
        count,
        head: head.as_ref(),
    };
    emit_report(&report, a.output_file.as_deref())
}

/// `verify`: checks the hash chain; a broken chain is an error.
pub(super) async fn verify_cmd(db: &Db, a: VerifyArgs) -> CliResult {
    // The keys are read before the database, so a wrong file is named before anything else.
    let key = a.public_key.as_deref().map(PublicKey::read).transpose();
    let key = key.map_err(|e| Failure::Message(format!("public key: {e}")))?;
    if let Some(path) = &a.witness
        && let Err(e) = std::fs::metadata(path)
    {
        return fail(format!("witness {}: {e}", path.display()));
    }
    // The stream, whether its chain links, and its checkpoints (with a key).
    let (stream, verified, source) = match &a.file {
        Some(path) => {
            let export = super::export::read(path, a.target.as_deref())
                .map_err(|e| Failure::Message(format!("{}: {e}", path.display())))?;
            let verified = crate::verify(&export.receipts);
            let hashes: Vec<String> = export
                .receipts
                .iter()
                .map(|r| r.hash().to_owned())
                .collect();
            (export.stream, verified, Err((hashes, export.checkpoints)))
        }
        None => {
            let target = required("verify", a.target.clone())?;
            let rt = db.runtime(false).await?;
            let stream = resolve_existing(&**rt.store(), &target).await?;
            let verified = verify_stream(&**rt.store(), &stream).await?;
            (stream, verified, Ok(std::sync::Arc::clone(rt.store())))
        }
    };
    let witness = match &a.witness {
        None => None,
        Some(path) => Some(
            read_witness(path, &stream)
                .map_err(|e| Failure::Message(format!("witness {}: {e}", path.display())))?,
        ),
    };
    let v = match verified {
        Ok(v) => v,
        Err(f) => {
            if a.json {
                print_json(&VerifyFailed {
                    ok: false,
                    stream: &stream,
                    at: Some(f.at),
                    reason: f.reason.to_string(),
                })?;
            }
            return fail(format!(
                "verify failed for stream '{stream}': {} at index {}",
                f.reason, f.at
            ));
        }
    };
    let signed = match &key {
        None => None,
        Some(key) => {
            let checked = match source {
                Err((hashes, checkpoints)) => {
                    let hashes: Vec<&str> = hashes.iter().map(String::as_str).collect();
                    durable_support::audit::audit(durable_support::audit::AuditInput {
                        stream: &stream,
                        hashes: &hashes,
                        checkpoints: &checkpoints,
                        keys: std::slice::from_ref(key),
                        witness: witness.as_ref(),
                        max_unsigned_tail: a.max_unsigned,
                    })
                }
                // Checkpoints sign the stored receipts of the stream itself.
                Ok(store) => {
                    store
                        .check_signatures(&stream, key, witness.as_ref(), a.max_unsigned)
                        .await?
                }
            };
            match checked {
                Ok(coverage) => Some(coverage),
                Err(f) => {
                    if a.json {
                        print_json(&VerifyFailed {
                            ok: false,
                            stream: &stream,
                            at: None,
                            reason: f.to_string(),
                        })?;
                    }
                    return fail(format!("verify failed for stream '{stream}': {f}"));
                }
            }
        }
    };
    if a.json {
        print_json(&VerifyOk {
            ok: true,
            stream: &stream,
            count: v.count,
            head: v.head.as_deref(),
            signed: signed.as_ref(),
        })
    } else {
        let mut line = format!(
            "ok: {} receipts, head {}",
            v.count,
            v.head.as_deref().unwrap_or("none")
        );
        if let Some(c) = &signed {
            line.push_str(&format!("; {c}"));
        }
        print_text(&(line + "\n"))
    }
}

/// `receipt head`: the stream's head, or with `--signed` its latest signed checkpoint.
pub(super) async fn head(db: &Db, a: HeadArgs) -> CliResult {
    let store = db.open(false).await?;
    if a.signed {
        return match store.latest_checkpoint(&a.stream).await? {
            Some(head) => print_json(&head),
            None => fail(format!(
                "stream '{}' has no signed checkpoint (its appends were made without a signing \
                 key, or it does not exist)",
                a.stream
            )),
        };
    }
    let Some(tail) = store.tail(&a.stream).await? else {
        return fail(format!("stream '{}' has no receipts", a.stream));
    };
    print_json(&serde_json::json!({
        "stream": a.stream,
        "length": tail.seq + 1,
        "head": tail.hash,
    }))
}

/// Verifies `stream` as readers see it (the materialized chain: a branch is its parent's
/// prefix re-linked with its own receipts), with progress on a terminal when it is large.
/// Materialization checks each branch level's stored chain before re-linking, so a receipt
/// altered in storage is reported at its materialized index instead of coming out with a fresh
/// hash.
async fn verify_stream(
    store: &dyn ReceiptStore,
    stream: &str,
) -> CliResult<Result<Verified, VerifyFailure>> {
    let chain = super::progress::read_chain(store, stream).await?;
    Ok(super::progress::verify_chain(&chain))
}

/// `fork`: a branch of a stream at an index (metadata only).
pub(super) async fn fork(db: &Db, a: ForkArgs) -> CliResult {
    let Some(raw_at) = a.at.or(a.at_pos) else {
        return fail("--at is required");
    };
    let at = parse_at(&raw_at)?;
    if let Some(name) = a.name.as_deref().or(a.name_pos.as_deref())
        && name.is_empty()
    {
        return fail("--name must not be empty");
    }
    let rt = db.runtime(false).await?;
    let stream = resolve(&**rt.store(), &a.target).await?;
    let name = a.name.or(a.name_pos).unwrap_or_else(|| {
        let now = u64::try_from(SystemClock.now_ms()).unwrap_or(0);
        format!("{stream}/branches/fork_{}_{at}", base36(now))
    });
    let meta = rt.fork(&stream, at, &name).await?;
    print_json(&ForkReport {
        ok: true,
        stream: &meta.parent,
        at: meta.fork_at,
        branch: &meta.name,
    })
}

/// `--at`: a finite, non-negative number, floored.
fn parse_at(raw: &str) -> CliResult<u64> {
    match raw.trim().parse::<f64>() {
        // `as` saturates: an absurdly large index becomes u64::MAX and fails the range check.
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v.floor() as u64),
        _ => fail("--at must be a non-negative number"),
    }
}

/// `streams`: every stream and branch, as a table or JSON.
pub(super) async fn streams(db: &Db, a: StreamsArgs) -> CliResult {
    let store = db.open(false).await?;
    struct Row {
        count: u64,
        head: Option<String>,
        last_ts: Option<i64>,
        branch: Option<BranchMeta>,
    }
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for s in store.list_streams().await? {
        rows.insert(
            s.name,
            Row {
                count: s.count,
                head: s.head,
                last_ts: s.last_ts,
                branch: None,
            },
        );
    }
    for b in store.list_branches().await? {
        let row = rows.entry(b.name.clone()).or_insert(Row {
            count: 0,
            head: None,
            last_ts: None,
            branch: None,
        });
        row.branch = Some(b);
    }
    if a.json {
        let list: Vec<StreamEntry<'_>> = rows
            .iter()
            .map(|(name, r)| StreamEntry {
                name,
                count: r.count,
                head: r.head.as_deref(),
                last_ts: r.last_ts,
                parent: r.branch.as_ref().map(|b| b.parent.as_str()),
                fork_at: r.branch.as_ref().map(|b| b.fork_at),
            })
            .collect();
        return print_json(&list);
    }
    let mut table: Vec<[String; 5]> = vec![[
        "NAME".into(),
        "COUNT".into(),
        "HEAD".into(),
        "LAST".into(),
        "FORKED FROM".into(),
    ]];
    for (name, r) in &rows {
        table.push([
            name.clone(),
            r.count.to_string(),
            r.head.clone().unwrap_or_else(|| "-".into()),
            r.last_ts.map_or_else(|| "-".into(), iso_ts),
            r.branch
                .as_ref()
                .map_or_else(|| "-".into(), |b| format!("{}@{}", b.parent, b.fork_at)),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| {
            table
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    print_text(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_points() {
        assert_eq!(parse_at("3").ok(), Some(3));
        assert_eq!(parse_at("2.9").ok(), Some(2));
        assert_eq!(parse_at("1e1").ok(), Some(10));
        assert_eq!(parse_at("-0").ok(), Some(0));
        for bad in ["-1", "abc", "", "NaN", "inf", "-0.5"] {
            assert!(parse_at(bad).is_err(), "{bad}");
        }
    }
}
