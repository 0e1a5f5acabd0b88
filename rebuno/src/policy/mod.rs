//! Policy: YAML bundles, the rule engine that gates every step (with the approvals a rule may
//! require), and the rate limiter.
//!
//! - [`bundle`]: the bundle document ([`BundleSpec`]), load-time validation ([`BundleError`])
//!   and the compiled [`Bundle`];
//! - [`eval`]: rule matching and the Go `%v` rendering of arguments ([`go_value_string`]);
//! - [`glob`]: Go `path.Match` target globs;
//! - [`duration`]: Go `time.Duration` text ([`GoDuration`]);
//! - [`ratelimit`]: the token-bucket limiter, its backend trait and the injectable clock.
//!
//! An execution may also have a bundle of its own (a fork's, given by a caller that may set
//! policy): it only narrows its agent's, never replaces it. Both are evaluated and
//! [`Decision::narrowed`] keeps the stricter outcome, in this order: a denial (the agent's as
//! its bundle answers it, else the own bundle's, which spends no rate-limit token), then a
//! rate-limit refusal by either rule's bucket (the own bundle's keyed apart, as `fork:<rule>`),
//! then an approval (the agent's approvers when its bundle asks for one), then allow.
//!
//! [`PolicyEngine`] holds one bundle per agent and resolves a step to a [`Decision`]:
//!
//! ```
//! use rebuno::policy::{Action, EvalInput, PolicyEngine, StepKind};
//!
//! let engine = PolicyEngine::dev();
//! engine
//!     .set_bundle(
//!         "researcher",
//!         "default_action: deny\nrules:\n  - id: search\n    when: {target: \"web_*\"}\n    then: {decision: allow}\n",
//!     )
//!     .unwrap();
//! let args = serde_json::json!({"q": "rust"});
//! let decision = engine.evaluate(&EvalInput {
//!     agent_id: "researcher",
//!     execution_id: "e1",
//!     step_kind: Some(StepKind::ToolCall),
//!     target: "web_search",
//!     arguments: &args,
//! });
//! assert_eq!(decision.action, Action::Allow);
//! assert_eq!(decision.rule_id, "search");
//! ```

pub mod bundle;
pub mod duration;
pub mod eval;
pub mod glob;
pub mod ratelimit;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};

use serde::{Deserialize, Serialize};

pub use bundle::{
    ApprovalConfig, ArgumentPredicate, Bundle, BundleError, BundleSpec, MAX_BUNDLE_REGEX_BYTES,
    MAX_BUNDLE_REGEX_PATTERN_BYTES, MAX_BUNDLE_REGEXES, MAX_REGEX_COMPILED_BYTES,
    MAX_REGEX_PATTERN_BYTES, OnLimiterError, PerWhat, REGEX_DFA_CACHE_BYTES, RateLimit,
    RateLimitSpec, RuleSpec, ThenSpec, WhenSpec,
};
pub use duration::{DurationError, GoDuration};
pub use eval::go_value_string;
pub use glob::{BadPattern, glob_match, validate_glob};
pub use ratelimit::{
    Clock, LimiterError, LimiterFuture, ManualClock, MemoryRateLimiter, RateLimitOutcome,
    RateLimiter, SystemClock, enforce_rate_limit, enforce_rate_limits,
};

/// The `rule_id` values the engine itself produces.
pub mod rule_ids {
    /// No rule matched and the bundle's `default_action` decided.
    pub const DEFAULT: &str = "default";
    /// No rule matched a `local` step, which is allowed.
    pub const LOCAL: &str = "local";
    /// The agent has no bundle and the engine is permissive.
    pub const PERMISSIVE: &str = "permissive";
    /// The agent has no bundle and the engine denies ([`super::MissingBundle::Deny`]).
    pub const NO_BUNDLE: &str = "no-bundle";
    /// The agent's bundle could not be looked up or compiled.
    pub const BUNDLE_ERROR: &str = "bundle-error";
    /// Put before the rule ids of an execution's own bundle when it narrows its agent's
    /// ([`super::Decision::narrowed`]): `fork:<rule id>` names that bundle's rule in a
    /// decision, and keys its rate-limit buckets apart from the agent bundle's.
    pub const EXECUTION_PREFIX: &str = "fork:";
}

