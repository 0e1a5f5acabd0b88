//! Remote actions: dispatch through the pinned durable function (call id, version,
//! timeout, target groups), the worker's reload from the registry and its re-checks, each with
//! its exact refusal, and refusals or timeouts ending in `action.failed`.

mod agent_support;

use agent_support::*;
use receipt::agent::*;
use receipt::{Error, Result, Runtime};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Remembers every call, then forwards it.
struct Recording {
    inner: Arc<dyn RemoteDispatcher>,
    calls: Mutex<Vec<RemoteCall>>,
}

#[async_trait]
impl RemoteDispatcher for Recording {
    async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult> {
        self.calls.lock().unwrap().push(call.clone());
        self.inner.dispatch(call).await
    }
}

fn remote_spec(version: &str) -> AgentSpec<TestAgent> {
    AgentSpec::builder("remote-agent", version, TestAgent)
        .action(
            Action::<TestAgent>::tool("charge")
                .side_effects(SideEffects::External)
                .execution(ExecutionMode::Remote)
                .target_group("payments")
                .when(|v: &TaskView| v.prompt.is_some() && v.notes.is_empty())
                .run(|_agent, ctx| async move {
                    // The invocation id is the downstream idempotency key.
                    let key = ctx.invocation_id().to_owned();
                    ctx.emit(Task::Note { text: key }).await
                }),
        )
        .action(
            Action::<TestAgent>::action("summarize")
                .side_effects(SideEffects::Query)
                .execution(ExecutionMode::Remote)
                .when(|v: &TaskView| !v.notes.is_empty() && v.results.is_empty())
                .run(|_agent, ctx| async move {
                    let n = ctx.view().notes.len();
                    ctx.emit(Task::Completed {
                        result: format!("{n} charge(s)"),
                    })
                    .await
                }),
        )
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap()
}

struct Setup {
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    worker: Arc<RemoteWorker>,
    recording: Arc<Recording>,
}

fn setup(worker_version: &str) -> Setup {
    let runtime = memory_runtime();
    let registry = Arc::new(Registry::new());
    registry
        .register(Arc::new(remote_spec(worker_version)))
        .unwrap();
    let worker = Arc::new(RemoteWorker::new(
        Arc::clone(&registry),
        Arc::clone(&runtime),
    ));
    let recording = Arc::new(Recording {
        inner: Arc::new(InProcessDispatcher::new(Arc::clone(&worker))),
        calls: Mutex::default(),
    });
    Setup {
        runtime,
        registry,
        worker,
        recording,
    }
}

