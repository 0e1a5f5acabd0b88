//! Shared fixtures of the `kernel_remote*` tests: the `pay-agent` spec, whose remote action
//! records its effect as a rebuno step (a line in a counter file) and can be held mid-action
//! until a release file exists; the refusals scenario every shape runs; helpers to read what a
//! run and the kernel hold; and (`processes`) the kernel, worker and controller as processes.

#![allow(dead_code)] // each test binary uses a subset

pub mod processes;

use super::agent_support::*;
use receipt::agent::*;
use receipt::kernel::{KernelDispatcher, worker_agent_id};
use receipt::{Result, Runtime, verify};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The target group of `charge`.
pub const GROUP: &str = "payments";
/// The secret worker agents are registered with.
pub const SECRET: &str = "worker-secret";

/// The agent: where its effect is counted, and the file whose existence lets `charge` finish.
pub struct Payments {
    pub counter: PathBuf,
    pub release: PathBuf,
}

impl AgentTypes for Payments {
    type Receipts = Task;
    type View = TaskView;
}

impl Payments {
    /// The files of a run under `dir`.
    pub fn in_dir(dir: &Path) -> Payments {
        Payments {
            counter: dir.join("charges"),
            release: dir.join("release"),
        }
    }

    /// How many times the effect ran.
    pub fn charges(&self) -> usize {
        std::fs::read_to_string(&self.counter)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Lets a held `charge` finish.
    pub fn release(&self) {
        std::fs::write(&self.release, b"go").unwrap();
    }
}

/// `pay-agent@<version>`: the remote action `charge` (group [`GROUP`]) records the charge as a
/// rebuno step (its effect: a line in the counter file, keyed by the invocation id), waits for
/// the release file, then notes `charged <invocationId>`; the goal is a note.
pub fn pay_spec(version: &str, files: Payments) -> Arc<AgentSpec<Payments>> {
    Arc::new(
        AgentSpec::builder("pay-agent", version, files)
            .action(
                Action::<Payments>::tool("charge")
                    .side_effects(SideEffects::External)
                    .execution(ExecutionMode::Remote)
                    .target_group(GROUP)
                    .when(|v: &TaskView| v.prompt.is_some() && v.notes.is_empty())
                    .run(|agent, ctx| async move {
                        let key = ctx.invocation_id().to_owned();
                        let counter = agent.counter.clone();
                        let args = key.clone();
                        let receipt_id: String = rebuno::step("charge", &args, || async move {
                            use std::io::Write;
                            let mut file = std::fs::OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(&counter)?;
                            writeln!(file, "{key}")?;
                            file.sync_all()?;
                            Ok::<_, std::io::Error>(format!("rcpt-{key}"))
                        })
                        .await?;
                        while !agent.release.exists() {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        ctx.emit(Task::Note {
                            text: format!("charged {receipt_id}"),
                        })
                        .await
                    }),
            )
            .goal(|v| !v.notes.is_empty())
            .build()
            .unwrap(),
    )
}

/// A registry holding [`pay_spec`] `version`.
pub fn registry(version: &str, files: Payments) -> Arc<Registry> {
    let registry = Arc::new(Registry::new());
    registry.register(pay_spec(version, files)).unwrap();
    registry
}

/// A controller `owner` of `pay-agent@1.0.0` dispatching through `client`'s kernel, with
/// `lease` (renewed every third of it) and the remote call timeout `timeout`.
pub fn controller(
    runtime: &Arc<Runtime>,
    files: Payments,
    client: rebuno::Client,
    owner: &str,
    lease: Duration,
    timeout: Duration,
) -> Controller<Payments> {
    Controller::new(Arc::clone(runtime), pay_spec("1.0.0", files))
        .owner_id(owner)
        .lease(lease)
        .remote_timeout(timeout)
        .dispatcher(Arc::new(KernelDispatcher::new(client)))
}

/// Waits (at most 60 s) until `done` holds.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (at most 60 s) until the kernel has recorded the outcome of the worker's `charge`
/// step: from then on a re-delivery replays it. (The counter file is written inside the step,
/// before its completion reaches the kernel.)
pub async fn charge_recorded(client: &rebuno::Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for exec in worker_executions(client).await {
            let steps = client.terminal_steps(&exec.id).await.unwrap();
            if steps.iter().any(|s| s.target == "charge") {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting until the charge step was recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The executions of the `payments` worker agent on the kernel.
pub async fn worker_executions(client: &rebuno::Client) -> Vec<rebuno::protocol::Execution> {
    client
        .list_all(rebuno::client::ListOptions::new().agent_id(worker_agent_id(GROUP).unwrap()))
        .await
        .unwrap()
}

/// Checks a completed run: the chain verifies, the effect ran once, the note landed once (keyed
/// by the one invocation), and the kernel ran one execution for it, completed.
pub async fn assert_committed_once(runtime: &Runtime, files: &Payments, client: &rebuno::Client) {
    let chain = runtime.read(STREAM).await.unwrap();
    verify(&chain).unwrap();
    assert_eq!(files.charges(), 1, "the charge ran once");
    let notes = bodies(runtime, STREAM, "note.added").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    let started = bodies(runtime, STREAM, "action.started").await;
    let invocation = str_of(&started[0], "invocationId");
    assert_eq!(notes[0]["text"], format!("charged rcpt-{invocation}"));
    assert_eq!(bodies(runtime, STREAM, "action.completed").await.len(), 1);
    let executions = worker_executions(client).await;
    assert_eq!(executions.len(), 1, "one kernel execution: {executions:?}");
    assert_eq!(
        executions[0].status,
        rebuno::protocol::ExecutionStatus::Completed
    );
    assert_eq!(executions[0].idempotency_key, invocation);
}

/// A real call for the selection at the head after the seed (a run of `pay-agent@1.0.0` with a
/// dispatcher that never answers; the run fails with the timeout, which leaves the chain the
/// calls below are checked against), with a timeout of a minute.
pub async fn a_real_call(runtime: &Arc<Runtime>, files: Payments) -> RemoteCall {
    struct Never(std::sync::Mutex<Vec<RemoteCall>>);
    #[async_trait]
    impl RemoteDispatcher for Never {
        async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult> {
            self.0.lock().unwrap().push(call);
            std::future::pending().await
        }
    }
    seed(runtime, STREAM, "charge it").await;
    let never = Arc::new(Never(std::sync::Mutex::default()));
    let err = Controller::new(Arc::clone(runtime), pay_spec("1.0.0", files))
        .dispatcher(Arc::clone(&never) as Arc<dyn RemoteDispatcher>)
        .remote_timeout(Duration::from_millis(50))
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "remote action timed out");
    let mut call = never.0.lock().unwrap()[0].clone();
    // The run above needed a short timeout to end; the calls made from this one go through a
    // kernel and must not time out on a loaded machine (50 ms did, in CI).
    call.timeout_ms = 60_000;
    call
}

/// A change to a call.
type Edit<'a> = &'a dyn Fn(&mut RemoteCall);

/// The seven ways a worker refuses a call (function version, spec support, agent version, head,
/// action, provenance, `when`), each sent through `dispatcher` under a call id of its own and
/// compared with what `in_process` (a worker over the same registry and store) says.
pub async fn refusals_read_as_in_process(
    dispatcher: &KernelDispatcher,
    in_process: &RemoteWorker,
    call: &RemoteCall,
) {
    let edits: [(&str, Edit); 7] = [
        (
            "remote function 'receipt.agent.action.execute' version 1 is not served here (this worker serves receipt.agent.action.execute version 2)",
            &|c| c.version = 1,
        ),
        (
            "agent spec 'nope' does not support remote execution",
            &|c| c.payload.invocation.agent_id = "nope".into(),
        ),
        (
            "remote action 'charge' requires pay-agent@2.0.0, but the worker loaded pay-agent@1.0.0",
            &|c| c.payload.invocation.agent_version = "2.0.0".into(),
        ),
        (
            "remote action 'charge' selected head 'deadbeef' is unavailable",
            &|c| c.payload.invocation.selected_head = Some("deadbeef".into()),
        ),
        ("unknown action 'refund' for agent 'pay-agent'", &|c| {
            c.payload.invocation.action_id = "refund".into()
        }),
        (
            "remote action 'charge' no longer matches selected kind/execution provenance",
            &|c| c.payload.invocation.kind = ActionKind::Assistant,
        ),
        (
            "remote action 'charge' is no longer runnable at its selected head",
            &|c| c.payload.invocation.selected_head = None,
        ),
    ];
    for (i, (message, edit)) in edits.into_iter().enumerate() {
        let mut tampered = call.clone();
        edit(&mut tampered);
        tampered.call_id = format!("{}-refused-{i}", call.call_id);
        let here = in_process.handle(tampered.clone()).await.unwrap_err();
        assert_eq!(here.to_string(), message);
        let there = dispatcher.dispatch(tampered.clone()).await.unwrap_err();
        assert_eq!(there.to_string(), message, "through the kernel");
        // The refusal is the execution's answer: final, and found again by its call id.
        let again = dispatcher.dispatch(tampered).await.unwrap_err();
        assert_eq!(again.to_string(), message);
    }
    let refused = worker_executions(dispatcher.client()).await;
    assert_eq!(refused.len(), 7, "one execution per refused call");
    for exec in refused {
        assert_eq!(exec.status, rebuno::protocol::ExecutionStatus::Completed);
        let answer: &Value = exec.output.as_ref().unwrap();
        assert!(answer["error"].is_string(), "{answer}");
    }
}

/// Scenario: with the charge released up front, a run through `rt`'s kernel completes and
/// commits once; the execution's output is the worker's answer and its one step the charge.
pub async fn a_run_commits_once(rt: &rebuno::Runtime, receipts: &Arc<Runtime>, dir: &Path) {
    let files = Payments::in_dir(dir);
    files.release();
    seed(receipts, STREAM, "charge it").await;
    let outcome = controller(
        receipts,
        Payments::in_dir(dir),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_committed_once(receipts, &files, &rt.client()).await;
    let exec = &worker_executions(&rt.client()).await[0];
    let output = exec.output.as_ref().unwrap();
    assert_eq!(output["outputs"][0]["type"], "note.added");
    let steps = rt.client().steps(&exec.id).await.unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].target, "charge");
}

/// Scenario: controller `a` dies while the charge is held; `b` waits its claim out, takes the
/// invocation over (attempt 2), finds the same kernel execution and commits it once.
pub async fn a_dropped_controller_is_taken_over(
    rt: &rebuno::Runtime,
    receipts: &Arc<Runtime>,
    dir: &Path,
) {
    let files = Payments::in_dir(dir);
    seed(receipts, STREAM, "charge it").await;
    let lease = Duration::from_millis(600);
    let owner = |name: &str| {
        controller(
            receipts,
            Payments::in_dir(dir),
            rt.client(),
            name,
            lease,
            Duration::from_secs(60),
        )
    };
    let a = owner("a");
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    eventually("the charge ran", || files.charges() == 1).await;
    running.abort(); // the controller dies while it waits on the kernel
    let _ = running.await;
    let b = owner("b");
    let taking_over = tokio::spawn(async move { b.run(RUN_ID, STREAM).await });
    // Only once `b` claimed attempt 2 does the held action finish.
    eventually_claimed(receipts, 2).await;
    files.release();
    assert_eq!(taking_over.await.unwrap().unwrap(), RunOutcome::Completed);
    assert_committed_once(receipts, &files, &rt.client()).await;
    let owners: Vec<_> = bodies(receipts, STREAM, "action.started")
        .await
        .iter()
        .map(|c| {
            (
                c["claimOwnerId"].as_str().unwrap().to_owned(),
                c["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(owners, [("a".to_owned(), 1), ("b".to_owned(), 2)]);
}

/// Waits (at most 60 s) until the run holds the claim of attempt `attempt`.
pub async fn eventually_claimed(receipts: &Runtime, attempt: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !bodies(receipts, STREAM, "action.started")
        .await
        .iter()
        .any(|c| c["attempt"] == attempt)
    {
        assert!(Instant::now() < deadline, "attempt {attempt} never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
