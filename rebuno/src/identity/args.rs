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
//! * integer literals (no fraction, no exponent) must fit 64 bits: a larger one is refused
//!   rather than recorded as a float, rounded (`123456789012345678901234567890`) or exact but
//!   served back as a float (`18446744073709551616` as `1.8446744073709552e19`, a type change
//!   for an agent that sent an integer); float literals such as `1e20` are floats. The
//!   recorded value is a [`serde_json::Value`], whose numbers are 64-bit: the store, the API,
//!   the event log and policy all read it, so a rounded integer would be recorded as another
//!   number, and two integers that round to the same float would match the same `equals` rule.
//!   Holding such integers exactly would take serde_json's `arbitrary_precision` feature, which
//!   Cargo turns on for every crate of a build, changing how each of them reads and compares
//!   numbers (and breaking `#[serde(flatten)]` of numeric fields). Send such a value as a string;
//! * other numbers must be finite 64-bit floats that are not rounded to zero (`1e400` and
//!   `1e-400` are refused; `0.1` is the usual nearest float);
//! * a number literal is at most [`MAX_NUMBER_BYTES`] long, so a megabyte of digits is refused
//!   before it is converted;
//! * strings are decoded as the canonical form decodes them (Go's rules: invalid UTF-8 and
//!   unpaired surrogate escapes become U+FFFD), so the hash, the policy and the record agree;
//! * duplicate keys keep their last value, as in the canonical form (a number only in a
//!   replaced value is neither recorded nor checked).
//!
//! A refused number is named by where it is (`args.amount`, `args.items[2]`, `args["a b"]`).
//!
//! [`check_numbers`] applies the same number rules to every other JSON value the kernel records
//! (every `/v0` request body is checked with it before it is decoded).

use super::{IdentityError, Node, Parser, sha256_hex};
use serde_json::{Map, Number, Value};

/// The deepest nesting of arrays and objects the kernel records in step args.
pub const MAX_ARGS_DEPTH: usize = 100;

/// Longest number literal quoted in an error message.
const QUOTED_LITERAL: usize = 40;

/// Longest object key quoted in the path of an error message.
const QUOTED_KEY: usize = 40;

/// Path segments named at each end of a longer path in an error message.
const PATH_ENDS: usize = 4;

/// The longest number literal accepted in step args, in bytes. The exact decimal expansion of
/// any 64-bit float fits (at most 1077 characters), so every number the kernel can record
/// fits; a longer literal is refused before it is converted.
pub const MAX_NUMBER_BYTES: usize = 1100;

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
    /// A number the kernel cannot record exactly.
    #[error("{at}: {problem}")]
    Number {
        /// Where the number is: `args`, `args.amount`, `args.items[2]`, `args["a b"]`.
        at: String,
        /// What is wrong with it.
        problem: NumberError,
    },
}

/// Why one number in step args (or another recorded JSON value) cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NumberError {
    /// A number beyond the range of a 64-bit float.
    #[error("number {0} is outside the range of a 64-bit float and cannot be recorded")]
    OutOfRange(String),
    /// A non-zero number that a 64-bit float rounds to zero.
    #[error("number {0} is too small for a 64-bit float and would be recorded as 0")]
    Underflow(String),
    /// An integer literal (no fraction, no exponent) outside the 64-bit range.
    #[error(
        "integer {0} has more than 64 bits and cannot be recorded exactly: the kernel records, \
         serves and evaluates policy on integers from -9223372036854775808 to \
         18446744073709551615, and would record this one as a float (another number, or \
         served back as a float); send it as a string"
    )]
    InexactInteger(String),
    /// A literal longer than [`MAX_NUMBER_BYTES`].
    #[error(
        "number literal of {0} bytes is longer than {MAX_NUMBER_BYTES} bytes, the most the \
         kernel reads (enough for any 64-bit number); send it as a string"
    )]
    TooLong(usize),
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

