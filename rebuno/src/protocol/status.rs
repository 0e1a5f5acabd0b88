//! The status enums of executions, steps, approvals and dispatches and their state machines:
//! each `transition` accepts exactly the legal moves and refuses the rest with the
//! [`TransitionError`] whose [`code`](TransitionError::code) the kernel answers.

use super::ErrorCode;

/// A refused state change. [`TransitionError::code`] is what the kernel answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The execution is already terminal (`409 execution_terminal`).
    #[error("execution is terminal: cannot move from {from} to {to}")]
    ExecutionTerminal {
        /// Current (terminal) status.
        from: ExecutionStatus,
        /// Requested status.
        to: ExecutionStatus,
    },
    /// Any other illegal execution move (`409 conflict`).
    #[error("illegal execution transition from {from} to {to}")]
    Execution {
        /// Current status.
        from: ExecutionStatus,
        /// Requested status.
        to: ExecutionStatus,
    },
    /// An illegal step move (`409 conflict`). A terminal step is never overwritten; the kernel
    /// answers `replay` to complete/fail of a terminal step before it would get here.
    #[error("illegal step transition from {from} to {to}")]
    Step {
        /// Current status.
        from: StepStatus,
        /// Requested status.
        to: StepStatus,
    },
    /// The approval is not pending (`409 conflict`).
    #[error(
        "illegal approval transition from {from} to {to}: only a pending approval can be decided"
    )]
    Approval {
        /// Current status.
        from: ApprovalStatus,
        /// Requested status.
        to: ApprovalStatus,
    },
    /// An illegal dispatch move (`409 conflict`).
    #[error("illegal dispatch transition from {from} to {to}")]
    Dispatch {
        /// Current status.
        from: DispatchStatus,
        /// Requested status.
        to: DispatchStatus,
    },
}

impl TransitionError {
    /// The error code the kernel answers a refused transition with.
    pub const fn code(&self) -> ErrorCode {
        match self {
            TransitionError::ExecutionTerminal { .. } => ErrorCode::ExecutionTerminal,
            TransitionError::Execution { .. }
            | TransitionError::Step { .. }
            | TransitionError::Approval { .. }
            | TransitionError::Dispatch { .. } => ErrorCode::Conflict,
        }
    }
}

wire_enum! {
    /// Status of an execution. Terminal: completed, failed, cancelled.
    pub enum ExecutionStatus {
        /// Created; becomes running in the same transaction.
        Pending = "pending",
        /// Dispatched to its agent.
        Running = "running",
        /// Waiting on an approval; no dispatch is live.
        Blocked = "blocked",
        /// The agent completed it.
        Completed = "completed",
        /// The agent failed it, or its dispatch was exhausted.
        Failed = "failed",
        /// Cancelled by a client or by its deadline.
        Cancelled = "cancelled",
    }
}

impl ExecutionStatus {
    /// The status an execution is created in.
    pub const INITIAL: ExecutionStatus = ExecutionStatus::Pending;

    /// Whether no further transition is possible.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Completed | ExecutionStatus::Failed | ExecutionStatus::Cancelled
        )
    }

    /// Whether `self → to` is a legal move: pending→running (create), running→blocked
    /// (approval required), blocked→running (approval resolved), and any non-terminal status to
    /// completed, failed or cancelled.
    pub const fn can_transition_to(self, to: ExecutionStatus) -> bool {
        use ExecutionStatus::*;
        matches!(
            (self, to),
            (Pending, Running)
                | (Running, Blocked)
                | (Blocked, Running)
                | (Pending | Running | Blocked, Completed | Failed | Cancelled)
        )
    }

    /// Moves to `to`, or refuses: `execution_terminal` when `self` is terminal, otherwise
    /// `conflict`.
    pub const fn transition(self, to: ExecutionStatus) -> Result<ExecutionStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else if self.is_terminal() {
            Err(TransitionError::ExecutionTerminal { from: self, to })
        } else {
            Err(TransitionError::Execution { from: self, to })
        }
    }
}

wire_enum! {
    /// Status of a step. Terminal: succeeded, failed, denied, cancelled.
    pub enum StepStatus {
        /// Submitted, policy not yet applied (transient).
        Proposed = "proposed",
        /// Allowed but not running: transient, or persisted after an approval grant.
        Allowed = "allowed",
        /// Recorded as running before the effect runs; an orphan if no outcome follows.
        Executing = "executing",
        /// Waiting for an approval decision.
        AwaitingApproval = "awaiting_approval",
        /// Completed with a result.
        Succeeded = "succeeded",
        /// Failed with an error (including `indeterminate` orphans).
        Failed = "failed",
        /// Denied by policy, by an approver, by approval expiry or by cancellation.
        Denied = "denied",
        /// Was executing when its execution was cancelled.
        Cancelled = "cancelled",
    }
}

