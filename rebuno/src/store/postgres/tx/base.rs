//! The helpers every operation of [`PgTx`] runs through: statements prepared once per
//! connection and run with their parameter types, writes held back until the next read or the
//! commit, announced reads sent at once ([`Tx::prefetch`]), row decoding (a row that does not
//! decode is corrupt), paging, row locks in write transactions, and the first failure kept.

use super::super::locks::{TRY_LOCK_IN_TRANSACTION, lock_key, transaction_key};
use super::super::rows::{AGENT_COLS, Decode, corrupt, page};
use super::PgTx;
use crate::store::{Lookup, Page, StoreError, StoreResult, Tx};
use durable_support::pg::postgres::types::{ToSql, Type};
use durable_support::pg::postgres::{self, Row};
use durable_support::pg::{Param, PgTransaction, Queries, Request, Touches, describe};

impl<'a> PgTx<'a> {
    /// The operations of `tx`; `write` for a write transaction; lock names start with
    /// `lock_prefix`.
    pub(in super::super) fn new(
        tx: &'a mut PgTransaction,
        write: bool,
        lock_prefix: &'a str,
        signer: Option<std::sync::Arc<crate::store::chain::SigningKey>>,
    ) -> Self {
        PgTx {
            tx,
            write,
            failed: None,
            locked: Vec::new(),
            prefetched: Vec::new(),
            recording: None,
            lock_prefix,
            locked_dispatches: Vec::new(),
            signer: signer.filter(|_| write),
            heads: Vec::new(),
        }
    }

