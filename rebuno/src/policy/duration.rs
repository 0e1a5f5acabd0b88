//! Go `time.Duration` for policy bundles: a `time.ParseDuration`-compatible parser, Go's
//! `Duration.String` formatting, and the serde glue used by `timeout` and `window`.
//!
//! Go's yaml.v3 also accepts a bare integer and reads it as nanoseconds, so `window: 60` means
//! 60ns. That is a Go quirk and is not copied: a bare integer other than
//! `0` is refused with an error that asks for a unit.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// One bit past the largest `i64`: the magnitude of `i64::MIN`, which Go's parser allows for
/// negative durations.
const LIMIT: u64 = 1 << 63;

/// A signed span of time in nanoseconds, with Go's `time.Duration` range and text format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(i64);

/// Why a duration string was refused; the messages are Go's `time.ParseDuration` errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Malformed text or a value outside the `i64` nanosecond range.
    #[error("time: invalid duration {}", quote(.0))]
    Invalid(String),
    /// A number with no unit after it (only `"0"` may omit the unit).
    #[error("time: missing unit in duration {}", quote(.0))]
    MissingUnit(String),
    /// A unit other than `ns`, `us`, `µs`, `μs`, `ms`, `s`, `m` or `h`.
    #[error("time: unknown unit {} in duration {}", quote(.unit), quote(.input))]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole duration text.
        input: String,
    },
}

/// Go's `time.quote`: wraps in double quotes, escaping `"` and `\`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

impl GoDuration {
    /// The zero duration.
    pub const ZERO: GoDuration = GoDuration(0);

    /// A duration of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration(nanos)
    }

    /// A duration of `secs` seconds, saturating at the `i64` nanosecond range.
    pub const fn from_secs(secs: i64) -> Self {
        GoDuration(secs.saturating_mul(SECOND as i64))
    }

    /// The length in nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// True if the duration is strictly greater than zero.
    pub const fn is_positive(self) -> bool {
        self.0 > 0
    }

    /// True if the duration is strictly less than zero.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// The duration as a `std::time::Duration`, or `None` if it is negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// Parses Go duration text such as `"1h30m"`, `"300ms"`, `"-1.5h"` or `"2h45m30.5s"`,
    /// exactly as Go's `time.ParseDuration` does (same accepted forms, rounding and errors).
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        parse_duration(input).map(GoDuration)
    }
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        // U+00B5 (micro sign) and U+03BC (Greek mu) are both accepted, as in Go.
        "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

/// Consumes leading ASCII digits; `None` on overflow past 2^63.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let bytes = s.as_bytes();
    let mut x: u64 = 0;
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(bytes[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Consumes leading ASCII digits of a fraction; past 63 bits it stops adding precision.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let bytes = s.as_bytes();
    let mut x: u64 = 0;
    let mut scale = 1.0_f64;
    let mut overflow = false;
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        if !overflow {
            if x > (LIMIT - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(bytes[i] - b'0');
                if y > LIMIT {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

fn parse_duration(orig: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(orig.to_owned());
    let mut s = orig;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix('-') {
        neg = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (mut v, rest) = leading_int(s).ok_or_else(invalid)?;
        s = rest;
        let pre = before != s.len();

        let mut f: u64 = 0;
        let mut scale = 1.0_f64;
        let mut post = false;
        if let Some(rest) = s.strip_prefix('.') {
            let before = rest.len();
            let (frac, sc, rest) = leading_fraction(rest);
            f = frac;
            scale = sc;
            post = before != rest.len();
            s = rest;
        }
        if !pre && !post {
            return Err(invalid());
        }

        let unit_len = s
            .bytes()
            .position(|c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(orig.to_owned()));
        }
        let (unit_text, rest) = s.split_at(unit_len);
        s = rest;
        let unit = unit_nanos(unit_text).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit_text.to_owned(),
            input: orig.to_owned(),
        })?;
        if v > LIMIT / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            // Go computes the fraction in float64 (nanosecond-exact up to hours) and truncates.
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return Err(invalid());
            }
        }
        d += v;
        if d > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        // d <= 2^63 here, so the negation always fits (2^63 itself is i64::MIN).
        return Ok(0_i64.wrapping_sub_unsigned(d));
    }
    i64::try_from(d).map_err(|_| invalid())
}

/// Writes the fraction `v / 10^prec` as `.ddd` without trailing zeros (nothing if it is zero);
/// returns the integer part.
fn push_frac(out: &mut Vec<u8>, mut v: u64, prec: usize) -> u64 {
    let mut digits = Vec::with_capacity(prec);
    let mut print = false;
    for _ in 0..prec {
        let digit = (v % 10) as u8;
        print = print || digit != 0;
        if print {
            digits.push(b'0' + digit);
        }
        v /= 10;
    }
    if print {
        digits.push(b'.');
    }
    // Built least-significant first; `out` is assembled back to front as well.
    out.extend(digits);
    v
}

fn push_int(out: &mut Vec<u8>, mut v: u64) {
    if v == 0 {
        out.push(b'0');
        return;
    }
    while v > 0 {
        out.push(b'0' + (v % 10) as u8);
        v /= 10;
    }
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String`: `"1h30m0s"`, `"300ms"`, `"1.5µs"`, `"0s"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let mut u = self.0.unsigned_abs();
        // Assembled in reverse (least significant character first), then flipped.
        let mut rev: Vec<u8> = Vec::with_capacity(32);
        if u < SECOND {
            if u == 0 {
                return f.write_str("0s");
            }
            rev.push(b's');
            let prec = if u < MICROSECOND {
                rev.push(b'n');
                0
            } else if u < MILLISECOND {
                // "µ" is two UTF-8 bytes; pushed reversed so the final flip restores them.
                rev.extend("\u{b5}".bytes().rev());
                3
            } else {
                rev.push(b'm');
                6
            };
            u = push_frac(&mut rev, u, prec);
            push_int(&mut rev, u);
        } else {
            rev.push(b's');
            u = push_frac(&mut rev, u, 9);
            push_int(&mut rev, u % 60);
            u /= 60;
            if u > 0 {
                rev.push(b'm');
                push_int(&mut rev, u % 60);
                u /= 60;
                if u > 0 {
                    rev.push(b'h');
                    push_int(&mut rev, u);
                }
            }
        }
        if neg {
            rev.push(b'-');
        }
        rev.reverse();
        f.write_str(&String::from_utf8_lossy(&rev))
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(s)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct DurationVisitor;

impl DurationVisitor {
    fn from_int<E: de::Error>(v: i128) -> Result<GoDuration, E> {
        if v == 0 {
            Ok(GoDuration::ZERO)
        } else {
            Err(E::custom(format!(
                "duration {v} has no unit; write it as a string such as \"{v}s\" or \"{v}ms\" \
                 (Go would read a bare integer as nanoseconds)"
            )))
        }
    }
}

impl Visitor<'_> for DurationVisitor {
    type Value = GoDuration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Go duration string such as \"1h30m\" or \"300ms\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
        GoDuration::parse(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoDuration, E> {
        Self::from_int(i128::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoDuration, E> {
        Self::from_int(i128::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<GoDuration, E> {
        GoDuration::parse(&v.to_string()).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}
