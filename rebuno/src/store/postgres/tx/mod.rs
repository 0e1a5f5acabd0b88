//! The [`Tx`] of the PostgreSQL store, over one [`PgTransaction`]: the SQLite backend's
//! statements, method by method, with the row locks that make a read-modify-write safe when
//! several replicas write at once under `READ COMMITTED`.
//!
//! In a write transaction every read of `executions` or `dispatches` rows takes `FOR UPDATE`
//! (a concurrent writer of the row waits for this transaction, and this one reads the row as
//! last committed), except the dispatcher's claim, which takes `FOR UPDATE SKIP LOCKED`: a row
//! another transaction holds is left out, never waited for and never claimed twice. Appending
//! events first locks the execution's row (or, for an execution without one, a transaction
//! advisory lock on its id), then numbers from the latest committed sequence, so the log stays
//! gapless and unique however many replicas append at once.
//!
//! Statements are prepared once per connection, with their parameter types, and kept: PostgreSQL
//! neither parses nor (after their first executions) plans them again. What costs is the round
//! trip, so a transaction waits for as few as it can: a write whose answer the kernel does not use
//! (every `put_*`, [`EventTx::record`](crate::store::EventTx::record),
//! [`DispatchTx::record_renewal`](crate::store::DispatchTx::record_renewal), the occurrence
//! counters, the advisory locks) is held back and sent with the next read, or with `COMMIT`;
//! `BEGIN` goes with the first statement; and the reads the kernel announces ([`Tx::prefetch`]) go
//! in one batch. The server still runs every statement in the order the kernel made the calls, so
//! the locks are taken in the same order, and the first statement that fails is the error (see
//! [`PgTransaction`]).
//!
//! The server's time goes by statement as well (each is bound, run and answered on its own), so
//! the held-back writes of the kernel's hot paths say what they touch (`touches`), and those
//! that touch nothing in common go as one statement ([`PgTransaction::defer_fusable`]): the
//! submit's occurrence counter, lease renewal, step and events are one statement, the
//! complete's step and event another. A write transaction's read of an execution takes the
//! execution's transaction key in the same statement (see `locks`).
//!
//! Submodules: `base` (the statement, decoding, paging, prefetching and locking helpers every
//! operation runs through), `touches` (what the held-back writes touch), the bodies of the
//! operations on events, approvals and dispatches (`events`, `approvals`, `dispatches`; those
//! on agents, executions and steps are here), and the other groups of operations: `keys`,
//! `console_sessions`, `sessions`, `resources`, `subagents`.

use super::rows::{
    AGENT_COLS, EXEC_COLS, STEP_COLS, agent_row, exec_row, json_in, parse, step_row,
};
use crate::protocol::Timestamp;
use crate::protocol::{
    Agent, Approval, Dispatch, DispatchStatus, Event, EventType, Execution, ExecutionStatus, Step,
    StepKind, StepStatus,
};
use crate::store::{
    AgentTx, ApprovalTx, DispatchTx, EventTx, ExecutionQuery, ExecutionTx, Lookup, OccurrenceKey,
    Page, StepTx, StoreError, StoreResult, Tx,
};
use durable_support::pg::postgres::Row;
use durable_support::pg::postgres::types::{ToSql, Type};
use durable_support::pg::{Param, PgTransaction, Request};
use serde_json::Value;

