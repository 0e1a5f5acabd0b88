//! The agent SDK's observation layer: what an effect observer is told ([`Effect`],
//! [`EffectOutcome`], [`EffectObserver`]), and the SDK's spans, logs and metrics. The layers
//! above report into it: the execution context each effect decision, the LLM interception its
//! span and the token usage of a recorded answer ([`llm_span`], [`llm_usage`]).
//!
//! Spans: `rebuno.agent.handle` for each handler run (one delivery: execution, dispatch,
//! attempt, agent, outcome), continuing the trace of the delivery's `traceparent`;
//! `rebuno.tool` / `rebuno.step` for each tool call and recorded local step (target, step id,
//! whether it ran or replayed); `rebuno.llm` for each intercepted LLM call, with the GenAI
//! semantic-convention attributes (`gen_ai.operation.name`, `gen_ai.system`,
//! `gen_ai.request.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`; a
//! streamed answer's span stays open until the stream is recorded and then carries the usage
//! its events reported). The effect spans are at `debug` (one per step); the span exporter takes
//! rebuno's spans at `debug`.
//!
//! Metrics, through the `metrics` facade (recorded by whatever recorder the agent's process
//! installs; none by default): `rebuno_sdk_handler_duration_seconds{agent, outcome}` (a
//! histogram: each handler run, `outcome` = `completed`, `failed`, `suspended` or `skipped`)
//! and `rebuno_sdk_effects_total{kind, outcome}` (a counter: each effect decision,
//! `executed`, `replayed` or `refused`).

use crate::protocol::{Decision, StepDecision, StepKind};
use std::sync::Arc;
use std::time::Duration;
use tracing::field::Empty;

/// What happened to one effect, as reported to an [`EffectObserver`]: its decision (`Ran`,
/// `Replayed`, `Blocked`, `Refused`), and then, for a body that ran and failed, `Failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectOutcome {
    /// The kernel said `proceed` and the body ran now.
    Ran,
    /// The kernel said `replay`: the recorded outcome (a result or an error) was returned and
    /// the body did not run.
    Replayed,
    /// The kernel holds it (`blocked`: an approval, or a rate-limit park): the dispatch
    /// unwinds, and the execution resumes with a new dispatch once that is resolved.
    Blocked,
    /// The kernel refused it (denied, rate limited, or the execution is terminal): the effect
    /// fails with that refusal.
    Refused,
    /// Reported after `Ran` for the same step: the body failed, and its error is recorded as
    /// the step's (a replay of it reports `Replayed`).
    Failed,
}

/// One effect of an execution, as reported to an [`EffectObserver`].
#[derive(Debug, Clone)]
pub struct Effect {
    /// The execution.
    pub execution_id: String,
    /// `tool_call`, `llm_call` or `local`.
    pub kind: StepKind,
    /// The tool, model or step name.
    pub target: String,
    /// The step id, when the decision was recorded.
    pub step_id: Option<String>,
    /// What happened.
    pub outcome: EffectOutcome,
    /// The decision as the kernel sent it.
    pub decision: Decision,
}

/// Called with every effect decision of the executions an agent runs (logging, metrics, demos).
pub type EffectObserver = Arc<dyn Fn(&Effect) + Send + Sync>;

/// Handler runs, by agent and outcome.
pub const SDK_HANDLER_DURATION: &str = "rebuno_sdk_handler_duration_seconds";
/// Effect decisions, by step kind and outcome.
pub const SDK_EFFECTS: &str = "rebuno_sdk_effects_total";

/// A step kind as a label (the three the SDK submits, else `other`).
fn kind_label(kind: &StepKind) -> &'static str {
    match kind {
        StepKind::ToolCall => "tool_call",
        StepKind::LlmCall => "llm_call",
        StepKind::Local => "local",
        StepKind::Other(_) => "other",
    }
}

/// The span of one tool call (`tool_call`) or recorded step (any other kind) of `execution_id`.
pub(crate) fn effect_span(kind: &StepKind, target: &str, execution_id: &str) -> tracing::Span {
    match kind {
        StepKind::ToolCall => tracing::debug_span!(
            "rebuno.tool",
            otel.name = %format_args!("tool {target}"),
            tool.name = target,
            execution_id,
            step_id = Empty,
            outcome = Empty,
        ),
        _ => tracing::debug_span!(
            "rebuno.step",
            otel.name = %format_args!("step {target}"),
            step.kind = kind_label(kind),
            step.target = target,
            execution_id,
            step_id = Empty,
            outcome = Empty,
        ),
    }
}

