//! Rebuno policy bundles over receipt actions, decided by the kernel: [`KernelGovernance`], the
//! [`Governance`] a controller asks before each claim, and the gate agent that makes the
//! kernel decide ([`GateHandler`], [`gate_agent`]).
//!
//! **How.** A receipt agent `<id>` has a rebuno gate agent `receipt-gate-<id>`
//! ([`gate_agent_id`]) whose policy is the agent's bundle (set through the kernel's policy API,
//! `POST /v0/policies/{agent_id}`, by [`KernelGovernance::policy`], or provisioned by the
//! kernel's admin). Each governed invocation becomes one execution of the gate, created
//! idempotently from the invocation id, with the [`GovernedAction`] as its input. The gate's
//! handler makes one `tool_call` step whose target is the action id and whose arguments are
//! that input, through the rebuno SDK like any tool ([`rebuno::wrap_tool`]), so the kernel's own
//! evaluator decides it, writes it to the execution's event log, and applies its approvals and
//! rate limits:
//!
//! - `allow`: the step runs (it does nothing) and the gate completes `{"decision": "allow"}`:
//!   [`Verdict::Allow`];
//! - `deny`: the step is denied (`step.denied` with the rule) and the gate completes
//!   `{"decision": "deny", "rule", "reason"}`: [`Verdict::Deny`];
//! - `require_approval`: the step awaits the approval and the gate execution blocks:
//!   [`Verdict::Pending`] with the approval's id. It is decided like any rebuno approval (the
//!   `/v0/approvals` API, [`rebuno::Client::grant`], the console), or by a receipt appended to
//!   the run (see [`crate::agent::governance`]), which [`KernelGovernance`] forwards as a grant
//!   or deny. The kernel then re-dispatches the gate, which settles as allowed or denied (a
//!   denied or expired approval is a denial naming the approval);
//! - a rate limit: the gate retries the step with a backoff (25 ms doubling to 1 s), as long
//!   as [`GateHandler::max_rate_wait`] allows (default 5 min; then it is a denial with the
//!   kernel's reason); meanwhile the governance answers [`Verdict::Delay`]. A rule's
//!   `rate_limit.max_wait` parks the gate in the kernel instead (blocked with no approval),
//!   which is a delay too. Every gate execution is one call, so a limit on receipt actions is
//!   meant `per_what: agent` (all of one receipt agent's invocations) or `global`.
//!
//! The same bundle text therefore decides a rebuno agent's tool named like the action and the
//! receipt action itself: one evaluator, one audit log (the gate executions), one approval
//! queue.
//!
//! **Logs** (`tracing`, emitted only): each evaluation's gate execution and verdict (`debug`,
//! with the invocation and execution ids), the bundle set as the gate's policy and each
//! decision forwarded to the kernel (`info`), a forwarded decision the kernel refused (`warn`);
//! in the gate's handler, each decision and rate-limited retry (`debug`). The controller logs
//! what it does with a verdict.
//!
//! **Serving the gate.** Embedded, register the handler on the kernel's runtime
//! (`runtime.register(GateHandler::new("<id>"))`); over HTTP, serve [`gate_agent`] on its
//! webhook (`gate_agent("<id>").kernel_url(..).secret(..).build()?.serve(..)`) and register it
//! with the kernel like any agent.

use crate::agent::control::ApprovalDecided;
use crate::agent::governance::{Decision, Governance, GovernedAction, Verdict};
use crate::error::{Error, Result};
use async_trait::async_trait;
use rebuno::agent::AgentHandler;
use rebuno::protocol::{ErrorCode, Event, EventType, Execution, ExecutionStatus};
use rebuno::tool::BoxFuture;
use rebuno::{Agent, AgentBuilder, Client, ToolDef, wrap_tool};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// How a receipt agent's gate agent id begins.
pub const GATE_AGENT_PREFIX: &str = "receipt-gate-";
/// How long, by default, a gate retries a rate-limited step before it denies the action.
pub const DEFAULT_MAX_RATE_WAIT: Duration = Duration::from_secs(300);
/// How long, by default, one evaluation waits for the gate to settle before it answers a
/// delay.
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How soon, by default, the controller asks again after a delay.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_millis(100);

