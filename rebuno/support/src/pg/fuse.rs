//! Held-back writes fused into one statement ([`PgTransaction::defer_fusable`]).
//!
//! A transaction's held-back writes leave together, before the next read or with `COMMIT`; the
//! server still runs each as a statement of its own (bind, plan lookup, executor start, its own
//! answer). Writes that cannot see each other's effects go instead as one statement, each a
//! data-modifying `WITH` part: `WITH w0 AS (…), w1 AS (…) SELECT`. PostgreSQL runs every part
//! once and to the end whether or not it is referenced, all with the statement's one snapshot,
//! in an order it does not promise, so a write joins the statement only if no part already in
//! it writes what it reads or writes, and it writes nothing such a part reads ([`Touches`]);
//! otherwise a new statement starts. Only `INSERT`, `UPDATE` and `DELETE` statements without
//! a `WITH` of their own are fused (a `SELECT` part would not run unless referenced, and a
//! data-modifying `WITH` must be at the top level). The fused text is the same for the same
//! sequence of writes, so it is prepared once per connection like any other statement.
//!
//! [`PgTransaction::defer_fusable`]: super::PgTransaction::defer_fusable

use super::statements::Request;
#[cfg(test)]
use super::statements::renumber;

/// What a held-back write reads and writes, by name: a table (`"steps"`), or a group of a
/// table's columns (`"dispatches.lease"`), which overlaps its table and itself only. A read
/// that locks rows names the whole table (a part of the same statement must not change a row
/// it locks). The caller vouches for the names: two writes whose names do not overlap must not
/// see each other's effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touches {
    /// What the write reads (its `WHERE`, a subquery, the rows an `ON CONFLICT` looks at).
    pub reads: &'static [&'static str],
    /// What it changes.
    pub writes: &'static [&'static str],
}

/// Whether names `a` and `b` overlap: equal, or one names the table the other is a part of.
fn overlap(a: &str, b: &str) -> bool {
    let table = |n: &'_ str| n.split_once('.').map_or(n, |(t, _)| t).len();
    let whole = |n: &str| table(n) == n.len();
    a == b || (a[..table(a)] == b[..table(b)] && (whole(a) || whole(b)))
}

fn any_overlap(a: &[&str], b: &[&str]) -> bool {
    a.iter().any(|x| b.iter().any(|y| overlap(x, y)))
}

impl Touches {
    /// Whether `self` and `other` may see each other's effects.
    fn conflicts(&self, other: &Touches) -> bool {
        any_overlap(self.writes, other.writes)
            || any_overlap(self.writes, other.reads)
            || any_overlap(other.writes, self.reads)
    }
}

/// A held-back write, and what it touches if it may be fused.
#[derive(Debug, Clone)]
pub(super) struct Deferred {
    pub(super) request: Request,
    pub(super) touches: Option<Touches>,
}

/// Whether `sql` may be a part of a fused statement: a data-modifying statement with no `WITH`.
fn fusable_text(sql: &str) -> bool {
    let head = sql.trim_start();
    ["INSERT", "UPDATE", "DELETE"].iter().any(|verb| {
        head.get(..verb.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(verb))
    })
}

/// `deferred`, in order, as the statements to send: runs of fusable writes that touch nothing
/// in common fused into one each (see the module docs).
pub(super) fn fuse(deferred: Vec<Deferred>) -> Vec<Request> {
    let mut out = Vec::with_capacity(deferred.len());
    let mut group: Vec<(Request, Touches)> = Vec::new();
    for d in deferred {
        let touches = d.touches.filter(|_| fusable_text(d.request.sql()));
        let Some(touches) = touches else {
            flush(&mut group, &mut out);
            out.push(d.request);
            continue;
        };
        if group.iter().any(|(_, t)| t.conflicts(&touches)) {
            flush(&mut group, &mut out);
        }
        group.push((d.request, touches));
    }
    flush(&mut group, &mut out);
    out
}

