//! The YAML policy bundle: its document types, load-time validation and
//! compilation into a [`Bundle`] ready for evaluation.
//!
//! The document types mirror the YAML keys. Unknown keys are ignored, as Go's yaml.v3 does, and
//! an explicit `~` reads as the field's zero value. Validation reports the first problem found,
//! walking the rules in file order.
//!
//! Beyond what the Go kernel checks, a few things it leaves to fail later (or never) are refused
//! at load, because they are Go quirks not worth copying: an unknown `decision` (Go: a 500 at
//! submit time), a malformed target glob (Go: silently never matches), an unknown `step_kind`,
//! `per_what` or `on_limiter_error`, duplicate rule ids (they would share rate-limit buckets and
//! be indistinguishable in events), a rate limit with `max_calls > 0` and no positive `window`
//! (Go: silently unlimited), negative durations, and unit-less integer durations.
//!
//! Argument regexes have a budget, because compiling one costs time and memory that its text
//! does not show: `\w{60}` is six characters that compile to megabytes (`\w` is Unicode-aware),
//! and each case-insensitive Unicode class (`(?i)\pL`) takes a fraction of a millisecond to
//! translate; any holder of `policies:read` can have a bundle compiled through the dry-run route.
//! A bundle holds at most [`MAX_BUNDLE_REGEXES`] regexes of at most
//! [`MAX_BUNDLE_REGEX_PATTERN_BYTES`] of text together (each at most
//! [`MAX_REGEX_PATTERN_BYTES`]), both checked before anything compiles. Each regex is compiled
//! once, with each of its automata at most [`MAX_REGEX_COMPILED_BYTES`], and all of them together
//! may take at most [`MAX_BUNDLE_REGEX_BYTES`] of memory, as measured once compiled. Each
//! searches with a lazy DFA cache of at most [`REGEX_DFA_CACHE_BYTES`] per thread. A bundle over
//! budget is refused at load, naming the limit (and the rule and argument when one regex is at
//! fault), wherever it comes from (`POST /v0/policies`, provisioning, the dry run, a fork's
//! bundle, the manifest), since every path compiles it here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use regex_automata::meta::{self, Regex};
use serde::{Deserialize, Deserializer, Serialize};

use super::duration::GoDuration;
use super::glob::{BadPattern, validate_glob};
use super::{Action, StepKind};

/// At most this many argument regexes in one bundle.
pub const MAX_BUNDLE_REGEXES: usize = 64;

/// At most this many bytes of text in one argument regex.
pub const MAX_REGEX_PATTERN_BYTES: usize = 1024;

/// At most this many bytes of text in all the argument regexes of one bundle together.
pub const MAX_BUNDLE_REGEX_PATTERN_BYTES: usize = 4096;

/// The most each automaton of one argument regex (its forward and reverse NFAs) may take, in
/// bytes; what the `regex` crate calls `size_limit`.
pub const MAX_REGEX_COMPILED_BYTES: usize = 1 << 20;

/// The most memory all argument regexes of one bundle may take together once compiled, in
/// bytes, as each compiled regex measures itself.
pub const MAX_BUNDLE_REGEX_BYTES: usize = 4 << 20;

/// The lazy DFA cache of one argument regex, in bytes, for each thread searching with it (what
/// the `regex` crate calls `dfa_size_limit`, at its default). It is grown as a search needs it;
/// a smaller one thrashes on regexes such as `\w{20}`, which then search a hundred times
/// slower.
pub const REGEX_DFA_CACHE_BYTES: usize = 2 << 20;

/// The hint every "regex too large" error carries.
const LARGE_REGEX_HINT: &str = "Unicode classes such as \\w, \\d and \\s compile large; \
     (?-u:\\w) or [0-9] are far smaller";

/// Deserializes an explicit YAML null as the type's default (Go's zero value).
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Deserializes a map whose values may be explicit nulls (each read as the default value).
fn nullable_values<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de> + Default,
{
    let map: Option<BTreeMap<String, Option<V>>> = Option::deserialize(deserializer)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect())
}

/// A whole policy bundle document, as written in YAML.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BundleSpec {
    /// `"allow"` gives default-allow; any other value (missing, `"deny"`, a typo) gives
    /// default-deny. Never applies to `local` steps.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub default_action: String,
    /// The rules, in file order (evaluation order is by priority).
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleSpec>,
}

