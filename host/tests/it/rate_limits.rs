//! Rate limits over real HTTP: per key, a lower one for the agent
//! configuration, per address without a valid key (and before the lookup
//! of a key not known valid), health per address in buckets of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::IpAddr;
use std::time::Duration;

use common::{Server, plugins_dir, wait_until};
use reqwest::blocking::Response;
use serde_json::Value;

fn header(response: &Response, name: &str) -> String {
    response.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

#[test]
fn each_key_has_its_own_bucket_and_every_response_says_where_it_stands() {
    let server = Server::start_with(
        &plugins_dir(),
        &[
            "--rate-limit-per-minute=60",
            "--rate-limit-burst=5",
            "--agent-config-rate-limit-per-minute=6",
            "--agent-config-rate-limit-burst=2",
            "--address-rate-limit-per-minute=60",
            "--address-rate-limit-burst=3",
        ],
    );
    // Acme's burst: five answers counting down, then 429.
    for remaining in (0..5).rev() {
        let path = if remaining == 2 { "/v1/scopes/00000000-0000-7000-8000-000000000000" } else { "/v1/scopes" };
        let response = server.get(path);
        assert!(response.status() == 200 || response.status() == 404, "{}", response.status());
        assert_eq!(header(&response, "ratelimit-policy"), "\"per-key\";q=60;w=60");
        assert_eq!(header(&response, "x-ratelimit-limit"), "60");
        assert_eq!(header(&response, "x-ratelimit-remaining"), remaining.to_string(), "errors carry the fields too");
        assert!(header(&response, "ratelimit").starts_with(&format!("\"per-key\";r={remaining};t=")));
        assert!(!header(&response, "x-ratelimit-reset").is_empty());
    }
    let limited = server.get("/v1/scopes");
    assert_eq!(limited.status(), 429);
    assert_eq!(header(&limited, "content-type"), "application/problem+json");
    assert!(header(&limited, "retry-after").parse::<u64>().unwrap() >= 1);
    assert_eq!(header(&limited, "x-ratelimit-remaining"), "0");
    let problem: Value = limited.json().unwrap();
    assert_eq!(problem["type"], "/v1/problems/rate-limited");
    assert_eq!(problem["status"], 429);

    // Globex is not throttled by Acme's burst, and the agent configuration
    // has its own, lower bucket.
    assert_eq!(server.get_as(1, "/v1/scopes").status(), 200);
    for _ in 0..2 {
        let config = server.get_as(1, "/v1/agent/config?platform=linux");
        assert_eq!(config.status(), 200);
        assert_eq!(header(&config, "ratelimit-policy"), "\"agent-config\";q=6;w=60");
    }
    let config = server.get_as(1, "/v1/agent/config?platform=linux");
    assert_eq!(config.status(), 429);
    assert_eq!(server.get_as(1, "/v1/scopes").status(), 200, "reads keep their own bucket");

    // Health has a bucket of its own per address, with the address's quota.
    let other_address =
        |last: u8| reqwest::blocking::Client::builder().local_address(IpAddr::from([127, 0, 0, last])).build().unwrap();
    let monitor = other_address(2);
    for remaining in (0..3).rev() {
        let health = monitor.get(server.url("/v1/health")).send().unwrap();
        assert_eq!(health.status(), 200);
        assert_eq!(header(&health, "ratelimit-policy"), "\"health\";q=60;w=60");
        assert_eq!(header(&health, "x-ratelimit-remaining"), remaining.to_string());
    }
    let health = monitor.get(server.url("/v1/health")).send().unwrap();
    assert_eq!(health.status(), 429);
    assert_eq!(header(&health, "content-type"), "application/problem+json");

    // Without a valid key, the address's coarse bucket (the health bucket
    // of the same address aside); a well-formed key not known valid is
    // charged to it before it is looked up, so a flood of random keys
    // costs no lookups past the address's burst.
    let anonymous = other_address(2);
    let random_key = esr_auth::keys::generate_key();
    for remaining in (0..3).rev() {
        let key = if remaining == 1 { random_key.as_str() } else { "esr_nope" };
        let response = anonymous.get(server.url("/v1/endpoints")).bearer_auth(key).send().unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(header(&response, "ratelimit-policy"), "\"per-address\";q=60;w=60");
        assert_eq!(header(&response, "x-ratelimit-remaining"), remaining.to_string());
    }
    for key in [None, Some(esr_auth::keys::generate_key()), Some(server.keys[0].clone())] {
        let mut request = anonymous.get(server.url("/v1/endpoints"));
        if let Some(key) = &key {
            request = request.bearer_auth(key);
        }
        let response = request.send().unwrap();
        // Acme's key is known valid on this host: its own bucket, not the address's.
        let expected = if key.as_ref() == Some(&server.keys[0]) { [200, 429] } else { [429, 429] };
        assert!(expected.contains(&response.status().as_u16()), "{key:?}: {}", response.status());
        if key.as_ref() != Some(&server.keys[0]) {
            assert_eq!(header(&response, "ratelimit-policy"), "\"per-address\";q=60;w=60");
        } else {
            assert_eq!(header(&response, "ratelimit-policy"), "\"per-key\";q=60;w=60");
        }
    }

    // Refused requests cost nothing; about a second later Acme has one again.
    wait_until(Duration::from_secs(30), "Acme's bucket to refill", || server.get("/v1/scopes").status() == 200);
}
