//! One set of test bodies for the `Store` / `Tx` contract, run against every backend: SQLite in
//! memory, SQLite on a temporary file, and PostgreSQL (ignored unless `REBUNO_TEST_PG_URL` is
//! set; each test in a schema of its own, dropped afterwards). The PostgreSQL-only properties of
//! several replicas on one database (claims, appends, execution locks, the rate limiter,
//! publish/subscribe) are in `store_conformance/replicas.rs`.
//!
//! ```text
//! cargo test -p rebuno --test store_conformance
//! eval "$(bash .ci/postgres)"; cargo test -p rebuno --test store_conformance -- --ignored
//! ```

mod dispatches;
mod keys;
mod records;
mod replicas;
mod resources;

use rebuno::protocol::{
    Agent, Approval, ApprovalStatus, Dispatch, DispatchStatus, Execution, ExecutionStatus,
    Idempotency, Step, StepKind, StepStatus, Timestamp,
};
use rebuno::store::{PgStore, Store, StoreExt, StoreResult, Tx};
use serde_json::Value;
use std::sync::Arc;

pub use test_support::pg::{NEEDS_PG, Schema, pg_url};

/// A store (a replica) in a test's schema.
trait SchemaStore {
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

/// Runs one conformance body against each backend.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = rebuno::store::SqliteStore::memory().unwrap();
                    crate::$name(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod sqlite_file {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let store = rebuno::store::SqliteStore::open(dir.path().join("k.db")).unwrap();
                    crate::$name(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod postgresql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
                async fn $name() {
                    let schema = crate::Schema::new(stringify!($name));
                    crate::$name(std::sync::Arc::new(crate::SchemaStore::store(&schema).await)).await;
                }
            )*
        }
    };
}

use dispatches::*;
use keys::*;
use records::*;
use resources::*;

conformance!(
    agents_round_trip_page_and_delete,
    executions_round_trip_byte_exact,
    idempotency_keys_are_unique_per_creator,
    executions_list_in_pages_with_filters,
    executions_past_deadline_and_counts,
    events_are_gapless_and_paged,
    steps_keep_terminal_outcomes,
    steps_page_and_filter,
    indeterminate_failures_are_found,
    approvals_pending_in_order_and_paged,
    dispatches_round_trip_and_list,
    renewals_touch_only_the_attempt_in_flight,
    claims_filter_by_status_time_and_agent,
    an_agent_back_wakes_only_its_waiting_dispatches,
    agent_leases_round_trip_and_reach_in_flight_rows,
    occurrence_counters_follow_the_attempt,
    a_submits_writes_in_one_transaction_all_land,
    terminal_executions_are_deleted_with_their_children,
    a_failing_closure_keeps_nothing,
    a_panicking_closure_keeps_nothing,
    api_keys_round_trip_by_hash_page_and_revoke,
    console_sessions_round_trip_with_their_key,
    identity_fields_round_trip,
    session_fork_and_spawn_fields_round_trip,
    session_turns_and_latest_completed,
    resources_round_trip_and_go_with_their_execution,
);

/// The store under test.
pub type Dyn = Arc<dyn Store>;

/// Runs a write and unwraps it.
pub async fn w<R, F>(store: &Dyn, f: F) -> R
where
    R: Send + 'static,
    F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
{
    store.write(f).await.expect("write")
}

/// Runs a read and unwraps it.
pub async fn r<R, F>(store: &Dyn, f: F) -> R
where
    R: Send + 'static,
    F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
{
    store.read(f).await.expect("read")
}

/// The timestamp `n` seconds after 2026-01-01T00:00:00Z, ordered by `n`.
pub fn at(n: u32) -> Timestamp {
    Timestamp::from(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600 + u64::from(n)),
    )
}

/// An agent `id`.
pub fn agent(id: &str) -> Agent {
    Agent {
        id: id.into(),
        webhook_url: format!("http://127.0.0.1:9/{id}"),
        secret: format!("secret-{id}"),
        policy_bundle: String::new(),
        registered_at: at(0),
        metadata: None,
        lease_timeout_seconds: None,
        dispatch_retry: None,
    }
}

/// An execution `id` of `agent_id`, created and updated at `at(1)`.
pub fn execution(id: &str, agent_id: &str, status: ExecutionStatus) -> Execution {
    Execution {
        id: id.into(),
        agent_id: agent_id.into(),
        agent_version: String::new(),
        input: serde_json::json!({"q": id}),
        status,
        output: None,
        failure_reason: String::new(),
        created_at: at(1),
        updated_at: at(1),
        deadline_at: None,
        created_by: String::new(),
        idempotency_key: String::new(),
        on_behalf_of: String::new(),
        subject_groups: Vec::new(),
        session: String::new(),
        parent_execution_id: String::new(),
        forked_from: String::new(),
        fork_seq: 0,
        restoration: None,
        spawned_by: None,
        state: None,
        policy_bundle: String::new(),
        policy_bundle_set_by: String::new(),
        trace_parent: String::new(),
    }
}

/// A tool call `step_id` of `execution_id` (target `search`, args hash `h1`).
pub fn step(execution_id: &str, step_id: &str, status: StepStatus) -> Step {
    Step {
        step_id: step_id.into(),
        execution_id: execution_id.into(),
        kind: StepKind::ToolCall,
        target: "search".into(),
        args_hash: "h1".into(),
        occurrence: 0,
        status,
        idempotency: Idempotency::SafeToRetry,
        args: Some(serde_json::json!({"q": "x"})),
        result: None,
        error: None,
        started_at: Some(at(2)),
        completed_at: None,
    }
}

/// A pending approval created at `at(created)`, timing out 100 s later.
pub fn approval(id: &str, execution_id: &str, step_id: &str, created: u32) -> Approval {
    Approval {
        id: id.into(),
        step_id: step_id.into(),
        execution_id: execution_id.into(),
        status: ApprovalStatus::Pending,
        approvers: Some(serde_json::json!(["ann"])),
        message: "ok?".into(),
        timeout_at: at(created + 100),
        decided_by: String::new(),
        decided_at: None,
        rationale: String::new(),
        created_at: at(created),
        asserted_by: String::new(),
    }
}

/// A dispatch due (and created) at `at(due)`, attempt 0 of 5.
pub fn dispatch(id: &str, execution_id: &str, status: DispatchStatus, due: u32) -> Dispatch {
    Dispatch {
        id: id.into(),
        execution_id: execution_id.into(),
        status,
        attempt: 0,
        max_attempts: 5,
        next_attempt_at: at(due),
        locked_by: String::new(),
        locked_at: None,
        created_at: at(due),
        updated_at: at(due),
        last_error: String::new(),
    }
}

/// A JSON value exactly as it is written and read back (for byte-exact round trips).
pub fn text(v: &Value) -> String {
    v.to_string()
}
