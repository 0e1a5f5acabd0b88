//! A dispatch's resources: the ones it declared (by key, with their drivers and bindings), the
//! declare itself ([`ExecutionContext::resource`], [`resource`]: on first use, re-creating the
//! instance from the latest checkpoint when the kernel says the previous one is gone), the
//! captures that go with a step's outcome when a checkpoint is due, and the capture on
//! completion. The drivers and the checkpoint policy are in [`crate::agent::resources`].

use super::{ExecutionContext, execution};
use crate::agent::resources::{CheckpointPolicy, ResourceDriver};
use crate::error::{Error, Result};
use crate::protocol::{Capture, CaptureFailure, Checkpoints, DeclareResourceRequest, StepResource};
use serde_json::Value;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

/// One resource declared in this dispatch.
struct Declared {
    driver: Arc<dyn ResourceDriver>,
    request: DeclareResourceRequest,
    binding: Value,
}

/// The resources a dispatch declared, by key, and the lock that runs effects naming resources
/// one at a time (and declares alone).
#[derive(Default)]
pub(crate) struct Managed {
    declared: Mutex<HashMap<String, Declared>>,
    exclusive: tokio::sync::Mutex<()>,
}

impl Managed {
    /// Holds off every other effect naming a resource, and every declare, until dropped.
    pub(crate) async fn exclusive(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.exclusive.lock().await
    }

    fn declared(&self) -> std::sync::MutexGuard<'_, HashMap<String, Declared>> {
        self.declared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs a driver call off the async threads (drivers do blocking I/O).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(format!("driver panicked: {e}"))))
}

/// Declares resource `key` of the current execution with `driver` and `policy` and answers the
/// binding of its live instance (see [`ExecutionContext::resource`]).
pub async fn resource(
    key: &str,
    driver: Arc<dyn ResourceDriver>,
    policy: CheckpointPolicy,
) -> Result<Value> {
    execution()?.resource(key, driver, policy).await
}

impl ExecutionContext {
    /// Declares resource `key` with `driver` and `policy` (on its first use in this dispatch;
    /// later calls answer the same binding) and answers the binding of its live instance: the
    /// one the kernel hands back, or a new one the driver creates (from the latest checkpoint
    /// when there is one) when the kernel says there is none to reopen, as after a crash. An
    /// instance the latest checkpoint does not cover gets a baseline capture when the policy
    /// checkpoints. A key is one resource for the life of the execution: another driver or
    /// configuration is the kernel's `409 conflict`.
    pub async fn resource(
        &self,
        key: &str,
        driver: Arc<dyn ResourceDriver>,
        policy: CheckpointPolicy,
    ) -> Result<Value> {
        // A body of an effect naming resources (which holds the lock) may ask again.
        if let Some(d) = self.managed().declared().get(key) {
            return Ok(d.binding.clone());
        }
        let _exclusive = self.managed().exclusive().await;
        if let Some(d) = self.managed().declared().get(key) {
            return Ok(d.binding.clone());
        }
        let request = DeclareResourceRequest {
            key: key.to_owned(),
            driver_id: driver.driver_id().to_owned(),
            configuration: driver.configuration(),
            coverage_reuse: driver.coverage_reuse(),
            every_steps: policy.every_steps,
            on_completion: policy.on_completion,
        };
        self.flush().await?;
        let (exec, lease) = (self.execution_id(), self.lease());
        let view = self
            .transport()
            .declare_resource(exec, lease, &request)
            .await
            .map_err(|e| self.check(e))?;
        let binding = if view.binding.is_null() {
            let from = Some(view.checkpoint_ref.clone()).filter(|r| !r.is_empty());
            let creator = Arc::clone(&driver);
            let binding = blocking(move || creator.create(from.as_deref()))
                .await
                .map_err(|e| Error::Other(format!("resource {key:?}: create: {e}")))?;
            self.transport()
                .bind_resource(exec, key, lease, binding.clone())
                .await
                .map_err(|e| self.check(e))?;
            binding
        } else {
            view.binding
        };
        self.managed().declared().insert(
            key.to_owned(),
            Declared {
                driver,
                request,
                binding: binding.clone(),
            },
        );
        if view.every_steps > 0 && !view.covered {
            self.publish(&[view_entry(key, view.generation)]).await?;
        }
        Ok(binding)
    }

    /// Captures each `due` resource with its driver; a capture that fails (or of a key this
    /// dispatch did not declare) is reported as a failure, and the next step is due again.
    pub(crate) async fn capture(&self, due: &[StepResource]) -> Checkpoints {
        let mut cps = Checkpoints::default();
        for r in due.iter().filter(|r| r.due) {
            let found = self
                .managed()
                .declared()
                .get(&r.key)
                .map(|d| (Arc::clone(&d.driver), d.binding.clone()));
            let captured = match found {
                Some((driver, binding)) => blocking(move || driver.capture(&binding))
                    .await
                    .map_err(|e| e.to_string()),
                None => Err("resource() was not called in this dispatch".to_owned()),
            };
            match captured {
                Ok(checkpoint_ref) => cps.captures.push(Capture {
                    key: r.key.clone(),
                    generation: r.generation,
                    checkpoint_ref,
                }),
                Err(error) => cps.capture_failures.push(CaptureFailure {
                    key: r.key.clone(),
                    generation: r.generation,
                    error,
                }),
            }
        }
        cps
    }

    /// Captures `due` and records the checkpoints outside a step.
    async fn publish(&self, due: &[StepResource]) -> Result<()> {
        let cps = self.capture(due).await;
        self.flush().await?;
        self.transport()
            .publish_checkpoints(self.execution_id(), self.lease(), cps)
            .await
            .map_err(|e| self.check(e))
    }

    /// Whether the handler declared any resource (whose checkpoints the execution's end may
    /// need, after every step's result is recorded).
    pub(crate) fn declares_resources(&self) -> bool {
        !self.managed().declared().is_empty()
    }

    /// Before the execution completes: captures each declared resource whose policy says
    /// `on_completion` and whose latest checkpoint does not cover its final state.
    pub(crate) async fn checkpoint_on_completion(&self) -> Result<()> {
        self.flush().await?;
        let _exclusive = self.managed().exclusive().await;
        let requests: Vec<DeclareResourceRequest> = self
            .managed()
            .declared()
            .values()
            .map(|d| d.request.clone())
            .collect();
        let mut due = Vec::new();
        for request in &requests {
            let view = self
                .transport()
                .declare_resource(self.execution_id(), self.lease(), request)
                .await
                .map_err(|e| self.check(e))?;
            if view.on_completion && !view.covered {
                due.push(view_entry(&view.key, view.generation));
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        self.publish(&due).await
    }
}

/// A due entry for `key` at `generation`.
fn view_entry(key: &str, generation: u64) -> StepResource {
    StepResource {
        key: key.to_owned(),
        generation,
        due: true,
    }
}
