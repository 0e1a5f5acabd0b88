//! PostgreSQL [`ReceiptStore`] (feature `postgres`): several writers (processes, machines) on
//! one database, each append checked and numbered inside the database.
//!
//! # Driver
//!
//! Connections are pooled by [`durable_support::pg`] (the kernel's PostgreSQL store uses the
//! same pool), their statements prepared once per connection and a transaction's `BEGIN` sent
//! with its first statement. Every operation runs on
//! [`tokio::task::spawn_blocking`], never on an async worker.
//!
//! # The append transaction
//!
//! Each append (and each branch creation) is one `READ COMMITTED` transaction that
//!
//! 1. takes the transaction-scoped advisory lock of the stream
//!    (`pg_advisory_xact_lock(`[`advisory_key`](durable_support::pg::advisory_key)`("<schema>.receipt-stream:<stream>"))`),
//!    so appends to one stream are serialized across every process on the database, and appends
//!    to different streams never wait for each other;
//! 2. reads, in one statement, how many of the batch's `eventId`s the stream records and its
//!    **physical tail** (the receipts table's last row, never the `receipt_streams` head row):
//!    all present is [`AppendOutcome::Duplicate`], some is [`Error::PartiallyApplied`], a tail
//!    other than the request's `expected_tail` is [`Error::ExpectedPrev`] (nothing is written);
//! 3. numbers the receipts from that tail (`stream_seq` = max + 1, from 0) and inserts them, and
//!    upserts the `receipt_streams` row, in one statement;
//! 4. commits.
//!
//! A branch is recorded the same way under the locks of [`BRANCH_META_STREAM`] and of the
//! branch's name: its `branch.meta.upsert` receipt and its `receipt_branches` row commit
//! together. [`ReceiptStore::append_many`] locks every stream it touches (in key order) and
//! commits all its requests in one transaction; a request refused by its checks wrote nothing,
//! so it fails alone.
//!
//! # What is retried, and why that is safe
//!
//! A transaction whose connection fails (the server restarted, a proxy dropped it) is run again
//! on a new connection, and so is one the server aborted as a deadlock, until
//! [`PgOptions::reconnect_for`] has passed. If the failure came at `COMMIT`, the first run may
//! have committed without the answer arriving, so a blind retry could store a command twice
//! (for a command without `eventId`s, dedup would not catch it, and the compare-and-swap would
//! refuse the retry, after which the runtime re-links the command onto its own first copy).
//! The retry therefore starts by looking the batch's receipts up **by hash** in the stream: a
//! receipt's hash covers its random `id`, so finding them means the earlier run committed, and
//! the retry answers [`AppendOutcome::Appended`] with the tail that run left. Any append, with
//! or without `eventId`s, is idempotent this way; a branch creation likewise (its metadata
//! receipt). Reads are retried freely.
//!
//! # Schema
//!
//! Tables (see the `schema` module) live in one schema whose `search_path` every connection
//! pins: [`PgStore::options`] takes `$RECEIPT_POSTGRES_SCHEMA` when set, else
//! [`DEFAULT_SCHEMA`]; it is created if missing and migrated under a session advisory lock when
//! a store connects, so writers may start together.
//!
//! # Submodules
//!
//! - `schema`: the embedded, numbered migrations;
//! - `tx`: the statements and the append and branch transactions.

mod schema;
mod tx;

