//! Merge policies: [`MergePolicy`] (built by [`merge`], alias [`rebracket`]), its
//! candidate, score and decision types, and the contexts its functions receive.
//!
//! The controller runs a durable merge after every pass in which an invocation committed
//! (each step a control receipt, so that a re-run finds what happened): `merge.started` (the claim, id [`merge_id`](super::merge_id)), then either
//! `merge.skipped` (`settled` when `should_recompute` is false, `no-candidates`), or
//! `merge.selected` (every candidate's score vector), `merge.output.manifest` +
//! outputs when `on_result` is set, and `merge.applied`; any failure after the claim ends at
//! `merge.failed`.

use super::action::{BoxFuture, OutputBuffer};
use super::{AgentError, AgentTypes, ReceiptSet};
use crate::canonical;
use crate::error::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

/// One candidate a merge can choose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeCandidate {
    /// Its id (what the decision names).
    pub id: String,
    /// Anything the policy wants to carry.
    pub data: Value,
}

impl MergeCandidate {
    /// A candidate.
    pub fn new(id: impl Into<String>, data: Value) -> Self {
        MergeCandidate {
            id: id.into(),
            data,
        }
    }
}

/// A score vector: named finite numbers.
pub type MergeScoreVector = BTreeMap<String, f64>;

/// A candidate with its score, as `choose` sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredCandidate {
    /// The candidate.
    pub candidate: MergeCandidate,
    /// Its score.
    pub score: MergeScoreVector,
}

/// What `choose` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeDecision {
    /// The chosen candidate's id.
    pub candidate_id: String,
    /// Why, if the policy says.
    pub reason: Option<String>,
}

impl MergeDecision {
    /// Chooses `candidate_id`.
    pub fn new(candidate_id: impl Into<String>) -> Self {
        MergeDecision {
            candidate_id: candidate_id.into(),
            reason: None,
        }
    }
    /// Adds a reason.
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// What a merge policy's functions get: the view at the merge head, the run id and the head.
pub struct MergeContext<A: AgentTypes> {
    pub(crate) view: Arc<A::View>,
    pub(crate) run_id: String,
    pub(crate) head: Option<String>,
}

impl<A: AgentTypes> MergeContext<A> {
    /// The view at the merge head.
    pub fn view(&self) -> &A::View {
        &self.view
    }
    /// The run.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
    /// The run chain's head when the merge started.
    pub fn head(&self) -> Option<&str> {
        self.head.as_deref()
    }
}

/// What `on_result` gets: the merge context, the decision, and a buffered `emit`.
pub struct MergeResultContext<A: AgentTypes> {
    pub(crate) ctx: MergeContext<A>,
    pub(crate) merge_id: String,
    pub(crate) chosen: ScoredCandidate,
    pub(crate) decision: MergeDecision,
    pub(crate) out: OutputBuffer,
}

impl<A: AgentTypes> MergeResultContext<A> {
    /// The merge context.
    pub fn context(&self) -> &MergeContext<A> {
        &self.ctx
    }
    /// The view at the merge head.
    pub fn view(&self) -> &A::View {
        &self.ctx.view
    }
    /// The merge id.
    pub fn merge_id(&self) -> &str {
        &self.merge_id
    }
    /// The chosen candidate and its score.
    pub fn chosen(&self) -> &ScoredCandidate {
        &self.chosen
    }
    /// The decision.
    pub fn decision(&self) -> &MergeDecision {
        &self.decision
    }
    /// Buffers a receipt; appended after `merge.output.manifest` binds the whole output.
    pub async fn emit(&self, receipt: A::Receipts) -> Result<()> {
        let body = canonical::to_value(&receipt)?;
        if body.get("type").and_then(Value::as_str) != Some(receipt.type_name()) {
            return Err(AgentError::BadBody(self.merge_id.clone()).into());
        }
        self.out.push(body)
    }
}

type CandidatesFn<A> = Arc<dyn Fn(&MergeContext<A>) -> Vec<MergeCandidate> + Send + Sync>;
type ScoreAllFn<A> =
    Arc<dyn Fn(&MergeContext<A>, &[MergeCandidate]) -> Vec<MergeScoreVector> + Send + Sync>;
type ChooseFn = Arc<dyn Fn(&[ScoredCandidate]) -> MergeDecision + Send + Sync>;
type RecomputeFn<A> = Arc<dyn Fn(&MergeContext<A>) -> bool + Send + Sync>;
type ResultFn<A> =
    Arc<dyn Fn(Arc<A>, MergeResultContext<A>) -> BoxFuture<Result<()>> + Send + Sync>;

/// A merge policy: candidates, evidence computed once, a score per candidate, and a choice.
pub struct MergePolicy<A: AgentTypes> {
    id: String,
    version: String,
    pub(crate) should_recompute: Option<RecomputeFn<A>>,
    pub(crate) candidates: CandidatesFn<A>,
    pub(crate) score_all: ScoreAllFn<A>,
    pub(crate) choose: ChooseFn,
    pub(crate) on_result: Option<ResultFn<A>>,
}

impl<A: AgentTypes> MergePolicy<A> {
    /// A policy from its four required functions (`evidence` is computed once per merge and
    /// handed to every `score` call).
    pub fn new<E, C, Ev, S, Ch>(
        id: impl Into<String>,
        version: impl Into<String>,
        candidates: C,
        evidence: Ev,
        score: S,
        choose: Ch,
    ) -> Self
    where
        E: 'static,
        C: Fn(&MergeContext<A>) -> Vec<MergeCandidate> + Send + Sync + 'static,
        Ev: Fn(&MergeContext<A>) -> E + Send + Sync + 'static,
        S: Fn(&MergeCandidate, &E, &MergeContext<A>) -> MergeScoreVector + Send + Sync + 'static,
        Ch: Fn(&[ScoredCandidate]) -> MergeDecision + Send + Sync + 'static,
    {
        MergePolicy {
            id: id.into(),
            version: version.into(),
            should_recompute: None,
            candidates: Arc::new(candidates),
            score_all: Arc::new(move |ctx, cands| {
                let ev = evidence(ctx);
                cands.iter().map(|c| score(c, &ev, ctx)).collect()
            }),
            choose: Arc::new(choose),
            on_result: None,
        }
    }

