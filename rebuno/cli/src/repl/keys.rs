//! `key …`: API keys from the console (`ls`, `create`, `revoke`), the secret printed once.

use super::commands::{first_word, usage};
use super::render::render_table;
use super::{Answer, Repl};
use rebuno::protocol::{ApiKey, CreateApiKeyRequest, Scope, Timestamp};
use std::str::FromStr;

/// Whether a key authenticates at `now` (RFC 3339).
fn state(key: &ApiKey, now: &Timestamp) -> &'static str {
    if key.revoked_at.is_some() {
        "revoked"
    } else if key.expires_at.as_ref().is_some_and(|at| at <= now) {
        "expired"
    } else {
        "active"
    }
}

impl Repl {
    pub(super) async fn key(&mut self, args: &str) -> Answer {
        let (sub, rest) = first_word(args);
        let words: Vec<&str> = rest.split_whitespace().collect();
        match (sub, words.as_slice()) {
            ("ls" | "list", []) => {
                let keys = self.all_keys().await?;
                if keys.is_empty() {
                    return Ok("no API keys".to_owned());
                }
                let now = Timestamp::from(self.kernel.now());
                let rows: Vec<Vec<String>> = keys
                    .iter()
                    .map(|k| {
                        let scopes: Vec<&str> = k.scopes.iter().map(|s| s.as_str()).collect();
                        vec![
                            k.id.clone(),
                            k.name.clone(),
                            k.subject.clone(),
                            scopes.join(","),
                            k.agent_id.clone(),
                            state(k, &now).to_owned(),
                        ]
                    })
                    .collect();
                Ok(render_table(
                    &["ID", "NAME", "SUBJECT", "SCOPES", "AGENT", "STATE"],
                    &rows,
                    self.width,
                ))
            }
            ("create" | "new", [name, scopes, rest @ ..]) if rest.len() <= 2 => {
                let scopes = scopes
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| Scope::from_str(s).map_err(|e| e.to_string()))
                    .collect::<Result<Vec<_>, _>>()?;
                let req = CreateApiKeyRequest {
                    name: (*name).to_owned(),
                    subject: rest.first().map_or_else(String::new, |s| (*s).to_owned()),
                    agent_id: rest.get(1).map_or_else(String::new, |a| (*a).to_owned()),
                    scopes,
                    ..CreateApiKeyRequest::default()
                };
                let created = self
                    .kernel
                    .create_api_key(req, "")
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "created API key {} (subject {})\nsecret (shown only now): {}",
                    created.api_key.id, created.api_key.subject, created.secret
                ))
            }
            ("revoke" | "rm", [prefix]) => {
                let matching: Vec<ApiKey> = self
                    .all_keys()
                    .await?
                    .into_iter()
                    .filter(|k| k.id.starts_with(prefix))
                    .collect();
                let id = match matching.as_slice() {
                    [one] => one.id.clone(),
                    [] => return Err(format!("no API key matches '{prefix}'")),
                    _ => return Err(format!("'{prefix}' matches several API keys")),
                };
                self.kernel
                    .revoke_api_key(&id)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!("revoked API key {id}"))
            }
            ("ls" | "list", _) => Err(usage("key ls")),
            ("create" | "new", _) => Err(usage("key create")),
            ("revoke" | "rm", _) => Err(usage("key revoke")),
            ("", _) => Err("key needs a subcommand: ls, create, revoke".to_owned()),
            (other, _) => Err(format!("unknown command 'key {other}'; type help")),
        }
    }

    async fn all_keys(&self) -> Result<Vec<ApiKey>, String> {
        self.kernel
            .client()
            .api_keys()
            .await
            .map_err(|e| e.to_string())
    }
}
