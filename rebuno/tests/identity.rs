//! Step identity: Go-compatible canonical JSON, args hashes and step ids.
//!
//! Every vector of the canonical-JSON vector file is checked twice: from the inline copy below,
//! and from the file itself (`tests/data/canon_vectors.json`, a byte-for-byte copy of the
//! project's vectors, its source named in the README beside it) by `file_vectors`.

use proptest::prelude::*;
use rebuno::identity::{
    IdentityError, MAX_DEPTH, args_hash, args_hash_raw, args_hash_value, canonical_json,
    canonical_json_raw, canonical_json_value, is_hex64, step_id, step_id_for_args,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

const EXECUTION_ID: &str = "0192f1a0-0000-7000-8000-000000000000";
const KIND: &str = "tool_call";
const TARGET: &str = "t";

struct Vector {
    args_raw: &'static [u8],
    canonical: &'static str,
    args_hash: &'static str,
    /// Step id for (EXECUTION_ID, "tool_call", "t", args_hash, 0), when the vector lists one.
    step_id: Option<&'static str>,
}

/// Inline copy of every case in `canon_vectors.json`.
const VECTORS: &[Vector] = &[
    Vector {
        args_raw: b"",
        canonical: "null",
        args_hash: "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
        step_id: Some("6db37b2457f3c82a563387f9afc3fca02097fafa43862c2b94efb6409c86618e"),
    },
    Vector {
        args_raw: b"null",
        canonical: "null",
        args_hash: "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
        step_id: Some("6db37b2457f3c82a563387f9afc3fca02097fafa43862c2b94efb6409c86618e"),
    },
    Vector {
        args_raw: b"{\"b\":1,\"a\":{\"d\":[3,2,1],\"c\":null}}",
        canonical: "{\"a\":{\"c\":null,\"d\":[3,2,1]},\"b\":1}",
        args_hash: "99292fc65b1416433c73754bd2133c24f100c4da791e825377abb6756eeb69ae",
        step_id: Some("97efdc49f1a58717d07834e607d2fc9b6e0e7de1ae8d8f7c8ef1f6361b7bbf06"),
    },
    Vector {
        args_raw: b"{ \"x\" : 1.0 , \"y\" : 1e5, \"z\": 1E+05, \"w\": -0, \"v\": 123456789012345678901234567890 }",
        canonical: "{\"v\":123456789012345678901234567890,\"w\":-0,\"x\":1.0,\"y\":1e5,\"z\":1E+05}",
        args_hash: "33f17ea93604ec1cf9d4c8b3c11ad47ef69224e39cde4e51ba394af24859141e",
        step_id: Some("c203b32ca6ad798c78aa06371096502acb0603ff6bd0ce3a4dae4c09b8a125a4"),
    },
    Vector {
        args_raw: b"{\"s\":\"<a href=\\\"x\\\">&</a>\"}",
        canonical: "{\"s\":\"\\u003ca href=\\\"x\\\"\\u003e\\u0026\\u003c/a\\u003e\"}",
        args_hash: "295ce75c241e08ebbb709264dfcd030fcf96ff9fbec69f119e010d1f671bc675",
        step_id: Some("276171bb12a0581e8a555daa503c1d4751a1012a0ae0cb38d24d43aadf7036c0"),
    },
    Vector {
        args_raw: b"{\"s\":\"line\\u2028sep\\u2029\"}",
        canonical: "{\"s\":\"line\\u2028sep\\u2029\"}",
        args_hash: "d614a9a71f0b057469f07c78f2a8d56833af550571b4d851d8d76760806a2b2d",
        step_id: Some("b60d58fb8c36888b2eb91846ec653e245b1a5a93afc14e65fa5a33fe0472bc1b"),
    },
    Vector {
        args_raw: b"{\"s\":\"\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\"}",
        canonical: "{\"s\":\"\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}\"}",
        args_hash: "41ffaac9652fbe718656c2cc138581e7ad6400240ecccfa0d0bf8b0f1add2a83",
        step_id: Some("65368fd880c14d96fc63a1c47fb0c013721d2d7dd4111e39c1685d28cef44b2e"),
    },
    Vector {
        args_raw: b"{\"s\":\"caf\\u00e9 \\ud83d\\ude00\"}",
        canonical: "{\"s\":\"caf\u{e9} \u{1f600}\"}",
        args_hash: "074e5e00c1af2d46201bf2fa4301e00308f38d0948352c60253fc3071f402b61",
        step_id: Some("84c4f1d659c5f1448ad676505ef6124dd8bbc9aea2e917f43b414c518c86f7d5"),
    },
    Vector {
        args_raw: b"{\"s\":\"\\ud800\"}",
        canonical: "{\"s\":\"\u{fffd}\"}",
        args_hash: "7513ecfd87d7bd3c5671d16e2a24074dc15ea73c79a51ffda3ffc1cd8ede8389",
        step_id: Some("476b06afc9b52da8339ea281776bb87a4208f42392b5b920787482720e05aabb"),
    },
    Vector {
        args_raw: b"{\"\\u00e9\":1,\"z\":2,\"\\ud83d\\ude00\":3,\"\\uffff\":4}",
        canonical: "{\"z\":2,\"\u{e9}\":1,\"\u{ffff}\":4,\"\u{1f600}\":3}",
        args_hash: "54939562ea6095dd00c527bf7eb3ee5a5e7fcd735bf3e040f6099d457340a9ff",
        step_id: Some("21b705ef8c094ea73943642d3ecac32f772f8e3eae73405bc30ad6192fd8ea76"),
    },
    Vector {
        args_raw: b"{\"a\":1,\"a\":2}",
        canonical: "{\"a\":2}",
        args_hash: "7e8059f495589fcd981232cc11d00b00da3802c01d688fa1cf1f6bed6e5bb33c",
        step_id: Some("b5c53ad3aea9576dfa02cb503339cc42e3479a06d129b58732cc33d7ca342c67"),
    },
    Vector {
        args_raw: b"[1,\"two\",true,false,null,{}]",
        canonical: "[1,\"two\",true,false,null,{}]",
        args_hash: "1f67a2701889ce31b4c79d005457b738fc93ef78994a232b1cb961a2b3f1a86c",
        step_id: Some("94c7669094948b7755155b390680f81ff7b094314a8e52d2d7f7df65e2ebf33c"),
    },
    Vector {
        args_raw: b"\"just a string\"",
        canonical: "\"just a string\"",
        args_hash: "3fe01def54b1c6cd795b2ebfcbab64150f6a507bce043040c662c682eebfed1e",
        step_id: Some("3d08d60ff582d213ed24f0e7d2fa34182b0111e3d607e35800d32e5f5aae6dc8"),
    },
    Vector {
        args_raw: b"{\"s\":\"a\xffb\"}",
        canonical: "{\"s\":\"a\u{fffd}b\"}",
        args_hash: "831e2ffe20d5ec81d65bb674545ecad8eb14892a421787b7d9588084a3e038c7",
        step_id: None,
    },
];

fn check(raw: &[u8], canonical: &[u8], hash: &str, id: Option<&str>) {
    let got = canonical_json(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(canonical),
        "canonical of {raw:?}"
    );
    assert_eq!(got, canonical, "canonical bytes of {raw:?}");
    assert_eq!(args_hash(raw).unwrap(), hash, "args_hash of {raw:?}");
    if let Some(id) = id {
        assert_eq!(
            step_id(EXECUTION_ID, KIND, TARGET, hash, 0),
            id,
            "step_id of {raw:?}"
        );
        assert_eq!(
            step_id_for_args(EXECUTION_ID, KIND, TARGET, raw, 0).unwrap(),
            id,
            "step_id_for_args of {raw:?}"
        );
    }
}

#[test]
fn inline_vectors() {
    assert_eq!(VECTORS.len(), 14);
    for v in VECTORS {
        check(v.args_raw, v.canonical.as_bytes(), v.args_hash, v.step_id);
    }
}

fn hex_decode(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The vector file: `$REBUNO_SPEC_DIR/canon_vectors.json` (to check against another copy), or
/// the one in `tests/data/`.
fn vectors_path() -> std::path::PathBuf {
    match std::env::var_os("REBUNO_SPEC_DIR") {
        Some(dir) => std::path::Path::new(&dir).join("canon_vectors.json"),
        None => test_support::vectors::canon_vectors(),
    }
}

#[test]
fn file_vectors() {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; set REBUNO_SPEC_DIR to the directory of canon_vectors.json",
            path.display()
        )
    });
    let file: Value = serde_json::from_str(&text).expect("canon_vectors.json is JSON");
    assert_eq!(file["execution_id"], EXECUTION_ID);
    assert_eq!(file["kind"], KIND);
    assert_eq!(file["target"], TARGET);
    assert_eq!(file["occurrence"], 0);
    let cases = file["cases"].as_array().expect("cases array");
    assert!(!cases.is_empty());
    for case in cases {
        let raw = match (case.get("args_raw"), case.get("args_raw_hex")) {
            (Some(Value::String(s)), _) => s.as_bytes().to_vec(),
            (_, Some(Value::String(h))) => hex_decode(h),
            _ => panic!("case without args_raw: {case}"),
        };
        let canonical = case["canonical"].as_str().expect("canonical");
        let hash = case["args_hash"].as_str().expect("args_hash");
        let id = case.get("step_id_tool_call_t_occ0").and_then(Value::as_str);
        check(&raw, canonical.as_bytes(), hash, id);
        // The inline table must hold the same case, so the two copies cannot drift apart.
        assert!(
            VECTORS.iter().any(|v| v.args_raw == raw.as_slice()
                && v.canonical == canonical
                && v.args_hash == hash
                && v.step_id == id),
            "inline table is missing the file case {case}"
        );
    }
    assert_eq!(
        cases.len(),
        VECTORS.len(),
        "file and inline table differ in size"
    );
}

