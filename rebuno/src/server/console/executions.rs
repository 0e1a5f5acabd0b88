//! The executions pages: the list (status, agent and session filters, paging, live updates),
//! one execution (its links to sessions, forks, parents and children; its own policy bundle
//! and who set it; steps with their decisions and rules; approvals; the live output stream;
//! the event timeline), cancel, and the two feeds the script listens to
//! (`/ui/executions/{id}/stream`, `/ui/changes`), which answer the `/v0` feeds' events for a
//! session cookie.

use super::layout::{Nav, badge, csrf_field, empty, json_block, json_inline, time};
use super::{Failure, Html, Page, Viewer, check_mutation, html::encode};
use crate::kernel::LogIntegrity;
use crate::protocol::{
    Approval, DispatchWaiting, Event, EventType, Execution, ExecutionStatus, Scope, Step,
    canonical_uuid,
};
use crate::server::AppState;
use crate::server::handlers::{changes_response, stream_response};
use crate::server::limits::ServedStreams;
use crate::store::ExecutionQuery;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;
use std::collections::HashMap;

/// Executions per page of the list.
const LIST_PAGE: usize = 50;
/// Events per page of the timeline.
const EVENTS_PAGE: usize = 500;
/// At most this many events are read to find steps' decisions and the approvals.
const SCAN_EVENTS: usize = 5_000;
/// At most this many approvals are shown on an execution.
const MAX_APPROVALS: usize = 50;

/// The list's filters and cursor.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    session: String,
    #[serde(default)]
    cursor: String,
}

impl ListQuery {
    /// The query string of these filters (without the cursor), `&`-joined.
    fn filters(&self) -> String {
        [
            ("agent_id", &self.agent_id),
            ("status", &self.status),
            ("session", &self.session),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
    }
}

/// A canonical execution id from a path, or `400`.
fn execution_id(raw: &str) -> Result<String, Failure> {
    canonical_uuid(raw).ok_or_else(|| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid execution id {raw:?}"),
        )
    })
}

/// The console path of execution `id`.
pub(super) fn execution_href(id: &str) -> String {
    format!("/ui/executions/{}", encode(id))
}

/// A link to execution `id`, its text the id.
fn execution_link(h: &mut Html, id: &str) {
    h.el_text(
        "a",
        &[("href", Some(&execution_href(id))), ("class", Some("mono"))],
        id,
    );
}

