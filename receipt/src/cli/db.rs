//! Which receipt database a command works on and how it is opened: a SQLite file, or
//! PostgreSQL when the `--db` / `$RECEIPT_DB` value is a `postgres://` (or `postgresql://`) URL
//! (its schema from `$RECEIPT_POSTGRES_SCHEMA`, else `receipt`; see
//! [`PgStore::options`](crate::store::PgStore::options)). Also what may be printed of it: a
//! URL's password never is.

use super::{CliResult, DEFAULT_DB, Failure};
use crate::signing::SigningKey;
use crate::store::PgStore;
use crate::store::postgres::RECONNECT_ENV;
use crate::store::{FileWitness, SqliteOptions, Witnessed};
use crate::{ReceiptStore, Runtime, SqliteStore};
use durable_support::pg::redact_url;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A receipt database named on the command line, and the key its appends are signed with.
#[derive(Debug, Clone)]
pub(super) struct Db {
    location: Location,
    signing: Option<Arc<SigningKey>>,
    /// The witness file the stores push their signed heads to.
    witness: Option<PathBuf>,
}

/// Where a receipt database is.
#[derive(Debug, Clone)]
enum Location {
    /// A SQLite file.
    File(PathBuf),
    /// A PostgreSQL connection URL.
    Postgres(String),
}

impl Db {
    /// A `postgres://` or `postgresql://` URL names PostgreSQL; anything else is a file path.
    pub(super) fn parse(raw: PathBuf) -> Db {
        let location = match raw.to_str() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Location::Postgres(url.to_owned())
            }
            _ => Location::File(raw),
        };
        Db {
            location,
            signing: None,
            witness: None,
        }
    }

    /// This database, its stores recording a signed checkpoint with every append.
    pub(super) fn signed_with(mut self, key: Option<Arc<SigningKey>>) -> Db {
        self.signing = key;
        self
    }

    /// This database, its stores pushing each new signed head to witness file `path`.
    pub(super) fn witnessed_by(mut self, path: Option<PathBuf>) -> Db {
        self.witness = path;
        self
    }

    /// `store`, pushing to the witness file when there is one.
    fn witnessing(&self, store: Arc<dyn ReceiptStore>) -> Arc<dyn ReceiptStore> {
        match &self.witness {
            None => store,
            Some(path) => Arc::new(Witnessed::new(store, Arc::new(FileWitness::new(path)))),
        }
    }

    /// Opens the store for a command that runs once. A file is created only when `create` is
    /// set, in a directory that exists (the default directory [`DEFAULT_DIR`] is created);
    /// PostgreSQL tables are created (in their schema) by whichever command connects first.
    /// An unreachable PostgreSQL is reported with its cause within seconds (one attempt, unless
    /// `$RECEIPT_DB_RECONNECT` asks for retries).
    pub(super) async fn open(&self, create: bool) -> CliResult<Arc<dyn ReceiptStore>> {
        self.open_as(create, false).await
    }

    /// [`Db::open`] for a command that keeps running (a worker, the UI, an agent's run): an
    /// unreachable PostgreSQL is retried for the reconnect window, each failure logged.
    pub(super) async fn open_serving(&self, create: bool) -> CliResult<Arc<dyn ReceiptStore>> {
        self.open_as(create, true).await
    }

    async fn open_as(&self, create: bool, serving: bool) -> CliResult<Arc<dyn ReceiptStore>> {
        match &self.location {
            Location::File(path) => {
                let options = SqliteOptions {
                    signing_key: self.signing.clone(),
                    ..SqliteOptions::default()
                };
                let store = if create {
                    check_dir(path)?;
                    SqliteStore::open_with(path, options)?
                } else {
                    SqliteStore::open_existing_with(path, options)?
                };
                Ok(self.witnessing(Arc::new(store)))
            }
            Location::Postgres(url) => {
                let mut options = PgStore::options(url.clone())?;
                if !serving {
                    let reconnect = options.reconnect_for;
                    options = options.one_shot();
                    if std::env::var_os(RECONNECT_ENV).is_some_and(|v| !v.is_empty()) {
                        options.reconnect_for = reconnect;
                    }
                }
                let mut store = PgStore::connect(options).await.map_err(|e| {
                    Failure::Message(format!("cannot open {}: {e}", redact_url(url)))
                })?;
                if let Some(key) = &self.signing {
                    store = store.with_signing_key(Arc::clone(key));
                }
                Ok(self.witnessing(Arc::new(store)))
            }
        }
    }

    /// A runtime over the store (see [`Db::open`]).
    pub(super) async fn runtime(&self, create: bool) -> CliResult<Runtime> {
        Ok(Runtime::new(self.open(create).await?))
    }

    /// A runtime over the store, for a command that keeps running (see [`Db::open_serving`]).
    pub(super) async fn runtime_serving(&self, create: bool) -> CliResult<Runtime> {
        Ok(Runtime::new(self.open_serving(create).await?))
    }

    /// `message` with the URL's password, wherever it appears, replaced by `***`.
    pub(super) fn scrub(&self, message: String) -> String {
        let Location::Postgres(url) = &self.location else {
            return message;
        };
        let message = message.replace(url.as_str(), &redact_url(url));
        match password(url) {
            // A very short password would match ordinary text; the URL itself is gone already.
            Some(p) if p.len() >= 4 => message.replace(p, "***"),
            _ => message,
        }
    }
}

/// Refuses a new database file whose directory is missing (a mistyped path, far more often
/// than a wish for new directories), naming the directory; the default directory is created.
fn check_dir(path: &Path) -> CliResult<()> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() || path.exists() {
        return Ok(());
    }
    if Path::new(DEFAULT_DB).parent() == Some(dir) {
        return std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Message(format!("cannot create {}: {e}", dir.display())));
    }
    Err(Failure::Message(format!(
        "cannot create the database {}: directory {} does not exist (create it first, e.g. \
         mkdir -p {})",
        path.display(),
        dir.display(),
        dir.display()
    )))
}

/// The password of a URL's `user:password@` part, if it has one.
fn password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let (userinfo, _) = authority.rsplit_once('@')?;
    userinfo.split_once(':').map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_printed_without_their_password() {
        assert_eq!(
            redact_url("postgres://app:s3cr@t@db.example:5432/receipts?sslmode=require"),
            "postgres://app:***@db.example:5432/receipts?sslmode=require"
        );
        assert_eq!(redact_url("postgres://app@db/r"), "postgres://app@db/r");
        assert_eq!(redact_url("postgresql://db/r"), "postgresql://db/r");
        let db = Db::parse("postgres://app:hunter22@db/r".into());
        assert_eq!(
            db.scrub("cannot reach postgres://app:hunter22@db/r (password hunter22)".into()),
            "cannot reach postgres://app:***@db/r (password ***)"
        );
        assert!(matches!(
            Db::parse("x/postgres://y".into()).location,
            Location::File(_)
        ));
        assert!(matches!(
            Db::parse("postgresql://h/d".into()).location,
            Location::Postgres(_)
        ));
    }
}
