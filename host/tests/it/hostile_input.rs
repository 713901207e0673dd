//! Hostile input never gets a 5xx: generated query strings, path ids,
//! cursors (random and tampered) and headers against the real server.
//! Every answer is a success or a 4xx problem+json, and the server stays
//! healthy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, plugins_dir};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::Value;

const COLLECTIONS: [&str; 4] = ["endpoints", "remediation-targets", "scopes", "vulnerability-findings"];
const PARAMETERS: [&str; 26] = [
    "limit",
    "offset",
    "cursor",
    "sort",
    "updatedAfter",
    "osFamily",
    "hasAgent",
    "hostname",
    "tag",
    "status",
    "q",
    "endpointId",
    "severity",
    "findingType",
    "cveId",
    "kev",
    "minCvss",
    "scanner",
    "remediationTargetId",
    "firstSeenAfter",
    "scopeId",
    "findingId",
    "targetType",
    "packageManager",
    "dueBefore",
    "platform",
];

/// Every byte percent-encoded, so the generated text reaches the server as is.
fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("%{byte:02X}")).collect()
}

/// Values that are often almost right: numbers at the edges, enum values
/// in odd cases, timestamps out of range, UUID look-alikes, and noise.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"-1".to_vec()),
        Just(b"0".to_vec()),
        Just(b"101".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        Just(b"NaN".to_vec()),
        Just(b"1e309".to_vec()),
        Just(b"CRITICAL".to_vec()),
        Just(b"critical,,high".to_vec()),
        Just(b"-created_at".to_vec()),
        Just(b"--hostname".to_vec()),
        Just(b"9999-12-31T23:59:60Z".to_vec()),
        Just(b"2026-02-30T00:00:00Z".to_vec()),
        Just(b"0190b0b0-0000-7000-8000-00000000000g".to_vec()),
        Just(b"{\"$ne\":null}".to_vec()),
        Just(b"' OR 1=1 --".to_vec()),
        Just("é\u{202e}\u{0}".as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64),
        "[a-z0-9:,_-]{0,40}".prop_map(String::into_bytes),
    ]
}

#[derive(Debug, Clone)]
struct Probe {
    path: String,
    authorization: Option<Vec<u8>>,
    headers: Vec<(&'static str, Vec<u8>)>,
}

fn probe(key: String, cursor: String) -> impl Strategy<Value = Probe> {
    let collection = proptest::sample::select(COLLECTIONS.to_vec());
    let id = prop_oneof![
        Just(None),
        proptest::collection::vec(any::<u8>(), 0..48).prop_map(Some),
        Just(Some(b"00000000-0000-0000-0000-000000000000".to_vec())),
        Just(Some(b"..%2f..%2fetc%2fpasswd".to_vec())),
    ];
    let name = prop_oneof![
        proptest::sample::select(PARAMETERS.to_vec()).prop_map(|name| name.as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..16),
    ];
    let query = proptest::collection::vec((name, value()), 0..6);
    let flip = (any::<usize>(), any::<u8>());
    let use_cursor = any::<bool>();
    let authorization = prop_oneof![
        3 => Just(Some(format!("Bearer {key}").into_bytes())),
        1 => Just(None),
        1 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(Some),
        1 => "Bearer esr_[A-Za-z0-9]{0,40}".prop_map(|text| Some(text.into_bytes())),
    ];
    let headers = proptest::collection::vec(
        (
            proptest::sample::select(vec!["if-none-match", "x-request-id", "accept", "range", "content-type"]),
            proptest::collection::vec(any::<u8>(), 0..60),
        ),
        0..3,
    );
    (collection, id, query, use_cursor, flip, authorization, headers).prop_map(
        move |(collection, id, query, use_cursor, (position, bit), authorization, headers)| {
            let mut path = format!("/v1/{collection}");
            if let Some(id) = id {
                path.push('/');
                path.push_str(&encode(&id));
            }
            let mut pairs: Vec<String> =
                query.iter().map(|(name, value)| format!("{}={}", encode(name), encode(value))).collect();
            if use_cursor {
                // A real cursor with one byte changed, or replayed elsewhere.
                let mut tampered = cursor.clone().into_bytes();
                if !tampered.is_empty() && bit != 0 {
                    let index = position % tampered.len();
                    tampered[index] ^= bit;
                }
                pairs.push(format!("cursor={}", encode(&tampered)));
            }
            if !pairs.is_empty() {
                path.push('?');
                path.push_str(&pairs.join("&"));
            }
            Probe { path, authorization, headers }
        },
    )
}

#[test]
fn no_generated_request_gets_a_server_error() {
    let server = Server::start(&plugins_dir());
    let first: Value = server.json("/v1/vulnerability-findings?limit=1&severity=high");
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let config = Config { cases: 1000, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let client = &server.client;
    let outcome = runner.run(&probe(server.keys[0].clone(), cursor), |probe| {
        let mut request = client.get(server.url(&probe.path));
        if let Some(Ok(value)) = probe.authorization.as_deref().map(reqwest::header::HeaderValue::from_bytes) {
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        for (name, value) in &probe.headers {
            if let Ok(value) = reqwest::header::HeaderValue::from_bytes(value) {
                request = request.header(*name, value);
            }
        }
        let response = request.send().map_err(|error| TestCaseError::fail(format!("{error}")))?;
        let status = response.status();
        let content_type = response.headers().get("content-type").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
        prop_assert!(
            status.as_u16() < 500,
            "{} answered {status}: {}",
            probe.path,
            response.text().unwrap_or_default()
        );
        if status.is_client_error() {
            prop_assert_eq!(content_type, b"application/problem+json".to_vec(), "{} {}", probe.path, status);
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    let health = server.client.get(server.url("/v1/health")).send().unwrap();
    assert_eq!(health.status(), 200, "the server stays healthy");
}
