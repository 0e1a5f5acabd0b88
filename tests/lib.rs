//! Cross-crate integration tests live in `tests/` beside this file, named by area
//! (`receipt_store.rs`, `receipt_branch.rs`, ...); trybuild UI cases will live in `ui/<macro>/`.
