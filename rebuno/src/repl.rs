//! The operator REPL of `rebuno dev` / `rebuno server`: a command interpreter over a [`Kernel`]
//! (`agent …`, `exec …`, `approval …`, `help`, `quit`) that answers with the text to print.
//!
//! This module owns the command language, unique-prefix id resolution, the width-fitting table
//! renderer and `exec watch`. It never touches the terminal: the binary reads lines (with
//! `rustyline` and the history file [`HISTORY_FILE`]), feeds them to [`Repl::run_line`], prints
//! the answer and, while a watch runs, forwards Ctrl-C to [`Interrupt::interrupt`]. Tests drive
//! [`Repl::run_line`] directly.

use crate::Kernel;
use crate::protocol::{
    Agent, Approval, CreateExecutionRequest, Event, Execution, ExecutionStatus,
    RegisterAgentRequest,
};
use serde_json::Value;
use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::watch;

/// Name of the history file, in the user's home directory.
pub const HISTORY_FILE: &str = ".rebuno_repl_history";
/// Terminal width used when neither the terminal nor `COLUMNS` tells.
pub const DEFAULT_WIDTH: usize = 100;
/// Smallest width the REPL lays tables out for.
pub const MIN_WIDTH: usize = 20;
/// How many executions an id-prefix lookup scans, newest first.
pub const PREFIX_SCAN_CAP: usize = 2_000;
/// How often `exec watch` polls the event log.
pub const WATCH_POLL: Duration = Duration::from_millis(250);
/// Executions `exec ls` shows (the newest).
pub const LIST_LIMIT: usize = 50;
/// Shortest prefix a narrow `exec ls` shortens ids to.
const MIN_SHORT_ID: usize = 8;
/// Ids an ambiguity error lists.
const AMBIGUOUS_SHOWN: usize = 5;

/// What a line asks the caller to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Print this text (nothing when empty); it ends without a newline.
    Print(String),
    /// Leave the REPL (and, in the binary, shut the process down).
    Quit,
}

impl Outcome {
    /// The text to print; empty for [`Outcome::Quit`].
    pub fn text(&self) -> &str {
        match self {
            Outcome::Print(text) => text,
            Outcome::Quit => "",
        }
    }
}

/// Stops a running `exec watch` from another task or thread (the binary's Ctrl-C handler).
#[derive(Debug, Clone)]
pub struct Interrupt {
    generation: watch::Sender<u64>,
}

impl Interrupt {
    /// Stops the watch in progress, if any; returns whether one was running (so the caller
    /// knows whether Ctrl-C was consumed).
    pub fn interrupt(&self) -> bool {
        let watching = self.generation.receiver_count() > 0;
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
        watching
    }
}

/// Where `exec watch` writes lines as they happen; without one they are collected into the
/// answer.
pub type Sink = Box<dyn FnMut(&str) + Send + Sync>;

/// The command interpreter. One per terminal; commands run one at a time.
pub struct Repl {
    kernel: Kernel,
    width: usize,
    interrupt: Interrupt,
    sink: Option<Sink>,
}

impl std::fmt::Debug for Repl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repl")
            .field("kernel", &self.kernel)
            .field("width", &self.width)
            .finish_non_exhaustive()
    }
}

