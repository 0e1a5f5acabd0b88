//! Runtime behaviour of what `#[receipt::receipts]`, `#[receipt::view]` and `#[receipt::agent]`
//! generate: a macro-built agent runs to its goal under the `Controller`, its view folds are
//! right, a human action blocks and resumes, a remote action runs through a worker found in the
//! registry, and the spec the macro builds is the one the builder checks (the builder refuses
//! at run time exactly what the macros refuse at compile time, with the same words).

use receipt::agent::{
    Action, ActionContext, ActionKind, AgentSpec, AgentTypes, AgentView, CommitContext, Controller,
    ExecutionMode, InProcessDispatcher, ReceiptSet, Registry, RemoteWorker, ResponseContext,
    RunOutcome, SideEffects,
};
use receipt::{Command, Hints, MemoryStore, Receipt, Runtime};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[receipt::receipts]
#[derive(Debug, PartialEq)]
enum Billing {
    #[receipt("charge.requested")]
    Requested { customer: String, cents: u64 },
    #[receipt("charge.approved")]
    Approved { by: String },
    #[receipt("charge.settled")]
    Settled { id: String, cents: u64 },
}

#[receipt::body]
#[derive(Debug, Clone, PartialEq)]
struct Requested {
    customer: String,
    cents: u64,
}

#[receipt::body]
#[derive(Debug, Clone, PartialEq)]
struct Settled {
    id: String,
    cents: u64,
}

#[receipt::view]
#[derive(Debug, PartialEq)]
struct BillingView {
    #[view(last = "charge.requested")]
    requested: Option<Requested>,
    #[view(all = "charge.settled")]
    settled: Vec<Settled>,
    #[view(exists = "charge.approved")]
    approved: bool,
    #[view(exists = "charge.settled")]
    done: bool,
    #[view(count = "charge.requested")]
    requests: usize,
    #[view(fold = Self::completed_actions)]
    completed_actions: Vec<String>,
}

impl BillingView {
    /// A custom fold over a control receipt: the ids of completed actions, in order.
    fn completed_actions(ids: &mut Vec<String>, receipt: &Receipt) {
        if receipt.event_type() == "action.completed"
            && let Some(id) = receipt.body()["actionId"].as_str()
        {
            ids.push(id.to_owned());
        }
    }
}

/// Holds the agent's dependencies: here a customer name and a call counter.
struct BillingAgent {
    customer: String,
    charges: Arc<AtomicUsize>,
}

#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl BillingAgent {
    #[action(kind = "assistant", when = Self::needs_request)]
    async fn request(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Requested {
            customer: self.customer.clone(),
            cents: 500,
        })
        .await
    }

    #[action(kind = "tool", side_effects = "query", when = Self::due)]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        self.charges.fetch_add(1, Ordering::SeqCst);
        let cents = ctx.view().requested.as_ref().map_or(0, |r| r.cents);
        let id = format!("ch_{}", &ctx.invocation_id()[..8]);
        ctx.emit(Billing::Settled { id, cents }).await
    }

    fn needs_request(view: &BillingView) -> bool {
        view.requested.is_none()
    }

    fn due(view: &BillingView) -> bool {
        view.requested.is_some() && !view.done
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.done
    }
}

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(Arc::new(MemoryStore::new())))
}

fn types(chain: &[Receipt]) -> Vec<&str> {
    chain.iter().map(Receipt::event_type).collect()
}

fn fold<V: AgentView>(chain: &[Receipt]) -> V {
    let mut view = V::default();
    for r in chain {
        view.apply(r);
    }
    view
}

