//! [`KernelDispatcher`]: a [`RemoteDispatcher`] that runs each remote call as an execution of a
//! worker agent on a rebuno kernel, over HTTP or in process ([`rebuno::Client`]).
//!
//! - **One agent per target group**: the call for group `g` is an execution of rebuno agent
//!   [`worker_agent_id`]`(g)`, `receipt-worker-<g>`, which a [`super::KernelWorker`] serves.
//! - **Once per invocation**: the execution is created with the invocation id as its
//!   idempotency key, and its input is the call as every attempt of the invocation makes it
//!   (the claim fields and the timeout left out, [`invocation_call`]): a controller that takes
//!   an invocation over (attempt + 1) after another died finds the execution the first one
//!   started, still running or finished, instead of starting a second. The worker serves it
//!   under the invocation's latest claim, which it reads from the run stream.
//! - **Made again only where nothing ran**: an execution the worker refused for want of a
//!   live claim (a refusal a later claim cures,
//!   [`crate::agent::RemoteRefusal::cured_by_a_later_claim`]: the first delivery came once
//!   the claim had lapsed, say, before another controller took the invocation over) ran
//!   nothing, and it is final for that execution only. The executions of an invocation form
//!   one sequence, the same for every controller: the invocation id, then `<invocation id>#1`,
//!   `#2`, … The dispatcher walks it from the start: it waits on the first execution that
//!   is not such a refusal and answers with it; past one that is, it goes to the next key
//!   (creating that execution if nobody did yet) when the refusal read an earlier claim than
//!   the caller's (`claimAttempt` below the caller's attempt: the caller's claim cures it),
//!   or, when it read the caller's own claim as lapsed (a renewal late to land), after a
//!   pause that starts at 100 ms and doubles up to 30 s, for as long as the call's timeout
//!   leaves room. Any other refusal (policy denied, invocation or run ended, not selected,
//!   another input, a later claim's) is the answer. So every execution before the one that
//!   answers was refused before its action started, and the action runs in one execution
//!   only: a refused execution that holds steps (an earlier delivery of it had started the
//!   action) is never walked past, and the worker does not refuse such a re-delivery for a
//!   lapsed claim anyway. An invocation has at most [`MAX_EXECUTIONS_PER_INVOCATION`]
//!   executions; a call without a claim (attempt 0) has one.
//! - **Waiting** is woken by the kernel's notification that the execution ended
//!   ([`rebuno::Client::wait`]: in process the kernel's table of waiters, over HTTP the one
//!   change feed that all the calls of the dispatcher's client share), within the call's
//!   timeout; nothing polls while a call runs. At the timeout the execution is cancelled, so
//!   that the kernel does not deliver it again later, and the call fails with
//!   `remote action timed out`; the controller,
//!   whose own timer may fire first, withdraws it through [`RemoteDispatcher::cancel`], which
//!   finds the execution again by its idempotency key (the dispatcher keeps no table of calls).
//!   A kernel that cannot be reached (or answers `429`/`5xx`) is retried until the timeout.
//! - **The answer** is the execution's output: `{"outputs": [...]}`, the worker's
//!   [`RemoteResult`], or `{"error": "<message>"}` for a refusal or the action's own error
//!   (with `"refused": "<check>"` for a call without the invocation's authority, and
//!   `"claimAttempt"` for one that read the invocation's claim), which reaches `action.failed`
//!   verbatim (a completed execution is never delivered again). An execution that failed (a
//!   worker that could not work: its store unreachable, its deliveries exhausted) or was
//!   cancelled by someone else fails the call with
//!   `remote worker for action '<id>' failed: <reason>`.
//!
//! **Logs** (`tracing`, emitted only; ids as fields: `invocation_id`, `action_id`, `group`,
//! `execution_id`): each call's kernel execution (`debug`) and how it ended (`debug` for an
//! answer, `warn` for a worker's execution that failed or was cancelled), a kernel that could not
//! be reached and is asked again (`warn`, with the reason), a group without a worker agent and a
//! call that timed out and is withdrawn (`warn`), a call made again after a refusal a claim
//! cures (`info`, with the check and the claim attempts) and one that is not because its
//! execution had started the action (`warn`). The API key is never logged.

