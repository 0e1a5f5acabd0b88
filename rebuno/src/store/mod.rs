//! Kernel storage: the [`Store`] trait, the [`Tx`] it hands to every state change, and the
//! SQLite backend (a file, or an in-memory database for tests and `rebuno dev --memory`).
//!
//! Every state change of the kernel is one call of [`StoreExt::write`]: a closure that reads and
//! writes through a [`Tx`] and is committed atomically, events and projections together. The
//! trait keeps no process-local state a second replica could not see, so a PostgreSQL backend
//! implements the same [`Tx`] over one database transaction (with advisory locks where the
//! SQLite backend relies on its single writer).
//!
//! The SQLite backend runs every write on one writer thread that commits whatever writes are
//! waiting together (group commit): a lone writer pays one sync per change, many concurrent
//! executions share one, and a sync thread makes each group durable while the writer runs the
//! next. Each write runs in its own savepoint, so one failing change never undoes its
//! neighbours. Reads run on store threads (a lone one on the writer while it is idle, the others
//! on reader threads with connections of their own, WAL), never on an async worker. They wait
//! only for the sync of what they saw (and, rarely, for a group commit the idle writer began
//! just before them).
//!
//! Listings are paged ([`Page`]): at most a page size of rows and about [`PAGE_MAX_BYTES`] of
//! data per call, with a cursor to continue; a stored row that does not decode is skipped (and
//! logged) rather than failing the whole listing.
//!
//! Stores that measure their commits (and syncs) report them through [`StoreTimings`] into the
//! histograms of the kernel built over them (`timing`).

#[cfg(feature = "sqlite")]
mod checkpoint;
#[cfg(feature = "sqlite")]
mod durable;
#[cfg(feature = "sqlite")]
mod handoff;
#[cfg(feature = "sqlite")]
mod migrations;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod readers;
mod resources;
#[cfg(feature = "sqlite")]
mod rows;
#[cfg(feature = "sqlite")]
mod sqlite;
mod timing;
#[cfg(feature = "sqlite")]
mod writer;

#[cfg(feature = "sqlite")]
#[doc(hidden)]
pub use durable::{SyncObserver, SyncPoint};
#[cfg(feature = "postgres")]
pub use postgres::{PgRateLimiter, PgStore};
pub use resources::{CheckpointRecord, ResourceRecord, ResourceTx};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use timing::{SLOW_SYNC, StoreTimings};

use crate::protocol::{
    Agent, ApiKey, Approval, Dispatch, DispatchStatus, Event, EventType, Execution,
    ExecutionStatus, Step, StepKind,
};
use async_trait::async_trait;
use serde_json::Value;
use std::any::Any;

/// The directory the tools keep their local databases in (relative to the current
/// directory); the only missing directory a SQLite store creates.
pub const DEFAULT_DIR: &str = ".rebuno";

/// The database of an embedded kernel ([`Runtime::open`](crate::Runtime::open)) in its
/// documented default place. Not `rebuno dev`'s (`.rebuno/rebuno.db`): the two serve the same
/// agent ids in different ways (in process, over webhooks), so sharing a file would make
/// each re-register the other's agents.
pub const EMBEDDED_DB_URL: &str = "sqlite://.rebuno/embedded.db";

/// A storage failure (the kernel answers it with `500 internal_error`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed an operation.
    #[error("store: {0}")]
    Database(String),
    /// A stored row that does not decode.
    #[error("store: corrupt row: {0}")]
    Corrupt(String),
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Database(e.to_string())
    }
}

/// The tables whose rows belong to one execution (column `execution_id`), which retention
/// deletes with it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const EXECUTION_CHILD_TABLES: &[&str] = &[
    "events",
    "steps",
    "approvals",
    "dispatches",
    "resources",
    "resource_checkpoints",
];

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// A listing page stops once its rows hold this many bytes of data (it always holds at least
/// one row), so a page of large rows cannot make an answer of any size.
pub const PAGE_MAX_BYTES: usize = 4 << 20;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The rows, in listing order (rows that do not decode are left out).
    pub items: Vec<T>,
    /// Where the next page starts (pass it back as the cursor); `None` on the last page.
    pub next: Option<String>,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Page {
            items: Vec::new(),
            next: None,
        }
    }
}

