//! The kernel's latency histograms, recorded through the `metrics` crate into a Prometheus
//! recorder that belongs to this kernel alone (no global recorder): several kernels in one
//! process (tests, a process serving two databases) each show their own figures on their own
//! `/metrics`, like the counters of [`super::Metrics`].
//!
//! What each family covers (all in seconds, buckets from 100 us to 30 s):
//!
//! - `rebuno_http_request_duration_seconds{method, route, status}`: every HTTP request this
//!   kernel's router answered, from routing to the response head (a streamed body, SSE,
//!   is not included), by the matched route template (`/v0/executions/{id}/steps`, never the raw
//!   path; `unmatched` for a path no route takes);
//! - `rebuno_step_decision_duration_seconds{kind, decision}`: [`Kernel::submit_step`] from
//!   arrival to answer, by step kind and decision (`error` when it failed), in process or over
//!   HTTP;
//! - `rebuno_dispatch_delivery_duration_seconds{outcome}`: one webhook delivery attempt (the
//!   signed POST to the agent until its answer), by `success` or `failure`;
//! - `rebuno_store_commit_duration_seconds{backend}`: one store commit (SQLite: a group commit
//!   on the writer thread, before its sync; PostgreSQL: one write transaction, `BEGIN` to
//!   `COMMIT`);
//! - `rebuno_store_sync_duration_seconds{backend}`: one `fdatasync` of the SQLite write-ahead
//!   log (file stores only; a sync over one second is also logged as a warning).

use super::KernelResult;
use crate::protocol::{Decision, ErrorCode, StepDecision, StepKind};
use metrics::{Key, Label, Metadata, Recorder as _, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// HTTP request latency, by method, route template and status.
pub const HTTP_REQUEST_DURATION: &str = "rebuno_http_request_duration_seconds";
/// Step decision latency, by step kind and decision.
pub const STEP_DECISION_DURATION: &str = "rebuno_step_decision_duration_seconds";
/// Webhook delivery latency, by outcome.
pub const DISPATCH_DELIVERY_DURATION: &str = "rebuno_dispatch_delivery_duration_seconds";
/// Store commit latency, by backend.
pub const STORE_COMMIT_DURATION: &str = "rebuno_store_commit_duration_seconds";
/// Store sync latency, by backend.
pub const STORE_SYNC_DURATION: &str = "rebuno_store_sync_duration_seconds";

/// Bucket bounds, seconds: from a replayed decision (tens of microseconds) to a slow webhook.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Samples recorded between two drains of the recorder's buffers: the recorder keeps every
/// sample until it is folded into its histogram, which a scrape or [`Histograms::upkeep`] does;
/// draining every so many samples bounds that buffer when nobody scrapes.
const UPKEEP_EVERY: u64 = 4096;

const FAMILIES: &[(&str, &str)] = &[
    (
        HTTP_REQUEST_DURATION,
        "HTTP requests by method, route template and status, until the response head.",
    ),
    (
        STEP_DECISION_DURATION,
        "Step submissions from arrival to decision, by step kind and decision.",
    ),
    (
        DISPATCH_DELIVERY_DURATION,
        "Webhook delivery attempts (signed POST to the agent's answer), by outcome.",
    ),
    (
        STORE_COMMIT_DURATION,
        "Store commits (SQLite group commit before its sync; PostgreSQL write transaction).",
    ),
    (
        STORE_SYNC_DURATION,
        "fdatasync of the SQLite write-ahead log.",
    ),
];

/// One kernel's histograms.
pub struct Histograms {
    recorder: PrometheusRecorder,
    samples: AtomicU64,
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histograms").finish_non_exhaustive()
    }
}

impl Default for Histograms {
    fn default() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        for (name, help) in FAMILIES {
            recorder.describe_histogram(
                (*name).into(),
                Some(Unit::Seconds),
                SharedString::const_str(help),
            );
        }
        Histograms {
            recorder,
            samples: AtomicU64::new(0),
        }
    }
}

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

impl Histograms {
    /// Records `elapsed` in histogram `name` with `labels`.
    pub fn record(&self, name: &'static str, labels: Vec<Label>, elapsed: Duration) {
        let key = Key::from_parts(name, labels);
        self.recorder
            .register_histogram(&key, &METADATA)
            .record(elapsed.as_secs_f64());
        if self.samples.fetch_add(1, Ordering::Relaxed) % UPKEEP_EVERY == UPKEEP_EVERY - 1 {
            self.upkeep();
        }
    }

    /// A handle that records into histogram `name` with `labels` (cheaper than
    /// [`Histograms::record`] for a fixed label set).
    pub fn handle(&self, name: &'static str, labels: Vec<Label>) -> metrics::Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(name, labels), &METADATA)
    }

    /// Folds buffered samples into their histograms.
    pub fn upkeep(&self) {
        self.recorder.handle().run_upkeep();
    }

    /// The histograms in the Prometheus text format (`# HELP`, `# TYPE … histogram`, buckets,
    /// `_sum` and `_count`).
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }
}

/// A step kind as a metric label: the three the SDKs send, else `other` (kinds are client
/// input, and a label's values must stay few).
pub(super) fn kind_label(kind: &StepKind) -> &'static str {
    match kind {
        StepKind::ToolCall => "tool_call",
        StepKind::LlmCall => "llm_call",
        StepKind::Local => "local",
        StepKind::Other(_) => "other",
    }
}

/// A decision (or the failure) as a label.
pub(super) fn decision_label(out: &KernelResult<StepDecision>) -> &'static str {
    match out {
        Ok(d) => match d.decision {
            Decision::Proceed => "proceed",
            Decision::Replay => "replay",
            Decision::Denied => "denied",
            Decision::Blocked => "blocked",
            Decision::ExecutionBlocked => "execution_blocked",
            Decision::RateLimited => "rate_limited",
            Decision::ExecutionTerminal => "execution_terminal",
            Decision::Recorded => "recorded",
        },
        Err(e) if e.code == ErrorCode::LeaseSuperseded => "lease_superseded",
        Err(_) => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_instance_renders_only_what_it_recorded() {
        let (a, b) = (Histograms::default(), Histograms::default());
        a.record(
            STEP_DECISION_DURATION,
            vec![
                Label::new("kind", "tool_call"),
                Label::new("decision", "proceed"),
            ],
            Duration::from_micros(300),
        );
        let text = a.render();
        assert!(
            text.contains(
                "rebuno_step_decision_duration_seconds_count{kind=\"tool_call\",decision=\"proceed\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rebuno_step_decision_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            !b.render()
                .contains("rebuno_step_decision_duration_seconds_count"),
            "{}",
            b.render()
        );
    }
}
