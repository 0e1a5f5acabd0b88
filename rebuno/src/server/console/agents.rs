//! The agents pages: every registration, and one agent's webhook (without credentials), lease,
//! published metadata and schemas, policy bundle, and the policy test form (`POST
//! /v0/policies/{id}/test`'s evaluation, which records nothing). Secrets are never shown: the
//! kernel's reads blank them, and a webhook URL loses its user information and query.

use super::executions::execution_href;
use super::layout::{Nav, csrf_field, empty, json_block, time};
use super::{Failure, Html, Page, Viewer, check_mutation, html::encode};
use crate::protocol::{Agent, PolicyTestRequest, PolicyTestResponse, Scope, StepKind};
use crate::server::AppState;
use crate::store::ExecutionQuery;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;

/// Agents per page of the list.
const AGENTS_PAGE: usize = 100;
/// At most this many bytes of a policy test's arguments (as the kernel takes them).
const MAX_ARGUMENTS: usize = crate::kernel::MAX_POLICY_TEST_ARGUMENTS_BYTES;

/// The list's cursor.
#[derive(Debug, Default, Deserialize)]
pub(super) struct AgentsQuery {
    #[serde(default)]
    after: String,
}

/// The console path of agent `id`.
fn agent_href(id: &str) -> String {
    format!("/ui/agents/{}", encode(id))
}

/// `url` without user information (`user:password@`), query or fragment: what is safe to show.
fn redact_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_owned(),
    }
}

/// `GET /ui/agents`.
pub(super) async fn list(
    State(s): State<AppState>,
    viewer: Viewer,
    Query(q): Query<AgentsQuery>,
) -> Page {
    viewer.require(Scope::AgentsRead)?;
    let after = (!q.after.is_empty()).then_some(q.after.as_str());
    let page = s.kernel.agents_page(after, AGENTS_PAGE).await?;
    let mut body = Html::new();
    body.el_text("h1", &[], "Agents");
    if page.items.is_empty() {
        empty(&mut body, "No agents are registered.");
    } else {
        body.el("div", &[("class", Some("scroll"))], |h| {
            h.el("table", &[], |h| {
                h.el("thead", &[], |h| {
                    h.el("tr", &[], |h| {
                        for t in ["Agent", "Description", "Policy", "Registered"] {
                            h.el_text("th", &[("scope", Some("col"))], t);
                        }
                    });
                });
                h.el("tbody", &[], |h| {
                    for a in &page.items {
                        h.el("tr", &[], |h| {
                            h.el("td", &[], |h| {
                                h.link(&agent_href(&a.id), &a.id);
                            });
                            let description =
                                a.metadata.as_ref().map_or("", |m| m.description.as_str());
                            h.el_text("td", &[], description);
                            h.el_text(
                                "td",
                                &[],
                                if a.policy_bundle.is_empty() {
                                    "none"
                                } else {
                                    "bundle"
                                },
                            );
                            h.el("td", &[], |h| time(h, &a.registered_at));
                        });
                    }
                });
            });
        });
    }
    if let Some(next) = &page.next {
        body.el("nav", &[("class", Some("pager"))], |h| {
            h.link(&format!("/ui/agents?after={}", encode(next)), "Next page");
        });
    }
    Ok(viewer.page("Agents", Nav::Agents, &body))
}

/// The policy test form's fields.
#[derive(Debug, Default, Deserialize)]
pub(super) struct TestForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    arguments: String,
}

/// One agent's page, with the policy test form filled from `form` and its `outcome`.
async fn agent_page(
    s: &AppState,
    viewer: &Viewer,
    id: &str,
    form: &TestForm,
    outcome: Option<Result<PolicyTestResponse, String>>,
) -> Page {
    let agent = s.kernel.agent(id).await?;
    let recent = s
        .kernel
        .list_executions_matching(ExecutionQuery {
            agent_id: Some(agent.id.clone()),
            limit: 10,
            ..ExecutionQuery::default()
        })
        .await?;
    let mut body = Html::new();
    body.el("h1", &[], |h| {
        h.text("Agent ");
        h.el_text("span", &[("class", Some("mono"))], &agent.id);
    });
    details(&mut body, &agent);
    body.el("section", &[], |h| {
        h.el_text("h2", &[], "Recent executions");
        if recent.executions.is_empty() {
            empty(h, "None yet.");
        }
        h.el("ul", &[("class", Some("plain"))], |h| {
            for e in &recent.executions {
                h.el("li", &[], |h| {
                    h.el_text(
                        "a",
                        &[
                            ("href", Some(&execution_href(&e.id))),
                            ("class", Some("mono")),
                        ],
                        &e.id,
                    );
                    h.text(" ");
                    super::layout::badge(h, e.status.as_str());
                });
            }
        });
        h.link(
            &format!("/ui/executions?agent_id={}", encode(&agent.id)),
            "All of this agent's executions",
        );
    });
    if viewer.principal.allows(Scope::PoliciesRead) {
        test_form(&mut body, viewer, &agent.id, form, outcome);
    }
    Ok(viewer.page(&format!("Agent {}", agent.id), Nav::Agents, &body))
}

