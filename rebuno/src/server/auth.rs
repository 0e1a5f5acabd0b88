//! Who is calling: the bearer token of client routes (the server's admin token or an API key,
//! whose scopes each route checks) and the signed requests of agents, checked in an order that
//! makes a stranger cost the server nothing.
//!
//! An agent request is judged from its headers before a byte of its body is read: the agent id
//! names a known agent, `Rebuno-Signature` appears exactly once in an accepted form (`v1=` always,
//! `sha256=` only while legacy signing is on), a v1 request's `Rebuno-Timestamp` is a base-10
//! int64 within [`V1_WINDOW_SECS`] of the kernel's clock, and no signed header repeats or holds a
//! line break. Only then is the body read (size limit, deadlines) and the HMAC checked over the
//! raw bytes: for v1 together with the method, the raw request target (as the client sent it,
//! before any nesting stripped a prefix) and the lease headers. Every failure is `401`, with one
//! message for an unknown agent and a wrong signature.
//!
//! Headers that pass prove nothing yet (an agent id is no secret and anyone can make a
//! well-formed, fresh signature), so until the HMAC is checked a body is held under the
//! unverified-body budgets (`limits`): beyond its first 64 KiB, a body that would pass the
//! agent's or the server's budget is refused with `429`.
//!
//! A refused bearer token is logged and counted against the request's source address
//! (`throttle`), which blocks the address's bearer requests after too many. An unknown agent and
//! a wrong signature are logged, never counted: an agent's secret is a machine-made HMAC key no
//! one guesses online, and agents often share one address (a host, a NAT, a load balancer), so a
//! block there would let one misconfigured agent stop every agent's heartbeats.
//!
//! [`V1_WINDOW_SECS`]: crate::signing::V1_WINDOW_SECS

use super::AppState;
use super::body::read_body_counted;
use super::error::ApiError;
use super::peer::Peer;
use crate::kernel::KernelError;
use crate::protocol::{
    API_KEY_PREFIX, ErrorCode, HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID,
    HEADER_SIGNATURE, HEADER_TIMESTAMP, Principal, SIGNATURE_PREFIX, SIGNATURE_V1_PREFIX, Scope,
};
use crate::signing::{self, V1Request};
use axum::body::{Body, Bytes};
use axum::extract::OriginalUri;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

/// The answer for an unknown agent and for a signature that does not verify: the same, so
/// agent ids cannot be told apart by it.
const INVALID_SIGNATURE: &str = "invalid agent signature";

/// Who a client request is: the admin when its bearer token is the server's token, the key's
/// principal when it is an API key's secret (neither revoked nor expired), else `401`. The
/// server token is compared whole, in constant time (exact match: the Go kernel's
/// case-insensitive compare is not copied). With no token configured (dev mode) a request
/// without a valid key is the admin.
pub(crate) async fn authenticate_client(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Principal, ApiError> {
    let presented = bearer_of(headers);
    if let (Some(expected), Some(token)) = (state.bearer.as_deref(), presented)
        && signing::constant_time_eq(token.as_bytes(), expected.as_bytes())
    {
        return Ok(Principal::admin());
    }
    if let Some(token) = presented
        && let Some(principal) = state.kernel.authenticate_api_key(token).await?
    {
        return Ok(principal);
    }
    match (&state.bearer, presented) {
        (None, _) => Ok(Principal::admin()),
        (Some(_), None) => Err(ApiError::unauthorized("missing bearer token")),
        (Some(_), Some(_)) => Err(ApiError::unauthorized("invalid bearer token")),
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// [`authenticate_client`] for a request that came from `peer`: a bearer token refused as
/// invalid is logged and counted against the address (`throttle`).
pub(crate) async fn authenticate_client_from(
    state: &AppState,
    headers: &HeaderMap,
    peer: Peer,
) -> Result<Principal, ApiError> {
    let answer = authenticate_client(state, headers).await;
    if let Err(e) = &answer
        && e.0.code == ErrorCode::Unauthorized
        && let Some(token) = bearer_of(headers)
    {
        note_refused_token(state, peer, token, "API request").await;
    }
    answer
}

/// Logs and counts a bearer token (or console login) refused as invalid: the source address
/// and, when the token is an API key's secret (revoked or expired), the key's id; never the
/// token.
pub(crate) async fn note_refused_token(state: &AppState, peer: Peer, token: &str, what: &str) {
    state.failures.record(peer);
    // A store failure here only leaves the id out of the log line.
    let key_id = state.kernel.api_key_id_of(token).await.ok().flatten();
    let credential = match &key_id {
        Some(_) => "a revoked or expired API key",
        None if token.starts_with(API_KEY_PREFIX) => "an unknown API key",
        None => "an invalid bearer token",
    };
    tracing::warn!(
        source = %peer,
        key_id = %key_id.as_deref().unwrap_or("none"),
        "{what} refused: {credential}"
    );
}

/// The answer to an agent request whose signature does not verify or names no agent, logged
/// with its source address and the agent id as claimed (cut to 128 characters); not counted
/// against the address (see the module docs).
fn refused_signature(peer: Peer, agent_id: &str) -> ApiError {
    let claimed: String = agent_id.chars().take(128).collect();
    tracing::warn!(
        source = %peer,
        agent_id = ?claimed,
        "agent request refused: the signature does not verify or names no agent"
    );
    ApiError::unauthorized(INVALID_SIGNATURE)
}

/// `403 forbidden` unless `principal` holds a scope that covers `needed`.
pub(crate) fn require(principal: &Principal, needed: Scope) -> Result<(), ApiError> {
    if principal.allows(needed) {
        Ok(())
    } else {
        Err(ApiError(KernelError::forbidden(format!(
            "this API key lacks scope {needed}"
        ))))
    }
}

/// Whether a request takes the HMAC path of a bearer-or-HMAC route: either agent header is
/// present and non-empty.
pub(crate) fn has_agent_headers(headers: &HeaderMap) -> bool {
    [HEADER_AGENT_ID, HEADER_SIGNATURE]
        .iter()
        .any(|name| headers.get(*name).is_some_and(|v| !v.is_empty()))
}

/// The value of a signed header: `None` when absent, `401` when repeated, not visible ASCII or
/// holding a line break (the signed message separates its fields with LF).
fn signed_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::unauthorized(format!("repeated {name}")));
    }
    match value.to_str() {
        Ok(v) if !v.contains(['\r', '\n']) => Ok(Some(v)),
        _ => Err(ApiError::unauthorized(format!("malformed {name}"))),
    }
}

