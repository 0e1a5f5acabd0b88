//! What ends serving: Ctrl-C or SIGTERM, and with a terminal on stdin the operator REPL, run on
//! a thread of its own, whose `quit` (or Ctrl-D) shuts down like a signal and whose `exec watch`
//! a Ctrl-C interrupts instead. Its warnings are logged under the binary's target, `rebuno`,
//! like those of `main`.

use rebuno::Kernel;
use rebuno_cli::repl::{Interrupt, Outcome, Repl, history_entry, history_path, terminal_width};

/// Resolves on Ctrl-C; never if Ctrl-C cannot be watched.
async fn ctrl_c_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves on SIGTERM (Unix); never elsewhere or if it cannot be watched.
async fn terminate_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut sigterm) = signal(SignalKind::terminate()) {
            sigterm.recv().await;
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// Resolves on Ctrl-C or (Unix) SIGTERM. A signal that cannot be watched never fires.
pub(crate) async fn shutdown_signal() {
    tokio::select! {
        () = ctrl_c_signal() => {}
        () = terminate_signal() => {}
    }
}

/// The shutdown of a process with a REPL: `quit`/Ctrl-D at the prompt, SIGTERM, or a Ctrl-C
/// that does not stop an `exec watch` (a Ctrl-C during a watch only ends the watch). A REPL
/// that could not start leaves the other two.
pub(crate) async fn repl_shutdown(
    interrupt: Interrupt,
    quit: tokio::sync::oneshot::Receiver<bool>,
) {
    let quit = async {
        if !matches!(quit.await, Ok(true)) {
            std::future::pending::<()>().await;
        }
    };
    let terminate = terminate_signal();
    tokio::pin!(quit, terminate);
    loop {
        tokio::select! {
            () = &mut quit => return,
            () = &mut terminate => return,
            () = ctrl_c_signal() => {
                if !interrupt.interrupt() {
                    return;
                }
            }
        }
    }
}

/// Starts the REPL thread over `kernel`; it sends `true` on `quit` when the user leaves (and
/// `false` if the line editor fails, so HTTP keeps serving).
pub(crate) fn start_repl(kernel: Kernel, quit: tokio::sync::oneshot::Sender<bool>) -> Interrupt {
    let handle = tokio::runtime::Handle::current();
    let repl =
        Repl::new(kernel, terminal_width()).with_sink(Box::new(|line: &str| println!("{line}")));
    let interrupt = repl.interrupter();
    let spawned = std::thread::Builder::new()
        .name("rebuno-repl".to_owned())
        .spawn(move || {
            let leave = repl_loop(repl, &handle);
            let _ = quit.send(leave);
        });
    if let Err(e) = spawned {
        tracing::warn!(target: "rebuno", "cannot start the REPL ({e}); serving HTTP only");
    }
    interrupt
}

/// Reads lines until `quit`, `exit` or Ctrl-D (true) or an editor failure (false). Ctrl-C at
/// the prompt asks for confirmation: a second Ctrl-C in a row leaves.
fn repl_loop(mut repl: Repl, handle: &tokio::runtime::Handle) -> bool {
    use rustyline::error::ReadlineError;
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(editor) => editor,
        Err(e) => {
            tracing::warn!(target: "rebuno", "no REPL ({e}); serving HTTP only");
            return false;
        }
    };
    let history = history_path();
    if let Some(path) = &history {
        // A missing or unreadable history file only means an empty history.
        let _ = editor.load_history(path);
    }
    println!("rebuno REPL: type help for the commands, quit (or Ctrl-D) to stop the kernel");
    let mut interrupted = false;
    loop {
        match editor.readline("rebuno> ") {
            Ok(line) => {
                interrupted = false;
                if let Some(entry) = history_entry(&line) {
                    let _ = editor.add_history_entry(entry);
                    if let Some(path) = &history
                        && let Err(e) = editor.save_history(path)
                    {
                        tracing::warn!(
                            target: "rebuno",
                            "cannot save the history to {}: {e}",
                            path.display()
                        );
                    }
                }
                repl.set_width(terminal_width());
                match handle.block_on(repl.run_line(&line)) {
                    Outcome::Quit => return true,
                    Outcome::Print(text) if text.is_empty() => {}
                    Outcome::Print(text) => println!("{text}"),
                }
            }
            Err(ReadlineError::Interrupted) if !interrupted => {
                interrupted = true;
                println!("(Ctrl-C again, quit or Ctrl-D stops the kernel)");
            }
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => return true,
            Err(e) => {
                tracing::warn!(
                    target: "rebuno",
                    "the REPL stopped ({e}); serving HTTP until a signal"
                );
                return false;
            }
        }
    }
}
