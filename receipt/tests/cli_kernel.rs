//! The command line through a rebuno kernel: `receipt worker` serves a binary's remote actions
//! of one group behind the kernel's signed webhook (registering itself), and `receipt run
//! --kernel-url` dispatches them there; at `trace` their log lines hold neither the worker's
//! secret nor the API key. Each is a process of its own (this test binary running
//! `receipt::cli::main_with_args` with the `pay-agent` registered), beside a kernel process.

mod agent_support;
mod kernel_support;

use agent_support::*;
use kernel_support::processes::{
    Child, Files, child_command, child_main, exit_with, printed, role,
};
use kernel_support::*;
use std::process::Stdio;

/// The command line of a `cli` child, as JSON.
const ARGS_ENV: &str = "RECEIPT_CLI_ARGS";

#[test]
#[ignore = "child process of the tests of this file (kernel, or the receipt CLI), run by them"]
fn child_process_role() {
    if role() != "cli" {
        return child_main();
    }
    let args: Vec<String> = serde_json::from_str(&std::env::var(ARGS_ENV).unwrap()).unwrap();
    let db = args.iter().position(|a| a == "--db").map(|i| &args[i + 1]);
    let dir = std::path::Path::new(db.unwrap()).parent().unwrap();
    let code = receipt::cli::main_with_args(registry("1.0.0", Payments::in_dir(dir)), args);
    exit_with(code)
}

/// `receipt <args>` with the `pay-agent` registered, as a child process.
fn receipt(args: &[&str]) -> std::process::Command {
    let mut command = child_command("cli");
    let mut all = vec!["receipt"];
    all.extend(args);
    command.env(ARGS_ENV, serde_json::to_string(&all).unwrap());
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_command_serves_what_run_dispatches_through_the_kernel() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let db = files.receipt_db();
    let worker = Child::start_until(
        "cli",
        &[(
            ARGS_ENV,
            &serde_json::to_string(&[
                "receipt",
                "--db",
                &db,
                "worker",
                "--kernel-url",
                &url,
                "--secret",
                SECRET,
                "--group",
                GROUP,
                "--listen",
                "127.0.0.1:0",
                "--register",
                "--lease",
                "2",
            ])
            .unwrap(),
        )],
        |line| {
            let (_, rest) = line.split_once("\"webhookUrl\": \"")?;
            Some(rest.split('"').next()?.to_owned())
        },
    );
    assert!(worker.ready.ends_with("/webhook"), "{}", worker.ready);
    let payments = files.payments();
    payments.release();
    let run = tokio::task::spawn_blocking({
        let (db, url) = (db.clone(), url.clone());
        move || {
            receipt(&[
                "--db",
                &db,
                "run",
                "pay-agent",
                "--problem",
                "charge it",
                "--run-id",
                RUN_ID,
                "--run-stream",
                STREAM,
                "--kernel-url",
                &url,
            ])
            .stdout(Stdio::piped())
            .output()
            .unwrap()
        }
    })
    .await
    .unwrap();
    let report = printed(&run.stdout);
    assert_eq!(report["status"], "completed", "{report}");
    assert!(run.status.success());
    // The kernel delivered to the webhook the worker registered, and the run committed once.
    let client = rebuno::Client::new(&url, None).unwrap();
    assert_committed_once(&files.receipts(), &payments, &client).await;
    drop(worker);
    drop(kernel);
}

