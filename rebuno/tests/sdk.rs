//! The agent SDK end to end: every scenario runs twice, against a kernel over real HTTP (signed
//! webhook in, signed requests out) and against an embedded kernel (direct calls), and must
//! behave the same.
//!
//! The harness is in `test_support::rebuno::sdk`.

use test_support::rebuno::counting;
use test_support::rebuno::sdk as harness;

use counting::Counting;
use harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_and_resume_runs_every_effect_exactly_once() {
    for mode in MODES {
        let (a, s, b) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let crashed = Arc::new(AtomicBool::new(false));
        let at_crash_point = Arc::new(AtomicBool::new(false));
        let (tool_a, tool_b) = (counting_tool("lookup", &a), counting_tool("notify", &b));
        let (s2, crashed2, point2) = (
            Arc::clone(&s),
            Arc::clone(&crashed),
            Arc::clone(&at_crash_point),
        );
        let handler = handler_fn("resumer", move |input: Value| {
            let (tool_a, tool_b, s, crashed, point) = (
                tool_a.clone(),
                tool_b.clone(),
                Arc::clone(&s2),
                Arc::clone(&crashed2),
                Arc::clone(&point2),
            );
            async move {
                let found = tool_a.call(json!({"q": input["q"]})).await?;
                let pick: u64 = rebuno::step("pick", (), || async {
                    Ok::<_, Error>(40 + s.fetch_add(1, Ordering::SeqCst) as u64 + 2)
                })
                .await?;
                if !crashed.swap(true, Ordering::SeqCst) {
                    // The pick's result waits to go with the next submission; sent now, so the
                    // crash finds it recorded (unsent, the pick would run again on resume, as
                    // `safe_to_retry` allows: see `kernel_durability`).
                    rebuno::execution()?.flush().await?;
                    point.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await; // "crash" here: aborted from outside
                }
                let sent = tool_b.call(json!({"pick": pick})).await?;
                Ok::<_, Error>(json!({"found": found["run"], "pick": pick, "sent": sent["run"]}))
            }
        });
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({"q": "invoice 7"})).await;
        wait_for("the crash point", || at_crash_point.load(Ordering::SeqCst)).await;
        h.agent.abort_all(); // the process dies mid-handler
        assert_eq!(h.kernel.reclaim_for_test().await, 1, "{mode:?}");
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        assert_eq!(
            done.output,
            Some(json!({"found": 1, "pick": 42, "sent": 1})),
            "{mode:?}"
        );
        assert_eq!(
            (
                a.load(Ordering::SeqCst),
                s.load(Ordering::SeqCst),
                b.load(Ordering::SeqCst)
            ),
            (1, 1, 1),
            "{mode:?}: every effect ran exactly once"
        );
        use EffectOutcome::{Ran, Replayed};
        assert_eq!(h.outcomes("lookup"), [Ran, Replayed], "{mode:?}");
        assert_eq!(h.outcomes("pick"), [Ran, Replayed], "{mode:?}");
        assert_eq!(h.outcomes("notify"), [Ran], "{mode:?}");
    }
}

const APPROVAL_POLICY: &str = r#"
default_action: allow
rules:
  - id: refunds
    priority: 1
    when: {target: refund}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], timeout: 5m, message: "refund?"}
"#;

/// A handler: lookup, then refund (approval-gated); a denial comes back in the output.
fn refund_handler(lookup: rebuno::DynTool, refund: rebuno::DynTool) -> impl AgentHandler {
    handler_fn("refunder", move |_input: Value| {
        let (lookup, refund) = (lookup.clone(), refund.clone());
        async move {
            let order = lookup.call(json!({"order": 7})).await?;
            match refund.call(json!({"order": 7, "cents": 500})).await {
                Ok(r) => Ok::<_, Error>(json!({"order": order["run"], "refund": r["run"]})),
                Err(Error::Policy { reason, rule_id }) => {
                    Ok(json!({"order": order["run"], "denied": reason, "rule": rule_id}))
                }
                Err(e) => Err(e),
            }
        }
    })
}

