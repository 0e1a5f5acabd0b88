//! Live output streaming: agents publish output deltas of a running step; clients
//! subscribed to the execution receive them. Best effort and never part of the ledger: there is
//! no replay (a subscriber sees only what is published after it subscribed), each subscriber
//! buffers at most [`SUBSCRIBER_BUFFER`] deltas and a full buffer drops new ones. Clients treat
//! the event log as the truth.
//!
//! Subscribing needs an existing execution (`404` otherwise, unlike the Go kernel) and is
//! capped per execution and in total (`429` over a cap), and a [`Subscription`] leaves the
//! fan-out map the moment it is dropped (an SSE client disconnecting drops it), so the map holds
//! exactly the live subscribers. A subscription ends (after the deltas already buffered) when
//! its execution ends, at once if it had ended before, and when the kernel shuts its streams
//! down ([`Kernel::end_all_streams`]), so a finished run or a stopping server leaves no stream
//! open.

use super::{Kernel, KernelError, KernelResult};
use crate::protocol::{MAX_STREAM_DATA_BYTES, StreamFrame};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Deltas one subscriber may have waiting.
pub const SUBSCRIBER_BUFFER: usize = 64;

/// One subscriber: its id (for removal) and its channel.
type Subscriber = (u64, mpsc::Sender<StreamFrame>);

#[derive(Debug, Default)]
struct Subscribers {
    by_execution: HashMap<String, Vec<Subscriber>>,
    total: usize,
    next_id: u64,
}

impl Subscribers {
    /// Removes the subscribers of `execution_id` that `drop` selects, and the execution's entry
    /// once it has none.
    fn remove_where(&mut self, execution_id: &str, mut drop: impl FnMut(&Subscriber) -> bool) {
        let Some(list) = self.by_execution.get_mut(execution_id) else {
            return;
        };
        let before = list.len();
        list.retain(|s| !drop(s));
        self.total = self.total.saturating_sub(before - list.len());
        if list.is_empty() {
            self.by_execution.remove(execution_id);
        }
    }
}

/// The in-process fan-out of deltas, by execution id.
#[derive(Debug, Default)]
pub(crate) struct Bus {
    subscribers: Mutex<Subscribers>,
}

impl Bus {
    fn lock(&self) -> MutexGuard<'_, Subscribers> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// (executions with subscribers, subscribers).
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let subs = self.lock();
        (subs.by_execution.len(), subs.total)
    }
}

/// A live subscription to an execution's deltas ([`Kernel::subscribe`]). Receive with
/// [`Subscription::recv`] or as a [`Stream`](tokio_stream::Stream); dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<StreamFrame>,
    kernel: Kernel,
    execution_id: String,
    /// Its place in the fan-out map (`None`: it never had one).
    id: Option<u64>,
}

impl Subscription {
    /// The next delta; `None` once the kernel has dropped the subscription.
    pub async fn recv(&mut self) -> Option<StreamFrame> {
        self.rx.recv().await
    }

    /// The next delta if one is waiting.
    pub fn try_recv(&mut self) -> Result<StreamFrame, mpsc::error::TryRecvError> {
        self.rx.try_recv()
    }
}

impl tokio_stream::Stream for Subscription {
    type Item = StreamFrame;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamFrame>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        self.kernel
            .inner
            .streams
            .lock()
            .remove_where(&self.execution_id, |(s, _)| *s == id);
    }
}

impl Kernel {
    /// Subscribes to an execution's live deltas: `404` if the execution does not exist, `429`
    /// when the execution (`stream_subscribers_per_execution`) or the kernel
    /// (`stream_subscribers`) has as many subscribers as allowed. The subscription of an
    /// execution that has ended yields nothing and ends.
    pub async fn subscribe(&self, execution_id: &str) -> KernelResult<Subscription> {
        if self.execution_ended(execution_id).await? {
            return Ok(self.ended_subscription(execution_id));
        }
        let subscription = self.add_subscriber(execution_id)?;
        // The execution may have ended (and its streams been ended) between the check and the
        // insertion: a read after the insertion sees that commit, and the subscription leaves.
        if self.execution_ended(execution_id).await? {
            drop(subscription);
            return Ok(self.ended_subscription(execution_id));
        }
        Ok(subscription)
    }

