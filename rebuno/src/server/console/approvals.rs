//! The approvals inbox: every pending approval with its message, the step waiting on it, its
//! approvers and the time left, and a form to grant or deny it with a rationale, offered only
//! to a viewer the kernel would let decide it ([`decision_refusal`]); others see who may. The
//! decision is made as the login (see [`Viewer`]), never as a name the form sends, and the
//! kernel checks it again when it is posted.

use super::executions::execution_href;
use super::layout::{Nav, csrf_field, empty, json_inline, time};
use super::{Failure, Html, Page, Viewer, check_mutation, html::encode};
use crate::kernel::decision_refusal;
use crate::protocol::{Approval, Scope, Step, canonical_uuid};
use crate::server::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{MethodRouter, post};
use serde::Deserialize;

/// Approvals per page of the inbox.
const INBOX_PAGE: usize = 50;
/// At most this many characters of a rationale are recorded.
const MAX_RATIONALE: usize = 2_000;

/// The inbox's cursor.
#[derive(Debug, Default, Deserialize)]
pub(super) struct InboxQuery {
    #[serde(default)]
    after: String,
}

/// `GET /ui/approvals`.
pub(super) async fn inbox(
    State(s): State<AppState>,
    viewer: Viewer,
    Query(q): Query<InboxQuery>,
) -> Page {
    viewer.require(Scope::ApprovalsRead)?;
    let after = (!q.after.is_empty()).then_some(q.after.as_str());
    let page = s.kernel.pending_approvals_page(after, INBOX_PAGE).await?;
    let mut body = Html::new();
    body.el_text("h1", &[], "Approvals");
    let who = viewer.identity();
    body.el("p", &[("class", Some("hint"))], |h| {
        h.text("You decide as ");
        h.el_text(
            "strong",
            &[],
            if who.is_empty() {
                "(no name: log in with one to be recorded)"
            } else {
                who
            },
        );
        h.text(".");
    });
    let mut steps = Vec::with_capacity(page.items.len());
    for a in &page.items {
        steps.push(s.kernel.step(&a.execution_id, &a.step_id).await.ok());
    }
    body.el(
        "div",
        &[
            ("id", Some("live-list")),
            ("data-changes", Some("/ui/changes")),
        ],
        |h| {
            if page.items.is_empty() {
                empty(h, "No approvals are waiting.");
            }
            for (a, step) in page.items.iter().zip(&steps) {
                approval_card(h, &viewer, a, step.as_ref());
            }
        },
    );
    body.el("nav", &[("class", Some("pager"))], |h| {
        if after.is_some() {
            h.link("/ui/approvals", "First page");
        }
        if let Some(next) = &page.next {
            h.link(
                &format!("/ui/approvals?after={}", encode(next)),
                "Next page",
            );
        }
    });
    Ok(viewer.page("Approvals", Nav::Approvals, &body))
}

