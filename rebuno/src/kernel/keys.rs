//! API keys: create (the secret answered once), list, get, revoke, and the lookup that turns a
//! bearer token into the [`Principal`] a client request acts as.
//!
//! A secret is `rbk_` and 64 hex digits of 256 random bits; the store keeps only its SHA-256,
//! so a stolen database yields no usable key, and a lookup by hash leaks nothing of a secret
//! by its timing. Revocation and expiry are read from the store on every request, so a key
//! revoked on one replica stops working on every replica at once.

use super::listing::page_size;
use super::{Kernel, KernelError, KernelResult};
use crate::identity::{hex_lower, sha256_hex};
use crate::protocol::{
    API_KEY_PREFIX, ApiKey, CreateApiKeyRequest, CreatedApiKey, MAX_ACTIVE_API_KEYS,
    MAX_IDENTITY_BYTES, MAX_KEY_GROUPS, MAX_KEY_LIFETIME_SECS, Principal, Scope,
};
use crate::store::{Page, StoreExt};
use crate::time::Timestamp;
use std::time::Duration;

/// Default and maximum page size of `GET /v0/api-keys`.
pub const KEYS_PAGE_LIMIT: usize = 1000;

/// A new secret: the prefix and 64 lowercase hex digits (256 random bits).
fn new_secret() -> KernelResult<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| KernelError::internal(format!("no randomness for a key: {e}")))?;
    Ok(format!("{API_KEY_PREFIX}{}", hex_lower(&bytes)))
}