/// One rule: a condition and the decision it yields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuleSpec {
    /// Required, non-empty and unique; becomes the decision's `rule_id`.
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    /// Evaluation order, lowest first; unique within the bundle (a missing priority is 0).
    #[serde(deserialize_with = "nullable")]
    pub priority: i64,
    /// The condition; empty matches every step.
    #[serde(deserialize_with = "nullable")]
    pub when: WhenSpec,
    /// The decision returned when the condition matches.
    #[serde(deserialize_with = "nullable")]
    pub then: ThenSpec,
}

/// A rule's condition: every field that is set must match (AND).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WhenSpec {
    /// A target name, matched by equality or as a Go `path.Match` glob.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub target: String,
    /// Target names or globs; any one of them may match.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// An exact agent id.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub agent_id: String,
    /// Exact agent ids; any one of them may match.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub agent_ids: Vec<String>,
    /// `tool_call`, `llm_call` or `local`.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub step_kind: String,
    /// Top-level argument key (exact, case-sensitive) to predicate; the key must be present.
    #[serde(
        deserialize_with = "nullable_values",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub arguments: BTreeMap<String, ArgumentPredicate>,
}

/// Tests on one argument, applied to the value's Go `%v` text (see [`go_value_string`]).
/// Every non-empty part must pass; at least one part must be non-empty.
///
/// [`go_value_string`]: super::go_value_string
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArgumentPredicate {
    /// The text must equal this exactly (an empty string means "not set").
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub equals: String,
    /// The text must contain this substring. For arrays and objects the text is their `%v`
    /// rendering (`[a b]`, `map[k:v]`), so this is a substring test on it, not membership.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub contains: String,
    /// The text must equal one of these.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub one_of: Vec<String>,
    /// An unanchored regular expression the text must match (use `^…$` to anchor).
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub regex: String,
}

impl ArgumentPredicate {
    fn is_empty(&self) -> bool {
        self.equals.is_empty()
            && self.contains.is_empty()
            && self.one_of.is_empty()
            && self.regex.is_empty()
    }
}

/// What a matching rule decides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThenSpec {
    /// `allow`, `deny` or `require_approval`.
    #[serde(deserialize_with = "nullable")]
    pub decision: String,
    /// Free text returned with the decision (a deny's reason reaches the agent).
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub reason: String,
    /// Approvers, timeout and message for `require_approval`.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub approval_config: Option<ApprovalConfig>,
    /// A rate limit on steps this rule matches, whatever the decision.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitSpec>,
}

/// How an approval requested by a rule is decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalConfig {
    /// Who may decide (exact, case-sensitive); empty means anyone.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// How long the approval stays pending; `None` or zero means the kernel default
    /// (`REBUNO_APPROVAL_TIMEOUT`, 15m). Negative values are refused at load.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Text shown to approvers.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub message: String,
}

impl ApprovalConfig {
    /// The timeout to apply: the configured one if positive, otherwise `default`.
    pub fn timeout_or(&self, default: GoDuration) -> GoDuration {
        match self.timeout {
            Some(t) if t.is_positive() => t,
            _ => default,
        }
    }
}

/// A rule's rate limit as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RateLimitSpec {
    /// Bucket capacity; `0` or less means unlimited.
    #[serde(deserialize_with = "nullable")]
    pub max_calls: i64,
    /// Time to refill the whole bucket; must be positive when `max_calls > 0`.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub window: Option<GoDuration>,
    /// `execution` (default), `agent` or `global`.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub per_what: String,
    /// `allow` (default: fail open) or `deny` when the limiter backend fails.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "String::is_empty"
    )]
    pub on_limiter_error: String,
    /// Park instead of refusing when the estimated wait is at most this long.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<GoDuration>,
}

/// Which calls share one rate-limit bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerWhat {
    /// One bucket per execution (`<rule>:exec:<execution_id>`).
    #[default]
    Execution,
    /// One bucket per agent (`<rule>:agent:<agent_id>`).
    Agent,
    /// One bucket for everyone (`<rule>:global`).
    Global,
}

impl PerWhat {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "execution" => Some(PerWhat::Execution),
            "agent" => Some(PerWhat::Agent),
            "global" => Some(PerWhat::Global),
            _ => None,
        }
    }
}

/// What happens when the rate limiter backend fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLimiterError {
    /// Fail open: the call goes ahead.
    #[default]
    Allow,
    /// Fail closed: `rate_limited` with reason `rate_limiter_unavailable`.
    Deny,
}

impl OnLimiterError {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "allow" => Some(OnLimiterError::Allow),
            "deny" => Some(OnLimiterError::Deny),
            _ => None,
        }
    }
}