/// The first pause between two tries of a rate-limited step; it doubles up to
/// [`RATE_PAUSE_MAX`].
const RATE_PAUSE_INITIAL: Duration = Duration::from_millis(25);
/// The longest pause between two tries of a rate-limited step.
const RATE_PAUSE_MAX: Duration = Duration::from_secs(1);

/// The gate agent id of receipt agent `agent_id`: `receipt-gate-<agent_id>`.
pub fn gate_agent_id(agent_id: &str) -> String {
    format!("{GATE_AGENT_PREFIX}{agent_id}")
}

/// The idempotency key of the gate execution of one invocation.
fn gate_key(invocation_id: &str) -> String {
    format!("receipt-gate:{invocation_id}")
}

/// What a gate execution completes with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
enum GateOutput {
    /// The step was allowed.
    Allow,
    /// The step was denied.
    Deny {
        /// The rule (empty when the kernel named none).
        #[serde(default)]
        rule: String,
        /// The kernel's reason.
        #[serde(default)]
        reason: String,
    },
}

/// The handler of a receipt agent's gate agent: one `tool_call` step per execution, decided by
/// the kernel (see the module docs).
#[derive(Debug, Clone)]
pub struct GateHandler {
    id: String,
    description: String,
    max_rate_wait: Duration,
}

impl GateHandler {
    /// The gate of receipt agent `agent_id` (agent id [`gate_agent_id`]).
    pub fn new(agent_id: &str) -> Self {
        GateHandler {
            id: gate_agent_id(agent_id),
            description: format!(
                "Policy gate of receipt agent '{agent_id}': one step per governed action \
                 invocation (target: the action id), decided by the agent's bundle"
            ),
            max_rate_wait: DEFAULT_MAX_RATE_WAIT,
        }
    }

    /// How long the gate retries a rate-limited step before it denies the action (default
    /// 5 min).
    pub fn max_rate_wait(mut self, wait: Duration) -> Self {
        self.max_rate_wait = wait;
        self
    }
}

impl AgentHandler for GateHandler {
    fn id(&self) -> &str {
        &self.id
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn call(&self, input: Value) -> BoxFuture<rebuno::Result<Value>> {
        Box::pin(gate(input, self.max_rate_wait))
    }
}

/// An agent builder for the gate of receipt agent `agent_id`, to serve on a webhook or
/// register on an embedded runtime.
pub fn gate_agent(agent_id: &str) -> AgentBuilder {
    Agent::builder(GateHandler::new(agent_id))
}

/// The gate's body: the one step, retried while rate limited (for at most `max_rate_wait`).
async fn gate(input: Value, max_rate_wait: Duration) -> rebuno::Result<Value> {
    let check: GovernedAction = serde_json::from_value(input.clone())
        .map_err(|e| rebuno::Error::InvalidInput(e.to_string()))?;
    let action = wrap_tool(
        ToolDef::new(
            &check.invocation.action_id,
            "a receipt action, governed before its claim",
        ),
        |_args: Value| async { Ok::<_, rebuno::Error>(Value::Bool(true)) },
    );
    let started = Instant::now();
    let mut pause = RATE_PAUSE_INITIAL;
    let (action_id, invocation_id) = (&check.invocation.action_id, &check.invocation.invocation_id);
    let output = loop {
        match action.call(input.clone()).await {
            Ok(_) => break GateOutput::Allow,
            Err(rebuno::Error::Policy { reason, rule_id }) => {
                break GateOutput::Deny {
                    rule: rule_id,
                    reason,
                };
            }
            Err(rebuno::Error::RateLimited { reason }) => {
                let waited = started.elapsed();
                if waited >= max_rate_wait {
                    break GateOutput::Deny {
                        rule: String::new(),
                        reason,
                    };
                }
                tracing::debug!(
                    %action_id,
                    %invocation_id,
                    reason,
                    retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "gate step rate limited: trying again"
                );
                tokio::time::sleep(pause.min(max_rate_wait - waited)).await;
                pause = (pause * 2).min(RATE_PAUSE_MAX);
            }
            // Blocked on an approval (or parked), superseded, terminal: the dispatch unwinds.
            Err(e) => return Err(e),
        }
    };
    tracing::debug!(%action_id, %invocation_id, decision = ?output, "gate decided");
    Ok(serde_json::to_value(output)?)
}

/// A kernel error, as the governance returns it (never failing the run).
fn kernel_error(e: rebuno::Error) -> Error {
    Error::Governance(format!("rebuno kernel: {e}"))
}

/// Whether an execution has settled for an evaluation: ended, or blocked.
fn settled(status: ExecutionStatus) -> bool {
    status.is_terminal() || status == ExecutionStatus::Blocked
}

/// A string field of an event's payload.
fn field<'e>(event: &'e Event, key: &str) -> Option<&'e str> {
    event.payload.get(key).and_then(Value::as_str)
}

