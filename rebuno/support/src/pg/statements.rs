//! Statements and their parameters: [`Statements`] keeps what a connection has prepared,
//! [`Request`] is one statement with its parameters encoded (owned, so it can wait in a batch
//! or be sent again on another connection); the typed, prepared statement interface over them
//! is `queries`.

use bytes::BytesMut;
use postgres::types::{Format, IsNull, ToSql, Type};

/// The statements a connection has prepared, by SQL text: a statement is parsed and planned
/// once per connection, then only bound and executed (a statement sent as text is parsed and
/// planned anew every time, which costs more than the round trip for anything that reads a
/// table). At most [`Statements::CAPACITY`] are kept; past that the cache starts again.
#[derive(Default)]
pub struct Statements {
    by_sql: std::collections::HashMap<String, postgres::Statement>,
}

impl Statements {
    /// Statements kept per connection.
    pub const CAPACITY: usize = 256;

    /// The statement prepared for `sql`, if it is.
    pub(super) fn get(&self, sql: &str) -> Option<postgres::Statement> {
        self.by_sql.get(sql).cloned()
    }

    /// Keeps `statement`, prepared for `sql`.
    pub(super) fn insert(&mut self, sql: &str, statement: postgres::Statement) {
        if self.by_sql.len() >= Self::CAPACITY {
            self.by_sql.clear();
        }
        self.by_sql.insert(sql.to_owned(), statement);
    }

    /// How many statements are kept.
    pub fn len(&self) -> usize {
        self.by_sql.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_sql.is_empty()
    }
}

/// A statement parameter with its type.
pub type Param<'p> = (&'p (dyn ToSql + Sync), Type);

/// One parameter, encoded when the statement was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Encoded {
    /// Its bytes (`None`: SQL `NULL`), in binary format or as text.
    Value(Option<Vec<u8>>, Binary),
    /// It could not be encoded: sending the statement fails with this message.
    Invalid(String),
}

/// Whether a parameter is sent in binary format (else as text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Binary(bool);

impl Binary {
    fn of(format: Format) -> Binary {
        Binary(matches!(format, Format::Binary))
    }
}

impl ToSql for Encoded {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Encoded::Value(Some(bytes), _) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
            Encoded::Value(None, _) => Ok(IsNull::Yes),
            Encoded::Invalid(message) => Err(message.clone().into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        // The value was checked against its type when it was encoded.
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        match self {
            Encoded::Value(_, Binary(false)) => Format::Text,
            Encoded::Value(_, Binary(true)) | Encoded::Invalid(_) => Format::Binary,
        }
    }

    postgres::types::to_sql_checked!();
}

/// One statement with its parameter types and its parameters, encoded: what a batch sends. Two
/// requests are equal when they send the same text with the same parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    sql: String,
    types: Vec<Type>,
    values: Vec<Encoded>,
}

impl Request {
    /// `sql` with `params`, each encoded now as its type says. A parameter that cannot be
    /// encoded makes the statement fail when it is sent (with that parameter's error).
    pub fn new(sql: &str, params: &[Param<'_>]) -> Request {
        let mut buf = BytesMut::new();
        let values = params
            .iter()
            .map(|(value, ty)| {
                buf.clear();
                match value.to_sql_checked(ty, &mut buf) {
                    Ok(IsNull::Yes) => Encoded::Value(None, Binary::of(value.encode_format(ty))),
                    Ok(IsNull::No) => {
                        Encoded::Value(Some(buf.to_vec()), Binary::of(value.encode_format(ty)))
                    }
                    Err(e) => Encoded::Invalid(e.to_string()),
                }
            })
            .collect();
        Request {
            sql: sql.to_owned(),
            types: params.iter().map(|(_, t)| t.clone()).collect(),
            values,
        }
    }

    /// `parts`, each a data-modifying statement, as one: `WITH w0 AS (…), w1 AS (…) SELECT`,
    /// their parameters renumbered in turn ([`renumber`]; see `fuse`).
    pub(super) fn fused(parts: &[Request]) -> Request {
        let mut sql = String::from("WITH ");
        let (mut types, mut values) = (Vec::new(), Vec::new());
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let text = renumber(&part.sql, types.len());
            sql.push_str(&format!("w{i} AS ({text})"));
            types.extend(part.types.iter().cloned());
            values.extend(part.values.iter().cloned());
        }
        sql.push_str(" SELECT");
        Request { sql, types, values }
    }

    /// The statement's text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    pub(super) fn types(&self) -> &[Type] {
        &self.types
    }

    /// The parameters as `tokio-postgres` binds them.
    pub(super) fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values
            .iter()
            .map(|v| v as &(dyn ToSql + Sync))
            .collect()
    }
}

/// `sql` with every parameter `$n` renumbered `$(n + by)` (quoted text and names left alone).
pub(super) fn renumber(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        out.push(c);
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut n = 0usize;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d as usize;
                    chars.next();
                }
                out.push_str(&(n + by).to_string());
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_their_parameters_once_and_compare_by_value() {
        let (a, b): (i64, Option<&str>) = (7, None);
        let one = Request::new("SELECT $1, $2", &[(&a, Type::INT8), (&b, Type::TEXT)]);
        let same = Request::new("SELECT $1, $2", &[(&7i64, Type::INT8), (&b, Type::TEXT)]);
        let other = Request::new("SELECT $1, $2", &[(&8i64, Type::INT8), (&b, Type::TEXT)]);
        assert_eq!(one, same);
        assert_ne!(one, other);
        assert_eq!(one.types(), &[Type::INT8, Type::TEXT]);
        let mut out = BytesMut::new();
        let values = one.values();
        let first = values[0].to_sql_checked(&Type::INT8, &mut out);
        assert!(matches!(first, Ok(IsNull::No)));
        assert_eq!(&out[..], &7i64.to_be_bytes());
        let second = values[1].to_sql_checked(&Type::TEXT, &mut out);
        assert!(matches!(second, Ok(IsNull::Yes)));
    }

    #[test]
    fn a_parameter_of_the_wrong_type_fails_when_sent() {
        let request = Request::new("SELECT $1", &[(&"text", Type::INT8)]);
        let mut out = BytesMut::new();
        match request.values()[0].to_sql_checked(&Type::INT8, &mut out) {
            Err(e) => assert!(e.to_string().contains("cannot convert"), "{e}"),
            Ok(_) => panic!("a text parameter was encoded as int8"),
        }
    }
}
