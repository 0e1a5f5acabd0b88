//! Interop with clients nobody here wrote: one agent, written against the published Python
//! `rebuno` SDK, runs unchanged against this kernel over real HTTP with each generation of the
//! SDK: 0.14.0 and 0.16.0 (body-only `sha256=` signatures), 0.22.0 (`v1=` request signatures,
//! sessions' fields) and 0.29.2 (`resources` on every submit, agent metadata at start-up).
//! The server has an admin token: approvals are granted through the SDK's own `Client`, with
//! the admin token before 0.29 and with a scoped API key (deciding as its subject) from 0.29;
//! 0.29's client is also refused a create with a read-only key.
//!
//! Each test needs a Python with its SDK version: `.ci/run` builds one venv per version from
//! PyPI (`REBUNO_PYTHON` for 0.14.0, `REBUNO_SDK_VENVS/sdk-<version>` for the others).

use test_support::rebuno as support;

use support::{
    GREET_AGENT, python_agent, python_with_sdk_version, run_client, serve_memory_kernel, wait_for,
};

use rebuno::Kernel;
use rebuno::protocol::{
    CreateApiKeyRequest, CreateExecutionRequest, ExecutionStatus, Scope, StepStatus,
};
use serde_json::json;

/// The server's admin token in these tests.
const ADMIN: &str = "py-admin-token";

/// Creates an execution twice with one idempotency key through the SDK's `Client`; answers
/// the two execution ids and the `created_by` of the first.
const CREATE_TWICE: &str = r#"
async def main(client):
    for _ in range(2):
        e = await client.create("py", {"name": "once"}, idempotency_key="py-once")
        print(e.id)
    print(getattr(e, "created_by", ""))
"#;

/// Grants the first pending approval through the SDK's `Client` (as `alice` when the SDK
/// takes a `decided_by`; 0.29 may leave it out, and a key decides as its subject).
const GRANT_FIRST: &str = r#"
async def main(client):
    pending = await client.list_approvals()
    decided_by = os.environ.get("DECIDED_BY", "")
    await client.grant_approval(pending[0].id, decided_by=decided_by, rationale="fine")
    print(pending[0].id)
"#;

/// What a key with only `executions:read` may do through the SDK's `Client`: read, but not
/// create (the SDK's error for `403 forbidden`).
const READ_ONLY: &str = r#"
async def main(client):
    e = await client.get(os.environ["EXEC_ID"])
    print(e.status)
    try:
        await client.create("py", {"name": "sneaky"})
        print("created")
    except Exception as err:
        print(type(err).__name__, getattr(err, "code", ""), getattr(err, "status_code", ""))
"#;