    /// Whether the execution is terminal (`404` when it does not exist).
    async fn execution_ended(&self, execution_id: &str) -> KernelResult<bool> {
        Ok(self.execution_state(execution_id).await?.1.is_terminal())
    }

    /// A subscription that is already over (it holds no place in the fan-out map).
    fn ended_subscription(&self, execution_id: &str) -> Subscription {
        let (_, rx) = mpsc::channel(1);
        Subscription {
            rx,
            kernel: self.clone(),
            execution_id: execution_id.to_owned(),
            id: None,
        }
    }

    /// Ends the live streams of an execution that has ended: each subscriber receives what is
    /// already buffered, then the end of its stream.
    pub(crate) fn end_streams(&self, execution_id: &str) {
        if self.shared() {
            self.broadcast_end(execution_id);
        }
        self.end_local_streams(execution_id);
    }

    /// Ends this process's subscriptions to the execution, and wakes its waiters (an ended
    /// execution's streams end here, whichever replica ended it).
    pub(crate) fn end_local_streams(&self, execution_id: &str) {
        self.inner
            .streams
            .lock()
            .remove_where(execution_id, |_| true);
        self.note_changed_locally(execution_id);
    }

    /// Ends every live stream and change feed (a server shutting down: an open SSE response
    /// would otherwise hold a graceful shutdown open forever). New subscriptions are still
    /// taken.
    pub fn end_all_streams(&self) {
        {
            let mut subs = self.inner.streams.lock();
            subs.by_execution.clear();
            subs.total = 0;
        }
        self.end_change_feeds();
    }

    fn add_subscriber(&self, execution_id: &str) -> KernelResult<Subscription> {
        let config = &self.inner.config;
        let mut subs = self.inner.streams.lock();
        if subs.total >= config.stream_subscribers {
            return Err(KernelError::too_many_requests(format!(
                "the kernel has {} live-stream subscribers, the most allowed",
                subs.total
            )));
        }
        let here = subs.by_execution.get(execution_id).map_or(0, Vec::len);
        if here >= config.stream_subscribers_per_execution {
            return Err(KernelError::too_many_requests(format!(
                "the execution has {here} live-stream subscribers, the most allowed"
            )));
        }
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let id = subs.next_id;
        subs.next_id = subs.next_id.wrapping_add(1);
        subs.total += 1;
        subs.by_execution
            .entry(execution_id.to_owned())
            .or_default()
            .push((id, tx));
        Ok(Subscription {
            rx,
            kernel: self.clone(),
            execution_id: execution_id.to_owned(),
            id: Some(id),
        })
    }

    /// Publishes a delta to the execution's subscribers. `data` over 7,000 bytes is refused
    /// (`400`); otherwise delivery is best effort and the call never fails.
    pub fn publish(&self, execution_id: &str, frame: StreamFrame) -> KernelResult<()> {
        if frame.data.len() > MAX_STREAM_DATA_BYTES {
            return Err(KernelError::validation(format!(
                "stream delta is {} bytes; the limit is {MAX_STREAM_DATA_BYTES}",
                frame.data.len()
            )));
        }
        if self.shared() {
            // Every replica's subscribers, this one's included, get it back from the store.
            self.broadcast_delta(execution_id, frame);
        } else {
            self.deliver_delta(execution_id, frame);
        }
        Ok(())
    }

