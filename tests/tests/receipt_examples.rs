//! The example agents (`examples::receipt_agents`) under a pinned clock, pinned entropy and a
//! pinned claim owner, on a `MemoryStore`:
//!
//! - each run's control-receipt trace (types in chain order, with the fields that say what
//!   happened) equals its snapshot in `tests/snapshots/receipt_examples/<agent>.json`;
//! - every id, hash and derived field is checked against how it is derived (selection,
//!   invocation, claim and merge ids, control receipt fields, output manifest hashes, event
//!   ids), so the snapshot is right, not just stable;
//! - two runs produce the same receipts, bit for bit (ids, timestamps, hashes, bodies, hints).
//!
//! `UPDATE_SNAPSHOTS=1 cargo test --test receipt_examples` rewrites the snapshots; a missing
//! snapshot is written and the test fails, so a new one is always read and reviewed before it
//! is committed.

use examples::fake_llm;
use examples::receipt_agents::{
    self, assistant_tool::AssistantTool, hello::HelloAgent, human_loop::HumanLoop,
    merge::MergeAgent,
};
use receipt::agent::{
    AgentSpec, AgentTypes, Controller, ControllerOptions, DEFAULT_RUNTIME_POLICY_VERSION,
    RunOutcome, SCHEDULER_POLICY_VERSION, content_hash, invocation_id, merge_id, selection_id,
};
use receipt::sim::{FixedClock, SeededEntropy};
use receipt::{Command, MemoryStore, Receipt, Runtime};
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// 2026-01-01T00:00:00Z; the clock advances 1 ms per read.
const START_MS: i64 = 1_767_225_600_000;
const SEED: u64 = 0x5EED_2026;
const OWNER: &str = "example-owner";
const RUN_ID: &str = "run_example";

fn pinned_runtime() -> Arc<Runtime> {
    Arc::new(
        Runtime::new(Arc::new(MemoryStore::new()))
            .with_clock(Arc::new(FixedClock::new(START_MS, 1)))
            .with_entropy(Arc::new(SeededEntropy::new(SEED))),
    )
}

fn controller<A: AgentTypes>(runtime: &Arc<Runtime>, spec: AgentSpec<A>) -> Controller<A> {
    let options = ControllerOptions {
        owner_id: Some(OWNER.to_owned()),
        ..ControllerOptions::default()
    };
    Controller::with_options(Arc::clone(runtime), Arc::new(spec), options)
}

fn stream(agent: &str) -> String {
    format!("agents/{agent}/runs/{RUN_ID}")
}

/// One run of an example: its chain and what each pass returned.
struct Run {
    chain: Vec<Receipt>,
    outcomes: Vec<RunOutcome>,
}

async fn run_to_end<A: AgentTypes>(agent: &str, spec: AgentSpec<A>, prompt: &str) -> Run {
    let rt = pinned_runtime();
    let stream = stream(agent);
    receipt_agents::seed(&rt, RUN_ID, &stream, prompt)
        .await
        .unwrap();
    let outcome = controller(&rt, spec).run(RUN_ID, &stream).await.unwrap();
    Run {
        chain: rt.read(&stream).await.unwrap(),
        outcomes: vec![outcome],
    }
}

async fn hello() -> Run {
    run_to_end("hello-agent", HelloAgent.spec().unwrap(), "say hello").await
}

async fn merge() -> Run {
    run_to_end("merge", MergeAgent.spec().unwrap(), "plan the launch").await
}

async fn assistant() -> Run {
    let llm = fake_llm::serve().await.unwrap();
    let spec = AssistantTool::new(Some(llm.base_url.clone()))
        .spec()
        .unwrap();
    let run = run_to_end("assistant-tool", spec, "write a haiku about receipts").await;
    assert_eq!(llm.calls(), 1, "one model call");
    run
}

/// Blocks, gets the human's answer (what `receipt append` would write), completes.
async fn human() -> Run {
    let rt = pinned_runtime();
    let stream = stream("human-loop");
    receipt_agents::seed(&rt, RUN_ID, &stream, "ship the release notes")
        .await
        .unwrap();
    let controller = controller(&rt, HumanLoop.spec().unwrap());
    let first = controller.run(RUN_ID, &stream).await.unwrap();
    let answer = json!({"type": "approval.received", "approved": true, "by": "ops"});
    rt.execute(&stream, Command::new(vec![answer]))
        .await
        .unwrap();
    let second = controller.run(RUN_ID, &stream).await.unwrap();
    Run {
        chain: rt.read(&stream).await.unwrap(),
        outcomes: vec![first, second],
    }
}

