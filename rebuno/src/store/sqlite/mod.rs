//! The SQLite [`Store`]: one file in WAL mode (or an in-memory database), the schema applied
//! from embedded, numbered migrations ([`migrations`]), group commit on one writer
//! thread ([`writer`]), reads on reader threads ([`readers`]).
//!
//! Durability is pipelined ([`durable`]): the writer commits a group without syncing
//! and a sync thread makes it durable before anyone hears of it. Readers may see a group
//! before its sync ends, so a read is answered only once every group it could have seen is
//! durable ([`Store::settle`]); the kernel's own reads that are followed by a write skip that
//! wait, since the write is answered after a later sync. A deferred write is answered at its
//! commit and made durable by the next sync (see [`durable`]). If the WAL file cannot
//! be opened, SQLite syncs each commit itself (`synchronous=FULL`).
//!
//! Submodules: `open` (opening a file or memory store, reads on reader threads), `migrations`
//! (the schema), `writer`, `readers`, `conn` (the connection a store thread runs jobs on),
//! `handoff` (handing a job to a store thread), `durable` and `checkpoint` (syncs and WAL
//! checkpoints), `rows` (decoding rows and paging), and the operations of a transaction beyond
//! the groups implemented here (agents, executions, steps, approvals, dispatches): `events`
//! (the hash-linked event log and its signed heads), `keys`, `console_sessions`, `sessions`, `resources`, `subagents`; and `tests` (unit tests of
//! the writer thread, group commit and counters).

use super::AGENT_LEASE;
use super::chain::{Signer, SigningKey};
use super::{
    AgentTx, ApprovalTx, DispatchTx, ExecutionQuery, ExecutionTx, OccurrenceKey, Page, StepTx,
    Store, StoreError, StoreResult, Tx, TxFn, forks_condition,
};
use crate::protocol::Timestamp;
use crate::protocol::{
    Agent, Approval, Dispatch, DispatchStatus, Execution, ExecutionStatus, Step, StepKind,
    StepStatus,
};
use async_trait::async_trait;
use durable::Durable;
use readers::Readers;
use rows::{
    AGENT_COLS, APPROVAL_COLS, DISPATCH_COLS, EXEC_COLS, STEP_COLS, agent_row, all, approval_row,
    dispatch_row, exec_row, json_in, one, page, parse, step_row,
};
use rusqlite::{Connection, params};
use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;
use writer::Writer;

/// The SQLite kernel store.
pub struct SqliteStore {
    path: Option<PathBuf>,
    writer: Writer,
    readers: Readers,
    /// Commit and sync progress of a file store (`None` in memory).
    durable: Option<Arc<Durable>>,
    /// Where commit and sync latencies go.
    timings: super::StoreTimings,
    /// The key the writer signs heads of event logs with, once one is set.
    signer: Signer,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.writer.write(f).await
    }

    async fn write_deferred_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.writer.write_deferred(f).await
    }

    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        let out = self.read_on_reader(f).await;
        // The snapshot may include groups committed but not yet synced: answer only once they
        // are durable, so no reader ever acts on what a power loss could take back.
        self.settle().await?;
        out
    }

    async fn read_unsettled_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.read_on_reader(f).await
    }

    async fn settle(&self) -> StoreResult<()> {
        match &self.durable {
            Some(durable) => durable.settle().await,
            None => Ok(()),
        }
    }

    async fn settle_durable_writes(&self) -> StoreResult<()> {
        match &self.durable {
            Some(durable) => durable.settle_durable_writes().await,
            None => Ok(()),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        self.readers
            .run(Box::new(|conn| {
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
                Ok(Box::new(()))
            }))
            .await
            .map(drop)
    }

    fn backend(&self) -> &'static str {
        if self.path.is_some() {
            "sqlite"
        } else {
            "memory"
        }
    }

    fn timings(&self) -> Option<&super::StoreTimings> {
        Some(&self.timings)
    }

    fn set_signing_key(&self, key: Arc<SigningKey>) -> StoreResult<()> {
        self.signer.set(key)
    }

    fn signing_public_key(&self) -> Option<super::chain::PublicKey> {
        self.signer.get().map(|k| k.public())
    }
}

