//! The SQLite group commit: many changes in one `BEGIN IMMEDIATE … COMMIT`, each in a savepoint
//! of its own, with an answer per change that says truthfully whether it was kept.
//!
//! Both stores' writer threads (the kernel store in `rebuno`, the receipt store in `receipt`)
//! gather the changes waiting for them and hand them to [`run_group`]; everything about the
//! transaction itself lives here:
//!
//! - One failing change never undoes its neighbours: its savepoint is rolled back, theirs are
//!   kept.
//! - A change that panics is caught, answered as failed and rolled back like any other failure;
//!   the writer thread lives on.
//! - Some errors (`SQLITE_FULL`, `SQLITE_IOERR`, `SQLITE_NOMEM`, `SQLITE_BUSY`, an interrupt)
//!   make SQLite roll back the whole transaction by itself, which takes the group's earlier
//!   changes with it. The group notices (the connection is back in autocommit mode), fails
//!   exactly those changes, and runs the rest in a fresh transaction.
//! - A savepoint that can be neither released nor rolled back leaves the transaction holding an
//!   unknown part of a change, so the whole transaction is undone rather than half of it
//!   committed.
//! - A change is answered `Ok` only once the `COMMIT` that holds it succeeded.

use rusqlite::Connection;
use std::fmt;

/// The error type of a store that runs group commits: it can carry the writer's own failures
/// (a transaction that cannot begin or commit, a lost group, a panic) as text.
pub trait WriterError: fmt::Display + From<rusqlite::Error> {
    /// An error of the writer itself, with `message`.
    fn writer(message: String) -> Self;
}

/// Each change's answer, with the tag (usually a reply channel) it was given with.
pub type Answers<T, E, R> = Vec<(Result<T, E>, R)>;

/// Runs `f` as one unit inside the open transaction (a savepoint), catching panics so a bug in
/// one change cannot take the writer down. Returns `f`'s answer, and whether the savepoint was
/// closed as intended (released after success, rolled back after failure).
fn run_one<T, E: WriterError>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<T, E>,
) -> (Result<T, E>, Result<(), E>) {
    if let Err(e) = conn
        .prepare_cached("SAVEPOINT w")
        .and_then(|mut s| s.execute([]))
    {
        return (Err(e.into()), Ok(()));
    }
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn)))
        .unwrap_or_else(|_| Err(E::writer("a store transaction panicked".into())));
    let closed = match &out {
        Ok(_) => conn
            .prepare_cached("RELEASE w")
            .and_then(|mut s| s.execute([]))
            .map(drop),
        Err(_) => conn.execute_batch("ROLLBACK TO w; RELEASE w"),
    };
    (out, closed.map_err(E::from))
}

/// One group commit in progress: the changes the open transaction holds, with their tags, and
/// the answers already known.
struct Group<'c, T, E, R> {
    conn: &'c Connection,
    /// A transaction is open.
    open: bool,
    /// Changes in the open transaction, answered only once it commits.
    held: Answers<T, E, R>,
    /// Final answers.
    answers: Answers<T, E, R>,
}

impl<T, E: WriterError, R> Group<'_, T, E, R> {
    fn begin(&mut self) -> Result<(), String> {
        // A transaction left open by a failed ROLLBACK would make BEGIN fail for every later
        // group; end it first.
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| format!("begin: {e}"))?;
        self.open = true;
        Ok(())
    }

    /// The open transaction is gone (rolled back by SQLite or by us): every change it held
    /// fails with `why`.
    fn lose(&mut self, why: &E) {
        self.open = false;
        if self.held.is_empty() {
            return;
        }
        tracing::error!(
            changes = self.held.len(),
            error = %why,
            "a group commit was rolled back; its changes are answered as failed"
        );
        for (_, tag) in self.held.drain(..) {
            let lost = E::writer(format!("the group commit was rolled back: {why}"));
            self.answers.push((Err(lost), tag));
        }
    }

    fn run(&mut self, f: impl FnOnce(&Connection) -> Result<T, E>, tag: R) {
        let (out, closed) = run_one(self.conn, f);
        if self.conn.is_autocommit() {
            // SQLite rolled the whole transaction back while this change ran: it and every
            // change before it in the group are gone.
            let failed = match (out, closed) {
                (Err(e), _) | (Ok(_), Err(e)) => e,
                (Ok(_), Ok(())) => E::writer("the transaction ended early".into()),
            };
            self.lose(&failed);
            self.answers.push((Err(failed), tag));
            return;
        }
        match (out, closed) {
            (Ok(v), Ok(())) => self.held.push((Ok(v), tag)),
            // Rolled back to its savepoint: nothing of it is kept, its neighbours are.
            (Err(e), Ok(())) => self.answers.push((Err(e), tag)),
            (out, Err(e)) => {
                // Neither released nor rolled back: the transaction holds an unknown part of
                // this change. Committing could keep half of it, so undo everything.
                tracing::error!(error = %e, "a savepoint could not be closed");
                let _ = self.conn.execute_batch("ROLLBACK");
                self.lose(&e);
                self.answers.push((Err(out.err().unwrap_or(e)), tag));
            }
        }
    }

    /// Commits what the open transaction holds; those changes are answered `Ok` only if the
    /// commit succeeds.
    fn commit(&mut self) {
        if !self.open {
            return;
        }
        match self.conn.execute_batch("COMMIT") {
            Ok(()) => {
                self.open = false;
                self.answers.append(&mut self.held);
            }
            Err(e) => {
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                self.lose(&E::writer(format!("commit: {e}")));
            }
        }
    }
}

