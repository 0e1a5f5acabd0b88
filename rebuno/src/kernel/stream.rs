//! Live output streaming (spec §16): agents publish output deltas of a running step; clients
//! subscribed to the execution receive them. Best effort and never part of the ledger: there is
//! no replay (a subscriber sees only what is published after it subscribed), each subscriber
//! buffers at most [`SUBSCRIBER_BUFFER`] deltas and a full buffer drops new ones. Clients treat
//! the event log as the truth.

use super::{Kernel, KernelError, KernelResult};
use crate::protocol::{MAX_STREAM_DATA_BYTES, StreamFrame};
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Deltas one subscriber may have waiting.
pub const SUBSCRIBER_BUFFER: usize = 64;

/// The in-process fan-out of deltas, by execution id.
#[derive(Debug, Default)]
pub(crate) struct Bus {
    subscribers: Mutex<HashMap<String, Vec<mpsc::Sender<StreamFrame>>>>,
}

impl Bus {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<mpsc::Sender<StreamFrame>>>> {
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Kernel {
    /// Subscribes to an execution's live deltas (whether or not it exists, as in the Go
    /// kernel). The stream ends when the kernel drops the subscription; dropping the receiver
    /// unsubscribes.
    pub fn subscribe(&self, execution_id: &str) -> mpsc::Receiver<StreamFrame> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let mut subs = self.inner.streams.lock();
        let list = subs.entry(execution_id.to_owned()).or_default();
        list.retain(|s| !s.is_closed());
        list.push(tx);
        rx
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
        let mut subs = self.inner.streams.lock();
        if let Some(list) = subs.get_mut(execution_id) {
            // A full subscriber misses this delta; a closed one is forgotten.
            list.retain(|s| {
                !matches!(
                    s.try_send(frame.clone()),
                    Err(mpsc::error::TrySendError::Closed(_))
                )
            });
            if list.is_empty() {
                subs.remove(execution_id);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: i64) -> StreamFrame {
        StreamFrame {
            step_id: "s".into(),
            seq,
            data: format!("chunk {seq}"),
        }
    }

    #[tokio::test]
    async fn fans_out_drops_when_full_and_refuses_oversize() {
        let k = Kernel::memory().await.unwrap();
        let mut a = k.subscribe("e");
        k.publish("other", frame(0)).unwrap();
        for seq in 0..(SUBSCRIBER_BUFFER as i64 + 10) {
            k.publish("e", frame(seq)).unwrap();
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
        let late = k.subscribe("e");
        k.publish("e", frame(100)).unwrap();
        assert_eq!(a.recv().await.unwrap().seq, 100);
        drop(late);
        drop(a);
        k.publish("e", frame(101)).unwrap();
        assert!(
            k.inner.streams.lock().is_empty(),
            "closed subscribers are forgotten"
        );
        let big = StreamFrame {
            step_id: "s".into(),
            seq: 1,
            data: "x".repeat(MAX_STREAM_DATA_BYTES + 1),
        };
        assert_eq!(
            k.publish("e", big).unwrap_err().code.as_str(),
            "validation_error"
        );
        let exact = StreamFrame {
            step_id: "s".into(),
            seq: 1,
            data: "é".repeat(MAX_STREAM_DATA_BYTES / 2),
        };
        assert!(
            k.publish("e", exact).is_ok(),
            "the limit counts UTF-8 bytes"
        );
    }
}
