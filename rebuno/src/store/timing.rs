//! Commit and sync latencies a store reports into the histograms of the kernel that uses it
//! (see `kernel::histograms`), and the warning about a slow sync. A store starts with nowhere
//! to report; the kernel built over it connects its histograms once ([`StoreTimings::connect`];
//! a second kernel over the same store keeps reporting to the first).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A sync at least this slow is logged as a warning.
pub const SLOW_SYNC: Duration = Duration::from_secs(1);

/// Where a store records its commit and sync latencies. Cheap to clone (clones share the
/// destination).
#[derive(Clone, Default)]
pub struct StoreTimings(Arc<OnceLock<Histograms>>);

// Only the SQLite and PostgreSQL stores measure.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
struct Histograms {
    commit: metrics::Histogram,
    sync: metrics::Histogram,
}

impl std::fmt::Debug for StoreTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTimings")
            .field("connected", &self.0.get().is_some())
            .finish()
    }
}

impl StoreTimings {
    /// Records commits into `commit` and syncs into `sync` from now on; only the first call
    /// takes effect.
    pub fn connect(&self, commit: metrics::Histogram, sync: metrics::Histogram) {
        let _ = self.0.set(Histograms { commit, sync });
    }

    /// One commit took `elapsed`.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn commit(&self, elapsed: Duration) {
        if let Some(h) = self.0.get() {
            h.commit.record(elapsed.as_secs_f64());
        }
    }

    /// One sync of the write-ahead log took `elapsed`; a slow one is logged.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn sync(&self, elapsed: Duration) {
        if let Some(h) = self.0.get() {
            h.sync.record(elapsed.as_secs_f64());
        }
        if elapsed >= SLOW_SYNC {
            tracing::warn!(
                elapsed_ms = elapsed.as_millis() as u64,
                "syncing the kernel database's write-ahead log was slow"
            );
        }
    }
}
