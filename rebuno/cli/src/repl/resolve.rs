//! Unique-prefix id resolution: an agent, execution or approval named by an exact id or by a
//! prefix only one id starts with.

use super::{AMBIGUOUS_SHOWN, PREFIX_SCAN_CAP, Repl};

/// Which kind of id a prefix names, for the messages.
#[derive(Clone, Copy)]
pub(super) enum Kind {
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
pub(super) fn pick(
    kind: Kind,
    prefix: &str,
    ids: &[String],
    capped: bool,
) -> Result<String, String> {
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

impl Repl {
    pub(super) async fn resolve_agent(&self, prefix: &str) -> Result<String, String> {
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

    pub(super) async fn resolve_execution(&self, prefix: &str) -> Result<String, String> {
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

    pub(super) async fn resolve_approval(&self, prefix: &str) -> Result<String, String> {
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