/// A new API key of subject `name` holding `scope`; answers its secret.
async fn key(kernel: &Kernel, name: &str, scope: Scope) -> String {
    let req = CreateApiKeyRequest {
        name: name.into(),
        scopes: vec![scope],
        ..CreateApiKeyRequest::default()
    };
    kernel.create_api_key(req, "").await.unwrap().secret
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn published_python_sdk_agent_runs_against_the_kernel() {
    runs_against_the_kernel("0.14.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.16.0 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_16_agent_runs_against_the_kernel() {
    runs_against_the_kernel("0.16.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.22.0 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_22_agent_runs_against_the_kernel() {
    runs_against_the_kernel("0.22.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_agent_runs_against_the_kernel() {
    runs_against_the_kernel("0.29.2").await;
}

/// A Python SDK agent whose tool is called with an integer beyond 64 bits (Python ints have
/// no limit and `json.dumps` writes every digit), then with the same value as a string; for
/// input `result` its tool returns one, and for `output` its handler does (both uncaught).
const BIG_INT_AGENT: &str = r#"
import os
import uvicorn
from rebuno import Agent, tool

@tool("pay")
async def pay(amount) -> str:
    return f"paid {amount}"

@tool("quote")
async def quote() -> dict:
    return {"amount": 2 ** 64}

async def handler(name: str):
    if name == "result":
        return await quote()
    if name == "output":
        return {"total": -(2 ** 64)}
    big = 123456789012345678901234567890
    try:
        await pay(amount=-big)
        refused = ""
    except Exception as err:
        refused = str(err)
    paid = await pay(amount=str(big))
    return {"refused": refused, "paid": paid}

agent = Agent("py", secret="py-secret", base_url=os.environ["REBUNO_URL"])
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn python_sdk_0_14_agent_is_told_which_integer_is_beyond_64_bits() {
    big_integer_args_are_refused_by_name("0.14.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.16.0 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_16_agent_is_told_which_integer_is_beyond_64_bits() {
    big_integer_args_are_refused_by_name("0.16.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.22.0 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_22_agent_is_told_which_integer_is_beyond_64_bits() {
    big_integer_args_are_refused_by_name("0.22.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_agent_is_told_which_integer_is_beyond_64_bits() {
    big_integer_args_are_refused_by_name("0.29.2").await;
}

/// Runs `script` as the agent `py` (secret `py-secret`) with the Python SDK `version` against
/// a kernel in memory, and one execution for each name in `names` (input `{"name": …}`) to its
/// end; answers the kernel and the ended executions.
async fn run_python_to_end(
    version: &str,
    script: &str,
    names: &[&str],
) -> (Kernel, Vec<rebuno::protocol::Execution>) {
    let python = python_with_sdk_version(version);
    let dir = tempfile::tempdir().unwrap();
    let (kernel, base, _background) = serve_memory_kernel(ADMIN).await;
    let (_agent, _) = python_agent(
        &kernel,
        &python,
        dir.path(),
        ("py", "py-secret"),
        script,
        &base,
        &[],
    )
    .await;
    let terminal = [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
    ];
    let mut ended = Vec::new();
    for name in names {
        let exec = kernel
            .create_execution(CreateExecutionRequest {
                agent_id: "py".into(),
                input: Some(json!({ "name": name })),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        ended.push(wait_for(&kernel, &exec.id, &terminal).await);
    }
    (kernel, ended)
}

/// The kernel records 64-bit numbers only: a Python agent's tool call with a larger integer is
/// refused with an error naming the argument and the fix, nothing is recorded for it, and the
/// value sent as a string is recorded digit for digit.
async fn big_integer_args_are_refused_by_name(version: &str) {
    let (kernel, ended) = run_python_to_end(version, BIG_INT_AGENT, &["big"]).await;
    let done = &ended[0];
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let output = done.output.clone().unwrap();
    let refused = output["refused"].as_str().unwrap();
    assert!(
        refused.contains(
            "invalid args: args.amount: integer -123456789012345678901234567890 has more than 64 bits"
        ) && refused.contains("send it as a string"),
        "{refused}"
    );
    assert_eq!(output["paid"], "paid 123456789012345678901234567890");
    let steps = kernel.steps(&done.id, false).await.unwrap();
    assert_eq!(
        steps.len(),
        1,
        "the refused call recorded nothing: {steps:?}"
    );
    assert_eq!(
        steps[0].args,
        Some(json!({"amount": "123456789012345678901234567890"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn python_sdk_0_14_agent_is_told_its_tool_result_is_beyond_64_bits() {
    big_integer_result_fails_the_execution_by_name("0.14.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_agent_is_told_its_tool_result_is_beyond_64_bits() {
    big_integer_result_fails_the_execution_by_name("0.29.2").await;
}

/// A tool result with 2^64 (a Python int) is refused on `complete` naming `result.amount`;
/// the SDK raises it in the handler, which fails the execution with that message (it ends,
/// rather than retrying), and the step's result was never recorded. An output with -2^64 is
/// refused too: the SDK only logs that, and the kernel fails the execution naming it, so it
/// ends instead of being re-delivered to the same output again and again.
async fn big_integer_result_fails_the_execution_by_name(version: &str) {
    let (kernel, ended) = run_python_to_end(version, BIG_INT_AGENT, &["result", "output"]).await;
    for (done, want) in ended.iter().zip([
        "invalid result: result.amount: integer 18446744073709551616 has more than 64 bits",
        "the output could not be recorded: invalid output: output.total: integer \
         -18446744073709551616 has more than 64 bits",
    ]) {
        assert_eq!(done.status, ExecutionStatus::Failed, "{done:?}");
        assert!(
            done.failure_reason.contains(want)
                && done.failure_reason.contains("send it as a string"),
            "{}",
            done.failure_reason
        );
        assert_eq!(done.output, None);
        let steps = kernel.steps(&done.id, false).await.unwrap();
        let recorded: Vec<_> = steps.iter().filter(|s| s.result.is_some()).collect();
        assert!(recorded.is_empty(), "{steps:?}");
    }
}

/// A run with a tool and a `step()` completes; `require_approval` blocks and a grant over
/// HTTP resumes it, recorded steps replaying; a denial reaches the handler as the SDK's policy
/// error and the tool never runs.
async fn runs_against_the_kernel(version: &str) {
    let python = python_with_sdk_version(version);
    let dir = tempfile::tempdir().unwrap();
    let (kernel, base, _background) = serve_memory_kernel(ADMIN).await;
    let calls = dir.path().join("calls.txt");
    let (_agent, _) = python_agent(
        &kernel,
        &python,
        dir.path(),
        ("py", "py-secret"),
        GREET_AGENT,
        &base,
        &[("CALLS_FILE", &calls)],
    )
    .await;
    let create = |name: &str| CreateExecutionRequest {
        agent_id: "py".into(),
        input: Some(json!({"name": name})),
        agent_version: String::new(),
        ..CreateExecutionRequest::default()
    };
    let terminal = [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
    ];

    // A tool plus a step() plus a handler completes.
    let exec = kernel.create_execution(create("world")).await.unwrap();
    let done = wait_for(&kernel, &exec.id, &terminal).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output.as_ref().unwrap()["greeting"], "hello world");
    let steps = kernel.steps(&exec.id, false).await.unwrap();
    let mut kinds: Vec<&str> = steps.iter().map(|s| s.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["local", "tool_call"]);
    assert!(steps.iter().all(|s| s.status == StepStatus::Succeeded));

    // SDK 0.28 and later publish the agent's metadata (the handler's input schema) at start-up
    // and on the first dispatch, signed by the agent itself.
    if version >= "0.28" {
        let agent = kernel.agent("py").await.unwrap();
        let metadata = agent.metadata.expect("the agent published its metadata");
        assert_eq!(
            metadata.input_schema.as_ref().unwrap()["properties"]["name"]["type"],
            "string",
            "{metadata:?}"
        );
    } else {
        assert_eq!(kernel.agent("py").await.unwrap().metadata, None);
    }

    // SDK 0.25 and later: the SDK's own client creates idempotently; the repeat answers the
    // same execution, which runs once. The key creating it is its creator.
    if version >= "0.25" {
        let writer = key(&kernel, "py-svc", Scope::ExecutionsWrite).await;
        let out = run_client(&python, &base, &writer, CREATE_TWICE, &[]);
        assert_eq!(out[0], out[1], "{out:?}");
        let done = wait_for(&kernel, &out[0], &terminal).await;
        assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
        assert_eq!(done.idempotency_key, "py-once");
        assert_eq!(done.created_by, "py-svc");
        if version >= "0.29" {
            assert_eq!(out[2], "py-svc", "the SDK reads created_by");
        }
    }

    // SDK 0.29: scoped keys are enforced against the SDK's client: a read-only key reads but
    // its create is the SDK's ForbiddenError, and creates nothing.
    if version >= "0.29" {
        let reader = key(&kernel, "py-reader", Scope::ExecutionsRead).await;
        let before = kernel.list_executions(None, None, None, 0).await.unwrap();
        let out = run_client(&python, &base, &reader, READ_ONLY, &[("EXEC_ID", &exec.id)]);
        assert_eq!(out, ["completed", "ForbiddenError forbidden 403"]);
        let after = kernel.list_executions(None, None, None, 0).await.unwrap();
        assert_eq!(before.executions.len(), after.executions.len());
    }

    // require_approval blocks; a grant resumes it to completion.
    kernel
        .set_policy(
            "py",
            "default_action: allow\nrules:\n  - id: gate\n    priority: 1\n    when: {target: greet, arguments: {name: {equals: approve-me}}}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n  - id: nope\n    priority: 2\n    when: {target: greet, arguments: {name: {equals: forbidden}}}\n    then: {decision: deny, reason: not here}\n",
        )
        .await
        .unwrap();
    let exec = kernel.create_execution(create("approve-me")).await.unwrap();
    let blocked = wait_for(&kernel, &exec.id, &[ExecutionStatus::Blocked]).await;
    assert_eq!(blocked.status, ExecutionStatus::Blocked);
    // Listed and granted through the SDK's own client: before 0.29 with the admin token as
    // `alice`; with 0.29 by a key whose subject is alice, the SDK leaving `decided_by` out.
    let (approver, decided_by) = if version >= "0.29" {
        (key(&kernel, "alice", Scope::ApprovalsWrite).await, "")
    } else {
        (ADMIN.to_owned(), "alice")
    };
    let out = run_client(
        &python,
        &base,
        &approver,
        GRANT_FIRST,
        &[("DECIDED_BY", decided_by)],
    );
    let approval = kernel.approval(&out[0]).await.unwrap();
    assert_eq!(approval.decided_by, "alice");
    assert_eq!(approval.asserted_by, decided_by);
    let done = wait_for(&kernel, &exec.id, &terminal).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(
        done.output.as_ref().unwrap()["greeting"],
        "hello approve-me"
    );

    // A denial never runs the tool; the SDK's policy error reaches the handler with the rule's
    // reason (its @tool turns the PolicyError into the text "<tool> not allowed. reason: ...").
    let exec = kernel.create_execution(create("forbidden")).await.unwrap();
    let done = wait_for(&kernel, &exec.id, &terminal).await;
    assert_eq!(
        done.output.as_ref().unwrap()["greeting"],
        "greet not allowed. reason: [policy_denied] not here (HTTP 403)",
        "{done:?}"
    );
    let steps = kernel.steps(&exec.id, false).await.unwrap();
    let denied = steps
        .iter()
        .find(|s| s.kind.as_str() == "tool_call")
        .unwrap();
    assert_eq!(denied.status, StepStatus::Denied);
    let ran = std::fs::read_to_string(&calls).unwrap();
    let mut want = vec!["world", "approve-me"];
    if version >= "0.25" {
        want.insert(1, "once"); // the idempotent create ran once
    }
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        want,
        "each tool body ran once, the denied one never"
    );
}