/// Whether `token` has the shape of a key secret (checked before any lookup).
fn is_secret(token: &str) -> bool {
    token.strip_prefix(API_KEY_PREFIX).is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The principal `key` authenticates as at `now`; `None` once it is revoked or expired.
pub(super) fn active_principal(key: &ApiKey, now: &Timestamp) -> Option<Principal> {
    let live = key.revoked_at.is_none() && key.expires_at.as_ref().is_none_or(|at| at > now);
    live.then(|| Principal::of_key(key))
}

/// Refuses a name, subject or group that is empty, too long or holds control characters.
fn check_name(what: &str, value: &str) -> KernelResult<()> {
    if value.is_empty() {
        return Err(KernelError::validation(format!("{what} is required")));
    }
    if value.len() > MAX_IDENTITY_BYTES {
        return Err(KernelError::validation(format!(
            "{what} is over {MAX_IDENTITY_BYTES} bytes"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(KernelError::validation(format!(
            "{what} holds a control character"
        )));
    }
    Ok(())
}

/// The key a valid create request describes (without id, times or creator), or `400`.
fn validate(req: &CreateApiKeyRequest) -> KernelResult<()> {
    check_name("name", &req.name)?;
    if !req.subject.is_empty() {
        check_name("subject", &req.subject)?;
    }
    if req.groups.len() > MAX_KEY_GROUPS {
        return Err(KernelError::validation(format!(
            "more than {MAX_KEY_GROUPS} groups"
        )));
    }
    for group in &req.groups {
        check_name("a group", group)?;
    }
    if !req.agent_id.is_empty() {
        check_name("agent_id", &req.agent_id)?;
    }
    if req.scopes.is_empty() {
        let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        return Err(KernelError::validation(format!(
            "scopes is required (one or more of {})",
            known.join(", ")
        )));
    }
    if let Some(secs) = req.expires_in_seconds
        && !(1..=MAX_KEY_LIFETIME_SECS).contains(&secs)
    {
        return Err(KernelError::validation(format!(
            "expires_in_seconds must be 1 to {MAX_KEY_LIFETIME_SECS}"
        )));
    }
    Ok(())
}

/// `list` without repeats, in first-seen order.
fn dedup<T: PartialEq + Clone>(list: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(list.len());
    for item in list {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

impl Kernel {
    /// Creates an API key for `created_by` (the creator's subject; empty for the admin token).
    /// `400` for an empty name or scope list, a field over its bound, or more than
    /// [`MAX_ACTIVE_API_KEYS`] active keys; the answer carries the secret, which no later
    /// call shows again.
    pub async fn create_api_key(
        &self,
        req: CreateApiKeyRequest,
        created_by: &str,
    ) -> KernelResult<CreatedApiKey> {
        validate(&req)?;
        let now = self.now();
        let secret = new_secret()?;
        let key = ApiKey {
            id: uuid::Uuid::now_v7().to_string(),
            subject: if req.subject.is_empty() {
                req.name.clone()
            } else {
                req.subject
            },
            name: req.name,
            groups: dedup(&req.groups),
            scopes: dedup(&req.scopes),
            agent_id: req.agent_id,
            created_at: Timestamp::from(now),
            created_by: created_by.to_owned(),
            expires_at: req
                .expires_in_seconds
                .map(|secs| Timestamp::from(now + Duration::from_secs(secs))),
            revoked_at: None,
        };
        let (stored, hash, now_text) = (
            key.clone(),
            sha256_hex(secret.as_bytes()),
            Timestamp::from(now),
        );
        self.inner
            .store
            .write(move |tx| {
                let keys = tx.api_keys();
                if keys.active_count(&now_text)? >= MAX_ACTIVE_API_KEYS {
                    return Ok(Err(KernelError::validation(format!(
                        "there are already {MAX_ACTIVE_API_KEYS} active keys: revoke one first"
                    ))));
                }
                keys.insert(&stored, &hash)?;
                Ok(Ok(()))
            })
            .await??;
        // Never the secret.
        tracing::info!(key_id = %key.id, name = %key.name, subject = %key.subject, agent_id = %key.agent_id, "API key created");
        Ok(CreatedApiKey {
            api_key: key,
            secret,
        })
    }

    /// An API key (`404` if unknown), without its secret.
    pub async fn api_key(&self, id: &str) -> KernelResult<ApiKey> {
        let id = id.to_owned();
        self.inner
            .store
            .read(move |tx| tx.api_keys().get(&id))
            .await?
            .ok_or_else(KernelError::not_found)
    }

    /// A page of API keys, revoked ones included, oldest first, after key id `after`. `limit`
    /// 0 means the default ([`KEYS_PAGE_LIMIT`]), which is also the maximum.
    pub async fn api_keys_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> KernelResult<Page<ApiKey>> {
        let limit = page_size(limit, KEYS_PAGE_LIMIT, KEYS_PAGE_LIMIT);
        let after = after.map(str::to_owned);
        Ok(self
            .inner
            .store
            .read(move |tx| tx.api_keys().page(after.as_deref(), limit))
            .await?)
    }

    /// Revokes an API key (`404` if unknown): from now on it authenticates nothing, on every
    /// replica, and its console sessions are gone. Revoking a revoked key changes nothing. Answers the key as it now is.
    pub async fn revoke_api_key(&self, id: &str) -> KernelResult<ApiKey> {
        let (key_id, now) = (id.to_owned(), self.now_ts());
        let found = self
            .inner
            .store
            .write(move |tx| {
                if !tx.api_keys().revoke(&key_id, &now)? {
                    return Ok(None);
                }
                // Its console logins end with it, on every replica.
                tx.console_sessions().delete_of_key(&key_id)?;
                tx.api_keys().get(&key_id)
            })
            .await?;
        if found.is_some() {
            tracing::info!(key_id = id, "API key revoked");
        }
        found.ok_or_else(KernelError::not_found)
    }

    /// The principal a bearer token that is an API key's secret authenticates as; `None` for
    /// anything else (not a secret, unknown, revoked or expired).
    pub async fn authenticate_api_key(&self, token: &str) -> KernelResult<Option<Principal>> {
        if !is_secret(token) {
            return Ok(None);
        }
        let hash = sha256_hex(token.as_bytes());
        let now = self.now_ts();
        let key = self
            .inner
            .store
            .read(move |tx| tx.api_keys().by_hash(&hash))
            .await?;
        Ok(key.and_then(|k| active_principal(&k, &now)))
    }

    /// The id of the key whose secret `token` is, revoked or expired alike; `None` when it is
    /// no key's. For the log line of a refused request: an operator can tell a client still
    /// using a revoked key from someone guessing.
    pub async fn api_key_id_of(&self, token: &str) -> KernelResult<Option<String>> {
        if !is_secret(token) {
            return Ok(None);
        }
        let hash = sha256_hex(token.as_bytes());
        let key = self
            .inner
            .store
            .read(move |tx| tx.api_keys().by_hash(&hash))
            .await?;
        Ok(key.map(|k| k.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_have_their_shape_and_differ() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert!(is_secret(&a) && is_secret(&b));
        assert_ne!(a, b);
        assert!(!is_secret("rbk_"));
        assert!(!is_secret(&a.to_uppercase()));
        assert!(!is_secret(&a[..a.len() - 1]));
        assert!(!is_secret("admin-token"));
    }

    #[test]
    fn create_requests_are_validated() {
        let ok = CreateApiKeyRequest {
            name: "ci".into(),
            scopes: vec![Scope::ExecutionsRead],
            ..Default::default()
        };
        assert!(validate(&ok).is_ok());
        let bad = [
            CreateApiKeyRequest {
                name: String::new(),
                ..ok.clone()
            },
            CreateApiKeyRequest {
                scopes: vec![],
                ..ok.clone()
            },
            CreateApiKeyRequest {
                name: "x".repeat(MAX_IDENTITY_BYTES + 1),
                ..ok.clone()
            },
            CreateApiKeyRequest {
                subject: "a\nb".into(),
                ..ok.clone()
            },
            CreateApiKeyRequest {
                groups: vec!["g".into(); MAX_KEY_GROUPS + 1],
                ..ok.clone()
            },
            CreateApiKeyRequest {
                groups: vec![String::new()],
                ..ok.clone()
            },
            CreateApiKeyRequest {
                expires_in_seconds: Some(0),
                ..ok.clone()
            },
            CreateApiKeyRequest {
                expires_in_seconds: Some(MAX_KEY_LIFETIME_SECS + 1),
                ..ok.clone()
            },
        ];
        for req in bad {
            let err = validate(&req).unwrap_err();
            assert_eq!(
                err.code,
                crate::protocol::ErrorCode::ValidationError,
                "{req:?}"
            );
        }
    }
}