/// Checks every number of a JSON document that the kernel decodes into [`serde_json::Value`]s
/// and records (a `/v0` request body: a step's result, an execution's input or output, a
/// signal's payload…), by the rules of step args: a number a 64-bit value would change (an
/// integer beyond 64 bits, a float out of range or rounded to zero, an overlong literal) is
/// refused, named from the document's root (`result.amount`, `input.items[3]`; `""` for the
/// root itself). serde_json would otherwise record such an integer as a rounded float.
///
/// One pass over the bytes with the canonicalizer's tokenizer. Text that is not JSON passes:
/// the caller's decoder reports it in its own words.
///
/// ```
/// let err = rebuno::identity::check_numbers(br#"{"result": {"n": [1, 18446744073709551616]}}"#);
/// assert!(err.unwrap_err().to_string().starts_with("result.n[1]: integer 18446744073709551616"));
/// assert!(rebuno::identity::check_numbers(br#"{"result": 1e20}"#).is_ok());
/// ```
pub fn check_numbers(raw: &[u8]) -> Result<(), ArgsError> {
    let Ok(tree) = Parser::new(raw).parse() else {
        return Ok(());
    };
    let mut places = None;
    for (index, node) in tree.nodes.iter().enumerate() {
        if let Node::Number(literal) = node
            && let Err(problem) = number(literal)
        {
            let places = places.get_or_insert_with(|| Places::new(&tree.nodes, index, tree.root));
            if let Some(at) = places.path(&tree.nodes, index, "") {
                return Err(ArgsError::Number { at, problem });
            }
        }
    }
    Ok(())
}

