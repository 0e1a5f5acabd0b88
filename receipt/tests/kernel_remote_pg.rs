//! Remote actions through a rebuno kernel on PostgreSQL, with the receipts on PostgreSQL too
//! (one fresh schema holds both): a run commits once, and a controller dropped while it waits
//! is taken over by another that finds the same kernel execution. Ignored unless
//! `REBUNO_TEST_PG_URL` names a server (`bash .ci/postgres` starts one).

mod agent_support;
mod cli_support;
mod kernel_support;

use cli_support::{PgSchema, pg_url};
use kernel_support::*;
use receipt::kernel::KernelWorker;
use receipt::{PgStore, Runtime};
use std::sync::Arc;
use std::time::Duration;

/// A kernel and a receipt store in schema `schema`, the worker for [`GROUP`] registered and delivering.
async fn on_postgres(schema: &str, dir: &std::path::Path) -> (rebuno::Runtime, Arc<Runtime>) {
    let mut kernel_options = durable_support::pg::PgOptions::new(pg_url());
    kernel_options.schema = Some(schema.to_owned());
    let store = rebuno::store::PgStore::connect(kernel_options)
        .await
        .unwrap();
    let kernel = rebuno::Kernel::builder(Arc::new(store))
        .build()
        .await
        .unwrap();
    let mut receipt_options = PgStore::options(pg_url()).unwrap();
    receipt_options.schema = Some(schema.to_owned());
    let receipts = Arc::new(Runtime::new(Arc::new(
        PgStore::connect(receipt_options).await.unwrap(),
    )));
    let rt = rebuno::Runtime::new(kernel);
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir)),
        Arc::clone(&receipts),
    )
    .group(GROUP)
    .lease(Duration::from_secs(2));
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    rt.start();
    (rt, receipts)
}

/// Runs `body` with a fresh schema's name; the schema is dropped afterwards, outside the async
/// runtime (its cleanup blocks).
fn with_schema<F: std::future::Future<Output = ()>>(tag: &str, body: impl FnOnce(String) -> F) {
    let schema = PgSchema::new(tag);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(body(schema.name.clone()));
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_run_commits_once_through_a_kernel_on_postgres() {
    with_schema("kernel_run", |schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let (rt, receipts) = on_postgres(&schema, dir.path()).await;
        a_run_commits_once(&rt, &receipts, dir.path()).await;
        rt.shutdown().await;
    });
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_dropped_controller_is_taken_over_on_postgres() {
    with_schema("kernel_takeover", |schema| async move {
        let dir = tempfile::tempdir().unwrap();
        let (rt, receipts) = on_postgres(&schema, dir.path()).await;
        a_dropped_controller_is_taken_over(&rt, &receipts, dir.path()).await;
        rt.shutdown().await;
    });
}