/// The last event of type `ty` in `events`.
fn last_of(events: &[Event], ty: EventType) -> Option<&Event> {
    events.iter().rev().find(|e| e.event_type == ty)
}

/// The rule a gate's step awaited its approval under (empty when it never did).
fn approval_rule(events: &[Event]) -> String {
    last_of(events, EventType::StepAwaitingApproval)
        .and_then(|e| field(e, "rule_id"))
        .unwrap_or_default()
        .to_owned()
}

/// A [`Governance`] that has a rebuno kernel decide each invocation under the receipt agent's
/// policy bundle (see the module docs).
pub struct KernelGovernance {
    client: Client,
    gate_id: String,
    bundle: Option<String>,
    installed: OnceCell<()>,
    settle_timeout: Duration,
    retry_after: Duration,
}

impl std::fmt::Debug for KernelGovernance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelGovernance")
            .field("client", &self.client)
            .field("gate_id", &self.gate_id)
            .field("bundle", &self.bundle.is_some())
            .field("settle_timeout", &self.settle_timeout)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl KernelGovernance {
    /// The governance of receipt agent `agent_id` through the kernel `client` talks to (over
    /// HTTP, or embedded). Its gate agent ([`gate_agent_id`]) must be served on that kernel.
    /// Without [`KernelGovernance::policy`], the gate's policy is whatever the kernel holds
    /// for it.
    pub fn new(client: Client, agent_id: &str) -> Self {
        KernelGovernance {
            client,
            gate_id: gate_agent_id(agent_id),
            bundle: None,
            installed: OnceCell::new(),
            settle_timeout: DEFAULT_SETTLE_TIMEOUT,
            retry_after: DEFAULT_RETRY_AFTER,
        }
    }

    /// The policy bundle (rebuno YAML) to decide the agent's actions with: set as the gate
    /// agent's policy before the first evaluation (or by [`KernelGovernance::install`]).
    pub fn policy(mut self, bundle: impl Into<String>) -> Self {
        self.bundle = Some(bundle.into());
        self
    }

    /// How long one evaluation waits for the gate to settle before it answers a delay
    /// (default 5 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.settle_timeout = timeout;
        self
    }

    /// How soon the controller asks again after a delay (default 100 ms).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// The gate agent's id.
    pub fn gate_agent_id(&self) -> &str {
        &self.gate_id
    }

    /// The kernel client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sets the policy bundle as the gate agent's policy now (once; later calls do nothing).
    /// The gate agent must be registered with the kernel (`404` otherwise), and a bundle that
    /// does not load is refused (`400`).
    pub async fn install(&self) -> Result<()> {
        self.installed
            .get_or_try_init(|| async {
                match &self.bundle {
                    Some(bundle) => {
                        self.client
                            .set_policy(&self.gate_id, bundle)
                            .await
                            .map_err(|e| match e.code() {
                                Some(ErrorCode::NotFound) => Error::Governance(format!(
                                    "rebuno kernel: gate agent '{}' is not registered",
                                    self.gate_id
                                )),
                                _ => kernel_error(e),
                            })?;
                        tracing::info!(
                            gate_agent = %self.gate_id,
                            "policy bundle set as the gate agent's policy"
                        );
                        Ok::<(), Error>(())
                    }
                    None => Ok(()),
                }
            })
            .await?;
        Ok(())
    }

    /// The gate execution of `action`, created at most once, as it stands once settled (or
    /// when the settle timeout ran out).
    async fn gate_execution(&self, action: &GovernedAction) -> Result<Execution> {
        let created = self
            .client
            .create_idempotent(
                &self.gate_id,
                action,
                &gate_key(&action.invocation.invocation_id),
            )
            .await
            .map_err(kernel_error)?;
        if settled(created.status) {
            return Ok(created);
        }
        let waited = self
            .client
            .wait_until(&created.id, |e| settled(e.status), self.settle_timeout)
            .await;
        match waited {
            Ok(exec) => Ok(exec),
            // The wait timed out: answer with the execution as it is.
            Err(rebuno::Error::Other(_)) => {
                self.client.get(&created.id).await.map_err(kernel_error)
            }
            Err(e) => Err(kernel_error(e)),
        }
    }

    /// The verdict of a gate that completed.
    async fn completed(&self, exec: &Execution) -> Result<Verdict> {
        let output = exec.output.clone().unwrap_or(Value::Null);
        let output: GateOutput = serde_json::from_value(output.clone()).map_err(|e| {
            Error::Governance(format!(
                "gate execution {} completed with {output}, not a decision: {e}",
                exec.id
            ))
        })?;
        let GateOutput::Deny { mut rule, reason } = output else {
            return Ok(Verdict::Allow);
        };
        // A step denied through its approval names the approval, and the rule that asked.
        let events = self.events(&exec.id).await?;
        let decided = [EventType::ApprovalDenied, EventType::ApprovalExpired]
            .into_iter()
            .filter_map(|ty| last_of(&events, ty))
            .max_by_key(|e| e.event_seq);
        let approval_id = decided.and_then(|e| field(e, "approval_id").map(str::to_owned));
        if rule.is_empty() {
            rule = approval_rule(&events);
        }
        Ok(Verdict::Deny {
            rule,
            reason,
            approval_id,
        })
    }

    /// The verdict of a blocked gate: pending on its approval, or delayed (a rate-limit park,
    /// or an approval decided since the status was read).
    async fn blocked(&self, exec: &Execution) -> Result<Verdict> {
        let events = self.events(&exec.id).await?;
        let requested = last_of(&events, EventType::ApprovalRequested)
            .and_then(|e| field(e, "approval_id"))
            .map(str::to_owned);
        if let Some(approval_id) = requested {
            let approval = self
                .client
                .approval(&approval_id)
                .await
                .map_err(kernel_error)?;
            if approval.status == rebuno::protocol::ApprovalStatus::Pending {
                let rule = approval_rule(&events);
                let reason = match approval.message.as_str() {
                    "" => format!("rule '{rule}' requires an approval"),
                    message => message.to_owned(),
                };
                return Ok(Verdict::Pending {
                    approval_id,
                    rule,
                    reason,
                });
            }
        }
        Ok(self.delay(&exec.id, &events))
    }

    /// A delay while gate `id` is still deciding: rate limited, or not yet run.
    fn delay(&self, id: &str, events: &[Event]) -> Verdict {
        let limited = last_of(events, EventType::StepRateLimited)
            .filter(|limited| {
                // Only a refusal since the last step that got through counts.
                !events.iter().any(|e| {
                    e.event_seq > limited.event_seq
                        && matches!(
                            e.event_type,
                            EventType::StepAllowed | EventType::ApprovalGranted
                        )
                })
            })
            .map(|e| {
                let error = e.payload.get("error");
                let text = |k: &str| error.and_then(|v| v.get(k)).and_then(Value::as_str);
                format!(
                    "{} (rule '{}', gate execution {id})",
                    text("reason").unwrap_or("rate_limit_exceeded"),
                    text("rule_id").unwrap_or_default()
                )
            });
        Verdict::Delay {
            retry_after: self.retry_after,
            reason: limited.unwrap_or_else(|| {
                format!("waiting for the kernel's decision (gate execution {id})")
            }),
        }
    }

    /// Gate `id`'s event log.
    async fn events(&self, id: &str) -> Result<Vec<Event>> {
        self.client.all_events(id).await.map_err(kernel_error)
    }
}