/// Runs `changes` as one group commit on `conn` and answers each with its tag (in no
/// particular order). `before_commit` runs once, after the last change and just before
/// `COMMIT` (also when nothing is left to commit); its value is returned with the answers.
pub fn run_group<T, E, R, F, S>(
    conn: &Connection,
    changes: impl IntoIterator<Item = (F, R)>,
    before_commit: impl FnOnce() -> S,
) -> (S, Answers<T, E, R>)
where
    E: WriterError,
    F: FnOnce(&Connection) -> Result<T, E>,
{
    let mut changes = changes.into_iter();
    let mut group = Group {
        conn,
        open: false,
        held: Vec::with_capacity(changes.size_hint().0),
        answers: Vec::with_capacity(changes.size_hint().0),
    };
    while let Some((f, tag)) = changes.next() {
        if !group.open
            && let Err(e) = group.begin()
        {
            group.answers.push((Err(E::writer(e.clone())), tag));
            group.answers.extend(
                changes
                    .by_ref()
                    .map(|(_, tag)| (Err(E::writer(e.clone())), tag)),
            );
            break;
        }
        group.run(f, tag);
    }
    let before = before_commit();
    group.commit();
    (before, group.answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test store's error.
    #[derive(Debug, PartialEq)]
    struct TestError(String);

    impl fmt::Display for TestError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl From<rusqlite::Error> for TestError {
        fn from(e: rusqlite::Error) -> Self {
            TestError(e.to_string())
        }
    }

    impl WriterError for TestError {
        fn writer(message: String) -> Self {
            TestError(message)
        }
    }

    type Change = Box<dyn FnOnce(&Connection) -> Result<(), TestError>>;

    fn insert(id: &'static str, size: usize) -> Change {
        Box::new(move |c| {
            c.execute(
                "INSERT INTO t (id, v) VALUES (?1, ?2)",
                (id, "x".repeat(size)),
            )?;
            Ok(())
        })
    }

    /// A migrated WAL database that may grow by two pages only: a change writing a large value
    /// then fails with SQLITE_FULL, which makes SQLite roll back the whole transaction.
    fn nearly_full() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("g.db")).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT NOT NULL)")
            .unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages + 2)
            .unwrap();
        (dir, conn)
    }

    /// Runs `changes` as one group; the answers in change order, and whether `before_commit`
    /// ran.
    fn run(conn: &Connection, changes: Vec<Change>) -> (bool, Vec<Result<(), TestError>>) {
        let (ran, mut answers) = run_group(conn, changes.into_iter().zip(0..), || true);
        answers.sort_by_key(|(_, i)| *i);
        (ran, answers.into_iter().map(|(r, _)| r).collect())
    }

    fn stored(conn: &Connection, id: &str) -> bool {
        conn.query_row("SELECT count(*) FROM t WHERE id = ?1", [id], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
            == 1
    }

    #[test]
    fn a_panicking_change_fails_alone_and_the_group_commits() {
        let (_dir, conn) = nearly_full();
        conn.pragma_update(None, "max_page_count", 1_000_000)
            .unwrap();
        let panics: Change = Box::new(|c| {
            c.execute("INSERT INTO t (id, v) VALUES ('panics', '')", [])?;
            panic!("a bug in a change");
        });
        let (ran, answers) = run(&conn, vec![insert("a", 1), panics, insert("b", 1)]);
        assert!(ran);
        assert_eq!(answers[0], Ok(()));
        assert_eq!(
            answers[1],
            Err(TestError("a store transaction panicked".into()))
        );
        assert_eq!(answers[2], Ok(()));
        assert!(stored(&conn, "a") && stored(&conn, "b"));
        assert!(
            !stored(&conn, "panics"),
            "the panicking change is rolled back"
        );
        assert!(conn.is_autocommit());
    }

    #[test]
    fn a_failing_change_keeps_its_neighbours() {
        let (_dir, conn) = nearly_full();
        conn.pragma_update(None, "max_page_count", 1_000_000)
            .unwrap();
        let (_, answers) = run(&conn, vec![insert("a", 1), insert("a", 1), insert("b", 1)]);
        assert!(answers[0].is_ok() && answers[1].is_err() && answers[2].is_ok());
        assert!(stored(&conn, "a") && stored(&conn, "b"));
    }

    #[test]
    fn a_change_that_aborts_the_transaction_fails_exactly_the_changes_lost() {
        let (_dir, conn) = nearly_full();
        let (ran, answers) = run(
            &conn,
            vec![
                insert("before", 1),
                insert("huge", 256 * 1024),
                insert("after", 1),
            ],
        );
        assert!(ran);
        let ok: Vec<bool> = answers.iter().map(Result::is_ok).collect();
        assert_eq!(ok, [false, false, true]);
        assert!(
            answers[0]
                .as_ref()
                .unwrap_err()
                .0
                .starts_with("the group commit was rolled back: ")
        );
        for (id, ok) in ["before", "huge", "after"].iter().zip(ok) {
            assert_eq!(stored(&conn, id), ok, "{id}");
        }
        assert!(conn.is_autocommit());
    }

    #[test]
    fn a_transaction_that_cannot_begin_fails_every_change() {
        let (dir, conn) = nearly_full();
        // Another connection holds the write lock, and this one does not wait for it.
        let other = Connection::open(dir.path().join("g.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        conn.busy_timeout(std::time::Duration::ZERO).unwrap();
        let (ran, answers) = run(&conn, vec![insert("a", 1), insert("b", 1)]);
        assert!(ran, "before_commit runs even when nothing is committed");
        for answer in answers {
            assert!(answer.unwrap_err().0.starts_with("begin: "));
        }
        other.execute_batch("ROLLBACK").unwrap();
        assert!(!stored(&conn, "a") && !stored(&conn, "b"));
    }
}
