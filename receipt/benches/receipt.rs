//! Receipt-core benchmarks, with the machine's own reference figures measured in the same run:
//! raw SHA-256 over the very bytes `verify` hashes, and a 200-byte append + fdatasync.
//!
//! ```text
//! cargo bench -p receipt --bench receipt
//! ```
//!
//! Set `RECEIPT_BENCH_FOLD_N` to change the size of the long stream in the fold benchmark
//! (default 1,000,000).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use receipt::sim::{FixedClock, SeededEntropy};
use receipt::{
    AppendRequest, Command, Hints, MemoryStore, Receipt, ReceiptStore, Reducer, Runtime,
    SqliteStore, verify,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn body(i: u64) -> Value {
    // About 200 bytes of canonical envelope per receipt.
    json!({"type": "step.done", "i": i, "note": "the quick brown fox"})
}

fn chain(stream: &str, n: u64) -> Vec<Receipt> {
    let clock = FixedClock::new(1_767_225_600_000, 1);
    let entropy = SeededEntropy::new(1);
    let mut out: Vec<Receipt> = Vec::with_capacity(n as usize);
    for i in 0..n {
        let prev = out.last().map(|r| r.hash().to_owned());
        out.push(
            Receipt::build(stream, prev, body(i), None, Hints::new(), &clock, &entropy).unwrap(),
        );
    }
    out
}

/// Raw SHA-256 over the canonical bytes vs `verify` over the same receipts as read from SQLite.
fn bench_verify(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let rt = test_support::bench::runtime();
    let store = SqliteStore::open(dir.path().join("v.db")).unwrap();
    let built = chain("bench/s", 10_000);
    rt.block_on(store.append(AppendRequest {
        stream: "bench/s".into(),
        receipts: built,
        expected_tail: None,
    }))
    .unwrap();
    let stored = rt.block_on(store.read("bench/s")).unwrap();
    let bytes: Vec<Vec<u8>> = stored
        .iter()
        .map(|r| r.canonical_bytes().unwrap().into_owned())
        .collect();
    let total: u64 = bytes.iter().map(|b| b.len() as u64).sum();
    eprintln!(
        "verify input: {} receipts, {} bytes, {:.0} bytes each",
        stored.len(),
        total,
        total as f64 / stored.len() as f64
    );
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Bytes(total));
    g.bench_function("reference_raw_sha256_10k", |b| {
        b.iter(|| {
            for x in &bytes {
                black_box(Sha256::digest(x));
            }
        })
    });
    g.bench_function("verify_stored_10k", |b| {
        b.iter(|| black_box(verify(&stored).unwrap()))
    });
    g.finish();
}

/// Building (id, canonical envelope) and hashing one receipt in memory.
fn bench_build(c: &mut Criterion) {
    let clock = FixedClock::new(1_767_225_600_000, 1);
    let entropy = SeededEntropy::new(1);
    let prev = Some("ab".repeat(32));
    let b0 = body(7);
    c.bench_function("build_and_hash_one_receipt", |b| {
        b.iter(|| {
            black_box(
                Receipt::build(
                    "bench/s",
                    prev.clone(),
                    b0.clone(),
                    None,
                    Hints::new(),
                    &clock,
                    &entropy,
                )
                .unwrap(),
            )
        })
    });
}

/// A durable SQLite store at `path`, signing every append with a fresh key when `signed`.
fn sqlite_store(path: std::path::PathBuf, signed: bool) -> Arc<SqliteStore> {
    let options = receipt::store::SqliteOptions {
        signing_key: signed.then(|| Arc::new(receipt::signing::SigningKey::generate().unwrap())),
        ..Default::default()
    };
    Arc::new(SqliteStore::open_with(path, options).unwrap())
}