/// The `reason` values the engine and the rate limiter produce.
pub mod reasons {
    /// Unmatched step under `default_action: allow`.
    pub const DEFAULT_ALLOW: &str = "default allow";
    /// Unmatched step under default deny.
    pub const DEFAULT_DENY: &str = "no explicit allow rule matched";
    /// Unmatched `local` step.
    pub const LOCAL_STEP: &str = "local step";
    /// The agent has no bundle.
    pub const NO_BUNDLE: &str = "no policy bundle";
    /// The agent lookup failed.
    pub const AGENT_LOOKUP_FAILED: &str = "agent_lookup_failed";
    /// The agent's bundle does not compile.
    pub const BUNDLE_INVALID: &str = "policy_bundle_invalid";
    /// The rule's bucket is empty.
    pub const RATE_LIMIT_EXCEEDED: &str = "rate_limit_exceeded";
    /// The limiter backend failed and the rule says `on_limiter_error: deny`.
    pub const RATE_LIMITER_UNAVAILABLE: &str = "rate_limiter_unavailable";
}

/// What a policy decides for a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run the step.
    Allow,
    /// Refuse the step.
    Deny,
    /// Block the execution until a human approves or denies the step.
    RequireApproval,
}

impl Action {
    /// The wire and YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::RequireApproval => "require_approval",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not a known [`Action`] or [`StepKind`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownName {
    what: &'static str,
    value: String,
}

impl FromStr for Action {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Action::Allow),
            "deny" => Ok(Action::Deny),
            "require_approval" => Ok(Action::RequireApproval),
            _ => Err(UnknownName {
                what: "policy decision",
                value: s.to_owned(),
            }),
        }
    }
}

/// The kind of a step, as far as policy is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A tool invocation.
    ToolCall,
    /// A model invocation.
    LlmCall,
    /// A recorded local computation; allowed when no rule matches it.
    Local,
}

impl StepKind {
    /// The wire and YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::ToolCall => "tool_call",
            StepKind::LlmCall => "llm_call",
            StepKind::Local => "local",
        }
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StepKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tool_call" => Ok(StepKind::ToolCall),
            "llm_call" => Ok(StepKind::LlmCall),
            "local" => Ok(StepKind::Local),
            _ => Err(UnknownName {
                what: "step kind",
                value: s.to_owned(),
            }),
        }
    }
}

/// The step being decided.
#[derive(Debug, Clone, Copy)]
pub struct EvalInput<'a> {
    /// The agent that owns the execution.
    pub agent_id: &'a str,
    /// The execution (used for per-execution rate-limit buckets).
    pub execution_id: &'a str,
    /// The step kind; `None` for a kind string the kernel accepts but no rule can name (it
    /// matches no `step_kind` condition and is not a `local` step).
    pub step_kind: Option<StepKind>,
    /// The tool id, or the model id for an LLM call.
    pub target: &'a str,
    /// The step's arguments; predicates only match when this is a JSON object.
    pub arguments: &'a serde_json::Value,
}

/// The outcome of evaluating a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Allow, deny or require approval.
    pub action: Action,
    /// The rule's `reason`, or the engine's reason (see [`reasons`]); may be empty.
    pub reason: String,
    /// The matching rule's id, or one of [`rule_ids`].
    pub rule_id: String,
    /// The matching rule's `approval_config`, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_config: Option<ApprovalConfig>,
    /// The matching rule's rate limit, when it has `max_calls > 0`. It applies whatever the
    /// action is; see [`enforce_rate_limit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// A second rule's rate limit that applies too, in that rule's own bucket: set only when an
    /// execution's own bundle narrows its agent's and both matching rules limit the step (see
    /// [`Decision::narrowed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_limited: Option<RuleLimit>,
}