/// The snapshot of a run: the outcomes, and per receipt its type plus the fields of the
/// control receipts that say what happened.
fn trace(run: &Run) -> Value {
    const FIELDS: [&str; 13] = [
        "actionId",
        "actionIds",
        "selectionId",
        "invocationId",
        "invocationIds",
        "reason",
        "outputCount",
        "contentHash",
        "note",
        "error",
        "mergeId",
        "candidateId",
        "attempt",
    ];
    let receipts: Vec<Value> = run
        .chain
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut entry = Map::new();
            entry.insert("index".into(), json!(i));
            entry.insert("type".into(), json!(r.event_type()));
            let control = receipt::agent::control::is_control_type(r.event_type());
            if control {
                for key in FIELDS {
                    if let Some(v) = r.body().get(key) {
                        entry.insert(key.into(), v.clone());
                    }
                }
                if r.body().get("inlineSelection").is_some() {
                    entry.insert("inlineSelection".into(), json!(true));
                }
            }
            Value::Object(entry)
        })
        .collect();
    json!({
        "outcomes": run.outcomes.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "receipts": receipts,
    })
}

fn snapshot_path(agent: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("snapshots")
        .join("receipt_examples")
        .join(format!("{agent}.json"))
}

/// The snapshot file's text: pretty JSON with one receipt per line.
fn render(snapshot: &Value) -> String {
    let line = |v: &Value| serde_json::to_string(v).unwrap();
    let outcomes: Vec<String> = snapshot["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(line)
        .collect();
    let receipts: Vec<String> = snapshot["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(line)
        .collect();
    format!(
        "{{\n  \"outcomes\": [{}],\n  \"receipts\": [\n    {}\n  ]\n}}\n",
        outcomes.join(", "),
        receipts.join(",\n    ")
    )
}

/// Compares `actual` with the stored snapshot (written when missing or when
/// `UPDATE_SNAPSHOTS=1`; a missing one fails the test so it gets reviewed).
fn assert_snapshot(agent: &str, actual: &Value) {
    let path = snapshot_path(agent);
    let pretty = render(actual);
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1");
    match std::fs::read_to_string(&path) {
        Ok(stored) if !update => {
            let expected: Value = serde_json::from_str(&stored)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            assert!(
                &expected == actual,
                "{agent}: the control-receipt trace differs from {}\n--- stored\n{stored}\n--- actual\n{pretty}",
                path.display()
            );
        }
        found => {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &pretty).unwrap();
            assert!(
                found.is_ok(),
                "{agent}: wrote a new snapshot to {}; review it and run again",
                path.display()
            );
        }
    }
}

/// Everything a receipt is, for the bit-for-bit comparison of two runs.
fn exact(chain: &[Receipt]) -> Vec<Value> {
    chain
        .iter()
        .map(|r| {
            json!({
                "id": r.id(), "ts": r.ts(), "prev": r.prev(), "hash": r.hash(),
                "body": r.body(), "hints": r.hints(),
                "context": r.context().map(|c| serde_json::to_value(c).unwrap()),
            })
        })
        .collect()
}

fn s<'a>(r: &'a Receipt, key: &str) -> &'a str {
    r.body()[key]
        .as_str()
        .unwrap_or_else(|| panic!("{} has no string {key}: {}", r.event_type(), r.body()))
}

