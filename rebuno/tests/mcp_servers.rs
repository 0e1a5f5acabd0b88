//! `rebuno::mcp` against MCP servers nobody here wrote: the reference servers
//! `@modelcontextprotocol/server-everything` and `@modelcontextprotocol/server-filesystem`,
//! installed from npm (`.ci/run` does it: `npm install --prefix target/mcp-servers …`) and
//! started as child processes (over stdio, and one over streamable HTTP). Found in
//! `$REBUNO_MCP_SERVERS/node_modules/.bin`, by default `target/mcp-servers` of the workspace;
//! the tests that need them are ignored otherwise, and fail saying what is missing when asked
//! for without them.
//!
//! - the tools are listed with their schemas, names, targets and hinted idempotency;
//! - a policy denying `mcp:fs/write_file` refuses the write without starting the server;
//! - an approval blocks a destructive call until granted, and the file is written only then;
//! - an agent process SIGKILLed during an `at_most_once` call and started again replays the
//!   recorded write without sending it again and ends the interrupted call `indeterminate`,
//!   with neither server started by the second process (a retryable error replays as one);
//! - a server that dies is started again on the next call; a call over its timeout is a
//!   retryable tool error and the server stays usable;
//! - over streamable HTTP (server-everything's `streamableHttp` mode) the tools are listed and
//!   called, and a server restarted on the same port is connected to afresh.
//!
//! Without the servers: an unreachable server is a retryable tool error, recorded so.

use test_support::rebuno as support;

use rebuno::agent::{Effect, EffectOutcome, handler_fn};
use rebuno::mcp::{McpServer, text};
use rebuno::protocol::{ExecutionStatus, Idempotency, StepKind, StepStatus};
use rebuno::{Agent, Error, Runtime};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// The reference server `bin` (`mcp-server-everything`, `mcp-server-filesystem`).
fn server_bin(bin: &str) -> String {
    let dir = std::env::var("REBUNO_MCP_SERVERS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-servers"));
    let path = dir.join("node_modules/.bin").join(bin);
    assert!(
        path.exists(),
        "{} is missing: this test needs the npm MCP reference servers, installed by \
         `npm install --prefix target/mcp-servers @modelcontextprotocol/server-everything \
         @modelcontextprotocol/server-filesystem` (.ci/run does it), or REBUNO_MCP_SERVERS set \
         to such a prefix",
        path.display()
    );
    path.display().to_string()
}

fn everything() -> McpServer {
    McpServer::stdio(
        "every",
        server_bin("mcp-server-everything"),
        Vec::<String>::new(),
    )
}

fn filesystem(root: &Path) -> McpServer {
    McpServer::stdio(
        "fs",
        server_bin("mcp-server-filesystem"),
        [root.display().to_string()],
    )
}

/// A runtime on a SQLite file in `dir` running `handler` (agent `agent`) under `policy`.
async fn runtime(dir: &Path, handler: rebuno::agent::FnHandler, policy: Option<&str>) -> Runtime {
    let db = dir.join("rebuno.db");
    let rt = Runtime::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let id = rebuno::agent::AgentHandler::id(&handler).to_owned();
    rt.register_with(Agent::builder(handler).lease_timeout(Duration::from_secs(2)))
        .await
        .unwrap();
    if let Some(policy) = policy {
        rt.kernel().set_policy(&id, policy).await.unwrap();
    }
    rt.start();
    rt
}