#[async_trait]
impl Governance for KernelGovernance {
    async fn evaluate(&self, action: &GovernedAction) -> Result<Verdict> {
        self.install().await?;
        let exec = self.gate_execution(action).await?;
        let verdict = self.verdict(&exec).await;
        if let Ok(verdict) = &verdict {
            tracing::debug!(
                invocation_id = %action.invocation.invocation_id,
                action_id = %action.invocation.action_id,
                gate_execution_id = %exec.id,
                verdict = ?verdict,
                "governance verdict from the kernel"
            );
        }
        verdict
    }

    /// Refuses an agent whose gate is not this governance's: its bundle would decide
    /// another agent's actions.
    async fn check(&self, agent_id: &str) -> Result<()> {
        let gate = gate_agent_id(agent_id);
        if gate != self.gate_id {
            return Err(crate::agent::AgentError::Misconfigured(format!(
                "the governance decides through gate agent '{}', but agent '{agent_id}' is governed by '{gate}': make it with KernelGovernance::new(client, \"{agent_id}\")",
                self.gate_id
            ))
            .into());
        }
        Ok(())
    }

    async fn decide(&self, decision: &ApprovalDecided) -> Result<Option<String>> {
        let forwarded = self.forward(decision).await;
        match &forwarded {
            Ok(None) => tracing::info!(
                approval_id = %decision.approval_id,
                decision = ?decision.decision,
                decided_by = %decision.decided_by,
                "approval decision forwarded to the kernel"
            ),
            Ok(Some(refusal)) => tracing::warn!(
                approval_id = %decision.approval_id,
                refusal,
                "the kernel refused an approval decision appended to the run"
            ),
            Err(_) => {}
        }
        forwarded
    }
}