/// The width of the terminal on stdout, else `COLUMNS`, else [`DEFAULT_WIDTH`].
pub fn terminal_width() -> usize {
    if let Some((terminal_size::Width(w), _)) = terminal_size::terminal_size()
        && w > 0
    {
        return usize::from(w);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&w| w > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// The history file: `$HOME/.rebuno_repl_history` (`USERPROFILE` on Windows); `None` without
/// a home directory.
pub fn history_path() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .map(|h| std::path::PathBuf::from(h).join(HISTORY_FILE))
}

/// The history entry for a line: `None` for a blank line; `agent add` keeps its secret out of
/// the history file (replaced by `<secret>`).
pub fn history_entry(line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.len() >= 5 && words[0] == "agent" && words[1] == "add" {
        return Some(format!("agent add {} {} <secret>", words[2], words[3]));
    }
    Some(line.to_owned())
}

const HELP: &[(&str, &str)] = &[
    (
        "agent ls",
        "list agents: id, webhook url, policy, registration time",
    ),
    ("agent get <id>", "show one agent and its policy bundle"),
    (
        "agent add <id> <webhook_url> <secret>",
        "register (or update) an agent",
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
    ("exec events <id>", "list an execution's events"),
    (
        "exec watch <id>",
        "follow an execution's events and live output until it ends (Ctrl-C stops)",
    ),
    ("exec cancel <id>", "cancel an execution"),
    ("approval ls", "list pending approvals"),
    (
        "approval grant <id> <decided_by> [rationale...]",
        "grant a pending approval",
    ),
    (
        "approval deny <id> <decided_by> [rationale...]",
        "deny a pending approval",
    ),
    ("help", "show this list"),
    ("quit | exit", "leave (Ctrl-D too); shuts the kernel down"),
];

/// Splits off the first whitespace-separated word; the rest keeps its inner spacing.
fn first_word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

fn usage(command: &str) -> String {
    let usage = HELP
        .iter()
        .find(|(c, _)| c.starts_with(command) && c[command.len()..].starts_with([' ', '\0']))
        .or_else(|| HELP.iter().find(|(c, _)| *c == command))
        .map_or(command, |(c, _)| c);
    format!("usage: {usage}")
}

/// Which kind of id a prefix names, for the messages.
#[derive(Clone, Copy)]
enum Kind {
    Agent,
    Execution,
    Approval,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Agent => "agent",
            Kind::Execution => "execution",
            Kind::Approval => "approval",
        }
    }
}

/// Picks the one id `prefix` names among `ids`: an exact match wins, else a unique prefix.
fn pick(kind: Kind, prefix: &str, ids: &[String], capped: bool) -> Result<String, String> {
    if prefix.is_empty() {
        return Err(format!("an {} id is required", kind.noun()));
    }
    if let Some(exact) = ids.iter().find(|id| *id == prefix) {
        return Ok(exact.clone());
    }
    let matches: Vec<&String> = ids.iter().filter(|id| id.starts_with(prefix)).collect();
    let note = if capped {
        format!(" (only the newest {PREFIX_SCAN_CAP} executions were searched)")
    } else {
        String::new()
    };
    match matches.as_slice() {
        [] => Err(format!("no {} matches '{prefix}'{note}", kind.noun())),
        [one] => Ok((*one).clone()),
        many => {
            let shown: Vec<&str> = many
                .iter()
                .take(AMBIGUOUS_SHOWN)
                .map(|s| s.as_str())
                .collect();
            let more = if many.len() > AMBIGUOUS_SHOWN {
                format!(", … ({} more)", many.len() - AMBIGUOUS_SHOWN)
            } else {
                String::new()
            };
            Err(format!(
                "'{prefix}' is ambiguous: {}{more}",
                shown.join(", ")
            ))
        }
    }
}

