//! RFC 8785 (JCS) conformance of the receipt canonicalizer, and properties of canonicalization
//! and verification: idempotence, key-order independence, and that any single-byte change to a
//! stored receipt is caught by `verify`.

use proptest::prelude::*;
use receipt::canonical::{CanonError, canonicalize, canonicalize_str, to_canonical_vec};
use receipt::{Command, Runtime, SqliteStore, VerifyReason, verify};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The examples published in RFC 8785 itself (sections 3.2.2, 3.2.3 and appendix B), written
/// out here by hand.
#[test]
fn rfc8785_examples() {
    // Section 3.2.2: the sample input and its canonical form.
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    assert_eq!(
        canonicalize_str(input).unwrap(),
        "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
    );
    // Section 3.2.3: sorting by UTF-16 code units.
    let input = r#"{
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\ud83d\ude00": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    let out = canonicalize_str(input).unwrap();
    let keys: Vec<String> = out
        .trim_start_matches('{')
        .split(",\"")
        .map(|kv| {
            kv.trim_start_matches('"')
                .split("\":")
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(keys, ["\\r", "1", "\u{80}", "ö", "€", "😀", "\u{fb33}"]);
    // Appendix B: IEEE-754 doubles and their ECMAScript forms.
    let cases: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for &(bits, expected) in cases {
        let f = f64::from_bits(bits);
        assert_eq!(
            to_canonical_vec(&f).unwrap(),
            expected.as_bytes(),
            "{bits:#x}"
        );
    }
    for bits in [0x7fffffffffffffffu64, 0x7ff0000000000000] {
        assert_eq!(
            to_canonical_vec(&f64::from_bits(bits)).unwrap_err(),
            CanonError::NonFinite
        );
    }
}

/// The scheme authors' conformance files, copied into `tests/data/jcs/` (input -> output; the
/// README there names their source).
#[test]
fn jcs_conformance_files() {
    let root = test_support::vectors::jcs_dir();
    let Ok(entries) = std::fs::read_dir(root.join("input")) else {
        panic!("conformance data missing at {}", root.display());
    };
    let mut n = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let input = std::fs::read_to_string(&path).unwrap();
        let expected =
            std::fs::read_to_string(root.join("output").join(path.file_name().unwrap())).unwrap();
        let expected = expected.strip_suffix('\n').unwrap_or(&expected);
        assert_eq!(
            canonicalize_str(&input).unwrap(),
            expected,
            "{}",
            path.display()
        );
        n += 1;
    }
    assert!(n >= 6, "only {n} conformance files");
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        // Integral doubles beyond 2^53: their canonical text reads back as a big integer.
        (9.1e15f64..1e22).prop_map(|f| json!(f.trunc())),
        "\\PC{0,12}".prop_map(Value::String),
        "[\\x00-\\x1f\"\\\\\u{2028}\u{1f600}\u{fb33}a-z]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Z_\u{e9}\u{1f600}\u{fb33}]{0,5}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Writes `value` as JSON text with every object's keys in the order `order` picks.
fn shuffled_text(value: &Value, seed: &mut u64) -> String {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let j = (*seed >> 33) as usize % (i + 1);
                entries.swap(i, j);
            }
            let parts: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| {
                    format!(
                        "{} : {}",
                        serde_json::to_string(k).unwrap(),
                        shuffled_text(v, seed)
                    )
                })
                .collect();
            format!("{{ {} }}", parts.join(" , "))
        }
        Value::Array(items) => {
            format!(
                "[{}]",
                items
                    .iter()
                    .map(|v| shuffled_text(v, seed))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        other => serde_json::to_string(other).unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn canonicalization_is_idempotent(value in arb_json()) {
        let once = String::from_utf8(canonicalize(&value).unwrap()).unwrap();
        let twice = canonicalize_str(&once).unwrap();
        prop_assert_eq!(&once, &twice);
        // And it is valid JSON meaning the same value.
        let back: Value = serde_json::from_str(&once).unwrap();
        prop_assert_eq!(canonicalize(&back).unwrap(), once.into_bytes());
    }

    #[test]
    fn canonicalization_ignores_key_order_and_whitespace(value in arb_json(), seed in any::<u64>()) {
        let mut s = seed;
        let text = shuffled_text(&value, &mut s);
        prop_assert_eq!(canonicalize_str(&text).unwrap().into_bytes(), canonicalize(&value).unwrap());
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any single-byte change to a stored receipt (its envelope bytes or its hash column) is
    /// reported by `verify` at that receipt's index.
    #[test]
    fn any_single_byte_change_is_caught(index in 0usize..4, column in 0usize..2, pos in any::<prop::sample::Index>(), delta in 1u8..=255) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        rt().block_on(async {
            let runtime = Runtime::new(Arc::new(SqliteStore::open(&path).unwrap()));
            for i in 0..4 {
                let cmd = Command::new(vec![json!({"type": "step", "i": i, "note": "ünïcode ✓", "nested": {"a": [1, 2.5, null]}})]);
                let cmd = if i == 2 { cmd.context(receipt::ReceiptContext { run_id: Some("r".into()), ..Default::default() }) } else { cmd };
                runtime.execute("s", cmd).await.unwrap();
            }
        });
        let conn = rusqlite::Connection::open(&path).unwrap();
        let name = if column == 0 { "envelope" } else { "hash" };
        let mut bytes: Vec<u8> = conn
            .query_row(&format!("SELECT CAST({name} AS BLOB) FROM receipt_receipts WHERE stream_seq = ?1"), [index as i64], |r| r.get(0))
            .unwrap();
        let at = pos.index(bytes.len());
        bytes[at] = bytes[at].wrapping_add(delta);
        if column == 0 {
            conn.execute("UPDATE receipt_receipts SET envelope = ?1 WHERE stream_seq = ?2", rusqlite::params![bytes, index as i64]).unwrap();
        } else {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            conn.execute("UPDATE receipt_receipts SET hash = ?1 WHERE stream_seq = ?2", rusqlite::params![text, index as i64]).unwrap();
        }
        drop(conn);
        let chain = rt().block_on(async {
            let store = SqliteStore::open_existing(&path).unwrap();
            receipt::ReceiptStore::read(&store, "s").await.unwrap()
        });
        prop_assert_eq!(chain.len(), 4);
        let failure = verify(&chain).unwrap_err();
        prop_assert_eq!(failure.at, index);
        // A change inside the envelope's `prev` shows as a broken link, any other as a mismatch.
        prop_assert!(failure.reason == VerifyReason::HashMismatch || (column == 0 && failure.reason == VerifyReason::BrokenPrev));
    }
}
