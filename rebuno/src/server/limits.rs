//! The budgets the HTTP edge shares between requests, so that no client can take all of a
//! resource that others need:
//!
//! * memory held for agent request bodies whose signature is not yet checked
//!   ([`UnverifiedBodies`]): anyone who knows an agent id can send a body with a well-formed,
//!   fresh and wrong signature, and the kernel can only tell once the body is whole. The first
//!   [`UNVERIFIED_FREE_BYTES`] of each body cost nothing (most agent requests are smaller, and
//!   the connection cap bounds how many are read at once); what a body holds beyond that is
//!   counted against a total and a per-agent budget, and a body that would pass either is
//!   refused (`429`) and its connection closed;
//! * the connections that long-lived responses (live streams and change feeds, on `/v0` and in
//!   the console) hold ([`StreamSlots`]): at most so many per API key and, when served by
//!   [`super::serve`], at most a share of the connection cap in total ([`StreamTotal`]), so
//!   that heartbeats and step submissions always find a connection. Over a cap the request is
//!   refused (`429`) before anything is subscribed.
//!
//! Every map here holds an entry only while something is held under its key.

use super::error::ApiError;
use crate::kernel::KernelError;
use crate::protocol::Principal;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The bytes of each agent request body that are read without counting against the
/// unverified-body budgets.
pub(crate) const UNVERIFIED_FREE_BYTES: usize = 64 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Bytes held for agent request bodies whose signature is not yet checked, in total and by
/// agent.
#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_agent: HashMap<String, usize>,
}

/// The unverified-body budgets (see the module docs).
#[derive(Debug)]
pub(crate) struct UnverifiedBodies {
    total_cap: usize,
    per_agent_cap: usize,
    held: Mutex<Held>,
}

impl UnverifiedBodies {
    /// Budgets of `total_cap` bytes in all and `per_agent_cap` bytes for one agent.
    pub(crate) fn new(total_cap: usize, per_agent_cap: usize) -> Arc<Self> {
        Arc::new(UnverifiedBodies {
            total_cap,
            per_agent_cap,
            held: Mutex::default(),
        })
    }

    /// A reservation of nothing yet for a body of `agent_id`; it grows with the body and gives
    /// everything back when dropped.
    pub(crate) fn reserve(self: &Arc<Self>, agent_id: &str) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            agent_id: agent_id.to_owned(),
            bytes: 0,
        }
    }

    /// The bytes held now, in total.
    pub(crate) fn held(&self) -> usize {
        lock(&self.held).total
    }

    /// (agents holding bytes, bytes held): for tests that check the map shrinks back.
    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        let held = lock(&self.held);
        (held.by_agent.len(), held.total)
    }
}

/// What one unverified body holds of the budgets ([`UnverifiedBodies::reserve`]).
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<UnverifiedBodies>,
    agent_id: String,
    bytes: usize,
}

impl Reservation {
    /// Makes the reservation cover a body holding `bytes` in memory (the first
    /// [`UNVERIFIED_FREE_BYTES`] are free); `429` when a budget has no room for it, the
    /// reservation unchanged. Never shrinks.
    pub(crate) fn cover(&mut self, bytes: usize) -> Result<(), ApiError> {
        let want = bytes.saturating_sub(UNVERIFIED_FREE_BYTES);
        if want <= self.bytes {
            return Ok(());
        }
        let more = want - self.bytes;
        let budget = &self.budget;
        let mut held = lock(&budget.held);
        let agent = held.by_agent.get(&self.agent_id).copied().unwrap_or(0);
        if agent + more > budget.per_agent_cap {
            return Err(ApiError(KernelError::too_many_requests(format!(
                "the kernel already holds {agent} bytes of request bodies for agent {:?} whose \
                 signatures are not yet checked; {} bytes is the most it holds for one agent, \
                 try again later",
                self.agent_id, budget.per_agent_cap
            ))));
        }
        if held.total + more > budget.total_cap {
            return Err(ApiError(KernelError::too_many_requests(format!(
                "the kernel already holds {} bytes of agent request bodies whose signatures are \
                 not yet checked; {} bytes is the most it holds, try again later",
                held.total, budget.total_cap
            ))));
        }
        held.total += more;
        *held.by_agent.entry(self.agent_id.clone()).or_insert(0) += more;
        self.bytes = want;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut held = lock(&self.budget.held);
        held.total = held.total.saturating_sub(self.bytes);
        if let Some(agent) = held.by_agent.get_mut(&self.agent_id) {
            *agent = agent.saturating_sub(self.bytes);
            if *agent == 0 {
                held.by_agent.remove(&self.agent_id);
            }
        }
    }
}

