//! What the workspace's tests and benchmarks share, one module a concern, each behind a feature
//! so that a test crate builds only what it uses:
//!
//! - `process`: the child-process harness (a kill-on-drop guard, free and stopped ports,
//!   waiting for a listener, reading what a child appended to a file).
//! - `python`: finding a Python with a published `rebuno` SDK (`REBUNO_PYTHON`,
//!   `REBUNO_SDK_VENVS`).
//! - `vectors`: where the conformance vectors are kept.
//! - `pg` (feature `pg`): a PostgreSQL schema of its own per test.
//! - `logs` (feature `logs`): capturing the log lines and span closes of a test binary.
//! - `browser` (feature `browser`): a minimal WebDriver client driving a headless Chromium.
//! - `keys` (feature `keys`): the `keygen` command both CLIs have, checked on a real binary.
//! - `bench` (feature `bench`): what the benchmarks share (the fsync floor, signed against
//!   unsigned in alternating rounds).
//! - `rebuno` (feature `rebuno`): the fixtures of rebuno's own tests and benchmarks (kernels
//!   served and embedded, test agents, the API, console, LLM, policy, protocol and SDK
//!   harnesses, a load-balancing proxy, a counting transport).

pub mod process;
pub mod python;
pub mod vectors;

#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "browser")]
pub mod browser;
#[cfg(feature = "keys")]
pub mod keys;
#[cfg(feature = "logs")]
pub mod logs;
#[cfg(feature = "pg")]
pub mod pg;
#[cfg(feature = "rebuno")]
pub mod rebuno;
