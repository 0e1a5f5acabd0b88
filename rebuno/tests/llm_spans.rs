//! The GenAI attributes of LLM call spans (`rebuno.llm`) without span export: a layer of the
//! test's own collects every closed span's fields. A streamed answer's span carries the token
//! usage the stream's events reported, recorded when the stream ends (whether the handler read
//! it to the end or dropped it early), like a whole answer's.
//!
//! The fake provider and the harness are in `support/llm.rs`.

#[path = "support/llm.rs"]
mod harness;

use harness::*;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// One closed span: its name and its fields as recorded by the time it closed.
#[derive(Debug, Clone)]
struct Closed {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

/// The fields of an open span (kept in its extensions).
#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Collects the spans of the whole test binary as they close.
struct Collect;

fn closed() -> &'static Mutex<Vec<Closed>> {
    static CLOSED: OnceLock<Mutex<Vec<Closed>>> = OnceLock::new();
    CLOSED.get_or_init(|| {
        tracing_subscriber::registry().with(Collect).init();
        Mutex::new(Vec::new())
    })
}

impl<S> Layer<S> for Collect
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            closed().lock().unwrap().push(Closed {
                name: span.name(),
                fields,
            });
        }
    }
}

/// Waits for the closed `rebuno.llm` span of a call to `model`.
async fn llm_span(model: &str) -> Closed {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = closed()
            .lock()
            .unwrap()
            .iter()
            .find(|s| {
                s.name == "rebuno.llm"
                    && s.fields.get("gen_ai.request.model").map(String::as_str) == Some(model)
            })
            .cloned();
        if let Some(span) = found {
            return span;
        }
        assert!(
            Instant::now() < deadline,
            "no closed rebuno.llm span for {model}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

fn usage(span: &Closed) -> (Option<&str>, Option<&str>) {
    (
        span.fields
            .get("gen_ai.usage.input_tokens")
            .map(String::as_str),
        span.fields
            .get("gen_ai.usage.output_tokens")
            .map(String::as_str),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_read_to_the_end_puts_its_usage_on_the_span() {
    closed();
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
    assert_eq!(usage(&span), (Some("13"), Some("9")), "{span:?}");
    assert_eq!(span.fields["gen_ai.system"], "openai");
    assert_eq!(span.fields["outcome"], "executed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_dropped_early_still_puts_its_usage_on_the_span() {
    closed();
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
    assert_eq!(usage(&span), (Some("13"), Some("9")), "{span:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_puts_its_usage_on_the_span() {
    closed();
    run_handler("whole", |base| async move {
        let answer = OpenAi::new("k")
            .base_url(&base)
            .chat(json!({"model": "usage-whole", "messages": []}))
            .await?;
        Ok(json!({ "text": answer.text() }))
    })
    .await;
    let span = llm_span("usage-whole").await;
    assert_eq!(usage(&span), (Some("11"), Some("7")), "{span:?}");
}
