//! `receipt run` end to end, through the `receipt-agents` example binary (the `receipt`
//! CLI with the five example agents registered): seeding, defaults, the JSON report, exit 2
//! when a run does not complete, a human action answered with `receipt append`, and errors
//! (a remote action without `--kernel-url` among them).

mod cargo_build;

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The `receipt-agents` example (built once).
fn binary() -> PathBuf {
    cargo_build::build("examples", "example", "receipt-agents")
}

/// One test's scratch directory and database.
struct Cli {
    _dir: tempfile::TempDir,
    db: PathBuf,
}

impl Cli {
    fn new() -> Cli {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("receipts.db");
        Cli { _dir: dir, db }
    }

    /// Runs `receipt-agents --db <db> <args>` with `env` set.
    fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut c = Command::new(binary());
        c.env_remove("RECEIPT_DB")
            .env_remove("RECEIPT_AGENTS_LLM_URL")
            .stdin(Stdio::null())
            .arg("--db")
            .arg(&self.db)
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run receipt-agents")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_env(&[], args)
    }

    /// Runs a command that must succeed quietly; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?}: {:?} {}",
            out.status,
            text(&out.stderr)
        );
        assert_eq!(text(&out.stderr), "", "{args:?}");
        text(&out.stdout)
    }

    /// The full receipts of a run (or stream), from `replay`.
    fn receipts(&self, target: &str) -> Vec<Value> {
        let report: Value = serde_json::from_str(&self.ok(&["replay", target])).unwrap();
        report["receipts"].as_array().unwrap().clone()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A `run` report: the exit code must be `code`, stderr empty, stdout pretty JSON.
fn report(out: &Output, code: i32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stderr), "");
    let stdout = text(&out.stdout);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    // Pretty: one top-level key per line, two-space indent.
    assert!(
        stdout.starts_with("{\n  \"ok\": ") && stdout.ends_with("\n}\n"),
        "{stdout}"
    );
    assert_eq!(top_keys(out).len(), value.as_object().unwrap().len());
    value
}

/// Status 1, nothing on stdout, one `error:` line; returns the message.
fn error(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
        .strip_prefix("error: ")
        .unwrap_or_else(|| panic!("no error: line: {stderr}"))
        .trim_end()
        .to_owned()
}

/// The top-level keys of a pretty JSON report, in the printed order.
fn top_keys(out: &Output) -> Vec<String> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("  \""))
        .filter_map(|l| l.split_once("\":").map(|(k, _)| k.to_owned()))
        .collect()
}

fn types(receipts: &[Value]) -> Vec<&str> {
    receipts
        .iter()
        .map(|r| r["body"]["type"].as_str().unwrap_or("unknown"))
        .collect()
}

/// `run_<base36>_<4 base36>`.
fn is_default_run_id(id: &str) -> bool {
    let b36 = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    };
    match id.strip_prefix("run_").and_then(|r| r.split_once('_')) {
        Some((now, suffix)) => b36(now) && b36(suffix) && suffix.len() == 4,
        None => false,
    }
}

