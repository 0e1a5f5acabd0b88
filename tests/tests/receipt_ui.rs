//! Compile-time behaviour of `#[receipt::receipts]`, `#[receipt::view]` and
//! `#[receipt::agent]`: every diagnostic has a case in `ui/receipt/` (the `.stderr` beside it is
//! the expected output), and the cases in `ui/receipt/pass/` must compile and run.

#[test]
fn receipt_macros_ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/receipt/pass/*.rs");
    t.compile_fail("ui/receipt/*.rs");
}
