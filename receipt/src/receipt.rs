//! The receipt record: ids, the hashed envelope, hashing and chain verification.
//!
//! A receipt's hash is SHA-256 (lowercase hex) over the RFC 8785 canonical JSON of
//! `{id, ts, stream, prev (null when absent), body, context (only when present)}`; `hints` are
//! never hashed. A [`Receipt`] keeps the canonical bytes it was built or loaded with, so
//! verification hashes them without serializing again; every setter that changes a hashed field
//! drops those bytes, so an edited receipt is always re-serialized and caught.

use crate::canonical::{self, CanonError};
use crate::sim::{Clock, EntropySource};
use durable_support::chain;
pub use durable_support::chain::{base36, hex, sha256_hex};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Non-hashed transport metadata (`eventId` for command dedup, trace ids, ...).
pub type Hints = BTreeMap<String, Value>;

/// The hint key the runtime uses for whole-command dedup.
pub const EVENT_ID_HINT: &str = "eventId";

/// How many levels of arrays and objects a stored document (a receipt's envelope, its hints)
/// may nest: the store reads them back with `serde_json`, which refuses anything deeper. A
/// receipt nesting deeper would be stored but read back without its body.
pub const MAX_STORED_DEPTH: usize = 127;

/// Authoritative scope of a receipt; part of its hash. `None` fields are omitted, never `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptContext {
    /// Who wrote the receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Tenant scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Organization scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization_id: Option<String>,
    /// Objective scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective_id: Option<String>,
    /// Task scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Job scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Run scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Branch scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Any other keys.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Errors building a receipt.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReceiptError {
    /// A hashed field cannot be canonicalized.
    #[error(transparent)]
    Canon(#[from] CanonError),
    /// Receipt timestamps are non-negative milliseconds (base36 ids cover no negatives).
    #[error("receipt ts must be a non-negative number of milliseconds, got {0}")]
    NegativeTs(i64),
    /// Stored canonical bytes that are not a receipt envelope.
    #[error("stored receipt envelope is malformed: {0}")]
    Malformed(String),
    /// A body, context value or hint nests so deeply that the stored receipt could not be read
    /// back.
    #[error(
        "receipt {part} nests too deeply: {limit} levels of arrays and objects at most (the stored receipt nests at most {MAX_STORED_DEPTH})"
    )]
    TooDeep {
        /// `body`, `context` or `hints`.
        part: &'static str,
        /// How deep that part may nest.
        limit: usize,
    },
}

/// Refuses `value` when it nests more than `limit` levels (iteratively: the value may be
/// deeper than the stack allows recursion for).
fn check_depth(value: &Value, limit: usize, part: &'static str) -> Result<(), ReceiptError> {
    let mut open: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, depth)) = open.pop() {
        let level = depth + 1;
        match v {
            Value::Array(items) if level <= limit => open.extend(items.iter().map(|c| (c, level))),
            Value::Object(fields) if level <= limit => {
                open.extend(fields.values().map(|c| (c, level)));
            }
            Value::Array(_) | Value::Object(_) => {
                return Err(ReceiptError::TooDeep { part, limit });
            }
            _ => {}
        }
    }
    Ok(())
}

/// One immutable record of a hash-linked stream.
#[derive(Clone)]
pub struct Receipt {
    id: String,
    ts: i64,
    stream: String,
    prev: Option<String>,
    body: Value,
    context: Option<ReceiptContext>,
    hash: String,
    hints: Hints,
    /// The canonical envelope this receipt was built or loaded with; `None` once a hashed field
    /// was changed (it is then recomputed on demand).
    canonical: Option<Arc<[u8]>>,
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipt")
            .field("id", &self.id)
            .field("ts", &self.ts)
            .field("stream", &self.stream)
            .field("prev", &self.prev)
            .field("body", &self.body)
            .field("context", &self.context)
            .field("hash", &self.hash)
            .field("hints", &self.hints)
            .finish()
    }
}

impl PartialEq for Receipt {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.ts == other.ts
            && self.stream == other.stream
            && self.prev == other.prev
            && self.body == other.body
            && self.context == other.context
            && self.hash == other.hash
            && self.hints == other.hints
    }
}

