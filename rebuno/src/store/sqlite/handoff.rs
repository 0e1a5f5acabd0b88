//! Handing a job to a store thread (the writer, a reader) and waiting for its answer, without
//! paying for thread wake-ups where a short spin is cheaper.
//!
//! On a virtual machine, waking a sleeping thread costs tens of microseconds: as much as an
//! unsynced commit or a whole indexed read. So a store thread that has just answered a lone job
//! spins briefly for the next one before it sleeps, and a lone caller on a multi-threaded
//! runtime spins briefly for its answer before it gives its worker back. Under load neither
//! spins: jobs then come in groups, and the cores are better spent producing them. A spinning
//! thread yields its core on every turn: when the thread it waits for shares that core (a busy
//! machine), a plain spin would keep that thread from running until the spin ran out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Counts a job in flight for as long as it lives (a cancelled caller included).
pub(super) struct InFlight<'a> {
    count: &'a AtomicUsize,
    /// No other job was in flight when this one entered.
    lone: bool,
}

impl<'a> InFlight<'a> {
    /// Counts one more job in `count`.
    pub(super) fn enter(count: &'a AtomicUsize) -> Self {
        let lone = count.fetch_add(1, Ordering::SeqCst) == 0;
        InFlight { count, lone }
    }

    /// No other job was in flight when this one entered.
    pub(super) fn lone(&self) -> bool {
        self.lone
    }

    /// Another job is in flight now.
    fn joined(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 1
    }

    /// Waits for the job's answer on `rx`; `None` if the thread dropped it. A lone job on a
    /// multi-threaded runtime spins for up to `spin` first (the worker has nothing better to do
    /// than a wake-up would cost); once another job joins, the worker is needed elsewhere.
    pub(super) async fn answer<T>(
        &self,
        mut rx: oneshot::Receiver<T>,
        spin: Duration,
    ) -> Option<T> {
        if self.lone && multi_threaded() {
            let started = Instant::now();
            while started.elapsed() < spin && !self.joined() {
                match rx.try_recv() {
                    Ok(answer) => return Some(answer),
                    Err(oneshot::error::TryRecvError::Closed) => return None,
                    Err(oneshot::error::TryRecvError::Empty) => std::thread::yield_now(),
                }
            }
        }
        rx.await.ok()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the caller runs on a multi-threaded tokio runtime (spinning on the only worker of a
/// current-thread runtime would stall everything else on it).
fn multi_threaded() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// The next job from `rx`: spins for up to `spin` first, then sleeps. `None` once every sender
/// is gone.
pub(super) fn next_job<T>(rx: &mpsc::Receiver<T>, spin: Duration) -> Option<T> {
    let started = Instant::now();
    while started.elapsed() < spin {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
    rx.recv().ok()
}
