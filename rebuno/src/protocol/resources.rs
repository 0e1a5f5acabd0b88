//! The resource JSON the kernel answers with: executions, steps, events, approvals, agents,
//! the dispatch queue row, listings, health and live-stream frames.

use super::{
    ApprovalStatus, DispatchStatus, EventType, ExecutionStatus, Idempotency, SpawnedBy, StepKind,
    StepStatus, Timestamp, null_as_default, present,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An execution, as `GET /v0/executions/{id}` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// UUIDv7.
    pub id: String,
    /// The agent that runs it.
    pub agent_id: String,
    /// Optional agent version; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_version: String,
    /// The input the execution was created with.
    #[serde(default)]
    pub input: Value,
    /// Current status.
    pub status: ExecutionStatus,
    /// The output: omitted if never set; a set JSON `null` is `Some(Value::Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
    /// Why it failed or was cancelled; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_reason: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last status change.
    pub updated_at: Timestamp,
    /// When it will be cancelled, if a deadline is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<Timestamp>,
    /// Who created it (the authenticated caller); omitted when empty (the admin token).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created_by: String,
    /// The key a repeated create with the same key (by the same creator) gets this execution
    /// back by; omitted when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub idempotency_key: String,
    /// Whom the creator says it acts for (as the create asserted it, not authenticated);
    /// omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub on_behalf_of: String,
    /// The creator's groups (of its API key) when it was created; omitted when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_groups: Vec<String>,
    /// The session it is a turn of; omitted when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// The earlier turn it continues from instead of the session's latest; omitted when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_execution_id: String,
    /// The execution it was forked from; omitted when not a fork.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub forked_from: String,
    /// The event sequence number of `forked_from` up to which its effects replay; omitted
    /// (0) when not a fork.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fork_seq: u64,
    /// What a fork restores its resources from: resource key to `{generation, checkpoint_ref,
    /// …}`; omitted when nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restoration: Option<Value>,
    /// The parent execution's step that started this one as a subagent; omitted when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnedBy>,
    /// The state it completed with, which the session's next turn reads (`GET …/previous`);
    /// omitted when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// Policy bundle YAML of the execution's own (given to a fork by a caller that may set
    /// policy, or inherited from the execution it was forked from). It narrows its agent's
    /// bundle, never replaces it: a new step must pass both (see [`crate::policy::Decision::narrowed`]).
    /// Omitted when empty (the agent's bundle alone decides).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_bundle: String,
    /// Who set `policy_bundle`: the subject of the API key whose fork request gave it, or
    /// `admin` for the server's admin token (and every caller in dev mode); a fork that
    /// inherits its original's bundle inherits this too. Omitted when there is no bundle.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy_bundle_set_by: String,
    /// The W3C `traceparent` of the trace the execution belongs to (see
    /// [`crate::telemetry`]), recorded when it was created; empty when none. Every delivery of
    /// the execution continues that trace. Kept by the kernel, never on the wire.
    #[serde(skip)]
    pub trace_parent: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A step, as the step routes return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 64 lowercase hex digits ([`identity::step_id`](crate::identity::step_id)).
    pub step_id: String,
    /// The execution it belongs to.
    pub execution_id: String,
    /// The kind as submitted.
    pub kind: StepKind,
    /// The target (tool name, model, …) as submitted; may be empty.
    pub target: String,
    /// [`identity::args_hash`](crate::identity::args_hash) of the args.
    pub args_hash: String,
    /// Occurrence of (kind, target, args_hash) within its dispatch: the n-th identical call of a
    /// dispatch gets the n-th step id.
    pub occurrence: u64,
    /// Current status.
    pub status: StepStatus,
    /// Declared idempotency.
    pub idempotency: Idempotency,
    /// The args; omitted when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub args: Option<Value>,
    /// The result of a succeeded step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// The error of a failed, denied or cancelled step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<Value>,
    /// When it started executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
}

/// One entry of an execution's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The execution whose log it is in.
    pub execution_id: String,
    /// Position in the log, counting from 1 without gaps.
    pub event_seq: u64,
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// A JSON object; its shape depends on the type (see [`EventType`]).
    pub payload: Value,
    /// When it was appended; events of one batch share it.
    pub occurred_at: Timestamp,
}

/// An approval request, as the approval routes return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// UUIDv7.
    pub id: String,
    /// The step waiting on it.
    pub step_id: String,
    /// The blocked execution.
    pub execution_id: String,
    /// Current status.
    pub status: ApprovalStatus,
    /// Raw JSON: the rule's approver list, or `null` when the rule listed none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub approvers: Option<Value>,
    /// The rule's message; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When it expires.
    pub timeout_at: Timestamp,
    /// Who decided it: the deciding API key's subject, or for the admin token the body's
    /// `decided_by`; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub decided_by: String,
    /// The `decided_by` the deciding request's body asserted (recorded, not trusted); omitted
    /// when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub asserted_by: String,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Timestamp>,
    /// Why; `timeout` or `execution_cancelled` for expiries. Omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rationale: String,
    /// Creation time.
    pub created_at: Timestamp,
}