    /// Skips the merge (`merge.skipped`, reason `settled`) while this returns false.
    pub fn should_recompute(
        mut self,
        f: impl Fn(&MergeContext<A>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.should_recompute = Some(Arc::new(f));
        self
    }

    /// `onMergeResult`: runs after `merge.selected`; its emitted receipts are bound by
    /// `merge.output.manifest` and appended before `merge.applied`.
    pub fn on_result<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<A>, MergeResultContext<A>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.on_result = Some(Arc::new(move |agent, ctx| Box::pin(f(agent, ctx))));
        self
    }

    /// The policy id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The policy version.
    pub fn version(&self) -> &str {
        &self.version
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.id.is_empty() || self.version.is_empty() {
            return Err(AgentError::InvalidMergePolicy.into());
        }
        Ok(())
    }

    pub(crate) fn declared() -> &'static [&'static str] {
        <A::Receipts as ReceiptSet>::TYPES
    }
}

/// Declares a merge policy (the SDK's `merge`): the same as [`MergePolicy::new`].
pub fn merge<A, E, C, Ev, S, Ch>(
    id: impl Into<String>,
    version: impl Into<String>,
    candidates: C,
    evidence: Ev,
    score: S,
    choose: Ch,
) -> MergePolicy<A>
where
    A: AgentTypes,
    E: 'static,
    C: Fn(&MergeContext<A>) -> Vec<MergeCandidate> + Send + Sync + 'static,
    Ev: Fn(&MergeContext<A>) -> E + Send + Sync + 'static,
    S: Fn(&MergeCandidate, &E, &MergeContext<A>) -> MergeScoreVector + Send + Sync + 'static,
    Ch: Fn(&[ScoredCandidate]) -> MergeDecision + Send + Sync + 'static,
{
    MergePolicy::new(id, version, candidates, evidence, score, choose)
}

pub use self::merge as rebracket;