#[tokio::test]
async fn remote_actions_run_through_the_pinned_function() {
    let s = setup("1.0.0");
    seed(&s.runtime, STREAM, "charge it").await;
    let spec = s.registry.get("remote-agent").unwrap();
    assert_eq!(spec.version(), "1.0.0");
    assert_eq!(spec.seed_type(), Some("task.requested"));
    let controller = Controller::new(Arc::clone(&s.runtime), Arc::new(remote_spec("1.0.0")))
        .dispatcher(Arc::clone(&s.recording) as Arc<dyn RemoteDispatcher>)
        .default_group("general");
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        types(&s.runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.selected",
            "action.started",
            "action.output.manifest",
            "note.added",
            "action.completed",
            "action.selected",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    let calls = s.recording.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    let started = bodies(&s.runtime, STREAM, "action.started").await;
    let chain = s.runtime.read(STREAM).await.unwrap();
    for (call, claim) in calls.iter().zip(&started) {
        assert_eq!(call.function, "receipt.agent.action.execute");
        assert_eq!(call.version, 2);
        assert_eq!(call.timeout_ms, 120_000);
        assert_eq!(call.call_id, str_of(claim, "invocationId"));
        assert_eq!(call.payload.invocation.invocation_id, call.call_id);
        assert_eq!(call.payload.claim_id, str_of(claim, "claimId"));
        assert_eq!(call.payload.invocation.agent_id, "remote-agent");
        assert_eq!(call.payload.invocation.agent_version, "1.0.0");
        assert_eq!(call.payload.invocation.run_stream, STREAM);
        assert_eq!(call.payload.invocation.execution, ExecutionMode::Remote);
        assert_eq!(call.payload.policy_version, "runtime-policy-v2");
        assert_eq!(call.payload.scheduler_policy_version, "scheduler-v2");
        assert_eq!(claim["execution"], "remote");
    }
    assert_eq!(calls[0].target_group, "payments");
    assert_eq!(calls[0].payload.invocation.kind, ActionKind::Tool);
    assert_eq!(
        calls[1].target_group, "general",
        "falls back to the default group"
    );
    // The first call selected at the head after run.started.
    assert_eq!(
        calls[0].payload.invocation.selected_head.as_deref(),
        Some(chain[1].hash())
    );
    // The worker's output went through the controller: the idempotency key is the invocation.
    assert_eq!(
        one(&s.runtime, STREAM, "note.added").await["text"],
        calls[0].call_id
    );
    assert_eq!(
        one(&s.runtime, STREAM, "task.completed").await["result"],
        "1 charge(s)"
    );
    // The payload's wire shape.
    let wire = serde_json::to_value(&calls[0]).unwrap();
    for key in [
        "agentId",
        "agentVersion",
        "runId",
        "runStream",
        "selectionId",
        "invocationId",
        "selectedHead",
        "actionId",
        "kind",
        "execution",
        "index",
        "claimId",
        "claimOwnerId",
        "policyVersion",
        "schedulerPolicyVersion",
    ] {
        assert!(wire["payload"].get(key).is_some(), "payload lacks {key}");
    }
    assert_eq!(wire["callId"], calls[0].call_id);
    assert_eq!(wire["timeoutMs"], 120_000);
}

/// Runs one remote selection with a recording dispatcher that never answers, and returns the
/// call the controller made (a valid payload to tamper with).
async fn a_real_call(s: &Setup) -> RemoteCall {
    struct Never(Mutex<Vec<RemoteCall>>);
    #[async_trait]
    impl RemoteDispatcher for Never {
        async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult> {
            self.0.lock().unwrap().push(call);
            std::future::pending().await
        }
    }
    seed(&s.runtime, STREAM, "charge it").await;
    let never = Arc::new(Never(Mutex::default()));
    let controller = Controller::new(Arc::clone(&s.runtime), Arc::new(remote_spec("1.0.0")))
        .dispatcher(Arc::clone(&never) as Arc<dyn RemoteDispatcher>)
        .remote_timeout(Duration::from_millis(50));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(err.to_string(), "remote action timed out");
    let failed = one(&s.runtime, STREAM, "action.failed").await;
    assert_eq!(failed["error"], "remote action timed out");
    assert_eq!(
        one(&s.runtime, STREAM, "run.failed").await["error"],
        "remote action timed out"
    );
    let call = never.0.lock().unwrap()[0].clone();
    assert_eq!(call.timeout_ms, 50);
    call
}

#[tokio::test]
async fn the_worker_rechecks_everything_with_its_own_refusals() {
    let s = setup("1.0.0");
    let call = a_real_call(&s).await;
    // The untouched call passes every check of the spec, and then finds that its invocation
    // failed (it timed out): the worker refuses it and the action does not run.
    assert_eq!(
        s.worker.handle(call.clone()).await.unwrap_err().to_string(),
        format!(
            "remote action 'charge' refused: invocation '{}' has already ended (action.failed)",
            call.payload.invocation.invocation_id
        )
    );

    let refuse = |edit: &dyn Fn(&mut RemoteCall)| {
        let mut c = call.clone();
        edit(&mut c);
        let worker = Arc::clone(&s.worker);
        async move { worker.handle(c).await.unwrap_err().to_string() }
    };
    assert_eq!(
        refuse(&|c| c.payload.invocation.agent_id = "nope".into()).await,
        "agent spec 'nope' does not support remote execution"
    );
    assert_eq!(
        refuse(&|c| c.payload.invocation.agent_version = "2.0.0".into()).await,
        "remote action 'charge' requires remote-agent@2.0.0, but the worker loaded remote-agent@1.0.0"
    );
    assert_eq!(
        refuse(&|c| c.payload.invocation.selected_head = Some("deadbeef".into())).await,
        "remote action 'charge' selected head 'deadbeef' is unavailable"
    );
    assert_eq!(
        refuse(&|c| c.payload.invocation.action_id = "refund".into()).await,
        "unknown action 'refund' for agent 'remote-agent'"
    );
    assert_eq!(
        refuse(&|c| c.payload.invocation.kind = ActionKind::Assistant).await,
        "remote action 'charge' no longer matches selected kind/execution provenance"
    );
    assert_eq!(
        refuse(&|c| c.payload.invocation.execution = ExecutionMode::Local).await,
        "remote action 'charge' no longer matches selected kind/execution provenance"
    );
    // At the root the prompt is not there yet, so `when` is false.
    assert_eq!(
        refuse(&|c| c.payload.invocation.selected_head = None).await,
        "remote action 'charge' is no longer runnable at its selected head"
    );
    assert_eq!(
        refuse(&|c| c.version = 1).await,
        "remote function 'receipt.agent.action.execute' version 1 is not served here (this worker serves receipt.agent.action.execute version 2)"
    );
    // Checks run in order: an unknown action with a bad head reports the head.
    assert_eq!(
        refuse(&|c| {
            c.payload.invocation.action_id = "refund".into();
            c.payload.invocation.selected_head = Some("gone".into());
        })
        .await,
        "remote action 'refund' selected head 'gone' is unavailable"
    );

    // A spec registered for local runs only does not serve remote calls.
    let local_only = Arc::new(Registry::new());
    local_only
        .register_local(Arc::new(remote_spec("1.0.0")))
        .unwrap();
    let worker = RemoteWorker::new(local_only, Arc::clone(&s.runtime));
    assert_eq!(
        worker.handle(call.clone()).await.unwrap_err().to_string(),
        "agent spec 'remote-agent' does not support remote execution"
    );
    assert_eq!(
        s.registry
            .register(Arc::new(remote_spec("9")))
            .unwrap_err()
            .to_string(),
        "agent 'remote-agent' is already registered"
    );
}

#[tokio::test]
async fn a_refusal_fails_the_action_and_the_run() {
    // The worker has another version of the spec than the controller selected with.
    let s = setup("2.0.0");
    seed(&s.runtime, STREAM, "charge it").await;
    let controller = Controller::new(Arc::clone(&s.runtime), Arc::new(remote_spec("1.0.0")))
        .dispatcher(Arc::clone(&s.recording) as Arc<dyn RemoteDispatcher>);
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    let msg = "remote action 'charge' requires remote-agent@1.0.0, but the worker loaded remote-agent@2.0.0";
    assert_eq!(err.to_string(), msg);
    assert_eq!(
        types(&s.runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.selected",
            "action.started",
            "action.failed",
            "run.failed",
        ]
    );
    assert_eq!(one(&s.runtime, STREAM, "action.failed").await["error"], msg);
}

#[tokio::test]
async fn target_groups_route_calls_and_unknown_groups_are_refused() {
    let s = setup("1.0.0");
    seed(&s.runtime, STREAM, "charge it").await;
    // Only the `payments` group is served: `summarize` (default group) has nowhere to go, and
    // the run is refused before anything is written.
    let dispatcher = InProcessDispatcher::empty().serve("payments", Arc::clone(&s.worker));
    let controller = Controller::new(Arc::clone(&s.runtime), Arc::new(remote_spec("1.0.0")))
        .dispatcher(Arc::new(dispatcher));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "remote action 'summarize' runs in target group 'receipt-chat', which the controller's dispatcher does not serve"
    );
    assert_eq!(types(&s.runtime, STREAM).await, ["task.requested"]);
    // A dispatcher that cannot tell answers yes, and the call itself is refused.
    let err = InProcessDispatcher::empty()
        .dispatch(a_call_for("receipt-chat"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no remote worker serves target group 'receipt-chat'"
    );
    // Both groups served: `charge` in `payments`, `summarize` in the default group.
    let dispatcher = InProcessDispatcher::empty()
        .serve("payments", Arc::clone(&s.worker))
        .serve("receipt-chat", Arc::clone(&s.worker));
    let controller = Controller::new(Arc::clone(&s.runtime), Arc::new(remote_spec("1.0.0")))
        .dispatcher(Arc::new(dispatcher));
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
}

/// A call for target group `group` (its payload names nothing that exists).
fn a_call_for(group: &str) -> RemoteCall {
    let payload: RemotePayload = serde_json::from_value(json!({
        "agentId": "remote-agent", "agentVersion": "1.0.0", "runId": RUN_ID,
        "runStream": STREAM, "selectionId": "s", "invocationId": "i", "actionId": "summarize",
        "kind": "action", "execution": "remote", "index": 0, "claimId": "c",
        "claimOwnerId": "o", "policyVersion": "runtime-policy-v2",
        "schedulerPolicyVersion": "scheduler-v2"
    }))
    .unwrap();
    RemoteCall::new(payload, group, 1_000)
}

#[tokio::test]
async fn remote_output_is_checked_like_emitted_output() {
    struct Forged;
    #[async_trait]
    impl RemoteDispatcher for Forged {
        async fn dispatch(&self, _call: RemoteCall) -> Result<RemoteResult> {
            Ok(RemoteResult {
                outputs: vec![json!({"type": "run.completed", "note": "goal satisfied"})],
            })
        }
    }
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "x").await;
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(remote_spec("1.0.0")))
        .dispatcher(Arc::new(Forged));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "action 'charge' cannot emit control receipt type 'run.completed'"
    );
    assert!(bodies(&runtime, STREAM, "run.completed").await.is_empty());

    // No dispatcher at all.
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "x").await;
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(remote_spec("1.0.0")));
    let err: Error = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "remote action 'charge' needs a RemoteDispatcher, and the controller has none"
    );
    assert_eq!(types(&runtime, STREAM).await, ["task.requested"]);
}

