//! The receipt-native example agents, written with `#[receipt::receipts]`, `#[receipt::view]`
//! and `#[receipt::agent]`:
//!
//! - [`hello`]: `hello-agent`, one action (`complete`) to the goal;
//! - [`human_loop`]: `human-loop`, a `human` action (`approve`) that blocks the run until an
//!   `approval.received` receipt answers it;
//! - [`merge`]: `merge`, an action generates candidates, a merge policy scores them and applies
//!   one (`draft.finalized`, emitted by the policy's `on_result`);
//! - [`assistant_tool`]: `assistant-tool`, an `assistant` action (`query` side effects) that
//!   asks an OpenAI-compatible chat-completions endpoint for a draft;
//! - [`remote_notify`]: `remote-notify`, an `external` action (`notify`) that runs remotely,
//!   on a worker behind a rebuno kernel, its send recorded as a rebuno step.
//!
//! [`registry`] registers all five; the `receipt-agents` example is the `receipt` CLI with that
//! registry. Every agent is seeded the way `receipt run` seeds it: a `task.requested` receipt
//! `{ "type": "task.requested", "prompt": <problem> }` with event id `seed:<runId>` ([`seed`]).

use receipt::agent::Registry;
use receipt::{Command, Receipt, Runtime};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// The seed type of every example agent (what `receipt run --problem` appends).
pub const SEED_TYPE: &str = "task.requested";

/// The problem of a run, as the seed carries it (every agent's view reads it).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Task {
    /// The problem text.
    pub prompt: String,
}

/// Seeds `run_stream` as `receipt run` does (idempotent: event id `seed:<runId>`).
pub async fn seed(
    runtime: &Runtime,
    run_id: &str,
    run_stream: &str,
    prompt: &str,
) -> receipt::Result<()> {
    let command = Command::new(vec![json!({"type": SEED_TYPE, "prompt": prompt})])
        .event_id(format!("seed:{run_id}"));
    runtime.execute(run_stream, command).await.map(|_| ())
}

/// Registers the five example agents. `llm_base_url` is the OpenAI-compatible base URL
/// `assistant-tool` calls (for example `http://127.0.0.1:PORT/v1`); without one its action
/// fails with `assistant-tool has no model endpoint configured`.
pub fn registry(llm_base_url: Option<String>) -> Arc<Registry> {
    let registry = Arc::new(Registry::new());
    let result = (|| -> receipt::Result<()> {
        hello::HelloAgent.register(&registry)?;
        human_loop::HumanLoop.register(&registry)?;
        merge::MergeAgent.register(&registry)?;
        assistant_tool::AssistantTool::new(llm_base_url).register(&registry)?;
        remote_notify::RemoteNotify.register(&registry)?;
        Ok(())
    })();
    // The specs are fixed: a refusal is a bug in this file, not a runtime condition.
    if let Err(e) = result {
        panic!("an example agent spec is invalid: {e}");
    }
    registry
}

/// Shortens a digest id for display: `agent_selection_3ef9aa1a…`.
fn short(id: &str) -> String {
    match id.rfind('_') {
        Some(i) if id.len() > i + 9 => format!("{}…", &id[..i + 9]),
        _ => id.to_owned(),
    }
}

/// One line of a control-receipt trace: the index, the type and the fields that say what
/// happened (ids shortened).
pub fn describe(index: usize, receipt: &Receipt) -> String {
    let body = receipt.body();
    let mut fields = Vec::new();
    let text = |v: &Value| v.as_str().map(str::to_owned);
    if let Some(sel) = body.get("inlineSelection") {
        fields.push(format!(
            "(inline selection, {})",
            sel["reason"].as_str().unwrap_or_default()
        ));
    }
    for key in [
        "id",
        "actionId",
        "actionIds",
        "selectionId",
        "invocationId",
        "mergeId",
        "candidateId",
        "reason",
        "outputCount",
        "contentHash",
        "note",
        "error",
        "prompt",
        "result",
        "approved",
        "text",
    ] {
        let Some(v) = body.get(key) else { continue };
        let shown = match key {
            "selectionId" | "invocationId" | "mergeId" => text(v).map(|s| short(&s)),
            "contentHash" => text(v).map(|s| format!("{}…", &s[..s.len().min(12)])),
            _ => Some(match v {
                Value::String(s) => format!("{s:?}"),
                other => other.to_string(),
            }),
        };
        if let Some(shown) = shown {
            fields.push(format!("{key}={shown}"));
        }
    }
    format!(
        "{index:>4}  {:<24} {}",
        receipt.event_type(),
        fields.join(" ")
    )
    .trim_end()
    .to_owned()
}

