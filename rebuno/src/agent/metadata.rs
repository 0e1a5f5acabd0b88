//! What an agent publishes about itself and when: the handler's description and the JSON
//! Schemas of its input and output ([`AgentMetadata`]), sent once when the agent starts serving
//! (`Agent::serve`, `Runtime::register`).
//!
//! A handler with nothing to say (no description, both schemas `{}`) publishes nothing, so
//! a closure agent that never set any leaves the kernel's record alone. A schema of `{}` is
//! sent as omitted (unknown). Publishing never stops the agent from serving: a failure is
//! logged (a `tracing` warning). When it failed because the kernel could not be reached or
//! did not know the agent yet (`401`: served before it was registered), the next delivery
//! tries again, as the Python SDK (0.28 and later) does; any other refusal is final.

use super::handler::AgentHandler;
use crate::error::{Error, Result};
use crate::protocol::{AgentMetadata, ErrorCode};
use serde_json::Value;
use std::sync::Mutex;

/// The metadata `handler` publishes, `None` when it has nothing to say.
pub fn metadata_of(handler: &dyn AgentHandler) -> Option<AgentMetadata> {
    let known = |schema: Value| (schema != Value::Object(serde_json::Map::new())).then_some(schema);
    let metadata = AgentMetadata {
        description: handler.description().to_owned(),
        input_schema: known(handler.input_schema()),
        output_schema: known(handler.output_schema()),
    };
    (metadata != AgentMetadata::default()).then_some(metadata)
}

/// Where an agent's publication stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not sent yet, or to be sent again.
    #[default]
    Unsent,
    /// A publication is under way.
    Sending,
    /// Published, or refused for good: never sent again.
    Settled,
}

/// Makes sure one publication at a time is under way, and none after it settled.
#[derive(Debug, Default)]
pub(super) struct Publication {
    state: Mutex<State>,
}

impl Publication {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Claims the next publication: `true` when the caller is to send it now.
    pub(super) fn begin(&self) -> bool {
        let mut state = self.lock();
        let claimed = *state == State::Unsent;
        if claimed {
            *state = State::Sending;
        }
        claimed
    }

    /// Records how the claimed publication of agent `agent_id` ended, logging a failure.
    pub(super) fn end(&self, agent_id: &str, result: Result<()>) {
        let next = match result {
            Ok(()) => State::Settled,
            Err(e) => {
                tracing::warn!(agent = agent_id, error = %e, "publishing agent metadata failed");
                if retry_later(&e) {
                    State::Unsent
                } else {
                    State::Settled
                }
            }
        };
        *self.lock() = next;
    }
}

/// Whether a later delivery may succeed where `e` failed: the kernel was unreachable, or did not
/// know the agent yet (a delivery proves it does by then).
fn retry_later(e: &Error) -> bool {
    super::transport::is_kernel_unavailable(e) || e.code() == Some(ErrorCode::Unauthorized)
}
