//! Identity on the client routes: the [`Scope`]s an API key may hold, the API key resource and
//! the bodies of `/v0/api-keys`, and the [`Principal`] a request is authenticated as.
//!
//! A key's secret (`rbk_` and 64 lowercase hex digits, 256 random bits) is answered once, by
//! the create; the kernel keeps only its SHA-256. The server's bearer token (and every request
//! in dev mode, where no token is configured) acts as the admin, which holds every scope.

use super::Timestamp;
use serde::{Deserialize, Serialize};

wire_enum! {
    /// What a key may do. `<resource>:write` includes `<resource>:read`; `admin` includes
    /// every scope and alone manages keys.
    pub enum Scope {
        /// List and read executions, their events, steps and live stream.
        ExecutionsRead = "executions:read",
        /// Create and cancel executions.
        ExecutionsWrite = "executions:write",
        /// List and read approvals.
        ApprovalsRead = "approvals:read",
        /// Grant and deny approvals.
        ApprovalsWrite = "approvals:write",
        /// List and read agents.
        AgentsRead = "agents:read",
        /// Register and delete agents.
        AgentsWrite = "agents:write",
        /// Evaluate a proposed step against a policy (`POST /v0/policies/{agent}/test`).
        PoliciesRead = "policies:read",
        /// Set an agent's policy bundle.
        PoliciesWrite = "policies:write",
        /// Everything, API keys included.
        Admin = "admin",
    }
}

impl Scope {
    /// Whether holding `self` allows what `needed` guards.
    pub fn covers(self, needed: Scope) -> bool {
        use Scope::*;
        self == needed
            || self == Admin
            || matches!(
                (self, needed),
                (ExecutionsWrite, ExecutionsRead)
                    | (ApprovalsWrite, ApprovalsRead)
                    | (AgentsWrite, AgentsRead)
                    | (PoliciesWrite, PoliciesRead)
            )
    }
}

/// The prefix of every API key secret.
pub const API_KEY_PREFIX: &str = "rbk_";

/// At most this many bytes in a key's name, subject, each group and an `on_behalf_of`.
pub const MAX_IDENTITY_BYTES: usize = 255;

/// At most this many groups on a key.
pub const MAX_KEY_GROUPS: usize = 64;

/// At most this many keys that are neither revoked nor expired at once.
pub const MAX_ACTIVE_API_KEYS: u64 = 10_000;

/// At most this long a key may live (`expires_in_seconds`): ten years.
pub const MAX_KEY_LIFETIME_SECS: u64 = 10 * 366 * 86_400;

/// An API key as the kernel answers it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// UUIDv7.
    pub id: String,
    /// A label for people.
    pub name: String,
    /// Who the key authenticates as: `created_by` of the executions it creates, `decided_by`
    /// of the approvals it decides.
    pub subject: String,
    /// The subject's groups: `subject_groups` of its executions; an approver list naming a
    /// group admits every key of the group.
    #[serde(default)]
    pub groups: Vec<String>,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The agent the key speaks for, if any: with `executions:write` it may create subagents
    /// of that agent's executions (a `spawned_by` naming a step of one), as the agent's own
    /// signed request may, and of no other agent's. The published Python SDKs create a
    /// subagent with such a client key. Omitted when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// The subject of the key that created it; omitted for the admin token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created_by: String,
    /// When it stops authenticating, if it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// When it was revoked; a revoked key authenticates nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Timestamp>,
}

/// Body of `POST /v0/api-keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyRequest {
    /// A label for people (required, at most [`MAX_IDENTITY_BYTES`]).
    #[serde(default)]
    pub name: String,
    /// Who the key authenticates as; the name when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// The subject's groups (at most [`MAX_KEY_GROUPS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// What it may do (at least one; an unknown scope is `400`).
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// The agent the key speaks for ([`ApiKey::agent_id`]); none when empty. At most
    /// [`MAX_IDENTITY_BYTES`], without control characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// Seconds until it expires (1 to [`MAX_KEY_LIFETIME_SECS`]); never when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_seconds: Option<u64>,
}

