//! Code the `rebuno` and `receipt` crates share, kept in one place so the two copies cannot
//! drift apart. Not a public API: it changes with the crates that use it.
//!
//! - [`civil`]: proleptic Gregorian dates from day counts and back, for timestamp text;
//! - `canonical` (feature `chain`): RFC 8785 canonical JSON, the byte form every chained
//!   entry is hashed in;
//! - `chain` (feature `chain`): the canonical envelope of one entry of a hash-linked stream
//!   (a receipt, a kernel event) and its SHA-256;
//! - `keys` (feature `keys`): Ed25519 key files and signed heads, for tamper evidence;
//! - `audit` (feature `keys`): checking a linked stream against its signed checkpoints and a
//!   witness;
//! - `group_commit` (feature `sqlite`): the SQLite group commit both stores' writer threads
//!   run, with truthful per-change answers;
//! - `pg` (feature `postgres`): PostgreSQL connections, pool, pipelined transactions,
//!   migrations and LISTEN for both crates' PostgreSQL stores;
//! - `pg_floor` (feature `postgres`): the single-row insert + commit floor the PostgreSQL
//!   benchmarks compare with;
//! - `sqlite_tenancy` (feature `sqlite`): the kernel store and the receipt store sharing one
//!   SQLite file (who owns its header, where the guest keeps its schema version).

#[cfg(feature = "keys")]
pub mod audit;
#[cfg(feature = "chain")]
pub mod canonical;
#[cfg(feature = "chain")]
pub mod chain;
pub mod civil;
#[cfg(feature = "sqlite")]
pub mod group_commit;
#[cfg(feature = "keys")]
pub mod keys;
#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(feature = "postgres")]
pub mod pg_floor;
#[cfg(feature = "sqlite")]
pub mod sqlite_tenancy;
