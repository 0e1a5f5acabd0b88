//! Event ids of the control receipts. Every control receipt is appended with an id derived from
//! the run, the selection, the invocation or the merge, so a pass that repeats an append (after
//! a crash, or racing another controller) is deduplicated instead of writing it twice.

/// `<runId>:run.started`
pub fn run_started(run_id: &str) -> String {
    format!("{run_id}:run.started")
}
/// `<runId>:run.completed`
pub fn run_completed(run_id: &str) -> String {
    format!("{run_id}:run.completed")
}
/// `<runId>:run.failed`
pub fn run_failed(run_id: &str) -> String {
    format!("{run_id}:run.failed")
}
/// `<runId>:run.blocked:<head|root>` (one per head: a pass that blocks again at the same
/// head appends nothing new).
pub fn run_blocked(run_id: &str, head: Option<&str>) -> String {
    format!("{run_id}:run.blocked:{}", head.unwrap_or("root"))
}
/// `<selectionId>:selected`
pub fn selected(selection_id: &str) -> String {
    format!("{selection_id}:selected")
}
/// `<invocationId>:started:<attempt>`
pub fn started(invocation_id: &str, attempt: u32) -> String {
    format!("{invocation_id}:started:{attempt}")
}
/// `<invocationId>:heartbeat:<attempt>:<n>`, the `n`th renewal (from 1) of that attempt's
/// claim.
pub fn heartbeat(invocation_id: &str, attempt: u32, n: u64) -> String {
    format!("{invocation_id}:heartbeat:{attempt}:{n}")
}
/// `<invocationId>:manifest`
pub fn manifest(invocation_id: &str) -> String {
    format!("{invocation_id}:manifest")
}
/// `<invocationId>:output` (the outputs' hints are `...#<i>` when there are several)
pub fn output(invocation_id: &str) -> String {
    format!("{invocation_id}:output")
}
/// `<invocationId>:completed`
pub fn completed(invocation_id: &str) -> String {
    format!("{invocation_id}:completed")
}
/// `<invocationId>:failed`
pub fn failed(invocation_id: &str) -> String {
    format!("{invocation_id}:failed")
}
/// `<invocationId>:superseded`
pub fn superseded(invocation_id: &str) -> String {
    format!("{invocation_id}:superseded")
}
/// `<invocationId>:human.requested`
pub fn human_requested(invocation_id: &str) -> String {
    format!("{invocation_id}:human.requested")
}
/// `<invocationId>:human.responded`
pub fn human_responded(invocation_id: &str) -> String {
    format!("{invocation_id}:human.responded")
}
/// `<invocationId>:policy.approval.requested`
pub fn approval_requested(invocation_id: &str) -> String {
    format!("{invocation_id}:policy.approval.requested")
}
/// `<mergeId>:<step>` for `started`, `selected`, `manifest`, `output`, `applied`,
/// `skipped`, `failed`
pub fn merge(merge_id: &str, step: &str) -> String {
    format!("{merge_id}:{step}")
}
