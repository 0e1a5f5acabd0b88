//! The provisioning manifest (`--config`): agents, their secrets and policy bundles,
//! upserted at boot.
//!
//! ```yaml
//! agents:
//!   - id: researcher
//!     webhook_url: http://host:5001/webhook
//!     secret: ${RESEARCHER_SECRET}
//!     policy_file: policies/research.yaml   # relative to the manifest's directory
//!     lease_timeout_seconds: 30              # optional; default: the kernel's global lease
//!     dispatch_retry:                        # optional; each field defaults to the kernel's
//!       max_attempts: 0                      # 0: no limit (the kernel's default)
//!       retry_window_seconds: 86400          # give up a day after the dispatch was queued
//!       backoff_cap_seconds: 60              # longest wait between two tries
//! ```
//!
//! `dispatch_retry` holds numbers (no `$VAR` expansion), checked as registration checks them
//! ([`DispatchRetry::check`]).
//!
//! Every string value (`id`, `webhook_url`, `secret`, `policy`, `policy_file`, and
//! `lease_timeout_seconds` when written as a string) goes through shell-style `$VAR` /
//! `${VAR}` expansion with the names of Go's `os.Expand`. `lease_timeout_seconds` is a number
//! of seconds (fractions allowed), checked as registration checks it
//! ([`check_lease_seconds`]). Everything is
//! checked before anything is written, so a bad manifest aborts the boot with its path and the
//! reason and provisions nothing.
//!
//! Deviations from the Go kernel, each so that a mistake is an error at boot rather than a
//! silently different kernel:
//!
//! * a reference to an unset variable refuses the manifest and names the variable (Go leaves
//!   `$VAR` in the text, so a forgotten `export` made the literal `$RESEARCHER_SECRET`, which is
//!   in the manifest for anyone to read, the agent's secret); `$$` writes one literal `$`;
//! * values are expanded after the YAML is parsed, not the file's text before, so a comment that
//!   mentions a variable is only a comment and a variable's value cannot add YAML structure;
//! * unknown keys are refused, so a misspelt `policy_file` is an error rather than an agent
//!   silently left without its policy, and an agent without a secret or with a webhook URL that
//!   registration refuses ([`check_webhook_url`]; the manifest, being the operator's, may carry
//!   user information) is refused here rather than half-way through provisioning.
//!
//! The manifest is the operator's: an agent it names is registered as it says even when it was
//! registered with another webhook URL or secret (a `takeover`), so editing the manifest and
//! restarting moves the agent.

use rebuno::Kernel;
use rebuno::kernel::{WebhookRules, check_webhook_url};
use rebuno::policy::Bundle;
use rebuno::protocol::{Agent, DispatchRetry, RegisterAgentRequest, check_lease_seconds};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A manifest that cannot be used; the message names the file and the reason, e.g.
/// `manifest agents.yaml: agent "x": set policy OR policy_file, not both`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manifest {}: {reason}", path.display())]
pub struct ManifestError {
    /// The manifest file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// One agent to provision, with its policy bundle resolved (inline or read from its file).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestAgent {
    /// Agent id.
    pub id: String,
    /// Where dispatches are delivered.
    pub webhook_url: String,
    /// HMAC secret.
    pub secret: String,
    /// Policy bundle YAML, already validated; empty for none.
    pub policy: String,
    /// The agent's own lease length in seconds, already checked; `None` for the global lease.
    pub lease_timeout_seconds: Option<f64>,
    /// The agent's own dispatch retry policy, already checked; `None` for the kernel's.
    pub dispatch_retry: Option<DispatchRetry>,
}

/// A loaded and validated manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The file it was read from.
    pub path: PathBuf,
    /// The agents, in file order.
    pub agents: Vec<ManifestAgent>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    agents: Option<Vec<AgentEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentEntry {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    webhook_url: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    policy_file: Option<String>,
    /// A number, or a string (expanded, then read as a number).
    #[serde(default)]
    lease_timeout_seconds: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    dispatch_retry: Option<DispatchRetry>,
}

/// The lease length of a manifest entry, expanded (a string) and checked; `None` when absent.
fn manifest_lease(
    value: Option<serde_yaml_ng::Value>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Option<f64>, String> {
    use serde_yaml_ng::Value;
    let seconds = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(text)) => {
            let text = expand_vars(&text, lookup)
                .map_err(|unset| format!("lease_timeout_seconds {unset}"))?;
            text.trim().parse::<f64>().ok()
        }
        Some(_) => None,
    };
    let seconds =
        seconds.ok_or_else(|| "lease_timeout_seconds must be a number of seconds".to_owned())?;
    check_lease_seconds(seconds).map(Some)
}

