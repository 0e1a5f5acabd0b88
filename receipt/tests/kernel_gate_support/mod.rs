//! The governance scenarios, run by `kernel_gate.rs` on an embedded rebuno kernel and by
//! `kernel_gate_http.rs` on a rebuno server over loopback HTTP: a real kernel (SQLite in
//! memory) decides every receipt action under a policy bundle, through the gate agent served
//! on it.

#![allow(dead_code)] // each test binary runs a subset

use crate::agent_support::*;
use rebuno::client::ListOptions;
use rebuno::protocol::{
    ApprovalStatus, EventType, ExecutionStatus, RegisterAgentRequest, StepStatus,
};
use rebuno::{Agent, AgentBuilder, Client, ToolDef, wrap_tool};
use receipt::agent::control::approval_wait_reason;
use receipt::agent::{Action, AgentSpec, Controller, RunOutcome};
use receipt::kernel::{KernelGovernance, gate_agent, gate_agent_id};
use receipt::{Command, Runtime};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The agents' HMAC secret over HTTP.
const SECRET: &str = "gate-test-secret";

/// Denies the `complete` action.
pub const DENY_BUNDLE: &str = "\
default_action: allow
rules:
  - id: no-completing
    priority: 1
    when: {target: complete}
    then: {decision: deny, reason: completion is frozen}
";

/// `complete` needs alice's approval.
pub const APPROVAL_BUNDLE: &str = "\
default_action: allow
rules:
  - id: approve-complete
    priority: 1
    when: {target: complete, arguments: {agentId: {equals: test-agent}}}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], message: a human signs off}
";

/// At most one `note` per 2 s, for all of the agent's invocations.
pub const RATE_BUNDLE: &str = "\
default_action: allow
rules:
  - id: notes-slowly
    priority: 1
    when: {target: note}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 2s, per_what: agent}
";

/// A rebuno kernel the scenarios run against, and how its agents are served.
pub struct Kernel {
    /// The kernel (admin operations: registering an HTTP agent).
    pub kernel: rebuno::Kernel,
    /// The client the governance uses: embedded, or over HTTP.
    pub client: Client,
    rt: Option<rebuno::Runtime>,
    base: Option<String>,
    _bg: Option<rebuno::kernel::Background>,
}

/// A kernel in this process, serving its agents by direct calls.
pub async fn embedded() -> Kernel {
    let kernel = rebuno::Kernel::memory().await.unwrap();
    let rt = rebuno::Runtime::new(kernel.clone());
    rt.start();
    Kernel {
        client: kernel.client(),
        kernel,
        rt: Some(rt),
        base: None,
        _bg: None,
    }
}

/// A kernel behind its HTTP server on a loopback port (dev mode: no bearer token), delivering
/// to agents' webhooks; the governance talks to it over HTTP.
pub async fn over_http() -> Kernel {
    let kernel = rebuno::Kernel::memory().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    tokio::spawn(async move {
        let options = rebuno::server::ServeOptions::default();
        rebuno::server::serve(listener, app, &options).await;
    });
    Kernel {
        client: Client::new(&base, None).unwrap(),
        _bg: Some(kernel.start_http()),
        kernel,
        rt: None,
        base: Some(base),
    }
}