    /// Hands a delta to this process's subscribers of the execution.
    pub(crate) fn deliver_delta(&self, execution_id: &str, frame: StreamFrame) {
        // A full subscriber misses this delta; a closed one is forgotten.
        self.inner
            .streams
            .lock()
            .remove_where(execution_id, |(_, s)| {
                matches!(
                    s.try_send(frame.clone()),
                    Err(mpsc::error::TrySendError::Closed(_))
                )
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{CreateExecutionRequest, ErrorCode, RegisterAgentRequest};

    fn frame(seq: i64) -> StreamFrame {
        StreamFrame {
            step_id: "s".into(),
            seq,
            data: format!("chunk {seq}"),
        }
    }

    async fn kernel_with_execution() -> (Kernel, String) {
        let k = Kernel::memory().await.unwrap();
        k.register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
        let exec = k
            .create_execution(CreateExecutionRequest {
                agent_id: "a".into(),
                input: None,
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        (k, exec.id)
    }

    #[tokio::test]
    async fn fans_out_drops_when_full_and_refuses_oversize() {
        let (k, e) = kernel_with_execution().await;
        let mut a = k.subscribe(&e).await.unwrap();
        k.publish("other", frame(0)).unwrap();
        for seq in 0..(SUBSCRIBER_BUFFER as i64 + 10) {
            k.publish(&e, frame(seq)).unwrap();
        }
        let mut got = Vec::new();
        while let Ok(f) = a.try_recv() {
            got.push(f.seq);
        }
        assert_eq!(
            got,
            (0..SUBSCRIBER_BUFFER as i64).collect::<Vec<_>>(),
            "the buffer keeps the first 64"
        );
        let late = k.subscribe(&e).await.unwrap();
        k.publish(&e, frame(100)).unwrap();
        assert_eq!(a.recv().await.unwrap().seq, 100);
        assert_eq!(k.inner.streams.sizes(), (1, 2));
        drop(late);
        assert_eq!(
            k.inner.streams.sizes(),
            (1, 1),
            "a dropped subscriber leaves"
        );
        drop(a);
        assert_eq!(k.inner.streams.sizes(), (0, 0));
        let big = StreamFrame {
            step_id: "s".into(),
            seq: 1,
            data: "x".repeat(MAX_STREAM_DATA_BYTES + 1),
        };
        assert_eq!(
            k.publish(&e, big).unwrap_err().code.as_str(),
            "validation_error"
        );
        let exact = StreamFrame {
            step_id: "s".into(),
            seq: 1,
            data: "é".repeat(MAX_STREAM_DATA_BYTES / 2),
        };
        assert!(k.publish(&e, exact).is_ok(), "the limit counts UTF-8 bytes");
    }

    #[tokio::test]
    async fn unknown_executions_and_subscribers_over_a_cap_are_refused() {
        let (k, e) = kernel_with_execution().await;
        let unknown = uuid::Uuid::now_v7().to_string();
        assert_eq!(
            k.subscribe(&unknown).await.unwrap_err().code,
            ErrorCode::NotFound
        );
        let cap = k.config().stream_subscribers_per_execution;
        let mut held = Vec::new();
        for _ in 0..cap {
            held.push(k.subscribe(&e).await.unwrap());
        }
        assert_eq!(
            k.subscribe(&e).await.unwrap_err().code,
            ErrorCode::TooManyRequests
        );
        held.pop();
        held.push(k.subscribe(&e).await.unwrap());
        drop(held);
        assert_eq!(k.inner.streams.sizes(), (0, 0));
    }

    #[tokio::test]
    async fn streams_end_with_their_execution_and_on_shutdown() {
        let (k, e) = kernel_with_execution().await;
        let mut live = k.subscribe(&e).await.unwrap();
        k.publish(&e, frame(1)).unwrap();
        k.cancel(&e).await.unwrap();
        assert_eq!(live.recv().await.unwrap().seq, 1, "buffered deltas first");
        assert!(live.recv().await.is_none(), "then the end of the stream");
        assert_eq!(k.inner.streams.sizes(), (0, 0));
        let mut late = k.subscribe(&e).await.unwrap();
        assert!(
            late.recv().await.is_none(),
            "an ended execution streams nothing"
        );
        assert_eq!(k.inner.streams.sizes(), (0, 0));
        drop((live, late));

        let (k, e) = kernel_with_execution().await;
        let mut a = k.subscribe(&e).await.unwrap();
        let mut b = k.subscribe(&e).await.unwrap();
        k.end_all_streams();
        assert!(a.recv().await.is_none() && b.recv().await.is_none());
        assert_eq!(k.inner.streams.sizes(), (0, 0));
        drop((a, b));
        assert_eq!(k.inner.streams.sizes(), (0, 0));
    }
}
