//! `receipt run` starting and resuming runs, each command a process of its own (this test
//! binary running `receipt::cli::main_with_args` with two agents registered, as a project's
//! binary does) on a temporary SQLite database: a resumed run needs no `--problem` and refuses
//! a different one, a new run needs one, and an agent that declares no seed receipt type is
//! refused naming the types it declares.

mod agent_support;
mod cli_support;
mod kernel_support;

use agent_support::*;
use cli_support::{Cli, expect_err};
use kernel_support::processes::{child_command, child_main, exit_with, printed, role};
use receipt::Receipt;
use receipt::agent::{Action, AgentSpec, AgentTypes, AgentView, ReceiptSet, Registry};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

/// The command line of a `cli` child, as JSON.
const ARGS_ENV: &str = "RECEIPT_RUN_ARGS";

/// The receipts of `ping-agent`, which declares neither `task.requested` nor
/// `prompt.received`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Ping {
    #[serde(rename = "ping.received")]
    Received {},
    #[serde(rename = "pong.sent")]
    Sent {},
}

impl ReceiptSet for Ping {
    const TYPES: &'static [&'static str] = &["ping.received", "pong.sent"];
    fn type_name(&self) -> &'static str {
        match self {
            Ping::Received {} => "ping.received",
            Ping::Sent {} => "pong.sent",
        }
    }
}

/// Whether a ping came, and the pong went.
#[derive(Debug, Clone, Default)]
struct PingView {
    pinged: bool,
    ponged: bool,
}

impl AgentView for PingView {
    fn apply(&mut self, r: &Receipt) {
        match r.event_type() {
            "ping.received" => self.pinged = true,
            "pong.sent" => self.ponged = true,
            _ => {}
        }
    }
}

struct PingAgent;

impl AgentTypes for PingAgent {
    type Receipts = Ping;
    type View = PingView;
}

/// `ping-agent`: answers a ping with a pong.
fn ping_spec() -> Arc<AgentSpec<PingAgent>> {
    let pong = Action::<PingAgent>::action("pong")
        .when(|v: &PingView| v.pinged && !v.ponged)
        .run(|_agent, ctx| async move { ctx.emit(Ping::Sent {}).await });
    Arc::new(
        AgentSpec::builder("ping-agent", "1.0.0", PingAgent)
            .action(pong)
            .goal(|v| v.ponged)
            .build()
            .unwrap(),
    )
}

#[test]
#[ignore = "child process of the tests of this file (the receipt CLI), run by them"]
fn child_process_role() {
    if role() != "cli" {
        return child_main();
    }
    let args: Vec<String> = serde_json::from_str(&std::env::var(ARGS_ENV).unwrap()).unwrap();
    let registry = Arc::new(Registry::new());
    registry.register(basic_spec()).unwrap();
    registry.register(ping_spec()).unwrap();
    let code = receipt::cli::main_with_args(registry, args);
    exit_with(code)
}

/// Runs `receipt --db <db> <args>` with `test-agent` and `ping-agent` registered.
fn receipt(db: &Path, args: &[&str]) -> Output {
    let mut all = vec!["receipt", "--db", db.to_str().unwrap()];
    all.extend(args);
    child_command("cli")
        .env(ARGS_ENV, serde_json::to_string(&all).unwrap())
        .env_remove("RUST_LOG")
        .env_remove("RECEIPT_LOG_LEVEL")
        .env_remove("RECEIPT_LOG_FORMAT")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the receipt CLI")
}

/// The status of a `run` that reported, and its report.
fn report(out: &Output) -> (i32, serde_json::Value) {
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 2,
        "exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code, printed(&out.stdout))
}

/// The message of the one `error:` line a refused command wrote; it exited 1.
fn error(out: Output) -> String {
    expect_err(out, "receipt run")
}

/// The event types of `stream`, read through the library.
fn stream_types(db: &Path, stream: &str) -> Vec<String> {
    let store = receipt::SqliteStore::open(db).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(receipt::ReceiptStore::read(&store, stream))
        .unwrap()
        .iter()
        .map(|r| r.event_type().to_owned())
        .collect()
}

