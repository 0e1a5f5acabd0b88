//! Cross-crate tests live in `tests/` beside this file: the macro expansions of both macro
//! crates (`rebuno_macros.rs`, `receipt_macros.rs`), their trybuild compile-fail cases
//! (`*_ui.rs`, cases in `ui/<crate>/`), `receipt new`'s templates compiled and run
//! (`receipt_templates.rs`, in the same trybuild project as the UI cases), and the examples'
//! receipt agents run through the CLI (`receipt_examples.rs`, `receipt_run_cli.rs`). Each
//! crate's own tests live in that crate.