/// Durable appends to SQLite (`synchronous=FULL`): one receipt per command, many events per
/// command, and commits grouped across 64 concurrent streams; each unsigned and with a signing
/// key (the heads of each group commit signed together, in its transaction), measured in the
/// same run.
fn bench_sqlite_appends(c: &mut Criterion) {
    let rt = test_support::bench::runtime();
    let mut g = c.benchmark_group("sqlite_append");
    g.sample_size(10).measurement_time(Duration::from_secs(5));

    // Each kind of append unsigned, then signed, next to each other: the disk's state drifts
    // across a run (`benches/signing.rs` alternates the one-per-commit pair round by round).
    const SIDES: [(bool, &str); 2] = [(false, ""), (true, "_signed")];
    for (signed, tag) in SIDES {
        g.throughput(Throughput::Elements(1));
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(sqlite_store(dir.path().join("single.db"), signed));
        let mut i = 0u64;
        g.bench_function(format!("single_writer_one_per_commit{tag}"), |b| {
            b.iter(|| {
                i += 1;
                rt.block_on(runtime.execute("bench/single", Command::new(vec![body(i)])))
                    .unwrap()
            })
        });
    }

    for batch in [100u64, 1_000] {
        for (signed, tag) in SIDES {
            g.throughput(Throughput::Elements(batch));
            let dir = tempfile::tempdir().unwrap();
            let runtime = Runtime::new(sqlite_store(dir.path().join("batch.db"), signed));
            g.bench_with_input(
                BenchmarkId::new(format!("events_per_command{tag}"), batch),
                &batch,
                |b, &batch| {
                    b.iter(|| {
                        let events = (0..batch).map(body).collect();
                        rt.block_on(runtime.execute("bench/batch", Command::new(events)))
                            .unwrap()
                    })
                },
            );
        }
    }

    // 64 streams, each command one receipt, issued concurrently: the writer thread groups
    // them.
    let streams = 64u64;
    let per_stream = 16u64;
    for (signed, tag) in SIDES {
        g.throughput(Throughput::Elements(streams * per_stream));
        let dir = tempfile::tempdir().unwrap();
        let runtime = Arc::new(Runtime::new(sqlite_store(
            dir.path().join("group.db"),
            signed,
        )));
        g.bench_function(format!("grouped_64_streams_one_per_command{tag}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let tasks: Vec<_> = (0..streams)
                        .map(|s| {
                            let runtime = Arc::clone(&runtime);
                            tokio::spawn(async move {
                                for k in 0..per_stream {
                                    runtime
                                        .execute(
                                            &format!("bench/g{s}"),
                                            Command::new(vec![body(k)]),
                                        )
                                        .await
                                        .unwrap();
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                })
            })
        });
    }
    g.finish();
}

struct Sum;
impl Reducer for Sum {
    type State = (u64, u64);
    fn initial(&self) -> (u64, u64) {
        (0, 0)
    }
    fn apply(&self, s: &mut (u64, u64), r: &Receipt) {
        s.0 += 1;
        s.1 += r.body()["i"].as_u64().unwrap_or(0);
    }
}

/// Appending one receipt to a long stream and folding again vs folding a one-receipt stream vs
/// a full fold of the long stream.
fn bench_incremental_fold(c: &mut Criterion) {
    let n: u64 = std::env::var("RECEIPT_BENCH_FOLD_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rt = test_support::bench::runtime();
    let mut g = c.benchmark_group("fold");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for backend in ["memory", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ReceiptStore> = if backend == "memory" {
            Arc::new(MemoryStore::new())
        } else {
            Arc::new(SqliteStore::open(dir.path().join("fold.db")).unwrap())
        };
        let started = Instant::now();
        let long = chain("bench/long", n);
        for part in long.chunks(50_000) {
            let tail = rt
                .block_on(store.tail("bench/long"))
                .unwrap()
                .map(|t| t.hash);
            rt.block_on(store.append(AppendRequest {
                stream: "bench/long".into(),
                receipts: part.to_vec(),
                expected_tail: tail,
            }))
            .unwrap();
        }
        drop(long);
        rt.block_on(store.append(AppendRequest {
            stream: "bench/one".into(),
            receipts: chain("bench/one", 1),
            expected_tail: None,
        }))
        .unwrap();
        eprintln!(
            "fold setup ({backend}, {n} receipts): {:?}",
            started.elapsed()
        );

        let runtime = Runtime::new(Arc::clone(&store));
        rt.block_on(runtime.fold("bench/long", &Sum)).unwrap();
        let mut i = n;
        g.bench_function(
            BenchmarkId::new("append_one_then_fold_long", backend),
            |b| {
                b.iter(|| {
                    i += 1;
                    rt.block_on(async {
                        runtime
                            .execute("bench/long", Command::new(vec![body(i)]))
                            .await
                            .unwrap();
                        runtime.fold("bench/long", &Sum).await.unwrap()
                    })
                })
            },
        );
        rt.block_on(runtime.fold("bench/short", &Sum)).unwrap();
        g.bench_function(
            BenchmarkId::new("append_one_then_fold_short", backend),
            |b| {
                b.iter(|| {
                    i += 1;
                    rt.block_on(async {
                        runtime
                            .execute("bench/short", Command::new(vec![body(i)]))
                            .await
                            .unwrap();
                        runtime.fold("bench/short", &Sum).await.unwrap()
                    })
                })
            },
        );
        g.bench_function(
            BenchmarkId::new("fold_one_receipt_stream_fresh_runtime", backend),
            |b| {
                b.iter(|| {
                    rt.block_on(Runtime::new(Arc::clone(&store)).fold("bench/one", &Sum))
                        .unwrap()
                })
            },
        );
        g.bench_function(
            BenchmarkId::new("full_fold_long_fresh_runtime", backend),
            |b| {
                b.iter(|| {
                    rt.block_on(Runtime::new(Arc::clone(&store)).fold("bench/long", &Sum))
                        .unwrap()
                })
            },
        );
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_verify,
    bench_build,
    test_support::bench::reference_fsync,
    bench_sqlite_appends,
    bench_incremental_fold
);
criterion_main!(benches);
