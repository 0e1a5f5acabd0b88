//! `receipt new` (scaffold an agent spec from a template) and `receipt run` (run or resume an
//! agent registered in the binary; its remote actions run through a rebuno kernel, named by
//! `--kernel-url`, on the workers of their groups).

use super::db::Db;
use super::kernel::{GovernArgs, KernelArgs};
use super::report::{print_json, print_text};
use super::{CliResult, Failure, fail};
use crate::Command;
use crate::Error;
use crate::agent::{AgentError, ControllerOptions, DynAgent, Registry, RunOutcome, SEED_TYPES};
use crate::receipt::base36;
use crate::sim::{Clock, EntropySource, OsEntropy, SystemClock};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `receipt new <agent-id> [--template basic|assistant-tool|human-loop|merge]`.
#[derive(Debug, Args)]
pub(super) struct NewArgs {
    /// The agent id (kebab-case: ^[a-z][a-z0-9-]*$)
    agent_id: String,
    /// basic | assistant-tool | human-loop | merge (anything else: basic)
    #[arg(long, default_value = "basic")]
    template: String,
    /// The project directory (default: the current directory); the spec goes to src/agents/
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
}

/// `receipt run <agent-id> [--problem <text>] [--run-id] [--stream] [--run-stream]
/// [--kernel-url <url> [--kernel-api-key <key>]]`.
#[derive(Debug, Args)]
#[command(after_help = RUN_HELP)]
pub(super) struct RunArgs {
    /// The id of an agent registered in this binary
    agent_id: String,
    /// The problem a new run is seeded with (its task.requested or prompt.received receipt);
    /// required to start a run. A resumed run keeps the problem it was started with: omit it,
    /// or give the same text
    #[arg(long, alias = "prompt", value_name = "TEXT")]
    problem: Option<String>,
    /// The run id (default run_<base36 now>_<4 random base36 chars>); an existing run resumes
    /// (`receipt streams` lists the runs: agents/<agent-id>/runs/<run-id>)
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    /// The agent's base stream (default agents/<agent-id>)
    #[arg(long, value_name = "STREAM")]
    stream: Option<String>,
    /// The run stream (default <stream>/runs/<run-id>)
    #[arg(long, value_name = "STREAM")]
    run_stream: Option<String>,
    /// Overrides the spec's max_iterations
    #[arg(long, value_name = "N")]
    max_iterations: Option<u32>,
    /// Remote actions go through this rebuno kernel (--kernel-url) to the workers serving
    /// their groups (`receipt worker`); an agent with remote actions needs it
    #[command(flatten)]
    kernel: KernelArgs,
    /// Every selected action decided first by the kernel, under the agent's policy bundle
    #[command(flatten)]
    govern: GovernArgs,
}

