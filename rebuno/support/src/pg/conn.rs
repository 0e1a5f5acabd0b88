//! One connection, owned: a `tokio-postgres` client and the task that drives its socket, run on
//! a small current-thread runtime of the connection's own by whichever (blocking) thread uses
//! it — what the blocking `postgres` crate does inside, except that here several statements
//! can be sent before any answer is awaited ([`PgConn::run`], in `batch.rs`).

use super::PgError;
use super::batch::{Answer, Sending, Step};
use super::statements::{Request, Statements};
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;
use tokio_postgres::{Client, Error, Row, RowStream};
use tokio_stream::Stream;

/// The task that drives a connection's socket (it ends when the connection does).
type Driver = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// A connection to the server, used from one thread at a time. Blocking: never call its
/// methods on an async worker.
pub struct PgConn {
    /// Dropped last (see `Drop`), so the socket it registered goes first.
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<Client>,
    /// `None` once the connection ended.
    driver: Option<Driver>,
    statements: Statements,
    /// Round trips waited for so far.
    round_trips: u64,
    /// Statements sent so far (text and prepared, preparations not counted).
    sent: u64,
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConn")
            .field("closed", &self.is_closed())
            .field("statements", &self.statements.len())
            .finish_non_exhaustive()
    }
}

/// Polls `future` to completion on `runtime`, driving the connection's socket meanwhile (the
/// requests the future queues are written, the answers it waits for read).
fn drive<T>(
    runtime: &tokio::runtime::Runtime,
    driver: &mut Option<Driver>,
    future: impl Future<Output = T>,
) -> T {
    let mut future = pin!(future);
    runtime.block_on(std::future::poll_fn(|cx| {
        if let Some(d) = driver
            && let Poll::Ready(ended) = d.as_mut().poll(cx)
        {
            if let Err(e) = ended {
                tracing::debug!(error = %super::describe(&e), "a postgres connection ended");
            }
            *driver = None;
        }
        future.as_mut().poll(cx)
    }))
}

impl PgConn {
    /// Opens a connection (blocking).
    pub(super) fn connect<T>(config: &tokio_postgres::Config, tls: T) -> Result<PgConn, PgError>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Send + 'static,
        T::Stream: Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PgError::Connect(format!("cannot start a connection's runtime: {e}")))?;
        let (client, connection) = runtime.block_on(config.connect(tls))?;
        Ok(PgConn {
            runtime: Some(runtime),
            client: Some(client),
            driver: Some(Box::pin(connection)),
            statements: Statements::default(),
            round_trips: 0,
            sent: 0,
        })
    }

    fn client(&self) -> &Client {
        self.client
            .as_ref()
            .expect("a connection keeps its client until dropped")
    }

    /// How many times this connection waited for the server (a statement prepared, a batch
    /// sent and answered): its round trips.
    pub fn round_trips(&self) -> u64 {
        self.round_trips
    }

    /// How many statements this connection sent (each a message the server runs: `BEGIN` and
    /// `COMMIT` count, preparing a statement does not).
    pub fn statements(&self) -> u64 {
        self.sent
    }

    /// Whether the connection is known to be gone.
    pub fn is_closed(&self) -> bool {
        self.driver.is_none() || self.client().is_closed()
    }

    /// Whether the connection is still open, after reading what the server sent while it was
    /// idle (a server that shut down or a proxy that dropped the connection has closed it).
    /// Never waits for the server.
    pub(super) fn check(&mut self) -> bool {
        if self.is_closed() {
            return false;
        }
        let PgConn {
            runtime, driver, ..
        } = self;
        let runtime = runtime.as_ref().expect("a connection keeps its runtime");
        // The yield lets the runtime look at the socket once (without blocking) before the
        // connection is polled again.
        drive(runtime, driver, tokio::task::yield_now());
        !self.is_closed()
    }

    /// The statement prepared for `request` on this connection, preparing it the first time
    /// (one round trip).
    fn prepare(&mut self, request: &Request) -> Result<postgres::Statement, Error> {
        if let Some(statement) = self.statements.get(request.sql()) {
            return Ok(statement);
        }
        let PgConn {
            runtime,
            client,
            driver,
            ..
        } = self;
        let client = client.as_ref().expect("a connection keeps its client");
        let runtime = runtime.as_ref().expect("a connection keeps its runtime");
        self.round_trips += 1;
        let statement = drive(
            runtime,
            driver,
            client.prepare_typed(request.sql(), request.types()),
        )?;
        self.statements.insert(request.sql(), statement.clone());
        Ok(statement)
    }

    /// Sends `steps` in order without waiting between them, then waits for every answer: one
    /// round trip for all of them (plus one per statement not prepared yet on this connection,
    /// before anything is sent). Each step is its own protocol message with its own sync
    /// point, so the server answers each, in order; in a transaction, a statement that fails
    /// aborts it and every later one fails with "current transaction is aborted".
    pub(super) fn run(&mut self, steps: &[Step]) -> Ran {
        let mut statements = Vec::with_capacity(steps.len());
        for step in steps {
            match step.request().map(|r| self.prepare(r)).transpose() {
                Ok(statement) => statements.push(statement),
                Err(error) => return Ran::Unsent { error },
            }
        }
        let client = self.client.as_ref().expect("a connection keeps its client");
        let futures: Vec<Sending<'_>> = steps
            .iter()
            .zip(&statements)
            .map(|(step, statement)| step.send(client, statement.as_ref()))
            .collect();
        let runtime = self
            .runtime
            .as_ref()
            .expect("a connection keeps its runtime");
        self.round_trips += 1;
        self.sent += steps.len() as u64;
        Ran::Sent(drive(runtime, &mut self.driver, in_order(futures)))
    }

    /// Writes what was queued and returns without waiting for an answer (the answer is read,
    /// and dropped, when the connection is next used).
    pub(super) fn send_unanswered(&mut self, sql: &'static str) {
        let PgConn {
            runtime,
            client,
            driver,
            ..
        } = self;
        let client = client.as_ref().expect("a connection keeps its client");
        let runtime = runtime.as_ref().expect("a connection keeps its runtime");
        self.sent += 1;
        let mut request = pin!(client.batch_execute(sql));
        // The first poll queues the request; polling the driver then writes it.
        drive(
            runtime,
            driver,
            std::future::poll_fn(|cx| {
                let _ = request.as_mut().poll(cx);
                Poll::Ready(())
            }),
        );
        drive(runtime, driver, std::future::ready(()));
    }

    /// The rows of `stream`, read as they arrive.
    pub(super) fn rows(&mut self, stream: RowStream) -> RowIter<'_> {
        RowIter {
            conn: self,
            stream: Box::pin(stream),
        }
    }

    /// Runs one step and answers it.
    pub(super) fn one(&mut self, step: Step) -> Result<Answer, Error> {
        match self.run(std::slice::from_ref(&step)) {
            Ran::Unsent { error, .. } => Err(error),
            Ran::Sent(mut answers) => answers.pop().expect("one answer per step"),
        }
    }
}

