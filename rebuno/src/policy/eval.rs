//! Rule evaluation: condition matching, argument predicates and the Go `%v`
//! rendering of argument values that the predicates test.

use serde_json::Value;

use super::bundle::{Bundle, Condition, Predicate};
use super::glob::glob_match;
use super::{Action, Decision, EvalInput, StepKind, reasons, rule_ids};

impl Bundle {
    /// Evaluates one step against this bundle: the lowest-priority rule whose condition
    /// matches decides; otherwise a `local` step is allowed (rule `local`) and any other step
    /// gets the bundle's default (rule `default`).
    pub fn evaluate(&self, input: &EvalInput<'_>) -> Decision {
        for rule in &self.rules {
            if condition_matches(&rule.when, input) {
                return Decision {
                    action: rule.action,
                    reason: rule.reason.clone(),
                    rule_id: rule.id.clone(),
                    approval_config: rule.approval_config.clone(),
                    rate_limit: rule.rate_limit,
                    also_limited: None,
                };
            }
        }
        if input.step_kind == Some(StepKind::Local) {
            return Decision::new(Action::Allow, reasons::LOCAL_STEP, rule_ids::LOCAL);
        }
        if self.default_allow {
            Decision::new(Action::Allow, reasons::DEFAULT_ALLOW, rule_ids::DEFAULT)
        } else {
            Decision::new(Action::Deny, reasons::DEFAULT_DENY, rule_ids::DEFAULT)
        }
    }
}

fn target_matches(pattern: &str, target: &str) -> bool {
    // Equality first, so a malformed pattern still matches itself (as in Go).
    pattern == target || glob_match(pattern, target).unwrap_or(false)
}

fn condition_matches(when: &Condition, input: &EvalInput<'_>) -> bool {
    if let Some(pattern) = &when.target
        && !target_matches(pattern, input.target)
    {
        return false;
    }
    if !when.targets.is_empty() && !when.targets.iter().any(|p| target_matches(p, input.target)) {
        return false;
    }
    if let Some(agent) = &when.agent_id
        && agent != input.agent_id
    {
        return false;
    }
    if !when.agent_ids.is_empty() && !when.agent_ids.iter().any(|a| a == input.agent_id) {
        return false;
    }
    if let Some(kind) = when.step_kind
        && Some(kind) != input.step_kind
    {
        return false;
    }
    if when.arguments.is_empty() {
        return true;
    }
    let Value::Object(args) = input.arguments else {
        return false;
    };
    when.arguments.iter().all(|pred| {
        args.get(&pred.key)
            .is_some_and(|value| predicate_matches(pred, &go_value_string(value)))
    })
}

fn predicate_matches(pred: &Predicate, text: &str) -> bool {
    pred.equals.as_ref().is_none_or(|e| e == text)
        && pred
            .contains
            .as_ref()
            .is_none_or(|c| text.contains(c.as_str()))
        && (pred.one_of.is_empty() || pred.one_of.iter().any(|o| o == text))
        && pred.regex.as_ref().is_none_or(|re| re.is_match(text))
}

/// Renders a JSON value the way Go's `fmt.Sprintf("%v")` renders it after `encoding/json`
/// decodes it into `any`; argument predicates test this text.
///
/// | JSON | text |
/// |---|---|
/// | `"str"` | `str` |
/// | `1.5` | `1.5` |
/// | `true` | `true` |
/// | `null` | `<nil>` |
/// | `[1,"x"]` | `[1 x]` |
/// | `{"z":1,"a":"q"}` | `map[a:q z:1]` (keys sorted) |
///
/// Numbers use shortest round-trip digits, switching to Go's exponent form (`1e-05`, `1e+21`)
/// only when the decimal exponent is below −4 or at least 21. Go's own `%v` already switches at
/// 10^6 (`1000000` becomes `1e+06`); that is a Go quirk this port does not copy, so
/// `1000000` renders as `1000000` here and `{equals: "1000000"}` matches it. Integers that JSON
/// wrote without a fraction or exponent are rendered exactly.
pub fn go_value_string(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::String(s) => out.push_str(s),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else if let Some(f) = n.as_f64() {
                out.push_str(&format_float(f));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push_str("map[");
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_value(out, v);
            }
            out.push(']');
        }
    }
}

/// Shortest round-trip digits; plain decimal for exponents in [-4, 21), else Go's `%e` shape.
fn format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e-7", "5e0".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if f == 0.0 {
        return format!("{sign}0");
    }
    if !(-4..21).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.unsigned_abs());
    }
    // Decimal point after (exp + 1) digits.
    let point = exp + 1;
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let point = point as usize;
        if digits.len() <= point {
            format!("{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::go_value_string;
    use crate::identity::step_args;

    /// Predicates compare the text of the recorded number: integers up to 64 bits are rendered
    /// digit for digit, so neighbours a float cannot tell apart stay apart, and larger
    /// integers never reach policy (the args are refused before).
    #[test]
    fn integers_are_rendered_exactly_to_the_edges_of_64_bits() {
        for (raw, text) in [
            ("18446744073709551615", "18446744073709551615"),
            ("18446744073709551614", "18446744073709551614"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("9007199254740993", "9007199254740993"),
            ("1e20", "100000000000000000000"),
        ] {
            let value = step_args(raw.as_bytes()).unwrap().value;
            assert_eq!(go_value_string(&value), text, "{raw}");
        }
        assert!(step_args(b"18446744073709551617").is_err());
        assert!(step_args(b"100000000000000000000").is_err());
        assert!(step_args(b"-123456789012345678901234567890").is_err());
    }
}
