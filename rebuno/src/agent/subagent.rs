//! Subagents from a tool body: [`subagent`] runs another agent as a child of the calling tool
//! step and answers its output (the flow of the Python SDK's `subagent()`).
//!
//! The runtime knows the running tool step: [`ExecutionContext::invoke`] runs a body that the
//! kernel said `proceed` to inside a scope naming the step, so [`current_step`] names it. [`subagent`]
//! creates the child with `spawned_by {execution, step}` (a repeat, from a body that runs again
//! after a crash, answers the child the step already has and starts nothing), then asks the
//! kernel to `suspend` the execution:
//!
//! - `true` (the child has not settled): the execution is now `blocked` and this dispatch is
//!   over. [`subagent`] answers the control-flow error [`Error::Blocked`] (remembered on the
//!   context, as an approval wait is), the tool step stays open, the handler unwinds and the
//!   dispatch ends without completing anything. When the child settles, the kernel records its
//!   outcome as the step's and dispatches the parent again; there the tool call replays that
//!   outcome and the body does not run again.
//! - `false` (the child already settled, so the kernel already wrote its outcome onto the
//!   step): the step is read back and its outcome answered, so the handler goes on in the same
//!   dispatch.
//!
//! Either way the tool's result is what the kernel recorded: the child's output, or an error
//! whose record has reason `subagent_failed`. A body that returns something else after
//! [`subagent`] does not change it (the step's completion is answered with the record).
//!
//! [`subagent_with`] and [`spawn_subagent_with`] take [`SubagentOptions`] too: a `session` makes
//! the child a turn of that session of its agent (as the Python SDK's `subagent(session=)`
//! does), so it reads the state the session's previous turn completed with and hands its own on
//! to the next.

use super::context::{ExecutionContext, current_step, error_data, error_message, execution};
use crate::error::{Error, Result};
use crate::protocol::{CreateExecutionRequest, Execution, SpawnedBy, StepStatus};
use serde::Serialize;
use serde_json::Value;

/// The current execution and running step, or an error naming what `agent_id`'s spawn lacks.
fn spawner(agent_id: &str) -> Result<(ExecutionContext, String)> {
    let ctx = execution()?;
    let step_id = current_step().ok_or_else(|| {
        Error::Other(format!(
            "subagent({agent_id:?}) called outside a tool body (it needs the running tool step)"
        ))
    })?;
    Ok((ctx, step_id))
}

/// How a subagent is created, beyond its agent and input: [`subagent_with`] and
/// [`spawn_subagent_with`] take it ([`subagent`] and [`spawn_subagent`] use the default).
///
/// ```ignore
/// let said = rebuno::agent::subagent_with(
///     "researcher",
///     json!({"topic": topic}),
///     SubagentOptions::new().session(format!("research-{user}")),
/// )
/// .await?;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubagentOptions {
    /// The session of the child's agent the child is a turn of (empty: none). Like any turn,
    /// it waits `pending` while another turn of that session runs, reads the state the
    /// session's latest completed turn left (`rebuno::previous`) and hands its own on. At most
    /// 255 bytes, without control characters (the create is refused otherwise).
    pub session: String,
}

impl SubagentOptions {
    /// The defaults: no session.
    pub fn new() -> Self {
        SubagentOptions::default()
    }

    /// Runs the child as a turn of `session`.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = session.into();
        self
    }
}

/// Starts `agent_id` on `input` as the child of the running tool step, without waiting for it,
/// and answers the child execution. The step has at most one child: calling this again from
/// the same step (a body run again after a crash) answers that child and starts nothing.
/// Most tools want [`subagent`], which also waits; this is the first half of it.
///
/// The create is the agent's own request under the execution's lease (signed over HTTP): the
/// kernel lets only the parent's agent, holding its current lease, create a child of its step,
/// and needs no API key for it.
pub async fn spawn_subagent(agent_id: &str, input: impl Serialize) -> Result<Execution> {
    spawn_subagent_with(agent_id, input, SubagentOptions::default()).await
}

/// [`spawn_subagent`] with `options` (a session for the child).
pub async fn spawn_subagent_with(
    agent_id: &str,
    input: impl Serialize,
    options: SubagentOptions,
) -> Result<Execution> {
    let (ctx, step_id) = spawner(agent_id)?;
    let input = serde_json::to_value(input)?;
    spawn_child(&ctx, agent_id, input, step_id, options).await
}

async fn spawn_child(
    ctx: &ExecutionContext,
    agent_id: &str,
    input: Value,
    step_id: String,
    options: SubagentOptions,
) -> Result<Execution> {
    let spawned_by = SpawnedBy {
        execution_id: ctx.execution_id().to_owned(),
        step_id,
    };
    let req = CreateExecutionRequest {
        session: options.session,
        ..CreateExecutionRequest::child(agent_id, input, &spawned_by)
    };
    ctx.flush().await?;
    ctx.transport()
        .create_child(&req, ctx.lease())
        .await
        .map_err(|e| ctx.check(e))
}

/// Runs `agent_id` on `input` as a subagent of the calling tool and answers its output. Call
/// it from a tool body (`#[rebuno::tool]` or [`crate::wrap_tool`]); elsewhere it is an error.
///
/// While the child runs, this answers [`Error::Blocked`]: propagate it (`?`). The dispatch
/// ends, the execution waits `blocked`, and once the child settles the handler runs again and
/// the tool call replays the child's output without running its body. A failed, cancelled or
/// exhausted child makes the tool fail (its record's reason is `subagent_failed`). See the
/// module docs for the whole flow. Created as [`spawn_subagent`] creates it.
pub async fn subagent(agent_id: &str, input: impl Serialize) -> Result<Value> {
    subagent_with(agent_id, input, SubagentOptions::default()).await
}

/// [`subagent`] with `options`: with a session, the child runs as a turn of that session of
/// its agent (see [`SubagentOptions::session`]).
pub async fn subagent_with(
    agent_id: &str,
    input: impl Serialize,
    options: SubagentOptions,
) -> Result<Value> {
    let (ctx, step_id) = spawner(agent_id)?;
    let input = serde_json::to_value(input)?;
    spawn_child(&ctx, agent_id, input, step_id.clone(), options).await?;
    let suspended = ctx
        .transport()
        .suspend(ctx.execution_id(), ctx.lease())
        .await
        .map_err(|e| ctx.check(e))?;
    if suspended {
        return Err(ctx.suspend(Error::Blocked {
            approval_id: None,
            reason: Some(format!("waiting for subagent {agent_id:?}")),
        }));
    }
    // Settled already: the kernel wrote the child's outcome onto the step.
    let step = ctx
        .transport()
        .step(ctx.execution_id(), &step_id)
        .await
        .map_err(|e| ctx.check(e))?;
    match step.status {
        StepStatus::Succeeded => Ok(step.result.unwrap_or(Value::Null)),
        StepStatus::Failed => Err(Error::Tool {
            message: error_message(step.error.as_ref().unwrap_or(&Value::Null)),
            data: step.error.as_ref().and_then(error_data),
            tool_id: step.target,
            step_id,
            retryable: false,
        }),
        other => Err(Error::Other(format!(
            "the kernel did not suspend for subagent {agent_id:?}, yet step {step_id} is {}",
            other.as_str()
        ))),
    }
}
