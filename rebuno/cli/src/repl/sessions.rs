//! `session …`: the turns of one agent's session, oldest first (`ls`).

use super::commands::{first_word, usage};
use super::render::render_table;
use super::{Answer, Repl};
use rebuno::store::ExecutionQuery;

impl Repl {
    pub(super) async fn session(&mut self, args: &str) -> Answer {
        let (sub, rest) = first_word(args);
        let words: Vec<&str> = rest.split_whitespace().collect();
        match (sub, words.as_slice()) {
            ("ls" | "list", [agent, session]) => {
                let agent_id = self.resolve_agent(agent).await?;
                let list = self
                    .kernel
                    .list_executions_matching(ExecutionQuery {
                        agent_id: Some(agent_id),
                        session: Some((*session).to_owned()),
                        ..ExecutionQuery::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                if list.executions.is_empty() {
                    return Ok(format!("no turns in session {session}"));
                }
                let rows: Vec<Vec<String>> = list
                    .executions
                    .iter()
                    .rev()
                    .map(|e| {
                        vec![
                            e.id.clone(),
                            e.status.to_string(),
                            e.parent_execution_id.clone(),
                            e.created_at.to_string(),
                        ]
                    })
                    .collect();
                let mut out =
                    render_table(&["ID", "STATUS", "CONTINUES", "CREATED"], &rows, self.width);
                if list.next_cursor.is_some() {
                    out.push_str("\n(newest turns shown)");
                }
                Ok(out)
            }
            ("ls" | "list", _) => Err(usage("session ls")),
            ("", _) => Err("session needs a subcommand: ls".to_owned()),
            (other, _) => Err(format!("unknown command 'session {other}'; type help")),
        }
    }
}
