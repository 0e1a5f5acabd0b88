//! Where the conformance vectors the tests check against are kept: one copy each in the
//! repository, beside a README naming its source.

use std::path::PathBuf;

/// The workspace's root directory.
fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The canonical-JSON, args-hash and step-id vectors: `rebuno/tests/data/canon_vectors.json`.
pub fn canon_vectors() -> PathBuf {
    workspace().join("rebuno/tests/data/canon_vectors.json")
}

/// The JSON canonicalization scheme's conformance files (`input/` and `output/`, one name
/// each): `receipt/tests/data/jcs/`.
pub fn jcs_dir() -> PathBuf {
    workspace().join("receipt/tests/data/jcs")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_vectors_are_where_the_paths_say() {
        assert!(super::canon_vectors().is_file());
        assert!(super::jcs_dir().join("input").is_dir());
        assert!(super::jcs_dir().join("output").is_dir());
    }
}