use crate::agent::remote::cured_by_a_later_claim;
use crate::agent::remote::{RemoteCall, RemoteDispatcher, RemoteResult};
use crate::agent::{AgentError, async_trait};
use crate::error::{Error, Result};
use rebuno::protocol::{ErrorCode, Execution, ExecutionStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// What every worker agent id starts with.
pub const WORKER_AGENT_PREFIX: &str = "receipt-worker-";
/// The longest target group a worker agent id is made from.
pub const MAX_GROUP_BYTES: usize = 100;
/// The longest worker message (an error answer or a failure reason) taken as it is; a longer
/// one is cut there.
const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// The first pause before asking an unreachable kernel again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_INITIAL: Duration = Duration::from_millis(100);
/// The longest pause between two attempts to reach the kernel.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How long [`RemoteDispatcher::cancel`] tries to find the call's execution.
const CANCEL_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The most kernel executions one invocation is given: its first, and those made again after
/// refusals a later claim cured. Past it, such a refusal is the answer.
pub const MAX_EXECUTIONS_PER_INVOCATION: u32 = 256;
/// The first pause before a call refused because the caller's own claim seemed lapsed is made
/// again; it doubles up to [`RENEWAL_PAUSE_MAX`].
const RENEWAL_PAUSE_INITIAL: Duration = Duration::from_millis(100);
/// The longest such pause.
const RENEWAL_PAUSE_MAX: Duration = Duration::from_secs(30);
/// The check of a refusal for a claim that has lapsed.
const CLAIM_EXPIRED: &str = "claim_expired";

/// The rebuno agent id of the worker serving target group `group`: `receipt-worker-<group>`.
/// A group is 1 to [`MAX_GROUP_BYTES`] ASCII letters, digits, `.`, `_` or `-` (an agent id is
/// also a URL path segment and a header value); anything else is refused.
pub fn worker_agent_id(group: &str) -> Result<String> {
    let fits = !group.is_empty()
        && group.len() <= MAX_GROUP_BYTES
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !fits {
        return Err(Error::Invalid(format!(
            "target group {group:?} cannot name a kernel worker: use 1 to {MAX_GROUP_BYTES} \
             ASCII letters, digits, '.', '_' or '-'"
        )));
    }
    Ok(format!("{WORKER_AGENT_PREFIX}{group}"))
}

/// The kernel execution's input for `call`: the call as every attempt of its invocation makes
/// it, without the claim (`claimId`, `claimOwnerId`, `attempt`) or the caller's timeout, so that
/// a takeover's call repeats the first one exactly (the kernel answers a repeated idempotency
/// key only for the same input). The worker serves an execution only if its input is exactly
/// this, for an invocation claimed on the run stream.
pub fn invocation_call(call: &RemoteCall) -> RemoteCall {
    call.for_invocation()
}

/// What a worker answers, as its execution's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum Answer {
    /// The action ran: its buffered outputs.
    Outputs(RemoteResult),
    /// A refusal or the action's own error: the message the controller records.
    Error {
        /// The message, as the worker's error displays it.
        error: String,
        /// For a call refused for want of the invocation's authority on the run stream: the
        /// check that failed ([`crate::agent::RemoteRefusal::check`]). The execution's output,
        /// and so its `execution.completed` event, keeps it for an audit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
        /// For a refusal that read the invocation's latest claim: that claim's attempt
        /// ([`crate::agent::RemoteRefusal::claim_attempt`]), which tells a dispatcher whether
        /// its own claim came later.
        #[serde(
            default,
            rename = "claimAttempt",
            skip_serializing_if = "Option::is_none"
        )]
        claim_attempt: Option<u32>,
    },
}

/// What a dispatcher does once one of a call's executions has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Answers the call with it.
    Answer,
    /// Goes to the next execution now: the refusal read an earlier claim than the caller's.
    Again,
    /// Goes to the next execution after a pause: the refusal read the caller's own claim as
    /// lapsed, which a renewal late to land revives.
    AfterRenewal,
}

/// The idempotency key of execution `n` of the call `call_id` (the invocation id): the call
/// id for the first, `<call id>#<n>` after.
fn execution_key(call_id: &str, n: u32) -> String {
    if n == 0 {
        call_id.to_owned()
    } else {
        format!("{call_id}#{n}")
    }
}