/// What [`PgConn::run`] did.
pub(super) enum Ran {
    /// Nothing was sent: preparing a step's statement failed.
    Unsent {
        /// Why.
        error: Error,
    },
    /// Every step was sent; each one's answer, in order.
    Sent(Vec<Result<Answer, Error>>),
}

/// Polls `futures` in order until all are done; their outputs in the same order. The first
/// poll of each sends its request, so the requests leave in this order.
fn in_order<'a, T: 'a>(
    futures: Vec<Pin<Box<dyn Future<Output = T> + 'a>>>,
) -> impl Future<Output = Vec<T>> + 'a {
    let mut futures: Vec<Option<Pin<Box<dyn Future<Output = T> + 'a>>>> =
        futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = future {
                match f.as_mut().poll(cx) {
                    Poll::Ready(out) => {
                        *output = Some(out);
                        *future = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(
            outputs
                .iter_mut()
                .map(|o| o.take().expect("every future is done"))
                .collect(),
        )
    })
}

impl Drop for PgConn {
    fn drop(&mut self) {
        self.statements = Statements::default();
        // Dropping the client lets the driver say goodbye to the server and close the socket.
        drop(self.client.take());
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // On an async worker a runtime cannot block: the socket just closes.
            drop(self.driver.take());
            runtime.shutdown_background();
            return;
        }
        if let Some(driver) = self.driver.take() {
            let bounded = async { tokio::time::timeout(Duration::from_secs(1), driver).await };
            let _ = runtime.block_on(bounded);
        }
    }
}

/// The rows of a statement as they arrive
/// ([`Queries::query_typed_raw`](super::Queries::query_typed_raw)). Dropping it early leaves
/// the rest to be read, and dropped, by the connection's next use.
pub struct RowIter<'a> {
    conn: &'a mut PgConn,
    stream: Pin<Box<RowStream>>,
}

impl Iterator for RowIter<'_> {
    type Item = Result<Row, Error>;

    fn next(&mut self) -> Option<Result<Row, Error>> {
        let PgConn {
            runtime, driver, ..
        } = &mut *self.conn;
        let runtime = runtime.as_ref().expect("a connection keeps its runtime");
        let stream = &mut self.stream;
        drive(
            runtime,
            driver,
            std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)),
        )
    }
}