/// The [`Tx`] of the SQLite store, over whichever transaction its connection has open.
pub(super) struct SqliteTx<'c> {
    conn: &'c Connection,
    /// Where a write with a signing key notes the heads of the event logs it extends; the
    /// writer signs those of a group commit together before it commits ([`events::sign_group`]).
    heads: Option<&'c std::cell::RefCell<Vec<super::chain::Head>>>,
}

impl<'c> SqliteTx<'c> {
    /// The operations of the transaction open on `conn`.
    pub(super) fn new(conn: &'c Connection) -> Self {
        SqliteTx { conn, heads: None }
    }

    /// [`SqliteTx::new`] for a write whose extended heads are noted in `heads`, to be signed.
    pub(super) fn signing(
        conn: &'c Connection,
        heads: Option<&'c std::cell::RefCell<Vec<super::chain::Head>>>,
    ) -> Self {
        SqliteTx { conn, heads }
    }

    fn exec(&self, sql: &str, p: impl rusqlite::Params) -> StoreResult<usize> {
        self.writable()?;
        Ok(self.conn.prepare_cached(sql)?.execute(p)?)
    }

    /// Refuses a write outside a transaction: SQLite may have rolled the change's transaction
    /// back by itself (an error the change ignored), and a write now would commit on its own.
    fn writable(&self) -> StoreResult<()> {
        if self.conn.is_autocommit() {
            return Err(StoreError::Database(
                "the transaction was rolled back; nothing more is written".into(),
            ));
        }
        Ok(())
    }
}

/// How many rows a page of `limit` reads: one more, to learn whether another page follows.
pub(super) fn fetch(limit: usize) -> i64 {
    i64::try_from(limit)
        .unwrap_or(i64::MAX - 1)
        .saturating_add(1)
}

impl Tx for SqliteTx<'_> {
    crate::store::groups_on_self!();
}

impl AgentTx for SqliteTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Agent>> {
        one(
            self.conn,
            &format!("SELECT {AGENT_COLS} FROM agents WHERE id = ?1"),
            params![id],
            agent_row,
        )
    }

    fn secret(&mut self, id: &str) -> StoreResult<Option<String>> {
        one(
            self.conn,
            "SELECT secret FROM agents WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )
    }

    fn put(&mut self, a: &Agent) -> StoreResult<()> {
        self.exec(
            "INSERT OR REPLACE INTO agents (id, webhook_url, secret, policy_bundle, registered_at, metadata, lease_timeout_seconds, dispatch_retry) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![a.id, a.webhook_url, a.secret, a.policy_bundle, a.registered_at, super::metadata_text(a), a.lease_timeout_seconds, super::retry_text(a)],
        )?;
        Ok(())
    }

    fn delete(&mut self, id: &str) -> StoreResult<bool> {
        Ok(self.exec("DELETE FROM agents WHERE id = ?1", params![id])? > 0)
    }

    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<Agent>> {
        page(
            self.conn,
            &format!(
                "SELECT {AGENT_COLS} FROM agents WHERE id > coalesce(?1, '') ORDER BY id LIMIT ?2"
            ),
            params![after, fetch(limit)],
            limit,
            0,
            agent_row,
        )
    }

    fn execution_count(&mut self, id: &str) -> StoreResult<u64> {
        Ok(self
            .conn
            .prepare_cached("SELECT count(*) FROM executions WHERE agent_id = ?1")?
            .query_row(params![id], |r| r.get::<_, i64>(0))? as u64)
    }
}

