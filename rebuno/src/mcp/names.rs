//! What names and listings the client accepts from a server (and from its user), so that policy
//! rules and models see each tool exactly once, by a name that means what it shows.
//!
//! - **Names.** A server name and a tool name are 1 to [`MAX_NAME_BYTES`] bytes of ASCII letters,
//!   digits, `_`, `-` and `.` (the tool names the MCP specification recommends). So a target
//!   `mcp:<server>/<tool>` has exactly one `/`, and a policy rule on `mcp:<server>/*` (a `*`
//!   stops at `/`) matches every tool of the server; no name holds a control or bidirectional
//!   character, space, glob character or anything Unicode could normalize into another name.
//! - **Model names.** Two tools of one server whose model names ([`model_name`]) are equal, or
//!   equal but for case, are refused: a model (or a provider) could not tell them apart.
//! - **Size.** A server lists at most [`MAX_TOOLS`] tools, each definition (its JSON: name,
//!   description, schema, annotations) at most [`MAX_TOOL_DEFINITION_BYTES`], the whole listing
//!   at most [`MAX_RESULT_BYTES`](super::MAX_RESULT_BYTES) (a step records it), in at most
//!   [`MAX_TOOLS`] pages.
//!
//! A listing that breaks a rule is refused whole, when the tools are listed (and again when
//! tools are made from a listing, recorded or given), with an error naming the server and the
//! tool: nothing of it is offered to a model or callable.

use crate::error::Error;
use serde_json::Value;
use std::collections::BTreeMap;

/// The longest server or tool name, in bytes: 128 (the MCP specification's bound on a tool
/// name).
pub const MAX_NAME_BYTES: usize = 128;

/// The most tools one server may list: 1024.
pub const MAX_TOOLS: usize = 1024;

/// The largest definition of one listed tool, in bytes of JSON: 64 KiB. A definition goes to
/// the model with every request that offers the tool.
pub const MAX_TOOL_DEFINITION_BYTES: usize = 64 * 1024;

/// The longest model name: what OpenAI and Anthropic accept.
const MAX_MODEL_NAME: usize = 64;

/// What a name may hold, for messages.
const RULE: &str = "1 to 128 bytes of A-Z a-z 0-9 _ - .";

/// The name a model calls tool `tool` of server `server` by: `<server>__<tool>` with every
/// character outside `[A-Za-z0-9_-]` replaced by `_`. One longer than 64 characters (what
/// OpenAI and Anthropic accept) is cut to its first 55 and ends in `_` and 8 hex digits of the
/// SHA-256 of `<server>/<tool>`, so long names alike in their start stay apart.
pub fn model_name(server: &str, tool: &str) -> String {
    let mapped: String = format!("{server}__{tool}")
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .collect();
    if mapped.len() <= MAX_MODEL_NAME {
        return mapped;
    }
    use sha2::Digest;
    let hash = sha2::Sha256::digest(format!("{server}/{tool}").as_bytes());
    let hex: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
    // `mapped` is ASCII: any byte index is a character boundary.
    format!("{}_{hex}", &mapped[..MAX_MODEL_NAME - 1 - hex.len()])
}

/// What is wrong with `name` as a server or tool name, if anything.
fn problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Some(format!(
            "it is {} bytes, over the limit of {MAX_NAME_BYTES}",
            name.len()
        ));
    }
    name.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .map(|c| format!("it holds {c:?}"))
}

/// `name` for a message: escaped (control and bidirectional characters show as `\u{…}`), and
/// cut if long.
fn shown(name: &str) -> String {
    const SHOWN: usize = 80;
    if name.chars().count() <= SHOWN {
        return format!("{name:?}");
    }
    let start: String = name.chars().take(SHOWN).collect();
    format!("{start:?}…")
}

/// Checks a server name by the rules of the module.
pub(crate) fn check_server(name: &str) -> Result<(), Error> {
    match problem(name) {
        None => Ok(()),
        Some(why) => Err(Error::Config(format!(
            "MCP server name {}: {why}; a server name is {RULE} (it is the <server> of the \
             targets mcp:<server>/<tool> that policy rules match)",
            shown(name)
        ))),
    }
}

/// Checks the tool count and each tool's name and size as `tools/list` pages arrive (before the
/// whole listing is held): `listed` is the listing so far, `bytes` its size in JSON.
pub(crate) fn check_progress(listed: usize, bytes: usize, pages: usize) -> Result<(), String> {
    if listed > MAX_TOOLS {
        return Err(format!(
            "lists more than {MAX_TOOLS} tools (a server may list at most {MAX_TOOLS})"
        ));
    }
    if bytes > super::MAX_RESULT_BYTES {
        return Err(format!(
            "lists tools of more than {} bytes of JSON (the bound on a listing)",
            super::MAX_RESULT_BYTES
        ));
    }
    if pages > MAX_TOOLS {
        return Err(format!(
            "answers `tools/list` in more than {MAX_TOOLS} pages (the bound on a listing's pages)"
        ));
    }
    Ok(())
}

