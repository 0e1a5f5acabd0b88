//! What `#[rebuno::tool]`, `#[rebuno::step]` and `#[rebuno::agent]` generate, executed for real
//! on an embedded kernel (in memory): argument recording by parameter name, tool errors,
//! definitions and their JSON Schemas, JSON calls with bad arguments, input binding of handlers
//! with zero, one and several parameters, calls outside an execution, and replay of a step.
//!
//! Every test has its own tools and agents, so the run counters below are per test.

use rebuno::protocol::{
    CreateExecutionRequest, Execution, ExecutionStatus, Idempotency, Step, StepKind, StepStatus,
};
use rebuno::{AgentHandler, Error, Runtime, Tool, ToolSet};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

/// A memory kernel serving `handler` in process.
async fn serve(handler: impl AgentHandler) -> Runtime {
    serve_with_policy(handler, None).await
}

/// A memory kernel serving `handler` in process under the policy bundle `policy`, set before
/// anything is delivered.
async fn serve_with_policy(handler: impl AgentHandler, policy: Option<&str>) -> Runtime {
    let rt = Runtime::open("memory").await.expect("open the runtime");
    let agent = rt.register(handler).await.expect("register the agent");
    if let Some(bundle) = policy {
        rt.kernel()
            .set_policy(agent.id(), bundle)
            .await
            .expect("set the policy");
    }
    rt.start();
    rt
}

async fn create(rt: &Runtime, agent: &str, input: Value) -> String {
    rt.kernel()
        .create_execution(CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(input),
            ..Default::default()
        })
        .await
        .expect("create the execution")
        .id
}

/// Polls until the execution reaches `done` (generous deadline: no timing is asserted).
async fn wait_until(rt: &Runtime, id: &str, done: impl Fn(&Execution) -> bool) -> Execution {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let e = rt.kernel().execution(id).await.expect("read the execution");
        if done(&e) {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "execution {id} never got there: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Creates an execution of `agent` and waits for it to end.
async fn run(rt: &Runtime, agent: &str, input: Value) -> Execution {
    let id = create(rt, agent, input).await;
    wait_until(rt, &id, |e| e.status.is_terminal()).await
}

async fn steps(rt: &Runtime, execution: &Execution) -> Vec<Step> {
    rt.kernel()
        .steps(&execution.id, false)
        .await
        .expect("read the steps")
}

// ---------------------------------------------------------------------------------------------
// A tool's call is one step whose args are keyed by parameter name; its body runs once.
// ---------------------------------------------------------------------------------------------

static ADD_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Adds two numbers.
///
/// The note is ignored.
#[rebuno::tool(name = "add_numbers")]
async fn add(left: i64, right: i64, note: Option<String>) -> Result<i64, std::io::Error> {
    ADD_RUNS.fetch_add(1, Ordering::SeqCst);
    let _ = note;
    Ok(left + right)
}

#[rebuno::agent(id = "adder")]
async fn adder(left: i64, right: i64) -> Result<Value, Error> {
    let sum = add(left, right, Some("hi".into())).await?;
    Ok(json!({ "sum": sum }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_one_step_keyed_by_parameter_name_and_runs_once() {
    let rt = serve(adder).await;
    let done = run(&rt, "adder", json!({"left": 2, "right": 3})).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!({"sum": 5})));
    assert_eq!(ADD_RUNS.load(Ordering::SeqCst), 1);

    let steps = steps(&rt, &done).await;
    assert_eq!(steps.len(), 1, "{steps:?}");
    let step = &steps[0];
    assert_eq!(step.kind, StepKind::ToolCall);
    assert_eq!(step.target, "add_numbers");
    assert_eq!(step.idempotency, Idempotency::SafeToRetry);
    assert_eq!(
        step.args,
        Some(json!({"left": 2, "right": 3, "note": "hi"}))
    );
    assert_eq!(step.status, StepStatus::Succeeded);
    assert_eq!(step.result, Some(json!(5)));
    rt.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// A tool's error becomes `Error::Tool` with its message and step id; `return` and `?` keep
// their meaning in the body.
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Declined(u64);

impl fmt::Display for Declined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "card declined for {} cents", self.0)
    }
}

#[rebuno::tool(idempotency = "at_most_once")]
async fn charge(cents: u64) -> Result<String, Declined> {
    if cents > 100 {
        return Err(Declined(cents));
    }
    Ok(format!("charged {cents}"))
}

#[rebuno::tool]
async fn parse_number(text: String) -> Result<u64, std::num::ParseIntError> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u64 = text.parse()?;
    Ok(n)
}