impl ExecutionTx for SqliteTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Execution>> {
        one(
            self.conn,
            &format!("SELECT {EXEC_COLS} FROM executions WHERE id = ?1"),
            params![id],
            exec_row,
        )
    }

    fn by_idempotency_key(
        &mut self,
        created_by: &str,
        key: &str,
    ) -> StoreResult<Option<Execution>> {
        one(
            self.conn,
            &format!(
                "SELECT {EXEC_COLS} FROM executions WHERE created_by = ?1 AND idempotency_key = ?2"
            ),
            params![created_by, key],
            exec_row,
        )
    }

    fn state(&mut self, id: &str) -> StoreResult<Option<(String, ExecutionStatus)>> {
        one(
            self.conn,
            "SELECT agent_id, status FROM executions WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, parse::<ExecutionStatus>(r.get(1)?)?)),
        )
    }

    fn policy_bundle(&mut self, id: &str) -> StoreResult<Option<String>> {
        let sql = "SELECT policy_bundle FROM executions WHERE id = ?1";
        one(self.conn, sql, params![id], |r| r.get(0))
    }

    fn put(&mut self, e: &Execution) -> StoreResult<()> {
        // `ended_at` is set once, by the update that makes the execution terminal, and never
        // moves afterwards: retention counts from it.
        self.exec(
            "INSERT INTO executions (id, agent_id, agent_version, input, status, output, failure_reason, created_at, updated_at, deadline_at, ended_at, created_by, idempotency_key, on_behalf_of, subject_groups, session, parent_execution_id, forked_from, fork_seq, restoration, spawned_by_execution, spawned_by_step, state, policy_bundle, trace_parent, policy_bundle_set_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
               CASE WHEN ?5 IN ('completed', 'failed', 'cancelled') THEN ?9 END, ?11, NULLIF(?12, ''), ?13, ?14,
               ?15, NULLIF(?16, ''), NULLIF(?17, ''), ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)
             ON CONFLICT (id) DO UPDATE SET agent_version = excluded.agent_version, input = excluded.input,
               status = excluded.status, output = excluded.output, failure_reason = excluded.failure_reason,
               updated_at = excluded.updated_at, deadline_at = excluded.deadline_at,
               ended_at = coalesce(executions.ended_at, excluded.ended_at),
               restoration = excluded.restoration, state = excluded.state,
               parent_execution_id = excluded.parent_execution_id",
            params![
                e.id,
                e.agent_id,
                e.agent_version,
                e.input.to_string(),
                e.status.as_str(),
                json_in(&e.output),
                e.failure_reason,
                e.created_at,
                e.updated_at,
                e.deadline_at,
                e.created_by,
                e.idempotency_key,
                e.on_behalf_of,
                super::names_text(&e.subject_groups),
                e.session,
                e.parent_execution_id,
                e.forked_from,
                i64::try_from(e.fork_seq).unwrap_or(i64::MAX),
                json_in(&e.restoration),
                e.spawned_by.as_ref().map(|s| s.execution_id.as_str()),
                e.spawned_by.as_ref().map(|s| s.step_id.as_str()),
                json_in(&e.state),
                e.policy_bundle,
                e.trace_parent,
                e.policy_bundle_set_by
            ],
        )?;
        Ok(())
    }

    fn page(&mut self, q: &ExecutionQuery) -> StoreResult<Page<Execution>> {
        let forks = forks_condition(q, "?7");
        page(
            self.conn,
            &format!(
                "SELECT {EXEC_COLS} FROM executions
                 WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR id < ?3)
                   AND (?5 IS NULL OR session = ?5) AND (?6 IS NULL OR spawned_by_execution = ?6)
                   AND {forks}
                 ORDER BY id DESC LIMIT ?4"
            ),
            params![q.agent_id, q.status, q.before_id, fetch(q.limit), q.session, q.spawned_by, q.forked_from],
            q.limit,
            0,
            exec_row,
        )
    }

    fn past_deadline(&mut self, now: &Timestamp, limit: usize) -> StoreResult<Vec<Execution>> {
        all(
            self.conn,
            &format!(
                "SELECT {EXEC_COLS} FROM executions WHERE status IN ('pending', 'running', 'blocked')
                 AND deadline_at IS NOT NULL AND deadline_at <= ?1 ORDER BY deadline_at LIMIT ?2"
            ),
            params![now, limit as i64],
            exec_row,
        )
    }

    fn delete_terminal_before(&mut self, cutoff: &Timestamp, limit: usize) -> StoreResult<u64> {
        let ids: Vec<String> = all(
            self.conn,
            "SELECT id FROM executions WHERE ended_at IS NOT NULL AND ended_at < ?1
             AND status IN ('completed', 'failed', 'cancelled') ORDER BY ended_at LIMIT ?2",
            params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| r.get(0),
        )?;
        for id in &ids {
            for table in super::EXECUTION_CHILD_TABLES {
                self.exec(
                    &format!("DELETE FROM {table} WHERE execution_id = ?1"),
                    params![id],
                )?;
            }
            self.exec(
                "DELETE FROM sessions WHERE last_completed = ?1",
                params![id],
            )?;
            self.exec("DELETE FROM executions WHERE id = ?1", params![id])?;
        }
        Ok(ids.len() as u64)
    }

    fn counts(&mut self) -> StoreResult<Vec<(String, u64)>> {
        all(
            self.conn,
            "SELECT status, count(*) FROM executions GROUP BY status ORDER BY status",
            [],
            |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)),
        )
    }
}

