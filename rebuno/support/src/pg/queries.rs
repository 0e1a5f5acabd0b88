//! The typed, prepared statement interface ([`Queries`]) of a pooled connection and of a
//! transaction: written once over the one thing the two do differently, how a single step is
//! sent and answered (`Run`: a connection sends it at once, a transaction with whatever it
//! holds back).

use super::batch::{Answer, Step};
use super::conn::{PgConn, RowIter};
use super::statements::{Param, Request};
use tokio_postgres::{Error, Row, RowStream};

/// Typed statements, each prepared once per connection and kept
/// ([`Statements`](super::Statements)): what a pooled connection ([`PgConn`], each statement
/// its own transaction) and a transaction ([`PgTransaction`](super::PgTransaction)) run.
pub trait Queries: Run {
    /// The rows `sql` returns.
    fn query_typed(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>, Error> {
        self.one(Step::Query(Request::new(sql, params)))
            .map(Answer::into_rows)
    }

    /// The one row `sql` returns (an error if it returns none or several).
    fn query_typed_one(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Row, Error> {
        self.one(Step::QueryOne(Request::new(sql, params)))
            .map(Answer::into_row)
    }

    /// The rows `sql` returns, as they arrive from the server (a caller may stop early).
    fn query_typed_raw(&mut self, sql: &str, params: &[Param<'_>]) -> Result<RowIter<'_>, Error> {
        let stream = self
            .one(Step::Stream(Request::new(sql, params)))?
            .into_stream();
        Ok(self.rows(stream))
    }

    /// Runs `sql`; answers the rows it changed.
    fn execute_typed(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64, Error> {
        self.one(Step::Execute(Request::new(sql, params)))
            .map(Answer::into_count)
    }

    /// Runs `sql`, which may hold several statements and no parameters, as text (not
    /// prepared: schema changes, `LISTEN`, `SELECT 1`).
    fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.one(Step::Simple(sql.to_owned())).map(drop)
    }
}

/// What [`Queries`] is written over: sending one step and reading its rows. Public only in name
/// (its module is private), so no other type can implement [`Queries`].
pub trait Run {
    /// Sends `step` (with whatever the caller holds back) and answers it.
    fn one(&mut self, step: Step) -> Result<Answer, Error>;
    /// The rows of `stream`, read as they arrive on the connection.
    fn rows(&mut self, stream: RowStream) -> RowIter<'_>;
}

impl Run for PgConn {
    fn one(&mut self, step: Step) -> Result<Answer, Error> {
        PgConn::one(self, step)
    }

    fn rows(&mut self, stream: RowStream) -> RowIter<'_> {
        PgConn::rows(self, stream)
    }
}

impl Queries for PgConn {}
