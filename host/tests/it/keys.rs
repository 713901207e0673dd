//! API keys grown up: when each was last used (noted at most once a
//! minute, off the request path), an expiry given as a lifetime on the
//! command line, and rotation without downtime (the old key keeps working
//! for `--key-rotation-overlap-hours`, then is refused).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use esr_contract::time::Timestamp;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Server, plugins_dir, wait_until};

/// The admin JSON of every key of the organization.
fn keys_of(server: &Server, organization: &str) -> Vec<Value> {
    let response = server.admin(Method::GET, &format!("/admin/v1/keys?organizationId={organization}")).send().unwrap();
    assert_eq!(response.status(), 200);
    let listed: Value = response.json().unwrap();
    listed["data"].as_array().unwrap().clone()
}

/// The admin JSON of the key itself (found by its prefix).
fn key_json(server: &Server, organization: &str, key: &str) -> Value {
    keys_of(server, organization)
        .into_iter()
        .find(|listed| key.starts_with(listed["prefix"].as_str().unwrap()))
        .expect("the key is listed")
}

/// A `GET` of the endpoints with this key; its status.
fn status_with(server: &Server, key: &str) -> u16 {
    server.client.get(server.url("/v1/endpoints?limit=1")).bearer_auth(key).send().unwrap().status().as_u16()
}

/// Seconds from now until the RFC 3339 time.
fn seconds_until(at: &Value) -> f64 {
    let at = Timestamp::parse(at.as_str().expect("a time")).expect("an RFC 3339 time");
    (at.0 - esr_system::clock::unix_now_nanos()) as f64 / 1e9
}

fn stdout(output: &std::process::Output) -> String {
    assert!(output.status.success(), "esr failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn last_used_at_is_noted_once_a_minute_and_expires_in_sets_an_expiry() {
    let server = Server::start(&plugins_dir());
    let (organization, key) = server.organization_with_key("last used", &["endpoints:read"]);
    assert_eq!(key_json(&server, &organization, &key)["last_used_at"], Value::Null, "not used yet");
    let list = stdout(&server.cli(&["keys", "list", "--organization", &organization]));
    assert!(list.contains("never used"), "{list}");

    // The first request notes the use, off the request path.
    assert_eq!(status_with(&server, &key), 200);
    let mut noted = Value::Null;
    wait_until(Duration::from_secs(10), "the key's use to be noted", || {
        noted = key_json(&server, &organization, &key)["last_used_at"].clone();
        !noted.is_null()
    });
    assert!((-60.0..=1.0).contains(&seconds_until(&noted)), "noted just now: {noted}");
    let list = stdout(&server.cli(&["keys", "list", "--organization", &organization]));
    assert!(list.contains(&format!("used {}", noted.as_str().unwrap())), "{list}");

    // Within the minute, further requests change nothing (times are in
    // whole seconds: a second note would show a later one).
    std::thread::sleep(Duration::from_millis(1_100));
    for _ in 0..3 {
        assert_eq!(status_with(&server, &key), 200);
    }
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(key_json(&server, &organization, &key)["last_used_at"], noted, "noted at most once a minute");

    // `--expires-in` becomes an expiry that far ahead.
    let created = stdout(&server.cli(&[
        "keys",
        "create",
        "--organization",
        &organization,
        "--name",
        "daily",
        "--expires-in",
        "1d",
    ]));
    let daily = key_json(&server, &organization, created.trim());
    assert_eq!(daily["name"], "daily");
    let ahead = seconds_until(&daily["expires_at"]);
    assert!((86_400.0 - 120.0..=86_400.0 + 5.0).contains(&ahead), "a day ahead: {}", daily["expires_at"]);
    assert_eq!(status_with(&server, created.trim()), 200);

    // `--expires-at` still works; the two together are refused.
    let created = stdout(&server.cli(&[
        "keys",
        "create",
        "--organization",
        &organization,
        "--name",
        "fixed",
        "--expires-at",
        "2100-01-01T00:00:00Z",
    ]));
    assert_eq!(key_json(&server, &organization, created.trim())["expires_at"], "2100-01-01T00:00:00Z");
    let both = server.cli(&[
        "keys",
        "create",
        "--organization",
        &organization,
        "--name",
        "both",
        "--expires-in",
        "1d",
        "--expires-at",
        "2100-01-01T00:00:00Z",
    ]);
    assert!(!both.status.success());
    let refused = String::from_utf8_lossy(&both.stderr);
    assert!(refused.contains("--expires-in") && refused.contains("--expires-at"), "{refused}");
    let bad = server.cli(&["keys", "create", "--organization", &organization, "--name", "bad", "--expires-in", "soon"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not like 90d"), "{}", String::from_utf8_lossy(&bad.stderr));
}

#[test]
fn a_rotated_key_works_beside_its_successor_for_a_day_by_default() {
    let server = Server::start(&plugins_dir());
    let organization = server.organization_ids[0].clone();
    let old_key = server.keys[0].clone();
    let old = key_json(&server, &organization, &old_key);
    let old_id = old["id"].as_str().unwrap().to_owned();

    let output = server.cli(&["keys", "rotate", &old_id]);
    let new_key = stdout(&output).trim().to_owned();
    assert!(new_key.starts_with("esr_") && new_key != old_key);
    let told = String::from_utf8_lossy(&output.stderr);
    assert!(told.contains(&old_id) && told.contains("keeps working until"), "{told}");

    // The successor: the same organization, name, scopes and expiry.
    let new = key_json(&server, &organization, &new_key);
    assert_ne!(new["id"], old["id"]);
    for member in ["organization_id", "name", "scopes", "expires_at"] {
        assert_eq!(new[member], old[member], "{member}");
    }
    assert_eq!(new["revoked_at"], Value::Null);

    // Both work; the old one for about a day more.
    assert_eq!(status_with(&server, &old_key), 200);
    assert_eq!(status_with(&server, &new_key), 200);
    let replaced = key_json(&server, &organization, &old_key);
    let ahead = seconds_until(&replaced["expires_at"]);
    assert!((86_400.0 - 120.0..=86_400.0 + 5.0).contains(&ahead), "a day ahead: {}", replaced["expires_at"]);
    assert_eq!(replaced["revoked_at"], Value::Null);

    // Over HTTP: 201 with the new key and the old one's end.
    let response =
        server.admin(Method::POST, &format!("/admin/v1/keys/{}/rotate", new["id"].as_str().unwrap())).send().unwrap();
    assert_eq!(response.status(), 201);
    let rotated: Value = response.json().unwrap();
    assert!(rotated["api_key"].as_str().unwrap().starts_with("esr_"));
    assert_eq!(rotated["rotated_key_id"], new["id"]);
    assert_eq!(rotated["name"], old["name"]);
    assert_eq!(rotated["last_used_at"], Value::Null);
    let successor_ends = seconds_until(&rotated["rotated_key_expires_at"]);
    assert!((86_400.0 - 120.0..=86_400.0 + 5.0).contains(&successor_ends), "{rotated}");
    assert_eq!(key_json(&server, &organization, &new_key)["expires_at"], rotated["rotated_key_expires_at"]);

    // A revoked key, an expired one and an unknown one are not rotated.
    let revoked_id = rotated["id"].as_str().unwrap().to_owned();
    assert_eq!(server.admin(Method::DELETE, &format!("/admin/v1/keys/{revoked_id}")).send().unwrap().status(), 204);
    let refused = server.admin(Method::POST, &format!("/admin/v1/keys/{revoked_id}/rotate")).send().unwrap();
    assert_eq!(refused.status(), 409);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    let problem: Value = refused.json().unwrap();
    assert!(problem["type"].as_str().unwrap().ends_with("key-revoked"), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains(&revoked_id), "{problem}");

    let created = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": organization, "name": "brief", "scopes": ["endpoints:read"],
                      "expires_at": esr_system::clock::format_timestamp(esr_system::clock::unix_now() + 2)}))
        .send()
        .unwrap();
    assert_eq!(created.status(), 201);
    let brief: Value = created.json().unwrap();
    let brief_key = brief["api_key"].as_str().unwrap().to_owned();
    wait_until(Duration::from_secs(10), "the brief key to expire", || {
        std::thread::sleep(Duration::from_millis(200));
        status_with(&server, &brief_key) == 401
    });
    let refused =
        server.admin(Method::POST, &format!("/admin/v1/keys/{}/rotate", brief["id"].as_str().unwrap())).send().unwrap();
    assert_eq!(refused.status(), 409);
    let problem: Value = refused.json().unwrap();
    assert!(problem["type"].as_str().unwrap().ends_with("key-expired"), "{problem}");

    let unknown = uuid::Uuid::now_v7();
    let refused = server.admin(Method::POST, &format!("/admin/v1/keys/{unknown}/rotate")).send().unwrap();
    assert_eq!(refused.status(), 404);
    let failed = server.cli(&["keys", "rotate", &unknown.to_string()]);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains(&unknown.to_string()));
}

