//! The audit trail on the real server: every authenticated request (API
//! key or access token), refused authentication and admin action is an
//! entry in its organization's trail, read on the admin listener (paged,
//! filtered by principal) and exported as NDJSON by `esr audit`; no entry
//! holds a secret, and one organization's trail holds none of another's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Server, plugins_dir, wait_until};

/// Every entry of the organization's trail, walking `next_cursor`.
fn trail(server: &Server, organization: &str, extra: &str) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut after = String::new();
    loop {
        let path = format!("/admin/v1/organizations/{organization}/audit?limit=2{extra}{after}");
        let response = server.admin(Method::GET, &path).send().unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let page: Value = response.json().unwrap();
        let data = page["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        entries.extend(data.iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return entries,
        }
    }
}

#[test]
fn every_authenticated_request_refusal_and_admin_action_is_in_its_organization_s_trail() {
    let server = Server::start(&plugins_dir());
    let (acme, globex) = (server.organization_ids[0].clone(), server.organization_ids[1].clone());
    let key = server.keys[0].clone();

    // Reads with the demo key: a list of 3, an item, a 404.
    let page: Value = server.json("/v1/endpoints?limit=3&sort=hostname");
    let endpoint = page["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(server.get(&format!("/v1/endpoints/{endpoint}")).status(), 200);
    assert_eq!(server.get("/v1/endpoints/01900000-0000-7000-8000-000000000000").status(), 404);

    // An admin action that names the organization in its body, then a
    // token read, a refused secret, and Globex's own read.
    let client: Value = server
        .admin(Method::POST, "/admin/v1/clients")
        .json(&json!({"organization_id": acme, "name": "SOAR", "scopes": ["findings:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let client_id = client["client_id"].as_str().unwrap().to_owned();
    let secret = client["client_secret"].as_str().unwrap().to_owned();
    let issued: Value = server
        .client
        .post(server.url("/oauth2/token"))
        .basic_auth(&client_id, Some(&secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap()
        .json()
        .unwrap();
    let token = issued["access_token"].as_str().unwrap().to_owned();
    let by_token =
        server.client.get(server.url("/v1/vulnerability-findings?limit=2")).bearer_auth(&token).send().unwrap();
    assert_eq!(by_token.status(), 200);
    let wrong = server
        .client
        .post(server.url("/oauth2/token"))
        .basic_auth(&client_id, Some("esrcs_not-the-secret"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert_eq!(server.get_as(1, "/v1/scopes?limit=1").status(), 200);
    let feed = server.json("/v1/changes?limit=4");
    let events = feed["data"].as_array().unwrap().len();
    // Not authentication attempts: health and the document need no key.
    assert_eq!(server.client.get(server.url("/v1/health")).send().unwrap().status(), 200);
    // A credential sent in a query is kept out of the trail; the token
    // endpoint refuses one there (RFC 6749 §2.3.1).
    let leaked = "esr_at_leaked-into-the-url";
    let with_query = server.get(&format!("/v1/endpoints?limit=1&access_token={leaked}&client%5Fsecret={leaked}"));
    assert_eq!(with_query.status(), 400);
    let in_url = server
        .client
        .post(server.url(&format!("/oauth2/token?client_secret={secret}")))
        .basic_auth(&client_id, Some(&secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .unwrap();
    assert_eq!(in_url.status(), 400);
    assert_eq!(in_url.json::<Value>().unwrap()["error"], "invalid_request");
    // Credential actions on the admin listener are the organization's to see.
    let rotated = server.admin(Method::POST, &format!("/admin/v1/clients/{client_id}/rotate-secret")).send().unwrap();
    assert_eq!(rotated.status(), 200);
    let secret = rotated.json::<Value>().unwrap()["client_secret"].as_str().unwrap().to_owned();
    let made: Value = server
        .admin(Method::POST, "/admin/v1/keys")
        .json(&json!({"organization_id": acme, "name": "to revoke", "scopes": ["findings:read"]}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let made_id = made["id"].as_str().unwrap().to_owned();
    let revoked = server.admin(Method::DELETE, &format!("/admin/v1/keys/{made_id}")).send().unwrap();
    assert_eq!(revoked.status(), 204);

    // Entries are written in batches, within about a second.
    let mut entries = Vec::new();
    wait_until(Duration::from_secs(30), "the trail holds every request", || {
        entries = trail(&server, &acme, "");
        entries.iter().any(|entry| entry["route"] == "/admin/v1/keys/{key_id}")
    });
    let route_of = |entry: &Value| entry["route"].as_str().unwrap().to_owned();
    let find = |method: &str, route: &str, status: u64| -> Value {
        entries
            .iter()
            .find(|entry| entry["method"] == method && route_of(entry) == route && entry["status"] == status)
            .unwrap_or_else(|| panic!("no {method} {route} {status} in {entries:#?}"))
            .clone()
    };
    let list = find("GET", "/v1/{collection}", 200);
    assert_eq!(list["principal"]["kind"], "api_key");
    assert_eq!(list["organization_id"], acme.as_str());
    assert_eq!(list["query"], "limit=3&sort=hostname");
    assert_eq!(list["records"], 3);
    assert!(list["request_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(list["at"].as_str().is_some_and(|at| at.ends_with('Z')));
    let item = find("GET", "/v1/{collection}/{id}", 200);
    assert_eq!(item["records"], 1);
    assert_eq!(item["principal"]["id"], list["principal"]["id"], "the key's id, never the key");
    find("GET", "/v1/{collection}/{id}", 404);
    let admin = find("POST", "/admin/v1/clients", 201);
    assert_eq!(admin["principal"]["kind"], "admin");
    let token_entry = entries
        .iter()
        .find(|entry| entry["principal"]["kind"] == "client" && route_of(entry) == "/v1/{collection}")
        .unwrap_or_else(|| panic!("no token read in {entries:#?}"));
    assert_eq!(token_entry["principal"]["id"], client_id.as_str());
    assert_eq!(token_entry["principal"]["issuer"], server.base.as_str());
    assert_eq!(token_entry["records"], 2);
    let refused = find("POST", "/oauth2/token", 401);
    assert_eq!(refused["principal"]["id"], client_id.as_str(), "a refused secret is its client's to see");
    find("POST", "/oauth2/token", 200);
    let kept = find("GET", "/v1/{collection}", 400)["query"].as_str().unwrap().to_owned();
    assert_eq!(kept, "limit=1&access_token=[withheld]&client%5Fsecret=[withheld]");
    find("POST", "/admin/v1/clients/{client_id}/rotate-secret", 200);
    find("DELETE", "/admin/v1/keys/{key_id}", 204);
    assert_eq!(find("GET", "/v1/changes", 200)["records"], events);
    assert!(entries.iter().all(|entry| route_of(entry) != "/v1/health"));
    // Positions only grow.
    let positions: Vec<u64> =
        entries.iter().map(|entry| entry["position"].as_str().unwrap().parse().unwrap()).collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{positions:?}");

    // No secret in any entry; none of Acme's in Globex's trail.
    let text = serde_json::to_string(&entries).unwrap();
    for secret in [key.as_str(), token.as_str(), secret.as_str(), leaked, made["api_key"].as_str().unwrap()] {
        assert!(!text.contains(secret), "a secret in the trail");
    }
    let theirs = trail(&server, &globex, "");
    assert!(!theirs.is_empty());
    assert!(theirs.iter().all(|entry| entry["organization_id"] == globex.as_str()));

    // Filtered by principal.
    let only_client = trail(&server, &acme, &format!("&principal={client_id}"));
    assert!(!only_client.is_empty());
    assert!(only_client.iter().all(|entry| entry["principal"]["id"] == client_id.as_str()));

    // Bad parameters name themselves; an unknown organization is 404.
    let bad = server.admin(Method::GET, &format!("/admin/v1/organizations/{acme}/audit?limit=0")).send().unwrap();
    assert_eq!(bad.status(), 400);
    let unknown = "01900000-0000-7000-8000-000000000000";
    let missing = server.admin(Method::GET, &format!("/admin/v1/organizations/{unknown}/audit")).send().unwrap();
    assert_eq!(missing.status(), 404);

    // Exported as NDJSON from the command line: the same entries.
    let exported = server.cli(&["audit", "--organization", &acme, "--ndjson"]);
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    let lines: Vec<Value> =
        String::from_utf8(exported.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert!(lines.len() >= entries.len());
    assert_eq!(lines[..entries.len()], entries[..]);
    let table = server.cli(&["audit", "--organization", &acme, "--since", "2000-01-01T00:00:00Z"]);
    assert!(String::from_utf8(table.stdout).unwrap().contains("/v1/{collection}"));

    // Nothing was dropped, and every entry read is counted (a batch is
    // counted just after its write, so the count may trail what was read).
    assert_eq!(server.metric_sum("esr_audit_entries_dropped_total"), 0.0);
    wait_until(Duration::from_secs(30), "every entry read counted as recorded", || {
        server.metric_sum("esr_audit_entries_recorded_total") >= entries.len() as f64
    });
}
