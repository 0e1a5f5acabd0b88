//! Request bodies: those of the `/v0` routes, and the webhook body the kernel posts to an
//! agent. Route bodies refuse unknown fields (`400 validation_error`); like Go's decoder they
//! read missing fields and JSON `null` as the zero value.

use super::lease::{optional_lease, write_lease};
use super::{Idempotency, StepKind, null_as_default, present};
use crate::identity::{self, IdentityError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// Body of `POST /v0/executions`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateExecutionRequest {
    /// The agent to run; it must exist (else `404`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub agent_id: String,
    /// The input; `None` when the field is absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub input: Option<Value>,
    /// Optional agent version.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub agent_version: String,
    /// A repeated create with the same key (by the same creator) answers the execution the
    /// first one created (`200` instead of `201`), and creates nothing; the same key with
    /// another agent or input is `409 conflict`. At most [`MAX_IDEMPOTENCY_KEY_BYTES`].
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub idempotency_key: String,
    /// The session the execution is a turn of (SDK 0.22 and later): at most one turn of an
    /// agent's session runs at a time; a create while one does is `pending` until it ends.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub session: String,
    /// The earlier turn this one continues from instead of the session's latest (SDK 0.22 and
    /// later): an execution of the same agent; the turn joins its session.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub parent_execution_id: String,
    /// A key serializing executions (SDK 0.19 to 0.21; accepted, not acted on).
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub concurrency_key: String,
    /// The step of a parent execution that spawned this one as a subagent (SDK 0.25 and
    /// later; accepted, not yet acted on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnedBy>,
    /// The user the execution acts for (SDK 0.29): recorded on the execution as asserted, at
    /// most [`MAX_IDENTITY_BYTES`](crate::protocol::MAX_IDENTITY_BYTES) bytes.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub on_behalf_of: String,
}

impl CreateExecutionRequest {
    /// The create of a subagent: a child of agent `agent_id` with `input`, spawned by the
    /// parent's step `spawned_by`.
    pub fn child(agent_id: &str, input: Value, spawned_by: &SpawnedBy) -> Self {
        CreateExecutionRequest {
            agent_id: agent_id.to_owned(),
            input: Some(input),
            spawned_by: Some(spawned_by.clone()),
            ..CreateExecutionRequest::default()
        }
    }
}

/// The longest idempotency key a create accepts, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// The longest `session` a create or a fork accepts, in bytes.
pub const MAX_SESSION_BYTES: usize = 255;

/// Body of `POST /v0/executions/{id}/fork` (SDK 0.22 and later): a new execution of the same
/// agent and input that replays the original's recorded effects up to event `at_seq` and runs
/// the rest afresh (see [`Kernel::fork`](crate::Kernel::fork)).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkExecutionRequest {
    /// The original's event sequence number whose effects (and those before it) replay;
    /// `0 ..= the last event's`, else `400`.
    pub at_seq: i64,
    /// The fork's session; empty means the original's. At most [`MAX_SESSION_BYTES`].
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub session: String,
    /// Policy bundle YAML of the fork's own: it narrows the agent's bundle for the fork's new
    /// steps (both must allow); empty means the original's own (usually none). Giving one
    /// needs `policies:write` (or the admin), else `403`. Validated like
    /// `POST /v0/policies/{agent_id}`.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub policy_bundle: String,
}

/// The parent step of a subagent execution.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnedBy {
    /// The parent execution.
    pub execution_id: String,
    /// The parent's step that spawned the child.
    pub step_id: String,
}

/// Body of `POST /v0/executions/{id}/steps`. `args` stays raw so it hashes as the caller wrote it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitStepRequest {
    /// Step kind, as submitted.
    #[serde(default)]
    pub kind: StepKind,
    /// Step target, as submitted.
    #[serde(default, deserialize_with = "null_as_default")]
    pub target: String,
    /// Raw args; absent and `null` both hash as `null`. The kernel records them as a JSON value
    /// whose numbers are 64-bit, and refuses what that would change (`400 validation_error`
    /// naming the argument, see [`identity::step_args`]): an integer literal beyond 64 bits
    /// is refused, not recorded as a float (send it as a string), as is a number literal over
    /// [`identity::MAX_NUMBER_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Box<RawValue>>,
    /// Declared idempotency; absent means `safe_to_retry`.
    #[serde(default)]
    pub idempotency: Idempotency,
    /// Extension (this kernel only; the published SDKs never send it): the occurrence the
    /// agent counted for this effect. An agent that replayed earlier occurrences from its own
    /// copy of the record (without asking the kernel) sends it so the kernel's counter catches
    /// up: the kernel uses the larger of this and its own count. It can only skip ahead, never
    /// reuse an occurrence, and changes nothing that is recorded. It may skip only over
    /// recorded occurrences (what a local replay saw): an occurrence ahead of the kernel's
    /// count whose predecessor is not recorded is `400 validation_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<u64>,
    /// The resources (by key) the step touches, as SDK 0.23 and later always send (usually
    /// `[]`). At most [`MAX_SDK_LIST`], each a valid key
    /// ([`check_resource_key`](super::check_resource_key)); the decision answers
    /// `{key, generation, due}` for those declared (see `kernel::resources`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub resources: Vec<String>,
    /// Extension (this kernel only; the published SDKs never send it): the result of an
    /// earlier `safe_to_retry` step of the same execution and lease, recorded first, in the
    /// same store transaction as this submission where the submission records a new step (see
    /// `kernel::outcomes`). The Rust SDK sends a safe step's result this way instead of in a
    /// request of its own; until it is sent (or if it is lost with the agent) the step only
    /// runs again, which `safe_to_retry` allows. At most one; a completion that names no
    /// step of this execution, an `at_most_once` step, a step with another outcome or the
    /// step being submitted is `400 validation_error` and nothing of the request is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completes: Option<StepCompletion>,
}

