//! [`EmbeddedTransport`] (feature `kernel`): the agent's calls made directly on a [`Kernel`] in
//! this process, with the same kernel logic (and so the same answers and errors) as over HTTP.

use super::{Call, Reply, Transport};
use crate::error::Result;
use crate::kernel::Kernel;
use crate::protocol::{BindResourceRequest, CompleteExecutionRequest};
use async_trait::async_trait;

/// Calls an in-process [`Kernel`] directly.
#[derive(Debug, Clone)]
pub struct EmbeddedTransport {
    kernel: Kernel,
    batch: bool,
    hold: std::time::Duration,
}

impl EmbeddedTransport {
    /// A transport over `kernel`.
    pub fn new(kernel: Kernel) -> Self {
        EmbeddedTransport {
            kernel,
            batch: false,
            hold: super::HOLD_RESULT_FOR,
        }
    }

    /// The same transport sending each `safe_to_retry` step's result with the next
    /// submission (`true`: one kernel call per step instead of two) or on its own (`false`,
    /// the default: a step's result is recorded before the step returns; see
    /// [`ExecutionContext::flush`](crate::agent::ExecutionContext::flush)).
    pub fn with_batched_completions(mut self, enabled: bool) -> Self {
        self.batch = enabled;
        self
    }

    /// The same transport letting a batched result wait up to `hold` for the next submission
    /// (see [`AgentBuilder::hold_results_for`](crate::AgentBuilder::hold_results_for)).
    pub fn with_completion_hold(mut self, hold: std::time::Duration) -> Self {
        self.hold = hold;
        self
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }
}

#[async_trait]
impl Transport for EmbeddedTransport {
    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        let kernel = &self.kernel;
        Ok(match call {
            Call::Execution { execution_id } => {
                Reply::Execution(kernel.execution_in_process(execution_id).await?)
            }
            Call::SubmitStep {
                execution_id,
                lease,
                submission,
            } => Reply::Decision(
                kernel
                    .submit_step(execution_id, lease, submission.into())
                    .await?,
            ),
            Call::CompleteStep {
                execution_id,
                step_id,
                lease,
                result,
                checkpoints,
            } => Reply::Decision(
                kernel
                    .complete_step_with(execution_id, step_id, lease, Some(result), checkpoints)
                    .await?,
            ),
            Call::FailStep {
                execution_id,
                step_id,
                lease,
                error,
                checkpoints,
            } => Reply::Decision(
                kernel
                    .fail_step_with(execution_id, step_id, lease, Some(error), checkpoints)
                    .await?,
            ),
            Call::DeclareResource {
                execution_id,
                lease,
                request,
            } => Reply::Resource(
                kernel
                    .declare_resource(execution_id, lease, request.clone())
                    .await?,
            ),
            Call::BindResource {
                execution_id,
                key,
                lease,
                binding,
            } => {
                let req = BindResourceRequest { binding };
                kernel.bind_resource(execution_id, key, lease, req).await?;
                Reply::Done
            }
            Call::PublishCheckpoints {
                execution_id,
                lease,
                checkpoints,
            } => {
                kernel
                    .publish_checkpoints(execution_id, lease, checkpoints)
                    .await?;
                Reply::Done
            }
            Call::Heartbeat {
                execution_id,
                lease,
            } => {
                kernel.heartbeat(execution_id, lease).await?;
                Reply::Done
            }
            Call::CompleteExecution {
                execution_id,
                lease,
                output,
                state,
                completes,
            } => {
                let req = CompleteExecutionRequest {
                    output: Some(output),
                    state,
                    completes,
                };
                kernel
                    .complete_execution_with(execution_id, lease, req)
                    .await?;
                Reply::Done
            }
            Call::PreviousState { execution_id } => {
                Reply::State(kernel.previous_state(execution_id).await?)
            }
            Call::FailExecution {
                execution_id,
                lease,
                error,
            } => {
                kernel.fail_execution(execution_id, lease, error).await?;
                Reply::Done
            }
            Call::StreamDelta {
                execution_id,
                step_id,
                seq,
                data,
            } => {
                let frame = crate::protocol::StreamFrame {
                    step_id: step_id.to_owned(),
                    seq,
                    data,
                };
                kernel.publish(execution_id, frame)?;
                Reply::Done
            }
            Call::Steps { execution_id } => {
                Reply::Steps(kernel.steps_in_process(execution_id).await?)
            }
            Call::Step {
                execution_id,
                step_id,
            } => Reply::Step(kernel.step(execution_id, step_id).await?),
            // As the parent's agent under `lease`, as over HTTP: the kernel checks the lease.
            Call::CreateChild { request, lease } => {
                let parent = request
                    .spawned_by
                    .as_ref()
                    .map_or("", |s| s.execution_id.as_str());
                let agent_id = kernel.execution_owner(parent).await?;
                let started = kernel
                    .start_child_as_agent(request.clone(), &agent_id, lease)
                    .await?;
                Reply::Execution(started.execution)
            }
            Call::Suspend {
                execution_id,
                lease,
            } => Reply::Suspended(kernel.suspend(execution_id, lease).await?),
            Call::SetMetadata { agent_id, metadata } => {
                kernel
                    .set_agent_metadata(agent_id, metadata.clone())
                    .await?;
                Reply::Done
            }
        })
    }

    fn batches_completions(&self) -> bool {
        self.batch
    }

    fn completion_hold(&self) -> std::time::Duration {
        self.hold
    }
}
