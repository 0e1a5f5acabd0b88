//! The `ReceiptStore` conformance suite: one set of test bodies, each run against every backend
//! (`MemoryStore`, `SqliteStore` in memory and on a temporary file, `PgStore` in a schema of
//! its own, dropped afterwards; the PostgreSQL tests are ignored unless `REBUNO_TEST_PG_URL` is
//! set). The bodies cover appends, the compare-and-swap, dedup, ranges, versions, listings,
//! branches and the runtime on top (`store/appends.rs`, `store/branches.rs`,
//! `store/runtime.rs`), and the signed checkpoints of a store with a key (`store/signed.rs`);
//! `store/shared.rs` holds the properties of two store instances on one
//! database, run on the backends that have one (SQLite file, PostgreSQL).
//!
//! ```text
//! cargo test -p receipt --test store
//! eval "$(bash .ci/postgres)"; cargo test -p receipt --test store -- --ignored
//! ```

mod appends;
mod branches;
mod runtime;
mod shared;
mod signed;

use receipt::signing::SigningKey;
use receipt::sim::{FixedClock, SeededEntropy};
use receipt::store::SqliteOptions;
use receipt::{
    AppendOutcome, AppendRequest, Hints, MemoryStore, Receipt, ReceiptStore, SqliteStore,
};
use serde_json::{Value, json};
use std::sync::Arc;

/// Which backend a test runs on.
pub(crate) enum Kind {
    Memory,
    SqliteMemory,
    SqliteFile,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// What keeps a backend's database alive (and removes it afterwards).
enum Guard {
    None,
    Dir(#[allow(dead_code)] tempfile::TempDir, std::path::PathBuf),
    #[cfg(feature = "postgres")]
    Schema(pg::Schema),
}

/// One backend, fresh for one test.
pub(crate) struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn ReceiptStore>,
    guard: Guard,
}

impl Backend {
    pub async fn new(kind: Kind, test: &str) -> Backend {
        let _ = test;
        match kind {
            Kind::Memory => Backend {
                name: "memory",
                store: Arc::new(MemoryStore::new()),
                guard: Guard::None,
            },
            Kind::SqliteMemory => Backend {
                name: "sqlite in memory",
                store: Arc::new(SqliteStore::memory().unwrap()),
                guard: Guard::None,
            },
            Kind::SqliteFile => {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("r.db");
                Backend {
                    name: "sqlite file",
                    store: Arc::new(SqliteStore::open(&path).unwrap()),
                    guard: Guard::Dir(dir, path),
                }
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres => {
                let schema = pg::Schema::new(test);
                Backend {
                    name: "postgresql",
                    store: Arc::new(schema.store().await),
                    guard: Guard::Schema(schema),
                }
            }
        }
    }

    /// A store of the same kind that signs every append with `key`: on the same database
    /// where there is one to reopen, else a fresh one.
    pub async fn signing(&self, key: Arc<SigningKey>) -> Arc<dyn ReceiptStore> {
        match &self.guard {
            Guard::None if self.name == "memory" => Arc::new(MemoryStore::with_signing_key(key)),
            Guard::None => Arc::new(
                SqliteStore::memory_with(SqliteOptions {
                    signing_key: Some(key),
                    ..SqliteOptions::default()
                })
                .unwrap(),
            ),
            Guard::Dir(_, path) => Arc::new(
                SqliteStore::open_with(
                    path,
                    SqliteOptions {
                        signing_key: Some(key),
                        ..SqliteOptions::default()
                    },
                )
                .unwrap(),
            ),
            #[cfg(feature = "postgres")]
            Guard::Schema(schema) => Arc::new(schema.store().await.with_signing_key(key)),
        }
    }

    /// A second store instance on the same database (another process, in effect), for the
    /// backends that have a database to share.
    pub async fn another(&self) -> Option<Arc<dyn ReceiptStore>> {
        match &self.guard {
            Guard::None => None,
            Guard::Dir(_, path) => Some(Arc::new(SqliteStore::open(path).unwrap())),
            #[cfg(feature = "postgres")]
            Guard::Schema(schema) => Some(Arc::new(schema.store().await)),
        }
    }
}

#[cfg(feature = "postgres")]
mod pg {
    //! A schema of its own per PostgreSQL test, and a receipt store in it.

    use receipt::store::PgStore;
    pub use test_support::pg::Schema;

    /// A store in a test's schema.
    pub trait SchemaStore {
        /// Connects a store to the schema.
        async fn store(&self) -> PgStore;
    }