/// Typed parameters: `params![value => TEXT, n => INT8]`.
macro_rules! params {
    ($($v:expr => $t:ident),* $(,)?) => {
        &[$((&$v as &(dyn ToSql + Sync), Type::$t)),*] as &[Param<'_>]
    };
}

/// The statuses a step keeps once reached (`put_step` never moves it out of them).
const TERMINAL_STEP: &str = "('succeeded', 'failed', 'denied', 'cancelled')";

/// The operations of one PostgreSQL transaction.
pub(super) struct PgTx<'a> {
    /// The transaction (its statements prepared once per connection, and pipelined).
    tx: &'a mut PgTransaction,
    /// A write transaction locks what it reads of executions and dispatches.
    write: bool,
    /// The first statement that failed: PostgreSQL has aborted the transaction, and a commit
    /// would roll it back without an error, so the store refuses to report it committed.
    failed: Option<String>,
    /// Executions whose row this write transaction already holds `FOR UPDATE` (appending
    /// events need not lock it again: one statement fewer).
    locked: Vec<String>,
    /// The answers of announced reads ([`Tx::prefetch`]), by the statement each answers; none
    /// is kept past a write.
    prefetched: Vec<(Request, Vec<Row>)>,
    /// While reads are announced: the statements they send.
    recording: Option<Vec<Request>>,
    /// What lock names start with (see `locks`).
    lock_prefix: &'a str,
    /// Dispatches whose row this write transaction already holds `FOR UPDATE` (advancing an
    /// occurrence counter need not lock it again, so it may go in one statement with the
    /// lease's renewal).
    locked_dispatches: Vec<String>,
    /// The key this write signs the heads of the logs it extends with (see `events`).
    signer: Option<std::sync::Arc<crate::store::chain::SigningKey>>,
    /// The heads of the logs this transaction extended: `(execution, length, hash, when)`.
    heads: Vec<crate::store::chain::Head>,
}

/// How many rows a page of `limit` reads: one more, to learn whether another page follows.
fn fetch(limit: usize) -> i64 {
    i64::try_from(limit)
        .unwrap_or(i64::MAX - 1)
        .saturating_add(1)
}

/// A row count or limit as a bigint.
fn big(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Tx for PgTx<'_> {
    crate::store::groups_on_self!();

    fn prefetch(&mut self, lookups: &[Lookup<'_>]) -> StoreResult<()> {
        self.announce(lookups)
    }
}

impl AgentTx for PgTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Agent>> {
        self.one(&base::agent_sql_by_id(), params![id => TEXT], agent_row)
    }

    fn secret(&mut self, id: &str) -> StoreResult<Option<String>> {
        self.one(
            "SELECT secret FROM agents WHERE id = $1",
            params![id => TEXT],
            |r| r.try_get(0).map_err(|e| e.to_string()),
        )
    }

    fn put(&mut self, a: &Agent) -> StoreResult<()> {
        self.defer(
            "INSERT INTO agents (id, webhook_url, secret, policy_bundle, registered_at, metadata,
               lease_timeout_seconds, dispatch_retry)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (id) DO UPDATE SET webhook_url = excluded.webhook_url,
               secret = excluded.secret, policy_bundle = excluded.policy_bundle,
               registered_at = excluded.registered_at, metadata = excluded.metadata,
               lease_timeout_seconds = excluded.lease_timeout_seconds,
               dispatch_retry = excluded.dispatch_retry",
            params![a.id => TEXT, a.webhook_url => TEXT, a.secret => TEXT,
                    a.policy_bundle => TEXT, a.registered_at => TEXT,
                    crate::store::metadata_text(a) => TEXT,
                    a.lease_timeout_seconds => FLOAT8,
                    crate::store::retry_text(a) => TEXT],
        )
    }

    fn delete(&mut self, id: &str) -> StoreResult<bool> {
        Ok(self.exec("DELETE FROM agents WHERE id = $1", params![id => TEXT])? > 0)
    }

    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<Agent>> {
        self.page(
            &format!(
                "SELECT {AGENT_COLS} FROM agents WHERE id > coalesce($1, '') ORDER BY id LIMIT $2"
            ),
            params![after => TEXT, fetch(limit) => INT8],
            limit,
            0,
            agent_row,
        )
    }

    fn execution_count(&mut self, id: &str) -> StoreResult<u64> {
        self.count(
            "SELECT count(*) FROM executions WHERE agent_id = $1",
            params![id => TEXT],
        )
    }
}

