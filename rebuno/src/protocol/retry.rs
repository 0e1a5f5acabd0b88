//! How long a dispatch keeps trying to reach a down agent: the retry policy an agent may
//! register ([`DispatchRetry`]), its bounds, and what an execution shows while its delivery
//! waits for the next try ([`DispatchWaiting`]).
//!
//! An agent that is down does not end its executions: by default a delivery is retried without
//! limit, with a backoff that doubles from 1 s up to a cap (60 s). Only a limit someone set (an
//! attempt count, or a window counted from when the dispatch was queued) makes a delivery
//! give up, and the execution then fails with `dispatch_exhausted`.

use super::Timestamp;
use serde::{Deserialize, Serialize};

/// The longest backoff cap a policy may set, in seconds (one day).
pub const MAX_BACKOFF_CAP_SECONDS: f64 = 86_400.0;
/// The longest retry window a policy may set, in seconds (about ten years; 0 means none).
pub const MAX_RETRY_WINDOW_SECONDS: f64 = 315_360_000.0;

/// An agent's own dispatch retry policy (`dispatch_retry` of `POST /v0/agents` and of the
/// provisioning manifest). Each field left out takes the kernel's setting
/// (`--dispatch-max-attempts`, `--dispatch-retry-window`, `--dispatch-backoff-cap`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchRetry {
    /// Delivery attempts before the execution fails with `dispatch_exhausted`; 0 means no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Seconds from when a dispatch was queued after which a failed delivery is not retried
    /// (the execution fails with `dispatch_exhausted`); 0 means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_window_seconds: Option<f64>,
    /// The longest wait between two tries, in seconds (> 0): the backoff doubles from 1 s up
    /// to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_cap_seconds: Option<f64>,
}

impl DispatchRetry {
    /// Checks the bounds; the error is the text of the `400 validation_error`.
    pub fn check(&self) -> Result<(), String> {
        if let Some(w) = self.retry_window_seconds
            && !(w.is_finite() && (0.0..=MAX_RETRY_WINDOW_SECONDS).contains(&w))
        {
            return Err(format!(
                "dispatch_retry.retry_window_seconds must be a number of seconds from 0 (no \
                 limit) to {MAX_RETRY_WINDOW_SECONDS}, got {w}"
            ));
        }
        if let Some(c) = self.backoff_cap_seconds
            && !(c.is_finite() && c > 0.0 && c <= MAX_BACKOFF_CAP_SECONDS)
        {
            return Err(format!(
                "dispatch_retry.backoff_cap_seconds must be a number of seconds greater than 0 \
                 and at most {MAX_BACKOFF_CAP_SECONDS}, got {c}"
            ));
        }
        Ok(())
    }

    /// Whether every field is left out (the kernel's settings apply).
    pub fn is_empty(&self) -> bool {
        *self == DispatchRetry::default()
    }
}

/// What `GET /v0/executions/{id}` adds as `dispatch` while the execution's delivery failed and
/// waits for its next try (absent otherwise): the agent is down or refuses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchWaiting {
    /// Always `retrying`.
    pub status: String,
    /// The failed attempts so far.
    pub attempt: u32,
    /// Why the last attempt failed: the method, the webhook URL (without credentials or
    /// query) and the cause (`connection refused`, `timed out after 30 s`, `HTTP 503 …`).
    pub last_error: String,
    /// When the next try is due (sooner if the agent shows it is back).
    pub next_attempt_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::DispatchRetry;

    #[test]
    fn bounds_are_checked_and_named() {
        let ok = DispatchRetry {
            max_attempts: Some(0),
            retry_window_seconds: Some(0.0),
            backoff_cap_seconds: Some(0.5),
        };
        assert_eq!(ok.check(), Ok(()));
        for bad in [
            DispatchRetry {
                backoff_cap_seconds: Some(0.0),
                ..DispatchRetry::default()
            },
            DispatchRetry {
                retry_window_seconds: Some(-1.0),
                ..DispatchRetry::default()
            },
        ] {
            let err = bad.check().unwrap_err();
            assert!(err.starts_with("dispatch_retry."), "{err}");
        }
        let old: DispatchRetry = serde_json::from_str("{}").unwrap();
        assert!(old.is_empty());
        assert!(serde_json::from_str::<DispatchRetry>(r#"{"retries": 3}"#).is_err());
    }
}
