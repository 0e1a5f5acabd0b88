//! Shared fixtures of the agent tests: a receipt set, a view over it, an agent type, a few
//! actions, and helpers to read control-receipt traces.

#![allow(dead_code)]

use receipt::agent::{Action, AgentSpec, AgentTypes, AgentView, ReceiptSet};
use receipt::{Command, MemoryStore, Receipt, Runtime};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

/// The receipts the test agents emit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Task {
    #[serde(rename = "task.requested")]
    Requested { prompt: String },
    #[serde(rename = "task.completed")]
    Completed { result: String },
    #[serde(rename = "note.added")]
    Note { text: String },
    #[serde(rename = "approval.received", rename_all = "camelCase")]
    Approval {
        invocation_id: String,
        approved: bool,
    },
}

impl ReceiptSet for Task {
    const TYPES: &'static [&'static str] = &[
        "task.requested",
        "task.completed",
        "note.added",
        "approval.received",
    ];
    fn type_name(&self) -> &'static str {
        match self {
            Task::Requested { .. } => "task.requested",
            Task::Completed { .. } => "task.completed",
            Task::Note { .. } => "note.added",
            Task::Approval { .. } => "approval.received",
        }
    }
}

/// The view: the prompt, results, notes, approvals by invocation, and how many receipts of
/// any kind were folded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskView {
    pub prompt: Option<String>,
    pub results: Vec<String>,
    pub notes: Vec<String>,
    pub approvals: Vec<(String, bool)>,
    pub receipts: usize,
    pub control: usize,
    pub completed_actions: usize,
}

impl AgentView for TaskView {
    fn apply(&mut self, r: &Receipt) {
        self.receipts += 1;
        let b = r.body();
        let s = |k: &str| {
            b.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match r.event_type() {
            "task.requested" => self.prompt = Some(s("prompt")),
            "task.completed" => self.results.push(s("result")),
            "note.added" => self.notes.push(s("text")),
            "approval.received" => self.approvals.push((
                s("invocationId"),
                b.get("approved").and_then(Value::as_bool).unwrap_or(false),
            )),
            t if receipt::agent::control::is_control_type(t) => {
                self.control += 1;
                self.completed_actions += usize::from(t == "action.completed");
            }
            _ => {}
        }
    }
}

/// The agent type every test spec uses.
pub struct TestAgent;

impl AgentTypes for TestAgent {
    type Receipts = Task;
    type View = TaskView;
}

pub const RUN_ID: &str = "run_x";
pub const STREAM: &str = "agents/test-agent/runs/run_x";

pub fn memory_runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(Arc::new(MemoryStore::new())))
}

/// Seeds the run stream with `task.requested` (event id `seed:<runId>`, as the CLI does).
pub async fn seed(runtime: &Runtime, stream: &str, prompt: &str) {
    runtime
        .execute(
            stream,
            Command::new(vec![json!({"type": "task.requested", "prompt": prompt})])
                .event_id(format!("seed:{RUN_ID}")),
        )
        .await
        .unwrap();
}

/// Appends one domain receipt from outside the controller.
pub async fn append(runtime: &Runtime, stream: &str, body: Value) {
    runtime
        .execute(stream, Command::new(vec![body]))
        .await
        .unwrap();
}

/// The event types of the chain, in order.
pub async fn types(runtime: &Runtime, stream: &str) -> Vec<String> {
    runtime
        .read(stream)
        .await
        .unwrap()
        .iter()
        .map(|r| r.event_type().to_owned())
        .collect()
}

/// The bodies of every receipt of type `ty`.
pub async fn bodies(runtime: &Runtime, stream: &str, ty: &str) -> Vec<Value> {
    runtime
        .read(stream)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.event_type() == ty)
        .map(|r| r.body().clone())
        .collect()
}

/// The one body of type `ty` (panics unless there is exactly one).
pub async fn one(runtime: &Runtime, stream: &str, ty: &str) -> Value {
    let mut all = bodies(runtime, stream, ty).await;
    assert_eq!(all.len(), 1, "expected one {ty}, found {all:?}");
    all.pop().unwrap()
}

pub fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// The `complete` action: runs once a prompt is seeded and emits `task.completed`.
pub fn complete_action() -> Action<TestAgent> {
    Action::<TestAgent>::action("complete")
        .when(|v: &TaskView| v.prompt.is_some() && v.results.is_empty())
        .run(|_agent, ctx| async move {
            let prompt = ctx.view().prompt.clone().unwrap_or_default();
            ctx.emit(Task::Completed {
                result: format!("done: {prompt}"),
            })
            .await
        })
}

/// A spec whose only action is [`complete_action`] and whose goal is a result.
pub fn basic_spec() -> Arc<AgentSpec<TestAgent>> {
    Arc::new(
        AgentSpec::builder("test-agent", "1.0.0", TestAgent)
            .action(complete_action())
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    )
}

/// The human action `approve`: responded once an `approval.received` correlated with its
/// invocation is in the view; its run records the view it ran with in `ran_with`.
pub fn approve_action(ran_with: Arc<std::sync::Mutex<Option<TaskView>>>) -> Action<TestAgent> {
    Action::<TestAgent>::human("approve")
        .when(|v: &TaskView| v.results.is_empty())
        .response_when(|ctx| {
            ctx.view()
                .approvals
                .iter()
                .any(|(inv, _)| inv == ctx.invocation_id())
        })
        .run(move |_agent, ctx| {
            let ran_with = Arc::clone(&ran_with);
            async move {
                let approved = ctx
                    .view()
                    .approvals
                    .iter()
                    .any(|(inv, ok)| inv == ctx.invocation_id() && *ok);
                *ran_with.lock().unwrap() = Some(ctx.view().clone());
                ctx.emit(Task::Completed {
                    result: format!("approved={approved}"),
                })
                .await
            }
        })
}