impl ExecutionTx for PgTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Execution>> {
        self.execution_row(EXEC_COLS, id, exec_row)
    }

    fn by_idempotency_key(
        &mut self,
        created_by: &str,
        key: &str,
    ) -> StoreResult<Option<Execution>> {
        self.one(
            &format!(
                "SELECT {EXEC_COLS} FROM executions WHERE created_by = $1 AND idempotency_key = $2"
            ),
            params![created_by => TEXT, key => TEXT],
            exec_row,
        )
    }

    fn state(&mut self, id: &str) -> StoreResult<Option<(String, ExecutionStatus)>> {
        self.execution_row("agent_id, status", id, |r| {
            Ok((
                r.try_get(0).map_err(|e| e.to_string())?,
                parse::<ExecutionStatus>(r, 1)?,
            ))
        })
    }

    fn agent_of(&mut self, id: &str) -> StoreResult<Option<String>> {
        self.one(
            "SELECT agent_id FROM executions WHERE id = $1",
            params![id => TEXT],
            |r| r.try_get(0).map_err(|e| e.to_string()),
        )
    }

    fn policy_bundle(&mut self, id: &str) -> StoreResult<Option<String>> {
        let sql = "SELECT policy_bundle FROM executions WHERE id = $1";
        self.one(sql, params![id => TEXT], |r| {
            r.try_get(0).map_err(|e| e.to_string())
        })
    }

    fn put(&mut self, e: &Execution) -> StoreResult<()> {
        // `ended_at` is set once, by the update that makes the execution terminal, and never
        // moves afterwards: retention counts from it.
        self.defer_with(
            "INSERT INTO executions (id, agent_id, agent_version, input, status, output, failure_reason, created_at, updated_at, deadline_at, ended_at, created_by, idempotency_key, on_behalf_of, subject_groups, session, parent_execution_id, forked_from, fork_seq, restoration, spawned_by_execution, spawned_by_step, state, policy_bundle, trace_parent, policy_bundle_set_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
               CASE WHEN $5 IN ('completed', 'failed', 'cancelled') THEN $9 END, $11, NULLIF($12, ''), $13, $14,
               $15, NULLIF($16, ''), NULLIF($17, ''), $18, $19, $20, $21, $22, $23, $24, $25)
             ON CONFLICT (id) DO UPDATE SET agent_version = excluded.agent_version, input = excluded.input,
               status = excluded.status, output = excluded.output, failure_reason = excluded.failure_reason,
               updated_at = excluded.updated_at, deadline_at = excluded.deadline_at,
               ended_at = coalesce(executions.ended_at, excluded.ended_at),
               restoration = excluded.restoration, state = excluded.state,
               parent_execution_id = excluded.parent_execution_id",
            params![
                e.id => TEXT,
                e.agent_id => TEXT,
                e.agent_version => TEXT,
                e.input.to_string() => TEXT,
                e.status.as_str() => TEXT,
                json_in(&e.output) => TEXT,
                e.failure_reason => TEXT,
                e.created_at => TEXT,
                e.updated_at => TEXT,
                e.deadline_at => TEXT,
                e.created_by => TEXT,
                e.idempotency_key => TEXT,
                e.on_behalf_of => TEXT,
                crate::store::names_text(&e.subject_groups) => TEXT,
                e.session => TEXT,
                e.parent_execution_id => TEXT,
                e.forked_from => TEXT,
                i64::try_from(e.fork_seq).unwrap_or(i64::MAX) => INT8,
                json_in(&e.restoration) => TEXT,
                e.spawned_by.as_ref().map(|s| s.execution_id.as_str()) => TEXT,
                e.spawned_by.as_ref().map(|s| s.step_id.as_str()) => TEXT,
                json_in(&e.state) => TEXT,
                e.policy_bundle => TEXT,
                e.trace_parent => TEXT,
                e.policy_bundle_set_by => TEXT,
            ],
            Some(touches::EXECUTION),
        )
    }

    fn page(&mut self, q: &ExecutionQuery) -> StoreResult<Page<Execution>> {
        let forks = crate::store::forks_condition(q, "$7::text");
        let sql = format!(
            "SELECT {EXEC_COLS} FROM executions
             WHERE ($1::text IS NULL OR agent_id = $1) AND ($2::text IS NULL OR status = $2)
               AND ($3::text IS NULL OR id < $3) AND ($5::text IS NULL OR session = $5)
               AND ($6::text IS NULL OR spawned_by_execution = $6) AND {forks}
             ORDER BY id DESC LIMIT $4{}",
            self.lock()
        );
        self.page(
            &sql,
            params![q.agent_id => TEXT, q.status => TEXT, q.before_id => TEXT,
                    fetch(q.limit) => INT8, q.session => TEXT, q.spawned_by => TEXT,
                    q.forked_from => TEXT],
            q.limit,
            0,
            exec_row,
        )
    }

    fn past_deadline(&mut self, now: &Timestamp, limit: usize) -> StoreResult<Vec<Execution>> {
        let sql = format!(
            "SELECT {EXEC_COLS} FROM executions WHERE status IN ('pending', 'running', 'blocked')
             AND deadline_at IS NOT NULL AND deadline_at <= $1 ORDER BY deadline_at LIMIT $2{}",
            self.lock()
        );
        self.all(&sql, params![now => TEXT, big(limit) => INT8], exec_row)
    }

    fn delete_terminal_before(&mut self, cutoff: &Timestamp, limit: usize) -> StoreResult<u64> {
        // A replica sweeping at the same time takes other rows rather than waiting for these.
        let ids: Vec<String> = self.all(
            "SELECT id FROM executions WHERE ended_at IS NOT NULL AND ended_at < $1
             AND status IN ('completed', 'failed', 'cancelled') ORDER BY ended_at LIMIT $2
             FOR UPDATE SKIP LOCKED",
            params![cutoff => TEXT, big(limit) => INT8],
            |r| r.try_get(0).map_err(|e| e.to_string()),
        )?;
        if ids.is_empty() {
            return Ok(0);
        }
        self.exec(
            "DELETE FROM dispatch_step_counters WHERE dispatch_id IN
               (SELECT id FROM dispatches WHERE execution_id = ANY($1))",
            params![ids => TEXT_ARRAY],
        )?;
        // Signed heads are kept apart from the events here (SQLite keeps them on the events).
        for table in crate::store::EXECUTION_CHILD_TABLES
            .iter()
            .chain(&["event_heads"])
        {
            self.exec(
                &format!("DELETE FROM {table} WHERE execution_id = ANY($1)"),
                params![ids => TEXT_ARRAY],
            )?;
        }
        self.exec(
            "DELETE FROM sessions WHERE last_completed = ANY($1)",
            params![ids => TEXT_ARRAY],
        )?;
        self.exec(
            "DELETE FROM executions WHERE id = ANY($1)",
            params![ids => TEXT_ARRAY],
        )?;
        Ok(ids.len() as u64)
    }

    fn counts(&mut self) -> StoreResult<Vec<(String, u64)>> {
        self.all(
            "SELECT status, count(*) FROM executions GROUP BY status ORDER BY status",
            &[],
            |r| {
                let n: i64 = r.try_get(1).map_err(|e| e.to_string())?;
                Ok((r.try_get(0).map_err(|e| e.to_string())?, n.max(0) as u64))
            },
        )
    }

    fn try_lock(&mut self, execution_id: &str) -> StoreResult<bool> {
        self.try_lock(execution_id)
    }
}

