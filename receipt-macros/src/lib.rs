//! Procedural macros behind `receipt`: `#[receipts]`, view folds, `#[agent]` and `#[action]`.
//!
//! Implementation detail of the `receipt` crate, which re-exports them; the receipt-agents issue
//! adds the macros and their compile-time checks. Generated code will reach the runtime only
//! through `::receipt::__private`.
