//! The steps a connection sends in one batch ([`PgConn::run`](super::PgConn)) and their
//! answers.

use super::statements::Request;
use std::future::Future;
use std::pin::Pin;
use tokio_postgres::{Client, Error, Row, RowStream, Statement};

/// A step on its way: sends its request when first polled, then waits for the answer.
pub(super) type Sending<'a> = Pin<Box<dyn Future<Output = Result<Answer, Error>> + 'a>>;

/// The text of a commit.
pub(super) const COMMIT: &str = "COMMIT";

/// One statement of a batch.
#[derive(Debug, Clone)]
pub enum Step {
    /// Text sent as is (not prepared): `BEGIN`, `COMMIT`, schema changes.
    Simple(String),
    /// A prepared statement whose answer is the rows it changed.
    Execute(Request),
    /// A prepared statement whose answer is its rows.
    Query(Request),
    /// A prepared statement whose answer is its one row (an error for none or several).
    QueryOne(Request),
    /// A prepared statement whose rows are read as they arrive (the last step of a batch).
    Stream(Request),
}

impl Step {
    /// The prepared statement's request (`None` for text).
    pub(super) fn request(&self) -> Option<&Request> {
        match self {
            Step::Simple(_) => None,
            Step::Execute(r) | Step::Query(r) | Step::QueryOne(r) | Step::Stream(r) => Some(r),
        }
    }

    /// Whether this step commits.
    pub(super) fn commits(&self) -> bool {
        matches!(self, Step::Simple(sql) if sql == COMMIT)
    }

    /// The step's request on `client` with its prepared `statement` (`None` only for text):
    /// the future sends the request the first time it is polled, then waits for the answer.
    pub(super) fn send<'a>(
        &'a self,
        client: &'a Client,
        statement: Option<&'a Statement>,
    ) -> Sending<'a> {
        let prepared = || statement.expect("a prepared step has its statement");
        match self {
            Step::Simple(sql) => {
                Box::pin(async move { client.batch_execute(sql).await.map(|()| Answer::Done) })
            }
            Step::Execute(r) => {
                let statement = prepared();
                Box::pin(async move {
                    let values = r.values();
                    client.execute(statement, &values).await.map(Answer::Count)
                })
            }
            Step::Query(r) => {
                let statement = prepared();
                Box::pin(async move {
                    let values = r.values();
                    client.query(statement, &values).await.map(Answer::Rows)
                })
            }
            Step::QueryOne(r) => {
                let statement = prepared();
                Box::pin(async move {
                    let values = r.values();
                    client.query_one(statement, &values).await.map(Answer::Row)
                })
            }
            Step::Stream(r) => {
                let statement = prepared();
                Box::pin(async move {
                    client
                        .query_raw(statement, r.values())
                        .await
                        .map(Answer::Stream)
                })
            }
        }
    }
}

/// A step's answer.
pub enum Answer {
    /// Text ran.
    Done,
    /// Rows changed.
    Count(u64),
    /// Rows.
    Rows(Vec<Row>),
    /// The one row.
    Row(Row),
    /// Rows to be read as they arrive.
    Stream(RowStream),
}

impl Answer {
    /// The rows of a [`Step::Query`].
    pub(super) fn into_rows(self) -> Vec<Row> {
        match self {
            Answer::Rows(rows) => rows,
            _ => unreachable!("a query is answered with rows"),
        }
    }

    /// The row of a [`Step::QueryOne`].
    pub(super) fn into_row(self) -> Row {
        match self {
            Answer::Row(row) => row,
            _ => unreachable!("a one-row query is answered with its row"),
        }
    }

    /// The count of a [`Step::Execute`].
    pub(super) fn into_count(self) -> u64 {
        match self {
            Answer::Count(n) => n,
            _ => unreachable!("an execute is answered with a count"),
        }
    }

    /// The rows of a [`Step::Stream`].
    pub(super) fn into_stream(self) -> RowStream {
        match self {
            Answer::Stream(stream) => stream,
            _ => unreachable!("a streamed query is answered with its stream"),
        }
    }
}
