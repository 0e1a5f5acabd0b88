//! Waiting on an execution: [`Client::wait`] until it ends, driven by the execution's live
//! stream, and [`Client::wait_until`] for any predicate, by polling.
//!
//! The kernel ends an execution's live stream (`GET /v0/executions/{id}/stream`, or
//! `Kernel::subscribe` in process) when the execution ends, so a waiter holds one subscription
//! and re-reads the execution when it ends: no request is made while nothing happens, and the
//! end is seen at once. A stream can also end for other reasons (a server shutting its streams
//! down, a proxy closing an idle response): the re-read tells, and the waiter subscribes again
//! after a pause that grows like a poll's. While subscribed it still re-reads once every
//! [`WAIT_RECHECK`], in case an end was missed. When the kernel refuses another subscriber
//! (`429 too_many_requests`, its caps), the wait polls instead.

use std::time::Duration;

use reqwest::Method;
use tokio::time::Instant;

use super::{Backend, Client, POLL_INITIAL, POLL_MAX, uuid_id};
use crate::error::{Error, Result};
use crate::protocol::{ErrorCode, Execution};

/// How often [`Client::wait`] re-reads an execution while its live stream is open.
pub const WAIT_RECHECK: Duration = Duration::from_secs(1);

/// What following an execution's live stream came to.
enum Follow {
    /// The execution is terminal.
    Ended(Execution),
    /// The deadline came first; the execution as last read.
    Deadline(Execution),
    /// The stream closed without the execution ending.
    Closed,
    /// The kernel refused another subscriber: poll instead.
    Refused,
}

impl Client {
    /// Waits until the execution is terminal (completed, failed or cancelled) and returns it.
    /// `blocked` is not terminal: an execution waiting on an approval keeps this waiting.
    ///
    /// The wait follows the execution's live stream (see the module docs): it returns as soon
    /// as the kernel ends the stream, re-reading the execution only then and once every
    /// [`WAIT_RECHECK`], and polls like [`Client::wait_until`] when the kernel refuses another
    /// subscriber. It subscribes before it reads anything (the stream of an execution that
    /// has ended ends at once; a zero `timeout` reads once); when the execution is still not
    /// terminal at the deadline, the wait fails with [`Error::Other`] naming the last status
    /// seen. Any other error (unknown execution, network) ends the
    /// wait at once.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Execution> {
        let deadline = deadline_after(timeout);
        let mut pause = POLL_INITIAL;
        // The first subscription needs no read before it: the stream of an execution that has
        // ended already ends at once, and the read after it tells.
        let mut subscribed_before = false;
        loop {
            if subscribed_before {
                let exec = self.get(id).await?;
                if exec.status.is_terminal() {
                    return Ok(exec);
                }
                if Instant::now() >= deadline {
                    return Err(timed_out(id, timeout, &exec));
                }
            }
            subscribed_before = true;
            match self.follow(id, deadline).await? {
                Follow::Ended(exec) => return Ok(exec),
                Follow::Deadline(exec) => return Err(timed_out(id, timeout, &exec)),
                Follow::Refused => {
                    return self
                        .poll_until(id, |e| e.status.is_terminal(), deadline, timeout)
                        .await;
                }
                Follow::Closed => {
                    // Do not subscribe again at once, in case the peer keeps closing streams.
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(POLL_MAX);
                }
            }
        }
    }

    /// Holds one live subscription to the execution, re-reading it when the stream ends and
    /// every [`WAIT_RECHECK`] while it lasts, until it is terminal or `deadline` comes.
    async fn follow(&self, id: &str, deadline: Instant) -> Result<Follow> {
        let stream = self.stream_end(id, deadline);
        tokio::pin!(stream);
        loop {
            let tick = deadline.min(Instant::now() + WAIT_RECHECK);
            tokio::select! {
                end = &mut stream => {
                    if !end? {
                        return Ok(Follow::Refused);
                    }
                    let exec = self.get(id).await?;
                    return Ok(if exec.status.is_terminal() {
                        Follow::Ended(exec)
                    } else {
                        Follow::Closed
                    });
                }
                () = tokio::time::sleep_until(tick) => {
                    let exec = self.get(id).await?;
                    if exec.status.is_terminal() {
                        return Ok(Follow::Ended(exec));
                    }
                    if Instant::now() >= deadline {
                        return Ok(Follow::Deadline(exec));
                    }
                }
            }
        }
    }

    /// Subscribes to the execution's live stream and resolves when it ends (`true`), or at
    /// once with `false` when the kernel refuses another subscriber. Deltas are dropped as
    /// they come: only the end counts. Over HTTP the request may last until `deadline`.
    async fn stream_end(&self, id: &str, deadline: Instant) -> Result<bool> {
        let id = uuid_id(id, "execution id")?;
        let refused = |e: &Error| e.code() == Some(ErrorCode::TooManyRequests);
        match &self.backend {
            Backend::Http(h) => {
                let url = h.url(&["executions", &id, "stream"]);
                let limit = deadline.saturating_duration_since(Instant::now()) + WAIT_RECHECK;
                let mut response = match h.open(Method::GET, url, limit).await {
                    Ok(r) => r,
                    Err(e) if refused(&e) => return Ok(false),
                    Err(e) => return Err(e),
                };
                // A body that fails mid-way ended all the same: the re-read tells.
                while let Ok(Some(_)) = response.chunk().await {}
                Ok(true)
            }
            #[cfg(feature = "kernel")]
            Backend::Embedded(k) => match k.subscribe(&id).await {
                Ok(mut subscription) => {
                    while subscription.recv().await.is_some() {}
                    Ok(true)
                }
                Err(e) => {
                    let e = Error::from(e);
                    if refused(&e) { Ok(false) } else { Err(e) }
                }
            },
        }
    }

    /// Polls the execution until `done` accepts it and returns that state. The first poll is
    /// immediate (so a zero `timeout` checks once); the next ones start 25 ms apart and slow
    /// down to 250 ms, and the last one is made at the deadline. If `done` still refuses, the
    /// wait fails with [`Error::Other`] naming the last status seen. The deadline is checked
    /// between polls, so a wait may overrun it by one request (at most the request timeout).
    /// Any error of a poll (unknown execution, network) ends the wait at once. To wait for the
    /// end of an execution, [`Client::wait`] needs no polling.
    pub async fn wait_until<F>(&self, id: &str, done: F, timeout: Duration) -> Result<Execution>
    where
        F: FnMut(&Execution) -> bool,
    {
        self.poll_until(id, done, deadline_after(timeout), timeout)
            .await
    }

    /// [`Client::wait_until`] with its deadline (`timeout` is what the error names).
    async fn poll_until<F>(
        &self,
        id: &str,
        mut done: F,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Execution>
    where
        F: FnMut(&Execution) -> bool,
    {
        let mut pause = POLL_INITIAL;
        loop {
            let exec = self.get(id).await?;
            if done(&exec) {
                return Ok(exec);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(id, timeout, &exec));
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }
}

/// The deadline `timeout` from now; a timeout too long to add means no deadline (one far off).
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// The error of a wait that reached its deadline.
fn timed_out(id: &str, timeout: Duration, last: &Execution) -> Error {
    Error::Other(format!(
        "timed out after {timeout:?} waiting for execution {id} (status {})",
        last.status
    ))
}
