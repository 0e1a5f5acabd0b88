//! Agent-controller benchmarks, printed as figures (no criterion: the runs are long and the
//! comparison against raw appends is the point).
//!
//! ```text
//! cargo bench -p receipt --bench agent
//! ```
//!
//! 1. **Overhead per action pass** on SQLite with durable commits (`synchronous=FULL`, and again
//!    with `NORMAL` to show the cost without the sync): runs of inline passes (claim with
//!    `inlineSelection`, manifest, output, `action.completed`: four appends each) against as
//!    many raw single-receipt appends through the same runtime and file, interleaved in rounds
//!    of five passes so both see the same disk and load.
//! 2. **Time to select the next action** on a run stream of 1,000 and of 100,000 receipts: one
//!    receipt is appended, then [`Controller::plan`] folds it and selects. It should not depend
//!    on the stream's length. The first (cold) fold of each stream is printed for contrast.
//!
//! `RECEIPT_AGENT_BENCH_PASSES` sets the number of passes (default 200);
//! `RECEIPT_AGENT_BENCH_LONG` the long stream's length (default 100,000).
//!
//! Measured on the shared development VM (load average about 5, fsync 0.3 to 10 ms):
//! synchronous=FULL 1.02x to 1.16x of raw appends (median of rounds), NORMAL 1.8x to 2.3x (the
//! controller's extra reads: a tail per pass and the runtime's event-id check per append);
//! selecting after one new receipt about 200 us at both 1,000 and 100,000 receipts.

use receipt::agent::{
    Action, AgentSpec, AgentTypes, AgentView, Controller, Plan, ReceiptSet, RunOutcome,
};
use receipt::store::SqliteOptions;
use receipt::{Command, Receipt, Runtime, SqliteStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Steps {
    #[serde(rename = "step.done")]
    Done { i: usize, note: String },
    #[serde(rename = "task.requested")]
    Requested { prompt: String },
}

impl ReceiptSet for Steps {
    const TYPES: &'static [&'static str] = &["step.done", "task.requested"];
    fn type_name(&self) -> &'static str {
        match self {
            Steps::Done { .. } => "step.done",
            Steps::Requested { .. } => "task.requested",
        }
    }
}

#[derive(Clone, Default)]
struct Count {
    done: usize,
    requested: usize,
}

impl AgentView for Count {
    fn apply(&mut self, r: &Receipt) {
        match r.event_type() {
            "step.done" => self.done += 1,
            "task.requested" => self.requested += 1,
            _ => {}
        }
    }
}

struct Bench;

impl AgentTypes for Bench {
    type Receipts = Steps;
    type View = Count;
}

fn stepper(n: usize) -> Arc<AgentSpec<Bench>> {
    let spec = AgentSpec::builder("bench-agent", "1.0.0", Bench)
        .action(
            Action::<Bench>::action("step")
                .when(move |v: &Count| v.done < n)
                .run(|_agent, ctx| async move {
                    let i = ctx.view().done;
                    ctx.emit(Steps::Done {
                        i,
                        note: "the quick brown fox".into(),
                    })
                    .await
                }),
        )
        .max_iterations(u32::try_from(n.saturating_add(10)).unwrap_or(u32::MAX))
        .goal(move |v| v.done >= n)
        .build()
        .unwrap();
    Arc::new(spec)
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn per(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n as f64
}

/// Controller passes and raw appends, interleaved in short rounds on one SQLite file so that
/// both see the same disk and load (this machine's fsync latency drifts by 10x under other
/// work); the ratio reported is the median of the rounds' ratios.
async fn overhead(path: &std::path::Path, passes: usize, durable: bool) {
    let options = SqliteOptions {
        synchronous_full: durable,
        ..SqliteOptions::default()
    };
    let runtime = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open_with(path, options).unwrap(),
    )));
    let per_round = 5;
    let rounds = passes.div_ceil(per_round);
    let spec = stepper(per_round);
    let (mut controller_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    let mut ratios = Vec::with_capacity(rounds);
    let mut receipts = 0;
    for round in 0..rounds {
        let controller = Controller::new(Arc::clone(&runtime), Arc::clone(&spec));
        let run_id = format!("run_{round}");
        let stream = format!("agents/bench/runs/{run_id}");
        let t = Instant::now();
        let outcome = controller.run(&run_id, &stream).await.unwrap();
        let c = t.elapsed();
        assert_eq!(outcome, RunOutcome::Completed);
        let appended = runtime.read(&stream).await.unwrap().len();
        assert_eq!(appended, 4 * per_round + 2);
        let t = Instant::now();
        for i in 0..appended {
            runtime
                .execute(
                    &format!("raw/{round}"),
                    Command::new(vec![
                        json!({"type": "step.done", "i": i, "note": "the quick brown fox"}),
                    ]),
                )
                .await
                .unwrap();
        }
        let r = t.elapsed();
        controller_time += c;
        raw_time += r;
        ratios.push(c.as_secs_f64() / r.as_secs_f64());
        receipts += appended;
    }
    ratios.sort_by(f64::total_cmp);
    let done = rounds * per_round;
    println!(
        "action pass on SQLite ({}): {:.0} us/pass over {done} passes ({receipts} receipts, \
         run.started/run.completed included); raw appends: {:.0} us/append, {:.0} us per 4; \
         controller/raw = {:.2}x (median of {rounds} rounds; {:.2}x overall)",
        if durable {
            "synchronous=FULL"
        } else {
            "synchronous=NORMAL"
        },
        per(controller_time, done),
        per(raw_time, receipts),
        per(raw_time, receipts) * 4.0,
        ratios[rounds / 2],
        controller_time.as_secs_f64() / raw_time.as_secs_f64(),
    );
}