/// Prints a chain as a control-receipt trace, one [`describe`] line per receipt.
pub fn print_trace(chain: &[Receipt]) {
    for (i, r) in chain.iter().enumerate() {
        println!("{}", describe(i, r));
    }
}

/// A SQLite receipt database in a fresh directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct ExampleDb {
    dir: std::path::PathBuf,
}

impl ExampleDb {
    /// Creates the directory `<tmp>/receipt-example-<name>-<pid>` (emptied first).
    pub fn new(name: &str) -> receipt::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("receipt-example-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(ExampleDb { dir })
    }

    /// The database file.
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.join("receipts.db")
    }

    /// A runtime over the database (created on first use).
    pub fn runtime(&self) -> receipt::Result<Runtime> {
        let store = receipt::SqliteStore::open(self.path())?;
        Ok(Runtime::new(Arc::new(store)))
    }
}

impl Drop for ExampleDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[path = "remote_notify.rs"]
pub mod remote_notify;

pub mod hello {
    //! `hello-agent`: one action, `complete`, answers the task; the answer is the goal.

    use super::Task;
    use receipt::agent::ActionContext;
    use serde::Deserialize;

    /// The answer.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    pub struct Completed {
        /// The answer text.
        pub result: String,
    }

    /// What `hello-agent` reads and writes.
    #[receipt::receipts]
    #[derive(Debug, PartialEq)]
    pub enum HelloReceipts {
        /// The seed.
        #[receipt("task.requested")]
        TaskRequested {
            /// The problem text.
            prompt: String,
        },
        /// The answer; the goal.
        #[receipt("task.completed")]
        TaskCompleted {
            /// The answer text.
            result: String,
        },
    }

    /// The view of a `hello-agent` run.
    #[receipt::view]
    #[derive(Debug)]
    pub struct HelloView {
        /// The task, once seeded.
        #[view(last = "task.requested")]
        pub task: Option<Task>,
        /// The answer, once given.
        #[view(last = "task.completed")]
        pub answer: Option<Completed>,
    }

    /// The `hello-agent` agent (no dependencies).
    #[derive(Debug, Clone, Copy, Default)]
    pub struct HelloAgent;

    #[receipt::agent(id = "hello-agent", version = "1.0.0", receipts = HelloReceipts, view = HelloView)]
    impl HelloAgent {
        /// Answers the task.
        #[action(kind = "action", when = Self::pending)]
        async fn complete(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
            let prompt = ctx
                .view()
                .task
                .as_ref()
                .map(|t| t.prompt.clone())
                .unwrap_or_default();
            ctx.emit(HelloReceipts::TaskCompleted {
                result: format!("Hello! You asked: {prompt}"),
            })
            .await
        }

        fn pending(view: &HelloView) -> bool {
            view.task.is_some() && view.answer.is_none()
        }

        #[goal]
        fn done(view: &HelloView) -> bool {
            view.answer.is_some()
        }
    }
}

pub mod human_loop {
    //! `human-loop`: a `human` action, `approve`, waits for a person. Its `response_when` is
    //! false until an `approval.received` receipt is on the run, so the first pass ends with
    //! `run.blocked` (`waiting for a correlated response to human action 'approve'`); once the
    //! answer is appended (`receipt append <run> approval.received '{"approved":true}'`), the
    //! next pass records `human.responded`, runs the action and completes.

    use super::Task;
    use receipt::agent::{ActionContext, ResponseContext};
    use serde::Deserialize;