/// An accepted form of `Rebuno-Signature`: the prefix and 64 lowercase hex digits.
fn has_form(signature: &str, prefix: &str) -> bool {
    signature.strip_prefix(prefix).is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// How a request is signed, as its headers say.
enum Scheme<'a> {
    /// `v1=`: the request signature, with its timestamp (already checked fresh).
    V1 { timestamp: &'a str },
    /// `sha256=`: the body alone (SDK 0.14 to 0.16; legacy signing is on).
    Body,
}

/// An agent request whose headers passed every check that needs no body.
struct Claim<'a> {
    agent_id: &'a str,
    secret: String,
    signature: &'a str,
    scheme: Scheme<'a>,
    dispatch_id: &'a str,
    dispatch_attempt: &'a str,
}

/// The header checks of an agent request, the agent's secret looked up last (the one check
/// that touches the store).
async fn check_headers<'a>(
    state: &AppState,
    headers: &'a HeaderMap,
    peer: Peer,
) -> Result<Claim<'a>, ApiError> {
    let agent_id = signed_header(headers, HEADER_AGENT_ID)?.filter(|v| !v.is_empty());
    let signature = signed_header(headers, HEADER_SIGNATURE)?.filter(|v| !v.is_empty());
    let (Some(agent_id), Some(signature)) = (agent_id, signature) else {
        return Err(ApiError::unauthorized(format!(
            "missing {HEADER_AGENT_ID} or {HEADER_SIGNATURE}"
        )));
    };
    let dispatch_id = signed_header(headers, HEADER_DISPATCH_ID)?.unwrap_or_default();
    let dispatch_attempt = signed_header(headers, HEADER_DISPATCH_ATTEMPT)?.unwrap_or_default();
    let scheme = if has_form(signature, SIGNATURE_V1_PREFIX) {
        let timestamp = signed_header(headers, HEADER_TIMESTAMP)?
            .ok_or_else(|| ApiError::unauthorized(format!("missing {HEADER_TIMESTAMP}")))?;
        let ts = signing::parse_timestamp(timestamp)
            .ok_or_else(|| ApiError::unauthorized(format!("malformed {HEADER_TIMESTAMP}")))?;
        let now = crate::time::micros(state.kernel.now()).div_euclid(1_000_000);
        if !signing::timestamp_is_fresh(ts, now) {
            return Err(ApiError::unauthorized(format!(
                "{HEADER_TIMESTAMP} is more than {} s away from the kernel's clock",
                signing::V1_WINDOW_SECS
            )));
        }
        Scheme::V1 { timestamp }
    } else if has_form(signature, SIGNATURE_PREFIX) {
        if !state.legacy_signatures {
            return Err(ApiError::unauthorized(format!(
                "{SIGNATURE_PREFIX} signatures are not accepted (legacy signing is off): sign \
                 requests {SIGNATURE_V1_PREFIX}"
            )));
        }
        Scheme::Body
    } else {
        return Err(ApiError::unauthorized(format!(
            "malformed {HEADER_SIGNATURE}"
        )));
    };
    let secret = state
        .kernel
        .agent_secret(agent_id)
        .await?
        .ok_or_else(|| refused_signature(peer, agent_id))?;
    Ok(Claim {
        agent_id,
        secret,
        signature,
        scheme,
        dispatch_id,
        dispatch_attempt,
    })
}

/// The request target as the client sent it (path and `?query`, escapes untouched), from the
/// outermost router's view of the URI when the router is nested.
fn raw_target(parts: &Parts) -> &str {
    let uri = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |original| &original.0);
    uri.path_and_query().map_or("/", |pq| pq.as_str())
}

/// Authenticates an agent request (see the module docs) and returns the agent id and the body.
pub(crate) async fn authenticate_agent(
    state: &AppState,
    parts: &Parts,
    body: Body,
) -> Result<(String, Bytes), ApiError> {
    let peer = Peer::of(parts);
    let claim = check_headers(state, &parts.headers, peer).await?;
    let mut unverified = state.unverified.reserve(claim.agent_id);
    let bytes = read_body_counted(body, state.body_limits, |held| unverified.cover(held)).await?;
    let valid = match claim.scheme {
        Scheme::V1 { timestamp } => V1Request {
            method: parts.method.as_str(),
            target: raw_target(parts),
            timestamp,
            dispatch_id: claim.dispatch_id,
            dispatch_attempt: claim.dispatch_attempt,
            body: &bytes,
        }
        .verify(&claim.secret, claim.signature),
        Scheme::Body => signing::verify(&claim.secret, &bytes, claim.signature),
    };
    // Checked either way: what the body holds from here is the agent's, or nobody's.
    drop(unverified);
    if !valid {
        return Err(refused_signature(peer, claim.agent_id));
    }
    Ok((claim.agent_id.to_owned(), bytes))
}