/// A run stream of `len` domain receipts, and a controller that has not read it yet.
async fn long_run(dir: &std::path::Path, len: usize) -> (Arc<Runtime>, String, Controller<Bench>) {
    let runtime = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open(dir.join(format!("select-{len}.db"))).unwrap(),
    )));
    let stream = format!("agents/bench/runs/select_{len}");
    let mut written = 0;
    while written < len {
        let n = 1000.min(len - written);
        let events = (written..written + n)
            .map(|i| json!({"type": "step.done", "i": i, "note": "the quick brown fox"}))
            .collect();
        runtime
            .execute(&stream, Command::new(events))
            .await
            .unwrap();
        written += n;
    }
    // Never satisfied: `step` stays runnable, so every plan is a fresh selection.
    let controller = Controller::new(Arc::clone(&runtime), stepper(usize::MAX));
    (runtime, stream, controller)
}

/// Appends one receipt, then times the controller folding it and selecting.
async fn select_once(runtime: &Runtime, stream: &str, controller: &Controller<Bench>) -> Duration {
    runtime
        .execute(
            stream,
            Command::new(vec![json!({"type": "task.requested", "prompt": "p"})]),
        )
        .await
        .unwrap();
    let t = Instant::now();
    let plan = controller.plan("select", stream).await.unwrap();
    let elapsed = t.elapsed();
    assert!(matches!(plan, Plan::Select { .. }));
    elapsed
}

/// Selection on a short and a long stream, measured alternately (medians) so that load
/// affects both alike.
async fn selection(dir: &std::path::Path, long: usize, rounds: usize) {
    let mut runs = Vec::new();
    for len in [1_000, long] {
        let (runtime, stream, controller) = long_run(dir, len).await;
        let t = Instant::now();
        controller.plan("select", &stream).await.unwrap();
        runs.push((
            runtime,
            stream,
            controller,
            t.elapsed(),
            Vec::with_capacity(rounds),
        ));
    }
    for round in 0..rounds {
        for k in 0..runs.len() {
            let k = if round % 2 == 0 {
                k
            } else {
                runs.len() - 1 - k
            };
            let (runtime, stream, controller, _, times) = &mut runs[k];
            let d = select_once(runtime, stream, controller).await;
            times.push(d);
        }
    }
    let medians: Vec<f64> = runs
        .iter_mut()
        .map(|(.., times)| {
            times.sort();
            per(times[times.len() / 2], 1)
        })
        .collect();
    println!(
        "select next action after one new receipt: {:.0} us at 1,000 receipts, {:.0} us at {long} \
         receipts (medians of {rounds}, measured alternately; {:.2}x); first fold: {:.1} ms vs {:.1} ms",
        medians[0],
        medians[1],
        medians[1] / medians[0],
        runs[0].3.as_secs_f64() * 1e3,
        runs[1].3.as_secs_f64() * 1e3,
    );
}

fn main() {
    let passes = env_usize("RECEIPT_AGENT_BENCH_PASSES", 200);
    let long = env_usize("RECEIPT_AGENT_BENCH_LONG", 100_000);
    let dir = tempfile::tempdir().unwrap();
    let rt = test_support::bench::runtime();
    rt.block_on(async {
        overhead(&dir.path().join("durable.db"), passes, true).await;
        overhead(&dir.path().join("normal.db"), passes, false).await;
        selection(dir.path(), long, 400).await;
    });
}
