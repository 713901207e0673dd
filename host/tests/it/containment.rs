//! A misbehaving component fails only its own request: an endless loop or
//! a wait in WASI meets the deadline, a memory hog meets the cap, a panic
//! is logged, a log flood is bounded and escaped; the next request, the
//! other groups and other organizations carry on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Server, plugins_dir_with, test_plugins_dir};
use serde_json::Value;

/// Starts the demo with `component` serving the endpoints group.
fn serve_endpoints_with(component: &str, extra: &[&str]) -> (Server, tempfile::TempDir) {
    let source = test_plugins_dir().join(component);
    let dir = plugins_dir_with(&["endpoints.wasm"], &[(component, &source)]);
    (Server::start_with(dir.path(), extra), dir)
}

/// The misbehaving call fails cleanly and nothing else is disturbed.
fn assert_contained(server: &Server, statuses: &[u16]) -> Value {
    let started = Instant::now();
    let response = server.get("/v1/endpoints");
    let elapsed = started.elapsed();
    assert!(statuses.contains(&response.status().as_u16()), "status {}", response.status());
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    // Not a performance bound: a generous ceiling so a hang fails the test.
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    let problem: Value = response.json().unwrap();
    assert!(problem["error"].is_string() && problem["request_id"].is_string());

    // The same component serves its next request from a fresh instance.
    let scopes = server.json("/v1/scopes?limit=1");
    assert_eq!(scopes["data"].as_array().unwrap().len(), 1, "other groups keep answering");
    let finding = server.json("/v1/vulnerability-findings?limit=1");
    let endpoint_id = finding["data"][0]["endpoint_id"].as_str().unwrap().to_owned();
    let endpoint = server.json(&format!("/v1/endpoints/{endpoint_id}"));
    assert_eq!(endpoint["id"], endpoint_id.as_str());
    let health = server.client.get(server.url("/v1/health")).send().unwrap();
    assert_eq!(health.status(), 200);
    problem
}

#[test]
fn an_endless_loop_meets_the_deadline() {
    let (server, _dir) = serve_endpoints_with("endless-loop.wasm", &["--plugin-deadline-ms", "300"]);
    let problem = assert_contained(&server, &[503]);
    assert_eq!(problem["status"], 503);
    // Twice: a trapped instance is never reused.
    assert_eq!(server.get("/v1/endpoints").status(), 503);
}

#[test]
fn an_endless_loop_meets_the_default_deadline() {
    let (server, _dir) = serve_endpoints_with("endless-loop.wasm", &[]);
    let started = Instant::now();
    let response = server.get("/v1/endpoints");
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_memory_hog_meets_the_cap() {
    let (server, _dir) = serve_endpoints_with("memory-hog.wasm", &["--plugin-memory-mib", "16"]);
    assert_contained(&server, &[500]);
}

#[test]
fn a_panic_is_a_500_with_its_message_in_the_log() {
    // Built for wasm32-wasip2 the message reaches the host on stderr; built
    // as the read components are, without WASI, through the log import.
    for component in ["panics.wasm", "panics-without-wasi.wasm"] {
        let (server, _dir) = serve_endpoints_with(component, &[]);
        let problem = assert_contained(&server, &[500]);
        assert!(!problem.to_string().contains("panicked"), "{component}: internals never reach the client: {problem}");
        // The log line is written before the response; the drain thread copies it soon after.
        server.wait_for_log(30, |log| log.contains("panicked on purpose"));
        let log = server.log();
        assert!(log.contains(problem["request_id"].as_str().unwrap()), "{component}: tagged with the request id");
    }
}

#[test]
fn a_component_blocked_in_a_wasi_wait_meets_the_deadline() {
    let (server, _dir) = serve_endpoints_with("sleeper.wasm", &["--plugin-deadline-ms", "500"]);
    // The guest waits a minute each way: std's sleep, a poll loop on a
    // clock, and `pollable.block`.
    for wait in ["sleep", "poll", "block"] {
        let started = Instant::now();
        let response = server.get(&format!("/v1/endpoints?wait={wait}"));
        let elapsed = started.elapsed();
        assert_eq!(response.status(), 503, "wait={wait}");
        assert!(response.headers().contains_key("retry-after"), "wait={wait}");
        // A 0.5 s deadline against a 60 s wait: a generous margin for a
        // loaded machine, far below the wait.
        assert!(elapsed < Duration::from_secs(5), "wait={wait} answered after {elapsed:?}");
    }
    assert_contained(&server, &[503]);
}

#[test]
fn sleeping_components_leave_other_organizations_fast() {
    let (server, _dir) = serve_endpoints_with("sleeper.wasm", &["--plugin-deadline-ms", "1000"]);
    let sleepers = 64;
    let answered = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let slowest = std::thread::scope(|scope| {
        for _ in 0..sleepers {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let status = server.get_as(0, "/v1/endpoints").status();
                    assert_eq!(status, 503, "a sleeping call ends in 503");
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Globex reads its scopes until Acme has had twice as many answers
        // as it has clients: the sleeping calls were in flight throughout.
        let mut slowest = Duration::ZERO;
        let bound = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::Relaxed) < 2 * sleepers && Instant::now() < bound {
            let started = Instant::now();
            let response = server.get_as(1, "/v1/scopes?limit=10");
            slowest = slowest.max(started.elapsed());
            assert_eq!(response.status(), 200, "Globex is served while Acme's calls sleep");
        }
        stop.store(true, Ordering::Relaxed);
        slowest
    });
    assert!(answered.into_inner() >= 2 * sleepers, "the sleeping calls never ended");
    // Not a benchmark: a list of scopes takes milliseconds; a request that
    // queued behind sleeping calls would take a deadline or more.
    assert!(slowest < Duration::from_millis(750), "Globex's slowest request took {slowest:?}");
}

#[test]
fn component_log_messages_are_bounded_and_escaped() {
    let (server, _dir) = serve_endpoints_with("log-flood.wasm", &[]);
    let response = server.get("/v1/endpoints");
    assert_eq!(response.status(), 200);
    let request_id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    server.wait_for_log(30, |log| log.contains("messages dropped"));
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|line| line.contains(&request_id)).collect();
    // At most 100 messages per call, then one line saying how many were dropped.
    assert!(lines.len() <= 101, "{} lines of the call's log", lines.len());
    assert!(lines.iter().any(|line| line.contains("401 messages dropped")), "the drop is counted: {lines:?}");
    // 4 KiB per message, plus the marker and the line's own fields.
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 5 * 1024, "a log line of {longest} bytes");
    assert!(lines.iter().any(|line| line.contains("[truncated")), "truncation is marked");
    // The forged line stays inside the component's own line, escaped.
    for line in log.lines().filter(|line| line.contains("FORGED-LINE")) {
        assert!(line.contains(r"innocent\nFORGED-LINE"), "the newline is escaped: {line:?}");
        assert!(line.contains(&request_id), "on the component's line: {line:?}");
    }
    assert!(log.contains(r"innocent\nFORGED-LINE"), "the forging message is logged, escaped");
    for raw in ['\u{202e}', '\u{7f}', '\u{85}'] {
        assert!(!log.contains(raw), "{raw:?} reaches the log unescaped");
    }
    assert!(!log.contains("\u{1b}[31mred"), "an ANSI escape reaches the log unescaped");
    assert!(log.contains(r"\u{202e}rtl"), "the bidi override is written as an escape");
}
