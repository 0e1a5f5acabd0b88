//! Approvals: list, grant, deny and expiry. Each resolution resumes the blocked execution with
//! a new dispatch; a deny resumes it too (the resubmitted step is answered `denied`).
//!
//! Expiry runs on time: a timer sleeps until the earliest pending timeout (woken whenever an
//! approval is created), instead of the Go kernel's ten-minute sweep.

use super::subagents::resume_if_idle;
use super::supervise::supervise;
use super::tx::{deny_step, payload};
use super::{Kernel, KernelError, KernelResult, Metrics};
use crate::protocol::Timestamp;
use crate::protocol::{
    Approval, ApprovalEventPayload, ApprovalStatus, EventType, Principal, RATIONALE_TIMEOUT,
    REASON_APPROVAL_DENIED, REASON_APPROVAL_TIMEOUT, Scope, StepEventPayload, StepStatus,
};
use crate::store::{StoreExt, StoreResult, Tx};
use serde_json::json;
use std::time::{Duration, SystemTime};

/// The approval timer's longest sleep.
const TIMER_MAX_SLEEP: Duration = Duration::from_secs(30);
/// Slack after a timeout, so the timer wakes when it is due rather than just before.
const TIMER_SLACK: Duration = Duration::from_millis(5);
/// The sleep after a round that expired nothing although a timeout was due.
const TIMER_STUCK_SLEEP: Duration = Duration::from_secs(1);

/// How long the approval timer sleeps: until the earliest pending timeout (`next`) plus a
/// little slack, at most 30 s. If that timeout is already due but the last round expired
/// nothing (a failing store, or a wall clock stepped under it), 1 s: a stuck timeout must not
/// make the loop spin. Timeouts are stored wall-clock times, so a step of the wall clock moves
/// them; the 30 s cap bounds how late a backward step can make one.
fn timer_sleep(next: Option<SystemTime>, now: SystemTime, progressed: bool) -> Duration {
    match next.map(|t| t.duration_since(now)) {
        None => TIMER_MAX_SLEEP,
        Some(Ok(left)) if !left.is_zero() => left.min(TIMER_MAX_SLEEP) + TIMER_SLACK,
        Some(_) if progressed => TIMER_SLACK,
        Some(_) => TIMER_STUCK_SLEEP,
    }
}

/// Who decides an approval.
#[derive(Debug, Clone, Default)]
struct Decider {
    /// Recorded as `decided_by`, checked against the approver list.
    decided_by: String,
    /// The body's `decided_by`, recorded as `asserted_by`.
    asserted_by: String,
    /// The decider's groups, also checked against the approver list.
    groups: Vec<String>,
}

impl Decider {
    /// The decider `principal` is, with the `decided_by` its request's body asserted: an API
    /// key decides as its subject, the admin token as whoever the body names.
    fn new(principal: &Principal, asserted_by: &str) -> Self {
        Decider {
            decided_by: if principal.is_admin_token() {
                asserted_by.to_owned()
            } else {
                principal.subject.clone()
            },
            asserted_by: asserted_by.to_owned(),
            groups: principal.groups.clone(),
        }
    }
}

/// Why `principal`, deciding as `decided_by` (an API key decides as its subject and groups,
/// the admin token as `decided_by`), may not grant or deny `approval`: it lacks scope
/// `approvals:write`, or it is not among the approval's approvers. `None` when it may. Every
/// decision passes this check (whether the approval is still pending is checked apart), and
/// the console asks it before it offers one.
pub fn decision_refusal(
    approval: &Approval,
    principal: &Principal,
    decided_by: &str,
) -> Option<KernelError> {
    if !principal.allows(Scope::ApprovalsWrite) {
        return Some(KernelError::forbidden(format!(
            "this API key lacks scope {}",
            Scope::ApprovalsWrite
        )));
    }
    let decider = Decider::new(principal, decided_by);
    (!approval.may_decide_in(&decider.decided_by, &decider.groups)).then(|| {
        KernelError::forbidden(format!(
            "{:?} is not an approver for this approval",
            decider.decided_by
        ))
    })
}

/// How an approval is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    Grant,
    Deny,
    Expire,
}