/// A rate limit with the id of the rule it belongs to, which keys its bucket
/// ([`RateLimit::bucket_key`]) and names a refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleLimit {
    /// The rule's id.
    pub rule_id: String,
    /// Its limit.
    pub limit: RateLimit,
}

impl Decision {
    /// A decision with no approval config and no rate limit.
    pub fn new(action: Action, reason: impl Into<String>, rule_id: impl Into<String>) -> Self {
        Decision {
            action,
            reason: reason.into(),
            rule_id: rule_id.into(),
            approval_config: None,
            rate_limit: None,
            also_limited: None,
        }
    }

    /// The rate limits this decision applies, each with the rule id its bucket is keyed by:
    /// the matching rule's, then [`Decision::also_limited`].
    pub fn limits(&self) -> impl Iterator<Item = RuleLimit> + '_ {
        let own = self.rate_limit.map(|limit| RuleLimit {
            rule_id: self.rule_id.clone(),
            limit,
        });
        own.into_iter().chain(self.also_limited.clone())
    }

    /// Whether any rate limit applies ([`Decision::limits`] is not empty).
    pub fn is_limited(&self) -> bool {
        self.rate_limit.is_some() || self.also_limited.is_some()
    }

    /// The decision on a step of an execution that has a bundle of its own (a fork's), given
    /// its agent's bundle's decision `agent` and its own bundle's `own`: both must allow. The
    /// own bundle narrows the agent's and can never loosen it:
    ///
    /// 1. Deny wins. The agent's denial is answered exactly as the agent's bundle alone answers
    ///    it (its rule, reason and rate limit); otherwise the own bundle's denial, with no rate
    ///    limit at all: a step that will not run draws no token from any bucket.
    /// 2. Then approval. When the agent's bundle requires one, its rule decides, with its
    ///    approval config: an own bundle can neither waive the approval nor name other
    ///    approvers for it. When only the own bundle requires one, its rule and config decide
    ///    (an approval the agent's bundle did not ask for is a narrowing too).
    /// 3. Otherwise both allow, and the agent's rule is the one named.
    ///
    /// Rate limits (cases 2 and 3): both matching rules' limits apply, each in its own bucket,
    /// the way a limit always applies (before the action takes effect, whatever it is); a step
    /// either bucket refuses is `rate_limited`. The agent's rule keeps its own bucket, the one
    /// its executions share, so a fork draws from the same per-agent and global buckets as
    /// any execution of the agent; the own bundle's buckets are keyed by its rule ids with
    /// [`rule_ids::EXECUTION_PREFIX`] (so a rule id reused in both bundles never shares, and
    /// never refills, the agent's bucket). A token the first limit gave is not handed back
    /// when the second refuses. So, strictest first: deny, then a rate-limit refusal, then
    /// approval, then allow.
    ///
    /// Rule ids from the own bundle are answered with [`rule_ids::EXECUTION_PREFIX`].
    pub fn narrowed(agent: Decision, own: Decision) -> Decision {
        let own = Decision {
            rule_id: format!("{}{}", rule_ids::EXECUTION_PREFIX, own.rule_id),
            ..own
        };
        let also = |other: &Decision| {
            other.rate_limit.map(|limit| RuleLimit {
                rule_id: other.rule_id.clone(),
                limit,
            })
        };
        match (agent.action, own.action) {
            (Action::Deny, _) => agent,
            (_, Action::Deny) => Decision {
                rate_limit: None,
                also_limited: None,
                ..own
            },
            (Action::Allow, Action::RequireApproval) => Decision {
                also_limited: also(&agent),
                ..own
            },
            _ => Decision {
                also_limited: also(&own),
                ..agent
            },
        }
    }

    /// The decision when the agent record cannot be read: deny, `bundle-error`,
    /// `agent_lookup_failed`.
    pub fn agent_lookup_failed() -> Self {
        Decision::new(
            Action::Deny,
            reasons::AGENT_LOOKUP_FAILED,
            rule_ids::BUNDLE_ERROR,
        )
    }

    /// The decision when the agent's bundle does not compile: deny, `bundle-error`,
    /// `policy_bundle_invalid`.
    pub fn bundle_invalid() -> Self {
        Decision::new(
            Action::Deny,
            reasons::BUNDLE_INVALID,
            rule_ids::BUNDLE_ERROR,
        )
    }
}

