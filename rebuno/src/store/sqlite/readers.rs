//! The SQLite store's reader threads: a few threads, each with a connection of its own, that
//! run the reads, so no SQLite call (and no wait for a lock or for the disk) ever runs on an
//! async worker thread.
//!
//! Most reads are a few indexed lookups, cheaper than waking a thread, and every thread kept
//! spinning costs the cores a busy machine needs. So a lone read goes to the writer thread when
//! it is idle and no write is on its way (a lone caller's reads and writes then meet one warm
//! thread); other reads go to the first idle reader (the one with the shortest queue when none
//! is idle).
//! A reader spins briefly for its next read and a lone caller spins briefly for its answer
//! (see [`super::handoff`]).

use super::conn::{Conn, ConnFn, ReadReply};
use super::handoff::{InFlight, next_job};
use super::writer::IdleWriter;
use crate::store::{StoreError, StoreResult};

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;
use tokio::sync::oneshot;

type Job = (ConnFn, ReadReply);

/// How long a reader spins for its next read after a lone one before it sleeps.
const READER_SPIN: Duration = Duration::from_micros(100);

/// How long a lone caller spins for its answer before it yields its worker: a little more
/// than a typical read.
const REPLY_SPIN: Duration = Duration::from_micros(100);

struct Reader {
    jobs: mpsc::Sender<Job>,
    /// Reads sent to this reader and not finished yet.
    queued: Arc<AtomicUsize>,
}

/// The reader threads; they end when this is dropped.
pub(super) struct Readers {
    /// The writer, which takes reads while it has nothing else to do.
    writer: IdleWriter,
    readers: Vec<Reader>,
    /// Reads sent and not answered yet, over all readers.
    in_flight: Arc<AtomicUsize>,
}

impl Readers {
    /// Starts one reader thread per connection; reads go to `writer` while it is idle.
    pub(super) fn start(writer: IdleWriter, conns: Vec<Conn>) -> StoreResult<Readers> {
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
        Ok(Readers {
            writer,
            readers,
            in_flight,
        })
    }

    /// Runs the read `f` on a store thread's connection (the idle writer's or a reader's) and
    /// answers its result.
    pub(super) async fn run(&self, f: ConnFn) -> StoreResult<Box<dyn Any + Send>> {
        let stopped = || StoreError::Database("the store threads have stopped".into());
        let (tx, rx) = oneshot::channel();
        let in_flight = InFlight::enter(&self.in_flight);
        // Only a lone read goes to the writer: concurrent reads would queue there one after
        // the other (and hold up the writes behind them) while the readers sat idle.
        let offered = if in_flight.lone() {
            self.writer.offer(f, tx)
        } else {
            Err((f, tx))
        };
        if let Err((f, tx)) = offered {
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
            reader.queued.fetch_add(1, Ordering::SeqCst);
            if reader.jobs.send((f, tx)).is_err() {
                reader.queued.fetch_sub(1, Ordering::SeqCst);
                return Err(stopped());
            }
        }
        in_flight.answer(rx, REPLY_SPIN).await.ok_or_else(stopped)?
    }
}

fn reader_loop(
    conn: Conn,
    rx: mpsc::Receiver<Job>,
    queued: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
) {
    let mut spin = Duration::ZERO;
    while let Some((f, reply)) = next_job(&rx, spin) {
        let out = conn.run(f);
        queued.fetch_sub(1, Ordering::SeqCst);
        // Spin for the next read only after a lone one: other reads in flight mean load, and
        // then the cores are better spent producing them.
        let lone = in_flight.load(Ordering::SeqCst) <= 1;
        spin = if lone { READER_SPIN } else { Duration::ZERO };
        let _ = reply.send(out);
    }
}
