//! PostgreSQL connections for the kernel store and the receipt store: the URL and its TLS (rustls,
//! never OpenSSL), a bounded pool of connections used from blocking threads ([`PgPool`], in
//! `pool.rs`), transactions whose statements are pipelined ([`PgTransaction`], in
//! `transaction.rs`), statements prepared once per connection ([`Queries`], in `queries.rs`, over
//! `statements.rs`), a pinned schema, migrations under an advisory lock, advisory-lock keys, and a
//! LISTEN connection that reconnects ([`Listener`]; in `listen.rs`).
//!
//! # Driver
//!
//! Both stores run their transactions as synchronous closures on blocking threads, one pooled
//! connection per transaction, so the logic written once against their `Tx` traits runs
//! unchanged on SQLite and on PostgreSQL. A pooled connection ([`PgConn`], in `conn.rs`) is a
//! `tokio-postgres` client with the task that drives its socket, run by the blocking thread on
//! a small runtime of the connection's own, as the blocking `postgres` crate does inside. Owning
//! the connection is what lets one thread send several statements before it waits for any: the
//! blocking crate waits for each answer before it sends the next statement, so every statement
//! of a transaction, and its `BEGIN` and `COMMIT`, cost a round trip, which on a busy machine
//! costs far more than the statement itself. [`PgTransaction`] sends `BEGIN` with the first
//! statement, holds back the writes whose answer the caller does not need until the next
//! statement it waits for or the commit, and can send several reads at once
//! ([`PgTransaction::query_all`]). The `LISTEN` connection and migrations use the blocking
//! `postgres` client ([`PgPool::open`]): nothing there is worth pipelining.
//!
//! # Submodules
//!
//! - `pool`: `PgPool`, the bounded pool for blocking threads, retries, migrations;
//! - `conn`: one owned connection and the task driving it;
//! - `transaction`: `PgTransaction`, pipelined statements;
//! - `batch`: the steps sent in one batch;
//! - `statements`: prepared statements and encoded parameters;
//! - `queries`: `Queries`, the typed statement interface of a connection and a transaction;
//! - `fuse`: held-back writes fused into one statement;
//! - `listen`: the `LISTEN` connection.
//!
//! # What is retried
//!
//! A transaction whose connection turns out to be gone before any answer reached its caller,
//! and before its `COMMIT` could have reached the server, is sent again on a new connection,
//! until [`PgOptions::reconnect_for`] has passed: nothing of it can have committed, and its
//! caller has seen nothing of it. An idle connection is checked before it is handed out (what
//! the server sent while it was idle is read without waiting: a server that restarted has closed
//! it). A failure after that (a statement, the commit) is returned: the caller's work was not
//! acknowledged, and whoever asked for it retries with the same idempotent request; a commit
//! whose answer was lost is such a failure, never a success.

use postgres::error::SqlState;
use std::fmt;
use std::time::Duration;

pub use postgres;

mod batch;
mod conn;
mod fuse;
mod listen;
mod pool;
mod queries;
mod statements;
mod transaction;

pub use conn::{PgConn, RowIter};
pub use fuse::Touches;
pub use listen::{Heard, Listener};
pub use pool::{PgPool, Pooled};
pub use queries::Queries;
pub use statements::{Param, Request, Statements};
pub use transaction::PgTransaction;

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
    /// A transaction was asked to commit after one of its statements failed (the server had
    /// aborted it): it was rolled back.
    Aborted,
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Config(m) => write!(f, "postgres: {m}"),
            PgError::Connect(m) => write!(f, "postgres: cannot connect: {m}"),
            PgError::Db(e) => write!(f, "postgres: {}", describe(e)),
            PgError::Aborted => {
                f.write_str("postgres: the transaction was rolled back after a failed statement")
            }
        }
    }
}

impl std::error::Error for PgError {}

impl From<postgres::Error> for PgError {
    fn from(e: postgres::Error) -> Self {
        PgError::Db(e)
    }
}

