//! One handler per `/v0` route. Each authenticates first (see `extract`), parses the
//! rest of the request, checks what the caller may touch and calls one [`Kernel`] method.
//!
//! Every listing answers one bounded page (see [`crate::kernel::ARRAY_MAX_LIMIT`] and its
//! siblings, and [`crate::store::PAGE_MAX_BYTES`]) in the body the protocol defines, and, when
//! more follows, the [`HEADER_NEXT_CURSOR`] header with the cursor to continue from. `limit`
//! chooses the page size (absent, zero or negative: the default; above the maximum: the
//! maximum).
//!
//! [`Kernel`]: crate::Kernel

use super::AppState;
use super::error::{ApiError, json_response};
use super::extract::{
    AgentCall, AgentsRead, AgentsWrite, ApprovalsRead, ApprovalsWrite, Client, CreateCall, Creator,
    ExecutionsRead, ExecutionsWrite, JsonBody, NamePath, PoliciesRead, PoliciesWrite, QueryPairs,
    ReadCall, Reader, UuidPath, uuid_param,
};
use super::limits::{HeldStream, ServedStreams};
use crate::kernel::{WebhookRules, check_webhook_url, redact_webhook_url};
use crate::protocol::{
    Agent, AgentMetadata, Checkpoints, CompleteExecutionRequest, CompleteStepRequest,
    CreateExecutionRequest, DecideApprovalRequest, Execution, FailExecutionRequest,
    FailStepRequest, ForkExecutionRequest, HEADER_NEXT_CURSOR, HealthStatus, Lease,
    PolicyTestRequest, Principal, RegisterAgentRequest, Scope, SetPolicyRequest,
    StreamDeltaRequest, StreamFrame, SubmitStepRequest, canonical_uuid,
};
use crate::store::ExecutionQuery;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

pub(super) type ApiResult = Result<Response, ApiError>;

/// How long `/v0/ready` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub(super) fn ok<T: Serialize + ?Sized>(body: &T) -> Response {
    json_response(StatusCode::OK, body)
}

pub(super) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// A page of a listing: `body`, and the next page's cursor in [`HEADER_NEXT_CURSOR`].
pub(super) fn paged<T: Serialize + ?Sized>(body: &T, next: Option<&str>) -> Response {
    let mut response = ok(body);
    if let Some(next) = next
        && let Ok(value) = HeaderValue::from_str(&crate::paging::encode_cursor(next))
        && let Ok(name) = HeaderName::from_bytes(HEADER_NEXT_CURSOR.as_bytes())
    {
        response.headers_mut().insert(name, value);
    }
    response
}

/// The `limit` parameter: absent, zero or negative means the default (0); a non-integer is
/// `400`; the kernel caps the rest.
pub(super) fn limit_param(query: &QueryPairs) -> Result<usize, ApiError> {
    match query.get("limit") {
        None => Ok(0),
        Some(raw) => {
            let n: i64 = raw
                .parse()
                .map_err(|_| ApiError::validation(format!("invalid limit {raw:?}")))?;
            Ok(usize::try_from(n).unwrap_or(0))
        }
    }
}

/// The `after` cursor parameter (empty means absent).
pub(super) fn after_param(query: &QueryPairs) -> Option<&str> {
    query.get("after").filter(|a| !a.is_empty())
}

/// Interval of the SSE keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

impl AppState {
    /// The execution `id`, if `agent_id` owns it.
    ///
    /// Another agent's execution answers `404 not_found`, exactly as an unknown id does, and
    /// not `403`: to an agent only its own executions exist, so its answers never reveal
    /// whether some other agent's execution id is real. The read routes use the same rule,
    /// which closes the Go kernel's gap that lets any agent read every execution.
    async fn owned_execution(&self, agent_id: &str, id: &str) -> Result<Execution, ApiError> {
        self.check_owner(agent_id, id).await?;
        Ok(self.kernel.execution(id).await?)
    }

