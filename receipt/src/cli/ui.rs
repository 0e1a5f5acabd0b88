//! `receipt ui --listen <addr>`: a read-only web console over the database, with rebuno's
//! console kit (`rebuno::web`: the escaping HTML writer, the stylesheet, the script, the
//! security headers). Pages: every stream and branch (`/ui/streams`), and one stream
//! (`/ui/stream?name=…`): its verify result with the failing index and reason marked on the
//! receipt itself, with `--public-key` how much of it its signed checkpoints cover (or what
//! does not agree with them), its branches, an agent run's control receipts drawn as select, claim and
//! commit steps, and its receipts, each body expandable in full.
//!
//! It changes nothing, so it has no forms and no login; it listens on loopback unless told
//! otherwise (`--listen`), as whoever can reach it can read every receipt. For the same reason
//! it answers only its own `Host` names (the listen address, `localhost`, `127.0.0.1`, `[::1]`
//! on its port, and those `--allowed-hosts` lists): a web page whose name is re-pointed at this
//! machine (DNS rebinding) is refused. It is served by rebuno's serve loop, so a client that
//! does not finish a request head within 10 s is disconnected.

use super::args::UiArgs;
use super::db::Db;
use super::time::iso_ts;
use super::{CliResult, fail};
use crate::signing::PublicKey;
use crate::store::ReceiptStore;
use crate::{Receipt, verify};
use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{Redirect, Response};
use axum::routing::get;
use rebuno::server::{ServeOptions, serve_with_shutdown};
use rebuno::telemetry::LogFormat;
use rebuno::web::hosts::AllowedHosts;
use rebuno::web::{self, Html, badge, empty, encode, json_block};
use serde::Deserialize;
use std::sync::Arc;

/// Receipts per page of a stream.
const PAGE: usize = 500;

/// What the pages read from.
#[derive(Clone)]
struct Ui {
    store: Arc<dyn ReceiptStore>,
    /// With `--public-key`: the key each stream's checkpoints are checked with.
    key: Option<Arc<PublicKey>>,
}

/// `receipt ui`: serves the console until interrupted.
pub(super) async fn ui(db: &Db, a: UiArgs, format: LogFormat) -> CliResult {
    // Checked before anything is opened: a name that is not a host.
    let listed = match AllowedHosts::any().with(&a.allowed_hosts) {
        Ok(listed) => listed,
        Err(e) => return fail(format!("--allowed-hosts: {e}")),
    };
    let key = match a.public_key.as_deref().map(PublicKey::read).transpose() {
        Ok(key) => key.map(Arc::new),
        Err(e) => return fail(format!("public key: {e}")),
    };
    let store = db.open_serving(false).await?;
    let listener = match tokio::net::TcpListener::bind(&a.listen).await {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot listen on {}: {e}", a.listen)),
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => return fail(format!("cannot listen on {}: {e}", a.listen)),
    };
    let app = router(store, listed.listening_on(addr), key);
    // Where to point a browser: a line a person reads, or a log event among the JSON lines.
    let url = format!("http://{addr}/ui");
    match format {
        LogFormat::Pretty => eprintln!("receipt ui: {url}"),
        LogFormat::Json => tracing::info!(url = %url, "receipt ui: {url}"),
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    serve_with_shutdown(listener, app, &ServeOptions::default(), shutdown).await;
    Ok(())
}

/// The console's routes over `store`, answering the `Host` names `hosts` allows; with `key`,
/// each stream page also checks the stream's signed checkpoints and shows their coverage.
pub fn router(
    store: Arc<dyn ReceiptStore>,
    hosts: AllowedHosts,
    key: Option<Arc<PublicKey>>,
) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/streams") }))
        .route("/ui", get(|| async { Redirect::to("/ui/streams") }))
        .route("/ui/streams", get(streams))
        .route("/ui/stream", get(stream))
        .route("/ui/assets/{name}", get(web::asset))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            host_guard,
        ))
        .layer(axum::middleware::from_fn(web::security_headers))
        .with_state(Ui { store, key })
}

