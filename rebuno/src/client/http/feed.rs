//! The HTTP client's one subscription to the kernel's change feed (`GET /v0/changes`), shared
//! by every wait of the client and of its clones.
//!
//! A wait registers in the client's table of waiters (`crate::waiters`) and reads the execution
//! again whenever the feed names it; the feed is opened by the first wait and closed once no
//! wait has been running for [`FEED_LINGER`], so a client that waits now and then holds one
//! connection while it does, and thousands of waits hold that same one. The feed is Server-Sent
//! Events, one `data:` line per notification: `{"execution_id": "<id>"}`, or `{"resync": true}`
//! when the kernel's buffer for this feed overflowed. Whenever the feed opens (again) or closes,
//! every waiter reads again, since notifications may have been missed meanwhile. While the feed
//! is closed (the kernel refused it, is unreachable, or predates it) waits poll instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use tokio::time::Instant;

use super::request::Http;
use crate::waiters::{Waiter, Waiters};

/// How long the feed stays open after the last wait ended.
pub const FEED_LINGER: Duration = Duration::from_secs(5);
/// Silence after which an open feed is taken for dead (the kernel sends a keep-alive comment
/// every 15 s).
const FEED_SILENCE: Duration = Duration::from_secs(40);
/// How long one feed request may stay open before it is made again.
const FEED_REQUEST_LIMIT: Duration = Duration::from_secs(3600);
/// The longest line taken from the feed; a longer one drops the connection.
const MAX_LINE: usize = 4096;
/// The first pause before opening a feed again after a failure; it doubles up to
/// [`RECONNECT_MAX`].
const RECONNECT_INITIAL: Duration = Duration::from_millis(100);
/// The longest pause between two attempts to open the feed.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// One `data:` line of the feed.
#[derive(Debug, Deserialize)]
struct Notification {
    #[serde(default)]
    execution_id: Option<String>,
    #[serde(default)]
    resync: bool,
}

/// A client's change feed and its waiters.
#[derive(Debug, Default)]
pub(in crate::client) struct Feed {
    waiters: Arc<Waiters>,
    /// Whether a task follows the feed (or tries to open it), and which one (each task started
    /// gets the next number).
    running: Mutex<(bool, u64)>,
    /// Whether the feed is open now.
    live: AtomicBool,
}

impl Feed {
    /// Registers a waiter on `execution_id` and makes sure a task follows the feed.
    pub(super) fn watch(self: &Arc<Self>, execution_id: &str, http: &Http) -> Waiter {
        let waiter = self.waiters.register(execution_id);
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if !running.0 {
            *running = (true, running.1.wrapping_add(1));
            tokio::spawn(drive(Arc::clone(self), running.1, http.clone()));
        }
        waiter
    }

    /// Whether the feed is open: a waiter then needs to read only when woken.
    pub(super) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// (executions waited on, waiters, whether a task follows the feed).
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize, bool) {
        let (executions, waiters) = self.waiters.sizes();
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        (executions, waiters, running)
    }

    /// Every waiter reads again when the feed opens or closes (it may have missed something,
    /// and it reads differently).
    fn set_live(&self, live: bool) {
        if self.live.swap(live, Ordering::AcqRel) != live {
            self.waiters.notify_all();
        }
    }

    /// Whether the following task should end (no waiter for [`FEED_LINGER`]); if so the feed
    /// is marked closed and unfollowed, under the lock a new waiter takes to start one.
    fn retire(&self) -> bool {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if self
            .waiters
            .idle_for()
            .is_some_and(|idle| idle >= FEED_LINGER)
        {
            running.0 = false;
            self.live.store(false, Ordering::Release);
            return true;
        }
        false
    }

    /// Takes `bytes` of the feed into `line`, acting on each complete line; `false` when a
    /// line is too long.
    fn take(&self, line: &mut Vec<u8>, bytes: &[u8]) -> bool {
        for &b in bytes {
            if b == b'\n' {
                self.act(line);
                line.clear();
            } else if line.len() >= MAX_LINE {
                return false;
            } else {
                line.push(b);
            }
        }
        true
    }

    /// Acts on one line: a notification wakes its waiters; comments and other fields do
    /// nothing.
    fn act(&self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        match serde_json::from_slice::<Notification>(data) {
            Ok(Notification { resync: true, .. }) => self.waiters.notify_all(),
            Ok(Notification {
                execution_id: Some(id),
                ..
            }) => self.waiters.notify(&id),
            // Something this client does not know: read everything again, to be safe.
            _ => self.waiters.notify_all(),
        }
    }
}