/// A handler's outcome of one call: `{"ok": text}`, `{"error", "retryable"}` for a tool error,
/// `{"denied": reason}` for a denial; control flow propagates.
async fn outcome(result: rebuno::Result<Value>) -> rebuno::Result<Value> {
    match result {
        Ok(v) => Ok(json!({"ok": text(&v)})),
        Err(Error::Tool {
            message, retryable, ..
        }) => Ok(json!({"error": message, "retryable": retryable})),
        Err(Error::Policy { reason, rule_id }) => Ok(json!({"denied": reason, "rule": rule_id})),
        Err(e) => Err(e),
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_tool_error_recorded_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::stdio(
        "gone",
        dir.path().join("no-such-server").display().to_string(),
        Vec::<String>::new(),
    );
    let listed = vec![json!({"name": "look", "annotations": {"readOnlyHint": true}})];
    let tools = server.tools_from(&listed).unwrap();
    let handler = handler_fn("unreachable", move |_input: Value| {
        let tool = tools[0].clone();
        async move { outcome(tool.call(json!({})).await).await }
    });
    let rt = runtime(dir.path(), handler, None).await;
    let client = rt.client();
    let exec = client.create("unreachable", json!({})).await.unwrap();
    let done = client.wait(&exec.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let output = done.output.unwrap();
    assert_eq!(output["retryable"], true, "{output}");
    assert!(
        output["error"].as_str().unwrap().contains("cannot start"),
        "{output}"
    );
    let steps = client.steps(&exec.id).await.unwrap();
    let step = steps.iter().find(|s| s.target == "mcp:gone/look").unwrap();
    assert_eq!(step.status, StepStatus::Failed);
    assert_eq!(step.error.as_ref().unwrap()["retryable"], true, "{step:?}");
    assert_eq!(server.starts(), 0);
    rt.shutdown().await;
}

#[test]
fn a_server_name_that_policy_globs_would_misread_is_refused() {
    let err = McpServer::stdio("a/b", "x", Vec::<String>::new())
        .tools_from(&[])
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[tokio::test]
#[ignore = "needs the npm MCP reference servers"]
async fn the_reference_servers_tools_are_listed_with_their_schemas_and_hints() {
    let every = everything().tool_set().await.unwrap();
    let echo = every
        .get("every__echo")
        .expect("echo is listed")
        .definition();
    assert_eq!(echo.step_target(), "mcp:every/echo");
    assert_eq!(echo.parameters["properties"]["message"]["type"], "string");
    assert_eq!(echo.parameters["required"], json!(["message"]));
    assert_eq!(echo.idempotency, Idempotency::SafeToRetry);
    assert!(!echo.description.is_empty());
    let openai = every.openai();
    let entry = openai
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "every__echo")
        .unwrap();
    assert_eq!(entry["function"]["parameters"], echo.parameters);
    let anthropic = every.anthropic();
    assert!(
        anthropic
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "every__get-sum"
                && t["input_schema"]["properties"]["a"]["type"] == "number")
    );

    let root = tempfile::tempdir().unwrap();
    let fs = filesystem(root.path()).tools().await.unwrap();
    let def = |name: &str| {
        fs.iter()
            .map(|t| t.def().clone())
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("{name} is not listed"))
    };
    assert_eq!(def("fs__write_file").step_target(), "mcp:fs/write_file");
    assert_eq!(def("fs__write_file").idempotency, Idempotency::AtMostOnce);
    assert_eq!(def("fs__move_file").idempotency, Idempotency::AtMostOnce);
    assert_eq!(
        def("fs__read_text_file").idempotency,
        Idempotency::SafeToRetry
    );
    // A non-destructive idempotent tool is safe to retry; an override wins over the hints.
    assert_eq!(
        def("fs__create_directory").idempotency,
        Idempotency::SafeToRetry
    );
    let overridden = filesystem(root.path())
        .idempotency("create_directory", Idempotency::AtMostOnce)
        .tools()
        .await
        .unwrap();
    let create = overridden
        .iter()
        .find(|t| t.def().name == "fs__create_directory")
        .unwrap();
    assert_eq!(create.def().idempotency, Idempotency::AtMostOnce);
}

#[tokio::test]
#[ignore = "needs the npm MCP reference servers"]
async fn a_policy_denying_a_filesystem_write_refuses_it_without_contacting_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // The listing comes from one connection; the agent's tools use another, never started.
    let listed = filesystem(&root).list().await.unwrap();
    let server = filesystem(&root);
    let tools = server.tools_from(&listed).unwrap();
    let file = root.join("denied.txt");
    let path = file.display().to_string();
    let handler = handler_fn("fs-writer", move |_input: Value| {
        let write = tools
            .iter()
            .find(|t| t.def().name == "fs__write_file")
            .unwrap()
            .clone();
        let path = path.clone();
        async move { outcome(write.call(json!({"path": path, "content": "x"})).await).await }
    });
    let policy = r#"
default_action: allow
rules:
  - id: no-fs-writes
    priority: 1
    when: {target: "mcp:fs/write_file"}
    then: {decision: deny, reason: writes_are_not_allowed}
"#;
    let rt = runtime(dir.path(), handler, Some(policy)).await;
    let client = rt.client();
    let exec = client.create("fs-writer", json!({})).await.unwrap();
    let done = client.wait(&exec.id, WAIT).await.unwrap();
    let output = done.output.clone().unwrap_or_default();
    assert_eq!(output["denied"], "writes_are_not_allowed", "{done:?}");
    assert_eq!(output["rule"], "no-fs-writes", "{done:?}");
    assert!(!file.exists(), "the denied write reached the server");
    assert_eq!(
        server.starts(),
        0,
        "the server was started for a denied call"
    );
    rt.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the npm MCP reference servers"]
