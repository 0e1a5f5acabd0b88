//! Builds a workspace binary or example with cargo (once per test binary and target) and
//! returns the executable's path as cargo reports it: binaries of other packages are not
//! dependencies of this one, so `CARGO_BIN_EXE_*` does not name them.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// `cargo build -p <package> --<kind> <name>` (kind `bin` or `example`), once per process.
pub fn build(package: &str, kind: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{package}/{kind}/{name}");
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = built.get_or_insert_with(HashMap::new).get(&key) {
        return path.clone();
    }
    let out = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", package, &format!("--{kind}"), name])
        .arg("--message-format=json")
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build");
    assert!(out.status.success(), "cargo build of {key} failed");
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["name"] == name
                && m["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.contains(&json!(kind)))
        })
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reports no executable for {key}"));
    assert!(path.is_file(), "no {key} executable at {}", path.display());
    built
        .get_or_insert_with(HashMap::new)
        .insert(key, path.clone());
    path
}