/// The span of one intercepted LLM call of `execution_id` to `model` at `url`.
pub(crate) fn llm_span(model: &str, url: &reqwest::Url, execution_id: &str) -> tracing::Span {
    tracing::debug_span!(
        "rebuno.llm",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.system = gen_ai_system(url),
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        execution_id,
        step_id = Empty,
        outcome = Empty,
    )
}

/// The GenAI `gen_ai.system` of a provider URL: `anthropic` for its Messages API, else
/// `openai` for the OpenAI-compatible APIs this SDK records.
fn gen_ai_system(url: &reqwest::Url) -> &'static str {
    let host = url.host_str().unwrap_or("");
    if host.contains("anthropic") || url.path().ends_with("/messages") {
        "anthropic"
    } else {
        "openai"
    }
}

/// The names of the effect spans ([`effect_span`], [`llm_span`]).
const EFFECT_SPANS: [&str; 3] = ["rebuno.tool", "rebuno.step", "rebuno.llm"];

/// The current span when it is an effect's: an effect span that no subscriber enabled is not
/// current, and the enclosing span (the handler's) must not get the effect's fields.
fn current_effect_span() -> Option<tracing::Span> {
    let span = tracing::Span::current();
    span.metadata()
        .is_some_and(|m| EFFECT_SPANS.contains(&m.name()))
        .then_some(span)
}

/// Records the token usage of a recorded LLM response (a whole answer, or an event stream's
/// text) on the current LLM span.
pub(crate) fn llm_usage(record: &serde_json::Value) {
    if let Some((input, output)) = crate::protocol::token_usage(record)
        && let Some(span) = current_effect_span()
    {
        span.record("gen_ai.usage.input_tokens", input);
        span.record("gen_ai.usage.output_tokens", output);
    }
}

/// One effect decision: counted, noted on the current effect span, logged at `debug`.
pub(crate) fn effect(kind: &StepKind, target: &str, dec: &StepDecision, outcome: EffectOutcome) {
    // The metric's labels are unchanged: a blocked effect counts as refused, and a failure
    // (reported to observers after the body) is not a second decision.
    let outcome = match outcome {
        EffectOutcome::Ran | EffectOutcome::Failed => "executed",
        EffectOutcome::Replayed => "replayed",
        EffectOutcome::Blocked | EffectOutcome::Refused => "refused",
    };
    metrics::counter!(SDK_EFFECTS, "kind" => kind_label(kind), "outcome" => outcome).increment(1);
    let step_id = dec.step_id.as_deref().unwrap_or("");
    if let Some(span) = current_effect_span() {
        span.record("outcome", outcome);
        if !step_id.is_empty() {
            span.record("step_id", step_id);
        }
    }
    tracing::debug!(
        step.kind = kind.as_str(),
        step.target = target,
        step_id,
        decision = dec.decision.as_str(),
        outcome,
        "effect decided"
    );
}

/// One handler run ended with `outcome` after `elapsed`.
pub(crate) fn handler_ended(agent_id: &str, outcome: &'static str, elapsed: Duration) {
    tracing::Span::current().record("outcome", outcome);
    metrics::histogram!(
        SDK_HANDLER_DURATION,
        "agent" => agent_id.to_owned(),
        "outcome" => outcome
    )
    .record(elapsed.as_secs_f64());
    tracing::info!(
        outcome,
        elapsed_ms = elapsed.as_millis() as u64,
        "handler finished"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::format::FmtSpan;

    #[test]
    fn an_effect_whose_span_is_not_enabled_leaves_the_handler_span_alone() {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_span_events(FmtSpan::CLOSE)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let handler = tracing::info_span!("rebuno.agent.handle", outcome = Empty);
            let _handler = handler.enter();
            // At info the effect spans (debug) are not enabled: the handler's is current.
            let effect_span = effect_span(&StepKind::ToolCall, "lookup", "exec-1");
            let _effect = effect_span.enter();
            let dec = StepDecision::proceed().with_step_id("step-1");
            effect(&StepKind::ToolCall, "lookup", &dec, EffectOutcome::Ran);
            llm_usage(&serde_json::json!({"usage": {"prompt_tokens": 3, "completion_tokens": 4}}));
            handler.record("outcome", "completed");
        });
        let logs = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
        assert!(logs.contains("outcome=\"completed\""), "{logs}");
        for stray in ["executed", "step-1", "gen_ai"] {
            assert!(!logs.contains(stray), "{stray} in {logs}");
        }
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
