//! Time for the kernel and the agent SDK: the injectable [`Clock`] (the kernel and its rate
//! limiter read it) and RFC 3339 timestamps.
//!
//! The clock has two readings. Stored timestamps (`created_at`, deadlines, approval timeouts,
//! `next_attempt_at`) are wall-clock time, because they outlive the process. Durations the
//! process measures for itself (lease renewals, retry backoff, token refill) use the monotonic
//! reading, so an operator or NTP stepping the wall clock neither reaps a live lease nor keeps
//! a dead one, and fires no retry early or late.
//!
//! A stored or sent time is a [`Timestamp`]: RFC 3339 text in UTC with exactly six fractional
//! digits and a four-digit year (`2026-01-01T00:00:00.000000Z`), so its text order is its time
//! order and stores can compare timestamps as strings. The type keeps that form: every
//! constructor (from a [`SystemTime`], by parsing, by deserializing) canonicalizes, so a store
//! contract that takes a `&Timestamp` cannot be handed an id, a local time or a Go-style
//! nanosecond string by mistake.

use durable_support::civil::{civil_from_days, days_from_civil};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time: the wall clock, for timestamps that are stored, and a
/// monotonic reading, for durations measured within one process (lease renewals, retry
/// backoff, token refill), which a step of the wall clock must not stretch or shrink.
pub trait Clock: Send + Sync {
    /// The current wall-clock time.
    fn now(&self) -> SystemTime;
    /// Time elapsed since an arbitrary origin fixed for the life of the clock; never goes
    /// backwards.
    fn monotonic(&self) -> Duration;
}

/// The operating system's clocks: [`SystemTime`] and [`std::time::Instant`].
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
    fn monotonic(&self) -> Duration {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(std::time::Instant::now).elapsed()
    }
}

/// A clock that only moves when told to; for tests and deterministic simulation.
///
/// [`ManualClock::advance`] is time passing (both readings move); [`ManualClock::set`] is
/// someone stepping the wall clock (only the wall reading moves).
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<(SystemTime, Duration)>,
}

impl ManualClock {
    /// A clock stopped at `start` (its monotonic reading starts at zero).
    pub fn new(start: SystemTime) -> Self {
        ManualClock {
            now: Mutex::new((start, Duration::ZERO)),
        }
    }

    /// Lets `by` pass: both the wall clock and the monotonic reading move forward.
    pub fn advance(&self, by: Duration) {
        let mut now = lock_clock(&self.now);
        now.0 = now.0.checked_add(by).unwrap_or(now.0);
        now.1 = now.1.saturating_add(by);
    }

    /// Steps the wall clock to `to` (which may be earlier than now); the monotonic reading
    /// does not move.
    pub fn set(&self, to: SystemTime) {
        lock_clock(&self.now).0 = to;
    }
}

impl Default for ManualClock {
    /// A clock stopped at the Unix epoch.
    fn default() -> Self {
        ManualClock::new(SystemTime::UNIX_EPOCH)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        lock_clock(&self.now).0
    }
    fn monotonic(&self) -> Duration {
        lock_clock(&self.now).1
    }
}

/// Locks a [`ManualClock`] even after a panic elsewhere: its readings are always consistent.
fn lock_clock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Microseconds since the Unix epoch (negative before it).
pub fn micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

/// The earliest time a [`Timestamp`] holds: `0000-01-01T00:00:00.000000Z`.
const MIN_MICROS: i64 = -62_167_219_200_000_000;
/// The latest time a [`Timestamp`] holds: `9999-12-31T23:59:59.999999Z`.
const MAX_MICROS: i64 = 253_402_300_799_999_999;

/// A point in time as the kernel stores and sends it: RFC 3339 text in UTC with six fractional
/// digits and a four-digit year (`2026-01-01T00:00:00.123456Z`).
///
/// The text is always in that canonical form, so comparing two timestamps (as values or as
/// stored text) compares their times. Times outside the years 0000-9999 are clamped to the
/// nearest end. It serializes as its text; deserializing accepts any RFC 3339 time (an offset,
/// up to nine fractional digits, as Go's `time.Time` writes) and canonicalizes it, refusing
/// anything else. It dereferences to `str` for reading.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(String);

impl Timestamp {
    /// The timestamp of `t`, truncated to microseconds and clamped to the years 0000-9999.
    pub fn from_system_time(t: SystemTime) -> Self {
        Timestamp(format_micros(micros(t).clamp(MIN_MICROS, MAX_MICROS)))
    }

    /// Parses an RFC 3339 time (see [`parse_rfc3339`]) into its canonical form.
    pub fn parse(text: &str) -> Result<Self, ParseTimestampError> {
        parse_rfc3339(text)
            .map(Timestamp::from_system_time)
            .ok_or_else(|| ParseTimestampError {
                // Only the start of the text: it may be anything a client or a row held.
                text: text.chars().take(64).collect(),
            })
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The time this timestamp names.
    pub fn to_system_time(&self) -> SystemTime {
        // The text is canonical, so it always parses; the fallback is unreachable.
        parse_rfc3339(&self.0).unwrap_or(UNIX_EPOCH)
    }
}

/// Text that is not an RFC 3339 time (see [`Timestamp::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 timestamp: {text:?}")]
pub struct ParseTimestampError {
    /// The start of the refused text (at most 64 characters).
    pub text: String,
}

impl std::str::FromStr for Timestamp {
    type Err = ParseTimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Timestamp::parse(s)
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        Timestamp::from_system_time(t)
    }
}

