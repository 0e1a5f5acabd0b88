//! The GenAI attributes of LLM call spans (`rebuno.llm`) without span export: the log capture
//! of `test_support::logs` shows each span's fields as it closes. A streamed answer's span carries
//! the token usage the stream's events reported, recorded when the stream ends (whether the
//! handler read it to the end or dropped it early), like a whole answer's.
//!
//! The fake provider and the harness are in `test_support::rebuno::llm`.

use test_support::rebuno::llm as harness;

use harness::*;

use test_support::logs;

/// The fields of the closed `rebuno.llm` span of a call to `model`.
async fn llm_span(model: &str) -> String {
    let model = format!("gen_ai.request.model=\"{model}\"");
    logs::closed("rebuno.llm", |fields| fields.contains(&model)).await
}

/// Runs one execution of a handler that calls `call` with the provider at its base URL.
async fn run_handler<F, Fut>(agent: &str, call: F)
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Value, Error>> + Send + 'static,
{
    let (base, _provider) = provider().await;
    let rt = Runtime::open("memory").await.unwrap();
    let call = Arc::new(call);
    rt.register(handler_fn(agent.to_owned(), move |_input| {
        let (base, call) = (base.clone(), Arc::clone(&call));
        async move { call(base).await }
    }))
    .await
    .unwrap();
    rt.start();
    let id = create(&rt, agent, json!({})).await;
    wait_for(&rt, &id, ExecutionStatus::Completed).await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_read_to_the_end_puts_its_usage_on_the_span() {
    logs::logs();
    run_handler("stream-reader", |base| async move {
        let mut stream = OpenAi::new("k")
            .base_url(&base)
            .chat_stream(json!({"model": "usage-read", "messages": []}))
            .await?;
        let text = stream.text().await?;
        Ok(json!({ "text": text }))
    })
    .await;
    let span = llm_span("usage-read").await;
    // The fake provider's last chunk: prompt_tokens 13, completion_tokens 9.
    assert!(span.contains("gen_ai.usage.input_tokens=13"), "{span}");
    assert!(span.contains("gen_ai.usage.output_tokens=9"), "{span}");
    assert!(span.contains("gen_ai.system=\"openai\""), "{span}");
    assert!(span.contains("outcome=\"executed\""), "{span}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_dropped_early_still_puts_its_usage_on_the_span() {
    logs::logs();
    run_handler("stream-dropper", |base| async move {
        let mut stream = OpenAi::new("k")
            .base_url(&base)
            .chat_stream(json!({"model": "usage-dropped", "messages": []}))
            .await?;
        let first = stream.next_text().await?;
        drop(stream); // the tee reads the rest and records it in the background
        // The next effect waits for that record.
        let after = wrap_tool(ToolDef::new("after", "after the stream"), |_args| async {
            Ok::<_, Error>(json!(true))
        });
        after.call(json!({})).await?;
        Ok(json!({ "first": first }))
    })
    .await;
    let span = llm_span("usage-dropped").await;
    assert!(span.contains("gen_ai.usage.input_tokens=13"), "{span}");
    assert!(span.contains("gen_ai.usage.output_tokens=9"), "{span}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_puts_its_usage_on_the_span() {
    logs::logs();
    run_handler("whole", |base| async move {
        let answer = OpenAi::new("k")
            .base_url(&base)
            .chat(json!({"model": "usage-whole", "messages": []}))
            .await?;
        Ok(json!({ "text": answer.text() }))
    })
    .await;
    let span = llm_span("usage-whole").await;
    assert!(span.contains("gen_ai.usage.input_tokens=11"), "{span}");
    assert!(span.contains("gen_ai.usage.output_tokens=7"), "{span}");
}
