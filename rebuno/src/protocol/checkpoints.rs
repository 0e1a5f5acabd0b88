//! External resources on the wire (SDK 0.23 and later): the bodies of the three
//! `/v0/executions/{id}/resources…` routes, the declare answer ([`ResourceView`]), the
//! per-resource entry of a step decision ([`StepResource`]), the checkpoints a step completion or
//! a publish carries ([`Checkpoints`]), and the bounds the kernel puts on everything an agent
//! sends about them.
//!
//! A *resource* is external state an execution works on (a sandbox, a scratch directory) that
//! the agent's driver can capture into a *checkpoint ref* and re-create from one. The kernel
//! never sees the state itself: it keeps, per execution and key, the driver and configuration,
//! the checkpoint policy, a *generation* and the current *binding*, and the refs the agent
//! reports. See `kernel::resources` for the rules.

use super::{Capture, CaptureFailure, requests::bounded_list};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A resource key, driver id or checkpoint ref may not be longer than this many bytes.
pub const MAX_RESOURCE_KEY_BYTES: usize = 255;
/// At most this many resources may be declared per execution; one more is `400`.
pub const MAX_RESOURCES_PER_EXECUTION: usize = 32;
/// A resource's `configuration` and `binding` may take at most this many bytes as JSON.
pub const MAX_RESOURCE_JSON_BYTES: usize = 64 * 1024;
/// A checkpoint ref may take at most this many bytes.
pub const MAX_CHECKPOINT_REF_BYTES: usize = 4096;
/// A capture failure's error is kept up to this many bytes (cut at a character boundary): it is
/// an exception's text the agent cannot shorten, so it is truncated rather than refused.
pub const MAX_CAPTURE_ERROR_BYTES: usize = 4096;
/// The largest `every_steps` a declare may ask for.
pub const MAX_EVERY_STEPS: u64 = 1_000_000;

/// Checks a resource key: 1 to [`MAX_RESOURCE_KEY_BYTES`] bytes, no `/` (it is a path segment
/// of the binding route) and no control characters.
pub fn check_resource_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("resource key must not be empty".into());
    }
    if key.len() > MAX_RESOURCE_KEY_BYTES {
        return Err(format!(
            "resource key is {} bytes, at most {MAX_RESOURCE_KEY_BYTES}",
            key.len()
        ));
    }
    if key.contains('/') || key.chars().any(char::is_control) {
        return Err(format!(
            "resource key {key:?} may not contain '/' or control characters"
        ));
    }
    Ok(())
}

/// The bytes `value` takes as compact JSON.
fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

/// Body of `POST /v0/executions/{id}/resources` (lease): declares a resource, or declares it
/// again (every dispatch does, and the SDK again on completion).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclareResourceRequest {
    /// The resource's key within the execution ([`check_resource_key`]).
    pub key: String,
    /// The driver that manages it (1 to 255 bytes); fixed once declared.
    #[serde(default, deserialize_with = "super::null_as_default")]
    pub driver_id: String,
    /// The driver's configuration (any JSON, at most [`MAX_RESOURCE_JSON_BYTES`]); fixed once
    /// declared.
    #[serde(default)]
    pub configuration: Value,
    /// Whether a checkpoint taken by an earlier generation still covers a re-created one (the
    /// driver restores exactly), so no fresh baseline is due after a restore.
    #[serde(default, deserialize_with = "super::null_as_default")]
    pub coverage_reuse: bool,
    /// A checkpoint is due after this many affecting steps; 0 takes none (SDK 0.24 and later
    /// send 0 without a policy). At most [`MAX_EVERY_STEPS`].
    #[serde(default, deserialize_with = "super::null_as_default")]
    pub every_steps: u64,
    /// Whether the agent checkpoints when the execution completes (if not covered).
    #[serde(default, deserialize_with = "super::null_as_default")]
    pub on_completion: bool,
}

impl DeclareResourceRequest {
    /// Checks every bound; the message is the `400` detail.
    pub fn check(&self) -> Result<(), String> {
        check_resource_key(&self.key)?;
        if self.driver_id.is_empty() || self.driver_id.len() > MAX_RESOURCE_KEY_BYTES {
            return Err(format!(
                "driver_id must be 1 to {MAX_RESOURCE_KEY_BYTES} bytes"
            ));
        }
        if json_len(&self.configuration) > MAX_RESOURCE_JSON_BYTES {
            return Err(format!(
                "configuration is larger than {MAX_RESOURCE_JSON_BYTES} bytes"
            ));
        }
        if self.every_steps > MAX_EVERY_STEPS {
            return Err(format!("every_steps is at most {MAX_EVERY_STEPS}"));
        }
        Ok(())
    }
}

