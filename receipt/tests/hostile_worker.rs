//! The remote worker against forged calls: whoever may create executions of a worker agent on
//! the kernel (`executions:write`) can hand the worker any input. The worker runs an action
//! only for an invocation the run stream shows selected, not denied, claimed under a live
//! claim made on that stream, in a run still open, and delivered with exactly the input the
//! controller makes for it. Anything else is refused: the action's effect does not run, the
//! run stream is not touched, and the kernel execution completes with the refusal (`error`,
//! and `refused` naming the check that failed), which its `execution.completed` event keeps
//! for an audit. The one re-delivery that goes on once the claim has lapsed (an execution an
//! earlier delivery had started the action in) is not something a forger can make: a fork of
//! such an execution carries its steps, but is refused like any new execution.
//!
//! Each forged call goes through a real kernel to the real worker: embedded on the receipt
//! file (the worker registered in process), and across processes (a kernel server and a
//! worker serving the signed webhook, killed by SIGKILL at the end). Every effect is released
//! up front, so a call the worker wrongly serves runs to its end and shows in the counter.

mod agent_support;
mod kernel_support;

use agent_support::*;
use kernel_support::processes::{Files, child_main};
use kernel_support::*;
use rebuno::protocol::{EventType, Execution, ExecutionStatus};
use receipt::agent::*;
use receipt::kernel::{
    KernelGovernance, KernelWorker, gate_agent, invocation_call, worker_agent_id,
};
use receipt::{Result, Runtime, SqliteStore};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
#[ignore = "child process of the tests of this file (kernel or worker), run by them"]
fn child_process_role() {
    child_main();
}

/// Denies `charge`.
const DENY_CHARGES: &str = "\
default_action: allow
rules:
  - id: no-charging
    priority: 1
    when: {target: charge}
    then: {decision: deny, reason: charges are frozen}
";

/// `charge` needs alice's approval.
const APPROVE_CHARGES: &str = "\
default_action: allow
rules:
  - id: approve-charges
    priority: 1
    when: {target: charge}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], message: a human signs off}
";

/// An embedded kernel on the receipt file of `dir`, serving the worker of [`GROUP`] (over
/// `registry`) and `pay-agent`'s policy gate.
async fn kernel_on_file(dir: &Path, registry: Arc<Registry>) -> (rebuno::Runtime, Arc<Runtime>) {
    let path = dir.join("app.db");
    let rt = rebuno::Runtime::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let receipts = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    let worker = KernelWorker::new(registry, Arc::clone(&receipts))
        .group(GROUP)
        .lease(Duration::from_secs(2));
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    rt.register_with(gate_agent("pay-agent")).await.unwrap();
    rt.start();
    (rt, receipts)
}

/// The governance of `pay-agent` by `bundle`, through `rt`'s kernel.
fn governance(rt: &rebuno::Runtime, bundle: &str) -> Arc<KernelGovernance> {
    Arc::new(KernelGovernance::new(rt.client(), "pay-agent").policy(bundle))
}

/// The call a forger who can read the run builds for the invocation of the run's one
/// `action.selected`: every field as the controller sends it (no claim, as through a kernel).
async fn call_for_selected(receipts: &Runtime) -> RemoteCall {
    let selected = one(receipts, STREAM, "action.selected").await;
    let field = |k: &str| str_of(&selected, k).to_owned();
    call(
        &field("selectionId"),
        selected["invocationIds"][0].as_str().unwrap(),
        Some(field("selectedHead")),
        "charge",
        &field("policyVersion"),
    )
}

/// A kernel call of `pay-agent@1.0.0`'s run [`RUN_ID`] for `action` (a remote tool of
/// [`GROUP`], index 0).
fn call(
    selection_id: &str,
    invocation_id: &str,
    selected_head: Option<String>,
    action: &str,
    policy_version: &str,
) -> RemoteCall {
    let payload = RemotePayload {
        invocation: SelectedInvocation {
            agent_id: "pay-agent".into(),
            agent_version: "1.0.0".into(),
            run_id: RUN_ID.into(),
            run_stream: STREAM.into(),
            selection_id: selection_id.into(),
            invocation_id: invocation_id.into(),
            selected_head,
            action_id: action.into(),
            kind: ActionKind::Tool,
            execution: ExecutionMode::Remote,
            index: 0,
        },
        claim_id: String::new(),
        claim_owner_id: String::new(),
        attempt: 0,
        policy_version: policy_version.into(),
        scheduler_policy_version: SCHEDULER_POLICY_VERSION.into(),
    };
    invocation_call(&RemoteCall::new(payload, GROUP, 0))
}