#[tokio::test]
async fn the_registry_runs_erased_specs() {
    let s = setup("1.0.0");
    seed(&s.runtime, STREAM, "charge it").await;
    let agent = s.registry.get("remote-agent").unwrap();
    assert_eq!(agent.action_ids(), ["charge", "summarize"]);
    let options = ControllerOptions {
        dispatcher: Some(Arc::clone(&s.recording) as Arc<dyn RemoteDispatcher>),
        ..ControllerOptions::default()
    };
    let outcome = agent
        .run(Arc::clone(&s.runtime), options, RUN_ID, STREAM)
        .await
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(s.registry.ids(), ["remote-agent"]);
    assert!(s.registry.get("missing").is_none());
}

/// A spec whose remote action `slow` sleeps `ms`, then completes the task.
fn slow_spec(ms: u64) -> Arc<AgentSpec<TestAgent>> {
    Arc::new(
        AgentSpec::builder("slow-agent", "1.0.0", TestAgent)
            .action(
                Action::<TestAgent>::tool("slow")
                    .execution(ExecutionMode::Remote)
                    .when(|v: &TaskView| v.prompt.is_some() && v.results.is_empty())
                    .run(move |_agent, ctx| async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        let result = format!("attempt {}", ctx.attempt());
                        ctx.emit(Task::Completed { result }).await
                    }),
            )
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    )
}

