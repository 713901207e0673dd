//! What operators see: one structured log line per request (route
//! template, status, latency, organization, request id; never a key) and
//! Prometheus metrics on the admin listener.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, plugins_dir};
use reqwest::Method;
use serde_json::Value;

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
    assert!(metrics.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
    let text = metrics.text().unwrap();
    for expected in [
        "esr_http_requests_total{route=\"/v1/{collection}\",status=\"200\"} 1",
        "esr_http_requests_total{route=\"/v1/{collection}/{id}\",status=\"404\"} 1",
        "esr_http_requests_total{route=\"/v1/{collection}\",status=\"401\"} 1",
        "esr_http_request_duration_seconds_count{route=\"/v1/{collection}\"} 2",
        "esr_component_call_duration_seconds_count{group=\"endpoints\"} 1",
        "esr_shed_requests_total 0",
        "esr_store_size_bytes ",
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
