//! The change feed (`GET /v1/changes`) on the real server with the real
//! components: every import's creates and updates in commit order, each
//! record shaped as its item route shows it (by a replaced component too),
//! one event per record, `sequence` in list envelopes, paging by cursor
//! and by `after`, filters and scopes, cursors bound to the organization
//! and the collections, parameters checked; on sled and on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::postgres::TestDatabase;
use common::{Server, plugins_dir, plugins_dir_with, test_plugins_dir, xz_finding};
use reqwest::Method;
use serde_json::{Value, json};

fn import(server: &Server, organization: &str, collection: &str, lines: &[Value]) -> Vec<String> {
    let response = server.import_lines(organization, collection, lines);
    assert_eq!(response.status(), 200, "import refused: {}", response.text().unwrap_or_default());
    let summary: Value = response.json().unwrap();
    summary["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()).collect()
}

fn endpoint(hostname: &str) -> Value {
    json!({"hostname": hostname, "operating_system": {"name": "Debian 12", "family": "linux"}, "tags": ["feed"]})
}

fn get_with(server: &Server, key: &str, path: &str) -> reqwest::blocking::Response {
    server.client.get(server.url(path)).bearer_auth(key).send().unwrap()
}

fn json_with(server: &Server, key: &str, path: &str) -> Value {
    let response = get_with(server, key, path);
    assert_eq!(response.status(), 200, "GET {path}");
    response.json().unwrap()
}

/// Every event from `after` on, following `next_cursor`, then the answer's
/// `sequence` (where a client polls from next).
fn follow(server: &Server, key: &str, query: &str, after: u64) -> (Vec<Value>, u64) {
    let mut events = Vec::new();
    let mut path = format!("/v1/changes?after={after}{query}");
    loop {
        let page = json_with(server, key, &path);
        events.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/changes?cursor={cursor}{query}"),
            None => return (events, page["sequence"].as_u64().unwrap()),
        }
    }
}

fn problem(response: reqwest::blocking::Response, status: u16) -> Value {
    assert_eq!(response.status(), status);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    response.json().unwrap()
}

