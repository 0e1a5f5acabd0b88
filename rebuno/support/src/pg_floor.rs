//! The machine's PostgreSQL floor, for the benchmarks of both PostgreSQL stores: the rate of
//! single-row `INSERT` + `COMMIT` transactions through the same driver and pool the stores use
//! (the insert prepared once per connection, as the stores' statements are, and pipelined:
//! `BEGIN`, the insert and `COMMIT` leave together, one round trip and one WAL flush), on one
//! connection and on many at once. Every PostgreSQL figure in the README's performance table
//! stands beside this floor, measured in the same run. [`Figures`] is also what the benchmarks
//! report their own measurements in.

use crate::pg::{PgError, PgPool, Queries};
use postgres::types::Type;
use std::time::{Duration, Instant};

/// What one measured phase did: operations, wall time and each operation's latency.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Operations completed, all workers together.
    pub ops: usize,
    /// Wall time of the phase.
    pub elapsed: Duration,
    /// Per-operation latencies, sorted.
    latencies: Vec<Duration>,
}

impl Figures {
    /// Figures of `latencies.len()` operations over `elapsed`.
    pub fn new(elapsed: Duration, mut latencies: Vec<Duration>) -> Figures {
        latencies.sort_unstable();
        Figures {
            ops: latencies.len(),
            elapsed,
            latencies,
        }
    }

    /// Operations per second, all workers together.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// The latency at fraction `p` (0.5 the median); zero for an empty phase.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
        self.latencies[i]
    }

    /// Mean latency.
    pub fn mean(&self) -> Duration {
        let total: Duration = self.latencies.iter().sum();
        total / self.latencies.len().max(1) as u32
    }

    /// `<rate> ops/s  p50 <us>  p99 <us>`, for a bench's table.
    pub fn describe(&self) -> String {
        format!(
            "{:>8.0} ops/s  p50 {:>7.0} us  p99 {:>7.0} us",
            self.rate(),
            self.percentile(0.5).as_secs_f64() * 1e6,
            self.percentile(0.99).as_secs_f64() * 1e6
        )
    }
}

/// Runs `per_connection` single-row `INSERT` + `COMMIT` transactions on each of `connections`
/// threads at once, through `pool` (which should allow that many connections), into a table
/// `bench_floor` it creates in the pool's schema. Blocking.
pub fn commit_floor(
    pool: &PgPool,
    connections: usize,
    per_connection: usize,
) -> Result<Figures, PgError> {
    pool.run(|c| {
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)",
        )
    })?;
    let connections = connections.max(1);
    // Warm the connections up first, so the figure is commits, not connection set-up.
    let warm: Vec<_> = (0..connections)
        .map(|_| pool.get())
        .collect::<Result<_, _>>()?;
    drop(warm);
    let body = "x".repeat(200);
    let started = Instant::now();
    let latencies = std::thread::scope(|s| {
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                s.spawn(|| -> Result<Vec<Duration>, PgError> {
                    let mut out = Vec::with_capacity(per_connection);
                    for _ in 0..per_connection {
                        let t = Instant::now();
                        pool.transaction(|tx| {
                            tx.defer(
                                "INSERT INTO bench_floor (body) VALUES ($1)",
                                &[(&body, Type::TEXT)],
                            );
                            Ok::<_, PgError>(())
                        })?;
                        out.push(t.elapsed());
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(connections * per_connection);
        for w in workers {
            all.extend(w.join().expect("a floor thread panicked")?);
        }
        Ok::<_, PgError>(all)
    })?;
    Ok(Figures::new(started.elapsed(), latencies))
}
