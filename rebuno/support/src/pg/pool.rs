//! The pool ([`PgPool`]): a bounded set of [`PgConn`]s shared by blocking threads, the
//! transactions and retried operations run on them, and the connections opened outside it
//! (`LISTEN`, migrations).

use super::conn::PgConn;
use super::queries::Queries;
use super::{PgError, PgOptions, advisory_key, describe, is_connection_error, valid_schema_name};
use postgres::error::SqlState;
use postgres::types::Type;
use postgres::{Client, NoTls};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The TLS side of a connection.
#[derive(Clone)]
enum Tls {
    Plain,
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

fn rustls_config() -> Result<rustls::ClientConfig, PgError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = std::env::var_os("PGSSLROOTCERT") {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let certs = CertificateDer::pem_file_iter(&path).map_err(|e| {
            PgError::Config(format!("PGSSLROOTCERT {}: {e}", path.to_string_lossy()))
        })?;
        for cert in certs {
            let cert = cert.map_err(|e| {
                PgError::Config(format!("PGSSLROOTCERT {}: {e}", path.to_string_lossy()))
            })?;
            roots
                .add(cert)
                .map_err(|e| PgError::Config(format!("PGSSLROOTCERT: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Config(format!("tls: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

struct Shared {
    config: tokio_postgres::Config,
    tls: Tls,
    max: usize,
    reconnect_for: Duration,
    /// Idle connections, and how many are out (idle ones not counted).
    state: Mutex<PoolState>,
    freed: Condvar,
    /// Round trips the pool's connections waited for, counted when each is given back.
    round_trips: AtomicU64,
    /// Statements the pool's connections sent, counted likewise.
    statements: AtomicU64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let idle = std::mem::take(&mut state.idle);
        if idle.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        // Closing a connection politely blocks a moment, which an async worker (where the last
        // handle of a pool is often dropped) must not: a thread of its own closes them.
        let closing = std::thread::Builder::new()
            .name("pg-close".into())
            .spawn(move || drop(idle));
        if let Err(e) = closing {
            tracing::warn!(error = %e, "cannot start a thread to close idle postgres connections");
        }
    }
}

#[derive(Default)]
struct PoolState {
    idle: Vec<PgConn>,
    out: usize,
}

fn lock(m: &Mutex<PoolState>) -> MutexGuard<'_, PoolState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A bounded pool of PostgreSQL connections. Cloning shares the pool. Blocking: use it from
/// blocking threads.
#[derive(Clone)]
pub struct PgPool {
    shared: Arc<Shared>,
}

impl fmt::Debug for PgPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgPool")
            .field("max", &self.shared.max)
            .finish_non_exhaustive()
    }
}

impl PgPool {
    /// Parses the options and opens one connection to check them (creating the schema if
    /// one is named). Blocking: call it from a blocking thread, or before a runtime starts.
    pub fn connect(options: &PgOptions) -> Result<PgPool, PgError> {
        let mut config = tokio_postgres::Config::from_str(&options.url)
            .map_err(|e| PgError::Config(format!("invalid database URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if let Some(schema) = &options.schema {
            if !valid_schema_name(schema) {
                return Err(PgError::Config(format!(
                    "invalid schema name {schema:?} (lowercase letters, digits and _, at most 63)"
                )));
            }
            let pinned = format!("-c search_path={schema}");
            let options = match config.get_options() {
                Some(existing) if !existing.is_empty() => format!("{existing} {pinned}"),
                _ => pinned,
            };
            config.options(&options);
        }
        let tls = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => Tls::Plain,
            _ => Tls::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(
                rustls_config()?,
            )),
        };
        let pool = PgPool {
            shared: Arc::new(Shared {
                config,
                tls,
                max: options.max_connections.max(1),
                reconnect_for: options.reconnect_for,
                state: Mutex::new(PoolState::default()),
                freed: Condvar::new(),
                round_trips: AtomicU64::new(0),
                statements: AtomicU64::new(0),
            }),
        };
        let mut conn = pool.get()?;
        if let Some(schema) = &options.schema {
            // Two processes creating the schema at once can both pass `IF NOT EXISTS` and one
            // then trips over the other's catalog row: the schema exists, which is the point.
            match conn.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"")) {
                Err(e)
                    if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
                        || e.code() == Some(&SqlState::DUPLICATE_SCHEMA) => {}
                other => other?,
            }
        }
        Ok(pool)
    }

    /// Connections open at most at once.
    pub fn max_connections(&self) -> usize {
        self.shared.max
    }

    /// The round trips the pool's connections have waited for (a statement prepared, a batch
    /// sent and answered), counted as each connection is given back: for tests and
    /// diagnostics.
    pub fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::Relaxed)
    }

    /// The statements the pool's connections have sent (`BEGIN` and `COMMIT` included),
    /// counted as each connection is given back: for tests and diagnostics.
    pub fn statements(&self) -> u64 {
        self.shared.statements.load(Ordering::Relaxed)
    }

    /// How long a connection found gone is replaced before the error is returned.
    pub(super) fn reconnect_for(&self) -> Duration {
        self.shared.reconnect_for
    }

    /// A connection of the `postgres` crate outside the pool (a LISTEN connection,
    /// migrations), retried until the reconnect window has passed.
    pub fn open(&self) -> Result<Client, PgError> {
        let config = postgres::Config::from(self.shared.config.clone());
        let mut retry = Backoff::new(self.shared.reconnect_for);
        loop {
            let attempt = match &self.shared.tls {
                Tls::Plain => config.connect(NoTls),
                Tls::Rustls(tls) => config.connect(tls.clone()),
            };
            match attempt {
                Ok(client) => return Ok(client),
                Err(e) if is_connection_error(&e) && retry.again_after(&e) => {}
                Err(e) => return Err(PgError::Connect(describe(&e))),
            }
        }
    }

    /// A new connection for the pool, tried once.
    fn open_once(&self) -> Result<PgConn, PgError> {
        match &self.shared.tls {
            Tls::Plain => PgConn::connect(&self.shared.config, NoTls),
            Tls::Rustls(tls) => PgConn::connect(&self.shared.config, tls.clone()),
        }
    }

    /// A new connection for the pool, retried until the reconnect window has passed.
    fn open_conn(&self) -> Result<PgConn, PgError> {
        let mut retry = Backoff::new(self.shared.reconnect_for);
        loop {
            match self.open_once() {
                Ok(conn) => return Ok(conn),
                Err(PgError::Db(e)) if is_connection_error(&e) && retry.again_after(&e) => {}
                Err(PgError::Db(e)) => return Err(PgError::Connect(describe(&e))),
                Err(e) => return Err(e),
            }
        }
    }

    /// A connection from the pool, waiting while all are out. An idle connection found closed
    /// (the server restarted, a proxy dropped it) is replaced. Blocking.
    pub fn get(&self) -> Result<Pooled, PgError> {
        {
            let mut state = lock(&self.shared.state);
            while state.out >= self.shared.max {
                state = self
                    .shared
                    .freed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            state.out += 1;
        }
        // The slot is ours; checking and connecting happen outside the lock. Given back on
        // failure.
        let mut slot = Pooled {
            conn: None,
            pool: self.clone(),
            counted: (0, 0),
        };
        loop {
            let idle = lock(&self.shared.state).idle.pop();
            let Some(mut conn) = idle else { break };
            if conn.check() {
                slot.hold(conn);
                return Ok(slot);
            }
        }
        slot.hold(self.open_conn()?);
        Ok(slot)
    }

    /// Runs an operation that may safely run twice (a read, a notification) on a pooled
    /// connection, each statement its own transaction, again on a new connection while the
    /// connection fails within the reconnect window.
    pub fn run<R>(
        &self,
        f: impl FnMut(&mut PgConn) -> Result<R, postgres::Error>,
    ) -> Result<R, PgError> {
        self.run_keep(f).map(|(_, out)| out)
    }

    /// Like [`PgPool::run`], handing back the connection with the result: for session state
    /// that lives with the connection (a session advisory lock), released by the caller
    /// before it drops the connection (or by [`Pooled::discard`]).
    pub fn run_keep<R>(
        &self,
        mut f: impl FnMut(&mut PgConn) -> Result<R, postgres::Error>,
    ) -> Result<(Pooled, R), PgError> {
        let mut retry = Backoff::new(self.shared.reconnect_for);
        loop {
            let mut conn = self.get()?;
            match f(&mut conn) {
                Ok(out) => return Ok((conn, out)),
                Err(e) if is_connection_error(&e) && retry.again() => {
                    conn.discard();
                    self.drop_idle();
                }
                Err(e) => return Err(PgError::Db(e)),
            }
        }
    }

    /// Closes the idle connections (after one was found dead: the others are as old).
    pub(super) fn drop_idle(&self) {
        let idle = std::mem::take(&mut lock(&self.shared.state).idle);
        drop(idle);
    }

    /// Sends a notification on `channel` (every `LISTEN`ing session of the database gets it,
    /// this process's included). The payload must stay under 8000 bytes.
    pub fn notify(&self, channel: &str, payload: &str) -> Result<(), PgError> {
        self.run(|c| {
            c.execute_typed(
                "SELECT pg_notify($1, $2)",
                &[(&channel, Type::TEXT), (&payload, Type::TEXT)],
            )
            .map(drop)
        })
    }

    /// Applies the migrations not applied yet, in order, each in its own transaction, under
    /// a session advisory lock named `lock_name` (so replicas that start together apply each
    /// once). Applied versions are recorded in `table`.
    pub fn migrate(
        &self,
        lock_name: &str,
        table: &str,
        migrations: &[(i32, &str)],
    ) -> Result<(), PgError> {
        self.migrate_with(lock_name, table, migrations, |_, _, _| {})
    }

    /// [`PgPool::migrate`], calling `applied(version, n, pending)` after each migration it
    /// applies: the `n`th of the `pending` ones this run applies (progress reports).
    pub fn migrate_with(
        &self,
        lock_name: &str,
        table: &str,
        migrations: &[(i32, &str)],
        mut applied: impl FnMut(i32, usize, usize),
    ) -> Result<(), PgError> {
        let mut client = self.open()?;
        let key = advisory_key(lock_name);
        client.execute("SELECT pg_advisory_lock($1)", &[&key])?;
        let outcome = (|| -> Result<(), PgError> {
            client.batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (version integer PRIMARY KEY, \
                 applied_at timestamptz NOT NULL DEFAULT now())"
            ))?;
            let done: Vec<i32> = client
                .query(&format!("SELECT version FROM {table}"), &[])?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let pending = migrations
                .iter()
                .filter(|(version, _)| !done.contains(version))
                .count();
            let mut n = 0;
            for (version, sql) in migrations {
                if done.contains(version) {
                    continue;
                }
                n += 1;
                let mut tx = client.transaction()?;
                tx.batch_execute(sql)?;
                tx.execute(
                    &format!("INSERT INTO {table} (version) VALUES ($1)"),
                    &[version],
                )?;
                tx.commit()?;
                applied(*version, n, pending);
            }
            Ok(())
        })();
        // Closing the session releases the lock even if the unlock is never answered.
        let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&key]);
        outcome
    }
}

