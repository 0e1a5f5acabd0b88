//! Kernel conformance, external resources: declare, bind, due entries on step decisions,
//! checkpoints with a step's outcome and on their own, a re-delivery dropping the binding for
//! a new generation that restores from the latest checkpoint, and every refusal changing
//! nothing. Each body runs on SQLite in memory and on a file, and on PostgreSQL (ignored unless
//! `REBUNO_TEST_PG_URL` is set).

use test_support::rebuno::kernel as harness;

use harness::*;
use rebuno::protocol::{
    BindResourceRequest, Capture, CaptureFailure, Checkpoints, DeclareResourceRequest,
    ResourceView, StepResource,
};
use rebuno::store::PgStore;

fn declare(key: &str, every_steps: u64) -> DeclareResourceRequest {
    DeclareResourceRequest {
        key: key.into(),
        driver_id: "dir".into(),
        configuration: json!({"root": "/tmp/work"}),
        coverage_reuse: false,
        every_steps,
        on_completion: true,
    }
}

fn captures(key: &str, generation: u64, checkpoint_ref: &str) -> Checkpoints {
    Checkpoints {
        captures: vec![Capture {
            key: key.into(),
            generation,
            checkpoint_ref: checkpoint_ref.into(),
        }],
        capture_failures: vec![],
    }
}

fn on(mut req: SubmitStepRequest, keys: &[&str]) -> SubmitStepRequest {
    req.resources = keys.iter().map(|k| k.to_string()).collect();
    req
}

fn entry(key: &str, generation: u64, due: bool) -> StepResource {
    StepResource {
        key: key.into(),
        generation,
        due,
    }
}

async fn view(env: &Env, exec: &str, lease: &Lease, req: DeclareResourceRequest) -> ResourceView {
    env.k.declare_resource(exec, lease, req).await.unwrap()
}

async fn refs(env: &Env, exec: &str) -> Vec<(u64, String, String)> {
    env.k
        .resource_checkpoints(exec, "sandbox", 100)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.generation, c.checkpoint_ref, c.error))
        .collect()
}

fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