/// An error's message with its cause: the server's detail for a database error (whose bare
/// `Display` says only "db error"), else every error of the source chain (the bare `Display`
/// of a failed connection says only "error connecting to server"), led by the cause in plain
/// words where it is a common one (connection refused, DNS name not found, TLS, timed out).
pub fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        // Class 28 is a refused login: a wrong password, or a user the server does not know
        // (whose message, "role … does not exist", does not say it is about logging in).
        if code.starts_with("28") && !db.message().contains("authentication failed") {
            return format!("authentication failed: {} ({code})", db.message());
        }
        return format!("{} ({code})", db.message());
    }
    let mut chain = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !chain.contains(&text) {
            chain.push_str(": ");
            chain.push_str(&text);
        }
        source = cause.source();
    }
    match plain_cause(e) {
        Some(plain) if !chain.to_lowercase().contains(plain) => format!("{plain}: {chain}"),
        _ => chain,
    }
}

/// The common causes of a failed connection, in plain words, found in `e`'s source chain.
fn plain_cause(e: &postgres::Error) -> Option<&'static str> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Some("connection refused"),
                std::io::ErrorKind::TimedOut => return Some("timed out"),
                _ => {}
            }
        }
        let text = cause.to_string();
        // The resolver's failures are I/O errors of no particular kind; their text says it.
        if text.contains("failed to lookup address")
            || text.contains("Name or service not known")
            || text.contains("nodename nor servname")
        {
            return Some("DNS name not found");
        }
        if cause.downcast_ref::<rustls::Error>().is_some()
            || text.starts_with("error performing TLS")
        {
            return Some("TLS handshake failed");
        }
        if text.starts_with("authentication error") {
            return Some("authentication failed");
        }
        if text.starts_with("timeout waiting for server") {
            return Some("timed out");
        }
        source = cause.source();
    }
    None
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
    /// keeps trying before the error is returned (the server restarting, say). Each failed
    /// attempt to connect is logged (`warn`) with its cause while it is retried.
    pub reconnect_for: Duration,
    /// How long one attempt to connect may take, unless the URL sets `connect_timeout`.
    pub connect_timeout: Duration,
}

impl PgOptions {
    /// Options for `url` with the defaults: no schema, 16 connections, 30 s of reconnecting,
    /// 5 s for one attempt to connect.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            schema: None,
            max_connections: 16,
            reconnect_for: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The options of a command that runs once and reports to someone waiting for it: one
    /// attempt to connect, of at most [`ONE_SHOT_CONNECT_TIMEOUT`], so an unreachable database
    /// is reported with its cause within seconds instead of retried for the reconnect window.
    pub fn one_shot(mut self) -> Self {
        self.reconnect_for = Duration::ZERO;
        self.connect_timeout = ONE_SHOT_CONNECT_TIMEOUT;
        self
    }
}

/// How long a one-shot command waits for a connection ([`PgOptions::one_shot`]).
pub const ONE_SHOT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

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
    fn a_refused_connection_says_so_at_once() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable");
        let started = std::time::Instant::now();
        let e = PgPool::connect(&PgOptions::new(url).one_shot()).unwrap_err();
        assert!(
            started.elapsed() < ONE_SHOT_CONNECT_TIMEOUT * 3,
            "one attempt"
        );
        let text = e.to_string();
        assert!(text.contains("cannot connect"), "{text}");
        assert!(text.to_lowercase().contains("connection refused"), "{text}");
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
        pool.run(|c| {
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
                .run(|c| {
                    c.query_typed_one("SELECT $1::int8 + 1", &[(&i, Type::INT8)])
                        .map(|r| r.get(0))
                })
                .unwrap();
            assert_eq!(got, i + 1);
        }
        // The sum and the count itself, each prepared once, in transactions as well.
        pool.transaction(|tx| {
            tx.query_typed("SELECT $1::int8 + 1", &[(&7i64, Type::INT8)])
                .map_err(PgError::Db)
        })
        .unwrap();
        assert_eq!(prepared_on_server(&pool), 2);
        assert_eq!(prepared_on_server(&pool), 2);
        // Many distinct texts never keep more than the capacity (the count's own included).
        for i in 0..(Statements::CAPACITY + 40) {
            pool.run(|c| c.query_typed(&format!("SELECT {i}::int8"), &[]))
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