/// Answer of `POST …/resources`:
/// `{key, generation, binding, checkpoint_ref, covered, every_steps, on_completion}`.
///
/// `binding` is `null` when the agent must create the resource (from `checkpoint_ref` when it
/// is not empty) and bind it; otherwise the agent opens the live binding. Every field is always
/// present (the SDK's model has no nulls but `binding`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceView {
    /// The resource's key.
    pub key: String,
    /// The generation the live (or about to be created) instance has.
    pub generation: u64,
    /// The live binding, or `null`.
    #[serde(default)]
    pub binding: Value,
    /// The latest checkpoint to restore from (`""`: none yet).
    #[serde(default)]
    pub checkpoint_ref: String,
    /// Whether the latest checkpoint covers the instance's current state (no capture due).
    #[serde(default)]
    pub covered: bool,
    /// The policy's step interval (0: no periodic checkpoints).
    #[serde(default)]
    pub every_steps: u64,
    /// Whether to checkpoint on completion.
    #[serde(default)]
    pub on_completion: bool,
}

/// Body of `POST …/resources/{key}/binding` (lease; 204): the binding of the instance the
/// agent created (any JSON, at most [`MAX_RESOURCE_JSON_BYTES`]; `null` records that the
/// instance cannot be reopened).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindResourceRequest {
    /// How to reopen the live instance.
    #[serde(default)]
    pub binding: Value,
}

impl BindResourceRequest {
    /// Checks the binding's size; the message is the `400` detail.
    pub fn check(&self) -> Result<(), String> {
        if json_len(&self.binding) > MAX_RESOURCE_JSON_BYTES {
            return Err(format!(
                "binding is larger than {MAX_RESOURCE_JSON_BYTES} bytes"
            ));
        }
        Ok(())
    }
}

/// Checkpoint records: the body of `POST …/resources/checkpoints` (lease; 204), and the
/// `captures`/`capture_failures` a step complete or fail carries.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoints {
    /// Checkpoints taken (at most [`super::MAX_SDK_LIST`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub captures: Vec<Capture>,
    /// Checkpoints that failed (at most [`super::MAX_SDK_LIST`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub capture_failures: Vec<CaptureFailure>,
}

impl Checkpoints {
    /// Whether there is nothing to record.
    pub fn is_empty(&self) -> bool {
        self.captures.is_empty() && self.capture_failures.is_empty()
    }

    /// Checks keys and refs (a failure's error is truncated, not refused); the message is the
    /// `400` detail.
    pub fn check(&self) -> Result<(), String> {
        for c in &self.captures {
            check_resource_key(&c.key)?;
            if c.checkpoint_ref.is_empty() || c.checkpoint_ref.len() > MAX_CHECKPOINT_REF_BYTES {
                return Err(format!(
                    "checkpoint_ref of {:?} must be 1 to {MAX_CHECKPOINT_REF_BYTES} bytes",
                    c.key
                ));
            }
        }
        for f in &self.capture_failures {
            check_resource_key(&f.key)?;
        }
        Ok(())
    }
}

/// `error` cut to at most [`MAX_CAPTURE_ERROR_BYTES`] at a character boundary.
pub fn truncate_capture_error(error: &str) -> &str {
    if error.len() <= MAX_CAPTURE_ERROR_BYTES {
        return error;
    }
    let mut end = MAX_CAPTURE_ERROR_BYTES;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

/// One entry of a decision's `resources`: `{key, generation, due}` for a declared resource the
/// step names. `due` asks the agent to checkpoint it after the step, tagged with `generation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepResource {
    /// The resource's key.
    pub key: String,
    /// Its current generation.
    pub generation: u64,
    /// Whether a checkpoint is due after this step.
    pub due: bool,
}

/// Payload of the `resource.*` events: `{key, generation}` plus what the event adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceEventPayload {
    /// The resource's key.
    pub key: String,
    /// The generation concerned.
    pub generation: u64,
    /// `resource.declared`: the driver.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub driver_id: String,
    /// `resource.declared`: the checkpoint the new generation restores from;
    /// `resource.checkpointed`: the new checkpoint.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checkpoint_ref: String,
    /// `resource.checkpoint_failed`: what went wrong.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The step whose completion carried the record, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub step_id: String,
}
