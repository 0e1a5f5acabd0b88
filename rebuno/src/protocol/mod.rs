//! Wire types and state machines of the kernel's `/v0` protocol.
//!
//! This module owns everything a kernel and an agent or client must agree on byte for byte. Its
//! submodules hold one concern each, and everything is re-exported here, so `protocol::X` is the
//! path to use:
//!
//! * `headers`: header names, body limits, and the [`Lease`] the lease headers carry;
//! * `errors`: the error envelope and its codes with their HTTP statuses;
//! * `status`: the status enums of executions, steps, approvals and dispatches, and their state
//!   machines (each `transition` accepts exactly the legal moves and refuses the rest with the
//!   error code the kernel answers);
//! * `kinds`: a step's kind and idempotency;
//! * `lease`: the lease length an agent may register, its check and its wire form;
//! * `resources`: the resource JSON of executions, steps, events, approvals and agents, the
//!   dispatch queue row, listings and live-stream frames, and the approver check;
//! * `requests`: the request bodies of the `/v0` routes and the webhook payload;
//! * `checkpoints`: external resources: the resource route bodies and answers, a decision's
//!   per-resource entries, checkpoint records and their bounds;
//! * `decisions`: the step decisions and the reasons of refusals;
//! * `events`: event types and their payloads;
//! * `ids`: UUID and step-id syntax;
//! * `keys`: API key scopes and resources, and the principal a client request acts as;
//! * `retry`: the delivery retry policy an agent may register and what a waiting delivery shows;
//! * `usage`: the token counts of a recorded `llm_call` result, in every provider's format
//!   (the kernel charges them to the token budget; the SDK notes them on its LLM spans).
//!
//! This module itself holds the `wire_enum!` table every fixed-name enum is declared with, and
//! the serde helpers the submodules share.
//!
//! Conventions. Optional fields are omitted when empty, like Go's `omitempty`. Fields holding
//! arbitrary JSON that Go keeps as `json.RawMessage` are `Option<Value>`: `None` is "absent" and
//! `Some(Value::Null)` is a stored JSON `null`, which is written out as `null`. Request bodies
//! refuse unknown fields (`400 validation_error`); like Go's decoder they treat missing fields
//! and JSON `null` as the zero value. Ids are plain strings: UUIDs in the canonical lowercase
//! hyphenated form ([`canonical_uuid`]) and step ids of 64 lowercase hex digits.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

pub use crate::time::Timestamp;

/// A string that names no variant of a wire enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownVariant {
    /// The enum that was parsed.
    pub kind: &'static str,
    /// The string that matched none of its wire names.
    pub value: String,
}

/// Declares a fieldless enum whose serde names, `as_str`, `Display` and `FromStr` all come from
/// one table, so they cannot disagree.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            ::serde::Serialize, ::serde::Deserialize,
        )]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::protocol::UnknownVariant;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $wire => Ok($name::$variant), )+
                    _ => Err($crate::protocol::UnknownVariant {
                        kind: stringify!($name),
                        value: s.to_owned(),
                    }),
                }
            }
        }
    };
}

/// Deserializes a field that is present as `Some`, even when it is JSON `null`, so "absent"
/// (`None` via `#[serde(default)]`) and "stored null" stay distinct.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// Reads JSON `null` as the type's default, as Go's decoder leaves the zero value.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn is_none_or_empty(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

mod checkpoints;
mod decisions;
mod errors;
mod events;
mod headers;
mod ids;
mod keys;
mod kinds;
mod lease;
mod requests;
mod resources;
mod retry;
mod status;
mod usage;

pub use checkpoints::*;
pub use decisions::*;
pub use errors::*;
pub use events::*;
pub use headers::*;
pub use ids::*;
pub use keys::*;
pub use kinds::*;
pub use lease::{MAX_LEASE_TIMEOUT_SECONDS, check_lease_seconds, lease_duration};
pub use requests::*;
pub use resources::*;
pub use retry::*;
pub use status::*;
pub use usage::token_usage;