impl StepTx for SqliteTx<'_> {
    fn get(&mut self, execution_id: &str, step_id: &str) -> StoreResult<Option<Step>> {
        one(
            self.conn,
            &format!("SELECT {STEP_COLS} FROM steps WHERE execution_id = ?1 AND step_id = ?2"),
            params![execution_id, step_id],
            step_row,
        )
    }

    fn exists(&mut self, execution_id: &str, step_id: &str) -> StoreResult<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM steps WHERE execution_id = ?1 AND step_id = ?2")?
            .exists(params![execution_id, step_id])?)
    }

    fn put(&mut self, s: &Step) -> StoreResult<()> {
        self.exec(
            "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, args, result, error, started_at, completed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT (execution_id, step_id) DO UPDATE SET
               idempotency = excluded.idempotency, args = excluded.args, started_at = excluded.started_at,
               status = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.status ELSE excluded.status END,
               result = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.result ELSE excluded.result END,
               error = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.error ELSE excluded.error END,
               completed_at = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.completed_at ELSE excluded.completed_at END",
            params![
                s.step_id,
                s.execution_id,
                s.kind.as_str(),
                s.target,
                s.args_hash,
                s.occurrence as i64,
                s.status.as_str(),
                s.idempotency.as_str(),
                json_in(&s.args),
                json_in(&s.result),
                json_in(&s.error),
                s.started_at,
                s.completed_at
            ],
        )?;
        Ok(())
    }

    fn page(
        &mut self,
        execution_id: &str,
        after: Option<&str>,
        terminal_only: bool,
        limit: usize,
    ) -> StoreResult<Page<Step>> {
        page(
            self.conn,
            &format!(
                "SELECT {STEP_COLS} FROM steps WHERE execution_id = ?1 AND step_id > coalesce(?2, '')
                 AND (NOT ?3 OR status IN ('succeeded', 'failed', 'denied', 'cancelled'))
                 ORDER BY step_id LIMIT ?4"
            ),
            params![execution_id, after, terminal_only, fetch(limit)],
            limit,
            0,
            step_row,
        )
    }

    fn in_status(&mut self, execution_id: &str, status: StepStatus) -> StoreResult<Vec<Step>> {
        all(
            self.conn,
            &format!(
                "SELECT {STEP_COLS} FROM steps WHERE execution_id = ?1 AND status = ?2 ORDER BY step_id"
            ),
            params![execution_id, status.as_str()],
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
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM steps WHERE execution_id = ?1 AND kind = ?2 AND target = ?3 AND args_hash = ?4
                 AND status = 'failed' AND json_extract(error, '$.reason') = 'indeterminate'",
            )?
            .exists(params![execution_id, kind.as_str(), target, args_hash])?)
    }
}