/// Checks the chain against the spec's derivations: it verifies; every selection id, invocation
/// id, claim, manifest hash and merge id is derived from its inputs as the agent runtime derives
/// it; every control receipt has its deterministic event id; an inline claim is the only record of its selection; `goal.completed` never appears.
fn check_by_spec(agent: &str, chain: &[Receipt], merge_policy: Option<(&str, &str)>) {
    receipt::verify(chain).unwrap();
    let version = "1.0.0";
    let sel_id = |head: Option<&str>, ids: &[String]| {
        selection_id(
            RUN_ID,
            agent,
            version,
            DEFAULT_RUNTIME_POLICY_VERSION,
            SCHEDULER_POLICY_VERSION,
            head,
            ids,
        )
    };
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(chain.iter().all(|r| r.event_type() != "goal.completed"));
    for (i, r) in chain.iter().enumerate() {
        let b = r.body();
        let event_id = r.event_id();
        match r.event_type() {
            "run.started" => {
                assert_eq!(event_id, Some(format!("{RUN_ID}:run.started").as_str()));
                assert_eq!(b["agentId"], agent);
                assert_eq!(b["agentVersion"], version);
                assert_eq!(b["policyVersion"], "runtime-policy-v2");
                assert_eq!(b["schedulerPolicyVersion"], "scheduler-v2");
            }
            "action.selected" => {
                let action_ids = ids(&b["actionIds"]);
                let sel = sel_id(r.prev(), &action_ids);
                assert_eq!(s(r, "selectionId"), sel);
                assert_eq!(b["selectedHead"].as_str(), r.prev());
                assert_eq!(event_id, Some(format!("{sel}:selected").as_str()));
                let invs: Vec<String> = action_ids
                    .iter()
                    .enumerate()
                    .map(|(k, a)| invocation_id(&sel, a, k))
                    .collect();
                assert_eq!(ids(&b["invocationIds"]), invs);
            }
            "action.started" => {
                let sel = s(r, "selectionId");
                let action = s(r, "actionId");
                let index = b["index"].as_u64().unwrap() as usize;
                let inv = s(r, "invocationId");
                assert_eq!(inv, invocation_id(sel, action, index));
                let attempt = b["attempt"].as_u64().unwrap() as u32;
                assert_eq!(event_id, Some(format!("{inv}:started:{attempt}").as_str()));
                assert_eq!(b["claimOwnerId"], OWNER);
                assert_eq!(
                    s(r, "claimId"),
                    receipt::agent::claim_id(inv, OWNER, attempt)
                );
                // The runtime clock at the claim plus the default lease (300 000 ms).
                let lease_end = b["leaseExpiresAt"].as_i64().unwrap();
                assert!(
                    lease_end > r.ts() && lease_end <= r.ts() + 300_000,
                    "{lease_end}"
                );
                if let Some(inline) = b.get("inlineSelection") {
                    // Selected and claimed in one receipt: one local non-human action.
                    assert_eq!(inline["selectionId"], sel);
                    assert_eq!(ids(&inline["actionIds"]), [action]);
                    assert_eq!(inline["selectedHead"].as_str(), r.prev());
                    assert_eq!(sel, sel_id(r.prev(), &[action.to_owned()]));
                    assert_ne!(b["kind"], "human");
                    assert_eq!(b["execution"], "local");
                } else {
                    // The selection was recorded earlier by action.selected.
                    assert!(
                        chain[..i]
                            .iter()
                            .any(|p| p.event_type() == "action.selected"
                                && p.body()["selectionId"] == sel)
                    );
                }
            }
            "action.output.manifest" | "merge.output.manifest" => {
                let count = b["outputCount"].as_u64().unwrap() as usize;
                let outputs: Vec<Value> = chain[i + 1..i + 1 + count]
                    .iter()
                    .map(|o| o.body().clone())
                    .collect();
                assert!(
                    outputs
                        .iter()
                        .all(|o| !receipt::agent::control::is_control_type(
                            o["type"].as_str().unwrap()
                        ))
                );
                assert_eq!(s(r, "contentHash"), content_hash(&outputs).unwrap());
                let (owner, kind) = if r.event_type() == "merge.output.manifest" {
                    (s(r, "mergeId"), "merge")
                } else {
                    (s(r, "invocationId"), "invocation")
                };
                assert_eq!(event_id, Some(format!("{owner}:manifest").as_str()));
                // The outputs follow the manifest under `<owner>:output`.
                let first = chain[i + 1].event_id().unwrap();
                assert!(first.starts_with(&format!("{owner}:output")), "{first}");
                if kind == "invocation" {
                    let done = &chain[i + 1 + count];
                    assert_eq!(done.event_type(), "action.completed");
                    assert_eq!(done.body()["outputCount"], count as u64);
                    assert_eq!(done.event_id(), Some(format!("{owner}:completed").as_str()));
                }
            }
            "human.requested" | "human.responded" => {
                let inv = s(r, "invocationId");
                assert_eq!(inv, invocation_id(s(r, "selectionId"), s(r, "actionId"), 0));
                if r.event_type() == "human.requested" {
                    assert_eq!(event_id, Some(format!("{inv}:human.requested").as_str()));
                }
            }
            "run.blocked" => {
                assert_eq!(
                    b["reason"],
                    "waiting for a correlated response to human action 'approve'"
                );
            }
            "run.completed" => {
                assert_eq!(b["note"], "goal satisfied");
                assert_eq!(i, chain.len() - 1, "run.completed is terminal");
            }
            "merge.started" => {
                let (policy, policy_version) = merge_policy.expect("a merge policy");
                assert_eq!(b["policyId"], policy);
                assert_eq!(b["policyVersion"], policy_version);
                assert_eq!(b["head"].as_str(), r.prev());
                let mid = merge_id(RUN_ID, agent, version, policy, policy_version, r.prev());
                assert_eq!(s(r, "mergeId"), mid);
            }
            _ => {}
        }
    }
}