/// Marks the feed unfollowed and closed when the following task ends in any way (its runtime
/// shutting down drops it mid-await), so that the next wait starts another and no wait relies
/// on a feed nobody reads.
struct Following(Arc<Feed>, u64);

impl Drop for Following {
    fn drop(&mut self) {
        let mut running = self
            .0
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Retired already, or another task follows now: nothing of this one's to undo.
        if *running == (true, self.1) {
            running.0 = false;
            self.0.set_live(false);
        }
    }
}

/// Follows the feed for as long as it has waiters (and [`FEED_LINGER`] after), opening it
/// again when it closes.
async fn drive(feed: Arc<Feed>, task: u64, http: Http) {
    let _following = Following(Arc::clone(&feed), task);
    let url = http.url(&["changes"]);
    let mut pause = RECONNECT_INITIAL;
    loop {
        if feed.retire() {
            return;
        }
        match http
            .open(Method::GET, url.clone(), FEED_REQUEST_LIMIT)
            .await
        {
            Ok(response) => {
                pause = RECONNECT_INITIAL;
                feed.set_live(true);
                let retired = follow(&feed, response).await;
                feed.set_live(false);
                if retired {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "the kernel's change feed could not be opened; waits poll");
                feed.set_live(false);
                let until = Instant::now() + pause;
                while Instant::now() < until {
                    tokio::time::sleep_until(until.min(Instant::now() + FEED_LINGER)).await;
                    if feed.retire() {
                        return;
                    }
                }
                pause = (pause * 2).min(RECONNECT_MAX);
            }
        }
    }
}

/// Reads an open feed until it ends, falls silent or fails (`false`), or has had no waiter for
/// [`FEED_LINGER`] (`true`).
async fn follow(feed: &Feed, mut response: reqwest::Response) -> bool {
    let mut line = Vec::new();
    let mut heard = Instant::now();
    let mut linger = tokio::time::interval(FEED_LINGER);
    linger.tick().await;
    loop {
        tokio::select! {
            chunk = response.chunk() => match chunk {
                Ok(Some(bytes)) => {
                    heard = Instant::now();
                    if !feed.take(&mut line, &bytes) {
                        return false;
                    }
                }
                _ => return false,
            },
            _ = linger.tick() => {
                if feed.retire() {
                    return true;
                }
            }
            () = tokio::time::sleep_until(heard + FEED_SILENCE) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_wake_their_waiters_and_long_lines_are_refused() {
        let feed = Feed::default();
        let a = feed.waiters.register("a");
        let b = feed.waiters.register("b");
        let mut line = Vec::new();
        // Split anywhere, with comments, CRs and unknown fields around.
        assert!(feed.take(&mut line, b": keep-alive\n\ndata: {\"executi"));
        assert!(feed.take(&mut line, b"on_id\":\"a\",\"x\":1}\n\n"));
        a.changed().await;
        assert!(feed.take(&mut line, b"data: {\"resync\":true}\n\n"));
        a.changed().await;
        b.changed().await;
        assert!(!feed.take(&mut line, &vec![b'x'; MAX_LINE + 1]));
    }

    /// Many waits of one HTTP client hold one feed, and its table is empty once they ended.
    #[cfg(all(feature = "server", feature = "sqlite"))]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_share_the_feed_and_leave_the_table_empty() {
        use crate::protocol::RegisterAgentRequest;
        let kernel = crate::Kernel::memory().await.unwrap();
        kernel
            .register_agent(RegisterAgentRequest {
                id: "a".into(),
                webhook_url: "http://127.0.0.1:9/a".into(),
                secret: "s".into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        let app = crate::server::router(kernel.clone(), Default::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = crate::client::Client::new(base, None)
            .unwrap()
            .with_wait_recheck(Duration::from_secs(3600));
        let mut ids = Vec::new();
        for _ in 0..200 {
            ids.push(kernel.client().create("a", ()).await.unwrap().id);
        }
        let waits: Vec<_> = ids
            .iter()
            .map(|id| {
                let (c, id) = (client.clone(), id.clone());
                tokio::spawn(async move { c.wait(&id, Duration::from_secs(60)).await })
            })
            .collect();
        let h = (client.backend.as_ref() as &dyn std::any::Any)
            .downcast_ref::<super::super::HttpBackend>()
            .unwrap();
        for id in &ids {
            kernel.cancel(id).await.unwrap();
        }
        for w in waits {
            assert!(w.await.unwrap().unwrap().status.is_terminal());
        }
        assert_eq!(h.feed.sizes(), (0, 0, true), "empty, the feed lingering");
        assert!(kernel.memory_footprint().change_feeds <= 1);
    }
}