impl EventTx for PgTx<'_> {
    fn append(
        &mut self,
        execution_id: &str,
        occurred_at: &Timestamp,
        events: &[(EventType, Value)],
    ) -> StoreResult<u64> {
        events::append_events(self, execution_id, occurred_at, events)
    }

    fn record(
        &mut self,
        execution_id: &str,
        occurred_at: &Timestamp,
        events: &[(EventType, Value)],
    ) -> StoreResult<()> {
        events::record_events(self, execution_id, occurred_at, events)
    }

    fn has(&mut self, execution_id: &str, event_type: EventType) -> StoreResult<bool> {
        events::has_event(self, execution_id, event_type)
    }

    fn page(
        &mut self,
        execution_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Page<Event>> {
        events::events(self, execution_id, after_seq, limit)
    }

    fn checkpoints(
        &mut self,
        execution_id: &str,
    ) -> StoreResult<Vec<crate::store::chain::SignedHead>> {
        events::checkpoints(self, execution_id)
    }

    fn latest_checkpoint(
        &mut self,
        execution_id: &str,
    ) -> StoreResult<Option<crate::store::chain::SignedHead>> {
        events::latest_checkpoint(self, execution_id)
    }
}

impl StepTx for PgTx<'_> {
    fn get(&mut self, execution_id: &str, step_id: &str) -> StoreResult<Option<Step>> {
        self.one(
            &format!("SELECT {STEP_COLS} FROM steps WHERE execution_id = $1 AND step_id = $2"),
            params![execution_id => TEXT, step_id => TEXT],
            step_row,
        )
    }

    fn exists(&mut self, execution_id: &str, step_id: &str) -> StoreResult<bool> {
        self.exists(
            "SELECT 1 FROM steps WHERE execution_id = $1 AND step_id = $2",
            params![execution_id => TEXT, step_id => TEXT],
        )
    }

    fn put(&mut self, s: &Step) -> StoreResult<()> {
        let keep = |col: &str| {
            format!(
                "{col} = CASE WHEN steps.status IN {TERMINAL_STEP} THEN steps.{col} ELSE excluded.{col} END"
            )
        };
        let sql = format!(
            "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, args, result, error, started_at, completed_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             ON CONFLICT (execution_id, step_id) DO UPDATE SET
               idempotency = excluded.idempotency, args = excluded.args, started_at = excluded.started_at,
               {}, {}, {}, {}",
            keep("status"),
            keep("result"),
            keep("error"),
            keep("completed_at")
        );
        let occurrence = i64::try_from(s.occurrence)
            .map_err(|_| StoreError::Database("occurrence out of range".into()))?;
        self.defer_with(
            &sql,
            params![
                s.step_id => TEXT,
                s.execution_id => TEXT,
                s.kind.as_str() => TEXT,
                s.target => TEXT,
                s.args_hash => TEXT,
                occurrence => INT8,
                s.status.as_str() => TEXT,
                s.idempotency.as_str() => TEXT,
                json_in(&s.args) => TEXT,
                json_in(&s.result) => TEXT,
                json_in(&s.error) => TEXT,
                s.started_at => TEXT,
                s.completed_at => TEXT,
            ],
            Some(touches::STEP),
        )
    }

    fn page(
        &mut self,
        execution_id: &str,
        after: Option<&str>,
        terminal_only: bool,
        limit: usize,
    ) -> StoreResult<Page<Step>> {
        self.page(
            &format!(
                "SELECT {STEP_COLS} FROM steps WHERE execution_id = $1 AND step_id > coalesce($2, '')
                 AND (NOT $3 OR status IN {TERMINAL_STEP})
                 ORDER BY step_id LIMIT $4"
            ),
            params![execution_id => TEXT, after => TEXT, terminal_only => BOOL,
                    fetch(limit) => INT8],
            limit,
            0,
            step_row,
        )
    }

    fn in_status(&mut self, execution_id: &str, status: StepStatus) -> StoreResult<Vec<Step>> {
        self.all(
            &format!(
                "SELECT {STEP_COLS} FROM steps WHERE execution_id = $1 AND status = $2 ORDER BY step_id"
            ),
            params![execution_id => TEXT, status.as_str() => TEXT],
            step_row,
        )
    }

    fn has_indeterminate_failure(
        &mut self,
        execution_id: &str,
        kind: &StepKind,
        target: &str,
        args_hash: &str,
    ) -> StoreResult<bool> {
        // The error's `reason` is read here rather than by the server: the column holds the
        // kernel's JSON text, which `jsonb` may refuse (a `\u0000` escape, say).
        let errors = self.all(
            "SELECT step_id, error FROM steps WHERE execution_id = $1 AND kind = $2 AND target = $3
             AND args_hash = $4 AND status = 'failed' AND error IS NOT NULL",
            params![execution_id => TEXT, kind.as_str() => TEXT, target => TEXT,
                    args_hash => TEXT],
            |r| {
                let text: &str = r.try_get(1).map_err(|e| e.to_string())?;
                serde_json::from_str::<Value>(text).map_err(|e| format!("column 1: {e}"))
            },
        )?;
        Ok(errors
            .iter()
            .any(|e| e.get("reason").and_then(Value::as_str) == Some("indeterminate")))
    }
}