/// Middleware: `403` (a page saying which names are answered) for a request whose `Host`
/// (one header, and an absolute target's authority) is not one `hosts` allows.
async fn host_guard(
    State(hosts): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let mut named = request.headers().get_all(header::HOST).iter();
    let host = match (named.next(), named.next()) {
        (Some(h), None) => h.to_str().ok(),
        _ => None,
    };
    let target = request.uri().authority().map(|a| a.as_str());
    let allowed = host.is_some_and(|h| hosts.allows(h)) && target.is_none_or(|t| hosts.allows(t));
    if allowed || !hosts.is_restricted() {
        return next.run(request).await;
    }
    let shown: String = host.unwrap_or("(none)").chars().take(100).collect();
    error(
        StatusCode::FORBIDDEN,
        &format!(
            "host {shown:?} is not served here: this console answers {} (add names with \
             --allowed-hosts)",
            hosts.describe()
        ),
    )
}

/// A whole page.
fn page(status: StatusCode, title: &str, streams_current: bool, body: &Html) -> Response {
    let nav = [("/ui/streams", "Streams", streams_current)];
    let doc = web::document(title, ("receipt", "/ui/streams"), &nav, &Html::new(), body);
    web::html_response(status, doc)
}

/// An error page.
fn error(status: StatusCode, message: &str) -> Response {
    let mut body = Html::new();
    body.el("section", &[("class", Some("error"))], |h| {
        h.el_text("h1", &[], status.canonical_reason().unwrap_or("Error"));
        h.el_text("p", &[], message);
        h.link("/ui/streams", "Back to streams");
    });
    page(status, "Error", false, &body)
}

/// The console path of stream `name`.
fn stream_href(name: &str) -> String {
    format!("/ui/stream?name={}", encode(name))
}

/// `GET /ui/streams`: every stream and branch.
async fn streams(State(ui): State<Ui>) -> Response {
    let (list, branches) = match (
        ui.store.list_streams().await,
        ui.store.list_branches().await,
    ) {
        (Ok(l), Ok(b)) => (l, b),
        (Err(e), _) | (_, Err(e)) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string());
        }
    };
    let mut body = Html::new();
    body.el_text("h1", &[], "Streams");
    if list.is_empty() && branches.is_empty() {
        empty(&mut body, "This database holds no streams yet.");
    } else {
        body.el("div", &[("class", Some("scroll"))], |h| {
            h.el("table", &[], |h| {
                h.el("thead", &[], |h| {
                    h.el("tr", &[], |h| {
                        for t in ["Stream", "Receipts", "Last", "Forked from"] {
                            h.el_text("th", &[("scope", Some("col"))], t);
                        }
                    });
                });
                h.el("tbody", &[], |h| {
                    for s in &list {
                        h.el("tr", &[], |h| {
                            h.el("td", &[], |h| {
                                h.el_text(
                                    "a",
                                    &[
                                        ("href", Some(&stream_href(&s.name))),
                                        ("class", Some("mono")),
                                    ],
                                    &s.name,
                                );
                            });
                            h.el_text("td", &[], &s.count.to_string());
                            h.el("td", &[], |h| {
                                if let Some(ts) = s.last_ts {
                                    web::time(h, &iso_ts(ts));
                                }
                            });
                            h.el("td", &[], |h| {
                                if let Some(b) = branches.iter().find(|b| b.name == s.name) {
                                    h.link(
                                        &stream_href(&b.parent),
                                        &format!("{}@{}", b.parent, b.fork_at),
                                    );
                                }
                            });
                        });
                    }
                    for b in branches
                        .iter()
                        .filter(|b| !list.iter().any(|s| s.name == b.name))
                    {
                        h.el("tr", &[], |h| {
                            h.el("td", &[], |h| {
                                h.el_text(
                                    "a",
                                    &[
                                        ("href", Some(&stream_href(&b.name))),
                                        ("class", Some("mono")),
                                    ],
                                    &b.name,
                                );
                            });
                            h.el_text("td", &[], "0");
                            h.el_text("td", &[], "");
                            h.el("td", &[], |h| {
                                h.link(
                                    &stream_href(&b.parent),
                                    &format!("{}@{}", b.parent, b.fork_at),
                                );
                            });
                        });
                    }
                });
            });
        });
    }
    page(StatusCode::OK, "Streams", true, &body)
}

