//! PostgreSQL connections for the kernel store and the receipt store: the URL and its TLS
//! (rustls, never OpenSSL), a bounded pool of blocking clients, transactions that survive a
//! dropped connection where retrying is safe, a pinned schema, migrations under an advisory
//! lock, advisory-lock keys, statements prepared once per connection ([`Statements`],
//! [`Cached`]; in `statements.rs`), and a LISTEN connection that reconnects ([`Listener`]; in
//! `listen.rs`).
//!
//! The clients are the blocking face of `tokio-postgres` (the `postgres` crate): both stores
//! run their transactions as synchronous closures on blocking threads, one pooled connection per
//! transaction, so the logic written once against their `Tx` traits runs unchanged on SQLite and
//! on PostgreSQL.
//!
//! Only the start of a transaction is retried: `BEGIN` is the first thing sent on a connection
//! taken from the pool, so if it fails because the connection is gone (the server restarted, a
//! proxy dropped it), nothing of the transaction reached the server and it runs again on a new
//! connection, until [`PgOptions::reconnect_for`] has passed. A failure after that (a statement,
//! the commit) is returned: the caller's work was not acknowledged, and whoever asked for it
//! retries with the same idempotent request.

use postgres::error::SqlState;
use postgres::{Client, Config, NoTls};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use postgres;

mod listen;
mod statements;

pub use listen::{Heard, Listener};
pub use statements::{Cached, Param, Statements};

/// A PostgreSQL failure: a bad URL, a connection that could not be made, or an error of the
/// database.
#[derive(Debug)]
pub enum PgError {
    /// The URL or options are not usable.
    Config(String),
    /// No connection could be made within the reconnect window.
    Connect(String),
    /// The database refused or failed an operation.
    Db(postgres::Error),
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Config(m) => write!(f, "postgres: {m}"),
            PgError::Connect(m) => write!(f, "postgres: cannot connect: {m}"),
            PgError::Db(e) => write!(f, "postgres: {}", describe(e)),
        }
    }
}

impl std::error::Error for PgError {}

impl From<postgres::Error> for PgError {
    fn from(e: postgres::Error) -> Self {
        PgError::Db(e)
    }
}

/// An error's message with the server's detail (the bare `Display` of a database error says
/// only "db error").
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// Whether the error means the connection is unusable (closed, reset, the server shutting
/// down or not accepting connections yet), as opposed to a statement the server refused.
pub fn is_connection_error(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
        }
        // No SQLSTATE: an I/O or protocol failure of the connection itself.
        None => e.as_db_error().is_none(),
    }
}

/// Whether the error is a serialization failure or a deadlock the server broke, after which
/// the whole transaction may be run again.
pub fn is_retryable_conflict(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// A `postgres://user:password@host:port/dbname?sslmode=…` URL (or a libpq key=value
    /// string). `sslmode=disable` connects in plain text; `prefer` (the default) uses TLS when
    /// the server offers it; `require` insists on it. Server certificates are checked against
    /// the Mozilla roots, plus the PEM file named by `PGSSLROOTCERT` if set.
    pub url: String,
    /// A schema to create if missing and pin as the `search_path` of every connection (tests,
    /// and several deployments sharing one database). `None` keeps the server's default.
    pub schema: Option<String>,
    /// Connections open at most at once (at least 1).
    pub max_connections: usize,
    /// How long a new connection, or a transaction whose connection turned out to be dead,
    /// keeps trying before the error is returned (the server restarting, say).
    pub reconnect_for: Duration,
}

impl PgOptions {
    /// Options for `url` with the defaults: no schema, 16 connections, 30 s of reconnecting.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            schema: None,
            max_connections: 16,
            reconnect_for: Duration::from_secs(30),
        }
    }
}

