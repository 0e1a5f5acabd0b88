//! RFC 8785 (JCS) canonical JSON, the byte form every chained entry (a receipt, a kernel
//! event) is hashed in.
//!
//! Rules (RFC 8785 / `JSON.stringify`): object keys sorted by their UTF-16 code units, no
//! whitespace, strings with minimal escaping (`\"`, `\\`, `\b \f \n \r \t`, other controls as
//! `\u00xx`), numbers in ECMAScript Number-to-string form (`1.0` -> `1`, `1e21` -> `1e+21`,
//! `-0` -> `0`). Values JSON cannot represent faithfully are refused with the spec's
//! `receipt canonicalization ...` messages: non-finite floats, and integers beyond
//! +/-(2^53 - 1) that an IEEE double cannot hold exactly (every other JCS implementation would
//! round them). A large integer whose digits are exactly what ECMAScript prints for its double
//! (`1e20` read back from its own canonical text, say) is accepted, so canonical text always
//! canonicalizes to itself.
//!
//! Typed values go through [`to_value`], a serde serializer of its own: `serde_json::to_value`
//! silently turns `NaN` into `null`, which would hash a value the caller never wrote.

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::fmt;

/// The largest integer magnitude an IEEE double holds exactly (2^53 - 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value cannot be canonicalized. `Display` is the spec's exact message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonError {
    /// NaN or an infinity.
    #[error("receipt canonicalization requires finite numbers")]
    NonFinite,
    /// An integer whose magnitude exceeds 2^53 - 1 (or any 128-bit integer that does).
    #[error("receipt canonicalization cannot serialize bigint")]
    BigInt,
    /// A value serde can describe but JSON cannot (for example a map with non-string keys).
    #[error("receipt canonicalization cannot serialize non-plain object: {0}")]
    NonPlain(String),
    /// Text that is not JSON at all (from [`canonicalize_str`]).
    #[error("receipt canonicalization cannot parse JSON: {0}")]
    Parse(String),
}

impl ser::Error for CanonError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        CanonError::NonPlain(msg.to_string())
    }
}

/// Canonical JSON of any serializable value.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonError> {
    let value = to_value(value)?;
    canonicalize(&value)
}

/// Canonical JSON of a JSON value.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::with_capacity(128);
    write_value(&mut out, value)?;
    Ok(out)
}

/// Canonical JSON of a JSON text (parses with IEEE-double number semantics, as RFC 8785 does).
pub fn canonicalize_str(text: &str) -> Result<String, CanonError> {
    let value: Value = serde_json::from_str(text).map_err(|e| CanonError::Parse(e.to_string()))?;
    let value = doubles_only(value);
    let bytes = canonicalize(&value)?;
    Ok(String::from_utf8(bytes).expect("canonical JSON is UTF-8"))
}

/// JCS treats every number as a double: integers too large for exact representation become the
/// nearest double instead of being refused (used only for foreign JSON text).
fn doubles_only(value: Value) -> Value {
    match value {
        Value::Number(n) if !n.is_f64() => {
            let fits = n.as_i64().map(|i| i.unsigned_abs() <= MAX_SAFE_INTEGER);
            let fits = fits.or_else(|| n.as_u64().map(|u| u <= MAX_SAFE_INTEGER));
            if fits == Some(true) {
                Value::Number(n)
            } else {
                n.as_f64()
                    .and_then(Number::from_f64)
                    .map_or(Value::Null, Value::Number)
            }
        }
        Value::Array(items) => Value::Array(items.into_iter().map(doubles_only).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, doubles_only(v))).collect())
        }
        other => other,
    }
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value(out: &mut Vec<u8>, value: &Value) -> Result<(), CanonError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map)?,
    }
    Ok(())
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>) -> Result<(), CanonError> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    // serde_json's default map is already ordered by UTF-8 bytes, which equals UTF-16 order
    // unless a key holds characters above U+FFFF next to ones in U+E000..=U+FFFF.
    if !entries
        .windows(2)
        .all(|w| utf16_cmp(w[0].0, w[1].0) == Ordering::Less)
    {
        entries.sort_by(|a, b| utf16_cmp(a.0, b.0));
    }
    out.push(b'{');
    for (i, (key, val)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, key);
        out.push(b':');
        write_value(out, val)?;
    }
    out.push(b'}');
    Ok(())
}