/// Reports each outcome instead of failing, so the test can look at the errors.
fn outcome<T: Serialize>(r: Result<T, Error>) -> Value {
    match r {
        Ok(v) => json!({ "ok": v }),
        Err(Error::Tool {
            tool_id,
            step_id,
            message,
            ..
        }) => json!({ "tool_id": tool_id, "step_id": step_id, "message": message }),
        Err(other) => json!({ "other": other.to_string() }),
    }
}

#[rebuno::agent(id = "charger")]
async fn charger(cents: u64) -> Result<Value, Error> {
    Ok(json!({
        "small": outcome(charge(5).await),
        "big": outcome(charge(cents).await),
        "parsed": [
            outcome(parse_number("12".into()).await),
            outcome(parse_number(String::new()).await),
            outcome(parse_number("x".into()).await),
        ],
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_is_a_tool_error_with_its_message_and_step_id() {
    let rt = serve(charger).await;
    let done = run(&rt, "charger", json!({"cents": 500})).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let out = done.output.clone().expect("an output");
    assert_eq!(out["small"], json!({"ok": "charged 5"}));
    assert_eq!(out["big"]["tool_id"], "charge");
    assert_eq!(out["big"]["message"], "card declined for 500 cents");
    assert_eq!(out["parsed"][0], json!({"ok": 12}));
    assert_eq!(out["parsed"][1], json!({"ok": 0}));
    assert_eq!(out["parsed"][2]["tool_id"], "parse_number");
    assert_eq!(out["parsed"][2]["message"], "invalid digit found in string");

    let steps = steps(&rt, &done).await;
    let failed = steps
        .iter()
        .find(|s| s.target == "charge" && s.status == StepStatus::Failed)
        .expect("the failed charge is recorded");
    assert_eq!(out["big"]["step_id"], failed.step_id.as_str());
    assert_eq!(failed.args, Some(json!({"cents": 500})));
    assert_eq!(failed.idempotency, Idempotency::AtMostOnce);
    assert_eq!(
        failed.error.as_ref().and_then(|e| e.get("message")),
        Some(&json!("card declined for 500 cents"))
    );
    rt.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Definitions: name, description, schema (schemars when the type has one, `{}` otherwise).
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Address {
    street: String,
    zip: Option<u32>,
}

/// Serde only: no `JsonSchema`, so any JSON is accepted.
#[derive(Debug, Serialize, Deserialize)]
struct Opaque(Value);

/// Ship a parcel.
#[rebuno::tool(name = "ship_parcel", idempotency = "at_most_once")]
async fn ship(to: Address, payload: Opaque, weight: Option<f64>) -> Result<(), std::io::Error> {
    let _ = (to, payload, weight);
    Ok(())
}

// The `idempotency` names `#[tool]` accepts are the runtime's wire names, and each one becomes
// the variant of that name.

#[rebuno::tool(idempotency = "safe_to_retry")]
async fn idempotency_safe() -> Result<(), std::io::Error> {
    Ok(())
}

#[rebuno::tool(idempotency = "at_most_once")]
async fn idempotency_once() -> Result<(), std::io::Error> {
    Ok(())
}

#[rebuno::tool]
async fn idempotency_default() -> Result<(), std::io::Error> {
    Ok(())
}

/// The name `#[tool]` was given for `v` and the definition it generated. The match is
/// exhaustive: a new `Idempotency` variant does not compile until it has a tool here, and so a
/// name the macro must accept.
fn declared_with(v: Idempotency) -> (&'static str, rebuno::ToolDef) {
    match v {
        Idempotency::SafeToRetry => ("safe_to_retry", idempotency_safe::definition()),
        Idempotency::AtMostOnce => ("at_most_once", idempotency_once::definition()),
    }
}

#[test]
fn idempotency_names_are_the_runtime_wire_names() {
    for v in [Idempotency::SafeToRetry, Idempotency::AtMostOnce] {
        let (name, def) = declared_with(v);
        assert_eq!(v.as_str(), name);
        assert_eq!(Idempotency::from_wire(name), v);
        assert_eq!(def.idempotency, v);
    }
    assert_eq!(
        idempotency_default::definition().idempotency,
        Idempotency::default()
    );
}

#[test]
fn definitions_carry_name_description_schema_and_idempotency() {
    let def = add::definition();
    assert_eq!(def.name, "add_numbers");
    assert_eq!(def.description, "Adds two numbers.\n\nThe note is ignored.");
    assert_eq!(def.idempotency, Idempotency::SafeToRetry);
    let params = &def.parameters;
    assert_eq!(params["type"], "object");
    assert_eq!(params["required"], json!(["left", "right"]));
    assert_eq!(params["additionalProperties"], json!(false));
    assert_eq!(params["properties"]["left"]["type"], "integer");
    assert_eq!(params["properties"]["right"]["type"], "integer");
    let note_type = &params["properties"]["note"]["type"];
    assert!(
        note_type
            .as_array()
            .is_some_and(|t| t.contains(&json!("string")) && t.contains(&json!("null"))),
        "an Option<String> is a nullable string: {note_type}"
    );
    // The trait's definition is the same one.
    assert_eq!(Tool::definition(&add::tool()), def);

    let ship = ship::definition();
    assert_eq!(ship.name, "ship_parcel");
    assert_eq!(ship.description, "Ship a parcel.");
    assert_eq!(ship.idempotency, Idempotency::AtMostOnce);
    assert_eq!(ship.parameters["required"], json!(["to", "payload"]));
    // `Address: JsonSchema`: the schemars schema, inlined.
    let to = &ship.parameters["properties"]["to"];
    assert_eq!(to["type"], "object", "{to}");
    assert_eq!(to["properties"]["street"]["type"], "string", "{to}");
    assert_eq!(to["required"], json!(["street"]), "{to}");
    // `Opaque` has no schema: any JSON.
    assert_eq!(ship.parameters["properties"]["payload"], json!({}));
    assert_eq!(
        ship.parameters["properties"]["weight"]["type"],
        json!(["number", "null"])
    );

    // A tool without a doc comment has an empty description.
    let charge = charge::definition();
    assert_eq!(charge.description, "");
    assert_eq!(charge.parameters["required"], json!(["cents"]));
}

// ---------------------------------------------------------------------------------------------
// JSON calls (what a model asks for).
// ---------------------------------------------------------------------------------------------

static STRICT_TOOL_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rebuno::tool]
async fn strict_tool(
    city: String,
    days: u8,
    units: Option<String>,
) -> Result<String, std::io::Error> {
    STRICT_TOOL_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{city} {days} {units:?}"))
}

#[tokio::test]
async fn call_json_reports_every_bad_argument_before_anything_runs() {
    let err = strict_tool::tool()
        .call_json(json!({"city": 7, "units": ["c"]}))
        .await
        .expect_err("bad arguments");
    let Error::InvalidInput(message) = &err else {
        panic!("expected InvalidInput, got {err:?}");
    };
    assert!(
        message.starts_with("arguments of tool `strict_tool`: "),
        "{message}"
    );
    assert!(message.contains("field `city`"), "{message}");
    assert!(message.contains("missing field `days`"), "{message}");
    assert!(message.contains("field `units`"), "{message}");
    assert!(err.failure_reason().starts_with("input_invalid:"), "{err}");

    let err = strict_tool::tool()
        .call_json(json!(["Paris", 3]))
        .await
        .expect_err("not an object");
    let Error::InvalidInput(message) = &err else {
        panic!("expected InvalidInput, got {err:?}");
    };
    assert!(
        message.starts_with("arguments of tool `strict_tool`: must be a JSON object, got an array"),
        "{message}"
    );

    // Good arguments bind, then the call needs an execution.
    let err = strict_tool::tool()
        .call_json(json!({"city": "Paris", "days": 3}))
        .await
        .expect_err("no execution");
    assert_eq!(err, Error::NoExecution);
    assert_eq!(STRICT_TOOL_RUNS.load(Ordering::SeqCst), 0);
}

/// Multiplies.
#[rebuno::tool]
async fn multiply(a: i64, b: i64) -> Result<i64, std::io::Error> {
    Ok(a * b)
}

#[rebuno::agent(id = "model-driven")]
async fn model_driven(call: Value) -> Result<Value, Error> {
    let tools = ToolSet::new().with(multiply::tool()).with(add::tool());
    tools.call("multiply", call).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_json_inside_an_execution_records_the_same_step_as_a_direct_call() {
    let rt = serve(model_driven).await;
    let done = run(&rt, "model-driven", json!({"a": 6, "b": 7})).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!(42)));
    let steps = steps(&rt, &done).await;
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].target, "multiply");
    assert_eq!(steps[0].kind, StepKind::ToolCall);
    assert_eq!(steps[0].args, Some(json!({"a": 6, "b": 7})));
    rt.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Handlers: input binding with one, several and no parameters.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Order {
    customer: String,
    cents: u64,
    express: Option<bool>,
}

#[derive(Debug)]
enum OrderError {
    Empty,
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderError::Empty => f.write_str("empty order"),
        }
    }
}