impl Kernel {
    /// Serves the agent `builder` builds: registered on the runtime, or on a webhook of its
    /// own registered with the kernel.
    pub async fn serve(&self, builder: AgentBuilder) -> Agent {
        if let Some(rt) = &self.rt {
            return rt.register_with(builder).await.unwrap();
        }
        let base = self.base.as_deref().unwrap();
        let agent = builder.kernel_url(base).secret(SECRET).build().unwrap();
        let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let webhook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
        let serving = agent.clone();
        tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
        self.kernel
            .register_agent(RegisterAgentRequest {
                id: agent.id().to_owned(),
                webhook_url,
                secret: SECRET.into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        agent
    }

    /// Serves `test-agent`'s gate and answers a governance deciding by `bundle`.
    pub async fn governance(&self, bundle: &str) -> Arc<KernelGovernance> {
        self.serve(gate_agent("test-agent")).await;
        Arc::new(KernelGovernance::new(self.client.clone(), "test-agent").policy(bundle))
    }

    /// Every gate execution of `test-agent`, oldest first.
    pub async fn gates(&self) -> Vec<rebuno::protocol::Execution> {
        let mut all = self
            .client
            .list_all(ListOptions::new().agent_id(gate_agent_id("test-agent")))
            .await
            .unwrap();
        all.reverse();
        all
    }
}

/// The run stream of run `run_id` of `test-agent`, seeded with a prompt.
async fn seeded(runtime: &Runtime, run_id: &str) -> String {
    let stream = format!("agents/test-agent/runs/{run_id}");
    runtime
        .execute(
            &stream,
            Command::new(vec![json!({"type": "task.requested", "prompt": "hi"})])
                .event_id(format!("seed:{run_id}")),
        )
        .await
        .unwrap();
    stream
}

/// A denied action fails without a claim: `action.failed` carries the rule and reason, the run
/// fails as for any failed action, and the kernel's log holds the denied step.
pub async fn denied_action(k: &Kernel) {
    let runtime = memory_runtime();
    let stream = seeded(&runtime, "run_deny").await;
    let controller = Controller::new(Arc::clone(&runtime), basic_spec())
        .governance(k.governance(DENY_BUNDLE).await);

    let err = controller.run("run_deny", &stream).await.unwrap_err();
    let expected = "action 'complete' denied by policy rule 'no-completing': completion is frozen";
    assert_eq!(err.to_string(), expected);
    assert_eq!(
        types(&runtime, &stream).await,
        [
            "task.requested",
            "run.started",
            "action.selected",
            "action.failed",
            "run.failed"
        ]
    );
    let failed = one(&runtime, &stream, "action.failed").await;
    assert_eq!(failed["rule"], "no-completing");
    assert_eq!(failed["reason"], "completion is frozen");
    assert_eq!(failed["error"], expected);
    assert!(failed.get("approvalId").is_none(), "{failed}");
    assert_eq!(
        one(&runtime, &stream, "run.failed").await["error"],
        expected
    );
    // Ended: a later pass reports it and appends nothing.
    assert_eq!(
        controller.run("run_deny", &stream).await.unwrap(),
        RunOutcome::Failed {
            error: expected.to_owned()
        }
    );

    // The kernel's audit log: one gate execution, its one step denied by the rule, with the
    // action id as the target and the invocation's fields as the arguments.
    let gates = k.gates().await;
    assert_eq!(gates.len(), 1);
    assert_eq!(gates[0].status, ExecutionStatus::Completed);
    let steps = k.client.steps(&gates[0].id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].target, "complete");
    assert_eq!(steps[0].status, StepStatus::Denied);
    assert_eq!(steps[0].error.as_ref().unwrap()["rule_id"], "no-completing");
    let args = steps[0].args.as_ref().unwrap();
    assert_eq!(args["invocationId"], failed["invocationId"]);
    assert_eq!(args["runId"], "run_deny");
    assert_eq!(args["agentId"], "test-agent");
}

/// The `policy.approval.requested` of a blocked run (exactly one), after checking the pass's
/// outcome names its approval, which is the kernel's one pending approval.
async fn approval_wait(k: &Kernel, runtime: &Runtime, stream: &str, outcome: &RunOutcome) -> Value {
    let requested = one(runtime, stream, "policy.approval.requested").await;
    let approval_id = str_of(&requested, "approvalId");
    let pending = k.client.approvals().await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].id, approval_id);
    assert_eq!(pending[0].approver_list(), Some(vec!["alice".to_owned()]));
    assert_eq!(pending[0].execution_id, k.gates().await[0].id);
    assert_eq!(
        outcome,
        &RunOutcome::Blocked {
            reason: approval_wait_reason("complete", approval_id)
        }
    );
    assert_eq!(requested["actionId"], "complete");
    assert_eq!(requested["rule"], "approve-complete");
    assert_eq!(requested["reason"], "a human signs off");
    requested
}