#[test]
fn a_worker_command_refuses_what_it_cannot_serve() {
    let files = Files::new();
    let db = files.receipt_db();
    let err = |args: &[&str]| {
        let out = receipt(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_default()
            .to_owned()
    };
    let base = ["--db", db.as_str(), "worker"];
    let with = |more: &[&'static str]| {
        let mut all: Vec<&str> = base.to_vec();
        all.extend(more);
        all
    };
    assert_eq!(
        err(&with(&[])),
        "error: --kernel-url is required (or $REBUNO_URL)"
    );
    assert_eq!(
        err(&with(&["--kernel-url", "http://127.0.0.1:9"])),
        "error: --secret is required (or $REBUNO_AGENT_SECRET)"
    );
    assert_eq!(
        err(&with(&[
            "--kernel-url",
            "http://127.0.0.1:9",
            "--secret",
            "s",
            "--group",
            "a b"
        ])),
        "error: target group \"a b\" cannot name a kernel worker: use 1 to 100 ASCII letters, digits, '.', '_' or '-'"
    );
    assert_eq!(
        err(&with(&[
            "--kernel-url",
            "http://127.0.0.1:9",
            "--secret",
            "s",
            "--lease",
            "0"
        ])),
        "error: --lease must be a number of seconds greater than 0 and at most 86400, got 0"
    );
    assert!(
        !std::path::Path::new(&db).exists(),
        "refused before the database was opened"
    );
}

/// `receipt <args>` as a child serving process; ready once it printed its webhook URL.
fn serving(args: &[&str]) -> Child {
    let mut all = vec!["receipt"];
    all.extend(args);
    Child::start_until(
        "cli",
        &[(ARGS_ENV, &serde_json::to_string(&all).unwrap())],
        |line| {
            let (_, rest) = line.split_once("\"webhookUrl\": \"")?;
            Some(rest.split('"').next()?.to_owned())
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_run_is_decided_by_the_gate_the_worker_command_serves() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let db = files.receipt_db();
    let common = [
        "--kernel-url",
        &url,
        "--secret",
        SECRET,
        "--listen",
        "127.0.0.1:0",
    ];
    let mut gate_args = vec!["--db", &db, "worker", "--gate", "pay-agent", "--register"];
    gate_args.extend(common);
    let gate = serving(&gate_args);
    let mut worker_args = vec!["--db", &db, "worker", "--group", GROUP, "--register"];
    worker_args.extend(common);
    let worker = serving(&worker_args);
    let payments = files.payments();
    payments.release();
    let policy = files.dir.path().join("policy.yaml");
    let run = |run_id: &'static str, decision: &'static str| {
        std::fs::write(
            &policy,
            format!(
                "default_action: allow\nrules:\n  - id: charges\n    priority: 1\n    \
                 when: {{target: charge}}\n    then: {{decision: {decision}, reason: \"by the book\"}}\n"
            ),
        )
        .unwrap();
        let (db, url, policy) = (db.clone(), url.clone(), policy.display().to_string());
        tokio::task::spawn_blocking(move || {
            receipt(&[
                "--db",
                &db,
                "run",
                "pay-agent",
                "--problem",
                "charge it",
                "--run-id",
                run_id,
                "--kernel-url",
                &url,
                "--policy",
                &policy,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
        })
    };
    // Denied: the action fails unclaimed, with the rule, and the run fails.
    let denied = run("run_denied", "deny").await.unwrap();
    assert_eq!(denied.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains("action 'charge' denied by policy rule 'charges': by the book"),
        "{stderr}"
    );
    let chain = files
        .receipts()
        .read("agents/pay-agent/runs/run_denied")
        .await
        .unwrap();
    let failed = chain
        .iter()
        .find(|r| r.event_type() == "action.failed")
        .unwrap();
    assert_eq!(failed.body()["rule"], "charges");
    assert!(!chain.iter().any(|r| r.event_type() == "action.started"));
    // Allowed: the same command completes through the gate and the group's worker.
    let allowed = run("run_allowed", "allow").await.unwrap();
    let report = printed(&allowed.stdout);
    assert_eq!(report["status"], "completed", "{report}");
    drop((gate, worker, kernel));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_of_the_worker_and_run_commands_holds_the_secret_or_the_api_key() {
    const API_KEY: &str = "receipt-cli-api-key-3f9a61";
    const WORKER_SECRET: &str = "receipt-cli-worker-secret-b82c05";
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let db = files.receipt_db();
    let worker_log = files.dir.path().join("worker.log");
    let args = [
        "receipt",
        "--db",
        &db,
        "worker",
        "--kernel-url",
        &url,
        "--kernel-api-key",
        API_KEY,
        "--secret",
        WORKER_SECRET,
        "--group",
        GROUP,
        "--listen",
        "127.0.0.1:0",
        "--register",
    ];
    let worker = Child::start_with(
        "cli",
        &[
            (ARGS_ENV, &serde_json::to_string(&args).unwrap()),
            ("RECEIPT_LOG_LEVEL", "trace"),
        ],
        std::fs::File::create(&worker_log).unwrap().into(),
        |line| {
            let (_, rest) = line.split_once("\"webhookUrl\": \"")?;
            Some(rest.split('"').next()?.to_owned())
        },
    );
    let payments = files.payments();
    payments.release();
    let run = tokio::task::spawn_blocking({
        let (db, url) = (db.clone(), url.clone());
        move || {
            receipt(&[
                "--db",
                &db,
                "--log-format",
                "json",
                "run",
                "pay-agent",
                "--problem",
                "charge it",
                "--run-id",
                RUN_ID,
                "--run-stream",
                STREAM,
                "--kernel-url",
                &url,
                "--kernel-api-key",
                API_KEY,
            ])
            .env("RECEIPT_LOG_LEVEL", "trace")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
        }
    })
    .await
    .unwrap();
    // The report is on stdout as ever; the log lines are on stderr.
    let report = printed(&run.stdout);
    assert_eq!(report["status"], "completed", "{report}");
    let run_log = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run_log.contains("run completed"), "{run_log}");
    // The worker served the call (its log is complete once the run is).
    let client = rebuno::Client::new(&url, None).unwrap();
    assert_committed_once(&files.receipts(), &payments, &client).await;
    let worker_log = std::fs::read_to_string(&worker_log).unwrap();
    assert!(worker_log.contains("remote action served"), "{worker_log}");
    assert!(
        worker_log.contains("receipt worker serving"),
        "{worker_log}"
    );
    for log in [&run_log, &worker_log] {
        for secret in [API_KEY, WORKER_SECRET, "v1=", "sha256="] {
            assert!(!log.contains(secret), "a log line holds {secret:?}:\n{log}");
        }
    }
    drop((worker, kernel));
}
