//! Span export over OTLP (HTTP/protobuf) and the bridge between [`TraceParent`] and the
//! OpenTelemetry context of `tracing` spans (feature `otel`).
//!
//! [`OtelConfig::from_env`] follows the standard variables: nothing is exported unless
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the latter gets
//! `/v1/traces` appended), `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn export
//! off, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the service, and the exporter
//! reads its own `OTEL_EXPORTER_OTLP_*` settings (headers, timeout). Spans are batched and sent
//! from a thread of the exporter's own, off the kernel's async workers.

use super::{LogFilter, TraceParent};
use opentelemetry::Context;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::registry::LookupSpan;

/// The context of the current span when it is exported (an OpenTelemetry layer is installed and
/// the span enabled), else `None`.
pub(super) fn current() -> Option<TraceParent> {
    let span = tracing::Span::current();
    if span.is_none() {
        return None;
    }
    let context = span.context();
    let span_ref = context.span();
    let sc = span_ref.span_context();
    if !sc.is_valid() {
        return None;
    }
    TraceParent::new(
        sc.trace_id().to_bytes(),
        sc.span_id().to_bytes(),
        sc.trace_flags().to_u8(),
    )
}

/// Makes `span` a child of the remote span `parent` names.
pub(super) fn set_parent(span: &tracing::Span, parent: TraceParent) {
    let remote = SpanContext::new(
        TraceId::from_bytes(parent.trace_id()),
        SpanId::from_bytes(parent.parent_id()),
        TraceFlags::new(parent.flags()),
        true,
        TraceState::default(),
    );
    // Without an OpenTelemetry layer there is nothing to parent.
    let _ = span.set_parent(Context::new().with_remote_span_context(remote));
}

/// Where and as what spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelConfig {
    /// The OTLP/HTTP traces URL (`…/v1/traces`); `None` reads the `OTEL_EXPORTER_OTLP_*`
    /// variables.
    pub traces_endpoint: Option<String>,
    /// The service name (`service.name`); `None` reads `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl OtelConfig {
    /// Export to the OTLP/HTTP collector at `base` (`http://host:4318`; `/v1/traces` is
    /// appended) as service `service_name`.
    pub fn new(base: &str, service_name: &str) -> OtelConfig {
        OtelConfig {
            traces_endpoint: Some(format!("{}/v1/traces", base.trim_end_matches('/'))),
            service_name: Some(service_name.to_owned()),
        }
    }

    /// The configuration the `OTEL_*` variables give, or `None` when they configure no
    /// export: no OTLP endpoint, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    /// `default_service` names the service when `OTEL_SERVICE_NAME` does not.
    pub fn from_env(default_service: &str) -> Option<OtelConfig> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return None;
        }
        env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
        Some(OtelConfig {
            traces_endpoint: None,
            service_name: env("OTEL_SERVICE_NAME")
                .is_none()
                .then(|| default_service.to_owned()),
        })
    }

    /// Starts the exporter and answers the `tracing` layer that feeds it, and the guard that
    /// flushes it. The layer exports the spans `RUST_LOG` enables (else `REBUNO_LOG_LEVEL`, else
    /// `info`), and rebuno's own spans at `debug` whatever it says: the per-step spans (HTTP
    /// requests, decisions, tool and LLM calls) are at `debug`, so that logging at `info`
    /// formats nothing per step, yet they are exported.
    pub fn layer<S>(&self) -> Result<(impl tracing_subscriber::Layer<S>, OtelGuard), String>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        self.layer_with(LogFilter::REBUNO)
    }

    /// [`OtelConfig::layer`] exporting the spans `filter` enables, and the spans of its
    /// [`LogFilter::exported_spans`] targets at `debug` whatever it says.
    pub fn layer_with<S>(
        &self,
        filter: LogFilter,
    ) -> Result<(impl tracing_subscriber::Layer<S>, OtelGuard), String>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_http();
        if let Some(endpoint) = &self.traces_endpoint {
            exporter = exporter.with_endpoint(endpoint.clone());
        }
        let exporter = exporter
            .build()
            .map_err(|e| format!("cannot start the OTLP exporter: {e}"))?;
        let mut resource = Resource::builder();
        if let Some(name) = &self.service_name {
            resource = resource.with_service_name(name.clone());
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("rebuno");
        let targets = filter.exported_spans;
        let own_spans = filter_fn(move |meta| {
            meta.is_span()
                && *meta.level() <= Level::DEBUG
                && targets.iter().any(|t| meta.target().starts_with(t))
        });
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_filter(filter.env_filter().or(own_spans));
        Ok((layer, OtelGuard { provider }))
    }
}

/// Keeps the span exporter running; dropping it exports what is left and stops it. Hold it
/// for the life of the process.
#[derive(Debug)]
pub struct OtelGuard {
    provider: SdkTracerProvider,
}

impl OtelGuard {
    /// Exports every finished span now (blocks until the exporter answers; call it off the
    /// async workers, e.g. in `spawn_blocking`).
    pub fn flush(&self) -> Result<(), String> {
        self.provider.force_flush().map_err(|e| e.to_string())
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}
