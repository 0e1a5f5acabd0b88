//! The machine's PostgreSQL floor, for the benchmarks of both PostgreSQL stores: the rate of
//! single-row `INSERT` + `COMMIT` transactions through the same driver and pool the stores use
//! (the insert prepared once per connection, as the stores' statements are), on one connection
//! and on many at once, sent two ways ([`Commit`]): pipelined (`BEGIN`, the insert and `COMMIT`
//! leave together: one round trip and one WAL flush) and stepwise (three round trips, as a
//! driver that waits for every statement pays). A benchmark holds its figures to the cheaper of
//! the two, measured in the same run: the two can rank either way, since on a busy machine the
//! WAL flush, not the round trip, may dominate. [`Figures`] is also what the benchmarks report
//! their own measurements in.

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

/// How a floor transaction reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// `BEGIN`, the insert and `COMMIT` sent together: one round trip (what the stores'
    /// transactions do with a write whose answer nobody waits for).
    Pipelined,
    /// `BEGIN`, the insert and `COMMIT` each answered before the next is sent: three round trips
    /// (what a driver that waits for every statement pays).
    Stepwise,
}

const INSERT: &str = "INSERT INTO bench_floor (body) VALUES ($1)";

/// Runs `per_connection` single-row `INSERT` + `COMMIT` transactions on each of `connections`
/// threads at once, through `pool` (which should allow that many connections), into a table
/// `bench_floor` it creates in the pool's schema, sent as `how` says. Blocking.
pub fn commit_floor(
    pool: &PgPool,
    connections: usize,
    per_connection: usize,
    how: Commit,
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
    let one = || -> Result<(), PgError> {
        let row = [(&body as &(dyn postgres::types::ToSql + Sync), Type::TEXT)];
        match how {
            Commit::Pipelined => pool.transaction(|tx| {
                tx.defer(INSERT, &row);
                Ok::<_, PgError>(())
            }),
            Commit::Stepwise => pool.run(|c| {
                c.batch_execute("BEGIN")?;
                c.execute_typed(INSERT, &row)?;
                c.batch_execute("COMMIT")
            }),
        }
    };
    let started = Instant::now();
    let latencies = std::thread::scope(|s| {
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                s.spawn(|| -> Result<Vec<Duration>, PgError> {
                    let mut out = Vec::with_capacity(per_connection);
                    for _ in 0..per_connection {
                        let t = Instant::now();
                        one()?;
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

/// The floor both ways, measured one after the other.
#[derive(Debug, Clone)]
pub struct Floor {
    /// [`Commit::Pipelined`].
    pub pipelined: Figures,
    /// [`Commit::Stepwise`].
    pub stepwise: Figures,
}

impl Floor {
    /// Measures [`commit_floor`] both ways on `pool`.
    pub fn measure(
        pool: &PgPool,
        connections: usize,
        per_connection: usize,
    ) -> Result<Floor, PgError> {
        Ok(Floor {
            pipelined: commit_floor(pool, connections, per_connection, Commit::Pipelined)?,
            stepwise: commit_floor(pool, connections, per_connection, Commit::Stepwise)?,
        })
    }

    /// The cheaper of the two (the higher rate): what a benchmark holds its figures to.
    pub fn best(&self) -> &Figures {
        if self.stepwise.rate() > self.pipelined.rate() {
            &self.stepwise
        } else {
            &self.pipelined
        }
    }
}