impl ApprovalTx for SqliteTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Approval>> {
        one(
            self.conn,
            &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE id = ?1"),
            params![id],
            approval_row,
        )
    }

    fn put(&mut self, a: &Approval) -> StoreResult<()> {
        self.exec(
            "INSERT OR REPLACE INTO approvals (id, step_id, execution_id, status, approvers, message, timeout_at, decided_by, decided_at, rationale, created_at, asserted_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                a.id,
                a.step_id,
                a.execution_id,
                a.status.as_str(),
                json_in(&a.approvers),
                a.message,
                a.timeout_at,
                a.decided_by,
                a.decided_at,
                a.rationale,
                a.created_at,
                a.asserted_by
            ],
        )?;
        Ok(())
    }

    fn pending(&mut self, execution_id: Option<&str>) -> StoreResult<Vec<Approval>> {
        all(
            self.conn,
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND (?1 IS NULL OR execution_id = ?1)
                 ORDER BY created_at, id"
            ),
            params![execution_id],
            approval_row,
        )
    }

    fn pending_page(
        &mut self,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Option<Page<Approval>>> {
        // The cursor is an approval id; the page goes on from its place in the order.
        let after_created = match after {
            None => None,
            Some(id) => match one(
                self.conn,
                "SELECT created_at FROM approvals WHERE id = ?1",
                params![id],
                |r| r.get::<_, String>(0),
            )? {
                Some(created) => Some(created),
                None => return Ok(None),
            },
        };
        page(
            self.conn,
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending'
                 AND (?1 IS NULL OR created_at > ?2 OR (created_at = ?2 AND id > ?1))
                 ORDER BY created_at, id LIMIT ?3"
            ),
            params![after, after_created, fetch(limit)],
            limit,
            0,
            approval_row,
        )
        .map(Some)
    }

    fn pending_for_step(&mut self, step_id: &str) -> StoreResult<Option<Approval>> {
        one(
            self.conn,
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND step_id = ?1 ORDER BY created_at LIMIT 1"
            ),
            params![step_id],
            approval_row,
        )
    }

    fn due(&mut self, now: &Timestamp, limit: usize) -> StoreResult<Vec<Approval>> {
        all(
            self.conn,
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND timeout_at <= ?1 ORDER BY timeout_at LIMIT ?2"
            ),
            params![now, limit as i64],
            approval_row,
        )
    }

    fn next_timeout(&mut self) -> StoreResult<Option<Timestamp>> {
        Ok(self
            .conn
            .prepare_cached("SELECT min(timeout_at) FROM approvals WHERE status = 'pending'")?
            .query_row([], |r| r.get::<_, Option<Timestamp>>(0))?)
    }
}

