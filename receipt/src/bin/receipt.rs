//! The stock `receipt` command-line tool: see [`receipt::cli`]. It has no agents registered;
//! a project's own binary registers its agents and calls `receipt::cli::main_with`.

fn main() -> std::process::ExitCode {
    receipt::cli::main()
}
