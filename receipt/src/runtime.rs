//! The per-stream runtime: [`Runtime::execute`] applies a [`Command`] to a stream (lock,
//! verify, dedup, expected prev, atomic append) and [`Runtime::fold`] folds a stream with an
//! incremental cache.
//!
//! Both keep, per stream, what they have already verified: the stored length and tail hash.
//! While the store's tail still extends the cached one, only the new suffix is read, verified
//! (its first `prev` must be the cached tail) and folded; anything else (a rewritten tail, a
//! branch) takes the full path with full verification. A chain that fails verification is
//! never folded or extended: `Receipt runtime refused to replay invalid chain ...`.
//!
//! **Memory.** The verified heads and the fold states are caches bounded by a capacity
//! ([`DEFAULT_CACHE_CAPACITY`] streams each, [`Runtime::with_cache_capacity`]) that evict the
//! least recently used stream; [`Runtime::forget`] drops a stream whose work is over (the
//! controller calls it when a run ends). A stream without a cache entry simply takes the full
//! path. The per-stream locks exist only while a command holds or waits for them.
//!
//! **Logs** (`tracing`, emitted only): a chain refused as invalid (`warn`, with the stream, index
//! and reason), a command that gave up re-linking under contention (`warn`), each re-link onto a
//! tail another writer moved and each expected-prev refusal (`debug`).

use crate::branch;
use crate::cache::LruMap;
use crate::canonical;
use crate::error::{Error, Result};
use crate::fold::Reducer;
use crate::locks::StreamLocks;
use crate::receipt::{EVENT_ID_HINT, Hints, Receipt, ReceiptContext, verify_from};
use crate::sim::{Clock, EntropySource, OsEntropy, SystemClock};
use crate::store::{AppendOutcome, AppendRequest, ReceiptStore};
use serde::Serialize;
use serde_json::Value;
use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex, MutexGuard};

/// One command: the events it appends (atomically), an optional `eventId` for dedup and an
/// optional expected predecessor.
#[derive(Debug, Clone, Default)]
pub struct Command {
    events: Vec<Value>,
    event_id: Option<String>,
    expected_prev: Option<Option<String>>,
    context: Option<ReceiptContext>,
    hints: Hints,
}

impl Command {
    /// A command appending these bodies (each must be a JSON object; the type is its `type`).
    pub fn new(events: Vec<Value>) -> Self {
        Command {
            events,
            ..Default::default()
        }
    }

    /// A single-event command from a typed body.
    pub fn event<T: Serialize + ?Sized>(body: &T) -> Result<Self> {
        Ok(Command::new(vec![canonical::to_value(body)?]))
    }

    /// Adds a typed event.
    pub fn and<T: Serialize + ?Sized>(mut self, body: &T) -> Result<Self> {
        self.events.push(canonical::to_value(body)?);
        Ok(self)
    }

    /// Dedup key: a single event gets hint `eventId = id`, the events of a multi-event command
    /// `id#0`, `id#1`, ... When all are present the whole command is skipped.
    pub fn event_id(mut self, id: impl Into<String>) -> Self {
        self.event_id = Some(id.into());
        self
    }

    /// Optimistic concurrency: fail unless the (materialized) head is `prev` (`None`: the
    /// stream must be empty).
    pub fn expect_prev(mut self, prev: Option<String>) -> Self {
        self.expected_prev = Some(prev);
        self
    }

