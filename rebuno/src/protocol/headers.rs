//! Header names and size limits of the wire protocol, and the [`Lease`] the lease headers carry.
//!
//! Agent requests are authenticated by [`HEADER_AGENT_ID`] and [`HEADER_SIGNATURE`] (see
//! [`crate::signing`]); every agent mutation names the dispatch attempt it runs under with the
//! two lease headers, which the kernel checks against the dispatch it believes current.

/// Header naming the agent on HMAC-authenticated requests.
pub const HEADER_AGENT_ID: &str = "Rebuno-Agent-Id";
/// Header carrying the request's HMAC: `v1=<hex>` or `sha256=<hex>` on agent requests, and
/// `sha256=<hex>` (the body HMAC) on webhooks (see [`crate::signing`]).
pub const HEADER_SIGNATURE: &str = "Rebuno-Signature";
/// Header carrying a v1-signed agent request's Unix time in seconds (base 10).
pub const HEADER_TIMESTAMP: &str = "Rebuno-Timestamp";
/// Header the webhook carries with the execution id.
pub const HEADER_EXECUTION_ID: &str = "Rebuno-Execution-Id";
/// Lease header: the dispatch id, required on every agent mutation.
pub const HEADER_DISPATCH_ID: &str = "Rebuno-Dispatch-Id";
/// Lease header: the dispatch attempt, a base-10 integer > 0, required on every agent mutation.
pub const HEADER_DISPATCH_ATTEMPT: &str = "Rebuno-Dispatch-Attempt";
/// Prefix of the body-HMAC signature header value.
pub const SIGNATURE_PREFIX: &str = "sha256=";
/// Prefix of the v1 request signature header value.
pub const SIGNATURE_V1_PREFIX: &str = "v1=";

/// Largest accepted request body, in bytes (10 MiB).
pub const MAX_REQUEST_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Largest `data` of a stream delta, in UTF-8 bytes; more gives `400`.
pub const MAX_STREAM_DATA_BYTES: usize = 7000;

/// Response header of a paged listing that has a next page: the cursor to continue from (to be
/// sent as is, already percent-encoded, in the listing's cursor parameter). Absent on the last
/// page.
pub const HEADER_NEXT_CURSOR: &str = "Rebuno-Next-Cursor";

/// The `(dispatch_id, dispatch_attempt)` pair an agent mutation carries in
/// [`HEADER_DISPATCH_ID`] and [`HEADER_DISPATCH_ATTEMPT`]: the delivery attempt it runs under.
/// The kernel refuses a mutation whose lease no longer owns its dispatch (`409
/// lease_superseded`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The dispatch id (canonical UUID).
    pub dispatch_id: String,
    /// The attempt the agent was delivered.
    pub attempt: u32,
}
