//! What the commands print: writing to stdout (a closed pipe ends the command quietly), JSON
//! output, `--output-file`, and the shapes of the JSON reports (field order is the order
//! printed).

use super::{CliResult, Failure, fail};
use crate::Receipt;
use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;

/// The failure for a write to stdout that failed: quiet when its reader closed it.
pub(super) fn out_err(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::BrokenPipe
    } else {
        Failure::Message(format!("cannot write to stdout: {e}"))
    }
}

/// Writes `text` to stdout as it is.
pub(super) fn print_text(text: &str) -> CliResult {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(out_err)
}

/// `value` as pretty-printed JSON.
fn pretty(value: &impl Serialize) -> CliResult<String> {
    serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Message(format!("cannot serialize the report: {e}")))
}

/// Prints `value` as pretty-printed JSON and a newline.
pub(super) fn print_json(value: &impl Serialize) -> CliResult {
    print_text(&(pretty(value)? + "\n"))
}

/// Prints `report`, or writes it to `output_file` and prints the envelope that says where it
/// went (`{ ok, outputFile, format, bytes }`).
pub(super) fn emit_report(report: &impl Serialize, output_file: Option<&Path>) -> CliResult {
    let Some(path) = output_file else {
        return print_json(report);
    };
    if path.as_os_str().is_empty() {
        return fail("--output-file must not be empty");
    }
    let text = pretty(report)? + "\n";
    // Unlike `new`, this replaces what is there and follows a symlink: the user named this exact
    // path as the destination (as with a shell redirection), and the report holds nothing that
    // reading the database would not give them.
    let write_err =
        |e: io::Error| Failure::Message(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    std::fs::write(path, &text).map_err(write_err)?;
    let abs = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned());
    print_json(&OutputEnvelope {
        ok: true,
        output_file: abs.to_string_lossy().into_owned(),
        format: "json",
        bytes: text.len(),
    })
}

/// What `--output-file` prints instead of the report.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutputEnvelope {
    pub(super) ok: bool,
    pub(super) output_file: String,
    pub(super) format: &'static str,
    pub(super) bytes: usize,
}

/// `append` when every event id was already recorded.
#[derive(Serialize)]
pub(super) struct DuplicateReport<'a> {
    pub(super) ok: bool,
    pub(super) duplicate: bool,
    pub(super) stream: &'a str,
    pub(super) head: Option<&'a str>,
}

/// `trace --json`.
#[derive(Serialize)]
pub(super) struct TraceReport<'a> {
    pub(super) stream: &'a str,
    pub(super) receipts: Vec<TraceEntry<'a>>,
}

/// One line of `trace`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TraceEntry<'a> {
    pub(super) index: usize,
    pub(super) ts: i64,
    pub(super) iso_ts: String,
    #[serde(rename = "type")]
    pub(super) event_type: &'a str,
}

/// `replay`.
#[derive(Serialize)]
pub(super) struct ReplayReport<'a> {
    pub(super) stream: &'a str,
    pub(super) receipts: &'a [Receipt],
}

/// `inspect`: `head` is the last receipt.
#[derive(Serialize)]
pub(super) struct InspectReport<'a> {
    pub(super) stream: &'a str,
    pub(super) count: u64,
    pub(super) head: Option<&'a Receipt>,
}

/// `verify --json` on success.
#[derive(Serialize)]
pub(super) struct VerifyOk<'a> {
    pub(super) ok: bool,
    pub(super) stream: &'a str,
    pub(super) count: usize,
    pub(super) head: Option<&'a str>,
    /// With `--public-key`: how much of the stream its signatures cover.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) signed: Option<&'a crate::signing::Coverage>,
}

/// `verify --json` on failure.
#[derive(Serialize)]
pub(super) struct VerifyFailed<'a> {
    pub(super) ok: bool,
    pub(super) stream: &'a str,
    /// The failing receipt's index (a broken chain; a signature failure names its length or
    /// index in `reason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) at: Option<usize>,
    pub(super) reason: String,
}

/// `fork`.
#[derive(Serialize)]
pub(super) struct ForkReport<'a> {
    pub(super) ok: bool,
    pub(super) stream: &'a str,
    pub(super) at: u64,
    pub(super) branch: &'a str,
}

/// One entry of `streams --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StreamEntry<'a> {
    pub(super) name: &'a str,
    pub(super) count: u64,
    pub(super) head: Option<&'a str>,
    pub(super) last_ts: Option<i64>,
    pub(super) parent: Option<&'a str>,
    pub(super) fork_at: Option<u64>,
}