async fn an_approval_blocks_a_destructive_call_until_granted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = root.join("approved.txt");
    let path = file.display().to_string();
    let server = filesystem(&root);
    let handler = handler_fn("fs-approved", move |_input: Value| {
        let (server, path) = (server.clone(), path.clone());
        async move {
            let tools = server.tool_set().await?;
            let args = json!({"path": path, "content": "approved content"});
            outcome(tools.call("fs__write_file", args).await).await
        }
    });
    let policy = r#"
default_action: allow
rules:
  - id: writes-need-a-human
    priority: 1
    when: {target: "mcp:fs/write_file"}
    then:
      decision: require_approval
      approval_config: {approvers: [ops], timeout: 10m, message: "Write this file?"}
"#;
    let rt = runtime(dir.path(), handler, Some(policy)).await;
    let client = rt.client();
    let exec = client.create("fs-approved", json!({})).await.unwrap();
    let blocked = client
        .wait_until(
            &exec.id,
            |e| e.status == ExecutionStatus::Blocked || e.status.is_terminal(),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(blocked.status, ExecutionStatus::Blocked, "{blocked:?}");
    assert!(!file.exists(), "the write ran before its approval");
    let approval = client
        .approvals()
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.execution_id == exec.id)
        .expect("a pending approval");
    client.grant(&approval.id, "ops", "fine").await.unwrap();
    let done = client.wait(&exec.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "approved content");
    rt.shutdown().await;
}

/// The environment of [`child_process_mcp_agent`].
const DIR_ENV: &str = "REBUNO_MCP_TEST_DIR";
const LONG_RUNNING: &str = "trigger-long-running-operation";

/// The body of the kill/restart test's agent process: on the SQLite file in [`DIR_ENV`], runs
/// (or resumes) the execution with key `k`: a filesystem write, then a long-running everything
/// call made `at_most_once`. Prints each effect (`<outcome> <target>`), then
/// `done <status> <output>` and `starts <fs> <every>`. Run by hand without its environment it
/// fails.
#[test]
#[ignore = "child process of the kill/restart test, run by it"]
fn child_process_mcp_agent() {
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap_or_else(|_| {
        panic!("{DIR_ENV} is not set: this is the child process of another test, not a test")
    }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let root = dir.join("root");
        let fs = filesystem(&root);
        let every = everything().idempotency(LONG_RUNNING, Idempotency::AtMostOnce);
        let path = root.join("a.txt").display().to_string();
        // A server that cannot start: its retryable error must replay as retryable.
        let gone = McpServer::stdio(
            "gone",
            dir.join("no-such-server").display().to_string(),
            Vec::<String>::new(),
        )
        .tools_from(&[json!({"name": "look", "annotations": {"readOnlyHint": true}})])
        .unwrap()
        .remove(0);
        let (fs2, every2) = (fs.clone(), every.clone());
        let handler = handler_fn("mcp-kill", move |_input: Value| {
            let (fs, every, path, gone) = (fs2.clone(), every2.clone(), path.clone(), gone.clone());
            async move {
                let fs = fs.tool_set().await?;
                let every = every.tool_set().await?;
                let unreachable = gone.call(json!({})).await;
                let wrote = fs
                    .call(
                        "fs__write_file",
                        json!({"path": path, "content": "written once"}),
                    )
                    .await;
                let long = every
                    .call(
                        &format!("every__{LONG_RUNNING}"),
                        json!({"duration": 60, "steps": 60}),
                    )
                    .await;
                Ok::<_, Error>(json!({
                    "unreachable": outcome(unreachable).await?,
                    "write": outcome(wrote).await?,
                    "long": outcome(long).await?,
                }))
            }
        });
        let db = dir.join("rebuno.db");
        let rt = Runtime::open(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        let agent = Agent::builder(handler)
            .lease_timeout(Duration::from_secs(2))
            .observer(|e: &Effect| {
                let what = match e.outcome {
                    EffectOutcome::Ran => "ran",
                    EffectOutcome::Replayed => "replayed",
                    _ => "other",
                };
                println!("{what} {}", e.target);
            });
        rt.register_with(agent).await.unwrap();
        rt.start();
        let client = rt.client();
        let exec = client
            .create_idempotent("mcp-kill", json!({}), "k")
            .await
            .unwrap();
        let done = client.wait(&exec.id, WAIT).await.unwrap();
        println!("done {} {}", done.status, done.output.unwrap_or_default());
        println!("starts {} {}", fs.starts(), every.starts());
        rt.shutdown().await;
    });
}