fn the_feed_follows_imports(server: &Server) {
    let (organization, key) = server.organization_with_key("feed", &["endpoints:read", "findings:read"]);
    // Nothing yet: an empty feed at sequence 0, and lists say so.
    let empty = json_with(server, &key, "/v1/changes");
    assert_eq!(empty, json!({"data": [], "next_cursor": null, "sequence": 0}));
    assert_eq!(json_with(server, &key, "/v1/endpoints")["sequence"], 0);

    let endpoints = import(server, &organization, "endpoints", &[endpoint("feed-a"), endpoint("feed-b")]);
    let lines: Vec<Value> =
        (0..7).map(|n| xz_finding(&endpoints[n % 2], ["critical", "low"][n % 2], &format!("f{n}"))).collect();
    let findings = import(server, &organization, "vulnerability-findings", &lines);
    let listed = json_with(server, &key, "/v1/vulnerability-findings?limit=1");
    let after_imports = listed["sequence"].as_u64().unwrap();

    // Every change, in commit order: the endpoints, then the findings and
    // the endpoints whose open counts they moved (updated, so moved last).
    let (events, sequence) = follow(server, &key, "&limit=3", 0);
    assert_eq!(sequence, after_imports);
    let sequences: Vec<u64> = events.iter().map(|event| event["sequence"].as_u64().unwrap()).collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "{sequences:?}");
    assert_eq!(*sequences.last().unwrap(), after_imports);
    let order: Vec<(&str, &str, &str)> = events
        .iter()
        .map(|event| {
            (event["collection"].as_str().unwrap(), event["id"].as_str().unwrap(), event["operation"].as_str().unwrap())
        })
        .collect();
    let mut expected: Vec<(&str, &str, &str)> =
        findings.iter().map(|id| ("vulnerability-findings", id.as_str(), "created")).collect();
    expected.extend(endpoints.iter().map(|id| ("endpoints", id.as_str(), "updated")));
    assert_eq!(order, expected, "one event per record: its latest change");
    // Each record as its item route shows it, members in the contract's order.
    for event in &events {
        let item = json_with(
            server,
            &key,
            &format!("/v1/{}/{}", event["collection"].as_str().unwrap(), event["id"].as_str().unwrap()),
        );
        assert_eq!(event["record"], item);
        let members: Vec<&str> = event.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(members, ["sequence", "collection", "id", "operation", "changed_at", "record"]);
        assert_eq!(event["changed_at"], item["updated_at"]);
    }

    // An update moves the record's one event past everything before it.
    let mut resolved = lines[3].clone();
    resolved["id"] = json!(findings[3]);
    resolved["status"] = json!("resolved");
    resolved["resolved_at"] = json!("2026-11-21T00:00:00Z");
    import(server, &organization, "vulnerability-findings", &[resolved]);
    let (newer, sequence) = follow(server, &key, "", after_imports);
    let newer_order: Vec<(&str, &str)> =
        newer.iter().map(|event| (event["id"].as_str().unwrap(), event["operation"].as_str().unwrap())).collect();
    assert_eq!(newer_order, [(findings[3].as_str(), "updated"), (endpoints[1].as_str(), "updated")]);
    assert_eq!(newer[0]["record"]["status"], "resolved");
    assert_eq!(follow(server, &key, "", 0).0.len(), events.len(), "still one event per record");
    // Polling from the answer's sequence: nothing new.
    assert_eq!(follow(server, &key, "", sequence).0, Vec::<Value>::new());

    // Filtered by collection; a key without a collection's scope sees none of it.
    let (only_endpoints, _) = follow(server, &key, "&collection=endpoints", 0);
    assert!(only_endpoints.iter().all(|event| event["collection"] == "endpoints"));
    assert_eq!(only_endpoints.len(), 2);
    let findings_key = {
        let response = server
            .admin(Method::POST, "/admin/v1/keys")
            .json(&json!({"organization_id": organization, "name": "findings only", "scopes": ["findings:read"]}))
            .send()
            .unwrap();
        assert_eq!(response.status(), 201);
        response.json::<Value>().unwrap()["api_key"].as_str().unwrap().to_owned()
    };
    let (seen, _) = follow(server, &findings_key, "", 0);
    assert_eq!(seen.len(), findings.len());
    assert!(seen.iter().all(|event| event["collection"] == "vulnerability-findings"));
    let refused = problem(get_with(server, &findings_key, "/v1/changes?collection=endpoints"), 403);
    assert!(refused["detail"].as_str().unwrap().contains("endpoints:read"), "{refused}");

    // Cursors: bound to the organization and the collections asked.
    let first = json_with(server, &key, "/v1/changes?limit=2");
    let cursor = first["next_cursor"].as_str().unwrap();
    let other_collections =
        problem(get_with(server, &key, &format!("/v1/changes?cursor={cursor}&collection=endpoints")), 400);
    assert_eq!(other_collections["invalid_params"][0]["name"], "cursor");
    let (_, other_key) = server.organization_with_key("other", &["endpoints:read", "findings:read"]);
    let replayed = problem(get_with(server, &other_key, &format!("/v1/changes?cursor={cursor}")), 400);
    assert_eq!(replayed["invalid_params"][0]["name"], "cursor");
    // Another organization's feed holds none of these.
    assert_eq!(json_with(server, &other_key, "/v1/changes")["data"], json!([]));

    // Parameters checked, each named.
    for (query, name) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("after=-1", "after"),
        ("after=x", "after"),
        ("collection=widgets", "collection"),
        ("collection=endpoints,", "collection"),
        ("colection=endpoints", "colection"),
        ("after=1&after=2", "after"),
    ] {
        let answer = problem(get_with(server, &key, &format!("/v1/changes?{query}")), 400);
        assert_eq!(answer["invalid_params"][0]["name"], name, "{query}: {answer}");
    }
    let both = problem(get_with(server, &key, &format!("/v1/changes?after=1&cursor={cursor}")), 400);
    assert_eq!(both["invalid_params"][0]["name"], "after");
    assert_eq!(problem(server.client.get(server.url("/v1/changes")).send().unwrap(), 401)["status"], 401);
    let (_, agent_key) = server.organization_with_key("agent only", &["agent:config:read"]);
    problem(get_with(server, &agent_key, "/v1/changes"), 403);
    // A page of 1000 is allowed; a conditional request is answered 304.
    let page = get_with(server, &key, "/v1/changes?limit=1000");
    let etag = page.headers()["etag"].clone();
    let again = server
        .client
        .get(server.url("/v1/changes?limit=1000"))
        .bearer_auth(&key)
        .header("if-none-match", etag)
        .send()
        .unwrap();
    assert_eq!(again.status(), 304);
}

