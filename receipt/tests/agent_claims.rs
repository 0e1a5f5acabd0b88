//! Durable claims (one claimant wins each attempt; a claim lives for its lease): three
//! controllers racing on one SQLite file run each invocation once; a controller that dies mid-action (an aborted task, a SIGKILLed process) keeps its
//! claim until the lease expires, then another takes over with attempt + 1; a live claim is
//! never stolen; the output manifest lets a re-run land its output at most once and refuses a
//! re-run whose output differs.

mod agent_support;

use agent_support::*;
use receipt::agent::*;
use receipt::{
    AppendOutcome, AppendRequest, BranchMeta, MemoryStore, Receipt, ReceiptStore, Result, Runtime,
    SqliteStore, StreamInfo, Tail,
};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Counts = Arc<Mutex<HashMap<String, usize>>>;

/// Three steps in sequence; each sleeps a little so racing controllers overlap, and counts its
/// runs.
fn three_steps(counts: Counts) -> AgentSpec<TestAgent> {
    let mut builder = AgentSpec::builder("race-agent", "1.0.0", TestAgent);
    for (i, step) in ["one", "two", "three"].into_iter().enumerate() {
        let counts = Arc::clone(&counts);
        builder = builder.action(
            Action::<TestAgent>::action(step)
                .when(move |v: &TaskView| v.notes.len() == i)
                .run(move |_agent, ctx| {
                    *counts.lock().unwrap().entry(step.to_owned()).or_default() += 1;
                    async move {
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        ctx.emit(Task::Note { text: step.into() }).await
                    }
                }),
        );
    }
    builder.goal(|v| v.notes.len() == 3).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controllers_racing_on_one_sqlite_file_run_each_invocation_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    let counts: Counts = Arc::default();
    let spec = Arc::new(three_steps(Arc::clone(&counts)));
    // Two store handles and two runtimes: what two processes on one file would have.
    let controller = |owner: &str| {
        let runtime = Runtime::new(Arc::new(SqliteStore::open(&path).unwrap()));
        Controller::new(runtime, Arc::clone(&spec))
            .owner_id(owner)
            .poll_interval(Duration::from_millis(5))
    };
    let (a, b, c) = (
        controller("owner-a"),
        controller("owner-b"),
        controller("owner-c"),
    );
    for round in 0..5 {
        counts.lock().unwrap().clear();
        let run_id = format!("run_{round}");
        let stream = run_stream("agents/race-agent", &run_id);
        let (ra, rb, rc) = tokio::join!(
            a.run(&run_id, &stream),
            b.run(&run_id, &stream),
            c.run(&run_id, &stream)
        );
        for r in [ra, rb, rc] {
            assert_eq!(r.unwrap(), RunOutcome::Completed);
        }
        for step in ["one", "two", "three"] {
            assert_eq!(
                counts.lock().unwrap()[step],
                1,
                "round {round}: {step} ran twice"
            );
        }
        let runtime = a.runtime();
        let started = bodies(runtime, &stream, "action.started").await;
        assert_eq!(started.len(), 3, "one claim per invocation");
        assert!(started.iter().all(|s| s["attempt"] == 1));
        assert_eq!(bodies(runtime, &stream, "note.added").await.len(), 3);
        assert_eq!(bodies(runtime, &stream, "run.started").await.len(), 1);
        assert_eq!(bodies(runtime, &stream, "run.completed").await.len(), 1);
        receipt::verify(&runtime.read(&stream).await.unwrap()).unwrap();
    }
}

/// An action that never finishes on attempt 1 and emits on later attempts.
fn stuck_first_attempt(effects: SideEffects, runs: Arc<AtomicUsize>) -> AgentSpec<TestAgent> {
    AgentSpec::builder("stuck-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::tool("fetch")
                .side_effects(effects)
                .when(|v: &TaskView| v.results.is_empty())
                .run(move |_agent, ctx| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if ctx.attempt() == 1 {
                            std::future::pending::<()>().await;
                        }
                        ctx.emit(Task::Completed {
                            result: "answer".into(),
                        })
                        .await
                    }
                }),
        )
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap()
}

