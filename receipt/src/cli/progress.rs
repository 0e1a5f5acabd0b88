//! Progress of the long commands, drawn on stderr only when it is a terminal (rebuno's
//! [`Progress`]): reading a large stream (`trace`, `replay`, `verify`), verifying it
//! (`verify`), and the receipts of a run as `run` appends them. In a pipe, a file or a test
//! nothing is drawn, and the commands read and print exactly what they would without it.

use super::CliResult;
use crate::receipt::{Verified, VerifyFailure, verify_from};
use crate::{Receipt, ReceiptStore, Runtime};
use rebuno::telemetry::Progress;
use std::sync::Arc;
use std::time::Duration;

/// A stream of at least this many receipts shows a bar while it is read and verified.
pub(super) const LARGE_STREAM: u64 = 10_000;
/// How many receipts one read (and one verification step) takes.
const PAGE: u64 = 4096;
/// How often `run`'s spinner looks at the run stream.
const RUN_POLL: Duration = Duration::from_millis(250);

/// A bar of `len` steps labelled `label` when `len` makes a large stream; nothing otherwise.
fn bar(label: &str, len: u64) -> Progress {
    if len >= LARGE_STREAM {
        Progress::bar(label, len)
    } else {
        Progress::hidden()
    }
}

/// `stream` as readers see it: a branch materialized, a plain stream read page by page up to
/// the tail it has when the read starts (with a bar when it is large).
pub(super) async fn read_chain(store: &dyn ReceiptStore, stream: &str) -> CliResult<Vec<Receipt>> {
    if store.branch(stream).await?.is_some() {
        return Ok(crate::branch::materialize(store, stream).await?);
    }
    let Some(tail) = store.tail(stream).await? else {
        return Ok(Vec::new());
    };
    let len = tail.seq + 1;
    let progress = bar("reading", len);
    let mut chain = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    while (chain.len() as u64) < len {
        let from = chain.len() as u64;
        let page = store
            .read_range(stream, from, Some(len.min(from + PAGE)))
            .await?;
        if page.is_empty() {
            break;
        }
        progress.inc(page.len() as u64);
        chain.extend(page);
    }
    progress.finish();
    Ok(chain)
}

/// Verifies `chain` as [`crate::verify`] does, a page at a time (with a bar when it is
/// large).
pub(super) fn verify_chain(chain: &[Receipt]) -> Result<Verified, VerifyFailure> {
    let progress = bar("verifying", chain.len() as u64);
    let page = usize::try_from(PAGE).unwrap_or(usize::MAX);
    let mut prev: Option<&str> = None;
    for (n, part) in chain.chunks(page).enumerate() {
        verify_from(part, prev, n * page)?;
        prev = part.last().map(Receipt::hash);
        progress.inc(part.len() as u64);
    }
    progress.finish();
    Ok(Verified {
        count: chain.len(),
        head: prev.map(str::to_owned),
    })
}

/// While `run` drives a run: a spinner with the run stream's length and last receipt type,
/// when stderr is a terminal. Stop it with [`RunProgress::finish`].
pub(super) struct RunProgress {
    progress: Progress,
    poll: Option<tokio::task::JoinHandle<()>>,
}

impl RunProgress {
    /// Starts watching `run_stream` of run `run_id`.
    pub(super) fn start(runtime: &Arc<Runtime>, run_id: &str, run_stream: &str) -> RunProgress {
        let progress = Progress::spinner(&format!("running {run_id}"));
        if !progress.is_drawn() {
            return RunProgress {
                progress,
                poll: None,
            };
        }
        let (store, stream, shown) = (
            Arc::clone(runtime.store()),
            run_stream.to_owned(),
            progress.clone(),
        );
        let poll = tokio::spawn(async move {
            loop {
                if let Ok(Some(tail)) = store.tail(&stream).await {
                    let last = store
                        .read_range(&stream, tail.seq, Some(tail.seq + 1))
                        .await
                        .ok()
                        .and_then(|mut r| r.pop());
                    let last = last.as_ref().map_or("", Receipt::event_type);
                    shown.set_message(format!("{} receipts, last {last}", tail.seq + 1));
                }
                tokio::time::sleep(RUN_POLL).await;
            }
        });
        RunProgress {
            progress,
            poll: Some(poll),
        }
    }

    /// Stops watching and clears the spinner.
    pub(super) fn finish(self) {
        if let Some(poll) = self.poll {
            poll.abort();
        }
        self.progress.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{FixedClock, FixedEntropy};
    use crate::{Hints, verify};
    use serde_json::json;

    fn chain(n: usize) -> Vec<Receipt> {
        let (clock, entropy) = (FixedClock::new(1, 1), FixedEntropy(vec![7]));
        let mut out: Vec<Receipt> = Vec::with_capacity(n);
        for i in 0..n {
            let prev = out.last().map(|r| r.hash().to_owned());
            let body = json!({"type": "t", "i": i});
            let r = Receipt::build("s", prev, body, None, Hints::new(), &clock, &entropy);
            out.push(r.unwrap());
        }
        out
    }

    #[test]
    fn paged_verification_answers_what_verify_does() {
        let page = PAGE as usize;
        for n in [0, 1, page - 1, page, page + 1, 2 * page + 3] {
            let good = chain(n);
            assert_eq!(verify_chain(&good), verify(&good), "{n} receipts");
            if n == 0 {
                continue;
            }
            // A broken link in every position class: first, at a page boundary, last.
            for at in [0, n / 2, (page).min(n - 1), n - 1] {
                let mut bad = good.clone();
                bad[at].set_prev(Some("broken".into()));
                assert_eq!(
                    verify_chain(&bad),
                    verify(&bad),
                    "{n} receipts, broken at {at}"
                );
            }
        }
    }
}
