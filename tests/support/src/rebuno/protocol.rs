//! What the wire-type tests (`protocol_*.rs`) share: the ids and timestamp their fixtures use,
//! and [`round_trip`]. A test file starts with `use harness::*;`.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use std::fmt::Debug;

pub use rebuno::protocol::*;
pub use serde::Serialize;
pub use serde::de::DeserializeOwned;
pub use serde_json::{Value, json};

pub const EXEC: &str = "0192f1a0-0000-7000-8000-000000000009";
pub const STEP: &str = "97efdc49f1a58717d07834e607d2fc9b6e0e7de1ae8d8f7c8ef1f6361b7bbf06";
pub const HASH: &str = "99292fc65b1416433c73754bd2133c24f100c4da791e825377abb6756eeb69ae";
pub const APPROVAL: &str = "0192f1a0-0000-7000-8000-00000000000a";
pub const DISPATCH: &str = "0192f1a0-0000-7000-8000-00000000000b";
pub const TS: &str = "2026-08-18T10:00:00.123456Z";

/// [`TS`] as a timestamp.
pub fn ts() -> rebuno::protocol::Timestamp {
    TS.parse().expect("TS is a timestamp")
}

/// Serializes `value`, checks the exact text, parses it back and checks equality.
pub fn round_trip<T>(value: &T, expected: &str)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text = serde_json::to_string(value).unwrap();
    assert_eq!(text, expected);
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value);
}
