//! What a signing key costs a durable commit of one receipt, on SQLite (`synchronous=FULL`),
//! beside the same commit unsigned and the machine's floor (200 bytes written and
//! fdatasync'd), all measured in the same run.
//!
//! A commit here is dominated by its fsync, whose time on a shared machine swings by more than
//! the signature costs; so the three measurements alternate, round after round, each on a file
//! of its own kept across rounds, and the ratio is taken within each round (a noisy neighbour
//! hits both sides of it alike) before the median is read. Beside the wall time each round
//! reports the CPU time this process spent per commit, which the disk does not blur: the
//! signature's own cost shows there.
//!
//! ```text
//! cargo bench -p receipt --bench signing
//! ```
//!
//! `SIGNING_BENCH_ROUNDS` (7) sets the rounds, `SIGNING_BENCH_COMMITS` (2,000) the commits each
//! measurement makes per round.

use receipt::signing::SigningKey;
use receipt::store::SqliteOptions;
use receipt::{Command, Runtime, SqliteStore};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This process's CPU time (user + system) so far, in ticks of 10 ms: a measurement of
/// 2,000 commits reads it to 5 us per commit.
fn cpu() -> Duration {
    test_support::process::cpu_time(std::process::id()).expect("/proc/self/stat")
}

/// A durable SQLite receipt store at `path`, signing with `key` when given.
fn runtime(path: &Path, key: Option<Arc<SigningKey>>) -> Runtime {
    let options = SqliteOptions {
        signing_key: key,
        ..Default::default()
    };
    Runtime::new(Arc::new(SqliteStore::open_with(path, options).unwrap()))
}

/// One measurement's figures for one round: wall and CPU time per commit.
#[derive(Clone, Copy)]
struct Figure {
    wall: Duration,
    cpu: Duration,
}

/// Runs `f` `n` times and returns the time per call.
fn measure(n: u64, mut f: impl FnMut(u64)) -> Figure {
    let (start, cpu_start) = (Instant::now(), cpu());
    for i in 0..n {
        f(i);
    }
    let per = |d: Duration| d / n as u32;
    Figure {
        wall: per(start.elapsed()),
        cpu: per(cpu() - cpu_start),
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument would select nothing here.
    let rounds = env_or("SIGNING_BENCH_ROUNDS", 7).max(1);
    let commits = env_or("SIGNING_BENCH_COMMITS", 2_000).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let unsigned = runtime(&dir.path().join("unsigned.db"), None);
    let key = Arc::new(SigningKey::generate().unwrap());
    let signed = runtime(&dir.path().join("signed.db"), Some(key));
    let mut floor_file = std::fs::File::create(dir.path().join("floor")).unwrap();
    let body = |i: u64| json!({"type": "step.done", "i": i, "note": "the quick brown fox"});
    let mut next = 0u64;
    let mut commit = |runtime: &Runtime| {
        next += 1;
        rt.block_on(runtime.execute("bench/one", Command::new(vec![body(next)])))
            .unwrap();
    };
    // One warm-up commit each: the files' schemas, the first pages.
    commit(&unsigned);
    commit(&signed);

    println!(
        "signing: {rounds} rounds of {commits} durable commits of one receipt each, alternating"
    );
    println!(
        "round  floor us  unsigned us (cpu)  signed us (cpu)  signed/unsigned wall  cpu +us/commit"
    );
    let (mut floors, mut plain, mut keyed, mut ratios, mut cpu_extra) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut plain_cpu, mut keyed_cpu) = (vec![], vec![]);
    for round in 1..=rounds {
        let floor = measure(commits, |_| {
            floor_file.write_all(&[b'x'; 200]).unwrap();
            floor_file.sync_data().unwrap();
        });
        // Alternate which side goes first, so neither always follows the floor's fsyncs.
        let (u, s) = if round % 2 == 1 {
            let u = measure(commits, |_| commit(&unsigned));
            (u, measure(commits, |_| commit(&signed)))
        } else {
            let s = measure(commits, |_| commit(&signed));
            (measure(commits, |_| commit(&unsigned)), s)
        };
        let ratio = us(s.wall) / us(u.wall);
        let extra = us(s.cpu) - us(u.cpu);
        println!(
            "{round:>5}  {:>8.0}  {:>6.0} ({:>5.0})    {:>6.0} ({:>5.0})  {ratio:>20.2}x  {extra:>14.1}",
            us(floor.wall),
            us(u.wall),
            us(u.cpu),
            us(s.wall),
            us(s.cpu),
        );
        floors.push(us(floor.wall));
        plain.push(us(u.wall));
        keyed.push(us(s.wall));
        plain_cpu.push(us(u.cpu));
        keyed_cpu.push(us(s.cpu));
        ratios.push(ratio);
        cpu_extra.push(extra);
    }
    let (unsigned_us, signed_us) = (median(plain), median(keyed));
    println!(
        "median floor {:.0} us; unsigned {unsigned_us:.0} us/commit ({:.0}/s, cpu {:.0} us); \
         signed {signed_us:.0} us/commit ({:.0}/s, cpu {:.0} us); signed/unsigned {:.2}x \
         (median of the rounds' ratios); the signature's cpu {:+.1} us per commit",
        median(floors),
        1e6 / unsigned_us,
        median(plain_cpu),
        1e6 / signed_us,
        median(keyed_cpu),
        median(ratios),
        median(cpu_extra),
    );
}