/// `GET /ui/executions`.
pub(super) async fn list(
    State(s): State<AppState>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Page {
    viewer.require(Scope::ExecutionsRead)?;
    let status = match q.status.as_str() {
        "" => None,
        raw => Some(
            raw.parse::<ExecutionStatus>()
                .map_err(|_| Failure(StatusCode::BAD_REQUEST, format!("unknown status {raw:?}")))?
                .as_str()
                .to_owned(),
        ),
    };
    let cursor =
        match q.cursor.as_str() {
            "" => None,
            raw => Some(canonical_uuid(raw).ok_or_else(|| {
                Failure(StatusCode::BAD_REQUEST, format!("invalid cursor {raw:?}"))
            })?),
        };
    let nonempty = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    let list = s
        .kernel
        .list_executions_matching(ExecutionQuery {
            agent_id: nonempty(&q.agent_id),
            status,
            session: nonempty(&q.session),
            spawned_by: None,
            forked_from: None,
            before_id: cursor.clone(),
            limit: LIST_PAGE,
        })
        .await?;
    let mut body = Html::new();
    body.el_text("h1", &[], "Executions");
    filter_form(&mut body, &q);
    body.el(
        "div",
        &[
            ("id", Some("live-list")),
            ("data-changes", Some("/ui/changes")),
        ],
        |h| {
            if list.executions.is_empty() {
                let filtered = !q.filters().is_empty();
                empty(
                    h,
                    if filtered {
                        "No executions match these filters."
                    } else {
                        "No executions yet. Start one with the API or the rebuno console."
                    },
                );
            } else {
                executions_table(h, &list.executions);
            }
            h.el(
                "nav",
                &[("class", Some("pager")), ("aria-label", Some("pages"))],
                |h| {
                    let filters = q.filters();
                    if cursor.is_some() {
                        h.link(&format!("/ui/executions?{filters}"), "First page");
                    }
                    if let Some(next) = &list.next_cursor {
                        let sep = if filters.is_empty() { "" } else { "&" };
                        h.link(
                            &format!("/ui/executions?{filters}{sep}cursor={}", encode(next)),
                            "Next page",
                        );
                    }
                },
            );
        },
    );
    Ok(viewer.page("Executions", Nav::Executions, &body))
}

/// The filter form of the list (a `GET` form: it works without the script).
fn filter_form(h: &mut Html, q: &ListQuery) {
    h.el(
        "form",
        &[
            ("method", Some("get")),
            ("action", Some("/ui/executions")),
            ("class", Some("filters")),
        ],
        |h| {
            h.el("label", &[], |h| {
                h.text("Agent ");
                h.open(
                    "input",
                    &[("name", Some("agent_id")), ("value", Some(&q.agent_id))],
                );
            });
            h.el("label", &[], |h| {
                h.text("Status ");
                h.el("select", &[("name", Some("status"))], |h| {
                    h.el_text(
                        "option",
                        &[
                            ("value", Some("")),
                            ("selected", q.status.is_empty().then_some("")),
                        ],
                        "any",
                    );
                    for status in ExecutionStatus::ALL {
                        let selected = (q.status == status.as_str()).then_some("");
                        h.el_text(
                            "option",
                            &[("value", Some(status.as_str())), ("selected", selected)],
                            status.as_str(),
                        );
                    }
                });
            });
            h.el("label", &[], |h| {
                h.text("Session ");
                h.open(
                    "input",
                    &[("name", Some("session")), ("value", Some(&q.session))],
                );
            });
            h.el_text("button", &[("type", Some("submit"))], "Filter");
        },
    );
}

/// A table of executions.
fn executions_table(h: &mut Html, executions: &[Execution]) {
    h.el("div", &[("class", Some("scroll"))], |h| {
        h.el("table", &[], |h| {
            h.el("thead", &[], |h| {
                h.el("tr", &[], |h| {
                    for title in ["Execution", "Agent", "Status", "Created"] {
                        h.el_text("th", &[("scope", Some("col"))], title);
                    }
                    h.el_text(
                        "th",
                        &[("scope", Some("col")), ("class", Some("wide"))],
                        "Updated",
                    );
                });
            });
            h.el("tbody", &[], |h| {
                for e in executions {
                    h.el("tr", &[], |h| {
                        h.el("td", &[], |h| execution_link(h, &e.id));
                        h.el("td", &[], |h| {
                            h.link(&format!("/ui/agents/{}", encode(&e.agent_id)), &e.agent_id);
                        });
                        h.el("td", &[], |h| badge(h, e.status.as_str()));
                        h.el("td", &[], |h| time(h, &e.created_at));
                        h.el("td", &[("class", Some("wide"))], |h| time(h, &e.updated_at));
                    });
                }
            });
        });
    });
}

/// The timeline's page.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ShowQuery {
    #[serde(default)]
    after: u64,
}

