//! Warnings for `REBUNO_*` variables the kernel does not read. A misspelt name
//! (`REBUNO_DISPATCH_TIMEOUTS`) would otherwise leave its setting at the default without a word;
//! the names the binary reads are the ones its environment help lists, so the two cannot drift.

/// What the environment help says before the names this build knows but does not use.
const UNUSED_MARKER: &str = "Not used by this build:";

/// Variables of this project's own test and benchmark harnesses, which CI exports to every
/// process it starts: never warned about.
const HARNESS: &[&str] = &[
    "REBUNO_PYTHON",
    "REBUNO_SDK_VENVS",
    "REBUNO_MCP_SERVERS",
    "REBUNO_SPEC_DIR",
];

/// Prefixes of the test and benchmark harnesses' variables.
const HARNESS_PREFIXES: &[&str] = &[
    "REBUNO_TEST_",
    "REBUNO_BENCH_",
    "REBUNO_CRASH_",
    "REBUNO_MCP_",
];

/// The furthest a misspelling may be from the name it suggests, in edits.
const SUGGEST_WITHIN: usize = 3;

/// One warning for each name in `vars` that starts with `REBUNO_` and that `help` (the
/// binary's environment help) does not list as read: a name listed after [`UNUSED_MARKER`] is
/// known but unused by this build; any other gets the closest listed name as a suggestion.
pub(crate) fn unread_warnings(help: &str, vars: impl IntoIterator<Item = String>) -> Vec<String> {
    let (read_part, unused_part) = help.split_once(UNUSED_MARKER).unwrap_or((help, ""));
    let read = names_in(read_part);
    let unused = names_in(unused_part);
    let mut warnings = Vec::new();
    let mut vars: Vec<String> = vars
        .into_iter()
        .filter(|name| name.starts_with("REBUNO_"))
        .collect();
    vars.sort();
    for name in vars {
        if read.contains(&name.as_str())
            || HARNESS.contains(&name.as_str())
            || HARNESS_PREFIXES.iter().any(|p| name.starts_with(p))
        {
            continue;
        }
        if unused.contains(&name.as_str()) {
            warnings.push(format!(
                "{name} is set but not used by this build (see `rebuno --help`)"
            ));
            continue;
        }
        let hint = match receipt_vocab::closest(&name, &read) {
            Some((close, d)) if d <= SUGGEST_WITHIN => format!("; did you mean {close}?"),
            _ => String::new(),
        };
        warnings.push(format!(
            "{name} is set but rebuno reads no such variable{hint} (`rebuno --help` lists them)"
        ));
    }
    warnings
}

/// The `REBUNO_*` names in `text`, each once.
fn names_in(text: &str) -> Vec<&str> {
    let mut names: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|word| word.starts_with("REBUNO_") && word.len() > "REBUNO_".len())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "  REBUNO_LISTEN_ADDR  address\n  REBUNO_DISPATCH_TIMEOUT  timeout\n\
                        Not used by this build: REBUNO_DEV, REBUNO_LEADER_LOCK_KEY.";

    fn warn(vars: &[&str]) -> Vec<String> {
        unread_warnings(HELP, vars.iter().map(|v| (*v).to_owned()))
    }

    #[test]
    fn read_names_and_other_variables_pass_without_a_word() {
        assert!(
            warn(&[
                "REBUNO_LISTEN_ADDR",
                "PATH",
                "RUST_LOG",
                "REBUNO_TEST_PG_URL"
            ])
            .is_empty()
        );
        assert!(warn(&["REBUNO_PYTHON", "REBUNO_BENCH_LOG"]).is_empty());
    }

    #[test]
    fn a_misspelt_name_is_named_with_the_closest_read_one() {
        assert_eq!(
            warn(&["REBUNO_DISPATCH_TIMEOUTS"]),
            [
                "REBUNO_DISPATCH_TIMEOUTS is set but rebuno reads no such variable; did you mean \
              REBUNO_DISPATCH_TIMEOUT? (`rebuno --help` lists them)"
            ]
        );
        let far = warn(&["REBUNO_SOMETHING_ELSE"]);
        assert_eq!(far.len(), 1);
        assert!(!far[0].contains("did you mean"), "{far:?}");
    }

    #[test]
    fn a_name_of_the_original_kernel_is_known_but_unused() {
        assert_eq!(
            warn(&["REBUNO_LEADER_LOCK_KEY"]),
            ["REBUNO_LEADER_LOCK_KEY is set but not used by this build (see `rebuno --help`)"]
        );
    }

    #[test]
    fn the_binary_help_lists_what_the_kernel_reads() {
        let (read, unused) = crate::args::ENVIRONMENT_HELP
            .split_once(UNUSED_MARKER)
            .expect("the help has the marker");
        let read = names_in(read);
        for name in [
            "REBUNO_DB_URL",
            "REBUNO_RETENTION",
            "REBUNO_URL",
            "REBUNO_API_KEY",
        ] {
            assert!(read.contains(&name), "{name} missing from {read:?}");
        }
        assert!(names_in(unused).contains(&"REBUNO_DEV"));
    }
}
