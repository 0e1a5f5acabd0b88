//! The SQLite store's reader threads: a few threads, each with a connection of its own, that
//! run every read, so no SQLite call (and no wait for a lock or for the disk) ever runs on an
//! async worker thread.
//!
//! A read goes to the first idle reader (the one with the shortest queue when none is idle),
//! so a lone caller keeps meeting the same warm thread. Most reads are a few indexed lookups,
//! cheaper than a thread wake-up, so a reader spins briefly for its next read and a lone caller
//! spins briefly for its answer (see [`super::handoff`]).

use super::handoff::{InFlight, next_job};
use super::writer::lock;
use super::{StoreError, StoreResult};
use rusqlite::Connection;
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use tokio::sync::oneshot;

/// Work for a reader: runs on its connection.
pub(super) type ConnFn =
    Box<dyn FnOnce(&Connection) -> StoreResult<Box<dyn Any + Send>> + Send + 'static>;

type Job = (ConnFn, oneshot::Sender<StoreResult<Box<dyn Any + Send>>>);

/// How long a reader spins for its next read after a lone one before it sleeps.
const READER_SPIN: Duration = Duration::from_micros(100);

/// How long a lone caller spins for its answer before it yields its worker: a little more
/// than a typical read.
const REPLY_SPIN: Duration = Duration::from_micros(100);

/// A reader's connection: its own (a file store) or the one an in-memory store shares with its
/// writer.
pub(super) enum ReaderConn {
    /// A connection of the reader's own.
    Own(Connection),
    /// The in-memory database's only connection.
    Shared(Arc<Mutex<Connection>>),
}

struct Reader {
    jobs: mpsc::Sender<Job>,
    /// Reads sent to this reader and not finished yet.
    queued: Arc<AtomicUsize>,
}

/// The reader threads; they end when this is dropped.
pub(super) struct Readers {
    readers: Vec<Reader>,
    /// Reads sent and not answered yet, over all readers.
    in_flight: Arc<AtomicUsize>,
}

impl Readers {
    /// Starts one reader thread per connection.
    pub(super) fn start(conns: Vec<ReaderConn>) -> StoreResult<Readers> {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut readers = Vec::with_capacity(conns.len());
        for (i, conn) in conns.into_iter().enumerate() {
            let (jobs, rx) = mpsc::channel::<Job>();
            let queued = Arc::new(AtomicUsize::new(0));
            let (q, all) = (Arc::clone(&queued), Arc::clone(&in_flight));
            std::thread::Builder::new()
                .name(format!("rebuno-store-reader-{i}"))
                .spawn(move || reader_loop(conn, rx, q, all))
                .map_err(|e| StoreError::Database(format!("cannot start reader thread: {e}")))?;
            readers.push(Reader { jobs, queued });
        }
        Ok(Readers { readers, in_flight })
    }

    /// Runs `f` on a reader's connection and answers its result.
    pub(super) async fn run(&self, f: ConnFn) -> StoreResult<Box<dyn Any + Send>> {
        let stopped = || StoreError::Database("the store readers have stopped".into());
        let reader = self
            .readers
            .iter()
            .find(|r| r.queued.load(Ordering::SeqCst) == 0)
            .or_else(|| {
                self.readers
                    .iter()
                    .min_by_key(|r| r.queued.load(Ordering::SeqCst))
            })
            .ok_or_else(stopped)?;
        let (tx, rx) = oneshot::channel();
        let in_flight = InFlight::enter(&self.in_flight);
        reader.queued.fetch_add(1, Ordering::SeqCst);
        if reader.jobs.send((f, tx)).is_err() {
            reader.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(stopped());
        }
        in_flight.answer(rx, REPLY_SPIN).await.ok_or_else(stopped)?
    }
}

fn reader_loop(
    conn: ReaderConn,
    rx: mpsc::Receiver<Job>,
    queued: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
) {
    let mut spin = Duration::ZERO;
    while let Some((f, reply)) = next_job(&rx, spin) {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &conn {
            ReaderConn::Own(c) => f(c),
            ReaderConn::Shared(m) => f(&lock(m)),
        }))
        .unwrap_or_else(|_| Err(StoreError::Database("a store read panicked".into())));
        queued.fetch_sub(1, Ordering::SeqCst);
        // Spin for the next read only after a lone one: other reads in flight mean load, and
        // then the cores are better spent producing them.
        let lone = in_flight.load(Ordering::SeqCst) <= 1;
        spin = if lone { READER_SPIN } else { Duration::ZERO };
        let _ = reply.send(out);
    }
}
