//! [`RemoteRefusal`]: every way a remote call can fail the worker's checks of the invocation's
//! authority ([`check`](super::check) makes them), with a stable name for each check and which
//! of them a later claim of the invocation cures.

/// Why a remote call was refused before its action ran (see the module docs for the order of
/// the checks). Each names what failed; [`RemoteRefusal::check`] is a stable name for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteRefusal {
    /// No selection receipt of the run stream names the invocation.
    #[error("no selection in run stream '{stream}' names invocation '{invocation}'")]
    NotSelected {
        /// The run stream read.
        stream: String,
        /// The invocation the call names.
        invocation: String,
    },
    /// The invocation was selected, but not as the call says.
    #[error(
        "invocation '{invocation}' was selected with {field} '{recorded}', but the call says '{called}'"
    )]
    SelectionMismatch {
        /// The invocation.
        invocation: String,
        /// The payload field (`selectionId`, `actionId`, `index`, `selectedHead`,
        /// `policyVersion`, `schedulerPolicyVersion`).
        field: &'static str,
        /// What the selection recorded.
        recorded: String,
        /// What the call says.
        called: String,
    },
    /// The selection's id does not derive from the call's run, agent and version.
    #[error("selection '{selection}' was not made for run '{run}' of {agent}@{version}")]
    ForeignSelection {
        /// The selection.
        selection: String,
        /// The run the call names.
        run: String,
        /// The agent the call names.
        agent: String,
        /// The agent version the call names.
        version: String,
    },
    /// The governance denied the invocation (its `action.failed` names the rule).
    #[error("invocation '{invocation}' was denied by policy rule '{rule}': {reason}")]
    PolicyDenied {
        /// The invocation.
        invocation: String,
        /// The rule.
        rule: String,
        /// The policy's reason.
        reason: String,
    },
    /// The invocation has ended.
    #[error("invocation '{invocation}' has already ended ({ended})")]
    InvocationEnded {
        /// The invocation.
        invocation: String,
        /// The receipt that ended it: `action.completed`, `action.failed` or
        /// `action.superseded`.
        ended: String,
    },
    /// The run has ended.
    #[error("run '{run}' has already ended ({ended})")]
    RunEnded {
        /// The run.
        run: String,
        /// `run.completed` or `run.failed`.
        ended: String,
    },
    /// The invocation waited for a policy approval and was not claimed since.
    #[error(
        "invocation '{invocation}' waits for policy approval '{approval}', which was not granted"
    )]
    ApprovalNotGranted {
        /// The invocation.
        invocation: String,
        /// The approval requested.
        approval: String,
        /// The attempt of the invocation's latest claim (made before the request), if any.
        attempt: Option<u32>,
    },
    /// The invocation has no claim.
    #[error("invocation '{invocation}' has no claim in run stream '{stream}'")]
    NotClaimed {
        /// The invocation.
        invocation: String,
        /// The run stream read.
        stream: String,
    },
    /// The invocation's latest claim was made on another stream (a fork's parent).
    #[error(
        "claim '{claim}' of invocation '{invocation}' was made on stream '{on}', not on run stream '{stream}'"
    )]
    ClaimElsewhere {
        /// The invocation.
        invocation: String,
        /// The claim.
        claim: String,
        /// The stream its `action.started` was appended to.
        on: String,
        /// The run stream read.
        stream: String,
        /// The claim's attempt.
        attempt: u32,
    },
    /// The invocation was claimed, but not as the call says.
    #[error(
        "invocation '{invocation}' was claimed with {field} '{recorded}', but the call says '{called}'"
    )]
    ClaimMismatch {
        /// The invocation.
        invocation: String,
        /// The payload field (`selectionId`, `actionId`, `index`, `kind`, `execution`,
        /// `claimOwnerId`, `attempt`).
        field: &'static str,
        /// What the claim recorded.
        recorded: String,
        /// What the call says.
        called: String,
        /// The claim's attempt.
        attempt: u32,
    },
    /// The call names a claim that is no longer the invocation's latest (it was taken over).
    #[error(
        "the call names claim '{named}', but invocation '{invocation}' is claimed under '{latest}' (attempt {attempt})"
    )]
    ClaimSuperseded {
        /// The invocation.
        invocation: String,
        /// The claim the call names.
        named: String,
        /// The latest claim.
        latest: String,
        /// Its attempt.
        attempt: u32,
    },
    /// The invocation's latest claim has lapsed (its owner stopped renewing it, or a renewal
    /// is late).
    #[error(
        "claim '{claim}' (attempt {attempt}) of invocation '{invocation}' expired at {expired_at} (now {now}, ms since the epoch)"
    )]
    ClaimExpired {
        /// The invocation.
        invocation: String,
        /// The claim.
        claim: String,
        /// Its attempt.
        attempt: u32,
        /// When its lease lapsed.
        expired_at: i64,
        /// The runtime's clock when checked.
        now: i64,
    },
    /// The call is not exactly the one the controller makes for the invocation.
    #[error(
        "the call differs from the one the controller makes for invocation '{invocation}' at {at}"
    )]
    InputMismatch {
        /// The invocation.
        invocation: String,
        /// Where: the differing fields (`callId`, `payload.claimId`, `payload.<extra>`, ...).
        at: String,
    },
}