    /// A person's answer.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    pub struct Approval {
        /// Whether they approved.
        pub approved: bool,
        /// Who answered, when given.
        #[serde(default)]
        pub by: Option<String>,
    }

    /// The outcome.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    pub struct Outcome {
        /// What happened to the task.
        pub result: String,
        /// Whether it was approved.
        pub approved: bool,
    }

    /// What `human-loop` reads and writes.
    #[receipt::receipts]
    #[derive(Debug, PartialEq)]
    pub enum HumanLoopReceipts {
        /// The seed.
        #[receipt("task.requested")]
        TaskRequested {
            /// The problem text.
            prompt: String,
        },
        /// A person's answer (appended from outside the agent).
        #[receipt("approval.received")]
        ApprovalReceived {
            /// Whether they approved.
            approved: bool,
            /// Who answered.
            by: Option<String>,
        },
        /// The outcome; the goal.
        #[receipt("task.completed")]
        TaskCompleted {
            /// What happened to the task.
            result: String,
            /// Whether it was approved.
            approved: bool,
        },
    }

    /// The view of a `human-loop` run.
    #[receipt::view]
    #[derive(Debug)]
    pub struct HumanLoopView {
        /// The task, once seeded.
        #[view(last = "task.requested")]
        pub task: Option<Task>,
        /// The latest answer, once given.
        #[view(last = "approval.received")]
        pub approval: Option<Approval>,
        /// The outcome, once recorded.
        #[view(last = "task.completed")]
        pub outcome: Option<Outcome>,
    }

    /// The `human-loop` agent.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct HumanLoop;

    #[receipt::agent(id = "human-loop", version = "1.0.0", receipts = HumanLoopReceipts, view = HumanLoopView)]
    impl HumanLoop {
        /// Records the person's decision once it has arrived.
        #[action(kind = "human", when = Self::pending, response_when = Self::answered)]
        async fn approve(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
            let view = ctx.view();
            let prompt = view
                .task
                .as_ref()
                .map(|t| t.prompt.as_str())
                .unwrap_or_default();
            let approval = view.approval.as_ref();
            let approved = approval.is_some_and(|a| a.approved);
            let by = approval
                .and_then(|a| a.by.clone())
                .unwrap_or_else(|| "a human".to_owned());
            let verdict = if approved { "approved" } else { "rejected" };
            ctx.emit(HumanLoopReceipts::TaskCompleted {
                result: format!("{verdict} by {by}: {prompt}"),
                approved,
            })
            .await
        }

        fn pending(view: &HumanLoopView) -> bool {
            view.task.is_some() && view.outcome.is_none()
        }

        fn answered(ctx: &ResponseContext<Self>) -> bool {
            ctx.view().approval.is_some()
        }

        #[goal]
        fn done(view: &HumanLoopView) -> bool {
            view.outcome.is_some()
        }
    }
}

pub mod merge {
    //! `merge`: the `generate` action writes three candidate drafts; after it commits, the
    //! merge policy `best-draft` scores every candidate (`coverage` of the prompt's words,
    //! numbered `steps`, `words`), chooses the best (highest coverage, then most steps, then
    //! fewest words) and applies it: its `on_result` emits `draft.finalized`, which is the goal.
    //! The receipts: `merge.started`, `merge.selected` (with every score), `merge.output.manifest`,
    //! `draft.finalized`, `merge.applied`.

    use super::Task;
    use receipt::agent::{
        ActionContext, MergeCandidate, MergeContext, MergeDecision, MergePolicy, MergeScoreVector,
        ScoredCandidate,
    };
    use serde::Deserialize;
    use serde_json::Value;

