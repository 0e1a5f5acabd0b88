//! The rate limiter of a PostgreSQL store: token buckets in the `rate_buckets` table, shared by
//! every replica on the database, so N replicas together allow a rule's `max_calls` per window
//! (not N times it).
//!
//! The semantics are the in-memory limiter's: capacity `max_calls`, starting full, refilled
//! continuously at `max_calls / window`, capped at capacity, one whole token per call, the
//! limit read from the rule on every call (a changed window keeps the bucket's token count).
//! One call is one statement, atomic under concurrency: an upsert that refills the stored
//! bucket, takes a token only `WHERE` the refilled bucket holds one, and returns a row only if
//! it took one. Time is the database's (`clock_timestamp()`), so the replicas' clocks do not
//! matter. A refused call leaves the bucket as it was, which decides the next call exactly as
//! refilling it would have (refill is linear and capped).
//!
//! A call is retried on a new connection if its connection fails (the server restarting): a
//! retried call may take a second token for one call, never grant an extra one.

use crate::policy::ratelimit::{LimiterError, LimiterFuture, RateLimiter};
use durable_support::pg::postgres::types::Type;
use durable_support::pg::{PgError, PgPool, Queries};
use std::time::{Duration, SystemTime};

/// A [`RateLimiter`] over the `rate_buckets` table of a PostgreSQL kernel database.
#[derive(Debug, Clone)]
pub struct PgRateLimiter {
    pool: PgPool,
}

impl PgRateLimiter {
    /// A limiter whose buckets live in the database `pool` connects to (migrated by
    /// [`PgStore::connect`](super::PgStore::connect)).
    pub fn new(pool: PgPool) -> Self {
        PgRateLimiter { pool }
    }

    /// Runs `f` on the pool on a blocking thread.
    fn blocking<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&PgPool) -> Result<T, PgError> + Send + 'static,
    ) -> LimiterFuture<'_, T> {
        let pool = self.pool.clone();
        Box::pin(async move {
            match tokio::task::spawn_blocking(move || f(&pool)).await {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(e)) => Err(LimiterError::with_source(what, e)),
                Err(e) => Err(LimiterError::new(format!("{what}: {e}"))),
            }
        })
    }
}

/// The refilled token count of bucket `b` at `clock_timestamp()`, for a capacity of `$2`
/// tokens refilled over `$3` seconds.
const REFILLED: &str = "least(b.tokens + greatest(extract(epoch FROM clock_timestamp() - b.updated_at)::float8, 0) * $2 / $3, $2)";

impl RateLimiter for PgRateLimiter {
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        max_calls: u64,
        window: Duration,
    ) -> LimiterFuture<'a, bool> {
        if max_calls == 0 || window.is_zero() {
            return Box::pin(std::future::ready(Ok(true)));
        }
        let key = key.to_owned();
        let capacity = max_calls as f64;
        let max_tokens = i64::try_from(max_calls).unwrap_or(i64::MAX);
        let window = window.as_secs_f64();
        let sql = format!(
            "INSERT INTO rate_buckets AS b (key, tokens, max_tokens, window_seconds, updated_at)
             VALUES ($1, $2 - 1, $4, $3, clock_timestamp())
             ON CONFLICT (key) DO UPDATE SET tokens = {REFILLED} - 1, max_tokens = $4,
               window_seconds = $3, updated_at = clock_timestamp()
             WHERE {REFILLED} >= 1
             RETURNING 1"
        );
        self.blocking("rate limiter", move |pool| {
            pool.run(|c| {
                c.query_typed(
                    &sql,
                    &[
                        (&key, Type::TEXT),
                        (&capacity, Type::FLOAT8),
                        (&window, Type::FLOAT8),
                        (&max_tokens, Type::INT8),
                    ],
                )
                .map(|rows| !rows.is_empty())
            })
        })
    }

    /// Deletes buckets idle for longer than `now - cutoff` (the cutoff read as an age on this
    /// process's clock, measured against the database's; all of them for a future cutoff).
    fn sweep(&self, cutoff: SystemTime) -> LimiterFuture<'_, usize> {
        let max_idle = SystemTime::now()
            .duration_since(cutoff)
            .map_or(-1.0, |d| d.as_secs_f64());
        self.blocking("rate limiter sweep", move |pool| {
            pool.run(|c| {
                c.execute_typed(
                    "DELETE FROM rate_buckets
                     WHERE $1 < 0 OR updated_at < clock_timestamp() - make_interval(secs => $1)",
                    &[(&max_idle, Type::FLOAT8)],
                )
            })
            .map(|n| n as usize)
        })
    }

    fn sweep_refilled(&self) -> LimiterFuture<'_, usize> {
        self.blocking("rate limiter sweep", |pool| {
            pool.run(|c| {
                c.execute_typed(
                    "DELETE FROM rate_buckets b WHERE b.tokens + greatest(extract(epoch FROM
                       clock_timestamp() - b.updated_at)::float8, 0) * b.max_tokens
                       / b.window_seconds >= b.max_tokens",
                    &[],
                )
            })
            .map(|n| n as usize)
        })
    }
}
