//! `cargo run --example receipt-agents -- <command>`: the `receipt` CLI with the five example
//! agents registered (`hello-agent`, `human-loop`, `merge`, `assistant-tool`,
//! `remote-notify`), so that `receipt run <agent-id> --problem <text>` can run them.
//!
//! `remote-notify`'s action runs remotely: start a kernel (`cargo run -p rebuno-cli -- dev`), serve
//! its group with `receipt-agents -- --db /tmp/r.db worker --kernel-url http://127.0.0.1:8080
//! --secret s --group notify --register`, and run it with `run remote-notify --problem x
//! --kernel-url http://127.0.0.1:8080`. `cargo run --example remote-actions` does all of that
//! in three processes, with a crash in the middle.
//!
//! `assistant-tool` talks to the OpenAI-compatible base URL in `$RECEIPT_AGENTS_LLM_URL` when it
//! is set; otherwise this binary first starts the loopback fake provider
//! ([`examples::fake_llm`]) and points the agent at it.
//!
//! ```text
//! cargo run --example receipt-agents -- --db /tmp/r.db run hello-agent --problem hi
//! cargo run --example receipt-agents -- --db /tmp/r.db run human-loop --problem x --run-id r1   # exit 2: blocked
//! cargo run --example receipt-agents -- --db /tmp/r.db append agents/human-loop/runs/r1 approval.received '{"approved":true}'
//! cargo run --example receipt-agents -- --db /tmp/r.db run human-loop --problem x --run-id r1   # completed
//! cargo run --example receipt-agents -- --db /tmp/r.db trace r1
//! ```

use examples::{fake_llm, receipt_agents};
use std::process::ExitCode;

/// Overrides the model endpoint of `assistant-tool` (no fake provider is started then).
const LLM_URL_ENV: &str = "RECEIPT_AGENTS_LLM_URL";

fn main() -> ExitCode {
    // The fake provider runs on its own runtime, which stays alive (serving on its worker
    // threads) while the CLI runs its commands on the CLI's runtime.
    let mut server = None;
    let base_url = match std::env::var(LLM_URL_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let started = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .and_then(|rt| {
                    let llm = rt.block_on(fake_llm::serve())?;
                    Ok((rt, llm))
                });
            match started {
                Ok((rt, llm)) => {
                    let url = llm.base_url.clone();
                    server = Some(rt);
                    Some(url)
                }
                Err(e) => {
                    eprintln!("error: cannot start the fake model provider: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    let code = receipt::cli::main_with(receipt_agents::registry(base_url));
    drop(server);
    code
}
