//! A progress bar for the kernel's schema migrations on a terminal (feature `cli`): a layer
//! that draws the `rebuno::migrations` events the stores emit as each migration is applied
//! (see [`MIGRATIONS_TARGET`](crate::telemetry::MIGRATIONS_TARGET)), and draws nothing when
//! stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal as _;
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The progress layer, filtered to the migration events; `None` when stderr is not a terminal.
pub(super) fn layer<S>() -> Option<impl Layer<S>>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let only = Targets::new().with_target(super::MIGRATIONS_TARGET, tracing::Level::DEBUG);
    Some(Migrations::default().with_filter(only))
}

/// Draws one bar per run of migrations.
#[derive(Default)]
struct Migrations {
    bar: Mutex<Option<ProgressBar>>,
}

/// The fields of a migration event.
#[derive(Default)]
struct Applied {
    version: Option<u64>,
    applied: Option<u64>,
    pending: Option<u64>,
}

impl Visit for Applied {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "version" => self.version = Some(value),
            "applied" => self.applied = Some(value),
            "pending" => self.pending = Some(value),
            _ => {}
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(value) = u64::try_from(value) {
            self.record_u64(field, value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for Migrations {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut applied = Applied::default();
        event.record(&mut applied);
        let (Some(version), Some(n), Some(pending)) =
            (applied.version, applied.applied, applied.pending)
        else {
            return;
        };
        let mut bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(pending);
            if let Ok(style) =
                ProgressStyle::with_template("migrating the schema [{bar:30}] {pos}/{len} {msg}")
            {
                b.set_style(style.progress_chars("=> "));
            }
            b
        });
        b.set_message(format!("(version {version})"));
        b.set_position(n);
        if n >= pending {
            b.finish_and_clear();
            *bar = None;
        }
    }
}
