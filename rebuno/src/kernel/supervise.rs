//! Supervision of the kernel's background work. A background loop (dispatcher, reaper,
//! approval timer, sweeper) that panics is logged with `tracing::error!` and restarted after a
//! short backoff, so it never dies silently; a single delivery that panics is reported to its
//! caller as an error, so the dispatch is retried instead of sitting in flight until its lease
//! expires.
//!
//! The work runs in its own task (tokio catches the panic there), owned by its supervisor:
//! aborting the supervisor aborts the work.

use std::future::Future;
use std::time::Duration;
use tokio::task::{JoinError, JoinHandle};

/// The first restart delay; it doubles on each consecutive panic.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest restart delay.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A loop that ran this long before panicking starts again from the first delay.
const STABLE: Duration = Duration::from_secs(60);

/// Aborts the task when dropped, so a supervisor that is aborted takes its work with it.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The text of a panic's payload.
fn panic_message(e: JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic with a non-text payload".to_owned()),
        Err(e) => e.to_string(),
    }
}

/// Runs `future` in its own task; `Err` with the panic's message if it panicked.
pub(crate) async fn catch_panic<T, F>(future: F) -> Result<T, String>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let mut task = AbortOnDrop(tokio::spawn(future));
    (&mut task.0).await.map_err(panic_message)
}

/// Spawns the loop `make()` and keeps it running: when it panics, logs the panic and starts a
/// new one from `make` after a backoff. Aborting the returned handle stops it.
pub(crate) fn supervise<F, Fut>(name: &'static str, make: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let started = tokio::time::Instant::now();
            let mut task = AbortOnDrop(tokio::spawn(make()));
            let error = match (&mut task.0).await {
                Ok(()) => return,
                Err(e) if e.is_panic() => panic_message(e),
                // Cancelled: the runtime is shutting down.
                Err(_) => return,
            };
            if started.elapsed() >= STABLE {
                backoff = FIRST_BACKOFF;
            }
            tracing::error!(
                background_loop = name,
                error = %error,
                restart_in_ms = backoff.as_millis() as u64,
                "background loop panicked; restarting it"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn explode(message: &str) {
        panic!("{message}");
    }

    #[tokio::test]
    async fn a_panicking_loop_is_restarted_and_aborting_stops_it() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let r = Arc::clone(&runs);
        let handle = supervise("test", move || {
            let (r, tx) = (Arc::clone(&r), tx.clone());
            async move {
                let n = r.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(n);
                if n < 2 {
                    panic!("injected {n}");
                }
                std::future::pending::<()>().await;
            }
        });
        for expected in 0..3 {
            assert_eq!(rx.recv().await, Some(expected));
        }
        handle.abort();
        let _ = handle.await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(
            catch_panic(async { explode("boom") }).await,
            Err("boom".to_owned())
        );
        assert_eq!(catch_panic(async { 7 }).await, Ok(7));
    }
}