impl DispatchTx for SqliteTx<'_> {
    fn get(&mut self, id: &str) -> StoreResult<Option<Dispatch>> {
        one(
            self.conn,
            &format!("SELECT {DISPATCH_COLS} FROM dispatches WHERE id = ?1"),
            params![id],
            dispatch_row,
        )
    }

    fn lease(&mut self, id: &str) -> StoreResult<Option<(String, u32, DispatchStatus)>> {
        one(
            self.conn,
            "SELECT execution_id, attempt, status FROM dispatches WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, parse::<DispatchStatus>(r.get(2)?)?)),
        )
    }

    fn put(&mut self, d: &Dispatch) -> StoreResult<()> {
        self.exec(
            "INSERT OR REPLACE INTO dispatches (id, execution_id, status, attempt, max_attempts, next_attempt_at, locked_by, locked_at, created_at, updated_at, last_error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                d.id,
                d.execution_id,
                d.status.as_str(),
                d.attempt,
                d.max_attempts,
                d.next_attempt_at,
                d.locked_by,
                d.locked_at,
                d.created_at,
                d.updated_at,
                d.last_error
            ],
        )?;
        // Counters belong to the attempt in flight: gone once it ends or is superseded.
        let sql = if d.status == DispatchStatus::InFlight {
            "DELETE FROM dispatch_step_counters WHERE dispatch_id = ?1 AND attempt <> ?2"
        } else {
            "DELETE FROM dispatch_step_counters WHERE dispatch_id = ?1 AND ?2 >= 0"
        };
        self.exec(sql, params![d.id, d.attempt])?;
        Ok(())
    }

    fn of_execution(&mut self, execution_id: &str) -> StoreResult<Vec<Dispatch>> {
        all(
            self.conn,
            &format!(
                "SELECT {DISPATCH_COLS} FROM dispatches WHERE execution_id = ?1 ORDER BY created_at, id"
            ),
            params![execution_id],
            dispatch_row,
        )
    }

    fn claimable_except(
        &mut self,
        now: &Timestamp,
        limit: usize,
        skip_agents: &[String],
    ) -> StoreResult<Vec<(Dispatch, String)>> {
        let skip =
            serde_json::to_string(skip_agents).map_err(|e| StoreError::Database(e.to_string()))?;
        all(
            self.conn,
            "SELECT d.id, d.execution_id, d.status, d.attempt, d.max_attempts, d.next_attempt_at,
                    d.locked_by, d.locked_at, d.created_at, d.updated_at, d.last_error, coalesce(e.agent_id, '')
             FROM dispatches d LEFT JOIN executions e ON e.id = d.execution_id
             WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= ?1
               AND coalesce(e.agent_id, '') NOT IN (SELECT value FROM json_each(?3))
             ORDER BY d.next_attempt_at LIMIT ?2",
            params![now, i64::try_from(limit).unwrap_or(i64::MAX), skip],
            |r| Ok((dispatch_row(r)?, r.get(11)?)),
        )
    }

    fn wake_agent(&mut self, agent_id: &str, now: &Timestamp) -> StoreResult<Vec<(String, u32)>> {
        all(
            self.conn,
            "UPDATE dispatches SET next_attempt_at = ?2
             WHERE status = 'failed' AND next_attempt_at > ?2
               AND execution_id IN (SELECT id FROM executions WHERE agent_id = ?1)
             RETURNING id, attempt",
            params![agent_id, now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    fn in_flight_leases(&mut self) -> StoreResult<Vec<(Dispatch, Option<f64>)>> {
        all(
            self.conn,
            &format!(
                "SELECT {DISPATCH_COLS}, {AGENT_LEASE} FROM dispatches WHERE status = 'in_flight'"
            ),
            [],
            |r| Ok((dispatch_row(r)?, r.get(11)?)),
        )
    }

    fn queue_depth(&mut self) -> StoreResult<u64> {
        Ok(self
            .conn
            .prepare_cached("SELECT count(*) FROM dispatches WHERE status IN ('pending', 'failed', 'in_flight')")?
            .query_row([], |r| r.get::<_, i64>(0))? as u64)
    }

    fn attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        (kind, target, args_hash): &OccurrenceKey,
    ) -> StoreResult<Option<u64>> {
        one(
            self.conn,
            "SELECT consumed FROM dispatch_step_counters
             WHERE dispatch_id = ?1 AND attempt = ?2 AND kind = ?3 AND target = ?4 AND args_hash = ?5",
            params![dispatch_id, attempt, kind, target, args_hash],
            |r| Ok(r.get::<_, i64>(0)? as u64),
        )
    }

    fn advance_attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        (kind, target, args_hash): &OccurrenceKey,
        occurrence: u64,
    ) -> StoreResult<()> {
        let occurrence = i64::try_from(occurrence)
            .map_err(|_| StoreError::Database("occurrence out of range".into()))?;
        self.exec(
            "INSERT INTO dispatch_step_counters (dispatch_id, attempt, kind, target, args_hash, consumed)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6 FROM dispatches
             WHERE id = ?1 AND attempt = ?2 AND status = 'in_flight'
             ON CONFLICT (dispatch_id, kind, target, args_hash) DO UPDATE SET
                 consumed = CASE WHEN attempt = excluded.attempt
                                 THEN max(consumed, excluded.consumed) ELSE excluded.consumed END,
                 attempt = excluded.attempt",
            params![dispatch_id, attempt, kind, target, args_hash, occurrence],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;

mod checkpoint;
mod conn;
mod console_sessions;
mod durable;
mod events;
mod handoff;
mod keys;
mod migrations;
mod open;
mod readers;
mod resources;
mod rows;
mod sessions;
mod subagents;
mod writer;

#[doc(hidden)]
pub use durable::{SyncObserver, SyncPoint};
