//! A fixed amount of kernel work for instruction counts: `REBUNO_BENCH_STEPS` (default 400)
//! proceed steps (submit, then complete; both durable) on one execution of an embedded SQLite
//! kernel, the same steps as `kernel.rs`'s `kernel_proceed`. Wall-clock figures on a shared
//! machine swing by a factor of two; instructions counted by `valgrind --tool=callgrind` do
//! not, so two builds (or two logging settings) compare exactly. Run it at two sizes and take
//! the difference per step, which leaves out start-up and migrations:
//!
//! ```text
//! cargo bench -p rebuno --bench proceed_count --no-run   # prints the binary's path
//! REBUNO_BENCH_STEPS=100 valgrind --tool=callgrind <binary>
//! REBUNO_BENCH_STEPS=400 valgrind --tool=callgrind <binary>
//! REBUNO_BENCH_LOG=info REBUNO_BENCH_STEPS=400 valgrind --tool=callgrind <binary>
//! ```

mod support;

use std::time::Instant;

fn main() {
    let steps: u64 = std::env::var("REBUNO_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let _telemetry = support::telemetry();
    let rt = test_support::bench::runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let k = support::kernel::kernel("sqlite", dir.path()).await;
        let (exec, lease) = support::kernel::execution(&k).await;
        let started = Instant::now();
        support::kernel::proceed_steps(&k, &exec, &lease, 0, steps).await;
        let per_step = started.elapsed().as_secs_f64() * 1e6 / steps as f64;
        println!("{steps} proceed steps, {per_step:.0} us each (wall clock)");
    });
}