/// A required approval blocks the run (`run.blocked`, a pending approval in the kernel); later
/// passes find the same approval (no second one); a grant through rebuno's approval API
/// resumes the run.
pub async fn approval_blocks_then_resumes(k: &Kernel) {
    let runtime = memory_runtime();
    let stream = seeded(&runtime, "run_grant").await;
    let controller = Controller::new(Arc::clone(&runtime), basic_spec())
        .governance(k.governance(APPROVAL_BUNDLE).await);

    let blocked = controller.run("run_grant", &stream).await.unwrap();
    let requested = approval_wait(k, &runtime, &stream, &blocked).await;
    assert!(bodies(&runtime, &stream, "action.started").await.is_empty());
    assert_eq!(
        one(&runtime, &stream, "run.blocked").await["reason"],
        blocked.reason().unwrap()
    );

    // Asked again: the same gate and approval, nothing requested twice.
    assert_eq!(controller.run("run_grant", &stream).await.unwrap(), blocked);
    approval_wait(k, &runtime, &stream, &blocked).await;
    assert_eq!(k.gates().await.len(), 1);

    let approval_id = str_of(&requested, "approvalId");
    k.client
        .grant(approval_id, "alice", "looks fine")
        .await
        .unwrap();
    assert_eq!(
        controller.run("run_grant", &stream).await.unwrap(),
        RunOutcome::Completed
    );
    let chain = types(&runtime, &stream).await;
    assert_eq!(
        chain[chain.len() - 5..],
        [
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed"
        ]
    );
    assert!(bodies(&runtime, &stream, "action.failed").await.is_empty());
    let approval = k.client.approval(approval_id).await.unwrap();
    assert_eq!(approval.status, ApprovalStatus::Granted);
    assert_eq!(approval.decided_by, "alice");
}

/// An approval decided by a receipt appended to the run: a decider the kernel refuses changes
/// nothing (the refusal is in the `run.blocked` reason); an approver's grant is forwarded to
/// the kernel and the run resumes; on another run an approver's denial fails the action with
/// the approval named.
pub async fn approval_decided_by_receipt(k: &Kernel) {
    let runtime = memory_runtime();
    let governance = k.governance(APPROVAL_BUNDLE).await;
    let controller = Controller::new(Arc::clone(&runtime), basic_spec()).governance(governance);
    let decided = |approval_id: &str, decision: &str, by: &str| {
        json!({"type": "policy.approval.decided", "approvalId": approval_id,
               "decision": decision, "decidedBy": by, "rationale": format!("{by} says {decision}")})
    };

    let stream = seeded(&runtime, "run_receipt").await;
    let blocked = controller.run("run_receipt", &stream).await.unwrap();
    let requested = approval_wait(k, &runtime, &stream, &blocked).await;
    let approval_id = str_of(&requested, "approvalId").to_owned();

    append(&runtime, &stream, decided(&approval_id, "grant", "mallory")).await;
    let refused = controller.run("run_receipt", &stream).await.unwrap();
    let reason = refused.reason().unwrap();
    assert!(reason.starts_with(blocked.reason().unwrap()), "{reason}");
    assert!(
        reason.contains("refused") && reason.contains("mallory"),
        "{reason}"
    );
    let approval = k.client.approval(&approval_id).await.unwrap();
    assert_eq!(approval.status, ApprovalStatus::Pending);

    append(&runtime, &stream, decided(&approval_id, "grant", "alice")).await;
    assert_eq!(
        controller.run("run_receipt", &stream).await.unwrap(),
        RunOutcome::Completed
    );
    let approval = k.client.approval(&approval_id).await.unwrap();
    assert_eq!(approval.status, ApprovalStatus::Granted);
    assert_eq!(approval.decided_by, "alice");
    assert_eq!(approval.rationale, "alice says grant");

    // A denial by receipt: the action fails, naming the rule, the approval and the rationale.
    let stream = seeded(&runtime, "run_receipt_deny").await;
    controller.run("run_receipt_deny", &stream).await.unwrap();
    let requested = one(&runtime, &stream, "policy.approval.requested").await;
    let approval_id = str_of(&requested, "approvalId").to_owned();
    append(&runtime, &stream, decided(&approval_id, "deny", "alice")).await;
    let err = controller
        .run("run_receipt_deny", &stream)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "action 'complete' denied by policy rule 'approve-complete': alice says deny"
    );
    let failed = one(&runtime, &stream, "action.failed").await;
    assert_eq!(failed["approvalId"], approval_id.as_str());
    assert_eq!(failed["rule"], "approve-complete");
    let approval = k.client.approval(&approval_id).await.unwrap();
    assert_eq!(approval.status, ApprovalStatus::Denied);
}

