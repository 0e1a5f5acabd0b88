//! Cross-crate tests live in `tests/` beside this file: the macro expansions of both macro
//! crates (`rebuno_macros.rs`, `receipt_macros.rs`), their trybuild compile-fail cases
//! (`*_ui.rs`, cases in `ui/<crate>/`), and the examples' receipt agents run through the CLI
//! (`receipt_examples.rs`, `receipt_run_cli.rs`). Each crate's own tests live in that crate.
