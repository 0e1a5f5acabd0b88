//! What the benchmarks of several crates share: the machine's floor for a durable append, the
//! reference every store's figures are read against.

use criterion::Criterion;
use std::io::Write;
use std::time::Duration;

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
