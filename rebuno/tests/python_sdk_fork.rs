//! Forks with the published Python SDK 0.29.2: its own `Client.fork` (with an
//! `executions:write` key) forks a finished run of an agent written against the SDK, and the
//! agent, unchanged, replays the prefix: a tool whose result is recorded at `at_seq` is not run
//! again, a later one runs afresh, and a fork's `policy_bundle` (given with a key that may set
//! policy; the plain key's is refused) narrows the agent's for its new steps. The
//! SDK's `Execution.model_validate` reads the kernel's answer (`forked_from`, `fork_seq`).
//!
//! Needs `REBUNO_SDK_VENVS/sdk-0.29.2` (`.ci/run` builds it from PyPI).

use test_support::rebuno as support;

use support::{
    GREET_AGENT, python_agent, python_with_sdk_version, run_client, serve_memory_kernel, wait_for,
};

use rebuno::protocol::{
    CreateApiKeyRequest, CreateExecutionRequest, EventType, ExecutionStatus, Scope, StepStatus,
};
use serde_json::json;

/// Forks `EXEC_ID` at `AT_SEQ` (with `BUNDLE` when set) through the SDK's `Client.fork`;
/// prints the fork's id, `forked_from` and `fork_seq` as the SDK parsed them, or `refused`
/// and the SDK's error when the kernel refused the fork.
const FORK: &str = r#"
async def main(client):
    try:
        e = await client.fork(os.environ["EXEC_ID"], at_seq=int(os.environ["AT_SEQ"]),
                              policy_bundle=os.environ.get("BUNDLE", ""))
    except Exception as err:
        print("refused")
        print(f"{type(err).__name__}: {err}")
        return
    print(e.id)
    print(e.forked_from)
    print(e.fork_seq)
"#;

const TERMINAL: [ExecutionStatus; 3] = [
    ExecutionStatus::Completed,
    ExecutionStatus::Failed,
    ExecutionStatus::Cancelled,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_forks_replay_the_prefix() {
    let python = python_with_sdk_version("0.29.2");
    let dir = tempfile::tempdir().unwrap();
    let (kernel, base, _background) = serve_memory_kernel("py-admin").await;
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
    let calls_made = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let writer = kernel
        .create_api_key(
            CreateApiKeyRequest {
                name: "py-svc".into(),
                scopes: vec![Scope::ExecutionsWrite],
                ..CreateApiKeyRequest::default()
            },
            "",
        )
        .await
        .unwrap()
        .secret;
    // Giving a fork its own bundle takes a key that may set policy.
    let governor = kernel
        .create_api_key(
            CreateApiKeyRequest {
                name: "py-gov".into(),
                scopes: vec![Scope::ExecutionsWrite, Scope::PoliciesWrite],
                ..CreateApiKeyRequest::default()
            },
            "",
        )
        .await
        .unwrap()
        .secret;
    let fork_as = |key: &str, exec: &str, at_seq: u64, bundle: &str| {
        run_client(
            &python,
            &base,
            key,
            FORK,
            &[
                ("EXEC_ID", exec),
                ("AT_SEQ", &at_seq.to_string()),
                ("BUNDLE", bundle),
            ],
        )
    };
    let fork = |exec: &str, at_seq: u64, bundle: &str| {
        let key = if bundle.is_empty() {
            &writer
        } else {
            &governor
        };
        let out = run_client(
            &python,
            &base,
            key,
            FORK,
            &[
                ("EXEC_ID", exec),
                ("AT_SEQ", &at_seq.to_string()),
                ("BUNDLE", bundle),
            ],
        );
        assert_eq!(out[1], exec, "{out:?}");
        assert_eq!(out[2], at_seq.to_string(), "{out:?}");
        out[0].clone()
    };

    // The original runs both effects once.
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "py".into(),
            input: Some(json!({"name": "ada"})),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let done = wait_for(&kernel, &exec, &TERMINAL).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(calls_made(), 1);
    let events = kernel.events(&exec, 0, 1000).await.unwrap();
    let succeeded: Vec<u64> = events
        .iter()
        .filter(|e| e.event_type == EventType::StepSucceeded)
        .map(|e| e.event_seq)
        .collect();
    assert_eq!(succeeded.len(), 2, "the step and the tool: {events:?}");
    let output = done.output.unwrap();

    // Forked after both: everything replays, the tool does not run, the output is the same.
    let f1 = fork(&exec, succeeded[1], "");
    let d1 = wait_for(&kernel, &f1, &TERMINAL).await;
    assert_eq!(d1.status, ExecutionStatus::Completed, "{d1:?}");
    assert_eq!(d1.output.unwrap(), output);
    assert_eq!(calls_made(), 1, "a recorded tool is not run again");

    // Forked after the step only: the step's value replays, the tool runs afresh.
    let f2 = fork(&exec, succeeded[0], "");
    let d2 = wait_for(&kernel, &f2, &TERMINAL).await;
    assert_eq!(d2.status, ExecutionStatus::Completed, "{d2:?}");
    let out2 = d2.output.unwrap();
    assert_eq!(out2["at"], output["at"]);
    assert_eq!(out2["greeting"], "hello ada");
    assert_eq!(calls_made(), 2);

    // The plain key cannot give a fork a bundle: the SDK reports the kernel's refusal.
    let before = kernel.list_executions(None, None, None, 100).await.unwrap();
    let out = fork_as(&writer, &exec, succeeded[0], "default_action: allow\n");
    assert_eq!(out[0], "refused", "{out:?}");
    assert!(out[1].contains("policies:write"), "{out:?}");
    let after = kernel.list_executions(None, None, None, 100).await.unwrap();
    assert_eq!(after.executions.len(), before.executions.len());

    // The same fork under a deny-all bundle: the tool is denied and never runs.
    let f3 = fork(&exec, succeeded[0], "default_action: deny\n");
    let d3 = wait_for(&kernel, &f3, &TERMINAL).await;
    assert!(TERMINAL.contains(&d3.status), "{d3:?}");
    let steps = kernel.steps(&f3, false).await.unwrap();
    let greet = steps.iter().find(|s| s.target == "greet").unwrap();
    assert_eq!(greet.status, StepStatus::Denied, "{steps:?}");
    assert_eq!(calls_made(), 2);

    // The original is untouched.
    assert_eq!(kernel.events(&exec, 0, 1000).await.unwrap(), events);
}
