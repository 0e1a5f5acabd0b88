//! Running claimed invocations: a local action under the execution timeout, a remote one through
//! the dispatcher under the call timeout (its claim renewed while it runs, the call withdrawn
//! when it times out); one invocation runs in place, several run concurrently in their own
//! tasks, and a panic becomes an error of its invocation.

use super::super::action::{ActionContext, BoxFuture, OutputBuffer, validate_output};
use super::super::remote::{RemoteCall, payload};
use super::super::{AgentError, AgentTypes, ExecutionMode};
use super::Pass;
use super::claims::ClaimedInvocation;
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tracing::Instrument as _;

/// The text of a panic payload (empty when it is not text).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Polls a future, turning a panic inside it into an `Err` with the payload (what a task's
/// `JoinError` would carry), for work run without a task of its own.
struct CatchUnwind<T>(BoxFuture<T>);

impl<T> std::future::Future for CatchUnwind<T> {
    type Output = std::thread::Result<T>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = self.get_mut().0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || inner.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Err(payload) => std::task::Poll::Ready(Err(payload)),
        }
    }
}

impl<A: AgentTypes> Pass<'_, A> {
    /// The work of one claimed invocation: a local run under the execution timeout, or a
    /// remote call under the call timeout; either way the output bodies.
    fn invocation_work(&self, claim: &ClaimedInvocation<A>) -> BoxFuture<Result<Vec<Value>>> {
        let action_id = claim.action.id().to_owned();
        match claim.action.mode() {
            ExecutionMode::Local => {
                let Some(run) = claim.action.run.clone() else {
                    return Box::pin(async move { Err(AgentError::MissingRun(action_id).into()) });
                };
                let lease = self.controller.opts.lease;
                let timeout = self.controller.opts.execution_timeout.unwrap_or_else(|| {
                    lease
                        .saturating_sub(Duration::from_secs(1))
                        .max(Duration::from_secs(5))
                });
                let out = OutputBuffer::new(&action_id, self.spec().receipt_types());
                let ctx = ActionContext::new(
                    Arc::clone(&claim.view),
                    Arc::clone(&claim.durable),
                    out.clone(),
                );
                let fut = run(Arc::clone(self.spec().agent()), ctx);
                Box::pin(async move {
                    let result = tokio::time::timeout(timeout, fut).await;
                    let outputs = out.close();
                    match result {
                        Ok(Ok(())) => Ok(outputs),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(AgentError::ExecutionTimeout {
                            action: action_id,
                            ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        }
                        .into()),
                    }
                })
            }
            ExecutionMode::Remote => {
                let Some(dispatcher) = self.controller.opts.dispatcher.clone() else {
                    return Box::pin(
                        async move { Err(AgentError::NoDispatcher(action_id).into()) },
                    );
                };
                let group = claim
                    .action
                    .group()
                    .map_or_else(|| self.controller.opts.default_group.clone(), str::to_owned);
                let timeout = self.controller.opts.remote_timeout;
                let call = RemoteCall::new(
                    payload(
                        self.spec(),
                        self.stream,
                        &claim.durable,
                        claim.action.kind(),
                        claim.action.mode(),
                        claim.index,
                    ),
                    group,
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                );
                let declared = self.spec().receipt_types();
                let renewal = self.renewal(claim, &claim.action);
                Box::pin(async move {
                    let withdraw = call.clone();
                    let dispatched = tokio::time::timeout(timeout, dispatcher.dispatch(call));
                    // The claim is renewed for as long as the call runs, and no longer.
                    let result = tokio::select! {
                        result = dispatched => result,
                        never = renewal.run() => match never {},
                    };
                    let result = match result {
                        Ok(answer) => answer?,
                        Err(_) => {
                            // Best effort: a durable dispatcher withdraws the call, so that it
                            // is not delivered later; the timeout is the answer either way.
                            let _ = dispatcher.cancel(&withdraw).await;
                            return Err(AgentError::RemoteTimeout.into());
                        }
                    };
                    for body in &result.outputs {
                        validate_output(&action_id, declared, body)?;
                    }
                    Ok(result.outputs)
                })
            }
        }
    }

    /// Runs every claimed invocation: one alone right here, several concurrently in their own
    /// tasks; results come back in claim order, a panic as [`AgentError::Panicked`]. Dropping
    /// the pass drops (aborts) them all.
    pub(super) async fn run_claimed(
        &self,
        claimed: &[ClaimedInvocation<A>],
    ) -> Vec<Result<Vec<Value>>> {
        let panicked = |claim: &ClaimedInvocation<A>, message: String| -> Error {
            super::observe::action_panicked(claim.action.id(), &message);
            AgentError::Panicked {
                action: claim.action.id().to_owned(),
                message,
            }
            .into()
        };
        if let [claim] = claimed {
            // No task hop for the common single invocation.
            let work = self.invocation_work(claim).instrument(claim.span.clone());
            let result = CatchUnwind(Box::pin(work))
                .await
                .unwrap_or_else(|p| Err(panicked(claim, panic_message(p.as_ref()))));
            return vec![result];
        }
        let mut set = JoinSet::new();
        let mut slots: HashMap<tokio::task::Id, usize> = HashMap::new();
        for (slot, claim) in claimed.iter().enumerate() {
            let work = self.invocation_work(claim).instrument(claim.span.clone());
            slots.insert(set.spawn(work).id(), slot);
        }
        let mut results: Vec<Option<Result<Vec<Value>>>> = claimed.iter().map(|_| None).collect();
        while let Some(joined) = set.join_next_with_id().await {
            match joined {
                Ok((id, result)) => {
                    if let Some(&slot) = slots.get(&id) {
                        results[slot] = Some(result);
                    }
                }
                Err(e) => {
                    if let Some(&slot) = slots.get(&e.id()) {
                        let message = if e.is_panic() {
                            panic_message(e.into_panic().as_ref())
                        } else {
                            "cancelled".to_owned()
                        };
                        results[slot] = Some(Err(panicked(&claimed[slot], message)));
                    }
                }
            }
        }
        results
            .into_iter()
            .zip(claimed)
            .map(|(r, c)| r.unwrap_or_else(|| Err(panicked(c, "no result".to_owned()))))
            .collect()
    }
}