async fn wait_for(runtime: &Runtime, stream: &str, ty: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while bodies(runtime, stream, ty).await.is_empty() {
        assert!(Instant::now() < deadline, "no {ty} appeared");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_controller_is_taken_over_after_its_lease() {
    let store: Arc<dyn ReceiptStore> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let spec = Arc::new(stuck_first_attempt(
        SideEffects::ReceiptOnly,
        Arc::clone(&runs),
    ));
    let lease = Duration::from_millis(400);
    let a = Controller::new(Runtime::new(Arc::clone(&store)), Arc::clone(&spec))
        .owner_id("owner-a")
        .lease(lease);
    let task = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    let reader = Runtime::new(Arc::clone(&store));
    wait_for(&reader, STREAM, "action.started").await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    // While the claim is live, a controller that does not wait reports who holds it.
    let impatient = Controller::new(Runtime::new(Arc::clone(&store)), Arc::clone(&spec))
        .owner_id("owner-c")
        .live_claims(LiveClaims::Return);
    let len = reader.read(STREAM).await.unwrap().len();
    let busy = impatient.run(RUN_ID, STREAM).await.unwrap();
    assert_eq!(busy.status(), "busy");
    assert!(
        busy.reason()
            .unwrap()
            .contains("is claimed by 'owner-a' until"),
        "{busy}"
    );
    assert_eq!(
        reader.read(STREAM).await.unwrap().len(),
        len,
        "busy appends nothing"
    );

    let b = Controller::new(Runtime::new(Arc::clone(&store)), Arc::clone(&spec))
        .owner_id("owner-b")
        .poll_interval(Duration::from_millis(10));
    assert_eq!(b.run(RUN_ID, STREAM).await.unwrap(), RunOutcome::Completed);
    let started = bodies(&reader, STREAM, "action.started").await;
    assert_eq!(started.len(), 2);
    assert_eq!(
        (
            started[0]["claimOwnerId"].clone(),
            started[0]["attempt"].clone()
        ),
        ("owner-a".into(), 1.into())
    );
    assert_eq!(
        (
            started[1]["claimOwnerId"].clone(),
            started[1]["attempt"].clone()
        ),
        ("owner-b".into(), 2.into())
    );
    assert_eq!(started[0]["invocationId"], started[1]["invocationId"]);
    // The takeover was claimed no earlier than the first lease expired.
    let chain = reader.read(STREAM).await.unwrap();
    let takeover = chain
        .iter()
        .filter(|r| r.event_type() == "action.started")
        .nth(1)
        .unwrap();
    assert!(takeover.ts() >= started[0]["leaseExpiresAt"].as_i64().unwrap());
    assert_eq!(runs.load(Ordering::SeqCst), 2, "receipt_only replays");
    assert_eq!(bodies(&reader, STREAM, "task.completed").await.len(), 1);
}

/// A store that never acknowledges an append carrying an event id that ends with `hang_on`:
/// the controller appending it "dies" there (its task is then aborted).
struct Stall {
    inner: Arc<dyn ReceiptStore>,
    hang_on: &'static str,
}

#[async_trait]
impl ReceiptStore for Stall {
    async fn read_range(&self, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>> {
        self.inner.read_range(stream, from, to).await
    }
    async fn tail(&self, stream: &str) -> Result<Option<Tail>> {
        self.inner.tail(stream).await
    }
    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome> {
        let hang = request
            .receipts
            .iter()
            .filter_map(Receipt::event_id)
            .any(|id| id.split('#').next().unwrap().ends_with(self.hang_on));
        if hang {
            std::future::pending::<()>().await;
        }
        self.inner.append(request).await
    }
    async fn count_event_ids(&self, stream: &str, event_ids: &[String]) -> Result<usize> {
        self.inner.count_event_ids(stream, event_ids).await
    }
    async fn list_streams(&self) -> Result<Vec<StreamInfo>> {
        self.inner.list_streams().await
    }
    async fn branch(&self, name: &str) -> Result<Option<BranchMeta>> {
        self.inner.branch(name).await
    }
    async fn list_branches(&self) -> Result<Vec<BranchMeta>> {
        self.inner.list_branches().await
    }
    async fn create_branch(
        &self,
        meta: BranchMeta,
        meta_receipt: Receipt,
        meta_tail: Option<String>,
    ) -> Result<()> {
        self.inner
            .create_branch(meta, meta_receipt, meta_tail)
            .await
    }
}

/// Runs controller A until it stalls on `hang_on` (after `visible` appeared), aborts it, and
/// returns the shared store.
async fn die_while_committing(
    spec: &Arc<AgentSpec<TestAgent>>,
    hang_on: &'static str,
    visible: &str,
) -> Arc<dyn ReceiptStore> {
    let store: Arc<dyn ReceiptStore> = Arc::new(MemoryStore::new());
    let stalling = Runtime::new(Arc::new(Stall {
        inner: Arc::clone(&store),
        hang_on,
    }));
    let a = Controller::new(stalling, Arc::clone(spec))
        .owner_id("owner-a")
        .lease(Duration::from_millis(300));
    let task = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    wait_for(&Runtime::new(Arc::clone(&store)), STREAM, visible).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    task.abort();
    let _ = task.await;
    store
}

fn fetch_spec(effects: SideEffects, runs: Arc<AtomicUsize>, vary: bool) -> AgentSpec<TestAgent> {
    AgentSpec::builder("fetch-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::tool("fetch")
                .side_effects(effects)
                .when(|v: &TaskView| v.results.is_empty())
                .run(move |_agent, ctx| {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    async move {
                        let result = if vary {
                            format!("answer {n}")
                        } else {
                            "answer".into()
                        };
                        ctx.emit(Task::Note {
                            text: "read".into(),
                        })
                        .await?;
                        ctx.emit(Task::Completed { result }).await
                    }
                }),
        )
        // Done once the invocation completed, not merely once its output is visible: a takeover
        // must finish the commit the dead owner started.
        .goal(|v| !v.results.is_empty() && v.completed_actions > 0)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_rerun_after_takeover_lands_its_output_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let spec = Arc::new(fetch_spec(SideEffects::Query, Arc::clone(&runs), false));
    // A bound the manifest and appended the outputs, then died before action.completed.
    let store = die_while_committing(&spec, ":completed", "task.completed").await;
    let runtime = Runtime::new(Arc::clone(&store));
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "run.started",
            "action.started",
            "action.output.manifest",
            "note.added",
            "task.completed"
        ]
    );
    let b = Controller::new(Runtime::new(Arc::clone(&store)), spec)
        .owner_id("owner-b")
        .poll_interval(Duration::from_millis(10));
    assert_eq!(b.run(RUN_ID, STREAM).await.unwrap(), RunOutcome::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the query ran again");
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "run.started",
            "action.started",
            "action.output.manifest",
            "note.added",
            "task.completed",
            "action.started",
            "action.completed",
            "run.completed",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_whose_output_differs_from_the_manifest_is_refused() {
    let runs = Arc::new(AtomicUsize::new(0));
    let spec = Arc::new(fetch_spec(
        SideEffects::ReceiptOnly,
        Arc::clone(&runs),
        true,
    ));
    // A bound the manifest, then died before its outputs landed.
    let store = die_while_committing(&spec, ":output", "action.output.manifest").await;
    let runtime = Runtime::new(Arc::clone(&store));
    let b = Controller::new(Runtime::new(Arc::clone(&store)), spec)
        .owner_id("owner-b")
        .poll_interval(Duration::from_millis(10));
    let err = b.run(RUN_ID, STREAM).await.unwrap_err();
    let manifest = one(&runtime, STREAM, "action.output.manifest").await;
    let inv = str_of(&manifest, "invocationId");
    let message =
        format!("action 'fetch' output for invocation '{inv}' does not match its manifest");
    assert_eq!(err.to_string(), message);
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "run.started",
            "action.started",
            "action.output.manifest",
            "action.started",
            "action.failed",
            "run.failed",
        ]
    );
    let failed = one(&runtime, STREAM, "action.failed").await;
    assert_eq!(failed["error"], message);
    assert_eq!(
        failed["determinismViolation"], true,
        "receipt_only must replay identically"
    );
    assert_eq!(one(&runtime, STREAM, "run.failed").await["error"], message);
}

const CHILD_ENV: &str = "RECEIPT_AGENT_CHILD_DB";

/// The child's body: run the stuck agent on the SQLite file, say when the action is claimed and
/// running, and never finish. Run by hand without its environment it fails.
#[test]
#[ignore = "child process of a_sigkilled_controller_process_is_taken_over_after_its_lease, run by it"]
fn child_process_agent_controller() {
    let path = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!("{CHILD_ENV} is not set: this is the child process of another test, not a test")
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let spec = AgentSpec::builder("stuck-agent", "1.0.0", TestAgent)
            .action(
                Action::<TestAgent>::tool("fetch")
                    .when(|v: &TaskView| v.results.is_empty())
                    .run(|_agent, ctx| async move {
                        if ctx.claim_owner_id() == "child" {
                            println!("claimed {}", ctx.invocation_id());
                            std::future::pending::<()>().await;
                        }
                        ctx.emit(Task::Completed {
                            result: "answer".into(),
                        })
                        .await
                    }),
            )
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap();
        let runtime = Runtime::new(Arc::new(SqliteStore::open(&path).unwrap()));
        Controller::new(runtime, Arc::new(spec))
            .owner_id("child")
            .lease(Duration::from_millis(1500))
            .run(RUN_ID, STREAM)
            .await
            .unwrap();
    });
}

