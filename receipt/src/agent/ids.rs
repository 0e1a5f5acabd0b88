//! Deterministic identifiers (selections, invocations, claims, merges, output hashes) and the
//! pinned protocol constants.
//!
//! Every id is a digest of the RFC 8785 canonical JSON of a small array, so a recovered run
//! reproduces exactly the ids it had before the crash.

use crate::canonical;
use crate::error::Result;
use crate::receipt::{base36, sha256_hex};
use crate::sim::{Clock, EntropySource};
use serde_json::{Value, json};

/// The control-receipt policy version used when a spec sets none.
pub const DEFAULT_RUNTIME_POLICY_VERSION: &str = "runtime-policy-v2";
/// The selection policy version, always this value.
pub const SCHEDULER_POLICY_VERSION: &str = "scheduler-v2";
/// The most selections one run may make when the spec sets no limit.
pub const DEFAULT_MAX_ITERATIONS: u32 = 200;
/// The selection cap when the spec sets none.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 8;

const SELECTION_PREFIX: &str = "agent_selection_";
const INVOCATION_PREFIX: &str = "agent_action_invocation_";
const CLAIM_PREFIX: &str = "agent_action_claim_";
const MERGE_PREFIX: &str = "agent_merge_";

fn digest32(value: &Value) -> String {
    // Only strings and small integers go in, which always canonicalize.
    let bytes = canonical::canonicalize(value).expect("id inputs are plain JSON");
    let mut hex = sha256_hex(&bytes);
    hex.truncate(32);
    hex
}

/// `agent_selection_` + the first 32 hex of sha256(cj([runId, agentId, agentVersion,
/// policyVersion, schedulerPolicyVersion, selectedHead ?? "root", actionIds])).
pub fn selection_id(
    run_id: &str,
    agent_id: &str,
    agent_version: &str,
    policy_version: &str,
    scheduler_policy_version: &str,
    selected_head: Option<&str>,
    action_ids: &[impl AsRef<str>],
) -> String {
    let ids: Vec<&str> = action_ids.iter().map(AsRef::as_ref).collect();
    let input = json!([
        run_id,
        agent_id,
        agent_version,
        policy_version,
        scheduler_policy_version,
        selected_head.unwrap_or("root"),
        ids
    ]);
    format!("{SELECTION_PREFIX}{}", digest32(&input))
}

/// `agent_action_invocation_` + the first 32 hex of sha256(cj([selectionId, actionId, index])).
pub fn invocation_id(selection_id: &str, action_id: &str, index: usize) -> String {
    format!(
        "{INVOCATION_PREFIX}{}",
        digest32(&json!([selection_id, action_id, index]))
    )
}

/// `agent_action_claim_` + the first 32 hex of sha256(cj([invocationId, claimOwnerId,
/// attempt])): one claim id per owner and attempt.
pub fn claim_id(invocation_id: &str, claim_owner_id: &str, attempt: u32) -> String {
    format!(
        "{CLAIM_PREFIX}{}",
        digest32(&json!([invocation_id, claim_owner_id, attempt]))
    )
}

/// `agent_merge_` + the first 32 hex of sha256(cj([runId, agentId, agentVersion, policyId,
/// policyVersion, head ?? "root"])): one merge per policy and head.
pub fn merge_id(
    run_id: &str,
    agent_id: &str,
    agent_version: &str,
    policy_id: &str,
    policy_version: &str,
    head: Option<&str>,
) -> String {
    let input = json!([
        run_id,
        agent_id,
        agent_version,
        policy_id,
        policy_version,
        head.unwrap_or("root")
    ]);
    format!("{MERGE_PREFIX}{}", digest32(&input))
}

/// The manifest content hash: hex sha256 of the canonical JSON of the bodies array, in emission
/// order. Key order inside a body does not matter.
pub fn content_hash(bodies: &[Value]) -> Result<String> {
    let mut out = Vec::with_capacity(64 * bodies.len() + 2);
    out.push(b'[');
    for (i, body) in bodies.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        canonical::write_value(&mut out, body)?;
    }
    out.push(b']');
    Ok(sha256_hex(&out))
}

/// The base stream of an agent (CLI default): `agents/<agentId>`.
pub fn agent_stream(agent_id: &str) -> String {
    format!("agents/{agent_id}")
}

/// The run stream of a run: `<stream>/runs/<runId>`.
pub fn run_stream(stream: &str, run_id: &str) -> String {
    format!("{stream}/runs/{run_id}")
}

/// A fresh run id: `run_<base36 now>_<4 random base36 characters>`.
pub fn new_run_id(clock: &dyn Clock, entropy: &dyn EntropySource) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let now = u64::try_from(clock.now_ms()).unwrap_or(0);
    let mut bytes = [0u8; 4];
    entropy.fill(&mut bytes);
    let suffix: String = bytes
        .iter()
        .map(|b| DIGITS[usize::from(*b) % 36] as char)
        .collect();
    format!("run_{}_{suffix}", base36(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_vectors() {
        let sel = selection_id(
            "run_x",
            "hello-agent",
            "1.0.0",
            DEFAULT_RUNTIME_POLICY_VERSION,
            SCHEDULER_POLICY_VERSION,
            None,
            &["complete"],
        );
        assert_eq!(sel, "agent_selection_3ef9aa1a1e86f5d7c09aac4bda9db26a");
        assert_eq!(
            invocation_id(&sel, "complete", 0),
            "agent_action_invocation_4705c924ac3d99c1ee3a330c91bcb269"
        );
    }

    #[test]
    fn content_hash_ignores_key_order() {
        let a = content_hash(&[json!({"type": "t", "a": 1, "b": 2})]).unwrap();
        let b = content_hash(&[json!({"b": 2, "type": "t", "a": 1})]).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, content_hash(&[]).unwrap());
    }
}
