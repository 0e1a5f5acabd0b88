//! The submit's snapshot: what a submission reads before it decides (the execution, the
//! lease, the step at the call's next occurrence, the policy inputs, a batched completion's
//! step), in one batch of lookups. Read in a snapshot on a store of one process; on a shared
//! store, inside the write transaction that records the step, its rows locked (see
//! `kernel::steps`).

use crate::identity;
use crate::kernel::Lease;
use crate::kernel::tx::lease_holds;
use crate::protocol::{ExecutionStatus, Step, StepKind, StepStatus};
use crate::store::{Lookup, OccurrenceKey, StoreResult, Tx};

/// What one snapshot read learns about a submission.
pub(super) struct Snapshot {
    /// The store's lock of the execution, asked for in the transaction ([`Ask::lock`]), is
    /// held by another process: nothing else was read.
    pub(super) busy: bool,
    /// The attempt's next occurrence of the call, as counted.
    pub(super) counted: u64,
    /// The occurrence the step is submitted as (the count, or the agent's if ahead).
    pub(super) occurrence: u64,
    /// The step's id at that occurrence.
    pub(super) step_id: String,
    /// The execution's agent and status.
    pub(super) exec: Option<ExecState>,
    pub(super) lease_ok: bool,
    pub(super) step: Option<Step>,
    pub(super) approval_id: Option<String>,
    /// The agent's bundle, as stored (`None`: no such agent).
    pub(super) bundle: Option<String>,
    /// The execution's own bundle (a fork's), which narrows the agent's `bundle` (both must
    /// allow; see [`crate::policy::Decision::narrowed`]); empty when none.
    pub(super) own_bundle: String,
    pub(super) indeterminate: bool,
    /// For an occurrence ahead of the kernel's count: whether the one before it is recorded.
    pub(super) skip_recorded: bool,
    /// The step a batched completion names, as found in this execution.
    pub(super) completed: Option<Step>,
}

/// An execution's agent id and status.
pub(super) struct ExecState {
    pub(super) agent_id: String,
    pub(super) status: ExecutionStatus,
}

/// What a submission asks the snapshot for.
#[derive(Clone)]
pub(super) struct Ask {
    pub(super) exec_id: String,
    pub(super) lease: Lease,
    pub(super) kind: StepKind,
    pub(super) target: String,
    pub(super) args_hash: String,
    /// The call's occurrence key.
    pub(super) key: OccurrenceKey,
    /// The occurrence the agent names (0: none).
    pub(super) asked: u64,
    pub(super) at_most_once: bool,
    /// The step a batched completion names.
    pub(super) completed_id: Option<String>,
    /// The attempt's count of the call, when the kernel keeps it in memory (a store of one
    /// process); `None`: read here.
    pub(super) local_count: Option<u64>,
    /// Take the store's lock of the execution in the transaction, before anything is read
    /// ([`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock)): on a shared store whose lock the kernel does not hold.
    pub(super) lock: bool,
}

