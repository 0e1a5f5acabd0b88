//! Governance of receipt actions by a rebuno policy bundle, on an embedded kernel (SQLite in
//! memory) serving the gate agent by direct calls: a denied action, an approval that blocks
//! and resumes (granted through the kernel's API, or decided by a receipt), a rate limit that
//! delays, and the same bundle deciding a rebuno tool.

mod agent_support;
mod kernel_gate_support;

use kernel_gate_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_action_fails_with_the_rule_and_reason() {
    denied_action(&embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_blocks_the_run_until_granted() {
    approval_blocks_then_resumes(&embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_decided_by_a_receipt() {
    approval_decided_by_receipt(&embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_delays_the_action() {
    rate_limit_delays(&embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_bundle_decides_a_rebuno_tool() {
    same_bundle_decides_a_rebuno_tool(&embedded().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governance_for_another_agent_is_refused_before_the_run_starts() {
    use agent_support::*;
    use receipt::agent::Controller;
    use receipt::kernel::KernelGovernance;
    use std::sync::Arc;
    let k = embedded().await;
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "hi").await;
    let elsewhere = KernelGovernance::new(k.client.clone(), "billing").policy(DENY_BUNDLE);
    let err = Controller::new(Arc::clone(&runtime), basic_spec())
        .governance(Arc::new(elsewhere))
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the governance decides through gate agent 'receipt-gate-billing', but agent 'test-agent' is governed by 'receipt-gate-test-agent': make it with KernelGovernance::new(client, \"test-agent\")"
    );
    assert_eq!(types(&runtime, STREAM).await, ["task.requested"]);
}
