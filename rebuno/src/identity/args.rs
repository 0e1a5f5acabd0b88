//! Step args as the kernel records them: one parse of the submitted bytes gives both the args
//! hash (through the Go-compatible canonical form of the parent module) and the JSON value that
//! policy predicates evaluate, the store keeps and `GET …/steps/{id}` answers.
//!
//! Deriving the value from the same parse tree as the hash is what makes policy see exactly what
//! is recorded. The canonicalizer accepts JSON that a [`serde_json::Value`] cannot hold (a number
//! such as `1e400`, nesting deeper than serde_json reads back, a lone surrogate escape); decoding
//! such args separately used to give `null`, so `arguments:` predicates stopped matching and a
//! denied call went through once a hostile field was added. Here args the kernel cannot record
//! faithfully are refused ([`ArgsError`], answered `400 validation_error`), and accepted args are
//! never replaced:
//!
//! * containers nested deeper than [`MAX_ARGS_DEPTH`] are refused: a step (and a list of steps)
//!   holding them must still decode with serde_json's nesting limit of 127 levels;
//! * integer literals must fit 64 bits, or be exactly a 64-bit float (`100000000000000000000`);
//! * other numbers must be finite 64-bit floats that are not rounded to zero (`1e400` and
//!   `1e-400` are refused; `0.1` is the usual nearest float);
//! * strings are decoded as the canonical form decodes them (Go's rules: invalid UTF-8 and
//!   unpaired surrogate escapes become U+FFFD), so the hash, the policy and the record agree;
//! * duplicate keys keep their last value, as in the canonical form.

use super::{IdentityError, Node, Parser, sha256_hex};
use serde_json::{Map, Number, Value};

/// The deepest nesting of arrays and objects the kernel records in step args.
pub const MAX_ARGS_DEPTH: usize = 100;

/// Longest number literal quoted in an error message.
const QUOTED_LITERAL: usize = 40;

/// Why a step's args cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgsError {
    /// Not JSON (Go's scanner wording; see [`IdentityError`]).
    #[error(transparent)]
    Syntax(#[from] IdentityError),
    /// Nested deeper than [`MAX_ARGS_DEPTH`].
    #[error("args are nested deeper than {MAX_ARGS_DEPTH} levels, which the kernel cannot record")]
    TooDeep,
    /// A number beyond the range of a 64-bit float.
    #[error("number {0} is outside the range of a 64-bit float and cannot be recorded")]
    OutOfRange(String),
    /// A non-zero number that a 64-bit float rounds to zero.
    #[error("number {0} is too small for a 64-bit float and would be recorded as 0")]
    Underflow(String),
    /// An integer beyond 64 bits that no 64-bit float holds exactly.
    #[error("integer {0} has more than 64 bits and cannot be recorded exactly")]
    InexactInteger(String),
}

/// Step args parsed once: the hash that goes into the step id and the value that policy
/// evaluates and the store records.
#[derive(Debug, Clone, PartialEq)]
pub struct StepArgs {
    /// `lowercase_hex(sha256(canonical_json(raw)))`, as [`super::args_hash`] computes it.
    pub hash: String,
    /// The args as recorded (`null` when absent).
    pub value: Value,
}

/// Parses raw args bytes (empty means absent, which records as `null`) into their hash and
/// recorded value, refusing args the kernel cannot record faithfully (see the module docs).
///
/// ```
/// let args = rebuno::identity::step_args(br#"{"cmd": "ls", "n": 1e5}"#).unwrap();
/// assert_eq!(args.value, serde_json::json!({"cmd": "ls", "n": 100000.0}));
/// assert_eq!(args.hash, rebuno::identity::args_hash(br#"{"cmd":"ls","n":1e5}"#).unwrap());
/// assert!(rebuno::identity::step_args(br#"{"n": 1e400}"#).is_err());
/// ```
pub fn step_args(raw: &[u8]) -> Result<StepArgs, ArgsError> {
    if raw.is_empty() {
        return Ok(StepArgs {
            hash: sha256_hex(b"null"),
            value: Value::Null,
        });
    }
    let tree = Parser::new(raw).parse()?;
    let canonical = tree.encode(raw.len());
    let value = to_value(tree.nodes, tree.root)?;
    Ok(StepArgs {
        hash: sha256_hex(&canonical),
        value,
    })
}

/// Builds the value of `root` without recursion: the parser pushes every container after its
/// children, so walking the arena in order finds each child's value already built.
fn to_value(nodes: Vec<Node<'_>>, root: usize) -> Result<Value, ArgsError> {
    let mut built: Vec<(Value, usize)> = Vec::with_capacity(nodes.len());
    for (index, node) in nodes.into_iter().enumerate() {
        let (value, depth) = match node {
            Node::Literal(b"true") => (Value::Bool(true), 0),
            Node::Literal(b"false") => (Value::Bool(false), 0),
            Node::Literal(_) => (Value::Null, 0),
            Node::Number(literal) => (Value::Number(number(literal)?), 0),
            Node::String(s) => (Value::String(s), 0),
            Node::Array(items) => {
                let mut depth = 0;
                let mut values = Vec::with_capacity(items.len());
                for child in items {
                    let (value, d) = take(&mut built, child, index);
                    depth = depth.max(d);
                    values.push(value);
                }
                (Value::Array(values), depth + 1)
            }
            Node::Object(members) => {
                let mut depth = 0;
                let mut map = Map::new();
                for (key, child) in members {
                    let (value, d) = take(&mut built, child, index);
                    depth = depth.max(d);
                    map.insert(key, value);
                }
                (Value::Object(map), depth + 1)
            }
        };
        if depth > MAX_ARGS_DEPTH {
            return Err(ArgsError::TooDeep);
        }
        built.push((value, depth));
    }
    Ok(built
        .get_mut(root)
        .map(|(v, _)| std::mem::take(v))
        .unwrap_or(Value::Null))
}

