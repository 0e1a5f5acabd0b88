//! Go-compatible canonical JSON, args hashes and step ids.
//!
//! This module owns step identity: the exact bytes the Go kernel's
//! `identity.CanonicalizeJSON` produces for a step's `args`, the `args_hash` over them and the
//! length-prefixed `step_id`. Kernel and agent SDK both call it, so an id computed on either side
//! matches the other and matches the Go kernel byte for byte.
//!
//! The canonical form is *not* RFC 8785 (JCS). It is what Go's `encoding/json` produces when it
//! decodes with `UseNumber` into `interface{}` and re-marshals:
//!
//! * only the first JSON value of the input is read (trailing bytes are ignored, as Go's
//!   `json.Decoder` does); an empty input, like `null`, gives `null`;
//! * whitespace is dropped; object keys are sorted bytewise (UTF-8 order, so `"😀"` sorts after
//!   `"\uffff"`); duplicate keys keep the last value; arrays keep their order;
//! * number literals are copied verbatim (`1.0`, `1e5`, `1E+05`, `-0` and integers of any size);
//! * strings are re-escaped the Go way with HTML escaping on: `<`, `>`, `&`, U+2028 and U+2029
//!   become `\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029`; U+0008 and U+000C become `\b` and
//!   `\f`; other control characters become `\u00xx`; everything else (DEL included) is raw UTF-8;
//! * invalid UTF-8 inside strings and unpaired surrogate escapes become U+FFFD, one replacement per
//!   invalid byte (Go's `utf8.DecodeRune` rule, which differs from [`String::from_utf8_lossy`]);
//! * nesting deeper than [`MAX_DEPTH`] is refused, like Go's scanner.
//!
//! serde_json cannot be used for this (it rewrites number literals and does not escape HTML
//! characters), so the module carries its own small tokenizer. Parsing and re-encoding are
//! iterative, so hostile nesting cannot overflow the stack.
//!
//! The kernel parses submitted args once with [`step_args`], which gives the args hash and the
//! value policy evaluates and the store records from the same parse tree (submodule `args`).

mod args;

pub use args::{
    ArgsError, MAX_ARGS_DEPTH, MAX_NUMBER_BYTES, NumberError, StepArgs, check_numbers, step_args,
};

use std::collections::BTreeMap;
use std::fmt;

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// Deepest nesting of arrays and objects accepted, the limit of Go's JSON scanner.
pub const MAX_DEPTH: usize = 10_000;

/// Why a step's args could not be canonicalized.
///
/// The kernel answers these with `400 validation_error` and the message `invalid args: <error>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// A byte the JSON grammar does not allow where it appears.
    #[error("invalid character {} {context} (at byte {offset})", QuotedByte(*found))]
    InvalidCharacter {
        /// The offending byte.
        found: u8,
        /// What the parser was looking for, in the words of Go's scanner.
        context: &'static str,
        /// Byte offset of the offending byte in the input.
        offset: usize,
    },
    /// The input ended inside a value, or held nothing but whitespace.
    #[error("unexpected end of JSON input")]
    UnexpectedEnd,
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    #[error("exceeded max depth (at byte {offset})")]
    TooDeep {
        /// Byte offset of the bracket that went one level too deep.
        offset: usize,
    },
    /// A `serde_json::Value` could not be serialized before canonicalization.
    #[error("serialize args: {0}")]
    Serialize(String),
}

/// Renders a byte the way Go's scanner errors quote it: `'x'` for printable ASCII.
struct QuotedByte(u8);

impl fmt::Display for QuotedByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b'\'' => f.write_str(r"'\''"),
            b'"' => f.write_str("'\"'"),
            b @ 0x20..=0x7e => write!(f, "'{}'", b as char),
            b => write!(f, "'\\x{b:02x}'"),
        }
    }
}

/// Canonicalizes raw JSON bytes exactly as the Go kernel does (see the module docs).
///
/// An empty input (args absent) and `null` both give `null`. Bytes after the first complete JSON
/// value are ignored. Invalid JSON gives an [`IdentityError`]; this function never panics.
///
/// ```
/// let c = rebuno::identity::canonical_json(br#"{ "b": 1e5, "a": "<&>" }"#).unwrap();
/// assert_eq!(c, br#"{"a":"\u003c\u0026\u003e","b":1e5}"#);
/// ```
pub fn canonical_json(raw: &[u8]) -> Result<Vec<u8>, IdentityError> {
    if raw.is_empty() {
        return Ok(b"null".to_vec());
    }
    let tree = Parser::new(raw).parse()?;
    Ok(tree.encode(raw.len()))
}