/// The refusal `exec` ended with, if it is one the worker made for want of the invocation's
/// authority: its check, and the attempt of the claim it read (0 for none, or a worker that
/// does not say).
fn refusal(exec: &Execution) -> Option<(String, u32)> {
    if exec.status != ExecutionStatus::Completed {
        return None;
    }
    match serde_json::from_value::<Answer>(exec.output.clone()?) {
        Ok(Answer::Error {
            refused: Some(check),
            claim_attempt,
            ..
        }) => Some((check, claim_attempt.unwrap_or(0))),
        _ => None,
    }
}

/// What follows execution `n` (`exec`, ended) of a call made under claim attempt `attempt`,
/// when it ran nothing (see the module docs).
fn next_after(exec: &Execution, n: u32, attempt: u32) -> Next {
    if attempt == 0 || n + 1 >= MAX_EXECUTIONS_PER_INVOCATION {
        return Next::Answer;
    }
    let Some((check, read)) = refusal(exec) else {
        return Next::Answer;
    };
    if !cured_by_a_later_claim(&check) {
        return Next::Answer;
    }
    if read < attempt {
        Next::Again
    } else if read == attempt && check == CLAIM_EXPIRED {
        Next::AfterRenewal
    } else {
        Next::Answer
    }
}

/// Dispatches remote calls through a rebuno kernel (see the module docs). It keeps no state of
/// its own: the kernel finds a call's execution again by its idempotency key.
pub struct KernelDispatcher {
    client: rebuno::Client,
}

impl std::fmt::Debug for KernelDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDispatcher")
            .field("client", &self.client)
            .finish()
    }
}

impl KernelDispatcher {
    /// A dispatcher over `client`: an HTTP client of a kernel (with a key that may create,
    /// read and cancel executions) or an embedded kernel's.
    pub fn new(client: rebuno::Client) -> Self {
        KernelDispatcher { client }
    }

    /// The client.
    pub fn client(&self) -> &rebuno::Client {
        &self.client
    }

