//! The kernel database's schema: embedded, numbered migrations applied at open, and the checks
//! that a file is a rebuno database of a version this build understands (or a receipt database
//! the kernel shares).

use crate::store::{StoreError, StoreResult};
use crate::telemetry::MIGRATIONS_TARGET;
use durable_support::sqlite_tenancy::REBUNO;
use rusqlite::Connection;
use std::path::Path;

/// Embedded migrations; `user_version` records how many have run.
pub(super) const MIGRATIONS: &[&str] = &["
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    webhook_url TEXT NOT NULL,
    secret TEXT NOT NULL,
    policy_bundle TEXT NOT NULL DEFAULT '',
    registered_at TEXT NOT NULL
);
CREATE TABLE executions (
    id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    agent_version TEXT NOT NULL DEFAULT '',
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    failure_reason TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    deadline_at TEXT
);
CREATE INDEX executions_agent ON executions (agent_id, id DESC);
CREATE INDEX executions_active ON executions (status) WHERE status IN ('pending', 'running', 'blocked');
CREATE TABLE events (
    execution_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    PRIMARY KEY (execution_id, event_seq)
) WITHOUT ROWID;
CREATE TABLE steps (
    step_id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    status TEXT NOT NULL,
    idempotency TEXT NOT NULL,
    args TEXT,
    result TEXT,
    error TEXT,
    started_at TEXT,
    completed_at TEXT
);
CREATE INDEX steps_execution ON steps (execution_id);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    step_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    status TEXT NOT NULL,
    approvers TEXT,
    message TEXT NOT NULL DEFAULT '',
    timeout_at TEXT NOT NULL,
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT,
    rationale TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE INDEX approvals_pending ON approvals (timeout_at) WHERE status = 'pending';
