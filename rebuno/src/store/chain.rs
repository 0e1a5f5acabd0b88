//! The execution's event log as a hash-linked chain: how one event is hashed, in the same
//! canonical form as a receipt, so an execution's log exports as a receipt stream that the
//! receipt model's verification accepts (one audit format for both models).
//!
//! Event `seq` of execution `id` is the entry
//!
//! ```text
//! {"body": {"at": <occurred_at>, "payload": <the payload's JSON text>, "seq": <seq>,
//!           "type": <event type>},
//!  "id": "<ts in base36>-<seq as 16 hex digits>", "prev": <hash of event seq - 1, or null>,
//!  "stream": "rebuno/executions/<id>", "ts": <occurred_at in Unix milliseconds>}
//! ```
//!
//! hashed as SHA-256 over its RFC 8785 canonical JSON. The payload is carried as its JSON text
//! (as stored), not as a value: the kernel records integers a canonical-JSON number cannot hold
//! exactly, and the text is what the store keeps. Every column of the event's row is covered.
//!
//! A store computes each new event's hash as it appends it (the previous one is in the row
//! before it) and, with a signing key, signs the head at the end of each write that appended
//! ([`SignedHead`], kept beside the log); [`ChainCheck`] recomputes a log from its events.

use crate::protocol::{Event, Timestamp};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::store::{StoreError, StoreResult};
use durable_support::chain::{base36, hex, sha256_hex};
use durable_support::{canonical, chain};
use serde_json::{Value, json};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use std::sync::{Arc, OnceLock};

pub use durable_support::audit::{AuditFailure, AuditInput, Coverage, audit, read_witness};
pub use durable_support::keys::{HeadProof, KeyError, PublicKey, SignedHead, SigningKey};

/// The prefix of an execution's stream name (a signed head names `rebuno/executions/<id>`).
pub const STREAM_PREFIX: &str = "rebuno/executions/";

/// The environment variable naming the kernel's signing key file (from `rebuno keygen`).
pub const SIGNING_KEY_ENV: &str = "REBUNO_SIGNING_KEY";

/// The stream name of execution `execution_id`'s log.
pub fn stream(execution_id: &str) -> String {
    format!("{STREAM_PREFIX}{execution_id}")
}

/// The execution an event-log stream name is of, if it is one.
pub fn execution_of(stream: &str) -> Option<&str> {
    stream.strip_prefix(STREAM_PREFIX)
}

/// The signing key a store signs heads with, set at most once after the store opened
/// ([`Store::set_signing_key`](super::Store::set_signing_key)).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug, Default, Clone)]
pub(crate) struct Signer(Arc<OnceLock<Arc<SigningKey>>>);

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Signer {
    /// Sets the key; refuses a second one (the same key again is accepted).
    pub(crate) fn set(&self, key: Arc<SigningKey>) -> StoreResult<()> {
        let id = key.id().to_owned();
        if self.get().is_some_and(|k| k.id() == id) {
            return Ok(());
        }
        self.0.set(key).map_err(|_| {
            StoreError::Database(format!(
                "this store already signs with key {}; cannot switch to {id}",
                self.get().map_or("", |k| k.id())
            ))
        })
    }

    /// The key, once set.
    pub(crate) fn get(&self) -> Option<&Arc<SigningKey>> {
        self.0.get()
    }
}

/// The head of a log a write extended: `(execution, length, hash of its last event, when)`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) type Head = (String, u64, String, Timestamp);

/// Signs `heads` with one signature (see [`SigningKey::sign_heads`]), the last one of each
/// execution's log among them (a write that appended to one log twice signs its final head):
/// `(execution, signed head)`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn sign_heads(key: &SigningKey, heads: &[Head]) -> Vec<(String, SignedHead)> {
    let last: Vec<&Head> = heads
        .iter()
        .enumerate()
        .filter(|(i, (execution_id, ..))| !heads[i + 1..].iter().any(|h| &h.0 == execution_id))
        .map(|(_, h)| h)
        .collect();
    let streams: Vec<String> = last.iter().map(|h| stream(&h.0)).collect();
    let fields: Vec<(&str, u64, &str, &str)> = last
        .iter()
        .zip(&streams)
        .map(|(h, s)| (s.as_str(), h.1, h.2.as_str(), h.3.as_str()))
        .collect();
    let signed = key.sign_heads(&fields);
    last.iter().map(|h| h.0.clone()).zip(signed).collect()
}