/// Applies a resolution inside `tx`: the approval's new status, the step's new status, the
/// execution resumed and a new dispatch queued, with the spec's event sequence.
fn resolve_in_tx(
    tx: &mut dyn Tx,
    mut approval: Approval,
    how: Resolution,
    decider: &Decider,
    rationale: &str,
    now: &Timestamp,
    max_attempts: u32,
) -> StoreResult<()> {
    let decided_by = decider.decided_by.as_str();
    let (status, event) = match how {
        Resolution::Grant => (ApprovalStatus::Granted, EventType::ApprovalGranted),
        Resolution::Deny => (ApprovalStatus::Denied, EventType::ApprovalDenied),
        Resolution::Expire => (ApprovalStatus::Expired, EventType::ApprovalExpired),
    };
    approval.status = status;
    approval.decided_by = decided_by.to_owned();
    approval.asserted_by = decider.asserted_by.clone();
    approval.decided_at = Some(now.to_owned());
    approval.rationale = rationale.to_owned();
    tx.approvals().put(&approval)?;
    let mut events = vec![(
        event,
        payload(&ApprovalEventPayload {
            approval_id: approval.id.clone(),
            step_id: approval.step_id.clone(),
            execution_id: approval.execution_id.clone(),
            status,
            decided_by: Some(decided_by.to_owned()).filter(|d| !d.is_empty()),
            asserted_by: Some(decider.asserted_by.clone()).filter(|a| a != decided_by),
            rationale: Some(rationale.to_owned()).filter(|r| !r.is_empty()),
        }),
    )];
    if let Some(mut step) = tx.steps().get(&approval.execution_id, &approval.step_id)?
        && !step.status.is_terminal()
    {
        if how == Resolution::Grant {
            step.status = StepStatus::Allowed;
            tx.steps().put(&step)?;
            events.push((
                EventType::StepAllowed,
                payload(&StepEventPayload::new(
                    &step.step_id,
                    step.kind.clone(),
                    &step.target,
                )),
            ));
        } else {
            let reason = match how {
                Resolution::Expire => REASON_APPROVAL_TIMEOUT,
                _ if rationale.is_empty() => REASON_APPROVAL_DENIED,
                _ => rationale,
            };
            events.push(deny_step(
                tx,
                &mut step,
                json!({ "reason": reason }),
                "",
                now,
            )?);
        }
    }
    // Other approvals of the execution may still be pending, or subagents unsettled; it
    // resumes when none are.
    if let Some(mut exec) = tx.executions().get(&approval.execution_id)? {
        resume_if_idle(tx, &mut exec, now, max_attempts, &mut events)?;
    }
    tx.events().record(&approval.execution_id, now, &events)?;
    Ok(())
}

impl Kernel {
    /// An approval (`404` if unknown).
    pub async fn approval(&self, id: &str) -> KernelResult<Approval> {
        let id = id.to_owned();
        self.inner
            .store
            .read(move |tx| tx.approvals().get(&id))
            .await?
            .ok_or_else(KernelError::not_found)
    }

    /// Grants a pending approval as the admin: `404`, `409` unless pending, `403` if
    /// `decided_by` is not an approver. The execution resumes with a new dispatch.
    pub async fn grant(&self, id: &str, decided_by: &str, rationale: &str) -> KernelResult<()> {
        self.grant_as(id, &Principal::admin(), decided_by, rationale)
            .await
    }

    /// Denies a pending approval as the admin; same errors as [`Kernel::grant`]. The execution
    /// resumes; the step is denied with reason `rationale` (or `approval_denied`).
    pub async fn deny(&self, id: &str, decided_by: &str, rationale: &str) -> KernelResult<()> {
        self.deny_as(id, &Principal::admin(), decided_by, rationale)
            .await
    }

    /// Grants a pending approval as `principal`. An API key decides as its subject (and its
    /// groups): `decided_by` is only recorded as `asserted_by`. The admin token decides as
    /// `decided_by`. Same errors as [`Kernel::grant`], and `403` for a principal without scope
    /// `approvals:write` ([`decision_refusal`]).
    pub async fn grant_as(
        &self,
        id: &str,
        principal: &Principal,
        decided_by: &str,
        rationale: &str,
    ) -> KernelResult<()> {
        self.decide(id, Resolution::Grant, principal, decided_by, rationale)
            .await
    }

    /// Denies a pending approval as `principal` (see [`Kernel::grant_as`]).
    pub async fn deny_as(
        &self,
        id: &str,
        principal: &Principal,
        decided_by: &str,
        rationale: &str,
    ) -> KernelResult<()> {
        self.decide(id, Resolution::Deny, principal, decided_by, rationale)
            .await
    }