    /// Execution `n` of `call` ([`execution_key`]), created now or found by its key; `None`
    /// when the kernel could not be reached before `deadline`.
    async fn start(
        &self,
        call: &RemoteCall,
        n: u32,
        deadline: Instant,
    ) -> Result<Option<Execution>> {
        let agent = worker_agent_id(&call.target_group)?;
        let input = invocation_call(call);
        let key = execution_key(&call.call_id, n);
        let mut pause = RETRY_INITIAL;
        loop {
            match self.client.create_idempotent(&agent, &input, &key).await {
                Ok(exec) => return Ok(Some(exec)),
                Err(e) if e.is_not_found() => {
                    tracing::warn!(
                        invocation_id = %call.payload.invocation.invocation_id,
                        action_id = %call.payload.invocation.action_id,
                        group = %call.target_group,
                        worker_agent = %agent,
                        "no worker agent is registered with the kernel for the target group"
                    );
                    return Err(AgentError::NoWorkerForGroup(call.target_group.clone()).into());
                }
                Err(e) if transient(&e) => {
                    unreachable_kernel(call, &e, pause);
                    if !pause_until(&mut pause, deadline).await {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(failed(call, &e.to_string())),
            }
        }
    }

    /// The execution `id` once it has ended; `None` when `deadline` came first.
    async fn ended(
        &self,
        call: &RemoteCall,
        id: &str,
        deadline: Instant,
    ) -> Result<Option<Execution>> {
        let mut pause = RETRY_INITIAL;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.client.wait(id, left).await {
                Ok(exec) => return Ok(Some(exec)),
                // The wait's own deadline: the call's.
                Err(_) if Instant::now() >= deadline => return Ok(None),
                Err(e) if transient(&e) => {
                    unreachable_kernel(call, &e, pause);
                    if !pause_until(&mut pause, deadline).await {
                        return Ok(None);
                    }
                }
                Err(e) => return Err(failed(call, &e.to_string())),
            }
        }
    }

    /// What follows execution `n` of `call` (`exec`, ended): [`next_after`], once the kernel
    /// says that it ran nothing. The worker records no step before its checks pass, so a
    /// refused execution holding steps was refused on a later delivery, after an earlier one
    /// had started the action: making the call again would run that part a second time, so its
    /// refusal is the answer (as it is when the kernel cannot say before `deadline`).
    async fn next(&self, call: &RemoteCall, exec: &Execution, n: u32, deadline: Instant) -> Next {
        let next = next_after(exec, n, call.payload.attempt);
        if next == Next::Answer {
            return next;
        }
        let mut pause = RETRY_INITIAL;
        let steps = loop {
            match self.client.steps(&exec.id).await {
                Ok(steps) => break steps,
                Err(e) if transient(&e) => {
                    unreachable_kernel(call, &e, pause);
                    if !pause_until(&mut pause, deadline).await {
                        return Next::Answer;
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        invocation_id = %call.payload.invocation.invocation_id,
                        execution_id = %exec.id,
                        error = %e,
                        "cannot tell whether a refused remote action had started: not made again"
                    );
                    return Next::Answer;
                }
            }
        };
        if !steps.is_empty() {
            tracing::warn!(
                invocation_id = %call.payload.invocation.invocation_id,
                action_id = %call.payload.invocation.action_id,
                execution_id = %exec.id,
                steps = steps.len(),
                "remote action refused after it had started: its refusal is the answer, not made again"
            );
            return Next::Answer;
        }
        let (check, read) = refusal(exec).unwrap_or_default();
        tracing::info!(
            invocation_id = %call.payload.invocation.invocation_id,
            action_id = %call.payload.invocation.action_id,
            execution_id = %exec.id,
            refused = %check,
            claim_attempt_read = read,
            attempt = call.payload.attempt,
            next_key = %execution_key(&call.call_id, n + 1),
            "remote action refused for want of a live claim the caller's claim may cure: making the call again"
        );
        next
    }
}

#[async_trait]
impl RemoteDispatcher for KernelDispatcher {
    /// Whether the kernel knows the group's worker agent ([`worker_agent_id`]): `false` only
    /// when it answers `404` (no worker registered); a group that cannot name a worker is an
    /// error; anything else (a key without `agents:read`, a kernel out of reach) is `true`,
    /// left for the dispatch to find out.
    async fn serves(&self, group: &str) -> Result<bool> {
        let agent = worker_agent_id(group).map_err(|e| AgentError::Misconfigured(e.to_string()))?;
        match self.client.agent(&agent).await {
            Err(e) if e.is_not_found() => Ok(false),
            _ => Ok(true),
        }
    }

    async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult> {
        let now = Instant::now();
        // A timeout too long to add is no deadline (one far off).
        let deadline = now
            .checked_add(Duration::from_millis(call.timeout_ms))
            .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)));
        let mut renewal_pause = RENEWAL_PAUSE_INITIAL;
        let mut n = 0;
        loop {
            let Some(exec) = self.start(&call, n, deadline).await? else {
                timed_out(&call, None);
                return Err(AgentError::RemoteTimeout.into());
            };
            tracing::debug!(
                invocation_id = %call.payload.invocation.invocation_id,
                action_id = %call.payload.invocation.action_id,
                group = %call.target_group,
                execution_id = %exec.id,
                attempt = call.payload.attempt,
                execution = n,
                "remote action dispatched through the kernel"
            );
            let Some(ended) = self.ended(&call, &exec.id, deadline).await? else {
                timed_out(&call, Some(&exec.id));
                // Not to be delivered again after the controller gave up on it (an execution
                // that has ended meanwhile stays as it is).
                let _ = self.client.cancel(&exec.id).await;
                return Err(AgentError::RemoteTimeout.into());
            };
            match self.next(&call, &ended, n, deadline).await {
                Next::Answer => return answer(&call, ended),
                Next::Again => {}
                Next::AfterRenewal => {
                    // No pause past the deadline: the refusal is the answer then.
                    if deadline.saturating_duration_since(Instant::now()) <= renewal_pause {
                        return answer(&call, ended);
                    }
                    tokio::time::sleep(renewal_pause).await;
                    renewal_pause = (renewal_pause * 2).min(RENEWAL_PAUSE_MAX);
                }
            }
            n += 1;
        }
    }

    /// Walks the call's executions as [`RemoteDispatcher::dispatch`] does (a create that
    /// repeats one's key answers the existing execution) and cancels the first that has not
    /// ended. Called when the controller's own timeout dropped the wait; a kernel that cannot
    /// be reached within 5 s leaves the execution as it is. (When the timeout fell in a pause
    /// before the next execution, that one is created here, and cancelled at once.)
    async fn cancel(&self, call: &RemoteCall) -> Result<()> {
        let deadline = Instant::now() + CANCEL_LOOKUP_TIMEOUT;
        let mut n = 0;
        while let Ok(Some(exec)) = self.start(call, n, deadline).await {
            if !exec.status.is_terminal() {
                tracing::debug!(
                    invocation_id = %call.payload.invocation.invocation_id,
                    execution_id = %exec.id,
                    "withdrawing a remote action: cancelling its kernel execution"
                );
                let _ = self.client.cancel(&exec.id).await;
                return Ok(());
            }
            if self.next(call, &exec, n, deadline).await == Next::Answer {
                return Ok(());
            }
            n += 1;
        }
        Ok(())
    }
}

