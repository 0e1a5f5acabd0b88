//! The contract of one transaction: [`Tx`] and the sub-traits it hands out, one per group of
//! rows ([`AgentTx`], [`ExecutionTx`], [`EventTx`], [`StepTx`], [`ApprovalTx`], [`DispatchTx`],
//! [`ApiKeyTx`], [`SessionTx`], [`ConsoleSessionTx`], [`SubagentTx`], and [`ResourceTx`] in
//! `resources`), with the types their calls take ([`ExecutionQuery`], [`Lookup`]).
//!
//! Every backend implements each sub-trait on its transaction type and hands itself out from
//! the accessors, so a new backend writes each group's small required core in one place; the
//! provided methods (`agent_of`, `record`, `renew`, `in_flight`, …) are derived from it unless
//! the backend has a cheaper way.

use super::chain::SignedHead;
use super::{Page, ResourceTx, StoreResult};
use crate::protocol::{
    Agent, ApiKey, Approval, Dispatch, DispatchStatus, Event, EventType, Execution,
    ExecutionStatus, Step, StepKind, StepStatus, Timestamp,
};
use serde_json::Value;

/// Filter of [`ExecutionTx::page`] (newest first).
#[derive(Debug, Clone, Default)]
pub struct ExecutionQuery {
    /// Only this agent's executions.
    pub agent_id: Option<String>,
    /// Only executions in this status (not validated, as in the Go kernel).
    pub status: Option<String>,
    /// Only turns of this session.
    pub session: Option<String>,
    /// Only children this execution spawned (subagents).
    pub spawned_by: Option<String>,
    /// Only forks of this execution.
    pub forked_from: Option<String>,
    /// Only ids lower than this one (the page cursor).
    pub before_id: Option<String>,
    /// Page size (at least 1).
    pub limit: usize,
}

/// The operations one transaction can perform, grouped by what they touch: each group is a
/// sub-trait reached through an accessor (`tx.steps().put(&step)`), with a small required core
/// and provided methods derived from it. Implemented by each backend over its own transaction;
/// the kernel's logic is written once against it.
pub trait Tx {
    /// The agent operations of this transaction.
    fn agents(&mut self) -> &mut dyn AgentTx;
    /// The execution operations of this transaction.
    fn executions(&mut self) -> &mut dyn ExecutionTx;
    /// The event log operations of this transaction.
    fn events(&mut self) -> &mut dyn EventTx;
    /// The step operations of this transaction.
    fn steps(&mut self) -> &mut dyn StepTx;
    /// The approval operations of this transaction.
    fn approvals(&mut self) -> &mut dyn ApprovalTx;
    /// The dispatch operations of this transaction.
    fn dispatches(&mut self) -> &mut dyn DispatchTx;
    /// The API key operations of this transaction.
    fn api_keys(&mut self) -> &mut dyn ApiKeyTx;
    /// The session operations of this transaction.
    fn sessions(&mut self) -> &mut dyn SessionTx;
    /// The web console's login sessions.
    fn console_sessions(&mut self) -> &mut dyn ConsoleSessionTx;
    /// The external-resource operations of this transaction.
    fn resources(&mut self) -> &mut dyn ResourceTx;
    /// The subagent operations of this transaction.
    fn subagents(&mut self) -> &mut dyn SubagentTx;

