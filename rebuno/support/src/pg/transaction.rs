//! A transaction whose statements are pipelined ([`PgTransaction`]).
//!
//! Nothing is sent until the caller needs an answer. `BEGIN` goes with the transaction's
//! first statement; writes whose answer the caller does not need ([`PgTransaction::defer`])
//! wait and go with the next statement that has to be answered, or with `COMMIT`. So a
//! transaction costs one round trip per answer its caller waits for, plus one for the commit
//! (which carries the waiting writes), where the blocking client paid one per statement plus
//! `BEGIN` and `COMMIT`. Waiting writes that say what they touch and touch nothing in common
//! leave as one statement ([`PgTransaction::defer_fusable`], `fuse.rs`).
//!
//! Order and failures are those of the statements run one by one: a batch sends its statements
//! in the order they were asked for, the server runs them in that order, and the first that
//! fails is the error the caller gets (for a deferred write, from the call that sent it, or from
//! the commit); the server has then aborted the transaction, every later statement fails, and
//! the transaction can only roll back ([`PgError::Aborted`] from a commit).
//!
//! A read-only transaction is committed without waiting for the answer (the connection's next
//! use reads it): it has nothing a commit could lose.
//!
//! # Lost connections
//!
//! While no answer has reached the caller and no `COMMIT` has been sent, nothing of the
//! transaction can have committed and the caller has seen nothing of it: if the connection turns
//! out to be gone, the same batch is sent again on a new connection (until
//! [`PgOptions::reconnect_for`](super::PgOptions::reconnect_for) has passed). Once an answer
//! was handed on, or once `COMMIT` may have reached the server, a lost connection is an error:
//! a commit whose answer never came is indeterminate, and is never reported as a success.

use super::batch::{Answer, COMMIT, Step};
use super::conn::{Ran, RowIter};
use super::fuse::{Deferred, Touches, fuse};
use super::pool::{Backoff, PgPool, Pooled};
use super::queries::{Queries, Run};
use super::statements::{Param, Request};
use super::{PgError, is_connection_error};
use tokio_postgres::{Error, Row, RowStream};

/// One transaction on a pooled connection, its statements pipelined (see the module docs).
/// [`PgPool::transaction`] and [`PgPool::snapshot`] run a closure on one and commit it.
pub struct PgTransaction {
    conn: Pooled,
    /// The text that starts the transaction.
    begin: &'static str,
    read_only: bool,
    /// `BEGIN` was sent.
    begun: bool,
    /// An answer (or a statement's error) reached the caller: the transaction can no longer be
    /// sent again on another connection.
    answered: bool,
    /// A statement failed: the server aborted the transaction.
    aborted: bool,
    /// The transaction ended (committed or rolled back).
    done: bool,
    /// Writes not sent yet, in order.
    deferred: Vec<Deferred>,
    /// Round trips waited for on connections this transaction gave up (see `round_trips`).
    lost_round_trips: u64,
    /// The connection's count when this transaction took it.
    first_round_trip: u64,
    retry: Backoff,
}

/// The text that starts a read-write transaction.
const BEGIN: &str = "BEGIN";
/// The text that starts a snapshot: one `REPEATABLE READ` snapshot for every statement, no
/// writes.
const BEGIN_SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

impl PgTransaction {
    /// A transaction on a connection of `pool`; nothing is sent yet.
    pub(super) fn new(pool: &PgPool, read_only: bool) -> Result<Self, PgError> {
        let conn = pool.get()?;
        Ok(PgTransaction {
            first_round_trip: conn.round_trips(),
            lost_round_trips: 0,
            conn,
            begin: if read_only { BEGIN_SNAPSHOT } else { BEGIN },
            read_only,
            begun: false,
            answered: false,
            aborted: false,
            done: false,
            deferred: Vec::new(),
            retry: Backoff::new(pool.reconnect_for()),
        })
    }