/// Waits between reconnection attempts: 50 ms doubling to 1 s, until a deadline.
pub(super) struct Backoff {
    deadline: Instant,
    pause: Duration,
    /// Attempts that failed so far.
    failed: u32,
}

impl Backoff {
    pub(super) fn new(window: Duration) -> Self {
        Backoff {
            deadline: Instant::now() + window,
            pause: Duration::from_millis(50),
            failed: 0,
        }
    }

    /// After an attempt to connect failed with `error`: like [`Backoff::again`], logging the
    /// cause (`warn`) with the attempt and the delay before the next one when there is time
    /// for another, so an operator sees why at once rather than when the window ends.
    pub(super) fn again_after(&mut self, error: &postgres::Error) -> bool {
        self.failed += 1;
        let now = Instant::now();
        if now >= self.deadline {
            return false;
        }
        tracing::warn!(
            attempt = self.failed,
            retry_in = ?self.pause,
            retrying_for = ?(self.deadline - now),
            "cannot connect to PostgreSQL: {}; retrying",
            describe(error)
        );
        self.again()
    }

    /// Sleeps and answers `true` if there is time for another attempt.
    pub(super) fn again(&mut self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(Duration::from_secs(1));
        true
    }
}

/// A pooled connection; dropping it returns it to the pool (or closes it if it broke).
pub struct Pooled {
    conn: Option<PgConn>,
    pool: PgPool,
    /// The connection's round trips and statements when it was handed out (or last counted).
    counted: (u64, u64),
}

