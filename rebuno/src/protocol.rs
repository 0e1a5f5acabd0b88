//! Wire types and state machines (in progress).