/// Filter of [`Tx::list_executions`] (newest first).
#[derive(Debug, Clone, Default)]
pub struct ExecutionQuery {
    /// Only this agent's executions.
    pub agent_id: Option<String>,
    /// Only executions in this status (not validated, as in the Go kernel).
    pub status: Option<String>,
    /// Only turns of this session.
    pub session: Option<String>,
    /// Only children this execution spawned (subagents).
    pub spawned_by: Option<String>,
    /// Only forks of this execution.
    pub forked_from: Option<String>,
    /// Only ids lower than this one (the page cursor).
    pub before_id: Option<String>,
    /// Page size (at least 1).
    pub limit: usize,
}

/// The SQL condition of [`ExecutionQuery::forked_from`] on the `executions` table, with `param`
/// its placeholder: a statement of its own when the filter is set, so that both databases use
/// the partial index of forks (a non-fork's `forked_from` is empty), and a condition that holds
/// when it is not.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn forks_condition(q: &ExecutionQuery, param: &str) -> String {
    if q.forked_from.is_some() {
        format!("forked_from = {param} AND forked_from <> ''")
    } else {
        format!("{param} IS NULL")
    }
}

/// The operations one transaction can perform. Implemented by each backend over its own
/// transaction; the kernel's logic is written once against it.
pub trait Tx {
    /// An agent by id.
    fn agent(&mut self, id: &str) -> StoreResult<Option<Agent>>;
    /// An agent's HMAC secret (request authentication, on every agent call).
    fn agent_secret(&mut self, id: &str) -> StoreResult<Option<String>>;
    /// Inserts or replaces an agent.
    fn put_agent(&mut self, agent: &Agent) -> StoreResult<()>;
    /// Deletes an agent; whether it existed.
    fn delete_agent(&mut self, id: &str) -> StoreResult<bool>;
    /// A page of agents by id, starting after id `after`.
    fn agents_page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<Agent>>;
    /// How many executions reference the agent.
    fn agent_execution_count(&mut self, id: &str) -> StoreResult<u64>;

    /// An execution by id.
    fn execution(&mut self, id: &str) -> StoreResult<Option<Execution>>;
    /// The execution `created_by` created with idempotency key `key`, if any.
    fn execution_by_idempotency_key(
        &mut self,
        created_by: &str,
        key: &str,
    ) -> StoreResult<Option<Execution>>;
    /// An execution's agent and status, without decoding its input and output (hot paths).
    fn execution_state(&mut self, id: &str) -> StoreResult<Option<(String, ExecutionStatus)>>;
    /// An execution's agent, without locking its row on a shared store (an execution never
    /// changes agent): for a transaction that holds a dispatch row and must not then lock the
    /// execution's (the kernel's lock order takes the execution first).
    fn agent_of(&mut self, id: &str) -> StoreResult<Option<String>> {
        Ok(self.execution_state(id)?.map(|(agent, _)| agent))
    }
    /// An execution's own policy bundle (empty: its agent's decides), without decoding the
    /// rest (the submit path).
    fn execution_policy_bundle(&mut self, id: &str) -> StoreResult<Option<String>>;
    /// Inserts or replaces an execution.
    fn put_execution(&mut self, execution: &Execution) -> StoreResult<()>;
    /// A page of executions matching `query`, newest (highest id) first.
    fn list_executions(&mut self, query: &ExecutionQuery) -> StoreResult<Page<Execution>>;
    /// Non-terminal executions whose deadline is before `now`.
    fn executions_past_deadline(&mut self, now: &str, limit: usize) -> StoreResult<Vec<Execution>>;
    /// Deletes up to `limit` terminal executions that ended before `cutoff` (however long ago
    /// they were created), with everything that belongs to them; how many.
    fn delete_terminal_executions_before(&mut self, cutoff: &str, limit: usize)
    -> StoreResult<u64>;
    /// Counts executions by status.
    fn execution_counts(&mut self) -> StoreResult<Vec<(String, u64)>>;