/// The cap on long-lived responses of one server as a whole: set by [`super::serve`] from its
/// connection cap, and handed to the router's handlers as a request extension.
#[derive(Debug)]
pub(crate) struct StreamTotal {
    cap: usize,
    open: Mutex<usize>,
}

impl StreamTotal {
    /// A cap of `cap` long-lived responses at once.
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(StreamTotal {
            cap,
            open: Mutex::new(0),
        })
    }
}

/// The long-lived responses open, by API key, and the cap for one key.
#[derive(Debug)]
pub(crate) struct StreamSlots {
    per_key: usize,
    state: Mutex<OpenStreams>,
}

#[derive(Debug, Default)]
struct OpenStreams {
    /// All of this router's, the admin's included.
    total: usize,
    /// By API key id; the admin token is not a key and is bounded only by the total.
    by_key: HashMap<String, usize>,
}

impl StreamSlots {
    /// At most `per_key` long-lived responses for one API key.
    pub(crate) fn new(per_key: usize) -> Arc<Self> {
        Arc::new(StreamSlots {
            per_key,
            state: Mutex::default(),
        })
    }

    /// The long-lived responses open now.
    pub(crate) fn open(&self) -> usize {
        lock(&self.state).total
    }

    /// A slot for one long-lived response of `principal`: `429` when its key already holds as
    /// many as one key may, or the server (`total`, when served by [`super::serve`]) as many
    /// as it serves. The slot is given back when dropped.
    pub(crate) fn take(
        self: &Arc<Self>,
        principal: &Principal,
        total: Option<&Arc<StreamTotal>>,
    ) -> Result<StreamSlot, ApiError> {
        let key = (!principal.key_id.is_empty()).then(|| principal.key_id.clone());
        let mut state = lock(&self.state);
        if let Some(key) = &key {
            let here = state.by_key.get(key).copied().unwrap_or(0);
            if here >= self.per_key {
                return Err(ApiError(KernelError::too_many_requests(format!(
                    "this API key holds {here} open live streams and change feeds, the most one \
                     key may hold; close one or try again later"
                ))));
            }
        }
        if let Some(total) = total {
            let mut open = lock(&total.open);
            if *open >= total.cap {
                return Err(ApiError(KernelError::too_many_requests(format!(
                    "the server holds {} open live streams and change feeds, the most it \
                     serves at once (its other connections are kept for other requests); try \
                     again later",
                    *open
                ))));
            }
            *open += 1;
        }
        state.total += 1;
        if let Some(key) = &key {
            *state.by_key.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(StreamSlot {
            slots: Arc::clone(self),
            total: total.cloned(),
            key,
        })
    }
}

/// One long-lived response's slot ([`StreamSlots::take`]): hold it for as long as the
/// response's body lives.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    slots: Arc<StreamSlots>,
    total: Option<Arc<StreamTotal>>,
    key: Option<String>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some(total) = &self.total {
            let mut open = lock(&total.open);
            *open = open.saturating_sub(1);
        }
        let mut state = lock(&self.slots.state);
        state.total = state.total.saturating_sub(1);
        if let Some(key) = &self.key
            && let Some(n) = state.by_key.get_mut(key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.by_key.remove(key);
            }
        }
    }
}

/// The server's cap on long-lived responses, when the router is served by [`super::serve`]
/// (which puts it in every request's extensions); `None` otherwise. Never fails.
#[derive(Debug, Clone)]
pub(crate) struct ServedStreams(pub(crate) Option<Arc<StreamTotal>>);