/// Answer of `POST /v0/api-keys` (`201`): the key and, this once, its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedApiKey {
    /// The key.
    #[serde(flatten)]
    pub api_key: ApiKey,
    /// The secret to send as `Authorization: Bearer <secret>`; the kernel cannot show it again.
    pub secret: String,
}

/// Who a client request is authenticated as: the admin (the server's bearer token, or anyone
/// in dev mode) or an API key's subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's id; empty for the admin.
    pub key_id: String,
    /// The key's subject; empty for the admin.
    pub subject: String,
    /// The key's groups.
    pub groups: Vec<String>,
    /// The key's scopes (`[admin]` for the admin).
    pub scopes: Vec<Scope>,
    /// The agent the key speaks for ([`ApiKey::agent_id`]); empty for none and for the admin.
    pub agent_id: String,
}

impl Principal {
    /// The admin: every scope, no subject.
    pub fn admin() -> Self {
        Principal {
            key_id: String::new(),
            subject: String::new(),
            groups: Vec::new(),
            scopes: vec![Scope::Admin],
            agent_id: String::new(),
        }
    }

    /// The principal an API key authenticates as.
    pub fn of_key(key: &ApiKey) -> Self {
        Principal {
            key_id: key.id.clone(),
            subject: key.subject.clone(),
            groups: key.groups.clone(),
            scopes: key.scopes.clone(),
            agent_id: key.agent_id.clone(),
        }
    }

    /// Whether this is the admin token (not a key).
    pub fn is_admin_token(&self) -> bool {
        self.key_id.is_empty()
    }

    /// Whether one of its scopes covers `needed`.
    pub fn allows(&self, needed: Scope) -> bool {
        self.scopes.iter().any(|s| s.covers(needed))
    }
}

impl Default for Principal {
    fn default() -> Self {
        Principal::admin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn write_covers_read_and_admin_covers_everything() {
        use Scope::*;
        for &s in Scope::ALL {
            assert!(s.covers(s) && Admin.covers(s));
        }
        assert!(ExecutionsWrite.covers(ExecutionsRead));
        assert!(PoliciesWrite.covers(PoliciesRead));
        assert!(!ExecutionsRead.covers(ExecutionsWrite));
        assert!(!ExecutionsWrite.covers(ApprovalsWrite));
        assert!(!ApprovalsWrite.covers(ExecutionsRead));
        assert!(!ExecutionsWrite.covers(Admin));
        assert!(Principal::admin().allows(Admin) && Principal::admin().is_admin_token());
    }

    #[test]
    fn create_bodies_parse_strictly() {
        let ok: CreateApiKeyRequest =
            serde_json::from_value(json!({"name": "k", "scopes": ["executions:read"]})).unwrap();
        assert_eq!(ok.scopes, [Scope::ExecutionsRead]);
        for bad in [
            json!({"name": "k", "scopes": ["executions:drop"]}),
            json!({"name": "k", "scopes": "admin"}),
            json!({"name": 5, "scopes": ["admin"]}),
            json!({"name": "k", "scopes": ["admin"], "secret": "mine"}),
            json!({"name": "k", "scopes": ["admin"], "expires_in_seconds": -1}),
            json!({"name": "k", "scopes": ["admin"], "groups": "ops"}),
        ] {
            assert!(
                serde_json::from_value::<CreateApiKeyRequest>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_key_is_written_without_nulls() {
        let key = ApiKey {
            id: "i".into(),
            name: "n".into(),
            subject: "s".into(),
            groups: vec![],
            scopes: vec![Scope::Admin],
            agent_id: String::new(),
            created_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            created_by: String::new(),
            expires_at: None,
            revoked_at: None,
        };
        assert_eq!(
            serde_json::to_value(&key).unwrap(),
            json!({"id": "i", "name": "n", "subject": "s", "groups": [], "scopes": ["admin"], "created_at": "2026-01-01T00:00:00.000000Z"})
        );
    }
}
