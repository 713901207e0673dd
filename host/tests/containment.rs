//! A misbehaving component fails only its own request: an endless loop
//! meets the deadline, a memory hog meets the cap, a panic is logged; the
//! next request, the other groups and health carry on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
    let (server, _dir) = serve_endpoints_with("panics.wasm", &[]);
    let problem = assert_contained(&server, &[500]);
    assert!(!problem.to_string().contains("panicked"), "internals never reach the client: {problem}");
    // The log line is written before the response; the drain thread copies it soon after.
    server.wait_for_log(30, |log| log.contains("panicked on purpose"));
    let log = server.log();
    assert!(log.contains(problem["request_id"].as_str().unwrap()), "tagged with the request id");
}