/// Whether `c` is one of the shell's one-character special parameters (`$*`, `$1`, ...).
fn is_special(c: u8) -> bool {
    matches!(
        c,
        b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-' | b'0'..=b'9'
    )
}

fn is_name_byte(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// Expands `$NAME` and `${NAME}` in `text` with `lookup`. Names follow Go's `os.Expand`: a run
/// of letters, digits and `_` (or one special character such as `$1`); `${...}` takes everything
/// up to the closing brace; a `$` followed by no name is kept; malformed `${` and `${}` are
/// dropped. `$$` is one literal `$`. A name `lookup` does not know is an error carrying the name.
pub fn expand_vars(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, UnsetVariable> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' || i + 1 >= bytes.len() {
            i += 1;
            continue;
        }
        out.push_str(&text[copied..i]);
        let rest = &text[i + 1..];
        let rb = rest.as_bytes();
        // (name, bytes consumed after the `$`)
        let (name, width) = if rb[0] == b'$' {
            out.push('$');
            ("", 1)
        } else if rb[0] == b'{' {
            if rb.len() > 2 && is_special(rb[1]) && rb[2] == b'}' {
                (&rest[1..2], 3)
            } else {
                match rest[1..].find('}') {
                    Some(0) => ("", 2),
                    Some(end) => (&rest[1..=end], end + 2),
                    None => ("", 1),
                }
            }
        } else if is_special(rb[0]) {
            (&rest[..1], 1)
        } else {
            let n = rb.iter().take_while(|c| is_name_byte(**c)).count();
            (&rest[..n], n)
        };
        if !name.is_empty() {
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => return Err(UnsetVariable(name.to_owned())),
            }
        } else if width == 0 {
            out.push('$');
        }
        i += 1 + width;
        copied = i;
    }
    out.push_str(&text[copied..]);
    Ok(out)
}

/// A manifest value references an environment variable that is not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("references ${{{0}}}, which is not set")]
pub struct UnsetVariable(pub String);