/// Replaces control characters (newlines, tabs, escapes) with spaces so a cell stays one line.
fn clean(cell: &str) -> String {
    cell.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `cell` cut to `width` characters, ending in `…` when cut.
fn fit(cell: &str, width: usize) -> String {
    if cell.chars().count() <= width {
        return cell.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = cell.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// Renders a table whose every line is at most `width` characters: columns separated by two
/// spaces, the widest columns cut (with `…`) first until the table fits.
pub fn render_table(headers: &[&str], rows: &[Vec<String>], width: usize) -> String {
    const GAP: usize = 2;
    let columns = headers.len();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            (0..columns)
                .map(|i| clean(r.get(i).map_or("", String::as_str)))
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let total = |widths: &[usize]| widths.iter().sum::<usize>() + GAP * columns.saturating_sub(1);
    // Shrink the widest column, one character at a time, down to three characters each.
    while total(&widths) > width {
        let Some((i, &w)) = widths.iter().enumerate().max_by_key(|&(_, w)| *w) else {
            break;
        };
        if w <= 3 {
            break;
        }
        widths[i] = w - 1;
    }
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, (cell, &w)) in cells.iter().zip(&widths).enumerate() {
            let cell = fit(cell, w);
            if i + 1 == columns {
                out.push_str(&cell);
            } else {
                let pad = w - cell.chars().count() + GAP;
                out.push_str(&cell);
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        // Still too wide only when every column is at its minimum: cut the line itself.
        fit(out.trim_end(), width)
    };
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    let mut lines = vec![line(&header)];
    lines.extend(rows.iter().map(|r| line(r)));
    lines.join("\n")
}

/// Compact JSON, for cells and one-line summaries.
fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// The shortest prefix length (at least [`MIN_SHORT_ID`]) that keeps `ids` distinct.
fn short_len(ids: &[&str]) -> usize {
    let longest = ids.iter().map(|i| i.len()).max().unwrap_or(0);
    let mut len = MIN_SHORT_ID;
    while len < longest {
        let mut seen = std::collections::HashSet::new();
        if ids
            .iter()
            .all(|id| seen.insert(id.get(..len).unwrap_or(id)))
        {
            return len;
        }
        len += 1;
    }
    longest
}

type Answer = Result<String, String>;

impl Repl {
    /// An interpreter over `kernel` laying tables out for `width` columns (at least
    /// [`MIN_WIDTH`]).
    pub fn new(kernel: Kernel, width: usize) -> Repl {
        let (generation, _) = watch::channel(0);
        Repl {
            kernel,
            width: width.max(MIN_WIDTH),
            interrupt: Interrupt { generation },
            sink: None,
        }
    }

    /// Sends `exec watch` lines to `sink` as they happen instead of collecting them.
    pub fn with_sink(mut self, sink: Sink) -> Repl {
        self.sink = Some(sink);
        self
    }

    /// The table width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Changes the table width (the terminal was resized); at least [`MIN_WIDTH`].
    pub fn set_width(&mut self, width: usize) {
        self.width = width.max(MIN_WIDTH);
    }

    /// A handle that stops a running `exec watch`.
    pub fn interrupter(&self) -> Interrupt {
        self.interrupt.clone()
    }

    /// The help text: every command with a one-line description.
    pub fn help() -> String {
        let left = HELP.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
        let mut out = String::from("commands (ids may be abbreviated to a unique prefix):");
        for (command, what) in HELP {
            let _ = write!(out, "\n  {command:<left$}  {what}");
        }
        out
    }

    /// Runs one line. Errors come back as `error: <message>` text, an unknown command as
    /// `unknown command '<x>'; type help`; nothing panics on bad input.
    pub async fn run_line(&mut self, line: &str) -> Outcome {
        let (command, rest) = first_word(line.trim());
        let answer = match command {
            "" => Ok(String::new()),
            "quit" | "exit" => return Outcome::Quit,
            "help" | "?" => Ok(Repl::help()),
            "agent" | "agents" => self.agent(rest).await,
            "exec" | "execution" | "executions" => self.exec(rest).await,
            "approval" | "approvals" => self.approval(rest).await,
            other => Err(format!("unknown command '{other}'; type help")),
        };
        Outcome::Print(match answer {
            Ok(text) => text,
            // Not an error of the command: there was no command.
            Err(e) if e.starts_with("unknown command ") => e,
            Err(e) => format!("error: {e}"),
        })
    }

    async fn agent(&mut self, args: &str) -> Answer {
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
                            a.registered_at.clone(),
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
            ("add" | "register", [id, url, secret]) => {
                let agent = self
                    .kernel
                    .register_agent(RegisterAgentRequest {
                        id: (*id).to_owned(),
                        webhook_url: (*url).to_owned(),
                        secret: (*secret).to_owned(),
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

    async fn exec(&mut self, args: &str) -> Answer {
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
                Ok(describe_execution(&exec))
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
            ("watch" | "follow", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                self.watch(&id).await
            }
            ("cancel", [prefix]) => {
                let id = self.resolve_execution(prefix).await?;
                self.kernel.cancel(&id).await.map_err(|e| e.to_string())?;
                Ok(format!("cancelled execution {id}"))
            }
            ("ls" | "list", _) => Err(usage("exec ls")),
            ("create" | "new", _) => Err(usage("exec create")),
            ("get" | "show", _) => Err(usage("exec get")),
            ("events", _) => Err(usage("exec events")),
            ("watch" | "follow", _) => Err(usage("exec watch")),
            ("cancel", _) => Err(usage("exec cancel")),
            ("", _) => {
                Err("exec needs a subcommand: ls, create, get, events, watch, cancel".to_owned())
            }
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
                e.created_at.clone(),
                e.updated_at.clone(),
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

    async fn approval(&mut self, args: &str) -> Answer {
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

    async fn resolve_agent(&self, prefix: &str) -> Result<String, String> {
        let ids: Vec<String> = self
            .kernel
            .agents()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|a| a.id)
            .collect();
        pick(Kind::Agent, prefix, &ids, false)
    }

    async fn resolve_execution(&self, prefix: &str) -> Result<String, String> {
        if prefix.is_empty() {
            return pick(Kind::Execution, prefix, &[], false);
        }
        if self.kernel.execution(prefix).await.is_ok() {
            return Ok(prefix.to_owned());
        }
        let mut ids = Vec::new();
        let mut cursor = None;
        let mut scanned = 0;
        let capped = loop {
            let page = self
                .kernel
                .list_executions(None, None, cursor.take(), 200)
                .await
                .map_err(|e| e.to_string())?;
            scanned += page.executions.len();
            ids.extend(
                page.executions
                    .into_iter()
                    .map(|e| e.id)
                    .filter(|id| id.starts_with(prefix)),
            );
            match page.next_cursor {
                Some(next) if scanned < PREFIX_SCAN_CAP => cursor = Some(next),
                Some(_) => break true,
                None => break false,
            }
        };
        pick(Kind::Execution, prefix, &ids, capped)
    }

    async fn resolve_approval(&self, prefix: &str) -> Result<String, String> {
        if !prefix.is_empty() && self.kernel.approval(prefix).await.is_ok() {
            return Ok(prefix.to_owned());
        }
        let ids: Vec<String> = self
            .kernel
            .pending_approvals()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|a| a.id)
            .collect();
        pick(Kind::Approval, prefix, &ids, false)
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

/// A table's width before any cutting.
fn natural_width(headers: &[&str], rows: &[Vec<String>]) -> usize {
    (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .chain([headers[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .sum::<usize>()
        + 2 * headers.len().saturating_sub(1)
}

/// The first 12 characters of a step id (64 hex digits).
fn short_step(step_id: &str) -> &str {
    step_id.get(..12).unwrap_or(step_id)
}

fn event_row(event: &Event) -> Vec<String> {
    vec![
        event.event_seq.to_string(),
        event.event_type.to_string(),
        event.occurred_at.clone(),
        compact(&event.payload),
    ]
}

fn approval_row(approval: &Approval) -> Vec<String> {
    vec![
        approval.id.clone(),
        approval.execution_id.clone(),
        approval.step_id.clone(),
        approval
            .approver_list()
            .map_or_else(|| "anyone".to_owned(), |list| list.join(",")),
        approval.timeout_at.clone(),
    ]
}

fn describe_agent(agent: &Agent) -> String {
    let mut out = format!(
        "id:          {}\nwebhook url: {}\nregistered:  {}",
        agent.id, agent.webhook_url, agent.registered_at
    );
    if agent.policy_bundle.is_empty() {
        out.push_str("\npolicy:      none");
    } else {
        out.push_str("\npolicy:");
        for line in agent.policy_bundle.lines() {
            let _ = write!(out, "\n  {line}");
        }
    }
    out
}

fn describe_execution(exec: &Execution) -> String {
    let mut out = format!("id:       {}\nagent:    {}", exec.id, exec.agent_id);
    if !exec.agent_version.is_empty() {
        let _ = write!(out, " (version {})", exec.agent_version);
    }
    let _ = write!(
        out,
        "\nstatus:   {}\ncreated:  {}\nupdated:  {}",
        exec.status, exec.created_at, exec.updated_at
    );
    if let Some(deadline) = &exec.deadline_at {
        let _ = write!(out, "\ndeadline: {deadline}");
    }
    if !exec.failure_reason.is_empty() {
        let _ = write!(out, "\nreason:   {}", exec.failure_reason);
    }
    let _ = write!(out, "\ninput:    {}", compact(&exec.input));
    if let Some(output) = &exec.output {
        let _ = write!(out, "\noutput:   {}", compact(output));
    }
    out
}