fn types(chain: &[Receipt]) -> Vec<&str> {
    chain.iter().map(Receipt::event_type).collect()
}

/// Runs `scenario` twice: the snapshot matches, the spec checks pass, and both runs wrote the
/// same receipts.
async fn check<F, Fut>(agent: &str, merge_policy: Option<(&str, &str)>, scenario: F) -> Run
where
    F: Fn() -> Fut,
    Fut: Future<Output = Run>,
{
    let first = scenario().await;
    let second = scenario().await;
    assert_eq!(
        exact(&first.chain),
        exact(&second.chain),
        "{agent}: two pinned runs differ"
    );
    assert_eq!(first.outcomes, second.outcomes);
    check_by_spec(agent, &first.chain, merge_policy);
    assert_snapshot(agent, &trace(&first));
    first
}

#[tokio::test]
async fn hello_agent_trace() {
    let run = check("hello-agent", None, hello).await;
    assert_eq!(run.outcomes, [RunOutcome::Completed]);
    assert_eq!(
        types(&run.chain),
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
    assert_eq!(run.chain[0].event_id(), Some("seed:run_example"));
    assert_eq!(run.chain[4].body()["result"], "Hello! You asked: say hello");
}

#[tokio::test]
async fn human_loop_trace() {
    let run = check("human-loop", None, human).await;
    assert_eq!(
        run.outcomes,
        [
            RunOutcome::Blocked {
                reason: "waiting for a correlated response to human action 'approve'".into()
            },
            RunOutcome::Completed
        ]
    );
    assert_eq!(
        types(&run.chain),
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
    // One invocation throughout: requested, responded, claimed and completed.
    let inv = &run.chain[3].body()["invocationId"];
    for i in [2, 6, 7, 8, 10] {
        let b = run.chain[i].body();
        assert!(
            b["invocationId"] == *inv || b["invocationIds"][0] == *inv,
            "{i}: {b}"
        );
    }
    assert_eq!(
        run.chain[9].body()["result"],
        "approved by ops: ship the release notes"
    );
}

#[tokio::test]
async fn merge_trace() {
    let run = check("merge", Some(("best-draft", "1")), merge).await;
    assert_eq!(run.outcomes, [RunOutcome::Completed]);
    assert_eq!(
        types(&run.chain),
        [
            "task.requested",
            "run.started",
            "action.started",
            "action.output.manifest",
            "candidate.generated",
            "candidate.generated",
            "candidate.generated",
            "action.completed",
            "merge.started",
            "merge.selected",
            "merge.output.manifest",
            "draft.finalized",
            "merge.applied",
            "run.completed",
        ]
    );
    let selected = run.chain[9].body();
    assert_eq!(selected["candidateId"], "outline");
    assert_eq!(
        selected["scores"],
        json!([
            {"candidateId": "echo", "score": {"coverage": 1.0, "steps": 0.0, "words": 3.0}},
            {"candidateId": "outline", "score": {"coverage": 1.0, "steps": 3.0, "words": 12.0}},
            {"candidateId": "ramble", "score": {"coverage": 1.0, "steps": 0.0, "words": 16.0}},
        ])
    );
    let finalized = run.chain[11].body();
    assert_eq!(finalized["candidateId"], "outline");
    assert_eq!(finalized["text"], run.chain[5].body()["text"]);
    for i in [9, 10, 12] {
        assert_eq!(
            run.chain[i].body()["mergeId"],
            run.chain[8].body()["mergeId"]
        );
    }
    assert_eq!(
        run.chain[11].event_id(),
        Some(
            format!(
                "{}:output",
                run.chain[8].body()["mergeId"].as_str().unwrap()
            )
            .as_str()
        )
    );
}

#[tokio::test]
async fn assistant_tool_trace() {
    let run = check("assistant-tool", None, assistant).await;
    assert_eq!(run.outcomes, [RunOutcome::Completed]);
    assert_eq!(
        types(&run.chain),
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
    assert_eq!(run.chain[2].body()["kind"], "assistant");
    assert_eq!(
        run.chain[4].body(),
        &json!({
            "type": "task.completed",
            "result": "Drafted reply: write a haiku about receipts",
            "model": "gpt-4o-mini"
        })
    );
}

#[tokio::test]
async fn the_registry_holds_the_five_agents() {
    let registry = receipt_agents::registry(None);
    assert_eq!(
        registry.ids(),
        [
            "assistant-tool",
            "hello-agent",
            "human-loop",
            "merge",
            "remote-notify"
        ]
    );
    for id in registry.ids() {
        assert_eq!(
            registry.get(&id).unwrap().seed_type(),
            Some("task.requested")
        );
    }
    // Without a model endpoint, assistant-tool's action fails, and so does the run.
    let rt = pinned_runtime();
    let stream = stream("assistant-tool");
    receipt_agents::seed(&rt, RUN_ID, &stream, "x")
        .await
        .unwrap();
    let agent = registry.get("assistant-tool").unwrap();
    let err = agent
        .run(
            Arc::clone(&rt),
            ControllerOptions::default(),
            RUN_ID,
            &stream,
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "assistant-tool has no model endpoint configured"
    );
    let chain = rt.read(&stream).await.unwrap();
    assert_eq!(
        types(&chain)[chain.len() - 2..],
        ["action.failed", "run.failed"]
    );
}

/// `remote-notify` through an embedded rebuno kernel: its `external` action runs on the
/// worker of group `notify` (registered on the kernel's runtime), dispatched through the
/// kernel; the send is one recorded step and the notification lands once. Without a dispatcher
/// the action cannot run.
#[tokio::test]
async fn remote_notify_runs_its_action_through_a_kernel() {
    use examples::receipt_agents::remote_notify::{self, RemoteNotify};
    use receipt::kernel::{KernelDispatcher, KernelWorker};
    let stream = stream("remote-notify");
    let alone = pinned_runtime();
    receipt_agents::seed(&alone, RUN_ID, &stream, "x")
        .await
        .unwrap();
    let err = controller(&alone, RemoteNotify.spec().unwrap())
        .run(RUN_ID, &stream)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("needs a RemoteDispatcher"),
        "{err}"
    );

    // The outbox is shared by every run on this machine (and the pinned ids repeat from run
    // to run): look at the lines this run adds.
    let outbox = || {
        std::fs::read_to_string(remote_notify::outbox())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap_or_default())
            .collect::<Vec<Value>>()
    };
    let before = outbox().len();
    let kernel = rebuno::Runtime::open("sqlite::memory:").await.unwrap();
    let receipts = pinned_runtime();
    let worker = KernelWorker::new(receipt_agents::registry(None), Arc::clone(&receipts))
        .group(remote_notify::GROUP);
    kernel
        .register_with(worker.builder().unwrap())
        .await
        .unwrap();
    kernel.start();
    receipt_agents::seed(&receipts, RUN_ID, &stream, "the deploy finished")
        .await
        .unwrap();
    let outcome = controller(&receipts, RemoteNotify.spec().unwrap())
        .dispatcher(Arc::new(KernelDispatcher::new(kernel.client())))
        .run(RUN_ID, &stream)
        .await
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    let chain = receipts.read(&stream).await.unwrap();
    let sent: Vec<&Receipt> = chain
        .iter()
        .filter(|r| r.event_type() == "notification.sent")
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body()["message"], "notice: the deploy finished");
    // The outbox (shared by every run on this machine, and the pinned ids repeat from run to
    // run): this run added one line with its invocation's key.
    let started = chain
        .iter()
        .find(|r| r.event_type() == "action.started")
        .unwrap();
    let key = s(started, "invocationId");
    let added = outbox().split_off(before);
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0]["key"], key);
    let executions = kernel
        .client()
        .list_all(rebuno::client::ListOptions::new().agent_id("receipt-worker-notify"))
        .await
        .unwrap();
    assert_eq!(executions.len(), 1);
    let steps = kernel.client().steps(&executions[0].id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].target, "send_notification");
}
