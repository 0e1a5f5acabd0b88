//! The LISTEN connection: a thread of its own that hands each notification on as it arrives
//! and reconnects when the connection is lost.

use super::{PgError, PgPool, describe};
use postgres::Client;
use std::sync::Arc;
use std::time::Duration;

/// What a LISTEN connection hands its consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A notification: channel and payload.
    Notification(String, String),
    /// The connection was (re)established: anything sent while it was down was missed.
    Connected,
}

/// A LISTEN connection on a thread of its own; dropping the handle stops it (within half a
/// second).
pub struct Listener {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl PgPool {
    /// Starts a thread that LISTENs on `channels` and hands what it hears to `on`, until `on`
    /// returns `false` or the handle is dropped. A lost connection is re-opened after a
    /// second, and [`Heard::Connected`] tells the consumer it may have missed notifications.
    pub fn listen<F>(&self, channels: Vec<String>, mut on: F) -> Listener
    where
        F: FnMut(Heard) -> bool + Send + 'static,
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let pool = self.clone();
        let run = move || {
            while !flag.load(Ordering::Relaxed) {
                let session = (|| -> Result<Client, PgError> {
                    let mut client = pool.open()?;
                    for channel in &channels {
                        client.batch_execute(&format!("LISTEN \"{channel}\""))?;
                    }
                    Ok(client)
                })();
                let mut client = match session {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "postgres LISTEN connection failed; retrying");
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                };
                if !on(Heard::Connected) {
                    return;
                }
                loop {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    // Each notification is handed on as it arrives (a steady stream never
                    // leaves a quiet half second to wait for); the stop flag is checked
                    // between them and after every quiet half second.
                    let mut broke = false;
                    {
                        let mut notes = client.notifications();
                        let mut it = notes.timeout_iter(Duration::from_millis(500));
                        loop {
                            use postgres::fallible_iterator::FallibleIterator;
                            match it.next() {
                                Ok(Some(n)) => {
                                    let heard = Heard::Notification(
                                        n.channel().to_owned(),
                                        n.payload().to_owned(),
                                    );
                                    if !on(heard) || flag.load(Ordering::Relaxed) {
                                        return;
                                    }
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    tracing::warn!(error = %describe(&e), "postgres LISTEN connection lost");
                                    broke = true;
                                    break;
                                }
                            }
                        }
                    }
                    if broke || client.is_closed() {
                        std::thread::sleep(Duration::from_secs(1));
                        break;
                    }
                }
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("pg-listen".into())
            .spawn(run)
        {
            tracing::error!(error = %e, "cannot start the postgres LISTEN thread");
        }
        Listener { stop }
    }
}
