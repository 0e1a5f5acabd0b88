//! Rendering: the width-fitting table renderer, short ids, and the one-line descriptions of
//! agents, executions, events and approvals.

use super::MIN_SHORT_ID;
use rebuno::protocol::{Agent, Approval, DispatchWaiting, Event, Execution};
use serde_json::Value;
use std::fmt::Write as _;

/// Replaces control characters (newlines, tabs, escapes) with spaces so a cell stays one line.
pub(super) fn clean(cell: &str) -> String {
    cell.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `cell` cut to `width` characters, ending in `…` when cut.
pub(super) fn fit(cell: &str, width: usize) -> String {
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
pub(super) fn short_len(ids: &[&str]) -> usize {
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

/// A table's width before any cutting.
pub(super) fn natural_width(headers: &[&str], rows: &[Vec<String>]) -> usize {
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
pub(super) fn short_step(step_id: &str) -> &str {
    step_id.get(..12).unwrap_or(step_id)
}

pub(super) fn event_row(event: &Event) -> Vec<String> {
    vec![
        event.event_seq.to_string(),
        event.event_type.to_string(),
        event.occurred_at.to_string(),
        compact(&event.payload),
    ]
}

/// One event whole (`exec event`): a heading line, then the payload as indented JSON, cut
/// nowhere (control characters inside strings stay escaped, as JSON writes them).
pub(super) fn describe_event(event: &Event) -> String {
    let payload =
        serde_json::to_string_pretty(&event.payload).unwrap_or_else(|_| event.payload.to_string());
    format!(
        "event {} of execution {}: {} at {}\n{payload}",
        event.event_seq,
        clean(&event.execution_id),
        event.event_type,
        clean(&event.occurred_at)
    )
}

pub(super) fn approval_row(approval: &Approval) -> Vec<String> {
    vec![
        approval.id.clone(),
        approval.execution_id.clone(),
        approval.step_id.clone(),
        approval
            .approver_list()
            .map_or_else(|| "anyone".to_owned(), |list| list.join(",")),
        approval.timeout_at.to_string(),
    ]
}

pub(super) fn describe_agent(agent: &Agent) -> String {
    let mut out = format!(
        "id:          {}\nwebhook url: {}\nregistered:  {}",
        agent.id, agent.webhook_url, agent.registered_at
    );
    if let Some(seconds) = agent.lease_timeout_seconds {
        let _ = write!(out, "\nlease:       {seconds} s");
    }
    if let Some(retry) = &agent.dispatch_retry {
        let text = serde_json::to_string(retry).unwrap_or_default();
        let _ = write!(out, "\nretry:       {text}");
    }
    if let Some(meta) = &agent.metadata {
        if !meta.description.is_empty() {
            let _ = write!(out, "\ndescription: {}", meta.description);
        }
        if let Some(schema) = &meta.input_schema {
            let _ = write!(out, "\ninput:       {}", compact(schema));
        }
        if let Some(schema) = &meta.output_schema {
            let _ = write!(out, "\noutput:      {}", compact(schema));
        }
    }
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

/// An execution, and the delivery it waits to retry (`waiting`: its agent is down or refuses
/// it).
pub(super) fn describe_execution(exec: &Execution, waiting: Option<&DispatchWaiting>) -> String {
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
    if let Some(w) = waiting {
        let _ = write!(
            out,
            "\nwaiting:  for its agent: delivery attempt {} failed: {}\n          next try at {}",
            w.attempt, w.last_error, w.next_attempt_at
        );
    }
    if !exec.session.is_empty() {
        let _ = write!(out, "\nsession:  {}", exec.session);
    }
    if !exec.parent_execution_id.is_empty() {
        let _ = write!(out, "\ncontinues {}", exec.parent_execution_id);
    }
    if !exec.forked_from.is_empty() {
        let _ = write!(
            out,
            "\nforked:   from {} at seq {}",
            exec.forked_from, exec.fork_seq
        );
    }
    if let Some(parent) = &exec.spawned_by {
        let _ = write!(
            out,
            "\nspawned:  by {} step {}",
            parent.execution_id, parent.step_id
        );
    }
    if !exec.policy_bundle.is_empty() {
        // The execution's own bundle (a fork's), which narrows its agent's.
        let _ = write!(
            out,
            "\npolicy:   narrows the agent's, set by {}:",
            exec.policy_bundle_set_by
        );
        for line in exec.policy_bundle.lines() {
            let _ = write!(out, "\n  {line}");
        }
    }
    let _ = write!(out, "\ninput:    {}", compact(&exec.input));
    if let Some(output) = &exec.output {
        let _ = write!(out, "\noutput:   {}", compact(output));
    }
    if let Some(state) = &exec.state {
        let _ = write!(out, "\nstate:    {}", compact(state));
    }
    out
}