    async fn decide(
        &self,
        id: &str,
        how: Resolution,
        principal: &Principal,
        decided_by: &str,
        rationale: &str,
    ) -> KernelResult<()> {
        let decider = Decider::new(principal, decided_by);
        let (principal, decided_by) = (principal.clone(), decided_by.to_owned());
        let approval = self.approval(id).await?;
        let created = approval.created_at.to_system_time();
        let (execution_id, step_id) = (approval.execution_id.clone(), approval.step_id.clone());
        let _guard = self.lock_execution(&approval.execution_id).await?;
        let now = self.now_ts();
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let (id, rationale) = (id.to_owned(), rationale.to_owned());
        let approval_id = id.clone();
        self.inner
            .store
            .write(move |tx| {
                let Some(approval) = tx.approvals().get(&id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                let to = if how == Resolution::Grant {
                    ApprovalStatus::Granted
                } else {
                    ApprovalStatus::Denied
                };
                if let Err(e) = approval.status.transition(to) {
                    return Ok(Err(KernelError::from(&e)));
                }
                if let Some(refusal) = decision_refusal(&approval, &principal, &decided_by) {
                    return Ok(Err(refusal));
                }
                resolve_in_tx(tx, approval, how, &decider, &rationale, &now, max_attempts)?;
                Ok(Ok(()))
            })
            .await??;
        tracing::info!(
            approval_id = %approval_id,
            execution_id,
            step_id,
            resolution = if how == Resolution::Grant { "granted" } else { "denied" },
            "approval decided"
        );
        self.note_resolution(created);
        self.note_changed(&execution_id);
        self.inner.queued.notify_one();
        self.announce_dispatch();
        Ok(())
    }

    fn note_resolution(&self, created: std::time::SystemTime) {
        Metrics::inc(&self.inner.metrics.approvals_resolved);
        if let Ok(wait) = self.now().duration_since(created) {
            self.inner.metrics.approval_wait_ms.fetch_add(
                wait.as_millis() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// Expires every pending approval whose timeout has passed: approval `expired` (rationale
    /// `timeout`), step denied `approval_timeout`, execution resumed. Returns how many.
    pub async fn expire_approvals(&self) -> KernelResult<usize> {
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let n = self
            .sweep_due(
                |tx, now, limit| tx.approvals().due(now, limit),
                |approval| &approval.execution_id,
                move |tx, approval, now| {
                    let Some(cur) = tx.approvals().get(&approval.id)? else {
                        return Ok(None);
                    };
                    if cur.status != ApprovalStatus::Pending || &cur.timeout_at > now {
                        return Ok(None);
                    }
                    resolve_in_tx(
                        tx,
                        cur,
                        Resolution::Expire,
                        &Decider::default(),
                        RATIONALE_TIMEOUT,
                        now,
                        max_attempts,
                    )?;
                    Ok(Some(()))
                },
                |approval, ()| {
                    tracing::info!(
                        approval_id = %approval.id,
                        execution_id = %approval.execution_id,
                        step_id = %approval.step_id,
                        resolution = "expired",
                        "approval decided"
                    );
                    self.note_resolution(approval.created_at.to_system_time());
                    self.note_changed(&approval.execution_id);
                },
            )
            .await?;
        if n > 0 {
            self.inner.queued.notify_one();
            self.announce_dispatch();
        }
        Ok(n)
    }

    /// Runs the approval timer until aborted: sleeps until the earliest pending timeout (at
    /// most 30 s, woken early when an approval is created) and expires what is due. A panic
    /// restarts it (see `supervise`).
    pub fn spawn_approval_timer(&self) -> tokio::task::JoinHandle<()> {
        let kernel = self.clone();
        supervise("approval timer", move || {
            let kernel = kernel.clone();
            async move { kernel.approval_timer().await }
        })
    }

    async fn approval_timer(&self) {
        loop {
            let progressed = match self.expire_approvals().await {
                Ok(n) => n > 0,
                Err(e) => {
                    tracing::warn!(error = %e, "expiring approvals failed");
                    false
                }
            };
            let next = match self
                .inner
                .store
                .read(|tx| tx.approvals().next_timeout())
                .await
            {
                Ok(next) => next.as_ref().map(Timestamp::to_system_time),
                Err(e) => {
                    tracing::warn!(error = %e, "reading the next approval timeout failed");
                    None
                }
            };
            let sleep = timer_sleep(next, self.now(), progressed);
            let _ = tokio::time::timeout(sleep, self.inner.approvals_changed.notified()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timer_neither_spins_nor_sleeps_past_its_cap() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        assert_eq!(timer_sleep(None, now, false), TIMER_MAX_SLEEP);
        assert_eq!(
            timer_sleep(Some(now + s(3)), now, false),
            s(3) + TIMER_SLACK
        );
        // A timeout far ahead (or a wall clock stepped back under it): at most the cap.
        assert_eq!(
            timer_sleep(Some(now + s(86_400)), now, false),
            TIMER_MAX_SLEEP + TIMER_SLACK
        );
        // Due: go again at once while rounds make progress, slowly when they do not.
        assert_eq!(timer_sleep(Some(now - s(5)), now, true), TIMER_SLACK);
        assert_eq!(timer_sleep(Some(now), now, false), TIMER_STUCK_SLEEP);
        assert_eq!(timer_sleep(Some(now - s(5)), now, false), TIMER_STUCK_SLEEP);
    }
}
