//! The command language: `agent …`, `exec …` (including `exec watch`), `approval …` and the
//! help table (`key …` lives in `keys`), each answering the text to print or an error message.

use super::render::{
    approval_row, clean, describe_agent, describe_event, describe_execution, event_row, fit,
    natural_width, render_table, short_len, short_step,
};
use super::{Answer, LIST_LIMIT, Repl, Sink, WATCH_POLL};
use rebuno::protocol::{
    CreateExecutionRequest, Execution, ExecutionStatus, ForkExecutionRequest, Principal,
    RegisterAgentRequest,
};
use serde_json::Value;
use std::fmt::Write as _;
use std::str::FromStr;

/// Every command with a one-line description, in the order `help` lists them.
pub(super) const HELP: &[(&str, &str)] = &[
    (
        "agent ls",
        "list agents: id, webhook url, policy, registration time",
    ),
    ("agent get <id>", "show one agent and its policy bundle"),
    (
        "agent add <id> <webhook_url> <secret> [lease_seconds]",
        "register (or update) an agent, optionally with its own lease",
    ),
    ("agent rm <id>", "delete an agent that has no executions"),
    (
        "exec ls [agent_id] [status]",
        "list the newest executions, optionally of one agent and/or status",
    ),
    (
        "exec create <agent_id> [json input]",
        "create an execution (input defaults to {})",
    ),
    ("exec get <id>", "show an execution: status, input, output"),
    (
        "exec events <id>",
        "list an execution's events (payloads cut to the width)",
    ),
    (
        "exec event <id> <seq>",
        "show one event whole: its type, time and payload as indented JSON",
    ),
    (
        "exec watch <id>",
        "follow an execution's events and live output until it ends (Ctrl-C stops)",
    ),
    ("exec cancel <id>", "cancel an execution"),
    (
        "exec children <id>",
        "list the child executions an execution spawned (subagents)",
    ),
    (
        "exec fork <id> <at_seq>",
        "fork an execution: replay its effects up to event at_seq, run the rest afresh",
    ),
    ("approval ls", "list pending approvals"),
    (
        "approval grant <id> <decided_by> [rationale...]",
        "grant a pending approval",
    ),
    (
        "approval deny <id> <decided_by> [rationale...]",
        "deny a pending approval",
    ),
    (
        "key ls",
        "list API keys: id, name, subject, scopes, agent, state",
    ),
    (
        "key create <name> <scope,...> [subject] [agent]",
        "create an API key (bound to an agent: it may create that agent's subagents) and print its secret (shown only once)",
    ),
    ("key revoke <id>", "revoke an API key"),
    (
        "session ls <agent_id> <session>",
        "list a session's turns, oldest first",
    ),
    ("help", "show this list"),
    ("quit | exit", "leave (Ctrl-D too); shuts the kernel down"),
];

/// Splits off the first whitespace-separated word; the rest keeps its inner spacing.
pub(super) fn first_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

/// The usage line of `command`, from the help table.
pub(super) fn usage(command: &str) -> String {
    let usage = HELP
        .iter()
        .find(|(c, _)| c.starts_with(command) && c[command.len()..].starts_with([' ', '\0']))
        .or_else(|| HELP.iter().find(|(c, _)| *c == command))
        .map_or(command, |(c, _)| c);
    format!("usage: {usage}")
}