/// `<ts in base36>-<16 lowercase hex>`, the 8 bytes drawn from `entropy`.
pub fn receipt_id(ts: i64, entropy: &dyn EntropySource) -> Result<String, ReceiptError> {
    let mut bytes = [0u8; 8];
    entropy.fill(&mut bytes);
    let ts = u64::try_from(ts).map_err(|_| ReceiptError::NegativeTs(ts))?;
    Ok(chain::entry_id(ts, bytes))
}

fn digest_matches(bytes: &[u8], expected_hex: &str) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let expected = expected_hex.as_bytes();
    expected.len() == 64
        && digest.iter().enumerate().all(|(i, b)| {
            expected[2 * i] == HEX[(b >> 4) as usize]
                && expected[2 * i + 1] == HEX[(b & 0xf) as usize]
        })
}

/// The canonical envelope bytes for the given fields (the exact input of the hash).
pub fn envelope_bytes(
    id: &str,
    ts: i64,
    stream: &str,
    prev: Option<&str>,
    body: &Value,
    context: Option<&ReceiptContext>,
) -> Result<Vec<u8>, CanonError> {
    let context = context.map(canonical::to_value).transpose()?;
    chain::envelope_bytes(id, ts, stream, prev, body, context.as_ref())
}

#[derive(Deserialize)]
struct Envelope {
    id: String,
    ts: i64,
    stream: String,
    prev: Option<String>,
    body: Value,
    #[serde(default)]
    context: Option<ReceiptContext>,
}

impl Receipt {
    /// Builds and hashes a receipt from all of its fields.
    pub fn from_parts(
        id: impl Into<String>,
        ts: i64,
        stream: impl Into<String>,
        prev: Option<String>,
        body: Value,
        context: Option<ReceiptContext>,
        hints: Hints,
    ) -> Result<Receipt, ReceiptError> {
        if ts < 0 {
            return Err(ReceiptError::NegativeTs(ts));
        }
        let id = id.into();
        let stream = stream.into();
        let bytes = envelope_bytes(&id, ts, &stream, prev.as_deref(), &body, context.as_ref())?;
        let hash = sha256_hex(&bytes);
        Ok(Receipt {
            id,
            ts,
            stream,
            prev,
            body,
            context,
            hash,
            hints,
            canonical: Some(bytes.into()),
        })
    }

    /// Builds a new receipt linked onto `prev`, with id and `ts` from the injected clock and
    /// entropy.
    pub fn build(
        stream: impl Into<String>,
        prev: Option<String>,
        body: Value,
        context: Option<ReceiptContext>,
        hints: Hints,
        clock: &dyn Clock,
        entropy: &dyn EntropySource,
    ) -> Result<Receipt, ReceiptError> {
        // The envelope holds the body one level down and context values two; hints are stored
        // as an object of their own.
        check_depth(&body, MAX_STORED_DEPTH - 1, "body")?;
        for value in context.iter().flat_map(|c| c.extra.values()) {
            check_depth(value, MAX_STORED_DEPTH - 2, "context")?;
        }
        for value in hints.values() {
            check_depth(value, MAX_STORED_DEPTH - 1, "hints")?;
        }
        let ts = clock.now_ms();
        let id = receipt_id(ts, entropy)?;
        Receipt::from_parts(id, ts, stream, prev, body, context, hints)
    }

    /// Rebuilds a receipt from its stored canonical envelope and hash (the store's read path).
    /// The fields are parsed from the very bytes that are hashed, so they cannot disagree.
    pub fn from_stored(
        canonical: Vec<u8>,
        hash: String,
        hints: Hints,
    ) -> Result<Receipt, ReceiptError> {
        let env: Envelope = serde_json::from_slice(&canonical)
            .map_err(|e| ReceiptError::Malformed(e.to_string()))?;
        Ok(Receipt {
            id: env.id,
            ts: env.ts,
            stream: env.stream,
            prev: env.prev,
            body: env.body,
            context: env.context,
            hash,
            hints,
            canonical: Some(canonical.into()),
        })
    }

    /// A stored receipt whose envelope no longer parses: kept with its damaged bytes (so
    /// [`verify`] reports it as a hash mismatch at its index) and the indexed columns.
    #[doc(hidden)]
    pub fn damaged(
        id: String,
        ts: i64,
        stream: String,
        prev: Option<String>,
        hash: String,
        canonical: Vec<u8>,
    ) -> Receipt {
        Receipt {
            id,
            ts,
            stream,
            prev,
            body: Value::Null,
            context: None,
            hash,
            hints: Hints::new(),
            canonical: Some(canonical.into()),
        }
    }