/// What the engine decides for an agent that has no bundle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MissingBundle {
    /// Allow every step (rule `permissive`). The Go kernel's behaviour in both dev and
    /// server mode.
    #[default]
    AllowAll,
    /// Behave like an empty default-deny bundle: `local` steps are allowed (rule `local`),
    /// everything else is denied (rule `no-bundle`). An opt-in hardening, not in the spec.
    Deny,
}

#[derive(Clone)]
enum Installed {
    Valid { text: Arc<str>, bundle: Arc<Bundle> },
    Invalid { text: Arc<str>, error: BundleError },
}

impl Installed {
    fn text(&self) -> &str {
        match self {
            Installed::Valid { text, .. } | Installed::Invalid { text, .. } => text,
        }
    }
}

/// The policy engine: one compiled bundle per agent, and the rules that pick the decision of a
/// step.
///
/// Bundles arrive two ways. [`set_bundle`](Self::set_bundle) is the admin and provisioning
/// path: an invalid bundle is refused and the previous one stays. [`sync_bundle`](Self::sync_bundle)
/// is the store path, for bundle text read back from the database: it recompiles only when the
/// text changed, and an invalid text is kept so that evaluation denies with
/// `policy_bundle_invalid` (fail closed) rather than silently using stale rules.
pub struct PolicyEngine {
    missing: MissingBundle,
    bundles: RwLock<HashMap<String, Installed>>,
    /// Executions' own bundles ([`PolicyEngine::evaluate_with`]), compiled, by text; at most
    /// [`OVERRIDE_CACHE`] of them.
    overrides: RwLock<HashMap<Arc<str>, Installed>>,
}

/// How many distinct execution bundles the engine keeps compiled (then it starts over).
const OVERRIDE_CACHE: usize = 64;

impl fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let agents = self
            .bundles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("PolicyEngine")
            .field("missing", &self.missing)
            .field("agents", &agents)
            .finish()
    }
}

impl Default for PolicyEngine {
    fn default() -> Self {
        PolicyEngine::new(MissingBundle::default())
    }
}

impl PolicyEngine {
    /// An engine with no bundles; `missing` decides for agents without one.
    pub fn new(missing: MissingBundle) -> Self {
        PolicyEngine {
            missing,
            bundles: RwLock::new(HashMap::new()),
            overrides: RwLock::new(HashMap::new()),
        }
    }

    /// The dev-mode engine: agents without a bundle are allowed everything. (Per the spec the
    /// server behaves the same; use [`PolicyEngine::new`] with [`MissingBundle::Deny`] to
    /// harden it.)
    pub fn dev() -> Self {
        PolicyEngine::new(MissingBundle::AllowAll)
    }

