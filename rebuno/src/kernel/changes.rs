//! Change notifications: "execution X changed" (it blocked, resumed, started or ended), sent
//! after the commit that changed it, so that a waiter re-reads the execution at once instead of
//! polling. Not part of the ledger and never persisted: a notification only says when to read.
//!
//! Two ways out, both bounded:
//!
//! - **In process**: the kernel's table of waiters ([`Kernel::watch`], used by
//!   [`Client::embedded`](crate::client::Client::embedded)); a notification wakes exactly the
//!   waiters of that execution, and a waiter leaves the table when it is dropped.
//! - **The change feed** ([`Kernel::change_feed`], `GET /v0/changes` over HTTP): every change,
//!   for a process that keeps a table of its own (an HTTP [`Client`](crate::client::Client)
//!   holds one feed for all its waits). A feed buffers at most [`CHANGE_FEED_BUFFER`]
//!   notifications; one that falls behind gets [`Change::Resync`] (re-read everything) instead
//!   of what it missed. Feeds are capped like live-stream subscribers (`stream_subscribers`,
//!   `429` beyond) and end when the kernel shuts its streams down.
//!
//! On a shared store the notifications travel to every replica with the live-stream messages
//! (`replicas`); when that link may have lost some, every waiter and feed is told to resync.

use super::{Kernel, KernelError, KernelResult};
use crate::waiters::{Waiter, Waiters};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::sync::broadcast;
use tokio_util::sync::ReusableBoxFuture;

/// Notifications one change feed may have waiting; a feed further behind resyncs.
pub const CHANGE_FEED_BUFFER: usize = 1024;

/// What a change feed carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The execution with this id changed: read it again.
    Changed(Arc<str>),
    /// Notifications may have been missed: read every execution waited on again.
    Resync,
}

/// The kernel's notification fan-out: its waiters and its feeds.
#[derive(Debug)]
pub(crate) struct Changes {
    waiters: Arc<Waiters>,
    /// Replaced (ending every feed) when the kernel shuts its streams down.
    feed: Mutex<broadcast::Sender<Change>>,
    /// Feeds alive.
    feeds: Arc<AtomicUsize>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            waiters: Arc::default(),
            feed: Mutex::new(broadcast::channel(CHANGE_FEED_BUFFER).0),
            feeds: Arc::default(),
        }
    }
}

impl Changes {
    fn send(&self, change: Change) {
        // No feed: nothing to do (an error only says nobody listens).
        let _ = self
            .feed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(change);
    }

    /// (executions waited on, waiters, feeds).
    pub(crate) fn sizes(&self) -> (usize, usize, usize) {
        let (executions, waiters) = self.waiters.sizes();
        (executions, waiters, self.feeds.load(Ordering::Relaxed))
    }
}

/// A subscription to every change ([`Kernel::change_feed`]): receive with
/// [`ChangeFeed::recv`] or as a [`Stream`](tokio_stream::Stream). Dropping it unsubscribes.
pub struct ChangeFeed {
    next: ReusableBoxFuture<'static, (Option<Change>, broadcast::Receiver<Change>)>,
    feeds: Arc<AtomicUsize>,
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeFeed").finish_non_exhaustive()
    }
}

/// The next item of a feed: a lagging feed resyncs; `None` once the kernel ended it.
async fn next_change(
    mut rx: broadcast::Receiver<Change>,
) -> (Option<Change>, broadcast::Receiver<Change>) {
    let change = match rx.recv().await {
        Ok(change) => Some(change),
        Err(broadcast::error::RecvError::Lagged(_)) => Some(Change::Resync),
        Err(broadcast::error::RecvError::Closed) => None,
    };
    (change, rx)
}

impl ChangeFeed {
    /// The next change; `None` once the kernel has ended the feed.
    pub async fn recv(&mut self) -> Option<Change> {
        std::future::poll_fn(|cx| self.poll_change(cx)).await
    }

    fn poll_change(&mut self, cx: &mut Context<'_>) -> Poll<Option<Change>> {
        let (change, rx) = std::task::ready!(self.next.poll(cx));
        self.next.set(next_change(rx));
        Poll::Ready(change)
    }
}