/// Checks a whole listing (`tools/list`'s tools, as JSON) of server `server` by the rules of
/// the module.
pub(crate) fn check_listing(server: &str, listed: &[Value]) -> Result<(), Error> {
    let refused = |what: String| {
        Error::Other(format!(
            "MCP server `{server}` {what}; its tools are refused"
        ))
    };
    if listed.len() > MAX_TOOLS {
        return Err(refused(format!(
            "lists {} tools, over the limit of {MAX_TOOLS} (a server may list at most \
             {MAX_TOOLS})",
            listed.len()
        )));
    }
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for tool in listed {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return Err(refused("lists a tool without a name".into()));
        };
        if let Some(why) = problem(name) {
            return Err(refused(format!(
                "lists a tool named {}: {why}; a tool name is {RULE} (it is the <tool> of the \
                 target mcp:{server}/<tool> that policy rules match)",
                shown(name)
            )));
        }
        let size = serde_json::to_vec(tool).map_or(usize::MAX, |v| v.len());
        if size > MAX_TOOL_DEFINITION_BYTES {
            return Err(refused(format!(
                "lists tool {} with a definition of {size} bytes of JSON, over the limit of \
                 {MAX_TOOL_DEFINITION_BYTES} bytes",
                shown(name)
            )));
        }
        let model = model_name(server, name);
        if let Some(other) = seen.insert(model.to_ascii_lowercase(), name) {
            return Err(refused(format!(
                "lists tools {} and {}, which a model would call by the same name {model:?} \
                 (model names map every character outside A-Z a-z 0-9 _ - to _, and are \
                 compared ignoring case)",
                shown(other),
                shown(name)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn short_model_names_are_the_mapped_name_and_long_ones_end_in_a_hash() {
        assert_eq!(model_name("fs", "write_file"), "fs__write_file");
        assert_eq!(model_name("a.b", "x.y"), "a_b__x_y");
        let a = model_name("s", &format!("{}a", "t".repeat(100)));
        let b = model_name("s", &format!("{}b", "t".repeat(100)));
        assert_eq!((a.len(), b.len()), (64, 64));
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("s__{}_", "t".repeat(52))), "{a}");
        // 64 characters are kept as they are; 65 are not.
        assert_eq!(
            model_name("s", &"t".repeat(61)),
            format!("s__{}", "t".repeat(61))
        );
        let cut = model_name("s", &"t".repeat(62));
        assert_eq!(cut.len(), 64);
        assert_ne!(cut, format!("s__{}", "t".repeat(61)));
    }

    #[test]
    fn the_rules_refuse_what_could_escape_or_mislead() {
        for bad in [
            "",
            "a/b",
            "x/../y",
            "a\u{202e}b",
            "a\nb",
            "a b",
            "é",
            "*",
            "[a]",
            "a:b",
        ] {
            assert!(problem(bad).is_some(), "{bad:?}");
        }
        assert!(problem(&"a".repeat(129)).is_some());
        for good in [".", "..", "-", "a.b-c_D", &"a".repeat(128)] {
            assert_eq!(problem(good), None, "{good:?}");
        }
    }

    #[test]
    fn listings_with_colliding_model_names_are_refused() {
        let tool = |n: &str| json!({"name": n});
        for pair in [["a.b", "a_b"], ["Read", "read"], ["x", "x"]] {
            let listed = [tool(pair[0]), tool(pair[1])];
            let err = check_listing("s", &listed).unwrap_err().to_string();
            assert!(err.contains("MCP server `s`"), "{err}");
        }
        check_listing("s", &[tool("a.b"), tool("a-b")]).unwrap();
    }

    #[cfg(feature = "kernel")]
    proptest::proptest! {
        /// Every accepted tool name is matched by a rule on `mcp:<server>/*`, and its target
        /// has one `/`: a rule on the server's tools covers it.
        #[test]
        fn a_rule_on_server_star_matches_every_accepted_name(
            name in "[A-Za-z0-9_.\\-/ *?\\[\\]\\\\\u{202e}\n]{0,140}"
        ) {
            use proptest::{prop_assert, prop_assert_eq};
            if problem(&name).is_none() {
                let target = super::super::target("srv", &name);
                let matched = crate::policy::glob_match("mcp:srv/*", &target).unwrap();
                prop_assert!(matched, "{}", target);
                prop_assert_eq!(target.matches('/').count(), 1);
            } else {
                prop_assert!(
                    name.is_empty()
                        || name.len() > MAX_NAME_BYTES
                        || name.chars().any(|c| !(c.is_ascii_alphanumeric() || "_-.".contains(c)))
                );
            }
        }
    }
}