    /// The id, `<ts base36>-<16 hex>`.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Milliseconds since the epoch.
    pub fn ts(&self) -> i64 {
        self.ts
    }
    /// The stream the receipt was written to.
    pub fn stream(&self) -> &str {
        &self.stream
    }
    /// The predecessor's hash; `None` on a stream's first receipt.
    pub fn prev(&self) -> Option<&str> {
        self.prev.as_deref()
    }
    /// The event payload.
    pub fn body(&self) -> &Value {
        &self.body
    }
    /// The authoritative scope, when present.
    pub fn context(&self) -> Option<&ReceiptContext> {
        self.context.as_ref()
    }
    /// The receipt's digest as stored (64 lowercase hex).
    pub fn hash(&self) -> &str {
        &self.hash
    }
    /// Non-hashed metadata.
    pub fn hints(&self) -> &Hints {
        &self.hints
    }
    /// The `eventId` hint, when present.
    pub fn event_id(&self) -> Option<&str> {
        self.hints.get(EVENT_ID_HINT).and_then(Value::as_str)
    }

    /// The event type: the body's string `type` field, or `unknown`.
    pub fn event_type(&self) -> &str {
        event_type_of(&self.body)
    }

    /// Deserializes the body into a typed value.
    pub fn body_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.body)
    }

    /// The canonical envelope: the cached bytes, or freshly serialized after an edit.
    pub fn canonical_bytes(&self) -> Result<Cow<'_, [u8]>, CanonError> {
        match &self.canonical {
            Some(bytes) => Ok(Cow::Borrowed(bytes)),
            None => envelope_bytes(
                &self.id,
                self.ts,
                &self.stream,
                self.prev.as_deref(),
                &self.body,
                self.context.as_ref(),
            )
            .map(Cow::Owned),
        }
    }

    /// Recomputes the digest from the hashed fields.
    pub fn compute_hash(&self) -> Result<String, CanonError> {
        Ok(sha256_hex(&self.canonical_bytes()?))
    }

    /// Whether the stored hash matches the hashed fields.
    pub fn hash_is_valid(&self) -> bool {
        self.canonical_bytes()
            .is_ok_and(|b| digest_matches(&b, &self.hash))
    }

    /// The same receipt linked onto another predecessor and re-hashed (branch
    /// materialization).
    pub fn relinked(&self, prev: Option<String>) -> Result<Receipt, ReceiptError> {
        Receipt::from_parts(
            self.id.clone(),
            self.ts,
            self.stream.clone(),
            prev,
            self.body.clone(),
            self.context.clone(),
            self.hints.clone(),
        )
    }

    /// Replaces the body without re-hashing (what tampering looks like; [`verify`] catches it).
    pub fn set_body(&mut self, body: Value) {
        self.body = body;
        self.canonical = None;
    }
    /// Replaces the context without re-hashing.
    pub fn set_context(&mut self, context: Option<ReceiptContext>) {
        self.context = context;
        self.canonical = None;
    }
    /// Replaces `prev` without re-hashing.
    pub fn set_prev(&mut self, prev: Option<String>) {
        self.prev = prev;
        self.canonical = None;
    }
    /// Replaces the stored hash.
    pub fn set_hash(&mut self, hash: String) {
        self.hash = hash;
    }
    /// Replaces the hints (never hashed, so the receipt stays valid).
    pub fn set_hints(&mut self, hints: Hints) {
        self.hints = hints;
    }
}

/// The event type of a body: its string `type` field, or `unknown`.
pub fn event_type_of(body: &Value) -> &str {
    body.get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
}

/// The wire / replay form of a receipt.
impl Serialize for Receipt {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("ts", &self.ts)?;
        map.serialize_entry("stream", &self.stream)?;
        if let Some(prev) = &self.prev {
            map.serialize_entry("prev", prev)?;
        }
        map.serialize_entry("body", &self.body)?;
        if let Some(ctx) = &self.context {
            map.serialize_entry("context", ctx)?;
        }
        map.serialize_entry("hash", &self.hash)?;
        if !self.hints.is_empty() {
            map.serialize_entry("hints", &self.hints)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Receipt {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            id: String,
            ts: i64,
            stream: String,
            #[serde(default)]
            prev: Option<String>,
            body: Value,
            #[serde(default)]
            context: Option<ReceiptContext>,
            hash: String,
            #[serde(default)]
            hints: Option<Map<String, Value>>,
        }
        let w = Wire::deserialize(deserializer)?;
        Ok(Receipt {
            id: w.id,
            ts: w.ts,
            stream: w.stream,
            prev: w.prev,
            body: w.body,
            context: w.context,
            hash: w.hash,
            hints: w.hints.map(|m| m.into_iter().collect()).unwrap_or_default(),
            canonical: None,
        })
    }
}