impl ApprovalTx for PgTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Approval>> {
        approvals::approval(self, id)
    }

    fn put(&mut self, a: &Approval) -> StoreResult<()> {
        approvals::put_approval(self, a)
    }

    fn pending(&mut self, execution_id: Option<&str>) -> StoreResult<Vec<Approval>> {
        approvals::pending_approvals(self, execution_id)
    }

    fn pending_page(
        &mut self,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Option<Page<Approval>>> {
        approvals::pending_approvals_page(self, after, limit)
    }

    fn pending_for_step(&mut self, step_id: &str) -> StoreResult<Option<Approval>> {
        approvals::pending_approval_for_step(self, step_id)
    }

    fn due(&mut self, now: &Timestamp, limit: usize) -> StoreResult<Vec<Approval>> {
        approvals::due_approvals(self, now, limit)
    }

    fn next_timeout(&mut self) -> StoreResult<Option<Timestamp>> {
        approvals::next_approval_timeout(self)
    }
}

impl DispatchTx for PgTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Dispatch>> {
        dispatches::dispatch(self, id)
    }

    fn lease(&mut self, id: &str) -> StoreResult<Option<(String, u32, DispatchStatus)>> {
        dispatches::dispatch_lease(self, id)
    }

    fn put(&mut self, d: &Dispatch) -> StoreResult<()> {
        dispatches::put_dispatch(self, d)
    }

    fn renew(&mut self, id: &str, attempt: u32, now: &Timestamp) -> StoreResult<bool> {
        dispatches::renew_dispatch(self, id, attempt, now)
    }

    fn record_renewal(&mut self, id: &str, attempt: u32, now: &Timestamp) -> StoreResult<()> {
        dispatches::record_renewal(self, id, attempt, now)
    }

    fn of_execution(&mut self, execution_id: &str) -> StoreResult<Vec<Dispatch>> {
        dispatches::dispatches_of(self, execution_id)
    }

    fn claimable_except(
        &mut self,
        now: &Timestamp,
        limit: usize,
        skip_agents: &[String],
    ) -> StoreResult<Vec<(Dispatch, String)>> {
        dispatches::claimable_dispatches_except(self, now, limit, skip_agents)
    }

    fn wake_agent(&mut self, agent_id: &str, now: &Timestamp) -> StoreResult<Vec<(String, u32)>> {
        dispatches::wake_agent_dispatches(self, agent_id, now)
    }

    fn in_flight_leases(&mut self) -> StoreResult<Vec<(Dispatch, Option<f64>)>> {
        dispatches::in_flight_leases(self)
    }

    fn queue_depth(&mut self) -> StoreResult<u64> {
        dispatches::queue_depth(self)
    }

    fn attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        key: &OccurrenceKey,
    ) -> StoreResult<Option<u64>> {
        dispatches::attempt_occurrence(self, dispatch_id, attempt, key)
    }

    fn advance_attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        key: &OccurrenceKey,
        occurrence: u64,
    ) -> StoreResult<()> {
        dispatches::advance_attempt_occurrence(self, dispatch_id, attempt, key, occurrence)
    }
}

mod approvals;
mod base;
mod console_sessions;
mod dispatches;
mod events;
mod keys;
mod resources;
mod sessions;
mod subagents;
mod touches;
