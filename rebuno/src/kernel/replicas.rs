//! What a kernel does when other kernels share its store ([`Store::replicas`]): the messages
//! replicas send each other through the store, and the task that turns what it hears into
//! local wake-ups and live-stream deltas.
//!
//! - A dispatch queued by any replica wakes every replica's dispatcher (`channels::DISPATCH`),
//!   so a grant on replica B is delivered at once even when B's delivery slots are full and
//!   replica A has free ones.
//! - A live output delta published to any replica reaches the subscribers of every replica
//!   (`channels::STREAM`): in shared mode a delta is delivered to local subscribers only when
//!   it comes back from the store, so each subscriber gets it exactly once, in the order the
//!   replica that received it sent it (one outbox task per kernel). The end of an execution's
//!   streams travels the same way, and so does a change of an execution's status (its waiters
//!   and the change feeds of every replica hear it).
//! - A (re)connected channel may have missed messages: the dispatcher is woken to look at the
//!   database again, and every waiter and change feed resyncs. Deltas missed meanwhile are lost, as deltas may be (the event log is the
//!   truth).
//!
//! [`Store::replicas`]: crate::store::Store::replicas

use super::Kernel;
use crate::protocol::StreamFrame;
use crate::store::{StoreMessage, channels};
use serde::{Deserialize, Serialize};
use std::sync::{Mutex, PoisonError};
use tokio::sync::{broadcast, mpsc};

/// Messages one kernel may have waiting to be published; more are dropped (deltas are best
/// effort, and a dropped wake-up is covered by the dispatcher's own polling).
pub(crate) const OUTBOX: usize = 4096;

/// A notification payload stays below PostgreSQL's 8000-byte limit.
const MAX_PAYLOAD: usize = 7900;

/// A message on `channels::STREAM`.
#[derive(Debug, Serialize, Deserialize)]
struct StreamMessage {
    exec_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delta: Option<StreamFrame>,
    /// The execution ended: its streams end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    end: bool,
    /// The execution changed (blocked, resumed): its waiters look again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    changed: bool,
}

