//! The helpers every operation of [`PgTx`] runs through: statements prepared once per
//! connection and run with their parameter types, row decoding (a row that does not decode is
//! corrupt), paging, row locks in write transactions, and the first failure kept.

use super::super::rows::{Decode, corrupt, page};
use super::PgTx;
use crate::store::{Page, StoreError, StoreResult};
use durable_support::pg::postgres;
use durable_support::pg::{Cached, Param, Statements, describe};
use postgres::Row;
use postgres::fallible_iterator::FallibleIterator;

impl<'a, 'c> PgTx<'a, 'c> {
    /// The operations of `tx`; `write` for a write transaction.
    pub(in super::super) fn new(
        tx: &'a mut postgres::Transaction<'c>,
        statements: &'a mut Statements,
        write: bool,
    ) -> Self {
        PgTx {
            tx: Cached::new(tx, statements),
            write,
            failed: None,
            locked: Vec::new(),
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

    /// Notes that a `FOR UPDATE` read of execution `id` found its row (so this transaction
    /// holds the row lock until it ends). A handful at most per transaction.
    pub(super) fn note_locked<T>(&mut self, id: &str, found: &Option<T>) {
        if self.write && found.is_some() && !self.locked.iter().any(|l| l == id) {
            self.locked.push(id.to_owned());
        }
    }

    pub(super) fn fail(&mut self, e: &postgres::Error) -> StoreError {
        let message = describe(e);
        self.failed.get_or_insert_with(|| message.clone());
        StoreError::Database(message)
    }

    pub(super) fn rows(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        let out = self.tx.query_typed(sql, p);
        out.map_err(|e| self.fail(&e))
    }

    pub(super) fn exec(&mut self, sql: &str, p: &[Param<'_>]) -> StoreResult<u64> {
        let out = self.tx.execute_typed(sql, p);
        out.map_err(|e| self.fail(&e))
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
                    let rows = rows.iterator().map_while(|r| match r {
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
}