#[test]
fn after_the_overlap_the_rotated_key_is_refused_and_its_successor_works() {
    // 0.001 h: 3.6 s, rounded up to whole seconds.
    let server = Server::start_with(&plugins_dir(), &["--key-rotation-overlap-hours", "0.001"]);
    let organization = server.organization_ids[0].clone();
    let old_key = server.keys[0].clone();
    let old_id = key_json(&server, &organization, &old_key)["id"].as_str().unwrap().to_owned();
    let response = server.admin(Method::POST, &format!("/admin/v1/keys/{old_id}/rotate")).send().unwrap();
    assert_eq!(response.status(), 201);
    let rotated: Value = response.json().unwrap();
    let new_key = rotated["api_key"].as_str().unwrap().to_owned();
    let ends = seconds_until(&rotated["rotated_key_expires_at"]);
    assert!((2.0..=5.0).contains(&ends), "the overlap's end: {rotated}");

    assert_eq!(status_with(&server, &old_key), 200, "the old key works during the overlap");
    assert_eq!(status_with(&server, &new_key), 200);
    wait_until(Duration::from_secs(30), "the old key to be refused", || {
        std::thread::sleep(Duration::from_millis(250));
        status_with(&server, &old_key) == 401
    });
    assert!(seconds_until(&rotated["rotated_key_expires_at"]) <= 0.0, "not before the overlap's end");
    assert_eq!(status_with(&server, &new_key), 200, "its successor works");

    // The flag takes only a positive number of hours.
    for refused in ["0", "-1", "nope"] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_esr"))
            .args(["serve".to_owned(), format!("--key-rotation-overlap-hours={refused}")])
            .output()
            .unwrap();
        assert!(!output.status.success());
        assert!(String::from_utf8_lossy(&output.stderr).contains("--key-rotation-overlap-hours"), "{refused}");
    }
}
