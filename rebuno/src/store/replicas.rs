//! What kernels sharing one database (replicas) need of their store beyond [`Tx`]: the
//! [`Replicated`] capability a shared store hands out ([`Store::replicas`]), the lock it holds
//! for a caller ([`StoreLock`]) and the messages it carries between kernels ([`StoreMessage`],
//! on the [`channels`]).
//!
//! [`Tx`]: super::Tx
//! [`Store::replicas`]: super::Store::replicas

use super::StoreResult;
use crate::policy::ratelimit::RateLimiter;
use async_trait::async_trait;
use std::any::Any;
use std::sync::Arc;
use tokio::sync::broadcast;

/// The operations of a store other kernel processes share ([`Store::replicas`]): the execution
/// lock across processes, the shared rate limiter, and the notification channel.
///
/// [`Store::replicas`]: super::Store::replicas
#[async_trait]
pub trait Replicated: Send + Sync {
    /// Takes the execution's lock across every process sharing the database, for as long as
    /// the returned guard lives. The kernel takes its in-process lock first, so a process holds
    /// at most one store lock per execution.
    async fn lock_execution(&self, execution_id: &str) -> StoreResult<StoreLock>;

    /// The execution's lock if this process still holds it for a guard just dropped (its
    /// release not sent yet), taken over without a round trip; `None` otherwise. A caller that
    /// gets `None` may take the lock inside a write transaction instead
    /// ([`ExecutionTx::try_lock`](super::ExecutionTx::try_lock)), or with
    /// [`Replicated::lock_execution`].
    fn held_execution_lock(&self, execution_id: &str) -> Option<StoreLock>;

    /// A rate limiter whose buckets live in this database, shared by every replica.
    fn rate_limiter(&self) -> Arc<dyn RateLimiter>;

    /// Sends `payload` on `channel` to every kernel sharing the database, this one included
    /// (best effort: a message may be lost while a listener reconnects, which
    /// [`StoreMessage::Reconnected`] reports).
    async fn publish(&self, channel: &'static str, payload: String) -> StoreResult<()>;

    /// The messages [`Replicated::publish`] sends, from every kernel.
    fn subscribe(&self) -> broadcast::Receiver<StoreMessage>;
}

/// A lock a store holds for the caller until dropped (see [`Replicated::lock_execution`]).
pub struct StoreLock(#[allow(dead_code)] Box<dyn Any + Send>);

impl StoreLock {
    /// A lock whose release is `guard`'s drop.
    pub fn new(guard: impl Any + Send) -> Self {
        StoreLock(Box::new(guard))
    }
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreLock")
    }
}

/// What a shared store's notification channel carries to every kernel on the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreMessage {
    /// A message [`Replicated::publish`]ed by some kernel (this one included).
    Published {
        /// The channel it was published on.
        channel: String,
        /// Its payload.
        payload: String,
    },
    /// The channel was (re)connected: anything published while it was down was missed, so
    /// whoever waits on it should look at the database again.
    Reconnected,
}

/// The notification channels kernels publish on.
pub mod channels {
    /// A dispatch became claimable (payload: its id): replicas with free delivery slots wake.
    pub const DISPATCH: &str = "rebuno_dispatch";
    /// A live output delta (payload: `{"exec_id":…,"delta":{…}}`).
    pub const STREAM: &str = "rebuno_stream";
}
