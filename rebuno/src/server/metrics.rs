//! `/metrics`: the kernel's counters ([`crate::kernel::Metrics`]), two store figures
//! (executions by status, queue depth) and the kernel's latency histograms
//! ([`crate::kernel::Histograms`]) in the Prometheus text exposition format, namespace
//! `rebuno_`, each family with its `# HELP` and `# TYPE` lines. The store figures come from
//! [`Kernel::store_figures`]: a scrape never scans a table, they are at most a few seconds old.
//! Two gauges of the HTTP edge follow ([`edge`]).

use crate::Kernel;
use crate::protocol::ExecutionStatus;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `Content-Type` of the Prometheus text format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP rebuno_{name} {help}");
        let _ = writeln!(self.0, "# TYPE rebuno_{name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let _ = write!(self.0, "rebuno_{name}");
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape_label(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn counter(&mut self, name: &str, help: &str, value: &AtomicU64) {
        self.family(name, "counter", help);
        self.sample(name, &[], load(value));
    }
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Label values escape `\`, `"` and newlines.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The whole exposition. Store figures that cannot be read are left out rather than failing
/// the scrape.
pub(crate) async fn render(kernel: &Kernel) -> String {
    let m = kernel.metrics();
    let figures = kernel.store_figures().await.ok();
    let mut t = Text(String::new());

    t.counter(
        "executions_created_total",
        "Executions created.",
        &m.executions_created,
    );
    if let Some(figures) = &figures {
        let counts = &figures.executions_by_status;
        t.family("executions", "gauge", "Executions by current status.");
        for status in ExecutionStatus::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| s == status.as_str())
                .map_or(0, |(_, n)| *n);
            t.sample("executions", &[("status", status.as_str())], n);
        }
        for (status, n) in counts {
            if status.parse::<ExecutionStatus>().is_err() {
                t.sample("executions", &[("status", status)], n);
            }
        }
    }
    t.counter(
        "steps_submitted_total",
        "Step submissions.",
        &m.steps_submitted,
    );
    t.family(
        "replay_total",
        "counter",
        "Step submissions answered from the record (hit=\"true\") or that created a step (hit=\"false\").",
    );
    t.sample("replay_total", &[("hit", "true")], load(&m.replay_hits));
    t.sample("replay_total", &[("hit", "false")], load(&m.replay_misses));

    t.family(
        "dispatch_outcomes_total",
        "counter",
        "Webhook deliveries by outcome (exhausted counts dispatches that ran out of attempts).",
    );
    for (outcome, counter) in [
        ("success", &m.dispatch_success),
        ("rejected", &m.dispatch_failures),
        ("exhausted", &m.dispatch_exhausted),
    ] {
        t.sample(
            "dispatch_outcomes_total",
            &[("outcome", outcome)],
            load(counter),
        );
    }
    t.counter(
        "dispatches_reclaimed_total",
        "In-flight dispatches returned to the queue after their lease expired.",
        &m.dispatches_reclaimed,
    );
    if let Some(figures) = &figures {
        t.family(
            "queue_depth",
            "gauge",
            "Dispatches pending, failed (awaiting retry) or in flight.",
        );
        t.sample("queue_depth", &[], figures.queue_depth);
    }

    t.family(
        "policy_latency_seconds",
        "summary",
        "Time spent evaluating policy for new steps.",
    );
    t.sample(
        "policy_latency_seconds_sum",
        &[],
        load(&m.policy_nanos) as f64 / 1e9,
    );
    t.sample(
        "policy_latency_seconds_count",
        &[],
        load(&m.policy_evaluations),
    );

    t.family(
        "approval_wait_seconds",
        "summary",
        "Time approvals waited before being granted, denied or expired.",
    );
    t.sample(
        "approval_wait_seconds_sum",
        &[],
        load(&m.approval_wait_ms) as f64 / 1e3,
    );
    t.sample(
        "approval_wait_seconds_count",
        &[],
        load(&m.approvals_resolved),
    );
    // The recorder separates families with blank lines; this exposition has none.
    for line in kernel.histograms().render().lines() {
        if !line.is_empty() {
            t.0.push_str(line);
            t.0.push('\n');
        }
    }
    t.0
}

/// The HTTP edge's gauges: the live streams and change feeds open, and the bytes held for
/// agent request bodies whose signatures are not yet checked (both shrink back to 0 when
/// their requests are gone).
pub(crate) fn edge(streams_open: usize, unverified_body_bytes: usize) -> String {
    let mut t = Text(String::new());
    t.family(
        "http_streams_open",
        "gauge",
        "Live streams and change feeds open (each holds a connection).",
    );
    t.sample("http_streams_open", &[], streams_open);
    t.family(
        "unverified_body_bytes",
        "gauge",
        "Bytes held beyond the first 64 KiB of agent request bodies whose signatures are not yet checked.",
    );
    t.sample("unverified_body_bytes", &[], unverified_body_bytes);
    t.0
}