#[test]
fn sdk_fixture_prefixes() {
    // The published SDK's test fixture, target `tool_0`: `{"greeting":"world"}` → hash
    // 5c0a68e8…, step 1599d345….
    let hash = args_hash(br#"{"greeting":"world"}"#).unwrap();
    assert!(hash.starts_with("5c0a68e8"), "{hash}");
    let id = step_id(EXECUTION_ID, KIND, "tool_0", &hash, 0);
    assert!(id.starts_with("1599d345"), "{id}");
}

fn canon(raw: &[u8]) -> String {
    String::from_utf8(canonical_json(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}")))
        .expect("canonical JSON is UTF-8")
}

#[test]
fn step_id_is_length_prefixed() {
    let hash = "ab".repeat(32);
    // "é" is two bytes, so its prefix is `2:`; the occurrence is decimal text.
    let preimage = format!("36:{EXECUTION_ID}9:tool_call2:é64:{hash}2:17");
    let expected: String = Sha256::digest(preimage.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let got = step_id(EXECUTION_ID, "tool_call", "é", &hash, 17);
    assert_eq!(got, expected);
    assert!(is_hex64(&got));
    // Empty target is allowed and still prefixed.
    let preimage = format!("36:{EXECUTION_ID}5:local0:64:{hash}1:0");
    let expected: String = Sha256::digest(preimage.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(step_id(EXECUTION_ID, "local", "", &hash, 0), expected);
    // Moving a byte between fields changes the id: the prefixes keep fields apart.
    assert_ne!(
        step_id(EXECUTION_ID, "ab", "c", &hash, 0),
        step_id(EXECUTION_ID, "a", "bc", &hash, 0)
    );
    assert_ne!(
        step_id(EXECUTION_ID, KIND, TARGET, &hash, 1),
        step_id(EXECUTION_ID, KIND, TARGET, &hash, 0)
    );
}

#[test]
fn is_hex64_shape() {
    assert!(is_hex64(&"0a".repeat(32)));
    assert!(!is_hex64(&"0A".repeat(32)));
    assert!(!is_hex64(&"0a".repeat(31)));
    assert!(!is_hex64(&"g0".repeat(32)));
}

#[test]
fn only_the_first_value_is_read() {
    // Go's json.Decoder stops after the first value and never looks at the rest.
    assert_eq!(canon(br#"{"a":1} trailing"#), r#"{"a":1}"#);
    assert_eq!(canon(b"[1]]"), "[1]");
    assert_eq!(canon(b"1 2"), "1");
    assert_eq!(canon(b"01"), "0");
    assert_eq!(canon(b"truex"), "true");
    assert_eq!(canon(b" \n\tnull\r\n"), "null");
}

#[test]
fn number_literals_are_verbatim() {
    for n in [
        "0",
        "-0",
        "-0.0",
        "1.50",
        "1e5",
        "1E+05",
        "1e-7",
        "2.5E-0",
        "1E400",
        "-123456789012345678901234567890.000",
    ] {
        assert_eq!(canon(format!("[{n}]").as_bytes()), format!("[{n}]"));
        assert_eq!(canon(n.as_bytes()), n);
    }
}

#[test]
fn string_escaping_matches_go() {
    // Every control character: \b \f \n \r \t by name, the rest as \u00xx in lowercase hex.
    let mut raw = String::from("\"");
    let mut want = String::from("\"");
    for c in 0u8..0x20 {
        raw.push_str(&format!("\\u{c:04X}"));
        want.push_str(&match c {
            0x08 => "\\b".to_string(),
            0x0c => "\\f".to_string(),
            b'\n' => "\\n".to_string(),
            b'\r' => "\\r".to_string(),
            b'\t' => "\\t".to_string(),
            _ => format!("\\u{c:04x}"),
        });
    }
    raw.push('"');
    want.push('"');
    assert_eq!(canon(raw.as_bytes()), want);

    assert_eq!(canon(br#""\/\"\\""#), r#""/\"\\""#);
    assert_eq!(canon(br#""\u00E9""#), "\"\u{e9}\"");
    // Raw (unescaped) U+2028/U+2029, HTML characters and DEL in the input.
    assert_eq!(
        canon("\"a\u{2028}b\u{2029}<>&\u{7f}\"".as_bytes()),
        "\"a\\u2028b\\u2029\\u003c\\u003e\\u0026\u{7f}\""
    );
    // Keys are escaped the same way.
    assert_eq!(canon(br#"{"<k>":1}"#), r#"{"\u003ck\u003e":1}"#);
    // A genuine U+FFFD is raw UTF-8.
    assert_eq!(canon(br#""\ufffd""#), "\"\u{fffd}\"");
}

#[test]
fn invalid_utf8_is_replaced_byte_by_byte() {
    // Truncated sequence then ASCII: one replacement per byte, as Go's utf8.DecodeRune does.
    assert_eq!(canon(b"\"\xe2\x82a\""), "\"\u{fffd}\u{fffd}a\"");
    // UTF-8-encoded surrogate and overlong encodings are invalid too.
    assert_eq!(canon(b"\"\xed\xa0\x80\""), "\"\u{fffd}\u{fffd}\u{fffd}\"");
    assert_eq!(canon(b"\"\xc0\xaf\""), "\"\u{fffd}\u{fffd}\"");
    // Truncated at the end of the string.
    assert_eq!(
        canon(b"\"ok\xf0\x9f\x98\""),
        "\"ok\u{fffd}\u{fffd}\u{fffd}\""
    );
    // Keys that only differ in invalid bytes collide; the last one wins.
    assert_eq!(canon(b"{\"\xff\":1,\"\xfe\":2}"), "{\"\u{fffd}\":2}");
}

#[test]
fn lone_surrogates_become_replacement() {
    assert_eq!(canon(br#""\ud800x""#), "\"\u{fffd}x\"");
    assert_eq!(canon(br#""\udc00""#), "\"\u{fffd}\"");
    // A high surrogate followed by a non-low escape: the second escape is read on its own.
    assert_eq!(canon(br#""\ud800\u0041""#), "\"\u{fffd}A\"");
    assert_eq!(canon(br#""\ud800\ud800\udc00""#), "\"\u{fffd}\u{10000}\"");
    assert_eq!(canon(br#""\ud800\n""#), "\"\u{fffd}\\n\"");
}

#[test]
fn keys_sort_bytewise_and_last_duplicate_wins() {
    assert_eq!(
        canon(br#"{"b":1,"a":2,"B":3,"":4}"#),
        r#"{"":4,"B":3,"a":2,"b":1}"#
    );
    // Keys compare after unescaping.
    assert_eq!(canon(br#"{"\u0062":1,"a":2}"#), r#"{"a":2,"b":1}"#);
    assert_eq!(canon(br#"{"a":1,"\u0061":2}"#), r#"{"a":2}"#);
    // A later duplicate replaces the earlier value entirely (no merge).
    assert_eq!(canon(br#"{"a":{"x":1},"a":{"y":2}}"#), r#"{"a":{"y":2}}"#);
    assert_eq!(canon(br#"{"a":1,"b":2,"a":3}"#), r#"{"a":3,"b":2}"#);
    // Bytewise UTF-8 order, not UTF-16: U+1F600 sorts after U+FFFF.
    assert_eq!(
        canon("{\"\u{1f600}\":1,\"\u{ffff}\":2,\"\u{e000}\":3}".as_bytes()),
        "{\"\u{e000}\":3,\"\u{ffff}\":2,\"\u{1f600}\":1}"
    );
}

#[test]
fn whitespace_is_dropped_everywhere() {
    assert_eq!(
        canon(b" { \"a\" :\t[ 1 ,\r\n2 , { } , [ ] ] , \"b\" : \"x y\" } "),
        r#"{"a":[1,2,{},[]],"b":"x y"}"#
    );
}

#[test]
fn invalid_json_is_refused() {
    let bad: &[&[u8]] = &[
        b" ",
        b"\n\t",
        b"[",
        b"{",
        b"{\"a\"",
        b"{\"a\":",
        b"{\"a\":1",
        b"[1,",
        b"[1,]",
        b"{\"a\":1,}",
        b"{\"a\" 1}",
        b"{a:1}",
        b"{1:1}",
        b"[1 2]",
        b"{\"a\":1 \"b\":2}",
        b"-",
        b"-a",
        b"1.",
        b"1.e5",
        b".5",
        b"+1",
        b"1e",
        b"1e+",
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"nul",
        b"tru",
        b"fals",
        b"nulL",
        b"'a'",
        b"\"abc",
        b"\"a\x01\"",
        b"\"a\nb\"",
        b"\"\\x\"",
        b"\"\\u12\"",
        b"\"\\u12G4\"",
        b"\"\\",
        b"\xef\xbb\xbf{}",
        b"\xff",
        b"}",
        b"]",
        b",",
    ];
    for raw in bad {
        assert!(canonical_json(raw).is_err(), "accepted {raw:?}");
        assert!(args_hash(raw).is_err(), "hashed {raw:?}");
        assert!(step_id_for_args(EXECUTION_ID, KIND, TARGET, raw, 0).is_err());
    }
}

#[test]
fn error_kinds_and_messages() {
    assert_eq!(canonical_json(b"[1,"), Err(IdentityError::UnexpectedEnd));
    assert_eq!(canonical_json(b"   "), Err(IdentityError::UnexpectedEnd));
    assert_eq!(
        canonical_json(b"[1,]"),
        Err(IdentityError::InvalidCharacter {
            found: b']',
            context: "looking for beginning of value",
            offset: 3,
        })
    );
    let err = canonical_json(b"{\"a\" 1}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid character '1' after object key (at byte 5)"
    );
    let err = canonical_json(b"trxe").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid character 'x' in literal true (expecting 'u') (at byte 2)"
    );
    let err = canonical_json(b"\"\x01\"").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid character '\\x01' in string literal (at byte 1)"
    );
}

#[test]
fn nesting_depth_limit_matches_go() {
    let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert_eq!(canon(ok.as_bytes()), ok);
    let objects = format!("{}1{}", "{\"a\":".repeat(MAX_DEPTH), "}".repeat(MAX_DEPTH));
    assert_eq!(canon(objects.as_bytes()), objects);
    let too_deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert!(matches!(
        canonical_json(too_deep.as_bytes()),
        Err(IdentityError::TooDeep { .. })
    ));
    // Hostile input fails fast and without recursion.
    let hostile = "[".repeat(1_000_000);
    assert!(canonical_json(hostile.as_bytes()).is_err());
}

#[test]
fn value_and_raw_value_conveniences() {
    let value = serde_json::json!({"b": [1, "<"], "a": null});
    assert_eq!(
        canonical_json_value(&value).unwrap(),
        br#"{"a":null,"b":[1,"\u003c"]}"#
    );
    assert_eq!(
        args_hash_value(&value).unwrap(),
        args_hash(br#"{"b":[1,"<"],"a":null}"#).unwrap()
    );
    assert_eq!(
        args_hash_value(&Value::Null).unwrap(),
        "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
    );
    // A RawValue keeps the literal text, so numbers hash as the caller wrote them.
    let raw: Box<serde_json::value::RawValue> =
        serde_json::from_str(r#"{ "y": 1e5, "x": 1.0 }"#).unwrap();
    assert_eq!(canonical_json_raw(&raw).unwrap(), br#"{"x":1.0,"y":1e5}"#);
    assert_eq!(
        args_hash_raw(&raw).unwrap(),
        args_hash(br#"{"x":1.0,"y":1e5}"#).unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------------------------

/// A JSON document with number literals kept as text, so the generator can produce `1e5` or `-0`.
#[derive(Debug, Clone)]
enum Doc {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<Doc>),
    /// Members with unique keys, in generation order.
    Obj(Vec<(String, Doc)>),
}

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        Just(Doc::Null),
        any::<bool>().prop_map(Doc::Bool),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,2})?".prop_map(Doc::Num),
        any::<String>().prop_map(Doc::Str),
        "[<>&\u{2028}\u{2029}\u{7f}\u{0}-\u{1f}a\"\\\\]{0,8}".prop_map(Doc::Str),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Doc::Arr),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| m.into_iter().collect::<Vec<_>>())
                .prop_shuffle()
                .prop_map(Doc::Obj),
        ]
    })
}

/// Renders `doc` as JSON text; `reverse` flips the member order of every object and `spaced`
/// puts whitespace between all tokens.
fn render(doc: &Doc, reverse: bool, spaced: bool, out: &mut String) {
    let ws = if spaced { " \n\t" } else { "" };
    match doc {
        Doc::Null => out.push_str("null"),
        Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Doc::Num(n) => out.push_str(n),
        Doc::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
        Doc::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                render(item, reverse, spaced, out);
                out.push_str(ws);
            }
            out.push(']');
        }
        Doc::Obj(members) => {
            out.push('{');
            let mut order: Vec<&(String, Doc)> = members.iter().collect();
            if reverse {
                order.reverse();
            }
            for (i, (k, v)) in order.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws);
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(ws);
                out.push(':');
                out.push_str(ws);
                render(v, reverse, spaced, out);
                out.push_str(ws);
            }
            out.push('}');
        }
    }
}

fn text(doc: &Doc, reverse: bool, spaced: bool) -> String {
    let mut s = String::new();
    render(doc, reverse, spaced, &mut s);
    s
}

proptest! {
    #[test]
    fn canonicalization_is_idempotent(d in doc(), spaced in any::<bool>()) {
        let once = canonical_json(text(&d, false, spaced).as_bytes()).unwrap();
        let twice = canonical_json(&once).unwrap();
        prop_assert_eq!(&twice, &once);
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter(d in doc()) {
        let a = canonical_json(text(&d, false, false).as_bytes()).unwrap();
        let b = canonical_json(text(&d, true, true).as_bytes()).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(
            args_hash(text(&d, false, true).as_bytes()).unwrap(),
            args_hash(text(&d, true, false).as_bytes()).unwrap()
        );
    }

    #[test]
    fn canonical_form_means_the_same_value(d in doc()) {
        let input = text(&d, false, true);
        let canonical = canonical_json(input.as_bytes()).unwrap();
        let before: Value = serde_json::from_str(&input).unwrap();
        let after: Value = serde_json::from_slice(&canonical).unwrap();
        prop_assert_eq!(before, after);
        // No HTML characters or line separators survive unescaped.
        let s = String::from_utf8(canonical).unwrap();
        let unescaped = ['<', '>', '&', '\u{2028}', '\u{2029}'];
        prop_assert!(!s.contains(unescaped), "unescaped character in {}", s);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..48)) {
        if let Ok(c) = canonical_json(&bytes) {
            prop_assert_eq!(canonical_json(&c).unwrap(), c);
        }
    }

    #[test]
    fn json_like_bytes_never_panic(s in "[\\[\\]{}\":,0-9eE.+\\- a-z\\\\\u{7f}-\u{a0}]{0,40}") {
        if let Ok(c) = canonical_json(s.as_bytes()) {
            prop_assert_eq!(canonical_json(&c).unwrap(), c);
        }
    }
}