/// Sends the group as one statement (or its one write as it is).
fn flush(group: &mut Vec<(Request, Touches)>, out: &mut Vec<Request>) {
    match group.len() {
        0 => {}
        1 => out.push(group.pop().expect("one write").0),
        _ => {
            let parts: Vec<Request> = group.drain(..).map(|(r, _)| r).collect();
            out.push(Request::fused(&parts));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres::types::{ToSql, Type};

    fn write(sql: &str, n: i64, touches: Option<Touches>) -> Deferred {
        Deferred {
            request: Request::new(sql, &[(&n as &(dyn ToSql + Sync), Type::INT8)]),
            touches,
        }
    }

    const STEPS: Touches = Touches {
        reads: &["steps"],
        writes: &["steps"],
    };
    const EVENTS: Touches = Touches {
        reads: &["events"],
        writes: &["events"],
    };
    const LEASE: Touches = Touches {
        reads: &["dispatches.fence"],
        writes: &["dispatches.lease"],
    };
    const LOCKING_FENCE_READ: Touches = Touches {
        reads: &["dispatches"],
        writes: &["counters"],
    };

    #[test]
    fn parameters_are_renumbered_outside_quotes() {
        assert_eq!(
            renumber("UPDATE t SET a = $1, b = '$1', \"$2\" = $12::text[]", 3),
            "UPDATE t SET a = $4, b = '$1', \"$2\" = $15::text[]"
        );
        assert_eq!(
            renumber("SELECT 'it''s $1', $2", 1),
            "SELECT 'it''s $1', $3"
        );
    }

    #[test]
    fn names_overlap_by_table_or_by_the_same_part() {
        assert!(overlap("steps", "steps"));
        assert!(overlap("dispatches", "dispatches.lease"));
        assert!(overlap("dispatches.lease", "dispatches"));
        assert!(!overlap("dispatches.lease", "dispatches.fence"));
        assert!(!overlap("dispatch", "dispatches"));
        assert!(!overlap("steps", "events"));
    }

    #[test]
    fn writes_that_touch_nothing_in_common_go_as_one_statement() {
        let out = fuse(vec![
            write(
                "UPDATE dispatches SET locked_at = now() WHERE n = $1",
                1,
                Some(LEASE),
            ),
            write("INSERT INTO steps VALUES ($1)", 2, Some(STEPS)),
            write("INSERT INTO events VALUES ($1)", 3, Some(EVENTS)),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0].sql(),
            "WITH w0 AS (UPDATE dispatches SET locked_at = now() WHERE n = $1), \
             w1 AS (INSERT INTO steps VALUES ($2)), w2 AS (INSERT INTO events VALUES ($3)) SELECT"
        );
        assert_eq!(out[0].types(), &[Type::INT8, Type::INT8, Type::INT8]);
        let single = Request::new("INSERT INTO steps VALUES ($1)", &[(&2i64, Type::INT8)]);
        assert_eq!(out[0].values().len(), 3);
        assert_ne!(out[0], single);
    }

    #[test]
    fn a_write_that_could_see_another_starts_a_new_statement() {
        let out = fuse(vec![
            write(
                "INSERT INTO counters SELECT $1 FROM dispatches FOR UPDATE",
                1,
                Some(LOCKING_FENCE_READ),
            ),
            write(
                "UPDATE dispatches SET locked_at = now() WHERE n = $1",
                2,
                Some(LEASE),
            ),
            write("INSERT INTO steps VALUES ($1)", 3, Some(STEPS)),
            write("INSERT INTO steps VALUES ($1)", 4, Some(STEPS)),
        ]);
        let sql: Vec<&str> = out.iter().map(Request::sql).collect();
        assert_eq!(
            sql,
            [
                "INSERT INTO counters SELECT $1 FROM dispatches FOR UPDATE",
                "WITH w0 AS (UPDATE dispatches SET locked_at = now() WHERE n = $1), \
                 w1 AS (INSERT INTO steps VALUES ($2)) SELECT",
                "INSERT INTO steps VALUES ($1)",
            ]
        );
    }

    #[test]
    fn unfusable_writes_keep_their_place_and_split_the_run() {
        let out = fuse(vec![
            write("INSERT INTO steps VALUES ($1)", 1, Some(STEPS)),
            write("SELECT pg_advisory_xact_lock($1)", 2, Some(EVENTS)),
            write("INSERT INTO events VALUES ($1)", 3, Some(EVENTS)),
            write(
                "WITH x AS (DELETE FROM a RETURNING 1) INSERT INTO b SELECT $1",
                4,
                Some(STEPS),
            ),
            write("INSERT INTO events VALUES ($1)", 5, None),
        ]);
        assert_eq!(out.len(), 5);
        assert!(out.iter().all(|r| !r.sql().starts_with("WITH w0")));
    }
}
