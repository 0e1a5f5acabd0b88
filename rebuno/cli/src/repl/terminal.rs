//! What the binary's line editor needs from the REPL: the terminal width, the history file and
//! the history entry of a line (which keeps secrets out of the file).

use super::{DEFAULT_WIDTH, HISTORY_FILE};

/// The width of the terminal on stdout, else `COLUMNS`, else [`DEFAULT_WIDTH`].
pub fn terminal_width() -> usize {
    if let Some((terminal_size::Width(w), _)) = terminal_size::terminal_size()
        && w > 0
    {
        return usize::from(w);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&w| w > 0)
        .unwrap_or(DEFAULT_WIDTH)
}

/// The history file: `$HOME/.rebuno_repl_history` (`USERPROFILE` on Windows); `None` without
/// a home directory.
pub fn history_path() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .map(|h| std::path::PathBuf::from(h).join(HISTORY_FILE))
}

/// The history entry for a line: `None` for a blank line; `agent add` keeps its secret out of
/// the history file (replaced by `<secret>`).
pub fn history_entry(line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.len() >= 5 && words[0] == "agent" && words[1] == "add" {
        let lease = words.get(5).map(|w| format!(" {w}")).unwrap_or_default();
        return Some(format!(
            "agent add {} {} <secret>{lease}",
            words[2], words[3]
        ));
    }
    Some(line.to_owned())
}