/// A controller `owner` of [`slow_spec`] with a 300 ms lease, served in process.
fn slow_controller(runtime: &Arc<Runtime>, owner: &str, ms: u64) -> Controller<TestAgent> {
    let registry = Arc::new(Registry::new());
    registry.register(slow_spec(ms)).unwrap();
    let worker = Arc::new(RemoteWorker::new(registry, Arc::clone(runtime)));
    Controller::new(Arc::clone(runtime), slow_spec(ms))
        .owner_id(owner)
        .lease(Duration::from_millis(300))
        .dispatcher(Arc::new(InProcessDispatcher::new(worker)))
}

#[tokio::test]
async fn a_remote_call_keeps_its_claim_alive_while_it_runs() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "slow").await;
    let a = slow_controller(&runtime, "a", 1_000);
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    // Two leases past the claim: only its heartbeats keep it live.
    tokio::time::sleep(Duration::from_millis(650)).await;
    let b = slow_controller(&runtime, "b", 1_000).live_claims(LiveClaims::Return);
    let busy = b.run(RUN_ID, STREAM).await.unwrap();
    assert!(
        matches!(&busy, RunOutcome::Busy { reason } if reason.contains("claimed by 'a'")),
        "{busy:?}"
    );
    assert_eq!(running.await.unwrap().unwrap(), RunOutcome::Completed);

    let started = one(&runtime, STREAM, "action.started").await;
    assert_eq!(
        one(&runtime, STREAM, "task.completed").await["result"],
        "attempt 1"
    );
    let chain = runtime.read(STREAM).await.unwrap();
    let beats: Vec<_> = chain
        .iter()
        .filter(|r| r.event_type() == "action.heartbeat")
        .collect();
    assert!(beats.len() >= 2, "{} heartbeat(s)", beats.len());
    let mut expiry = started["leaseExpiresAt"].as_i64().unwrap();
    for (n, beat) in beats.iter().enumerate() {
        let body = beat.body();
        assert_eq!(body["claimId"], started["claimId"]);
        assert_eq!(body["invocationId"], started["invocationId"]);
        assert_eq!(body["actionId"], "slow");
        assert_eq!(body["attempt"], 1);
        let until = body["leaseExpiresAt"].as_i64().unwrap();
        assert!(until > expiry, "each heartbeat extends the lease");
        expiry = until;
        assert_eq!(
            beat.event_id(),
            Some(format!("{}:heartbeat:1:{}", str_of(&started, "invocationId"), n + 1).as_str())
        );
    }
    // The renewals stopped with the call: none after the output was bound.
    let manifest = chain
        .iter()
        .position(|r| r.event_type() == "action.output.manifest")
        .unwrap();
    assert!(
        chain[manifest..]
            .iter()
            .all(|r| r.event_type() != "action.heartbeat")
    );
}

#[tokio::test]
async fn a_dead_owner_stops_renewing_and_its_claim_is_taken_over() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "slow").await;
    let a = slow_controller(&runtime, "a", 60_000);
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    tokio::time::sleep(Duration::from_millis(450)).await;
    running.abort(); // the owner dies mid-call
    let _ = running.await;
    let renewed = bodies(&runtime, STREAM, "action.heartbeat").await.len();
    assert!(renewed >= 1, "it renewed while it lived");
    // A waiting controller takes over once the last renewal lapses.
    let b = slow_controller(&runtime, "b", 10);
    assert_eq!(b.run(RUN_ID, STREAM).await.unwrap(), RunOutcome::Completed);
    let attempts: Vec<_> = bodies(&runtime, STREAM, "action.started")
        .await
        .iter()
        .map(|s| (s["claimOwnerId"].clone(), s["attempt"].clone()))
        .collect();
    assert_eq!(attempts, [(json!("a"), json!(1)), (json!("b"), json!(2))]);
    assert_eq!(
        one(&runtime, STREAM, "task.completed").await["result"],
        "attempt 2"
    );
}