impl Manifest {
    /// Reads `path`, expands environment variables, parses and validates it, and reads every
    /// `policy_file` (relative to the manifest's directory).
    pub fn load(path: impl AsRef<Path>) -> Result<Manifest, ManifestError> {
        let path = path.as_ref();
        let fail = |reason: String| ManifestError {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("read: {e}")))?;
        let dir = path.parent().unwrap_or(Path::new(""));
        Manifest::parse(&text, dir, |name| std::env::var(name).ok())
            .map_err(fail)
            .map(|agents| Manifest {
                path: path.to_owned(),
                agents,
            })
    }

    /// Parses manifest text, expanding variables in its values with `lookup`; `policy_file`
    /// paths are relative to `dir`.
    fn parse(
        text: &str,
        dir: &Path,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<ManifestAgent>, String> {
        let doc: Option<Document> =
            serde_yaml_ng::from_str(text).map_err(|e| format!("parse: {e}"))?;
        let entries = doc.and_then(|d| d.agents).unwrap_or_default();
        let mut agents = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let expand = |key: &str, value: Option<String>| {
                expand_vars(&value.unwrap_or_default(), &lookup)
                    .map_err(|unset| format!("agents[{i}]: {key} {unset}"))
            };
            let id = expand("id", entry.id)?;
            if id.trim().is_empty() {
                return Err(format!("agents[{i}]: id is required"));
            }
            let expand = |key: &str, value: Option<String>| {
                expand_vars(&value.unwrap_or_default(), &lookup)
                    .map_err(|unset| format!("agent {id:?}: {key} {unset}"))
            };
            let webhook_url = expand("webhook_url", entry.webhook_url)?;
            let secret = expand("secret", entry.secret)?;
            if secret.is_empty() {
                // The kernel refuses an agent without a secret; say so before writing anything.
                return Err(format!("agent {id:?}: secret is required"));
            }
            let inline = expand("policy", entry.policy)?;
            let file = expand("policy_file", entry.policy_file)?;
            if !inline.is_empty() && !file.is_empty() {
                return Err(format!("agent {id:?}: set policy OR policy_file, not both"));
            }
            let policy = if file.is_empty() {
                inline
            } else {
                let full = dir.join(&file);
                std::fs::read_to_string(&full).map_err(|e| {
                    format!("agent {id:?}: read policy_file: {}: {e}", full.display())
                })?
            };
            if !policy.is_empty() {
                Bundle::parse(&policy)
                    .map_err(|e| format!("agent {id:?}: invalid policy bundle: {e}"))?;
            }
            let lease_timeout_seconds = manifest_lease(entry.lease_timeout_seconds, &lookup)
                .map_err(|e| format!("agent {id:?}: {e}"))?;
            if let Some(retry) = &entry.dispatch_retry {
                retry.check().map_err(|e| format!("agent {id:?}: {e}"))?;
            }
            check_webhook_url(&webhook_url, WebhookRules::IN_PROCESS)
                .map_err(|e| format!("agent {id:?}: {e}"))?;
            agents.push(ManifestAgent {
                id,
                webhook_url,
                secret,
                policy,
                lease_timeout_seconds,
                dispatch_retry: entry.dispatch_retry,
            });
        }
        Ok(agents)
    }

    /// Upserts every agent with its bundle ([`Kernel::provision_agent`]). Agents missing from
    /// the manifest are left alone.
    pub async fn provision(&self, kernel: &Kernel) -> Result<Vec<Agent>, ManifestError> {
        let mut out = Vec::with_capacity(self.agents.len());
        for agent in &self.agents {
            let req = RegisterAgentRequest {
                id: agent.id.clone(),
                webhook_url: agent.webhook_url.clone(),
                secret: agent.secret.clone(),
                lease_timeout_seconds: agent.lease_timeout_seconds,
                dispatch_retry: agent.dispatch_retry,
                // The manifest is the operator's: an agent it names is registered as it says,
                // whatever registered it before.
                takeover: true,
            };
            let provisioned = kernel
                .provision_agent(req, &agent.policy)
                .await
                .map_err(|e| ManifestError {
                    path: self.path.clone(),
                    reason: format!("agent {:?}: {e}", agent.id),
                })?;
            tracing::info!(
                agent_id = %agent.id,
                webhook_url = %rebuno::telemetry::redact_url(&agent.webhook_url),
                policy = !agent.policy.is_empty(),
                "agent provisioned from the manifest"
            );
            out.push(provisioned);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            "1" => Some("one".into()),
            _ => None,
        }
    }

    #[test]
    fn expands_go_names_and_refuses_unset_ones() {
        let cases = [
            ("$A", "alpha"),
            ("${A}", "alpha"),
            ("x$A-y", "xalpha-y"),
            ("x${A}y", "xalphay"),
            ("$EMPTY|", "|"),
            ("$", "$"),
            ("a$", "a$"),
            ("$ x", "$ x"),
            ("${}x", "x"),
            ("${A", "A"),
            ("$1", "one"),
            ("${1}", "one"),
            ("$$", "$"),
            ("p@$$w0rd", "p@$w0rd"),
            ("$$A", "$A"),
            ("é$A€", "éalpha€"),
            ("no vars", "no vars"),
        ];
        for (input, want) in cases {
            assert_eq!(expand_vars(input, env).unwrap(), want, "input {input:?}");
        }
        for (input, unset) in [
            ("$Ay", "Ay"),
            ("${UNSET}", "UNSET"),
            ("x $UNSET y", "UNSET"),
            ("${A B}", "A B"),
            ("$2", "2"),
        ] {
            assert_eq!(
                expand_vars(input, env),
                Err(UnsetVariable(unset.into())),
                "input {input:?}"
            );
        }
        assert_eq!(
            UnsetVariable("S".into()).to_string(),
            "references ${S}, which is not set"
        );
    }

    #[test]
    fn an_unset_variable_refuses_the_manifest_and_is_named() {
        let dir = Path::new("/nonexistent-rebuno-dir");
        let text = "# secret: ${OLD_SECRET} (a comment is not expanded)\nagents:\n  - id: a\n    webhook_url: http://h/$A\n    secret: ${RESEARCHER_SECRET}\n";
        assert_eq!(
            Manifest::parse(text, dir, env).unwrap_err(),
            "agent \"a\": secret references ${RESEARCHER_SECRET}, which is not set"
        );
        let with = |name: &str| match name {
            "RESEARCHER_SECRET" => Some("s3cret".to_owned()),
            other => env(other),
        };
        let agents = Manifest::parse(text, dir, with).unwrap();
        assert_eq!(agents[0].secret, "s3cret");
        assert_eq!(agents[0].webhook_url, "http://h/alpha");
        // A value cannot add YAML structure: it stays one string.
        let sneaky = |name: &str| (name == "S").then(|| "x\n    policy: allow".to_owned());
        let agents = Manifest::parse(
            "agents:\n  - id: a\n    webhook_url: http://h/x\n    secret: $S\n",
            dir,
            sneaky,
        )
        .unwrap();
        assert_eq!(agents[0].secret, "x\n    policy: allow");
        assert_eq!(agents[0].policy, "");
        assert_eq!(
            Manifest::parse("agents:\n  - id: ${WHO}\n", dir, env).unwrap_err(),
            "agents[0]: id references ${WHO}, which is not set"
        );
    }

    #[test]
    fn an_agent_may_declare_its_lease_as_a_number_or_a_variable() {
        let dir = Path::new("/nonexistent-rebuno-dir");
        let lease = |text: &str| {
            let lookup = |name: &str| (name == "LEASE").then(|| "2.5".to_owned());
            Manifest::parse(
                &format!("agents:\n  - id: a\n    webhook_url: http://h/x\n    secret: s\n{text}"),
                dir,
                lookup,
            )
            .map(|agents| agents[0].lease_timeout_seconds)
        };
        assert_eq!(lease(""), Ok(None));
        assert_eq!(lease("    lease_timeout_seconds: 3\n"), Ok(Some(3.0)));
        assert_eq!(lease("    lease_timeout_seconds: 0.5\n"), Ok(Some(0.5)));
        assert_eq!(
            lease("    lease_timeout_seconds: ${LEASE}\n"),
            Ok(Some(2.5))
        );
        for bad in ["0", "-2", "86401", "abc", "[1]", "'${NOPE}'"] {
            let err = lease(&format!("    lease_timeout_seconds: {bad}\n")).unwrap_err();
            assert!(
                err.starts_with("agent \"a\": lease_timeout_seconds "),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_agent_may_declare_its_dispatch_retry_policy() {
        let dir = Path::new("/nonexistent-rebuno-dir");
        let retry = |text: &str| {
            Manifest::parse(
                &format!("agents:\n  - id: a\n    webhook_url: http://h/x\n    secret: s\n{text}"),
                dir,
                |_: &str| None,
            )
            .map(|agents| agents[0].dispatch_retry)
        };
        assert_eq!(retry(""), Ok(None));
        assert_eq!(
            retry("    dispatch_retry:\n      max_attempts: 3\n      backoff_cap_seconds: 5\n"),
            Ok(Some(DispatchRetry {
                max_attempts: Some(3),
                retry_window_seconds: None,
                backoff_cap_seconds: Some(5.0),
            }))
        );
        let err = retry("    dispatch_retry:\n      backoff_cap_seconds: 0\n").unwrap_err();
        assert!(
            err.starts_with("agent \"a\": dispatch_retry.backoff_cap_seconds "),
            "{err}"
        );
        assert!(retry("    dispatch_retry:\n      retries: 3\n").is_err());
    }

    #[test]
    fn parses_and_reports_the_four_boot_errors() {
        let dir = Path::new("/nonexistent-rebuno-dir");
        let parse = |text: &str, dir: &Path| Manifest::parse(text, dir, env);
        let ok = parse(
            "agents:\n  - id: a\n    webhook_url: http://h/x\n    secret: s\n    policy: \"default_action: allow\"\n",
            dir,
        )
        .unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].policy, "default_action: allow");
        assert_eq!(parse("", dir).unwrap(), vec![]);
        assert_eq!(
            parse("agents:\n  - webhook_url: x\n", dir).unwrap_err(),
            "agents[0]: id is required"
        );
        assert_eq!(
            parse("agents:\n  - id: x\n    secret: ''\n", dir).unwrap_err(),
            "agent \"x\": secret is required"
        );
        assert_eq!(
            parse(
                "agents:\n  - id: x\n    secret: s\n    policy: a\n    policy_file: b\n",
                dir
            )
            .unwrap_err(),
            "agent \"x\": set policy OR policy_file, not both"
        );
        let err = parse(
            "agents:\n  - id: x\n    secret: s\n    policy_file: p.yaml\n",
            dir,
        )
        .unwrap_err();
        assert!(
            err.starts_with("agent \"x\": read policy_file: /nonexistent-rebuno-dir/p.yaml: "),
            "{err}"
        );
        let err = parse(
            "agents:\n  - id: x\n    secret: s\n    policy: \"rules:\\n  - then: {decision: allow}\\n\"\n",
            dir,
        )
        .unwrap_err();
        assert!(
            err.starts_with("agent \"x\": invalid policy bundle: "),
            "{err}"
        );
        let err = parse("agents:\n  - id: x\n    polcy_file: p\n", dir).unwrap_err();
        assert!(err.starts_with("parse: "), "{err}");
        // The webhook URL is checked as registration checks it, before anything is written.
        assert_eq!(
            parse("agents:\n  - id: x\n    secret: s\n", dir).unwrap_err(),
            "agent \"x\": webhook_url is required"
        );
        assert_eq!(
            parse(
                "agents:\n  - id: x\n    secret: s\n    webhook_url: ftp://h/\n",
                dir
            )
            .unwrap_err(),
            "agent \"x\": webhook_url scheme must be http or https, not \"ftp\""
        );
    }
}