#[tokio::test]
async fn a_macro_built_agent_runs_to_its_goal() {
    let charges = Arc::new(AtomicUsize::new(0));
    let agent = BillingAgent {
        customer: "c1".into(),
        charges: Arc::clone(&charges),
    };
    let spec = Arc::new(agent.spec().unwrap());
    let rt = runtime();
    let controller = Controller::new(Arc::clone(&rt), spec);
    let outcome = controller.run("run_1", "billing/runs/run_1").await.unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(charges.load(Ordering::SeqCst), 1);

    let chain = rt.read("billing/runs/run_1").await.unwrap();
    receipt::verify(&chain).unwrap();
    // Two selections of one local non-human action each: claimed inline by `action.started`,
    // output bound by the manifest before it is appended, then completed; the goal ends the run.
    assert_eq!(
        types(&chain),
        [
            "run.started",
            "action.started",
            "action.output.manifest",
            "charge.requested",
            "action.completed",
            "action.started",
            "action.output.manifest",
            "charge.settled",
            "action.completed",
            "run.completed",
        ]
    );
    assert_eq!(chain[1].body()["actionId"], "request");
    assert_eq!(chain[5].body()["actionId"], "settle");
    // The domain receipts are the typed values, serialized with their wire type.
    let requested: Billing = serde_json::from_value(chain[3].body().clone()).unwrap();
    assert_eq!(
        requested,
        Billing::Requested {
            customer: "c1".into(),
            cents: 500
        }
    );

    let view: BillingView = fold(&chain);
    assert_eq!(
        view.requested.as_ref().map(|r| r.customer.as_str()),
        Some("c1")
    );
    assert_eq!(view.settled.len(), 1);
    assert_eq!(view.settled[0].cents, 500);
    assert!(view.settled[0].id.starts_with("ch_"));
    assert!(view.done && !view.approved);
    assert_eq!(view.requests, 1);
    assert_eq!(view.completed_actions, ["request", "settle"]);

    // A finished run appends nothing more.
    let again = controller.run("run_1", "billing/runs/run_1").await.unwrap();
    assert_eq!(again, RunOutcome::Completed);
    assert_eq!(
        rt.read("billing/runs/run_1").await.unwrap().len(),
        chain.len()
    );
}

fn receipt_at(chain: &mut Vec<Receipt>, body: Value) {
    let prev = chain.last().map(|r| r.hash().to_owned());
    let id = format!("r{}", chain.len());
    let r = Receipt::from_parts(id, 1, "s", prev, body, None, Hints::new()).unwrap();
    chain.push(r);
}

#[test]
fn view_folds_last_all_exists_count_and_custom() {
    let mut chain = Vec::new();
    let view: BillingView = fold(&chain);
    assert_eq!(view, BillingView::default());

    receipt_at(
        &mut chain,
        json!({"type": "charge.requested", "customer": "a", "cents": 1}),
    );
    receipt_at(
        &mut chain,
        json!({"type": "charge.requested", "customer": "b", "cents": 2}),
    );
    // Does not deserialize into `Requested`: `last` keeps "b", `count` still counts it.
    receipt_at(
        &mut chain,
        json!({"type": "charge.requested", "customer": "c", "cents": "lots"}),
    );
    receipt_at(
        &mut chain,
        json!({"type": "charge.settled", "id": "s1", "cents": 2}),
    );
    // Not a `Settled` (no cents): skipped by `all`, seen by `exists`.
    receipt_at(&mut chain, json!({"type": "charge.settled", "id": "s2"}));
    receipt_at(
        &mut chain,
        json!({"type": "charge.settled", "id": "s3", "cents": 3, "extra": true}),
    );
    receipt_at(
        &mut chain,
        json!({"type": "action.completed", "actionId": "x"}),
    );
    receipt_at(
        &mut chain,
        json!({"type": "other", "customer": "z", "cents": 9}),
    );
    receipt_at(&mut chain, json!("not an object"));

    let view: BillingView = fold(&chain);
    assert_eq!(
        view.requested,
        Some(Requested {
            customer: "b".into(),
            cents: 2
        })
    );
    assert_eq!(
        view.settled,
        [
            Settled {
                id: "s1".into(),
                cents: 2
            },
            Settled {
                id: "s3".into(),
                cents: 3
            }
        ]
    );
    assert!(view.done);
    assert!(!view.approved);
    assert_eq!(view.requests, 3);
    assert_eq!(view.completed_actions, ["x"]);

    // Folding incrementally (a clone in the middle, as the controller's cache does) agrees.
    let mut half: BillingView = fold(&chain[..4]);
    let mut resumed = half.clone();
    for r in &chain[4..] {
        resumed.apply(r);
    }
    assert_eq!(resumed, view);
    half.apply(&chain[4]);
    assert_ne!(half, view);
}

