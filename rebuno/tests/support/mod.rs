//! Helpers shared by the tests that run real processes: finding a Python with the published
//! SDK, killing children on drop, free ports and waiting for a listener.

#![allow(dead_code)] // each test binary uses a different subset

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Python whose `rebuno` is the published SDK 0.14.0: `REBUNO_PYTHON` (which `.ci/run` sets;
/// it must then have the SDK) or `python3`. `None` when there is none.
pub fn python_with_sdk() -> Option<String> {
    let candidates = std::env::var("REBUNO_PYTHON")
        .ok()
        .into_iter()
        .chain(["python3".to_owned()]);
    for python in candidates {
        let ok = Command::new(&python)
            .args([
                "-c",
                "import rebuno, importlib.metadata as m; assert m.version('rebuno') == '0.14.0'",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    assert!(
        std::env::var("REBUNO_PYTHON").is_err(),
        "REBUNO_PYTHON is set but has no rebuno 0.14.0"
    );
    None
}

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

/// Blocks until something listens on the loopback `port` (at most 30 s).
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}
