//! Running an effect durably ([`ExecutionContext::invoke`]) and recording a step's outcome:
//! its result or error, with the resource checkpoints taken after it.

use super::{
    ERROR_RETRYABLE_KEY, EffectOutcome, ExecutionContext, Submitted, error_data, error_message,
    error_retryable, into_error, recorded_error,
};
use crate::error::{Error, Result};
use crate::protocol::{Checkpoints, Decision, Idempotency, StepKind};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use std::fmt;

impl ExecutionContext {
    /// Records a step's result. Answers the outcome that is on record: `result` itself, or the
    /// result an earlier completion of the same step stored.
    pub async fn complete(&self, step_id: &str, result: Value) -> Result<Value> {
        self.complete_with(step_id, result, Checkpoints::default())
            .await
    }

    /// [`ExecutionContext::complete`] with the resource checkpoints taken after the step.
    pub async fn complete_with(
        &self,
        step_id: &str,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<Value> {
        self.flush().await?;
        self.send_completion(step_id, result, checkpoints).await
    }

    /// Sends a step's result now (the request of [`ExecutionContext::complete_with`]).
    pub(super) async fn send_completion(
        &self,
        step_id: &str,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<Value> {
        let dec = self
            .inner
            .transport
            .complete_step(
                &self.inner.execution_id,
                step_id,
                &self.inner.lease,
                result.clone(),
                checkpoints,
            )
            .await
            .map_err(|e| self.check(e))?;
        self.running().remove(step_id);
        match dec.decision {
            Decision::Recorded => Ok(result),
            Decision::Replay => Ok(dec.result.unwrap_or(Value::Null)),
            Decision::ExecutionTerminal => Err(self.suspend(Error::Terminated)),
            other => Err(Error::Other(format!(
                "unexpected answer to a step completion: {other}"
            ))),
        }
    }

    /// Records a step's error.
    pub async fn fail(&self, step_id: &str, error: Value) -> Result<()> {
        self.fail_with(step_id, error, Checkpoints::default()).await
    }

    /// [`ExecutionContext::fail`] with the resource checkpoints taken after the step.
    pub async fn fail_with(
        &self,
        step_id: &str,
        error: Value,
        checkpoints: Checkpoints,
    ) -> Result<()> {
        self.flush().await?;
        let dec = self
            .inner
            .transport
            .fail_step(
                &self.inner.execution_id,
                step_id,
                &self.inner.lease,
                error,
                checkpoints,
            )
            .await
            .map_err(|e| self.check(e))?;
        if let Some((kind, target)) = self.running().remove(step_id) {
            self.report(&kind, &target, &dec, EffectOutcome::Failed);
        }
        match dec.decision {
            Decision::Recorded | Decision::Replay => Ok(()),
            Decision::ExecutionTerminal => Err(self.suspend(Error::Terminated)),
            other => Err(Error::Other(format!(
                "unexpected answer to a step failure: {other}"
            ))),
        }
    }

    /// Publishes a live output delta of a running step (best effort: errors are dropped).
    pub async fn publish_delta(&self, step_id: &str, seq: i64, data: String) {
        let _ = self
            .inner
            .transport
            .stream_delta(&self.inner.execution_id, step_id, seq, data)
            .await;
    }

    /// Runs one effect durably: submits it, runs `body` only on `proceed` (recording its
    /// result or error), returns the recorded outcome on `replay`, and raises every refusal.
    ///
    /// The value returned after running the body is the recorded JSON read back, so a first
    /// run and its replays see exactly the same value.
    pub async fn invoke<T, E, Fut>(
        &self,
        kind: StepKind,
        target: &str,
        idempotency: Idempotency,
        args: Box<RawValue>,
        body: Fut,
    ) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display + 'static,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        self.invoke_changing(kind, target, idempotency, args, &[], body)
            .await
    }

    /// [`ExecutionContext::invoke`] of an effect whose body may change the declared
    /// `resources` (declared first with [`ExecutionContext::resource`]). The step is submitted
    /// naming them, and each one the decision says is due is captured by its driver after the
    /// body and recorded with the step's outcome. While any key is named, effects naming
    /// resources run one at a time (so a capture sees no other step's half-done change): such
    /// a body must not itself make an effect that names resources.
    pub async fn invoke_changing<T, E, Fut>(
        &self,
        kind: StepKind,
        target: &str,
        idempotency: Idempotency,
        args: Box<RawValue>,
        resources: &[String],
        body: Fut,
    ) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display + 'static,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let _exclusive = match resources.is_empty() {
            true => None,
            false => Some(self.inner.resources.exclusive().await),
        };
        let (submitted, due) = self
            .submit_changing(kind, target, args, idempotency, resources.to_vec())
            .await?;
        match submitted {
            Submitted::Replay { step_id, outcome } => match outcome {
                Ok(v) => decode(target, &step_id, v),
                Err(err) => Err(Error::Tool {
                    tool_id: target.to_owned(),
                    step_id,
                    message: error_message(&err),
                    retryable: error_retryable(&err),
                    data: error_data(&err),
                }),
            },
            Submitted::Proceed { step_id } => {
                match super::in_step(step_id.clone(), body).await {
                    Ok(v) => {
                        let json = match serde_json::to_value(&v) {
                            Ok(json) => json,
                            Err(e) => {
                                let message = format!("result is not JSON: {e}");
                                let cps = self.capture(&due).await;
                                self.fail_with(&step_id, recorded_error(&message, None), cps)
                                    .await?;
                                return Err(Error::tool(target, step_id, message));
                            }
                        };
                        let cps = self.capture(&due).await;
                        if idempotency == Idempotency::SafeToRetry
                            && cps.is_empty()
                            && self.inner.transport.batches_completions()
                        {
                            // Sent with the next submission (see `flush`): the value decoded is
                            // the JSON that will be recorded, as a replay decodes it.
                            self.defer_completion(&step_id, json.clone()).await?;
                            return decode(target, &step_id, json);
                        }
                        let recorded = self.complete_with(&step_id, json, cps).await?;
                        decode(target, &step_id, recorded)
                    }
                    Err(e) => {
                        let err = into_error(e);
                        if matches!(
                            err,
                            Error::Blocked { .. }
                                | Error::Terminated
                                | Error::LeaseSuperseded
                                | Error::Policy { .. }
                                | Error::RateLimited { .. }
                        ) {
                            // A refusal of a nested effect: the body did not finish, so the step
                            // stays open and a later dispatch decides it again.
                            return Err(err);
                        }
                        let (message, data, retryable) = match err {
                            Error::Tool {
                                message,
                                data,
                                retryable,
                                ..
                            } => (message, data, retryable),
                            other => (other.to_string(), None, false),
                        };
                        let mut recorded = recorded_error(&message, data.as_ref());
                        if retryable && let Value::Object(map) = &mut recorded {
                            // Recorded too, so a replay answers the same error.
                            map.insert(ERROR_RETRYABLE_KEY.to_owned(), Value::Bool(true));
                        }
                        let cps = self.capture(&due).await;
                        self.fail_with(&step_id, recorded, cps).await?;
                        Err(Error::Tool {
                            tool_id: target.to_owned(),
                            step_id,
                            message,
                            retryable,
                            data,
                        })
                    }
                }
            }
        }
    }
}

fn decode<T: DeserializeOwned>(target: &str, step_id: &str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| {
        Error::Serialization(format!(
            "the recorded result of {target} (step {step_id}) does not fit its type: {e}"
        ))
    })
}