/// Logs that the kernel could not be reached for `call` (asked again after `pause`).
fn unreachable_kernel(call: &RemoteCall, e: &rebuno::Error, pause: Duration) {
    tracing::warn!(
        invocation_id = %call.payload.invocation.invocation_id,
        action_id = %call.payload.invocation.action_id,
        retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
        error = %e,
        "the kernel could not be reached for a remote action: asking again"
    );
}

/// Logs that `call` timed out (its execution, when there is one, is cancelled).
fn timed_out(call: &RemoteCall, execution_id: Option<&str>) {
    tracing::warn!(
        invocation_id = %call.payload.invocation.invocation_id,
        action_id = %call.payload.invocation.action_id,
        execution_id = %execution_id.unwrap_or(""),
        timeout_ms = call.timeout_ms,
        "remote action timed out: withdrawing it"
    );
}

/// The call's answer from its ended execution, logged.
fn answer(call: &RemoteCall, exec: Execution) -> Result<RemoteResult> {
    let (status, execution_id) = (exec.status, exec.id.clone());
    let result = answer_of(call, exec);
    let invocation_id = &call.payload.invocation.invocation_id;
    match &result {
        Ok(r) => tracing::debug!(
            %invocation_id,
            %execution_id,
            outputs = r.outputs.len(),
            "remote action answered"
        ),
        Err(e) if status == ExecutionStatus::Completed => tracing::debug!(
            %invocation_id,
            %execution_id,
            error = %e,
            "remote action answered with an error"
        ),
        Err(e) => tracing::warn!(
            %invocation_id,
            %execution_id,
            %status,
            error = %e,
            "remote worker's execution did not complete"
        ),
    }
    result
}

/// The call's answer from its ended execution.
fn answer_of(call: &RemoteCall, exec: Execution) -> Result<RemoteResult> {
    match exec.status {
        ExecutionStatus::Completed => {
            let output = exec.output.unwrap_or(Value::Null);
            match serde_json::from_value::<Answer>(output) {
                Ok(Answer::Outputs(result)) => Ok(result),
                Ok(Answer::Error { error, .. }) => {
                    Err(AgentError::RemoteError(bounded(error)).into())
                }
                Err(e) => Err(failed(
                    call,
                    &format!(
                        "kernel execution {} answered no remote result ({e})",
                        exec.id
                    ),
                )),
            }
        }
        ExecutionStatus::Failed => Err(failed(call, &bounded(exec.failure_reason))),
        status => Err(failed(
            call,
            &format!("kernel execution {} ended {status}", exec.id),
        )),
    }
}

/// `remote worker for action '<id>' failed: <message>`.
fn failed(call: &RemoteCall, message: &str) -> Error {
    AgentError::RemoteWorkerFailed {
        action: call.payload.invocation.action_id.clone(),
        message: bounded(message.to_owned()),
    }
    .into()
}

/// `message`, cut at [`MAX_MESSAGE_BYTES`] (on a character boundary) with `…` when longer.
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// Whether asking the kernel again may help: it could not be reached, or answered `429` or a
/// server error.
fn transient(e: &rebuno::Error) -> bool {
    match e {
        rebuno::Error::Network(_) => true,
        rebuno::Error::Api(api) => api.code == ErrorCode::TooManyRequests || api.status >= 500,
        _ => false,
    }
}