/// Reads what `ask` needs in `tx` (see the module docs).
pub(super) fn read_snapshot(tx: &mut dyn Tx, ask: &Ask) -> StoreResult<Snapshot> {
    // The step's id needs the count, which on a shared store is read here. So that a shared
    // store sends the count and the other reads together, they are first asked for with a
    // guess (a call not counted yet, the usual case), and asked for again only if the count
    // proves the guess wrong.
    let plan = |counted: u64| {
        let occurrence = counted.max(ask.asked);
        let id = |occ| {
            identity::step_id(
                &ask.exec_id,
                ask.kind.as_str(),
                &ask.target,
                &ask.args_hash,
                occ,
            )
        };
        let previous = (occurrence > counted).then(|| id(occurrence - 1));
        (occurrence, id(occurrence), previous)
    };
    let guessed = plan(ask.local_count.unwrap_or(0));
    // Everything below may be needed: asked for at once.
    let mut lookups = vec![
        Lookup::ExecutionState(&ask.exec_id),
        Lookup::DispatchLease(&ask.lease.dispatch_id),
        Lookup::Step(&ask.exec_id, &guessed.1),
        Lookup::ExecutionPolicyBundle(&ask.exec_id),
        Lookup::AgentOfExecution(&ask.exec_id),
    ];
    if ask.local_count.is_none() {
        let count = Lookup::AttemptOccurrence(&ask.lease.dispatch_id, ask.lease.attempt, &ask.key);
        lookups.insert(0, count);
    }
    if ask.at_most_once {
        lookups.push(Lookup::IndeterminateFailure(
            &ask.exec_id,
            &ask.kind,
            &ask.target,
            &ask.args_hash,
        ));
    }
    if let Some(previous) = &guessed.2 {
        lookups.push(Lookup::StepExists(&ask.exec_id, previous));
    }
    if let Some(completed) = &ask.completed_id {
        lookups.push(Lookup::Step(&ask.exec_id, completed));
    }
    if ask.lock {
        lookups.insert(0, Lookup::ExecutionLock(&ask.exec_id));
    }
    tx.prefetch(&lookups)?;
    drop(lookups);
    let mut snap = Snapshot {
        busy: false,
        counted: 0,
        occurrence: 0,
        step_id: String::new(),
        exec: None,
        lease_ok: false,
        step: None,
        approval_id: None,
        bundle: None,
        own_bundle: String::new(),
        indeterminate: false,
        skip_recorded: false,
        completed: None,
    };
    if ask.lock && !tx.executions().try_lock(&ask.exec_id)? {
        snap.busy = true;
        return Ok(snap);
    }
    let counted = match ask.local_count {
        Some(counted) => counted,
        None => tx
            .dispatches()
            .attempt_occurrence(&ask.lease.dispatch_id, ask.lease.attempt, &ask.key)?
            .map_or(0, |consumed| consumed.saturating_add(1)),
    };
    let (occurrence, step_id, previous) = plan(counted);
    if (&step_id, &previous) != (&guessed.1, &guessed.2) {
        let mut again = vec![Lookup::Step(&ask.exec_id, &step_id)];
        if let Some(previous) = &previous {
            again.push(Lookup::StepExists(&ask.exec_id, previous));
        }
        tx.prefetch(&again)?;
    }
    (snap.counted, snap.occurrence, snap.step_id) = (counted, occurrence, step_id);
    snap.exec = tx
        .executions()
        .state(&ask.exec_id)?
        .map(|(agent_id, status)| ExecState { agent_id, status });
    let Some(e) = &snap.exec else {
        return Ok(snap);
    };
    snap.lease_ok = lease_holds(tx, &ask.exec_id, &ask.lease, true)?;
    snap.step = tx.steps().get(&ask.exec_id, &snap.step_id)?;
    snap.approval_id = match &snap.step {
        Some(s) if s.status == StepStatus::AwaitingApproval => tx
            .approvals()
            .pending_for_step(&snap.step_id)?
            .map(|a| a.id),
        _ => None,
    };
    // Policy inputs matter only for a step that is not recorded yet.
    if snap.step.is_none() {
        snap.own_bundle = tx
            .executions()
            .policy_bundle(&ask.exec_id)?
            .unwrap_or_default();
        // Read whether or not the execution has its own: that one only narrows this one.
        snap.bundle = tx.agents().get(&e.agent_id)?.map(|a| a.policy_bundle);
        snap.indeterminate = ask.at_most_once
            && tx.steps().has_indeterminate_failure(
                &ask.exec_id,
                &ask.kind,
                &ask.target,
                &ask.args_hash,
            )?;
    }
    snap.skip_recorded = match &previous {
        Some(previous) => tx.steps().exists(&ask.exec_id, previous)?,
        None => true,
    };
    if let Some(completed) = &ask.completed_id {
        snap.completed = tx.steps().get(&ask.exec_id, completed)?;
    }
    Ok(snap)
}