/// `note` twice, one invocation per selection; the goal is two notes.
fn notes_spec() -> Arc<AgentSpec<TestAgent>> {
    let note = Action::<TestAgent>::action("note")
        .when(|v: &TaskView| v.prompt.is_some() && v.notes.len() < 2)
        .run(|_agent, ctx| async move {
            let n = ctx.view().notes.len();
            ctx.emit(Task::Note {
                text: format!("note {n}"),
            })
            .await
        });
    Arc::new(
        AgentSpec::builder("test-agent", "1.0.0", TestAgent)
            .action(note)
            .goal(|v| v.notes.len() >= 2)
            .build()
            .unwrap(),
    )
}

/// A rate limit delays the second invocation: a pass that may wait less than the limit
/// blocks with the kernel's reason, and a later one waits it out and completes.
pub async fn rate_limit_delays(k: &Kernel) {
    let runtime = memory_runtime();
    let stream = seeded(&runtime, "run_rate").await;
    k.serve(gate_agent("test-agent")).await;
    let governance = Arc::new(
        KernelGovernance::new(k.client.clone(), "test-agent")
            .policy(RATE_BUNDLE)
            .settle_timeout(Duration::from_millis(100)),
    );
    let started = Instant::now();
    let impatient = Controller::new(Arc::clone(&runtime), notes_spec())
        .governance(governance.clone())
        .governance_wait(Duration::from_millis(300));
    let blocked = impatient.run("run_rate", &stream).await.unwrap();
    let reason = blocked.reason().unwrap();
    assert!(
        reason.starts_with(
            "action 'note' delayed by policy: rate_limit_exceeded (rule 'notes-slowly'"
        ),
        "{reason}"
    );
    assert_eq!(bodies(&runtime, &stream, "note.added").await.len(), 1);

    let patient = Controller::new(Arc::clone(&runtime), notes_spec()).governance(governance);
    assert_eq!(
        patient.run("run_rate", &stream).await.unwrap(),
        RunOutcome::Completed
    );
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1700), "{waited:?}");
    assert_eq!(bodies(&runtime, &stream, "note.added").await.len(), 2);
    assert!(bodies(&runtime, &stream, "action.failed").await.is_empty());

    // The second gate was refused by the limit, then allowed.
    let gates = k.gates().await;
    assert_eq!(gates.len(), 2);
    let events = k.client.all_events(&gates[1].id).await.unwrap();
    let has = |ty| events.iter().any(|e| e.event_type == ty);
    assert!(has(EventType::StepRateLimited) && has(EventType::StepSucceeded));
    assert_eq!(gates[1].status, ExecutionStatus::Completed);
}

/// One bundle text, one evaluator: a rebuno agent's tool named like the action is denied by
/// the same rule with the same reason as the receipt action.
pub async fn same_bundle_decides_a_rebuno_tool(k: &Kernel) {
    denied_action(k).await;
    let twin = rebuno::handler_fn("tool-twin", |_input: Value| async {
        let complete = wrap_tool(
            ToolDef::new("complete", "completes"),
            |_args: Value| async { Ok::<_, rebuno::Error>(json!("done")) },
        );
        complete.call(json!({})).await
    });
    k.serve(rebuno::Agent::builder(twin)).await;
    k.client.set_policy("tool-twin", DENY_BUNDLE).await.unwrap();
    let exec = k.client.create("tool-twin", json!({})).await.unwrap();
    let done = k
        .client
        .wait(&exec.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "policy_denied: completion is frozen");
    let steps = k.client.steps(&exec.id).await.unwrap();
    assert_eq!(steps[0].status, StepStatus::Denied);
    assert_eq!(steps[0].error.as_ref().unwrap()["rule_id"], "no-completing");
}