#[test]
fn receipt_set_types_and_names() {
    assert_eq!(
        Billing::TYPES,
        ["charge.requested", "charge.approved", "charge.settled"]
    );
    let settled = Billing::Settled {
        id: "s".into(),
        cents: 1,
    };
    assert_eq!(settled.type_name(), "charge.settled");
    assert_eq!(
        serde_json::to_value(&settled).unwrap(),
        json!({"type": "charge.settled", "id": "s", "cents": 1})
    );
}

/// An agent with a human approval step and a remote, external charge.
struct ApprovalAgent;

#[receipt::agent(
    id = "approval",
    version = "2.0.0",
    receipts = Billing,
    view = BillingView,
    max_iterations = 10,
    max_concurrency = 2,
    runtime_policy_version = "approval-policy-v1"
)]
impl ApprovalAgent {
    #[action(kind = "human", response_when = Self::answered, when = Self::awaiting)]
    async fn approve(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let cents = ctx.view().requested.as_ref().map_or(0, |r| r.cents);
        ctx.emit(Billing::Settled {
            id: "approved-locally".into(),
            cents,
        })
        .await
    }

    #[action(
        id = "charge",
        kind = "tool",
        side_effects = "external",
        execution = "remote",
        target_group = "payments",
        when = Self::never,
        commit_when = Self::still_open
    )]
    async fn charge_card(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled {
            id: ctx.invocation_id().to_owned(),
            cents: 0,
        })
        .await
    }

    fn awaiting(view: &BillingView) -> bool {
        view.requested.is_some() && !view.done
    }

    fn answered(ctx: &ResponseContext<Self>) -> bool {
        ctx.view().approved
    }

    fn never(_: &BillingView) -> bool {
        false
    }

    fn still_open(ctx: &CommitContext<Self>) -> bool {
        !ctx.view().done
    }

    #[goal]
    fn settled(view: &BillingView) -> bool {
        view.done
    }
}

#[tokio::test]
async fn a_human_action_blocks_until_its_response_arrives() {
    let rt = runtime();
    let stream = "approval/runs/r1";
    let seed = json!({"type": "charge.requested", "customer": "c9", "cents": 700});
    rt.execute(stream, Command::new(vec![seed])).await.unwrap();
    let spec = Arc::new(ApprovalAgent.spec().unwrap());
    // `charge` never runs here, but a controller of an agent with a remote action is refused
    // without a dispatcher serving its group.
    let registry = Arc::new(Registry::new());
    registry.register(Arc::clone(&spec)).unwrap();
    let worker = Arc::new(RemoteWorker::new(registry, Arc::clone(&rt)));
    let controller = Controller::new(Arc::clone(&rt), spec).dispatcher(Arc::new(
        InProcessDispatcher::empty().serve("payments", worker),
    ));

    let outcome = controller.run("r1", stream).await.unwrap();
    assert_eq!(
        outcome.reason(),
        Some("waiting for a correlated response to human action 'approve'")
    );
    let chain = rt.read(stream).await.unwrap();
    assert_eq!(
        types(&chain),
        [
            "charge.requested",
            "run.started",
            "action.selected",
            "human.requested",
            "run.blocked"
        ]
    );

    let approval = serde_json::to_value(Billing::Approved { by: "ops".into() }).unwrap();
    rt.execute(stream, Command::new(vec![approval]))
        .await
        .unwrap();
    let outcome = controller.run("r1", stream).await.unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    let chain = rt.read(stream).await.unwrap();
    assert_eq!(
        types(&chain)[5..],
        [
            "charge.approved",
            "human.responded",
            "action.started",
            "action.output.manifest",
            "charge.settled",
            "action.completed",
            "run.completed"
        ]
    );
    let view: BillingView = fold(&chain);
    assert_eq!(view.settled[0].cents, 700);
}

/// Only `charge` is runnable, and it is external: it must go through a remote worker.
struct RemoteAgent;

#[receipt::agent(id = "remote-billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl RemoteAgent {
    #[action(
        kind = "tool",
        side_effects = "external",
        execution = "remote",
        when = Self::due
    )]
    async fn charge(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        // The invocation id is the downstream idempotency key.
        ctx.emit(Billing::Settled {
            id: ctx.invocation_id().to_owned(),
            cents: 1,
        })
        .await
    }

    fn due(view: &BillingView) -> bool {
        !view.done
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.done
    }
}