/// Creates an execution of the worker agent with `input` straight through `client` (as anyone
/// with `executions:write` can: no controller, no idempotency key) and waits for its end.
async fn forge(client: &rebuno::Client, input: &Value) -> Execution {
    let agent = worker_agent_id(GROUP).unwrap();
    let created = client.create(&agent, input).await.unwrap();
    client
        .wait(&created.id, Duration::from_secs(60))
        .await
        .unwrap()
}

/// Checks that `exec` ended refused by check `refused`, its error containing `says`, and that
/// the kernel's event log keeps the refusal in its `execution.completed` event.
async fn assert_refused(client: &rebuno::Client, exec: &Execution, refused: &str, says: &str) {
    assert_eq!(exec.status, ExecutionStatus::Completed, "{exec:?}");
    let output = exec.output.as_ref().unwrap();
    assert_eq!(output["refused"], refused, "{output}");
    let error = output["error"].as_str().unwrap();
    assert!(error.contains(says), "{error}");
    assert!(output.get("outputs").is_none(), "{output}");
    let events = client.all_events(&exec.id).await.unwrap();
    let completed = events
        .iter()
        .find(|e| e.event_type == EventType::ExecutionCompleted)
        .expect("an execution.completed event");
    assert_eq!(completed.payload["output"], *output);
    // The worker ran no step: nothing of the action's was recorded.
    assert!(client.steps(&exec.id).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_for_an_action_the_policy_denied_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let (rt, receipts) = kernel_on_file(dir.path(), registry("1.0.0", files)).await;
    seed(&receipts, STREAM, "charge it").await;
    let err = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .governance(governance(&rt, DENY_CHARGES))
    .run(RUN_ID, STREAM)
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "action 'charge' denied by policy rule 'no-charging': charges are frozen"
    );
    let before = types(&receipts, STREAM).await;
    assert_eq!(before[before.len() - 2..], ["action.failed", "run.failed"]);

    let forged = call_for_selected(&receipts).await;
    let exec = forge(&rt.client(), &serde_json::to_value(&forged).unwrap()).await;
    assert_refused(
        &rt.client(),
        &exec,
        "policy_denied",
        "denied by policy rule 'no-charging'",
    )
    .await;
    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");
    assert_eq!(
        types(&receipts, STREAM).await,
        before,
        "the run was touched"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_for_an_invocation_never_selected_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let (rt, receipts) = kernel_on_file(dir.path(), registry("1.0.0", files)).await;
    seed(&receipts, STREAM, "charge it").await;
    // The ids a controller would derive at the head, with nothing selected there.
    let head = receipts.read(STREAM).await.unwrap()[0].hash().to_owned();
    let selection = selection_id(
        RUN_ID,
        "pay-agent",
        "1.0.0",
        DEFAULT_RUNTIME_POLICY_VERSION,
        SCHEDULER_POLICY_VERSION,
        Some(&head),
        &["charge"],
    );
    let forged = call(
        &selection,
        &invocation_id(&selection, "charge", 0),
        Some(head),
        "charge",
        DEFAULT_RUNTIME_POLICY_VERSION,
    );
    let exec = forge(&rt.client(), &serde_json::to_value(&forged).unwrap()).await;
    assert_refused(&rt.client(), &exec, "not_selected", "no selection").await;
    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");
    assert_eq!(types(&receipts, STREAM).await, ["task.requested"]);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_for_an_action_awaiting_its_approval_runs_nothing_until_granted() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let (rt, receipts) = kernel_on_file(dir.path(), registry("1.0.0", files)).await;
    seed(&receipts, STREAM, "charge it").await;
    let controller = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .governance(governance(&rt, APPROVE_CHARGES));
    let blocked = controller.run(RUN_ID, STREAM).await.unwrap();
    assert!(matches!(blocked, RunOutcome::Blocked { .. }), "{blocked:?}");
    let requested = one(&receipts, STREAM, "policy.approval.requested").await;
    let approval = str_of(&requested, "approvalId").to_owned();

    let forged = call_for_selected(&receipts).await;
    let exec = forge(&rt.client(), &serde_json::to_value(&forged).unwrap()).await;
    assert_refused(&rt.client(), &exec, "approval_not_granted", &approval).await;
    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");

    // Once granted, the controller's own call runs, once.
    rt.client().grant(&approval, "alice", "fine").await.unwrap();
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(Payments::in_dir(dir.path()).charges(), 1);
    rt.shutdown().await;
}

/// A dispatcher that keeps every call and never answers: its controller holds the claim (and
/// renews it) until the controller is dropped.
#[derive(Default)]
struct Holding(Mutex<Vec<RemoteCall>>);

#[async_trait]
impl RemoteDispatcher for Holding {
    async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult> {
        self.0.lock().unwrap().push(call);
        std::future::pending().await
    }
}

impl Holding {
    /// The calls made so far.
    fn calls(&self) -> Vec<RemoteCall> {
        self.0.lock().unwrap().clone()
    }
}

/// Starts controller `owner` of `spec` on the run with claim lease `lease`, dispatching to a
/// [`Holding`]; returns once it holds the claim of `attempt`.
async fn holding(
    receipts: &Arc<Runtime>,
    spec: Arc<AgentSpec<Payments>>,
    owner: &str,
    lease: Duration,
    attempt: u64,
) -> (tokio::task::JoinHandle<()>, Arc<Holding>) {
    let dispatcher = Arc::new(Holding::default());
    let controller = Controller::new(Arc::clone(receipts), spec)
        .owner_id(owner)
        .lease(lease)
        .dispatcher(Arc::clone(&dispatcher) as Arc<dyn RemoteDispatcher>);
    let running = tokio::spawn(async move {
        let _ = controller.run(RUN_ID, STREAM).await;
    });
    eventually_claimed(receipts, attempt).await;
    let held = Arc::clone(&dispatcher);
    eventually("the call was dispatched", || !held.calls().is_empty()).await;
    (running, dispatcher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_under_a_lapsed_claim_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let (rt, receipts) = kernel_on_file(dir.path(), registry("1.0.0", files)).await;
    seed(&receipts, STREAM, "charge it").await;
    let spec = pay_spec("1.0.0", Payments::in_dir(dir.path()));
    let (running, _) = holding(&receipts, spec, "a", Duration::from_millis(300), 1).await;
    running.abort(); // the owner dies: nobody renews its claim
    let _ = running.await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let forged = call_for_selected(&receipts).await;
    let exec = forge(&rt.client(), &serde_json::to_value(&forged).unwrap()).await;
    assert_refused(&rt.client(), &exec, "claim_expired", "expired").await;
    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_fork_of_a_started_execution_under_a_lapsed_claim_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    let (rt, receipts) = kernel_on_file(dir.path(), registry("1.0.0", files)).await;
    seed(&receipts, STREAM, "charge it").await;
    let client = rt.client();
    // `a` dispatches through the kernel; the worker records the charge and holds.
    let a = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        client.clone(),
        "a",
        Duration::from_millis(300),
        Duration::from_secs(60),
    );
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    charge_recorded(&client).await;
    running.abort(); // the owner dies: nobody renews its claim
    let _ = running.await;
    tokio::time::sleep(Duration::from_millis(900)).await;

    // A fork of the started execution carries its recorded charge, but it is not a delivery
    // of that execution: the lapsed claim stops it like any new execution.
    let origin = worker_executions(&client).await.remove(0);
    let at = client
        .all_events(&origin.id)
        .await
        .unwrap()
        .last()
        .unwrap()
        .event_seq;
    let fork = client
        .fork(&origin.id, at, rebuno::client::ForkOptions::default())
        .await
        .unwrap();
    Payments::in_dir(dir.path()).release();
    let ended = client
        .wait(&fork.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(ended.status, ExecutionStatus::Completed, "{ended:?}");
    let output = ended.output.as_ref().unwrap();
    assert_eq!(output["refused"], "claim_expired", "{output}");
    assert!(output.get("outputs").is_none(), "{output}");
    assert_eq!(
        Payments::in_dir(dir.path()).charges(),
        1,
        "the charge ran twice"
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_replay_of_a_completed_invocation_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let (rt, receipts) = kernel_on_file(dir.path(), registry("1.0.0", files)).await;
    seed(&receipts, STREAM, "charge it").await;
    let outcome = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(Payments::in_dir(dir.path()).charges(), 1);
    let before = types(&receipts, STREAM).await;

    // The controller's own input, again, in an execution of the forger's.
    let forged = call_for_selected(&receipts).await;
    let exec = forge(&rt.client(), &serde_json::to_value(&forged).unwrap()).await;
    assert_refused(&rt.client(), &exec, "invocation_ended", "action.completed").await;
    assert_eq!(
        Payments::in_dir(dir.path()).charges(),
        1,
        "the charge ran twice"
    );
    assert_eq!(types(&receipts, STREAM).await, before);
    rt.shutdown().await;
}

/// A remote tool `id` of [`GROUP`], runnable once a prompt is seeded and until a note is: its
/// effect is a line (the invocation id) in `file`, and it notes `<id> <invocation>`. It needs no
/// rebuno execution, so it also runs in process.
fn counting(id: &str, file: PathBuf) -> Action<Payments> {
    let name = id.to_owned();
    Action::<Payments>::tool(id)
        .side_effects(SideEffects::External)
        .execution(ExecutionMode::Remote)
        .target_group(GROUP)
        .when(|v: &TaskView| v.prompt.is_some() && v.notes.is_empty())
        .run(move |_agent, ctx| {
            let (file, name) = (file.clone(), name.clone());
            async move {
                use std::io::Write;
                let mut out = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)
                    .unwrap();
                writeln!(out, "{}", ctx.invocation_id()).unwrap();
                let text = format!("{name} {}", ctx.invocation_id());
                ctx.emit(Task::Note { text }).await
            }
        })
}

/// `pay-agent@1.0.0` of `actions`, done once a note is written, at most `cap` actions a
/// selection.
fn pay_agent(
    files: Payments,
    actions: Vec<Action<Payments>>,
    cap: u32,
) -> Arc<AgentSpec<Payments>> {
    let mut spec = AgentSpec::builder("pay-agent", "1.0.0", files).max_concurrency(cap);
    for action in actions {
        spec = spec.action(action);
    }
    Arc::new(spec.goal(|v| !v.notes.is_empty()).build().unwrap())
}

/// `pay-agent@1.0.0` with two remote tools in [`GROUP`], both runnable once a prompt is seeded:
/// `charge` (as in [`pay_spec`], declared first) and `refund` (a line in `refunds`), and a cap
/// of one action per selection, so that only `charge` is ever selected.
fn charge_or_refund(files: Payments, refunds: PathBuf) -> Arc<AgentSpec<Payments>> {
    let charge = pay_spec("1.0.0", Payments::in_dir(Path::new("/nonexistent")))
        .action("charge")
        .unwrap()
        .clone();
    pay_agent(files, vec![charge, counting("refund", refunds)], 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_substituting_the_claimed_input_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let refunds = dir.path().join("refunds");
    let spec = || charge_or_refund(Payments::in_dir(dir.path()), refunds.clone());
    let registry = Arc::new(Registry::new());
    registry.register(spec()).unwrap();
    Payments::in_dir(dir.path()).release();
    let (rt, receipts) = kernel_on_file(dir.path(), registry).await;
    seed(&receipts, STREAM, "charge it").await;
    // A controller holds a live claim on `charge` while the forger calls.
    let (running, dispatcher) = holding(&receipts, spec(), "a", Duration::from_secs(60), 1).await;
    let claimed = dispatcher.calls()[0].clone();
    let exact = invocation_call(&claimed);
    let client = rt.client();

    // The claimed invocation, but another action: `refund` is runnable at the selected head.
    let mut other_action = exact.clone();
    other_action.payload.invocation.action_id = "refund".into();
    let exec = forge(&client, &serde_json::to_value(&other_action).unwrap()).await;
    assert_refused(&client, &exec, "selection_mismatch", "'charge'").await;
    assert!(!refunds.exists(), "the refund ran");

    // The claimed invocation with arguments the controller does not send, or naming the claim.
    let mut with_args = serde_json::to_value(&exact).unwrap();
    with_args["payload"]["args"] = json!({"amount": 1_000_000});
    let exec = forge(&client, &with_args).await;
    assert_refused(&client, &exec, "input_mismatch", "payload.args").await;
    let mut naming_the_claim = exact.clone();
    naming_the_claim.payload.claim_id = claimed.payload.claim_id.clone();
    naming_the_claim.payload.claim_owner_id = "a".into();
    naming_the_claim.payload.attempt = 1;
    let exec = forge(&client, &serde_json::to_value(&naming_the_claim).unwrap()).await;
    assert_refused(&client, &exec, "input_mismatch", "payload.claimId").await;
    // Another call id than the invocation's.
    let mut other_call_id = exact.clone();
    other_call_id.call_id = "agent_action_invocation_0".into();
    let exec = forge(&client, &serde_json::to_value(&other_call_id).unwrap()).await;
    assert_refused(&client, &exec, "input_mismatch", "callId").await;

    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");
    assert!(!refunds.exists(), "the refund ran");
    running.abort();
    let _ = running.await;
    rt.shutdown().await;
}

/// `pay-agent@1.0.0` with [`counting`] `charge` (its counter [`Payments::charges`] counts),
/// which runs in process.
fn counted_charge(dir: &Path) -> Arc<AgentSpec<Payments>> {
    let files = Payments::in_dir(dir);
    let charge = counting("charge", files.counter.clone());
    pay_agent(files, vec![charge], 8)
}

/// The receipt runtime on a file in `dir`, seeded, and an in-process worker of
/// [`counted_charge`] over it.
async fn in_process(dir: &Path) -> (Arc<Runtime>, RemoteWorker) {
    let receipts = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open(dir.join("app.db")).unwrap(),
    )));
    let registry = Arc::new(Registry::new());
    registry.register(counted_charge(dir)).unwrap();
    seed(&receipts, STREAM, "charge it").await;
    (Arc::clone(&receipts), RemoteWorker::new(registry, receipts))
}