impl RemoteRefusal {
    /// The check that failed, as a stable name (the `refused` field of a kernel worker's
    /// answer): `not_selected`, `selection_mismatch`, `foreign_selection`, `policy_denied`,
    /// `invocation_ended`, `run_ended`, `approval_not_granted`, `not_claimed`,
    /// `claim_elsewhere`, `claim_mismatch`, `claim_superseded`, `claim_expired` or
    /// `input_mismatch`.
    pub fn check(&self) -> &'static str {
        match self {
            RemoteRefusal::NotSelected { .. } => "not_selected",
            RemoteRefusal::SelectionMismatch { .. } => "selection_mismatch",
            RemoteRefusal::ForeignSelection { .. } => "foreign_selection",
            RemoteRefusal::PolicyDenied { .. } => "policy_denied",
            RemoteRefusal::InvocationEnded { .. } => "invocation_ended",
            RemoteRefusal::RunEnded { .. } => "run_ended",
            RemoteRefusal::ApprovalNotGranted { .. } => "approval_not_granted",
            RemoteRefusal::NotClaimed { .. } => "not_claimed",
            RemoteRefusal::ClaimElsewhere { .. } => "claim_elsewhere",
            RemoteRefusal::ClaimMismatch { .. } => "claim_mismatch",
            RemoteRefusal::ClaimSuperseded { .. } => "claim_superseded",
            RemoteRefusal::ClaimExpired { .. } => "claim_expired",
            RemoteRefusal::InputMismatch { .. } => "input_mismatch",
        }
    }

    /// Whether a later claim of the invocation can cure this refusal: it read the invocation's
    /// latest claim (or its want of one), which the next claim replaces (see the module docs).
    /// The others read what stays as it is: the selection, the call's own fields, an
    /// invocation or run that has ended.
    pub fn cured_by_a_later_claim(&self) -> bool {
        cured_by_a_later_claim(self.check())
    }

    /// The attempt of the invocation's latest claim, as the refusal read it (`None`: it read
    /// none, or the refusal is not about the claim).
    pub fn claim_attempt(&self) -> Option<u32> {
        match self {
            RemoteRefusal::ApprovalNotGranted { attempt, .. } => *attempt,
            RemoteRefusal::ClaimElsewhere { attempt, .. }
            | RemoteRefusal::ClaimMismatch { attempt, .. }
            | RemoteRefusal::ClaimSuperseded { attempt, .. }
            | RemoteRefusal::ClaimExpired { attempt, .. } => Some(*attempt),
            _ => None,
        }
    }
}

/// The checks ([`RemoteRefusal::check`]) whose refusals a later claim of the invocation can
/// cure.
const CURED_BY_A_LATER_CLAIM: [&str; 6] = [
    "approval_not_granted",
    "not_claimed",
    "claim_elsewhere",
    "claim_mismatch",
    "claim_superseded",
    "claim_expired",
];

/// Whether a refusal by check `check` ([`RemoteRefusal::check`]) can be cured by a later
/// claim of the invocation ([`RemoteRefusal::cured_by_a_later_claim`]).
pub(crate) fn cured_by_a_later_claim(check: &str) -> bool {
    CURED_BY_A_LATER_CLAIM.contains(&check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_checks_of_the_claim_are_cured_by_a_later_claim() {
        for check in [
            "approval_not_granted",
            "not_claimed",
            "claim_elsewhere",
            "claim_mismatch",
            "claim_superseded",
            "claim_expired",
        ] {
            assert!(cured_by_a_later_claim(check), "{check}");
        }
        for check in [
            "not_selected",
            "selection_mismatch",
            "foreign_selection",
            "policy_denied",
            "invocation_ended",
            "run_ended",
            "input_mismatch",
            "no_such_check",
        ] {
            assert!(!cured_by_a_later_claim(check), "{check}");
        }
        let expired = RemoteRefusal::ClaimExpired {
            invocation: "i".into(),
            claim: "c".into(),
            attempt: 3,
            expired_at: 1,
            now: 2,
        };
        assert!(expired.cured_by_a_later_claim());
        assert_eq!(expired.claim_attempt(), Some(3));
        let unclaimed = RemoteRefusal::NotClaimed {
            invocation: "i".into(),
            stream: "s".into(),
        };
        assert!(unclaimed.cured_by_a_later_claim());
        assert_eq!(unclaimed.claim_attempt(), None);
    }
}
