//! Two stores in one SQLite file: the rebuno kernel store and the receipt store may share a
//! database file, so that one process keeps its kernel and its receipts in one place.
//!
//! A SQLite file has one `PRAGMA application_id` and one `PRAGMA user_version`. The store that
//! creates a file claims both: its application id marks the file as its own, and
//! `user_version` counts its migrations. The other store may then live in the file as a
//! *guest*: it keeps its schema version in a table of its own (`rebuno_meta` or
//! `receipt_meta`, one `schema_version` row) and leaves the header alone. Each store's tables
//! carry names the other never uses, so neither touches the other's data.
//!
//! Only these two stores share: a file with another application id, or with tables but no
//! application id (someone else's database), is refused, as before. Each store asks
//! [`Tenant::holding`] inside the transaction that installs or migrates its schema, so two
//! processes opening a new file at once cannot both take it for their own.

use rusqlite::{Connection, OptionalExtension};
use std::fmt;

/// A store that may share its SQLite file with the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    /// Its name in messages.
    pub name: &'static str,
    /// The `PRAGMA application_id` of a file it created.
    pub application_id: i64,
    /// The table that holds its schema version when it is a guest in the other's file.
    pub meta_table: &'static str,
}

/// The rebuno kernel store ("RBNO").
pub const REBUNO: Tenant = Tenant {
    name: "rebuno",
    application_id: 0x5242_4e4f,
    meta_table: "rebuno_meta",
};

/// The receipt store ("RCPT").
pub const RECEIPT: Tenant = Tenant {
    name: "receipt",
    application_id: 0x5243_5054,
    meta_table: "receipt_meta",
};

/// How a file holds a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// A new file: no application id and no tables. The store claims it as it installs its
    /// schema.
    Empty,
    /// The store's own file: its schema version is `user_version`.
    Owner {
        /// The schema version recorded.
        version: i64,
    },
    /// The other store's file, which this one shares: its schema version is in its meta
    /// table (0 while it has not installed its schema there).
    Guest {
        /// The schema version recorded.
        version: i64,
    },
}

impl Holding {
    /// The store's schema version in the file (0: none installed).
    pub fn version(self) -> i64 {
        match self {
            Holding::Empty => 0,
            Holding::Owner { version } | Holding::Guest { version } => version,
        }
    }
}

/// Why a file cannot hold a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// Tables but no application id: someone else's database.
    OtherTables,
    /// The application id of neither store.
    Application(i64),
}

impl fmt::Display for Foreign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Foreign::OtherTables => f.write_str("it holds other tables"),
            Foreign::Application(id) => write!(f, "application_id is {id:#x}"),
        }
    }
}

impl Tenant {
    /// The store this one may share a file with.
    pub fn other(&self) -> &'static Tenant {
        if self.application_id == REBUNO.application_id {
            &RECEIPT
        } else {
            &REBUNO
        }
    }

    /// How `conn`'s file holds this store, or why it cannot. Ask inside the transaction that
    /// installs or migrates the schema, so the answer cannot change before it commits.
    pub fn holding(&self, conn: &Connection) -> rusqlite::Result<Result<Holding, Foreign>> {
        // One statement, so one snapshot: read apart, the header and the table count could
        // straddle another process's commit that creates the file's schema.
        let (app_id, user_version, tables): (i64, i64, i64) = conn.query_row(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_master)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        if app_id == self.application_id {
            return Ok(Ok(Holding::Owner {
                version: user_version,
            }));
        }
        if app_id == self.other().application_id {
            return Ok(Ok(Holding::Guest {
                version: self.guest_version(conn)?,
            }));
        }
        if app_id != 0 {
            return Ok(Err(Foreign::Application(app_id)));
        }
        Ok(if tables == 0 {
            Ok(Holding::Empty)
        } else {
            Err(Foreign::OtherTables)
        })
    }

    /// The version in this store's meta table (0 without one). The table, once there, only
    /// ever holds this store's latest version, so a later snapshot than the header's does no
    /// harm.
    fn guest_version(&self, conn: &Connection) -> rusqlite::Result<i64> {
        let exists: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [self.meta_table],
            |r| r.get(0),
        )?;
        if exists == 0 {
            return Ok(0);
        }
        let version = conn
            .query_row(
                &format!(
                    "SELECT value FROM {} WHERE key = 'schema_version'",
                    self.meta_table
                ),
                [],
                |r| r.get(0),
            )
            .optional()?;
        Ok(version.unwrap_or(0))
    }

    /// Records `version` as this store's schema version in a file that holds it as
    /// `holding`: an empty file becomes the store's own (application id and `user_version`),
    /// a guest writes its meta table. Run it in the transaction that installed the schema.
    pub fn record_version(
        &self,
        conn: &Connection,
        holding: Holding,
        version: i64,
    ) -> rusqlite::Result<()> {
        match holding {
            Holding::Empty | Holding::Owner { .. } => conn.execute_batch(&format!(
                "PRAGMA application_id = {}; PRAGMA user_version = {version};",
                self.application_id
            )),
            Holding::Guest { .. } => {
                conn.execute_batch(&format!(
                    "CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
                    self.meta_table
                ))?;
                conn.execute(
                    &format!(
                        "INSERT INTO {} (key, value) VALUES ('schema_version', ?1)
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        self.meta_table
                    ),
                    [version],
                )?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(conn: &Connection, tenant: &Tenant, version: i64) -> Holding {
        let holding = tenant.holding(conn).unwrap().unwrap();
        conn.execute_batch(&format!("CREATE TABLE {}_data (x)", tenant.name))
            .unwrap();
        tenant.record_version(conn, holding, version).unwrap();
        holding
    }

    #[test]
    fn the_first_store_owns_the_file_and_the_second_is_its_guest() {
        for (first, second) in [(&REBUNO, &RECEIPT), (&RECEIPT, &REBUNO)] {
            let conn = Connection::open_in_memory().unwrap();
            assert_eq!(install(&conn, first, 11), Holding::Empty);
            assert_eq!(
                second.holding(&conn).unwrap(),
                Ok(Holding::Guest { version: 0 }),
                "installed nothing yet"
            );
            install(&conn, second, 1);
            assert_eq!(
                first.holding(&conn).unwrap(),
                Ok(Holding::Owner { version: 11 })
            );
            assert_eq!(
                second.holding(&conn).unwrap(),
                Ok(Holding::Guest { version: 1 })
            );
            // A guest migrating later updates its row and leaves the header alone.
            second
                .record_version(&conn, Holding::Guest { version: 1 }, 2)
                .unwrap();
            assert_eq!(
                second.holding(&conn).unwrap(),
                Ok(Holding::Guest { version: 2 })
            );
            assert_eq!(
                first.holding(&conn).unwrap(),
                Ok(Holding::Owner { version: 11 })
            );
        }
    }

    #[test]
    fn other_databases_are_refused() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x)").unwrap();
        for tenant in [&REBUNO, &RECEIPT] {
            let refused = tenant.holding(&conn).unwrap().unwrap_err();
            assert_eq!(refused, Foreign::OtherTables);
            assert_eq!(refused.to_string(), "it holds other tables");
        }
        conn.execute_batch("PRAGMA application_id = 7").unwrap();
        for tenant in [&REBUNO, &RECEIPT] {
            assert_eq!(
                tenant.holding(&conn).unwrap().unwrap_err().to_string(),
                "application_id is 0x7"
            );
        }
    }
}