    /// Appends events to an execution's log with the next gapless sequence numbers; returns
    /// the last sequence number.
    fn append_events(
        &mut self,
        execution_id: &str,
        occurred_at: &str,
        events: &[(EventType, Value)],
    ) -> StoreResult<u64>;
    /// [`Tx::append_events`] for a caller that needs no sequence number: a backend may hold
    /// the write back and send it with the transaction's next statement or its commit (a
    /// failure is then returned there, and the transaction does not commit).
    fn record_events(
        &mut self,
        execution_id: &str,
        occurred_at: &str,
        events: &[(EventType, Value)],
    ) -> StoreResult<()> {
        self.append_events(execution_id, occurred_at, events)
            .map(drop)
    }
    /// Whether the execution's log holds an event of this type.
    fn has_event(&mut self, execution_id: &str, event_type: EventType) -> StoreResult<bool>;
    /// A page of events with `event_seq > after_seq`, ascending (the cursor is the last
    /// `event_seq`).
    fn events(
        &mut self,
        execution_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Page<Event>>;

    /// A step of an execution by id.
    fn step(&mut self, execution_id: &str, step_id: &str) -> StoreResult<Option<Step>>;
    /// Whether a step of an execution is recorded.
    fn step_exists(&mut self, execution_id: &str, step_id: &str) -> StoreResult<bool>;
    /// Inserts or updates a step. Once the stored status is terminal, its status, result,
    /// error and `completed_at` are kept.
    fn put_step(&mut self, step: &Step) -> StoreResult<()>;
    /// A page of an execution's steps by step id, starting after step id `after`;
    /// `terminal_only` keeps succeeded, failed, denied and cancelled ones.
    fn steps_page(
        &mut self,
        execution_id: &str,
        after: Option<&str>,
        terminal_only: bool,
        limit: usize,
    ) -> StoreResult<Page<Step>>;
    /// An execution's steps in a status.
    fn steps_in_status(&mut self, execution_id: &str, status: &str) -> StoreResult<Vec<Step>>;
    /// Whether a failed step with the same kind, target and args hash has error reason
    /// `indeterminate` (the at-most-once retry guard).
    fn has_indeterminate_failure(
        &mut self,
        execution_id: &str,
        kind: &StepKind,
        target: &str,
        args_hash: &str,
    ) -> StoreResult<bool>;

    /// An approval by id.
    fn approval(&mut self, id: &str) -> StoreResult<Option<Approval>>;
    /// Inserts or replaces an approval.
    fn put_approval(&mut self, approval: &Approval) -> StoreResult<()>;
    /// Pending approvals (of one execution, or all), oldest first.
    fn pending_approvals(&mut self, execution_id: Option<&str>) -> StoreResult<Vec<Approval>>;
    /// A page of pending approvals, oldest first, starting after approval `after`; `None` if
    /// there is no approval `after`.
    fn pending_approvals_page(
        &mut self,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Option<Page<Approval>>>;
    /// The pending approval of a step.
    fn pending_approval_for_step(&mut self, step_id: &str) -> StoreResult<Option<Approval>>;
    /// Pending approvals whose timeout is at or before `now`.
    fn due_approvals(&mut self, now: &str, limit: usize) -> StoreResult<Vec<Approval>>;
    /// The earliest timeout of a pending approval.
    fn next_approval_timeout(&mut self) -> StoreResult<Option<String>>;

    /// A dispatch by id.
    fn dispatch(&mut self, id: &str) -> StoreResult<Option<Dispatch>>;
    /// A dispatch's execution, attempt and status (the lease fences).
    fn dispatch_lease(&mut self, id: &str) -> StoreResult<Option<(String, u32, DispatchStatus)>>;
    /// Inserts or replaces a dispatch.
    fn put_dispatch(&mut self, dispatch: &Dispatch) -> StoreResult<()>;
    /// Renews a lease: if dispatch `id` is in flight with exactly `attempt`, its `locked_at`
    /// and `updated_at` become `now` (answers whether it was). A backend may do it in one
    /// statement; the default reads the row and writes it back.
    fn renew_dispatch(&mut self, id: &str, attempt: u32, now: &str) -> StoreResult<bool> {
        match self.dispatch(id)? {
            Some(mut d) if d.attempt == attempt && d.status == DispatchStatus::InFlight => {
                d.locked_at = Some(now.to_owned());
                d.updated_at = now.to_owned();
                self.put_dispatch(&d)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    /// [`Tx::renew_dispatch`] for a caller that needs no answer (held back like
    /// [`Tx::record_events`]).
    fn record_renewal(&mut self, id: &str, attempt: u32, now: &str) -> StoreResult<()> {
        self.renew_dispatch(id, attempt, now).map(drop)
    }
    /// An execution's dispatches.
    fn dispatches_of(&mut self, execution_id: &str) -> StoreResult<Vec<Dispatch>>;
    /// Pending or failed dispatches due at `now`, earliest first, leaving out the dispatches
    /// whose execution belongs to an agent in `skip_agents`, each with its execution's agent
    /// id (empty if the execution is gone): the dispatcher's claim, fair between agents.
    fn claimable_dispatches_except(
        &mut self,
        now: &str,
        limit: usize,
        skip_agents: &[String],
    ) -> StoreResult<Vec<(Dispatch, String)>>;
    /// Every in-flight dispatch, each with the lease length its agent registered (`None`:
    /// the kernel's global lease, also when the execution or the agent is gone).
    ///
    /// The reaper computes each row's expiry from this. The lease is read from the agent row
    /// at the time of the scan (a lookup per row, not a copy kept on the dispatch): every
    /// replica of a shared store reads the same agents table, so every replica's reaper judges
    /// a row by the same lease whichever replica claimed it, and the schema keeps the lease in
    /// one place. A re-registration that changes the lease applies to in-flight dispatches
    /// from the next scan on.
    fn in_flight_leases(&mut self) -> StoreResult<Vec<(Dispatch, Option<f64>)>>;
    /// Every in-flight dispatch.
    fn in_flight_dispatches(&mut self) -> StoreResult<Vec<Dispatch>> {
        Ok(self
            .in_flight_leases()?
            .into_iter()
            .map(|(d, _)| d)
            .collect())
    }
    /// Pending, failed or in-flight dispatches.
    fn queue_depth(&mut self) -> StoreResult<u64>;

    /// The highest occurrence handed out to attempt `attempt` of the dispatch for `key`
    /// (`(kind, target, args_hash)`), or `None` if none was. Used on shared stores, where the
    /// replica answering a submit may not be the one that answered the previous one; the
    /// counters of any other attempt are invisible.
    fn attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        key: &OccurrenceKey,
    ) -> StoreResult<Option<u64>>;
    /// Records that occurrence `occurrence` of `key` was handed out to attempt `attempt` (the
    /// counter never moves backwards). Writes nothing unless the dispatch is in flight with
    /// exactly that attempt, so a superseded attempt cannot move a newer attempt's counters.
    /// A backend drops a dispatch's counters when the dispatch leaves `in_flight` or moves to
    /// another attempt ([`Tx::put_dispatch`]), so they never outlive their attempt.
    fn advance_attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        key: &OccurrenceKey,
        occurrence: u64,
    ) -> StoreResult<()>;

    /// Announces reads the transaction is about to make, so a backend that pays a round trip
    /// per statement can send them at once and answer the calls from what came back (a
    /// hint: the default does nothing). An answer is used only if no write of the transaction
    /// that could change it came between this call and the read it answers (else the read runs
    /// again). In a write
    /// transaction the reads lock what they lock when made, in the order given: list them in
    /// the kernel's lock order (see `kernel::dispatch`), as the reads themselves would come.
    fn prefetch(&mut self, _lookups: &[Lookup<'_>]) -> StoreResult<()> {
        Ok(())
    }

    /// Takes the execution's lock ([`Store::lock_execution`]'s) until this transaction ends,
    /// if no other process holds it, without waiting; answers whether it did. Once it is
    /// taken, the transaction's reads see every commit of the lock's previous holders. A
    /// transaction that asks must do so before it reads anything of the execution (announced
    /// first, with [`Lookup::ExecutionLock`], when it announces), and must not act on what it
    /// read if the answer is `false`. Stores one process owns have no such lock: `true`.
    fn try_lock_execution(&mut self, _execution_id: &str) -> StoreResult<bool> {
        Ok(true)
    }

    /// The API key operations of this transaction.
    fn api_keys(&mut self) -> &mut dyn ApiKeyTx;
    /// The session operations of this transaction.
    fn sessions(&mut self) -> &mut dyn SessionTx;
    /// The web console's login sessions.
    fn console_sessions(&mut self) -> &mut dyn ConsoleSessionTx;
    /// The external-resource operations of this transaction.
    fn resources(&mut self) -> &mut dyn ResourceTx;
    /// The subagent operations of this transaction.
    fn subagents(&mut self) -> &mut dyn SubagentTx;
}

/// The subagent operations of a transaction ([`Tx::subagents`]): the child executions a
/// parent's steps spawned, found by their `spawned_by` (at most one per step).
pub trait SubagentTx {
    /// The child that step `step_id` of execution `parent` spawned, if any.
    fn child(&mut self, parent: &str, step_id: &str) -> StoreResult<Option<Execution>>;
    /// Up to `limit` children of `parent` that are not terminal (pending, running or
    /// blocked), oldest first. In a write transaction the rows stay locked until it commits.
    fn open_children(&mut self, parent: &str, limit: usize) -> StoreResult<Vec<Execution>>;
    /// Whether `parent` has a child that is not terminal, as last committed (locks nothing).
    fn has_open_children(&mut self, parent: &str) -> StoreResult<bool>;
    /// The execution that spawned execution `id`, if any (locks nothing).
    fn parent_of(&mut self, id: &str) -> StoreResult<Option<String>>;
}

/// The session operations of a transaction ([`Tx::sessions`]): the turns of one agent's
/// session, found by `(agent_id, session)`.
pub trait SessionTx {
    /// Up to `limit` turns of the session that are not terminal (pending, running or blocked),
    /// oldest first. In a write transaction the caller holds the session until it commits, so
    /// two writers never both find it idle.
    fn open_turns(
        &mut self,
        agent_id: &str,
        session: &str,
        limit: usize,
    ) -> StoreResult<Vec<Execution>>;
    /// The id of the session's latest completed turn, if any.
    fn last_completed(&mut self, agent_id: &str, session: &str) -> StoreResult<Option<String>>;
    /// Records `execution_id` as the session's latest completed turn.
    fn set_last_completed(
        &mut self,
        agent_id: &str,
        session: &str,
        execution_id: &str,
    ) -> StoreResult<()>;
}

/// The API key operations of a transaction ([`Tx::api_keys`]). A key's secret is never stored:
/// only its SHA-256, by which a request's bearer token finds the key.
pub trait ApiKeyTx {
    /// Inserts a new key with the hash of its secret (lowercase hex SHA-256).
    fn insert(&mut self, key: &ApiKey, secret_hash: &str) -> StoreResult<()>;
    /// The key whose secret hashes to `secret_hash`, revoked or not.
    fn by_hash(&mut self, secret_hash: &str) -> StoreResult<Option<ApiKey>>;
    /// A key by id.
    fn get(&mut self, id: &str) -> StoreResult<Option<ApiKey>>;
    /// A page of keys by id (oldest first), starting after id `after`.
    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<ApiKey>>;
    /// Revokes a key at `now` (a revoked key keeps its first `revoked_at`); whether it exists.
    fn revoke(&mut self, id: &str, now: &str) -> StoreResult<bool>;
    /// How many keys are neither revoked nor expired at `now`.
    fn active_count(&mut self, now: &str) -> StoreResult<u64>;
}

/// A web console login as stored ([`Tx::console_sessions`]): never its token, only the token's
/// SHA-256, so a stolen database holds no usable session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// The lowercase hex SHA-256 of the session token the browser's cookie holds.
    pub id_hash: String,
    /// The API key the login used; empty for the admin (the server's token, or dev mode).
    pub key_id: String,
    /// For an admin login with the server's token: a hash of that token with the session
    /// token, so the session ends when the server's token changes; else empty.
    pub admin_proof: String,
    /// Who an admin login decides approvals as (the name given at login).
    pub decides_as: String,
    /// When the login was made (RFC 3339).
    pub started_at: String,
    /// When the session ends (RFC 3339).
    pub ends_at: String,
}

/// The console session operations of a transaction ([`Tx::console_sessions`]).
pub trait ConsoleSessionTx {
    /// Inserts a new session.
    fn insert(&mut self, session: &ConsoleSession) -> StoreResult<()>;
    /// The session whose token hashes to `id_hash`, expired or not, with the API key it logged
    /// in with (revoked or not; `None` for an admin login or a key that is gone), in one read.
    fn get(&mut self, id_hash: &str) -> StoreResult<Option<(ConsoleSession, Option<ApiKey>)>>;
    /// Deletes a session; whether it existed.
    fn delete(&mut self, id_hash: &str) -> StoreResult<bool>;
    /// Deletes every session of API key `key_id`; how many.
    fn delete_of_key(&mut self, key_id: &str) -> StoreResult<u64>;
    /// Deletes every session whose end is at or before `now`; how many.
    fn delete_expired(&mut self, now: &str) -> StoreResult<u64>;
    /// Deletes the sessions of `key_id` (empty: the admin's) but its newest `keep`; how many.
    fn keep_newest(&mut self, key_id: &str, keep: usize) -> StoreResult<u64>;
}

/// A read [`Tx::prefetch`] can announce: each names the [`Tx`] call it answers.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'a> {
    /// [`Tx::try_lock_execution`] of an execution (first, when announced).
    ExecutionLock(&'a str),
    /// [`Tx::execution_state`] of an execution.
    ExecutionState(&'a str),
    /// [`Tx::execution_policy_bundle`] of an execution.
    ExecutionPolicyBundle(&'a str),
    /// [`Tx::agent`] of the agent an execution belongs to.
    AgentOfExecution(&'a str),
    /// [`Tx::dispatch_lease`] of a dispatch.
    DispatchLease(&'a str),
    /// [`Tx::step`]: execution and step id.
    Step(&'a str, &'a str),
    /// [`Tx::step_exists`]: execution and step id.
    StepExists(&'a str, &'a str),
    /// [`Tx::has_indeterminate_failure`]: execution, kind, target and args hash.
    IndeterminateFailure(&'a str, &'a StepKind, &'a str, &'a str),
    /// [`Tx::attempt_occurrence`]: dispatch, attempt and the call's key.
    AttemptOccurrence(&'a str, u32, &'a OccurrenceKey),
}

/// An occurrence counter's key: `(kind, target, args_hash)`.
pub type OccurrenceKey = (String, String, String);

/// A lock a store holds for the caller until dropped (see [`Store::lock_execution`]).
pub struct StoreLock(#[allow(dead_code)] Box<dyn Any + Send>);

impl StoreLock {
    /// A lock whose release is `guard`'s drop.
    pub fn new(guard: impl Any + Send) -> Self {
        StoreLock(Box::new(guard))
    }
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreLock")
    }
}

/// What a shared store's notification channel carries to every kernel on the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreMessage {
    /// A message [`Store::publish`]ed by some kernel (this one included).
    Published {
        /// The channel it was published on.
        channel: String,
        /// Its payload.
        payload: String,
    },
    /// The channel was (re)connected: anything published while it was down was missed, so
    /// whoever waits on it should look at the database again.
    Reconnected,
}

/// The notification channels kernels publish on.
pub mod channels {
    /// A dispatch became claimable (payload: its id): replicas with free delivery slots wake.
    pub const DISPATCH: &str = "rebuno_dispatch";
    /// A live output delta (payload: `{"exec_id":…,"delta":{…}}`).
    pub const STREAM: &str = "rebuno_stream";
}

/// A boxed closure run inside one transaction.
pub type TxFn = Box<dyn FnOnce(&mut dyn Tx) -> StoreResult<Box<dyn Any + Send>> + Send>;

/// Durable kernel storage. Use [`StoreExt`] for typed calls.
#[async_trait]
pub trait Store: Send + Sync {
    /// Runs `f` in one write transaction and commits it before returning. If `f` fails,
    /// nothing it wrote is kept.
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>>;
    /// Like [`Store::write_boxed`], but may answer once the transaction is committed (visible
    /// to every later read and write) and before it is durable: a later durable write, or a
    /// [`Store::settle`], makes it durable. Commits become durable in commit order, so a crash
    /// may take back a deferred commit only together with every commit after it, and a read
    /// that could have seen it still waits for its sync ([`Store::read_boxed`] settles).
    ///
    /// For a change whose loss the caller can stand: one that a crash would make it redo
    /// anyway, answered to nobody outside the process that would act on it before a durable
    /// write follows. The answer may also rest on commits not yet durable. A store that cannot
    /// defer (the default) commits durably.
    async fn write_deferred_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.write_boxed(f).await
    }
    /// Runs `f` against a consistent read snapshot of durable state.
    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>>;
    /// Like [`Store::read_boxed`], but the snapshot may include writes committed and not yet
    /// durable. The caller must either write next (a write is answered only once durable,
    /// and so is everything committed before it) or call [`Store::settle`] before answering.
    async fn read_unsettled_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.read_boxed(f).await
    }
    /// Waits until everything a read so far could have seen is durable (deferred writes
    /// included: the store syncs them if nothing else does).
    async fn settle(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Like [`Store::settle`], but leaves out deferred commits nothing has asked to be durable
    /// yet (made only of [`Store::write_deferred_boxed`] writes, with no durable write or settle
    /// after them): those may stay unsynced, and a crash may take them back. Never adds a sync.
    /// For a reader that dies with this process and acts on nothing a deferred write records
    /// (the kernel's own agents in process).
    async fn settle_durable_writes(&self) -> StoreResult<()> {
        self.settle().await
    }
    /// Checks the database answers (for `/v0/ready`).
    async fn ping(&self) -> StoreResult<()>;
    /// A short backend name (`sqlite`, `memory`, `postgres`).
    fn backend(&self) -> &'static str;

    /// Whether other kernel processes may share this database (replicas). A shared store
    /// keeps what one delivery attempt needs (occurrence counters, lease renewals, retry due
    /// times) in the database, locks executions across processes
    /// ([`Store::lock_execution`]), limits rates with buckets in the database
    /// ([`Store::rate_limiter`]) and carries wake-ups and live deltas between replicas
    /// ([`Store::publish`]). A store one process owns keeps them in memory, which is faster.
    fn shared(&self) -> bool {
        false
    }

    /// Takes the execution's lock across every process sharing the database, for as long as
    /// the returned guard lives. `None` for stores one process owns (the kernel's in-process
    /// lock is enough there). The kernel takes its in-process lock first, so a process holds
    /// at most one store lock per execution.
    async fn lock_execution(&self, _execution_id: &str) -> StoreResult<Option<StoreLock>> {
        Ok(None)
    }

    /// The execution's lock if this process still holds it for a guard just dropped (its
    /// release not sent yet), taken over without a round trip; `None` otherwise, and for
    /// stores one process owns. A caller that gets `None` may take the lock inside a write
    /// transaction instead ([`Tx::try_lock_execution`]), or with [`Store::lock_execution`].
    fn held_execution_lock(&self, _execution_id: &str) -> Option<StoreLock> {
        None
    }

    /// A rate limiter whose buckets live in this database, shared by every replica; `None`
    /// keeps the kernel's in-memory limiter.
    fn rate_limiter(&self) -> Option<std::sync::Arc<dyn crate::policy::ratelimit::RateLimiter>> {
        None
    }

    /// Where the store records its commit and sync latencies, if it measures them; the
    /// kernel built over it connects its histograms there.
    fn timings(&self) -> Option<&StoreTimings> {
        None
    }

    /// Sends `payload` on `channel` to every kernel sharing the database, this one included
    /// (best effort: a message may be lost while a listener reconnects, which
    /// [`StoreMessage::Reconnected`] reports). Does nothing on stores one process owns.
    async fn publish(&self, _channel: &'static str, _payload: String) -> StoreResult<()> {
        Ok(())
    }

    /// The messages [`Store::publish`] sends, from every kernel; `None` for stores one process
    /// owns.
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<StoreMessage>> {
        None
    }
}

/// Typed wrappers over [`Store`].
pub trait StoreExt: Store {
    /// [`Store::write_boxed`] with a typed result.
    fn write<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.write_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }

    /// [`Store::write_deferred_boxed`] with a typed result.
    fn write_deferred<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.write_deferred_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }

    /// [`Store::read_boxed`] with a typed result.
    fn read<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.read_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }

    /// [`Store::read_unsettled_boxed`] with a typed result.
    fn read_unsettled<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.read_unsettled_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }
}

fn boxed<R, F>(f: F) -> TxFn
where
    R: Send + 'static,
    F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
{
    Box::new(move |tx: &mut dyn Tx| f(tx).map(|r| Box::new(r) as Box<dyn Any + Send>))
}

fn downcast<R: 'static>(out: Box<dyn Any + Send>) -> StoreResult<R> {
    out.downcast::<R>()
        .map(|b| *b)
        .map_err(|_| StoreError::Database("result type mismatch".into()))
}

impl<S: Store + ?Sized> StoreExt for S {}

/// A scalar subquery, for a query over `dispatches`: the lease length the agent of the row's
/// execution registered (`NULL` for none, and when the execution or the agent is gone). Both
/// backends' SQL.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const AGENT_LEASE: &str = "(SELECT a.lease_timeout_seconds FROM executions e
    JOIN agents a ON a.id = e.agent_id WHERE e.id = dispatches.execution_id)";

/// A list of names as both stores keep it (a JSON array's text); `None` for an empty list.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn names_text(names: &[String]) -> Option<String> {
    (!names.is_empty()).then(|| serde_json::to_string(names).expect("names serialize"))
}

/// A list of names from its stored text (see [`names_text`]); `NULL` is empty.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn names_from_text(text: Option<&str>) -> Result<Vec<String>, serde_json::Error> {
    text.map_or(Ok(Vec::new()), serde_json::from_str)
}

/// An agent's metadata as both stores keep it (JSON text); `None` for none.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn metadata_text(agent: &crate::protocol::Agent) -> Option<String> {
    agent
        .metadata
        .as_ref()
        .map(|m| serde_json::to_string(m).expect("agent metadata serializes"))
}