impl Repl {
    pub(super) async fn agent(&mut self, args: &str) -> Answer {
        let (sub, rest) = first_word(args);
        let words: Vec<&str> = rest.split_whitespace().collect();
        match (sub, words.as_slice()) {
            ("ls" | "list", []) => {
                let agents = self.kernel.agents().await.map_err(|e| e.to_string())?;
                if agents.is_empty() {
                    return Ok("no agents".to_owned());
                }
                let rows: Vec<Vec<String>> = agents
                    .iter()
                    .map(|a| {
                        vec![
                            a.id.clone(),
                            a.webhook_url.clone(),
                            if a.policy_bundle.is_empty() {
                                "no"
                            } else {
                                "yes"
                            }
                            .to_owned(),
                            a.registered_at.to_string(),
                        ]
                    })
                    .collect();
                Ok(render_table(
                    &["ID", "WEBHOOK URL", "POLICY", "REGISTERED"],
                    &rows,
                    self.width,
                ))
            }
            ("get" | "show", [prefix]) => {
                let id = self.resolve_agent(prefix).await?;
                let agent = self.kernel.agent(&id).await.map_err(|e| e.to_string())?;
                Ok(describe_agent(&agent))
            }
            ("add" | "register", [id, url, secret, lease @ ..]) if lease.len() <= 1 => {
                let lease_timeout_seconds = match lease.first() {
                    None => None,
                    Some(text) => Some(text.parse::<f64>().map_err(|_| {
                        format!("lease_seconds must be a number of seconds, got {text:?}")
                    })?),
                };
                let agent = self
                    .kernel
                    .register_agent(RegisterAgentRequest {
                        id: (*id).to_owned(),
                        webhook_url: (*url).to_owned(),
                        secret: (*secret).to_owned(),
                        lease_timeout_seconds,
                        dispatch_retry: None,
                        // The console is the operator's, who may replace a registration as
                        // the admin may over HTTP.
                        takeover: true,
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "registered agent {} -> {}",
                    agent.id, agent.webhook_url
                ))
            }
            ("rm" | "delete", [prefix]) => {
                let id = self.resolve_agent(prefix).await?;
                self.kernel
                    .delete_agent(&id)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!("deleted agent {id}"))
            }
            ("ls" | "list", _) => Err(usage("agent ls")),
            ("get" | "show", _) => Err(usage("agent get")),
            ("add" | "register", _) => Err(usage("agent add")),
            ("rm" | "delete", _) => Err(usage("agent rm")),
            ("", _) => Err("agent needs a subcommand: ls, get, add, rm".to_owned()),
            (other, _) => Err(format!("unknown command 'agent {other}'; type help")),
        }
    }

    pub(super) async fn exec(&mut self, args: &str) -> Answer {
        let (sub, rest) = first_word(args);
        let words: Vec<&str> = rest.split_whitespace().collect();
        match (sub, words.as_slice()) {
            ("ls" | "list", filters) if filters.len() <= 2 => self.exec_ls(filters).await,
            ("create" | "new", [_, ..]) => {
                let (agent, input) = first_word(rest);
                let input: Value = if input.is_empty() {
                    Value::Object(serde_json::Map::new())
                } else {
                    serde_json::from_str(input)
                        .map_err(|e| format!("input is not valid JSON: {e}"))?
                };
                let agent_id = self.resolve_agent(agent).await?;
                let exec = self
                    .kernel
                    .create_execution(CreateExecutionRequest {
                        agent_id,
                        input: Some(input),
                        agent_version: String::new(),
                        ..CreateExecutionRequest::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "created execution {} for {} ({})",
                    exec.id, exec.agent_id, exec.status
                ))
            }
            ("get" | "show", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                let exec = self
                    .kernel
                    .execution(&id)
                    .await
                    .map_err(|e| e.to_string())?;
                let waiting = if exec.status.is_terminal() {
                    None
                } else {
                    self.kernel
                        .dispatch_waiting(&id)
                        .await
                        .map_err(|e| e.to_string())?
                };
                Ok(describe_execution(&exec, waiting.as_ref()))
            }
            ("events", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                let mut events = Vec::new();
                let mut after = 0;
                loop {
                    let page = self
                        .kernel
                        .events(&id, after, 1000)
                        .await
                        .map_err(|e| e.to_string())?;
                    let Some(last) = page.last() else { break };
                    after = last.event_seq;
                    events.extend(page);
                }
                if events.is_empty() {
                    return Ok(format!("execution {id} has no events"));
                }
                let rows: Vec<Vec<String>> = events.iter().map(event_row).collect();
                Ok(render_table(
                    &["SEQ", "TYPE", "TIME", "PAYLOAD"],
                    &rows,
                    self.width,
                ))
            }
            ("event", [prefix, seq]) => {
                let id = self.resolve_execution(prefix).await?;
                let seq: u64 = seq
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("'{seq}' is not an event sequence number"))?;
                let page = self
                    .kernel
                    .events(&id, seq - 1, 1)
                    .await
                    .map_err(|e| e.to_string())?;
                match page.first() {
                    Some(event) if event.event_seq == seq => Ok(describe_event(event)),
                    _ => Err(format!("execution {id} has no event {seq}")),
                }
            }
            ("watch" | "follow", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                self.watch(&id).await
            }
            ("cancel", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                self.kernel.cancel(&id).await.map_err(|e| e.to_string())?;
                Ok(format!("cancelled execution {id}"))
            }
            ("children", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                let children = self
                    .kernel
                    .client()
                    .children(&id)
                    .await
                    .map_err(|e| e.to_string())?;
                if children.is_empty() {
                    return Ok(format!("execution {id} spawned no children"));
                }
                let rows: Vec<Vec<String>> = children
                    .iter()
                    .map(|c| {
                        let step = c.spawned_by.as_ref().map(|s| s.step_id.clone());
                        vec![
                            c.id.clone(),
                            c.agent_id.clone(),
                            c.status.to_string(),
                            step.unwrap_or_default(),
                        ]
                    })
                    .collect();
                Ok(render_table(
                    &["ID", "AGENT", "STATUS", "STEP"],
                    &rows,
                    self.width,
                ))
            }
            ("fork", [prefix, at_seq]) => {
                let id = self.resolve_execution(prefix).await?;
                let at_seq: i64 = at_seq
                    .parse()
                    .map_err(|_| format!("'{at_seq}' is not an event sequence number"))?;
                let request = ForkExecutionRequest {
                    at_seq,
                    ..ForkExecutionRequest::default()
                };
                let fork = self
                    .kernel
                    .fork(&id, request, &Principal::admin())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "forked execution {id} at event {at_seq}: {} ({})",
                    fork.id, fork.status
                ))
            }
            ("ls" | "list", _) => Err(usage("exec ls")),
            ("create" | "new", _) => Err(usage("exec create")),
            ("get" | "show", _) => Err(usage("exec get")),
            ("events", _) => Err(usage("exec events")),
            ("event", _) => Err(usage("exec event")),
            ("watch" | "follow", _) => Err(usage("exec watch")),
            ("cancel", _) => Err(usage("exec cancel")),
            ("children", _) => Err(usage("exec children")),
            ("fork", _) => Err(usage("exec fork")),
            ("", _) => Err(
                "exec needs a subcommand: ls, create, get, events, event, watch, cancel, fork"
                    .to_owned(),
            ),
            (other, _) => Err(format!("unknown command 'exec {other}'; type help")),
        }
    }

    /// `exec ls [agent_id] [status]`: a word that names a status filters by status, any other
    /// by agent (a unique prefix of a known agent, else taken as given).
    async fn exec_ls(&mut self, filters: &[&str]) -> Answer {
        let mut agent = None;
        let mut status = None;
        for word in filters {
            if let Ok(s) = ExecutionStatus::from_str(word) {
                if status.replace(s.as_str().to_owned()).is_some() {
                    return Err(usage("exec ls"));
                }
            } else if agent.is_none() {
                agent = Some(
                    self.resolve_agent(word)
                        .await
                        .unwrap_or_else(|_| (*word).to_owned()),
                );
            } else {
                return Err(format!(
                    "'{word}' is not a status (pending, running, blocked, completed, failed, cancelled)"
                ));
            }
        }
        let list = self
            .kernel
            .list_executions(agent, status, None, LIST_LIMIT)
            .await
            .map_err(|e| e.to_string())?;
        if list.executions.is_empty() {
            return Ok("no executions".to_owned());
        }
        let headers = ["ID", "AGENT", "STATUS", "CREATED", "UPDATED"];
        let row = |e: &Execution, id: String| {
            vec![
                id,
                e.agent_id.clone(),
                e.status.to_string(),
                e.created_at.to_string(),
                e.updated_at.to_string(),
            ]
        };
        let mut rows: Vec<Vec<String>> = list
            .executions
            .iter()
            .map(|e| row(e, e.id.clone()))
            .collect();
        let natural = natural_width(&headers, &rows);
        if natural > self.width {
            // Narrow terminal: the shortest prefixes that still tell the listed ids apart.
            let ids: Vec<&str> = list.executions.iter().map(|e| e.id.as_str()).collect();
            let len = short_len(&ids);
            rows = list
                .executions
                .iter()
                .map(|e| row(e, e.id.get(..len).unwrap_or(&e.id).to_owned()))
                .collect();
        }
        let mut out = render_table(&headers, &rows, self.width);
        if list.next_cursor.is_some() {
            let _ = write!(out, "\n(newest {LIST_LIMIT} shown)");
        }
        Ok(out)
    }

    pub(super) async fn approval(&mut self, args: &str) -> Answer {
        let (sub, rest) = first_word(args);
        let (prefix, rest) = first_word(rest);
        let (decided_by, rationale) = first_word(rest);
        match sub {
            "ls" | "list" if prefix.is_empty() => {
                let pending = self
                    .kernel
                    .pending_approvals()
                    .await
                    .map_err(|e| e.to_string())?;
                if pending.is_empty() {
                    return Ok("no pending approvals".to_owned());
                }
                let rows: Vec<Vec<String>> = pending.iter().map(approval_row).collect();
                Ok(render_table(
                    &["ID", "EXECUTION", "STEP", "APPROVERS", "TIMEOUT"],
                    &rows,
                    self.width,
                ))
            }
            "grant" | "deny" if !prefix.is_empty() && !decided_by.is_empty() => {
                let id = self.resolve_approval(prefix).await?;
                let result = if sub == "grant" {
                    self.kernel.grant(&id, decided_by, rationale).await
                } else {
                    self.kernel.deny(&id, decided_by, rationale).await
                };
                result.map_err(|e| e.to_string())?;
                let verb = if sub == "grant" { "granted" } else { "denied" };
                Ok(format!("{verb} approval {id} (by {decided_by})"))
            }
            "ls" | "list" => Err(usage("approval ls")),
            "grant" => Err(usage("approval grant")),
            "deny" => Err(usage("approval deny")),
            "" => Err("approval needs a subcommand: ls, grant, deny".to_owned()),
            other => Err(format!("unknown command 'approval {other}'; type help")),
        }
    }

    /// Follows an execution: new events (polled every [`WATCH_POLL`]) and live deltas, until
    /// the execution is terminal or [`Interrupt::interrupt`] is called.
    async fn watch(&mut self, id: &str) -> Answer {
        let mut stop = self.interrupt.generation.subscribe();
        stop.mark_unchanged();
        // An unknown execution (or a full subscriber table) only means no live deltas.
        let mut deltas = self.kernel.subscribe(id).await.ok();
        let mut collected = Vec::new();
        let width = self.width;
        let mut emit = |line: String| {
            let line = fit(&line, width);
            match &mut self.sink {
                Some(sink) => sink(&line),
                None => collected.push(line),
            }
        };
        emit(format!("watching {id} (Ctrl-C stops)"));
        let mut after = 0;
        let end = loop {
            // Read the status before the log: a terminal status means its events are written.
            let exec = self.kernel.execution(id).await.map_err(|e| e.to_string())?;
            loop {
                let page = self
                    .kernel
                    .events(id, after, 1000)
                    .await
                    .map_err(|e| e.to_string())?;
                let Some(last) = page.last() else { break };
                after = last.event_seq;
                for event in &page {
                    emit(event_row(event).join("  "));
                }
            }
            if exec.status.is_terminal() {
                let reason = if exec.failure_reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", exec.failure_reason)
                };
                break format!("execution {id} is {}{reason}", exec.status);
            }
            let tick = tokio::time::sleep(WATCH_POLL);
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    () = &mut tick => break,
                    changed = stop.changed() => {
                        if changed.is_ok() {
                            return finish(collected, &mut self.sink, format!("stopped watching {id}"));
                        }
                    }
                    frame = async { match deltas.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    } } => match frame {
                        Some(frame) => emit(format!("  [{}#{}] {}", short_step(&frame.step_id), frame.seq, clean(&frame.data))),
                        None => deltas = None,
                    },
                }
            }
        };
        finish(collected, &mut self.sink, end)
    }
}

/// Ends a watch: the final line goes to the sink (or joins the collected lines); the answer is
/// whatever was not already written.
fn finish(mut collected: Vec<String>, sink: &mut Option<Sink>, last: String) -> Answer {
    match sink {
        Some(sink) => {
            sink(&last);
            Ok(String::new())
        }
        None => {
            collected.push(last);
            Ok(collected.join("\n"))
        }
    }
}