/// Runs [`child_process_mcp_agent`] on `dir`; its stdout lines come through the receiver.
fn agent_process(dir: &Path) -> (support::Kill, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_process_mcp_agent",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (support::Kill(child), rx)
}

/// The lines up to (and including) the first that starts with `prefix`.
fn lines_until(rx: &std::sync::mpsc::Receiver<String>, prefix: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("no line {prefix:?} ({e}); saw {seen:?}"));
        let last = line.starts_with(prefix);
        seen.push(line);
        if last {
            return seen;
        }
    }
}

#[tokio::test]
#[ignore = "needs the npm MCP reference servers"]
async fn a_killed_agent_replays_and_a_kill_during_an_at_most_once_call_is_indeterminate() {
    server_bin("mcp-server-everything");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let file = root.join("a.txt");

    // First process: the write runs, the long call starts; SIGKILL it during that call.
    let (mut first, rx) = agent_process(dir.path());
    let seen = lines_until(&rx, &format!("ran mcp:every/{LONG_RUNNING}"));
    assert!(
        seen.contains(&"ran mcp:fs/write_file".to_owned()),
        "{seen:?}"
    );
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "written once");
    // Changed behind the agent's back: a write sent again would put its content back.
    std::fs::write(&file, "changed after the kill").unwrap();

    // Second process, same execution: the write replays, the long call is indeterminate.
    let (_second, rx) = agent_process(dir.path());
    let seen = lines_until(&rx, "starts ");
    assert!(
        seen.contains(&"replayed mcp:fs/write_file".to_owned()),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|l| l.starts_with("ran ")),
        "something ran again: {seen:?}"
    );
    let done = seen.iter().find(|l| l.starts_with("done ")).unwrap();
    assert!(done.starts_with("done completed "), "{seen:?}");
    let output: Value = serde_json::from_str(done.splitn(3, ' ').nth(2).unwrap()).unwrap();
    assert!(
        output["write"]["ok"]
            .as_str()
            .unwrap()
            .contains("Successfully wrote"),
        "{output}"
    );
    assert_eq!(output["long"]["retryable"], false, "{output}");
    assert_eq!(
        output["unreachable"]["retryable"], true,
        "replayed: {output}"
    );
    assert!(
        seen.contains(&"replayed mcp:gone/look".to_owned()),
        "{seen:?}"
    );
    assert_eq!(
        seen.last().unwrap(),
        "starts 0 0",
        "a server was started to replay: {seen:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "changed after the kill"
    );

    // The record says why: the interrupted at_most_once call failed `indeterminate`.
    let rt = Runtime::open(&format!(
        "sqlite://{}",
        dir.path().join("rebuno.db").display()
    ))
    .await
    .unwrap();
    let client = rt.client();
    let exec = client
        .list(Default::default())
        .await
        .unwrap()
        .executions
        .remove(0);
    let steps = client.steps(&exec.id).await.unwrap();
    let long = steps
        .iter()
        .find(|s| s.kind == StepKind::ToolCall && s.target == format!("mcp:every/{LONG_RUNNING}"))
        .unwrap();
    assert_eq!(long.status, StepStatus::Failed);
    assert_eq!(long.idempotency, Idempotency::AtMostOnce);
    assert_eq!(
        long.error.as_ref().unwrap()["reason"],
        "indeterminate",
        "{long:?}"
    );
    rt.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the npm MCP reference servers"]
