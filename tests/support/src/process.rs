//! The child-process harness: a guard that kills a child on drop, loopback ports (a free one, a
//! stopped PostgreSQL cluster's), waiting for a listener, and reading what a child appended to
//! a file; the CPU time of a process (for the benchmarks).

use std::process::Child;
use std::time::{Duration, Instant};

/// Kills (SIGKILL) and reaps the child when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The port of the stopped PostgreSQL cluster `REBUNO_TEST_PG_STOPPED_URL` names (`bash
/// .ci/postgres stopped` makes one: initialised, started once and stopped).
pub fn stopped_pg_port() -> u16 {
    let url = std::env::var("REBUNO_TEST_PG_STOPPED_URL")
        .expect("REBUNO_TEST_PG_STOPPED_URL (bash .ci/postgres stopped)");
    let host_port = url.split('@').next_back().unwrap_or(&url);
    let port = host_port.split([':', '/']).nth(1).unwrap_or_default();
    port.parse()
        .unwrap_or_else(|_| panic!("no port in REBUNO_TEST_PG_STOPPED_URL={url}"))
}

/// Blocks until something listens on the loopback `port` (at most 30 s).
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The lines of the file at `path` so far (none while it does not exist): what a child process
/// has appended to it.
pub fn file_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// CPU time (user + system) process `pid` has used so far, from `/proc/<pid>/stat` (`None`
/// where there is no such file).
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 on every architecture it runs on.
    Some(std::time::Duration::from_millis(ticks * 10))
}

/// The processes named `name` (their `comm`), such as the `postgres` server's backends.
pub fn processes_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .collect()
}
