//! LLM calls as `llm_call` steps, over real HTTP: a fake OpenAI-compatible / Anthropic provider
//! on loopback and agents on an embedded kernel. A call is one step (target: the model; args:
//! the request without its stream flags), replays from the record after an approval without
//! calling the provider again, a streamed answer is teed to the kernel's stream endpoint and
//! recorded whole, policy refusals reach the high-level clients as typed errors and the
//! interceptor's callers as `rebuno_refusal` HTTP errors, and nothing is recorded outside an
//! execution.
//!
//! The fake provider and the harness are in `test_support::rebuno::llm`.

use test_support::rebuno::llm as harness;

use harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_is_one_llm_call_step_and_replays_after_an_approval() {
    let (base, p) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (b, r) = (base.clone(), runs.clone());
    rt.register(handler_fn("chat", move |_input| {
        let (base, runs) = (b.clone(), r.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let answer = OpenAi::new("sk-test")
                .base_url(format!("{base}/"))
                .chat(json!({
                    "model": "gpt-test", "temperature": 0, "stream": false,
                    "messages": [{"role": "user", "content": "hello"}]
                }))
                .await?;
            let text = answer.text().unwrap();
            let usage = answer.usage().unwrap();
            assert_eq!(answer.finish_reason(), Some("stop"));
            assert!(answer.tool_calls().is_empty());
            charge().call(json!({"for": text})).await?;
            Ok::<_, Error>(json!({"text": text, "usage": usage}))
        }
    }))
    .await
    .unwrap();
    rt.kernel().set_policy("chat", APPROVAL).await.unwrap();

    rt.start();
    let id = create(&rt, "chat", json!({})).await;
    wait_for(&rt, &id, ExecutionStatus::Blocked).await;
    assert_eq!(p.hits(), 1);
    grant(&rt, &id).await;
    let exec = wait_for(&rt, &id, ExecutionStatus::Completed).await;

    // The second dispatch ran the handler from the top; the LLM call replayed.
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(p.hits(), 1, "the provider was called once");
    assert_eq!(
        exec.output,
        Some(json!({"text": "echo: hello", "usage": {"input_tokens": 11, "output_tokens": 7}}))
    );
    let seen = p.seen();
    assert_eq!(seen[0].1["authorization"], "Bearer sk-test");
    assert!(
        seen[0].2.get("stream").is_none(),
        "chat() sends no stream flag"
    );

    let steps = llm_steps(&rt, &id).await;
    assert_eq!(steps.len(), 1, "{steps:?}");
    let step = &steps[0];
    assert_eq!(step.target, "gpt-test");
    assert_eq!(step.status, StepStatus::Succeeded);
    assert_eq!(
        step.args,
        Some(json!({"model": "gpt-test", "temperature": 0,
                    "messages": [{"role": "user", "content": "hello"}]}))
    );
    // The record: status, content type and the body text the kernel reads usage from.
    let result = step.result.clone().unwrap();
    assert_eq!(result["status"], 200);
    assert_eq!(
        result["headers"],
        json!({"content-type": "application/json"})
    );
    let body: Value = serde_json::from_str(result["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["usage"]["prompt_tokens"], 11);
    assert_eq!(body["usage"]["completion_tokens"], 7);
    let events = rt.kernel().events(&id, 0, 1000).await.unwrap();
    let succeeded: Vec<_> = events
        .iter()
        .filter(|e| e.event_type == EventType::StepSucceeded)
        .filter(|e| e.payload["step_id"] == step.step_id.as_str())
        .collect();
    assert_eq!(succeeded.len(), 1);
    assert_eq!(succeeded[0].payload["step_type"], "llm_call");
    assert_eq!(succeeded[0].payload["target"], "gpt-test");
    // The kernel reads the token usage out of the record when the step completes.
    assert_eq!(succeeded[0].payload["usage_input"], 11);
    assert_eq!(succeeded[0].payload["usage_output"], 7);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_chat_is_teed_live_and_recorded_whole() {
    let (base, p) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (b, g) = (base.clone(), gate.clone());
    rt.register(handler_fn("streamer", move |_input| {
        let (base, gate) = (b.clone(), g.clone());
        async move {
            // Wait until the test has subscribed to the execution's deltas.
            gate.acquire().await.unwrap().forget();
            let mut stream = OpenAi::new("sk-test")
                .base_url(&base)
                .chat_stream(json!({
                    "model": "gpt-stream",
                    "messages": [{"role": "user", "content": "stream please"}]
                }))
                .await?;
            let first = stream.next_text().await?.unwrap();
            let rest = stream.text().await?;
            let usage = stream.usage().unwrap();
            charge().call(json!({})).await?;
            Ok::<_, Error>(json!({"text": first + &rest, "usage": usage}))
        }
    }))
    .await
    .unwrap();
    rt.kernel().set_policy("streamer", APPROVAL).await.unwrap();

    rt.start();
    let id = create(&rt, "streamer", json!({})).await;
    let mut deltas = rt.kernel().subscribe(&id).await.unwrap();
    gate.add_permits(1);
    wait_for(&rt, &id, ExecutionStatus::Blocked).await;
    gate.add_permits(1); // the replaying dispatch passes the gate too
    grant(&rt, &id).await;
    let exec = wait_for(&rt, &id, ExecutionStatus::Completed).await;

    assert_eq!(p.hits(), 1, "the replay did not call the provider");
    assert_eq!(
        exec.output,
        Some(json!({"text": stream_pieces().concat(),
                    "usage": {"input_tokens": 13, "output_tokens": 9}}))
    );
    let seen = p.seen();
    assert_eq!(seen[0].2["stream"], true);
    assert_eq!(seen[0].2["stream_options"], json!({"include_usage": true}));

    let steps = llm_steps(&rt, &id).await;
    assert_eq!(steps.len(), 1, "{steps:?}");
    let step = &steps[0];
    assert_eq!(step.target, "gpt-stream");
    assert_eq!(
        step.args,
        Some(json!({"model": "gpt-stream",
                    "messages": [{"role": "user", "content": "stream please"}]})),
        "the stream flags are not part of the args"
    );
    let result = step.result.clone().unwrap();
    assert_eq!(result["status"], 200);
    assert_eq!(result["headers"]["content-type"], "text/event-stream");
    assert_eq!(
        result["body"],
        stream_body(),
        "the whole stream is recorded"
    );

    // The deltas: in order, within the kernel's limit, and together the whole stream.
    let mut frames = Vec::new();
    while let Ok(frame) = deltas.try_recv() {
        frames.push(frame);
    }
    assert!(frames.iter().all(|f| f.step_id == step.step_id));
    assert!(frames.len() >= 2, "{} deltas", frames.len());
    assert_eq!(
        frames.iter().map(|f| f.seq).collect::<Vec<_>>(),
        (0..frames.len() as i64).collect::<Vec<_>>()
    );
    assert!(frames.iter().all(|f| f.data.len() <= 7000));
    assert_eq!(
        frames.iter().map(|f| f.data.as_str()).collect::<String>(),
        stream_body()
    );
    rt.shutdown().await;
}

/// A runtime with agent `dropper`, which reads the first delta of a streamed chat, drops the
/// stream, and then charges when `then_charge`, or else ends at once.
async fn dropper(base: &str, then_charge: bool) -> Runtime {
    let rt = Runtime::open("memory").await.unwrap();
    let base = base.to_owned();
    rt.register(handler_fn("dropper", move |_input| {
        let base = base.clone();
        async move {
            let mut stream = OpenAi::new("")
                .base_url(&base)
                .chat_stream(json!({"model": "gpt-stream", "messages": []}))
                .await?;
            let first = stream.next_text().await?.unwrap();
            drop(stream); // stop reading after the first delta
            if then_charge {
                charge().call(json!({})).await?;
            }
            Ok::<_, Error>(json!({ "first": first }))
        }
    }))
    .await
    .unwrap();
    rt
}

/// Asserts the execution's one LLM step recorded the whole streamed answer.
async fn assert_recorded_whole(rt: &Runtime, id: &str) {
    let step = llm_steps(rt, id).await.remove(0);
    assert_eq!(step.status, StepStatus::Succeeded, "{step:?}");
    assert_eq!(step.result.unwrap()["body"], stream_body());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_early_is_still_recorded_whole_and_replays() {
    let (base, p) = provider().await;
    let rt = dropper(&base, true).await;
    rt.kernel().set_policy("dropper", APPROVAL).await.unwrap();
    rt.start();
    let id = create(&rt, "dropper", json!({})).await;
    wait_for(&rt, &id, ExecutionStatus::Blocked).await;
    // The tee reads the provider's stream to its end and records all of it, and the next
    // effect (the charge that blocked) waited for that record: the provider closes the body
    // 300 ms after `[DONE]`, so without the wait the step would still be executing here, and
    // the attempt after the grant would call the provider again.
    assert_recorded_whole(&rt, &id).await;
    grant(&rt, &id).await;
    let exec = wait_for(&rt, &id, ExecutionStatus::Completed).await;
    assert_eq!(exec.output, Some(json!({"first": "Hel"})));
    assert_eq!(p.hits(), 1, "the replay did not call the provider");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_as_the_handler_ends_is_recorded_before_the_execution_ends() {
    let (base, p) = provider().await;
    let rt = dropper(&base, false).await;
    rt.start();
    let id = create(&rt, "dropper", json!({})).await;
    let exec = wait_for(&rt, &id, ExecutionStatus::Completed).await;
    assert_eq!(exec.output, Some(json!({"first": "Hel"})));
    // The provider closes the body 300 ms after `[DONE]`: without the wait the execution
    // would complete first and the record would be refused.
    assert_recorded_whole(&rt, &id).await;
    assert_eq!(p.hits(), 1);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_typed_errors_or_rebuno_refusal_responses() {
    const POLICY: &str = "default_action: allow
rules:
  - id: no-llm
    when: {target: gpt-denied, step_kind: llm_call}
    then: {decision: deny, reason: \"no models today\"}
  - id: slow
    priority: 1
    when: {target: gpt-limited}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 1h}
";
    let (base, p) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    let b = base.clone();
    rt.register(handler_fn("refused", move |_input| {
        let base = b.clone();
        async move {
            let request = |model: &str| {
                json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
            };
            let llm = OpenAi::new("").base_url(&base);
            let http = LlmHttp::new();
            let raw = |model: &str| {
                http.client()
                    .post(format!("{base}/chat/completions"))
                    .header("content-type", "application/json")
                    .body(request(model).to_string())
            };

            // Denied: a typed error from the client, a 403 marker from the interceptor.
            let typed = llm.chat(request("gpt-denied")).await.unwrap_err();
            let resp = http.send(raw("gpt-denied")).await?;
            let denied_status = resp.status().as_u16();
            let denied_body = resp.text().await?;

            // Rate limited: the first call runs, the next ones are refused.
            let first = llm.chat(request("gpt-limited")).await?.text();
            let limited = llm.chat(request("gpt-limited")).await.unwrap_err();
            let resp = http.send(raw("gpt-limited")).await?;
            let limited_status = resp.status().as_u16();
            let limited_body = resp.text().await?;

            Ok::<_, Error>(json!({
                "typed": format!("{typed:?}"),
                "denied_status": denied_status,
                "denied_body": denied_body,
                "denied_parsed": format!("{:?}", refusal_error(&denied_body)),
                "first": first,
                "limited": format!("{limited:?}"),
                "limited_status": limited_status,
                "limited_parsed": format!("{:?}", refusal_error(&limited_body)),
            }))
        }
    }))
    .await
    .unwrap();
    rt.kernel().set_policy("refused", POLICY).await.unwrap();

    rt.start();
    let id = create(&rt, "refused", json!({})).await;
    let out = wait_for(&rt, &id, ExecutionStatus::Completed)
        .await
        .output
        .unwrap();
    assert_eq!(
        out["typed"],
        format!(
            "{:?}",
            Error::Policy {
                reason: "no models today".into(),
                rule_id: "no-llm".into()
            }
        )
    );
    assert_eq!(out["denied_status"], 403);
    assert_eq!(
        serde_json::from_str::<Value>(out["denied_body"].as_str().unwrap()).unwrap(),
        json!({"error": {"type": "rebuno_refusal",
                         "message": "rebuno_refusal: denied reason=no models today"}})
    );
    assert_eq!(
        out["denied_parsed"],
        format!(
            "{:?}",
            Some(Error::Policy {
                reason: "no models today".into(),
                rule_id: String::new()
            })
        )
    );
    assert_eq!(out["first"], "echo: hi");
    let rate_limited = Error::RateLimited {
        reason: "rate_limit_exceeded".into(),
    };
    assert_eq!(out["limited"], format!("{rate_limited:?}"));
    assert_eq!(out["limited_status"], 429);
    assert_eq!(out["limited_parsed"], format!("{:?}", Some(rate_limited)));
    assert_eq!(p.hits(), 1, "only the allowed call reached the provider");
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_event_that_never_ends_fails_at_the_bound() {
    let (base, _) = provider().await;
    let mut stream = OpenAi::new("k")
        .base_url(&base)
        .chat_stream(json!({"model": "endless", "messages": []}))
        .await
        .unwrap();
    let started = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.next_event()).await;
    let err = read
        .expect("the read gave up at the bound, not at the timeout")
        .unwrap_err()
        .to_string();
    let bound = rebuno::llm::MAX_STREAM_EVENT_BYTES;
    assert!(err.contains(&format!("passed {bound} bytes")), "{err}");
    assert!(
        err.contains("openai"),
        "the error names the provider: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    // It stays failed, without reading on.
    let sent = ENDLESS_SENT.load(Ordering::SeqCst);
    let again = stream.next_event().await.unwrap_err().to_string();
    assert_eq!(again, err);
    assert!(sent < 3 * bound, "{sent} bytes read for a bound of {bound}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_an_execution_requests_pass_through() {
    let (base, p) = provider().await;
    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]});
    let http = LlmHttp::new();
    let resp = http
        .send(
            http.client()
                .post(format!("{base}/chat/completions"))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: hi");

    let client = reqwest::Client::new();
    let resp = rebuno::llm::send(
        client
            .post(format!("{base}/chat/completions"))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);

    let answer = OpenAi::new("k").base_url(&base).chat(&body).await.unwrap();
    assert_eq!(answer.text().as_deref(), Some("echo: hi"));
    let mut stream = OpenAi::new("k")
        .base_url(&base)
        .chat_stream(&body)
        .await
        .unwrap();
    assert_eq!(stream.text().await.unwrap(), stream_pieces().concat());
    assert_eq!(p.hits(), 4);
    assert!(matches!(
        rebuno::llm::send(client.get(format!("{base}/models"))).await,
        Ok(r) if r.status() == 404
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_drive_a_tool_loop() {
    let (base, p) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    let b = base.clone();
    rt.register(handler_fn("claude", move |_input| {
        let base = b.clone();
        async move {
            let tools = ToolSet::new().with(wrap_tool(
                ToolDef::new("weather", "The weather in a city.").parameters(
                    json!({"type": "object", "properties": {"city": {"type": "string"}}}),
                ),
                |args: Value| async move {
                    Ok::<_, Error>(json!(format!("sunny ({})", args["city"].as_str().unwrap())))
                },
            ));
            let llm = Anthropic::new("ak").base_url(&base);
            let mut messages = vec![json!({"role": "user", "content": "weather in Paris?"})];
            let mut usage = Vec::new();
            loop {
                let answer = llm
                    .messages(json!({
                        "model": "claude-test", "max_tokens": 256,
                        "tools": tools.anthropic(), "messages": messages
                    }))
                    .await?;
                usage.push(answer.usage().unwrap());
                let calls = answer.tool_calls();
                if calls.is_empty() {
                    assert_eq!(answer.stop_reason(), Some("end_turn"));
                    return Ok::<_, Error>(json!({"text": answer.text(), "usage": usage}));
                }
                assert_eq!(answer.text().as_deref(), Some("Let me check."));
                messages.push(json!({"role": "assistant", "content": answer.content()}));
                let mut results = Vec::new();
                for call in calls {
                    let out = tools
                        .call_for_model(&call.name, call.arguments.clone())
                        .await?;
                    results.push(call.anthropic_result(out));
                }
                messages.push(json!({"role": "user", "content": results}));
            }
        }
    }))
    .await
    .unwrap();

    rt.start();
    let id = create(&rt, "claude", json!({})).await;
    let exec = wait_for(&rt, &id, ExecutionStatus::Completed).await;
    assert_eq!(
        exec.output,
        Some(json!({"text": "It is sunny (Paris) in Paris.",
                    "usage": [{"input_tokens": 5, "output_tokens": 3},
                              {"input_tokens": 5, "output_tokens": 3}]}))
    );
    assert_eq!(p.hits(), 2);
    let steps = steps(&rt, &id).await;
    let kinds: Vec<_> = steps
        .iter()
        .map(|s| (s.kind.clone(), s.target.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (StepKind::LlmCall, "claude-test".to_owned()),
            (StepKind::ToolCall, "weather".to_owned()),
            (StepKind::LlmCall, "claude-test".to_owned()),
        ]
    );
    let body: Value =
        serde_json::from_str(steps[0].result.as_ref().unwrap()["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["usage"]["input_tokens"], 5);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_own_client_is_wrapped_and_runs_an_openai_tool_loop() {
    let (base, p) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    let b = base.clone();
    rt.register(handler_fn("looper", move |_input| {
        let base = b.clone();
        async move {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert("x-team", "blue".parse().unwrap());
            let client = reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .unwrap();

            // The low-level path on the user's client: transport keys are not part of the args.
            let resp = rebuno::llm::send(
                client
                    .post(format!("{base}/chat/completions"))
                    .header("content-type", "application/json")
                    .header("x-request-id", "per-attempt")
                    .body(
                        json!({"model": "gpt-raw", "stream": false, "request_id": "r-1",
                               "messages": [{"role": "user", "content": "raw"}]})
                        .to_string(),
                    ),
            )
            .await?;
            let raw: Value = serde_json::from_str(&resp.text().await?)?;

            // The high-level client over the same client, in a tool loop.
            let tools = ToolSet::new().with(wrap_tool(
                ToolDef::new("add", "Adds two numbers."),
                |args: Value| async move {
                    Ok::<_, Error>(json!(
                        args["a"].as_i64().unwrap() + args["b"].as_i64().unwrap()
                    ))
                },
            ));
            let llm = OpenAi::new("k").base_url(&base).with_client(client);
            let mut messages = vec![json!({"role": "user", "content": "use the tool"})];
            let text = loop {
                let answer = llm
                    .chat(
                        json!({"model": "gpt-test", "messages": messages, "tools": tools.openai()}),
                    )
                    .await?;
                let calls = answer.tool_calls();
                if calls.is_empty() {
                    break answer.text().unwrap();
                }
                assert_eq!(answer.finish_reason(), Some("tool_calls"));
                messages.push(answer.message().cloned().unwrap());
                for call in calls {
                    assert_eq!(call.arguments, json!({"a": 2, "b": 3}));
                    let out = tools
                        .call_for_model(&call.name, call.arguments.clone())
                        .await?;
                    messages.push(call.openai_result(out));
                }
            };
            Ok::<_, Error>(json!({"raw": raw["choices"][0]["message"]["content"], "text": text}))
        }
    }))
    .await
    .unwrap();

    rt.start();
    let id = create(&rt, "looper", json!({})).await;
    let exec = wait_for(&rt, &id, ExecutionStatus::Completed).await;
    assert_eq!(
        exec.output,
        Some(json!({"raw": "echo: raw", "text": "the sum is 5"}))
    );
    let seen = p.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|(_, h, _)| h["x-team"] == "blue"));
    let steps = llm_steps(&rt, &id).await;
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0].target, "gpt-raw");
    assert_eq!(
        steps[0].args,
        Some(json!({"model": "gpt-raw", "messages": [{"role": "user", "content": "raw"}]}))
    );
    assert!(steps[1..].iter().all(|s| s.target == "gpt-test"));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_and_transport_errors_are_recorded() {
    let (base, p) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    // A port nothing listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let b = base.clone();
    rt.register(handler_fn("errors", move |_input| {
        let (base, dead) = (b.clone(), dead.clone());
        async move {
            let request =
                json!({"model": "broken", "messages": [{"role": "user", "content": "x"}]});
            let provider = OpenAi::new("k")
                .base_url(&base)
                .chat(&request)
                .await
                .unwrap_err();
            let network = OpenAi::new("k")
                .base_url(&dead)
                .chat(json!({"model": "gpt-offline", "messages": []}))
                .await
                .unwrap_err();
            Ok::<_, Error>(json!({
                "provider": provider.to_string(),
                "network": matches!(network, Error::Network(_)),
            }))
        }
    }))
    .await
    .unwrap();

    rt.start();
    let id = create(&rt, "errors", json!({})).await;
    let out = wait_for(&rt, &id, ExecutionStatus::Completed)
        .await
        .output
        .unwrap();
    assert_eq!(
        out["provider"],
        r#"openai: HTTP 500: {"error":{"message":"model exploded"}}"#
    );
    assert_eq!(out["network"], true);
    assert_eq!(p.hits(), 1);
    let steps = llm_steps(&rt, &id).await;
    assert_eq!(steps.len(), 2);
    // A non-2xx answer is recorded like any other (it replays identically)…
    assert_eq!(steps[0].status, StepStatus::Succeeded);
    assert_eq!(steps[0].result.as_ref().unwrap()["status"], 500);
    // …and a transport error fails the step with its message.
    assert_eq!(steps[1].target, "gpt-offline");
    assert_eq!(steps[1].status, StepStatus::Failed);
    assert!(steps[1].error.as_ref().unwrap()["message"].is_string());
    rt.shutdown().await;
}