/// What the event log says about each step: the decisions in order, each with its rule.
type Decisions = HashMap<String, Vec<(&'static str, String)>>;

/// The decisions recorded for each step, and the ids of the execution's approvals.
fn read_log(events: &[Event]) -> (Decisions, Vec<String>) {
    let mut decisions: Decisions = HashMap::new();
    let mut approvals = Vec::new();
    for e in events {
        let field = |name: &str| e.payload.get(name).and_then(|v| v.as_str()).unwrap_or("");
        let word = match e.event_type {
            EventType::StepAllowed => "allow",
            EventType::StepAwaitingApproval => "require approval",
            EventType::StepDenied => "deny",
            EventType::StepRateLimited => "rate limited",
            EventType::ApprovalRequested => {
                approvals.push(field("approval_id").to_owned());
                continue;
            }
            _ => continue,
        };
        decisions
            .entry(field("step_id").to_owned())
            .or_default()
            .push((word, field("rule_id").to_owned()));
    }
    (decisions, approvals)
}

/// `GET /ui/executions/{id}`.
pub(super) async fn show(
    State(s): State<AppState>,
    viewer: Viewer,
    Path(raw): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Page {
    viewer.require(Scope::ExecutionsRead)?;
    let id = execution_id(&raw)?;
    let exec = s.kernel.execution(&id).await?;
    let waiting = if exec.status.is_terminal() {
        None
    } else {
        s.kernel.dispatch_waiting(&id).await?
    };
    let mut log = Vec::new();
    while log.len() < SCAN_EVENTS {
        let after = log.last().map_or(0, |e: &Event| e.event_seq);
        let page = s.kernel.events_page(&id, after, 1000).await?;
        let done = page.next.is_none() || page.items.is_empty();
        log.extend(page.items);
        if done {
            break;
        }
    }
    let (decisions, approval_ids) = read_log(&log);
    let mut approvals = Vec::new();
    for approval_id in approval_ids.iter().take(MAX_APPROVALS) {
        if let Ok(a) = s.kernel.approval(approval_id).await {
            approvals.push(a);
        }
    }
    let steps = s.kernel.steps_page(&id, false, None, 0).await?;
    let children = s
        .kernel
        .list_executions_matching(ExecutionQuery {
            spawned_by: Some(id.clone()),
            limit: LIST_PAGE,
            ..ExecutionQuery::default()
        })
        .await?;
    let forks = s
        .kernel
        .list_executions_matching(ExecutionQuery {
            forked_from: Some(id.clone()),
            limit: LIST_PAGE,
            ..ExecutionQuery::default()
        })
        .await?;
    let timeline = s.kernel.events_page(&id, q.after, EVENTS_PAGE).await?;
    let integrity = s.kernel.log_integrity(&id).await?;

    let mut body = Html::new();
    body.el("h1", &[], |h| {
        h.text("Execution ");
        h.el_text("span", &[("class", Some("mono"))], &exec.id);
    });
    if !exec.status.is_terminal() {
        body.el("section", &[("id", Some("output-section"))], |h| {
            h.el_text("h2", &[], "Live output");
            h.el_text(
                "pre",
                &[
                    ("id", Some("output")),
                    ("class", Some("output")),
                    (
                        "data-stream",
                        Some(&format!("{}/stream", execution_href(&id))),
                    ),
                    ("aria-live", Some("polite")),
                ],
                "",
            );
            h.el_text(
                "p",
                &[("class", Some("hint"))],
                "Output streamed by the running agent appears here (it is not stored).",
            );
        });
    }
    body.el(
        "div",
        &[
            ("id", Some("live")),
            ("data-execution", Some(&id)),
            ("data-changes", Some("/ui/changes")),
            ("data-terminal", exec.status.is_terminal().then_some("true")),
        ],
        |h| {
            if !exec.status.is_terminal() {
                cancel_form(h, &viewer, &id);
            }
            summary(
                h,
                &exec,
                &Related {
                    children: &children.executions,
                    forks: &forks.executions,
                    waiting: waiting.as_ref(),
                    integrity: &integrity,
                },
            );
            approvals_section(h, &approvals);
            steps_section(h, &steps.items, steps.next.is_some(), &decisions);
            timeline_section(h, &id, &timeline.items, q.after, timeline.next.as_deref());
        },
    );
    Ok(viewer.page(&format!("Execution {id}"), Nav::Executions, &body))
}

/// Whether the execution's log verifies, and how far it is signed.
fn integrity_text(h: &mut Html, integrity: &LogIntegrity) {
    match (&integrity.outcome, &integrity.key_id) {
        (Err(failure), _) => {
            h.el_text("strong", &[("class", Some("fails"))], "does not verify: ");
            h.text(&failure.to_string());
        }
        (Ok(coverage), None) => {
            h.text(&format!(
                "{} events, hash-linked and intact; this kernel signs nothing \
             (set REBUNO_SIGNING_KEY to sign and check its heads)",
                coverage.length
            ));
        }
        (Ok(coverage), Some(key)) => {
            h.text(&format!("verifies: {coverage}; key {key}"));
        }
    }
}

/// The form that cancels execution `id`.
fn cancel_form(h: &mut Html, viewer: &Viewer, id: &str) {
    h.el(
        "form",
        &[
            ("method", Some("post")),
            ("action", Some(&format!("{}/cancel", execution_href(id)))),
            ("class", Some("inline")),
        ],
        |h| {
            csrf_field(h, viewer);
            h.el_text(
                "button",
                &[("type", Some("submit")), ("class", Some("danger"))],
                "Cancel execution",
            );
        },
    );
}

/// The execution's fields and links.
/// The linked executions an execution's summary lists: the subagents it spawned and its forks.
struct Related<'a> {
    children: &'a [Execution],
    forks: &'a [Execution],
    /// The delivery waiting for a retry, if it failed.
    waiting: Option<&'a DispatchWaiting>,
    /// Whether the event log verifies.
    integrity: &'a LogIntegrity,
}

/// A list of `executions`, each linked, with its status.
fn execution_list(h: &mut Html, executions: &[Execution]) {
    h.el("ul", &[("class", Some("plain"))], |h| {
        for c in executions {
            h.el("li", &[], |h| {
                execution_link(h, &c.id);
                h.text(" ");
                badge(h, c.status.as_str());
            });
        }
    });
}

fn summary(h: &mut Html, exec: &Execution, related: &Related<'_>) {
    h.el("dl", &[("class", Some("fields"))], |h| {
        let row = |h: &mut Html, term: &str, value: &dyn Fn(&mut Html)| {
            h.el_text("dt", &[], term);
            h.el("dd", &[], value);
        };
        row(h, "Status", &|h| badge(h, exec.status.as_str()));
        if let Some(w) = related.waiting {
            row(h, "Waiting for agent", &|h| {
                h.text(&format!(
                    "delivery attempt {} failed: {}; next try ",
                    w.attempt, w.last_error
                ));
                time(h, &w.next_attempt_at);
            });
        }
        row(h, "Agent", &|h| {
            h.link(
                &format!("/ui/agents/{}", encode(&exec.agent_id)),
                &exec.agent_id,
            );
        });
        row(h, "Event log", &|h| integrity_text(h, related.integrity));
        row(h, "Created", &|h| time(h, &exec.created_at));
        row(h, "Updated", &|h| time(h, &exec.updated_at));
        if let Some(deadline) = &exec.deadline_at {
            row(h, "Deadline", &|h| time(h, deadline));
        }
        if !exec.created_by.is_empty() {
            row(h, "Created by", &|h| {
                h.text(&exec.created_by);
            });
        }
        if !exec.session.is_empty() {
            row(h, "Session", &|h| {
                h.link(
                    &format!("/ui/executions?session={}", encode(&exec.session)),
                    &exec.session,
                );
            });
        }
        if !exec.parent_execution_id.is_empty() {
            row(h, "Continues", &|h| {
                execution_link(h, &exec.parent_execution_id)
            });
        }
        if !exec.forked_from.is_empty() {
            row(h, "Forked from", &|h| {
                execution_link(h, &exec.forked_from);
                h.text(&format!(" at event {}", exec.fork_seq));
            });
        }
        if let Some(spawned) = &exec.spawned_by {
            row(h, "Spawned by", &|h| {
                execution_link(h, &spawned.execution_id);
                h.text(" step ");
                h.el_text("span", &[("class", Some("mono"))], &spawned.step_id);
            });
        }
        if !exec.policy_bundle.is_empty() {
            // The execution's own bundle (a fork's): it narrows the agent's.
            row(h, "Policy bundle", &|h| {
                h.text("narrows the agent's; set by ");
                h.text(&exec.policy_bundle_set_by);
                h.el_text("pre", &[("class", Some("json"))], &exec.policy_bundle);
            });
        }
        if !related.children.is_empty() {
            row(h, "Subagents", &|h| execution_list(h, related.children));
        }
        if !related.forks.is_empty() {
            row(h, "Forks", &|h| execution_list(h, related.forks));
        }
        if !exec.failure_reason.is_empty() {
            row(h, "Failure", &|h| {
                h.text(&exec.failure_reason);
            });
        }
    });
    h.el_text("h2", &[], "Input");
    json_block(h, &exec.input);
    if let Some(output) = &exec.output {
        h.el_text("h2", &[], "Output");
        json_block(h, output);
    }
}

/// The execution's approvals, decided or not.
fn approvals_section(h: &mut Html, approvals: &[Approval]) {
    if approvals.is_empty() {
        return;
    }
    h.el("section", &[], |h| {
        h.el_text("h2", &[], "Approvals");
        for a in approvals {
            h.el("div", &[("class", Some("card"))], |h| {
                badge(h, a.status.as_str());
                h.text(" ");
                h.text(if a.message.is_empty() {
                    "(no message)"
                } else {
                    &a.message
                });
                h.el("p", &[("class", Some("meta"))], |h| {
                    if a.decided_by.is_empty() {
                        h.text("expires ");
                        time(h, &a.timeout_at);
                        h.text(" · ");
                        h.link("/ui/approvals", "decide in the inbox");
                    } else {
                        h.text("decided by ");
                        h.text(&a.decided_by);
                        if let Some(at) = &a.decided_at {
                            h.text(" ");
                            time(h, at);
                        }
                        if !a.rationale.is_empty() {
                            h.text(": ");
                            h.text(&a.rationale);
                        }
                    }
                });
            });
        }
    });
}

/// The steps table: kind, target, status, args, result or error, decisions and rules.
fn steps_section(h: &mut Html, steps: &[Step], more: bool, decisions: &Decisions) {
    h.el("section", &[], |h| {
        h.el_text("h2", &[], "Steps");
        if steps.is_empty() {
            empty(h, "No steps yet.");
            return;
        }
        h.el("div", &[("class", Some("scroll"))], |h| {
            h.el("table", &[("class", Some("steps"))], |h| {
                h.el("thead", &[], |h| {
                    h.el("tr", &[], |h| {
                        for t in ["Kind", "Target", "Status", "Decision (rule)", "Args", "Result or error"] {
                            h.el_text("th", &[("scope", Some("col"))], t);
                        }
                    });
                });
                h.el("tbody", &[], |h| {
                    for step in steps {
                        h.el("tr", &[], |h| {
                            h.el_text("td", &[], step.kind.as_str());
                            h.el_text("td", &[("class", Some("mono"))], &step.target);
                            h.el("td", &[], |h| badge(h, step.status.as_str()));
                            h.el("td", &[], |h| {
                                for (i, (word, rule)) in decisions.get(&step.step_id).into_iter().flatten().enumerate() {
                                    if i > 0 {
                                        h.text(" → ");
                                    }
                                    h.text(word);
                                    if !rule.is_empty() {
                                        h.text(" (");
                                        h.el_text("span", &[("class", Some("mono"))], rule);
                                        h.text(")");
                                    }
                                }
                            });
                            h.el("td", &[], |h| {
                                if let Some(args) = &step.args {
                                    json_inline(h, args, 60);
                                }
                            });
                            h.el("td", &[], |h| match (&step.result, &step.error) {
                                (_, Some(error)) => {
                                    h.el("span", &[("class", Some("err"))], |h| json_inline(h, error, 60));
                                }
                                (Some(result), None) => json_inline(h, result, 60),
                                (None, None) => {}
                            });
                        });
                    }
                });
            });
        });
        if more {
            h.el_text("p", &[("class", Some("hint"))], "More steps exist than this page shows; read them with GET /v0/executions/{id}/steps.");
        }
    });
}

/// One page of the event log, each payload expandable in full.
fn timeline_section(h: &mut Html, id: &str, events: &[Event], after: u64, next: Option<&str>) {
    h.el("section", &[], |h| {
        h.el_text("h2", &[], "Timeline");
        if events.is_empty() {
            empty(h, "No events on this page.");
        }
        h.el("ol", &[("class", Some("timeline"))], |h| {
            for e in events {
                h.el("li", &[], |h| {
                    let key = format!("e{}", e.event_seq);
                    h.el("details", &[("data-key", Some(&key))], |h| {
                        h.el("summary", &[], |h| {
                            h.el_text("span", &[("class", Some("seq"))], &e.event_seq.to_string());
                            h.el_text("span", &[("class", Some("etype"))], e.event_type.as_str());
                            time(h, &e.occurred_at);
                        });
                        json_block(h, &e.payload);
                    });
                });
            }
        });
        h.el("nav", &[("class", Some("pager"))], |h| {
            if after > 0 {
                h.link(&execution_href(id), "First events");
            }
            if let Some(next) = next {
                h.link(
                    &format!("{}?after={}", execution_href(id), encode(next)),
                    "Later events",
                );
            }
        });
    });
}

/// The mutation form's only field.
#[derive(Debug, Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/executions/{id}/cancel`: cancels, then back to the execution.
pub(super) async fn cancel(
    State(s): State<AppState>,
    headers: HeaderMap,
    viewer: Viewer,
    Path(raw): Path<String>,
    super::BoundedForm(form): super::BoundedForm<CsrfForm>,
) -> Page {
    check_mutation(&headers, &viewer, &form.csrf)?;
    viewer.require(Scope::ExecutionsWrite)?;
    let id = execution_id(&raw)?;
    s.kernel.cancel(&id).await?;
    Ok(viewer.finish(Redirect::to(&execution_href(&id)).into_response()))
}

/// `GET /ui/executions/{id}/stream`: the execution's live output, as `/v0/…/stream` sends it.
pub(super) async fn stream(
    State(s): State<AppState>,
    viewer: Viewer,
    served: ServedStreams,
    Path(raw): Path<String>,
) -> Page {
    viewer.require(Scope::ExecutionsRead)?;
    let id = execution_id(&raw)?;
    stream_response(&s, &viewer.principal, &served, &id)
        .await
        .map_err(|e| Failure::from(e.0))
}

/// `GET /ui/changes`: the change feed, as `/v0/changes` sends it.
pub(super) async fn changes(
    State(s): State<AppState>,
    viewer: Viewer,
    served: ServedStreams,
) -> Page {
    viewer.require(Scope::ExecutionsRead)?;
    changes_response(&s, &viewer.principal, &served).map_err(|e| Failure::from(e.0))
}