/// Moves a child's value out of the arena (each child has exactly one parent).
fn take(built: &mut [(Value, usize)], child: usize, parent: usize) -> (Value, usize) {
    debug_assert!(child < parent, "children are built before their container");
    built
        .get_mut(child)
        .map(|(v, d)| (std::mem::take(v), *d))
        .unwrap_or((Value::Null, 0))
}

/// The recorded number of a JSON number literal, or why it cannot be recorded.
fn number(literal: &[u8]) -> Result<Number, ArgsError> {
    // The parser only accepts ASCII digits, signs, `.` and exponents here.
    let text = std::str::from_utf8(literal).unwrap_or_default();
    let quoted = || {
        if text.len() > QUOTED_LITERAL {
            format!("{}…", &text[..QUOTED_LITERAL])
        } else {
            text.to_owned()
        }
    };
    let integer = !literal.iter().any(|b| matches!(b, b'.' | b'e' | b'E'));
    if integer {
        if let Ok(n) = text.parse::<u64>() {
            return Ok(n.into());
        }
        if let Ok(n) = text.parse::<i64>() {
            return Ok(n.into());
        }
    }
    let float: f64 = text.parse().map_err(|_| ArgsError::OutOfRange(quoted()))?;
    if !float.is_finite() {
        return Err(ArgsError::OutOfRange(quoted()));
    }
    if integer {
        // JSON integers have no leading zeros, so the exact decimal expansion of the float
        // equals the literal exactly when the float holds the integer.
        if format!("{float:.0}") != text {
            return Err(ArgsError::InexactInteger(quoted()));
        }
    } else if float == 0.0 {
        let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
        if mantissa.bytes().any(|b| matches!(b, b'1'..=b'9')) {
            return Err(ArgsError::Underflow(quoted()));
        }
    }
    Number::from_f64(float).ok_or_else(|| ArgsError::OutOfRange(quoted()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn value(raw: &str) -> Result<Value, ArgsError> {
        step_args(raw.as_bytes()).map(|a| a.value)
    }

    #[test]
    fn numbers_are_recorded_exactly_or_refused() {
        assert_eq!(value("[1, -1, 0, -0]").unwrap(), json!([1, -1, 0, 0]));
        assert_eq!(
            value("[18446744073709551615, -9223372036854775808]").unwrap(),
            json!([u64::MAX, i64::MIN])
        );
        assert_eq!(
            value("[1.0, 1e5, 2.5E-3, -0.0, 5e-324]").unwrap(),
            json!([1.0, 100000.0, 0.0025, -0.0, 5e-324])
        );
        assert_eq!(value("100000000000000000000").unwrap(), json!(1e20));
        assert_eq!(value("0e400").unwrap(), json!(0.0));
        for (raw, want) in [
            ("1e400", ArgsError::OutOfRange("1e400".into())),
            ("-1E+309", ArgsError::OutOfRange("-1E+309".into())),
            ("1e-400", ArgsError::Underflow("1e-400".into())),
            (
                "18446744073709551617",
                ArgsError::InexactInteger("18446744073709551617".into()),
            ),
        ] {
            assert_eq!(value(raw).unwrap_err(), want, "{raw}");
        }
        let long = format!("1{}", "0".repeat(400));
        let msg = value(&long).unwrap_err().to_string();
        assert!(msg.len() < 150, "long literals are shortened: {msg}");
    }

    #[test]
    fn depth_is_bounded_where_serde_json_can_read_it_back() {
        let nested = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
        let ok = value(&nested(MAX_ARGS_DEPTH)).unwrap();
        // A list of steps holding these args (two more levels) still decodes.
        let listing = json!([{ "args": ok }]).to_string();
        assert!(serde_json::from_str::<Value>(&listing).is_ok());
        assert_eq!(
            value(&nested(MAX_ARGS_DEPTH + 1)).unwrap_err(),
            ArgsError::TooDeep
        );
        assert_eq!(
            value(&format!(r#"{{"pad":{}}}"#, nested(MAX_ARGS_DEPTH))).unwrap_err(),
            ArgsError::TooDeep
        );
    }

    #[test]
    fn strings_keys_and_absence_follow_the_canonical_form() {
        assert_eq!(
            value(r#"{"b":1,"a":2,"b":3,"x":"\ud800<"}"#).unwrap(),
            json!({"a": 2, "b": 3, "x": "\u{fffd}<"})
        );
        let absent = step_args(b"").unwrap();
        assert_eq!(absent.value, Value::Null);
        assert_eq!(absent.hash, super::super::args_hash(b"null").unwrap());
        assert!(matches!(
            step_args(b"{").unwrap_err(),
            ArgsError::Syntax(IdentityError::UnexpectedEnd)
        ));
    }

    #[test]
    fn the_hash_is_the_canonical_hash() {
        for raw in [
            r#"{"b":[1,2,{"c":"<&>"}],"a":1e5}"#,
            r#" "x" "#,
            "null",
            r#"[1.0,-0,"\u2028"]"#,
        ] {
            assert_eq!(
                step_args(raw.as_bytes()).unwrap().hash,
                super::super::args_hash(raw.as_bytes()).unwrap()
            );
        }
    }
}