/// Builds the value of `root` without recursion: the parser pushes every container after its
/// children, so walking the arena in order finds each child's value already built.
fn to_value(mut nodes: Vec<Node<'_>>, root: usize) -> Result<Value, ArgsError> {
    let mut built: Vec<(Value, usize)> = Vec::with_capacity(nodes.len());
    // Read at the first refused number, from the containers after it (still in place).
    let mut places: Option<Places> = None;
    for index in 0..nodes.len() {
        let (value, depth) = match &nodes[index] {
            Node::Number(literal) => match number(literal) {
                Ok(n) => (Value::Number(n), 0),
                Err(problem) => {
                    let places = places.get_or_insert_with(|| Places::new(&nodes, index, root));
                    match places.path(&nodes, index, "args") {
                        Some(at) => return Err(ArgsError::Number { at, problem }),
                        // Only in a value a later duplicate key replaced: never recorded.
                        None => (Value::Null, 0),
                    }
                }
            },
            _ => match std::mem::replace(&mut nodes[index], Node::Literal(b"null")) {
                Node::Literal(b"true") => (Value::Bool(true), 0),
                Node::Literal(b"false") => (Value::Bool(false), 0),
                Node::Literal(_) | Node::Number(_) => (Value::Null, 0),
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
            },
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

/// Where the nodes after some index are: each one's container and its position there, and
/// whether it is part of the value at the root (not a value a duplicate key replaced). Built
/// once, in one pass, at the first refused number, so naming refused numbers stays linear
/// however many there are.
struct Places {
    /// `(container, position in it)`; `None` for the root and for replaced values.
    parent: Vec<Option<(usize, usize)>>,
    /// Whether each node is part of the value at the root.
    reachable: Vec<bool>,
    root: usize,
}

impl Places {
    /// Reads the containers from `from` on (parents always follow their children).
    fn new(nodes: &[Node<'_>], from: usize, root: usize) -> Places {
        let mut parent = vec![None; nodes.len()];
        for (index, node) in nodes.iter().enumerate().skip(from + 1) {
            match node {
                Node::Array(items) => {
                    for (i, &child) in items.iter().enumerate() {
                        parent[child] = Some((index, i));
                    }
                }
                Node::Object(members) => {
                    for (i, (_, child)) in members.iter().enumerate() {
                        parent[*child] = Some((index, i));
                    }
                }
                _ => {}
            }
        }
        // Containers come after their children: walking back reaches each parent first.
        let mut reachable = vec![false; nodes.len()];
        for index in (0..nodes.len()).rev() {
            reachable[index] = index == root
                || parent[index].is_some_and(|(up, _)| reachable.get(up).copied() == Some(true));
        }
        Places {
            parent,
            reachable,
            root,
        }
    }

    /// The path of node `target` from the root named `label` (`args.amount`, `args.items[2]`;
    /// with an empty label `amount`, `items[2]`), or `None` when it is not part of the value
    /// at the root. The containers after `target` must still be in `nodes`.
    fn path(&self, nodes: &[Node<'_>], target: usize, label: &str) -> Option<String> {
        if !self.reachable.get(target).copied().unwrap_or(false) {
            return None;
        }
        let mut steps = Vec::new();
        let mut at = target;
        while at != self.root {
            let (up, position) = self.parent[at]?;
            steps.push(match &nodes[up] {
                Node::Object(members) => {
                    Step::Key(members.get(position).map_or("", |(k, _)| k.as_str()))
                }
                _ => Step::Index(position),
            });
            at = up;
        }
        steps.reverse();
        let mut path = String::from(label);
        if steps.len() > 2 * PATH_ENDS {
            steps[..PATH_ENDS].iter().for_each(|s| s.render(&mut path));
            path.push('…');
            steps[steps.len() - PATH_ENDS..]
                .iter()
                .for_each(|s| s.render(&mut path));
        } else {
            steps.iter().for_each(|s| s.render(&mut path));
        }
        Some(path)
    }
}

/// One step of a path: an object key or an array index.
enum Step<'k> {
    Key(&'k str),
    Index(usize),
}

impl Step<'_> {
    /// Appends `[2]`, `.key` or `["odd key"]` (`key` alone at the start of a path).
    fn render(&self, path: &mut String) {
        match self {
            Step::Index(i) => path.push_str(&format!("[{i}]")),
            Step::Key(key)
                if !key.is_empty()
                    && key.len() <= QUOTED_KEY
                    && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Step::Key(key) => {
                let shown: String = key.chars().take(QUOTED_KEY).collect();
                let more = if shown.len() < key.len() { "…" } else { "" };
                path.push_str(&format!("[{}{more}]", serde_json::Value::String(shown)));
            }
        }
    }
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
fn number(literal: &[u8]) -> Result<Number, NumberError> {
    if literal.len() > MAX_NUMBER_BYTES {
        return Err(NumberError::TooLong(literal.len()));
    }
    // The parser only accepts ASCII digits, signs, `.` and exponents here.
    let text = std::str::from_utf8(literal).unwrap_or_default();
    let quoted = || {
        if text.len() > QUOTED_LITERAL {
            format!("{}…", &text[..QUOTED_LITERAL])
        } else {
            text.to_owned()
        }
    };
    if !literal.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        // An integer literal stays an integer or is refused: recorded as a float it would be
        // served back as one (`1.8446744073709552e19`), a type change even when the float
        // holds it exactly.
        if let Ok(n) = text.parse::<u64>() {
            return Ok(n.into());
        }
        if let Ok(n) = text.parse::<i64>() {
            return Ok(n.into());
        }
        return Err(NumberError::InexactInteger(quoted()));
    }
    let float: f64 = text
        .parse()
        .map_err(|_| NumberError::OutOfRange(quoted()))?;
    if !float.is_finite() {
        return Err(NumberError::OutOfRange(quoted()));
    }
    if float == 0.0 {
        let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
        if mantissa.bytes().any(|b| matches!(b, b'1'..=b'9')) {
            return Err(NumberError::Underflow(quoted()));
        }
    }
    Number::from_f64(float).ok_or_else(|| NumberError::OutOfRange(quoted()))
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
        assert_eq!(value("[1e20, 1.5e19]").unwrap(), json!([1e20, 1.5e19]));
        assert_eq!(value("0e400").unwrap(), json!(0.0));
        let number = |at: &str, problem| ArgsError::Number {
            at: at.to_owned(),
            problem,
        };
        for (raw, want) in [
            (
                "1e400",
                number("args", NumberError::OutOfRange("1e400".into())),
            ),
            (
                "[-1E+309]",
                number("args[0]", NumberError::OutOfRange("-1E+309".into())),
            ),
            (
                r#"{"a":{"b":[1,1e-400]}}"#,
                number("args.a.b[1]", NumberError::Underflow("1e-400".into())),
            ),
            (
                r#"{"amount":18446744073709551617}"#,
                number(
                    "args.amount",
                    NumberError::InexactInteger("18446744073709551617".into()),
                ),
            ),
            (
                r#"{"a b":[{"x":-9223372036854775809}]}"#,
                number(
                    r#"args["a b"][0].x"#,
                    NumberError::InexactInteger("-9223372036854775809".into()),
                ),
            ),
        ] {
            assert_eq!(value(raw).unwrap_err(), want, "{raw}");
        }
        let long = format!("1{}", "0".repeat(300));
        let msg = value(&long).unwrap_err().to_string();
        assert!(msg.len() < 400, "long literals are shortened: {msg}");
        assert!(msg.starts_with("args: integer 1000000000"), "{msg}");
        assert!(msg.contains("send it as a string"), "{msg}");
    }

    #[test]
    fn integers_beyond_64_bits_are_refused_not_rounded() {
        // 2^64 + 1 rounds to 2^64 (which a float holds exactly): recording it rounded would
        // let it match a rule written for 2^64.
        for raw in [
            "123456789012345678901234567890",
            "-123456789012345678901234567890",
            "18446744073709551617",
            "-9223372036854775809",
        ] {
            let err = value(&format!(r#"{{"n":[{raw}]}}"#)).unwrap_err();
            assert_eq!(
                err,
                ArgsError::Number {
                    at: "args.n[0]".into(),
                    problem: NumberError::InexactInteger(raw.into())
                }
            );
            assert!(err.to_string().contains("more than 64 bits"), "{err}");
        }
        // An integer a float holds exactly would be served back as a float: refused too.
        for raw in ["18446744073709551616", "100000000000000000000"] {
            assert_eq!(
                value(raw).unwrap_err(),
                ArgsError::Number {
                    at: "args".into(),
                    problem: NumberError::InexactInteger(raw.into())
                }
            );
        }
        // The edges of 64 bits are recorded as they are; float literals are floats.
        assert_eq!(
            value("[18446744073709551615, -9223372036854775808, 1.8446744073709551616e22]")
                .unwrap(),
            json!([u64::MAX, i64::MIN, 18446744073709551616000.0])
        );
    }

    #[test]
    fn number_literals_are_bounded_before_conversion() {
        let exact = format!("{:.1074}", f64::from_bits(1)); // the smallest subnormal, exactly
        assert!(exact.len() <= MAX_NUMBER_BYTES, "{}", exact.len());
        assert_eq!(value(&exact).unwrap(), json!(5e-324));
        let megabyte = format!(r#"{{"big":{}}}"#, "9".repeat(1 << 20));
        let err = value(&megabyte).unwrap_err();
        assert_eq!(
            err,
            ArgsError::Number {
                at: "args.big".into(),
                problem: NumberError::TooLong(1 << 20)
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("longer than 1100 bytes"), "{msg}");
        assert!(msg.len() < 200, "{msg}");
    }

    #[test]
    fn refused_numbers_are_named_by_a_bounded_path() {
        let deep = format!("{}1e400{}", "[".repeat(50), "]".repeat(50));
        let at = match value(&deep).unwrap_err() {
            ArgsError::Number { at, .. } => at,
            other => panic!("{other:?}"),
        };
        assert_eq!(at, "args[0][0][0][0]…[0][0][0][0]");
        let key = "k".repeat(100);
        let msg = value(&format!(r#"{{"{key}":1e400}}"#))
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(&format!(r#"args["{}"…]: "#, "k".repeat(40))),
            "{msg}"
        );
        // A number only in a value a later duplicate replaced is not recorded, so not refused.
        assert_eq!(value(r#"{"a":1e400,"a":2}"#).unwrap(), json!({"a": 2}));
    }

    #[test]
    fn documents_name_refused_numbers_from_their_root_and_once_each() {
        assert_eq!(
            check_numbers(br#"{"input":{"items":[1,2,3,18446744073709551616]}}"#).unwrap_err(),
            ArgsError::Number {
                at: "input.items[3]".into(),
                problem: NumberError::InexactInteger("18446744073709551616".into())
            }
        );
        let root = check_numbers(b"-9223372036854775809").unwrap_err();
        assert!(
            matches!(root, ArgsError::Number { ref at, .. } if at.is_empty()),
            "{root:?}"
        );
        for ok in [
            &br#"{"a":[1e20,-0,1.5]}"#[..],
            b"{not json",
            b"",
            br#"{"a":1e400,"a":1}"#,
        ] {
            assert_eq!(check_numbers(ok), Ok(()));
        }
        // Many refused numbers only in replaced values: the places are read once (linear).
        let replaced = format!("{{{}\"a\":1}}", r#""a":[1e400],"#.repeat(100_000));
        assert_eq!(check_numbers(replaced.as_bytes()), Ok(()));
        assert_eq!(value(&replaced).unwrap(), json!({"a": 1}));
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