/// The stream page's query.
#[derive(Debug, Deserialize)]
struct StreamQuery {
    #[serde(default)]
    name: String,
    #[serde(default)]
    from: usize,
}

/// Reads `name` as readers see it: a branch materialized over its parent's prefix.
async fn read_chain(store: &dyn ReceiptStore, name: &str) -> Result<Vec<Receipt>, String> {
    super::progress::read_chain(store, name)
        .await
        .map_err(|e| match e {
            super::Failure::Message(m) => m,
            other => format!("{other:?}"),
        })
}

/// `GET /ui/stream?name=…&from=…`: one stream.
async fn stream(State(ui): State<Ui>, Query(q): Query<StreamQuery>) -> Response {
    if q.name.is_empty() {
        return error(StatusCode::BAD_REQUEST, "which stream? (?name=…)");
    }
    let chain = match read_chain(&*ui.store, &q.name).await {
        Ok(c) => c,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    let branches = ui.store.list_branches().await.unwrap_or_default();
    if chain.is_empty() && !branches.iter().any(|b| b.name == q.name) {
        return error(
            StatusCode::NOT_FOUND,
            &format!("no stream named {:?}", q.name),
        );
    }
    let verdict = verify(&chain);
    let failing = verdict.as_ref().err().map(|f| f.at);
    let mut body = Html::new();
    body.el("h1", &[], |h| {
        h.text("Stream ");
        h.el_text("span", &[("class", Some("mono"))], &q.name);
    });
    body.el(
        "section",
        &[("id", Some("verify")), ("role", Some("status"))],
        |h| match &verdict {
            Ok(v) => {
                h.el("p", &[], |h| {
                    badge(h, "verified");
                    h.text(&format!(" {} receipts, head ", v.count));
                    h.el_text(
                        "span",
                        &[("class", Some("mono"))],
                        v.head.as_deref().unwrap_or("none"),
                    );
                });
            }
            Err(f) => {
                h.el("p", &[("class", Some("flash error"))], |h| {
                    badge(h, "failed");
                    h.text(&format!(" verify failed: {} at index {}. ", f.reason, f.at));
                    let anchor = format!(
                        "{}&from={}#receipt-{}",
                        stream_href(&q.name),
                        f.at / PAGE * PAGE,
                        f.at
                    );
                    h.link(&anchor, "Show the receipt");
                });
            }
        },
    );
    if let (Some(key), Ok(_)) = (&ui.key, &verdict) {
        let signed = match ui.store.check_signatures(&q.name, key, None, 0).await {
            Ok(checked) => checked.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        body.el(
            "section",
            &[("id", Some("signatures")), ("role", Some("status"))],
            |h| match &signed {
                Ok(coverage) => {
                    h.el("p", &[], |h| {
                        let word = if coverage.signed_length > 0 {
                            "signed"
                        } else {
                            "unsigned"
                        };
                        badge(h, word);
                        h.text(&format!(" {coverage}"));
                    });
                }
                Err(e) => {
                    h.el("p", &[("class", Some("flash error"))], |h| {
                        badge(h, "failed");
                        h.text(&format!(" signatures: {e}"));
                    });
                }
            },
        );
    }
    if let Some(b) = branches.iter().find(|b| b.name == q.name) {
        body.el("p", &[], |h| {
            h.text("A branch of ");
            h.link(&stream_href(&b.parent), &b.parent);
            h.text(&format!(" at index {}.", b.fork_at));
        });
    }
    let children: Vec<_> = branches.iter().filter(|b| b.parent == q.name).collect();
    if !children.is_empty() {
        body.el_text("h2", &[], "Branches");
        body.el("ul", &[("class", Some("plain"))], |h| {
            for b in children {
                h.el("li", &[], |h| {
                    h.link(&stream_href(&b.name), &b.name);
                    h.text(&format!(" (forked at {})", b.fork_at));
                });
            }
        });
    }
    run_steps(&mut body, &chain, &q.name);
    receipts(
        &mut body,
        &chain,
        &q.name,
        q.from,
        failing,
        verdict.as_ref().err().map(|f| f.reason.to_string()),
    );
    page(StatusCode::OK, &q.name, false, &body)
}

/// The step an agent run's control receipt stands for, if it is one.
fn step_of(event_type: &str) -> Option<&'static str> {
    Some(match event_type {
        "action.selected" | "merge.selected" => "select",
        "action.started" | "merge.started" => "claim",
        "action.completed" | "merge.applied" => "commit",
        "action.failed" | "merge.failed" => "failed",
        "action.superseded" | "merge.skipped" => "superseded",
        "human.requested" => "ask",
        "human.responded" => "answer",
        "run.started" | "run.blocked" | "run.completed" | "run.failed" | "goal.completed" => "run",
        _ => return None,
    })
}

/// An agent run's control receipts as steps: select, claim, commit (nothing when the stream
/// holds none).
fn run_steps(h: &mut Html, chain: &[Receipt], name: &str) {
    let steps: Vec<(usize, &'static str, &Receipt)> = chain
        .iter()
        .enumerate()
        .filter_map(|(i, r)| step_of(r.event_type()).map(|s| (i, s, r)))
        .collect();
    if steps.is_empty() {
        return;
    }
    h.el("section", &[("id", Some("run"))], |h| {
        h.el_text("h2", &[], "Agent run");
        h.el("ol", &[("class", Some("timeline run"))], |h| {
            for (i, step, r) in steps {
                let body = r.body();
                let action = body
                    .get("actionId")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
                    .or_else(|| body.get("actionIds").map(|v| v.to_string()))
                    .unwrap_or_default();
                h.el("li", &[("class", Some(&format!("step-{step}")))], |h| {
                    let href =
                        format!("{}&from={}#receipt-{i}", stream_href(name), i / PAGE * PAGE);
                    h.link(&href, &format!("#{i}"));
                    h.text(" ");
                    badge(h, step);
                    h.text(" ");
                    h.el_text("span", &[("class", Some("etype"))], r.event_type());
                    if !action.is_empty() {
                        h.text(" ");
                        h.el_text("span", &[("class", Some("mono"))], &action);
                    }
                    if let Some(reason) = body.get("reason").and_then(|v| v.as_str()) {
                        h.text(" — ");
                        h.text(reason);
                    }
                });
            }
        });
    });
}

/// One page of the receipts, the failing one marked.
fn receipts(
    h: &mut Html,
    chain: &[Receipt],
    name: &str,
    from: usize,
    failing: Option<usize>,
    reason: Option<String>,
) {
    h.el("section", &[], |h| {
        h.el_text("h2", &[], "Receipts");
        if chain.is_empty() {
            empty(h, "No receipts.");
            return;
        }
        let from = from.min(chain.len().saturating_sub(1)) / PAGE * PAGE;
        h.el("ol", &[("class", Some("timeline chain"))], |h| {
            for (i, r) in chain.iter().enumerate().skip(from).take(PAGE) {
                let bad = failing == Some(i);
                let id = format!("receipt-{i}");
                let class = if bad {
                    "bad"
                } else if failing.is_some_and(|f| i > f) {
                    "after"
                } else {
                    "ok"
                };
                h.el("li", &[("id", Some(&id)), ("class", Some(class))], |h| {
                    h.el("details", &[("open", bad.then_some(""))], |h| {
                        h.el("summary", &[], |h| {
                            h.el_text("span", &[("class", Some("seq"))], &i.to_string());
                            h.el_text("span", &[("class", Some("etype"))], r.event_type());
                            web::time(h, &iso_ts(r.ts()));
                            if bad {
                                h.el_text(
                                    "strong",
                                    &[("class", Some("fails"))],
                                    &format!(
                                        "verification fails here: {}",
                                        reason.as_deref().unwrap_or("")
                                    ),
                                );
                            }
                        });
                        h.el("p", &[("class", Some("meta mono"))], |h| {
                            h.text("hash ").text(r.hash());
                            h.text(" · prev ").text(r.prev().unwrap_or("none"));
                        });
                        json_block(h, r.body());
                    });
                });
            }
        });
        h.el("nav", &[("class", Some("pager"))], |h| {
            if from > 0 {
                h.link(
                    &format!("{}&from={}", stream_href(name), from - PAGE),
                    "Earlier receipts",
                );
            }
            if from + PAGE < chain.len() {
                h.link(
                    &format!("{}&from={}", stream_href(name), from + PAGE),
                    "Later receipts",
                );
            }
        });
    });
}