#[tokio::test]
async fn a_remote_action_runs_through_a_worker_that_finds_the_spec_in_the_registry() {
    let rt = runtime();
    let registry = Arc::new(Registry::new());
    let spec = RemoteAgent.register(&registry).unwrap();
    assert_eq!(registry.ids(), ["remote-billing"]);
    assert_eq!(
        registry.get("remote-billing").unwrap().action_ids(),
        ["charge"]
    );
    let worker = Arc::new(RemoteWorker::new(Arc::clone(&registry), Arc::clone(&rt)));
    let controller = Controller::new(Arc::clone(&rt), spec)
        .dispatcher(Arc::new(InProcessDispatcher::new(worker)));
    let outcome = controller.run("r1", "remote/runs/r1").await.unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    let chain = rt.read("remote/runs/r1").await.unwrap();
    assert_eq!(
        types(&chain),
        [
            "run.started",
            "action.selected",
            "action.started",
            "action.output.manifest",
            "charge.settled",
            "action.completed",
            "run.completed"
        ]
    );
    let invocation = chain[2].body()["invocationId"].as_str().unwrap();
    assert_eq!(chain[4].body()["id"], invocation);

    // The same agent id twice is refused by the registry.
    let err = RemoteAgent.register(&registry).unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent 'remote-billing' is already registered"
    );
}

