//! Local steps: non-determinism (clocks, randomness, fresh ids) recorded once and replayed
//! identically, so a resumed handler takes the same branches. [`step`] is the function form;
//! `#[rebuno::step]` makes an `async fn` one. [`now_ms`], [`uuid_v7`] and [`random_u64`] are
//! the common cases, ready-made.

use crate::agent::context::{execution, raw_args};
use crate::error::Result;
use crate::protocol::{Idempotency, StepKind};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::future::Future;

/// Runs `f` as a `local` step named `name` with `args` as its recorded args: on the first run
/// `f` runs and its result is recorded; on every later dispatch the recorded result is returned
/// and `f` does not run.
///
/// ```ignore
/// let started: i64 = rebuno::step("started_at", (), || async {
///     Ok::<_, std::convert::Infallible>(clock_ms())
/// }).await?;
/// ```
pub async fn step<A, T, E, F, Fut>(name: &str, args: A, f: F) -> Result<T>
where
    A: Serialize,
    T: Serialize + DeserializeOwned,
    E: fmt::Display + 'static,
    F: FnOnce() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    let ctx = execution()?;
    let raw = raw_args(&args)?;
    ctx.invoke(
        StepKind::Local,
        name,
        Idempotency::SafeToRetry,
        raw,
        async move { f().await },
    )
    .await
}

/// The wall clock in milliseconds since the Unix epoch, recorded as step `name` (use distinct
/// names, or the occurrence counter, for distinct readings).
pub async fn now_ms(name: &str) -> Result<i64> {
    step(name, (), || async {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Ok::<_, std::convert::Infallible>(now)
    })
    .await
}

/// A fresh UUIDv7, recorded as step `name`.
pub async fn uuid_v7(name: &str) -> Result<String> {
    step(name, (), || async {
        Ok::<_, std::convert::Infallible>(uuid::Uuid::now_v7().to_string())
    })
    .await
}

/// A random `u64`, recorded as step `name`.
pub async fn random_u64(name: &str) -> Result<u64> {
    step(name, (), || async {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let mut x = [0u8; 8];
        x.copy_from_slice(&bytes[..8]);
        Ok::<_, std::convert::Infallible>(u64::from_le_bytes(x))
    })
    .await
}
