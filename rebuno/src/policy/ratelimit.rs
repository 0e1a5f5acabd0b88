//! Rate limiting of rule matches: the [`RateLimiter`] backend trait, the in-memory
//! token-bucket backend used by dev mode, and [`enforce_rate_limit`], which applies a decision's
//! limit and its `on_limiter_error` policy. The injectable [`Clock`] it reads lives in
//! [`crate::time`] (the agent SDK uses it too) and is re-exported here.
//!
//! The algorithm is a token bucket per key: capacity `max_calls`, starting full, refilled
//! continuously at `max_calls / window`, capped at capacity; a call needs one whole token. The
//! limit is read from the rule on every call, so editing a bundle takes effect at once. The
//! in-memory backend does the arithmetic in integers (tokens scaled by the window in
//! nanoseconds), so a test clock advanced by exactly `window / max_calls` yields exactly one
//! token, with no float rounding. It measures refill with the clock's monotonic reading, so a
//! step of the wall clock neither refills a bucket nor drains it, and its buckets are swept once
//! they have refilled completely (such a bucket decides exactly as a fresh one).
//!
//! The backend trait is asynchronous (boxed futures, so it stays object-safe) because the
//! server backend is one atomic upsert on the PostgreSQL `rate_buckets` table.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

pub use crate::time::{Clock, ManualClock, SystemClock};

use super::bundle::{OnLimiterError, RateLimit};
use super::{Decision, EvalInput, RuleLimit, reasons};

/// Takes a lock even if a previous holder panicked: every critical section here leaves the
/// data consistent, so poisoning carries no information.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The limiter backend failed (for example, the database is unreachable).
#[derive(Debug, thiserror::Error)]
#[error("rate limiter unavailable: {message}")]
pub struct LimiterError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl LimiterError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        LimiterError {
            message: message.into(),
            source: None,
        }
    }

    /// An error wrapping its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        LimiterError {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// The future a [`RateLimiter`] method returns.
pub type LimiterFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LimiterError>> + Send + 'a>>;

/// A rate-limit backend: one token bucket per key, configured by the caller on every call.
pub trait RateLimiter: Send + Sync {
    /// Refills the bucket `key` for the time since its last use, then takes one token if there
    /// is one. `Ok(true)` means the call is allowed. `max_calls` is the capacity and `window`
    /// the time to refill from empty to full; a new bucket starts full.
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        max_calls: u64,
        window: Duration,
    ) -> LimiterFuture<'a, bool>;

    /// Deletes buckets last used before `cutoff` (the retention sweep); returns how many.
    fn sweep(&self, cutoff: SystemTime) -> LimiterFuture<'_, usize>;

    /// Deletes buckets idle long enough to have refilled completely; returns how many. A full
    /// bucket decides exactly as a fresh one, so this changes no decision; the kernel calls it
    /// on a timer whether or not retention is on. Backends whose buckets expire by themselves
    /// keep this default, which does nothing.
    fn sweep_refilled(&self) -> LimiterFuture<'_, usize> {
        Box::pin(std::future::ready(Ok(0)))
    }
}

/// A bucket: tokens scaled by the window length in nanoseconds, as of `updated` (a monotonic
/// reading, so a wall-clock step neither refills nor drains it).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    scaled_tokens: i128,
    window_ns: i128,
    max_calls: i128,
    updated: Duration,
}

impl Bucket {
    /// Whether the bucket has refilled completely by `now`.
    fn is_full_at(&self, now: Duration) -> bool {
        let refill = nanos(now.saturating_sub(self.updated)).saturating_mul(self.max_calls);
        self.scaled_tokens.saturating_add(refill) >= self.max_calls.saturating_mul(self.window_ns)
    }
}

fn nanos(d: Duration) -> i128 {
    i128::try_from(d.as_nanos()).unwrap_or(i128::MAX)
}

/// The in-process token-bucket backend (dev mode).
pub struct MemoryRateLimiter {
    clock: std::sync::Arc<dyn Clock>,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl std::fmt::Debug for MemoryRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRateLimiter")
            .field("buckets", &self.len())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryRateLimiter {
    fn default() -> Self {
        MemoryRateLimiter::new(std::sync::Arc::new(SystemClock))
    }
}

impl MemoryRateLimiter {
    /// A limiter reading time from `clock`.
    pub fn new(clock: std::sync::Arc<dyn Clock>) -> Self {
        MemoryRateLimiter {
            clock,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The number of live buckets.
    pub fn len(&self) -> usize {
        lock(&self.buckets).len()
    }

    /// True if no bucket exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The synchronous core of [`RateLimiter::try_acquire`].
    pub fn acquire_now(&self, key: &str, max_calls: u64, window: Duration) -> bool {
        let window_ns = nanos(window);
        if max_calls == 0 || window_ns == 0 {
            return true;
        }
        let now = self.clock.monotonic();
        let max = i128::from(max_calls);
        let capacity = max.saturating_mul(window_ns);
        let mut buckets = lock(&self.buckets);
        let tokens = match buckets.get(key) {
            None => capacity,
            Some(b) => {
                // Re-express stored tokens at the current window if the rule changed.
                let tokens = if b.window_ns == window_ns {
                    b.scaled_tokens
                } else {
                    b.scaled_tokens.saturating_mul(window_ns) / b.window_ns.max(1)
                };
                tokens
                    .saturating_add(nanos(now.saturating_sub(b.updated)).saturating_mul(max))
                    .min(capacity)
            }
        };
        let allowed = tokens >= window_ns;
        let scaled_tokens = if allowed { tokens - window_ns } else { tokens };
        buckets.insert(
            key.to_owned(),
            Bucket {
                scaled_tokens,
                window_ns,
                max_calls: max,
                updated: now,
            },
        );
        allowed
    }

    /// The synchronous core of [`RateLimiter::sweep`]. Buckets keep monotonic times, so the
    /// cutoff is read as an age: buckets idle for longer than `now - cutoff` go (all of them
    /// when the cutoff is in the future).
    pub fn sweep_now(&self, cutoff: SystemTime) -> usize {
        let now = self.clock.monotonic();
        let max_idle = self.clock.now().duration_since(cutoff).ok();
        self.retain(|b| max_idle.is_some_and(|max| now.saturating_sub(b.updated) <= max))
    }

    /// The synchronous core of [`RateLimiter::sweep_refilled`].
    pub fn sweep_refilled_now(&self) -> usize {
        let now = self.clock.monotonic();
        self.retain(|b| !b.is_full_at(now))
    }

    fn retain(&self, keep: impl Fn(&Bucket) -> bool) -> usize {
        let mut buckets = lock(&self.buckets);
        let before = buckets.len();
        buckets.retain(|_, b| keep(b));
        before - buckets.len()
    }
}

impl RateLimiter for MemoryRateLimiter {
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        max_calls: u64,
        window: Duration,
    ) -> LimiterFuture<'a, bool> {
        let allowed = self.acquire_now(key, max_calls, window);
        Box::pin(std::future::ready(Ok(allowed)))
    }

