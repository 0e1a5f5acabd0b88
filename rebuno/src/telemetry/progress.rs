//! Progress on a terminal (feature `telemetry`): [`Progress`], the bar or spinner a long
//! command draws on stderr when (and only when) stderr is a terminal; the writer that prints
//! log lines above the bars instead of through them; and the layer that draws the kernel's
//! schema migrations from the `rebuno::migrations` events the stores emit (see
//! [`MIGRATIONS_TARGET`](crate::telemetry::MIGRATIONS_TARGET)).

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressStyle};
use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Set when the log lines are JSON: no bar is drawn among them, even on a terminal.
static NEVER_DRAW: AtomicBool = AtomicBool::new(false);

/// From now on no bar is drawn (every [`Progress`] is hidden): the log lines on stderr are for
/// a machine.
pub(super) fn never_draw() {
    NEVER_DRAW.store(true, Ordering::Relaxed);
}

/// How often a spinner turns.
const SPIN: Duration = Duration::from_millis(120);

/// Every bar drawn by this process, so that log lines can be printed above them. Set when the
/// first bar is drawn (never when stderr is not a terminal).
static BARS: OnceLock<MultiProgress> = OnceLock::new();

/// A progress bar, or a spinner when the amount of work is not known, on stderr.
///
/// It is drawn only when stderr is a terminal and the log lines of [`init`](super::init) are
/// not JSON: otherwise every method does nothing, so a command's output is the same in a pipe,
/// a file, CI or a test. Log lines written by the subscriber of [`init`](super::init) while it
/// is drawn are printed above it. Clones share the bar; it is cleared by [`Progress::finish`],
/// or when the last clone is dropped.
///
/// ```no_run
/// let progress = rebuno::telemetry::Progress::bar("verifying", 10_000);
/// for _ in 0..10_000 {
///     progress.inc(1);
/// }
/// progress.finish();
/// ```
#[derive(Debug, Clone, Default)]
pub struct Progress {
    bar: Option<Arc<Drawn>>,
}

/// A bar on the screen, cleared when the last [`Progress`] holding it goes (also when a
/// command stops early on an error, so its `error:` line is not printed after a stale bar).
#[derive(Debug)]
struct Drawn(ProgressBar);

impl Drop for Drawn {
    fn drop(&mut self) {
        clear(&self.0);
    }
}

/// Takes `bar` out of the bars drawn and off the screen (any other bar is drawn again at its
/// next update).
fn clear(bar: &ProgressBar) {
    bar.finish_and_clear();
    if let Some(bars) = BARS.get() {
        bars.remove(bar);
        let _ = bars.clear();
    }
}

impl Progress {
    /// A bar of `len` steps, labelled `label` (`label [=====>    ] 512/1024 message`).
    pub fn bar(label: &str, len: u64) -> Progress {
        Progress::draw(label, Some(len))
    }

    /// A spinner labelled `label`, for work of unknown length (`label ⠙ message`).
    pub fn spinner(label: &str) -> Progress {
        Progress::draw(label, None)
    }

    /// A progress that draws nothing.
    pub fn hidden() -> Progress {
        Progress::default()
    }

    fn draw(label: &str, len: Option<u64>) -> Progress {
        if !std::io::stderr().is_terminal() || NEVER_DRAW.load(Ordering::Relaxed) {
            return Progress::hidden();
        }
        let (bar, template) = match len {
            Some(len) => (
                ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden()),
                "{prefix} [{bar:30}] {pos}/{len} {msg}",
            ),
            None => (
                ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
                "{prefix} {spinner} {msg}",
            ),
        };
        // Styled while hidden, then drawn only through the bars of this process, which know
        // every line they drew and so can clear it.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_owned());
        let bar = BARS
            .get_or_init(MultiProgress::new)
            .add(bar.with_finish(ProgressFinish::AndClear));
        if len.is_none() {
            bar.enable_steady_tick(SPIN);
        }
        Progress {
            bar: Some(Arc::new(Drawn(bar))),
        }
    }

    /// Whether anything is drawn (stderr is a terminal).
    pub fn is_drawn(&self) -> bool {
        self.bar.is_some()
    }

    /// Advances by `delta` steps.
    pub fn inc(&self, delta: u64) {
        if let Some(Drawn(bar)) = self.bar.as_deref() {
            bar.inc(delta);
        }
    }

    /// Sets the steps done.
    pub fn set_position(&self, position: u64) {
        if let Some(Drawn(bar)) = self.bar.as_deref() {
            bar.set_position(position);
        }
    }

    /// Sets the number of steps.
    pub fn set_length(&self, len: u64) {
        if let Some(Drawn(bar)) = self.bar.as_deref() {
            bar.set_length(len);
        }
    }

    /// Sets the text shown after the bar.
    pub fn set_message(&self, message: impl Into<String>) {
        if let Some(Drawn(bar)) = self.bar.as_deref() {
            bar.set_message(message.into());
        }
    }

    /// Clears the bar from the terminal; later calls do nothing visible.
    pub fn finish(&self) {
        if let Some(Drawn(bar)) = self.bar.as_deref() {
            clear(bar);
        }
    }
}

/// The log writer of [`init`](super::init): stderr, with any bar drawn taken off the screen
/// while a line is written and drawn again below it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stderr;

/// One log line's write (the formatter writes each event in one call).
pub(super) struct StderrLine;

impl std::io::Write for StderrLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let write = || std::io::stderr().lock().write_all(buf);
        match BARS.get() {
            Some(bars) => bars.suspend(write)?,
            None => write()?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = StderrLine;
    fn make_writer(&'a self) -> StderrLine {
        StderrLine
    }
}

/// The migration progress layer, filtered to the migration events; `None` when stderr is not
/// a terminal.
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
    bar: Mutex<Option<Progress>>,
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
        let b = bar.get_or_insert_with(|| Progress::bar("migrating the schema", pending));
        b.set_message(format!("(version {version})"));
        b.set_position(n);
        if n >= pending {
            b.finish();
            *bar = None;
        }
    }
}