impl StepStatus {
    /// The status a step is recorded in before policy is applied.
    pub const INITIAL: StepStatus = StepStatus::Proposed;

    /// Whether the step's outcome is final (the `?status=terminal` filter keeps exactly these).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            StepStatus::Succeeded | StepStatus::Failed | StepStatus::Denied | StepStatus::Cancelled
        )
    }

    /// Whether `self → to` is a legal move:
    ///
    /// * proposed → allowed | denied | awaiting_approval (policy), proposed → executing
    ///   (an existing proposed step resubmitted);
    /// * allowed → executing;
    /// * executing → succeeded | failed | cancelled (complete, fail or orphan, cancel);
    /// * awaiting_approval → allowed (grant) | denied (deny, expiry, cancel).
    ///
    /// Go lets `complete`/`fail` finish any non-terminal step (a quirk); this port does not:
    /// only an executing step can succeed or fail.
    pub const fn can_transition_to(self, to: StepStatus) -> bool {
        use StepStatus::*;
        matches!(
            (self, to),
            (Proposed, Allowed | Executing | Denied | AwaitingApproval)
                | (Allowed, Executing)
                | (Executing, Succeeded | Failed | Cancelled)
                | (AwaitingApproval, Allowed | Denied)
        )
    }

    /// Moves to `to`, or refuses with `conflict`.
    pub const fn transition(self, to: StepStatus) -> Result<StepStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError::Step { from: self, to })
        }
    }
}

wire_enum! {
    /// Status of an approval. Only pending is not terminal.
    pub enum ApprovalStatus {
        /// Waiting for a decision.
        Pending = "pending",
        /// An approver allowed the step.
        Granted = "granted",
        /// An approver denied the step.
        Denied = "denied",
        /// Timed out (rationale `timeout`) or its execution was cancelled
        /// (rationale `execution_cancelled`).
        Expired = "expired",
    }
}

impl ApprovalStatus {
    /// Whether the approval has been decided.
    pub const fn is_terminal(self) -> bool {
        !matches!(self, ApprovalStatus::Pending)
    }

    /// Whether `self → to` is legal: pending → granted | denied | expired.
    pub const fn can_transition_to(self, to: ApprovalStatus) -> bool {
        matches!(
            (self, to),
            (
                ApprovalStatus::Pending,
                ApprovalStatus::Granted | ApprovalStatus::Denied | ApprovalStatus::Expired
            )
        )
    }

    /// Moves to `to`, or refuses with `conflict` (the grant/deny answer for a decided approval).
    pub const fn transition(self, to: ApprovalStatus) -> Result<ApprovalStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError::Approval { from: self, to })
        }
    }
}

wire_enum! {
    /// Status of a dispatch queue row, and of the `dispatch.*` event payloads.
    pub enum DispatchStatus {
        /// Enqueued or reclaimed; claimable once `next_attempt_at` has passed.
        Pending = "pending",
        /// Claimed; stays so after a successful webhook until retired or reclaimed.
        InFlight = "in_flight",
        /// The last delivery failed; claimable again after backoff.
        Failed = "failed",
        /// Retired: the execution finished, was cancelled or blocked, or the dispatch was
        /// discarded or superseded.
        Exhausted = "exhausted",
        /// Only the status of a `dispatch.acked` payload; never a row status.
        Acked = "acked",
    }
}

impl DispatchStatus {
    /// The status a dispatch is enqueued in.
    pub const INITIAL: DispatchStatus = DispatchStatus::Pending;

    /// Whether the row is retired.
    pub const fn is_terminal(self) -> bool {
        matches!(self, DispatchStatus::Exhausted)
    }

    /// Whether `self → to` is legal: pending | failed → in_flight (claim), in_flight → pending
    /// (reaper), in_flight → failed (delivery failed, retries remain), and any row status →
    /// exhausted (retire; retiring twice is harmless). `acked` is never a row status, so every
    /// move from or to it is refused.
    pub const fn can_transition_to(self, to: DispatchStatus) -> bool {
        use DispatchStatus::*;
        matches!(
            (self, to),
            (Pending | Failed, InFlight)
                | (InFlight, Pending | Failed)
                | (Pending | InFlight | Failed | Exhausted, Exhausted)
        )
    }

    /// Moves to `to`, or refuses with `conflict`.
    pub const fn transition(self, to: DispatchStatus) -> Result<DispatchStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError::Dispatch { from: self, to })
        }
    }
}
