//! The `keygen` command both CLIs have (`rebuno keygen`, `receipt keygen`), checked the same
//! way against each real binary.

use durable_support::keys::{PublicKey, SigningKey};
use std::path::Path;
use std::process::Command;

/// Runs `<binary> keygen` as a user would and checks what it leaves behind: a signing key
/// (mode 0600) and its public key, the printed id naming them, a head signed with the written
/// key verifying against the written public key, and a second run refused without touching
/// either file. Also a missing directory and a missing argument, each named.
pub fn check_keygen(binary: &Path) {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = dir.path().join("signing.key");
    let run = |args: &[&std::ffi::OsStr]| {
        Command::new(binary)
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("the binary runs")
    };
    let out = run(&["keygen".as_ref(), key.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let printed: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("keygen prints one JSON object");
    let public_file = dir.path().join("signing.key.pub");
    assert_eq!(printed["public_key"], public_file.display().to_string());
    assert_eq!(printed["signing_key"], key.display().to_string());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the signing key is the owner's only");
    }
    let signing = SigningKey::read(&key).expect("a signing key file");
    let public = PublicKey::read(&public_file).expect("a public key file");
    assert_eq!(printed["key_id"], public.id());
    assert_eq!(signing.id(), public.id());
    let head = signing.sign_head("s", 1, "00", "2026-01-01T00:00:00.000000Z");
    head.verify(&public).expect("a head it signs verifies");

    let before = std::fs::read(&key).unwrap();
    let again = run(&["keygen".as_ref(), key.as_os_str()]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("signing.key") && err.contains("already exists"),
        "{err}"
    );
    assert_eq!(std::fs::read(&key).unwrap(), before, "never overwritten");

    let nowhere = dir.path().join("missing").join("k");
    let out = run(&["keygen".as_ref(), nowhere.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing/k"), "{err}");

    let out = run(&["keygen".as_ref()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("<KEYFILE>"));
}