impl std::ops::Deref for Timestamp {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Timestamp {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Timestamp {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for Timestamp {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Timestamp {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Timestamp> for str {
    fn eq(&self, other: &Timestamp) -> bool {
        self == other.0
    }
}

impl PartialEq<Timestamp> for &str {
    fn eq(&self, other: &Timestamp) -> bool {
        *self == other.0
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// RFC 3339 text of `t` (UTC, microseconds), in [`Timestamp`]'s canonical form.
pub fn rfc3339(t: SystemTime) -> String {
    Timestamp::from_system_time(t).into_string()
}

/// The canonical text of a time given in microseconds since the Unix epoch.
fn format_micros(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Parses the timestamps this module writes (and any RFC 3339 UTC `Z` / offset form with up to
/// nine fractional digits).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut nanos: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = s.get(start..i)?;
        if digits.is_empty() || digits.len() > 9 {
            return None;
        }
        nanos = digits.parse::<i64>().ok()? * 10i64.pow(9 - digits.len() as u32);
    }
    // The offset is read as bytes: stored text may hold anything (a tampered row), and slicing
    // a `str` at a byte that is not a character boundary would panic.
    let offset = match b.get(i..)? {
        b"Z" | b"z" => 0,
        &[sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |hi: u8, lo: u8| {
                (hi.is_ascii_digit() && lo.is_ascii_digit())
                    .then(|| i64::from(hi - b'0') * 10 + i64::from(lo - b'0'))
            };
            let seconds = two(h1, h2)? * 3600 + two(m1, m2)? * 60;
            if sign == b'-' { -seconds } else { seconds }
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo as u32, d as u32) * 86_400 + h * 3600 + mi * 60 + se - offset;
    let total = Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos as u64);
    if secs >= 0 {
        UNIX_EPOCH.checked_add(total)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::from_nanos(nanos as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses() {
        let t = UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456);
        assert_eq!(rfc3339(t), "2026-01-01T00:00:00.123456Z");
        assert_eq!(parse_rfc3339("2026-01-01T00:00:00.123456Z"), Some(t));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            parse_rfc3339("2026-01-01T01:00:00+01:00"),
            Some(UNIX_EPOCH + Duration::from_secs(1_767_225_600))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T12:00:00Z")
                .map(rfc3339)
                .as_deref(),
            Some("2024-02-29T12:00:00.000000Z")
        );
        assert_eq!(parse_rfc3339("nope"), None);
    }

    #[test]
    fn timestamps_are_canonical() {
        let t = Timestamp::parse("2026-01-01T01:00:00.5+01:00").unwrap();
        assert_eq!(t, "2026-01-01T00:00:00.500000Z");
        // Go's nanosecond form is truncated to microseconds.
        let go: Timestamp = "2026-01-01T00:00:00.123456789Z".parse().unwrap();
        assert_eq!(go.as_str(), "2026-01-01T00:00:00.123456Z");
        assert_eq!(
            go.to_system_time(),
            UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456)
        );
        // Text order is time order, even across the epoch and at the clamped ends.
        let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        let before = UNIX_EPOCH - Duration::from_secs(100_000_000_000);
        assert_eq!(Timestamp::from(far).as_str(), "9999-12-31T23:59:59.999999Z");
        assert_eq!(
            Timestamp::from(before).as_str(),
            "0000-01-01T00:00:00.000000Z"
        );
        let mut all = vec![
            Timestamp::from(far),
            Timestamp::from(UNIX_EPOCH + Duration::from_micros(1)),
            Timestamp::from(UNIX_EPOCH - Duration::from_micros(1)),
            Timestamp::from(before),
        ];
        all.sort();
        let times: Vec<_> = all.iter().map(Timestamp::to_system_time).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{all:?}");
        // Serde: the text on the wire, canonicalized on the way in, refused when not a time.
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#""2026-01-01T00:00:00.500000Z""#
        );
        let back: Timestamp = serde_json::from_str(r#""2026-01-01T00:00:00Z""#).unwrap();
        assert_eq!(back, "2026-01-01T00:00:00.000000Z");
        let err = serde_json::from_str::<Timestamp>(r#""exec-1""#).unwrap_err();
        assert!(
            err.to_string().contains("not an RFC 3339 timestamp"),
            "{err}"
        );
        assert!(Timestamp::parse("").is_err());
    }

    /// Text read back from a store may be anything: a non-ASCII character where the offset
    /// (or any other field) is due is refused, never a panic.
    #[test]
    fn non_ascii_text_is_refused_without_panicking() {
        for bad in [
            "2026-01-01T00:00:00+0\u{e9}:0",
            "2026-01-01T00:00:00\u{e9}1:00",
            "2026-01-01T00:00:00+01:\u{e9}",
            "2026-01-01T00:00:00.5\u{20ac}:0",
            "2026-01-01T00:00:00+\u{1f600}0",
            "2026-01-01T00:00:00\u{e9}",
            "2026-01-01T00:00:00+\u{e9}\u{e9}",
            "2026-01-01T00:00:00-01-00",
            "2026-01-01T00:00:00+1a:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
        // Every character of a valid timestamp replaced by, or preceded by, a multi-byte one.
        let good = "2026-01-01T00:00:00.123+01:30";
        assert!(parse_rfc3339(good).is_some());
        for wide in ["\u{e9}", "\u{20ac}", "\u{1f600}"] {
            for (i, c) in good.char_indices() {
                let replaced = format!("{}{wide}{}", &good[..i], &good[i + c.len_utf8()..]);
                let inserted = format!("{}{wide}{}", &good[..i], &good[i..]);
                assert_eq!(parse_rfc3339(&replaced), None, "{replaced:?}");
                assert_eq!(parse_rfc3339(&inserted), None, "{inserted:?}");
            }
        }
        assert_eq!(
            parse_rfc3339("2026-01-01T00:00:00-01:30"),
            Some(UNIX_EPOCH + Duration::from_secs(1_767_225_600 + 5400))
        );
    }
}
