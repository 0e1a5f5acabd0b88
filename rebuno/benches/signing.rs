//! What `REBUNO_SIGNING_KEY` costs the kernel's proceed path (submit, then complete: one sync
//! per step) on SQLite, beside the same path unsigned and the machine's floor (200 bytes
//! written and fdatasync'd), in alternating rounds (`test_support::bench::alternate`: the
//! ratio is taken within each round, and each side's CPU time per step is reported beside its
//! wall time). Two kernels, each on a file of its own, one with a signing key: for one
//! execution, then for 64 executions at once (whose steps share group commits, and each
//! commit one signature over the heads it extended).
//!
//! ```text
//! cargo bench -p rebuno --bench signing
//! ```
//!
//! `SIGNING_BENCH_ROUNDS` (7) sets the rounds, `SIGNING_BENCH_STEPS` (1,000) the steps each
//! side runs per round for one execution (the 64 executions run at least as many).

mod support;

use rebuno::store::SqliteStore;
use rebuno::store::chain::SigningKey;
use rebuno::{Kernel, KernelConfig, Lease};
use std::sync::Arc;
use support::kernel::{execution, proceed_steps, register};
use test_support::bench::{Rounds, alternate, env_u64};

/// A kernel on a SQLite file at `path` with the agent `bench`, signing with `key` when given
/// (and never from the environment).
async fn kernel(path: &std::path::Path, key: Option<SigningKey>) -> Kernel {
    let store = SqliteStore::open_url(&format!("sqlite://{}", path.display())).unwrap();
    let config = KernelConfig {
        signing_key: None,
        ..KernelConfig::from_env()
    };
    let mut builder = Kernel::builder(Arc::new(store)).config(config);
    if let Some(key) = key {
        builder = builder.signing_key(key).unwrap();
    }
    let k = builder.build().await.unwrap();
    register(&k).await;
    k
}

const EXECS: usize = 64;
const PER_EXEC: u64 = 4;

/// One step on each of `runs`, at once: steps `from..from + PER_EXEC` of every execution.
async fn all_at_once(k: &Kernel, runs: &Arc<Vec<(String, Lease)>>, from: u64) {
    let tasks: Vec<_> = (0..runs.len())
        .map(|i| {
            let (k, runs) = (k.clone(), Arc::clone(runs));
            tokio::spawn(async move {
                let (exec, lease) = &runs[i];
                proceed_steps(&k, exec, lease, from, PER_EXEC).await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

fn main() {
    let rt = test_support::bench::runtime();
    let dir = tempfile::tempdir().unwrap();
    let unsigned = rt.block_on(kernel(&dir.path().join("unsigned.db"), None));
    let key = SigningKey::generate().unwrap();
    let signed = rt.block_on(kernel(&dir.path().join("signed.db"), Some(key)));
    let rounds = env_u64("SIGNING_BENCH_ROUNDS", 7).max(1);
    let steps = env_u64("SIGNING_BENCH_STEPS", 1_000).max(1);

    let one = |k: &Kernel| rt.block_on(execution(k));
    let (plain_one, keyed_one) = (one(&unsigned), one(&signed));
    alternate(
        &Rounds {
            title: "kernel proceed path (submit + complete), one execution, SQLite".into(),
            unit: "step",
            rounds,
            calls: steps,
            units: 1,
        },
        |i| rt.block_on(proceed_steps(&unsigned, &plain_one.0, &plain_one.1, i, 1)),
        |i| rt.block_on(proceed_steps(&signed, &keyed_one.0, &keyed_one.1, i, 1)),
    );

    let many = |k: &Kernel| {
        Arc::new(rt.block_on(async {
            let mut v = Vec::with_capacity(EXECS);
            for _ in 0..EXECS {
                v.push(execution(k).await);
            }
            v
        }))
    };
    let (plain_many, keyed_many) = (many(&unsigned), many(&signed));
    let per_call = EXECS as u64 * PER_EXEC;
    alternate(
        &Rounds {
            title: format!("kernel proceed path, {EXECS} executions at once, SQLite"),
            unit: "step",
            rounds,
            calls: steps.div_ceil(per_call).max(1),
            units: per_call,
        },
        |i| rt.block_on(all_at_once(&unsigned, &plain_many, i * PER_EXEC)),
        |i| rt.block_on(all_at_once(&signed, &keyed_many, i * PER_EXEC)),
    );
}