    /// One candidate draft.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    pub struct Candidate {
        /// The candidate's id.
        pub id: String,
        /// Its text.
        pub text: String,
    }

    /// The applied draft.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Finalized {
        /// The chosen candidate.
        pub candidate_id: String,
        /// Its text.
        pub text: String,
    }

    /// What `merge` reads and writes.
    #[receipt::receipts]
    #[derive(Debug, PartialEq)]
    pub enum MergeReceipts {
        /// The seed.
        #[receipt("task.requested")]
        TaskRequested {
            /// The problem text.
            prompt: String,
        },
        /// One candidate draft.
        #[receipt("candidate.generated")]
        CandidateGenerated {
            /// The candidate's id.
            id: String,
            /// Its text.
            text: String,
        },
        /// The applied draft; the goal.
        #[receipt("draft.finalized")]
        DraftFinalized {
            /// The chosen candidate.
            #[serde(rename = "candidateId")]
            candidate_id: String,
            /// Its text.
            text: String,
        },
    }

    /// The view of a `merge` run.
    #[receipt::view]
    #[derive(Debug)]
    pub struct MergeView {
        /// The task, once seeded.
        #[view(last = "task.requested")]
        pub task: Option<Task>,
        /// Every candidate, in order.
        #[view(all = "candidate.generated")]
        pub candidates: Vec<Candidate>,
        /// The applied draft, once chosen.
        #[view(last = "draft.finalized")]
        pub finalized: Option<Finalized>,
    }

    /// The `merge` agent.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct MergeAgent;

    /// The three drafts `generate` writes for `prompt`, as `(id, text)`.
    pub fn drafts(prompt: &str) -> [(&'static str, String); 3] {
        [
            ("echo", prompt.to_owned()),
            (
                "outline",
                format!("1. Restate: {prompt}. 2. Answer it. 3. Check the answer."),
            ),
            (
                "ramble",
                format!("Well, about {prompt}: there is a lot one could say, and then some more."),
            ),
        ]
    }

    fn words(text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    }

    /// The score of `text` against the words of `prompt`: `coverage` (share of the prompt's
    /// words it contains), `steps` (numbered steps `1.`, `2.`, ...) and `words`.
    pub fn score(text: &str, prompt: &str) -> MergeScoreVector {
        let asked = words(prompt);
        let have = words(text);
        let covered = asked.iter().filter(|w| have.contains(w)).count();
        let coverage = if asked.is_empty() {
            1.0
        } else {
            covered as f64 / asked.len() as f64
        };
        let steps = (1..10)
            .take_while(|n| text.contains(&format!("{n}. ")))
            .count();
        [
            ("coverage".to_owned(), coverage),
            ("steps".to_owned(), steps as f64),
            ("words".to_owned(), have.len() as f64),
        ]
        .into_iter()
        .collect()
    }

    /// Highest coverage, then most steps, then fewest words (then the first).
    pub fn choose(scored: &[ScoredCandidate]) -> MergeDecision {
        let key = |s: &ScoredCandidate| {
            let get = |k: &str| s.score.get(k).copied().unwrap_or(0.0);
            (get("coverage"), get("steps"), -get("words"))
        };
        let best = scored.iter().reduce(|best, s| {
            let (a, b) = (key(s), key(best));
            let better =
                a.0.total_cmp(&b.0)
                    .then(a.1.total_cmp(&b.1))
                    .then(a.2.total_cmp(&b.2));
            if better.is_gt() { s } else { best }
        });
        MergeDecision::new(best.map(|s| s.candidate.id.clone()).unwrap_or_default())
            .because("highest coverage, then most steps, then fewest words")
    }

    #[receipt::agent(
        id = "merge",
        version = "1.0.0",
        receipts = MergeReceipts,
        view = MergeView,
        merge = Self::best_draft
    )]
    impl MergeAgent {
        /// Writes the candidate drafts.
        #[action(kind = "action", when = Self::needs_candidates)]
        async fn generate(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
            let prompt = ctx
                .view()
                .task
                .as_ref()
                .map(|t| t.prompt.clone())
                .unwrap_or_default();
            for (id, text) in drafts(&prompt) {
                ctx.emit(MergeReceipts::CandidateGenerated {
                    id: id.to_owned(),
                    text,
                })
                .await?;
            }
            Ok(())
        }

        fn needs_candidates(view: &MergeView) -> bool {
            view.task.is_some() && view.candidates.is_empty()
        }

        /// The merge policy: score the candidates, apply the best one.
        fn best_draft() -> MergePolicy<Self> {
            receipt::agent::merge(
                "best-draft",
                "1",
                |ctx: &MergeContext<Self>| {
                    if ctx.view().finalized.is_some() {
                        return Vec::new();
                    }
                    ctx.view()
                        .candidates
                        .iter()
                        .map(|c| MergeCandidate::new(c.id.clone(), Value::String(c.text.clone())))
                        .collect()
                },
                |ctx: &MergeContext<Self>| {
                    ctx.view()
                        .task
                        .as_ref()
                        .map(|t| t.prompt.clone())
                        .unwrap_or_default()
                },
                |c: &MergeCandidate, prompt: &String, _: &MergeContext<Self>| {
                    score(c.data.as_str().unwrap_or_default(), prompt)
                },
                choose,
            )
            .on_result(|_agent, ctx| async move {
                let chosen = ctx.chosen().candidate.clone();
                ctx.emit(MergeReceipts::DraftFinalized {
                    candidate_id: chosen.id,
                    text: chosen.data.as_str().unwrap_or_default().to_owned(),
                })
                .await
            })
        }

        #[goal]
        fn done(view: &MergeView) -> bool {
            view.finalized.is_some()
        }
    }
}

pub mod assistant_tool {
    //! `assistant-tool`: an `assistant` action, `draft`, asks an OpenAI-compatible
    //! chat-completions endpoint (`POST <base>/chat/completions`) for a reply to the task and
    //! records it. A model call is a `query`: after a lost lease it may run again, and its
    //! output is still appended at most once (the manifest binds it).

