//! Local steps: non-determinism (clocks, randomness, fresh ids) recorded once and replayed
//! identically, so a resumed handler takes the same branches. [`step`] is the function form;
//! `#[rebuno::step]` makes an `async fn` one. [`now_ms`], [`uuid_v7`] and [`random_u64`] are
//! the common cases, ready-made.

use crate::__private::invoke;
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
    // `f` is called only when the step runs: on a replay not even its synchronous part does.
    invoke(
        StepKind::Local,
        name,
        Idempotency::SafeToRetry,
        &[],
        Ok(args),
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

/// A random `u64` from the operating system's generator (all 64 bits random), recorded as step
/// `name`. Should the generator fail, the step fails with its error.
pub async fn random_u64(name: &str) -> Result<u64> {
    step(name, (), || async { getrandom::u64() }).await
}
