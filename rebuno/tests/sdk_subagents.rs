//! `rebuno::subagent` from a tool body, over HTTP (the kernel in dev mode: no API key) and
//! embedded: the parent completes with the child's output, the child runs once even when the
//! parent's first attempt dies after starting it, a failing child fails the tool, and a child
//! given a session is a turn of it (reading the previous turn's state). Against
//! a kernel with an admin token, the agent creates the child by its own signed request under
//! the parent's lease, with no API key.

use test_support::rebuno::sdk as harness;

use harness::*;

/// A kernel whose leases lapse after 1 s, so a dead attempt is reclaimed quickly (a live one
/// heartbeats every ~333 ms).
async fn short_lease_kernel() -> Kernel {
    Kernel::builder(Arc::new(SqliteStore::open_url("memory").unwrap()))
        .config(KernelConfig {
            lease_timeout: Duration::from_secs(1),
            ..config()
        })
        .build()
        .await
        .unwrap()
}

/// The child: counts its runs, waits for a permit, then answers from its input (or fails
/// when the input says so).
fn child(runs: &Arc<AtomicUsize>, gate: &Arc<tokio::sync::Semaphore>) -> rebuno::agent::FnHandler {
    let (runs, gate) = (Arc::clone(runs), Arc::clone(gate));
    handler_fn("child", move |input: Value| {
        let (runs, gate) = (Arc::clone(&runs), Arc::clone(&gate));
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            if input["fail"] == json!(true) {
                return Err(Error::Other("the child gave up".into()));
            }
            Ok::<_, Error>(json!({"answer": format!("{} done", input["q"].as_str().unwrap_or(""))}))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_delegates_to_a_subagent_once_across_a_crash() {
    for mode in MODES {
        let (child_runs, body_runs) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let crashed = Arc::new(AtomicBool::new(false));
        let at_crash = Arc::new(AtomicBool::new(false));
        let (runs, crash, point) = (
            Arc::clone(&body_runs),
            Arc::clone(&crashed),
            Arc::clone(&at_crash),
        );
        let delegate = wrap_tool(ToolDef::new("delegate", "asks the child"), move |args| {
            runs.fetch_add(1, Ordering::SeqCst);
            let (crash, point) = (Arc::clone(&crash), Arc::clone(&point));
            async move {
                if !crash.swap(true, Ordering::SeqCst) {
                    // The first attempt starts the child, then dies before waiting for it.
                    rebuno::agent::spawn_subagent("child", &args).await?;
                    point.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                }
                rebuno::subagent("child", &args).await
            }
        });
        let parent = handler_fn("parent", move |input: Value| {
            let delegate = delegate.clone();
            async move {
                let said = delegate.call(json!({"q": input["q"]})).await?;
                Ok::<_, Error>(json!({"child_said": said}))
            }
        });
        let h = harness_on(short_lease_kernel().await, mode, parent, true).await;
        h.add_agent(mode, child(&child_runs, &gate)).await;
        let id = h.create(json!({"q": "sum"})).await;
        wait_for("the crash point", || at_crash.load(Ordering::SeqCst)).await;
        h.agent.abort_all(); // the parent's process dies; its lease lapses, it is re-delivered
        h.wait_status(&id, ExecutionStatus::Blocked).await;
        assert_eq!(
            body_runs.load(Ordering::SeqCst),
            2,
            "{mode:?}: re-run after the crash"
        );
        gate.add_permits(1); // the child finishes
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        assert_eq!(
            done.output,
            Some(json!({"child_said": {"answer": "sum done"}})),
            "{mode:?}"
        );
        assert_eq!(
            child_runs.load(Ordering::SeqCst),
            1,
            "{mode:?}: one child run"
        );
        assert_eq!(
            body_runs.load(Ordering::SeqCst),
            2,
            "{mode:?}: replayed, not re-run"
        );
        let children = h
            .kernel
            .client()
            .list_all(rebuno::client::ListOptions::new().agent_id("child"))
            .await
            .unwrap();
        assert_eq!(children.len(), 1, "{mode:?}: one child execution");
        let spawned = children[0].spawned_by.clone().unwrap();
        assert_eq!(spawned.execution_id, id, "{mode:?}");
        // The client lists an execution's children.
        let listed = h.kernel.client().children(&id).await.unwrap();
        assert_eq!(listed, children, "{mode:?}");
        assert!(
            h.kernel
                .client()
                .children(&children[0].id)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            h.outcomes("delegate").last(),
            Some(&EffectOutcome::Replayed),
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_subagent_fails_the_tool() {
    for mode in MODES {
        let child_runs = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(1));
        let delegate = wrap_tool(
            ToolDef::new("delegate", "asks the child"),
            |args| async move { rebuno::subagent("child", &args).await },
        );
        let parent = handler_fn("parent", move |_input: Value| {
            let delegate = delegate.clone();
            async move {
                let err = delegate.call(json!({"fail": true})).await.unwrap_err();
                Ok::<_, Error>(json!({ "tool_error": err.to_string() }))
            }
        });
        let h = harness(mode, parent, true).await;
        h.add_agent(mode, child(&child_runs, &gate)).await;
        let id = h.create(json!({})).await;
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        let said = done.output.unwrap()["tool_error"].to_string();
        assert!(said.contains("the child gave up"), "{mode:?}: {said}");
        let steps = h.kernel.steps(&id, false).await.unwrap();
        let step = steps.iter().find(|s| s.target == "delegate").unwrap();
        assert_eq!(step.status, StepStatus::Failed, "{mode:?}");
        assert_eq!(
            step.error.as_ref().unwrap()["reason"],
            json!("subagent_failed"),
            "{mode:?}"
        );
        assert_eq!(child_runs.load(Ordering::SeqCst), 1, "{mode:?}");
    }
}

/// A child with a session option is a turn of that session: the first parent's child is
/// recorded in it, and the second parent's child reads the state the first one left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_runs_as_a_turn_of_its_session() {
    for mode in MODES {
        let delegate = wrap_tool(
            ToolDef::new("delegate", "asks the note keeper"),
            |args| async move {
                let options = rebuno::agent::SubagentOptions::new().session("notebook");
                rebuno::agent::subagent_with("notes", &args, options).await
            },
        );
        let parent = handler_fn("parent", move |input: Value| {
            let delegate = delegate.clone();
            async move { delegate.call(json!({"note": input["note"]})).await }
        });
        // Appends the note to the session's notes and answers them all.
        let notes = handler_fn("notes", |input: Value| async move {
            let mut notes: Vec<Value> = rebuno::previous().await?.unwrap_or_default();
            notes.push(input["note"].clone());
            rebuno::set_state(&notes)?;
            Ok::<_, Error>(json!({ "notes": notes }))
        });
        let h = harness(mode, parent, true).await;
        h.add_agent(mode, notes).await;
        let mut children = Vec::new();
        for (note, expected) in [("one", json!(["one"])), ("two", json!(["one", "two"]))] {
            let id = h.create(json!({ "note": note })).await;
            let done = h.wait_status(&id, ExecutionStatus::Completed).await;
            assert_eq!(done.output, Some(json!({ "notes": expected })), "{mode:?}");
            let child = h.kernel.client().children(&id).await.unwrap().remove(0);
            assert_eq!(child.session, "notebook", "{mode:?}");
            children.push(child);
        }
        assert_eq!(
            children[1].parent_execution_id, children[0].id,
            "{mode:?}: the second turn continues from the first"
        );
        let turns = h.kernel.client().session_turns("notes", "notebook").await;
        let ids: Vec<String> = turns.unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(
            ids,
            [children[0].id.clone(), children[1].id.clone()],
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn subagent_outside_a_tool_body_is_an_error() {
    let err = rebuno::subagent("child", json!({})).await.unwrap_err();
    assert!(matches!(err, Error::NoExecution), "{err:?}");
}

/// Serves `handler` over HTTP against `base` (a kernel with an admin token) and registers it
/// on `kernel`.
async fn serve_agent(kernel: &Kernel, base: &str, handler: impl AgentHandler) -> Agent {
    serve_agent_at(kernel, base, Agent::builder(handler)).await
}

/// Against a kernel with an admin token, the agent creates the child by its own signed request
/// under the parent's lease, with no API key: the child is created by `agent:<id>` and the
/// parent completes with its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_subagent_is_created_by_the_agents_signed_request() {
    let kernel = kernel().await;
    let _loops = kernel.start_http();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let options = rebuno::server::ServerOptions::with_bearer_token("admin-token");
    let app = rebuno::server::router(kernel.clone(), options);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let (child_runs, gate) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(tokio::sync::Semaphore::new(8)),
    );
    serve_agent(&kernel, &base, child(&child_runs, &gate)).await;
    let delegate = wrap_tool(
        ToolDef::new("delegate", "asks the child"),
        |args| async move { rebuno::subagent("child", &args).await },
    );
    let parent = handler_fn("trusted", move |input: Value| {
        let delegate = delegate.clone();
        async move {
            let said = delegate.call(json!({"q": input["q"]})).await?;
            Ok::<_, Error>(json!({"child_said": said}))
        }
    });
    serve_agent(&kernel, &base, parent).await;
    let trusted = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "trusted".into(),
            input: Some(json!({"q": "sum"})),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let e = kernel.execution(&trusted).await.unwrap();
        if e.status.is_terminal() || Instant::now() > deadline {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        done.output,
        Some(json!({"child_said": {"answer": "sum done"}})),
        "{done:?}"
    );
    let children = kernel.client().children(&trusted).await.unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].created_by, "agent:trusted");
    assert_eq!(child_runs.load(Ordering::SeqCst), 1);
}
