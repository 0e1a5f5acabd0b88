//! The receipt crate under hostile use (issue 11): the runtime's and the controller's per-stream
//! tables stay bounded and return to their baseline when their work ends, whatever the number
//! of streams and runs, and eviction never changes a result; `receipt new` never follows a
//! symlink; `append` refuses bodies too large or too deep to store.

mod agent_support;

use agent_support::*;
use receipt::agent::{Action, AgentSpec, Controller, RunOutcome};
use receipt::runtime::{CacheSizes, DEFAULT_CACHE_CAPACITY};
use receipt::{Command, MemoryStore, Receipt, Reducer, Runtime, fold_chain};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;

const EMPTY: CacheSizes = CacheSizes {
    locks: 0,
    heads: 0,
    folds: 0,
};

/// Folds a stream into `<type>:<n>` per receipt.
struct Trace;

impl Reducer for Trace {
    type State = Vec<String>;
    fn initial(&self) -> Vec<String> {
        Vec::new()
    }
    fn apply(&self, state: &mut Vec<String>, r: &Receipt) {
        state.push(format!("{}:{}", r.event_type(), r.body()["n"]));
    }
}

fn event(n: u64) -> Command {
    Command::new(vec![json!({"type": "t", "n": n})])
}

// ---------------------------------------------------------------------------------------------
// The runtime

#[tokio::test]
async fn ten_thousand_streams_leave_the_runtime_tables_within_their_bound() {
    let runtime = Runtime::new(Arc::new(MemoryStore::new()));
    assert_eq!(runtime.cache_sizes(), EMPTY);
    let streams = 10_000u64;
    for n in 0..streams {
        let stream = format!("s/{n}");
        runtime.execute(&stream, event(n)).await.unwrap();
        assert_eq!(
            runtime.fold(&stream, &Trace).await.unwrap(),
            [format!("t:{n}")]
        );
    }
    assert_eq!(
        runtime.cache_sizes(),
        CacheSizes {
            locks: 0,
            heads: DEFAULT_CACHE_CAPACITY,
            folds: DEFAULT_CACHE_CAPACITY,
        }
    );
    // The streams kept are the most recently used ones: forgetting them empties the tables.
    for n in streams - DEFAULT_CACHE_CAPACITY as u64..streams {
        runtime.forget(&format!("s/{n}"));
    }
    assert_eq!(runtime.cache_sizes(), EMPTY);
}