    /// The context written (and hashed) into every receipt of the command.
    pub fn context(mut self, context: ReceiptContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Extra hints for every receipt (never hashed).
    pub fn hint(mut self, key: impl Into<String>, value: Value) -> Self {
        self.hints.insert(key.into(), value);
        self
    }

    fn hint_ids(&self) -> Vec<String> {
        match (&self.event_id, self.events.len()) {
            (None, _) => Vec::new(),
            (Some(id), 1) => vec![id.clone()],
            (Some(id), n) => (0..n).map(|i| format!("{id}#{i}")).collect(),
        }
    }
}

/// What [`Runtime::execute`] did.
#[derive(Debug, Clone)]
pub struct Executed {
    /// The receipts appended, as readers see them (materialized); empty when deduplicated.
    pub receipts: Vec<Receipt>,
    /// Whether the whole command was already applied (nothing appended).
    pub duplicate: bool,
    /// The head hash after the command.
    pub head: Option<String>,
    /// The chain length after the command.
    pub len: u64,
}

/// How one attempt of [`Runtime::execute`] ended.
enum Attempt {
    /// Appended, or found applied already.
    Done(Executed),
    /// The store refused the append: its stored tail is no longer the one the receipts were
    /// built on (the store's [`Error::ExpectedPrev`]).
    Moved(Error),
}

/// What has been verified of one stream.
#[derive(Debug, Clone, Default)]
struct Verified {
    branch: bool,
    stored_len: u64,
    stored_tail: Option<String>,
    len: u64,
    head: Option<String>,
}

struct FoldCache {
    mark: Verified,
    state: Box<dyn Any + Send + Sync>,
}

/// A fold cache entry's key: the stream, the reducer's type and its version.
type FoldKey = (String, TypeId, u32);

/// How many streams' verified heads, and how many (stream, reducer) fold states, a runtime
/// keeps by default.
pub const DEFAULT_CACHE_CAPACITY: usize = 4096;

/// How many times a command without an expected prev is built and appended by default before
/// [`Runtime::execute`] gives up with [`Error::Contended`].
pub const DEFAULT_RELINK_ATTEMPTS: u32 = 1000;

/// How many entries a runtime's per-stream tables hold (for tests of bounded memory).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSizes {
    /// Per-stream locks (held or waited for).
    pub locks: usize,
    /// Verified heads.
    pub heads: usize,
    /// Fold states.
    pub folds: usize,
}

/// Executes commands and folds streams over a [`ReceiptStore`].
pub struct Runtime {
    store: Arc<dyn ReceiptStore>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn EntropySource>,
    locks: StreamLocks,
    heads: Mutex<LruMap<String, Verified>>,
    folds: Mutex<LruMap<FoldKey, FoldCache>>,
    relink_attempts: u32,
}