/// Orders two strings by their UTF-16 code units (RFC 8785 section 3.2.3).
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.as_bytes().cmp(b.as_bytes());
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// An integer beyond +/-(2^53 - 1) as a double, when that double's ECMAScript text is exactly
/// the integer's digits (so canonical text reads back to itself); otherwise the bigint refusal,
/// since any JSON-number reader would change the value.
fn exact_double(magnitude: u128, negative: bool) -> Result<f64, CanonError> {
    let f = magnitude as f64;
    if !f.is_finite() || ryu_js::Buffer::new().format_finite(f) != magnitude.to_string() {
        return Err(CanonError::BigInt);
    }
    Ok(if negative { -f } else { f })
}

fn write_number(out: &mut Vec<u8>, n: &Number) -> Result<(), CanonError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return write_f64(out, exact_double(u.into(), false)?);
        }
        out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return write_f64(out, exact_double(i.unsigned_abs().into(), i < 0)?);
        }
        out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
    } else {
        let f = n.as_f64().ok_or(CanonError::NonFinite)?;
        write_f64(out, f)?;
    }
    Ok(())
}

fn write_f64(out: &mut Vec<u8>, f: f64) -> Result<(), CanonError> {
    if !f.is_finite() {
        return Err(CanonError::NonFinite);
    }
    if f == 0.0 {
        out.push(b'0'); // also -0
        return Ok(());
    }
    out.extend_from_slice(ryu_js::Buffer::new().format_finite(f).as_bytes());
    Ok(())
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends the canonical form of the string `s` (quoted, minimally escaped) to `out`.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    write_string(out, s);
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Serializes a value into a [`serde_json::Value`], refusing what canonical JSON cannot hold
/// (non-finite floats, integers beyond +/-(2^53 - 1), maps with non-string keys).
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, CanonError> {
    value.serialize(ValueSerializer)
}

fn int(i: i128) -> Result<Value, CanonError> {
    if i.unsigned_abs() > u128::from(MAX_SAFE_INTEGER) {
        return float(exact_double(i.unsigned_abs(), i < 0)?);
    }
    Ok(Value::Number(if i < 0 {
        Number::from(i as i64)
    } else {
        Number::from(i as u64)
    }))
}

fn float(f: f64) -> Result<Value, CanonError> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or(CanonError::NonFinite)
}

struct ValueSerializer;

impl ser::Serializer for ValueSerializer {
    type Ok = Value;
    type Error = CanonError;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = VariantBuilder<SeqBuilder>;
    type SerializeMap = MapBuilder;
    type SerializeStruct = MapBuilder;
    type SerializeStructVariant = VariantBuilder<MapBuilder>;