/// A resource's whole life: declare, baseline, bind, due every second step, checkpoint with
/// the outcome, crash (re-delivery), restore from the latest checkpoint, and completion.
async fn lifecycle(env: Env) {
    env.agent("a", BUNDLE).await;
    let (exec, lease) = env.start("a").await;

    let mark = env.mark(&exec).await;
    let v = view(&env, &exec, &lease, declare("sandbox", 2)).await;
    assert_eq!(
        (
            v.generation,
            v.binding.clone(),
            v.checkpoint_ref.as_str(),
            v.covered
        ),
        (1, Value::Null, "", false)
    );
    assert_eq!((v.every_steps, v.on_completion), (2, true));
    assert_eq!(types(&env.since(&exec, mark).await), ["resource.declared"]);

    // The baseline and the binding, as the SDK sends them after creating the instance.
    let bind = BindResourceRequest {
        binding: json!({"path": "/tmp/work/1"}),
    };
    env.k
        .bind_resource(&exec, "sandbox", &lease, bind)
        .await
        .unwrap();
    env.k
        .publish_checkpoints(&exec, &lease, captures("sandbox", 1, "cp-0"))
        .await
        .unwrap();
    let v = view(&env, &exec, &lease, declare("sandbox", 2)).await;
    assert_eq!(v.binding, json!({"path": "/tmp/work/1"}));
    assert_eq!(
        (v.generation, v.checkpoint_ref.as_str(), v.covered),
        (1, "cp-0", true)
    );

    // Due after every second affecting step; an undeclared key is left out.
    let d = env
        .submit(
            &exec,
            &lease,
            on(tool("work", r#"{"n":1}"#), &["sandbox", "nope"]),
        )
        .await;
    assert_eq!(d.decision, Decision::Proceed);
    assert_eq!(d.resources, [entry("sandbox", 1, false)]);
    let s1 = d.step_id.unwrap();
    env.complete(&exec, &s1, &lease, json!(1)).await;
    let d = env
        .submit(&exec, &lease, on(tool("work", r#"{"n":2}"#), &["sandbox"]))
        .await;
    assert_eq!(d.resources, [entry("sandbox", 1, true)]);
    let s2 = d.step_id.unwrap();
    let mark = env.mark(&exec).await;
    let done = env
        .k
        .complete_step_with(
            &exec,
            &s2,
            &lease,
            Some(json!(2)),
            captures("sandbox", 1, "cp-2"),
        )
        .await
        .unwrap();
    assert_eq!(done.decision, Decision::Recorded);
    let events = env.since(&exec, mark).await;
    assert_eq!(types(&events), ["step.succeeded", "resource.checkpointed"]);
    assert_eq!(events[1].payload["checkpoint_ref"], "cp-2");
    assert_eq!(events[1].payload["step_id"], s2.as_str());
    // A step that does not name the resource counts nothing.
    let d = env.submit(&exec, &lease, tool("greet", r#"{"x":1}"#)).await;
    assert!(d.resources.is_empty());
    env.complete(&exec, d.step_id.as_deref().unwrap(), &lease, json!(0))
        .await;
    let d = env
        .submit(&exec, &lease, on(tool("work", r#"{"n":3}"#), &["sandbox"]))
        .await;
    assert_eq!(d.resources, [entry("sandbox", 1, false)]);
    env.complete(&exec, d.step_id.as_deref().unwrap(), &lease, json!(3))
        .await;
    let v = view(&env, &exec, &lease, declare("sandbox", 2)).await;
    assert!(!v.covered, "one affecting step since cp-2");

    // The worker dies: the next attempt of the dispatch gets a new generation, no binding, and
    // the latest checkpoint to restore from.
    let lease2 = env.redeliver(&exec, &lease).await;
    let mark = env.mark(&exec).await;
    let v = view(&env, &exec, &lease2, declare("sandbox", 2)).await;
    assert_eq!(
        (
            v.generation,
            v.binding.clone(),
            v.checkpoint_ref.as_str(),
            v.covered
        ),
        (2, Value::Null, "cp-2", false)
    );
    let events = env.since(&exec, mark).await;
    assert_eq!(types(&events), ["resource.declared"]);
    assert_eq!(events[0].payload["checkpoint_ref"], "cp-2");
    // Declaring again before binding keeps the generation.
    assert_eq!(
        view(&env, &exec, &lease2, declare("sandbox", 2))
            .await
            .generation,
        2
    );
    // The old worker is fenced out.
    let err = env
        .k
        .declare_resource(&exec, &lease, declare("sandbox", 2))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::LeaseSuperseded);
    // A replayed step names the new generation and is never due.
    let d = env
        .submit(&exec, &lease2, on(tool("work", r#"{"n":1}"#), &["sandbox"]))
        .await;
    assert_eq!(d.decision, Decision::Replay);
    assert_eq!(d.resources, [entry("sandbox", 2, false)]);
    // A capture of the dead generation is ignored; the restored instance's baseline counts.
    env.k
        .publish_checkpoints(&exec, &lease2, captures("sandbox", 1, "stale"))
        .await
        .unwrap();
    env.k
        .publish_checkpoints(&exec, &lease2, captures("sandbox", 2, "cp-restored"))
        .await
        .unwrap();
    let v = view(&env, &exec, &lease2, declare("sandbox", 2)).await;
    assert_eq!(
        (v.generation, v.checkpoint_ref.as_str(), v.covered),
        (2, "cp-restored", true)
    );

    // A failed capture is recorded, keeps the checkpoint, and leaves the next step due.
    let d = env
        .submit(&exec, &lease2, on(tool("work", r#"{"n":4}"#), &["sandbox"]))
        .await;
    let d2 = env
        .submit(&exec, &lease2, on(tool("work", r#"{"n":5}"#), &["sandbox"]))
        .await;
    assert_eq!(d2.resources, [entry("sandbox", 2, true)]);
    env.complete(&exec, d.step_id.as_deref().unwrap(), &lease2, json!(4))
        .await;
    let failure = Checkpoints {
        captures: vec![],
        capture_failures: vec![CaptureFailure {
            key: "sandbox".into(),
            generation: 2,
            error: "x".repeat(10_000),
        }],
    };
    env.k
        .fail_step_with(
            &exec,
            d2.step_id.as_deref().unwrap(),
            &lease2,
            Some(json!({"message": "boom"})),
            failure,
        )
        .await
        .unwrap();
    let d = env
        .submit(&exec, &lease2, on(tool("work", r#"{"n":6}"#), &["sandbox"]))
        .await;
    assert_eq!(d.resources, [entry("sandbox", 2, true)]);
    let history = refs(&env, &exec).await;
    let summary: Vec<(u64, &str, usize)> = history
        .iter()
        .map(|(g, r, e)| (*g, r.as_str(), e.len()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, "cp-0", 0),
            (1, "cp-2", 0),
            (2, "cp-restored", 0),
            (2, "", 4096)
        ]
    );
    let resources = env.k.resources(&exec).await.unwrap();
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0].checkpoint_ref, "cp-restored");
}

/// Every refusal: a clear error, and nothing recorded.
async fn refusals(env: Env) {
    env.agent("a", BUNDLE).await;
    let (exec, lease) = env.start("a").await;
    view(&env, &exec, &lease, declare("sandbox", 1)).await;
    let before = (
        env.mark(&exec).await,
        refs(&env, &exec).await,
        env.k.resources(&exec).await.unwrap(),
    );

    let bad_declares = [
        DeclareResourceRequest {
            key: String::new(),
            ..declare("x", 1)
        },
        DeclareResourceRequest {
            key: "k".repeat(256),
            ..declare("x", 1)
        },
        DeclareResourceRequest {
            key: "a/b".into(),
            ..declare("x", 1)
        },
        DeclareResourceRequest {
            driver_id: String::new(),
            ..declare("x", 1)
        },
        DeclareResourceRequest {
            configuration: json!("c".repeat(70_000)),
            ..declare("x", 1)
        },
        DeclareResourceRequest {
            every_steps: 1_000_001,
            ..declare("x", 1)
        },
    ];
    for req in bad_declares {
        let err = env
            .k
            .declare_resource(&exec, &lease, req)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationError, "{err:?}");
    }
    // One key is one resource: another driver or configuration is a conflict.
    let other = DeclareResourceRequest {
        driver_id: "docker".into(),
        ..declare("sandbox", 1)
    };
    assert_eq!(
        env.k
            .declare_resource(&exec, &lease, other)
            .await
            .unwrap_err()
            .code,
        ErrorCode::Conflict
    );
    let other = DeclareResourceRequest {
        configuration: json!({}),
        ..declare("sandbox", 1)
    };
    assert_eq!(
        env.k
            .declare_resource(&exec, &lease, other)
            .await
            .unwrap_err()
            .code,
        ErrorCode::Conflict
    );
    // Checkpoints naming an unknown key, a generation never handed out, or a bad ref.
    for cps in [
        captures("nope", 1, "r"),
        captures("sandbox", 2, "r"),
        captures("sandbox", 1, ""),
        captures("sandbox", 1, &"r".repeat(4097)),
    ] {
        let err = env
            .k
            .publish_checkpoints(&exec, &lease, cps)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationError, "{err:?}");
    }
    // ... and with a step's outcome: the step stays executing.
    let d = env
        .submit(&exec, &lease, on(tool("work", "{}"), &["sandbox"]))
        .await;
    let step = d.step_id.unwrap();
    let mark = env.mark(&exec).await;
    let err = env
        .k
        .complete_step_with(
            &exec,
            &step,
            &lease,
            Some(json!(1)),
            captures("sandbox", 9, "r"),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert_eq!(env.step(&exec, &step).await.status, StepStatus::Executing);
    assert_eq!(env.mark(&exec).await, mark);
    // Binding an undeclared key; submitting an invalid key.
    let bind = BindResourceRequest { binding: json!(1) };
    assert_eq!(
        env.k
            .bind_resource(&exec, "nope", &lease, bind)
            .await
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
    let err = env
        .submit_err(&exec, &lease, on(tool("work", r#"{"z":1}"#), &["bad/key"]))
        .await;
    assert_eq!(err.code, ErrorCode::ValidationError);
    // Too many resources.
    for i in 1..32 {
        view(&env, &exec, &lease, declare(&format!("r{i}"), 0)).await;
    }
    let err = env
        .k
        .declare_resource(&exec, &lease, declare("r32", 0))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert_eq!(env.k.resources(&exec).await.unwrap().len(), 32);
    let after_refs = refs(&env, &exec).await;
    assert_eq!(after_refs, before.1, "no checkpoint was recorded");
    let sandbox = env
        .k
        .resources(&exec)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.key == "sandbox")
        .unwrap();
    assert_eq!(sandbox.driver_id, before.2[0].driver_id);
    assert_eq!(sandbox.generation, before.2[0].generation);
    assert_eq!(sandbox.checkpoint_ref, "");
    // A terminal execution refuses a declare.
    env.k
        .complete_execution(&exec, &lease, Some(json!("done")))
        .await
        .unwrap();
    let err = env
        .k
        .declare_resource(&exec, &lease, declare("sandbox", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code,
            ErrorCode::ExecutionTerminal | ErrorCode::LeaseSuperseded
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_resource_checkpoints_and_restores_after_a_redelivery() {
    each_backend(config(), lifecycle).await;
}

#[tokio::test]
async fn invalid_resource_calls_are_refused_and_change_nothing() {
    each_backend(config(), refusals).await;
}

/// A kernel on a fresh PostgreSQL schema.
async fn pg_env() -> Env {
    let options = test_support::pg::options(&test_support::pg::unique_name("kernel_res", ""));
    let store = PgStore::connect(options).await.unwrap();
    let clock = Arc::new(ManualClock::new(t0()));
    let config = config();
    Env {
        k: build(Arc::new(store), &clock, &config).await,
        clock,
        config,
        backend: Backend::Postgres,
        db: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn postgres_a_resource_checkpoints_and_restores_after_a_redelivery() {
    lifecycle(pg_env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn postgres_invalid_resource_calls_are_refused_and_change_nothing() {
    refusals(pg_env().await).await;
}

/// A kernel restart in the middle (SQLite file): the restart reclaims the attempt, and the
/// re-delivered attempt's declare starts a new generation that restores from the checkpoint
/// taken before the restart, with the resource's policy and step count kept.
#[tokio::test]
async fn a_resource_restores_from_its_checkpoint_after_a_kernel_restart() {
    file_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        view(&env, &exec, &lease, declare("sandbox", 1)).await;
        let bind = BindResourceRequest {
            binding: json!({"path": "/tmp/work/1"}),
        };
        env.k
            .bind_resource(&exec, "sandbox", &lease, bind)
            .await
            .unwrap();
        let d = env
            .submit(&exec, &lease, on(tool("work", r#"{"n":1}"#), &["sandbox"]))
            .await;
        assert_eq!(d.resources, [entry("sandbox", 1, true)]);
        env.k
            .complete_step_with(
                &exec,
                &d.step_id.unwrap(),
                &lease,
                Some(json!(1)),
                captures("sandbox", 1, "cp-1"),
            )
            .await
            .unwrap();
        let env = env.restart().await;
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.execution_id, exec);
        let lease = claimed.lease();
        assert_eq!(lease.attempt, 2);
        let v = view(&env, &exec, &lease, declare("sandbox", 1)).await;
        assert_eq!(
            (v.generation, v.binding, v.checkpoint_ref.as_str()),
            (2, Value::Null, "cp-1"),
            "a new instance, restored from the checkpoint"
        );
        // The recorded step replays; the next one is due again for the new generation.
        let d = env
            .submit(&exec, &lease, on(tool("work", r#"{"n":1}"#), &["sandbox"]))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        let d = env
            .submit(&exec, &lease, on(tool("work", r#"{"n":2}"#), &["sandbox"]))
            .await;
        assert_eq!(d.resources, [entry("sandbox", 2, true)]);
    })
    .await;
}

/// A fork restores each resource from the original's latest checkpoint at or before its
/// `at_seq`: its `restoration` names it, and its first declare starts a new generation that
/// restores from it. Forked before any checkpoint, the resource starts fresh.
#[tokio::test]
async fn a_fork_restores_resources_from_the_checkpoint_at_its_sequence_number() {
    each_backend(config(), fork_restores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn postgres_a_fork_restores_resources_from_the_checkpoint_at_its_sequence_number() {
    fork_restores(pg_env().await).await;
}

async fn fork_restores(env: Env) {
    env.agent("a", BUNDLE).await;
    let (exec, lease) = env.start("a").await;
    view(&env, &exec, &lease, declare("sandbox", 1)).await;
    let before_any = env.events(&exec).await.last().unwrap().event_seq;
    let bind = BindResourceRequest {
        binding: json!({"path": "/tmp/work/1"}),
    };
    env.k
        .bind_resource(&exec, "sandbox", &lease, bind)
        .await
        .unwrap();
    env.k
        .publish_checkpoints(&exec, &lease, captures("sandbox", 1, "cp-1"))
        .await
        .unwrap();
    let after_first = env.events(&exec).await.last().unwrap().event_seq;
    env.k
        .publish_checkpoints(&exec, &lease, captures("sandbox", 1, "cp-2"))
        .await
        .unwrap();
    let admin = rebuno::protocol::Principal::admin();
    let at = |seq: u64| rebuno::protocol::ForkExecutionRequest {
        at_seq: seq as i64,
        session: "fork".into(),
        ..Default::default()
    };

    let fork = env.k.fork(&exec, at(after_first), &admin).await.unwrap();
    assert_eq!(
        fork.restoration,
        Some(json!({"sandbox": {"generation": 1, "checkpoint_ref": "cp-1"}}))
    );
    let claimed = env.k.claim_dispatches(16).await.unwrap();
    let fl = claimed
        .iter()
        .find(|c| c.dispatch.execution_id == fork.id)
        .unwrap()
        .lease();
    let v = view(&env, &fork.id, &fl, declare("sandbox", 1)).await;
    assert_eq!(
        (v.generation, v.binding, v.checkpoint_ref.as_str()),
        (2, Value::Null, "cp-1")
    );
    // The original is untouched.
    let v = view(&env, &exec, &lease, declare("sandbox", 1)).await;
    assert_eq!(v.checkpoint_ref, "cp-2");

    let fresh = rebuno::protocol::ForkExecutionRequest {
        session: "fresh".into(),
        ..at(before_any)
    };
    let fresh = env.k.fork(&exec, fresh, &admin).await.unwrap();
    assert_eq!(fresh.restoration, None);
    let claimed = env.k.claim_dispatches(16).await.unwrap();
    let l = claimed
        .iter()
        .find(|c| c.dispatch.execution_id == fresh.id)
        .unwrap()
        .lease();
    let v = view(&env, &fresh.id, &l, declare("sandbox", 1)).await;
    assert_eq!((v.generation, v.checkpoint_ref.as_str()), (1, ""));
}