impl Approval {
    /// The approver list when `approvers` is a non-empty JSON array of strings (a `null`
    /// element reads as `""`, as Go decodes it). `None` means anyone may decide.
    pub fn approver_list(&self) -> Option<Vec<String>> {
        let Some(Value::Array(items)) = &self.approvers else {
            return None;
        };
        let list = items
            .iter()
            .map(|item| match item {
                Value::String(s) => Some(s.clone()),
                Value::Null => Some(String::new()),
                _ => None,
            })
            .collect::<Option<Vec<String>>>()?;
        (!list.is_empty()).then_some(list)
    }

    /// Whether `decided_by` may grant or deny: anyone when the approvers are absent,
    /// `null`, `[]` or not a string array; otherwise a case-sensitive member of the list, and
    /// never the empty string. A refusal is `403 forbidden`.
    pub fn may_decide(&self, decided_by: &str) -> bool {
        self.may_decide_in(decided_by, &[])
    }

    /// [`Approval::may_decide`] for a decider who is also a member of `groups` (an API key's):
    /// an approver list naming one of them admits it too.
    pub fn may_decide_in(&self, decided_by: &str, groups: &[String]) -> bool {
        match self.approver_list() {
            None => true,
            Some(list) => list.iter().any(|a| {
                (!decided_by.is_empty() && a == decided_by)
                    || (!a.is_empty() && groups.iter().any(|g| g == a))
            }),
        }
    }
}

/// A dispatch queue row: one delivery of an execution to its agent, with its attempts and
/// retry schedule. The Go kernel never sends it over HTTP; the field names are
/// the table's column names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// UUIDv7; stays the same across re-deliveries.
    pub id: String,
    /// The execution to deliver.
    pub execution_id: String,
    /// Queue status.
    pub status: DispatchStatus,
    /// Delivery attempts so far; incremented by every claim (0 when enqueued).
    pub attempt: u32,
    /// The kernel's attempt limit when it was queued (0: none). Informational: a failure is
    /// judged by the retry policy in force then (the agent's own, else the kernel's).
    pub max_attempts: u32,
    /// Earliest time the row may be claimed.
    pub next_attempt_at: Timestamp,
    /// The replica holding the claim; empty when unclaimed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub locked_by: String,
    /// Lease start of an in-flight row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_at: Option<Timestamp>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// Why the last failed delivery attempt failed; empty when none did. Shown while the
    /// dispatch waits for its retry (`failed`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

/// An agent as the admin routes write it: Go field names, because the Go type has no JSON tags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Agent id.
    #[serde(rename = "ID")]
    pub id: String,
    /// Where dispatches are delivered.
    #[serde(rename = "WebhookURL")]
    pub webhook_url: String,
    /// HMAC secret; the GET routes blank it.
    #[serde(rename = "Secret")]
    pub secret: String,
    /// Policy bundle YAML; empty when none.
    #[serde(rename = "PolicyBundle")]
    pub policy_bundle: String,
    /// Registration time.
    #[serde(rename = "RegisteredAt")]
    pub registered_at: Timestamp,
    /// What the agent published about itself (`PUT /v0/agents/{id}/metadata`); omitted until
    /// it has. Re-registering keeps it.
    #[serde(rename = "Metadata", default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<AgentMetadata>,
    /// The agent's own lease length in seconds, used for its deliveries instead of the
    /// kernel's global lease; omitted (never `null`) when it registered none. Written with the
    /// Go field naming of the other fields; `lease_timeout_seconds` reads too.
    #[serde(
        rename = "LeaseTimeoutSeconds",
        alias = "lease_timeout_seconds",
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::lease::write_lease",
        deserialize_with = "super::lease::optional_lease"
    )]
    pub lease_timeout_seconds: Option<f64>,
    /// The agent's own dispatch retry policy; omitted when it registered none (the kernel's
    /// applies). Go field naming; `dispatch_retry` reads too.
    #[serde(
        rename = "DispatchRetry",
        alias = "dispatch_retry",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dispatch_retry: Option<super::DispatchRetry>,
}

/// What an agent says about itself: a description and the JSON Schemas of its input and
/// output, as the Python SDK (0.28 and later) and `#[rebuno::agent]` publish them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentMetadata {
    /// A description for people (and models) choosing an agent; empty when none.
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    /// The JSON Schema of the execution input; omitted when unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "schema"
    )]
    pub input_schema: Option<Value>,
    /// The JSON Schema of the execution output; omitted when unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "schema"
    )]
    pub output_schema: Option<Value>,
}

/// A JSON Schema: an object or a boolean (`null` reads as none); anything else is refused.
fn schema<'de, D>(deserializer: D) -> Result<Option<Value>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(v @ (Value::Object(_) | Value::Bool(_))) => Ok(Some(v)),
        Some(_) => Err(serde::de::Error::custom(
            "a JSON Schema is an object or a boolean",
        )),
    }
}

/// Answer of `GET /v0/executions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionList {
    /// Newest first. Go sends `null` for none; this port sends `[]` and reads both.
    #[serde(default, deserialize_with = "null_as_default")]
    pub executions: Vec<Execution>,
    /// Pass as `cursor` for the next page; omitted on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Answer of `GET /v0/health` (`ok`) and `GET /v0/ready` (`ready` or `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthStatus {
    /// The status word.
    pub status: String,
}

/// One live-stream frame, sent as `data: <json>\n\n` on the SSE route (best effort, never
/// stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFrame {
    /// The step that produced the output.
    pub step_id: String,
    /// The producer's sequence number.
    pub seq: i64,
    /// The output chunk.
    pub data: String,
}