/// Unix milliseconds of `at` (0 for times before 1970, which a receipt cannot hold).
fn millis(at: &Timestamp) -> u64 {
    let micros = crate::time::micros(at.to_system_time());
    u64::try_from(micros / 1000).unwrap_or(0)
}

/// One event's envelope, without the two parts only the log's order decides (its `seq` and
/// its `prev`): what a store that numbers events in SQL completes there (the two parts are a
/// decimal number and 64 hex digits, canonical as they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFrame {
    /// Up to the body's `seq` value.
    pub before_seq: String,
    /// From the body's `seq` value to the id's hex suffix (the seq again).
    pub before_id_seq: String,
    /// After `prev`'s value, to the end.
    pub after_prev: String,
}

impl EventFrame {
    /// The frame of an event of `execution_id`, with the payload's JSON text as stored.
    pub fn new(execution_id: &str, event_type: &str, payload: &str, at: &Timestamp) -> Self {
        let ts = millis(at);
        let mut before_seq = br#"{"body":{"at":"#.to_vec();
        canonical::write_str(&mut before_seq, at.as_str());
        before_seq.extend_from_slice(br#","payload":"#);
        canonical::write_str(&mut before_seq, payload);
        before_seq.extend_from_slice(br#","seq":"#);
        let mut before_id_seq = br#","type":"#.to_vec();
        canonical::write_str(&mut before_id_seq, event_type);
        before_id_seq.extend_from_slice(br#"},"id":""#);
        before_id_seq.extend_from_slice(base36(ts).as_bytes());
        before_id_seq.push(b'-');
        let mut after_prev = br#","stream":"#.to_vec();
        canonical::write_str(&mut after_prev, &stream(execution_id));
        after_prev.extend_from_slice(br#","ts":"#);
        after_prev.extend_from_slice(ts.to_string().as_bytes());
        after_prev.push(b'}');
        let text = |b: Vec<u8>| String::from_utf8(b).expect("canonical JSON is UTF-8");
        EventFrame {
            before_seq: text(before_seq),
            before_id_seq: text(before_id_seq),
            after_prev: text(after_prev),
        }
    }

    /// The frame of a stored event.
    pub fn of(event: &Event) -> Self {
        EventFrame::new(
            &event.execution_id,
            event.event_type.as_str(),
            &event.payload.to_string(),
            &event.occurred_at,
        )
    }

    /// The whole envelope of the event at `seq` after the event hashed `prev`.
    pub fn envelope(&self, seq: u64, prev: Option<&str>) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.before_seq.len() + self.before_id_seq.len() + self.after_prev.len() + 120,
        );
        out.extend_from_slice(self.before_seq.as_bytes());
        out.extend_from_slice(seq.to_string().as_bytes());
        out.extend_from_slice(self.before_id_seq.as_bytes());
        out.extend_from_slice(hex(&seq.to_be_bytes()).as_bytes());
        out.extend_from_slice(br#"","prev":"#);
        match prev {
            Some(p) => canonical::write_str(&mut out, p),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(self.after_prev.as_bytes());
        out
    }

    /// The event's hash: SHA-256 of [`EventFrame::envelope`].
    pub fn hash(&self, seq: u64, prev: Option<&str>) -> String {
        sha256_hex(&self.envelope(seq, prev))
    }
}

/// An event as a receipt's fields: `(id, ts, stream, body)` (its `prev` is the hash of the
/// event before it). Hashing these as a receipt gives [`EventFrame::hash`].
pub fn entry(event: &Event) -> (String, i64, String, Value) {
    let ts = millis(&event.occurred_at);
    let body = json!({
        "at": event.occurred_at.as_str(),
        "payload": event.payload.to_string(),
        "seq": event.event_seq,
        "type": event.event_type.as_str(),
    });
    let id = chain::entry_id(ts, event.event_seq.to_be_bytes());
    (
        id,
        i64::try_from(ts).unwrap_or(i64::MAX),
        stream(&event.execution_id),
        body,
    )
}

/// Recomputes an execution's chain from its events, fed in order page by page: each event must
/// be the next by `seq`. Keeps every hash (a checkpoint may name any length).
#[derive(Debug, Default)]
pub struct ChainCheck {
    hashes: Vec<String>,
}

/// An event log that does not form a chain: an event missing from the sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event log: expected event {expected}, found event {found}: events are missing")]
pub struct GapError {
    /// The sequence number that should have come next.
    pub expected: u64,
    /// The one that did.
    pub found: u64,
}

impl ChainCheck {
    /// Adds the next event.
    pub fn push(&mut self, event: &Event) -> Result<(), GapError> {
        let expected = self.hashes.len() as u64 + 1;
        if event.event_seq != expected {
            return Err(GapError {
                expected,
                found: event.event_seq,
            });
        }
        let prev = self.hashes.last().map(String::as_str);
        let hash = EventFrame::of(event).hash(event.event_seq, prev);
        self.hashes.push(hash);
        Ok(())
    }

    /// Every hash so far, event 1 first.
    pub fn hashes(&self) -> &[String] {
        &self.hashes
    }

    /// The head: `(length, hash of the last event)`, `None` for an empty log.
    pub fn head(&self) -> Option<(u64, &str)> {
        self.hashes
            .last()
            .map(|h| (self.hashes.len() as u64, h.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventType;

    fn event(seq: u64, payload: Value) -> Event {
        Event {
            execution_id: "exec-1".into(),
            event_seq: seq,
            event_type: EventType::ExecutionCreated,
            payload,
            occurred_at: "2026-12-04T10:11:12.345678Z".parse().unwrap(),
        }
    }

    #[test]
    fn an_event_hashes_as_the_receipt_it_exports_as() {
        let e = event(
            3,
            json!({"a": "x\n\"y\"", "big": 18446744073709551615u64, "f": 0.1}),
        );
        let (id, ts, stream, body) = entry(&e);
        let prev = "ab".repeat(32);
        let receipt = chain::envelope_bytes(&id, ts, &stream, Some(&prev), &body, None).unwrap();
        let frame = EventFrame::of(&e);
        assert_eq!(frame.envelope(3, Some(&prev)), receipt);
        assert_eq!(frame.hash(3, Some(&prev)), sha256_hex(&receipt));
        assert_eq!(id, format!("{}-0000000000000003", base36(ts as u64)));
        assert_eq!(stream, "rebuno/executions/exec-1");
        let first = chain::envelope_bytes(&id, ts, &stream, None, &body, None).unwrap();
        assert_eq!(frame.envelope(3, None), first);
    }

    #[test]
    fn a_chain_links_each_event_to_the_one_before_and_refuses_gaps() {
        let mut check = ChainCheck::default();
        check.push(&event(1, json!({}))).unwrap();
        check.push(&event(2, json!({"n": 1}))).unwrap();
        let h = check.hashes().to_vec();
        assert_eq!(
            h[1],
            EventFrame::of(&event(2, json!({"n": 1}))).hash(2, Some(&h[0]))
        );
        assert_eq!(check.head(), Some((2, h[1].as_str())));
        let err = check.push(&event(4, json!({}))).unwrap_err();
        assert_eq!((err.expected, err.found), (3, 4));
        // Any change of content changes the hash.
        assert_ne!(
            EventFrame::of(&event(1, json!({"n": 2}))).hash(1, None),
            EventFrame::of(&event(1, json!({"n": 1}))).hash(1, None)
        );
    }
}