/// Canonicalizes a [`serde_json::Value`] after serializing it with [`serde_json::to_vec`].
///
/// The value's numbers are whatever serde_json made of them (for example `1e5` parsed into a
/// `Value` is an `f64` and serializes as `100000.0`), so hash the raw request bytes with
/// [`canonical_json`] or [`canonical_json_raw`] whenever they are available.
pub fn canonical_json_value(value: &serde_json::Value) -> Result<Vec<u8>, IdentityError> {
    let raw = serde_json::to_vec(value).map_err(|e| IdentityError::Serialize(e.to_string()))?;
    canonical_json(&raw)
}

/// Canonicalizes a [`RawValue`], which keeps the caller's bytes (number literals included).
pub fn canonical_json_raw(raw: &RawValue) -> Result<Vec<u8>, IdentityError> {
    canonical_json(raw.get().as_bytes())
}

/// `lowercase_hex(sha256(canonical_json(raw)))`: the `args_hash` of a step.
///
/// ```
/// let h = rebuno::identity::args_hash(b"").unwrap();
/// assert_eq!(h, "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b");
/// assert_eq!(rebuno::identity::args_hash(b" null ").unwrap(), h);
/// ```
pub fn args_hash(raw: &[u8]) -> Result<String, IdentityError> {
    Ok(sha256_hex(&canonical_json(raw)?))
}

/// The `args_hash` of a [`serde_json::Value`]; see [`canonical_json_value`] for the caveat.
pub fn args_hash_value(value: &serde_json::Value) -> Result<String, IdentityError> {
    Ok(sha256_hex(&canonical_json_value(value)?))
}

/// The `args_hash` of a [`RawValue`].
pub fn args_hash_raw(raw: &RawValue) -> Result<String, IdentityError> {
    Ok(sha256_hex(&canonical_json_raw(raw)?))
}

/// The step id: `lowercase_hex(sha256(preimage))` where the preimage concatenates, for each of
/// `execution_id`, `kind`, `target`, `args_hash` and the decimal `occurrence`, the field's byte
/// length in decimal, a `:` and the field's UTF-8 bytes, with no separator between fields.
///
/// `execution_id` must be the canonical lowercase hyphenated UUID (see
/// [`crate::protocol::canonical_uuid`]); `kind` and `target` are taken as submitted.
///
/// ```
/// use rebuno::identity::{args_hash, step_id};
/// let id = step_id("0192f1a0-0000-7000-8000-000000000000", "tool_call", "t", &args_hash(b"").unwrap(), 0);
/// assert_eq!(id, "6db37b2457f3c82a563387f9afc3fca02097fafa43862c2b94efb6409c86618e");
/// ```
pub fn step_id(
    execution_id: &str,
    kind: &str,
    target: &str,
    args_hash: &str,
    occurrence: u64,
) -> String {
    let occurrence = occurrence.to_string();
    let mut hasher = Sha256::new();
    for field in [execution_id, kind, target, args_hash, occurrence.as_str()] {
        hasher.update(field.len().to_string().as_bytes());
        hasher.update(b":");
        hasher.update(field.as_bytes());
    }
    hex_lower(&hasher.finalize())
}

/// Computes the step id straight from raw args bytes: [`args_hash`] then [`step_id`].
pub fn step_id_for_args(
    execution_id: &str,
    kind: &str,
    target: &str,
    raw_args: &[u8],
    occurrence: u64,
) -> Result<String, IdentityError> {
    let hash = args_hash(raw_args)?;
    Ok(step_id(execution_id, kind, target, &hash, occurrence))
}

/// Whether `s` has the shape of a step id or args hash: exactly 64 lowercase hex digits.
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 0x0f)] as char);
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Parsing into a flat arena.
// ---------------------------------------------------------------------------------------------

