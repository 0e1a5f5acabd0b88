//! Observability of receipt: what the controller logs about a failing action (the run id, the
//! action id and the reason, in a `receipt.action_pass` span per claimed invocation), that no
//! log line of a remote action through a kernel (worker secret, bearer token) holds a
//! credential, and the `receipt` binary's JSON log lines on stderr beside its JSON output.
//! Every log line of this test binary goes to one buffer, at TRACE, for every target (rebuno's
//! `test_support::logs`).

mod agent_support;
mod cli_support;
mod kernel_support;

use test_support::logs;

use agent_support::*;
use kernel_support::*;
use logs::{closed, log_line, logs};
use receipt::Error;
use receipt::agent::*;
use receipt::kernel::KernelWorker;
use receipt::{Runtime, SqliteStore};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "receipt-obs-bearer-5c1e9a";
const WORKER_SECRET: &str = "receipt-obs-worker-secret-7d40b2";

#[tokio::test]
async fn a_failing_action_is_a_warning_with_its_run_action_and_reason() {
    logs();
    const RUN: &str = "obs_failing_run";
    let stream = format!("agents/test-agent/runs/{RUN}");
    let runtime = memory_runtime();
    seed(&runtime, &stream, "boom").await;
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::tool("explode")
                .run(|_a, _ctx| async move { Err(Error::msg("the tool exploded")) }),
        )
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    let err = controller.run(RUN, &stream).await.unwrap_err();
    assert_eq!(err.to_string(), "the tool exploded");

    let run_id = format!("run_id={RUN} ");
    let line = log_line("for the failed action", |l| {
        l.contains("action failed") && l.contains(&run_id)
    })
    .await;
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("action_id=explode"), "{line}");
    assert!(line.contains("error=the tool exploded"), "{line}");
    assert!(line.contains("invocation_id="), "{line}");
    // The run's end, at warn too.
    let line = log_line("for the failed run", |l| {
        l.contains("run failed") && l.contains(&run_id)
    })
    .await;
    assert!(line.contains("WARN"), "{line}");

    // One span per action pass, with its ids and outcome, inside the run's span.
    let pass = closed("receipt.action_pass", |f| f.contains(&run_id)).await;
    for field in [
        "agent_id=test-agent",
        "action_id=explode",
        "attempt=1",
        "execution=\"local\"",
        "outcome=\"failed\"",
    ] {
        assert!(pass.contains(field), "{field} in {pass}");
    }
    let run = closed("receipt.run", |f| f.contains(&run_id)).await;
    assert!(run.contains("outcome=\"failed\""), "{run}");
}