#[test]
fn run_completes_with_the_defaults_and_seeds_once() {
    let cli = Cli::new();
    let out = cli.run(&["run", "hello-agent", "--problem", "hi"]);
    let r = report(&out, 0);
    assert_eq!(
        top_keys(&out),
        ["ok", "status", "mode", "runId", "stream", "runStream"],
        "{r}"
    );
    assert_eq!(r["ok"], true);
    assert_eq!(r["status"], "completed");
    assert_eq!(r["mode"], "inline");
    let run_id = r["runId"].as_str().unwrap();
    assert!(is_default_run_id(run_id), "{run_id}");
    assert_eq!(r["stream"], "agents/hello-agent");
    assert_eq!(r["runStream"], format!("agents/hello-agent/runs/{run_id}"));

    // The seed: task.requested {prompt}, event id seed:<runId>, then the loop's receipts.
    let receipts = cli.receipts(run_id);
    assert_eq!(
        types(&receipts),
        [
            "task.requested",
            "run.started",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    assert_eq!(
        receipts[0]["body"],
        json!({"type": "task.requested", "prompt": "hi"})
    );
    assert_eq!(receipts[0]["hints"]["eventId"], format!("seed:{run_id}"));
    assert_eq!(receipts[4]["body"]["result"], "Hello! You asked: hi");

    // Two runs get two run ids.
    let again = report(&cli.run(&["run", "hello-agent", "--prompt", "hi"]), 0);
    assert_ne!(again["runId"], r["runId"]);
}

#[test]
fn run_takes_the_run_id_and_the_streams_from_flags() {
    let cli = Cli::new();
    let r = report(
        &cli.run(&[
            "run",
            "merge",
            "--problem",
            "plan the launch",
            "--run-id",
            "m1",
            "--stream",
            "team/merge",
        ]),
        0,
    );
    assert_eq!(
        (&r["runId"], &r["stream"], &r["runStream"]),
        (
            &json!("m1"),
            &json!("team/merge"),
            &json!("team/merge/runs/m1")
        )
    );
    let receipts = cli.receipts("team/merge/runs/m1");
    assert!(types(&receipts).contains(&"merge.applied"));
    let finalized = receipts
        .iter()
        .find(|r| r["body"]["type"] == "draft.finalized")
        .unwrap();
    assert_eq!(finalized["body"]["candidateId"], "outline");

    let r = report(
        &cli.run(&[
            "run",
            "hello-agent",
            "--problem",
            "x",
            "--run-id",
            "h1",
            "--run-stream",
            "elsewhere/h1",
        ]),
        0,
    );
    assert_eq!(r["stream"], "agents/hello-agent");
    assert_eq!(r["runStream"], "elsewhere/h1");
    assert_eq!(cli.receipts("elsewhere/h1").len(), 7);

    // One selection is all merge needs: --max-iterations 1 still completes.
    let r = report(
        &cli.run(&[
            "run",
            "merge",
            "--problem",
            "p",
            "--run-id",
            "m2",
            "--max-iterations",
            "1",
        ]),
        0,
    );
    assert_eq!(r["status"], "completed");
}

#[test]
fn run_refuses_a_missing_problem_and_an_unknown_agent() {
    let cli = Cli::new();
    assert_eq!(
        error(&cli.run(&["run", "hello-agent"])),
        "--problem is required to start a run; to resume one, pass its --run-id (`receipt \
         streams` lists the runs: agents/<agent-id>/runs/<run-id>)"
    );
    assert_eq!(
        error(&cli.run(&["run", "hello-agent", "--problem", ""])),
        "--problem must not be empty"
    );
    assert_eq!(
        error(&cli.run(&["run", "nope", "--problem", "x"])),
        "unknown agent 'nope' (registered: assistant-tool, hello-agent, human-loop, merge, remote-notify)"
    );
    assert!(!cli.db.exists(), "a refused run writes nothing");
}

#[test]
fn a_remote_action_without_a_kernel_is_refused_before_the_run_is_seeded() {
    let cli = Cli::new();
    let args = ["run", "remote-notify", "--problem", "x", "--run-id", "r1"];
    assert_eq!(
        error(&cli.run(&args)),
        "agent 'remote-notify' has a remote action ('notify'), which runs on a worker behind a rebuno kernel: pass --kernel-url <URL> (and serve the action's target group with this binary's `worker` command)"
    );
    // Nothing of the run was written: not even its seed.
    let streams: Value = serde_json::from_str(&cli.ok(&["streams", "--json"])).unwrap();
    assert_eq!(streams, json!([]), "{streams}");
}

#[test]
fn a_human_action_blocks_the_run_until_append_answers_it() {
    let cli = Cli::new();
    let args = [
        "run",
        "human-loop",
        "--problem",
        "ship it",
        "--run-id",
        "r1",
    ];
    let reason = "waiting for a correlated response to human action 'approve'";

    let out = cli.run(&args);
    let r = report(&out, 2);
    assert_eq!(
        r,
        json!({
            "ok": false,
            "status": "blocked",
            "mode": "inline",
            "runId": "r1",
            "stream": "agents/human-loop",
            "runStream": "agents/human-loop/runs/r1",
            "reason": reason,
        })
    );
    assert_eq!(
        top_keys(&out),
        [
            "ok",
            "status",
            "mode",
            "runId",
            "stream",
            "runStream",
            "reason"
        ]
    );
    assert_eq!(
        types(&cli.receipts("r1")),
        [
            "task.requested",
            "run.started",
            "action.selected",
            "human.requested",
            "run.blocked"
        ]
    );

    // A person answers, as `receipt append` does.
    cli.ok(&[
        "append",
        "agents/human-loop/runs/r1",
        "approval.received",
        r#"{"approved": true, "by": "ops"}"#,
    ]);
    let r = report(&cli.run(&args), 0);
    assert_eq!(r["status"], "completed");
    assert_eq!(r["ok"], true);
    assert!(r.get("reason").is_none());

    let receipts = cli.receipts("r1");
    assert_eq!(
        types(&receipts),
        [
            "task.requested",
            "run.started",
            "action.selected",
            "human.requested",
            "run.blocked",
            "approval.received",
            "human.responded",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    // Seeding is idempotent: the second run appended no second seed.
    assert_eq!(
        types(&receipts)
            .iter()
            .filter(|t| **t == "task.requested")
            .count(),
        1
    );
    assert_eq!(receipts[9]["body"]["result"], "approved by ops: ship it");

    // A completed run stays completed and appends nothing.
    report(&cli.run(&args), 0);
    assert_eq!(cli.receipts("r1").len(), receipts.len());

    // trace resolves the run id and shows the run.
    let trace = cli.ok(&["trace", "r1"]);
    let lines: Vec<&str> = trace.lines().collect();
    assert_eq!(lines.len(), receipts.len());
    assert!(lines[0].starts_with("   0  ") && lines[0].ends_with("  task.requested"));
    assert!(lines[4].ends_with("  run.blocked"));
    assert!(lines[11].starts_with("  11  ") && lines[11].ends_with("  run.completed"));
}

#[test]
fn assistant_tool_calls_the_loopback_model() {
    let cli = Cli::new();
    let r = report(
        &cli.run(&[
            "run",
            "assistant-tool",
            "--problem",
            "a haiku",
            "--run-id",
            "a1",
        ]),
        0,
    );
    assert_eq!(r["status"], "completed");
    let receipts = cli.receipts("a1");
    let reply = receipts
        .iter()
        .find(|r| r["body"]["type"] == "task.completed")
        .unwrap();
    assert_eq!(
        reply["body"],
        json!({"type": "task.completed", "result": "Drafted reply: a haiku", "model": "gpt-4o-mini"})
    );
}

#[test]
fn a_failing_action_fails_the_run_with_exit_1() {
    let cli = Cli::new();
    // Nothing listens on the discard port: the model call fails, so the action does.
    let unreachable = [("RECEIPT_AGENTS_LLM_URL", "http://127.0.0.1:9/v1")];
    let args = ["run", "assistant-tool", "--problem", "x", "--run-id", "f1"];
    let out = cli.run_env(&unreachable, &args);
    let message = error(&out);
    assert!(
        message.starts_with("model call to http://127.0.0.1:9/v1/chat/completions failed: "),
        "{message}"
    );
    let receipts = cli.receipts("f1");
    assert_eq!(
        types(&receipts)[receipts.len() - 2..],
        ["action.failed", "run.failed"]
    );
    assert_eq!(receipts.last().unwrap()["body"]["error"], message.as_str());

    // The failed run is terminal: running it again reports it (not completed: exit 2) and
    // appends nothing.
    let r = report(&cli.run(&args), 2);
    assert_eq!(r["ok"], false);
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"], message.as_str());
    assert_eq!(cli.receipts("f1").len(), receipts.len());
}
