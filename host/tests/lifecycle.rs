//! Start-up and shutdown: SIGTERM stops the server cleanly (exit 0, store
//! flushed), the data directory opens again with the same data, and a
//! second server on a directory in use gets a clear message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Server, plugins_dir, spawn};

#[test]
fn sigterm_stops_cleanly_and_the_data_survives_a_restart() {
    let mut server = Server::start(&plugins_dir());
    let before = server.json("/v1/vulnerability-findings?limit=5");

    // A second server on the same directory is refused, clearly.
    let second = spawn(&plugins_dir(), server.data_dir(), &[]).wait_with_output().unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("in use by another esr process"), "{stderr}");

    server.signal("TERM");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.try_wait() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
    assert!(server.log().contains("stopped"), "{}", server.log());

    // The same directory, a new process: nothing re-seeded, nothing lost.
    let keys_before = std::fs::read(server.data_dir().join("demo-keys.json")).unwrap();
    let restarted = Server::start_on(&plugins_dir(), server.data_dir());
    assert_eq!(std::fs::read(server.data_dir().join("demo-keys.json")).unwrap(), keys_before);
    assert_eq!(restarted.json("/v1/vulnerability-findings?limit=5"), before);
}