/// One parsed value. Children are indices into [`Tree::nodes`], so dropping and encoding never
/// recurse.
enum Node<'a> {
    /// `null`, `true` or `false`, as their literal bytes.
    Literal(&'static [u8]),
    /// A number, as the exact bytes of its literal in the input.
    Number(&'a [u8]),
    /// A decoded string.
    String(String),
    /// An array's elements in order.
    Array(Vec<usize>),
    /// An object's members sorted bytewise by key, duplicates already resolved (last wins).
    Object(Vec<(String, usize)>),
}

/// A container whose closing bracket has not been read yet.
enum Frame {
    Array(Vec<usize>),
    Object {
        members: BTreeMap<String, usize>,
        key: String,
    },
}

struct Tree<'a> {
    nodes: Vec<Node<'a>>,
    root: usize,
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    nodes: Vec<Node<'a>>,
}

impl<'a> Parser<'a> {
    fn new(src: &'a [u8]) -> Self {
        Parser {
            src,
            pos: 0,
            nodes: Vec::new(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\r' | b'\n') = self.peek() {
            self.pos += 1;
        }
    }

    fn invalid(&self, context: &'static str) -> IdentityError {
        match self.peek() {
            Some(found) => IdentityError::InvalidCharacter {
                found,
                context,
                offset: self.pos,
            },
            None => IdentityError::UnexpectedEnd,
        }
    }

    fn push(&mut self, node: Node<'a>) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Reads the first JSON value of the input; what follows it is ignored.
    fn parse(mut self) -> Result<Tree<'a>, IdentityError> {
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            // Expecting a value.
            self.skip_ws();
            let Some(b) = self.peek() else {
                return Err(IdentityError::UnexpectedEnd);
            };
            let mut value = match b {
                b'{' | b'[' => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(IdentityError::TooDeep { offset: self.pos });
                    }
                    self.pos += 1;
                    self.skip_ws();
                    if b == b'[' {
                        if self.peek() == Some(b']') {
                            self.pos += 1;
                            self.push(Node::Array(Vec::new()))
                        } else {
                            stack.push(Frame::Array(Vec::new()));
                            continue;
                        }
                    } else if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.push(Node::Object(Vec::new()))
                    } else {
                        let key = self.object_key()?;
                        stack.push(Frame::Object {
                            members: BTreeMap::new(),
                            key,
                        });
                        continue;
                    }
                }
                b'"' => {
                    let s = self.string()?;
                    self.push(Node::String(s))
                }
                b'-' | b'0'..=b'9' => {
                    let n = self.number()?;
                    self.push(Node::Number(n))
                }
                b't' => self.literal(b"true", TRUE_CONTEXTS)?,
                b'f' => self.literal(b"false", FALSE_CONTEXTS)?,
                b'n' => self.literal(b"null", NULL_CONTEXTS)?,
                _ => return Err(self.invalid("looking for beginning of value")),
            };
            // Attach the finished value to its container, closing containers as they end.
            loop {
                let Some(frame) = stack.pop() else {
                    return Ok(Tree {
                        nodes: self.nodes,
                        root: value,
                    });
                };
                match frame {
                    Frame::Array(mut items) => {
                        items.push(value);
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                stack.push(Frame::Array(items));
                                break;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                value = self.push(Node::Array(items));
                            }
                            _ => return Err(self.invalid("after array element")),
                        }
                    }
                    Frame::Object { mut members, key } => {
                        // Last duplicate wins, as when Go decodes into a map.
                        members.insert(key, value);
                        self.skip_ws();
                        match self.peek() {
                            Some(b',') => {
                                self.pos += 1;
                                self.skip_ws();
                                let key = self.object_key()?;
                                stack.push(Frame::Object { members, key });
                                break;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                value = self.push(Node::Object(members.into_iter().collect()));
                            }
                            _ => return Err(self.invalid("after object key:value pair")),
                        }
                    }
                }
            }
        }
    }

    /// Reads `"key"` and the `:` after it; the cursor is on the opening quote.
    fn object_key(&mut self) -> Result<String, IdentityError> {
        if self.peek() != Some(b'"') {
            return Err(self.invalid("looking for beginning of object key string"));
        }
        let key = self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.invalid("after object key"));
        }
        self.pos += 1;
        Ok(key)
    }

    /// Reads `true`, `false` or `null`; `contexts[i]` is Go's error context for byte `i`.
    fn literal(
        &mut self,
        word: &'static [u8],
        contexts: &'static [&'static str],
    ) -> Result<usize, IdentityError> {
        for (i, &expected) in word.iter().enumerate() {
            match self.peek() {
                Some(b) if b == expected => self.pos += 1,
                Some(found) => {
                    return Err(IdentityError::InvalidCharacter {
                        found,
                        context: contexts.get(i).copied().unwrap_or("in literal"),
                        offset: self.pos,
                    });
                }
                None => return Err(IdentityError::UnexpectedEnd),
            }
        }
        Ok(self.push(Node::Literal(word)))
    }

    /// Reads a number literal and returns its exact bytes.
    fn number(&mut self) -> Result<&'a [u8], IdentityError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.invalid("in numeric literal")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.invalid("after decimal point in numeric literal"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.invalid("in exponent of numeric literal"));
            }
            self.digits();
        }
        Ok(&self.src[start..self.pos])
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    /// Reads a string literal (cursor on the opening quote) and decodes it the way Go's
    /// `unquote` does: escapes resolved, invalid UTF-8 and unpaired surrogates made U+FFFD.
    fn string(&mut self) -> Result<String, IdentityError> {
        self.pos += 1;
        let mut out = String::new();
        let mut run_start = self.pos;
        loop {
            let Some(b) = self.peek() else {
                return Err(IdentityError::UnexpectedEnd);
            };
            match b {
                b'"' => {
                    push_go_lossy(&mut out, &self.src[run_start..self.pos]);
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    push_go_lossy(&mut out, &self.src[run_start..self.pos]);
                    self.pos += 1;
                    self.escape(&mut out)?;
                    run_start = self.pos;
                }
                0x00..=0x1f => return Err(self.invalid("in string literal")),
                _ => self.pos += 1,
            }
        }
    }

    /// Decodes one escape; the cursor is just after the backslash.
    fn escape(&mut self, out: &mut String) -> Result<(), IdentityError> {
        let Some(b) = self.peek() else {
            return Err(IdentityError::UnexpectedEnd);
        };
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                self.pos += 1;
                let first = self.hex4()?;
                let c = if (0xd800..0xe000).contains(&first) {
                    // A surrogate counts only when a high one is directly followed by an escaped
                    // low one; otherwise it is U+FFFD and the next escape is read on its own.
                    match self.low_surrogate_after(first) {
                        Some(c) => {
                            self.pos += 6;
                            c
                        }
                        None => char::REPLACEMENT_CHARACTER,
                    }
                } else {
                    char::from_u32(first).unwrap_or(char::REPLACEMENT_CHARACTER)
                };
                out.push(c);
                return Ok(());
            }
            _ => return Err(self.invalid("in string escape code")),
        };
        self.pos += 1;
        out.push(c);
        Ok(())
    }

    /// Reads the four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u32, IdentityError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(b @ b'0'..=b'9') => b - b'0',
                Some(b @ b'a'..=b'f') => b - b'a' + 10,
                Some(b @ b'A'..=b'F') => b - b'A' + 10,
                _ => return Err(self.invalid("in \\u hexadecimal character escape")),
            };
            v = v * 16 + u32::from(d);
            self.pos += 1;
        }
        Ok(v)
    }

    /// If `high` is a high surrogate and the next six bytes are a well-formed `\uXXXX` low
    /// surrogate, the character the pair encodes (without moving the cursor).
    fn low_surrogate_after(&self, high: u32) -> Option<char> {
        if !(0xd800..0xdc00).contains(&high) {
            return None;
        }
        let rest = self.src.get(self.pos..self.pos + 6)?;
        if rest[0] != b'\\' || rest[1] != b'u' {
            return None;
        }
        let mut low = 0u32;
        for &b in &rest[2..] {
            low = low * 16 + (b as char).to_digit(16)?;
        }
        if !(0xdc00..0xe000).contains(&low) {
            return None;
        }
        char::from_u32(0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00))
    }
}

