//! Keeping a claim alive while its remote call runs: the owner appends `action.heartbeat`
//! every heartbeat interval (lease / 3 unless configured), each moving the claim's expiry one
//! full lease past its own time, until the call ends. A renewal that fails is tried again at the
//! next beat, which the lease leaves room for. A controller that dies stops renewing, so its
//! claim lapses one lease after its last heartbeat and another controller takes the invocation
//! over (the attempt-fenced claim and the manifest's CAS stay the fences).

use super::super::control::{self, ACTION_HEARTBEAT, ActionHeartbeat, event_id};
use super::super::{Action, AgentTypes};
use super::Pass;
use super::claims::ClaimedInvocation;
use crate::receipt::ReceiptContext;
use crate::runtime::{Command, Runtime};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// The shortest heartbeat interval (a lease of a few ms must not spin).
const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// The renewals of one claim, ready to run beside its remote call.
pub(super) struct Renewal {
    runtime: Arc<Runtime>,
    stream: String,
    context: ReceiptContext,
    invocation_id: String,
    action_id: String,
    claim_id: String,
    attempt: u32,
    lease_ms: i64,
    every: Duration,
}

impl Renewal {
    /// Renews the claim every interval, forever: drop it when the call ends.
    pub(super) async fn run(self) -> Infallible {
        let mut n: u64 = 0;
        loop {
            tokio::time::sleep(self.every).await;
            n += 1;
            let heartbeat = ActionHeartbeat {
                invocation_id: self.invocation_id.clone(),
                action_id: self.action_id.clone(),
                claim_id: self.claim_id.clone(),
                attempt: self.attempt,
                lease_expires_at: self.runtime.clock().now_ms().saturating_add(self.lease_ms),
            };
            let Ok(body) = control::body(ACTION_HEARTBEAT, &heartbeat) else {
                continue;
            };
            let command = Command::new(vec![body])
                .event_id(event_id::heartbeat(&self.invocation_id, self.attempt, n))
                .context(self.context.clone());
            // A failure is retried at the next beat; the claim holds until its expiry anyway.
            if let Err(e) = self.runtime.execute(&self.stream, command).await {
                super::observe::renewal_failed(&self.invocation_id, self.attempt, &e);
            }
        }
    }
}

impl<A: AgentTypes> Pass<'_, A> {
    /// The renewals of `claim`'s lease while it runs `action` remotely.
    pub(super) fn renewal(&self, claim: &ClaimedInvocation<A>, action: &Action<A>) -> Renewal {
        let opts = &self.controller.opts;
        Renewal {
            runtime: Arc::clone(&self.controller.runtime),
            stream: self.stream.to_owned(),
            context: self.context.clone(),
            invocation_id: claim.durable.invocation_id.clone(),
            action_id: action.id().to_owned(),
            claim_id: claim.durable.claim_id.clone(),
            attempt: claim.durable.attempt,
            lease_ms: i64::try_from(opts.lease.as_millis()).unwrap_or(i64::MAX),
            every: opts.heartbeat.unwrap_or(opts.lease / 3).max(MIN_HEARTBEAT),
        }
    }
}
