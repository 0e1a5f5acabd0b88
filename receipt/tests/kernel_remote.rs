//! Remote actions through a rebuno kernel in one process: an embedded kernel on the same SQLite
//! file as the receipts (opened in either order), its worker agent registered in process, and
//! controllers dispatching through it. A run commits its output once; a controller dropped
//! while it waits is taken over by another, which finds the same kernel execution; refusals
//! read as they do in process; a call past its timeout is cancelled in the kernel. A call the
//! worker refused because the invocation's claim had lapsed is made again (under the next
//! idempotency key) for a controller whose claim cures it, and runs once; a refusal no claim
//! cures stays final.

mod agent_support;
mod kernel_support;

use agent_support::*;
use kernel_support::*;
use receipt::agent::*;
use receipt::kernel::{KernelDispatcher, KernelWorker};
use receipt::sim::{Clock, SystemClock};
use receipt::{Runtime, SqliteStore};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// One file: the kernel (with the worker for [`GROUP`] registered and delivering) and the
/// receipt runtime, opened kernel first or receipts first.
async fn one_file(dir: &Path, kernel_first: bool) -> (rebuno::Runtime, Arc<Runtime>) {
    let path = dir.join("app.db");
    let url = format!("sqlite://{}", path.display());
    let (rt, store) = if kernel_first {
        let rt = rebuno::Runtime::open(&url).await.unwrap();
        (rt, SqliteStore::open(&path).unwrap())
    } else {
        let store = SqliteStore::open(&path).unwrap();
        (rebuno::Runtime::open(&url).await.unwrap(), store)
    };
    let receipts = Arc::new(Runtime::new(Arc::new(store)));
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir)),
        Arc::clone(&receipts),
    )
    .group(GROUP)
    .lease(Duration::from_secs(2));
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    rt.start();
    (rt, receipts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_commits_through_an_embedded_kernel_on_the_receipt_file() {
    for kernel_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (rt, receipts) = one_file(dir.path(), kernel_first).await;
        a_run_commits_once(&rt, &receipts, dir.path()).await;
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_controller_is_taken_over_and_the_same_execution_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, receipts) = one_file(dir.path(), true).await;
    a_dropped_controller_is_taken_over(&rt, &receipts, dir.path()).await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_reach_the_controller_with_their_in_process_text() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, receipts) = one_file(dir.path(), true).await;
    let call = a_real_call(&receipts, Payments::in_dir(dir.path())).await;
    let in_process = RemoteWorker::new(
        registry("1.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    );
    let dispatcher = KernelDispatcher::new(rt.client());
    refusals_read_as_in_process(&dispatcher, &in_process, &call).await;
    rt.shutdown().await;

    // End to end: a worker that loaded another version refuses, and the controller records it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let rt = rebuno::Runtime::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let receipts = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    let worker = KernelWorker::new(
        registry("2.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    )
    .group(GROUP);
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    rt.start();
    seed(&receipts, STREAM, "charge it").await;
    let err = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap_err();
    let msg =
        "remote action 'charge' requires pay-agent@1.0.0, but the worker loaded pay-agent@2.0.0";
    assert_eq!(err.to_string(), msg);
    assert_eq!(one(&receipts, STREAM, "action.failed").await["error"], msg);
    assert_eq!(one(&receipts, STREAM, "run.failed").await["error"], msg);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_and_is_cancelled_in_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    let (rt, receipts) = one_file(dir.path(), true).await;
    seed(&receipts, STREAM, "charge it").await;
    let err = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_millis(800),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "remote action timed out");
    assert_eq!(
        one(&receipts, STREAM, "action.failed").await["error"],
        "remote action timed out"
    );
    let execs = worker_executions(&rt.client()).await;
    assert_eq!(execs.len(), 1);
    assert_eq!(
        execs[0].status,
        rebuno::protocol::ExecutionStatus::Cancelled,
        "withdrawn, so that it is not delivered again"
    );
    // A late release changes nothing: the action is not run again.
    files.release();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(bodies(&receipts, STREAM, "note.added").await.is_empty());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_worker_on_the_kernel_is_refused_before_the_run_starts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let rt = rebuno::Runtime::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    rt.start();
    let receipts = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    seed(&receipts, STREAM, "charge it").await;
    let controller = || {
        controller(
            &receipts,
            Payments::in_dir(dir.path()),
            rt.client(),
            "a",
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
    };
    // No `receipt-worker-<GROUP>` on the kernel yet: refused, nothing written.
    let err = controller().run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "remote action 'charge' runs in target group '{GROUP}', which the controller's dispatcher does not serve"
        )
    );
    assert_eq!(types(&receipts, STREAM).await, ["task.requested"]);
    // Once the worker is registered, the same run commits.
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    )
    .group(GROUP);
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    Payments::in_dir(dir.path()).release();
    assert_eq!(
        controller().run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    rt.shutdown().await;
}