    /// Queues a write whose answer the caller does not need: it is sent with the next
    /// statement that is answered, or with the commit, and its failure is reported there.
    pub fn defer(&mut self, sql: &str, params: &[Param<'_>]) {
        self.deferred.push(Deferred {
            request: Request::new(sql, params),
            touches: None,
        });
    }

    /// [`PgTransaction::defer`] for a write that may go as one statement with the held-back
    /// writes beside it that touch nothing it touches ([`Touches`]; see `fuse`). The server
    /// runs one statement where it ran several, with the same effects.
    pub fn defer_fusable(&mut self, sql: &str, params: &[Param<'_>], touches: Touches) {
        self.deferred.push(Deferred {
            request: Request::new(sql, params),
            touches: Some(touches),
        });
    }

    /// The round trips this transaction waited for so far (a statement prepared for the first
    /// time on its connection counts one): for tests and diagnostics.
    pub fn round_trips(&self) -> u64 {
        self.lost_round_trips + self.conn.round_trips() - self.first_round_trip
    }

    /// Whether writes are waiting to be sent.
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Sends the deferred writes and `reads` in one batch; the rows of each read, in order.
    /// The first failure of the batch is the error.
    pub fn query_all(&mut self, reads: Vec<Request>) -> Result<Vec<Vec<Row>>, Error> {
        let steps = reads.into_iter().map(Step::Query).collect();
        Ok(self
            .send(steps)?
            .into_iter()
            .map(Answer::into_rows)
            .collect())
    }

    /// Sends what is waiting with `last`, in one batch (see the module docs for what is sent
    /// again after a lost connection); the answers of `last`.
    fn send(&mut self, last: Vec<Step>) -> Result<Vec<Answer>, Error> {
        let mut steps = Vec::with_capacity(self.deferred.len() + last.len() + 1);
        if !self.begun {
            steps.push(Step::Simple(self.begin.to_owned()));
        }
        steps.extend(
            fuse(std::mem::take(&mut self.deferred))
                .into_iter()
                .map(Step::Execute),
        );
        let mine = last.len();
        steps.extend(last);
        let commits = steps.iter().any(Step::commits);
        loop {
            let (error, sent) = match self.conn.run(&steps) {
                Ran::Sent(answers) => {
                    self.begun = true;
                    if answers.iter().all(Result::is_ok) {
                        self.answered = true;
                        let skip = answers.len() - mine;
                        return Ok(answers.into_iter().skip(skip).flatten().collect());
                    }
                    let first = answers.into_iter().find_map(Result::err);
                    (first.expect("a step failed"), true)
                }
                Ran::Unsent { error, .. } => (error, false),
            };
            // Sent again only while nothing of it can have committed and nobody saw an answer.
            let unseen = !self.answered && (!sent || !commits);
            if unseen && is_connection_error(&error) && self.reconnect() {
                continue;
            }
            self.answered = true;
            self.aborted = true;
            return Err(error);
        }
    }

    /// Replaces the connection, found gone, with a new one, trying until the reconnect window
    /// has passed; whether one was made.
    fn reconnect(&mut self) -> bool {
        while self.retry.again() {
            let waited = self.round_trips();
            match self.conn.reopen() {
                Ok(()) => {
                    self.lost_round_trips = waited;
                    self.first_round_trip = self.conn.round_trips();
                    self.begun = false;
                    return true;
                }
                Err(e) => tracing::debug!(error = %e, "postgres reconnect failed"),
            }
        }
        false
    }

    /// Commits: sends the deferred writes with `COMMIT` (and `BEGIN` if nothing was sent yet).
    /// A transaction that sent nothing and has nothing to send commits without a round trip;
    /// a read-only one does not wait for the answer. After a failed statement the transaction
    /// is rolled back and [`PgError::Aborted`] returned.
    pub(super) fn commit(mut self) -> Result<(), PgError> {
        if self.aborted {
            self.rollback();
            return Err(PgError::Aborted);
        }
        if !self.begun && self.deferred.is_empty() {
            self.done = true;
            return Ok(());
        }
        if self.read_only && self.deferred.is_empty() {
            self.conn.send_unanswered(COMMIT);
            self.done = true;
            return Ok(());
        }
        match self.send(vec![Step::Simple(COMMIT.to_owned())]) {
            Ok(_) => {
                self.done = true;
                Ok(())
            }
            Err(e) => {
                if is_connection_error(&e) {
                    // Whether the commit reached the server is unknown: an error, never a
                    // success, and the connection is not used again.
                    self.conn.discard();
                    self.done = true;
                } else {
                    // A statement failed, so the server rolled back at `COMMIT`, or never got
                    // it (a statement could not be prepared): make sure it ends.
                    self.rollback();
                }
                Err(PgError::Db(e))
            }
        }
    }

    /// Rolls back (without waiting for the answer: the connection's next use reads it).
    pub(super) fn rollback(&mut self) {
        self.deferred.clear();
        if self.begun && !self.done {
            if self.conn.is_closed() {
                self.conn.discard();
            } else {
                self.conn.send_unanswered("ROLLBACK");
            }
        }
        self.done = true;
    }

    fn one(&mut self, step: Step) -> Result<Answer, Error> {
        Ok(self.send(vec![step])?.pop().expect("one answer per step"))
    }
}

impl PgPool {
    /// Runs `f` in one transaction on a pooled connection ([`PgTransaction`]: its statements
    /// pipelined, `BEGIN` with the first, deferred writes with `COMMIT`) and commits it. If `f`
    /// fails, the transaction is rolled back and its error returned.
    pub fn transaction<R, E>(
        &self,
        f: impl FnOnce(&mut PgTransaction) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        self.transaction_as(false, f)
    }

    /// Like [`PgPool::transaction`], in a `REPEATABLE READ READ ONLY` transaction: every
    /// statement of `f` reads the same snapshot, and nothing can be written.
    pub fn snapshot<R, E>(&self, f: impl FnOnce(&mut PgTransaction) -> Result<R, E>) -> Result<R, E>
    where
        E: From<PgError>,
    {
        self.transaction_as(true, f)
    }

    fn transaction_as<R, E>(
        &self,
        read_only: bool,
        f: impl FnOnce(&mut PgTransaction) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        let mut tx = PgTransaction::new(self, read_only)?;
        match f(&mut tx) {
            Ok(out) => {
                tx.commit()?;
                Ok(out)
            }
            Err(e) => {
                tx.rollback();
                Err(e)
            }
        }
    }
}

impl Drop for PgTransaction {
    fn drop(&mut self) {
        if self.begun && !self.done {
            // Left in the middle (a panic): the connection is not given back mid-transaction.
            self.conn.discard();
        }
    }
}

impl Run for PgTransaction {
    fn one(&mut self, step: Step) -> Result<Answer, Error> {
        PgTransaction::one(self, step)
    }

    fn rows(&mut self, stream: RowStream) -> RowIter<'_> {
        self.conn.rows(stream)
    }
}

impl Queries for PgTransaction {}
