//! Request limits over real HTTP: the request target and headers are
//! bounded (414/431), load beyond the concurrency limit is shed at once
//! (503), and connections that send nothing are closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir};
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

    // Just under the limit, the component judges the parameter itself.
    let under = server.get(&format!("/v1/endpoints?hostname={}", "a".repeat(7 * 1024)));
    assert_eq!(under.status(), 400);
    assert_eq!(under.json::<Value>().unwrap()["invalid_params"][0]["name"], "hostname");
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