    /// What the engine does for agents without a bundle.
    pub fn missing_bundle(&self) -> MissingBundle {
        self.missing
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Installed>> {
        self.bundles.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Installed>> {
        self.bundles.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Validates `yaml` and installs it as `agent_id`'s bundle. Empty text removes the bundle.
    /// On error nothing changes.
    pub fn set_bundle(&self, agent_id: &str, yaml: &str) -> Result<(), BundleError> {
        if yaml.is_empty() {
            self.remove_bundle(agent_id);
            return Ok(());
        }
        let bundle = Bundle::parse(yaml)?;
        self.write().insert(
            agent_id.to_owned(),
            Installed::Valid {
                text: Arc::from(yaml),
                bundle: Arc::new(bundle),
            },
        );
        Ok(())
    }

    /// Installs `yaml` (read from the store) as `agent_id`'s bundle, recompiling only if the
    /// text differs from the installed one. Empty text removes the bundle. An invalid text is
    /// installed anyway (evaluation then denies with `policy_bundle_invalid`) and its error is
    /// returned for logging.
    pub fn sync_bundle(&self, agent_id: &str, yaml: &str) -> Result<(), BundleError> {
        if yaml.is_empty() {
            self.remove_bundle(agent_id);
            return Ok(());
        }
        if let Some(current) = self.read().get(agent_id)
            && current.text() == yaml
        {
            return match current {
                Installed::Valid { .. } => Ok(()),
                Installed::Invalid { error, .. } => Err(error.clone()),
            };
        }
        let text: Arc<str> = Arc::from(yaml);
        let (installed, result) = match Bundle::parse(yaml) {
            Ok(bundle) => (
                Installed::Valid {
                    text,
                    bundle: Arc::new(bundle),
                },
                Ok(()),
            ),
            Err(error) => (
                Installed::Invalid {
                    text,
                    error: error.clone(),
                },
                Err(error),
            ),
        };
        self.write().insert(agent_id.to_owned(), installed);
        result
    }

    /// Removes `agent_id`'s bundle; returns whether there was one.
    pub fn remove_bundle(&self, agent_id: &str) -> bool {
        self.write().remove(agent_id).is_some()
    }

    /// `agent_id`'s compiled bundle, if it has a valid one.
    pub fn bundle(&self, agent_id: &str) -> Option<Arc<Bundle>> {
        match self.read().get(agent_id) {
            Some(Installed::Valid { bundle, .. }) => Some(Arc::clone(bundle)),
            _ => None,
        }
    }

    /// Decides a step under `yaml`, an execution's own bundle (a fork's), instead of its
    /// agent's. Each distinct text is compiled once (a bounded cache); one that does not
    /// compile denies with `bundle-error` / `policy_bundle_invalid`, as a stored agent bundle
    /// would.
    pub fn evaluate_with(&self, yaml: &str, input: &EvalInput<'_>) -> Decision {
        let cached = self
            .overrides
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(yaml)
            .cloned();
        let installed = cached.unwrap_or_else(|| {
            let text: Arc<str> = Arc::from(yaml);
            let installed = match Bundle::parse(yaml) {
                Ok(bundle) => Installed::Valid {
                    text: Arc::clone(&text),
                    bundle: Arc::new(bundle),
                },
                Err(error) => Installed::Invalid {
                    text: Arc::clone(&text),
                    error,
                },
            };
            let mut overrides = self
                .overrides
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if overrides.len() >= OVERRIDE_CACHE {
                overrides.clear();
            }
            overrides.insert(text, installed.clone());
            installed
        });
        match installed {
            Installed::Valid { bundle, .. } => bundle.evaluate(input),
            Installed::Invalid { .. } => Decision::bundle_invalid(),
        }
    }

    /// Decides a step: the agent's bundle if it has one; otherwise the
    /// [`MissingBundle`] behaviour; `bundle-error` / `policy_bundle_invalid` if its stored
    /// bundle does not compile.
    pub fn evaluate(&self, input: &EvalInput<'_>) -> Decision {
        let installed = self.read().get(input.agent_id).cloned();
        match installed {
            Some(Installed::Valid { bundle, .. }) => bundle.evaluate(input),
            Some(Installed::Invalid { .. }) => Decision::bundle_invalid(),
            None => match self.missing {
                MissingBundle::AllowAll => {
                    Decision::new(Action::Allow, reasons::NO_BUNDLE, rule_ids::PERMISSIVE)
                }
                MissingBundle::Deny if input.step_kind == Some(StepKind::Local) => {
                    Decision::new(Action::Allow, reasons::LOCAL_STEP, rule_ids::LOCAL)
                }
                MissingBundle::Deny => {
                    Decision::new(Action::Deny, reasons::NO_BUNDLE, rule_ids::NO_BUNDLE)
                }
            },
        }
    }
}