impl tokio_stream::Stream for ChangeFeed {
    type Item = Change;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Change>> {
        self.poll_change(cx)
    }
}

impl Drop for ChangeFeed {
    fn drop(&mut self) {
        self.feeds.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Kernel {
    /// Registers a waiter on `execution_id`, woken after every commit that changes the
    /// execution's status (and when notifications may have been missed). Register before
    /// reading the execution, so that no change between the read and the wait is missed.
    pub(crate) fn watch(&self, execution_id: &str) -> Waiter {
        self.inner.changes.waiters.register(execution_id)
    }

    /// Subscribes to every execution change: [`Change::Changed`] with the execution's id after
    /// each commit that changes an execution's status, [`Change::Resync`] when some may have
    /// been missed. `429` when the kernel has as many feeds as `stream_subscribers` allows.
    pub fn change_feed(&self) -> KernelResult<ChangeFeed> {
        let changes = &self.inner.changes;
        let cap = self.inner.config.stream_subscribers;
        let before = changes.feeds.fetch_add(1, Ordering::Relaxed);
        if before >= cap {
            changes.feeds.fetch_sub(1, Ordering::Relaxed);
            return Err(KernelError::too_many_requests(format!(
                "the kernel has {before} change feeds, the most allowed"
            )));
        }
        let rx = changes
            .feed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .subscribe();
        Ok(ChangeFeed {
            next: ReusableBoxFuture::new(next_change(rx)),
            feeds: Arc::clone(&changes.feeds),
        })
    }

    /// After a commit that changed the execution: wakes its waiters here and, on a shared
    /// store, on every replica.
    pub(crate) fn note_changed(&self, execution_id: &str) {
        if self.shared() {
            self.broadcast_changed(execution_id);
        }
        self.note_changed_locally(execution_id);
    }

    /// Wakes this process's waiters of the execution and tells its feeds.
    pub(crate) fn note_changed_locally(&self, execution_id: &str) {
        let changes = &self.inner.changes;
        changes.waiters.notify(execution_id);
        changes.send(Change::Changed(Arc::from(execution_id)));
    }

    /// Notifications may have been lost (a replica link reconnected): every waiter re-reads.
    pub(crate) fn note_resync(&self) {
        let changes = &self.inner.changes;
        changes.waiters.notify_all();
        changes.send(Change::Resync);
    }

    /// Ends every change feed (the server is shutting its streams down). New feeds are still
    /// taken; in-process waiters are not affected.
    pub(crate) fn end_change_feeds(&self) {
        let mut feed = self
            .inner
            .changes
            .feed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *feed = broadcast::channel(CHANGE_FEED_BUFFER).0;
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::KernelConfig;

    #[tokio::test]
    async fn feeds_carry_changes_resync_when_behind_and_are_capped() {
        let k = Kernel::builder(Arc::new(crate::store::SqliteStore::memory().unwrap()))
            .config(KernelConfig {
                stream_subscribers: 2,
                ..KernelConfig::default()
            })
            .build()
            .await
            .unwrap();
        let mut a = k.change_feed().unwrap();
        let b = k.change_feed().unwrap();
        assert_eq!(
            k.change_feed().unwrap_err().code,
            crate::protocol::ErrorCode::TooManyRequests
        );
        drop(b);
        let mut b = k.change_feed().unwrap();
        k.note_changed("x");
        assert_eq!(a.recv().await, Some(Change::Changed("x".into())));
        assert_eq!(b.recv().await, Some(Change::Changed("x".into())));
        for _ in 0..=CHANGE_FEED_BUFFER {
            k.note_changed("y");
        }
        assert_eq!(
            a.recv().await,
            Some(Change::Resync),
            "a feed behind resyncs"
        );
        k.end_change_feeds();
        let mut ended = 0;
        while a.recv().await.is_some() {
            ended += 1;
        }
        assert!(ended <= CHANGE_FEED_BUFFER, "buffered items, then the end");
        drop((a, b));
        assert_eq!(k.inner.changes.sizes(), (0, 0, 0));
    }
}
