//! Submitting an effect: the kernel's decision (or, with local replay, the record's), the
//! occurrence it counts, and the error a refusal raises.

use super::{EffectOutcome, ExecutionContext, LocalReplay, Submitted};
use crate::agent::transport::Submission;
use crate::error::{Error, Result};
use crate::protocol::{Decision, Idempotency, StepDecision, StepKind, StepResource, StepStatus};
use serde_json::Value;
use serde_json::value::RawValue;

impl ExecutionContext {
    /// Submits an effect and maps the decision: `proceed` and `replay` are answered, every
    /// refusal is an error (`Policy`, `RateLimited`, `Blocked`, `Terminated`).
    pub async fn submit(
        &self,
        kind: StepKind,
        target: &str,
        args: Box<RawValue>,
        idempotency: Idempotency,
    ) -> Result<Submitted> {
        let (submitted, _) = self
            .submit_changing(kind, target, args, idempotency, Vec::new())
            .await?;
        Ok(submitted)
    }

    /// [`ExecutionContext::submit`] of an effect that may change the declared `resources`;
    /// also answers the decision's `{key, generation, due}` entries (a checkpoint of each due
    /// one goes with the step's outcome).
    pub async fn submit_changing(
        &self,
        kind: StepKind,
        target: &str,
        args: Box<RawValue>,
        idempotency: Idempotency,
        resources: Vec<String>,
    ) -> Result<(Submitted, Vec<StepResource>)> {
        if let Some(s) = self.suspension() {
            // A dispatch that is unwinding submits nothing more.
            return Err(s);
        }
        self.inner.background.idle().await;
        let mut submission = Submission {
            kind: kind.clone(),
            target: target.to_owned(),
            args,
            idempotency,
            occurrence: None,
            resources,
            completes: None,
        };
        let dec = {
            let _order = self.inner.submit_order.lock().await;
            let local = match &self.inner.local {
                Some(local) => self.local_decision(local, &mut submission).await,
                None => Local::Ask(None),
            };
            match local {
                Local::Replay(key, dec) => {
                    self.count(key, true);
                    dec
                }
                Local::Ask(key) => {
                    // A deferred result goes with this submission.
                    submission.completes = self.inner.deferred.lock().await.take();
                    let carried = submission.completes.clone();
                    let sent = self
                        .inner
                        .transport
                        .submit_step(&self.inner.execution_id, &self.inner.lease, submission)
                        .await;
                    let dec = match sent {
                        Ok(dec) => dec,
                        Err(e) => {
                            // The kernel could not answer, so the result may not have reached
                            // it: kept to be sent again (on its own, before the dispatch ends;
                            // if it was recorded after all, it is answered from the record).
                            if let Some(c) = carried
                                && crate::agent::transport::is_kernel_unavailable(&e)
                            {
                                self.inner.deferred.lock().await.get_or_insert(c);
                            }
                            return Err(self.check(e));
                        }
                    };
                    if let Some(key) = key {
                        self.count(key, dec.step_id.is_some());
                    }
                    dec
                }
            }
        };
        let step_id = dec.step_id.clone().unwrap_or_default();
        match dec.decision {
            Decision::Proceed => {
                self.observe(&kind, target, &dec, EffectOutcome::Ran);
                if step_id.is_empty() {
                    return Err(Error::Other(
                        "kernel answered proceed without a step id".into(),
                    ));
                }
                if self.inner.observer.is_some() {
                    self.running()
                        .insert(step_id.clone(), (kind.clone(), target.to_owned()));
                }
                Ok((Submitted::Proceed { step_id }, dec.resources))
            }
            Decision::Replay => {
                self.observe(&kind, target, &dec, EffectOutcome::Replayed);
                let outcome = match dec.error {
                    Some(err) => Err(err),
                    None => Ok(dec.result.unwrap_or(Value::Null)),
                };
                Ok((Submitted::Replay { step_id, outcome }, Vec::new()))
            }
            other => {
                let outcome = match other {
                    Decision::Blocked => EffectOutcome::Blocked,
                    _ => EffectOutcome::Refused,
                };
                self.observe(&kind, target, &dec, outcome);
                Err(self.refusal(other, dec).await)
            }
        }
    }

    /// Decides `submission` from the local copy of the record when its step is recorded as
    /// succeeded or failed (the kernel would answer `replay`); otherwise sets the occurrence to
    /// send and answers `None`.
    async fn local_decision(&self, local: &LocalReplay, submission: &mut Submission) -> Local {
        // Bad args: let the kernel give its own answer.
        let Ok(args_hash) = crate::identity::args_hash(submission.args.get().as_bytes()) else {
            return Local::Ask(None);
        };
        let key = (
            submission.kind.as_str().to_owned(),
            submission.target.clone(),
            args_hash,
        );
        let occ = local
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .copied()
            .unwrap_or(0);
        submission.occurrence = Some(occ);
        let record = local
            .record
            .get_or_try_init(|| async {
                self.flush().await?;
                let steps = self.inner.transport.steps(&self.inner.execution_id).await?;
                Ok::<_, Error>(steps.into_iter().map(|s| (s.step_id.clone(), s)).collect())
            })
            .await;
        let step_id =
            crate::identity::step_id(&self.inner.execution_id, &key.0, &key.1, &key.2, occ);
        let recorded = record.ok().and_then(|r| r.get(&step_id));
        let dec = match recorded {
            Some(step) if step.status == StepStatus::Succeeded => {
                StepDecision::replay_result(step.result.clone().unwrap_or(Value::Null))
            }
            Some(step) if step.status == StepStatus::Failed => {
                StepDecision::replay_error(step.error.clone().unwrap_or(Value::Null))
            }
            _ => return Local::Ask(Some((key, occ))),
        };
        Local::Replay((key, occ), dec.with_step_id(step_id))
    }

    /// Records that an occurrence was used (only decisions the kernel records use one).
    fn count(&self, (key, occ): Counted, recorded: bool) {
        if let (Some(local), true) = (&self.inner.local, recorded) {
            let mut counts = local
                .counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let next = counts.entry(key).or_insert(0);
            *next = (*next).max(occ + 1);
        }
    }

    /// The error a refused decision raises.
    async fn refusal(&self, decision: Decision, dec: StepDecision) -> Error {
        match decision {
            Decision::Denied => {
                let reason = dec.reason.unwrap_or_else(|| "policy_denied".into());
                // The decision does not name the rule; the recorded step does.
                let rule_id = match dec.step_id.as_deref() {
                    Some(step_id) => self
                        .inner
                        .transport
                        .step(&self.inner.execution_id, step_id)
                        .await
                        .ok()
                        .and_then(|s| s.error)
                        .and_then(|e| e.get("rule_id").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_default(),
                    None => String::new(),
                };
                Error::Policy { reason, rule_id }
            }
            Decision::RateLimited => Error::RateLimited {
                reason: dec.reason.unwrap_or_else(|| "rate_limit_exceeded".into()),
            },
            Decision::Blocked | Decision::ExecutionBlocked => self.suspend(Error::Blocked {
                approval_id: dec.approval_id,
                reason: dec.reason,
            }),
            Decision::ExecutionTerminal => self.suspend(Error::Terminated),
            other => Error::Other(format!("unexpected step decision: {other}")),
        }
    }
}

/// An effect's (kind, target, args hash) and the occurrence this dispatch gives it.
type Counted = ((String, String, String), u64);

/// A local replay decision.
enum Local {
    /// Answered from the record.
    Replay(Counted, StepDecision),
    /// Ask the kernel (counting the occurrence when local replay is on).
    Ask(Option<Counted>),
}
