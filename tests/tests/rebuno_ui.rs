//! Compile-time behaviour of `#[rebuno::tool]`, `#[rebuno::step]` and `#[rebuno::agent]`:
//! every diagnostic has a case in `ui/rebuno/` (the `.stderr` beside it is the expected
//! output), and the cases in `ui/rebuno/pass/` must compile.

#[test]
fn rebuno_macros_ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/rebuno/pass/*.rs");
    t.compile_fail("ui/rebuno/*.rs");
}
