//! Numbers in every recorded JSON value over real HTTP: a step's result and failure, an
//! execution's input and output, and step args. The kernel records them as 64-bit JSON
//! values, so an integer literal beyond 64 bits would be recorded as a float, rounded (a replay
//! answers another number) or exact but served back as a float (`1.8446744073709552e19` for an
//! integer the agent sent). Such a request is refused with `400 validation_error` naming the
//! number and saying to send it as a string, and nothing of it is recorded. Uses the shared
//! `/v0` harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

/// Beyond 64 bits, rounded by a float; 2^64, held exactly by a float but an integer.
const BIG: &str = "123456789012345678901234567890";
const TWO_TO_64: &str = "18446744073709551616";

/// Asserts a `400 validation_error` naming `at` and the integer, with the fix.
fn assert_refused(resp: &Resp, field: &str, at: &str, literal: &str) {
    let message = resp.err(400, "validation_error");
    let want = format!("invalid {field}: {at}: integer {literal} has more than 64 bits");
    assert!(message.contains(&want), "{message}");
    assert!(message.contains("send it as a string"), "{message}");
}

/// A kernel on loopback, an agent, one running execution whose dispatch the agent holds, and
/// one executing step of it.
struct Running {
    api: Api,
    agent: TestAgent,
    exec_path: String,
    lease: Lease,
    step_path: String,
}

impl Running {
    async fn start() -> Running {
        let api = Api::start(Backend::Memory, Some(TOKEN)).await;
        let mut agent = TestAgent::spawn("counter").await;
        api.register(&agent).await;
        let exec_id = api.create("counter", json!({"n": 1})).await;
        let exec_path = format!("/v0/executions/{exec_id}");
        let (_, lease) = agent.delivery().await;
        let d = Running::post(
            &api,
            &agent,
            &format!("{exec_path}/steps"),
            &lease,
            br#"{"kind": "tool_call", "target": "count", "args": {"n": 1}}"#,
        )
        .await
        .ok(200);
        assert_eq!(d["decision"], json!("proceed"));
        let step_path = format!("{exec_path}/steps/{}", d["step_id"].as_str().unwrap());
        Running {
            api,
            agent,
            exec_path,
            lease,
            step_path,
        }
    }

    async fn post(api: &Api, agent: &TestAgent, path: &str, lease: &Lease, body: &[u8]) -> Resp {
        api.agent(agent, Method::POST, path, Some(lease), body)
            .await
    }

    /// A signed agent request under the execution's lease.
    async fn agent_post(&self, path: &str, body: &str) -> Resp {
        Running::post(&self.api, &self.agent, path, &self.lease, body.as_bytes()).await
    }

    async fn step_status(&self) -> Value {
        self.api.get(&self.step_path).await.ok(200)["status"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_result_or_failure_beyond_64_bits_is_refused_and_the_step_stays_executing() {
    let run = Running::start().await;
    let complete = format!("{}/complete", run.step_path);
    for (body, at, literal) in [
        (
            format!(r#"{{"result": {{"amount": {BIG}}}}}"#),
            "result.amount",
            BIG,
        ),
        (
            format!(r#"{{"result": [1, 2, -{BIG}]}}"#),
            "result[2]",
            &format!("-{BIG}")[..],
        ),
        (format!(r#"{{"result": {TWO_TO_64}}}"#), "result", TWO_TO_64),
    ] {
        assert_refused(
            &run.agent_post(&complete, &body).await,
            "result",
            at,
            literal,
        );
        assert_eq!(run.step_status().await, json!("executing"), "{body}");
    }
    let fail = format!("{}/fail", run.step_path);
    let body = format!(r#"{{"error": {{"message": "boom", "details": {{"id": {TWO_TO_64}}}}}}}"#);
    assert_refused(
        &run.agent_post(&fail, &body).await,
        "error",
        "error.details.id",
        TWO_TO_64,
    );
    assert_eq!(run.step_status().await, json!("executing"));

    // A float literal is a float, and is recorded as one.
    let d = run
        .agent_post(&complete, r#"{"result": {"amount": 1e20}}"#)
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("recorded"));
    let step = run.api.get(&run.step_path).await.ok(200);
    assert_eq!(step["status"], json!("succeeded"));
    assert_eq!(step["result"], json!({"amount": 1e20}));
    let complete = format!("{}/complete", run.exec_path);
    run.agent_post(&complete, r#"{"output": {"total": 1.5e19}}"#)
        .await
        .ok(204);
    let exec = run.api.get(&run.exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("completed"));
    assert_eq!(exec["output"], json!({"total": 1.5e19}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_input_or_output_beyond_64_bits_is_refused_naming_it_and_not_recorded() {
    let run = Running::start().await;
    // Input: no execution is created.
    for (body, at, literal) in [
        (
            format!(r#"{{"agent_id": "counter", "input": {{"items": [1, 2, 3, {BIG}]}}}}"#),
            "input.items[3]",
            BIG,
        ),
        (
            format!(r#"{{"agent_id": "counter", "input": {{"n": {TWO_TO_64}}}}}"#),
            "input.n",
            TWO_TO_64,
        ),
    ] {
        let resp = run.api.post_raw("/v0/executions", body.into_bytes()).await;
        assert_refused(&resp, "input", at, literal);
    }
    let listed = run.api.get("/v0/executions").await.ok(200);
    let listed = listed.get("executions").unwrap_or(&listed);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    // Output: refused and not recorded; the execution fails naming it (a re-delivery would
    // only run the agent to the same output again).
    let complete = format!("{}/complete", run.exec_path);
    let body = format!(r#"{{"output": {{"total": {BIG}}}}}"#);
    assert_refused(
        &run.agent_post(&complete, &body).await,
        "output",
        "output.total",
        BIG,
    );
    let exec = run.api.get(&run.exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("failed"), "{exec}");
    assert_eq!(exec.get("output"), None, "{exec}");
    let reason = exec["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "the output could not be recorded: invalid output: output.total: integer {BIG}"
        )),
        "{exec}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_to_the_64_in_step_args_is_refused_and_1e20_accepted() {
    let run = Running::start().await;
    let steps = format!("{}/steps", run.exec_path);
    for literal in [TWO_TO_64, "100000000000000000000", "-9223372036854775809"] {
        let body =
            format!(r#"{{"kind": "tool_call", "target": "count", "args": {{"n": {literal}}}}}"#);
        assert_refused(
            &run.agent_post(&steps, &body).await,
            "args",
            "args.n",
            literal,
        );
    }
    let steps_now = run.api.get(&steps).await.ok(200);
    assert_eq!(
        steps_now.as_array().map(Vec::len),
        Some(1),
        "nothing recorded: {steps_now}"
    );
    let d = run
        .agent_post(
            &steps,
            r#"{"kind": "tool_call", "target": "count", "args": {"n": 1e20}}"#,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"));
    let step = run
        .api
        .get(&format!("{steps}/{}", d["step_id"].as_str().unwrap()))
        .await
        .ok(200);
    assert_eq!(step["args"], json!({"n": 1e20}));
}
