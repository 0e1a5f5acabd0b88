//! Injected time and entropy: the only sources of non-determinism in receipt construction.
//!
//! The runtime and the branch operations take a [`Clock`] and an [`EntropySource`] instead of
//! reading globals, so a test (or a deterministic simulation) that pins both gets the same ids
//! and hashes for the same appends, bit for bit.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of receipt timestamps, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// The current time in ms.
    fn now_ms(&self) -> i64;
}

/// A source of the 8 random bytes in every receipt id.
pub trait EntropySource: Send + Sync {
    /// Fills `buf` with bytes.
    fn fill(&self, buf: &mut [u8]);
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The operating system's random number generator.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl EntropySource for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        // The OS generator failing is not recoverable in any useful way; fall back to a
        // time-and-counter mix rather than abort an append (ids need uniqueness, not secrecy).
        if getrandom::fill(buf).is_err() {
            static COUNTER: AtomicI64 = AtomicI64::new(0);
            let seed =
                SystemClock.now_ms() ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(32);
            SeededEntropy::new(seed as u64).fill(buf);
        }
    }
}

/// A clock that returns a fixed time, advancing by `step_ms` on every read (0 keeps it still).
#[derive(Debug)]
pub struct FixedClock {
    next: AtomicI64,
    step_ms: i64,
}

impl FixedClock {
    /// A clock starting at `start_ms` that advances `step_ms` per read.
    pub fn new(start_ms: i64, step_ms: i64) -> Self {
        FixedClock {
            next: AtomicI64::new(start_ms),
            step_ms,
        }
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.next.fetch_add(self.step_ms, Ordering::Relaxed)
    }
}

/// Deterministic pseudo-random bytes from a seed (SplitMix64); the same seed gives the same
/// byte sequence.
#[derive(Debug)]
pub struct SeededEntropy {
    state: Mutex<u64>,
}

impl SeededEntropy {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededEntropy {
            state: Mutex::new(seed),
        }
    }
}

impl EntropySource for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for chunk in buf.chunks_mut(8) {
            *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = *state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_be_bytes()[..chunk.len()]);
        }
    }
}

/// Entropy that always yields the same bytes (repeated), for exact test vectors.
#[derive(Debug, Clone)]
pub struct FixedEntropy(pub Vec<u8>);

impl EntropySource for FixedEntropy {
    fn fill(&self, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = if self.0.is_empty() {
                0
            } else {
                self.0[i % self.0.len()]
            };
        }
    }
}
