//! The checks a pass makes before it writes anything: deployment mistakes the controller can see
//! up front are refused here, so that they never reach the run stream as `action.failed` and
//! `run.failed` (which would end the run for good).
//!
//! - [`check_configuration`], before the pass reads the run: the options are usable (a lease,
//!   a heartbeat shorter than it, timeouts and a poll interval above zero, `max_iterations` of
//!   at least 1), every remote action of the spec has a dispatcher, and the dispatcher serves
//!   each target group they run in ([`RemoteDispatcher::serves`]; a group it once said yes to
//!   is not asked again by the same controller); the governance accepts this agent
//!   ([`Governance::check`]).
//! - [`check_run`], once the run is folded and before `run.started`: a run waiting on a policy
//!   approval is not resumed by a controller without governance (it would claim the action
//!   without the approval).
//!
//! Every refusal is an [`AgentError`] for which [`AgentError::is_configuration`] holds: the
//! pass returns it without appending anything, and the same run starts (or resumes) once the
//! configuration is fixed.

use super::super::{AgentError, AgentSpec, AgentTypes, ExecutionMode};
use super::{ControllerOptions, Pass};
use crate::error::Result;
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

/// The shortest renewal interval the controller uses (see `renew`).
const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// A refusal of option `option`.
fn option(option: &str, problem: impl std::fmt::Display) -> AgentError {
    AgentError::Misconfigured(format!("controller option {option}: {problem}"))
}

/// Milliseconds, for messages.
fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The options' own consistency.
fn check_options(opts: &ControllerOptions) -> Result<(), AgentError> {
    if opts.lease.is_zero() {
        return Err(option("lease", "must be above zero"));
    }
    if opts.heartbeat.is_some_and(|h| h.is_zero()) {
        return Err(option("heartbeat", "must be above zero"));
    }
    let heartbeat = opts.heartbeat.unwrap_or(opts.lease / 3).max(MIN_HEARTBEAT);
    if heartbeat >= opts.lease {
        return Err(option(
            "heartbeat",
            format_args!(
                "a claim renewed every {} ms lapses before its renewal: the lease ({} ms) must be longer",
                ms(heartbeat),
                ms(opts.lease)
            ),
        ));
    }
    if opts.execution_timeout.is_some_and(|t| t.is_zero()) {
        return Err(option("execution_timeout", "must be above zero"));
    }
    if opts.remote_timeout.is_zero() {
        return Err(option("remote_timeout", "must be above zero"));
    }
    if opts.poll_interval.is_zero() {
        return Err(option("poll_interval", "must be above zero"));
    }
    if opts.max_iterations == Some(0) {
        return Err(option(
            "max_iterations",
            "must be at least 1 (a run could make no selection)",
        ));
    }
    Ok(())
}

/// The target group of each remote action of `spec` (the action's, else the controller's
/// default), with the first action that runs in it.
fn remote_groups<A: AgentTypes>(
    spec: &AgentSpec<A>,
    opts: &ControllerOptions,
) -> BTreeMap<String, String> {
    let mut groups = BTreeMap::new();
    for action in spec.actions() {
        if action.mode() == ExecutionMode::Remote {
            let group = action.group().unwrap_or(&opts.default_group).to_owned();
            groups
                .entry(group)
                .or_insert_with(|| action.id().to_owned());
        }
    }
    groups
}

/// Every check that needs only the spec and the options (see the module docs). `served`
/// holds the groups the dispatcher already said it serves.
pub(super) async fn check_configuration<A: AgentTypes>(
    spec: &AgentSpec<A>,
    opts: &ControllerOptions,
    served: &Mutex<HashSet<String>>,
) -> Result<()> {
    check_options(opts)?;
    let groups = remote_groups(spec, opts);
    if let Some((_, action)) = groups.first_key_value() {
        let Some(dispatcher) = &opts.dispatcher else {
            return Err(AgentError::NoDispatcher(action.clone()).into());
        };
        for (group, action) in &groups {
            let known = served
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(group);
            if known {
                continue;
            }
            if !dispatcher.serves(group).await? {
                return Err(AgentError::UnservedGroup {
                    action: action.clone(),
                    group: group.clone(),
                }
                .into());
            }
            served
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(group.clone());
        }
    }
    if let Some(governance) = &opts.governance {
        governance.check(spec.id()).await?;
    }
    Ok(())
}

/// The checks that need the run's fold (see the module docs).
pub(super) fn check_run<A: AgentTypes>(pass: &Pass<'_, A>) -> Result<()> {
    if pass.controller.opts.governance.is_some() {
        return Ok(());
    }
    let waiting = pass
        .cache
        .control
        .invocations
        .values()
        .filter(|inv| inv.claim.is_none())
        .filter_map(|inv| Some((inv.action_id.as_str(), inv.approval.as_deref()?)))
        .min();
    match waiting {
        Some((action, approval)) => Err(AgentError::UngovernedRun {
            action: action.to_owned(),
            approval: approval.to_owned(),
        }
        .into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_for_what_would_misbehave() {
        let ok = ControllerOptions::default();
        assert!(check_options(&ok).is_ok());
        let cases: Vec<(ControllerOptions, &str)> = vec![
            (
                ControllerOptions {
                    lease: Duration::ZERO,
                    ..ControllerOptions::default()
                },
                "controller option lease: must be above zero",
            ),
            (
                ControllerOptions {
                    lease: Duration::from_secs(1),
                    heartbeat: Some(Duration::from_secs(1)),
                    ..ControllerOptions::default()
                },
                "controller option heartbeat: a claim renewed every 1000 ms lapses before its renewal: the lease (1000 ms) must be longer",
            ),
            (
                ControllerOptions {
                    lease: Duration::from_millis(10),
                    ..ControllerOptions::default()
                },
                "controller option heartbeat: a claim renewed every 10 ms lapses before its renewal: the lease (10 ms) must be longer",
            ),
            (
                ControllerOptions {
                    remote_timeout: Duration::ZERO,
                    ..ControllerOptions::default()
                },
                "controller option remote_timeout: must be above zero",
            ),
            (
                ControllerOptions {
                    poll_interval: Duration::ZERO,
                    ..ControllerOptions::default()
                },
                "controller option poll_interval: must be above zero",
            ),
            (
                ControllerOptions {
                    execution_timeout: Some(Duration::ZERO),
                    ..ControllerOptions::default()
                },
                "controller option execution_timeout: must be above zero",
            ),
            (
                ControllerOptions {
                    max_iterations: Some(0),
                    ..ControllerOptions::default()
                },
                "controller option max_iterations: must be at least 1 (a run could make no selection)",
            ),
        ];
        for (opts, message) in cases {
            let e = check_options(&opts).unwrap_err();
            assert!(e.is_configuration());
            assert_eq!(e.to_string(), message);
        }
    }
}