/// The wall clock moved by an offset the test sets: a worker whose clock runs ahead sees a live
/// claim as lapsed, as it would a claim whose renewal is late.
#[derive(Default)]
struct Skewed(AtomicI64);

impl Skewed {
    fn set(&self, offset: Duration) {
        self.0
            .store(i64::try_from(offset.as_millis()).unwrap(), Ordering::SeqCst);
    }
}

impl Clock for Skewed {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.0.load(Ordering::SeqCst)
    }
}

/// A kernel on the receipt file of `dir` with the worker for [`GROUP`] registered, its loops
/// not started (nothing is delivered until the test starts them), and the controllers'
/// receipt runtime; the worker reads the receipts on `clock`.
async fn unstarted(dir: &Path, clock: Arc<dyn Clock>) -> (rebuno::Runtime, Arc<Runtime>) {
    let path = dir.join("app.db");
    let rt = rebuno::Runtime::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let store = || Arc::new(SqliteStore::open(&path).unwrap());
    let receipts = Arc::new(Runtime::new(store()));
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir)),
        Runtime::new(store()).with_clock(clock),
    )
    .group(GROUP)
    .lease(Duration::from_secs(2));
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    (rt, receipts)
}

/// Waits (at most 60 s) until the kernel holds `n` executions of the worker agent; returns
/// them, oldest first.
async fn executions(client: &rebuno::Client, n: usize) -> Vec<rebuno::protocol::Execution> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = worker_executions(client).await;
        if all.len() >= n {
            all.reverse();
            return all;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {n} worker executions"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks that `exec` ended refused by the worker with check `check`, having run no step.
async fn assert_refused_by(
    client: &rebuno::Client,
    exec: &rebuno::protocol::Execution,
    check: &str,
) {
    assert_eq!(
        exec.status,
        rebuno::protocol::ExecutionStatus::Completed,
        "{exec:?}"
    );
    let output: &Value = exec.output.as_ref().unwrap();
    assert_eq!(output["refused"], check, "{output}");
    assert!(output.get("outputs").is_none(), "{output}");
    assert!(client.steps(&exec.id).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_once_its_claim_lapsed_runs_once_for_the_controller_that_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let (rt, receipts) = unstarted(dir.path(), Arc::new(SystemClock)).await;
    seed(&receipts, STREAM, "charge it").await;
    let client = rt.client();
    let owner = |name: &str, lease: Duration| {
        controller(
            &receipts,
            Payments::in_dir(dir.path()),
            client.clone(),
            name,
            lease,
            Duration::from_secs(60),
        )
    };
    // `a` claims and dispatches; the kernel holds the execution, delivering nothing yet.
    let a = owner("a", Duration::from_millis(300));
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    let first = executions(&client, 1).await.remove(0);
    running.abort(); // `a` dies: nobody renews its claim
    let _ = running.await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Delivered only now, before anyone took the invocation over: refused, and final.
    rt.start();
    let refused = client
        .wait(&first.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_refused_by(&client, &refused, "claim_expired").await;
    assert_eq!(files.charges(), 0);

    // `b` takes the invocation over (attempt 2): its claim cures the refusal, so the call is
    // made again under the next key, and the action runs once.
    let b = owner("b", Duration::from_secs(30));
    assert_eq!(b.run(RUN_ID, STREAM).await.unwrap(), RunOutcome::Completed);
    assert_eq!(files.charges(), 1, "the charge ran once");
    let started = bodies(&receipts, STREAM, "action.started").await;
    let claims: Vec<_> = started
        .iter()
        .map(|c| (c["claimOwnerId"].clone(), c["attempt"].clone()))
        .collect();
    assert_eq!(claims, [("a".into(), 1.into()), ("b".into(), 2.into())]);
    let invocation = str_of(&started[0], "invocationId");
    let notes = bodies(&receipts, STREAM, "note.added").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["text"], format!("charged rcpt-{invocation}"));
    assert_eq!(bodies(&receipts, STREAM, "action.completed").await.len(), 1);
    assert!(bodies(&receipts, STREAM, "action.failed").await.is_empty());
    let all = executions(&client, 2).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0].id, first.id);
    assert_eq!(all[0].idempotency_key, invocation);
    assert_eq!(all[1].idempotency_key, format!("{invocation}#1"));
    assert_eq!(all[1].input, all[0].input, "the same call");
    let answer = all[1].output.as_ref().unwrap();
    assert_eq!(answer["outputs"][0]["type"], "note.added", "{answer}");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_while_its_live_claim_seemed_lapsed_is_made_again_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let clock = Arc::new(Skewed::default());
    // To the worker, a claim of `a` (lease 30 s) seems lapsed, as it would if `a`'s renewal
    // were late.
    clock.set(Duration::from_secs(600));
    let (rt, receipts) = unstarted(dir.path(), Arc::clone(&clock) as Arc<dyn Clock>).await;
    rt.start();
    seed(&receipts, STREAM, "charge it").await;
    let client = rt.client();
    let a = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        client.clone(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    );
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    let first = executions(&client, 1).await.remove(0);
    let refused = client
        .wait(&first.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_refused_by(&client, &refused, "claim_expired").await;
    clock.set(Duration::ZERO); // the claim is live again to the worker
    assert_eq!(running.await.unwrap().unwrap(), RunOutcome::Completed);
    assert_eq!(files.charges(), 1, "the charge ran once");
    assert_eq!(bodies(&receipts, STREAM, "note.added").await.len(), 1);
    assert_eq!(bodies(&receipts, STREAM, "action.started").await.len(), 1);
    // Asked again (after a pause) under the next keys until the worker saw the claim live:
    // every execution before the last refused, the last one answered.
    let all = worker_executions(&client).await;
    let (last, earlier) = all.split_first().unwrap();
    assert!(!earlier.is_empty());
    for exec in earlier {
        assert_refused_by(&client, exec, "claim_expired").await;
    }
    let answer = last.output.as_ref().unwrap();
    assert_eq!(answer["outputs"][0]["type"], "note.added", "{answer}");
    let invocation = &first.idempotency_key;
    assert_eq!(
        last.idempotency_key,
        format!("{invocation}#{}", earlier.len())
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_stays_lapsed_to_the_worker_is_asked_about_only_until_the_call_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    files.release();
    let clock = Arc::new(Skewed::default());
    clock.set(Duration::from_secs(600));
    let (rt, receipts) = unstarted(dir.path(), Arc::clone(&clock) as Arc<dyn Clock>).await;
    rt.start();
    seed(&receipts, STREAM, "charge it").await;
    let err = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(2),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err == "remote action timed out" || err.contains("expired"),
        "{err}"
    );
    assert_eq!(files.charges(), 0, "the charge ran");
    let all = worker_executions(&rt.client()).await;
    assert!((2..=12).contains(&all.len()), "{} executions", all.len());
    for exec in &all {
        let output = exec.output.as_ref();
        assert!(
            output.is_none_or(|o| o.get("outputs").is_none()),
            "{output:?}"
        );
    }
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_no_claim_cures_is_final_for_every_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, receipts) = one_file(dir.path(), true).await;
    // The invocation ended: its run failed.
    let mut call = a_real_call(&receipts, Payments::in_dir(dir.path())).await;
    let dispatcher = KernelDispatcher::new(rt.client());
    for attempt in [1, 2, 7] {
        call.payload.attempt = attempt;
        let err = dispatcher.dispatch(call.clone()).await.unwrap_err();
        assert!(err.to_string().contains("has already ended"), "{err}");
    }
    let all = worker_executions(&rt.client()).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_refused_by(&rt.client(), &all[0], "invocation_ended").await;
    assert_eq!(Payments::in_dir(dir.path()).charges(), 0);
    rt.shutdown().await;
}