impl KernelGovernance {
    /// The verdict of gate execution `exec`, as it stands.
    async fn verdict(&self, exec: &Execution) -> Result<Verdict> {
        match exec.status {
            ExecutionStatus::Completed => self.completed(exec).await,
            ExecutionStatus::Blocked => self.blocked(exec).await,
            ExecutionStatus::Failed | ExecutionStatus::Cancelled => Ok(Verdict::Deny {
                rule: String::new(),
                reason: format!(
                    "gate execution {} {}: {}",
                    exec.id, exec.status, exec.failure_reason
                ),
                approval_id: None,
            }),
            _ => {
                let events = self.events(&exec.id).await?;
                Ok(self.delay(&exec.id, &events))
            }
        }
    }

    /// Forwards a decision appended to the run to the kernel: `Some` with the kernel's refusal.
    async fn forward(&self, decision: &ApprovalDecided) -> Result<Option<String>> {
        let rationale = decision.rationale.as_deref().unwrap_or_default();
        let (id, by) = (&decision.approval_id, &decision.decided_by);
        let answer = match decision.decision {
            Decision::Grant => self.client.grant(id, by, rationale).await,
            Decision::Deny => self.client.deny(id, by, rationale).await,
        };
        match answer {
            Ok(()) => Ok(None),
            Err(e) => match e.code() {
                // Decided already (through the kernel, or by an earlier pass): it stands.
                Some(ErrorCode::Conflict) => Ok(None),
                Some(ErrorCode::Forbidden | ErrorCode::NotFound | ErrorCode::ValidationError) => {
                    Ok(Some(e.to_string()))
                }
                _ => Err(kernel_error(e)),
            },
        }
    }
}