    use super::Task;
    use receipt::agent::ActionContext;
    use serde::Deserialize;
    use serde_json::{Value, json};
    use std::time::Duration;

    /// The model name sent with every request.
    pub const MODEL: &str = "gpt-4o-mini";

    /// The recorded reply.
    #[derive(Debug, Clone, PartialEq, Deserialize)]
    pub struct Reply {
        /// The model's text.
        pub result: String,
        /// The model that answered.
        pub model: String,
    }

    /// What `assistant-tool` reads and writes.
    #[receipt::receipts]
    #[derive(Debug, PartialEq)]
    pub enum AssistantReceipts {
        /// The seed.
        #[receipt("task.requested")]
        TaskRequested {
            /// The problem text.
            prompt: String,
        },
        /// The model's reply; the goal.
        #[receipt("task.completed")]
        TaskCompleted {
            /// The model's text.
            result: String,
            /// The model that answered.
            model: String,
        },
    }

    /// The view of an `assistant-tool` run.
    #[receipt::view]
    #[derive(Debug)]
    pub struct AssistantView {
        /// The task, once seeded.
        #[view(last = "task.requested")]
        pub task: Option<Task>,
        /// The reply, once recorded.
        #[view(last = "task.completed")]
        pub reply: Option<Reply>,
    }

    /// The `assistant-tool` agent: its fields are the model endpoint its action calls.
    #[derive(Debug, Clone)]
    pub struct AssistantTool {
        /// The OpenAI-compatible base URL (`.../v1`); `None` fails the action.
        pub base_url: Option<String>,
        /// Sent as a bearer token when set.
        pub api_key: Option<String>,
        /// The model name.
        pub model: String,
        client: reqwest::Client,
    }

    impl AssistantTool {
        /// An agent calling `base_url` with [`MODEL`] and no API key.
        pub fn new(base_url: Option<String>) -> Self {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap_or_default();
            AssistantTool {
                base_url,
                api_key: None,
                model: MODEL.to_owned(),
                client,
            }
        }

        /// Sets the API key.
        pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
            self.api_key = Some(key.into());
            self
        }

        /// One chat completion: the assistant message's text.
        pub async fn complete(&self, prompt: &str) -> receipt::Result<String> {
            let Some(base) = self.base_url.as_deref() else {
                return Err(receipt::Error::msg(
                    "assistant-tool has no model endpoint configured",
                ));
            };
            let url = format!("{}/chat/completions", base.trim_end_matches('/'));
            let request = json!({
                "model": self.model,
                "messages": [
                    {"role": "system", "content": "You draft short, helpful replies."},
                    {"role": "user", "content": prompt},
                ],
            });
            let mut call = self
                .client
                .post(&url)
                .header("content-type", "application/json")
                .body(request.to_string());
            if let Some(key) = &self.api_key {
                call = call.bearer_auth(key);
            }
            let failed = |e: &dyn std::fmt::Display| {
                receipt::Error::msg(format!("model call to {url} failed: {e}"))
            };
            let response = call.send().await.map_err(|e| failed(&e))?;
            let status = response.status();
            let bytes = response.bytes().await.map_err(|e| failed(&e))?;
            if !status.is_success() {
                let body = String::from_utf8_lossy(&bytes);
                let short: String = body.chars().take(200).collect();
                return Err(failed(&format!("HTTP {status}: {short}")));
            }
            let reply: Value = serde_json::from_slice(&bytes).map_err(|e| failed(&e))?;
            reply["choices"][0]["message"]["content"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| failed(&"the reply has no choices[0].message.content"))
        }
    }

    #[receipt::agent(id = "assistant-tool", version = "1.0.0", receipts = AssistantReceipts, view = AssistantView)]
    impl AssistantTool {
        /// Asks the model for a draft reply.
        #[action(kind = "assistant", side_effects = "query", when = Self::pending)]
        async fn draft(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
            let prompt = ctx
                .view()
                .task
                .as_ref()
                .map(|t| t.prompt.clone())
                .unwrap_or_default();
            let result = self.complete(&prompt).await?;
            ctx.emit(AssistantReceipts::TaskCompleted {
                result,
                model: self.model.clone(),
            })
            .await
        }

        fn pending(view: &AssistantView) -> bool {
            view.task.is_some() && view.reply.is_none()
        }

        #[goal]
        fn done(view: &AssistantView) -> bool {
            view.reply.is_some()
        }
    }
}
