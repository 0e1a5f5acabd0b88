//! Log capture for tests (rebuno's and receipt's): every event of the test binary, at TRACE and
//! for every target, and the close of every span with the fields it holds by then, as the
//! human-readable lines of `tracing_subscriber::fmt`, in one buffer. A test file says
//! `use test_support::logs;` and calls [`logs()`] first in each test (it installs the capture
//! once per binary).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing_subscriber::fmt::format::FmtSpan;

/// Every log line of the test binary so far.
pub fn logs() -> String {
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    let buffer = BUFFER.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_span_events(FmtSpan::CLOSE)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .init();
        buffer
    });
    String::from_utf8_lossy(&buffer.lock().unwrap()).into_owned()
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

/// Waits (up to 30 s) until the logs have a line for which `found` holds; answers it.
pub async fn log_line(what: &str, found: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(line) = logs().lines().find(|l| found(l)) {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "no log line {what}:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The fields of span `name` (`a=1 b="x"`) when `line` is its close: the line ends the span
/// named `name`, innermost in the line's span context.
pub fn closed_span<'l>(line: &'l str, name: &str) -> Option<&'l str> {
    let open = format!("{name}{{");
    let start = line.rfind(&open)? + open.len();
    let rest = &line[start..];
    // The fields end at the brace that closes this span's (braces in values are balanced).
    let mut depth = 1usize;
    let end = rest.char_indices().find_map(|(i, c)| {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        (depth == 0).then_some(i)
    })?;
    let after = &rest[end + 1..];
    // Innermost: the span context ends here (`: <target>: close ...`).
    let innermost = after.starts_with(": ");
    (innermost && after.contains(": close")).then_some(&rest[..end])
}

/// Waits (up to 30 s) for the close of a span `name` whose fields satisfy `found`; answers
/// its fields.
pub async fn closed(name: &str, found: impl Fn(&str) -> bool) -> String {
    let line = log_line(&format!("closing a {name} span"), |l| {
        closed_span(l, name).is_some_and(&found)
    })
    .await;
    closed_span(&line, name).unwrap_or_default().to_owned()
}

/// `line`, a line a binary wrote on stderr with `--log-format json`, as the JSON object it must
/// be: with a `level` and a message (`fields.message`). Panics, showing the line, otherwise.
pub fn json_log_line(line: &str) -> serde_json::Value {
    let event: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
    assert!(event["level"].is_string(), "no level: {line}");
    assert!(event["fields"]["message"].is_string(), "no message: {line}");
    event
}