#[tokio::test]
async fn a_sigkilled_controller_process_is_taken_over_after_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    let mut child = Process::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_process_agent_controller",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let claimed = loop {
        let line = lines.next().expect("the child claimed the action").unwrap();
        // The harness prints `test child_process_agent_controller ... ` before it, on the same line.
        if let Some((_, inv)) = line.split_once("claimed ") {
            break inv.trim().to_owned();
        }
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let runtime = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    let started = one(&runtime, STREAM, "action.started").await;
    assert_eq!(started["claimOwnerId"], "child");
    assert_eq!(started["invocationId"], claimed);
    let spec = AgentSpec::builder("stuck-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::tool("fetch")
                .when(|v: &TaskView| v.results.is_empty())
                .run(|_agent, ctx| async move {
                    ctx.emit(Task::Completed {
                        result: format!("taken over at attempt {}", ctx.attempt()),
                    })
                    .await
                }),
        )
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let parent = Controller::new(Arc::clone(&runtime), Arc::new(spec))
        .owner_id("parent")
        .poll_interval(Duration::from_millis(20));
    assert_eq!(
        parent.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    let started = bodies(&runtime, STREAM, "action.started").await;
    assert_eq!(started.len(), 2);
    assert_eq!(started[1]["claimOwnerId"], "parent");
    assert_eq!(started[1]["attempt"], 2);
    assert_eq!(started[1]["invocationId"], claimed);
    assert_eq!(
        one(&runtime, STREAM, "task.completed").await["result"],
        Value::from("taken over at attempt 2")
    );
    // It waited for the lease rather than stealing the claim: the takeover was claimed (its
    // `leaseExpiresAt` is the claim time plus the default lease) once the child's claim had
    // expired.
    let lease_ms = i64::try_from(DEFAULT_LEASE.as_millis()).unwrap();
    let child_expired_at = started[0]["leaseExpiresAt"].as_i64().unwrap();
    let parent_claimed_at = started[1]["leaseExpiresAt"].as_i64().unwrap() - lease_ms;
    assert!(
        parent_claimed_at >= child_expired_at,
        "the claim was taken at {parent_claimed_at}, before the child's lease expired at {child_expired_at}"
    );
}