/// A validated, enforceable rate limit (`max_calls > 0`, `window > 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RateLimit {
    /// Bucket capacity (and the number of calls allowed at once from a full bucket).
    pub max_calls: u64,
    /// Time to refill the bucket from empty to full; always positive.
    pub window: GoDuration,
    /// Bucket scope.
    pub per_what: PerWhat,
    /// Behaviour when the limiter backend fails.
    pub on_limiter_error: OnLimiterError,
    /// Longest wait the kernel parks an execution for instead of refusing; zero means
    /// never park.
    #[serde(default)]
    pub max_wait: GoDuration,
}

impl RateLimit {
    /// The estimated wait for the next token: `window / max_calls`.
    pub fn refill_interval(&self) -> std::time::Duration {
        self.window.to_std().unwrap_or_default()
            / u32::try_from(self.max_calls).unwrap_or(u32::MAX).max(1)
    }

    /// The bucket key for a call matched by `rule_id`: `<rule>:exec:<execution_id>`,
    /// `<rule>:agent:<agent_id>` or `<rule>:global`.
    pub fn bucket_key(&self, rule_id: &str, agent_id: &str, execution_id: &str) -> String {
        match self.per_what {
            PerWhat::Execution => format!("{rule_id}:exec:{execution_id}"),
            PerWhat::Agent => format!("{rule_id}:agent:{agent_id}"),
            PerWhat::Global => format!("{rule_id}:global"),
        }
    }
}

/// Why a bundle was refused at load. Over HTTP these become
/// `400 validation error: invalid policy bundle: <message>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// YAML syntax or type error (including malformed durations).
    #[error("yaml: {0}")]
    Yaml(String),
    /// A rule has an empty or missing `id`.
    #[error("rule missing id")]
    MissingId,
    /// Two rules share an id.
    #[error("duplicate rule id {0:?}")]
    DuplicateId(String),
    /// Two rules share a priority (a missing priority counts as 0).
    #[error("duplicate priority {priority} used by {first:?} and {second:?}")]
    DuplicatePriority {
        /// The shared priority.
        priority: i64,
        /// The earlier rule, in file order.
        first: String,
        /// The later rule.
        second: String,
    },
    /// An argument predicate with no non-empty part.
    #[error(
        "rule {rule:?} argument {argument:?} has no constraint (equals/contains/one_of/regex); \
         an empty predicate matches any value"
    )]
    EmptyPredicate {
        /// The rule id.
        rule: String,
        /// The argument key.
        argument: String,
    },
    /// An argument regex that does not compile.
    #[error("rule {rule:?} argument {argument:?} invalid regex: {error}")]
    InvalidRegex {
        /// The rule id.
        rule: String,
        /// The argument key.
        argument: String,
        /// The compiler's explanation.
        error: String,
    },
    /// More argument regexes than [`MAX_BUNDLE_REGEXES`].
    #[error("the bundle has {count} argument regexes; at most {limit} are allowed")]
    TooManyRegexes {
        /// How many the bundle has.
        count: usize,
        /// [`MAX_BUNDLE_REGEXES`].
        limit: usize,
    },
    /// Argument regexes of more than [`MAX_BUNDLE_REGEX_PATTERN_BYTES`] of text together.
    #[error(
        "the bundle's argument regexes are {bytes} bytes of text together; at most {limit} are \
         allowed"
    )]
    TooMuchRegexText {
        /// Their length together.
        bytes: usize,
        /// [`MAX_BUNDLE_REGEX_PATTERN_BYTES`].
        limit: usize,
    },
    /// An argument regex longer than [`MAX_REGEX_PATTERN_BYTES`], or with an automaton over
    /// [`MAX_REGEX_COMPILED_BYTES`].
    #[error(
        "rule {rule:?} argument {argument:?} regex is too large: {what} ({hint})",
        hint = LARGE_REGEX_HINT
    )]
    RegexTooLarge {
        /// The rule id.
        rule: String,
        /// The argument key.
        argument: String,
        /// Which limit, e.g. `it compiles to more than 1048576 bytes`.
        what: String,
    },
    /// The bundle's argument regexes together take more than [`MAX_BUNDLE_REGEX_BYTES`] once
    /// compiled; the first that does not fit is named.
    #[error(
        "rule {rule:?} argument {argument:?} regex does not fit the bundle's regex budget: the \
         bundle's regexes may take at most {limit} bytes together once compiled ({hint})",
        hint = LARGE_REGEX_HINT
    )]
    RegexBudget {
        /// The rule id.
        rule: String,
        /// The argument key.
        argument: String,
        /// [`MAX_BUNDLE_REGEX_BYTES`].
        limit: usize,
    },
    /// `then.decision` is not `allow`, `deny` or `require_approval`.
    #[error(
        "rule {rule:?} has invalid decision {decision:?} (expected allow, deny or require_approval)"
    )]
    InvalidDecision {
        /// The rule id.
        rule: String,
        /// The decision as written (possibly empty).
        decision: String,
    },
    /// A `target` / `targets` entry is not a valid glob.
    #[error(
        "rule {rule:?} target {pattern:?}: {source} (escape [ ] * ? \\ with \\ to match them \
         literally)"
    )]
    InvalidGlob {
        /// The rule id.
        rule: String,
        /// The pattern as written.
        pattern: String,
        /// The glob error.
        source: BadPattern,
    },
    /// `when.step_kind` is not a known kind.
    #[error("rule {rule:?} has invalid step_kind {kind:?} (expected tool_call, llm_call or local)")]
    InvalidStepKind {
        /// The rule id.
        rule: String,
        /// The kind as written.
        kind: String,
    },
    /// `rate_limit.per_what` is not a known scope.
    #[error(
        "rule {rule:?} rate_limit has invalid per_what {value:?} (expected execution, agent or global)"
    )]
    InvalidPerWhat {
        /// The rule id.
        rule: String,
        /// The value as written.
        value: String,
    },
    /// `rate_limit.on_limiter_error` is not `allow` or `deny`.
    #[error(
        "rule {rule:?} rate_limit has invalid on_limiter_error {value:?} (expected allow or deny)"
    )]
    InvalidOnLimiterError {
        /// The rule id.
        rule: String,
        /// The value as written.
        value: String,
    },
    /// `rate_limit.max_calls > 0` without a positive `window`.
    #[error(
        "rule {rule:?} rate_limit window must be a positive duration when max_calls > 0 (got {window})"
    )]
    InvalidWindow {
        /// The rule id.
        rule: String,
        /// The window as written (`0s` when missing).
        window: GoDuration,
    },
    /// A negative duration where only zero or positive make sense.
    #[error("rule {rule:?} {field} must not be negative (got {value})")]
    NegativeDuration {
        /// The rule id.
        rule: String,
        /// Which field (`approval_config.timeout`, `rate_limit.window`).
        field: &'static str,
        /// The value as written.
        value: GoDuration,
    },
}

