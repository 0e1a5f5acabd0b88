//! The machine's PostgreSQL floor, for the benchmarks of both PostgreSQL stores: the rate of
//! single-row `INSERT` + `COMMIT` transactions through the same driver and pool the stores use,
//! on one connection and on many at once. Every PostgreSQL figure in the README's performance
//! table stands beside this floor, measured in the same run.

use crate::pg::{PgError, PgPool};
use std::time::{Duration, Instant};

/// What [`commit_floor`] measured.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    /// Connections committing at once.
    pub connections: usize,
    /// Transactions committed in all.
    pub commits: usize,
    /// Wall time of the whole measurement.
    pub elapsed: Duration,
}

impl Floor {
    /// Commits per second, all connections together.
    pub fn per_second(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }

    /// Mean time one connection spends on one commit.
    pub fn latency(&self) -> Duration {
        self.elapsed
            .mul_f64(self.connections as f64 / self.commits as f64)
    }
}

/// Runs `per_connection` single-row `INSERT` + `COMMIT` transactions on each of `connections`
/// threads at once, through `pool` (which should allow that many connections), into a table
/// `bench_floor` it creates in the pool's schema. Blocking.
pub fn commit_floor(
    pool: &PgPool,
    connections: usize,
    per_connection: usize,
) -> Result<Floor, PgError> {
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
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..connections)
            .map(|_| {
                s.spawn(|| -> Result<(), PgError> {
                    for _ in 0..per_connection {
                        pool.transaction(|tx| {
                            tx.execute("INSERT INTO bench_floor (body) VALUES ($1)", &[&body])
                                .map_err(PgError::Db)
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a floor thread panicked"))
    })?;
    Ok(Floor {
        connections,
        commits: connections * per_connection,
        elapsed: started.elapsed(),
    })
}