/// Why a chain failed verification. `Display` is exactly `broken prev` or `hash mismatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VerifyReason {
    /// A receipt's `prev` is not its predecessor's hash (or the first receipt has a `prev`).
    #[serde(rename = "broken prev")]
    BrokenPrev,
    /// A receipt's hash does not match its hashed fields.
    #[serde(rename = "hash mismatch")]
    HashMismatch,
}

impl fmt::Display for VerifyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VerifyReason::BrokenPrev => "broken prev",
            VerifyReason::HashMismatch => "hash mismatch",
        })
    }
}

/// A chain that verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// Number of receipts.
    pub count: usize,
    /// The last receipt's hash; `None` for an empty chain.
    pub head: Option<String>,
}

/// The first receipt that failed, by zero-based index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{reason} at index {at}")]
pub struct VerifyFailure {
    /// Zero-based index of the failing receipt.
    pub at: usize,
    /// Why it failed.
    pub reason: VerifyReason,
}

/// Verifies a whole chain: each `prev` links to the previous hash (the first has none), and
/// each hash matches its receipt.
pub fn verify(chain: &[Receipt]) -> Result<Verified, VerifyFailure> {
    verify_from(chain, None, 0)
}

/// Verifies a chain segment whose first receipt must link to `prev`; failures are reported at
/// `offset + i` (incremental verification of a suffix).
pub fn verify_from(
    chain: &[Receipt],
    prev: Option<&str>,
    offset: usize,
) -> Result<Verified, VerifyFailure> {
    let mut expected = prev;
    for (i, r) in chain.iter().enumerate() {
        if r.prev() != expected {
            return Err(VerifyFailure {
                at: offset + i,
                reason: VerifyReason::BrokenPrev,
            });
        }
        if !r.hash_is_valid() {
            return Err(VerifyFailure {
                at: offset + i,
                reason: VerifyReason::HashMismatch,
            });
        }
        expected = Some(r.hash());
    }
    Ok(Verified {
        count: chain.len(),
        head: expected.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{FixedClock, FixedEntropy};
    use serde_json::json;

    #[test]
    fn base36_matches_js() {
        assert_eq!(base36(1_767_225_600_000), "mjuohs00");
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
    }

    #[test]
    fn spec_vectors() {
        let r0 = Receipt::from_parts(
            "mjuohs00-0011223344556677",
            1_767_225_600_000,
            "agents/hello-agent/runs/run_x",
            None,
            json!({"type": "task.requested", "prompt": "say hello"}),
            None,
            Hints::new(),
        )
        .unwrap();
        assert_eq!(
            std::str::from_utf8(&r0.canonical_bytes().unwrap()).unwrap(),
            r#"{"body":{"prompt":"say hello","type":"task.requested"},"id":"mjuohs00-0011223344556677","prev":null,"stream":"agents/hello-agent/runs/run_x","ts":1767225600000}"#
        );
        assert_eq!(
            r0.hash(),
            "a6a2a53614bddd849611bb72848c90abd2b3c7a3216d928753cebaa4b50fb9ad"
        );
        let ctx = ReceiptContext {
            run_id: Some("run_x".into()),
            actor: Some("cli".into()),
            ..Default::default()
        };
        let mut hints = Hints::new();
        hints.insert("eventId".into(), json!("e1"));
        let r1 = Receipt::from_parts(
            "mjuohs01-8899aabbccddeeff",
            1_767_225_600_001,
            "agents/hello-agent/runs/run_x",
            Some(r0.hash().to_owned()),
            json!({"type": "task.completed", "output": "Echo: say hello"}),
            Some(ctx),
            hints,
        )
        .unwrap();
        assert_eq!(
            r1.hash(),
            "5d6cb80835b3b9d7f0bb48dbb938c58d3e74a1e40d4cb923207e616c76400200"
        );
        assert_eq!(verify(&[r0, r1]).unwrap().count, 2);
    }

    #[test]
    fn pinned_clock_and_entropy_give_pinned_ids() {
        let clock = FixedClock::new(1_767_225_600_000, 1);
        let entropy = FixedEntropy(vec![0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77]);
        let r = Receipt::build(
            "s",
            None,
            json!({"type": "a"}),
            None,
            Hints::new(),
            &clock,
            &entropy,
        )
        .unwrap();
        assert_eq!(r.id(), "mjuohs00-0011223344556677");
        assert!(
            Receipt::build(
                "s",
                None,
                json!({}),
                None,
                Hints::new(),
                &FixedClock::new(-1, 0),
                &entropy
            )
            .is_err()
        );
    }

    #[test]
    fn verify_reports_index_and_reason() {
        let clock = FixedClock::new(1000, 1);
        let entropy = FixedEntropy(vec![7]);
        let mut chain: Vec<Receipt> = Vec::new();
        for i in 0..4 {
            let prev = chain.last().map(|r| r.hash().to_owned());
            chain.push(
                Receipt::build(
                    "s",
                    prev,
                    json!({"type": "n", "i": i}),
                    None,
                    Hints::new(),
                    &clock,
                    &entropy,
                )
                .unwrap(),
            );
        }
        assert_eq!(
            verify(&chain).unwrap().head.as_deref(),
            Some(chain[3].hash())
        );
        let mut bad = chain.clone();
        bad[2].set_body(json!({"type": "n", "i": 99}));
        assert_eq!(
            verify(&bad).unwrap_err(),
            VerifyFailure {
                at: 2,
                reason: VerifyReason::HashMismatch
            }
        );
        let mut bad = chain.clone();
        bad[1].set_prev(None);
        assert_eq!(
            verify(&bad).unwrap_err().to_string(),
            "broken prev at index 1"
        );
        let mut bad = chain.clone();
        bad[3].set_hints(Hints::from([("x".to_owned(), json!(1))]));
        assert!(verify(&bad).is_ok(), "hints are not hashed");
        assert_eq!(
            verify(&[]).unwrap(),
            Verified {
                count: 0,
                head: None
            }
        );
    }

    #[test]
    fn a_receipt_nesting_deeper_than_the_store_reads_back_is_refused() {
        fn nested(levels: usize) -> Value {
            let mut v = json!({});
            for _ in 1..levels {
                v = json!({ "a": v });
            }
            v
        }
        let build = |body: Value, context: Option<ReceiptContext>, hints: Hints| {
            Receipt::build(
                "s",
                None,
                body,
                context,
                hints,
                &FixedClock::new(1, 1),
                &FixedEntropy(vec![1]),
            )
        };
        // The deepest body that is accepted parses back from its stored envelope.
        let r = build(nested(MAX_STORED_DEPTH - 1), None, Hints::new()).unwrap();
        let env: Envelope = serde_json::from_slice(&r.canonical_bytes().unwrap()).unwrap();
        assert_eq!(env.body, *r.body());
        assert_eq!(
            build(nested(MAX_STORED_DEPTH), None, Hints::new()).unwrap_err(),
            ReceiptError::TooDeep {
                part: "body",
                limit: MAX_STORED_DEPTH - 1
            }
        );
        let mut context = ReceiptContext::default();
        context
            .extra
            .insert("x".into(), nested(MAX_STORED_DEPTH - 2));
        let r = build(json!({}), Some(context.clone()), Hints::new()).unwrap();
        assert!(serde_json::from_slice::<Envelope>(&r.canonical_bytes().unwrap()).is_ok());
        context
            .extra
            .insert("x".into(), nested(MAX_STORED_DEPTH - 1));
        assert!(matches!(
            build(json!({}), Some(context), Hints::new()),
            Err(ReceiptError::TooDeep {
                part: "context",
                ..
            })
        ));
        let mut hints = Hints::new();
        hints.insert("h".into(), nested(MAX_STORED_DEPTH - 1));
        let stored = serde_json::to_string(&hints).unwrap();
        assert!(serde_json::from_str::<Hints>(&stored).is_ok());
        hints.insert("h".into(), nested(MAX_STORED_DEPTH));
        assert!(matches!(
            build(json!({}), None, hints),
            Err(ReceiptError::TooDeep { part: "hints", .. })
        ));
        // Depth, not size, is what is refused: wide bodies are fine.
        let wide: Vec<Value> = (0..10_000).map(|i| json!({ "i": [i] })).collect();
        assert!(build(json!({ "wide": wide }), None, Hints::new()).is_ok());
    }
}