#[test]
fn a_run_resumes_without_its_problem_and_refuses_another() {
    let Cli { dir: _dir, db } = Cli::new();
    let (code, first) = report(&receipt(
        &db,
        &["run", "test-agent", "--problem", "hi", "--run-id", "r1"],
    ));
    assert_eq!(
        (code, &first["status"]),
        (0, &serde_json::json!("completed"))
    );
    let stream = "agents/test-agent/runs/r1";
    let before = stream_types(&db, stream);

    // Resumed by its id alone: its problem is recorded.
    let (code, again) = report(&receipt(&db, &["run", "test-agent", "--run-id", "r1"]));
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["status"], "completed");
    assert_eq!(again["runId"], "r1");
    // The same problem again is the same run.
    let (code, _) = report(&receipt(
        &db,
        &["run", "test-agent", "--problem", "hi", "--run-id", "r1"],
    ));
    assert_eq!(code, 0);
    assert_eq!(
        stream_types(&db, stream)
            .iter()
            .filter(|t| *t == "task.requested")
            .count(),
        1
    );

    // Another problem is refused, naming both; the run is unchanged.
    let message = error(receipt(
        &db,
        &["run", "test-agent", "--problem", "bye", "--run-id", "r1"],
    ));
    assert!(
        message.contains("run 'r1' was started with another problem (\"hi\")"),
        "{message}"
    );
    assert!(message.contains("--problem \"bye\" differs"), "{message}");
    assert!(message.contains("omit --problem to resume"), "{message}");
    assert_eq!(stream_types(&db, stream), before);
}

#[test]
fn a_new_run_needs_a_problem_and_says_how_to_resume_instead() {
    let Cli { dir: _dir, db } = Cli::new();
    let message = error(receipt(&db, &["run", "test-agent"]));
    assert!(
        message.starts_with("--problem is required to start a run"),
        "{message}"
    );
    assert!(message.contains("pass its --run-id"), "{message}");
    assert!(!db.exists(), "a refused run opens no database");

    // A run id that names no run: there is nothing to resume.
    receipt(
        &db,
        &["run", "test-agent", "--problem", "hi", "--run-id", "r1"],
    );
    let message = error(receipt(&db, &["run", "test-agent", "--run-id", "r2"]));
    assert_eq!(
        message,
        "run 'r2' does not exist (agents/test-agent/runs/r2 holds no receipt): --problem is \
         required to start it (recorded as its task.requested receipt)"
    );
    assert!(stream_types(&db, "agents/test-agent/runs/r2").is_empty());

    assert_eq!(
        error(receipt(&db, &["run", "test-agent", "--problem", ""])),
        "--problem must not be empty"
    );
}

#[test]
fn an_agent_without_a_seed_type_is_refused_naming_what_it_declares() {
    let Cli { dir: _dir, db } = Cli::new();
    for args in [
        &["run", "ping-agent", "--problem", "hi"][..],
        &["run", "ping-agent", "--problem", "hi", "--run-id", "p1"],
        &["run", "ping-agent"],
    ] {
        let message = error(receipt(&db, args));
        assert!(
            message.starts_with("agent 'ping-agent' declares no seed receipt type"),
            "{args:?}: {message}"
        );
        assert!(
            message.contains("task.requested or prompt.received"),
            "{message}"
        );
        assert!(
            message.contains("it declares ping.received, pong.sent"),
            "{message}"
        );
        assert!(
            message.contains("receipt append agents/ping-agent/runs/<run-id>"),
            "{message}"
        );
    }
    assert!(!db.exists(), "a refused run writes nothing");

    // Seeded by hand as the message says, the run resumes by its id.
    let out = receipt(
        &db,
        &["append", "agents/ping-agent/runs/p1", "ping.received", "{}"],
    );
    assert!(out.status.success(), "{out:?}");
    let (code, done) = report(&receipt(&db, &["run", "ping-agent", "--run-id", "p1"]));
    assert_eq!(code, 0, "{done}");
    assert_eq!(done["status"], "completed");
    assert!(stream_types(&db, "agents/ping-agent/runs/p1").contains(&"pong.sent".to_owned()));
}