    /// [`AppState::owned_execution`] without loading the execution (the agent's hot paths).
    pub(super) async fn check_owner(&self, agent_id: &str, id: &str) -> Result<(), ApiError> {
        if self.kernel.execution_owner(id).await? == agent_id {
            Ok(())
        } else {
            Err(ApiError::not_found())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Executions (client side).
// ---------------------------------------------------------------------------------------------

/// `POST /v0/executions` (201; 200 with the execution a repeated idempotency key, or
/// the spawning step of a repeated subagent create, names). A client with `executions:write`
/// creates any execution (a subagent only as the admin or with a key bound to the parent's
/// agent); an agent's signed request, under the parent's lease, creates only a subagent of a
/// step of its own execution (see `kernel::subagents`).
pub(super) async fn create_execution(State(s): State<AppState>, call: CreateCall) -> ApiResult {
    let req: CreateExecutionRequest = call.json()?;
    // `201` for a new execution; `200` for the one a repeated idempotency key names.
    let started = match call.creator {
        Creator::Client(principal) => s.kernel.start_execution(req, &principal).await?,
        Creator::Agent { agent_id, lease } => {
            s.kernel
                .start_child_as_agent(req, &agent_id, &lease)
                .await?
        }
    };
    let status = if started.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, &started.execution))
}

/// `GET /v0/executions?agent_id&status&session&spawned_by&forked_from&cursor&limit`: the page's `next_cursor` is also
/// in [`HEADER_NEXT_CURSOR`].
pub(super) async fn list_executions(
    State(s): State<AppState>,
    _: Client<ExecutionsRead>,
    query: QueryPairs,
) -> ApiResult {
    let cursor = match query.get("cursor") {
        None => None,
        Some(raw) => Some(
            canonical_uuid(raw)
                .ok_or_else(|| ApiError::validation(format!("invalid cursor {raw:?}")))?,
        ),
    };
    let spawned_by = match query.get("spawned_by") {
        None => None,
        Some(raw) => Some(uuid_param(raw, "spawned_by")?),
    };
    let forked_from = match query.get("forked_from") {
        None => None,
        Some(raw) => Some(uuid_param(raw, "forked_from")?),
    };
    let limit = limit_param(&query)?;
    let list = s
        .kernel
        .list_executions_matching(ExecutionQuery {
            agent_id: query.get("agent_id").map(str::to_owned),
            status: query.get("status").map(str::to_owned),
            session: query.get("session").map(str::to_owned),
            spawned_by,
            forked_from,
            before_id: cursor,
            limit,
        })
        .await?;
    Ok(paged(&list, list.next_cursor.as_deref()))
}

/// `GET /v0/executions/{id}/previous` (bearer, or the owning agent's HMAC; SDK 0.22 and
/// later): `{"state": …}`, the state the session's previous turn completed with (`null` for
/// none; see [`crate::Kernel::previous_state`]).
pub(super) async fn previous(State(s): State<AppState>, mut call: ReadCall) -> ApiResult {
    let raw: String = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    if let Reader::Agent(agent_id) = &call.reader {
        s.check_owner(agent_id, &id).await?;
    }
    let state = s.kernel.previous_state(&id).await?;
    Ok(ok(&serde_json::json!({ "state": state })))
}

/// `GET /v0/executions/{id}` (bearer, or the owning agent's HMAC). A client reading an
/// execution whose delivery failed and waits for a retry also gets `dispatch`
/// ([`DispatchWaiting`](crate::protocol::DispatchWaiting)): the agent is down or refuses it.
pub(super) async fn get_execution(State(s): State<AppState>, mut call: ReadCall) -> ApiResult {
    let raw: String = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    let exec = match &call.reader {
        Reader::Client => s.kernel.execution(&id).await?,
        // The agent's own read stays as the SDKs know it.
        Reader::Agent(agent_id) => return Ok(ok(&s.owned_execution(agent_id, &id).await?)),
    };
    let waiting = if exec.status.is_terminal() {
        None
    } else {
        s.kernel.dispatch_waiting(&id).await?
    };
    match waiting {
        Some(waiting) => {
            let mut body = serde_json::to_value(&exec).unwrap_or_default();
            body["dispatch"] = serde_json::to_value(waiting).unwrap_or_default();
            Ok(ok(&body))
        }
        None => Ok(ok(&exec)),
    }
}

/// `GET /v0/executions/{id}/events?after_seq&limit`. Unparsable numbers count as 0
/// (from the start; the default page); an unknown execution has no events. When more events
/// follow, [`HEADER_NEXT_CURSOR`] holds the `after_seq` of the next page.
pub(super) async fn events(
    State(s): State<AppState>,
    _: Client<ExecutionsRead>,
    UuidPath(id): UuidPath,
    query: QueryPairs,
) -> ApiResult {
    let number = |name: &str| {
        query
            .get(name)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
            .max(0)
    };
    let after_seq = u64::try_from(number("after_seq")).unwrap_or(0);
    let limit = usize::try_from(number("limit")).unwrap_or(0);
    let page = s.kernel.events_page(&id, after_seq, limit).await?;
    Ok(paged(&page.items, page.next.as_deref()))
}

/// `GET /v0/executions/{id}/head`: the latest signed head of the execution's event log, a
/// JSON object as `rebuno verify --witness` and `receipt verify --witness` read it (stream,
/// length, head, at, key_id, signature). `404` for an unknown execution, and for one whose log
/// has no signed head (the kernel has no signing key, or the log is empty).
pub(super) async fn head(
    State(s): State<AppState>,
    _: Client<ExecutionsRead>,
    UuidPath(id): UuidPath,
) -> ApiResult {
    match s.kernel.execution_head(&id).await? {
        Some(head) => Ok(ok(&head)),
        None => Err(crate::kernel::KernelError::new(
            crate::protocol::ErrorCode::NotFound,
            format!(
                "execution {id} has no signed head: its log is empty, or the kernel signs \
                 nothing (set REBUNO_SIGNING_KEY to a key file from `rebuno keygen`)"
            ),
        )
        .into()),
    }
}

/// `GET /v0/executions/{id}/stream` (bearer): Server-Sent Events, one
/// `data: {"step_id","seq","data"}` frame per delta and a `: keep-alive` comment every 15 s.
/// Nothing is replayed: a subscriber sees only deltas sent after it subscribed. Unlike the Go kernel, an unknown execution is `404`, and
/// subscribers over the kernel's caps are `429`; the subscription ends when the client
/// disconnects (the response body, which owns it, is dropped).
pub(super) async fn stream_subscribe(
    State(s): State<AppState>,
    Client(principal, _): Client<ExecutionsRead>,
    served: ServedStreams,
    UuidPath(id): UuidPath,
) -> ApiResult {
    stream_response(&s, &principal, &served, &id).await
}

/// The Server-Sent Events answer of execution `id`'s live stream (the `/stream` route's, and
/// the console's), for `principal`: `429` when it or the server holds as many long-lived
/// responses as allowed (`limits`), checked before the subscription.
pub(super) async fn stream_response(
    s: &AppState,
    principal: &Principal,
    served: &ServedStreams,
    id: &str,
) -> ApiResult {
    use axum::response::sse::Event;
    use tokio_stream::StreamExt;
    let slot = s.streams.take(principal, served.0.as_ref())?;
    let events = s.kernel.subscribe(id).await?.map(|frame| {
        Ok::<Event, std::convert::Infallible>(
            Event::default().data(serde_json::to_string(&frame).unwrap_or_default()),
        )
    });
    Ok(sse_response(HeldStream::new(events, slot)))
}

/// `events` as a Server-Sent Events answer with a keep-alive comment every 15 s, never cached.
fn sse_response(
    events: impl tokio_stream::Stream<
        Item = Result<axum::response::sse::Event, std::convert::Infallible>,
    > + Send
    + 'static,
) -> Response {
    use axum::response::sse::{KeepAlive, Sse};
    let sse =
        Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text(" keep-alive"));
    let mut response = sse.into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /v0/changes` (bearer, `executions:read`): Server-Sent Events, one
/// `data: {"execution_id": "<id>"}` frame after each commit that changes an execution's status
/// (it started, blocked, resumed or ended), `data: {"resync": true}` when this subscriber fell
/// more than [`crate::kernel::CHANGE_FEED_BUFFER`] notifications behind (some were dropped:
/// read again whatever you wait on), and a `: keep-alive` comment every 15 s. The subscription
/// is taken before the answer's head is sent, so a client that reads after the head misses
/// nothing. Feeds over the kernel's cap (`REBUNO_STREAM_SUBSCRIBERS`) or the server's (per API
/// key and in total, see `limits`) are `429`. Not part of the Go kernel's protocol: the Rust
/// [`crate::client::Client`] holds one feed for all its waits.
pub(super) async fn changes(
    State(s): State<AppState>,
    Client(principal, _): Client<ExecutionsRead>,
    served: ServedStreams,
) -> ApiResult {
    changes_response(&s, &principal, &served)
}

/// The Server-Sent Events answer of the change feed (`GET /v0/changes`, and the console's), for
/// `principal`: `429` as for [`stream_response`].
pub(super) fn changes_response(
    s: &AppState,
    principal: &Principal,
    served: &ServedStreams,
) -> ApiResult {
    use crate::kernel::Change;
    use axum::response::sse::Event;
    use tokio_stream::StreamExt;
    let slot = s.streams.take(principal, served.0.as_ref())?;
    let events = s.kernel.change_feed()?.map(|change| {
        let data = match change {
            Change::Changed(id) => serde_json::json!({ "execution_id": &*id }),
            Change::Resync => serde_json::json!({ "resync": true }),
        };
        Ok::<Event, std::convert::Infallible>(Event::default().data(data.to_string()))
    });
    Ok(sse_response(HeldStream::new(events, slot)))
}

/// `POST /v0/executions/{id}/cancel` (204; `409 execution_terminal`).
pub(super) async fn cancel(
    State(s): State<AppState>,
    _: Client<ExecutionsWrite>,
    UuidPath(id): UuidPath,
) -> ApiResult {
    s.kernel.cancel(&id).await?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/fork {at_seq, session?, policy_bundle?}` (201 with the new
/// execution; `404` unknown; `400` for a bad `at_seq`, session or bundle; `403` for a bundle
/// from a key without `policies:write`): see [`crate::Kernel::fork`].
pub(super) async fn fork(
    State(s): State<AppState>,
    Client(principal, _): Client<ExecutionsWrite>,
    UuidPath(id): UuidPath,
    JsonBody(req): JsonBody<ForkExecutionRequest>,
) -> ApiResult {
    let fork = s.kernel.fork(&id, req, &principal).await?;
    Ok(json_response(StatusCode::CREATED, &fork))
}

/// `GET /v0/executions/{id}/steps[?status=terminal][&limit][&after]` (bearer, or the
/// owning agent): a JSON array of steps by step id, as the protocol has it, one page at a time.
/// `after` is the step id the page starts after; when more steps follow,
/// [`HEADER_NEXT_CURSOR`] holds the next page's `after`. A client that does not page gets the
/// first [`crate::kernel::ARRAY_DEFAULT_LIMIT`] steps.
pub(super) async fn list_steps(State(s): State<AppState>, mut call: ReadCall) -> ApiResult {
    let raw: String = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    let query = call.query()?;
    let terminal_only = query.get("status") == Some("terminal");
    let limit = limit_param(&query)?;
    if let Reader::Agent(agent_id) = &call.reader {
        s.check_owner(agent_id, &id).await?;
    }
    let page = s
        .kernel
        .steps_page(&id, terminal_only, after_param(&query), limit)
        .await?;
    Ok(paged(&page.items, page.next.as_deref()))
}

/// `GET /v0/executions/{id}/steps/{step_id}` (bearer, or the owning agent). Unlike the
/// Go kernel, the path's execution id is not ignored: a step of another execution is `404`.
pub(super) async fn get_step(State(s): State<AppState>, mut call: ReadCall) -> ApiResult {
    let (raw, step_id): (String, String) = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    if let Reader::Agent(agent_id) = &call.reader {
        s.check_owner(agent_id, &id).await?;
    }
    Ok(ok(&s.kernel.step(&id, &step_id).await?))
}

// ---------------------------------------------------------------------------------------------
// Agent routes: HMAC, lease headers, own executions only.
// ---------------------------------------------------------------------------------------------

/// The execution id of an agent route with one path parameter.
async fn agent_exec_id(call: &mut AgentCall) -> Result<String, ApiError> {
    let raw: String = call.path().await?;
    uuid_param(&raw, "execution id")
}

/// The execution and step ids of an agent step route.
async fn agent_step_ids(call: &mut AgentCall) -> Result<(String, String), ApiError> {
    let (raw, step_id): (String, String) = call.path().await?;
    Ok((uuid_param(&raw, "execution id")?, step_id))
}

/// The execution and step ids, lease and body of a step outcome route (complete, fail), the
/// execution checked to be the calling agent's.
async fn step_outcome<R: DeserializeOwned>(
    s: &AppState,
    call: &mut AgentCall,
) -> Result<(String, String, Lease, R), ApiError> {
    let (id, step_id) = agent_step_ids(call).await?;
    let lease = call.lease()?;
    let req: R = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    Ok((id, step_id, lease, req))
}

/// `POST /v0/executions/{id}/steps` (200 decision).
pub(super) async fn submit_step(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let id = agent_exec_id(&mut call).await?;
    let lease = call.lease()?;
    let req: SubmitStepRequest = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    let decision = s.kernel.submit_step(&id, &lease, req).await?;
    Ok(ok(&decision))
}

/// `POST /v0/executions/{id}/steps/{step_id}/complete`.
pub(super) async fn complete_step(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let (id, step_id, lease, req) = step_outcome::<CompleteStepRequest>(&s, &mut call).await?;
    let checkpoints = Checkpoints {
        captures: req.captures,
        capture_failures: req.capture_failures,
    };
    let decision = s
        .kernel
        .complete_step_with(&id, &step_id, &lease, req.result, checkpoints)
        .await?;
    Ok(ok(&decision))
}

/// `POST /v0/executions/{id}/steps/{step_id}/fail`.
pub(super) async fn fail_step(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let (id, step_id, lease, req) = step_outcome::<FailStepRequest>(&s, &mut call).await?;
    let checkpoints = Checkpoints {
        captures: req.captures,
        capture_failures: req.capture_failures,
    };
    let decision = s
        .kernel
        .fail_step_with(&id, &step_id, &lease, req.error, checkpoints)
        .await?;
    Ok(ok(&decision))
}

/// `POST /v0/executions/{id}/steps/{step_id}/stream` (HMAC, 204): publishes a live
/// delta, best effort. `data` over 7,000 bytes is `400`. Lease headers are optional (SDK 0.14
/// sends none); when present they must still own the dispatch (`409`), as later SDKs expect.
pub(super) async fn stream_publish(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let (id, step_id) = agent_step_ids(&mut call).await?;
    let req: StreamDeltaRequest = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    if call.has_lease() {
        s.kernel.heartbeat(&id, &call.lease()?).await?;
    }
    s.kernel.publish(
        &id,
        StreamFrame {
            step_id,
            seq: req.seq,
            data: req.data,
        },
    )?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/heartbeat` (204; `409 lease_superseded`). The body is
/// ignored (it is signed, normally as the empty string).
pub(super) async fn heartbeat(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let id = agent_exec_id(&mut call).await?;
    let lease = call.lease()?;
    s.check_owner(&call.agent_id, &id).await?;
    s.kernel.heartbeat(&id, &lease).await?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/suspend` (SDK 0.25 and later; lease): `{"suspended": bool}`, whether
/// the execution now waits for its subagents (see [`crate::Kernel::suspend`]). The body is
/// ignored, as heartbeat's.
pub(super) async fn suspend(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let id = agent_exec_id(&mut call).await?;
    let lease = call.lease()?;
    s.check_owner(&call.agent_id, &id).await?;
    let suspended = s.kernel.suspend(&id, &lease).await?;
    Ok(ok(&serde_json::json!({ "suspended": suspended })))
}

/// `POST /v0/executions/{id}/complete` (204). An output with a number the kernel
/// cannot record (an integer beyond 64 bits) is refused (`400`) and fails the execution with
/// that message: the SDKs do not fail an execution whose completion is refused, and every
/// re-delivery would run the handler to the same output again, so it would never end.
pub(super) async fn complete_execution(
    State(s): State<AppState>,
    mut call: AgentCall,
) -> ApiResult {
    let id = agent_exec_id(&mut call).await?;
    let lease = call.lease()?;
    let req: CompleteExecutionRequest = match call.json() {
        Ok(req) => req,
        Err(refused) if !call.numbers_recordable() => {
            s.check_owner(&call.agent_id, &id).await?;
            let why = &refused.0.message;
            let why = why.strip_prefix("validation error: ").unwrap_or(why);
            let reason = format!("the output could not be recorded: {why}");
            s.kernel.fail_execution(&id, &lease, reason).await?;
            return Err(refused);
        }
        Err(e) => return Err(e),
    };
    s.check_owner(&call.agent_id, &id).await?;
    s.kernel.complete_execution_with(&id, &lease, req).await?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/fail` (204).
pub(super) async fn fail_execution(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let id = agent_exec_id(&mut call).await?;
    let lease = call.lease()?;
    let req: FailExecutionRequest = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    s.kernel.fail_execution(&id, &lease, req.error).await?;
    Ok(no_content())
}

// ---------------------------------------------------------------------------------------------
// Agents and policies (admin).
// ---------------------------------------------------------------------------------------------

/// `POST /v0/agents` (201; the secret is never echoed). The webhook URL must be `http`
/// or `https`, without user information unless the server allows it, and never the in-process
/// scheme (`400`, see [`check_webhook_url`]). Replacing another webhook URL or secret of a
/// registered agent needs `"takeover": true` or the admin (`409 conflict` otherwise; see
/// [`crate::Kernel::register_agent`]); the same registration again is idempotent.
pub(super) async fn register_agent(
    State(s): State<AppState>,
    Client(principal, _): Client<AgentsWrite>,
    JsonBody(mut req): JsonBody<RegisterAgentRequest>,
) -> ApiResult {
    let rules = WebhookRules {
        allow_userinfo: s.allow_webhook_userinfo,
        allow_embedded: false,
    };
    check_webhook_url(&req.webhook_url, rules).map_err(crate::kernel::KernelError::validation)?;
    if principal.allows(Scope::Admin) {
        req.takeover = true;
    }
    let agent = s.kernel.register_agent(req).await?;
    Ok(json_response(StatusCode::CREATED, &agent))
}

/// An agent as `principal` may read it: a reader without `agents:write` (who could not have
/// registered it) sees its webhook URL without user information or query values.
fn agent_for(principal: &Principal, mut agent: Agent) -> Agent {
    if !principal.allows(Scope::AgentsWrite) {
        agent.webhook_url = redact_webhook_url(&agent.webhook_url);
    }
    agent
}

/// `GET /v0/agents[?limit][&after]` (by id, secrets blanked, webhook credentials
/// redacted for readers without `agents:write`), one page at a time: `after` is the agent id
/// the page starts after, paged like the steps listing.
pub(super) async fn list_agents(
    State(s): State<AppState>,
    Client(principal, _): Client<AgentsRead>,
    query: QueryPairs,
) -> ApiResult {
    let limit = limit_param(&query)?;
    let page = s.kernel.agents_page(after_param(&query), limit).await?;
    let items: Vec<Agent> = page
        .items
        .into_iter()
        .map(|a| agent_for(&principal, a))
        .collect();
    Ok(paged(&items, page.next.as_deref()))
}

/// `GET /v0/agents/{id}` (as the listing shows it).
pub(super) async fn get_agent(
    State(s): State<AppState>,
    Client(principal, _): Client<AgentsRead>,
    NamePath(id): NamePath,
) -> ApiResult {
    Ok(ok(&agent_for(&principal, s.kernel.agent(&id).await?)))
}

/// `PUT /v0/agents/{id}/metadata` (HMAC, by the agent itself; 200 with the agent): what the
/// agent publishes about itself at start-up (Python SDK 0.28 and later, `#[rebuno::agent]`).
/// Another agent's id is `403 forbidden`.
pub(super) async fn put_agent_metadata(
    State(s): State<AppState>,
    mut call: AgentCall,
) -> ApiResult {
    let (id,): (String,) = call.path().await?;
    if id != call.agent_id {
        return Err(crate::kernel::KernelError::forbidden(
            "an agent publishes only its own metadata",
        )
        .into());
    }
    let metadata: AgentMetadata = call.json()?;
    Ok(ok(&s.kernel.set_agent_metadata(&id, metadata).await?))
}

/// `DELETE /v0/agents/{id}` (204; `409` while executions reference it).
pub(super) async fn delete_agent(
    State(s): State<AppState>,
    _: Client<AgentsWrite>,
    NamePath(id): NamePath,
) -> ApiResult {
    s.kernel.delete_agent(&id).await?;
    Ok(no_content())
}

/// `POST /v0/policies/{agent_id}` (204; the bundle is validated before the agent is
/// looked up).
pub(super) async fn set_policy(
    State(s): State<AppState>,
    _: Client<PoliciesWrite>,
    NamePath(agent_id): NamePath,
    JsonBody(req): JsonBody<SetPolicyRequest>,
) -> ApiResult {
    s.kernel.set_policy(&agent_id, &req.bundle).await?;
    Ok(no_content())
}

/// `POST /v0/policies/{agent_id}/test` (200): how the agent's bundle, or the body's, decides a
/// proposed step; nothing is recorded.
pub(super) async fn test_policy(
    State(s): State<AppState>,
    _: Client<PoliciesRead>,
    NamePath(agent_id): NamePath,
    JsonBody(req): JsonBody<PolicyTestRequest>,
) -> ApiResult {
    Ok(ok(&s.kernel.test_policy(&agent_id, req).await?))
}

// ---------------------------------------------------------------------------------------------
// Approvals.
// ---------------------------------------------------------------------------------------------

/// `GET /v0/approvals[?limit][&after]` (pending ones, oldest first; other parameters,
/// such as the `status=pending` SDKs send, are ignored), one page at a time: `after` is the
/// approval id the page starts after (`400` if there is no such approval), paged like the steps listing.
pub(super) async fn list_approvals(
    State(s): State<AppState>,
    _: Client<ApprovalsRead>,
    query: QueryPairs,
) -> ApiResult {
    let limit = limit_param(&query)?;
    let page = s
        .kernel
        .pending_approvals_page(after_param(&query), limit)
        .await?;
    Ok(paged(&page.items, page.next.as_deref()))
}

/// `GET /v0/approvals/{id}`.
pub(super) async fn get_approval(
    State(s): State<AppState>,
    _: Client<ApprovalsRead>,
    UuidPath(id): UuidPath,
) -> ApiResult {
    Ok(ok(&s.kernel.approval(&id).await?))
}

/// `POST /v0/approvals/{id}/grant` (204; 403, 404, 409).
pub(super) async fn grant(
    State(s): State<AppState>,
    Client(principal, _): Client<ApprovalsWrite>,
    UuidPath(id): UuidPath,
    JsonBody(req): JsonBody<DecideApprovalRequest>,
) -> ApiResult {
    s.kernel
        .grant_as(&id, &principal, &req.decided_by, &req.rationale)
        .await?;
    Ok(no_content())
}

/// `POST /v0/approvals/{id}/deny` (204; 403, 404, 409).
pub(super) async fn deny(
    State(s): State<AppState>,
    Client(principal, _): Client<ApprovalsWrite>,
    UuidPath(id): UuidPath,
    JsonBody(req): JsonBody<DecideApprovalRequest>,
) -> ApiResult {
    s.kernel
        .deny_as(&id, &principal, &req.decided_by, &req.rationale)
        .await?;
    Ok(no_content())
}

// ---------------------------------------------------------------------------------------------
// Probes and metrics (no authentication).
// ---------------------------------------------------------------------------------------------

/// `GET /v0/health`: the process answers.
pub(super) async fn health() -> Response {
    ok(&HealthStatus {
        status: "ok".to_owned(),
    })
}

/// `GET /v0/ready`: the store answers a ping within 2 s (200), or not (503).
pub(super) async fn ready(State(s): State<AppState>) -> Response {
    let store = s.kernel.store();
    let up = matches!(
        tokio::time::timeout(READY_TIMEOUT, store.ping()).await,
        Ok(Ok(()))
    );
    if up {
        ok(&HealthStatus {
            status: "ready".to_owned(),
        })
    } else {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &HealthStatus {
                status: "unavailable".to_owned(),
            },
        )
    }
}

/// `GET /metrics` in the Prometheus text format.
pub(super) async fn metrics(State(s): State<AppState>) -> Response {
    let mut text = super::metrics::render(&s.kernel).await;
    text.push_str(&super::metrics::edge(s.streams.open(), s.unverified.held()));
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(super::metrics::CONTENT_TYPE),
    );
    response
}