/// Takes an order.
#[rebuno::agent(id = "orders")]
async fn orders(order: Order) -> Result<Order, OrderError> {
    if order.cents == 0 {
        return Err(OrderError::Empty);
    }
    Ok(Order {
        customer: order.customer.to_uppercase(),
        ..order
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_parameter_receives_the_whole_input() {
    assert_eq!(orders.id(), "orders");
    assert_eq!(orders.description(), "Takes an order.");
    let schema = orders.input_schema();
    assert_eq!(schema["type"], "object", "{schema}");
    assert_eq!(schema["required"], json!(["customer", "cents"]), "{schema}");

    let rt = serve(orders).await;
    let done = run(&rt, "orders", json!({"customer": "c1", "cents": 500})).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(
        done.output,
        Some(json!({"customer": "C1", "cents": 500, "express": null}))
    );

    // The handler's own error fails the execution with its message.
    let failed = run(&rt, "orders", json!({"customer": "c1", "cents": 0})).await;
    assert_eq!(failed.status, ExecutionStatus::Failed);
    assert_eq!(failed.failure_reason, "agent_error: empty order");

    // An input that does not fit the one parameter.
    let bad = run(&rt, "orders", json!("not an order")).await;
    assert_eq!(bad.status, ExecutionStatus::Failed);
    assert!(
        bad.failure_reason.starts_with("input_invalid: input: "),
        "{}",
        bad.failure_reason
    );
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_parameters_receive_the_input_fields_by_name() {
    let schema = adder.input_schema();
    assert_eq!(schema["required"], json!(["left", "right"]), "{schema}");
    assert_eq!(schema["properties"]["left"]["type"], "integer", "{schema}");
    // `run` is the handler body, callable directly.
    let direct = adder::run(1, 2).await;
    assert_eq!(direct, Err(Error::NoExecution));
}

/// Answers a question.
#[rebuno::agent(id = "asker")]
async fn asker(question: String) -> rebuno::Result<String> {
    Ok(format!("you asked: {question}"))
}

/// Echoes its raw input.
#[rebuno::agent(id = "raw")]
async fn raw(input: serde_json::Value) -> rebuno::Result<serde_json::Value> {
    Ok(input)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_scalar_parameter_binds_its_field_and_a_value_takes_everything() {
    assert_eq!(asker.input_schema()["required"], json!(["question"]));
    let rt = serve(asker).await;
    let done = run(&rt, "asker", json!({"question": "why?"})).await;
    assert_eq!(done.output, Some(json!("you asked: why?")), "{done:?}");
    let missing = run(&rt, "asker", json!({"q": "why?"})).await;
    assert_eq!(missing.status, ExecutionStatus::Failed);
    assert!(
        missing.failure_reason.contains("missing field `question`"),
        "{}",
        missing.failure_reason
    );
    rt.shutdown().await;
    let rt = serve(raw).await;
    let done = run(&rt, "raw", json!({"a": [1, 2]})).await;
    assert_eq!(done.output, Some(json!({"a": [1, 2]})), "{done:?}");
    rt.shutdown().await;
}

static GREETER_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rebuno::agent(id = "greeter")]
async fn greeter() -> rebuno::Result<String> {
    GREETER_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok("hello".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_parameter_ignores_the_input() {
    assert_eq!(greeter.input_schema(), json!({}));
    assert_eq!(greeter.description(), "");
    let rt = serve(greeter).await;
    let done = run(&rt, "greeter", json!({"anything": [1, 2, 3]})).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!("hello")));
    let done = run(&rt, "greeter", Value::Null).await;
    assert_eq!(done.output, Some(json!("hello")));
    assert_eq!(GREETER_RUNS.load(Ordering::SeqCst), 2);
    rt.shutdown().await;
}

static STRICT_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rebuno::agent(id = "strict")]
async fn strict(customer: String, cents: u64, note: Option<String>) -> Result<String, Error> {
    STRICT_RUNS.fetch_add(1, Ordering::SeqCst);
    let _ = note;
    let charged = charge(cents).await?;
    Ok(format!("{customer}: {charged}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_input_fails_the_execution_naming_every_field_and_the_body_never_runs() {
    let rt = serve(strict).await;
    let done = run(&rt, "strict", json!({"customer": 5})).await;
    assert_eq!(done.status, ExecutionStatus::Failed, "{done:?}");
    let reason = &done.failure_reason;
    assert!(reason.starts_with("input_invalid: input: "), "{reason}");
    assert!(reason.contains("field `customer`"), "{reason}");
    assert!(reason.contains("missing field `cents`"), "{reason}");
    assert!(
        !reason.contains("note"),
        "an absent Option is fine: {reason}"
    );
    assert_eq!(STRICT_RUNS.load(Ordering::SeqCst), 0);
    assert!(steps(&rt, &done).await.is_empty());

    // The same handler with a good input runs (an absent `Option` field is `None`).
    let done = run(&rt, "strict", json!({"customer": "c1", "cents": 7})).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output, Some(json!("c1: charged 7")));
    assert_eq!(STRICT_RUNS.load(Ordering::SeqCst), 1);
    rt.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Outside an execution.
// ---------------------------------------------------------------------------------------------

static OUTSIDE_RUNS: AtomicUsize = AtomicUsize::new(0);

#[rebuno::tool]
async fn outside_tool(n: u32) -> Result<u32, std::io::Error> {
    OUTSIDE_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(n)
}

#[rebuno::step]
async fn outside_step() -> Result<u32, std::io::Error> {
    OUTSIDE_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(1)
}

#[tokio::test]
async fn tools_and_steps_outside_an_execution_return_no_execution() {
    assert_eq!(outside_tool(1).await, Err(Error::NoExecution));
    assert_eq!(outside_step().await, Err(Error::NoExecution));
    assert_eq!(OUTSIDE_RUNS.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// A step is recorded once and replayed on the next dispatch.
// ---------------------------------------------------------------------------------------------

static CLOCK_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Reads a "clock" that changes on every run, so a replay is visible.
#[rebuno::step(name = "clock")]
async fn clock() -> Result<u64, std::convert::Infallible> {
    let n = CLOCK_RUNS.fetch_add(1, Ordering::SeqCst) as u64;
    Ok(1000 + n)
}

#[rebuno::tool]
async fn gated(at: u64) -> Result<u64, std::io::Error> {
    Ok(at + 1)
}

#[rebuno::agent(id = "stepper")]
async fn stepper() -> Result<Value, Error> {
    let at = clock().await?;
    let next = gated(at).await?; // needs an approval: the first dispatch unwinds here
    Ok(json!({ "at": at, "next": next }))
}

const GATE: &str = "default_action: allow\nrules:\n  - id: gate\n    when: {target: gated}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_is_recorded_once_and_replayed_on_the_next_dispatch() {
    let rt = serve_with_policy(stepper, Some(GATE)).await;
    let id = create(&rt, "stepper", json!({})).await;
    wait_until(&rt, &id, |e| e.status == ExecutionStatus::Blocked).await;
    assert_eq!(CLOCK_RUNS.load(Ordering::SeqCst), 1);

    let approval = rt
        .kernel()
        .pending_approvals()
        .await
        .expect("list approvals")
        .into_iter()
        .find(|a| a.execution_id == id)
        .expect("the gated call waits on an approval");
    rt.kernel()
        .grant(&approval.id, "alice", "ok")
        .await
        .expect("grant");
    let done = wait_until(&rt, &id, |e| e.status.is_terminal()).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    // The second dispatch replayed the clock: same value, body not run again.
    assert_eq!(done.output, Some(json!({"at": 1000, "next": 1001})));
    assert_eq!(CLOCK_RUNS.load(Ordering::SeqCst), 1);

    let steps = steps(&rt, &done).await;
    let local: Vec<&Step> = steps.iter().filter(|s| s.kind == StepKind::Local).collect();
    assert_eq!(local.len(), 1, "{steps:?}");
    assert_eq!(local[0].target, "clock");
    assert_eq!(local[0].args, Some(json!({})));
    assert_eq!(local[0].result, Some(json!(1000)));
    rt.shutdown().await;
}
