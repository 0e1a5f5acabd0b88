//! The PostgreSQL receipt schema: the embedded, numbered migrations
//! [`PgPool::migrate`](durable_support::pg::PgPool::migrate) applies when a store connects,
//! under a session advisory lock, so writers that start together apply each once.
//!
//! The tables are the reference's (`receipt_streams`, `receipt_receipts`, `receipt_branches`)
//! with the SQLite backend's columns: the hashed envelope (`id, ts, stream, prev, body,
//! context`) is kept as its canonical bytes in `envelope` (`bytea`), so a read hands the
//! verifier exactly the bytes that were hashed and the receipt's `context` travels inside it;
//! hints, which are not hashed, are kept beside it as JSON text. Stream names compare in byte
//! order (`COLLATE "C"`), as on SQLite, whatever the database's default collation is.
//!
//! Not created: the reference's change log and projection tables (nothing in this crate tails
//! them), and its uniqueness of receipt ids (no backend enforces it; ids are random and a
//! receipt is identified by its hash, which is unique within its stream).

/// The session advisory lock the migrations run under (prefixed with the schema).
pub(super) const MIGRATE_LOCK: &str = "receipt-schema-migrate";

/// The table recording which migrations ran.
pub(super) const MIGRATIONS_TABLE: &str = "receipt_schema_migrations";

/// Embedded migrations, by version (2: signed checkpoints of stream heads).
pub(super) const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        r#"
CREATE TABLE receipt_streams (
    name text COLLATE "C" PRIMARY KEY,
    head_hash text NOT NULL,
    receipt_count bigint NOT NULL,
    updated_at bigint NOT NULL,
    last_ts bigint NOT NULL
);
CREATE TABLE receipt_receipts (
    global_seq bigserial PRIMARY KEY,
    stream text COLLATE "C" NOT NULL,
    stream_seq bigint NOT NULL,
    receipt_id text NOT NULL,
    ts bigint NOT NULL,
    prev_hash text,
    hash text NOT NULL,
    event_type text NOT NULL,
    event_id text,
    envelope bytea NOT NULL,
    hints_json text,
    UNIQUE (stream, stream_seq),
    UNIQUE (stream, hash)
);
CREATE UNIQUE INDEX receipt_receipts_event ON receipt_receipts (stream, event_id)
    WHERE event_id IS NOT NULL;
CREATE TABLE receipt_branches (
    name text COLLATE "C" PRIMARY KEY,
    parent text COLLATE "C" NOT NULL,
    fork_at bigint NOT NULL,
    created_at bigint NOT NULL
);
"#,
    ),
    (
        2,
        r#"
CREATE TABLE receipt_checkpoints (
    stream text COLLATE "C" NOT NULL,
    length bigint NOT NULL,
    head text NOT NULL,
    signed_at text NOT NULL,
    key_id text NOT NULL,
    signature text NOT NULL,
    PRIMARY KEY (stream, length)
);
"#,
    ),
];