    fn serialize_bool(self, v: bool) -> Result<Value, CanonError> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_i128(self, v: i128) -> Result<Value, CanonError> {
        int(v)
    }
    fn serialize_u8(self, v: u8) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<Value, CanonError> {
        int(v.into())
    }
    fn serialize_u128(self, v: u128) -> Result<Value, CanonError> {
        i128::try_from(v)
            .map_err(|_| CanonError::BigInt)
            .and_then(int)
    }
    fn serialize_f32(self, v: f32) -> Result<Value, CanonError> {
        float(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<Value, CanonError> {
        float(v)
    }
    fn serialize_char(self, v: char) -> Result<Value, CanonError> {
        Ok(Value::String(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, CanonError> {
        Ok(Value::String(v.to_owned()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, CanonError> {
        Ok(Value::Array(v.iter().map(|b| Value::from(*b)).collect()))
    }
    fn serialize_none(self) -> Result<Value, CanonError> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, CanonError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, CanonError> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Value, CanonError> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Value, CanonError> {
        Ok(Value::String(variant.to_owned()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Value, CanonError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, CanonError> {
        let mut map = Map::new();
        map.insert(variant.to_owned(), value.serialize(self)?);
        Ok(Value::Object(map))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, CanonError> {
        Ok(SeqBuilder(Vec::with_capacity(len.unwrap_or(0))))
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, CanonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<SeqBuilder, CanonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<VariantBuilder<SeqBuilder>, CanonError> {
        Ok(VariantBuilder {
            variant,
            inner: SeqBuilder(Vec::with_capacity(len)),
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<MapBuilder, CanonError> {
        Ok(MapBuilder {
            map: Map::new(),
            key: None,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<MapBuilder, CanonError> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<VariantBuilder<MapBuilder>, CanonError> {
        Ok(VariantBuilder {
            variant,
            inner: MapBuilder {
                map: Map::new(),
                key: None,
            },
        })
    }
}

#[doc(hidden)]
pub struct SeqBuilder(Vec<Value>);

impl ser::SerializeSeq for SeqBuilder {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        self.0.push(value.serialize(ValueSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Value, CanonError> {
        Ok(Value::Array(self.0))
    }
}

impl ser::SerializeTuple for SeqBuilder {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<Value, CanonError> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for SeqBuilder {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        ser::SerializeSeq::serialize_element(self, value)
    }
    fn end(self) -> Result<Value, CanonError> {
        ser::SerializeSeq::end(self)
    }
}

#[doc(hidden)]
pub struct MapBuilder {
    map: Map<String, Value>,
    key: Option<String>,
}

impl ser::SerializeMap for MapBuilder {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CanonError> {
        self.key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| CanonError::NonPlain("map value without key".into()))?;
        self.map.insert(key, value.serialize(ValueSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Value, CanonError> {
        Ok(Value::Object(self.map))
    }
}

impl ser::SerializeStruct for MapBuilder {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        self.map
            .insert(key.to_owned(), value.serialize(ValueSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Value, CanonError> {
        Ok(Value::Object(self.map))
    }
}

#[doc(hidden)]
pub struct VariantBuilder<I> {
    variant: &'static str,
    inner: I,
}

impl<I> VariantBuilder<I> {
    fn wrap(variant: &'static str, value: Value) -> Value {
        let mut map = Map::new();
        map.insert(variant.to_owned(), value);
        Value::Object(map)
    }
}

impl ser::SerializeTupleVariant for VariantBuilder<SeqBuilder> {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        ser::SerializeSeq::serialize_element(&mut self.inner, value)
    }
    fn end(self) -> Result<Value, CanonError> {
        Ok(Self::wrap(self.variant, Value::Array(self.inner.0)))
    }
}

impl ser::SerializeStructVariant for VariantBuilder<MapBuilder> {
    type Ok = Value;
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        ser::SerializeStruct::serialize_field(&mut self.inner, key, value)
    }
    fn end(self) -> Result<Value, CanonError> {
        Ok(Self::wrap(self.variant, Value::Object(self.inner.map)))
    }
}

/// Map keys must be strings; integers and chars are written as their decimal / text form, as
/// `serde_json` does.
struct KeySerializer;

fn key_error() -> CanonError {
    CanonError::NonPlain("map keys must be strings".into())
}

impl ser::Serializer for KeySerializer {
    type Ok = String;
    type Error = CanonError;
    type SerializeSeq = Impossible<String, CanonError>;
    type SerializeTuple = Impossible<String, CanonError>;
    type SerializeTupleStruct = Impossible<String, CanonError>;
    type SerializeTupleVariant = Impossible<String, CanonError>;
    type SerializeMap = Impossible<String, CanonError>;
    type SerializeStruct = Impossible<String, CanonError>;
    type SerializeStructVariant = Impossible<String, CanonError>;

    fn serialize_str(self, v: &str) -> Result<String, CanonError> {
        Ok(v.to_owned())
    }
    fn serialize_char(self, v: char) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_bool(self, v: bool) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_i128(self, v: i128) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_u128(self, v: u128) -> Result<String, CanonError> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _: f32) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_f64(self, _: f64) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_none(self) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<String, CanonError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String, CanonError> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<String, CanonError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, CanonError> {
        Err(key_error())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, CanonError> {
        Err(key_error())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, CanonError> {
        Err(key_error())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, CanonError> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, CanonError> {
        Err(key_error())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, CanonError> {
        Err(key_error())
    }
    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, CanonError> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, CanonError> {
        Err(key_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cj(v: &Value) -> String {
        String::from_utf8(canonicalize(v).unwrap()).unwrap()
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(
            cj(&json!([1.0, 1e21, 1e-7, 0.1 + 0.2, -0.0, 123, -5])),
            "[1,1e+21,1e-7,0.30000000000000004,0,123,-5]"
        );
    }

    #[test]
    fn refuses_non_finite_and_bigint() {
        assert_eq!(
            to_canonical_vec(&f64::NAN).unwrap_err().to_string(),
            "receipt canonicalization requires finite numbers"
        );
        assert_eq!(
            to_canonical_vec(&vec![f64::INFINITY]).unwrap_err(),
            CanonError::NonFinite
        );
        assert_eq!(
            to_canonical_vec(&((1u64 << 53) + 1))
                .unwrap_err()
                .to_string(),
            "receipt canonicalization cannot serialize bigint"
        );
        assert_eq!(
            to_canonical_vec(&(-(1i64 << 53) - 1)).unwrap_err(),
            CanonError::BigInt
        );
        assert_eq!(to_canonical_vec(&u64::MAX).unwrap_err(), CanonError::BigInt);
        // 2^60 is a double, but ECMAScript prints it as 1152921504606847000: refused.
        assert_eq!(
            to_canonical_vec(&(1u64 << 60)).unwrap_err(),
            CanonError::BigInt
        );
        // Digits ECMAScript would print for the double are accepted as they are.
        assert_eq!(
            to_canonical_vec(&-(1i64 << 53)).unwrap(),
            b"-9007199254740992"
        );
        assert_eq!(
            to_canonical_vec(&1_152_921_504_606_847_000u64).unwrap(),
            b"1152921504606847000"
        );
        let big: Value = serde_json::from_str("100000000000000000000").unwrap();
        assert_eq!(canonicalize(&big).unwrap(), b"100000000000000000000");
        assert_eq!(
            to_canonical_vec(&u128::MAX).unwrap_err(),
            CanonError::BigInt
        );
        assert_eq!(
            to_canonical_vec(&MAX_SAFE_INTEGER).unwrap(),
            b"9007199254740991"
        );
    }

    #[test]
    fn strings_escape_minimally() {
        assert_eq!(
            cj(&json!("a\"\\\u{8}\u{c}\n\r\t\u{1}\u{1f}/\u{2028}é")),
            "\"a\\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/\u{2028}é\""
        );
    }

    #[test]
    fn keys_sort_by_utf16_units() {
        // U+FB33 (one unit 0xFB33) sorts after U+1F602 (surrogates 0xD83D...) in UTF-16,
        // though before it by code point.
        let mut map = Map::new();
        map.insert("\u{fb33}".into(), json!(1));
        map.insert("\u{1f602}".into(), json!(2));
        assert_eq!(cj(&Value::Object(map)), "{\"\u{1f602}\":2,\"\u{fb33}\":1}");
    }

    #[test]
    fn typed_values_match_their_json() {
        #[derive(Serialize)]
        struct S {
            b: Option<u8>,
            a: Vec<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            c: Option<u8>,
        }
        let s = S {
            b: None,
            a: vec!["x"],
            c: None,
        };
        assert_eq!(to_canonical_vec(&s).unwrap(), b"{\"a\":[\"x\"],\"b\":null}");
    }
}
