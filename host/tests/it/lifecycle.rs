//! Start-up and shutdown: SIGTERM stops the server cleanly (exit 0, store
//! flushed), the data directory opens again with the same data, and a
//! second server on a directory in use gets a clear message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{Server, plugins_dir, plugins_dir_with, spawn, test_plugins_dir};

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
    let status = wait_for_exit(&mut server);
    assert!(status.success(), "exit status {status}");
    assert!(server.log().contains("stopped"), "{}", server.log());

    // The same directory, a new process: nothing re-seeded, nothing lost.
    let keys_before = std::fs::read(server.data_dir().join("demo-keys.json")).unwrap();
    let restarted = Server::start_on(&plugins_dir(), server.data_dir());
    assert_eq!(std::fs::read(server.data_dir().join("demo-keys.json")).unwrap(), keys_before);
    assert_eq!(restarted.json("/v1/vulnerability-findings?limit=5"), before);
}

fn wait_for_exit(server: &mut Server) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = server.try_wait() {
            return status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_request_in_flight_at_shutdown_gets_its_answer() {
    // The endpoints component loops until its 3 s deadline: a request that is still running at SIGTERM.
    let source = test_plugins_dir().join("endless-loop.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("endless-loop.wasm", &source)]);
    let mut server = Server::start_with(dir.path(), &["--plugin-deadline-ms=3000", "--max-concurrent-requests=1"]);
    // In flight for sure: it holds the only permit.
    let (in_flight, _) = server.hold_the_only_permit("/v1/endpoints");
    server.signal("TERM");
    let answer = in_flight.join().unwrap().expect("an answer, not a dropped connection");
    assert_eq!(answer.status, 503, "the looping call met its deadline and was answered");
    assert!(!answer.is_shed(), "{}", answer.body);
    assert_eq!(answer.content_type, "application/problem+json");
    let status = wait_for_exit(&mut server);
    assert!(status.success(), "exit status {status}");
    let log = server.log();
    assert!(log.contains("letting requests in flight finish") && log.contains("stopped"), "{log}");
    // New connections are refused once it has stopped.
    assert!(reqwest::blocking::Client::new().get(server.url("/v1/health")).send().is_err());
}