use super::{
    AppendOutcome, AppendRequest, BRANCH_META_STREAM, BranchMeta, ReceiptStore, StreamInfo, Tail,
};
use crate::error::{Error, Result};
use crate::receipt::Receipt;
use crate::signing::{SignedHead, SigningKey};
use async_trait::async_trait;
use durable_support::pg::{
    PgConn, PgError, PgOptions, PgPool, PgTransaction, is_connection_error, is_retryable_conflict,
    postgres, valid_schema_name,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The environment variable naming the schema [`PgStore::options`] pins.
pub const SCHEMA_ENV: &str = "RECEIPT_POSTGRES_SCHEMA";

/// The schema used when `$RECEIPT_POSTGRES_SCHEMA` is not set.
pub const DEFAULT_SCHEMA: &str = "receipt";

/// The environment variable bounding how long an unreachable database is retried
/// ([`PgOptions::reconnect_for`]): `300ms`, `5s`, `2m`, or bare seconds.
pub const RECONNECT_ENV: &str = "RECEIPT_DB_RECONNECT";

/// The environment variable capping a store's connections ([`PgOptions::max_connections`]).
pub const MAX_CONNS_ENV: &str = "RECEIPT_DB_MAX_CONNS";

/// `300ms`, `5s`, `2m` or bare seconds (`1.5`).
fn parse_duration(raw: &str) -> Option<Duration> {
    let raw = raw.trim();
    let (number, unit) = match raw.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => raw.split_at(at),
        None => (raw, "s"),
    };
    let n: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// Why a transaction body stopped: the store's refusal (returned as is, never retried) or the
/// database's failure.
pub(super) enum TxError {
    Refused(Error),
    Db(PgError),
}

impl From<Error> for TxError {
    fn from(e: Error) -> Self {
        TxError::Refused(e)
    }
}

impl From<crate::canonical::CanonError> for TxError {
    fn from(e: crate::canonical::CanonError) -> Self {
        TxError::Refused(e.into())
    }
}

impl From<PgError> for TxError {
    fn from(e: PgError) -> Self {
        TxError::Db(e)
    }
}

impl From<postgres::Error> for TxError {
    fn from(e: postgres::Error) -> Self {
        TxError::Db(PgError::Db(e))
    }
}

fn storage(e: impl std::fmt::Display) -> Error {
    Error::Storage(e.to_string())
}

/// The receipt store on PostgreSQL.
pub struct PgStore {
    pool: PgPool,
    /// What advisory-lock names start with: the schema, so deployments in different schemas of
    /// one database do not wait for each other.
    prefix: String,
    schema: Option<String>,
    reconnect_for: Duration,
    /// Records a signed checkpoint with every append when set ([`PgStore::with_signing_key`]).
    signing: Option<Arc<SigningKey>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// Runs blocking database work on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Storage(format!("a store thread failed: {e}")))?
}

impl PgStore {
    /// Options for `url` from the environment: the schema from `$RECEIPT_POSTGRES_SCHEMA`
    /// (when set and not empty) or [`DEFAULT_SCHEMA`], the connection cap from
    /// `$RECEIPT_DB_MAX_CONNS` (default 16) and the reconnect window from
    /// `$RECEIPT_DB_RECONNECT` (default 30 s); unparsable numbers are ignored. Refuses a schema
    /// name that is not lowercase letters, digits and `_`.
    pub fn options(url: impl Into<String>) -> Result<PgOptions> {
        let schema = std::env::var(SCHEMA_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
        if !valid_schema_name(&schema) {
            return Err(Error::Invalid(format!(
                "{SCHEMA_ENV}={schema:?} is not a schema name (lowercase letters, digits and _, at most 63)"
            )));
        }
        let mut options = PgOptions::new(url);
        options.schema = Some(schema);
        if let Some(n) = std::env::var(MAX_CONNS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n > 0)
        {
            options.max_connections = n;
        }
        if let Some(d) = std::env::var(RECONNECT_ENV)
            .ok()
            .and_then(|v| parse_duration(&v))
        {
            options.reconnect_for = d;
        }
        Ok(options)
    }

    /// Connects to the database `options` names (creating the schema if one is named and
    /// missing) and applies the migrations it lacks, under an advisory lock.
    pub async fn connect(options: PgOptions) -> Result<PgStore> {
        blocking(move || {
            let pool = PgPool::connect(&options).map_err(storage)?;
            let prefix = options
                .schema
                .as_ref()
                .map_or_else(String::new, |s| format!("{s}."));
            pool.migrate(
                &format!("{prefix}{}", schema::MIGRATE_LOCK),
                schema::MIGRATIONS_TABLE,
                schema::MIGRATIONS,
            )
            .map_err(storage)?;
            Ok(PgStore {
                pool,
                prefix,
                schema: options.schema.clone(),
                reconnect_for: options.reconnect_for,
                signing: None,
            })
        })
        .await
    }

    /// This store, recording a signed checkpoint of the stream's head in the transaction of
    /// every append (see [`crate::signing`]).
    pub fn with_signing_key(mut self, key: Arc<SigningKey>) -> Self {
        self.signing = Some(key);
        self
    }

    /// The pool the store's transactions run on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema every connection pins, if one was named.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// Runs `body` (`changes` appends or branches) in a transaction, again (with `retry` set)
    /// while the connection fails or the server breaks a deadlock, within the reconnect window
    /// (see the module docs). A slow commit, a retry and a failure are logged.
    async fn write<R: Send + 'static>(
        &self,
        changes: usize,
        mut body: impl FnMut(&mut PgTransaction, bool) -> Result<R, TxError> + Send + 'static,
    ) -> Result<R> {
        let pool = self.pool.clone();
        let window = self.reconnect_for;
        blocking(move || {
            let deadline = Instant::now() + window;
            let mut pause = Duration::from_millis(50);
            let mut retry = false;
            let mut attempt: u32 = 0;
            loop {
                attempt += 1;
                let started = Instant::now();
                let failed = match pool.transaction(|tx| body(tx, retry)) {
                    Ok(out) => {
                        super::log_commit("postgres", changes, started.elapsed());
                        return Ok(out);
                    }
                    Err(TxError::Refused(e)) => return Err(e),
                    Err(TxError::Db(e)) => e,
                };
                let again = match &failed {
                    PgError::Db(e) => is_connection_error(e) || is_retryable_conflict(e),
                    PgError::Config(_) | PgError::Connect(_) | PgError::Aborted => false,
                };
                if !again || Instant::now() >= deadline {
                    tracing::warn!(
                        backend = "postgres",
                        attempt,
                        error = %failed,
                        "a receipt store transaction failed"
                    );
                    return Err(storage(failed));
                }
                tracing::warn!(
                    backend = "postgres",
                    attempt,
                    retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    error = %failed,
                    "a receipt store transaction failed: running it again on a new connection"
                );
                retry = true;
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        })
        .await
    }

    /// Runs a read, again on a new connection while the connection fails.
    async fn reading<R: Send + 'static>(
        &self,
        f: impl FnMut(&mut PgConn) -> Result<R, postgres::Error> + Send + 'static,
    ) -> Result<R> {
        let pool = self.pool.clone();
        blocking(move || pool.run(f).map_err(storage)).await
    }

    fn now() -> i64 {
        crate::sim::Clock::now_ms(&crate::sim::SystemClock)
    }
}

fn reserved(stream: &str) -> bool {
    stream.starts_with("__meta/")
}

#[async_trait]
impl ReceiptStore for PgStore {
    async fn read_range(&self, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>> {
        let stream = stream.to_owned();
        self.reading(move |c| tx::read_range(c, &stream, from, to))
            .await
    }

    async fn tail(&self, stream: &str) -> Result<Option<Tail>> {
        let stream = stream.to_owned();
        self.reading(move |c| tx::physical_tail(c, &stream)).await
    }

    async fn checkpoints(&self, stream: &str) -> Result<Vec<SignedHead>> {
        let stream = stream.to_owned();
        self.reading(move |c| tx::checkpoints(c, &stream, false))
            .await
    }

    async fn latest_checkpoint(&self, stream: &str) -> Result<Option<SignedHead>> {
        let stream = stream.to_owned();
        let mut latest = self
            .reading(move |c| tx::checkpoints(c, &stream, true))
            .await?;
        Ok(latest.pop())
    }

    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome> {
        if reserved(&request.stream) {
            return Err(Error::ReservedStream(request.stream));
        }
        let prefix = self.prefix.clone();
        let now = Self::now();
        let key = self.signing.clone();
        self.write(1, move |t, retry| {
            tx::lock_streams(t, &prefix, [request.stream.as_str()])?;
            tx::append(t, &request, now, retry, key.as_deref())
        })
        .await
    }

    async fn append_many(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendOutcome>> {
        let n = requests.len();
        let mut out: Vec<Option<Result<AppendOutcome>>> = (0..n).map(|_| None).collect();
        let mut valid = Vec::with_capacity(n);
        for (i, r) in requests.into_iter().enumerate() {
            if reserved(&r.stream) {
                out[i] = Some(Err(Error::ReservedStream(r.stream)));
            } else {
                valid.push((i, r));
            }
        }
        if valid.len() == 1 {
            let (i, r) = valid.pop().expect("one");
            out[i] = Some(self.append(r).await);
        } else if !valid.is_empty() {
            let prefix = self.prefix.clone();
            let now = Self::now();
            let key = self.signing.clone();
            let (indices, valid): (Vec<usize>, Vec<AppendRequest>) = valid.into_iter().unzip();
            let results = self
                .write(valid.len(), move |t, retry| {
                    tx::lock_streams(t, &prefix, valid.iter().map(|r| r.stream.as_str()))?;
                    // Every refusal comes before its request writes anything: a refused
                    // request needs no savepoint to fail alone.
                    let mut results = Vec::with_capacity(valid.len());
                    for r in &valid {
                        results.push(match tx::append(t, r, now, retry, key.as_deref()) {
                            Ok(outcome) => Ok(outcome),
                            Err(TxError::Refused(e)) => Err(e),
                            Err(db) => return Err(db),
                        });
                    }
                    Ok(results)
                })
                .await;
            match results {
                Ok(results) => {
                    for (i, r) in indices.into_iter().zip(results) {
                        out[i] = Some(r);
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    for i in indices {
                        out[i] = Some(Err(Error::Storage(message.clone())));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Storage("missing result".into()))))
            .collect()
    }

    async fn count_event_ids(&self, stream: &str, event_ids: &[String]) -> Result<usize> {
        let stream = stream.to_owned();
        let ids = event_ids.to_vec();
        self.reading(move |c| tx::count_event_ids(c, &stream, &ids))
            .await
    }

    async fn list_streams(&self) -> Result<Vec<StreamInfo>> {
        self.reading(tx::list_streams).await
    }

    async fn branch(&self, name: &str) -> Result<Option<BranchMeta>> {
        let name = name.to_owned();
        Ok(self
            .reading(move |c| tx::branches(c, Some(&name)))
            .await?
            .pop())
    }

    async fn list_branches(&self) -> Result<Vec<BranchMeta>> {
        self.reading(|c| tx::branches(c, None)).await
    }

    async fn create_branch(
        &self,
        meta: BranchMeta,
        meta_receipt: Receipt,
        meta_tail: Option<String>,
    ) -> Result<()> {
        let prefix = self.prefix.clone();
        let now = Self::now();
        let request = AppendRequest {
            stream: BRANCH_META_STREAM.to_owned(),
            receipts: vec![meta_receipt],
            expected_tail: meta_tail,
        };
        self.write(1, move |t, retry| {
            tx::lock_streams(t, &prefix, [BRANCH_META_STREAM, meta.name.as_str()])?;
            tx::create_branch(t, &meta, &request, now, retry)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn reconnect_windows_parse() {
        assert_eq!(parse_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_duration(" 5s "), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Some(Duration::from_millis(1500)));
        for bad in ["", "-1s", "5h", "fast", "NaN"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod server_tests {
    //! The retry path against a server: what a transaction run again after an unanswered
    //! `COMMIT` finds.

    use super::*;
    use crate::sim::{FixedClock, SeededEntropy};
    use crate::store::AppendOutcome;
    use serde_json::json;

    fn receipt(stream: &str, prev: Option<String>, seed: u64) -> Receipt {
        Receipt::build(
            stream,
            prev,
            json!({"type": "t"}),
            None,
            crate::receipt::Hints::new(),
            &FixedClock::new(1, 1),
            &SeededEntropy::new(seed),
        )
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
    async fn a_retried_append_finds_its_own_commit() {
        let url = std::env::var("REBUNO_TEST_PG_URL").expect("REBUNO_TEST_PG_URL");
        let schema = format!("r_retry_{}", std::process::id());
        let mut options = PgOptions::new(url.clone());
        options.schema = Some(schema.clone());
        let store = PgStore::connect(options).await.unwrap();
        let request = AppendRequest {
            stream: "s".into(),
            receipts: vec![receipt("s", None, 1)],
            expected_tail: None,
        };
        let (prefix, now) = (store.prefix.clone(), 0);
        let run = |retry: bool| {
            let (request, prefix) = (request.clone(), prefix.clone());
            store.write(1, move |t, _| {
                tx::lock_streams(t, &prefix, ["s"])?;
                tx::append(t, &request, now, retry, None)
            })
        };
        let first = run(false).await.unwrap();
        // Run again as a retry (the first commit's answer lost): the receipts are found by
        // hash and the outcome is the first run's, with nothing written twice.
        assert_eq!(run(true).await.unwrap(), first);
        // Run again as a fresh request: the compare-and-swap refuses it.
        assert!(matches!(run(false).await, Err(Error::ExpectedPrev { .. })));
        assert_eq!(ReceiptStore::read(&store, "s").await.unwrap().len(), 1);
        // A retry of a request that never committed goes through normally.
        let next = AppendRequest {
            stream: "s".into(),
            receipts: vec![receipt("s", Some(request.receipts[0].hash().into()), 2)],
            expected_tail: Some(request.receipts[0].hash().into()),
        };
        let prefix2 = prefix.clone();
        let out = store
            .write(1, move |t, _| {
                tx::lock_streams(t, &prefix2, ["s"])?;
                tx::append(t, &next, now, true, None)
            })
            .await
            .unwrap();
        assert!(matches!(out, AppendOutcome::Appended { tail } if tail.seq == 1));
        drop(store);
        std::thread::spawn(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .unwrap();
        })
        .join()
        .unwrap();
    }
}
