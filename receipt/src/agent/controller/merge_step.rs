//! The durable merge step: after a pass in which an invocation committed, the spec's merge policy
//! scores candidates and applies its choice, each step recorded under `<mergeId>:<step>` so that
//! a re-run finds what already happened.

use super::super::action::OutputBuffer;
use super::super::control::{
    self, MERGE_APPLIED, MERGE_FAILED, MERGE_OUTPUT_MANIFEST, MERGE_SELECTED, MERGE_SKIPPED,
    MERGE_STARTED, MergeEvent, MergeStarted, ScoreEntry, event_id,
};
use super::super::ids::{self, content_hash};
use super::super::merge::{MergeContext, MergePolicy, MergeResultContext, ScoredCandidate};
use super::super::{AgentError, AgentSpec, AgentTypes};
use super::Pass;
use super::fails_run;
use crate::error::Result;
use crate::runtime::Command;
use std::sync::Arc;

impl<A: AgentTypes> Pass<'_, A> {
    /// The durable merge, run after a pass in which an invocation committed: `merge.started`,
    /// then `merge.skipped`, or `merge.selected`, the result's manifest and outputs, and
    /// `merge.applied`; `merge.failed` when the policy fails the run.
    pub(super) async fn merge_step(&mut self) -> Result<()> {
        let spec = Arc::clone(&self.controller.spec);
        let Some(policy) = spec.merge_policy() else {
            return Ok(());
        };
        self.refresh().await?;
        let head = self.cache.head.clone();
        let merge_id = ids::merge_id(
            self.run_id,
            spec.id(),
            spec.version(),
            policy.id(),
            policy.version(),
            head.as_deref(),
        );
        let ctx = MergeContext::<A> {
            view: Arc::clone(&self.cache.view),
            run_id: self.run_id.to_owned(),
            head: head.clone(),
        };
        let body = control::body(
            MERGE_STARTED,
            &MergeStarted {
                merge_id: merge_id.clone(),
                policy_id: policy.id().to_owned(),
                policy_version: policy.version().to_owned(),
                head,
            },
        )?;
        let executed = self
            .append(body, event_id::merge(&merge_id, "started"), None)
            .await?;
        if executed.duplicate {
            self.refresh().await?;
            if !self.cache.control.merges.contains_key(&merge_id) {
                return Ok(()); // already ended
            }
        }
        match self.merge_body(&spec, policy, &merge_id, ctx).await {
            Err(e) if fails_run(&e) => {
                super::observe::merge_failed(self.run_id, &merge_id, &e);
                let body = control::body(
                    MERGE_FAILED,
                    &MergeEvent {
                        merge_id: merge_id.clone(),
                        error: Some(e.to_string()),
                        ..MergeEvent::default()
                    },
                )?;
                self.append(body, event_id::merge(&merge_id, "failed"), None)
                    .await?;
                Err(e)
            }
            other => other,
        }
    }

    /// Everything after `merge.started`: skip, or score, choose and apply a candidate.
    async fn merge_body(
        &mut self,
        spec: &AgentSpec<A>,
        policy: &MergePolicy<A>,
        merge_id: &str,
        ctx: MergeContext<A>,
    ) -> Result<()> {
        let skip = |reason: &str| {
            control::body(
                MERGE_SKIPPED,
                &MergeEvent {
                    merge_id: merge_id.to_owned(),
                    reason: Some(reason.to_owned()),
                    ..MergeEvent::default()
                },
            )
        };
        if let Some(recompute) = &policy.should_recompute
            && !recompute(&ctx)
        {
            let body = skip("settled")?;
            self.append(body, event_id::merge(merge_id, "skipped"), None)
                .await?;
            return Ok(());
        }
        let candidates = (policy.candidates)(&ctx);
        if candidates.is_empty() {
            let body = skip("no-candidates")?;
            self.append(body, event_id::merge(merge_id, "skipped"), None)
                .await?;
            return Ok(());
        }
        let scores = (policy.score_all)(&ctx, &candidates);
        let scored: Vec<ScoredCandidate> = candidates
            .into_iter()
            .zip(scores)
            .map(|(candidate, score)| ScoredCandidate { candidate, score })
            .collect();
        let decision = (policy.choose)(&scored);
        let chosen = scored
            .iter()
            .find(|s| s.candidate.id == decision.candidate_id)
            .cloned()
            .ok_or_else(|| AgentError::UnknownCandidate {
                policy: policy.id().to_owned(),
                candidate: decision.candidate_id.clone(),
            })?;
        let body = control::body(
            MERGE_SELECTED,
            &MergeEvent {
                merge_id: merge_id.to_owned(),
                candidate_id: Some(decision.candidate_id.clone()),
                reason: decision.reason.clone(),
                scores: Some(
                    scored
                        .iter()
                        .map(|s| ScoreEntry {
                            candidate_id: s.candidate.id.clone(),
                            score: s.score.clone(),
                        })
                        .collect(),
                ),
                ..MergeEvent::default()
            },
        )?;
        self.append(body, event_id::merge(merge_id, "selected"), None)
            .await?;
        if let Some(on_result) = policy.on_result.clone() {
            let out = OutputBuffer::new(policy.id(), MergePolicy::<A>::declared());
            let result_ctx = MergeResultContext {
                ctx,
                merge_id: merge_id.to_owned(),
                chosen,
                decision: decision.clone(),
                out: out.clone(),
            };
            let run = on_result(Arc::clone(spec.agent()), result_ctx).await;
            let outputs = out.close();
            run?;
            let count = outputs.len() as u64;
            let hash = content_hash(&outputs)?;
            self.refresh().await?;
            match self
                .cache
                .control
                .merges
                .get(merge_id)
                .and_then(|m| m.manifest.clone())
            {
                Some((n, h)) if n != count || h != hash => {
                    return Err(AgentError::MergeOutputMismatch {
                        policy: policy.id().to_owned(),
                        merge: merge_id.to_owned(),
                    }
                    .into());
                }
                Some(_) => {}
                None => {
                    let body = control::body(
                        MERGE_OUTPUT_MANIFEST,
                        &MergeEvent {
                            merge_id: merge_id.to_owned(),
                            output_count: Some(count),
                            content_hash: Some(hash),
                            ..MergeEvent::default()
                        },
                    )?;
                    self.append(body, event_id::merge(merge_id, "manifest"), None)
                        .await?;
                }
            }
            if !outputs.is_empty() {
                self.execute(Command::new(outputs).event_id(event_id::merge(merge_id, "output")))
                    .await?;
            }
        }
        let body = control::body(
            MERGE_APPLIED,
            &MergeEvent {
                merge_id: merge_id.to_owned(),
                candidate_id: Some(decision.candidate_id),
                ..MergeEvent::default()
            },
        )?;
        self.append(body, event_id::merge(merge_id, "applied"), None)
            .await?;
        Ok(())
    }
}
