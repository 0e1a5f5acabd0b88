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
//!    many raw single-receipt appends through the same runtime and file, interleaved in ten
//!    rounds so both see the same disk and load.
//! 2. **Time to select the next action** on a run stream of 1,000 and of 100,000 receipts: one
//!    receipt is appended, then [`Controller::plan`] folds it and selects. It should not depend
//!    on the stream's length. The first (cold) fold of each stream is printed for contrast.
//!
//! `RECEIPT_AGENT_BENCH_PASSES` sets `N` (default 200); `RECEIPT_AGENT_BENCH_LONG` the long
//! stream's length (default 100,000).

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

/// Controller passes and raw appends, interleaved in rounds on one SQLite file so that both
/// see the same disk and load.
async fn overhead(path: &std::path::Path, passes: usize, durable: bool) {
    let options = SqliteOptions {
        synchronous_full: durable,
        ..SqliteOptions::default()
    };
    let runtime = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open_with(path, options).unwrap(),
    )));
    let rounds = 10;
    let per_round = passes.div_ceil(rounds);
    let spec = stepper(per_round);
    let (mut controller_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    let (mut receipts, mut done) = (0, 0);
    for round in 0..rounds {
        let controller = Controller::new(Arc::clone(&runtime), Arc::clone(&spec));
        let run_id = format!("run_{round}");
        let stream = format!("agents/bench/runs/{run_id}");
        let t = Instant::now();
        let outcome = controller.run(&run_id, &stream).await.unwrap();
        controller_time += t.elapsed();
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
        raw_time += t.elapsed();
        receipts += appended;
        done += per_round;
    }
    println!(
        "action pass on SQLite ({}): {:.0} us/pass over {done} passes ({receipts} receipts); \
         {receipts} raw appends: {:.0} us/append, {:.0} us per 4 appends; controller/raw = {:.2}x",
        if durable {
            "synchronous=FULL"
        } else {
            "synchronous=NORMAL"
        },
        per(controller_time, done),
        per(raw_time, receipts),
        per(raw_time, receipts) * 4.0,
        controller_time.as_secs_f64() / raw_time.as_secs_f64(),
    );
}

async fn selection(dir: &std::path::Path, len: usize, rounds: usize) -> (f64, Duration) {
    let runtime = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open(dir.join(format!("select-{len}.db"))).unwrap(),
    )));
    let stream = format!("agents/bench/runs/select_{len}");
    let batch = 1000;
    let mut written = 0;
    while written < len {
        let n = batch.min(len - written);
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
    let t = Instant::now();
    let plan = controller.plan("select", &stream).await.unwrap();
    let cold = t.elapsed();
    assert!(matches!(plan, Plan::Select { .. }));
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        runtime
            .execute(
                &stream,
                Command::new(vec![
                    json!({"type": "task.requested", "prompt": i.to_string()}),
                ]),
            )
            .await
            .unwrap();
        let t = Instant::now();
        let plan = controller.plan("select", &stream).await.unwrap();
        times.push(t.elapsed());
        assert!(matches!(plan, Plan::Select { .. }));
    }
    times.sort();
    (per(times[rounds / 2], 1), cold)
}

fn main() {
    let passes = env_usize("RECEIPT_AGENT_BENCH_PASSES", 200);
    let long = env_usize("RECEIPT_AGENT_BENCH_LONG", 100_000);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        overhead(&dir.path().join("durable.db"), passes, true).await;
        overhead(&dir.path().join("normal.db"), passes, false).await;
        let (short_us, short_cold) = selection(dir.path(), 1_000, 200).await;
        let (long_us, long_cold) = selection(dir.path(), long, 200).await;
        println!(
            "select next action after one new receipt: {short_us:.0} us at 1,000 receipts, \
             {long_us:.0} us at {long} receipts (median of 200; {:.2}x); first fold: {:.1} ms vs {:.1} ms",
            long_us / short_us,
            short_cold.as_secs_f64() * 1e3,
            long_cold.as_secs_f64() * 1e3,
        );
    });
}