/// Registration, metadata, schemas and bundle.
fn details(h: &mut Html, agent: &Agent) {
    h.el("dl", &[("class", Some("fields"))], |h| {
        h.el_text("dt", &[], "Webhook");
        h.el_text(
            "dd",
            &[("class", Some("mono"))],
            &redact_url(&agent.webhook_url),
        );
        h.el_text("dt", &[], "Registered");
        h.el("dd", &[], |h| time(h, &agent.registered_at));
        if let Some(lease) = agent.lease_timeout_seconds {
            h.el_text("dt", &[], "Lease");
            h.el_text("dd", &[], &format!("{lease} s"));
        }
        if let Some(m) = &agent.metadata
            && !m.description.is_empty()
        {
            h.el_text("dt", &[], "Description");
            h.el_text("dd", &[], &m.description);
        }
    });
    if let Some(m) = &agent.metadata {
        for (title, schema) in [
            ("Input schema", &m.input_schema),
            ("Output schema", &m.output_schema),
        ] {
            if let Some(schema) = schema {
                h.el_text("h2", &[], title);
                json_block(h, schema);
            }
        }
    }
    h.el_text("h2", &[], "Policy bundle");
    if agent.policy_bundle.is_empty() {
        empty(h, "No bundle: every step is allowed.");
    } else {
        h.el_text("pre", &[("class", Some("json"))], &agent.policy_bundle);
    }
}

/// The policy test form and, after a test, its outcome.
fn test_form(
    h: &mut Html,
    viewer: &Viewer,
    id: &str,
    form: &TestForm,
    outcome: Option<Result<PolicyTestResponse, String>>,
) {
    h.el("section", &[("id", Some("policy-test"))], |h| {
        h.el_text("h2", &[], "Test the policy");
        h.el(
            "form",
            &[
                ("method", Some("post")),
                ("action", Some(&format!("{}/test", agent_href(id)))),
            ],
            |h| {
                csrf_field(h, viewer);
                h.el_text("label", &[("for", Some("kind"))], "Kind");
                h.el(
                    "select",
                    &[("id", Some("kind")), ("name", Some("kind"))],
                    |h| {
                        for kind in ["tool_call", "llm_call", "local"] {
                            h.el_text(
                                "option",
                                &[
                                    ("value", Some(kind)),
                                    ("selected", (form.kind == kind).then_some("")),
                                ],
                                kind,
                            );
                        }
                    },
                );
                h.el_text("label", &[("for", Some("target"))], "Target");
                h.open(
                    "input",
                    &[
                        ("id", Some("target")),
                        ("name", Some("target")),
                        ("value", Some(&form.target)),
                        ("required", Some("")),
                    ],
                );
                h.el_text("label", &[("for", Some("arguments"))], "Arguments (JSON)");
                h.el_text(
                    "textarea",
                    &[
                        ("id", Some("arguments")),
                        ("name", Some("arguments")),
                        ("rows", Some("3")),
                    ],
                    &form.arguments,
                );
                h.el_text("button", &[("type", Some("submit"))], "Evaluate");
            },
        );
        match outcome {
            None => {}
            Some(Err(message)) => {
                h.el_text(
                    "p",
                    &[("class", Some("flash error")), ("role", Some("alert"))],
                    &message,
                );
            }
            Some(Ok(r)) => {
                h.el(
                    "dl",
                    &[("class", Some("fields result")), ("role", Some("status"))],
                    |h| {
                        h.el_text("dt", &[], "Decision");
                        h.el("dd", &[], |h| super::layout::badge(h, &r.decision));
                        h.el_text("dt", &[], "Rule");
                        h.el_text("dd", &[("class", Some("mono"))], &r.rule_id);
                        if !r.reason.is_empty() {
                            h.el_text("dt", &[], "Reason");
                            h.el_text("dd", &[], &r.reason);
                        }
                    },
                );
                if let Some(config) = &r.approval_config {
                    json_block(h, config);
                }
            }
        }
    });
}

/// `GET /ui/agents/{id}`.
pub(super) async fn show(
    State(s): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Page {
    viewer.require(Scope::AgentsRead)?;
    agent_page(&s, &viewer, &id, &TestForm::default(), None).await
}

/// `POST /ui/agents/{id}/test`: the agent's page with the evaluation of the form's step.
pub(super) async fn test_policy(
    State(s): State<AppState>,
    headers: HeaderMap,
    viewer: Viewer,
    Path(id): Path<String>,
    super::BoundedForm(form): super::BoundedForm<TestForm>,
) -> Page {
    check_mutation(&headers, &viewer, &form.csrf)?;
    viewer.require(Scope::AgentsRead)?;
    viewer.require(Scope::PoliciesRead)?;
    let arguments = match form.arguments.trim() {
        "" => Ok(None),
        raw if raw.len() > MAX_ARGUMENTS => Err(format!("arguments over {MAX_ARGUMENTS} bytes")),
        // Read as a submit reads step args, so the page never evaluates a rounded number.
        raw => match crate::identity::step_args(raw.as_bytes()) {
            Ok(args) => Ok(Some(args.value)),
            Err(crate::identity::ArgsError::Syntax(e)) => {
                Err(format!("the arguments are not JSON: {e}"))
            }
            Err(e) => Err(format!("invalid arguments: {e}")),
        },
    };
    let outcome = match arguments {
        Err(message) => Err(message),
        Ok(arguments) => {
            let kind = match form.kind.as_str() {
                "" | "tool_call" => StepKind::ToolCall,
                "llm_call" => StepKind::LlmCall,
                "local" => StepKind::Local,
                other => {
                    return Err(Failure(
                        StatusCode::BAD_REQUEST,
                        format!("unknown kind {other:?}"),
                    ));
                }
            };
            let req = PolicyTestRequest {
                kind: Some(kind),
                target: form.target.clone(),
                arguments,
                bundle: String::new(),
            };
            s.kernel.test_policy(&id, req).await.map_err(|e| e.message)
        }
    };
    agent_page(&s, &viewer, &id, &form, Some(outcome)).await
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn webhook_urls_lose_credentials_and_queries() {
        assert_eq!(
            redact_url("https://u:p@hook.example:8443/x?token=t#f"),
            "https://hook.example:8443/x"
        );
        assert_eq!(redact_url("http://h/p"), "http://h/p");
        assert_eq!(redact_url("embedded:unserved"), "embedded:unserved");
    }
}
