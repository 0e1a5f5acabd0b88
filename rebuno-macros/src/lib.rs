//! Procedural macros behind `rebuno`: `#[tool]`, `#[step]` and `#[agent]`.
//!
//! Implementation detail of the `rebuno` crate, which re-exports them; the agent SDK issue adds the
//! macros themselves. Generated code will reach the runtime only through `::rebuno::__private`.
