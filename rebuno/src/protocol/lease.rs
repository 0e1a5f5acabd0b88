//! The lease length an agent may register (`lease_timeout_seconds`): its bounds, the check
//! every way of registering shares (the `/v0/agents` body, the provisioning manifest, the Rust
//! agent builder, the kernel itself), and its wire form.
//!
//! A lease length is a JSON number of seconds, integer or fractional, greater than 0 and at
//! most [`MAX_LEASE_TIMEOUT_SECONDS`]. It is written the way Go writes a `float64`: a whole
//! number without a fraction (`120`, not `120.0`), so the webhook body of the global lease
//! stays byte for byte what it was.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// The longest lease an agent may register, in seconds (one day).
pub const MAX_LEASE_TIMEOUT_SECONDS: f64 = 86_400.0;

/// Checks a lease length in seconds: finite, greater than 0 and at most
/// [`MAX_LEASE_TIMEOUT_SECONDS`]. The error is the text of the `400 validation_error`.
pub fn check_lease_seconds(seconds: f64) -> Result<f64, String> {
    if seconds.is_finite() && seconds > 0.0 && seconds <= MAX_LEASE_TIMEOUT_SECONDS {
        Ok(seconds)
    } else {
        Err(format!(
            "lease_timeout_seconds must be a number of seconds greater than 0 and at most \
             {MAX_LEASE_TIMEOUT_SECONDS}, got {seconds}"
        ))
    }
}

/// The lease length as a [`Duration`] (an unchecked or out-of-range value saturates instead of
/// panicking; a registered one is always in range).
pub fn lease_duration(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or(if seconds > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}

/// Reads an optional lease length: absent or `null` is `None` (unset, like Go's decoder reads
/// a `null` pointer); anything but a number in range is refused with
/// [`check_lease_seconds`]'s text.
pub(super) fn optional_lease<'de, D>(deserializer: D) -> Result<Option<f64>, D::Error>
where
    D: Deserializer<'de>,
{
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| "lease_timeout_seconds is out of range".to_owned())
            .and_then(check_lease_seconds)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Some(other) => Err(serde::de::Error::custom(format!(
            "lease_timeout_seconds must be a number of seconds, got {other}"
        ))),
    }
}

/// Writes a lease length as Go writes a `float64`: whole numbers without a fraction.
pub(super) fn write_lease<S>(seconds: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error>
where
    S: Serializer,
{
    match *seconds {
        // Exact for whole numbers up to 2^53; a lease is far below that.
        Some(s) if s.fract() == 0.0 && s.abs() < 9.0e15 => serializer.serialize_i64(s as i64),
        Some(s) => serializer.serialize_f64(s),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Agent, RegisterAgentRequest};
    use serde_json::json;

    fn register(lease: serde_json::Value) -> Result<RegisterAgentRequest, String> {
        serde_json::from_value(json!({
            "id": "a", "webhook_url": "http://h/", "secret": "s",
            "lease_timeout_seconds": lease,
        }))
        .map_err(|e| e.to_string())
    }

    #[test]
    fn registration_accepts_integers_and_fractions_in_range() {
        assert_eq!(register(json!(3)).unwrap().lease_timeout_seconds, Some(3.0));
        assert_eq!(
            register(json!(1.5)).unwrap().lease_timeout_seconds,
            Some(1.5)
        );
        assert_eq!(
            register(json!(86400)).unwrap().lease_timeout_seconds,
            Some(86400.0)
        );
        assert_eq!(
            register(json!(0.001)).unwrap().lease_timeout_seconds,
            Some(0.001)
        );
        // Absent and null are unset.
        assert_eq!(register(json!(null)).unwrap().lease_timeout_seconds, None);
        let absent: RegisterAgentRequest =
            serde_json::from_value(json!({"id": "a", "webhook_url": "u", "secret": "s"})).unwrap();
        assert_eq!(absent.lease_timeout_seconds, None);
    }

    #[test]
    fn registration_refuses_zero_negative_too_large_and_non_numbers() {
        for bad in [
            json!(0),
            json!(0.0),
            json!(-1),
            json!(-0.5),
            json!(86400.5),
            json!(1e300),
            json!(u64::MAX),
            json!("30"),
            json!(true),
            json!([30]),
            json!({"seconds": 30}),
        ] {
            let err = register(bad.clone()).expect_err(&bad.to_string());
            assert!(err.contains("lease_timeout_seconds"), "{bad}: {err}");
        }
    }

    #[test]
    fn check_bounds() {
        assert!(check_lease_seconds(f64::NAN).is_err());
        assert!(check_lease_seconds(f64::INFINITY).is_err());
        assert!(check_lease_seconds(MAX_LEASE_TIMEOUT_SECONDS).is_ok());
        assert_eq!(lease_duration(1.5), Duration::from_millis(1500));
    }

    #[test]
    fn agent_json_omits_an_unset_lease_and_never_writes_null() {
        let mut agent = Agent {
            id: "a".into(),
            webhook_url: "u".into(),
            secret: String::new(),
            policy_bundle: String::new(),
            registered_at: "2024-01-01T00:00:00Z".parse().unwrap(),
            metadata: None,
            lease_timeout_seconds: None,
            dispatch_retry: None,
        };
        let text = serde_json::to_string(&agent).unwrap();
        assert!(!text.contains("LeaseTimeoutSeconds"), "{text}");
        assert!(!text.contains("null"), "{text}");
        agent.lease_timeout_seconds = Some(3.0);
        let v = serde_json::to_value(&agent).unwrap();
        assert_eq!(v["LeaseTimeoutSeconds"], json!(3));
        agent.lease_timeout_seconds = Some(0.25);
        let v = serde_json::to_value(&agent).unwrap();
        assert_eq!(v["LeaseTimeoutSeconds"], json!(0.25));
        let back: Agent = serde_json::from_value(v).unwrap();
        assert_eq!(back.lease_timeout_seconds, Some(0.25));
    }
}