    /// The error of the first statement that failed, if any did.
    pub(in super::super) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// `FOR UPDATE` in a write transaction.
    pub(super) fn lock(&self) -> &'static str {
        if self.write { " FOR UPDATE" } else { "" }
    }

    /// The rows of `SELECT {cols} FROM executions WHERE id = $1`, decoded; in a write
    /// transaction `FOR UPDATE`, and holding the execution's transaction key shared until the
    /// transaction ends, which a new holder of the execution's lock waits for (see `locks`).
    /// The key is taken in the same statement, before the row is locked (a one-time filter
    /// the server evaluates before it scans: so whether the row exists or not), hence before
    /// any `COMMIT` of this transaction; taking it again is free.
    pub(super) fn execution_row<T>(
        &mut self,
        cols: &str,
        id: &str,
        decode: Decode<T>,
    ) -> StoreResult<Option<T>> {
        if !self.write {
            let sql = format!("SELECT {cols} FROM executions WHERE id = $1");
            return self.one(&sql, &[(&id as &(dyn ToSql + Sync), Type::TEXT)], decode);
        }
        let key = transaction_key(self.lock_prefix, id);
        let sql = format!(
            "SELECT {cols} FROM executions WHERE id = $1
             AND (SELECT pg_advisory_xact_lock_shared($2)::text) IS NOT NULL FOR UPDATE"
        );
        let found = self.one(
            &sql,
            &[(&id as &(dyn ToSql + Sync), Type::TEXT), (&key, Type::INT8)],
            decode,
        )?;
        if found.is_some() && !self.locked.iter().any(|l| l == id) {
            self.locked.push(id.to_owned());
        }
        Ok(found)
    }

    /// [`ExecutionTx::try_lock`]: [`TRY_LOCK_IN_TRANSACTION`], a read (so it can be
    /// announced, and leave first with the reads after it).
    pub(super) fn try_lock(&mut self, id: &str) -> StoreResult<bool> {
        let key = lock_key(self.lock_prefix, id);
        let drained = transaction_key(self.lock_prefix, id);
        let rows = self.rows(
            TRY_LOCK_IN_TRANSACTION,
            &[(&key, Type::INT8), (&drained, Type::INT8)],
        )?;
        Ok(rows
            .first()
            .and_then(|r| r.try_get::<_, bool>(0).ok())
            .unwrap_or(false))
    }

    /// Notes that a `FOR UPDATE` read of dispatch `id` found its row.
    pub(super) fn note_dispatch_locked<T>(&mut self, id: &str, found: &Option<T>) {
        if self.write && found.is_some() && !self.locked_dispatches.iter().any(|l| l == id) {
            self.locked_dispatches.push(id.to_owned());
        }
    }

    pub(super) fn fail(&mut self, e: &postgres::Error) -> StoreError {
        let message = describe(e);
        self.failed.get_or_insert_with(|| message.clone());
        StoreError::Database(message)
    }

    /// The rows `sql` selects: from an announced read's answer if one is kept, else from the
    /// server (with the writes held back before it). While reads are being announced, the
    /// statement is only noted, and answers no rows.
    pub(super) fn rows(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        if let Some(noted) = &mut self.recording {
            noted.push(Request::new(sql, p));
            return Ok(Vec::new());
        }
        if !self.prefetched.is_empty() {
            let request = Request::new(sql, p);
            if let Some(at) = self.prefetched.iter().position(|(r, _)| *r == request) {
                return Ok(self.prefetched.swap_remove(at).1);
            }
        }
        let out = self.tx.query_typed(sql, p);
        out.map_err(|e| self.fail(&e))
    }

    /// Runs a write and answers the rows it changed (sent at once, with the writes held back
    /// before it).
    pub(super) fn exec(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<u64> {
        self.written();
        let out = self.tx.execute_typed(sql, p);
        out.map_err(|e| self.fail(&e))
    }

    /// Holds a write back until the next read or the commit (its failure is reported there).
    pub(super) fn defer(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<()> {
        self.defer_with(sql, p, None)
    }

    /// [`PgTx::defer`]; with `touches`, the write may go as one statement with the held-back
    /// writes beside it that touch nothing it touches ([`PgTransaction::defer_fusable`]).
    pub(super) fn defer_with(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
        touches: Option<Touches>,
    ) -> StoreResult<()> {
        self.written();
        self.hold_back(sql, p, touches);
        Ok(())
    }

    /// [`PgTx::defer_with`] for a write of what no [`Lookup`] reads (the occurrence counters,
    /// a lease's renewal times): the announced answers stay good.
    pub(super) fn defer_unlooked(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
        touches: Option<Touches>,
    ) -> StoreResult<()> {
        self.hold_back(sql, p, touches);
        Ok(())
    }

    fn hold_back(&mut self, sql: &str, p: &[Param<'_>], touches: Option<Touches>) {
        match touches {
            Some(touches) => self.tx.defer_fusable(sql, p, touches),
            None => self.tx.defer(sql, p),
        }
    }

    /// A write makes every announced read's answer stale.
    fn written(&mut self) {
        self.prefetched.clear();
    }

    /// The first row `sql` selects, if any. A row that does not decode is corrupt.
    pub(super) fn one<T>(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
        decode: Decode<T>,
    ) -> StoreResult<Option<T>> {
        match self.rows(sql, p)?.first() {
            Some(r) => decode(r).map(Some).map_err(|e| corrupt(r, &e)),
            None => Ok(None),
        }
    }

    /// Every row `sql` selects. A row that does not decode is corrupt.
    pub(super) fn all<T>(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
        decode: Decode<T>,
    ) -> StoreResult<Vec<T>> {
        self.rows(sql, p)?
            .iter()
            .map(|r| decode(r).map_err(|e| corrupt(r, &e)))
            .collect()
    }

    pub(super) fn exists(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<bool> {
        Ok(!self.rows(sql, p)?.is_empty())
    }

    pub(super) fn count(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<u64> {
        let rows = self.rows(sql, p)?;
        let n: i64 = rows
            .first()
            .and_then(|r| r.try_get(0).ok())
            .ok_or_else(|| StoreError::Database("a count returned no row".into()))?;
        Ok(n.max(0) as u64)
    }

    /// A page of rows streamed from the server: reading stops once the page is full.
    pub(super) fn page<T>(
        &mut self,
        sql: &str,
        p: &[Param<'_>],
        limit: usize,
        cursor: usize,
        decode: Decode<T>,
    ) -> StoreResult<Page<T>> {
        let failed = {
            let streamed = self.tx.query_typed_raw(sql, p);
            match streamed {
                Ok(rows) => {
                    let mut failed = None;
                    let rows = rows.map_while(|r| match r {
                        Ok(row) => Some(Ok(row)),
                        Err(e) => {
                            failed = Some(e);
                            None
                        }
                    });
                    let out = page(rows, limit, cursor, decode);
                    match failed {
                        None => return out,
                        Some(e) => e,
                    }
                }
                Err(e) => e,
            }
        };
        Err(self.fail(&failed))
    }

    /// [`Tx::prefetch`]: each lookup's statement, as its call would send it, goes in one batch
    /// with the writes held back; the answers are kept for the calls. A lookup whose answer
    /// is kept already is not sent again, when all of them are. The statements are
    /// learnt by making the calls while only noting what they send (each lookup is one
    /// statement, whose rows decide its answer).
    pub(super) fn announce(&mut self, lookups: &[Lookup<'_>]) -> StoreResult<()> {
        self.recording = Some(Vec::new());
        for lookup in lookups {
            // The answers while noting are empty and mean nothing.
            let _ = match *lookup {
                Lookup::ExecutionLock(id) => self.try_lock(id).map(drop),
                Lookup::ExecutionState(id) => self.executions().state(id).map(drop),
                Lookup::ExecutionPolicyBundle(id) => self.executions().policy_bundle(id).map(drop),
                Lookup::AgentOfExecution(id) => {
                    let sql = agent_of_execution_sql();
                    self.rows(&sql, &[(&id as &(dyn ToSql + Sync), Type::TEXT)])
                        .map(drop)
                }
                Lookup::DispatchLease(id) => self.dispatches().lease(id).map(drop),
                Lookup::Step(execution, step) => self.steps().get(execution, step).map(drop),
                Lookup::StepExists(execution, step) => {
                    self.steps().exists(execution, step).map(drop)
                }
                Lookup::IndeterminateFailure(execution, kind, target, hash) => self
                    .steps()
                    .has_indeterminate_failure(execution, kind, target, hash)
                    .map(drop),
                Lookup::AttemptOccurrence(dispatch, attempt, key) => self
                    .dispatches()
                    .attempt_occurrence(dispatch, attempt, key)
                    .map(drop),
            };
        }
        let requests = self.recording.take().unwrap_or_default();
        // An answer still kept is still good (a write that could change it drops it).
        let kept = |r: &Request| self.prefetched.iter().any(|(kept, _)| kept == r);
        if requests.iter().all(kept) {
            return Ok(());
        }
        self.written();
        let answers = match self.tx.query_all(requests.clone()) {
            Ok(answers) => answers,
            Err(e) => return Err(self.fail(&e)),
        };
        let agent_sql = agent_of_execution_sql();
        for (request, rows) in requests.into_iter().zip(answers) {
            if request.sql() == agent_sql {
                // Kept as the agent's own read (`AgentTx::get`) would ask for it.
                let Some(id) = rows.first().and_then(|r| r.try_get::<_, String>(0).ok()) else {
                    continue;
                };
                let own = Request::new(
                    &agent_sql_by_id(),
                    &[(&id as &(dyn ToSql + Sync), Type::TEXT)],
                );
                self.prefetched.push((own, rows));
            } else {
                self.prefetched.push((request, rows));
            }
        }
        Ok(())
    }
}

/// The agent of an execution, as [`agent_sql_by_id`] reads it.
fn agent_of_execution_sql() -> String {
    format!(
        "SELECT {AGENT_COLS} FROM agents WHERE id = (SELECT agent_id FROM executions WHERE id = $1)"
    )
}

/// An agent by id ([`AgentTx::get`](crate::store::AgentTx::get)); its first column is the id.
pub(super) fn agent_sql_by_id() -> String {
    format!("SELECT {AGENT_COLS} FROM agents WHERE id = $1")
}
