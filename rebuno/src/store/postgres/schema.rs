//! The PostgreSQL kernel schema: the embedded, numbered migrations [`PgPool::migrate`] applies
//! at connect, under one advisory lock, so replicas that start together apply each once.
//!
//! The tables and columns are the SQLite backend's, and hold the same text: JSON columns keep
//! the exact bytes the kernel wrote (`text`, not `jsonb`, which would reorder keys and drop
//! duplicates), and timestamps stay RFC 3339 text, compared as text as on SQLite. Every text
//! column that is compared or ordered is `COLLATE "C"` (byte order, as SQLite's `BINARY`),
//! whatever the database's default collation is, so cursors and time comparisons page and
//! sort exactly as they do on SQLite.
//!
//! There are no foreign keys: the SQLite backend enforces none, and deletes an execution's
//! children explicitly, which this backend does too (see
//! [`ExecutionTx::delete_terminal_before`](crate::store::ExecutionTx::delete_terminal_before)).
//!
//! [`PgPool::migrate`]: durable_support::pg::PgPool::migrate

/// The session advisory lock migrations run under.
pub(super) const MIGRATE_LOCK: &str = "rebuno-schema-migrate";

/// The table recording which migrations ran.
pub(super) const MIGRATIONS_TABLE: &str = "rebuno_schema_migrations";

/// Embedded migrations, by version.
pub(super) const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        r#"
CREATE TABLE agents (
    id text COLLATE "C" PRIMARY KEY,
    webhook_url text NOT NULL,
    secret text NOT NULL,
    policy_bundle text NOT NULL DEFAULT '',
    registered_at text COLLATE "C" NOT NULL
);
CREATE TABLE executions (
    id text COLLATE "C" PRIMARY KEY,
    agent_id text COLLATE "C" NOT NULL,
    agent_version text NOT NULL DEFAULT '',
    input text NOT NULL,
    status text COLLATE "C" NOT NULL,
    output text,
    failure_reason text NOT NULL DEFAULT '',
    created_at text COLLATE "C" NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    deadline_at text COLLATE "C",
    ended_at text COLLATE "C"
);
-- Listing by agent, and by status (newest first); counts by status.
CREATE INDEX executions_agent ON executions (agent_id, id DESC);
CREATE INDEX executions_status ON executions (status, id DESC);
-- The deadline sweep.
CREATE INDEX executions_deadline ON executions (deadline_at)
    WHERE status IN ('pending', 'running', 'blocked') AND deadline_at IS NOT NULL;
