//! Finding a Python with a published `rebuno` SDK installed, for the interop tests that run
//! agents and clients written against it (or failing, saying what is missing).

use std::process::{Command, Stdio};

/// A Python whose `rebuno` is the published SDK 0.14.0: `REBUNO_PYTHON` (which `.ci/run` sets),
/// or else `python3`. Panics, saying what is missing, when neither has it: the tests that call
/// this are `#[ignore]`d, so they run only when asked for, and then must not pass untested.
pub fn python_with_sdk() -> String {
    python_with_sdk_version("0.14.0")
}

/// A Python with the published `rebuno` SDK `version` installed: for 0.14.0 `REBUNO_PYTHON`
/// (or `python3`), for any version `$REBUNO_SDK_VENVS/sdk-<version>/bin/python` (`.ci/run`
/// builds those venvs). Panics with the way to get one if there is none.
pub fn python_with_sdk_version(version: &str) -> String {
    let from_env = std::env::var("REBUNO_PYTHON").ok();
    let venv = std::env::var("REBUNO_SDK_VENVS")
        .ok()
        .map(|dir| format!("{dir}/sdk-{version}/bin/python"));
    let mut candidates: Vec<String> = venv.into_iter().collect();
    if version == "0.14.0" {
        candidates.extend(from_env.clone());
        candidates.push("python3".to_owned());
    }
    let check = format!(
        "import rebuno, importlib.metadata as m; assert m.version('rebuno') == '{version}'"
    );
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", &check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return python;
        }
    }
    panic!(
        "this test needs a Python with rebuno=={version}: set REBUNO_SDK_VENVS to a directory \
         holding sdk-{version}/ (or REBUNO_PYTHON for 0.14.0); .ci/run builds them"
    )
}