/// Sleeps `pause` (doubling it for next time, up to [`RETRY_MAX`]) unless that would pass
/// `deadline`; `false` when there is no time left.
async fn pause_until(pause: &mut Duration, deadline: Instant) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    tokio::time::sleep((*pause).min(deadline - now)).await;
    *pause = (*pause * 2).min(RETRY_MAX);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_agent_ids_are_made_only_from_plain_group_names() {
        assert_eq!(
            worker_agent_id("receipt-chat").unwrap(),
            "receipt-worker-receipt-chat"
        );
        assert_eq!(
            worker_agent_id("a.b_C-9").unwrap(),
            "receipt-worker-a.b_C-9"
        );
        for bad in ["", "a b", "a/b", "é", &"x".repeat(MAX_GROUP_BYTES + 1)] {
            assert!(worker_agent_id(bad).is_err(), "{bad:?}");
        }
        assert!(worker_agent_id(&"x".repeat(MAX_GROUP_BYTES)).is_ok());
    }

    /// An execution in `status` with `output`.
    fn ended(status: &str, output: Value) -> Execution {
        serde_json::from_value(serde_json::json!({
            "id": "0190a000-0000-7000-8000-000000000000",
            "agent_id": "receipt-worker-payments",
            "input": null,
            "status": status,
            "output": output,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap()
    }

    /// A refusal by `check` that read the claim of attempt `read`.
    fn refused(check: &str, read: Option<u32>) -> Execution {
        let mut output = serde_json::json!({"error": "refused", "refused": check});
        if let Some(read) = read {
            output["claimAttempt"] = read.into();
        }
        ended("completed", output)
    }

    #[test]
    fn only_a_refusal_an_earlier_claim_made_or_the_callers_own_lapse_is_made_again() {
        use Next::{AfterRenewal, Again, Answer};
        // Read before the caller's claim (or no claim at all): the caller's claim cures it.
        assert_eq!(next_after(&refused("claim_expired", Some(1)), 0, 2), Again);
        assert_eq!(next_after(&refused("not_claimed", None), 0, 1), Again);
        assert_eq!(
            next_after(&refused("approval_not_granted", None), 3, 1),
            Again
        );
        assert_eq!(
            next_after(&refused("claim_superseded", Some(1)), 0, 2),
            Again
        );
        // The caller's own claim, seen lapsed: after its renewal; seen otherwise: final.
        assert_eq!(
            next_after(&refused("claim_expired", Some(2)), 0, 2),
            AfterRenewal
        );
        assert_eq!(
            next_after(&refused("claim_mismatch", Some(2)), 0, 2),
            Answer
        );
        // A later claim's: the caller lost the invocation.
        assert_eq!(next_after(&refused("claim_expired", Some(3)), 0, 2), Answer);
        // What no claim cures.
        for check in [
            "not_selected",
            "selection_mismatch",
            "foreign_selection",
            "policy_denied",
            "invocation_ended",
            "run_ended",
            "input_mismatch",
        ] {
            assert_eq!(next_after(&refused(check, None), 0, 5), Answer, "{check}");
        }
        // A call without a claim, the last execution an invocation may have, an answer, an
        // action's own error, a worker's failure.
        assert_eq!(next_after(&refused("claim_expired", Some(1)), 0, 0), Answer);
        let last = MAX_EXECUTIONS_PER_INVOCATION - 1;
        assert_eq!(next_after(&refused("not_claimed", None), last, 1), Answer);
        assert_eq!(
            next_after(&refused("not_claimed", None), last - 1, 1),
            Again
        );
        let outputs = ended("completed", serde_json::json!({"outputs": []}));
        assert_eq!(next_after(&outputs, 0, 2), Answer);
        let own_error = ended("completed", serde_json::json!({"error": "boom"}));
        assert_eq!(next_after(&own_error, 0, 2), Answer);
        let failed = ended("failed", Value::Null);
        assert_eq!(next_after(&failed, 0, 2), Answer);
    }

    #[test]
    fn the_first_execution_keeps_the_invocation_id_as_its_key() {
        assert_eq!(execution_key("inv", 0), "inv");
        assert_eq!(execution_key("inv", 1), "inv#1");
        assert_eq!(execution_key("inv", 12), "inv#12");
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded(long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short".into()), "short");
    }
}
