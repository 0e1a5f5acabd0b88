//! What the benchmarks of several crates share: the machine's floor for a durable append, the
//! reference every store's figures are read against; [`alternate`], which sets a keyed path
//! against its unkeyed twin round by round; the runtime they run on and their settings.

use criterion::Criterion;
use std::io::Write;
use std::time::{Duration, Instant};

/// The machine's floor for a durable append: write 200 bytes and fdatasync (group
/// `reference`, function `append_200b_fdatasync`).
pub fn reference_fsync(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("f")).unwrap();
    let buf = [b'x'; 200];
    let mut g = c.benchmark_group("reference");
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.bench_function("append_200b_fdatasync", |b| {
        b.iter(|| {
            f.write_all(&buf).unwrap();
            f.sync_data().unwrap();
        })
    });
    g.finish();
}

/// How [`alternate`] measures: `rounds` rounds, each calling every side `calls` times; each
/// call does `units` units of work (a commit, a step), which the figures are per.
#[derive(Debug, Clone)]
pub struct Rounds {
    /// What is measured, printed above the table.
    pub title: String,
    /// The unit of work, as the table names it (`commit`, `step`).
    pub unit: &'static str,
    /// Rounds (the medians are read over them).
    pub rounds: u64,
    /// Calls of each side per round.
    pub calls: u64,
    /// Units of work per call.
    pub units: u64,
}

/// A side's wall and CPU time per unit, medians over the rounds.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// Wall time per unit.
    pub wall: Duration,
    /// This process's CPU time (user + system) per unit.
    pub cpu: Duration,
}

/// What [`alternate`] measured: the floor, both sides and the median of the rounds' ratios.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// 200 bytes written and fdatasync'd, per call.
    pub floor: Duration,
    /// The unkeyed side.
    pub plain: Figures,
    /// The keyed side.
    pub keyed: Figures,
    /// Keyed over plain wall time, taken within each round, median.
    pub ratio: f64,
}

/// Runs `plain` and `keyed` (each called with the call's index) in alternation, `rounds`
/// times, after the fsync floor of each round, and prints a row per round and the medians.
///
/// A durable write's time on a shared machine swings with its fsync by more than a small
/// difference between two paths costs, and drifts across a run; so the two sides take turns
/// (which goes first alternates too), the ratio is taken within each round, where a noisy
/// neighbour hits both alike, and the median of those ratios is read. The CPU time this
/// process spent, which the disk does not blur, is reported beside the wall time; it is read
/// from `/proc` in ticks of 10 ms, so a side's calls per round should take well over a second
/// of CPU for a resolution of a few microseconds per unit.
pub fn alternate(how: &Rounds, mut plain: impl FnMut(u64), mut keyed: impl FnMut(u64)) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let mut floor_file = std::fs::File::create(dir.path().join("floor")).unwrap();
    let mut next = 0u64;
    let mut measure = |f: &mut dyn FnMut(u64)| {
        let (start, cpu_start) = (Instant::now(), cpu());
        for _ in 0..how.calls {
            f(next);
            next += 1;
        }
        let per = (how.calls * how.units) as f64;
        (
            start.elapsed().as_secs_f64() * 1e6 / per,
            (cpu() - cpu_start).as_secs_f64() * 1e6 / per,
        )
    };
    let unit = how.unit;
    println!(
        "{}: {} rounds of {} {unit}s each side, alternating",
        how.title,
        how.rounds,
        how.calls * how.units
    );
    println!(
        "round  floor us  unsigned us/{unit} (cpu)  signed us/{unit} (cpu)  signed/unsigned  cpu +us/{unit}"
    );
    let mut rows: Vec<[f64; 6]> = Vec::new();
    for round in 1..=how.rounds {
        let (floor, _) = measure(&mut |_| {
            floor_file.write_all(&[b'x'; 200]).unwrap();
            floor_file.sync_data().unwrap();
        });
        let floor = floor * how.units as f64;
        let ((pw, pc), (kw, kc)) = if round % 2 == 1 {
            let p = measure(&mut plain);
            (p, measure(&mut keyed))
        } else {
            let k = measure(&mut keyed);
            (measure(&mut plain), k)
        };
        let ratio = kw / pw;
        println!(
            "{round:>5}  {floor:>8.0}  {pw:>10.1} ({pc:>6.1})  {kw:>10.1} ({kc:>6.1})  {ratio:>14.2}x  {:>+11.1}",
            kc - pc
        );
        rows.push([floor, pw, pc, kw, kc, ratio]);
    }
    let median = |i: usize| {
        let mut xs: Vec<f64> = rows.iter().map(|r| r[i]).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let us = |x: f64| Duration::from_secs_f64(x / 1e6);
    let out = Outcome {
        floor: us(median(0)),
        plain: Figures {
            wall: us(median(1)),
            cpu: us(median(2)),
        },
        keyed: Figures {
            wall: us(median(3)),
            cpu: us(median(4)),
        },
        ratio: median(5),
    };
    let rate = |d: Duration| 1.0 / d.as_secs_f64();
    println!(
        "median: floor {:.0} us per call; unsigned {:.1} us/{unit} ({:.0}/s, cpu {:.1} us); \
         signed {:.1} us/{unit} ({:.0}/s, cpu {:.1} us); signed/unsigned {:.2}x (median of the \
         rounds' ratios)",
        median(0),
        median(1),
        rate(out.plain.wall),
        median(2),
        median(3),
        rate(out.keyed.wall),
        median(4),
        out.ratio,
    );
    out
}

/// This process's CPU time (user + system) so far.
fn cpu() -> Duration {
    crate::process::cpu_time(std::process::id()).expect("/proc/self/stat")
}

/// The runtime the benchmarks drive their work on: multi-threaded, with a worker for each of
/// the two cores of the machines the figures are measured on, I/O and timers enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The environment variable `name` as a number, else `default` (unset or not a number).
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