const TRUE_CONTEXTS: &[&str] = &[
    "looking for beginning of value",
    "in literal true (expecting 'r')",
    "in literal true (expecting 'u')",
    "in literal true (expecting 'e')",
];
const FALSE_CONTEXTS: &[&str] = &[
    "looking for beginning of value",
    "in literal false (expecting 'a')",
    "in literal false (expecting 'l')",
    "in literal false (expecting 's')",
    "in literal false (expecting 'e')",
];
const NULL_CONTEXTS: &[&str] = &[
    "looking for beginning of value",
    "in literal null (expecting 'u')",
    "in literal null (expecting 'l')",
    "in literal null (expecting 'l')",
];

/// Appends raw string bytes, replacing each byte that does not start a valid UTF-8 sequence with
/// U+FFFD (Go's `utf8.DecodeRune` consumes one byte per error; `from_utf8_lossy` may consume more).
fn push_go_lossy(out: &mut String, mut bytes: &[u8]) {
    loop {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                return;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                // `valid` is valid UTF-8 by construction of `valid_up_to`.
                if let Ok(s) = std::str::from_utf8(valid) {
                    out.push_str(s);
                }
                out.push(char::REPLACEMENT_CHARACTER);
                bytes = rest.get(1..).unwrap_or_default();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding.
// ---------------------------------------------------------------------------------------------

impl Tree<'_> {
    fn encode(&self, size_hint: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(size_hint);
        // (container node, index of the next child to write)
        let mut stack: Vec<(usize, usize)> = Vec::new();
        self.open(self.root, &mut out, &mut stack);
        while let Some((node, next)) = stack.last_mut() {
            let child = match &self.nodes[*node] {
                Node::Array(items) => match items.get(*next) {
                    Some(&child) => {
                        if *next > 0 {
                            out.push(b',');
                        }
                        child
                    }
                    None => {
                        out.push(b']');
                        stack.pop();
                        continue;
                    }
                },
                Node::Object(members) => match members.get(*next) {
                    Some((key, child)) => {
                        if *next > 0 {
                            out.push(b',');
                        }
                        write_go_string(&mut out, key);
                        out.push(b':');
                        *child
                    }
                    None => {
                        out.push(b'}');
                        stack.pop();
                        continue;
                    }
                },
                _ => {
                    stack.pop();
                    continue;
                }
            };
            *next += 1;
            self.open(child, &mut out, &mut stack);
        }
        out
    }

    /// Writes a scalar completely, or a container's opening bracket and schedules its children.
    fn open(&self, node: usize, out: &mut Vec<u8>, stack: &mut Vec<(usize, usize)>) {
        match &self.nodes[node] {
            Node::Literal(bytes) | Node::Number(bytes) => out.extend_from_slice(bytes),
            Node::String(s) => write_go_string(out, s),
            Node::Array(_) => {
                out.push(b'[');
                stack.push((node, 0));
            }
            Node::Object(_) => {
                out.push(b'{');
                stack.push((node, 0));
            }
        }
    }
}

/// Writes `s` as a JSON string the way Go's `json.Marshal` does (Go ≥ 1.22, HTML escaping on).
fn write_go_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            0x00..=0x1f | b'<' | b'>' | b'&' => None,
            // U+2028 and U+2029 are E2 80 A8 and E2 80 A9 in UTF-8.
            0xe2 if bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xa8 | 0xa9)) =>
            {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(if bytes[i + 2] == 0xa8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 3;
                start = i;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        match escape {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0x0f)],
            ]),
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &[u8]) -> String {
        String::from_utf8(canonical_json(s).unwrap()).unwrap()
    }

    #[test]
    fn go_lossy_replaces_one_byte_at_a_time() {
        let mut s = String::new();
        // A truncated three-byte sequence followed by ASCII: Go gives two replacements.
        push_go_lossy(&mut s, b"\xe2\x82a");
        assert_eq!(s, "\u{fffd}\u{fffd}a");
        let mut s = String::new();
        push_go_lossy(&mut s, b"\xe2\xe2\x82\xac");
        assert_eq!(s, "\u{fffd}\u{20ac}");
    }

    #[test]
    fn surrogate_handling_matches_go_unquote() {
        assert_eq!(canon(br#""\ud800\u0041""#), "\"\u{fffd}A\"");
        assert_eq!(canon(br#""\ud800\ud800""#), "\"\u{fffd}\u{fffd}\"");
        assert_eq!(canon(br#""\udc00\ud83d\ude00""#), "\"\u{fffd}\u{1f600}\"");
        assert_eq!(canon(br#""\ud83d""#), "\"\u{fffd}\"");
    }
}