async fn a_server_that_dies_is_started_again_and_a_slow_call_times_out_retryably() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let pidfile = dir.path().join("server.pid");
    // A shell that records its pid, then becomes the server: the test can kill the server.
    let script = format!(
        "echo $$ > '{}'; exec '{}' '{}'",
        pidfile.display(),
        server_bin("mcp-server-filesystem"),
        root.display()
    );
    let fs = McpServer::stdio("fs", "sh", ["-c", &script]);
    // Every request of `every` times out after 5 s: ample for listing and `echo`.
    let every = everything().timeout(Duration::from_secs(5));
    let (fs2, every2) = (fs.clone(), every.clone());
    let handler = handler_fn("mcp-restart", move |_input: Value| {
        let (fs, every, pidfile) = (fs2.clone(), every2.clone(), pidfile.clone());
        async move {
            let tools = fs.tool_set().await?;
            let first =
                outcome(tools.call("fs__list_allowed_directories", json!({})).await).await?;
            let pid = std::fs::read_to_string(&pidfile).unwrap();
            let killed = Command::new("kill")
                .args(["-9", pid.trim()])
                .status()
                .unwrap();
            assert!(killed.success());
            while Command::new("kill")
                .args(["-0", pid.trim()])
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // A call may still find the dead connection (a retryable error); the next one
            // starts the server again.
            let mut after = Vec::new();
            for _ in 0..3 {
                let r =
                    outcome(tools.call("fs__list_allowed_directories", json!({})).await).await?;
                let done = r.get("ok").is_some();
                after.push(r);
                if done {
                    break;
                }
            }
            let every = every.tool_set().await?;
            let slow = every
                .call(
                    &format!("every__{LONG_RUNNING}"),
                    json!({"duration": 60, "steps": 1}),
                )
                .await;
            let echo = every
                .call("every__echo", json!({"message": "still here"}))
                .await;
            Ok::<_, Error>(json!({
                "first": first,
                "after": after,
                "slow": outcome(slow).await?,
                "echo": outcome(echo).await?,
            }))
        }
    });
    let rt = runtime(dir.path(), handler, None).await;
    let client = rt.client();
    let exec = client.create("mcp-restart", json!({})).await.unwrap();
    let done = client.wait(&exec.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let output = done.output.unwrap();
    assert!(
        output["first"]["ok"]
            .as_str()
            .unwrap()
            .contains(&root.display().to_string()),
        "{output}"
    );
    let after = output["after"].as_array().unwrap();
    assert!(after.last().unwrap()["ok"].is_string(), "{output}");
    for failed in &after[..after.len() - 1] {
        assert_eq!(failed["retryable"], true, "{output}");
    }
    assert_eq!(fs.starts(), 2, "{output}");
    assert!(
        output["slow"]["error"]
            .as_str()
            .unwrap()
            .contains("did not answer within"),
        "{output}"
    );
    assert_eq!(output["slow"]["retryable"], true, "{output}");
    assert_eq!(output["echo"]["ok"], "Echo: still here", "{output}");
    assert_eq!(every.starts(), 1, "{output}");
    rt.shutdown().await;
}

/// server-everything in its streamable HTTP mode on `port`, once it listens.
fn everything_http(port: u16) -> support::Kill {
    let child = Command::new(server_bin("mcp-server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = support::Kill(child);
    support::wait_listening(port, "server-everything streamableHttp");
    child
}

#[tokio::test]
#[ignore = "needs the npm MCP reference servers"]
async fn streamable_http_lists_calls_and_reconnects_to_a_restarted_server() {
    let port = support::free_port();
    let first = everything_http(port);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let server = McpServer::http("every", url);
    let tools = server.tool_set().await.unwrap();
    let echo = tools
        .get("every__echo")
        .expect("echo is listed")
        .definition();
    assert_eq!(echo.step_target(), "mcp:every/echo");
    assert_eq!(echo.parameters["properties"]["message"]["type"], "string");

    let dir = tempfile::tempdir().unwrap();
    let handler = handler_fn("mcp-http", move |input: Value| {
        let tools = tools.clone();
        async move {
            // After a restart a call may find the old session gone (a retryable error); the
            // next one connects afresh.
            let mut attempts = Vec::new();
            for _ in 0..3 {
                let r = outcome(tools.call("every__echo", input.clone()).await).await?;
                let done = r.get("ok").is_some();
                attempts.push(r);
                if done {
                    break;
                }
            }
            Ok::<_, Error>(json!(attempts))
        }
    });
    let rt = runtime(dir.path(), handler, None).await;
    let client = rt.client();
    let run = |message: &'static str| {
        let client = client.clone();
        async move {
            let exec = client
                .create("mcp-http", json!({"message": message}))
                .await
                .unwrap();
            let done = client.wait(&exec.id, WAIT).await.unwrap();
            assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
            done.output.unwrap()
        }
    };
    let before = run("one").await;
    assert_eq!(before, json!([{"ok": "Echo: one"}]));
    drop(first);
    let _second = everything_http(port);
    let after = run("two").await;
    let after = after.as_array().unwrap();
    assert_eq!(after.last().unwrap()["ok"], "Echo: two", "{after:?}");
    for failed in &after[..after.len() - 1] {
        assert_eq!(failed["retryable"], true, "{after:?}");
    }
    rt.shutdown().await;
}