/// A call of `pay-agent@1.0.0`'s `charge` in [`GROUP`] under claim attempt `attempt`, for a
/// dispatcher alone (no run behind it).
fn call_under(attempt: u32) -> RemoteCall {
    let payload = RemotePayload {
        invocation: SelectedInvocation {
            agent_id: "pay-agent".into(),
            agent_version: "1.0.0".into(),
            run_id: RUN_ID.into(),
            run_stream: STREAM.into(),
            selection_id: "agent_action_selection_0".into(),
            invocation_id: "agent_action_invocation_0".into(),
            selected_head: None,
            action_id: "charge".into(),
            kind: ActionKind::Tool,
            execution: ExecutionMode::Remote,
            index: 0,
        },
        claim_id: "agent_action_claim_0".into(),
        claim_owner_id: "b".into(),
        attempt,
        policy_version: DEFAULT_RUNTIME_POLICY_VERSION.into(),
        scheduler_policy_version: SCHEDULER_POLICY_VERSION.into(),
    };
    RemoteCall::new(payload, GROUP, 60_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_execution_that_had_started_the_action_is_the_answer_and_never_made_again() {
    const REFUSAL: &str = "remote action 'charge' refused: claim expired";
    for started in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let rt = rebuno::Runtime::open(&format!(
            "sqlite://{}",
            dir.path().join("kernel.db").display()
        ))
        .await
        .unwrap();
        // Stands for the worker: its first execution refuses for a lapsed claim of attempt 1,
        // after recording a step when `started` (as a worker whose checks failed on a later
        // delivery, once an earlier delivery had started the action, would have); any later
        // execution answers.
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&served);
        let worker = rebuno::agent::handler_fn(
            receipt::kernel::worker_agent_id(GROUP).unwrap(),
            move |_input: Value| {
                let first = count.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if !first {
                        return Ok(json!({"outputs": []}));
                    }
                    if started {
                        rebuno::step("charge", &"once", || async { Ok::<_, String>(1) })
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(
                        json!({"error": REFUSAL, "refused": "claim_expired", "claimAttempt": 1}),
                    )
                }
            },
        );
        rt.register_with(rebuno::agent::Agent::builder(worker))
            .await
            .unwrap();
        rt.start();
        // The caller holds attempt 2: its claim would cure the refusal, had nothing run.
        let answered = KernelDispatcher::new(rt.client())
            .dispatch(call_under(2))
            .await;
        let all = worker_executions(&rt.client()).await;
        if started {
            assert_eq!(answered.unwrap_err().to_string(), REFUSAL);
            assert_eq!(all.len(), 1, "made again: {all:?}");
        } else {
            assert_eq!(answered.unwrap().outputs.len(), 0);
            assert_eq!(all.len(), 2, "{all:?}");
        }
        rt.shutdown().await;
    }
}