    impl SchemaStore for Schema {
        async fn store(&self) -> PgStore {
            PgStore::connect(self.options())
                .await
                .expect("connect to the test PostgreSQL server")
        }
    }
}
#[cfg(feature = "postgres")]
use pg::SchemaStore;

/// One test per body and backend (`<backend>::<body>`).
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        conformance!(@on memory, Memory; $($name),*);
        conformance!(@on sqlite_memory, SqliteMemory; $($name),*);
        conformance!(@on sqlite_file, SqliteFile; $($name),*);
        #[cfg(feature = "postgres")]
        mod postgresql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
                async fn $name() {
                    let b = crate::Backend::new(crate::Kind::Postgres, stringify!($name)).await;
                    crate::$name(&b).await;
                }
            )*
        }
    };
    (@on $module:ident, $kind:ident; $($name:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = crate::Backend::new(crate::Kind::$kind, stringify!($name)).await;
                    crate::$name(&b).await;
                }
            )*
        }
    };
}

/// One test per body on the backends with a database two instances can share.
macro_rules! shared_database {
    ($($name:ident),* $(,)?) => {
        mod sqlite_file_shared {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let b = crate::Backend::new(crate::Kind::SqliteFile, stringify!($name)).await;
                    crate::$name(&b).await;
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod postgresql_shared {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
                async fn $name() {
                    let b = crate::Backend::new(crate::Kind::Postgres, stringify!($name)).await;
                    crate::$name(&b).await;
                }
            )*
        }
    };
}

use appends::*;
use branches::*;
use runtime::*;
use shared::*;
use signed::*;

conformance!(
    signed_appends_record_a_checkpoint_in_their_transaction,
    append_read_range_tail_version,
    expected_prev_is_checked_against_the_stored_tail,
    batches_are_atomic_and_must_link,
    whole_command_dedup_by_event_id,
    append_many_commits_each_request_on_its_own,
    list_streams_in_byte_order_with_counts_and_heads,
    versions_change_on_every_append,
    fork_refusals_use_the_spec_messages,
    create_branch_refusals_write_nothing,
    branches_materialize_parent_prefix_and_relink,
    branch_cycles_are_detected,
    runtime_dedup_expected_prev_and_event_ids,
    concurrent_commands_on_one_stream_are_serialized,
    two_runtimes_on_one_store_all_land,
    runtime_relinks_a_plain_command_after_another_writer,
    runtime_refuses_a_stated_prev_after_another_writer,
    runtime_finds_its_command_applied_by_another_writer,
    runtime_gives_up_when_the_stream_never_stops_moving,
    incremental_fold_matches_full_fold,
    pinned_clock_and_entropy_reproduce_hashes,
    runtime_refuses_a_tampered_chain,
);

shared_database!(
    two_instances_exactly_one_cas_wins_per_tail,
    two_instances_plain_runtime_appends_all_land,
    two_instances_dedup_one_command,
    two_instances_race_one_branch,
);

// ---- helpers shared by the bodies ----

pub(crate) fn clock() -> FixedClock {
    FixedClock::new(1_767_225_600_000, 1)
}

/// Receipts linked onto `prev`, with fixed clock and entropy (so two calls build the same
/// receipts), `event_ids[i]` as the `eventId` hint of receipt `i`.
pub(crate) fn build_chain(
    stream: &str,
    prev: Option<String>,
    bodies: &[Value],
    event_ids: &[Option<&str>],
) -> Vec<Receipt> {
    build_chain_seeded(stream, prev, bodies, event_ids, 7)
}

/// [`build_chain`] with another entropy seed.
pub(crate) fn build_chain_seeded(
    stream: &str,
    prev: Option<String>,
    bodies: &[Value],
    event_ids: &[Option<&str>],
    seed: u64,
) -> Vec<Receipt> {
    let clock = clock();
    let entropy = SeededEntropy::new(seed);
    let mut out: Vec<Receipt> = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let prev = out
            .last()
            .map(|r| r.hash().to_owned())
            .or_else(|| prev.clone());
        let mut hints = Hints::new();
        if let Some(Some(id)) = event_ids.get(i) {
            hints.insert("eventId".into(), json!(id));
        }
        out.push(
            Receipt::build(stream, prev, body.clone(), None, hints, &clock, &entropy).unwrap(),
        );
    }
    out
}

pub(crate) fn bodies(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"type": "n", "i": i})).collect()
}

pub(crate) async fn append(
    store: &dyn ReceiptStore,
    stream: &str,
    receipts: Vec<Receipt>,
    tail: Option<String>,
) -> receipt::Result<AppendOutcome> {
    store
        .append(AppendRequest {
            stream: stream.into(),
            receipts,
            expected_tail: tail,
        })
        .await
}