impl Pooled {
    /// Takes `conn` into the slot.
    fn hold(&mut self, conn: PgConn) {
        self.count();
        self.counted = (conn.round_trips(), conn.statements());
        self.conn = Some(conn);
    }

    /// Adds the round trips and statements of the connection since it was last counted to the
    /// pool's.
    fn count(&mut self) {
        if let Some(conn) = &self.conn {
            let now = (conn.round_trips(), conn.statements());
            let shared = &self.pool.shared;
            let waited = now.0.saturating_sub(self.counted.0);
            shared.round_trips.fetch_add(waited, Ordering::Relaxed);
            let sent = now.1.saturating_sub(self.counted.1);
            shared.statements.fetch_add(sent, Ordering::Relaxed);
            self.counted = now;
        }
    }

    /// Closes the connection instead of returning it to the pool (after an error that may
    /// have left it unusable, or a session lock that could not be released).
    pub fn discard(&mut self) {
        self.count();
        self.conn = None;
    }

    /// Replaces the connection (found gone) with a new one in the same slot, trying once;
    /// the pool's idle connections, as old, are closed too.
    pub(super) fn reopen(&mut self) -> Result<(), PgError> {
        self.pool.drop_idle();
        let conn = self.pool.open_once()?;
        self.hold(conn);
        Ok(())
    }
}

impl std::ops::Deref for Pooled {
    type Target = PgConn;
    fn deref(&self) -> &PgConn {
        self.conn
            .as_ref()
            .expect("a pooled connection is present until dropped")
    }
}

impl std::ops::DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut PgConn {
        self.conn
            .as_mut()
            .expect("a pooled connection is present until dropped")
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.count();
        let conn = self.conn.take();
        let mut state = lock(&self.pool.shared.state);
        state.out = state.out.saturating_sub(1);
        let closed = match conn {
            Some(conn) if !conn.is_closed() => {
                state.idle.push(conn);
                None
            }
            other => other,
        };
        drop(state);
        self.pool.shared.freed.notify_one();
        // A closed connection is dropped outside the lock.
        drop(closed);
    }
}
