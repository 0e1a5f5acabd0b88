//! `remote-notify`: a receipt agent whose one action, `notify`, has an `external` side effect
//! (it sends a notification) and therefore runs remotely: on a worker that serves target group
//! [`GROUP`] for a rebuno kernel ([`receipt::kernel::KernelWorker`]), dispatched by the
//! controller through the kernel ([`receipt::kernel::KernelDispatcher`]).
//!
//! The send is a rebuno step (`rebuno::step`), so it is recorded in the kernel: a worker killed
//! after the send and before the action finished is delivered the call again, the step replays
//! its recorded answer, and the notification is not sent twice. The invocation id is the send's
//! idempotency key as well, for a real provider that deduplicates.
//!
//! The outbox is a file ([`OUTBOX_ENV`]; one JSON line per notification sent), standing in for
//! a notification service. [`PAUSE_ENV`] makes the action wait that many milliseconds after the
//! send (the `remote-actions` example kills the worker in that window), and
//! [`SENT_MARKER_ENV`] names a file the action creates right after the send, so the example
//! knows when to kill.

use super::Task;
use receipt::agent::ActionContext;
use serde::Deserialize;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The target group `notify` runs in (the worker's rebuno agent is `receipt-worker-notify`).
pub const GROUP: &str = "notify";
/// The outbox file (default: `remote-notify-outbox.jsonl` in the system's temporary directory).
pub const OUTBOX_ENV: &str = "REMOTE_NOTIFY_OUTBOX";
/// Milliseconds `notify` waits after the send, before it records the notification (default 0).
pub const PAUSE_ENV: &str = "REMOTE_NOTIFY_PAUSE_MS";
/// A file `notify` creates right after the send (default: none).
pub const SENT_MARKER_ENV: &str = "REMOTE_NOTIFY_SENT_MARKER";

/// The outbox file `notify` appends to.
pub fn outbox() -> PathBuf {
    std::env::var_os(OUTBOX_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("remote-notify-outbox.jsonl"))
}

/// Sends one notification: appends `{"key", "message"}` to the outbox and answers its
/// position there (the "message id" a real provider would answer).
fn send(key: &str, message: &str) -> std::io::Result<u64> {
    let path = outbox();
    let sent = std::fs::read_to_string(&path)
        .map(|text| text.lines().count())
        .unwrap_or(0);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    writeln!(file, "{}", json!({ "key": key, "message": message }))?;
    file.sync_all()?;
    Ok(u64::try_from(sent).unwrap_or(u64::MAX) + 1)
}

/// The notification, once sent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Notified {
    /// The outbox's message id.
    pub message_id: u64,
    /// What was sent.
    pub message: String,
}

/// What `remote-notify` reads and writes.
#[receipt::receipts]
#[derive(Debug, PartialEq)]
pub enum NotifyReceipts {
    /// The seed.
    #[receipt("task.requested")]
    TaskRequested {
        /// The problem text: what to notify.
        prompt: String,
    },
    /// The notification went out; the goal.
    #[receipt("notification.sent")]
    NotificationSent {
        /// The outbox's message id.
        message_id: u64,
        /// What was sent.
        message: String,
    },
}

/// The view of a `remote-notify` run.
#[receipt::view]
#[derive(Debug)]
pub struct NotifyView {
    /// The task, once seeded.
    #[view(last = "task.requested")]
    pub task: Option<Task>,
    /// The notification, once sent.
    #[view(last = "notification.sent")]
    pub sent: Option<Notified>,
}

/// The `remote-notify` agent.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoteNotify;

#[receipt::agent(id = "remote-notify", version = "1.0.0", receipts = NotifyReceipts, view = NotifyView)]
impl RemoteNotify {
    /// Sends the notification (once, even across a worker crash) and records it.
    #[action(
        kind = "tool",
        side_effects = "external",
        execution = "remote",
        target_group = "notify",
        when = Self::pending
    )]
    async fn notify(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let message = ctx
            .view()
            .task
            .as_ref()
            .map(|t| format!("notice: {}", t.prompt))
            .unwrap_or_default();
        let key = ctx.invocation_id().to_owned();
        // Recorded by the kernel: a re-delivery replays the answer instead of sending again.
        let message_id: u64 = rebuno::step(
            "send_notification",
            json!({ "key": key, "message": message }),
            || {
                let (key, message) = (key.clone(), message.clone());
                async move { send(&key, &message) }
            },
        )
        .await?;
        if let Some(marker) = std::env::var_os(SENT_MARKER_ENV) {
            std::fs::write(marker, message_id.to_string())?; // `?` takes any error
        }
        let pause = std::env::var(PAUSE_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        ctx.emit(NotifyReceipts::NotificationSent {
            message_id,
            message,
        })
        .await
    }

    /// Nothing sent yet.
    fn pending(view: &NotifyView) -> bool {
        view.task.is_some() && view.sent.is_none()
    }

    /// Sent.
    #[goal]
    fn done(view: &NotifyView) -> bool {
        view.sent.is_some()
    }
}