/// One pending approval and its decision form.
fn approval_card(h: &mut Html, viewer: &Viewer, a: &Approval, step: Option<&Step>) {
    h.el(
        "article",
        &[
            ("class", Some("card approval")),
            ("id", Some(&format!("approval-{}", a.id))),
        ],
        |h| {
            h.el_text(
                "h2",
                &[],
                if a.message.is_empty() {
                    "Approval requested"
                } else {
                    &a.message
                },
            );
            h.el("dl", &[("class", Some("fields"))], |h| {
                h.el_text("dt", &[], "Execution");
                h.el("dd", &[], |h| {
                    h.el_text(
                        "a",
                        &[
                            ("href", Some(&execution_href(&a.execution_id))),
                            ("class", Some("mono")),
                        ],
                        &a.execution_id,
                    );
                });
                if let Some(step) = step {
                    h.el_text("dt", &[], "Step");
                    h.el("dd", &[], |h| {
                        h.el_text("span", &[("class", Some("mono"))], &step.target);
                        if let Some(args) = &step.args {
                            h.text(" ");
                            json_inline(h, args, 80);
                        }
                    });
                }
                h.el_text("dt", &[], "Approvers");
                h.el("dd", &[], |h| match a.approver_list() {
                    Some(list) => {
                        h.text(&list.join(", "));
                    }
                    None => {
                        h.text("anyone with approvals:write");
                    }
                });
                h.el_text("dt", &[], "Requested");
                h.el("dd", &[], |h| time(h, &a.created_at));
                h.el_text("dt", &[], "Expires");
                h.el("dd", &[], |h| {
                    h.el_text(
                        "time",
                        &[
                            ("datetime", Some(&a.timeout_at)),
                            ("title", Some(&a.timeout_at)),
                            ("data-left", Some("")),
                        ],
                        &a.timeout_at,
                    );
                });
            });
            if let Some(refusal) = decision_refusal(a, &viewer.principal, viewer.identity()) {
                who_may_decide(h, a, &refusal.message);
                return;
            }
            let base = format!("/ui/approvals/{}", encode(&a.id));
            h.el(
                "form",
                &[
                    ("method", Some("post")),
                    ("action", Some(&format!("{base}/grant"))),
                ],
                |h| {
                    csrf_field(h, viewer);
                    let field = format!("rationale-{}", a.id);
                    h.el_text("label", &[("for", Some(&field))], "Rationale");
                    h.el_text(
                        "textarea",
                        &[
                            ("id", Some(&field)),
                            ("name", Some("rationale")),
                            ("rows", Some("2")),
                            ("maxlength", Some("2000")),
                        ],
                        "",
                    );
                    h.el("div", &[("class", Some("actions"))], |h| {
                        h.el_text(
                            "button",
                            &[("type", Some("submit")), ("class", Some("grant"))],
                            "Grant",
                        );
                        h.el_text(
                            "button",
                            &[
                                ("type", Some("submit")),
                                ("class", Some("danger")),
                                ("formaction", Some(&format!("{base}/deny"))),
                            ],
                            "Deny",
                        );
                    });
                },
            );
        },
    );
}

/// In place of the decision form, for a viewer who may not decide: why not, and who may.
fn who_may_decide(h: &mut Html, a: &Approval, why: &str) {
    let who = match a.approver_list() {
        Some(list) => format!("{} (by name or group)", list.join(", ")),
        None => "anyone".to_owned(),
    };
    h.el("p", &[("class", Some("hint not-yours"))], |h| {
        h.text("You may not decide this approval: ");
        h.text(why);
        h.text(". It may be decided by ");
        h.el_text("strong", &[], &who);
        h.text(" with scope ");
        h.el_text("code", &[], Scope::ApprovalsWrite.as_str());
        h.text(".");
    });
}

/// The decision form.
#[derive(Debug, Deserialize)]
pub(super) struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    rationale: String,
}

/// Grant or deny: what a decision route decides.
#[derive(Debug, Clone, Copy)]
pub(super) enum Verdict {
    /// `POST /ui/approvals/{id}/grant`.
    Grant,
    /// `POST /ui/approvals/{id}/deny`.
    Deny,
}

/// The handler of `POST /ui/approvals/{id}/grant` or `…/deny`, by `verdict`: decides the
/// approval as the viewer, then shows its execution.
pub(super) fn decision(verdict: Verdict) -> MethodRouter<AppState> {
    post(
        move |State(s): State<AppState>,
              headers: HeaderMap,
              viewer: Viewer,
              Path(raw): Path<String>,
              super::BoundedForm(form): super::BoundedForm<DecideForm>| {
            decide(s, headers, viewer, raw, form, verdict)
        },
    )
}

/// Decides approval `raw` as the viewer, then shows its execution.
async fn decide(
    s: AppState,
    headers: HeaderMap,
    viewer: Viewer,
    raw: String,
    form: DecideForm,
    verdict: Verdict,
) -> Page {
    check_mutation(&headers, &viewer, &form.csrf)?;
    let id = canonical_uuid(&raw).ok_or_else(|| {
        Failure(
            StatusCode::BAD_REQUEST,
            format!("invalid approval id {raw:?}"),
        )
    })?;
    let approval = s.kernel.approval(&id).await?;
    let rationale: String = form.rationale.trim().chars().take(MAX_RATIONALE).collect();
    let who = viewer.identity().to_owned();
    // Whether the viewer may decide (scope and approvers) is the kernel's check, the one the
    // inbox asked before it offered the form.
    match verdict {
        Verdict::Grant => {
            s.kernel
                .grant_as(&id, &viewer.principal, &who, &rationale)
                .await?
        }
        Verdict::Deny => {
            s.kernel
                .deny_as(&id, &viewer.principal, &who, &rationale)
                .await?
        }
    }
    Ok(viewer.finish(Redirect::to(&execution_href(&approval.execution_id)).into_response()))
}
