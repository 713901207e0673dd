//! Request limits over real HTTP: the request target and headers are
//! bounded (414/431), load beyond the concurrency limit is shed at once
//! (503), and connections that send nothing are closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir, wait_until};
use serde_json::Value;

#[test]
fn oversized_targets_and_headers_get_clear_problems() {
    let server = Server::start(&plugins_dir());
    let long = server.get(&format!("/v1/endpoints?hostname={}", "a".repeat(9 * 1024)));
    assert_eq!(long.status(), 414);
    assert_eq!(long.headers()["content-type"], "application/problem+json");
    let problem: Value = long.json().unwrap();
    assert_eq!(problem["type"], "/v1/problems/uri-too-long");

    let big = server
        .client
        .get(server.url("/v1/endpoints"))
        .bearer_auth(&server.keys[0])
        .header("x-padding", "b".repeat(70 * 1024))
        .send()
        .unwrap();
    assert_eq!(big.status(), 431);
    assert_eq!(big.headers()["content-type"], "application/problem+json");

    // Just under the limit, the parameter's own bound answers.
    let under = server.get(&format!("/v1/endpoints?hostname={}", "a".repeat(7 * 1024)));
    assert_eq!(under.status(), 400);
    assert_eq!(
        under.json::<Value>().unwrap()["invalid_params"][0],
        serde_json::json!({"name": "hostname", "reason": "longer than 255 characters"})
    );
}

const RATE_LIMIT_FIELDS: [&str; 5] =
    ["ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"];

#[test]
fn refusals_before_a_handler_carry_the_rate_limit_fields_and_count_against_the_address() {
    // Oversized requests are charged to the client address before any key
    // is looked up; 406 comes after the key's own limit.
    let server =
        Server::start_with(&plugins_dir(), &["--address-rate-limit-per-minute=1", "--address-rate-limit-burst=3"]);
    let oversized = |key: Option<&str>| {
        let mut request = server.client.get(server.url(&format!("/v1/scopes?q={}", "a".repeat(9 * 1024))));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().unwrap()
    };
    let first = oversized(Some(&server.keys[0]));
    assert_eq!(first.status(), 414);
    for field in RATE_LIMIT_FIELDS {
        assert!(first.headers().contains_key(field), "414 without {field}: {:?}", first.headers());
    }
    assert!(first.headers()["ratelimit-policy"].to_str().unwrap().starts_with("\"per-address\""));

    let unacceptable = server
        .client
        .get(server.url("/v1/scopes"))
        .bearer_auth(&server.keys[0])
        .header("accept", "text/html")
        .send()
        .unwrap();
    assert_eq!(unacceptable.status(), 406);
    for field in RATE_LIMIT_FIELDS {
        assert!(unacceptable.headers().contains_key(field), "406 without {field}: {:?}", unacceptable.headers());
    }
    assert!(unacceptable.headers()["ratelimit-policy"].to_str().unwrap().starts_with("\"per-key\""));

    // The address's burst is spent by oversized requests alone.
    let statuses: Vec<u16> = (0..6).map(|_| oversized(None).status().as_u16()).collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    let refused = oversized(None);
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
}

#[test]
fn load_beyond_the_concurrency_limit_is_shed_at_once() {
    // The endpoints group loops until its deadline, so one request holds the only permit.
    let source = test_plugins_dir().join("endless-loop.wasm");
    let dir = plugins_dir_with(&["endpoints.wasm"], &[("endless-loop.wasm", &source)]);
    let server = Server::start_with(dir.path(), &["--max-concurrent-requests=1", "--plugin-deadline-ms=3000"]);
    let (slow, shed) = server.hold_the_only_permit("/v1/endpoints");
    assert!(shed.took < Duration::from_secs(1), "shed at once, not queued: {:?}", shed.took);
    assert_eq!(shed.retry_after.as_deref(), Some("1"));
    assert_eq!(shed.content_type, "application/problem+json");
    let slow = slow.join().unwrap().unwrap();
    assert_eq!(slow.status, 503, "the looping component meets its deadline");
    assert!(!slow.is_shed(), "{}", slow.body);
    assert!(slow.took > Duration::from_secs(2), "the slow request held the permit for {:?}", slow.took);
    assert_eq!(server.get("/v1/scopes").status(), 200, "served again once the permit is free");
}

#[test]
fn connections_that_send_nothing_are_closed() {
    let server = Server::start_with(&plugins_dir(), &["--header-read-timeout-secs=1"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    for opening in ["", "GET /v1/health HTTP/1.1\r\nHost: x\r\n"] {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(opening.as_bytes()).unwrap();
        let started = Instant::now();
        let mut buffer = [0u8; 1024];
        // The server closes the connection (EOF, perhaps after a 408) well before our 10 s.
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        assert!(started.elapsed() < Duration::from_secs(8), "{opening:?} kept open {:?}", started.elapsed());
    }
    assert_eq!(server.client.get(server.url("/v1/health")).send().unwrap().status(), 200);
}

/// One raw request on a connection of its own; what the server answered
/// before closing it (or within a second).
fn raw(server: &Server, request: &[u8]) -> String {
    let address = server.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).to_lowercase()
}

fn with_header_fields(fields: usize) -> Vec<u8> {
    let mut request = String::from("GET /v1/scopes HTTP/1.1\r\nHost: esr\r\nConnection: close\r\n");
    for field in 0..fields {
        request.push_str(&format!("X-Pad-{field}: a\r\n"));
    }
    request.push_str("\r\n");
    request.into_bytes()
}

#[test]
fn requests_the_parser_refuses_are_problems_where_they_can_be_and_are_counted() {
    let server =
        Server::start_with(&plugins_dir(), &["--address-rate-limit-per-minute=1", "--address-rate-limit-burst=4"]);
    // Over the API's 100 fields, under what the parser reads: a problem.
    let many = raw(&server, &with_header_fields(150));
    assert!(many.starts_with("http/1.1 431"), "{many}");
    assert!(many.contains("content-type: application/problem+json"), "{many}");
    assert!(many.contains("152 header fields; at most 100"), "{many}");
    // Past what the parser reads, or not HTTP: the parser's bare answer,
    // counted and charged to the address all the same.
    let too_many = raw(&server, &with_header_fields(600));
    assert!(too_many.starts_with("http/1.1 431"), "{too_many}");
    let conflicting =
        raw(&server, b"GET /v1/health HTTP/1.1\r\nHost: esr\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
    assert!(conflicting.starts_with("http/1.1 400"), "{conflicting}");
    let garbage = raw(&server, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n");
    assert!(garbage.starts_with("http/1.1 400"), "{garbage}");

    // The connection's task counts the refusal after the answer is written,
    // so the count may land a moment after the client has read it.
    let expected = [
        "esr_http_malformed_requests_total{listener=\"public\",kind=\"too-large\"} 1",
        "esr_http_malformed_requests_total{listener=\"public\",kind=\"framing\"} 2",
    ];
    wait_until(Duration::from_secs(10), "the refusals to be counted", || {
        let metrics = server.admin(reqwest::Method::GET, "/metrics").send().unwrap().text().unwrap();
        expected.iter().all(|line| metrics.contains(line))
    });
    // Four refusals spent the address's burst of four.
    let refused = server.client.get(server.url("/v1/scopes")).send().unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers()["ratelimit-policy"].to_str().unwrap().starts_with("\"per-address\""));
}