impl<S: Send + Sync> FromRequestParts<S> for ServedStreams {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ServedStreams(
            parts.extensions.get::<Arc<StreamTotal>>().cloned(),
        ))
    }
}

/// A long-lived response's stream of events that holds its [`StreamSlot`] for as long as it
/// lives (the server drops the stream when the client goes away).
pub(crate) struct HeldStream<S> {
    stream: S,
    _slot: StreamSlot,
}

impl<S> HeldStream<S> {
    /// `stream`, holding `slot`.
    pub(crate) fn new(stream: S, slot: StreamSlot) -> Self {
        HeldStream {
            stream,
            _slot: slot,
        }
    }
}

impl<S: tokio_stream::Stream + Unpin> tokio_stream::Stream for HeldStream<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        std::pin::Pin::new(&mut self.stream).poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.stream.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorCode, Scope};

    fn key(id: &str) -> Principal {
        Principal {
            key_id: id.into(),
            subject: id.into(),
            groups: Vec::new(),
            scopes: vec![Scope::ExecutionsRead],
            agent_id: String::new(),
        }
    }

    #[test]
    fn unverified_bodies_are_capped_per_agent_and_in_total_and_given_back() {
        const MIB: usize = 1 << 20;
        let budget = UnverifiedBodies::new(3 * MIB, 2 * MIB);
        let free = UNVERIFIED_FREE_BYTES;
        let mut a1 = budget.reserve("a");
        a1.cover(free).unwrap();
        assert_eq!(budget.sizes(), (0, 0), "the first bytes are free");
        a1.cover(free + MIB).unwrap();
        a1.cover(free + MIB / 2).unwrap();
        assert_eq!(budget.sizes(), (1, MIB), "never shrinks");
        let mut a2 = budget.reserve("a");
        a2.cover(free + MIB).unwrap();
        let err = a2.cover(free + MIB + 1).unwrap_err();
        assert_eq!(err.0.code, ErrorCode::TooManyRequests);
        assert!(
            err.0.message.contains("for agent \"a\""),
            "{}",
            err.0.message
        );
        assert_eq!(budget.held(), 2 * MIB, "a refused growth takes nothing");
        let mut b = budget.reserve("b");
        b.cover(free + MIB).unwrap();
        let err = b.cover(free + MIB + 1).unwrap_err();
        assert!(
            err.0.message.contains("3145728 bytes is the most"),
            "{}",
            err.0.message
        );
        drop((a1, a2));
        assert_eq!(budget.sizes(), (1, MIB));
        drop(b);
        assert_eq!(budget.sizes(), (0, 0), "the map shrinks back");
    }

    #[test]
    fn stream_slots_are_capped_per_key_and_in_total_and_given_back() {
        let slots = StreamSlots::new(2);
        let total = StreamTotal::new(3);
        let a1 = slots.take(&key("a"), Some(&total)).unwrap();
        let a2 = slots.take(&key("a"), Some(&total)).unwrap();
        let err = slots.take(&key("a"), Some(&total)).unwrap_err();
        assert!(
            err.0.message.contains("this API key holds 2"),
            "{}",
            err.0.message
        );
        let admin = slots.take(&Principal::admin(), Some(&total)).unwrap();
        let err = slots.take(&key("b"), Some(&total)).unwrap_err();
        assert!(
            err.0.message.contains("the server holds 3"),
            "{}",
            err.0.message
        );
        assert_eq!(slots.open(), 3);
        drop(a1);
        let b = slots.take(&key("b"), Some(&total)).unwrap();
        // Without a server-wide cap only the key's applies, and the admin has none.
        let more: Vec<_> = (0..5)
            .map(|_| slots.take(&Principal::admin(), None).unwrap())
            .collect();
        drop((a2, admin, b, more));
        assert_eq!(slots.open(), 0);
        assert!(lock(&slots.state).by_key.is_empty(), "the map shrinks back");
        assert_eq!(*lock(&total.open), 0);
    }
}