/// A database URL as it may be printed: the password, if any, replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Whether `name` can be a schema we create: lowercase ASCII letters, digits and `_`, not
/// starting with a digit, at most 63 bytes (so it never needs quoting rules beyond `"…"`).
pub fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

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
    config: Config,
    tls: Tls,
    max: usize,
    reconnect_for: Duration,
    /// Idle connections, and how many are out (idle ones not counted).
    state: Mutex<PoolState>,
    freed: Condvar,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let idle = std::mem::take(&mut state.idle);
        if idle.is_empty() {
            return;
        }
        // Closing a blocking client runs a small runtime of its own, which panics on a thread
        // that drives an async runtime: the last handle of a pool is often dropped on one.
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
    idle: Vec<(Client, Statements)>,
    out: usize,
}

fn lock(m: &Mutex<PoolState>) -> MutexGuard<'_, PoolState> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A bounded pool of blocking PostgreSQL clients. Cloning shares the pool.
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
        let mut config = Config::from_str(&options.url)
            .map_err(|e| PgError::Config(format!("invalid database URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
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
            postgres::config::SslMode::Disable => Tls::Plain,
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
            }),
        };
        let mut client = pool.get()?;
        if let Some(schema) = &options.schema {
            // Two processes creating the schema at once can both pass `IF NOT EXISTS` and one
            // then trips over the other's catalog row: the schema exists, which is the point.
            match client.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"")) {
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

    /// A new connection outside the pool (a LISTEN connection, a session lock), retried
    /// until the reconnect window has passed.
    pub fn open(&self) -> Result<Client, PgError> {
        let mut retry = Backoff::new(self.shared.reconnect_for);
        loop {
            let attempt = match &self.shared.tls {
                Tls::Plain => self.shared.config.connect(NoTls),
                Tls::Rustls(tls) => self.shared.config.connect(tls.clone()),
            };
            match attempt {
                Ok(client) => return Ok(client),
                Err(e) if is_connection_error(&e) && retry.again() => {}
                Err(e) => return Err(PgError::Connect(describe(&e))),
            }
        }
    }

    /// A connection from the pool, waiting while all are out. Blocking.
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
            if let Some((client, statements)) = state.idle.pop() {
                return Ok(Pooled {
                    client: Some(client),
                    statements,
                    pool: self.clone(),
                });
            }
        }
        // The slot is ours; connecting happens outside the lock. Give it back on failure.
        let mut slot = Pooled {
            client: None,
            statements: Statements::default(),
            pool: self.clone(),
        };
        slot.client = Some(self.open()?);
        Ok(slot)
    }

    /// Runs `f` in one transaction on a pooled connection and commits it. A connection found
    /// dead at `BEGIN` is replaced and the transaction started again (nothing of it reached
    /// the server); if `f` fails, the transaction is rolled back and its error returned.
    pub fn transaction<R, E>(
        &self,
        f: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        self.transaction_as(false, |tx, _| f(tx))
    }

    /// Like [`PgPool::transaction`], with the connection's prepared [`Statements`].
    pub fn transaction_with<R, E>(
        &self,
        f: impl FnOnce(&mut postgres::Transaction<'_>, &mut Statements) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        self.transaction_as(false, f)
    }

    /// Like [`PgPool::snapshot`], with the connection's prepared [`Statements`].
    pub fn snapshot_with<R, E>(
        &self,
        f: impl FnOnce(&mut postgres::Transaction<'_>, &mut Statements) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        self.transaction_as(true, f)
    }

    /// Like [`PgPool::transaction`], in a `REPEATABLE READ READ ONLY` transaction: every
    /// statement of `f` reads the same snapshot, and nothing can be written.
    pub fn snapshot<R, E>(
        &self,
        f: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        self.transaction_as(true, |tx, _| f(tx))
    }

    fn transaction_as<R, E>(
        &self,
        snapshot: bool,
        f: impl FnOnce(&mut postgres::Transaction<'_>, &mut Statements) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<PgError>,
    {
        let mut f = Some(f);
        let mut retry = Backoff::new(self.shared.reconnect_for);
        loop {
            let mut conn = self.get()?;
            let failed = {
                let Pooled {
                    client, statements, ..
                } = &mut conn;
                let client = client
                    .as_mut()
                    .expect("a pooled connection is present until dropped");
                let begun = if snapshot {
                    client
                        .build_transaction()
                        .isolation_level(postgres::IsolationLevel::RepeatableRead)
                        .read_only(true)
                        .start()
                } else {
                    client.transaction()
                };
                match begun {
                    Ok(mut tx) => {
                        let f = f.take().expect("the transaction body runs once");
                        let out = f(&mut tx, statements)?;
                        tx.commit().map_err(PgError::Db)?;
                        return Ok(out);
                    }
                    Err(e) => e,
                }
            };
            if !(is_connection_error(&failed) && retry.again()) {
                return Err(PgError::Db(failed).into());
            }
            conn.discard();
            self.drop_idle();
        }
    }

    /// Runs an operation that may safely run twice (a read, a notification) on a pooled
    /// connection, again on a new connection while the connection fails within the
    /// reconnect window.
    pub fn run<R>(
        &self,
        f: impl FnMut(&mut Client) -> Result<R, postgres::Error>,
    ) -> Result<R, PgError> {
        self.run_keep(f).map(|(_, out)| out)
    }

    /// Like [`PgPool::run`], with the connection's prepared [`Statements`].
    pub fn run_with<R>(
        &self,
        mut f: impl FnMut(&mut Cached<'_, Client>) -> Result<R, postgres::Error>,
    ) -> Result<R, PgError> {
        let mut retry = Backoff::new(self.shared.reconnect_for);
        loop {
            let mut conn = self.get()?;
            let out = {
                let Pooled {
                    client, statements, ..
                } = &mut conn;
                let client = client
                    .as_mut()
                    .expect("a pooled connection is present until dropped");
                f(&mut Cached::new(client, statements))
            };
            match out {
                Ok(out) => return Ok(out),
                Err(e) if is_connection_error(&e) && retry.again() => {
                    conn.discard();
                    self.drop_idle();
                }
                Err(e) => return Err(PgError::Db(e)),
            }
        }
    }

    /// Like [`PgPool::run`], handing back the connection with the result: for session state
    /// that lives with the connection (a session advisory lock), released by the caller
    /// before it drops the connection (or by [`Pooled::discard`]).
    pub fn run_keep<R>(
        &self,
        mut f: impl FnMut(&mut Client) -> Result<R, postgres::Error>,
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
    fn drop_idle(&self) {
        let idle = std::mem::take(&mut lock(&self.shared.state).idle);
        drop(idle);
    }

    /// Sends a notification on `channel` (every `LISTEN`ing session of the database gets it,
    /// this process's included). The payload must stay under 8000 bytes.
    pub fn notify(&self, channel: &str, payload: &str) -> Result<(), PgError> {
        self.run(|c| {
            c.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
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
struct Backoff {
    deadline: Instant,
    pause: Duration,
}

impl Backoff {
    fn new(window: Duration) -> Self {
        Backoff {
            deadline: Instant::now() + window,
            pause: Duration::from_millis(50),
        }
    }

    /// Sleeps and answers `true` if there is time for another attempt.
    fn again(&mut self) -> bool {
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
    client: Option<Client>,
    statements: Statements,
    pool: PgPool,
}

impl Pooled {
    /// Closes the connection instead of returning it to the pool (after an error that may
    /// have left it unusable, or a session lock that could not be released).
    pub fn discard(&mut self) {
        self.client = None;
    }
}

impl std::ops::Deref for Pooled {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client
            .as_ref()
            .expect("a pooled connection is present until dropped")
    }
}

impl std::ops::DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("a pooled connection is present until dropped")
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let mut state = lock(&self.pool.shared.state);
        state.out = state.out.saturating_sub(1);
        if let Some(client) = self.client.take()
            && !client.is_closed()
        {
            state
                .idle
                .push((client, std::mem::take(&mut self.statements)));
        }
        drop(state);
        self.pool.shared.freed.notify_one();
    }
}

/// The advisory-lock key for a name: FNV-1a 64 of its bytes, as a signed 64-bit integer.
pub fn advisory_key(name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_are_fnv1a64() {
        // FNV-1a 64 of the empty string is the offset basis; of "a" a published value.
        assert_eq!(advisory_key("") as u64, 0xcbf2_9ce4_8422_2325);
        assert_eq!(advisory_key("a") as u64, 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn printed_urls_hide_the_password() {
        assert_eq!(
            redact_url("postgres://app:s3cr@t@db.example:5432/rebuno?sslmode=require"),
            "postgres://app:***@db.example:5432/rebuno?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://app@db/rebuno"),
            "postgres://app@db/rebuno"
        );
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }

    #[test]
    fn schema_names_are_checked() {
        assert!(valid_schema_name("rebuno_test_1"));
        assert!(!valid_schema_name("Rebuno"));
        assert!(!valid_schema_name("1abc"));
        assert!(!valid_schema_name("a;drop"));
        assert!(!valid_schema_name(""));
        assert!(!valid_schema_name(&"a".repeat(64)));
    }

    #[test]
    fn bad_urls_are_refused_without_connecting() {
        let e = PgPool::connect(&PgOptions::new("postgres://h:notaport/db")).unwrap_err();
        assert!(matches!(e, PgError::Config(_)), "{e}");
    }
}

#[cfg(test)]
mod server_tests {
    use super::*;
    use std::sync::mpsc;

    fn url() -> String {
        std::env::var("REBUNO_TEST_PG_URL")
            .expect("REBUNO_TEST_PG_URL is not set: eval \"$(bash .ci/postgres)\"")
    }

    /// The server-side prepared statements of the pool's one connection.
    fn prepared_on_server(pool: &PgPool) -> i64 {
        pool.run_with(|c| {
            c.query_typed_one("SELECT count(*) FROM pg_prepared_statements", &[])
                .map(|r| r.get(0))
        })
        .unwrap()
    }

    #[test]
    #[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
    fn statements_are_prepared_once_per_connection_and_bounded() {
        use postgres::types::Type;
        let mut options = PgOptions::new(url());
        options.max_connections = 1;
        let pool = PgPool::connect(&options).unwrap();
        for i in 0..5i64 {
            let got: i64 = pool
                .run_with(|c| {
                    c.query_typed_one("SELECT $1::int8 + 1", &[(&i, Type::INT8)])
                        .map(|r| r.get(0))
                })
                .unwrap();
            assert_eq!(got, i + 1);
        }
        // The sum and the count itself, each prepared once, in transactions as well.
        pool.transaction_with(|tx, statements| {
            Cached::new(tx, statements)
                .query_typed("SELECT $1::int8 + 1", &[(&7i64, Type::INT8)])
                .map_err(PgError::Db)
        })
        .unwrap();
        assert_eq!(prepared_on_server(&pool), 2);
        assert_eq!(prepared_on_server(&pool), 2);
        // Many distinct texts never keep more than the capacity (the count's own included).
        for i in 0..(Statements::CAPACITY + 40) {
            pool.run_with(|c| c.query_typed(&format!("SELECT {i}::int8"), &[]))
                .unwrap();
        }
        let kept = prepared_on_server(&pool);
        assert!(
            kept >= 1 && kept <= Statements::CAPACITY as i64,
            "{kept} statements kept"
        );
    }

    #[test]
    #[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
    fn a_listener_hears_what_the_pool_notifies() {
        let pool = PgPool::connect(&PgOptions::new(url())).unwrap();
        let (tx, rx) = mpsc::channel();
        let _listener = pool.listen(vec!["durable_support_test".into()], move |heard| {
            tx.send(heard).is_ok()
        });
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            Heard::Connected
        );
        pool.notify("durable_support_test", "hello").unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            Heard::Notification("durable_support_test".into(), "hello".into())
        );
        // A steady stream (never a quiet half second) is handed on as it arrives.
        for i in 0..6 {
            pool.notify("durable_support_test", &i.to_string()).unwrap();
            assert_eq!(
                rx.recv_timeout(Duration::from_millis(400)).unwrap(),
                Heard::Notification("durable_support_test".into(), i.to_string())
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