/// A refund run blocked on its approval: the harness, the execution and the two tools' run
/// counters (lookup, refund).
async fn blocked_on_refund(mode: Mode) -> (Harness, String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (l, r) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let h = harness(
        mode,
        refund_handler(counting_tool("lookup", &l), counting_tool("refund", &r)),
        true,
    )
    .await;
    h.set_policy(APPROVAL_POLICY).await;
    let id = h.create(json!({})).await;
    h.wait_status(&id, ExecutionStatus::Blocked).await;
    (h, id, l, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_blocks_the_run_and_a_grant_resumes_it() {
    for mode in MODES {
        let (h, id, l, r) = blocked_on_refund(mode).await;
        assert_eq!(
            r.load(Ordering::SeqCst),
            0,
            "{mode:?}: blocked body never ran"
        );
        let approvals = h.kernel.pending_approvals().await.unwrap();
        assert_eq!(approvals.len(), 1, "{mode:?}");
        let err = h
            .kernel
            .grant(&approvals[0].id, "mallory", "")
            .await
            .unwrap_err();
        assert_eq!(err.code, rebuno::protocol::ErrorCode::Forbidden);
        h.kernel
            .grant(&approvals[0].id, "alice", "ok")
            .await
            .unwrap();
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        assert_eq!(
            done.output,
            Some(json!({"order": 1, "refund": 1})),
            "{mode:?}"
        );
        assert_eq!((l.load(Ordering::SeqCst), r.load(Ordering::SeqCst)), (1, 1));
        assert_eq!(
            h.outcomes("lookup"),
            [EffectOutcome::Ran, EffectOutcome::Replayed],
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_approval_reaches_the_handler_as_a_policy_error() {
    for mode in MODES {
        let (h, id, _, r) = blocked_on_refund(mode).await;
        let approval = h.kernel.pending_approvals().await.unwrap().remove(0);
        h.kernel
            .deny(&approval.id, "alice", "too large")
            .await
            .unwrap();
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        let out = done.output.unwrap();
        assert_eq!(out["order"], 1, "{mode:?}");
        assert!(
            out["denied"].as_str().unwrap().contains("too large"),
            "{mode:?}: {out}"
        );
        // The spec records an approver's denial with its reason only (no rule id).
        assert_eq!(out["rule"], "", "{mode:?}: {out}");
        assert_eq!(
            r.load(Ordering::SeqCst),
            0,
            "{mode:?}: a denied body never runs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_denial_carries_reason_and_rule_and_an_uncaught_one_fails_the_run() {
    for mode in MODES {
        let runs = Arc::new(AtomicUsize::new(0));
        let shell = counting_tool("shell", &runs);
        let handler = handler_fn("sheller", move |input: Value| {
            let shell = shell.clone();
            async move {
                let res = shell.call(json!({"cmd": "rm -rf /"})).await;
                if input["catch"] == true {
                    let Err(Error::Policy { reason, rule_id }) = res else {
                        return Err(Error::Other(format!("expected a denial: {res:?}")));
                    };
                    return Ok(json!({"reason": reason, "rule": rule_id}));
                }
                res
            }
        });
        let h = harness(mode, handler, true).await;
        h.set_policy(
            r#"
default_action: allow
rules:
  - id: no-shell
    priority: 1
    when: {target: shell}
    then: {decision: deny, reason: "shell is forbidden"}
"#,
        )
        .await;
        let caught = h.create(json!({"catch": true})).await;
        let done = h.wait_status(&caught, ExecutionStatus::Completed).await;
        assert_eq!(
            done.output,
            Some(json!({"reason": "shell is forbidden", "rule": "no-shell"})),
            "{mode:?}"
        );
        let uncaught = h.create(json!({"catch": false})).await;
        let failed = h.wait_status(&uncaught, ExecutionStatus::Failed).await;
        assert_eq!(
            failed.failure_reason, "policy_denied: shell is forbidden",
            "{mode:?}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_call_fails_the_run_with_the_reason() {
    for mode in MODES {
        let runs = Arc::new(AtomicUsize::new(0));
        let fetch = counting_tool("fetch", &runs);
        let handler = handler_fn("fetcher", move |_input: Value| {
            let fetch = fetch.clone();
            async move {
                fetch.call(json!({"url": "a"})).await?;
                fetch.call(json!({"url": "b"})).await?;
                Ok::<_, Error>(json!("unreachable"))
            }
        });
        let h = harness(mode, handler, true).await;
        h.set_policy(
            r#"
default_action: allow
rules:
  - id: limited
    priority: 1
    when: {target: fetch}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1h}}
"#,
        )
        .await;
        let id = h.create(json!({})).await;
        let failed = h.wait_status(&id, ExecutionStatus::Failed).await;
        assert_eq!(failed.failure_reason, "rate_limit_exceeded", "{mode:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_run_stops_the_handler_at_its_next_effect() {
    for mode in MODES {
        let started = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let after = Arc::new(AtomicUsize::new(0));
        let (st, rel) = (Arc::clone(&started), Arc::clone(&release));
        let slow = wrap_tool(ToolDef::new("slow", "waits"), move |_args| {
            let (st, rel) = (Arc::clone(&st), Arc::clone(&rel));
            async move {
                st.notify_one();
                rel.notified().await;
                Ok::<_, Error>(json!("slow done"))
            }
        });
        let later = counting_tool("later", &after);
        let handler = handler_fn("canceller", move |_input: Value| {
            let (slow, later) = (slow.clone(), later.clone());
            async move {
                // Swallow the refusal: the runtime must still unwind.
                let _ = slow.call(json!({})).await;
                let _ = later.call(json!({})).await;
                Ok::<_, Error>(json!("finished"))
            }
        });
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({})).await;
        started.notified().await;
        h.kernel.cancel(&id).await.unwrap();
        release.notify_one();
        wait_for("the handler to unwind", || h.agent.in_flight() == 0).await;
        let e = h.kernel.execution(&id).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Cancelled, "{mode:?}");
        assert_eq!(
            e.output, None,
            "{mode:?}: a cancelled run records no output"
        );
        assert_eq!(
            after.load(Ordering::SeqCst),
            0,
            "{mode:?}: nothing ran after the cancel"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_lease_aborts_the_handler_at_its_next_heartbeat() {
    for mode in MODES {
        let first = Arc::new(AtomicUsize::new(0));
        let second = Arc::new(AtomicUsize::new(0));
        let (t1, t2) = (
            counting_tool("first", &first),
            counting_tool("second", &second),
        );
        let handler = handler_fn("superseded", move |_input: Value| {
            let (t1, t2) = (t1.clone(), t2.clone());
            async move {
                t1.call(json!({})).await?;
                tokio::time::sleep(Duration::from_secs(3600)).await; // long work
                t2.call(json!({})).await?;
                Ok::<_, Error>(json!(null))
            }
        });
        // No background loops: this test delivers the dispatch itself.
        let h = harness(mode, handler, false).await;
        let id = h.create(json!({})).await;
        let claimed = h.kernel.claim_dispatches(1).await.unwrap().remove(0);
        let lease = claimed.lease();
        let payload = WebhookPayload {
            execution_id: id.clone(),
            dispatch_id: lease.dispatch_id.clone(),
            dispatch_attempt: Some(lease.attempt),
            lease_timeout_seconds: Some(1.0), // heartbeat every ~333 ms
        };
        assert_eq!(h.agent_dispatch(payload.clone()), DispatchAck::Started);
        assert_eq!(
            h.agent_dispatch(payload),
            DispatchAck::Duplicate,
            "{mode:?}: a duplicate of the running attempt is ignored"
        );
        wait_for("the first tool", || first.load(Ordering::SeqCst) == 1).await;
        assert_eq!(h.kernel.reclaim_for_test().await, 1);
        wait_for("the handler to be aborted", || h.agent.in_flight() == 0).await;
        assert_eq!(second.load(Ordering::SeqCst), 0, "{mode:?}");
        let e = h.kernel.execution(&id).await.unwrap();
        assert_eq!(
            e.status,
            ExecutionStatus::Running,
            "{mode:?}: nothing was recorded"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_at_most_once_call_ends_indeterminate_and_never_reruns() {
    for mode in MODES {
        let runs = Arc::new(AtomicUsize::new(0));
        let in_body = Arc::new(AtomicBool::new(false));
        let (r, ib) = (Arc::clone(&runs), Arc::clone(&in_body));
        let charge = wrap_tool(
            ToolDef::new("charge", "charges a card").idempotency(Idempotency::AtMostOnce),
            move |_args| {
                let (r, ib) = (Arc::clone(&r), Arc::clone(&ib));
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    ib.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await; // the process dies mid-charge
                    Ok::<_, Error>(json!("charged"))
                }
            },
        );
        let handler = handler_fn("charger", move |_input: Value| {
            let charge = charge.clone();
            async move { charge.call(json!({"cents": 500})).await }
        });
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({})).await;
        wait_for("the charge body", || in_body.load(Ordering::SeqCst)).await;
        h.agent.abort_all();
        h.kernel.reclaim_for_test().await;
        let failed = h.wait_status(&id, ExecutionStatus::Failed).await;
        assert!(
            failed
                .failure_reason
                .starts_with("tool_error: charge: outcome unknown"),
            "{mode:?}: {}",
            failed.failure_reason
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "{mode:?}: never charged twice"
        );
        let steps = h.kernel.steps(&id, false).await.unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].status, StepStatus::Failed);
        assert_eq!(steps[0].error.as_ref().unwrap()["reason"], "indeterminate");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_calls_get_distinct_stable_steps() {
    for mode in MODES {
        let runs = Arc::new(AtomicUsize::new(0));
        let (l, r) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let echo = counting_tool("echo", &runs);
        let gate = counting_tool("refund", &r);
        let _ = &l;
        let handler = handler_fn("joiner", move |_input: Value| {
            let (echo, gate) = (echo.clone(), gate.clone());
            async move {
                let (x, y) = tokio::join!(echo.call(json!({"v": 1})), echo.call(json!({"v": 1})));
                let (x, y) = (x?, y?);
                gate.call(json!({})).await?; // blocks once, so the joins replay
                // The same call again after the replays: a third occurrence, which must run.
                let z = echo.call(json!({"v": 1})).await?;
                Ok::<_, Error>(json!({"x": x["run"], "y": y["run"], "z": z["run"]}))
            }
        });
        let h = harness(mode, handler, true).await;
        h.set_policy(APPROVAL_POLICY).await;
        let id = h.create(json!({})).await;
        h.wait_status(&id, ExecutionStatus::Blocked).await;
        let first: Vec<String> = h
            .kernel
            .steps(&id, false)
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.target == "echo")
            .map(|s| s.step_id)
            .collect();
        assert_eq!(first.len(), 2, "{mode:?}: two distinct steps");
        let approval = h.kernel.pending_approvals().await.unwrap().remove(0);
        h.kernel.grant(&approval.id, "alice", "").await.unwrap();
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        let out = done.output.unwrap();
        let mut got = [out["x"].as_u64().unwrap(), out["y"].as_u64().unwrap()];
        got.sort_unstable();
        assert_eq!(got, [1, 2], "{mode:?}: {out}");
        assert_eq!(
            out["z"], 3,
            "{mode:?}: the third identical call ran once: {out}"
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            3,
            "{mode:?}: replayed, not re-run"
        );
        let echo_steps: Vec<(String, u64)> = h
            .kernel
            .steps(&id, false)
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.target == "echo")
            .map(|s| (s.step_id, s.occurrence))
            .collect();
        let mut occ: Vec<u64> = echo_steps.iter().map(|(_, o)| *o).collect();
        occ.sort_unstable();
        assert_eq!(occ, [0, 1, 2], "{mode:?}");
        let replayed: Vec<String> = h
            .effects
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.target == "echo" && e.outcome == EffectOutcome::Replayed)
            .filter_map(|e| e.step_id.clone())
            .collect();
        assert_eq!(replayed.len(), 2, "{mode:?}");
        let mut a = first.clone();
        a.sort();
        let mut b = replayed;
        b.sort();
        assert_eq!(a, b, "{mode:?}: the replay hit the same two steps");
    }
}

#[tokio::test]
async fn effects_outside_an_execution_are_refused_with_a_typed_error() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = counting_tool("echo", &runs);
    assert_eq!(tool.call(json!({})).await.unwrap_err(), Error::NoExecution);
    let stepped = rebuno::step("now", (), || async { Ok::<_, Error>(1) }).await;
    assert_eq!(stepped.unwrap_err(), Error::NoExecution);
    assert!(matches!(rebuno::execution(), Err(Error::NoExecution)));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_verifies_signatures_and_refuses_incomplete_bodies() {
    let handler = handler_fn("hooked", |_input: Value| async { Ok::<_, Error>(json!(1)) });
    let agent = Agent::builder(handler)
        .kernel_url("http://127.0.0.1:9") // never reached by these requests
        .secret(SECRET)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(listener, std::future::pending()).await });
    let http = reqwest::Client::new();
    let post = |body: &'static str, sig: Option<String>| {
        let mut req = http.post(&url).body(body);
        if let Some(sig) = sig {
            req = req.header("Rebuno-Signature", sig);
        }
        req.send()
    };
    let good = r#"{"execution_id":"0190a000-0000-7000-8000-000000000001","dispatch_id":"0190a000-0000-7000-8000-000000000002","dispatch_attempt":1}"#;
    let sign = |b: &str| rebuno::signing::sign(SECRET, b.as_bytes());
    assert_eq!(post(good, None).await.unwrap().status(), 401);
    assert_eq!(
        post(good, Some(rebuno::signing::sign("wrong", good.as_bytes())))
            .await
            .unwrap()
            .status(),
        401
    );
    for bad in [
        r#"{"dispatch_id":"d","dispatch_attempt":1}"#,
        r#"{"execution_id":"e","dispatch_attempt":1}"#,
        r#"{"execution_id":"e","dispatch_id":"d"}"#,
        r#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":0}"#,
        r#"not json"#,
    ] {
        assert_eq!(
            post(bad, Some(sign(bad))).await.unwrap().status(),
            400,
            "{bad}"
        );
    }
    assert_eq!(post(good, Some(sign(good))).await.unwrap().status(), 200);
    agent.shutdown(Some(Duration::from_secs(5))).await;
    assert_eq!(
        agent.dispatch(serde_json::from_str(good).unwrap()),
        DispatchAck::ShuttingDown
    );
}

#[tokio::test]
async fn an_http_agent_needs_a_url_and_a_secret() {
    let h = || handler_fn("cfg", |_input: Value| async { Ok::<_, Error>(json!(1)) });
    // SAFETY-free: these tests do not set REBUNO_URL / REBUNO_AGENT_SECRET.
    if std::env::var("REBUNO_URL").is_err() {
        let err = Agent::builder(h()).secret("s").build().unwrap_err();
        assert!(matches!(err, Error::Config(m) if m.contains("REBUNO_URL")));
    }
    if std::env::var("REBUNO_AGENT_SECRET").is_err() {
        let err = Agent::builder(h())
            .kernel_url("http://x")
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::Config(m) if m.contains("REBUNO_AGENT_SECRET")));
    }
    let err = Agent::builder(h())
        .kernel_url("ftp://x")
        .secret("s")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_replays_recorded_effects_in_a_constant_number_of_round_trips() {
    for local_replay in [true, false] {
        let kernel = kernel().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let counting = Arc::new(Counting::new(Arc::new(
            rebuno::agent::HttpTransport::new(&base, "many", SECRET).unwrap(),
        )));
        let runs = Arc::new(AtomicUsize::new(0));
        let (echo, gate) = (
            counting_tool("echo", &runs),
            counting_tool("refund", &Arc::new(AtomicUsize::new(0))),
        );
        let handler = handler_fn("many", move |_input: Value| {
            let (echo, gate) = (echo.clone(), gate.clone());
            async move {
                for i in 0..40 {
                    echo.call(json!({"i": i % 10})).await?; // repeats: occurrences 0..3
                }
                gate.call(json!({})).await?;
                Ok::<_, Error>(json!("done"))
            }
        });
        let agent = Agent::builder(handler)
            .transport(Arc::clone(&counting) as Arc<dyn rebuno::agent::Transport>)
            .secret(SECRET)
            .local_replay(local_replay)
            .build()
            .unwrap();
        let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
        let serving = agent.clone();
        tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
        kernel
            .register_agent(RegisterAgentRequest {
                id: "many".into(),
                webhook_url: hook_url,
                secret: SECRET.into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        kernel.set_policy("many", APPROVAL_POLICY).await.unwrap();
        let _bg = kernel.start_http();
        let h = Harness::of(&kernel, agent);
        let id = h.create(json!({})).await;
        h.wait_status(&id, ExecutionStatus::Blocked).await;
        wait_for("the first dispatch to end", || h.agent.in_flight() == 0).await;
        let before = counting.submits.load(Ordering::SeqCst);
        assert_eq!(before, 41);
        let approval = kernel.pending_approvals().await.unwrap().remove(0);
        kernel.grant(&approval.id, "alice", "").await.unwrap();
        h.wait_status(&id, ExecutionStatus::Completed).await;
        let resumed = counting.submits.load(Ordering::SeqCst) - before;
        assert_eq!(runs.load(Ordering::SeqCst), 40, "nothing re-ran");
        if local_replay {
            assert_eq!(resumed, 1, "only the approved step goes to the kernel");
        } else {
            assert_eq!(resumed, 41, "one submission per effect");
        }
        assert_eq!(kernel.steps(&id, false).await.unwrap().len(), 41);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_attempt_replaces_the_running_one_and_terminal_executions_are_skipped() {
    for mode in MODES {
        let first = Arc::new(AtomicUsize::new(0));
        let handlers = Arc::new(AtomicUsize::new(0));
        let t1 = counting_tool("first", &first);
        let started = Arc::clone(&handlers);
        let handler = handler_fn("replaced", move |_input: Value| {
            let (t1, started) = (t1.clone(), Arc::clone(&started));
            async move {
                let n = started.fetch_add(1, Ordering::SeqCst) + 1;
                t1.call(json!({})).await?;
                if n == 1 {
                    // The tool's result is sent before the hang (it would wait for the next
                    // submission otherwise).
                    rebuno::execution()?.flush().await?;
                    tokio::time::sleep(Duration::from_secs(3600)).await; // attempt 1 hangs
                }
                Ok::<_, Error>(json!({"handler_runs": n}))
            }
        });
        let h = harness(mode, handler, false).await;
        let id = h.create(json!({})).await;
        let payload = |lease: rebuno::Lease| WebhookPayload {
            execution_id: id.clone(),
            dispatch_id: lease.dispatch_id,
            dispatch_attempt: Some(lease.attempt),
            lease_timeout_seconds: Some(60.0),
        };
        let lease1 = h
            .kernel
            .claim_dispatches(1)
            .await
            .unwrap()
            .remove(0)
            .lease();
        assert_eq!(
            h.agent.dispatch(payload(lease1.clone())),
            DispatchAck::Started
        );
        wait_for("attempt 1's first tool", || {
            first.load(Ordering::SeqCst) == 1
        })
        .await;
        // ... and its outcome recorded (a step still executing would re-run: safe_to_retry).
        let deadline = Instant::now() + Duration::from_secs(30);
        while h.kernel.steps(&id, true).await.unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the first step was never recorded"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The kernel re-delivers (as after a lost ack): attempt 2 replaces attempt 1.
        h.kernel.reclaim_for_test().await;
        let lease2 = loop {
            if let Some(c) = h.kernel.claim_dispatches(1).await.unwrap().pop() {
                break c.lease();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(lease2.attempt, 2);
        assert_eq!(
            h.agent.dispatch(payload(lease1.clone())),
            DispatchAck::Duplicate
        );
        assert_eq!(
            h.agent.dispatch(payload(lease2.clone())),
            DispatchAck::Started
        );
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        assert_eq!(done.output, Some(json!({"handler_runs": 2})), "{mode:?}");
        assert_eq!(
            first.load(Ordering::SeqCst),
            1,
            "{mode:?}: replayed on attempt 2"
        );
        // A delivery for a terminal execution runs nothing.
        wait_for("the handler to end", || h.agent.in_flight() == 0).await;
        let before = handlers.load(Ordering::SeqCst);
        assert_eq!(h.agent.dispatch(payload(lease2)), DispatchAck::Started);
        wait_for("the skipped delivery", || h.agent.in_flight() == 0).await;
        assert_eq!(handlers.load(Ordering::SeqCst), before, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_results_over_http_ride_with_the_next_submission_and_the_end() {
    let kernel = kernel().await;
    let _bg = kernel.start_http();
    let handler = handler_fn("batched", |_input: Value| async move {
        let mut sum = 0;
        for i in 0..5u64 {
            let v: u64 = rebuno::step("work", i, || async move { Ok::<_, Error>(i * 10) }).await?;
            sum += v;
        }
        Ok::<_, Error>(json!(sum))
    });
    // A hold no pause of a loaded machine outlasts, so every result waits to be carried.
    let builder = Agent::builder(handler)
        .batch_completions(true)
        .hold_results_for(Duration::from_secs(60));
    let agent = serve_over_http(&kernel, builder).await;
    let h = Harness::of(&kernel, agent);
    let id = h.create(json!({})).await;
    h.wait_status(&id, ExecutionStatus::Completed).await;
    assert_eq!(
        kernel.execution(&id).await.unwrap().output,
        Some(json!(100))
    );
    let steps = kernel.steps(&id, false).await.unwrap();
    assert_eq!(steps.len(), 5);
    for s in &steps {
        let i = s.args.as_ref().unwrap().as_u64().unwrap();
        assert_eq!(
            (s.status, s.result.clone()),
            (StepStatus::Succeeded, Some(json!(i * 10))),
            "{s:?}"
        );
    }
    // No result went in a request of its own: four with the next submission, the last with
    // the execution's end (which the kernel answered).
    let metrics = kernel.histograms().render();
    let route = |r: &str| {
        metrics
            .lines()
            .any(|l| l.contains("rebuno_http_request_duration_seconds_count") && l.contains(r))
    };
    assert!(
        route(r#"route="/v0/executions/{id}/complete""#),
        "{metrics}"
    );
    assert!(
        !route(r#"route="/v0/executions/{id}/steps/{step_id}/complete""#),
        "{metrics}"
    );
}