#[test]
fn the_macro_builds_the_spec_the_builder_would() {
    let spec = ApprovalAgent.spec().unwrap();
    assert_eq!((spec.id(), spec.version()), ("approval", "2.0.0"));
    assert_eq!((spec.max_iterations(), spec.max_concurrency()), (10, 2));
    assert_eq!(spec.runtime_policy_version(), "approval-policy-v1");
    assert_eq!(spec.receipt_types(), Billing::TYPES);
    let summary: Vec<_> = spec
        .actions()
        .iter()
        .map(|a| {
            (
                a.id(),
                a.kind(),
                a.effects(),
                a.mode(),
                a.is_exclusive(),
                a.group(),
                a.has_commit_when(),
                a.has_response_when(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "approve",
                ActionKind::Human,
                SideEffects::ReceiptOnly,
                ExecutionMode::Local,
                false,
                None,
                false,
                true
            ),
            (
                "charge",
                ActionKind::Tool,
                SideEffects::External,
                ExecutionMode::Remote,
                false,
                Some("payments"),
                true,
                false
            ),
        ]
    );
    let view = BillingView {
        requested: Some(Requested {
            customer: "c".into(),
            cents: 1,
        }),
        ..BillingView::default()
    };
    assert!(spec.action("approve").unwrap().is_runnable(&view));
    assert!(!spec.action("charge").unwrap().is_runnable(&view));
    assert!(!spec.goal_satisfied(&view));
    assert!(spec.goal_satisfied(&BillingView { done: true, ..view }));

    // Defaults the macro leaves to the runtime.
    let spec = BillingAgent {
        customer: String::new(),
        charges: Arc::default(),
    }
    .spec()
    .unwrap();
    assert_eq!((spec.max_iterations(), spec.max_concurrency()), (200, 8));
    assert_eq!(spec.runtime_policy_version(), "runtime-policy-v2");
    assert!(spec.merge_policy().is_none());
}

/// What the builder says when given what a trybuild case gives the macro.
fn refusal<A: AgentTypes>(builder: receipt::agent::SpecBuilder<A>) -> String {
    builder.build().unwrap_err().to_string()
}

fn noop<A: AgentTypes>(action: Action<A>) -> Action<A> {
    action.run(|_, _| async { Ok(()) })
}

fn builder() -> receipt::agent::SpecBuilder<ApprovalAgent> {
    AgentSpec::builder("approval", "1", ApprovalAgent).goal(|v: &BillingView| v.done)
}

/// The stderr the trybuild case records.
fn ui_stderr(case: &str) -> String {
    let path = format!("{}/ui/receipt/{case}.stderr", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_builder_refuses_at_run_time_what_the_macro_refuses_at_compile_time() {
    let cases: Vec<(String, &str)> = vec![
        (
            refusal(builder().action(noop(
                Action::new("settle", ActionKind::Tool).side_effects(SideEffects::External),
            ))),
            "agent_external_not_remote",
        ),
        (
            refusal(builder().action(noop(Action::new("approve", ActionKind::Human)))),
            "agent_human_without_response_when",
        ),
        (
            refusal(
                builder().action(noop(
                    Action::new("settle", ActionKind::Tool)
                        .response_when(|_: &ResponseContext<ApprovalAgent>| true),
                )),
            ),
            "agent_response_when_not_human",
        ),
        (
            refusal(
                builder()
                    .action(noop(Action::new("settle", ActionKind::Tool)))
                    .action(noop(Action::new("settle", ActionKind::Tool))),
            ),
            "agent_duplicate_action_id",
        ),
        (
            refusal(
                AgentSpec::builder("Billing_Agent", "1", ApprovalAgent)
                    .goal(|v: &BillingView| v.done),
            ),
            "agent_invalid_id",
        ),
        (
            refusal(builder().action(noop(Action::new("Search KB", ActionKind::Action)))),
            "agent_invalid_action_id",
        ),
        (
            refusal(builder().action(noop(
                Action::new("settle", ActionKind::Action).max_concurrency(0),
            ))),
            "agent_zero_limits",
        ),
        (
            refusal(
                AgentSpec::builder("billing", "1", ApprovalAgent)
                    .goal(|v: &BillingView| v.done)
                    .max_concurrency(0),
            ),
            "agent_zero_limits",
        ),
        (
            refusal(
                AgentSpec::builder("billing", "1", ApprovalAgent)
                    .goal(|v: &BillingView| v.done)
                    .max_iterations(0),
            ),
            "agent_zero_limits",
        ),
    ];
    for (message, case) in cases {
        let stderr = ui_stderr(case);
        assert!(
            stderr.contains(&format!("error: {message}")),
            "the builder says {message:?}, which {case}.stderr does not:\n{stderr}"
        );
    }

    // Goals: the builder needs one too.
    let missing = AgentSpec::builder("billing", "1", ApprovalAgent).build();
    assert_eq!(
        missing.unwrap_err().to_string(),
        "agent 'billing' has no goal"
    );
}

/// A view written by hand: the agent's compile-time check of the folds a view reads has
/// nothing to check in it, and lets it through.
#[derive(Clone, Default)]
struct SeenView {
    seen: usize,
}

impl AgentView for SeenView {
    fn apply(&mut self, _: &Receipt) {
        self.seen += 1;
    }
}

struct ReminderAgent;

#[receipt::agent(id = "reminders", version = "1.0.0", receipts = Billing, view = SeenView)]
impl ReminderAgent {
    #[action]
    async fn send_reminder(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[goal]
    fn done(view: &SeenView) -> bool {
        view.seen > 0
    }
}

#[test]
fn an_action_id_is_the_method_name_in_kebab_case_and_hand_written_views_are_accepted() {
    let spec = ReminderAgent.spec().unwrap();
    let ids: Vec<&str> = spec.actions().iter().map(|a| a.id()).collect();
    assert_eq!(ids, ["send-reminder"]);
}

/// A receipt set built by hand with a control type, which `#[receipts]` refuses to compile.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type")]
enum Sneaky {
    #[serde(rename = "run.completed")]
    Done,
}

impl ReceiptSet for Sneaky {
    const TYPES: &'static [&'static str] = &["run.completed"];
    fn type_name(&self) -> &'static str {
        "run.completed"
    }
}

struct SneakyAgent;

impl AgentTypes for SneakyAgent {
    type Receipts = Sneaky;
    type View = BillingView;
}

#[test]
fn the_builder_refuses_the_receipt_sets_the_macro_refuses() {
    let message =
        refusal(AgentSpec::builder("sneaky", "1", SneakyAgent).goal(|v: &BillingView| v.done));
    assert!(
        ui_stderr("receipts_control_type").contains(&format!("error: {message}")),
        "{message}"
    );
    let _ = Sneaky::Done;
}
