//! The typed half of a worker's service of one call, once the registry found the agent: the
//! spec's re-checks, the invocation's authority on the run stream ([`authorize`]), then the
//! action itself, its outputs buffered for the controller to commit.

use super::super::action::{ActionContext, DurableActionContext, OutputBuffer};
use super::super::{AgentError, AgentSpec, AgentTypes, AgentView, ExecutionMode};
use super::call::{Delivery, RemoteCall, RemoteResult};
use super::check::authorize;
use crate::error::{Error, Result};
use crate::receipt::verify;
use crate::runtime::Runtime;
use std::sync::Arc;

/// The typed half of [`RemoteWorker::handle_delivered`](super::RemoteWorker::handle_delivered), after the registry lookup.
pub(crate) async fn execute_remote<A: AgentTypes>(
    spec: Arc<AgentSpec<A>>,
    runtime: Arc<Runtime>,
    call: RemoteCall,
    delivery: Delivery<'_>,
) -> Result<RemoteResult> {
    let p = &call.payload;
    if spec.id() != p.invocation.agent_id || spec.version() != p.invocation.agent_version {
        return Err(AgentError::RemoteVersion {
            action: p.invocation.action_id.clone(),
            agent: p.invocation.agent_id.clone(),
            version: p.invocation.agent_version.clone(),
            loaded_agent: spec.id().to_owned(),
            loaded_version: spec.version().to_owned(),
        }
        .into());
    }
    let chain = runtime.read(&p.invocation.run_stream).await?;
    // All of it: the invocation's authority is read from the receipts after the selected head.
    verify(&chain).map_err(|f| Error::InvalidChain {
        stream: p.invocation.run_stream.clone(),
        reason: f.reason,
        at: f.at,
    })?;
    let prefix_len = match &p.invocation.selected_head {
        None => 0,
        Some(head) => match chain.iter().position(|r| r.hash() == head) {
            Some(i) => i + 1,
            None => {
                return Err(AgentError::RemoteHeadUnavailable {
                    action: p.invocation.action_id.clone(),
                    head: head.clone(),
                }
                .into());
            }
        },
    };
    let prefix = &chain[..prefix_len];
    let action = spec
        .action(&p.invocation.action_id)
        .ok_or_else(|| AgentError::UnknownAction {
            action: p.invocation.action_id.clone(),
            agent: spec.id().to_owned(),
        })?;
    if action.kind() != p.invocation.kind
        || action.mode() != p.invocation.execution
        || action.mode() != ExecutionMode::Remote
    {
        return Err(AgentError::RemoteProvenance(p.invocation.action_id.clone()).into());
    }
    let mut view = A::View::default();
    for r in prefix {
        view.apply(r);
    }
    if !action.is_runnable(&view) {
        return Err(AgentError::RemoteNotRunnable(p.invocation.action_id.clone()).into());
    }
    let run = action
        .run
        .clone()
        .ok_or_else(|| AgentError::MissingRun(p.invocation.action_id.clone()))?;
    let now = runtime.clock().now_ms();
    let granted =
        authorize(&chain, &p.invocation.run_stream, &call, delivery, now).map_err(|refusal| {
            AgentError::RemoteRefused {
                action: p.invocation.action_id.clone(),
                refusal: Box::new(refusal),
            }
        })?;
    let out = OutputBuffer::new(&p.invocation.action_id, spec.receipt_types());
    let durable = Arc::new(DurableActionContext {
        run_id: p.invocation.run_id.clone(),
        action_id: p.invocation.action_id.clone(),
        invocation_id: p.invocation.invocation_id.clone(),
        selection_id: p.invocation.selection_id.clone(),
        selected_head: p.invocation.selected_head.clone(),
        claim_id: granted.claim_id,
        claim_owner_id: granted.claim_owner_id,
        attempt: granted.attempt,
    });
    let ctx = ActionContext::new(Arc::new(view), durable, out.clone());
    run(Arc::clone(spec.agent()), ctx).await?;
    Ok(RemoteResult {
        outputs: out.close(),
    })
}
