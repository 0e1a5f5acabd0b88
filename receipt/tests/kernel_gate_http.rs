//! Governance of receipt actions by a rebuno policy bundle over HTTP: a rebuno server on a
//! loopback port, the gate agent (and a rebuno agent) served on webhooks of their own, and the
//! governance's client, policy, approvals and grants all going over the wire.

mod agent_support;
mod kernel_gate_support;

use kernel_gate_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_action_fails_with_the_rule_and_reason() {
    denied_action(&over_http().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_blocks_the_run_until_granted() {
    approval_blocks_then_resumes(&over_http().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_decided_by_a_receipt() {
    approval_decided_by_receipt(&over_http().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_delays_the_action() {
    rate_limit_delays(&over_http().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bundle_decides_a_rebuno_tool() {
    same_bundle_decides_a_rebuno_tool(&over_http().await).await;
}