/// Locks a cache table; a panic elsewhere leaves it consistent (every update is one call).
fn table<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runtime {
    /// A runtime with the system clock and OS entropy.
    pub fn new(store: Arc<dyn ReceiptStore>) -> Self {
        Runtime {
            store,
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
            locks: StreamLocks::default(),
            heads: Mutex::new(LruMap::new(DEFAULT_CACHE_CAPACITY)),
            folds: Mutex::new(LruMap::new(DEFAULT_CACHE_CAPACITY)),
            relink_attempts: DEFAULT_RELINK_ATTEMPTS,
        }
    }

    /// How many times [`Runtime::execute`] builds and appends a command that states no
    /// expected prev while other writers keep appending first (at least 1; default
    /// [`DEFAULT_RELINK_ATTEMPTS`]). Each refused attempt means another writer's append
    /// landed, so the bound is only reached under sustained contention on one stream.
    pub fn with_relink_attempts(mut self, attempts: u32) -> Self {
        self.relink_attempts = attempts.max(1);
        self
    }

    /// Bounds the caches: at most `capacity` streams' verified heads and `capacity` fold states
    /// (one per stream and reducer) are kept, the least recently used evicted first. 0 caches
    /// nothing (every call verifies the whole chain).
    pub fn with_cache_capacity(mut self, capacity: usize) -> Self {
        self.heads
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .set_capacity(capacity);
        self.folds
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .set_capacity(capacity);
        self
    }

    /// Drops everything cached about `stream` (its verified head and fold states): for a stream
    /// whose work is over. Results do not change; the next use re-reads and re-verifies it.
    pub fn forget(&self, stream: &str) {
        table(&self.heads).remove(stream);
        table(&self.folds).retain(|(s, _, _)| s != stream);
    }

    /// The sizes of the per-stream tables.
    #[doc(hidden)]
    pub fn cache_sizes(&self) -> CacheSizes {
        CacheSizes {
            locks: self.locks.len(),
            heads: table(&self.heads).len(),
            folds: table(&self.folds).len(),
        }
    }

    /// Replaces the clock (deterministic simulation, tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Replaces the entropy source.
    pub fn with_entropy(mut self, entropy: Arc<dyn EntropySource>) -> Self {
        self.entropy = entropy;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn ReceiptStore> {
        &self.store
    }

    /// The clock.
    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// The entropy source.
    pub fn entropy(&self) -> &dyn EntropySource {
        &*self.entropy
    }

    /// Reads a stream as consumers see it (materialized when it is a branch).
    pub async fn read(&self, stream: &str) -> Result<Vec<Receipt>> {
        branch::materialize(&*self.store, stream).await
    }

    /// Forks `stream` at `at` into `new_name` with this runtime's clock and entropy.
    pub async fn fork(
        &self,
        stream: &str,
        at: u64,
        new_name: &str,
    ) -> Result<crate::store::BranchMeta> {
        branch::fork(
            &*self.store,
            &*self.clock,
            &*self.entropy,
            stream,
            at,
            new_name,
        )
        .await
    }

    /// Brings `mark` up to the store's current state, verifying only what is new when it can.
    /// Returns the new mark, whether the full path was taken, and the receipts to fold: the new
    /// suffix, or the whole (materialized) chain on the full path.
    async fn advance(
        &self,
        stream: &str,
        mark: Option<Verified>,
    ) -> Result<(Verified, bool, Vec<Receipt>)> {
        let refuse = |f: crate::receipt::VerifyFailure| {
            tracing::warn!(%stream, at = f.at, reason = %f.reason, "refusing an invalid chain");
            Error::InvalidChain {
                stream: stream.to_owned(),
                reason: f.reason,
                at: f.at,
            }
        };
        let tail = self.store.tail(stream).await?;
        if let Some(m) = mark.as_ref().filter(|m| !m.branch) {
            let unchanged = match (&tail, &m.stored_tail) {
                (None, None) => true,
                (Some(t), Some(h)) => t.seq + 1 == m.stored_len && t.hash == *h,
                _ => false,
            };
            // An empty stream may have become a branch since it was cached.
            if unchanged && (m.stored_len > 0 || self.store.branch(stream).await?.is_none()) {
                return Ok((m.clone(), false, Vec::new()));
            }
            if let (Some(t), Some(cached_tail)) = (&tail, &m.stored_tail)
                && t.seq + 1 > m.stored_len
            {
                let suffix = self
                    .store
                    .read_range(stream, m.stored_len - 1, None)
                    .await?;
                if suffix.first().is_some_and(|r| r.hash() == cached_tail) {
                    let mut new = suffix;
                    new.remove(0);
                    let v = verify_from(&new, Some(cached_tail), m.stored_len as usize)
                        .map_err(refuse)?;
                    let len = m.stored_len + new.len() as u64;
                    return Ok((
                        Verified {
                            branch: false,
                            stored_len: len,
                            stored_tail: v.head.clone(),
                            len,
                            head: v.head,
                        },
                        false,
                        new,
                    ));
                }
            }
        }
        // Full path: materialize (a plain stream reads as stored) and verify everything.
        let is_branch = self.store.branch(stream).await?.is_some();
        let chain = branch::materialize(&*self.store, stream).await?;
        let v = verify_from(&chain, None, 0).map_err(refuse)?;
        let stored_len = tail.as_ref().map_or(0, |t| t.seq + 1);
        Ok((
            Verified {
                branch: is_branch,
                stored_len,
                stored_tail: tail.map(|t| t.hash),
                len: chain.len() as u64,
                head: v.head,
            },
            true,
            chain,
        ))
    }

    /// Applies `command` to `stream`: serialized per stream, refused on a corrupt chain,
    /// skipped whole when every event id is already recorded, checked against the expected
    /// prev, then appended atomically.
    ///
    /// **Other writers.** The per-stream lock only orders this runtime's commands; another
    /// runtime (another process on the same database) may append between this one's read of
    /// the tail and its append, and the store then refuses the append
    /// ([`Error::ExpectedPrev`]). A command that states an expected prev
    /// ([`Command::expect_prev`]) is refused in that case: the head it was written against has
    /// moved. A command that states none does not depend on the head, so it is re-linked: the
    /// tail is read again (and what was added verified), the dedup check repeats (the other
    /// writer may have applied this very command), the receipts are rebuilt on the new tail
    /// (new `id`, `ts`, `prev` and hash) and appended again, up to
    /// [`Runtime::with_relink_attempts`] attempts, after which [`Error::Contended`] says so.
    pub async fn execute(&self, stream: &str, command: Command) -> Result<Executed> {
        if command.events.is_empty() {
            return Err(Error::Invalid("a command needs at least one event".into()));
        }
        if let Some(bad) = command.events.iter().position(|e| !e.is_object()) {
            return Err(Error::Invalid(format!(
                "event {bad} of the command is not a JSON object"
            )));
        }
        let entry = self.locks.entry(stream);
        let _guard = entry.lock().await;
        let ids = command.hint_ids();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let cached = table(&self.heads).get(stream).cloned();
            let (mark, _, _) = self.advance(stream, cached).await?;
            match self.attempt(stream, &command, &ids, mark).await? {
                Attempt::Done(executed) => return Ok(executed),
                Attempt::Moved(_) if command.expected_prev.is_none() => {
                    if attempt >= self.relink_attempts {
                        tracing::warn!(
                            %stream,
                            attempts = attempt,
                            "gave up re-linking a command: other writers kept appending first"
                        );
                        return Err(Error::Contended {
                            stream: stream.to_owned(),
                            attempts: attempt,
                        });
                    }
                    // Somebody else's append landed: give the other tasks of this thread a
                    // turn before reading the new tail.
                    tracing::debug!(
                        %stream,
                        attempt,
                        "another writer moved the tail: re-linking the command onto it"
                    );
                    tokio::task::yield_now().await;
                }
                Attempt::Moved(store_error) => {
                    // The store compared stored tails; the caller stated a materialized head
                    // (they differ on a branch): report the head it would now have to name.
                    let cached = table(&self.heads).get(stream).cloned();
                    let (mark, _, _) = match self.advance(stream, cached).await {
                        Ok(advanced) => advanced,
                        Err(_) => return Err(store_error),
                    };
                    self.remember(stream, &mark);
                    return Err(Error::ExpectedPrev {
                        expected: command.expected_prev.clone().flatten(),
                        actual: mark.head,
                    });
                }
            }
        }
    }

    /// One attempt of [`Runtime::execute`] on the verified state `mark`: dedup, the caller's
    /// expected prev, then the receipts built on `mark`'s tail and appended.
    async fn attempt(
        &self,
        stream: &str,
        command: &Command,
        ids: &[String],
        mut mark: Verified,
    ) -> Result<Attempt> {
        if !ids.is_empty() {
            let present = self.store.count_event_ids(stream, ids).await?;
            if present == ids.len() {
                // Another writer may have applied it after `mark` was read: report the chain
                // that holds it.
                let (mark, _, _) = self.advance(stream, Some(mark)).await?;
                self.remember(stream, &mark);
                return Ok(Attempt::Done(Executed {
                    receipts: Vec::new(),
                    duplicate: true,
                    head: mark.head,
                    len: mark.len,
                }));
            }
            if present > 0 {
                return Err(Error::PartiallyApplied(
                    command.event_id.clone().unwrap_or_default(),
                ));
            }
        }
        if let Some(expected) = &command.expected_prev
            && *expected != mark.head
        {
            tracing::debug!(
                %stream,
                expected = expected.as_deref().unwrap_or("none"),
                head = mark.head.as_deref().unwrap_or("none"),
                "command refused: the head is not the expected prev"
            );
            self.remember(stream, &mark);
            return Err(Error::ExpectedPrev {
                expected: expected.clone(),
                actual: mark.head.clone(),
            });
        }

        let mut stored: Vec<Receipt> = Vec::with_capacity(command.events.len());
        let mut visible: Vec<Receipt> = Vec::with_capacity(command.events.len());
        for (i, body) in command.events.iter().enumerate() {
            let mut hints = command.hints.clone();
            if let Some(id) = ids.get(i) {
                hints.insert(EVENT_ID_HINT.to_owned(), Value::String(id.clone()));
            }
            let stored_prev = stored
                .last()
                .map(|r| r.hash().to_owned())
                .or_else(|| mark.stored_tail.clone());
            let r = Receipt::build(
                stream,
                stored_prev,
                body.clone(),
                command.context.clone(),
                hints,
                &*self.clock,
                &*self.entropy,
            )?;
            if mark.branch {
                let prev = visible
                    .last()
                    .map(|r| r.hash().to_owned())
                    .or_else(|| mark.head.clone());
                visible.push(r.relinked(prev)?);
            }
            stored.push(r);
        }
        let request = AppendRequest {
            stream: stream.to_owned(),
            receipts: stored.clone(),
            expected_tail: mark.stored_tail.clone(),
        };
        let outcome = match self.store.append(request).await {
            Ok(outcome) => outcome,
            // The stored tail moved since `mark` was read: the cached mark is stale, and the
            // next read of the tail takes the incremental path from it.
            Err(e @ Error::ExpectedPrev { .. }) => return Ok(Attempt::Moved(e)),
            Err(e) => return Err(e),
        };
        Ok(Attempt::Done(match outcome {
            // Another writer applied the same event ids after the check above.
            AppendOutcome::Duplicate => {
                let (mark, _, _) = self.advance(stream, Some(mark)).await?;
                self.remember(stream, &mark);
                Executed {
                    receipts: Vec::new(),
                    duplicate: true,
                    head: mark.head,
                    len: mark.len,
                }
            }
            AppendOutcome::Appended { tail } => {
                let visible = if mark.branch { visible } else { stored };
                mark.stored_len = tail.seq + 1;
                mark.stored_tail = Some(tail.hash);
                mark.len += visible.len() as u64;
                mark.head = visible.last().map(|r| r.hash().to_owned());
                self.remember(stream, &mark);
                Executed {
                    receipts: visible,
                    duplicate: false,
                    head: mark.head,
                    len: mark.len,
                }
            }
        }))
    }

    fn remember(&self, stream: &str, mark: &Verified) {
        table(&self.heads).insert(stream.to_owned(), mark.clone());
    }

    /// Folds `stream` with `reducer`, reusing the cached state and folding only receipts
    /// appended since (verified, linked to the cached tail). Branches always fold in full.
    pub async fn fold<R: Reducer>(&self, stream: &str, reducer: &R) -> Result<R::State> {
        let key = (stream.to_owned(), TypeId::of::<R>(), R::VERSION);
        let cached = table(&self.folds).remove(&key);
        let (mark, mut state) = match cached {
            Some(c) => match c.state.downcast::<R::State>() {
                Ok(s) => (Some(c.mark), *s),
                Err(_) => (None, reducer.initial()),
            },
            None => (None, reducer.initial()),
        };
        let (mark, full, new) = self.advance(stream, mark).await?;
        if full {
            state = reducer.initial();
        }
        for r in &new {
            reducer.apply(&mut state, r);
        }
        table(&self.folds).insert(
            key,
            FoldCache {
                mark,
                state: Box::new(state.clone()),
            },
        );
        Ok(state)
    }
}