#[tokio::test]
async fn an_evicted_stream_folds_extends_and_deduplicates_as_a_cached_one_does() {
    let store = Arc::new(MemoryStore::new());
    let runtime = Runtime::new(store.clone()).with_cache_capacity(1);
    let uncached = Runtime::new(store).with_cache_capacity(0);
    for n in 0..3 {
        runtime.execute("a", event(n)).await.unwrap();
    }
    assert_eq!(
        runtime.fold("a", &Trace).await.unwrap(),
        ["t:0", "t:1", "t:2"]
    );
    let evict_a = || async {
        runtime.execute("b", event(0)).await.unwrap();
        runtime.fold("b", &Trace).await.unwrap();
        let sizes = runtime.cache_sizes();
        assert_eq!((sizes.heads, sizes.folds), (1, 1));
    };

    // Extended after eviction, with the expected prev it would have had with its cache.
    evict_a().await;
    let head = runtime
        .read("a")
        .await
        .unwrap()
        .last()
        .unwrap()
        .hash()
        .to_owned();
    let ex = runtime
        .execute("a", event(3).expect_prev(Some(head.clone())).event_id("e3"))
        .await
        .unwrap();
    assert_eq!(ex.receipts[0].prev(), Some(head.as_str()));
    assert_eq!(ex.len, 4);

    // Folded after eviction: the same state as a full fold, and as a runtime that caches nothing.
    evict_a().await;
    let folded = runtime.fold("a", &Trace).await.unwrap();
    assert_eq!(folded, ["t:0", "t:1", "t:2", "t:3"]);
    assert_eq!(
        folded,
        fold_chain(&Trace, &runtime.read("a").await.unwrap())
    );
    assert_eq!(uncached.fold("a", &Trace).await.unwrap(), folded);

    // A repeated command is still recognised as one after eviction.
    evict_a().await;
    let again = runtime.execute("a", event(3).event_id("e3")).await.unwrap();
    assert!(again.duplicate);
    assert_eq!((again.len, again.head), (4, ex.head.clone()));
    assert_eq!(uncached.cache_sizes(), EMPTY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_stream_locks_are_dropped_once_nobody_waits() {
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new())));
    let tasks: Vec<_> = (0..64u64)
        .map(|n| {
            let runtime = Arc::clone(&runtime);
            tokio::spawn(async move {
                let stream = format!("shared/{}", n % 4);
                runtime.execute(&stream, event(n)).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(runtime.cache_sizes().locks, 0);
    for s in 0..4 {
        assert_eq!(
            runtime.read(&format!("shared/{s}")).await.unwrap().len(),
            16
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The controller

/// Completes the task, or fails when the prompt says so.
fn complete_or_fail() -> Action<TestAgent> {
    Action::<TestAgent>::action("complete")
        .when(|v: &TaskView| v.prompt.is_some() && v.results.is_empty())
        .run(|_agent, ctx| async move {
            let prompt = ctx.view().prompt.clone().unwrap_or_default();
            if prompt == "fail" {
                return Err(receipt::Error::msg("asked to fail"));
            }
            ctx.emit(Task::Completed {
                result: format!("done: {prompt}"),
            })
            .await
        })
}

/// A human approval, answered by an `approval.received` carrying its invocation id.
fn approve() -> Action<TestAgent> {
    Action::<TestAgent>::human("approve")
        .when(|v: &TaskView| v.results.is_empty())
        .response_when(|ctx| {
            ctx.view()
                .approvals
                .iter()
                .any(|(inv, _)| inv == ctx.invocation_id())
        })
        .run(|_agent, ctx| async move {
            let approved = ctx
                .view()
                .approvals
                .iter()
                .any(|(inv, ok)| inv == ctx.invocation_id() && *ok);
            ctx.emit(Task::Completed {
                result: format!("approved={approved}"),
            })
            .await
        })
}

fn spec(action: Action<TestAgent>) -> Arc<AgentSpec<TestAgent>> {
    Arc::new(
        AgentSpec::builder("test-agent", "1.0.0", TestAgent)
            .action(action)
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    )
}

fn run_stream(n: usize) -> (String, String) {
    (format!("r{n}"), format!("agents/test-agent/runs/r{n}"))
}

#[tokio::test]
async fn a_thousand_ended_runs_leave_no_cache_behind() {
    let runtime = memory_runtime();
    let controller = Controller::new(Arc::clone(&runtime), spec(complete_or_fail()));
    for n in 0..1000 {
        let (run_id, stream) = run_stream(n);
        let fails = n % 10 == 9;
        seed(&runtime, &stream, if fails { "fail" } else { "go" }).await;
        let outcome = controller.run(&run_id, &stream).await;
        if fails {
            assert_eq!(outcome.unwrap_err().to_string(), "asked to fail");
        } else {
            assert_eq!(outcome.unwrap(), RunOutcome::Completed);
        }
        assert_eq!(controller.cached_runs(), 0, "run {n}");
    }
    assert_eq!(runtime.cache_sizes(), EMPTY);

    // An ended run asked again reports its end, read from the store.
    let (run_id, stream) = run_stream(0);
    assert_eq!(
        controller.run(&run_id, &stream).await.unwrap(),
        RunOutcome::Completed
    );
    let (run_id, stream) = run_stream(9);
    assert_eq!(
        controller.run(&run_id, &stream).await.unwrap(),
        RunOutcome::Failed {
            error: "asked to fail".into()
        }
    );
    assert_eq!(controller.cached_runs(), 0);
    assert_eq!(runtime.cache_sizes(), EMPTY);
}

#[tokio::test]
async fn open_runs_stay_within_the_capacity_and_an_evicted_one_resumes_like_a_cached_one() {
    let runtime = memory_runtime();
    let controller = Controller::new(Arc::clone(&runtime), spec(approve())).cache_capacity(4);
    let runs = 20;
    for n in 0..runs {
        let (run_id, stream) = run_stream(n);
        seed(&runtime, &stream, "ship it?").await;
        let outcome = controller.run(&run_id, &stream).await.unwrap();
        assert_eq!(outcome.status(), "blocked");
        assert!(controller.cached_runs() <= 4);
    }
    assert_eq!(controller.cached_runs(), 4);

    // Run 0 was evicted long ago, the last run is still cached: both resume the same way.
    let mut traces = Vec::new();
    for n in [0, runs - 1] {
        let (run_id, stream) = run_stream(n);
        let requested = one(&runtime, &stream, "human.requested").await;
        append(
            &runtime,
            &stream,
            json!({
                "type": "approval.received",
                "invocationId": str_of(&requested, "invocationId"),
                "approved": true,
            }),
        )
        .await;
        assert_eq!(
            controller.run(&run_id, &stream).await.unwrap(),
            RunOutcome::Completed
        );
        assert_eq!(
            one(&runtime, &stream, "task.completed").await["result"],
            "approved=true"
        );
        traces.push(types(&runtime, &stream).await);
    }
    assert_eq!(traces[0], traces[1]);
    assert_eq!(
        traces[0][5..],
        [
            "approval.received",
            "human.responded",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    assert_eq!(controller.cached_runs(), 3, "the ended runs are dropped");
}

// ---------------------------------------------------------------------------------------------
// The CLI

/// Runs the stock `receipt` binary in `cwd` with a scrubbed environment and `stdin` as input.
fn receipt(cwd: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_receipt"))
        .current_dir(cwd)
        .env_remove("RECEIPT_DB")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run receipt");
    if let Some(input) = stdin {
        // The binary may stop reading at its limit; what it did not read does not matter.
        let _ = child.stdin.take().unwrap().write_all(input);
    }
    child.wait_with_output().expect("wait for receipt")
}

/// Status 1, nothing on stdout, one `error:` line; returns the message.
fn error_of(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    stderr
        .strip_prefix("error: ")
        .and_then(|m| m.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("not one error line: {stderr:?}"))
        .to_owned()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[cfg(unix)]
#[test]
fn new_never_follows_a_symlink_at_the_agent_path() {
    use std::os::unix::fs::symlink;
    let project = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let agents = project.path().join("src/agents");
    std::fs::create_dir_all(&agents).unwrap();
    let agents_abs = std::fs::canonicalize(&agents).unwrap();

    // A link to an existing file elsewhere: refused, naming the link; the file is untouched.
    let precious = outside.path().join("precious.rs");
    std::fs::write(&precious, "// precious\n").unwrap();
    let link = agents.join("demo-agent.rs");
    symlink(&precious, &link).unwrap();
    let out = receipt(project.path(), &["new", "demo-agent"], None);
    assert_eq!(
        error_of(&out),
        format!(
            "Agent file already exists: {}",
            agents_abs.join("demo-agent.rs").display()
        )
    );
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "// precious\n");
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());

    // A dangling link: refused, and nothing is created where it points.
    let missing = outside.path().join("missing.rs");
    symlink(&missing, agents.join("other-agent.rs")).unwrap();
    let dir = project.path().display().to_string();
    let out = receipt(outside.path(), &["new", "other-agent", "--dir", &dir], None);
    assert_eq!(
        error_of(&out),
        format!(
            "Agent file already exists: {}",
            agents_abs.join("other-agent.rs").display()
        )
    );
    assert!(!missing.exists() && missing.symlink_metadata().is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
}

/// A JSON object nested `levels` deep.
fn nested(levels: usize) -> String {
    "{\"a\":".repeat(levels - 1) + "{}" + &"}".repeat(levels - 1)
}

#[test]
fn append_refuses_bodies_too_deep_to_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let append = |stream: &str, body: &str| {
        receipt(
            cwd,
            &["--db", "r.db", "append", stream, "t", "-"],
            Some(body.as_bytes()),
        )
    };
    // The deepest body accepted is stored and read back whole.
    let deepest = nested(126);
    json_of(&append("deep/ok", &deepest));
    let mut expected: Value = serde_json::from_str(&deepest).unwrap();
    expected["type"] = json!("t");
    let stored = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let store = receipt::SqliteStore::open_existing(cwd.join("r.db")).unwrap();
            receipt::ReceiptStore::read(&store, "deep/ok")
                .await
                .unwrap()
        });
    assert_eq!(stored[0].body(), &expected);
    assert!(receipt::verify(&stored).is_ok());

    // One level more: refused before anything is written.
    assert_eq!(
        error_of(&append("deep/no", &nested(127))),
        "receipt body nests too deeply: 126 levels of arrays and objects at most (the stored \
         receipt nests at most 127)"
    );
    // Deeper still: the parser's own limit.
    assert!(
        error_of(&append("deep/no", &nested(10_000)))
            .starts_with("invalid JSON body: recursion limit exceeded")
    );
    let streams = json_of(&receipt(cwd, &["--db", "r.db", "streams", "--json"], None));
    assert_eq!(streams.as_array().unwrap().len(), 1, "{streams}");
}

#[test]
fn append_refuses_a_body_over_ten_mebibytes_and_absurd_fork_points_are_out_of_range() {
    const LIMIT: usize = 10 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let padded = |len: usize| {
        let mut body = vec![b' '; len - 2];
        body.extend_from_slice(b"{}");
        body
    };
    let args = ["--db", "r.db", "append", "s", "t", "-"];
    assert_eq!(
        error_of(&receipt(cwd, &args, Some(&padded(LIMIT + 1)))),
        format!("the JSON body is larger than {LIMIT} bytes")
    );
    assert!(!cwd.join("r.db").exists(), "nothing was written");
    let at_limit = json_of(&receipt(cwd, &args, Some(&padded(LIMIT))));
    assert_eq!(at_limit["body"], json!({"type": "t"}));

    for at in ["1e300", "18446744073709551616"] {
        assert_eq!(
            error_of(&receipt(
                cwd,
                &["--db", "r.db", "fork", "s", "--at", at],
                None
            )),
            "Cannot fork s at 18446744073709551615; valid range is 0..1"
        );
    }
}
