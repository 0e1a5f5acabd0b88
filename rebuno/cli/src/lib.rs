//! `rebuno_cli`: what the `rebuno` binary (`src/main.rs`: `rebuno dev`, `rebuno server`) is
//! made of beyond the `rebuno` library, kept in a library so that its tests drive it directly.
//!
//! - [`manifest`]: the provisioning manifest (`--config`), agents upserted at boot;
//! - [`repl`]: the operator REPL the binary runs when stdin is a terminal.
//!
//! Both use only `rebuno`'s public API. The binary's own modules are `serve` (`dev` and
//! `server`), `args` (the command line), `shutdown` (signals and the REPL thread) and
//! `env_names` (the `REBUNO_*` variables it reads, and the warning for any other that is set).

pub mod manifest;
pub mod repl;