/// The refusal `err` holds (panics on any other error).
fn refusal(err: receipt::Error) -> RemoteRefusal {
    match err {
        receipt::Error::Agent(AgentError::RemoteRefused { refusal, .. }) => *refusal,
        other => panic!("not a refusal: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_another_run_owner_or_stream_than_its_claim_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (receipts, worker) = in_process(dir.path()).await;
    let spec = counted_charge(dir.path());
    let (running, held) = holding(&receipts, spec, "a", Duration::from_secs(60), 1).await;
    let claimed = held.calls()[0].clone();
    let refused = |edit: &dyn Fn(&mut RemoteCall)| {
        let mut call = claimed.clone();
        edit(&mut call);
        let worker = &worker;
        async move { refusal(worker.handle(call).await.unwrap_err()) }
    };

    // Another run's id on this run's selection.
    let r = refused(&|c| c.payload.invocation.run_id = "run_y".into()).await;
    assert_eq!(r.check(), "foreign_selection", "{r}");
    // The claim's id with another owner or attempt.
    let r = refused(&|c| c.payload.claim_owner_id = "mallory".into()).await;
    assert_eq!(r.check(), "claim_mismatch", "{r}");
    assert!(r.to_string().contains("claimOwnerId 'a'"), "{r}");
    let r = refused(&|c| c.payload.attempt = 7).await;
    assert_eq!(r.check(), "claim_mismatch", "{r}");
    // A fork of the run, which holds the selection and the live claim, made on its parent.
    let fork = "agents/pay-agent/runs/run_x-fork";
    let length = receipts.read(STREAM).await.unwrap().len() as u64;
    receipts.fork(STREAM, length, fork).await.unwrap();
    let r = refused(&|c| c.payload.invocation.run_stream = fork.into()).await;
    assert_eq!(r.check(), "claim_elsewhere", "{r}");
    assert!(r.to_string().contains(STREAM), "{r}");

    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");
    // The call as the controller made it runs.
    assert_eq!(worker.handle(claimed).await.unwrap().outputs.len(), 1);
    assert_eq!(Payments::in_dir(dir.path()).charges(), 1);
    running.abort();
    let _ = running.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_naming_a_claim_taken_over_is_refused_and_the_new_owners_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (receipts, worker) = in_process(dir.path()).await;
    let spec = || counted_charge(dir.path());
    let (a, held_a) = holding(&receipts, spec(), "a", Duration::from_millis(300), 1).await;
    a.abort();
    let _ = a.await;
    // `b` waits `a`'s claim out and takes the invocation over as attempt 2.
    let (b, held_b) = holding(&receipts, spec(), "b", Duration::from_secs(60), 2).await;
    let (call_a, call_b) = (held_a.calls()[0].clone(), held_b.calls()[0].clone());
    assert_eq!(call_a.payload.attempt, 1);

    let err = worker.handle(call_a.clone()).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&call_a.payload.claim_id) && message.contains(&call_b.payload.claim_id),
        "{message}"
    );
    assert!(
        matches!(
            refusal(err),
            RemoteRefusal::ClaimSuperseded { attempt: 2, .. }
        ),
        "{message}"
    );
    assert_eq!(Payments::in_dir(dir.path()).charges(), 0, "the charge ran");
    // The live claim's call runs.
    let served = worker.handle(call_b).await.unwrap();
    assert_eq!(served.outputs.len(), 1);
    assert_eq!(Payments::in_dir(dir.path()).charges(), 1);
    b.abort();
    let _ = b.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_call_for_a_failed_run_is_refused_across_processes() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let _worker = files.worker(&url);
    let receipts = files.receipts();
    files.payments().release();
    // The run fails: its remote call timed out (`action.failed`, `run.failed`).
    let real = a_real_call(&receipts, files.payments()).await;
    let client = rebuno::Client::new(&url, None).unwrap();
    let exec = forge(
        &client,
        &serde_json::to_value(invocation_call(&real)).unwrap(),
    )
    .await;
    assert_refused(&client, &exec, "invocation_ended", "action.failed").await;
    assert_eq!(files.payments().charges(), 0, "the charge ran");
    drop(kernel);
}