    fn sweep(&self, cutoff: SystemTime) -> LimiterFuture<'_, usize> {
        let removed = self.sweep_now(cutoff);
        Box::pin(std::future::ready(Ok(removed)))
    }

    fn sweep_refilled(&self) -> LimiterFuture<'_, usize> {
        let removed = self.sweep_refilled_now();
        Box::pin(std::future::ready(Ok(removed)))
    }
}

/// The result of applying a decision's rate limit.
#[derive(Debug)]
pub enum RateLimitOutcome {
    /// No limit applies, or a token was taken.
    Allowed,
    /// The bucket is empty: answer `rate_limited` with reason `rate_limit_exceeded`.
    Exceeded,
    /// The backend failed. `refused` follows the rule's `on_limiter_error`: `true` (deny) means
    /// answer `rate_limited` with reason `rate_limiter_unavailable`; `false` means fail open.
    BackendFailed {
        /// Whether the call is refused.
        refused: bool,
        /// What went wrong, for logging.
        error: LimiterError,
    },
}

impl RateLimitOutcome {
    /// The `rate_limited` reason if the call is refused, `None` if it may go ahead.
    pub fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            RateLimitOutcome::Allowed => None,
            RateLimitOutcome::Exceeded => Some(reasons::RATE_LIMIT_EXCEEDED),
            RateLimitOutcome::BackendFailed { refused: true, .. } => {
                Some(reasons::RATE_LIMITER_UNAVAILABLE)
            }
            RateLimitOutcome::BackendFailed { refused: false, .. } => None,
        }
    }

    /// True if the call may go ahead.
    pub fn is_allowed(&self) -> bool {
        self.refusal_reason().is_none()
    }
}

/// Applies the rate limits of `decision` (if any; see [`Decision::limits`]) to the call
/// described by `input`, each with its rule's bucket key ([`RateLimit::bucket_key`]). Call it
/// only for new steps, before recording anything about the policy result; it applies whatever
/// the decision's action is.
pub async fn enforce_rate_limit(
    limiter: &dyn RateLimiter,
    decision: &Decision,
    input: &EvalInput<'_>,
) -> RateLimitOutcome {
    enforce_rate_limits(limiter, decision, input).await.0
}

/// [`enforce_rate_limit`], also answering which limit refused the call (`None` when none
/// did). The limits are applied in order and the first refusal ends it: a later limit is not
/// drawn from, and a token an earlier one gave is kept.
pub async fn enforce_rate_limits(
    limiter: &dyn RateLimiter,
    decision: &Decision,
    input: &EvalInput<'_>,
) -> (RateLimitOutcome, Option<RuleLimit>) {
    let mut last = RateLimitOutcome::Allowed;
    for limit in decision.limits() {
        let outcome = enforce(limiter, &limit.rule_id, &limit.limit, input).await;
        if !outcome.is_allowed() {
            return (outcome, Some(limit));
        }
        // A failed backend that fails open lets the call through; it is still reported.
        if matches!(outcome, RateLimitOutcome::BackendFailed { .. }) {
            last = outcome;
        }
    }
    (last, None)
}

async fn enforce(
    limiter: &dyn RateLimiter,
    rule_id: &str,
    limit: &RateLimit,
    input: &EvalInput<'_>,
) -> RateLimitOutcome {
    let Some(window) = limit.window.to_std().filter(|w| !w.is_zero()) else {
        return RateLimitOutcome::Allowed;
    };
    let key = limit.bucket_key(rule_id, input.agent_id, input.execution_id);
    match limiter.try_acquire(&key, limit.max_calls, window).await {
        Ok(true) => RateLimitOutcome::Allowed,
        Ok(false) => RateLimitOutcome::Exceeded,
        Err(error) => RateLimitOutcome::BackendFailed {
            refused: limit.on_limiter_error == OnLimiterError::Deny,
            error,
        },
    }
}