    /// Announces reads the transaction is about to make, so a backend that pays a round trip
    /// per statement can send them at once and answer the calls from what came back (a
    /// hint: the default does nothing). An answer is used only if no write of the transaction
    /// that could change it came between this call and the read it answers (else the read runs
    /// again). In a write
    /// transaction the reads lock what they lock when made, in the order given: list them in
    /// the kernel's lock order (see `kernel::dispatch`), as the reads themselves would come.
    fn prefetch(&mut self, _lookups: &[Lookup<'_>]) -> StoreResult<()> {
        Ok(())
    }
}

/// The agent operations of a transaction ([`Tx::agents`]): registered agents by id.
pub trait AgentTx {
    /// An agent by id.
    fn get(&mut self, id: &str) -> StoreResult<Option<Agent>>;
    /// An agent's HMAC secret (request authentication, on every agent call).
    fn secret(&mut self, id: &str) -> StoreResult<Option<String>>;
    /// Inserts or replaces an agent.
    fn put(&mut self, agent: &Agent) -> StoreResult<()>;
    /// Deletes an agent; whether it existed.
    fn delete(&mut self, id: &str) -> StoreResult<bool>;
    /// A page of agents by id, starting after id `after`.
    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<Agent>>;
    /// How many executions reference the agent.
    fn execution_count(&mut self, id: &str) -> StoreResult<u64>;
}

/// The execution operations of a transaction ([`Tx::executions`]): executions by id, their
/// listings and retention.
pub trait ExecutionTx {
    /// An execution by id.
    fn get(&mut self, id: &str) -> StoreResult<Option<Execution>>;
    /// The execution `created_by` created with idempotency key `key`, if any.
    fn by_idempotency_key(&mut self, created_by: &str, key: &str)
    -> StoreResult<Option<Execution>>;
    /// An execution's agent and status, without decoding its input and output (hot paths).
    fn state(&mut self, id: &str) -> StoreResult<Option<(String, ExecutionStatus)>>;
    /// An execution's agent, without locking its row on a shared store (an execution never
    /// changes agent): for a transaction that holds a dispatch row and must not then lock the
    /// execution's (the kernel's lock order takes the execution first).
    fn agent_of(&mut self, id: &str) -> StoreResult<Option<String>> {
        Ok(self.state(id)?.map(|(agent, _)| agent))
    }
    /// An execution's own policy bundle (empty: its agent's decides), without decoding the
    /// rest (the submit path).
    fn policy_bundle(&mut self, id: &str) -> StoreResult<Option<String>>;
    /// Inserts or replaces an execution.
    fn put(&mut self, execution: &Execution) -> StoreResult<()>;
    /// A page of executions matching `query`, newest (highest id) first.
    fn page(&mut self, query: &ExecutionQuery) -> StoreResult<Page<Execution>>;
    /// Non-terminal executions whose deadline is before `now`.
    fn past_deadline(&mut self, now: &Timestamp, limit: usize) -> StoreResult<Vec<Execution>>;
    /// Deletes up to `limit` terminal executions that ended before `cutoff` (however long ago
    /// they were created), with everything that belongs to them; how many.
    fn delete_terminal_before(&mut self, cutoff: &Timestamp, limit: usize) -> StoreResult<u64>;
    /// Counts executions by status.
    fn counts(&mut self) -> StoreResult<Vec<(String, u64)>>;
    /// Takes the execution's lock
    /// ([`Replicated::lock_execution`](super::Replicated::lock_execution)'s) until this transaction
    /// ends, if no other process holds it, without waiting; answers whether it did. Once it is
    /// taken, the transaction's reads see every commit of the lock's previous holders. A
    /// transaction that asks must do so before it reads anything of the execution (announced first,
    /// with [`Lookup::ExecutionLock`], when it announces), and must not act on what it read if the
    /// answer is `false`. Stores one process owns have no such lock: `true`.
    fn try_lock(&mut self, _execution_id: &str) -> StoreResult<bool> {
        Ok(true)
    }
}

/// An execution's event log ([`Tx::events`]): appended with gapless sequence numbers, read in
/// pages.
pub trait EventTx {
    /// Appends events to an execution's log with the next gapless sequence numbers; returns
    /// the last sequence number.
    fn append(
        &mut self,
        execution_id: &str,
        occurred_at: &Timestamp,
        events: &[(EventType, Value)],
    ) -> StoreResult<u64>;
    /// [`EventTx::append`] for a caller that needs no sequence number: a backend may hold
    /// the write back and send it with the transaction's next statement or its commit (a
    /// failure is then returned there, and the transaction does not commit).
    fn record(
        &mut self,
        execution_id: &str,
        occurred_at: &Timestamp,
        events: &[(EventType, Value)],
    ) -> StoreResult<()> {
        self.append(execution_id, occurred_at, events).map(drop)
    }
    /// Whether the execution's log holds an event of this type.
    fn has(&mut self, execution_id: &str, event_type: EventType) -> StoreResult<bool>;
    /// A page of events with `event_seq > after_seq`, ascending (the cursor is the last
    /// `event_seq`).
    fn page(
        &mut self,
        execution_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Page<Event>>;
    /// The execution log's signed checkpoints (see [`super::chain`]), by length ascending. A
    /// store that keeps none answers none (its logs verify as unsigned).
    fn checkpoints(&mut self, execution_id: &str) -> StoreResult<Vec<SignedHead>> {
        let _ = execution_id;
        Ok(Vec::new())
    }
    /// The longest of [`EventTx::checkpoints`].
    fn latest_checkpoint(&mut self, execution_id: &str) -> StoreResult<Option<SignedHead>> {
        Ok(self.checkpoints(execution_id)?.pop())
    }
}

/// The step operations of a transaction ([`Tx::steps`]): an execution's steps by id.
pub trait StepTx {
    /// A step of an execution by id.
    fn get(&mut self, execution_id: &str, step_id: &str) -> StoreResult<Option<Step>>;
    /// Whether a step of an execution is recorded.
    fn exists(&mut self, execution_id: &str, step_id: &str) -> StoreResult<bool>;
    /// Inserts or updates a step. Once the stored status is terminal, its status, result,
    /// error and `completed_at` are kept.
    fn put(&mut self, step: &Step) -> StoreResult<()>;
    /// A page of an execution's steps by step id, starting after step id `after`;
    /// `terminal_only` keeps succeeded, failed, denied and cancelled ones.
    fn page(
        &mut self,
        execution_id: &str,
        after: Option<&str>,
        terminal_only: bool,
        limit: usize,
    ) -> StoreResult<Page<Step>>;
    /// An execution's steps in a status.
    fn in_status(&mut self, execution_id: &str, status: StepStatus) -> StoreResult<Vec<Step>>;
    /// Whether a failed step with the same kind, target and args hash has error reason
    /// `indeterminate` (the at-most-once retry guard).
    fn has_indeterminate_failure(
        &mut self,
        execution_id: &str,
        kind: &StepKind,
        target: &str,
        args_hash: &str,
    ) -> StoreResult<bool>;
}

/// The approval operations of a transaction ([`Tx::approvals`]).
pub trait ApprovalTx {
    /// An approval by id.
    fn get(&mut self, id: &str) -> StoreResult<Option<Approval>>;
    /// Inserts or replaces an approval.
    fn put(&mut self, approval: &Approval) -> StoreResult<()>;
    /// Pending approvals (of one execution, or all), oldest first.
    fn pending(&mut self, execution_id: Option<&str>) -> StoreResult<Vec<Approval>>;
    /// A page of pending approvals, oldest first, starting after approval `after`; `None` if
    /// there is no approval `after`.
    fn pending_page(
        &mut self,
        after: Option<&str>,
        limit: usize,
    ) -> StoreResult<Option<Page<Approval>>>;
    /// The pending approval of a step.
    fn pending_for_step(&mut self, step_id: &str) -> StoreResult<Option<Approval>>;
    /// Pending approvals whose timeout is at or before `now`.
    fn due(&mut self, now: &Timestamp, limit: usize) -> StoreResult<Vec<Approval>>;
    /// The earliest timeout of a pending approval.
    fn next_timeout(&mut self) -> StoreResult<Option<Timestamp>>;
}

/// The dispatch operations of a transaction ([`Tx::dispatches`]): the deliveries of executions
/// to their agents, their leases, and the occurrence counters of one delivery attempt.
pub trait DispatchTx {
    /// A dispatch by id.
    fn get(&mut self, id: &str) -> StoreResult<Option<Dispatch>>;
    /// A dispatch's execution, attempt and status (the lease fences).
    fn lease(&mut self, id: &str) -> StoreResult<Option<(String, u32, DispatchStatus)>>;
    /// Inserts or replaces a dispatch.
    fn put(&mut self, dispatch: &Dispatch) -> StoreResult<()>;
    /// Renews a lease: if dispatch `id` is in flight with exactly `attempt`, its `locked_at`
    /// and `updated_at` become `now` (answers whether it was). A backend may do it in one
    /// statement; the default reads the row and writes it back.
    fn renew(&mut self, id: &str, attempt: u32, now: &Timestamp) -> StoreResult<bool> {
        match self.get(id)? {
            Some(mut d) if d.attempt == attempt && d.status == DispatchStatus::InFlight => {
                d.locked_at = Some(now.clone());
                d.updated_at = now.clone();
                self.put(&d)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    /// [`DispatchTx::renew`] for a caller that needs no answer (held back like
    /// [`EventTx::record`]).
    fn record_renewal(&mut self, id: &str, attempt: u32, now: &Timestamp) -> StoreResult<()> {
        self.renew(id, attempt, now).map(drop)
    }
    /// An execution's dispatches.
    fn of_execution(&mut self, execution_id: &str) -> StoreResult<Vec<Dispatch>>;
    /// Pending or failed dispatches due at `now`, earliest first, leaving out the dispatches
    /// whose execution belongs to an agent in `skip_agents`, each with its execution's agent
    /// id (empty if the execution is gone): the dispatcher's claim, fair between agents.
    fn claimable_except(
        &mut self,
        now: &Timestamp,
        limit: usize,
        skip_agents: &[String],
    ) -> StoreResult<Vec<(Dispatch, String)>>;
    /// Makes the failed dispatches of agent `agent_id`'s executions that wait for a retry due
    /// at `now` (their agent is back); answers them as `(dispatch_id, failed attempt)`. One
    /// statement, bounded by that agent's waiting dispatches.
    fn wake_agent(&mut self, agent_id: &str, now: &Timestamp) -> StoreResult<Vec<(String, u32)>>;
    /// Every in-flight dispatch, each with the lease length its agent registered (`None`:
    /// the kernel's global lease, also when the execution or the agent is gone).
    ///
    /// The reaper computes each row's expiry from this. The lease is read from the agent row
    /// at the time of the scan (a lookup per row, not a copy kept on the dispatch): every
    /// replica of a shared store reads the same agents table, so every replica's reaper judges
    /// a row by the same lease whichever replica claimed it, and the schema keeps the lease in
    /// one place. A re-registration that changes the lease applies to in-flight dispatches
    /// from the next scan on.
    fn in_flight_leases(&mut self) -> StoreResult<Vec<(Dispatch, Option<f64>)>>;
    /// Every in-flight dispatch.
    fn in_flight(&mut self) -> StoreResult<Vec<Dispatch>> {
        Ok(self
            .in_flight_leases()?
            .into_iter()
            .map(|(d, _)| d)
            .collect())
    }
    /// Pending, failed or in-flight dispatches.
    fn queue_depth(&mut self) -> StoreResult<u64>;
    /// The highest occurrence handed out to attempt `attempt` of the dispatch for `key`
    /// (`(kind, target, args_hash)`), or `None` if none was. Used on shared stores, where the
    /// replica answering a submit may not be the one that answered the previous one; the
    /// counters of any other attempt are invisible.
    fn attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        key: &OccurrenceKey,
    ) -> StoreResult<Option<u64>>;
    /// Records that occurrence `occurrence` of `key` was handed out to attempt `attempt` (the
    /// counter never moves backwards). Writes nothing unless the dispatch is in flight with
    /// exactly that attempt, so a superseded attempt cannot move a newer attempt's counters.
    /// A backend drops a dispatch's counters when the dispatch leaves `in_flight` or moves to
    /// another attempt ([`DispatchTx::put`]), so they never outlive their attempt.
    fn advance_attempt_occurrence(
        &mut self,
        dispatch_id: &str,
        attempt: u32,
        key: &OccurrenceKey,
        occurrence: u64,
    ) -> StoreResult<()>;
}

/// The subagent operations of a transaction ([`Tx::subagents`]): the child executions a
/// parent's steps spawned, found by their `spawned_by` (at most one per step).
pub trait SubagentTx {
    /// The child that step `step_id` of execution `parent` spawned, if any.
    fn child(&mut self, parent: &str, step_id: &str) -> StoreResult<Option<Execution>>;
    /// Up to `limit` children of `parent` that are not terminal (pending, running or
    /// blocked), oldest first. In a write transaction the rows stay locked until it commits.
    fn open_children(&mut self, parent: &str, limit: usize) -> StoreResult<Vec<Execution>>;
    /// Whether `parent` has a child that is not terminal, as last committed (locks nothing).
    fn has_open_children(&mut self, parent: &str) -> StoreResult<bool>;
    /// The execution that spawned execution `id`, if any (locks nothing).
    fn parent_of(&mut self, id: &str) -> StoreResult<Option<String>>;
}

/// The session operations of a transaction ([`Tx::sessions`]): the turns of one agent's
/// session, found by `(agent_id, session)`.
pub trait SessionTx {
    /// Up to `limit` turns of the session that are not terminal (pending, running or blocked),
    /// oldest first. In a write transaction the caller holds the session until it commits, so
    /// two writers never both find it idle.
    fn open_turns(
        &mut self,
        agent_id: &str,
        session: &str,
        limit: usize,
    ) -> StoreResult<Vec<Execution>>;
    /// The id of the session's latest completed turn, if any.
    fn last_completed(&mut self, agent_id: &str, session: &str) -> StoreResult<Option<String>>;
    /// Records `execution_id` as the session's latest completed turn.
    fn set_last_completed(
        &mut self,
        agent_id: &str,
        session: &str,
        execution_id: &str,
    ) -> StoreResult<()>;
}

/// The API key operations of a transaction ([`Tx::api_keys`]). A key's secret is never stored:
/// only its SHA-256, by which a request's bearer token finds the key.
pub trait ApiKeyTx {
    /// Inserts a new key with the hash of its secret (lowercase hex SHA-256).
    fn insert(&mut self, key: &ApiKey, secret_hash: &str) -> StoreResult<()>;
    /// The key whose secret hashes to `secret_hash`, revoked or not.
    fn by_hash(&mut self, secret_hash: &str) -> StoreResult<Option<ApiKey>>;
    /// A key by id.
    fn get(&mut self, id: &str) -> StoreResult<Option<ApiKey>>;
    /// A page of keys by id (oldest first), starting after id `after`.
    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<ApiKey>>;
    /// Revokes a key at `now` (a revoked key keeps its first `revoked_at`); whether it exists.
    fn revoke(&mut self, id: &str, now: &Timestamp) -> StoreResult<bool>;
    /// How many keys are neither revoked nor expired at `now`.
    fn active_count(&mut self, now: &Timestamp) -> StoreResult<u64>;
}

/// A web console login as stored ([`Tx::console_sessions`]): never its token, only the token's
/// SHA-256, so a stolen database holds no usable session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// The lowercase hex SHA-256 of the session token the browser's cookie holds.
    pub id_hash: String,
    /// The API key the login used; empty for the admin (the server's token, or dev mode).
    pub key_id: String,
    /// For an admin login with the server's token: a hash of that token with the session
    /// token, so the session ends when the server's token changes; else empty.
    pub admin_proof: String,
    /// Who an admin login decides approvals as (the name given at login).
    pub decides_as: String,
    /// When the login was made (RFC 3339).
    pub started_at: Timestamp,
    /// When the session ends (RFC 3339).
    pub ends_at: Timestamp,
}

/// The console session operations of a transaction ([`Tx::console_sessions`]).
pub trait ConsoleSessionTx {
    /// Inserts a new session.
    fn insert(&mut self, session: &ConsoleSession) -> StoreResult<()>;
    /// The session whose token hashes to `id_hash`, expired or not, with the API key it logged
    /// in with (revoked or not; `None` for an admin login or a key that is gone), in one read.
    fn get(&mut self, id_hash: &str) -> StoreResult<Option<(ConsoleSession, Option<ApiKey>)>>;
    /// Deletes a session; whether it existed.
    fn delete(&mut self, id_hash: &str) -> StoreResult<bool>;
    /// Deletes every session of API key `key_id`; how many.
    fn delete_of_key(&mut self, key_id: &str) -> StoreResult<u64>;
    /// Deletes every session whose end is at or before `now`; how many.
    fn delete_expired(&mut self, now: &Timestamp) -> StoreResult<u64>;
    /// Deletes the sessions of `key_id` (empty: the admin's) but its newest `keep`; how many.
    fn keep_newest(&mut self, key_id: &str, keep: usize) -> StoreResult<u64>;
}

/// A read [`Tx::prefetch`] can announce: each names the [`Tx`] call it answers.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'a> {
    /// [`ExecutionTx::try_lock`] of an execution (first, when announced).
    ExecutionLock(&'a str),
    /// [`ExecutionTx::state`] of an execution.
    ExecutionState(&'a str),
    /// [`ExecutionTx::policy_bundle`] of an execution.
    ExecutionPolicyBundle(&'a str),
    /// [`AgentTx::get`] of the agent an execution belongs to.
    AgentOfExecution(&'a str),
    /// [`DispatchTx::lease`] of a dispatch.
    DispatchLease(&'a str),
    /// [`StepTx::get`]: execution and step id.
    Step(&'a str, &'a str),
    /// [`StepTx::exists`]: execution and step id.
    StepExists(&'a str, &'a str),
    /// [`StepTx::has_indeterminate_failure`]: execution, kind, target and args hash.
    IndeterminateFailure(&'a str, &'a StepKind, &'a str, &'a str),
    /// [`DispatchTx::attempt_occurrence`]: dispatch, attempt and the call's key.
    AttemptOccurrence(&'a str, u32, &'a OccurrenceKey),
}

/// An occurrence counter's key: `(kind, target, args_hash)`.
pub type OccurrenceKey = (String, String, String);

/// The accessors of [`Tx`] for a backend whose transaction type implements every group itself
/// (each hands out the transaction): `impl Tx for MyTx<'_> { groups_on_self!(); }`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! groups_on_self {
    () => {
        fn agents(&mut self) -> &mut dyn $crate::store::AgentTx {
            self
        }
        fn executions(&mut self) -> &mut dyn $crate::store::ExecutionTx {
            self
        }
        fn events(&mut self) -> &mut dyn $crate::store::EventTx {
            self
        }
        fn steps(&mut self) -> &mut dyn $crate::store::StepTx {
            self
        }
        fn approvals(&mut self) -> &mut dyn $crate::store::ApprovalTx {
            self
        }
        fn dispatches(&mut self) -> &mut dyn $crate::store::DispatchTx {
            self
        }
        fn api_keys(&mut self) -> &mut dyn $crate::store::ApiKeyTx {
            self
        }
        fn sessions(&mut self) -> &mut dyn $crate::store::SessionTx {
            self
        }
        fn console_sessions(&mut self) -> &mut dyn $crate::store::ConsoleSessionTx {
            self
        }
        fn resources(&mut self) -> &mut dyn $crate::store::ResourceTx {
            self
        }
        fn subagents(&mut self) -> &mut dyn $crate::store::SubagentTx {
            self
        }
    };
}
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use groups_on_self;