/// Longest step id a [`StepCompletion`] may name (the kernel's ids are 64 hex digits).
pub const MAX_STEP_ID_BYTES: usize = 256;

/// A step's result sent with the next submission ([`SubmitStepRequest::completes`]) or with
/// the execution's end ([`CompleteExecutionRequest::completes`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCompletion {
    /// The completed step (of the submission's execution; at most [`MAX_STEP_ID_BYTES`]).
    pub step_id: String,
    /// Its result (any JSON; absent is `null`).
    #[serde(default)]
    pub result: Value,
}

impl SubmitStepRequest {
    /// The raw args bytes, empty when the field was absent.
    pub fn args_bytes(&self) -> &[u8] {
        self.args.as_deref().map_or(&[], |raw| raw.get().as_bytes())
    }

    /// The args hash ([`identity::args_hash`]); an error becomes `400 invalid args`.
    pub fn args_hash(&self) -> Result<String, IdentityError> {
        identity::args_hash(self.args_bytes())
    }

    /// The args parsed once: their hash and the value policy evaluates and the kernel records
    /// (`null` when absent). Args the kernel cannot record faithfully are an error (see
    /// [`identity::step_args`]); the kernel answers it `400 validation_error`.
    pub fn parse_args(&self) -> Result<identity::StepArgs, identity::ArgsError> {
        identity::step_args(self.args_bytes())
    }
}

/// Body of `POST …/steps/{step_id}/complete`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteStepRequest {
    /// The step's result (any JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// Resource checkpoints taken after the step (SDK 0.23 and later, only when a resource
    /// was due; at most [`MAX_SDK_LIST`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub captures: Vec<Capture>,
    /// Resource checkpoints that failed (SDK 0.23 and later; at most [`MAX_SDK_LIST`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub capture_failures: Vec<CaptureFailure>,
}

/// Body of `POST …/steps/{step_id}/fail`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailStepRequest {
    /// The step's error (any JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<Value>,
    /// Resource checkpoints taken after the step (SDK 0.23 and later, only when a resource
    /// was due; at most [`MAX_SDK_LIST`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub captures: Vec<Capture>,
    /// Resource checkpoints that failed (SDK 0.23 and later; at most [`MAX_SDK_LIST`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded_list"
    )]
    pub capture_failures: Vec<CaptureFailure>,
}

/// At most this many entries in a list an SDK sends beside a step (`resources`, `captures`,
/// `capture_failures`); more is `400 validation_error`.
pub const MAX_SDK_LIST: usize = 256;

/// A list of at most [`MAX_SDK_LIST`] entries; `null` reads as empty.
pub(super) fn bounded_list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let list = Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default();
    if list.len() > MAX_SDK_LIST {
        return Err(serde::de::Error::custom(format!(
            "at most {MAX_SDK_LIST} entries, got {}",
            list.len()
        )));
    }
    Ok(list)
}

/// A resource checkpoint an agent took after a step (SDK 0.23 and later).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// The resource's key.
    pub key: String,
    /// The resource generation the checkpoint belongs to.
    #[serde(default)]
    pub generation: u64,
    /// Where the driver put the checkpoint.
    #[serde(default, deserialize_with = "null_as_default")]
    pub checkpoint_ref: String,
}

/// A resource checkpoint that failed (SDK 0.23 and later).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureFailure {
    /// The resource's key.
    pub key: String,
    /// The resource generation the checkpoint was for.
    #[serde(default)]
    pub generation: u64,
    /// What went wrong.
    #[serde(default, deserialize_with = "null_as_default")]
    pub error: String,
}

/// Body of `POST …/steps/{step_id}/stream`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamDeltaRequest {
    /// Producer sequence number.
    #[serde(default, deserialize_with = "null_as_default")]
    pub seq: i64,
    /// Output chunk; at most [`MAX_STREAM_DATA_BYTES`](super::MAX_STREAM_DATA_BYTES) bytes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: String,
}

/// Body of `POST /v0/executions/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteExecutionRequest {
    /// The execution's output (any JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
    /// State handed to the session's next turn, which reads it with `GET …/previous` (SDK 0.22
    /// and later). A JSON `null` is kept as no state.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub state: Option<Value>,
    /// A batched result (the same field as [`SubmitStepRequest::completes`]): the result of an
    /// earlier `safe_to_retry` step of the same execution and lease, recorded first in the
    /// transaction that ends the execution, so a workflow's last result needs no request and
    /// no sync of its own. Checked as a submission's is: a refused one is `400
    /// validation_error` and the execution does not end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completes: Option<StepCompletion>,
}