#[test]
fn the_feed_follows_imports_on_sled() {
    the_feed_follows_imports(&Server::start(&plugins_dir()));
}

#[test]
fn the_feed_follows_imports_on_postgres() {
    let database = TestDatabase::new();
    the_feed_follows_imports(&Server::start_with(&plugins_dir(), &["--database", &database.url]));
}

#[test]
fn a_replaced_component_shapes_the_feed_too() {
    let redacted = test_plugins_dir().join("endpoints-redacted.wasm");
    let plugins = plugins_dir_with(&["endpoints.wasm"], &[("endpoints-redacted.wasm", &redacted)]);
    let server = Server::start(plugins.path());
    let (organization, key) = server.organization_with_key("redacted", &["endpoints:read"]);
    let with_ip = |hostname: &str| {
        let mut line = endpoint(hostname);
        line["ip"] = json!("10.1.2.3");
        line
    };
    let ids = import(&server, &organization, "endpoints", &[with_ip("shaped-a"), with_ip("shaped-b")]);
    let (events, _) = follow(&server, &key, "", 0);
    assert_eq!(events.len(), 2);
    for (event, id) in events.iter().zip(&ids) {
        let item = json_with(&server, &key, &format!("/v1/endpoints/{id}"));
        assert_eq!(event["record"], item, "the feed shows what the replaced component shows");
        assert_eq!(event["record"]["ip"], Value::Null, "the address is withheld: {event}");
    }
}

#[test]
fn histories_list_status_changes_and_old_cursors_are_gone_past_retention() {
    let server = Server::start_with(&plugins_dir(), &["--change-retention-days", "0"]);
    let (organization, key) = server.organization_with_key("history", &["endpoints:read", "findings:read"]);
    let endpoints = import(&server, &organization, "endpoints", &[endpoint("kept"), endpoint("deleted")]);
    let line = xz_finding(&endpoints[0], "high", "h1");
    let ids = import(&server, &organization, "vulnerability-findings", std::slice::from_ref(&line));
    let mut resolved = line.clone();
    resolved["id"] = json!(ids[0]);
    resolved["status"] = json!("resolved");
    resolved["resolved_at"] = json!("2026-11-21T00:00:00Z");
    import(&server, &organization, "vulnerability-findings", &[resolved]);
    let history = json_with(&server, &key, &format!("/v1/vulnerability-findings/{}/history", ids[0]));
    let statuses: Vec<&str> =
        history["data"].as_array().unwrap().iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["open", "resolved"]);
    assert_eq!(history["data"][1]["cause"]["kind"], "import");
    let finding_now = json_with(&server, &key, &format!("/v1/vulnerability-findings/{}", ids[0]));
    assert_eq!(history["data"][1]["at"], finding_now["updated_at"]);
    // Unknown, malformed, and a collection without history.
    problem(get_with(&server, &key, "/v1/vulnerability-findings/01900000-0000-7000-8000-000000000000/history"), 404);
    problem(get_with(&server, &key, "/v1/vulnerability-findings/nope/history"), 400);
    problem(get_with(&server, &key, &format!("/v1/endpoints/{}/history", endpoints[0])), 404);

    // A client at the list's sequence; then a deletion, pruned at once
    // (retention 0): its cursor is gone, and the answer says what to do.
    let sequence = json_with(&server, &key, "/v1/endpoints")["sequence"].as_u64().unwrap();
    let deleted = server
        .admin(Method::DELETE, &format!("/admin/v1/organizations/{organization}/endpoints/{}", endpoints[1]))
        .send()
        .unwrap();
    assert_eq!(deleted.status(), 204);
    common::wait_until(std::time::Duration::from_secs(60), "the deletion pruned", || {
        get_with(&server, &key, &format!("/v1/changes?after={sequence}")).status() == 410
    });
    let gone = problem(get_with(&server, &key, &format!("/v1/changes?after={sequence}")), 410);
    assert!(gone["detail"].as_str().unwrap().contains("list"), "{gone}");
    // Listing again and following from the new sequence works.
    let again = json_with(&server, &key, "/v1/endpoints")["sequence"].as_u64().unwrap();
    assert_eq!(json_with(&server, &key, &format!("/v1/changes?after={again}"))["data"], json!([]));
}