/// The end of `receipt run --help`.
const RUN_HELP: &str = "\
Starting and resuming: `run <agent> --problem <text>` starts a new run, seeded with the agent's
task.requested receipt (else prompt.received) holding {\"prompt\": <text>}; `run <agent> --run-id
<id>` resumes that run, whose problem is recorded. An agent that declares neither seed type is
started by appending its first receipts with `receipt append`, then resumed with --run-id.

Remote actions run on the workers of their target group (`receipt worker --group <group>`,
through --kernel-url); an action that names no group is served by the default group,
receipt-chat.

The run's JSON report is the command's output, on stdout; exit 0 when it completed, 2 when it
stopped without completing (blocked, failed), 1 on an error.";

/// `hello-agent` -> `HelloAgent`.
fn camel(id: &str) -> String {
    id.split('-')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

pub(super) fn new(a: &NewArgs) -> CliResult {
    if !crate::agent::is_kebab_case(&a.agent_id) {
        return fail(receipt_vocab::message::invalid_agent_id(&a.agent_id));
    }
    let root = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()
            .map_err(|e| Failure::Message(format!("cannot read the current directory: {e}")))?,
    };
    let rel = Path::new("src")
        .join("agents")
        .join(format!("{}.rs", a.agent_id));
    let path = root.join(&rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Message(format!("cannot create {}: {e}", dir.display())))?;
    }
    create_new(&path, template(&a.template, &a.agent_id).as_bytes())?;
    print_text(&format!("created {}\n", rel.display()))
}

/// Writes a file that must not exist yet. The exclusive create refuses any existing entry,
/// a symlink included (dangling or not): a link planted at the path is never followed, so
/// nothing is written where it points.
fn create_new(path: &Path, contents: &[u8]) -> CliResult {
    use std::io::Write;
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return fail(format!(
                "Agent file already exists: {}",
                absolute_unresolved(path).display()
            ));
        }
        Err(e) => return fail(format!("cannot create {}: {e}", path.display())),
    };
    if let Err(e) = file.write_all(contents).and_then(|()| file.sync_all()) {
        drop(file);
        // The file is ours (created just now): do not leave half a template behind.
        let _ = std::fs::remove_file(path);
        return fail(format!("cannot write {}: {e}", path.display()));
    }
    Ok(())
}

/// `path` made absolute with its directory resolved but not its last component, so an error
/// about a symlink names the link, not its target.
fn absolute_unresolved(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
        .map(|d| d.join(name))
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned()),
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_owned()),
    }
}

/// The source of a new spec from `template` (unknown names give `basic`, as the reference).
pub fn template(template: &str, agent_id: &str) -> String {
    let body = match template {
        "assistant-tool" => SINGLE_ACTION
            .replace(
                "__ACTION_DOC__",
                "    /// Drafts an answer. A model call is a `query`: it may run again after a lost\n    \
                 /// lease, and its output is still appended at most once.",
            )
            .replace("__ACTION_ATTRS__", "kind = \"assistant\", side_effects = \"query\"")
            .replace("__ACTION__", "draft")
            .replace("__VERB__", "Draft"),
        "human-loop" => HUMAN_LOOP.to_owned(),
        "merge" => MERGE.to_owned(),
        _ => SINGLE_ACTION
            .replace("__ACTION_DOC__", "    /// Completes the task.")
            .replace("__ACTION_ATTRS__", "kind = \"action\"")
            .replace("__ACTION__", "complete")
            .replace("__VERB__", "Done"),
    };
    let kind = match template {
        "assistant-tool" | "human-loop" | "merge" => template,
        _ => "basic",
    };
    format!("{PRELUDE}{body}")
        .replace("__ID__", agent_id)
        .replace("__NAME__", &camel(agent_id))
        .replace("__TEMPLATE__", kind)
}

const PRELUDE: &str = "\
//! The `__ID__` agent, scaffolded by `receipt new __ID__ --template __TEMPLATE__`.
//!
//! Register it in your binary and run it with the CLI:
//!
//! ```ignore
//! let registry = std::sync::Arc::new(receipt::agent::Registry::new());
//! __NAME__.register(&registry)?;
//! receipt::cli::main_with(registry) // receipt run __ID__ --problem \"...\"
//! ```

use receipt::agent::ActionContext;

/// The problem a run is seeded with (`receipt run --problem`).
#[receipt::body]
#[derive(Debug, Clone)]
pub struct TaskRequested {
    /// The problem text.
    pub prompt: String,
}

/// The agent's answer.
#[receipt::body]
#[derive(Debug, Clone)]
pub struct TaskCompleted {
    /// The result text.
    pub result: String,
}
";

/// `basic` and `assistant-tool`: one action completes the task (placeholders `__ACTION_DOC__`,
/// `__ACTION_ATTRS__`, `__ACTION__`, `__VERB__`).
const SINGLE_ACTION: &str = "
/// The receipts this agent reads and writes.
#[receipt::receipts]
pub enum __NAME__Receipts {
    /// The seed.
    #[receipt(\"task.requested\")]
    TaskRequested(TaskRequested),
    /// The answer; the goal.
    #[receipt(\"task.completed\")]
    TaskCompleted(TaskCompleted),
}

/// What the actions and the goal see, folded from the run's receipts.
#[receipt::view]
pub struct __NAME__View {
    /// The task, once requested.
    #[view(last = \"task.requested\")]
    pub task: Option<TaskRequested>,
    /// Whether it is done.
    #[view(exists = \"task.completed\")]
    pub completed: bool,
}

/// The agent (its fields are the dependencies its actions use, a model client for example).
pub struct __NAME__;

#[receipt::agent(id = \"__ID__\", version = \"0.1.0\", receipts = __NAME__Receipts, view = __NAME__View)]
impl __NAME__ {
__ACTION_DOC__
    #[action(__ACTION_ATTRS__, when = Self::pending)]
    async fn __ACTION__(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let prompt = ctx.view().task.as_ref().map(|t| t.prompt.clone()).unwrap_or_default();
        ctx.emit(__NAME__Receipts::TaskCompleted(TaskCompleted {
            result: format!(\"__VERB__: {prompt}\"),
        }))
        .await
    }

    fn pending(view: &__NAME__View) -> bool {
        view.task.is_some() && !view.completed
    }

    #[goal]
    fn done(view: &__NAME__View) -> bool {
        view.completed
    }
}
";

const HUMAN_LOOP: &str = "
/// A human's answer (append it with `receipt append <run> approval.received '{...}'`).
#[receipt::body]
#[derive(Debug, Clone)]
pub struct ApprovalReceived {
    /// Whether the human approved.
    pub approved: bool,
}

/// The receipts this agent reads and writes.
#[receipt::receipts]
pub enum __NAME__Receipts {
    /// The seed.
    #[receipt(\"task.requested\")]
    TaskRequested(TaskRequested),
    /// The human's answer.
    #[receipt(\"approval.received\")]
    ApprovalReceived(ApprovalReceived),
    /// The outcome; the goal.
    #[receipt(\"task.completed\")]
    TaskCompleted(TaskCompleted),
}

/// What the actions and the goal see, folded from the run's receipts.
#[receipt::view]
pub struct __NAME__View {
    /// The task, once requested.
    #[view(last = \"task.requested\")]
    pub task: Option<TaskRequested>,
    /// The human's answer, once given.
    #[view(last = \"approval.received\")]
    pub approval: Option<ApprovalReceived>,
    /// Whether it is done.
    #[view(exists = \"task.completed\")]
    pub completed: bool,
}

/// The agent.
pub struct __NAME__;

#[receipt::agent(id = \"__ID__\", version = \"0.1.0\", receipts = __NAME__Receipts, view = __NAME__View)]
impl __NAME__ {
    /// Waits for a human's answer, then records the outcome.
    #[action(kind = \"human\", when = Self::pending, response_when = Self::answered)]
    async fn approve(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let approved = ctx.view().approval.as_ref().is_some_and(|a| a.approved);
        let result = if approved { \"approved\" } else { \"rejected\" };
        ctx.emit(__NAME__Receipts::TaskCompleted(TaskCompleted {
            result: result.to_owned(),
        }))
        .await
    }

    fn pending(view: &__NAME__View) -> bool {
        view.task.is_some() && !view.completed
    }

    fn answered(ctx: &receipt::agent::ResponseContext<Self>) -> bool {
        ctx.view().approval.is_some()
    }

    #[goal]
    fn done(view: &__NAME__View) -> bool {
        view.completed
    }
}
";

const MERGE: &str = "
/// One candidate answer.
#[receipt::body]
#[derive(Debug, Clone)]
pub struct CandidateGenerated {
    /// The candidate's id.
    pub id: String,
    /// Its text.
    pub text: String,
}

/// The answer the merge chose.
#[receipt::body]
#[derive(Debug, Clone)]
pub struct DraftFinalized {
    /// The chosen candidate.
    pub candidate: String,
}

/// The receipts this agent reads and writes.
#[receipt::receipts]
pub enum __NAME__Receipts {
    /// The seed.
    #[receipt(\"task.requested\")]
    TaskRequested(TaskRequested),
    /// A candidate.
    #[receipt(\"candidate.generated\")]
    CandidateGenerated(CandidateGenerated),
    /// The merge's choice; the goal.
    #[receipt(\"draft.finalized\")]
    DraftFinalized(DraftFinalized),
}

/// What the actions, the merge and the goal see, folded from the run's receipts.
#[receipt::view]
pub struct __NAME__View {
    /// The task, once requested.
    #[view(last = \"task.requested\")]
    pub task: Option<TaskRequested>,
    /// Every candidate.
    #[view(all = \"candidate.generated\")]
    pub candidates: Vec<CandidateGenerated>,
    /// Whether a draft was chosen.
    #[view(exists = \"draft.finalized\")]
    pub finalized: bool,
}

/// The agent.
pub struct __NAME__;

#[receipt::agent(
    id = \"__ID__\",
    version = \"0.1.0\",
    receipts = __NAME__Receipts,
    view = __NAME__View,
    merge = Self::pick_best
)]
impl __NAME__ {
    /// Generates two candidates.
    #[action(kind = \"action\", when = Self::needs_candidates)]
    async fn generate(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let prompt = ctx.view().task.as_ref().map(|t| t.prompt.clone()).unwrap_or_default();
        for (id, text) in [(\"short\", prompt.clone()), (\"long\", format!(\"{prompt}, in detail\"))] {
            ctx.emit(__NAME__Receipts::CandidateGenerated(CandidateGenerated {
                id: id.to_owned(),
                text,
            }))
            .await?;
        }
        Ok(())
    }

    fn needs_candidates(view: &__NAME__View) -> bool {
        view.task.is_some() && view.candidates.is_empty()
    }

    /// Scores candidates by length and finalizes the longest.
    fn pick_best() -> receipt::agent::MergePolicy<Self> {
        receipt::agent::merge(
            \"longest\",
            \"1\",
            |ctx: &receipt::agent::MergeContext<Self>| {
                if ctx.view().finalized {
                    return Vec::new();
                }
                ctx.view()
                    .candidates
                    .iter()
                    .map(|c| receipt::agent::MergeCandidate::new(c.id.clone(), c.text.clone().into()))
                    .collect()
            },
            |_ctx: &receipt::agent::MergeContext<Self>| (),
            |c: &receipt::agent::MergeCandidate, _: &(), _ctx: &receipt::agent::MergeContext<Self>| {
                let len = c.data.as_str().map_or(0, str::len) as f64;
                [(\"length\".to_owned(), len)].into_iter().collect()
            },
            |scored: &[receipt::agent::ScoredCandidate]| {
                let best = scored
                    .iter()
                    .max_by(|a, b| a.score[\"length\"].total_cmp(&b.score[\"length\"]))
                    .map(|s| s.candidate.id.clone())
                    .unwrap_or_default();
                receipt::agent::MergeDecision::new(best).because(\"longest\")
            },
        )
        .on_result(|_agent, ctx| async move {
            let candidate = ctx.decision().candidate_id.clone();
            ctx.emit(__NAME__Receipts::DraftFinalized(DraftFinalized { candidate }))
                .await
        })
    }

    #[goal]
    fn done(view: &__NAME__View) -> bool {
        view.finalized
    }
}
";

/// Every template name `receipt new` knows.
pub const TEMPLATES: [&str; 4] = ["basic", "assistant-tool", "human-loop", "merge"];

/// The JSON `receipt run` prints.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunReport<'a> {
    ok: bool,
    status: &'a str,
    mode: &'a str,
    run_id: &'a str,
    stream: &'a str,
    run_stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// The refusal to seed a run of `agent`, which declares neither seed type.
fn no_seed_type(agent: &dyn DynAgent, stream: &str) -> String {
    format!(
        "agent '{}' declares no seed receipt type: `receipt run --problem` seeds a run with {}, \
         and it declares {}; append a run's first receipt yourself (`receipt append \
         {stream}/runs/<run-id> <type> <json>`), then resume it with `receipt run {} --run-id \
         <run-id>`",
        agent.id(),
        SEED_TYPES.join(" or "),
        agent.receipt_types().join(", "),
        agent.id(),
    )
}

/// `run_<base36 now>_<4 random base36 chars>`.
fn default_run_id() -> String {
    let now = u64::try_from(SystemClock.now_ms()).unwrap_or(0);
    let mut bytes = [0u8; 4];
    OsEntropy.fill(&mut bytes);
    let suffix: String = bytes
        .iter()
        .map(|b| char::from(b"0123456789abcdefghijklmnopqrstuvwxyz"[usize::from(*b) % 36]))
        .collect();
    format!("run_{}_{suffix}", base36(now))
}

pub(super) async fn run(db: &Db, a: RunArgs, registry: Arc<Registry>) -> CliResult {
    let problem = match a.problem {
        Some(p) if p.is_empty() => return fail("--problem must not be empty"),
        other => other,
    };
    let Some(agent) = registry.get(&a.agent_id) else {
        let known = registry.ids();
        return fail(if known.is_empty() {
            format!(
                "unknown agent '{}': this binary registers no agents (register them and call receipt::cli::main_with)",
                a.agent_id
            )
        } else {
            format!(
                "unknown agent '{}' (registered: {})",
                a.agent_id,
                known.join(", ")
            )
        });
    };
    let stream = a.stream.unwrap_or_else(|| format!("agents/{}", a.agent_id));
    // Refused before anything is opened: a run that cannot be started as asked.
    let seed = agent.seed_type();
    match (seed, &problem, &a.run_id) {
        (None, Some(_), _) | (None, None, None) => {
            return fail(no_seed_type(&*agent, &stream));
        }
        (Some(_), None, None) => {
            return fail(
                "--problem is required to start a run; to resume one, pass its --run-id \
                 (`receipt streams` lists the runs: agents/<agent-id>/runs/<run-id>)",
            );
        }
        _ => {}
    }
    // Refused before anything is written: a policy file that cannot be read.
    let governance = a.govern.governance(&a.kernel, &a.agent_id)?;
    let run_id = a.run_id.unwrap_or_else(default_run_id);
    let run_stream = a
        .run_stream
        .unwrap_or_else(|| format!("{stream}/runs/{run_id}"));
    // Without a problem, only an existing run can be resumed: its database must exist.
    let runtime = Arc::new(db.runtime_serving(problem.is_some()).await?);
    let options = ControllerOptions {
        dispatcher: a.kernel.dispatcher()?,
        governance,
        max_iterations: a.max_iterations,
        ..ControllerOptions::default()
    };
    // Refused before the seed is written: a deployment mistake (a remote action and no
    // kernel, a group no worker serves) leaves no trace in the run.
    match agent.check(Arc::clone(&runtime), options.clone()).await {
        Err(Error::Agent(AgentError::NoDispatcher(action))) => {
            return fail(format!(
                "agent '{}' has a remote action ('{action}'), which runs on a worker behind a rebuno kernel: pass --kernel-url <URL> (and serve the action's target group with this binary's `worker` command)",
                a.agent_id
            ));
        }
        other => other?,
    }
    // A resumed run keeps the problem it was started with: it is what its receipts answer.
    let recorded = runtime.read(&run_stream).await?;
    let seeded = seed.and_then(|t| recorded.iter().find(|r| r.event_type() == t));
    match (seed, problem, seeded) {
        (Some(_), Some(problem), Some(seeded)) => {
            let started_with = seeded.body().get("prompt").and_then(|p| p.as_str());
            if started_with != Some(problem.as_str()) {
                return fail(format!(
                    "run '{run_id}' was started with another problem ({}): --problem {problem:?} \
                     differs; omit --problem to resume the run, or start a new run without \
                     --run-id",
                    started_with.map_or_else(|| "no prompt".to_owned(), |p| format!("{p:?}")),
                ));
            }
        }
        (Some(seed), Some(problem), None) => {
            let command = Command::new(vec![json!({"type": seed, "prompt": problem})])
                .event_id(format!("seed:{run_id}"));
            runtime.execute(&run_stream, command).await?;
        }
        (seed, None, _) if recorded.is_empty() => {
            return fail(match seed {
                Some(seed) => format!(
                    "run '{run_id}' does not exist ({run_stream} holds no receipt): --problem is \
                     required to start it (recorded as its {seed} receipt)"
                ),
                None => no_seed_type(&*agent, &stream),
            });
        }
        // Resumed from what its stream holds.
        _ => {}
    }
    let progress = super::progress::RunProgress::start(&runtime, &run_id, &run_stream);
    let outcome = agent
        .run(Arc::clone(&runtime), options, &run_id, &run_stream)
        .await;
    progress.finish();
    let outcome = outcome?;
    let (status, reason, error) = match &outcome {
        RunOutcome::Failed { error } => ("failed", None, Some(error.as_str())),
        other => (other.status(), other.reason(), None),
    };
    let report = RunReport {
        ok: status == "completed",
        status,
        mode: "inline",
        run_id: &run_id,
        stream: &stream,
        run_stream: &run_stream,
        reason,
        error,
    };
    print_json(&report)?;
    if report.ok {
        Ok(())
    } else {
        Err(Failure::NotCompleted)
    }
}
