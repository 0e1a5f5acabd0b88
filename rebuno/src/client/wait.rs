//! Waiting: [`Client::wait`] until an execution ends, [`Client::wait_until`] until it satisfies
//! a predicate, [`Client::wait_approval`] until an approval is decided; all driven by the
//! kernel's change notifications rather than a polling interval.
//!
//! A wait registers as a waiter on the execution before it reads anything, then reads the
//! execution once, and again only when the kernel says the execution changed (it blocked,
//! resumed or ended): in process through the kernel's table of waiters, over HTTP through the
//! client's one change feed (`http::feed`), which all its waits share. It still reads once every
//! [`WAIT_RECHECK`] (see [`Client::with_wait_recheck`]) in case a notification was lost. When
//! an HTTP client's feed is closed (the kernel refused it, is unreachable, or predates it) the
//! wait polls instead, 25 ms apart at first and slowing to 250 ms, until the feed is back.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::backend::Backend;
use super::{Client, uuid_id};
use crate::error::{Error, Result};
use crate::protocol::{Approval, ApprovalStatus, Execution};
use crate::waiters::Waiter;

/// How often, by default, a wait reads again while it relies on notifications: a safety net
/// for a lost notification, not how changes are seen.
pub const WAIT_RECHECK: Duration = Duration::from_secs(10);
/// First pause between two polls of a wait whose change feed is closed; it doubles up to
/// [`POLL_MAX`].
const POLL_INITIAL: Duration = Duration::from_millis(25);
/// Longest pause between two polls of a wait whose change feed is closed.
const POLL_MAX: Duration = Duration::from_millis(250);

/// A registered wait on one execution.
struct Watch<'c> {
    waiter: Waiter,
    /// The client's backend, which says whether its notifications are coming (an HTTP
    /// client's feed may be closed; in process they never stop).
    backend: &'c dyn Backend,
}

impl Watch<'_> {
    /// Whether notifications are coming (otherwise the wait polls).
    fn live(&self) -> bool {
        self.backend.notifications_live()
    }
}

impl Client {
    /// This client with another recheck interval for its waits (default [`WAIT_RECHECK`]):
    /// how long a wait goes without reading while it relies on the kernel's notifications.
    /// Changes are seen through the notifications whatever it is; it only bounds how late a
    /// lost notification is noticed. (Clones share connections and the change feed.)
    pub fn with_wait_recheck(mut self, every: Duration) -> Client {
        self.wait_recheck = every;
        self
    }

    /// Waits until the execution is terminal (completed, failed or cancelled) and returns it.
    /// `blocked` is not terminal: an execution waiting on an approval keeps this waiting.
    ///
    /// The wait is woken by the kernel's notification that the execution changed (see the
    /// module docs), so it returns as soon as the end is durable, without a polling interval.
    /// It reads the execution at once (a zero `timeout` reads once) and again at the deadline;
    /// when the execution is still not terminal then, the wait fails with [`Error::Other`]
    /// naming the last status seen. Any other error (unknown execution, network) ends the
    /// wait at once.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Execution> {
        self.wait_until(id, |e| e.status.is_terminal(), timeout)
            .await
    }

    /// Waits until `done` accepts the execution and returns that state: `done` sees the
    /// execution as first read, then as read after each change the kernel announces (and at
    /// each recheck). The last read is made at the deadline; if `done` still refuses, the wait
    /// fails with [`Error::Other`] naming the last status seen. A read may overrun the deadline
    /// by one request (at most the request timeout). Any error of a read (unknown execution,
    /// network) ends the wait at once.
    pub async fn wait_until<F>(&self, id: &str, mut done: F, timeout: Duration) -> Result<Execution>
    where
        F: FnMut(&Execution) -> bool,
    {
        let id = uuid_id(id, "execution id")?;
        let watch = self.watch(&id);
        let deadline = deadline_after(timeout);
        self.await_change(&watch, deadline, || self.get(&id), |e| done(e))
            .await
            .map_err(|last| match last {
                Waited::Failed(e) => e,
                Waited::Timeout(exec) => timed_out("execution", &id, timeout, &exec.status),
            })
    }

    /// Waits until the approval is decided (granted, denied or expired) and returns it. Like
    /// [`Client::wait`] it is woken by the kernel's notification that the approval's execution
    /// changed (a decision resumes it), reads the approval at once and at the deadline, and
    /// fails with [`Error::Other`] when it is still pending then. `404 not_found` for an
    /// unknown approval.
    pub async fn wait_approval(&self, id: &str, timeout: Duration) -> Result<Approval> {
        let id = uuid_id(id, "approval id")?;
        let first = self.approval(&id).await?;
        if first.status != ApprovalStatus::Pending {
            return Ok(first);
        }
        let watch = self.watch(&first.execution_id);
        let deadline = deadline_after(timeout);
        let pending = |a: &Approval| a.status == ApprovalStatus::Pending;
        self.await_change(&watch, deadline, || self.approval(&id), |a| !pending(a))
            .await
            .map_err(|last| match last {
                Waited::Failed(e) => e,
                Waited::Timeout(a) => timed_out("approval", &id, timeout, &a.status),
            })
    }

    /// Registers a wait on execution `id` (a canonical id): in the kernel's table in process,
    /// in this client's (with its feed) over HTTP.
    fn watch(&self, id: &str) -> Watch<'_> {
        Watch {
            waiter: self.backend.watch(id),
            backend: self.backend.as_ref(),
        }
    }

    /// Reads with `read` until `done` accepts what it answers: at once, after each wake-up of
    /// `watch`, every recheck (or poll, while the feed is closed) and at `deadline`.
    async fn await_change<T, R, Fut>(
        &self,
        watch: &Watch<'_>,
        deadline: Instant,
        mut read: R,
        mut done: impl FnMut(&T) -> bool,
    ) -> std::result::Result<T, Waited<T>>
    where
        R: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut pause = POLL_INITIAL;
        loop {
            let value = read().await.map_err(Waited::Failed)?;
            if done(&value) {
                return Ok(value);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Waited::Timeout(value));
            }
            let nap = if watch.live() {
                pause = POLL_INITIAL;
                self.wait_recheck
            } else {
                let nap = pause;
                pause = (pause * 2).min(POLL_MAX);
                nap
            };
            tokio::select! {
                () = watch.waiter.changed() => {}
                () = tokio::time::sleep(nap.min(deadline - now)) => {}
            }
        }
    }
}

/// How a wait that did not succeed ended.
enum Waited<T> {
    /// A read failed.
    Failed(Error),
    /// The deadline came; the value as last read.
    Timeout(T),
}

/// The deadline `timeout` from now; a timeout too long to add means no deadline (one far off).
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// The error of a wait that reached its deadline.
fn timed_out(what: &str, id: &str, timeout: Duration, status: &dyn std::fmt::Display) -> Error {
    Error::Other(format!(
        "timed out after {timeout:?} waiting for {what} {id} (status {status})"
    ))
}