/// The publishing side: messages queued in order for one task to send.
#[derive(Debug)]
pub(crate) struct Outbox {
    send: mpsc::Sender<(&'static str, String)>,
    recv: Mutex<Option<mpsc::Receiver<(&'static str, String)>>>,
}

impl Default for Outbox {
    fn default() -> Self {
        let (send, recv) = mpsc::channel(OUTBOX);
        Outbox {
            send,
            recv: Mutex::new(Some(recv)),
        }
    }
}

impl Kernel {
    /// Whether other kernels share the store.
    pub(crate) fn shared(&self) -> bool {
        self.inner.store.replicas().is_some()
    }

    fn post(&self, channel: &'static str, payload: String) {
        if self.inner.outbox.send.try_send((channel, payload)).is_err() {
            tracing::debug!(channel, "replica outbox full; a message was dropped");
        }
    }

    /// Tells every replica a dispatch is claimable (shared stores; a no-op otherwise).
    pub(crate) fn announce_dispatch(&self) {
        if self.shared() {
            self.post(channels::DISPATCH, String::new());
        }
    }

    /// Sends a delta to every replica's subscribers, split into several frames of the same
    /// step and sequence number when one would not fit in a notification.
    pub(crate) fn broadcast_delta(&self, execution_id: &str, frame: StreamFrame) {
        for piece in split_frame(frame) {
            let msg = StreamMessage {
                exec_id: execution_id.to_owned(),
                delta: Some(piece),
                end: false,
                changed: false,
            };
            if let Ok(text) = serde_json::to_string(&msg) {
                self.post(channels::STREAM, text);
            }
        }
    }

    /// Ends the execution's streams on every replica.
    pub(crate) fn broadcast_end(&self, execution_id: &str) {
        let msg = StreamMessage {
            exec_id: execution_id.to_owned(),
            delta: None,
            end: true,
            changed: false,
        };
        if let Ok(text) = serde_json::to_string(&msg) {
            self.post(channels::STREAM, text);
        }
    }

    /// Tells every replica's waiters that the execution changed.
    pub(crate) fn broadcast_changed(&self, execution_id: &str) {
        let msg = StreamMessage {
            exec_id: execution_id.to_owned(),
            delta: None,
            end: false,
            changed: true,
        };
        if let Ok(text) = serde_json::to_string(&msg) {
            self.post(channels::STREAM, text);
        }
    }

    /// Starts the tasks that connect this kernel to the other replicas: the outbox sender and
    /// the listener. `None` for stores one process owns.
    pub(crate) fn spawn_replica_links(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let Some(mut heard) = self.inner.store.replicas().map(|r| r.subscribe()) else {
            return Vec::new();
        };
        let mut handles = Vec::new();
        let outbox = self
            .inner
            .outbox
            .recv
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut outbox) = outbox {
            let kernel = self.clone();
            handles.push(tokio::spawn(async move {
                while let Some((channel, payload)) = outbox.recv().await {
                    if let Err(e) = match kernel.inner.store.replicas() { Some(r) => r.publish(channel, payload).await, None => Ok(()) } {
                        tracing::warn!(channel, error = %e, "publishing to the other replicas failed");
                    }
                }
            }));
        }
        let kernel = self.clone();
        handles.push(tokio::spawn(async move {
            loop {
                match heard.recv().await {
                    Ok(StoreMessage::Published { channel, payload }) => {
                        kernel.on_message(&channel, &payload)
                    }
                    Ok(StoreMessage::Reconnected) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        kernel.inner.queued.notify_one();
                        kernel.inner.approvals_changed.notify_one();
                        kernel.note_resync();
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }));
        handles
    }

    fn on_message(&self, channel: &str, payload: &str) {
        match channel {
            channels::DISPATCH => self.inner.queued.notify_one(),
            channels::STREAM => match serde_json::from_str::<StreamMessage>(payload) {
                Ok(StreamMessage {
                    exec_id,
                    delta: Some(frame),
                    ..
                }) => self.deliver_delta(&exec_id, frame),
                Ok(StreamMessage {
                    exec_id, end: true, ..
                }) => self.end_local_streams(&exec_id),
                Ok(StreamMessage {
                    exec_id,
                    changed: true,
                    ..
                }) => self.note_changed_locally(&exec_id),
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "an unreadable stream message was ignored"),
            },
            _ => {}
        }
    }
}

/// The length of a character inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Splits a frame whose notification would be too large into frames whose data are
/// consecutive pieces of the original (cut at character boundaries).
fn split_frame(frame: StreamFrame) -> Vec<StreamFrame> {
    // The envelope around the data: ids, keys and the execution id (a UUID).
    let budget = MAX_PAYLOAD
        .saturating_sub(frame.step_id.len() * 6 + 160)
        .max(64);
    if frame.data.chars().map(escaped_len).sum::<usize>() <= budget {
        return vec![frame];
    }
    let mut pieces = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, c) in frame.data.char_indices() {
        let n = escaped_len(c);
        if used + n > budget && i > start {
            pieces.push(frame.data[start..i].to_owned());
            (start, used) = (i, 0);
        }
        used += n;
    }
    pieces.push(frame.data[start..].to_owned());
    pieces
        .into_iter()
        .map(|data| StreamFrame {
            step_id: frame.step_id.clone(),
            seq: frame.seq,
            data,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_deltas_split_into_pieces_that_fit_and_join_back() {
        let data: String = "\"\u{1}é".repeat(1200);
        let frame = StreamFrame {
            step_id: "s".into(),
            seq: 7,
            data: data.clone(),
        };
        let pieces = split_frame(frame);
        assert!(pieces.len() > 1);
        for p in &pieces {
            let msg = StreamMessage {
                exec_id: "0190e5b2-0000-7000-8000-000000000000".into(),
                delta: Some(p.clone()),
                end: false,
                changed: false,
            };
            assert!(serde_json::to_string(&msg).unwrap().len() <= MAX_PAYLOAD);
            assert_eq!(p.seq, 7);
        }
        assert_eq!(
            pieces.iter().map(|p| p.data.as_str()).collect::<String>(),
            data
        );
        let small = StreamFrame {
            step_id: "s".into(),
            seq: 1,
            data: "hi".into(),
        };
        assert_eq!(split_frame(small.clone()), vec![small]);
    }
}