-- The retention sweep.
CREATE INDEX executions_ended ON executions (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE events (
    execution_id text COLLATE "C" NOT NULL,
    event_seq bigint NOT NULL,
    type text COLLATE "C" NOT NULL,
    payload text NOT NULL,
    occurred_at text COLLATE "C" NOT NULL,
    PRIMARY KEY (execution_id, event_seq)
);

CREATE TABLE steps (
    step_id text COLLATE "C" NOT NULL,
    execution_id text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    target text COLLATE "C" NOT NULL,
    args_hash text COLLATE "C" NOT NULL,
    occurrence bigint NOT NULL,
    status text COLLATE "C" NOT NULL,
    idempotency text NOT NULL,
    args text,
    result text,
    error text,
    started_at text COLLATE "C",
    completed_at text COLLATE "C",
    PRIMARY KEY (execution_id, step_id)
);

CREATE TABLE approvals (
    id text COLLATE "C" PRIMARY KEY,
    step_id text COLLATE "C" NOT NULL,
    execution_id text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    approvers text,
    message text NOT NULL DEFAULT '',
    timeout_at text COLLATE "C" NOT NULL,
    decided_by text NOT NULL DEFAULT '',
    decided_at text COLLATE "C",
    rationale text NOT NULL DEFAULT '',
    created_at text COLLATE "C" NOT NULL
);
-- Due approvals and the next timeout; the paged pending listing; a step's pending approval.
CREATE INDEX approvals_pending ON approvals (timeout_at) WHERE status = 'pending';
CREATE INDEX approvals_pending_order ON approvals (created_at, id) WHERE status = 'pending';
CREATE INDEX approvals_pending_step ON approvals (step_id) WHERE status = 'pending';
CREATE INDEX approvals_execution ON approvals (execution_id);

CREATE TABLE dispatches (
    id text COLLATE "C" PRIMARY KEY,
    execution_id text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    attempt bigint NOT NULL,
    max_attempts bigint NOT NULL,
    next_attempt_at text COLLATE "C" NOT NULL,
    locked_by text NOT NULL DEFAULT '',
    locked_at text COLLATE "C",
    created_at text COLLATE "C" NOT NULL,
    updated_at text COLLATE "C" NOT NULL
);
-- The claim; the in-flight scan (reaper, queue depth); an execution's dispatches.
CREATE INDEX dispatches_due ON dispatches (next_attempt_at) WHERE status IN ('pending', 'failed');
CREATE INDEX dispatches_in_flight ON dispatches (locked_at) WHERE status = 'in_flight';
CREATE INDEX dispatches_execution ON dispatches (execution_id);

CREATE TABLE dispatch_step_counters (
    dispatch_id text COLLATE "C" NOT NULL,
    attempt bigint NOT NULL,
    kind text COLLATE "C" NOT NULL,
    target text COLLATE "C" NOT NULL,
    args_hash text COLLATE "C" NOT NULL,
    consumed bigint NOT NULL,
    PRIMARY KEY (dispatch_id, kind, target, args_hash)
);

-- Token buckets of the rate limiter, on the database's clock.
CREATE TABLE rate_buckets (
    key text COLLATE "C" PRIMARY KEY,
    tokens double precision NOT NULL,
    max_tokens bigint NOT NULL,
    window_seconds double precision NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX rate_buckets_updated ON rate_buckets (updated_at);
"#,
    ),
    (
        2,
        r#"
-- What an agent publishes about itself (description, input and output JSON Schema), as JSON.
ALTER TABLE agents ADD COLUMN metadata text;
"#,
    ),
    (
        3,
        r#"
-- Who created an execution, and the key a repeated create finds it by (unique per creator).
ALTER TABLE executions ADD COLUMN created_by text NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN idempotency_key text COLLATE "C";
CREATE UNIQUE INDEX executions_idempotency ON executions (created_by, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
"#,
    ),
    (
        4,
        r#"
-- An agent's own lease length in seconds (NULL: the kernel's global lease).
ALTER TABLE agents ADD COLUMN lease_timeout_seconds double precision;
"#,
    ),
    (
        5,
        r#"
-- Identity. Scoped API keys (only the SHA-256 of each secret is kept; groups and scopes are
-- JSON arrays), whom an execution acts for and its creator's groups, and the `decided_by` an
-- approval's decider asserted.
CREATE TABLE api_keys (
    id text COLLATE "C" PRIMARY KEY,
    name text NOT NULL,
    subject text NOT NULL,
    groups text NOT NULL,
    scopes text NOT NULL,
    secret_hash text COLLATE "C" NOT NULL UNIQUE,
    created_at text COLLATE "C" NOT NULL,
    created_by text NOT NULL,
    expires_at text COLLATE "C",
    revoked_at text COLLATE "C"
);
ALTER TABLE executions ADD COLUMN on_behalf_of text NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN subject_groups text;
ALTER TABLE approvals ADD COLUMN asserted_by text NOT NULL DEFAULT '';
"#,
    ),
    (
        6,
        r#"
-- Sessions, forks and subagents on the execution: the session it is a turn of (turns of
-- one agent's session are found by (agent_id, session)), the turn it continues from, the
-- execution and event sequence number it was forked from, what a fork restores its resources
-- from (JSON), the parent step that spawned it (one child per step) and the state it
-- completed with (JSON); and per session, its latest completed turn (the one a new turn
-- continues from).
ALTER TABLE executions ADD COLUMN session text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE executions ADD COLUMN parent_execution_id text COLLATE "C";
ALTER TABLE executions ADD COLUMN forked_from text COLLATE "C";
ALTER TABLE executions ADD COLUMN fork_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN restoration text;
ALTER TABLE executions ADD COLUMN spawned_by_execution text COLLATE "C";
ALTER TABLE executions ADD COLUMN spawned_by_step text COLLATE "C";
ALTER TABLE executions ADD COLUMN state text;
CREATE INDEX executions_session ON executions (agent_id, session, id) WHERE session <> '';
CREATE UNIQUE INDEX executions_spawned_by ON executions (spawned_by_execution, spawned_by_step)
  WHERE spawned_by_execution IS NOT NULL;
CREATE TABLE sessions (
    agent_id text COLLATE "C" NOT NULL,
    session text COLLATE "C" NOT NULL,
    last_completed text COLLATE "C" NOT NULL,
    PRIMARY KEY (agent_id, session)
);
CREATE INDEX sessions_last_completed ON sessions (last_completed);
"#,
    ),
    (
        7,
        r#"
-- An execution's own policy bundle (YAML; a fork's override of its agent's), empty when its
-- agent's decides.
ALTER TABLE executions ADD COLUMN policy_bundle text NOT NULL DEFAULT '';
"#,
    ),
    // 7 is another branch's (versions are applied by number, so the gap is harmless).
    (
        8,
        r#"
-- External resources. One row per execution and key: driver, configuration and policy, the
-- generation, the binding of the live instance (JSON, NULL: none) and the lease that last
-- held it, the affecting steps since the latest checkpoint, and that checkpoint. Then every
-- capture and capture failure, in the order recorded.
CREATE TABLE resources (
    execution_id text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    driver_id text NOT NULL,
    configuration text NOT NULL,
    coverage_reuse boolean NOT NULL,
    every_steps bigint NOT NULL,
    on_completion boolean NOT NULL,
    generation bigint NOT NULL,
    binding text,
    lease_dispatch_id text NOT NULL,
    lease_attempt bigint NOT NULL,
    steps_since_checkpoint bigint NOT NULL,
    checkpoint_ref text NOT NULL,
    checkpoint_generation bigint NOT NULL,
    declared_at text NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (execution_id, key)
);
CREATE TABLE resource_checkpoints (
    seq bigserial PRIMARY KEY,
    execution_id text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    generation bigint NOT NULL,
    checkpoint_ref text NOT NULL,
    error text NOT NULL,
    step_id text NOT NULL,
    recorded_at text NOT NULL
);
CREATE INDEX resource_checkpoints_resource ON resource_checkpoints (execution_id, key, seq);
"#,
    ),
    (
        9,
        r#"
-- The W3C traceparent of the trace an execution belongs to (empty: none), so that every
-- delivery of it continues the trace of its create.
ALTER TABLE executions ADD COLUMN trace_parent text NOT NULL DEFAULT '';
"#,
    ),
    (
        10,
        r#"
-- The forks of an execution, listed newest first (`ExecutionQuery::forked_from`).
CREATE INDEX executions_forked_from ON executions (forked_from, id)
  WHERE forked_from IS NOT NULL AND forked_from <> '';
"#,
    ),
    (
        11,
        r#"
-- A lease's renewal (every step writes `locked_at` and `updated_at`) changes no indexed column,
-- so PostgreSQL updates the row in place (a HOT update) instead of adding an entry to every
-- index of the table per step: the in-flight scan orders by id, so its index is on id, not on
-- the renewal time. Free room on each page keeps those updates on the row's own page.
DROP INDEX dispatches_in_flight;
CREATE INDEX dispatches_in_flight ON dispatches (id) WHERE status = 'in_flight';
ALTER TABLE dispatches SET (fillfactor = 50);
"#,
    ),
    (
        12,
        r#"
-- Who set an execution's own policy bundle (the subject of the API key, `admin` for the admin
-- token); empty when it has none.
ALTER TABLE executions ADD COLUMN policy_bundle_set_by text NOT NULL DEFAULT '';
"#,
    ),
    (
        13,
        r#"
-- The agent an API key speaks for (it may create subagents of that agent's executions);
-- empty for none.
ALTER TABLE api_keys ADD COLUMN agent_id text NOT NULL DEFAULT '';
"#,
    ),
    (
        14,
        r#"
-- The web console's logins, shared by every replica: the SHA-256 of the session token (never
-- the token), the API key used (empty for the admin), a proof tied to the server's token for
-- an admin login, the name it decides approvals as, and its start and end.
CREATE TABLE console_sessions (
    id_hash text COLLATE "C" PRIMARY KEY,
    key_id text COLLATE "C" NOT NULL,
    admin_proof text NOT NULL,
    decides_as text NOT NULL,
    started_at text COLLATE "C" NOT NULL,
    ends_at text COLLATE "C" NOT NULL
);
CREATE INDEX console_sessions_by_key ON console_sessions (key_id, started_at);
CREATE INDEX console_sessions_by_end ON console_sessions (ends_at);
"#,
    ),
    (
        15,
        r#"
-- An agent's own dispatch retry policy (JSON; NULL: the kernel's), and why a dispatch's last
-- delivery failed (empty: none did), which the execution shows while it waits to retry.
ALTER TABLE agents ADD COLUMN dispatch_retry text;
ALTER TABLE dispatches ADD COLUMN last_error text NOT NULL DEFAULT '';
"#,
    ),
    (
        16,
        r#"
-- The event log as a hash-linked chain: each event's hash (events written before have none
-- until a kernel of this version chains them at its start: the partial index finds them), the
-- signed heads of each log (one per write that extended it, with a signing key), and the
-- refusal an append meets on a log an older kernel extended meanwhile.
ALTER TABLE events ADD COLUMN hash text;
CREATE INDEX events_unchained ON events (execution_id) WHERE hash IS NULL;
CREATE TABLE event_heads (
    execution_id text COLLATE "C" NOT NULL,
    length bigint NOT NULL,
    head text NOT NULL,
    at text NOT NULL,
    key_id text NOT NULL,
    signature text NOT NULL,
    proof text,
    PRIMARY KEY (execution_id, length)
);
CREATE FUNCTION rebuno_unchained_log(execution text) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'the event log of execution % has events without a hash (written by an older rebuno): restart a kernel of this version, which chains it', execution
        USING ERRCODE = 'data_exception';
END
$fn$;
"#,
    ),
];
