//! What operators see: one structured log line per request (route
//! template, status, latency, organization, request id; never a key) and
//! Prometheus metrics on the admin listener.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};

#[test]
fn every_request_is_logged_once_as_json_and_counted() {
    let server = Server::start_with(&plugins_dir(), &["ESR_LOG=info", "--log-format=json"]);
    let listed = server.get("/v1/endpoints?limit=2");
    assert_eq!(listed.status(), 200);
    let request_id = listed.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(server.get("/v1/scopes/01900000-0000-7000-8000-000000000000").status(), 404);
    assert_eq!(server.client.get(server.url("/v1/endpoints")).send().unwrap().status(), 401);

    // Metrics need the admin token.
    let anonymous = server.client.get(format!("{}/metrics", server.admin_base)).send().unwrap();
    assert_eq!(anonymous.status(), 401);
    let metrics = server.admin(Method::GET, "/metrics").send().unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics.headers()["content-type"].to_str().unwrap().starts_with("application/openmetrics-text; version=1.0.0")
    );
    let text = metrics.text().unwrap();
    for expected in [
        "esr_http_requests_total{route=\"/v1/{collection}\",status=\"200\"} 1",
        "esr_http_requests_total{route=\"/v1/{collection}/{id}\",status=\"404\"} 1",
        "esr_http_requests_total{route=\"/v1/{collection}\",status=\"401\"} 1",
        "esr_http_request_duration_seconds_count{route=\"/v1/{collection}\"} 2",
        "esr_component_call_duration_seconds_count{group=\"endpoints\"} 1",
        "esr_shed_requests_total 0",
        "esr_rate_limited_total{policy=\"per-key\"} 0",
        "esr_component_call_failures_total{group=\"scopes\",kind=\"timeout\"} 0",
        "esr_component_call_failures_total{group=\"agent\",kind=\"trap\"} 0",
        "esr_store_size_bytes ",
        "esr_component_idle_slots ",
        "esr_component_idle_slot_resident_bytes ",
        "# EOF",
    ] {
        assert!(text.contains(expected), "{expected} missing from\n{text}");
    }

    // One JSON line per request, with what an operator needs.
    server.wait_for_log(10, |log| log.contains(&request_id));
    let lines: Vec<Value> = server.log().lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let for_request: Vec<&Value> = lines
        .iter()
        .filter(|line| line["fields"]["request_id"] == request_id.as_str() && line["fields"]["message"] == "request")
        .collect();
    assert_eq!(for_request.len(), 1, "{lines:?}");
    let fields = &for_request[0]["fields"];
    assert_eq!(fields["route"], "/v1/{collection}");
    assert_eq!(fields["method"], "GET");
    assert_eq!(fields["status"], 200);
    assert_eq!(fields["organization_id"], server.organization_ids[0].as_str());
    assert!(fields["micros"].as_u64().is_some());
    assert!(!server.log().contains(&server.keys[0]), "never a key");
}

/// The `request` log lines (JSON) for the request with this id, once
/// there is one (other lines of the request, such as a component's
/// failure, are written before it).
fn request_lines(server: &Server, request_id: &str) -> Vec<Value> {
    let lines = |log: &str| -> Vec<Value> {
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["fields"]["request_id"] == request_id && line["fields"]["message"] == "request")
            .collect()
    };
    server.wait_for_log(30, |log| !lines(log).is_empty());
    lines(&server.log())
}

#[test]
fn failed_requests_are_logged_with_their_route_and_organization() {
    // The endpoints component panics: every endpoints read is a 500.
    let source = test_plugins_dir().join("panics.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("panics.wasm", &source)]);
    let server = Server::start_with(dir.path(), &["ESR_LOG=info", "--log-format=json"]);
    let acme = server.organization_ids[0].as_str();
    let cases = [
        ("/v1/endpoints", 500, "/v1/{collection}", acme),
        ("/v1/scopes/01900000-0000-7000-8000-000000000000", 404, "/v1/{collection}/{id}", acme),
        ("/v1/nowhere/at/all", 404, "unmatched", acme),
    ];
    for (number, (path, status, route, organization)) in cases.into_iter().enumerate() {
        let request_id = format!("failed-request-{number}");
        let response = server
            .client
            .get(server.url(path))
            .bearer_auth(&server.keys[0])
            .header("x-request-id", &request_id)
            .send()
            .unwrap();
        assert_eq!(response.status(), status, "{path}");
        let lines = request_lines(&server, &request_id);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let fields = &lines[0]["fields"];
        assert_eq!(fields["status"], status, "{path}");
        assert_eq!(fields["route"], route, "{path}: {fields}");
        assert_eq!(fields["organization_id"], organization, "{path}: {fields}");
    }
    // Without a valid key there is no organization to name.
    let response = server.client.get(server.url("/v1/scopes")).header("x-request-id", "anonymous").send().unwrap();
    assert_eq!(response.status(), 401);
    let fields = &request_lines(&server, "anonymous")[0]["fields"];
    assert_eq!((&fields["route"], &fields["organization_id"]), (&json!("/v1/{collection}"), &json!("-")));
}

#[test]
fn a_log_that_is_not_a_terminal_has_no_colour_codes() {
    let server = Server::start_with(&plugins_dir(), &["ESR_LOG=info"]);
    assert_eq!(server.get("/v1/scopes").status(), 200);
    assert_eq!(server.get("/v1/scopes/01900000-0000-7000-8000-000000000000").status(), 404);
    // The 404's line names its path (in either mode) and is written after the 200's.
    server.wait_for_log(30, |log| log.contains("/v1/scopes/01900000-0000-7000-8000-000000000000"));
    let log = server.log();
    assert!(log.contains("INFO"), "the text log is on: {log}");
    assert!(!log.contains('\u{1b}'), "ANSI escape codes in a piped log: {log:?}");
}
