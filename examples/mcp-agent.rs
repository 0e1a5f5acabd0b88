//! `cargo run --example mcp-agent`: an agent that calls an MCP server's tools as durable steps.
//!
//! ```text
//! cargo run --example mcp-agent -- [--db FILE] [--execution-key KEY] [--name NAME]
//!     [--call TOOL=JSON ...] [--crash-after N] -- <server command and args>
//! ```
//!
//! Runs an agent on the embedded kernel (a SQLite file, `--db`, default
//! `$TMPDIR/rebuno-mcp-agent.db`) that starts the MCP server given after `--` (stdio), lists
//! its tools (a recorded step) and calls the `--call` tools in order, each with its JSON
//! arguments object, as `tool_call` steps with target `mcp:<NAME>/<TOOL>` (`NAME` defaults to
//! `server`; like a tool name, it is 1 to 128 bytes of `A-Z a-z 0-9 _ - .`, checked before
//! anything runs; a server listing a tool name outside these rules is refused). It prints every effect as it is decided (`ran` or `replayed`), then each tool's
//! result, and how many times the server was started.
//!
//! The same `--execution-key` resumes the same execution: after an interrupted run (killed, or
//! `--crash-after N`, which exits the process right after the N-th call was recorded) a second
//! invocation replays every recorded call without contacting the server for them and runs
//! the rest. For an execution that already finished it prints the recorded calls and the
//! output; the server is not started.
//!
//! ```text
//! npm install --prefix target/mcp-servers @modelcontextprotocol/server-filesystem
//! cargo run --example mcp-agent -- --crash-after 1 --execution-key demo \
//!     --call 'write_file={"path":"/tmp/mcp-demo/a.txt","content":"hello"}' \
//!     --call 'read_text_file={"path":"/tmp/mcp-demo/a.txt"}' \
//!     -- target/mcp-servers/node_modules/.bin/mcp-server-filesystem /tmp/mcp-demo
//! # the same command without --crash-after: write_file is replayed, read_text_file runs
//! ```

use anyhow::{Context as _, bail};
use rebuno::agent::{Effect, handler_fn};
use rebuno::mcp::{McpServer, model_name, text};
use rebuno::protocol::{ExecutionStatus, StepKind};
use rebuno::{Agent, Runtime};
use serde_json::{Value, json};
use std::time::Duration;

const AGENT: &str = "mcp-agent";

/// The command line.
struct Args {
    db: String,
    key: Option<String>,
    name: String,
    calls: Vec<(String, Value)>,
    crash_after: Option<usize>,
    server: Vec<String>,
}

const USAGE: &str = "usage: mcp-agent [--db FILE] [--execution-key KEY] [--name NAME] \
                     [--call TOOL=JSON ...] [--crash-after N] -- <server command and args>";

fn parse(mut argv: impl Iterator<Item = String>) -> anyhow::Result<Args> {
    let mut args = Args {
        db: std::env::temp_dir()
            .join("rebuno-mcp-agent.db")
            .display()
            .to_string(),
        key: None,
        name: "server".into(),
        calls: Vec::new(),
        crash_after: None,
        server: Vec::new(),
    };
    while let Some(arg) = argv.next() {
        let mut value = || {
            argv.next()
                .with_context(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--db" => args.db = value()?,
            "--execution-key" => args.key = Some(value()?),
            "--name" => args.name = value()?,
            "--crash-after" => args.crash_after = Some(value()?.parse()?),
            "--call" => {
                let call = value()?;
                let (tool, json) = call
                    .split_once('=')
                    .with_context(|| format!("--call {call}: expected TOOL=JSON"))?;
                let json: Value = serde_json::from_str(json)
                    .with_context(|| format!("--call {call}: the arguments are not JSON"))?;
                args.calls.push((tool.to_owned(), json));
            }
            "--" => {
                args.server = argv.by_ref().collect();
                break;
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if args.server.is_empty() {
        bail!("no server command after --\n{USAGE}");
    }
    Ok(args)
}

/// Prints an effect as the kernel decides it.
fn print_effect(e: &Effect) {
    println!("{}", examples::output::effect_line(e));
}

/// The handler: lists the server's tools, then makes each call of the input in order. A tool
/// error is reported in the output and the next call is made; a refusal ends the run.
fn agent(server: McpServer, crash_after: Option<usize>) -> rebuno::agent::FnHandler {
    handler_fn(AGENT, move |input: Value| {
        let server = server.clone();
        async move {
            let tools = server.tool_set().await?;
            let mut results = Vec::new();
            let calls = input["calls"].as_array().cloned().unwrap_or_default();
            for (i, call) in calls.iter().enumerate() {
                let tool = call["tool"].as_str().unwrap_or_default();
                let name = model_name(server.name(), tool);
                let result = match tools.call(&name, call["args"].clone()).await {
                    Ok(v) => json!({"tool": tool, "result": text(&v)}),
                    Err(rebuno::Error::Tool { message, .. }) => {
                        json!({"tool": tool, "error": message})
                    }
                    Err(e) => return Err(e),
                };
                results.push(result);
                if crash_after == Some(i + 1) {
                    println!("crashing after call {} (--crash-after)", i + 1);
                    std::process::exit(3);
                }
            }
            Ok::<_, rebuno::Error>(json!({"results": results}))
        }
    })
}

async fn run(args: Args) -> anyhow::Result<()> {
    let server = McpServer::stdio(&args.name, &args.server[0], &args.server[1..]);
    // A bad --name is a usage error now, not a failed execution later.
    server.check().context("--name")?;
    let rt = Runtime::open(&format!("sqlite://{}", args.db)).await?;
    let handler = Agent::builder(agent(server.clone(), args.crash_after))
        .observer(print_effect)
        // A run killed mid-way is re-delivered this long after its last sign of life.
        .lease_timeout(Duration::from_secs(2));
    rt.register_with(handler).await?;
    rt.start();
    let client = rt.client();
    let calls: Vec<Value> = args
        .calls
        .iter()
        .map(|(tool, args)| json!({"tool": tool, "args": args}))
        .collect();
    let input = json!({"calls": calls});
    let exec = match &args.key {
        Some(key) => client.create_idempotent(AGENT, &input, key).await?,
        None => client.create(AGENT, &input).await?,
    };
    println!("execution {} ({})", exec.id, args.db);
    if exec.status.is_terminal() {
        println!("already {}; its recorded calls:", exec.status);
        for s in client.steps(&exec.id).await? {
            if s.kind == StepKind::ToolCall {
                println!("recorded {} {} {}", s.kind, s.target, s.status);
            }
        }
    }
    let done = client.wait(&exec.id, Duration::from_secs(600)).await?;
    match done.status {
        ExecutionStatus::Completed => {
            let output = done.output.unwrap_or_default();
            for r in output["results"].as_array().into_iter().flatten() {
                match r.get("error") {
                    Some(e) => println!(
                        "{}: error: {}",
                        r["tool"].as_str().unwrap_or_default(),
                        e.as_str().unwrap_or_default()
                    ),
                    None => println!(
                        "{}: {}",
                        r["tool"].as_str().unwrap_or_default(),
                        r["result"].as_str().unwrap_or_default()
                    ),
                }
            }
        }
        other => println!("execution is {other}: {}", done.failure_reason),
    }
    println!("server started {} time(s)", server.starts());
    rt.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    run(parse(std::env::args().skip(1))?).await
}
