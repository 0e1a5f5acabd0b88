//! The operator REPL of `rebuno dev` / `rebuno server`: a command interpreter over a [`Kernel`]
//! (`agent …`, `exec …`, `approval …`, `key …`, `session …`, `help`, `quit`) that answers with the text to print.
//!
//! This module owns the command language, unique-prefix id resolution, the width-fitting table
//! renderer and `exec watch`. It never touches the terminal: the binary reads lines (with
//! `rustyline` and the history file [`HISTORY_FILE`]), feeds them to [`Repl::run_line`], prints
//! the answer and, while a watch runs, forwards Ctrl-C to [`Interrupt::interrupt`]. Tests drive
//! [`Repl::run_line`] directly.
//!
//! Submodules: `commands` (the command language: `agent …`, `exec …`, `approval …` and
//! `exec watch`), `keys` (API keys: list, create, revoke), `sessions` (a session's turns), `resolve` (unique-prefix id resolution), `render` (the width-fitting table
//! renderer and one-line descriptions) and `terminal` (what the binary's line editor needs:
//! the terminal width and the history file).

mod commands;
mod keys;
mod render;
mod resolve;
mod sessions;
mod terminal;

pub use render::render_table;
pub use terminal::{history_entry, history_path, terminal_width};

use commands::{HELP, first_word};
use rebuno::Kernel;
use std::fmt::Write as _;
use std::time::Duration;
use tokio::sync::watch;

/// Name of the history file, in the user's home directory.
pub const HISTORY_FILE: &str = ".rebuno_repl_history";
/// Terminal width used when neither the terminal nor `COLUMNS` tells.
pub const DEFAULT_WIDTH: usize = 100;
/// Smallest width the REPL lays tables out for.
pub const MIN_WIDTH: usize = 20;
/// How many executions an id-prefix lookup scans, newest first.
pub const PREFIX_SCAN_CAP: usize = 2_000;
/// How often `exec watch` polls the event log.
pub const WATCH_POLL: Duration = Duration::from_millis(250);
/// Executions `exec ls` shows (the newest).
pub const LIST_LIMIT: usize = 50;
/// Shortest prefix a narrow `exec ls` shortens ids to.
const MIN_SHORT_ID: usize = 8;
/// Ids an ambiguity error lists.
const AMBIGUOUS_SHOWN: usize = 5;

/// What a line asks the caller to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Print this text (nothing when empty); it ends without a newline.
    Print(String),
    /// Leave the REPL (and, in the binary, shut the process down).
    Quit,
}

impl Outcome {
    /// The text to print; empty for [`Outcome::Quit`].
    pub fn text(&self) -> &str {
        match self {
            Outcome::Print(text) => text,
            Outcome::Quit => "",
        }
    }
}

/// Stops a running `exec watch` from another task or thread (the binary's Ctrl-C handler).
#[derive(Debug, Clone)]
pub struct Interrupt {
    generation: watch::Sender<u64>,
}

impl Interrupt {
    /// Stops the watch in progress, if any; returns whether one was running (so the caller
    /// knows whether Ctrl-C was consumed).
    pub fn interrupt(&self) -> bool {
        let watching = self.generation.receiver_count() > 0;
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
        watching
    }
}

/// Where `exec watch` writes lines as they happen; without one they are collected into the
/// answer.
pub type Sink = Box<dyn FnMut(&str) + Send + Sync>;

/// The command interpreter. One per terminal; commands run one at a time.
pub struct Repl {
    kernel: Kernel,
    width: usize,
    interrupt: Interrupt,
    sink: Option<Sink>,
}

impl std::fmt::Debug for Repl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repl")
            .field("kernel", &self.kernel)
            .field("width", &self.width)
            .finish_non_exhaustive()
    }
}

/// A command's answer: the text to print, or the error message.
type Answer = Result<String, String>;

impl Repl {
    /// An interpreter over `kernel` laying tables out for `width` columns (at least
    /// [`MIN_WIDTH`]).
    pub fn new(kernel: Kernel, width: usize) -> Repl {
        let (generation, _) = watch::channel(0);
        Repl {
            kernel,
            width: width.max(MIN_WIDTH),
            interrupt: Interrupt { generation },
            sink: None,
        }
    }

    /// Sends `exec watch` lines to `sink` as they happen instead of collecting them.
    pub fn with_sink(mut self, sink: Sink) -> Repl {
        self.sink = Some(sink);
        self
    }

    /// The table width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Changes the table width (the terminal was resized); at least [`MIN_WIDTH`].
    pub fn set_width(&mut self, width: usize) {
        self.width = width.max(MIN_WIDTH);
    }

    /// A handle that stops a running `exec watch`.
    pub fn interrupter(&self) -> Interrupt {
        self.interrupt.clone()
    }

    /// The help text: every command with a one-line description.
    pub fn help() -> String {
        let left = HELP.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
        let mut out = String::from("commands (ids may be abbreviated to a unique prefix):");
        for (command, what) in HELP {
            let _ = write!(out, "\n  {command:<left$}  {what}");
        }
        out
    }

    /// Runs one line. Errors come back as `error: <message>` text, an unknown command as
    /// `unknown command '<x>'; type help`; nothing panics on bad input.
    pub async fn run_line(&mut self, line: &str) -> Outcome {
        let (command, rest) = first_word(line.trim());
        let answer = match command {
            "" => Ok(String::new()),
            "quit" | "exit" => return Outcome::Quit,
            "help" | "?" => Ok(Repl::help()),
            "agent" | "agents" => self.agent(rest).await,
            "exec" | "execution" | "executions" => self.exec(rest).await,
            "approval" | "approvals" => self.approval(rest).await,
            "key" | "keys" => self.key(rest).await,
            "session" | "sessions" => self.session(rest).await,
            other => Err(format!("unknown command '{other}'; type help")),
        };
        Outcome::Print(match answer {
            Ok(text) => text,
            // Not an error of the command: there was no command.
            Err(e) if e.starts_with("unknown command ") => e,
            Err(e) => format!("error: {e}"),
        })
    }
}