/// One argument predicate, compiled.
#[derive(Debug, Clone)]
pub(crate) struct Predicate {
    pub(crate) key: String,
    pub(crate) equals: Option<String>,
    pub(crate) contains: Option<String>,
    pub(crate) one_of: Vec<String>,
    pub(crate) regex: Option<Regex>,
}

/// A rule's condition, compiled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Condition {
    pub(crate) target: Option<String>,
    pub(crate) targets: Vec<String>,
    pub(crate) agent_id: Option<String>,
    pub(crate) agent_ids: Vec<String>,
    pub(crate) step_kind: Option<StepKind>,
    pub(crate) arguments: Vec<Predicate>,
}

/// A rule, compiled.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) id: String,
    pub(crate) priority: i64,
    pub(crate) when: Condition,
    pub(crate) action: Action,
    pub(crate) reason: String,
    pub(crate) approval_config: Option<ApprovalConfig>,
    pub(crate) rate_limit: Option<RateLimit>,
}

/// A validated, compiled policy bundle. Build with [`Bundle::parse`] or [`Bundle::from_spec`];
/// evaluate with [`Bundle::evaluate`](Bundle::evaluate).
#[derive(Clone)]
pub struct Bundle {
    pub(crate) spec: BundleSpec,
    pub(crate) default_allow: bool,
    /// Sorted by ascending priority (priorities are unique).
    pub(crate) rules: Vec<Rule>,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bundle")
            .field("default_allow", &self.default_allow)
            .field(
                "rules",
                &self.rules.iter().map(|r| &r.id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Bundle {
    /// Parses and validates YAML bundle text. An empty document gives an empty bundle
    /// (no rules, default deny).
    pub fn parse(yaml: &str) -> Result<Bundle, BundleError> {
        let spec: Option<BundleSpec> =
            serde_yaml_ng::from_str(yaml).map_err(|e| BundleError::Yaml(e.to_string()))?;
        Bundle::from_spec(spec.unwrap_or_default())
    }

    /// Validates and compiles a bundle document.
    pub fn from_spec(spec: BundleSpec) -> Result<Bundle, BundleError> {
        let regexes = || {
            spec.rules
                .iter()
                .flat_map(|r| r.when.arguments.values())
                .filter(|p| !p.regex.is_empty())
        };
        let count = regexes().count();
        if count > MAX_BUNDLE_REGEXES {
            return Err(BundleError::TooManyRegexes {
                count,
                limit: MAX_BUNDLE_REGEXES,
            });
        }
        let bytes = regexes().map(|p| p.regex.len()).sum();
        if bytes > MAX_BUNDLE_REGEX_PATTERN_BYTES {
            return Err(BundleError::TooMuchRegexText {
                bytes,
                limit: MAX_BUNDLE_REGEX_PATTERN_BYTES,
            });
        }
        let mut budget = MAX_BUNDLE_REGEX_BYTES;
        let mut ids: HashSet<&str> = HashSet::new();
        let mut priorities: HashMap<i64, &str> = HashMap::new();
        let mut rules = Vec::with_capacity(spec.rules.len());
        for rule in &spec.rules {
            if rule.id.is_empty() {
                return Err(BundleError::MissingId);
            }
            if !ids.insert(&rule.id) {
                return Err(BundleError::DuplicateId(rule.id.clone()));
            }
            if let Some(first) = priorities.insert(rule.priority, &rule.id) {
                return Err(BundleError::DuplicatePriority {
                    priority: rule.priority,
                    first: first.to_owned(),
                    second: rule.id.clone(),
                });
            }
            rules.push(compile_rule(rule, &mut budget)?);
        }
        rules.sort_by_key(|r| r.priority);
        Ok(Bundle {
            default_allow: spec.default_action == "allow",
            spec,
            rules,
        })
    }

    /// The document this bundle was compiled from.
    pub fn spec(&self) -> &BundleSpec {
        &self.spec
    }

    /// True if unmatched non-local steps are allowed (`default_action: allow`).
    pub fn default_allows(&self) -> bool {
        self.default_allow
    }

    /// Rule ids in evaluation order (ascending priority).
    pub fn rule_order(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.id.as_str())
    }
}

/// Compiles an argument regex within the per-regex limits and what is left of the bundle's
/// `budget`, and takes what it measures from the budget.
///
/// The pattern is parsed once with the syntax and compiled once with the engine the `regex`
/// crate wraps (same syntax, same matching), because that crate can say neither how large a
/// compiled regex is nor keep a parse between tries.
fn compile_regex(
    rule: &str,
    argument: &str,
    pattern: &str,
    budget: &mut usize,
) -> Result<Regex, BundleError> {
    let too_large = |what: String| BundleError::RegexTooLarge {
        rule: rule.to_owned(),
        argument: argument.to_owned(),
        what,
    };
    let over_budget = || BundleError::RegexBudget {
        rule: rule.to_owned(),
        argument: argument.to_owned(),
        limit: MAX_BUNDLE_REGEX_BYTES,
    };
    let invalid = |error: String| BundleError::InvalidRegex {
        rule: rule.to_owned(),
        argument: argument.to_owned(),
        error,
    };
    if pattern.len() > MAX_REGEX_PATTERN_BYTES {
        return Err(too_large(format!(
            "it is {} bytes long, more than {MAX_REGEX_PATTERN_BYTES}",
            pattern.len()
        )));
    }
    // The `regex` crate's defaults: Unicode, UTF-8 only, a nesting limit of 250.
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .map_err(|e| invalid(syntax_error_text(pattern, &e.to_string())))?;
    let cap = MAX_REGEX_COMPILED_BYTES.min(*budget);
    let config = meta::Config::new()
        .match_kind(regex_automata::MatchKind::LeftmostFirst)
        .utf8_empty(true)
        .nfa_size_limit(Some(cap))
        .hybrid_cache_capacity(REGEX_DFA_CACHE_BYTES);
    let regex = match meta::Builder::new().configure(config).build_from_hir(&hir) {
        Ok(regex) => regex,
        Err(e) if e.size_limit().is_some() && cap == MAX_REGEX_COMPILED_BYTES => {
            return Err(too_large(format!(
                "it compiles to more than {MAX_REGEX_COMPILED_BYTES} bytes"
            )));
        }
        Err(e) if e.size_limit().is_some() => return Err(over_budget()),
        Err(e) => return Err(invalid(format!("{e}: `{pattern}`"))),
    };
    *budget = budget
        .checked_sub(regex.memory_usage())
        .ok_or_else(over_budget)?;
    Ok(regex)
}

fn compile_rule(rule: &RuleSpec, budget: &mut usize) -> Result<Rule, BundleError> {
    let id = &rule.id;
    let when = &rule.when;

    let mut arguments = Vec::with_capacity(when.arguments.len());
    for (key, pred) in &when.arguments {
        if pred.is_empty() {
            return Err(BundleError::EmptyPredicate {
                rule: id.clone(),
                argument: key.clone(),
            });
        }
        let regex = if pred.regex.is_empty() {
            None
        } else {
            Some(compile_regex(id, key, &pred.regex, budget)?)
        };
        arguments.push(Predicate {
            key: key.clone(),
            equals: non_empty(&pred.equals),
            contains: non_empty(&pred.contains),
            one_of: pred.one_of.clone(),
            regex,
        });
    }

    let action =
        rule.then
            .decision
            .parse::<Action>()
            .map_err(|_| BundleError::InvalidDecision {
                rule: id.clone(),
                decision: rule.then.decision.clone(),
            })?;

    for pattern in std::iter::once(&when.target)
        .filter(|t| !t.is_empty())
        .chain(&when.targets)
    {
        validate_glob(pattern).map_err(|source| BundleError::InvalidGlob {
            rule: id.clone(),
            pattern: pattern.clone(),
            source,
        })?;
    }

    let step_kind = if when.step_kind.is_empty() {
        None
    } else {
        Some(
            when.step_kind
                .parse::<StepKind>()
                .map_err(|_| BundleError::InvalidStepKind {
                    rule: id.clone(),
                    kind: when.step_kind.clone(),
                })?,
        )
    };

    if let Some(cfg) = &rule.then.approval_config
        && let Some(timeout) = cfg.timeout
        && timeout.is_negative()
    {
        return Err(BundleError::NegativeDuration {
            rule: id.clone(),
            field: "approval_config.timeout",
            value: timeout,
        });
    }

    let rate_limit = match &rule.then.rate_limit {
        Some(spec) => compile_rate_limit(id, spec)?,
        None => None,
    };

    Ok(Rule {
        id: id.clone(),
        priority: rule.priority,
        when: Condition {
            target: non_empty(&when.target),
            targets: when.targets.clone(),
            agent_id: non_empty(&when.agent_id),
            agent_ids: when.agent_ids.clone(),
            step_kind,
            arguments,
        },
        action,
        reason: rule.then.reason.clone(),
        approval_config: rule.then.approval_config.clone(),
        rate_limit,
    })
}

fn compile_rate_limit(rule: &str, spec: &RateLimitSpec) -> Result<Option<RateLimit>, BundleError> {
    let per_what = PerWhat::parse(&spec.per_what).ok_or_else(|| BundleError::InvalidPerWhat {
        rule: rule.to_owned(),
        value: spec.per_what.clone(),
    })?;
    let on_limiter_error = OnLimiterError::parse(&spec.on_limiter_error).ok_or_else(|| {
        BundleError::InvalidOnLimiterError {
            rule: rule.to_owned(),
            value: spec.on_limiter_error.clone(),
        }
    })?;
    let max_wait = spec.max_wait.unwrap_or_default();
    if max_wait.is_negative() {
        return Err(BundleError::NegativeDuration {
            rule: rule.to_owned(),
            field: "rate_limit.max_wait",
            value: max_wait,
        });
    }
    let window = spec.window.unwrap_or_default();
    if window.is_negative() {
        return Err(BundleError::NegativeDuration {
            rule: rule.to_owned(),
            field: "rate_limit.window",
            value: window,
        });
    }
    let Ok(max_calls) = u64::try_from(spec.max_calls) else {
        // max_calls <= 0 means unlimited, as in the Go kernel.
        return Ok(None);
    };
    if max_calls == 0 {
        return Ok(None);
    }
    if !window.is_positive() {
        return Err(BundleError::InvalidWindow {
            rule: rule.to_owned(),
            window,
        });
    }
    Ok(Some(RateLimit {
        max_calls,
        window,
        per_what,
        on_limiter_error,
        max_wait,
    }))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// One line, in the shape of Go's `error parsing regexp: <what>: `<pattern>``, from the
/// parser's multi-line explanation `text`.
fn syntax_error_text(pattern: &str, text: &str) -> String {
    let what = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or("syntax error");
    format!("error parsing regexp: {what}: `{pattern}`")
}