#[tokio::test]
async fn a_committed_action_pass_and_a_completed_run_are_spans_with_their_outcome() {
    logs();
    const RUN: &str = "obs_completed_run";
    let stream = format!("agents/test-agent/runs/{RUN}");
    let runtime = memory_runtime();
    seed(&runtime, &stream, "hello").await;
    let outcome = Controller::new(Arc::clone(&runtime), basic_spec())
        .run(RUN, &stream)
        .await
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    let run_id = format!("run_id={RUN} ");
    let pass = closed("receipt.action_pass", |f| f.contains(&run_id)).await;
    assert!(pass.contains("action_id=complete"), "{pass}");
    assert!(pass.contains("outcome=\"committed\""), "{pass}");
    let run = closed("receipt.run", |f| f.contains(&run_id)).await;
    assert!(run.contains("outcome=\"completed\""), "{run}");
    log_line("for the completed run", |l| {
        l.contains("run completed") && l.contains(&run_id) && l.contains("INFO")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_of_a_remote_action_through_a_kernel_holds_a_credential() {
    logs();
    // A kernel that wants a bearer token, served over HTTP and delivering.
    let kernel = rebuno::Kernel::memory().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = rebuno::server::router(
        kernel.clone(),
        rebuno::server::ServerOptions::with_bearer_token(TOKEN),
    );
    tokio::spawn(async move {
        rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await
    });
    let _loops = kernel.start_http();
    let client = rebuno::Client::new(&base, Some(TOKEN.to_owned())).unwrap();

    // The group's worker behind the kernel's signed webhook, registered with its secret.
    let dir = tempfile::tempdir().unwrap();
    let receipts = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open(dir.path().join("receipts.db")).unwrap(),
    )));
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    )
    .group(GROUP)
    .lease(Duration::from_secs(2));
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
    worker
        .register(&client, &hook_url, WORKER_SECRET)
        .await
        .unwrap();
    let kernel_url = base.clone();
    tokio::spawn(async move {
        worker
            .serve(hook, &kernel_url, WORKER_SECRET, std::future::pending())
            .await
    });

    // A run whose remote action goes through the kernel, with the token.
    let files = Payments::in_dir(dir.path());
    files.release();
    seed(&receipts, STREAM, "charge it").await;
    let outcome = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        client.clone(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_committed_once(&receipts, &files, &client).await;

    // The scenario was logged on both sides (so the check below has something to look at)...
    let run_id = format!("run_id={RUN_ID} ");
    log_line("for the worker's call", |l| {
        l.contains("remote action served") && l.contains(&run_id)
    })
    .await;
    log_line("for the dispatch", |l| {
        l.contains("remote action dispatched through the kernel")
    })
    .await;
    closed("receipt.remote_action", |f| f.contains(&run_id)).await;
    // ... and no line holds the secret, the token or a signature.
    let logs = logs();
    for secret in [TOKEN, WORKER_SECRET, "v1=", "sha256="] {
        assert!(
            !logs.contains(secret),
            "a log line holds {secret:?}:\n{}",
            logs.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn the_binary_writes_json_log_lines_to_stderr_and_keeps_stdout_parseable() {
    let cli = cli_support::Cli::new();
    let run = |format: Option<&str>, env_format: Option<&str>| {
        let mut command = cli.bare();
        command
            .env_remove("RUST_LOG")
            .env_remove("RECEIPT_LOG_FORMAT")
            .env("RECEIPT_LOG_LEVEL", "trace")
            .arg("--db")
            .arg(&cli.db);
        if let Some(format) = format {
            command.args(["--log-format", format]);
        }
        if let Some(format) = env_format {
            command.env("RECEIPT_LOG_FORMAT", format);
        }
        command.args(["append", "orders/o-1", "order.placed", r#"{"sku":"tea"}"#]);
        command.output().unwrap()
    };
    for (flag, env) in [(Some("json"), None), (None, Some("json"))] {
        let out = run(flag, env);
        assert!(out.status.success(), "{out:?}");
        // Stdout is the receipt, as without logs.
        let receipt: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(receipt["body"]["type"], "order.placed");
        // Stderr: one JSON object per line (the store's commit at trace, at least).
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!stderr.is_empty(), "no log line at trace");
        for line in stderr.lines() {
            let event: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
            assert!(event["level"].is_string(), "{line}");
            assert!(event["fields"]["message"].is_string(), "{line}");
        }
        assert!(
            stderr.contains("receipt store commit"),
            "the store's commit is logged: {stderr}"
        );
    }
    // Pretty lines (the default) are not JSON, and the output is the same.
    let out = run(None, None);
    assert!(out.status.success());
    serde_json::from_slice::<Value>(&out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("TRACE"), "{stderr}");
    assert!(serde_json::from_str::<Value>(stderr.lines().next().unwrap()).is_err());
    // A format that is not one is refused as a one-line error, flag or variable.
    let message = cli_support::expect_err(run(Some("xml"), None), "--log-format xml");
    assert!(
        message.contains("is not a log format (pretty or json)"),
        "{message}"
    );
    let message = cli_support::expect_err(run(None, Some("xml")), "RECEIPT_LOG_FORMAT=xml");
    assert_eq!(
        message,
        "RECEIPT_LOG_FORMAT: \"xml\" is not a log format (pretty or json)"
    );
    // Without a level asked for, a command that succeeds writes nothing on stderr.
    let out = cli
        .bare()
        .env_remove("RUST_LOG")
        .env_remove("RECEIPT_LOG_LEVEL")
        .args(["--db"])
        .arg(&cli.db)
        .args(["--log-format", "json", "verify", "orders/o-1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn long_commands_on_a_large_stream_draw_no_progress_off_a_terminal() {
    // More receipts than the progress threshold (10,000) and than two read pages (4,096).
    const N: usize = 10_500;
    let cli = cli_support::Cli::new();
    let events: Vec<(i64, Value)> = (0..N)
        .map(|i| {
            (
                1_700_000_000_000 + i as i64,
                serde_json::json!({"type": "tick", "i": i}),
            )
        })
        .collect();
    cli_support::seed(&cli.db, "big", &events);
    let head = {
        let chain = cli_support::block_on(async {
            let store = SqliteStore::open(&cli.db).unwrap();
            receipt::ReceiptStore::read(&store, "big").await.unwrap()
        });
        assert_eq!(chain.len(), N);
        receipt::verify(&chain).unwrap().head.unwrap()
    };
    // Each command succeeds with nothing on stderr (`ok` checks it), whatever the default filter.
    let verified = cli.ok(&["verify", "big"]);
    assert_eq!(verified, format!("ok: {N} receipts, head {head}\n"));
    let trace = cli.json(&["trace", "big", "--json"]);
    let entries = trace["receipts"].as_array().unwrap();
    assert_eq!(entries.len(), N);
    assert!(entries.iter().enumerate().all(|(i, e)| e["index"] == i));
    let replay = cli.json(&["replay", "big"]);
    let receipts = replay["receipts"].as_array().unwrap();
    assert_eq!(receipts.len(), N);
    assert_eq!(receipts[N - 1]["hash"], head.as_str());
    assert_eq!(receipts[4096]["body"]["i"], 4096, "the pages join in order");
    // A stream damaged past the first page is reported at its index, as before.
    cli_support::sql(
        &cli.db,
        "UPDATE receipt_receipts SET hash = (CASE WHEN substr(hash, 1, 1) = '0' THEN '1' ELSE '0' END) \
         || substr(hash, 2) WHERE stream = 'big' AND stream_seq = 9000",
    );
    let message = cli.err(&["verify", "big"]);
    assert!(
        message.ends_with("hash mismatch at index 9000"),
        "{message}"
    );
}