/// Body of `POST /v0/executions/{id}/fail`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailExecutionRequest {
    /// Error text; becomes the `reason` of `execution.failed`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub error: String,
}

/// Body of `POST /v0/agents`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterAgentRequest {
    /// Agent id.
    #[serde(default, deserialize_with = "null_as_default")]
    pub id: String,
    /// Webhook URL.
    #[serde(default, deserialize_with = "null_as_default")]
    pub webhook_url: String,
    /// HMAC secret.
    #[serde(default, deserialize_with = "null_as_default")]
    pub secret: String,
    /// The agent's own lease length in seconds (a number > 0, at most
    /// [`MAX_LEASE_TIMEOUT_SECONDS`](super::MAX_LEASE_TIMEOUT_SECONDS); fractions allowed),
    /// used for its deliveries instead of the kernel's global lease; `None` (absent or `null`)
    /// means the global one. Anything else is `400 validation_error`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "write_lease",
        deserialize_with = "optional_lease"
    )]
    pub lease_timeout_seconds: Option<f64>,
    /// The agent's own dispatch retry policy; absent (or `null`) means the kernel's. No
    /// published SDK sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_retry: Option<super::DispatchRetry>,
    /// Replace the registration of an agent already registered with another webhook URL or
    /// secret. Without it such a registration is `409 conflict` (unless the caller is the
    /// admin), so that no client with `agents:write` redirects an agent's deliveries by
    /// accident or unnoticed; registering again with the same webhook URL and secret needs no
    /// flag (it may change the lease). Omitted when false.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub takeover: bool,
}

/// Body of `POST /v0/policies/{agent_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPolicyRequest {
    /// Policy bundle YAML; empty clears the policy.
    #[serde(default, deserialize_with = "null_as_default")]
    pub bundle: String,
}

/// Body of `POST /v0/policies/{agent_id}/test`: a proposed step, evaluated against the agent's
/// bundle (or `bundle`, when given) without recording anything.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTestRequest {
    /// The step kind (`tool_call`, `llm_call`, `local`); absent means `tool_call`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<StepKind>,
    /// The tool or model id.
    #[serde(default, deserialize_with = "null_as_default")]
    pub target: String,
    /// The step's arguments (rules match on an object's fields). Read from JSON text as a
    /// submit reads step args ([`identity::step_args`]): what a submit would refuse (an
    /// integer beyond 64 bits, say) is refused here, never evaluated rounded.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "step_arguments"
    )]
    pub arguments: Option<Value>,
    /// A bundle (YAML) to evaluate instead of the agent's own; empty means the agent's.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub bundle: String,
}

/// Reads [`PolicyTestRequest::arguments`] with [`identity::step_args`] (from JSON text only).
fn step_arguments<'de, D>(deserializer: D) -> Result<Option<Value>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let raw = Box::<RawValue>::deserialize(deserializer)?;
    identity::step_args(raw.get().as_bytes())
        .map(|args| Some(args.value))
        .map_err(|e| serde::de::Error::custom(format!("invalid arguments: {e}")))
}

/// Answer of `POST /v0/policies/{agent_id}/test`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyTestResponse {
    /// `allow`, `deny` or `require_approval`.
    pub decision: String,
    /// The rule that decided (or the engine's rule id: no bundle, default action, …).
    pub rule_id: String,
    /// The rule's reason, or the engine's.
    #[serde(default)]
    pub reason: String,
    /// The deciding rule's approval configuration, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_config: Option<Value>,
    /// The deciding rule's rate limit (not consumed by a test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Value>,
}

/// Body of `POST /v0/approvals/{id}/grant` and `…/deny`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideApprovalRequest {
    /// Who decides; checked against the approver list
    /// ([`Approval::may_decide`](super::Approval::may_decide)).
    #[serde(default, deserialize_with = "null_as_default")]
    pub decided_by: String,
    /// Optional rationale; a deny's rationale becomes the step's denial reason.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub rationale: String,
}

/// Body of the dispatch webhook, in this field order (compact JSON).
///
/// The Go kernel without leases sends only `execution_id` and `dispatch_id`; the lease protocol
/// (Python SDK 0.14.0 and later) adds `dispatch_attempt`; SDK 0.15+ also needs
/// `lease_timeout_seconds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookPayload {
    /// The execution to run.
    pub execution_id: String,
    /// The dispatch (lease) id.
    pub dispatch_id: String,
    /// The dispatch's attempt counter after the claim (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_attempt: Option<u32>,
    /// Lease length in seconds (> 0; the agent's own when it registered one, else the
    /// kernel's global lease); the agent heartbeats every `min(lease / 3, 30 s)`. A whole
    /// number is written without a fraction, as Go writes it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "write_lease"
    )]
    pub lease_timeout_seconds: Option<f64>,
}