CREATE INDEX approvals_execution ON approvals (execution_id);
CREATE TABLE dispatches (
    id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    next_attempt_at TEXT NOT NULL,
    locked_by TEXT NOT NULL DEFAULT '',
    locked_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX dispatches_due ON dispatches (next_attempt_at) WHERE status IN ('pending', 'failed');
CREATE INDEX dispatches_execution ON dispatches (execution_id);
",
// 2: events and steps stored in arrival order (a rowid table grows at its end), each with one
// index by execution. Clustered by execution, every concurrent execution's rows sat on pages
// of their own, and a group commit rewrote one or more of them per execution (plus the
// neighbours a mid-tree split rebalances); steps also had a second, randomly ordered index
// on `step_id`. Measured on 64 concurrent executions: 123 WAL frames per commit before,
// two thirds of them events pages.
"
CREATE TABLE events_by_arrival (
    execution_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    occurred_at TEXT NOT NULL
);
INSERT INTO events_by_arrival (execution_id, event_seq, type, payload, occurred_at)
    SELECT execution_id, event_seq, type, payload, occurred_at FROM events
    ORDER BY occurred_at, execution_id, event_seq;
DROP TABLE events;
ALTER TABLE events_by_arrival RENAME TO events;
CREATE UNIQUE INDEX events_execution ON events (execution_id, event_seq);
CREATE TABLE steps_by_arrival (
    step_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    status TEXT NOT NULL,
    idempotency TEXT NOT NULL,
    args TEXT,
    result TEXT,
    error TEXT,
    started_at TEXT,
    completed_at TEXT
);
INSERT INTO steps_by_arrival SELECT step_id, execution_id, kind, target, args_hash, occurrence,
    status, idempotency, args, result, error, started_at, completed_at FROM steps ORDER BY rowid;
DROP TABLE steps;
ALTER TABLE steps_by_arrival RENAME TO steps;
CREATE UNIQUE INDEX steps_execution ON steps (execution_id, step_id);
",
// 3: when a terminal execution ended, kept apart from `updated_at` (retention counts from it:
// counted from `created_at`, a run longer than the retention was deleted seconds after it
// ended). An existing terminal execution ended at its last update. Pending approvals get an
// index in their listing order, which is paged.
"
ALTER TABLE executions ADD COLUMN ended_at TEXT;
UPDATE executions SET ended_at = updated_at WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX executions_ended ON executions (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX approvals_pending_order ON approvals (created_at, id) WHERE status = 'pending';
",
// 4: occurrence counters of the attempt in flight, for kernels that keep them in the store
// (a shared store does; one process on a SQLite file keeps them in memory and leaves this empty).
"
CREATE TABLE dispatch_step_counters (
    dispatch_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    consumed INTEGER NOT NULL,
    PRIMARY KEY (dispatch_id, kind, target, args_hash)
);
",
// 5: what an agent publishes about itself (description, input and output JSON Schema), as JSON.
"
ALTER TABLE agents ADD COLUMN metadata TEXT;
",
// 6: who created an execution, and the idempotency key a repeated create finds it by (unique
// per creator).
"
ALTER TABLE executions ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX executions_idempotency ON executions (created_by, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
",
// 7: an agent's own lease length in seconds (NULL: the kernel's global lease).
"
ALTER TABLE agents ADD COLUMN lease_timeout_seconds REAL;
",
// 8: identity. Scoped API keys (only the SHA-256 of each secret is kept; groups and scopes are
// JSON arrays), whom an execution acts for and its creator's groups, and the `decided_by` an
// approval's decider asserted.
"
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    subject TEXT NOT NULL,
    groups TEXT NOT NULL,
    scopes TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
);
ALTER TABLE executions ADD COLUMN on_behalf_of TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN subject_groups TEXT;
ALTER TABLE approvals ADD COLUMN asserted_by TEXT NOT NULL DEFAULT '';
",
// 9: sessions, forks and subagents on the execution: the session it is a turn of (turns of
// one agent's session are found by (agent_id, session)), the turn it continues from, the
// execution and event sequence number it was forked from, what a fork restores its resources
// from (JSON), the parent step that spawned it (one child per step) and the state it
// completed with (JSON); and per session, its latest completed turn (the one a new turn
// continues from).
"
ALTER TABLE executions ADD COLUMN session TEXT NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN parent_execution_id TEXT;
ALTER TABLE executions ADD COLUMN forked_from TEXT;
ALTER TABLE executions ADD COLUMN fork_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN restoration TEXT;
ALTER TABLE executions ADD COLUMN spawned_by_execution TEXT;
ALTER TABLE executions ADD COLUMN spawned_by_step TEXT;
ALTER TABLE executions ADD COLUMN state TEXT;
CREATE INDEX executions_session ON executions (agent_id, session, id) WHERE session <> '';
CREATE UNIQUE INDEX executions_spawned_by ON executions (spawned_by_execution, spawned_by_step)
  WHERE spawned_by_execution IS NOT NULL;
CREATE TABLE sessions (
    agent_id TEXT NOT NULL,
    session TEXT NOT NULL,
    last_completed TEXT NOT NULL,
    PRIMARY KEY (agent_id, session)
);
CREATE INDEX sessions_last_completed ON sessions (last_completed);
",
// 10: an execution's own policy bundle (YAML; a fork's override of its agent's), empty when
// its agent's decides.
"
ALTER TABLE executions ADD COLUMN policy_bundle TEXT NOT NULL DEFAULT '';
",
// 11: external resources. One row per execution and key: driver, configuration and policy
// (JSON / 0-1 / counts), the generation, the binding of the live instance (JSON, NULL: none)
// and the lease that last held it, the affecting steps since the latest checkpoint, and that
// checkpoint. Then every capture and capture failure, in the order recorded.
"
CREATE TABLE resources (
    execution_id TEXT NOT NULL,
    key TEXT NOT NULL,
    driver_id TEXT NOT NULL,
    configuration TEXT NOT NULL,
    coverage_reuse INTEGER NOT NULL,
    every_steps INTEGER NOT NULL,
    on_completion INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    binding TEXT,
    lease_dispatch_id TEXT NOT NULL,
    lease_attempt INTEGER NOT NULL,
    steps_since_checkpoint INTEGER NOT NULL,
    checkpoint_ref TEXT NOT NULL,
    checkpoint_generation INTEGER NOT NULL,
    declared_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (execution_id, key)
) WITHOUT ROWID;
CREATE TABLE resource_checkpoints (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    key TEXT NOT NULL,
    generation INTEGER NOT NULL,
    checkpoint_ref TEXT NOT NULL,
    error TEXT NOT NULL,
    step_id TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE INDEX resource_checkpoints_resource ON resource_checkpoints (execution_id, key, seq);
",
// 12: the W3C `traceparent` of the trace an execution belongs to (empty: none), so that every
// delivery of it continues the trace of its create.
"
ALTER TABLE executions ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
",
// 13: the forks of an execution, listed newest first (`ExecutionQuery::forked_from`).
"
CREATE INDEX executions_forked_from ON executions (forked_from, id) WHERE forked_from IS NOT NULL AND forked_from <> '';
",
// 14: who set an execution's own policy bundle (the subject of the API key, `admin` for the
// admin token); empty when it has none.
"
ALTER TABLE executions ADD COLUMN policy_bundle_set_by TEXT NOT NULL DEFAULT '';
",
// 15: the agent an API key speaks for (it may create subagents of that agent's executions);
// empty for none.
"
ALTER TABLE api_keys ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
",
// 16: the web console's logins, shared by every kernel on the database: the SHA-256 of the
// session token (never the token), the API key used (empty for the admin), a proof tied to the
// server's token for an admin login, the name it decides approvals as, and its start and end.
"
CREATE TABLE console_sessions (
    id_hash TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    admin_proof TEXT NOT NULL,
    decides_as TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ends_at TEXT NOT NULL
);
CREATE INDEX console_sessions_by_key ON console_sessions (key_id, started_at);
CREATE INDEX console_sessions_by_end ON console_sessions (ends_at);
",
// 17: an agent's own dispatch retry policy (JSON; NULL: the kernel's), and why a dispatch's
// last delivery failed (empty: none did), which the execution shows while it waits to retry.
"
ALTER TABLE agents ADD COLUMN dispatch_retry TEXT;
ALTER TABLE dispatches ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
",
// 18: the event log as a hash-linked chain: each event's hash (a log written before has none
// until it is next extended, which chains it), and, on the event a signed head names, that head
// (JSON: head, at, key_id, signature, proof): a signed commit writes no page beyond its events'
// (a table of signed heads keyed by execution dirtied a page per execution of a group commit).
"
ALTER TABLE events ADD COLUMN hash TEXT;
ALTER TABLE events ADD COLUMN signed_head TEXT;
"];

pub(super) fn db_err(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{}: {e}", path.display()))
}

/// Brings the file's kernel schema up to date, in one transaction. The file may be the kernel's
/// own, new, or a receipt database the kernel shares as a guest (its schema version then lives
/// in `rebuno_meta`; see [`durable_support::sqlite_tenancy`]); anything else is refused.
pub(super) fn migrate(conn: &Connection, label: &Path) -> StoreResult<()> {
    let not_ours = |why: String| db_err(label, format!("not a rebuno database ({why})"));
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| not_ours(e.to_string()))?;
    let result = (|| {
        let holding = REBUNO
            .holding(conn)
            .map_err(|e| not_ours(e.to_string()))?
            .map_err(|f| not_ours(f.to_string()))?;
        let version = usize::try_from(holding.version()).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(db_err(
                label,
                format!(
                    "schema version {version} is newer than this build ({})",
                    MIGRATIONS.len()
                ),
            ));
        }
        let pending = MIGRATIONS.len() - version;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            conn.execute_batch(sql)?;
            tracing::debug!(
                target: MIGRATIONS_TARGET,
                backend = "sqlite",
                version = i + 1,
                applied = i + 1 - version,
                pending,
                "schema migration applied"
            );
        }
        if pending > 0 {
            tracing::info!(
                target: MIGRATIONS_TARGET,
                backend = "sqlite",
                database = %label.display(),
                from = version,
                to = MIGRATIONS.len(),
                "schema migrated"
            );
        }
        if version < MIGRATIONS.len() {
            let latest = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
            REBUNO.record_version(conn, holding, latest)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventType;
    use crate::store::{SqliteStore, StoreExt};
    use rusqlite::params;
    use std::time::Duration;

    #[tokio::test]
    async fn a_version_1_database_is_migrated_with_its_events_steps_and_end_times() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(&format!(
                "PRAGMA user_version = 1; PRAGMA application_id = {};",
                REBUNO.application_id
            ))
            .unwrap();
            for (exec, seq, ty) in [
                ("e1", 2, "step.allowed"),
                ("e1", 1, "step.proposed"),
                ("e2", 1, "execution.created"),
            ] {
                conn.execute(
                    "INSERT INTO events VALUES (?1, ?2, ?3, '{}', '2026-01-01T00:00:00Z')",
                    params![exec, seq, ty],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, result)
                 VALUES ('s1', 'e1', 'tool_call', 'search', 'h', 0, 'succeeded', 'safe_to_retry', '{\"hits\":3}')",
                [],
            )
            .unwrap();
            for (id, status) in [("e1", "completed"), ("e2", "running")] {
                conn.execute(
                    "INSERT INTO executions (id, agent_id, input, status, created_at, updated_at)
                     VALUES (?1, 'a', '{}', ?2, '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z')",
                    params![id, status],
                )
                .unwrap();
            }
        }
        let store = SqliteStore::open(&path).unwrap();
        let (events, step, other, exec) = store
            .read(|tx| {
                let events = tx.events().page("e1", 0, 10)?;
                let step = tx.steps().get("e1", "s1")?;
                let other = tx.steps().get("e2", "s1")?;
                Ok((events, step, other, tx.executions().get("e1")?))
            })
            .await
            .unwrap();
        // Columns added since read as their defaults: no own bundle, nobody who set one.
        let exec = exec.expect("the execution survived the migration");
        assert_eq!(
            (
                exec.policy_bundle.as_str(),
                exec.policy_bundle_set_by.as_str()
            ),
            ("", "")
        );
        let seqs: Vec<_> = events
            .items
            .iter()
            .map(|e| (e.event_seq, e.event_type.as_str()))
            .collect();
        assert_eq!(seqs, [(1, "step.proposed"), (2, "step.allowed")]);
        let step = step.expect("the step survived the migration");
        assert_eq!(step.result, Some(serde_json::json!({"hits": 3})));
        assert!(
            other.is_none(),
            "a step is found only under its own execution"
        );
        // The new indexes still refuse a duplicate event sequence or step.
        let dup = store
            .write(|tx| {
                tx.events().append(
                    "e1",
                    &"2026-01-01T00:00:01Z".parse().unwrap(),
                    &[(EventType::StepExecuting, serde_json::json!({}))],
                )
            })
            .await
            .unwrap();
        assert_eq!(dup, 3);
        let raw = Connection::open(&path).unwrap();
        raw.busy_timeout(Duration::from_secs(5)).unwrap();
        let clash = raw.execute(
            "INSERT INTO events VALUES ('e1', 3, 'step.succeeded', '{}', '2026-01-01T00:00:02Z')",
            [],
        );
        assert!(clash.is_err(), "event_seq stays unique per execution");
        let clash = raw.execute(
            "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency)
             VALUES ('s1', 'e1', 'tool_call', 'search', 'h', 0, 'executing', 'safe_to_retry')",
            [],
        );
        assert!(clash.is_err(), "a step id stays unique per execution");
        let user_version: i64 = raw
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(user_version, MIGRATIONS.len() as i64);
        // A terminal execution ended at its last update; a running one has not ended.
        let ended: Vec<(String, Option<String>)> = raw
            .prepare("SELECT id, ended_at FROM executions ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            ended,
            [
                ("e1".to_owned(), Some("2026-01-02T00:00:00Z".to_owned())),
                ("e2".to_owned(), None)
            ]
        );
    }
}
