//! The `/v0` API over real HTTP, end to end: the main flow on both stores (agents, policies,
//! executions, steps, approvals, events, dispatch over signed webhooks), and the probes and
//! metrics. Uses the shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// The main flow, on both backends.
// ---------------------------------------------------------------------------------------------

async fn main_flow(backend: Backend) {
    let api = Api::start(backend, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("greeter").await;
    api.register(&agent).await;
    let exec_id = api.create("greeter", json!({"name": "w"})).await;
    let exec_path = format!("/v0/executions/{exec_id}");

    let (payload, lease1) = agent.delivery().await;
    assert_eq!(payload.execution_id, exec_id);
    assert_eq!(lease1.attempt, 1);

    // The agent reads its execution (GET signs the empty body).
    let exec = api
        .agent(&agent, Method::GET, &exec_path, None, b"")
        .await
        .ok(200);
    assert_eq!(exec["input"], json!({"name": "w"}));

    // Submit a tool step, signed over the bytes exactly as sent (Python-style spacing).
    let submit = br#"{"kind": "tool_call", "target": "greet", "args": {"name": "w"}}"#;
    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease1),
            submit,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"));
    let step_id = d["step_id"].as_str().unwrap().to_owned();
    let args_hash = rebuno::identity::args_hash(br#"{"name": "w"}"#).unwrap();
    assert_eq!(
        step_id,
        rebuno::identity::step_id(&exec_id, "tool_call", "greet", &args_hash, 0)
    );
    let step_path = format!("{exec_path}/steps/{step_id}");

    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("{step_path}/complete"),
            Some(&lease1),
            br#"{"result": "hello w"}"#,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("recorded"));

    // Reads: the agent (HMAC) and a client (bearer).
    let step = api
        .agent(&agent, Method::GET, &step_path, None, b"")
        .await
        .ok(200);
    assert_eq!(
        (step["status"].clone(), step["result"].clone()),
        (json!("succeeded"), json!("hello w"))
    );
    let steps = api
        .agent(
            &agent,
            Method::GET,
            &format!("{exec_path}/steps"),
            None,
            b"",
        )
        .await
        .ok(200);
    assert_eq!(steps.as_array().unwrap().len(), 1);
    let terminal = api
        .get(&format!("{exec_path}/steps?status=terminal"))
        .await
        .ok(200);
    assert_eq!(terminal[0]["step_id"], json!(step_id));

    // Heartbeat renews the lease.
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/heartbeat"),
        Some(&lease1),
        b"",
    )
    .await
    .ok(204);

    // A re-delivery (as after a crash) is a new attempt that replays the step.
    assert_eq!(api.kernel.reclaim_for_test().await, 1);
    let (payload2, lease2) = agent.delivery().await;
    assert_eq!(payload2.dispatch_id, payload.dispatch_id);
    assert_eq!(lease2.attempt, 2);
    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease2),
            submit,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("replay"));
    assert_eq!(d["result"], json!("hello w"));
    assert_eq!(d["step_id"], json!(step_id));

    // The first attempt is fenced off.
    for (path, body) in [
        (format!("{exec_path}/steps"), &submit[..]),
        (format!("{exec_path}/heartbeat"), b""),
        (format!("{exec_path}/complete"), br#"{"output": 1}"#),
    ] {
        api.agent(&agent, Method::POST, &path, Some(&lease1), body)
            .await
            .err(409, "lease_superseded");
    }

    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/complete"),
        Some(&lease2),
        br#"{"output": {"greeting": "hello w"}}"#,
    )
    .await
    .ok(204);
    let exec = api.get(&exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("completed"));
    assert_eq!(exec["output"], json!({"greeting": "hello w"}));

    // Terminal: neither the agent nor a client can finish it again.
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/complete"),
        Some(&lease2),
        br#"{"output": 2}"#,
    )
    .await
    .err(409, "execution_terminal");
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/fail"),
        Some(&lease2),
        br#"{"error": "late"}"#,
    )
    .await
    .err(409, "execution_terminal");
    api.post_raw(&format!("{exec_path}/cancel"), Vec::new())
        .await
        .err(409, "execution_terminal");

    // Both deliveries were acknowledged; the log is the whole story.
    eventually("two dispatch.acked events", || async {
        api.event_types(&exec_id)
            .await
            .iter()
            .filter(|t| *t == "dispatch.acked")
            .count()
            == 2
    })
    .await;
    let types = api.event_types(&exec_id).await;
    let non_dispatch: Vec<&str> = types
        .iter()
        .map(String::as_str)
        .filter(|t| !t.starts_with("dispatch."))
        .collect();
    assert_eq!(
        non_dispatch,
        [
            "execution.created",
            "execution.started",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.succeeded",
            "execution.completed"
        ]
    );
    assert_eq!(types[2], "dispatch.queued");
    assert_eq!(types.iter().filter(|t| *t == "step.executing").count(), 1);

    // Paging of the event log: after_seq and limit; a bad after_seq reads as 0.
    let page = api
        .get(&format!("{exec_path}/events?after_seq=3&limit=2"))
        .await
        .ok(200);
    let seqs: Vec<u64> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [4, 5]);
    let all = api
        .get(&format!("{exec_path}/events?after_seq=oops&limit=zz"))
        .await
        .ok(200);
    assert_eq!(all.as_array().unwrap().len(), types.len());

    assert_eq!(agent.bad_signatures(), 0, "every webhook was signed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_flow_in_memory() {
    main_flow(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_flow_on_sqlite_file() {
    main_flow(Backend::SqliteFile).await;
}

// ---------------------------------------------------------------------------------------------
// Probes and metrics.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ready_and_metrics() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let health = send(api.bare(Method::GET, "/v0/health")).await;
    assert_eq!(health.ok(200), json!({"status": "ok"}));
    let ready = send(api.bare(Method::GET, "/v0/ready")).await;
    assert_eq!(ready.ok(200), json!({"status": "ready"}));

    let agent = TestAgent::spawn("measured").await;
    api.register(&agent).await;
    let exec_id = api.create("measured", json!(null)).await;
    api.post_raw(&format!("/v0/executions/{exec_id}/cancel"), Vec::new())
        .await
        .ok(204);
    api.create("measured", json!(null)).await;

    let metrics = send(api.bare(Method::GET, "/metrics")).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.content_type.starts_with("text/plain"));
    let text = String::from_utf8(metrics.body).unwrap();
    for line in [
        "# HELP rebuno_executions_created_total Executions created.",
        "# TYPE rebuno_executions_created_total counter",
        "rebuno_executions_created_total 2",
        "# TYPE rebuno_executions gauge",
        "rebuno_executions{status=\"running\"} 1",
        "rebuno_executions{status=\"cancelled\"} 1",
        "rebuno_executions{status=\"completed\"} 0",
        "# TYPE rebuno_queue_depth gauge",
        "# TYPE rebuno_replay_total counter",
        "rebuno_replay_total{hit=\"true\"} 0",
        "# TYPE rebuno_dispatch_outcomes_total counter",
        "# TYPE rebuno_dispatches_reclaimed_total counter",
        "# TYPE rebuno_policy_latency_seconds summary",
        "rebuno_policy_latency_seconds_count 0",
        "# TYPE rebuno_approval_wait_seconds summary",
        "# TYPE rebuno_steps_submitted_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // Every sample line is `name{labels} value` with a numeric value.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(name.starts_with("rebuno_"), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }

    // Unknown routes are not part of the API.
    assert_eq!(send(api.bare(Method::GET, "/v0/nope")).await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_reports_an_unreachable_store() {
    let store = Arc::new(Unreachable(SqliteStore::memory().unwrap()));
    let api = Api::with_store(store, None, None).await;
    let ready = send(api.bare(Method::GET, "/v0/ready")).await;
    assert_eq!(
        (ready.status, ready.json()),
        (503, json!({"status": "unavailable"}))
    );
    let health = send(api.bare(Method::GET, "/v0/health")).await;
    assert_eq!(health.status, 200);
}
